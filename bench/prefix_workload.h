#pragma once
// The prefix-cache benchmark's workloads, run through the engine API by a few client threads:
//   multi-turn: each user opens with a long document of their own and then asks `turns`
//     questions; every turn resends the whole history (document, questions, answers) plus a new
//     message, as chat clients do.
//   shared-prompt: every user sends one long system prompt shared by all, plus a question.
// A pass runs every user once; records keep each request's TTFT and cached tokens.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer::bench {

struct WorkloadShape {
    std::string name;  // "multi-turn" or "shared-prompt"
    int users = 8, turns = 4, system_len = 1024, message_len = 64, output_len = 16, concurrency = 4;
    uint64_t seed = 1;
};

struct RequestRecord {
    int user = 0, turn = 0;
    double start_s = 0, first_token_s = 0, end_s = 0;  // since the pass started
    int prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;
};

struct PassResult {
    std::vector<RequestRecord> requests;
    double seconds = 0;
    double ttft_p50_ms() const;
    double ttft_mean_ms() const;
    double tokens_per_s() const;  // prompt + output tokens per second of the pass
    int64_t prompt_tokens() const;
    int64_t cached_tokens() const;
};

// The same users, messages and (greedy) answers on every pass and engine.
class Workload {
public:
    Workload(WorkloadShape shape, int32_t vocab);
    PassResult run(Engine& engine) const;
    const WorkloadShape& shape() const { return shape_; }

private:
    void run_user(Engine& engine, int user, std::vector<RequestRecord>& out, std::chrono::steady_clock::time_point t0) const;
    WorkloadShape shape_;
    std::vector<std::vector<int32_t>> openings_;                // per user
    std::vector<std::vector<std::vector<int32_t>>> messages_;   // per user, per turn
};

}  // namespace deepinfer::bench
