#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* ------------------------------------------------------------------------ */
/* Module functions and PyInit__core                                        */
/* ------------------------------------------------------------------------ */

static PyObject *m_config_default(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    dcp_config c;
    dcp_config_default(&c);
    return config_to_dict(&c);
}

static PyObject *m_config_validate(PyObject *m, PyObject *dict)
{
    (void)m;
    dcp_config c;
    if (config_from_dict(dict, &c) < 0) return NULL;
    char message[256];
    dcp_status st = dcp_config_validate(&c, message, sizeof message);
    if (st != DCP_OK) return raise_status(st, message);
    return PyLong_FromLong(dcp_config_num_ranks(&c));
}

static PyObject *m_workspace_size(PyObject *m, PyObject *dict)
{
    (void)m;
    dcp_config c;
    if (config_from_dict(dict, &c) < 0) return NULL;
    size_t size = 0;
    dcp_status st = dcp_workspace_size(&c, &size);
    if (st != DCP_OK) {
        char message[256];
        dcp_config_validate(&c, message, sizeof message);
        return raise_status(st, message[0] ? message : "dcp_workspace_size failed");
    }
    return PyLong_FromSize_t(size);
}

static PyObject *m_cuda_workspace_size(PyObject *m, PyObject *dict)
{
    (void)m;
    dcp_config c;
    if (config_from_dict(dict, &c) < 0) return NULL;
    size_t device = 0, host = 0;
    dcp_status st = dcp_cuda_workspace_size(&c, &device, &host);
    if (st != DCP_OK) return raise_status(st, "dcp_cuda_workspace_size failed (built without CUDA, or max_tokens_per_rank is 0)");
    return Py_BuildValue("(nn)", (Py_ssize_t)device, (Py_ssize_t)host);
}

static PyObject *m_cost(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *dict;
    long long length;
    int cp;
    if (!PyArg_ParseTuple(args, "OLi", &dict, &length, &cp)) return NULL;
    dcp_config c;
    if (config_from_dict(dict, &c) < 0) return NULL;
    return PyLong_FromLongLong(dcp_cost(&c.cost, length, cp));
}

static PyObject *m_plan_hash(PyObject *m, PyObject *t)
{
    (void)m;
    dcp_plan p;
    if (plan_from_tuple(t, &p) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(dcp_plan_hash(&p));
}

static PyObject *m_plan_group_of_rank(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *t;
    int mb, rank;
    if (!PyArg_ParseTuple(args, "Oii", &t, &mb, &rank)) return NULL;
    dcp_plan p;
    if (plan_from_tuple(t, &p) < 0) return NULL;
    return PyLong_FromLong(dcp_plan_group_of_rank(&p, mb, rank));
}

static PyObject *m_status_str(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(dcp_status_str((dcp_status)v));
}

static PyObject *m_scheduler_from_name(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!name) return NULL;
    dcp_scheduler s;
    if (dcp_scheduler_from_name(name, &s) != DCP_OK) {
        char message[200];
        snprintf(message, sizeof message, "unknown scheduler '%.100s' (dp_balanced, dynamic_cp or balanced)", name);
        return raise_status(DCP_ERR_INVALID_CONFIG, message);
    }
    return PyLong_FromLong((long)s);
}

static PyObject *m_scheduler_name(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(dcp_scheduler_name((dcp_scheduler)v));
}

static PyObject *m_cuda_device_count(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return PyLong_FromLong(dcp_cuda_device_count());
}

static PyObject *m_nccl_available(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return PyBool_FromLong(dcp_nccl_available());
}

static PyObject *m_nccl_staging_bytes(PyObject *m, PyObject *dict)
{
    (void)m;
    dcp_config c;
    if (config_from_dict(dict, &c) < 0) return NULL;
    return PyLong_FromSize_t(dcp_nccl_staging_bytes(&c));
}

