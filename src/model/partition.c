/* partition.c — layers to stages: explicit counts, split points, or a cost-balanced
 * contiguous split. */
#include "partition.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Read the list "[a, b, ...]" into ints (kind 'n') or layer.N points (kind 'p'). */
static int parse_list(const char *s, int *vals, int max, int *count, char *kind, char *err,
                      size_t errlen) {
    const char *p = s;
    *count = 0;
    *kind = 0;
    while (isspace((unsigned char)*p)) p++;
    if (*p++ != '[')
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline.split: expected auto or a list, got '%s'", s);
    for (;;) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (*p == ']') break;
        if (*count >= max)
            return pp_errf(err, errlen, PP_EUSAGE, "pipeline.split: too many entries in '%s'", s);
        char k = 'n';
        if (*p == '"' || *p == '\'') p++;
        if (strncmp(p, "layers.", 7) == 0) k = 'p', p += 7;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "pipeline.split: cannot read an entry of '%s'", s);
        if (*kind && *kind != k)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "pipeline.split: mixes layer counts and split points in '%s'", s);
        *kind = k;
        vals[(*count)++] = (int)v;
        p = end;
        if (*p == '"' || *p == '\'') p++;
    }
    return PP_OK;
}

/* Contiguous split of L layers into S stages (each >= 1 layer) minimising the most
 * expensive stage under pc; among prefixes as good, the one with the smaller sum of
 * squared stage costs (so that when one stage's minimum sets the maximum, as a first
 * stage holding the embedding does, the others still share evenly). Dynamic programme
 * over (stages used, layers used). */
static double stage_cost(const PartitionCosts *pc, int S, int s, int n) {
    return n * pc->layer[s] + (s == 0 ? pc->embed : 0) + (s == S - 1 ? pc->head : 0);
}

static void balance(Partition *p, int L, int S, const PartitionCosts *pc) {
    double *best = pp_malloc(sizeof(double) * (S + 1) * (L + 1)),
           *sq = pp_malloc(sizeof(double) * (S + 1) * (L + 1));
    int *cut = pp_malloc(sizeof(int) * (S + 1) * (L + 1));
#define AT(a, b) ((a) * (L + 1) + (b))
    for (int s = 0; s <= S; s++)
        for (int l = 0; l <= L; l++) best[AT(s, l)] = sq[AT(s, l)] = 1e300;
    best[AT(0, 0)] = sq[AT(0, 0)] = 0;
    for (int s = 1; s <= S; s++)
        for (int l = s; l <= L - (S - s); l++)
            for (int k = s - 1; k < l; k++) { /* stage s-1 holds layers [k, l) */
                double c = stage_cost(pc, S, s - 1, l - k), b = best[AT(s, l)];
                double v = best[AT(s - 1, k)] > c ? best[AT(s - 1, k)] : c,
                       q = sq[AT(s - 1, k)] + c * c;
                if (v < b * (1 - 1e-12) || (v <= b * (1 + 1e-12) && q < sq[AT(s, l)] * (1 - 1e-12)))
                    best[AT(s, l)] = v, sq[AT(s, l)] = q, cut[AT(s, l)] = k;
            }
    for (int s = S, l = L; s >= 1; s--) {
        p->l1[s - 1] = l;
        l = p->l0[s - 1] = cut[AT(s, l)];
    }
#undef AT
    free(best);
    free(sq);
    free(cut);
}

void partition_costs_time(PartitionCosts *pc, int S, const ArchCosts *a, const double *measured) {
    memset(pc, 0, sizeof *pc);
    for (int s = 0; s < S; s++) pc->layer[s] = measured ? measured[0] : 3 * a->layer_flops;
    pc->embed = measured ? measured[1] : 3 * a->embed_flops;
    pc->head = measured ? measured[2] : 3 * a->head_flops;
    pc->unit = measured ? "measured time" : "estimated time";
}

void partition_costs_parameters(PartitionCosts *pc, int S, const ArchCosts *a) {
    memset(pc, 0, sizeof *pc);
    for (int s = 0; s < S; s++) pc->layer[s] = a->layer_params;
    pc->embed = a->embed_params;
    pc->head = a->head_params;
    pc->unit = "parameters";
}

