/* dcp-test-label: gpu */
/*
 * test_gpu_kernels.c - every CUDA kernel against its CPU twin, bit for bit,
 * on generated inputs: empty sequences, spans not divisible by 2*cp (refused
 * alike), misaligned segments, zero-length tables, and outputs allocated at
 * exactly their size (so compute-sanitizer's memcheck sees any write past
 * them).  Outputs start from the same poison on both sides, so a slot one
 * engine writes and the other leaves shows up too.  Skipped without a GPU.
 */
#include "dcp_test.h"

#include <stdlib.h>
#include <string.h>

#define REQUIRE_GPU()                                                                                      \
    do {                                                                                                   \
        if (dcp_cuda_device_count() < 1) DCP_SKIP("no GPU");                                               \
    } while (0)

#ifdef DCP_HAVE_CUDA
#include "gpu_util.h"
#include "../core/body.h"
#include "../core/digest.h"
#include "../core/mover.h"
#include "../core/model/mtp_roll.h"
#include "../support/thd_twins.h"
#include "../core/thd/pack_cpu.h"
#include "../gpu/kernels.h"
#include "../gpu/mover_cuda.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd_range(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static void fill_random(void *p, size_t bytes)
{
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < bytes; i++) b[i] = (unsigned char)rnd();
}

/* ---- segment table ------------------------------------------------------ */

/*
 * A random table: `segments` segments over `dests` destination buffers, each
 * destination slot covered at most once, sources from `sources` buffers,
 * every tenth segment a fill; fields of 8, 4 and 2 bytes and a mask.
 */
static void segment_table_case(int64_t segments, int64_t max_length, int32_t sources, int32_t dests)
{
    int32_t *src_index = malloc((size_t)segments * 4 + 4), *dst_index = malloc((size_t)segments * 4 + 4);
    int64_t *src_offset = malloc((size_t)segments * 8 + 8), *dst_offset = malloc((size_t)segments * 8 + 8);
    int64_t *length = malloc((size_t)segments * 8 + 8), *work = malloc((size_t)segments * 8 + 16);
    int64_t *dst_cursor = calloc((size_t)dests, 8);
    const int64_t source_elems = 4 * max_length + 64;
    for (int64_t i = 0; i < segments; i++) {
        length[i] = rnd() % 8 == 0 ? 0 : rnd_range(1, max_length);
        src_index[i] = rnd() % 10 == 0 ? -1 : (int32_t)(rnd() % (uint64_t)sources);
        src_offset[i] = rnd_range(0, source_elems - length[i]);
        dst_index[i] = (int32_t)(rnd() % (uint64_t)dests);
        dst_cursor[dst_index[i]] += rnd_range(0, 3); /* gaps stay untouched */
        dst_offset[i] = dst_cursor[dst_index[i]];
        dst_cursor[dst_index[i]] += length[i];
    }
    int64_t total = dcp__segment_work_offsets(length, segments, work);
    enum { F = 4 };
    const int64_t elem[F] = {8, 4, 2, 1};
    dcp__segment_field host_fields[F], dev_fields[F];
    void *host_src[F][8], *dev_src[F][8], *host_dst[F][8], *dev_dst[F][8];
    size_t dst_bytes[F][8];
    for (int f = 0; f < F; f++) {
        for (int32_t s = 0; s < sources; s++) {
            size_t bytes = (size_t)source_elems * (size_t)elem[f];
            host_src[f][s] = malloc(bytes);
            fill_random(host_src[f][s], bytes);
            dev_src[f][s] = to_device(host_src[f][s], bytes);
        }
        for (int32_t d = 0; d < dests; d++) {
            dst_bytes[f][d] = (size_t)dst_cursor[d] * (size_t)elem[f]; /* exactly the size: memcheck sees overruns */
            host_dst[f][d] = malloc(dst_bytes[f][d] + 1);
            memset(host_dst[f][d], 0xA5, dst_bytes[f][d]);
            dev_dst[f][d] = to_device(host_dst[f][d], dst_bytes[f][d]);
        }
        int mask = f == F - 1;
        host_fields[f].src = mask ? NULL : (const void *const *)host_src[f];
        host_fields[f].dst = (void *const *)host_dst[f];
        host_fields[f].elem_size = elem[f];
        dev_fields[f].src = mask ? NULL : (const void *const *)to_device(dev_src[f], sizeof(void *) * (size_t)sources);
        dev_fields[f].dst = (void *const *)to_device(dev_dst[f], sizeof(void *) * (size_t)dests);
        dev_fields[f].elem_size = elem[f];
    }
    dcp__segment_table host_table = {segments, src_index, src_offset, dst_index, dst_offset, length, work};
    dcp__segment_table dev_table = {segments,
                                   to_device(src_index, (size_t)segments * 4),
                                   to_device(src_offset, (size_t)segments * 8),
                                   to_device(dst_index, (size_t)segments * 4),
                                   to_device(dst_offset, (size_t)segments * 8),
                                   to_device(length, (size_t)segments * 8),
                                   to_device(work, (size_t)(segments + 1) * 8)};
    dcp__segment_table_pack_cpu(&host_table, host_fields, F);
    DCP_CHECK_EQ_INT(dcp__segment_table_pack_cuda(&dev_table, total, dev_fields, F, NULL), 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int f = 0; f < F; f++)
        for (int32_t d = 0; d < dests; d++)
            if (!device_equals(dev_dst[f][d], host_dst[f][d], dst_bytes[f][d]))
                dcp_test_fail(__FILE__, __LINE__, "segment table: %lld segments, field %d, destination %d differs",
                              (long long)segments, f, d);
    /* the other builds of the kernel that bench_gpu measures equal the twin too */
    static const int64_t variants[] = {8200, 8192, 4096, 16384, 4097, 4102, 200, 202, 203};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        for (int f = 0; f < F; f++)
            for (int32_t d = 0; d < dests; d++) CUDA_CHECK(cudaMemset(dev_dst[f][d], 0xA5, dst_bytes[f][d]));
        DCP_CHECK_EQ_INT(dcp__segment_table_pack_tile_cuda(&dev_table, total, dev_fields, F, variants[v], NULL), 0);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (int f = 0; f < F; f++)
            for (int32_t d = 0; d < dests; d++)
                if (!device_equals(dev_dst[f][d], host_dst[f][d], dst_bytes[f][d]))
                    dcp_test_fail(__FILE__, __LINE__, "segment table variant %lld: %lld segments, field %d, destination %d differs",
                                  (long long)variants[v], (long long)segments, f, d);
    }
    for (int f = 0; f < F; f++) {
        for (int32_t s = 0; s < sources; s++) free(host_src[f][s]), cudaFree(dev_src[f][s]);
        for (int32_t d = 0; d < dests; d++) free(host_dst[f][d]), cudaFree(dev_dst[f][d]);
        cudaFree((void *)dev_fields[f].src), cudaFree((void *)dev_fields[f].dst);
    }
    cudaFree((void *)dev_table.src_index), cudaFree((void *)dev_table.src_offset), cudaFree((void *)dev_table.dst_index);
    cudaFree((void *)dev_table.dst_offset), cudaFree((void *)dev_table.length), cudaFree((void *)dev_table.work_offset);
    free(src_index), free(dst_index), free(src_offset), free(dst_offset), free(length), free(work), free(dst_cursor);
}

