#!/usr/bin/env python3
"""Trains deepinfer-nano: a small DeepSeek-V4 (HF transformers `deepseek_v4`) on Python sources (the
standard library and permissively licensed packages found on the machine, licences checked from
package metadata), with a byte-level BPE tokenizer trained on the same files and a one-block MTP
draft head.

Runs on the GPU machine in well under 8 minutes. Everything random comes from --seed. The number of
optimizer steps is fixed by --steps; with --time-budget instead, the step count is derived from the
measured speed of the first steps and recorded, so `--steps N` reproduces the run.

Writes to OUT_DIR:
  model/        config.json, model.safetensors (main model + mtp.0.* draft head), tokenizer.json,
                tokenizer_config.json, generation_config.json
  heldout.safetensors  held-out token sequences [N, L+1] and HF's fp32 full-forward NLL per sequence
  report.json   data manifest (files, bytes, licence), losses, perplexities, MTP accuracy, sample
Usage: train_nano.py OUT_DIR [--seed 0] [--steps N | --time-budget SECONDS]
"""
import argparse
import copy
import hashlib
import json
import math
import os
import sys
import sysconfig
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4DecoderLayer, DeepseekV4HyperHead, DeepseekV4RMSNorm)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_corpus import read_texts, split  # noqa: E402

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
VOCAB = 4096
SEQ = 512
HELDOUT_SEQS = 64


def model_config():
    return DeepseekV4Config(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=6, num_attention_heads=4, head_dim=64,
        partial_rotary_factor=0.25, q_lora_rank=128, o_groups=2, o_lora_rank=64, n_routed_experts=6,
        num_experts_per_tok=2, moe_intermediate_size=192, swiglu_limit=10.0,
        layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                     "compressed_sparse_attention", "heavily_compressed_attention", "compressed_sparse_attention"],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe", "moe", "moe"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        sliding_window=64, index_n_heads=4, index_head_dim=32, index_topk=16, max_position_embeddings=8192,
        rope_theta=10000.0, compress_rope_theta=40000.0, routed_scaling_factor=1.5, rms_norm_eps=1e-6,
        hc_sinkhorn_iters=20, initializer_range=0.02, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)


# ---------------------------------------------------------------------------------------------
# Data: Python sources of this machine under licences that allow redistributing a model trained on
# them: the standard library (PSF-2.0) and packages whose metadata declares MIT / BSD / Apache-2.0.
# ---------------------------------------------------------------------------------------------

PACKAGES = ["numpy", "scipy", "pandas", "sympy", "networkx", "transformers", "requests", "urllib3", "click", "jinja2",
            "markupsafe", "attrs", "yaml", "idna", "packaging", "six"]
DISTRIBUTIONS = {"yaml": "PyYAML", "attrs": "attrs", "jinja2": "Jinja2", "markupsafe": "MarkupSafe"}
PERMISSIVE = ("MIT", "BSD", "Apache", "PSF")
PACKAGE_BYTES_CAP = 4_000_000


def python_files(root, cap=None, skip=("site-packages", "__pycache__", "dist-packages")):
    files, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if not name.endswith(".py") or os.path.getsize(path) >= 400_000:
                continue
            if cap is not None and total + os.path.getsize(path) > cap:
                return files
            total += os.path.getsize(path)
            files.append(path)
    return files


def package_licence(pkg):
    """The licence a package declares in its metadata, or None when it is not a permissive one."""
    from importlib import metadata
    try:
        md = metadata.metadata(DISTRIBUTIONS.get(pkg, pkg))
    except metadata.PackageNotFoundError:
        return None
    declared = [md.get("License-Expression") or "", md.get("License") or ""]
    declared += [c for c in md.get_all("Classifier") or [] if c.startswith("License ::")]
    text = " | ".join(d.splitlines()[0] for d in declared if d)
    return text if any(k in text for k in PERMISSIVE) else None


