#!/usr/bin/env bash
# cli_svg.sh - `dcpack plan --svg FILE` writes well-formed SVG with one box (rect class "seq") per
# sequence per rank that holds it, exactly the plan's (id, rank) pairs, one slowest-rank marker per
# microbatch and a lower-bound line; at 8 ranks and at 512.  An unwritable path is exit status 1.
# usage: cli_svg.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

check() {
  local name="$1"
  shift
  "$dcpack" plan --format json --svg "$tmp/$name.svg" "$@" >"$tmp/$name.json"
  python3 - "$tmp/$name.svg" "$tmp/$name.json" <<'PY' || { echo "FAIL svg $name"; exit 1; }
import json, sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()          # raises on malformed XML
doc = json.load(open(sys.argv[2]))
plan = doc["plan"]
assert root.tag == ns + "svg", root.tag
boxes = [e for e in root.iter(ns + "rect") if e.get("class") == "seq"]
got = sorted((int(e.get("data-id")), int(e.get("data-rank"))) for e in boxes)
want = sorted((i, r) for mb in plan for r, ids in enumerate(mb) for i in ids)
assert got == want, "boxes %d, plan holds %d (id, rank) pairs" % (len(got), len(want))
for e in boxes:
    assert float(e.get("width")) >= 0 and float(e.get("height")) > 0
markers = [e for e in root.iter(ns + "polygon") if e.get("class") == "slowest-marker"]
assert len(markers) == len(plan), "%d slowest markers for %d microbatches" % (len(markers), len(plan))
bars = [e for e in root.iter(ns + "rect") if e.get("class") == "slowest"]
assert len(bars) >= len(plan)
groups = [e for e in root.iter(ns + "g") if e.get("class") == "microbatch"]
assert len(groups) == len(plan)
assert any(e.get("class") == "lower-bound" for e in root.iter(ns + "line")), "no lower-bound line"
# the slowest-rank marks come after every box, so no later microbatch covers them
order = [e.get("class") for e in root.iter() if e.get("class") in ("seq", "slowest")]
assert order.index("slowest") > len(order) - 1 - order[::-1].index("seq"), "a box is drawn over a slowest mark"
for e in bars:
    assert float(e.get("width")) >= min(3.0, 1.0) and float(e.get("height")) >= 3.0, "slowest mark too small to see"
# the last microbatch is labelled, whatever its width
labels = [int(e.text) for e in root.iter(ns + "text") if e.get("class") == "microbatch-label"]
assert labels and labels[-1] == len(plan) - 1, "last microbatch %d unlabelled (labels %s)" % (len(plan) - 1, labels[-3:])
# a time axis with ticks: ms with a calibrated profile, cost units without
axis = [e for e in root.iter(ns + "g") if e.get("class") == "time-axis"]
assert len(axis) == 1, "no time axis"
ticks = [e for e in axis[0].iter(ns + "text") if e.get("class") == "tick"]
assert len(ticks) >= 3, "%d ticks" % len(ticks)
title = "".join(e.text or "" for e in axis[0].iter(ns + "text") if e.get("class") != "tick")
want_ms = "time_unit_ps" in doc.get("stats", {}) or "time_unit_ps" in doc
assert ("time (ms)" in title) == want_ms, "axis title %r, profile in use: %s" % (title, want_ms)
print("svg ok: %d boxes, %d microbatches" % (len(boxes), len(plan)))
PY
}
check r8 --scheduler dynamic_cp --ranks 8 --max-seqlen-per-rank 8192 --generate mlmdefault:n=256
check r8_dpb --scheduler dp_balanced --cp 2 --ranks 8 --generate mlmdefault:n=256
check r32 --scheduler dynamic_cp
check r512 --scheduler dynamic_cp --ranks 512 --max-seqlen-per-rank 8192 --generate longsft:n=4096
check r24 --scheduler dynamic_cp --ranks 24 --max-seqlen-per-rank 4096 --generate longsft:n=256
check r128_profile --scheduler balanced --ranks 128 --max-seqlen-per-rank 16384 --generate longsft:n=1024 \
  --cost "$src/bench/profiles/llama8b-layer-h100.profile"
check r32_short --scheduler dynamic_cp --ranks 32 --max-seqlen-per-rank 8192 --generate uniform:min=16,max=64,n=4096
cp "$src/tests/data/workloads/mlmdefault_n256_seed1.txt" "$tmp/odd <&> name.txt"
check odd_name --scheduler dynamic_cp --trace "$tmp/odd <&> name.txt"

st=0
"$dcpack" plan --scheduler dynamic_cp --summary --svg "$tmp/no/such/dir/plan.svg" >/dev/null 2>"$tmp/err" || st=$?
[ $st -eq 1 ] && grep -q "cannot write .*: No such file or directory" "$tmp/err" ||
  { echo "FAIL unwritable --svg: exit $st, $(cat "$tmp/err")"; exit 1; }
st=0
"$dcpack" plan --svg "$tmp/p.svg" >/dev/null 2>"$tmp/err" || st=$?
[ $st -eq 2 ] || { echo "FAIL --svg without --scheduler: exit $st"; exit 1; }
echo "cli_svg: ok"