static void run_segment_table(void)
{
    segment_table_case(1, 1, 1, 1);
    segment_table_case(7, 3, 2, 2);
    for (int round = 0; round < 20; round++) segment_table_case(rnd_range(1, 300), rnd_range(1, 200), 3, 3);
    segment_table_case(5000, 3000, 4, 5);  /* many tiles, long segments cut across blocks */
    segment_table_case(40000, 20, 8, 2);   /* many short segments per tile */
    segment_table_case(3, 600000, 2, 1);   /* few very long ones */
    segment_table_case(3000, 70, 6, 3);    /* runs of short pieces: the persistent kernel's groups of lanes */
}

static void run_pack_and_mask(void)
{
    for (int round = 0; round < 20; round++) {
        int64_t n = rnd_range(0, 200), cursor = 0;
        int32_t *buffer = malloc((size_t)n * 4 + 4);
        int64_t *src = malloc((size_t)n * 8 + 8), *dst = malloc((size_t)n * 8 + 8), *len = malloc((size_t)n * 8 + 8);
        int64_t *work = malloc((size_t)n * 8 + 16);
        for (int64_t i = 0; i < n; i++) {
            len[i] = rnd_range(0, 50);
            buffer[i] = (int32_t)(rnd() % 3);
            src[i] = rnd_range(0, 100);
            cursor += rnd_range(0, 2);
            dst[i] = cursor;
            cursor += len[i];
        }
        int64_t tokens = cursor + rnd_range(0, 5), total = dcp__segment_work_offsets(len, n, work);
        int64_t *sources[3], *dev_sources[3];
        for (int s = 0; s < 3; s++) {
            sources[s] = malloc(150 * 8);
            fill_random(sources[s], 150 * 8);
            dev_sources[s] = to_device(sources[s], 150 * 8);
        }
        int64_t *out = malloc((size_t)tokens * 8 + 8);
        memset(out, 0x5A, (size_t)tokens * 8);
        uint8_t *mask = malloc((size_t)tokens + 1);
        void *dev_out = to_device(out, (size_t)tokens * 8), *dev_mask = to_device(mask, (size_t)tokens);
        dcp__pack_layout host_layout = {n, buffer, src, dst, len};
        dcp__pack_cpu(&host_layout, (const void *const *)sources, out, 8);
        dcp__padding_mask_from_layout_cpu(&host_layout, tokens, mask);
        dcp__pack_layout dev_layout = {n, to_device(buffer, (size_t)n * 4), to_device(src, (size_t)n * 8),
                                      to_device(dst, (size_t)n * 8), to_device(len, (size_t)n * 8)};
        int64_t *dev_work = to_device(work, (size_t)(n + 1) * 8);
        void *dev_table = to_device(dev_sources, sizeof dev_sources);
        DCP_CHECK_EQ_INT(dcp__pack_cuda(&dev_layout, dev_work, total, dev_table, dev_out, 8, NULL), 0);
        DCP_CHECK_EQ_INT(dcp__padding_mask_from_layout_cuda(&dev_layout, dev_work, total, tokens, dev_mask, NULL), 0);
        DCP_CHECK(device_equals(dev_out, out, (size_t)tokens * 8));
        DCP_CHECK(device_equals(dev_mask, mask, (size_t)tokens));
        for (int s = 0; s < 3; s++) free(sources[s]), cudaFree(dev_sources[s]);
        cudaFree((void *)dev_layout.src_buffer), cudaFree((void *)dev_layout.src_offset);
        cudaFree((void *)dev_layout.dst_offset), cudaFree((void *)dev_layout.length), cudaFree(dev_work);
        cudaFree(dev_table), cudaFree(dev_out), cudaFree(dev_mask);
        free(buffer), free(src), free(dst), free(len), free(work), free(out), free(mask);
    }
}

