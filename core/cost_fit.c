/*
 * cost_fit.c - refit a cost model from observed rows (cost_fit.h).
 *
 * Weighted least squares in relative terms (a row weighs decay^age / time^2,
 * so a 2 ms microbatch counts as much as a 200 ms one), over the columns the
 * rows identify: a column is identified when, after the columns before it in
 * the fixed order are taken out, at least DCP__FIT_IDENT of its (weighted)
 * norm is left; the others keep the prior's value times the scale that fits
 * the prior best.  Coefficients the solve makes negative are held at 0 and
 * the rest solved again (non-negative least squares by elimination, in a
 * fixed order).  Outliers: rows whose relative error is past 4 times the
 * median (and at least 2%) are left out and the fit repeated, up to three
 * times.  Compiled with -ffp-contract=off (CMakeLists.txt): no fused
 * multiply-add, so every rank's result is the same bit for bit.
 */
#include "cost_fit.h"
#include "hash.h"

#include <math.h>
#include <string.h>

/* Share of a column's norm that must be independent of the columns before it (squared: 3%). */
#define DCP__FIT_IDENT 1e-3
#define TRIM_ROUNDS 3
#define MAX_AGE 600 /* DECAY^600 < 1e-16: older rows weigh nothing */

size_t dcp__fit_scratch_size(int32_t capacity)
{
    size_t n = capacity > 0 ? (size_t)capacity : 0;
    return n * (sizeof(double) + 2 * sizeof(int64_t) + 8); /* weights, errors, a sorted copy, trim flags */
}

static uint64_t mix(uint64_t h, uint64_t v) { return dcp__fnv1a_u64(h, v); }

static uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint64_t model_digest(uint64_t h, const dcp_cost_model *m)
{
    const int64_t f[] = {m->quadratic, m->linear, m->round_latency, m->microbatch_overhead, m->small_knee,
                         m->small_slope, m->margin_ppm, m->step_model};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) h = mix(h, (uint64_t)f[i]);
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) h = mix(mix(h, (uint64_t)m->kv[k]), (uint64_t)m->cp_gather[k]);
    return h;
}

void dcp__fit_init(dcp__fit_state *s, dcp__fit_row *rows, int32_t capacity, const dcp_cost_model *prior)
{
    memset(s, 0, sizeof *s);
    s->prior = *prior;
    s->rows = rows;
    s->capacity = capacity;
    s->scale = 1.0;
    s->digest = model_digest(mix(DCP_FNV1A64_OFFSET, (uint64_t)capacity), prior);
}

void dcp__fit_row_features(dcp__fit_row *row, int32_t cp, const int32_t *lengths, const int32_t *ids, int32_t count)
{
    memset(row, 0, sizeof *row);
    int64_t tokens = 0;
    double sq = 0.0;
    for (int32_t i = 0; i < count; i++) {
        const int32_t len = lengths[ids ? ids[i] : i];
        const double s = (double)len;
        sq += s * s; /* exact while the group's sum of squares is below 2^53 (sequences up to 2^26 tokens) */
        tokens += len;
    }
    int k = 0;
    while ((1 << k) < cp && k < DCP_MAX_LOG2_CP) k++;
    row->log2_cp = k;
    row->sum_sq_per_cp = sq / (double)cp;
    row->sum_per_cp = (double)tokens / (double)cp;
    row->sum_tokens = cp > 1 ? (double)tokens : 0.0;
    row->rounds = cp > 1 ? (double)count * (double)(cp - 1) : 0.0;
    row->tokens_per_rank = tokens / cp;
}

static int64_t knee_of(const dcp_cost_model *prior)
{
    return prior->small_knee > 0 ? prior->small_knee : DCP__FIT_DEFAULT_KNEE;
}

