#pragma once
// A recorder of Chrome-trace / Perfetto JSON (the Trace Event format): spans ("X" events) on
// per-thread tracks and counters, in microseconds since the recorder was enabled. Thread-safe; a
// disabled recorder costs one branch per span. Trace timings explain where a step's time goes;
// they are not throughput figures (what recording itself costs is in docs/benchmarks.md).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer {

class TraceRecorder {
public:
    void enable();
    bool enabled() const { return enabled_; }
    int64_t now_us() const;
    // A span [begin_us, end_us) on the calling thread's track.
    void span(std::string_view name, int64_t begin_us, int64_t end_us, nlohmann::json args = nullptr);
    void counter(std::string_view name, double value);
    // A span on the track called `track` (one per name, e.g. for work of other components that
    // has no thread of the engine's), from any thread.
    void span_on_track(std::string_view track, std::string_view name, int64_t begin_us, int64_t end_us,
                       nlohmann::json args = nullptr);
    // A steady-clock time in the trace's microseconds.
    int64_t us_of(std::chrono::steady_clock::time_point t) const;
    // Names the calling thread's track ("engine", "step executor", ...).
    void name_thread(std::string_view name);
    // {"traceEvents": [...]}; throws deepinfer::Error when the file cannot be written.
    void write(const std::string& path) const;

    // Records a span from construction to destruction (when the recorder is enabled).
    class Scope {
    public:
        Scope(TraceRecorder* trace, const char* name, nlohmann::json args = nullptr);
        ~Scope();
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        TraceRecorder* trace_;
        const char* name_;
        nlohmann::json args_;
        int64_t begin_ = 0;
    };

private:
    int track_locked();

    bool enabled_ = false;
    std::chrono::steady_clock::time_point origin_;
    mutable std::mutex mutex_;
    std::unordered_map<std::thread::id, int> tracks_;
    std::unordered_map<std::string, int> named_tracks_;
    int next_track_ = 1;
    std::vector<nlohmann::json> events_;
};

}  // namespace deepinfer
