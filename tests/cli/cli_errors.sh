#!/usr/bin/env bash
# cli_errors.sh - every error path of the dcpack program has its documented exit status and a
# message on standard error that names what was wrong (for input: the file, the line, the value);
# nothing is printed on standard output.  Exit statuses: 1 planning/runtime, 2 usage, 3 bad input.
# Every command answers --help on standard output with exit status 0.
# usage: cli_errors.sh <path-to-dcpack> <source-dir>
set -euo pipefail
dcpack="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0

# expect STATUS PATTERN -- ARGS...: run dcpack ARGS, check the exit status and that stderr matches PATTERN
expect() {
  local want="$1" pattern="$2"
  shift 3
  local st=0
  "$dcpack" "$@" >out.txt 2>err.txt </dev/null || st=$?
  if [ "$st" -ne "$want" ]; then
    echo "FAIL dcpack $*: exit $st, expected $want"; cat err.txt; failures=$((failures + 1)); return
  fi
  if ! grep -Eq -- "$pattern" err.txt; then
    echo "FAIL dcpack $*: stderr does not match /$pattern/:"; cat err.txt; failures=$((failures + 1)); return
  fi
  if [ "$want" -ne 1 ] && [ -s out.txt ]; then
    echo "FAIL dcpack $*: printed on stdout despite the error"; failures=$((failures + 1))
  fi
}

printf '100\n-5\n' >negative.txt
printf '100\n0\n' >zero.txt
printf '100\nabc\n' >word.txt
printf '100\nabc\n300\n' >middle.txt
printf '100\n12.5\n' >fraction.txt
printf '100\n99999999999\n' >huge.txt
printf '100\n200000\n' >long.txt
printf '100\n20000\n' >static.txt
printf '' >empty.txt
printf '\n\n' >blank.txt
printf '100\n\n200\n' >gap.txt
printf 'id,len\n0,100\n1,x7\n' >word.csv
printf 'id,len\n0,100\n1\n' >short.csv
printf 'id,len\n0,"100\n' >quote.csv
printf 'id,size\n0,100\n' >nocolumn.csv
printf 'id,len\n0,100\n1,-3\n' >negative.csv
# a value longer than the field buffer was read truncated: 120 zeros then 1234567890 became 1234567
printf 'id,len\n0,%0130d\n' 1234567890 >overlong.csv
printf '{"len": 100}\n{"size": 5}\n' >nokey.jsonl
printf '{"len": 100}\n{"len": 5,}\n' >malformed.jsonl
printf '{"len": 100}\n{"len": "5"}\n' >string.jsonl
printf '{"len": 100}\n[5]\n' >array.jsonl
printf '{"len": 100}\n{"len": 1e3}\n' >exponent.jsonl
printf 'id,len\n0,100\n' >plain.csv
printf '100\n200\n300\n' >three.txt
printf '100\n' >one.txt
seq 100 100 2000 >twenty.txt

