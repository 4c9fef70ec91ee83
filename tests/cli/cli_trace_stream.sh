#!/usr/bin/env bash
# cli_trace_stream.sh - traces are read as a stream and reading stops at the first bad line: input
# that is not a trace (/dev/zero, /dev/urandom, an endless line, a bad line followed by endless
# input) fails at that line with exit status 3 and the file and line named, within a time limit
# and in bounded memory (ulimit -v), whatever the format; a good trace read from a pipe is read
# whole, as from a file.
# usage: cli_trace_stream.sh <path-to-dcpack> <source-dir>
set -uo pipefail
dcpack="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
src="$(cd "$2" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
# AddressSanitizer reserves terabytes of address space for its shadow memory: no ulimit -v holds it
limit_kb=1000000
grep -qa AddressSanitizer "$dcpack" && limit_kb=unlimited

# bounded STATUS PATTERN INPUT-COMMAND -- ARGS...: INPUT-COMMAND's output on standard input of
# dcpack ARGS under a 1 GB address-space limit (none under AddressSanitizer) and a 60 s timeout;
# the exit status must be STATUS and stderr must match PATTERN
bounded() {
  local want="$1" pattern="$2" input="$3"
  shift 4
  local st=0
  bash -c "$input" 2>/dev/null | (
    ulimit -v "$limit_kb"
    exec timeout -k 5 60 "$dcpack" "$@"
  ) >out.txt 2>err.txt || st=$?
  if [ "$st" -ne "$want" ]; then
    echo "FAIL $input | dcpack $*: exit $st, expected $want"
    head -c 600 err.txt
    failures=$((failures + 1))
  elif ! grep -Eq -- "$pattern" err.txt; then
    echo "FAIL $input | dcpack $*: stderr does not match /$pattern/:"
    head -c 600 err.txt
    failures=$((failures + 1))
  fi
}

# devices that never end: the first line of /dev/zero is already bad; random bytes may begin with
# a line that is a length ("7\n", about once in ten thousand), so only the stop is checked there
for format in auto text csv jsonl; do
  column=()
  [ "$format" = csv ] || [ "$format" = jsonl ] && column=(--column len)
  bounded 3 "/dev/zero:1: " true -- plan --trace /dev/zero --input-format "$format" "${column[@]}"
  bounded 3 "/dev/urandom:[0-9]+: " true -- plan --trace /dev/urandom --input-format "$format" "${column[@]}"
  bounded 3 "<stdin>:1: " "cat /dev/zero" -- plan --trace - --input-format "$format" "${column[@]}"
done
bounded 3 "/dev/zero:1: " true -- step --trace /dev/zero --dp 2
bounded 3 "/dev/zero:1: " true -- compare --trace /dev/zero
# a NUL byte is never part of a trace: named where it is
bounded 3 "<stdin>:3: .*NUL" "printf '100\n200\n3\0000\n400\n'" -- plan --trace -
# ... unless a blank line before it is the first bad line
bounded 3 "<stdin>:2: empty line" "printf '100\n\n\n3\0000\n'" -- plan --trace -
bounded 3 "<stdin>:1: empty line" "printf ' \nab\0c\n'; cat /dev/zero" -- plan --trace -
bounded 3 "<stdin>:1: empty line" "printf '\n\n'; cat /dev/zero" -- plan --trace - --input-format jsonl --column len
bounded 3 "<stdin>:1: expected a CSV header" "printf '\n'; cat /dev/zero" -- plan --trace - --input-format csv --column len
bounded 3 "<stdin>:2: empty line" "printf '5\n\n'; yes | tr -d '\n'" -- plan --trace -
# one endless line without a NUL byte
bounded 3 "<stdin>:1: .*longer than" "yes | tr -d '\n'" -- plan --trace -
bounded 3 "<stdin>:2: .*longer than" "printf '{\"len\": 5}\n'; yes | tr -d '\n'" -- plan --trace - --column len
# a bad line followed by endless input: reading stops at the bad line
bounded 3 "<stdin>:1001: 'abc' is not a length" "seq 1 1000; echo abc; yes 5" -- plan --trace -
bounded 3 "<stdin>:1002: 'x' is not a length" "echo id,len; seq -f '%g,5' 1 1000; echo 1,x; yes 1,5" -- plan --trace - --column len
bounded 3 "<stdin>:3: no \"len\" key" "echo '{\"len\": 5}'; echo '{\"len\": 6}'; echo '{}'; yes '{\"len\": 7}'" -- plan --trace - --column len
bounded 3 "<stdin>:2: empty line" "echo 5; echo; echo 6; yes 7" -- plan --trace -

# good traces from a pipe: read whole, the same plan as from the file
trace="$src/tests/data/workloads/mlmdefault_n1024_seed1.txt"
"$dcpack" plan --trace "$trace" --scheduler dynamic_cp --format json --no-timing >file.json 2>/dev/null
st=0
"$dcpack" plan --trace - --scheduler dynamic_cp --format json --no-timing <"$trace" >pipe.json 2>err.txt || st=$?
if [ "$st" -ne 0 ] || ! diff <(grep -Ev '"trace"|"plan_seconds' file.json) <(grep -Ev '"trace"|"plan_seconds' pipe.json) >/dev/null; then
  echo "FAIL a trace from standard input plans differently from the same file (exit $st)"
  head -c 600 err.txt
  failures=$((failures + 1))
fi
# 200000 lengths, CRLF line ends, a byte-order mark and blank lines at the end, through a pipe
{ printf '\xef\xbb\xbf'; for _ in $(seq 1 2000); do printf '%s\r\n' $(seq 1 100); done; printf '\n\n  \n'; } >big.txt
st=0
"$dcpack" plan --trace - --scheduler dynamic_cp --ranks 64 --max-sequences 200000 --summary --no-timing \
  <big.txt >out.txt 2>err.txt || st=$?
if [ "$st" -ne 0 ] || ! grep -q "200000 sequences" out.txt; then
  echo "FAIL 200000 CRLF lines with a byte-order mark from a pipe: exit $st"
  head -c 600 err.txt
  head -c 600 out.txt
  failures=$((failures + 1))
fi

if [ "$failures" -ne 0 ]; then
  echo "cli_trace_stream: $failures failures"
  exit 1
fi
echo "cli_trace_stream: all passed"
