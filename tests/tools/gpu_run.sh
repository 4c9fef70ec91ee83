#!/bin/bash
# gpu_run.sh - the GPU proof in one go, on a machine with NVIDIA GPUs:
# kernel, NCCL and multi-GPU step tests, compute-sanitizer on the kernels and
# on a two-GPU step, and the GPU benchmark.  Each program's log goes to OUT.
#
#   bash tests/tools/gpu_run.sh [BUILD_DIR (default build)] [OUT (default $OUT or gpu-logs)] [PARTS]
#
# PARTS: any of tests, sanitize, bench, comma-separated (default all three).
# BUILD_DIR is a CUDA build of this tree (cmake -S . -B build -G Ninja, with nvcc
# and NCCL found); run from the source directory.  Exit status 0 when every test
# passed (skips included, also a program that exits 77 because its one case was
# skipped) and every sanitizer reported no error.
set -uo pipefail
B="${1:-build}"
O="${2:-${OUT:-gpu-logs}}"
parts=",${3:-tests,sanitize,bench},"
mkdir -p "$O"
# NVLink SHARP (multicast) stays off: not every host lends it
export NCCL_NVLS_ENABLE=0

if ! ldd "$B/test_gpu_step" 2>/dev/null | grep -q 'libnccl.so.2 => /'; then
  lib="$(find /usr /opt -name 'libnccl.so.2*' 2>/dev/null | head -1)"
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/gpus.txt"
nvidia-smi topo -m 2>/dev/null | head -4 >> "$O/gpus.txt"

failed=0
# Exit status 77 is a test program's "skipped" (its one case needs more GPUs than
# this machine has): reported as skipped, not counted as a failure.
run() {
  local limit=$1 name=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$O/$name.log" 2>&1
  local rc=$?
  local verdict=""
  [ $rc -eq 77 ] && verdict=" (skipped: needs more GPUs)"
  echo "$name: exit $rc$verdict, $((SECONDS - t0)) s, ok $(grep -c '^ok' "$O/$name.log"), skipped $(grep -c '^skipped' "$O/$name.log"), failed $(grep -c '^FAIL' "$O/$name.log")"
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || failed=1
}

if [[ $parts == *,tests,* ]]; then
  run 120 test_gpu_kernels "$B/test_gpu_kernels"
  run 120 test_gpu_nccl "$B/test_gpu_nccl"
  run 300 test_gpu_step "$B/test_gpu_step"
  grep -h "microbatches\|heap after" "$O/test_gpu_step.log" "$O/test_gpu_nccl.log"
fi

if [[ $parts == *,sanitize,* ]]; then
  for tool in memcheck racecheck initcheck synccheck; do
    run 300 "$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/test_gpu_kernels"
  done
  # A whole step: NCCL probes the device with calls that fail on purpose (API
  # errors, not memory errors), and the tool's own host allocations land on the
  # ranks' threads, so the step test leaves heap counting out under it.
  run 300 memcheck_step env DCP_TEST_UNDER_SANITIZER=1 compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 9 "$B/test_gpu_step" two_gpus_dp_balanced
  grep -h "SUMMARY" "$O"/memcheck.log "$O"/racecheck.log "$O"/initcheck.log "$O"/synccheck.log "$O"/memcheck_step.log
fi

if [[ $parts == *,bench,* ]]; then
  run 300 bench_gpu "$B/bench_gpu"
  grep -E "^(device|pack|flat|step|yardstick|reroute)" "$O/bench_gpu.log"
fi
exit $failed
