/*
 * dcpack.h - plan and move variable-length LLM training data across GPUs.
 *
 * dcpack takes the sequence lengths of one global batch, computes on every
 * rank the same plan (microbatch -> DPxCP rank -> sequence ids, with a
 * power-of-two context-parallel group per sequence), checks it, and packs the
 * data into THD buffers.  Everything a training step needs is sized once from
 * a dcp_config; after dcp_context_init*() no step allocates.
 *
 * This header holds the stable core: status, configuration, cost profiles,
 * context, plan, the communicator interface, planning, the step and online
 * calibration.  It includes the rest: dcpack_inproc.h (the in-process
 * communicator), dcpack_model.h (MTP roll, GDN padding) and dcpack_cuda.h
 * (CUDA workspaces, NCCL).  Including dcpack.h gives all of them.
 *
 * Conventions used throughout these headers:
 *  - Every fallible function returns a dcp_status.  DCP_OK is 0; every error
 *    is negative.  dcp_status_str() names a status; dcp_context_last_error()
 *    returns the message of the context's last failure, with the offending
 *    value in it.
 *  - A failing call leaves the context usable: the next call works as if the
 *    failed one had not been made.  Nothing is written to caller memory on
 *    failure unless the function says otherwise.
 *  - "Allocation-free" means no malloc/free, no cudaMalloc/cudaHostAlloc.
 *  - Lengths are int32, token counts and offsets int64, costs int64.  The
 *    planning path uses integer arithmetic only, so every rank, compiler and
 *    optimisation level computes the same plan bit for bit.
 *  - Pointers a function hands back point into the context's workspace and
 *    stay valid until the next call that says it replaces them, or until the
 *    context is destroyed.
 *  - A call's comment reads, in this order: a one-line summary; what it does;
 *    "Returns:" its statuses; "Collective:" who must call it together, or
 *    "Thread safety:", where they apply; "Allocation:"; "See" the section of
 *    docs/ that holds the details.  A part that does not apply is left out.
 */
#ifndef DCPACK_H
#define DCPACK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DCP_VERSION_MAJOR 0
#define DCP_VERSION_MINOR 1
#define DCP_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

typedef enum dcp_status {
    DCP_OK = 0,
    DCP_ERR_NULL_POINTER = -1,      /* a required pointer argument was NULL */
    DCP_ERR_INVALID_ARGUMENT = -2,  /* an argument is out of its documented range */
    DCP_ERR_INVALID_CONFIG = -3,    /* dcp_config_validate() rejected the configuration */
    DCP_ERR_OVERFLOW = -4,          /* a size computed from the configuration overflows int64 */
    DCP_ERR_WORKSPACE_TOO_SMALL = -5, /* caller memory smaller than dcp_workspace_size() */
    DCP_ERR_CAPACITY = -6,          /* input exceeds a capacity fixed at init */
    DCP_ERR_BAD_LENGTH = -7,        /* a sequence length is zero, negative or too large */
    DCP_ERR_INFEASIBLE = -8,        /* no plan satisfies the invariants (e.g. VPP alignment) */
    DCP_ERR_INVALID_PLAN = -9,      /* dcp_plan_validate() found a broken invariant */
    DCP_ERR_CORRUPT_INPUT = -10,    /* a caller buffer is inconsistent (cu_seqlens, sizes) */
    DCP_ERR_FIELD_MISMATCH = -11,   /* ranks disagree on the set of fields */
    DCP_ERR_COMM = -12,             /* the communicator failed */
    DCP_ERR_TIMEOUT = -13,          /* a peer did not arrive in time */
    DCP_ERR_ALLOC = -15,            /* init could not obtain its memory */
    DCP_ERR_CUDA = -16,             /* a CUDA runtime call failed */
    DCP_ERR_NCCL = -17,             /* an NCCL call failed */
    DCP_ERR_UNSUPPORTED = -18,      /* built without the feature (e.g. CUDA) */
    DCP_ERR_OUT_OF_STEP = -19       /* ranks met in different calls: one skipped or repeated a call */
} dcp_status;

/* Static name of a status, e.g. "DCP_ERR_CAPACITY".  Never NULL. */
const char *dcp_status_str(dcp_status status);

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

typedef enum dcp_scheduler {
    DCP_SCHEDULER_DP_BALANCED = 0, /* reference DpBalancedScheduler: static CP size */
    DCP_SCHEDULER_DYNAMIC_CP = 1,  /* reference DefaultDynamicCPScheduler */
    DCP_SCHEDULER_BALANCED = 2     /* dcpack's own: minimises the step cost model */
} dcp_scheduler;

/*
 * Scheduler name ("dp_balanced", "dynamic_cp", "balanced") <-> enum.
 *
 * dcp_scheduler_name() gives "unknown" for a value that is no scheduler.
 * Returns: dcp_scheduler_from_name(): DCP_OK; DCP_ERR_NULL_POINTER; DCP_ERR_INVALID_ARGUMENT for another name.
 */
const char *dcp_scheduler_name(dcp_scheduler scheduler);
dcp_status dcp_scheduler_from_name(const char *name, dcp_scheduler *out);

/*
 * Cost-model coefficients are given per log2(CP size) up to this; CP groups
 * wider than 65536 ranks (up to the whole pool of at most 2^20 DPxCP ranks)
 * use the last coefficient.
 */
#define DCP_MAX_LOG2_CP 16

/*
 * The step cost model (docs/planning.md, cost model).  For a sequence of s tokens on cp
 * ranks, each of those ranks spends
 *
 *   cost(s, cp) = (quadratic * s^2 + linear * s) / cp
 *               + [cp > 1] * ( max(0, kv[log2 cp] * s * (cp-1)/cp - quadratic * s^2/cp)
 *                              + round_latency * (cp - 1) )
 *
 * and a microbatch costs its slowest rank plus microbatch_overhead.  All terms
 * are integers in "attention token pair" units; divisions round down.  The
 * result saturates at INT64_MAX instead of overflowing, for any length and
 * coefficients (intermediate products are capped, never wrapped); negative
 * coefficients, which dcp_config_validate() rejects, count as 0.
 *
 * step_model says how a step's microbatches follow one another (pipeline
 * parallelism 1), and so which makespan plan statistics judge a plan by
 * (dcp_plan_stats.model_makespan; docs/planning.md, step models):
 *  - DCP_STEP_MODEL_BARRIER (0, the default and what a zero-initialised
 *    model means): every rank waits for the slowest rank of each microbatch;
 *    makespan = sum over microbatches of (slowest group's cost + microbatch_overhead).
 *  - DCP_STEP_MODEL_DEPENDENCY (1): a rank waits only for the ranks it shares
 *    a CP group with.  A group of microbatch m starts when all its ranks have
 *    finished microbatch m-1; for every rank r,
 *      finish_r(m) = max over ranks q of r's group in m of finish_q(m-1) + cost(group) + microbatch_overhead,
 *    with finish_q(-1) = 0, and the makespan is max over r of finish_r(last).
 *    It is never above the barrier makespan of the same plan.
 * dcp_config_validate() rejects any other value.  Under the dependency
 * model the balanced scheduler orders its microbatches and places its groups
 * to lower that makespan (never above the layout it emits under the barrier
 * model); no other choice of the planner depends on it.
 */
