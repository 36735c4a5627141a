#!/usr/bin/env python3
"""Reads a DeepSeek-V4.1 checkpoint in the release layout (FP8 e4m3 linears and MXFP4 experts with
E8M0 scales, official names) back into the values v41_reference.py / dspark_reference.py compute
with (fp32, transformers-style names), and writes reference outputs for a trained checkpoint.

Usage: release_checkpoint.py MODEL_DIR HELDOUT.safetensors OUT.safetensors [--length 160]
  Takes the first held-out row's first `length` tokens and writes input_ids, the target's logits
  (v41_reference full forward) and, when the checkpoint has a DSpark draft, its taps and the
  draft's outputs at four anchors (dspark_reference), in the layout the C++ tests read.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dspark_reference as dspark  # noqa: E402
import v4_to_release_layout as release  # noqa: E402
import v41_reference as v41  # noqa: E402


def e4m3_table():
    """fp32 value of every e4m3 byte code (sign in bit 7)."""
    magnitude = torch.from_numpy(release.e4m3_values()).float()
    magnitude = torch.cat([magnitude, torch.tensor([float("nan")])])  # code 0x7f is NaN
    return torch.cat([magnitude, -magnitude])


def read_safetensors(path):
    """name -> (dtype string, torch tensor): floats as fp32, encoded bytes as uint8."""
    out = {}
    for name, (dt, shape, raw) in release.read_safetensors(path).items():
        if dt == "BF16":
            t = torch.from_numpy(release.bf16_to_f32(raw))
        elif dt in ("F8_E4M3", "F8_E8M0", "I8"):
            t = torch.from_numpy(raw.view("uint8").copy())
        else:
            t = torch.from_numpy(raw.copy())
        out[name] = (dt, t.reshape(shape))
    return out


def hf_name(rel):
    if rel.startswith("layers."):
        return "model." + rel
    return {"embed.weight": "model.embed.weight", "norm.weight": "model.norm.weight", "head.weight": "lm_head.weight"}.get(rel, rel)


def load_release(model_dir):
    """(config dict as the references take it, {hf name: fp32 values}, engram token map or None)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    c = dict(cfg.get("text_config", cfg))
    c["rope_parameters"] = v41.rope_parameters(c)
    raw = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    table = e4m3_table()
    values = {}
    for rel, (dt, t) in raw.items():
        if rel.endswith(".scale"):
            continue
        base = rel[:-len(".weight")]
        if dt == "F8_E4M3":
            scale = torch.pow(2.0, raw[base + ".scale"][1].double() - 127).float()
            v = table[t.long()]
            r, cols = v.shape
            v = (v.view(r // 32, 32, cols // 32, 32) * scale[:, None, :, None]).reshape(r, cols)
        elif dt == "I8" and ".experts." in rel:
            scale = torch.pow(2.0, raw[base + ".scale"][1].double() - 127).float()
            lo, hi = t & 0xF, t >> 4
            codes = torch.stack([lo, hi], dim=-1).flatten(-2).long()
            mag = v41.E2M1[codes & 7]
            v = torch.where(codes >= 8, -mag, mag)
            v = (v.view(v.shape[0], -1, 32) * scale[..., None]).reshape(v.shape)
        else:
            v = t.float()
        values[hf_name(rel)] = v
    token_map = None
    if c.get("engram_layer_ids"):
        tok = json.load(open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8"))
        specials = {a["id"]: a["content"] for a in tok["added_tokens"]}
        by_id = {i: t for t, i in tok["model"]["vocab"].items()}
        by_id.update(specials)
        token_map, size = v41.compressed_token_map([by_id[i] for i in range(len(by_id))], specials)
        assert size == c["engram_compressed_vocab_size"], "the tokenizer does not give the config's Engram vocabulary"
    return c, values, token_map


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("heldout")
    ap.add_argument("out")
    ap.add_argument("--length", type=int, default=160)
    args = ap.parse_args()
    torch.set_num_threads(2)
    c, values, token_map = load_release(args.model)
    rows = read_safetensors(args.heldout)["input_ids"][1]
    ids = rows[0, :args.length].clone()
    taps_at = c.get("dspark_target_layer_ids", [])
    draft = dspark.Draft(c, values)
    draft.target.token_map = token_map
    with torch.no_grad():
        logits = draft.target.forward(ids, tap_layers=taps_at)
        out = {"input_ids": ids.long(), "logits": logits.float()}
        if taps_at:
            W = c["sliding_window"]
            points = [3, W, W + W // 2 + 1, args.length - 6]
            m = draft.context(draft.target.taps)
            results = [draft.draft(m, int(ids[P]), P) for P in points]
            out.update({"taps": torch.cat([draft.target.taps[l] for l in taps_at], dim=-1).float(),
                        "draft_points": torch.tensor(points, dtype=torch.long),
                        "draft_base_logits": torch.stack([r[0] for r in results]).float(),
                        "draft_logits": torch.stack([r[1] for r in results]).float(),
                        "draft_confidence": torch.stack([r[2] for r in results]).float(),
                        "draft_tokens": torch.stack([r[3] for r in results]).long()})
    v41.write_safetensors(args.out, out)
    print(f"{args.out}: {ids.numel()} tokens, min top-k gap {draft.target.gaps.min:.2e}")


if __name__ == "__main__":
    main()
