/*
 * test_assign_reference.c - the two reference-compatible schedulers on small
 * batches worked out by hand, including the inputs on which the reference
 * (Megatron-LM dev, data_schedule.py / data_schedule_utils.py) crashes, hangs
 * or ignores a limit, where dcpack's decision is asserted instead.
 *
 * Plans are written rank by rank: microbatches separated by ';', ranks by
 * '|', the ids a rank holds by ','.  "0|0|1|2" is one microbatch on 4 ranks
 * where id 0 runs on ranks 0-1 (CP 2) and ids 1 and 2 alone on ranks 2 and 3.
 * Every plan is also checked by the validator, planned twice (same plan) and
 * planned without heap allocation.
 */
#include "dcp_test.h"
#include "../core/plan.h"

#include <stdlib.h>

typedef struct ref_case {
    dcp_scheduler scheduler;
    int32_t dp, cp;     /* dynamic_cp: dp = N ranks, cp = 1 */
    int32_t per_rank;   /* max_seqlen_per_rank */
    int32_t min_cp, vpp_group, seq_cap;
} ref_case;

static ref_case dp_balanced(int32_t dp, int32_t cp, int32_t per_rank)
{
    ref_case c = {DCP_SCHEDULER_DP_BALANCED, dp, cp, per_rank, 1, 0, 0};
    return c;
}

static ref_case dynamic_cp(int32_t ranks, int32_t per_rank)
{
    ref_case c = {DCP_SCHEDULER_DYNAMIC_CP, ranks, 1, per_rank, 1, 0, 0};
    return c;
}

static dcp_context *make_context(const ref_case *rc, int32_t n)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = rc->scheduler;
    c.data_parallel_size = rc->dp;
    c.context_parallel_size = rc->cp;
    c.max_seqlen_per_rank = rc->per_rank;
    c.min_cp_size = rc->min_cp;
    c.microbatch_group_size_per_vp_stage = rc->vpp_group;
    c.max_sequences_per_microbatch = rc->seq_cap;
    c.max_sequences = n;
    dcp_context *ctx = NULL;
    return dcp_context_create(&c, &ctx) == DCP_OK ? ctx : NULL;
}

/* The plan rank by rank (format above). */
static void render(const dcp_plan *p, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
#define PUT(...)                                                                                           \
    do {                                                                                                   \
        int k_ = snprintf(out + used, used < size ? size - used : 0, __VA_ARGS__);                        \
        if (k_ > 0) used += (size_t)k_;                                                                    \
    } while (0)
    for (int32_t m = 0; m < p->num_microbatches; m++) {
        if (m) PUT(";");
        for (int32_t r = 0; r < p->num_ranks; r++) {
            if (r) PUT("|");
            int32_t g = dcp_plan_group_of_rank(p, m, r);
            if (g < 0) continue;
            for (int32_t i = p->group_first_id[g]; i < p->group_first_id[g + 1]; i++)
                PUT(i > p->group_first_id[g] ? ",%d" : "%d", p->ids[i]);
        }
    }
#undef PUT
}

/* Plan and compare with `expected`; returns the status so error cases can be checked too. */
static dcp_status plan_check(const char *file, int line, const ref_case *rc, const int32_t *lengths, int32_t n,
                             const char *expected)
{
    dcp_context *ctx = make_context(rc, n);
    if (!ctx) {
        dcp_test_fail(file, line, "context creation failed");
        return DCP_ERR_INVALID_CONFIG;
    }
    const dcp_plan *plan = NULL;
    dcp_status st = dcp_plan_compute(ctx, lengths, n, &plan);
    if (st == DCP_OK) {
        static char got[1 << 14];
        render(plan, got, sizeof got);
        if (expected && strcmp(got, expected) != 0)
            dcp_test_fail(file, line, "plan\n  got      %s\n  expected %s", got, expected);
        dcp_plan_violation v;
        if (dcp_plan_validate(ctx, plan, lengths, n, &v) != DCP_OK)
            dcp_test_fail(file, line, "validator: %s", v.message);
        uint64_t hash = dcp_plan_hash(plan);
        dcp_status again = DCP_OK;
        if (dcp_alloc_probe_available()) {
            dcp_alloc_probe probe;
            dcp_alloc_probe_begin(&probe);
            again = dcp_plan_compute(ctx, lengths, n, &plan);
            if (dcp_alloc_probe_allocated(&probe) || dcp_alloc_probe_deallocated(&probe))
                dcp_test_fail(file, line, "planning touched the heap");
        } else {
            again = dcp_plan_compute(ctx, lengths, n, &plan);
        }
        if (again != DCP_OK || dcp_plan_hash(plan) != hash) dcp_test_fail(file, line, "planning again differs");
    } else if (expected) {
        dcp_test_fail(file, line, "expected a plan, got %s: %s", dcp_status_str(st), dcp_context_last_error(ctx));
    }
    dcp_context_destroy(ctx);
    return st;
}

