// Routed experts of long steps (prefill) on tensor cores. The routing is on the host; the pairs'
// activations are gathered expert by expert into one buffer, already split into bf16 parts (the
// same hi/lo split as CudaBackend::gemm, so fp32 activations keep ~16 or ~24 bits); each of the
// three projections is one grouped GEMM call over all experts (a loop of GEMMs where cuBLAS has no
// grouped kernel for these types); joining the parts, SwiGLU and re-splitting are one kernel, and
// each token adds its experts' rows in expert order at the end. About ten launches per layer in
// place of ~15 per expert.
#include <vector>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

// One gathered row: its token, routing weight, and where its parts live: expert e's block of the
// part buffers holds parts x m_e rows, part p of local row i at base + p * m (base = parts * off_e + i).
struct RowInfo {
    int token;
    float weight;
    int base, m;
};

// Σ_p src[(base + p * m) * width + col], smallest part first (as join_parts_kernel adds them).
__device__ inline float join(const float* src, const RowInfo& r, int parts, int64_t width, int64_t col) {
    float v = 0;
    for (int p = parts - 1; p >= 0; --p) v += src[(r.base + static_cast<int64_t>(p) * r.m) * width + col];
    return v;
}

__global__ void gather_split_kernel(const float* x, const RowInfo* rows, int64_t d, int parts, __nv_bfloat16* xb) {
    pdl_prologue();
    RowInfo r = rows[blockIdx.x];
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
        store_parts(x[r.token * d + c], parts, xb + r.base * d + c, r.m * d);
}

__global__ void join_swiglu_split_kernel(const float* g, const float* u, const RowInfo* rows, int64_t inter, int parts,
                                         float limit, __nv_bfloat16* hb) {
    pdl_prologue();
    RowInfo r = rows[blockIdx.x];
    for (int64_t j = threadIdx.x; j < inter; j += blockDim.x) {
        float gv = fminf(join(g, r, parts, inter, j), limit);
        float uv = fminf(fmaxf(join(u, r, parts, inter, j), -limit), limit);
        store_parts(gv / (1.0f + expf(-gv)) * uv, parts, hb + r.base * inter + j, r.m * inter);
    }
}

__global__ void join_rows_kernel(const float* c, const RowInfo* rows, int64_t d, int parts, float* y) {
    pdl_prologue();
    RowInfo r = rows[blockIdx.x];
    for (int64_t col = threadIdx.x; col < d; col += blockDim.x) y[blockIdx.x * d + col] = r.weight * join(c, r, parts, d, col);
}

// out[t] += Σ_j y[token_rows[t, j]] (rows in expert order, -1 = none).
__global__ void combine_rows_kernel(const float* y, const int* token_rows, int per_token, int64_t d, float* out) {
    pdl_prologue();
    int64_t t = blockIdx.x;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float v = 0;
        for (int j = 0; j < per_token; ++j) {
            int r = token_rows[t * per_token + j];
            if (r >= 0) v += y[static_cast<int64_t>(r) * d + c];
        }
        out[t * d + c] += v;
    }
}

}  // namespace

