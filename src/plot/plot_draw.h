/* plot_draw.h — the loss picture of one or more runs drawn with cairo, the same calls on
 * any surface (plot.c gives an SVG or an image one). */
#ifndef PP_PLOT_DRAW_H
#define PP_PLOT_DRAW_H

#include <cairo.h>

#include "plot/plot_data.h"

#define PLOT_WIDTH 960 /* the picture, in SVG px (and PNG pixels) */
#define PLOT_HEIGHT 600

typedef struct {
    const PlotRun *runs;
    const char *const *names; /* [nruns] each run's name in the legend */
    int nruns;
    int x_tokens;      /* x is tokens trained on (every run has tokens), else steps */
    int log_y;         /* loss on a log10 scale */
    int show_lr;       /* the learning rate on a right axis */
    double shared_tps; /* > 0: every run trains this many tokens per step, so the other
                          unit (tokens, or steps) gets the top axis */
} PlotSpec;

/* Draw the picture into cr over [0, w] × [0, h] (a white background, the axes with nice
 * ticks, grid, each run's train loss as a solid line, validation loss as a dashed line
 * with dots, lr dotted on the right axis, the legend in the corner the curves leave
 * most free). Errors are cr's status (cairo_status). */
void plot_draw(cairo_t *cr, double w, double h, const PlotSpec *s);

#endif
