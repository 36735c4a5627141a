#!/usr/bin/env python3
"""Trains deepinfer-mini: a DeepSeek-V4.1 (`deepseek_v41`, as the engine and v41_reference.py
compute it) with a DSpark draft, on permissively licensed Python sources of this machine.

One command on the GPU machine, everything random from --seed. Target and draft train together:
the target on next-token cross-entropy (plus the indexers' KL term), the draft on the DSpark loss
(0.1 CE + 0.9 TV to the target + BCE of the confidence to 1 - TV, position weights
exp(-(k-1)/gamma)) with the target's taps and logits detached, so the draft never changes the
target. --time-budget bounds the script from its data preparation to its report: the step count
is fixed at the end of the 100-step warm-up from the speed of the steps before, the cosine decay
starts after the warm-up (so the count never shaped an earlier step), and it is recorded:
`--steps N --batch B --moe M --warmup W` with the report's values reproduces a run. Should the
steps slow down later, training stops at the budget and the report says so.

Writes to OUT_DIR:
  model/               config.json, model.safetensors (release layout: FP8 32x32 linears, MXFP4
                       experts, the draft under mtp.*), tokenizer.json, tokenizer_config.json,
                       generation_config.json
  heldout.safetensors  held-out rows input_ids [N, L] (BOS, then 512 tokens of one file) and the
                       per-row NLL this script computes (fp32, the stored weights)
  code_prompts.jsonl   function and class headers of held-out files (the syntax check's prompts)
  report.json          data manifest, losses, bits per byte, draft acceptance and calibration
Usage: train_mini.py OUT_DIR [--seed 0] [--steps N | --time-budget SECONDS] [--batch 0|N] [--moe dense|sparse|auto]
                   [--warmup W] [--smoke]
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dspark_reference as dspark  # noqa: E402
import mini_eval  # noqa: E402
import mini_model  # noqa: E402
import mini_ops  # noqa: E402
from mini_tokenizer import BOS, EOS, SPECIALS, make_tokenizer, token_stream  # noqa: E402
import python_corpus as corpus  # noqa: E402
import v41_reference as v41  # noqa: E402


def mini_config(vocab):
    return dict(
        v41.BASE, vocab_size=vocab, hidden_size=384, num_hidden_layers=8, num_attention_heads=6, head_dim=64,
        q_lora_rank=192, qk_rope_head_dim=16, o_groups=2, o_lora_rank=128, moe_intermediate_size=192,
        n_routed_experts=18, num_experts_per_tok=2, routed_scaling_factor=1.5, swiglu_limit=10.0,
        rms_norm_eps=1e-6, max_position_embeddings=8192, rope_theta=10000.0, compress_rope_theta=40000.0,
        rope_scaling=None, sliding_window=64, compress_ratios=[0, 4, 4, 4, 1, 1, 1, 0, 0, 0, 0],
        kv_source_layer_ids=[1, 3, 4], index_source_layer_ids=[1, 3, 4, 6], candidate_source_layer_id=4,
        candidate_topk_blocks=8, candidate_block_size=16, index_n_heads=4, index_head_dim=32, index_topk=32,
        hc_sinkhorn_iters=20, engram_layer_ids=[1, 5], engram_max_ngram_size=3, engram_n_heads=2,
        engram_head_dim=16, engram_vocab_size=5000, engram_pad_id=1, num_nextn_predict_layers=3,
        dspark_block_size=5, dspark_noise_token_id=2, dspark_target_layer_ids=[5, 6, 7], dspark_markov_rank=32,
        dspark_n_routed_experts=4, dspark_num_experts_per_tok=2)


def smoke_config(vocab):
    return dict(
        mini_config(vocab), hidden_size=64, num_hidden_layers=5, num_attention_heads=2, head_dim=32, q_lora_rank=32,
        o_lora_rank=32, moe_intermediate_size=32, n_routed_experts=4, compress_ratios=[0, 2, 2, 1, 1, 0, 0],
        kv_source_layer_ids=[1, 3], index_source_layer_ids=[1, 3, 4], candidate_source_layer_id=3,
        candidate_topk_blocks=3, candidate_block_size=4, index_n_heads=2, index_topk=4, sliding_window=8,
        engram_layer_ids=[1], engram_vocab_size=101, num_nextn_predict_layers=2, dspark_target_layer_ids=[2, 3, 4],
        dspark_markov_rank=16, dspark_n_routed_experts=2)


# ---------------------------------------------------------------------------------------------
# Model

def engram_setup(c, tokens):
    specials = {i: t for i, t in enumerate(SPECIALS)}
    token_map, size = v41.compressed_token_map(tokens, specials)
    c["engram_compressed_vocab_size"] = size
    c["engram_num_embeddings"] = [sum(sum(per) for per in layer) for layer in v41.engram_primes(c)]
    return token_map


def new_model(config, tokens, gen):
    """A MiniV41 of `config` (mini_config, smoke_config) over the vocabulary `tokens` (byte-level
    strings by id), initialised from gen; and its Engram token map."""
    c = config(len(tokens))
    c["rope_parameters"] = v41.rope_parameters(c)
    token_map = engram_setup(c, tokens)
    return mini_model.MiniV41(c, gen, token_map), token_map


# ---------------------------------------------------------------------------------------------
# Training

def param_groups(model):
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and not (p.dim() >= 2 and "embed" not in n)]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


def optimizer(model, lr, dev):
    fused = {"fused": True} if dev.type == "cuda" else {}  # one kernel for all parameters
    return torch.optim.AdamW(param_groups(model), lr=lr, betas=(0.9, 0.95), **fused)


def sample(data, args, rows, block, gen, dev):
    """`rows` random windows of args.seq + 1 tokens and the step's anchors of DSpark blocks, from gen."""
    T = args.seq
    starts = torch.randint(0, len(data) - T - 2, (rows,), generator=gen)
    batch = torch.stack([data[s:s + T + 1] for s in starts.tolist()]).to(dev)
    anchors = torch.randint(0, T - block + 1, (args.anchors,), generator=gen).to(dev)
    return batch, anchors


