/*
 * test_fuzz_plan_ahead_seeds.c - fuzz/fuzz_plan_ahead.c's properties over its
 * committed seeds (fuzz/corpus/plan_ahead/, one per change the target makes,
 * under three schedulers), without libFuzzer: a plan made ahead matches
 * exactly when nothing that decides it changed.  A broken property traps
 * (DCP_FUZZ_ASSERT), which fails the case.
 */
#define _DEFAULT_SOURCE
#include "dcp_test.h"

#include "../fuzz/fuzz_plan_ahead.c"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

DCP_TEST(every_seed_keeps_the_properties)
{
    char dir_path[4096];
    snprintf(dir_path, sizeof dir_path, "%s/fuzz/corpus/plan_ahead", DCP_SOURCE_DIR);
    DIR *dir = opendir(dir_path);
    DCP_REQUIRE(dir != NULL);
    int files = 0;
    static uint8_t data[1 << 16];
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.') continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        FILE *f = fopen(path, "rb");
        DCP_REQUIRE(f != NULL);
        const size_t size = fread(data, 1, sizeof data, f);
        fclose(f);
        LLVMFuzzerTestOneInput(data, size);
        files++;
    }
    closedir(dir);
    DCP_CHECK(files >= 27); /* every change under each scheduler */
}
