#!/usr/bin/env bash
# cli_compare.sh - `dcpack compare` over a directory of traces and over generated steps: one row
# per configuration whose aggregates equal what `dcpack plan` reports batch by batch; a progress
# bar on standard error only when it is a terminal; exit status 1 (table still printed) when a
# configuration fails on some batch.
# usage: cli_compare.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/batches"
cp "$src"/tests/data/workloads/*_n256_seed1.txt "$tmp/batches/"
touch "$tmp/batches/.hidden"

# aggregates against per-batch plans: makespan, lower bound, microbatches, CP sizes, padding
"$dcpack" compare --traces "$tmp/batches" --ranks 64 --max-seqlen-per-rank 8192 --format json --repeat 2 \
  --config dp_balanced:cp=16 --config dynamic_cp --config dynamic_cp:min_cp_size=4,ranks=32 >"$tmp/dir.json" 2>"$tmp/dir.err"
[ ! -s "$tmp/dir.err" ] || { echo "FAIL: stderr not empty without a terminal:"; cat "$tmp/dir.err"; exit 1; }
python3 - "$dcpack" "$tmp/dir.json" <<'PY' || { echo "FAIL compare --traces"; exit 1; }
import json, os, subprocess, sys
dcpack, doc = sys.argv[1], json.load(open(sys.argv[2]))
batches = doc["batches"]
assert [os.path.basename(b) for b in batches] == sorted(os.path.basename(b) for b in batches) and len(batches) == 4, batches
assert [c["label"] for c in doc["configurations"]] == ["dp_balanced:cp=16", "dynamic_cp", "dynamic_cp:min_cp_size=4,ranks=32"]
extra = {"dp_balanced:cp=16": ["--scheduler", "dp_balanced", "--cp", "16"],
         "dynamic_cp": ["--scheduler", "dynamic_cp"],
         "dynamic_cp:min_cp_size=4,ranks=32": ["--scheduler", "dynamic_cp", "--min-cp-size", "4", "--ranks", "32"]}
for c in doc["configurations"]:
    assert c["planned"] == 4 and c["failed"] == 0 and c["first_error"] is None, c
    runs = []
    for b in batches:
        out = subprocess.run([dcpack, "plan", "--format", "json", "--trace", b, "--ranks", "64",
                              "--max-seqlen-per-rank", "8192", "--repeat", "1"] + extra[c["label"]],
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out)["stats"])
    ranks, m = runs[0]["ranks"], runs[0]["max_seqlen_per_rank"]
    assert c["ranks"] == ranks, (c["ranks"], ranks)
    near = lambda a, b: abs(a - b) <= 1e-6 * max(1.0, abs(b))
    assert near(c["makespan_mean"], sum(r["makespan"] for r in runs) / 4), c["label"]
    assert near(c["lower_bound_mean"], sum(r["lower_bound"] for r in runs) / 4), c["label"]
    assert near(c["microbatches_mean"], sum(r["microbatches"] for r in runs) / 4), c["label"]
    assert near(c["efficiency"], sum(r["lower_bound"] for r in runs) / sum(r["makespan"] for r in runs)), c["label"]
    assert near(c["mean_cp_size"], sum(r["mean_cp_size"] * r["sequences"] for r in runs) / sum(r["sequences"] for r in runs))
    slots = sum(r["microbatches"] * ranks * m for r in runs)
    assert near(c["padding_waste"], 1 - sum(r["total_tokens"] for r in runs) / slots), c["label"]
    assert near(c["imbalance"], sum(r["max_rank_sum"] for r in runs) * ranks / sum(r["busy_sum"] for r in runs))
    assert c["step_model"] == "barrier" and all(r["step_model"] == "barrier" for r in runs), c["label"]
    assert near(c["dependency_makespan_mean"], sum(r["dependency_makespan"] for r in runs) / 4), c["label"]
    assert near(c["dependency_lower_bound_mean"], sum(r["dependency_lower_bound"] for r in runs) / 4), c["label"]
    assert near(c["model_makespan_mean"], c["makespan_mean"]) and near(c["model_lower_bound_mean"], c["lower_bound_mean"])
    assert 0 < c["plan_seconds_median"] <= c["plan_seconds_p99"], c
assert doc["best"] in [c["label"] for c in doc["configurations"]]
print("compare --traces: aggregates match per-batch plans")
PY

# generated steps: batch k is SPEC with seed + k
"$dcpack" compare --generate mlmdefault:n=512,seed=3 --steps 3 --scheduler dynamic_cp --format json >"$tmp/gen.json"
python3 - "$dcpack" "$tmp/gen.json" <<'PY' || { echo "FAIL compare --generate"; exit 1; }
import json, subprocess, sys
dcpack, doc = sys.argv[1], json.load(open(sys.argv[2]))
assert doc["batches"] == ["mlmdefault:n=512,seed=3", "mlmdefault:n=512,seed=4", "mlmdefault:n=512,seed=5"], doc["batches"]
total = 0
for k in range(3):
    out = subprocess.run([dcpack, "plan", "--format", "json", "--generate", "mlmdefault:n=512,seed=%d" % (3 + k),
                          "--scheduler", "dynamic_cp", "--repeat", "1"], check=True, capture_output=True, text=True).stdout
    total += json.loads(out)["stats"]["makespan"]
c = doc["configurations"][0]
assert abs(c["makespan_mean"] - total / 3) < 1, (c["makespan_mean"], total / 3)
print("compare --generate: batches are seed + k")
PY

# the text table: a header, one row per configuration, a conclusion; '-' for times with --no-timing
"$dcpack" compare --steps 2 --no-timing >"$tmp/table.txt"
grep -q "^configuration .*makespan/batch .*dependency/b. .*efficiency .*imbalance .*mean CP .*padding .*plan med. .*plan p99" "$tmp/table.txt" ||
  { echo "FAIL table header"; cat "$tmp/table.txt"; exit 1; }
for row in "dp_balanced (cp 2)" dynamic_cp balanced; do
  grep -q "^$row " "$tmp/table.txt" || { echo "FAIL no row for $row"; cat "$tmp/table.txt"; exit 1; }
done
grep -Eq "^dynamic_cp +2 +[0-9.]+ +[0-9,]+ +[0-9,]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +-$" "$tmp/table.txt" ||
  { echo "FAIL dynamic_cp row"; cat "$tmp/table.txt"; exit 1; }
grep -Eq "has the lowest total makespan|is the only configuration" "$tmp/table.txt" || { echo "FAIL no conclusion"; exit 1; }

# a progress bar when standard error is a terminal, none otherwise
python3 - "$dcpack" <<'PY' || { echo "FAIL progress bar"; exit 1; }
import os, pty, subprocess, sys
master, slave = pty.openpty()
p = subprocess.Popen([sys.argv[1], "compare", "--steps", "3", "--scheduler", "dynamic_cp"],
                     stdout=subprocess.PIPE, stderr=slave)
os.close(slave)
err = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    err += chunk
p.wait()
assert p.returncode == 0, p.returncode
assert b"3/3" in err and b"[" in err and b"#" in err, err
assert b"dynamic_cp" in p.stdout.read()
print("progress bar drawn on a terminal")
PY
python3 - "$dcpack" <<'PY' || { echo "FAIL --no-progress"; exit 1; }
import os, pty, subprocess, sys
master, slave = pty.openpty()
p = subprocess.Popen([sys.argv[1], "compare", "--steps", "2", "--scheduler", "dynamic_cp", "--no-progress"],
                     stdout=subprocess.DEVNULL, stderr=slave)
os.close(slave)
os.set_blocking(master, False)
p.wait()
try:
    err = os.read(master, 4096)
except OSError:
    err = b""
assert b"#" not in err, err
PY

# a configuration that fails on a batch: exit 1, the table still printed, the failure on stderr
printf '100\n200\n300\n' >"$tmp/batches/three.txt"
st=0
"$dcpack" compare --traces "$tmp/batches" --ranks 8 --max-seqlen-per-rank 131072 --config dp_balanced:cp=1 --config dynamic_cp \
  >"$tmp/fail.txt" 2>"$tmp/fail.err" || st=$?
[ $st -eq 1 ] || { echo "FAIL a failing batch: exit $st"; exit 1; }
grep -q "^dp_balanced:cp=1 .*4/5" "$tmp/fail.txt" || { echo "FAIL partial row"; cat "$tmp/fail.txt"; exit 1; }
grep -q "dp_balanced:cp=1 failed on 1 of 5 batches; first: .*three.txt" "$tmp/fail.err" || { echo "FAIL failure message"; cat "$tmp/fail.err"; exit 1; }
echo "cli_compare: ok"