typedef enum dcp_step_model {
    DCP_STEP_MODEL_BARRIER = 0,   /* a barrier per microbatch: every rank waits for its slowest rank */
    DCP_STEP_MODEL_DEPENDENCY = 1 /* a rank waits only for the ranks of its own CP groups */
} dcp_step_model;

typedef struct dcp_cost_model {
    int64_t quadratic;                    /* s^2 coefficient (default 1) */
    int64_t linear;                       /* s coefficient: 12 * hidden (default 49152) */
    int64_t kv[DCP_MAX_LOG2_CP + 1];      /* exposed-KV coefficient per log2(cp) (492 up to cp 8, 3934 above) */
    int64_t round_latency;                /* per ring round (default 491520) */
    int64_t microbatch_overhead;          /* per microbatch (default 819200) */
    int32_t step_model;                   /* a dcp_step_model (default DCP_STEP_MODEL_BARRIER) */
    /*
     * Terms of the step that runs (docs/planning.md, cost model); 0 in the
     * default model, which so plans as before.
     *  - cp_gather[k] (k = log2 cp >= 1): exposed, undivided CP cost per token
     *    of the group's whole sequence on every rank of a CP group (trainers
     *    that gather K/V before attention: dcpack.thd, TransformerEngine's
     *    all-gather CP).  Added to cost(s, cp) as cp_gather[k] * s.
     *  - small_knee, small_slope: a rank that holds t < small_knee token slots
     *    in a microbatch costs small_slope * (small_knee - t) more (kernels that
     *    stop filling the GPU below the knee), t = the group's tokens / cp.
     *    Charged once per group per microbatch in plan statistics and in
     *    balanced's choice against dynamic_cp's plan (margin_ppm), not by
     *    dcp_cost() and not inside balanced's passes; never in lower bounds
     *    (they stay bounds: the hinge is >= 0).
     *  - margin_ppm: balanced keeps dynamic_cp's plan unless its own plan's
     *    model makespan is lower by at least margin_ppm parts per million of
     *    dynamic_cp's (a calibrated profile's measured error; 0: any gain).
     */
    int64_t cp_gather[DCP_MAX_LOG2_CP + 1];
    int64_t small_knee;
    int64_t small_slope;
    int64_t margin_ppm;
    /*
     * The pipeline (docs/planning.md, pipeline step model), used when the
     * configuration's pipeline_parallel_size > 1: a microbatch of per-rank cost
     * c runs forward_ppm/1e6 of c forward and the rest backward on every stage;
     * the first stage adds first_stage_per_token and the last
     * last_stage_per_token per token slot of the microbatch's slowest rank
     * (embedding; output head, loss, MTP).  pipeline_schedule is a
     * dcp_pipeline_schedule.  Defaults: 1F1B, forward 333333 ppm, no extra work.
     * virtual_pipeline_size > 1 always runs the interleaved schedule (as
     * Megatron-LM does); dcp_config_validate() rejects interleaved with
     * virtual_pipeline_size 1, another schedule value, and forward_ppm outside
     * [0, 1000000].  With pipeline_parallel_size > 1 the balanced scheduler
     * minimises the pipeline's makespan (dcp_plan_stats.pipeline_makespan).
     */
    int32_t pipeline_schedule;
    int32_t forward_ppm;
    int64_t first_stage_per_token;
    int64_t last_stage_per_token;
} dcp_cost_model;

/* Pipeline schedules the pipeline step model computes (docs/planning.md). */
typedef enum dcp_pipeline_schedule {
    DCP_PIPELINE_1F1B = 0,        /* one forward one backward, one chunk per stage */
    DCP_PIPELINE_INTERLEAVED = 1  /* Megatron-LM's interleaved 1F1B with virtual_pipeline_size chunks per stage */
} dcp_pipeline_schedule;

/*
 * Step model name ("barrier", "dependency") <-> enum.
 *
 * dcp_step_model_name() gives "unknown" for another value.
 * Returns: dcp_step_model_from_name(): DCP_OK; DCP_ERR_NULL_POINTER; DCP_ERR_INVALID_ARGUMENT for another name.
 */
const char *dcp_step_model_name(dcp_step_model model);
dcp_status dcp_step_model_from_name(const char *name, dcp_step_model *out);

/* Fill a cost model with the default coefficients of docs/planning.md (H = 4096, 8 GPUs a node) and the barrier
   step model. */
void dcp_cost_model_default(dcp_cost_model *model);

/* Per-rank cost of a sequence of `length` tokens on `cp` ranks (cp a power of two): the formula above, saturating
   at INT64_MAX. */
int64_t dcp_cost(const dcp_cost_model *model, int64_t length, int32_t cp);

/* Fields a sample can carry (bit set). */
enum {
    DCP_FIELD_TOKENS = 1u << 0,       /* int64 */
    DCP_FIELD_LABELS = 1u << 1,       /* int64 */
    DCP_FIELD_LOSS_MASK = 1u << 2,    /* float32 */
    DCP_FIELD_POSITION_IDS = 1u << 3, /* int64 */
    DCP_FIELD_ALL = 0xFu
};

/* How a sequence's padded span is cut over the ranks of its CP group (as Megatron-LM's reference does). */
typedef enum dcp_cp_partition {
    DCP_CP_ZIGZAG = 0,    /* 2*cp equal chunks per sequence; rank r takes chunks r and 2*cp-1-r */
    DCP_CP_CONTIGUOUS = 1 /* the packed microbatch in cp equal slices; rank r takes slice r */
} dcp_cp_partition;

/* Where THD tail padding goes (the reference's thd_tail_padding_policy). */
typedef enum dcp_thd_tail {
    DCP_THD_TAIL_APPEND_DUMMY = 0, /* the padding becomes one more (dummy) sequence */
    DCP_THD_TAIL_EXTEND_LAST = 1   /* the last real sequence's padded end moves to the target */
} dcp_thd_tail;

/*
 * How much search DCP_SCHEDULER_BALANCED spends on a plan (docs/planning.md,
 * effort levels).  Effort is counted in units of work (passes run, sequences
 * moved by the local search), never in time, so every rank, however loaded,
 * stops at the same place and plans the same.  Other schedulers ignore it.
 */
typedef enum dcp_plan_effort {
    DCP_PLAN_EFFORT_FULL = 0, /* the default: the whole search, the lowest makespans */
    DCP_PLAN_EFFORT_FAST = 1  /* dynamic_cp's plan lowered by a short local search: never above dynamic_cp's
                                 makespan, planned within a few times dynamic_cp's time (where dynamic_cp has
                                 no plan, the full search) */
} dcp_plan_effort;

/*
 * Everything that fixes the size of a context.  Start from
 * dcp_config_default() and set what differs; dcp_config_validate() says what
 * is wrong with a configuration, in the message.
 *
 * Ranks: the DPxCP group has data_parallel_size * context_parallel_size
 * ranks ("num_ranks" in the planner).  With the dynamic schedulers the whole
 * DPxCP group is one pool of ranks and context_parallel_size only fixes the
 * group's size; with dp_balanced it is the static CP size.
 */