def corpus_files(smoke):
    root = sysconfig.get_paths()["stdlib"]
    sources = [{"name": "python-stdlib", "version": sys.version.split()[0], "licence": "PSF-2.0",
                "files": python_files(root)}]
    for pkg in ([] if smoke else PACKAGES):
        try:
            mod = __import__(pkg)
        except Exception:
            continue
        lic = package_licence(pkg)
        if lic is None or not getattr(mod, "__file__", None):
            continue
        from importlib import metadata
        sources.append({"name": pkg, "version": metadata.version(DISTRIBUTIONS.get(pkg, pkg)), "licence": lic,
                        "files": python_files(os.path.dirname(mod.__file__), cap=PACKAGE_BYTES_CAP)})
    files = [(f"{s['name']}/{os.path.basename(p)}:{i}", p) for s in sources for i, p in enumerate(s["files"])]
    manifest = [{k: v for k, v in s.items() if k != "files"} | {"num_files": len(s["files"]),
                 "bytes": sum(os.path.getsize(p) for p in s["files"])} for s in sources]
    return manifest, files


def train_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def token_stream(tok, texts):
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.append(0)
        ids.extend(enc.ids)
        ids.append(1)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------------------------------------
# Model: HF DeepSeek-V4 plus a one-block MTP head predicting token t+2
# ---------------------------------------------------------------------------------------------

class MtpHead(torch.nn.Module):
    """V4-style MTP: h_proj(hnorm(streams_t)) + e_proj(enorm(embed(x_{t+1}))) -> one SWA block ->
    hc_head -> norm -> the main model's LM head."""

    def __init__(self, config):
        super().__init__()
        cfg = copy.deepcopy(config)
        cfg.num_hidden_layers = 1
        cfg.layer_types = ["sliding_attention"]
        cfg.mlp_layer_types = ["moe"]
        self.cfg = cfg
        d = config.hidden_size
        self.e_proj = torch.nn.Linear(d, d, bias=False)
        self.h_proj = torch.nn.Linear(d, d, bias=False)
        self.enorm = DeepseekV4RMSNorm(d, eps=config.rms_norm_eps)
        self.hnorm = DeepseekV4RMSNorm(d, eps=config.rms_norm_eps)
        self.block = DeepseekV4DecoderLayer(cfg, 0)
        self.hc_head = DeepseekV4HyperHead(cfg)
        self.norm = DeepseekV4RMSNorm(d, eps=config.rms_norm_eps)

    def forward(self, streams, next_ids, lm):
        embed = lm.model.embed_tokens(next_ids)
        s = self.h_proj(self.hnorm(streams)) + self.e_proj(self.enorm(embed))[:, :, None, :]
        pos = torch.arange(next_ids.shape[1], device=next_ids.device)[None].expand(next_ids.shape[0], -1)
        rot = lm.model.rotary_emb
        pe = {k: rot(embed, position_ids=pos, layer_type=k) for k in ("main", "compress")}
        mask = create_sliding_window_causal_mask(config=self.cfg, inputs_embeds=embed, attention_mask=None,
                                                 past_key_values=None, position_ids=pos)
        s = self.block(s, position_embeddings=pe, position_ids=pos, attention_mask=mask, input_ids=next_ids)
        return lm.lm_head(self.norm(self.hc_head(s)))


def build(config, gen):
    model = DeepseekV4ForCausalLM(config)
    model.config._attn_implementation = "eager"
    for layer in model.model.layers:  # hash routing table: distinct experts per token
        if layer.mlp.is_hash:
            rows = [torch.randperm(config.n_routed_experts, generator=gen)[: config.num_experts_per_tok]
                    for _ in range(config.vocab_size)]
            layer.mlp.gate.tid2eid.copy_(torch.stack(rows))
    mtp = MtpHead(config)
    # HF modules allocate with torch.empty and initialise in post_init; the head is outside the model.
    with torch.no_grad():
        mtp.apply(model._init_weights)
    return model, mtp


