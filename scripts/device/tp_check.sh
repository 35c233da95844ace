#!/usr/bin/env bash
# Tensor-parallel check on the 2-GPU machine (nvidia-h200-x2), over binaries built here:
#   configure with -DFERRY_NCCL_ROOT=<nccl folder> (FERRY_HAS_NCCL), build `ferry`, `test_cuda` and
#   `allreduce_bench`, put them (stripped) in .carry/ with the usual libraries (scripts/device/pack.sh);
#   NCCL itself is the machine's torch-venv copy.
#   Device call (carry [".carry"]):  bash scripts/device/tp_check.sh [all|peer|allreduce|correctness|bench|70b]
#
# Models are file-less (`-m random:SHAPE:bf16`, dist/random_weights.h): each rank generates its own shard in
# memory, the same values `ferry gen --seed 1` writes, so nothing is written to disk (70B BF16 is 141 GB).
#
# peer:        the one-shot peer all-reduce against a host sum (test_cuda PeerAllReduce.*: 1..32 tokens x 4096
#              and odd sizes, eager and in a CUDA graph replayed 100 times, bit-identical on both GPUs).
# allreduce:   allreduce_bench: one all-reduce at 8 KiB..512 KiB (NCCL and peer) and one decode step's
#              collectives (2L+1 all-reduces + the logits all-gather) for the 8B and 70B shapes.
# correctness: Llama-3-8B shape; `ferry score` teacher-forced logits of 3 prompts at --tp 1 and --tp 2 (peer and
#              NCCL): issue target cosine >= 0.999 and argmax agreement >= 99%. Diagnostics: TP2 peer vs TP2
#              NCCL (expected identical bits: a + b either way) and TP1 vs TP1 --batch-invariant (the Hopper GEMM
#              with one tile instead of cuBLASLt: a change of f32 summation order only, so it shows how much
#              this random model's logits move under summation order alone).
# bench:       `ferry bench -p 0 -n 128` batch-1 generation at --tp 1 and --tp 2 with FERRY_TP_ALLREDUCE=nccl
#              and =peer (issue: TP=2 >= 1.6x TP=1); each --tp 2 run prints its collectives' time per step.
# 70b:         Llama-3-70B shape BF16 at --tp 2, file-less: wall time of load + run, tg128 (issue: >= 45 tok/s).
# A summary table is printed last; logs under $OUT. The whole `all` run is meant to stay under ~9 minutes.
set -uo pipefail
what="${1:-all}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
C="${FERRY_CARRY:-$repo/.carry}"
if [ -f "$C/bins.tar.xz" ]; then  # pack.sh compresses the binaries to fit a call
  mkdir -p /tmp/ferry-bin && tar xJf "$C/bins.tar.xz" -C /tmp/ferry-bin && C=/tmp/ferry-bin
fi
T_RUN="${TP_RUN_TIMEOUT:-240}"  # seconds any one ferry command may take (a first run may hang: bound it)
export FERRY_TP_TIMEOUT="${FERRY_TP_TIMEOUT:-90}"
OUT="${OUT:-/tmp/ferry-out}"
W="${TP_WORK:-/tmp/ferry-tp}"
mkdir -p "$OUT" "$W"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$C:$NCCL_LIB:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export FERRY_SOURCE_DIR="$repo"
PY=/opt/torch/.venv/bin/python; [ -x "$PY" ] || PY=python3
summary="$OUT/tp_summary.txt"; : > "$summary"
row() { printf '%-52s %s\n' "$1" "$2" | tee -a "$summary"; }
on() { [ "$what" = all ] || [ "$what" = "$1" ]; }
t0=$(date +%s)

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee -a "$summary"
missing=$(ldd "$C/ferry" | grep "not found" || true); [ -n "$missing" ] && row "missing libraries" "$missing"
F="$C/ferry"
M8="random:llama3-8b:bf16"

bench_tg() {  # bench_tg TP LOG [ferry bench options...] -> the tg line and the collectives line
  local tp=$1 log=$2; shift 2
  timeout "$T_RUN" "$F" bench --device cuda --tp "$tp" -p 0 -n 128 "$@" > "$log" 2>&1 || echo "FAILED (rc $?, $(basename "$log"))"
  grep -E "\| +tg ?128" "$log" | head -1 | awk -F'|' '{print $8}' | tr -s ' '
  grep -E "^tensor-parallel tg" "$log" | head -1 | sed -E 's/: [0-9.]+ us per decode step.*//'
}

if on peer; then
  timeout 180 "$C/test_cuda" --gtest_filter='PeerAllReduce.*' > "$OUT/peer_test.log" 2>&1
  row "peer all-reduce test (test_cuda PeerAllReduce.*)" "$(grep -E '^\[  (PASSED|FAILED) ' "$OUT/peer_test.log" | tr '\n' ' ') $(grep -c '^\[  FAILED' "$OUT/peer_test.log") failed lines"
  grep -E "Failure|FAILED|SKIPPED" "$OUT/peer_test.log" | head -5
fi

