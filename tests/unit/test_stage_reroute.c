/*
 * test_stage_reroute.c - the reroute stage (pipeline/reroute.c) on its own:
 * geometry, receive (and own) and send tables on tiny hand-made plans over
 * DP 2 x CP 2, per-peer blocks, the exchange, and the tables carried through
 * the CPU mover over 4 in-process ranks.
 *
 * The batch: three sequences, padded lengths {8, 4, 4}, original {6, 4, 4}.
 * Ranks are DPxCP ranks: DP rank p holds ranks 2p and 2p+1.  A piece of a
 * sequence owned by DP rank p bound for rank d is sent by rank 2p + d % 2,
 * unless d is itself one of 2p, 2p+1: a rank computing on its own DP rank's
 * sequence lists that piece as an own piece (sample, src, dst), landed from
 * its samples; it is neither sent nor received, and counts in no tokens_to,
 * tokens_from or exchange block.
 *
 * Zigzag cuts a span of L slots over cp ranks into 2cp chunks of L/(2cp);
 * CP rank r takes chunk r, then chunk 2cp-1-r, landing at start/cp.  Only
 * slots before a sequence's original length are real (and move).
 * Contiguous cuts the packed group into cp windows of equal width.
 */
#include "dcp_test.h"
#include "../core/plan.h"
#include "../pipeline/step.h"

#include <stdlib.h>

#define NR 4      /* DPxCP ranks */
#define MAXP 16   /* pieces */

/* ------------------------------------------------------------------------ */
/* Fixture: config, plan, gathered lengths, each DP rank's sequence table    */
/* ------------------------------------------------------------------------ */

typedef struct fixture {
    dcp_config c;
    _Alignas(64) unsigned char plan_memory[4096];
    dcp__arena plan_arena;
    dcp_plan plan;
    int32_t padded[3], original[3], offsets[3];
    dcp__step_lengths L;
    int32_t local_sample[2][4];
    int64_t local_start[2][4];
    int32_t local_pairs[2][8];
    dcp__input_spans local[2];
} fixture;

static void fixture_config(fixture *f, dcp_cp_partition partition)
{
    dcp_config_default(&f->c);
    f->c.data_parallel_size = 2;
    f->c.context_parallel_size = 2;
    f->c.max_sequences = 4;
    f->c.max_seqlen_per_rank = 8;
    f->c.max_tokens_per_rank = 64;
    f->c.cp_partition = partition;
}

static int fixture_plan_begin(fixture *f)
{
    dcp__arena_init(&f->plan_arena, f->plan_memory, sizeof f->plan_memory);
    if (dcp__plan_init(&f->plan, &f->plan_arena, 4, 8, 8) != DCP_OK) return 0;
    dcp__plan_clear(&f->plan, NR);
    return 1;
}

static int push(fixture *f, int32_t first_rank, int32_t cp, const int32_t *ids, int32_t count)
{
    return dcp__plan_push_group(&f->plan, first_rank, cp, ids, count, NULL) == DCP_OK;
}

/* Lengths {8,4,4} / {6,4,4} with DP rank offsets {0, split, 3}. */
static void fixture_lengths(fixture *f, int32_t split)
{
    const int32_t padded[3] = {8, 4, 4}, original[3] = {6, 4, 4};
    memcpy(f->padded, padded, sizeof padded);
    memcpy(f->original, original, sizeof original);
    f->offsets[0] = 0;
    f->offsets[1] = split;
    f->offsets[2] = 3;
    memset(&f->L, 0, sizeof f->L);
    f->L.padded = f->padded;
    f->L.original = f->original;
    f->L.rank_offsets = f->offsets;
    f->L.num_sequences = 3;
    for (int p = 0; p < 2; p++) {
        f->local[p].sample = f->local_sample[p];
        f->local[p].start = f->local_start[p];
        f->local[p].pairs = f->local_pairs[p];
    }
}

static void set_local(fixture *f, int p, int32_t k, int32_t sample, int64_t start, int32_t padded, int32_t original)
{
    f->local_sample[p][k] = sample;
    f->local_start[p][k] = start;
    f->local_pairs[p][2 * k] = padded;
    f->local_pairs[p][2 * k + 1] = original;
    if (k + 1 > f->local[p].count) f->local[p].count = k + 1;
    f->local[p].tokens += padded;
    f->local[p].original_tokens += original;
}

/*
 * Clear a fixture that may be reused: a plan arena laid over plan_memory left it poisoned (under
 * AddressSanitizer), so make it addressable again before writing it.
 */
static void fixture_wipe(fixture *f)
{
    dcp__arena a;
    dcp__arena_init(&a, f->plan_memory, sizeof f->plan_memory);
    dcp__arena_release(&a);
    memset(f, 0, sizeof *f);
}

/*
 * One microbatch: group [0,2) cp 2 computes ids {1, 2}; group [2,4) cp 2 computes id {0}.
 * DP rank 0 owns id 0 (offsets {0,1,3}): its sample 0, padded to 8 with 6 real tokens.
 * DP rank 1 owns ids 1, 2: its sample 0 is empty (dropped), sample 1 is pre-packed with
 * cu {0, 4, 8}, so id 1 starts at 0 and id 2 at 4 of sample 1.
 * Tokens therefore cross DP ranks both ways.
 */
static int fixture_one_microbatch(fixture *f, dcp_cp_partition partition)
{
    fixture_wipe(f);
    fixture_config(f, partition);
    fixture_lengths(f, 1);
    set_local(f, 0, 0, 0, 0, 8, 6);
    set_local(f, 1, 0, 1, 0, 4, 4);
    set_local(f, 1, 1, 1, 4, 4, 4);
    if (!fixture_plan_begin(f)) return 0;
    const int32_t g0[2] = {1, 2}, g1[1] = {0};
    if (dcp__plan_open_microbatch(&f->plan, NULL) != DCP_OK || !push(f, 0, 2, g0, 2) || !push(f, 2, 2, g1, 1))
        return 0;
    dcp__plan_close_microbatch(&f->plan);
    return 1;
}

/*
 * Two microbatches: mb 0 is one group [0,4) cp 4 over id 0; mb 1 is [0,2) cp 2 over id 1 and
 * [2,4) cp 2 over id 2 (crossed: [0,2) over id 2 and [2,4) over id 1).  DP rank 0 owns ids 0, 1
 * (offsets {0,2,3}): sample 0 padded 8/6, sample 1 one pre-packed sequence of 4; DP rank 1 owns
 * id 2: sample 1 (sample 0 empty).
 */
static int fixture_two_microbatches_as(fixture *f, int crossed)
{
    fixture_wipe(f);
    fixture_config(f, DCP_CP_ZIGZAG);
    fixture_lengths(f, 2);
    set_local(f, 0, 0, 0, 0, 8, 6);
    set_local(f, 0, 1, 1, 0, 4, 4);
    set_local(f, 1, 0, 1, 0, 4, 4);
    if (!fixture_plan_begin(f)) return 0;
    const int32_t a[1] = {0}, b[1] = {1}, c[1] = {2};
    if (dcp__plan_open_microbatch(&f->plan, NULL) != DCP_OK || !push(f, 0, 4, a, 1)) return 0;
    dcp__plan_close_microbatch(&f->plan);
    if (dcp__plan_open_microbatch(&f->plan, NULL) != DCP_OK || !push(f, 0, 2, crossed ? c : b, 1) ||
        !push(f, 2, 2, crossed ? b : c, 1))
        return 0;
    dcp__plan_close_microbatch(&f->plan);
    return 1;
}

static int fixture_two_microbatches(fixture *f) { return fixture_two_microbatches_as(f, 0); }
static int fixture_two_microbatches_crossed(fixture *f) { return fixture_two_microbatches_as(f, 1); }

/* ------------------------------------------------------------------------ */
/* One rank's tables                                                         */
/* ------------------------------------------------------------------------ */

typedef struct tables {
    dcp__thd_geometry geo[4];
    int32_t group[4], first[5], original[8], padded[8];
    dcp__rank_geometry geometry;
    dcp__body_row rows[4];
    int32_t cu[16], cu_padded[16];
    int32_t sender[MAXP];
    int64_t cursor[MAXP], dst[MAXP], length[MAXP], tokens_from[NR];
    int32_t o_sample[MAXP];
    int64_t o_src[MAXP], o_dst[MAXP], o_length[MAXP];
    dcp__receive_table rt;
    int32_t s_sample[MAXP], s_peer[MAXP];
    int64_t s_src[MAXP], s_cursor[MAXP], s_length[MAXP], tokens_to[NR];
    dcp__send_table st;
    _Alignas(64) unsigned char gs_memory[16384];
    dcp__arena gs_arena;
    dcp__group_scratch gs;
    dcp__error err;
} tables;

