#include "bench/prefix_workload.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

namespace deepinfer::bench {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int32_t vocab) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
    return t;
}

}  // namespace

double PassResult::ttft_p50_ms() const {
    std::vector<double> v;
    for (const auto& r : requests) v.push_back((r.first_token_s - r.start_s) * 1e3);
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

double PassResult::ttft_mean_ms() const {
    double s = 0;
    for (const auto& r : requests) s += (r.first_token_s - r.start_s) * 1e3;
    return requests.empty() ? 0 : s / requests.size();
}

int64_t PassResult::prompt_tokens() const {
    int64_t n = 0;
    for (const auto& r : requests) n += r.prompt_tokens;
    return n;
}

int64_t PassResult::cached_tokens() const {
    int64_t n = 0;
    for (const auto& r : requests) n += r.cached_tokens;
    return n;
}

double PassResult::tokens_per_s() const {
    int64_t n = prompt_tokens();
    for (const auto& r : requests) n += r.output_tokens;
    return seconds > 0 ? n / seconds : 0;
}

Workload::Workload(WorkloadShape shape, int32_t vocab) : shape_(std::move(shape)) {
    std::mt19937_64 rng(shape_.seed);
    bool shared = shape_.name == "shared-prompt";
    std::vector<int32_t> system = random_tokens(rng, shape_.system_len, vocab);
    int turns = shared ? 1 : shape_.turns;
    for (int u = 0; u < shape_.users; ++u) {
        openings_.push_back(shared ? system : random_tokens(rng, shape_.system_len, vocab));
        messages_.emplace_back();
        for (int t = 0; t < turns; ++t) messages_.back().push_back(random_tokens(rng, shape_.message_len, vocab));
    }
}

// One user's turns in order: each resends the history so far plus the next message.
void Workload::run_user(Engine& engine, int user, std::vector<RequestRecord>& out, Clock::time_point t0) const {
    std::vector<int32_t> history = openings_[user];
    for (size_t t = 0; t < messages_[user].size(); ++t) {
        history.insert(history.end(), messages_[user][t].begin(), messages_[user][t].end());
        GenerationRequest r;
        r.prompt_tokens = history;
        r.sampling.temperature = 0.0f;
        r.sampling.max_tokens = shape_.output_len;
        r.sampling.ignore_eos = true;
        RequestRecord rec{user, static_cast<int>(t), since(t0)};
        auto stream = engine.submit(std::move(r));
        while (auto ev = stream->next()) {
            for (const auto& s : ev->sequences) {
                if (!s.tokens.empty() && rec.first_token_s == 0) rec.first_token_s = since(t0);
                history.insert(history.end(), s.tokens.begin(), s.tokens.end());
            }
            rec.prompt_tokens = ev->prompt_tokens;
            rec.output_tokens = ev->completion_tokens;
            rec.cached_tokens = ev->cached_tokens;
        }
        rec.end_s = since(t0);
        out.push_back(rec);
    }
}

PassResult Workload::run(Engine& engine) const {
    PassResult result;
    std::vector<std::vector<RequestRecord>> per_user(shape_.users);
    std::atomic<int> next{0};
    auto start = Clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < std::min(shape_.concurrency, shape_.users); ++c)
        clients.emplace_back([&] {
            for (int u; (u = next++) < shape_.users;) run_user(engine, u, per_user[u], start);
        });
    for (auto& t : clients) t.join();
    result.seconds = since(start);
    for (auto& recs : per_user) result.requests.insert(result.requests.end(), recs.begin(), recs.end());
    return result;
}

}  // namespace deepinfer::bench
