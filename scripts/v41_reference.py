#!/usr/bin/env python3
"""Independent PyTorch reference of the DeepSeek-V4.1 text forward, and its tiny fixtures.

Written from transformers main `models/deepseek_v41` (read, not imported: the GPU machine's
transformers is 5.17, and this one runs anywhere PyTorch >= 1.13 does, CPU included). It
computes the full forward of a whole sequence without a cache, in fp32 on the stored values:
  * layer roles from compress_ratios / kv_source_layer_ids / index_source_layer_ids /
    candidate_source_layer_id (YOCO: only KV-source layers compress, the layers up to the next
    source attend into that source's entries with the latest index source's picks);
  * ratio-r compressor: softmax-gated pooling of r tokens per channel (no position bias, no
    overlap), ratio 1: one entry per token; RMSNorm; index keys k_norm(wk(latent)) from the
    pre-RoPE latent; entries and keys roped at position g * r;
  * two-level indexer: scores sum_h w_h * relu(q_h . k) * dim^-0.5 with w = weights_proj(x) *
    heads^-0.5, visible entries g < (p + 1) // r; the candidate source keeps the top
    candidate_topk_blocks blocks of candidate_block_size entries (block score = max, the newest
    block pinned) and every later index source picks only inside them;
  * QAT fake quantization: window KV FP8 e4m3 (ue8m0 scale per 32 channels), compressed KV FP4
    e2m1 (e4m3 scale per 16), indexer q and keys FP4 e2m1 (ue8m0 scale per 32);
  * delayed (single-pass) mHC: each site's `pre` collapses the streams at the next site, the
    first site collapses stream 0, the last `pre` collapses before the final norm (no hc_head);
  * no per-head q norm; sqrtsoftplus router with gate_temp and selection-only bias; SwiGLU
    experts with swiglu_limit (0 = none); one shared expert.

Differences from the transformers main code (documented, deliberate):
  * Its forward without a cache concatenates a later KV source's entries (and index keys) onto
    the earlier sources' in its per-forward dict, so layers after the second source see a mix;
    with a cache each source publishes only its own. This reference follows the cached
    semantics (each source's own entries), which is what a serving engine computes.
  * Top-k ties (router, indexer, candidate blocks) go to the lower index; torch.topk leaves
    them unspecified. Exact ties are common (FP4 q . k is a coarse lattice); fixtures reject
    seeds with a near-tie of unequal scores at any top-k boundary.
  * FP8/FP4 rounding is implemented here with explicit round-to-nearest-even on the e4m3 /
    e2m1 grids (torch 1.13 has no float8 dtype).
  * Engram: per token, the n-grams (2..max) of compressed token ids ending there are hashed
    (per-layer numpy PCG64 multipliers, XOR rolling, a prime bucket per n-gram size and head)
    into table rows; wkv turns the rows into one key per hc stream and a value; the value is
    added to each stream gated by sigmoid(signed sqrt(normalised stream . key)). Applied to
    the streams before the layer's block. The compressed token map comes from the tokenizer's
    single-token decodings normalised NFKC, NFD, marks stripped, lowercased per character,
    whitespace runs collapsed, stripped (a lone space kept), computed here with unicodedata.

Usage: v41_reference.py OUT_DIR [FIXTURE ...]   (writes OUT_DIR/<fixture>/{config.json,
model.safetensors, reference.safetensors}; all fixtures by default)
"""
import json
import math
import os
import re
import struct
import sys
import unicodedata

import torch
import torch.nn.functional as F

MIN_TOPK_GAP = 1e-4


# ---------------------------------------------------------------------------------------------
# Numerics: RMSNorm, RoPE (incl. YaRN), fake quantization.

def rms_norm(x, weight, eps):
    x = x.float()  # fp32 also when a caller's product ran under autocast
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def yarn_inv_freq(rope, dim):
    base = rope["rope_theta"]
    pos_freq = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    inv = 1.0 / pos_freq
    if rope.get("rope_type", "default") != "yarn":
        return inv, 1.0
    factor, orig = rope["factor"], rope["original_max_position_embeddings"]

    def corr(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr(rope.get("beta_fast", 32.0))), 0)
    high = min(math.ceil(corr(rope.get("beta_slow", 1.0))), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freq)) * (1 - extrapolation) + inv * extrapolation
    return inv, rope.get("attention_factor", 1.0)


