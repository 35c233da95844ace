#!/usr/bin/env python3
"""Compares a ferry logits dump with a golden file from make_logits_golden.py (needs only numpy).

    python reference/compare_logits.py tests/golden/logits/tiny-llama.json ferry_dump.bin [--greedy] [--tol 1e-3]

The dump must use the golden layout: float32 little-endian, prompt-major, position-major, vocab contiguous,
len(prompts[p]) positions for prompt p (with --greedy: n_greedy steps per prompt, compared with
<model>.greedy.bin). A dump that holds only the first k prompts' rows is accepted and said so.
Prints, per position: relative L2 error ||a-b||/||b||, KL(golden || ferry) of the softmaxes, max |a-b|, and
whether the argmaxes agree; then a summary. Exit status 1 when any relative error exceeds --tol or an
argmax differs where the golden top1-top2 margin is larger than twice the max abs error there.
"""
import argparse
import json
import os
import sys

import numpy as np


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("golden_json")
    ap.add_argument("dump")
    ap.add_argument("--greedy", action="store_true", help="compare with <model>.greedy.bin")
    ap.add_argument("--tol", type=float, default=1e-3, help="max relative L2 error per position")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    args = ap.parse_args()

    with open(args.golden_json) as f:
        meta = json.load(f)
    vocab = meta["vocab_size"]
    gdir = os.path.dirname(os.path.abspath(args.golden_json))
    if args.greedy:
        if "greedy_logits_file" not in meta:
            sys.exit(f"{args.golden_json} has no greedy logits")
        golden = np.fromfile(os.path.join(gdir, meta["greedy_logits_file"]), dtype="<f4")
        counts = [meta["n_greedy"]] * len(meta["prompts"])
    else:
        golden = np.fromfile(os.path.join(gdir, meta["logits_file"]), dtype="<f4")
        counts = [len(p) for p in meta["prompts"]]
    golden = golden.reshape(-1, vocab)
    assert golden.shape[0] == sum(counts), "golden file does not match its json"

    dump = np.fromfile(args.dump, dtype="<f4")
    if dump.size % vocab:
        sys.exit(f"dump has {dump.size} floats, not a multiple of vocab_size {vocab}")
    dump = dump.reshape(-1, vocab)
    n_prompts = 0
    while n_prompts < len(counts) and sum(counts[:n_prompts + 1]) <= dump.shape[0]:
        n_prompts += 1
    if sum(counts[:n_prompts]) != dump.shape[0]:
        sys.exit(f"dump has {dump.shape[0]} rows; expected a prefix sum of {counts}")
    if n_prompts < len(counts):
        print(f"note: dump covers {n_prompts} of {len(counts)} prompts")

    worst_rel, worst_kl, n_agree, n_rows, failed = 0.0, 0.0, 0, 0, False
    row = 0
    for p in range(n_prompts):
        if not args.quiet:
            print(f"prompt {p} ({counts[p]} rows)")
        for i in range(counts[p]):
            a, b = dump[row], golden[row]
            row += 1
            diff = a.astype(np.float64) - b
            rel = float(np.linalg.norm(diff) / max(np.linalg.norm(b), 1e-30))
            lp, lq = log_softmax(b), log_softmax(a)
            kl = float(np.sum(np.exp(lp) * (lp - lq)))
            amax = float(np.max(np.abs(diff)))
            top2 = np.sort(b)[-2:]
            margin = float(top2[1] - top2[0])
            agree = int(np.argmax(a)) == int(np.argmax(b))
            finite = bool(np.all(np.isfinite(a)))
            bad = (not finite) or rel > args.tol or (not agree and margin > 2 * amax)
            failed |= bad
            worst_rel, worst_kl = max(worst_rel, rel), max(worst_kl, kl)
            n_agree += agree
            n_rows += 1
            if not args.quiet or bad:
                print(f"  pos {i:3d}: rel {rel:.3e}  kl {kl:.3e}  max|d| {amax:.3e}  argmax "
                      f"{'ok ' if agree else 'DIFF'} (golden margin {margin:.3f}){'  <-- FAIL' if bad else ''}"
                      f"{'' if finite else '  non-finite values'}")
    print(f"{meta['model']}: {n_rows} rows, worst rel L2 {worst_rel:.3e} (tol {args.tol:g}), worst KL "
          f"{worst_kl:.3e}, argmax agreement {n_agree}/{n_rows}: {'FAIL' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
