/* plot_draw.c — the loss picture (plot_draw.h): layout, axes, curves, legend. */
#include "plot/plot_draw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot/plot_axis.h"

#define FONT "sans-serif"
#define PAD 14        /* the picture's margin */
#define TICK 5        /* tick mark length */
#define SIZE_TITLE 16 /* font sizes */
#define SIZE_AXIS 13
#define SIZE_TICK 12
#define SIZE_LEGEND 12.5
#define LEGEND_ROW 19 /* legend row height */
#define LEGEND_SWATCH 30

typedef struct {
    double r, g, b;
} Rgb;

/* The Okabe-Ito palette (distinguishable with the common colour-vision deficiencies),
 * without its yellow, too pale on white; runs past 7 reuse the colours in order. */
static const Rgb palette[] = {
    {0.000, 0.447, 0.698}, /* blue */
    {0.835, 0.369, 0.000}, /* vermillion */
    {0.000, 0.620, 0.451}, /* bluish green */
    {0.902, 0.624, 0.000}, /* orange */
    {0.800, 0.475, 0.655}, /* reddish purple */
    {0.337, 0.706, 0.914}, /* sky blue */
    {0.000, 0.000, 0.000}, /* black */
};
#define NPALETTE (int)(sizeof palette / sizeof palette[0])
static const Rgb ink = {0.15, 0.15, 0.15}, key_ink = {0.35, 0.35, 0.35}, grid = {0.9, 0.9, 0.9};

/* The plot area in picture coordinates and the axes mapped onto it. */
typedef struct {
    double w, h;           /* the picture */
    double x0, x1, y0, y1; /* the plot area: left, right, top, bottom */
    PlotAxis x, y, lr, top;
    int has_lr, has_top;
} Frame;

/* One curve of one run: n points (x, y) on the loss or the lr axis. */
typedef struct {
    const double *x, *y;
    int n, on_lr;
} Curve;

enum { KIND_TRAIN, KIND_VAL, KIND_LR, KIND_N };

/* A pixel coordinate kept within +-PX_MAX: a value far off its axis (plot_axis_pad clamps
 * the range) lies off the picture in its direction, where cairo's fixed-point coordinates
 * (24.8 bits) do not wrap it back into view. */
#define PX_MAX 1e6
static double px_clamp(double p) { return isnan(p) ? p : fmin(fmax(p, -PX_MAX), PX_MAX); }

static double px_x(const Frame *f, double v) {
    return px_clamp(f->x0 + plot_axis_frac(&f->x, v) * (f->x1 - f->x0));
}

static double px_y(const Frame *f, const PlotAxis *a, double v) {
    return px_clamp(f->y1 - plot_axis_frac(a, v) * (f->y1 - f->y0));
}

static void set_rgb(cairo_t *cr, Rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

static double text_width(cairo_t *cr, double size, const char *s) {
    cairo_text_extents_t te;
    cairo_set_font_size(cr, size);
    cairo_text_extents(cr, s, &te);
    return te.x_advance;
}

/* Text at (x, y): halign 0 left, 0.5 centred, 1 right; valign 0 y is the top of the
 * digits, 0.5 their middle, 1 the baseline. */
static void text(cairo_t *cr, double size, double x, double y, double halign, double valign,
                 const char *s) {
    cairo_text_extents_t digit;
    cairo_set_font_size(cr, size);
    cairo_text_extents(cr, "0", &digit);
    double cap = -digit.y_bearing;
    cairo_move_to(cr, x - halign * text_width(cr, size, s), y + (1 - valign) * cap);
    cairo_show_text(cr, s);
}

/* Text turned a quarter (angle -pi/2: reads upwards) centred on (x, y). */
static void text_turned(cairo_t *cr, double size, double x, double y, double angle, const char *s) {
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, angle);
    text(cr, size, 0, 0, 0.5, 0.5, s);
    cairo_restore(cr);
}