typedef struct dcp_config {
    int32_t world_size;                   /* all ranks = DP*CP*TP*PP; 0 = derive it */
    int32_t data_parallel_size;           /* >= 1 */
    int32_t context_parallel_size;        /* >= 1 */
    int32_t tensor_parallel_size;         /* >= 1 */
    int32_t pipeline_parallel_size;       /* >= 1 */
    int32_t virtual_pipeline_size;        /* >= 1; 1 = no VPP */
    int32_t microbatch_group_size_per_vp_stage; /* 0 or 1: no alignment; else microbatch count is a multiple */
    dcp_scheduler scheduler;
    int32_t max_sequences;                /* capacity: sequences per global batch */
    int32_t max_seqlen_per_rank;          /* M: tokens one DPxCP rank can hold in a microbatch */
    int32_t min_cp_size;                  /* >= 1, a power of two */
    int32_t max_sequences_per_microbatch; /* per rank per microbatch (thd_max_packed_sequences); 0 = unlimited */
    int64_t max_tokens_per_rank;          /* data plane: tokens one rank brings into a step and holds out of
                                             it (all its microbatches, THD padding included); 0 = planning only */
    int32_t max_microbatches;             /* capacity; 0 = max_sequences */
    int32_t pad_alignment;                /* THD padding of each rank's tensors; 0 = none */
    uint32_t fields;                      /* DCP_FIELD_* set the trainer provides; with max_tokens_per_rank
                                             > 0 all four (PP stage 0 takes tokens and position_ids, the
                                             last stage labels and loss_mask: dcp_config_validate() checks) */
    /*
     * Data plane (dcp_step).  THD padding is on when pad_alignment > 0 or
     * pad_to_max_seqlen is set: each rank's tensors of a microbatch are padded
     * to a multiple of pad_alignment, or to max_seqlen_per_rank exactly
     * (the reference's pad_packed_seq_alignment "max", and CUDA graphs).
     * With padding on and max_sequences_per_microbatch = K > 0, cu_seqlens and
     * cu_seqlens_padded have a fixed K+2 entries under append_dummy (K real
     * sequences and the dummy: the reference's thd_max_packed_sequences = K+1,
     * whose dp_balanced scheduler then packs K) and K+1 under extend_last.
     */
    int32_t pad_to_max_seqlen;            /* 0 or 1; wins over pad_alignment */
    dcp_thd_tail thd_tail_policy;         /* default append_dummy */
    dcp_cp_partition cp_partition;        /* default zigzag */
    /*
     * Ranks that must hold identical inputs: CP siblings (the ranks of one DP
     * rank), and the ranks that hold data at the same DPxCP rank in every PP
     * stage and (with tp_ranks_hold_data) every TP rank.  By default dcp_step
     * checks it: each rank hashes every byte of the fields it holds (CP
     * siblings: the fields it moves; PP stages and TP peers: every field its
     * input carries, compared field by field where both carry it), on the GPU
     * with a kernel when a CUDA workspace is attached, and the ranks compare
     * the digests with their lengths (the siblings in the gather, PP stages
     * and TP peers in the step's first agreement over the world, at no extra
     * collective); a difference is DCP_ERR_CORRUPT_INPUT on every rank.  1
     * compares the lengths only (one pass over the input less; docs/step.md
     * gives the cost).  No effect at CP 1, PP 1 and TP ranks that do not
     * hold data.
     */
    int32_t skip_sibling_data_check;
    dcp_cost_model cost;                  /* used by DCP_SCHEDULER_BALANCED and by plan statistics */
    dcp_plan_effort plan_effort;          /* balanced's search (above); default DCP_PLAN_EFFORT_FULL */
    int32_t max_observations;             /* online calibration (below, "Online calibration"): observation
                                             rows the context keeps, one per CP group and microbatch;
                                             0 (the default) = off.  Sized into the workspace */
} dcp_config;

/* Defaults: 1 rank of each kind, dynamic_cp, 4096 sequences, M = 4096, all fields. */
void dcp_config_default(dcp_config *config);

/*
 * Check a configuration.
 *
 * Says what is wrong in `message` (message_size bytes; may be NULL).
 * Returns: DCP_OK; DCP_ERR_INVALID_CONFIG; DCP_ERR_OVERFLOW (a size that does not fit).
 */
dcp_status dcp_config_validate(const dcp_config *config, char *message, size_t message_size);

/* Number of DPxCP ranks the planner distributes over. */
int32_t dcp_config_num_ranks(const dcp_config *config);

/* ------------------------------------------------------------------------ */
/* Cost profiles                                                             */
/* ------------------------------------------------------------------------ */

/*
 * Read and write the cost-profile text format: `key = value` lines over a model.
 *
 * One reader and writer for the dcpack program and the Python package; its
 * rules are byte-level ASCII without locale (UTF-8 text, '#' comments, lines
 * of at most 1022 bytes, values in ASCII digits, step_model and
 * pipeline_schedule a word), and a profile whose one microbatch of 131072
 * tokens would cost 2^56 units or more is refused, naming the key that
 * weighs most.
 *
 * dcp_cost_profile_parse() applies `length` bytes of `text` over *model (keys
 * not given keep its values; later lines win) and sets *time_unit_ps to the
 * profile's picoseconds per cost unit (0: none).  `name` (the file, NULL:
 * "<profile>") starts every message, with the line: "NAME:LINE: ...".
 * dcp_cost_profile_format() writes every key of *model (time_unit_ps first
 * when > 0), NUL-ended text that parses back to the same model and unit;
 * *written (may be NULL) gets its length without the NUL, also when it did
 * not fit.  2048 bytes always suffice.
 *
 * Returns: parse: DCP_OK; DCP_ERR_INVALID_CONFIG with the message (cut to
 * message_size) and nothing changed on a bad profile; DCP_ERR_NULL_POINTER
 * for a NULL model, time_unit_ps, or text with length > 0.  format: DCP_OK;
 * DCP_ERR_CAPACITY when it did not fit (call again with *written + 1 bytes);
 * DCP_ERR_INVALID_CONFIG for a step_model or pipeline_schedule that has no name.
 * See docs/program.md#dcpack-cost-and-cost-profiles.
 */
dcp_status dcp_cost_profile_parse(const char *text, size_t length, const char *name, dcp_cost_model *model,
                                  int64_t *time_unit_ps, char *message, size_t message_size);
dcp_status dcp_cost_profile_format(const dcp_cost_model *model, int64_t time_unit_ps, char *buf, size_t size,
                                   size_t *written);

/* ------------------------------------------------------------------------ */
/* Context and memory                                                        */
/* ------------------------------------------------------------------------ */

typedef struct dcp_context dcp_context;

/*
 * Exact number of bytes dcp_context_init_static() needs for `config`.
 *
 * Returns: DCP_OK; DCP_ERR_INVALID_CONFIG or DCP_ERR_OVERFLOW (the
 * configuration is invalid or its sizes do not fit in size_t), and *size is
 * then not written.
 */
dcp_status dcp_workspace_size(const dcp_config *config, size_t *size);

/*
 * Build a context inside caller memory.
 *
 * `memory` holds at least dcp_workspace_size() bytes, at any alignment.
 * dcpack never frees it; the caller owns it and may release it after
 * dcp_context_destroy().
 * Allocation: none.
 */
dcp_status dcp_context_init_static(void *memory, size_t size, const dcp_config *config,
                                   dcp_context **context);

