#!/usr/bin/env bash
# Prefill/decode disaggregation on one GPU (binaries built elsewhere into build-cuda/bin, their
# libraries in .devcache/lib, as for gpu_run_cuda.sh), on a random flash-dims checkpoint:
#  - raw bandwidths: host memcpy and UCX between two processes (bench_pd_transfer), and pinned
#    host<->device copies (PyTorch, when the machine has it);
#  - a mixed load against one `serve` instance, then against `router` + a prefill and a decode
#    instance sharing the GPU: long prompts (LONG_IN tokens in, 16 out) at each Poisson rate in
#    RATES beside CONC closed-loop long outputs (256 in, LONG_OUT out), DURATION seconds per point;
#  - the decode instance's transfer metrics (bytes, TTFT split).
# JSON lines to $OUT/pd/mixed.jsonl (one per setup and rate), the picture to $OUT/pd/mixed.svg.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d build-cuda/bin ] || [ ! -f .devcache/pack/cuda_run.tar.xz ] || tar -xJf .devcache/pack/cuda_run.tar.xz
export LD_LIBRARY_PATH="$PWD/.devcache/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# UCX's transport modules travel beside its libraries when the machine has no UCX of its own.
[ -d .devcache/lib/ucx ] && export UCX_MODULE_DIR="$PWD/.devcache/lib/ucx"
out=${OUT:-/tmp}/pd
mkdir -p "$out"
bin=build-cuda/bin
ckpt=/tmp/ckpt-flash-dims
[ -d "$ckpt" ] || timeout 300 $bin/make_random_v4 --preset flash-dims --out "$ckpt" | tail -2
# Block size 8: prefixes are cached (and shipped) in spans of 8 x 128 = 1,024 tokens.
engine=(--model "$ckpt" --tokenizer models/deepseek-v4-tokenizer --device cuda --cache-memory 16GiB --max-sequences 64 --block-size 8)

echo "=== raw bandwidths"
# As serve uses it (peer-failure detection: TCP on one host), then as shared memory would go.
timeout 120 $bin/bench_pd_transfer --sizes-mib 1,4,16 --total-mib 1024 | tee "$out/transfer.json"
timeout 120 $bin/bench_pd_transfer --sizes-mib 1,4,16 --total-mib 1024 --no-peer-failure | tee -a "$out/transfer.json"
python3 - <<'EOF' | tee "$out/device_copy.json"
import json
try:
    import torch
except ImportError:
    print(json.dumps({"error": "no torch"})); raise SystemExit
n = 1 << 30
host = torch.empty(n, dtype=torch.uint8).pin_memory()
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
def best(f):
    t = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize(); t.append(a.elapsed_time(b) / 1e3)
    return n / min(t) / 1e9
print(json.dumps({"pinned_h2d_GBps": best(lambda: dev.copy_(host, non_blocking=True)),
                  "pinned_d2h_GBps": best(lambda: host.copy_(dev, non_blocking=True))}))
EOF

pids=()
start() {  # start NAME PORT ARGS...: a server, waited for until it serves
    local name=$1 port=$2
    shift 2
    $bin/deepinfer "$@" --port "$port" > "$out/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 900); do grep -qE "serving|routing" "$out/$name.log" && return 0; sleep 0.2; done
    echo "$name did not start"; tail -5 "$out/$name.log"; return 1
}
stop_all() { kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=(); }
trap stop_all EXIT

# mixed SETUP PORT: one point per rate; both loads start together and run DURATION seconds.
mixed() {
    local setup=$1 port=$2
    for r in ${RATES:-0.5 1 2}; do
        common=(--port "$port" --duration "${DURATION:-25}" --vocab 1000 --json)
        $bin/deepinfer bench-serve "${common[@]}" --rate "$r" --input-len "${LONG_IN:-4096}" --output-len 16 --seed 1 > /tmp/pd_long_prompt.json &
        local lp=$!
        $bin/deepinfer bench-serve "${common[@]}" --concurrency "${CONC:-16}" --input-len 256 --output-len "${LONG_OUT:-512}" --seed 2 \
            > /tmp/pd_long_output.json
        wait $lp
        python3 - "$setup" "$r" <<'EOF' | tee -a "$out/mixed.jsonl"
import json, sys
lp, lo = (json.load(open(f"/tmp/pd_{k}.json")) for k in ("long_prompt", "long_output"))
print(json.dumps({"mode": sys.argv[1], "rate": float(sys.argv[2]), "concurrency": lo["concurrency"],
                  "output_tokens_per_s": lp["output_tokens_per_s"] + lo["output_tokens_per_s"],
                  "prompt_tokens_per_s": lp["requests_per_s"] * lp["input_len"] + lo["requests_per_s"] * lo["input_len"],
                  "ttft_ms": lp["ttft_ms"], "tpot_ms": lo["tpot_ms"], "long_output_ttft_ms": lo["ttft_ms"],
                  "long_prompt_tpot_ms": lp["tpot_ms"], "failed": lp["failed"] + lo["failed"],
                  "requests": lp["requests"] + lo["requests"],
                  "first_error": lp.get("first_error") or lo.get("first_error")}))
EOF
    done
}

: > "$out/mixed.jsonl"
echo "=== one instance"
start single 8140 serve "${engine[@]}" && mixed single 8140
stop_all
echo "=== router + prefill + decode on one GPU"
start prefill 8141 serve "${engine[@]}" --role prefill &&
    start decode 8142 serve "${engine[@]}" --role decode &&
    start router 8143 router --prefill 127.0.0.1:8141 --decode 127.0.0.1:8142 && mixed pd 8143
curl -s 127.0.0.1:8142/metrics | grep -E '^deepinfer_(pd_|ttft_)' > "$out/decode_metrics.txt"
curl -s 127.0.0.1:8143/metrics | grep -E '^deepinfer_router' > "$out/router_metrics.txt"
stop_all
python3 scripts/plot_pd_curve.py "$out/mixed.jsonl" "$out/mixed.svg" && echo "wrote $out/mixed.svg"
