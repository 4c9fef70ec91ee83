/*
 * svg_write.c - `--svg FILE`: a plan as a picture.
 *
 * Ranks run down, time runs across: microbatch after microbatch, each as
 * wide as its slowest rank plus the per-microbatch overhead (grey).  Every
 * sequence is one box per rank that holds it (class "seq"), as wide as its
 * per-rank cost and coloured by its CP size.  A red bar marks the slowest
 * rank(s) of each microbatch (a triangle under the plot points at it); a
 * dashed line marks the lower bound; the axis under the plot is in ms with a
 * calibrated profile (time_unit_ps), else in cost units.  Row
 * heights, labels and strokes scale so the picture reads at 8 ranks and at 512.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const palette[] = {"#4e79a7", "#59a14f", "#f28e2b", "#b07aa1", "#edc948", "#76b7b2",
                                      "#ff9da7", "#9c755f", "#bab0ac", "#8cd17d", "#499894", "#d4a6c8",
                                      "#86bcb6", "#f1ce63", "#79706e", "#d37295", "#a0cbe8"};
#define SLOWEST_COLOUR "#d62728"

static int log2_floor(int64_t v)
{
    int k = 0;
    while (k < 62 && ((int64_t)2 << k) <= v) k++;
    return k;
}

static const char *cp_colour(int32_t cp)
{
    int k = log2_floor(cp);
    return palette[k < (int)(sizeof palette / sizeof palette[0]) ? k : (int)(sizeof palette / sizeof palette[0]) - 1];
}

static const char *grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < size; i++) {
        if (i > 0 && digits[i - 1] != '-' && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

static void xml_text(FILE *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, out);
        }
    }
}

/* A round tick step (1, 2 or 5 times a power of ten) giving at most about `ticks` ticks over `span`. */
static double tick_step(double span, int ticks)
{
    double raw = span / ticks, p = pow(10.0, floor(log10(raw)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

/* The time axis under the plot: ms with a calibrated profile, else cost units. */
static void time_axis(FILE *out, double left, double y, double plot_w, int64_t span, int64_t time_unit_ps)
{
    const double ms_per_unit = time_unit_ps > 0 ? (double)time_unit_ps * 1e-9 : 0.0;
    const double total = time_unit_ps > 0 ? (double)span * ms_per_unit : (double)span;
    fprintf(out, "<g class=\"time-axis\">\n");
    fprintf(out, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#555\" stroke-width=\"1\"/>\n", left, y,
            left + plot_w, y);
    if (total > 0) {
        double step = tick_step(total, 10);
        for (int i = 0; i * step <= total * (1 + 1e-9); i++) {
            double v = i * step, x = left + plot_w * v / total;
            char label[48], digits[40];
            if (time_unit_ps > 0) snprintf(label, sizeof label, "%g", v);
            else snprintf(label, sizeof label, "%s", grouped((int64_t)llround(v), digits, sizeof digits));
            fprintf(out, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#555\" stroke-width=\"1\"/>\n",
                    x, y, x, y + 4);
            fprintf(out,
                    "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" font-size=\"10\" text-anchor=\"middle\" "
                    "fill=\"#555\">%s</text>\n",
                    x, y + 15, label);
        }
    }
    fprintf(out, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
            left + plot_w, y + 29, time_unit_ps > 0 ? "time (ms)" : "cost units (a profile with time_unit_ps gives ms)");
    fprintf(out, "</g>\n");
}

/* Labels go above the microbatches that have room (34 px from the previous label); the last one is always
   labelled, taking the place of a previous label it would overlap. */
static void choose_labels(const double *x, int32_t count, unsigned char *labelled)
{
    double last = -1e9;
    int32_t previous = -1;
    for (int32_t i = 0; i < count; i++) {
        labelled[i] = x[i] - last >= 34.0;
        if (labelled[i]) last = x[i], previous = i;
    }
    if (count > 0 && !labelled[count - 1]) {
        if (previous >= 0 && x[count - 1] - x[previous] < 34.0 && previous > 0) labelled[previous] = 0;
        labelled[count - 1] = 1;
    }
}

int dcp_cli_svg_write(const char *command, const char *path, const dcp_plan *plan, const dcp_cli_trace *trace,
                      const dcp_config *config, const dcp_plan_stats *stats, const char *title, int64_t time_unit_ps)
{
    FILE *out = fopen(path, "w");
    if (!out) return dcp_cli_fail(DCP_EXIT_ERROR, command, "cannot write %s: %s", path, strerror(errno));
    const dcp_cost_model *model = &config->cost;
    const int32_t ranks = plan->num_ranks;
    const double plot_w = 1400.0;
    const double row_h = fmax(1.5, fmin(24.0, 960.0 / ranks));
    const double left = 78.0, top = 92.0;
    const double plot_h = row_h * ranks;
    const double axis_h = 40.0; /* the slowest-rank markers and the time axis under the plot */
    const double legend_h = 54.0 + axis_h;
    const double width = left + plot_w + 24.0, height = top + plot_h + legend_h;
    const int64_t span = stats->makespan > stats->lower_bound ? stats->makespan : stats->lower_bound;
    const double scale = span > 0 ? plot_w / (double)span : 0.0;
    const int stroke = row_h >= 6.0;
    const double font = 12.0;

    fprintf(out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"%.0f\">\n",
            width, height, width, height, font);
    fprintf(out, "<rect class=\"background\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", width,
            height);
    fprintf(out, "<text x=\"%.0f\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", left);
    xml_text(out, title);
    fprintf(out, "</text>\n");
    double efficiency = stats->makespan > 0 ? (double)stats->lower_bound / (double)stats->makespan : 0.0;
    char makespan[40], bound[40];
    if (time_unit_ps > 0) {
        snprintf(makespan, sizeof makespan, "%.2f ms", dcp_cli_units_ms(stats->makespan, time_unit_ps));
        snprintf(bound, sizeof bound, "%.2f ms", dcp_cli_units_ms(stats->lower_bound, time_unit_ps));
    } else {
        grouped(stats->makespan, makespan, sizeof makespan);
        grouped(stats->lower_bound, bound, sizeof bound);
    }
    fprintf(out,
            "<text x=\"%.0f\" y=\"40\">%d sequences, %d microbatches, makespan %s, lower bound %s, "
            "efficiency %.3f. Box width = per-rank cost; colour = CP size.</text>\n",
            left, trace->count, plan->num_microbatches, makespan, bound, efficiency);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\" fill=\"#555\">rank</text>\n", left - 8, top - 8);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">microbatch</text>\n", left, top - 30);

    /* rank labels: as many as fit at 13 px apart */
    int label_every = (int)ceil(13.0 / row_h);
    for (int step = 1;; step *= 2)
        if (step >= label_every) {
            label_every = step;
            break;
        }
    for (int32_t r = 0; r < ranks; r += label_every)
        fprintf(out, "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"11\" dominant-baseline=\"middle\">%d</text>\n",
                left - 8, top + (r + 0.5) * row_h, r);

    /* where each microbatch starts, and its slowest group (the first of the slowest) */
    const int32_t nmb = plan->num_microbatches;
    double *xs = malloc(sizeof *xs * (size_t)(nmb > 0 ? nmb : 1));
    int32_t *slowest_of = malloc(sizeof *slowest_of * (size_t)(nmb > 0 ? nmb : 1));
    unsigned char *labelled = malloc((size_t)(nmb > 0 ? nmb : 1));
    if (!xs || !slowest_of || !labelled) {
        free(xs);
        free(slowest_of);
        free(labelled);
        fclose(out);
        return dcp_cli_fail(DCP_EXIT_ERROR, command, "out of memory drawing %s", path);
    }
    double x0 = left;
    for (int32_t m = 0; m < nmb; m++) {
        int64_t slowest = -1;
        slowest_of[m] = plan->microbatch_first_group[m];
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            int64_t c = dcp_cli_group_cost(model, plan, trace->lengths, g);
            if (c > slowest) slowest = c, slowest_of[m] = g;
        }
        xs[m] = x0;
        x0 += (double)slowest * scale + (double)model->microbatch_overhead * scale;
    }
    choose_labels(xs, nmb, labelled);

    for (int32_t m = 0; m < nmb; m++) {
        int32_t first = plan->microbatch_first_group[m], last = plan->microbatch_first_group[m + 1];
        int64_t slowest = dcp_cli_group_cost(model, plan, trace->lengths, slowest_of[m]);
        x0 = xs[m];
        double busy_w = (double)slowest * scale, overhead_w = (double)model->microbatch_overhead * scale;
        fprintf(out, "<g class=\"microbatch\" id=\"mb%d\">\n", m);
        fprintf(out, "<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", x0, top,
                busy_w, plot_h, m % 2 ? "#f4f4f4" : "#fbfbfb");
        if (overhead_w > 0)
            fprintf(out,
                    "<rect class=\"overhead\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#d9d9d9\"/>\n",
                    x0 + busy_w, top, overhead_w, plot_h);
        if (labelled[m]) { /* the last one: right-aligned when it is a sliver at the end */
            int sliver = m == nmb - 1 && busy_w + overhead_w < 14.0;
            fprintf(out, "<text class=\"microbatch-label\" x=\"%.2f\" y=\"%.0f\" font-size=\"11\"%s>%d</text>\n",
                    sliver ? x0 + busy_w + overhead_w : x0 + 1, top - 14, sliver ? " text-anchor=\"end\"" : "", m);
        }
        for (int32_t g = first; g < last; g++) {
            int32_t cp = plan->group_cp_size[g];
            const char *colour = cp_colour(cp);
            for (int32_t r = plan->group_first_rank[g]; r < plan->group_first_rank[g] + cp; r++) {
                double x = x0, y = top + r * row_h;
                for (int32_t i = plan->group_first_id[g]; i < plan->group_first_id[g + 1]; i++) {
                    int32_t id = plan->ids[i];
                    int64_t c = dcp_cost(model, trace->lengths[id], cp);
                    double w = (double)c * scale;
                    fprintf(out, "<rect class=\"seq\" data-id=\"%d\" data-rank=\"%d\" x=\"%.2f\" y=\"%.2f\" "
                                 "width=\"%.2f\" height=\"%.2f\" fill=\"%s\"",
                            id, r, x, y, w, row_h, colour);
                    if (stroke) fprintf(out, " stroke=\"#ffffff\" stroke-width=\"0.6\"");
                    if (r == plan->group_first_rank[g])
                        fprintf(out, "><title>sequence %d: %d tokens, CP %d, cost %lld per rank</title></rect>\n", id,
                                trace->lengths[id], cp, (long long)c);
                    else fprintf(out, "/>\n");
                    if (w >= 30.0 && row_h >= 12.0)
                        fprintf(out,
                                "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.0f\" fill=\"#ffffff\" "
                                "dominant-baseline=\"middle\">%d</text>\n",
                                x + 3, y + row_h / 2, fmin(11.0, row_h - 3), id);
                    x += w;
                }
            }
        }
        fprintf(out, "</g>\n");
    }

    /* The slowest rank(s) of each microbatch, drawn last so no later box covers them: a red bar inside the
       end of their boxes (at least 3 px wide and tall) and a red triangle under the plot pointing up at it. */
    for (int32_t m = 0; m < nmb; m++) {
        int64_t slowest = dcp_cli_group_cost(model, plan, trace->lengths, slowest_of[m]);
        double end = xs[m] + (double)slowest * scale;
        double bar = fmax(3.0, fmin(5.0, row_h / 3));
        for (int32_t g = plan->microbatch_first_group[m]; g < plan->microbatch_first_group[m + 1]; g++) {
            if (dcp_cli_group_cost(model, plan, trace->lengths, g) != slowest) continue;
            int32_t cp = plan->group_cp_size[g], r0 = plan->group_first_rank[g];
            fprintf(out,
                    "<rect class=\"slowest\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                    "<title>microbatch %d: slowest rank%s %d-%d, cost %lld</title></rect>\n",
                    fmax(xs[m], end - bar), top + r0 * row_h, fmin(bar, fmax(end - xs[m], 1.0)), fmax(3.0, cp * row_h),
                    SLOWEST_COLOUR, m, cp > 1 ? "s" : "", r0, r0 + cp - 1, (long long)slowest);
        }
        fprintf(out, "<polygon class=\"slowest-marker\" points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\"/>\n", end - 5,
                top + plot_h + 10, end + 5, top + plot_h + 10, end, top + plot_h + 2, SLOWEST_COLOUR);
    }
    free(xs);
    free(slowest_of);
    free(labelled);
    time_axis(out, left, top + plot_h + 14, plot_w, span, time_unit_ps);

    double lb = left + (double)stats->lower_bound * scale;
    fprintf(out,
            "<line class=\"lower-bound\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000000\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
            lb, top - 6, lb, top + plot_h + 6);
    fprintf(out, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"end\" font-size=\"11\">lower bound</text>\n", lb - 3,
            top - 30);

    /* legend: the CP sizes present, the slowest-rank bar, the lower-bound line */
    double ly = top + plot_h + axis_h + 30, lx = left;
    int present[64] = {0};
    for (int32_t g = 0; g < plan->num_groups; g++) present[log2_floor(plan->group_cp_size[g])] = 1;
    for (int k = 0; k < 64; k++) {
        if (!present[k]) continue;
        fprintf(out, "<rect class=\"legend\" x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", lx,
                ly - 11, cp_colour((int32_t)1 << (k < 30 ? k : 30)));
        fprintf(out, "<text x=\"%.0f\" y=\"%.0f\">CP %lld</text>\n", lx + 19, ly, (long long)1 << k);
        lx += 82;
    }
    fprintf(out, "<rect class=\"legend\" x=\"%.0f\" y=\"%.0f\" width=\"4\" height=\"14\" fill=\"%s\"/>\n", lx, ly - 11,
            SLOWEST_COLOUR);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\">slowest rank of a microbatch</text>\n", lx + 9, ly);
    lx += 210;
    fprintf(out, "<rect class=\"legend\" x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"#d9d9d9\"/>\n", lx,
            ly - 11);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\">microbatch overhead</text>\n", lx + 19, ly);
    lx += 170;
    fprintf(out,
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#000000\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6 4\"/>\n",
            lx, ly - 4, lx + 24, ly - 4);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\">lower bound</text>\n", lx + 29, ly);
    fprintf(out, "</svg>\n");
    int failed = ferror(out);
    if (fclose(out) != 0 || failed) return dcp_cli_fail(DCP_EXIT_ERROR, command, "cannot write %s", path);
    return DCP_EXIT_OK;
}
