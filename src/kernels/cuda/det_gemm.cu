// Batch-invariant products for deterministic mode (CudaBackend::set_batch_invariant). A row's
// result must not depend on how many rows run with it, where it sits in the batch, or whether it
// is computed in prefill or decode, so one kernel serves every row count and its order of
// additions for an output element is fixed by k alone:
// - bf16 weights: tensor cores (mma m16n8k16, fp32 accumulation) on the activations' bf16 parts.
//   A block's kGroups warps take k in slices of 32, interleaved (warp w: slices w, w + kGroups,
//   ...); each warp chains its slices in order (within a slice the parts in order, two mma each),
//   and the warps' sums are added in warp order. Eight warps keep each warp's chain short, which
//   is what a decode row waits for. Tile sizes along m and n change with the row
//   count (more blocks for decode, reuse for prefill) but never the chain.
// - Each lane loads 8 consecutive k of a row (16 bytes) and feeds them to mma k-slots
//   {2t, 2t+1, 2t+8, 2t+9} of two instructions; activations and weights use the same slot map, so
//   each instruction still sums the same k's products.
// - fp32 weights (small matrices: mHC mixes, fixtures): CUDA cores, threads split k in runs of
//   4, lanes added by butterfly and warps in order, whatever the tile.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kGroups = 8;  // warps per block = k interleave; part of the order, never changes
constexpr int kSlice = 32;  // k per warp load: 8 per lane, 4 lanes per row
constexpr int kThreads = 32 * kGroups;

// A product over rows of bf16 parts. Dense: rows 0..m-1 of a, block y taking m tile y. Grouped
// (MoE): group e's logical rows are order[offsets[e]] ... order[offsets[e + 1] - 1]; logical row
// i reads a row order[..] / row_div and writes c row order[..], with the weights of experts[e];
// block y takes tiles[y] = (e, first row) of the *tile_count tiles (det_tiles_kernel).
struct DetArgs {
    const __nv_bfloat16* a;
    int64_t lda, part_stride;
    int parts;
    int64_t m;
    const int* order;
    const int* offsets;
    int row_div;
    const ExpertRows* experts;
    int which;  // 0: w1, 1: w3, 2: w2
    const int2* tiles;
    const int* tile_count;
    int64_t z_a, z_w, z_c;  // dense products side by side (grid z): a, w and c offsets per product
    const __nv_bfloat16* w;
    int64_t n, k;
    float* c;
    int64_t ldc;
    bool accumulate, vec;
};

// The m tiles of a grouped product, group by group (one thread: a few hundred groups).
__global__ void det_tiles_kernel(const int* offsets, int groups, int mt, int2* tiles, int* tile_count) {
    pdl_prologue();
    if (threadIdx.x != 0) return;
    int count = 0;
    for (int e = 0; e < groups; ++e)
        for (int m0 = 0; m0 < offsets[e + 1] - offsets[e]; m0 += mt) tiles[count++] = make_int2(e, m0);
    *tile_count = count;
}

