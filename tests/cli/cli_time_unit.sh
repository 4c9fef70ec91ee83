#!/usr/bin/env bash
# cli_time_unit.sh - a cost profile whose coefficients are times (time_unit_ps, what
# python -m dcpack.calibrate writes): `dcpack plan --cost` prints its makespans in milliseconds
# beside the cost units (text and JSON), the time unit changes no plan and no integer statistic,
# JSON without a time unit is unchanged, `dcpack cost` prints and round-trips it, and a zero or
# signed unit is refused with the file and line named.
# usage: cli_time_unit.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; exit 1; }

# a Llama-8B-layer-like profile in picoseconds: 88 ps per token pair, 2.13 us per token
cat >"$tmp/ps.profile" <<'P'
quadratic = 88
linear = 2130000
kv = 1500000
round_latency = 40000000
microbatch_overhead = 900000000
P
cp "$tmp/ps.profile" "$tmp/units.profile"
echo "time_unit_ps = 1" >>"$tmp/ps.profile"
# the same coefficients read as units of 7 ps: every makespan in ms is 7 times larger
cp "$tmp/units.profile" "$tmp/seven.profile"
echo "time_unit_ps = 7" >>"$tmp/seven.profile"

batch=(--generate longsft:n=512,seed=5 --ranks 16 --max-seqlen-per-rank 16384)
for s in dp_balanced dynamic_cp balanced; do
  for p in units ps seven; do
    "$dcpack" plan "${batch[@]}" --scheduler "$s" --cost "$tmp/$p.profile" --format json >"$tmp/$s.$p.json"
  done
done
# dependency step model too (balanced lays its plan out for it)
for p in units ps; do
  "$dcpack" plan "${batch[@]}" --scheduler balanced --step-model dependency --cost "$tmp/$p.profile" \
    --format json >"$tmp/dep.$p.json"
done

python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
timing = {"plan_seconds", "plan_seconds_min"}
ms_keys = {"time_unit_ps", "makespan_ms", "lower_bound_ms", "dependency_makespan_ms", "model_makespan_ms"}
def load(name):
    return json.load(open(f"{tmp}/{name}.json"))
def check(units, timed, unit_ps):
    assert units["plan"] == timed["plan"], "the time unit changed a plan"
    a, b = units["stats"], timed["stats"]
    assert not (ms_keys & a.keys()), ("ms fields without a time unit", ms_keys & a.keys())
    assert ms_keys <= b.keys(), ("ms fields missing", ms_keys - b.keys())
    for k in a:
        if k not in timing and k != "cost_model":
            assert a[k] == b[k], (k, a[k], b[k])
    assert b["time_unit_ps"] == unit_ps
    for k in ("makespan", "lower_bound", "dependency_makespan", "model_makespan"):
        ms = b[k] * unit_ps / 1e9
        assert abs(b[k + "_ms"] - ms) <= 1e-6 + 1e-9 * ms, (k, b[k + "_ms"], ms)
    return b
for s in ("dp_balanced", "dynamic_cp", "balanced"):
    check(load(f"{s}.units"), load(f"{s}.ps"), 1)
    seven = check(load(f"{s}.units"), load(f"{s}.seven"), 7)
    ps = load(f"{s}.ps")["stats"]
    assert abs(seven["makespan_ms"] - 7 * ps["makespan_ms"]) < 1e-5
    # magnitude: 2.13 us per token over ~16 ranks puts a 512-sequence longsft batch at tens to
    # hundreds of ms, far from int64 saturation
    assert 1.0 < ps["makespan_ms"] < 1e5 and ps["makespan"] < 2**62, ps["makespan"]
dep = check(load("dep.units"), load("dep.ps"), 1)
assert dep["step_model"] == "dependency" and dep["model_makespan_ms"] == dep["dependency_makespan_ms"]
print("time unit json ok")
PY

# the comparison (no --scheduler): ms in every scheduler's stats, and two ms columns in the table
"$dcpack" plan "${batch[@]}" --cost "$tmp/ps.profile" --format json >"$tmp/cmp.json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for row in d["comparison"]:
    s = row["stats"]
    assert abs(s["makespan_ms"] - s["makespan"] / 1e9) < 1e-6, row["scheduler"]
