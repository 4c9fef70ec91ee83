#!/bin/bash
# thd_gpu_run.sh - dcpack.thd on a GPU machine: the equality tests on 1 and 2 GPUs (torchrun), the
# varlen kernel's tests, and the step-time benchmark.  Logs and JSON go to OUT.
#
#   bash python/tests/thd_gpu_run.sh OUT [PARTS]
#
# PARTS, comma-separated (default build,attention,equality,bench):
#   build      dcpack with CUDA and NCCL, through gpu_run.sh's build (offline); the installed package is
#              kept in $THD_SITE (default /tmp/dcpack-thd-site) and reused when it is already there
#   attention  pytest test_thd_attention.py (varlen's causal alignment, varlen against the math kernel)
#   equality   thd_equality.py under torchrun on 1 and 2 GPUs: fp32 math kernel with the CPU data plane
#              (every case) and with dcpack.torch.CudaStepper, and bf16 varlen with CudaStepper
#   bench      bench/training/bench_train_step.py: wall time on 2 and 1 GPUs, replay on 16 ranks
# Environment: GPUS (default: all, at most 2), BENCH_ARGS (extra arguments for every bench run),
# REPLAY (default 16).
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
O="${1:?OUT}"
parts=",${2:-build,attention,equality,bench},"
mkdir -p "$O" && O="$(cd "$O" && pwd)"
SUMMARY="$O/thd_summary.txt"
: >> "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0 PYTHONDONTWRITEBYTECODE=1
PY="${PYTHON:-$(command -v python3 || command -v python)}"
TORCHRUN=("$PY" -m torch.distributed.run)
SITE="${THD_SITE:-/tmp/dcpack-thd-site}"
ngpu="$(nvidia-smi -L 2>/dev/null | wc -l)"
GPUS="${GPUS:-$(( ngpu < 2 ? ngpu : 2 ))}"
note "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1), $ngpu GPU(s), torch $("$PY" -c 'import torch; print(torch.__version__)'), date $(date -u +%FT%TZ)"

if [[ $parts == *,build,* ]]; then
  if [ -f "$SITE/dcpack/_core.abi3.so" ]; then
    note "build: reusing $SITE"
  else
    t0=$SECONDS
    bash "$SRC/python/tests/gpu_run.sh" "$O/build" build > "$O/build.log" 2>&1
    note "build: exit $?, $((SECONDS - t0)) s ($(grep -h 'installed:' "$O/build/summary.txt" 2>/dev/null))"
    rm -rf "$SITE" && cp -r "$SRC/build-python-gpu/site" "$SITE"
  fi
fi
# the package's compiled module, this tree's Python files
cp -r "$SRC/python/dcpack/." "$SITE/dcpack/"
export PYTHONPATH="$SITE"
cd "$O" || exit 1

run() {  # name, limit, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$O/$name.log" 2>&1
  local rc=$?
  note "$name: exit $rc, $((SECONDS - t0)) s: $(grep -h -E '^(PASS|FAIL)|passed|failed' "$O/$name.log" | tail -1)"
}

if [[ $parts == *,attention,* ]]; then
  run attention 120 "$PY" -m pytest -q -rs -s -p no:cacheprovider "$SRC/python/tests/test_thd_attention.py"
  grep -h "varlen_attn causal" "$O/attention.log" | tee -a "$SUMMARY"
fi

if [[ $parts == *,equality,* ]]; then
  EQ="$SRC/python/tests/thd_equality.py"
  for n in $(seq 1 "$GPUS"); do
    run "eq_fp32_inproc_${n}gpu" 240 "${TORCHRUN[@]}" --nproc-per-node "$n" "$EQ" --device cuda --dtype fp32 \
      --kernel math --source inproc --cases all --out "$O/eq_fp32_inproc_${n}gpu.json"
    run "eq_fp32_cuda_${n}gpu" 180 "${TORCHRUN[@]}" --nproc-per-node "$n" "$EQ" --device cuda --dtype fp32 \
      --kernel math --source cuda --cases small --out "$O/eq_fp32_cuda_${n}gpu.json"
    run "eq_bf16_varlen_cuda_${n}gpu" 180 "${TORCHRUN[@]}" --nproc-per-node "$n" "$EQ" --device cuda \
      --dtype bf16 --kernel varlen --source cuda --cases small --out "$O/eq_bf16_varlen_cuda_${n}gpu.json"
  done
fi

if [[ $parts == *,bench,* ]]; then
  B="$SRC/bench/training/bench_train_step.py"
  read -r -a extra <<< "${BENCH_ARGS:-}"
  if [ "$GPUS" -ge 2 ]; then
    run bench_wall_2gpu 300 "${TORCHRUN[@]}" --nproc-per-node 2 "$B" --reps 2 --out "$O/train_2gpu.json" "${extra[@]}"
  fi
  run bench_wall_1gpu 120 "${TORCHRUN[@]}" --nproc-per-node 1 "$B" --max-seqlen 8192 --steps 3 --no-check \
    --out "$O/train_1gpu.json" "${extra[@]}"
  table=""
  [ -f "$O/train_2gpu.json" ] && table="--comm-table $O/train_2gpu.json"
  run "bench_replay_${REPLAY:-16}" 240 "$PY" "$B" --replay "${REPLAY:-16}" --max-seqlen 8192 --reps 1 $table \
    --out "$O/replay_${REPLAY:-16}.json" "${extra[@]}"
fi
note "done"
