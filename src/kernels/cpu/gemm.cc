#include "kernels/cpu/gemm.h"

#include <algorithm>

#include "base/error.h"
#include "base/thread_pool.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_q8.h"

namespace deepinfer::kernels::cpu {
namespace {

// Rows of x processed together so that a block of x stays in cache while w streams past it.
int64_t x_block_rows(int64_t k) { return std::max<int64_t>(4, std::min<int64_t>(64, (256 * 1024) / (4 * k + 1) / 4 * 4)); }

// What the activations become before the kernels read them.
enum class Form {
    kAsIs,         // fp32, read in place
    kQ8,           // 8-bit blocks (gemm_q8.h)
    kBf16,         // rounded to bf16 for the AVX-512 BF16 kernel
    kBf16AsF32,    // rounded to bf16, kept as fp32 for the other kernels
};

Form form_of(Isa isa, const GemmArgs& a) {
    if (a.w_dtype == DType::kQ8 || (a.w_dtype == DType::kMxfp4 && a.q8_activations)) return Form::kQ8;
    if (!a.bf16_activations || a.w_dtype == DType::kF32) return Form::kAsIs;
    bool bf16_kernel = isa == Isa::kAvx512 && cpu_has_avx512_bf16();
    return bf16_kernel ? Form::kBf16 : Form::kBf16AsF32;
}

// Bytes of one prepared activation row.
int64_t prepared_stride(Form f, int64_t k) {
    switch (f) {
        case Form::kQ8: return q8_activation_stride(k);
        case Form::kBf16: return bf16_activation_stride(k) * 2;
        case Form::kBf16AsF32: return k * 4;
        default: return 0;
    }
}

// Activation rows of one product in their prepared form: row r at data + r * stride.
struct Prepared {
    Form form = Form::kAsIs;
    int64_t stride = 0;
    uint8_t* data = nullptr;
};

void prepare_rows(const GemmArgs& a, const Prepared& p, int64_t begin, int64_t end) {
    switch (p.form) {
        case Form::kQ8: return quantize_activations(a.x, a.lda, a.k, begin, end, p.data);
        case Form::kBf16: return round_activations_bf16(a.x, a.lda, a.k, begin, end, reinterpret_cast<uint16_t*>(p.data));
        case Form::kBf16AsF32: return round_activations_bf16_as_f32(a.x, a.lda, a.k, begin, end, reinterpret_cast<float*>(p.data));
        default: return;
    }
}

// All rows of the product prepared, over the pool when there are enough of them.
void prepare(ThreadPool& pool, const GemmArgs& a, const Prepared& p) {
    if (a.m >= 2 * pool.num_threads())
        pool.parallel_for(a.m, 1, [&](int64_t b, int64_t e) { prepare_rows(a, p, b, e); });
    else
        prepare_rows(a, p, 0, a.m);
}

// Weight rows [n0, n1) for the activation rows of `sub`, which start at row `row0` of the product.
void run_rows(Isa isa, const GemmArgs& sub, const Prepared& p, int64_t row0, int64_t n0, int64_t n1) {
    uint8_t* rows = p.data + row0 * p.stride;
    switch (p.form) {
        case Form::kQ8:
            return gemm_q8_rows(isa, sub, {sub.k, q8::padded_blocks(sub.k), p.stride, rows}, n0, n1);
        case Form::kBf16:
            return gemm_bf16_rows_avx512(sub, {sub.k, p.stride / 2, reinterpret_cast<const uint16_t*>(rows)}, n0, n1);
        case Form::kBf16AsF32: {
            GemmArgs widened = sub;
            widened.x = reinterpret_cast<const float*>(rows);
            widened.lda = sub.k;
            return gemm_rows(isa, widened, n0, n1);
        }
        default: return gemm_rows(isa, sub, n0, n1);
    }
}

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

void check_dtype(const GemmArgs& args) {
    DI_CHECK(args.w_dtype == DType::kBF16 || args.w_dtype == DType::kF32 || is_block_quantized(args.w_dtype),
             "gemm: unsupported weight dtype {}", dtype_name(args.w_dtype));
}

// Weight rows [n0, n1) of one product of a batch, for all its activation rows, in blocks of x
// rows as split() does.
void batch_piece(Isa isa, const GemmArgs& args, const Prepared& p, int64_t n0, int64_t n1) {
    int64_t mb = x_block_rows(args.k);
    for (int64_t m0 = 0; m0 < args.m; m0 += mb) {
        GemmArgs sub = args;
        sub.x = args.x + m0 * args.lda;
        sub.y = args.y + m0 * args.ldy;
        sub.m = std::min(mb, args.m - m0);
        run_rows(isa, sub, p, m0, n0, n1);
    }
}

}  // namespace

void gemm_rows(Isa isa, const GemmArgs& args, int64_t n_begin, int64_t n_end) {
    switch (isa) {
        case Isa::kAvx512: return gemm_rows_avx512(args, n_begin, n_end);
        case Isa::kAvx2: return gemm_rows_avx2(args, n_begin, n_end);
        default: return gemm_rows_scalar(args, n_begin, n_end);
    }
}

void gemm_batch(ThreadPool& pool, Isa isa, std::span<const GemmArgs> products, std::vector<uint8_t>* scratch) {
    std::vector<uint8_t> local;
    std::vector<uint8_t>& buf = scratch != nullptr ? *scratch : local;
    std::vector<int64_t> start(products.size() + 1, 0), offset(products.size(), 0);
    std::vector<Prepared> prepared(products.size());
    std::vector<int> same_as(products.size(), -1);  // an earlier product with the same prepared activations
    int64_t bytes = 0;
    for (size_t p = 0; p < products.size(); ++p) {
        const GemmArgs& a = products[p];
        check_dtype(a);
        start[p + 1] = start[p] + (a.m > 0 ? a.n : 0);
        prepared[p].form = form_of(isa, a);
        prepared[p].stride = prepared_stride(prepared[p].form, a.k);
        for (size_t q = 0; q < p && prepared[p].form != Form::kAsIs; ++q) {
            const GemmArgs& b = products[q];
            if (prepared[q].form == prepared[p].form && b.x == a.x && b.lda == a.lda && b.k == a.k && b.m == a.m) {
                same_as[p] = static_cast<int>(q);
                break;
            }
        }
        offset[p] = bytes;
        if (same_as[p] < 0) bytes += a.m * prepared[p].stride;
    }
    buf.resize(static_cast<size_t>(bytes));
    for (size_t p = 0; p < products.size(); ++p) {
        const GemmArgs& a = products[p];
        prepared[p].data = buf.data() + offset[same_as[p] < 0 ? p : static_cast<size_t>(same_as[p])];
        if (same_as[p] < 0 && prepared[p].form != Form::kAsIs) prepare(pool, a, prepared[p]);
    }
    pool.parallel_for(start.back(), 16, [&](int64_t b, int64_t e) {
        for (size_t p = 0; p < products.size(); ++p) {
            int64_t n0 = std::max(b, start[p]), n1 = std::min(e, start[p + 1]);
            if (n0 < n1) batch_piece(isa, products[p], prepared[p], n0 - start[p], n1 - start[p]);
        }
    });
}

void gemm(ThreadPool& pool, Isa isa, const GemmArgs& args, std::vector<uint8_t>* scratch) {
    check_dtype(args);
    if (args.m == 0 || args.n == 0) return;
    Prepared p{form_of(isa, args)};
    std::vector<uint8_t> local;
    if (p.form != Form::kAsIs) {
        std::vector<uint8_t>& buf = scratch != nullptr ? *scratch : local;
        p.stride = prepared_stride(p.form, args.k);
        buf.resize(static_cast<size_t>(args.m * p.stride));
        p.data = buf.data();
        prepare(pool, args, p);
    }
    split(pool, args, [&](const GemmArgs& sub, int64_t row0, int64_t n0, int64_t n1) { run_rows(isa, sub, p, row0, n0, n1); });
}

}  // namespace deepinfer::kernels::cpu