#define EXPECT_PLAN(rc, lengths, expected)                                                                 \
    plan_check(__FILE__, __LINE__, &(rc), (lengths), (int32_t)(sizeof(lengths) / sizeof((lengths)[0])), (expected))
#define EXPECT_STATUS(rc, lengths, status)                                                                 \
    DCP_CHECK_STATUS(plan_check(__FILE__, __LINE__, &(rc), (lengths), (int32_t)(sizeof(lengths) / sizeof((lengths)[0])), NULL), (status))

/* ------------------------------------------------------------------------ */
/* dp_balanced                                                              */
/* ------------------------------------------------------------------------ */

/*
 * dp 2, cp 1, M 10.  Packs in id order while the sum stays <= 10:
 * [6] [5,4] [3] [9,1] [1]: 5 packs, not a multiple of dp 2.  Split one
 * singleton off the tail: the last pack [1] has one sequence, step back; [9,1]
 * gives up its last id (5) as a new pack at the end.  Packs [0] [1,2] [3] [4]
 * [6] [5]: microbatch i holds packs 2i and 2i+1.
 */
DCP_TEST(dp_balanced_packs_in_order_then_splits_the_tail)
{
    static const int32_t lengths[] = {6, 5, 4, 3, 9, 1, 1};
    ref_case rc = dp_balanced(2, 1, 10);
    EXPECT_PLAN(rc, lengths, "0|1,2;3|4;6|5");
}

/*
 * dp 2, cp 2 (limit M*cp = 10), VPP group 2: the pack count must be a multiple
 * of 4.  Packs [6] [5,4] [3] [9,1] [1] [10] = 6; two singletons move: from
 * [9,1] (id 5), then, stepping back over [3], from [5,4] (id 2).  The CP
 * siblings of a DP lane (ranks 0-1, 2-3) hold the same pack.
 */
DCP_TEST(dp_balanced_cp_siblings_share_a_pack_and_vpp_multiple)
{
    static const int32_t lengths[] = {6, 5, 4, 3, 9, 1, 1, 10};
    ref_case rc = dp_balanced(2, 2, 5);
    rc.vpp_group = 2;
    EXPECT_PLAN(rc, lengths, "0|0|1|1;3|3|4|4;6|6|7|7;5|5|2|2");
}

/* Two singleton packs cannot become four: the reference asserts "Not enough samples to move". */
DCP_TEST(dp_balanced_too_few_sequences_for_the_dp_multiple)
{
    static const int32_t lengths[] = {10, 10};
    ref_case rc = dp_balanced(4, 1, 10);
    EXPECT_STATUS(rc, lengths, DCP_ERR_INFEASIBLE);
}

/* thd_max_packed_sequences: at most 2 sequences a pack, whatever the tokens. */
DCP_TEST(dp_balanced_sequence_cap)
{
    static const int32_t lengths[] = {1, 1, 1, 1, 1};
    ref_case rc = dp_balanced(1, 1, 100);
    rc.seq_cap = 2;
    EXPECT_PLAN(rc, lengths, "0,1;2,3;4");
}

