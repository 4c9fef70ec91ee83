/*
 * dcpack_module.c - dcpack._core, the CPython binding of dcpack.h.
 *
 * Written against the Limited API of CPython 3.10 (one abi3 module serves
 * every later version).  This layer is deliberately thin: the Python package
 * (python/dcpack/) checks arguments, turns arrays and tensors into addresses
 * and lengths, and wraps results in numpy or torch views; this file owns the
 * C objects (contexts, in-process worlds, communicators), converts
 * configurations, releases the GIL around every call that plans or steps,
 * and turns a dcp_status into the exception of that status.
 *
 * Addresses cross this boundary as Python ints.  Only the package's own
 * modules call these functions, always with addresses of arrays they hold
 * references to for the duration of the call.
 */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dcpack.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef DCP_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

static PyObject *errors_by_code; /* {status int: exception class}, from dcpack._errors */
static PyObject *error_base;     /* dcpack.Error */

/* Raise the exception of `status` with `message`; returns NULL for convenience. */
static PyObject *raise_status(dcp_status status, const char *message)
{
    PyObject *code = PyLong_FromLong((long)status);
    if (!code) return NULL;
    PyObject *cls = errors_by_code ? PyDict_GetItemWithError(errors_by_code, code) : NULL;
    Py_DECREF(code);
    if (!cls) {
        if (PyErr_Occurred()) return NULL;
        cls = error_base ? error_base : PyExc_RuntimeError;
    }
    PyObject *exc = PyObject_CallFunction(cls, "ss", message ? message : "", dcp_status_str(status));
    if (!exc) return NULL;
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_invalid(const char *message) { return raise_status(DCP_ERR_INVALID_ARGUMENT, message); }

/* ------------------------------------------------------------------------ */
/* Small conversions                                                        */
/* ------------------------------------------------------------------------ */

static int get_i64(PyObject *dict, const char *key, int64_t *out)
{
    PyObject *v = PyDict_GetItemString(dict, key); /* borrowed */
    if (!v) {
        PyErr_Format(PyExc_KeyError, "configuration key %s is missing", key);
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)x;
    return 0;
}

static int get_i32(PyObject *dict, const char *key, int32_t *out)
{
    int64_t v;
    if (get_i64(dict, key, &v) < 0) return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        char message[160];
        snprintf(message, sizeof message, "%s = %lld does not fit in int32", key, (long long)v);
        raise_status(DCP_ERR_INVALID_CONFIG, message);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* A configuration dict (every dcp_config field; cost as a dict with kv a sequence) -> dcp_config. */
static int config_from_dict(PyObject *dict, dcp_config *c)
{
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "configuration must be a dict");
        return -1;
    }
    dcp_config_default(c);
    int32_t scheduler, tail, partition, effort;
    int64_t fields;
    if (get_i32(dict, "world_size", &c->world_size) < 0 ||
        get_i32(dict, "data_parallel_size", &c->data_parallel_size) < 0 ||
        get_i32(dict, "context_parallel_size", &c->context_parallel_size) < 0 ||
        get_i32(dict, "tensor_parallel_size", &c->tensor_parallel_size) < 0 ||
        get_i32(dict, "pipeline_parallel_size", &c->pipeline_parallel_size) < 0 ||
        get_i32(dict, "virtual_pipeline_size", &c->virtual_pipeline_size) < 0 ||
        get_i32(dict, "microbatch_group_size_per_vp_stage", &c->microbatch_group_size_per_vp_stage) < 0 ||
        get_i32(dict, "scheduler", &scheduler) < 0 || get_i32(dict, "max_sequences", &c->max_sequences) < 0 ||
        get_i32(dict, "max_seqlen_per_rank", &c->max_seqlen_per_rank) < 0 ||
        get_i32(dict, "min_cp_size", &c->min_cp_size) < 0 ||
        get_i32(dict, "max_sequences_per_microbatch", &c->max_sequences_per_microbatch) < 0 ||
        get_i64(dict, "max_tokens_per_rank", &c->max_tokens_per_rank) < 0 ||
        get_i32(dict, "max_microbatches", &c->max_microbatches) < 0 ||
        get_i32(dict, "pad_alignment", &c->pad_alignment) < 0 || get_i64(dict, "fields", &fields) < 0 ||
        get_i32(dict, "pad_to_max_seqlen", &c->pad_to_max_seqlen) < 0 ||
        get_i32(dict, "thd_tail_policy", &tail) < 0 || get_i32(dict, "cp_partition", &partition) < 0 ||
        get_i32(dict, "skip_sibling_data_check", &c->skip_sibling_data_check) < 0 ||
        get_i32(dict, "plan_effort", &effort) < 0)
        return -1;
    if (fields < 0 || fields > (int64_t)UINT32_MAX) {
        raise_status(DCP_ERR_INVALID_CONFIG, "fields does not fit in uint32");
        return -1;
    }
    c->fields = (uint32_t)fields;
    c->scheduler = (dcp_scheduler)scheduler;
    c->thd_tail_policy = (dcp_thd_tail)tail;
    c->cp_partition = (dcp_cp_partition)partition;
    c->plan_effort = (dcp_plan_effort)effort;
    PyObject *cost = PyDict_GetItemString(dict, "cost");
    if (!cost || !PyDict_Check(cost)) {
        PyErr_SetString(PyExc_TypeError, "configuration key cost must be a dict");
        return -1;
    }
    if (get_i64(cost, "quadratic", &c->cost.quadratic) < 0 || get_i64(cost, "linear", &c->cost.linear) < 0 ||
        get_i64(cost, "round_latency", &c->cost.round_latency) < 0 ||
        get_i64(cost, "microbatch_overhead", &c->cost.microbatch_overhead) < 0 ||
        get_i32(cost, "step_model", &c->cost.step_model) < 0)
        return -1;
    PyObject *kv = PyDict_GetItemString(cost, "kv");
    if (!kv || !PyTuple_Check(kv) || PyTuple_Size(kv) != DCP_MAX_LOG2_CP + 1) {
        PyErr_Format(PyExc_TypeError, "cost kv must be a tuple of %d ints", DCP_MAX_LOG2_CP + 1);
        return -1;
    }
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) {
        long long v = PyLong_AsLongLong(PyTuple_GetItem(kv, k));
        if (v == -1 && PyErr_Occurred()) return -1;
        c->cost.kv[k] = (int64_t)v;
    }
    return 0;
}

