/*
 * fuzz_plan.c - bytes -> configuration + lengths -> every scheduler.
 *
 * Properties checked on every input, for each of dp_balanced, dynamic_cp and
 * balanced:
 *  - dcp_plan_compute() returns DCP_OK with a plan that dcp_plan_validate()
 *    accepts and an independent checker (below) accepts too, or one of the
 *    documented input errors with a message; never DCP_ERR_INVALID_PLAN.
 *  - Planning is a pure function: the same input planned twice gives the same
 *    status and the same plan hash.
 *  - The context stays usable: a fixed witness batch planned before and after
 *    the fuzzed one gives the same status and plan.
 *  - Plan statistics: makespan >= lower_bound and dependency_makespan >=
 *    dependency_lower_bound, whatever the group sizes (the static CP size too).
 *  - dynamic_cp and balanced agree on bad lengths; balanced is infeasible only
 *    where dynamic_cp is.
 *  - The validator agrees with the independent checker on a mutated copy of
 *    the plan (ids swapped, offsets moved, sizes changed...), so a validator
 *    that accepts a broken plan is caught too.
 * A scheduler that reports DCP_ERR_UNSUPPORTED on the witness batch is not
 * built yet and is skipped; once it plans the witness, UNSUPPORTED is a bug.
 *
 * Input layout (fuzz/make_corpus.py writes seeds in it):
 *   [0] dp-1 (5 bits)  [1] cp-1 (3 bits), bit 7: M = INT32_MAX - u16  [2..3] M-1 (u16)  [4] log2 min_cp (4 bits)
 *   [5] VPP group (3 bits) | cap (5 bits) [6] max_microbatches (0 = default)
 *   [7] capacity slack   [8..11] validator mutation   [12..] lengths, 3 bytes each
 */
#include "fuzz_common.h"
#include "../core/plan.h"

#include <stdlib.h>

#define MAX_LENGTHS 4096
#define HEADER_BYTES 12

enum { SCHEDULERS = 3 };

typedef struct fuzz_case {
    dcp_config config; /* scheduler field set per run */
    int32_t lengths[MAX_LENGTHS];
    int32_t n;
    uint8_t mutation[4];
} fuzz_case;

static int scheduler_built[SCHEDULERS];

static int32_t clamp32(int64_t v)
{
    if (v > INT32_MAX) return INT32_MAX;
    if (v < INT32_MIN) return INT32_MIN;
    return (int32_t)v;
}

static int32_t decode_length(uint32_t v, int64_t ranks, int64_t m)
{
    uint32_t mode = v >> 22, x = v & 0x3FFFFFu;
    switch (mode) {
    case 0:
    case 1: return (int32_t)(v & 0x7FFFFFu); /* plain: every real trace length, and 0 */
    case 2: return clamp32(ranks * m - x);   /* just under (or past) what the whole group holds */
    default:
        switch (x & 3u) {
        case 0: return -(int32_t)(x >> 2);                     /* zero and negative */
        case 1: return INT32_MAX - (int32_t)(x >> 2);          /* near INT32_MAX */
        case 2: return clamp32(m * ((x >> 2) & 63u) + (int64_t)((x >> 8) & 0x3FFFu) - 8192); /* k*M +- d */
        default: return clamp32((m << ((x >> 2) & 7u)) + ((x >> 5) & 1u)); /* CP-size boundaries */
        }
    }
}

