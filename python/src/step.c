#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include "binding.h"

/* ------------------------------------------------------------------------ */
/* Context.step: dcp_step from Python                                       */
/* ------------------------------------------------------------------------ */

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

PyObject *Context_count_failed_step(PyObject *o, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(count_lone_step((ContextObject *)o));
}

/* The sample table: columns of one entry per sample, each the address of a C array (see step_call). */
typedef struct {
    const uint64_t *field[4];          /* per-sample addresses of tokens, labels, loss_mask, position_ids */
    const int64_t *num_tokens;         /* [n] */
    const uint64_t *cu_seqlens;        /* [n] per-sample addresses (pre-packed samples), or NULL */
    const int32_t *num_cu_seqlens;     /* [n]: entries of a pre-packed sample, -1 for a one-sequence sample */
    const int32_t *original_length;    /* [n], or NULL: every one-sequence sample all real tokens */
} sample_columns;

static const char *const FIELD_KEYS[4] = {"tokens", "labels", "loss_mask", "position_ids"};

/* Read the address a columns dict holds under `key` (None or absent -> NULL). */
static int column(PyObject *dict, const char *key, const void **out)
{
    PyObject *v = PyDict_GetItemString(dict, key); /* borrowed */
    void *p = NULL;
    if (v && get_addr(v, &p) < 0) return -1;
    *out = p;
    return 0;
}

/*
 * Fill self->samples from a columns dict:
 *   {"num_samples": n, "num_tokens": int64[n], "tokens" / "labels" / "loss_mask" / "position_ids": uint64[n]
 *    addresses or None, "cu_seqlens": uint64[n] or None, "num_cu_seqlens": int32[n] or None,
 *    "original_length": int32[n] or None}
 * every value but num_samples the address of the package's array.  Returns n, or -1 with an exception.
 */
static Py_ssize_t samples_from_columns(ContextObject *self, PyObject *cols)
{
    if (!PyDict_Check(cols)) {
        PyErr_SetString(PyExc_TypeError, "samples must be a columns dict or None");
        return -1;
    }
    PyObject *on = PyDict_GetItemString(cols, "num_samples");
    if (!on) {
        PyErr_SetString(PyExc_KeyError, "samples: num_samples is missing");
        return -1;
    }
    Py_ssize_t n = PyLong_AsSsize_t(on);
    if (n == -1 && PyErr_Occurred()) return -1;
    if (n < 0) return raise_invalid("samples: negative num_samples"), -1;
    if (n > INT32_MAX) return raise_status(DCP_ERR_CAPACITY, "more samples than int32 can count"), -1;
    sample_columns c;
    memset(&c, 0, sizeof c);
    for (int k = 0; k < 4; k++)
        if (column(cols, FIELD_KEYS[k], (const void **)&c.field[k]) < 0) return -1;
    if (column(cols, "num_tokens", (const void **)&c.num_tokens) < 0 ||
        column(cols, "cu_seqlens", (const void **)&c.cu_seqlens) < 0 ||
        column(cols, "num_cu_seqlens", (const void **)&c.num_cu_seqlens) < 0 ||
        column(cols, "original_length", (const void **)&c.original_length) < 0)
        return -1;
    if (n > 0 && !c.num_tokens) return raise_invalid("samples: num_tokens is missing"), -1;
    if (!c.cu_seqlens != !c.num_cu_seqlens) return raise_invalid("samples: cu_seqlens without num_cu_seqlens"), -1;
    if (n > self->samples_cap) {
        Py_ssize_t cap = n < 16 ? 16 : n;
        dcp_sample *p = (dcp_sample *)realloc(self->samples, (size_t)cap * sizeof *p);
        if (!p) return PyErr_NoMemory(), -1;
        self->samples = p;
        self->samples_cap = cap;
    }
    char message[160];
    for (Py_ssize_t i = 0; i < n; i++) {
        dcp_sample *s = &self->samples[i];
        s->tokens = c.field[0] ? (const int64_t *)(uintptr_t)c.field[0][i] : NULL;
        s->labels = c.field[1] ? (const int64_t *)(uintptr_t)c.field[1][i] : NULL;
        s->loss_mask = c.field[2] ? (const float *)(uintptr_t)c.field[2][i] : NULL;
        s->position_ids = c.field[3] ? (const int64_t *)(uintptr_t)c.field[3][i] : NULL;
        int64_t nt = c.num_tokens[i];
        s->num_tokens = nt;
        if (c.num_cu_seqlens && c.num_cu_seqlens[i] >= 0) { /* pre-packed */
            s->cu_seqlens = (const int32_t *)(uintptr_t)c.cu_seqlens[i];
            s->num_cu_seqlens = c.num_cu_seqlens[i];
            s->padded_length = 0;
            s->original_length = 0;
            continue;
        }
        if (nt < 0 || nt > INT32_MAX) {
            snprintf(message, sizeof message, "sample %zd: %lld tokens exceed an int32 length", i, (long long)nt);
            return raise_invalid(message), -1;
        }
        int32_t original = c.original_length ? c.original_length[i] : (int32_t)nt;
        if (original < 0 || original > nt) {
            snprintf(message, sizeof message, "sample %zd: original_length %d outside [0, %lld]", i, original,
                     (long long)nt);
            return raise_invalid(message), -1;
        }
        s->cu_seqlens = NULL;
        s->num_cu_seqlens = 0;
        s->padded_length = (int32_t)nt;
        s->original_length = original;
    }
    return n;
}

