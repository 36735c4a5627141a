#!/usr/bin/env python3
"""Runs HF `tokenizers` / `transformers` over the parity corpus and writes the expected ids.

Runs on the GPU machine (it has the HF libraries). Output, one JSON object per line:
  {"utf8_hex": ..., "ids": [...]}                          encode (add_special_tokens=False)
  {"utf8_hex": ..., "error": "..."}                         HF refused the input
  {"decode_ids": [...], "text_hex": ...}                    decode parity (HF Tokenizer.decode)
Also prints HF encode throughput on the corpus (MB/s), single thread and batched.

Only the `tokenizers` library is used: transformers 5.17's AutoTokenizer rebuilds this tokenizer as a
sentencepiece-style LlamaTokenizer and ignores tokenizer.json's pre-tokenizer (it returned e.g. [] for
Korean text), so it is no reference. BOS handling (tokenizer_config.json add_bos_token) is checked
as "these ids with the BOS id in front".

Usage: gen_tokenizer_vectors.py TOKENIZER_DIR CORPUS.jsonl OUT.jsonl
"""
import json
import random
import sys
import time

from tokenizers import Tokenizer


def encode_rows(raw, corpus):
    rows = []
    for item in corpus:
        try:
            rows.append({"utf8_hex": item["utf8_hex"], "ids": raw.encode(item["text"], add_special_tokens=False).ids})
        except Exception as exc:  # HF refuses e.g. unpaired surrogates
            rows.append({"utf8_hex": item["utf8_hex"], "error": type(exc).__name__})
    return rows


def decode_rows(raw, rng, count):
    vocab = raw.get_vocab_size(with_added_tokens=True)
    rows = []
    for _ in range(count):
        ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 24))]
        if rng.random() < 0.3:  # byte-level single-byte tokens split multi-byte characters
            ids += [rng.randrange(256) for _ in range(rng.randint(1, 6))]
        text = raw.decode(ids, skip_special_tokens=False)
        rows.append({"decode_ids": ids, "text_hex": text.encode("utf-8").hex()})
    return rows


def throughput(raw, corpus):
    texts = [r["text"] for r in corpus if r["kind"] != "surrogate"]
    total_bytes = sum(len(t.encode("utf-8")) for t in texts)
    best_single, best_batch = 0.0, 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        for t in texts:
            raw.encode(t, add_special_tokens=False)
        best_single = max(best_single, total_bytes / (time.perf_counter() - t0) / 1e6)
        t0 = time.perf_counter()
        raw.encode_batch(texts, add_special_tokens=False)
        best_batch = max(best_batch, total_bytes / (time.perf_counter() - t0) / 1e6)
    big = "".join(texts)
    t0 = time.perf_counter()
    raw.encode(big, add_special_tokens=False)
    one_doc = len(big.encode("utf-8")) / (time.perf_counter() - t0) / 1e6
    print(f"HF tokenizers encode: corpus {total_bytes} bytes, {len(texts)} strings; "
          f"single-thread loop {best_single:.2f} MB/s, encode_batch {best_batch:.2f} MB/s, "
          f"one concatenated document {one_doc:.2f} MB/s")


def main():
    tok_dir, corpus_path, out_path = sys.argv[1:4]
    raw = Tokenizer.from_file(f"{tok_dir}/tokenizer.json")
    corpus = [json.loads(line) for line in open(corpus_path, encoding="utf-8")]
    rows = encode_rows(raw, corpus) + decode_rows(raw, random.Random(7), 600)
    with open(out_path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    errors = sum("error" in r for r in rows)
    print(f"wrote {len(rows)} rows ({errors} HF errors)")
    throughput(raw, corpus)


if __name__ == "__main__":
    main()
