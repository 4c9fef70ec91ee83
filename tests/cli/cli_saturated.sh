#!/usr/bin/env bash
# cli_saturated.sh - a cost model whose costs saturate int64 on a batch (dcp_cost and the plan's sums give
# INT64_MAX: only known to be at least that) is said "saturated" by `dcpack plan`, `compare` and `cost`:
# never printed as a number (nor one above INT64_MAX from a double), never a ratio (efficiency 1.000) and
# never a winner among saturated values ("lowest", "best", "fastest", "cheapest").  The profile
# (quadratic = 4,000,000) is a plausible one; the lengths (millions of tokens) make it saturate.
# usage: cli_saturated.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
printf 'quadratic = 4000000\n' > big.txt
mkdir batches
printf '4000000\n3000000\n5000000\n' > batches/a.txt
printf '3500000\n4500000\n' > batches/b.txt
common=(--ranks 4 --max-seqlen-per-rank 2000000)

# plan, every scheduler: every makespan saturates, so no efficiency and no "lowest"
"$dcpack" plan --trace batches/a.txt --cost big.txt "${common[@]}" > plan.txt
grep -q "every scheduler's makespan saturates int64" plan.txt || fail "plan: no word of saturation"
! grep -q "has the lowest" plan.txt || fail "plan: names a lowest scheduler among saturated makespans"
! grep -Eq "9,223,372,036,854,775,80[78]| 1\.000 " plan.txt || fail "plan: prints a saturated value or efficiency 1.000"
[ "$(grep -Ec '^(dp_balanced|dynamic_cp|balanced).* saturated +saturated +saturated +saturated ' plan.txt)" -eq 3 ] ||
  { fail "plan: table rows do not say saturated"; cat plan.txt; }
# one scheduler: the text and JSON say so
"$dcpack" plan --trace batches/a.txt --cost big.txt "${common[@]}" --scheduler balanced --summary > one.txt
grep -q "makespan       saturated" one.txt && grep -q "efficiency     saturated" one.txt ||
  { fail "plan --scheduler: makespan/efficiency not said saturated"; cat one.txt; }
"$dcpack" plan --trace batches/a.txt --cost big.txt "${common[@]}" --format json > plan.json
python3 - plan.json <<'PY' || fail "plan --format json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["best"] is None and d["saturated"] is True, (d["best"], d["saturated"])
for c in d["comparison"]:
    s = c["stats"]
    assert s["saturated"] is True and s["efficiency"] is None and s["makespan"] == 2**63 - 1, s
PY
# and with the default model the same batch has a best, nothing saturated
"$dcpack" plan --trace batches/a.txt "${common[@]}" --format json > fine.json
python3 -c "import json,sys; d=json.load(open('fine.json')); assert d['best'] and d['saturated'] is False" ||
  fail "plan: the default model's plan is said saturated"

# compare: no number above INT64_MAX, no best among saturated rows
"$dcpack" compare --traces batches --cost big.txt "${common[@]}" --no-timing > compare.txt
grep -q "^no best: the makespans of some configurations that planned every batch saturate int64" compare.txt ||
  { fail "compare: no word of saturation"; cat compare.txt; }
! grep -Eq "9,223,372,036,854,775,80[78]|has the lowest| 1\.000 " compare.txt || fail "compare: a saturated value as a number or a winner"
"$dcpack" compare --traces batches --cost big.txt "${common[@]}" --format json > compare.json
python3 - compare.json <<'PY' || fail "compare --format json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["best"] is None and d["saturated"] is True
for c in d["configurations"]:
    assert c["saturated"] is True and c["makespan_mean"] is None and c["efficiency"] is None, c
PY
# a saturated configuration beside one that fits: the one that fits is best, said against the saturated one
"$dcpack" compare --traces batches --config "dynamic_cp:cost=big.txt" --config dynamic_cp "${common[@]}" --no-timing > mixed.txt
grep -q "^dynamic_cp has the lowest total makespan (.*); every other configuration's saturates int64" mixed.txt ||
  { fail "compare: mixed rows"; cat mixed.txt; }

# cost: saturated cells, no fastest/cheapest CP size among saturated costs
"$dcpack" cost --profile big.txt --lengths 4000000,2000000,1000 --max-cp 4 > cost.txt
grep -Eq "^ 4,000,000 +saturated +saturated +saturated +saturated +saturated$" cost.txt ||
  { fail "cost: a fully saturated length"; cat cost.txt; }
grep -Eq "^ 2,000,000 +saturated +[0-9,]+ +[0-9,]+ +4 +saturated$" cost.txt ||
  { fail "cost: cheapest among a saturated cp 1 cost"; cat cost.txt; }
grep -Eq "^     1,000 +[0-9,]+ +[0-9,]+ +[0-9,]+ +4 +1$" cost.txt || { fail "cost: a length that fits"; cat cost.txt; }
! grep -q "9,223,372,036,854,775,80" cost.txt || fail "cost: prints INT64_MAX as a cost"
"$dcpack" cost --profile big.txt --lengths 4000000,1000 --max-cp 2 --format json > cost.json
python3 - cost.json <<'PY' || fail "cost --format json"
import json, sys
s = json.load(open(sys.argv[1]))["samples"]
assert s[0]["fastest_cp"] is None and s[0]["cheapest_total_cp"] is None and s[0]["saturated"] is True, s[0]
assert s[1]["fastest_cp"] == 2 and s[1]["cheapest_total_cp"] == 1 and s[1]["saturated"] is False, s[1]
PY
[ "$failures" -eq 0 ] || exit 1
echo "cli_saturated: ok"