/* ---- THD metadata -------------------------------------------------------- */

static void run_cu_seqlens(void)
{
    const int32_t sizes[] = {0, 1, 5, 31, 32, 33, 1023, 1024, 1025, 4096, 100003};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int32_t n = sizes[c];
        int32_t *original = malloc((size_t)n * 4 + 4), *padded = malloc((size_t)n * 4 + 4);
        for (int32_t k = 0; k < n; k++) {
            padded[k] = (int32_t)rnd_range(rnd() % 7 == 0 ? 0 : 1, 20000);
            original[k] = (int32_t)rnd_range(0, padded[k]);
        }
        int32_t *cu = malloc((size_t)n * 4 + 4), *cup = malloc((size_t)n * 4 + 4), longest = -1;
        dcp__cu_seqlens_cpu(original, padded, n, cu, cup, &longest);
        int32_t *d_original = to_device(original, (size_t)n * 4), *d_padded = to_device(padded, (size_t)n * 4);
        int32_t *d_cu = to_device(NULL, (size_t)(n + 1) * 4), *d_cup = to_device(NULL, (size_t)(n + 1) * 4);
        int32_t *d_max = to_device(NULL, 4);
        DCP_CHECK_EQ_INT(dcp__cu_seqlens_cuda(d_original, d_padded, n, d_cu, d_cup, d_max, NULL), 0);
        if (!device_equals(d_cu, cu, (size_t)(n + 1) * 4) || !device_equals(d_cup, cup, (size_t)(n + 1) * 4) ||
            !device_equals(d_max, &longest, 4))
            dcp_test_fail(__FILE__, __LINE__, "cu_seqlens scan of %d lengths differs", n);
        cudaFree(d_original), cudaFree(d_padded), cudaFree(d_cu), cudaFree(d_cup), cudaFree(d_max);
        free(original), free(padded), free(cu), free(cup);
    }
}

static void run_thd_cu_seqlens(void)
{
    int checked = 0;
    for (int round = 0; round < 400; round++) {
        dcp__thd_params p;
        p.cp = 1 << rnd_range(0, 3);
        p.partition = rnd() % 2 ? DCP_CP_ZIGZAG : DCP_CP_CONTIGUOUS;
        p.target = rnd() % 4 == 0 ? (int32_t)rnd_range(1, 40) * 2 * p.cp * 8 : 0;
        p.alignment = p.target ? 0 : (rnd() % 3 ? (int32_t)(2 * p.cp * rnd_range(1, 8)) : 0);
        p.tail = rnd() % 2 ? DCP_THD_TAIL_APPEND_DUMMY : DCP_THD_TAIL_EXTEND_LAST;
        int32_t n = (int32_t)rnd_range(1, 40);
        p.max_packed_sequences = rnd() % 3 == 0 ? n + (int32_t)rnd_range(1, 6) : 0;
        int32_t *original = malloc((size_t)n * 4), *padded = malloc((size_t)n * 4);
        for (int32_t k = 0; k < n; k++) {
            padded[k] = (int32_t)(2 * p.cp * rnd_range(1, 30));
            original[k] = (int32_t)rnd_range(0, padded[k]);
        }
        dcp__thd_geometry g;
        dcp__error err;
        if (dcp__thd_geometry_compute(&p, original, padded, n, &g, &err) == DCP_OK) {
            size_t bytes = (size_t)g.num_cu_seqlens * 4;
            int32_t *cu = malloc(bytes), *cup = malloc(bytes);
            dcp__thd_cu_seqlens_write(&g, original, padded, n, cu, cup);
            int32_t *d_original = to_device(original, (size_t)n * 4), *d_padded = to_device(padded, (size_t)n * 4);
            int32_t *d_cu = to_device(NULL, bytes), *d_cup = to_device(NULL, bytes);
            DCP_CHECK_EQ_INT(dcp__thd_cu_seqlens_write_cuda(&g, d_original, d_padded, n, d_cu, d_cup, NULL), 0);
            if (!device_equals(d_cu, cu, bytes) || !device_equals(d_cup, cup, bytes))
                dcp_test_fail(__FILE__, __LINE__, "THD cu_seqlens (n %d, cp %d, dummy %d, entries %d) differ", n, p.cp,
                              g.dummy_length, g.num_cu_seqlens);
            cudaFree(d_original), cudaFree(d_padded), cudaFree(d_cu), cudaFree(d_cup);
            free(cu), free(cup);
            checked++;
        }
        free(original), free(padded);
    }
    DCP_CHECK(checked > 100);
}