static void decode(const uint8_t *data, size_t size, fuzz_case *fc)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    dcp_config *c = &fc->config;
    dcp_config_default(c);
    c->data_parallel_size = 1 + (fuzz_u8(&r) & 31);
    const uint8_t cp_byte = fuzz_u8(&r);
    c->context_parallel_size = 1 + (cp_byte & 7);
    const uint16_t m = fuzz_u16(&r);
    /* bit 7 of the CP byte: M just under INT32_MAX, for lengths and token sums at the int32 edge */
    c->max_seqlen_per_rank = (cp_byte & 0x80) ? INT32_MAX - m : 1 + m;
    const int32_t ranks = c->data_parallel_size * c->context_parallel_size;
    int32_t min_cp = 1 << (fuzz_u8(&r) & 15);
    while (min_cp > ranks) min_cp >>= 1;
    c->min_cp_size = min_cp;
    uint8_t b = fuzz_u8(&r);
    c->microbatch_group_size_per_vp_stage = b & 7;
    if (c->microbatch_group_size_per_vp_stage > 1) {
        c->pipeline_parallel_size = 2;
        c->virtual_pipeline_size = 2;
    }
    c->max_sequences_per_microbatch = b >> 3;
    c->max_microbatches = fuzz_u8(&r);
    uint8_t slack = fuzz_u8(&r);
    for (int i = 0; i < 4; i++) fc->mutation[i] = fuzz_u8(&r);

    fc->n = 0;
    while (fuzz_remaining(&r) >= 3 && fc->n < MAX_LENGTHS)
        fc->lengths[fc->n++] = decode_length(fuzz_u24(&r), ranks, c->max_seqlen_per_rank);

    /* capacity: room for the batch plus slack, or deliberately too small */
    int32_t witness = c->data_parallel_size * 8; /* the witness batch fits too */
    int32_t need = fc->n > witness ? fc->n : witness;
    if (slack & 0x80) c->max_sequences = fc->n - (slack & 0x7F) >= 1 ? fc->n - (slack & 0x7F) : 1;
    else c->max_sequences = need + (slack & 0x7F);
}

/* ---- the independent checker: the plan invariants (README), written per rank ---- */

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

static int32_t owner[256];       /* group owning each rank in the current microbatch */
static uint8_t seen[MAX_LENGTHS + 64];

static int oracle_accepts(const dcp_plan *p, const dcp_config *c, const int32_t *lengths, int32_t n)
{
    const int32_t ranks = c->data_parallel_size * c->context_parallel_size;
    if (p->num_ranks != ranks) return 0;
    if (p->num_microbatches < 0 || p->num_microbatches > p->max_microbatches) return 0;
    if (p->num_groups < 0 || p->num_groups > p->max_groups) return 0;
    if (p->num_ids < 0 || p->num_ids > p->max_ids || p->num_ids != n) return 0;
    const int32_t nmb = p->num_microbatches, ng = p->num_groups;
    if (p->microbatch_first_group[0] != 0 || p->microbatch_first_group[nmb] != ng) return 0;
    if (p->group_first_id[0] != 0 || p->group_first_id[ng] != p->num_ids) return 0;
    for (int32_t m = 0; m < nmb; m++)
        if (p->microbatch_first_group[m + 1] < p->microbatch_first_group[m] || p->microbatch_first_group[m + 1] > ng)
            return 0;
    for (int32_t g = 0; g < ng; g++)
        if (p->group_first_id[g + 1] < p->group_first_id[g] || p->group_first_id[g + 1] > p->num_ids) return 0;
    memset(seen, 0, (size_t)n);
    for (int32_t m = 0; m < nmb; m++) {
        for (int32_t r = 0; r < ranks; r++) owner[r] = -1;
        int64_t previous_first = -1;
        for (int32_t g = p->microbatch_first_group[m]; g < p->microbatch_first_group[m + 1]; g++) {
            int64_t first = p->group_first_rank[g], cp = p->group_cp_size[g];
            if (cp < 1 || first < 0 || first + cp > ranks) return 0;
            const int64_t static_cp = c->context_parallel_size;
            if (!is_pow2(cp) && cp != ranks && !(cp == static_cp && first % static_cp == 0)) return 0;
            if (first <= previous_first) return 0; /* groups sorted by first rank */
            previous_first = first;
            for (int64_t r = first; r < first + cp; r++) {
                if (owner[r] != -1) return 0; /* two groups on one rank */
                owner[r] = g;
            }
            int32_t count = p->group_first_id[g + 1] - p->group_first_id[g];
            if (count < 1) return 0;
            if (c->max_sequences_per_microbatch > 0 && count > c->max_sequences_per_microbatch) return 0;
            int64_t tokens = 0;
            for (int32_t i = p->group_first_id[g]; i < p->group_first_id[g + 1]; i++) {
                int32_t id = p->ids[i];
                if (id < 0 || id >= n || seen[id]) return 0;
                seen[id] = 1;
                tokens += lengths[id];
            }
            if (tokens > (int64_t)c->max_seqlen_per_rank * cp) return 0;
        }
        for (int32_t r = 0; r < ranks; r++)
            if (owner[r] == -1) return 0; /* an empty rank */
    }
    int32_t vpp = c->microbatch_group_size_per_vp_stage;
    if (vpp > 1 && nmb % vpp != 0) return 0;
    return 1;
}

