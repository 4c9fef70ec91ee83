#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* The CUDA runtime calls in a build without CUDA: UnsupportedError. */

const int binding_have_cuda = 0;

PyObject *m_cuda_set_device(PyObject *m, PyObject *arg)
{
    (void)m;
    long device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    return raise_status(DCP_ERR_UNSUPPORTED, "dcpack was built without CUDA");
}
