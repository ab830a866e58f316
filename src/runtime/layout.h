/* layout.h — which process does what: world = P pipeline ranks x D data-parallel
 * replicas, this process's place in that grid, and the world rank of any place. */
#ifndef PP_LAYOUT_H
#define PP_LAYOUT_H

#include <stddef.h>

/* [Note: rank layout] The world's ranks form a P x D grid: P pipeline ranks (each runs
 * one rank's list of the schedule: its stages) and D replicas of the whole pipeline
 * (data parallel, each on its share of the global batch). As in Megatron-LM, the D
 * replicas of one pipeline rank are neighbouring world ranks,
 *     rank = pp * D + dp,
 * so that the gradient all-reduce among replicas stays inside a node and the pipeline
 * crosses nodes. The schedule speaks of pipeline ranks; a transfer to pipeline rank q
 * goes to world rank layout_rank_of(q, this dp). Each replica runs the whole schedule on
 * its 1/D of the global batch; the D ranks holding one pipeline rank all-reduce their
 * gradients ([Note: data parallel] in runtime.c). E.g. 2 stages x 2 replicas: pipelines
 * {0 2} and {1 3}, gradient groups {0 1} and {2 3}. */
typedef struct {
    int world;  /* processes */
    int P;      /* pipeline ranks (pipeline.stages) */
    int D;      /* data-parallel replicas */
    int rank;   /* this process's world rank */
    int pp;     /* this process's pipeline rank, 0 <= pp < P */
    int dp;     /* this process's replica, 0 <= dp < D */
} Layout;

/* Build the layout of `world` processes for `stages` pipeline ranks and `replicas`
 * data-parallel replicas (pipeline.data_parallel; 0 = auto: world / stages). Returns
 * PP_OK, or PP_EUSAGE with a message saying how many processes to launch when world is
 * not a multiple of stages (auto) or not stages x replicas. */
int layout_init(Layout *l, int world, int rank, int stages, int replicas, char *err,
                size_t errlen);

/* World rank of pipeline rank pp in replica dp. */
int layout_rank_of(const Layout *l, int pp, int dp);

/* The grid in one line for the start of the log: "layout: 2 pipeline ranks x 2 replicas =
 * 4 processes; pipelines: {0 2} {1 3}; replicas of a pipeline rank (gradient
 * all-reduce): {0 1} {2 3}". */
void layout_describe(const Layout *l, char *buf, size_t n);

#endif
