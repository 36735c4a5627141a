#!/usr/bin/env python3
"""Generates tiny random-weight DeepSeek-V4 checkpoints and their HF reference logits.

Runs on the GPU machine (HF transformers 5.17 with `deepseek_v4`). For each fixture it writes
  <out>/<name>/config.json, *.safetensors       the checkpoint, as HF (or a legacy config) lays it out
  <out>/<name>/reference.safetensors            input_ids [L] int64, logits [L, V] fp32 (HF full forward,
                                                use_cache=False, fp32 compute on the stored values)
  <out>/<name>/hf_rope.safetensors              HF's rope inverse frequencies, inv_freq.{main,compress}
  <out>/<name>/debug.safetensors                with --debug only (not committed: it is most of a
                                                fixture's bytes): per-layer outputs, indexer top-k
  <out>/<name>/hf_config.json                   the config as HF parsed it

Every constant-initialised parameter (norm weights, sinks, position biases, mHC base/scale, router
bias, tid2eid) is randomized. Weights are stored bf16, the fp32-kept modules fp32. A seed is
rejected when any indexer / router top-k boundary is a near-tie, so that top-k selection is
well-defined and an engine's choice cannot legitimately differ from HF's.

Usage: gen_v4_fixtures.py OUT_DIR [--debug]
"""
import json
import math
import os
import sys
import traceback

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, DeepseekV4Config, DeepseekV4ForCausalLM

FP32_KEEP = {"attn_hc", "ffn_hc", "hc_head", "sinks", "position_bias", "e_score_correction_bias",
             "q_a_norm", "kv_norm", "input_layernorm", "post_attention_layernorm", "norm"}
MIN_TOPK_GAP = 1e-4
DEBUG = "--debug" in sys.argv[2:]

FIXTURES = {
    # HF-format config, one safetensors file, YaRN on the compressed layers.
    "v4_tiny_a": dict(
        seq_len=200, shards=None, legacy=False,
        config=dict(vocab_size=1024, hidden_size=64, num_hidden_layers=5, num_attention_heads=4,
                    head_dim=32, partial_rotary_factor=0.25, q_lora_rank=48, o_groups=2, o_lora_rank=24,
                    n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=32, swiglu_limit=1.0,
                    layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                                 "compressed_sparse_attention", "heavily_compressed_attention"],
                    mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
                    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
                    sliding_window=16, index_n_heads=8, index_head_dim=16, index_topk=5,
                    max_position_embeddings=1024, rope_theta=10000.0, compress_rope_theta=160000.0,
                    rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                                     "beta_fast": 32.0, "beta_slow": 1.0},
                    routed_scaling_factor=1.5, rms_norm_eps=1e-6, hc_sinkhorn_iters=20)),
    # Sharded safetensors with an index, plain RoPE everywhere, other shapes.
    "v4_tiny_b": dict(
        seq_len=150, shards="500KB", legacy=False,
        config=dict(vocab_size=768, hidden_size=96, num_hidden_layers=4, num_attention_heads=8,
                    head_dim=64, partial_rotary_factor=0.25, q_lora_rank=32, o_groups=4, o_lora_rank=16,
                    n_routed_experts=16, num_experts_per_tok=4, moe_intermediate_size=24, swiglu_limit=2.0,
                    layer_types=["compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention",
                                 "compressed_sparse_attention"],
                    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
                    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
                    sliding_window=8, index_n_heads=8, index_head_dim=32, index_topk=3,
                    max_position_embeddings=4096, rope_theta=10000.0, compress_rope_theta=40000.0,
                    routed_scaling_factor=2.5, rms_norm_eps=1e-5, hc_sinkhorn_iters=7)),
}

