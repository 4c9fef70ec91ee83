/*
 * test_gather.c - dcp_gather() and dcp_gather_packed() over 4 in-process DP
 * ranks, each with its own context: global ids in DP rank order, empty
 * samples dropped, rank offsets; one rank's bad input becomes the same status
 * on every rank and the contexts work afterwards; communicator faults; zero
 * allocation.
 *
 * Rank threads record what they got; the checks run on the main thread.
 */
#include "dcp_test.h"

#include <stdlib.h>

#define DP 4
#define MAX_SEQ 16

typedef struct rank_input {
    int packed;
    const int32_t *data; /* lengths, or cu_seqlens when packed */
    int32_t count;
    int64_t total_tokens;
} rank_input;

typedef struct gather_test {
    dcp_inproc_world *world;
    dcp_context *ctx[DP];
    rank_input in[DP];
    int probe_alloc; /* run each gather under DCP_CHECK_NO_ALLOC, after one warm-up */
    /* what each rank got */
    dcp_status status[DP];
    int32_t num_global[DP];
    int32_t global[DP][MAX_SEQ];
    int32_t offsets[DP][DP + 1];
    char message[DP][256];
} gather_test;

static dcp_status gather_one(gather_test *t, int32_t rank, dcp_comm *comm, const int32_t **lengths, int32_t *n,
                             const int32_t **offsets)
{
    const rank_input *in = &t->in[rank];
    if (in->packed)
        return dcp_gather_packed(t->ctx[rank], comm, 0, in->data, in->count, in->total_tokens, lengths, n, offsets);
    return dcp_gather(t->ctx[rank], comm, 0, in->data, in->count, lengths, n, offsets);
}

static void gather_rank(int32_t rank, void *arg)
{
    gather_test *t = arg;
    dcp_comm comm;
    t->status[rank] = dcp_inproc_comm(t->world, rank, &comm);
    if (t->status[rank] != DCP_OK) return;
    const int32_t *lengths = NULL, *offsets = NULL;
    int32_t n = -1;
    dcp_status st;
    if (t->probe_alloc) {
        st = gather_one(t, rank, &comm, &lengths, &n, &offsets); /* warm-up */
        DCP_CHECK_NO_ALLOC(st = gather_one(t, rank, &comm, &lengths, &n, &offsets));
    } else {
        st = gather_one(t, rank, &comm, &lengths, &n, &offsets);
    }
    t->status[rank] = st;
    t->num_global[rank] = n;
    snprintf(t->message[rank], sizeof t->message[rank], "%s", dcp_context_last_error(t->ctx[rank]));
    if (st == DCP_OK && n >= 0 && n <= MAX_SEQ) {
        memcpy(t->global[rank], lengths, (size_t)n * sizeof(int32_t));
        memcpy(t->offsets[rank], offsets, sizeof t->offsets[rank]);
    }
}

static gather_test *gather_test_new(int32_t timeout_ms)
{
    gather_test *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    dcp_config c;
    dcp_config_default(&c);
    c.data_parallel_size = DP;
    c.context_parallel_size = 1;
    c.max_sequences = MAX_SEQ;
    c.max_seqlen_per_rank = 1000;
    int ok = dcp_inproc_world_create(DP, timeout_ms, &t->world) == DCP_OK;
    for (int32_t r = 0; r < DP && ok; r++) ok = dcp_context_create(&c, &t->ctx[r]) == DCP_OK;
    if (!ok) {
        for (int32_t r = 0; r < DP; r++) dcp_context_destroy(t->ctx[r]);
        dcp_inproc_world_destroy(t->world);
        free(t);
        return NULL;
    }
    return t;
}

static void gather_test_free(gather_test *t)
{
    for (int32_t r = 0; r < DP; r++) dcp_context_destroy(t->ctx[r]);
    dcp_inproc_world_destroy(t->world);
    free(t);
}

static void set_lengths(gather_test *t, int32_t rank, const int32_t *lengths, int32_t n)
{
    t->in[rank].packed = 0;
    t->in[rank].data = lengths;
    t->in[rank].count = n;
}

static void set_packed(gather_test *t, int32_t rank, const int32_t *cu, int32_t n, int64_t total_tokens)
{
    t->in[rank].packed = 1;
    t->in[rank].data = cu;
    t->in[rank].count = n;
    t->in[rank].total_tokens = total_tokens;
}

