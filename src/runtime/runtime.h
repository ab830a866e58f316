/* runtime.h — one rank of a pipeline: builds its stages, then interprets its lowered
 * action list each step (forward, backward, send, receive), syncs tied embeddings and
 * the gradient norm, and steps the optimizer. The only module that joins model,
 * schedule, transport and data. */
#ifndef PP_RUNTIME_H
#define PP_RUNTIME_H

#include "comm/comm.h"
#include "config.h"
#include "data_stream.h"
#include "flight.h"
#include "layout.h"
#include "model/model.h"
#include "model/model_hf.h"
#include "model/partition.h"
#include "runtime_dp.h"
#include "sched/sched.h"
#include "trace.h"

/* Bookkeeping of one activation slot of a local chunk. */
typedef struct {
    int mb;              /* microbatch held, -1 when free */
    int busy;            /* holds live activations (acquired, not yet released) */
    CommReq *send[2];    /* outstanding sends reading this slot (output, input grad) */
    CommReq *recv;       /* outstanding receive of the output gradient into this slot */
    void *host[3];       /* device backends: host staging of the two sends and the
                            receive ([Note: host staging] in runtime.c), else NULL */
    int block;           /* the model's activation block it holds while busy */
    unsigned gen;        /* times it was taken: tells a block whether its last holder
                            was taken again since */
} SlotState;

/* Bookkeeping of one of the model's activation blocks ([Note: activation blocks] in
 * model.c): held by a busy slot, or free with its last holder recorded, whose posted
 * send of the output may still read it. */
typedef struct {
    int busy;
    int c, i;            /* last holder: slot i of chunk c */
    unsigned gen;        /* that slot's gen when it held the block; 0: never held */
} ActBlock;

/* Bookkeeping of the model's receive buffer of the same index (model_recv_buffer): a
 * RECV_F receives into it until its forward takes it over (model_take_input). */
typedef struct {
    int mb;              /* microbatch it receives, -1 when free */
    CommReq *req;
    void *host;          /* device backends: where the transport receives it, else NULL */
} RecvBuf;

