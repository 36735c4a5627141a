// Prefix caching on a multi-turn chat workload and a shared system prompt: TTFT and throughput
// with the cache off, in the device pool only, with host memory (DRAM), a disk directory and a
// Redis store below it; each tier's read-back bandwidth (as the cache measured it) next to the
// raw bandwidth of the same medium measured in the same run.
//
// Every column runs each workload twice. Pass 1 starts cold (later turns reuse earlier ones);
// pass 2 repeats the same requests, so the whole prompts are cached somewhere, and is what the
// tier columns differ in:
//   off     the cache off (both passes compute everything)
//   device  the device pool holds everything
//   +dram   the device pool holds a fraction; the rest went to host memory
//   +disk   pass 2 on a restarted engine (empty pool and host memory) reading the disk
//           directory, whose pages were dropped from the page cache first
//   +redis  pass 2 on another engine with neither host memory nor disk, reading Redis
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "apps/engine_options.h"
#include "bench/prefix_workload.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

const std::vector<std::string> kColumns = {"off", "device", "+dram", "+disk", "+redis"};

struct Options {
    std::string model, tokenizer, device = "cpu", small_memory = "24MiB", memory = "1GiB", host_memory = "2GiB";
    std::string disk_dir = "/tmp/deepinfer-prefix-bench", redis_url, json_out, trace;
    int threads = 0, block_size = 16, replay = 140;
    bool deterministic = false;
    std::vector<std::string> columns = kColumns;
    bench::WorkloadShape shape;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Copies between two host buffers: the DRAM tier's medium.
double raw_dram_gbps() {
    std::vector<char> a(256 << 20, 1), b(256 << 20);
    double best = 0;
    for (int i = 0; i < 5; ++i) {
        auto t = Clock::now();
        std::memcpy(b.data(), a.data(), a.size());
        best = std::max(best, a.size() / seconds_since(t) / 1e9);
    }
    return best;
}

// Pages of a file dropped from the page cache (written back first), so reads go to the disk.
void drop_cached_pages(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

void drop_directory_pages(const std::string& dir) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) drop_cached_pages(e.path().string());
}

