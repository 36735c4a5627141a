// Backend::sample_rows and reset_penalties of the CPU backend (the host sampler) and of the CUDA
// backend (when a GPU is present) against the scalar reference, and the CUDA backend also against
// the host sampler, on random logits: the same token for every row and every combination of
// parameters (exactly: the definition's arithmetic is the same on every backend), logprobs within
// 5e-5, the penalty state counting the chosen tokens; and token frequencies against the exact
// distribution (chi-square at significance 0.001, 2^17 draws over a vocabulary of 129,280 on the
// GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ref/ref_backend.h"
#include "tests/sampling_stats.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

constexpr int64_t kVocab = 129280;      // DeepSeek-V4's
constexpr double kLogprobTolerance = 5e-5;  // absolute: the device sums exp in another order

// One sample_rows call's inputs on the host.
struct SampleCase {
    Tensor logits;  // [rows, vocab]
    std::vector<SampleRow> rows;
    std::vector<LogitBias> bias;
    Tensor state;  // [slots, vocab] int32 penalty words, or undefined
    int top_width = 0;
};

class SamplingOps : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        ref = make_reference_backend();
        host = cpu::make_cpu_backend(3, detect_isa());
        if (GetParam() == "cuda") {
            try {
                backend = make_cuda_backend(0);
            } catch (const Error& e) {
                GTEST_SKIP() << e.what();
            }
            return;
        }
        backend = cpu::make_cpu_backend(3, detect_isa());
    }
    void expect_reference_samples(const SampleCase& c, const std::string& what);
    std::unique_ptr<Backend> backend, ref, host;
    std::mt19937 rng{2024};
};

struct Sampled {
    std::vector<int32_t> tokens, top_tokens, state;
    std::vector<float> logprobs, top_logprobs;
};

template <typename T>
std::vector<T> fetch(Backend& b, const Tensor& t) {
    std::vector<T> v(t.defined() ? static_cast<size_t>(t.numel()) : 0);
    if (!v.empty()) b.download(t, v.data());
    return v;
}

// Runs sample_rows on `b` from uploads of the case's host tensors and brings every output back.
Sampled sample_on(Backend& b, const SampleCase& c) {
    int64_t rows = static_cast<int64_t>(c.rows.size());
    SampleArgs a;
    a.logits = b.upload(c.logits);
    a.rows = c.rows;
    a.bias = c.bias;
    if (c.state.defined()) a.penalty_state = b.upload(test::copy_of(c.state));
    a.tokens = b.empty(DType::kI32, {rows});
    a.logprobs = b.empty(DType::kF32, {rows});
    if (c.top_width > 0) a.top_tokens = b.empty(DType::kI32, {rows, c.top_width}), a.top_logprobs = b.empty(DType::kF32, {rows, c.top_width});
    b.sample_rows(a);
    Sampled s{fetch<int32_t>(b, a.tokens), fetch<int32_t>(b, a.top_tokens), {}, fetch<float>(b, a.logprobs), fetch<float>(b, a.top_logprobs)};
    if (c.state.defined()) s.state = fetch<int32_t>(b, a.penalty_state);
    return s;
}

