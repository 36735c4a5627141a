#!/usr/bin/env bash
# Runs on the GPU machine from a copy of the tree: the CUDA backend's tests and benchmark, using
# binaries built elsewhere (build-cuda/bin) and the shared libraries they need (.devcache/lib).
# Writes its log to $OUT/cuda_run.log. Then the forward benchmark on >= 5B random checkpoints, ours
# (bench_forward --device cuda) next to HF transformers (hf_forward_bench.py) on the same work.
# `gpu_run_cuda.sh tests` stops after the tests (and the short device sampling benchmark);
# `gpu_run_cuda.sh prefix` then runs the prefix-cache benchmark; `gpu_run_cuda.sh precision` the
# perplexity and speed of each precision; `gpu_run_cuda.sh ab SET...` then
# times kernel variants; `gpu_run_cuda.sh profile` runs the tests, then only our benchmark with a per-op profile
# of one decode step per batch size and the per-kernel times of one batch-1 step (Nsight Compute,
# scripts/ncu_kernel_table.py).
set -uo pipefail
cd "$(dirname "$0")/.."
# The binaries and libraries may come packed (scripts/pack_cuda_run.sh BINARY...: only those a run
# needs, since the working tree and the pack together must fit the machine's transfer limit).
[ -d build-cuda/bin ] || [ ! -f .devcache/pack/cuda_run.tar.xz ] || tar -xJf .devcache/pack/cuda_run.tar.xz
bin=build-cuda/bin
export LD_LIBRARY_PATH="$PWD/.devcache/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export DEEPINFER_TEST_DATA="$PWD/tests/data"
log="${OUT:-/tmp}/cuda_run.log"
step() { echo "=== $* ===" | tee -a "$log"; }
run() { timeout "$1" "${@:2}" 2>&1 | tee -a "$log" | tail -40; echo "rc=${PIPESTATUS[0]}" | tee -a "$log"; }

step device; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee -a "$log"
# `gpu_run_cuda.sh determinism [tests|bench]`: deterministic mode only. The batch-invariance kernel
# tests (and the default kernels' op tests), the engine's determinism tests on CUDA, then flash-dims
# forward steps in both modes one after the other (the cost of the mode).
if [ "${1:-}" = determinism ]; then
    if [ "${2:-}" != bench ]; then
        step batch-invariant kernels; run 240 $bin/kernel_tests --gtest_filter='*BatchInvariance*:*BackendOps*cuda*'
        step determinism in the engine on CUDA
        DEEPINFER_TEST_DEVICE=cuda run 420 $bin/prefix_cache_tests --gtest_filter="${DET_FILTER:-*Determinism*}"
    fi
    [ "${2:-}" = tests ] && exit 0
    rm -rf /tmp/ckpt-*; step "make flash-dims"; run 200 $bin/make_random_v4 --preset flash-dims --out /tmp/ckpt-flash-dims
    step "forward bench cuda (flash-dims), default vs deterministic"
    run 400 $bin/bench_forward --model /tmp/ckpt-flash-dims --device cuda --prompt 1024,8192 --batch 1,8,64 \
        --decode-steps 16 --deterministic both
    # The engine end to end (greedy, 512 in / 128 out), each concurrency in both modes.
    for c in 1 64; do
        for mode in "" --deterministic; do
            step "engine bench cuda (flash-dims), concurrency $c ${mode:-default}"
            run 300 $bin/deepinfer bench --model /tmp/ckpt-flash-dims --tokenizer models/deepseek-v4-tokenizer --device cuda \
                --cache-memory 16GiB --max-sequences 64 --num-prompts $((c == 1 ? 8 : 128)) --input-len 512 \
                --output-len 128 --concurrency $c $mode
        done
    done
    exit 0
