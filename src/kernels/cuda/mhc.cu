// mHC on the GPU: the mixing weights come from an RMS-normalised flat view of the streams times
// fn (cuBLAS, fp32), then one block per token applies sigmoid / softmax + Sinkhorn and mixes.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kMaxHc = 8;

// out[e] = Σ_j w[j] * x[j, e] over the hc streams of one token, the block's threads striding e.
__device__ void weighted_stream_sum(const float* x, const float* w, int hc, int64_t d, float* out) {
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < hc; ++j) acc += w[j] * x[j * d + e];
        out[e] = acc;
    }
}

__global__ void rms_flat_kernel(const float* x, int64_t width, float eps, float* y) {
    const float* in = x + blockIdx.x * width;
    float ss = 0;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += in[c] * in[c];
    ss = block_sum(ss);
    float inv = rsqrtf(ss / width + eps);
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) y[blockIdx.x * width + c] = in[c] * inv;
}

// One block per token: pre / post / comb from the mixes, then the collapsed input (or, for the
// delayed mHC of V4.1, pre itself: collapsed == nullptr, pre_out != nullptr).
__global__ void hc_pre_kernel(const float* streams, const float* mixes, const float* base, const float* scale, int hc,
                              int64_t d, int iters, float hc_eps, float* collapsed, float* pre_out, float* post,
                              float* comb) {
    int64_t n = blockIdx.x;
    int width = (2 + hc) * hc;
    const float* m = mixes + n * width;
    __shared__ float pre[kMaxHc];
    __shared__ float c[kMaxHc * kMaxHc];
    if (threadIdx.x == 0) {
        for (int j = 0; j < hc; ++j) {
            pre[j] = sigmoidf(m[j] * scale[0] + base[j]) + hc_eps;
            post[n * hc + j] = 2.0f * sigmoidf(m[hc + j] * scale[1] + base[hc + j]);
        }
        for (int j = 0; j < hc; ++j) {  // softmax of each row
            float mx = -INFINITY, sum = 0;
            for (int k = 0; k < hc; ++k) mx = fmaxf(mx, m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k]);
            for (int k = 0; k < hc; ++k) sum += c[j * hc + k] = expf(m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k] - mx);
            for (int k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / sum + hc_eps;
        }
        for (int it = 0; it < iters; ++it) {  // columns, then (rows, columns) alternating
            if (it > 0)
                for (int j = 0; j < hc; ++j) {
                    float s = 0;
                    for (int k = 0; k < hc; ++k) s += c[j * hc + k];
                    for (int k = 0; k < hc; ++k) c[j * hc + k] /= s + hc_eps;
                }
            for (int k = 0; k < hc; ++k) {
                float s = 0;
                for (int j = 0; j < hc; ++j) s += c[j * hc + k];
                for (int j = 0; j < hc; ++j) c[j * hc + k] /= s + hc_eps;
            }
        }
        for (int j = 0; j < hc * hc; ++j) comb[n * hc * hc + j] = c[j];
    }
    __syncthreads();
    if (pre_out != nullptr && threadIdx.x < hc) pre_out[n * hc + threadIdx.x] = pre[threadIdx.x];
    if (collapsed != nullptr) weighted_stream_sum(streams + n * hc * d, pre, hc, d, collapsed + n * d);
}

__global__ void hc_post_kernel(float* streams, const float* y, const float* post, const float* comb, int hc, int64_t d) {
    int64_t n = blockIdx.x;
    float* x = streams + n * hc * d;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
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
    int64_t n = blockIdx.x;
    __shared__ float pre[kMaxHc];
    if (threadIdx.x < hc) pre[threadIdx.x] = sigmoidf(mixes[n * hc + threadIdx.x] * scale[0] + base[threadIdx.x]) + hc_eps;
    __syncthreads();
    weighted_stream_sum(streams + n * hc * d, pre, hc, d, out + n * d);
}

}  // namespace

void CudaBackend::hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                         Tensor& collapsed, Tensor& post, Tensor& comb) {
    mix_coefficients(streams, fn, base, scale, p, collapsed.data<float>(), nullptr, post, comb);
}

void CudaBackend::hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                         Tensor& pre, Tensor& post, Tensor& comb) {
    mix_coefficients(streams, fn, base, scale, p, nullptr, pre.data<float>(), post, comb);
}

void CudaBackend::mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                                   const MhcParams& p, float* collapsed, float* pre, Tensor& post, Tensor& comb) {
    int64_t n = streams.dim(0), d = streams.dim(2), width = (2 + p.hc) * p.hc;
    DI_CUDA_REQUIRE(p.hc <= kMaxHc, "hc_mult " + std::to_string(p.hc) + " is above " + std::to_string(kMaxHc));
    if (n == 0) return;
    Tensor flat = empty(DType::kF32, {n, p.hc * d}), mixes = empty(DType::kF32, {n, width});
    rms_flat_kernel<<<n, 256, 0, stream()>>>(streams.data<float>(), p.hc * d, p.norm_eps, flat.data<float>());
    gemm(flat.data<float>(), p.hc * d, fn, mixes.data<float>(), width, n);
    hc_pre_kernel<<<n, 128, 0, stream()>>>(streams.data<float>(), mixes.data<float>(), base.data<float>(), scale.data<float>(),
                                           p.hc, d, p.sinkhorn_iters, p.hc_eps, collapsed, pre, post.data<float>(),
                                           comb.data<float>());
}

void CudaBackend::hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    if (n == 0) return;
    hc_post_kernel<<<n, 256, 0, stream()>>>(streams.data<float>(), y.data<float>(), post.data<float>(), comb.data<float>(),
                                            static_cast<int>(hc), d);
}

void CudaBackend::hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                          Tensor& out) {
    int64_t n = streams.dim(0), d = streams.dim(2);
    if (n == 0) return;
    Tensor flat = empty(DType::kF32, {n, p.hc * d}), mixes = empty(DType::kF32, {n, static_cast<int64_t>(p.hc)});
    rms_flat_kernel<<<n, 256, 0, stream()>>>(streams.data<float>(), p.hc * d, p.norm_eps, flat.data<float>());
    gemm(flat.data<float>(), p.hc * d, fn, mixes.data<float>(), p.hc, n);
    hc_head_kernel<<<n, 128, 0, stream()>>>(streams.data<float>(), mixes.data<float>(), base.data<float>(), scale.data<float>(),
                                            p.hc, d, p.hc_eps, out.data<float>());
}

}  // namespace deepinfer::kernels::cuda
