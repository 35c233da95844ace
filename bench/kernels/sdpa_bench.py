"""torch SDPA on the shapes of attention_bench's prefill section, for the same-run comparison.

Causal, bf16, H 32, KVH 8 (GQA 4: enable_gqa, else K/V repeated before timing), head_dim 128 and 64,
B * L = 16384. TFLOP/s = 4 * B * H * L^2 * D / 2 / t (the formula attention_bench uses). Backends: flash
(FlashAttention-2 inside torch) and the default choice (cuDNN on Hopper when torch picks it). Median of
20 timed calls after warm-up, CUDA events.
Usage: python3 bench/kernels/sdpa_bench.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def run(backends, q, k, v):
    try:
        with sdpa_kernel(backends):
            return median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)), "gqa"
    except Exception:
        kr = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        vr = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        try:
            with sdpa_kernel(backends):
                return median_ms(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True)), "repeat"
        except Exception as e:  # backend unavailable for this shape
            return None, type(e).__name__


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("== torch SDPA, causal, bf16, H 32 KVH 8, B*L = 16384 (TFLOP/s = 4*B*H*L^2*D/2 / t) ==")
    print(f"{'D':>4} {'L':>6} {'B':>4} {'flash ms':>10} {'flash TF/s':>11} {'default ms':>11} {'default TF/s':>13}")
    H, KVH = 32, 8
    for D in (128, 64):
        for L in (512, 1024, 2048, 4096, 8192):
            B = 16384 // L
            g = torch.Generator(device="cuda").manual_seed(1)
            q = torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
            k = torch.randn(B, KVH, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
            v = torch.randn(B, KVH, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
            flop = 4.0 * B * H * L * L * D / 2
            tf, how_f = run([SDPBackend.FLASH_ATTENTION], q, k, v)
            td, how_d = run([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION], q, k, v)
            fmt = lambda t: (f"{t:10.3f}", f"{flop / t * 1e-9:11.1f}") if t else (f"{'-':>10}", f"{how_f:>11}")
            a, b = fmt(tf)
            c, d = fmt(td)
            print(f"{D:4d} {L:6d} {B:4d} {a} {b} {c:>11} {d:>13}  ({how_f}/{how_d})")


if __name__ == "__main__":
    main()