typedef struct Runtime {
    const Config *cfg;
    Layout lay;                /* world, pipeline rank pp, replica dp ([Note: rank layout]) */
    int v, S, M;               /* chunks per pipeline rank, stages, microbatches */
    int global_batch, T, Bmb;  /* sequences per step, sequence length, sequences per
                                  microbatch (the model's B) */
    Partition part;
    Schedule sched, fwd;       /* training and forward-only (validation) schedules */
    Model model;
    int chunk_of[PP_MAX_STAGES]; /* local chunk index of a stage, -1 if remote */
    SlotState *slots[PP_MAX_CHUNKS];
    ActBlock *blocks;          /* [model.nblocks] */
    RecvBuf *rbufs[PP_MAX_CHUNKS]; /* [model.chunks[c].nrecv] */
    int *wsets[PP_MAX_CHUNKS]; /* [model.chunks[c].nwstate] microbatch whose pending W
                                  each W state set holds ([Note: W state]), -1 free */
    Comm *comm;                /* every message and collective: the job's Comm, or the NCCL
                                  Comm over it (own_comm) */
    Comm *comm_base;           /* with own_comm: the job's Comm it was made from (main.c's) */
    int own_comm;              /* rt->comm is the runtime's to destroy */
    char transport_note[640];  /* "nccl (runtime.transport auto: ...)" for the build report */
    DataStream train, val;     /* data.train, data.val (first / last stage's rank only) */
    int has_val;               /* data.val set and data.val_every > 0 (every rank) */
    int data_failed;           /* the last call failed because a batch could not be read
                                  (every rank: [Note: a batch that cannot be read]) */
    int *inputs, *targets;     /* [global_batch*T] host: the step's batch (first / last
                                  stage's rank only) */
    int uploads_pending;       /* to_device has read inputs / targets since the last wait */
    double *loss_dev;          /* [M] device: each microbatch's loss sum (last stage) */
    double *sumsq_dev;         /* [model.ntensors] device: each tensor's squared grad sum */
    double *loss_host, *sumsq_host; /* host copies of the two */
    const float **sum_x;            /* [model.ntensors] host: each tensor's gradient, and */
    size_t *sum_n;                  /* its size, for be->sumsq_many ([Note: many tensors]) */
    PPOptTensor *upd;               /* [model.ntensors] host: the tensors each step updates, */
    int nupd;                       /* nupd of them (update_list) */
    int tied_peer;             /* world rank holding the other copy of wte, -1 if none */
    Comm *tied;                /* the tied pair {stage 0's rank, the last stage's rank} as a
                                  group of this replica, NULL on other ranks */
    float *tied_host;          /* device backends: host staging of the tied all-reduce */
    int local_batch;           /* sequences of this replica per step: global_batch / D */
    DpSync dp;                 /* the gradient all-reduce among replicas ([Note: data parallel]) */
    size_t staging_bytes;      /* host staging buffers in all ([Note: host staging]) */
    Trace *trace;
    FlightRec *flight;         /* the flight recorder (flight.h), or NULL; set by the caller
                                  after runtime_init, which records nothing */
    char device_note[1024];    /* the backend in one line, for the build report */
    int init_hf;               /* model.init_from was a Hugging Face directory ... */
    ModelHfRead init_read;     /* ... of which this rank read this, for the build report */
    /* Test hook, NULL in the product: called before (done = 0) and after (done = 1)
     * action k of this rank's list of schedule sc. The in-process interpreter test uses
     * it to step all ranks in the simulator's order (test/test_interp.c). */
    void (*action_hook)(void *ctx, const Schedule *sc, int pp, int k, int done);
    void *hook_ctx;
    long recompute_plan;       /* layer recomputes per step the keep marks imply
                                  ([Note: schedule-aware recompute] in sched.h) */
    long recompute_skipped;    /* those the marks skip */
    double busy_s, step_s;     /* of the last step: compute time and wall time */
    double pipe_s;             /* of the last step: the action list (no optimizer) */
    double save_stall_s;       /* of the last checkpoint: how long the step stalled */
    int saves;                 /* checkpoints handed over in this run, and their stalls: */
    double sum_save_stall_s, max_save_stall_s; /* total and longest (ckpt_state_save) */
    double wait_s;             /* of the last step: blocked on transfers (wait_req) */
    int first_step, steps_run; /* steps this run finished: first_step+1 .. first_step+steps_run */
    double t_first;            /* pp_now when this run's first step began */
    double cur_f[PP_MAX_STAGES], cur_b[PP_MAX_STAGES]; /* of the last step, per stage (B or I) */
    double cur_w[PP_MAX_STAGES];  /* of the last step, per stage: W (split backwards) */
    /* Sums over measured steps (runtime_measure), for runtime_report. */
    int measured;
    double sum_step_s, sum_pipe_s, sum_busy_s, sum_wait_s, min_step_s;
    double sum_f[PP_MAX_STAGES], sum_b[PP_MAX_STAGES]; /* per local stage, seconds */
    double sum_w[PP_MAX_STAGES];
} Runtime;

/* Build this rank's part of the run: partition, schedules, model (only its stages;
 * slots sized by replaying its action list), optimizer state, data. comm is borrowed.
 * Returns PP_OK, or PP_EUSAGE / PP_ERUNTIME with a message. */
int runtime_init(Runtime *rt, const Config *cfg, Comm *comm, Trace *trace, char *err,
                 size_t errlen);
void runtime_free(Runtime *rt);

/* The partition split auto makes for cfg's pipeline.balance (time, parameters,
 * memory) on schedule sched (memory balances each stage's peak in-flight slots, at the
 * sizes this rank's device stores them: backend_layout, so ranks on different devices
 * may differ, which runtime_init refuses, [Note: partition agreement] in runtime.c); an
 * explicit pipeline.split as it is. measured: `pptrain schedule --measure`'s seconds
 * (PartitionCosts), or NULL for the cost model; replicas: the data-parallel replicas
 * (a microbatch is batch_size / (replicas x microbatches) sequences). PP_OK or PP_EUSAGE
 * with a message. */
int runtime_partition(const Config *cfg, const Schedule *sched, const double *measured,
                      int replicas, Partition *part, char *err, size_t errlen);

