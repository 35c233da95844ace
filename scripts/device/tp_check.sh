#!/usr/bin/env bash
# Tensor-parallel check on the 2-GPU machine (nvidia-h200-x2), over binaries built here:
#   configure with -DFERRY_NCCL_ROOT=<nccl folder> (FERRY_HAS_NCCL), build `ferry` and `allreduce_bench`, put
#   them (stripped) in .carry/ with the usual libraries; NCCL itself is the machine's torch-venv copy.
#   Device call (carry [".carry"]):  bash scripts/device/tp_check.sh [correctness|bench|70b|all]
#
# correctness: Llama-3-8B-shaped BF16 random model (ferry gen); `ferry score` teacher-forced logits of 3 prompts
#              at --tp 1 and --tp 2: cosine >= 0.999 and argmax agreement >= 99% over all positions.
# bench:       `ferry bench -p 0 -n 128` batch-1 generation at --tp 1 and --tp 2 (issue: TP=2 >= 1.6x TP=1), and
#              allreduce_bench: the step's collectives alone (65 f32 all-reduces of one token's hidden state +
#              the logits all-gather, captured in a CUDA graph): the all-reduce time per step.
# 70b:         Llama-3-70B shape at --tp 2: load and batch-1 generation (issue: >= 45 tok/s). BF16 is ~141 GB:
#              written only when the disk has room, else Q8_0 (~75 GB) and the table says so.
# A summary table is printed last; logs under $OUT.
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
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$summary"; }

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee -a "$summary"
missing=$(ldd "$C/ferry" | grep "not found" || true); [ -n "$missing" ] && row "missing libraries" "$missing"
F="$C/ferry"

gen() {  # gen SHAPE TYPE PATH
  [ -f "$3" ] || { /usr/bin/time -f "%e s" "$F" gen --shape "$1" --type "$2" -o "$3" > "$OUT/gen_$1_$2.log" 2>&1 || row "gen $1 $2" "FAILED (see gen_$1_$2.log)"; }
}

bench_tg() {  # bench_tg MODEL TP LOG -> prints tok/s of the tg line
  timeout "$T_RUN" "$F" bench -m "$1" --device cuda --tp "$2" -p 0 -n 128 -r 3 > "$3" 2>&1
  grep -E "tg ?128" "$3" | head -1
}

if [ "$what" = correctness ] || [ "$what" = all ] || [ "$what" = bench ]; then
  M8="$W/llama3-8b-bf16.gguf"
  gen llama3-8b bf16 "$M8"
fi

if [ "$what" = correctness ] || [ "$what" = all ]; then
  "$PY" - "$W/prompts.json" <<'PYEOF'
import json, random, sys
random.seed(5)
prompts = [[random.randrange(256, 128000) for _ in range(n)] for n in (48, 96, 160)]
json.dump({"prompts": prompts}, open(sys.argv[1], "w"))
PYEOF
  for tp in 1 2; do
    timeout "$T_RUN" "$F" score -m "$M8" --device cuda --tp $tp --tokens "$W/prompts.json" -o "$W/logits_tp$tp.bin" \
      > "$OUT/score_tp$tp.log" 2>&1 || row "score --tp $tp" "FAILED (score_tp$tp.log)"
  done
  res=$("$PY" - "$W/logits_tp1.bin" "$W/logits_tp2.bin" <<'PYEOF'
import sys, numpy as np
V = 128256
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, V).astype(np.float64)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, V).astype(np.float64)
cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
agree = (a.argmax(1) == b.argmax(1)).mean()
ok = cos.min() >= 0.999 and agree >= 0.99
print(f"{'PASS' if ok else 'FAIL'}: positions {len(a)}, cosine min {cos.min():.6f} mean {cos.mean():.6f}, argmax agreement {100*agree:.2f}%")
PYEOF
)
  row "8B bf16 TP=2 vs TP=1 logits (3 prompts)" "$res"
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  t1=$(bench_tg "$M8" 1 "$OUT/bench_tp1.log"); row "8B bf16 tg128 --tp 1" "$t1"
  t2=$(bench_tg "$M8" 2 "$OUT/bench_tp2.log"); row "8B bf16 tg128 --tp 2" "$t2"
  ar=$(timeout 120 "$C/allreduce_bench" --layers 32 --dim 4096 --vocab 128256 2>&1 | tail -1)
  row "8B step collectives (allreduce_bench)" "$ar"
  echo "$ar" >> "$OUT/bench_tp2.log"
fi

if [ "$what" = 70b ] || [ "$what" = all ]; then
  avail=$(df -B1 --output=avail "$W" | tail -1)
  if [ "$avail" -gt 150000000000 ]; then T=bf16; else T=q8_0; fi
  M70="$W/llama3-70b-$T.gguf"
  row "70B weights" "$T (disk free $((avail / 1000000000)) GB; bf16 needs ~141 GB)"
  gen llama3-70b "$T" "$M70"
  t70=$(bench_tg "$M70" 2 "$OUT/bench_70b_tp2.log"); row "70B $T tg128 --tp 2" "$t70"
  ar=$(timeout 120 "$C/allreduce_bench" --layers 80 --dim 8192 --vocab 128256 2>&1 | tail -1)
  row "70B step collectives (allreduce_bench)" "$ar"
  grep -iE "error|tensor-parallel" "$OUT/bench_70b_tp2.log" | head -5
fi

echo "==== summary ===="; cat "$summary"
