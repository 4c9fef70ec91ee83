/*
 * fuzz_calls.c - ranks that skip, repeat or fail alone in dcp_step calls never
 * get a mixed batch.
 *
 * 2 to 4 ranks (threads over one in-process world, DP x CP with CP 1 or 2)
 * make up to 6 logical steps.  In each step each rank does one of: the step;
 * the step after a call that fails on this rank alone (NULL args); nothing
 * (it skips the step); the step twice (it repeats it).  Its input in logical
 * step k is a function of its DP rank and k, the same on CP siblings.
 *
 * Property: every call that returns DCP_OK returns exactly what this rank
 * gets in logical step k when every rank makes step k once on a fresh world
 * (k being the step the rank passed data of).  Ranks that met in different
 * steps must fail instead.  With step ids (the caller numbers its steps, as a
 * trainer should) any skip or repeat is caught; without them only calls that
 * fail alone are (a pure skip or repeat then keeps the call counts equal), so
 * those inputs only plant lone failures.  Nothing hangs: a rank whose peer
 * never comes waits out the world's 300 ms timeout.
 *
 * Input layout: [0] ranks - 2 (mod 3) | cp 2 << 2 | step ids << 3, [1] steps - 1 (mod 6),
 *   then a byte per (step, rank): action (mod 4), then lengths (mod 16, + 1) as needed.
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_RANKS 4
#define MAX_STEPS 6
#define MAX_CALLS (2 * MAX_STEPS + 1)
#define MAX_TOKENS 64

enum action { NORMAL, LONE_FAILURE, SKIP, REPEAT, NUM_ACTIONS };

typedef struct run {
    dcp_inproc_world *world;
    int32_t ranks, cp, steps;
    int step_ids;
    enum action action[MAX_STEPS][MAX_RANKS];
    int32_t length[MAX_STEPS][MAX_RANKS]; /* by DP rank */
    /* per rank and call: the logical step it passed, its status and the tokens it got */
    int32_t calls[MAX_RANKS];
    int32_t step_of[MAX_RANKS][MAX_CALLS];
    dcp_status status[MAX_RANKS][MAX_CALLS];
    int32_t count[MAX_RANKS][MAX_CALLS];
    int64_t tokens[MAX_RANKS][MAX_CALLS][MAX_TOKENS];
    /* fresh runs: what each rank gets in each logical step */
    int32_t fresh_count[MAX_STEPS][MAX_RANKS];
    int64_t fresh_tokens[MAX_STEPS][MAX_RANKS][MAX_TOKENS];
    int fresh; /* 1: this run is the oracle's, for logical step `fresh_step` */
    int32_t fresh_step;
} run;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dcp_config config_of(const run *w)
{
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = DCP_SCHEDULER_DYNAMIC_CP;
    c.data_parallel_size = w->ranks / w->cp;
    c.context_parallel_size = w->cp;
    c.max_sequences = 8;
    c.max_seqlen_per_rank = 32;
    c.max_tokens_per_rank = MAX_TOKENS;
    return c;
}

/* One call of step k on rank r: returns its status and keeps the tokens it got. */
static dcp_status call_step(run *w, dcp_context *ctx, dcp_comm *world, int32_t r, int32_t k, int null_args,
                            int32_t *count, int64_t *tokens)
{
    /* a multiple of 2 x every group size dynamic CP may choose, so zigzag always cuts it */
    const int32_t dp_rank = r / w->cp, n = w->length[k][dp_rank] * 2 * MAX_RANKS;
    int64_t tok[MAX_TOKENS], lab[MAX_TOKENS], pos[MAX_TOKENS];
    float mask[MAX_TOKENS];
    for (int32_t i = 0; i < n; i++) {
        tok[i] = 100000 * (k + 1) + 1000 * dp_rank + i;
        lab[i] = tok[i] + 7;
        pos[i] = i;
        mask[i] = 1.0f;
    }
    dcp_sample s = {tok, lab, mask, pos, n, NULL, 0, n, n};
    dcp_step_input in = {&s, 1, DCP_FIELD_ALL};
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = world;
    args.data_context_parallel = world;
    args.step_id = w->step_ids ? (uint64_t)k + 1 : 0;
    const dcp_step_output *out = NULL;
    dcp_status st = dcp_step(ctx, null_args ? NULL : &args, &in, &out);
    *count = 0;
    if (st == DCP_OK)
        for (int32_t m = 0; m < out->num_microbatches; m++)
            for (int64_t i = 0; i < out->microbatches[m].num_tokens && *count < MAX_TOKENS; i++)
                tokens[(*count)++] = out->microbatches[m].tokens[i];
    return st;
}

