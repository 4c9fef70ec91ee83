#!/usr/bin/env bash
# cli_plan_json.sh - `dcpack plan --format json` keeps its contract: one object {"plan", "stats"},
# N rank lists per microbatch, every id exactly once, every plan invariant, and statistics
# that an independent Python model recomputes from the plan.  Also: CSV, JSON Lines, standard
# input, --generate and the embedded default give the same plan as the same lengths in a text file.
# usage: cli_plan_json.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
check="$src/tests/cli/cli_check_plan.py"
data="$src/tests/data/workloads"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# plan_ok NAME LENGTHS CHECK-ARGS -- PLAN-ARGS: plan, then validate; a scheduler this build lacks is skipped
plan_ok() {
  local name="$1" lengths="$2"
  shift 2
  local check_args=()
  while [ "$1" != "--" ]; do check_args+=("$1"); shift; done
  shift
  local st=0
  "$dcpack" plan --format json --repeat 2 "$@" >"$tmp/$name.json" 2>"$tmp/$name.err" || st=$?
  if [ $st -ne 0 ]; then
    if grep -q "DCP_ERR_UNSUPPORTED" "$tmp/$name.err"; then echo "skip $name: $(cat "$tmp/$name.err")"; return 0; fi
    echo "FAIL $name: exit $st"; cat "$tmp/$name.err"; exit 1
  fi
  python3 "$check" "$tmp/$name.json" "$lengths" "${check_args[@]}" || { echo "FAIL $name"; exit 1; }
}

default="$data/mlmdefault_n1024_seed1.txt"
for s in dp_balanced dynamic_cp balanced; do
  extra=()
  [ $s = dp_balanced ] && extra=(--static-cp 2)
  plan_ok "default_$s" "$default" --ranks 32 --max-seqlen-per-rank 4096 --scheduler $s "${extra[@]}" -- --scheduler $s
done
for trace in longsft_n1024_seed1 bimodal_n1024_seed1 uniform32k_n256_seed1; do
  for s in dynamic_cp balanced; do
    plan_ok "${trace}_$s" "$data/$trace.txt" --ranks 64 --max-seqlen-per-rank 8192 --scheduler $s -- \
      --trace "$data/$trace.txt" --ranks 64 --max-seqlen-per-rank 8192 --scheduler $s
  done
  plan_ok "${trace}_dp_balanced_cp16" "$data/$trace.txt" --ranks 64 --max-seqlen-per-rank 8192 --static-cp 16 -- \
    --trace "$data/$trace.txt" --ranks 64 --max-seqlen-per-rank 8192 --scheduler dp_balanced --cp 16
done
# a non-power-of-two group: sequences that need more than 16 ranks run on all 24
plan_ok nonpow2 "$data/longsft_n256_seed1.txt" --ranks 24 --max-seqlen-per-rank 8192 -- \
  --trace "$data/longsft_n256_seed1.txt" --ranks 24 --max-seqlen-per-rank 8192 --scheduler dynamic_cp
# dp_balanced without --cp: the smallest CP size dividing N that holds the longest sequence (6 of 12 here)
printf '100\n20000\n300\n' >"$tmp/static.txt"
plan_ok dpb_auto "$tmp/static.txt" --ranks 12 --max-seqlen-per-rank 4096 --static-cp 6 -- \
  --trace "$tmp/static.txt" --ranks 12 --scheduler dp_balanced
plan_ok dpb_auto24 "$data/longsft_n256_seed1.txt" --ranks 24 --max-seqlen-per-rank 4096 --static-cp 24 -- \
  --trace "$data/longsft_n256_seed1.txt" --ranks 24 --scheduler dp_balanced
plan_ok min_cp "$default" --ranks 32 --max-seqlen-per-rank 4096 --min-cp-size 2 -- \
  --scheduler dynamic_cp --min-cp-size 2
plan_ok vpp "$default" --ranks 32 --max-seqlen-per-rank 4096 --vpp-group 4 -- --scheduler dynamic_cp --vpp-group 4
plan_ok vpp_dpb "$default" --ranks 32 --max-seqlen-per-rank 4096 --vpp-group 4 --static-cp 4 -- \
  --scheduler dp_balanced --cp 4 --vpp-group 4
plan_ok per_mb "$default" --ranks 8 --max-seqlen-per-rank 16384 --max-per-microbatch 6 -- \
  --scheduler dynamic_cp --ranks 8 --max-seqlen-per-rank 16384 --max-sequences-per-microbatch 6