/* The curve of kind k of run r against the x unit of s (x of validation in tokens
 * lives in xbuf, n doubles). Returns the curve (n 0: none). */
static Curve curve_of(const PlotSpec *s, int r, int k, double *xbuf) {
    const PlotRun *run = &s->runs[r];
    Curve c = {0};
    if (k == KIND_VAL) {
        if (!run->nval) return c;
        c.x = run->val_step;
        if (s->x_tokens) {
            for (int j = 0; j < run->nval; j++) xbuf[j] = plot_run_tokens_at(run, run->val_step[j]);
            c.x = xbuf;
        }
        c.y = run->val_loss;
        c.n = run->nval;
        return c;
    }
    if (k == KIND_LR && (!s->show_lr || !run->lr)) return c;
    c.x = s->x_tokens ? run->tokens : run->step;
    c.y = k == KIND_LR ? run->lr : run->loss;
    c.n = run->n;
    c.on_lr = k == KIND_LR;
    return c;
}

/* A point that can be drawn on axis a. */
static int drawable(const PlotAxis *a, double x, double y) {
    return isfinite(x) && isfinite(y) && (!a->log || y > 0);
}

/* The range of the finite values of kind k over all runs (*lo > *hi: none); positive
 * ones only with `positive`. */
static void range_of(const PlotSpec *s, int k, int positive, double *xmax, double *lo, double *hi) {
    for (int r = 0; r < s->nruns; r++) {
        const PlotRun *run = &s->runs[r];
        int n = k == KIND_VAL ? run->nval : run->n;
        const double *y = k == KIND_VAL ? run->val_loss : k == KIND_LR ? run->lr : run->loss;
        if (!y) continue;
        for (int i = 0; i < n; i++) {
            if (!isfinite(y[i]) || (positive && y[i] <= 0)) continue;
            *lo = fmin(*lo, y[i]);
            *hi = fmax(*hi, y[i]);
        }
        double last = k == KIND_VAL ? (n ? run->val_step[n - 1] : 0) : run->step[run->n - 1];
        if (s->x_tokens) last = plot_run_tokens_at(run, last);
        if (isfinite(last)) *xmax = fmax(*xmax, last);
    }
}

/* The axes' ranges and ticks from the data of s. */
static void frame_axes(Frame *f, const PlotSpec *s) {
    double xmax = 0, lo = INFINITY, hi = -INFINITY, lrlo = INFINITY, lrhi = -INFINITY;
    range_of(s, KIND_TRAIN, s->log_y, &xmax, &lo, &hi);
    range_of(s, KIND_VAL, s->log_y, &xmax, &lo, &hi);
    if (s->show_lr) range_of(s, KIND_LR, 0, &xmax, &lrlo, &lrhi);
    if (xmax <= 0) xmax = 1;
    /* steps: no tick between two steps */
    int xt = s->x_tokens || xmax >= 7 ? 7 : (int)ceil(xmax);
    plot_axis_linear(&f->x, 0, xmax, xt);
    if (!(lo <= hi)) lo = s->log_y ? 1 : 0, hi = s->log_y ? 10 : 1; /* all non-finite */
    plot_axis_pad(lo, hi, s->log_y, &lo, &hi);
    if (s->log_y) plot_axis_log(&f->y, lo, hi, 6);
    else plot_axis_linear(&f->y, lo, hi, 6);
    f->has_lr = s->show_lr && lrlo <= lrhi && lrhi > 0;
    lrlo = fmax(lrlo, -PLOT_AXIS_MAX); /* as plot_axis_pad: a range that does not overflow */
    lrhi = fmin(lrhi, PLOT_AXIS_MAX);
    if (f->has_lr) plot_axis_linear(&f->lr, fmin(0, lrlo), lrhi * 1.08, 6);
    f->has_top = s->shared_tps > 0;
    if (f->has_top) {
        double k = s->x_tokens ? 1 / s->shared_tps : s->shared_tps, top = xmax * k;
        plot_axis_linear(&f->top, 0, top, s->x_tokens && top < 7 ? (int)ceil(top) : 7);
    }
}

