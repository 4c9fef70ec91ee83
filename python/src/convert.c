#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

PyObject *errors_by_code;
PyObject *error_base;

/* Raise the exception of `status` with `message`; returns NULL for convenience. */
PyObject *raise_status(dcp_status status, const char *message)
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

PyObject *raise_invalid(const char *message) { return raise_status(DCP_ERR_INVALID_ARGUMENT, message); }

/* ------------------------------------------------------------------------ */
/* Configurations                                                           */
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

static int get_i64_tuple(PyObject *dict, const char *key, int64_t *out);
static PyObject *i64_tuple(const int64_t *values);

/* A configuration dict (every dcp_config field; cost as a dict with kv a sequence) -> dcp_config. */
int config_from_dict(PyObject *dict, dcp_config *c)
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
    /* optional (Planner's max_observations, online calibration): absent means off */
    if (PyDict_GetItemString(dict, "max_observations") && get_i32(dict, "max_observations", &c->max_observations) < 0)
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
        get_i32(cost, "step_model", &c->cost.step_model) < 0 ||
        get_i64(cost, "small_knee", &c->cost.small_knee) < 0 ||
        get_i64(cost, "small_slope", &c->cost.small_slope) < 0 ||
        get_i64(cost, "margin_ppm", &c->cost.margin_ppm) < 0 ||
        get_i32(cost, "pipeline_schedule", &c->cost.pipeline_schedule) < 0 ||
        get_i32(cost, "forward_ppm", &c->cost.forward_ppm) < 0 ||
        get_i64(cost, "first_stage_per_token", &c->cost.first_stage_per_token) < 0 ||
        get_i64(cost, "last_stage_per_token", &c->cost.last_stage_per_token) < 0)
        return -1;
    if (get_i64_tuple(cost, "kv", c->cost.kv) < 0 || get_i64_tuple(cost, "cp_gather", c->cost.cp_gather) < 0)
        return -1;
    return 0;
}

/* A tuple of DCP_MAX_LOG2_CP + 1 ints at dict[key] -> out (per-log2(cp) coefficients). */
static int get_i64_tuple(PyObject *dict, const char *key, int64_t *out)
{
    PyObject *t = PyDict_GetItemString(dict, key);
    if (!t || !PyTuple_Check(t) || PyTuple_Size(t) != DCP_MAX_LOG2_CP + 1) {
        PyErr_Format(PyExc_TypeError, "cost %s must be a tuple of %d ints", key, DCP_MAX_LOG2_CP + 1);
        return -1;
    }
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) {
        long long v = PyLong_AsLongLong(PyTuple_GetItem(t, k));
        if (v == -1 && PyErr_Occurred()) return -1;
        out[k] = (int64_t)v;
    }
    return 0;
}

/* out (DCP_MAX_LOG2_CP + 1 coefficients) -> a new tuple, or NULL with an exception set. */
static PyObject *i64_tuple(const int64_t *values)
{
    PyObject *t = PyTuple_New(DCP_MAX_LOG2_CP + 1);
    if (!t) return NULL;
    for (int k = 0; k <= DCP_MAX_LOG2_CP; k++) {
        PyObject *v = PyLong_FromLongLong(values[k]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, k, v);
    }
    return t;
}