// A 256 MiB file in the cache directory, written, dropped from the page cache, read back.
double raw_disk_gbps(const std::string& dir) {
    std::string path = dir + "/raw-bandwidth.tmp";
    std::vector<char> block(4 << 20, 7);
    {
        std::ofstream out(path, std::ios::binary);
        for (int i = 0; i < 64; ++i) out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
    drop_cached_pages(path);
    auto t = Clock::now();
    int fd = ::open(path.c_str(), O_RDONLY);
    int64_t total = 0;
    for (ssize_t n; (n = ::read(fd, block.data(), block.size())) > 0;) total += n;
    ::close(fd);
    double gbps = total / seconds_since(t) / 1e9;
    std::filesystem::remove(path);
    return gbps;
}

// GETs of a 4 MiB value from the same Redis (-1 when it cannot be reached).
double raw_redis_gbps(const std::string& url) {
    std::string host = "127.0.0.1";
    int port = 6379;
    if (auto colon = url.rfind(':'); colon != std::string::npos && colon > 6) {
        port = std::stoi(url.substr(colon + 1));
        host = url.substr(url.find("//") == std::string::npos ? 0 : url.find("//") + 2, colon - (url.find("//") + 2));
    }
    redisContext* c = redisConnect(host.c_str(), port);
    if (c == nullptr || c->err) return -1;
    std::string value(4 << 20, 'x');
    freeReplyObject(redisCommand(c, "SET deepinfer:bench:raw %b", value.data(), value.size()));
    auto t = Clock::now();
    for (int i = 0; i < 16; ++i) freeReplyObject(redisCommand(c, "GET deepinfer:bench:raw"));
    double gbps = 16.0 * value.size() / seconds_since(t) / 1e9;
    freeReplyObject(redisCommand(c, "DEL deepinfer:bench:raw"));
    redisFree(c);
    return gbps;
}

EngineConfig engine_config(const Options& o, bool cache, const std::string& memory) {
    EngineConfig c;
    c.model.path = o.model.empty() ? apps::default_model_dir() : o.model;
    c.model.tokenizer_path = o.tokenizer;
    c.model.device = o.device;
    c.model.threads = o.threads;
    c.model.swa_replay_tokens = o.replay;
    c.cache.memory_bytes = apps::parse_bytes(memory);
    c.cache.block_size = o.block_size;
    c.cache.max_sequences = o.shape.concurrency;
    c.scheduler.max_running = o.shape.concurrency;
    c.cache.prefix.enabled = cache;
    c.deterministic = o.deterministic;
    return c;
}

json pass_json(const bench::PassResult& p, const EngineStats& before, const EngineStats& after) {
    json tiers = json::array();
    for (size_t i = 0; i < after.prefix_cache.tiers.size(); ++i) {
        const auto& a = after.prefix_cache.tiers[i];
        PrefixCacheTierStats b = i < before.prefix_cache.tiers.size() ? before.prefix_cache.tiers[i] : PrefixCacheTierStats{};
        double secs = a.read_seconds - b.read_seconds;
        int64_t bytes = a.bytes_read - b.bytes_read;
        tiers.push_back({{"tier", a.tier}, {"hit_tokens", a.hit_tokens - b.hit_tokens}, {"bytes_read", bytes},
                         {"read_gbps", secs > 0 ? bytes / secs / 1e9 : 0.0}, {"errors", a.errors - b.errors}});
    }
    return {{"seconds", p.seconds}, {"ttft_p50_ms", p.ttft_p50_ms()}, {"ttft_mean_ms", p.ttft_mean_ms()},
            {"tokens_per_s", p.tokens_per_s()}, {"prompt_tokens", p.prompt_tokens()}, {"cached_tokens", p.cached_tokens()},
            {"tiers", tiers}};
}

// Runs the workload's two passes for one column; the engines are made by the column's rules.
json run_column(const Options& o, const std::string& column, const bench::Workload& w, json& trace) {
    EngineConfig first = engine_config(o, column != "off", column == "+dram" ? o.small_memory : o.memory);
    if (column == "+dram") first.cache.prefix.host_bytes = apps::parse_bytes(o.host_memory);
    if (column == "+disk") first.cache.prefix.disk_dir = o.disk_dir + "/" + w.shape().name;
    if (column == "+redis") first.cache.prefix.remote_url = o.redis_url;
    json out = {{"column", column}};
    auto engine = Engine::create(first);
    EngineStats s0 = engine->stats();
    bench::PassResult p1 = w.run(*engine);
    EngineStats s1 = engine->stats();
    out["pass1"] = pass_json(p1, s0, s1);
    if (column == "+disk" || column == "+redis") {  // pass 2 on a fresh engine, reading below
        engine.reset();
        if (column == "+disk") drop_directory_pages(first.cache.prefix.disk_dir);
        engine = Engine::create(first);
        s1 = engine->stats();
    }
    bench::PassResult p2 = w.run(*engine);
    out["pass2"] = pass_json(p2, s1, engine->stats());
    json per_tier = json::object();  // a counter track: tokens each tier spared in pass 2
    for (const auto& t : out["pass2"]["tiers"]) per_tier[t["tier"].get<std::string>()] = t["hit_tokens"];
    trace.push_back({{"name", w.shape().name + " hit tokens per tier"}, {"ph", "C"}, {"ts", p2.seconds * 1e6},
                     {"pid", column}, {"args", per_tier}});
    for (const auto& r : p2.requests)
        trace.push_back({{"name", w.shape().name + " u" + std::to_string(r.user) + " t" + std::to_string(r.turn)},
                         {"cat", column}, {"ph", "X"}, {"ts", r.start_s * 1e6}, {"dur", (r.end_s - r.start_s) * 1e6},
                         {"pid", column}, {"tid", r.user},
                         {"args", {{"cached_tokens", r.cached_tokens}, {"prompt_tokens", r.prompt_tokens},
                                   {"ttft_ms", (r.first_token_s - r.start_s) * 1e3}}}});
    return out;
}

void print_table(const json& result) {
    for (const auto& wl : result["workloads"]) {
        std::printf("\n%s (pass 2; pass 1 TTFT p50 in brackets)\n", wl["workload"].get<std::string>().c_str());
        std::printf("%-8s %12s %12s %10s %8s  %s\n", "column", "TTFT p50 ms", "TTFT mean", "tok/s", "cached", "read-back GB/s");
        for (const auto& c : wl["columns"]) {
            const json& p = c["pass2"];
            std::string reads;
            for (const auto& t : p["tiers"])
                if (t["hit_tokens"].get<int64_t>() > 0 || t["bytes_read"].get<int64_t>() > 0)
                    reads += t["tier"].get<std::string>() + " " + std::to_string(t["read_gbps"].get<double>()).substr(0, 5) + "  ";
            double cached = p["prompt_tokens"].get<double>() > 0 ? p["cached_tokens"].get<double>() / p["prompt_tokens"].get<double>() : 0;
            std::printf("%-8s %7.1f (%5.1f) %10.1f %10.1f %7.1f%%  %s\n", c["column"].get<std::string>().c_str(),
                        p["ttft_p50_ms"].get<double>(), c["pass1"]["ttft_p50_ms"].get<double>(), p["ttft_mean_ms"].get<double>(),
                        p["tokens_per_s"].get<double>(), 100 * cached, reads.c_str());
        }
    }
    std::printf("\nraw: DRAM copy %.2f GB/s, disk read %.2f GB/s, Redis GET %.2f GB/s\n", result["raw_gbps"]["dram"].get<double>(),
                result["raw_gbps"]["disk"].get<double>(), result["raw_gbps"]["redis"].get<double>());
}

}  // namespace

