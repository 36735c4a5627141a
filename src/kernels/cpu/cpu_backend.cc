#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "kernels/cpu/math.h"
#include "kernels/quant_grid.h"

namespace deepinfer::kernels::cpu {
namespace {

void check_f32(const Tensor& t, const char* what) {
    DI_CHECK(t.dtype() == DType::kF32, "{}: expected fp32, got {}", what, dtype_name(t.dtype()));
}

float load_as_f32(const Tensor& table, int64_t index) {
    return table.dtype() == DType::kBF16 ? bf16_to_f32(table.data<uint16_t>()[index]) : table.data<float>()[index];
}

}  // namespace

CpuBackend::CpuBackend(int num_threads, Isa isa) : pool_(num_threads), isa_(isa) {}

Tensor CpuBackend::empty(DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::shared_ptr<void> block = allocator_->allocate(static_cast<size_t>(n) * dtype_size(dtype));
    void* p = block.get();
    return Tensor::wrap(p, dtype, std::move(shape), std::move(block));
}

Tensor CpuBackend::zeros(DType dtype, std::vector<int64_t> shape) {
    Tensor t = empty(dtype, std::move(shape));
    std::memset(t.raw(), 0, t.nbytes());
    return t;
}
// Weights usually arrive as views of memory-mapped files, whose 4 KiB pages make streaming reads
// TLB-bound (decode measured ~3x slower); a copy packed into huge-page chunks reads at full
// bandwidth.
Tensor CpuBackend::upload(const Tensor& host) {
    std::shared_ptr<void> block = weights_.allocate(host.nbytes());
    std::memcpy(block.get(), host.raw(), host.nbytes());
    void* p = block.get();
    return Tensor::wrap(p, host.dtype(), host.shape(), std::move(block));
}
void CpuBackend::download(const Tensor& src, void* host_dst) { std::memcpy(host_dst, src.raw(), src.nbytes()); }

void CpuBackend::gemm(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate) {
    GemmArgs a;
    a.x = x;
    a.lda = lda;
    a.w = w.raw();
    a.ldw = w.dim(-1);  // Q8 rows: the kernels know their stride
    a.w_dtype = w.dtype();
    a.y = y;
    a.ldy = ldy;
    a.m = m;
    a.n = w.dim(0);
    a.k = w.dim(-1);
    a.accumulate = accumulate;
    a.bf16_activations = bf16_activations();
    a.q8_activations = int8_activations();
    cpu::gemm(pool_, isa_, a, &q8_scratch_);
}

void CpuBackend::embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) {
    int64_t n = ids.numel(), vocab = table.dim(0), d = table.dim(1);
    DI_CHECK(out.numel() == n * hc * d, "embed: output {} does not fit {} tokens", out.shape_string(), n);
    const int32_t* id = ids.data<int32_t>();
    for (int64_t i = 0; i < n; ++i)
        DI_CHECK(id[i] >= 0 && id[i] < vocab, "token id {} is out of range for a vocabulary of {}", id[i], vocab);
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            float* row = out.data<float>() + i * hc * d;
            for (int64_t c = 0; c < d; ++c) row[c] = load_as_f32(table, id[i] * d + c);
            for (int s = 1; s < hc; ++s) std::memcpy(row + s * d, row, d * sizeof(float));
        }
    });
}

void CpuBackend::matmul(const Tensor& x, const Tensor& w, Tensor& y) {
    check_f32(x, "matmul input");
    int64_t k = w.dim(-1), n = w.dim(0);
    int64_t m = x.numel() / k;
    DI_CHECK(x.numel() == m * k && y.numel() == m * n, "matmul: x {} · w {} -> y {} shapes disagree", x.shape_string(),
             w.shape_string(), y.shape_string());
    gemm(x.data<float>(), k, w, y.data<float>(), n, m);
}

void CpuBackend::grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) {
    int64_t k = w.dim(-1), rows = w.dim(0) / groups;
    int64_t m = x.numel() / (groups * k);
    DI_CHECK(x.numel() == m * groups * k && y.numel() == m * groups * rows, "grouped_matmul: shapes disagree");
    for (int g = 0; g < groups; ++g) {
        Tensor wg = w.rows(g * rows, (g + 1) * rows);
        gemm(x.data<float>() + g * k, groups * k, wg, y.data<float>() + g * rows, groups * rows, m);
    }
}

