#!/usr/bin/env bash
# Runs on the GPU machine: regenerates the V4 parity fixtures and the tokenizer test vectors.
# Usage (repo root): scripts/gpu_gen_fixtures.sh OUT_DIR
# Writes OUT_DIR/fixtures.tar.gz (unpack into tests/data) and OUT_DIR/tokenizer_vectors.jsonl.
set -euo pipefail
out=${1:?usage: gpu_gen_fixtures.sh OUT_DIR}
work=$(mktemp -d); mkdir -p "$work/fixtures"
export PYTHONUNBUFFERED=1
python3 -c 'import transformers, torch, tokenizers; print("transformers", transformers.__version__, "torch", torch.__version__, "tokenizers", tokenizers.__version__)'
python3 scripts/gen_v4_fixtures.py "$work/fixtures" || echo "FIXTURE GENERATION HAD ERRORS"
tar -C "$work/fixtures" -czf "$out/fixtures.tar.gz" .
python3 scripts/gen_tokenizer_vectors.py models/deepseek-v4-tokenizer tests/data/tokenizer_corpus.jsonl \
    "$out/tokenizer_vectors.jsonl"