/*
 * A sequence longer than M*cp: the reference emits an empty pack (when it is
 * the first sequence) and an over-full one; dcpack rejects the length.
 */
DCP_TEST(dp_balanced_rejects_a_sequence_longer_than_the_cp_group)
{
    static const int32_t lengths[] = {11, 3};
    ref_case rc = dp_balanced(2, 2, 5);
    EXPECT_STATUS(rc, lengths, DCP_ERR_BAD_LENGTH);
}

/* ------------------------------------------------------------------------ */
/* dynamic_cp                                                               */
/* ------------------------------------------------------------------------ */

/*
 * N 4, M 10.  Sorted: 20(id 0) 10(1) 10(2) 5(3) 5(4).
 * Microbatch 0: id 0 needs cp 2: group [0,1], load 400/2 = 200, 20 tokens (full).
 * id 1: c=1, no group of size 1; new group [2]: value max(200, 100) = 200 = the
 * current maximum: taken.  id 2: group [2] has no token room; new group [3].
 * ids 3, 4: no room in any group, no free rank: they wait.
 * Microbatch 1: id 3 on [0] (load 25); id 4: adding to [0] gives 50, a new
 * group [1] gives max(25, 25) = 25: new group.  Ranks 2, 3 are empty: the
 * first group of the smallest size ([0]) doubles to [0,1], pushing [1] to
 * [2]; then [2] doubles to [2,3].
 */
DCP_TEST(dynamic_cp_packs_then_fills_empty_ranks)
{
    static const int32_t lengths[] = {20, 10, 10, 5, 5};
    ref_case rc = dynamic_cp(4, 10);
    EXPECT_PLAN(rc, lengths, "0|0|1|2;3|3|4|4");
}

/*
 * Ties: id 2 (3 tokens) can join group [1] (value max(100, 9 + 9) = 100) or
 * open [2] (value 100).  Options are ranked c ascending, then existing groups
 * in creation order, then the new group; only a strictly smaller value
 * replaces the current choice: the existing group wins.  Then [0] and [1]
 * double to fill ranks 2-3.
 */
DCP_TEST(dynamic_cp_existing_group_wins_a_tie_with_a_new_group)
{
    static const int32_t lengths[] = {10, 3, 3};
    ref_case rc = dynamic_cp(4, 10);
    EXPECT_PLAN(rc, lengths, "0|0|1,2|1,2");
}

/*
 * Packing-aware CP: id 0 (11 tokens) needs cp 2: [0,1], load 121/2 = 60.5.
 * id 1 (10) could run alone on [2] (value max(60.5, 100) = 100) but a new
 * group [2,3] gives max(60.5, 50) = 60.5, strictly smaller: it takes cp 2.
 */
DCP_TEST(dynamic_cp_takes_a_larger_cp_when_it_lowers_the_maximum)
{
    static const int32_t lengths[] = {11, 10};
    ref_case rc = dynamic_cp(4, 10);
    EXPECT_PLAN(rc, lengths, "0|0|1|1");
}

/*
 * min_cp_size 2: id 0 on [0,1] (load 12.5); id 1: group [0,1] gives 25, a
 * new group [2,3] gives 12.5: new group.  id 2: both groups give 25, the
 * first created wins.
 */
DCP_TEST(dynamic_cp_min_cp_size)
{
    static const int32_t lengths[] = {5, 5, 5};
    ref_case rc = dynamic_cp(4, 10);
    rc.min_cp = 2;
    EXPECT_PLAN(rc, lengths, "0,2|0,2|1|1");
}

/*
 * VPP group 2 and one microbatch "0|0|1|2" (blocks of 2, 1, 1 ranks): split at
 * the first block boundary at or past rank N/2 = 2.  First half [0,0] + 2
 * empty ranks: all its blocks are equal and the first fits in the empty
 * space, so it doubles: 0|0|0|0.  Second half [1],[2] + 2 empty: block 1
 * doubles (1|1|2), then the trailing smaller block 2 doubles (1|1|2|2).  The
 * second half replaces the microbatch, the first is appended.  The reference's
 * refill loop reads rank -1 when its walk reaches the first block
 * (`sid0 in group[i] and i >= 0`); that entry is always empty there, so the
 * wrap changes nothing, and dcpack checks the bound first.
 */