/*
 * Build a context whose workspace dcpack takes.
 *
 * The workspace comes from a jemalloc arena of its own (thread cache off), or
 * from aligned_alloc when built without jemalloc.
 * Allocation: this is the only call that allocates.
 */
dcp_status dcp_context_create(const dcp_config *config, dcp_context **context);

/* Release a context (frees its memory only if dcp_context_create() took it). NULL is a no-op. */
void dcp_context_destroy(dcp_context *context);

/*
 * Put an out-of-step context back in step, its next call numbered `next_call`.
 *
 * Every multi-rank call on a context (dcp_gather, dcp_gather_packed,
 * dcp_step) counts, also one that fails on the calling rank alone; its first
 * collective carries that count, the caller's step id and a digest of the
 * configuration, and ranks that meet with different ones all return
 * DCP_ERR_OUT_OF_STEP (different configurations: DCP_ERR_INVALID_CONFIG)
 * instead of pairing two steps' data.  The context is then out of step: its
 * multi-rank calls return DCP_ERR_OUT_OF_STEP at once, with no collective,
 * until this call.
 * Collective: call it on every rank with the same next_call once the ranks
 * are back in step (new communicators, or the loop restarted from a common step).
 * See docs/step.md#calls-in-step.
 */
dcp_status dcp_context_resync(dcp_context *context, uint64_t next_call);

/* The context's call count: the number of multi-rank calls made on it (since the last resync). */
uint64_t dcp_context_calls(const dcp_context *context);

/* The configuration the context was built with. */
const dcp_config *dcp_context_config(const dcp_context *context);

/* Message of the last failed call on this context ("" if none).  Valid until the next call. */
const char *dcp_context_last_error(const dcp_context *context);

/* Bytes of workspace in use, and the high-water mark of scratch use, for sizing reports. */
size_t dcp_context_workspace_bytes(const dcp_context *context);
size_t dcp_context_scratch_high_water(const dcp_context *context);

/* ------------------------------------------------------------------------ */
/* The plan                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A plan for one global batch, as structure-of-arrays group tables.
 *
 * Microbatch m owns groups [microbatch_first_group[m], microbatch_first_group[m+1]),
 * sorted by first rank.  Group g runs its sequences on ranks
 * [group_first_rank[g], group_first_rank[g] + group_cp_size[g]); every one of
 * those ranks holds the same ids, in the same order:
 * ids[group_first_id[g] .. group_first_id[g+1]).  Ids are 0-based global ids
 * (the order of the gathered lengths).
 *
 * The arrays point into the owner's workspace.  The plan returned by
 * dcp_plan_compute() stays valid until the next dcp_plan_compute() or
 * dcp_step() on the same context.
 */
typedef struct dcp_plan {
    int32_t num_ranks;
    int32_t num_microbatches;
    int32_t num_groups;
    int32_t num_ids;
    int32_t *microbatch_first_group; /* [num_microbatches + 1] */
    int32_t *group_first_rank;       /* [num_groups] */
    int32_t *group_cp_size;          /* [num_groups] */
    int32_t *group_first_id;         /* [num_groups + 1] */
    int32_t *ids;                    /* [num_ids] */
    /* capacities of the arrays above, fixed at init */
    int32_t max_microbatches;
    int32_t max_groups;
    int32_t max_ids;
    /* Where the plan comes from, written by dcp_plan_compute() (0 in a plan it did not make): a digest
       of the planning configuration (the context's, max_tokens_per_rank aside), and one of that digest,
       the lengths and the arrays above.  dcp_plan_matches() and a plan handed to dcp_step() check them;
       dcp_plan_hash() leaves them out. */
    uint64_t config_digest;
    uint64_t seal;
    /* Whose plan `balanced` emitted: DCP_PLAN_SOURCE_DYNAMIC_CP when its margin rule kept dynamic_cp's
       plan (docs/planning.md, the margin), else DCP_PLAN_SOURCE_SEARCH (0, also every other scheduler's
       plan).  dcp_plan_hash() and the seal leave it out. */
    int32_t source;
} dcp_plan;

/* dcp_plan.source. */
enum { DCP_PLAN_SOURCE_SEARCH = 0, DCP_PLAN_SOURCE_DYNAMIC_CP = 1 };

/* Group of `rank` in microbatch `microbatch`, or -1 if the rank holds nothing.  O(log groups). */
int32_t dcp_plan_group_of_rank(const dcp_plan *plan, int32_t microbatch, int32_t rank);

/*
 * Step-model statistics of a plan (docs/planning.md, cost model), all integer.  Both
 * step models' makespans are computed whatever the configuration says;
 * model_makespan and model_lower_bound are those of the configured one
 * (config.cost.step_model), and efficiency = model_lower_bound / model_makespan.
 */
typedef struct dcp_plan_stats {
    int32_t num_microbatches;
    int64_t makespan;          /* barrier model: sum over microbatches of (slowest rank + overhead) */
    int64_t lower_bound;       /* barrier model's lower bound (docs/planning.md, cost model) */
    int64_t quad_makespan;     /* the reference's model: per rank sum of s^2/cp, summed over microbatch maxima */
    int64_t busy_sum;          /* sum over microbatches and ranks of rank cost (for imbalance) */
    int64_t max_rank_sum;      /* sum over microbatches of the slowest rank */
    int64_t cp_size_sum;       /* sum over sequences of their CP size */
    int64_t total_tokens;
    int64_t dependency_makespan;    /* dependency model: the last rank's finish (dcp_cost_model.step_model);
                                       never above makespan */
    int64_t dependency_lower_bound; /* lower bound on any plan's dependency_makespan for these lengths, ranks
                                       and cost model (docs/planning.md); also one on its makespan */
    int64_t model_makespan;         /* the configured step model's: makespan or dependency_makespan */
    int64_t model_lower_bound;      /* the configured step model's: lower_bound or dependency_lower_bound */
    int32_t step_model;             /* the configured dcp_step_model */
    /*
     * The pipeline step model (docs/planning.md, pipeline step model), 0 when
     * pipeline_parallel_size == 1: the exact makespan of the plan's
     * microbatches, in plan order, under the schedule (1F1B; Megatron-LM's
     * interleaved 1F1B when virtual_pipeline_size > 1), and a lower bound of
     * it over every order of these microbatches.  When PP > 1,
     * model_makespan and model_lower_bound are these two (the step is the
     * pipeline's), whatever step_model says.
     */
    int64_t pipeline_makespan;
    int64_t pipeline_lower_bound;
} dcp_plan_stats;

/*
 * Statistics of a plan under the cost model and lengths it was computed for.
 *
 * The plan is validated first, so a hand-made or stale plan is never walked
 * past its arrays.
 * Returns: DCP_OK; DCP_ERR_INVALID_PLAN (an invariant broken for these
 * lengths); DCP_ERR_CAPACITY (num_lengths past max_sequences).
 * Allocation: none; scratch from the context.
 * See docs/planning.md#statistics-lower-bound-efficiency.
 */
dcp_status dcp_plan_stats_compute(dcp_context *context, const dcp_plan *plan, const int32_t *lengths,
                                  int32_t num_lengths, dcp_plan_stats *stats);

