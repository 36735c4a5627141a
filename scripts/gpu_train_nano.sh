#!/usr/bin/env bash
# Runs on the GPU machine: HF greedy references for the V4 fixtures, a smoke run of the nano
# training, then the real run. Results land in OUT_DIR (the model as 15 MB tar parts).
# Usage (repo root): scripts/gpu_train_nano.sh OUT_DIR [extra train_nano.py args]
set -euo pipefail
out=${1:?usage: gpu_train_nano.sh OUT_DIR}
shift
export PYTHONUNBUFFERED=1
python3 scripts/gen_v4_greedy_reference.py tests/data/v4
tar -czf "$out/greedy_refs.tar.gz" tests/data/v4/*/greedy_reference.safetensors
python3 scripts/train_nano.py /tmp/nano-smoke --smoke --steps 3 --batch 2 > "$out/smoke.log" 2>&1 ||
    { tail -40 "$out/smoke.log"; exit 1; }
python3 scripts/train_nano.py /tmp/nano "$@" 2>&1 | tee "$out/train.log"
cp /tmp/nano/report.json /tmp/nano/heldout.safetensors "$out/"
tar -C /tmp/nano -cf - model | split -b 15m - "$out/model.tar.part-"
ls -la "$out"
