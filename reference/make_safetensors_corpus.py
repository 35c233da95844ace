#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target (tests/fuzz/corpus/safetensors/).

    /opt/refvenv/bin/python reference/make_safetensors_corpus.py

Valid files written by the safetensors library (every dtype family, metadata, empty and scalar tensors),
plus hand-made broken ones (the cases the reader must reject), all under 1 KB.
"""
import json
import os
import struct

import numpy as np
import torch
from safetensors.torch import save

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fuzz", "corpus",
                   "safetensors")


def raw(header, data=b""):
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + data


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    files = {
        "valid_f32": save({"w": torch.randn(3, 4, generator=g)}),
        "valid_mixed": save({"a": torch.randn(2, 3, generator=g).to(torch.float16),
                             "b": torch.randn(5, generator=g).to(torch.bfloat16),
                             "c": torch.arange(4, dtype=torch.int64)}, metadata={"format": "pt"}),
        "valid_empty_scalar": save({"e": torch.zeros(0, 8), "s": torch.tensor(1.5)}),
        "valid_unsupported": save({"m": torch.tensor([True, False]), "u": torch.arange(3, dtype=torch.uint8),
                                   "f8": torch.randn(4, generator=g).to(torch.float8_e4m3fn)}),
        "valid_5d": save({"conv": torch.randn(1, 2, 1, 2, 1, generator=g)}),
        "valid_no_tensors": save({}, metadata={"k": "v"}),
        "bad_short": b"\x05\x00\x00",
        "bad_header_len": struct.pack("<Q", 1 << 40) + b"{}",
        "bad_json": raw('{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]'),
        "bad_offsets_order": raw('{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}', b"\1\2\3\4"),
        "bad_offsets_range": raw('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\1\2\3\4"),
        "bad_overlap": raw('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                           '"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', bytes(range(1, 7))),
        "bad_overflow": raw('{"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}', b"\1" * 8),
        "bad_size": raw('{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}}', b"\1\2\3\4"),
        "bad_dup": raw('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                       '"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\1"),
        "bad_dtype": raw('{"w":{"dtype":"Q4_0","shape":[1],"data_offsets":[0,1]}}', b"\1"),
        "bad_metadata": raw('{"__metadata__":{"n":1}}'),
        "bad_nested": raw("[" * 200 + "]" * 200),
    }
    for name, data in files.items():
        assert len(data) < 1024, name
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files to {OUT}")


if __name__ == "__main__":
    main()