static void run_padding_mask_and_sanitize(void)
{
    for (int round = 0; round < 60; round++) {
        int32_t n = (int32_t)rnd_range(0, 300);
        int32_t *cu = malloc((size_t)n * 4 + 4), *cup = malloc((size_t)n * 4 + 4);
        cu[0] = cup[0] = 0;
        for (int32_t k = 0; k < n; k++) {
            int32_t span = rnd() % 6 == 0 ? 0 : (int32_t)rnd_range(1, 90); /* empty sequences too */
            cup[k + 1] = cup[k] + span;
            cu[k + 1] = cu[k] + (int32_t)rnd_range(0, span);
        }
        int64_t tokens = cup[n] + rnd_range(0, 40);
        if (rnd() % 5 == 0 && tokens > 3) tokens -= 3; /* a buffer shorter than the spans: clipped alike */
        uint8_t *mask = malloc((size_t)tokens + 1);
        dcp__thd_padding_mask_cpu(cu, cup, n, tokens, mask);
        int32_t *d_cu = to_device(cu, (size_t)(n + 1) * 4), *d_cup = to_device(cup, (size_t)(n + 1) * 4);
        uint8_t *d_mask = to_device(NULL, (size_t)tokens);
        DCP_CHECK_EQ_INT(dcp__thd_padding_mask_cuda(d_cu, d_cup, n, tokens, d_mask, NULL), 0);
        DCP_CHECK(device_equals(d_mask, mask, (size_t)tokens));
        const size_t elems[] = {8, 4, 1, 3};
        for (int e = 0; e < 4; e++) {
            size_t bytes = (size_t)tokens * elems[e];
            unsigned char *field = malloc(bytes + 1);
            fill_random(field, bytes);
            void *d_field = to_device(field, bytes);
            dcp__thd_sanitize_cpu(mask, tokens, field, elems[e]);
            DCP_CHECK_EQ_INT(dcp__thd_sanitize_cuda(d_mask, tokens, d_field, elems[e], NULL), 0);
            DCP_CHECK(device_equals(d_field, field, bytes));
            cudaFree(d_field), free(field);
        }
        cudaFree(d_cu), cudaFree(d_cup), cudaFree(d_mask);
        free(cu), free(cup), free(mask);
    }
}

/* ---- CP slicing ---------------------------------------------------------- */

static void run_cp_slice(void)
{
    int refused = 0, cut = 0;
    for (int round = 0; round < 300; round++) {
        int32_t cp = 1 << rnd_range(0, 3), r = (int32_t)rnd_range(0, cp - 1), n = (int32_t)rnd_range(0, 30);
        dcp_cp_partition partition = rnd() % 2 ? DCP_CP_ZIGZAG : DCP_CP_CONTIGUOUS;
        int32_t *cup = malloc((size_t)n * 4 + 4);
        cup[0] = 0;
        for (int32_t k = 0; k < n; k++) {
            int32_t span = rnd() % 6 == 0 ? 0 : (int32_t)(2 * cp * rnd_range(1, 20));
            if (rnd() % 15 == 0) span += 1; /* not divisible by 2*cp: refused by both */
            cup[k + 1] = cup[k] + span;
        }
        int64_t total = cup[n];
        if (partition == DCP_CP_CONTIGUOUS && rnd() % 2) total += rnd_range(0, 3) * cp + (rnd() % 5 == 0);
        size_t cap = 2 * (size_t)(n > 0 ? n : 1);
        int64_t *src = malloc(cap * 8), *dst = malloc(cap * 8), *len = malloc(cap * 8);
        int64_t count = dcp__cp_slice_layout_cpu(cup, n, total, cp, r, partition, src, dst, len);
        int32_t *d_cup = to_device(cup, (size_t)(n + 1) * 4);
        int64_t *d_src = to_device(NULL, cap * 8), *d_dst = to_device(NULL, cap * 8), *d_len = to_device(NULL, cap * 8);
        int64_t *d_count = to_device(NULL, 8), got = -7;
        DCP_CHECK_EQ_INT(
            dcp__cp_slice_layout_cuda(d_cup, n, total, cp, r, partition, d_src, d_dst, d_len, d_count, NULL), 0);
        CUDA_CHECK(cudaMemcpy(&got, d_count, 8, cudaMemcpyDeviceToHost));
        DCP_CHECK_EQ_INT(got, count);
        if (count > 0) {
            DCP_CHECK(device_equals(d_src, src, (size_t)count * 8));
            DCP_CHECK(device_equals(d_dst, dst, (size_t)count * 8));
            DCP_CHECK(device_equals(d_len, len, (size_t)count * 8));
            /* the direct per-slot slice equals the layout followed by the segment gather */
            const size_t elems[] = {8, 4, 1};
            for (int e = 0; e < 3; e++) {
                size_t in_bytes = (size_t)total * elems[e], local = (size_t)(total / cp);
                unsigned char *packed = malloc(in_bytes + 1), *want = malloc(local * elems[e] + 1);
                fill_random(packed, in_bytes);
                const void *bufs[1] = {packed};
                dcp__pack_layout layout = {count, NULL, src, dst, len};
                dcp__pack_cpu(&layout, bufs, want, elems[e]);
                void *d_packed = to_device(packed, in_bytes), *d_out = to_device(NULL, local * elems[e]);
                DCP_CHECK_EQ_INT(dcp__cp_slice_cuda(d_packed, n, d_cup, total, cp, r, partition, d_out, elems[e], NULL), 0);
                if (!device_equals(d_out, want, local * elems[e]))
                    dcp_test_fail(__FILE__, __LINE__, "direct CP slice (cp %d rank %d %s, %zu-byte) differs", cp, r,
                                  partition == DCP_CP_ZIGZAG ? "zigzag" : "contiguous", elems[e]);
                cudaFree(d_packed), cudaFree(d_out), free(packed), free(want);
            }
            cut++;
        } else if (count < 0) {
            refused++;
        }
        cudaFree(d_cup), cudaFree(d_src), cudaFree(d_dst), cudaFree(d_len), cudaFree(d_count);
        free(cup), free(src), free(dst), free(len);
    }
    DCP_CHECK(refused > 5);
    DCP_CHECK(cut > 100);
}

/* ---- MTP roll kernels ---------------------------------------------------- */

