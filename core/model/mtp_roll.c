/*
 * mtp_roll.c - the MTP packed-sequence roll on host memory, and the pieces
 * the device version shares (see mtp_roll.h).
 */
#include "mtp_roll.h"
#include "../comm/agree.h"
#include "../hash.h"

#include <stddef.h>
#include <string.h>

static size_t round8(size_t v) { return (v + 7) & ~(size_t)7; }

void dcp__mtp_roll_layout_compute(int32_t n, const size_t *elem_size, int32_t num_fields, dcp__mtp_roll_layout *l)
{
    memset(l, 0, sizeof *l);
    l->num_sequences = n;
    l->num_fields = num_fields;
    size_t at = 0;
    for (int32_t f = 0; f < num_fields; f++) {
        l->field_offset[f] = at;
        at += round8((size_t)n * elem_size[f]);
    }
    l->trailer = at;
    l->section = at + sizeof(dcp__mtp_roll_trailer);
    at = l->section;
    l->to_prev = 0;
    l->to_next = at;
    l->from_prev = 2 * at;
    l->from_next = 3 * at;
    l->data_bytes = 4 * at;
}

/* Values per field in a section: one per sequence, and at least one (the contiguous roll's first value). */
static int32_t section_values(int32_t num_cu) { return num_cu > 2 ? num_cu - 1 : 1; }

#define TRAILER_MAGIC 0x44434d52u /* "DCMR" */

static uint64_t trailer_check(const dcp__mtp_roll_trailer *t)
{
    uint64_t h = dcp__fnv1a_bytes(DCP_FNV1A64_OFFSET, t, offsetof(dcp__mtp_roll_trailer, check));
    return (h ^ (h >> 29)) * 0x9E3779B97F4A7C15ull ^ 0x1234567887654321ull;
}

void dcp__mtp_roll_seal(unsigned char *section, const dcp__mtp_roll_layout *l, int32_t sender, uint64_t call)
{
    const uint64_t hash = dcp__fnv1a_bytes(DCP_FNV1A64_OFFSET, section, l->trailer);
    dcp__mtp_roll_trailer t = {TRAILER_MAGIC, sender, call, hash, 0};
    t.check = trailer_check(&t);
    memcpy(section + l->trailer, &t, sizeof t);
}

dcp_status dcp__mtp_roll_unseal(const unsigned char *section, const dcp__mtp_roll_layout *l, int32_t sender,
                                uint64_t call)
{
    dcp__mtp_roll_trailer t;
    memcpy(&t, section + l->trailer, sizeof t);
    if (t.magic != TRAILER_MAGIC || t.check != trailer_check(&t) || t.sender != sender || t.call != call ||
        t.hash != dcp__fnv1a_bytes(DCP_FNV1A64_OFFSET, section, l->trailer))
        return DCP_ERR_COMM;
    return DCP_OK;
}

size_t dcp_mtp_roll_exchange_bytes(int32_t num_cu_seqlens, const size_t *elem_size, int32_t num_fields,
                                   int32_t comm_size)
{
    size_t bytes = 0;
    if (num_cu_seqlens > 0 && elem_size && num_fields > 0 && num_fields <= DCP_MTP_ROLL_MAX_FIELDS) {
        dcp__mtp_roll_layout l;
        dcp__mtp_roll_layout_compute(section_values(num_cu_seqlens), elem_size, num_fields, &l);
        bytes = l.data_bytes;
    }
    if (comm_size > 0) bytes += 4 * (size_t)comm_size * sizeof(size_t);
    return bytes;
}