def rope(x, positions, inv_freq, factor, inverse=False):
    """Interleaved pairs on the trailing 2 * len(inv_freq) channels; positions index dim 0."""
    rd = inv_freq.numel() * 2
    angles = positions.double()[:, None] * inv_freq.double()[None, :]
    cos, sin = (angles.cos() * factor).float(), (angles.sin() * factor).float()
    if inverse:
        sin = -sin
    shape = [x.shape[0]] + [1] * (x.dim() - 2) + [rd // 2]
    cos, sin = cos.view(shape), sin.view(shape)
    nope, r = x[..., :-rd], x[..., -rd:]
    even, odd = r[..., 0::2], r[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    return torch.cat([nope, rotated], dim=-1)


def pow2_ceil(t):
    """2^ceil(log2 t) for t > 0 (the ue8m0 scale), via the float's exponent and mantissa bits."""
    bits = t.contiguous().view(torch.int32)
    k = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.pow(2.0, k.double()).float()


def round_e4m3(v):
    """Round-to-nearest-even onto the float8 e4m3fn grid (|v| <= 448 assumed)."""
    mag = v.abs().double()
    exp = torch.floor(torch.log2(mag.clamp_min(2.0 ** -9))).clamp(min=-6)
    step = torch.pow(2.0, exp - 3)  # 3 mantissa bits; subnormals share 2^-9
    q = torch.round(mag / step) * step  # torch.round is half-to-even
    return (torch.sign(v.double()) * q).float()


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def round_e2m1(q):
    """Round-to-nearest-even onto the e2m1 grid: a tie goes to the even code."""
    mag = q.abs()
    codes = torch.zeros_like(mag, dtype=torch.long)
    for i, b in enumerate(E2M1_BOUNDS):
        ties_up = i % 2 == 1  # the upper neighbour's code is even
        codes += (mag >= b) if ties_up else (mag > b)
    grid = E2M1.to(q.device)
    return torch.where(torch.signbit(q), -grid[codes], grid[codes])


def fake_fp8(x, block=32):
    n = x.shape[-1]
    if n % block:
        return x
    b = x.reshape(*x.shape[:-1], n // block, block)
    scale = pow2_ceil(b.abs().amax(-1).clamp_min(1e-4) * (1.0 / 448.0)).unsqueeze(-1)
    return (round_e4m3((b / scale).clamp(-448, 448)) * scale).reshape(x.shape)


def fake_fp4(x, block, e4m3_scales):
    n = x.shape[-1]
    if n % block:
        return x
    b = x.reshape(*x.shape[:-1], n // block, block)
    amax = b.abs().amax(-1)
    if e4m3_scales:
        scale = round_e4m3(amax.clamp_min(6.0 * 2.0 ** -9) / 6.0)
    else:
        scale = pow2_ceil(amax.clamp_min(6.0 * 2.0 ** -126) * (1.0 / 6.0))
    scale = scale.unsqueeze(-1)
    return (round_e2m1((b / scale).clamp(-6, 6)) * scale).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Engram: compressed token map, hash layout, the gated n-gram memory.

WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200b))) + "\u2028\u2029\u202f\u205f\u3000"


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: printable bytes map to themselves, the rest above 255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars)))


def engram_normalize(text):
    t = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    t = "".join(ch for ch in t if not unicodedata.category(ch).startswith("M"))
    t = "".join(ch.lower() for ch in t)
    t = re.sub("[ \t\r\n]+", " ", t)
    if t == " ":
        t = "\ue000"
    return t.strip(WHITE_SPACE).replace("\ue000", " ")


def compressed_token_map(tokens, specials):
    """tokens: byte-level strings by id; specials: id -> content. Returns (map, size)."""
    decoder = {v: k for k, v in bytes_to_unicode().items()}
    keys, lookup = {}, []
    for i, tok in enumerate(tokens):
        if i in specials:
            text = specials[i]
        else:
            text = bytes(decoder[ch] for ch in tok).decode("utf-8", errors="replace")
        key = tok if "\ufffd" in text else (engram_normalize(text) or text)
        lookup.append(keys.setdefault(key, len(keys)))
    return lookup, len(keys)


def engram_primes(c):
    from sympy import isprime
    seen, primes = set(), []
    for _ in c["engram_layer_ids"]:
        per = []
        for _ in range(c["engram_max_ngram_size"] - 1):
            sizes, cur = [], c["engram_vocab_size"] - 1
            for _ in range(c["engram_n_heads"]):
                cur += 1
                while not isprime(cur) or cur in seen:
                    cur += 1
                seen.add(cur)
                sizes.append(cur)
            per.append(sizes)
        primes.append(per)
    return primes


def engram_multipliers(c, compressed_vocab):
    import numpy as np
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    rows = []
    for layer in c["engram_layer_ids"]:
        v = np.random.default_rng(10007 * layer).integers(low=0, high=bound, size=(c["engram_max_ngram_size"],),
                                                          dtype=np.int64)
        rows.append([int(x) * 2 + 1 for x in v])
    return rows


def engram_hash_ids(c, ids, token_map, compressed_vocab):
    """[T, layers, (max_ngram - 1) * heads] table rows of each position's n-grams."""
    primes, mults = engram_primes(c), engram_multipliers(c, compressed_vocab)
    pad = token_map[c["engram_pad_id"]]
    comp = [token_map[int(t)] for t in ids]
    out = []
    for p in range(len(comp)):
        per_layer = []
        for li in range(len(c["engram_layer_ids"])):
            toks = [comp[p - k] if p - k >= 0 else pad for k in range(c["engram_max_ngram_size"])]
            rolling, row, offset = toks[0] * mults[li][0], [], 0
            for n in range(1, c["engram_max_ngram_size"]):
                rolling ^= toks[n] * mults[li][n]
                for prime in primes[li][n - 1]:
                    row.append(rolling % prime + offset)
                    offset += prime
            per_layer.append(row)
        out.append(per_layer)
    return torch.tensor(out, dtype=torch.long)


# ---------------------------------------------------------------------------------------------
# The model.

class Gaps:
    """Smallest score gap seen at any top-k boundary (near-ties make a fixture ambiguous)."""

    def __init__(self):
        self.min = float("inf")

    def topk(self, scores, k, valid=None):
        """Indices of the k largest (ties to the lower index) per row; -1 where fewer are valid."""
        if valid is None:
            valid = torch.isfinite(scores)
        s = torch.where(valid, scores, torch.full_like(scores, -float("inf")))
        out = torch.full((s.shape[0], k), -1, dtype=torch.long)
        for r in range(s.shape[0]):
            row = s[r].tolist()
            ranked = sorted(range(len(row)), key=lambda i: (-row[i], i))
            picks = [i for i in ranked[:k] if row[i] != -float("inf")]
            out[r, :len(picks)] = torch.tensor(picks, dtype=torch.long)
            finite = [row[i] for i in ranked if row[i] != -float("inf")]
            # Exact ties are deterministic (the lower index wins): FP4 queries and keys make
            # q . k land on a coarse lattice, and every head's relu at 0 gives exactly 0. Only
            # a near-tie of unequal scores is ambiguous.
            if len(finite) > k and finite[k - 1] != finite[k]:
                self.min = min(self.min, finite[k - 1] - finite[k])
        return out


