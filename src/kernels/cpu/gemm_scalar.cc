#include <vector>

#include "core/dtype.h"
#include "core/quant_fp8.h"
#include "core/quant_mxfp4.h"
#include "kernels/cpu/gemm.h"

namespace deepinfer::kernels::cpu {
namespace {

template <typename W>
float weight_at(const W* w, int64_t i);
template <>
float weight_at<uint16_t>(const uint16_t* w, int64_t i) { return bf16_to_f32(w[i]); }
template <>
float weight_at<float>(const float* w, int64_t i) { return w[i]; }

template <typename W>
void rows(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
    const W* w = static_cast<const W*>(a.w);
    for (int64_t i = 0; i < a.m; ++i) {
        const float* x = a.x + i * a.lda;
        for (int64_t j = n_begin; j < n_end; ++j) {
            const W* wr = w + j * a.ldw;
            float acc = 0.0f;
            for (int64_t kk = 0; kk < a.k; ++kk) acc += x[kk] * weight_at(wr, kk);
            float& out = a.y[i * a.ldy + j];
            out = a.accumulate ? out + acc : acc;
        }
    }
}

// MXFP4 or FP8 rows decoded one at a time (core/quant_mxfp4.h, core/quant_fp8.h).
void decoded_rows(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
    bool is_fp8 = a.w_dtype == DType::kFp8;
    int64_t stride = is_fp8 ? fp8::row_bytes(a.k) : mxfp4::row_bytes(a.k);
    std::vector<float> w(static_cast<size_t>(a.k));
    for (int64_t j = n_begin; j < n_end; ++j) {
        const uint8_t* row = static_cast<const uint8_t*>(a.w) + j * stride;
        if (is_fp8)
            fp8::decode_row(row, a.k, w.data());
        else
            mxfp4::decode_row(row, a.k, w.data());
        for (int64_t i = 0; i < a.m; ++i) {
            const float* x = a.x + i * a.lda;
            float acc = 0.0f;
            for (int64_t kk = 0; kk < a.k; ++kk) acc += x[kk] * w[kk];
            float& out = a.y[i * a.ldy + j];
            out = a.accumulate ? out + acc : acc;
        }
    }
}

}  // namespace

void gemm_rows_scalar(const GemmArgs& args, int64_t n_begin, int64_t n_end) {
    if (args.w_dtype == DType::kMxfp4 || args.w_dtype == DType::kFp8) return decoded_rows(args, n_begin, n_end);
    if (args.w_dtype == DType::kBF16)
        rows<uint16_t>(args, n_begin, n_end);
    else
        rows<float>(args, n_begin, n_end);
}

}  // namespace deepinfer::kernels::cpu
