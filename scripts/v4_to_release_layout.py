#!/usr/bin/env python3
"""Rewrite a DeepSeek-V4 checkpoint from build/bin/make_random_v4 into DeepSeek's release layout.

Also takes models/deepinfer-nano: its MTP block (HF module names, stacked experts) is renamed and
split the release's way, and a config whose compression ratios are not the release's 4 / 128 keeps
its HF layer description (layer_types), which DeepInfer reads as well.

make_random_v4 writes the HF-saved names ("model.layers.3.attn.wq_a.weight", "model.embed_tokens.weight",
"model.hc_head.hc_fn", every expert in bf16) and an HF-style config.json ("layer_types"). Tools
written against the original release (deepseek-ai/DeepSeek-V4-Flash), such as llama.cpp's
convert_hf_to_gguf.py, read the release layout instead:

  * names without the "model." prefix: "embed.weight", "norm.weight", "hc_head_fn/_base/_scale",
    "layers.N.attn.kv_norm.weight" (make_random_v4: "attn.norm.weight");
  * routed experts as MXFP4, the release's expert format: "ffn.experts.E.w{1,2,3}.weight" int8
    [out, in/2] holding two e2m1 codes a byte (the lower nibble is the even column) and
    "...w{1,2,3}.scale" F8_E8M0 [out, in/32], one power-of-two scale per 32 inputs (OCP MX);
  * config.json with the release's keys: "compress_ratios" (0 / 4 / 128 per layer) in place of
    "layer_types", and the fields the release spells out (n_shared_experts, hc_mult, ...).

The other matrices stay bf16 (llama.cpp's converter turns dequantized FP8 into Q8_0, which would
make its "bf16" file partly 8-bit). Every value of the result is exact in bf16, and DeepInfer
loads this directory as well, so both engines run the same numbers.

With --fp8-linears the attention projections and shared experts are written as the release
stores them instead: F8_E4M3 codes with one power-of-two (F8_E8M0) scale per 128 x 128 block
("...weight" and "...scale", quantization_config.weight_block_size = [128, 128]), for measuring
DeepInfer on FP8 weights read as stored.

Only numpy is needed (Debian: python3-numpy).

    python3 scripts/v4_to_release_layout.py SRC DST [--tokenizer models/deepseek-v4-tokenizer]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

# The defaults DeepInfer's config parser uses for keys make_random_v4 leaves out (they are the
# V4-Flash release values, src/model/deepseek_v4_config.h), written out so no reader has to guess.
RELEASE_DEFAULTS = {
    "n_shared_experts": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "expert_dtype": "fp4",
}

ST_DTYPES = {"BF16": (np.uint16, 2), "F32": (np.float32, 4), "F16": (np.float16, 2), "I64": (np.int64, 8),
             "I32": (np.int32, 4), "I8": (np.int8, 1), "U8": (np.uint8, 1), "F8_E8M0": (np.uint8, 1),
             "F8_E4M3": (np.uint8, 1)}


def read_safetensors(path: Path) -> dict[str, tuple[str, list[int], np.ndarray]]:
    """name -> (dtype string, shape, memory-mapped raw array) for one safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        np_dtype, size = ST_DTYPES[meta["dtype"]]
        begin, end = meta["data_offsets"]
        count = (end - begin) // size
        arr = np.memmap(path, dtype=np_dtype, mode="r", offset=base + begin, shape=(count,))
        out[name] = (meta["dtype"], list(meta["shape"]), arr.reshape(meta["shape"]) if meta["shape"] else arr)
    return out


def bf16_to_f32(raw_u16: np.ndarray) -> np.ndarray:
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


# e2m1 magnitudes by code (sign is bit 3): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
E2M1_MIDPOINTS = (E2M1[1:] + E2M1[:-1]) / 2


