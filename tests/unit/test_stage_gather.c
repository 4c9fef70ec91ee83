/*
 * test_stage_gather.c - the gather stage (pipeline/gather.c) on its own.
 *
 * dcp__gather_local: this rank's sequence table from hand-made samples
 * (pre-packed with empty sub-samples, padded, empty), and every refusal with
 * its status and the value its message names.
 *
 * dcp__gather_step: the all-gather of headers and (padded, original) pairs
 * over 2 or 4 in-process DPxCP ranks run as threads; each rank records what it
 * got and the checks run on the main thread.
 */
#include "dcp_test.h"
#include "../pipeline/step.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* gather_local                                                              */
/* ------------------------------------------------------------------------ */

#define CAP 8

typedef struct local_table {
    int32_t sample[CAP];
    int64_t start[CAP];
    int32_t pairs[2 * CAP];
    dcp__input_spans seq;
} local_table;

static void local_table_init(local_table *t)
{
    memset(t, 0, sizeof *t);
    t->seq.sample = t->sample;
    t->seq.start = t->start;
    t->seq.pairs = t->pairs;
    t->seq.count = -1; /* must be reset by the stage */
    t->seq.tokens = -1;
    t->seq.original_tokens = -1;
}

static void local_config(dcp_config *c, int32_t max_sequences)
{
    dcp_config_default(c);
    c->max_sequences = max_sequences;
    c->fields = DCP_FIELD_ALL;
}

/* Buffers every sample of these tests may point at (values are never read by gather_local). */
static int64_t tok[16], lab[16], pos[16];
static float loss[16];

static dcp_sample full_sample(int64_t num_tokens)
{
    dcp_sample s;
    memset(&s, 0, sizeof s);
    s.tokens = tok;
    s.labels = lab;
    s.position_ids = pos;
    s.loss_mask = loss;
    s.num_tokens = num_tokens;
    return s;
}

static dcp_sample packed_sample(int64_t num_tokens, const int32_t *cu, int32_t num_cu)
{
    dcp_sample s = full_sample(num_tokens);
    s.cu_seqlens = cu;
    s.num_cu_seqlens = num_cu;
    return s;
}

static dcp_sample padded_sample(int32_t padded, int32_t original)
{
    dcp_sample s = full_sample(padded);
    s.padded_length = padded;
    s.original_length = original;
    return s;
}

static dcp_status local_run(const dcp_sample *samples, int32_t n, uint32_t fields, uint32_t needed,
                            const dcp_config *c, int64_t capacity, local_table *t, dcp__error *err)
{
    dcp_step_input in = {samples, n, fields};
    local_table_init(t);
    dcp__error_clear(err);
    return dcp__gather_local(&in, needed, c, capacity, &t->seq, err);
}