def losses(model, batch, anchors, gamma):
    """The target's cross-entropy, the indexers' KL term, the draft's loss and its 1 - TV per position."""
    c = model.c
    aux = []
    with torch.autocast(device_type=batch.device.type, dtype=torch.bfloat16, enabled=batch.device.type == "cuda"):
        logits, taps = model(batch[:, :-1], c["dspark_target_layer_ids"], aux)
        main = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        index = torch.stack(aux).mean()
        draft, accept = model.draft_loss(batch[:, :-1], logits, taps, anchors, gamma)
    return main, index, draft, accept


def step_losses(model, data, args, rows, gen, dev, loss_fn=losses):
    batch, anchors = sample(data, args, rows, model.c["dspark_block_size"], gen, dev)
    return loss_fn(model, batch, anchors, args.gamma)


PARTS = ((v41, ("rms_norm", "fake_fp8", "fake_fp4")),
         (mini_ops, ("mixes", "fake_fp8_weight", "fake_mxfp4_weight", "rope_bt", "expand")))


def compiled_losses(mode, model):
    """--compile: 'parts' compiles the elementwise-heavy helpers (mHC mixes, norms, RoPE, fake
    quantisation: many small kernels in eager mode), 'blocks' each layer's block (one region per
    layer: layers of one kind share the compiler's caches), 'full' the whole loss. Returns the
    loss function and a function that undoes 'parts' and 'blocks' (evaluation runs other shapes)."""
    if mode == "none":
        return losses, lambda: None
    import torch._dynamo
    import torch._inductor.config as inductor
    for key in ("cache_size_limit", "recompile_limit"):  # one compile per weight shape or layer
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, 256)
    # Compiling took longer than the whole 8-minute budget with the defaults (docs/benchmarks.md);
    # timing several launch configurations of every generated kernel is one suspect, so it is off.
    for cfg, key in ((inductor.triton, "autotune_pointwise"), (inductor, "coordinate_descent_tuning")):
        if hasattr(cfg, key):
            setattr(cfg, key, False)
    if mode == "full":
        return torch.compile(losses, dynamic=False), lambda: None
    if mode == "blocks":
        model.block = torch.compile(model.block, dynamic=False)
        return losses, lambda: delattr(model, "block")
    saved = [(mod, n, getattr(mod, n)) for mod, names in PARTS for n in names]
    for mod, n, f in saved:  # dynamic after a second shape: one kernel for all weight shapes
        setattr(mod, n, torch.compile(f))
    return losses, lambda: [setattr(mod, n, f) for mod, n, f in saved]