/* ---- validator differential on a mutated copy ---- */

static int32_t copy_mb[MAX_LENGTHS + 2], copy_first_rank[MAX_LENGTHS + 1], copy_cp[MAX_LENGTHS + 1];
static int32_t copy_first_id[MAX_LENGTHS + 2], copy_ids[MAX_LENGTHS + 1], copy_lengths[MAX_LENGTHS];

static void check_mutated(dcp_context *ctx, const dcp_plan *plan, const fuzz_case *fc)
{
    const uint8_t kind = fc->mutation[0] & 15;
    const uint32_t a = fc->mutation[1], b = fc->mutation[2];
    const int32_t delta = (int32_t)(fc->mutation[3] & 7) - 4; /* -4 .. 3 */
    dcp_plan p = *plan;
    if (p.max_microbatches > MAX_LENGTHS || p.max_groups > MAX_LENGTHS || p.max_ids > MAX_LENGTHS) return;
    memcpy(copy_mb, plan->microbatch_first_group, ((size_t)plan->max_microbatches + 1) * sizeof(int32_t));
    memcpy(copy_first_rank, plan->group_first_rank, (size_t)plan->max_groups * sizeof(int32_t));
    memcpy(copy_cp, plan->group_cp_size, (size_t)plan->max_groups * sizeof(int32_t));
    memcpy(copy_first_id, plan->group_first_id, ((size_t)plan->max_groups + 1) * sizeof(int32_t));
    memcpy(copy_ids, plan->ids, (size_t)plan->max_ids * sizeof(int32_t));
    memcpy(copy_lengths, fc->lengths, (size_t)fc->n * sizeof(int32_t));
    p.microbatch_first_group = copy_mb;
    p.group_first_rank = copy_first_rank;
    p.group_cp_size = copy_cp;
    p.group_first_id = copy_first_id;
    p.ids = copy_ids;
    const int32_t ng = p.num_groups > 0 ? p.num_groups : 1, nid = p.num_ids > 0 ? p.num_ids : 1;
    const int32_t nmb = p.num_microbatches > 0 ? p.num_microbatches : 1;
    switch (kind) {
    case 1: copy_ids[a % (uint32_t)nid] += delta * (int32_t)(b + 1); break;
    case 2: {
        int32_t t = copy_ids[a % (uint32_t)nid];
        copy_ids[a % (uint32_t)nid] = copy_ids[b % (uint32_t)nid];
        copy_ids[b % (uint32_t)nid] = t;
        break;
    }
    case 3: copy_cp[a % (uint32_t)ng] += delta; break;
    case 4: copy_cp[a % (uint32_t)ng] = (int32_t)b; break;
    case 5: copy_first_rank[a % (uint32_t)ng] += delta; break;
    case 6: copy_first_id[a % (uint32_t)(ng + 1)] += delta; break;
    case 7: copy_mb[a % (uint32_t)(nmb + 1)] += delta; break;
    case 8:
        if (delta < 0 && p.num_microbatches > 0) p.num_microbatches--;
        else if (p.num_microbatches < p.max_microbatches) copy_mb[++p.num_microbatches] = p.num_groups;
        break;
    case 9: p.num_groups += delta; break;
    case 10: p.num_ids += delta; break;
    case 11: p.num_ranks += delta; break;
    case 12: {
        int32_t *s = &copy_lengths[a % (uint32_t)(fc->n > 0 ? fc->n : 1)];
        *s = clamp32((int64_t)*s + (int64_t)delta * (b * b + 1));
        break;
    }
    case 13: { /* move a group boundary by one id: same ids, different grouping */
        int32_t g = 1 + (int32_t)(a % (uint32_t)ng);
        if (g < p.num_groups) copy_first_id[g] += delta < 0 ? -1 : 1;
        break;
    }
    case 14: p.max_microbatches = p.num_microbatches - 1 + (delta > 0); break;
    case 15: { /* fill a group to exactly its token capacity, or one token past it */
        if (p.num_groups < 1 || fc->n < 1) return;
        int32_t g = (int32_t)(a % (uint32_t)p.num_groups);
        int64_t tokens = 0;
        for (int32_t i = copy_first_id[g]; i < copy_first_id[g + 1]; i++) tokens += copy_lengths[copy_ids[i]];
        int32_t *s = &copy_lengths[copy_ids[copy_first_id[g]]];
        int64_t grown = (int64_t)*s + (int64_t)fc->config.max_seqlen_per_rank * copy_cp[g] - tokens + (b & 1);
        if (grown > INT32_MAX) return;
        *s = (int32_t)grown;
        break;
    }
    default: return;
    }
    for (int32_t i = 0; i < fc->n; i++)
        if (copy_lengths[i] <= 0) return; /* lengths stay valid */
    dcp_plan_violation v;
    dcp_status st = dcp_plan_validate(ctx, &p, copy_lengths, fc->n, &v);
    DCP_FUZZ_ASSERT(st == DCP_OK || st == DCP_ERR_INVALID_PLAN, "validate returned %s", dcp_status_str(st));
    int accepted = oracle_accepts(&p, &fc->config, copy_lengths, fc->n);
    DCP_FUZZ_ASSERT(accepted == (st == DCP_OK), "mutation %u: validator says %s (%s), checker says %s", kind,
                    dcp_status_str(st), st == DCP_OK ? "" : v.message, accepted ? "valid" : "invalid");
    if (st != DCP_OK) DCP_FUZZ_ASSERT(v.invariant != DCP_INVARIANT_NONE && v.message[0], "violation without detail");
    /* statistics walk only plans the validator accepts */
    dcp_plan_stats stats;
    dcp_status ss = dcp_plan_stats_compute(ctx, &p, copy_lengths, fc->n, &stats);
    DCP_FUZZ_ASSERT(ss == st, "stats of a mutated plan: %s, validator: %s", dcp_status_str(ss), dcp_status_str(st));
}

