// Token sampling on the device, as runtime/sampler.h defines it, with the arithmetic of
// kernels/sampling_math.h so that every row gets the host sampler's token bit for bit. One block
// per row: the row's processed logits (when it has a bias or penalties), its relative
// probabilities e (kept in a scratch row), the top-k / top-p cut by a radix descent over the keys
// of e (comparisons and exact integer sums only), then the draw by prefix sums in id order. Only
// the ids (and logprobs when asked) leave the device.
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/sampling_math.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace sampling;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 4;  // consecutive ids per thread in the id-order scans
constexpr int kMaxTop = 32;    // most top logprobs per row
// The radix descent's digits, from the top of the 32-bit keys: bits 21-31, 10-20 and 0-9.
constexpr int kLevels = 3;
constexpr int kBuckets = 1 << 11;
__device__ int digit_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
__device__ int digit_buckets(int level) { return level == kLevels - 1 ? kBuckets / 2 : kBuckets; }
// The key bits the levels before `level` have fixed.
__device__ uint32_t decided_bits(int level) { return level == 0 ? 0u : level == 1 ? 0xFFE00000u : 0xFFFFFC00u; }

struct SampleKernelArgs {
    const float* logits;  // [rows, vocab]
    int64_t vocab;
    const SampleRow* rows;
    const LogitBias* bias;
    uint32_t* penalty;   // [slots, vocab] or null
    float* work;         // [rows, vocab] scratch: processed logits, then e
    int* tokens;
    float* logprobs;
    int* top_tokens;
    float* top_logprobs;
    int top_width;
};

// The kept part of an order (key descending, id ascending): every key above `key`, and the first
// `count` ids (in id order) holding `key`.
struct Cut {
    uint32_t key = 0;
    uint64_t count = 0;
};

__device__ bool keeps_fewer(const Cut& a, const Cut& b) { return a.key > b.key || (a.key == b.key && a.count < b.count); }

template <typename T>
__device__ T warp_sum_of(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block; every thread gets it. Integer sums are exact in any order.
template <typename T>
__device__ T block_sum_of(T v) {
    __shared__ T partial[kWarps];
    v = warp_sum_of(v);
    __syncthreads();  // the previous call's readers are done
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    return warp_sum_of(partial[threadIdx.x % 32]);
}

// Exclusive prefix sum in thread order; `total` gets the block's sum.
__device__ uint64_t block_exclusive_scan(uint64_t v, uint64_t& total) {
    __shared__ uint64_t warp_inclusive[kWarps];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint64_t inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        uint64_t n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += n;
    }
    __syncthreads();
    if (lane == 31) warp_inclusive[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        uint64_t s = warp_inclusive[lane];
        for (int o = 1; o < 32; o <<= 1) {
            uint64_t n = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += n;
        }
        warp_inclusive[lane] = s;
    }
    __syncthreads();
    total = warp_inclusive[kWarps - 1];
    return (warp > 0 ? warp_inclusive[warp - 1] : 0) + inc - v;
}

// The first of the largest values of a row, ties to the lower id.
__device__ int row_argmax(const float* row, int64_t n) {
    float best = -INFINITY;
    int at = -1;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
        float v = row[i];
        if (at < 0 || v > best) best = v, at = static_cast<int>(i);
    }
    return block_argmax(best, at);
}

__device__ float row_max(const float* row, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, row[i]);
    return block_max(m);
}

// z = the processed logits (bias and penalties) into `z`: every id without bias first, then the
// biased ids again with theirs, as the host sampler does.
__device__ void write_processed(const float* logits, int64_t n, const SampleRow& p, const LogitBias* bias,
                                const uint32_t* words, float* z) {
    Penalties pen{p.repetition_penalty, p.presence_penalty, p.frequency_penalty};
    for (int64_t i = threadIdx.x; i < n; i += kThreads) z[i] = processed_logit(logits[i], 0.0f, words ? words[i] : 0u, pen);
    __syncthreads();
    for (int j = threadIdx.x; j < p.bias_count; j += kThreads) {
        LogitBias b = bias[p.bias_begin + j];
        z[b.token] = processed_logit(logits[b.token], b.bias, words ? words[b.token] : 0u, pen);
    }
    __syncthreads();
}

