#!/usr/bin/env bash
# Build the libFuzzer targets and run each for a given time.
#
#   fuzz/run.sh <seconds> [target...]      targets: plan gather ... (default: every fuzz/fuzz_*.c)
#
# Builds with clang -DDCP_FUZZ=ON in $DCP_FUZZ_BUILD (default build-fuzz), seeds
# each target from fuzz/corpus/<target>/, keeps what the fuzzer learns in
# <build>/corpus/<target>/, and writes crash inputs to <build>/findings/<target>/.
# Prints, per target, executions, coverage (cov: edges, ft: features), corpus
# size and findings.  Exits non-zero if any target found a crash, leak or timeout.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ]; then
  echo "usage: $0 <seconds> [target...]" >&2
  exit 2
fi
seconds="$1"
shift
build="${DCP_FUZZ_BUILD:-$src/build-fuzz}"
jobs="${DCP_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$src"/fuzz/fuzz_*.c; do
    t="$(basename "$f" .c)"
    targets+=("${t#fuzz_}")
  done
fi

mkdir -p "$build"
CC="${CC:-clang}" cmake -S "$src" -B "$build" -G Ninja -DDCP_FUZZ=ON -DDCP_WITH_CUDA=OFF -DDCP_BUILD_TESTS=OFF \
  -DDCP_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || { cat "$build/build.log"; exit 1; }

status=0
printf '%-8s %12s %10s %8s %8s %10s %s\n' target seconds executions cov ft corpus findings
for t in "${targets[@]}"; do
  exe="$build/fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "no fuzz target $t ($exe)" >&2
    status=1
    continue
  fi
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  rm -rf "$findings"   # findings of this run only (move earlier ones away to keep them)
  mkdir -p "$corpus" "$findings"
  seeds=()
  [ -d "$src/fuzz/corpus/$t" ] && seeds=("$src/fuzz/corpus/$t")
  log="$build/fuzz_$t.log"
  rc=0
  # -timeout: one input running longer than 10 s is a hang; -rss_limit_mb: memory blow-up is a finding
  "$exe" "$corpus" "${seeds[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" >"$log" 2>&1 || rc=$?
  last="$(grep -E '^#[0-9]+' "$log" | tail -1 || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  cov="$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')"
  ft="$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')"
  units="$(echo "$last" | sed -n 's/.*corp: \([0-9]*\)\/.*/\1/p')"
  found="$(find "$findings" -type f | wc -l)"
  printf '%-8s %12s %10s %8s %8s %10s %s\n' "$t" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${units:-?}" "$found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    echo "--- fuzz_$t failed (exit $rc); findings in $findings; log tail:" >&2
    grep -E 'property failed|ERROR|SUMMARY|runtime error' "$log" | head -20 >&2 || true
    tail -5 "$log" >&2
  fi
done
exit $status