# usage errors: exit 2
expect 2 "unknown argument '--bogus'" -- plan --bogus
expect 2 "--ranks needs a value" -- plan --ranks
expect 2 "--ranks: 'x' is not an integer" -- plan --ranks x
expect 2 "--ranks: 0 is outside" -- plan --ranks 0
expect 2 "--max-seqlen-per-rank: 'big' is not an integer" -- plan --max-seqlen-per-rank big
expect 2 "--scheduler: 'fast' is not" -- plan --scheduler fast
expect 2 "--format: 'xml' is not text or json" -- plan --format xml
expect 2 "--repeat: 0 is outside" -- plan --repeat 0
expect 2 "--trace and --generate" -- plan --trace three.txt --generate mlmdefault
expect 2 "--column and --input-format describe a --trace" -- plan --column len
expect 2 "--cp applies to dp_balanced only" -- plan --scheduler dynamic_cp --cp 2
expect 2 "--cp 8 does not divide --ranks 12" -- plan --scheduler dp_balanced --ranks 12 --cp 8
expect 2 "--min-cp-size: 3 is not a power of two" -- plan --min-cp-size 3
expect 2 "min_cp_size 64 exceeds the 32" -- plan --scheduler dynamic_cp --min-cp-size 64
expect 2 "--svg draws one plan" -- plan --svg x.svg
expect 2 "--input-format: 'xml'" -- plan --trace three.txt --input-format xml
expect 2 "csv input needs --column" -- plan --trace plain.csv --input-format csv
expect 2 "--column applies to csv and jsonl" -- plan --trace three.txt --input-format text --column len
expect 2 "--generate: unknown family 'nope'" -- plan --generate nope
expect 2 "unknown command 'plot'" -- plot
expect 2 "usage: dcpack <command>" --
expect 2 "unknown argument '--nope'" -- compare --nope
expect 2 "give one of --traces, --trace and --generate" -- compare --traces . --generate mlmdefault
expect 2 "--steps counts generated batches" -- compare --trace three.txt --steps 3
expect 2 "give --scheduler or --config" -- compare --scheduler dynamic_cp --config dynamic_cp
expect 2 "--config fastest: 'fastest' is not" -- compare --config fastest
expect 2 "--config dynamic_cp:speed=1: unknown key 'speed'" -- compare --config dynamic_cp:speed=1
expect 2 "--scheduler: 'quick' is not" -- compare --scheduler dynamic_cp,quick
expect 2 "--steps: 0 is outside" -- compare --steps 0
expect 2 "unknown argument '--bogus'" -- cost --bogus
expect 2 "--max-cp: 3 is not a power of two" -- cost --max-cp 3
expect 2 "--lengths: 'ten' is not an integer" -- cost --lengths 10,ten
expect 2 "--format: 'yaml'" -- cost --format yaml
expect 2 "missing SPEC" -- generate
# lists are read item by item: an empty item (a stray comma) and a key given twice are refused, not
# skipped or overridden (uniform:n=3,n=4 generated 4 lengths)
expect 2 "'uniform:n=3,n=4' gives n twice" -- generate uniform:n=3,n=4
expect 2 "'mlmdefault:seed=2,n=8,seed=3' gives seed twice" -- generate mlmdefault:seed=2,n=8,seed=3
expect 2 "'uniform:n=3,' has an empty key=value item" -- generate uniform:n=3,
expect 2 "'uniform:n=3,,seed=2' has an empty key=value item" -- generate uniform:n=3,,seed=2
expect 2 "'uniform:' has an empty key=value item" -- generate uniform:
expect 2 "dcpack plan: --generate: 'mlmdefault:n=64,' has an empty key=value item" -- plan --generate mlmdefault:n=64,
expect 2 "dcpack step: --generate: 'uniform:n=3,n=4' gives n twice" -- step --generate uniform:n=3,n=4
expect 2 "--config dynamic_cp:ranks=4,ranks=8: ranks is given twice" -- compare --config dynamic_cp:ranks=4,ranks=8
expect 2 "--config dynamic_cp:ranks=4,: an empty key=value item" -- compare --config dynamic_cp:ranks=4,
expect 2 "--scheduler dynamic_cp,: an empty name" -- compare --scheduler dynamic_cp,
expect 2 "--lengths 10,20,: an empty length" -- cost --lengths 10,20,
expect 2 "--lengths ,10: an empty length" -- cost --lengths ,10
expect 2 "--lengths: no lengths given" -- cost --lengths ""
expect 2 "--lengths: the list is longer than 1023 characters" -- cost --lengths "$(printf '1,%.0s' $(seq 600))1"

