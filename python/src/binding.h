/*
 * binding.h - what the files of dcpack._core (the CPython binding of dcpack.h) share.
 *
 * Written against the Limited API of CPython 3.10 (one abi3 module serves every later version).
 * The binding is deliberately thin: the Python package (python/dcpack/) checks arguments, turns arrays
 * and tensors into addresses and lengths, and wraps results in numpy or torch views; these files own
 * the C objects, convert configurations, release the GIL around every call that plans or steps, and
 * turn a dcp_status into the exception of that status.  Addresses cross the boundary as Python ints;
 * only the package's own modules call these functions, with addresses of arrays they hold for the
 * duration of the call.
 *
 *   convert.c          errors, configurations, addresses, the plan descriptor
 *   comm.c             World (the in-process world) and Comm (a rank's communicator)
 *   context.c          Context: one dcp_context, planning (plan, stats, validate), lifetime
 *   step.c             Context.step: the sample table in columns, dcp_step, the microbatch table
 *   observe.c          online calibration: observe, observe_matrix, observe_groups, observe_predict, observe_status
 *   nccl.c / nccl_stub.c   NCCL communicators (the stub raises UnsupportedError: built without NCCL)
 *   cuda.c / cuda_stub.c   the CUDA runtime calls (the stub: built without CUDA)
 *   profile.c          cost profiles: the library's reader and writer of the profile format
 *   module.c           module functions and PyInit__core
 */
#ifndef DCPACK_PY_BINDING_H
#define DCPACK_PY_BINDING_H

#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
/* -- observe.c ---------------------------------------------------------------------------------------- */

PyObject *m_observe(PyObject *m, PyObject *args);
PyObject *m_observe_matrix(PyObject *m, PyObject *args);
PyObject *m_observe_groups(PyObject *m, PyObject *args);
PyObject *m_observe_predict(PyObject *m, PyObject *args);
PyObject *m_observe_status(PyObject *m, PyObject *arg);
int observe_init(PyObject *module);

#endif
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
/* -- observe.c ---------------------------------------------------------------------------------------- */

PyObject *m_observe(PyObject *m, PyObject *args);
PyObject *m_observe_matrix(PyObject *m, PyObject *args);
PyObject *m_observe_groups(PyObject *m, PyObject *args);
PyObject *m_observe_predict(PyObject *m, PyObject *args);
PyObject *m_observe_status(PyObject *m, PyObject *arg);
int observe_init(PyObject *module);

#endif
#include <Python.h>

#include "dcpack.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -- convert.c ---------------------------------------------------------------------------------------- */

extern PyObject *errors_by_code; /* {status int: exception class}, from dcpack._errors */
extern PyObject *error_base;     /* dcpack.Error */
extern PyTypeObject *PlanDescriptorType;

PyObject *raise_status(dcp_status status, const char *message);
PyObject *raise_invalid(const char *message);
int config_from_dict(PyObject *dict, dcp_config *c);
PyObject *config_to_dict(const dcp_config *c);
PyObject *addr(const void *p);
int get_addr(PyObject *o, void **out);
int plan_from_tuple(PyObject *t, dcp_plan *p);
PyObject *plan_to_tuple(const dcp_plan *p);
int plan_descriptor_init(PyObject *module);

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

/* -- profile.c ---------------------------------------------------------------------------------------- */

PyObject *m_cost_profile_parse(PyObject *self, PyObject *args);
PyObject *m_cost_profile_format(PyObject *self, PyObject *args);

/* -- comm.c ------------------------------------------------------------------------------------------- */

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

extern PyTypeObject *WorldType, *CommType;
int comm_init(PyObject *module);
int comm_arg(PyObject *o, const char *name, CommObject **out);

/* -- nccl.c / nccl_stub.c ----------------------------------------------------------------------------- */

extern const int binding_have_nccl;
void comm_release_nccl(CommObject *self);
PyObject *Comm_split(PyObject *o, PyObject *args);
PyObject *m_nccl_unique_id(PyObject *m, PyObject *unused);
PyObject *m_nccl_comm_create(PyObject *m, PyObject *args);

/* -- cuda.c / cuda_stub.c ----------------------------------------------------------------------------- */

extern const int binding_have_cuda;
PyObject *m_cuda_set_device(PyObject *m, PyObject *arg);

/* -- context.c ---------------------------------------------------------------------------------------- */

/*
 * The context's memory belongs to a capsule, not to the Context object: every view of it (numpy and torch
 * arrays of plans and step outputs) holds the capsule, so close() only drops the Context's reference and
 * the memory is freed when the last view of it dies (docs/python.md: views keep the context alive).
 */
typedef struct {
    PyObject_HEAD
    dcp_context *ctx;    /* NULL once closed */
    PyObject *memory;    /* capsule owning ctx; NULL once closed */
    dcp_config config;
    int busy;
    unsigned long long generation; /* +1 at every plan or step: views of an older generation are stale */
    dcp_sample *samples;
    Py_ssize_t samples_cap;
} ContextObject;

extern PyTypeObject *ContextType;
int context_init(PyObject *module);
int context_enter(ContextObject *self);
PyObject *context_error(ContextObject *self, dcp_status st, const char *what);

/* -- step.c ------------------------------------------------------------------------------------------- */

PyObject *Context_step(PyObject *o, PyObject *args, PyObject *kwds);
PyObject *Context_count_failed_step(PyObject *o, PyObject *unused);
int step_init(PyObject *module);

/* -- observe.c ---------------------------------------------------------------------------------------- */

PyObject *m_observe(PyObject *m, PyObject *args);
PyObject *m_observe_matrix(PyObject *m, PyObject *args);
PyObject *m_observe_groups(PyObject *m, PyObject *args);
PyObject *m_observe_predict(PyObject *m, PyObject *args);
PyObject *m_observe_status(PyObject *m, PyObject *arg);
int observe_init(PyObject *module);

#endif
