#!/usr/bin/env bash
# Build the libFuzzer targets and run each for a given time.
#
#   fuzz/run.sh <seconds> [target...]      targets: plan gather ... (default: every fuzz/fuzz_*.c)
#   DCP_FUZZ_PARALLEL=1 fuzz/run.sh ...    every target at once, one core each
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

# run_target T: fuzz target T for $seconds, log in $build/fuzz_T.log, crashes in $build/findings/T/
run_target() {
  local t="$1" exe="$build/fuzz_$1" rc
  local corpus="$build/corpus/$t" findings="$build/findings/$t" seeds=()
  rm -rf "$findings" # findings of this run only (move earlier ones away to keep them)
  mkdir -p "$corpus" "$findings"
  [ -d "$src/fuzz/corpus/$t" ] && seeds=("$src/fuzz/corpus/$t")
  # -timeout: one input running longer than 30 s is a hang (a pack or step input runs up to 16 ranks
  # as threads, each planning, which a loaded 2-core machine slows several-fold); -rss_limit_mb:
  # memory blow-up is a finding
  "$exe" "$corpus" "${seeds[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" >"$build/fuzz_$t.log" 2>&1 && rc=0 || rc=$?
  echo "$rc" >"$build/fuzz_$t.rc"
}

for t in "${targets[@]}"; do
  if [ ! -x "$build/fuzz_$t" ]; then
    echo "no fuzz target $t ($build/fuzz_$t)" >&2
    exit 1
  fi
done
# DCP_FUZZ_PARALLEL=1 runs every target at once (one core each), otherwise one after another
if [ -n "${DCP_FUZZ_PARALLEL:-}" ]; then
  for t in "${targets[@]}"; do run_target "$t" & done
  wait
else
  for t in "${targets[@]}"; do run_target "$t"; done
fi

status=0
printf '%-8s %8s %12s %8s %8s %8s %s\n' target seconds executions cov ft corpus findings
for t in "${targets[@]}"; do
  log="$build/fuzz_$t.log"
  rc="$(cat "$build/fuzz_$t.rc")"
  last="$(grep -E '^#[0-9]+' "$log" | tail -1 || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  cov="$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')"
  ft="$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')"
  units="$(echo "$last" | sed -n 's/.*corp: \([0-9]*\)\/.*/\1/p')"
  found="$(find "$build/findings/$t" -type f | wc -l)"
  printf '%-8s %8s %12s %8s %8s %8s %s\n' "$t" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${units:-?}" "$found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    {
      echo "--- fuzz_$t failed (exit $rc); findings in $build/findings/$t; log tail:"
      grep -E 'property failed|ERROR|SUMMARY|runtime error' "$log" | head -20 || true
      tail -5 "$log"
    } >&2
  fi
done
exit $status
