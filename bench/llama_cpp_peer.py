#!/usr/bin/env python3
"""Helpers for bench/llama_cpp_peer.sh (DeepInfer vs llama.cpp on the CPU).

    convert LLAMA_CPP_SRC -- ARGS...   run llama.cpp's convert_hf_to_gguf.py with ARGS
    collect ENGINE ROUND FILE          append the numbers in one engine's output to results (stdout)
    table RESULTS.tsv                  print the min / median / max table

`convert` runs llama.cpp's own converter unchanged, in this process, after two stand-ins for
what this machine cannot install (only Debian's and npm's registries are reachable):
  * Debian 12's PyTorch (1.13) predates torch.float8_e4m3fn / float8_e5m2, which the converter
    names in class bodies. They are aliased to a dtype no tensor here has, so nothing is taken for
    FP8 (the release-layout checkpoint from scripts/v4_to_release_layout.py has no FP8 tensor).
  * The converter imports `transformers` for AutoConfig (it falls back to config.json when that
    fails) and AutoTokenizer (the vocabulary, and a hash of one test string's token ids that picks
    llama.cpp's pre-tokenizer). No Debian package has it, so a minimal byte-level BPE tokenizer
    over tokenizer.json stands in: vocab, added tokens, encode / decode. If its ids were wrong the
    hash would match no known tokenizer and the converter would stop, so a finished conversion
    is also a check of the stand-in.
Nothing of llama.cpp is copied here; the converter is read from the given source tree.
"""

from __future__ import annotations

import json
import re
import runpy
import statistics
import sys
import types
from dataclasses import dataclass
from pathlib import Path


# ----------------------------------------------------------------------------------------------
# A minimal `transformers` for the converter.

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@dataclass
class AddedToken:
    content: str
    special: bool
    normalized: bool
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False

    def __str__(self) -> str:
        return self.content


class ByteLevelBpeTokenizer:
    """Reads tokenizer.json (BPE model, Split pre-tokenizers + ByteLevel) and tokenizer_config.json."""

    def __init__(self, directory: Path):
        import regex  # Debian: python3-regex (\p{...} classes, which `re` lacks)

        tok = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        cfg_path = directory / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        model = tok["model"]
        if model["type"] != "BPE":
            raise ValueError(f"tokenizer.json model {model['type']!r}: only BPE is supported by this stand-in")
        if tok.get("normalizer") and tok["normalizer"].get("normalizers", [tok["normalizer"]]):
            raise ValueError("tokenizer.json has a normalizer; this stand-in supports none")
        self.vocab_base: dict[str, int] = dict(model["vocab"])
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.splits = []
        pre = tok["pre_tokenizer"]
        for p in pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]:
            if p["type"] == "Split":
                if p.get("behavior") != "Isolated" or p.get("invert"):
                    raise ValueError(f"unsupported Split pre-tokenizer {p}")
                self.splits.append(regex.compile(p["pattern"]["Regex"]))
            elif p["type"] == "ByteLevel":
                if p.get("use_regex") or p.get("add_prefix_space"):
                    raise ValueError(f"unsupported ByteLevel options {p}")
            else:
                raise ValueError(f"unsupported pre-tokenizer {p['type']}")
        self.added = {t["id"]: AddedToken(t["content"], t["special"], t["normalized"], t.get("lstrip", False),
                                          t.get("rstrip", False), t.get("single_word", False))
                      for t in tok["added_tokens"]}
        self.added_ids = {t.content: i for i, t in self.added.items()}
        # Longest first, so one added token that contains another wins.
        alternatives = sorted(self.added_ids, key=len, reverse=True)
        self.added_re = regex.compile("|".join(regex.escape(a) for a in alternatives)) if alternatives else None
        self.byte_char = bytes_to_unicode()
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        self.id_to_token = {i: t for t, i in self.vocab_base.items()}
        bos = cfg.get("bos_token")
        self.bos_token = bos["content"] if isinstance(bos, dict) else bos
        self.add_bos = bool(cfg.get("add_bos_token", False)) and self.bos_token in self.added_ids
        eos = cfg.get("eos_token")
        self.eos_token = eos["content"] if isinstance(eos, dict) else eos
        self.add_eos = bool(cfg.get("add_eos_token", False)) and self.eos_token in self.added_ids
        self.cache: dict[str, list[int]] = {}

    # What the converter reads.
    @property
    def vocab(self) -> dict[str, int]:
        v = dict(self.vocab_base)
        v.update(self.added_ids)
        return v

    def get_vocab(self) -> dict[str, int]:
        return self.vocab

    def get_added_vocab(self) -> dict[str, int]:
        return dict(self.added_ids)

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        return dict(self.added)

    def _pretokenize(self, text: str) -> list[str]:
        pieces = [text]
        for pattern in self.splits:  # "Isolated": each match is a piece, so is each gap between
            out = []
            for piece in pieces:
                pos = 0
                for m in pattern.finditer(piece):
                    if m.start() > pos:
                        out.append(piece[pos:m.start()])
                    if m.end() > m.start():
                        out.append(m.group())
                    pos = m.end()
                if pos < len(piece):
                    out.append(piece[pos:])
            pieces = out
        return pieces

    def _bpe(self, word: str) -> list[int]:
        if word in self.cache:
            return self.cache[word]
        symbols = list(word)
        while len(symbols) > 1:
            best, best_rank = -1, None
            for i in range(len(symbols) - 1):
                r = self.ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best < 0:
                break
            symbols[best:best + 2] = [symbols[best] + symbols[best + 1]]
        ids = [self.vocab_base[s] for s in symbols]
        self.cache[word] = ids
        return ids

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._pretokenize(text):
            ids.extend(self._bpe("".join(self.byte_char[b] for b in piece.encode("utf-8"))))
        return ids

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        pos = 0
        if self.added_re is not None:
            for m in self.added_re.finditer(text):
                ids.extend(self._encode_plain(text[pos:m.start()]))
                ids.append(self.added_ids[m.group()])
                pos = m.end()
        ids.extend(self._encode_plain(text[pos:]))
        if add_special_tokens:
            ids = ([self.added_ids[self.bos_token]] if self.add_bos else []) + ids
            ids += [self.added_ids[self.eos_token]] if self.add_eos else []
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        out, pending = [], bytearray()
        for i in ids:
            if i in self.added:
                if skip_special_tokens and self.added[i].special:
                    continue
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
                out.append(self.added[i].content)
            else:
                pending.extend(self.char_byte[c] for c in self.id_to_token[i])
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)