static PyMethodDef module_methods[] = {
    {"config_default", m_config_default, METH_NOARGS, "dcp_config_default() as a dict."},
    {"config_validate", m_config_validate, METH_O, "dcp_config_validate(); returns the number of DPxCP ranks."},
    {"workspace_size", m_workspace_size, METH_O, "dcp_workspace_size()."},
    {"cuda_workspace_size", m_cuda_workspace_size, METH_O, "dcp_cuda_workspace_size() -> (device, host)."},
    {"cost", m_cost, METH_VARARGS, "cost(config, length, cp): dcp_cost() with the configuration's cost model."},
    {"cost_profile_parse", m_cost_profile_parse, METH_VARARGS,
     "cost_profile_parse(data: bytes, name: str, base: dict = None) -> (cost dict, time_unit_ps): dcp_cost_profile_parse()."},
    {"cost_profile_format", m_cost_profile_format, METH_VARARGS,
     "cost_profile_format(cost dict, time_unit_ps) -> str: dcp_cost_profile_format()."},
    {"plan_hash", m_plan_hash, METH_O, "dcp_plan_hash() of a plan descriptor."},
    {"plan_group_of_rank", m_plan_group_of_rank, METH_VARARGS, "dcp_plan_group_of_rank()."},
    {"status_str", m_status_str, METH_O, "dcp_status_str()."},
    {"scheduler_from_name", m_scheduler_from_name, METH_O, "dcp_scheduler_from_name()."},
    {"scheduler_name", m_scheduler_name, METH_O, "dcp_scheduler_name()."},
    {"cuda_device_count", m_cuda_device_count, METH_NOARGS, "dcp_cuda_device_count()."},
    {"nccl_available", m_nccl_available, METH_NOARGS, "dcp_nccl_available()."},
    {"nccl_staging_bytes", m_nccl_staging_bytes, METH_O, "dcp_nccl_staging_bytes()."},
    {"nccl_unique_id", m_nccl_unique_id, METH_NOARGS, "ncclGetUniqueId() as 128 bytes."},
    {"nccl_comm_create", m_nccl_comm_create, METH_VARARGS, "ncclCommInitRank + dcp_nccl_comm_init -> Comm."},
    {"cuda_set_device", m_cuda_set_device, METH_O, "cudaSetDevice() in dcpack's CUDA runtime."},
    {"observe", m_observe, METH_VARARGS, "observe(ctx, plan, lengths, n, my_times, comm, step_id): dcp_observe."},
    {"observe_matrix", m_observe_matrix, METH_VARARGS, "observe_matrix(ctx, plan, lengths, n, times): dcp_observe_matrix."},
    {"observe_groups", m_observe_groups, METH_VARARGS,
     "observe_groups(ctx, num_groups, cp_sizes, group_first, lengths, times): dcp_observe_groups."},
    {"observe_predict", m_observe_predict, METH_VARARGS, "observe_predict(ctx, plan, lengths, n, out): dcp_observe_predict."},
    {"observe_status", m_observe_status, METH_O, "observe_status(ctx) -> dict (dcp_observe_status, and the cost model)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "dcpack._core", "The C binding of dcpack.h (private: use the dcpack package).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

static int add_int(PyObject *m, const char *name, long v) { return PyModule_AddIntConstant(m, name, v); }

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *errors = PyImport_ImportModule("dcpack._errors");
    if (!errors) return NULL;
    errors_by_code = PyObject_GetAttrString(errors, "_BY_CODE");
    error_base = PyObject_GetAttrString(errors, "Error");
    Py_DECREF(errors);
    if (!errors_by_code || !error_base) return NULL;

    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (plan_descriptor_init(m) < 0 || comm_init(m) < 0 || context_init(m) < 0 || step_init(m) < 0 ||
        observe_init(m) < 0)
        goto fail;
    if (add_int(m, "VERSION_MAJOR", DCP_VERSION_MAJOR) < 0 || add_int(m, "VERSION_MINOR", DCP_VERSION_MINOR) < 0 ||
        add_int(m, "VERSION_PATCH", DCP_VERSION_PATCH) < 0 || add_int(m, "MAX_LOG2_CP", DCP_MAX_LOG2_CP) < 0 ||
        add_int(m, "HAVE_CUDA", binding_have_cuda) < 0 || add_int(m, "HAVE_NCCL", binding_have_nccl) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

