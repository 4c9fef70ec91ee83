#!/usr/bin/env bash
# cli_resources.sh - dcpack step when threads or memory run out: it ends, within a time limit,
# with exit status 1 and a message that says what ran out, or succeeds; it never hangs (a rank
# thread that could not start leaves the others waiting for it) or dies of a signal (an
# allocation that failed and was used anyway).  Limits are set with ulimit in a subshell.
# usage: cli_resources.sh <path-to-dcpack> <source-dir>
set -uo pipefail
dcpack="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
failures=0
# AddressSanitizer reserves terabytes of address space for its shadow memory: no ulimit -v holds it
if grep -qa AddressSanitizer "$dcpack"; then
  echo "cli_resources: skipped: $dcpack is built with AddressSanitizer"
  exit 0
fi

# limited KB ARGS...: run dcpack ARGS with an address-space limit of KB kilobytes and 8 MB
# thread stacks, for at most 60 seconds; sets $st
limited() {
  local kb="$1"
  shift
  st=0
  (
    ulimit -s 8192
    ulimit -v "$kb"
    exec timeout -k 5 60 "$dcpack" "$@"
  ) >out.txt 2>err.txt </dev/null || st=$?
}

# ended KB ALLOWED PATTERN ARGS...: exit status in ALLOWED ("0 1" or "1"); on 1, stderr matches PATTERN
ended() {
  local kb="$1" allowed="$2" pattern="$3"
  shift 3
  limited "$kb" "$@"
  case " $allowed " in
    *" $st "*) ;;
    *)
      case "$st" in
        124 | 137) why="did not finish in 60 s" ;;
        13[0-9] | 14[0-9]) why="killed by signal $((st - 128))" ;;
        *) why="exit $st" ;;
      esac
      echo "FAIL ulimit -v $kb; dcpack $*: $why, expected exit ${allowed// / or }"
      head -c 600 err.txt
      failures=$((failures + 1))
      return
      ;;
  esac
  if [ "$st" -eq 1 ] && ! grep -Eq -- "$pattern" err.txt; then
    echo "FAIL ulimit -v $kb; dcpack $*: stderr does not match /$pattern/:"
    head -c 600 err.txt
    failures=$((failures + 1))
  fi
}

# 512 ranks need 512 thread stacks of 8 MB: 4 GB, more than 2 GB of address space holds
ended 2000000 1 "cannot start 512 rank threads" step --generate uniform:n=64,max=64 --dp 512
# the same with --check, and with ranks over TP and PP
ended 2000000 1 "cannot start 512 rank threads" step --generate uniform:n=64,max=64 --dp 128 --tp 2 --pp 2 --check

# the workspace is sized from the batch, not from --max-seqlen x microbatches: an accepted
# --max-seqlen of 2^30 costs no more than the 41,192 tokens the batch holds (each rank's workspace
# was 91 GB, and the kernel killed the program)
ended 2000000 0 "" step --dp 2 --cp 2 --max-seqlen 1073741824 --generate mlmdefault:n=64 --check
# where the batch does need it (padded to --max-seqlen on 64 ranks: terabytes), refused before
# any rank allocates, with the sizes
ended 2000000 1 "64 ranks x [0-9]+ bytes of workspace = [0-9]+ bytes, more than this machine's [0-9]+ bytes" \
  step --dp 64 --max-seqlen 1073741824 --generate mlmdefault:n=64 --pad-to-max

# from too little memory for anything to enough for everything: wherever it runs out, it says so
oom="out of memory|cannot start [0-9]+ rank threads|cannot create"
for kb in 150000 250000 350000 400000 450000 500000 550000 600000 650000 700000 800000 1000000; do
  # below the address space the dynamic loader needs to map the shared libraries (libnccl in a
  # CUDA build) the program never starts: exit 127 from the loader, not dcpack's to handle
  limited "$kb" --version
  if [ "$st" -eq 127 ]; then
    echo "cli_resources: ulimit -v $kb: too small to load the program's shared libraries, not run"
    continue
  fi
  ended "$kb" "0 1" "$oom" step --generate uniform:n=64,max=64 --dp 64
  ended "$kb" "0 1" "$oom" step --generate uniform:n=256,max=4000 --dp 4 --cp 2 --tp 2 --steps 2 --check
done

if [ "$failures" -ne 0 ]; then
  echo "cli_resources: $failures failures"
  exit 1
fi
echo "cli_resources: all passed"
