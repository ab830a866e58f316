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
 * goes to world rank layout_rank_of(q, this dp). D is 1 until data parallelism exists;
 * nothing but this module assumes it. */
typedef struct {
    int world;  /* processes */
    int P;      /* pipeline ranks (pipeline.stages) */
    int D;      /* data-parallel replicas */
    int rank;   /* this process's world rank */
    int pp;     /* this process's pipeline rank, 0 <= pp < P */
    int dp;     /* this process's replica, 0 <= dp < D */
} Layout;

/* Build the layout of `world` processes for `stages` pipeline ranks and `replicas`
 * data-parallel replicas (0: world / stages). Returns PP_OK, or PP_EUSAGE with a
 * message saying how many processes to launch when world != stages x replicas. */
int layout_init(Layout *l, int world, int rank, int stages, int replicas, char *err,
                size_t errlen);

/* World rank of pipeline rank pp in replica dp. */
int layout_rank_of(const Layout *l, int pp, int dp);

#endif
