/* sched_show.c — a simulated schedule for people and tools: text timeline, summary,
 * JSON and SVG (see sched_show.h). */
#include "sched_show.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TIMELINE_MAX_COLS 1000 /* coarser time units beyond this */
#define TEXT_WIDTH 120         /* wrap the text timeline at about this many columns */

/* The costs line of the summary and the SVG: "F=1 B=2 transfer=0", or with W costs
 * ([Note: split costs] in sched_sim.h) "F=1 B(input)=1 W=1 transfer=0". */
static void costs_text(const SchedSimCosts *c, FILE *f) {
    if (sched_sim_costs_split(c))
        fprintf(f, "F=%g B(input)=%g W=%g transfer=%g", c->F, c->B, c->W, c->X);
    else fprintf(f, "F=%g B=%g transfer=%g", c->F, c->B, c->X);
}

/* Timeline label of a compute action: "F3" when the rank holds one stage, else the
 * stage too ("5F3"), as in the action text form. */
static int compute_label(const Schedule *s, Action a, char *buf, size_t n) {
    if (s->v > 1) return sched_action_format(a, buf, n);
    return snprintf(buf, n, "%s%d", sched_type_name(a.type), (int)a.mb);
}

/* Every compute action of s starts and ends on a multiple of unit. */
static int on_grid(const Schedule *s, const SchedSimResult *res, double unit) {
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            if (!sched_is_compute(s->acts[r][i].type)) continue;
            double a = res->start[r][i] / unit, b = res->end[r][i] / unit;
            if (fabs(a - round(a)) > 1e-6 || fabs(b - round(b)) > 1e-6) return 0;
        }
    return 1;
}

/* One text column: the largest fraction 1/k (k <= 16) of the shortest compute action
 * on which every action starts and ends, else the shortest action itself; coarser
 * when that would make more than TIMELINE_MAX_COLS columns. */
static double time_unit(const Schedule *s, const SchedSimResult *res) {
    double shortest = 0, unit;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            double d = res->end[r][i] - res->start[r][i];
            if (sched_is_compute(s->acts[r][i].type) && d > 0 && (shortest == 0 || d < shortest))
                shortest = d;
        }
    if (shortest == 0) shortest = 1;
    unit = shortest;
    for (int k = 1; k <= 16; k++)
        if (on_grid(s, res, shortest / k)) {
            unit = shortest / k;
            break;
        }
    if (res->makespan / unit > TIMELINE_MAX_COLS) unit = res->makespan / TIMELINE_MAX_COLS;
    return unit;
}

/* Index of the compute action running at time t on rank r, or -1 (idle). *cursor
 * only moves forward: call with increasing t. */
static int running_at(const Schedule *s, const SchedSimResult *res, int r, int *cursor, double t) {
    int i = *cursor;
    while (i < s->len[r] && (!sched_is_compute(s->acts[r][i].type) || res->end[r][i] <= t)) i++;
    *cursor = i;
    return i < s->len[r] && res->start[r][i] <= t ? i : -1;
}

/* Header of one block of columns [t0, t1): the time of every fifth column. */
static void timeline_header(int t0, int t1, int w, double unit, FILE *f) {
    size_t n = 8 + (size_t)(t1 - t0) * w + 16;
    char *line = pp_malloc(n + 1);
    memset(line, ' ', n);
    memcpy(line, "time", 4);
    for (int t = t0; t < t1; t++) {
        if (t % 5 != 0 && t != t0) continue;
        char num[32];
        int len = snprintf(num, sizeof num, "%g", t * unit);
        memcpy(line + 8 + (size_t)(t - t0) * w, num, (size_t)len);
    }
    while (n > 0 && line[n - 1] == ' ') n--;
    line[n] = '\0';
    fprintf(f, "%s\n", line);
    free(line);
}