def mixes(streams, fn, base, scale, c):
    """pre, post, comb of streams [..., hc, D] (leading dims are positions, batched or not)."""
    flat = rms_norm(streams.flatten(-2), None, c["rms_norm_eps"])
    m = (flat @ fn.t()).float()  # fp32 also when a caller runs the product under autocast
    return mix_coefficients(m, base, scale, c)


def mix_coefficients(m, base, scale, c):
    """pre, post and Sinkhorn-normalised comb from the mix logits m [..., hc * (2 + hc)]."""
    hc = c["hc_mult"]
    pre = torch.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + c["hc_eps"]
    post = 2 * torch.sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = (m[..., 2 * hc:] * scale[2] + base[2 * hc:]).view(*m.shape[:-1], hc, hc)
    comb = torch.softmax(comb, dim=-1) + c["hc_eps"]
    comb = comb / (comb.sum(dim=-2, keepdim=True) + c["hc_eps"])
    for _ in range(c["hc_sinkhorn_iters"] - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + c["hc_eps"])
        comb = comb / (comb.sum(dim=-2, keepdim=True) + c["hc_eps"])
    return pre, post, comb


def collapse(streams, pre):
    return (pre.unsqueeze(-1) * streams).sum(-2)


def expand(y, streams, post, comb):
    return post.unsqueeze(-1) * y.unsqueeze(1) + torch.einsum("njk,njd->nkd", comb, streams)


