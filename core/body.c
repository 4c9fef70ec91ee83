/* body.c - field tables and the body layout (see body.h). */
#include "body.h"
#include "../alloc/arena.h"

#include <stdio.h>

const uint32_t dcp__field_bit[DCP_NUM_FIELDS] = {DCP_FIELD_TOKENS, DCP_FIELD_LABELS, DCP_FIELD_POSITION_IDS,
                                                 DCP_FIELD_LOSS_MASK};
const size_t dcp__field_size[DCP_NUM_FIELDS] = {8, 8, 8, 4};
const char *const dcp__field_name[DCP_NUM_FIELDS] = {"tokens", "labels", "position_ids", "loss_mask"};

size_t dcp__bytes_per_token(uint32_t fields)
{
    size_t b = 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++)
        if (fields & dcp__field_bit[f]) b += dcp__field_size[f];
    return b;
}

const char *dcp__field_names(uint32_t fields, char *buffer, size_t size)
{
    if (!buffer || size == 0) return "";
    size_t at = 0;
    buffer[0] = '\0';
    for (int f = 0; f < DCP_NUM_FIELDS; f++)
        if (fields & dcp__field_bit[f]) {
            int n = snprintf(buffer + at, size - at, "%s%s", at ? ", " : "", dcp__field_name[f]);
            if (n < 0 || (size_t)n >= size - at) return buffer;
            at += (size_t)n;
        }
    if (fields & ~(uint32_t)DCP_FIELD_ALL)
        snprintf(buffer + at, size - at, "%sbits 0x%x", at ? ", " : "", fields & ~(uint32_t)DCP_FIELD_ALL);
    else if (at == 0) snprintf(buffer, size, "none");
    return buffer;
}

void dcp__body_layout_compute(int64_t microbatches, int64_t cu_entries, int64_t tokens, uint32_t fields,
                              dcp__body_layout *b)
{
    size_t at = 0;
    b->rows = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(dcp__body_row, microbatches));
    b->cu = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(int32_t, cu_entries));
    b->cu_padded = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(int32_t, cu_entries));
    b->prefix = at;
    for (int f = 0; f < DCP_NUM_FIELDS; f++) {
        b->field[f] = SIZE_MAX;
        if (!(fields & dcp__field_bit[f])) continue;
        b->field[f] = at;
        at = dcp__size_add(at, dcp__arena_bytes(dcp__field_size[f], (size_t)tokens));
    }
    b->mask = at;
    at = dcp__size_add(at, DCP_ARENA_BYTES(uint8_t, tokens));
    b->used = at;
}