# A release-style legacy config (compress_ratios with the trailing MTP entry, num_hash_layers,
# qk_rope_head_dim, rope_scaling) with FP8 e4m3 block-scaled linears, fp16 experts, an fp32 head.
LEGACY_FP8 = dict(
    seq_len=300, block=32,
    config={
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
        "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 40,
        "o_lora_rank": 24, "o_groups": 2, "moe_intermediate_size": 48, "n_routed_experts": 6,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "num_hash_layers": 1, "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 1.5, "swiglu_limit": 2.0,
        "hidden_act": "silu", "index_n_heads": 8, "index_head_dim": 16, "index_topk": 4, "sliding_window": 12,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 1024, "rope_theta": 10000, "compress_rope_theta": 160000,
        "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 256,
                         "beta_fast": 32, "beta_slow": 1},
        "compress_ratios": [4, 128, 0, 4, 0], "num_nextn_predict_layers": 1, "bos_token_id": 0,
        "eos_token_id": 1, "tie_word_embeddings": False, "initializer_range": 0.02, "attention_bias": False,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "scale_fmt": "ue8m0", "weight_block_size": [32, 32]},
    })
FP8_LINEARS = ("self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight", "self_attn.kv_proj.weight",
               "self_attn.o_a_proj.weight", "self_attn.o_b_proj.weight", "shared_experts.gate_proj.weight",
               "shared_experts.up_proj.weight", "shared_experts.down_proj.weight")


def keep_fp32(name):
    return any(part in FP32_KEEP for part in name.split("."))


def randomize(model, gen):
    """Gives every parameter and persistent buffer a random value of a sensible scale."""
    cfg = model.config
    for name, p in model.named_parameters():
        leaf = name.split(".")[-1]
        if "norm" in name and leaf == "weight":
            val = 0.6 + 0.8 * torch.rand(p.shape, generator=gen)
        elif leaf == "sinks":
            val = torch.randn(p.shape, generator=gen)
        elif leaf == "position_bias":
            val = torch.randn(p.shape, generator=gen)
        elif leaf in ("base", "hc_base"):
            val = torch.randn(p.shape, generator=gen)
        elif leaf in ("scale", "hc_scale"):
            val = 0.5 + 1.5 * torch.rand(p.shape, generator=gen)
        elif leaf in ("fn", "hc_fn"):
            val = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
        elif leaf == "gate_up_proj":
            val = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]) * 1.5
        elif leaf == "down_proj":
            val = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
        elif name.endswith("embed_tokens.weight"):
            val = torch.randn(p.shape, generator=gen)
        elif name.endswith("lm_head.weight"):
            val = torch.randn(p.shape, generator=gen) * 3.0 / math.sqrt(p.shape[-1])
        elif leaf == "weight" and p.dim() == 2:
            val = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
        else:
            raise RuntimeError(f"no randomization rule for {name} {tuple(p.shape)}")
        p.data = val.to(p.dtype)
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.5 * torch.randn(b.shape, generator=gen))
        elif name.endswith("tid2eid"):
            rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: cfg.num_experts_per_tok]
                    for _ in range(cfg.vocab_size)]
            b.copy_(torch.stack(rows))


def store_dtypes(model):
    """Casts to the stored dtypes: bf16 weights, fp32 for the modules HF keeps in fp32."""
    for name, p in model.named_parameters():
        p.data = p.data.float() if keep_fp32(name) else p.data.to(torch.bfloat16)


