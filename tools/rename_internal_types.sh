#!/usr/bin/env bash
# rename_internal_types.sh - give the library's internal types the internal
# prefix dcp__ (docs/internals.md, Naming): dcp_arena -> dcp__arena, and so on
# for every type below, in every C/CUDA source and header and every Markdown
# page of the repository.
#
#   bash tools/rename_internal_types.sh            rename (run from anywhere)
#   bash tools/rename_internal_types.sh --list     print the types, one a line
#   bash tools/rename_internal_types.sh --check    exit 1 if any old name is left
#
# Deterministic and safe to run again: it replaces whole words only, so a
# renamed dcp__arena no longer matches dcp_arena and a second run changes
# nothing.  It refuses to start when a new name is already in use beside its
# old one (two types would become one).  Public types (include/dcpack.h) keep
# dcp_; types of programs/, tests/ and the harness are not the library's and
# keep their names.
set -euo pipefail
cd "$(dirname "$0")/.."

TYPES=(
  dcp_arena dcp_body_layout dcp_body_row dcp_broadcast_header dcp_call_tag dcp_error dcp_exchange_blocks
  dcp_group_scratch dcp_host_block dcp_input_spans dcp_local_sequences dcp_mover dcp_mover_backend dcp_mover_ops
  dcp_mover_sizes dcp_mtp_roll_layout dcp_mtp_roll_trailer dcp_own_pieces dcp_pack_layout dcp_rank_geometry
  dcp_receive_table dcp_recv_pieces dcp_schedule_input dcp_segment_field dcp_segment_table dcp_send_pieces dcp_send_table
  dcp_step_lengths dcp_step_state dcp_thd_geometry dcp_thd_params dcp_u128
)

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${TYPES[@]}"
  exit 0
fi

# the files: tracked ones in a git checkout, else every such file under here (build folders left out)
files=()
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  while IFS= read -r -d '' f; do files+=("$f"); done < <(git ls-files -z -- '*.c' '*.h' '*.cu' '*.cuh' '*.md')
else
  while IFS= read -r -d '' f; do files+=("$f"); done < <(find . -path './build*' -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.md' \) -print0 | LC_ALL=C sort -z)
fi

for t in "${TYPES[@]}"; do
  if grep -q -w -- "${t/dcp_/dcp__}" "${files[@]}" && grep -q -w -- "$t" "${files[@]}"; then
    echo "rename_internal_types: ${t/dcp_/dcp__} is already in use while $t is too; nothing renamed" >&2
    exit 1
  fi
done

if [ "${1:-}" = "--check" ]; then
  left=0
  for t in "${TYPES[@]}"; do
    if grep -l -w -- "$t" "${files[@]}" > /dev/null; then
      echo "rename_internal_types: $t still in $(grep -l -w -- "$t" "${files[@]}" | tr '\n' ' ')"
      left=1
    fi
  done
  exit $left
fi

script=""
for t in "${TYPES[@]}"; do script+="s/\\b${t}\\b/${t/dcp_/dcp__}/g;"; done
changed=0
for f in "${files[@]}"; do
  if grep -q -w -E "$(IFS='|'; echo "${TYPES[*]}")" "$f"; then
    sed -i -e "$script" "$f"
    changed=$((changed + 1))
  fi
done
echo "rename_internal_types: ${#TYPES[@]} types, $changed files changed"
