/*
 * stats.c - the step cost model of a plan (docs/planning.md, cost model): makespan and
 * lower bound under both step models (barrier and dependency), the
 * reference's quadratic model.  Every rank of a group carries the same cost,
 * so this walks groups, not ranks.  The caller has checked the plan
 * (dcp__plan_check): the walk trusts its offsets.
 */
#include "plan.h"
#include "cost.h"
#include "int128.h"
#include "pipeline_model.h"

#include <string.h>

/*
 * The lower bound of the step cost model (docs/planning.md, cost model; the proof is
 * docs/planning.md's "Lower bound" section, in short here).
 *
 * A plan has K microbatches; microbatch m costs L_m + o, L_m its most
 * loaded group's per-rank load, o the microbatch overhead.  Every sequence i
 * runs in one group at some CP size c_i (a power of two up to N, N, or the
 * static CP size, which need not be a power of two) with s_i <= c_i * M, and
 * its group's every rank carries at least cost(s_i, c_i).  Every size below
 * ranges over all three kinds, so each step holds whichever a plan uses.
 * phi(s) is the least cost(s, c) over the sizes c that hold s tokens, w(s, c)
 * = c * cost(s, c) the GPU time of s at size c; both grow with s.
 *
 *  (1) K >= K_min: the ranks hold at most N * M tokens a microbatch, so
 *      K >= ceil(S / (N M)) (S all tokens) = K_tok; with a sequence cap q,
 *      at most N * q sequences fit a microbatch; K is a multiple of the VPP
 *      group.
 *  (2) Work: N * L_m >= the GPU time of microbatch m's sequences, so
 *      sum L_m >= ceil(sum_i w(s_i, c_i) / N).
 *  (3) Forced microbatches: order the microbatches by their longest sequence
 *      a_1 >= a_2 >= ...  Sequences longer than a_j all sit in microbatches
 *      1..j-1, which hold at most (j-1) N M tokens, so a_j is at least the
 *      length t_j where the lengths, longest first, first add up to more
 *      than (j-1) N M (j <= K_tok); the maxima are distinct sequences, so a_j
 *      is also at least the (n - K_min + j)-th longest length.  Hence
 *      L_j >= x_j = phi(that length), and x_1 = phi(longest) >= x_2 >= ...
 *  (4) With T = max_m L_m every sequence runs at a size costing at most T,
 *      so the work is at least W(T) = sum_i min{w(s_i, c) : cost(s_i, c) <= T},
 *      while the other microbatches cost at least X2 = x_2 + ... + x_K_min
 *      (dropping any one of x_1..x_K_min leaves at least that).  So
 *      sum L_m >= max(T + X2, ceil(W(T) / N)) for some T >= x_1; W only falls
 *      as T rises, so the least such value over T is LB = T* + X2 at the
 *      least T* >= x_1 where ceil(W(T*) / N) <= T* + X2 (found by halving).
 *  (5) Token room of the dearest microbatch: microbatch 1 (it holds the
 *      longest sequence, so L_1 >= x_1) holds at most N M tokens, so the
 *      least work a of its sequences is at most U, the most least work any
 *      N M tokens carry (each token of sequence i carries w_min(s_i) / s_i;
 *      filled densest first).  N L_1 >= a and the others' work is at least
 *      W_min - a, so sum L_m >= min over 0 <= a <= min(U, W_min) of
 *      (max(N x_1, a) + max(N X2, W_min - a)) / N: where U < N x_1 the
 *      longest sequence's microbatch cannot be filled up to its level, and
 *      what it cannot hold the other microbatches run.
 *
 * makespan >= max(LB, step 5) + K_min * o.
 *
 * The small-microbatch hinge (dcp__group_cost: small_slope * max(0,
 * small_knee - a group's tokens per rank)) is charged per group in a plan's
 * makespans and never here.  That keeps the bound one: a plan's group costs
 * with the hinge are each >= the sum of dcp_cost() of its sequences, which
 * is what every step above uses (L_m, the work, x_j, W(T), U); both step
 * models' makespans are sums and maxima of group costs, monotone in each, so
 * a plan's makespan with the hinge is >= its makespan without it, and that is
 * >= the bound.  The same holds for dcp__dependency_lower_bound.  The gather
 * term cp_gather[k] * s is inside dcp_cost() and grows with s, so phi and w
 * still never decrease as s grows, which steps 3 to 5 need.
 *
 * Lengths are located in a histogram of 32
 * steps per octave (a length is taken at its step's lower edge: still a
 * lower bound), so no scratch is needed.  Everything saturates at
 * INT64_MAX.
 */