/* ---- one scheduler on one input ---- */

typedef struct plan_result {
    dcp_status status;
    uint64_t hash;
} plan_result;

/*
 * The witness: dp x (VPP group) one-token sequences.  dp_balanced always plans
 * it (the count is a multiple of dp x group, so splitting singletons off can
 * always reach the multiple); the other schedulers plan it or refuse it, the
 * same way each time.  Small, so that it costs little next to the input.
 */
static int32_t witness_lengths[32 * 8];

/* Plan once; the plan (valid until the context plans again) goes to *out when out is not NULL. */
static plan_result plan_once(dcp_context *ctx, const int32_t *lengths, int32_t n, const dcp_plan **out)
{
    const dcp_plan *plan = NULL;
    plan_result res = {dcp_plan_compute(ctx, lengths, n, &plan), 0};
    if (res.status == DCP_OK) {
        DCP_FUZZ_ASSERT(plan != NULL, "DCP_OK without a plan");
        res.hash = dcp_plan_hash(plan);
    }
    if (out) *out = plan;
    return res;
}

static int32_t vpp_group(const dcp_config *c)
{
    return c->microbatch_group_size_per_vp_stage > 1 ? c->microbatch_group_size_per_vp_stage : 1;
}

static int32_t witness_count(const dcp_config *c) { return c->data_parallel_size * vpp_group(c); }

