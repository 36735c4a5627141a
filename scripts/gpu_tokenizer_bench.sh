#!/usr/bin/env bash
# Runs on the GPU machine: HF tokenizers and DeepInfer's tokenizer on the same corpus, same machine.
# Needs .devcache/tok (carried): bench_tokenizer built here plus the shared libraries it links.
set -euo pipefail
export LD_LIBRARY_PATH=$PWD/.devcache/tok/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 scripts/hf_tokenizer_bench.py models/deepseek-v4-tokenizer tests/data/tokenizer_corpus.jsonl
.devcache/tok/bench_tokenizer --tokenizer models/deepseek-v4-tokenizer --corpus tests/data/tokenizer_corpus.jsonl
nproc; python3 -c "import platform; print(platform.processor() or platform.machine())"; grep -m1 "model name" /proc/cpuinfo