void partition_costs_memory(PartitionCosts *pc, int S, const ArchCosts *a, int nopt,
                            const int *inflight, const PartitionActBytes *b) {
    PartitionCosts params;
    partition_costs_parameters(&params, S, a);
    memset(pc, 0, sizeof *pc);
    double per_param = 4.0 * (2 + nopt);
    for (int s = 0; s < S; s++) pc->layer[s] = per_param * params.layer[s] + inflight[s] * b->layer;
    pc->embed = per_param * params.embed + inflight[0] * b->boundary;
    pc->head = per_param * params.head + b->logits + inflight[S - 1] * (b->boundary + b->head);
    pc->unit = "memory";
}

int partition_build(Partition *p, const char *split, int L, int S, const ArchCosts *a, char *err,
                    size_t errlen) {
    PartitionCosts pc;
    partition_costs_time(&pc, S < PP_MAX_STAGES ? S : PP_MAX_STAGES, a, NULL);
    return partition_build_costs(p, split, L, S, &pc, err, errlen);
}

int partition_build_costs(Partition *p, const char *split, int L, int S, const PartitionCosts *pc,
                          char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (S < 1 || S > PP_MAX_STAGES)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline: %d stages is out of range 1..%d", S,
                       PP_MAX_STAGES);
    if (S > L)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline: %d stages (stages x virtual_stages) but only %d layers: every "
                       "stage needs a layer", S, L);
    p->S = S;
    p->unit = pc->unit;
    if (strcmp(split, "auto") == 0) {
        balance(p, L, S, pc);
    } else {
        int vals[PP_MAX_STAGES], n;
        char kind;
        int rc = parse_list(split, vals, PP_MAX_STAGES, &n, &kind, err, errlen);
        if (rc) return rc;
        if (kind == 'n') {
            if (n != S)
                return pp_errf(err, errlen, PP_EUSAGE, "pipeline.split %s lists %d stages, but "
                               "stages x virtual_stages = %d", split, n, S);
            int at = 0;
            for (int s = 0; s < S; s++) {
                if (vals[s] < 1)
                    return pp_errf(err, errlen, PP_EUSAGE, "pipeline.split %s: stage %d would be "
                                   "empty (every stage needs at least one layer)", split, s);
                p->l0[s] = at;
                p->l1[s] = at += vals[s];
            }
            if (at != L)
                return pp_errf(err, errlen, PP_EUSAGE,
                               "pipeline.split %s adds up to %d layers, but model.n_layers = %d",
                               split, at, L);
        } else {
            if (n != S - 1)
                return pp_errf(err, errlen, PP_EUSAGE,
                               "pipeline.split %s gives %d split points; %d stages need %d", split,
                               n, S, S - 1);
            for (int s = 0; s < S; s++) {
                p->l0[s] = s == 0 ? 0 : vals[s - 1];
                p->l1[s] = s == S - 1 ? L : vals[s];
                if (p->l1[s] <= p->l0[s] || p->l1[s] > L)
                    return pp_errf(err, errlen, PP_EUSAGE, "pipeline.split %s: split points must "
                                   "increase strictly within 1..%d (stage %d would hold layers "
                                   "%d..%d)", split, L - 1, s, p->l0[s], p->l1[s] - 1);
            }
        }
    }
    for (int s = 0; s < S; s++) p->cost[s] = stage_cost(pc, S, s, p->l1[s] - p->l0[s]);
    return PP_OK;
}

void partition_print(const Partition *p, int P, const int *stage_rank, FILE *f) {
    double total = 0;
    for (int s = 0; s < p->S; s++) total += p->cost[s];
    fprintf(f, "partition (%d stages on %d ranks):\n", p->S, P);
    for (int s = 0; s < p->S; s++)
        fprintf(f, "  stage %d on rank %d: layers %d-%d%s%s  (%.1f%% of the %s)\n", s,
                stage_rank[s], p->l0[s], p->l1[s] - 1, s == 0 ? " +embeddings" : "",
                s == p->S - 1 ? " +final norm, head, loss" : "", 100.0 * p->cost[s] / total,
                p->unit ? p->unit : "cost");
}
