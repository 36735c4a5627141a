// mHC on the GPU: the mixing weights come from an RMS-normalised flat view of the streams times
// fn (cuBLAS, fp32), then one block per token applies sigmoid / softmax + Sinkhorn and mixes.
#include "kernels/cuda/mhc_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

__global__ void hc_pre_kernel(HcPreArgs a, const float* mixes, int splits) {
    pdl_prologue();
    hc_pre_token(a, blockIdx.x, mixes, splits);
}

// hc_dots and hc_pre_token in one launch (decode: one kernel per mHC site): the last of a
// token's split blocks to finish finishes the token.
template <int W>
__global__ void __launch_bounds__(kDotsThreads) hc_dots_pre_kernel(HcPreArgs a, const float* fn, float* parts,
                                                                   int* arrivals) {
    pdl_prologue();
    hc_dots<W>(a.streams, fn, a.hc * a.d, parts);
    if (last_split_to_arrive(arrivals)) hc_pre_token(a, blockIdx.y, parts, gridDim.x);
}


// A site's stream update (hc_post) and the next site's hc_pre_norm in one launch, hc = 4: block
// (split, token) updates columns e of all four streams (a thread per column, post/comb the old
// site's) and adds their products with the next site's fn (a column's four flat positions); the
// last split block of the token then runs hc_pre_token, which overwrites post/comb.
template <int W>
__global__ void __launch_bounds__(kDotsThreads) hc_post_dots_pre_kernel(HcPreArgs a, float* streams, const float* y,
                                                                        const float* fn, float* parts, int* arrivals) {
    pdl_prologue();
    constexpr int hc = 4;
    int64_t n = blockIdx.y, d = a.d, e = blockIdx.x * int64_t{kDotsThreads} + threadIdx.x;
    float acc[W + 1] = {};
    if (e < d) {
        float* x = streams + n * hc * d;
        float old[hc], now[hc];
        for (int j = 0; j < hc; ++j) old[j] = x[j * d + e];
        update_column(x, d, e, y[n * d + e], a.post + n * hc, a.comb + n * hc * hc, old, now);
        for (int k = 0; k < hc; ++k) acc[W] += now[k] * now[k];
        for (int w = 0; w < W; ++w)
            for (int k = 0; k < hc; ++k) acc[w] += fn[w * hc * d + k * d + e] * now[k];
    }
    write_split_sums<W>(acc, parts + (n * gridDim.x + blockIdx.x) * (W + 1));
    if (last_split_to_arrive(arrivals)) hc_pre_token(a, n, parts, gridDim.x);
}

__global__ void hc_post_kernel(float* streams, const float* y, const float* post, const float* comb, int hc, int64_t d) {
    pdl_prologue();
    int64_t n = blockIdx.x;
    float* x = streams + n * hc * d;
    for (int64_t e = blockIdx.y * blockDim.x + threadIdx.x; e < d; e += gridDim.y * blockDim.x) {
        float old[kMaxHc];
        for (int j = 0; j < hc; ++j) old[j] = x[j * d + e];
        for (int k = 0; k < hc; ++k) {
            float acc = post[n * hc + k] * y[n * d + e];
            for (int j = 0; j < hc; ++j) acc += comb[(n * hc + j) * hc + k] * old[j];
            x[k * d + e] = acc;
        }
    }
}

__global__ void hc_head_kernel(const float* streams, const float* mixes, const float* base, const float* scale, int hc,
                               int64_t d, float hc_eps, float* out) {
    pdl_prologue();
    int64_t n = blockIdx.x;
    __shared__ float pre[kMaxHc];
    if (threadIdx.x < hc) pre[threadIdx.x] = sigmoidf(mixes[n * hc + threadIdx.x] * scale[0] + base[threadIdx.x]) + hc_eps;
    __syncthreads();
    weighted_stream_sum(streams + n * hc * d, pre, hc, d, out + n * d);
}