// Chooses the bucket of one descent level (warp 0 only): the bucket from the top where the
// running amount reaches `need`; narrows `prefix` to it and takes the amount above it off `need`.
template <typename T>
__device__ void choose_bucket(const T* hist, int level, uint32_t& prefix, uint64_t& need) {
    constexpr int kPerLane = kBuckets / 32;
    int lane = threadIdx.x % 32, buckets = digit_buckets(level);
    uint64_t want = need;
    __syncwarp();  // every lane has read `need` before the chosen lane rewrites it
    uint64_t own = 0;
    for (int b = lane * kPerLane; b < (lane + 1) * kPerLane && b < buckets; ++b) own += hist[b];
    uint64_t inclusive = own;  // over this lane and the lanes above it (higher buckets)
    for (int o = 1; o < 32; o <<= 1) {
        uint64_t n = __shfl_down_sync(0xffffffffu, inclusive, o);
        if (lane + o < 32) inclusive += n;
    }
    uint64_t above = inclusive - own;
    if (!(above < want && want <= above + own)) return;  // exactly one lane goes on
    for (int b = min((lane + 1) * kPerLane, buckets) - 1; b >= lane * kPerLane; --b) {
        if (want <= above + hist[b]) {
            prefix |= static_cast<uint32_t>(b) << digit_shift(level);
            need = want - above;
            return;
        }
        above += hist[b];
    }
}

// The cuts of the order (key descending, id ascending) of ids [0, n) that keep the first
// `need_count` ids (when by_count) and the shortest prefix whose weights reach `need_weight`
// (when by_weight; weight_of_key gives an id's weight from its key). A radix descent over the
// keys, 11 bits a level: each level histograms the ids still matching the chosen digits.
struct RadixShared {
    uint32_t hist_count[kBuckets];
    uint64_t hist_weight[kBuckets];
    uint32_t prefix[2];
    uint64_t need[2];
};

// One block's descent state, shared by every instantiation of radix_cuts (24 KiB).
__device__ RadixShared& radix_shared() {
    __shared__ RadixShared state;
    return state;
}

template <typename KeyOf>
__device__ void radix_cuts(KeyOf key_of, int64_t n, int shift, bool by_count, uint64_t need_count, bool by_weight,
                           uint64_t need_weight, Cut& count_cut, Cut& weight_cut) {
    RadixShared& sh = radix_shared();
    uint32_t* hist_count = sh.hist_count;
    uint64_t* hist_weight = sh.hist_weight;
    uint32_t* prefix = sh.prefix;
    uint64_t* need = sh.need;
    if (threadIdx.x == 0) prefix[0] = prefix[1] = 0, need[0] = need_count, need[1] = need_weight;
    for (int level = 0; level < kLevels; ++level) {
        for (int b = threadIdx.x; b < kBuckets; b += kThreads) hist_count[b] = 0, hist_weight[b] = 0;
        __syncthreads();
        uint32_t decided = decided_bits(level), want_count = prefix[0], want_weight = prefix[1];
        int low = digit_shift(level), mask = digit_buckets(level) - 1;
        for (int64_t i = threadIdx.x; i < n; i += kThreads) {
            uint32_t key = key_of(i);
            int bucket = static_cast<int>(key >> low) & mask;
            if (by_count && (key & decided) == want_count) atomicAdd(&hist_count[bucket], 1u);
            if (by_weight && (key & decided) == want_weight)
                atomicAdd(reinterpret_cast<unsigned long long*>(&hist_weight[bucket]), weight_of_key(key, shift));
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            if (by_count) choose_bucket(hist_count, level, prefix[0], need[0]);
            if (by_weight) choose_bucket(hist_weight, level, prefix[1], need[1]);
        }
        __syncthreads();
    }
    count_cut = {prefix[0], need[0]};
    uint64_t w = weight_of_key(prefix[1], shift);
    weight_cut = {prefix[1], w == 0 ? 0 : (need[1] + w - 1) / w};
    __syncthreads();  // the shared state is read before a later call resets it
}

// The keys of this thread's kPerThread consecutive ids of the tile at `base`; `valid`: below n.
template <typename KeyOf>
__device__ void load_tile(KeyOf key_of, int64_t base, int64_t n, uint32_t (&keys)[kPerThread], bool (&valid)[kPerThread]) {
    for (int j = 0; j < kPerThread; ++j) {
        int64_t id = base + threadIdx.x * kPerThread + j;
        valid[j] = id < n;
        keys[j] = valid[j] ? key_of(id) : 0u;
    }
}

