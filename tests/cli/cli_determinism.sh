#!/usr/bin/env bash
# cli_determinism.sh - the same lengths give byte-identical plans with gcc and
# clang at -O0 and -O3: the planning sources and tests/tools/plan_hash_main.c are
# compiled four ways (direct compiler calls, CPU-only, no jemalloc), each build
# prints the plan hash of every scheduler on the 256- and 1024-sequence traces
# for several configurations, and every output must equal the CMake build's
# (dcp_plan_hash next to dcpack).  A compiler that is not installed is skipped.
#
#   bash tests/cli/cli_determinism.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
reference_program="$(dirname "$dcpack")/dcp_plan_hash"
if [ ! -x "$reference_program" ]; then
  echo "cli_determinism: $reference_program not built" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

traces=("$src"/tests/data/workloads/*_n256_seed1.txt "$src"/tests/data/workloads/*_n1024_seed1.txt)
# the CPU-only library: every layer's sources, with the stubs a build without CUDA and NCCL takes
sources=()
for f in "$src"/alloc/*.c $(find "$src"/core "$src"/pipeline -name '*.c' | LC_ALL=C sort); do
  case "$f" in */alloc/device_cuda.c | */alloc/host_block_jemalloc.c) ;; *) sources+=("$f") ;; esac
done
sources+=("$src"/gpu/no_cuda.c "$src"/gpu/no_nccl.c "$src"/tests/tools/plan_hash_main.c)

"$reference_program" "${traces[@]}" > "$work/reference.txt"
lines=$(wc -l < "$work/reference.txt")
if [ "$lines" -lt 100 ]; then
  echo "cli_determinism: only $lines plans printed" >&2
  exit 1
fi

# build the four variants in parallel, then run them in parallel
builds=()
for cc in gcc clang; do
  if ! command -v "$cc" > /dev/null; then
    echo "cli_determinism: $cc not installed, skipped"
    continue
  fi
  for opt in -O0 -O3; do
    name="$cc$opt"
    "$cc" -std=c11 "$opt" -I"$src/include" "${sources[@]}" -o "$work/$name" -lm -lpthread 2> "$work/$name.log" &
    builds+=("$name")
  done
done
wait
for name in "${builds[@]}"; do
  if [ ! -x "$work/$name" ]; then
    echo "cli_determinism: $name failed to build:" >&2
    cat "$work/$name.log" >&2
    exit 1
  fi
  "$work/$name" "${traces[@]}" > "$work/$name.txt" &
done
wait
status=0
for name in "${builds[@]}"; do
  if cmp -s "$work/reference.txt" "$work/$name.txt"; then
    echo "cli_determinism: $name: $lines plans, identical"
  else
    echo "cli_determinism: $name differs from the CMake build:" >&2
    diff "$work/reference.txt" "$work/$name.txt" | head -20 >&2
    status=1
  fi
done
exit $status