static void run_mtp_roll(void)
{
    for (int round = 0; round < 200; round++) {
        int32_t cp = 1 << rnd_range(0, 3), r = (int32_t)rnd_range(0, cp - 1), n = (int32_t)rnd_range(0, 25);
        int32_t *cu = malloc((size_t)n * 4 + 4);
        cu[0] = 0;
        for (int32_t k = 0; k < n; k++) cu[k + 1] = cu[k] + (rnd() % 5 == 0 ? 0 : (int32_t)(2 * cp * rnd_range(1, 9)));
        int64_t tokens = cu[n] / cp + rnd_range(0, 6);
        const size_t elems[] = {8, 4, 2, 1};
        size_t e = elems[rnd() % 4];
        size_t nb = (size_t)(n > 0 ? n : 1) * e;
        unsigned char *field = malloc((size_t)tokens * e + 1), *out = malloc((size_t)tokens * e + 1);
        unsigned char *to_prev = malloc(nb), *to_next = malloc(nb), *from_next = malloc(nb), *from_prev = malloc(nb);
        fill_random(field, (size_t)tokens * e);
        fill_random(from_next, nb);
        fill_random(from_prev, nb);
        memset(to_prev, 0x33, nb), memset(to_next, 0x33, nb), memset(out, 0x44, (size_t)tokens * e);
        int32_t *d_cu = to_device(cu, (size_t)(n + 1) * 4);
        void *d_field = to_device(field, (size_t)tokens * e), *d_out = to_device(out, (size_t)tokens * e);
        void *d_prev = to_device(to_prev, nb), *d_next = to_device(to_next, nb);
        void *d_from_next = to_device(from_next, nb), *d_from_prev = to_device(from_prev, nb);
        dcp__mtp_roll_boundary_cpu(field, e, cu, n, cp, to_prev, to_next);
        DCP_CHECK_EQ_INT(dcp__mtp_roll_boundary_cuda(d_field, e, d_cu, n, cp, d_prev, d_next, NULL), 0);
        DCP_CHECK(device_equals(d_prev, to_prev, nb));
        DCP_CHECK(device_equals(d_next, to_next, nb));
        dcp__mtp_roll_apply_cpu(field, out, e, cu, n, tokens, cp, r, to_next, from_next, from_prev);
        DCP_CHECK_EQ_INT(
            dcp__mtp_roll_apply_cuda(d_field, d_out, e, d_cu, n, tokens, cp, r, d_next, d_from_next, d_from_prev, NULL), 0);
        if (!device_equals(d_out, out, (size_t)tokens * e))
            dcp_test_fail(__FILE__, __LINE__, "MTP roll (cp %d rank %d, %d sequences, %zu-byte) differs", cp, r, n, e);
        cudaFree(d_cu), cudaFree(d_field), cudaFree(d_out), cudaFree(d_prev), cudaFree(d_next);
        cudaFree(d_from_next), cudaFree(d_from_prev);
        free(cu), free(field), free(out), free(to_prev), free(to_next), free(from_next), free(from_prev);
    }
}

/* ---- GDN padding --------------------------------------------------------- */

static void run_gdn_pad(void)
{
    for (int round = 0; round < 80; round++) {
        int64_t rows = rnd_range(0, 5000);
        size_t row_bytes = (size_t)rnd_range(1, 40);
        int32_t alignment = rnd() % 4 == 0 ? DCP_GDN_ALIGNMENT : (int32_t)rnd_range(0, 300);
        int64_t padded = dcp_gdn_padded_rows(rows, alignment);
        int with_cu = rnd() % 3 != 0, in_place = rnd() % 2;
        /* cu_seqlens describe the rows: from 0 to rows (a lone 0 entry only for no rows) */
        int32_t num_cu = (int32_t)rnd_range(rows > 0 ? 2 : 1, 9);
        int32_t *cu = malloc((size_t)num_cu * 4), *out_cu = malloc((size_t)num_cu * 4);
        cu[0] = 0;
        for (int32_t k = 1; k < num_cu; k++) cu[k] = (int32_t)(rows * k / (num_cu - 1 > 0 ? num_cu - 1 : 1));
        size_t in_bytes = (size_t)rows * row_bytes, out_bytes = (size_t)padded * row_bytes;
        unsigned char *in = malloc(out_bytes + 1), *out = malloc(out_bytes + 1);
        fill_random(in, out_bytes); /* in place: the pad rows hold garbage first */
        memset(out, 0x77, out_bytes);
        void *d_in = to_device(in, out_bytes), *d_out = in_place ? d_in : to_device(out, out_bytes);
        int32_t *d_cu = to_device(cu, (size_t)num_cu * 4), *d_out_cu = to_device(NULL, (size_t)num_cu * 4);
        DCP_REQUIRE_OK(dcp_gdn_pad(in, rows, row_bytes, alignment, with_cu ? cu : NULL, num_cu, in_place ? in : out,
                                   padded, with_cu ? out_cu : NULL));
        DCP_REQUIRE_OK(dcp_gdn_pad_cuda(d_in, rows, row_bytes, alignment, with_cu ? d_cu : NULL, num_cu, d_out, padded,
                                        with_cu ? d_out_cu : NULL, NULL));
        if (!device_equals(d_out, in_place ? in : out, out_bytes))
            dcp_test_fail(__FILE__, __LINE__, "GDN pad (%lld rows of %zu bytes, alignment %d, %s) differs",
                          (long long)rows, row_bytes, alignment, in_place ? "in place" : "copy");
        if (with_cu) DCP_CHECK(device_equals(d_out_cu, out_cu, (size_t)num_cu * 4));
        /* strip: the first rows back, exactly */
        void *d_stripped = to_device(NULL, in_bytes);
        DCP_REQUIRE_OK(dcp_gdn_strip_cuda(d_out, rows, row_bytes, d_stripped, NULL));
        DCP_CHECK(device_equals(d_stripped, in_place ? in : out, in_bytes));
        cudaFree(d_stripped);
        if (!in_place) cudaFree(d_out);
        cudaFree(d_in), cudaFree(d_cu), cudaFree(d_out_cu);
        free(cu), free(out_cu), free(in), free(out);
    }
}

