/*
 * pyrandom.c - the Mersenne Twister (MT19937) with Python's seeding from a
 * string and the few draws the trace families use (random, lognormvariate,
 * randint), operation for operation, so `dcpack --generate` reproduces the
 * reference benchmark's workload generator (and random.Random(seed) in general)
 * bit for bit on a platform whose libm exp/log match Python's.
 */
#include "cli.h"

#include <math.h>
#include <string.h>

#define MT_N 624
#define MT_M 397

static void init_genrand(dcp_cli_random *r, uint32_t s)
{
    r->state[0] = s;
    for (int i = 1; i < MT_N; i++)
        r->state[i] = 1812433253u * (r->state[i - 1] ^ (r->state[i - 1] >> 30)) + (uint32_t)i;
    r->index = MT_N;
}

static void init_by_array(dcp_cli_random *r, const uint32_t *key, int length)
{
    init_genrand(r, 19650218u);
    int i = 1, j = 0;
    for (int k = MT_N > length ? MT_N : length; k; k--) {
        r->state[i] = (r->state[i] ^ ((r->state[i - 1] ^ (r->state[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            r->state[0] = r->state[MT_N - 1];
            i = 1;
        }
        if (j >= length) j = 0;
    }
    for (int k = MT_N - 1; k; k--) {
        r->state[i] = (r->state[i] ^ ((r->state[i - 1] ^ (r->state[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            r->state[0] = r->state[MT_N - 1];
            i = 1;
        }
    }
    r->state[0] = 0x80000000u;
    r->index = MT_N;
}

uint32_t dcp_cli_random_u32(dcp_cli_random *r)
{
    static const uint32_t mag01[2] = {0u, 0x9908b0dfu};
    if (r->index >= MT_N) {
        int k = 0;
        for (; k < MT_N - MT_M; k++) {
            uint32_t y = (r->state[k] & 0x80000000u) | (r->state[k + 1] & 0x7fffffffu);
            r->state[k] = r->state[k + MT_M] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; k < MT_N - 1; k++) {
            uint32_t y = (r->state[k] & 0x80000000u) | (r->state[k + 1] & 0x7fffffffu);
            r->state[k] = r->state[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        uint32_t y = (r->state[MT_N - 1] & 0x80000000u) | (r->state[0] & 0x7fffffffu);
        r->state[MT_N - 1] = r->state[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1u];
        r->index = 0;
    }
    uint32_t y = r->state[r->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/*
 * random.Random(text): the integer whose big-endian bytes are text followed
 * by SHA-512(text), split into 32-bit words least significant first (as many
 * as its bit length needs), then init_by_array.
 */
void dcp_cli_random_seed(dcp_cli_random *r, const char *text)
{
    unsigned char bytes[DCP_CLI_SEED_MAX + 64];
    size_t len = strlen(text);
    if (len > DCP_CLI_SEED_MAX) len = DCP_CLI_SEED_MAX;
    memcpy(bytes, text, len);
    dcp_cli_sha512(text, len, bytes + len);
    size_t total = len + 64;
    size_t first = 0; /* leading zero bytes do not count */
    while (first < total && bytes[first] == 0) first++;
    uint32_t key[(DCP_CLI_SEED_MAX + 64) / 4 + 1];
    int words = 0;
    for (size_t end = total; end > first; words++) {
        uint32_t w = 0;
        size_t start = end >= first + 4 ? end - 4 : first;
        for (size_t b = start; b < end; b++) w = (w << 8) | bytes[b];
        key[words] = w;
        end = start;
    }
    if (words == 0) key[words++] = 0;
    init_by_array(r, key, words);
}

double dcp_cli_random_double(dcp_cli_random *r)
{
    uint32_t a = dcp_cli_random_u32(r) >> 5, b = dcp_cli_random_u32(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* Kinderman-Monahan ratio of uniforms, as random.normalvariate; exp of it, as lognormvariate. */
double dcp_cli_random_lognormal(dcp_cli_random *r, double mu, double sigma)
{
    const double magic = 4 * exp(-0.5) / sqrt(2.0);
    double z;
    for (;;) {
        double u1 = dcp_cli_random_double(r);
        double u2 = 1.0 - dcp_cli_random_double(r);
        z = magic * (u1 - 0.5) / u2;
        double zz = z * z / 4.0;
        if (zz <= -log(u2)) break;
    }
    double scaled = z * sigma; /* two roundings, as Python: no fused multiply-add */
    return exp(mu + scaled);
}

/* randint(lo, hi) = lo + _randbelow(hi - lo + 1): k-bit draws (k = bit length), rejected until below. */
int64_t dcp_cli_random_int(dcp_cli_random *r, int64_t lo, int64_t hi)
{
    uint64_t n = (uint64_t)(hi - lo) + 1;
    int k = 0;
    while (k < 64 && (n >> k) != 0) k++;
    for (;;) {
        uint64_t v;
        if (k <= 32) {
            v = dcp_cli_random_u32(r) >> (32 - k);
        } else { /* words least significant first; the last one keeps its top bits */
            uint64_t low = dcp_cli_random_u32(r);
            uint64_t high = dcp_cli_random_u32(r) >> (64 - k);
            v = low | (high << 32);
        }
        if (v < n) return lo + (int64_t)v;
    }
}
