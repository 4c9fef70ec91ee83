#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
/*
 * profile.c - cost profiles: dcp_cost_profile_parse() and dcp_cost_profile_format(), so the package
 * reads and writes the dcpack program's format with the program's own rules and messages.
 */
#include "binding.h"

/* A cost dict (CostModel._to_dict()'s keys) -> a model: through a whole configuration, as convert.c reads one. */
static int cost_from_dict(PyObject *cost, dcp_cost_model *out)
{
    if (!PyDict_Check(cost)) {
        PyErr_SetString(PyExc_TypeError, "the cost model must be a dict");
        return -1;
    }
    dcp_config c;
    dcp_config_default(&c);
    PyObject *d = config_to_dict(&c);
    if (!d) return -1;
    if (PyDict_SetItemString(d, "cost", cost) < 0 || config_from_dict(d, &c) < 0) {
        Py_DECREF(d);
        return -1;
    }
    Py_DECREF(d);
    *out = c.cost;
    return 0;
}

/* A model -> its cost dict (config_to_dict's "cost"). */
static PyObject *cost_to_dict(const dcp_cost_model *m)
{
    dcp_config c;
    dcp_config_default(&c);
    c.cost = *m;
    PyObject *d = config_to_dict(&c);
    if (!d) return NULL;
    PyObject *cost = PyDict_GetItemString(d, "cost"); /* borrowed */
    Py_XINCREF(cost);
    Py_DECREF(d);
    return cost;
}

/* cost_profile_parse(data: bytes, name: str, base: dict | None = None) -> (cost dict, time_unit_ps) */
PyObject *m_cost_profile_parse(PyObject *self, PyObject *args)
{
    (void)self;
    const char *data = NULL, *name = NULL;
    Py_ssize_t length = 0;
    PyObject *base = Py_None;
    if (!PyArg_ParseTuple(args, "y#s|O", &data, &length, &name, &base)) return NULL;
    dcp_cost_model model;
    if (base == Py_None) dcp_cost_model_default(&model);
    else if (cost_from_dict(base, &model) < 0) return NULL;
    int64_t unit = 0;
    char message[1024];
    dcp_status st = dcp_cost_profile_parse(data, (size_t)length, name, &model, &unit, message, sizeof message);
    if (st != DCP_OK) return raise_status(st, message);
    PyObject *cost = cost_to_dict(&model);
    if (!cost) return NULL;
    return Py_BuildValue("(NL)", cost, (long long)unit);
}

/* cost_profile_format(cost dict, time_unit_ps) -> str */
PyObject *m_cost_profile_format(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cost = NULL;
    long long unit = 0;
    if (!PyArg_ParseTuple(args, "OL", &cost, &unit)) return NULL;
    dcp_cost_model model;
    if (cost_from_dict(cost, &model) < 0) return NULL;
    char text[4096];
    size_t written = 0;
    dcp_status st = dcp_cost_profile_format(&model, (int64_t)unit, text, sizeof text, &written);
    if (st != DCP_OK) {
        char message[160];
        snprintf(message, sizeof message, "a cost model with step_model %d, pipeline_schedule %d has no profile text",
                 (int)model.step_model, (int)model.pipeline_schedule);
        return raise_status(st, message);
    }
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)written);
}
