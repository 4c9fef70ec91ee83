#!/usr/bin/env bash
# cli_input_numbers.sh - what a number is in the program's input files.  A length in a text or CSV
# trace is digits only (spaces around it allowed, leading zeros too): no sign.  In JSON Lines it is a
# JSON number (no sign but '-', no leading zero) that is a positive integer, and the length key
# appears once in a record.  A cost profile's values, and the CP size in kv.<cp>, are digits only.
# Anything else is exit status 3 with the file, the line and the value named.
# usage: cli_input_numbers.sh <path-to-dcpack> <source-dir>
set -uo pipefail
dcpack="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0

# expect STATUS PATTERN -- ARGS...: exit status STATUS, stderr (status 3) or stdout (status 0) matching PATTERN
expect() {
  local want="$1" pattern="$2"
  shift 3
  local st=0
  "$dcpack" "$@" >out.txt 2>err.txt </dev/null || st=$?
  local where=err.txt
  [ "$want" -eq 0 ] && where=out.txt
  if [ "$st" -ne "$want" ]; then
    echo "FAIL dcpack $*: exit $st, expected $want"
    head -c 600 err.txt
    failures=$((failures + 1))
  elif ! grep -Eq -- "$pattern" "$where"; then
    echo "FAIL dcpack $*: $where does not match /$pattern/:"
    head -c 600 "$where"
    failures=$((failures + 1))
  fi
}

# text
printf '100\n+42\n' >plus.txt
printf '100\n + 42\n' >plus_space.txt
printf '100\n042\n 7 \n' >zeros.txt
expect 3 "plus.txt:2: '\+42' is not a length" -- plan --trace plus.txt
expect 3 "plus_space.txt:2: '\+ 42' is not a length" -- plan --trace plus_space.txt
expect 3 "plus.txt:2: '\+42' is not a length" -- step --trace plus.txt --dp 2
expect 0 "3 sequences, 149 tokens" -- plan --trace zeros.txt --scheduler dynamic_cp --summary --no-timing

# CSV
printf 'id,len\n0,100\n1,+42\n' >plus.csv
printf 'id,len\n0,100\n1,"+42"\n' >plus_quoted.csv
printf 'id,len\n0,042\n' >zeros.csv
expect 3 "plus.csv:3: '\+42' is not a length" -- plan --trace plus.csv --column len
expect 3 "plus_quoted.csv:3: '\+42' is not a length" -- plan --trace plus_quoted.csv --column len
expect 0 "1 sequences, 42 tokens" -- plan --trace zeros.csv --column len --scheduler dynamic_cp --summary --no-timing