# bad input: exit 3, naming file:line and the value
expect 3 "negative.txt:2: length -5 is negative" -- plan --trace negative.txt
expect 3 "zero.txt:2: length 0 is zero" -- plan --trace zero.txt --scheduler dynamic_cp
expect 3 "word.txt:2: 'abc' is not a length" -- plan --trace word.txt
expect 3 "fraction.txt:2: '12.5' is not a length" -- plan --trace fraction.txt
expect 3 "huge.txt:2: length 99999999999 is too large" -- plan --trace huge.txt
expect 3 "long.txt:2: length 200000 exceeds what all 32 ranks hold together: 32 x max_seqlen_per_rank 4096 = 131072" -- plan --trace long.txt --scheduler dynamic_cp
expect 3 "long.txt:2: length 200000 exceeds what all 32 ranks hold" -- plan --trace long.txt
expect 3 "static.txt:2: length 20000 exceeds the static CP group: 2 ranks x max_seqlen_per_rank 4096 = 8192" -- plan --trace static.txt --scheduler dp_balanced --cp 2
expect 3 "long.txt:2: length 200000 exceeds what all 12 ranks hold together: 12 x max_seqlen_per_rank 4096 = 49152" -- plan --trace long.txt --scheduler dp_balanced --ranks 12
expect 3 "empty.txt: empty trace" -- plan --trace empty.txt
expect 3 "blank.txt: empty trace" -- plan --trace blank.txt
expect 3 "<stdin>: empty trace" -- plan --trace -
expect 3 "gap.txt:2: empty line" -- plan --trace gap.txt
expect 3 "cannot open missing.txt" -- plan --trace missing.txt
expect 3 "twenty.txt: 20 sequences exceed the capacity --max-sequences 10" -- plan --trace twenty.txt --scheduler dynamic_cp --max-sequences 10
expect 3 "word.csv:3: 'x7' is not a length" -- plan --trace word.csv --column len
expect 3 "negative.csv:3: length -3 is negative" -- plan --trace negative.csv --column len
expect 3 "overlong.csv:2: column 'len' holds 130 characters" -- plan --trace overlong.csv --column len
expect 3 "short.csv:3: the row has 1 fields; column 'len' is field 2" -- plan --trace short.csv --column len
expect 3 "quote.csv:2: unterminated quote" -- plan --trace quote.csv --column len
expect 3 "nocolumn.csv:1: no column 'len' in the header \(columns: id, size\)" -- plan --trace nocolumn.csv --column len
expect 3 "plain.csv:1: looks like CSV" -- plan --trace plain.csv
expect 3 "nokey.jsonl:2: no \"len\" key" -- plan --trace nokey.jsonl --column len
expect 3 "malformed.jsonl:2: malformed JSON" -- plan --trace malformed.jsonl --column len
expect 3 "string.jsonl:2: \"len\" is a string" -- plan --trace string.jsonl --column len
expect 3 "array.jsonl:2: not a JSON object" -- plan --trace array.jsonl --column len
expect 3 "exponent.jsonl:2: '1e3' is not a length" -- plan --trace exponent.jsonl --column len
expect 3 "negative.txt:2: length -5 is negative" -- compare --trace three.txt --trace negative.txt
expect 3 "cannot open directory nodir" -- compare --traces nodir
# step reads its trace as plan does: same messages, same statuses, no sequence dropped
expect 3 "dcpack step: cannot open missing.txt" -- step --trace missing.txt --dp 2
expect 3 "dcpack step: middle.txt:2: 'abc' is not a length" -- step --trace middle.txt
expect 3 "dcpack plan: middle.txt:2: 'abc' is not a length" -- plan --trace middle.txt
expect 3 "dcpack step: negative.txt:2: length -5 is negative" -- step --trace negative.txt
expect 3 "dcpack step: gap.txt:2: empty line" -- step --trace gap.txt
expect 3 "dcpack step: <stdin>: empty trace" -- step --trace -
expect 3 "dcpack step: word.csv:3: 'x7' is not a length" -- step --trace word.csv --column len
expect 3 "dcpack step: twenty.txt: 20 sequences exceed the capacity --max-sequences 10" -- step --trace twenty.txt --max-sequences 10
expect 3 "dcpack step: long.txt:2: length 200000 exceeds what all 2 ranks hold together" -- step --trace long.txt --dp 2
expect 2 "dcpack step: --trace and --generate" -- step --trace three.txt --generate mlmdefault
expect 2 "dcpack step: --tail: 'x' is not" -- step --trace three.txt --tail x
expect 2 "dcpack step: invalid configuration: virtual_pipeline_size 2 needs pipeline_parallel_size" -- step --trace three.txt --vpp 2
# MTP options that would be ignored are refused: a stage past --pp, a mask without a stage or naming none of its
# virtual stages (--mtp-stage 5 at PP 1 ran as if it were not given)
expect 2 "dcpack step: --mtp-stage 5: the PP stages are 0 to 0 \(--pp 1\)" -- step --trace three.txt --mtp-stage 5
expect 2 "dcpack step: --mtp-stage 4: the PP stages are 0 to 3 \(--pp 4\)" -- step --trace three.txt --pp 4 --mtp-stage 4
expect 2 "dcpack step: --mtp-stage 0 needs --mtp-virtual-stages MASK" -- step --trace three.txt --mtp-stage 0
expect 2 "dcpack step: --mtp-virtual-stages 1 needs --mtp-stage P" -- step --trace three.txt --mtp-virtual-stages 1
expect 2 "dcpack step: --mtp-virtual-stages 4 names virtual stages past 1 \(--vpp 2: bits 0 to 1\)" -- \
  step --trace three.txt --pp 2 --vpp 2 --mtp-stage 1 --mtp-virtual-stages 4
