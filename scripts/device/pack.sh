#!/usr/bin/env bash
# Builds ferry here (with nvcc) and puts what the device script needs into .carry/ (ignored by git through
# .git/info/exclude; at most 64 MiB travel per device call, the repository included).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # a worktree shares its repository's
grep -qx "/.carry/" "$exclude" || echo "/.carry/" >> "$exclude"
# NCCL for tensor parallelism: headers and library from PyPI's nvidia-nccl-cu13 wheel (only linked against here;
# the GPU machine's own copy, in its torch venv, is used at run time: check.sh / tp_check.sh set LD_LIBRARY_PATH).
nccl="$repo/build/nccl/nvidia/nccl"
if [ ! -f "$nccl/include/nccl.h" ]; then
  mkdir -p build/nccl-wheel build/nccl
  python3 -m pip download -q --no-deps nvidia-nccl-cu13 -d build/nccl-wheel
  (cd build/nccl && unzip -qo ../nccl-wheel/nvidia_nccl_cu13-*.whl 'nvidia/nccl/*')
fi
[ -e "$nccl/lib/libnccl.so" ] || ln -sf libnccl.so.2 "$nccl/lib/libnccl.so"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_NCCL_ROOT="$nccl" > /dev/null
# FERRY_PACK_ONLY: the targets to build and pack (default: all of them below; a fresh 2-core build of every harness
# takes a while), e.g. "ferry test_cuda test_e2e sampling_bench ferry_kernel_trace".
targets="${FERRY_PACK_ONLY:-ferry test_cuda test_e2e matvec_bench prefill_kernels_bench serve_bench attention_bench \
  gemm_bench allreduce_bench fused_ops_bench sampling_bench fusion_bench skinny_gemm_bench wgmma_skinny_bench \
  kv_placement_bench sync_bench ferry_kernel_trace}"
# shellcheck disable=SC2086
cmake --build build -j "$(nproc)" --target $targets
# nvcc turns a host call of a __device__-only function into a silent exit(1) (it cost two device calls once).
# List the host functions of the kernel files that call exit(): host stubs of device-only helpers that nothing
# calls are harmless; a launcher or planner in this list is the bug.
for o in $(find build/CMakeFiles/ferry_cuda.dir/src/backends/cuda -name "*.cu.o"); do
  objdump -dr "$o" | awk -v f="$(basename "$o")" '/^[0-9a-f]+ <.*>:$/ {fn=$2} /PLT32\texit/ {print "pack.sh: host exit() call in " f ": " fn}'
done | c++filt | sort -u >&2
rm -rf .carry && mkdir -p .carry
for t in $targets; do
  case "$t" in
    test_cuda | test_e2e) cp "build/tests/$t" .carry/ ;;
    ferry_kernel_trace) cp build/libferry_kernel_trace.so .carry/ ;;
    *) cp "build/$t" .carry/ ;;
  esac
done
# FERRY_PACK_SKIP: binaries to leave out of this pack (a call carries at most 64 MiB with the repository; each
# harness linked against ferry_cuda is ~15-20 MiB of it before compression), e.g. "gemm_bench fusion_bench".
for b in ${FERRY_PACK_SKIP:-}; do rm -f ".carry/$b"; done
# FERRY_PACK_BASE: another ferry binary (e.g. the previous head's) packed as ferry-base, for check.sh bench's
# in-call A/B across builds (FERRY_BENCH_BASE=1).
if [ -n "${FERRY_PACK_BASE:-}" ]; then cp "$FERRY_PACK_BASE" .carry/ferry-base; fi
strip .carry/*
# Libraries the GPU machine may lack (it has no PCRE2 headers; fmt is there but copy it to be sure).
cp -L /lib/x86_64-linux-gnu/libfmt.so.9 /lib/x86_64-linux-gnu/libpcre2-8.so.0 .carry/
# cpp-httplib is a compiled library on Debian (the GPU machine has none); its OpenSSL/zlib/brotli dependencies
# are there (check.sh reports any library still missing).
cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 .carry/
# CUPTI for the kernel-timeline library (check.sh trace): the toolkit's copy (the GPU machine's may sit elsewhere).
cupti="$(ldd build/libferry_kernel_trace.so | awk '/libcupti/ {print $3}')"
[ -n "$cupti" ] && cp -L "$cupti" .carry/
# Compressed: the binaries are ~100 MB, a device call carries at most 64 MiB with the repository (check.sh
# unpacks this on the machine).
(cd .carry && tar cf - * | xz -T2 -6 > ../.carry-bins.tar.xz && rm -f ./* && mv ../.carry-bins.tar.xz bins.tar.xz)
du -sh .carry
