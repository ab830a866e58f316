/* summary.h — the run summary: one block at the end of a run with the figures that the
 * progress lines and the timing report spread over many lines (steps, tokens, wall time,
 * tokens/s and MFU, each rank's busy / bubble / transfer-wait shares, peak memory and
 * checkpoint stalls), and the per-step figures of a rank for TensorBoard. Everything but
 * summary_report is local to the rank and needs no communication, so that a failure
 * report (a flight record) can print this rank's part too. */
#ifndef PP_SUMMARY_H
#define PP_SUMMARY_H

#include <stdio.h>

#include "runtime.h"

/* One rank's figures. Shares are of its mean step time over the measured steps
 * (runtime_measure: the first step of a run, which warms up, is left out). */
typedef struct {
    int rank, pp, dp; /* world rank, pipeline rank, replica */
    int measured;     /* steps in the means (0: nothing measured: the rest is 0) */
    int timed;        /* 1: busy and wait are measured (CPU; a GPU only with --trace,
                         [Note: traced device time] in runtime.c) */
    double step_ms;   /* mean step */
    double busy;      /* share computing F, B, I, W */
    double bubble;    /* 1 - busy: idle, the figure the timing report calls bubble */
    double wait;      /* of the bubble, the share blocked on transfers: receives, sends
                         still in flight, the replicas' gradient ring */
    double peak_mb;   /* peak memory, MB of 10^6 bytes: the GPU's bytes (gpu) or the
                         peak RSS of the process */
    int gpu;
    int saves;                     /* checkpoints handed over in this run */
    double stall_ms, stall_max_ms; /* the steps' stalls for them: total and longest */
} SummaryRank;

/* The run's figures, as this rank sees them. */
typedef struct {
    int first_step, last_step; /* this run trained steps first_step + 1 .. last_step */
    int total_steps;           /* train.steps */
    double tokens;             /* trained in this run (all replicas) */
    double wall_s;             /* from the start of this run's first step to now */
    double tokens_per_s;       /* global batch tokens over the mean step (0: none measured) */
    double mfu;                /* model FLOP/s over the job's GPUs' peak; < 0 off a GPU */
} SummaryRun;

/* Model training FLOPs per token over the peak FLOP/s of all the job's GPUs (one per
 * rank): tokens/s times this is the MFU. 0 when the backend has no peak (the CPU). */
double summary_mfu_flops(const Runtime *rt);

/* This rank's figures of its last step, for TensorBoard: the bubble and transfer-wait
 * shares of the step (-1 when not timed: a GPU without --trace) and the peak memory in
 * MB (SummaryRank.peak_mb). */
void summary_step(const Runtime *rt, double *bubble, double *wait, double *peak_mb);

/* This rank's figures / the run's, from what the runtime has measured so far (at any
 * moment after runtime_init: a failure report may call them mid-step). */
void summary_rank(const Runtime *rt, SummaryRank *r);
void summary_run(const Runtime *rt, SummaryRun *s);

/* The block: a "run summary" line, then indented lines for the steps, tokens, wall time,
 * throughput and MFU, and one line per rank of ranks[n] (a failure report passes only
 * its own). */
void summary_print(FILE *f, const SummaryRun *s, const SummaryRank *ranks, int n);

/* Collective (every rank calls it, after the training loop): gather every rank's
 * SummaryRank over rt->comm (one all-reduce) and print the block on rank 0. Nothing when
 * this run trained no step. PP_OK, or PP_ERUNTIME when the all-reduce fails. */
int summary_report(Runtime *rt, char *err, size_t errlen);

#endif
