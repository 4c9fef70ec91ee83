#!/usr/bin/env bash
# cli_generate.sh - `dcpack generate` / `--generate` draw Python's random.Random sequences exactly:
# every family equals the traces workloads.py wrote (tests/data/workloads) and a Python
# re-statement of workloads.py for other sizes and seeds; the generic lognormal and uniform
# families equal their documented Python formulas; bad specs are usage errors.
# usage: cli_generate.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for f in "$src"/tests/data/workloads/*_n*_seed*.txt; do
  base="$(basename "$f" .txt)"              # family_nN_seedS
  family="${base%%_n*}"; rest="${base#*_n}"; n="${rest%%_seed*}"; seed="${rest#*_seed}"
  "$dcpack" generate "$family:n=$n,seed=$seed" | cmp -s - "$f" || { echo "FAIL generate $family:n=$n,seed=$seed != $f"; exit 1; }
done

# workloads.py's families (as written there) and the generic ones (as dcpack generate --help states)
cat >"$tmp/ref.py" <<'PY'
import math, random, sys

def lognormal(rng, n, mean, sigma, lo, hi):
    mu = math.log(mean) - sigma * sigma / 2
    return [int(min(max(rng.lognormvariate(mu, sigma), lo), hi)) for _ in range(n)]

FAMILIES = {
    "mlmdefault": lambda rng, n: lognormal(rng, n, 1024, 1.5, 128, 8192),
    "longsft": lambda rng, n: lognormal(rng, n, 4096, 1.2, 256, 131072),
    "bimodal": lambda rng, n: [
        (int(min(max(rng.lognormvariate(math.log(1024) - 0.125, 0.5), 256), 4096))
         if rng.random() < 0.9 else rng.randint(32768, 131072)) for _ in range(n)],
    "uniform32k": lambda rng, n: [rng.randint(1, 32768) for _ in range(n)],
}
spec = sys.argv[1]
family, _, keys = spec.partition(":")
kv = dict(item.split("=") for item in keys.split(",")) if keys else {}
n, seed = int(kv.get("n", 1024)), int(kv.get("seed", 1))
rng = random.Random(f"{family}/{n}/{seed}")
if family in FAMILIES:
    out = FAMILIES[family](rng, n)
elif family == "lognormal":
    out = lognormal(rng, n, float(kv.get("mean", 1024)), float(kv.get("sigma", 1.5)),
                    int(kv.get("min", 128)), int(kv.get("max", 8192)))
else:
    out = [rng.randint(int(kv.get("min", 1)), int(kv.get("max", 32768))) for _ in range(n)]
print("\n".join(map(str, out)))
PY
for spec in mlmdefault:n=3000,seed=7 longsft:n=2048,seed=2 bimodal:n=5000,seed=11 uniform32k:n=777,seed=3 \
            mlmdefault lognormal:mean=2048.5,sigma=0.9,min=64,max=65536,n=4096,seed=5 \
            lognormal:sigma=2.5,n=2000 uniform:min=5,max=1500000000,n=3000,seed=9 uniform:min=7,max=7,n=10; do
  python3 "$tmp/ref.py" "$spec" >"$tmp/expected.txt"
  "$dcpack" generate "$spec" >"$tmp/got.txt"
  cmp -s "$tmp/expected.txt" "$tmp/got.txt" || { echo "FAIL generate $spec differs from Python"; diff "$tmp/expected.txt" "$tmp/got.txt" | head; exit 1; }
done
# --step K is seed + K (batch K of dcpack compare --generate)
"$dcpack" generate mlmdefault:n=100,seed=3 --step 4 | cmp -s - <("$dcpack" generate mlmdefault:n=100,seed=7) ||
  { echo "FAIL --step does not add to the seed"; exit 1; }

expect_usage() {
  local st=0
  "$dcpack" generate "$@" >/dev/null 2>"$tmp/err" || st=$?
  [ $st -eq 2 ] || { echo "FAIL generate $*: exit $st, expected 2"; exit 1; }
  grep -q "^dcpack generate: " "$tmp/err" || { echo "FAIL generate $*: no message"; exit 1; }
}
expect_usage nosuchfamily
expect_usage mlmdefault:mean=5
expect_usage mlmdefault:n=0
expect_usage mlmdefault:n=abc
expect_usage lognormal:sigma=x
expect_usage lognormal:mean=-1
expect_usage uniform:min=10,max=5
expect_usage mlmdefault:n
expect_usage
# past int64 is out of range like any other value outside the bounds, not "not an integer"
for spec in uniform:n=99999999999999999999 uniform:seed=9223372036854775808 uniform:seed=-99999999999999999999 \
            uniform:max=99999999999999999999 lognormal:min=18446744073709551616 uniform:n=99999999999; do
  expect_usage "$spec"
  key="${spec#*:}"; key="${key%%=*}"; value="${spec#*=}"
  grep -q -- "--generate $key: $value is outside \[" "$tmp/err" ||
    { echo "FAIL generate $spec: not said out of range:"; cat "$tmp/err"; exit 1; }
  ! grep -q "not an integer" "$tmp/err" || { echo "FAIL generate $spec: said not an integer"; exit 1; }
done
expect_usage uniform:n=1e3
grep -q "'1e3' is not an integer" "$tmp/err" || { echo "FAIL generate n=1e3 message"; cat "$tmp/err"; exit 1; }
grep -q "unknown family 'nosuchfamily'" <("$dcpack" generate nosuchfamily 2>&1) || { echo "FAIL unknown family message"; exit 1; }
echo "cli_generate: ok"
