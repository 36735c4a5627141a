#include "model/archs/delayed_mhc.h"

namespace deepinfer::model {

void enter_delayed_site(kernels::Backend& backend, const DeepseekV4Config& c, const MhcWeights& site, const Tensor& norm,
                        const Tensor& streams, Tensor& pending_pre, Tensor& x, Tensor& post, Tensor& comb) {
    kernels::MhcParams mp{c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps, c.rms_norm_eps};
    Tensor site_pre = backend.empty(DType::kF32, {streams.dim(0), static_cast<int64_t>(c.hc_mult)});
    backend.hc_mix(streams, site.fn, site.base, site.scale, mp, site_pre, post, comb);
    backend.hc_collapse(streams, pending_pre, x);
    pending_pre = site_pre;
    backend.rms_norm(x, &norm, c.rms_norm_eps, x);
}

}  // namespace deepinfer::model