DCP_TEST(dynamic_cp_vpp_alignment_splits_a_microbatch)
{
    static const int32_t lengths[] = {20, 10, 10};
    ref_case rc = dynamic_cp(4, 10);
    rc.vpp_group = 2;
    EXPECT_PLAN(rc, lengths, "1|1|2|2;0|0|0|0");
}

/* One microbatch of one CP group cannot be split: the reference asserts, dcpack reports it. */
DCP_TEST(dynamic_cp_vpp_alignment_without_a_split_is_infeasible)
{
    static const int32_t lengths[] = {20};
    ref_case rc = dynamic_cp(2, 10);
    rc.vpp_group = 2;
    EXPECT_STATUS(rc, lengths, DCP_ERR_INFEASIBLE);
}

/*
 * N 6, M 12, VPP group 3.  Before alignment: microbatch 0 = 6|6|2,5|2,5|3|0
 * (blocks 2,2,1,1), microbatch 1 = 4|4|4|4|1|1 (blocks 4,2); one split is
 * needed.  The reference tries the last microbatch first: its first half is
 * the 4-block plus 2 empty ranks, and a block of 4 can never double into 2
 * empty ranks, so its refill loop runs forever.  dcpack counts that
 * microbatch as unsplittable and moves on to microbatch 0: halves 6|6|2,5|2,5
 * (+2 empty; equal blocks, the first doubles: 6x4, 2,5x2) and 3|0 (+4 empty:
 * 3|3|0, 3|3|0|0, then 3x4|0|0).  The second half replaces microbatch 0, the
 * first is appended.
 */
DCP_TEST(dynamic_cp_vpp_alignment_skips_a_microbatch_it_cannot_refill)
{
    static const int32_t lengths[] = {10, 3, 17, 12, 9, 7, 22};
    ref_case rc = dynamic_cp(6, 12);
    rc.vpp_group = 3;
    EXPECT_PLAN(rc, lengths, "3|3|3|3|0|0;4|4|4|4|1|1;6|6|6|6|2,5|2,5");
}

/*
 * N 10 (not a power of two), M 10: ids 0 and 1 (40 tokens) need cp 4:
 * [0-3] and [4-7], ranks 8-9 empty.  The reference grows [0-3] to 8 ranks
 * (its only test is last rank + 4 < 10) and pushes [4-7] to ranks 8-11:
 * IndexError.  dcpack treats a group that needs more empty ranks than there
 * are as unable to grow; [4-7] cannot grow either (7 + 4 >= 10), so the
 * microbatch falls back to one group of all 10 ranks (80 tokens <= 100).
 */
DCP_TEST(dynamic_cp_fill_never_pushes_past_the_last_rank)
{
    static const int32_t lengths[] = {40, 40};
    ref_case rc = dynamic_cp(10, 10);
    EXPECT_PLAN(rc, lengths, "0,1|0,1|0,1|0,1|0,1|0,1|0,1|0,1|0,1|0,1");
}

/*
 * N 7, M 5.  18 (id 1) on [0-3]; 16 (id 2) has no room and no 4 free ranks;
 * 1 (id 0) opens [4], which grows to [4,5]; rank 6 stays empty ([4,5] would
 * need ranks up to 7): fall back to the full group, taking in order what fits
 * on 7 ranks.  In binary64, 18/7 + 16/7 + 1/7 = 5.000000000000001 > 5, so the
 * reference leaves id 0 out (exactly it is 35/7 = 5); dcpack replays the
 * same correctly rounded sums.
 */
DCP_TEST(dynamic_cp_full_group_fallback_rounds_like_the_reference)
{
    static const int32_t lengths[] = {1, 18, 16};
    ref_case rc = dynamic_cp(7, 5);
    EXPECT_PLAN(rc, lengths, "1,2|1,2|1,2|1,2|1,2|1,2|1,2;0|0|0|0|0|0|0");
}

