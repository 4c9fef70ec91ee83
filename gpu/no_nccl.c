/*
 * no_nccl.c - the NCCL entry points of dcpack.h in builds without NCCL: no
 * communicator can be made, handles are left without operations.
 */
#include "dcpack.h"

#include <string.h>


int32_t dcp_nccl_available(void) { return 0; }
void dcp_nccl_options_default(dcp_nccl_options *o)
{
    o->timeout_ms = 600000;
    o->host_staging_bytes = (size_t)1 << 20;
}
size_t dcp_nccl_staging_bytes(const dcp_config *config)
{
    (void)config;
    return 0;
}
dcp_status dcp_nccl_comm_init(dcp_comm *comm, void *nccl_comm, void *cuda_stream, const dcp_nccl_options *options)
{
    (void)nccl_comm, (void)cuda_stream, (void)options;
    if (comm) memset(comm, 0, sizeof *comm);
    return DCP_ERR_UNSUPPORTED;
}
dcp_status dcp_nccl_comm_split(dcp_comm *parent, int32_t color, int32_t key, dcp_comm *child)
{
    (void)parent, (void)color, (void)key;
    if (child) memset(child, 0, sizeof *child);
    return DCP_ERR_UNSUPPORTED;
}
void *dcp_nccl_comm_handle(const dcp_comm *comm)
{
    (void)comm;
    return NULL;
}
const char *dcp_nccl_comm_last_error(const dcp_comm *comm)
{
    (void)comm;
    return "built without NCCL";
}
dcp_status dcp_nccl_comm_abort(dcp_comm *comm)
{
    (void)comm;
    return DCP_ERR_UNSUPPORTED;
}
void dcp_nccl_comm_destroy(dcp_comm *comm) { (void)comm; }
dcp_status dcp_nccl_cp_groups_create(dcp_comm *dpxcp, dcp_nccl_cp_groups *groups)
{
    (void)dpxcp;
    if (groups) memset(groups, 0, sizeof *groups);
    return DCP_ERR_UNSUPPORTED;
}
dcp_comm *dcp_nccl_cp_group(dcp_nccl_cp_groups *groups, int32_t local_cp_size)
{
    (void)groups, (void)local_cp_size;
    return NULL;
}
void dcp_nccl_cp_groups_destroy(dcp_nccl_cp_groups *groups) { (void)groups; }