enum { BOUND_STEPS = 5, BOUND_BUCKETS = 32 << BOUND_STEPS }; /* 2^5 steps per octave, 32 octaves */

/* The histogram bucket of a length (>= 1) and the least length it holds. */
static int bound_bucket(int64_t s)
{
    int e = 63 - __builtin_clzll((uint64_t)s);
    int frac = e >= BOUND_STEPS ? (int)((s >> (e - BOUND_STEPS)) & ((1 << BOUND_STEPS) - 1))
                                : (int)((s << (BOUND_STEPS - e)) & ((1 << BOUND_STEPS) - 1));
    return (e << BOUND_STEPS) + frac;
}

static int64_t bound_edge(int bucket)
{
    int e = bucket >> BOUND_STEPS, frac = bucket & ((1 << BOUND_STEPS) - 1);
    if (e >= BOUND_STEPS) return ((int64_t)((1 << BOUND_STEPS) + frac)) << (e - BOUND_STEPS);
    return (((int64_t)1 << BOUND_STEPS) + frac) >> (BOUND_STEPS - e); /* exact enough: a lower edge */
}

/*
 * The static CP size as a group size of its own: the size when it is neither a power of two nor N (nor
 * 1), otherwise 0 (the other sizes already include it).  A static size always divides N, so it is <= N.
 */
static int64_t static_size(int32_t static_cp, int32_t num_ranks)
{
    return static_cp > 1 && static_cp < num_ranks && (static_cp & (static_cp - 1)) != 0 ? static_cp : 0;
}

/*
 * The group sizes of N ranks in increasing order, `extra` (static_size(), 0: none) among them: the next
 * after cp, or 0.  After the static size comes the least power of two above it.
 */
static int64_t next_size(int64_t cp, int32_t num_ranks, int64_t extra)
{
    if (cp >= num_ranks) return 0;
    int64_t pow2 = (int64_t)1 << (64 - __builtin_clzll((uint64_t)cp)); /* the least power of two above cp */
    int64_t next = pow2 <= num_ranks ? pow2 : num_ranks;
    return extra > cp && extra < next ? extra : next;
}

/* phi(s): the least per-rank cost of s tokens over the sizes that hold them; INT64_MAX when none does. */
static int64_t cheapest_cost(const dcp_cost_model *model, int64_t s, int32_t num_ranks, int32_t max_seqlen,
                             int64_t extra)
{
    int64_t best = INT64_MAX;
    for (int64_t cp = 1; cp > 0; cp = next_size(cp, num_ranks, extra))
        if (s <= cp * (int64_t)max_seqlen) {
            int64_t c = dcp_cost(model, s, (int32_t)cp);
            if (c < best) best = c;
        }
    return best;
}

/*
 * min{w(s, c) : cost(s, c) <= T} over the sizes that hold s; -1 when no size
 * costs that little.  With a round latency r >= 1 (and no saturation), w(s, c)
 * >= X - (c - 1) + c (c - 1) r where X = quadratic s^2 + linear s, for any
 * c, and that grows with c: the scan (in increasing order, the static size
 * among the others) stops once it reaches the best found.
 */
static dcp__i128 least_work_under(const dcp_cost_model *model, int64_t s, int32_t num_ranks, int32_t max_seqlen,
                                 int64_t extra, int64_t level)
{
    const int64_t q = model->quadratic > 0 ? model->quadratic : 0, lin = model->linear > 0 ? model->linear : 0;
    const int64_t lat = model->round_latency > 0 ? model->round_latency : 0;
    const dcp__i128 x = (dcp__i128)q * s * s + (dcp__i128)lin * s;
    const int early = lat >= 1 && lat <= ((int64_t)1 << 32) && x < ((dcp__i128)1 << 62);
    dcp__i128 best = -1;
    for (int64_t cp = 1; cp > 0; cp = next_size(cp, num_ranks, extra)) {
        if (early && best >= 0 && x - (cp - 1) + (dcp__i128)cp * (cp - 1) * lat >= best) break;
        if (s > cp * (int64_t)max_seqlen) continue;
        int64_t c = dcp_cost(model, s, (int32_t)cp);
        if (c > level) continue;
        dcp__i128 w = (dcp__i128)cp * c;
        if (best < 0 || w < best) best = w;
    }
    return best;
}