# JSON Lines: not JSON numbers
printf '{"len": 100}\n{"len": +42}\n' >plus.jsonl
printf '{"len": 100}\n{"len": 042}\n' >zero.jsonl
printf '{"len": 100}\n{"len": -042}\n' >negzero.jsonl
printf '{"len": 100}\n{"len": 00}\n' >zerozero.jsonl
printf '{"len": 100}\n{"len": 42.}\n' >dot.jsonl
printf '{"len": 100}\n{"len": 4e}\n' >exp.jsonl
printf '{"len": 100}\n{"len": 0x2a}\n' >hex.jsonl
printf '{"len": 100}\n{"len": true}\n' >true.jsonl
expect 3 "plus.jsonl:2: \"len\": '\+42' is not a JSON number" -- plan --trace plus.jsonl --column len
expect 3 "zero.jsonl:2: \"len\": '042' is not a JSON number" -- plan --trace zero.jsonl --column len
expect 3 "negzero.jsonl:2: \"len\": '-042' is not a JSON number" -- plan --trace negzero.jsonl --column len
expect 3 "zerozero.jsonl:2: \"len\": '00' is not a JSON number" -- plan --trace zerozero.jsonl --column len
expect 3 "dot.jsonl:2: \"len\": '42.' is not a JSON number" -- plan --trace dot.jsonl --column len
expect 3 "exp.jsonl:2: \"len\": '4e' is not a JSON number" -- plan --trace exp.jsonl --column len
expect 3 "hex.jsonl:2: \"len\": '0x2a' is not a JSON number" -- plan --trace hex.jsonl --column len
expect 3 "true.jsonl:2: \"len\": 'true' is not a JSON number" -- plan --trace true.jsonl --column len
expect 3 "plus.jsonl:2: \"len\": '\+42' is not a JSON number" -- step --trace plus.jsonl --column len --dp 2
# JSON numbers that are no length keep their messages
printf '{"len": 100}\n{"len": 1e3}\n' >exponent.jsonl
printf '{"len": 100}\n{"len": 42.0}\n' >fraction.jsonl
printf '{"len": 100}\n{"len": -0}\n' >minuszero.jsonl
printf '{"len": 100}\n{"len": -7}\n' >negative.jsonl
printf '{"len": 100}\n{"len": 0}\n' >zerolen.jsonl
expect 3 "exponent.jsonl:2: '1e3' is not a length" -- plan --trace exponent.jsonl --column len
expect 3 "fraction.jsonl:2: '42.0' is not a length" -- plan --trace fraction.jsonl --column len
expect 3 "minuszero.jsonl:2: length -0 is zero" -- plan --trace minuszero.jsonl --column len
expect 3 "negative.jsonl:2: length -7 is negative" -- plan --trace negative.jsonl --column len
expect 3 "zerolen.jsonl:2: length 0 is zero" -- plan --trace zerolen.jsonl --column len
# JSON Lines: the length key twice, however it is spelled
printf '{"len": 100}\n{"len": 100, "len": 5}\n' >dup.jsonl
printf '{"len": 100}\n{"id": 1, "len": 5, "x": {"len": 1}, "len": 6}\n' >dup_late.jsonl
printf '{"len": 100}\n{"len": 5, "l\\u0065n": 6}\n' >dup_escaped.jsonl
printf '{"len": 100}\n{"len": 5, "x": {"len": 1}, "size": 3}\n' >nested.jsonl
printf '{"len": 100}\n{"l\\u0065n": 5}\n' >escaped.jsonl
expect 3 "dup.jsonl:2: the key \"len\" appears twice \(100 and 5\)" -- plan --trace dup.jsonl --column len
expect 3 "dup_late.jsonl:2: the key \"len\" appears twice \(5 and 6\)" -- plan --trace dup_late.jsonl --column len
expect 3 "dup_escaped.jsonl:2: the key \"len\" appears twice \(5 and 6\)" -- plan --trace dup_escaped.jsonl --column len
expect 0 "2 sequences, 105 tokens" -- plan --trace nested.jsonl --column len --scheduler dynamic_cp --summary --no-timing
expect 0 "2 sequences, 105 tokens" -- plan --trace escaped.jsonl --column len --scheduler dynamic_cp --summary --no-timing

# cost profiles
printf 'linear = +5\n' >plus_value.txt
printf 'quadratic = 1\nlinear = -0\n' >minus_zero.txt
printf 'kv.+16 = 3\n' >plus_cp.txt
printf 'kv. 16 = 3\n' >space_cp.txt
printf 'kv.-16+ = 3\n' >minus_cp.txt
printf 'linear = 0049152\nkv.016 = 3\n' >zeros_profile.txt
expect 3 "plus_value.txt:1: linear = '\+5': values are non-negative integers" -- cost --profile plus_value.txt
expect 3 "minus_zero.txt:2: linear = '-0': values are non-negative integers" -- cost --profile minus_zero.txt
expect 3 "plus_cp.txt:1: kv.\+16: the CP size" -- cost --profile plus_cp.txt
expect 3 "space_cp.txt:1: kv. 16: the CP size" -- cost --profile space_cp.txt
expect 3 "minus_cp.txt:1: kv.-16\+: the CP size" -- cost --profile minus_cp.txt
expect 3 "plus_value.txt:1: linear = '\+5'" -- plan --cost plus_value.txt
expect 0 "kv.16 = 3" -- cost --profile zeros_profile.txt --format text

# command-line integers: digits with an optional '-', nothing else
printf '100\n200\n' >two.txt
expect 2 "--ranks: '\+4' is not an integer" -- plan --trace two.txt --ranks +4
expect 2 "--ranks: ' 4' is not an integer" -- plan --trace two.txt --ranks ' 4'
expect 2 "--dp: '\+2' is not an integer" -- step --trace two.txt --dp +2
expect 2 "--ranks: 99999999999999999999 is outside \[" -- plan --trace two.txt --ranks 99999999999999999999
expect 2 "--dp: -9223372036854775809 is outside \[" -- step --trace two.txt --dp -9223372036854775809

if [ "$failures" -ne 0 ]; then
  echo "cli_input_numbers: $failures failures"
  exit 1
fi
echo "cli_input_numbers: all passed"
