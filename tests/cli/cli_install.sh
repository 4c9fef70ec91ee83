#!/usr/bin/env bash
# Install dcpack into a temporary prefix, then build a consumer two ways:
# with find_package(dcpack) and with pkg-config.  Proves the installed header,
# library, CMake package and .pc file work for a user, and that the version both
# package files announce is the one the installed header defines (the header is
# the only place the version number is written).
set -euo pipefail
dcpack_bin="$1"; src="$2"
build_dir="$(dirname "$dcpack_bin")"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
for h in dcpack.h dcpack_inproc.h dcpack_model.h dcpack_cuda.h; do
  test -f "$tmp/prefix/include/$h" || { echo "$h not installed"; exit 1; }
done
lib=$(find "$tmp/prefix" -name libdcpack.a | head -1); test -n "$lib"
pc=$(find "$tmp/prefix" -name dcpack.pc | head -1); test -n "$pc"
# the shipped cost profiles install beside the program, which finds them by name from anywhere
ls "$tmp/prefix/share/dcpack/profiles/"*.profile >/dev/null
if [ -x "$tmp/prefix/bin/dcpack" ]; then
  (cd / && "$tmp/prefix/bin/dcpack" plan --scheduler balanced --cost llama8b-layer-h100 --summary --no-timing >/dev/null) ||
    { echo "installed dcpack cannot find the shipped profile llama8b-layer-h100"; exit 1; }
fi
hdr_version=$(for part in MAJOR MINOR PATCH; do
  sed -n "s/^#define DCP_VERSION_${part} *\([0-9][0-9]*\) *$/\1/p" "$tmp/prefix/include/dcpack.h"
done | paste -sd.)
[[ "$hdr_version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "cannot read DCP_VERSION_* from the installed dcpack.h: '$hdr_version'"; exit 1; }
pc_version=$(sed -n 's/^Version: *//p' "$pc")
[ "$pc_version" = "$hdr_version" ] || { echo "dcpack.pc says Version: $pc_version, dcpack.h says $hdr_version"; exit 1; }

mkdir -p "$tmp/consumer"
cat > "$tmp/consumer/main.c" <<'C'
#include <dcpack.h>
#include <stdio.h>
int main(void) {
    dcp_config c; dcp_config_default(&c);
    c.data_parallel_size = 4; c.max_sequences = 16; c.scheduler = DCP_SCHEDULER_DP_BALANCED;
    dcp_context *ctx;
    if (dcp_context_create(&c, &ctx) != DCP_OK) return 1;
    const int32_t lengths[] = {1000, 3000, 2000, 500, 4000, 100, 100, 200};
    const dcp_plan *plan;
    dcp_status st = dcp_plan_compute(ctx, lengths, 8, &plan);
    printf("%s %d\n", dcp_status_str(st), st == DCP_OK ? plan->num_microbatches : -1);
    dcp_context_destroy(ctx);
    return st == DCP_OK ? 0 : 1;
}
C
cat > "$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(dcpack REQUIRED)
if(NOT dcpack_VERSION STREQUAL HDR_VERSION)
  message(FATAL_ERROR "find_package(dcpack) found version ${dcpack_VERSION}, dcpack.h says ${HDR_VERSION}")
endif()
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE dcpack::dcpack)
CM
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" -DHDR_VERSION="$hdr_version" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
out=$("$tmp/consumer/build/consumer")
echo "find_package consumer: $out"
[ "$out" = "DCP_OK 1" ] || { echo "unexpected output from the find_package consumer: $out"; exit 1; }

export PKG_CONFIG_PATH="$(dirname "$pc")"
if command -v pkg-config >/dev/null; then
  [ "$(pkg-config --modversion dcpack)" = "$hdr_version" ] || { echo "pkg-config --modversion dcpack: $(pkg-config --modversion dcpack), dcpack.h says $hdr_version"; exit 1; }
  cc "$tmp/consumer/main.c" -o "$tmp/consumer/pc" $(pkg-config --cflags --static --libs dcpack) $(pkg-config --variable=libdir dcpack | sed 's/^/-L/') 
  out=$("$tmp/consumer/pc")
  echo "pkg-config consumer: $out"
  [ "$out" = "DCP_OK 1" ] || { echo "unexpected output from the pkg-config consumer: $out"; exit 1; }
  # the library is static only: plain --libs (no --static) must link too
  cc "$tmp/consumer/main.c" -o "$tmp/consumer/pc_plain" $(pkg-config --cflags --libs dcpack)
  out=$("$tmp/consumer/pc_plain")
  [ "$out" = "DCP_OK 1" ] || { echo "unexpected output from the pkg-config --libs consumer: $out"; exit 1; }
else
  grep -q -- "-ldcpack" "$pc"
  echo "pkg-config not installed; checked dcpack.pc names -ldcpack"
fi
echo "version $hdr_version in dcpack.h, dcpack.pc and dcpackConfigVersion.cmake"