void sched_show_timeline(const Schedule *s, const SchedSimResult *res, FILE *f) {
    char label[SCHED_ACTION_TEXT_MAX];
    double unit = time_unit(s, res);
    int cols = (int)ceil(res->makespan / unit - 1e-9), w = 3;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++)
            if (sched_is_compute(s->acts[r][i].type)) {
                int n = compute_label(s, s->acts[r][i], label, sizeof label) + 1;
                if (n > w) w = n;
            }
    int per_block = (TEXT_WIDTH - 8) / w < 5 ? 5 : (TEXT_WIDTH - 8) / w;
    int blocks = (cols + per_block - 1) / per_block;
    if (blocks > 1) per_block = (cols + blocks - 1) / blocks; /* even blocks */
    int *cursor = pp_calloc((size_t)s->P, sizeof(int));
    fprintf(f, "timeline (one column = %g time unit%s, '.' = idle):\n", unit, unit == 1 ? "" : "s");
    for (int t0 = 0; t0 < cols; t0 += per_block) {
        int t1 = t0 + per_block < cols ? t0 + per_block : cols;
        timeline_header(t0, t1, w, unit, f);
        for (int r = 0; r < s->P; r++) {
            fprintf(f, "rank %-3d", r);
            for (int t = t0; t < t1; t++) {
                int i = running_at(s, res, r, &cursor[r], (t + 0.5) * unit);
                if (i >= 0) compute_label(s, s->acts[r][i], label, sizeof label);
                fprintf(f, "%-*s", t + 1 < t1 ? w : 1, i >= 0 ? label : ".");
            }
            fputc('\n', f);
        }
        if (t1 < cols) fputc('\n', f);
    }
    free(cursor);
}

/* ================================================================== summary === */

static int uniform_costs(const SchedSimCosts *c) {
    return !c->F_stage && !c->B_stage && !c->W_stage && !c->action_cost;
}

void sched_show_summary(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c,
                        const char *const *stage_layers, FILE *f) {
    const char *formula;
    double closed = sched_bubble_closed_form(s, &formula);
    fprintf(f, "schedule %s: P=%d ranks, v=%d chunk%s per rank (S=%d stages), M=%d microbatches\n",
            s->name, s->P, s->v, s->v == 1 ? "" : "s", s->S, s->M);
    if (uniform_costs(c)) {
        fprintf(f, "costs: ");
        costs_text(c, f);
        fprintf(f, " (time units per action)\n");
    } else {
        fprintf(f, "costs: per stage or per action, as given\n");
    }
    fprintf(f, "makespan %g, bubble fraction %.4f", res->makespan, res->bubble);
    if (closed >= 0)
        fprintf(f, " (closed form %s = %.4f, for uniform F, B and free transfers)",
                formula, closed);
    else
        fprintf(f, " (no closed form for this case)");
    fprintf(f, "\n\nrank  busy      idle      peak_inflight\n");
    for (int r = 0; r < s->P; r++)
        fprintf(f, "%-5d %-9g %-9g %d\n", r, res->busy[r], res->idle[r], res->rank_peak[r]);
    fprintf(f, "\nstage  rank  chunk  peak_inflight%s\n", stage_layers ? "  layers" : "");
    for (int st = 0; st < s->S; st++) {
        fprintf(f, "%-6d %-5d %-6d %d", st, sched_stage_rank(s, st),
                sched_stage_chunk(s, st), res->stage_peak[st]);
        if (stage_layers) fprintf(f, "%*s%s", 15 - snprintf(NULL, 0, "%d", res->stage_peak[st]),
                                  "", stage_layers[st]);
        fputc('\n', f);
    }
}

/* ===================================================================== JSON === */

static void json_string(const char *str, FILE *f) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void json_per_rank(const Schedule *s, const SchedSimResult *res, FILE *f) {
    char text[SCHED_ACTION_TEXT_MAX];
    fprintf(f, "  \"per_rank\": [\n");
    for (int r = 0; r < s->P; r++) {
        fprintf(f, "    {\"rank\": %d, \"busy\": %.10g, \"idle\": %.10g, \"peak_inflight\": %d,"
                " \"actions\": [", r, res->busy[r], res->idle[r], res->rank_peak[r]);
        for (int i = 0; i < s->len[r]; i++) {
            sched_action_format(s->acts[r][i], text, sizeof text);
            fprintf(f, "%s\"%s\"", i ? ", " : "", text);
        }
        fprintf(f, "]}%s\n", r + 1 < s->P ? "," : "");
    }
    fprintf(f, "  ],\n");
}

