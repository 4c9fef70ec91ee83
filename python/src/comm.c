#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

PyTypeObject *WorldType, *CommType;

/* ------------------------------------------------------------------------ */
/* World: dcp_inproc_world                                                  */
/* ------------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------------ */
/* Comm: one rank's dcp_comm                                                */
/* ------------------------------------------------------------------------ */

static void Comm_release(CommObject *self)
{
    if (!self->live) return;
    self->live = 0;
    if (self->kind == COMM_NCCL) comm_release_nccl(self);
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

/* A communicator argument of a step: a live Comm or None. */
int comm_arg(PyObject *o, const char *name, CommObject **out)
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

int comm_init(PyObject *module)
{
    WorldType = (PyTypeObject *)PyType_FromSpec(&World_spec);
    CommType = (PyTypeObject *)PyType_FromSpec(&Comm_spec);
    if (!WorldType || !CommType) return -1;
    Py_INCREF(WorldType);
    Py_INCREF(CommType);
    if (PyModule_AddObject(module, "World", (PyObject *)WorldType) < 0 ||
        PyModule_AddObject(module, "Comm", (PyObject *)CommType) < 0)
        return -1;
    return 0;
}
