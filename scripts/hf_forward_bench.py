#!/usr/bin/env python3
"""HF transformers' DeepSeek-V4 forward speed on a checkpoint, the peer of bench_forward.

Same work as `bench_forward`: prefill of single prompts (logits of the last token) and decode
steps at several batch sizes after a `--context`-token prefill of random tokens. bf16 weights and
compute (autocast: HF keeps the mHC parameters fp32, whose outputs would otherwise meet bf16
linear layers), eager attention, HF's own KV cache for decode; every timing ends with a CUDA sync.
Prints markdown rows in bench_forward's format.
"""
import argparse
import time

import torch
from transformers import DeepseekV4ForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", default="1024,8192")
    ap.add_argument("--batch", default="1,8,64")
    ap.add_argument("--decode-steps", type=int, default=8)
    ap.add_argument("--context", type=int, default=128)
    a = ap.parse_args()
    torch.manual_seed(7)
    model = DeepseekV4ForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation="eager")
    model = model.cuda().eval()
    vocab = model.config.vocab_size
    print(f"HF transformers on {torch.cuda.get_device_name()}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params")
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        for p in [int(x) for x in a.prompt.split(",")]:
            ids = torch.randint(0, vocab, (1, p), device="cuda")
            best = min(timed(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1))[0] for _ in range(2))
            print(f"| prefill | {p} tokens | {p / best:.1f} tok/s | {best:.3f} s |", flush=True)
        for b in [int(x) for x in a.batch.split(",")]:
            ids = torch.randint(0, vocab, (b, a.context), device="cuda")
            _, out = timed(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))
            cache, times = out.past_key_values, []
            for _ in range(a.decode_steps):
                nxt = torch.randint(0, vocab, (b, 1), device="cuda")
                t, out = timed(lambda: model(input_ids=nxt, past_key_values=cache, use_cache=True))
                cache = out.past_key_values
                times.append(t)
            t = sorted(times)[len(times) // 2]
            print(f"| decode | batch {b} | {b / t:.2f} tok/s | step {t * 1e3:.2f} ms |", flush=True)


if __name__ == "__main__":
    main()
