#!/bin/bash
# calibrate_gpu.sh - the cost model calibrated on a GPU machine (docs/calibration.md): build the
# package offline (the planner only: the timing is torch's), then python -m dcpack.calibrate for one
# Llama-8B-like layer (hidden 4096, 32 heads, 8 KV heads, SwiGLU 14336, bf16, vocabulary 1024 so
# the output head stays small) on one GPU (CP 1) and under torchrun on two (CP 1 and 2, the real
# steps of dynamic_cp, balanced and balanced laid out for dependency checked against the composed
# barrier and dependency times).  CP sizes above the world's, up to EMULATE_CP (default 64), are
# emulated: compute timed with dcpack.thd.LOCAL_REPLAY, collectives priced by the ring model fitted to
# bench/data/comm_2xh200.json.  ONE_LIMIT (default 240 s) bounds the one-GPU run, CHECK_STEPS its
# checked steps (default 0).
#
#   bash bench/calibration/calibrate_gpu.sh [OUT (default $OUT or calibrate-logs)]
#
# CALIBRATE_ARGS (the model and grid arguments) replaces the layer above, e.g. for a CPU dry run.
# OUT gets: install.log, one.log/one.json/one.profile (1 GPU, with 2 batches' steps checked),
# two.log/two.json/two.profile (2 GPUs; skipped on a machine with one).
# Needs python3 with torch (CUDA), numpy, scikit-build-core, cmake and ninja; nothing is downloaded.
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
O="${1:-${OUT:-calibrate-logs}}"
mkdir -p "$O" && O="$(cd "$O" && pwd)"
PY="${PYTHON:-python3}"
# NVLink SHARP (multicast) stays off: not every host lends it.  No index, no prompts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SITE="${TMPDIR:-/tmp}/dcpack-calibrate-site"
t0=$SECONDS
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.device_count(), "GPUs")'
  rm -rf "$SITE"
  timeout 150 "$PY" -m pip install -q --no-index --no-build-isolation --no-deps --target "$SITE" \
    --config-settings=build-dir="${TMPDIR:-/tmp}/dcpack-calibrate-build" "$SRC"
} > "$O/install.log" 2>&1 || { echo "FAIL: build (install.log)"; tail -20 "$O/install.log"; exit 1; }
echo "built in $((SECONDS - t0)) s"
export PYTHONPATH="$SITE"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
# CALIBRATE_ARGS replaces the model and overrides the grid and step options (a CPU dry run: tiny shapes, --device cpu)
read -r -a MODEL <<< "${CALIBRATE_ARGS:---layers 1 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 1024}"
rc=0
t0=$SECONDS
# CP 2..64 emulated on the one GPU: compute timed with dcpack.thd.LOCAL_REPLAY, collectives priced by the
# ring model fitted to the 2 x H200 all-gather table (stated in the profile)
timeout "${ONE_LIMIT:-240}" "$PY" -m dcpack.calibrate --check-steps "${CHECK_STEPS:-0}" --max-seqlen 16384 --microbatches 6 \
  --machine "1x $gpu" --emulate-cp "${EMULATE_CP:-64}" --comm-table "$SRC/bench/data/comm_2xh200.json" \
  "${MODEL[@]}" \
  --out "$O/one.profile" --json "$O/one.json" > "$O/one.log" 2>&1 || { echo "FAIL: 1 GPU (one.log)"; rc=1; }
echo "1 GPU: $((SECONDS - t0)) s"; grep -E "^(relative error|error at|wrote)" "$O/one.log"
gpus="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)"
if [ "${gpus:-0}" -lt 2 ] && [ -z "${CALIBRATE_ARGS:-}" ]; then
  echo "2 GPUs: skipped, this machine has ${gpus:-0} GPU(s)"
  exit $rc
fi
t0=$SECONDS
timeout 220 "$PY" -m torch.distributed.run --nproc-per-node 2 -m dcpack.calibrate --max-cp 2 \
  --emulate-cp "${EMULATE_CP:-64}" --comm-table "$SRC/bench/data/comm_2xh200.json" \
  --check-steps 4 --max-seqlen 16384 --microbatches 6 --machine "2x $gpu" "${MODEL[@]}" \
  --out "$O/two.profile" --json "$O/two.json" > "$O/two.log" 2>&1 || { echo "FAIL: 2 GPUs (two.log)"; rc=1; }
echo "2 GPUs: $((SECONDS - t0)) s"; tail -14 "$O/two.log"
exit $rc
