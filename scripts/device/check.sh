#!/usr/bin/env bash
# The one device script: runs on the lent H200 machine over binaries built on the development machine.
#
# Here (dev machine, nvcc present):   scripts/device/pack.sh          # builds and fills .carry/
# Device call (carry [".carry"]):     bash scripts/device/check.sh [tests|kernels|correctness|bench|serve|all]
#
# tests:   GPU op tests, CUDA-graph test, end-to-end logits checks (CPU and CUDA) against the transformers
#          goldens, compute-sanitizer memcheck on the op tests;
# kernels: the kernel harnesses (matvec vs cuBLAS and % of the 4.30 TB/s roofline; attention and GEMM; fused
#          ops, sampling, fused projections; the cost of a kernel boundary and of a grid barrier, sync_bench);
# memcheck: compute-sanitizer over the op tests (also part of `tests` unless FERRY_QUICK=1; FERRY_MEMCHECK_FILTER
#          narrows it to the kernels that changed);
# correctness: reference/gpu_check.py: Llama-3-8B- and Qwen3-8B-shaped random bf16 models written by
#          transformers (safetensors); `ferry score --device cuda` logits vs transformers' at every position of
#          3 prompts (cosine >= 0.999, mean KL <= 1e-3; float32 transformers reported alongside); then the
#          Qwen3-30B-A3B shape (Qwen3MoeForCausalLM) at FERRY_MOE_CHECK_LAYERS layers (6; 0 skips it);
# bench:   `ferry bench --device cuda -p 512 -n 128` on Llama-3-8B-shaped random models made on the machine
#          with `ferry gen` (BF16, Q8_0, Q4_0; FERRY_BENCH_TYPES picks a subset); on BF16 also generation at
#          depth, `-p 0 -n 128 -d 8192,32768` (tg128 @ d8192, d32768; FERRY_BENCH_DEPTHS sets the list, 0 skips);
# ab:      the same benchmark alternating this build and the base build (pack.sh's FERRY_PACK_BASE), run only when
#          named;
# moe:     the expert-FFN harness and `ferry bench` on mixture-of-experts shapes (FERRY_MOE_MODELS);
# serve:   `ferry serve --device cuda` on the BF16 model under serve_bench (64 and 256 streaming clients), the SM
#          clock and board power sampled during each run;
# placement: kv_placement_bench (decode attention with the KV blocks compact or spread over a serving-sized cache);
# trace:   a CUPTI kernel timeline of graph-replayed decode (Q4_0, Q8_0, BF16; FERRY_TRACE_TYPES): each kernel's
#          share of the step's critical path (bench/trace/kernel_trace.cpp, scripts/device/trace_summary.py), and
#          the phases inside the decode attention and the matvecs (FERRY_CUDA_STAMPS=1);
# profile: per-op GPU time tables (FERRY_CUDA_PROFILE=1) of batch-1 decode (BF16, Q4_0) and of a serve run.
# ncu:     Nsight Compute on one kernel of batch-1 decode (FERRY_NCU_KERNEL; only when named): duration alone and
#          the warp-state stall reasons.
# A summary table is printed last; full logs go under $OUT (tests.log, kernels.log, correctness.log,
# bench.log, summary.txt).
set -uo pipefail

what="${1:-all}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
C="$repo/.carry"
if [ -f "$C/bins.tar.xz" ]; then  # pack.sh compresses the binaries to fit a call
  mkdir -p /tmp/ferry-bin && tar xJf "$C/bins.tar.xz" -C /tmp/ferry-bin && C=/tmp/ferry-bin