/* Which invariant of a plan broke (numbered as in docs/planning.md, Invariants). */
typedef enum dcp_invariant {
    DCP_INVARIANT_NONE = 0,
    DCP_INVARIANT_EACH_ID_ONCE = 1,    /* every id in exactly one microbatch, once */
    DCP_INVARIANT_BLOCK_SHAPE = 2,     /* groups are disjoint power-of-two, full or static-CP rank blocks */
    DCP_INVARIANT_SAME_IDS = 3,        /* ranks of a block hold the same ids: true by construction of dcp_plan's
                                          group form, so never reported; kept for the numbering */
    DCP_INVARIANT_TOKEN_CAPACITY = 4,  /* sum s / cp <= max_seqlen_per_rank on every rank */
    DCP_INVARIANT_NO_EMPTY_RANK = 5,   /* every rank holds something in every microbatch */
    DCP_INVARIANT_VPP_MULTIPLE = 6,    /* microbatch count a multiple of the VPP group */
    DCP_INVARIANT_STRUCTURE = 7,       /* array offsets inconsistent or out of range */
    DCP_INVARIANT_SEQUENCE_CAP = 8     /* more sequences on a rank than max_sequences_per_microbatch */
} dcp_invariant;

/* Where a plan broke an invariant. */
typedef struct dcp_plan_violation {
    dcp_invariant invariant;
    int32_t microbatch; /* -1 when not applicable */
    int32_t rank;       /* -1 when not applicable */
    int32_t id;         /* -1 when not applicable */
    char message[160];
} dcp_plan_violation;

/* ------------------------------------------------------------------------ */
/* Communicator                                                              */
/* ------------------------------------------------------------------------ */

/*
 * The small interface dcpack moves data through.  A communicator covers one
 * group of ranks (the DP group, the TP group, ...).  Every operation is
 * collective: all `size` ranks call it with matching sizes.  Buffers are
 * caller-owned; operations never allocate.  Two backends ship with dcpack:
 * in-process (N ranks as threads, for tests and CPU-only runs) and NCCL.
 */
typedef struct dcp_comm dcp_comm;

/*
 * The layout of dcp_comm_ops a backend is written for.  A table starts with
 * it and its own size, as NCCL's plugin tables carry their version:
 *     static const dcp_comm_ops my_ops = {DCP_COMM_OPS_VERSION, sizeof(dcp_comm_ops), my_allgather, ...};
 * Every call that takes a communicator refuses (DCP_ERR_INVALID_ARGUMENT,
 * saying which is wrong) a table of another version, one shorter than this
 * version's layout, or one missing a required operation, instead of calling
 * through it.
 */
#define DCP_COMM_OPS_VERSION 1u

typedef struct dcp_comm_ops {
    uint32_t version; /* DCP_COMM_OPS_VERSION */
    uint32_t size;    /* sizeof(dcp_comm_ops) where the table was compiled */
    /* recv[r*bytes .. (r+1)*bytes) = rank r's send buffer. */
    dcp_status (*allgather)(dcp_comm *comm, const void *send, size_t bytes, void *recv);
    /* Rank r's send_bytes land at recv + recv_offsets[r]; recv_bytes[r] must equal what r sends. */
    dcp_status (*allgatherv)(dcp_comm *comm, const void *send, size_t send_bytes, void *recv,
                             const size_t *recv_bytes, const size_t *recv_offsets);
    /* Send send_bytes[p] from send + send_offsets[p] to peer p; receive recv_bytes[p] at recv + recv_offsets[p]. */
    dcp_status (*alltoallv)(dcp_comm *comm, const void *send, const size_t *send_bytes,
                            const size_t *send_offsets, void *recv, const size_t *recv_bytes,
                            const size_t *recv_offsets);
    /* Root's buffer is copied into every other rank's buffer. */
    dcp_status (*broadcast)(dcp_comm *comm, void *buffer, size_t bytes, int32_t root);
    /*
     * Error agreement: every rank passes its local status; every rank gets the
     * same result: DCP_OK if all were OK, otherwise the status of the
     * lowest-numbered failing rank, in *agreed, and that rank in *failed_rank.
     * Returns DCP_OK when the agreement itself completed.
     */
    dcp_status (*agree)(dcp_comm *comm, dcp_status local, dcp_status *agreed, int32_t *failed_rank);
    /*
     * Optional (NULL: none): why this handle's last operation failed, as a short sentence that names the
     * rank that failed or never arrived ("rank 3 did not arrive within 300 ms"); "" after a success.
     * dcpack appends it to its own messages.  Both backends provide it.
     */
    const char *(*describe_failure)(dcp_comm *comm);
} dcp_comm_ops;

struct dcp_comm {
    const dcp_comm_ops *ops;
    int32_t rank;
    int32_t size;
    void *impl;     /* backend state */
    uint64_t calls; /* dcp_mtp_roll() calls made over this handle; they are compared across ranks, so a rank
                       that skipped one makes the next fail with DCP_ERR_OUT_OF_STEP.  Zero when made */
};


/* ------------------------------------------------------------------------ */
/* Planning                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Gather this rank's sequence lengths into the global list over the DP group.
 *
 * `local_lengths` are one per sample; zero-length entries are dropped (as the
 * reference drops empty sub-samples).  On success *global_lengths (count
 * *num_global) and *rank_offsets (comm->size + 1 entries: the first global id
 * of each DP rank) point into the context until the next dcp_gather() or
 * dcp_step().  `step_id` (the caller's step or batch number; 0 = none) is
 * compared across ranks with the context's call count, as
 * dcp_step_args.step_id is, and the lengths that arrive are checked against
 * each sender's count and hash.
 *
 * Returns: DCP_OK; DCP_ERR_BAD_LENGTH (a negative length); DCP_ERR_NULL_POINTER
 * (an input or output pointer); DCP_ERR_OUT_OF_STEP (a rank skipped or
 * repeated a gather: with step ids also a whole one); DCP_ERR_COMM (a
 * communicator that reported success with zeroed, stale or garbage bytes, a
 * peer gone: never DCP_OK with wrong lengths); the communicator's (e.g.
 * DCP_ERR_TIMEOUT).
 * Collective: over `comm` (the DP group); every rank returns the same status,
 * the lowest-numbered failing DP rank's.  Only a communicator that cannot be
 * used (NULL, no operations, a size that is not data_parallel_size) fails on
 * the calling rank alone.
 * Allocation: none.
 * See docs/step.md#calls-in-step and docs/step.md#errors-agreed-on-every-rank.
 */
dcp_status dcp_gather(dcp_context *context, dcp_comm *comm, uint64_t step_id, const int32_t *local_lengths,
                      int32_t num_local, const int32_t **global_lengths, int32_t *num_global,
                      const int32_t **rank_offsets);

/*
 * dcp_gather() from one pre-packed sample.
 *
 * cu_seqlens has num_cu_seqlens entries, starting at 0, non-decreasing, the
 * last at most total_tokens; sub-samples of length 0 are dropped.
 * Returns, Collective, Allocation: as dcp_gather().
 */
dcp_status dcp_gather_packed(dcp_context *context, dcp_comm *comm, uint64_t step_id, const int32_t *cu_seqlens,
                             int32_t num_cu_seqlens, int64_t total_tokens,
                             const int32_t **global_lengths, int32_t *num_global,
                             const int32_t **rank_offsets);

