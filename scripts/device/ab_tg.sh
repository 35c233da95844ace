#!/usr/bin/env bash
# A/B of batch-1 generation between two ferry binaries in one device call, runs alternating (A B A B ...) so
# clock and thermal drift fall on both alike. Build the second binary here (e.g. from an older commit in a git
# worktree), compress it (`xz -k`), put it in an ignored folder such as .carry-ab/ and carry it with .carry:
#   bash scripts/device/ab_tg.sh /tmp/ferry-bin/ferry .carry-ab/ferry_5658da8.xz [bf16|q8_0|q4_0] [rounds]
# Prints each run's tg128 (tok/s, ferry bench -r 3) and the mean of each side.
set -uo pipefail
a="$1"; b="$2"; type="${3:-bf16}"; rounds="${4:-3}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
if [ ! -x "$a" ] && [ -f "$repo/.carry/bins.tar.xz" ]; then
  mkdir -p /tmp/ferry-bin && tar xJf "$repo/.carry/bins.tar.xz" -C /tmp/ferry-bin
fi
case "$b" in *.xz) xz -dc "$b" > /tmp/ferry_b && chmod +x /tmp/ferry_b && b=/tmp/ferry_b ;; esac
# ferry links NCCL (the machine's torch-venv copy, as check.sh uses) and the carried fmt/PCRE2/httplib.
export LD_LIBRARY_PATH="$(dirname "$a"):/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
m="/tmp/llama3-8b-$type.gguf"
[ -f "$m" ] || "$a" gen --shape llama3-8b --type "$type" -o "$m" -t 16 > /dev/null
tg() { "$1" bench --device cuda -m "$m" -p 0 -n 128 -r 3 2>&1 | grep -E "\| +tg128" | awk -F'|' '{print $8}' | awk '{print $1}'; }
results=""
for i in $(seq 1 "$rounds"); do
  x=$(tg "$a"); y=$(tg "$b")
  echo "round $i: A $x  B $y"
  results="$results ${x:-0} ${y:-0}"
done
echo "$results" | awk -v t="$type" '{ for (i = 1; i <= NF; i += 2) { a += $i; b += $(i + 1); n++ } }
  END { printf "mean: A %.1f  B %.1f  (%s tg128, %d rounds)\n", a / n, b / n, t, n }'
