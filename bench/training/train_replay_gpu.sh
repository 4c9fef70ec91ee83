#!/bin/bash
# train_replay_gpu.sh - the composed (replay) step times of every scheduler on one GPU, in one device
# call of at most 6 minutes: build dcpack (offline, python/tests/thd_gpu_run.sh's build), then
# bench/training/bench_train_step.py --replay over the long-context traces and mlmdefault, M 8K/16K/32K, 8 to 64
# ranks, schedulers dp_balanced, dynamic_cp, balanced, balanced+cal (the calibrated profile) and verl_kk
# (verl's Karmarkar-Karp balancing, CP 1), CP communication priced from bench/data/comm_2xh200.json.
#
#   bash bench/training/train_replay_gpu.sh OUT PROFILE VERL_DIR
#
# PROFILE: the calibrated cost profile (python -m dcpack.calibrate's output); VERL_DIR: a verl checkout
# or a folder with verl/utils/seqlen_balancing.py and verl/trainer/ppo/ray_trainer.py.  A missing one
# skips its rows with the reason (the rest still runs).  Writes OUT/replay.json (every row, written after
# each), OUT/replay.log (progress: one line a row), OUT/replay.md (the tables, bench/training/train_step_report.py)
# and OUT/replay_summary.txt (timings).  The cells run in priority order and the bench starts no new
# row once BUDGET (default 330) seconds from this script's start are near, so the call ends in time and
# keeps what it measured (replay.json's time_limit_reached says where it stopped; a row that outlasts
# ROW_S is stopped by a timeout at BUDGET, noted the same way).  Exit 0 then; 2 for a BUDGET with no room
# for a row; the bench's status when it fails otherwise.
# Environment: TINY=1 runs the same grid scaled down (a tiny model, M / 32) on the CPU or GPU, without
# building (PYTHONPATH must give dcpack): the check that this script works end to end; BUDGET, REPS
# (timed passes per rank, default 5), WARMUP (untimed passes of every rank's shapes first, default 1),
# BATCHES (independent batches per cell, default 3), SCHEDULERS (default dynamic_cp,balanced+cal),
# CELLS (TRACE:M:RANKS:TOKENS,... in place of the grid), BIAS_CHECK (rows that also time their first batch
# with a synchronisation around every microbatch, the earlier method), ROW_S (the longest row's seconds).
# A carriable VERL_DIR (the two files verl's balancing is read from, and its commit):
#   d=build-verl; mkdir -p $d/verl/utils $d/verl/trainer/ppo
#   cp VERL/verl/utils/seqlen_balancing.py $d/verl/utils/; cp VERL/verl/trainer/ppo/ray_trainer.py $d/verl/trainer/ppo/
#   git -C VERL rev-parse HEAD > $d/COMMIT     # where VERL is a git checkout (optional)
set -uo pipefail
T0=$SECONDS
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
O="${1:?usage: train_replay_gpu.sh OUT PROFILE VERL_DIR}"
PROFILE="${2:-}"
VERL_DIR="${3:-}"
mkdir -p "$O" && O="$(cd "$O" && pwd)"
S="$O/replay_summary.txt"
note() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$S"; }
export NCCL_NVLS_ENABLE=0 PYTHONDONTWRITEBYTECODE=1
PY="${PYTHON:-$(command -v python3 || command -v python)}"
BUDGET="${BUDGET:-330}"

note "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1), $(date -u +%FT%TZ)"
args=()
if [ -n "$PROFILE" ]; then
  if [ -f "$PROFILE" ]; then args+=(--cost-profile "$(cd "$(dirname "$PROFILE")" && pwd)/$(basename "$PROFILE")")
  else note "profile $PROFILE: no such file (balanced+cal is skipped)"; fi
fi
if [ -n "$VERL_DIR" ]; then
  if [ -d "$VERL_DIR" ]; then args+=(--verl "$(cd "$VERL_DIR" && pwd)")
  else note "verl $VERL_DIR: no such folder (verl_kk is skipped)"; fi
fi

if [ "${TINY:-0}" = 1 ]; then
  div=32
  model=(--hidden 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 256)
  note "TINY: a tiny model, M / $div, no build"
