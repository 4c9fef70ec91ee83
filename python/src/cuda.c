#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"
#include <cuda_runtime_api.h>

/* The CUDA runtime calls of the binding (a build with CUDA; cuda_stub.c otherwise). */

const int binding_have_cuda = 1;

PyObject *m_cuda_set_device(PyObject *m, PyObject *arg)
{
    (void)m;
    long device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
    cudaError_t ce = cudaSetDevice((int)device);
    if (ce != cudaSuccess) return raise_status(DCP_ERR_CUDA, cudaGetErrorString(ce));
    Py_RETURN_NONE;
}
