#!/usr/bin/env bash
# The one device script: runs on the lent H200 machine over binaries built on the development machine.
#
# Here (dev machine, nvcc present):   scripts/device/pack.sh          # builds and fills .carry/
# Device call (carry [".carry"]):     bash scripts/device/check.sh [tests|bench|all]
#
# It runs the GPU op tests, the end-to-end logits checks, compute-sanitizer memcheck on the op tests, and
# `ferry bench --device cuda` on Llama-3-8B-shaped random models made on the machine with `ferry gen`
# (BF16, Q8_0, Q4_0), then prints one summary table last. Full logs go under $OUT.
set -uo pipefail

what="${1:-all}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
C="$repo/.carry"
OUT="${OUT:-/tmp/ferry-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$C:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# The tests find their data through the source path they were built with.
if [ ! -e /work/main ]; then mkdir -p /work && ln -sfn "$repo" /work/main; fi
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
missing=$(ldd "$C/ferry" | grep "not found" || true)
[ -n "$missing" ] && note "missing libraries: $missing"

if [ "$what" = tests ] || [ "$what" = all ]; then
  "$C/test_cuda" > "$OUT/test_cuda.log" 2>&1
  note "test_cuda: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_cuda.log" | tr '\n' ' ')"
  grep -E "FAILED|Failure" "$OUT/test_cuda.log" | head -20
  "$C/test_e2e" > "$OUT/test_e2e.log" 2>&1
  note "test_e2e (cpu): $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_e2e.log" | tr '\n' ' ')"
  timeout 300 compute-sanitizer --tool memcheck "$C/test_cuda" --gtest_filter='CudaOps.*:CudaAttention.*:CudaMatmul.*' \
    > "$OUT/memcheck.log" 2>&1
  note "memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  for t in bf16 q8_0 q4_0; do
    m="/tmp/llama3-8b-$t.gguf"
    [ -f "$m" ] || "$C/ferry" gen --shape llama3-8b --type "$t" -o "$m" -t 16 > "$OUT/gen-$t.log" 2>&1
    "$C/ferry" bench --device cuda -m "$m" -p 512 -n 128 -r 3 > "$OUT/bench-$t.log" 2>&1
    note "$(grep -E 'pp512|tg128' "$OUT/bench-$t.log" | sed "s/^/[$t] /")"
    tail -3 "$OUT/bench-$t.log" | grep -i error
    rm -f "$m"
  done
fi
echo "=== summary ==="
cat "$summary"