void MoeFamily::expert_gemms(const std::vector<ExpertGemm>& list) {
    float one = 1.0f, zero = 0.0f;
    if (grouped_gemm_ok_ && !list.empty()) {
        int g = static_cast<int>(list.size());
        std::vector<cublasOperation_t> ta(g, CUBLAS_OP_T), tb(g, CUBLAS_OP_N);
        std::vector<int> m(g), n(g), k(g), sizes(g, 1);
        std::vector<float> alpha(g, one), beta(g, zero);
        std::vector<const void*> ptrs(3 * g);
        for (int i = 0; i < g; ++i) {
            m[i] = list[i].n_out, n[i] = list[i].rows, k[i] = list[i].k;
            ptrs[i] = list[i].w, ptrs[g + i] = list[i].b, ptrs[2 * g + i] = list[i].c;
        }
        Tensor dev = dev_.empty(DType::kU8, {static_cast<int64_t>(ptrs.size() * sizeof(void*))});
        dev_.copy_to_device(dev.raw(), ptrs.data(), ptrs.size() * sizeof(void*));
        auto* d = static_cast<const void**>(dev.raw());
        cublasStatus_t st = cublasGemmGroupedBatchedEx(dev_.cublas(), ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                                                       d, CUDA_R_16BF, k.data(), d + g, CUDA_R_16BF, k.data(), beta.data(),
                                                       const_cast<void**>(d + 2 * g), CUDA_R_32F, m.data(), g, sizes.data(),
                                                       CUBLAS_COMPUTE_32F);
        if (st == CUBLAS_STATUS_SUCCESS) return;
        DI_CUDA_REQUIRE(st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE,
                        "cuBLAS grouped GEMM failed with status " + std::to_string(static_cast<int>(st)));
        grouped_gemm_ok_ = false;  // this cuBLAS has no grouped kernel for these types: loop from now on
    }
    for (const ExpertGemm& e : list)
        DI_CUBLAS_CHECK(cublasGemmEx(dev_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, e.n_out, e.rows, e.k, &one, e.w, CUDA_R_16BF, e.k, e.b,
                                     CUDA_R_16BF, e.k, &zero, e.c, CUDA_R_32F, e.n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void MoeFamily::moe_experts_gemm(const Tensor& x, const ExpertTokens& by_expert, int top_k,
                                 std::span<const ExpertWeights> experts, float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), inter = experts[0].w1.dim(0);
    int parts = dev_.gemm_parts();
    const auto& tokens = by_expert.tokens;
    const auto& wts = by_expert.weights;
    // Rows grouped by expert (ascending), tokens ascending within.
    std::vector<RowInfo> rows;
    std::vector<int> token_rows(n * top_k, -1), filled(n, 0), offset(experts.size());
    for (size_t e = 0; e < experts.size(); ++e) {
        offset[e] = static_cast<int>(rows.size());
        int m = static_cast<int>(tokens[e].size());
        for (int i = 0; i < m; ++i) {
            int t = tokens[e][i];
            token_rows[t * top_k + filled[t]++] = static_cast<int>(rows.size());
            rows.push_back({t, wts[e][i], parts * offset[e] + i, m});
        }
    }
    int64_t total = static_cast<int64_t>(rows.size());
    Tensor meta = dev_.empty(DType::kU8, {static_cast<int64_t>(total * sizeof(RowInfo) + token_rows.size() * sizeof(int))});
    dev_.copy_to_device(meta.raw(), rows.data(), total * sizeof(RowInfo));
    auto* drows = static_cast<const RowInfo*>(meta.raw());
    auto* dtoken_rows = reinterpret_cast<int*>(static_cast<char*>(meta.raw()) + total * sizeof(RowInfo));
    dev_.copy_to_device(dtoken_rows, token_rows.data(), token_rows.size() * sizeof(int));

    Tensor xb = dev_.empty(DType::kBF16, {parts * total, d}), g = dev_.empty(DType::kF32, {parts * total, inter});
    Tensor u = dev_.empty(DType::kF32, {parts * total, inter}), hb = dev_.empty(DType::kBF16, {parts * total, inter});
    Tensor c = dev_.empty(DType::kF32, {parts * total, d}), y = dev_.empty(DType::kF32, {total, d});
    launch_pdl(gather_split_kernel, total, 256, 0, dev_.stream(), x.data<float>(), drows, d, parts,
               xb.data<__nv_bfloat16>());
    std::vector<ExpertGemm> up, gate, down;
    for (size_t e = 0; e < experts.size(); ++e) {
        int m = static_cast<int>(tokens[e].size()) * parts;
        if (m == 0) continue;
        int64_t at = static_cast<int64_t>(parts) * offset[e];
        gate.push_back({experts[e].w1.raw(), xb.data<__nv_bfloat16>() + at * d, g.data<float>() + at * inter,
                        static_cast<int>(inter), m, static_cast<int>(d)});
        up.push_back({experts[e].w3.raw(), xb.data<__nv_bfloat16>() + at * d, u.data<float>() + at * inter,
                      static_cast<int>(inter), m, static_cast<int>(d)});
        down.push_back({experts[e].w2.raw(), hb.data<__nv_bfloat16>() + at * inter, c.data<float>() + at * d,
                        static_cast<int>(d), m, static_cast<int>(inter)});
    }
    expert_gemms(gate);
    expert_gemms(up);
    launch_pdl(join_swiglu_split_kernel, total, 256, 0, dev_.stream(), g.data<float>(), u.data<float>(), drows, inter, parts,
               limit, hb.data<__nv_bfloat16>());
    expert_gemms(down);
    launch_pdl(join_rows_kernel, total, 256, 0, dev_.stream(), c.data<float>(), drows, d, parts, y.data<float>());
    launch_pdl(combine_rows_kernel, n, 256, 0, dev_.stream(), y.data<float>(), dtoken_rows, top_k, d, out.data<float>());
}

}  // namespace deepinfer::kernels::cuda
