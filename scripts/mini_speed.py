#!/usr/bin/env python3
"""Speed probe of the deepinfer-mini training step on a GPU: full optimizer steps on random tokens
(the timing does not depend on the text) for several batch sizes, a profiler summary, and the step
time under torch.compile (the numeric helpers only, or the whole loss), each variant in its own
process so that a slow or failing compile cannot take the others down.

Usage: mini_speed.py [--runs eager:64,parts:256,full:256,...] [--profile-batch 128] [--timeout S]
       mini_speed.py --one VARIANT --batch N   (one measurement, prints a JSON line)
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mini_tokenizer  # noqa: E402
import train_mini  # noqa: E402
import v41_reference as v41  # noqa: E402


def build(dev, vocab=4096, seed=0):
    """The mini configuration over a stand-in vocabulary of `vocab` byte-level tokens."""
    enc = v41.bytes_to_unicode()
    chars = [enc[b] for b in range(256)]
    tokens = list(mini_tokenizer.SPECIALS) + chars
    tokens += [a + b for a in chars for b in chars][:vocab - len(tokens)]
    gen = torch.Generator().manual_seed(seed)
    model, _ = train_mini.new_model(train_mini.mini_config, tokens, gen)
    return model.to(dev), gen


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def measure(variant, rows, steps=6, profile=False):
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: a check of the script
    model, gen = build(dev)
    data = torch.randint(3, model.c["vocab_size"], (4_000_000,), generator=gen)
    args = argparse.Namespace(seq=512, anchors=32, gamma=3.0, batch=rows)
    model.sparse_moe = variant == "sparse"  # eager, routed experts on their own tokens
    loss_fn, _ = train_mini.compiled_losses({"eager": "none", "sparse": "none"}.get(variant, variant), model)
    opt = train_mini.optimizer(model, 1e-3, dev)

    def step():
        train_mini.train_step(model, opt, data, args, gen, dev, loss_fn)

    t = time.time()
    for _ in range(2):
        step()
    sync(dev)
    warm = time.time() - t
    t = time.time()
    for _ in range(steps):
        step()
    sync(dev)
    out = {"variant": variant, "batch": rows, "warmup_s": round(warm, 1),
           "ms_per_step": round(1000 * (time.time() - t) / steps, 1),
           "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if dev.type == "cuda" else None}
    if profile:
        from torch.profiler import ProfilerActivity, profile as prof
        with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
            step()
            torch.cuda.synchronize()
        events = p.key_averages()
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        out["kernel_launches"] = sum(e.count for e in kernels)
        out["gpu_busy_ms"] = round(sum(e.self_device_time_total for e in kernels) / 1000, 1)
        print(events.table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=70), flush=True)
        by_shape = p.key_averages(group_by_input_shape=True)  # which tensors the time goes to
        print(by_shape.table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=40,
                             max_shapes_column_width=90), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="eager:64,eager:128,eager:256,parts:256,full:256",
                    help="VARIANT:BATCH,... with VARIANT eager, sparse (eager, sparse MoE), parts, blocks or full")
    ap.add_argument("--profile-batch", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--one")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.batch, profile=args.profile)), flush=True)
        return
    for run in args.runs.split(","):
        variant, rows = run.split(":")
        cmd = [sys.executable, os.path.abspath(__file__), "--one", variant, "--batch", rows]
        if variant in ("eager", "sparse") and int(rows) == args.profile_batch:
            cmd.append("--profile")
        try:
            r = subprocess.run(cmd, timeout=args.timeout, capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode:
                print(json.dumps({"variant": variant, "batch": rows, "failed": r.stderr[-1500:]}), flush=True)
        except subprocess.TimeoutExpired:
            print(json.dumps({"variant": variant, "batch": rows, "timeout_s": args.timeout}), flush=True)


if __name__ == "__main__":
    main()
