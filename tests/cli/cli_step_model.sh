#!/usr/bin/env bash
# cli_step_model.sh - the step model of a cost profile (step_model = barrier|dependency): `dcpack
# cost` prints it back in every format and a printed profile loads back to it; `dcpack plan` and
# `dcpack compare` report both makespans (barrier and dependency) in text and JSON, and judge
# efficiency and the best plan by the profile's model; plan statistics under it are recomputed
# independently (tests/cli/cli_check_plan.py simulates the dependency model rank by rank).
# usage: cli_step_model.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
check="$src/tests/cli/cli_check_plan.py"
data="$src/tests/data/workloads"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL $*"; exit 1; }

printf '# ranks run ahead of the slowest rank\nstep_model = dependency   # not barrier\nhidden = 6144\n' >"$tmp/dep.txt"
printf 'step_model = dependency\nstep_model = barrier\n' >"$tmp/later.txt"

# dcpack cost: text, JSON, profile; the default is barrier; later lines win
"$dcpack" cost | grep -qx "  step_model = barrier" || fail "default text lacks step_model = barrier"
"$dcpack" cost --profile "$tmp/dep.txt" >"$tmp/cost.txt"
grep -qx "  step_model = dependency" "$tmp/cost.txt" || { cat "$tmp/cost.txt"; fail "text lacks step_model = dependency"; }
grep -q "to each of its CP groups" "$tmp/cost.txt" || fail "text does not describe the dependency model"
"$dcpack" cost --profile "$tmp/later.txt" --format json | python3 -c '
import json, sys
assert json.load(sys.stdin)["model"]["step_model"] == "barrier", "a later line does not win"'
"$dcpack" cost --profile "$tmp/dep.txt" --format json >"$tmp/dep.json"
python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["model"]
assert m["step_model"] == "dependency" and m["linear"] == 12 * 6144, m' "$tmp/dep.json"
"$dcpack" cost --format json | python3 -c '
import json, sys
assert json.load(sys.stdin)["model"]["step_model"] == "barrier"'
"$dcpack" cost --profile "$tmp/dep.txt" --format profile >"$tmp/printed.txt"
grep -qx "step_model = dependency" "$tmp/printed.txt" || fail "printed profile lacks step_model"
"$dcpack" cost --profile "$tmp/printed.txt" --format profile | tail -n +2 | cmp -s - <(tail -n +2 "$tmp/printed.txt") ||
  fail "printed profile with step_model does not round-trip"
"$dcpack" cost --format profile | grep -qx "step_model = barrier" || fail "default profile lacks step_model = barrier"

# dcpack plan --format json under either model: every statistic recomputed, efficiency by the model
"$dcpack" cost --format json >"$tmp/default.json"
trace="$data/longsft_n256_seed1.txt"
for s in dp_balanced dynamic_cp balanced; do
  extra=()
  [ $s = dp_balanced ] && extra=(--cp 16)
  static=()
  [ $s = dp_balanced ] && static=(--static-cp 16)
  for model in default dep; do
    cost=()
    [ $model = dep ] && cost=(--cost "$tmp/dep.txt")
    "$dcpack" plan --format json --repeat 1 --trace "$trace" --ranks 64 --max-seqlen-per-rank 8192 --scheduler $s \
      "${extra[@]}" "${cost[@]}" >"$tmp/$s.$model.json"
    python3 "$check" "$tmp/$s.$model.json" "$trace" --ranks 64 --max-seqlen-per-rank 8192 --cost "$tmp/$model.json" \
      "${static[@]}" --scheduler $s >/dev/null || fail "$s under the $model profile"
  done
done
python3 - "$tmp/balanced.default.json" "$tmp/balanced.dep.json" <<'PY' || fail "plan JSON under the two models"
import json, sys
b, d = (json.load(open(f))["stats"] for f in sys.argv[1:])
assert b["step_model"] == "barrier" and d["step_model"] == "dependency"
assert b["model_makespan"] == b["makespan"] and b["efficiency"] == round(b["lower_bound"] / b["makespan"], 6)
assert d["model_makespan"] == d["dependency_makespan"] <= d["makespan"]
assert abs(d["efficiency"] - d["dependency_lower_bound"] / d["dependency_makespan"]) < 1e-6
PY
# a non-power-of-two static CP group (6 of 12 ranks) is one more group size of the dependency bound
printf '100\n20000\n300\n9000\n' >"$tmp/static.txt"
"$dcpack" plan --format json --repeat 1 --trace "$tmp/static.txt" --ranks 12 --scheduler dp_balanced \
  --cost "$tmp/dep.txt" >"$tmp/static.json"
python3 "$check" "$tmp/static.json" "$tmp/static.txt" --ranks 12 --max-seqlen-per-rank 4096 --cost "$tmp/dep.json" \
  --static-cp 6 >/dev/null || fail "static CP 6"

