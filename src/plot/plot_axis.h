/* plot_axis.h — the ticks of a plot's axis: "nice" values (1, 2 or 5 × 10^k) on a linear
 * or a log10 scale, where they fall on the axis, and their labels. No drawing. */
#ifndef PP_PLOT_AXIS_H
#define PP_PLOT_AXIS_H

#include <stddef.h>

#define PLOT_TICKS_MAX 40

typedef struct {
    double lo, hi;            /* the range shown, in data units (lo < hi; lo > 0 on log) */
    int log;                  /* log10 scale */
    int n;                    /* ticks */
    double v[PLOT_TICKS_MAX]; /* the tick values, ascending, within [lo, hi] */
    double step;              /* the spacing of linear ticks (also on a log axis whose
                                 range is too narrow for 1-2-5 ticks); 0: log ticks */
} PlotAxis;

/* The smallest of 1, 2, 5 × 10^k that is >= raw (> 0). */
double plot_nice(double raw);

/* Ticks every plot_nice((hi - lo) / target) over [lo, hi]: about `target` of them, at
 * multiples of the step. */
void plot_axis_linear(PlotAxis *a, double lo, double hi, int target);

/* A log10 axis over [lo, hi] (0 < lo < hi): ticks at the powers of ten, or 1 and 5, or
 * 1, 2 and 5, or every digit × 10^k — the sparsest of these that gives at least 3 ticks
 * (powers of ten only every k-th decade when there would be over 2·target); a range
 * too narrow for 2 of these gets linear nice ticks (placed on the log scale). */
void plot_axis_log(PlotAxis *a, double lo, double hi, int target);

/* The range [*alo, *ahi] of an axis that shows the finite values lo..hi (lo <= hi): 5% of
 * the range more on each side (linear; 5% of |lo| for one value), or a twentieth of the
 * decades (log, lo > 0; a factor 1.1 for one value). Always finite: values beyond
 * +-PLOT_AXIS_MAX (linear) or outside [1/PLOT_AXIS_LOG_MAX, PLOT_AXIS_LOG_MAX] (log) are
 * clamped first, so the range, its ticks and the pixels of values on it never overflow
 * (a loss of 1e308 beside 1: hi + pad was inf, the axis had no ticks and the curve no
 * points); such values lie off the axis. */
#define PLOT_AXIS_MAX 1e300
#define PLOT_AXIS_LOG_MAX 1e250
void plot_axis_pad(double lo, double hi, int log, double *alo, double *ahi);

/* Where v falls on the axis: 0 at lo, 1 at hi (outside for values outside). */
double plot_axis_frac(const PlotAxis *a, double v);

/* The label of tick value v into buf[n]: as many decimals as the step needs ("5.0",
 * "5.5"), "0" for zero, scientific notation below 0.01 and from 10^6 ("3e-4",
 * "2.5e-4"). With `si` (counts: steps, tokens) thousands take SI suffixes ("500k",
 * "1.25M", "2G"). */
void plot_axis_label(const PlotAxis *a, double v, int si, char *buf, size_t n);

#endif