static plan_result run_scheduler(const fuzz_case *fc, dcp_scheduler scheduler, int check_mutation)
{
    dcp_config config = fc->config;
    config.scheduler = scheduler;
    dcp_context *ctx = NULL;
    plan_result res = {dcp_context_create(&config, &ctx), 0};
    if (res.status != DCP_OK) {
        /* the decoder only builds valid configurations */
        char message[256];
        dcp_status st = dcp_config_validate(&config, message, sizeof message);
        DCP_FUZZ_ASSERT(st == res.status && st != DCP_OK, "context_create %s, validate %s: %s",
                        dcp_status_str(res.status), dcp_status_str(st), message);
        return res;
    }
    const int32_t wn = witness_count(&config);
    plan_result witness_before = plan_once(ctx, witness_lengths, wn, NULL);

    const dcp_plan *plan = NULL;
    res = plan_once(ctx, fc->lengths, fc->n, &plan);
    if (res.status == DCP_ERR_UNSUPPORTED && witness_before.status == DCP_ERR_UNSUPPORTED) {
        dcp_context_destroy(ctx);
        return res; /* scheduler not built yet */
    }
    DCP_FUZZ_ASSERT(res.status != DCP_ERR_INVALID_PLAN, "%s: %s", dcp_scheduler_name(scheduler),
                    dcp_context_last_error(ctx));
    DCP_FUZZ_ASSERT(res.status == DCP_OK || fuzz_is_input_error(res.status), "%s returned %s: %s",
                    dcp_scheduler_name(scheduler), dcp_status_str(res.status), dcp_context_last_error(ctx));
    if (res.status != DCP_OK) {
        DCP_FUZZ_ASSERT(dcp_context_last_error(ctx)[0] != '\0', "%s returned %s without a message",
                        dcp_scheduler_name(scheduler), dcp_status_str(res.status));
    } else {
        dcp_plan_violation v;
        dcp_status st = dcp_plan_validate(ctx, plan, fc->lengths, fc->n, &v);
        DCP_FUZZ_ASSERT(st == DCP_OK, "%s plan rejected by the validator: %s", dcp_scheduler_name(scheduler),
                        v.message);
        DCP_FUZZ_ASSERT(oracle_accepts(plan, &config, fc->lengths, fc->n), "%s plan rejected by the checker",
                        dcp_scheduler_name(scheduler));
        dcp_plan_stats stats;
        DCP_FUZZ_ASSERT(dcp_plan_stats_compute(ctx, plan, fc->lengths, fc->n, &stats) == DCP_OK, "stats failed");
        /* both bounds weigh every group size a plan can have, the static CP size among them */
        DCP_FUZZ_ASSERT(stats.makespan >= stats.lower_bound, "makespan %lld below the lower bound %lld",
                        (long long)stats.makespan, (long long)stats.lower_bound);
        DCP_FUZZ_ASSERT(stats.dependency_makespan >= stats.dependency_lower_bound,
                        "dependency makespan %lld below its lower bound %lld", (long long)stats.dependency_makespan,
                        (long long)stats.dependency_lower_bound);
        DCP_FUZZ_ASSERT(stats.num_microbatches == plan->num_microbatches, "stats microbatches");
        if (check_mutation) check_mutated(ctx, plan, fc);
        DCP_FUZZ_ASSERT(dcp_plan_hash(plan) == res.hash, "%s: validating the plan changed it",
                        dcp_scheduler_name(scheduler));
    }
    /* the same input again gives the same answer */
    plan_result again = plan_once(ctx, fc->lengths, fc->n, NULL);
    DCP_FUZZ_ASSERT(again.status == res.status && again.hash == res.hash, "%s not deterministic: %s then %s",
                    dcp_scheduler_name(scheduler), dcp_status_str(res.status), dcp_status_str(again.status));
    /* and the context still plans the witness exactly as before */
    plan_result witness_after = plan_once(ctx, witness_lengths, wn, NULL);
    DCP_FUZZ_ASSERT(witness_after.status == witness_before.status && witness_after.hash == witness_before.hash,
                    "%s: witness planned %s before, %s after", dcp_scheduler_name(scheduler),
                    dcp_status_str(witness_before.status), dcp_status_str(witness_after.status));
    if (scheduler == DCP_SCHEDULER_DP_BALANCED &&
        (config.max_microbatches == 0 || config.max_microbatches >= vpp_group(&config)) &&
        config.max_sequences >= wn)
        /* it ends with one sequence per pack: vpp_group microbatches */
        DCP_FUZZ_ASSERT(witness_after.status == DCP_OK, "dp_balanced cannot plan the witness: %s",
                        dcp_context_last_error(ctx));
    dcp_context_destroy(ctx);
    return res;
}