// The row parameter sets every test runs: each option alone and in combinations.
std::vector<std::pair<std::string, SampleRow>> parameter_sets(int64_t vocab) {
    std::vector<std::pair<std::string, std::function<void(SampleRow&)>>> sets = {
        {"greedy", [](SampleRow& r) { r.temperature = 0.0f; }},
        {"top_k 1", [](SampleRow& r) { r.top_k = 1; }},
        {"temperature 1", [](SampleRow&) {}},
        {"temperature 0.6", [](SampleRow& r) { r.temperature = 0.6f; }},
        {"temperature 1.7", [](SampleRow& r) { r.temperature = 1.7f; }},
        {"top_k 2", [](SampleRow& r) { r.top_k = 2; }},
        {"top_k 50", [](SampleRow& r) { r.top_k = 50; }},
        {"top_k vocab - 1", [vocab](SampleRow& r) { r.top_k = static_cast<int32_t>(vocab - 1); }},
        {"top_p 0.9", [](SampleRow& r) { r.top_p = 0.9f; }},
        {"top_p 0.3", [](SampleRow& r) { r.top_p = 0.3f; }},
        {"top_p 1e-9", [](SampleRow& r) { r.top_p = 1e-9f; }},
        {"min_p 0.05", [](SampleRow& r) { r.min_p = 0.05f; }},
        {"min_p 0.5", [](SampleRow& r) { r.min_p = 0.5f; }},
        {"top_k 40 top_p 0.95", [](SampleRow& r) { r.top_k = 40, r.top_p = 0.95f; }},
        {"top_k 1000 top_p 0.6", [](SampleRow& r) { r.top_k = 1000, r.top_p = 0.6f; }},
        {"temperature 0.8 top_k 30 top_p 0.9 min_p 0.02", [](SampleRow& r) { r.temperature = 0.8f, r.top_k = 30, r.top_p = 0.9f, r.min_p = 0.02f; }},
        {"repetition 1.3", [](SampleRow& r) { r.repetition_penalty = 1.3f; }},
        {"presence 0.8 frequency 0.5", [](SampleRow& r) { r.presence_penalty = 0.8f, r.frequency_penalty = 0.5f; }},
        {"greedy with penalties", [](SampleRow& r) { r.temperature = 0.0f, r.repetition_penalty = 1.5f, r.frequency_penalty = 1.0f; }},
        {"penalties top_p 0.9 min_p 0.01", [](SampleRow& r) {
             r.repetition_penalty = 1.2f, r.presence_penalty = -0.5f, r.frequency_penalty = 0.4f, r.top_p = 0.9f, r.min_p = 0.01f;
         }},
        {"logprobs 0", [](SampleRow& r) { r.logprobs = 0; }},
        {"logprobs 5 top_k 20", [](SampleRow& r) { r.logprobs = 5, r.top_k = 20; }},
        {"logprobs 20 greedy", [](SampleRow& r) { r.logprobs = 20, r.temperature = 0.0f; }},
    };
    std::vector<std::pair<std::string, SampleRow>> out;
    for (auto& [name, set] : sets) {
        SampleRow r;
        set(r);
        out.emplace_back(name, r);
    }
    return out;
}

// Rows of random logits (each row its own) under every parameter set at `positions` positions;
// every other set also with a logit bias, and the sets with penalties reading a slot filled from
// a random prompt and output biased towards the row's likeliest tokens.
SampleCase make_case(Backend& b, int64_t vocab, int positions, std::mt19937& rng, const std::function<float()>& logit) {
    SampleCase c;
    std::vector<std::pair<std::string, SampleRow>> sets = parameter_sets(vocab);
    int64_t rows = static_cast<int64_t>(sets.size()) * positions;
    c.logits = Tensor::empty(DType::kF32, {rows, vocab});
    for (int64_t i = 0; i < c.logits.numel(); ++i) c.logits.data<float>()[i] = logit();
    c.state = Tensor::zeros(DType::kI32, {rows, vocab});
    c.top_width = 20;
    for (int64_t r = 0; r < rows; ++r) {
        SampleRow row = sets[static_cast<size_t>(r / positions)].second;
        row.seed = rng();
        row.position = static_cast<int64_t>(rng() % 100000);
        const float* l = c.logits.data<float>() + r * vocab;
        std::vector<int32_t> ids(static_cast<size_t>(vocab));
        std::iota(ids.begin(), ids.end(), 0);
        // The row's 64 likeliest ids first: bias and penalties on them change what is drawn.
        std::partial_sort(ids.begin(), ids.begin() + 64, ids.end(), [&](int32_t x, int32_t y) { return l[x] > l[y]; });
        auto pick = [&]() { return rng() % 2 ? ids[rng() % 64] : static_cast<int32_t>(rng() % vocab); };
        if (r % 2 == 1) {
            row.bias_begin = static_cast<int32_t>(c.bias.size());
            for (float v : {-3.0f, 2.5f, 8.0f, -100.0f, 100.0f * (r % 4 == 1)}) c.bias.push_back({pick(), v});
            std::sort(c.bias.begin() + row.bias_begin, c.bias.end(), [](auto x, auto y) { return x.token < y.token; });
            c.bias.erase(std::unique(c.bias.begin() + row.bias_begin, c.bias.end(), [](auto x, auto y) { return x.token == y.token; }),
                         c.bias.end());
            row.bias_count = static_cast<int32_t>(c.bias.size()) - row.bias_begin;
        }
        if (row.repetition_penalty != 1.0f || row.presence_penalty != 0.0f || row.frequency_penalty != 0.0f) {
            row.penalty_slot = static_cast<int32_t>(r);
            std::vector<int32_t> prompt(40), output(25);
            for (int32_t& t : prompt) t = pick();
            for (int32_t& t : output) t = pick();
            Tensor one = c.state.rows(r, r + 1);
            b.reset_penalties(one, 0, prompt, output);
        }
        c.rows.push_back(row);
    }
    return c;
}

