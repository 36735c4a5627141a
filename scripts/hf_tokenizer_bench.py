#!/usr/bin/env python3
"""HF tokenizers encode throughput on the parity corpus, for comparison with bench_tokenizer.

Same strings and the same three measurements as build/bin/bench_tokenizer: one string at a time on
one thread, encode_batch (HF spreads it over threads), and the corpus as one document.
Usage: hf_tokenizer_bench.py TOKENIZER_DIR CORPUS.jsonl
"""
import json
import sys
import time

from tokenizers import Tokenizer


def throughput(tok, texts):
    total = sum(len(t.encode("utf-8")) for t in texts)
    single, batch = 0.0, 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t, add_special_tokens=False)
        single = max(single, total / (time.perf_counter() - t0) / 1e6)
        t0 = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        batch = max(batch, total / (time.perf_counter() - t0) / 1e6)
    doc = "".join(texts)
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        tok.encode(doc, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
    print(f"HF tokenizers encode: corpus {total} bytes, {len(texts)} strings; single-thread loop {single:.2f} MB/s, "
          f"encode_batch {batch:.2f} MB/s, one concatenated document {len(doc.encode('utf-8')) / best / 1e6:.2f} MB/s")


def corpus_texts(path):
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    return [r["text"] for r in rows if r["kind"] != "surrogate"]


if __name__ == "__main__":
    throughput(Tokenizer.from_file(f"{sys.argv[1]}/tokenizer.json"), corpus_texts(sys.argv[2]))