/* The status of one plan of `config` with another scheduler and max_microbatches (0 = max_sequences). */
static dcp_status plan_status(const dcp_config *config, dcp_scheduler scheduler, int32_t max_microbatches,
                              const int32_t *lengths, int32_t n)
{
    dcp_config c = *config;
    c.scheduler = scheduler;
    c.max_microbatches = max_microbatches;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&c, &ctx);
    if (st != DCP_OK) return st;
    const dcp_plan *plan = NULL;
    st = dcp_plan_compute(ctx, lengths, n, &plan);
    dcp_context_destroy(ctx);
    return st;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
/*
 * balanced under the dependency step model, beside the barrier model the
 * decoder configures: the same status; a plan that validates and that the
 * checker accepts, deterministic, whose dependency makespan is within its
 * bound and not above that of the barrier model's plan (the layouts tried
 * include the barrier model's own).
 */
static void check_dependency_model(const fuzz_case *fc, dcp_status barrier_status)
{
    dcp_config config = fc->config;
    config.scheduler = DCP_SCHEDULER_BALANCED;
    config.cost.step_model = DCP_STEP_MODEL_BARRIER;
    dcp_context *barrier = NULL, *dependency = NULL;
    if (dcp_context_create(&config, &barrier) != DCP_OK) return;
    config.cost.step_model = DCP_STEP_MODEL_DEPENDENCY;
    dcp_status created = dcp_context_create(&config, &dependency);
    DCP_FUZZ_ASSERT(created == DCP_OK, "balanced: context under the dependency model %s", dcp_status_str(created));
    const dcp_plan *bp = NULL, *dp = NULL;
    plan_result b = plan_once(barrier, fc->lengths, fc->n, &bp);
    plan_result d = plan_once(dependency, fc->lengths, fc->n, &dp);
    DCP_FUZZ_ASSERT(b.status == barrier_status, "balanced: %s, then %s", dcp_status_str(barrier_status),
                    dcp_status_str(b.status));
    DCP_FUZZ_ASSERT(d.status == b.status, "balanced: %s under the barrier model, %s under the dependency model",
                    dcp_status_str(b.status), dcp_status_str(d.status));
    if (d.status == DCP_OK) {
        dcp_plan_violation v;
        DCP_FUZZ_ASSERT(dcp_plan_validate(dependency, dp, fc->lengths, fc->n, &v) == DCP_OK,
                        "dependency-model plan rejected by the validator: %s", v.message);
        DCP_FUZZ_ASSERT(oracle_accepts(dp, &config, fc->lengths, fc->n), "dependency-model plan rejected by the checker");
        dcp_plan_stats bs, ds;
        DCP_FUZZ_ASSERT(dcp_plan_stats_compute(barrier, bp, fc->lengths, fc->n, &bs) == DCP_OK &&
                            dcp_plan_stats_compute(dependency, dp, fc->lengths, fc->n, &ds) == DCP_OK,
                        "stats failed");
        /* with PP > 1 balanced plans for the pipeline's step, whose makespan is the model's */
        if (config.pipeline_parallel_size > 1) {
            DCP_FUZZ_ASSERT(ds.model_makespan == ds.pipeline_makespan && bs.model_makespan == bs.pipeline_makespan,
                            "with PP %d the model makespan is not the pipeline one", config.pipeline_parallel_size);
            DCP_FUZZ_ASSERT(ds.pipeline_makespan >= ds.pipeline_lower_bound, "pipeline makespan %lld below its bound %lld",
                            (long long)ds.pipeline_makespan, (long long)ds.pipeline_lower_bound);
        } else {
        DCP_FUZZ_ASSERT(ds.dependency_makespan <= bs.dependency_makespan,
                        "dependency makespan %lld under the dependency model, %lld under the barrier model",
                        (long long)ds.dependency_makespan, (long long)bs.dependency_makespan);
        DCP_FUZZ_ASSERT(ds.dependency_makespan >= ds.dependency_lower_bound, "dependency makespan %lld below its bound %lld",
                        (long long)ds.dependency_makespan, (long long)ds.dependency_lower_bound);
        DCP_FUZZ_ASSERT(ds.model_makespan == ds.dependency_makespan, "model makespan is not the dependency one");
        }
        plan_result again = plan_once(dependency, fc->lengths, fc->n, NULL);
        DCP_FUZZ_ASSERT(again.status == DCP_OK && again.hash == d.hash, "dependency-model plan not deterministic");
    }
    dcp_context_destroy(barrier);
    dcp_context_destroy(dependency);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < sizeof witness_lengths / sizeof witness_lengths[0]; i++) witness_lengths[i] = 1;
    for (int s = 0; s < SCHEDULERS; s++) scheduler_built[s] = fuzz_scheduler_built((dcp_scheduler)s);
    return 0;
}

