#!/usr/bin/env bash
# cli_plan_default.sh - `dcpack plan` with no arguments: the embedded default batch planned by every
# scheduler, printed exactly as tests/data/cli/plan_default.txt (plan times aside: --no-timing prints
# '-' for them), within a few seconds, exit status 0.
# When a scheduler's plans change on purpose (or one lands), regenerate the golden file with
#   UPDATE_GOLDEN=1 bash tests/cli/cli_plan_default.sh build/dcpack .
# and review the diff.
# usage: cli_plan_default.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
src="$2"
golden="$src/tests/data/cli/plan_default.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$dcpack" plan --no-timing >"$tmp/out.txt"
if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$tmp/out.txt" "$golden"
  echo "cli_plan_default: wrote $golden"
  exit 0
fi
if ! diff -u "$golden" "$tmp/out.txt"; then
  echo "cli_plan_default: output differs from $golden (if intended: UPDATE_GOLDEN=1 bash $0 $dcpack $src)"
  exit 1
fi

# docs/program.md prints this run's output: it must be this output
python3 - "$src/docs/program.md" "$golden" <<'PY' || exit 1
import sys
doc = open(sys.argv[1]).read()
start = doc.index("run, `dcpack plan --no-timing`:")
block = doc[doc.index("```\n", start) + 4:]
block = block[:block.index("```\n")]
if block != open(sys.argv[2]).read():
    sys.exit("cli_plan_default: docs/program.md's default run differs from the program's output")
PY

# without --no-timing: the same text except the plan-time column, and fast
start=$(date +%s%N)
"$dcpack" plan >"$tmp/timed.txt"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$elapsed_ms" -lt 5000 ] || { echo "cli_plan_default: dcpack plan took $elapsed_ms ms (more than 5 s)"; exit 1; }
normalise() { sed -E 's/ +([0-9.]+ (us|ms|s)|-)$/ T/' "$1"; }
diff -u <(normalise "$golden") <(normalise "$tmp/timed.txt") ||
  { echo "cli_plan_default: timed output differs beyond the plan-time column"; exit 1; }
grep -Eq ' [0-9.]+ (us|ms|s)$' "$tmp/timed.txt" || { echo "cli_plan_default: no plan times printed"; exit 1; }
# exactly one conclusion line naming a scheduler, and one row per scheduler
grep -Ec '^(dp_balanced|dynamic_cp|balanced)( \(cp [0-9]+\))? +([0-9]|not available|not configurable|failed)' "$tmp/out.txt" | grep -qx 3 || { echo "cli_plan_default: not three scheduler rows"; exit 1; }
grep -Eq '^(dp_balanced|dynamic_cp|balanced)[^ ]* .*has the lowest makespan|is the only scheduler' "$tmp/out.txt" ||
  { echo "cli_plan_default: no conclusion line"; exit 1; }
# text output points only to documents the repository ships
"$dcpack" cost >"$tmp/cost.txt"
"$dcpack" compare --generate mlmdefault:n=64 --steps 1 --no-timing >"$tmp/compare.txt"
for doc in $(cat "$tmp/out.txt" "$tmp/cost.txt" "$tmp/compare.txt" | grep -Eo '[A-Za-z0-9_./-]+\.md' | sort -u); do
  [ -e "$src/$doc" ] || { echo "cli_plan_default: the output points to $doc, which the repository lacks"; exit 1; }
done
echo "cli_plan_default: ok (${elapsed_ms} ms)"