# one rank is one rank ("exceeds what all 1 ranks hold together")
expect 3 "dcpack step: long.txt:2: length 200000 exceeds what the one rank holds: max_seqlen_per_rank 8192 tokens$" -- step --trace long.txt
expect 3 "dcpack plan: long.txt:2: length 200000 exceeds what the one rank holds: max_seqlen_per_rank 4096 tokens$" -- plan --trace long.txt --ranks 1
expect 3 "dcpack plan: long.txt:2: length 200000 exceeds the static CP group: one rank of max_seqlen_per_rank 4096 tokens" -- \
  plan --trace long.txt --ranks 2 --scheduler dp_balanced --cp 1
expect 3 "dcpack step: long.txt:2: length 200000 exceeds the static CP group: one rank of max_seqlen_per_rank 8192 tokens" -- \
  step --trace long.txt --dp 2 --scheduler dp_balanced
mkdir emptydir
expect 3 "emptydir holds no trace files" -- compare --traces emptydir

# cost profiles: exit 3 with file:line
printf 'quadratic = 1\nspeed = 3\n' >key.txt
printf '# profile\nlinear = lots\n' >value.txt
printf 'linear = -4\n' >negcoef.txt
printf 'kv.3 = 100\n' >kvcp.txt
printf 'kv.131072 = 100\n' >kvbig.txt
printf 'quadratic 1\n' >noeq.txt
printf 'hidden = 999999999999999999\n' >hidden.txt
printf 'step_model = fast\n' >stepmodel.txt
printf '\nstep_model = 1\n' >stepmodelnumber.txt
# a NUL byte is no text: said so (it was "line longer than 1022 characters"), and on a last line
# without a newline it hid the rest of the line (the value was read as 1)
printf 'quadratic = 1\n# note\0 more\n' >nul.txt
printf 'linear = 1\x009' >nullast.txt
python3 -c "print('linear = ' + '1' * 1014)" >longline.txt
expect 3 "key.txt:2: unknown key 'speed'" -- cost --profile key.txt
expect 3 "value.txt:2: linear = 'lots'" -- cost --profile value.txt
expect 3 "negcoef.txt:1: linear = '-4'" -- cost --profile negcoef.txt
expect 3 "kvcp.txt:1: kv.3: the CP size" -- cost --profile kvcp.txt
expect 3 "kvbig.txt:1: kv.131072: the CP size" -- cost --profile kvbig.txt
expect 3 "noeq.txt:1: 'quadratic 1' is not" -- cost --profile noeq.txt
expect 3 "hidden.txt:1: hidden = 999999999999999999: 12 \* hidden overflows" -- cost --profile hidden.txt
expect 3 "cannot open cost profile nofile.txt" -- cost --profile nofile.txt
expect 3 "stepmodel.txt:1: step_model = 'fast' is not barrier or dependency" -- cost --profile stepmodel.txt
expect 3 "stepmodelnumber.txt:2: step_model = '1' is not barrier or dependency" -- plan --cost stepmodelnumber.txt
expect 3 "nul.txt:2: a NUL byte at column 7: not a cost profile \(text\)" -- cost --profile nul.txt
expect 3 "nullast.txt:1: a NUL byte at column 11: not a cost profile" -- cost --profile nullast.txt
expect 3 "nul.txt:2: a NUL byte at column 7" -- plan --cost nul.txt
expect 3 "longline.txt:1: line longer than 1022 characters" -- cost --profile longline.txt
expect 3 "stepmodel.txt:1: step_model = 'fast'" -- compare --config dynamic_cp:cost=stepmodel.txt
expect 3 "key.txt:2: unknown key 'speed'" -- plan --cost key.txt
expect 3 "key.txt:2: unknown key 'speed'" -- compare --cost key.txt
expect 3 "key.txt:2: unknown key 'speed'" -- compare --config dynamic_cp:cost=key.txt

# planning failures: exit 1 with the library's status and message
expect 1 "dp_balanced could not plan three.txt: .*DCP_ERR_INFEASIBLE" -- plan --trace three.txt --scheduler dp_balanced --ranks 8 --cp 1
expect 1 "dynamic_cp could not plan one.txt: .*DCP_ERR_INFEASIBLE" -- plan --trace one.txt --scheduler dynamic_cp --ranks 2 --vpp-group 2
expect 1 "dp_balanced:cp=1 failed on 1 of 1 batches; first: three.txt: .*DCP_ERR_INFEASIBLE" -- compare --trace three.txt --ranks 8 --config dp_balanced:cp=1 --config dynamic_cp
expect 1 "cannot write" -- plan --scheduler dynamic_cp --summary --svg no/such/dir/x.svg