def probe(model, data, args, rows, gen, dev, loss_fn):
    """Seconds of one forward-backward pass of `rows` rows (best of three after a warm-up) and the
    peak memory; None when it runs out of memory."""
    torch.cuda.reset_peak_memory_stats(dev)
    times = []
    try:
        for _ in range(4):
            torch.cuda.synchronize()
            t = time.time()
            main, index, draft, _ = step_losses(model, data, args, rows, gen, dev, loss_fn)
            (main + 0.1 * index + draft).backward()
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.time() - t)
    except torch.cuda.OutOfMemoryError:
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        return None
    return min(times[1:]), torch.cuda.max_memory_allocated(dev)


def pick_batch(model, data, args, dev, report, loss_fn):
    """--batch 0 on a GPU: of 64, 128 and 256 rows (and, with --moe auto, of the dense and sparse
    routed experts, which compute the same function), the setting with the most tokens per second
    whose peak memory stays under 80% of the GPU's (the allocator's expandable segments keep the
    rest usable), timed on a few forward-backward passes without an update. The probes draw from
    their own generator, so the report's steps, batch, moe and warmup reproduce the run."""
    probe_gen = torch.Generator().manual_seed(args.seed + 1)
    capacity = torch.cuda.get_device_properties(dev).total_memory
    best, best_rate, probes = (64, model.sparse_moe), 0.0, []
    for sparse in ((False, True) if args.moe == "auto" else (model.sparse_moe,)):
        model.sparse_moe = sparse
        for rows in (64, 128, 256):
            measured = probe(model, data, args, rows, probe_gen, dev, loss_fn)
            if measured is None:
                break
            seconds, peak = measured
            probes.append({"batch": rows, "moe": "sparse" if sparse else "dense",
                           "ms_per_step": round(1000 * seconds, 1), "peak_gb": round(peak / 1e9, 2)})
            print(json.dumps(probes[-1]), flush=True)
            if peak > 0.8 * capacity:
                break
            if rows / seconds > best_rate:
                best, best_rate = (rows, sparse), rows / seconds
    model.sparse_moe = best[1]
    model.loads = {}
    torch.cuda.empty_cache()
    report["batch_probes"] = probes
    return best[0]


def train_step(model, opt, data, args, gen, dev, loss_fn):
    main, index, draft, accept = step_losses(model, data, args, args.batch, gen, dev, loss_fn)
    total = main + 0.1 * index + draft
    total.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.balance(1e-3)
    return main, index, draft, accept


def first_step(model, opt, data, args, gen, dev, loss_fn, report):
    """Step 0, where a compiled loss compiles: if that fails (a compiler error, or memory), the
    run goes on in eager mode and the report says why."""
    t = time.time()
    try:
        out = train_step(model, opt, data, args, gen, dev, loss_fn)
        report["first_step_seconds"] = time.time() - t
        return out, loss_fn
    except Exception as e:  # noqa: BLE001 - any compiler failure
        if loss_fn is losses:
            raise
        print(f"compiled step failed, going on in eager mode: {e!r}"[:2000], flush=True)
        report["compile_fallback"] = repr(e)[:2000]
        opt.zero_grad(set_to_none=True)
        model.loads = {}
        import torch._dynamo
        torch._dynamo.reset()
        torch.cuda.empty_cache()
        return train_step(model, opt, data, args, gen, dev, losses), losses


EVAL_RESERVE_S = 30.0  # export, held-out NLL and draft acceptance after training


