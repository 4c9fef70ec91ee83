/*
 * svg_write.c - `--svg FILE`: a plan as a picture.
 *
 * Ranks run down, time runs across: microbatch after microbatch, each as
 * wide as its slowest rank plus the per-microbatch overhead (grey).  Every
 * sequence is one box per rank that holds it (class "seq"), as wide as its
 * per-rank cost and coloured by its CP size.  A red bar marks the slowest
 * rank(s) of each microbatch; a dashed line marks the lower bound.  Row
 * heights, labels and strokes scale so the picture reads at 8 ranks and at 512.
 */
#include "cli.h"

#include <math.h>
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

int dcp_cli_svg_write(const char *command, const char *path, const dcp_plan *plan, const dcp_cli_trace *trace,
                      const dcp_config *config, const dcp_plan_stats *stats, const char *title)
{
    FILE *out = fopen(path, "w");
    if (!out) return dcp_cli_fail(DCP_EXIT_ERROR, command, "cannot write %s", path);
    const dcp_cost_model *model = &config->cost;
    const int32_t ranks = plan->num_ranks;
    const double plot_w = 1400.0;
    const double row_h = fmax(1.5, fmin(24.0, 960.0 / ranks));
    const double left = 78.0, top = 92.0;
    const double plot_h = row_h * ranks;
    const double legend_h = 54.0;
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
    fprintf(out,
            "<text x=\"%.0f\" y=\"40\">%d sequences, %d microbatches, makespan %s, lower bound %s, "
            "efficiency %.3f. Box width = per-rank cost; colour = CP size.</text>\n",
            left, trace->count, plan->num_microbatches, grouped(stats->makespan, makespan, sizeof makespan),
            grouped(stats->lower_bound, bound, sizeof bound), efficiency);
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

    double x0 = left, last_label = -1e9;
    for (int32_t m = 0; m < plan->num_microbatches; m++) {
        int32_t first = plan->microbatch_first_group[m], last = plan->microbatch_first_group[m + 1];
        int64_t slowest = -1;
        int32_t slowest_group = first;
        for (int32_t g = first; g < last; g++) {
            int64_t c = dcp_cli_group_cost(model, plan, trace->lengths, g);
            if (c > slowest) slowest = c, slowest_group = g;
        }
        double busy_w = (double)slowest * scale, overhead_w = (double)model->microbatch_overhead * scale;
        fprintf(out, "<g class=\"microbatch\" id=\"mb%d\">\n", m);
        fprintf(out, "<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", x0, top,
                busy_w, plot_h, m % 2 ? "#f4f4f4" : "#fbfbfb");
        if (overhead_w > 0)
            fprintf(out,
                    "<rect class=\"overhead\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#d9d9d9\"/>\n",
                    x0 + busy_w, top, overhead_w, plot_h);
        if (x0 - last_label >= 34.0) {
            fprintf(out, "<text x=\"%.2f\" y=\"%.0f\" font-size=\"11\">%d</text>\n", x0 + 1, top - 14, m);
            last_label = x0;
        }
        for (int32_t g = first; g < last; g++) {
            int32_t cp = plan->group_cp_size[g];
            const char *colour = cp_colour(cp);
            int64_t group_cost = dcp_cli_group_cost(model, plan, trace->lengths, g);
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
            if (group_cost == slowest && g == slowest_group) /* a red triangle over the column points at it */
                fprintf(out,
                        "<polygon class=\"slowest-marker\" points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\"/>\n",
                        x0 + busy_w - 5, top - 9, x0 + busy_w + 5, top - 9, x0 + busy_w, top - 1, SLOWEST_COLOUR);
            if (group_cost == slowest) { /* the slowest rank(s): a red bar at their end */
                double bar = fmax(2.0, fmin(4.0, row_h / 3));
                fprintf(out,
                        "<rect class=\"slowest\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                        "<title>microbatch %d: slowest rank%s %d-%d, cost %lld</title></rect>\n",
                        x0 + busy_w - bar / 2, top + plan->group_first_rank[g] * row_h, bar, cp * row_h,
                        SLOWEST_COLOUR, m, cp > 1 ? "s" : "", plan->group_first_rank[g],
                        plan->group_first_rank[g] + cp - 1, (long long)slowest);
            }
        }
        fprintf(out, "</g>\n");
        x0 += busy_w + overhead_w;
    }

    double lb = left + (double)stats->lower_bound * scale;
    fprintf(out,
            "<line class=\"lower-bound\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000000\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
            lb, top - 6, lb, top + plot_h + 6);
    fprintf(out, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"end\" font-size=\"11\">lower bound</text>\n", lb - 3,
            top - 30);

    /* legend: the CP sizes present, the slowest-rank bar, the lower-bound line */
    double ly = top + plot_h + 30, lx = left;
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
