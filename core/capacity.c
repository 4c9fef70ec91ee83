/*
 * capacity.c - a rank's step capacities from the configuration (capacity.h).
 */
#include "capacity.h"
#include "thd/thd.h"
#include "../alloc/arena.h"

int32_t dcp__step_max_microbatches(const dcp_config *c)
{
    return c->max_microbatches > 0 ? c->max_microbatches : c->max_sequences;
}

int64_t dcp__step_cu_capacity(const dcp_config *c)
{
    dcp__thd_params p;
    dcp__thd_params_from_config(c, 1, &p);
    int64_t mb = dcp__step_max_microbatches(c);
    /* each microbatch: its sequences + 1, + 1 for a dummy; or exactly S + 1 */
    int64_t free_form = (int64_t)c->max_sequences + 2 * mb;
    return p.max_packed_sequences > 0 ? mb * ((int64_t)p.max_packed_sequences + 1) + free_form : free_form;
}

/* Pieces one rank may send: <= 2 per (sequence, receiver), receivers of a sequence <= ceil(N / cp); >= 1 token each. */
size_t dcp__step_send_piece_bound(const dcp_config *c)
{
    size_t n = (size_t)dcp_config_num_ranks(c), cp = (size_t)c->context_parallel_size;
    size_t bound = dcp__size_mul(dcp__size_mul(2, (size_t)c->max_sequences), (n + cp - 1) / cp);
    return bound < (size_t)c->max_tokens_per_rank ? bound : (size_t)c->max_tokens_per_rank;
}

size_t dcp__step_group_cu_bound(const dcp_config *c)
{
    dcp__thd_params p;
    dcp__thd_params_from_config(c, 1, &p);
    int64_t entries = (int64_t)c->max_sequences + 2;
    if ((int64_t)p.max_packed_sequences + 1 > entries) entries = (int64_t)p.max_packed_sequences + 1;
    return (size_t)entries;
}
