"""Batched, trainable DeepSeek-V4.1 with its DSpark draft, for training deepinfer-mini.

The math is v41_reference.py's (the target) and dspark_reference.py's (the draft), computed over a
batch [B, T] and with straight-through fake quantisation, so that what is trained is what the
release layout stores and the engine computes:
  * weights: FP8 e4m3 with a power-of-two scale per 32 x 32 block for the dense linears the
    release stores in FP8, MXFP4 (e2m1, power-of-two scale per 32 inputs) for routed experts;
  * activations: V4.1's QAT rounding (window KV FP8, compressed entries FP4 with e4m3 scales,
    indexer queries and keys FP4);
the backward pass treats every rounding as the identity. Where the references break top-k ties
to the lower index the indexer does too; the router uses torch.topk (exact ties of its
continuous scores do not happen). Routed
experts run densely (every expert on every token, weighted by the router's sparse combine
weights): identical results, no host synchronisation, and cheap at this size.

The indexers are trained as DeepSeek's sparse attention trains them: a KL term pulls the softmax
of the index scores over the selected entries towards the attention the heads paid them (inputs
detached, so only the indexer learns from it). Router biases are not learned by gradient; they
follow the auxiliary-loss-free balancing rule (see `balance`).
"""
import math

import torch
import torch.nn.functional as F

import dspark_reference as dspark
import mini_ops as ops
import v41_reference as v41

EXPERT_NAMES = ("w1", "w2", "w3")


def split_expert_name(name):
    """'P.ffn.experts.E.W.weight' -> (P, E, W): routed experts are stacked per layer here."""
    pfx, rest = name.split(".ffn.experts.")
    e, wname = rest.split(".")[:2]
    return pfx, int(e), wname


def stacked_expert_name(pfx, wname):
    return f"{pfx}.ffn.experts.{wname}.weight"


def init_value(name, shape, gen):
    if name.endswith("norm.weight") or name.endswith("q_weight") or name.endswith("k_weight"):
        return torch.ones(shape)
    if name.endswith(("attn_sink", "gate.bias", "bias_vl", "confidence_head.proj.weight", "confidence_head.proj.bias")):
        return torch.zeros(shape)
    if name.endswith("_scale"):
        return torch.ones(shape)
    if name.endswith("_base"):
        base = torch.zeros(shape)
        hc = int(round((-2 + math.sqrt(4 + 4 * shape[0])) / 2))
        base[2 * hc:] = torch.eye(hc).flatten()  # comb starts near the identity: streams stay apart
        return base
    if name.endswith("_fn"):
        return 1e-3 * torch.randn(shape, generator=gen)
    return 0.02 * torch.randn(shape, generator=gen)