namespace {

void rms_norm_row(const float* in, float* out, int64_t cols, const float* w, float eps) {
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(in[c]) * in[c];
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / cols) + eps);
    for (int64_t c = 0; c < cols; ++c) out[c] = w ? w[c] * (in[c] * inv) : in[c] * inv;
}

}  // namespace

void CpuBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) {
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    const float* w = weight ? weight->data<float>() : nullptr;
    pool_.parallel_for(rows, 8, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) rms_norm_row(x.data<float>() + r * cols, y.data<float>() + r * cols, cols, w, eps);
    });
}

// Every job's rows in one pool dispatch, each row as rms_norm and rope compute it.
void CpuBackend::norm_rope_many(std::span<const NormRopeJob> jobs, const Tensor& positions) {
    std::vector<int64_t> start(jobs.size() + 1, 0);
    for (size_t i = 0; i < jobs.size(); ++i) {
        const Tensor& x = *jobs[i].x;
        int64_t rows = x.numel() / x.dim(-1);
        DI_CHECK(jobs[i].rope == nullptr || positions.numel() * jobs[i].group == rows,
                 "norm_rope_many: {} positions x {} rows per position != {} rows", positions.numel(), jobs[i].group, rows);
        start[i + 1] = start[i] + rows;
    }
    const int64_t* pos = positions.data<int64_t>();
    pool_.parallel_for(start.back(), 8, [&](int64_t b, int64_t e) {
        std::vector<float> cs;
        for (size_t i = 0; i < jobs.size(); ++i) {
            const NormRopeJob& j = jobs[i];
            int64_t cols = j.x->dim(-1), angles_of = -1;  // the position cs holds (rows of one position are neighbours)
            int half = j.rope != nullptr ? j.rope->rope_dim / 2 : 0;
            cs.resize(static_cast<size_t>(2 * half));
            for (int64_t r = std::max(b, start[i]); r < std::min(e, start[i + 1]); ++r) {
                float* row = j.x->data<float>() + (r - start[i]) * cols;
                if (j.norm) rms_norm_row(row, row, cols, j.weight ? j.weight->data<float>() : nullptr, j.eps);
                if (j.rope == nullptr) continue;
                int64_t p = pos[(r - start[i]) / j.group];
                if (p != angles_of)
                    rope_angles(p, j.rope->inv_freq.data<float>(), j.rope->rope_dim, j.rope->scale, false, cs.data(),
                                cs.data() + half);
                angles_of = p;
                rope_apply(row, cols, j.rope->rope_dim, cs.data(), cs.data() + half);
            }
        }
    });
}

// Sibling products of one input in one pool dispatch (gemm_batch computes each row as gemm does).
void CpuBackend::matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) {
    check_f32(x, "matmul_many input");
    std::vector<GemmArgs> products;
    for (const MatmulTarget& t : targets) {
        const Tensor& w = *t.w;
        int64_t k = w.dim(-1), n = w.dim(0), m = x.numel() / k;
        DI_CHECK(x.numel() == m * k && t.y->numel() == m * n, "matmul_many: x {} · w {} -> y {} shapes disagree",
                 x.shape_string(), w.shape_string(), t.y->shape_string());
        products.push_back(GemmArgs{.x = x.data<float>(), .lda = k, .w = w.raw(), .ldw = k, .w_dtype = w.dtype(),
                                    .y = t.y->data<float>(), .ldy = n, .m = m, .n = n, .k = k,
                                    .bf16_activations = bf16_activations(), .q8_activations = int8_activations()});
    }
    cpu::gemm_batch(pool_, isa_, products, &q8_scratch_);
}

