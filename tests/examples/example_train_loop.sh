#!/usr/bin/env bash
# example_train_loop.sh BIN SRC COMM N [layout options]: run the training-loop
# example (docs/examples.md) as N processes of this host, one per rank, with
# --comm COMM (shm: the CPU over shared memory; nccl: one GPU per process), 4 steps
# of 64 sequences of a 256-sequence trace, and require every rank's outputs to
# match the oracle in every step.  nccl without N GPUs (or NCCL) is skipped (77).
set -euo pipefail
bin="$1"; src="$2"; comm="$3"; n="$4"; shift 4
scale="${DCP_TEST_TIME_SCALE:-1}"
if [ "$comm" = nccl ]; then
  caps=$("$bin" --version)
  case "$caps" in *nccl*) ;; *) echo "skipped: built without NCCL ($caps)"; exit 77 ;; esac
  gpus=$(sed -E 's/.*; ([0-9]+) CUDA devices visible.*/\1/' <<< "$caps")
  [ "$gpus" -ge "$n" ] || { echo "skipped: needs $n GPUs, $gpus visible"; exit 77; }
fi
status=0
out=$(DCPACK_TRAIN_LOOP="$bin" timeout --kill-after=10 $((240 * scale)) bash "$src/examples/launch.sh" "$n" \
  --comm "$comm" --trace "$src/tests/data/workloads/mlmdefault_n256_seed1.txt" --steps 4 --batch 64 \
  --timeout-ms $((30000 * scale)) "$@" 2>&1) || status=$?
echo "$out"
[ "$status" -eq 0 ] || { echo "FAIL: launch.sh exited with status $status"; exit 1; }
grep -q "summary: 4 steps on $n ranks ($comm): every rank's outputs match the oracle" <<< "$out" \
  || { echo "FAIL: no summary saying every rank matched the oracle"; exit 1; }
matched=$(grep -c "every output matches the oracle" <<< "$out" || true)
[ "$matched" -eq "$n" ] || { echo "FAIL: $matched of $n ranks report matching outputs"; exit 1; }
steps=$(grep -c "outputs match the oracle on $n/$n ranks" <<< "$out" || true)
[ "$steps" -eq 4 ] || { echo "FAIL: $steps of 4 steps matched on every rank"; exit 1; }
grep -q "launch: $n ranks, 0 failed" <<< "$out" || { echo "FAIL: a rank failed"; exit 1; }
if [[ " $* " == *" --plan-ahead "* ]]; then  # every step's plan was made ahead, on a thread, and handed in
  ahead=$(grep -c "outputs match the oracle on $n/$n ranks" <<< "$(grep "(planned ahead " <<< "$out")" || true)
  [ "$ahead" -eq 4 ] || { echo "FAIL: $ahead of 4 steps report a plan made ahead"; exit 1; }
fi
echo "PASS: $n processes ($comm), 4 steps, every rank's outputs match the oracle ($*)"
