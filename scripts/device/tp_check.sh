#!/usr/bin/env bash
# Tensor-parallel check on the 2-GPU machine (nvidia-h200-x2), over binaries built here:
#   configure with -DFERRY_NCCL_ROOT=<nccl folder> (FERRY_HAS_NCCL), build `ferry`, `serve_bench`, `test_cuda` and
#   `allreduce_bench`, put them (stripped) in .carry/ with the usual libraries (scripts/device/pack.sh);
#   NCCL itself is the machine's torch-venv copy.
#   Device call (carry [".carry"]):  bash scripts/device/tp_check.sh [STAGE...]   (default: all)
#   all = correctness serve mpirun serve70b (in this order, by value; ~8 minutes); the older stages peer,
#   allreduce, bench, 70b, protocol and trace run when named (`everything` runs all ten).
#
# Models are file-less (`-m random:SHAPE:TYPE[:SEED[:INIT]]`, dist/random_weights.h): each rank generates its own
# shard in memory (nothing is written to disk; 70B BF16 is 141 GB). Two inits (model/random_model.h):
#   flat   (ferry gen's): every matrix std 0.02. At dim 4096 each matmul has a gain of ~1.3, the blocks swamp the
#          embedding and a change of f32 summation order grows ~10x over 32 layers into Gaussian, nearly tied
#          logits (median top-2 gap ~0.15 sd): TP=1 vs TP=1 with another GEMM agreed on only 95.7% of argmaxes.
#   peaked (`:1:peaked`): fan-in scaled, GPT-2 residual scaling (a perturbation is not amplified), and a bigram
#          component in the output matrix: the top logit usually stands clear (median top-1 probability ~0.35,
#          token t+1 is the argmax at ~70% of positions, the context decides the rest), like a trained model's.
#
# correctness: Llama-3-8B shape BF16, `ferry score` teacher-forced logits of 3 prompts (768 positions) at --tp 1
#              and --tp 2, on the flat and on the peaked model. Reported for each: cosine (min, mean), argmax
#              agreement, agreement on the positions whose TP=1 top-2 margin exceeds 0.1 and 0.25 logits (a flip
#              there is not a near-tie), the rms of the logit difference. Peaked: also agreement on the positions
#              the context decides (argmax != t+1). Issue gate (cosine >= 0.999, argmax >= 99%) on the peaked
#              model; the flat model's figures are information (TP2_DIAG=1 adds TP=1 vs TP=1 --batch-invariant
#              and TP=2 peer vs NCCL on it).
# serve:       `ferry serve --tp 2` and `--tp 1` on the peaked 8B model: the same 6 completions (token-id
#              prompts, temperature 0, 64 tokens, one at a time) to each; matches / total (issue 5 item 3).
# mpirun:      `mpirun -np 2 ... ferry bench --device cuda` (ranks from OMPI_COMM_WORLD_*, GPU = local rank,
#              rendezvous on FERRY_TP_ADDR's default) against the launcher's `--tp 2`, same options; each GPU's
#              peak memory during each run (both GPUs must hold a shard).
# serve70b:    `ferry serve --tp 2 -m random:llama3-70b:bf16` under serve_bench: 1 client (batch-1 ITL), then 64
#              clients x 1 request, 128 in / 64 out, streaming: throughput, TTFT, ITL, failures; load time.
# peer:        test_cuda PeerAllReduce.* (the one-shot peer all-reduce against a host sum).
# allreduce:   allreduce_bench (one all-reduce at 8 KiB..512 KiB; one decode step's collectives, 8B and 70B).
# bench:       `ferry bench -p 0 -n 128` batch-1 generation at --tp 1 and --tp 2 (NCCL and peer all-reduce).
# 70b:         Llama-3-70B shape BF16 at --tp 2, file-less: tg128 (issue: >= 45 tok/s).
# protocol:    the peer all-reduce's protocols in one call (FERRY_CUDA_TUNE=peer=lamport / flags / lamport /
#              flags, 8B BF16 tg128 at --tp 2), TP=1 on each GPU alone (is one of them slower?), then one run of
#              each protocol with FERRY_CUDA_STAMPS=1: every rank's per-call phase medians (peer_all_reduce.h).
# trace:       CUPTI kernel timelines (bench/trace, libferry_kernel_trace.so) of 8B BF16 batch-1 generation at --tp 1
#              and --tp 2 (peer all-reduce), one file per process (FERRY_KERNEL_TRACE's %p), each summarized by
#              trace_summary.py: a layer slot by slot, so the kernels whose share does not halve at TP=2 show.
# Every ferry run is bounded (`timeout`); its exit status and wall time are listed, and the runs whose teardown
# needed the 10 s bound (nccl_communicator.cpp) are named. A stage that would not fit TP_BUDGET (default 540 s)
# is skipped and says so. The summary table is printed last; logs under $OUT.
set -uo pipefail
stages=("$@"); [ ${#stages[@]} -eq 0 ] && stages=(all)
repo="$(cd "$(dirname "$0")/../.." && pwd)"
C="${FERRY_CARRY:-$repo/.carry}"
if [ -f "$C/bins.tar.xz" ]; then  # pack.sh compresses the binaries to fit a call
  mkdir -p /tmp/ferry-bin && tar xJf "$C/bins.tar.xz" -C /tmp/ferry-bin && C=/tmp/ferry-bin
fi
T_RUN="${TP_RUN_TIMEOUT:-150}"  # seconds any one 8B ferry run may take (a first run may hang: bound it)
T_70B="${TP_70B_TIMEOUT:-300}"  # the 70B server: load (~100-170 s) + two serve_bench runs
BUDGET="${TP_BUDGET:-540}"      # a stage starts only if its estimate fits in what is left of this
export FERRY_TP_TIMEOUT="${FERRY_TP_TIMEOUT:-90}"
OUT="${OUT:-/tmp/ferry-out}"
W="${TP_WORK:-/tmp/ferry-tp}"
mkdir -p "$OUT" "$W"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$C:$NCCL_LIB:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export FERRY_SOURCE_DIR="$repo"
PY="${TP_PY:-/opt/torch/.venv/bin/python}"; [ -x "$PY" ] || PY=python3
summary="$OUT/tp_summary.txt"; : > "$summary"
exits="$OUT/tp_exits.txt"; : > "$exits"
row() { printf '%-50s %s\n' "$1" "$2" | tee -a "$summary"; }
on() {
  local s
  for s in "${stages[@]}"; do
    [ "$s" = "$1" ] || [ "$s" = everything ] && return 0
    [ "$s" = all ] && case "$1" in correctness | serve | mpirun | serve70b) return 0 ;; esac
  done
  return 1
}
t0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - t0))); }
fits() {  # fits STAGE ESTIMATE_S: true if the stage may start
  if [ "$(left)" -lt "$2" ]; then row "$1" "skipped: ~$2 s needed, $(left) s of TP_BUDGET=$BUDGET left"; return 1; fi
}
# run NAME TIMEOUT CMD...: runs CMD bounded, output to $OUT/NAME.log; notes its exit status and wall time.
run() {
  local name=$1 limit=$2; shift 2
  local s rc
  s=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s ))s" >> "$exits"
  return $rc
}
# GPU memory sampler: gpu_watch_start NAME ... gpu_watch_stop -> "GPU0 max MiB, GPU1 max MiB"
gpu_watch_start() {
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$W/gpu_$1.csv" 2>/dev/null &
  gpu_watch=$!
}
gpu_watch_stop() {
  kill "$gpu_watch" 2>/dev/null; wait "$gpu_watch" 2>/dev/null
  awk -F', *' '{ if ($2 > m[$1]) m[$1] = $2; if ($1 > n) n = $1 } END { for (g = 0; g <= n; g++) printf "GPU%s %s MiB  ", g, m[g] }' "$W/gpu_$1.csv"
}
wait_health() {  # wait_health PORT PID SECONDS: true once /health answers; false if the server died or timed out
  local deadline=$(($(date +%s) + $3))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    curl -sf "http://127.0.0.1:$1/health" > /dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
# start_server NAME PORT LIMIT [ferry serve options...]: sets $server (the timeout's pid); stop_server NAME
start_server() {
  local name=$1 port=$2 limit=$3; shift 3
  server_t0=$(date +%s)
  timeout -k 10 "$limit" "$F" serve --device cuda --port "$port" "$@" > "$OUT/$name.log" 2>&1 &
  server=$!
}
stop_server() {  # SIGTERM (graceful), then the exit status and wall time into the exits list
  kill -TERM "$server" 2>/dev/null  # timeout forwards it to ferry serve
  wait "$server"; local rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - server_t0 ))s" >> "$exits"
}

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee -a "$summary"
missing=$(ldd "$C/ferry" | grep "not found" || true); [ -n "$missing" ] && row "missing libraries" "$missing"
F="$C/ferry"
M8="random:llama3-8b:bf16"
M8P="random:llama3-8b:bf16:1:peaked"