DCP_TEST(local_lists_packed_padded_and_drops_empty)
{
    dcp_config c;
    local_config(&c, 4);
    /*
     * sample 0: pre-packed, 12 tokens, cu {0,3,3,7,10}: sub-samples [0,3) [3,3) [3,7) [7,10);
     *           the empty one is dropped, tokens 10..11 are past the last entry and ignored
     * sample 1: one sequence padded to 8 with 5 real tokens
     * sample 2: padded length 0 (no buffers): dropped
     * sample 3: pre-packed with cu {0} and no tokens (no buffers): nothing
     * -> 4 sequences = max_sequences exactly; tokens 3+4+3+8 = 18, original 3+4+3+5 = 15
     */
    const int32_t cu0[5] = {0, 3, 3, 7, 10}, cu3[1] = {0};
    dcp_sample s[4];
    s[0] = packed_sample(12, cu0, 5);
    s[1] = padded_sample(8, 5);
    memset(&s[2], 0, sizeof s[2]);
    memset(&s[3], 0, sizeof s[3]);
    s[3].cu_seqlens = cu3;
    s[3].num_cu_seqlens = 1;
    local_table t;
    dcp__error err;
    DCP_REQUIRE_OK(local_run(s, 4, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 18, &t, &err));
    DCP_REQUIRE_EQ_INT(t.seq.count, 4);
    const int32_t want_sample[4] = {0, 0, 0, 1};
    const int64_t want_start[4] = {0, 3, 7, 0};
    const int32_t want_pairs[8] = {3, 3, 4, 4, 3, 3, 8, 5};
    for (int i = 0; i < 4; i++) {
        DCP_CHECK_EQ_INT(t.sample[i], want_sample[i]);
        DCP_CHECK_EQ_INT(t.start[i], want_start[i]);
    }
    for (int i = 0; i < 8; i++) DCP_CHECK_EQ_INT(t.pairs[i], want_pairs[i]);
    DCP_CHECK_EQ_INT(t.seq.tokens, 18);
    DCP_CHECK_EQ_INT(t.seq.original_tokens, 15);

    /* one token less of capacity: refused, naming the capacity */
    DCP_CHECK_STATUS(local_run(s, 4, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 17, &t, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "max_tokens_per_rank = 17");

    /* a second call starts from an empty table: only sample 1 -> one sequence, (8, 5) */
    DCP_REQUIRE_OK(local_run(&s[1], 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 18, &t, &err));
    DCP_CHECK_EQ_INT(t.seq.count, 1);
    DCP_CHECK_EQ_INT(t.sample[0], 0);
    DCP_CHECK_EQ_INT(t.pairs[0], 8);
    DCP_CHECK_EQ_INT(t.pairs[1], 5);
    DCP_CHECK_EQ_INT(t.seq.tokens, 8);
    DCP_CHECK_EQ_INT(t.seq.original_tokens, 5);

    /* no samples at all: an empty table */
    DCP_REQUIRE_OK(local_run(NULL, 0, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 18, &t, &err));
    DCP_CHECK_EQ_INT(t.seq.count, 0);
    DCP_CHECK_EQ_INT(t.seq.tokens, 0);
    DCP_CHECK_EQ_INT(t.seq.original_tokens, 0);
}

DCP_TEST(local_null_buffer_of_a_carried_field)
{
    dcp_config c;
    local_config(&c, 4);
    local_table t;
    dcp__error err;
    dcp_sample s[2] = {padded_sample(4, 4), padded_sample(8, 8)};
    s[1].labels = NULL;
    DCP_CHECK_STATUS(local_run(s, 2, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(err.message, "sample 1 has no labels buffer");
    s[1] = padded_sample(8, 8);
    s[1].loss_mask = NULL;
    DCP_CHECK_STATUS(local_run(s, 2, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(err.message, "sample 1 has no loss_mask buffer");
    /* a carried field needs its buffer even where this stage does not need the field (dcp_sample) */
    DCP_CHECK_STATUS(local_run(s, 2, DCP_FIELD_ALL, DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS, &c, 100, &t, &err),
                     DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(err.message, "sample 1 has no loss_mask buffer");
    /* a field the input does not carry may be NULL: tokens | labels carried, loss_mask absent */
    const uint32_t carried = DCP_FIELD_TOKENS | DCP_FIELD_LABELS;
    DCP_CHECK_STATUS(local_run(s, 2, carried, carried, &c, 100, &t, &err), DCP_OK);
    DCP_CHECK_EQ_INT(t.seq.count, 2);
    /* ... but it must carry what the stage needs: tokens | position_ids = 0x9 against 0x3 */
    DCP_CHECK_STATUS(local_run(s, 2, carried, DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS, &c, 100, &t, &err),
                     DCP_ERR_FIELD_MISMATCH);
    DCP_CHECK_CONTAINS(err.message, "needs fields (tokens, position_ids), the input carries (tokens, labels)");
    /* and nothing outside the configuration: 0xf against config.fields 0x3 */
    c.fields = carried;
    DCP_CHECK_STATUS(local_run(s, 2, DCP_FIELD_ALL, carried, &c, 100, &t, &err), DCP_ERR_FIELD_MISMATCH);
    DCP_CHECK_CONTAINS(err.message, "fields (tokens, labels, position_ids, loss_mask) outside config.fields (tokens, labels)");
}

DCP_TEST(local_refuses_bad_cu_seqlens)
{
    dcp_config c;
    local_config(&c, 4);
    local_table t;
    dcp__error err;
    const int32_t decreasing[4] = {0, 4, 2, 6};
    dcp_sample s = packed_sample(6, decreasing, 4);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 cu_seqlens decreases at 2 (4 -> 2)");

    const int32_t past[3] = {0, 3, 7};
    dcp_sample two[2] = {padded_sample(2, 2), packed_sample(6, past, 3)};
    DCP_CHECK_STATUS(local_run(two, 2, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 1 cu_seqlens[2] = 7 is past its 6-token buffer");
    /* exactly at the end of the buffer is fine: {0,3,6} over 6 tokens */
    const int32_t at_end[3] = {0, 3, 6};
    two[1] = packed_sample(6, at_end, 3);
    DCP_CHECK_STATUS(local_run(two, 2, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_OK);
    DCP_CHECK_EQ_INT(t.seq.count, 3);

    const int32_t not_zero[2] = {1, 3};
    s = packed_sample(6, not_zero, 2);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 cu_seqlens[0] is 1, not 0");

    s = packed_sample(6, not_zero, 0);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 has 0 cu_seqlens entries");
}

DCP_TEST(local_refuses_bad_padded_samples)
{
    dcp_config c;
    local_config(&c, 4);
    local_table t;
    dcp__error err;
    dcp_sample s = padded_sample(8, 8);
    s.padded_length = 7; /* buffer of 8 */
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 padded length 7 disagrees with its 8-token buffer");
    s = padded_sample(8, 9);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 original length 9 outside [0, 8]");
    s = padded_sample(8, -1);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 original length -1 outside [0, 8]");
    /* an all-padding sample (original 0) is a sequence of its own */
    s = padded_sample(8, 0);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_OK);
    DCP_CHECK_EQ_INT(t.seq.count, 1);
    DCP_CHECK_EQ_INT(t.seq.tokens, 8);
    DCP_CHECK_EQ_INT(t.seq.original_tokens, 0);
    s = full_sample(-3);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CORRUPT_INPUT);
    DCP_CHECK_CONTAINS(err.message, "sample 0 has -3 tokens");
}

DCP_TEST(local_refuses_too_many_sequences_and_bad_arguments)
{
    dcp_config c;
    local_config(&c, 4);
    local_table t;
    dcp__error err;
    /* 5 non-empty sub-samples of one token each, max_sequences 4 */
    const int32_t five[6] = {0, 1, 2, 3, 4, 5};
    dcp_sample s = packed_sample(5, five, 6);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "more than max_sequences = 4 sequences");
    /* 4 from a packed sample, then a padded one: the fifth comes through the padded path */
    const int32_t four[5] = {0, 1, 2, 3, 4};
    dcp_sample two[2] = {packed_sample(4, four, 5), padded_sample(2, 1)};
    DCP_CHECK_STATUS(local_run(two, 2, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "more than max_sequences = 4 sequences");
    /* cu {0,1,1,2,3,4}: [0,1) [1,1) [1,2) [2,3) [3,4): the empty one is dropped, 4 remain: fine */
    const int32_t with_empty[6] = {0, 1, 1, 2, 3, 4};
    s = packed_sample(4, with_empty, 6);
    DCP_CHECK_STATUS(local_run(&s, 1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_OK);
    DCP_CHECK_EQ_INT(t.seq.count, 4);
    /* more samples than max_sequences, whatever they hold */
    dcp_sample many[5];
    for (int i = 0; i < 5; i++) many[i] = padded_sample(1, 1);
    DCP_CHECK_STATUS(local_run(many, 5, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_CAPACITY);
    DCP_CHECK_CONTAINS(err.message, "5 samples exceed max_sequences = 4");
    /* no input, or samples missing */
    dcp__error_clear(&err);
    local_table_init(&t);
    DCP_CHECK_STATUS(dcp__gather_local(NULL, DCP_FIELD_ALL, &c, 100, &t.seq, &err), DCP_ERR_NULL_POINTER);
    DCP_CHECK_CONTAINS(err.message, "input is NULL");
    DCP_CHECK_STATUS(local_run(NULL, 2, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_CONTAINS(err.message, "2 samples at");
    DCP_CHECK_STATUS(local_run(many, -1, DCP_FIELD_ALL, DCP_FIELD_ALL, &c, 100, &t, &err), DCP_ERR_INVALID_ARGUMENT);
    DCP_CHECK_CONTAINS(err.message, "-1 samples at");
}

/* ------------------------------------------------------------------------ */
/* gather_step over in-process ranks                                         */
/* ------------------------------------------------------------------------ */

#define MAXR 4
#define MAXS 8
#define SCRATCH 8192

typedef struct step_gather {
    dcp_inproc_world *world;
    dcp_config config;
    int32_t ranks;
    /* inputs per rank */
    uint32_t fields[MAXR];
    int32_t pairs[MAXR][2 * MAXS];
    int32_t count[MAXR];
    uint64_t data_digest[MAXR];
    dcp_inproc_fault fault[MAXR];
    /* outputs per rank */
    dcp_status status[MAXR];
    char message[MAXR][DCP_ERROR_MESSAGE_SIZE];
    int32_t padded[MAXR][MAXS], original[MAXR][MAXS], offsets[MAXR][MAXR + 1];
    dcp__step_lengths lengths[MAXR];
    dcp_step_stats stats[MAXR];
    unsigned char scratch[MAXR][SCRATCH];
    size_t scratch_bytes; /* each rank's scratch arena; 0: SCRATCH */
} step_gather;

static void gather_rank(int32_t rank, void *arg)
{
    step_gather *g = arg;
    dcp_comm comm;
    g->status[rank] = dcp_inproc_comm(g->world, rank, &comm);
    if (g->status[rank] != DCP_OK) return;
    dcp__input_spans local;
    memset(&local, 0, sizeof local);
    local.count = g->count[rank];
    local.pairs = g->pairs[rank];
    for (int32_t k = 0; k < local.count; k++) {
        local.tokens += g->pairs[rank][2 * k];
        local.original_tokens += g->pairs[rank][2 * k + 1];
    }
    dcp__step_lengths *L = &g->lengths[rank];
    memset(L, 0, sizeof *L);
    L->padded = g->padded[rank];
    L->original = g->original[rank];
    L->rank_offsets = g->offsets[rank];
    dcp__arena scratch;
    if (g->scratch_bytes) { /* exactly that many bytes, from a 64-byte boundary (the struct is calloc'd) */
        uintptr_t at = ((uintptr_t)g->scratch[rank] + 63) & ~(uintptr_t)63;
        dcp__arena_init(&scratch, (void *)at, g->scratch_bytes);
    } else {
        dcp__arena_init(&scratch, g->scratch[rank], SCRATCH);
    }
    memset(&g->stats[rank], 0, sizeof g->stats[rank]);
    dcp__error err;
    dcp__error_clear(&err);
    if (g->fault[rank] != DCP_FAULT_NONE) dcp_inproc_inject_fault(g->world, rank, g->fault[rank]);
    g->status[rank] = dcp__gather_step(&comm, g->fields[rank], &local, g->data_digest[rank], &g->config, L, &scratch, &g->stats[rank], &err);
    snprintf(g->message[rank], sizeof g->message[rank], "%s", err.message);
    dcp__arena_release(&scratch);
}

static step_gather *step_gather_new(int32_t dp, int32_t cp, int32_t max_sequences)
{
    step_gather *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    dcp_config_default(&g->config);
    g->config.data_parallel_size = dp;
    g->config.context_parallel_size = cp;
    g->config.max_sequences = max_sequences;
    g->ranks = dp * cp;
    for (int32_t r = 0; r < g->ranks; r++) g->fields[r] = DCP_FIELD_ALL;
    if (dcp__gather_step_scratch_size(&g->config) > SCRATCH - 64 ||
        dcp_inproc_world_create(g->ranks, 30000, &g->world) != DCP_OK) {
        free(g);
        return NULL;
    }
    return g;
}

static void step_gather_free(step_gather *g)
{
    dcp_inproc_world_destroy(g->world);
    free(g);
}

static void set_pairs(step_gather *g, int32_t rank, const int32_t *pairs, int32_t count)
{
    g->count[rank] = count;
    if (count > 0) memcpy(g->pairs[rank], pairs, (size_t)count * 2 * sizeof(int32_t));
}

static int run_ranks(step_gather *g) { return dcp_inproc_run(g->ranks, gather_rank, g) == DCP_OK; }

/* Every rank failed with `want` and the same message containing `text`. */
static void check_all_failed(const step_gather *g, dcp_status want, const char *text, int line)
{
    for (int32_t r = 0; r < g->ranks; r++) {
        if (g->status[r] != want)
            dcp_test_fail(__FILE__, line, "rank %d: %s, expected %s (%s)", r, dcp_status_str(g->status[r]),
                          dcp_status_str(want), g->message[r]);
        if (!strstr(g->message[r], text))
            dcp_test_fail(__FILE__, line, "rank %d: message \"%s\" lacks \"%s\"", r, g->message[r], text);
    }
}

DCP_TEST(step_gather_dp2_cp2_siblings_agree)
{
    step_gather *g = step_gather_new(2, 2, 4);
    DCP_REQUIRE(g);
    /* DP rank 0 (ranks 0, 1): (8,8), (4,3); DP rank 1 (ranks 2, 3): (6,6) */
    const int32_t dp0[4] = {8, 8, 4, 3}, dp1[2] = {6, 6};
    set_pairs(g, 0, dp0, 2);
    set_pairs(g, 1, dp0, 2);
    set_pairs(g, 2, dp1, 1);
    set_pairs(g, 3, dp1, 1);
    DCP_REQUIRE(run_ranks(g));
    /*
     * ids 0, 1 from DP 0, id 2 from DP 1: padded {8,4,6}, original {8,3,6}, offsets {0,2,3};
     * sum 8+4+6 = 18, squares 64+16+36 = 116; DP 0 brings 12 tokens in 2 sequences.
     * Metadata: 3 peers' 48-byte headers (magic 4 + fields 4 + count 4 + zero 4 + hash 8 + data digest 8 +
     * tokens 8 + check 8) = 144, plus the pairs of the other DP ranks' leaders: 24 bytes in all, less what
     * this rank sent itself: rank 0 sent 16 -> 144 + 8 = 152; rank 2 sent 8 -> 144 + 16 = 160; non-leaders
     * sent 0 -> 168.
     */
    const int32_t want_padded[3] = {8, 4, 6}, want_original[3] = {8, 3, 6}, want_offsets[3] = {0, 2, 3};
    const int64_t want_metadata[4] = {152, 168, 160, 168};
    for (int32_t r = 0; r < 4; r++) {
        DCP_CHECK_STATUS(g->status[r], DCP_OK);
        DCP_CHECK_EQ_INT(g->lengths[r].num_sequences, 3);
        for (int i = 0; i < 3; i++) {
            DCP_CHECK_EQ_INT(g->padded[r][i], want_padded[i]);
            DCP_CHECK_EQ_INT(g->original[r][i], want_original[i]);
            DCP_CHECK_EQ_INT(g->offsets[r][i], want_offsets[i]);
        }
        DCP_CHECK_EQ_INT(g->lengths[r].sum, 18);
        DCP_CHECK_EQ_INT(g->lengths[r].squared_sum, 116);
        DCP_CHECK_EQ_INT(g->lengths[r].max_rank_tokens, 12);
        DCP_CHECK_EQ_INT(g->lengths[r].max_rank_count, 2);
        DCP_CHECK_EQ_INT(g->stats[r].collectives, 2);
        DCP_CHECK_EQ_INT(g->stats[r].metadata_bytes_received, want_metadata[r]);
    }
    step_gather_free(g);
}

DCP_TEST(step_gather_scratch_size_is_what_it_takes)
{
    /*
     * 4 ranks, max_sequences 4: 4 headers of 48 bytes (192, three lines), bytes and offsets [4] size_t
     * (32 bytes, a line each), pairs [8] int32 (32 bytes, a line): 384.  The size is measured from the same
     * layout code the gather runs, so the gather fits in exactly that and fails one line short.
     */
    step_gather *g = step_gather_new(2, 2, 4);
    DCP_REQUIRE(g);
    DCP_CHECK_EQ_INT(dcp__gather_step_scratch_size(&g->config), 384);
    const int32_t pairs[2] = {8, 8};
    for (int32_t r = 0; r < 4; r++) set_pairs(g, r, pairs, 1);
    g->scratch_bytes = 384;
    DCP_REQUIRE(run_ranks(g));
    for (int32_t r = 0; r < 4; r++) DCP_CHECK_STATUS(g->status[r], DCP_OK);
    step_gather_free(g);
    g = step_gather_new(2, 2, 4);
    DCP_REQUIRE(g);
    for (int32_t r = 0; r < 4; r++) set_pairs(g, r, pairs, 1);
    g->scratch_bytes = 384 - 64;
    DCP_REQUIRE(run_ranks(g));
    for (int32_t r = 0; r < 4; r++) DCP_CHECK_STATUS(g->status[r], DCP_ERR_CAPACITY);
    step_gather_free(g);
}

DCP_TEST(step_gather_dp2_empty_rank)
{
    step_gather *g = step_gather_new(2, 1, 4);
    DCP_REQUIRE(g);
    /* DP rank 0 holds nothing; DP rank 1: (5,2), (7,7) */
    const int32_t dp1[4] = {5, 2, 7, 7};
    set_pairs(g, 1, dp1, 2);
    DCP_REQUIRE(run_ranks(g));
    /* offsets {0,0,2}; sum 12, squares 25+49 = 74; metadata 48 + (16 - own): rank 0 64, rank 1 48 */
    const int64_t want_metadata[2] = {64, 48};
    for (int32_t r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(g->status[r], DCP_OK);
        DCP_CHECK_EQ_INT(g->lengths[r].num_sequences, 2);
        DCP_CHECK_EQ_INT(g->padded[r][0], 5);
        DCP_CHECK_EQ_INT(g->padded[r][1], 7);
        DCP_CHECK_EQ_INT(g->original[r][0], 2);
        DCP_CHECK_EQ_INT(g->original[r][1], 7);
        DCP_CHECK_EQ_INT(g->offsets[r][0], 0);
        DCP_CHECK_EQ_INT(g->offsets[r][1], 0);
        DCP_CHECK_EQ_INT(g->offsets[r][2], 2);
        DCP_CHECK_EQ_INT(g->lengths[r].sum, 12);
        DCP_CHECK_EQ_INT(g->lengths[r].squared_sum, 74);
        DCP_CHECK_EQ_INT(g->lengths[r].max_rank_tokens, 12);
        DCP_CHECK_EQ_INT(g->lengths[r].max_rank_count, 2);
        DCP_CHECK_EQ_INT(g->stats[r].metadata_bytes_received, want_metadata[r]);
    }
    step_gather_free(g);
}

DCP_TEST(step_gather_cp_siblings_disagree)
{
    step_gather *g = step_gather_new(2, 2, 4);
    DCP_REQUIRE(g);
    const int32_t dp0[4] = {8, 8, 4, 3}, dp0_other[4] = {8, 8, 4, 4}, dp1[2] = {6, 6}, dp1_more[4] = {6, 6, 2, 2};
    /* same count and tokens, one original length differs: the digest tells them apart */
    set_pairs(g, 0, dp0, 2);
    set_pairs(g, 1, dp0_other, 2);
    set_pairs(g, 2, dp1, 1);
    set_pairs(g, 3, dp1, 1);
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_CORRUPT_INPUT, "CP siblings 0 and 1 hold different sequences (2 vs 2)", __LINE__);
    /* a different count on the second DP rank */
    set_pairs(g, 1, dp0, 2);
    set_pairs(g, 3, dp1_more, 2);
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_CORRUPT_INPUT, "CP siblings 2 and 3 hold different sequences (1 vs 2)", __LINE__);
    /* same lengths, different bytes (their data digests differ) */
    set_pairs(g, 3, dp1, 1);
    g->data_digest[0] = g->data_digest[1] = 0x1111;
    g->data_digest[2] = 0x2222;
    g->data_digest[3] = 0x2223;
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_CORRUPT_INPUT,
                     "CP siblings 2 and 3 hold sequences of the same lengths with different contents", __LINE__);
    /* the world is still in step: agreeing siblings gather again */
    g->data_digest[3] = 0x2222;
    DCP_REQUIRE(run_ranks(g));
    for (int32_t r = 0; r < 4; r++) {
        DCP_CHECK_STATUS(g->status[r], DCP_OK);
        DCP_CHECK_EQ_INT(g->lengths[r].num_sequences, 3);
    }
    step_gather_free(g);
}

DCP_TEST(step_gather_fields_disagree)
{
    step_gather *g = step_gather_new(2, 2, 4);
    DCP_REQUIRE(g);
    const int32_t dp0[4] = {8, 8, 4, 3}, dp1[2] = {6, 6};
    set_pairs(g, 0, dp0, 2);
    set_pairs(g, 1, dp0, 2);
    set_pairs(g, 2, dp1, 1);
    set_pairs(g, 3, dp1, 1);
    g->fields[2] = DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS;
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_FIELD_MISMATCH, "DPxCP rank 2 carries fields (tokens, position_ids), rank 0 carries (tokens, labels, position_ids, loss_mask)", __LINE__);
    /* rank 0 itself differs: rank 1 is the first to differ from it */
    g->fields[2] = DCP_FIELD_ALL;
    g->fields[0] = DCP_FIELD_TOKENS;
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_FIELD_MISMATCH, "DPxCP rank 1 carries fields (tokens, labels, position_ids, loss_mask), rank 0 carries (tokens)", __LINE__);
    step_gather_free(g);
}

DCP_TEST(step_gather_capacity_overflow_and_comm_failure)
{
    /* 2 + 1 sequences over the DP group, max_sequences 2 */
    step_gather *g = step_gather_new(2, 1, 2);
    DCP_REQUIRE(g);
    const int32_t two[4] = {3, 3, 4, 4}, one[2] = {5, 5};
    set_pairs(g, 0, two, 2);
    set_pairs(g, 1, one, 1);
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_CAPACITY, "3 sequences over the DP group exceed max_sequences = 2", __LINE__);

    /* squares: 2 * (2^31-1)^2 = 2^63 - 2^33 + 2 fits int64; a third one does not */
    const int32_t big2[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
    set_pairs(g, 0, big2, 2);
    set_pairs(g, 1, NULL, 0);
    DCP_REQUIRE(run_ranks(g));
    for (int32_t r = 0; r < 2; r++) {
        DCP_CHECK_STATUS(g->status[r], DCP_OK);
        DCP_CHECK_EQ_INT(g->lengths[r].sum, 4294967294LL);
        DCP_CHECK_EQ_INT(g->lengths[r].squared_sum, 9223372028264841218LL);
    }
    step_gather_free(g);

    g = step_gather_new(2, 1, 4);
    DCP_REQUIRE(g);
    const int32_t big1[2] = {INT32_MAX, 1};
    set_pairs(g, 0, big2, 2);
    set_pairs(g, 1, big1, 1);
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_OVERFLOW, "the sum of squared lengths overflows int64", __LINE__);

    /* the header all-gather fails on one rank: every rank reports it */
    set_pairs(g, 1, one, 1);
    g->fault[1] = DCP_FAULT_RETURN_ERROR;
    DCP_REQUIRE(run_ranks(g));
    check_all_failed(g, DCP_ERR_COMM, "all-gather of rank headers failed: DCP_ERR_COMM", __LINE__);
    for (int32_t r = 0; r < 2; r++) DCP_CHECK_EQ_INT(g->stats[r].collectives, 1);
    step_gather_free(g);
}