static int run(gather_test *t)
{
    memset(t->status, 0, sizeof t->status);
    memset(t->global, 0, sizeof t->global);
    memset(t->offsets, 0, sizeof t->offsets);
    return dcp_inproc_run(DP, gather_rank, t) == DCP_OK;
}

/* Every rank got DCP_OK and exactly these global lengths and offsets. */
static void check_result(const gather_test *t, const int32_t *want, int32_t n, const int32_t *want_offsets, int line)
{
    for (int32_t r = 0; r < DP; r++) {
        if (t->status[r] != DCP_OK) {
            dcp_test_fail(__FILE__, line, "rank %d: %s: %s", r, dcp_status_str(t->status[r]), t->message[r]);
            continue;
        }
        if (t->num_global[r] != n) dcp_test_fail(__FILE__, line, "rank %d: %d sequences, expected %d", r, t->num_global[r], n);
        else
            for (int32_t i = 0; i < n; i++)
                if (t->global[r][i] != want[i])
                    dcp_test_fail(__FILE__, line, "rank %d: global id %d has length %d, expected %d", r, i,
                                  t->global[r][i], want[i]);
        for (int32_t p = 0; p <= DP; p++)
            if (t->offsets[r][p] != want_offsets[p])
                dcp_test_fail(__FILE__, line, "rank %d: rank_offsets[%d] = %d, expected %d", r, p, t->offsets[r][p],
                              want_offsets[p]);
    }
}

/* Every rank got `want`; the rank named `culprit` has `own` in its message, the others "DP rank <culprit>". */
static void check_failed(const gather_test *t, dcp_status want, int32_t culprit, const char *own, int line)
{
    char peer[32];
    snprintf(peer, sizeof peer, "DP rank %d", (int)culprit);
    for (int32_t r = 0; r < DP; r++) {
        if (t->status[r] != want)
            dcp_test_fail(__FILE__, line, "rank %d: got %s, expected %s (%s)", r, dcp_status_str(t->status[r]),
                          dcp_status_str(want), t->message[r]);
        const char *need = culprit < 0 || r == culprit ? own : peer;
        if (need && !strstr(t->message[r], need))
            dcp_test_fail(__FILE__, line, "rank %d: message \"%s\" lacks \"%s\"", r, t->message[r], need);
    }
}

/* The good batch used after every failure: it must come out whole on every rank. */
static const int32_t good_r0[3] = {5, 0, 7}, good_r2[5] = {3, 3, 0, 0, 9}, good_r3[1] = {1};
static const int32_t good_global[6] = {5, 7, 3, 3, 9, 1};
static const int32_t good_offsets[DP + 1] = {0, 2, 2, 5, 6};

static void set_good(gather_test *t)
{
    set_lengths(t, 0, good_r0, 3);
    set_lengths(t, 1, NULL, 0);
    set_lengths(t, 2, good_r2, 5);
    set_lengths(t, 3, good_r3, 1);
}

static void check_good_after(gather_test *t, int line)
{
    set_good(t);
    if (!run(t)) {
        dcp_test_fail(__FILE__, line, "could not run the ranks");
        return;
    }
    check_result(t, good_global, 6, good_offsets, line);
}

DCP_TEST(global_ids_follow_dp_rank_order)
{
    gather_test *t = gather_test_new(30000);
    DCP_REQUIRE(t);
    /* rank 1 has no samples, zeros are dropped everywhere */
    set_good(t);
    DCP_REQUIRE(run(t));
    check_result(t, good_global, 6, good_offsets, __LINE__);

    /* a second gather replaces the first: rank 3 first, rank 0 empty after dropping */
    const int32_t a[2] = {0, 0}, b[2] = {11, 12}, c[1] = {13}, d[4] = {14, 0, 15, 16};
    set_lengths(t, 0, a, 2);
    set_lengths(t, 1, b, 2);
    set_lengths(t, 2, c, 1);
    set_lengths(t, 3, d, 4);
    DCP_REQUIRE(run(t));
    const int32_t want[6] = {11, 12, 13, 14, 15, 16}, want_offsets[DP + 1] = {0, 0, 2, 3, 6};
    check_result(t, want, 6, want_offsets, __LINE__);

    /* nobody has anything */
    for (int32_t r = 0; r < DP; r++) set_lengths(t, r, a, r % 3);
    DCP_REQUIRE(run(t));
    const int32_t zeros[DP + 1] = {0, 0, 0, 0, 0};
    check_result(t, NULL, 0, zeros, __LINE__);

    /* exactly max_sequences over the group */
    int32_t full[DP][4];
    int32_t want_full[MAX_SEQ], full_offsets[DP + 1];
    for (int32_t r = 0; r < DP; r++) {
        full_offsets[r] = r * 4;
        for (int32_t i = 0; i < 4; i++) full[r][i] = want_full[r * 4 + i] = 100 * (r + 1) + i;
        set_lengths(t, r, full[r], 4);
    }
    full_offsets[DP] = MAX_SEQ;
    DCP_REQUIRE(run(t));
    check_result(t, want_full, MAX_SEQ, full_offsets, __LINE__);
    gather_test_free(t);
}