def lr_at(step, steps, warmup, peak):
    """Linear warm-up, then a cosine from peak to peak / 10 over the steps after the warm-up."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def planned_steps(args, t_start, t_from, steps_timed, step):
    """Steps that fit the budget of the whole command, from the speed of the `steps_timed` steps
    since t_from."""
    per_step = (time.time() - t_from) / steps_timed
    left = args.time_budget - (time.time() - t_start) - EVAL_RESERVE_S
    return max(step + 1, step + int(left / per_step)), per_step


def train(model, data, args, gen, dev, report, loss_fn, t_start):
    opt = optimizer(model, args.lr, dev)
    warmup = args.warmup or (min(100, max(1, args.steps // 5)) if args.steps else 100)
    if not args.steps and warmup <= 5:
        raise SystemExit("--time-budget times the warm-up's steps after the fifth: --warmup must exceed 5")
    args.warmup = report["warmup"] = warmup  # report["args"] is args: it records what ran
    steps, t0, step, log = args.steps or 10**9, time.time(), 0, []
    model.train()
    while step < steps:
        if args.steps == 0 and step == 5:
            t5 = time.time()
        if args.steps == 0 and step == warmup:
            steps, per_step = planned_steps(args, t_start, t5, warmup - 5, step)
            report["steps"] = steps
            print(f"{per_step * 1000:.0f} ms/step -> {steps} steps", flush=True)
        if args.steps == 0 and step > warmup and time.time() - t_start > args.time_budget - EVAL_RESERVE_S:
            report["stopped_at_budget"] = step  # slower than planned: the decay is cut short
            print(f"time budget reached at step {step} of {steps}", flush=True)
            break
        lr = lr_at(step, steps, warmup, args.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        if step == 0:
            (main, index, draft, accept), loss_fn = first_step(model, opt, data, args, gen, dev, loss_fn, report)
        else:
            main, index, draft, accept = train_step(model, opt, data, args, gen, dev, loss_fn)
        if (step < 10 or step % 50 == 0) and not torch.isfinite(main + index + draft):
            raise RuntimeError(f"loss not finite at step {step}: {main.item()} {index.item()} {draft.item()}")
        if step % 50 == 0 or step == steps - 1:
            row = {"step": step, "loss": main.item(), "index_kl": index.item(), "draft": draft.item(),
                   "draft_1_minus_tv": [round(x, 3) for x in accept.tolist()], "lr": lr, "s": time.time() - t0}
            log.append(row)
            print(json.dumps(row), flush=True)
        step += 1
    report.setdefault("steps", steps)
    report["steps_run"] = step
    report["train_seconds"] = time.time() - t0
    report["final_train_loss"] = main.item()
    report["train_log"] = log


# ---------------------------------------------------------------------------------------------
# Export: the release layout, as v41_reference.to_release encodes it

def export(model, tok, c, out):
    shapes = dict(v41.tensor_shapes(c), **dspark.draft_tensor_shapes(c))
    stored, values = {}, {}
    for name, t in model.named_checkpoint_tensors():
        t = t.float().cpu()
        kept = t.to(torch.bfloat16) if shapes[name][1] == "bf16" else t
        entries, values[name] = v41.release_entries(name, kept, t)
        stored.update(entries)
    d = os.path.join(out, "model")
    os.makedirs(d, exist_ok=True)
    text = dict(v41.text_config(c), model_type="deepseek_v41_text", gate_temp=c.get("gate_temp", 1.0))
    text.update({k: c[k] for k in dspark.DSPARK_KEYS})
    cfg = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "text_config": text,
           "quantization_config": v41.RELEASE_QUANT}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    v41.write_safetensors(os.path.join(d, "model.safetensors"), stored)
    json.dump(tok.to_json(), open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": BOS, "eos_token": EOS,
               "model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast"},
              open(os.path.join(d, "tokenizer_config.json"), "w"), indent=1)
    json.dump({"bos_token_id": 0, "eos_token_id": 1}, open(os.path.join(d, "generation_config.json"), "w"), indent=1)
    return values


@torch.no_grad()
def load_values(model, values):
    """Puts the stored (dequantised) values into the model and stops quantising weights."""
    stacks = {}
    for name, v in values.items():
        if ".ffn.experts." in name:
            pfx, e, wname = mini_model.split_expert_name(name)
            stacks.setdefault(mini_model.stacked_expert_name(pfx, wname), {})[e] = v
        else:
            model.raw(name).copy_(v)
    for name, per in stacks.items():
        model.raw(name).copy_(torch.stack([per[e] for e in range(len(per))]))
    model.quantize_weights = False
    model.float().eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=420.0,
                    help="seconds for this script, from its data preparation to its report (not Python's start)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="warm-up steps (0: 100 with --time-budget, else min(100, steps / 5)); a replay passes the report's")
    ap.add_argument("--batch", type=int, default=64, help="rows per step; 0: the fastest that fits (GPU)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--anchors", type=int, default=32, help="DSpark anchors per sequence and step")
    ap.add_argument("--gamma", type=float, default=3.0, help="DSpark position weight scale")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--data-mb", type=float, default=320.0, help="cap on training text (MB)")
    ap.add_argument("--compile", choices=("none", "parts", "blocks", "full"), default="none",
                    help="torch.compile the loss's helpers, each layer or all of it (GPU; not with --batch 0)")
    ap.add_argument("--moe", choices=("dense", "sparse", "auto"), default="dense",
                    help="routed experts on every token (no host synchronisation) or on their own tokens; "
                         "auto: the faster (with --batch 0 on a GPU, else dense)")
    ap.add_argument("--smoke", action="store_true", help="a tiny model on a few files (CPU is enough)")
    args = ap.parse_args()
    if args.batch == 0 and args.compile != "none":
        ap.error("--compile needs --batch N (each batch size would compile again)")
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t_start = time.time()
    found = corpus.sources(2_000_000 if args.smoke else 40_000_000, (3e6 if args.smoke else args.data_mb * 1e6))
    files = [f for _, fs in found for f in fs]
    train_files, heldout_files = corpus.split(files)
    train_texts, heldout_texts = corpus.read_texts(train_files), corpus.read_texts(heldout_files)
    report = {"seed": args.seed, "args": vars(args), "sources": [m for m, _ in found],
              "train_files": len(train_files), "heldout_files": len(heldout_files),
              "train_bytes": sum(len(t.encode()) for t in train_texts),
              "heldout_bytes": sum(len(t.encode()) for t in heldout_texts),
              "files_sha256": hashlib.sha256("\n".join(r for r, _ in files).encode()).hexdigest()}
    tok = make_tokenizer(train_texts, args.vocab, args.smoke)
    data = token_stream(tok, train_texts)
    report["train_tokens"], report["prep_seconds"] = len(data), time.time() - t_start
    print(json.dumps({k: v for k, v in report.items() if k != "sources"}), flush=True)
    model, _ = new_model(smoke_config if args.smoke else mini_config, tok.tokens, gen)
    model = model.to(dev)
    model.sparse_moe = args.moe == "sparse"
    main_params = sum(t.numel() for n, t in model.named_checkpoint_tensors() if not n.startswith("mtp."))
    report["parameters_main"] = main_params
    report["parameters_draft"] = sum(t.numel() for n, t in model.named_checkpoint_tensors() if n.startswith("mtp."))
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # the fp32 products (mHC streams, router) in training
    loss_fn, undo_compile = compiled_losses(args.compile if dev.type == "cuda" else "none", model)
    if args.batch == 0:
        t_probe = time.time()
        args.batch = pick_batch(model, data, args, dev, report, loss_fn) if dev.type == "cuda" else 64
        report["probe_seconds"] = time.time() - t_probe
        report["batch"] = args.batch
    args.moe = report["moe"] = "sparse" if model.sparse_moe else "dense"  # what ran (report["args"] is args)
    print(f"batch {args.batch}, {args.moe} experts", flush=True)
    train(model, data, args, gen, dev, report, loss_fn, t_start)
    undo_compile()
    values = export(model, tok, model.c, args.out)
    load_values(model, values)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    evaluate(model, tok, heldout_texts or train_texts[-20:], dev, args, report)
    report["total_seconds"] = time.time() - t_start
    json.dump(report, open(os.path.join(args.out, "report.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k not in ("sources", "train_log")}, indent=1), flush=True)


def evaluate(model, tok, texts, dev, args, report):
    rows = mini_eval.heldout_rows(tok, texts, args.seq + 1, 8 if args.smoke else 64)
    nll = mini_eval.heldout_nll(model, rows, dev)
    nbytes = mini_eval.row_bytes(tok, rows)
    v41.write_safetensors(os.path.join(args.out, "heldout.safetensors"),
                          {"input_ids": rows, "nll": nll.float()})
    total = float(nll.sum())
    report["heldout"] = {"rows": rows.shape[0], "tokens": rows[:, 1:].numel(), "bytes": sum(nbytes),
                         "mean_nll": total / rows[:, 1:].numel(),
                         "perplexity": math.exp(total / rows[:, 1:].numel()),
                         "bits_per_byte": total / math.log(2) / sum(nbytes)}
    report["draft_acceptance"] = [mini_eval.acceptance(model, rows[:16], dev, t) for t in (0.0, 0.7)]
    prompts = mini_eval.code_prompts(texts)
    with open(os.path.join(args.out, "code_prompts.jsonl"), "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    prompt = "def fibonacci(n):"
    ids = mini_eval.greedy(model, [0] + tok.encode_batch([prompt])[0], 48, dev)
    report["sample_prompt"], report["sample_greedy_text"] = prompt, tok.decode(ids[1:])


if __name__ == "__main__":
    main()
