/* partition.h — which decoder layers each pipeline stage holds (pipeline.split). */
#ifndef PP_PARTITION_H
#define PP_PARTITION_H

#include <stddef.h>
#include <stdio.h>

#include "arch.h" /* ArchCosts: what the partitioner needs of the architecture */

#define PP_MAX_STAGES 256

typedef struct {
    int S;                    /* stages = ranks * virtual stages */
    int l0[PP_MAX_STAGES];    /* stage s holds layers [l0[s], l1[s]) */
    int l1[PP_MAX_STAGES];
    double cost[PP_MAX_STAGES]; /* the balanced cost of each stage (PartitionCosts), for display */
    const char *unit;         /* what cost is */
} Partition;

/* Split L layers over S stages. split is "auto" (balance the per-token FLOPs of a's layers,
 * embedding and head: partition_costs_time),
 * "[n0, n1, ...]" (layers per stage, S numbers adding up to L), or
 * "[\"layers.a\", ...]" (S-1 increasing split points, like torch's split_spec).
 * Every stage gets at least one layer. Returns PP_OK or PP_EUSAGE with a message. */
int partition_build(Partition *p, const char *split, int L, int S, const ArchCosts *a, char *err,
                    size_t errlen);

/* What split auto balances (pipeline.balance): the cost of stage s holding layers
 * [a, b) is (b - a) * layer[s], plus embed on stage 0 and head on stage S-1. A cost
 * per stage, because what a layer costs in memory depends on how many microbatches
 * its stage keeps in flight. */
typedef struct {
    double layer[PP_MAX_STAGES]; /* one decoder layer on stage s */
    double embed;                /* the token and position embedding (stage 0) */
    double head;                 /* final norm, LM head and loss (stage S-1) */
    const char *unit;            /* what the costs are, for partition_print */
} PartitionCosts;

/* pipeline.balance: time. Per token, forward plus backward: the cost model (flops:
 * 3x the forward's) or, when measured is not NULL, measured[0..2] = seconds of one
 * layer, the embedding, and the head on this machine (`pptrain schedule --measure`). */
void partition_costs_time(PartitionCosts *pc, int S, const ArchCosts *a, const double *measured);
/* pipeline.balance: parameters. Parameter counts; the tied head's copy of wte counts on
 * the last stage (it holds, updates and keeps optimizer state for it). */
void partition_costs_parameters(PartitionCosts *pc, int S, const ArchCosts *a);
/* A microbatch's activation bytes as the run's backend stores them ([Note: backend
 * layout] in backend/backend_load.h), for pipeline.balance: memory. */
typedef struct {
    double layer;    /* what a layer keeps for its backward */
    double boundary; /* a slot's input and its gradient */
    double head;     /* what the head keeps */
    double logits;   /* the head's logits buffer (one microbatch, or chunk, at a time) */
} PartitionActBytes;
/* pipeline.balance: memory. Bytes: parameters with their gradient and nopt optimizer
 * arrays (fp32), plus inflight[s] microbatch slots (the schedule's peak) of b->layer per
 * layer and b->boundary; the head adds b->logits and b->head per slot. */
void partition_costs_memory(PartitionCosts *pc, int S, const ArchCosts *a, int nopt,
                            const int *inflight, const PartitionActBytes *b);

/* partition_build with the costs split auto balances given. */
int partition_build_costs(Partition *p, const char *split, int L, int S, const PartitionCosts *pc,
                          char *err, size_t errlen);

/* Print "stage s on rank r: layers a-b (+embeddings) (+head)  cost share" lines for P
 * ranks; stage_rank[S] says where each stage lives (the schedule's placement). */
void partition_print(const Partition *p, int P, const int *stage_rank, FILE *f);

#endif