/* W(T) (see above); -1 when some sequence costs more than T at every size. */
static dcp__i128 work_under(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                           int32_t max_seqlen, int64_t extra, int64_t level)
{
    dcp__i128 total = 0;
    for (int32_t i = 0; i < n; i++) {
        dcp__i128 w = least_work_under(model, lengths[i], num_ranks, max_seqlen, extra, level);
        if (w < 0) return -1;
        total += w;
    }
    return total;
}

/*
 * Step 5's U: at most the least work that `capacity` tokens can carry, from each bucket's token count
 * (sum) and its most least work per token (per_token, rounded up): the buckets densest first, each
 * token at its bucket's most (so never below the true most).  Buckets are mostly denser the longer
 * their lengths, so an insertion sort from the longest down has little to move.
 */
static dcp__i128 densest_work(const int64_t *per_token, const int64_t *sum, dcp__i128 capacity)
{
    int16_t order[BOUND_BUCKETS];
    int filled = 0;
    for (int b = BOUND_BUCKETS - 1; b >= 0; b--) {
        if (sum[b] == 0) continue;
        int j = filled++;
        while (j > 0 && per_token[order[j - 1]] < per_token[b]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = (int16_t)b;
    }
    dcp__i128 work = 0, left = capacity;
    for (int j = 0; j < filled && left > 0; j++) {
        const dcp__i128 take = sum[order[j]] < left ? sum[order[j]] : left;
        work += take * per_token[order[j]]; /* at most 2^62 tokens in all, 2^63 a token */
        left -= take;
    }
    return work;
}

/*
 * Step 5: min over 0 <= a <= min(U, W) of ceil((max(N x1, a) + max(N X2, W - a)) / N), W the least
 * work, U = `densest`.  The expression is piecewise linear in a with corners at N x1 and W - N X2, so
 * its least over the interval is at an end or a corner.
 */
static dcp__i128 token_room_bound(dcp__i128 least, dcp__i128 densest, int64_t x1, dcp__i128 x2, int32_t num_ranks)
{
    if (x1 == INT64_MAX) return 0;
    const dcp__i128 n = num_ranks, top = densest < least ? densest : least;
    const dcp__i128 corners[4] = {0, top, n * x1, least - n * x2};
    dcp__i128 best = -1;
    for (int j = 0; j < 4; j++) {
        const dcp__i128 a = corners[j] < 0 ? 0 : corners[j] > top ? top : corners[j];
        const dcp__i128 first = n * x1 > a ? n * x1 : a, others = n * x2 > least - a ? n * x2 : least - a;
        if (best < 0 || first + others < best) best = first + others;
    }
    return (best + n - 1) / n;
}

/*
 * The bound for a configuration: VPP group `vpp` (1: none), sequence cap `seq_cap` (0: none), static CP
 * size `static_cp` (1: none; a group size besides the powers of two and N when it is neither).
 */
static int64_t lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                           int32_t max_seqlen, int32_t vpp, int32_t seq_cap, int32_t static_cp, unsigned steps)
{
    const int search = (steps & DCP__BOUND_LEVEL_SEARCH) != 0;
    if (n <= 0 || num_ranks <= 0 || max_seqlen <= 0) return 0;
    const int64_t extra = static_size(static_cp, num_ranks);
    const int64_t o = model->microbatch_overhead > 0 ? model->microbatch_overhead : 0;
    const dcp__i128 capacity = (dcp__i128)num_ranks * max_seqlen;
    /* tokens, the longest length, the histogram, the least work */
    dcp__i128 tokens = 0, least = 0;
    int64_t longest = 0;
    int32_t count[BOUND_BUCKETS];
    int64_t sum[BOUND_BUCKETS]; /* at most 2^31 lengths below 2^31 each */
    /*
     * Per bucket: first (step 5) the most least work per token of its lengths, rounded up; then (step 3)
     * the cheapest cost at its lower edge.  One array for both keeps the stack small.
     */
    int64_t bucket_value[BOUND_BUCKETS];
    memset(count, 0, sizeof count);
    memset(sum, 0, sizeof sum);
    memset(bucket_value, 0, sizeof bucket_value);
    int feasible = 1;
    int64_t last_s = -1, last_share = 0;
    dcp__i128 last_w = 0; /* equal lengths often come together (a scheduler's sorted ones always) */
    for (int32_t i = 0; i < n; i++) {
        int64_t s = lengths[i] > 0 ? lengths[i] : 1;
        tokens += s;
        if (s > longest) longest = s;
        int bk = bound_bucket(s);
        count[bk]++;
        sum[bk] += s;
        if (s != last_s) {
            last_w = least_work_under(model, s, num_ranks, max_seqlen, extra, INT64_MAX);
            last_s = s;
            /* the least work per token, rounded up (in 64 bits where it fits) */
            if (last_w < 0) {
                last_share = 0;
            } else if (last_w <= INT64_MAX - s) {
                last_share = ((int64_t)last_w + s - 1) / s;
            } else {
                const dcp__i128 share = (last_w + s - 1) / s;
                last_share = dcp__i128_cap(share);
            }
        }
        if (last_w < 0) {
            feasible = 0;
        } else {
            least += last_w;
            if (last_share > bucket_value[bk]) bucket_value[bk] = last_share;
        }
    }
    /* (1) the least microbatch count */
    dcp__i128 k_tok = (tokens + capacity - 1) / capacity, k_min = k_tok;
    if (seq_cap > 0) {
        dcp__i128 k_cap = ((dcp__i128)n + (dcp__i128)num_ranks * seq_cap - 1) / ((dcp__i128)num_ranks * seq_cap);
        if (k_cap > k_min) k_min = k_cap;
    }
    if (vpp > 1) k_min = (k_min + vpp - 1) / vpp * vpp;
    const dcp__i128 overheads = k_min * o;
    /* (2) alone: the old bound, also the answer when some sequence fits no size (no plan exists then) */
    const dcp__i128 work_bound = (least + num_ranks - 1) / num_ranks;
    if (!feasible) return dcp__i128_saturate_nonneg(least / num_ranks + k_tok * o);
    /* (3) x_1 and X2 = x_2 + ... + x_K_min, each x_j from the larger of its two lengths' lower edges */
    const int64_t x1 = cheapest_cost(model, longest, num_ranks, max_seqlen, extra);
    const dcp__i128 densest = densest_work(bucket_value, sum, capacity);
    int64_t *edge_cost = bucket_value;
    for (int b = 0; b < BOUND_BUCKETS; b++) edge_cost[b] = -1;
    dcp__i128 x2 = 0;
    int bt = BOUND_BUCKETS - 1, bq = BOUND_BUCKETS - 1; /* buckets walked from the longest down */
    dcp__i128 above_t = 0, above_q = 0;                  /* tokens / sequences in buckets above bt / bq */
    for (dcp__i128 j = 2; j <= k_min; j++) {
        int b = -1;
        if (j <= k_tok) { /* the bucket where tokens, longest first, first exceed (j-1) N M */
            const dcp__i128 limit = (j - 1) * capacity;
            while (bt >= 0 && above_t + sum[bt] <= limit) above_t += sum[bt--];
            if (bt >= 0) b = bt;
        }
        if (k_min <= n) { /* the bucket of the (n - K_min + j)-th longest */
            const dcp__i128 rank = (dcp__i128)n - k_min + j;
            while (bq >= 0 && above_q + count[bq] < rank) above_q += count[bq--];
            if (bq >= 0 && bq > b) b = bq;
        }
        if (b < 0) continue;
        if (edge_cost[b] < 0) {
            int64_t c = cheapest_cost(model, bound_edge(b), num_ranks, max_seqlen, extra);
            edge_cost[b] = c == INT64_MAX ? 0 : c;
        }
        x2 += edge_cost[b];
        if (x2 > (dcp__i128)INT64_MAX) break;
    }
    /* (4) the least T* >= x_1 with ceil(W(T*) / N) <= T* + X2, by halving */
    dcp__i128 bound = (dcp__i128)x1 + x2;
    if (work_bound > bound) bound = work_bound;
    /* (5) the dearest microbatch's token room */
    if (steps & DCP__BOUND_TOKEN_ROOM) {
        const dcp__i128 room = token_room_bound(least, densest, x1, x2, num_ranks);
        if (room > bound) bound = room;
    }
    if (!search) return dcp__i128_saturate_nonneg(bound + overheads);
    dcp__i128 w = work_under(model, lengths, n, num_ranks, max_seqlen, extra, x1);
    if (x1 < INT64_MAX && !(w >= 0 && (w + num_ranks - 1) / num_ranks <= (dcp__i128)x1 + x2)) {
        /* fails at x_1: find a level where it holds, then halve (the condition only turns true as T rises) */
        int64_t lo = x1, hi = x1;
        for (;;) {
            hi = hi > INT64_MAX / 2 ? INT64_MAX : hi * 2 + 1;
            w = work_under(model, lengths, n, num_ranks, max_seqlen, extra, hi);
            if ((w >= 0 && (w + num_ranks - 1) / num_ranks <= (dcp__i128)hi + x2) || hi == INT64_MAX) break;
            lo = hi;
        }
        /* to the level itself up to 4096 sequences, to within 2^-24 of it above (each step walks every sequence) */
        for (int step = 0; step < 64 && hi - lo > 1 && (n <= 4096 || hi - lo > (hi >> 24)); step++) {
            int64_t mid = lo + (hi - lo) / 2;
            w = work_under(model, lengths, n, num_ranks, max_seqlen, extra, mid);
            if (w >= 0 && (w + num_ranks - 1) / num_ranks <= (dcp__i128)mid + x2) hi = mid;
            else lo = mid;
        }
        /* the condition fails at lo, so T* > lo */
        if ((dcp__i128)lo + 1 + x2 > bound) bound = (dcp__i128)lo + 1 + x2;
    }
    return dcp__i128_saturate_nonneg(bound + overheads);
}

