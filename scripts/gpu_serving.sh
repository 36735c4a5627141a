#!/usr/bin/env bash
# Serving on the GPU (binaries built elsewhere into build-cuda/bin, their libraries in
# .devcache/lib, as for gpu_run_cuda.sh): on a random flash-dims checkpoint (V4-Flash layer sizes),
#  - `deepinfer generate --prompts` 64 prompts (about 128 tokens) x 256 output tokens, greedy and
#    temperature 1 (its summary line: output tok/s after loading);
#  - `deepinfer bench` greedy vs temperature 1, and with --trace (the trace's cost), at the
#    concurrencies in CONCURRENCY (default "1 64"), 512 prompt / 128 output tokens (TRACE=0: no traced run);
#  - with `curve` (or `curve-only`, without the above): `deepinfer serve --device cuda` under
#    bench/serve_curve.sh (RATES, CURVE_CONCURRENCY);
#  - `structured`: only `deepinfer bench --json-schema bench/schemas/records.json` at concurrency
#    64, greedy and temperature 1 (a constrained pass, then an unconstrained one of the same lengths).
# JSON lines, traces and the curve go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d build-cuda/bin ] || [ ! -f .devcache/pack/cuda_run.tar.xz ] || tar -xJf .devcache/pack/cuda_run.tar.xz
export LD_LIBRARY_PATH="$PWD/.devcache/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
out=${OUT:-/tmp}
bin=build-cuda/bin
ckpt=/tmp/ckpt-flash-dims
[ -d "$ckpt" ] || timeout 300 $bin/make_random_v4 --preset flash-dims --out "$ckpt" | tail -2
engine=(--model "$ckpt" --tokenizer models/deepseek-v4-tokenizer --device cuda --cache-memory 16GiB --max-sequences 64)
if [ "${1:-}" = structured ]; then
    for t in 0 1; do
        timeout 300 $bin/deepinfer bench "${engine[@]}" --num-prompts 128 --concurrency 64 --input-len 512 --output-len 128 \
            --temperature $t --json-schema bench/schemas/records.json --json | tee -a "$out/bench_structured.jsonl"
    done
    exit 0
fi
if [ "${1:-}" != curve-only ]; then
    python3 -c "
import json
words = 'the engine serves tokens as fast as the forward pass allows when sampling stays on the device '.split()
for i in range(64): print(json.dumps({'prompt': ' '.join(words[(i + k) % len(words)] for k in range(128)), 'seed': i}))
" > /tmp/prompts64.jsonl
    for t in 0 1; do
        echo "generate 64 x 256, temperature $t"
        timeout 300 $bin/deepinfer generate "${engine[@]}" --prompts /tmp/prompts64.jsonl --max-tokens 256 --ignore-eos \
            --temperature $t --output /dev/null 2>&1 | tail -1 | tee -a "$out/generate.txt"
    done
fi
[ "${1:-}" = curve-only ] || for c in ${CONCURRENCY:-1 64}; do
    n=$(( c > 8 ? c * 2 : 16 ))
    for t in 0 1; do
        timeout 300 $bin/deepinfer bench "${engine[@]}" --num-prompts $n --concurrency $c --input-len 512 --output-len 128 \
            --temperature $t --json | tee -a "$out/bench.jsonl"
    done
    [ "${TRACE:-1}" = 0 ] || timeout 300 $bin/deepinfer bench "${engine[@]}" --num-prompts $n --concurrency $c --input-len 512 \
        --output-len 128 --temperature 1 --trace "$out/trace_c$c.json" --json | tee -a "$out/bench_traced.jsonl"
done
if [ "${1:-}" = curve ] || [ "${1:-}" = curve-only ]; then
    BIN=$bin/deepinfer SERVE_ARGS="${engine[*]}" RATES="${RATES:-1 4 16}" CONCURRENCY="${CURVE_CONCURRENCY:-1 16 64}" \
        DURATION=${DURATION:-30} bench/serve_curve.sh "$out/curve" | tail -1
fi