class TopkRecorder:
    """Records indexer scores / router scores and the smallest top-k boundary gap."""

    def __init__(self, model):
        self.min_gap = float("inf")
        self.topk = {}
        cfg = model.config
        for i, layer in enumerate(model.model.layers):
            comp = layer.self_attn.compressor
            if comp is not None and hasattr(comp, "indexer"):
                rate = cfg.compress_rates["compressed_sparse_attention"]
                comp.indexer.scorer.register_forward_hook(self._scorer_hook(rate, cfg.index_topk))
                comp.indexer.register_forward_hook(self._store(f"layer{i}.topk"))
            gate = layer.mlp.gate
            if not layer.mlp.is_hash:
                gate.register_forward_hook(self._router_hook(gate))

    def _store(self, key):
        def hook(_m, _inp, out):
            self.topk[key] = out[0].detach().clone()
        return hook

    def _scorer_hook(self, rate, k):
        def hook(_m, _inp, scores):
            s = scores[0].double()  # [S, T]
            for t in range(s.shape[0]):
                n_valid = (t + 1) // rate
                if n_valid > k:
                    top = s[t, :n_valid].sort(descending=True).values
                    self.min_gap = min(self.min_gap, (top[k - 1] - top[k]).item())
        return hook

    def _router_hook(self, gate):
        def hook(_m, _inp, out):
            logits = out[0].double()
            sel = torch.sqrt(torch.nn.functional.softplus(logits)) + gate.e_score_correction_bias.double()
            top = sel.sort(dim=-1, descending=True).values
            k = gate.top_k
            self.min_gap = min(self.min_gap, (top[:, k - 1] - top[:, k]).min().item())
        return hook


def debug_hooks(model, store):
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_hook(lambda _m, _i, out, i=i: store.__setitem__(f"layer{i}.out", out[0].detach().clone()))
        layer.self_attn.register_forward_hook(
            lambda _m, _i, out, i=i: store.__setitem__(f"layer{i}.attn_out", out[0][0].detach().clone()))
        layer.mlp.register_forward_hook(
            lambda _m, _i, out, i=i: store.__setitem__(f"layer{i}.mlp_out", out[0].detach().clone()))


def run_reference(model, input_ids, out_dir):
    model.eval()
    recorder = TopkRecorder(model)
    store = {}
    if DEBUG:
        debug_hooks(model, store)
    with torch.no_grad():
        out = model(input_ids=input_ids[None], use_cache=False)
    rot = model.model.rotary_emb
    rope = {f"inv_freq.{key}": getattr(rot, f"{key}_inv_freq").detach().float().clone() for key in ("main", "compress")}
    save_file(rope, f"{out_dir}/hf_rope.safetensors")
    if DEBUG:
        store.update({k: v.long() for k, v in recorder.topk.items()})
        save_file({k: v.contiguous() for k, v in store.items()}, f"{out_dir}/debug.safetensors")
    logits = out.logits[0].float().contiguous()
    save_file({"input_ids": input_ids.contiguous(), "logits": logits}, f"{out_dir}/reference.safetensors")
    return recorder.min_gap, logits


def describe(name, logits, gap):
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).min().item()
    print(f"{name}: logits max|.| {logits.abs().max().item():.3f} std {logits.std().item():.3f}; "
          f"min argmax margin {margin:.2e}; min top-k boundary gap {gap:.2e}")


def make_hf_fixture(name, spec, out_root):
    for seed in range(100):
        gen = torch.Generator().manual_seed(1000 + seed)
        config = DeepseekV4Config(**spec["config"], bos_token_id=0, eos_token_id=1)
        config._attn_implementation = "eager"
        model = DeepseekV4ForCausalLM(config)
        randomize(model, gen)
        store_dtypes(model)
        out_dir = f"{out_root}/{name}"
        os.makedirs(out_dir, exist_ok=True)
        for f in os.listdir(out_dir):
            os.remove(f"{out_dir}/{f}")
        kwargs = {"max_shard_size": spec["shards"]} if spec["shards"] else {}
        model.save_pretrained(out_dir, **kwargs)
        ref, info = DeepseekV4ForCausalLM.from_pretrained(out_dir, dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise RuntimeError(f"{name}: HF reload was not clean: {bad}")
        input_ids = torch.randint(0, config.vocab_size, (spec["seq_len"],), generator=gen)
        gap, logits = run_reference(ref, input_ids, out_dir)
        if gap >= MIN_TOPK_GAP:
            json.dump(ref.config.to_dict(), open(f"{out_dir}/hf_config.json", "w"), indent=1, default=str)
            describe(f"{name} (seed {1000 + seed})", logits, gap)
            return
        print(f"{name}: seed {1000 + seed} has a top-k near-tie ({gap:.2e}), retrying")
    raise RuntimeError(f"{name}: no tie-free seed")


def fp8_quantize(w, block):
    """Block-wise e4m3 with power-of-two (ue8m0) scales, so dequantized values are bf16-exact."""
    rows, cols = w.shape
    nr, nc = math.ceil(rows / block), math.ceil(cols / block)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    scale = torch.empty(nr, nc, dtype=torch.float32)
    deq = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(nr):
        for j in range(nc):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block].float()
            s = 2.0 ** math.ceil(math.log2(max(blk.abs().max().item(), 1e-30) / 448.0))
            qb = (blk / s).to(torch.float8_e4m3fn)
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = qb
            scale[i, j] = s
            deq[i * block:(i + 1) * block, j * block:(j + 1) * block] = qb.float() * s
    return q, scale, deq