/*
 * Plan one global batch from its gathered lengths with the context's scheduler, and validate it.
 *
 * A pure function of the lengths (the same on every rank) and the
 * configuration: every rank gets a bit-identical plan.  The plan stays valid
 * until the next dcp_plan_compute() or dcp_step() on the context.
 * Returns: DCP_OK; DCP_ERR_NULL_POINTER; DCP_ERR_INVALID_ARGUMENT (an empty
 * batch or a negative count); DCP_ERR_CAPACITY (more sequences than
 * config.max_sequences, or more microbatches than max_microbatches);
 * DCP_ERR_BAD_LENGTH (a length <= 0 or longer than all ranks together hold);
 * DCP_ERR_INFEASIBLE; DCP_ERR_INVALID_PLAN (a bug: the validator rejected the
 * scheduler's output).
 * Thread safety: no collective, touches no other context: it may run on a
 * thread of the caller's while dcp_step() runs on another context.
 * Allocation: none.
 * See docs/planning.md.
 */
dcp_status dcp_plan_compute(dcp_context *context, const int32_t *lengths, int32_t num_lengths,
                            const dcp_plan **plan);

/*
 * Check every invariant of `plan` for these lengths and configuration.
 *
 * On failure *violation (may be NULL) gets the first violation found; for a
 * bad argument it gets invariant DCP_INVARIANT_NONE, microbatch and rank -1,
 * id the index of the bad length (DCP_ERR_BAD_LENGTH; else -1) and the
 * context's message.  *violation is left alone only on DCP_OK (and with a
 * NULL context).
 * Returns: DCP_OK; DCP_ERR_INVALID_PLAN; DCP_ERR_NULL_POINTER (plan, or
 * lengths with num_lengths > 0); DCP_ERR_CAPACITY (num_lengths outside [0,
 * max_sequences]); DCP_ERR_BAD_LENGTH (a length below 1).
 * Allocation: none; scratch from the context.
 * See docs/planning.md#invariants-and-dcp_plan_validate.
 */
dcp_status dcp_plan_validate(dcp_context *context, const dcp_plan *plan, const int32_t *lengths,
                             int32_t num_lengths, dcp_plan_violation *violation);

/*
 * Whether `plan` is the plan dcp_plan_compute() made of exactly these lengths, unchanged since.
 *
 * Under this context's configuration, or any whose configuration differs from
 * it in max_tokens_per_rank alone: the check dcp_step() makes of
 * dcp_step_args.plan.  O(lengths + groups + ids).
 * Returns: DCP_OK; DCP_ERR_INVALID_ARGUMENT naming what differs (the
 * configuration, the lengths or the plan's arrays) in the context's last
 * error; DCP_ERR_CAPACITY (a plan bigger than this context's capacities).
 * Collective: none.
 * Allocation: none.
 * See docs/step.md#planning-a-step-ahead.
 */
dcp_status dcp_plan_matches(dcp_context *context, const dcp_plan *plan, const int32_t *lengths,
                            int32_t num_lengths);

/*
 * FNV-1a 64 over a plan's arrays; 0 for NULL.
 *
 * Equal plans have equal hashes, so ranks (or builds) can compare plans by
 * exchanging 8 bytes.
 */
uint64_t dcp_plan_hash(const dcp_plan *plan);

/* ------------------------------------------------------------------------ */
/* Data plane: one step                                                      */
/* ------------------------------------------------------------------------ */

/*
 * One sample of a rank's input, as the trainer's loader produced it.  The
 * buffers are the caller's: dcp_step() only reads them, during the call.
 * Two shapes (as Megatron-LM's reference does):
 *  - pre-packed: cu_seqlens != NULL cuts the buffers into sub-samples
 *    (num_cu_seqlens entries, starting at 0, non-decreasing, the last at most
 *    num_tokens); each non-empty sub-sample is one sequence whose original and
 *    padded lengths are its length; empty ones are dropped;
 *  - one sequence: cu_seqlens == NULL; padded_length must equal num_tokens
 *    (0 drops the sample) and original_length, in [0, padded_length], counts
 *    the real tokens at its start; the slots after them are padding.
 */
typedef struct dcp_sample {
    const int64_t *tokens;       /* [num_tokens] when the input carries DCP_FIELD_TOKENS */
    const int64_t *labels;       /* [num_tokens] when DCP_FIELD_LABELS */
    const float *loss_mask;      /* [num_tokens] when DCP_FIELD_LOSS_MASK */
    const int64_t *position_ids; /* [num_tokens] when DCP_FIELD_POSITION_IDS */
    int64_t num_tokens;
    const int32_t *cu_seqlens;
    int32_t num_cu_seqlens;
    int32_t padded_length;
    int32_t original_length;
} dcp_sample;

/* A rank's input for one step.  CP siblings (the ranks of one DP rank) hold identical inputs. */
typedef struct dcp_step_input {
    const dcp_sample *samples;
    int32_t num_samples;
    uint32_t fields; /* DCP_FIELD_* every sample carries; the same on every rank, within config.fields */
} dcp_step_input;

/*
 * Where this rank sits and how it talks.  Communicators are the caller's and
 * must outlive the call.
 *  - world: every rank of the step (DPxCPxTPxPP); errors are agreed over it,
 *    so every rank returns the same status.
 *  - data_context_parallel: this rank's DPxCP group, rank = dp_rank * CP + cp_rank
 *    (the ranks a plan numbers); lengths are gathered and tokens exchanged over it.
 *    Needed on the ranks that hold data.
 *  - tensor_parallel: this rank's TP group; its rank 0 holds the data and
 *    broadcasts the step's outputs to the others.  NULL when TP is 1 or every
 *    TP rank holds the data.
 */
typedef struct dcp_step_args {
    dcp_comm *world;
    dcp_comm *data_context_parallel;
    dcp_comm *tensor_parallel;
    int32_t pipeline_rank;       /* this rank's PP stage, 0 .. pipeline_parallel_size-1 */
    uint32_t mtp_virtual_stages; /* bit v: virtual stage v of this PP stage holds MTP layers (bit 0 without VPP) */
    int32_t tp_ranks_hold_data;  /* 1: every TP rank holds the batch (RL trainers): each runs the step over its
                                    own DPxCP group and nothing is broadcast; 0: only TP rank 0 does */
    void *cuda_stream;           /* a cudaStream_t: where a context with a CUDA workspace (dcp_context_attach_cuda)
                                    puts its copies and kernels; NULL = the default stream.  Ignored otherwise */
    uint64_t step_id;            /* optional: the caller's step number, compared across ranks with the context's
                                    call count (a rank a step ahead of its peers is DCP_ERR_OUT_OF_STEP); 0 = none */
    /*
     * Optional: this step's plan, made ahead (below, "Planning a step ahead").  NULL: the step plans
     * its batch itself.  Else the step does not plan: it checks on every rank that holds data, with
     * dcp_plan_matches() against the lengths it gathered, that this is the plan of exactly those
     * lengths under this context's configuration, copies it into the context and goes on as if it
     * had made it (dcp_step_output.plan is the copy).  A plan that fails the check, on any one rank,
     * is DCP_ERR_INVALID_ARGUMENT (DCP_ERR_CAPACITY for one past this context's capacities) on
     * every rank: never a batch cut by another plan.  Only read during the call.  Ignored on ranks
     * that receive by broadcast.
     */
    const dcp_plan *plan;
} dcp_step_args;

