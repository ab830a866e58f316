/* plan.h — planning past one machine: per-layer costs (measured on this machine's
 * device, read from a trace, or given), a link model for the transfers, and the sweep
 * over ranks, schedules and microbatches that predicts each plan's step time, bubble,
 * pipeline efficiency, tokens/s and memory per rank ([Note: planning model] in plan.c,
 * docs/schedules.md). */
#ifndef PP_PLAN_H
#define PP_PLAN_H

#include <stdio.h>

#include "backend/backend_load.h"
#include "config.h"
#include "model/model.h"
#include "model/partition.h"
#include "sched/sched.h"

/* What one microbatch costs, in milliseconds: a forward (F) and a full backward (B) of
 * one decoder layer, of the embedding (stage 0) and of the head (final norm, LM head
 * and loss: the last stage; its forward also computes the loss gradient and the head's
 * share of d(wte), as model_forward does in training). */
typedef struct {
    double layer_f, layer_b;
    double embed_f, embed_b;
    double head_f, head_b;
} LayerCosts;

/* A link between two ranks, per direction: a message of n bytes takes
 * latency + n / bandwidth ([Note: link model] in sched_sim.h). gbps 0: no transfer cost. */
typedef struct {
    char name[32];    /* "nvlink", "ib", ... or the text given */
    double latency_us;
    double gbps;      /* GB/s, 1e9 bytes per second; 0 with latency 0: free ("none") */
} Link;

/* "nvlink" (5 us, 450 GB/s: NVLink 4, H100 SXM, per direction), "ib" (10 us, 50 GB/s:
 * one NDR 400 Gb/s adapter per GPU), "ib-hdr" (10 us, 25 GB/s: HDR 200 Gb/s), "none"
 * (free), or "LATENCY_us,GBps" (latency >= 0, bandwidth > 0, both finite). Returns PP_OK
 * or PP_EUSAGE (nothing written to err: the caller names the flag). */
int plan_parse_link(const char *text, Link *l);
/* Milliseconds that link l takes to carry `bytes` (0 bytes: 0). */
double plan_link_ms(const Link *l, double bytes);

/* "F,B" or "F,B,EF,EB,HF,HB": milliseconds per microbatch of a layer's forward and
 * backward, then the embedding's and the head's (0 when absent); F and B > 0, the rest
 * >= 0, all finite. Returns PP_OK or PP_EUSAGE. */
int plan_parse_layer_costs(const char *text, LayerCosts *c);

/* What pipeline.balance: time balances for these costs: F + B per layer, embedding
 * and head (partition_build_costs). */
void plan_partition_costs(const LayerCosts *c, int S, PartitionCosts *pc);
/* The F and B milliseconds of each stage of partition p: its layers, plus the
 * embedding on stage 0 and the head on the last. F, B: [p->S]. */
void plan_stage_costs(const LayerCosts *c, const Partition *p, double *F, double *B);

/* `--measure`: time one forward and one backward of a decoder layer, the embedding and
 * the head (each the difference of a one-layer chunk with it and one without) on the
 * backend runtime.device selects (backend_select: a GPU when cuda), on one microbatch of
 * B x seq_len tokens: the fastest of 3 after a warm-up. note receives the backend's line
 * ("cpu", "cuda:0 NVIDIA H100 ..., bf16"). Returns PP_OK, or backend_select's PP_EUSAGE
 * with its message. */
int plan_measure(const Config *cfg, int B, LayerCosts *c, char *note, size_t notelen, char *err,
                 size_t errlen);

/* Per-stage costs of a real run, read from its trace.json (`./pptrain --trace`): the
 * median milliseconds of each stage's F and B slices over its microbatches and steps
 * (the first step left out when there are more: it warms up). A stage's split backward
 * (I and W slices) gives B = I and W = W; a stage with B slices W = 0; split is set when
 * any stage is split (then B is read as the input half: [Note: split costs] in sched_sim.h). */
typedef struct {
    int S;                     /* stages */
    int split;                 /* 1: B and W are the medians of I and W */
    double F[PP_MAX_STAGES], B[PP_MAX_STAGES], W[PP_MAX_STAGES];
    int steps, slices;         /* steps used, compute slices read */
} TraceCosts;

/* Read path's per-stage costs for a plan of S stages. Returns PP_OK, or PP_EUSAGE with a
 * message naming the file and what is missing: not a readable file, not a trace (no
 * traceEvents), no compute slices, a stage outside 0..S-1 (a trace of another split),
 * a stage without F or without B (or I and W) slices. */
int plan_trace_costs(const char *path, int S, TraceCosts *tc, char *err, size_t errlen);

/* Per-layer costs from per-stage ones (F[s], B[s] of partition p, a full backward):
 * least squares of stage = layers * layer + embedding (stage 0) + head (last stage),
 * the embedding and head held at >= 0. With fewer than 3 stages (or no middle stage)
 * the three are not separable: the embedding and head then take their share of the
 * FLOP model (partition_costs_time's ratios, a from model_arch_costs). Returns the largest relative
 * misfit of a stage's F + B. */
double plan_fit_layers(const Partition *p, const double *F, const double *B, const ArchCosts *a,
                       LayerCosts *c);

/* What the config's device stores (backend_layout, [Note: backend layout] in
 * backend/backend_load.h) for a microbatch of B sequences. PP_OK, or PP_EUSAGE. */
int plan_layout(const Config *cfg, int B, BackendLayout *lay, char *err, size_t errlen);

/* Rank pp's memory plan ([Note: memory plan] in model.h) for schedule s (fwd: its
 * forward-only twin), partition part, microbatch B x seq_len and recompute mode `mode`:
 * what runtime_init allocates on a backend of layout `lay` (plan_layout). */
void plan_rank_memory(const Config *cfg, const BackendLayout *lay, const Schedule *s,
                      const Schedule *fwd, const Partition *part, int pp, int mode, int B,
                      ModelPlan *plan);

#define PLAN_MAX_LINKS 8
#define PLAN_MAX_LIST 32

/* The sweep: every schedule x ranks x microbatches, over each link. */
typedef struct {
    int ranks[PLAN_MAX_LIST], nranks;                  /* default 2..8 */
    int mbs[PLAN_MAX_LIST], nmbs;                      /* default 8, 16, 32 */
    char schedules[PLAN_MAX_LIST][PP_NAME_MAX];        /* default 1f1b, interleaved-1f1b */
    int nschedules;
    Link links[PLAN_MAX_LINKS];                        /* default nvlink, ib */
    int nlinks;
    int act_bytes;          /* bytes per element of a transferred activation */
    int grad_bytes;         /* ... of a transferred gradient */
    const char *costs_from; /* where the costs came from, for the header */
} PlanGrid;

/* Fill the defaults above; act_bytes and grad_bytes 4 (pptrain sends fp32 gradients in
 * every precision; its activations are the residual stream's type, 2 bytes on a bf16 GPU:
 * `pptrain schedule` sets act_bytes from the config's device, plan_layout). */
void plan_grid_default(PlanGrid *g);

/* Simulate every row of grid g for the config's model and microbatch (batch_size /
 * (replicas x microbatches) sequences of seq_len) with costs c, partitioned by c
 * (pipeline.balance: time), the memory column as a device of layout lay stores it
 * (plan_layout), and print one table per link (json: one JSON object
 * instead). Deterministic for given costs. Returns PP_OK, or PP_ERUNTIME with a
 * message if a schedule fails to build or simulate. */
int plan_sweep(const Config *cfg, const BackendLayout *lay, const LayerCosts *c, const PlanGrid *g,
               int json, FILE *f, char *err, size_t errlen);

#endif
