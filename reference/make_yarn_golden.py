#!/usr/bin/env python3
"""Writes tests/golden/rope/yarn.json: transformers' YaRN inverse frequencies and attention factor for a few configs.

    /opt/refvenv/bin/python reference/make_yarn_golden.py [--out tests/golden/rope/yarn.json]

Each case is a config.json (Qwen2.5-7B's and Qwen3-8B's shapes with the yarn block their model cards give, a tiny
one with other betas, one with attention_factor given, one with mscale / mscale_all_dim and truncate false, one
whose factor is null) and what transformers' own _compute_yarn_parameters returns for it: inv_freq (float32, one
per rotated pair) and attention_factor. tests/model/yarn_test.cpp parses each config with ferry's config_from_hf
and compares.

The function runs as transformers ships it. Where torch is not installed (this machine's venv), numpy stands in
for it: the function only builds float32 aranges, raises a base to them, clamps and does arithmetic, which numpy
does in float32 the same way (a float32 array keeps float32 against Python scalars).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import transformers
from transformers import Qwen2Config, Qwen3Config
from transformers import modeling_rope_utils

try:
    import torch  # noqa: F401
    TORCH = "torch " + torch.__version__
except ImportError:
    TORCH = "numpy " + np.__version__ + " standing in for torch"

    class _Tensor(np.ndarray):
        def to(self, device=None, dtype=None):
            return self if dtype is None else self.astype(dtype).view(_Tensor)

        def float(self):
            return self.astype(np.float32).view(_Tensor)

    class _Torch:
        float = np.float32
        float32 = np.float32
        int64 = np.int64

        @staticmethod
        def arange(*args, dtype=None):
            return np.arange(*args, dtype=dtype or np.int64).view(_Tensor)

        @staticmethod
        def clamp(x, lo, hi):
            return np.clip(x, lo, hi).astype(x.dtype).view(_Tensor)

    modeling_rope_utils.torch = _Torch()

CASES = [
    ("qwen2.5-7b", Qwen2Config, dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                                     max_position_embeddings=32768, rope_theta=1000000.0,
                                     rope_scaling={"type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 32768})),
    ("qwen3-8b", Qwen3Config, dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                   max_position_embeddings=40960, rope_theta=1000000.0,
                                   rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 32768})),
    ("tiny-betas", Qwen2Config, dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=512, rope_theta=10000.0,
                                     rope_scaling={"rope_type": "yarn", "factor": 8.0, "beta_fast": 16.0,
                                                   "beta_slow": 2.0, "original_max_position_embeddings": 64})),
    ("attention-factor", Qwen2Config, dict(hidden_size=512, num_attention_heads=8, num_key_value_heads=8,
                                           max_position_embeddings=8192, rope_theta=10000.0,
                                           rope_scaling={"rope_type": "yarn", "factor": 2.0, "attention_factor": 1.5,
                                                         "original_max_position_embeddings": 4096})),
    ("mscale-untruncated", Qwen2Config, dict(hidden_size=1024, num_attention_heads=16, num_key_value_heads=4,
                                             max_position_embeddings=163840, rope_theta=10000.0,
                                             rope_scaling={"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                                                           "mscale_all_dim": 0.707, "truncate": False,
                                                           "original_max_position_embeddings": 4096})),
    ("factor-null", Qwen3Config, dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                      max_position_embeddings=131072, rope_theta=1000000.0,
                                      rope_scaling={"rope_type": "yarn", "factor": None,
                                                    "original_max_position_embeddings": 32768})),
]


def case(name, cls, kw):
    base = dict(num_hidden_layers=2, intermediate_size=128, vocab_size=512)
    config = cls(**base, **kw)
    inv_freq, attention_factor = modeling_rope_utils._compute_yarn_parameters(config)
    # The config.json ferry parses: the keys given, as a config.json of transformers 4 writes them (rope_scaling).
    config_json = dict(model_type=config.model_type, **base, **kw)
    return {"name": name, "config": config_json, "inv_freq": [float(np.float32(v)) for v in np.asarray(inv_freq)],
            "attention_factor": float(attention_factor)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/rope/yarn.json")
    args = ap.parse_args()
    out = {"generator": "reference/make_yarn_golden.py", "transformers": transformers.__version__, "backend": TORCH,
           "cases": [case(*c) for c in CASES]}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for c in out["cases"]:
        print(f"{c['name']}: {len(c['inv_freq'])} pairs, attention factor {c['attention_factor']:.6f}")


if __name__ == "__main__":
    sys.exit(main())
