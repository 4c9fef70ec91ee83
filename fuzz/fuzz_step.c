/*
 * fuzz_step.c - untrusted input into dcp_step(): arbitrary samples (pre-packed
 * cu_seqlens or single sequences), buffer sizes, lengths, missing buffers and
 * field sets, with arbitrary THD padding, on a one-rank world.
 *
 * Every buffer is a heap block of exactly the size the sample declares, so
 * AddressSanitizer reports any read past it.  Properties:
 *  - DCP_OK only for well-formed input (cu_seqlens from 0, non-decreasing,
 *    within the buffer; a single sequence's padded length equal to its buffer
 *    and its original length within it), and then every real token of every
 *    sequence comes back, in every field, at its place in the packed
 *    microbatch given by cu_seqlens_padded, with padding slots zero and
 *    marked in the padding mask, and the FLOPs sums exact;
 *  - otherwise a documented error with a message;
 *  - either way, the context then runs a good step.
 *
 * Input layout:
 *   [0] bit 0 dynamic_cp, bit 1 pad to M, bit 2 extend_last, bits 4-7: pad alignment (0 or 2^(v-1))
 *   [1] bits 0-3 sequences per microbatch cap, bits 4-7 the input's field set
 *   [2..3] M-1   [4..5] max_tokens_per_rank   [6] max_sequences-1
 *   then per sample: [flags: bit 0 pre-packed, bit 1 tokens buffer missing] [num_tokens i16]
 *   [padded i16] [original i16] [entries u8], then entries x cu_seqlens (i16)
 */
#include "fuzz_common.h"

#include <stdlib.h>

#define MAX_SAMPLES 16
#define MAX_SEQS 512

typedef struct sample_data {
    int64_t *tokens, *labels, *position_ids;
    float *loss_mask;
    int32_t *cu;
} sample_data;

static dcp_sample samples[MAX_SAMPLES];
static sample_data buffers[MAX_SAMPLES];

/* The oracle's view of the gathered batch: sequence -> (sample, start, padded, original). */
static int32_t seq_sample[MAX_SEQS * MAX_SAMPLES], seq_padded[MAX_SEQS * MAX_SAMPLES],
    seq_original[MAX_SEQS * MAX_SAMPLES];
static int64_t seq_start[MAX_SEQS * MAX_SAMPLES];

static int64_t token_value(int32_t sample, int64_t i) { return ((int64_t)(sample + 1) << 24) + i + 1; }

static void fill(int32_t i, int64_t n)
{
    sample_data *b = &buffers[i];
    size_t count = n > 0 ? (size_t)n : 0;
    b->tokens = malloc(count * sizeof(int64_t) + 1);
    b->labels = malloc(count * sizeof(int64_t) + 1);
    b->position_ids = malloc(count * sizeof(int64_t) + 1);
    b->loss_mask = malloc(count * sizeof(float) + 1);
    DCP_FUZZ_ASSERT(b->tokens && b->labels && b->position_ids && b->loss_mask, "malloc");
    for (size_t t = 0; t < count; t++) {
        b->tokens[t] = token_value(i, (int64_t)t);
        b->labels[t] = -token_value(i, (int64_t)t);
        b->position_ids[t] = (int64_t)t * 3 + 1;
        b->loss_mask[t] = (float)(t % 7 + 1);
    }
}

static void release(int32_t count)
{
    for (int32_t i = 0; i < count; i++) {
        free(buffers[i].tokens);
        free(buffers[i].labels);
        free(buffers[i].position_ids);
        free(buffers[i].loss_mask);
        free(buffers[i].cu);
        memset(&buffers[i], 0, sizeof buffers[i]);
    }
}

static dcp_status run_step(dcp_context *ctx, const dcp_step_input *input, const dcp_step_output **out)
{
    dcp_comm world, lane;
    fuzz_solo_comm(&world);
    fuzz_solo_comm(&lane);
    dcp_step_args args;
    memset(&args, 0, sizeof args);
    args.world = &world;
    args.data_context_parallel = &lane;
    return dcp_step(ctx, &args, input, out);
}

