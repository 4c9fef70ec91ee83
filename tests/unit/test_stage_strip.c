/*
 * test_stage_strip.c - the strip stage (pipeline/strip.c) on its own: which
 * fields each PP rank keeps and which of them each virtual stage shows, for
 * every PP rank, virtual stage and MTP mask of PP 1, 2 and 4 (VPP 1 and 2,
 * and VPP 3 for a middle virtual stage), written out by hand.
 *
 * The rule being tabulated: the first virtual stage of PP rank 0 takes the
 * inputs, I = tokens | position_ids; the last virtual stage of the last PP
 * rank takes the targets, T = labels | loss_mask; a virtual stage whose bit is
 * set in the MTP mask takes both; a PP rank keeps the union of what its
 * virtual stages take (all four fields as soon as any stage is MTP).
 */
#include "dcp_test.h"
#include "../pipeline/step.h"

#define I (DCP_FIELD_TOKENS | DCP_FIELD_POSITION_IDS)  /* 0x1 | 0x8 = 0x9 */
#define T (DCP_FIELD_LABELS | DCP_FIELD_LOSS_MASK)     /* 0x2 | 0x4 = 0x6 */
#define A (DCP_FIELD_ALL)                              /* 0xF */

typedef struct strip_case {
    int32_t pp, vpp, rank;
    uint32_t mtp;
    uint32_t kept;    /* dcp__strip_fields */
    uint32_t view[3]; /* dcp__strip_view_fields for v = 0 .. vpp-1, given `kept` */
} strip_case;

static const strip_case cases[] = {
    /* PP 1: rank 0 is first and last */
    {1, 1, 0, 0x0, A, {A}},
    {1, 1, 0, 0x1, A, {A}},
    {1, 2, 0, 0x0, A, {I, T}},           /* v0 first, v1 last */
    {1, 2, 0, 0x1, A, {A, T}},           /* v0 first + MTP */
    {1, 2, 0, 0x2, A, {I, A}},           /* v1 last + MTP */
    {1, 2, 0, 0x3, A, {A, A}},
    {1, 3, 0, 0x0, A, {I, 0, T}},        /* v1 is neither first nor last */
    {1, 3, 0, 0x2, A, {I, A, T}},        /* ... unless it holds MTP layers */
    /* PP 2 */
    {2, 1, 0, 0x0, I, {I}},
    {2, 1, 0, 0x1, A, {A}},
    {2, 1, 1, 0x0, T, {T}},
    {2, 1, 1, 0x1, A, {A}},
    {2, 2, 0, 0x0, I, {I, 0}},
    {2, 2, 0, 0x1, A, {A, 0}},
    {2, 2, 0, 0x2, A, {I, A}},
    {2, 2, 0, 0x3, A, {A, A}},
    {2, 2, 1, 0x0, T, {0, T}},
    {2, 2, 1, 0x1, A, {A, T}},
    {2, 2, 1, 0x2, A, {0, A}},
    {2, 2, 1, 0x3, A, {A, A}},
    /* PP 4: ranks 1 and 2 are middle stages */
    {4, 1, 0, 0x0, I, {I}},
    {4, 1, 0, 0x1, A, {A}},
    {4, 1, 1, 0x0, 0, {0}},
    {4, 1, 1, 0x1, A, {A}},
    {4, 1, 2, 0x0, 0, {0}},
    {4, 1, 2, 0x1, A, {A}},
    {4, 1, 3, 0x0, T, {T}},
    {4, 1, 3, 0x1, A, {A}},
    {4, 2, 0, 0x0, I, {I, 0}},
    {4, 2, 0, 0x1, A, {A, 0}},
    {4, 2, 0, 0x2, A, {I, A}},
    {4, 2, 0, 0x3, A, {A, A}},
    {4, 2, 1, 0x0, 0, {0, 0}},
    {4, 2, 1, 0x1, A, {A, 0}},
    {4, 2, 1, 0x2, A, {0, A}},
    {4, 2, 1, 0x3, A, {A, A}},
    {4, 2, 2, 0x0, 0, {0, 0}},
    {4, 2, 2, 0x1, A, {A, 0}},
    {4, 2, 2, 0x2, A, {0, A}},
    {4, 2, 2, 0x3, A, {A, A}},
    {4, 2, 3, 0x0, T, {0, T}},
    {4, 2, 3, 0x1, A, {A, T}},
    {4, 2, 3, 0x2, A, {0, A}},
    {4, 2, 3, 0x3, A, {A, A}},
};

static void config_for(int32_t pp, int32_t vpp, dcp_config *c)
{
    dcp_config_default(c);
    c->pipeline_parallel_size = pp;
    c->virtual_pipeline_size = vpp;
}

DCP_TEST(every_pp_rank_virtual_stage_and_mtp_mask)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const strip_case *k = &cases[i];
        dcp_config c;
        config_for(k->pp, k->vpp, &c);
        uint32_t kept = dcp__strip_fields(&c, k->rank, k->mtp);
        if (kept != k->kept)
            dcp_test_fail(__FILE__, __LINE__, "PP %d VPP %d rank %d mtp 0x%x: keeps 0x%x, expected 0x%x", k->pp,
                          k->vpp, k->rank, k->mtp, kept, k->kept);
        for (int32_t v = 0; v < k->vpp; v++) {
            uint32_t shown = dcp__strip_view_fields(&c, k->rank, k->mtp, v, k->kept);
            if (shown != k->view[v])
                dcp_test_fail(__FILE__, __LINE__, "PP %d VPP %d rank %d mtp 0x%x v %d: shows 0x%x, expected 0x%x",
                              k->pp, k->vpp, k->rank, k->mtp, v, shown, k->view[v]);
        }
    }
}

/* What a view shows is cut down to what the rank kept (the input's fields intersected with the stage's). */
DCP_TEST(views_show_only_kept_fields)
{
    dcp_config c;
    config_for(2, 2, &c);
    /* input without loss_mask (0x4) and position_ids (0x8): kept = A & 0x3 */
    const uint32_t kept = A & (DCP_FIELD_TOKENS | DCP_FIELD_LABELS);
    /* rank 0, no MTP: v0 shows I & 0x3 = tokens only; v1 shows nothing */
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 0, 0, 0, kept), DCP_FIELD_TOKENS);
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 0, 0, 1, kept), 0);
    /* rank 1, no MTP: v1 shows T & 0x3 = labels only */
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 1, 0, 0, kept), 0);
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 1, 0, 1, kept), DCP_FIELD_LABELS);
    /* rank 1, v0 MTP: A & 0x3 */
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 1, 0x1, 0, kept), DCP_FIELD_TOKENS | DCP_FIELD_LABELS);
    /* nothing kept: nothing shown, even on an MTP stage */
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 0, 0x3, 0, 0), 0);
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 0, 0x3, 1, 0), 0);
}

/* Bits of the MTP mask for virtual stages other than v do not leak into v. */
DCP_TEST(mtp_bits_apply_to_their_own_virtual_stage)
{
    dcp_config c;
    config_for(4, 2, &c);
    /* rank 1 (middle): bit 1 set, stage 0 asked: nothing; stage 1 asked: everything */
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 1, 0x2, 0, A), 0);
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 1, 0x2, 1, A), A);
    /* a bit past the virtual stages (bit 2 with VPP 2) names no stage: v0 and v1 show nothing on a middle rank */
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 2, 0x4, 0, A), 0);
    DCP_CHECK_EQ_INT(dcp__strip_view_fields(&c, 2, 0x4, 1, A), 0);
}