/* The widest tick label of a. */
static double labels_width(cairo_t *cr, const PlotAxis *a, int si) {
    double w = 0;
    char buf[64];
    for (int i = 0; i < a->n; i++) {
        plot_axis_label(a, a->v[i], si, buf, sizeof buf);
        w = fmax(w, text_width(cr, SIZE_TICK, buf));
    }
    return w;
}

/* The plot area: what the picture leaves after the title, the tick labels and the axis
 * titles. */
static void frame_layout(cairo_t *cr, Frame *f, double w, double h) {
    f->w = w;
    f->h = h;
    double title = PAD + SIZE_TITLE + 12;
    double top_axis = f->has_top ? TICK + 4 + SIZE_TICK + 6 + SIZE_AXIS + 8 : 0;
    f->y0 = title + top_axis;
    f->y1 = h - (PAD + SIZE_AXIS + 8 + SIZE_TICK + 4 + TICK);
    f->x0 = PAD + SIZE_AXIS + 10 + labels_width(cr, &f->y, 0) + 6 + TICK;
    f->x1 = w -
            (f->has_lr ? PAD + SIZE_AXIS + 10 + labels_width(cr, &f->lr, 0) + 6 + TICK : PAD + 16);
}

/* Grid lines at the loss and x ticks. */
static void draw_grid(cairo_t *cr, const Frame *f) {
    set_rgb(cr, grid);
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < f->y.n; i++) {
        double y = round(px_y(f, &f->y, f->y.v[i])) + 0.5;
        cairo_move_to(cr, f->x0, y);
        cairo_line_to(cr, f->x1, y);
    }
    for (int i = 0; i < f->x.n; i++) {
        double x = round(px_x(f, f->x.v[i])) + 0.5;
        cairo_move_to(cr, x, f->y0);
        cairo_line_to(cr, x, f->y1);
    }
    cairo_stroke(cr);
}

/* The frame, the four axes' ticks and labels, the axis titles and the title. */
static void draw_axes(cairo_t *cr, const Frame *f, const PlotSpec *s, const char *title) {
    char buf[96];
    set_rgb(cr, ink);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, round(f->x0) + 0.5, round(f->y0) + 0.5, round(f->x1) - round(f->x0),
                    round(f->y1) - round(f->y0));
    for (int i = 0; i < f->x.n; i++) {
        double x = round(px_x(f, f->x.v[i])) + 0.5;
        cairo_move_to(cr, x, f->y1);
        cairo_line_to(cr, x, f->y1 + TICK);
        plot_axis_label(&f->x, f->x.v[i], 1, buf, sizeof buf);
        text(cr, SIZE_TICK, x, f->y1 + TICK + 4, 0.5, 0, buf);
    }
    for (int i = 0; i < f->y.n; i++) {
        double y = round(px_y(f, &f->y, f->y.v[i])) + 0.5;
        cairo_move_to(cr, f->x0 - TICK, y);
        cairo_line_to(cr, f->x0, y);
        plot_axis_label(&f->y, f->y.v[i], 0, buf, sizeof buf);
        text(cr, SIZE_TICK, f->x0 - TICK - 4, y, 1, 0.5, buf);
    }
    for (int i = 0; f->has_lr && i < f->lr.n; i++) {
        double y = round(px_y(f, &f->lr, f->lr.v[i])) + 0.5;
        cairo_move_to(cr, f->x1, y);
        cairo_line_to(cr, f->x1 + TICK, y);
        plot_axis_label(&f->lr, f->lr.v[i], 0, buf, sizeof buf);
        text(cr, SIZE_TICK, f->x1 + TICK + 4, y, 0, 0.5, buf);
    }
    for (int i = 0; f->has_top && i < f->top.n; i++) {
        double x = f->x0 + f->top.v[i] / f->top.hi * (f->x1 - f->x0);
        x = round(x) + 0.5;
        cairo_move_to(cr, x, f->y0 - TICK);
        cairo_line_to(cr, x, f->y0);
        plot_axis_label(&f->top, f->top.v[i], 1, buf, sizeof buf);
        text(cr, SIZE_TICK, x, f->y0 - TICK - 4, 0.5, 1, buf);
    }
    cairo_stroke(cr);
    double xc = (f->x0 + f->x1) / 2, yc = (f->y0 + f->y1) / 2;
    text(cr, SIZE_AXIS, xc, f->y1 + TICK + 4 + SIZE_TICK + 8, 0.5, 0,
         s->x_tokens ? "tokens" : "step");
    if (f->has_top) {
        snprintf(buf, sizeof buf,
                 s->x_tokens ? "step (%.0f tokens each)" : "tokens (%.0f per step)", s->shared_tps);
        text(cr, SIZE_AXIS, xc, f->y0 - TICK - 4 - SIZE_TICK - 6, 0.5, 1, buf);
    }
    text_turned(cr, SIZE_AXIS, PAD + SIZE_AXIS / 2, yc, -M_PI / 2,
                s->log_y ? "loss (log scale)" : "loss");
    if (f->has_lr)
        text_turned(cr, SIZE_AXIS, f->w - PAD - SIZE_AXIS / 2, yc, M_PI / 2, "learning rate");
    text(cr, SIZE_TITLE, f->x0, PAD, 0, 0, title);
}

