#!/usr/bin/env bash
# The README's main job: run the engine on the bundled default model.
# (Until the bundled text model lands, the default model is the tiny V4 parity checkpoint and the
# job checks the engine's logits against the HF reference that ships with it.)
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
model=tests/data/v4/v4_tiny_a
out=$(mktemp --suffix=.safetensors)
trap 'rm -f "$out"' EXIT
"$build"/bin/deepinfer logits --model "$model" --input "$model"/reference.safetensors --output "$out" --chunk 16
echo "deepinfer: wrote logits for $model (chunked prefill, 16 tokens per step) to a temporary file"