static fuzz_case the_case;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER_BYTES) return -1; /* keep the corpus to inputs with a full header */
    fuzz_case *fc = &the_case;
    decode(data, size, fc);
    const int mutate_with = (fc->mutation[0] >> 4) % SCHEDULERS;
    plan_result res[SCHEDULERS];
    for (int s = 0; s < SCHEDULERS; s++) {
        if (!scheduler_built[s]) {
            res[s].status = DCP_ERR_UNSUPPORTED;
            continue;
        }
        res[s] = run_scheduler(fc, (dcp_scheduler)s, s == mutate_with);
        DCP_FUZZ_ASSERT(res[s].status != DCP_ERR_UNSUPPORTED, "%s built, yet UNSUPPORTED for this input",
                        dcp_scheduler_name((dcp_scheduler)s));
    }
    if (scheduler_built[DCP_SCHEDULER_BALANCED] && fc->config.cost.step_model == DCP_STEP_MODEL_BARRIER)
        check_dependency_model(fc, res[DCP_SCHEDULER_BALANCED].status);
    /*
     * dynamic_cp and balanced share the rank pool and the length rules: they
     * agree on bad lengths, and balanced plans whatever dynamic_cp plans (it
     * plans more: VPP alignment may split a microbatch's only group, which
     * dynamic_cp never does).  dynamic_cp builds microbatches one by one and
     * decides infeasibility (VPP alignment) only at the end, so on an
     * infeasible input it may run out of max_microbatches first: then it is
     * asked again with room for every microbatch, and must say infeasible.
     */
    if (scheduler_built[DCP_SCHEDULER_DYNAMIC_CP] && scheduler_built[DCP_SCHEDULER_BALANCED]) {
        dcp_status d = res[DCP_SCHEDULER_DYNAMIC_CP].status, b = res[DCP_SCHEDULER_BALANCED].status;
        if (b == DCP_ERR_INFEASIBLE && d == DCP_ERR_CAPACITY && fc->config.max_microbatches != 0)
            d = plan_status(&fc->config, DCP_SCHEDULER_DYNAMIC_CP, 0, fc->lengths, fc->n);
        DCP_FUZZ_ASSERT((d == DCP_ERR_BAD_LENGTH) == (b == DCP_ERR_BAD_LENGTH) &&
                            (b != DCP_ERR_INFEASIBLE || d == DCP_ERR_INFEASIBLE),
                        "dynamic_cp says %s, balanced says %s", dcp_status_str(d), dcp_status_str(b));
    }
    return 0;
}
