// `deepinfer serve`: the OpenAI-compatible HTTP server. SIGTERM / SIGINT drain it: new requests
// are refused, in-flight ones get the grace period to finish, then are cancelled.
#include <csignal>
#include <thread>

#include "apps/commands.h"
#include "base/logging.h"
#include "deepinfer/engine.h"
#include "server/openai_server.h"

namespace deepinfer::apps {

void add_serve_command(CLI::App& app, ServeOptions& o) {
    auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
    cmd->add_option("--host", o.server.host, "address to listen on");
    cmd->add_option("--port", o.server.port, "port (0 = any free port)")->check(CLI::Range(0, 65535));
    cmd->add_option("--served-model-name", o.engine.config.model.name, "model name in the API (default: directory name)");
    cmd->add_option("--max-connections", o.server.max_connections)->check(CLI::PositiveNumber);
    cmd->add_option("--shutdown-grace", o.server.shutdown_grace_s, "seconds in-flight requests may run after SIGTERM")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--api-key", o.server.api_key, "require this bearer token");
    add_engine_options(cmd, o.engine);
}

int run_serve(ServeOptions& o, const std::string& log_level) {
    // Block the shutdown signals in every thread; one thread waits for them.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

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
