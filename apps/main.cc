// The deepinfer command line: parses flags into the library's configs and runs one subcommand.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/commands.h"
#include "base/error.h"
#include "base/logging.h"

int main(int argc, char** argv) {
    CLI::App app{"DeepInfer: inference engine for the DeepSeek-V4 family"};
    app.require_subcommand(1);
    std::string log_level = "warn";
    app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
    deepinfer::apps::LogitsOptions logits;
    deepinfer::apps::add_logits_command(app, logits);
    deepinfer::apps::EvalOptions eval;
    deepinfer::apps::add_eval_command(app, eval);
    deepinfer::apps::GenerateOptions generate;
    deepinfer::apps::add_generate_command(app, generate);
    deepinfer::apps::BenchOptions bench;
    deepinfer::apps::add_bench_command(app, bench);
    deepinfer::apps::ServeOptions serve;
    deepinfer::apps::add_serve_command(app, serve);
    deepinfer::apps::BenchServeOptions bench_serve;
    deepinfer::apps::add_bench_serve_command(app, bench_serve);
    deepinfer::cluster::RouterConfig router;
    deepinfer::apps::add_router_command(app, router);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        deepinfer::set_log_level(log_level);
        if (app.got_subcommand("logits")) return deepinfer::apps::run_logits(logits);
        if (app.got_subcommand("eval")) return deepinfer::apps::run_eval(eval);
        if (app.got_subcommand("generate")) return deepinfer::apps::run_generate(generate, log_level);
        if (app.got_subcommand("bench")) return deepinfer::apps::run_bench(bench, log_level);
        if (app.got_subcommand("serve")) return deepinfer::apps::run_serve(serve, log_level);
        if (app.got_subcommand("bench-serve")) return deepinfer::apps::run_bench_serve(bench_serve);
        if (app.got_subcommand("router")) return deepinfer::apps::run_router(router);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deepinfer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
