#!/usr/bin/env bash
# cli_cost.sh - `dcpack cost`: the effective model (defaults or a profile over them), sample costs
# equal to the cost model's formula evaluated independently, profile semantics (comments, hidden,
# kv, kv.<cp>, kv.<cp>+, later lines win), and a printed profile that loads back to the same model.
# usage: cli_cost.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/model.py" <<'PY'
import json, sys
def cost(model, s, cp):
    quad = model["quadratic"] * s * s
    work = quad + model["linear"] * s
    fixed = 0
    if cp > 1:
        exposed = model["kv"][str(cp)] * s * (cp - 1) - quad
        work += max(exposed, 0)
        fixed = model["round_latency"] * (cp - 1)
    return work // cp + fixed
doc = json.load(open(sys.argv[1]))
expected = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
model = doc["model"]
if expected is not None:
    for key, value in expected.items():
        got = model["kv"][key[3:]] if key.startswith("kv.") else model[key]
        assert got == value, (key, got, value)
for sample in doc["samples"]:
    s = sample["length"]
    costs = {int(cp): c for cp, c in sample["cost"].items()}
    for cp, c in costs.items():
        assert c == cost(model, s, cp), (s, cp, c, cost(model, s, cp))
    assert sample["fastest_cp"] == min(costs, key=lambda cp: (costs[cp], cp))
    assert sample["cheapest_total_cp"] == min(costs, key=lambda cp: (cp * costs[cp], cp))
print("cost ok: %d samples" % len(doc["samples"]))
PY

"$dcpack" cost --format json --lengths 1,128,1000,4096,8192,100000,2000000000 --max-cp 65536 >"$tmp/default.json"
python3 "$tmp/model.py" "$tmp/default.json" \
  '{"quadratic": 1, "linear": 49152, "round_latency": 491520, "microbatch_overhead": 819200, "kv.2": 492, "kv.8": 492, "kv.16": 3934, "kv.65536": 3934}'

cat >"$tmp/profile.txt" <<'P'
# a profile of a wider model on slower links
hidden = 8192            # linear = 98304
linear = 5               # overridden below: later lines win
hidden = 6144
kv = 700
kv.16+ = 6000
kv.64 = 9000             # one CP size only
round_latency = 250000
microbatch_overhead = 2000000

P
"$dcpack" cost --profile "$tmp/profile.txt" --format json --lengths 512,4096,65536 --max-cp 128 >"$tmp/profile.json"
python3 "$tmp/model.py" "$tmp/profile.json" \
  '{"quadratic": 1, "linear": 73728, "round_latency": 250000, "microbatch_overhead": 2000000, "kv.2": 700, "kv.8": 700, "kv.16": 6000, "kv.32": 6000, "kv.64": 9000, "kv.128": 6000, "kv.65536": 6000}'

# the printed profile loads back to the same model
"$dcpack" cost --profile "$tmp/profile.txt" --format profile >"$tmp/printed.txt"
"$dcpack" cost --profile "$tmp/printed.txt" --format profile | tail -n +2 | cmp -s - <(tail -n +2 "$tmp/printed.txt") ||
  { echo "FAIL printed profile does not round-trip"; exit 1; }
"$dcpack" cost --format profile | grep -qx "kv.16 = 3934" || { echo "FAIL default profile"; exit 1; }

# the text report: the model, one row per length, one column per CP size
"$dcpack" cost --profile "$tmp/profile.txt" --lengths 1024,8192 --max-cp 8 >"$tmp/text.txt"
grep -q "^dcpack cost: .*profile.txt" "$tmp/text.txt" || { echo "FAIL text header"; exit 1; }
grep -q "^  linear = 73728$" "$tmp/text.txt" || { echo "FAIL text model"; cat "$tmp/text.txt"; exit 1; }
grep -q "^  kv.64 = 9000$" "$tmp/text.txt" && grep -q "^  kv.128+ = 6000$" "$tmp/text.txt" || { echo "FAIL kv lines"; cat "$tmp/text.txt"; exit 1; }
grep -Eq "^ +length +cp 1 +cp 2 +cp 4 +cp 8 +fastest +cheapest$" "$tmp/text.txt" || { echo "FAIL table header"; cat "$tmp/text.txt"; exit 1; }
[ "$(grep -Ec '^ +(1,024|8,192) ' "$tmp/text.txt")" = 2 ] || { echo "FAIL table rows"; cat "$tmp/text.txt"; exit 1; }
echo "cli_cost: ok"