// Decode-sized hc_head in one launch (hc = W = 4): the split mix products, then the last split
// block of the token scales them by the flat RMS and collapses the streams.
template <int W>
__global__ void __launch_bounds__(kDotsThreads) hc_head_dots_kernel(const float* streams, const float* fn, int64_t d,
                                                                    float norm_eps, const float* base, const float* scale,
                                                                    float hc_eps, float* parts, int* arrivals, float* out) {
    pdl_prologue();
    hc_dots<W>(streams, fn, W * d, parts);
    if (!last_split_to_arrive(arrivals)) return;
    int64_t n = blockIdx.y;
    const float* part = parts + n * gridDim.x * (W + 1);
    __shared__ float pre[W];
    if (threadIdx.x < W) {
        float ss = 0, dot = 0;
        for (unsigned s = 0; s < gridDim.x; ++s) {
            ss += __ldcg(part + s * (W + 1) + W);
            dot += __ldcg(part + s * (W + 1) + threadIdx.x);
        }
        float m = dot * rsqrtf(ss / (W * d) + norm_eps);
        pre[threadIdx.x] = sigmoidf(m * scale[0] + base[threadIdx.x]) + hc_eps;
    }
    __syncthreads();
    weighted_stream_sum(streams + n * W * d, pre, W, d, out + n * d);
}

}  // namespace

MhcFamily::MhcFamily(CudaBackend& device) : dev_(device) {
    arrivals_ = dev_.zeros(DType::kI32, {2 * kMaxHcSplitTokens});
}

void MhcFamily::hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                       Tensor& collapsed, Tensor& post, Tensor& comb) {
    mix_coefficients(streams, fn, base, scale, p, collapsed.data<float>(), nullptr, post, comb);
}

void MhcFamily::hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                            const MhcParams& p, const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post,
                            Tensor& comb) {
    mix_coefficients(streams, fn, base, scale, p, collapsed.data<float>(), nullptr, post, comb,
                     {norm_weight.data<float>(), eps});
}

void MhcFamily::hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                       Tensor& pre, Tensor& post, Tensor& comb) {
    mix_coefficients(streams, fn, base, scale, p, nullptr, pre.data<float>(), post, comb);
}


void MhcFamily::mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                                 const MhcParams& p, float* collapsed, float* pre, Tensor& post, Tensor& comb,
                                 CollapseNorm norm) {
    int64_t n = streams.dim(0), d = streams.dim(2), width = (2 + p.hc) * p.hc;
    DI_CUDA_REQUIRE(p.hc * p.hc <= 32, "cuda mHC: hc_mult " + std::to_string(p.hc) + " is above 5 (one warp per Sinkhorn)");
    if (n == 0) return;
    HcPreArgs a{streams.data<float>(), p.norm_eps, base.data<float>(), scale.data<float>(), p.hc, d, p.sinkhorn_iters,
                p.hc_eps, collapsed, pre, post.data<float>(), comb.data<float>(), norm.weight, norm.eps};
    bool four = p.hc == 4 && streams.dim(1) == 4 && fn.dtype() == DType::kF32 && !dev_.invariant();
    if (four && launch_site(a, n, streams.data<float>(), nullptr, fn.data<float>())) return;
    if (four && n <= kMaxHcSplitTokens && (p.hc * d) % 4 == 0) {
        int splits = static_cast<int>((p.hc * d + kSplitCols - 1) / kSplitCols);
        Tensor parts = dev_.empty(DType::kF32, {n, splits, width + 1});
        launch_pdl(hc_dots_pre_kernel<24>, dim3(splits, n), kDotsThreads, 0, dev_.stream(), a, fn.data<float>(),
                   parts.data<float>(), arrivals_.data<int>());
        return;
    }
    // Beyond kMaxHcSplitTokens tokens one GEMM reads fn once for all of them.
    Tensor flat = dev_.empty(DType::kF32, {n, p.hc * d}), mixes = dev_.empty(DType::kF32, {n, width});
    launch_pdl(rms_flat_kernel, n, 256, 0, dev_.stream(), streams.data<float>(), p.hc * d, p.norm_eps, flat.data<float>());
    dev_.gemm(flat.data<float>(), p.hc * d, fn, mixes.data<float>(), width, n);
    launch_pdl(hc_pre_kernel, n, 512, 0, dev_.stream(), a, mixes.data<float>(), 0);
}