/* The row's value in column j (knee: the hinge's). */
static double column(const dcp__fit_row *r, int j, int64_t knee)
{
    switch (j) {
    case DCP__COL_QUADRATIC: return r->sum_sq_per_cp;
    case DCP__COL_LINEAR: return r->sum_per_cp;
    case DCP__COL_OVERHEAD: return 1.0;
    case DCP__COL_ROUNDS: return r->rounds;
    case DCP__COL_SMALL: return r->tokens_per_rank < knee ? (double)(knee - r->tokens_per_rank) : 0.0;
    default: return r->log2_cp >= 1 && j == DCP__COL_GATHER + r->log2_cp - 1 ? r->sum_tokens : 0.0;
    }
}

/* A model's coefficient of column j. */
static double coefficient(const dcp_cost_model *m, int j)
{
    switch (j) {
    case DCP__COL_QUADRATIC: return (double)m->quadratic;
    case DCP__COL_LINEAR: return (double)m->linear;
    case DCP__COL_OVERHEAD: return (double)m->microbatch_overhead;
    case DCP__COL_ROUNDS: return (double)m->round_latency;
    case DCP__COL_SMALL: return m->small_knee > 0 ? (double)m->small_slope : 0.0;
    default: return (double)m->cp_gather[j - DCP__COL_GATHER + 1];
    }
}

double dcp__fit_row_predict(const dcp_cost_model *m, const dcp__fit_row *row)
{
    double p = 0.0;
    for (int j = 0; j < DCP__FIT_COLS; j++) {
        if (j == DCP__COL_SMALL && m->small_knee <= 0) continue;
        p += column(row, j, m->small_knee) * coefficient(m, j);
    }
    return p;
}

void dcp__fit_push(dcp__fit_state *s, const dcp__fit_row *rows, int32_t count)
{
    uint64_t h = mix(s->digest, (uint64_t)count);
    for (int32_t i = 0; i < count; i++) {
        dcp__fit_row r = rows[i];
        r.step = s->steps;
        h = mix(mix(mix(h, bits(r.sum_sq_per_cp)), bits(r.sum_per_cp)), bits(r.sum_tokens));
        h = mix(mix(mix(h, bits(r.rounds)), (uint64_t)r.tokens_per_rank), (uint64_t)r.time);
        h = mix(mix(h, (uint64_t)r.error_ppm), (uint64_t)r.log2_cp);
        if (s->capacity <= 0) continue;
        s->rows[s->head] = r;
        s->head = (s->head + 1) % s->capacity;
        if (s->count < s->capacity) s->count++;
    }
    s->digest = h;
    s->steps++;
}

/* Heap sort: the same order on every rank, no allocation. */
static void sift(int64_t *v, int32_t n, int32_t i)
{
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && v[c + 1] > v[c]) c++;
        if (v[i] >= v[c]) return;
        int64_t t = v[i];
        v[i] = v[c];
        v[c] = t;
        i = c;
    }
}

int64_t dcp__fit_median(int64_t *v, int32_t n)
{
    if (n <= 0) return 0;
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift(v, n, i);
    for (int32_t end = n - 1; end > 0; end--) {
        int64_t t = v[0];
        v[0] = v[end];
        v[end] = t;
        sift(v, end, 0);
    }
    return v[(n - 1) / 2]; /* the lower median */
}

static int64_t rel_error_ppm(double predicted, int64_t time)
{
    double e = (predicted - (double)time) / (double)time;
    if (e < 0) e = -e;
    e *= 1e6;
    return e > 1e12 ? (int64_t)1000000000000 : (int64_t)floor(e + 0.5);
}

static int64_t to_coefficient(double v)
{
    if (!(v > 0.0)) return 0;
    if (v > 4.0e18) return (int64_t)4000000000000000000;
    return (int64_t)floor(v + 0.5);
}

/* The row at ring position i (0 = oldest). */
static const dcp__fit_row *row_at(const dcp__fit_state *s, int32_t i)
{
    int32_t start = s->count < s->capacity ? 0 : s->head;
    return &s->rows[(start + i) % s->capacity];
}

