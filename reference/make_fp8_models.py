#!/usr/bin/env python3
"""FP8 (e4m3) versions of tests/fixtures/models/tiny-llama in the three checkpoint layouts ferry reads, and the
values their dequantization must give (checked by tests/model/fp8_checkpoint_test.cpp):

  tiny-llama-fp8-block    quant_method "fp8", weight_block_size [48, 48] (DeepSeek-V3's layout with a block that
                          does not divide 64 or 160, so edge blocks are partial), F32 weight_scale_inv per block
  tiny-llama-fp8-channel  compressed-tensors, weights strategy "channel" (BF16 weight_scale (rows, 1)), dynamic
                          per-token input activations (llm-compressor's FP8_DYNAMIC)
  tiny-llama-fp8-tensor   quant_method "fp8" without a block size: one F32 weight_scale per weight, static
                          activations (an F32 input_scale per weight, which ferry's reference path reads past)

Every nn.Linear weight of the decoder layers is FP8: w8 = round_to_e4m3(w / scale) with scale = amax / 448 over the
block, row or tensor (ml_dtypes' float8_e4m3fn cast: round to nearest even); embeddings, norms and lm_head stay,
in BF16 (embeddings, lm_head) and F32 (norms). Each folder also gets fp8_expected.json: per FP8 weight the f64 sum of
its dequantized f32 values (float32(w8) * float32(scale), one rounding, as torch computes it) and 16 sampled
elements as f32 bit patterns. tests/golden/fp8_e4m3.json holds all 256 e4m3 codes decoded by ml_dtypes.

numpy + ml_dtypes only (no torch: the safetensors files are written by hand, the format is a JSON header and bytes).
Run from the repository root:  /opt/refvenv/bin/python reference/make_fp8_models.py   (~1 s; deterministic)
Versions used for the checked-in files: numpy 2.x, ml_dtypes 0.5.x (printed at the end).
"""
import hashlib
import json
import os
import shutil
import struct

import ml_dtypes
import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "tests/fixtures/models/tiny-llama")
E4M3 = ml_dtypes.float8_e4m3fn
E4M3_MAX = 448.0
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e["dtype"]
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=np.float32).reshape(e["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array of the matching bytes)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - (8 + len(text)) % 8) % 8)  # data stays 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)


def bf16(a):
    return a.astype(ml_dtypes.bfloat16)


def scales_for(w, layout):
    """f32 scale per element's group: block (48x48), row, or the whole tensor; amax / 448 (1 where amax is 0)."""
    rows, cols = w.shape
    if layout == "block":
        br = bc = 48
        s = np.zeros(((rows + br - 1) // br, (cols + bc - 1) // bc), dtype=np.float32)
        for i in range(s.shape[0]):
            for j in range(s.shape[1]):
                s[i, j] = np.abs(w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]).max() / E4M3_MAX
        full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:rows, :cols]
        return s, full
    if layout == "channel":
        s = bf16((np.abs(w).max(axis=1, keepdims=True) / E4M3_MAX)).astype(np.float32)  # stored as BF16
        return s, np.broadcast_to(s, w.shape)
    s = np.array(np.abs(w).max() / E4M3_MAX, dtype=np.float32)
    return s, np.broadcast_to(s, w.shape)


def make(layout):
    name = f"tiny-llama-fp8-{layout}"
    out = os.path.join(ROOT, "tests/fixtures/models", name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in os.listdir(SRC):
        if f != "model.safetensors" and f != "config.json":
            shutil.copy(os.path.join(SRC, f), os.path.join(out, f))
    src = read_safetensors(os.path.join(SRC, "model.safetensors"))
    tensors, expected = {}, {}
    rng = np.random.default_rng(31)
    for tname, w in src.items():
        if not any(f".{p}.weight" in tname for p in LINEAR):
            tensors[tname] = ("F32", w) if w.ndim == 1 else ("BF16", bf16(w))
            continue
        s, full = scales_for(w, layout)
        w8 = (w / full).astype(E4M3)
        deq = w8.astype(np.float32) * full.astype(np.float32)
        tensors[tname] = ("F8_E4M3", w8)
        if layout == "block":
            tensors[tname + "_scale_inv"] = ("F32", s)
        elif layout == "channel":
            tensors[tname + "_scale"] = ("BF16", bf16(s))
        else:
            tensors[tname + "_scale"] = ("F32", s)
            tensors[tname.replace(".weight", ".input_scale")] = ("F32", np.array(0.05, dtype=np.float32))
        rows, cols = w.shape
        picks = [(0, 0), (rows - 1, cols - 1), (rows - 1, 0), (0, cols - 1)]
        picks += [(int(rng.integers(rows)), int(rng.integers(cols))) for _ in range(12)]
        expected[tname] = {
            "shape": [rows, cols],
            "sum": float(deq.astype(np.float64).sum()),
            "samples": [[r, c, int(deq[r, c].view(np.uint32))] for r, c in picks],
            "n_subnormal_codes": int(((w8.view(np.uint8) & 0x78) == 0).sum()),
        }
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    if layout == "block":
        config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [48, 48]}
    elif layout == "channel":
        config["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head"],
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                      "dynamic": True}}}}
    else:
        config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "static"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "fp8_expected.json"), "w") as f:
        json.dump({"layout": layout, "weights": expected}, f, indent=1, sort_keys=True)
        f.write("\n")
    digest = hashlib.sha256(open(os.path.join(out, "model.safetensors"), "rb").read()).hexdigest()[:16]
    print(f"{name}: {os.path.getsize(os.path.join(out, 'model.safetensors'))} bytes, sha256 {digest}")


def golden_table():
    codes = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    path = os.path.join(ROOT, "tests/golden/fp8_e4m3.json")
    with open(path, "w") as f:
        json.dump({"note": "e4m3fn code -> float32 bits, decoded by ml_dtypes " + ml_dtypes.__version__,
                   "bits": [int(b) for b in codes.view(np.uint32)]}, f)
        f.write("\n")


if __name__ == "__main__":
    for layout in ("block", "channel", "tensor"):
        make(layout)
    golden_table()
    print("numpy", np.__version__, "ml_dtypes", ml_dtypes.__version__)