/*
 * N 6, M 10: 50 and 45 tokens need 8 ranks, more than the largest power of
 * two (4) but no more than N: the reference asserts.  dcpack gives such a
 * sequence the full group of 6 (tokens 50 + 45 > 60: one microbatch each);
 * 30 (cp 4) cannot use a group of 6 and waits.  Microbatch 3: 30 on [0-3],
 * 5 on [4] (value max(225, 25) = 225), which doubles to [4,5].
 */
DCP_TEST(dynamic_cp_sequence_needing_more_than_the_largest_power_of_two)
{
    static const int32_t lengths[] = {50, 45, 30, 5};
    ref_case rc = dynamic_cp(6, 10);
    EXPECT_PLAN(rc, lengths, "0|0|0|0|0|0;1|1|1|1|1|1;2|2|2|2|3|3");
}

/*
 * The reference's dynamic scheduler ignores thd_max_packed_sequences (three
 * sequences on one rank here); dcpack honours max_sequences_per_microbatch as
 * one more fit condition.
 */
DCP_TEST(dynamic_cp_honours_the_sequence_cap)
{
    static const int32_t lengths[] = {10, 10, 10};
    ref_case rc = dynamic_cp(1, 100);
    EXPECT_PLAN(rc, lengths, "0,1,2");
    rc.seq_cap = 2;
    EXPECT_PLAN(rc, lengths, "0,1;2");
}

/* A sequence longer than all ranks together hold is a bad length (the reference asserts). */
DCP_TEST(dynamic_cp_rejects_a_sequence_longer_than_all_ranks)
{
    static const int32_t lengths[] = {5, 41};
    ref_case rc = dynamic_cp(4, 10);
    EXPECT_STATUS(rc, lengths, DCP_ERR_BAD_LENGTH);
}

/*
 * Lengths near 2^31 with M near 2^30 on 8 ranks: loads s*s*L/c pass 2^64,
 * so they are kept in coarser units; the plan is still valid and the same
 * every time.
 */
DCP_TEST(dynamic_cp_huge_lengths_plan_in_coarser_units)
{
    static const int32_t lengths[] = {INT32_MAX, 2000000000, 1500000000, 1 << 30, 1000, 1, (1 << 30) + 1, 77777777};
    ref_case rc = dynamic_cp(8, 1 << 30);
    DCP_CHECK_STATUS(EXPECT_PLAN(rc, lengths, NULL), DCP_OK);
}

/*
 * Every trace under several rank counts that are not powers of two, with and
 * without VPP alignment (where the reference asserts, loops forever or writes
 * past the last rank): a valid plan or a documented input error, never an
 * invalid plan.
 */
DCP_TEST(dynamic_cp_non_power_of_two_ranks_on_every_trace)
{
    static const char *const traces[] = {"mlmdefault", "longsft", "bimodal", "uniform32k"};
    static const int32_t rank_counts[] = {3, 6, 12, 24, 48, 96};
    static const int32_t per_rank[] = {4096, 16384};
    static const int32_t groups[] = {0, 2, 3};
    enum { CAP = 1024 };
    static int32_t lengths[CAP];
    int planned = 0, total = 0;
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        char path[128];
        snprintf(path, sizeof path, "workloads/%s_n256_seed1.txt", traces[t]);
        int n = dcp_test_read_trace(dcp_test_data_path(path), lengths, CAP);
        DCP_REQUIRE(n == 256);
        for (size_t r = 0; r < sizeof rank_counts / sizeof rank_counts[0]; r++)
            for (size_t m = 0; m < sizeof per_rank / sizeof per_rank[0]; m++)
                for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
                    ref_case rc = dynamic_cp(rank_counts[r], per_rank[m]);
                    rc.vpp_group = groups[g];
                    dcp_status st = plan_check(__FILE__, __LINE__, &rc, lengths, n, NULL);
                    if (st != DCP_OK && st != DCP_ERR_BAD_LENGTH && st != DCP_ERR_INFEASIBLE)
                        dcp_test_fail(__FILE__, __LINE__, "%s ranks %d M %d group %d: %s", traces[t], rank_counts[r],
                                      per_rank[m], groups[g], dcp_status_str(st));
                    planned += st == DCP_OK;
                    total++;
                }
    }
    DCP_CHECK(2 * planned > total); /* most configurations plan: the checks above are not vacuous */
}