class StreamCapture:
    """Keeps the last decoder layer's output streams (the MTP head's input)."""

    def __init__(self, model):
        self.streams = None
        model.model.layers[-1].register_forward_hook(self._hook)

    def _hook(self, _m, _i, out):
        self.streams = out


def losses(model, mtp, capture, batch):
    x, y = batch[:, :-1], batch[:, 1:]
    logits = model(input_ids=x, use_cache=False).logits
    main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    mtp_logits = mtp(capture.streams[:, :-1], x[:, 1:], model)
    mtp_loss = F.cross_entropy(mtp_logits.float().reshape(-1, mtp_logits.shape[-1]), y[:, 1:].reshape(-1))
    return main, mtp_loss, logits, mtp_logits


# ---------------------------------------------------------------------------------------------
# Training, export, evaluation
# ---------------------------------------------------------------------------------------------

def train(model, mtp, capture, data, args, gen, report):
    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    batch_size, warmup = args.batch, 100
    steps = args.steps or 10**9
    t0 = time.time()
    step = 0
    while step < steps:
        if args.steps == 0 and step == 30:  # derive the step count from the measured speed
            per_step = (time.time() - t0) / 30
            steps = int(args.time_budget / per_step)
            report["steps"] = steps
            print(f"{per_step * 1000:.0f} ms/step -> {steps} steps", flush=True)
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step / max(steps, 1), 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - SEQ - 2, (batch_size,), generator=gen)
        batch = torch.stack([data[s:s + SEQ + 1] for s in starts.tolist()]).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, mtp_loss, _, _ = losses(model, mtp, capture, batch)
        total = main + 0.3 * mtp_loss
        if (step < 10 or step % 100 == 0) and not torch.isfinite(total):
            raise RuntimeError(f"loss is not finite at step {step}: main {main.item()} mtp {mtp_loss.item()}")
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0:
            print(f"step {step} loss {main.item():.3f} mtp {mtp_loss.item():.3f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
        step += 1
    report.setdefault("steps", steps)
    report["train_seconds"] = time.time() - t0
    report["final_train_loss"] = main.item()


FP32_KEEP = {"attn_hc", "ffn_hc", "hc_head", "sinks", "position_bias", "e_score_correction_bias", "q_a_norm", "kv_norm",
             "input_layernorm", "post_attention_layernorm", "norm", "enorm", "hnorm"}


def stored_dtype(name, t):
    if not t.is_floating_point():
        return t
    return t.float() if any(p in FP32_KEEP for p in name.split(".")) else t.to(torch.bfloat16)


def export(model, mtp, tok, out):
    d = f"{out}/model"
    os.makedirs(d, exist_ok=True)
    for name, p in model.named_parameters():
        p.data = stored_dtype(name, p.data)
    model.save_pretrained(d)
    weights = load_file(f"{d}/model.safetensors")
    for name, t in mtp.state_dict().items():
        weights[f"mtp.0.{name}"] = stored_dtype(name, t.detach()).contiguous().cpu()
    save_file(weights, f"{d}/model.safetensors", metadata={"format": "pt"})
    tok.save(f"{d}/tokenizer.json")
    json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": BOS, "eos_token": EOS,
               "model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast"},
              open(f"{d}/tokenizer_config.json", "w"), indent=1)


