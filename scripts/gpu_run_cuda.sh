#!/usr/bin/env bash
# Runs on the GPU machine from a copy of the tree: the CUDA backend's tests and benchmark, using
# binaries built elsewhere (build-cuda/bin) and the shared libraries they need (.devcache/lib).
# Writes its log to $OUT/cuda_run.log.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=build-cuda/bin
export LD_LIBRARY_PATH="$PWD/.devcache/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export DEEPINFER_TEST_DATA="$PWD/tests/data"
log="${OUT:-/tmp}/cuda_run.log"
step() { echo "=== $* ===" | tee -a "$log"; }
run() { timeout "$1" "${@:2}" 2>&1 | tee -a "$log" | tail -40; echo "rc=${PIPESTATUS[0]}" | tee -a "$log"; }

step device; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee -a "$log"
step kernel ops vs reference; run 120 $bin/kernel_tests --gtest_filter='*cuda*'
step V4 parity on CUDA; run 120 $bin/model_tests --gtest_filter='*Cuda*'
step engine tests on CUDA; DEEPINFER_TEST_DEVICE=cuda run 180 $bin/runtime_tests --gtest_filter='Engine*'
prompt=$'def fibonacci(n):\n'
for dev in cpu cuda; do
    step "nano greedy on $dev"
    run 60 $bin/deepinfer generate --model models/deepinfer-nano --device $dev --prompt "$prompt" --max-tokens 48 \
        --temperature 0 --cache-memory 64MiB --max-sequences 4
done
step make gpu-5b; run 180 $bin/make_random_v4 --preset gpu-5b --out /tmp/gpu-5b
step forward bench cuda
run 200 $bin/bench_forward --model /tmp/gpu-5b --device cuda --prompt 128,1024 --batch 1,8,32 --decode-steps 16