' "$tmp/cmp.json"
"$dcpack" plan "${batch[@]}" --cost "$tmp/ps.profile" --no-timing >"$tmp/cmp.txt"
grep -Eq "^scheduler +microbatches +makespan +dependency +makespan ms +depend. ms +efficiency" "$tmp/cmp.txt" ||
  { cat "$tmp/cmp.txt"; fail "comparison header"; }
grep -q "^ms: the two makespans in milliseconds; the profile's cost unit is 1 ps" "$tmp/cmp.txt" || fail "ms legend"
# the balanced row's ms column is its makespan / 1e9
python3 - "$tmp/cmp.txt" "$tmp/balanced.ps.json" <<'PY'
import json, sys
row = next(l for l in open(sys.argv[1]) if l.startswith("balanced "))
cols = row.split()
makespan = int(cols[2].replace(",", ""))
assert makespan == json.load(open(sys.argv[2]))["stats"]["makespan"], row
assert cols[4] == "%.3f" % (makespan / 1e9), (cols[4], makespan)
PY
"$dcpack" plan "${batch[@]}" --no-timing >"$tmp/cmp_units.txt"
grep -q "makespan ms" "$tmp/cmp_units.txt" && fail "ms columns without a time unit"
grep -Eq "^scheduler +microbatches +makespan +dependency +efficiency" "$tmp/cmp_units.txt" || fail "plain header"

# one scheduler, text: "= X ms" after both makespans and the unit named
"$dcpack" plan "${batch[@]}" --scheduler balanced --cost "$tmp/ps.profile" --summary --no-timing >"$tmp/one.txt"
grep -Eq "^  makespan +[0-9,]+ = [0-9]+\.[0-9]{3} ms " "$tmp/one.txt" || { cat "$tmp/one.txt"; fail "text makespan ms"; }
grep -Eq "^  dependency +[0-9,]+ = [0-9]+\.[0-9]{3} ms " "$tmp/one.txt" || fail "text dependency ms"
grep -q "^  time unit      1 ps per cost unit" "$tmp/one.txt" || fail "text time unit"
"$dcpack" plan "${batch[@]}" --scheduler balanced --cost "$tmp/units.profile" --summary --no-timing | grep -q " ms " &&
  fail "ms without a time unit"

# dcpack cost: prints the unit, and a printed profile loads back to the same model and unit
"$dcpack" cost --profile "$tmp/seven.profile" --format profile >"$tmp/printed.txt"
grep -qx "time_unit_ps = 7" "$tmp/printed.txt" || fail "printed profile lacks the time unit"
"$dcpack" cost --profile "$tmp/printed.txt" --format profile | tail -n +2 | cmp -s - <(tail -n +2 "$tmp/printed.txt") ||
  fail "printed profile does not round-trip"
"$dcpack" cost --profile "$tmp/units.profile" --format profile | grep -q time_unit && fail "unit printed without one"
"$dcpack" cost --profile "$tmp/ps.profile" --format json | python3 -c '
import json, sys; assert json.load(sys.stdin)["time_unit_ps"] == 1' || fail "cost json time unit"
"$dcpack" cost --profile "$tmp/ps.profile" --lengths 4096 --max-cp 2 | grep -q "^one cost unit is 1 ps" ||
  fail "cost text time unit"

# bad units: exit 3, file and line named, nothing planned
for bad in "time_unit_ps = 0" "time_unit_ps = -1" "time_unit_ps = 1.5" "time_unit_ps = ps"; do
  { cat "$tmp/units.profile"; echo "$bad"; } >"$tmp/bad.profile"
  set +e
  "$dcpack" plan "${batch[@]}" --scheduler balanced --cost "$tmp/bad.profile" >"$tmp/out.txt" 2>"$tmp/err.txt"
  rc=$?
  set -e
  [ "$rc" = 3 ] || fail "'$bad' exited $rc"
  grep -q "bad.profile:6: time_unit_ps" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "'$bad' message"; }
  [ -s "$tmp/out.txt" ] && fail "'$bad' printed a plan"
done
# the committed calibrated profile loads, in picoseconds, and plans
src="$2"
"$dcpack" cost --profile "$src/bench/profiles/llama8b-layer-h100.profile" --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["time_unit_ps"] == 1 and d["model"]["quadratic"] > 0 and d["model"]["linear"] > 0, d["model"]' ||
  fail "the committed profile"
"$dcpack" plan "${batch[@]}" --cost "$src/bench/profiles/llama8b-layer-h100.profile" --format json >/dev/null ||
  fail "planning with the committed profile"
echo "cli_time_unit: ok"
