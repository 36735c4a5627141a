#!/usr/bin/env python3
"""HF greedy continuations of fixture prompts, each step a full forward without cache.

For every fixture in DIR (as made by gen_v4_fixtures.py) and each (begin, length) prompt slice of
its reference input_ids, appends the argmax of HF's full-forward logits, STEPS times, recomputing
the whole sequence each time (the reference semantics; HF's cached paths are not used). Writes
<fixture>/greedy_reference.safetensors with prompt_<i>, greedy_<i> (int64) and margin_<i> (fp32:
top-1 minus top-2 logit at each step, so a test can tell a near-tie from a real disagreement).

Usage: gen_v4_greedy_reference.py FIXTURES_DIR
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV4ForCausalLM

PROMPTS = [(0, 5), (10, 17), (3, 40), (50, 64), (7, 100), (90, 3)]
STEPS = 20


def greedy(model, prompt):
    seq = prompt.clone()
    tokens, margins = [], []
    with torch.no_grad():
        for _ in range(STEPS):
            logits = model(input_ids=seq[None], use_cache=False).logits[0, -1].float()
            top2 = logits.topk(2)
            tokens.append(int(top2.indices[0]))
            margins.append(float(top2.values[0] - top2.values[1]))
            seq = torch.cat([seq, top2.indices[:1]])
    return torch.tensor(tokens, dtype=torch.int64), torch.tensor(margins, dtype=torch.float32)


def main():
    torch.set_num_threads(min(16, os.cpu_count()))
    root = sys.argv[1]
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.exists(os.path.join(d, "reference.safetensors")) or "fp8" in name:
            continue  # the FP8 fixture's weights are dequantized only in memory by the fixture script
        model = DeepseekV4ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        ids = load_file(os.path.join(d, "reference.safetensors"))["input_ids"]
        out = {}
        for i, (b, n) in enumerate(PROMPTS):
            out[f"prompt_{i}"] = ids[b:b + n].clone()
            out[f"greedy_{i}"], out[f"margin_{i}"] = greedy(model, ids[b:b + n])
        save_file(out, os.path.join(d, "greedy_reference.safetensors"))
        print(name, "min margin", min(float(out[f"margin_{i}"].min()) for i in range(len(PROMPTS))))


if __name__ == "__main__":
    main()