fi
# `gpu_run_cuda.sh speculative [bench|sps]`: speculative decoding. The carry kernels against the
# reference (with slack rows), V4 / V4.1 parity, the engine's speculative tests on CUDA (their
# engines run --deterministic, so drafts or not the logits are the same bits), then the bundled
# model end to end with n-gram drafts vs none at concurrency 1 (bench/speculative_bench.sh on the
# text files in .devcache/prompts) and the verify cost SPS(B) on flash-dims (bench_forward
# --verify-tokens: steps of B sequences x T tokens).
if [ "${1:-}" = speculative ]; then
    if [ "${2:-}" != bench ] && [ "${2:-}" != sps ]; then
        step carry kernels; run 120 $bin/kernel_tests --gtest_filter='*Compressor*cuda*:*PairPooling*cuda*'
        step V4 and V4.1 parity on CUDA; run 120 $bin/model_tests --gtest_filter='*Cuda*'
        step speculative decoding in the engine on CUDA
        DEEPINFER_TEST_DEVICE=cuda run 300 $bin/speculative_tests --gtest_filter="${SPEC_FILTER:--SpeculativeDistribution*}"
    fi
    if [ "${2:-}" != sps ]; then
        step "nano, n-gram drafts vs none, concurrency 1, greedy (cuda)"
        BIN=$bin DEVICE=cuda ROUNDS=${ROUNDS:-2} run 240 bench/speculative_bench.sh .devcache/prompts/*.py
    fi
    [ -n "${SKIP_SPS:-}" ] && exit 0
    rm -rf /tmp/ckpt-*; step "make flash-dims"; run 200 $bin/make_random_v4 --preset flash-dims --out /tmp/ckpt-flash-dims
    step "verify cost SPS(B) on flash-dims"
    run 300 $bin/bench_forward --model /tmp/ckpt-flash-dims --device cuda --prompt 16 --batch 1,16,64 \
        --verify-tokens 1,2,3,5,9 --decode-steps 8
    exit 0
fi
# SKIP_TESTS=1 goes straight to the benchmark of the mode (e.g. a second call on a warm machine).
if [ -z "${SKIP_TESTS:-}" ]; then
# Includes the device sampler against the reference and the host sampler (Backends/SamplingOps.*/cuda).
step kernel ops vs reference; run 240 $bin/kernel_tests --gtest_filter='*cuda*'
step V4 and V4.1 parity on CUDA; run 120 $bin/model_tests --gtest_filter='*Cuda*'
step engine tests on CUDA; DEEPINFER_TEST_DEVICE=cuda run 180 $bin/runtime_tests --gtest_filter='Engine*'
step structured output in the engine on CUDA: mask kernel, device argmax vs the host sampler
DEEPINFER_TEST_DEVICE=cuda run 180 $bin/runtime_tests --gtest_filter='StructuredEngine*'
step V4.1 replay and prefix sharing in the engine on CUDA
DEEPINFER_TEST_DEVICE=cuda run 120 $bin/model_tests --gtest_filter='V41ReplayEngine*'
# Hits from the device pool, host memory (side-stream copies), the disk and Redis give the same
# tokens and logprobs bit for bit as without the cache (the Redis cases skip without redis-server).
# On CUDA the v4_tiny cases run the engine's deterministic mode (batch-invariant kernels): with
# the default kernels its replayed rows, run in other batch shapes, move in the last bits.
step prefix cache exactness and faults on CUDA
DEEPINFER_TEST_DEVICE=cuda run 300 $bin/prefix_cache_tests
# Device sampling: the time to choose one token per 129,280-logit row and bring the ids back, next
# to bringing the rows themselves back (what the host sampler needed).
step device sampling benchmark; run 120 $bin/bench_sampling --device cuda --rows 1,8,64
fi
[ "${1:-}" = tests ] && exit 0
# Benchmark checkpoints (make_random_v4 presets): gpu-5b (5.9B, small layers, 12 of them) and
# flash-dims (8.7B, V4-Flash's layer sizes); PRESETS="..." picks some.
presets=${PRESETS:-gpu-5b flash-dims}
make_checkpoint() { step "make $1"; rm -rf /tmp/ckpt-*; run 200 $bin/make_random_v4 --preset "$1" --out "/tmp/ckpt-$1"; }
# `gpu_run_cuda.sh ab SET SET...`: after the tests, batch-1 and batch-8 decode of each preset
# under each kernel variant set (bench_forward --variant, e.g. attention_decode=0 or
# gemv_one_row_warp_rows=4,gemv_one_row_warp_unroll=4), timed alternately in one process.
if [ "${1:-}" = ab ]; then
    variant_args=()
    for set in "${@:2}"; do variant_args+=(--variant "$set"); done
    for p in $presets; do
        make_checkpoint "$p"
        step "variants A/B ($p): ${*:2}"
        run 300 $bin/bench_forward --model "/tmp/ckpt-$p" --device cuda --prompt 16 --batch 1,8 --decode-steps 16 \
            --graphs both "${variant_args[@]}"
    done
    exit 0