/* The input digest: spans of generated samples, 8- and 4-byte fields, against the CPU twin. */
static void run_digest(void)
{
    enum { SAMPLES = 5, FIELDS = 2 };
    const int64_t sizes[FIELDS] = {8, 4};
    const int32_t field_index[FIELDS] = {0, 3}; /* tokens, loss_mask */
    int64_t sample_len[SAMPLES];
    void *host[FIELDS][SAMPLES], *dev[FIELDS][SAMPLES];
    for (int i = 0; i < SAMPLES; i++) sample_len[i] = 1 + (int64_t)(rnd() % 3000);
    for (int f = 0; f < FIELDS; f++)
        for (int i = 0; i < SAMPLES; i++) {
            size_t bytes = (size_t)sample_len[i] * (size_t)sizes[f];
            unsigned char *h = malloc(bytes);
            for (size_t b = 0; b < bytes; b++) h[b] = (unsigned char)rnd();
            host[f][i] = h;
            dev[f][i] = to_device(h, bytes);
        }
    /* spans: pieces of the samples in a shuffled order, some empty */
    enum { SPANS = 40 };
    int32_t src_index[SPANS];
    int64_t src_offset[SPANS], position[SPANS], length[SPANS];
    int64_t at = 0;
    uint64_t want = 0;
    for (int k = 0; k < SPANS; k++) {
        int32_t i = (int32_t)(rnd() % SAMPLES);
        int64_t a = (int64_t)(rnd() % (uint64_t)sample_len[i]), n = (int64_t)(rnd() % (uint64_t)(sample_len[i] - a + 1));
        src_index[k] = i, src_offset[k] = a, position[k] = at, length[k] = n;
        for (int f = 0; f < FIELDS; f++)
            want += dcp__digest_run_cpu((unsigned char *)host[f][i] + a * sizes[f], (size_t)sizes[f], n, at,
                                        field_index[f]);
        at += n;
    }
    const void *src_ptrs[FIELDS * SAMPLES];
    for (int f = 0; f < FIELDS; f++)
        for (int i = 0; i < SAMPLES; i++) src_ptrs[f * SAMPLES + i] = dev[f][i];
    int32_t *d_src_index = to_device(src_index, sizeof src_index);
    int64_t *d_src_offset = to_device(src_offset, sizeof src_offset), *d_position = to_device(position, sizeof position);
    int64_t *d_length = to_device(length, sizeof length), *d_sizes = to_device(sizes, sizeof sizes);
    int32_t *d_fields = to_device(field_index, sizeof field_index);
    const void **d_src = to_device(src_ptrs, sizeof src_ptrs);
    uint64_t *d_out = to_device(NULL, 8);
    dcp__segment_table t = {SPANS, d_src_index, d_src_offset, NULL, d_position, d_length, NULL};
    DCP_CHECK_EQ_INT(dcp__digest_cuda(&t, (const void *const *)d_src, SAMPLES, d_fields, d_sizes, FIELDS, d_out, NULL), 0);
    uint64_t *got = to_host(d_out, 8);
    if (*got != want)
        dcp_test_fail(__FILE__, __LINE__, "digest %016llx on device, %016llx on the host", (unsigned long long)*got,
                      (unsigned long long)want);
    /* one flipped bit anywhere in a span changes it: -0.0f against 0.0f */
    float zero = 0.0f, negative = -0.0f;
    uint64_t z = dcp__digest_run_cpu(&zero, 4, 1, 7, 3), n = dcp__digest_run_cpu(&negative, 4, 1, 7, 3);
    DCP_CHECK(z != n);
    free(got);
    cudaFree(d_src_index), cudaFree(d_src_offset), cudaFree(d_position), cudaFree(d_length), cudaFree(d_sizes);
    cudaFree(d_fields), cudaFree((void *)d_src), cudaFree(d_out);
    for (int f = 0; f < FIELDS; f++)
        for (int i = 0; i < SAMPLES; i++) free(host[f][i]), cudaFree(dev[f][i]);
}


/* ---- the CUDA mover's landing against the CPU mover's ---------------------- */

/*
 * One landing on both movers: received pieces from `peers` blocks of a
 * receive buffer and own pieces from `samples` samples, in random order with
 * random gaps, over the `kept` fields; the bodies must be equal byte for byte
 * (fields, padding zeros, the mask, and the uploaded prefix).
 */