fi
OUT="${OUT:-/tmp/ferry-out}"
mkdir -p "$OUT"
# NCCL (ferry links it for tensor parallelism) is the machine's torch-venv copy.
export LD_LIBRARY_PATH="$C:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# The tests find their data here (they were built in another folder).
export FERRY_SOURCE_DIR="$repo"
has() { [ "$what" = all ] || [[ ",$what," == *",$1,"* ]]; }  # stages: a comma-separated list, or all
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
t_start=$SECONDS
stage_done() { note "[$1 stage: $((SECONDS - t_start)) s since start]"; }
# The Llama-3-8B-shaped random model of weight type $1, made once per machine with `ferry gen` (its log to $2).
# fp8, fp8-block, fp8-tensor: a Hugging Face FP8 folder instead. $3: another `ferry gen` shape (default llama3-8b).
model_of() {
  local shape="${3:-llama3-8b}" m
  case "$1" in
    fp8*) m="/tmp/$shape-$1"; [ -d "$m" ] || "$C/ferry" gen --shape "$shape" --type "$1" -o "$m" -t 16 >> "$2" 2>&1 ;;
    *) m="/tmp/$shape-$1.gguf"; [ -f "$m" ] || "$C/ferry" gen --shape "$shape" --type "$1" -o "$m" -t 16 >> "$2" 2>&1 ;;
  esac
  echo "$m"
}
gtest_result() { grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$1" | tr '\n' ' '; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$summary"
missing=$(ldd "$C/ferry" | grep "not found" || true)
[ -n "$missing" ] && note "missing libraries: $missing"

if has tests; then
  log="$OUT/tests.log"
  : > "$log"
  # FERRY_TEST_FILTER: a gtest filter for test_cuda (the tests of the kernels that changed); test_e2e then skips.
  # FERRY_TEST_TIMEOUT: seconds for test_cuda (400 by default, so memcheck and the rest of a call still fit).
  timeout "${FERRY_TEST_TIMEOUT:-400}" "$C/test_cuda" --gtest_filter="${FERRY_TEST_FILTER:-*}" > "$OUT/t.log" 2>&1; rc=$?
  cat "$OUT/t.log" >> "$log"
  note "test_cuda${FERRY_TEST_FILTER:+ ($FERRY_TEST_FILTER)}: $(gtest_result "$OUT/t.log") (exit status $rc)"
  [ "$rc" = 0 ] || tail -5 "$OUT/t.log"
  grep -E "default kernels: alone" "$OUT/t.log" | tee -a "$summary"
  grep -E "^\[  FAILED|Failure" "$OUT/t.log" | head -20
  if [ -z "${FERRY_TEST_FILTER:-}" ]; then
    "$C/test_e2e" > "$OUT/t.log" 2>&1; cat "$OUT/t.log" >> "$log"
    note "test_e2e (cpu): $(gtest_result "$OUT/t.log")"
  fi
  rm -f "$OUT/t.log"
  stage_done tests
fi
if has memcheck || { has tests && [ "${FERRY_QUICK:-0}" != 1 ]; }; then
  log="$OUT/tests.log"
  timeout "${FERRY_MEMCHECK_TIMEOUT:-400}" compute-sanitizer --tool memcheck "$C/test_cuda" \
    --gtest_filter="${FERRY_MEMCHECK_FILTER:-CudaOps.*:CudaAttention.*:CudaMatmul.*:CudaMatvec.*:CudaStepGraph.*:CudaQkvEpilogue.*:-CudaOps.OutOfMemory*}" > "$OUT/t.log" 2>&1
  cat "$OUT/t.log" >> "$log"
  note "memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/t.log" | tail -1) $(gtest_result "$OUT/t.log")"
  rm -f "$OUT/t.log"
  stage_done memcheck
fi