int64_t dcp__cost_lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                             int32_t max_seqlen_per_rank)
{
    return lower_bound(model, lengths, n, num_ranks, max_seqlen_per_rank, 1, 0, 1, DCP__BOUND_ALL);
}

int64_t dcp__cost_lower_bound_quick(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                                    int32_t max_seqlen_per_rank)
{
    return lower_bound(model, lengths, n, num_ranks, max_seqlen_per_rank, 1, 0, 1, DCP__BOUND_TOKEN_ROOM);
}

int64_t dcp__cost_lower_bound_steps(const dcp_cost_model *model, const int32_t *lengths, int32_t n, int32_t num_ranks,
                                    int32_t max_seqlen_per_rank, int32_t vpp, int32_t seq_cap, int32_t static_cp,
                                    unsigned steps)
{
    return lower_bound(model, lengths, n, num_ranks, max_seqlen_per_rank, vpp, seq_cap, static_cp, steps);
}

/* The pipeline's part of the statistics' scratch: each microbatch's cost and tokens, then the model's. */
static size_t pipeline_stats_scratch_size(const dcp_config *config)
{
    if (config->pipeline_parallel_size <= 1) return 0;
    dcp__pipeline pipe;
    dcp__pipeline_of(config, &pipe);
    const int32_t mb = config->max_microbatches > 0 ? config->max_microbatches : config->max_sequences;
    const size_t bytes = dcp__size_add(dcp__size_mul(2 * sizeof(int64_t), (size_t)mb), dcp__pipeline_scratch_size(&pipe, mb));
    /* whole int64s: the caller takes the scratch as an int64 array (the model's stage tables end in int32s) */
    return dcp__size_add(bytes, (sizeof(int64_t) - bytes % sizeof(int64_t)) % sizeof(int64_t));
}

