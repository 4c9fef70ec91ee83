#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* NCCL communicators in a build without NCCL: every call raises UnsupportedError. */

const int binding_have_nccl = 0;

void comm_release_nccl(CommObject *self) { (void)self; }

PyObject *Comm_split(PyObject *o, PyObject *args)
{
    (void)o, (void)args;
    return raise_status(DCP_ERR_UNSUPPORTED, "split needs a live NCCL communicator (dcpack was built without NCCL)");
}

PyObject *m_nccl_unique_id(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return raise_status(DCP_ERR_UNSUPPORTED, "dcpack was built without NCCL");
}

PyObject *m_nccl_comm_create(PyObject *m, PyObject *args)
{
    (void)m, (void)args;
    return raise_status(DCP_ERR_UNSUPPORTED, "dcpack was built without NCCL");
}
