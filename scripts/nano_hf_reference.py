#!/usr/bin/env python3
"""HF transformers' references for a deepinfer-nano checkpoint, recomputed as train_nano.py computes
them at training time: the mean NLL of every held-out row (fp32, eager attention, no cache), the
MTP head's next-next-token accuracy on those rows, and the greedy sample of the training report.
For nano rewritten in the release layout (scripts/v4_to_release_layout.py models/deepinfer-nano
OUT --fp8-linears --dequantized DEQ): run on DEQ, which holds the same values in HF's layout.

Runs on the GPU machine (transformers 5.17 with deepseek_v4).
Usage: nano_hf_reference.py MODEL_DIR HELDOUT.safetensors OUT_DIR
  HELDOUT: input_ids [N, L + 1] (tests/data/nano_heldout.safetensors)
  OUT_DIR/nano_heldout.safetensors  input_ids and hf_mean_nll [N]
  OUT_DIR/hf_reference.json         heldout_perplexity, mtp_next_next_token_accuracy and the greedy
                                    sample (sample_prompt, sample_greedy_ids, sample_greedy_text)
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_nano  # noqa: E402


@torch.no_grad()
def main():
    model_dir, heldout, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    report = {}
    seqs = load_file(heldout)["input_ids"]
    ref = train_nano.hf_heldout(model_dir, seqs, os.path.join(out, "nano_heldout.safetensors"), report)
    train_nano.sample(ref, Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")), report)
    json.dump(report, open(os.path.join(out, "hf_reference.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "sample_greedy_ids"}, indent=1))


if __name__ == "__main__":
    main()