static void rank_main(int32_t r, void *arg)
{
    run *w = arg;
    dcp_config c = config_of(w);
    dcp_context *ctx = NULL;
    DCP_FUZZ_ASSERT(dcp_context_create(&c, &ctx) == DCP_OK, "context");
    dcp_comm world;
    dcp_inproc_comm(w->world, r, &world);
    if (w->fresh) {
        int32_t k = w->fresh_step;
        dcp_status st = call_step(w, ctx, &world, r, k, 0, &w->fresh_count[k][r], w->fresh_tokens[k][r]);
        DCP_FUZZ_ASSERT(st == DCP_OK, "fresh step %d on rank %d: %s: %s", k, r, dcp_status_str(st),
                        dcp_context_last_error(ctx));
        dcp_context_destroy(ctx);
        return;
    }
    for (int32_t k = 0; k < w->steps; k++) {
        enum action a = w->action[k][r];
        int times = a == SKIP ? 0 : a == REPEAT ? 2 : 1;
        if (a == LONE_FAILURE) {
            int32_t i = w->calls[r]++;
            w->step_of[r][i] = k;
            w->status[r][i] = call_step(w, ctx, &world, r, k, 1, &w->count[r][i], w->tokens[r][i]);
            DCP_FUZZ_ASSERT(w->status[r][i] != DCP_OK, "a call without arguments succeeded");
        }
        for (int t = 0; t < times; t++) {
            int32_t i = w->calls[r]++;
            w->step_of[r][i] = k;
            w->status[r][i] = call_step(w, ctx, &world, r, k, 0, &w->count[r][i], w->tokens[r][i]);
        }
    }
    dcp_context_destroy(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader rd;
    fuzz_reader_init(&rd, data, size);
    static run w;
    memset(&w, 0, sizeof w);
    const uint8_t head = fuzz_u8(&rd);
    w.ranks = 2 + head % 3;
    w.cp = (head >> 2) & 1 && w.ranks % 2 == 0 ? 2 : 1;
    w.step_ids = (head >> 3) & 1;
    w.steps = 1 + fuzz_u8(&rd) % MAX_STEPS;
    for (int32_t k = 0; k < w.steps; k++)
        for (int32_t r = 0; r < w.ranks; r++) {
            enum action a = (enum action)(fuzz_u8(&rd) % NUM_ACTIONS);
            /* without step ids a pure skip or repeat is the caller's to number: plant lone failures only */
            if (!w.step_ids && (a == SKIP || a == REPEAT)) a = LONE_FAILURE;
            w.action[k][r] = a;
        }
    /* CP siblings make the same calls with the same data, or the step refuses them (not a property here) */
    for (int32_t k = 0; k < w.steps; k++)
        for (int32_t r = 0; r < w.ranks; r++) w.action[k][r] = w.action[k][r - r % w.cp];
    for (int32_t k = 0; k < w.steps; k++)
        for (int32_t p = 0; p < w.ranks / w.cp; p++) w.length[k][p] = 1 + fuzz_u8(&rd) % 4;

    /* the oracle: every logical step made once by every rank on a fresh world */
    for (int32_t k = 0; k < w.steps; k++) {
        w.fresh = 1;
        w.fresh_step = k;
        DCP_FUZZ_ASSERT(dcp_inproc_world_create(w.ranks, 10000, &w.world) == DCP_OK, "world");
        DCP_FUZZ_ASSERT(dcp_inproc_run(w.ranks, rank_main, &w) == DCP_OK, "run");
        dcp_inproc_world_destroy(w.world);
    }
    w.fresh = 0;
    DCP_FUZZ_ASSERT(dcp_inproc_world_create(w.ranks, 300, &w.world) == DCP_OK, "world");
    DCP_FUZZ_ASSERT(dcp_inproc_run(w.ranks, rank_main, &w) == DCP_OK, "run");
    dcp_inproc_world_destroy(w.world);

    for (int32_t r = 0; r < w.ranks; r++)
        for (int32_t i = 0; i < w.calls[r]; i++) {
            if (w.status[r][i] != DCP_OK) continue;
            int32_t k = w.step_of[r][i];
            DCP_FUZZ_ASSERT(w.count[r][i] == w.fresh_count[k][r] &&
                                !memcmp(w.tokens[r][i], w.fresh_tokens[k][r], sizeof(int64_t) * (size_t)w.count[r][i]),
                            "rank %d call %d (step %d) returned DCP_OK with other tokens than step %d gives it", r, i,
                            k, k);
        }
    return 0;
}
