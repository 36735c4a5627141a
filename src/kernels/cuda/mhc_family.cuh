#pragma once
// The CUDA backend's mHC family: the ops hc_pre, hc_pre_norm, hc_mix, hc_post, hc_post_pre_norm
// and hc_head, the choice among their kernels (mhc.cu) and their state. Steps of up to
// kMaxHcSplitTokens tokens compute a site's mixes split over blocks in one launch (one site
// kernel exchanging partial sums when its grid fits on the GPU at once, else a last-block
// kernel); longer steps and deterministic mode read fn once for all tokens as a GEMM.
#include <cstdint>

#include "kernels/backend.h"

namespace deepinfer::kernels::cuda {

class CudaBackend;
struct HcPreArgs;  // mhc.cu

// The RMSNorm hc_pre_norm folds into the collapse (weight null: none).
struct CollapseNorm {
    const float* weight = nullptr;
    float eps = 0.0f;
};

class MhcFamily {
public:
    // Steps of up to this many tokens compute the mixes split over blocks, in one launch.
    static constexpr int64_t kMaxHcSplitTokens = 64;

    // `device` gives the stream, memory, knobs, gemm and the hc_post / hc_pre_norm ops.
    explicit MhcFamily(CudaBackend& device);

    void hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& collapsed, Tensor& post, Tensor& comb);
    void hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                     const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post, Tensor& comb);
    void hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& pre, Tensor& post, Tensor& comb);
    void hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn, const Tensor& base,
                          const Tensor& scale, const MhcParams& p, const Tensor& norm_weight, float eps, Tensor& collapsed);
    void hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb);
    void hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                 Tensor& out);

private:
    // hc_pre / hc_mix / hc_pre_norm: collapsed (or pre) + post + comb; with a norm weight the
    // collapsed rows are RMS-normalised and weighted in the same kernel.
    void mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                          const MhcParams& p, float* collapsed, float* pre, Tensor& post, Tensor& comb,
                          CollapseNorm norm = {});
    // One site's launch over split blocks with a barrier, when the grid fits on the GPU at once;
    // y non-null also applies the previous site's stream update first.
    bool launch_site(const HcPreArgs& a, int64_t n, float* streams, const float* y, const float* fn);

    CudaBackend& dev_;
    Tensor arrivals_;         // [2, kMaxHcSplitTokens] int32 split-block counters per token, zero between launches
    Tensor site_words_;       // the site kernel's tagged partial sums, allocated at first use
    unsigned site_tag_ = 0;   // the last site launch's tag
};

}  // namespace deepinfer::kernels::cuda
