/*
 * dynamic_cp_exact.c - the reference's floats, replayed exactly: the load cap
 * float(tall) * float(M) * 1.05 as the binary64 value it evaluates to, and the
 * correctly rounded s / N sums of the full-group fallback, all on integers
 * (positive values, no subnormals needed), so no build's floating point can
 * change a decision.
 */
#include "dynamic_cp_internal.h"

static int bit_length_u128(dcp__u128 v)
{
    uint64_t hi = (uint64_t)(v >> 64), lo = (uint64_t)v;
    if (hi) return 128 - __builtin_clzll(hi);
    if (lo) return 64 - __builtin_clzll(lo);
    return 0;
}

/* Round v (> 0) to 53 significant bits, nearest-even; v ~= *mantissa * 2^*shift. `sticky` = bits below v were lost. */
static void round_to_double(dcp__u128 v, int sticky, uint64_t *mantissa, int *shift)
{
    int bits = bit_length_u128(v);
    if (bits <= 53) {
        *mantissa = (uint64_t)v;
        *shift = 0;
        return;
    }
    int drop = bits - 53;
    uint64_t m = (uint64_t)(v >> drop);
    dcp__u128 rest = v & (((dcp__u128)1 << drop) - 1);
    dcp__u128 half = (dcp__u128)1 << (drop - 1);
    if (rest > half || (rest == half && (sticky || (m & 1)))) m++;
    if (m == (1ull << 53)) {
        m >>= 1;
        drop++;
    }
    *mantissa = m;
    *shift = drop;
}

/*
 * floor(cap * x), cap = (double(tall) * double(M)) * 1.05 exactly as binary64
 * evaluates it (the reference's float(local_tall) * float(mslpr) * (1.0 + 0.05)).
 * tall, M < 2^31 and x <= 2^20: the result is below 2^84.
 */
dcp__u128 dcp__dynamic_cp_cap_times(int64_t tall, int64_t per_rank, int64_t x)
{
    uint64_t m1, m2;
    int e1, e2;
    round_to_double((dcp__u128)tall * (dcp__u128)per_rank, 0, &m1, &e1);
    round_to_double((dcp__u128)m1 * DYN_CAP_MANTISSA, 0, &m2, &e2);
    int e = e1 + e2 - 52; /* cap = m2 * 2^e, e <= 10 */
    dcp__u128 v = (dcp__u128)m2 * (dcp__u128)x;
    return e >= 0 ? v << e : v >> (-e);
}

/* s / n correctly rounded (Python's int / int). */
soft_double dcp__dynamic_cp_soft_div(int64_t s, int64_t n)
{
    dcp__u128 num = (dcp__u128)s << 96; /* s < 2^31, n <= 2^20: the quotient keeps >= 77 bits */
    dcp__u128 q = num / (dcp__u128)n, r = num % (dcp__u128)n;
    soft_double d;
    int shift;
    round_to_double(q, r != 0, &d.m, &shift);
    d.e = shift - 96;
    return d;
}

/* a + b correctly rounded. */
soft_double dcp__dynamic_cp_soft_add(soft_double a, soft_double b)
{
    if (a.m == 0) return b;
    if (b.m == 0) return a;
    if (a.e < b.e) {
        soft_double t = a;
        a = b;
        b = t;
    }
    int diff = a.e - b.e;
    if (diff > 60) return a; /* b is below a quarter ulp of a */
    dcp__u128 sum = ((dcp__u128)a.m << diff) + b.m;
    soft_double d;
    int shift;
    round_to_double(sum, 0, &d.m, &shift);
    d.e = b.e + shift;
    return d;
}

/* a <= limit (limit >= 0 an integer). */
int dcp__dynamic_cp_soft_le(soft_double a, int64_t limit)
{
    if (a.m == 0) return 1;
    if (a.e >= 0) return a.e < 64 && ((dcp__u128)a.m << a.e) <= (dcp__u128)limit;
    if (limit <= 0) return 0;
    if (-a.e > 64) return 1; /* a < 2^-11 < limit */
    return (dcp__u128)a.m <= ((dcp__u128)limit << (-a.e));
}
