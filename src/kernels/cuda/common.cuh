#pragma once
// Shared CUDA helpers: error checks and small device functions.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

// nvcc cannot compile fmt's compile-time format checks, so CUDA sources report errors through
// raise() (cuda_errors.cc, plain C++), which throws deepinfer::Error.
namespace deepinfer::kernels::cuda {
[[noreturn]] void raise(const std::string& message);
}

#define DI_CUDA_REQUIRE(cond, message)                                     \
    do {                                                                   \
        if (!(cond)) ::deepinfer::kernels::cuda::raise(message);           \
    } while (0)

#define DI_CUDA_CHECK(expr)                                                                                          \
    do {                                                                                                             \
        cudaError_t err__ = (expr);                                                                                  \
        if (err__ != cudaSuccess)                                                                                    \
            ::deepinfer::kernels::cuda::raise(std::string("CUDA error at ") + __FILE__ + ":" + std::to_string(__LINE__) + \
                                              ": " + cudaGetErrorString(err__));                                     \
    } while (0)

#define DI_CUBLAS_CHECK(expr)                                                                                        \
    do {                                                                                                             \
        cublasStatus_t st__ = (expr);                                                                                \
        if (st__ != CUBLAS_STATUS_SUCCESS)                                                                           \
            ::deepinfer::kernels::cuda::raise(std::string("cuBLAS error ") + std::to_string(static_cast<int>(st__)) +  \
                                              " at " + __FILE__ + ":" + std::to_string(__LINE__));                   \
    } while (0)

namespace deepinfer::kernels::cuda {

inline int blocks_for(int64_t n, int threads) { return static_cast<int>((n + threads - 1) / threads); }

// Strides of a row a thread holds in registers in the row kernels (norms, embedding, copies of
// rows): their loads all go out before the first use, so a lone decode row waits about one
// memory latency instead of one per stride.
constexpr int kRowRegs = 16;

// Programmatic dependent launch. Every kernel of this backend starts with pdl_prologue() and is
// launched with launch_pdl(): the next kernel on the stream may then be scheduled as soon as all
// blocks of this one have started, instead of after it drains, hiding the launch gap that
// dominates a decode step's small kernels. The wait keeps the data dependency: it returns only
// once the preceding grid has finished and its writes are visible. (Launched without the
// attribute, both instructions do nothing.)
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_prologue() {
    pdl_launch_dependents();
    pdl_wait();
}

// Asks the memory system to bring `bytes` (a multiple of 16, 16-byte aligned) into L2 without
// waiting. A weight-streaming kernel issues it for its first weights before pdl_wait(): weights do
// not depend on the preceding kernel, so they load while that kernel still runs.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// Whether this block is the last of `blocks` blocks to count on `counter`; that block resets the
// count, ready for the next launch. Each block's writes are visible to the last one before it counts.
__device__ inline bool last_to_arrive(int* counter, unsigned blocks) {
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1) == static_cast<int>(blocks) - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;  // nothing to run (as a <<<>>> launch that fails quietly)
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduction over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
struct WarpSum {
    __device__ float operator()(float v) const { return warp_sum(v); }
};
struct WarpMax {
    __device__ float operator()(float v) const { return warp_max(v); }
};

template <typename WarpOp>
__device__ inline float block_reduce(float v, float identity, WarpOp op = {}) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = op(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    int warps = blockDim.x / 32;
    v = lane < warps ? partial[lane] : identity;
    return op(v);
}

__device__ inline float block_sum(float v) { return block_reduce<WarpSum>(v, 0.0f); }
__device__ inline float block_max(float v) { return block_reduce<WarpMax>(v, -INFINITY); }

__device__ inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Block-wide argmax over per-thread candidates (v, idx), ties to the lower index, idx < 0 = none;
// every thread gets the winner's index (-1 when no thread had one).
__device__ inline int block_argmax(float v, int idx) {
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oi >= 0 && (idx < 0 || ov > v || (ov == v && oi < idx))) v = ov, idx = oi;
    }
    if (threadIdx.x % 32 == 0) best_v[threadIdx.x / 32] = v, best_i[threadIdx.x / 32] = idx;
    __syncthreads();
    float bv = -INFINITY;
    int bi = -1;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w)
        if (best_i[w] >= 0 && (bi < 0 || best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi))) bv = best_v[w], bi = best_i[w];
    __syncthreads();  // the shared slots are reused by the next call
    return bi;
}

// Interleaved rope on the trailing `rope_dim` values of `x` (length cols), by thread-strided pairs.
__device__ inline void rope_pairs(float* x, int cols, long long pos, const float* inv_freq, int rope_dim, float scale,
                                  bool inverse, int tid, int nthreads) {
    float* r = x + cols - rope_dim;
    for (int i = tid; i < rope_dim / 2; i += nthreads) {
        float angle = static_cast<float>(pos) * inv_freq[i];
        float sn, cs;
        sincosf(angle, &sn, &cs);  // full range reduction (no fast math): within an ulp for any position
        float c = cs * scale, s = sn * scale;
        if (inverse) s = -s;
        float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c - b * s;
        r[2 * i + 1] = b * c + a * s;
    }
}

}  // namespace deepinfer::kernels::cuda

namespace deepinfer::kernels::cuda {

// Eight bf16 weights (one 16-byte load) times eight fp32 activations, accumulated in fp32.
__device__ inline float dot8(uint4 w, float4 a, float4 b) {
    float2 w0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
    float2 w1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
    float2 w2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.z));
    float2 w3 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.w));
    return w0.x * a.x + w0.y * a.y + w1.x * a.z + w1.y * a.w + w2.x * b.x + w2.y * b.y + w3.x * b.z + w3.y * b.w;
}

// Row e of a paged pool ([blocks, block, dim]) whose blocks are listed in `table`.
__device__ inline const float* paged_row(const float* pool, const int* table, int block, long long e, int dim) {
    return pool + (static_cast<long long>(table[e / block]) * block + e % block) * dim;
}

// A weight load that should not displace activations from L1 (weights are read once per step).
__device__ inline uint4 load_weights(const __nv_bfloat16* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }

// c (a 16 x 8 fp32 tile) += a (16 x 16 bf16, row-major) · b (16 x 8 bf16, column-major) on tensor
// cores, in mma.m16n8k16's register layout.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ldmatrix (8 x 8 bf16 matrices from shared memory, in the mma register layout) and its helpers.
__device__ __forceinline__ uint32_t smem_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(p)));
}

// Four fp32 values as bf16 (nearest even) at dst (8-byte aligned).
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* dst, float4 v) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 packed = {*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
    *reinterpret_cast<uint2*>(dst) = packed;
}

// v as `parts` bf16 parts (each the rounding of what the parts before left), part p at
// dst[p * part_stride]: fp32 activations keep ~8, ~16 or ~24 bits on bf16 tensor cores.
__device__ inline void store_parts(float v, int parts, __nv_bfloat16* dst, int64_t part_stride) {
    for (int p = 0; p < parts; ++p) {
        __nv_bfloat16 h = __float2bfloat16(v);
        dst[p * part_stride] = h;
        v -= __bfloat162float(h);
    }
}

}  // namespace deepinfer::kernels::cuda
