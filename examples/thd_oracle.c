/*
 * thd_oracle.c - one rank's expected step output, slot by slot (see thd_oracle.h).
 */
#include "thd_oracle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t oracle_token(int64_t source, int32_t step, int64_t j) { return (source + 1) * 1000003 + (int64_t)step * 7919 + j * 7 + 1; }
int64_t oracle_label(int64_t source, int32_t step, int64_t j) { return oracle_token(source, step, j + 1); }
float oracle_loss_mask(int64_t source, int64_t j) { return 0.25f * (float)(1 + (source + j) % 4); }
int64_t oracle_position(int64_t j) { return j; }
int64_t oracle_garbage_token(int64_t source) { return -(source + 1); }

static void say(char *message, size_t size, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void say(char *message, size_t size, const char *format, ...)
{
    if (!message || !size || message[0]) return; /* keep the first */
    va_list args;
    va_start(args, format);
    vsnprintf(message, size, format, args);
    va_end(args);
}

static int is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* The group DPxCP rank `rank` belongs to in microbatch m, or -1. */
static int32_t group_of(const dcp_plan *p, int32_t m, int32_t rank)
{
    for (int32_t g = p->microbatch_first_group[m]; g < p->microbatch_first_group[m + 1]; g++)
        if (rank >= p->group_first_rank[g] && rank < p->group_first_rank[g] + p->group_cp_size[g]) return g;
    return -1;
}

int oracle_check_plan(const oracle_config *c, const dcp_plan *p, const int32_t *padded, int32_t n, char *msg,
                      size_t msz)
{
    if (msg && msz) msg[0] = '\0';
    const int32_t N = c->num_ranks;
    if (!p) return say(msg, msz, "no plan"), 1;
    if (p->num_ranks != N || p->num_microbatches < 1 || p->num_ids != n) {
        say(msg, msz, "plan over %d ranks with %d microbatches and %d ids, expected %d ranks and %d ids", p->num_ranks,
            p->num_microbatches, p->num_ids, N, n);
        return 1;
    }
    if (p->microbatch_first_group[0] != 0 || p->microbatch_first_group[p->num_microbatches] != p->num_groups ||
        p->group_first_id[0] != 0 || p->group_first_id[p->num_groups] != p->num_ids) {
        say(msg, msz, "plan tables do not start at 0 or end at their counts");
        return 1;
    }
    if (c->vpp_group > 1 && p->num_microbatches % c->vpp_group != 0) {
        say(msg, msz, "%d microbatches, not a multiple of the VPP group %d", p->num_microbatches, c->vpp_group);
        return 1;
    }
    unsigned char *seen = calloc((size_t)n + 1, 1), *held = calloc((size_t)N + 1, 1);
    int bad = !seen || !held;
    for (int32_t m = 0; !bad && m < p->num_microbatches; m++) {
        memset(held, 0, (size_t)N);
        const int32_t g0 = p->microbatch_first_group[m], g1 = p->microbatch_first_group[m + 1];
        if (g1 < g0) bad = 1, say(msg, msz, "microbatch %d: group offsets go backwards", m);
        for (int32_t g = g0; !bad && g < g1; g++) {
            const int32_t first = p->group_first_rank[g], size = p->group_cp_size[g];
            const int shape = c->static_cp > 0 ? size == c->static_cp && first % size == 0
                                               : (is_power_of_two(size) && first % size == 0) || (size == N && first == 0);
            if (!shape || first < 0 || first + size > N) {
                bad = 1, say(msg, msz, "microbatch %d: group of %d ranks at rank %d is not a valid block", m, size, first);
                break;
            }
            for (int32_t r = first; r < first + size; r++) {
                if (held[r]) bad = 1, say(msg, msz, "microbatch %d: rank %d in two groups", m, r);
                held[r] = 1;
            }
            const int32_t i0 = p->group_first_id[g], i1 = p->group_first_id[g + 1];
            if (i1 <= i0) bad = 1, say(msg, msz, "microbatch %d: group at rank %d holds no sequence", m, first);
            int64_t tokens = 0;
            for (int32_t i = i0; !bad && i < i1; i++) {
                const int32_t id = p->ids[i];
                if (id < 0 || id >= n || seen[id]) {
                    bad = 1, say(msg, msz, "id %d out of range or planned twice", id);
                    break;
                }
                seen[id] = 1;
                tokens += padded[id];
            }
            if (!bad && tokens > (int64_t)c->max_seqlen_per_rank * size)
                bad = 1, say(msg, msz, "microbatch %d: %lld tokens on %d ranks exceed %d per rank", m, (long long)tokens,
                             size, c->max_seqlen_per_rank);
        }
        for (int32_t r = 0; !bad && r < N; r++)
            if (!held[r]) bad = 1, say(msg, msz, "microbatch %d: rank %d holds nothing", m, r);
    }
    for (int32_t id = 0; !bad && id < n; id++)
        if (!seen[id]) bad = 1, say(msg, msz, "id %d is in no microbatch", id);
    free(seen), free(held);
    return bad;
}

/* Where one rank sits in one microbatch, and the shape of what it holds. */
typedef struct geometry {
    int32_t cp, cp_rank, num_ids;
    const int32_t *ids;
    int64_t local;  /* its CP slice: the packed spans / cp */
    int64_t target; /* its slots: the slice padded at the tail */
    int64_t dummy;  /* the padding over the whole group: one more sequence in cu_seqlens when > 0 */
    int32_t max_seqlen;
} geometry;

static int geometry_of(const oracle_config *c, const dcp_plan *p, const int32_t *padded, int32_t m, int32_t rank,
                       geometry *o)
{
    memset(o, 0, sizeof *o);
    const int32_t g = group_of(p, m, rank);
    if (g < 0) return 0;
    o->cp = p->group_cp_size[g];
    o->cp_rank = rank - p->group_first_rank[g];
    o->ids = p->ids + p->group_first_id[g];
    o->num_ids = p->group_first_id[g + 1] - p->group_first_id[g];
    int64_t packed = 0;
    for (int32_t k = 0; k < o->num_ids; k++) {
        packed += padded[o->ids[k]];
        if (padded[o->ids[k]] > o->max_seqlen) o->max_seqlen = padded[o->ids[k]];
    }
    o->local = packed / o->cp;
    const int64_t a = c->pad_alignment;
    o->target = a > 0 ? (o->local + a - 1) / a * a : o->local;
    o->dummy = (o->target - o->local) * o->cp;
    if (o->dummy > o->max_seqlen) o->max_seqlen = (int32_t)o->dummy;
    return 1;
}

int64_t oracle_rank_slots(const oracle_config *c, const dcp_plan *p, const int32_t *padded, int32_t m, int32_t rank)
{
    geometry geo;
    return geometry_of(c, p, padded, m, rank, &geo) ? geo.target : -1;
}

/* Compare one array slot; counts each array once per microbatch view. */
typedef struct tally {
    int tokens, labels, loss_mask, positions, mask;
} tally;

int64_t oracle_compare(const oracle_config *c, const dcp_plan *p, const oracle_batch *b, int32_t rank,
                       int32_t pipeline_rank, uint32_t mtp, const dcp_step_output *out, char *msg, size_t msz)
{
    if (msg && msz) msg[0] = '\0';
    const int32_t vpp = c->virtual_pipeline_size, mbs = p->num_microbatches;
    int64_t bad = 0;
    if (out->num_microbatches != mbs || out->num_virtual_stages != vpp) {
        say(msg, msz, "%d microbatches x %d virtual stages, expected %d x %d", out->num_microbatches,
            out->num_virtual_stages, mbs, vpp);
        return 1;
    }
    int64_t sum = 0, squared = 0;
    for (int32_t i = 0; i < b->num_sequences; i++) sum += b->padded[i], squared += (int64_t)b->padded[i] * b->padded[i];
    if (out->num_sequences != b->num_sequences || out->seqlen_sum != sum || out->seqlen_squared_sum != squared) {
        say(msg, msz, "batch scalars: %d sequences, sum %lld, squared sum %lld; expected %d, %lld, %lld",
            out->num_sequences, (long long)out->seqlen_sum, (long long)out->seqlen_squared_sum, b->num_sequences,
            (long long)sum, (long long)squared);
        bad++;
    }
    for (int32_t m = 0; m < mbs; m++) {
        geometry geo;
        if (!geometry_of(c, p, b->padded, m, rank, &geo)) {
            say(msg, msz, "microbatch %d: rank %d holds nothing in the plan", m, rank);
            return bad + 1;
        }
        const int32_t entries = geo.num_ids + 1 + (geo.dummy > 0);
        for (int32_t v = 0; v < vpp; v++) {
            const dcp_microbatch *got = &out->microbatches[(size_t)v * (size_t)mbs + (size_t)m];
            const int first = pipeline_rank == 0 && v == 0;
            const int last = pipeline_rank == c->pipeline_parallel_size - 1 && v == vpp - 1;
            const int with_mtp = (int)((mtp >> v) & 1u);
            const int inputs = first || with_mtp, targets = last || with_mtp;
            if (got->num_tokens != geo.target || got->num_cu_seqlens != entries || got->max_seqlen != geo.max_seqlen ||
                got->local_cp_size != geo.cp || got->cp_rank != geo.cp_rank || got->num_sequences != geo.num_ids) {
                say(msg, msz,
                    "microbatch %d, virtual stage %d: %lld slots, %d cu entries, max %d, cp %d, cp rank %d, %d sequences;"
                    " expected %lld, %d, %d, %d, %d, %d",
                    m, v, (long long)got->num_tokens, got->num_cu_seqlens, got->max_seqlen, got->local_cp_size,
                    got->cp_rank, got->num_sequences, (long long)geo.target, entries, geo.max_seqlen, geo.cp,
                    geo.cp_rank, geo.num_ids);
                bad++;
                continue;
            }
            /* cu_seqlens: real tokens; cu_seqlens_padded: padded spans; the dummy closes both */
            int cu_bad = 0;
            int32_t cu = 0, cup = 0;
            for (int32_t i = 0; i < entries; i++) {
                if (i > 0 && i <= geo.num_ids) cu += b->original[geo.ids[i - 1]], cup += b->padded[geo.ids[i - 1]];
                if (i > geo.num_ids) cu += (int32_t)geo.dummy, cup += (int32_t)geo.dummy;
                const int32_t *arrays[4] = {got->cu_seqlens, got->cu_seqlens_host, got->cu_seqlens_padded,
                                            got->cu_seqlens_padded_host};
                for (int a = 0; a < 4; a++)
                    if (!arrays[a] || arrays[a][i] != (a < 2 ? cu : cup)) {
                        if (!cu_bad)
                            say(msg, msz, "microbatch %d, virtual stage %d: cu_seqlens%s%s[%d] = %d, expected %d", m, v,
                                a < 2 ? "" : "_padded", a % 2 ? "_host" : "", i, arrays[a] ? arrays[a][i] : -1,
                                a < 2 ? cu : cup);
                        cu_bad = 1;
                    }
            }
            bad += cu_bad;
            /* which fields this virtual stage gets */
            tally t = {0, 0, 0, 0, 0};
            if ((got->tokens != NULL) != inputs) t.tokens = 1;
            if ((got->position_ids != NULL) != inputs) t.positions = 1;
            if ((got->labels != NULL) != targets) t.labels = 1;
            if ((got->loss_mask != NULL) != targets) t.loss_mask = 1;
            if (t.tokens || t.positions || t.labels || t.loss_mask)
                say(msg, msz, "microbatch %d, virtual stage %d (PP stage %d): fields present %d%d%d%d, expected %d%d%d%d",
                    m, v, pipeline_rank, got->tokens != NULL, got->labels != NULL, got->loss_mask != NULL,
                    got->position_ids != NULL, inputs, targets, targets, inputs);
            if (!got->padding_mask) t.mask = 1, say(msg, msz, "microbatch %d: no padding_mask", m);
            /* every slot: this rank's chunks of every sequence, in order, then the tail */
            int64_t x = 0;
            for (int32_t k = 0; k < geo.num_ids; k++) {
                const int32_t id = geo.ids[k];
                const int64_t span = b->padded[id], real = b->original[id], src = b->source[id];
                int64_t from[2] = {0, 0}, count[2] = {span, 0};
                if (geo.cp > 1) {
                    const int64_t chunk = span / (2 * geo.cp);
                    from[0] = geo.cp_rank * chunk, count[0] = chunk;
                    from[1] = (2 * geo.cp - 1 - geo.cp_rank) * chunk, count[1] = chunk;
                }
                for (int part = 0; part < 2; part++)
                    for (int64_t j = from[part]; j < from[part] + count[part]; j++, x++) {
                        const int is_real = j < real;
                        if (got->padding_mask && !t.mask && got->padding_mask[x] != !is_real) t.mask = 1;
                        if (got->tokens && inputs && !t.tokens &&
                            got->tokens[x] != (is_real ? oracle_token(src, b->step, j) : 0))
                            t.tokens = 1;
                        if (got->position_ids && inputs && !t.positions &&
                            got->position_ids[x] != (is_real ? oracle_position(j) : 0))
                            t.positions = 1;
                        if (got->labels && targets && !t.labels &&
                            got->labels[x] != (is_real ? oracle_label(src, b->step, j) : 0))
                            t.labels = 1;
                        if (got->loss_mask && targets && !t.loss_mask &&
                            got->loss_mask[x] != (is_real ? oracle_loss_mask(src, j) : 0.0f))
                            t.loss_mask = 1;
                        if (t.mask + t.tokens + t.positions + t.labels + t.loss_mask && !(msg && msg[0]))
                            say(msg, msz,
                                "microbatch %d, virtual stage %d: slot %lld (sequence %d, position %lld) differs in%s%s%s%s%s",
                                m, v, (long long)x, id, (long long)j, t.tokens ? " tokens" : "",
                                t.labels ? " labels" : "", t.loss_mask ? " loss_mask" : "",
                                t.positions ? " position_ids" : "", t.mask ? " padding_mask" : "");
                    }
            }
            for (; x < geo.target; x++) {
                if (got->padding_mask && !t.mask && got->padding_mask[x] != 1) t.mask = 1;
                if (got->tokens && inputs && got->tokens[x] != 0) t.tokens = 1;
                if (got->position_ids && inputs && got->position_ids[x] != 0) t.positions = 1;
                if (got->labels && targets && got->labels[x] != 0) t.labels = 1;
                if (got->loss_mask && targets && got->loss_mask[x] != 0.0f) t.loss_mask = 1;
                if (t.mask + t.tokens + t.positions + t.labels + t.loss_mask && !(msg && msg[0]))
                    say(msg, msz, "microbatch %d, virtual stage %d: tail slot %lld is not padding", m, v, (long long)x);
            }
            bad += t.tokens + t.labels + t.loss_mask + t.positions + t.mask;
        }
    }
    return bad;
}
