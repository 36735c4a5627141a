#include "base/trace.h"

#include <fstream>

#include "base/error.h"

namespace deepinfer {

void TraceRecorder::enable() {
    origin_ = std::chrono::steady_clock::now();
    enabled_ = true;
}

int64_t TraceRecorder::now_us() const { return us_of(std::chrono::steady_clock::now()); }

int64_t TraceRecorder::us_of(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

int TraceRecorder::track_locked() {
    auto [it, added] = tracks_.try_emplace(std::this_thread::get_id(), next_track_);
    if (added) ++next_track_;
    return it->second;
}

void TraceRecorder::span_on_track(std::string_view track, std::string_view name, int64_t begin_us, int64_t end_us,
                                  nlohmann::json args) {
    if (!enabled_) return;
    nlohmann::json e = {{"name", name}, {"ph", "X"}, {"ts", begin_us}, {"dur", end_us - begin_us}, {"pid", 1}};
    if (!args.is_null()) e["args"] = std::move(args);
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, added] = named_tracks_.try_emplace(std::string(track), next_track_);
    if (added) {
        ++next_track_;
        events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", it->second}, {"args", {{"name", track}}}});
    }
    e["tid"] = it->second;
    events_.push_back(std::move(e));
}

void TraceRecorder::span(std::string_view name, int64_t begin_us, int64_t end_us, nlohmann::json args) {
    if (!enabled_) return;
    nlohmann::json e = {{"name", name}, {"ph", "X"}, {"ts", begin_us}, {"dur", end_us - begin_us}, {"pid", 1}};
    if (!args.is_null()) e["args"] = std::move(args);
    std::lock_guard<std::mutex> lock(mutex_);
    e["tid"] = track_locked();
    events_.push_back(std::move(e));
}

void TraceRecorder::counter(std::string_view name, double value) {
    if (!enabled_) return;
    nlohmann::json e = {{"name", name}, {"ph", "C"}, {"ts", now_us()}, {"pid", 1}, {"args", {{"value", value}}}};
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(e));
}

void TraceRecorder::name_thread(std::string_view name) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", track_locked()}, {"args", {{"name", name}}}});
}

void TraceRecorder::write(const std::string& path) const {
    std::ofstream out(path);
    DI_CHECK(out.good(), "cannot write the trace to {}", path);
    std::lock_guard<std::mutex> lock(mutex_);
    out << nlohmann::json{{"traceEvents", events_}, {"displayTimeUnit", "ms"}}.dump() << "\n";
    DI_CHECK(out.good(), "writing the trace to {} failed", path);
}

TraceRecorder::Scope::Scope(TraceRecorder* trace, const char* name, nlohmann::json args)
    : trace_(trace && trace->enabled() ? trace : nullptr), name_(name), args_(std::move(args)) {
    if (trace_) begin_ = trace_->now_us();
}

TraceRecorder::Scope::~Scope() {
    if (trace_) trace_->span(name_, begin_, trace_->now_us(), std::move(args_));
}

}  // namespace deepinfer