/* What rank pp of a pipeline builds ([Note: memory plan] in model.h): its v chunks'
 * specs (slot pools from each stage's peak in the training and forward-only
 * schedules), their recompute (mode PP_RECOMPUTE_*, pipeline.recompute_layers) and W
 * state sets, and the rank's activation blocks ([Note: activation blocks] in model.c):
 * nblocks[1] that keep all and nblocks[0] that recompute, from the rank's peak over its
 * chunks together, split by the keep marks. runtime_init builds exactly this;
 * `pptrain schedule` plans with it. */
void runtime_chunk_plan(const Schedule *train, const Schedule *fwd, const Partition *part, int pp,
                        int recompute, int rc_layers, ChunkSpec *specs, ChunkRecompute *rc,
                        int *nwstate, int nblocks[2]);

/* Result of one training step (the same on every rank). */
typedef struct {
    double loss;       /* mean over every token of the global batch */
    double grad_norm;  /* global L2 norm before clipping */
    float lr;
} StepResult;

#define RUNTIME_MAX_CTL 4

/* One optimizer step (0-based `step`): batch `step` of the training data. ctl[nctl]
 * (nctl <= RUNTIME_MAX_CTL, ctl may be NULL when nctl is 0) rides on the step's one
 * all-reduce: each rank passes its values and gets the sums over all ranks back, so
 * that decisions (stop on a signal, a checkpoint written everywhere) are the same on
 * every rank. Returns PP_OK or PP_ERUNTIME (transport failure, non-finite loss, a batch
 * that could not be read) with a message. When a batch could not be read, on any rank,
 * every rank fails with rt->data_failed set, no weight has changed, and res->loss is
 * the loss of the weights on a stand-in batch ([Note: a batch that cannot be read]). */
int runtime_step(Runtime *rt, int step, double *ctl, int nctl, StepResult *res, char *err,
                 size_t errlen);

/* Collective (every rank calls it): mean loss over `batches` batches of the
 * validation set (forward only). PP_ERUNTIME for a transport failure, or a batch that
 * could not be read (as in runtime_step: rt->data_failed, *loss on stand-in batches);
 * the caller judges the value (runtime_check_finite). */
int runtime_validate(Runtime *rt, int batches, double *loss, char *err, size_t errlen);

/* Collective: the loss of the current weights, those after `step` steps, on training
 * batch `step`: the first loss a run resumed from them computes (forward only; weights
 * and optimizer state are untouched). What main.c checks before it commits a checkpoint
 * of weights no step has used yet ([Note: diverged weights] in main.c). PP_ERUNTIME for a
 * transport failure, or a batch that could not be read (as runtime_validate). */
int runtime_check_loss(Runtime *rt, int step, double *loss, char *err, size_t errlen);

/* PP_OK if loss is finite; else PP_ERUNTIME with "step <step>: <what> is <loss>, not
 * finite: ..." and what to do, as runtime_step says of a non-finite training loss. */
int runtime_check_finite(const Runtime *rt, int step, const char *what, double loss, char *err,
                         size_t errlen);

/* Count the last step in the performance report (call after runtime_step; the first
 * steps, which warm caches and fault pages in, are best left out). */
void runtime_measure(Runtime *rt);

/* Collective (every rank calls it): print this rank's busy/idle split and peak RSS (in
 * MB of 10^6 bytes, like every size pptrain prints) and, on rank 0, the pipeline
 * efficiency: the simulator's makespan of this schedule with the measured mean F and B
 * (and, for a split backward, I and W: [Note: split costs] in sched_sim.h) time of
 * every stage, over the measured time of the action list (the step without the
 * optimizer). */
int runtime_report(Runtime *rt, char *err, size_t errlen);

/* The verdict runtime_report prints after the two times: "efficiency N%" (simulated /
 * measured, at most 100%), or, when the measured time is the shorter, a sentence saying
 * so instead of a percentage above 100. */
void runtime_efficiency_text(double simulated_s, double measured_s, char *buf, size_t n);

/* 1 if t is this rank's replica of the tied wte: the last stage's copy on another rank
 * than stage 0's. The grad norm counts, and checkpoints store, only stage 0's copy. */
int runtime_tied_replica(const Runtime *rt, const ParamTensor *t);

/* Collective: check that the two copies of the tied wte (first and last stage's ranks)
 * are bitwise identical ([Note: tied embeddings]); PP_ERUNTIME (a bug) if not. */
int runtime_check_tied(Runtime *rt, char *err, size_t errlen);

#endif