/* The columns of the microbatch table step() returns, in order (MICROBATCH_COLUMNS in the module). */
#define MICROBATCH_COLUMNS                                                                                     \
    X(tokens) X(labels) X(loss_mask) X(position_ids) X(padding_mask) X(cu_seqlens) X(cu_seqlens_padded)        \
    X(num_tokens) X(num_cu_seqlens) X(num_sequences) X(max_seqlen) X(local_cp_size) X(cp_rank)                \
    X(cu_seqlens_host) X(cu_seqlens_padded_host)
enum {
#define X(name) MB_##name,
    MICROBATCH_COLUMNS
#undef X
    MB_COLUMNS
};

/* The microbatches as one int64 table (bytes): a row per microbatch, MB_COLUMNS addresses and counts. */
static PyObject *microbatch_table(const dcp_step_output *out)
{
    Py_ssize_t count = (Py_ssize_t)out->num_microbatches * out->num_virtual_stages;
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, count * MB_COLUMNS * (Py_ssize_t)sizeof(int64_t));
    if (!bytes) return NULL;
    int64_t *row = (int64_t *)PyBytes_AsString(bytes);
    for (Py_ssize_t i = 0; i < count; i++, row += MB_COLUMNS) {
        const dcp_microbatch *m = &out->microbatches[i];
        row[MB_tokens] = (int64_t)(uintptr_t)m->tokens;
        row[MB_labels] = (int64_t)(uintptr_t)m->labels;
        row[MB_loss_mask] = (int64_t)(uintptr_t)m->loss_mask;
        row[MB_position_ids] = (int64_t)(uintptr_t)m->position_ids;
        row[MB_padding_mask] = (int64_t)(uintptr_t)m->padding_mask;
        row[MB_cu_seqlens] = (int64_t)(uintptr_t)m->cu_seqlens;
        row[MB_cu_seqlens_padded] = (int64_t)(uintptr_t)m->cu_seqlens_padded;
        row[MB_num_tokens] = m->num_tokens;
        row[MB_num_cu_seqlens] = m->num_cu_seqlens;
        row[MB_num_sequences] = m->num_sequences;
        row[MB_max_seqlen] = m->max_seqlen;
        row[MB_local_cp_size] = m->local_cp_size;
        row[MB_cp_rank] = m->cp_rank;
        row[MB_cu_seqlens_host] = (int64_t)(uintptr_t)m->cu_seqlens_host;
        row[MB_cu_seqlens_padded_host] = (int64_t)(uintptr_t)m->cu_seqlens_padded_host;
    }
    return bytes;
}

