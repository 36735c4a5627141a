#include "kernels/cpu/gemm.h"

#include <algorithm>

#include "base/error.h"
#include "base/thread_pool.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm_q8.h"

namespace deepinfer::kernels::cpu {
namespace {

// Rows of x processed together so that a block of x stays in cache while w streams past it.
// Weights the Q8 kernels take, with activations quantized to 8 bits.
bool is_block_quantized(DType t) { return t == DType::kQ8 || t == DType::kMxfp4; }

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

void check_dtype(const GemmArgs& args) {
    DI_CHECK(args.w_dtype == DType::kBF16 || args.w_dtype == DType::kF32 || is_block_quantized(args.w_dtype),
             "gemm: unsupported weight dtype {}", dtype_name(args.w_dtype));
}

// Weight rows [n0, n1) of one product of a batch, for all its activation rows, in blocks of x
// rows as split() does.
void batch_piece(Isa isa, const GemmArgs& args, const Q8Activations* xq, int64_t n0, int64_t n1) {
    int64_t mb = x_block_rows(args.k);
    for (int64_t m0 = 0; m0 < args.m; m0 += mb) {
        GemmArgs sub = args;
        sub.x = args.x + m0 * args.lda;
        sub.y = args.y + m0 * args.ldy;
        sub.m = std::min(mb, args.m - m0);
        if (xq != nullptr)
            gemm_q8_rows(isa, sub, xq->from_row(m0), n0, n1);
        else
            gemm_rows(isa, sub, n0, n1);
    }
}

}  // namespace

void gemm_batch(ThreadPool& pool, Isa isa, std::span<const GemmArgs> products, std::vector<uint8_t>* scratch) {
    std::vector<uint8_t> local;
    std::vector<uint8_t>& buf = scratch != nullptr ? *scratch : local;
    std::vector<int64_t> start(products.size() + 1, 0), q8_offset(products.size(), -1);
    int64_t q8_bytes = 0;
    for (size_t p = 0; p < products.size(); ++p) {
        check_dtype(products[p]);
        start[p + 1] = start[p] + (products[p].m > 0 ? products[p].n : 0);
        if (!is_block_quantized(products[p].w_dtype)) continue;
        q8_offset[p] = q8_bytes;
        q8_bytes += products[p].m * q8_activation_stride(products[p].k);
    }
    buf.resize(static_cast<size_t>(q8_bytes));
    std::vector<Q8Activations> xq(products.size());
    for (size_t p = 0; p < products.size(); ++p) {
        if (q8_offset[p] < 0) continue;
        const GemmArgs& a = products[p];
        xq[p] = {a.k, q8::padded_blocks(a.k), q8_activation_stride(a.k), buf.data() + q8_offset[p]};
        quantize_activations(a.x, a.lda, a.k, 0, a.m, buf.data() + q8_offset[p]);
    }
    pool.parallel_for(start.back(), 16, [&](int64_t b, int64_t e) {
        for (size_t p = 0; p < products.size(); ++p) {
            int64_t n0 = std::max(b, start[p]), n1 = std::min(e, start[p + 1]);
            if (n0 < n1) batch_piece(isa, products[p], q8_offset[p] >= 0 ? &xq[p] : nullptr, n0 - start[p], n1 - start[p]);
        }
    });
}

void gemm(ThreadPool& pool, Isa isa, const GemmArgs& args, std::vector<uint8_t>* scratch) {
    check_dtype(args);
    if (args.m == 0 || args.n == 0) return;
    if (is_block_quantized(args.w_dtype)) {
        std::vector<uint8_t> local;
        return gemm_q8(pool, isa, args, scratch != nullptr ? *scratch : local);
    }
    split(pool, args, [&](const GemmArgs& sub, int64_t, int64_t n0, int64_t n1) { gemm_rows(isa, sub, n0, n1); });
}

}  // namespace deepinfer::kernels::cpu
