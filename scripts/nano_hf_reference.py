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
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import DeepseekV4ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_nano  # noqa: E402


@torch.no_grad()
def main():
    model_dir, heldout, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    ref = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    ref.config._attn_implementation = "eager"
    mtp = train_nano.MtpHead(ref.config).cuda().float()
    stored = load_file(os.path.join(model_dir, "model.safetensors"))
    mtp.load_state_dict({k[len("mtp.0."):]: v.float() for k, v in stored.items() if k.startswith("mtp.0.")})
    capture = train_nano.StreamCapture(ref)
    seqs = load_file(heldout)["input_ids"]
    nll, hits, total = [], 0, 0
    for i in range(0, seqs.shape[0], 8):
        batch = seqs[i:i + 8].cuda()
        _, _, logits, mtp_logits = train_nano.losses(ref, mtp, capture, batch)
        token_nll = F.cross_entropy(logits.float().transpose(1, 2), batch[:, 1:], reduction="none")
        nll.append(token_nll.mean(dim=1).cpu())
        hits += (mtp_logits.argmax(-1) == batch[:, 2:]).sum().item()
        total += batch[:, 2:].numel()
    nll = torch.cat(nll)
    save_file({"input_ids": seqs.contiguous(), "hf_mean_nll": nll.contiguous()}, os.path.join(out, "nano_heldout.safetensors"))
    report = {"heldout_sequences": seqs.shape[0], "heldout_loss": nll.mean().item(),
              "heldout_perplexity": math.exp(nll.mean().item()), "mtp_next_next_token_accuracy": hits / total}
    train_nano.sample(ref, Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")), report)
    json.dump(report, open(os.path.join(out, "hf_reference.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "sample_greedy_ids"}, indent=1))


if __name__ == "__main__":
    main()
