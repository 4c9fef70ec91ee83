#!/usr/bin/env bash
# example_mixed_config.sh BIN SRC: the training-loop example (docs/examples.md) on 4 processes over shared
# memory (DP 2 x CP 2) where rank 1 alone runs another --effort or --scheduler, with and without
# --plan-ahead: every rank must report DCP_ERR_INVALID_CONFIG with the reason ("another configuration") and
# exit 4 at once - no rank waits out the timeout, none reports a lost peer.
set -euo pipefail
bin="$1"; src="$2"
scale="${DCP_TEST_TIME_SCALE:-1}"
timeout_ms=$((20000 * scale))
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# launch.sh gives every rank the same options; this wrapper adds rank 1's own
cat >"$tmp/rank1.sh" <<'SH'
#!/usr/bin/env bash
if [ "$RANK" = 1 ]; then exec "$@" $DCP_TEST_RANK1_OPTIONS; else exec "$@"; fi
SH
chmod +x "$tmp/rank1.sh"
failures=0
for rank1 in "--effort fast" "--scheduler dynamic_cp"; do
  for ahead in --plan-ahead ""; do
    what="rank 1 with $rank1${ahead:+, $ahead}"
    start=$(date +%s)
    status=0
    out=$(DCP_TEST_RANK1_OPTIONS="$rank1" DCP_LAUNCH_WRAPPER="$tmp/rank1.sh" DCPACK_TRAIN_LOOP="$bin" \
      timeout --kill-after=10 $((120 * scale)) bash "$src/examples/launch.sh" 4 --comm shm \
      --trace "$src/tests/data/workloads/mlmdefault_n256_seed1.txt" --steps 2 --batch 64 --dp 2 --cp 2 \
      --max-seqlen-per-rank 2048 --scheduler balanced --timeout-ms "$timeout_ms" $ahead 2>&1) || status=$?
    took=$(($(date +%s) - start))
    bad=""
    [ "$status" -eq 4 ] || bad="launch exited $status, expected 4"
    for r in 0 1 2 3; do
      grep -q "launch: rank $r exited with status 4" <<< "$out" || bad="$bad; rank $r did not exit 4"
      grep -q "^\[rank $r\] rank $r: step 0 failed after .*DCP_ERR_INVALID_CONFIG: step: rank 1 was built with another configuration than rank 0" <<< "$out" ||
        bad="$bad; rank $r did not report INVALID_CONFIG with the reason"
    done
    ! grep -q "a peer was lost\|is gone\|DCP_ERR_TIMEOUT" <<< "$out" || bad="$bad; a rank reported a lost peer or a timeout"
    [ "$took" -lt $((timeout_ms / 2000)) ] || bad="$bad; took ${took} s (a rank waited for the timeout)"
    if [ -n "$bad" ]; then
      echo "FAIL ($what): ${bad#; }"
      echo "$out" | cut -c1-300
      failures=$((failures + 1))
    else
      echo "ok: $what: every rank reported DCP_ERR_INVALID_CONFIG in ${took} s"
    fi
  done
done
[ "$failures" -eq 0 ] || exit 1
echo "PASS: example_mixed_config"