#define SET_ITEM(d, key, expr)                                                                     \
    do {                                                                                           \
        PyObject *v_ = (expr);                                                                     \
        if (!v_ || PyDict_SetItemString((d), (key), v_) < 0) {                                    \
            Py_XDECREF(v_);                                                                        \
            Py_DECREF(d);                                                                          \
            return NULL;                                                                           \
        }                                                                                          \
        Py_DECREF(v_);                                                                             \
    } while (0)

static PyObject *config_to_dict(const dcp_config *c)
{
    PyObject *cost = PyDict_New();
    if (!cost) return NULL;
    SET_ITEM(cost, "quadratic", PyLong_FromLongLong(c->cost.quadratic));
    SET_ITEM(cost, "linear", PyLong_FromLongLong(c->cost.linear));
    SET_ITEM(cost, "round_latency", PyLong_FromLongLong(c->cost.round_latency));
    SET_ITEM(cost, "microbatch_overhead", PyLong_FromLongLong(c->cost.microbatch_overhead));
    SET_ITEM(cost, "step_model", PyLong_FromLong(c->cost.step_model));
    PyObject *kv = PyTuple_New(DCP_MAX_LOG2_CP + 1);
    if (!kv) {
        Py_DECREF(cost);
        return NULL;
    }
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) {
        PyObject *v = PyLong_FromLongLong(c->cost.kv[k]);
        if (!v) {
            Py_DECREF(kv);
            Py_DECREF(cost);
            return NULL;
        }
        PyTuple_SetItem(kv, k, v);
    }
    SET_ITEM(cost, "kv", kv);
    PyObject *d = PyDict_New();
    if (!d) {
        Py_DECREF(cost);
        return NULL;
    }
    SET_ITEM(d, "cost", cost);
    SET_ITEM(d, "world_size", PyLong_FromLong(c->world_size));
    SET_ITEM(d, "data_parallel_size", PyLong_FromLong(c->data_parallel_size));
    SET_ITEM(d, "context_parallel_size", PyLong_FromLong(c->context_parallel_size));
    SET_ITEM(d, "tensor_parallel_size", PyLong_FromLong(c->tensor_parallel_size));
    SET_ITEM(d, "pipeline_parallel_size", PyLong_FromLong(c->pipeline_parallel_size));
    SET_ITEM(d, "virtual_pipeline_size", PyLong_FromLong(c->virtual_pipeline_size));
    SET_ITEM(d, "microbatch_group_size_per_vp_stage", PyLong_FromLong(c->microbatch_group_size_per_vp_stage));
    SET_ITEM(d, "scheduler", PyLong_FromLong((long)c->scheduler));
    SET_ITEM(d, "max_sequences", PyLong_FromLong(c->max_sequences));
    SET_ITEM(d, "max_seqlen_per_rank", PyLong_FromLong(c->max_seqlen_per_rank));
    SET_ITEM(d, "min_cp_size", PyLong_FromLong(c->min_cp_size));
    SET_ITEM(d, "max_sequences_per_microbatch", PyLong_FromLong(c->max_sequences_per_microbatch));
    SET_ITEM(d, "max_tokens_per_rank", PyLong_FromLongLong(c->max_tokens_per_rank));
    SET_ITEM(d, "max_microbatches", PyLong_FromLong(c->max_microbatches));
    SET_ITEM(d, "pad_alignment", PyLong_FromLong(c->pad_alignment));
    SET_ITEM(d, "fields", PyLong_FromUnsignedLong(c->fields));
    SET_ITEM(d, "pad_to_max_seqlen", PyLong_FromLong(c->pad_to_max_seqlen));
    SET_ITEM(d, "thd_tail_policy", PyLong_FromLong((long)c->thd_tail_policy));
    SET_ITEM(d, "cp_partition", PyLong_FromLong((long)c->cp_partition));
    SET_ITEM(d, "skip_sibling_data_check", PyLong_FromLong(c->skip_sibling_data_check));
    SET_ITEM(d, "plan_effort", PyLong_FromLong((long)c->plan_effort));
    return d;
}