/* Line styles of the three kinds: train solid, validation dashed, lr dotted. */
static void set_style(cairo_t *cr, int kind) {
    static const double dash[] = {6, 3}, dot[] = {0.1, 3.2};
    cairo_set_line_cap(cr, kind == KIND_LR ? CAIRO_LINE_CAP_ROUND : CAIRO_LINE_CAP_BUTT);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_width(cr, kind == KIND_TRAIN ? 1.8 : kind == KIND_VAL ? 1.5 : 1.6);
    if (kind == KIND_VAL)
        cairo_set_dash(cr, dash, 2, 0);
    else if (kind == KIND_LR)
        cairo_set_dash(cr, dot, 2, 0);
    else
        cairo_set_dash(cr, NULL, 0, 0);
}

/* A validation dot: the run's colour ringed in white. */
static void dot(cairo_t *cr, double x, double y, Rgb c) {
    cairo_new_sub_path(cr);
    cairo_arc(cr, x, y, 3.4, 0, 2 * M_PI);
    set_rgb(cr, c);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_set_line_width(cr, 1);
    cairo_set_dash(cr, NULL, 0, 0);
    cairo_stroke(cr);
}

/* One curve: a line through its drawable points (a gap at the others), a dot on each
 * point that is drawable alone or, for validation, on every point. */
static void draw_curve(cairo_t *cr, const Frame *f, Curve c, int kind, Rgb col) {
    const PlotAxis *a = c.on_lr ? &f->lr : &f->y;
    int open = 0;
    set_rgb(cr, col);
    set_style(cr, kind);
    for (int i = 0; i < c.n; i++) {
        if (!drawable(a, c.x[i], c.y[i])) {
            open = 0;
            continue;
        }
        double x = px_x(f, c.x[i]), y = px_y(f, a, c.y[i]);
        if (open)
            cairo_line_to(cr, x, y);
        else
            cairo_move_to(cr, x, y);
        open = 1;
    }
    cairo_stroke(cr);
    for (int i = 0; i < c.n; i++) {
        if (!drawable(a, c.x[i], c.y[i])) continue;
        int alone = (i == 0 || !drawable(a, c.x[i - 1], c.y[i - 1])) &&
                    (i == c.n - 1 || !drawable(a, c.x[i + 1], c.y[i + 1]));
        if (kind == KIND_VAL || alone) dot(cr, px_x(f, c.x[i]), px_y(f, a, c.y[i]), col);
    }
}