dcp_status dcp__mtp_roll_check(const dcp_comm *comm, int32_t first, int32_t cp, dcp_cp_partition partition,
                              const int32_t *cu, int32_t num_cu,
                              int64_t num_tokens, const void *const *fields, void *const *out,
                              const size_t *elem_size, int32_t num_fields, dcp__error *err)
{
    if (!fields || !out || !elem_size)
        return dcp__fail(err, DCP_ERR_NULL_POINTER, "mtp_roll: fields, out and elem_size are required");
    if (num_fields < 1 || num_fields > DCP_MTP_ROLL_MAX_FIELDS)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "mtp_roll: %d fields, expected 1 to %d", num_fields,
                        DCP_MTP_ROLL_MAX_FIELDS);
    if (cp < 1 || (cp & (cp - 1)) != 0)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "mtp_roll: CP size %d is not a power of two", cp);
    if (partition != DCP_CP_ZIGZAG && partition != DCP_CP_CONTIGUOUS)
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "mtp_roll: partition %d is not zigzag(0) or contiguous(1)",
                         (int)partition);
    if (!comm && cp != 1)
        return dcp__fail(err, DCP_ERR_NULL_POINTER, "mtp_roll: a CP group of %d ranks needs a communicator", cp);
    if (comm && (!comm->ops || first < 0 || comm->rank < first || comm->rank >= first + cp ||
                 (int64_t)first + cp > comm->size))
        return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT,
                        "mtp_roll: group [%d, %d) does not hold rank %d of a %d-rank communicator", first, first + cp,
                        comm->rank, comm->size);
    if (comm) {
        dcp_status s = dcp__comm_ops_check(comm->ops, "mtp_roll", "communicator", err);
        if (s != DCP_OK) return s;
    }
    if (num_cu < 1) return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "mtp_roll: %d cu_seqlens entries", num_cu);
    if (num_tokens < 0) return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "mtp_roll: %lld tokens", (long long)num_tokens);
    for (int32_t f = 0; f < num_fields; f++) {
        size_t e = elem_size[f];
        if (e != 1 && e != 2 && e != 4 && e != 8)
            return dcp__fail(err, DCP_ERR_INVALID_ARGUMENT, "mtp_roll: field %d has %zu-byte elements", f, e);
        if (num_tokens > 0 && (!fields[f] || !out[f]))
            return dcp__fail(err, DCP_ERR_NULL_POINTER, "mtp_roll: field %d has no buffer", f);
    }
    if (!cu) return DCP_OK; /* device cu_seqlens: the kernel trusts them */
    if (cu[0] != 0) return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "mtp_roll: cu_seqlens_padded[0] is %d, not 0", cu[0]);
    for (int32_t k = 0; k + 1 < num_cu; k++) {
        int64_t span = (int64_t)cu[k + 1] - cu[k];
        if (span < 0)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "mtp_roll: cu_seqlens_padded decreases at %d (%d -> %d)", k + 1,
                            cu[k], cu[k + 1]);
        if (cp > 1 && partition == DCP_CP_ZIGZAG && span % (2 * (int64_t)cp) != 0)
            return dcp__fail(err, DCP_ERR_CORRUPT_INPUT,
                            "mtp_roll: sequence %d spans %lld slots, not a multiple of 2 * cp = %d", k,
                            (long long)span, 2 * cp);
    }
    if ((int64_t)cu[num_cu - 1] > (int64_t)cp * num_tokens)
        return dcp__fail(err, DCP_ERR_CORRUPT_INPUT, "mtp_roll: last boundary %d is past %d ranks x %lld slots",
                        cu[num_cu - 1], cp, (long long)num_tokens);
    return DCP_OK;
}

void dcp__mtp_roll_boundary_cpu(const void *field, size_t e, const int32_t *cu, int32_t n, int32_t cp, void *to_prev,
                               void *to_next)
{
    if (cp == 1) return;
    const unsigned char *in = (const unsigned char *)field;
    unsigned char *prev = (unsigned char *)to_prev, *next = (unsigned char *)to_next;
    for (int32_t k = 0; k < n; k++) {
        int64_t s = cu[k] / cp, c = ((int64_t)cu[k + 1] - cu[k]) / (2 * cp);
        if (c == 0) {
            memset(prev + (size_t)k * e, 0, e);
            memset(next + (size_t)k * e, 0, e);
            continue;
        }
        memcpy(prev + (size_t)k * e, in + (size_t)s * e, e);
        memcpy(next + (size_t)k * e, in + (size_t)(s + c) * e, e);
    }
}