// Whether each of a thread's ids is kept by `cut`, given the ids holding cut.key before this tile
// (`ties_before`, advanced past the tile). Ranks among ties come from a scan in id order.
__device__ void apply_cut(const uint32_t (&keys)[kPerThread], const bool (&valid)[kPerThread], const Cut& cut,
                          uint64_t& ties_before, bool (&kept)[kPerThread]) {
    uint64_t ties = 0;
    for (int j = 0; j < kPerThread; ++j) ties += valid[j] && keys[j] == cut.key;
    uint64_t tile_ties;
    uint64_t rank = ties_before + block_exclusive_scan(ties, tile_ties);
    for (int j = 0; j < kPerThread; ++j) {
        bool tie = valid[j] && keys[j] == cut.key;
        kept[j] = valid[j] && (keys[j] > cut.key || (tie && rank < cut.count));
        rank += tie;
    }
    ties_before += tile_ties;
}

// The token: the first id (ascending) where the running sum of kept weights exceeds `target`.
__device__ int draw_in_id_order(const float* e, int64_t n, int shift, const Cut* cut, float min_p, uint64_t target) {
    __shared__ int found;
    if (threadIdx.x == 0) found = -1;
    __syncthreads();
    uint64_t carry = 0, ties_before = 0;
    for (int64_t base = 0; base < n; base += kThreads * kPerThread) {
        uint32_t keys[kPerThread];
        bool valid[kPerThread], kept[kPerThread];
        load_tile([&](int64_t i) { return probability_key(e[i]); }, base, n, keys, valid);
        for (int j = 0; j < kPerThread; ++j) kept[j] = valid[j];
        if (cut != nullptr) apply_cut(keys, valid, *cut, ties_before, kept);
        uint64_t w[kPerThread], own = 0;
        for (int j = 0; j < kPerThread; ++j) {
            bool in = kept[j] && (min_p <= 0.0f || float_of_bits(keys[j]) >= min_p);
            own += w[j] = in ? weight_of_key(keys[j], shift) : 0;
        }
        uint64_t tile_total, before = carry + block_exclusive_scan(own, tile_total);
        if (before <= target && target < before + own) {
            for (int j = 0; j < kPerThread; ++j) {
                before += w[j];
                if (before > target) {
                    found = static_cast<int>(base + threadIdx.x * kPerThread + j);
                    break;
                }
            }
        }
        carry += tile_total;
        __syncthreads();
        if (found >= 0) break;
    }
    int token = found;
    __syncthreads();
    return token < 0 ? 0 : token;
}

// The sum of the weights that `cut` and min-p keep.
__device__ uint64_t kept_weight(const float* e, int64_t n, int shift, const Cut& cut, float min_p) {
    auto min_p_keeps = [&](float v) { return min_p <= 0.0f || v >= min_p; };
    uint64_t own = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
        if (probability_key(e[i]) > cut.key && min_p_keeps(e[i])) own += weight_of_key(probability_key(e[i]), shift);
    uint64_t total = block_sum_of(own);
    float cut_e = float_of_bits(cut.key);
    return total + (min_p_keeps(cut_e) ? cut.count * weight_of_key(cut.key, shift) : 0);
}

// A sampled (not greedy) row's token from its processed logits z; e goes to `e` (may be z).
__device__ int draw_row(const float* z, float* e, int64_t n, const SampleRow& p) {
    float max_z = row_max(z, n);
    int shift = weight_shift(n);
    uint64_t own = 0, own_min_p = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
        float v = relative_probability(z[i], max_z, p.temperature);
        e[i] = v;
        uint64_t w = weight_of(v, shift);
        own += w;
        own_min_p += p.min_p > 0.0f && v >= p.min_p ? w : 0;
    }
    uint64_t total = block_sum_of(own), kept_total = p.min_p > 0.0f ? block_sum_of(own_min_p) : total;
    if (total == 0) return 0;  // only when no logit is finite
    bool by_count = p.top_k > 0 && p.top_k < n, by_weight = p.top_p < 1.0f;
    Cut cut, count_cut, weight_cut;
    if (by_count || by_weight) {
        uint64_t need_weight = by_weight ? top_p_weight(p.top_p, total) : 0;
        if (by_weight && need_weight == 0) need_weight = 1;  // a top_p so small that it rounds to nothing: one token
        radix_cuts([&](int64_t i) { return probability_key(e[i]); }, n, shift, by_count, static_cast<uint64_t>(p.top_k),
                   by_weight, need_weight, count_cut, weight_cut);
        cut = !by_count || (by_weight && keeps_fewer(weight_cut, count_cut)) ? weight_cut : count_cut;
        kept_total = kept_weight(e, n, shift, cut, p.min_p);
    }
    uint64_t target = draw_target(random_bits53(p.seed, static_cast<uint64_t>(p.position)), kept_total);
    return draw_in_id_order(e, n, shift, by_count || by_weight ? &cut : nullptr, p.min_p, target);
}

