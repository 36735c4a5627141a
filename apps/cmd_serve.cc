// `deepinfer serve`: the OpenAI-compatible HTTP server. SIGTERM / SIGINT drain it: new requests
// are refused, in-flight ones get the grace period to finish, then are cancelled.
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "apps/commands.h"
#include "base/error.h"
#include "base/logging.h"
#include "deepinfer/engine.h"
#include "server/openai_server.h"

namespace deepinfer::apps {

void add_serve_command(CLI::App& app, ServeOptions& o) {
    auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
    ServerConfig& s = o.server;
    cmd->add_option("--host", s.host, "address to listen on");
    cmd->add_option("--port", s.port, "port (0 = any free port)")->check(CLI::Range(0, 65535));
    cmd->add_option("--served-model-name", o.engine.config.model.name, "model name in the API (default: directory name)");
    cmd->add_option("--shutdown-grace", s.shutdown_grace_s, "seconds in-flight requests may run after SIGTERM")->check(CLI::NonNegativeNumber);
    cmd->add_option("--api-key", s.api_key, "require this bearer token (visible to other users in the process list: prefer "
                                            "--api-key-file or DEEPINFER_API_KEY)");
    cmd->add_option("--api-key-file", o.api_key_file, "read the bearer token from this file")->check(CLI::ExistingFile);
    cmd->add_option("--io-threads", s.io_threads, "event-loop threads serving the connections")->check(CLI::PositiveNumber);
    cmd->add_option("--max-connections", s.max_connections, "open connections; more get 503")->check(CLI::PositiveNumber);
    cmd->add_option("--max-body-bytes", s.max_body_bytes, "largest request body (413)")->check(CLI::PositiveNumber);
    cmd->add_option("--max-header-bytes", s.max_header_bytes, "largest request line + headers (431)")->check(CLI::PositiveNumber);
    cmd->add_option("--max-header-count", s.max_header_count, "most header fields (431)")->check(CLI::PositiveNumber);
    cmd->add_option("--header-timeout", s.header_timeout_s, "seconds a request head may take to arrive (408)")->check(CLI::PositiveNumber);
    cmd->add_option("--body-timeout", s.body_timeout_s, "seconds a request body may take to arrive (408)")->check(CLI::PositiveNumber);
    cmd->add_option("--idle-timeout", s.idle_timeout_s, "seconds a kept-alive connection may idle")->check(CLI::PositiveNumber);
    cmd->add_option("--max-json-depth", s.max_json_depth, "deepest nesting of a request body (400)")->check(CLI::PositiveNumber);
    cmd->add_option("--max-sequences-per-request", s.max_sequences_per_request, "prompts x n x best_of of one request (400)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--max-pending-requests", s.max_pending_requests, "completion requests in flight; more get 429")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--role", s.role, "prefill/decode disaggregation: prefill (answers /internal/prefill), decode (takes each "
                                      "prompt's state from a prefill instance) or both")
        ->check(CLI::IsMember({"prefill", "decode", "both"}));
    cmd->add_option("--prefill-instance", s.prefill_instance, "decode: the prefill instance (host:port) for requests that name "
                                                              "none in the X-DeepInfer-Prefill header");
    cmd->add_option("--prefill-timeout", s.prefill_timeout_s, "decode: seconds a silent prefill instance is waited for before "
                                                              "prefilling locally")->check(CLI::PositiveNumber);
    o.engine.config.cache.prefix.staging_spans = 64;  // serving: room for a few prompts in flight between instances
    cmd->add_option("--pd-staging-spans", o.engine.config.cache.prefix.staging_spans,
                    "host slots (prefix-cache spans) kept for prompt state on its way to or from another instance")
        ->check(CLI::NonNegativeNumber);
    add_engine_options(cmd, o.engine);
}

// The API key: --api-key, else --api-key-file (first line), else DEEPINFER_API_KEY.
static void resolve_api_key(ServeOptions& o) {
    if (!o.server.api_key.empty()) return;
    if (!o.api_key_file.empty()) {
        std::ifstream in(o.api_key_file);
        std::getline(in, o.server.api_key);
        DI_CHECK(!o.server.api_key.empty(), "--api-key-file {}: the first line (the key) is empty", o.api_key_file);
        return;
    }
    if (const char* env = std::getenv("DEEPINFER_API_KEY")) o.server.api_key = env;
}

int run_serve(ServeOptions& o, const std::string& log_level) {
    // Block the shutdown signals in every thread; one thread waits for them.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    resolve_api_key(o);
    DI_CHECK(o.server.role == "both" || o.engine.prefix_cache, "--role {} needs the prefix cache (it carries the prompt's state)",
             o.server.role);
    auto engine = Engine::create(finish_engine_config(o.engine, log_level));
    server::OpenAiServer http(*engine, o.server);
    http.bind();
    std::printf("deepinfer: serving %s on http://%s:%d\n", engine->model_name().c_str(), o.server.host.c_str(), http.port());
    std::fflush(stdout);
    std::thread waiter([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        spdlog::warn("received signal {}: draining", sig);
        http.stop();
    });
    http.run();
    waiter.join();
    engine->shutdown(false);
    std::printf("deepinfer: stopped\n");
    return 0;
}

}  // namespace deepinfer::apps
