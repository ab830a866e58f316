/* plot_data.h — what `pptrain plot` reads of a run: its output.dir's losses.csv and,
 * when the run validated, val_losses.csv. Only these files: nothing of the model, the
 * config or the runtime. */
#ifndef PP_PLOT_DATA_H
#define PP_PLOT_DATA_H

#include <stddef.h>

#include "common.h"

typedef struct {
    char dir[PP_PATH_MAX];  /* the run directory as given (a trailing '/' dropped) */
    int n;                  /* rows of losses.csv (>= 1) */
    double *step;           /* [n] the step after which the row was logged, ascending */
    double *loss;           /* [n] training loss (non-finite values are gaps) */
    double *lr;             /* [n] learning rate (NULL: the file has no lr column) */
    double *tokens;         /* [n] tokens trained on after step[i] ([Note: tokens of a run]);
                               NULL when a row does not give them (tokens_line says which) */
    int tokens_line;        /* with tokens NULL: the losses.csv line that gives none */
    double tokens_per_step; /* the same for every row, else 0 */
    int nval;               /* rows of val_losses.csv (0: none, or no file) */
    double *val_step;       /* [nval] */
    double *val_loss;       /* [nval] */
} PlotRun;

/* Read `dir`/losses.csv (the header names its columns, in any order: step and loss are
 * required, lr, tokens_per_s and step_ms used when there) and `dir`/val_losses.csv
 * (step,val_loss; a missing file means no validation). Returns PP_OK, or PP_EUSAGE
 * with *r freed and a message in err naming the file and, for a bad row, its line:
 * no losses.csv, an empty file, a header without step or loss, no rows, a row with
 * another number of fields or a field that is not a number, steps that do not go up
 * (but a last line without its newline that does not parse, a row still being written,
 * is left out). */
int plot_run_load(PlotRun *r, const char *dir, char *err, size_t errlen);

void plot_run_free(PlotRun *r);

/* The tokens trained on after step s (between or past the rows: at the tokens per step
 * of the row at or after s, else the last row's); NAN when r has no tokens. */
double plot_run_tokens_at(const PlotRun *r, double s);

#endif
