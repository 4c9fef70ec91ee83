#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* ------------------------------------------------------------------------ */
/* Context: one dcp_context; planning and lifetime                          */
/* ------------------------------------------------------------------------ */

PyTypeObject *ContextType;

static const char MEMORY_CAPSULE[] = "dcpack._core.context_memory";

static void memory_destroy(PyObject *capsule)
{
    dcp_context_destroy((dcp_context *)PyCapsule_GetPointer(capsule, MEMORY_CAPSULE));
}

static PyObject *Context_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"config", NULL};
    PyObject *dict;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &dict)) return NULL;
    dcp_config config;
    if (config_from_dict(dict, &config) < 0) return NULL;
    char message[256];
    dcp_status st = dcp_config_validate(&config, message, sizeof message);
    if (st != DCP_OK) return raise_status(st, message);
    dcp_context *ctx = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_context_create(&config, &ctx);
    Py_END_ALLOW_THREADS
    if (st != DCP_OK) return raise_status(st, "dcp_context_create could not build the context");
    PyObject *memory = PyCapsule_New(ctx, MEMORY_CAPSULE, memory_destroy);
    if (!memory) {
        dcp_context_destroy(ctx);
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    ContextObject *self = (ContextObject *)alloc(type, 0);
    if (!self) {
        Py_DECREF(memory);
        return NULL;
    }
    self->ctx = ctx;
    self->memory = memory;
    self->config = config;
    return (PyObject *)self;
}

static void Context_dealloc(PyObject *o)
{
    ContextObject *self = (ContextObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    Py_CLEAR(self->memory); /* frees the context unless a view still holds it */
    free(self->samples);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

/* Mark busy; a second thread entering the same context gets an error instead of a data race. */
int context_enter(ContextObject *self)
{
    if (!self->ctx) {
        raise_invalid("the context was closed");
        return -1;
    }
    if (self->busy) {
        raise_invalid("this context is already running a call in another thread (one call at a time per context)");
        return -1;
    }
    self->busy = 1;
    return 0;
}

PyObject *context_error(ContextObject *self, dcp_status st, const char *what)
{
    char message[640];
    const char *last = self->ctx ? dcp_context_last_error(self->ctx) : "";
    if (last && last[0]) snprintf(message, sizeof message, "%s: %.560s", what, last);
    else snprintf(message, sizeof message, "%s failed with %s", what, dcp_status_str(st));
    return raise_status(st, message);
}

static PyObject *Context_plan(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    PyObject *a;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &a, &n)) return NULL;
    void *lengths;
    if (get_addr(a, &lengths) < 0) return NULL;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (context_enter(self) < 0) return NULL;
    self->generation++;
    const dcp_plan *plan = NULL;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_plan_compute(self->ctx, (const int32_t *)lengths, (int32_t)n, &plan);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_plan_compute");
    return plan_to_tuple(plan);
}

/* The arguments (plan descriptor, lengths address, count) of a call on a plan; enters the context. */
static int plan_call_enter(ContextObject *self, PyObject *args, dcp_plan *plan, const int32_t **lengths, int32_t *n)
{
    PyObject *pt, *a;
    Py_ssize_t count;
    void *p;
    if (!PyArg_ParseTuple(args, "OOn", &pt, &a, &count)) return -1;
    if (plan_from_tuple(pt, plan) < 0 || get_addr(a, &p) < 0) return -1;
    if (count > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count"), -1;
    if (context_enter(self) < 0) return -1;
    *lengths = (const int32_t *)p;
    *n = (int32_t)count;
    return 0;
}

static PyObject *Context_stats(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    dcp_plan plan;
    const int32_t *lengths;
    int32_t n;
    if (plan_call_enter(self, args, &plan, &lengths, &n) < 0) return NULL;
    dcp_plan_stats s;
    memset(&s, 0, sizeof s);
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_plan_stats_compute(self->ctx, &plan, lengths, n, &s);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_plan_stats_compute");
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    SET_ITEM(d, "num_microbatches", PyLong_FromLong(s.num_microbatches));
    SET_ITEM(d, "makespan", PyLong_FromLongLong(s.makespan));
    SET_ITEM(d, "lower_bound", PyLong_FromLongLong(s.lower_bound));
    SET_ITEM(d, "quad_makespan", PyLong_FromLongLong(s.quad_makespan));
    SET_ITEM(d, "busy_sum", PyLong_FromLongLong(s.busy_sum));
    SET_ITEM(d, "max_rank_sum", PyLong_FromLongLong(s.max_rank_sum));
    SET_ITEM(d, "cp_size_sum", PyLong_FromLongLong(s.cp_size_sum));
    SET_ITEM(d, "total_tokens", PyLong_FromLongLong(s.total_tokens));
    SET_ITEM(d, "dependency_makespan", PyLong_FromLongLong(s.dependency_makespan));
    SET_ITEM(d, "dependency_lower_bound", PyLong_FromLongLong(s.dependency_lower_bound));
    SET_ITEM(d, "model_makespan", PyLong_FromLongLong(s.model_makespan));
    SET_ITEM(d, "model_lower_bound", PyLong_FromLongLong(s.model_lower_bound));
    SET_ITEM(d, "step_model", PyLong_FromLong(s.step_model));
    SET_ITEM(d, "pipeline_makespan", PyLong_FromLongLong(s.pipeline_makespan));
    SET_ITEM(d, "pipeline_lower_bound", PyLong_FromLongLong(s.pipeline_lower_bound));
    return d;
}

/* -> None when valid, else {invariant, microbatch, rank, id, message}. */
static PyObject *Context_validate(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    dcp_plan plan;
    const int32_t *lengths;
    int32_t n;
    if (plan_call_enter(self, args, &plan, &lengths, &n) < 0) return NULL;
    dcp_plan_violation v;
    memset(&v, 0, sizeof v);
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_plan_validate(self->ctx, &plan, lengths, n, &v);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st == DCP_OK) Py_RETURN_NONE;
    if (st != DCP_ERR_INVALID_PLAN) return context_error(self, st, "dcp_plan_validate");
    return Py_BuildValue("{sisisisiss}", "invariant", (int)v.invariant, "microbatch", v.microbatch, "rank", v.rank,
                         "id", v.id, "message", v.message);
}