/*
 * step(*, world, data_context_parallel=None, tensor_parallel=None, pipeline_rank=0, mtp_virtual_stages=0,
 *      tp_ranks_hold_data=0, cuda_stream=None, fields=0, samples=None, step_id=0, plan=None)
 * samples: None (this rank receives by broadcast) or a columns dict (samples_from_columns).
 * plan: None (the step plans) or a PlanDescriptor of a plan made ahead (dcp_step_args.plan; its arrays are
 *    read during the call only, so the caller keeps their owner alive across it).
 * -> dict: generation, num_microbatches, num_virtual_stages, num_sequences, seqlen_sum, seqlen_squared_sum,
 *    stats (dict), plan (plan descriptor or None), microbatches (bytes: int64 rows of MICROBATCH_COLUMNS)
 * *reached: whether dcp_step ran with these arguments (else Context_step counts the call).
 */
static PyObject *step_call(ContextObject *self, PyObject *args, PyObject *kwds, int *reached)
{
    static char *kwlist[] = {"world", "data_context_parallel", "tensor_parallel", "pipeline_rank",
                             "mtp_virtual_stages", "tp_ranks_hold_data", "cuda_stream", "fields", "samples",
                             "step_id", "plan", NULL};
    PyObject *ow = Py_None, *od = Py_None, *ot = Py_None, *ostream = Py_None, *osamples = Py_None,
             *ostep = Py_None, *oplan = Py_None;
    int pipeline_rank = 0, hold = 0;
    unsigned long mtp = 0, fields = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOikiOkOOO", kwlist, &ow, &od, &ot, &pipeline_rank, &mtp,
                                     &hold, &ostream, &fields, &osamples, &ostep, &oplan))
        return NULL;
    dcp_plan ahead;
    memset(&ahead, 0, sizeof ahead);
    if (oplan != Py_None && plan_from_tuple(oplan, &ahead) < 0) return NULL;
    unsigned long long step_id = 0;
    if (ostep != Py_None) {
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
        Py_ssize_t n = samples_from_columns(self, osamples);
        if (n < 0) return NULL;
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
    sa.plan = oplan != Py_None ? &ahead : NULL;
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
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    SET_ITEM(d, "generation", PyLong_FromUnsignedLongLong(self->generation));
    SET_ITEM(d, "num_microbatches", PyLong_FromLong(out->num_microbatches));
    SET_ITEM(d, "num_virtual_stages", PyLong_FromLong(out->num_virtual_stages));
    SET_ITEM(d, "num_sequences", PyLong_FromLong(out->num_sequences));
    SET_ITEM(d, "seqlen_sum", PyLong_FromLongLong((long long)out->seqlen_sum));
    SET_ITEM(d, "seqlen_squared_sum", PyLong_FromLongLong((long long)out->seqlen_squared_sum));
    SET_ITEM(d, "stats", stats_dict(&out->stats));
    SET_ITEM(d, "plan", out->plan ? plan_to_tuple(out->plan) : (Py_INCREF(Py_None), Py_None));
    SET_ITEM(d, "microbatches", microbatch_table(out));
    return d;
}

PyObject *Context_step(PyObject *o, PyObject *args, PyObject *kwds)
{
    ContextObject *self = (ContextObject *)o;
    int reached = 0;
    PyObject *result = step_call(self, args, kwds, &reached);
    if (!result && !reached) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        count_lone_step(self);
        PyErr_Restore(type, value, traceback);
    }
    return result;
}

int step_init(PyObject *module)
{
    PyObject *columns = Py_BuildValue("("
#define X(name) "s"
                                      MICROBATCH_COLUMNS
#undef X
                                      ")",
#define X(name) #name,
                                      MICROBATCH_COLUMNS
#undef X
                                      NULL);
    if (!columns || PyModule_AddObject(module, "MICROBATCH_COLUMNS", columns) < 0) {
        Py_XDECREF(columns);
        return -1;
    }
    return 0;
}
