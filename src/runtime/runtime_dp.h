/* runtime_dp.h — the runtime's data-parallel part ([Note: data parallel] in
 * runtime_dp.c): the group of replicas of this pipeline rank, its gradient buckets and
 * their overlapped ring all-reduce. Internal to the runtime (runtime.c calls it). */
#ifndef PP_RUNTIME_DP_H
#define PP_RUNTIME_DP_H

#include <stddef.h>

#include "comm/comm_ring.h"

#define DP_NOT_HELD ((size_t)-1)

/* The most floats in one bucket (a longer tensor gets one of its own). */
#define DP_BUCKET_FLOATS ((size_t)1 << 20)

typedef struct {
    size_t off, n; /* floats of Model.grads */
    int ready;     /* the action (index into this rank's list) after which they are final;
                      the list's length: after the step's last action and the tied fold */
    size_t *bounds;/* ZeRO-1: [D+1] replica q holds [bounds[q], bounds[q+1]) of the bucket
                      (whole tensors), else NULL (the ring's even blocks) */
} DpBucket;

typedef struct {
    Comm *group;     /* the D ranks holding this pipeline rank, ranked by replica;
                        NULL when D = 1 */
    int nb;          /* buckets, in the order every replica runs them */
    DpBucket *b;
    int next;        /* the next bucket to start this step */
    int active;      /* bucket next-1's ring is running */
    CommRing ring;
    int step;        /* the step being reduced (tags) */
    int limit;       /* the last action run: buckets final after it may start */
    float *tmp;      /* [the longest block] the ring's receive scratch */
    float *host;     /* device backends: host copy of the gradients the rings run on */
    int zero;        /* ZeRO-1 (train.optimizer.shard with D > 1) */
    size_t *zoff;    /* ZeRO-1: [ntensors] offset of a tensor's state in opt_m / opt_v, or
                        DP_NOT_HELD when another replica keeps it */
    float *opt_m, *opt_v; /* ZeRO-1: [held] device: the state of the tensors this replica holds */
    size_t held;     /* ZeRO-1: parameters whose state this replica keeps */
    double t0, t_first, t_done; /* of the last step: its start, first bucket start,
                                   last bucket end */
    double bucket_us;           /* when the running bucket started (trace clock) */
    double span_s, exposed_s;   /* of the last step: first start to last end; the wait
                                   after the list */
    double sum_span_s, sum_end_s, sum_exposed_s; /* over measured steps: span, t_done - t0,
                                                    exposed */
} DpSync;

struct Runtime;

/* Collective on the job's Comm (every rank calls it, after the model and schedules are
 * built): form the replica group (D > 1) and plan the buckets. PP_ERUNTIME with a
 * message on a transport failure. */
int dp_init(struct Runtime *rt, char *err, size_t errlen);
void dp_free(struct Runtime *rt);
/* Before a training step's action list. */
void dp_begin(struct Runtime *rt, int step);
/* After action k of the training list: start the buckets that became final, advance the
 * running ring without blocking. */
int dp_after_action(struct Runtime *rt, int k, char *err, size_t errlen);
/* comm_wait(c, req), advancing the running ring meanwhile (every 0.1 ms). On a ring
 * failure *ring_failed = 1 and err says so; else the request's status (comm_error(c)). */
int dp_wait(struct Runtime *rt, Comm *c, CommReq *req, int *ring_failed, char *err, size_t errlen);
/* After the list and the tied fold: run every remaining bucket to the end; then every
 * replica holds the same gradient sums (bits). */
int dp_finish(struct Runtime *rt, char *err, size_t errlen);
/* ZeRO-1, after the optimizer updated this replica's tensors: all-gather every bucket's
 * parameters, so that every replica holds the same weights (bits). */
int dp_gather_params(struct Runtime *rt, char *err, size_t errlen);
/* Optimizer state array k (0: opt_m, 1: opt_v) of tensor i on this rank, or NULL where
 * this run keeps none or (ZeRO-1) another replica keeps it. */
float *dp_opt_state(const struct Runtime *rt, int i, int k);
/* Whether this rank stores tensor i's parameters (DP_PARAMS) or optimizer state
 * (DP_STATE) in checkpoints, or counts its gradient in the global norm (DP_NORM): each
 * tensor once over the replicas (replica 0; with ZeRO-1 the state and the norm by the
 * replica holding it). */
enum { DP_PARAMS, DP_STATE, DP_NORM };
int dp_counts(const struct Runtime *rt, int i, int what);
/* Count the last step's all-reduce times (runtime_measure). */
void dp_measure(struct Runtime *rt);
/* Collective: rank 0 prints how long the all-reduce ran and how much of it ended before
 * the slowest rank's action list did (runtime_report); no-op when D = 1. */
int dp_report(struct Runtime *rt, char *err, size_t errlen);

#endif
