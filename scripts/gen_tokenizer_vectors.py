#!/usr/bin/env python3
"""Runs HF `tokenizers` / `transformers` over the parity corpus and writes the expected ids.

Runs on the GPU machine (it has the HF libraries). Output, one JSON object per line:
  {"utf8_hex": ..., "ids": [...]}                          encode (add_special_tokens=False)
  {"utf8_hex": ..., "error": "..."}                         HF refused the input
  {"decode_ids": [...], "text_hex": ...}                    decode parity (HF Tokenizer.decode)
Also prints HF encode throughput on the corpus (MB/s; see hf_tokenizer_bench.py).

Only the `tokenizers` library is used: transformers 5.17's AutoTokenizer rebuilds this tokenizer as a
sentencepiece-style LlamaTokenizer and ignores tokenizer.json's pre-tokenizer (it returned e.g. [] for
Korean text), so it is no reference. BOS handling (tokenizer_config.json add_bos_token) is checked
as "these ids with the BOS id in front".

Usage: gen_tokenizer_vectors.py TOKENIZER_DIR CORPUS.jsonl OUT.jsonl
"""
import json
import random
import sys

from tokenizers import Tokenizer

from hf_tokenizer_bench import throughput


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
    throughput(raw, [r["text"] for r in corpus if r["kind"] != "surrogate"])


if __name__ == "__main__":
    main()