def install_transformers_stand_in() -> None:
    mod = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise RuntimeError("transformers is not installed here (stand-in); the converter reads config.json")

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(directory, *args, **kwargs):
            return ByteLevelBpeTokenizer(Path(directory))

    mod.AutoConfig = AutoConfig
    mod.AutoTokenizer = AutoTokenizer
    mod.__version__ = "0-stand-in"
    sys.modules["transformers"] = mod


def convert(llama_src: Path, argv: list[str]) -> int:
    import torch

    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.complex32)  # no checkpoint tensor has this dtype
    try:
        import transformers  # noqa: F401  (a real one, where installed, is used as is)
    except ImportError:
        install_transformers_stand_in()
    script = llama_src / "convert_hf_to_gguf.py"
    sys.path.insert(0, str(llama_src))
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
    return 0


# ----------------------------------------------------------------------------------------------
# Results: one TSV row per (round, engine, metric, value in tok/s).

METRICS = [("prefill_128", "prefill 128 tok/s"), ("prefill_512", "prefill 512 tok/s"),
           ("decode_b1", "decode batch 1 tok/s"), ("decode_b4", "decode batch 4 tok/s"),
           ("floor_b1", "decode batch 1: step / bandwidth floor"), ("floor_b4", "decode batch 4: step / bandwidth floor")]


def collect(engine: str, round_: str, path: Path) -> int:
    rows: list[tuple[str, float]] = []
    text = path.read_text(errors="replace")
    if engine.startswith("deepinfer"):  # bench_forward's markdown rows
        for m in re.finditer(r"^\| prefill \| (\d+) tokens \| ([\d.]+) tok/s", text, re.M):
            rows.append((f"prefill_{m.group(1)}", float(m.group(2))))
        for m in re.finditer(r"^\| decode \| batch (\d+) \| ([\d.]+) tok/s", text, re.M):
            rows.append((f"decode_b{m.group(1)}", float(m.group(2))))
        # The floor: the bytes a step reads over the read bandwidth measured in the same run.
        for m in re.finditer(r"^\| decode \| batch (\d+) \|.*\| ([\d.]+)x floor \|", text, re.M):
            rows.append((f"floor_b{m.group(1)}", float(m.group(2))))
    else:  # llama-bench -o jsonl (prefill) and llama-batched-bench --output-format jsonl (decode)
        for line in text.splitlines():
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "samples_ts" in r and r.get("n_gen", 0) == 0 and r.get("n_prompt", 0) > 0:
                # Best of the repetitions, as bench_forward reports the best of its two prefills.
                rows.append((f"prefill_{r['n_prompt']}", max(r["samples_ts"])))
            elif "speed_tg" in r:
                rows.append((f"decode_b{r['pl']}", r["speed_tg"]))
    if not rows:
        print(f"llama_cpp_peer.py: no results in {path}", file=sys.stderr)
        return 1
    for metric, value in rows:
        print(f"{round_}\t{engine}\t{metric}\t{value:.2f}")
    return 0


def table(path: Path) -> int:
    data: dict[tuple[str, str], list[float]] = {}
    engines: list[str] = []
    rounds = set()
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        round_, engine, metric, value = line.split("\t")
        rounds.add(round_)
        if engine not in engines:
            engines.append(engine)
        data.setdefault((engine, metric), []).append(float(value))
    names = {"deepinfer": "DeepInfer (bf16)", "deepinfer_fast": "DeepInfer (bf16, fast precision)",
             "deepinfer_q8": "DeepInfer (q8 weights)", "deepinfer_fp8": "DeepInfer (FP8 linears)",
             "deepinfer_fp8_fast": "DeepInfer (FP8 linears, fast precision)", "llama_bf16": "llama.cpp bf16",
             "llama_q8_0": "llama.cpp Q8_0",
             "llama_native": "llama.cpp bf16 + MXFP4 experts"}
    print(f"median of {len(rounds)} alternating rounds (min / **median** / max)\n")
    print("| | " + " | ".join(names.get(e, e) for e in engines) + " |")
    print("| --- |" + " --- |" * len(engines))
    for metric, label in METRICS:
        cells = []
        for e in engines:
            v = data.get((e, metric))
            if not v:
                cells.append("n/a")
                continue
            fmt = "{:.0f}" if statistics.median(v) >= 100 else "{:.2f}" if metric.startswith("floor") else "{:.1f}"
            cells.append(f"{fmt.format(min(v))} / **{fmt.format(statistics.median(v))}** / {fmt.format(max(v))}"
                         + (f" (n={len(v)})" if len(v) != len(rounds) else ""))
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "convert":
        rest = sys.argv[3:]
        return convert(Path(sys.argv[2]), rest[1:] if rest[:1] == ["--"] else rest)
    if len(sys.argv) == 5 and sys.argv[1] == "collect":
        return collect(sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        return table(Path(sys.argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