/* Geometry (capacities as given), receive and send tables of `rank`. */
static dcp_status compute_tables(const fixture *f, int32_t rank, int64_t token_capacity, int64_t cu_capacity,
                                 int64_t send_capacity, tables *t)
{
    memset(t, 0, sizeof *t);
    dcp__error_clear(&t->err);
    dcp__arena_init(&t->gs_arena, t->gs_memory, sizeof t->gs_memory);
    if (dcp__group_scratch_take(&f->c, &t->gs_arena, &t->gs) != DCP_OK) return DCP_ERR_CAPACITY;
    t->geometry.microbatch = t->geo;
    t->geometry.group = t->group;
    t->geometry.first = t->first;
    t->geometry.original = t->original;
    t->geometry.padded = t->padded;
    dcp_status s = dcp__reroute_geometry(&f->plan, &f->c, &f->L, rank, token_capacity, cu_capacity, &t->geometry,
                                         &t->err);
    if (s != DCP_OK) return s;
    /* counts -1 until the stage writes them */
    dcp__receive_table rt = {t->rows,
                             t->cu,
                             t->cu_padded,
                             {-1, t->sender, t->cursor, t->dst, t->length},
                             t->tokens_from,
                             {-1, t->o_sample, t->o_src, t->o_dst, t->o_length},
                             -1};
    t->rt = rt;
    dcp__reroute_receive(&f->plan, &f->c, &f->L, rank, &f->local[rank / 2], &t->geometry, &t->gs, &t->rt);
    dcp__send_table st = {{-1, t->s_sample, t->s_src, t->s_peer, t->s_cursor, t->s_length}, send_capacity, t->tokens_to};
    t->st = st;
    return dcp__reroute_send(&f->plan, &f->c, &f->L, rank, &f->local[rank / 2], &t->gs, &t->st, &t->err);
}

static void release_tables(tables *t) { dcp__arena_release(&t->gs_arena); }

/*
 * The geometry stage alone.  With max_sequences below the batch's sequence count (which a step
 * refuses in its gather) only the geometry may run: the other stages' scratch holds
 * max_sequences lengths.
 */
static dcp_status compute_geometry(const fixture *f, int32_t rank, tables *t)
{
    memset(t, 0, sizeof *t);
    dcp__error_clear(&t->err);
    dcp__arena_init(&t->gs_arena, t->gs_memory, sizeof t->gs_memory);
    if (dcp__group_scratch_take(&f->c, &t->gs_arena, &t->gs) != DCP_OK) return DCP_ERR_CAPACITY;
    t->geometry.microbatch = t->geo;
    t->geometry.group = t->group;
    t->geometry.first = t->first;
    t->geometry.original = t->original;
    t->geometry.padded = t->padded;
    return dcp__reroute_geometry(&f->plan, &f->c, &f->L, rank, 64, 64, &t->geometry, &t->err);
}

/* What a rank's tables must hold. */
typedef struct want {
    int64_t total_tokens, total_cu;
    int64_t row[2][8]; /* token_offset, num_tokens, cu_offset, num_cu_seqlens, max_seqlen, local_cp, cp_rank, seqs */
    int32_t cu[8], cu_padded[8];
    int64_t pieces;
    int32_t sender[8];
    int64_t cursor[8], dst[8], length[8], from[NR];
    int64_t sends;
    int32_t s_sample[8], s_peer[8];
    int64_t s_src[8], s_cursor[8], s_length[8], to[NR];
    int64_t owns; /* own pieces: 0 where the rank computes on no sequence of its DP rank */
    int32_t o_sample[8];
    int64_t o_src[8], o_dst[8], o_length[8], own_tokens;
} want;

/* The geometry's per-microbatch group and the lengths of those groups' sequences, microbatch after microbatch. */
typedef struct want_geometry {
    int32_t group[2], first[3], original[4], padded[4];
} want_geometry;

static void check_tables(const tables *t, const want *w, int32_t microbatches, int32_t rank, int line)
{
#define EQ(got, expected, what, i)                                                                             \
    do {                                                                                                     \
        long long g_ = (long long)(got), e_ = (long long)(expected);                                         \
        if (g_ != e_)                                                                                        \
            dcp_test_fail(__FILE__, line, "rank %d: %s[%d] = %lld, expected %lld", rank, what, (int)(i), g_, \
                          e_);                                                                               \
    } while (0)
    EQ(t->geometry.total_tokens, w->total_tokens, "total_tokens", 0);
    EQ(t->geometry.total_cu, w->total_cu, "total_cu", 0);
    for (int32_t m = 0; m < microbatches; m++) {
        const dcp__body_row *r = &t->rows[m];
        const int64_t got[8] = {r->token_offset, r->num_tokens,  r->cu_offset, r->num_cu_seqlens,
                                r->max_seqlen,   r->local_cp_size, r->cp_rank,   r->num_sequences};
        for (int k = 0; k < 8; k++) EQ(got[k], w->row[m][k], m == 0 ? "row 0 field" : "row 1 field", k);
    }
    for (int64_t i = 0; i < w->total_cu; i++) {
        EQ(t->cu[i], w->cu[i], "cu_seqlens", i);
        EQ(t->cu_padded[i], w->cu_padded[i], "cu_seqlens_padded", i);
    }
    EQ(t->rt.received.count, w->pieces, "receive count", 0);
    for (int64_t i = 0; i < w->pieces && i < t->rt.received.count; i++) {
        EQ(t->sender[i], w->sender[i], "receive sender", i);
        EQ(t->cursor[i], w->cursor[i], "receive cursor", i);
        EQ(t->dst[i], w->dst[i], "receive dst", i);
        EQ(t->length[i], w->length[i], "receive length", i);
    }
    for (int q = 0; q < NR; q++) EQ(t->tokens_from[q], w->from[q], "tokens_from", q);
    EQ(t->st.pieces.count, w->sends, "send count", 0);
    for (int64_t i = 0; i < w->sends && i < t->st.pieces.count; i++) {
        EQ(t->s_sample[i], w->s_sample[i], "send sample", i);
        EQ(t->s_src[i], w->s_src[i], "send src", i);
        EQ(t->s_peer[i], w->s_peer[i], "send peer", i);
        EQ(t->s_cursor[i], w->s_cursor[i], "send cursor", i);
        EQ(t->s_length[i], w->s_length[i], "send length", i);
    }
    for (int q = 0; q < NR; q++) EQ(t->tokens_to[q], w->to[q], "tokens_to", q);
    EQ(t->rt.own.count, w->owns, "own count", 0);
    for (int64_t i = 0; i < w->owns && i < t->rt.own.count; i++) {
        EQ(t->o_sample[i], w->o_sample[i], "own sample", i);
        EQ(t->o_src[i], w->o_src[i], "own src", i);
        EQ(t->o_dst[i], w->o_dst[i], "own dst", i);
        EQ(t->o_length[i], w->o_length[i], "own length", i);
    }
    EQ(t->rt.own_tokens, w->own_tokens, "own tokens", 0);
    /* the counts agree with the pieces: tokens_from sums the received lengths, own_tokens the own ones */
    int64_t received = 0, from = 0, own = 0;
    for (int64_t i = 0; i < t->rt.received.count; i++) received += t->length[i];
    for (int q = 0; q < NR; q++) from += t->tokens_from[q];
    for (int64_t i = 0; i < t->rt.own.count; i++) own += t->o_length[i];
    EQ(from, received, "tokens_from summed", 0);
    EQ(t->rt.own_tokens, own, "own_tokens summed", 0);
    /* nothing to or from itself */
    EQ(t->tokens_from[rank], 0, "tokens_from", rank);
    EQ(t->tokens_to[rank], 0, "tokens_to", rank);
    for (int64_t i = 0; i < t->rt.received.count; i++) EQ(t->sender[i] == rank, 0, "received from itself", i);
    for (int64_t i = 0; i < t->st.pieces.count; i++) EQ(t->s_peer[i] == rank, 0, "sent to itself", i);
#undef EQ
}

static void check_geometry(const tables *t, const want_geometry *w, int32_t microbatches, int32_t rank, int line)
{
    for (int32_t m = 0; m < microbatches; m++)
        if (t->geometry.group[m] != w->group[m])
            dcp_test_fail(__FILE__, line, "rank %d: group[%d] = %d, expected %d", rank, m, t->geometry.group[m],
                          w->group[m]);
    for (int32_t m = 0; m <= microbatches; m++)
        if (t->geometry.first[m] != w->first[m])
            dcp_test_fail(__FILE__, line, "rank %d: first[%d] = %d, expected %d", rank, m, t->geometry.first[m],
                          w->first[m]);
    for (int32_t k = 0; k < w->first[microbatches]; k++)
        if (t->geometry.original[k] != w->original[k] || t->geometry.padded[k] != w->padded[k])
            dcp_test_fail(__FILE__, line, "rank %d: lengths[%d] = (%d, %d), expected (%d, %d)", rank, k,
                          t->geometry.original[k], t->geometry.padded[k], w->original[k], w->padded[k]);
}