/* Every real token of every sequence, in every field, where cu_seqlens says. */
static void check_output(const dcp_step_output *out, int32_t num_seqs)
{
    const dcp_plan *plan = out->plan;
    DCP_FUZZ_ASSERT(plan != NULL && out->num_virtual_stages == 1 && out->num_sequences == num_seqs,
                    "output shape: plan %p, %d stages, %d sequences of %d", (const void *)plan,
                    out->num_virtual_stages, out->num_sequences, num_seqs);
    DCP_FUZZ_ASSERT(out->num_microbatches == plan->num_microbatches, "microbatch count");
    int64_t sum = 0, squares = 0;
    for (int32_t s = 0; s < num_seqs; s++) {
        sum += seq_padded[s];
        squares += (int64_t)seq_padded[s] * seq_padded[s];
    }
    DCP_FUZZ_ASSERT(out->seqlen_sum == sum && out->seqlen_squared_sum == squares, "FLOPs sums %lld %lld",
                    (long long)out->seqlen_sum, (long long)out->seqlen_squared_sum);
    int64_t real_total = 0;
    for (int32_t m = 0; m < out->num_microbatches; m++) {
        const dcp_microbatch *mb = &out->microbatches[m];
        const int32_t g = plan->microbatch_first_group[m];
        const int32_t first = plan->group_first_id[g], count = plan->group_first_id[g + 1] - first;
        DCP_FUZZ_ASSERT(mb->num_sequences == count && mb->num_cu_seqlens >= count + 1 && mb->local_cp_size == 1 &&
                            mb->cp_rank == 0,
                        "microbatch %d: %d sequences (plan %d), %d cu_seqlens", m, mb->num_sequences, count,
                        mb->num_cu_seqlens);
        DCP_FUZZ_ASSERT(mb->tokens && mb->labels && mb->loss_mask && mb->position_ids && mb->padding_mask,
                        "microbatch %d lacks a field", m);
        uint8_t *real = calloc((size_t)mb->num_tokens + 1, 1);
        DCP_FUZZ_ASSERT(real != NULL, "calloc");
        for (int32_t k = 0; k < count; k++) {
            const int32_t id = plan->ids[first + k];
            const int32_t start = mb->cu_seqlens_padded[k];
            const int32_t original = mb->cu_seqlens[k + 1] - mb->cu_seqlens[k];
            DCP_FUZZ_ASSERT(id >= 0 && id < num_seqs && original == seq_original[id],
                            "microbatch %d sequence %d (id %d): %d real tokens, expected %d", m, k, id, original,
                            id >= 0 && id < num_seqs ? seq_original[id] : -1);
            DCP_FUZZ_ASSERT(start >= 0 && (int64_t)start + original <= mb->num_tokens &&
                                mb->cu_seqlens_padded[k + 1] - start >= seq_padded[id],
                            "microbatch %d sequence %d: span [%d,%d) for %d padded tokens in %lld slots", m, k, start,
                            mb->cu_seqlens_padded[k + 1], seq_padded[id], (long long)mb->num_tokens);
            const sample_data *b = &buffers[seq_sample[id]];
            for (int32_t j = 0; j < original; j++) {
                int64_t src = seq_start[id] + j, dst = (int64_t)start + j;
                DCP_FUZZ_ASSERT(mb->tokens[dst] == b->tokens[src] && mb->labels[dst] == b->labels[src] &&
                                    mb->position_ids[dst] == b->position_ids[src] &&
                                    mb->loss_mask[dst] == b->loss_mask[src] && mb->padding_mask[dst] == 0,
                                "microbatch %d sequence %d token %d: got %lld, expected %lld", m, k, j,
                                (long long)mb->tokens[dst], (long long)b->tokens[src]);
                real[dst] = 1;
            }
            real_total += original;
        }
        for (int64_t t = 0; t < mb->num_tokens; t++)
            if (!real[t])
                DCP_FUZZ_ASSERT(mb->tokens[t] == 0 && mb->labels[t] == 0 && mb->position_ids[t] == 0 &&
                                    mb->loss_mask[t] == 0.0f && mb->padding_mask[t] == 1,
                                "microbatch %d padding slot %lld not zero or not masked", m, (long long)t);
        free(real);
    }
    int64_t expected = 0;
    for (int32_t s = 0; s < num_seqs; s++) expected += seq_original[s];
    DCP_FUZZ_ASSERT(real_total == expected, "%lld real tokens delivered of %lld", (long long)real_total,
                    (long long)expected);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r;
    fuzz_reader_init(&r, data, size);
    const uint8_t b0 = fuzz_u8(&r), b1 = fuzz_u8(&r);
    dcp_config c;
    dcp_config_default(&c);
    c.scheduler = (b0 & 1) ? DCP_SCHEDULER_DYNAMIC_CP : DCP_SCHEDULER_DP_BALANCED;
    c.pad_to_max_seqlen = (b0 >> 1) & 1;
    c.thd_tail_policy = (b0 & 4) ? DCP_THD_TAIL_EXTEND_LAST : DCP_THD_TAIL_APPEND_DUMMY;
    c.pad_alignment = (b0 >> 4) ? 1 << ((b0 >> 4) - 1) : 0;
    c.max_sequences_per_microbatch = b1 & 15;
    const uint32_t fields = b1 >> 4;
    c.max_seqlen_per_rank = 1 + fuzz_u16(&r);
    c.max_tokens_per_rank = fuzz_u16(&r);
    c.max_sequences = 1 + fuzz_u8(&r);

    /* the samples, and what a well-formed reading of them gives */
    int32_t num_samples = 0, num_seqs = 0;
    int well_formed = 1;
    while (fuzz_remaining(&r) >= 8 && num_samples < MAX_SAMPLES) {
        const int32_t i = num_samples++;
        const uint8_t flags = fuzz_u8(&r);
        dcp_sample *s = &samples[i];
        memset(s, 0, sizeof *s);
        s->num_tokens = (int16_t)fuzz_u16(&r);
        s->padded_length = (int16_t)fuzz_u16(&r);
        s->original_length = (int16_t)fuzz_u16(&r);
        const int32_t entries = fuzz_u8(&r);
        fill(i, s->num_tokens);
        s->tokens = (flags & 2) ? NULL : buffers[i].tokens;
        s->labels = buffers[i].labels;
        s->position_ids = buffers[i].position_ids;
        s->loss_mask = buffers[i].loss_mask;
        if (s->num_tokens < 0) well_formed = 0;
        if ((flags & 2) && (fields & DCP_FIELD_TOKENS) && s->num_tokens > 0) well_formed = 0;
        if (flags & 1) {
            buffers[i].cu = malloc((size_t)entries * sizeof(int32_t) + 1);
            DCP_FUZZ_ASSERT(buffers[i].cu != NULL, "malloc");
            for (int32_t j = 0; j < entries; j++) buffers[i].cu[j] = (int16_t)fuzz_u16(&r);
            s->cu_seqlens = buffers[i].cu;
            s->num_cu_seqlens = entries;
            if (entries < 1 || buffers[i].cu[0] != 0) well_formed = 0;
            for (int32_t j = 1; j < entries && well_formed; j++) {
                int32_t a = buffers[i].cu[j - 1], b = buffers[i].cu[j];
                if (b < a || b > s->num_tokens) well_formed = 0;
                else if (b > a && num_seqs < MAX_SEQS * MAX_SAMPLES) {
                    seq_sample[num_seqs] = i;
                    seq_start[num_seqs] = a;
                    seq_padded[num_seqs] = seq_original[num_seqs] = b - a;
                    num_seqs++;
                }
            }
        } else {
            if (s->padded_length != s->num_tokens || s->original_length < 0 ||
                s->original_length > s->padded_length)
                well_formed = 0;
            else if (s->padded_length > 0) {
                seq_sample[num_seqs] = i;
                seq_start[num_seqs] = 0;
                seq_padded[num_seqs] = s->padded_length;
                seq_original[num_seqs] = s->original_length;
                num_seqs++;
            }
        }
    }
    dcp_step_input input = {samples, num_samples, fields};

    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&c, &ctx);
    if (st != DCP_OK) {
        DCP_FUZZ_ASSERT(st == DCP_ERR_INVALID_CONFIG || st == DCP_ERR_OVERFLOW, "context: %s", dcp_status_str(st));
        release(num_samples);
        return 0;
    }
    const dcp_step_output *out = NULL;
    st = run_step(ctx, &input, &out);
    if (getenv("DCP_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_step: %d samples, %d sequences: %s %s\n", num_samples, num_seqs, dcp_status_str(st),
                dcp_context_last_error(ctx));
    if (st == DCP_OK) {
        DCP_FUZZ_ASSERT(well_formed, "malformed input accepted");
        DCP_FUZZ_ASSERT(out != NULL, "DCP_OK without output");
        check_output(out, num_seqs);
    } else {
        DCP_FUZZ_ASSERT(st == DCP_ERR_NULL_POINTER || st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_CORRUPT_INPUT ||
                            st == DCP_ERR_FIELD_MISMATCH || st == DCP_ERR_CAPACITY || st == DCP_ERR_BAD_LENGTH ||
                            st == DCP_ERR_INFEASIBLE,
                        "step returned %s: %s", dcp_status_str(st), dcp_context_last_error(ctx));
        DCP_FUZZ_ASSERT(dcp_context_last_error(ctx)[0] != '\0', "%s without a message", dcp_status_str(st));
        DCP_FUZZ_ASSERT(out == NULL, "output written on failure");
    }
    release(num_samples);

    /* the context then runs a good step exactly as a fresh context does: two sequences of 2 tokens */
    for (int32_t i = 0; i < 2; i++) {
        fill(i, 2);
        samples[i] = (dcp_sample){buffers[i].tokens, buffers[i].labels, buffers[i].loss_mask, buffers[i].position_ids,
                                  2, NULL, 0, 2, 2};
        seq_sample[i] = i;
        seq_start[i] = 0;
        seq_padded[i] = seq_original[i] = 2;
    }
    dcp_step_input good = {samples, 2, DCP_FIELD_ALL};
    dcp_context *fresh = NULL;
    DCP_FUZZ_ASSERT(dcp_context_create(&c, &fresh) == DCP_OK, "fresh context");
    const dcp_step_output *fresh_out = NULL;
    dcp_status want = run_step(fresh, &good, &fresh_out);
    out = NULL;
    st = run_step(ctx, &good, &out);
    DCP_FUZZ_ASSERT(st == want, "good step after a fuzzed one: %s (%s), on a fresh context %s", dcp_status_str(st),
                    dcp_context_last_error(ctx), dcp_status_str(want));
    if (st == DCP_OK) {
        check_output(out, 2);
        check_output(fresh_out, 2);
    }
    release(2);
    dcp_context_destroy(fresh);
    dcp_context_destroy(ctx);
    return 0;
}