def quantize_mxfp4(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[rows, cols] float32 -> (int8 [rows, cols/2] packed codes, uint8 [rows, cols/32] E8M0 scales).

    OCP MX: the block's shared exponent is floor(log2(amax)) - 2 (2 = e2m1's largest exponent), so
    the largest value lands in [4, 8) and saturates at 6; the rest round to the nearest code."""
    rows, cols = w.shape
    assert cols % 32 == 0, f"{cols} columns are not a multiple of 32"
    blocks = w.reshape(rows, cols // 32, 32)
    amax = np.abs(blocks).max(axis=-1)
    exp = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, np.finfo(np.float32).tiny))) - 2, -127)
    exp = np.clip(exp, -127, 127).astype(np.int32)
    scaled = blocks / np.ldexp(np.float32(1), exp)[..., None]
    code = np.searchsorted(E2M1_MIDPOINTS, np.abs(scaled)).astype(np.uint8)  # 0..7, saturating at 6
    code |= (scaled < 0).astype(np.uint8) << 3
    code = code.reshape(rows, cols)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
    return packed, (exp + 127).astype(np.uint8)


def e4m3_values() -> np.ndarray:
    """The value of every e4m3 code 0..126 (OCP "fn": no infinities, 0x7f is NaN), ascending."""
    codes = np.arange(127)
    exp, mant = codes >> 3, (codes & 7).astype(np.float64)
    return np.where(exp == 0, mant / 8 * 2.0**-6, (1 + mant / 8) * 2.0 ** (exp - 7.0))


E4M3 = e4m3_values()
E4M3_MIDPOINTS = (E4M3[1:] + E4M3[:-1]) / 2


def quantize_fp8(w: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """[rows, cols] float32 -> (uint8 [rows, cols] e4m3 codes, uint8 E8M0 [ceil(rows/block), ceil(cols/block)]).

    Each block's scale is the smallest power of two that brings its largest magnitude within
    e4m3's 448; values round to the nearest code (ties to the lower one)."""
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    padded = np.zeros((br * block, bc * block), dtype=np.float32)
    padded[:rows, :cols] = w
    blocks = padded.reshape(br, block, bc, block)
    amax = np.abs(blocks).max(axis=(1, 3))
    exp = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, np.finfo(np.float32).tiny) / 448.0)), -127)
    exp = np.clip(exp, -127, 127).astype(np.int32)
    scaled = blocks / np.ldexp(np.float32(1), exp)[:, None, :, None]
    code = np.searchsorted(E4M3_MIDPOINTS, np.abs(scaled)).astype(np.uint8)
    code |= (scaled < 0).astype(np.uint8) << 7
    return code.reshape(br * block, bc * block)[:rows, :cols], (exp + 127).astype(np.uint8)


def dequantize_mxfp4(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """quantize_mxfp4's codes and scales back to float32 [rows, cols]."""
    raw = packed.view(np.uint8)
    code = np.stack([raw & 15, raw >> 4], axis=-1).reshape(raw.shape[0], -1)
    value = E2M1[code & 7] * np.where(code & 8, -1.0, 1.0).astype(np.float32)
    exp = np.repeat(scales.astype(np.int32) - 127, 32, axis=1)
    return np.ldexp(value, exp).astype(np.float32)


def dequantize_fp8(code: np.ndarray, scales: np.ndarray, block: int = 128) -> np.ndarray:
    """quantize_fp8's codes and block scales back to float32 [rows, cols]."""
    rows, cols = code.shape
    value = E4M3[code & 127].astype(np.float32) * np.where(code & 128, -1.0, 1.0).astype(np.float32)
    exp = np.repeat(np.repeat(scales.astype(np.int32) - 127, block, axis=0), block, axis=1)[:rows, :cols]
    return np.ldexp(value, exp).astype(np.float32)


def f32_to_bf16(w: np.ndarray) -> np.ndarray:
    """float32 values that bf16 holds exactly (what the dequantizers give) as raw bf16."""
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    assert not np.any(bits & 0xFFFF), "a value bf16 does not hold exactly"
    return (bits >> 16).astype(np.uint16)


def lazy_quantized(arr: np.ndarray, dtype: str, quantize):
    """A function returning quantize(arr as float32), computed on first call (codes and scales
    are written at different times, after the header)."""
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def get():
        if "q" not in cache:
            w = bf16_to_f32(np.asarray(arr)) if dtype == "BF16" else np.asarray(arr, dtype=np.float32)
            cache["q"] = quantize(w.reshape(arr.shape))
        return cache["q"]

    return get


def release_name(name: str) -> str:
    """make_random_v4 (HF-saved) name -> release name."""
    fixed = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm.weight",
             "model.hc_head.hc_fn": "hc_head_fn", "model.hc_head.hc_base": "hc_head_base",
             "model.hc_head.hc_scale": "hc_head_scale", "head.weight": "head.weight"}
    if name in fixed:
        return fixed[name]
    if name.startswith("mtp."):  # already renamed by release_mtp
        return name
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)
    if m is None:
        raise SystemExit(f"v4_to_release_layout: unexpected tensor {name!r} (expected make_random_v4's names)")
    rest = "attn.kv_norm.weight" if m.group(2) == "attn.norm.weight" else m.group(2)
    return f"layers.{m.group(1)}.{rest}"