# dcpack plan, text: both makespans; the comparison judges by the profile's model
"$dcpack" plan --scheduler dynamic_cp --summary --no-timing --cost "$tmp/dep.txt" >"$tmp/one.txt"
grep -Eq "^  makespan +[0-9,]+ +\(lower bound [0-9,]+\) +barrier" "$tmp/one.txt" || { cat "$tmp/one.txt"; fail "makespan line"; }
grep -Eq "^  dependency +[0-9,]+ +\(lower bound [0-9,]+\)" "$tmp/one.txt" || fail "dependency line"
grep -Eq "^  efficiency +[0-9.]+ +lower bound / makespan, dependency step model" "$tmp/one.txt" || fail "efficiency line"
grep -q "step model dependency" "$tmp/one.txt" || fail "header lacks the step model"
"$dcpack" plan --no-timing --cost "$tmp/dep.txt" >"$tmp/all.txt"
grep -Eq "^scheduler +microbatches +makespan +dependency +efficiency" "$tmp/all.txt" || { cat "$tmp/all.txt"; fail "table header"; }
grep -Eq "has the lowest dependency makespan|is the only scheduler" "$tmp/all.txt" || fail "conclusion under dependency"
grep -q "under the dependency step model" "$tmp/all.txt" || fail "note under dependency"
"$dcpack" plan --format json --cost "$tmp/dep.txt" | python3 -c '
import json, sys
d = json.load(sys.stdin)
ok = [e for e in d["comparison"] if "stats" in e]
best = min(ok, key=lambda e: e["stats"]["dependency_makespan"])["scheduler"]
assert d["best"] == best, (d["best"], best)
for e in ok:
    s = e["stats"]
    assert s["step_model"] == "dependency" and s["model_makespan"] == s["dependency_makespan"] <= s["makespan"], s'

# dcpack compare: per configuration step model, both makespans, efficiency and best by each model
"$dcpack" compare --generate longsft:n=256 --steps 2 --ranks 64 --max-seqlen-per-rank 8192 --format json \
  --config dynamic_cp --config "dynamic_cp:cost=$tmp/dep.txt" >"$tmp/compare.json"
python3 - "$dcpack" "$tmp/compare.json" "$tmp/dep.txt" <<'PY' || fail "compare JSON"
import json, subprocess, sys
dcpack, doc, dep = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
barrier, dependency = doc["configurations"]
assert barrier["step_model"] == "barrier" and dependency["step_model"] == "dependency"
near = lambda a, b: abs(a - b) <= 1e-6 * max(1.0, abs(b))
for c, cost in ((barrier, []), (dependency, ["--cost", dep])):
    runs = [json.loads(subprocess.run([dcpack, "plan", "--format", "json", "--generate", "longsft:n=256,seed=%d" % (1 + k),
                                       "--ranks", "64", "--max-seqlen-per-rank", "8192", "--scheduler", "dynamic_cp",
                                       "--repeat", "1"] + cost, check=True, capture_output=True, text=True).stdout)["stats"]
            for k in range(2)]
    assert near(c["dependency_makespan_mean"], sum(r["dependency_makespan"] for r in runs) / 2), c
    assert near(c["dependency_lower_bound_mean"], sum(r["dependency_lower_bound"] for r in runs) / 2), c
    assert near(c["model_makespan_mean"], sum(r["model_makespan"] for r in runs) / 2), c
    assert near(c["efficiency"], sum(r["model_lower_bound"] for r in runs) / sum(r["model_makespan"] for r in runs)), c
    assert c["dependency_makespan_mean"] <= c["makespan_mean"], c
best = min(doc["configurations"], key=lambda c: c["model_makespan_mean"])["label"]
assert doc["best"] == best, (doc["best"], best)
PY
"$dcpack" compare --generate mlmdefault:n=256 --steps 2 --no-timing >"$tmp/table.txt"
grep -Eq "^configuration .*makespan/batch +dependency/b\. +efficiency" "$tmp/table.txt" || { cat "$tmp/table.txt"; fail "compare table"; }
# --step-model overrides the cost model's step model, before or after --cost, also a profile's
json_model() { python3 -c 'import json,sys; print(json.load(sys.stdin)["stats"]["step_model"])'; }
common=(plan --format json --repeat 1 --trace "$trace" --ranks 64 --max-seqlen-per-rank 8192 --scheduler balanced)
[ "$("$dcpack" "${common[@]}" --step-model dependency | json_model)" = dependency ] || fail "--step-model dependency"
[ "$("$dcpack" "${common[@]}" --cost "$tmp/dep.txt" --step-model barrier | json_model)" = barrier ] ||
  fail "--step-model after --cost"
[ "$("$dcpack" "${common[@]}" --step-model barrier --cost "$tmp/dep.txt" | json_model)" = barrier ] ||
  fail "--step-model before --cost"
# the same plan as the profile that names the model
"$dcpack" "${common[@]}" --step-model dependency >"$tmp/flag.json"
printf 'step_model = dependency\n' >"$tmp/dep_only.txt"
"$dcpack" "${common[@]}" --cost "$tmp/dep_only.txt" >"$tmp/profile.json"
python3 - "$tmp/flag.json" "$tmp/profile.json" <<'PY' || fail "--step-model and the profile key give different plans"
import json, sys
a, b = ({k: v for k, v in json.load(open(f))["stats"].items() if k not in ("cost_model", "plan_seconds", "plan_seconds_min")}
        for f in sys.argv[1:])
assert a == b, (a, b)
PY
st=0
"$dcpack" plan --trace "$trace" --step-model fast 2>"$tmp/err.txt" >/dev/null || st=$?
[ $st -eq 2 ] && grep -q "\-\-step-model: 'fast' is not barrier or dependency" "$tmp/err.txt" ||
  { cat "$tmp/err.txt"; fail "--step-model fast: exit $st"; }
# compare: a configuration's own profile is overridden too
"$dcpack" compare --generate longsft:n=256 --steps 1 --ranks 64 --max-seqlen-per-rank 8192 --format json --no-timing \
  --step-model dependency --config dynamic_cp --config "dynamic_cp:cost=$tmp/later.txt" | python3 -c '
import json, sys
assert [c["step_model"] for c in json.load(sys.stdin)["configurations"]] == ["dependency", "dependency"]' ||
  fail "compare --step-model"
echo "cli_step_model: ok"
