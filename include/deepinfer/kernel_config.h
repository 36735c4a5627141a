#pragma once
// Kernel choices: which kernel a backend launches for an op and with what launch parameters.
// Every choice computes the same op within the op tests' bounds; the defaults are the measured
// best (docs/benchmarks.md). A knob has one name, its field's, wherever it is set: the CLI's
// --kernel name=value, bench_forward --variant, set_kernel_knob below.
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// The CUDA backend's knobs.
struct CudaKernelConfig {
    // One activation row's GEMV tasks: rows per warp task 2|4, loads in flight per lane 4|8, rows
    // per block task 2|4; MiB of weights a GEMV prefetches into L2 before its PDL wait 0..48.
    int gemv_one_row_warp_rows = 2, gemv_one_row_warp_unroll = 8, gemv_one_row_block_rows = 4;
    int gemv_prefetch_mib = 0;
    // FP8 block-scaled linears kept as the checkpoint stores them (0: widened to bf16 at load):
    // steps of up to 8 rows read the codes, longer ones widen the matrix in scratch. Off until
    // the FP8 fixtures' parity has run on a GPU with it (its op test has passed there).
    bool fp8_weights = false;
    // Attention: small steps on the split decode kernel (0: a block per token and head), most key
    // shares per (token, head group) 1..32; large steps on the tiled kernel (0: a block per token
    // and head); the fast precision's large steps on tensor cores (0: the tiled fp32 kernel) with
    // the register cap set for 1|2 blocks an SM.
    bool attention_decode = true;
    int attention_decode_splits = 16;
    bool attention_tiled = true, attention_mma = true;
    int attention_mma_blocks = 2;
    // Indexer: long prefills' picks by a sort (0: repeated argmax); the fast precision's scores on
    // tensor cores (0: CUDA cores in fp32).
    bool indexer_sort = true, indexer_mma = true;
    // Routed experts: grouped on the device on tensor cores (0: CUDA cores, fp32 activations), k
    // steps of weights requested ahead 1|4; the fast precision's staged kernels (weights through
    // shared memory) up to moe_staged_max_pairs 1024..16384 (token, slot) pairs (more: grouped
    // cuBLAS GEMMs), in passes of 128 pairs where experts average more than 64 (moe_staged_wide).
    bool moe_grouped_mma = true;
    int moe_mma_steps_in_flight = 4;
    bool moe_staged = true;
    int moe_staged_max_pairs = 1024;
    bool moe_staged_wide = false;
    // Per-pair expert kernels (small steps): loads in flight 4|8 for the up and down products;
    // starting the shared expert's rows into L2 before the PDL wait (measured slower: off).
    int moe_up_unroll = 8, moe_down_unroll = 8;
    bool moe_shared_prefetch = false;
    // mHC sites as one launch over split blocks (0: last-block kernels) exchanging sums as tagged
    // words (0: behind a barrier).
    bool hc_site = true, hc_site_tagged = true;
    // Device graphs: outer ops in a step's first captured segment; each later one doubles, up to
    // graph_segment_ops (both 1..1000).
    int graph_first_segment_ops = 4, graph_segment_ops = 48;

    bool operator==(const CudaKernelConfig&) const = default;
};

struct KernelConfig {
    CudaKernelConfig cuda;

    bool operator==(const KernelConfig&) const = default;
};

// Sets the knob `name` ("cuda" knobs by their field names) to `value`; false, with the reason in
// `why`, for an unknown name or a value out of the knob's range.
bool set_kernel_knob(KernelConfig& config, std::string_view name, int value, std::string* why = nullptr);
// "name=value": the CLI's form.
bool parse_kernel_knob(KernelConfig& config, std::string_view assignment, std::string* why = nullptr);
// The first knob out of its range, described ("" when every knob is in range).
std::string kernel_config_error(const KernelConfig& config);
// Every knob, "name (allowed values)", for help texts.
std::vector<std::string> kernel_knob_help();

}  // namespace deepinfer