if has kernels; then
  log="$OUT/kernels.log"
  quick=(); [ "${FERRY_QUICK:-0}" = 1 ] && quick=(--quick)  # quick: M = 1 only
  timeout 300 "$C/matvec_bench" "${quick[@]}" --json "$OUT/matvec.json" > "$log" 2>&1
  [ "${FERRY_QUICK:-0}" = 1 ] || timeout 300 "$C/prefill_kernels_bench" --json "$OUT/prefill.json" >> "$log" 2>&1
  # FERRY_KERNEL_BENCHES picks the other harnesses (quick runs: the ones whose kernels changed).
  for b in ${FERRY_KERNEL_BENCHES:-fused_ops_bench sampling_bench attention_bench fusion_bench skinny_gemm_bench sync_bench}; do
    args=(); [ "$b" = skinny_gemm_bench ] && args=("${quick[@]}")
    [ "$b" = attention_bench ] && [ "${FERRY_QUICK:-0}" = 1 ] && args=(decode)
    [ -x "$C/$b" ] && timeout 120 "$C/$b" "${args[@]}" >> "$log" 2>&1
  done
  note "kernels: see kernels.log ($(wc -l < "$log") lines)"
  stage_done kernels
fi

if has placement; then
  # Does a decode step's attention care where its KV blocks sit in a serving-sized cache (bench/kernels/
  # kv_placement_bench.cpp)? 64 sequences at 512..640 positions over a 32,768-block pool per layer array.
  log="$OUT/placement.log"
  timeout 200 "$C/kv_placement_bench" ${FERRY_PLACEMENT_ARGS:-} > "$log" 2>&1
  note "kv placement (exit status $?):"; tee -a "$summary" < "$log"
  stage_done placement
fi

if has correctness; then
  log="$OUT/correctness.log"
  py=python3
  "$py" -c "import torch, transformers" 2>/dev/null || py=/opt/torch/.venv/bin/python
  timeout 480 "$py" "$repo/reference/gpu_check.py" --ferry "$C/ferry" --fp32 > "$log" 2>&1
  rc=$?
  note "correctness (ferry cuda vs transformers bf16): $([ "$rc" = 0 ] && echo PASS || echo "FAIL (status $rc)")"
  sed -n '/^== summary/,$p' "$log" | tee -a "$summary"
  [ "$rc" = 0 ] || grep -E "error|Error|failed" "$log" | head -5
  moe_layers="${FERRY_MOE_CHECK_LAYERS:-6}"
  if [ "$moe_layers" != 0 ]; then
    timeout 300 "$py" "$repo/reference/gpu_check.py" --ferry "$C/ferry" --models qwen3moe --layers "$moe_layers" --fp32 \
      > "$OUT/correctness-moe.log" 2>&1
    rc=$?
    cat "$OUT/correctness-moe.log" >> "$log"
    note "correctness, Qwen3-30B-A3B shape at $moe_layers layers: $([ "$rc" = 0 ] && echo PASS || echo "FAIL (status $rc)")"
    sed -n '/^== summary/,$p' "$OUT/correctness-moe.log" | tee -a "$summary"
    rm -f "$OUT/correctness-moe.log"
  fi
  stage_done correctness
fi