void expect_same_samples(const Sampled& got, const Sampled& want, const SampleCase& c, const std::string& what) {
    std::vector<std::pair<std::string, SampleRow>> sets = parameter_sets(c.logits.dim(1));
    size_t positions = c.rows.size() / sets.size();
    for (size_t r = 0; r < c.rows.size(); ++r) {
        std::string row = what + ", row " + std::to_string(r) + " (" + sets[r / positions].first + (c.rows[r].bias_count ? ", bias)" : ")");
        EXPECT_EQ(got.tokens[r], want.tokens[r]) << row;
        if (c.rows[r].logprobs >= 0) {
            EXPECT_NEAR(got.logprobs[r], want.logprobs[r], kLogprobTolerance) << row;
        }
        for (int i = 0; i < c.rows[r].logprobs; ++i) {
            size_t at = r * static_cast<size_t>(c.top_width) + static_cast<size_t>(i);
            EXPECT_EQ(got.top_tokens[at], want.top_tokens[at]) << row << ", top " << i;
            EXPECT_NEAR(got.top_logprobs[at], want.top_logprobs[at], kLogprobTolerance) << row << ", top " << i;
        }
    }
    EXPECT_TRUE(got.state == want.state) << what << ": penalty states differ after sampling";
}

// The backend's samples against the scalar reference and, for a device backend, the host
// sampler (the CPU backend) itself.
void SamplingOps::expect_reference_samples(const SampleCase& c, const std::string& what) {
    Sampled got = sample_on(*backend, c);
    expect_same_samples(got, sample_on(*ref, c), c, what + ", against the reference");
    if (GetParam() != "cpu") expect_same_samples(got, sample_on(*host, c), c, what + ", against the host sampler");
}

TEST_P(SamplingOps, EveryParameterSetChoosesTheReferenceToken) {
    std::normal_distribution<float> normal(0.0f, 3.0f);
    expect_reference_samples(make_case(*ref, kVocab, 3, rng, [&] { return normal(rng); }), "vocabulary 129,280");
}

// Logits on a coarse grid, so that many are equal: the cuts of top-k, top-p and min-p fall inside
// runs of equal probability, where the lower ids must be kept first. An odd vocabulary size.
TEST_P(SamplingOps, TiesAreBrokenByTheLowerId) {
    std::normal_distribution<float> normal(0.0f, 1.5f);
    expect_reference_samples(make_case(*ref, 4099, 8, rng, [&] { return std::round(normal(rng) * 2.0f) / 2.0f; }),
                             "tied logits over 4,099");
}

