#!/usr/bin/env bash
# The latency-throughput curve: `deepinfer serve` (extra flags from SERVE_ARGS, e.g.
# "--device cuda --model /tmp/ckpt") under bench-serve at each request rate in RATES (Poisson
# arrivals) and each concurrency in CONCURRENCY, DURATION seconds each; one JSON line per point in
# OUT.jsonl, drawn to OUT.svg by scripts/plot_serve_curve.py. Counts delivered tokens only.
#   RATES="1 2 4 8" CONCURRENCY="1 16 64" DURATION=30 bench/serve_curve.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-serve_curve}
bin=${BIN:-build/bin/deepinfer}
port=${PORT:-8131}
$bin serve --port "$port" ${SERVE_ARGS:-} > "$out.serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 600); do grep -q serving "$out.serve.log" && break; sleep 0.2; done
: > "$out.jsonl"
common=(--port "$port" --duration "${DURATION:-30}" --input-len "${INPUT_LEN:-512}" --output-len "${OUTPUT_LEN:-128}"
        --vocab "${VOCAB:-1000}" --server-pid "$pid" --json)
for r in ${RATES:-}; do $bin bench-serve "${common[@]}" --rate "$r" >> "$out.jsonl" || true; done
for c in ${CONCURRENCY:-}; do $bin bench-serve "${common[@]}" --concurrency "$c" >> "$out.jsonl" || true; done
python3 scripts/plot_serve_curve.py "$out.jsonl" "$out.svg"
echo "wrote $out.jsonl and $out.svg"