# The MTP block as our nano trainer saves it (HF module names, experts stacked) -> release names.
MTP_BLOCK_NAMES = {
    "attn_hc.fn": "hc_attn_fn", "attn_hc.base": "hc_attn_base", "attn_hc.scale": "hc_attn_scale",
    "ffn_hc.fn": "hc_ffn_fn", "ffn_hc.base": "hc_ffn_base", "ffn_hc.scale": "hc_ffn_scale",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_a_proj.weight": "attn.wq_a.weight", "self_attn.q_a_norm.weight": "attn.q_norm.weight",
    "self_attn.q_b_proj.weight": "attn.wq_b.weight", "self_attn.kv_proj.weight": "attn.wkv.weight",
    "self_attn.kv_norm.weight": "attn.kv_norm.weight", "self_attn.o_a_proj.weight": "attn.wo_a.weight",
    "self_attn.o_b_proj.weight": "attn.wo_b.weight", "self_attn.sinks": "attn.attn_sink",
    "mlp.gate.weight": "ffn.gate.weight", "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn.shared_experts.w1.weight",
    "mlp.shared_experts.up_proj.weight": "ffn.shared_experts.w3.weight",
    "mlp.shared_experts.down_proj.weight": "ffn.shared_experts.w2.weight",
}
MTP_HEAD_NAMES = {"hc_head.hc_fn": "hc_head_fn", "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}


def mtp_release_name(name: str) -> str:
    """The release name of an mtp.N.* tensor other than the block's stacked experts."""
    prefix, rest = re.fullmatch(r"(mtp\.\d+)\.(.+)", name).groups()
    if rest.startswith("block."):
        rest = rest[len("block."):]
        if rest not in MTP_BLOCK_NAMES:
            raise SystemExit(f"v4_to_release_layout: unexpected MTP tensor {name!r}")
        rest = MTP_BLOCK_NAMES[rest]
    return f"{prefix}.{MTP_HEAD_NAMES.get(rest, rest)}"


def release_mtp(tensors: dict) -> dict:
    """mtp.N.* tensors in the release spelling: the block's HF module names renamed and its stacked
    experts ([E, 2I, D] gate rows then up rows, [E, D, I]) split into ffn.experts.E.w1/w3/w2."""
    out = {}
    for name, (dtype, shape, arr) in tensors.items():
        stacked = re.fullmatch(r"(mtp\.\d+)\.block\.mlp\.experts\.(gate_up_proj|down_proj)", name)
        if not name.startswith("mtp."):
            out[name] = (dtype, shape, arr)
        elif stacked and stacked.group(2) == "gate_up_proj":
            half = shape[1] // 2
            for e in range(shape[0]):
                out[f"{stacked.group(1)}.ffn.experts.{e}.w1.weight"] = (dtype, [half, shape[2]], arr[e, :half])
                out[f"{stacked.group(1)}.ffn.experts.{e}.w3.weight"] = (dtype, [half, shape[2]], arr[e, half:])
        elif stacked:
            for e in range(shape[0]):
                out[f"{stacked.group(1)}.ffn.experts.{e}.w2.weight"] = (dtype, shape[1:], arr[e])
        else:
            out[mtp_release_name(name)] = (dtype, shape, arr)
    return out


EXPERT = re.compile(r"(layers|mtp)\.\d+\.ffn\.experts\.\d+\.w[123]\.weight")
FP8_LINEAR = re.compile(r"(layers|mtp)\.\d+\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|ffn\.shared_experts\.w[123])\.weight")


def stored_format(release: str, fp8_linears: bool) -> str | None:
    """How the release layout stores the tensor of this release name: "mxfp4", "fp8" or as is."""
    if EXPERT.fullmatch(release):
        return "mxfp4"
    return "fp8" if fp8_linears and FP8_LINEAR.fullmatch(release) else None


def write_safetensors(path: Path, plan: list) -> int:
    """Writes plan's (name, dtype, shape, producer) entries in name order; returns the data bytes.
    Producers run one at a time, after the header (quantized codes and scales are computed late)."""
    plan = sorted(plan, key=lambda p: p[0])
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, _ in plan:
        nbytes = int(np.prod(shape, dtype=np.int64)) * ST_DTYPES[dtype][1]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for i, (name, dtype, shape, produce) in enumerate(plan):
            data = np.ascontiguousarray(produce())
            want = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            assert data.nbytes == want, f"{name}: {data.nbytes} bytes, planned {want}"
            f.write(data.tobytes())
            if i % 200 == 0:
                print(f"  {i}/{len(plan)} tensors", file=sys.stderr, flush=True)
    return offset


def write_dequantized(tensors: dict, dst: Path, fp8_linears: bool) -> None:
    """The source checkpoint's own names and layout with every tensor the release stores quantized
    replaced by its dequantized values (bf16-exact): what an HF reference computes with to compare
    against the release copy."""
    plan = []
    for name, (dtype, shape, arr) in tensors.items():
        if name.startswith("mtp."):  # a stacked expert tensor's splits are all experts
            stacked = re.fullmatch(r"(mtp\.\d+)\.block\.mlp\.experts\..+", name)
            release = f"{stacked.group(1)}.ffn.experts.0.w1.weight" if stacked else mtp_release_name(name)
        else:
            release = release_name(name)
        kind = stored_format(release, fp8_linears) if dtype == "BF16" else None
        if kind is None:
            plan.append((name, dtype, shape, lambda a=arr: np.asarray(a)))
        else:
            plan.append((name, "BF16", shape, lambda a=arr, k=kind: round_trip(a, k)))
    write_safetensors(dst / "model.safetensors", plan)


def round_trip(arr: np.ndarray, kind: str) -> np.ndarray:
    """A bf16 tensor through the release's format `kind` and back, as raw bf16 of its shape."""
    w = bf16_to_f32(np.asarray(arr))
    if kind == "mxfp4":  # MXFP4 blocks run along a row: stacked experts alike
        w = dequantize_mxfp4(*quantize_mxfp4(w.reshape(-1, arr.shape[-1])))
    else:
        w = dequantize_fp8(*quantize_fp8(w.reshape(arr.shape)))
    return f32_to_bf16(w).reshape(arr.shape)


def release_config(cfg: dict) -> dict:
    out = {k: v for k, v in cfg.items() if k not in ("layer_types", "mlp_layer_types", "compress_rates")}
    for k, v in RELEASE_DEFAULTS.items():
        out.setdefault(k, v)
    rates = cfg.get("compress_rates", {})
    ratio = {"sliding_attention": 0,
             "compressed_sparse_attention": cfg.get("compress_rate_csa", rates.get("compressed_sparse_attention", 4)),
             "heavily_compressed_attention": cfg.get("compress_rate_hca", rates.get("heavily_compressed_attention", 128))}
    if "layer_types" in cfg:
        out["compress_ratios"] = [ratio[t] for t in cfg["layer_types"]]
    if "compress_ratios" not in out:
        raise SystemExit("v4_to_release_layout: config.json has neither layer_types nor compress_ratios")
    if out["num_key_value_heads"] != 1 or out["n_shared_experts"] != 1:
        raise SystemExit("v4_to_release_layout: expected one KV head and one shared expert")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="make_random_v4 output directory, or the bundled nano")
    ap.add_argument("dst", type=Path, help="directory to write (created)")
    ap.add_argument("--tokenizer", type=Path, help="directory with tokenizer.json / tokenizer_config.json to copy")
    ap.add_argument("--fp8-linears", action="store_true",
                    help="attention projections and shared experts as FP8 e4m3 with 128x128 E8M0 block scales")
    ap.add_argument("--dequantized", type=Path,
                    help="also write here the source's layout with the quantized tensors' dequantized values (bf16)")
    args = ap.parse_args()

    cfg = json.loads((args.src / "config.json").read_text())
    files = sorted(args.src.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"v4_to_release_layout: no safetensors in {args.src}")
    tensors: dict[str, tuple[str, list[int], np.ndarray]] = {}
    for f in files:
        tensors.update(read_safetensors(f))

    # Plan every output tensor (name, dtype, shape, producer) first: the header goes before the data.
    plan = []
    for name, (dtype, shape, arr) in release_mtp(tensors).items():
        new = release_name(name)
        kind = stored_format(new, args.fp8_linears)
        if kind == "mxfp4":
            rows, cols = shape
            quant = lazy_quantized(arr, dtype, quantize_mxfp4)
            plan.append((new, "I8", [rows, cols // 2], lambda q=quant: q()[0]))
            plan.append((new[: -len(".weight")] + ".scale", "F8_E8M0", [rows, cols // 32], lambda q=quant: q()[1]))
        elif kind == "fp8":
            rows, cols = shape
            quant = lazy_quantized(arr, dtype, quantize_fp8)
            plan.append((new, "F8_E4M3", [rows, cols], lambda q=quant: q()[0]))
            plan.append((new[: -len(".weight")] + ".scale", "F8_E8M0", [-(-rows // 128), -(-cols // 128)],
                         lambda q=quant: q()[1]))
        else:
            plan.append((new, dtype, shape, lambda a=arr: np.asarray(a)))
    out_path = args.dst / "model.safetensors"
    offset = write_safetensors(out_path, plan)
    rates = cfg.get("compress_rates", {})
    if rates and (rates.get("compressed_sparse_attention"), rates.get("heavily_compressed_attention")) != (4, 128):
        # The release's compress_ratios name a layer's kind by its ratio (4 or 128): other ratios
        # (the bundled nano's 16) keep the HF layer description, which DeepInfer reads as well.
        out_cfg = dict(cfg)
    else:
        out_cfg = release_config(cfg)
    if args.fp8_linears:
        out_cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                          "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}
    (args.dst / "config.json").write_text(json.dumps(out_cfg, indent=1) + "\n")
    if args.tokenizer:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            if (args.tokenizer / name).is_file():
                shutil.copy(args.tokenizer / name, args.dst / name)
    print(f"wrote {out_path} ({offset / 1e9:.2f} GB, {len(plan)} tensors) and config.json")
    if args.dequantized:
        write_dequantized(tensors, args.dequantized, args.fp8_linears)
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            if (args.src / name).is_file():
                shutil.copy(args.src / name, args.dequantized / name)
        print(f"wrote {args.dequantized} (the source layout, dequantized values)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