void MhcFamily::hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn,
                                 const Tensor& base, const Tensor& scale, const MhcParams& p, const Tensor& norm_weight,
                                 float eps, Tensor& collapsed) {
    int64_t n = streams.dim(0), d = streams.dim(2), width = (2 + p.hc) * p.hc;
    if (p.hc != 4 || streams.dim(1) != 4 || fn.dtype() != DType::kF32 || n > kMaxHcSplitTokens || dev_.invariant()) {
        dev_.hc_post(streams, y, post, comb);
        dev_.hc_pre_norm(streams, fn, base, scale, p, norm_weight, eps, collapsed, post, comb);
        return;
    }
    if (n == 0) return;
    HcPreArgs a{streams.data<float>(), p.norm_eps, base.data<float>(), scale.data<float>(), p.hc, d, p.sinkhorn_iters,
                p.hc_eps, collapsed.data<float>(), nullptr, post.data<float>(), comb.data<float>(),
                norm_weight.data<float>(), eps};
    if (launch_site(a, n, streams.data<float>(), y.data<float>(), fn.data<float>())) return;
    int splits = blocks_for(d, kDotsThreads);
    Tensor parts = dev_.empty(DType::kF32, {n, splits, width + 1});
    launch_pdl(hc_post_dots_pre_kernel<24>, dim3(splits, n), kDotsThreads, 0, dev_.stream(), a, streams.data<float>(),
               y.data<float>(), fn.data<float>(), parts.data<float>(), arrivals_.data<int>());
}

void MhcFamily::hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    if (n == 0) return;
    launch_pdl(hc_post_kernel, dim3(n, blocks_for(d, 256)), 256, 0, dev_.stream(), streams.data<float>(), y.data<float>(),
               post.data<float>(), comb.data<float>(), static_cast<int>(hc), d);
}

void MhcFamily::hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                        Tensor& out) {
    int64_t n = streams.dim(0), d = streams.dim(2);
    if (n == 0) return;
    if (p.hc == 4 && fn.dtype() == DType::kF32 && n <= kMaxHcSplitTokens && (p.hc * d) % 4 == 0 && !dev_.invariant()) {
        int splits = static_cast<int>((p.hc * d + kSplitCols - 1) / kSplitCols);
        Tensor parts = dev_.empty(DType::kF32, {n, splits, p.hc + 1});
        launch_pdl(hc_head_dots_kernel<4>, dim3(splits, n), kDotsThreads, 0, dev_.stream(), streams.data<float>(),
                   fn.data<float>(), d, p.norm_eps, base.data<float>(), scale.data<float>(), p.hc_eps,
                   parts.data<float>(), arrivals_.data<int>(), out.data<float>());
        return;
    }
    Tensor flat = dev_.empty(DType::kF32, {n, p.hc * d}), mixes = dev_.empty(DType::kF32, {n, static_cast<int64_t>(p.hc)});
    launch_pdl(rms_flat_kernel, n, 256, 0, dev_.stream(), streams.data<float>(), p.hc * d, p.norm_eps, flat.data<float>());
    dev_.gemm(flat.data<float>(), p.hc * d, fn, mixes.data<float>(), p.hc, n);
    launch_pdl(hc_head_kernel, n, 128, 0, dev_.stream(), streams.data<float>(), mixes.data<float>(), base.data<float>(),
               scale.data<float>(), p.hc, d, p.hc_eps, out.data<float>());
}

// The backend's ops: one each, timed and recorded as such.
void CudaBackend::hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                         Tensor& collapsed, Tensor& post, Tensor& comb) {
    DI_CUDA_OP("hc_pre");
    mhc_->hc_pre(streams, fn, base, scale, p, collapsed, post, comb);
}

void CudaBackend::hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                              const MhcParams& p, const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post,
                              Tensor& comb) {
    DI_CUDA_OP("hc_pre_norm");
    mhc_->hc_pre_norm(streams, fn, base, scale, p, norm_weight, eps, collapsed, post, comb);
}

void CudaBackend::hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                         Tensor& pre, Tensor& post, Tensor& comb) {
    DI_CUDA_OP("hc_mix");
    mhc_->hc_mix(streams, fn, base, scale, p, pre, post, comb);
}

void CudaBackend::hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn,
                                   const Tensor& base, const Tensor& scale, const MhcParams& p, const Tensor& norm_weight,
                                   float eps, Tensor& collapsed) {
    DI_CUDA_OP("hc_post_pre_norm");
    mhc_->hc_post_pre_norm(streams, y, post, comb, fn, base, scale, p, norm_weight, eps, collapsed);
}

void CudaBackend::hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) {
    DI_CUDA_OP("hc_post");
    mhc_->hc_post(streams, y, post, comb);
}

void CudaBackend::hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                          Tensor& out) {
    DI_CUDA_OP("hc_head");
    mhc_->hc_head(streams, fn, base, scale, p, out);
}

}  // namespace deepinfer::kernels::cuda