def make_legacy_fp8_fixture(out_root):
    name, spec = "v4_tiny_legacy_fp8", LEGACY_FP8
    out_dir = f"{out_root}/{name}"
    os.makedirs(out_dir, exist_ok=True)
    json.dump(spec["config"], open(f"{out_dir}/config.json", "w"), indent=1)
    for seed in range(100):
        gen = torch.Generator().manual_seed(5000 + seed)
        config = AutoConfig.from_pretrained(out_dir)
        config._attn_implementation = "eager"
        model = DeepseekV4ForCausalLM(config)
        randomize(model, gen)
        store_dtypes(model)
        stored, reference_state = {}, {}
        for key, t in model.state_dict().items():
            t = t.detach()
            if key.endswith(FP8_LINEARS):
                q, scale, deq = fp8_quantize(t, spec["block"])
                stored[key], stored[key.replace(".weight", ".weight_scale_inv")] = q, scale
                reference_state[key] = deq
            elif key.endswith(("gate_up_proj", "down_proj")) and ".experts." in key:
                stored[key] = t.to(torch.float16)
                reference_state[key] = stored[key].float()
            elif key == "lm_head.weight":
                stored[key] = t.float()
                reference_state[key] = stored[key]
            else:
                stored[key] = t
                reference_state[key] = t.float() if t.is_floating_point() else t
        # Release checkpoints carry MTP tensors that a V4 main-model loader must skip.
        stored["mtp.0.e_proj.weight"] = torch.randn(8, 8, generator=gen).to(torch.bfloat16)
        stored["mtp.0.norm.weight"] = torch.ones(8)
        model = model.float()
        model.load_state_dict(reference_state, strict=True)
        save_file({k: v.contiguous() for k, v in stored.items()}, f"{out_dir}/model.safetensors",
                  metadata={"format": "pt"})
        input_ids = torch.randint(0, config.vocab_size, (spec["seq_len"],), generator=gen)
        gap, logits = run_reference(model, input_ids, out_dir)
        if gap >= MIN_TOPK_GAP:
            json.dump(model.config.to_dict(), open(f"{out_dir}/hf_config.json", "w"), indent=1, default=str)
            describe(f"{name} (seed {5000 + seed})", logits, gap)
            return
        print(f"{name}: seed {5000 + seed} has a top-k near-tie ({gap:.2e}), retrying")
    raise RuntimeError(f"{name}: no tie-free seed")


def main():
    torch.set_num_threads(min(16, os.cpu_count()))
    out_root = sys.argv[1]
    jobs = [lambda n=n, s=s: make_hf_fixture(n, s, out_root) for n, s in FIXTURES.items()]
    jobs.append(lambda: make_legacy_fp8_fixture(out_root))
    failed = 0
    for job in jobs:
        try:
            job()
        except Exception:  # keep going: one broken fixture should not cost the others
            traceback.print_exc()
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