/* Shift [a, b) left by one into out; the last slot gets `last` (NULL: zero). */
static void shift_span(const unsigned char *in, unsigned char *out, size_t e, int64_t a, int64_t b, const void *last)
{
    if (b <= a) return;
    memcpy(out + (size_t)a * e, in + (size_t)(a + 1) * e, (size_t)(b - 1 - a) * e);
    if (last) memcpy(out + (size_t)(b - 1) * e, last, e);
    else memset(out + (size_t)(b - 1) * e, 0, e);
}

void dcp__mtp_roll_apply_cpu(const void *field, void *out, size_t e, const int32_t *cu, int32_t n, int64_t num_tokens,
                            int32_t cp, int32_t cp_rank, const void *own_to_next, const void *from_next,
                            const void *from_prev)
{
    const unsigned char *in = (const unsigned char *)field;
    unsigned char *o = (unsigned char *)out;
    const unsigned char *own = (const unsigned char *)own_to_next, *fn = (const unsigned char *)from_next,
                        *fp = (const unsigned char *)from_prev;
    for (int32_t k = 0; k < n; k++) {
        int64_t s = cu[k] / cp, span = ((int64_t)cu[k + 1] - cu[k]) / cp;
        if (cp == 1) {
            shift_span(in, o, e, s, s + span, NULL);
            continue;
        }
        int64_t c = span / 2;
        const void *chunk0_last = cp_rank == cp - 1 ? own + (size_t)k * e : fn + (size_t)k * e;
        const void *chunk1_last = cp_rank == 0 ? NULL : fp + (size_t)k * e;
        shift_span(in, o, e, s, s + c, chunk0_last);
        shift_span(in, o, e, s + c, s + 2 * c, chunk1_last);
    }
    shift_span(in, o, e, cu[n] / cp, num_tokens, NULL);
}

void dcp__mtp_roll_apply_contiguous_cpu(const void *field, void *out, size_t e, const int32_t *cu, int32_t n,
                                       int64_t num_tokens, int32_t cp, int32_t cp_rank, const void *from_next)
{
    const unsigned char *in = (const unsigned char *)field;
    unsigned char *o = (unsigned char *)out;
    const int64_t lo = (int64_t)cp_rank * num_tokens, hi = lo + num_tokens;
    for (int32_t k = 0; k <= n; k++) { /* sequence k, then (k == n) the tail */
        const int64_t a = cu[k], b = k < n ? cu[k + 1] : (int64_t)cp * num_tokens;
        const int64_t from = a > lo ? a : lo, to = b < hi ? b : hi;
        if (to <= from) continue;
        /* the segment goes on past this rank: its last slot here takes the next rank's first value */
        shift_span(in, o, e, from - lo, to - lo, b > hi ? from_next : NULL);
    }
}

dcp_status dcp__mtp_roll_exchange(dcp_comm *comm, int32_t first, int32_t cp, const dcp__mtp_roll_layout *l,
                                 void *exchange, size_t *counts, dcp__error *err)
{
    const int32_t size = comm->size, me = comm->rank, r = me - first;
    size_t *send_bytes = counts, *send_offsets = counts + size, *recv_bytes = counts + 2 * (size_t)size,
           *recv_offsets = counts + 3 * (size_t)size;
    memset(counts, 0, 4 * (size_t)size * sizeof *counts);
    if (cp > 1 && l->section > 0) {
        if (r > 0) {
            send_bytes[me - 1] = l->section;
            send_offsets[me - 1] = l->to_prev;
            recv_bytes[me - 1] = l->section;
            recv_offsets[me - 1] = l->from_prev;
        }
        if (r < cp - 1) {
            send_bytes[me + 1] = l->section;
            send_offsets[me + 1] = l->to_next;
            recv_bytes[me + 1] = l->section;
            recv_offsets[me + 1] = l->from_next;
        }
    }
    dcp_status s = comm->ops->alltoallv(comm, exchange, send_bytes, send_offsets, exchange, recv_bytes, recv_offsets);
    if (s != DCP_OK) return dcp__fail(err, s, "mtp_roll: boundary exchange failed: %s", dcp_status_str(s));
    return DCP_OK;
}