DCP_TEST(packed_drops_empty_subsamples)
{
    gather_test *t = gather_test_new(30000);
    DCP_REQUIRE(t);
    /* rank 0: 4, 0, 6; rank 1: a lone 0 (no sub-samples); rank 2: 0, 2; rank 3: 1 with tokens to spare */
    const int32_t cu0[4] = {0, 4, 4, 10}, cu1[1] = {0}, cu2[3] = {0, 0, 2}, cu3[2] = {0, 1};
    set_packed(t, 0, cu0, 4, 10);
    set_packed(t, 1, cu1, 1, 0);
    set_packed(t, 2, cu2, 3, 2);
    set_packed(t, 3, cu3, 2, 50);
    DCP_REQUIRE(run(t));
    const int32_t want[4] = {4, 6, 2, 1}, want_offsets[DP + 1] = {0, 2, 2, 3, 4};
    check_result(t, want, 4, want_offsets, __LINE__);
    /* packed and unpacked ranks mix: they all send lengths */
    set_lengths(t, 1, good_r3, 1);
    DCP_REQUIRE(run(t));
    const int32_t mixed[5] = {4, 6, 1, 2, 1}, mixed_offsets[DP + 1] = {0, 2, 3, 4, 5};
    check_result(t, mixed, 5, mixed_offsets, __LINE__);
    gather_test_free(t);
}

DCP_TEST(negative_length_fails_on_every_rank)
{
    gather_test *t = gather_test_new(30000);
    DCP_REQUIRE(t);
    set_good(t);
    const int32_t bad[3] = {3, 0, -4};
    set_lengths(t, 2, bad, 3);
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_BAD_LENGTH, 2, "DP rank 2 sample 2 has length -4", __LINE__);
    check_good_after(t, __LINE__);

    /* two ranks fail differently: the lowest one's status wins everywhere, and rank 3 says so */
    const int32_t too_many[MAX_SEQ + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    set_good(t);
    set_lengths(t, 3, bad, 3);
    set_lengths(t, 1, too_many, MAX_SEQ + 1);
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_CAPACITY, 1, "more than max_sequences = 16", __LINE__);
    DCP_CHECK_CONTAINS(t->message[3], "DP rank 1 failed with DCP_ERR_CAPACITY");
    DCP_CHECK_CONTAINS(t->message[3], "length -4");
    check_good_after(t, __LINE__);

    /* a negative count is an argument error, but it is agreed too */
    set_good(t);
    set_lengths(t, 0, good_r0, -1);
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_INVALID_ARGUMENT, 0, "num_local -1", __LINE__);
    check_good_after(t, __LINE__);
    gather_test_free(t);
}

DCP_TEST(corrupt_cu_seqlens_fail_on_every_rank)
{
    gather_test *t = gather_test_new(30000);
    DCP_REQUIRE(t);
    const int32_t start[3] = {2, 5, 9}, down[4] = {0, 5, 4, 9}, past[3] = {0, 5, 12}, ok[3] = {0, 5, 9};
    struct {
        int32_t rank;
        const int32_t *cu;
        int32_t n;
        int64_t total;
        const char *message;
    } cases[5] = {
        {1, start, 3, 9, "cu_seqlens[0] is 2, not 0"},
        {2, down, 4, 9, "cu_seqlens decreases at 2 (5 -> 4)"},
        {3, past, 3, 9, "cu_seqlens[2] = 12 is past the 9 tokens"},
        {0, ok, 0, 9, "0 cu_seqlens entries"},
        {3, ok, 3, -1, "for -1 tokens"},
    };
    for (int i = 0; i < 5; i++) {
        for (int32_t r = 0; r < DP; r++) set_packed(t, r, ok, 3, 9);
        set_packed(t, cases[i].rank, cases[i].cu, cases[i].n, cases[i].total);
        DCP_REQUIRE(run(t));
        check_failed(t, DCP_ERR_CORRUPT_INPUT, cases[i].rank, cases[i].message, __LINE__);
        check_good_after(t, __LINE__);
    }
    gather_test_free(t);
}