static void check_all_ranks_geometry(const fixture *f, const want *w, const want_geometry *wg, int32_t microbatches,
                                     int line)
{
    tables *t = malloc(sizeof *t);
    if (!t) {
        dcp_test_fail(__FILE__, line, "out of memory");
        return;
    }
    for (int32_t r = 0; r < NR; r++) {
        dcp_status s = compute_tables(f, r, 64, 64, MAXP, t);
        if (s != DCP_OK) {
            dcp_test_fail(__FILE__, line, "rank %d: %s: %s", r, dcp_status_str(s), t->err.message);
        } else {
            check_tables(t, &w[r], microbatches, r, line);
            check_geometry(t, &wg[r], microbatches, r, line);
        }
        release_tables(t);
    }
    free(t);
}

/*
 * The one-microbatch plan: ranks 0, 1 hold group 0 (ids 1, 2: original = padded = 4, 4); ranks 2, 3 group 1
 * (id 0: original 6, padded 8).  THD padding does not change these: they are the plan's lengths.
 */
static const want_geometry one_geometry[NR] = {
    {{0}, {0, 2}, {4, 4}, {4, 4}}, {{0}, {0, 2}, {4, 4}, {4, 4}}, {{1}, {0, 1}, {6}, {8}}, {{1}, {0, 1}, {6}, {8}}};