dcp_status dcp__mtp_roll_agree(dcp_comm *comm, uint64_t step_id, dcp_cp_partition partition, dcp_status local,
                               uint64_t *call_out)
{
    if (!comm) return local;
    const uint64_t call = comm->calls++; /* counts a roll that fails here alone too */
    *call_out = call;
    const dcp_status usable = dcp__comm_ops_check(comm->ops, "mtp_roll", "communicator", NULL);
    if (usable != DCP_OK) return local != DCP_OK ? local : usable; /* nobody to tell */
    /* the roll's tag: the count of rolls over this handle, so a rank that skipped one is caught here */
    dcp__call_tag tag;
    dcp__call_tag_init(&tag, DCP_CALL_MTP_ROLL, call, step_id, 1 + (uint64_t)partition);
    tag.status = local;
    dcp__error err;
    dcp__error_clear(&err);
    return dcp__agree_call_small(comm, &tag, &err, "mtp_roll", "rank");
}

dcp_status dcp_mtp_roll(dcp_comm *comm, uint64_t step_id, int32_t first, int32_t cp, dcp_cp_partition partition,
                        const int32_t *cu, int32_t num_cu, int64_t num_tokens, const void *const *fields,
                        void *const *out, const size_t *elem_size, int32_t num_fields, void *exchange)
{
    dcp_status s = cu ? dcp__mtp_roll_check(comm, first, cp, partition, cu, num_cu, num_tokens, fields, out, elem_size,
                                           num_fields, NULL)
                      : DCP_ERR_NULL_POINTER;
    if (s == DCP_OK && comm && !exchange) s = DCP_ERR_NULL_POINTER;
    const int32_t n = num_cu - 1, r = comm ? comm->rank - first : 0;
    const int contiguous = partition == DCP_CP_CONTIGUOUS && cp > 1;
    dcp__mtp_roll_layout l = {0};
    unsigned char *x = (unsigned char *)exchange;
    if (s == DCP_OK && comm) {
        dcp__mtp_roll_layout_compute(section_values(num_cu), elem_size, num_fields, &l);
        memset(x, 0, l.data_bytes);
        for (int32_t f = 0; f < num_fields && cp > 1; f++) {
            if (contiguous) { /* the first value, for the previous rank's last slot */
                if (num_tokens > 0) memcpy(x + l.to_prev + l.field_offset[f], fields[f], elem_size[f]);
            } else {
                dcp__mtp_roll_boundary_cpu(fields[f], elem_size[f], cu, n, cp, x + l.to_prev + l.field_offset[f],
                                          x + l.to_next + l.field_offset[f]);
            }
        }
    }
    const dcp_status local = s;
    uint64_t call = 0;
    s = dcp__mtp_roll_agree(comm, step_id, partition, local, &call);
    if (s == DCP_OK) s = local;
    if (s != DCP_OK) return s;
    if (comm) {
        dcp__mtp_roll_seal(x + l.to_prev, &l, comm->rank, call);
        dcp__mtp_roll_seal(x + l.to_next, &l, comm->rank, call);
        size_t *counts = (size_t *)(x + l.data_bytes);
        s = dcp__mtp_roll_exchange(comm, first, cp, &l, x, counts, NULL);
        if (s != DCP_OK) return s;
        /* what arrived must be what the neighbours sealed: never roll a lying communicator's bytes in */
        if (cp > 1 && ((r > 0 && dcp__mtp_roll_unseal(x + l.from_prev, &l, comm->rank - 1, call) != DCP_OK) ||
                       (r < cp - 1 && dcp__mtp_roll_unseal(x + l.from_next, &l, comm->rank + 1, call) != DCP_OK)))
            return DCP_ERR_COMM;
    }
    for (int32_t f = 0; f < num_fields; f++) {
        size_t o = l.field_offset[f];
        if (contiguous)
            dcp__mtp_roll_apply_contiguous_cpu(fields[f], out[f], elem_size[f], cu, n, num_tokens, cp, r,
                                              r < cp - 1 ? x + l.from_next + o : NULL);
        else
            dcp__mtp_roll_apply_cpu(fields[f], out[f], elem_size[f], cu, n, num_tokens, cp, r,
                                   x ? x + l.to_next + o : NULL, x ? x + l.from_next + o : NULL,
                                   x ? x + l.from_prev + o : NULL);
    }
    return DCP_OK;
}
