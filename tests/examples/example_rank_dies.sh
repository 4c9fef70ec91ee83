#!/usr/bin/env bash
# example_rank_dies.sh [--comm shm|nccl] [--ranks N] [--bin PATH] [--timeout-ms T (3000; nccl 10000)]
#
# The failure drill of the training-loop example (docs/examples.md, "A rank that
# dies"): N processes (default 8) run the loop and one of them leaves in the
# middle of a step, between two of its collectives, by _exit(9) or by SIGKILL.
# Every other rank must fail that step with a lost-peer status within its
# timeout (--comm shm: DCP_ERR_TIMEOUT; --comm nccl: DCP_ERR_TIMEOUT, or
# DCP_ERR_NCCL / DCP_ERR_COMM when NCCL notices the peer first), abort its
# communicators and exit with status 3; nothing may hang (every run is guarded
# by `timeout`).  Three drills: a data rank before its all-to-all-v, the last rank
# (a TP peer that receives by broadcast when TP > 1) killed before its second
# collective, and rank 0 (the rendezvous owner) before its first collective after
# the call agreement.
#
# CI runs it with --comm shm on one CPU host; on a host with N GPUs the same
# script runs with --comm nccl --ranks N (N = 2, 4 or 8).
set -uo pipefail
comm=shm; n=8; bin="${DCPACK_TRAIN_LOOP:-}"; timeout_ms=
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; src="$(dirname "$(dirname "$here")")"
while [ $# -gt 0 ]; do
  case "$1" in
    --comm) comm="$2"; shift 2 ;;
    --ranks) n="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --timeout-ms) timeout_ms="$2"; shift 2 ;;
    *) echo "usage: $0 [--comm shm|nccl] [--ranks 2|4|8] [--bin PATH] [--timeout-ms T]" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] || bin="$src/build/dcpack_train_data_loop"
# NCCL connects its peers during the first step: give it longer
if [ -z "$timeout_ms" ]; then if [ "$comm" = nccl ]; then timeout_ms=10000; else timeout_ms=3000; fi; fi
[ -x "$bin" ] || { echo "FAIL: $bin is not a program (--bin PATH)"; exit 1; }
scale="${DCP_TEST_TIME_SCALE:-1}"
timeout_ms=$((timeout_ms * scale))
if [ "$comm" = nccl ]; then
  caps=$("$bin" --version)
  case "$caps" in *nccl*) ;; *) echo "skipped: built without NCCL ($caps)"; exit 77 ;; esac
  gpus=$(sed -E 's/.*; ([0-9]+) CUDA devices visible.*/\1/' <<< "$caps")
  [ "$gpus" -ge "$n" ] || { echo "skipped: needs $n GPUs, $gpus visible"; exit 77; }
fi
case "$n" in
  8) layout="--dp 2 --cp 2 --tp 2" ;;
  4) layout="--dp 2 --cp 2" ;;
  2) layout="--dp 2" ;;
  *) echo "FAIL: --ranks takes 2, 4 or 8"; exit 2 ;;
esac
if [ "$comm" = shm ]; then lost='DCP_ERR_TIMEOUT'; bound=$((2 * timeout_ms + 3000 * scale))
else lost='DCP_ERR_TIMEOUT|DCP_ERR_NCCL|DCP_ERR_COMM'; bound=$((3 * timeout_ms + 5000 * scale)); fi
# each launch: start-up (NCCL connects 8 GPUs in seconds), two steps, the timeouts, the aborts
guard=$(( (4 * timeout_ms) / 1000 + 120 * scale ))

failures=0
# drill NAME RANK STEP CALL HOW
drill() {
  local name="$1" rank="$2" step="$3" call="$4" how="$5"
  local start end out status
  start=$(date +%s)
  out=$(DCPACK_TRAIN_LOOP="$bin" timeout --kill-after=10 "$guard" bash "$src/examples/launch.sh" "$n" \
    --comm "$comm" $layout --trace "$src/tests/data/workloads/mlmdefault_n256_seed1.txt" --steps 4 --batch 64 \
    --timeout-ms "$timeout_ms" --init-timeout-ms $((60000 * scale)) \
    --die-at-step "$step" --die-rank "$rank" --die-at-call "$call" --die-how "$how" 2>&1)
  status=$?
  end=$(date +%s)
  echo "$out"
  local bad=0
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ] && ! grep -q "launch: $n ranks" <<< "$out"; then
    echo "FAIL [$name]: the launch did not finish within ${guard} s"; bad=1
  fi
  local want_dead=9; [ "$how" = kill ] && want_dead=137
  for ((r = 0; r < n; r++)); do
    local st
    st=$(sed -n "s/^launch: rank $r exited with status \([0-9]*\)$/\1/p" <<< "$out")
    if [ "$r" -eq "$rank" ]; then
      [ "$st" = "$want_dead" ] || { echo "FAIL [$name]: rank $r (the one that leaves) exited with '$st', expected $want_dead"; bad=1; }
      continue
    fi
    [ "$st" = 3 ] || { echo "FAIL [$name]: rank $r exited with '$st', expected 3 (peer lost)"; bad=1; continue; }
    local line ms
    line=$(grep -E "^\[rank $r\] rank $r: step $step failed after [0-9]+ ms: ($lost):" <<< "$out" | head -1)
    [ -n "$line" ] || { echo "FAIL [$name]: rank $r did not fail step $step with $lost"; bad=1; continue; }
    ms=$(sed -E 's/.* failed after ([0-9]+) ms.*/\1/' <<< "$line")
    [ "$ms" -le "$bound" ] || { echo "FAIL [$name]: rank $r took $ms ms to fail step $step (bound $bound ms)"; bad=1; }
    grep -q "^\[rank $r\] rank $r: a peer was lost: communicators aborted, exiting with status 3" <<< "$out" \
      || { echo "FAIL [$name]: rank $r did not abort its communicators"; bad=1; }
  done
  if [ "$bad" -eq 0 ]; then
    echo "PASS [$name]: rank $rank left step $step before collective $call ($how); the other $((n - 1)) ranks failed"\
         "with a lost peer within $bound ms, aborted their communicators and exited 3 ($((end - start)) s in all)"
  fi
  failures=$((failures + bad))
}

drill "data rank, before its all-to-all-v" $((n / 2)) 1 4 exit
drill "last rank, killed" $((n - 1)) 2 2 kill
drill "rank 0, before its first collective after the call agreement" 0 0 1 exit
[ "$failures" -eq 0 ] && echo "PASS: every drill ($comm, $n ranks)" || echo "FAIL: $failures problems"
exit $(( failures > 0 ))