/*
 * Planning a step ahead.  Planning needs only the lengths, which a trainer
 * knows a step early: while step k runs, every rank that holds data gathers
 * step k+1's padded lengths with dcp_gather() on a planning context (same
 * configuration, max_tokens_per_rank 0 if it moves no data) between steps,
 * runs dcp_plan_compute() on a thread of its own (dcpack starts none), and
 * at step k+1 passes the plan as dcp_step_args.plan.  The step copies it, so
 * the planning context may go on to step k+2 at once.  A stale plan, or one
 * of another batch or configuration, is DCP_ERR_INVALID_ARGUMENT on every
 * rank, and a later step works as before.  examples/train_data_loop.c
 * --plan-ahead does all three.  See docs/step.md#planning-a-step-ahead.
 */

/*
 * One microbatch as one rank computes on it: exactly what the reference's
 * get_batch_on_this_rank_for_sequence_packing gives that rank (as
 * Megatron-LM's reference does), as flat arrays.  Fields a (virtual) stage does not need
 * are NULL; present are tokens and position_ids on the first stage and MTP
 * stages, labels and loss_mask on the last stage and MTP stages, none of the
 * four on middle stages.  Padding slots hold
 * 0 in every field and 1 in padding_mask.
 */
typedef struct dcp_microbatch {
    const int64_t *tokens;             /* [num_tokens] or NULL */
    const int64_t *labels;             /* [num_tokens] or NULL */
    const float *loss_mask;            /* [num_tokens] or NULL */
    const int64_t *position_ids;       /* [num_tokens] or NULL */
    const uint8_t *padding_mask;       /* [num_tokens]: 1 where the slot holds no real token */
    const int32_t *cu_seqlens;         /* [num_cu_seqlens]: boundaries of real tokens, whole sequences */
    const int32_t *cu_seqlens_padded;  /* [num_cu_seqlens]: boundaries of the padded spans (before CP slicing) */
    int64_t num_tokens;                /* this rank's slots: its CP slice plus THD tail padding */
    int32_t num_cu_seqlens;
    int32_t num_sequences;             /* real sequences (no dummy) */
    int32_t max_seqlen;
    int32_t local_cp_size;             /* ranks of this microbatch's CP group */
    int32_t cp_rank;                   /* this rank's place in that group */
    /* The same two arrays in host memory.  Without a CUDA workspace they equal cu_seqlens and
       cu_seqlens_padded; with one, those two (and every array above) are device memory and these are not. */
    const int32_t *cu_seqlens_host;
    const int32_t *cu_seqlens_padded_host;
} dcp_microbatch;

/* Measurements of one step on one rank (bytes are payload, excluding this rank's own copies unless named). */
typedef struct dcp_step_stats {
    int64_t tokens_in;                /* real tokens this rank's input held (kept sequences) */
    int64_t tokens_computed;          /* real tokens in this rank's microbatches */
    int64_t tokens_out;               /* slots of this rank's microbatches, padding included */
    int64_t exchange_bytes_sent;      /* token data sent to other ranks */
    int64_t exchange_bytes_received;  /* token data received from other ranks */
    int64_t exchange_bytes_local;     /* token data this rank routed to itself (landed from its samples, not sent) */
    int64_t metadata_bytes_received;  /* lengths and per-rank headers from other ranks */
    int64_t broadcast_bytes;          /* outputs received from (or sent to each) TP peer */
    int64_t reference_bytes_received; /* what the reference's per-field DP all-gathers deliver to this rank from
                                         other ranks for the same batch and PP stage */
    int32_t collectives;              /* collective calls this rank made */
    /* wall time of the phases on this rank (monotonic clock; with a CUDA workspace, stage and pack include
       their uploads and launches, and pack waits for its kernel) */
    int64_t time_plan_ns;             /* gather of lengths, plan, this rank's THD geometry */
    int64_t time_stage_ns;            /* both sides' piece tables, the tokens that travel into the send staging */
    int64_t time_exchange_ns;         /* the all-to-all-v */
    int64_t time_pack_ns;             /* received and kept tokens to their slots, padding and mask */
} dcp_step_stats;

typedef struct dcp_step_output {
    int32_t num_microbatches;
    int32_t num_virtual_stages;
    const dcp_microbatch *microbatches; /* [num_virtual_stages * num_microbatches]; virtual stage v's list
                                           starts at v * num_microbatches; the lists share their arrays */
    int32_t num_sequences;              /* global batch */
    int64_t seqlen_sum;                 /* FLOPs scalars over the global batch's padded lengths, exact */
    int64_t seqlen_squared_sum;
    const dcp_plan *plan;               /* the step's plan; NULL on ranks that received it by broadcast */
    dcp_step_stats stats;
} dcp_step_output;

/*
 * Run one training step's data plane on this rank.
 *
 * Gather the lengths, plan (or take args->plan), strip the fields this PP
 * stage does not need, route every real token once to the rank that computes
 * on it (one all-to-all-v for all fields), pack, pad and CP-slice every
 * microbatch, and broadcast to the TP group.  Ranks that receive by broadcast
 * may pass a NULL input.  On success *output and everything it points to live
 * in the context until the next dcp_step() or dcp_plan_compute() on it, or
 * until it is destroyed; nothing else is written to caller memory, and after
 * a failure the next step works as if it had not been made.
 *
 * Returns: DCP_OK; DCP_ERR_CAPACITY at once, on every rank alike, when
 * config.max_tokens_per_rank is 0; DCP_ERR_NULL_POINTER,
 * DCP_ERR_INVALID_ARGUMENT (arguments); DCP_ERR_CORRUPT_INPUT (bad cu_seqlens
 * or lengths; CP siblings, PP stages or TP peers holding data whose inputs
 * differ: see skip_sibling_data_check); DCP_ERR_COMM (a communicator that
 * reported success with a result that cannot be right: such a step is never
 * DCP_OK); DCP_ERR_FIELD_MISMATCH; DCP_ERR_CAPACITY; DCP_ERR_BAD_LENGTH (a span
 * CP slicing cannot cut); DCP_ERR_OUT_OF_STEP; DCP_ERR_INVALID_CONFIG; the
 * planner's and the communicator's.
 * Collective: every rank of the step calls it; errors are agreed over
 * args->world, so every rank returns the same status, the failing rank with
 * its own message and the others naming it.  A NULL output is agreed like any
 * local error; only a call without args or a usable world communicator (or
 * with a world rank outside it) fails on the calling rank alone.
 * Allocation: none.
 * See docs/step.md (docs/step.md#errors-agreed-on-every-rank for each status's causes).
 */
dcp_status dcp_step(dcp_context *context, const dcp_step_args *args, const dcp_step_input *input,
                    const dcp_step_output **output);

/* ------------------------------------------------------------------------ */
/* Online calibration                                                        */
/* ------------------------------------------------------------------------ */