# a cost profile changes the statistics (recomputed with the profile's coefficients)
printf 'hidden = 8192\nkv = 900\nkv.16+ = 5000\nround_latency = 100000\nmicrobatch_overhead = 5000000\n' >"$tmp/profile.txt"
"$dcpack" cost --profile "$tmp/profile.txt" --format json >"$tmp/cost.json"
plan_ok profile "$default" --ranks 32 --max-seqlen-per-rank 4096 --cost "$tmp/cost.json" -- \
  --scheduler dynamic_cp --cost "$tmp/profile.txt"
python3 -c '
import json, sys
p, d = (json.load(open(f))["stats"] for f in sys.argv[1:])
assert p["cost_model"].endswith("profile.txt") and d["cost_model"] == "default", (p["cost_model"], d["cost_model"])
assert p["makespan"] != d["makespan"], "the profile did not change the makespan"' "$tmp/profile.json" "$tmp/default_dynamic_cp.json"

# the same lengths through every input path give the same plan
plan_of() { python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["plan"]))'; }
ref="$("$dcpack" plan --scheduler dynamic_cp --format json --trace "$default" | plan_of)"
[ "$("$dcpack" plan --scheduler dynamic_cp --format json | plan_of)" = "$ref" ] || { echo "FAIL embedded default differs from $default"; exit 1; }
[ "$("$dcpack" plan --scheduler dynamic_cp --format json --generate mlmdefault:n=1024,seed=1 | plan_of)" = "$ref" ] ||
  { echo "FAIL --generate mlmdefault:n=1024,seed=1 differs from $default"; exit 1; }
[ "$("$dcpack" plan --scheduler dynamic_cp --format json --trace - <"$default" | plan_of)" = "$ref" ] ||
  { echo "FAIL standard input differs"; exit 1; }
python3 - "$default" "$tmp" <<'PY'
import json, sys
lengths = [int(x) for x in open(sys.argv[1])]
with open(sys.argv[2] + "/batch.csv", "w") as f:
    f.write('id,"seq len",source\n')
    for i, s in enumerate(lengths):
        f.write('%d,%d,"doc, part %d"\n' % (i, s, i))
with open(sys.argv[2] + "/batch.jsonl", "w") as f:
    for i, s in enumerate(lengths):
        f.write(json.dumps({"id": i, "meta": {"len": -1, "tags": ["a", "b"]}, "len": s, "text": "x\"y"}) + "\n")
PY
{ printf '\xef\xbb\xbf'; sed 's/$/\r/' "$default"; printf '\r\n\n'; } >"$tmp/windows.txt"  # BOM, CRLF, blank tail
[ "$("$dcpack" plan --scheduler dynamic_cp --format json --trace "$tmp/windows.txt" | plan_of)" = "$ref" ] ||
  { echo "FAIL a byte-order mark, CRLF line ends or trailing blank lines change the plan"; exit 1; }
[ "$("$dcpack" plan --scheduler dynamic_cp --format json --trace "$tmp/batch.csv" --column "seq len" | plan_of)" = "$ref" ] ||
  { echo "FAIL CSV input differs"; exit 1; }
[ "$("$dcpack" plan --scheduler dynamic_cp --format json --trace "$tmp/batch.jsonl" --column len | plan_of)" = "$ref" ] ||
  { echo "FAIL JSON Lines input differs"; exit 1; }
[ "$("$dcpack" plan --scheduler dynamic_cp --format json --trace - --column len --input-format jsonl <"$tmp/batch.jsonl" | plan_of)" = "$ref" ] ||
  { echo "FAIL JSON Lines on standard input differs"; exit 1; }

# plan_seconds is the median of --repeat runs: R runs of a timed plan, a positive number
"$dcpack" plan --scheduler dynamic_cp --format json --repeat 7 | python3 -c '
import json, sys
s = json.load(sys.stdin)["stats"]
assert s["repeat"] == 7 and s["plan_seconds"] > 0 and s["plan_seconds_min"] <= s["plan_seconds"], s'

# the comparison as JSON: one entry per scheduler, stats or an error
"$dcpack" plan --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
names = [e["scheduler"] for e in d["comparison"]]
assert names == ["dp_balanced", "dynamic_cp", "balanced"], names
for e in d["comparison"]:
    assert ("stats" in e) != ("error" in e), e
    if "stats" in e: assert e["stats"]["sequences"] == 1024
assert d["best"] in names'
echo "cli_plan_json: ok"
