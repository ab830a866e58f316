/* log.h — progress lines on stdout, losses.csv and val_losses.csv, written by the last
 * stage's rank. */
#ifndef PP_LOG_H
#define PP_LOG_H

#include <stdio.h>

typedef struct {
    FILE *csv;        /* NULL on ranks that do not log */
    FILE *val_csv;    /* val_losses.csv, opened at the first validation */
    char *val_path;   /* its path (malloc'd) until the first validation opens it */
    int steps;        /* total steps, for the ETA */
    double t_start;   /* when logging started (for the ETA) */
    int first_step;   /* first step of this run (resume starts later) */
    double mfu_flops; /* model FLOPs per token over the peak FLOP/s of all the job's GPUs:
                         set (> 0) on a GPU, the progress line then shows the MFU */
} Log;

/* Open `dir`/losses.csv: truncated with the header `step,loss,lr,grad_norm,tokens_per_s,
 * step_ms`, or on resume (`append`) kept up to and including step `first_step`
 * (rows after it are dropped, since this run writes them again). `dir`/val_losses.csv
 * (header `step,val_loss`, written from the first validation on) is removed, or on
 * resume kept up to `first_step` in the same way. Returns PP_OK, or PP_ERUNTIME with a
 * message. */
int log_open(Log *l, const char *dir, int steps, int first_step, int append, char *err,
             size_t errlen);
/* One row and one progress line for step (1-based `step`). */
void log_step(Log *l, int step, double loss, float lr, double grad_norm, double tokens_per_s,
              double step_ms);
/* A validation line and a row of val_losses.csv (flushed; a file that cannot be opened
 * is reported once and the run goes on). */
void log_val(Log *l, int step, double loss);
void log_close(Log *l);

#endif
