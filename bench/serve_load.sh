#!/usr/bin/env bash
# The server load target (docs/server.md): `deepinfer serve` on the tiny random V4 checkpoint
# (make_random_v4 --preset tiny, 2M parameters, so the server rather than the matmuls is
# measured; MODEL=dir for another) with STREAMS concurrent SSE streams (closed loop) and IDLE
# half-sent sockets held open beside them, /health probed every 100 ms, the server's resident
# memory sampled over the run. Prints bench-serve's JSON.
#   bench/serve_load.sh [STREAMS=2000] [IDLE=1000] [SECONDS=60]
set -euo pipefail
cd "$(dirname "$0")/.."
streams=${1:-2000}; idle=${2:-1000}; seconds=${3:-60}
bin=${BIN:-build/bin/deepinfer}
port=${PORT:-8130}
model=${MODEL:-}
model_args=(--model "$model")
if [ -z "$model" ]; then  # the random checkpoint has no tokenizer of its own
    model=/tmp/deepinfer-v4-tiny
    [ -d "$model" ] || build/bin/make_random_v4 --preset tiny --out "$model" > /dev/null
    model_args=(--model "$model" --tokenizer models/deepseek-v4-tokenizer)
fi
$bin serve --port "$port" "${model_args[@]}" --max-sequences 64 --max-running 64 > /tmp/deepinfer_serve_load.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q serving /tmp/deepinfer_serve_load.log && break; sleep 0.1; done
$bin bench-serve --port "$port" --concurrency "$streams" --duration "$seconds" --input-len 32 --output-len 16 \
    --idle-sockets "$idle" --health-interval-ms 100 --vocab 4096 --server-pid "$pid" --json