static void check_all_ranks(const fixture *f, const want *w, int32_t microbatches, int line)
{
    check_all_ranks_geometry(f, w, one_geometry, microbatches, line);
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Zigzag, one microbatch, no padding.
 * Group [0,2), ids {1,2}: each span 4, chunk 4/4 = 1; packed 8, each rank 8/2 = 4 slots;
 *   cu = cu_padded = {0,4,8}; max_seqlen 4.
 *   rank 0 (CP 0) takes chunks 0 and 3 of each: id 1 slots 0, 3 -> local 0, 1; id 2 slots 0, 3 -> local 2, 3
 *     (id 2 starts at 4, 4/2 = 2).  All real; sender 1*2 + 0 = 2, cursors 0..3.
 *     Rank 2 sends them: sample 1, src = start + offset = 0, 3, 4+0, 4+3 = {0,3,4,7}.
 *   rank 1 (CP 1) takes chunks 1 and 2: offsets {1,2} of each; sender 3; src {1,2,5,6}.
 * Group [2,4), id {0}: span 8, chunk 2; original 6, so chunk 3 (slots 6,7) is padding; cu {0,6}, cu_padded
 *   {0,8}; max_seqlen 8.
 *   rank 2 (CP 0): chunk 0 = slots 0..1 -> local 0, length 2; chunk 3 has no real slot.  Sender 0*2 + 0 = 0.
 *   rank 3 (CP 1): chunk 1 = slots 2..3 -> local 0; chunk 2 = slots 4..5 -> local 2.  Sender 1; cursors 0, 2.
 * Every rank computes on the other DP rank's sequences only: every piece travels, no own piece.
 */
static const want zigzag_one[NR] = {
    {4, 3, {{0, 4, 0, 3, 4, 2, 0, 2}}, {0, 4, 8}, {0, 4, 8},
     4, {2, 2, 2, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 0, 4, 0},
     1, {0}, {2}, {0}, {0}, {2}, {0, 0, 2, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 3, {{0, 4, 0, 3, 4, 2, 1, 2}}, {0, 4, 8}, {0, 4, 8},
     4, {3, 3, 3, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 0, 0, 4},
     2, {0, 0}, {3, 3}, {2, 4}, {0, 2}, {2, 2}, {0, 0, 0, 4},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 2, {{0, 4, 0, 2, 8, 2, 0, 1}}, {0, 6}, {0, 8},
     1, {0}, {0}, {0}, {2}, {2, 0, 0, 0},
     4, {1, 1, 1, 1}, {0, 0, 0, 0}, {0, 3, 4, 7}, {0, 1, 2, 3}, {1, 1, 1, 1}, {4, 0, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 2, {{0, 4, 0, 2, 8, 2, 1, 1}}, {0, 6}, {0, 8},
     2, {1, 1}, {0, 2}, {0, 2}, {2, 2}, {0, 4, 0, 0},
     4, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 2, 5, 6}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 4, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
};

DCP_TEST(zigzag_one_microbatch_tables)
{
    fixture *f = malloc(sizeof *f);
    DCP_REQUIRE(f);
    const int planned = fixture_one_microbatch(f, DCP_CP_ZIGZAG);
    if (!planned) free(f);
    DCP_REQUIRE(planned);
    check_all_ranks(f, zigzag_one, 1, __LINE__);
    /* the geometry of one microbatch in full, on ranks 0 and 2 */
    tables *t = malloc(sizeof *t);
    DCP_REQUIRE(t);
    DCP_REQUIRE_OK(compute_tables(f, 0, 64, 64, MAXP, t));
    DCP_CHECK_EQ_INT(t->geo[0].num_sequences, 2);
    DCP_CHECK_EQ_INT(t->geo[0].packed_tokens, 8);
    DCP_CHECK_EQ_INT(t->geo[0].partition_total, 8);
    DCP_CHECK_EQ_INT(t->geo[0].local_tokens, 4);
    DCP_CHECK_EQ_INT(t->geo[0].num_tokens, 4);
    DCP_CHECK_EQ_INT(t->geo[0].last_padded_end, 8);
    DCP_CHECK_EQ_INT(t->geo[0].dummy_length, 0);
    DCP_CHECK_EQ_INT(t->geo[0].num_cu_seqlens, 3);
    DCP_CHECK_EQ_INT(t->geo[0].max_seqlen, 4);
    release_tables(t);
    DCP_REQUIRE_OK(compute_tables(f, 2, 64, 64, MAXP, t));
    DCP_CHECK_EQ_INT(t->geo[0].num_sequences, 1);
    DCP_CHECK_EQ_INT(t->geo[0].local_tokens, 4);
    DCP_CHECK_EQ_INT(t->geo[0].num_cu_seqlens, 2);
    DCP_CHECK_EQ_INT(t->geo[0].max_seqlen, 8);
    release_tables(t);
    free(t);
    free(f);
}

/*
 * Contiguous, one microbatch, no padding: each group's packed 8 slots in windows [0,4) and [4,8).
 * Group [0,2): id 1 is [0,4), id 2 is [4,8): rank 0 takes all of id 1 (4 tokens, from rank 2, sample 1
 *   src 0), rank 1 all of id 2 (from rank 3, sample 1 src 4).
 * Group [2,4): id 0 is [0,8) with real [0,6): rank 2 takes [0,4) (4 tokens from rank 0, src 0), rank 3
 *   takes [4,6) (2 tokens from rank 1, src 4) and slots 2, 3 of it are padding.
 * Rows and cu arrays are those of zigzag: the same spans, the same slot counts.
 */
static const want contiguous_one[NR] = {
    {4, 3, {{0, 4, 0, 3, 4, 2, 0, 2}}, {0, 4, 8}, {0, 4, 8},
     1, {2}, {0}, {0}, {4}, {0, 0, 4, 0},
     1, {0}, {2}, {0}, {0}, {4}, {0, 0, 4, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 3, {{0, 4, 0, 3, 4, 2, 1, 2}}, {0, 4, 8}, {0, 4, 8},
     1, {3}, {0}, {0}, {4}, {0, 0, 0, 4},
     1, {0}, {3}, {4}, {0}, {2}, {0, 0, 0, 2},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 2, {{0, 4, 0, 2, 8, 2, 0, 1}}, {0, 6}, {0, 8},
     1, {0}, {0}, {0}, {4}, {4, 0, 0, 0},
     1, {1}, {0}, {0}, {0}, {4}, {4, 0, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 2, {{0, 4, 0, 2, 8, 2, 1, 1}}, {0, 6}, {0, 8},
     1, {1}, {0}, {0}, {2}, {0, 2, 0, 0},
     1, {1}, {1}, {4}, {0}, {4}, {0, 4, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
};

DCP_TEST(contiguous_one_microbatch_tables)
{
    fixture *f = malloc(sizeof *f);
    DCP_REQUIRE(f);
    const int planned = fixture_one_microbatch(f, DCP_CP_CONTIGUOUS);
    if (!planned) free(f);
    DCP_REQUIRE(planned);
    check_all_ranks(f, contiguous_one, 1, __LINE__);
    free(f);
}

/*
 * Zigzag over two microbatches: destinations shift by the earlier microbatches' slots, and a rank
 * computing on its own DP rank's sequences keeps those pieces (own pieces, from its samples).
 * mb 0: id 0 (span 8, original 6) on cp 4: chunk 1; rank r takes chunks r and 7-r, chunks 6, 7 are
 *   padding.  Each rank holds 8/4 = 2 slots; cu {0,6}, cu_padded {0,8}; max_seqlen 8.
 *   rank 0: chunk 0 -> local 0;  rank 1: chunk 1 -> 0;  rank 2: chunks 2, 5 -> 0, 1;  rank 3: chunks 3, 4.
 *   id 0 is DP 0's (sample 0 from 0): ranks 0, 1 keep offsets 0 and 1 (own, dst 0); ranks 2, 3 receive
 *   from rank 0 (offsets 2, 5) and rank 1 (offsets 3, 4), cursors 0, 1.
 * mb 1: id 1 (DP 0) on [0,2), id 2 (DP 1) on [2,4), each span 4, chunk 1, 2 slots a rank, all real;
 *   cu = cu_padded = {0,4}; max_seqlen 4; slots 2..3 of each rank (token offset 2, cu offset 2).
 *   Every rank computes on its own DP rank's sequence: own pieces only, dst 2 and 3.
 *   rank 0: id 1 offsets 0, 3 = sample 1 src 0, 3;  rank 1: offsets 1, 2 = src 1, 2;
 *   rank 2: id 2 offsets 0, 3 = its sample 1 src 0, 3;  rank 3: src 1, 2.
 * So ranks 0, 1 receive nothing (3 own tokens each: 1 + 2) and ranks 2, 3 receive 2 and keep 2.
 * Send side: rank 0 sends mb 0's offsets 2, 5 to rank 2 only (its own offset 0 stays, mb 1 sends
 *   nothing: its one receiver in group [0,2) with CP rank 0 is itself); rank 1 sends offsets 3, 4 to
 *   rank 3; ranks 2, 3 send nothing (id 2's receivers on their CP rank are themselves).
 */
static const want zigzag_two[NR] = {
    {4, 4, {{0, 2, 0, 2, 8, 4, 0, 1}, {2, 2, 2, 2, 4, 2, 0, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     0, {0}, {0}, {0}, {0}, {0, 0, 0, 0},
     2, {0, 0}, {2, 2}, {2, 5}, {0, 1}, {1, 1}, {0, 0, 2, 0},
     3, {0, 1, 1}, {0, 0, 3}, {0, 2, 3}, {1, 1, 1}, 3},
    {4, 4, {{0, 2, 0, 2, 8, 4, 1, 1}, {2, 2, 2, 2, 4, 2, 1, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     0, {0}, {0}, {0}, {0}, {0, 0, 0, 0},
     2, {0, 0}, {3, 3}, {3, 4}, {0, 1}, {1, 1}, {0, 0, 0, 2},
     3, {0, 1, 1}, {1, 1, 2}, {0, 2, 3}, {1, 1, 1}, 3},
    {4, 4, {{0, 2, 0, 2, 8, 4, 2, 1}, {2, 2, 2, 2, 4, 2, 0, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     2, {0, 0}, {0, 1}, {0, 1}, {1, 1}, {2, 0, 0, 0},
     0, {0}, {0}, {0}, {0}, {0}, {0, 0, 0, 0},
     2, {1, 1}, {0, 3}, {2, 3}, {1, 1}, 2},
    {4, 4, {{0, 2, 0, 2, 8, 4, 3, 1}, {2, 2, 2, 2, 4, 2, 1, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     2, {1, 1}, {0, 1}, {0, 1}, {1, 1}, {0, 2, 0, 0},
     0, {0}, {0}, {0}, {0}, {0}, {0, 0, 0, 0},
     2, {1, 1}, {1, 2}, {2, 3}, {1, 1}, 2},
};

/*
 * The two-microbatch plans: every rank holds group 0 (id 0: original 6, padded 8) in mb 0; in mb 1 ranks
 * 0, 1 hold group 1 and ranks 2, 3 group 2, each one sequence of 4.  (Crossed, groups 1 and 2 hold ids 2
 * and 1 instead: the same lengths.)
 */
static const want_geometry two_geometry[NR] = {{{0, 1}, {0, 1, 2}, {6, 4}, {8, 4}},
                                               {{0, 1}, {0, 1, 2}, {6, 4}, {8, 4}},
                                               {{0, 2}, {0, 1, 2}, {6, 4}, {8, 4}},
                                               {{0, 2}, {0, 1, 2}, {6, 4}, {8, 4}}};

DCP_TEST(zigzag_two_microbatch_tables)
{
    fixture *f = malloc(sizeof *f);
    DCP_REQUIRE(f);
    const int planned = fixture_two_microbatches(f);
    if (!planned) free(f);
    DCP_REQUIRE(planned);
    check_all_ranks_geometry(f, zigzag_two, two_geometry, 2, __LINE__);
    free(f);
}

/*
 * The crossed plan: mb 0 as above; mb 1 puts id 2 (DP 1) on [0,2) and id 1 (DP 0) on [2,4), so every
 * rank receives in mb 1 and cursors run on per sender across microbatches.
 *   rank 0: mb 0 keeps offset 0 of id 0 (own, sample 0 src 0, dst 0); mb 1 receives id 2 offsets 0, 3
 *     from rank 1*2 + 0 = 2, cursors 0, 1, dst 2, 3.  Rank 1 likewise: own src 1; from rank 3.
 *   rank 2: mb 0 receives offsets 2, 5 of id 0 from rank 0 (cursors 0, 1, dst 0, 1); mb 1 id 1 offsets
 *     0, 3 from rank 0 again: its cursors run on to 2, 3 (dst 2, 3).  Rank 3 likewise from rank 1.
 *     Neither keeps anything: it computes on no sequence of DP 1.
 * Send side: rank 0 sends id 0's offsets 2, 5 (sample 0) then id 1's offsets 0, 3 (sample 1) to rank 2,
 *   cursors 0..3; rank 1 sends offsets 3, 4 and 1, 2 to rank 3; rank 2 sends id 2 offsets 0, 3 (its
 *   sample 1) to rank 0; rank 3 offsets 1, 2 to rank 1.
 */
static const want crossed_two[NR] = {
    {4, 4, {{0, 2, 0, 2, 8, 4, 0, 1}, {2, 2, 2, 2, 4, 2, 0, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     2, {2, 2}, {0, 1}, {2, 3}, {1, 1}, {0, 0, 2, 0},
     4, {0, 0, 1, 1}, {2, 2, 2, 2}, {2, 5, 0, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 0, 4, 0},
     1, {0}, {0}, {0}, {1}, 1},
    {4, 4, {{0, 2, 0, 2, 8, 4, 1, 1}, {2, 2, 2, 2, 4, 2, 1, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     2, {3, 3}, {0, 1}, {2, 3}, {1, 1}, {0, 0, 0, 2},
     4, {0, 0, 1, 1}, {3, 3, 3, 3}, {3, 4, 1, 2}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 0, 0, 4},
     1, {0}, {1}, {0}, {1}, 1},
    {4, 4, {{0, 2, 0, 2, 8, 4, 2, 1}, {2, 2, 2, 2, 4, 2, 0, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     4, {0, 0, 0, 0}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {4, 0, 0, 0},
     2, {1, 1}, {0, 0}, {0, 3}, {0, 1}, {1, 1}, {2, 0, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {4, 4, {{0, 2, 0, 2, 8, 4, 3, 1}, {2, 2, 2, 2, 4, 2, 1, 1}}, {0, 6, 0, 4}, {0, 8, 0, 4},
     4, {1, 1, 1, 1}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 4, 0, 0},
     2, {1, 1}, {1, 1}, {1, 2}, {0, 1}, {1, 1}, {0, 2, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
};

DCP_TEST(zigzag_two_microbatch_crossed_tables)
{
    fixture *f = malloc(sizeof *f);
    DCP_REQUIRE(f);
    const int planned = fixture_two_microbatches_crossed(f);
    if (!planned) free(f);
    DCP_REQUIRE(planned);
    check_all_ranks_geometry(f, crossed_two, two_geometry, 2, __LINE__);
    free(f);
}

/*
 * THD padding, pad_alignment 8, on the one-microbatch zigzag plan.
 *
 * append_dummy: every rank pads its 4 slots to 8; the group's target 8*2 = 16 leaves a dummy of
 *   16 - 8 = 8 (divisible by 2cp = 4): cu gains one entry: [0,2): cu = cu_padded = {0,4,8,16};
 *   [2,4): cu {0,6,6+8=14}, cu_padded {0,8,16}.  max_seqlen = max(longest, dummy) = 8.  The pieces are
 *   those without padding (the dummy is not real).
 *
 * extend_last: the target 16 goes to the last sequence's span before slicing:
 *   [0,2): spans 4 and 16-4 = 12; cu {0,4,8}, cu_padded {0,4,16}; max_seqlen 12.  Rank 0: id 1 chunk 1
 *     (offsets 0, 3 -> local 0, 1); id 2 chunk 12/4 = 3 starting at local 4/2 = 2: chunk 0 holds its
 *     offsets 0..2 (3 tokens), chunk 3 (offset 9) none.  Rank 1: id 1 offsets 1, 2; id 2 chunk 1 =
 *     offsets 3..5 of which only 3 is real (1 token), chunk 2 (offset 6) none.
 *   [2,4): span 16, chunk 4: rank 2 takes offsets 0..3 (4 tokens), chunk 3 (12..15) none; rank 3 takes
 *     4..7 of which 4, 5 are real (2 tokens).  cu {0,6}, cu_padded {0,16}; max_seqlen 16.
 */
static const want dummy_rows[NR] = {
    {8, 4, {{0, 8, 0, 4, 8, 2, 0, 2}}, {0, 4, 8, 16}, {0, 4, 8, 16},
     4, {2, 2, 2, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 0, 4, 0},
     1, {0}, {2}, {0}, {0}, {2}, {0, 0, 2, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {8, 4, {{0, 8, 0, 4, 8, 2, 1, 2}}, {0, 4, 8, 16}, {0, 4, 8, 16},
     4, {3, 3, 3, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 0, 0, 4},
     2, {0, 0}, {3, 3}, {2, 4}, {0, 2}, {2, 2}, {0, 0, 0, 4},
     0, {0}, {0}, {0}, {0}, 0},
    {8, 3, {{0, 8, 0, 3, 8, 2, 0, 1}}, {0, 6, 14}, {0, 8, 16},
     1, {0}, {0}, {0}, {2}, {2, 0, 0, 0},
     4, {1, 1, 1, 1}, {0, 0, 0, 0}, {0, 3, 4, 7}, {0, 1, 2, 3}, {1, 1, 1, 1}, {4, 0, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {8, 3, {{0, 8, 0, 3, 8, 2, 1, 1}}, {0, 6, 14}, {0, 8, 16},
     2, {1, 1}, {0, 2}, {0, 2}, {2, 2}, {0, 4, 0, 0},
     4, {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 2, 5, 6}, {0, 1, 2, 3}, {1, 1, 1, 1}, {0, 4, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
};

static const want extend_rows[NR] = {
    {8, 3, {{0, 8, 0, 3, 12, 2, 0, 2}}, {0, 4, 8}, {0, 4, 16},
     3, {2, 2, 2}, {0, 1, 2}, {0, 1, 2}, {1, 1, 3}, {0, 0, 5, 0},
     1, {0}, {2}, {0}, {0}, {4}, {0, 0, 4, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {8, 3, {{0, 8, 0, 3, 12, 2, 1, 2}}, {0, 4, 8}, {0, 4, 16},
     3, {3, 3, 3}, {0, 1, 2}, {0, 1, 2}, {1, 1, 1}, {0, 0, 0, 3},
     1, {0}, {3}, {4}, {0}, {2}, {0, 0, 0, 2},
     0, {0}, {0}, {0}, {0}, 0},
    {8, 2, {{0, 8, 0, 2, 16, 2, 0, 1}}, {0, 6}, {0, 16},
     1, {0}, {0}, {0}, {4}, {4, 0, 0, 0},
     3, {1, 1, 1}, {0, 0, 0}, {0, 3, 4}, {0, 1, 2}, {1, 1, 3}, {5, 0, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
    {8, 2, {{0, 8, 0, 2, 16, 2, 1, 1}}, {0, 6}, {0, 16},
     1, {1}, {0}, {0}, {2}, {0, 2, 0, 0},
     3, {1, 1, 1}, {1, 1, 1}, {1, 2, 7}, {0, 1, 2}, {1, 1, 1}, {0, 3, 0, 0},
     0, {0}, {0}, {0}, {0}, 0},
};

DCP_TEST(zigzag_padded_tables)
{
    fixture *f = malloc(sizeof *f);
    DCP_REQUIRE(f);
    const int planned = fixture_one_microbatch(f, DCP_CP_ZIGZAG);
    if (!planned) free(f);
    DCP_REQUIRE(planned);
    f->c.pad_alignment = 8;
    f->c.thd_tail_policy = DCP_THD_TAIL_APPEND_DUMMY;
    check_all_ranks(f, dummy_rows, 1, __LINE__);
    f->c.thd_tail_policy = DCP_THD_TAIL_EXTEND_LAST;
    check_all_ranks(f, extend_rows, 1, __LINE__);
    free(f);
}

DCP_TEST(geometry_refusals)
{
    fixture *f = malloc(sizeof *f);
    tables *t = malloc(sizeof *t);
    DCP_REQUIRE(f && t);
    DCP_REQUIRE(fixture_one_microbatch(f, DCP_CP_ZIGZAG));
    /* rank 0 holds 4 slots and 3 cu entries: exactly that fits, one less does not */
    DCP_CHECK_STATUS(compute_tables(f, 0, 4, 3, MAXP, t), DCP_OK);
    release_tables(t);
    DCP_CHECK_STATUS(compute_tables(f, 0, 3, 3, MAXP, t), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(t->err.message, "rank 0's 1 microbatches hold 4 tokens, more than max_tokens_per_rank = 3");
    release_tables(t);
    DCP_CHECK_STATUS(compute_tables(f, 0, 4, 2, MAXP, t), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(t->err.message, "rank 0 needs 3 cu_seqlens entries, capacity 2");
    release_tables(t);

    /* a span zigzag cannot cut: id 1 padded to 6 on cp 2 (6 % 4 != 0) */
    f->padded[1] = 6;
    DCP_CHECK_STATUS(compute_tables(f, 1, 64, 64, MAXP, t), DCP_ERR_BAD_LENGTH);
    DCP_CHECK_CONTAINS(t->err.message, "microbatch 0 on rank 1: zigzag CP slicing: sequence 0 spans 6 slots");
    release_tables(t);
    f->padded[1] = 4;

    /* a plan in which ranks 2, 3 hold nothing */
    DCP_REQUIRE(fixture_plan_begin(f));
    const int32_t ids[3] = {1, 2, 0};
    DCP_REQUIRE(dcp__plan_open_microbatch(&f->plan, NULL) == DCP_OK && push(f, 0, 2, ids, 3));
    dcp__plan_close_microbatch(&f->plan);
    DCP_CHECK_STATUS(compute_tables(f, 2, 64, 64, MAXP, t), DCP_ERR_INVALID_PLAN);
    DCP_CHECK_CONTAINS(t->err.message, "rank 2 holds nothing in microbatch 0");
    release_tables(t);

    /*
     * The geometry keeps the lengths of a rank's groups' sequences in max_sequences entries: rank 0's one
     * group holds 2 sequences, so max_sequences 2 is enough and 1 is not; rank 2's holds 1.
     */
    DCP_REQUIRE(fixture_one_microbatch(f, DCP_CP_ZIGZAG));
    f->c.max_sequences = 2;
    DCP_CHECK_STATUS(compute_tables(f, 0, 64, 64, MAXP, t), DCP_OK);
    release_tables(t);
    f->c.max_sequences = 1;
    DCP_CHECK_STATUS(compute_tables(f, 0, 64, 64, MAXP, t), DCP_ERR_INVALID_PLAN);
    DCP_CHECK_CONTAINS(t->err.message, "rank 0's groups hold more than 1 sequences");
    release_tables(t);
    DCP_CHECK_STATUS(compute_geometry(f, 2, t), DCP_OK);
    release_tables(t);
    /* counted over microbatches: on the two-microbatch plan every rank holds 1 + 1 sequences */
    DCP_REQUIRE(fixture_two_microbatches(f));
    f->c.max_sequences = 1;
    DCP_CHECK_STATUS(compute_tables(f, 3, 64, 64, MAXP, t), DCP_ERR_INVALID_PLAN);
    DCP_CHECK_CONTAINS(t->err.message, "rank 3's groups hold more than 1 sequences");
    release_tables(t);
    f->c.max_sequences = 2;
    DCP_CHECK_STATUS(compute_tables(f, 3, 64, 64, MAXP, t), DCP_OK);
    release_tables(t);
    free(t);
    free(f);
}

DCP_TEST(rank_geometry_takes_what_its_size_says)
{
    /*
     * max_sequences 4, max_microbatches 0 (= max_sequences): 4 THD geometries, then group [4], first [5],
     * original [4] and padded [4] int32 entries, each array at most 20 bytes: one 64-byte line each.
     */
    dcp_config c;
    dcp_config_default(&c);
    c.max_sequences = 4;
    c.max_microbatches = 0;
    c.max_tokens_per_rank = 64;
    const size_t size = DCP_ARENA_BYTES(dcp__thd_geometry, 4) + 4 * 64;
    _Alignas(64) static unsigned char memory[65536];
    dcp__arena a;
    dcp__rank_geometry g;
    dcp__arena_init(&a, memory, size);
    DCP_CHECK_STATUS(dcp__rank_geometry_take(&c, 4, &a, &g), DCP_OK);
    DCP_CHECK_EQ_INT(a.used, size);
    DCP_CHECK(g.microbatch && g.group && g.first && g.original && g.padded);
    dcp__arena_release(&a);
    /* one line less: the last array (padded) does not fit */
    dcp__arena_init(&a, memory, size - 64);
    DCP_CHECK_STATUS(dcp__rank_geometry_take(&c, 4, &a, &g), DCP_ERR_CAPACITY);
    dcp__arena_release(&a);
    /* fewer microbatches than the most take no more */
    dcp__arena_init(&a, memory, size);
    DCP_CHECK_STATUS(dcp__rank_geometry_take(&c, 2, &a, &g), DCP_OK);
    DCP_CHECK(a.used <= size);
    dcp__arena_release(&a);

    /*
     * reroute's scratch size is its take functions run on a measuring arena: the geometry (above), the
     * group scratch and the tables fit in exactly that many bytes, one line less does not
     */
    const size_t all = dcp__reroute_scratch_size(&c);
    DCP_REQUIRE(all > size && all <= sizeof memory);
    dcp__group_scratch gs;
    dcp__receive_table rt;
    dcp__send_table st;
    dcp__block_arrays blocks;
    for (int less = 0; less <= 1; less++) {
        dcp__arena_init(&a, memory, all - (size_t)less * 64);
        dcp_status s = dcp__rank_geometry_take(&c, 4, &a, &g);
        if (s == DCP_OK) s = dcp__group_scratch_take(&c, &a, &gs);
        if (s == DCP_OK) s = dcp__reroute_tables_take(&c, &a, &rt, &st, &blocks);
        DCP_CHECK_STATUS(s, less ? DCP_ERR_CAPACITY : DCP_OK);
        if (!less) DCP_CHECK_EQ_INT(a.used, all);
        if (!less) DCP_CHECK(st.capacity == (int64_t)dcp__step_send_piece_bound(&c) && rt.tokens_from[0] == 0);
        dcp__arena_release(&a);
    }
}

DCP_TEST(send_refuses_more_pieces_than_its_capacity)
{
    fixture *f = malloc(sizeof *f);
    tables *t = malloc(sizeof *t);
    DCP_REQUIRE(f && t);
    DCP_REQUIRE(fixture_two_microbatches_crossed(f));
    /* rank 0 sends 4 pieces (see crossed_two): 4 fit, 3 do not */
    DCP_CHECK_STATUS(compute_tables(f, 0, 64, 64, 4, t), DCP_OK);
    DCP_CHECK_EQ_INT(t->st.pieces.count, 4);
    release_tables(t);
    DCP_CHECK_STATUS(compute_tables(f, 0, 64, 64, 3, t), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(t->err.message, "more than 3 pieces to send");
    release_tables(t);
    /* own pieces take none of it: on the other plan rank 2 keeps 2 pieces and sends none, so 0 is enough */
    DCP_REQUIRE(fixture_two_microbatches(f));
    DCP_CHECK_STATUS(compute_tables(f, 2, 64, 64, 0, t), DCP_OK);
    DCP_CHECK_EQ_INT(t->st.pieces.count, 0);
    DCP_CHECK_EQ_INT(t->rt.own.count, 2);
    release_tables(t);
    free(t);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Blocks                                                                    */
/* ------------------------------------------------------------------------ */

DCP_TEST(blocks_round_to_8_bytes_and_count_stats)
{
    /*
     * 4 peers, this rank is 1, 20 bytes a token (tokens 8 + labels 8 + loss_mask 4); it keeps 2 tokens of its
     * own (own pieces), so its own entries of to and from are 0 and its own blocks empty.
     * to   {3,0,2,1} -> 60, 0, 40, 20 bytes -> rounded 64, 0, 40, 24; offsets 0, 64, 64, 104; total 128
     * from {1,0,0,6} -> 20, 0, 0, 120      -> rounded 24, 0, 0, 120;  offsets 0, 24, 24, 24;  total 144
     * sent to others: 60 + 40 + 20 = 120; received from others: 20 + 0 + 120 = 140;
     * kept: the 2 own tokens, 2 * 20 = 40 bytes (they land from its samples, in no block).
     */
    const int64_t to[4] = {3, 0, 2, 1}, from[4] = {1, 0, 0, 6};
    size_t sb[4], so[4], rb[4], ro[4];
    dcp__exchange_blocks x;
    dcp_step_stats stats;
    memset(&stats, 0, sizeof stats);
    dcp__reroute_blocks(to, from, 4, 1, 2, 20, sb, so, rb, ro, &x, &stats);
    const size_t want_sb[4] = {64, 0, 40, 24}, want_so[4] = {0, 64, 64, 104};
    const size_t want_rb[4] = {24, 0, 0, 120}, want_ro[4] = {0, 24, 24, 24};
    for (int q = 0; q < 4; q++) {
        DCP_CHECK_EQ_INT(sb[q], want_sb[q]);
        DCP_CHECK_EQ_INT(so[q], want_so[q]);
        DCP_CHECK_EQ_INT(rb[q], want_rb[q]);
        DCP_CHECK_EQ_INT(ro[q], want_ro[q]);
    }
    DCP_CHECK_EQ_INT(x.num_peers, 4);
    DCP_CHECK(x.send_offsets == so && x.recv_offsets == ro && x.tokens_to == to && x.tokens_from == from);
    DCP_CHECK_EQ_INT(x.send_total, 128);
    DCP_CHECK_EQ_INT(x.recv_total, 144);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_sent, 120);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_received, 140);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_local, 40);
    /* the counts add up over calls (a step's stats): a second call adds 120, 140 and 40 again */
    dcp__reroute_blocks(to, from, 4, 1, 2, 20, sb, so, rb, ro, &x, &stats);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_sent, 240);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_received, 280);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_local, 80);

    /*
     * loss_mask only (4 bytes), this rank is 0 and keeps 1 token: to {0,3}, from {0,1}.
     * Its own blocks take 0 bytes; 3 tokens = 12 -> 16 to peer 1, 1 token = 4 -> 8 from it.
     */
    const int64_t to2[2] = {0, 3}, from2[2] = {0, 1};
    memset(&stats, 0, sizeof stats);
    dcp__reroute_blocks(to2, from2, 2, 0, 1, 4, sb, so, rb, ro, &x, &stats);
    DCP_CHECK_EQ_INT(sb[0], 0);
    DCP_CHECK_EQ_INT(sb[1], 16);
    DCP_CHECK_EQ_INT(so[1], 0);
    DCP_CHECK_EQ_INT(rb[0], 0);
    DCP_CHECK_EQ_INT(rb[1], 8);
    DCP_CHECK_EQ_INT(ro[1], 0);
    DCP_CHECK_EQ_INT(x.send_total, 16);
    DCP_CHECK_EQ_INT(x.recv_total, 8);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_sent, 12);    /* 3 tokens to peer 1 */
    DCP_CHECK_EQ_INT(stats.exchange_bytes_local, 4);    /* its 1 own token */
    DCP_CHECK_EQ_INT(stats.exchange_bytes_received, 4); /* 1 token from peer 1 */
    /* nothing kept (0 bytes a token): every block and count 0, own tokens included */
    memset(&stats, 0, sizeof stats);
    dcp__reroute_blocks(to2, from2, 2, 0, 1, 0, sb, so, rb, ro, &x, &stats);
    DCP_CHECK(sb[0] == 0 && sb[1] == 0 && rb[0] == 0 && rb[1] == 0);
    DCP_CHECK(x.send_total == 0 && x.recv_total == 0);
    DCP_CHECK(stats.exchange_bytes_sent == 0 && stats.exchange_bytes_local == 0 && stats.exchange_bytes_received == 0);
    /* a rank that keeps every token (a DPxCP lane of one): no block, only local bytes: 5 tokens * 20 = 100 */
    const int64_t zero1[1] = {0};
    memset(&stats, 0, sizeof stats);
    dcp__reroute_blocks(zero1, zero1, 1, 0, 5, 20, sb, so, rb, ro, &x, &stats);
    DCP_CHECK(sb[0] == 0 && rb[0] == 0 && x.send_total == 0 && x.recv_total == 0);
    DCP_CHECK_EQ_INT(stats.exchange_bytes_local, 100);
    DCP_CHECK(stats.exchange_bytes_sent == 0 && stats.exchange_bytes_received == 0);
}

/* ------------------------------------------------------------------------ */
/* The exchange                                                              */
/* ------------------------------------------------------------------------ */

typedef struct exchange_run {
    dcp_inproc_world *world;
    dcp_inproc_fault fault[2];
    unsigned char recv[2][32];
    dcp_status status[2];
    char message[2][DCP_ERROR_MESSAGE_SIZE];
    dcp_step_stats stats[2];
} exchange_run;

static void exchange_rank(int32_t rank, void *arg)
{
    exchange_run *e = arg;
    dcp_comm comm;
    if ((e->status[rank] = dcp_inproc_comm(e->world, rank, &comm)) != DCP_OK) return;
    /*
     * rank 0 sends 16 bytes 'b' to rank 1; rank 1 sends 8 bytes 'c' to rank 0.  Own pieces never travel, so
     * each rank's own blocks are empty: rank 0's send buffer starts with 8 bytes 'a' that no block covers,
     * and its own receive block (after the peer's, at 16) takes 0 bytes.
     */
    unsigned char send[24];
    size_t sb[2], so[2], rb[2], ro[2];
    if (rank == 0) {
        memset(send, 'a', 8);
        memset(send + 8, 'b', 16);
        sb[0] = 0, so[0] = 0, sb[1] = 16, so[1] = 8;
        rb[0] = 0, ro[0] = 16, rb[1] = 8, ro[1] = 0; /* own block after the peer's, empty */
    } else {
        memset(send, 'c', 8);
        sb[0] = 8, so[0] = 0, sb[1] = 0, so[1] = 8;
        rb[0] = 16, ro[0] = 0, rb[1] = 0, ro[1] = 16;
    }
    memset(e->recv[rank], '.', sizeof e->recv[rank]);
    memset(&e->stats[rank], 0, sizeof e->stats[rank]);
    if (e->fault[rank] != DCP_FAULT_NONE) dcp_inproc_inject_fault(e->world, rank, e->fault[rank]);
    dcp__error err;
    dcp__error_clear(&err);
    e->status[rank] = dcp__reroute_exchange(&comm, send, sb, so, e->recv[rank], rb, ro, &e->stats[rank], &err);
    snprintf(e->message[rank], sizeof e->message[rank], "%s", err.message);
}

DCP_TEST(exchange_moves_blocks_and_reports_failure)
{
    exchange_run *e = calloc(1, sizeof *e);
    DCP_REQUIRE(e);
    DCP_REQUIRE(dcp_inproc_world_create(2, 30000, &e->world) == DCP_OK);
    DCP_REQUIRE(dcp_inproc_run(2, exchange_rank, e) == DCP_OK);
    /* rank 0: [0,8) from rank 1 ('c'), the rest untouched (no 'a': its empty own block carries nothing);
     * rank 1: [0,16) 'b' */
    char want0[33], want1[33];
    memset(want0, '.', 32);
    memset(want0, 'c', 8);
    memset(want1, '.', 32);
    memset(want1, 'b', 16);
    DCP_CHECK(memcmp(e->recv[0], want0, 32) == 0);
    DCP_CHECK(memcmp(e->recv[1], want1, 32) == 0);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(e->status[r], DCP_OK);
        DCP_CHECK_EQ_INT(e->stats[r].collectives, 1);
    }
    /* one rank fails in the collective: both report it, nothing lands */
    e->fault[1] = DCP_FAULT_RETURN_ERROR;
    DCP_REQUIRE(dcp_inproc_run(2, exchange_rank, e) == DCP_OK);
    for (int r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(e->status[r], DCP_ERR_COMM);
        DCP_CHECK_CONTAINS(e->message[r], "the token exchange failed: DCP_ERR_COMM");
        DCP_CHECK_EQ_INT(e->stats[r].collectives, 1);
        for (int i = 0; i < 32; i++) DCP_CHECK_EQ_INT(e->recv[r][i], '.');
    }
    dcp_inproc_world_destroy(e->world);
    free(e);
}

/* ------------------------------------------------------------------------ */
/* The tables through the CPU mover and the exchange, on 4 ranks             */
/* ------------------------------------------------------------------------ */

#define KEPT (DCP_FIELD_TOKENS | DCP_FIELD_LOSS_MASK) /* 12 bytes a token */

typedef struct moved {
    fixture f;
    int two_microbatches; /* the fixture's shape: which samples each DP rank brings */
    dcp_inproc_world *world;
    /*
     * inputs: DP 0 sample 0 (8 tokens, 6 real), and with two microbatches sample 1 (id 1, 4 tokens);
     * DP 1 sample 0 empty, sample 1 pre-packed {0,4,8} (ids 1, 2), or with two microbatches id 2 alone (4)
     */
    int64_t tok0[8], tok1[8], tok2[4];
    float loss0[8], loss1[8], loss2[4];
    /* outputs */
    dcp_status status[NR];
    char message[NR][DCP_ERROR_MESSAGE_SIZE];
    int64_t tokens[NR][4];
    float loss[NR][4];
    uint8_t mask[NR][4];
    int64_t total_tokens[NR];
    dcp_step_stats stats[NR];
} moved;

static const int32_t cu_dp1[3] = {0, 4, 8};

static dcp_status move_rank_run(moved *mv, int32_t rank, tables *t, unsigned char *body, size_t body_bytes,
                                unsigned char *scratch_memory, size_t scratch_bytes)
{
    dcp_comm comm;
    dcp_status s = dcp_inproc_comm(mv->world, rank, &comm);
    if (s != DCP_OK) return s;
    s = compute_tables(&mv->f, rank, 64, 64, MAXP, t);
    if (s != DCP_OK) return s;
    dcp_sample samples[2];
    memset(samples, 0, sizeof samples);
    dcp_step_input in = {samples, 2, KEPT};
    if (rank / 2 == 0) {
        samples[0].tokens = mv->tok0;
        samples[0].loss_mask = mv->loss0;
        samples[0].num_tokens = 8;
        samples[0].padded_length = 8;
        samples[0].original_length = 6;
        in.num_samples = 1;
        if (mv->two_microbatches) {
            samples[1].tokens = mv->tok2;
            samples[1].loss_mask = mv->loss2;
            samples[1].num_tokens = 4;
            in.num_samples = 2;
        }
    } else if (!mv->two_microbatches) {
        samples[1].tokens = mv->tok1;
        samples[1].loss_mask = mv->loss1;
        samples[1].num_tokens = 8;
        samples[1].cu_seqlens = cu_dp1;
        samples[1].num_cu_seqlens = 3;
    } else {
        samples[1].tokens = mv->tok1;
        samples[1].loss_mask = mv->loss1;
        samples[1].num_tokens = 4;
    }
    size_t sb[NR], so[NR], rb[NR], ro[NR];
    dcp__exchange_blocks x;
    dcp__reroute_blocks(t->tokens_to, t->tokens_from, NR, rank, t->rt.own_tokens, dcp__bytes_per_token(KEPT), sb, so,
                        rb, ro, &x, &mv->stats[rank]);
    dcp__mover mover;
    dcp__mover_cpu_init(&mover, body, body_bytes);
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, scratch_bytes);
    unsigned char *send = NULL, *recv = NULL;
    s = mover.ops->buffers(&mover, &x, &scratch, &send, &recv, &t->err);
    if (s == DCP_OK) s = mover.ops->stage(&mover, NULL, &in, KEPT, &t->st.pieces, &x, send, &scratch, &t->err);
    if (s == DCP_OK) s = dcp__reroute_exchange(&comm, send, sb, so, recv, rb, ro, &mv->stats[rank], &t->err);
    dcp__body_layout b;
    dcp__body_layout_compute(mv->f.plan.num_microbatches, t->geometry.total_cu, t->geometry.total_tokens, KEPT, &b);
    if (s == DCP_OK && b.used > body_bytes) s = DCP_ERR_CAPACITY;
    if (s == DCP_OK)
        s = dcp__pack_land(&mover, NULL, KEPT, &t->rt, &x, recv, &in, &b, t->geometry.total_tokens, &scratch,
                           &t->err);
    if (s == DCP_OK) {
        mv->total_tokens[rank] = t->geometry.total_tokens;
        memcpy(mv->tokens[rank], body + b.field[0], 4 * sizeof(int64_t));
        memcpy(mv->loss[rank], body + b.field[3], 4 * sizeof(float));
        memcpy(mv->mask[rank], body + b.mask, 4);
    }
    dcp__arena_release(&scratch);
    return s;
}

static void move_rank(int32_t rank, void *arg)
{
    moved *mv = arg;
    tables *t = malloc(sizeof *t);
    unsigned char *body = aligned_alloc(64, 4096), *scratch = aligned_alloc(64, 8192);
    if (!t || !body || !scratch) {
        mv->status[rank] = DCP_ERR_ALLOC;
    } else {
        memset(body, 0xAB, 4096);
        mv->status[rank] = move_rank_run(mv, rank, t, body, 4096, scratch, 8192);
        snprintf(mv->message[rank], sizeof mv->message[rank], "%s", t->err.message);
        release_tables(t);
    }
    free(t);
    free(body);
    free(scratch);
}

/* DP 0's sample 0: tokens 1000+i, loss i/8, its padding slots 6, 7 -1 (they must not move); DP 1's sample 1:
 * 2000+i, 1 + i/8; DP 0's sample 1 (two microbatches): 3000+i, 2 + i/8. */
static void moved_inputs(moved *mv)
{
    for (int i = 0; i < 8; i++) {
        mv->tok0[i] = i < 6 ? 1000 + i : -1;
        mv->loss0[i] = i < 6 ? (float)i / 8 : -1.0f;
        mv->tok1[i] = 2000 + i;
        mv->loss1[i] = 1.0f + (float)i / 8;
    }
    for (int i = 0; i < 4; i++) {
        mv->tok2[i] = 3000 + i;
        mv->loss2[i] = 2.0f + (float)i / 8;
    }
}

typedef struct moved_want {
    int64_t tok[NR][4];
    float loss[NR][4];
    uint8_t mask[NR][4];
    int64_t sent[NR], received[NR], local[NR];
} moved_want;

static void check_moved(const moved *mv, const moved_want *w, int line)
{
    for (int32_t r = 0; r < NR; r++) {
        if (mv->status[r] != DCP_OK) {
            dcp_test_fail(__FILE__, line, "rank %d: %s: %s", r, dcp_status_str(mv->status[r]), mv->message[r]);
            continue;
        }
        if (mv->total_tokens[r] != 4)
            dcp_test_fail(__FILE__, line, "rank %d: %lld tokens, expected 4", r, (long long)mv->total_tokens[r]);
        for (int i = 0; i < 4; i++)
            if (mv->tokens[r][i] != w->tok[r][i] || mv->loss[r][i] != w->loss[r][i] || mv->mask[r][i] != w->mask[r][i])
                dcp_test_fail(__FILE__, line, "rank %d slot %d: token %lld, loss %g, mask %d; expected %lld, %g, %d", r,
                              i, (long long)mv->tokens[r][i], (double)mv->loss[r][i], mv->mask[r][i],
                              (long long)w->tok[r][i], (double)w->loss[r][i], w->mask[r][i]);
        const dcp_step_stats *st = &mv->stats[r];
        if (st->exchange_bytes_sent != w->sent[r] || st->exchange_bytes_received != w->received[r] ||
            st->exchange_bytes_local != w->local[r] || st->collectives != 1)
            dcp_test_fail(__FILE__, line, "rank %d: sent %lld, received %lld, local %lld, %d collectives; expected "
                          "%lld, %lld, %lld, 1", r, (long long)st->exchange_bytes_sent,
                          (long long)st->exchange_bytes_received, (long long)st->exchange_bytes_local, st->collectives,
                          (long long)w->sent[r], (long long)w->received[r], (long long)w->local[r]);
    }
}

static void run_moved(moved *mv, int line)
{
    moved_inputs(mv);
    if (dcp_inproc_world_create(NR, 30000, &mv->world) != DCP_OK) {
        dcp_test_fail(__FILE__, line, "no in-process world");
        return;
    }
    if (dcp_inproc_run(NR, move_rank, mv) != DCP_OK) dcp_test_fail(__FILE__, line, "the ranks did not run");
    dcp_inproc_world_destroy(mv->world);
}

DCP_TEST(tables_pair_up_through_stage_exchange_and_land)
{
    moved *mv = calloc(1, sizeof *mv);
    DCP_REQUIRE(mv);
    DCP_REQUIRE(fixture_one_microbatch(&mv->f, DCP_CP_ZIGZAG));
    run_moved(mv, __LINE__);
    /*
     * From the zigzag tables above (every piece received, none own):
     *   rank 0 <- id 1 offsets 0, 3 and id 2 offsets 0, 3 = sample 1 [0], [3], [4], [7]
     *   rank 1 <- sample 1 [1], [2], [5], [6]
     *   rank 2 <- sample 0 [0], [1]; slots 2, 3 are padding (offsets 6, 7 of id 0)
     *   rank 3 <- sample 0 [2], [3], [4], [5]
     * 12 bytes a token: rank 0 sends 2 tokens and receives 4 (from rank 2), and so on; none to itself, none
     * kept (local 0).
     */
    static const moved_want w = {
        {{2000, 2003, 2004, 2007}, {2001, 2002, 2005, 2006}, {1000, 1001, 0, 0}, {1002, 1003, 1004, 1005}},
        {{1.0f, 1.375f, 1.5f, 1.875f}, {1.125f, 1.25f, 1.625f, 1.75f}, {0.0f, 0.125f, 0.0f, 0.0f},
         {0.25f, 0.375f, 0.5f, 0.625f}},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 1, 1}, {0, 0, 0, 0}},
        {24, 48, 48, 48},
        {48, 48, 24, 48},
        {0, 0, 0, 0}};
    check_moved(mv, &w, __LINE__);
    free(mv);
}

DCP_TEST(own_pieces_land_from_the_samples_beside_received_ones)
{
    moved *mv = calloc(1, sizeof *mv);
    DCP_REQUIRE(mv);
    DCP_REQUIRE(fixture_two_microbatches(&mv->f));
    mv->two_microbatches = 1;
    run_moved(mv, __LINE__);
    /*
     * From zigzag_two: slots 0..1 are mb 0 (id 0 on cp 4), slots 2..3 mb 1.
     *   rank 0: own id 0 offset 0 (1000), chunk 7 padding; own id 1 offsets 0, 3 of DP 0's sample 1 (3000, 3003)
     *   rank 1: own offset 1 (1001), padding; own 3001, 3002
     *   rank 2: received offsets 2, 5 from rank 0 (1002, 1005); own id 2 offsets 0, 3 of DP 1's sample 1
     *     (2000, 2003)
     *   rank 3: received 1003, 1004 from rank 1; own 2001, 2002
     * Ranks 0, 1 land without receiving anything (own pieces and padding only), ranks 2, 3 mix both kinds.
     * 12 bytes a token: ranks 0, 1 send 2 tokens (24) and keep 3 (36); ranks 2, 3 receive 2 (24) and keep 2
     * (24).
     */
    static const moved_want w = {
        {{1000, 0, 3000, 3003}, {1001, 0, 3001, 3002}, {1002, 1005, 2000, 2003}, {1003, 1004, 2001, 2002}},
        {{0.0f, 0.0f, 2.0f, 2.375f}, {0.125f, 0.0f, 2.125f, 2.25f}, {0.25f, 0.625f, 1.0f, 1.375f},
         {0.375f, 0.5f, 1.125f, 1.25f}},
        {{0, 1, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}},
        {24, 24, 0, 0},
        {0, 0, 24, 24},
        {36, 36, 24, 24}};
    check_moved(mv, &w, __LINE__);

    /*
     * Crossed (crossed_two): mb 1 swaps the groups, so ranks 0, 1 keep one token of id 0 and receive id 2
     * (from ranks 2, 3), while ranks 2, 3 receive all four slots from ranks 0, 1.
     *   rank 0: own 1000, padding, received 2000, 2003;  rank 1: own 1001, padding, received 2001, 2002
     *   rank 2: received 1002, 1005, 3000, 3003;          rank 3: received 1003, 1004, 3001, 3002
     * Bytes: ranks 0, 1 send 4 tokens (48), receive 2 (24), keep 1 (12); ranks 2, 3 send 2 (24), receive 4
     * (48), keep none.
     */
    fixture_wipe(&mv->f); /* its plan arena poisoned plan_memory */
    memset(mv, 0, sizeof *mv);
    DCP_REQUIRE(fixture_two_microbatches_crossed(&mv->f));
    mv->two_microbatches = 1;
    run_moved(mv, __LINE__);
    static const moved_want crossed = {
        {{1000, 0, 2000, 2003}, {1001, 0, 2001, 2002}, {1002, 1005, 3000, 3003}, {1003, 1004, 3001, 3002}},
        {{0.0f, 0.0f, 1.0f, 1.375f}, {0.125f, 0.0f, 1.125f, 1.25f}, {0.25f, 0.625f, 2.0f, 2.375f},
         {0.375f, 0.5f, 2.125f, 2.25f}},
        {{0, 1, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}},
        {48, 48, 24, 24},
        {24, 24, 48, 48},
        {12, 12, 0, 0}};
    check_moved(mv, &crossed, __LINE__);
    free(mv);
}