bench_tg() {  # bench_tg TP NAME [ferry bench options...] -> the tg line and the collectives line
  local tp=$1 name=$2; shift 2
  run "$name" "$T_RUN" "$F" bench --device cuda --tp "$tp" -p 0 -n 128 "$@" || echo "FAILED (rc $?, $name.log)"
  grep -E "\| +tg ?128" "$OUT/$name.log" | head -1 | awk -F'|' '{print $8}' | tr -s ' '
  grep -E "^tensor-parallel tg" "$OUT/$name.log" | head -1 | sed -E 's/: [0-9.]+ us per decode step.*//'
}

if on correctness && fits correctness 150; then
  "$PY" - "$W/prompts.json" <<'PYEOF'
import json, random, sys
random.seed(5)
prompts = [[random.randrange(256, 128000) for _ in range(n)] for n in (128, 256, 384)]
json.dump({"prompts": prompts}, open(sys.argv[1], "w"))
PYEOF
  score() {  # score NAME MODEL TP [env/options...]
    local name=$1 model=$2 tp=$3; shift 3
    run "score_$name" "$T_RUN" env "$@" "$F" score -m "$model" --device cuda --tp "$tp" --tokens "$W/prompts.json" \
      -o "$W/logits_$name.bin" || row "score $name" "FAILED rc $? (score_$name.log: $(tail -1 "$OUT/score_$name.log"))"
  }
  score flat_tp1 "$M8" 1
  score flat_tp2 "$M8" 2
  score peaked_tp1 "$M8P" 1
  score peaked_tp2 "$M8P" 2
  if [ "${TP2_DIAG:-0}" = 1 ]; then
    score flat_tp1_bi "$M8" 1 FERRY_TP_ALLREDUCE=auto --batch-invariant
    score flat_tp2_nccl "$M8" 2 FERRY_TP_ALLREDUCE=nccl
  fi
  cmp_logits() {  # cmp_logits LABEL B A GATE(1: issue thresholds) BIGRAM(1: report the t+1 positions); A = reference
    [ -f "$W/logits_$2.bin" ] && [ -f "$W/logits_$3.bin" ] || { row "$1" "no logits (a score run failed)"; return; }
    res=$("$PY" - "$W/logits_$2.bin" "$W/logits_$3.bin" "$4" "$5" "$W/prompts.json" <<'PYEOF'
import json, sys, numpy as np
V = 128256
b = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, V).astype(np.float64)
a = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, V).astype(np.float64)  # reference (TP=1)
cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
agree = a.argmax(1) == b.argmax(1)
top2 = np.sort(np.partition(a, V - 2, axis=1)[:, -2:], axis=1)
margin = top2[:, 1] - top2[:, 0]  # the reference's top-2 margin, in logits
def sub(mask):
    return f"{100 * agree[mask].mean():.2f}% of {mask.sum()}" if mask.any() else "none"