__device__ __forceinline__ uint4 load8(const __nv_bfloat16* row, int64_t k0, int64_t k, bool vec) {
    if (vec && k0 + 8 <= k) return __ldg(reinterpret_cast<const uint4*>(row + k0));
    uint32_t v[4] = {};
    const auto* bits = reinterpret_cast<const unsigned short*>(row);
    for (int j = 0; j < 8; ++j)
        if (k0 + j < k) v[j / 2] |= static_cast<uint32_t>(bits[k0 + j]) << (16 * (j % 2));
    return make_uint4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ const __nv_bfloat16* weights_of(const DetArgs& a, int group) {
    if (a.experts == nullptr) return a.w;
    const ExpertRows& e = a.experts[group];
    return a.which == 0 ? e.w1 : a.which == 1 ? e.w3 : e.w2;
}

// One m tile x n tile of a group: the warp's chain over its k slices into acc. The weights and
// activations of U slices are loaded before their products (a decode row waits on the loads, not
// on the tensor cores); the chain's order is the same for every U. P: activation parts; H: halves
// of each 16-row tile that can hold rows (1 when at most 8 rows: fewer registers, more blocks).
template <int MW, int NW, int U, int P, int H>
__device__ __forceinline__ void tile_chain(const DetArgs& a, const __nv_bfloat16* (&arow)[MW][2], const bool (&aok)[MW][2],
                                           const __nv_bfloat16* (&wrow)[NW], const bool (&wok)[NW], float (&acc)[MW][NW][4]) {
    constexpr int64_t kStride = kGroups * kSlice;
    int warp = threadIdx.x / 32, t = threadIdx.x % 4;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int64_t s = static_cast<int64_t>(warp) * kSlice; s < a.k; s += U * kStride) {
        uint4 b[U][NW], av[U][P][MW][H];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int64_t k0 = s + u * kStride + 8 * t;
            bool in = k0 < a.k;
            for (int ni = 0; ni < NW; ++ni) b[u][ni] = wok[ni] && in ? load8(wrow[ni], k0, a.k, a.vec) : zero;
#pragma unroll
            for (int p = 0; p < P; ++p)
                for (int mi = 0; mi < MW; ++mi)
                    for (int h = 0; h < H; ++h)
                        av[u][p][mi][h] = aok[mi][h] && in
                                              ? load8(arow[mi][h] + p * a.part_stride, k0, a.k, a.vec)
                                              : zero;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (s + u * kStride >= a.k) break;  // the same for the whole warp
#pragma unroll
            for (int p = 0; p < P; ++p) {
                for (int mi = 0; mi < MW; ++mi)
                    for (int ni = 0; ni < NW; ++ni) {
                        const uint4& x0 = av[u][p][mi][0];
                        const uint4 x1 = H == 2 ? av[u][p][mi][H - 1] : zero;
                        const uint4& w = b[u][ni];
                        mma_bf16(acc[mi][ni], x0.x, x1.x, x0.y, x1.y, w.x, w.y);
                        mma_bf16(acc[mi][ni], x0.z, x1.z, x0.w, x1.w, w.z, w.w);
                    }
            }
        }
    }
}

template <int MW, int NW, int U, int P, int H>
__global__ void __launch_bounds__(kThreads) det_gemm_kernel(DetArgs a) {
    pdl_prologue();
    static_assert(H == 2 || MW == 1, "half tiles of one 16-row block only");
    constexpr int MT = 8 * H * MW, NT = 8 * NW;  // H = 1: rows 8-15 of the mma tile are zeros
    __shared__ float red[MT * NT];
    int group = 0, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int64_t begin = 0, count = a.m, m0 = static_cast<int64_t>(blockIdx.y) * MT;
    if (a.offsets != nullptr) {
        if (static_cast<int>(blockIdx.y) >= *a.tile_count) return;
        int2 tile = a.tiles[blockIdx.y];
        group = tile.x, m0 = tile.y;
        begin = a.offsets[group], count = a.offsets[group + 1] - begin;
    }
    const __nv_bfloat16* w = weights_of(a, group);
    if (a.offsets == nullptr) {  // dense: product z of the launch
        a.a += blockIdx.z * a.z_a, w += blockIdx.z * a.z_w, a.c += blockIdx.z * a.z_c;
    }
    int64_t n0 = static_cast<int64_t>(blockIdx.x) * NT;
    const __nv_bfloat16* wrow[NW];
    bool wok[NW];
    for (int ni = 0; ni < NW; ++ni) {
        int64_t n = n0 + 8 * ni + g;
        wok[ni] = n < a.n;
        wrow[ni] = w + min(n, a.n - 1) * a.k;
    }
    const __nv_bfloat16* arow[MW][2];
    bool aok[MW][2];
    for (int mi = 0; mi < MW; ++mi)
        for (int h = 0; h < 2; ++h) {
            int64_t i = m0 + 16 * mi + 8 * h + g;
            aok[mi][h] = h < H && i < count;
            int64_t r = aok[mi][h] ? (a.order ? a.order[begin + i] / a.row_div : i) : 0;
            arow[mi][h] = a.a + r * a.lda;
        }
    float acc[MW][NW][4] = {};
    tile_chain<MW, NW, U, P, H>(a, arow, aok, wrow, wok, acc);
    // The warps' sums, added in warp order into one tile.
    for (int q = 0; q < kGroups; ++q) {
        if (warp == q)
            for (int mi = 0; mi < MW; ++mi)
                for (int ni = 0; ni < NW; ++ni)
                    for (int c = 0; c < 2 * H; ++c) {
                        float& r = red[(16 * mi + g + 8 * (c / 2)) * NT + 8 * ni + 2 * t + c % 2];
                        r = q == 0 ? acc[mi][ni][c] : r + acc[mi][ni][c];
                    }
        __syncthreads();
    }
    for (int e = threadIdx.x; e < MT * NT; e += kThreads) {
        int64_t i = m0 + e / NT, n = n0 + e % NT;
        if (i >= count || n >= a.n) continue;
        float v = red[e];
        float* out = a.c + (a.order ? a.order[begin + i] : i) * a.ldc + n;
        *out = a.accumulate ? *out + v : v;
    }
}