/* An address as an int, NULL as None. */
static PyObject *addr(const void *p)
{
    if (!p) Py_RETURN_NONE;
    return PyLong_FromVoidPtr((void *)p);
}

static int get_addr(PyObject *o, void **out)
{
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    void *p = PyLong_AsVoidPtr(o);
    if (!p && PyErr_Occurred()) return -1;
    *out = p;
    return 0;
}

/* A plan handed in as (num_ranks, num_microbatches, num_groups, num_ids, 5 addresses, 3 capacities). */
static int plan_from_tuple(PyObject *t, dcp_plan *p)
{
    if (!PyTuple_Check(t) || PyTuple_Size(t) != 12) {
        PyErr_SetString(PyExc_TypeError, "plan descriptor must be a 12-tuple");
        return -1;
    }
    int32_t *counts[4] = {&p->num_ranks, &p->num_microbatches, &p->num_groups, &p->num_ids};
    for (int i = 0; i < 4; i++) {
        long v = PyLong_AsLong(PyTuple_GetItem(t, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        *counts[i] = (int32_t)v;
    }
    int32_t **arrays[5] = {&p->microbatch_first_group, &p->group_first_rank, &p->group_cp_size, &p->group_first_id,
                           &p->ids};
    for (int i = 0; i < 5; i++) {
        void *a;
        if (get_addr(PyTuple_GetItem(t, 4 + i), &a) < 0) return -1;
        *arrays[i] = (int32_t *)a;
    }
    int32_t *caps[3] = {&p->max_microbatches, &p->max_groups, &p->max_ids};
    for (int i = 0; i < 3; i++) {
        long v = PyLong_AsLong(PyTuple_GetItem(t, 9 + i));
        if (v == -1 && PyErr_Occurred()) return -1;
        *caps[i] = (int32_t)v;
    }
    return 0;
}

static PyObject *plan_to_tuple(const dcp_plan *p)
{
    return Py_BuildValue("(iiiiNNNNNiii)", p->num_ranks, p->num_microbatches, p->num_groups, p->num_ids,
                         addr(p->microbatch_first_group), addr(p->group_first_rank), addr(p->group_cp_size),
                         addr(p->group_first_id), addr(p->ids), p->max_microbatches, p->max_groups, p->max_ids);
}

/* ------------------------------------------------------------------------ */
/* World and Comm                                                           */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    dcp_inproc_world *world;
    int32_t size;
} WorldObject;

enum { COMM_INPROC = 0, COMM_NCCL = 1 };

typedef struct {
    PyObject_HEAD
    dcp_comm comm;
    int kind;
    int busy;
    int live;            /* comm holds a usable backend */
    int owns_nccl;       /* nccl: we created the ncclComm_t (destroy after the backend) */
    void *nccl_handle;
    PyObject *owner;     /* World, or the parent Comm of a split */
} CommObject;

static PyTypeObject *WorldType, *CommType, *ContextType;

static PyObject *World_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"size", "timeout_ms", NULL};
    int size, timeout_ms = 60000;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|i", kwlist, &size, &timeout_ms)) return NULL;
    dcp_inproc_world *w = NULL;
    dcp_status st = dcp_inproc_world_create(size, timeout_ms, &w);
    if (st != DCP_OK) {
        char message[128];
        snprintf(message, sizeof message, "dcp_inproc_world_create(size=%d, timeout_ms=%d) failed", size, timeout_ms);
        return raise_status(st, message);
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    WorldObject *self = (WorldObject *)alloc(type, 0);
    if (!self) {
        dcp_inproc_world_destroy(w);
        return NULL;
    }
    self->world = w;
    self->size = size;
    return (PyObject *)self;
}

