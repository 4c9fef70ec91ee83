/*
 * dcp_test.h - the test kit.
 *
 * A test file defines cases with DCP_TEST(name) { ... } at the start of a
 * line; CMake turns each into its own ctest case ("<file>.<name>").  The
 * kit's main() runs the case named on the command line, or all of them.
 * DCP_CHECK* record a failure and go on; DCP_REQUIRE* stop the case.
 * DCP_SKIP(reason) ends a case as skipped (exit code 77, "skipped: reason").
 *
 * The allocation probe reads jemalloc's per-thread counters
 * (thread.allocatedp / thread.deallocatedp) around a region of code, so a
 * test can prove that a step allocates nothing on the heap.
 */
#ifndef DCP_TEST_H
#define DCP_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dcpack.h"

typedef void (*dcp_test_fn)(void);
void dcp_test_register(const char *name, dcp_test_fn fn);
void dcp_test_fail(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void dcp_test_skip(const char *reason);
int dcp_test_failed(void);

#define DCP_TEST(name)                                                                                     \
    static void name(void);                                                                                \
    __attribute__((constructor)) static void name##_register(void) { dcp_test_register(#name, name); }     \
    static void name(void)

#define DCP_CHECK(cond)                                                                                    \
    do {                                                                                                   \
        if (!(cond)) dcp_test_fail(__FILE__, __LINE__, "check failed: %s", #cond);                         \
    } while (0)
#define DCP_REQUIRE(cond)                                                                                  \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            dcp_test_fail(__FILE__, __LINE__, "requirement failed: %s", #cond);                            \
            return;                                                                                        \
        }                                                                                                  \
    } while (0)
#define DCP_CHECK_EQ_INT(a, b)                                                                             \
    do {                                                                                                   \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                              \
        if (va_ != vb_) dcp_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, va_, vb_);     \
    } while (0)
#define DCP_REQUIRE_EQ_INT(a, b)                                                                           \
    do {                                                                                                   \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                              \
        if (va_ != vb_) {                                                                                  \
            dcp_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, va_, vb_);                 \
            return;                                                                                        \
        }                                                                                                  \
    } while (0)
#define DCP_CHECK_STATUS(expr, expected)                                                                   \
    do {                                                                                                   \
        dcp_status got_ = (expr);                                                                          \
        if (got_ != (expected))                                                                            \
            dcp_test_fail(__FILE__, __LINE__, "%s: got %s, expected %s", #expr, dcp_status_str(got_),      \
                          dcp_status_str(expected));                                                       \
    } while (0)
#define DCP_REQUIRE_OK(expr)                                                                               \
    do {                                                                                                   \
        dcp_status got_ = (expr);                                                                          \
        if (got_ != DCP_OK) {                                                                              \
            dcp_test_fail(__FILE__, __LINE__, "%s: %s", #expr, dcp_status_str(got_));                      \
            return;                                                                                        \
        }                                                                                                  \
    } while (0)
/* ... and a message is whole: one cut short for its buffer ends in "..." (dcp__fail) */
#define DCP_CHECK_CONTAINS(haystack, needle)                                                               \
    do {                                                                                                   \
        const char *h_ = (haystack);                                                                       \
        if (!h_ || !strstr(h_, (needle)))                                                                  \
            dcp_test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", needle); \
        else if (dcp_test_message_cut(h_))                                                                 \
            dcp_test_fail(__FILE__, __LINE__, "\"%s\" was cut short", h_);                                 \
    } while (0)
/* 1 when a message ends in the "..." of a message cut for its buffer. */
static inline int dcp_test_message_cut(const char *message)
{
    size_t n = strlen(message);
    return n >= 3 && strcmp(message + n - 3, "...") == 0;
}
#define DCP_SKIP(reason)                                                                                   \
    do {                                                                                                   \
        dcp_test_skip(reason);                                                                             \
        return;                                                                                            \
    } while (0)

/* ---- allocation probe ---- */
typedef struct dcp_alloc_probe {
    uint64_t *allocated;   /* jemalloc's thread.allocatedp */
    uint64_t *deallocated; /* jemalloc's thread.deallocatedp */
    uint64_t allocated_start, deallocated_start;
} dcp_alloc_probe;

/* 1 if the per-thread counters are available (jemalloc linked in), else 0. */
int dcp_alloc_probe_available(void);
/* Start counting on the calling thread. */
void dcp_alloc_probe_begin(dcp_alloc_probe *probe);
/* Bytes allocated on the calling thread since begin (0 when unavailable). */
uint64_t dcp_alloc_probe_allocated(const dcp_alloc_probe *probe);
uint64_t dcp_alloc_probe_deallocated(const dcp_alloc_probe *probe);

/*
 * Run a statement and fail the case if it allocated or freed anything on
 * this thread.  When jemalloc's counters are not linked in (sanitizer and
 * valgrind builds) the statement still runs and the case goes on to its end,
 * so it releases what it holds, and is then reported as skipped.
 */
#define DCP_CHECK_NO_ALLOC(stmt)                                                                           \
    do {                                                                                                   \
        if (!dcp_alloc_probe_available()) {                                                                \
            dcp_test_skip("jemalloc counters not available");                                              \
            stmt;                                                                                          \
            break;                                                                                         \
        }                                                                                                  \
        dcp_alloc_probe probe_;                                                                            \
        dcp_alloc_probe_begin(&probe_);                                                                    \
        stmt;                                                                                              \
        uint64_t a_ = dcp_alloc_probe_allocated(&probe_), d_ = dcp_alloc_probe_deallocated(&probe_);       \
        if (a_ != 0 || d_ != 0)                                                                            \
            dcp_test_fail(__FILE__, __LINE__, "%s allocated %llu and freed %llu bytes", #stmt,             \
                          (unsigned long long)a_, (unsigned long long)d_);                                 \
    } while (0)

/* ---- helpers ---- */
/* Read a trace (one length per line) into `out` (capacity cap); returns the count or -1. */
int dcp_test_read_trace(const char *path, int32_t *out, int cap);
/* Path of a file under the source tree's tests/data/ (static buffer). */
const char *dcp_test_data_path(const char *relative);
/*
 * The dependency makespan of `plan` from its definition (docs/planning.md, step models), rank by rank:
 * O(ranks x microbatches); `finish` holds plan->num_ranks entries.  An independent check of
 * dcp_plan_stats.dependency_makespan.
 */
int64_t dcp_test_simulate_dependency(const dcp_plan *plan, const dcp_cost_model *model, const int32_t *lengths,
                                     int64_t *finish);

#endif
