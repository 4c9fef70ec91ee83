#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"
#include <cuda_runtime_api.h>
#include <nccl.h>

/* NCCL communicators (a build with NCCL; nccl_stub.c otherwise). */

const int binding_have_nccl = 1;

void comm_release_nccl(CommObject *self)
{
    void *handle = self->nccl_handle;
    dcp_nccl_comm_destroy(&self->comm);
    if (self->owns_nccl && handle) ncclCommDestroy((ncclComm_t)handle);
}

static PyObject *make_nccl_comm(PyObject *owner)
{
    allocfunc alloc = (allocfunc)PyType_GetSlot(CommType, Py_tp_alloc);
    CommObject *c = (CommObject *)alloc(CommType, 0);
    if (!c) return NULL;
    memset(&c->comm, 0, sizeof c->comm); /* every field zero (calls included) before init or split fills it */
    c->kind = COMM_NCCL;
    Py_XINCREF(owner);
    c->owner = owner;
    return (PyObject *)c;
}

PyObject *Comm_split(PyObject *o, PyObject *args)
{
    CommObject *self = (CommObject *)o;
    int color, key;
    if (!PyArg_ParseTuple(args, "ii", &color, &key)) return NULL;
    if (self->kind != COMM_NCCL || !self->live) return raise_status(DCP_ERR_UNSUPPORTED, "split needs a live NCCL communicator");
    CommObject *child = (CommObject *)make_nccl_comm(o);
    if (!child) return NULL;
    dcp_status st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_nccl_comm_split(&self->comm, color, key, &child->comm);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) {
        char message[320];
        snprintf(message, sizeof message, "dcp_nccl_comm_split: %.280s", dcp_nccl_comm_last_error(&self->comm));
        Py_DECREF(child);
        return raise_status(st, message);
    }
    if (!child->comm.ops) { /* color < 0: this rank is not in the child */
        Py_DECREF(child);
        Py_RETURN_NONE;
    }
    child->live = 1;
    child->owns_nccl = 0; /* dcp_nccl_comm_destroy releases a split's communicator */
    child->nccl_handle = dcp_nccl_comm_handle(&child->comm);
    return (PyObject *)child;
}

PyObject *m_nccl_unique_id(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    ncclUniqueId id;
    ncclResult_t r;
    Py_BEGIN_ALLOW_THREADS
    r = ncclGetUniqueId(&id);
    Py_END_ALLOW_THREADS
    if (r != ncclSuccess) return raise_status(DCP_ERR_NCCL, ncclGetErrorString(r));
    return PyBytes_FromStringAndSize(id.internal, sizeof id.internal);
}

/* nccl_comm_create(unique_id, nranks, rank, device, stream, timeout_ms, staging_bytes) -> Comm */
PyObject *m_nccl_comm_create(PyObject *m, PyObject *args)
{
    (void)m;
    const char *id_bytes;
    Py_ssize_t id_len;
    int nranks, rank, device, timeout_ms;
    PyObject *ostream;
    Py_ssize_t staging;
    if (!PyArg_ParseTuple(args, "y#iiiOin", &id_bytes, &id_len, &nranks, &rank, &device, &ostream, &timeout_ms,
                          &staging))
        return NULL;
    ncclUniqueId id;
    if (id_len != (Py_ssize_t)sizeof id.internal) return raise_invalid("an NCCL unique id has 128 bytes");
    if (nranks < 1 || rank < 0 || rank >= nranks) return raise_invalid("rank outside [0, nranks)");
    if (staging < 0 || timeout_ms < 0) return raise_invalid("negative staging bytes or timeout");
    void *stream;
    if (get_addr(ostream, &stream) < 0) return NULL;
    memcpy(id.internal, id_bytes, sizeof id.internal);
    CommObject *c = (CommObject *)make_nccl_comm(NULL);
    if (!c) return NULL;
    ncclComm_t comm = NULL;
    ncclResult_t r;
    cudaError_t ce;
    Py_BEGIN_ALLOW_THREADS
    ce = cudaSetDevice(device);
    r = ce == cudaSuccess ? ncclCommInitRank(&comm, nranks, id, rank) : ncclSuccess;
    Py_END_ALLOW_THREADS
    if (ce != cudaSuccess) {
        Py_DECREF(c);
        return raise_status(DCP_ERR_CUDA, cudaGetErrorString(ce));
    }
    if (r != ncclSuccess) {
        Py_DECREF(c);
        return raise_status(DCP_ERR_NCCL, ncclGetErrorString(r));
    }
    dcp_nccl_options opt;
    dcp_nccl_options_default(&opt);
    opt.timeout_ms = timeout_ms;
    if (staging > 0) opt.host_staging_bytes = (size_t)staging;
    dcp_status st = dcp_nccl_comm_init(&c->comm, comm, stream, &opt);
    if (st != DCP_OK) {
        ncclCommDestroy(comm);
        Py_DECREF(c);
        return raise_status(st, "dcp_nccl_comm_init failed");
    }
    c->live = 1;
    c->owns_nccl = 1;
    c->nccl_handle = comm;
    return (PyObject *)c;
}
