#!/usr/bin/env python3
"""deepinfer-mini's tokenizer: byte-level BPE (HF tokenizers) trained on the training text, with
BOS, EOS and the DSpark noise token as ids 0..2; `--smoke` runs without the tokenizers package fall
back to bytes only (the same file format, no merges). And the training text as one token stream."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import v41_reference as v41  # noqa: E402

BOS, EOS, NOISE = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜dspark▁noise｜>"
SPECIALS = [BOS, EOS, NOISE]


class ByteTokenizer:
    def __init__(self):
        self.enc = v41.bytes_to_unicode()
        self.dec = {v: k for k, v in self.enc.items()}
        self.tokens = SPECIALS + [self.enc[b] for b in range(256)]
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def encode_batch(self, texts):
        return [[self.index[self.enc[b]] for b in t.encode("utf-8")] for t in texts]

    def decode(self, ids):
        return bytes(self.dec[self.tokens[i]] for i in ids if i >= len(SPECIALS)).decode("utf-8", errors="replace")

    def to_json(self):
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                  "special": True} for i, t in enumerate(SPECIALS)]
        vocab = {t: i for i, t in enumerate(self.tokens) if i >= len(SPECIALS)}
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
                "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                  "use_regex": True}, "post_processor": None,
                "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                          "merges": []}}


class HfTokenizer:
    def __init__(self, texts, vocab):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        self.tok = tok
        by_id = {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}
        self.tokens = [by_id[i] for i in range(len(by_id))]

    def encode_batch(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids):
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def to_json(self):
        return json.loads(self.tok.to_str())


def make_tokenizer(texts, vocab, smoke):
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        if not smoke:
            raise
        return ByteTokenizer()
    sample, size = [], 0
    for t in texts:  # the first 20 MB of training text
        sample.append(t)
        size += len(t)
        if size > 20_000_000:
            break
    return HfTokenizer(sample, vocab)


def token_stream(tok, texts):
    """BOS, the file's tokens, EOS for every file, as one long tensor."""
    import numpy as np
    parts = []
    for enc in tok.encode_batch(texts):
        parts += [np.array([0], dtype=np.int64), np.asarray(enc, dtype=np.int64), np.array([1], dtype=np.int64)]
    return torch.from_numpy(np.concatenate(parts))