// The chosen token's raw log-softmax, and the top `top` ids of the raw logits with theirs.
__device__ void write_logprobs(const float* logits, int64_t n, int token, int top, const SampleKernelArgs& a, int64_t r) {
    float max_l = row_max(logits, n);
    double own = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) own += expf(logits[i] - max_l);
    double log_z = max_l + log(block_sum_of(own));
    if (threadIdx.x == 0) a.logprobs[r] = static_cast<float>(logits[token] - log_z);
    if (top > n) top = static_cast<int>(n);
    if (top <= 0) return;
    Cut cut, unused;
    radix_cuts([&](int64_t i) { return logit_key(logits[i]); }, n, 0, true, static_cast<uint64_t>(top), false, 0, cut, unused);
    __shared__ int picked_ids[kMaxTop];
    __shared__ int picked;
    if (threadIdx.x == 0) picked = 0;
    __syncthreads();
    uint64_t ties_before = 0;
    for (int64_t base = 0; base < n; base += kThreads * kPerThread) {
        uint32_t keys[kPerThread];
        bool valid[kPerThread], kept[kPerThread];
        load_tile([&](int64_t i) { return logit_key(logits[i]); }, base, n, keys, valid);
        apply_cut(keys, valid, cut, ties_before, kept);
        for (int j = 0; j < kPerThread; ++j)
            if (kept[j]) picked_ids[atomicAdd(&picked, 1)] = static_cast<int>(base + threadIdx.x * kPerThread + j);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int i = 1; i < top; ++i)  // best first: value descending, ties to the lower id
        for (int j = i; j > 0; --j) {
            int a_id = picked_ids[j - 1], b_id = picked_ids[j];
            float va = logits[a_id], vb = logits[b_id];
            if (va > vb || (va == vb && a_id < b_id)) break;
            picked_ids[j - 1] = b_id, picked_ids[j] = a_id;
        }
    for (int i = 0; i < top; ++i) {
        a.top_tokens[r * a.top_width + i] = picked_ids[i];
        a.top_logprobs[r * a.top_width + i] = static_cast<float>(logits[picked_ids[i]] - log_z);
    }
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleKernelArgs a) {
    pdl_prologue();
    int64_t r = blockIdx.x, n = a.vocab;
    const SampleRow p = a.rows[r];
    const float* logits = a.logits + r * n;
    float* work = a.work + r * n;
    uint32_t* words = p.penalty_slot >= 0 ? a.penalty + p.penalty_slot * n : nullptr;
    const float* z = logits;
    if (words != nullptr || p.bias_count > 0) {
        write_processed(logits, n, p, a.bias, words, work);
        z = work;
    }
    int token = p.temperature <= 0.0f || p.top_k == 1 ? row_argmax(z, n) : draw_row(z, work, n, p);
    if (threadIdx.x == 0) {
        a.tokens[r] = token;
        if (words != nullptr) atomicAdd(&words[token], 1u);
    }
    if (p.logprobs >= 0) write_logprobs(logits, n, token, p.logprobs, a, r);
}

// Flags the prompt's tokens and counts the output's in one penalty row (zeroed before).
__global__ void reset_penalties_kernel(uint32_t* words, const int* tokens, int num_prompt, int num_tokens) {
    pdl_prologue();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < num_tokens; i += gridDim.x * blockDim.x) {
        if (i < num_prompt)
            atomicOr(&words[tokens[i]], kInPromptBit);
        else
            atomicAdd(&words[tokens[i]], 1u);
    }
}

}  // namespace

