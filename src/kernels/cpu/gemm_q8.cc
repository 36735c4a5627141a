#include "kernels/cpu/gemm_q8.h"

#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"

namespace deepinfer::kernels::cpu {

int64_t q8_activation_stride(int64_t k) {
    int64_t blocks = q8::padded_blocks(k);
    return blocks * 32 + blocks * 4 + blocks * 64;  // codes, scales, per 2 blocks 16 corrections + 16 lane scales
}

void quantize_activations(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, uint8_t* out) {
    int64_t blocks = q8::padded_blocks(k), stride = q8_activation_stride(k);
    Q8Activations q{k, blocks, stride, out};
    for (int64_t r = begin; r < end; ++r) {
        auto* codes = const_cast<int8_t*>(q.codes(r));
        auto* scales = const_cast<float*>(q.scales(r));
        q8::quantize_row(x + r * lda, k, codes, scales);
        auto* corr = const_cast<int32_t*>(q.lane_corrections(r));
        auto* lane_scale = const_cast<float*>(q.lane_scales(r));
        for (int64_t lane = 0; lane < blocks * 8; ++lane) {
            const int8_t* c = codes + lane * 4;
            corr[lane] = -q8::kCodeOffset * (c[0] + c[1] + c[2] + c[3]);
            lane_scale[lane] = scales[lane / 8];
        }
    }
}

void gemm_q8_rows(Isa isa, const GemmArgs& args, const Q8Activations& xq, int64_t n_begin, int64_t n_end) {
    if (isa == Isa::kAvx512 && cpu_has_avx512_vnni()) return gemm_q8_rows_vnni(args, xq, n_begin, n_end);
    gemm_q8_rows_scalar(args, xq, n_begin, n_end);
}

namespace {

// Weight code t of block b as an integer: Q8's code, or twice the MXFP4 code's e2m1 value.
int weight_code(DType format, const uint8_t* row, int64_t b, int t) {
    if (format == DType::kQ8) return row[b * 32 + t] - q8::kCodeOffset;
    uint8_t code = (row[(b / 2) * 32 + t] >> (b % 2 == 1 ? 4 : 0)) & 0xF;
    return static_cast<int>(mxfp4::kE2m1[code] * 2.0f);
}

}  // namespace

void gemm_q8_rows_scalar(const GemmArgs& args, const Q8Activations& xq, int64_t n_begin, int64_t n_end) {
    bool fp4 = args.w_dtype == DType::kMxfp4;
    int64_t blocks = xq.blocks, wstride = fp4 ? mxfp4::row_bytes(args.k) : q8::row_bytes(args.k);
    const auto* w = static_cast<const uint8_t*>(args.w);
    for (int64_t i = 0; i < args.m; ++i) {
        const int8_t* xc = xq.codes(i);
        const float* xs = xq.scales(i);
        for (int64_t j = n_begin; j < n_end; ++j) {
            const uint8_t* wc = w + j * wstride;
            const float* ws = reinterpret_cast<const float*>(wc + blocks * (fp4 ? 16 : 32));
            float acc = 0.0f;
            for (int64_t b = 0; b < blocks; ++b) {
                int32_t dot = 0;
                for (int t = 0; t < 32; ++t) dot += weight_code(args.w_dtype, wc, b, t) * xc[b * 32 + t];
                acc += static_cast<float>(dot) * (ws[b] * xs[b]);
            }
            float& out = args.y[i * args.ldy + j];
            out = args.accumulate ? out + acc : acc;
        }
    }
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

}  // namespace deepinfer::kernels::cpu