size_t dcp__stats_scratch_size(const dcp_config *config)
{
    return dcp__size_add(DCP_ARENA_BYTES(int64_t, dcp_config_num_ranks(config)), pipeline_stats_scratch_size(config));
}

/*
 * The pipeline statistics of a checked plan (PP > 1): `scratch` is what follows the N finish times in
 * dcp__stats_scratch_size() bytes.
 */
static dcp_status pipeline_stats(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                                 int32_t num_lengths, int64_t *scratch, dcp_plan_stats *st)
{
    const int32_t K = plan->num_microbatches;
    int64_t *cost = scratch, *tokens = scratch + K;
    dcp_status bad = dcp__pipeline_plan_inputs(plan, config, lengths, num_lengths, cost, tokens);
    if (bad != DCP_OK) return bad;
    dcp__pipeline pipe;
    dcp__pipeline_of(config, &pipe);
    const int64_t makespan = dcp__pipeline_makespan(&pipe, cost, tokens, NULL, K, tokens + K);
    if (makespan < 0) return DCP_ERR_INVALID_CONFIG; /* the schedule cannot finish: never for a valid config */
    st->pipeline_makespan = makespan;
    st->pipeline_lower_bound = dcp__pipeline_lower_bound(&pipe, cost, tokens, K);
    st->model_makespan = st->pipeline_makespan;
    st->model_lower_bound = st->pipeline_lower_bound;
    return DCP_OK;
}