@torch.no_grad()
def hf_heldout(model_dir, seqs, heldout_path, report):
    """HF full forward (fp32, no cache) of the checkpoint in model_dir on the held-out rows `seqs`
    [N, SEQ + 1]: each row's mean NLL (saved with the rows to heldout_path) and the MTP head's
    next-next-token accuracy, into report. Returns the HF model."""
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    ref.config._attn_implementation = "eager"
    mtp = MtpHead(ref.config).cuda().float()  # the shipped (bf16 / fp32) draft head weights
    stored = load_file(f"{model_dir}/model.safetensors")
    mtp.load_state_dict({k[len("mtp.0."):]: v.float() for k, v in stored.items() if k.startswith("mtp.0.")})
    capture = StreamCapture(ref)
    nll, mtp_hits, mtp_total = [], 0, 0
    for i in range(0, seqs.shape[0], 8):
        batch = seqs[i:i + 8].cuda()
        main, _, logits, mtp_logits = losses(ref, mtp, capture, batch)
        token_nll = F.cross_entropy(logits.float().transpose(1, 2), batch[:, 1:], reduction="none")
        nll.append(token_nll.mean(dim=1).cpu())
        mtp_hits += (mtp_logits.argmax(-1) == batch[:, 2:]).sum().item()
        mtp_total += batch[:, 2:].numel()
    nll = torch.cat(nll)
    save_file({"input_ids": seqs.contiguous(), "hf_mean_nll": nll.contiguous()}, heldout_path)
    report["heldout_sequences"] = seqs.shape[0]
    report["heldout_loss"] = nll.mean().item()
    report["heldout_perplexity"] = math.exp(nll.mean().item())
    report["mtp_next_next_token_accuracy"] = mtp_hits / mtp_total
    return ref


def evaluate(out, heldout_stream, report):
    """hf_heldout of the exported checkpoint on the first held-out sequences."""
    n = max(1, min(HELDOUT_SEQS, (len(heldout_stream) - 1) // (SEQ + 1)))
    seqs = heldout_stream[: n * (SEQ + 1)].view(n, SEQ + 1)
    return hf_heldout(f"{out}/model", seqs, f"{out}/heldout.safetensors", report)


@torch.no_grad()
def sample(ref, tok, report, prompt="def fibonacci(n):", new_tokens=48):
    ids = [0] + tok.encode(prompt, add_special_tokens=False).ids
    for _ in range(new_tokens):
        logits = ref(input_ids=torch.tensor([ids]).cuda(), use_cache=False).logits[0, -1]
        ids.append(int(logits.argmax()))
    report["sample_prompt"] = prompt
    report["sample_greedy_ids"] = ids
    report["sample_greedy_text"] = tok.decode(ids[1:])
    if not math.isfinite(report.get("heldout_loss", 0.0)):
        raise RuntimeError("held-out loss is not finite")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=330.0)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--smoke", action="store_true", help="a quick end-to-end check on 100 files")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    t_start = time.time()
    manifest, files = corpus_files(args.smoke)
    if args.smoke:
        files = files[:300]
    train_files, heldout_files = split(files)
    train_texts, heldout_texts = read_texts(train_files), read_texts(heldout_files)
    report = {"seed": args.seed, "sources": manifest,
              "train_files": len(train_files), "heldout_files": len(heldout_files),
              "train_bytes": sum(len(t.encode()) for t in train_texts),
              "heldout_bytes": sum(len(t.encode()) for t in heldout_texts),
              "files_sha256": hashlib.sha256("\n".join(r for r, _ in files).encode()).hexdigest()}
    tok = train_tokenizer(train_texts)
    data, heldout = token_stream(tok, train_texts), token_stream(tok, heldout_texts)
    if len(heldout) < SEQ + 1:  # only in --smoke runs over a few files
        heldout = data[-2 * (SEQ + 1):]
    report["train_tokens"], report["heldout_tokens"] = len(data), len(heldout)
    print(json.dumps(report), flush=True)
    model, mtp = build(model_config(), gen)
    model, mtp = model.cuda(), mtp.cuda()
    report["parameters_main"] = sum(p.numel() for p in model.parameters())
    report["parameters_mtp"] = sum(p.numel() for p in mtp.parameters())
    capture = StreamCapture(model)
    train(model, mtp, capture, data, args, gen, report)
    export(model.cpu(), mtp.cpu(), tok, args.out)
    ref = evaluate(args.out, heldout, report)
    sample(ref, tok, report)
    report["total_seconds"] = time.time() - t_start
    json.dump(report, open(f"{args.out}/report.json", "w"), indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "sample_greedy_ids"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
