#!/usr/bin/env bash
# cli_output.sh - output that cannot be written is a failure: every command, and every help and
# version text, exits with status 1 and "cannot write the output" on standard error when standard
# output is /dev/full (the disk is full) or closed, whether the output fits in one buffer or not;
# --svg to /dev/full is "cannot write /dev/full".  The same commands succeed on a working output.
# usage: cli_output.sh <path-to-dcpack> <source-dir>
set -uo pipefail
dcpack="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
printf '100\n200\n300\n' >three.txt

fail() {
  echo "FAIL $*"
  head -c 600 err.txt
  failures=$((failures + 1))
}

# check ARGS...: dcpack ARGS succeeds on a file, and exits 1 with the message on /dev/full and closed
check() {
  local st=0
  "$dcpack" "$@" >out.txt 2>err.txt </dev/null || st=$?
  [ "$st" -eq 0 ] || fail "dcpack $* > file: exit $st, expected 0"
  [ -s out.txt ] || fail "dcpack $* > file: printed nothing"
  st=0
  "$dcpack" "$@" >/dev/full 2>err.txt </dev/null || st=$?
  if [ "$st" -ne 1 ]; then
    fail "dcpack $* > /dev/full: exit $st, expected 1"
  elif ! grep -q "cannot write the output" err.txt; then
    fail "dcpack $* > /dev/full: stderr does not say 'cannot write the output'"
  fi
  st=0
  "$dcpack" "$@" >&- 2>err.txt </dev/null || st=$?
  if [ "$st" -ne 1 ]; then
    fail "dcpack $* >&-: exit $st, expected 1"
  elif ! grep -q "cannot write the output" err.txt; then
    fail "dcpack $* >&-: stderr does not say 'cannot write the output'"
  fi
}

# plan: every scheduler (no --scheduler), one scheduler, text and JSON
check plan --no-timing
check plan --no-timing --format json
check plan --no-timing --summary
check plan --trace three.txt --ranks 4 --no-timing
check plan --scheduler balanced --no-timing
check plan --scheduler dynamic_cp --format json --no-timing
check plan --scheduler dp_balanced --summary --no-timing
# more output than one buffer holds
check plan --generate mlmdefault:n=4096 --ranks 64 --scheduler dynamic_cp --format json --no-timing
check compare --steps 2 --no-progress
check compare --steps 2 --format json --no-progress
check cost
check cost --format json
check generate mlmdefault:n=10
check generate mlmdefault:n=100000
check step --generate uniform:n=16,max=64 --dp 2
check step --generate uniform:n=16,max=64 --dp 2 --check
# help and version texts
check --help
check help
check --version
check help plan
for command in plan compare cost generate step; do
  check "$command" --help
done

# --svg: the drawing's file cannot be written
st=0
"$dcpack" plan --scheduler balanced --no-timing --svg /dev/full >out.txt 2>err.txt </dev/null || st=$?
if [ "$st" -ne 1 ]; then
  fail "dcpack plan --svg /dev/full: exit $st, expected 1"
elif ! grep -q "cannot write /dev/full" err.txt; then
  fail "dcpack plan --svg /dev/full: stderr does not say 'cannot write /dev/full'"
fi

if [ "$failures" -ne 0 ]; then
  echo "cli_output: $failures failures"
  exit 1
fi
echo "cli_output: all passed"
