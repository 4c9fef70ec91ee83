/*
 * fuzz_thd.c - THD padding and CP slicing with arbitrary alignment, padding
 * target (capacity), fixed cu_seqlens capacity, CP size, partition, tail
 * policy and lengths.
 *
 * Properties:
 *  - dcp__thd_geometry_compute() returns DCP_OK or a documented error with a
 *    message (never undefined behaviour, whatever the sizes);
 *  - on DCP_OK the shape adds up: each rank's slice is partition_total / cp,
 *    its buffer is padded to exactly the target or to the next multiple of
 *    the alignment, cu_seqlens (written into arrays of exactly
 *    num_cu_seqlens entries) scan the lengths, the padded one ends at every
 *    rank's buffer times cp, a fixed capacity fixes the entry count;
 *  - the real-token pieces of all CP ranks hold every real token of every
 *    sequence exactly once, inside the rank's buffer, never overlapping;
 *  - unslicing them gives back the reference's order of operations: pack,
 *    padding mask, sanitise, slice (the CP slice layout) and tail padding
 *    produce the same buffer and mask on every rank.
 *
 * Input layout:
 *   [0] bit 7: cp = 1 + [1], else cp = 2^(bits 0-2)   [1] raw cp
 *   [2] flags: bit 0 contiguous, bit 1 extend_last, bits 2-3 padding (none, alignment, target, both),
 *       bit 4 spans a multiple of 2*cp, bit 5 alignment near INT32_MAX, bit 6 target near INT32_MAX
 *   [3..4] alignment (u16)  [5..6] target (u16)  [7] fixed sequence capacity S (0 = none)
 *   then 3 bytes a sequence: padded (u16; 0xFFFF = INT32_MAX - o), o: original = padded * o / 254
 *   (255: one past padded)
 */
#include "fuzz_common.h"
#include "../tests/support/thd_twins.h"

#include <stdlib.h>

#define MAX_SEQUENCES 256
#define MAX_DATA_TOKENS ((int64_t)1 << 16) /* buffers built only below this many slots */
#define MAX_CHECKED_CP 256

static int32_t original[MAX_SEQUENCES], padded[MAX_SEQUENCES];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size);
    DCP_FUZZ_ASSERT(p != NULL, "calloc %zu x %zu", count, size);
    return p;
}