/* A row's non-zero columns (at most 6 of the 21): their indices and values, in column order. */
static int row_columns(const dcp__fit_row *r, int64_t knee, int *idx, double *val)
{
    int n = 0;
    for (int j = 0; j < DCP__FIT_COLS; j++) {
        if (j >= DCP__COL_GATHER && j < DCP__COL_ROUNDS && j != DCP__COL_GATHER + r->log2_cp - 1) continue;
        double x = column(r, j, knee);
        if (x != 0.0) {
            idx[n] = j;
            val[n++] = x;
        }
    }
    return n;
}

/* The weighted normal equations over every column, one pass over the rows: A = X'WX, b = X'Wy. */
static void normal_equations(const dcp__fit_state *s, const double *w, int64_t knee,
                             double A[DCP__FIT_COLS][DCP__FIT_COLS], double *b)
{
    enum { P = DCP__FIT_COLS };
    memset(A, 0, sizeof(double) * P * P);
    for (int j = 0; j < P; j++) b[j] = 0.0;
    for (int32_t i = 0; i < s->count; i++) {
        if (w[i] == 0.0) continue;
        const dcp__fit_row *r = row_at(s, i);
        int idx[P];
        double val[P];
        const int n = row_columns(r, knee, idx, val);
        const double y = (double)r->time;
        for (int p = 0; p < n; p++) {
            const double wx = w[i] * val[p];
            b[idx[p]] += wx * y;
            for (int q = 0; q <= p; q++) A[idx[p]][idx[q]] += wx * val[q];
        }
    }
    for (int a = 0; a < P; a++)
        for (int c = a + 1; c < P; c++) A[a][c] = A[c][a];
}

/*
 * One weighted solve from the normal equations.  free_[j]: the column may be
 * fitted; fixed[j]: its value otherwise.  Out: beta[j] for every column,
 * ident[j] 1 where the rows identified it (fitted, or held at 0 after the
 * solve made it negative).  Columns are scaled to unit norm for the
 * identification test and the factorisation.
 */
static void solve(double A[DCP__FIT_COLS][DCP__FIT_COLS], const double *bvec, const int *free_, const double *fixed,
                  double *beta, int *ident)
{
    enum { P = DCP__FIT_COLS };
    int cand[P], held_zero[P];
    double norm[P];
    for (int j = 0; j < P; j++) {
        held_zero[j] = 0;
        norm[j] = A[j][j] > 0.0 ? sqrt(A[j][j]) : 0.0;
    }
    for (int round = 0; round <= P; round++) {
        for (int j = 0; j < P; j++) cand[j] = free_[j] && !held_zero[j] && norm[j] > 0.0;
        /* Cholesky of the scaled normal matrix in the fixed order, keeping a column only when enough of it
           is independent of those kept before it */
        double L[P][P];
        int acc[P];
        memset(L, 0, sizeof L);
        for (int j = 0; j < P; j++) {
            acc[j] = 0;
            if (!cand[j]) continue;
            double d = A[j][j] / (norm[j] * norm[j]);
            for (int k = 0; k < j; k++) {
                if (!acc[k]) continue;
                double v = A[j][k] / (norm[j] * norm[k]);
                for (int m = 0; m < k; m++)
                    if (acc[m]) v -= L[j][m] * L[k][m];
                L[j][k] = v / L[k][k];
                d -= L[j][k] * L[j][k];
            }
            if (d > DCP__FIT_IDENT) {
                acc[j] = 1;
                L[j][j] = sqrt(d);
            }
        }
        /* right-hand side: the time less the terms held fixed, X'W(y - X_f beta_f), scaled */
        double rhs[P], u[P];
        for (int j = 0; j < P; j++) {
            rhs[j] = 0.0;
            if (!acc[j]) continue;
            double v = bvec[j];
            for (int f = 0; f < P; f++)
                if (!acc[f] && norm[f] > 0.0) v -= A[j][f] * (held_zero[f] ? 0.0 : fixed[f]);
            rhs[j] = v / norm[j];
        }
        for (int j = 0; j < P; j++) {
            u[j] = 0.0;
            if (!acc[j]) continue;
            double v = rhs[j];
            for (int k = 0; k < j; k++)
                if (acc[k]) v -= L[j][k] * u[k];
            u[j] = v / L[j][j];
        }
        for (int j = P - 1; j >= 0; j--) {
            if (!acc[j]) continue;
            double v = u[j];
            for (int k = j + 1; k < P; k++)
                if (acc[k]) v -= L[k][j] * beta[k];
            beta[j] = v / L[j][j];
        }
        int worst = -1;
        double worst_v = 0.0;
        for (int j = 0; j < P; j++) {
            if (!acc[j]) continue;
            beta[j] /= norm[j];
            if (beta[j] < worst_v) {
                worst_v = beta[j];
                worst = j;
            }
        }
        if (worst < 0) {
            for (int j = 0; j < P; j++) {
                ident[j] = acc[j] || held_zero[j];
                if (!acc[j]) beta[j] = held_zero[j] ? 0.0 : fixed[j];
            }
            return;
        }
        held_zero[worst] = 1; /* the most negative coefficient is held at 0; solve the rest again */
        /* the scaled solution above was divided in place: redo it from scratch next round */
        for (int j = 0; j < P; j++) beta[j] = fixed[j];
    }
}