fi
# `gpu_run_cuda.sh prefix`: after the tests, the prefix-cache benchmark on flash-dims (multi-turn
# chat and a shared system prompt; cache off / device / +dram / +disk / +redis when redis-server
# is there), JSON and a Chrome trace into $OUT.
if [ "${1:-}" = prefix ]; then
    make_checkpoint flash-dims
    redis_args=()
    if command -v redis-server >/dev/null; then
        redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --pidfile /tmp/prefix-redis.pid
        sleep 1
        redis_args=(--redis-url redis://127.0.0.1:6399)
    fi
    step "prefix cache bench (flash-dims)"
    run 600 $bin/bench_prefix_cache --model /tmp/ckpt-flash-dims --tokenizer models/deepseek-v4-tokenizer --device cuda --block-size 8 --users 16 --turns 4 \
        --system-len 4096 --message-len 128 --output-len 32 --concurrency 4 --cache-memory 8GiB \
        --small-cache-memory 64MiB --host-cache-memory 16GiB --disk-dir /tmp/prefix-bench "${redis_args[@]}" \
        --json "${OUT:-/tmp}/prefix_bench.json" --trace "${OUT:-/tmp}/prefix_trace.json"
    [ -f /tmp/prefix-redis.pid ] && kill "$(cat /tmp/prefix-redis.pid)"
    exit 0
fi
# `gpu_run_cuda.sh precision`: the bundled model's held-out perplexity on CUDA in each precision
# (exact, the architecture's own, fast), then flash-dims prefill and decode in each, next to HF.
if [ "${1:-}" = precision ]; then
    step "nano held-out perplexity on CUDA per precision"
    DEEPINFER_TEST_DEVICE=cuda run 240 $bin/model_tests --gtest_filter='DeepinferNano.*Perplexity*'
    make_checkpoint flash-dims
    for prec in ${PRECISIONS:-exact auto fast}; do
        step "forward bench cuda (flash-dims), precision $prec"
        run 200 $bin/bench_forward --model /tmp/ckpt-flash-dims --device cuda --precision "$prec" --prompt 1024,8192 \
            --batch ${BATCHES:-1,64} --decode-steps 8
    done
    [ -n "${SKIP_HF:-}" ] && exit 0
    step "forward bench HF transformers (flash-dims)"
    run 200 python3 scripts/hf_forward_bench.py --model /tmp/ckpt-flash-dims --prompt 1024,8192 --batch 1,64 --decode-steps 8
    exit 0
fi
if [ "${1:-}" = profile ]; then
    for p in $presets; do
        make_checkpoint "$p"
        step "forward bench cuda with profile ($p)"
        run 240 $bin/bench_forward --model "/tmp/ckpt-$p" --device cuda --prompt 1024 --batch 1,8,64 --decode-steps 16 \
            --graphs both --profile
        step "kernels of one batch-1 decode step, Nsight Compute ($p)"
        timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
            $bin/bench_forward --model "/tmp/ckpt-$p" --device cuda --prompt 16 --batch 1 --decode-steps 2 --graphs off \
            --context 16 > "${OUT:-/tmp}/ncu-$p.csv" 2>/dev/null
        python3 scripts/ncu_kernel_table.py "${OUT:-/tmp}/ncu-$p.csv" 2>&1 | tee -a "$log" | head -40
    done
    exit 0
fi
prompt=$'def fibonacci(n):\n'
for dev in cpu cuda; do
    step "nano greedy on $dev"
    run 60 $bin/deepinfer generate --model models/deepinfer-nano --device $dev --prompt "$prompt" --max-tokens 48 \
        --temperature 0 --cache-memory 64MiB --max-sequences 4
done
for p in $presets; do
    make_checkpoint "$p"
    step "forward bench cuda ($p)"
    run 240 $bin/bench_forward --model "/tmp/ckpt-$p" --device cuda --prompt 1024,8192 --batch 1,8,64 --decode-steps 16 \
        --graphs both
    step "forward bench HF transformers ($p)"
    run 200 python3 scripts/hf_forward_bench.py --model "/tmp/ckpt-$p" --prompt 1024,8192 --batch 1,8,64 --decode-steps 8
done