/* plan_matches(plan, lengths_address, n) -> True, or False when the plan is not the plan of these lengths
   under this context's configuration (dcp_plan_matches; the reason in last_error()). */
static PyObject *Context_plan_matches(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    dcp_plan plan;
    const int32_t *lengths;
    int32_t n;
    if (plan_call_enter(self, args, &plan, &lengths, &n) < 0) return NULL;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_plan_matches(self->ctx, &plan, lengths, n);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st == DCP_OK) Py_RETURN_TRUE;
    if (st == DCP_ERR_INVALID_ARGUMENT) Py_RETURN_FALSE;
    return context_error(self, st, "dcp_plan_matches");
}

/*
 * gather(comm, step_id, lengths_address, n) -> (global_address, num_global, offsets_address)
 * (dcp_gather over a DP communicator; the arrays live in the context until its next gather, plan or step).
 */
static PyObject *Context_gather(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    PyObject *oc, *ostep, *a;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OOOn", &oc, &ostep, &a, &count)) return NULL;
    CommObject *comm;
    if (comm_arg(oc, "comm", &comm) < 0) return NULL;
    if (!comm) return raise_status(DCP_ERR_NULL_POINTER, "gather needs a communicator");
    unsigned long long step_id = PyLong_AsUnsignedLongLong(ostep);
    if (step_id == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return raise_invalid("step_id must be an int in [0, 2**64)");
    }
    void *lengths;
    if (get_addr(a, &lengths) < 0) return NULL;
    if (count < 0 || count > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (comm->busy) return raise_invalid("the communicator is in use by another running call");
    if (context_enter(self) < 0) return NULL;
    comm->busy++;
    self->generation++;
    const int32_t *global = NULL, *offsets = NULL;
    int32_t num = 0;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_gather(self->ctx, &comm->comm, (uint64_t)step_id, (const int32_t *)lengths, (int32_t)count, &global,
                    &num, &offsets);
    Py_END_ALLOW_THREADS
    comm->busy--;
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_gather");
    return Py_BuildValue("(NiN)", addr(global), (int)num, addr(offsets));
}

static PyObject *Context_last_error(PyObject *o, PyObject *unused)
{
    (void)unused;
    ContextObject *self = (ContextObject *)o;
    return PyUnicode_FromString(self->ctx ? dcp_context_last_error(self->ctx) : "");
}

static PyObject *Context_get_generation(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(((ContextObject *)o)->generation);
}

static PyObject *Context_get_config(PyObject *o, void *closure)
{
    (void)closure;
    return config_to_dict(&((ContextObject *)o)->config);
}

static PyObject *Context_get_workspace_bytes(PyObject *o, void *closure)
{
    (void)closure;
    ContextObject *self = (ContextObject *)o;
    return PyLong_FromSize_t(self->ctx ? dcp_context_workspace_bytes(self->ctx) : 0);
}

static PyObject *Context_get_scratch_high_water(PyObject *o, void *closure)
{
    (void)closure;
    ContextObject *self = (ContextObject *)o;
    return PyLong_FromSize_t(self->ctx ? dcp_context_scratch_high_water(self->ctx) : 0);
}

static PyObject *Context_attach_cuda(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    PyObject *dp, *hp;
    Py_ssize_t db, hb;
    if (!PyArg_ParseTuple(args, "OnOn", &dp, &db, &hp, &hb)) return NULL;
    void *device, *host;
    if (get_addr(dp, &device) < 0 || get_addr(hp, &host) < 0) return NULL;
    if (db < 0 || hb < 0) return raise_invalid("negative byte count");
    if (context_enter(self) < 0) return NULL;
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_context_attach_cuda(self->ctx, device, (size_t)db, host, (size_t)hb);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_context_attach_cuda");
    Py_RETURN_NONE;
}

/* resync(next_call): dcp_context_resync. */
static PyObject *Context_resync(PyObject *o, PyObject *arg)
{
    ContextObject *self = (ContextObject *)o;
    unsigned long long next = PyLong_AsUnsignedLongLong(arg);
    if (next == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return raise_invalid("next_call must be an int in [0, 2**64)");
    }
    if (context_enter(self) < 0) return NULL;
    dcp_status st = dcp_context_resync(self->ctx, (uint64_t)next);
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_context_resync");
    Py_RETURN_NONE;
}

static PyObject *Context_get_calls(PyObject *o, void *closure)
{
    (void)closure;
    ContextObject *self = (ContextObject *)o;
    return PyLong_FromUnsignedLongLong(self->ctx ? dcp_context_calls(self->ctx) : 0);
}

static PyObject *Context_close(PyObject *o, PyObject *unused)
{
    (void)unused;
    ContextObject *self = (ContextObject *)o;
    if (self->busy) return raise_invalid("the context is running a call in another thread");
    self->ctx = NULL;
    self->generation++;     /* every view goes stale */
    Py_CLEAR(self->memory); /* freed now, or when the last array taken from a view dies */
    Py_RETURN_NONE;
}

static PyObject *Context_get_memory(PyObject *o, void *closure)
{
    (void)closure;
    ContextObject *self = (ContextObject *)o;
    if (!self->memory) return raise_invalid("the context was closed");
    Py_INCREF(self->memory);
    return self->memory;
}

static PyMethodDef Context_methods[] = {
    {"plan", Context_plan, METH_VARARGS, "plan(lengths_address, n) -> plan descriptor (dcp_plan_compute)."},
    {"stats", Context_stats, METH_VARARGS, "stats(plan, lengths_address, n) -> dict (dcp_plan_stats_compute)."},
    {"validate", Context_validate, METH_VARARGS, "validate(plan, lengths_address, n) -> None or violation tuple."},
    {"plan_matches", Context_plan_matches, METH_VARARGS,
     "plan_matches(plan, lengths_address, n) -> bool (dcp_plan_matches)."},
    {"gather", Context_gather, METH_VARARGS,
     "gather(comm, step_id, lengths_address, n) -> (global_address, num_global, offsets_address) (dcp_gather)."},
    {"step", (PyCFunction)(void (*)(void))Context_step, METH_VARARGS | METH_KEYWORDS,
     "step(*, world, ..., samples=columns dict or None, step_id=0) -> dict (dcp_step)."},
    {"count_failed_step", Context_count_failed_step, METH_NOARGS,
     "Count a step this rank gave up on before the library saw it (dcp_step without arguments) -> bool."},
    {"resync", Context_resync, METH_O, "resync(next_call): dcp_context_resync()."},
    {"attach_cuda", Context_attach_cuda, METH_VARARGS, "attach_cuda(device, device_bytes, host, host_bytes)."},
    {"last_error", Context_last_error, METH_NOARGS, "dcp_context_last_error()."},
    {"close", Context_close, METH_NOARGS, "Close the context: views go stale, memory freed once no view holds it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Context_getset[] = {
    {"memory", Context_get_memory, NULL, "The capsule owning the context's memory: what views hold.", NULL},
    {"generation", Context_get_generation, NULL, "Plans and steps so far (views of an older one are stale).", NULL},
    {"config", Context_get_config, NULL, "The configuration as a dict.", NULL},
    {"calls", Context_get_calls, NULL, "dcp_context_calls(): multi-rank calls since creation or the last resync.", NULL},
    {"workspace_bytes", Context_get_workspace_bytes, NULL, "dcp_context_workspace_bytes().", NULL},
    {"scratch_high_water", Context_get_scratch_high_water, NULL, "dcp_context_scratch_high_water().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Context_slots[] = {
    {Py_tp_new, Context_new},
    {Py_tp_dealloc, Context_dealloc},
    {Py_tp_methods, Context_methods},
    {Py_tp_getset, Context_getset},
    {Py_tp_doc, "Context(config: dict): one dcp_context (dcp_context_create)."},
    {0, NULL},
};

static PyType_Spec Context_spec = {"dcpack._core.Context", sizeof(ContextObject), 0, Py_TPFLAGS_DEFAULT,
                                   Context_slots};

int context_init(PyObject *module)
{
    ContextType = (PyTypeObject *)PyType_FromSpec(&Context_spec);
    if (!ContextType) return -1;
    Py_INCREF(ContextType);
    return PyModule_AddObject(module, "Context", (PyObject *)ContextType);
}
