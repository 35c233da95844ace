#!/usr/bin/env python3
"""Where a kernel's warps wait, instruction by instruction: reads the CSV of Nsight Compute's source page
(`ncu --import R --page source --print-source sass --csv`, check.sh ncu with FERRY_NCU_SOURCE=1) and prints, per
profiled kernel, the columns it found, the total warp-stall samples, and in address order every SASS instruction
that holds at least --min percent of them (the kernel's hot spots in program order: a wait on a barrier, on a load,
on the instruction cache shows as a spike at the instruction after it).

usage: ncu_sass_top.py FILE.csv [--min 0.5]
"""
import argparse
import csv
import sys


def sections(lines):
    """Yields (title, header, rows) for each table of the page (one per profiled kernel)."""
    title, header, rows = "", None, []
    for row in csv.reader(lines):
        if not row:
            continue
        if any(c.strip() in ("Address", "# Address") for c in row) and any("Source" in c for c in row):
            if header is not None:
                yield title, header, rows
            header, rows = [c.strip() for c in row], []
        elif header is not None and len(row) >= len(header) - 1:
            rows.append(row)
        else:
            if header is not None and rows:
                yield title, header, rows
                header, rows = None, []
            title = " ".join(c for c in row if c)
    if header is not None:
        yield title, header, rows


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--min", type=float, default=0.5, help="percent of the samples an instruction must hold")
    args = ap.parse_args()
    with open(args.csv, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    found = False
    for title, header, rows in sections(lines):
        found = True
        col = next((i for i, h in enumerate(header) if h.startswith("Warp Stall Sampling (All")), None)
        src = next((i for i, h in enumerate(header) if h == "Source"), None)
        addr = next((i for i, h in enumerate(header) if "Address" in h), None)
        execd = next((i for i, h in enumerate(header) if h.startswith("Instructions Executed")), None)
        print(f"== {title[:160]}")
        print("columns: " + " | ".join(header))
        if col is None or src is None:
            print("no warp-stall sampling column")
            continue
        total = sum(number(r[col]) for r in rows if len(r) > col)
        print(f"{len(rows)} instructions, {total:.0f} warp-stall samples")
        if total <= 0:
            continue
        for r in rows:
            if len(r) <= max(col, src):
                continue
            share = 100.0 * number(r[col]) / total
            if share >= args.min:
                ex = f" exec {number(r[execd]):.0f}" if execd is not None and len(r) > execd else ""
                print(f"{r[addr] if addr is not None else '':>8} {share:5.1f}%{ex}  {r[src].strip()[:90]}")
    if not found:
        print("no source table in " + args.csv)
        print("\n".join(lines[:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
