#!/usr/bin/env bash
# The reliability jobs ctest runs (labels sanitize, valgrind, fuzz), each in a
# sub-build of its own under the calling build directory:
#
#   reliability.sh sanitize <src> <bin>                 test suite under ASan + UBSan (clang)
#   reliability.sh valgrind <src> <bin> <test> [case]   one test program under valgrind memcheck
#   reliability.sh fuzz     <src> <bin> <target> <s>    one libFuzzer target for <s> seconds
#
# Sub-builds are CPU-only and register none of these jobs themselves.
set -euo pipefail
mode="$1"
src="$2"
bin="$3"
shift 3
jobs="$(nproc 2>/dev/null || echo 2)"
common=(-G Ninja -DDCP_WITH_CUDA=OFF -DDCP_BUILD_BENCH=OFF -DDCP_RELIABILITY_TESTS=OFF)

need() {
  command -v "$1" >/dev/null || { echo "reliability: $1 not found (bash .ci/setup installs it)" >&2; exit 1; }
}

case "$mode" in
sanitize)
  need clang
  out="$bin/sanitize"
  CC=clang cmake -S "$src" -B "$out" "${common[@]}" -DDCP_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$out" -j "$jobs"
  # every CPU case; ASan reports leaks at exit (LeakSanitizer), UBSan aborts on the first report.
  # cli_install is left out: it links an uninstrumented consumer against the installed library.
  # DCP_TEST_TIME_SCALE: tests that wait out communicator timeouts stretch them under slow tools
  DCP_TEST_TIME_SCALE=4 ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$out" -L cpu -E '^cli_install$' --output-on-failure -j "$jobs"
  ;;
valgrind)
  need valgrind
  test="$1"
  out="$bin/valgrind"
  # without jemalloc, so memcheck sees every allocation
  cmake -S "$src" -B "$out" "${common[@]}" -DDCP_WITH_JEMALLOC=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$out" -j "$jobs" --target "$test"
  cd "$src"
  DCP_TEST_TIME_SCALE=20 valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
    --errors-for-leak-kinds=definite,indirect --track-origins=yes "$out/$test" "${@:2}"
  ;;
fuzz)
  need clang
  target="$1"
  seconds="$2"
  DCP_FUZZ_BUILD="$bin/fuzz" bash "$src/fuzz/run.sh" "$seconds" "$target"
  ;;
*)
  echo "usage: $0 sanitize|valgrind|fuzz <src> <bin> ..." >&2
  exit 2
  ;;
esac