static void mover_land_case(int32_t peers, int32_t samples, int64_t pieces, int64_t max_length, uint32_t kept)
{
    const size_t per_token = dcp__bytes_per_token(kept);
    /* the samples: every field, random bytes, on both sides */
    const int64_t sample_tokens = 4 * max_length + 16;
    dcp_sample *host_samples = calloc((size_t)samples, sizeof *host_samples);
    dcp_sample *dev_samples = calloc((size_t)samples, sizeof *dev_samples);
    void *host_buf[64][DCP_NUM_FIELDS], *dev_buf[64][DCP_NUM_FIELDS];
    for (int32_t i = 0; i < samples; i++) {
        for (int f = 0; f < DCP_NUM_FIELDS; f++) {
            size_t bytes = (size_t)sample_tokens * dcp__field_size[f];
            host_buf[i][f] = malloc(bytes);
            fill_random(host_buf[i][f], bytes);
            dev_buf[i][f] = to_device(host_buf[i][f], bytes);
        }
        dcp_sample *h = &host_samples[i], *d = &dev_samples[i];
        h->tokens = host_buf[i][0], h->labels = host_buf[i][1], h->position_ids = host_buf[i][2];
        h->loss_mask = host_buf[i][3];
        d->tokens = dev_buf[i][0], d->labels = dev_buf[i][1], d->position_ids = dev_buf[i][2];
        d->loss_mask = dev_buf[i][3];
        h->num_tokens = d->num_tokens = sample_tokens;
    }
    /* the pieces, by destination; received ones advance their sender's cursor */
    int32_t *sender = malloc((size_t)pieces * 4 + 4), *sample = malloc((size_t)pieces * 4 + 4);
    int64_t *cursor = malloc((size_t)pieces * 8 + 8), *rdst = malloc((size_t)pieces * 8 + 8);
    int64_t *rlen = malloc((size_t)pieces * 8 + 8), *src = malloc((size_t)pieces * 8 + 8);
    int64_t *odst = malloc((size_t)pieces * 8 + 8), *olen = malloc((size_t)pieces * 8 + 8);
    int64_t tokens_from[8] = {0}, tokens_to[8] = {0}, nr = 0, no = 0, at = 0;
    for (int64_t i = 0; i < pieces; i++) {
        at += rnd() % 3 == 0 ? rnd_range(1, 70) : 0;
        int64_t len = rnd_range(1, max_length);
        if (peers > 0 && rnd() % 2 == 0) {
            int32_t q = (int32_t)(rnd() % (uint64_t)peers);
            sender[nr] = q, cursor[nr] = tokens_from[q], rdst[nr] = at, rlen[nr] = len;
            tokens_from[q] += len;
            nr++;
        } else {
            sample[no] = (int32_t)(rnd() % (uint64_t)samples), src[no] = rnd_range(0, sample_tokens - len);
            odst[no] = at, olen[no] = len;
            no++;
        }
        at += len;
    }
    const int64_t total = at + rnd_range(0, 100);
    /* the receive buffer: each peer's block holds its kept fields' runs, 8-byte aligned */
    size_t recv_offsets[8], send_offsets[8], recv_total = 0;
    for (int32_t q = 0; q < peers; q++) {
        recv_offsets[q] = recv_total;
        send_offsets[q] = 0;
        recv_total += ((size_t)tokens_from[q] * per_token + 7) & ~(size_t)7;
    }
    unsigned char *host_recv = malloc(recv_total + 1);
    fill_random(host_recv, recv_total);
    unsigned char *dev_recv = to_device(host_recv, recv_total);
    dcp__exchange_blocks x = {peers, send_offsets, recv_offsets, tokens_to, tokens_from, 0, recv_total};
    dcp__recv_pieces r = {nr, sender, cursor, rdst, rlen};
    dcp__own_pieces o = {no, sample, src, odst, olen};
    /* both bodies: one microbatch's prefix (random bytes), then the fields and the mask */
    dcp__body_layout b;
    dcp__body_layout_compute(1, 3, total, kept, &b);
    unsigned char *cpu_body = malloc(b.used), *gpu_host_body = malloc(b.used);
    fill_random(cpu_body, b.used);
    dcp__mover cpu, gpu;
    dcp__mover_cpu_init(&cpu, cpu_body, b.used);
    dcp__mover_cpu_init(&gpu, gpu_host_body, b.used);
    dcp__mover_sizes z = {recv_total + 8, b.used, b.prefix, 2 * pieces + 1, (int64_t)samples + peers,
                         peers > 0 ? peers : 1};
    dcp__error err;
    DCP_REQUIRE_OK(dcp__mover_cuda_create(&gpu, &z, NULL, 0, NULL, 0, &err));
    DCP_CHECK(gpu.host_body != gpu_host_body); /* the prefix is written in the mover's pinned block */
    memcpy(gpu.host_body, cpu_body, b.prefix);
    CUDA_CHECK(cudaMemset(gpu.body, 0xA5, b.used));
    dcp_step_input host_in = {host_samples, samples, kept}, dev_in = {dev_samples, samples, kept};
    /* scratch for the CPU mover's table */
    size_t scratch_bytes = (size_t)(2 * pieces + 1) * 64 + (size_t)(samples + peers) * 64 + 4096;
    void *scratch_memory = malloc(scratch_bytes);
    dcp__arena scratch;
    dcp__arena_init(&scratch, scratch_memory, scratch_bytes);
    DCP_REQUIRE_OK(cpu.ops->land(&cpu, NULL, kept, &r, &x, host_recv, &o, &host_in, &b, total, &scratch, &err));
    DCP_REQUIRE_OK(gpu.ops->land(&gpu, NULL, kept, &r, &x, dev_recv, &o, &dev_in, &b, total, &scratch, &err));
    /* the prefix, each kept field's slots and the mask (not the alignment bytes between them, which nothing writes) */
    unsigned char *landed = to_host(gpu.body, b.used);
    int same = memcmp(landed, cpu_body, b.prefix) == 0 &&
               memcmp(landed + b.mask, cpu_body + b.mask, (size_t)total) == 0;
    for (int f = 0; f < DCP_NUM_FIELDS; f++)
        if (kept & dcp__field_bit[f])
            same = same && memcmp(landed + b.field[f], cpu_body + b.field[f], (size_t)total * dcp__field_size[f]) == 0;
    if (!same)
        dcp_test_fail(__FILE__, __LINE__, "mover landing: %d peers, %d samples, %lld pieces, fields 0x%x: bodies differ",
                      peers, samples, (long long)pieces, kept);
    free(landed);
    /* The input digest of random spans of the samples, twice, after the landing left its table on the device:
     * equal to the CPU mover's (a table entry not uploaded would read the landing's stale values). */
    for (int round = 0; round < 2 && samples > 0; round++) {
        const int32_t count = (int32_t)(1 + rnd() % (uint64_t)(2 * pieces + 1));
        int32_t *span_sample = malloc((size_t)count * 4), *span_pairs = malloc((size_t)count * 8);
        int64_t *span_start = malloc((size_t)count * 8);
        for (int32_t k = 0; k < count; k++) {
            span_sample[k] = (int32_t)(rnd() % (uint64_t)samples);
            span_start[k] = (int64_t)(rnd() % (uint64_t)sample_tokens);
            span_pairs[2 * k] = (int32_t)(rnd() % (uint64_t)(sample_tokens - span_start[k] + 1));
            span_pairs[2 * k + 1] = span_pairs[2 * k];
        }
        dcp__input_spans spans = {.count = count, .sample = span_sample, .start = span_start, .pairs = span_pairs};
        uint64_t want = 0, got = 1;
        DCP_REQUIRE_OK(cpu.ops->digest(&cpu, NULL, &host_in, kept, &spans, &want, &err));
        DCP_REQUIRE_OK(gpu.ops->digest(&gpu, NULL, &dev_in, kept, &spans, &got, &err));
        if (got != want)
            dcp_test_fail(__FILE__, __LINE__, "mover digest: %d spans, fields 0x%x: %016llx on device, %016llx on the host",
                          count, kept, (unsigned long long)got, (unsigned long long)want);
        free(span_sample), free(span_pairs), free(span_start);
    }
    gpu.ops->release(&gpu);
    DCP_CHECK(gpu.host_body == gpu_host_body); /* the CPU mover's body again */
    for (int32_t i = 0; i < samples; i++)
        for (int f = 0; f < DCP_NUM_FIELDS; f++) free(host_buf[i][f]), cudaFree(dev_buf[i][f]);
    free(host_samples), free(dev_samples), free(host_recv), cudaFree(dev_recv);
    free(sender), free(sample), free(cursor), free(rdst), free(rlen), free(src), free(odst), free(olen);
    free(cpu_body), free(gpu_host_body), free(scratch_memory);
}

