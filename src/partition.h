/* partition.h — which decoder layers each pipeline stage holds (pipeline.split). */
#ifndef PP_PARTITION_H
#define PP_PARTITION_H

#include <stddef.h>
#include <stdio.h>

#define PP_MAX_STAGES 256

typedef struct {
    int S;                    /* stages = ranks * virtual stages */
    int l0[PP_MAX_STAGES];    /* stage s holds layers [l0[s], l1[s]) */
    int l1[PP_MAX_STAGES];
    double cost[PP_MAX_STAGES]; /* estimated forward cost per token (flops), for display */
} Partition;

/* Split L layers over S stages. split is "auto" (balance the estimated per-token cost,
 * counting the LM head — 2·Vp·C flops — on the last stage, and attention at length T),
 * "[n0, n1, ...]" (layers per stage, S numbers adding up to L), or
 * "[\"layers.a\", ...]" (S-1 increasing split points, like torch's split_spec).
 * Every stage gets at least one layer. Returns PP_OK or PP_EUSAGE with a message. */
int partition_build(Partition *p, const char *split, int L, int S, int C, int Vp, int T,
                    char *err, size_t errlen);

/* Print "stage s on rank r: layers a-b (+embeddings) (+head)  cost share" lines for P
 * ranks; stage_rank[S] says where each stage lives (the schedule's placement). */
void partition_print(const Partition *p, int P, const int *stage_rank, FILE *f);

#endif
