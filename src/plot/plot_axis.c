/* plot_axis.c — nice ticks and their labels (see plot_axis.h). */
#include "plot/plot_axis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_EPS 1e-9 /* a tick this close (relative) to an end of the range is inside */

double plot_nice(double raw) {
    double p = pow(10, floor(log10(raw))), f = raw / p;
    if (f <= 1 + REL_EPS) return p;
    if (f <= 2 + REL_EPS) return 2 * p;
    if (f <= 5 + REL_EPS) return 5 * p;
    return 10 * p;
}

void plot_axis_linear(PlotAxis *a, double lo, double hi, int target) {
    memset(a, 0, sizeof *a);
    a->lo = lo;
    a->hi = hi;
    a->step = plot_nice((hi - lo) / (target > 0 ? target : 1));
    double k0 = ceil(lo / a->step - REL_EPS), k1 = floor(hi / a->step + REL_EPS);
    for (double k = k0; k <= k1 && a->n < PLOT_TICKS_MAX; k++)
        a->v[a->n++] = k == 0 ? 0 : k * a->step; /* k · step: no sum of rounding errors */
}

/* The ticks m · 10^e (m in ms[0..nm), e every `every`-th decade) within [a->lo, a->hi]
 * into a->v (with write) or only counted. Returns the count. */
static int log_ticks(PlotAxis *a, const int *ms, int nm, int every, int write) {
    int e0 = (int)floor(log10(a->lo)), e1 = (int)ceil(log10(a->hi)), n = 0;
    for (int e = e0; e <= e1; e++) {
        if (((e % every) + every) % every) continue;
        for (int i = 0; i < nm; i++) {
            double v = ms[i] * pow(10, e);
            if (v < a->lo * (1 - REL_EPS) || v > a->hi * (1 + REL_EPS)) continue;
            if (write && n < PLOT_TICKS_MAX) a->v[a->n++] = v;
            n++;
        }
    }
    return n;
}

void plot_axis_log(PlotAxis *a, double lo, double hi, int target) {
    static const int decade[] = {1}, one5[] = {1, 5}, one25[] = {1, 2, 5},
                     digits[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const struct {
        const int *ms;
        int n;
    } sets[] = {{decade, 1}, {one5, 2}, {one25, 3}, {digits, 9}};
    memset(a, 0, sizeof *a);
    a->lo = lo;
    a->hi = hi;
    a->log = 1;
    if (target < 1) target = 1;
    int every = 1, n = log_ticks(a, decade, 1, 1, 0);
    if (n > 2 * target) { /* a wide range: every k-th power of ten */
        every = (n + target - 1) / target;
        log_ticks(a, decade, 1, every, 1);
        return;
    }
    for (int s = 0; s < 4; s++)
        if (log_ticks(a, sets[s].ms, sets[s].n, 1, 0) >= 3) {
            log_ticks(a, sets[s].ms, sets[s].n, 1, 1);
            return;
        }
    plot_axis_linear(a, lo, hi, target); /* too narrow: linear ticks, drawn on a log scale */
    a->log = 1;
}

void plot_axis_pad(double lo, double hi, int log, double *alo, double *ahi) {
    double m = log ? PLOT_AXIS_LOG_MAX : PLOT_AXIS_MAX, least = log ? 1 / m : -m;
    lo = fmin(fmax(lo, least), m);
    hi = fmin(fmax(hi, least), m);
    if (log) {
        double r = hi / lo; /* 1e250 / 1e-250 overflows: then the same through log10 */
        double pad = lo < hi ? (isfinite(r) ? pow(r, 0.05) : pow(10, 0.05 * (log10(hi) - log10(lo))))
                             : 1.1;
        *alo = lo / pad;
        *ahi = hi * pad;
    } else {
        double pad = lo < hi ? 0.05 * (hi - lo) : fmax(0.05 * fabs(lo), 0.05);
        *alo = lo - pad;
        *ahi = hi + pad;
    }
}

double plot_axis_frac(const PlotAxis *a, double v) {
    if (!a->log) return (v - a->lo) / (a->hi - a->lo);
    if (!(v > 0)) return NAN;
    return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
}

/* The decimals that write multiples of s (> 0) exactly: 0 for 5, 1 for 0.5, 2 for 0.25. */
static int decimals_of(double s) {
    for (int d = 0; d < 9; d++) {
        double x = s * pow(10, d);
        if (fabs(x - round(x)) < 1e-6 * x) return d;
    }
    return 9;
}

/* "%.*f" of v without trailing zeros after the point (and without a bare point). */
static void fixed_trimmed(double v, int d, char *buf, size_t n) {
    snprintf(buf, n, "%.*f", d, v);
    if (!strchr(buf, '.')) return;
    char *end = buf + strlen(buf);
    while (end[-1] == '0') *--end = '\0';
    if (end[-1] == '.') end[-1] = '\0';
}

/* v as mantissa e exponent: "3e-4", "2.5e-4"; `unit` the step (or v itself) whose
 * multiples the mantissa must write exactly. */
static void scientific(double v, double unit, char *buf, size_t n) {
    int e = (int)floor(log10(fabs(v)) + REL_EPS);
    int d = decimals_of(fabs(unit) / pow(10, e));
    double mant = v / pow(10, e);
    char m[64];
    snprintf(m, sizeof m, "%.*f", d, fabs(mant));
    if (strtod(m, NULL) >= 10) { /* 9.99 rounded up: one decade more */
        e++;
        mant /= 10;
    }
    fixed_trimmed(mant, d, m, sizeof m);
    snprintf(buf, n, "%se%d", m, e);
}

void plot_axis_label(const PlotAxis *a, double v, int si, char *buf, size_t n) {
    static const char suffix[] = " kMGTP";
    double unit = a->step > 0 ? a->step : fabs(v);
    double big = fmax(fabs(a->lo), fabs(a->hi));
    if (v == 0 || fabs(v) < unit * 1e-9) {
        snprintf(buf, n, "0");
    } else if (si && fabs(v) >= 1000) {
        int k = (int)floor(log10(fabs(v)) / 3 + REL_EPS);
        if (k > 5) k = 5;
        double scale = pow(1000, k);
        char m[64];
        fixed_trimmed(v / scale, decimals_of(unit / scale), m, sizeof m);
        snprintf(buf, n, "%s%c", m, suffix[k]);
    } else if (!si && (a->log ? fabs(v) < 1e-2 || fabs(v) >= 1e6 : big < 1e-2 || big >= 1e6)) {
        scientific(v, unit, buf, n);
    } else {
        char m[64];
        int d = decimals_of(unit);
        snprintf(m, sizeof m, "%.*f", d, v);
        if (a->step == 0 || si) fixed_trimmed(v, d, m, sizeof m); /* log ticks: each its own */
        snprintf(buf, n, "%s", m);
    }
}