class MiniV41(torch.nn.Module):
    """Parameters keyed by checkpoint name ('.' -> '__'); routed experts stacked per layer."""

    def __init__(self, c, gen, token_map=None):
        super().__init__()
        self.c = c
        self.quantize_weights = True
        self.sparse_moe = False  # routed experts on their own tokens (routed_sparse) instead of all
        shapes = dict(v41.tensor_shapes(c), **dspark.draft_tensor_shapes(c))
        self.expert_counts = {}
        for name, (shape, _dtype) in shapes.items():
            if ".ffn.experts." in name:
                pfx, e, _ = split_expert_name(name)
                self.expert_counts[pfx] = max(self.expert_counts.get(pfx, 0), e + 1)
                continue
            self.add(name, init_value(name, shape, gen), trainable=not name.endswith(("gate.bias", "bias_vl")))
        for pfx, E in self.expert_counts.items():
            for wname in EXPERT_NAMES:
                shape = shapes[f"{pfx}.ffn.experts.0.{wname}.weight"][0]
                self.add(stacked_expert_name(pfx, wname), 0.02 * torch.randn([E] + shape, generator=gen))
        rp = c["rope_parameters"]
        self.ropes = {k: v41.yarn_inv_freq(rp[k], c["qk_rope_head_dim"]) for k in ("main", "compress")}
        if c.get("engram_layer_ids"):
            self.register_buffer("token_map", torch.tensor(token_map, dtype=torch.long))
            self.engram_pad = int(token_map[c["engram_pad_id"]])
            self.engram_primes = v41.engram_primes(c)
            self.engram_mults = v41.engram_multipliers(c, c["engram_compressed_vocab_size"])
        self.loads = {}

    def add(self, name, value, trainable=True):
        self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(value, requires_grad=trainable))

    def raw(self, name):
        return getattr(self, name.replace(".", "__"))

    def p(self, name):
        w = self.raw(name)
        if not self.quantize_weights:
            return w
        if name.endswith(v41.FP8_LINEARS):
            return ops.ste(w, ops.fake_fp8_weight(w.detach()))
        if ".ffn.experts." in name:
            return ops.ste(w, ops.fake_mxfp4_weight(w.detach()))
        return w

    def named_checkpoint_tensors(self, stored=False):
        """(checkpoint name, fp32 tensor) of every weight, experts split per expert; with `stored`,
        the fake-quantised values the model computes with (what the release layout keeps)."""
        for pname, t in self.named_parameters():
            name = pname.replace("__", ".")
            t = self.p(name) if stored else t
            if ".ffn.experts." in name:
                pfx, wname = name.split(".ffn.experts.")[0], name.split(".")[-2]
                for e in range(t.shape[0]):
                    yield f"{pfx}.ffn.experts.{e}.{wname}.weight", t[e].detach()
            else:
                yield name, t.detach()

    # -----------------------------------------------------------------------------------------
    # Target

    def forward(self, ids, tap_layers=(), aux=None):
        """Logits [B, T, V]; taps {layer: [B, T, D]}; aux collects the indexers' KL terms."""
        c = self.c
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device)
        tables = {k: ops.rope_table(v, pos) for k, v in self.ropes.items()}
        streams = self.p("model.embed.weight")[ids].unsqueeze(2).repeat(1, 1, c["hc_mult"], 1)
        pre_mix = torch.zeros(B, T, c["hc_mult"], device=ids.device)
        pre_mix[..., 0] = 1.0
        shared, taps = {}, {}
        rows = self.engram_rows(ids) if c.get("engram_layer_ids") else None
        for l in range(c["num_hidden_layers"]):
            pfx = f"model.layers.{l}."
            if l in tap_layers:
                taps[l] = streams.float().mean(2)
            if l in c.get("engram_layer_ids", []):
                streams = self.engram(l, streams, rows[c["engram_layer_ids"].index(l)])
            streams, pre_mix = self.block(pfx, streams, pre_mix, lambda h: self.attention(l, h, pos, tables, shared, aux),
                                          lambda h: self.moe(pfx, h, c["num_experts_per_tok"]))
        h = v41.rms_norm(v41.collapse(streams, pre_mix), self.p("model.norm.weight"), c["rms_norm_eps"])
        return h @ self.p("lm_head.weight").t(), taps

    def block(self, pfx, streams, pre_mix, attention, ffn):
        c, eps = self.c, self.c["rms_norm_eps"]
        a_pre, a_post, a_comb = ops.mixes(streams, self.p(pfx + "hc_attn_fn"), self.p(pfx + "hc_attn_base"),
                                      self.p(pfx + "hc_attn_scale"), c)
        h = v41.rms_norm(v41.collapse(streams, pre_mix), self.p(pfx + "attn_norm.weight"), eps)
        streams = ops.expand(attention(h), streams, a_post, a_comb)
        f_pre, f_post, f_comb = ops.mixes(streams, self.p(pfx + "hc_ffn_fn"), self.p(pfx + "hc_ffn_base"),
                                      self.p(pfx + "hc_ffn_scale"), c)
        h = v41.rms_norm(v41.collapse(streams, a_pre), self.p(pfx + "ffn_norm.weight"), eps)
        return ops.expand(ffn(h), streams, f_post, f_comb), f_pre

    def engram_rows(self, ids):
        """Per Engram layer [B, T, cols] table rows, as v41.engram_hash_ids (n-grams start at the row)."""
        c = self.c
        comp = self.token_map[ids]
        pad = self.engram_pad
        shifted = [comp] + [F.pad(comp[:, :-k], (k, 0), value=pad) for k in range(1, c["engram_max_ngram_size"])]
        out = []
        for li in range(len(c["engram_layer_ids"])):
            mults = self.engram_mults[li]
            rolling, cols, offset = shifted[0] * mults[0], [], 0
            for n in range(1, c["engram_max_ngram_size"]):
                rolling = rolling ^ (shifted[n] * mults[n])
                for prime in self.engram_primes[li][n - 1]:
                    cols.append(torch.remainder(rolling, prime) + offset)
                    offset += prime
            out.append(torch.stack(cols, dim=-1))
        return out

    def engram(self, l, streams, rows):
        c, pfx = self.c, f"model.layers.{l}.engram."
        hc, D, eps = c["hc_mult"], c["hidden_size"], c["rms_norm_eps"]
        e = self.p(pfx + "embed.weight")[rows].flatten(-2)
        kv = e @ self.p(pfx + "wkv.weight").t()
        key, value = kv[..., :hc * D].unflatten(-1, (hc, D)).float(), kv[..., hc * D:].float()
        weight = self.p(pfx + "q_weight") * self.p(pfx + "k_weight")
        s32 = streams.float()
        rstd = torch.rsqrt(s32.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)
        dot = (s32 * weight * key).sum(-1) * rstd * D ** -0.5
        gate = torch.sigmoid(torch.copysign(dot.abs().clamp_min(1e-6).sqrt(), dot))
        return streams + gate.unsqueeze(-1) * value.unsqueeze(-2)

    def compress(self, l, x):
        c, r, pfx = self.c, self.c["compress_ratios"][l], f"model.layers.{l}.attn.compressor."
        kv = x @ self.p(pfx + "wkv.weight").t()
        if r > 1:
            g = x @ self.p(pfx + "wgate.weight").t()
            groups = x.shape[1] // r
            kv = kv[:, :groups * r].unflatten(1, (groups, r)).float()
            g = g[:, :groups * r].unflatten(1, (groups, r)).float()
            kv = (kv * torch.softmax(g, dim=2)).sum(2)
        return v41.rms_norm(kv, self.p(pfx + "norm.weight"), c["rms_norm_eps"])

    def indexer(self, l, x, qr, pos, tables, shared):
        c, r, pfx = self.c, self.c["compress_ratios"][l], f"model.layers.{l}.attn.indexer."
        keys = shared["index_keys"]
        hi, di = c["index_n_heads"], c["index_head_dim"]
        q = (qr.detach() @ self.p(pfx + "wq_b.weight").t()).unflatten(-1, (hi, di))
        q = ops.rope_bt(q.float(), *tables["compress"])
        q = ops.ste(q, v41.fake_fp4(q.detach(), 32, False))
        s = torch.relu(torch.einsum("bnhd,bgd->bnhg", q, keys)) * di ** -0.5
        w = (x.detach() @ self.p(pfx + "weights_proj.weight").t()).float() * hi ** -0.5
        scores = (s * w.unsqueeze(-1)).sum(2)
        visible = torch.arange(keys.shape[1], device=x.device)[None, :] < ((pos + 1) // r)[:, None]
        scores = scores.masked_fill(~visible, -float("inf"))
        cand = c["candidate_source_layer_id"]
        if l == cand:
            shared["candidates"] = self.candidate_blocks(scores.detach(), (pos + 1) // r)
        elif 0 <= cand < l and "candidates" in shared:
            scores = scores.masked_fill(~shared["candidates"], -float("inf"))
        top = ops.top_k(scores.detach(), min(c["index_topk"], keys.shape[1]))
        shared["selected"] = (top.indices, top.values > -float("inf"))  # [B, T, k] entry, valid
        shared["index_scores"] = scores

    def candidate_blocks(self, scores, visible_count):
        c = self.c
        bs, k = c["candidate_block_size"], c["candidate_topk_blocks"]
        B, n, g = scores.shape
        nb = (g + bs - 1) // bs
        blocks = F.pad(scores, (0, nb * bs - g), value=-float("inf")).unflatten(-1, (nb, bs)).amax(-1)
        last = (visible_count - 1) // bs
        pinned = (torch.arange(nb, device=scores.device)[None, :] == last[:, None]) & (visible_count[:, None] > 0)
        blocks = blocks.masked_fill(pinned.unsqueeze(0), float("inf"))
        top = ops.top_k(blocks, min(k, nb))
        keep = torch.zeros_like(blocks, dtype=torch.bool)
        keep.scatter_(-1, top.indices, top.values > -float("inf"))
        return keep.repeat_interleave(bs, dim=-1)[..., :g]

    def attention(self, l, x, pos, tables, shared, aux):
        """Window attention computed per block of `sliding_window` queries over the keys of that block
        and the one before (not over all T keys), the compressed entries only at the indexer's
        selection, and the sink: the reference's softmax over exactly the keys it lets through."""
        c, pfx = self.c, f"model.layers.{l}.attn."
        r = c["compress_ratios"][l]
        cos, sin = tables["compress" if r else "main"]
        B, T = x.shape[:2]
        H, d, eps = c["num_attention_heads"], c["head_dim"], c["rms_norm_eps"]
        qr = v41.rms_norm(x @ self.p(pfx + "wq_a.weight").t(), self.p(pfx + "q_norm.weight"), eps)
        q = ops.rope_bt((qr @ self.p(pfx + "wq_b.weight").t()).unflatten(-1, (H, d)).float(), cos, sin)
        kv = ops.rope_bt(v41.rms_norm(x @ self.p(pfx + "wkv.weight").t(), self.p(pfx + "kv_norm.weight"), eps), cos, sin)
        kv = ops.ste(kv, v41.fake_fp8(kv.detach(), 32))
        qb, blocks = ops.window_blocks(q, kv, c["sliding_window"])
        logits = [ops.window_logits(qb, blocks, c["sliding_window"])[:, :, :T] * d ** -0.5]
        if r:
            if l in c["kv_source_layer_ids"]:
                self.compressed_entries(l, x, pfx, shared)
            if l in c["index_source_layer_ids"]:
                self.indexer(l, x, qr, pos, tables, shared)
            if "selected" in shared:
                idx, valid = shared["selected"]
                comp = torch.einsum("bnhd,bgd->bhng", q, shared["entries"]) * d ** -0.5
                comp = comp.gather(-1, idx.unsqueeze(1).expand(-1, H, -1, -1))
                logits.append(comp.masked_fill(~valid.unsqueeze(1), -float("inf")))
        sinks = self.p(pfx + "attn_sink").view(1, H, 1, 1).expand(B, H, T, 1)
        probs = torch.softmax(torch.cat(logits + [sinks], dim=-1), dim=-1)
        out = ops.window_output(probs[..., :blocks.shape[2]], blocks, T)
        if len(logits) > 1:
            selected = probs[..., blocks.shape[2]:-1]
            if aux is not None and l in c["index_source_layer_ids"]:
                aux.append(self.index_kl(selected.detach(), shared))
            # In the product's dtype: under autocast it rounds to bf16 anyway, so only bytes are saved.
            dtype = ops.autocast_dtype(selected)
            dense = torch.zeros(B, H, T, shared["entries"].shape[1], dtype=dtype, device=x.device)
            dense = dense.scatter(-1, shared["selected"][0].unsqueeze(1).expand(-1, H, -1, -1), selected.to(dtype))
            out = out + torch.einsum("bhng,bgd->bnhd", dense, shared["entries"])
        out = ops.rope_bt(out, cos, sin, inverse=True)
        G = c["o_groups"]
        wo_a = self.p(pfx + "wo_a.weight").view(G, -1, H * d // G)
        grouped = torch.einsum("bngk,grk->bngr", out.reshape(B, T, G, -1), wo_a).flatten(-2)
        return grouped @ self.p(pfx + "wo_b.weight").t()

    def compressed_entries(self, l, x, pfx, shared):
        """A KV-source layer's compressed entries (and the indexer's keys): a new set to select from."""
        c, r, eps = self.c, self.c["compress_ratios"][l], self.c["rms_norm_eps"]
        latent = self.compress(l, x)
        gpos = torch.arange(latent.shape[1], device=x.device) * r
        gcos, gsin = ops.rope_table(self.ropes["compress"], gpos)
        if l in c["index_source_layer_ids"]:
            ip = pfx + "indexer."
            k = v41.rms_norm(latent.detach() @ self.p(ip + "wk.weight").t(), self.p(ip + "k_norm.weight"), eps)
            k = ops.rope_bt(k, gcos, gsin)
            shared["index_keys"] = ops.ste(k, v41.fake_fp4(k.detach(), 32, False))
        e = ops.rope_bt(latent, gcos, gsin)
        shared["entries"] = ops.ste(e, v41.fake_fp4(e.detach(), 16, True))
        shared.pop("selected", None)

    @staticmethod
    def index_kl(selected_probs, shared):
        """KL(attention over the selected entries || softmax of their index scores)."""
        idx, valid = shared["selected"]
        target = selected_probs.float().sum(1) * valid
        mass = target.sum(-1, keepdim=True)
        rows = mass.squeeze(-1) > 0
        target = target / mass.clamp_min(1e-12)
        logq = torch.log_softmax(shared["index_scores"].gather(-1, idx).masked_fill(~valid, -float("inf")), dim=-1)
        kl = torch.where(valid, target * (torch.log(target.clamp_min(1e-12)) - logq), torch.zeros_like(target))
        # where and a clamped count instead of boolean indexing: no data-dependent shapes (torch.compile)
        return torch.where(rows, kl.sum(-1), 0.0).sum() / rows.sum().clamp_min(1)

    def moe(self, pfx, x, topk):
        c, p = self.c, pfx + "ffn."
        logits = (x.float() @ self.p(p + "gate.weight").t().float()) / c.get("gate_temp", 1.0)
        scores = torch.sqrt(F.softplus(logits))
        ids = (scores + self.p(p + "gate.bias")).topk(topk, dim=-1).indices
        w = scores.gather(-1, ids)
        if topk > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c["routed_scaling_factor"]
        if self.training:
            flat = ids.flatten()
            self.loads[pfx] = torch.zeros(scores.shape[-1], device=x.device).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.float))
        y = self.expert(p + "shared_experts.", x)
        w1, w2, w3 = (self.p(p + f"experts.{n}.weight") for n in EXPERT_NAMES)
        if self.sparse_moe:
            return y + self.routed_sparse(x, ids, w, w1, w2, w3)
        combine = torch.zeros_like(scores).scatter(-1, ids, w)
        g = torch.einsum("...d,eid->...ei", x, w1)
        u = torch.einsum("...d,eid->...ei", x, w3)
        lim = c["swiglu_limit"]
        if lim > 0:
            u, g = u.clamp(-lim, lim), g.clamp(max=lim)
        a = F.silu(g) * u * combine.unsqueeze(-1).to(u.dtype)
        return y + torch.einsum("...ei,edi->...d", a, w2)

    def routed_sparse(self, x, ids, w, w1, w2, w3):
        """The routed experts on their own tokens only (sorted by expert; one host synchronisation
        for the counts): the dense path's result with a k/E share of its expert work and memory."""
        lim, D = self.c["swiglu_limit"], x.shape[-1]
        flat_x, k = x.reshape(-1, D), ids.shape[-1]
        order = torch.argsort(ids.reshape(-1), stable=True)
        token = order // k
        counts = torch.bincount(ids.reshape(-1), minlength=w1.shape[0]).tolist()
        outs = []
        for e, rows in enumerate(flat_x[token].split(counts)):
            g, u = rows @ w1[e].t(), rows @ w3[e].t()
            if lim > 0:
                u, g = u.clamp(-lim, lim), g.clamp(max=lim)
            outs.append((F.silu(g) * u) @ w2[e].t())
        weighted = torch.cat(outs).float() * w.reshape(-1)[order].unsqueeze(-1)
        out = torch.zeros(flat_x.shape[0], D, device=x.device).index_add(0, token, weighted)
        return out.view(*x.shape[:-1], D)

    def expert(self, pfx, x):
        lim = self.c["swiglu_limit"]
        g, u = x @ self.p(pfx + "w1.weight").t(), x @ self.p(pfx + "w3.weight").t()
        if lim > 0:
            u, g = u.clamp(-lim, lim), g.clamp(max=lim)
        return (F.silu(g) * u) @ self.p(pfx + "w2.weight").t()

    @torch.no_grad()
    def balance(self, rate):
        """Auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower the rest."""
        for pfx, load in self.loads.items():
            bias = self.raw(pfx + "ffn.gate.bias")
            bias += rate * torch.sign(load.mean() - load)
        self.loads = {}

    # -----------------------------------------------------------------------------------------
    # DSpark draft

    def context(self, taps):
        f = torch.cat([taps[l] for l in self.c["dspark_target_layer_ids"]], dim=-1)
        return v41.rms_norm(f @ self.p("mtp.0.main_proj.weight").t(), self.p("mtp.0.main_norm.weight"), self.c["rms_norm_eps"])

    def draft_hidden(self, m, block_ids, anchors):
        """Pre-norm hidden [B, A, T, D] of the blocks `block_ids` [B, A, T] at anchors [A]."""
        c = self.c
        Tb, W = c["dspark_block_size"], c["sliding_window"]
        B, A = block_ids.shape[:2]
        dev = m.device
        bpos = (anchors[:, None] + torch.arange(Tb, device=dev)[None, :]).flatten()
        cpos = torch.arange(m.shape[1], device=dev)
        ctx_visible = (cpos[None, :] < anchors[:, None]) & (cpos[None, :] >= anchors[:, None] - W)
        ctx_visible = ctx_visible.repeat_interleave(Tb, dim=0)
        blk = torch.arange(A, device=dev).repeat_interleave(Tb)
        visible = torch.cat([ctx_visible, blk[:, None] == blk[None, :]], dim=1)
        tables = (ops.rope_table(self.ropes["main"], bpos), ops.rope_table(self.ropes["main"], cpos))
        streams = self.p("model.embed.weight").detach()[block_ids.flatten(1)].unsqueeze(2)
        streams = streams.repeat(1, 1, c["hc_mult"], 1)
        pre = torch.zeros(B, A * Tb, c["hc_mult"], device=dev)
        pre[..., 0] = 1.0
        for i in range(c["num_nextn_predict_layers"]):
            pfx = f"mtp.{i}."
            streams, pre = self.block(pfx, streams, pre,
                                      lambda h: self.draft_attention(i, h, m, tables, visible),
                                      lambda h: self.moe(pfx, h, c["dspark_num_experts_per_tok"]))
        return v41.collapse(streams, pre).unflatten(1, (A, Tb))

    def draft_keys(self, i, x, cos, sin):
        pfx, eps = f"mtp.{i}.attn.", self.c["rms_norm_eps"]
        kv = ops.rope_bt(v41.rms_norm(x @ self.p(pfx + "wkv.weight").t(), self.p(pfx + "kv_norm.weight"), eps), cos, sin)
        return ops.ste(kv, v41.fake_fp8(kv.detach(), 32))

    def draft_attention(self, i, x, m, tables, visible):
        c, pfx = self.c, f"mtp.{i}.attn."
        (bcos, bsin), (ccos, csin) = tables
        B, N = x.shape[:2]
        H, d, eps = c["num_attention_heads"], c["head_dim"], c["rms_norm_eps"]
        qr = v41.rms_norm(x @ self.p(pfx + "wq_a.weight").t(), self.p(pfx + "q_norm.weight"), eps)
        q = ops.rope_bt((qr @ self.p(pfx + "wq_b.weight").t()).unflatten(-1, (H, d)).float(), bcos, bsin)
        kv = torch.cat([self.draft_keys(i, m, ccos, csin), self.draft_keys(i, x, bcos, bsin)], dim=1)
        logits = (torch.einsum("bnhd,btd->bhnt", q, kv) * d ** -0.5).masked_fill(~visible, -float("inf"))
        sinks = self.p(pfx + "attn_sink").view(1, H, 1, 1).expand(B, H, N, 1)
        probs = torch.softmax(torch.cat([logits, sinks], dim=-1), dim=-1)[..., :-1]
        out = ops.rope_bt(torch.einsum("bhnt,btd->bnhd", probs, kv), bcos, bsin, inverse=True)
        G = c["o_groups"]
        wo_a = self.p(pfx + "wo_a.weight").view(G, -1, H * d // G)
        grouped = torch.einsum("bngk,grk->bngr", out.reshape(B, N, G, -1), wo_a).flatten(-2)
        return grouped @ self.p(pfx + "wo_b.weight").t()

    def draft_heads(self, hpre, prev):
        """Markov logits [.., V] and confidence logits [..] of rows hpre given previous tokens."""
        c, last = self.c, f"mtp.{self.c['num_nextn_predict_layers'] - 1}."
        h = v41.rms_norm(hpre, self.p(last + "norm.weight"), c["rms_norm_eps"])
        base = h @ self.p("lm_head.weight").detach().t()
        e = self.p(last + "markov_head.embed.weight")[prev]
        logits = base.float() + (e @ self.p(last + "markov_head.head.weight").t()).float()
        conf = torch.cat([hpre.float(), e.float()], dim=-1) @ self.p(last + "confidence_head.proj.weight").t()
        return logits, conf.squeeze(-1) + self.p(last + "confidence_head.proj.bias")

    def block_ids(self, ids, anchors):
        c = self.c
        anchor_tokens = ids[:, anchors]
        noise = torch.full((*anchor_tokens.shape, c["dspark_block_size"] - 1), c["dspark_noise_token_id"],
                           dtype=ids.dtype, device=ids.device)
        return torch.cat([anchor_tokens.unsqueeze(-1), noise], dim=-1)

    def draft_loss(self, ids, target_logits, taps, anchors, gamma):
        """The DSpark loss (0.1 CE + 0.9 TV + BCE to 1 - TV, position-weighted exp(-(k-1)/gamma))
        with teacher-forced Markov inputs; returns (loss, per-position mean 1 - TV)."""
        Tb = self.c["dspark_block_size"]
        m = self.context({l: t.detach() for l, t in taps.items()})
        hpre = self.draft_hidden(m, self.block_ids(ids, anchors), anchors)[:, :, 1:]
        offs = torch.arange(Tb - 1, device=ids.device)
        prev = ids[:, anchors[:, None] + offs[None, :]]
        labels = ids[:, anchors[:, None] + offs[None, :] + 1]
        logits, conf = self.draft_heads(hpre, prev)
        p = torch.softmax(target_logits[:, anchors[:, None] + offs[None, :]].detach().float(), dim=-1)
        q = torch.softmax(logits, dim=-1)
        tv = 0.5 * (p - q).abs().sum(-1)
        ce = F.cross_entropy(logits.flatten(0, -2), labels.flatten(), reduction="none").view_as(tv)
        bce = F.binary_cross_entropy_with_logits(conf, (1 - tv).detach(), reduction="none")
        w = torch.exp(-offs.float() / gamma)
        per = (0.1 * ce + 0.9 * tv + bce) * w
        return per.sum(-1).mean() / w.sum(), (1 - tv).detach().mean(dim=(0, 1))
