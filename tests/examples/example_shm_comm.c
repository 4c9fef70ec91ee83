/*
 * example_shm_comm.c - the example's shared-memory communicator (examples/shm_comm.h)
 * between 4 forked processes: every operation moves the right bytes; sizes that
 * disagree are DCP_ERR_CORRUPT_INPUT and a rank's unusable arguments its own
 * status, on every rank, and the communicator works on afterwards; agree names
 * the lowest failing rank; split orders by key; a rank that never arrives is
 * DCP_ERR_TIMEOUT on every other rank within the timeout (2 s times
 * DCP_TEST_TIME_SCALE), and so is every later
 * operation; abort fails the job for everyone.  Exits 0 when every rank passed.
 * `example_shm_comm rendezvous [ROUNDS]`: the openers wait through rank 0's
 * set-up (an empty, then a sized but unpublished segment) and meet it, then
 * ROUNDS more rendezvous in a row.
 */
#define _POSIX_C_SOURCE 200809L
#include "shm_comm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 4

static int failures;
#define EXPECT(cond, ...)                                                                                          \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            fprintf(stderr, "rank %d: line %d: ", me, __LINE__);                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fprintf(stderr, "\n");                                                                                 \
            failures++;                                                                                            \
        }                                                                                                          \
    } while (0)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int rank_main(int me, const char *name, int32_t timeout_ms)
{
    shm_job *job = NULL;
    char message[256];
    dcp_status s = DCP_ERR_COMM;
    /* rank 0 creates the segment; the others wait in shm_job_open until rank 0 has published it */
    s = shm_job_open(name, N, me, 1 << 16, timeout_ms, &job, message, sizeof message);
    if (s != DCP_OK) {
        fprintf(stderr, "rank %d: open: %s: %s\n", me, dcp_status_str(s), message);
        return 1;
    }
    dcp_comm world;
    EXPECT(shm_comm_world(job, &world) == DCP_OK && world.rank == me && world.size == N, "world");

    /* all-gather */
    int64_t mine = 100 + me, all[N] = {0};
    EXPECT(world.ops->allgather(&world, &mine, sizeof mine, all) == DCP_OK, "allgather");
    for (int r = 0; r < N; r++) EXPECT(all[r] == 100 + r, "allgather[%d] = %lld", r, (long long)all[r]);
    /* sizes that disagree: corrupt everywhere, nothing written */
    memset(all, 0, sizeof all);
    s = world.ops->allgather(&world, &mine, me == 2 ? 4 : sizeof mine, all);
    EXPECT(s == DCP_ERR_CORRUPT_INPUT, "allgather size mismatch: %s", dcp_status_str(s));
    EXPECT(all[0] == 0 && all[3] == 0, "allgather mismatch wrote");

    /* all-gather-v: rank r sends r+1 bytes */
    unsigned char send[8], recv[16];
    size_t rb[N], ro[N];
    for (int r = 0, at = 0; r < N; r++) rb[r] = (size_t)r + 1, ro[r] = (size_t)at, at += r + 1;
    memset(send, 'a' + me, sizeof send);
    memset(recv, 0, sizeof recv);
    EXPECT(world.ops->allgatherv(&world, send, (size_t)me + 1, recv, rb, ro) == DCP_OK, "allgatherv");
    for (int r = 0; r < N; r++)
        for (size_t k = 0; k < rb[r]; k++) EXPECT(recv[ro[r] + k] == 'a' + r, "allgatherv byte");

    /* all-to-all-v: rank p sends p*N+q (8 bytes) to q */
    int64_t out[N], in[N];
    size_t sb[N], so[N], rbb[N], rof[N];
    for (int q = 0; q < N; q++) {
        out[q] = me * N + q, in[q] = -1;
        sb[q] = rbb[q] = 8, so[q] = rof[q] = (size_t)q * 8;
    }
    EXPECT(world.ops->alltoallv(&world, out, sb, so, in, rbb, rof) == DCP_OK, "alltoallv");
    for (int p = 0; p < N; p++) EXPECT(in[p] == p * N + me, "alltoallv from %d: %lld", p, (long long)in[p]);
    if (me == 1) rbb[3] = 4; /* expects less from rank 3 than it sends */
    s = world.ops->alltoallv(&world, out, sb, so, in, rbb, rof);
    EXPECT(s == DCP_ERR_CORRUPT_INPUT, "alltoallv mismatch: %s", dcp_status_str(s));
    rbb[3] = 8;

    /* broadcast from rank 2; then a NULL buffer on rank 3: its status everywhere */
    int64_t value = me == 2 ? 4242 : 0;
    EXPECT(world.ops->broadcast(&world, &value, sizeof value, 2) == DCP_OK && value == 4242, "broadcast");
    s = world.ops->broadcast(&world, me == 3 ? NULL : &value, sizeof value, 0);
    EXPECT(s == DCP_ERR_NULL_POINTER, "broadcast NULL on rank 3: %s", dcp_status_str(s));

    /* agree: the lowest failing rank */
    dcp_status agreed = DCP_OK;
    int32_t failed = -2;
    EXPECT(world.ops->agree(&world, me >= 2 ? DCP_ERR_CAPACITY - me : DCP_OK, &agreed, &failed) == DCP_OK, "agree");
    EXPECT(agreed == DCP_ERR_CAPACITY - 2 && failed == 2, "agree: %d from %d", (int)agreed, failed);
    EXPECT(world.ops->agree(&world, DCP_OK, &agreed, &failed) == DCP_OK && agreed == DCP_OK && failed == -1,
           "agree all OK");

    /* split: odd and even ranks, ordered by descending key; rank 3 stays out of a third split */
    dcp_comm half, out_of;
    EXPECT(shm_comm_split(&world, me % 2, -me, &half) == DCP_OK && half.size == 2 && half.rank == (me < 2),
           "split: size %d rank %d", half.size, half.rank);
    int64_t pair[2] = {0, 0};
    EXPECT(half.ops->allgather(&half, &mine, sizeof mine, pair) == DCP_OK, "split allgather");
    EXPECT(pair[0] == 100 + (me % 2) + 2 && pair[1] == 100 + (me % 2), "split order %lld %lld", (long long)pair[0],
           (long long)pair[1]);
    EXPECT(shm_comm_split(&world, me == 3 ? -1 : 0, me, &out_of) == DCP_OK && (me == 3) == (out_of.ops == NULL),
           "split color -1");

    /* rank 1 never arrives at the next collective: every other rank times out, then every operation fails */
    if (me == 1) {
        struct timespec pause = {(timeout_ms + 1000) / 1000, ((timeout_ms + 1000) % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    } else {
        double t0 = now_ms();
        s = world.ops->agree(&world, DCP_OK, &agreed, &failed);
        double waited = now_ms() - t0;
        EXPECT(s == DCP_ERR_TIMEOUT && agreed == DCP_ERR_TIMEOUT, "missing rank: %s", dcp_status_str(s));
        EXPECT(waited >= timeout_ms - 100 && waited < timeout_ms + 3000, "timed out after %.0f ms (timeout %d)", waited,
               timeout_ms);
        EXPECT(half.ops->allgather(&half, &mine, sizeof mine, pair) == DCP_ERR_TIMEOUT, "a later operation");
    }
    EXPECT(shm_job_failure(job, message, sizeof message) == DCP_ERR_TIMEOUT && strstr(message, "rank 1 (world)"),
           "job failure: %s", message);
    shm_comm_destroy(&out_of);
    shm_comm_destroy(&half);
    EXPECT(shm_comm_abort(&world) == DCP_OK && world.ops == NULL, "abort");
    shm_job_close(job);
    return failures != 0;
}

/* ---- the rendezvous: openers never map a segment rank 0 has not finished ---- */

static void pause_ms(int ms)
{
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

/* A rank that opens the job (waiting for rank 0 to publish it) and all-gathers over it. */
static int opener_main(int me, const char *name, int32_t timeout_ms)
{
    shm_job *job = NULL;
    char message[256] = "";
    dcp_status s = shm_job_open(name, N, me, 1 << 12, timeout_ms, &job, message, sizeof message);
    EXPECT(s == DCP_OK, "open while rank 0 had not published the segment: %s: %s", dcp_status_str(s), message);
    if (s != DCP_OK) return 1;
    dcp_comm world;
    int64_t mine = 100 + me, all[N] = {0};
    EXPECT(shm_comm_world(job, &world) == DCP_OK, "world");
    EXPECT(world.ops->allgather(&world, &mine, sizeof mine, all) == DCP_OK, "allgather");
    for (int r = 0; r < N; r++) EXPECT(all[r] == 100 + r, "allgather[%d] = %lld", r, (long long)all[r]);
    shm_comm_destroy(&world);
    shm_job_close(job);
    return failures != 0;
}

/*
 * Rank 0 caught in each phase of its set-up, with openers already retrying: the name created but empty (before
 * ftruncate), then sized but not yet published (the magic not yet stored: made here by clearing it).  The
 * openers must wait through both - not fail with "another job", not read a mapping they gave back - and meet
 * rank 0 once it publishes.  Then `rounds` plain rendezvous in a row, openers started with rank 0.
 */
static int rendezvous_main(int32_t timeout_ms, int rounds)
{
    const int me = 0;
    char name[64], message[256] = "";
    snprintf(name, sizeof name, "/dcpack-shm-rendezvous-test-%ld", (long)getpid());
    int bad = 0;
    for (int round = 0; round <= rounds && !bad; round++) {
        const int staged = round == 0;
        if (staged) {
            shm_unlink(name);
            int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600); /* rank 0 before its ftruncate */
            EXPECT(fd >= 0, "shm_open: %s", strerror(errno));
            if (fd >= 0) close(fd);
        }
        pid_t pids[N];
        for (int r = 1; r < N; r++) {
            pids[r] = fork();
            if (pids[r] == 0) _exit(opener_main(r, name, timeout_ms));
        }
        if (staged) pause_ms(100); /* the openers see an empty segment */
        shm_job *job = NULL;
        dcp_status s;
        if (staged) {
            /* sized and set up, then unpublished again: what an opener sees between rank 0's ftruncate and its
               magic; the first 8 bytes of the segment are the magic */
            int fd = -1;
            s = shm_job_open(name, N, 0, 1 << 12, timeout_ms, &job, message, sizeof message);
            uint64_t *magic = MAP_FAILED, saved = 0;
            if (s == DCP_OK && (fd = shm_open(name, O_RDWR, 0)) >= 0)
                magic = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (fd >= 0) close(fd);
            EXPECT(magic != MAP_FAILED, "map the header");
            if (magic != MAP_FAILED) {
                saved = __atomic_exchange_n(magic, 0, __ATOMIC_SEQ_CST);
                pause_ms(100); /* the openers see a sized, unpublished segment */
                __atomic_store_n(magic, saved, __ATOMIC_RELEASE);
                munmap(magic, 4096);
            }
        } else {
            s = shm_job_open(name, N, 0, 1 << 12, timeout_ms, &job, message, sizeof message);
        }
        EXPECT(s == DCP_OK, "rank 0 open: %s: %s", dcp_status_str(s), message);
        if (s == DCP_OK) {
            dcp_comm world;
            int64_t mine = 100, all[N] = {0};
            EXPECT(shm_comm_world(job, &world) == DCP_OK, "world");
            EXPECT(world.ops->allgather(&world, &mine, sizeof mine, all) == DCP_OK, "allgather");
            for (int r = 0; r < N; r++) EXPECT(all[r] == 100 + r, "allgather[%d] = %lld", r, (long long)all[r]);
            shm_comm_destroy(&world);
            shm_job_close(job);
        }
        for (int r = 1; r < N; r++) {
            int status = 0;
            waitpid(pids[r], &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "round %d: rank %d failed (status %d)\n", round, r, status);
                bad = 1;
            }
        }
        bad |= failures != 0;
    }
    shm_unlink(name);
    printf("%s\n", bad ? "FAIL" : "PASS: the shared-memory rendezvous (rank 0 caught mid-way, then repeated rounds)");
    return bad;
}

int main(int argc, char **argv)
{
    /* slow tools (sanitizers, valgrind) stretch the timeout as the other tests do */
    const char *scale_text = getenv("DCP_TEST_TIME_SCALE");
    int scale = scale_text ? atoi(scale_text) : 1;
    if (scale < 1) scale = 1;
    const int32_t timeout_ms = 2000 * scale;
    if (argc > 1 && strcmp(argv[1], "rendezvous") == 0) return rendezvous_main(timeout_ms, argc > 2 ? atoi(argv[2]) : 50);
    char name[64];
    snprintf(name, sizeof name, "/dcpack-shm-comm-test-%ld", (long)getpid());
    pid_t pids[N];
    for (int r = 0; r < N; r++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(rank_main(r, name, timeout_ms));
    }
    int bad = 0;
    for (int r = 0; r < N; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d failed (status %d)\n", r, status);
            bad = 1;
        }
    }
    printf("%s\n", bad ? "FAIL" : "PASS: the shared-memory communicator over 4 processes");
    return bad;
}
