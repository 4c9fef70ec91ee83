#!/usr/bin/env bash
# cli_step.sh - `dcpack step --check` verifies every rank of whole steps over in-process ranks; the
# trace is read whole, and the JSON report is valid JSON whatever the trace's name.
# usage: cli_step.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
trace="$src/tests/data/workloads/mlmdefault_n256_seed1.txt"
tmp="$(mktemp -d)"
out="$tmp/out.json"
trap 'rm -rf "$tmp"' EXIT

# heap_allocations_per_step is a number (0) or null (not measured), never a string; a measured
# step that allocated is a failure
heap_check() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
a, b = d["heap_allocations_per_step"], d["heap_bytes_per_step"]
if isinstance(a, bool) or not (a is None or isinstance(a, int)):
    sys.exit("heap_allocations_per_step is %r, not a number or null" % (a,))
if b is not None and b != 0:
    sys.exit("a step allocated %d bytes (heap_allocations_per_step %r)" % (b, a))
if a is None and b is not None:
    sys.exit("heap_allocations_per_step is null though 0 bytes were measured")
PY
}

run() {
  "$dcpack" step --trace "$trace" --max-sequences 256 --steps 2 --check "$@" >"$out"
  grep -q '"verified": true' "$out" || { echo "not verified: $*"; cat "$out"; exit 1; }
  grep -q '"statuses_agree": true' "$out" || { echo "statuses differ: $*"; exit 1; }
  heap_check "$out" || { echo "heap: $*"; cat "$out"; exit 1; }
  grep -q '"reference_over_dcpack"' "$out" || { echo "no bytes table: $*"; exit 1; }
}

run --dp 2 --cp 2 --tp 2 --pp 2 --scheduler dp_balanced --max-seqlen 8192 --pad-alignment 16
run --dp 2 --cp 2 --tp 1 --pp 4 --vpp 2 --scheduler dynamic_cp --mtp-stage 2 --mtp-virtual-stages 1 --tail extend_last --pad-alignment 8
run --dp 4 --cp 2 --tp 2 --pp 1 --scheduler dynamic_cp --cp-partition contiguous --pad-to-max --prepacked
run --dp 2 --cp 1 --tp 2 --pp 1 --scheduler dp_balanced --max-seqlen 8192 --tp-ranks-hold-data

# without an input, step takes the embedded default batch, as plan does (it was a usage error):
# the same 1024 sequences as --generate mlmdefault:n=1024,seed=1, verified on every rank
"$dcpack" step --dp 2 --check --steps 1 >"$out" || { echo "step without an input failed"; cat "$out"; exit 1; }
"$dcpack" step --dp 2 --check --steps 1 --generate mlmdefault:n=1024,seed=1 >"$tmp/generated.json"
python3 - "$out" "$tmp/generated.json" <<'PY' || { echo "the default batch"; exit 1; }
import json, sys
d, g = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert d["trace"].startswith("embedded default"), d["trace"]
assert d["verified"] is True and d["status"] == "DCP_OK", d
for key in ("sequences", "tokens", "microbatches", "tokens_computed_total", "bytes_received_total"):
    assert d[key] == g[key], (key, d[key], g[key])
assert d["sequences"] == 1024
PY

# bad usage is exit status 2
set +e
"$dcpack" step --trace "$trace" --scheduler nonsense >/dev/null 2>&1
[ $? -eq 2 ] || { echo "an unknown scheduler was not a usage error"; exit 1; }

# a trace longer than the old fixed 4096-sequence buffer: every sequence is stepped, as plan reads it
seq 5000 | sed 's/.*/64/' >"$tmp/long.txt"
"$dcpack" step --trace "$tmp/long.txt" --steps 1 >"$out" || { echo "5000 sequences failed"; exit 1; }
grep -q '"sequences": 5000,' "$out" || { echo "sequences dropped:"; head -5 "$out"; exit 1; }

# every JSON string is escaped: a trace path with a quote and a backslash, in the report and in the
# error object of a step that cannot run (dp_balanced cannot fill 8 DP ranks with 3 sequences)
odd="$tmp/odd \"name\" \\ x.txt"
printf '100\n200\n300\n' >"$odd"
"$dcpack" step --trace "$odd" --dp 2 --cp 2 --steps 1 --check >"$out"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["trace"] == sys.argv[2], d["trace"]' "$out" "$odd" ||
  { echo "report JSON"; cat "$out"; exit 1; }
heap_check "$out" || exit 1
st=0
"$dcpack" step --trace "$odd" --dp 8 --scheduler dp_balanced >"$out" 2>/dev/null || st=$?
[ $st -eq 1 ] || { echo "a step that cannot run: exit $st, expected 1"; exit 1; }
python3 - "$out" "$odd" <<'PY' || { echo "error JSON"; cat "$out"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["trace"] == sys.argv[2], d["trace"]
assert set(d["error"]) == {"status", "message"} and d["error"]["status"] == "DCP_ERR_INFEASIBLE", d
PY
echo "cli_step: ok"