void dcp__fit_refit(dcp__fit_state *s, void *scratch, dcp_cost_model *model)
{
    enum { P = DCP__FIT_COLS };
    const int32_t n = s->count;
    double *w = (double *)scratch;
    int64_t *err = (int64_t *)(w + (n > 0 ? n : 0));
    int64_t *sorted = err + (n > 0 ? n : 0);
    unsigned char *trimmed = (unsigned char *)(sorted + (n > 0 ? n : 0));
    const dcp_cost_model *prior = &s->prior;
    const int64_t knee = knee_of(prior);
    *model = *prior;
    if (n <= 0) return;

    /* decay by age, relative weights; the prior's best scale */
    const int64_t newest = row_at(s, n - 1)->step;
    double prior_beta[P];
    for (int j = 0; j < P; j++) prior_beta[j] = coefficient(prior, j);
    double num = 0.0, den = 0.0;
    for (int32_t i = 0; i < n; i++) {
        const dcp__fit_row *r = row_at(s, i);
        int64_t age = newest - r->step;
        double d = 0.0;
        if (age < MAX_AGE) {
            d = 1.0;
            for (int64_t a = 0; a < age; a++) d *= DCP__FIT_DECAY;
        }
        const double y = (double)r->time;
        w[i] = d / (y * y);
        trimmed[i] = 0;
        double p = dcp__fit_row_predict(prior, r);
        num += w[i] * p * y;
        den += w[i] * p * p;
    }
    const double scale = den > 0.0 ? num / den : 1.0;
    s->scale = scale;
    double fixed[P];
    int free_[P], ident[P];
    for (int j = 0; j < P; j++) {
        fixed[j] = prior_beta[j] * scale;
        free_[j] = 1;
    }
    double beta[P];
    int32_t used = n;
    for (int t = 0; t <= TRIM_ROUNDS; t++) {
        for (int j = 0; j < P; j++) beta[j] = fixed[j];
        double A[P][P], bvec[P];
        normal_equations(s, w, knee, A, bvec);
        solve(A, bvec, free_, fixed, beta, ident);
        /* relative errors under this fit; the median of the rows kept */
        int32_t kept = 0;
        for (int32_t i = 0; i < n; i++) {
            const dcp__fit_row *r = row_at(s, i);
            int idx[P];
            double val[P], p = 0.0;
            const int nz = row_columns(r, knee, idx, val);
            for (int q = 0; q < nz; q++) p += val[q] * beta[idx[q]];
            err[i] = rel_error_ppm(p, r->time);
            if (!trimmed[i]) sorted[kept++] = err[i];
        }
        int64_t med = dcp__fit_median(sorted, kept);
        int64_t cut = 4 * med > 20000 ? 4 * med : 20000;
        int changed = 0;
        used = 0;
        for (int32_t i = 0; i < n; i++) {
            int out = err[i] > cut;
            if (out != trimmed[i]) changed = 1;
            trimmed[i] = (unsigned char)out;
            used += !out;
        }
        if (!changed || t == TRIM_ROUNDS) break;
        /* trimmed rows weigh nothing in the next solve */
        for (int32_t i = 0; i < n; i++) {
            const dcp__fit_row *r = row_at(s, i);
            int64_t age = newest - r->step;
            double d = 0.0;
            if (age < MAX_AGE && !trimmed[i]) {
                d = 1.0;
                for (int64_t a = 0; a < age; a++) d *= DCP__FIT_DECAY;
            }
            const double y = (double)r->time;
            w[i] = d / (y * y);
        }
    }
    s->rows_used = used;

    /* the model: identified terms fitted, the others the prior's, scaled */
    model->quadratic = to_coefficient(beta[DCP__COL_QUADRATIC]);
    model->linear = to_coefficient(beta[DCP__COL_LINEAR]);
    model->microbatch_overhead = to_coefficient(beta[DCP__COL_OVERHEAD]);
    model->round_latency = to_coefficient(beta[DCP__COL_ROUNDS]);
    if (ident[DCP__COL_SMALL]) {
        model->small_knee = knee;
        model->small_slope = to_coefficient(beta[DCP__COL_SMALL]);
    } else {
        model->small_slope = to_coefficient(prior_beta[DCP__COL_SMALL] * scale);
    }
    uint32_t mask = DCP_TERM_SCALE;
    if (ident[DCP__COL_QUADRATIC]) mask |= DCP_TERM_QUADRATIC;
    if (ident[DCP__COL_LINEAR]) mask |= DCP_TERM_LINEAR;
    if (ident[DCP__COL_OVERHEAD]) mask |= DCP_TERM_OVERHEAD;
    if (ident[DCP__COL_ROUNDS]) mask |= DCP_TERM_ROUND_LATENCY;
    if (ident[DCP__COL_SMALL]) mask |= DCP_TERM_SMALL;
    int any_gather = 0;
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++)
        if (ident[DCP__COL_GATHER + k - 1]) {
            mask |= DCP_TERM_CP_GATHER(k);
            any_gather = 1;
        }
    model->cp_gather[0] = 0;
    for (int k = 1; k <= DCP_MAX_LOG2_CP; k++) {
        if (!any_gather) {
            /* no CP size seen with variety: the prior's exchange terms, scaled */
            model->cp_gather[k] = to_coefficient((double)prior->cp_gather[k] * scale);
            continue;
        }
        /* the exposed form prices the exchange; unseen sizes take the nearest seen size below (else above) */
        int from = -1;
        for (int q = k; q >= 1 && from < 0; q--)
            if (ident[DCP__COL_GATHER + q - 1]) from = q;
        for (int q = k + 1; q <= DCP_MAX_LOG2_CP && from < 0; q++)
            if (ident[DCP__COL_GATHER + q - 1]) from = q;
        model->cp_gather[k] = to_coefficient(beta[DCP__COL_GATHER + from - 1]);
    }
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++)
        model->kv[k] = any_gather ? 0 : to_coefficient((double)prior->kv[k] * scale);
    s->identified = mask;
    s->fitted = 1;

    /* errors: the fit's on the rows kept (the integer model), and the planning model's on recent steps */
    int32_t kept = 0, recent = 0;
    for (int32_t i = 0; i < n; i++)
        if (!trimmed[i]) sorted[kept++] = rel_error_ppm(dcp__fit_row_predict(model, row_at(s, i)), row_at(s, i)->time);
    s->fit_error_ppm = dcp__fit_median(sorted, kept);
    for (int32_t i = 0; i < n; i++)
        if (row_at(s, i)->step + DCP__FIT_ERROR_STEPS > newest) sorted[recent++] = row_at(s, i)->error_ppm;
    s->predict_error_ppm = dcp__fit_median(sorted, recent);
    int64_t margin = prior->margin_ppm;
    if (s->fit_error_ppm > margin) margin = s->fit_error_ppm;
    if (s->predict_error_ppm > margin) margin = s->predict_error_ppm;
    model->margin_ppm = margin > 900000 ? 900000 : margin;
}