int64_t dcp__dependency_lower_bound(const dcp_cost_model *model, const int32_t *lengths, int32_t n,
                                    int32_t num_ranks, int32_t max_seqlen_per_rank, int32_t static_cp)
{
    const int64_t extra = static_size(static_cp, num_ranks);
    dcp__i128 work = 0, tokens = 0;
    int64_t longest_run = 0; /* max over sequences of its smallest per-rank cost */
    for (int32_t i = 0; i < n; i++) {
        int64_t s = lengths[i];
        dcp__i128 best_total = -1;
        int64_t best_rank = -1;
        for (int64_t cp = 1; cp > 0; cp = next_size(cp, num_ranks, extra)) {
            if (s > cp * (int64_t)max_seqlen_per_rank) continue;
            int64_t c = dcp_cost(model, s, (int32_t)cp);
            dcp__i128 total = (dcp__i128)cp * c;
            if (best_total < 0 || total < best_total) best_total = total;
            if (best_rank < 0 || c < best_rank) best_rank = c;
        }
        if (best_total > 0) work += best_total;
        if (best_rank > longest_run) longest_run = best_rank;
        tokens += s;
    }
    dcp__i128 capacity = (dcp__i128)num_ranks * max_seqlen_per_rank;
    dcp__i128 microbatches = capacity > 0 ? (tokens + capacity - 1) / capacity : 0;
    dcp__i128 spread = num_ranks > 0 ? (work + num_ranks - 1) / num_ranks : 0; /* ceil: the makespan is an integer */
    dcp__i128 busiest = spread > longest_run ? spread : longest_run;
    dcp__i128 bound = busiest + microbatches * model->microbatch_overhead;
    return bound > INT64_MAX ? INT64_MAX : (int64_t)bound;
}