else
  div=1
  model=(--vocab 1024)   # the calibration's model (bench/calibration/calibrate_gpu.sh): the same output head
  bash "$SRC/python/tests/thd_gpu_run.sh" "$O" build > "$O/thd_build.log" 2>&1
  note "build: exit $? ($(grep -h '^build' "$O/thd_summary.txt" 2>/dev/null))"
  export PYTHONPATH="${THD_SITE:-/tmp/dcpack-thd-site}"
fi

# cells TRACE:M:RANKS:TOKENS_PER_RANK in priority order (the time budget cuts from the end)
LONG="longsft_n4096_seed1.txt bimodal_n4096_seed1.txt pareto_n4096_seed1.txt uniform32k_n4096_seed1.txt"
cells=()
add() { local m=$(( $2 / div )); cells+=("$1:$m:$3:$(( 2 * m ))"); }
if [ -n "${CELLS:-}" ]; then
  IFS=, read -r -a cells <<< "$CELLS"
else
  for t in $LONG mlmdefault_n4096_seed1.txt; do add "$t" 8192 16; done     # 16 ranks, M 8K
  for t in $LONG; do add "$t" 8192 8; done                                 # 8 ranks
  for t in $LONG; do add "$t" 16384 16; done                               # M 16K
  for t in $LONG; do add "$t" 8192 64; done                                # 64 ranks
  for t in $LONG; do add "$t" 32768 8; done                                # M 32K
  for t in $LONG; do add "$t" 8192 32; done                                # 32 ranks
  add mlmdefault_n4096_seed1.txt 8192 64
fi
CELLS="$(IFS=,; echo "${cells[*]}")"
SCHEDS="${SCHEDULERS:-dynamic_cp,balanced+cal}"
used=$((SECONDS - T0))
limit=$(( BUDGET - used - ${ROW_S:-60} ))   # start no row that cannot end inside the budget
if [ "$limit" -lt 1 ]; then   # no row could start: say so rather than write an empty report
  note "BUDGET $BUDGET s leaves no time for a row of ROW_S ${ROW_S:-60} s after $used s of setup: raise BUDGET or lower ROW_S"
  exit 2
fi
note "bench: ${#cells[@]} cells x $SCHEDS, ${BATCHES:-3} batches, reps ${REPS:-5} after ${WARMUP:-1} warm-up pass(es), new rows until $limit s from now"
timeout $(( BUDGET - used )) "$PY" "$SRC/bench/training/bench_train_step.py" --replay 8 --cells "$CELLS" \
  --schedulers "$SCHEDS" "${args[@]}" "${model[@]}" \
  --replay-steps "${BATCHES:-3}" --reps "${REPS:-5}" --warmup "${WARMUP:-1}" --bias-check "${BIAS_CHECK:-0}" \
  --comm-table "$SRC/bench/data/comm_2xh200.json" \
  --time-limit "$limit" --out "$O/replay.json" > "$O/replay.log" 2>&1
rc=$?
note "bench: exit $rc, $(grep -c '^\[' "$O/replay.log") rows ($(grep -c '"skipped"' "$O/replay.log") skipped)"
[ $rc -ne 0 ] && tail -5 "$O/replay.log" | tee -a "$S"
if [ $rc -eq 124 ] && [ -f "$O/replay.json" ]; then
  # a row outlasted ROW_S and timeout stopped the bench: the report says so (its rows are whole: one is
  # written only once it has ended)
  "$PY" - "$O/replay.json" "$((BUDGET - used))" <<'PY'
import json, sys
path, seconds = sys.argv[1], sys.argv[2]
result = json.load(open(path))
result["time_limit_reached"] = (f"stopped by the {seconds} s timeout after {len(result['rows'])} rows "
                                "(a row took longer than ROW_S)")
json.dump(result, open(path, "w"), indent=1)
PY
  note "bench: stopped by its timeout; replay.json says so"
fi
if [ -f "$O/replay.json" ]; then
  "$PY" "$SRC/bench/training/train_step_report.py" "$O/replay.json" > "$O/replay.md" 2>&1
  note "report: exit $?, $O/replay.md"
fi
note "done"
# a stopped bench (timeout, 124) keeps its rows and exits 0; any other failure is the script's
[ $rc -eq 0 ] || [ $rc -eq 124 ] || exit $rc
