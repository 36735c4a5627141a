#!/usr/bin/env python3
"""Independent PyTorch reference of the DeepSeek-V4.1 DSpark draft forward, and its fixture.

Extends v41_reference.py (the target) with the draft model stored under `mtp.*`, as the research
notes (shared/research/deepseek_v41_dspark.md §2) describe the released V4.1-Flash draft. The
choices where those notes leave room are stated here and followed by the C++ code alike:
  * Taps: the residual entering each of `dspark_target_layer_ids` (before that layer's Engram),
    averaged over the hc streams; a committed token's features are the taps concatenated in the
    listed order, m_t = main_norm(main_proj . f_t) (mtp.0.main_proj / mtp.0.main_norm).
  * Context: every draft layer i keeps keys of committed tokens only,
    k_t = FP8(RoPE_main(kv_norm_i(wkv_i . m_t), t)) (ratio-0 layers use the main RoPE), the last
    `sliding_window` of them.
  * Block: tokens [anchor, noise x (T - 1)] at positions P .. P + T - 1, where P is the anchor's
    position (the first position without target features). Each block query attends the
    context keys of positions [max(0, P - window), P) and all T block keys (no causal mask inside
    the block), with the layer's sinks; keys of the block are FP8(RoPE(kv_norm(wkv . x))) as in the
    target's attention.
  * Blocks: V4.1 layers with delayed mHC across the draft layers (the first site collapses
    stream 0, the last `pre` collapses before mtp.{L-1}.norm), SWA-only attention, MoE with
    dspark_n_routed_experts routed experts, top dspark_num_experts_per_tok, one shared expert.
  * Outputs: block row k (k = 1 .. T - 1, the noise rows) drafts the token at position P + k.
    U_k = head . norm(hpre_k) (the target's head), e_{k-1} = W1[x_{k-1}] with x_0 the anchor,
    logits_k = U_k + W2 . e_{k-1} (markov_head.embed = W1 [V, r], markov_head.head = W2 [V, r]),
    confidence c_k = sigmoid(proj . [hpre_k ; e_{k-1}] + bias) on the pre-norm hidden hpre_k.
    Greedy drafting takes x_k = argmax logits_k (ties to the lower id), left to right.

Usage: dspark_reference.py OUT_DIR   (writes OUT_DIR/v41_dspark/{config.json, model.safetensors,
reference.safetensors})
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import v41_reference as v41  # noqa: E402


def draft_tensor_shapes(c):
    D, r, L, V = c["hidden_size"], c["dspark_markov_rank"], c["num_nextn_predict_layers"], c["vocab_size"]
    taps = len(c["dspark_target_layer_ids"])
    shapes = {"mtp.0.main_proj.weight": ([D, taps * D], "bf16"), "mtp.0.main_norm.weight": ([D], "bf16")}
    for i in range(L):
        shapes.update({f"mtp.{i}.{k}": v for k, v in v41.block_shapes(c, c["dspark_n_routed_experts"]).items()})
    last = f"mtp.{L - 1}."
    shapes.update({last + "norm.weight": ([D], "bf16"), last + "markov_head.embed.weight": ([V, r], "bf16"),
                   last + "markov_head.head.weight": ([V, r], "bf16"),
                   last + "confidence_head.proj.weight": ([1, D + r], "f32"),
                   last + "confidence_head.proj.bias": ([1], "f32")})
    return shapes


class Draft:
    def __init__(self, cfg, weights):
        self.c, self.w = cfg, weights
        self.target = v41.Reference(cfg, weights)
        rp = cfg["rope_parameters"]
        self.rope = v41.yarn_inv_freq(rp["main"], cfg["qk_rope_head_dim"])

    def p(self, name):
        return self.w[name].float()

    def context(self, taps):
        """m_t of every position [T, D] from the target's taps (dict layer -> [T, D])."""
        f = torch.cat([taps[l] for l in self.c["dspark_target_layer_ids"]], dim=-1)
        return v41.rms_norm(f @ self.p("mtp.0.main_proj.weight").t(), self.p("mtp.0.main_norm.weight"),
                            self.c["rms_norm_eps"])

    def keys(self, i, x, pos, normed=True):
        pfx, eps = f"mtp.{i}.attn.", self.c["rms_norm_eps"]
        inv, fac = self.rope
        kv = v41.rms_norm(x @ self.p(pfx + "wkv.weight").t(), self.p(pfx + "kv_norm.weight"), eps)
        return v41.fake_fp8(v41.rope(kv, pos, inv, fac), 32)

    def attention(self, i, x, pos, ctx_keys):
        c, pfx = self.c, f"mtp.{i}.attn."
        inv, fac = self.rope
        H, d, eps, T = c["num_attention_heads"], c["head_dim"], c["rms_norm_eps"], x.shape[0]
        qr = v41.rms_norm(x @ self.p(pfx + "wq_a.weight").t(), self.p(pfx + "q_norm.weight"), eps)
        q = v41.rope((qr @ self.p(pfx + "wq_b.weight").t()).view(-1, H, d), pos, inv, fac)
        kv = torch.cat([ctx_keys, self.keys(i, x, pos)], dim=0)
        logits = torch.einsum("nhd,td->nht", q, kv) * d ** -0.5
        sinks = self.p(pfx + "attn_sink").view(1, H, 1).expand(T, H, 1)
        probs = torch.softmax(torch.cat([logits, sinks], dim=-1), dim=-1)[..., :-1]
        out = v41.rope(torch.einsum("nht,td->nhd", probs, kv), pos, inv, fac, inverse=True)
        G = c["o_groups"]
        wo_a = self.p(pfx + "wo_a.weight").view(G, -1, H * d // G)
        grouped = torch.einsum("ngk,grk->ngr", out.reshape(T, G, -1), wo_a).reshape(T, -1)
        return grouped @ self.p(pfx + "wo_b.weight").t()

    def moe(self, i, x):
        c, pfx = self.c, f"mtp.{i}.ffn."
        logits = (x @ self.p(pfx + "gate.weight").t()) / c.get("gate_temp", 1.0)
        scores = torch.sqrt(F.softplus(logits))
        ids = self.target.gaps.topk(scores + self.p(pfx + "gate.bias"), c["dspark_num_experts_per_tok"])
        w = scores.gather(1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * c["routed_scaling_factor"]
        y = self.target.expert(pfx + "shared_experts.", x)
        for t in range(x.shape[0]):
            for j, e in enumerate(ids[t].tolist()):
                y[t] += w[t, j] * self.target.expert(pfx + f"experts.{e}.", x[t:t + 1])[0]
        return y

    def block(self, m, anchor, P):
        """Pre-norm hidden [T, D] of the block at positions P.. with context m [>= P, D]."""
        c, T, eps = self.c, self.c["dspark_block_size"], self.c["rms_norm_eps"]
        ids = torch.tensor([anchor] + [c["dspark_noise_token_id"]] * (T - 1))
        pos = torch.arange(P, P + T)
        ctx_pos = torch.arange(max(0, P - c["sliding_window"]), P)
        streams = self.p("model.embed.weight")[ids].unsqueeze(1).repeat(1, c["hc_mult"], 1)
        pre = torch.zeros(T, c["hc_mult"])
        pre[:, 0] = 1.0
        for i in range(c["num_nextn_predict_layers"]):
            pfx = f"mtp.{i}."
            a_pre, a_post, a_comb = v41.mixes(streams, self.p(pfx + "hc_attn_fn"), self.p(pfx + "hc_attn_base"),
                                              self.p(pfx + "hc_attn_scale"), c)
            h = v41.rms_norm(v41.collapse(streams, pre), self.p(pfx + "attn_norm.weight"), eps)
            ctx_keys = self.keys(i, m[ctx_pos], ctx_pos)
            streams = v41.expand(self.attention(i, h, pos, ctx_keys), streams, a_post, a_comb)
            f_pre, f_post, f_comb = v41.mixes(streams, self.p(pfx + "hc_ffn_fn"), self.p(pfx + "hc_ffn_base"),
                                              self.p(pfx + "hc_ffn_scale"), c)
            h = v41.rms_norm(v41.collapse(streams, a_pre), self.p(pfx + "ffn_norm.weight"), eps)
            streams = v41.expand(self.moe(i, h), streams, f_post, f_comb)
            pre = f_pre
        return v41.collapse(streams, pre)

    def draft(self, m, anchor, P):
        """Greedy draft of T - 1 tokens: (base logits, Markov logits, confidences, tokens)."""
        c, last = self.c, f"mtp.{self.c['num_nextn_predict_layers'] - 1}."
        hpre = self.block(m, anchor, P)[1:]
        h = v41.rms_norm(hpre, self.p(last + "norm.weight"), c["rms_norm_eps"])
        base = h @ self.p("lm_head.weight").t()
        w1, w2 = self.p(last + "markov_head.embed.weight"), self.p(last + "markov_head.head.weight")
        proj, bias = self.p(last + "confidence_head.proj.weight")[0], self.p(last + "confidence_head.proj.bias")
        prev, logits, conf, tokens = anchor, [], [], []
        for k in range(hpre.shape[0]):
            e = w1[prev]
            row = base[k] + w2 @ e
            conf.append(torch.sigmoid(torch.dot(proj, torch.cat([hpre[k], e])) + bias[0]))
            scores = row.tolist()
            prev = min(range(len(scores)), key=lambda t: (-scores[t], t))
            logits.append(row)
            tokens.append(prev)
        return base, torch.stack(logits), torch.stack(conf), torch.tensor(tokens)


# Context ends (anchor positions) checked: shorter than the window, one window, a wrapped ring.
DRAFT_POINTS = [3, 8, 13, 22]

FIXTURE = dict(seq_len=24, config=dict(
    v41.BASE, vocab_size=320, hidden_size=64, num_hidden_layers=6, num_attention_heads=2, head_dim=64,
    q_lora_rank=32, qk_rope_head_dim=16, o_groups=2, o_lora_rank=24, moe_intermediate_size=32,
    n_routed_experts=6, num_experts_per_tok=2, routed_scaling_factor=1.5, swiglu_limit=3.0,
    rms_norm_eps=1e-20, max_position_embeddings=4096, rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling={"type": "yarn", "factor": 4, "original_max_position_embeddings": 256, "beta_fast": 32,
                  "beta_slow": 1},
    sliding_window=8, compress_ratios=[0, 2, 2, 1, 1, 1, 0, 0, 0], kv_source_layer_ids=[1, 3],
    index_source_layer_ids=[1, 3, 4], candidate_source_layer_id=3, candidate_topk_blocks=3,
    candidate_block_size=4, index_n_heads=4, index_head_dim=32, index_topk=4, hc_sinkhorn_iters=20,
    num_nextn_predict_layers=3, dspark_block_size=5, dspark_noise_token_id=317,
    dspark_target_layer_ids=[3, 4, 5], dspark_markov_rank=16, dspark_n_routed_experts=4,
    dspark_num_experts_per_tok=2))

DSPARK_KEYS = ["dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank",
               "dspark_n_routed_experts", "dspark_num_experts_per_tok"]


def make_fixture(out_root, name="v41_dspark"):
    c = dict(FIXTURE["config"])
    c["rope_parameters"] = v41.rope_parameters(c)
    for seed in range(100):
        gen = torch.Generator().manual_seed(7000 + seed)
        stored, values = {}, {}
        shapes = dict(v41.tensor_shapes(c), **draft_tensor_shapes(c))
        for tname, (shape, dtype) in shapes.items():
            stored[tname], values[tname] = v41.store(v41.random_value(tname, shape, gen), dtype)
        ids = torch.randint(0, c["vocab_size"], (FIXTURE["seq_len"],), generator=gen)
        draft = Draft(c, values)
        with torch.no_grad():
            logits = draft.target.forward(ids, tap_layers=c["dspark_target_layer_ids"])
            m = draft.context(draft.target.taps)
            results = [draft.draft(m, int(ids[P]), P) for P in DRAFT_POINTS]
        if draft.target.gaps.min >= v41.MIN_TOPK_GAP:
            break
        print(f"{name}: seed {seed} has a top-k gap of {draft.target.gaps.min:.2e}; next seed")
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    text = dict(v41.text_config(c), model_type="deepseek_v41_text", gate_temp=c.get("gate_temp", 1.0))
    text.update({k: c[k] for k in DSPARK_KEYS})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "text_config": text},
                  f, indent=1)
    v41.write_safetensors(os.path.join(out, "model.safetensors"), stored)
    taps = torch.cat([draft.target.taps[l] for l in c["dspark_target_layer_ids"]], dim=-1)
    outputs = {"input_ids": ids.long(), "logits": logits.float(), "taps": taps.float(),
               "draft_points": torch.tensor(DRAFT_POINTS, dtype=torch.long),
               "draft_base_logits": torch.stack([r[0] for r in results]).float(),
               "draft_logits": torch.stack([r[1] for r in results]).float(),
               "draft_confidence": torch.stack([r[2] for r in results]).float(),
               "draft_tokens": torch.stack([r[3] for r in results]).long()}
    v41.write_safetensors(os.path.join(out, "reference.safetensors"), outputs)
    print(f"{name}: {ids.numel()} tokens, drafts {outputs['draft_tokens'].tolist()}, "
          f"confidences {[[round(float(x), 3) for x in r[2]] for r in results]}, min top-k gap {draft.target.gaps.min:.2e}")


def main():
    torch.set_num_threads(2)
    make_fixture(sys.argv[1] if len(sys.argv) > 1 else "tests/data/v41")


if __name__ == "__main__":
    main()
