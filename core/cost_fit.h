/*
 * cost_fit.h - refitting a cost model from observed microbatch times (dcpack.h,
 * "Online calibration").  Internal.
 *
 * An observation row is one CP group of one microbatch: its features (the sums
 * the cost model's terms multiply) and the time its ranks took.  The rows live
 * in a ring of fixed capacity placed at context creation; a refit is a pure
 * function of the prior model and the rows, evaluated in double precision in
 * one fixed order (this file is compiled with -ffp-contract=off, uses only
 * + - * / sqrt floor, all correctly rounded in IEEE 754), so every rank that
 * holds the same rows computes the same model bit for bit.
 */
#ifndef DCP_CORE_COST_FIT_H
#define DCP_CORE_COST_FIT_H

#include "dcpack.h"

#include <stddef.h>

/* Knee of the small-microbatch hinge a fit uses when the prior has none (tokens per rank). */
#define DCP__FIT_DEFAULT_KNEE 4096
/* Per-step decay of a row's weight: a row k steps old weighs DECAY^k (half-life about 11 steps). */
#define DCP__FIT_DECAY 0.9375
/* Steps whose rows' prediction errors make dcp_observe_report.predict_error_ppm. */
#define DCP__FIT_ERROR_STEPS 4

/* The fit's columns, in the fixed order the identification tests them. */
enum {
    DCP__COL_QUADRATIC = 0,
    DCP__COL_LINEAR = 1,
    DCP__COL_OVERHEAD = 2,
    DCP__COL_GATHER = 3, /* 3 + (k - 1) for k = 1..DCP_MAX_LOG2_CP */
    DCP__COL_ROUNDS = DCP__COL_GATHER + DCP_MAX_LOG2_CP,
    DCP__COL_SMALL = DCP__COL_ROUNDS + 1,
    DCP__FIT_COLS = DCP__COL_SMALL + 1
};

typedef struct dcp__fit_row {
    double sum_sq_per_cp;    /* sum of s^2 / cp over the group's sequences (quadratic) */
    double sum_per_cp;       /* sum of s / cp (linear) */
    double sum_tokens;       /* sum of s: the gathered sequence each rank sees (cp_gather[k], cp > 1) */
    double rounds;           /* sequences * (cp - 1) (round_latency) */
    int64_t tokens_per_rank; /* floor(sum s / cp): the small-microbatch hinge's argument */
    int64_t time;            /* measured, in the profile's unit (picoseconds) */
    int64_t step;            /* which observed step it came from (0, 1, ...) */
    int64_t error_ppm;       /* relative error of the model that planned the step, on this row */
    int32_t log2_cp;
    int32_t pad_;
} dcp__fit_row;

typedef struct dcp__fit_state {
    dcp_cost_model prior;   /* the model at creation: terms the rows do not identify keep its values, scaled */
    dcp__fit_row *rows;     /* [capacity], a ring */
    int32_t capacity;       /* max_observations */
    int32_t count;          /* rows held */
    int32_t head;           /* the next row written */
    int32_t rows_used;      /* rows the last fit kept */
    int64_t steps;          /* steps observed */
    uint32_t identified;    /* DCP_TERM_* of the last fit */
    int32_t fitted;         /* a fit has run: the model is in the rows' unit */
    int64_t fit_error_ppm;
    int64_t predict_error_ppm;
    double scale;           /* the prior's scale factor of the last fit */
    uint64_t digest;        /* chained over every row ever pushed, with the prior */
} dcp__fit_state;

/* Bytes of scratch dcp__fit_refit needs for `capacity` rows. */
size_t dcp__fit_scratch_size(int32_t capacity);

/* Start a state over `rows` ([capacity]) with this prior. */
void dcp__fit_init(dcp__fit_state *s, dcp__fit_row *rows, int32_t capacity, const dcp_cost_model *prior);

/* Features of one group: `cp` ranks, `count` sequences, lengths[ids[i]] (ids NULL: lengths[i]). */
void dcp__fit_row_features(dcp__fit_row *row, int32_t cp, const int32_t *lengths, const int32_t *ids, int32_t count);

/* A row's predicted time under a model (the fit's own form: features times coefficients). */
double dcp__fit_row_predict(const dcp_cost_model *m, const dcp__fit_row *row);

/* Append one step's rows (their error_ppm set by the caller), oldest evicted first; steps += 1. */
void dcp__fit_push(dcp__fit_state *s, const dcp__fit_row *rows, int32_t count);

/*
 * Refit: the model from the prior and the held rows, into *model (its
 * non-cost fields, step model and pipeline, stay the prior's); scratch of
 * dcp__fit_scratch_size(capacity) bytes, 8-byte aligned.  Sets identified,
 * rows_used, the errors and the model's margin_ppm (the larger of the
 * prior's, the fit's and the prediction error).
 */
void dcp__fit_refit(dcp__fit_state *s, void *scratch, dcp_cost_model *model);

/* The median of n values (sorted in place). */
int64_t dcp__fit_median(int64_t *v, int32_t n);

#endif