static int run(const Options& o) {
    std::filesystem::create_directories(o.disk_dir);
    json result = {{"raw_gbps", {{"dram", raw_dram_gbps()}, {"disk", raw_disk_gbps(o.disk_dir)},
                                 {"redis", o.redis_url.empty() ? -1.0 : raw_redis_gbps(o.redis_url)}}}};
    json trace = json::array();
    for (std::string name : {"multi-turn", "shared-prompt"}) {
        bench::WorkloadShape shape = o.shape;
        shape.name = name;
        bench::Workload w(shape, Engine::create(engine_config(o, false, o.memory))->vocab_size());
        json wl = {{"workload", name}, {"columns", json::array()}};
        for (const std::string& column : o.columns)
            if (column != "+redis" || !o.redis_url.empty()) wl["columns"].push_back(run_column(o, column, w, trace));
        result["workloads"].push_back(wl);
        std::filesystem::remove_all(o.disk_dir + "/" + name);
    }
    print_table(result);
    if (!o.json_out.empty()) std::ofstream(o.json_out) << result.dump(2) << "\n";
    if (!o.trace.empty()) std::ofstream(o.trace) << json{{"traceEvents", trace}}.dump() << "\n";
    return 0;
}

int main(int argc, char** argv) {
    Options o;
    CLI::App app("Prefix-cache benchmark: multi-turn chat and a shared system prompt, per cache tier");
    app.add_option("--model", o.model);
    app.add_option("--tokenizer", o.tokenizer, "tokenizer directory (default: the model's)");
    app.add_option("--device", o.device);
    app.add_option("--threads", o.threads);
    app.add_option("--users", o.shape.users);
    app.add_option("--turns", o.shape.turns);
    app.add_option("--system-len", o.shape.system_len, "tokens of each user's opening document / the shared system prompt");
    app.add_option("--message-len", o.shape.message_len);
    app.add_option("--output-len", o.shape.output_len);
    app.add_option("--concurrency", o.shape.concurrency);
    app.add_option("--block-size", o.block_size);
    app.add_option("--swa-replay-tokens", o.replay);
    app.add_option("--cache-memory", o.memory, "device pool of the device, +disk and +redis columns");
    app.add_option("--small-cache-memory", o.small_memory, "device pool of the +dram column");
    app.add_option("--host-cache-memory", o.host_memory, "host memory of the +dram column");
    app.add_option("--disk-dir", o.disk_dir);
    app.add_option("--redis-url", o.redis_url, "a running Redis (the +redis column is skipped without one)");
    app.add_option("--json", o.json_out, "write the results as JSON to this file");
    app.add_option("--trace", o.trace, "write pass 2's requests as a Chrome trace to this file");
    app.add_option("--columns", o.columns, "columns to run, in order (default: all)")
        ->delimiter(',')
        ->check(CLI::IsMember(kColumns));
    app.add_flag("--deterministic", o.deterministic,
                 "deterministic requests: hits replay the exact length (the model's layers x (window - 1) + 1)");
    CLI11_PARSE(app, argc, argv);
    try {
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_prefix_cache: %s\n", e.what());
        return 1;
    }
}
