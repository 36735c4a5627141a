#!/usr/bin/env bash
# The README's main job: a code completion from the bundled default model, deepinfer-nano.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
prompt=$'def fibonacci(n):\n'
printf '\n--- prompt ---\n%s--- deepinfer-nano continues (sampled: temperature 0.7, top-p 0.9, seed 3) ---\n' "$prompt"
"$build"/bin/deepinfer generate --prompt "$prompt" --max-tokens 80 --temperature 0.7 --top-p 0.9 \
    --repetition-penalty 1.1 --seed 3 --cache-memory 64MiB --max-sequences 4