if on allreduce; then
  for shape in "32 4096 8B" "80 8192 70B"; do
    set -- $shape
    timeout 150 "$C/allreduce_bench" --layers "$1" --dim "$2" --vocab 128256 --iters 100 --timeout 60 \
      > "$OUT/allreduce_$3.log" 2>"$OUT/allreduce_$3.err"
    rc=$?
    [ $rc -ne 0 ] && row "allreduce_bench $3" "FAILED rc $rc: $(tail -2 "$OUT/allreduce_$3.log" "$OUT/allreduce_$3.err" | tr '\n' ' ')"
    cat "$OUT/allreduce_$3.log"
    grep -E "per step" "$OUT/allreduce_$3.log" | while read -r l; do row "allreduce_bench $3 step" "$(echo "$l" | sed -E 's/^allreduce_bench: //')"; done
  done
fi

if on correctness; then
  "$PY" - "$W/prompts.json" <<'PYEOF'
import json, random, sys
random.seed(5)
prompts = [[random.randrange(256, 128000) for _ in range(n)] for n in (48, 96, 160)]
json.dump({"prompts": prompts}, open(sys.argv[1], "w"))
PYEOF
  score() {  # score NAME TP [env/options...]
    local name=$1 tp=$2; shift 2
    timeout "$T_RUN" env "$@" "$F" score -m "$M8" --device cuda --tp "$tp" --tokens "$W/prompts.json" \
      -o "$W/logits_$name.bin" > "$OUT/score_$name.log" 2>&1 || row "score $name" "FAILED (score_$name.log)"
  }
  score tp1 1 FERRY_TP_ALLREDUCE=auto
  score tp2_nccl 2 FERRY_TP_ALLREDUCE=nccl
  score tp2_peer 2 FERRY_TP_ALLREDUCE=peer
  timeout "$T_RUN" "$F" score -m "$M8" --device cuda --tp 1 --batch-invariant --tokens "$W/prompts.json" \
    -o "$W/logits_tp1_bi.bin" > "$OUT/score_tp1_bi.log" 2>&1 || row "score tp1 --batch-invariant" "FAILED"
  cmp_logits() {  # cmp_logits LABEL A B GATE(1: issue thresholds)
    res=$("$PY" - "$W/logits_$2.bin" "$W/logits_$3.bin" "$4" <<'PYEOF'
import sys, numpy as np
V = 128256
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, V).astype(np.float64)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, V).astype(np.float64)
cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
agree = (a.argmax(1) == b.argmax(1)).mean()
same = np.array_equal(a, b)
ok = cos.min() >= 0.999 and agree >= 0.99
tag = ("PASS" if ok else "FAIL") if sys.argv[3] == "1" else "info"
print(f"{tag}: positions {len(a)}, cosine min {cos.min():.6f} mean {cos.mean():.6f}, argmax {100*agree:.2f}%, max|d| {np.abs(a-b).max():.3g}{', identical' if same else ''}")
PYEOF
)
    row "$1" "$res"
  }
  cmp_logits "8B TP=2 (peer) vs TP=1" tp2_peer tp1 1
  cmp_logits "8B TP=2 (nccl) vs TP=1" tp2_nccl tp1 1
  cmp_logits "8B TP=2 peer vs TP=2 nccl (expect identical)" tp2_peer tp2_nccl 0
  cmp_logits "8B TP=1 --batch-invariant vs TP=1 (sum order)" tp1_bi tp1 0
fi

if on bench; then
  row "8B bf16 tg128 --tp 1" "$(FERRY_TP_ALLREDUCE=auto bench_tg 1 "$OUT/bench_tp1.log" -m "$M8" -r 3 | tr '\n' ' ')"
  row "8B bf16 tg128 --tp 2 nccl" "$(FERRY_TP_ALLREDUCE=nccl bench_tg 2 "$OUT/bench_tp2_nccl.log" -m "$M8" -r 3 | tr '\n' ' ')"
  row "8B bf16 tg128 --tp 2 peer" "$(FERRY_TP_ALLREDUCE=peer bench_tg 2 "$OUT/bench_tp2_peer.log" -m "$M8" -r 3 | tr '\n' ' ')"
fi

if on 70b; then
  s=$(date +%s)
  r=$(FERRY_TP_ALLREDUCE=peer bench_tg 2 "$OUT/bench_70b_tp2.log" --random llama3-70b --type bf16 -r 2 | tr '\n' ' ')
  row "70B bf16 file-less tg128 --tp 2 peer" "$r (wall $(( $(date +%s) - s )) s incl. load and 3 x 128 tokens)"
  grep -iE "error|tensor-parallel rank" "$OUT/bench_70b_tp2.log" | head -5
fi

# Every TP run printed its results and then hung in teardown until the 10 s bound (nccl_communicator.cpp) ended
# it; rank 0 now drops its graphs before the communicator. This row says whether any run still needed the bound.
row "runs that needed the teardown bound" "$(grep -l "teardown still waiting" "$OUT"/*.log 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
row "tp_check wall time" "$(( $(date +%s) - t0 )) s"
echo "==== summary ===="; cat "$summary"
