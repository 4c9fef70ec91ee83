#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* ------------------------------------------------------------------------ */
/* Online calibration: module functions on a Context (dcpack.h, "Online calibration") */
/* ------------------------------------------------------------------------ */

static int context_arg(PyObject *o, ContextObject **out)
{
    if (!PyObject_TypeCheck(o, ContextType)) {
        raise_invalid("expected a dcpack._core.Context");
        return -1;
    }
    *out = (ContextObject *)o;
    return 0;
}

static int addr_arg(PyObject *o, void **p)
{
    return get_addr(o, p);
}

/* observe_matrix(ctx, plan, lengths_address, n, times_address): dcp_observe_matrix. */
PyObject *m_observe_matrix(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *co, *pt, *la, *ta;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOnO", &co, &pt, &la, &n, &ta)) return NULL;
    ContextObject *self;
    dcp_plan plan;
    void *lengths = NULL, *times;
    const int last_step = pt == Py_None;
    if (context_arg(co, &self) < 0 || (!last_step && (plan_from_tuple(pt, &plan) < 0 || addr_arg(la, &lengths) < 0)) ||
        addr_arg(ta, &times) < 0)
        return NULL;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (context_enter(self) < 0) return NULL;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_observe_matrix(self->ctx, last_step ? NULL : &plan, (const int32_t *)lengths, (int32_t)n,
                            (const int64_t *)times);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_observe_matrix");
    Py_RETURN_NONE;
}

/* observe(ctx, plan, lengths_address, n, my_times_address, comm, step_id): dcp_observe, collective. */
PyObject *m_observe(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *co, *pt, *la, *ta, *cm;
    Py_ssize_t n;
    unsigned long long step_id;
    if (!PyArg_ParseTuple(args, "OOOnOOK", &co, &pt, &la, &n, &ta, &cm, &step_id)) return NULL;
    ContextObject *self;
    CommObject *comm;
    dcp_plan plan;
    void *lengths = NULL, *times;
    const int last_step = pt == Py_None; /* the context's last step's plan and lengths */
    if (context_arg(co, &self) < 0 || (!last_step && (plan_from_tuple(pt, &plan) < 0 || addr_arg(la, &lengths) < 0)) ||
        addr_arg(ta, &times) < 0 || comm_arg(cm, "comm", &comm) < 0)
        return NULL;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (!comm) return raise_status(DCP_ERR_NULL_POINTER, "observe needs a communicator");
    if (comm->busy) return raise_invalid("the communicator is in use by another running call");
    if (context_enter(self) < 0) return NULL;
    comm->busy = 1;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_observe(self->ctx, last_step ? NULL : &plan, (const int32_t *)lengths, (int32_t)n, (const int64_t *)times,
                     &comm->comm, (uint64_t)step_id);
    Py_END_ALLOW_THREADS
    comm->busy = 0;
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_observe");
    Py_RETURN_NONE;
}

/* observe_groups(ctx, num_groups, cp_address, first_address, lengths_address, times_address). */
PyObject *m_observe_groups(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *co, *ca, *fa, *la, *ta;
    Py_ssize_t g;
    if (!PyArg_ParseTuple(args, "OnOOOO", &co, &g, &ca, &fa, &la, &ta)) return NULL;
    ContextObject *self;
    void *cps, *first, *lengths, *times;
    if (context_arg(co, &self) < 0 || addr_arg(ca, &cps) < 0 || addr_arg(fa, &first) < 0 ||
        addr_arg(la, &lengths) < 0 || addr_arg(ta, &times) < 0)
        return NULL;
    if (g > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more groups than int32 can count");
    if (context_enter(self) < 0) return NULL;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_observe_groups(self->ctx, (int32_t)g, (const int32_t *)cps, (const int32_t *)first,
                            (const int32_t *)lengths, (const int64_t *)times);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_observe_groups");
    Py_RETURN_NONE;
}

/* observe_predict(ctx, plan, lengths_address, n, out_address): dcp_observe_predict. */
PyObject *m_observe_predict(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *co, *pt, *la, *oa;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOnO", &co, &pt, &la, &n, &oa)) return NULL;
    ContextObject *self;
    dcp_plan plan;
    void *lengths, *out;
    if (context_arg(co, &self) < 0 || plan_from_tuple(pt, &plan) < 0 || addr_arg(la, &lengths) < 0 ||
        addr_arg(oa, &out) < 0)
        return NULL;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (context_enter(self) < 0) return NULL;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_observe_predict(self->ctx, &plan, (const int32_t *)lengths, (int32_t)n, (int64_t *)out);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_observe_predict");
    Py_RETURN_NONE;
}

/* observe_status(ctx) -> dict of dcp_observe_report, with "cost": the context's current cost model. */
PyObject *m_observe_status(PyObject *m, PyObject *arg)
{
    (void)m;
    ContextObject *self;
    if (context_arg(arg, &self) < 0) return NULL;
    if (!self->ctx) return raise_invalid("the context was closed");
    dcp_observe_report r;
    dcp_observe_status(self->ctx, &r);
    PyObject *config = config_to_dict(dcp_context_config(self->ctx));
    if (!config) return NULL;
    PyObject *cost = PyDict_GetItemString(config, "cost"); /* borrowed */
    Py_XINCREF(cost);
    Py_DECREF(config);
    if (!cost) return raise_invalid("the configuration has no cost model");
    PyObject *d = PyDict_New();
    if (!d) {
        Py_DECREF(cost);
        return NULL;
    }
    if (PyDict_SetItemString(d, "cost", cost) < 0) {
        Py_DECREF(cost);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(cost);
    SET_ITEM(d, "steps", PyLong_FromLongLong(r.steps));
    SET_ITEM(d, "rows", PyLong_FromLong(r.rows));
    SET_ITEM(d, "rows_used", PyLong_FromLong(r.rows_used));
    SET_ITEM(d, "identified", PyLong_FromUnsignedLong(r.identified));
    SET_ITEM(d, "fit_error_ppm", PyLong_FromLongLong(r.fit_error_ppm));
    SET_ITEM(d, "predict_error_ppm", PyLong_FromLongLong(r.predict_error_ppm));
    SET_ITEM(d, "margin_ppm", PyLong_FromLongLong(r.margin_ppm));
    SET_ITEM(d, "digest", PyLong_FromUnsignedLongLong(r.digest));
    return d;
}

int observe_init(PyObject *module)
{
    return PyModule_AddIntConstant(module, "OBSERVE_MISSING", (long)DCP_OBSERVE_MISSING) < 0 ||
                   PyModule_AddIntConstant(module, "TERM_SCALE", DCP_TERM_SCALE) < 0 ||
                   PyModule_AddIntConstant(module, "TERM_QUADRATIC", DCP_TERM_QUADRATIC) < 0 ||
                   PyModule_AddIntConstant(module, "TERM_LINEAR", DCP_TERM_LINEAR) < 0 ||
                   PyModule_AddIntConstant(module, "TERM_OVERHEAD", DCP_TERM_OVERHEAD) < 0 ||
                   PyModule_AddIntConstant(module, "TERM_ROUND_LATENCY", DCP_TERM_ROUND_LATENCY) < 0 ||
                   PyModule_AddIntConstant(module, "TERM_SMALL", DCP_TERM_SMALL) < 0
               ? -1
               : 0;
}