ok = cos.min() >= 0.999 and agree.mean() >= 0.99
tag = ("PASS" if ok else "FAIL") if sys.argv[3] == "1" else "info"
out = (f"{tag}: cos min {cos.min():.6f} mean {cos.mean():.6f}, argmax {100 * agree.mean():.2f}% of {len(a)}; "
       f"margin>0.1: {sub(margin > 0.1)}, >0.25: {sub(margin > 0.25)}; rms d {np.sqrt(((a - b) ** 2).mean()):.3g} "
       f"(logit sd {a.std(1).mean():.2f}, median margin {np.median(margin):.3f})")
if sys.argv[4] == "1":
    ids = np.concatenate([np.array(p) for p in json.load(open(sys.argv[5]))["prompts"]])
    ctx = a.argmax(1) != (ids + 1) % V
    out += f"; argmax=t+1 at {100 * (~ctx).mean():.1f}%, context-decided positions: {sub(ctx)}"
if np.array_equal(a, b):
    out += ", identical"
print(out)
PYEOF
)
    row "$1" "$res"
  }
  cmp_logits "8B peaked TP=2 vs TP=1 (issue gate)" peaked_tp2 peaked_tp1 1 1
  cmp_logits "8B flat TP=2 vs TP=1 (near-tied logits)" flat_tp2 flat_tp1 0 0
  if [ "${TP2_DIAG:-0}" = 1 ]; then
    cmp_logits "8B flat TP=1 --batch-invariant vs TP=1" flat_tp1_bi flat_tp1 0 0
    cmp_logits "8B flat TP=2 nccl vs TP=2 auto (identical?)" flat_tp2_nccl flat_tp2 0 0
  fi