void sched_show_json(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c,
                     const char *const *stage_layers, FILE *f) {
    double closed = sched_bubble_closed_form(s, NULL);
    fprintf(f, "{\n  \"schedule\": ");
    json_string(s->name, f);
    fprintf(f, ",\n  \"ranks\": %d,\n  \"virtual_stages\": %d,\n  \"stages\": %d,\n"
            "  \"microbatches\": %d,\n", s->P, s->v, s->S, s->M);
    if (uniform_costs(c))
        fprintf(f, "  \"costs\": {\"F\": %.10g, \"B\": %.10g, \"W\": %.10g, \"X\": %.10g},\n", c->F,
                c->B, sched_sim_costs_split(c) ? c->W : 0.0, c->X);
    else
        fprintf(f, "  \"costs\": null,\n");
    fprintf(f, "  \"makespan\": %.10g,\n  \"bubble_fraction\": %.10g,\n", res->makespan,
            res->bubble);
    if (closed >= 0) fprintf(f, "  \"bubble_fraction_closed_form\": %.10g,\n", closed);
    else fprintf(f, "  \"bubble_fraction_closed_form\": null,\n");
    json_per_rank(s, res, f);
    fprintf(f, "  \"per_stage\": [\n");
    for (int st = 0; st < s->S; st++) {
        fprintf(f, "    {\"stage\": %d, \"rank\": %d, \"chunk\": %d, \"peak_inflight\": %d", st,
                sched_stage_rank(s, st), sched_stage_chunk(s, st), res->stage_peak[st]);
        if (stage_layers) {
            fprintf(f, ", \"layers\": ");
            json_string(stage_layers[st], f);
        }
        fprintf(f, "}%s\n", st + 1 < s->S ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}

/* ====================================================================== SVG === */

#define SVG_LEFT 96.0   /* room for the rank labels */
#define SVG_TOP 72.0    /* title and subtitle */
#define SVG_LANE 38.0   /* height of one rank's lane */
#define SVG_GAP 8.0     /* between lanes */

/* Colour of microbatch m: hues a golden angle apart so neighbours differ; forwards
 * light, backwards dark. */
static void mb_colour(int m, int dark, char out[8]) {
    double h = fmod(m * 137.508, 360.0) / 60.0, sat = dark ? 0.60 : 0.72, l = dark ? 0.36 : 0.76;
    double chroma = (1 - fabs(2 * l - 1)) * sat, x = chroma * (1 - fabs(fmod(h, 2) - 1));
    double rgb[3] = {0, 0, 0};
    int sector = (int)h;
    static const int order[6][3] = {{0, 1, 2}, {1, 0, 2}, {1, 2, 0},
                                    {2, 1, 0}, {2, 0, 1}, {0, 2, 1}};
    rgb[order[sector][0]] = chroma; /* order[sector]: the channels of chroma, x, 0 */
    rgb[order[sector][1]] = x;
    double base = l - chroma / 2;
    snprintf(out, 8, "#%02x%02x%02x", (int)lround((rgb[0] + base) * 255),
             (int)lround((rgb[1] + base) * 255), (int)lround((rgb[2] + base) * 255));
}

/* A tick step of 1, 2 or 5 times a power of ten giving at most ~16 ticks. */
static double nice_step(double span) {
    double raw = span / 16, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

static void xml_text(const char *str, FILE *f) {
    for (; *str; str++) {
        if (*str == '<') fputs("&lt;", f);
        else if (*str == '>') fputs("&gt;", f);
        else if (*str == '&') fputs("&amp;", f);
        else fputc(*str, f);
    }
}

static void svg_header(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c,
                       double width, double height, FILE *f) {
    const char *formula;
    double closed = sched_bubble_closed_form(s, &formula);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, "
            "sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<defs><pattern id=\"idle\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\""
            " patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#f3f3f3\"/>"
            "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"#c8c8c8\" stroke-width=\"3\"/>"
            "</pattern></defs>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"28\" font-size=\"18\" font-weight=\"bold\">", SVG_LEFT);
    xml_text(s->name, f);
    fprintf(f, " — P=%d ranks, v=%d chunk%s per rank, M=%d microbatches</text>\n", s->P, s->v,
            s->v == 1 ? "" : "s", s->M);
    fprintf(f,
            "<text x=\"%.0f\" y=\"50\" font-size=\"13\" fill=\"#444\">makespan %g, bubble %.1f%%",
            SVG_LEFT, res->makespan, 100 * res->bubble);
    if (closed >= 0) fprintf(f, " (closed form %s = %.1f%%)", formula, 100 * closed);
    if (uniform_costs(c)) {
        fprintf(f, "; costs ");
        costs_text(c, f);
    }
    fprintf(f, "</text>\n");
}

/* Lanes with hatched (idle) background, rank labels, time grid and axis. */
static void svg_lanes(const Schedule *s, const SchedSimResult *res, double px, FILE *f) {
    double chart = res->makespan * px, bottom = SVG_TOP + s->P * (SVG_LANE + SVG_GAP);
    double step = nice_step(res->makespan);
    for (int r = 0; r < s->P; r++) {
        double y = SVG_TOP + r * (SVG_LANE + SVG_GAP);
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" "
                "fill=\"url(#idle)\"/>\n",
                SVG_LEFT, y, chart, SVG_LANE);
        fprintf(f,
                "<text x=\"%.0f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"end\">rank %d</text>\n",
                SVG_LEFT - 10, y + SVG_LANE / 2 + 4, r);
    }
    for (double t = 0; t <= res->makespan + 1e-9; t += step) {
        double x = SVG_LEFT + t * px;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#00000022\"/>\n",
                x, SVG_TOP - 4, x, bottom);
        fprintf(f,
                "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                "fill=\"#333\">%g</text>\n",
                x, bottom + 14, t);
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
            SVG_LEFT, bottom, SVG_LEFT + chart, bottom);
    fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">"
            "time</text>\n", SVG_LEFT + chart / 2, bottom + 30);
}

