// The kernel knobs by name (include/deepinfer/kernel_config.h): one table of the fields, their
// names and allowed values, read by every place that sets or checks a knob.
#include "deepinfer/kernel_config.h"

#include <charconv>
#include <span>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace deepinfer {
namespace {

using CudaField = std::variant<int CudaKernelConfig::*, bool CudaKernelConfig::*>;

// Allowed values: either exactly `choices` (when non-empty) or the range lo..hi.
struct Knob {
    const char* name;
    CudaField field;
    int lo = 0, hi = 1;
    std::vector<int> choices = {};

    bool allows(int v) const {
        if (choices.empty()) return v >= lo && v <= hi;
        for (int c : choices)
            if (c == v) return true;
        return false;
    }
    std::string allowed() const {
        if (choices.empty()) return fmt::format("{}..{}", lo, hi);
        return fmt::format("{}", fmt::join(choices, "|"));
    }
    int get(const CudaKernelConfig& c) const {
        return std::visit([&](auto member) { return static_cast<int>(c.*member); }, field);
    }
    void set(CudaKernelConfig& c, int v) const {
        std::visit([&](auto member) { c.*member = static_cast<std::remove_reference_t<decltype(c.*member)>>(v); }, field);
    }
};

#define DI_FLAG(f) Knob{#f, &CudaKernelConfig::f}
#define DI_CHOICE(f, ...) Knob{#f, &CudaKernelConfig::f, 0, 0, {__VA_ARGS__}}
#define DI_RANGE(f, lo, hi) Knob{#f, &CudaKernelConfig::f, lo, hi}

std::span<const Knob> cuda_knobs() {
    static const std::vector<Knob> knobs = {
        DI_CHOICE(gemv_one_row_warp_rows, 2, 4),
        DI_CHOICE(gemv_one_row_warp_unroll, 4, 8),
        DI_CHOICE(gemv_one_row_block_rows, 2, 4),
        DI_RANGE(gemv_prefetch_mib, 0, 48),
        DI_FLAG(fp8_weights),
        DI_FLAG(attention_decode),
        DI_RANGE(attention_decode_splits, 1, 32),
        DI_FLAG(attention_tiled),
        DI_FLAG(attention_mma),
        DI_CHOICE(attention_mma_blocks, 1, 2),
        DI_FLAG(indexer_sort),
        DI_FLAG(indexer_mma),
        DI_FLAG(moe_grouped_mma),
        DI_CHOICE(moe_mma_steps_in_flight, 1, 4),
        DI_FLAG(moe_staged),
        DI_RANGE(moe_staged_max_pairs, 1024, 16384),
        DI_FLAG(moe_staged_wide),
        DI_CHOICE(moe_up_unroll, 4, 8),
        DI_CHOICE(moe_down_unroll, 4, 8),
        DI_FLAG(moe_shared_prefetch),
        DI_FLAG(hc_site),
        DI_FLAG(hc_site_tagged),
        DI_RANGE(graph_first_segment_ops, 1, 1000),
        DI_RANGE(graph_segment_ops, 1, 1000),
    };
    return knobs;
}

#undef DI_FLAG
#undef DI_CHOICE
#undef DI_RANGE

const Knob* find_knob(std::string_view name) {
    for (const Knob& k : cuda_knobs())
        if (name == k.name) return &k;
    return nullptr;
}

bool fail(std::string* why, std::string text) {
    if (why) *why = std::move(text);
    return false;
}

}  // namespace

bool set_kernel_knob(KernelConfig& config, std::string_view name, int value, std::string* why) {
    const Knob* knob = find_knob(name);
    if (!knob) return fail(why, fmt::format("no kernel knob named '{}'", name));
    if (!knob->allows(value))
        return fail(why, fmt::format("kernel knob {} takes {}, not {}", name, knob->allowed(), value));
    knob->set(config.cuda, value);
    return true;
}

bool parse_kernel_knob(KernelConfig& config, std::string_view assignment, std::string* why) {
    size_t eq = assignment.find('=');
    std::string_view name = assignment.substr(0, eq), text = eq == std::string_view::npos ? "" : assignment.substr(eq + 1);
    int value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        return fail(why, fmt::format("kernel knob '{}': expected name=integer", assignment));
    return set_kernel_knob(config, name, value, why);
}

std::string kernel_config_error(const KernelConfig& config) {
    for (const Knob& k : cuda_knobs())
        if (!k.allows(k.get(config.cuda)))
            return fmt::format("kernel knob {} takes {}, not {}", k.name, k.allowed(), k.get(config.cuda));
    return {};
}

std::vector<std::string> kernel_knob_help() {
    std::vector<std::string> lines;
    for (const Knob& k : cuda_knobs()) lines.push_back(fmt::format("{} ({})", k.name, k.allowed()));
    return lines;
}

}  // namespace deepinfer
