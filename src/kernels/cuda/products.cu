// The CUDA backend's products: matmul, matmul_many and grouped_matmul, and gemm, which every op
// family's products go through. Decode-sized steps take the GEMV kernels (gemv.cu), deterministic
// mode det_gemm.cu, other steps cuBLAS on the activations' bf16 parts (one part in the fast
// precision, two or three in exact), with fp32 accumulation.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

// x [m, k] (row stride lda) as `parts` bf16 rows per row: part 0 = bf16(x) in rows [0, m), each
// next part the bf16 of what the previous ones miss. Two parts carry ~16 mantissa bits of x,
// three ~24 (fp32's), so bf16 weights multiply fp32 activations at that accuracy with one bf16
// GEMM of parts * m rows (the weights are read once, which is what decode pays for).
__global__ void split_bf16_kernel(const float* x, int64_t lda, __nv_bfloat16* y, int64_t m, int64_t k, int parts) {
    pdl_prologue();
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= m * k) return;
    int64_t r = i / k, c = i % k;
    store_parts(x[r * lda + c], parts, y + i, m * k);
}

// y[r, j] (row stride ldy) (+)= Σ_p partial[p * m + r, j], smallest part first.
__global__ void join_parts_kernel(const float* partial, int64_t m, int64_t n, int parts, float* y, int64_t ldy,
                                  bool accumulate) {
    pdl_prologue();
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= m * n) return;
    int64_t r = i / n, c = i % n;
    float v = 0.0f;
    for (int p = parts - 1; p >= 0; --p) v += partial[p * m * n + i];
    y[r * ldy + c] = accumulate ? y[r * ldy + c] + v : v;
}

}  // namespace

void CudaBackend::gemm(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate) {
    int64_t n = w.dim(0), k = w.dim(-1);
    if (m == 0 || n == 0) return;
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (invariant() && w.dtype() == DType::kF32) {
        det_gemm_f32(x, lda, w, y, ldy, m, accumulate);
        return;
    }
    if (w.dtype() == DType::kFp8) {  // kept as stored: read directly by small steps, else widened for the GEMMs
        if (!invariant() && fp8_gemv(x, lda, w, y, ldy, m, accumulate)) return;
        gemm(x, lda, widen_fp8(w), y, ldy, m, accumulate);
        return;
    }
    if (w.dtype() == DType::kF32) {  // column-major view: Yᵀ (n x m) = W (n x k) · Xᵀ (k x m)
        DI_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.data<float>(), k, x, lda, &beta, y, ldy));
        return;
    }
    DI_CUDA_REQUIRE(w.dtype() == DType::kBF16, std::string("cuda gemm: unsupported weight dtype ") + dtype_name(w.dtype()));
    int64_t s = gemm_parts();
    if (invariant()) {
        Tensor xb = split_parts(x, lda, m, k);
        launch_det_gemm({xb.data<__nv_bfloat16>(), k, m * k, gemm_parts(), m, w.data<__nv_bfloat16>(), n, k, y, ldy, accumulate});
        return;
    }
    GemvProduct one{x, &w, y, ldy};
    if (gemv({&one, 1}, lda, m, accumulate)) return;
    Tensor xb = split_parts(x, lda, m, k);
    float zero = 0.0f;
    if (s == 1) {  // activations rounded to bf16 (the fast precision): one product straight into y
        DI_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.raw(), CUDA_R_16BF, k, xb.raw(),
                                     CUDA_R_16BF, k, &beta, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    Tensor partial = empty(DType::kF32, {s * m, n});
    DI_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, s * m, k, &alpha, w.raw(), CUDA_R_16BF, k, xb.raw(),
                                 CUDA_R_16BF, k, &zero, partial.raw(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    launch_pdl(join_parts_kernel, blocks_for(m * n, 256), 256, 0, stream_, partial.data<float>(), m, n, gemm_parts(), y,
               ldy, accumulate);
}

bool CudaBackend::all_bf16_weights(std::span<const MatmulTarget> targets) {
    for (const auto& t : targets)
        if (t.w->dtype() != DType::kBF16) return false;
    return true;
}

Tensor CudaBackend::split_parts(const float* x, int64_t lda, int64_t m, int64_t k) {
    Tensor xb = empty(DType::kBF16, {gemm_parts() * m, k});
    launch_pdl(split_bf16_kernel, blocks_for(m * k, 256), 256, 0, stream_, x, lda, xb.data<__nv_bfloat16>(), m, k,
               gemm_parts());
    return xb;
}

void CudaBackend::matmul(const Tensor& x, const Tensor& w, Tensor& y) {
    DI_CUDA_OP("matmul");
    int64_t k = w.dim(-1), m = x.numel() / k;
    DI_CUDA_REQUIRE(x.numel() == m * k && y.numel() == m * w.dim(0),
                    "matmul: x " + x.shape_string() + " · w " + w.shape_string() + " -> y " + y.shape_string() + " disagree");
    gemm(x.data<float>(), k, w, y.data<float>(), w.dim(0), m);
}

void CudaBackend::matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) {
    DI_CUDA_OP("matmul_many");
    if (targets.empty()) return;
    int64_t k = targets[0].w->dim(-1), m = x.numel() / k;
    std::vector<GemvProduct> products;
    for (const auto& t : targets) products.push_back({x.data<float>(), t.w, t.y->data<float>(), t.w->dim(0)});
    bool shapes_agree = true;
    for (const auto& t : targets) shapes_agree &= t.w->dim(-1) == k && t.y->numel() == m * t.w->dim(0);
    if (invariant() && shapes_agree && m > 0 && x.numel() == m * k && all_bf16_weights(targets)) {  // x split once
        Tensor xb = split_parts(x.data<float>(), k, m, k);
        for (const auto& t : targets)
            launch_det_gemm({xb.data<__nv_bfloat16>(), k, m * k, gemm_parts(), m, t.w->data<__nv_bfloat16>(), t.w->dim(0), k,
                             t.y->data<float>(), t.w->dim(0)});
        return;
    }
    if (m == 0 || (!invariant() && shapes_agree && x.numel() == m * k && gemv(products, k, m, false))) return;
    for (const auto& t : targets) matmul(x, *t.w, *t.y);
}

void CudaBackend::grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) {
    DI_CUDA_OP("grouped_matmul");
    int64_t k = w.dim(-1), rows = w.dim(0) / groups, m = x.numel() / (groups * k);
    if (m == 0) return;
    std::vector<Tensor> blocks;
    for (int g = 0; g < groups; ++g) blocks.push_back(w.rows(g * rows, (g + 1) * rows));
    std::vector<GemvProduct> products;
    for (int g = 0; g < groups; ++g) products.push_back({x.data<float>() + g * k, &blocks[g], y.data<float>() + g * rows, groups * rows});
    if (invariant() && w.dtype() == DType::kBF16) {  // x split once; group g's columns start at g * k; one launch
        Tensor xb = split_parts(x.data<float>(), groups * k, m, groups * k);
        DetProduct p{xb.data<__nv_bfloat16>(), groups * k, m * groups * k, gemm_parts(), m, w.data<__nv_bfloat16>(), rows, k,
                     y.data<float>(), groups * rows};
        p.products = groups, p.z_a = k, p.z_w = rows * k, p.z_c = rows;
        launch_det_gemm(p);
        return;
    }
    if (!invariant() && gemv(products, groups * k, m, false)) return;
    for (int g = 0; g < groups; ++g)
        gemm(x.data<float>() + g * k, groups * k, blocks[g], y.data<float>() + g * rows, groups * rows, m);
}

}  // namespace deepinfer::kernels::cuda