/* Every curve, clipped to the plot area (dots may stick out by their radius): lr
 * first, then train, then validation on top. */
static void draw_curves(cairo_t *cr, const Frame *f, const PlotSpec *s, double *xbuf) {
    cairo_save(cr);
    cairo_rectangle(cr, f->x0 - 5, f->y0 - 5, f->x1 - f->x0 + 10, f->y1 - f->y0 + 10);
    cairo_clip(cr);
    static const int order[KIND_N] = {KIND_LR, KIND_TRAIN, KIND_VAL};
    for (int k = 0; k < KIND_N; k++)
        for (int r = 0; r < s->nruns; r++) {
            Curve c = curve_of(s, r, order[k], xbuf);
            if (c.n) draw_curve(cr, f, c, order[k], palette[r % NPALETTE]);
        }
    cairo_restore(cr);
}

/* The legend's rows: one per run, then the key of the line styles in use. */
typedef struct {
    int nkeys, keys[KIND_N];
    double w, h;
} Legend;

static const char *const key_text[KIND_N] = {"train loss", "validation loss",
                                             "learning rate (right axis)"};

static void legend_size(cairo_t *cr, Legend *l, const Frame *f, const PlotSpec *s) {
    int has_val = 0;
    for (int r = 0; r < s->nruns; r++) has_val |= s->runs[r].nval > 0;
    l->nkeys = 0;
    l->keys[l->nkeys++] = KIND_TRAIN;
    if (has_val) l->keys[l->nkeys++] = KIND_VAL;
    if (f->has_lr) l->keys[l->nkeys++] = KIND_LR;
    double tw = 0;
    for (int r = 0; r < s->nruns; r++) tw = fmax(tw, text_width(cr, SIZE_LEGEND, s->names[r]));
    for (int k = 0; k < l->nkeys; k++)
        tw = fmax(tw, text_width(cr, SIZE_LEGEND, key_text[l->keys[k]]));
    l->w = 10 + LEGEND_SWATCH + 8 + tw + 10;
    l->h = 6 + (s->nruns + l->nkeys) * LEGEND_ROW + 7 + 6;
}

/* How many points along the curves (every 3 px of each segment) fall in the box at
 * (x, y) of size w × h: what the legend there would hide. */
static long hidden_by(const Frame *f, const PlotSpec *s, double *xbuf, double x, double y, double w,
                      double h) {
    long hits = 0;
    for (int r = 0; r < s->nruns; r++)
        for (int k = 0; k < KIND_N; k++) {
            Curve c = curve_of(s, r, k, xbuf);
            const PlotAxis *a = c.on_lr ? &f->lr : &f->y;
            double px = NAN, py = NAN;
            for (int i = 0; i < c.n; i++) {
                if (!drawable(a, c.x[i], c.y[i])) {
                    px = NAN;
                    continue;
                }
                double qx = px_x(f, c.x[i]), qy = px_y(f, a, c.y[i]);
                int m = isnan(px) ? 1 : 1 + (int)(hypot(qx - px, qy - py) / 3);
                for (int j = 1; j <= m; j++) {
                    double t = isnan(px) ? 1 : (double)j / m;
                    double sx = isnan(px) ? qx : px + t * (qx - px);
                    double sy = isnan(px) ? qy : py + t * (qy - py);
                    hits += sx >= x && sx <= x + w && sy >= y && sy <= y + h;
                }
                px = qx;
                py = qy;
            }
        }
    return hits;
}

/* The legend in the corner of the plot area where it hides the least of the curves
 * (first of top right, bottom left, bottom right, top left on a tie). */
