#!/usr/bin/env python3
"""Checks that another GGUF reader (the gguf package, llama.cpp's gguf-py: its numpy dequantizers follow ggml's
dequantize_row_*) reads a file `ferry quantize` wrote exactly as ferry does.

  python reference/check_gguf_dequant.py QUANTIZED.gguf DEQUANTIZED.gguf

DEQUANTIZED is `ferry quantize QUANTIZED DEQUANTIZED F32` (ferry's dequantize_row of every tensor). For every tensor
the gguf package's dequantization of QUANTIZED must equal DEQUANTIZED bit for bit; the metadata the readers need
(architecture, tokenizer) is printed. Exit status 1 on any difference.
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main(qpath, fpath):
    q, f = GGUFReader(qpath), GGUFReader(fpath)
    ref = {t.name: t for t in f.tensors}
    bad = 0
    counts = {}
    for t in q.tensors:
        got = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        want = np.asarray(ref[t.name].data, dtype=np.float32).reshape(-1)
        same = got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        if not same:
            bad += 1
            print(f"DIFFERENT {t.name} {t.tensor_type.name}: max |diff| {np.abs(got - want).max()}")
    arch = bytes(q.fields["general.architecture"].parts[-1]).decode()
    n_tok = len(q.fields["tokenizer.ggml.tokens"].data)
    print(f"{qpath}: {len(q.tensors)} tensors {counts}, architecture {arch}, {n_tok} tokens; "
          f"{'all equal' if bad == 0 else str(bad) + ' differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
