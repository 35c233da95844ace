#!/usr/bin/env bash
# In-call sweep of one environment variable over batch-1 generation (tg128, `ferry bench -p 0 -n 128 -r 3`) on
# Llama-3-8B-shaped random models made on the machine. Run after check.sh unpacked the binaries (any stage), e.g.
#   FERRY_SWEEP_VAR=FERRY_CUDA_L2_PREFETCH_KB FERRY_SWEEP_VALUES="192 0 384 0" FERRY_SWEEP_TYPES="q4_0 q8_0" \
#     bash scripts/device/env_sweep.sh
# Values run in the order given (repeat one to see the run-to-run spread); "-" leaves the variable unset.
set -uo pipefail
C=/tmp/ferry-bin
repo="$(cd "$(dirname "$0")/../.." && pwd)"
# A fresh machine: unpack pack.sh's binaries as check.sh does.
[ -x "$C/ferry" ] || [ ! -f "$repo/.carry/bins.tar.xz" ] || { mkdir -p "$C" && tar xJf "$repo/.carry/bins.tar.xz" -C "$C"; }
[ -x "$C/ferry" ] || { echo "env_sweep.sh: no binaries in $C and no .carry/bins.tar.xz"; exit 1; }
export LD_LIBRARY_PATH="$C:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
var="${FERRY_SWEEP_VAR:?set FERRY_SWEEP_VAR}"
for t in ${FERRY_SWEEP_TYPES:-q4_0 q8_0}; do
  m="/tmp/llama3-8b-$t.gguf"
  [ -f "$m" ] || "$C/ferry" gen --shape llama3-8b --type "$t" -o "$m" -t 16 > /dev/null 2>&1
  for v in ${FERRY_SWEEP_VALUES:?set FERRY_SWEEP_VALUES}; do
    if [ "$v" = - ]; then
      line="$(env -u "$var" "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 2>&1 | grep -E 'tg128|rror' | head -2)"
    else
      line="$(env "$var=$v" "$C/ferry" bench --device cuda -m "$m" -p 0 -n 128 -r 3 2>&1 | grep -E 'tg128|rror' | head -2)"
    fi
    echo "[$t, $var=$v] $(echo "$line" | awk -F'|' '{print $8}' | xargs) $(echo "$line" | grep -o 'rror.*' | head -1)"
  done
done