PyObject *config_to_dict(const dcp_config *c)
{
    PyObject *cost = PyDict_New();
    if (!cost) return NULL;
    SET_ITEM(cost, "quadratic", PyLong_FromLongLong(c->cost.quadratic));
    SET_ITEM(cost, "linear", PyLong_FromLongLong(c->cost.linear));
    SET_ITEM(cost, "round_latency", PyLong_FromLongLong(c->cost.round_latency));
    SET_ITEM(cost, "microbatch_overhead", PyLong_FromLongLong(c->cost.microbatch_overhead));
    SET_ITEM(cost, "step_model", PyLong_FromLong(c->cost.step_model));
    SET_ITEM(cost, "small_knee", PyLong_FromLongLong(c->cost.small_knee));
    SET_ITEM(cost, "small_slope", PyLong_FromLongLong(c->cost.small_slope));
    SET_ITEM(cost, "margin_ppm", PyLong_FromLongLong(c->cost.margin_ppm));
    SET_ITEM(cost, "pipeline_schedule", PyLong_FromLong(c->cost.pipeline_schedule));
    SET_ITEM(cost, "forward_ppm", PyLong_FromLong(c->cost.forward_ppm));
    SET_ITEM(cost, "first_stage_per_token", PyLong_FromLongLong(c->cost.first_stage_per_token));
    SET_ITEM(cost, "last_stage_per_token", PyLong_FromLongLong(c->cost.last_stage_per_token));
    SET_ITEM(cost, "kv", i64_tuple(c->cost.kv));
    SET_ITEM(cost, "cp_gather", i64_tuple(c->cost.cp_gather));
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

/* ------------------------------------------------------------------------ */
/* Addresses and the plan descriptor                                        */
/* ------------------------------------------------------------------------ */

/* An address as an int, NULL as None. */
PyObject *addr(const void *p)
{
    if (!p) Py_RETURN_NONE;
    return PyLong_FromVoidPtr((void *)p);
}

int get_addr(PyObject *o, void **out)
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

/*
 * A plan crosses the boundary as a PlanDescriptor: a struct sequence (a named tuple) of the dcp_plan
 * fields, the five arrays as addresses.  Python reads it by name; C by position, in this order.
 */
static PyStructSequence_Field plan_fields[] = {
    {"num_ranks", NULL}, {"num_microbatches", NULL}, {"num_groups", NULL}, {"num_ids", NULL},
    {"microbatch_first_group", "address"}, {"group_first_rank", "address"}, {"group_cp_size", "address"},
    {"group_first_id", "address"}, {"ids", "address"},
    {"max_microbatches", NULL}, {"max_groups", NULL}, {"max_ids", NULL},
    {"config_digest", "where the plan comes from (dcp_plan.config_digest; 0 in a plan dcp_plan_compute did not make)"},
    {"seal", "dcp_plan.seal: a digest of config_digest, the lengths and the arrays"},
    {NULL, NULL},
};
static PyStructSequence_Desc plan_desc = {"dcpack._core.PlanDescriptor",
                                          "A dcp_plan: counts, the addresses of its five arrays, capacities, config digest and seal.",
                                          plan_fields, 14};
PyTypeObject *PlanDescriptorType;

/* A plan handed in as a PlanDescriptor (or any 14-tuple in its order; a 12-tuple has no digest and seal). */
int plan_from_tuple(PyObject *t, dcp_plan *p)
{
    Py_ssize_t size = PyTuple_Check(t) ? PyTuple_Size(t) : -1;
    if (size != 12 && size != 14) {
        PyErr_SetString(PyExc_TypeError, "plan descriptor must be a PlanDescriptor");
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
    p->config_digest = 0;
    p->seal = 0;
    p->source = DCP_PLAN_SOURCE_SEARCH;
    if (size == 14) {
        uint64_t *digests[2] = {&p->config_digest, &p->seal};
        for (int i = 0; i < 2; i++) {
            unsigned long long v = PyLong_AsUnsignedLongLong(PyTuple_GetItem(t, 12 + i));
            if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
            *digests[i] = (uint64_t)v;
        }
    }
    return 0;
}

PyObject *plan_to_tuple(const dcp_plan *p)
{
    PyObject *items[14] = {PyLong_FromLong(p->num_ranks), PyLong_FromLong(p->num_microbatches),
                           PyLong_FromLong(p->num_groups), PyLong_FromLong(p->num_ids),
                           addr(p->microbatch_first_group), addr(p->group_first_rank), addr(p->group_cp_size),
                           addr(p->group_first_id), addr(p->ids), PyLong_FromLong(p->max_microbatches),
                           PyLong_FromLong(p->max_groups), PyLong_FromLong(p->max_ids),
                           PyLong_FromUnsignedLongLong(p->config_digest), PyLong_FromUnsignedLongLong(p->seal)};
    PyObject *d = PyStructSequence_New(PlanDescriptorType);
    for (int i = 0; i < 14; i++) {
        if (!d || !items[i]) {
            for (int k = i; k < 14; k++) Py_XDECREF(items[k]);
            Py_XDECREF(d);
            return NULL;
        }
        PyStructSequence_SetItem(d, i, items[i]); /* steals */
    }
    return d;
}

int plan_descriptor_init(PyObject *module)
{
    PlanDescriptorType = PyStructSequence_NewType(&plan_desc);
    if (!PlanDescriptorType) return -1;
    Py_INCREF(PlanDescriptorType);
    return PyModule_AddObject(module, "PlanDescriptor", (PyObject *)PlanDescriptorType);
}
