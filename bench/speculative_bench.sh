#!/usr/bin/env bash
# Speculative decoding end to end: `deepinfer bench` with drafts off and with drafts in each of MODES
# ([METHOD@]VERIFY:K = --speculative METHOD (default $METHOD, else ngram) --spec-verify VERIFY
# --num-draft-tokens K), in alternating rounds on one machine, prompts cut from the text files given
# (code, so that prompt lookup finds something). Prints one table: output tokens/s (min / median /
# max over the rounds), TPOT p50, the mean tokens per verification (the sampled token included)
# and the acceptance by draft position; the speed-up is the ratio of the medians against off.
#   bench/speculative_bench.sh FILE... [env: MODEL, DEVICE=cpu, CONCURRENCY=1, TEMPERATURE=0, ROUNDS=3,
#       MODES="fixed:2 fixed:4 fixed:8 confidence:8" (e.g. "mtp@fixed:2 ngram@fixed:4"), METHOD=ngram, PROMPTS=16,
#       INPUT=256, OUTPUT=256, EXTRA]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 FILE..." >&2; exit 2; }
bin=${BIN:-build/bin/deepinfer}
model_args=()
[ -n "${MODEL:-}" ] && model_args=(--model "$MODEL")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
modes=(off)
for m in ${MODES:-fixed:2 fixed:4 fixed:8 confidence:8}; do modes+=("$m"); done
for round in $(seq "${ROUNDS:-3}"); do
    for mode in "${modes[@]}"; do
        spec=(--speculative off)
        method=${METHOD:-ngram} verify=$mode
        [[ $mode == *@* ]] && method=${mode%%@*} verify=${mode#*@}
        [ "$mode" != off ] && spec=(--speculative "$method" --spec-verify "${verify%:*}" --num-draft-tokens "${verify#*:}")
        # shellcheck disable=SC2086
        "$bin" bench "${model_args[@]}" --device "${DEVICE:-cpu}" --num-prompts "${PROMPTS:-16}" --input-len "${INPUT:-256}" \
            --output-len "${OUTPUT:-256}" --concurrency "${CONCURRENCY:-1}" --temperature "${TEMPERATURE:-0}" \
            --prompts-from "$@" "${spec[@]}" ${EXTRA:-} --json | tail -1 > "$out/$mode.$round.json"
    done
done
python3 - "$out" "${modes[@]}" <<'PY'
import json, statistics, sys, glob
out, modes = sys.argv[1], sys.argv[2:]
runs = {m: [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{m}.*.json"))] for m in modes}
base = statistics.median(r["output_tokens_per_s"] for r in runs["off"])
print("| drafts | output tok/s (min / median / max) | speed-up | TPOT p50 ms | tokens per verification | kept by position |")
print("| --- | --- | --- | --- | --- | --- |")
for m in modes:
    tps = sorted(r["output_tokens_per_s"] for r in runs[m])
    med = statistics.median(tps)
    tpot = statistics.median(r["tpot_ms"]["p50"] for r in runs[m])
    sp = runs[m][-1]["speculative"]
    per = " ".join(f"{x:.2f}" for x in sp["acceptance_by_position"]) or "-"
    tpv = f'{sp["mean_tokens_per_verification"]:.2f}' if sp["verifications"] else "-"
    print(f"| {m} | {tps[0]:.1f} / {med:.1f} / {tps[-1]:.1f} | {med / base:.2f}x | {tpot:.3f} | {tpv} | {per} |")
PY