static void svg_actions(const Schedule *s, const SchedSimResult *res, double px, FILE *f) {
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action a = s->acts[r][i];
            if (!sched_is_compute(a.type)) continue;
            int dark = a.type == ACT_B || a.type == ACT_I; /* W: dark and dashed */
            char fill[8], label[SCHED_ACTION_TEXT_MAX];
            double x = SVG_LEFT + res->start[r][i] * px;
            double w = (res->end[r][i] - res->start[r][i]) * px;
            double y = SVG_TOP + r * (SVG_LANE + SVG_GAP);
            mb_colour(a.mb, dark || a.type == ACT_W, fill);
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" "
                    "stroke=\"#222\" stroke-width=\"%s\"%s%s><title>", x, y, w, SVG_LANE, fill,
                    dark ? "1.2" : "0.6", a.type == ACT_W ? " stroke-dasharray=\"3 2\"" : "",
                    a.type == ACT_W ? " fill-opacity=\"0.55\"" : "");
            sched_action_format(a, label, sizeof label);
            fprintf(f, "%s: %g to %g</title></rect>\n", label, res->start[r][i], res->end[r][i]);
            const char *ink = dark ? "white" : "#111"; /* W's half-opaque fill takes dark ink */
            int n = snprintf(label, sizeof label, "%s%d", sched_type_name(a.type), (int)a.mb);
            if (w < 7.5 * n + 4) { /* too narrow for "F3": the microbatch alone, if it fits */
                n = snprintf(label, sizeof label, "%d", (int)a.mb);
                if (w >= 6.2 * n + 3)
                    fprintf(f,
                            "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\" "
                            "fill=\"%s\">%s</text>\n",
                            x + w / 2, y + 23, ink, label);
                continue;
            }
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
                    "fill=\"%s\">%s</text>\n", x + w / 2, y + (s->v > 1 ? 16 : 23), ink, label);
            if (s->v > 1)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" "
                        "fill=\"%s\">s%d</text>\n", x + w / 2, y + 30, ink, a.stage);
        }
}