fi

if on serve && fits serve 120; then
  "$PY" - "$W/serve_prompts.json" <<'PYEOF'
import json, random, sys
random.seed(11)
json.dump([[random.randrange(256, 128000) for _ in range(n)] for n in (8, 16, 32, 48, 64, 100)], open(sys.argv[1], "w"))
PYEOF
  complete() {  # complete PORT OUT.json: each prompt, one at a time, temperature 0, 64 tokens
    "$PY" - "$1" "$W/serve_prompts.json" "$2" <<'PYEOF'
import json, sys, urllib.request
port, prompts, out = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
texts = []
for p in prompts:
    body = json.dumps({"prompt": p, "max_tokens": 64, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        r = json.load(urllib.request.urlopen(req, timeout=60))
        texts.append(r["choices"][0]["text"])
    except Exception as e:  # a failed request is a mismatch, with its reason
        texts.append(f"<error: {e}>")
json.dump(texts, open(out, "w"))
PYEOF
  }
  for tp in 2 1; do
    start_server "serve_tp$tp" 18181 "$T_RUN" -m "$M8P" --tp $tp --ctx 1024 --max-running 8
    if wait_health 18181 "$server" 120; then
      complete 18181 "$W/texts_tp$tp.json"
    else
      row "serve --tp $tp (peaked 8B)" "server not up: $(tail -2 "$OUT/serve_tp$tp.log" | tr '\n' ' ')"
    fi
    stop_server "serve_tp$tp"
  done
  res=$("$PY" - "$W/texts_tp2.json" "$W/texts_tp1.json" <<'PYEOF'
import json, sys
try:
    b, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
except Exception as e:
    print(f"no texts to compare ({e})"); sys.exit()
same = sum(x == y for x, y in zip(a, b))
diffs = [f"#{i}: first difference at char {next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))}"
         for i, (x, y) in enumerate(zip(a, b)) if x != y]
errs = sum(t.startswith("<error") for t in a + b)
print(f"{'PASS' if same == len(a) and errs == 0 else 'FAIL'}: {same} / {len(a)} texts identical"
      + (f"; {'; '.join(diffs)}" if diffs else "") + (f"; {errs} failed requests" if errs else "")
      + f"; {sum(len(t) for t in a)} chars at TP=1")
PYEOF
)
  row "serve TP=2 vs TP=1, temp 0, 64 tok (peaked 8B)" "$res"
fi

if on mpirun && fits mpirun 120; then
  mb() {  # mb NAME LAUNCHER... -- OPTIONS...: ferry bench -p 16 -n 32 OPTIONS under LAUNCHER (or none), with the
          # GPU memory sampler; prints tg32 and pp16 t/s and each GPU's peak memory
    local name=$1 pre=() ; shift
    while [ "$1" != -- ]; do pre+=("$1"); shift; done; shift
    gpu_watch_start "$name"
    run "$name" "$T_RUN" "${pre[@]}" "$F" bench --device cuda -m "$M8" -p 16 -n 32 -r 3 "$@" || echo -n "FAILED rc $? "
    local mem; mem=$(gpu_watch_stop "$name")
    echo -n "tg32 $(grep -E "\| +tg ?32" "$OUT/$name.log" | head -1 | awk -F'|' '{print $8}' | tr -s ' ')"
    echo -n ", pp16 $(grep -E "\| +pp ?16" "$OUT/$name.log" | head -1 | awk -F'|' '{print $8}' | tr -s ' ')"
    echo "; peak memory: $mem"
  }
  row "8B flat --tp 2 (launcher) -p 16 -n 32" "$(mb bench_launcher_tp2 -- --tp 2 2>&1)"
  if command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # --bind-to none: Open MPI binds each of 2 ranks to one core by default (the weight generation and the host
    # side would run on one core). -x: the variables a rank needs (local ranks inherit them anyway).
    row "8B flat mpirun -np 2 -p 16 -n 32" "$(mb bench_mpirun_np2 mpirun -np 2 --allow-run-as-root --bind-to none \
      -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x FERRY_TP_TIMEOUT -- 2>&1)"
    grep -iE "error|mpirun|rank" "$OUT/bench_mpirun_np2.log" | grep -v "^|" | head -4
  else
    row "8B flat mpirun -np 2" "skipped: no mpirun on this machine"
  fi
fi

if on serve70b && fits serve70b 200; then
  start_server serve70b 18182 "$T_70B" -m random:llama3-70b:bf16 --tp 2 --ctx 1024 --max-running 64 --max-waiting 256
  if wait_health 18182 "$server" "$((T_70B - 60))"; then
    row "70B serve --tp 2: load (file-less)" "$(( $(date +%s) - server_t0 )) s to /health"
    for n in 1 64; do
      timeout 120 "$C/serve_bench" --url http://127.0.0.1:18182 --clients $n --requests $n --input-len 128 \
        --output-len 64 --stream --timeout 100 --json "$OUT/serve70b_$n.json" > "$OUT/serve70b_bench$n.log" 2>&1
      echo "serve_bench_70b_$n rc=$?" >> "$exits"
      row "70B serve --tp 2, $n clients, 128/64" "$(grep -vE '^serve_bench:' "$OUT/serve70b_bench$n.log" | tr -s ' ' | tr '\n' ' ' | tail -c 420)"
    done
    curl -s http://127.0.0.1:18182/metrics | grep -E "^ferry_" | grep -vE "_bucket" > "$OUT/serve70b_metrics.txt"
  else
    row "70B serve --tp 2" "server not up after $(( $(date +%s) - server_t0 )) s: $(tail -2 "$OUT/serve70b.log" | tr '\n' ' ')"
  fi
  stop_server serve70b
fi

if on peer && fits peer 60; then
  run peer_test 180 "$C/test_cuda" --gtest_filter='PeerAllReduce.*'
  row "peer all-reduce test (test_cuda PeerAllReduce.*)" "$(grep -E '^\[  (PASSED|FAILED) ' "$OUT/peer_test.log" | tr '\n' ' ') $(grep -c '^\[  FAILED' "$OUT/peer_test.log") failed lines"
fi

if on allreduce && fits allreduce 60; then
  for shape in "32 4096 8B" "80 8192 70B"; do
    set -- $shape
    run "allreduce_$3" 150 "$C/allreduce_bench" --layers "$1" --dim "$2" --vocab 128256 --iters 100 --timeout 60 ||
      row "allreduce_bench $3" "FAILED rc $?: $(tail -2 "$OUT/allreduce_$3.log" | tr '\n' ' ')"
    grep -E "per step" "$OUT/allreduce_$3.log" | while read -r l; do row "allreduce_bench $3 step" "$(echo "$l" | sed -E 's/^allreduce_bench: //')"; done
  done
fi

if on bench && fits bench 150; then
  row "8B bf16 tg128 --tp 1" "$(FERRY_TP_ALLREDUCE=auto bench_tg 1 bench_tp1 -m "$M8" -r 3 | tr '\n' ' ')"
  [ "${TP_BENCH_NCCL:-1}" = 1 ] &&  # TP_BENCH_NCCL=0 skips the NCCL all-reduce run (short calls)
    row "8B bf16 tg128 --tp 2 nccl" "$(FERRY_TP_ALLREDUCE=nccl bench_tg 2 bench_tp2_nccl -m "$M8" -r 3 | tr '\n' ' ')"
  row "8B bf16 tg128 --tp 2 peer" "$(FERRY_TP_ALLREDUCE=peer bench_tg 2 bench_tp2_peer -m "$M8" -r 3 | tr '\n' ' ')"
fi

if on 70b && fits 70b 200; then
  s=$(date +%s)
  r=$(FERRY_TP_ALLREDUCE=peer T_RUN=$T_70B bench_tg 2 bench_70b_tp2 --random llama3-70b --type bf16 -r 2 | tr '\n' ' ')
  row "70B bf16 file-less tg128 --tp 2 peer" "$r (wall $(( $(date +%s) - s )) s incl. load and 3 x 128 tokens)"
fi

# tp2_ab NAME VAR VALUE...: 8B BF16 tg128 at --tp 2 (peer all-reduce) with VAR at each VALUE in turn, then one run
# per distinct value with FERRY_CUDA_STAMPS=1: each rank's all-reduce phase medians.
tp2_ab() {
  local name=$1 var=$2 i=0 v; shift 2
  for v in "$@"; do
    i=$((i + 1))
    row "8B bf16 tg128 --tp 2 peer, $var=$v" \
      "$(export "$var=$v" FERRY_TP_ALLREDUCE=peer; bench_tg 2 "${name}_${v}_$i" -m "$M8" -r 3 | tr '\n' ' ')"
  done
  for v in $(printf '%s\n' "$@" | sort -u); do
    (export "$var=$v" FERRY_TP_ALLREDUCE=peer FERRY_CUDA_STAMPS=1; bench_tg 2 "${name}_stamps_$v" -m "$M8" -r 1) > /dev/null
    grep -E "^peer all-reduce rank" "$OUT/${name}_stamps_$v.log" | while read -r l; do row "phases ($var=$v)" "$l"; done
  done
}

if on protocol && fits protocol 240; then
  row "8B bf16 tg128 --tp 1, GPU 0" "$(bench_tg 1 proto_tp1_gpu0 -m "$M8" -r 3 | tr '\n' ' ')"
  row "8B bf16 tg128 --tp 1, GPU 1" "$(CUDA_VISIBLE_DEVICES=1 bench_tg 1 proto_tp1_gpu1 -m "$M8" -r 3 | tr '\n' ' ')"
  tp2_ab proto FERRY_CUDA_TUNE peer=lamport peer=flags peer=lamport peer=flags
fi


if on trace && fits trace 120; then
  for tp in 1 2; do
    rm -f "$W"/trace-tp$tp-*.csv
    run trace_tp$tp "$T_RUN" env FERRY_TP_ALLREDUCE=peer CUDA_INJECTION64_PATH="$C/libferry_kernel_trace.so" \
      FERRY_KERNEL_TRACE="$W/trace-tp$tp-%p.csv" "$F" bench --device cuda --tp $tp -m "$M8" -p 0 -n 64 -r 1 ||
      row "trace --tp $tp" "FAILED rc $? ($OUT/trace_tp$tp.log)"
    row "trace --tp $tp tg64 (traced)" "$(grep -E '\| +tg ?64' "$OUT/trace_tp$tp.log" | head -1 | awk -F'|' '{print $8}' | tr -s ' ')"
    for f in "$W"/trace-tp$tp-*.csv; do
      [ -f "$f" ] || continue
      python3 "$repo/scripts/device/trace_summary.py" "$f" --show 40 > "$OUT/$(basename "$f" .csv).txt" 2>&1
      sed -n '1p;/^One layer/,/layer total/p' "$OUT/$(basename "$f" .csv).txt" |
        sed "s/^/[--tp $tp, $(basename "$f" .csv)] /" | tee -a "$summary"
    done
  done
fi

# Every TP run printed its results and then hung in teardown until the 10 s bound (nccl_communicator.cpp) ended
# it; rank 0 now drops its graphs before the communicator. Which runs still needed the bound, and every exit.
row "runs that needed the teardown bound" "$(grep -l "teardown still waiting" "$OUT"/*.log 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
row "exit status (rc, wall) per run" "$(tr '\n' ' ' < "$exits")"
row "tp_check wall time" "$(( $(date +%s) - t0 )) s (stages: ${stages[*]})"
echo "==== summary ===="; cat "$summary"