/* The reference's order on rank r against the fused pieces: same buffer, same mask. */
static void compare_rank(const dcp__thd_params *p, const dcp__thd_geometry *g, const int32_t *cup, const int32_t *cu0,
                         const int32_t *cup0, const int64_t *packed_values, int32_t r)
{
    const int32_t n = g->num_sequences;
    const int64_t total = g->partition_total, nt = g->num_tokens;
    /* packed buffer in the reference's order: every slot of every span numbered, then sanitised by the mask */
    int64_t *packed = xcalloc((size_t)total, sizeof *packed);
    uint8_t *mask = xcalloc((size_t)total, 1);
    memcpy(packed, packed_values, (size_t)total * sizeof *packed);
    dcp__thd_padding_mask_cpu(cu0, cup0, n, total, mask);
    dcp__thd_sanitize_cpu(mask, total, packed, sizeof *packed);
    const size_t max_segments = 2 * (size_t)n + 2;
    int64_t *src = xcalloc(max_segments, sizeof *src), *dst = xcalloc(max_segments, sizeof *dst),
            *len = xcalloc(max_segments, sizeof *len);
    int64_t segments = dcp__cp_slice_layout_cpu(cup, n, total, p->cp, r, p->partition, src, dst, len);
    DCP_FUZZ_ASSERT(segments >= 0, "geometry accepted a shape the CP slice layout refuses (rank %d)", r);
    int64_t *want = xcalloc((size_t)nt, sizeof *want);
    uint8_t *want_mask = xcalloc((size_t)nt, 1);
    memset(want_mask, 1, (size_t)nt);
    for (int64_t i = 0; i < segments; i++)
        DCP_FUZZ_ASSERT(dst[i] >= 0 && len[i] >= 0 && dst[i] + len[i] <= nt && src[i] >= 0 && src[i] + len[i] <= total,
                        "slice segment %lld [%lld,+%lld) -> %lld outside the buffers", (long long)i,
                        (long long)src[i], (long long)len[i], (long long)dst[i]);
    dcp__pack_layout slice = {segments, NULL, src, dst, len};
    const void *values[] = {packed}, *masks[] = {mask};
    dcp__pack_cpu(&slice, values, want, sizeof *want);
    dcp__pack_cpu(&slice, masks, want_mask, 1);

    /* fused: real pieces straight from each sequence */
    int32_t *seq = xcalloc((size_t)n * 2, sizeof *seq);
    int64_t *off = xcalloc((size_t)n * 2, sizeof *off), *loc = xcalloc((size_t)n * 2, sizeof *loc),
            *plen = xcalloc((size_t)n * 2, sizeof *plen), *soff = xcalloc((size_t)n * 2, sizeof *soff);
    int32_t pieces = dcp__thd_real_pieces(g, p, original, cup, r, seq, off, loc, plen);
    for (int32_t i = 0; i < pieces; i++) soff[i] = cup0[seq[i]] + off[i];
    int64_t *got = xcalloc((size_t)nt, sizeof *got);
    uint8_t *got_mask = xcalloc((size_t)nt, 1);
    dcp__pack_layout fused = {pieces, NULL, soff, loc, plen};
    dcp__pack_cpu(&fused, values, got, sizeof *got);
    dcp__padding_mask_from_layout_cpu(&fused, nt, got_mask);
    for (int64_t t = 0; t < nt; t++)
        DCP_FUZZ_ASSERT(got[t] == want[t] && got_mask[t] == want_mask[t],
                        "rank %d slot %lld: fused %lld (mask %d), reference order %lld (mask %d)", r, (long long)t,
                        (long long)got[t], got_mask[t], (long long)want[t], want_mask[t]);
    free(packed), free(mask), free(src), free(dst), free(len), free(want), free(want_mask);
    free(seq), free(off), free(loc), free(plen), free(soff), free(got), free(got_mask);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    const uint8_t b0 = fuzz_u8(&r), b1 = fuzz_u8(&r), flags = fuzz_u8(&r);
    const uint16_t alignment = fuzz_u16(&r), target = fuzz_u16(&r);
    const uint8_t capacity = fuzz_u8(&r);
    dcp__thd_params p;
    p.cp = (b0 & 0x80) ? 1 + b1 : 1 << (b0 & 7);
    p.partition = (flags & 1) ? DCP_CP_CONTIGUOUS : DCP_CP_ZIGZAG;
    p.tail = (flags & 2) ? DCP_THD_TAIL_EXTEND_LAST : DCP_THD_TAIL_APPEND_DUMMY;
    const int mode = (flags >> 2) & 3;
    p.alignment = (mode & 1) ? ((flags & 0x20) ? INT32_MAX - alignment : alignment) : 0;
    p.target = (mode & 2) ? ((flags & 0x40) ? INT32_MAX - target : target) : 0;
    if (p.target > 0) p.alignment = 0; /* as dcp__thd_params_from_config: the target wins */
    p.max_packed_sequences = capacity;
    const int64_t unit = (flags & 0x10) ? 2 * (int64_t)p.cp : 1;

    int32_t n = 0;
    int64_t sum_original = 0;
    while (fuzz_remaining(&r) >= 3 && n < MAX_SEQUENCES) {
        uint16_t pv = fuzz_u16(&r);
        uint8_t o = fuzz_u8(&r);
        int64_t pad = pv == 0xFFFF ? INT32_MAX - o : (int64_t)pv * unit;
        if (pad > INT32_MAX) pad = INT32_MAX;
        padded[n] = (int32_t)pad;
        original[n] = o == 255 ? (int32_t)(pad < INT32_MAX ? pad + 1 : pad) : (int32_t)(pad * o / 254);
        sum_original += original[n];
        n++;
    }

    dcp__error err;
    err.message[0] = '\0';
    dcp__thd_geometry g;
    dcp_status st = dcp__thd_geometry_compute(&p, original, padded, n, &g, &err);
    if (st != DCP_OK) {
        DCP_FUZZ_ASSERT(st == DCP_ERR_BAD_LENGTH || st == DCP_ERR_CAPACITY || st == DCP_ERR_OVERFLOW ||
                            st == DCP_ERR_INVALID_ARGUMENT,
                        "geometry returned %s", dcp_status_str(st));
        DCP_FUZZ_ASSERT(err.message[0] != '\0', "%s without a message", dcp_status_str(st));
        return 0;
    }

    /* ---- the shape adds up ---- */
    const int padding = p.target > 0 || p.alignment > 0;
    int64_t packed = 0, longest = 0;
    for (int32_t k = 0; k < n; k++) {
        DCP_FUZZ_ASSERT(original[k] >= 0 && original[k] <= padded[k] && padded[k] >= 1, "bad lengths accepted");
        packed += padded[k];
        if (padded[k] > longest) longest = padded[k];
    }
    DCP_FUZZ_ASSERT(g.num_sequences == n && g.packed_tokens == packed, "sequence count or packed tokens");
    DCP_FUZZ_ASSERT(g.local_tokens * p.cp == g.partition_total && g.partition_total >= packed,
                    "slice %lld x cp %d != partition %lld", (long long)g.local_tokens, p.cp,
                    (long long)g.partition_total);
    DCP_FUZZ_ASSERT(g.num_tokens >= g.local_tokens, "buffer shorter than the slice");
    if (p.target > 0) DCP_FUZZ_ASSERT(g.num_tokens == p.target, "buffer %lld, target %d", (long long)g.num_tokens, p.target);
    else if (p.alignment > 0)
        DCP_FUZZ_ASSERT(g.num_tokens % p.alignment == 0 && g.num_tokens - g.local_tokens < p.alignment,
                        "buffer %lld not the next multiple of %d after %lld", (long long)g.num_tokens, p.alignment,
                        (long long)g.local_tokens);
    else DCP_FUZZ_ASSERT(g.num_tokens == g.local_tokens && g.partition_total == packed, "unpadded shape grew");
    DCP_FUZZ_ASSERT(g.num_cu_seqlens >= n + 1 + (g.dummy_length > 0), "too few cu_seqlens entries");
    if (padding && p.max_packed_sequences > 0)
        DCP_FUZZ_ASSERT(g.num_cu_seqlens == p.max_packed_sequences + 1, "fixed capacity not honoured");
    DCP_FUZZ_ASSERT(g.max_seqlen >= longest, "max_seqlen %d below the longest span %lld", g.max_seqlen,
                    (long long)longest);

    int32_t *cu = xcalloc((size_t)g.num_cu_seqlens, sizeof *cu), *cup = xcalloc((size_t)g.num_cu_seqlens, sizeof *cup);
    dcp__thd_cu_seqlens_write(&g, original, padded, n, cu, cup);
    DCP_FUZZ_ASSERT(cu[0] == 0 && cup[0] == 0, "cu_seqlens start");
    for (int32_t i = 1; i < g.num_cu_seqlens; i++)
        DCP_FUZZ_ASSERT(cu[i] >= cu[i - 1] && cup[i] >= cup[i - 1] && cu[i] - cu[i - 1] <= cup[i] - cup[i - 1],
                        "cu_seqlens entry %d: %d after %d, padded %d after %d", i, cu[i], cu[i - 1], cup[i], cup[i - 1]);
    for (int32_t k = 0; k < n; k++) {
        DCP_FUZZ_ASSERT(cu[k + 1] - cu[k] == original[k], "cu_seqlens of sequence %d", k);
        DCP_FUZZ_ASSERT(k == n - 1 ? cup[k + 1] - cup[k] >= padded[k] : cup[k + 1] - cup[k] == padded[k],
                        "cu_seqlens_padded of sequence %d", k);
    }
    const int64_t end = cup[g.num_cu_seqlens - 1];
    DCP_FUZZ_ASSERT(padding ? end == g.num_tokens * p.cp : end == packed, "cu_seqlens_padded ends at %lld",
                    (long long)end);

    /* ---- every real token once, inside its rank's buffer ---- */
    int32_t *seq = xcalloc((size_t)n * 2, sizeof *seq);
    int64_t *off = xcalloc((size_t)n * 2, sizeof *off), *loc = xcalloc((size_t)n * 2, sizeof *loc),
            *len = xcalloc((size_t)n * 2, sizeof *len);
    const int exact = sum_original <= MAX_DATA_TOKENS && g.num_tokens <= MAX_DATA_TOKENS;
    uint8_t *seen = exact ? xcalloc((size_t)sum_original, 1) : NULL;
    uint8_t *slot = exact ? xcalloc((size_t)g.num_tokens, 1) : NULL;
    int64_t covered = 0;
    const int32_t ranks_checked = p.cp < MAX_CHECKED_CP ? p.cp : MAX_CHECKED_CP;
    for (int32_t rank = 0; rank < ranks_checked; rank++) {
        int32_t pieces = dcp__thd_real_pieces(&g, &p, original, cup, rank, seq, off, loc, len);
        DCP_FUZZ_ASSERT(pieces >= 0 && pieces <= 2 * n, "%d pieces for %d sequences", pieces, n);
        if (slot) memset(slot, 0, (size_t)g.num_tokens);
        for (int32_t i = 0; i < pieces; i++) {
            DCP_FUZZ_ASSERT(seq[i] >= 0 && seq[i] < n && len[i] > 0 && off[i] >= 0 &&
                                off[i] + len[i] <= original[seq[i]] && loc[i] >= 0 && loc[i] + len[i] <= g.num_tokens,
                            "rank %d piece %d: sequence %d [%lld,+%lld) at %lld", rank, i, seq[i], (long long)off[i],
                            (long long)len[i], (long long)loc[i]);
            covered += len[i];
            if (!exact) continue;
            for (int64_t t = 0; t < len[i]; t++) {
                DCP_FUZZ_ASSERT(!slot[loc[i] + t], "rank %d: slot %lld written twice", rank, (long long)(loc[i] + t));
                slot[loc[i] + t] = 1;
                int64_t token = cu[seq[i]] + off[i] + t;
                DCP_FUZZ_ASSERT(!seen[token], "token %lld of sequence %d placed twice", (long long)(off[i] + t),
                                seq[i]);
                seen[token] = 1;
            }
        }
    }
    if (ranks_checked == p.cp) DCP_FUZZ_ASSERT(covered == sum_original, "%lld of %lld real tokens placed",
                                               (long long)covered, (long long)sum_original);

    /* ---- against the reference's order of operations ---- */
    if (exact && (int64_t)p.cp * g.partition_total <= 4 * MAX_DATA_TOKENS && ranks_checked == p.cp) {
        int32_t *cu0 = xcalloc((size_t)n + 1, sizeof *cu0), *cup0 = xcalloc((size_t)n + 1, sizeof *cup0), longest32;
        dcp__cu_seqlens_cpu(original, padded, n, cu0, cup0, &longest32);
        int64_t *values = xcalloc((size_t)g.partition_total, sizeof *values);
        for (int32_t k = 0; k < n; k++)
            for (int32_t j = 0; j < padded[k]; j++) values[cup0[k] + j] = ((int64_t)k << 32) + j + 1;
        for (int32_t rank = 0; rank < p.cp; rank++) compare_rank(&p, &g, cup, cu0, cup0, values, rank);
        free(cu0), free(cup0), free(values);
    }
    free(cu), free(cup), free(seq), free(off), free(loc), free(len), free(seen), free(slot);
    return 0;
}