static void draw_legend(cairo_t *cr, const Frame *f, const PlotSpec *s, double *xbuf) {
    Legend l;
    legend_size(cr, &l, f, s);
    double m = 10, xs[2] = {f->x1 - m - l.w, f->x0 + m}, ys[2] = {f->y0 + m, f->y1 - m - l.h};
    static const int corners[4][2] = {{0, 0}, {1, 1}, {0, 1}, {1, 0}};
    double x = xs[0], y = ys[0];
    long best = -1;
    for (int c = 0; c < 4; c++) {
        double cx = xs[corners[c][0]], cy = ys[corners[c][1]];
        long hits = hidden_by(f, s, xbuf, cx - 4, cy - 4, l.w + 8, l.h + 8);
        if (best < 0 || hits < best) best = hits, x = cx, y = cy;
    }
    x = round(x) + 0.5;
    y = round(y) + 0.5;
    cairo_rectangle(cr, x, y, round(l.w), round(l.h));
    cairo_set_source_rgba(cr, 1, 1, 1, 0.92);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 1);
    cairo_set_dash(cr, NULL, 0, 0);
    cairo_stroke(cr);
    double row = y + 6 + LEGEND_ROW / 2.0, sx = x + 10, tx = sx + LEGEND_SWATCH + 8;
    for (int r = 0; r < s->nruns; r++, row += LEGEND_ROW) {
        set_rgb(cr, palette[r % NPALETTE]);
        set_style(cr, KIND_TRAIN);
        cairo_set_line_width(cr, 3);
        cairo_move_to(cr, sx, row);
        cairo_line_to(cr, sx + LEGEND_SWATCH, row);
        cairo_stroke(cr);
        set_rgb(cr, ink);
        text(cr, SIZE_LEGEND, tx, row, 0, 0.5, s->names[r]);
    }
    cairo_set_source_rgb(cr, 0.85, 0.85, 0.85); /* between the runs and the key */
    cairo_set_line_width(cr, 1);
    cairo_move_to(cr, x + 6, round(row - LEGEND_ROW / 2.0 + 3) + 0.5);
    cairo_line_to(cr, x + l.w - 6, round(row - LEGEND_ROW / 2.0 + 3) + 0.5);
    cairo_stroke(cr);
    row += 7;
    for (int k = 0; k < l.nkeys; k++, row += LEGEND_ROW) {
        set_rgb(cr, key_ink);
        set_style(cr, l.keys[k]);
        cairo_move_to(cr, sx, row);
        cairo_line_to(cr, sx + LEGEND_SWATCH, row);
        cairo_stroke(cr);
        if (l.keys[k] == KIND_VAL) dot(cr, sx + LEGEND_SWATCH / 2.0, row, key_ink);
        set_rgb(cr, key_ink);
        text(cr, SIZE_LEGEND, tx, row, 0, 0.5, key_text[l.keys[k]]);
    }
}

void plot_draw(cairo_t *cr, double w, double h, const PlotSpec *s) {
    Frame f;
    char title[PP_PATH_MAX + 64];
    int has_val = 0, nmax = 1;
    memset(&f, 0, sizeof f);
    for (int r = 0; r < s->nruns; r++) {
        has_val |= s->runs[r].nval > 0;
        if (s->runs[r].nval > nmax) nmax = s->runs[r].nval;
    }
    double *xbuf = pp_malloc(nmax * sizeof *xbuf); /* validation steps in tokens */
    snprintf(title, sizeof title, "%s%s%s", s->nruns == 1 ? s->names[0] : "",
             s->nruns == 1 ? ": " : "", has_val ? "train and validation loss" : "train loss");
    if (s->nruns > 1) pp_strappendf(title, sizeof title, " of %d runs", s->nruns);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    frame_axes(&f, s);
    frame_layout(cr, &f, w, h);
    draw_grid(cr, &f);
    draw_curves(cr, &f, s, xbuf);
    draw_axes(cr, &f, s, title);
    draw_legend(cr, &f, s, xbuf);
    free(xbuf);
}
