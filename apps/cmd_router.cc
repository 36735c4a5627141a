// `deepinfer router`: the front door for several `deepinfer serve` instances (data-parallel
// replicas, or prefill and decode instances paired per request). SIGTERM / SIGINT drain it.
#include <csignal>
#include <thread>

#include "apps/commands.h"
#include "base/logging.h"
#include "cluster/router/router.h"

namespace deepinfer::apps {

void add_router_command(CLI::App& app, cluster::RouterConfig& c) {
    auto* cmd = app.add_subcommand("router", "Route OpenAI-compatible requests across deepinfer serve instances");
    cmd->add_option("--host", c.http.host, "address to listen on");
    cmd->add_option("--port", c.http.port, "port (0 = any free port)")->check(CLI::Range(0, 65535));
    cmd->add_option("--replica", c.replicas, "a data-parallel instance (host:port); repeat or comma-separate")->delimiter(',');
    cmd->add_option("--prefill", c.prefill, "a prefill instance (serve --role prefill)")->delimiter(',');
    cmd->add_option("--decode", c.decode, "a decode instance (serve --role decode)")->delimiter(',');
    cmd->add_option("--cache-weight", c.cache_weight, "how many tokens of queued load a likely cached prompt token outweighs "
                                                      "(0 = balance load only)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-attempts", c.max_attempts, "instances tried per request that fails before answering")->check(CLI::PositiveNumber);
    cmd->add_option("--health-interval", c.health_interval_s, "seconds between health probes of each instance")->check(CLI::PositiveNumber);
    cmd->add_option("--request-timeout", c.request_timeout_s, "seconds an instance may stay silent within a request")->check(CLI::PositiveNumber);
    cmd->add_option("--shutdown-grace", c.http.shutdown_grace_s, "seconds in-flight requests may run after SIGTERM")->check(CLI::NonNegativeNumber);
    cmd->add_option("--io-threads", c.http.io_threads, "event-loop threads")->check(CLI::PositiveNumber);
}

int run_router(cluster::RouterConfig& c) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    // Long generations stream through the router: its connections are not idle while they do.
    c.http.write_timeout_s = std::max(c.http.write_timeout_s, 60.0);
    cluster::Router router(c);
    router.bind();
    std::printf("deepinfer: routing on http://%s:%d\n", c.http.host.c_str(), router.port());
    std::fflush(stdout);
    std::thread waiter([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        spdlog::warn("router: received signal {}: draining", sig);
        router.stop();
    });
    router.run();
    waiter.join();
    std::printf("deepinfer: router stopped\n");
    return 0;
}

}  // namespace deepinfer::apps
