#!/usr/bin/env python3
"""Syntax check of greedy code completions, the bundled model's acceptance test for "writes
Python": each prompt (a function or class header from a held-out file) is completed greedily by
`deepinfer generate` (128 tokens), the text is cut at its last complete top-level statement and
parsed with Python's ast.

The cut: the header plus the completion, without a trailing partial line; when the completion ran
into the token limit and a later top-level statement (a line starting at column 0) has begun, that
last statement is dropped, since the limit may have cut it. Nothing else is repaired.

Usage: code_completion_eval.py PROMPTS.jsonl MODEL_DIR [MODEL_DIR ...] [--deepinfer BIN]
                               [--max-tokens 128] [--json OUT]
"""
import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile


def cut(prompt, completion, finished):
    text = prompt + completion
    lines = text.split("\n")
    if not finished and not text.endswith("\n"):
        lines = lines[:-1]
    if not finished:
        starts = [i for i, line in enumerate(lines) if i > 0 and line[:1] not in ("", " ", "\t", "#", ")", "]", "}")]
        if starts:
            lines = lines[:starts[-1]]
    return "\n".join(lines).rstrip() + "\n"


def parses(code):
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False


def completions(binary, model, prompts_file, max_tokens):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.jsonl")
        subprocess.run([binary, "generate", "--model", model, "--prompts", prompts_file, "--temperature", "0",
                        "--max-tokens", str(max_tokens), "--output", out], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return [json.loads(line) for line in open(out)]


def evaluate(binary, model, prompts_file, max_tokens):
    rows = sorted(completions(binary, model, prompts_file, max_tokens), key=lambda r: r["index"])
    results = []
    for r in rows:
        code = cut(r["prompt"], r["text"], r["finish_reason"] == "stop")
        results.append({"prompt": r["prompt"], "parses": parses(code), "code": code})
    ok = sum(r["parses"] for r in results)
    return {"model": model, "prompts": len(results), "parsed": ok, "rate": ok / max(1, len(results)),
            "results": results}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prompts")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--deepinfer", default="build/bin/deepinfer")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    report = [evaluate(args.deepinfer, m, args.prompts, args.max_tokens) for m in args.models]
    for r in report:
        print(f"{r['model']}: {r['parsed']}/{r['prompts']} completions parse ({100 * r['rate']:.0f}%)")
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