/*
 * Online calibration: the trainer's own step times keep the cost model true.
 *
 * After a step, the caller reports how long each rank took on each
 * microbatch of the plan it stepped (forward and backward of that rank's
 * share), in picoseconds, the profile's time unit; the context refits
 * config.cost from everything it observed, and the next dcp_plan_compute() /
 * dcp_step() plans with the refit model.
 *  - Rows: one per CP group of a microbatch, the median of its timed ranks
 *    against the features the cost model's terms multiply; the context keeps
 *    the last max_observations rows in a ring placed at creation.
 *  - Fit: weighted least squares in relative terms (recent steps count most);
 *    a term the rows do not identify keeps the prior's value, scaled; outlier
 *    rows are left out.  Double precision in one fixed order without fused
 *    multiply-add, rounded to int64: every rank that observed the same rows
 *    computes the same model bit for bit.
 *  - Safe start: every refit raises the model's margin_ppm to the fit's and
 *    the recent predictions' median error, so a model that has seen little
 *    plans as dynamic_cp does.
 *  - The model is part of the configuration digest every multi-rank call
 *    agrees: ranks holding different models fail their next dcp_step (or
 *    gather) with DCP_ERR_INVALID_CONFIG on every rank, never plan differently.
 * See docs/planning.md#online-calibration for the features, weights,
 * thresholds and the margin rule.
 */
#define DCP_OBSERVE_MISSING INT64_C(-1)         /* the rank held nothing in that microbatch or did not time it (0 too) */
#define DCP_OBSERVE_INVALID INT64_MIN           /* a timing that failed (a NaN): a bad observation */
#define DCP_OBSERVE_MAX_TIME (INT64_C(1) << 53) /* about 2.5 hours in ps: a longer time is a bad observation */

/* Terms of the cost model a fit identified (dcp_observe_report.identified). */
enum {
    DCP_TERM_SCALE = 1u << 0,         /* the prior's scale: any observation */
    DCP_TERM_QUADRATIC = 1u << 1,
    DCP_TERM_LINEAR = 1u << 2,
    DCP_TERM_OVERHEAD = 1u << 3,      /* microbatch_overhead */
    DCP_TERM_ROUND_LATENCY = 1u << 4,
    DCP_TERM_SMALL = 1u << 5          /* small_slope at small_knee */
};
#define DCP_TERM_CP_GATHER(k) (1u << (8 + (k))) /* cp_gather[k], k = 1..16 */

/* Where a context's online calibration stands. */
typedef struct dcp_observe_report {
    int64_t steps;             /* observations taken (calls that succeeded with at least one row) */
    int32_t rows;              /* rows held, at most max_observations */
    int32_t rows_used;         /* rows the last fit kept (the others: outliers) */
    uint32_t identified;       /* DCP_TERM_* the last fit identified; 0 before any */
    int64_t fit_error_ppm;     /* median relative error of the held rows under the current model */
    int64_t predict_error_ppm; /* median relative error of the last 4 steps' rows under the models that planned them */
    int64_t margin_ppm;        /* the current model's margin_ppm */
    uint64_t digest;           /* of the prior and every row observed: equal on ranks that observed alike */
} dcp_observe_report;

/*
 * Observe one step's times on every rank and refit the model.
 *
 * my_times[m] is this rank's time on microbatch m of `plan`
 * (DCP_OBSERVE_MISSING where it held nothing), for the plan it stepped: the
 * one dcp_plan_compute() or dcp_step() made of `lengths` on this context under
 * its current model.  plan and lengths both NULL: the plan of this context's
 * last dcp_step(), of the lengths that step gathered (call it before the next
 * step or plan on the context).  The rows are all-gathered, each checked
 * against its sender's hash, and every rank refits from the same matrix.
 *
 * Returns, on every rank alike, the model unchanged on error: DCP_OK;
 * DCP_ERR_CAPACITY (max_observations is 0); DCP_ERR_INVALID_ARGUMENT (a plan
 * that is not this context's of these lengths, a time that is negative,
 * DCP_OBSERVE_INVALID or past DCP_OBSERVE_MAX_TIME, a time for a microbatch
 * where the rank held nothing; ranks that observed different plans);
 * DCP_ERR_INVALID_CONFIG (ranks whose models or observation histories
 * differ); DCP_ERR_OUT_OF_STEP; DCP_ERR_COMM (rows that did not arrive
 * intact); the communicator's.
 * Collective: over the DPxCP communicator `comm` (rank = DPxCP rank, size
 * num_ranks); counted and tagged like dcp_step (step_id, the call count, the
 * configuration digest with the model, the digest of the observations so far
 * and the plan's seal).
 * Allocation: none.
 * See docs/planning.md#online-calibration.
 */
dcp_status dcp_observe(dcp_context *context, const dcp_plan *plan, const int32_t *lengths, int32_t num_lengths,
                       const int64_t *my_times, dcp_comm *comm, uint64_t step_id);

/*
 * dcp_observe() in one process: times[m * plan->num_ranks + r] is rank r's time on microbatch m.
 *
 * plan and lengths NULL: as dcp_observe.
 * Returns: as dcp_observe().
 * Collective: none; not counted as a multi-rank call.
 * Allocation: none.
 */
dcp_status dcp_observe_matrix(dcp_context *context, const dcp_plan *plan, const int32_t *lengths,
                              int32_t num_lengths, const int64_t *times);

/*
 * One step's rows given directly, for a trainer with plans of its own or a replay.
 *
 * Group g runs lengths[group_first[g] .. group_first[g+1]) on cp_sizes[g]
 * ranks (a power of two) and took times[g] (DCP_OBSERVE_MISSING: no row).
 * Returns: as dcp_observe_matrix(); DCP_ERR_BAD_LENGTH (a length below 1);
 * DCP_ERR_CAPACITY (more groups than max_sequences).
 */
dcp_status dcp_observe_groups(dcp_context *context, int32_t num_groups, const int32_t *cp_sizes,
                              const int32_t *group_first, const int32_t *lengths, const int64_t *times);

/*
 * Predicted times of `plan` under the context's current model.
 *
 * out[m * plan->num_ranks + r] is rank r's time on microbatch m (its group's
 * summed dcp_cost(), the small-microbatch hinge and microbatch_overhead, in
 * the model's unit), DCP_OBSERVE_MISSING where it holds nothing.  Any valid
 * plan, not only this context's.
 * Returns: DCP_OK; DCP_ERR_INVALID_PLAN (the plan is validated for these lengths).
 * Allocation: none.
 */
dcp_status dcp_observe_predict(dcp_context *context, const dcp_plan *plan, const int32_t *lengths,
                               int32_t num_lengths, int64_t *out);

/*
 * Where the calibration stands (all zero when max_observations is 0).
 *
 * Returns: DCP_OK; DCP_ERR_NULL_POINTER.
 */
dcp_status dcp_observe_status(const dcp_context *context, dcp_observe_report *report);

#ifdef __cplusplus
}
#endif

/* The rest of the public API, in headers of their own (each includes this one). */
#include "dcpack_inproc.h" /* the in-process communicator (tests, CPU-only runs) */
#include "dcpack_model.h"  /* the MTP packed-sequence roll, GDN conv padding */
#include "dcpack_cuda.h"   /* CUDA workspaces, the NCCL communicator, dynamic-CP groups */

#endif /* DCPACK_H */
