#!/usr/bin/env python3
"""Summarizes a kernel timeline written by bench/trace/kernel_trace.cpp (CUPTI): where a replayed step's time goes.

Usage: trace_summary.py TRACE.csv [--skip N] [--show N]

Steps are the CUDA-graph launches that ran the most common number of kernels (ferry captures one decode step per
graph). For each step, kernels are ordered by start time; a kernel's *critical share* is how far it pushed the
step's end frontier (max end so far) past where its predecessors had left it, so the shares plus the idle gaps
add up to the step's span. A kernel that runs entirely under an earlier one's shadow has share 0; PDL overlap
shows as a negative gap (it started before its predecessor ended). Medians are over the steps after --skip.
"""
import argparse
import csv
import statistics
import sys
from collections import Counter, defaultdict


def short_name(name):
    """'void ns::f<(T)6, 1, 8, false>(args)' -> 'f<6,1,8,false>' (template arguments kept: they pick the shape)."""
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)::", "")
    depth, cut = 0, len(s)
    for i, c in enumerate(s):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    lt = s.find("<")
    head, args = (s, "") if lt < 0 else (s[:lt], s[lt:])
    head = head.split("::")[-1]
    for junk in ("ferry::DType", "ferry::cuda_ops::", "(", ")", " "):
        args = args.replace(junk, "")
    return head + args


def load_steps(path):
    groups = defaultdict(list)
    for row in csv.DictReader(open(path, newline="")):
        if row["graph_id"] == "0":
            continue
        groups[(row["graph_id"], row["correlation_id"])].append(row)
    if not groups:
        sys.exit("trace_summary: no graph-launched kernels in " + path)
    size = Counter(len(g) for g in groups.values()).most_common(1)[0][0]
    steps = []
    for key in sorted(groups, key=lambda k: int(k[1])):
        g = groups[key]
        if len(g) != size:
            continue
        ks = sorted(({"name": short_name(r["name"]), "start": int(r["start_ns"]), "end": int(r["end_ns"]),
                      "grid": int(r["grid_x"]) * int(r["grid_y"]) * int(r["grid_z"]),
                      "smem": int(r["dynamic_smem"])} for r in g), key=lambda k: (k["start"], k["end"]))
        steps.append(ks)
    return size, steps


def analyse(step):
    t0 = step[0]["start"]
    frontier, prev_end, out = t0, None, []
    for k in step:
        share = max(0, k["end"] - max(frontier, k["start"]))
        idle = max(0, k["start"] - frontier)
        gap = None if prev_end is None else k["start"] - prev_end
        out.append({"off": k["start"] - t0, "dur": k["end"] - k["start"], "share": share, "idle": idle, "gap": gap})
        frontier = max(frontier, k["end"])
        prev_end = k["end"]
    return frontier - t0, out


def layer_period(names):
    """The smallest p such that the middle half of the step repeats with period p (a layer's kernels), or None."""
    n = len(names)
    lo, hi = n // 4, 3 * n // 4
    for p in range(2, min(64, n // 4) + 1):
        same = sum(names[i] == names[i + p] for i in range(lo, min(hi, n - p)))
        if same >= 0.95 * (min(hi, n - p) - lo):
            return p
    return None


def med(values):
    return statistics.median(values) if values else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=5, help="steps to drop at the start (warm-up)")
    ap.add_argument("--show", type=int, default=24, help="kernels of the step to list one by one")
    a = ap.parse_args()
    size, steps = load_steps(a.trace)
    steps = steps[a.skip:] if len(steps) > a.skip + 3 else steps
    names = [k["name"] for k in steps[0]]
    steps = [s for s in steps if [k["name"] for k in s] == names]  # same kernel order as the first one kept
    if not steps:
        sys.exit("trace_summary: the steps do not share one kernel order")
    gaps = [b[0]["start"] - max(k["end"] for k in a) for a, b in zip(steps, steps[1:])]
    spans, per = [], []
    for s in steps:
        span, rows = analyse(s)
        spans.append(span)
        per.append(rows)
    n = len(names)
    col = {f: [med([p[i][f] for p in per if p[i][f] is not None]) for i in range(n)]
           for f in ("off", "dur", "share", "idle", "gap")}
    span = med(spans)
    busy_sum = sum(col["dur"])
    print(f"steps: {len(steps)} graph launches of {size} kernels; step span median {span / 1e3:.1f} us "
          f"(min {min(spans) / 1e3:.1f}, max {max(spans) / 1e3:.1f}); kernel durations sum {busy_sum / 1e3:.1f} us; "
          f"idle (no kernel running) {sum(col['idle']) / 1e3:.1f} us; between steps (last kernel's end to the next "
          f"step's first start) median {med(gaps) / 1e3:.1f} us")
    print("(A kernel's duration runs from its launch, which PDL makes early, to its end, so it includes its wait for "
          "its predecessor; the share is what it adds to the step.)")
    print()
    print("By kernel (medians per step; share = how much of the span the kernel holds on the critical path):")
    print(f"| kernel | grid | calls | dur us each | dur us total | share us total | share % of span |")
    print("|---|---|---|---|---|---|---|")
    agg = defaultdict(lambda: {"calls": 0, "dur": 0.0, "share": 0.0, "grid": set()})
    for i, name in enumerate(names):
        g = agg[name]
        g["calls"] += 1
        g["dur"] += col["dur"][i]
        g["share"] += col["share"][i]
        g["grid"].add(steps[0][i]["grid"])
    for name, g in sorted(agg.items(), key=lambda kv: -kv[1]["share"]):
        grids = ",".join(str(x) for x in sorted(g["grid"]))
        print(f"| {name[:90]} | {grids} | {g['calls']} | {g['dur'] / g['calls'] / 1e3:.2f} | {g['dur'] / 1e3:.1f} | "
              f"{g['share'] / 1e3:.1f} | {100 * g['share'] / span:.1f} |")
    period = layer_period(names)
    if period:
        i0, layers = n // 4, (n // 2) // period
        print()
        print(f"One layer, slot by slot (period {period} kernels; medians over {layers} layers from kernel {i0}):")
        print("| slot | kernel | grid | dur us | gap us | share us |")
        print("|---|---|---|---|---|---|")
        total = 0.0
        for j in range(period):
            idx = [i0 + l * period + j for l in range(layers)]
            share = med([col["share"][i] for i in idx])
            total += share
            print(f"| {j} | {names[i0 + j][:80]} | {steps[0][i0 + j]['grid']} | {med([col['dur'][i] for i in idx]) / 1e3:.2f} | "
                  f"{med([col['gap'][i] for i in idx]) / 1e3:.2f} | {share / 1e3:.2f} |")
        print(f"| | layer total | | | | {total / 1e3:.2f} |")
    print()
    print(f"The first {min(a.show, n)} kernels of the step (medians; gap = start - previous end, negative = overlap):")
    print("| # | kernel | grid | start us | dur us | gap us | share us |")
    print("|---|---|---|---|---|---|---|")
    for i in range(min(a.show, n)):
        gap = "" if i == 0 else f"{col['gap'][i] / 1e3:.2f}"
        print(f"| {i} | {names[i][:80]} | {steps[0][i]['grid']} | {col['off'][i] / 1e3:.2f} | "
              f"{col['dur'][i] / 1e3:.2f} | {gap} | {col['share'][i] / 1e3:.2f} |")


if __name__ == "__main__":
    main()
