#include "model/engram.h"

#include <cmath>

#include "base/error.h"

namespace deepinfer::model {
namespace {

float scale_at(const Tensor& s, int64_t i) {
    if (s.dtype() == DType::kF8E8M0) {
        uint8_t b = s.data<uint8_t>()[i];
        return b == 255 ? std::nanf("") : std::ldexp(1.0f, static_cast<int>(b) - 127);
    }
    return s.data<float>()[i];
}

}  // namespace

EngramLayerWeights load_engram_weights(const DeepseekV41Config& cfg, int layer, const WeightLoader& w,
                                       kernels::Backend& backend) {
    const EngramConfig& e = cfg.engram;
    int64_t rows = e.num_embeddings[cfg.engram_index(layer)], hd = e.head_dim, hc = cfg.base.hc_mult, D = cfg.base.hidden_size;
    EngramLayerWeights out;
    out.table = w.stored(layer_names(layer, {"engram.embed.weight"}), {rows, hd});
    DType t = out.table.dtype();
    DI_CHECK(t == DType::kBF16 || t == DType::kF32 || t == DType::kF8E4M3,
             "Engram table of layer {} has dtype {} (bf16, fp32 or fp8 e4m3 with a scale)", layer, dtype_name(t));
    if (t == DType::kF8E4M3) {
        DI_CHECK(hd % 32 == 0, "Engram head_dim {} is not a multiple of the 32-channel scale block", hd);
        out.table_scale = w.stored(layer_names(layer, {"engram.embed.scale"}), {rows, hd / 32});
        DI_CHECK(out.table_scale.dtype() == DType::kF8E8M0 || out.table_scale.dtype() == DType::kF32,
                 "Engram table scale of layer {} has dtype {}", layer, dtype_name(out.table_scale.dtype()));
    }
    out.wkv = backend.upload(w.matrix(layer_names(layer, {"engram.wkv.weight"}), {(hc + 1) * D, e.columns() * hd}));
    Tensor q = w.param(layer_names(layer, {"engram.q_weight"}), {hc, D});
    Tensor k = w.param(layer_names(layer, {"engram.k_weight"}), {hc, D});
    Tensor product = Tensor::empty(DType::kF32, {hc, D});
    for (int64_t i = 0; i < product.numel(); ++i) product.data<float>()[i] = q.data<float>()[i] * k.data<float>()[i];
    out.weight = backend.upload(product);
    return out;
}

void gather_engram_rows(const EngramLayerWeights& ew, const int64_t* rows, int64_t n, int columns, Tensor& out) {
    int64_t hd = ew.table.dim(1), table_rows = ew.table.dim(0);
    for (int64_t i = 0; i < n * columns; ++i) {
        int64_t r = rows[i];
        DI_CHECK(r >= 0 && r < table_rows, "Engram row {} is outside the table ({} rows)", r, table_rows);
        float* dst = out.data<float>() + i * hd;
        for (int64_t c = 0; c < hd; ++c) {
            int64_t at = r * hd + c;
            switch (ew.table.dtype()) {
                case DType::kBF16: dst[c] = bf16_to_f32(ew.table.data<uint16_t>()[at]); break;
                case DType::kF32: dst[c] = ew.table.data<float>()[at]; break;
                default: dst[c] = e4m3_to_f32(ew.table.data<uint8_t>()[at]) * scale_at(ew.table_scale, r * (hd / 32) + c / 32);
            }
        }
    }
}

}  // namespace deepinfer::model