if has bench; then
  log="$OUT/bench.log"
  : > "$log"
  for t in ${FERRY_BENCH_TYPES:-bf16 q8_0 q4_0}; do
    m="$(model_of "$t" "$log")"
    # BF16 and Q4_0 runs on roofline charts with the kernel harnesses' points when they ran first (Q8_0's
    # chart is left out: a device call brings back at most 8 files).
    plot=()
    if [ "$t" != q8_0 ]; then
      plot=(--plot "$OUT/roofline-$t.svg")
      for k in "$OUT/matvec.json" "$OUT/prefill.json"; do [ -f "$k" ] && plot+=(--kernels "$k"); done
    fi
    "$C/ferry" bench --device cuda -m "$m" -p 512 -n 128 -r 3 "${plot[@]}" > "$OUT/b.log" 2>&1
    cat "$OUT/b.log" >> "$log"
    note "$(grep -E 'pp512|tg128' "$OUT/b.log" | sed "s/^/[$t] /")"
    grep -i error "$OUT/b.log" | head -3
    # The other matvec kernels the tune can force (FERRY_CUDA_TUNE=matvec=...) on the same model, generation only.
    for v in ${FERRY_MATVEC_KERNELS:-tiled}; do
      FERRY_CUDA_TUNE=matvec=$v "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 > "$OUT/b.log" 2>&1
      cat "$OUT/b.log" >> "$log"
      note "$(grep -E 'tg128|rror' "$OUT/b.log" | head -2 | sed "s/^/[$t, matvec=$v] /")"
    done
    # FERRY_BENCH_AB: an environment assignment (e.g. FERRY_CUDA_TUNE=ring=0) for an in-call A/B of
    # generation: tg128 with it, then without it, then with it again (B A B beside the run above).
    if [ -n "${FERRY_BENCH_AB:-}" ]; then
      for ab in on off on; do
        if [ $ab = on ]; then
          env ${FERRY_BENCH_AB} "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 > "$OUT/b.log" 2>&1
        else
          "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 > "$OUT/b.log" 2>&1
        fi
        cat "$OUT/b.log" >> "$log"
        note "$(grep -E 'tg128|rror' "$OUT/b.log" | head -2 | sed "s/^/[$t, $([ $ab = on ] && echo "${FERRY_BENCH_AB}" || echo default)] /")"
      done
    fi
    # FERRY_BENCH_BASE=1: an in-call A/B of generation across two builds, this one and the base build that
    # pack.sh packed beside it (FERRY_PACK_BASE: e.g. the previous head's ferry): new, base, new.
    if [ "${FERRY_BENCH_BASE:-0}" = 1 ] && [ -x "$C/ferry-base" ]; then
      for ab in new base new; do
        bin="$C/ferry"
        [ $ab = base ] && bin="$C/ferry-base"
        "$bin" bench --device cuda -m "$m" -p 0 -n 128 -r 3 > "$OUT/b.log" 2>&1
        cat "$OUT/b.log" >> "$log"
        note "$(grep -E 'tg128|rror' "$OUT/b.log" | head -2 | sed "s/^/[$t, $ab build] /")"
      done
    fi
    # Generation after that many tokens already in the KV cache (decode attention at depth; issue 25).
    if [ "$t" = bf16 ] && [ "${FERRY_BENCH_DEPTHS:-8192,32768}" != 0 ]; then
      "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 -d "${FERRY_BENCH_DEPTHS:-8192,32768}" > "$OUT/b.log" 2>&1
      cat "$OUT/b.log" >> "$log"
      note "$(grep -E 'tg128 @|rror' "$OUT/b.log" | sed "s/^/[$t, depth] /")"
    fi
    if [ "$t" = bf16 ] && [ "${FERRY_BENCH_BATCH_INVARIANT:-1}" = 1 ]; then  # the cost of --batch-invariant (one GEMM kernel for every token count)
      "$C/ferry" bench --device cuda -m "$m" -p 512 -n 128 -r 3 --batch-invariant > "$OUT/b.log" 2>&1
      cat "$OUT/b.log" >> "$log"
      note "$(grep -E 'pp512|tg128|rror' "$OUT/b.log" | sed "s/^/[$t, --batch-invariant] /")"
    fi
    [ "$t" = bf16 ] || has profile || rm -rf "$m"  # the BF16 model stays for the serve stage
    rm -f "$OUT/b.log"
  done
  stage_done bench
fi
if has ab && [ -x "$C/ferry-base" ]; then
  # A/B across builds in one call: `ferry bench -p 512 -n 128` with this build and with the base build pack.sh
  # packed beside it (FERRY_PACK_BASE), alternating new, base, new, base per type (FERRY_BENCH_TYPES).
  log="$OUT/ab.log"
  : > "$log"
  for t in ${FERRY_BENCH_TYPES:-bf16 q8_0 q4_0}; do
    m="$(model_of "$t" "$log")"
    for ab in new base new base; do
      bin="$C/ferry"
      [ $ab = base ] && bin="$C/ferry-base"
      "$bin" bench --device cuda -m "$m" -p 512 -n 128 -r 3 > "$OUT/b.log" 2>&1
      cat "$OUT/b.log" >> "$log"
      note "$(grep -E 'pp512|tg128|rror' "$OUT/b.log" | head -3 | sed "s/^/[$t, $ab build] /")"
    done
  done
  rm -f "$OUT/b.log"
  stage_done ab
