#!/usr/bin/env bash
# cli_effort.sh - `dcpack plan --effort full|fast`: fast plans balanced with a makespan never above
# dynamic_cp's and is deterministic; full is the default (the same plan as without the option) and
# differs from fast where the search finds more; a bad level is a usage error naming the value.
# usage: cli_effort.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$1"
fail() { echo "FAIL $*"; exit 1; }
makespan() { python3 -c "import json,sys; print(json.load(sys.stdin)['stats']['model_makespan'])"; }
plan() { "$dcpack" plan --generate "$1" --ranks "$2" --repeat 1 --format json "${@:3}"; }
for spec in "bimodal:n=1024 128" "longsft:n=4096 512" "mlmdefault:n=4096 2048"; do
  set -- $spec
  dcp=$(plan "$1" "$2" --scheduler dynamic_cp | makespan)
  fast=$(plan "$1" "$2" --scheduler balanced --effort fast | makespan)
  again=$(plan "$1" "$2" --scheduler balanced --effort fast | makespan)
  full=$(plan "$1" "$2" --scheduler balanced --effort full | makespan)
  default=$(plan "$1" "$2" --scheduler balanced | makespan)
  [ "$fast" -le "$dcp" ] || fail "$spec: fast makespan $fast above dynamic_cp's $dcp"
  [ "$fast" = "$again" ] || fail "$spec: fast planned twice: $fast and $again"
  [ "$full" = "$default" ] || fail "$spec: --effort full $full, the default $default"
  [ "$full" -le "$fast" ] || fail "$spec: full $full above fast $fast"
  echo "ok $spec: dynamic_cp $dcp, fast $fast, full $full"
done
"$dcpack" plan --generate mlmdefault:n=64 --scheduler balanced --summary --effort fast --no-timing | grep -q "balanced effort fast" \
  || fail "the text header does not name the fast level"
status=0
err=$("$dcpack" plan --generate mlmdefault:n=64 --scheduler balanced --effort slow 2>&1) || status=$?
[ "$status" -eq 2 ] || fail "--effort slow: exit status $status, expected 2"
grep -q "'slow' is not full or fast" <<< "$err" || fail "--effort slow: message '$err'"
echo "PASS cli_effort"