/* The walk of dcp__plan_stats: every field but the bounds and the model's choice. */
static dcp_status plan_walk(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                            int32_t num_lengths, int64_t *finish, dcp_plan_stats *stats)
{
    const dcp_cost_model *model = &config->cost;
    const int32_t *first_group = plan->microbatch_first_group, *first_rank = plan->group_first_rank,
                  *cp_size = plan->group_cp_size;
    dcp_plan_stats st = {0};
    st.num_microbatches = plan->num_microbatches;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int64_t slowest = 0, slowest_quad = 0;
        /*
         * Dependency model: finish[first rank of a group] is that group's finish time in the latest
         * microbatch walked.  Both microbatches' groups are sorted by first rank and cover [0, N), so the
         * groups of m-1 under a group of m are found by one merge: h is the group of m-1 holding this
         * group's first rank, h_finish its finish (kept here, since finish[first_rank[h]] may be this
         * microbatch's by then).  O(groups of m-1 + groups of m).
         */
        int32_t h = m > 0 ? first_group[m - 1] : -1;
        int64_t h_finish = m > 0 ? finish[first_rank[h]] : 0;
        for (int32_t g = first_group[m]; g < first_group[m + 1]; g++) {
            int32_t cp = cp_size[g];
            int64_t cost = 0, quad = 0, tokens = 0;
            for (int32_t i = plan->group_first_id[g]; i < plan->group_first_id[g + 1]; i++) {
                int32_t id = plan->ids[i];
                if (id < 0 || id >= num_lengths) return DCP_ERR_INVALID_PLAN;
                int64_t s = lengths[id];
                cost = dcp__sat_add_i64(cost, dcp_cost(model, s, cp));
                quad = dcp__sat_add_i64(quad, (int64_t)(((dcp__i128)s * s) / cp));
                tokens += s;
                st.cp_size_sum += cp;
                st.total_tokens += s;
            }
            /* the small-microbatch hinge, once per group (every rank of it holds tokens / cp slots) */
            cost = dcp__group_cost(model, cost, tokens / cp);
            if (cost > slowest) slowest = cost;
            if (quad > slowest_quad) slowest_quad = quad;
            st.busy_sum = dcp__sat_add_i64(st.busy_sum, dcp__i128_cap((dcp__i128)cost * cp));

            int64_t start = 0, end = (int64_t)first_rank[g] + cp;
            if (m > 0) {
                start = h_finish;
                while (h + 1 < first_group[m] && (int64_t)first_rank[h] + cp_size[h] < end) {
                    h_finish = finish[first_rank[++h]];
                    if (h_finish > start) start = h_finish;
                }
                if ((int64_t)first_rank[h] + cp_size[h] == end && h + 1 < first_group[m])
                    h_finish = finish[first_rank[++h]]; /* the next group starts where h ends */
            }
            int64_t done = dcp__sat_add_i64(dcp__sat_add_i64(start, cost), model->microbatch_overhead);
            finish[first_rank[g]] = done;
            if (m + 1 == plan->num_microbatches && done > st.dependency_makespan) st.dependency_makespan = done;
        }
        st.max_rank_sum = dcp__sat_add_i64(st.max_rank_sum, slowest);
        st.makespan = dcp__sat_add_i64(st.makespan, dcp__sat_add_i64(slowest, model->microbatch_overhead));
        st.quad_makespan = dcp__sat_add_i64(st.quad_makespan, slowest_quad);
    }
    *stats = st;
    return DCP_OK;
}

int64_t dcp__plan_model_makespan(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths,
                                 int32_t num_lengths, int64_t *finish)
{
    dcp_plan_stats st;
    if (plan_walk(plan, config, lengths, num_lengths, finish, &st) != DCP_OK) return -1;
    return config->cost.step_model == DCP_STEP_MODEL_DEPENDENCY ? st.dependency_makespan : st.makespan;
}

dcp_status dcp__plan_stats(const dcp_plan *plan, const dcp_config *config, const int32_t *lengths, int32_t num_lengths,
                           int64_t *finish, dcp_plan_stats *stats)
{
    const dcp_cost_model *model = &config->cost;
    dcp_plan_stats st;
    dcp_status status = plan_walk(plan, config, lengths, num_lengths, finish, &st);
    if (status != DCP_OK) return status;
    st.lower_bound = lower_bound(model, lengths, num_lengths, plan->num_ranks, config->max_seqlen_per_rank,
                                 config->microbatch_group_size_per_vp_stage, config->max_sequences_per_microbatch,
                                 config->context_parallel_size, DCP__BOUND_ALL);
    st.dependency_lower_bound = dcp__dependency_lower_bound(model, lengths, num_lengths, plan->num_ranks,
                                                            config->max_seqlen_per_rank,
                                                            config->context_parallel_size);
    st.step_model = model->step_model;
    int dependency = model->step_model == DCP_STEP_MODEL_DEPENDENCY;
    st.model_makespan = dependency ? st.dependency_makespan : st.makespan;
    st.model_lower_bound = dependency ? st.dependency_lower_bound : st.lower_bound;
    if (config->pipeline_parallel_size > 1) {
        const size_t skip = DCP_ARENA_BYTES(int64_t, plan->num_ranks) / sizeof(int64_t);
        dcp_status bad = pipeline_stats(plan, config, lengths, num_lengths, finish + skip, &st);
        if (bad != DCP_OK) return bad;
    }
    *stats = st;
    return DCP_OK;
}
