#include "kernels/cpu/gemm.h"

#include <algorithm>

#include "base/error.h"
#include "base/thread_pool.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm_q8.h"

namespace deepinfer::kernels::cpu {
namespace {

// Rows of x processed together so that a block of x stays in cache while w streams past it.
int64_t x_block_rows(int64_t k) { return std::max<int64_t>(4, std::min<int64_t>(64, (256 * 1024) / (4 * k + 1) / 4 * 4)); }

}  // namespace

void gemm_rows(Isa isa, const GemmArgs& args, int64_t n_begin, int64_t n_end) {
    switch (isa) {
        case Isa::kAvx512: return gemm_rows_avx512(args, n_begin, n_end);
        case Isa::kAvx2: return gemm_rows_avx2(args, n_begin, n_end);
        default: return gemm_rows_scalar(args, n_begin, n_end);
    }
}

namespace {

// Splits the product over the pool and calls part(sub, row0, n0, n1) for each piece, where sub
// covers activation rows [row0, row0 + sub.m) and weight rows [n0, n1).
template <typename Part>
void split(ThreadPool& pool, const GemmArgs& args, const Part& part) {
    int64_t threads = pool.num_threads();
    // Enough weight rows for every thread: split w (each thread streams its own slice once per
    // block of x rows). Otherwise split the tokens.
    if (args.n >= 16 * threads || args.m < 2 * threads) {
        int64_t mb = x_block_rows(args.k);
        pool.parallel_for(args.n, 16, [&](int64_t n0, int64_t n1) {
            for (int64_t m0 = 0; m0 < args.m; m0 += mb) {
                GemmArgs sub = args;
                sub.x = args.x + m0 * args.lda;
                sub.y = args.y + m0 * args.ldy;
                sub.m = std::min(mb, args.m - m0);
                part(sub, m0, n0, n1);
            }
        });
    } else {
        pool.parallel_for(args.m, 4, [&](int64_t m0, int64_t m1) {
            GemmArgs sub = args;
            sub.x = args.x + m0 * args.lda;
            sub.y = args.y + m0 * args.ldy;
            sub.m = m1 - m0;
            part(sub, m0, int64_t{0}, args.n);
        });
    }
}

void gemm_q8(ThreadPool& pool, Isa isa, const GemmArgs& args, std::vector<uint8_t>& scratch) {
    int64_t stride = q8_activation_stride(args.k);
    scratch.resize(static_cast<size_t>(args.m * stride));
    if (args.m >= 2 * pool.num_threads())
        pool.parallel_for(args.m, 1, [&](int64_t b, int64_t e) {
            quantize_activations(args.x, args.lda, args.k, b, e, scratch.data());
        });
    else
        quantize_activations(args.x, args.lda, args.k, 0, args.m, scratch.data());
    Q8Activations xq{args.k, q8::padded_blocks(args.k), stride, scratch.data()};
    split(pool, args, [&](const GemmArgs& sub, int64_t row0, int64_t n0, int64_t n1) {
        gemm_q8_rows(isa, sub, xq.from_row(row0), n0, n1);
    });
}

}  // namespace

void gemm(ThreadPool& pool, Isa isa, const GemmArgs& args, std::vector<uint8_t>* scratch) {
    DI_CHECK(args.w_dtype == DType::kBF16 || args.w_dtype == DType::kF32 || args.w_dtype == DType::kQ8,
             "gemm: unsupported weight dtype {}", dtype_name(args.w_dtype));
    if (args.m == 0 || args.n == 0) return;
    if (args.w_dtype == DType::kQ8) {
        std::vector<uint8_t> local;
        return gemm_q8(pool, isa, args, scratch != nullptr ? *scratch : local);
    }
    split(pool, args, [&](const GemmArgs& sub, int64_t, int64_t n0, int64_t n1) { gemm_rows(isa, sub, n0, n1); });
}

}  // namespace deepinfer::kernels::cpu
