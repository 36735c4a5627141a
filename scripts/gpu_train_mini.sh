#!/usr/bin/env bash
# Runs on the GPU machine: a smoke run of the deepinfer-mini training (a tiny model on CUDA),
# then the real run. Results land in OUT_DIR (the model as 15 MB tar parts); whatever the real run
# wrote comes back even when a later stage of it fails.
# Usage (repo root): scripts/gpu_train_mini.sh OUT_DIR [extra train_mini.py args]
set -uo pipefail
out=${1:?usage: gpu_train_mini.sh OUT_DIR}
shift
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
python3 scripts/train_mini.py /tmp/mini-smoke --smoke --steps 3 --batch 2 --seq 64 --anchors 4 > "$out/smoke.log" 2>&1 ||
    { echo "smoke run failed:"; tail -30 "$out/smoke.log"; }
python3 scripts/train_mini.py /tmp/mini "$@" 2>&1 | tee "$out/train.log"
status=$?
cp /tmp/mini/report.json /tmp/mini/heldout.safetensors /tmp/mini/code_prompts.jsonl "$out/" 2>/dev/null
[ -d /tmp/mini/model ] && tar -C /tmp/mini -cf - model | split -b 15m - "$out/model.tar.part-"
ls -la "$out"
exit $status