/*
 * One rank (DPxCP = 1): the reference's options reduce to the one group of
 * each microbatch, so its plan is: the tallest sequence left, then, in sorted
 * order (length descending, id ascending), every later one that fits the
 * tokens left and the sequence cap.  That rule, written out here, against the
 * planner on every trace, several M and caps.
 */
static void one_rank_expected(const int32_t *lengths, int32_t n, int32_t per_rank, int32_t cap, char *out, size_t size)
{
    int32_t *order = malloc((size_t)n * sizeof *order), *used = calloc((size_t)n, sizeof *used);
    for (int32_t i = 0; i < n; i++) order[i] = i;
    for (int32_t i = 1; i < n; i++) /* stable insertion sort, length descending */
        for (int32_t j = i; j > 0 && lengths[order[j - 1]] < lengths[order[j]]; j--) {
            int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t at = 0;
    out[0] = '\0';
#define PUT(...)                                                                                           \
    do {                                                                                                   \
        int k_ = snprintf(out + at, at < size ? size - at : 0, __VA_ARGS__);                               \
        if (k_ > 0) at += (size_t)k_;                                                                      \
    } while (0)
    for (int32_t first = 0; first < n; first++) {
        if (used[first]) continue;
        PUT("%s%d", at ? ";" : "", order[first]);
        int64_t room = per_rank - lengths[order[first]];
        int32_t count = 1;
        used[first] = 1;
        for (int32_t k = first + 1; k < n && room > 0 && (cap == 0 || count < cap); k++) {
            if (used[k] || lengths[order[k]] > room) continue;
            used[k] = 1;
            PUT(",%d", order[k]);
            room -= lengths[order[k]];
            count++;
        }
    }
#undef PUT
    free(order), free(used);
}

DCP_TEST(dynamic_cp_one_rank_packs_in_sorted_order)
{
    static const char *const traces[] = {"mlmdefault", "longsft", "bimodal", "uniform32k"};
    static const int32_t per_rank[] = {4096, 8192, 16384, 65536};
    static const int32_t caps[] = {0, 3, 7};
    enum { CAP = 1024 };
    static int32_t lengths[CAP];
    static char want[1 << 16];
    int planned = 0;
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        char path[128];
        snprintf(path, sizeof path, "workloads/%s_n256_seed1.txt", traces[t]);
        int n = dcp_test_read_trace(dcp_test_data_path(path), lengths, CAP);
        DCP_REQUIRE(n == 256);
        for (size_t m = 0; m < sizeof per_rank / sizeof per_rank[0]; m++)
            for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
                int fits = 1;
                for (int32_t i = 0; i < n; i++) fits &= lengths[i] <= per_rank[m];
                ref_case rc = dynamic_cp(1, per_rank[m]);
                rc.seq_cap = caps[c];
                if (!fits) {
                    dcp_status st = plan_check(__FILE__, __LINE__, &rc, lengths, n, NULL);
                    DCP_CHECK_STATUS(st, DCP_ERR_BAD_LENGTH);
                    continue;
                }
                one_rank_expected(lengths, n, per_rank[m], caps[c], want, sizeof want);
                planned += plan_check(__FILE__, __LINE__, &rc, lengths, n, want) == DCP_OK;
            }
    }
    DCP_CHECK(planned >= 12);
    /* a hand-worked one: M 10, lengths 6 5 4 3 9 1 1 -> [9,1] [6,4] [5,3,1] */
    static const int32_t small[] = {6, 5, 4, 3, 9, 1, 1};
    ref_case rc = dynamic_cp(1, 10);
    EXPECT_PLAN(rc, small, "4,5;0,2;1,3,6");
}
