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
# the step's terms: cp_gather.<cp> adds cp_gather * s, undivided, at that CP size; the others round-trip
cat >"$tmp/step.txt" <<'P'
cp_gather.2 = 100
cp_gather.8+ = 70
small_knee = 4096
small_slope = 1100
margin_ppm = 20000
pipeline_schedule = interleaved
forward_ppm = 400000
first_stage_per_token = 5
last_stage_per_token = 9
P
"$dcpack" cost --format json --lengths 1000 --max-cp 16 >"$tmp/plain.json"
"$dcpack" cost --profile "$tmp/step.txt" --format json --lengths 1000 --max-cp 16 >"$tmp/step.json"
python3 - "$tmp/plain.json" "$tmp/step.json" <<'PY'
import json, sys
plain, step = (json.load(open(p))["samples"][0]["cost"] for p in sys.argv[1:3])
added = {cp: step[cp] - plain[cp] for cp in plain}
assert added == {"1": 0, "2": 100 * 1000, "4": 0, "8": 70 * 1000, "16": 70 * 1000}, added
PY
"$dcpack" cost --profile "$tmp/step.txt" --format profile >"$tmp/step_printed.txt"
for line in "cp_gather.2 = 100" "cp_gather.4 = 0" "cp_gather.65536 = 70" "small_knee = 4096" "small_slope = 1100" \
            "margin_ppm = 20000" "pipeline_schedule = interleaved" "forward_ppm = 400000" \
            "first_stage_per_token = 5" "last_stage_per_token = 9"; do
  grep -qx "$line" "$tmp/step_printed.txt" || { echo "FAIL printed profile lacks '$line'"; cat "$tmp/step_printed.txt"; exit 1; }
done
"$dcpack" cost --profile "$tmp/step_printed.txt" --format profile | tail -n +2 | cmp -s - <(tail -n +2 "$tmp/step_printed.txt") ||
  { echo "FAIL the step's terms do not round-trip"; exit 1; }

# a byte-order mark at the start is accepted (it is the encoding, not part of a key)
printf '\xef\xbb\xbfquadratic = 3\r\nkv.2 = 4\r\n' >"$tmp/bom.txt"
"$dcpack" cost --profile "$tmp/bom.txt" --format profile | grep -qx "quadratic = 3" || { echo "FAIL BOM"; exit 1; }

# refused, exit 3, with the file, line, key and value named (the library's messages: python/tests/test_cost_profile.py
# checks that the Python package says the same)
refused() { # text expected-part
  printf '%b' "$1" >"$tmp/bad.txt"
  if "$dcpack" cost --profile "$tmp/bad.txt" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
    echo "FAIL accepted: $1"; exit 1
  fi
  rc=0; "$dcpack" cost --profile "$tmp/bad.txt" >/dev/null 2>&1 || rc=$?
  [ "$rc" = 3 ] || { echo "FAIL exit $rc for: $1"; exit 1; }
  grep -qF -- "$tmp/bad.txt:$2" "$tmp/err.txt" || { echo "FAIL message for '$1':"; cat "$tmp/err.txt"; exit 1; }
}
refused 'quadratic = \xd9\xa5\n' "1: quadratic = '٥': values are non-negative integers in ASCII digits (U+0665 at column 13 is not ASCII)"
refused 'kv.\xd9\xa8 = 7\n' "1: kv.٨: the CP size after 'kv.' must be a power of two from 2 to 65536 (U+0668 at column 4 is not ASCII)"
refused 'quadratic = 1\f2\n' "1: quadratic = '1\\x0c2': values are non-negative integers in ASCII digits (U+000C, a control character"
refused 'quadratic = 5\v\n' "1: quadratic = '5\\x0b': values are non-negative integers in ASCII digits (U+000B, a control character"
refused 'quadratic =\xc2\xa05\n' "1: quadratic = '"$'\xc2\xa0'"5': values are non-negative integers in ASCII digits (U+00A0 at column 12 is not ASCII)"
refused 'quadratic = \xc2\xb2\n' "1: quadratic = '²': values are non-negative integers in ASCII digits (U+00B2 at column 13 is not ASCII)"
refused '# ok\nlinear = 5 # \xff\n' "2: invalid UTF-8 (byte 0xff) at column 14: a cost profile is UTF-8 text"
refused 'quadratic = 1000000000000\n' "1: quadratic = 1000000000000: one microbatch of 131072 tokens at CP 1 would cost"
refused 'margin_ppm = 1000000\n' "1: margin_ppm = 1000000: a margin is below 1000000 parts per million"
refused 'pipeline_schedule = gpipe\n' "1: pipeline_schedule = 'gpipe' is not 1f1b or interleaved"
refused 'cp_gather.3 = 1\n' "1: cp_gather.3: the CP size after 'cp_gather.' must be a power of two"
refused 'quadratic = 99999999999999999999\n' "1: quadratic = '99999999999999999999' is above INT64_MAX"
# and `plan` refuses the saturating profile too, instead of planning with INT64_MAX makespans
printf 'quadratic = 1000000000000\n' >"$tmp/slip.txt"
rc=0; "$dcpack" plan --cost "$tmp/slip.txt" >/dev/null 2>"$tmp/err.txt" || rc=$?
[ "$rc" = 3 ] && grep -q "a unit slip" "$tmp/err.txt" || { echo "FAIL plan with a saturating profile: exit $rc"; cat "$tmp/err.txt"; exit 1; }
# a shipped profile by name (".profile" optional); an unknown name lists the shipped ones
"$dcpack" plan --scheduler balanced --cost llama8b-layer-h100 --summary --no-timing >"$tmp/named.txt" ||
  { echo "FAIL --cost llama8b-layer-h100"; exit 1; }
grep -q "cost model: llama8b-layer-h100" "$tmp/named.txt" && grep -q "ms" "$tmp/named.txt" ||
  { echo "FAIL --cost by name: no profile or no ms"; cat "$tmp/named.txt"; exit 1; }
"$dcpack" plan --scheduler balanced --cost llama8b-layer-h100.profile --summary --no-timing >/dev/null ||
  { echo "FAIL --cost NAME.profile"; exit 1; }
rc=0; "$dcpack" plan --cost no-such-profile >/dev/null 2>"$tmp/err.txt" || rc=$?
[ "$rc" = 3 ] && grep -q "shipped profiles: .*llama8b-layer-h100" "$tmp/err.txt" ||
  { echo "FAIL unknown profile name: exit $rc"; cat "$tmp/err.txt"; exit 1; }
echo "cli_cost: ok"