DCP_TEST(total_over_max_sequences_fails_on_every_rank)
{
    gather_test *t = gather_test_new(30000);
    DCP_REQUIRE(t);
    /* each rank alone fits; together they hold 17 > 16 */
    const int32_t four[4] = {1, 2, 3, 4}, five[5] = {1, 2, 3, 4, 5};
    for (int32_t r = 0; r < DP; r++) set_lengths(t, r, r == 2 ? five : four, r == 2 ? 5 : 4);
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_CAPACITY, -1, "17 sequences over the DP group exceed max_sequences = 16", __LINE__);
    check_good_after(t, __LINE__);
    /* the same through the packed entry point */
    const int32_t cu4[5] = {0, 1, 2, 3, 4}, cu5[6] = {0, 1, 2, 3, 4, 5};
    for (int32_t r = 0; r < DP; r++) set_packed(t, r, r == 0 ? cu5 : cu4, r == 0 ? 6 : 5, 5);
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_CAPACITY, -1, "17 sequences over the DP group exceed max_sequences = 16", __LINE__);
    check_good_after(t, __LINE__);
    gather_test_free(t);
}

/*
 * The communicator fails under the gather: an injected error aborts it on
 * every rank (DCP_ERR_COMM); a rank that never arrives leaves the others with
 * DCP_ERR_TIMEOUT.  The contexts and the world work afterwards.
 */
DCP_TEST(communicator_faults_reach_every_rank)
{
    gather_test *t = gather_test_new(200);
    DCP_REQUIRE(t);
    set_good(t);
    DCP_REQUIRE_OK(dcp_inproc_inject_fault(t->world, 1, DCP_FAULT_RETURN_ERROR));
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_COMM, -1, "error agreement failed", __LINE__);
    check_good_after(t, __LINE__);

    DCP_REQUIRE_OK(dcp_inproc_inject_fault(t->world, 3, DCP_FAULT_NEVER_ARRIVE));
    DCP_REQUIRE(run(t));
    for (int32_t r = 0; r < DP; r++) DCP_CHECK_STATUS(t->status[r], r == 3 ? DCP_ERR_COMM : DCP_ERR_TIMEOUT);
    check_good_after(t, __LINE__);

    /* a truncated agreement is corrupt on every rank */
    DCP_REQUIRE_OK(dcp_inproc_inject_fault(t->world, 0, DCP_FAULT_TRUNCATE));
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_CORRUPT_INPUT, -1, "error agreement failed", __LINE__);
    check_good_after(t, __LINE__);
    gather_test_free(t);
}

DCP_TEST(gather_allocates_nothing)
{
    if (!dcp_alloc_probe_available()) DCP_SKIP("jemalloc counters not available");
    gather_test *t = gather_test_new(30000);
    DCP_REQUIRE(t);
    t->probe_alloc = 1;
    set_good(t);
    DCP_REQUIRE(run(t));
    check_result(t, good_global, 6, good_offsets, __LINE__);
    const int32_t cu[4] = {0, 4, 4, 10};
    for (int32_t r = 0; r < DP; r++) set_packed(t, r, cu, 4, 10);
    DCP_REQUIRE(run(t));
    const int32_t want[8] = {4, 6, 4, 6, 4, 6, 4, 6}, want_offsets[DP + 1] = {0, 2, 4, 6, 8};
    check_result(t, want, 8, want_offsets, __LINE__);
    /* failures allocate nothing either */
    const int32_t bad[2] = {1, -1};
    set_good(t);
    set_lengths(t, 1, bad, 2);
    DCP_REQUIRE(run(t));
    check_failed(t, DCP_ERR_BAD_LENGTH, 1, "length -1", __LINE__);
    gather_test_free(t);
}
