#!/usr/bin/env python3
"""Tests scripts/device/trace_summary.py (the kernel-timeline summary of `check.sh trace`) on synthetic traces
whose answers are known: steps found among other launches, each kernel's critical share (they add up to the span,
overlap gives 0, idle time is counted apart), the layer period, the gap between steps, template names shortened."""
import csv
import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "device"))
import trace_summary as ts  # noqa: E402

FIELDS = ["correlation_id", "graph_id", "graph_node_id", "start_ns", "end_ns", "stream", "grid_x", "grid_y", "grid_z",
          "block_x", "dynamic_smem", "registers", "name"]


def write_trace(path, launches):
    """launches: list of (graph_id, correlation_id, [(name, start_ns, end_ns), ...])."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for graph, corr, kernels in launches:
            for node, (name, start, end) in enumerate(kernels):
                w.writerow({"correlation_id": corr, "graph_id": graph, "graph_node_id": node, "start_ns": start,
                            "end_ns": end, "stream": 7, "grid_x": 132, "grid_y": 1, "grid_z": 1, "block_x": 288,
                            "dynamic_smem": 0, "registers": 64, "name": name})


MATVEC = "void ferry::cuda_ops::v10::matvec_v10_kernel<(ferry::DType)3, 1, 8, false>(ferry::cuda_ops::MatvecParams)"
NORM = "void ferry::cuda_ops::(anonymous namespace)::rms_norm_vec_kernel<true, false, 256, 4>(ferry::cuda_ops::P)"
ATTN = "void ferry::cuda_ops::(anonymous namespace)::decode_mma_kernel<128, 8, 3, true>(ferry::cuda_ops::A, int)"


def one_step(t0, layers):
    """A step: per layer norm (1 us after an idle 0.5 us), matvec (starts early, 3 us past the norm's end), attention
    (fully inside the matvec: share 0); returns the kernels and the step's known span and shares."""
    ks, t = [], t0
    for _ in range(layers):
        t += 500  # idle before the norm
        ks.append((NORM, t, t + 1000))
        ks.append((MATVEC, t + 200, t + 4000))  # overlaps the norm, ends 3 us after it
        ks.append((ATTN, t + 1500, t + 3500))  # runs under the matvec
        t += 4000
    return ks, t - t0


class TraceSummaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.csv")

    def tearDown(self):
        self.dir.cleanup()

    def make(self, n_steps=12, layers=16, gap=50_000):
        launches, t = [], 1_000_000
        for s in range(n_steps):
            ks, span = one_step(t, layers)
            launches.append((5, 100 + 2 * s, ks))
            launches.append((0, 101 + 2 * s, [("sample_kernel(ferry::cuda_ops::SampleParams)", t + span + 10,
                                                t + span + 20)]))  # eager, between steps
            t += span + gap
        write_trace(self.path, launches)
        return span

    def test_short_names_keep_template_arguments(self):
        self.assertEqual(ts.short_name(MATVEC), "matvec_v10_kernel<3,1,8,false>")
        self.assertEqual(ts.short_name(NORM), "rms_norm_vec_kernel<true,false,256,4>")
        self.assertEqual(ts.short_name("ferry::cuda_ops::(anonymous namespace)::gather_rows_kernel(P)"),
                         "gather_rows_kernel")

    def test_steps_shares_and_idle(self):
        span = self.make()
        size, steps = ts.load_steps(self.path)
        self.assertEqual(size, 48)
        self.assertEqual(len(steps), 12)  # the eager sampler launches are not steps
        got_span, rows = ts.analyse(steps[3])
        # the span runs from the first kernel's start: the first idle 0.5 us is before it
        self.assertEqual(got_span, span - 500)
        shares = [r["share"] for r in rows]
        idle = [r["idle"] for r in rows]
        self.assertEqual(sum(shares) + sum(idle), got_span)
        self.assertEqual(shares[:3], [1000, 3000, 0])  # norm, matvec past the norm, attention in its shadow
        self.assertEqual(idle[3], 500)  # the next layer's norm starts 0.5 us after the matvec's end
        self.assertEqual(rows[1]["gap"], 200 - 1000)  # the matvec started 0.8 us before the norm ended

    def test_report(self):
        self.make()
        out = io.StringIO()
        sys.argv = ["trace_summary.py", self.path, "--skip", "2", "--show", "4"]
        with redirect_stdout(out):
            ts.main()
        text = out.getvalue()
        self.assertIn("steps: 10 graph launches of 48 kernels", text)
        self.assertIn("between steps (last kernel's end to the next step's first start) median 50.5 us", text)
        self.assertIn("One layer, slot by slot (period 3 kernels", text)
        self.assertIn("| | layer total | | | | 4.00 |", text)  # 1 + 3 + 0 us of share (the 0.5 us idle apart)


if __name__ == "__main__":
    unittest.main()