static void run_mover_land(void)
{
    const uint32_t all = DCP_FIELD_TOKENS | DCP_FIELD_LABELS | DCP_FIELD_POSITION_IDS | DCP_FIELD_LOSS_MASK;
    mover_land_case(0, 1, 1, 5, all);                                 /* one own piece, nothing received */
    mover_land_case(3, 4, 60, 40, all);                               /* both kinds, short pieces */
    mover_land_case(4, 9, 300, 700, all);                             /* long pieces, many tiles */
    mover_land_case(2, 3, 50, 90, DCP_FIELD_TOKENS | DCP_FIELD_LOSS_MASK); /* a subset of the fields */
    mover_land_case(5, 1, 40, 30, DCP_FIELD_LABELS);
}

static void run_launch_errors(void)
{
    /* a bad launch comes back as a status, not a crash */
    CUDA_CHECK(cudaGetLastError());
    DCP_CHECK(dcp__cu_seqlens_cuda(NULL, NULL, -1, NULL, NULL, NULL, NULL) != 0);
    DCP_CHECK_STATUS(dcp_gdn_pad_cuda(NULL, 4, 1, 4, NULL, 0, NULL, 4, NULL, NULL), DCP_ERR_NULL_POINTER);
    DCP_CHECK_STATUS(dcp_gdn_pad_cuda((void *)1, 5, 1, 4, NULL, 0, (void *)1, 7, NULL, NULL), DCP_ERR_CAPACITY);
}

#else
static void run_segment_table(void) {}
static void run_pack_and_mask(void) {}
static void run_cu_seqlens(void) {}
static void run_thd_cu_seqlens(void) {}
static void run_padding_mask_and_sanitize(void) {}
static void run_cp_slice(void) {}
static void run_mtp_roll(void) {}
static void run_gdn_pad(void) {}
static void run_launch_errors(void) {}
static void run_digest(void) {}
static void run_mover_land(void) {}
#endif

DCP_TEST(input_digest)
{
    REQUIRE_GPU();
    run_digest();
}

DCP_TEST(segment_table_kernel)
{
    REQUIRE_GPU();
    run_segment_table();
}

DCP_TEST(mover_landing_and_digest_equal_the_cpu_mover)
{
    REQUIRE_GPU();
    run_mover_land();
}

DCP_TEST(pack_and_padding_mask_from_layout)
{
    REQUIRE_GPU();
    run_pack_and_mask();
}

DCP_TEST(cu_seqlens_scan)
{
    REQUIRE_GPU();
    run_cu_seqlens();
}

DCP_TEST(thd_padded_cu_seqlens)
{
    REQUIRE_GPU();
    run_thd_cu_seqlens();
}

DCP_TEST(reference_padding_mask_and_sanitise)
{
    REQUIRE_GPU();
    run_padding_mask_and_sanitize();
}

DCP_TEST(cp_slice_layout_and_direct_slice)
{
    REQUIRE_GPU();
    run_cp_slice();
}

DCP_TEST(mtp_roll_kernels)
{
    REQUIRE_GPU();
    run_mtp_roll();
}

DCP_TEST(gdn_pad_and_strip)
{
    REQUIRE_GPU();
    run_gdn_pad();
}

DCP_TEST(launch_errors_are_statuses)
{
    REQUIRE_GPU();
    run_launch_errors();
}