class Reference:
    def __init__(self, cfg, weights):
        self.c, self.w = cfg, weights
        rp = cfg["rope_parameters"]
        self.ropes = {k: yarn_inv_freq(rp[k], cfg["qk_rope_head_dim"]) for k in ("main", "compress")}
        self.gaps = Gaps()

    def p(self, name):
        return self.w[name].float()

    def forward(self, ids, tap_layers=()):
        """Logits [T, vocab]; self.taps[l] = the residual entering layer l (mean of its streams)."""
        c, T = self.c, ids.numel()
        self.taps = {}
        pos = torch.arange(T)
        x = self.p("model.embed.weight")[ids]
        streams = x.unsqueeze(1).repeat(1, c["hc_mult"], 1)
        pre_mix = torch.zeros(T, c["hc_mult"])
        pre_mix[:, 0] = 1.0
        shared = {}
        hash_ids = None
        if c.get("engram_layer_ids"):
            hash_ids = engram_hash_ids(c, ids, self.token_map, c["engram_compressed_vocab_size"])
        for l in range(c["num_hidden_layers"]):
            pfx = f"model.layers.{l}."
            if l in tap_layers:
                self.taps[l] = streams.mean(1)
            if l in c.get("engram_layer_ids", []):
                streams = self.engram(l, streams, hash_ids[:, c["engram_layer_ids"].index(l)])
            a_pre, a_post, a_comb = mixes(streams, self.p(pfx + "hc_attn_fn"), self.p(pfx + "hc_attn_base"),
                                          self.p(pfx + "hc_attn_scale"), c)
            h = rms_norm(collapse(streams, pre_mix), self.p(pfx + "attn_norm.weight"), c["rms_norm_eps"])
            streams = expand(self.attention(l, h, pos, shared), streams, a_post, a_comb)
            f_pre, f_post, f_comb = mixes(streams, self.p(pfx + "hc_ffn_fn"), self.p(pfx + "hc_ffn_base"),
                                          self.p(pfx + "hc_ffn_scale"), c)
            h = rms_norm(collapse(streams, a_pre), self.p(pfx + "ffn_norm.weight"), c["rms_norm_eps"])
            streams = expand(self.moe(l, h), streams, f_post, f_comb)
            pre_mix = f_pre
        h = rms_norm(collapse(streams, pre_mix), self.p("model.norm.weight"), c["rms_norm_eps"])
        return h @ self.p("lm_head.weight").t()

    def engram(self, l, streams, rows):
        c, pfx = self.c, f"model.layers.{l}.engram."
        hc, D = c["hc_mult"], c["hidden_size"]
        e = self.p(pfx + "embed.weight")[rows].flatten(1)  # [T, cols * head_dim]
        kv = e @ self.p(pfx + "wkv.weight").t()
        key, value = kv[:, :hc * D].view(-1, hc, D), kv[:, hc * D:]
        weight = self.p(pfx + "q_weight") * self.p(pfx + "k_weight")
        eps = c["rms_norm_eps"]
        rstd = torch.rsqrt(streams.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)
        dot = (streams * weight * key).sum(-1) * rstd * D ** -0.5
        gate = torch.sigmoid(torch.copysign(dot.abs().clamp_min(1e-6).sqrt(), dot))
        return streams + gate.unsqueeze(-1) * value.unsqueeze(1)

    def compress(self, l, x):
        """Pre-RoPE latents of every complete group of this source [G, head_dim]."""
        c, r, pfx = self.c, self.c["compress_ratios"][l], f"model.layers.{l}.attn.compressor."
        kv = x @ self.p(pfx + "wkv.weight").t()
        if r > 1:
            g = x @ self.p(pfx + "wgate.weight").t()
            groups = x.shape[0] // r
            kv = kv[:groups * r].view(groups, r, -1)
            g = g[:groups * r].view(groups, r, -1)
            kv = (kv * torch.softmax(g, dim=1)).sum(1)
        return rms_norm(kv, self.p(pfx + "norm.weight"), c["rms_norm_eps"])

    def indexer(self, l, x, qr, pos, shared):
        c, r, pfx = self.c, self.c["compress_ratios"][l], f"model.layers.{l}.attn.indexer."
        inv, fac = self.ropes["compress"]
        keys = shared["index_keys"]
        hi, di = c["index_n_heads"], c["index_head_dim"]
        q = (qr @ self.p(pfx + "wq_b.weight").t()).view(-1, hi, di)
        q = fake_fp4(rope(q, pos, inv, fac), 32, False)
        s = torch.relu(torch.einsum("nhd,gd->nhg", q, keys)) * di ** -0.5
        w = (x @ self.p(pfx + "weights_proj.weight").t()) * hi ** -0.5
        scores = (s * w.unsqueeze(-1)).sum(1)  # [N, G]
        visible = torch.arange(keys.shape[0])[None, :] < ((pos + 1) // r)[:, None]
        scores = torch.where(visible, scores, torch.full_like(scores, -float("inf")))
        cand = c["candidate_source_layer_id"]
        if l == cand:
            shared["candidates"] = self.candidate_blocks(scores, (pos + 1) // r)
        elif 0 <= cand < l and "candidates" in shared:
            scores = torch.where(shared["candidates"], scores, torch.full_like(scores, -float("inf")))
        shared["selected"] = self.gaps.topk(scores, min(c["index_topk"], keys.shape[0]))

    def candidate_blocks(self, scores, visible_count):
        c = self.c
        bs, k = c["candidate_block_size"], c["candidate_topk_blocks"]
        n, g = scores.shape
        nb = (g + bs - 1) // bs
        padded = torch.full((n, nb * bs), -float("inf"))
        padded[:, :g] = scores
        blocks = padded.view(n, nb, bs).amax(-1)
        last = (visible_count - 1) // bs
        pinned = (torch.arange(nb)[None, :] == last[:, None]) & (visible_count[:, None] > 0)
        blocks = torch.where(pinned, torch.full_like(blocks, float("inf")), blocks)
        # The pinned block's +inf is a real score here: only unreachable (-inf) blocks drop out.
        picks = self.gaps.topk(blocks, min(k, nb), valid=blocks > -float("inf"))
        keep = torch.zeros(n, nb, dtype=torch.bool)
        for r in range(n):
            for b in picks[r].tolist():
                if b >= 0:
                    keep[r, b] = True
        return keep.repeat_interleave(bs, dim=1)[:, :g]

    def attention(self, l, x, pos, shared):
        c, pfx = self.c, f"model.layers.{l}.attn."
        r = c["compress_ratios"][l]
        inv, fac = self.ropes["compress" if r else "main"]
        H, d, eps = c["num_attention_heads"], c["head_dim"], c["rms_norm_eps"]
        qr = rms_norm(x @ self.p(pfx + "wq_a.weight").t(), self.p(pfx + "q_norm.weight"), eps)
        q = rope((qr @ self.p(pfx + "wq_b.weight").t()).view(-1, H, d), pos, inv, fac)
        kv = rms_norm(x @ self.p(pfx + "wkv.weight").t(), self.p(pfx + "kv_norm.weight"), eps)
        kv = fake_fp8(rope(kv, pos, inv, fac), 32)
        T = x.shape[0]
        window = c["sliding_window"]
        qpos, kpos = pos[:, None], pos[None, :]
        logits = torch.einsum("nhd,td->nht", q, kv) * d ** -0.5
        mask = (kpos <= qpos) & (kpos > qpos - window)
        logits = torch.where(mask[:, None, :], logits, torch.full_like(logits, -float("inf")))
        values = kv
        if r:
            if l in c["kv_source_layer_ids"]:
                latent = self.compress(l, x)
                gpos = torch.arange(latent.shape[0]) * r
                cinv, cfac = self.ropes["compress"]
                if l in c["index_source_layer_ids"]:
                    ip = pfx + "indexer."
                    k = rms_norm(latent @ self.p(ip + "wk.weight").t(), self.p(ip + "k_norm.weight"), eps)
                    shared["index_keys"] = fake_fp4(rope(k, gpos, cinv, cfac), 32, False)
                shared["entries"] = fake_fp4(rope(latent, gpos, cinv, cfac), 16, True)
                shared.pop("selected", None)
            if l in c["index_source_layer_ids"]:
                self.indexer(l, x, qr, pos, shared)
            entries = shared["entries"]
            comp = torch.einsum("nhd,gd->nhg", q, entries) * d ** -0.5
            allowed = torch.zeros(T, entries.shape[0], dtype=torch.bool)
            for t, picks in enumerate(shared.get("selected", torch.empty(T, 0, dtype=torch.long)).tolist()):
                for g in picks:
                    if g >= 0:
                        allowed[t, g] = True
            comp = torch.where(allowed[:, None, :], comp, torch.full_like(comp, -float("inf")))
            logits = torch.cat([logits, comp], dim=-1)
            values = torch.cat([kv, entries], dim=0)
        sinks = self.p(pfx + "attn_sink").view(1, H, 1).expand(T, H, 1)
        full = torch.cat([logits, sinks], dim=-1)
        probs = torch.softmax(full, dim=-1)[..., :-1]
        out = torch.einsum("nht,td->nhd", probs, values)
        out = rope(out, pos, inv, fac, inverse=True)
        G = c["o_groups"]
        wo_a = self.p(pfx + "wo_a.weight").view(G, -1, H * d // G)
        grouped = torch.einsum("ngk,grk->ngr", out.reshape(T, G, -1), wo_a).reshape(T, -1)
        return grouped @ self.p(pfx + "wo_b.weight").t()

    def expert(self, pfx, x):
        lim = self.c["swiglu_limit"]
        g, u = x @ self.p(pfx + "w1.weight").t(), x @ self.p(pfx + "w3.weight").t()
        if lim > 0:
            u, g = u.clamp(-lim, lim), g.clamp(max=lim)
        return (F.silu(g) * u) @ self.p(pfx + "w2.weight").t()

    def moe(self, l, x):
        c, pfx = self.c, f"model.layers.{l}.ffn."
        logits = (x @ self.p(pfx + "gate.weight").t()) / c.get("gate_temp", 1.0)
        scores = torch.sqrt(F.softplus(logits))
        ids = self.gaps.topk(scores + self.p(pfx + "gate.bias"), c["num_experts_per_tok"])
        w = scores.gather(1, ids)
        if c["num_experts_per_tok"] > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c["routed_scaling_factor"]
        y = self.expert(pfx + "shared_experts.", x)
        for t in range(x.shape[0]):
            for j, e in enumerate(ids[t].tolist()):
                y[t] += w[t, j] * self.expert(pfx + f"experts.{e}.", x[t:t + 1])[0]
        return y


# ---------------------------------------------------------------------------------------------
# Random checkpoints (HF V4.1 tensor names) and the fixtures.

def block_shapes(c, experts):
    """A block's tensors (suffixes): SWA attention with sinks, mHC sites, MoE of `experts` experts."""
    D, H, d, qr = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, ol, I, hc = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"], c["hc_mult"]
    mix, E = (2 + hc) * hc, experts
    s = {"attn.wq_a.weight": ([qr, D], "bf16"), "attn.q_norm.weight": ([qr], "bf16"),
         "attn.wq_b.weight": ([H * d, qr], "bf16"), "attn.wkv.weight": ([d, D], "bf16"),
         "attn.kv_norm.weight": ([d], "bf16"), "attn.wo_a.weight": ([G * ol, H * d // G], "bf16"),
         "attn.wo_b.weight": ([D, G * ol], "bf16"), "attn.attn_sink": ([H], "f32"),
         "attn_norm.weight": ([D], "bf16"), "ffn_norm.weight": ([D], "bf16"),
         "ffn.gate.weight": ([E, D], "bf16"), "ffn.gate.bias": ([E], "f32"), "ffn.gate.bias_vl": ([E], "f32")}
    for site in ("attn", "ffn"):
        s.update({f"hc_{site}_fn": ([mix, hc * D], "f32"), f"hc_{site}_base": ([mix], "f32"),
                  f"hc_{site}_scale": ([3], "f32")})
    for e in range(E):
        s.update({f"ffn.experts.{e}.w1.weight": ([I, D], "bf16"), f"ffn.experts.{e}.w3.weight": ([I, D], "bf16"),
                  f"ffn.experts.{e}.w2.weight": ([D, I], "bf16")})
    s.update({"ffn.shared_experts.w1.weight": ([I, D], "bf16"), "ffn.shared_experts.w3.weight": ([I, D], "bf16"),
              "ffn.shared_experts.w2.weight": ([D, I], "bf16")})
    return s


def tensor_shapes(c):
    D, H, d, qr = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, ol, E, I = c["o_groups"], c["o_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"]
    hc, hi, di = c["hc_mult"], c["index_n_heads"], c["index_head_dim"]
    mix = (2 + hc) * hc
    shapes = {"model.embed.weight": ([c["vocab_size"], D], "bf16"), "model.norm.weight": ([D], "bf16"),
              "lm_head.weight": ([c["vocab_size"], D], "bf16")}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        r = c["compress_ratios"][l]
        s = block_shapes(c, E)
        if r and l in c["kv_source_layer_ids"]:
            # The release stores the pooling compressor's wkv in fp32, its gate and norm bf16.
            s.update({"attn.compressor.wkv.weight": ([d, D], "f32" if r > 1 else "bf16"),
                      "attn.compressor.norm.weight": ([d], "bf16")})
            if r > 1:
                s["attn.compressor.wgate.weight"] = ([d, D], "bf16")
        if r and l in c["index_source_layer_ids"]:
            s.update({"attn.indexer.wq_b.weight": ([hi * di, qr], "bf16"),
                      "attn.indexer.weights_proj.weight": ([hi, D], "bf16")})
            if l in c["kv_source_layer_ids"]:
                s.update({"attn.indexer.wk.weight": ([di, d], "bf16"), "attn.indexer.k_norm.weight": ([di], "bf16")})
        if l in c.get("engram_layer_ids", []):
            rows = c["engram_num_embeddings"][c["engram_layer_ids"].index(l)]
            cols = (c["engram_max_ngram_size"] - 1) * c["engram_n_heads"] * c["engram_head_dim"]
            s.update({"engram.embed.weight": ([rows, c["engram_head_dim"]], "bf16"),
                      "engram.wkv.weight": ([(hc + 1) * D, cols], "bf16"),
                      "engram.q_weight": ([hc, D], "f32"), "engram.k_weight": ([hc, D], "f32")})
        shapes.update({p + k: v for k, v in s.items()})
    return shapes


def random_value(name, shape, gen):
    fan_in = shape[-1] if len(shape) > 1 else 1
    if name.endswith("norm.weight"):
        return 1.0 + 0.3 * torch.randn(shape, generator=gen)
    if name.endswith("attn_sink"):
        return 0.5 * torch.randn(shape, generator=gen)
    if name.endswith("_base") or name.endswith("gate.bias") or name.endswith("bias_vl"):
        return 0.5 * torch.randn(shape, generator=gen)
    if name.endswith("q_weight") or name.endswith("k_weight"):
        return 1.0 + 0.5 * torch.randn(shape, generator=gen)
    if name.endswith("engram.embed.weight"):
        return torch.randn(shape, generator=gen)
    if name.endswith("_scale"):
        return 0.5 + torch.rand(shape, generator=gen)
    if name.endswith("_fn"):
        return 0.3 * torch.randn(shape, generator=gen) / math.sqrt(fan_in)
    if "embed" in name:
        return torch.randn(shape, generator=gen)
    return torch.randn(shape, generator=gen) / math.sqrt(fan_in)


def store(value, dtype):
    """The stored tensor and the fp32 values the reference computes with."""
    if dtype == "bf16":
        b = value.to(torch.bfloat16)
        return b, b.float()
    return value.float(), value.float()


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if isinstance(t, tuple):  # already encoded: (bytes, safetensors dtype, shape)
            raw, dt, shape = t
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
            continue
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            raw, dt = t.view(torch.int16).numpy().tobytes(), "BF16"
        elif t.dtype == torch.float32:
            raw, dt = t.numpy().tobytes(), "F32"
        elif t.dtype == torch.int64:
            raw, dt = t.numpy().tobytes(), "I64"
        else:
            raise ValueError(f"{name}: unsupported dtype {t.dtype}")
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def text_config(c):
    """The config.json text section in the released layout (flat rope_scaling)."""
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "q_lora_rank", "qk_rope_head_dim", "o_groups", "o_lora_rank", "moe_intermediate_size",
            "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "scoring_func", "topk_method",
            "norm_topk_prob", "routed_scaling_factor", "swiglu_limit", "hidden_act", "rms_norm_eps",
            "max_position_embeddings", "rope_theta", "compress_rope_theta", "rope_scaling", "sliding_window",
            "compress_ratios", "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id",
            "candidate_topk_blocks", "candidate_block_size", "index_n_heads", "index_head_dim", "index_topk",
            "hc_mult", "hc_sinkhorn_iters", "hc_eps", "engram_layer_ids", "engram_max_ngram_size", "engram_n_heads",
            "engram_head_dim", "engram_vocab_size", "engram_num_embeddings", "engram_compressed_vocab_size",
            "engram_pad_id", "num_nextn_predict_layers",
            "tie_word_embeddings", "bos_token_id", "eos_token_id"]
    return {k: c[k] for k in keys if k in c}


def rope_parameters(c):
    yarn = dict(c.get("rope_scaling") or {})
    compress = {"rope_type": yarn.pop("type", yarn.pop("rope_type", "default")), "rope_theta": c["compress_rope_theta"]}
    if compress["rope_type"] == "yarn":
        compress.update(yarn)
        compress["attention_factor"] = 1.0  # V4 and V4.1 keep cos/sin unscaled with a flat rope_scaling
    return {"main": {"rope_type": "default", "rope_theta": c["rope_theta"]}, "compress": compress}


# ---------------------------------------------------------------------------------------------
# The release layout: official tensor names, FP8 e4m3 dense linears with a power-of-two (E8M0)
# scale per 32 x 32 block, MXFP4 routed experts (e2m1 codes two a byte, lower nibble = even
# column, an E8M0 scale per 32 inputs), and draft-model tensors under mtp.* (ignored by the
# main model). The reference computes with the dequantised values.

FP8_LINEARS = ("attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight", "attn.wo_b.weight",
               "attn.indexer.wq_b.weight", "shared_experts.w1.weight", "shared_experts.w2.weight",
               "shared_experts.w3.weight")


def e8m0_bytes(scale):
    return (torch.log2(scale).round().to(torch.int64) + 127).to(torch.uint8).numpy().tobytes()


def e4m3_codes(v):
    """Byte codes of values already on the e4m3 grid."""
    mag, sign = v.abs().double(), (v < 0).to(torch.int64)
    exp = torch.floor(torch.log2(mag.clamp_min(2.0 ** -9)))
    normal = exp >= -6
    e_field = torch.where(normal, exp + 7, torch.zeros_like(exp))
    mant = torch.where(normal, (mag / torch.pow(2.0, exp) - 1) * 8, mag / 2.0 ** -9)
    code = (e_field.to(torch.int64) << 3) | mant.round().to(torch.int64)
    code = torch.where(mag == 0, torch.zeros_like(code), code)
    return ((sign << 7) | code).to(torch.uint8)


def quantize_fp8_blocks(w):
    """(dequantised values, e4m3 codes, E8M0 scales) with 32 x 32 blocks."""
    r, c = w.shape
    b = w.reshape(r // 32, 32, c // 32, 32)
    scale = pow2_ceil(b.abs().amax(dim=(1, 3)).clamp_min(1e-4) / 448.0)
    q = round_e4m3((b / scale[:, None, :, None]).clamp(-448, 448))
    return (q * scale[:, None, :, None]).reshape(r, c), e4m3_codes(q.reshape(r, c)), scale


def quantize_mxfp4(w):
    """(dequantised values, packed e2m1 bytes, E8M0 scales per 32 inputs)."""
    r, c = w.shape
    b = w.reshape(r, c // 32, 32)
    scale = pow2_ceil(b.abs().amax(-1).clamp_min(6.0 * 2.0 ** -126) / 6.0)
    q = round_e2m1((b / scale[..., None]).clamp(-6, 6)).reshape(r, c)
    codes = (q.abs()[..., None] == E2M1).to(torch.int64).argmax(-1) | (torch.signbit(q).to(torch.int64) << 3)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return (q.reshape(r, c // 32, 32) * scale[..., None]).reshape(r, c), packed, scale


def release_name(name):
    if name.startswith("mtp."):  # draft tensors keep their names
        return name
    if name.startswith("model.layers."):
        return name[len("model."):]
    return {"model.embed.weight": "embed.weight", "model.norm.weight": "norm.weight", "lm_head.weight": "head.weight"}[name]


def release_entries(name, stored, value):
    """One tensor in the release layout: ({release name: tensor or encoded tuple}, the values it
    holds). FP8 linears and MXFP4 experts are encoded from `value`; the rest keep `stored` as it is."""
    rel = release_name(name)
    base = rel[:-len(".weight")]
    if name.endswith(FP8_LINEARS):
        deq, codes, scale = quantize_fp8_blocks(value)
        return {rel: (codes.numpy().tobytes(), "F8_E4M3", list(codes.shape)),
                base + ".scale": (e8m0_bytes(scale), "F8_E8M0", list(scale.shape))}, deq
    if ".ffn.experts." in name:
        deq, packed, scale = quantize_mxfp4(value)
        return {rel: (packed.numpy().tobytes(), "I8", list(packed.shape)),
                base + ".scale": (e8m0_bytes(scale), "F8_E8M0", list(scale.shape))}, deq
    return {rel: stored}, stored.float()


def to_release(stored, values, gen, c):
    """Re-encodes the checkpoint in the release layout; updates `values` to what it holds."""
    out = {}
    for name, t in stored.items():
        entries, values[name] = release_entries(name, t, values[name])
        out.update(entries)
    D = c["hidden_size"]  # a draft layer's worth of names the main model must skip
    w = torch.randn(c["q_lora_rank"], D, generator=gen) / math.sqrt(D)
    _, codes, scale = quantize_fp8_blocks(w)
    out["mtp.0.attn.wq_a.weight"] = (codes.numpy().tobytes(), "F8_E4M3", list(codes.shape))
    out["mtp.0.attn.wq_a.scale"] = (e8m0_bytes(scale), "F8_E8M0", list(scale.shape))
    out["mtp.0.main_proj.weight"] = torch.randn(D, 3 * D, generator=gen).to(torch.bfloat16)
    out["mtp.0.main_norm.weight"] = torch.ones(D).to(torch.bfloat16)
    return out


BASE = dict(num_key_value_heads=1, n_shared_experts=1, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
            norm_topk_prob=True, hidden_act="silu", hc_mult=4, hc_eps=1e-6, engram_layer_ids=[],
            num_nextn_predict_layers=0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)

FIXTURES = {
    # The released layout scaled down: SWA, ratio-2 encoder layers with two KV sources, a ratio-1
    # decoder half whose first layer is the KV and candidate source, re-index layers after it.
    "v41_tiny_a": dict(seq_len=96, config=dict(
        BASE, vocab_size=512, hidden_size=64, num_hidden_layers=9, num_attention_heads=4, head_dim=64,
        q_lora_rank=48, qk_rope_head_dim=16, o_groups=2, o_lora_rank=24, moe_intermediate_size=32,
        n_routed_experts=8, num_experts_per_tok=3, routed_scaling_factor=1.5, swiglu_limit=3.0,
        rms_norm_eps=1e-20, max_position_embeddings=4096, rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"type": "yarn", "factor": 4, "original_max_position_embeddings": 256, "beta_fast": 32,
                      "beta_slow": 1},
        sliding_window=8, compress_ratios=[0, 2, 2, 2, 2, 1, 1, 1, 1, 0],
        kv_source_layer_ids=[1, 3, 5], index_source_layer_ids=[1, 3, 5, 7], candidate_source_layer_id=5,
        candidate_topk_blocks=4, candidate_block_size=4, index_n_heads=4, index_head_dim=32, index_topk=6,
        hc_sinkhorn_iters=20, num_nextn_predict_layers=1)),
    # Other shapes: no candidate filter, plain RoPE, swiglu_limit 0 (no clamp), gate_temp.
    "v41_tiny_b": dict(seq_len=80, config=dict(
        BASE, vocab_size=384, hidden_size=96, num_hidden_layers=6, num_attention_heads=6, head_dim=32,
        q_lora_rank=40, qk_rope_head_dim=8, o_groups=3, o_lora_rank=16, moe_intermediate_size=24,
        n_routed_experts=12, num_experts_per_tok=2, routed_scaling_factor=2.5, swiglu_limit=0.0, gate_temp=0.7,
        rms_norm_eps=1e-6, max_position_embeddings=2048, rope_theta=10000.0, compress_rope_theta=40000.0,
        rope_scaling=None, sliding_window=6, compress_ratios=[2, 2, 1, 1, 1, 0],
        kv_source_layer_ids=[0, 2], index_source_layer_ids=[0, 2, 4], candidate_source_layer_id=-1,
        candidate_topk_blocks=2048, candidate_block_size=8, index_n_heads=2, index_head_dim=32, index_topk=5,
        hc_sinkhorn_iters=7)),
    # The release layout (names, FP8 32x32 + MXFP4 with E8M0 scales, mtp.* extras); every
    # quantised matrix dimension is a multiple of 32.
    "v41_release_fp8": dict(seq_len=64, release=True, config=dict(
        BASE, vocab_size=256, hidden_size=64, num_hidden_layers=5, num_attention_heads=2, head_dim=64,
        q_lora_rank=64, qk_rope_head_dim=16, o_groups=2, o_lora_rank=32, moe_intermediate_size=32,
        n_routed_experts=6, num_experts_per_tok=2, routed_scaling_factor=1.5, swiglu_limit=10.0,
        rms_norm_eps=1e-20, max_position_embeddings=4096, rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"type": "yarn", "factor": 4, "original_max_position_embeddings": 256, "beta_fast": 32,
                      "beta_slow": 1},
        sliding_window=8, compress_ratios=[0, 2, 2, 1, 1, 0], kv_source_layer_ids=[1, 3],
        index_source_layer_ids=[1, 3, 4], candidate_source_layer_id=3, candidate_topk_blocks=3,
        candidate_block_size=4, index_n_heads=4, index_head_dim=32, index_topk=4, hc_sinkhorn_iters=20,
        num_nextn_predict_layers=1)),
    # Engram n-gram memory on two layers, with a tokenizer whose tokens collapse under the
    # normalisation (case, accents, ligatures, whitespace).
    "v41_engram": dict(seq_len=72, engram=True, config=dict(
        BASE, vocab_size=0, hidden_size=64, num_hidden_layers=5, num_attention_heads=2, head_dim=64,
        q_lora_rank=48, qk_rope_head_dim=16, o_groups=2, o_lora_rank=24, moe_intermediate_size=32,
        n_routed_experts=6, num_experts_per_tok=2, routed_scaling_factor=1.5, swiglu_limit=10.0,
        rms_norm_eps=1e-6, max_position_embeddings=4096, rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling=None, sliding_window=8, compress_ratios=[0, 2, 2, 1, 1], kv_source_layer_ids=[1, 3],
        index_source_layer_ids=[1, 3, 4], candidate_source_layer_id=3, candidate_topk_blocks=3,
        candidate_block_size=4, index_n_heads=2, index_head_dim=32, index_topk=4, hc_sinkhorn_iters=20,
        engram_layer_ids=[1, 3], engram_max_ngram_size=4, engram_n_heads=2, engram_head_dim=16,
        engram_vocab_size=101, engram_pad_id=2)),
}

ENGRAM_WORDS = ["the", "The", "THE", " the", " The", "ing", "ING", " ing", "café", "Café", "CAFÉ", "cafe", "é",
                "É", "ﬁ", "fi", "  ", "\t\t", "\n\n", " \n", "Σ", "σ", "ς"]
ENGRAM_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"]


def engram_tokenizer():
    """A byte-level BPE whose vocabulary collapses under the Engram normalisation: case,
    accents, compatibility forms and whitespace variants of a few words. Returns the
    tokenizer.json object, the token strings by id and the special tokens by id."""
    enc = bytes_to_unicode()
    tokens = [enc[b] for b in range(256)]
    index, merges = {t: i for i, t in enumerate(tokens)}, []
    for word in ENGRAM_WORDS:
        w = "".join(enc[b] for b in word.encode("utf-8"))
        for i in range(2, len(w) + 1):
            if w[:i] not in index:
                merges.append(f"{w[:i - 1]} {w[i - 1]}")
                index[w[:i]] = len(tokens)
                tokens.append(w[:i])
    specials = {}
    for content in ENGRAM_SPECIALS:
        specials[len(tokens)] = content
        tokens.append(content)
    vocab = {t: i for i, t in enumerate(tokens) if i not in specials}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in specials.items()]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                               "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": merges}}
    return tok, tokens, specials


def engram_config(c, tokens, specials):
    """Fills in the Engram sizes the tokenizer and the prime layout determine."""
    c["vocab_size"] = len(tokens)
    token_map, size = compressed_token_map(tokens, specials)
    c["engram_compressed_vocab_size"] = size
    c["engram_num_embeddings"] = [sum(sum(per) for per in layer) for layer in engram_primes(c)]
    return token_map


RELEASE_QUANT = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                 "scale_fmt": "ue8m0", "expert_dtype": "fp4"}


def make_fixture(name, spec, out_root):
    c = dict(spec["config"])
    c["rope_parameters"] = rope_parameters(c)
    token_map, tokenizer = None, None
    if spec.get("engram"):
        tokenizer, tokens, specials = engram_tokenizer()
        token_map = engram_config(c, tokens, specials)
    for seed in range(100):
        gen = torch.Generator().manual_seed(1000 * seed + len(name))
        stored, values = {}, {}
        for tname, (shape, dtype) in tensor_shapes(c).items():
            stored[tname], values[tname] = store(random_value(tname, shape, gen), dtype)
        if spec.get("release"):
            stored = to_release(stored, values, gen, c)
        ids = torch.randint(0, c["vocab_size"], (spec["seq_len"],), generator=gen)
        ref = Reference(c, values)
        ref.token_map = token_map
        with torch.no_grad():
            logits = ref.forward(ids)
        if ref.gaps.min >= MIN_TOPK_GAP:
            break
        print(f"{name}: seed {seed} has a top-k gap of {ref.gaps.min:.2e}; next seed")
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    cfg = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
           "text_config": dict(text_config(c), model_type="deepseek_v41_text", gate_temp=c.get("gate_temp", 1.0))}
    if spec.get("release"):
        cfg["quantization_config"] = RELEASE_QUANT
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), stored)
    if tokenizer is not None:
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
    outputs = {"input_ids": ids.long(), "logits": logits.float()}
    if token_map is not None:  # the intermediate Engram results, to check the C++ pieces one by one
        outputs["engram_token_map"] = torch.tensor(token_map, dtype=torch.long)
        outputs["engram_hash_ids"] = engram_hash_ids(c, ids, token_map, c["engram_compressed_vocab_size"])
    write_safetensors(os.path.join(out, "reference.safetensors"), outputs)
    print(f"{name}: {ids.numel()} tokens, max|logit| {logits.abs().max():.3f}, min top-k gap {ref.gaps.min:.2e}")


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "tests/data/v41"
    torch.set_num_threads(2)
    wanted = sys.argv[2:] or list(FIXTURES)
    for name in wanted:
        make_fixture(name, FIXTURES[name], out_root)


if __name__ == "__main__":
    main()
