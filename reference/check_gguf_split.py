#!/usr/bin/env python3
"""Checks ferry's split GGUF against llama.cpp's gguf-py (the gguf package), both ways.

  python reference/check_gguf_split.py MODEL.gguf SHARD-00001-of-0000N.gguf ... OUT

SHARD... are `ferry gen ... --split-max-tensors K` (or --split-max-size) of the same model as MODEL.gguf, one file.
1. gguf-py reads every shard: split.no (u16, from 0), split.count (u16) and split.tensors.count (i32) as gguf-py's
   own writer sets them, the metadata in shard 1 only, and the shards' tensors are MODEL's, bytes equal, in order.
2. MODEL.gguf is rewritten by gguf-py's GGUFWriter(split_max_tensors=8) as OUT-00001-of-0000N.gguf ...: then
   `ferry run -m OUT-00002-of-0000N.gguf` must print what `ferry run -m MODEL.gguf` prints (run by hand).
Exit status 1 on any difference.
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def check_shards(model, shards):
    want = GGUFReader(model).tensors
    got = []
    for i, path in enumerate(shards):
        s = GGUFReader(path)
        no, count, total = s.fields["split.no"], s.fields["split.count"], s.fields["split.tensors.count"]
        assert no.types[0] == GGUFValueType.UINT16 and no.contents() == i, path
        assert count.types[0] == GGUFValueType.UINT16 and count.contents() == len(shards), path
        assert total.types[0] == GGUFValueType.INT32 and total.contents() == len(want), path
        assert ("general.architecture" in s.fields) == (i == 0), path
        got.extend(s.tensors)
    assert [t.name for t in got] == [t.name for t in want], "tensor order"
    for g, w in zip(got, want):
        assert g.tensor_type == w.tensor_type and np.array_equal(np.asarray(g.data), np.asarray(w.data)), g.name
    print(f"gguf-py reads ferry's {len(shards)} shards: {len(got)} tensors, the same bytes as {model}")


def resplit(model, out):
    r = GGUFReader(model)
    w = GGUFWriter(out + ".gguf", r.fields["general.architecture"].contents(), split_max_tensors=8)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name.startswith("split.") or name == "general.architecture":
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(name, f.contents(), f.types[0], sub_type=f.types[-1])
        else:
            w.add_key_value(name, f.contents(), f.types[0])
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"gguf-py wrote {out}-00001-of-... ; compare `ferry run -m` of a shard with {model}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    try:
        check_shards(sys.argv[1], sys.argv[2:-1])
    except AssertionError as e:
        sys.exit(f"DIFFERENT: {e}")
    resplit(sys.argv[1], sys.argv[-1])