if [ $failures -ne 0 ]; then echo "cli_errors: $failures failures"; exit 1; fi

# --help: every command, on stdout, exit 0, with usage and examples
for cmd in plan compare cost generate step; do
  for form in "$cmd --help" "$cmd -h" "help $cmd"; do
    st=0
    # shellcheck disable=SC2086
    "$dcpack" $form >out.txt 2>err.txt || st=$?
    [ $st -eq 0 ] || { echo "FAIL dcpack $form: exit $st"; exit 1; }
    grep -q "usage: dcpack $cmd" out.txt || { echo "FAIL dcpack $form: no usage line"; exit 1; }
    grep -qi "example" out.txt || { echo "FAIL dcpack $form: no examples"; exit 1; }
    grep -qi "exit status" out.txt || { echo "FAIL dcpack $form: exit statuses not documented"; exit 1; }
  done
done
"$dcpack" --help >out.txt
for c in plan compare cost generate step; do grep -q "^  $c " out.txt || { echo "FAIL dcpack --help lacks $c"; exit 1; }; done
grep -q "^  3  bad input" out.txt || { echo "FAIL dcpack --help lacks the exit statuses"; exit 1; }
# the table says what the code returns: a batch over --max-sequences is status 3 (tested above), not 1
sed -n '/^  3  bad input/,/^$/p' out.txt | grep -q -- "--max-sequences" ||
  { echo "FAIL dcpack --help: status 3 does not cover a batch over --max-sequences"; exit 1; }
sed -n '/^  1  /,/^  2  /p' out.txt | grep -qi "capacit" && { echo "FAIL dcpack --help: status 1 claims capacities"; exit 1; }
"$dcpack" plan --help >out.txt
grep -q '"best"' out.txt && grep -q '{"status", "message"}' out.txt ||
  { echo "FAIL dcpack plan --help: the comparison's \"best\" and \"error\" shape are not described"; exit 1; }
# step --help describes every option it names, one description line each, as the other commands do
"$dcpack" step --help >out.txt
for opt in $(grep -Eo -- '--[a-z][a-z-]*' out.txt | sort -u); do
  grep -Eq -- "^  (-h, |--[a-z-]+ [A-Z]+, )?$opt( |$)" out.txt || { echo "FAIL dcpack step --help: $opt not described"; exit 1; }
done
for opt in --trace --column --input-format --generate --dp --cp --tp --pp --vpp --microbatch-group --scheduler \
           --max-seqlen --max-sequences --max-sequences-per-microbatch --pad-alignment --pad-to-max --tail \
           --cp-partition --mtp-stage --mtp-virtual-stages --prepacked --tp-ranks-hold-data --steps --check; do
  grep -q -- "$opt" out.txt || { echo "FAIL dcpack step --help lacks $opt"; exit 1; }
done
grep -q "heap_allocations_per_step" out.txt || { echo "FAIL dcpack step --help: the JSON fields are not described"; exit 1; }
# every source file a help text names is in the source tree (dcpack --help named "the workloads.py families")
for form in "--help" "plan --help" "compare --help" "cost --help" "generate --help" "step --help"; do
  # shellcheck disable=SC2086
  for ref in $("$dcpack" $form | grep -Eo '[A-Za-z0-9_./-]+\.(py|md|c|h|sh)\b' | sort -u); do
    if [ -z "$(find "$src" -path "$src/build*" -prune -o -path "*$ref" -print -quit)" ]; then
      echo "FAIL dcpack $form names $ref, which is not in the source tree"; exit 1
    fi
  done
  "$dcpack" $form | grep -q "tests/data/workloads" || [ "$form" != "generate --help" ] ||
    { echo "FAIL dcpack generate --help does not say where the reference traces are"; exit 1; }
done
[ -d "$src/tests/data/workloads" ] || { echo "FAIL tests/data/workloads is not in the source tree"; exit 1; }
"$dcpack" --version | grep -Eq '^dcpack [0-9]+\.[0-9]+\.[0-9]+$' || { echo "FAIL --version"; exit 1; }
echo "cli_errors: ok"