static void World_dealloc(PyObject *o)
{
    WorldObject *self = (WorldObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    dcp_inproc_world_destroy(self->world);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *World_comm(PyObject *o, PyObject *args)
{
    WorldObject *self = (WorldObject *)o;
    int rank;
    if (!PyArg_ParseTuple(args, "i", &rank)) return NULL;
    if (rank < 0 || rank >= self->size) {
        char message[96];
        snprintf(message, sizeof message, "rank %d is outside the world of %d ranks", rank, self->size);
        return raise_invalid(message);
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(CommType, Py_tp_alloc);
    CommObject *c = (CommObject *)alloc(CommType, 0);
    if (!c) return NULL;
    memset(&c->comm, 0, sizeof c->comm); /* every field zero (calls included) whatever the backend fills in */
    dcp_status st = dcp_inproc_comm(self->world, rank, &c->comm);
    if (st != DCP_OK) {
        Py_DECREF(c);
        return raise_status(st, "dcp_inproc_comm failed");
    }
    c->kind = COMM_INPROC;
    c->live = 1;
    Py_INCREF(o);
    c->owner = o;
    return (PyObject *)c;
}

static PyObject *World_inject_fault(PyObject *o, PyObject *args)
{
    WorldObject *self = (WorldObject *)o;
    int rank, fault;
    if (!PyArg_ParseTuple(args, "ii", &rank, &fault)) return NULL;
    if (fault < DCP_FAULT_NONE || fault > DCP_FAULT_TRUNCATE) return raise_invalid("unknown fault");
    dcp_status st = dcp_inproc_inject_fault(self->world, rank, (dcp_inproc_fault)fault);
    if (st != DCP_OK) return raise_status(st, "dcp_inproc_inject_fault failed (rank outside the world?)");
    Py_RETURN_NONE;
}

static PyObject *World_get_size(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((WorldObject *)o)->size);
}

static PyMethodDef World_methods[] = {
    {"comm", World_comm, METH_VARARGS, "comm(rank) -> Comm: the communicator of one rank of this world."},
    {"inject_fault", World_inject_fault, METH_VARARGS, "inject_fault(rank, fault): a fault on the rank's next collective."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef World_getset[] = {
    {"size", World_get_size, NULL, "Ranks of the world.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot World_slots[] = {
    {Py_tp_new, World_new},
    {Py_tp_dealloc, World_dealloc},
    {Py_tp_methods, World_methods},
    {Py_tp_getset, World_getset},
    {Py_tp_doc, "World(size, timeout_ms=60000): dcp_inproc_world, ranks as threads of this process."},
    {0, NULL},
};

static PyType_Spec World_spec = {"dcpack._core.World", sizeof(WorldObject), 0, Py_TPFLAGS_DEFAULT, World_slots};

static void Comm_release(CommObject *self)
{
    if (!self->live) return;
    self->live = 0;
#ifdef DCP_HAVE_NCCL
    if (self->kind == COMM_NCCL) {
        void *handle = self->nccl_handle;
        dcp_nccl_comm_destroy(&self->comm);
        if (self->owns_nccl && handle) ncclCommDestroy((ncclComm_t)handle);
    }
#endif
    memset(&self->comm, 0, sizeof self->comm);
}

static void Comm_dealloc(PyObject *o)
{
    CommObject *self = (CommObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    Comm_release(self);
    Py_CLEAR(self->owner);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *Comm_get_rank(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((CommObject *)o)->comm.rank);
}

static PyObject *Comm_get_size(PyObject *o, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((CommObject *)o)->comm.size);
}

static PyObject *Comm_get_kind(PyObject *o, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(((CommObject *)o)->kind == COMM_NCCL ? "nccl" : "inproc");
}

static PyObject *Comm_close(PyObject *o, PyObject *unused)
{
    (void)unused;
    CommObject *self = (CommObject *)o;
    if (self->busy) return raise_invalid("the communicator is in use by a running step");
    Comm_release(self);
    Py_RETURN_NONE;
}

#ifdef DCP_HAVE_NCCL
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
#endif

static PyObject *Comm_split(PyObject *o, PyObject *args)
{
    CommObject *self = (CommObject *)o;
    int color, key;
    if (!PyArg_ParseTuple(args, "ii", &color, &key)) return NULL;
    if (self->kind != COMM_NCCL || !self->live) return raise_status(DCP_ERR_UNSUPPORTED, "split needs a live NCCL communicator");
#ifdef DCP_HAVE_NCCL
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
#else
    return raise_status(DCP_ERR_UNSUPPORTED, "built without NCCL");
#endif
}

static PyObject *Comm_last_error(PyObject *o, PyObject *unused)
{
    (void)unused;
    CommObject *self = (CommObject *)o;
    if (self->kind == COMM_NCCL && self->live) return PyUnicode_FromString(dcp_nccl_comm_last_error(&self->comm));
    return PyUnicode_FromString("");
}

static PyObject *Comm_handle(PyObject *o, PyObject *unused)
{
    (void)unused;
    CommObject *self = (CommObject *)o;
    if (self->kind == COMM_NCCL && self->live) return addr(dcp_nccl_comm_handle(&self->comm));
    Py_RETURN_NONE;
}

static PyMethodDef Comm_methods[] = {
    {"split", Comm_split, METH_VARARGS, "split(color, key) -> Comm | None: ncclCommSplit (NCCL communicators only)."},
    {"close", Comm_close, METH_NOARGS, "Release the backend now (NCCL: destroys the communicator dcpack created)."},
    {"last_error", Comm_last_error, METH_NOARGS, "The NCCL backend's last error message."},
    {"handle", Comm_handle, METH_NOARGS, "The wrapped ncclComm_t as an int, or None."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Comm_getset[] = {
    {"rank", Comm_get_rank, NULL, "This rank's place in the communicator.", NULL},
    {"size", Comm_get_size, NULL, "Ranks of the communicator.", NULL},
    {"kind", Comm_get_kind, NULL, "'inproc' or 'nccl'.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Comm_slots[] = {
    {Py_tp_dealloc, Comm_dealloc},
    {Py_tp_methods, Comm_methods},
    {Py_tp_getset, Comm_getset},
    {Py_tp_doc, "One rank's dcp_comm (in-process or NCCL); made by World.comm() or nccl_comm_create()."},
    {0, NULL},
};

static PyType_Spec Comm_spec = {"dcpack._core.Comm", sizeof(CommObject), 0, Py_TPFLAGS_DEFAULT, Comm_slots};

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    dcp_context *ctx;
    dcp_config config;
    int busy;
    unsigned long long generation; /* +1 at every plan or step: views of an older generation are stale */
    dcp_sample *samples;
    Py_ssize_t samples_cap;
} ContextObject;

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
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    ContextObject *self = (ContextObject *)alloc(type, 0);
    if (!self) {
        dcp_context_destroy(ctx);
        return NULL;
    }
    self->ctx = ctx;
    self->config = config;
    return (PyObject *)self;
}

static void Context_dealloc(PyObject *o)
{
    ContextObject *self = (ContextObject *)o;
    PyTypeObject *tp = Py_TYPE(o);
    dcp_context_destroy(self->ctx);
    free(self->samples);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

/* Mark busy; a second thread entering the same context gets an error instead of a data race. */
static int context_enter(ContextObject *self)
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

static PyObject *context_error(ContextObject *self, dcp_status st, const char *what)
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

static PyObject *Context_stats(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    PyObject *pt, *a;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOn", &pt, &a, &n)) return NULL;
    dcp_plan plan;
    void *lengths;
    if (plan_from_tuple(pt, &plan) < 0 || get_addr(a, &lengths) < 0) return NULL;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (context_enter(self) < 0) return NULL;
    dcp_plan_stats s;
    memset(&s, 0, sizeof s);
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_plan_stats_compute(self->ctx, &plan, (const int32_t *)lengths, (int32_t)n, &s);
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
    return d;
}

/* -> None when valid, else (invariant, microbatch, rank, id, message). */
static PyObject *Context_validate(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    PyObject *pt, *a;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOn", &pt, &a, &n)) return NULL;
    dcp_plan plan;
    void *lengths;
    if (plan_from_tuple(pt, &plan) < 0 || get_addr(a, &lengths) < 0) return NULL;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more lengths than int32 can count");
    if (context_enter(self) < 0) return NULL;
    dcp_plan_violation v;
    memset(&v, 0, sizeof v);
    dcp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_plan_validate(self->ctx, &plan, (const int32_t *)lengths, (int32_t)n, &v);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st == DCP_OK) Py_RETURN_NONE;
    if (st != DCP_ERR_INVALID_PLAN) return context_error(self, st, "dcp_plan_validate");
    return Py_BuildValue("(iiiis)", (int)v.invariant, v.microbatch, v.rank, v.id, v.message);
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

static int comm_arg(PyObject *o, const char *name, CommObject **out)
{
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyObject_TypeCheck(o, CommType)) {
        char message[96];
        snprintf(message, sizeof message, "%s must be a dcpack communicator or None", name);
        raise_invalid(message);
        return -1;
    }
    CommObject *c = (CommObject *)o;
    if (!c->live) {
        char message[96];
        snprintf(message, sizeof message, "%s communicator was closed", name);
        raise_invalid(message);
        return -1;
    }
    *out = c;
    return 0;
}

static PyObject *stats_dict(const dcp_step_stats *s)
{
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    SET_ITEM(d, "tokens_in", PyLong_FromLongLong(s->tokens_in));
    SET_ITEM(d, "tokens_computed", PyLong_FromLongLong(s->tokens_computed));
    SET_ITEM(d, "tokens_out", PyLong_FromLongLong(s->tokens_out));
    SET_ITEM(d, "exchange_bytes_sent", PyLong_FromLongLong(s->exchange_bytes_sent));
    SET_ITEM(d, "exchange_bytes_received", PyLong_FromLongLong(s->exchange_bytes_received));
    SET_ITEM(d, "exchange_bytes_local", PyLong_FromLongLong(s->exchange_bytes_local));
    SET_ITEM(d, "metadata_bytes_received", PyLong_FromLongLong(s->metadata_bytes_received));
    SET_ITEM(d, "broadcast_bytes", PyLong_FromLongLong(s->broadcast_bytes));
    SET_ITEM(d, "reference_bytes_received", PyLong_FromLongLong(s->reference_bytes_received));
    SET_ITEM(d, "collectives", PyLong_FromLong(s->collectives));
    SET_ITEM(d, "time_plan_ns", PyLong_FromLongLong(s->time_plan_ns));
    SET_ITEM(d, "time_stage_ns", PyLong_FromLongLong(s->time_stage_ns));
    SET_ITEM(d, "time_exchange_ns", PyLong_FromLongLong(s->time_exchange_ns));
    SET_ITEM(d, "time_pack_ns", PyLong_FromLongLong(s->time_pack_ns));
    return d;
}

/*
 * A step this rank gave up on before the library saw it (arguments the binding or the package refused)
 * counts on the context like one the library refuses on the calling rank alone: dcp_step without
 * arguments is such a call (counted, no collective).  The peers' next step then meets this rank's next
 * one with different call counts, and every rank gets DCP_ERR_OUT_OF_STEP instead of pairing two
 * different steps.  Not counted: a closed context, or one another thread is running a call on (that
 * call is the step).  The pending exception is kept.  Returns 1 when the call was counted.
 */
static int count_lone_step(ContextObject *self)
{
    if (!self->ctx || self->busy) return 0;
    self->generation++; /* a failed step replaces the previous output too */
    const dcp_step_output *out = NULL;
    (void)dcp_step(self->ctx, NULL, NULL, &out);
    return 1;
}

static PyObject *Context_count_failed_step(PyObject *o, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(count_lone_step((ContextObject *)o));
}

/*
 * step(world, dpcp, tp, pipeline_rank, mtp_virtual_stages, tp_ranks_hold_data, cuda_stream, fields, samples,
 *      step_id=0)
 * samples: None (this rank receives by broadcast) or a list of 9-tuples
 *   (tokens, labels, loss_mask, position_ids, num_tokens, cu_seqlens, num_cu_seqlens, padded_length,
 *    original_length), addresses as ints or None.
 * -> (generation, num_microbatches, num_virtual_stages, num_sequences, seqlen_sum, seqlen_squared_sum,
 *     stats, plan tuple or None, [microbatch tuples])
 * *reached: whether dcp_step ran with these arguments (else Context_step counts the call).
 */
static PyObject *step_call(ContextObject *self, PyObject *args, int *reached)
{
    PyObject *ow, *od, *ot, *ostream, *osamples, *ostep = NULL;
    int pipeline_rank, hold;
    unsigned long mtp, fields;
    if (!PyArg_ParseTuple(args, "OOOikiOkO|O", &ow, &od, &ot, &pipeline_rank, &mtp, &hold, &ostream, &fields,
                          &osamples, &ostep))
        return NULL;
    unsigned long long step_id = 0;
    if (ostep && ostep != Py_None) {
        step_id = PyLong_AsUnsignedLongLong(ostep);
        if (step_id == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return raise_invalid("step_id must be an int in [0, 2**64)");
        }
    }
    CommObject *world, *dpcp, *tp;
    if (comm_arg(ow, "world", &world) < 0 || comm_arg(od, "data_context_parallel", &dpcp) < 0 ||
        comm_arg(ot, "tensor_parallel", &tp) < 0)
        return NULL;
    void *stream;
    if (get_addr(ostream, &stream) < 0) return NULL;
    /* refuse a closed or busy context before the sample table (which a running step reads) is touched;
       the GIL is held from here to context_enter below, so no other call can start in between */
    if (!self->ctx || self->busy) return context_enter(self) < 0 ? NULL : raise_invalid("context state");
    dcp_step_input input;
    memset(&input, 0, sizeof input);
    int has_input = osamples != Py_None;
    if (has_input) {
        if (!PyList_Check(osamples)) {
            PyErr_SetString(PyExc_TypeError, "samples must be a list or None");
            return NULL;
        }
        Py_ssize_t n = PyList_Size(osamples);
        if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more samples than int32 can count");
        if (n > self->samples_cap) {
            Py_ssize_t cap = n < 16 ? 16 : n;
            dcp_sample *p = (dcp_sample *)realloc(self->samples, (size_t)cap * sizeof *p);
            if (!p) return PyErr_NoMemory();
            self->samples = p;
            self->samples_cap = cap;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *t = PyList_GetItem(osamples, i);
            if (!PyTuple_Check(t) || PyTuple_Size(t) != 9) {
                PyErr_SetString(PyExc_TypeError, "each sample descriptor must be a 9-tuple");
                return NULL;
            }
            dcp_sample *s = &self->samples[i];
            void *p[4], *cu;
            for (int k = 0; k < 4; k++)
                if (get_addr(PyTuple_GetItem(t, k), &p[k]) < 0) return NULL;
            if (get_addr(PyTuple_GetItem(t, 5), &cu) < 0) return NULL;
            long long nt = PyLong_AsLongLong(PyTuple_GetItem(t, 4));
            long ncu = PyLong_AsLong(PyTuple_GetItem(t, 6));
            long pl = PyLong_AsLong(PyTuple_GetItem(t, 7));
            long ol = PyLong_AsLong(PyTuple_GetItem(t, 8));
            if (PyErr_Occurred()) return NULL;
            s->tokens = (const int64_t *)p[0];
            s->labels = (const int64_t *)p[1];
            s->loss_mask = (const float *)p[2];
            s->position_ids = (const int64_t *)p[3];
            s->num_tokens = nt;
            s->cu_seqlens = (const int32_t *)cu;
            s->num_cu_seqlens = (int32_t)ncu;
            s->padded_length = (int32_t)pl;
            s->original_length = (int32_t)ol;
        }
        input.samples = self->samples;
        input.num_samples = (int32_t)n;
        input.fields = (uint32_t)fields;
    }
    if (!world) return raise_status(DCP_ERR_NULL_POINTER, "step needs a world communicator");
    CommObject *comms[3] = {world, dpcp, tp};
    for (int i = 0; i < 3; i++)
        if (comms[i] && comms[i]->busy)
            return raise_invalid("a communicator of this step is in use by another running step (one step at a time per rank)");
    if (context_enter(self) < 0) return NULL;
    for (int i = 0; i < 3; i++)
        if (comms[i]) comms[i]->busy++;
    dcp_step_args sa;
    memset(&sa, 0, sizeof sa);
    sa.world = &world->comm;
    sa.data_context_parallel = dpcp ? &dpcp->comm : NULL;
    sa.tensor_parallel = tp ? &tp->comm : NULL;
    sa.pipeline_rank = pipeline_rank;
    sa.mtp_virtual_stages = (uint32_t)mtp;
    sa.tp_ranks_hold_data = hold;
    sa.cuda_stream = stream;
    sa.step_id = (uint64_t)step_id;
    self->generation++;
    const dcp_step_output *out = NULL;
    dcp_status st;
    *reached = 1;
    Py_BEGIN_ALLOW_THREADS
    st = dcp_step(self->ctx, &sa, has_input ? &input : NULL, &out);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 3; i++)
        if (comms[i]) comms[i]->busy--;
    self->busy = 0;
    if (st != DCP_OK) return context_error(self, st, "dcp_step");
    Py_ssize_t count = (Py_ssize_t)out->num_microbatches * out->num_virtual_stages;
    PyObject *list = PyList_New(count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        const dcp_microbatch *m = &out->microbatches[i];
        PyObject *t = Py_BuildValue("(NNNNNNNLiiiiiNN)", addr(m->tokens), addr(m->labels), addr(m->loss_mask),
                                    addr(m->position_ids), addr(m->padding_mask), addr(m->cu_seqlens),
                                    addr(m->cu_seqlens_padded), (long long)m->num_tokens, m->num_cu_seqlens,
                                    m->num_sequences, m->max_seqlen, m->local_cp_size, m->cp_rank,
                                    addr(m->cu_seqlens_host), addr(m->cu_seqlens_padded_host));
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, i, t);
    }
    PyObject *stats = stats_dict(&out->stats);
    PyObject *plan = out->plan ? plan_to_tuple(out->plan) : (Py_INCREF(Py_None), Py_None);
    if (!stats || !plan) {
        Py_XDECREF(stats);
        Py_XDECREF(plan);
        Py_DECREF(list);
        return NULL;
    }
    return Py_BuildValue("(KiiiLLNNN)", self->generation, out->num_microbatches, out->num_virtual_stages,
                         out->num_sequences, (long long)out->seqlen_sum, (long long)out->seqlen_squared_sum, stats,
                         plan, list);
}

static PyObject *Context_step(PyObject *o, PyObject *args)
{
    ContextObject *self = (ContextObject *)o;
    int reached = 0;
    PyObject *result = step_call(self, args, &reached);
    if (!result && !reached) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        count_lone_step(self);
        PyErr_Restore(type, value, traceback);
    }
    return result;
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
    dcp_context_destroy(self->ctx);
    self->ctx = NULL;
    self->generation++;
    Py_RETURN_NONE;
}

static PyMethodDef Context_methods[] = {
    {"plan", Context_plan, METH_VARARGS, "plan(lengths_address, n) -> plan descriptor (dcp_plan_compute)."},
    {"stats", Context_stats, METH_VARARGS, "stats(plan, lengths_address, n) -> dict (dcp_plan_stats_compute)."},
    {"validate", Context_validate, METH_VARARGS, "validate(plan, lengths_address, n) -> None or violation tuple."},
    {"step", Context_step, METH_VARARGS, "step(...) -> output descriptor (dcp_step)."},
    {"count_failed_step", Context_count_failed_step, METH_NOARGS,
     "Count a step this rank gave up on before the library saw it (dcp_step without arguments) -> bool."},
    {"resync", Context_resync, METH_O, "resync(next_call): dcp_context_resync()."},
    {"attach_cuda", Context_attach_cuda, METH_VARARGS, "attach_cuda(device, device_bytes, host, host_bytes)."},
    {"last_error", Context_last_error, METH_NOARGS, "dcp_context_last_error()."},
    {"close", Context_close, METH_NOARGS, "Destroy the context now."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Context_getset[] = {
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

/* ------------------------------------------------------------------------ */
/* Module functions                                                         */
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

static PyObject *m_nccl_unique_id(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
#ifdef DCP_HAVE_NCCL
    ncclUniqueId id;
    ncclResult_t r;
    Py_BEGIN_ALLOW_THREADS
    r = ncclGetUniqueId(&id);
    Py_END_ALLOW_THREADS
    if (r != ncclSuccess) return raise_status(DCP_ERR_NCCL, ncclGetErrorString(r));
    return PyBytes_FromStringAndSize(id.internal, sizeof id.internal);
#else
    return raise_status(DCP_ERR_UNSUPPORTED, "dcpack was built without NCCL");
#endif
}

/* nccl_comm_create(unique_id, nranks, rank, device, stream, timeout_ms, staging_bytes) -> Comm */
static PyObject *m_nccl_comm_create(PyObject *m, PyObject *args)
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
#ifdef DCP_HAVE_NCCL
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
#else
    (void)id_bytes, (void)id_len, (void)nranks, (void)rank, (void)device, (void)ostream, (void)timeout_ms,
        (void)staging;
    return raise_status(DCP_ERR_UNSUPPORTED, "dcpack was built without NCCL");
#endif
}

static PyObject *m_cuda_set_device(PyObject *m, PyObject *arg)
{
    (void)m;
    long device = PyLong_AsLong(arg);
    if (device == -1 && PyErr_Occurred()) return NULL;
#ifdef DCP_HAVE_CUDA
    cudaError_t ce = cudaSetDevice((int)device);
    if (ce != cudaSuccess) return raise_status(DCP_ERR_CUDA, cudaGetErrorString(ce));
    Py_RETURN_NONE;
#else
    return raise_status(DCP_ERR_UNSUPPORTED, "dcpack was built without CUDA");
#endif
}

static PyMethodDef module_methods[] = {
    {"config_default", m_config_default, METH_NOARGS, "dcp_config_default() as a dict."},
    {"config_validate", m_config_validate, METH_O, "dcp_config_validate(); returns the number of DPxCP ranks."},
    {"workspace_size", m_workspace_size, METH_O, "dcp_workspace_size()."},
    {"cuda_workspace_size", m_cuda_workspace_size, METH_O, "dcp_cuda_workspace_size() -> (device, host)."},
    {"cost", m_cost, METH_VARARGS, "cost(config, length, cp): dcp_cost() with the configuration's cost model."},
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
    WorldType = (PyTypeObject *)PyType_FromSpec(&World_spec);
    CommType = (PyTypeObject *)PyType_FromSpec(&Comm_spec);
    ContextType = (PyTypeObject *)PyType_FromSpec(&Context_spec);
    if (!WorldType || !CommType || !ContextType) goto fail;
    Py_INCREF(WorldType);
    Py_INCREF(CommType);
    Py_INCREF(ContextType);
    if (PyModule_AddObject(m, "World", (PyObject *)WorldType) < 0 ||
        PyModule_AddObject(m, "Comm", (PyObject *)CommType) < 0 ||
        PyModule_AddObject(m, "Context", (PyObject *)ContextType) < 0)
        goto fail;
    if (add_int(m, "VERSION_MAJOR", DCP_VERSION_MAJOR) < 0 || add_int(m, "VERSION_MINOR", DCP_VERSION_MINOR) < 0 ||
        add_int(m, "VERSION_PATCH", DCP_VERSION_PATCH) < 0 || add_int(m, "MAX_LOG2_CP", DCP_MAX_LOG2_CP) < 0 ||
#ifdef DCP_HAVE_CUDA
        add_int(m, "HAVE_CUDA", 1) < 0 ||
#else
        add_int(m, "HAVE_CUDA", 0) < 0 ||
#endif
#ifdef DCP_HAVE_NCCL
        add_int(m, "HAVE_NCCL", 1) < 0 ||
#else
        add_int(m, "HAVE_NCCL", 0) < 0 ||
#endif
        0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