// fp32 weights: y[i, r] over R weight rows and MR rows of x per block; thread j adds k in runs
// of 4 (j*4 + 1024 s ...), then lanes by butterfly, then warps in order.
constexpr int kF32Threads = 512;  // threads per k: short chains for one row

template <int R, int MR>
__global__ void __launch_bounds__(kF32Threads) det_gemm_f32_kernel(const float* x, int64_t lda, const float* w, int64_t n,
                                                                   int64_t k, float* y, int64_t ldy, int64_t m,
                                                                   bool accumulate, bool vec) {
    pdl_prologue();
    int64_t r0 = static_cast<int64_t>(blockIdx.x) * R, m0 = static_cast<int64_t>(blockIdx.y) * MR;
    float acc[R][MR] = {};
#pragma unroll 4
    for (int64_t c = threadIdx.x * 4; c < k; c += kF32Threads * 4) {
        float wv[R][4], xv[MR][4];
        auto load4 = [&](const float* p, float (&v)[4]) {
            if (vec && c + 4 <= k) {
                float4 f = *reinterpret_cast<const float4*>(p + c);
                v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
            } else {
                for (int j = 0; j < 4; ++j) v[j] = c + j < k ? p[c + j] : 0.0f;
            }
        };
        for (int r = 0; r < R; ++r) load4(w + min(r0 + r, n - 1) * k, wv[r]);
        for (int t = 0; t < MR; ++t) load4(x + min(m0 + t, m - 1) * lda, xv[t]);
        for (int r = 0; r < R; ++r)
            for (int t = 0; t < MR; ++t)
                for (int j = 0; j < 4; ++j) acc[r][t] = fmaf(wv[r][j], xv[t][j], acc[r][t]);
    }
    __shared__ float part[kF32Threads / 32][R * MR];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < MR; ++t) {
            float v = warp_sum(acc[r][t]);
            if (lane == 0) part[warp][r * MR + t] = v;
        }
    __syncthreads();
    if (threadIdx.x >= R * MR) return;
    int r = threadIdx.x / MR, t = threadIdx.x % MR;
    if (r0 + r >= n || m0 + t >= m) return;
    float v = part[0][threadIdx.x];
    for (int i = 1; i < kF32Threads / 32; ++i) v += part[i][threadIdx.x];
    float* out = y + (m0 + t) * ldy + r0 + r;
    *out = accumulate ? *out + v : v;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void CudaBackend::launch_det_gemm(const DetProduct& p) {
    DetArgs a{p.a, p.lda, p.part_stride, p.parts, p.m, p.order, p.offsets, p.row_div, p.experts, p.which, nullptr, nullptr,
              p.z_a, p.z_w, p.z_c, p.w, p.n, p.k, p.c, p.ldc, p.accumulate, false};
    a.vec = p.k % 8 == 0 && p.lda % 8 == 0 && p.part_stride % 8 == 0 && p.z_a % 8 == 0 && p.z_w % 8 == 0 && aligned16(p.a) &&
            (p.w == nullptr || aligned16(p.w)) && p.weights_aligned;
    // Tiles by rows per group (the chain is the same for all): few rows favour many blocks over n.
    int64_t rows = p.offsets ? (p.m + p.groups - 1) / p.groups : p.m;
    auto launch = [&](auto kernel, int mt, int nt) {
        int64_t tiles = (p.m + mt - 1) / mt;
        Tensor list;
        if (p.offsets) {  // at most one partial tile per group beyond the full ones
            tiles += std::min<int64_t>(p.groups, p.m);
            list = empty(DType::kI32, {2 * tiles + 1});
            a.tiles = reinterpret_cast<const int2*>(list.raw());
            a.tile_count = list.data<int>() + 2 * tiles;
            launch_pdl(det_tiles_kernel, 1, 32, 0, stream_, p.offsets, p.groups, mt,
                       reinterpret_cast<int2*>(list.raw()), list.data<int>() + 2 * tiles);
        }
        unsigned z = p.offsets ? 1 : static_cast<unsigned>(p.products);
        launch_pdl(kernel, dim3(blocks_for(p.n, nt), static_cast<unsigned>(tiles), z), kThreads, 0, stream_, a);
    };
    int64_t wide = 2 * sm_count_;  // n tiles that fill the GPU twice over
    auto pick = [&]<int MW, int NW, int U, int H>() {
        if (p.parts == 1) launch(det_gemm_kernel<MW, NW, U, 1, H>, 8 * H * MW, 8 * NW);
        else if (p.parts == 2) launch(det_gemm_kernel<MW, NW, U, 2, H>, 8 * H * MW, 8 * NW);
        else launch(det_gemm_kernel<MW, NW, (U > 1 ? U / 2 : 1), 3, H>, 8 * H * MW, 8 * NW);
    };
    auto few_rows = [&]<int H>() {
        if (p.n >= 32 * wide) pick.template operator()<1, 4, 4, H>();
        else if (p.n >= 16 * wide) pick.template operator()<1, 2, 4, H>();
        else pick.template operator()<1, 1, 4, H>();
    };
    DI_CUDA_REQUIRE(p.parts >= 1 && p.parts <= 3, "det_gemm: 1 to 3 activation parts");
    if (rows <= 8) few_rows.template operator()<1>();
    else if (rows <= 16) few_rows.template operator()<2>();
    else if (rows <= 32) pick.template operator()<2, 4, 2, 2>();
    else pick.template operator()<4, 4, 2, 2>();
}

void CudaBackend::det_gemm_f32(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate) {
    int64_t n = w.dim(0), k = w.dim(-1);
    bool vec = k % 4 == 0 && lda % 4 == 0 && aligned16(x) && aligned16(w.raw());
    if (m <= 16)
        launch_pdl(det_gemm_f32_kernel<1, 1>, dim3(static_cast<unsigned>(n), static_cast<unsigned>(m)), kF32Threads, 0,
                   stream_, x, lda, w.data<float>(), n, k, y, ldy, m, accumulate, vec);
    else
        launch_pdl(det_gemm_f32_kernel<8, 4>, dim3(blocks_for(n, 8), blocks_for(m, 4)), kF32Threads, 0, stream_, x, lda,
                   w.data<float>(), n, k, y, ldy, m, accumulate, vec);
}

}  // namespace deepinfer::kernels::cuda
