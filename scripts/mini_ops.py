"""Tensor helpers of the deepinfer-mini trainer (mini_model.py): straight-through fake
quantisation of weights, RoPE over batched positions, the block-wise window attention, top-k with
the reference's tie rule, and the mHC mixes and expansion with few passes over the streams. The
model calls them through this module, so train_mini.py --compile parts can swap in compiled ones."""
import torch
import torch.nn.functional as F

import v41_reference as v41


def ste(x, q):
    return x + (q - x).detach()


def fake_fp8_weight(w):
    r, c = w.shape[-2], w.shape[-1]
    b = w.reshape(-1, r // 32, 32, c // 32, 32)
    scale = v41.pow2_ceil(b.abs().amax(dim=(2, 4), keepdim=True).clamp_min(1e-4) / 448.0)
    return (v41.round_e4m3((b / scale).clamp(-448, 448)) * scale).reshape(w.shape)


def fake_mxfp4_weight(w):
    b = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    scale = v41.pow2_ceil(b.abs().amax(-1, keepdim=True).clamp_min(6.0 * 2.0 ** -126) / 6.0)
    return (v41.round_e2m1((b / scale).clamp(-6, 6)) * scale).reshape(w.shape)


def rope_bt(x, cos, sin, inverse=False):
    """Interleaved RoPE on the trailing channels; cos/sin [T, rd/2] index dim 1 of x."""
    rd = cos.shape[-1] * 2
    shape = [1, cos.shape[0]] + [1] * (x.dim() - 3) + [rd // 2]
    c, s = cos.view(shape), sin.view(shape)
    if inverse:
        s = -s
    nope, r = x[..., :-rd], x[..., -rd:]
    even, odd = r[..., 0::2], r[..., 1::2]
    rotated = torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)
    return torch.cat([nope, rotated], dim=-1)


def rope_table(inv_fac, positions):
    inv, fac = inv_fac
    angles = positions.double()[:, None] * inv.double().to(positions.device)[None, :]
    return (angles.cos() * fac).float(), (angles.sin() * fac).float()


def autocast_dtype(t):
    """The dtype products run in at this point (autocast's), else t's."""
    dev = t.device.type
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else t.dtype
    return torch.get_autocast_gpu_dtype() if dev == "cuda" and torch.is_autocast_enabled() else t.dtype


def top_k(scores, k):
    """torch.topk over the last dim with the reference's tie rule (values descending, equal values
    by the lower index first): an untrained indexer's relu gives many exact zeros. Two topk passes
    and a sort of the k picks instead of sorting every row (a segmented sort is the slow part on
    the GPU): the k-th value's ties are taken from the lowest index up, the picks come in index
    order from a topk over a decreasing key, then a stable sort by value orders them."""
    n = scores.shape[-1]
    kth = torch.topk(scores, k, dim=-1).values[..., -1:]
    above, at = scores > kth, scores == kth
    take = above | (at & (at.cumsum(-1) <= k - above.sum(-1, keepdim=True)))
    key = take * (n - torch.arange(n, device=scores.device, dtype=torch.float32))  # the lower index, the larger
    picks = torch.topk(key, k, dim=-1).indices
    values, order = torch.sort(scores.gather(-1, picks), dim=-1, descending=True, stable=True)
    return torch.return_types.topk((values, picks.gather(-1, order)))


def window_blocks(q, kv, window):
    """Queries [B, T, H, d] as [B, n, W, H, d] blocks of W = window positions (T padded up), and per
    block the keys of it and the block before, [B, n, 2W, d] (zeros before position 0)."""
    T = q.shape[1]
    pad = -T % window
    q = F.pad(q, (0, 0, 0, 0, 0, pad))
    kv = F.pad(kv, (0, 0, window, pad))
    blocks = kv.unfold(1, 2 * window, window).transpose(-1, -2)
    return q.unflatten(1, (-1, window)), blocks


def window_logits(qb, blocks, window):
    """[B, H, T, 2W] query-key products, -inf outside the causal window of `window` keys."""
    B, n, W, H = qb.shape[:4]
    logits = torch.einsum("bnwhd,bnkd->bhnwk", qb, blocks)
    rel = torch.arange(2 * W, device=qb.device)[None, :] - W - torch.arange(W, device=qb.device)[:, None]
    inside = (rel <= 0) & (rel > -window)  # key position minus query position
    first = torch.arange(2 * W, device=qb.device) >= W  # block 0 has no block before it
    mask = inside[None] & (first[None, None, :] | (torch.arange(n, device=qb.device) > 0)[:, None, None])
    return logits.masked_fill(~mask, -float("inf")).flatten(2, 3)


def window_output(probs, blocks, T):
    """[B, T, H, d] = window probabilities [B, H, T, 2W] times each block's keys (the values)."""
    n, W = blocks.shape[1], blocks.shape[2] // 2
    probs = F.pad(probs, (0, 0, 0, n * W - T)).unflatten(2, (n, W))
    out = torch.einsum("bhnwk,bnkd->bnwhd", probs.to(blocks.dtype), blocks)
    return out.flatten(1, 2)[:, :T]


def mixes(streams, fn, base, scale, c):
    """v41.mixes with fewer passes over the streams (the largest activations here): the RMS norm
    without weight commutes with the product, so the product takes the raw streams and its rows
    are scaled after, and the norm comes from one read (vector_norm) instead of squares and a mean."""
    flat = streams.flatten(-2).float()
    rstd = torch.rsqrt(torch.linalg.vector_norm(flat, dim=-1, keepdim=True).square() / flat.shape[-1]
                       + c["rms_norm_eps"])
    m = (flat @ fn.t()).float() * rstd  # fp32 also when a caller runs the product under autocast
    return v41.mix_coefficients(m, base, scale, c)


def expand(y, streams, post, comb):
    """post * y on every stream plus the streams mixed by comb, in fp32 (they are the residual;
    under autocast a product would round them to bf16); the sum is the product's own addend."""
    lead = streams.shape[:-2]
    hc, D = streams.shape[-2:]
    with torch.autocast(device_type=streams.device.type, enabled=False):
        added = (post.unsqueeze(-1) * y.unsqueeze(-2).float()).reshape(-1, hc, D)
        mixed = torch.baddbmm(added, comb.float().reshape(-1, hc, hc).transpose(1, 2), streams.float().reshape(-1, hc, D))
    return mixed.view(*lead, hc, D)
