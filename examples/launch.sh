#!/usr/bin/env bash
# launch.sh N [options] - start N ranks of dcpack_train_data_loop on this host, one
# process each, with the environment torchrun gives a trainer (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE), wait for all of them, and print their output in
# rank order.  The options go to every rank unchanged (docs/examples.md).
#
#   examples/launch.sh 8 --comm shm --dp 4 --cp 2 --trace tests/data/workloads/mlmdefault_n256_seed1.txt
#
# Environment:
#   DCPACK_TRAIN_LOOP    the program (default: dcpack_train_data_loop next to this script's
#                        build/ or bin/ directory, else on PATH)
#   DCP_LAUNCH_WRAPPER   a command put before every rank's (e.g. "valgrind -q --error-exitcode=99")
#   DCP_LAUNCH_LOG_DIR   keep each rank's output in DIR/rank<R>.log (default: a temporary directory)
#   NCCL_NVLS_ENABLE     0 unless set (NVLink multicast off)
# Each run gets its own job id and rendezvous file (DCP_JOB_ID, DCP_RENDEZVOUS_FILE).
#
# Exit status: 0 when every rank exited 0, else the highest status among the ranks
# (a rank killed by a signal counts as 128 + the signal); 2 on a usage error.
# The last lines say how each rank ended: "launch: rank R exited with status S".
set -u

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N [dcpack_train_data_loop options]" >&2
  exit 2
fi
n=$1
shift

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${DCPACK_TRAIN_LOOP:-}"
if [ -z "$bin" ]; then
  for candidate in "$here/../build/dcpack_train_data_loop" "$here/../../../bin/dcpack_train_data_loop"; do
    if [ -x "$candidate" ]; then bin="$candidate"; break; fi
  done
fi
if [ -z "$bin" ]; then bin="$(command -v dcpack_train_data_loop || true)"; fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "launch: dcpack_train_data_loop not found; build it or set DCPACK_TRAIN_LOOP" >&2
  exit 2
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/dcpack-launch.XXXXXX")"
logs="${DCP_LAUNCH_LOG_DIR:-$tmp}"
mkdir -p "$logs"
job="launch-$$-$(date +%s)-$RANDOM"
export DCP_JOB_ID="$job" DCP_RENDEZVOUS_FILE="$tmp/rendezvous"
export WORLD_SIZE="$n" LOCAL_WORLD_SIZE="$n" NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
read -r -a wrapper <<< "${DCP_LAUNCH_WRAPPER:-}"

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  rm -f /dev/shm/dcpack-"$job"-* 2>/dev/null
  rm -rf "$tmp"
}
trap 'cleanup; exit 130' INT TERM

for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r GROUP_RANK=0 ${wrapper[@]+"${wrapper[@]}"} "$bin" "$@" > "$logs/rank$r.log" 2>&1 &
  pids+=($!)
done

statuses=()
for ((r = 0; r < n; r++)); do
  wait "${pids[$r]}"
  statuses+=($?)
done
pids=()

worst=0
for ((r = 0; r < n; r++)); do
  sed "s/^/[rank $r] /" "$logs/rank$r.log"
done
for ((r = 0; r < n; r++)); do
  echo "launch: rank $r exited with status ${statuses[$r]}"
  if [ "${statuses[$r]}" -gt "$worst" ]; then worst=${statuses[$r]}; fi
done
failed=0
for s in "${statuses[@]}"; do [ "$s" -ne 0 ] && failed=$((failed + 1)); done
echo "launch: $n ranks, $failed failed"
rm -f /dev/shm/dcpack-"$job"-* 2>/dev/null
rm -rf "$tmp"
exit "$worst"