/* Legend: F/B/idle explanation, then one swatch pair per microbatch. Returns the
 * y below it. */
static double svg_legend(const Schedule *s, double y, FILE *f) {
    char light[8], dark[8];
    mb_colour(0, 0, light);
    mb_colour(0, 1, dark);
    fprintf(f, "<g font-size=\"12\" fill=\"#222\">\n"
            "<rect x=\"%.0f\" y=\"%.1f\" width=\"22\" height=\"14\" fill=\"%s\" stroke=\"#222\" "
            "stroke-width=\"0.6\"/><text x=\"%.0f\" y=\"%.1f\">forward F (light)</text>\n",
            SVG_LEFT, y, light, SVG_LEFT + 28, y + 11);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"22\" height=\"14\" fill=\"%s\" stroke=\"#222\" "
            "stroke-width=\"1.2\"/><text x=\"%.0f\" y=\"%.1f\">backward B, input-grad I (dark)"
            "</text>\n", SVG_LEFT + 170, y, dark, SVG_LEFT + 198, y + 11);
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.1f\" width=\"22\" height=\"14\" fill=\"%s\" "
            "fill-opacity=\"0.55\" stroke=\"#222\" stroke-dasharray=\"3 2\"/><text x=\"%.0f\" "
            "y=\"%.1f\">weight-grad W (dashed)</text>\n",
            SVG_LEFT + 420, y, dark, SVG_LEFT + 448, y + 11);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"22\" height=\"14\" fill=\"url(#idle)\"/>"
            "<text x=\"%.0f\" y=\"%.1f\">idle (bubble)</text>\n", SVG_LEFT + 640, y, SVG_LEFT + 668,
            y + 11);
    if (s->v > 1)
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">sN = stage N</text>\n", SVG_LEFT + 780, y + 11);
    y += 28;
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">microbatch:</text>\n", SVG_LEFT, y + 11);
    for (int m = 0; m < s->M; m++) {
        double x = SVG_LEFT + 80 + (m % 16) * 52, yy = y + (m / 16) * 22;
        mb_colour(m, 0, light);
        mb_colour(m, 1, dark);
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"12\" height=\"14\" fill=\"%s\"/>"
                "<rect x=\"%.0f\" y=\"%.1f\" width=\"12\" height=\"14\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"%.1f\">%d</text>\n",
                x, yy, light, x + 12, yy, dark, x + 28, yy + 11, m);
    }
    fprintf(f, "</g>\n");
    return y + ((s->M + 15) / 16) * 22;
}

void sched_show_svg(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c, FILE *f) {
    double span = res->makespan > 0 ? res->makespan : 1;
    double px = 1100 / span < 4 ? 4 : 1100 / span > 64 ? 64 : 1100 / span;
    double legend_y = SVG_TOP + s->P * (SVG_LANE + SVG_GAP) + 44;
    double legend_w = SVG_LEFT + 80 + (s->M < 16 ? s->M : 16) * 52;
    double width = SVG_LEFT + span * px + 40;
    if (width < legend_w + 20) width = legend_w + 20;
    if (width < SVG_LEFT + 880) width = SVG_LEFT + 880; /* the legend's first line */
    double height = legend_y + 28 + ((s->M + 15) / 16) * 22 + 16;
    svg_header(s, res, c, width, height, f);
    svg_lanes(s, res, px, f);
    svg_actions(s, res, px, f);
    svg_legend(s, legend_y, f);
    fprintf(f, "</svg>\n");
}