fi

if has moe; then
  # Mixtures of experts: the expert-FFN harness (bench/kernels/moe_ffn_bench.cpp: % of 4.30 TB/s over the routed
  # experts' bytes), then `ferry bench` on `ferry gen` MoE shapes, FERRY_MOE_MODELS "shape:type ..." (default the
  # qwen3-moe-mini stand-in in Q4_0 and BF16).
  log="$OUT/moe.log"
  : > "$log"
  [ -x "$C/moe_ffn_bench" ] && timeout 120 "$C/moe_ffn_bench" ${FERRY_MOE_BENCH_ARGS:---quick} >> "$log" 2>&1
  for st in ${FERRY_MOE_MODELS:-qwen3-moe-mini:q4_0 qwen3-moe-mini:bf16}; do
    m="$(model_of "${st#*:}" "$log" "${st%%:*}")"
    "$C/ferry" bench --device cuda -m "$m" -p 512 -n 128 -r 3 > "$OUT/b.log" 2>&1
    cat "$OUT/b.log" >> "$log"
    note "$(grep -E 'pp512|tg128|rror' "$OUT/b.log" | head -3 | sed "s/^/[$st] /")"
    rm -rf "$m" "$OUT/b.log"
  done
  stage_done moe
fi

if has serve; then
  # Load benchmark: `ferry serve --device cuda` on the Llama-3-8B-shaped BF16 model, 512 in / 128 out,
  # 64 then 256 concurrent streaming clients (issue 4's figures), 10 requests each (FERRY_SERVE_PER_CLIENT; with 3,
  # a fifth of a 64-client run is start-up and drain with fewer clients active).
  # FERRY_SERVE_ARGS adds server options.
  log="$OUT/serve.log"
  : > "$log"
  m="/tmp/llama3-8b-bf16.gguf"
  [ -f "$m" ] || [ ! -f /tmp/ferry-tp/llama3-8b-bf16.gguf ] || ln -s /tmp/ferry-tp/llama3-8b-bf16.gguf "$m"
  [ -f "$m" ] || "$C/ferry" gen --shape llama3-8b --type bf16 -o "$m" -t 16 >> "$log" 2>&1
  port=18080
  # FERRY_SERVE_SWEEP: ';'-separated server option sets, one server run each (e.g. "--max-step-tokens 512;
  # --max-step-tokens 1024"); unset: one run.
  IFS=';' read -ra variants <<< "${FERRY_SERVE_SWEEP:-}"
  [ ${#variants[@]} -eq 0 ] && variants=("")
  # FERRY_SERVE_BINS: the binaries to serve with, one server each (e.g. "ferry ferry-base" for an A/B across builds).
  for bin in ${FERRY_SERVE_BINS:-ferry}; do
  for va in "${variants[@]}"; do
    FERRY_LOG=debug "$C/$bin" serve --device cuda -m "$m" --port $port --ctx 2048 --max-running 256 --max-waiting 2048 \
      ${FERRY_SERVE_ARGS:-} $va > "$OUT/server.log" 2>&1 &
    server=$!
    for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.5; done
    note "[serve $bin${va:+ $va}] $(grep -E 'step graphs recorded' "$OUT/server.log") GPU memory used $(nvidia-smi \
      --query-gpu=memory.used --format=csv,noheader | head -1)"
    seed=1  # each run on this server draws new prompts (a repeated run of one seed would hit the prefix cache)
    # FERRY_SERVE_EXTRAS: ';'-separated JSON objects merged into every request's body, one run each per client
    # count on this server ("none": as is), e.g. 'none;{"response_format":{"type":"regex","regex":"[a-z ]+"}}'
    # (structured output's cost).
    IFS=';' read -ra formats <<< "${FERRY_SERVE_EXTRAS:-none}"
    for n in ${FERRY_SERVE_CLIENTS:-64 256}; do
    for fmt in "${formats[@]}"; do
      fa=()
      [ "$fmt" = none ] || fa=(--extra-fields "$fmt")
      # SM clock and board power sampled every 250 ms during the run (is a GEMM-bound step throttled?).
      nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 250 \
        > "$OUT/clocks.csv" 2>/dev/null &
      sampler=$!
      timeout 200 "$C/serve_bench" --url "http://127.0.0.1:$port" --clients $n --requests $((n * ${FERRY_SERVE_PER_CLIENT:-10})) --seed $seed \
        --input-len 512 --output-len 128 --stream --timeout 180 --json "$OUT/serve$n.json" "${fa[@]}" > "$OUT/s.log" 2>&1
      kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
      seed=$((seed + 1))
      cat "$OUT/s.log" >> "$log"
      note "[serve $bin${va:+ $va}, $n clients, seed $((seed - 1)), 512/128${fa:+, $fmt}] $(tr '\n' ' ' < "$OUT/s.log" | tail -c 600)"
      note "[serve clocks, $n clients] $(awk -F', *' '$1 > 0 {n++; c += $1; p += $2; if ($1 < lo || lo == 0) lo = $1;
        if ($2 > hp) hp = $2; t = $3} END {if (n) printf "%d samples: SM clock mean %.0f MHz (min %d), " \
        "power mean %.0f W (max %.0f), temperature %d C", n, c / n, lo, p / n, hp, t}' "$OUT/clocks.csv")"
      rm -f "$OUT/clocks.csv"
    done
    done
    curl -s "http://127.0.0.1:$port/metrics" | grep -E "^ferry_" | grep -vE "_bucket" >> "$log"
    kill -TERM $server; wait $server; note "serve exit status: $?"
    tail -5 "$OUT/server.log" | tee -a "$log" | tee -a "$summary"
  done
  done
  rm -f "$OUT/s.log"
  stage_done serve
fi

if has profile; then
  # Where a decode step's time goes: FERRY_CUDA_PROFILE=1 times every op with events (graphs off) and prints a
  # table at exit; the graph-replayed tg figure of the same model is printed next to it (the difference is
  # launch gaps). Then the same under load: a short serve run (FERRY_PROFILE_CLIENTS clients, 512/128).
  log="$OUT/profile.log"
  : > "$log"
  for t in ${FERRY_PROFILE_TYPES:-bf16 q4_0}; do
    [ "$t" = none ] && continue  # FERRY_PROFILE_TYPES=none: only the serve profile
    m="$(model_of "$t" "$log")"
    "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 > "$OUT/b.log" 2>&1
    note "$(grep -E 'tg128|rror' "$OUT/b.log" | head -2 | sed "s/^/[$t, graphs] /")"
    FERRY_CUDA_PROFILE=1 "$C/ferry" bench --device cuda -m "$m" -p 0 -n 64 -r 1 > "$OUT/b.log" 2>&1
    { echo "== $t: ferry bench -p 0 -n 64 with FERRY_CUDA_PROFILE=1"; cat "$OUT/b.log"; } >> "$log"
    note "$(grep -E 'tg64|CUDA op profile' "$OUT/b.log" | sed "s/^/[$t, profiled] /")"
    grep -A12 "CUDA op profile" "$OUT/b.log" | tail -11 | tee -a "$summary"
    if [ "$t" = bf16 ]; then  # prefill: where pp512's time goes besides the GEMMs
      FERRY_CUDA_PROFILE=1 "$C/ferry" bench --device cuda -m "$m" -p 512 -n 0 -r 1 > "$OUT/b.log" 2>&1
      { echo "== $t: ferry bench -p 512 -n 0 with FERRY_CUDA_PROFILE=1"; cat "$OUT/b.log"; } >> "$log"
      note "$(grep -E 'pp512' "$OUT/b.log" | sed "s/^/[$t, profiled] /")"
      grep -A14 "CUDA op profile" "$OUT/b.log" | tail -13 | tee -a "$summary"
    fi
  done
  m="/tmp/llama3-8b-bf16.gguf"
  if [ -f "$m" ] && [ "${FERRY_PROFILE_SERVE:-1}" = 1 ]; then
    port=18081
    n=${FERRY_PROFILE_CLIENTS:-64}
    FERRY_CUDA_PROFILE=1 "$C/ferry" serve --device cuda -m "$m" --port $port --ctx 2048 --max-running 256 \
      --max-waiting 2048 ${FERRY_SERVE_ARGS:-} > "$OUT/ps.log" 2>&1 &
    server=$!
    for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.5; done
    timeout 200 "$C/serve_bench" --url "http://127.0.0.1:$port" --clients $n --requests $n --input-len 512 \
      --output-len 128 --stream --timeout 180 > "$OUT/s.log" 2>&1
    kill -TERM $server; wait $server
    { echo "== serve, $n clients, profiled (graphs off)"; cat "$OUT/s.log" "$OUT/ps.log"; } >> "$log"
    note "[serve profiled, $n clients] $(grep -E 'tok/s|throughput' "$OUT/s.log" | head -2 | tr '\n' ' ')"
    grep -A16 "CUDA op profile" "$OUT/ps.log" | tee -a "$summary"
    rm -f "$OUT/s.log" "$OUT/ps.log"
  fi
  rm -f "$OUT/b.log"
  stage_done profile
fi

if has trace; then
  # Where a graph-replayed decode step's time goes, kernel by kernel: a CUPTI timeline (libferry_kernel_trace.so
  # through CUDA_INJECTION64_PATH; bench/trace/kernel_trace.cpp) of `ferry bench -p 0 -n 64`, summarized by
  # scripts/device/trace_summary.py (each kernel's share of the step's critical path, one layer slot by slot).
  # The untraced tg64 of the same model is printed beside it (the tracing's own cost).
  log="$OUT/trace.log"
  : > "$log"
  for t in ${FERRY_TRACE_TYPES:-q4_0 q8_0 bf16}; do
    m="$(model_of "$t" "$log")"
    "$C/ferry" bench --device cuda -m "$m" -p 0 -n 64 -r 1 > "$OUT/b.log" 2>&1
    note "$(grep -E 'tg64|rror' "$OUT/b.log" | head -2 | sed "s/^/[$t, untraced] /")"
    # FERRY_TRACE_AB: an environment assignment traced a second time (e.g. FERRY_CUDA_TUNE=act_levels=2).
    for ab in "" ${FERRY_TRACE_AB:+ab}; do
      tag="$t${ab:+-ab}"
      env ${ab:+${FERRY_TRACE_AB}} CUDA_INJECTION64_PATH="$C/libferry_kernel_trace.so" \
        FERRY_KERNEL_TRACE="$OUT/trace-$tag.csv" "$C/ferry" bench --device cuda -m "$m" -p 0 -n 64 -r 1 \
        > "$OUT/b.log" 2>&1
      label="$t${ab:+, ${FERRY_TRACE_AB}}"
      note "$(grep -E 'tg64|rror|kernel_trace' "$OUT/b.log" | head -3 | sed "s/^/[$label, traced] /")"
      { echo "== $label: ferry bench -p 0 -n 64, traced"; cat "$OUT/b.log"; } >> "$log"
      python3 "$repo/scripts/device/trace_summary.py" "$OUT/trace-$tag.csv" --show 40 > "$OUT/trace-$tag.txt" 2>&1
      { echo "== $label"; cat "$OUT/trace-$tag.txt"; } >> "$log"
      sed -n '1p;/^One layer/,/layer total/p' "$OUT/trace-$tag.txt" | sed "s/^/[$label] /" | tee -a "$summary"
      xz -T4 -6 "$OUT/trace-$tag.csv"  # a call brings back 8 files at most: the tables stay in trace.log only
      rm -f "$OUT/trace-$tag.txt"
    done
    # Inside the kernels: the phase stamps of the last launch of the decode attention and of each matvec v10 shape
    # (FERRY_CUDA_STAMPS=1, printed at exit; stamp_table.h).
    FERRY_CUDA_STAMPS=1 "$C/ferry" bench --device cuda -m "$m" -p 0 -n 16 -r 1 > "$OUT/b.log" 2>&1
    { echo "== $t: phase stamps"; cat "$OUT/b.log"; } >> "$log"
    sed -n '/^FERRY_CUDA_STAMPS/,$p' "$OUT/b.log" | sed "s/^/[$t] /" | tee -a "$summary"
    [ "$t" = bf16 ] || rm -f "$m"
  done
  rm -f "$OUT/b.log"
  stage_done trace
fi

# ncu (only when named, not part of `all`): Nsight Compute over a few launches of one kernel in batch-1 decode
# (FERRY_NCU_KERNEL, a regex, default the decode attention; FERRY_NCU_TYPE, default q4_0): its duration alone (ncu
# runs each profiled kernel by itself: no neighbour on its SMs, no queued weight reads) against its in-situ share
# in `trace`, and the warp-state stall reasons (why a phase takes longer than its instructions).
if [[ ",$what," == *",ncu,"* ]]; then
  log="$OUT/ncu.log"
  : > "$log"
  t="${FERRY_NCU_TYPE:-q4_0}"
  m="$(model_of "$t" "$log")"
  ncu_bin="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
  # The regex matches the demangled name with its template arguments, e.g. 'matvec_v10_kernel<.*3, 4, 2, false>'.
  # FERRY_NCU_SOURCE=1: also the warp-stall samples per SASS instruction (ncu-sass-*.csv: the source page of the
  # report; scripts/device/ncu_sass_top.py lists the instructions that hold the most samples).
  src=(); [ "${FERRY_NCU_SOURCE:-0}" = 1 ] && src=(--section SourceCounters --import-source no -o "$OUT/ncu-rep")
  timeout 400 "$ncu_bin" --kernel-name-base demangled --kernel-name "regex:${FERRY_NCU_KERNEL:-decode_mma_kernel}" \
    --launch-skip "${FERRY_NCU_SKIP:-100}" --launch-count "${FERRY_NCU_COUNT:-3}" --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section LaunchStats "${src[@]}" \
    "$C/ferry" bench --device cuda -m "$m" -p 0 -n 8 -r 1 >> "$log" 2>&1
  note "[ncu $t] exit $? ($(command -v ncu > /dev/null && echo ncu || echo "$ncu_bin"))"
  if [ -f "$OUT/ncu-rep.ncu-rep" ]; then
    "$ncu_bin" --import "$OUT/ncu-rep.ncu-rep" > "$log.details" 2>&1; cat "$log.details" >> "$log"; rm -f "$log.details"
    "$ncu_bin" --import "$OUT/ncu-rep.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-sass.csv" 2>> "$log"
    python3 "$repo/scripts/device/ncu_sass_top.py" "$OUT/ncu-sass.csv" 2>&1 | head -80 | tee -a "$log" | sed "s/^/[ncu sass] /" | tee -a "$summary"
    xz -T4 -6 "$OUT/ncu-sass.csv"
    rm -f "$OUT/ncu-rep.ncu-rep"
  fi
  grep -E "decode_mma|matvec|Duration|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|Stall|==ERROR==" \
    "$log" | head -60 | sed "s/^/[ncu $t] /" | tee -a "$summary"
  stage_done ncu
fi

echo "=== summary ==="
cat "$summary"
