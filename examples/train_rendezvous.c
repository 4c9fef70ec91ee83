/*
 * train_rendezvous.c - rank 0 publishes the job's rendezvous (the NCCL unique id, or the shared-memory
 * segment's name) in a file, written under a temporary name and renamed; the others poll for it.
 */
#define _POSIX_C_SOURCE 200809L
#include "train_loop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void job_token(const options *o, char *out, size_t size)
{
    const char *id = o->job_id;
    if (!id) id = getenv("DCP_JOB_ID");
    if (!id) id = getenv("TORCHELASTIC_RUN_ID");
    if (!id) id = getenv("SLURM_JOB_ID");
    if (!id || !*id) id = "default";
    size_t i = 0;
    for (; id[i] && i + 1 < size && i < 100; i++) {
        char ch = id[i];
        int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                   ch == '_' || ch == '.';
        out[i] = keep ? ch : '_';
    }
    out[i] = '\0';
}

int publish(const char *path, const char *job, const char *comm, const char *payload)
{
    char tmp[4096];
    const int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) { /* a cut name would publish some other file */
        fprintf(stderr, "rank 0: cannot publish %s: the path is too long\n", path);
        return 0;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "rank 0: cannot write %s: %s\n", tmp, strerror(errno));
        return 0;
    }
    int ok = fprintf(f, "dcpack-rendezvous 1 %s %s %s\n", job, comm, payload) > 0;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "rank 0: cannot publish %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 0;
    }
    return 1;
}

int await_rendezvous(int32_t rank, const char *path, const char *job, const char *comm, char *payload,
                            size_t payload_size, int32_t timeout_ms)
{
    const double until = now_ms() + timeout_ms;
    char line[1024], f_job[256], f_comm[16], f_payload[600];
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            int version = 0;
            int got = fgets(line, sizeof line, f) != NULL;
            fclose(f);
            if (got && sscanf(line, "dcpack-rendezvous %d %255s %15s %599s", &version, f_job, f_comm, f_payload) == 4 &&
                version == 1 && !strcmp(f_job, job) && !strcmp(f_comm, comm) && strlen(f_payload) < payload_size) {
                strcpy(payload, f_payload);
                return 1;
            }
        }
        if (now_ms() > until) {
            fprintf(stderr, "rank %d: no rendezvous from rank 0 for job %s in %s within %d ms\n", rank, job, path,
                    timeout_ms);
            return 0;
        }
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
    }
}