void CpuBackend::rope(Tensor& x, const Tensor& positions, int group, const Rope& r, bool inverse) {
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    DI_CHECK(positions.numel() * group == rows, "rope: {} positions x {} rows per position != {} rows",
             positions.numel(), group, rows);
    const int64_t* pos = positions.data<int64_t>();
    const float* inv_freq = r.inv_freq.data<float>();
    int half = r.rope_dim / 2;
    // The angles once per position, for all `group` rows (heads) at it.
    pool_.parallel_for(positions.numel(), std::max<int64_t>(1, 16 / group), [&](int64_t b, int64_t e) {
        std::vector<float> cs(static_cast<size_t>(2 * half));
        for (int64_t p = b; p < e; ++p) {
            rope_angles(pos[p], inv_freq, r.rope_dim, r.scale, inverse, cs.data(), cs.data() + half);
            for (int64_t row = p * group; row < (p + 1) * group; ++row)
                rope_apply(x.data<float>() + row * cols, cols, r.rope_dim, cs.data(), cs.data() + half);
        }
    });
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
    int64_t cols = x.numel() / x.dim(0);
    const int32_t* idx = rows.data<int32_t>();
    for (int64_t i = 0; i < rows.numel(); ++i) {
        DI_CHECK(idx[i] >= 0 && idx[i] < x.dim(0), "gather_rows: row {} out of range", idx[i]);
        std::memcpy(out.data<float>() + i * cols, x.data<float>() + idx[i] * cols, cols * sizeof(float));
    }
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
    DI_CHECK(src.nbytes() == dst.nbytes(), "copy: {} vs {}", src.shape_string(), dst.shape_string());
    const auto* from = static_cast<const char*>(src.raw());
    auto* to = static_cast<char*>(dst.raw());
    pool_.parallel_for(static_cast<int64_t>(src.nbytes()), int64_t{1} << 20,
                       [&](int64_t s, int64_t e) { std::memcpy(to + s, from + s, static_cast<size_t>(e - s)); });
}

void CpuBackend::argmax_rows(const Tensor& logits, Tensor& ids) {
    int64_t cols = logits.dim(-1), rows = logits.numel() / std::max<int64_t>(cols, 1);
    DI_CHECK(cols > 0 && ids.numel() == rows && ids.dtype() == DType::kI32, "argmax_rows: logits {} -> ids {}",
             logits.shape_string(), ids.shape_string());
    pool_.parallel_for(rows, 1, [&](int64_t s, int64_t e) {
        for (int64_t r = s; r < e; ++r) {
            const float* row = logits.data<float>() + r * cols;
            ids.data<int32_t>()[r] = static_cast<int32_t>(std::max_element(row, row + cols) - row);  // first of equals
        }
    });
}

void CpuBackend::apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) {
    int64_t cols = logits.dim(-1), num_rows = rows.numel(), words = (cols + 31) / 32;
    DI_CHECK(cols > 0 && rows.dtype() == DType::kI32 && mask.dtype() == DType::kI32 && mask.numel() == num_rows * words,
             "apply_token_mask: logits {}, rows {}, mask {}", logits.shape_string(), rows.shape_string(), mask.shape_string());
    const auto* bits = reinterpret_cast<const uint32_t*>(mask.raw());
    pool_.parallel_for(num_rows, 1, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
            float* row = logits.data<float>() + rows.data<int32_t>()[i] * cols;
            const uint32_t* w = bits + i * words;
            for (int64_t v = 0; v < cols; ++v)
                if (!((w[v >> 5] >> (v & 31)) & 1u)) row[v] = -std::numeric_limits<float>::infinity();
        }
    });
}

void CpuBackend::add(const Tensor& x, Tensor& y) {
    DI_CHECK(x.numel() == y.numel(), "add: {} vs {}", x.shape_string(), y.shape_string());
    const float* a = x.data<float>();
    float* b = y.data<float>();
    pool_.parallel_for(x.numel(), 4096, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) b[i] += a[i];
    });
}

void CpuBackend::swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) {
    const float* g = gate.data<float>();
    const float* u = up.data<float>();
    float* o = out.data<float>();
    pool_.parallel_for(gate.numel(), 4096, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) o[i] = silu(std::min(g[i], limit)) * std::clamp(u[i], -limit, limit);
    });
}

std::unique_ptr<Backend> make_cpu_backend(int num_threads, Isa isa) {
    return std::make_unique<CpuBackend>(num_threads, isa);
}

void CpuBackend::fake_quantize(Tensor& x, QuantFormat format) {
    check_f32(x, "fake_quantize");
    int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
    int block = quant::block_of(format);
    if (cols % block != 0) return;
    pool_.parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
            for (int64_t c = 0; c < cols; c += block) quant::quantize_block(format, x.data<float>() + r * cols + c, block);
    });
}

}  // namespace deepinfer::kernels::cpu

namespace deepinfer::kernels {

std::unique_ptr<Backend> make_cpu_backend(int num_threads) { return cpu::make_cpu_backend(num_threads, detect_isa()); }

}  // namespace deepinfer::kernels