TEST_P(SamplingOps, PenaltyStateCountsEachChosenToken) {
    int64_t vocab = 1000;
    SampleCase c;
    c.logits = test::random_f32({2, vocab}, rng, 2.0f);
    c.state = Tensor::zeros(DType::kI32, {3, vocab});
    std::vector<int32_t> prompt = {5, 7, 7, 999}, output = {7, 8, 8, 8, 0};
    Tensor slot2 = backend->upload(c.state);
    backend->reset_penalties(slot2, 2, prompt, output);
    std::vector<int32_t> words = fetch<int32_t>(*backend, slot2);
    std::vector<uint32_t> expect(3 * vocab, 0u);
    for (int32_t t : prompt) expect[2 * vocab + t] = 0x80000000u;
    for (int32_t t : output) expect[2 * vocab + t]++;
    EXPECT_TRUE(std::equal(expect.begin(), expect.end(), reinterpret_cast<const uint32_t*>(words.data())));
    std::memcpy(c.state.raw(), words.data(), c.state.nbytes());
    for (int step = 0; step < 5; ++step) {  // row 0 records into slot 2, row 1 reads nothing
        c.rows = {SampleRow{}, SampleRow{}};
        c.rows[0].penalty_slot = 2, c.rows[0].frequency_penalty = 0.1f, c.rows[0].position = step;
        c.rows[1].position = step;
        Sampled s = sample_on(*backend, c);
        expect[2 * vocab + s.tokens[0]]++;
        EXPECT_TRUE(std::equal(expect.begin(), expect.end(), reinterpret_cast<const uint32_t*>(s.state.data()))) << "step " << step;
        std::memcpy(c.state.raw(), s.state.data(), c.state.nbytes());
    }
}

// Frequencies of the backend's tokens against the exact distribution, at significance 0.001: on
// the GPU 2^17 draws over 129,280 tokens, on the CPU (the host sampler, also checked in
// runtime_tests) 2 * 10^4 draws over 1,000.
TEST_P(SamplingOps, FrequenciesFollowTheExactDistribution) {
    bool device = GetParam() == "cuda";
    int64_t vocab = device ? kVocab : 1000, rows = device ? 256 : 100, draws = device ? 1 << 17 : 20000;
    Tensor one_row = test::random_f32({vocab}, rng, 2.0f);
    std::vector<float> row(one_row.data<float>(), one_row.data<float>() + vocab);
    Tensor host = Tensor::empty(DType::kF32, {rows, vocab});
    for (int64_t r = 0; r < rows; ++r) std::copy(row.begin(), row.end(), host.data<float>() + r * vocab);
    Tensor logits = backend->upload(host), tokens = backend->empty(DType::kI32, {rows});
    std::vector<double> z(row.begin(), row.end());
    std::vector<LogitBias> bias = {{static_cast<int32_t>(vocab / 3), 6.0f}, {static_cast<int32_t>(vocab / 2), -2.0f}};
    for (auto [set, f] : std::vector<std::pair<SampleRow, test::FilterParams>>{
             {{}, {1.0, 0, 1.0, 0.0}},
             {{0.8f, 500}, {0.8, 500, 1.0, 0.0}},
             {{1.0f, 0, 0.9f}, {1.0, 0, 0.9, 0.0}},
             {{1.2f, 0, 1.0f, 0.01f}, {1.2, 0, 1.0, 0.01}},
             {{0.9f, 2000, 0.95f, 0.001f}, {0.9, 2000, 0.95, 0.001}}}) {
        std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
        bool biased = set.top_k == 2000;  // the last set also carries the bias
        std::vector<double> zb = z;
        if (biased) for (const LogitBias& b : bias) zb[b.token] += b.bias;
        for (int64_t done = 0; done < draws; done += rows) {
            std::vector<SampleRow> sets(static_cast<size_t>(rows), set);
            for (int64_t r = 0; r < rows; ++r) {
                sets[r].seed = 99, sets[r].position = done + r;
                if (biased) sets[r].bias_count = 2;
            }
            backend->sample_rows({logits, sets, bias, Tensor(), tokens});
            for (int32_t t : fetch<int32_t>(*backend, tokens)) counts[t]++;
        }
        test::ChiSquare c = test::chi_square(test::exact_distribution(zb, f), counts, draws);
        EXPECT_TRUE(c.passes()) << c.describe() << "; temperature " << f.temperature << " top_k " << f.top_k << " top_p "
                                << f.top_p << " min_p " << f.min_p;
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, SamplingOps, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace deepinfer::kernels
