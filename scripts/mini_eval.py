"""Evaluation of a trained deepinfer-mini in the training code (fp32, the stored weights): held-out
bits per byte, the DSpark draft's acceptance and calibration, and the syntax check's prompts."""
import re

import torch
import torch.nn.functional as F


def heldout_rows(tok, texts, length, max_rows):
    """Rows [N, length]: BOS, then length - 1 tokens of one held-out file (first chunks first)."""
    chunks = []
    for ids in tok.encode_batch(texts):
        chunks.append([ids[i:i + length - 1] for i in range(0, len(ids) - length + 2, length - 1)])
    rows, depth = [], 0
    while len(rows) < max_rows and any(depth < len(c) for c in chunks):
        rows += [[0] + c[depth] for c in chunks if depth < len(c)]
        depth += 1
    return torch.tensor(rows[:max_rows], dtype=torch.long)


@torch.no_grad()
def heldout_nll(model, rows, dev, batch=8):
    """Per-row summed NLL (nats) of tokens 1.. given the row's earlier tokens."""
    out = []
    for i in range(0, rows.shape[0], batch):
        r = rows[i:i + batch].to(dev)
        logits, _ = model(r[:, :-1])
        nll = F.cross_entropy(logits.float().transpose(1, 2), r[:, 1:], reduction="none")
        out.append(nll.double().sum(1).cpu())
    return torch.cat(out)


def row_bytes(tok, rows):
    return [len(tok.decode(r[1:].tolist()).encode("utf-8")) for r in rows]


@torch.no_grad()
def draft_proposals(model, x, anchors, temperature, gen):
    """Drafts [N, A, K], their draft probabilities (1 for greedy) and confidences."""
    c = model.c
    _, taps = model(x, c["dspark_target_layer_ids"])
    m = model.context(taps)
    hpre = model.draft_hidden(m, model.block_ids(x, anchors), anchors)[:, :, 1:]
    prev, drafts, qprob, conf = x[:, anchors], [], [], []
    for k in range(hpre.shape[2]):
        logits, c_logit = model.draft_heads(hpre[:, :, k], prev)
        if temperature == 0:
            tok = logits.argmax(-1)
            q = torch.ones_like(tok, dtype=torch.float)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            tok = torch.multinomial(probs.flatten(0, 1), 1, generator=gen).view(prev.shape)
            q = probs.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        drafts.append(tok)
        qprob.append(q)
        conf.append(torch.sigmoid(c_logit))
        prev = tok
    return torch.stack(drafts, -1), torch.stack(qprob, -1), torch.stack(conf, -1)


@torch.no_grad()
def verify(model, x, anchors, drafts, qprob, temperature, gen, batch=32):
    """Accepted flags [N, A, K] of each draft token given the earlier ones were accepted: the
    target runs once over each anchor's prefix followed by its drafts (chain verification)."""
    N, A, K = drafts.shape
    flags = torch.zeros(N, A, K, dtype=torch.bool, device=x.device)
    pairs = [(n, a) for n in range(N) for a in range(A)]
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        end = max(int(anchors[a]) for _, a in chunk) + K + 1
        seqs = torch.stack([x[n, :end] for n, _ in chunk]).clone()
        for j, (n, a) in enumerate(chunk):
            P = int(anchors[a])
            seqs[j, P + 1:P + 1 + K] = drafts[n, a]
        logits, _ = model(seqs)
        for j, (n, a) in enumerate(chunk):
            P = int(anchors[a])
            rows = logits[j, P:P + K].float()
            if temperature == 0:
                flags[n, a] = rows.argmax(-1) == drafts[n, a]
            else:
                p = torch.softmax(rows / temperature, dim=-1).gather(-1, drafts[n, a].unsqueeze(-1)).squeeze(-1)
                u = torch.rand(K, generator=gen, device=x.device)
                flags[n, a] = u < p / qprob[n, a]
    return flags


def acceptance(model, rows, dev, temperature, anchors_per_row=16, seed=0):
    """Mean accepted length per verification (bonus token included) at the model's block size,
    and per position: mean confidence vs the observed acceptance rate given the earlier accepted."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = rows[:, :-1].to(dev)
    K = model.c["dspark_block_size"] - 1
    lo = min(64, x.shape[1] // 4)
    anchors = torch.linspace(lo, x.shape[1] - K - 2, anchors_per_row).long().to(dev)
    drafts, qprob, conf = draft_proposals(model, x, anchors, temperature, gen)
    flags = verify(model, x, anchors, drafts, qprob, temperature, gen)
    alive = torch.cumprod(flags.long(), dim=-1)
    reached = torch.cat([torch.ones_like(alive[..., :1]), alive[..., :-1]], dim=-1).bool()
    per_position = []
    for k in range(K):
        sel = reached[..., k]
        per_position.append({"position": k + 1, "reached": int(sel.sum()),
                             "mean_confidence": float(conf[..., k][sel].mean()) if sel.any() else None,
                             "accepted_rate": float(flags[..., k][sel].float().mean()) if sel.any() else None})
    return {"temperature": temperature, "verifications": int(alive[..., 0].numel()),
            "mean_accepted_length": float((alive.sum(-1) + 1).float().mean()), "per_position": per_position}


HEADER = re.compile(r"^(?:async\s+)?(?:def|class)\s+\w+[^\n]*:[ \t]*$", re.M)


def code_prompts(texts, count=50):
    """Top-level one-line function or class headers of held-out files, one per file first."""
    per_file = [[m.group(0).rstrip() for m in HEADER.finditer(t)] for t in texts]
    out, depth = [], 0
    while len(out) < count and any(depth < len(h) for h in per_file):
        out += [h[depth] for h in per_file if depth < len(h)]
        depth += 1
    return out[:count]


@torch.no_grad()
def greedy(model, tok_ids, new_tokens, dev):
    ids = list(tok_ids)
    for _ in range(new_tokens):
        logits, _ = model(torch.tensor([ids], device=dev))
        ids.append(int(logits[0, -1].argmax()))
        if ids[-1] == 1:
            break
    return ids