void CudaBackend::sample_rows(const SampleArgs& a) {
    DI_CUDA_OP("sample_rows");
    int64_t vocab = a.logits.dim(-1), rows = static_cast<int64_t>(a.rows.size());
    DI_CUDA_REQUIRE(vocab > 0 && vocab <= INT32_MAX && a.logits.numel() == rows * vocab && a.tokens.numel() == rows,
                    "sample_rows: logits " + a.logits.shape_string() + " for " + std::to_string(rows) + " rows");
    int top_width = a.top_tokens.defined() ? static_cast<int>(a.top_tokens.dim(-1)) : 0;
    for (const SampleRow& r : a.rows) {
        DI_CUDA_REQUIRE(r.bias_begin >= 0 && r.bias_count >= 0 && static_cast<size_t>(r.bias_begin + r.bias_count) <= a.bias.size(),
                        "sample_rows: bias entries out of range");
        DI_CUDA_REQUIRE(r.penalty_slot < 0 || (a.penalty_state.defined() && r.penalty_slot < a.penalty_state.dim(0) &&
                                               a.penalty_state.dim(-1) == vocab),
                        "sample_rows: penalty slot " + std::to_string(r.penalty_slot) + " without a matching state");
        DI_CUDA_REQUIRE(r.logprobs < 0 || a.logprobs.numel() == rows, "sample_rows: logprobs asked without an output");
        DI_CUDA_REQUIRE(r.logprobs <= std::min(top_width, kMaxTop), "sample_rows: too many top logprobs");
    }
    for (const LogitBias& b : a.bias)
        DI_CUDA_REQUIRE(b.token >= 0 && b.token < vocab, "sample_rows: bias token out of range");
    if (rows == 0) return;
    // The rows' parameters, then the biases, in one upload (the step's sampling metadata).
    size_t head = a.rows.size_bytes();
    Tensor meta = empty(DType::kU8, {static_cast<int64_t>(head + a.bias.size_bytes() + 16)});
    copy_to_device(meta.raw(), a.rows.data(), head);
    if (!a.bias.empty()) copy_to_device(meta.data<char>() + head, a.bias.data(), a.bias.size_bytes());
    Tensor work = empty(DType::kF32, {rows, vocab});
    SampleKernelArgs k{a.logits.data<float>(), vocab, meta.data<SampleRow>(),
                       reinterpret_cast<const LogitBias*>(meta.data<char>() + head),
                       a.penalty_state.defined() ? a.penalty_state.data<uint32_t>() : nullptr, work.data<float>(),
                       a.tokens.data<int>(), a.logprobs.defined() ? a.logprobs.data<float>() : nullptr,
                       top_width > 0 ? a.top_tokens.data<int>() : nullptr,
                       top_width > 0 ? a.top_logprobs.data<float>() : nullptr, top_width};
    launch_pdl(sample_rows_kernel, static_cast<unsigned>(rows), kThreads, 0, stream_, k);
}

void CudaBackend::reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt,
                                  std::span<const int32_t> output) {
    DI_CUDA_OP("reset_penalties");
    int64_t vocab = state.dim(-1);
    DI_CUDA_REQUIRE(slot >= 0 && slot < state.dim(0), "reset_penalties: slot " + std::to_string(slot) + " out of range");
    std::vector<int32_t> tokens(prompt.begin(), prompt.end());
    tokens.insert(tokens.end(), output.begin(), output.end());
    for (int32_t t : tokens) DI_CUDA_REQUIRE(t >= 0 && t < vocab, "reset_penalties: token out of range");
    uint32_t* words = state.data<uint32_t>() + slot * vocab;
    DI_CUDA_CHECK(cudaMemsetAsync(words, 0, static_cast<size_t>(vocab) * sizeof(uint32_t), stream_));
    if (tokens.empty()) return;
    Tensor dev = empty(DType::kI32, {static_cast<int64_t>(tokens.size())});
    copy_to_device(dev.raw(), tokens.data(), tokens.size() * sizeof(int32_t));
    int n = static_cast<int>(tokens.size());
    launch_pdl(reset_penalties_kernel, std::min(blocks_for(n, 256), sm_count_), 256, 0, stream_, words, dev.data<int>(),
               static_cast<int>(prompt.size()), n);
}

}  // namespace deepinfer::kernels::cuda
