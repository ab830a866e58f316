/* sched_sim.h — dry-run simulator: replays a lowered schedule on all ranks at once with
 * per-action costs; reports makespan, busy/idle time, bubble fraction and peak
 * in-flight activations, and detects deadlocks. */
#ifndef PP_SCHED_SIM_H
#define PP_SCHED_SIM_H

#include <stdio.h>

#include "sched.h"

/* Per-action costs in any time unit. A rank runs one compute action at a time;
 * transfers cost the sender nothing (sends are posted, [Note: action semantics]):
 * a message sent at time t arrives at t + X, and the compute that consumes it waits
 * for it. Precedence for a compute action's duration: action_cost (if set), then
 * F_stage/B_stage/W_stage (if set), then F/B/W. For a SEND, action_cost (if set)
 * gives the transfer time, else X.
 * [Note: link model] By default every message travels on its own (any number at once
 * between two ranks, each X long). With serial_links set, each ordered pair of ranks
 * has one link that carries one message at a time in send order (both transports send
 * a pair's messages FIFO, [Note: action semantics]): a message posted while the link
 * is busy starts when the one ahead of it arrives. Opposite directions are separate
 * links (full duplex). The planner (plan.h) sets it, with X = latency + bytes /
 * bandwidth of the link.
 * [Note: split costs] Two readings of B. Without W costs (W < 0 and no W_stage: the
 * default, and --costs F,B,X) B is the full backward, and a split backward's I and W
 * cost B/2 each. With W costs (--costs F=1,B=1,W=1) B is the input-gradient half:
 * I costs B, W costs W, and a full backward B + W. */
typedef struct {
    double F, B, X;         /* defaults 1, 2, 0; X: a SEND's transfer */
    double X_B;             /* a SEND_B's (a gradient's), or < 0 (default -1): X. The
                               planner's at bf16: gradients fp32, activations bf16 */
    double W;               /* weight-gradient half, or < 0 (default -1): see above */
    const double *F_stage;  /* [S] forward cost of each stage, or NULL */
    const double *B_stage;  /* [S] backward cost of each stage, or NULL */
    const double *W_stage;  /* [S] weight-gradient cost of each stage, or NULL */
    double (*action_cost)(void *ctx, int rank, Action a); /* or NULL, e.g. measured */
    void *ctx;
    int serial_links;       /* 1: a rank pair's messages queue on one link ([Note: link
                               model]); 0 (default): they travel independently */
} SchedSimCosts;

typedef struct {
    int P, S;
    double makespan;        /* end of the last action on any rank */
    double *busy;           /* [P] time spent in F/B/I/W */
    double *idle;           /* [P] makespan - busy */
    double bubble;          /* sum(idle) / (P * makespan) */
    int *stage_peak;        /* [S] sched_peak_inflight of each stage */
    int *rank_peak;         /* [P] sched_peak_inflight_rank of each rank */
    double **start, **end;  /* [P][len[r]] when each action ran (transfers: end=start) */
} SchedSimResult;

/* F=1, B=2, X=0, W=-1 (B is the full backward), no per-stage costs, no callback,
 * independent messages. */
void sched_sim_costs_default(SchedSimCosts *c);

/* Replay lowered schedule s with costs c (NULL: defaults) into res (owned by the
 * caller, release with sched_sim_result_free; filled even on failure where possible).
 * Returns PP_OK; PP_EUSAGE if s is not lowered or an action is out of range;
 * PP_ERUNTIME on deadlock, with the stuck actions named in err and marked in the grid
 * printed to `grid` (may be NULL). The replay checks every dependency itself
 * (sched_action_deps: a compute or SEND waits for what it needs; a RECV is posted at
 * once and its consumer waits for the SEND's message), so dependencies that cannot be
 * met show up as a deadlock; it does not check placement, duplicates or missing
 * actions: simulate schedules that passed sched_validate. */

int sched_sim_run(const Schedule *s, const SchedSimCosts *c, SchedSimResult *res, char *err,
                  size_t errlen, FILE *grid);

void sched_sim_result_free(SchedSimResult *res);

/* 1 if c gives W costs ([Note: split costs]). */
int sched_sim_costs_split(const SchedSimCosts *c);

#endif
