/* model.h — the stage engine: a rank's share of a decoder model, the parameters of the
 * stages (chunks) it owns in one flat buffer with a table of globally named tensors,
 * their activation slots, recompute and W state, and forward/backward of one chunk on
 * one microbatch; the layers themselves are its Arch's (arch.h). */
#ifndef PP_MODEL_H
#define PP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "backend/backend.h"
#include "backend/backend_load.h"
#include "config.h"

#define PP_MAX_CHUNKS 64

/* Rotary position embeddings (llama.c): the base, and Llama 3's frequency scaling. */
typedef struct {
    float theta;                         /* rope_theta */
    int llama3;                          /* 1: rope_scaling type llama3, with: */
    float factor, low_freq_factor, high_freq_factor;
    int original_max_seq_len;
} ModelRope;

/* The shape of a model (model_dims: a config's). The members after arch are the llama
 * family's; GPT-2 reads none of them (its block has NKV = NH, F = 4C, LayerNorm's 1e-5 and
 * no RoPE: config.c's check_arch), so dims written as {V, Vp, maxT, L, NH, C, tied, arch}
 * are GPT-2's whole shape. */
struct ModelDims {
    int V, Vp, maxT, L, NH, C; /* vocab, padded vocab, max positions, layers, heads, channels */
    int tied;                  /* the head is wte (else a separate "lm_head" [Vp,C]) */
    const Arch *arch;          /* the layer family ([Note: Arch table] in arch.h); never NULL */
    int NKV, F;                /* key/value heads (NH a multiple), the MLP's hidden size */
    float eps;                 /* the norms' epsilon */
    ModelRope rope;
};

typedef struct {
    char name[32]; /* global name: "wte", "wpe", "h.7.qkvw", "lnfw", ... */
    int ndim;
    int shape[2];
    size_t offset; /* into Model.params / grads / opt_m / opt_v, in elements */
    size_t numel;
    PPDType dtype; /* of the master copy (PP_F32; a bf16 compute copy may exist) */
    int decay;     /* AdamW weight decay applies (2-D weight matrices only) */
    int init;      /* how model_init_weights fills it: ARCH_INIT_* */
} ParamTensor;

/* [Note: W state] What the weight half of a split backward (model_backward_weight)
 * reads besides the activation slot: the output gradient of each op of a layer that has
 * weights, which the input half (model_backward_input) computes and the fused backward
 * throws away: the Arch's ws set, nws pointers per layer. The inputs of those ops are
 * the saved activations, which the slot keeps until W ([Note: activation slots] in
 * sched.h).
 *
 * Where it lives. A layer that recomputes keeps all of it in a W state set: its
 * activations may be recomputed again, elsewhere, before W. A chunk has as many sets as
 * its schedule has Ws pending at once (sched_peak_pending_w), each holding what its
 * layers need; this is how a zero-bubble schedule keeps 1F1B's activation bytes. A layer
 * that keeps its activations may keep some of it in activations that the input half
 * leaves dead (Arch.ws_in_acts, ws_place: GPT-2's in [Note: GPT-2 W state] in gpt2.c);
 * the input half then computes those into scratch (Arch.ws_stage) and the engine copies
 * them there at the end of the layer, and the set holds only the rest. */

/* [Note: recompute] pipeline.recompute trades activation memory for compute on the
 * first nrc layers of each chunk (pipeline.recompute_layers; 0 = all). A slot either
 * keeps everything (ActSlot.keep) or, on those layers, keeps less and the backward
 * recomputes the rest from what is kept, into the model's one recompute workspace
 * (Model.work: one layer's worth, shared because one op runs at a time):
 *  - full: a layer keeps only its output (the next layer's input, the chunk's output);
 *    its backward first runs the layer's forward again into the workspace;
 *  - selective: a layer drops what its Arch says is cheap to remake and costly to keep
 *    (ArchBuf.keep; GPT-2: the attention probabilities and the GELU output, gpt2.c),
 *    and the backward remakes it (Arch.layer_recompute).
 * The recompute calls the same backend ops on the same inputs as the forward did, so
 * the backward sees the same bits and training is bitwise equal to keeping everything.
 * A split backward recomputes twice, before I and before W (the workspace does not
 * survive the actions in between; W may need less again).
 * Which forwards keep everything is the schedule's decision, not the model's
 * (Schedule.keep, [Note: schedule-aware recompute] in sched.h): the runtime gives such
 * a forward's slot an activation block that keeps everything, the others one that
 * drops ([Note: activation blocks] in model.c). */
enum { PP_RECOMPUTE_NONE = 0, PP_RECOMPUTE_SELECTIVE, PP_RECOMPUTE_FULL };

/* pipeline.recompute's value as PP_RECOMPUTE_*, or -1 for an unknown name. */
int model_recompute_mode(const char *name);

/* The activations one chunk keeps for one in-flight microbatch. */
typedef struct {
    int keep;      /* 1: every activation is kept; 0: the recomputed layers keep only part
                      ([Note: recompute]) */
    int block;     /* the activation block its layers are laid out in ([Note: activation
                      blocks] in model.c), -1: none or its own */
    void *input;   /* [N,C] (residual) stage input: received, or the embedding output */
    float *grad;   /* [N,C] in: d(stage output) (zero on the last stage); out, after
                      backward: d(stage input). The residual stream's gradient is
                      accumulated in place here. */
    int *tokens;   /* [N] first stage: input ids */
    int *targets;  /* [N] last stage: target ids */
    void **acts;   /* [nlayers of the chunk * arch->nacts]: layer li's saved activations at
                      acts + li * nacts, in the Arch's order */
    void *head[ARCH_MAX_BUFS]; /* last stage: the head's saved activations (Arch.head) */
} ActSlot;

typedef struct {
    int stage;       /* global stage index */
    int l0, l1;      /* global layers [l0, l1) */
    int first, last; /* holds the embeddings / the final norm, head and loss */
    int nslots;      /* activation slots (peak in-flight microbatches) */
    ActSlot *slots;
    int nrecv;       /* receive buffers: inputs received ahead of their forward */
    void **recv;     /* [nrecv] each [N,C] (residual); model_take_input swaps one into a
                        slot */
    int nwstate;     /* W state sets ([Note: W state]); 0 without split backwards */
    void ***wstate;  /* [nwstate][nlayers of the chunk * arch->nws] */
    int recompute;   /* PP_RECOMPUTE_* ([Note: recompute]) */
    int nrc;         /* layers l0 .. l0+nrc-1 recompute in slots without keep */
} Chunk;

/* [Note: model memory] The model owns every device buffer of its rank: parameters,
 * gradients and the optimizer state that updates them (one flat layout, ParamTensor
 * offsets), the activation slots and receive buffers of each chunk, and the scratch.
 * All come from be->alloc at model_init / model_init_optimizer and go back at
 * model_free; nothing is allocated while training ([Note: device memory]). */
struct Model {
    ModelDims d;
    const Arch *arch;     /* d.arch ([Note: Arch table] in arch.h) */
    int B, T;             /* microbatch sequences and length the slots are sized for */
    const Backend *be;
    int nchunks;
    Chunk chunks[PP_MAX_CHUNKS];
    /* Parameters of every chunk of this rank; each global tensor at most once (the
     * tied wte is shared by a first and a last chunk on the same rank). */
    size_t nparams;
    float *params, *grads;
    int nopt;             /* optimizer state arrays (model_init_optimizer) */
    float *opt_m, *opt_v; /* [nparams] each, or NULL: AdamW's moments / SGD's momentum */
    int ntensors;
    ParamTensor *tensors;
    int *tensor_index;       /* tensors' indices by name hash, -1 empty ([Note: tensor index]) */
    size_t tensor_index_cap; /* a power of two, at least twice the table's capacity */
    int weights_held;     /* model_hold_weights: the backend holds all of params */
    /* NULL when this rank holds none; head is wte when tied, else lm_head */
    float *wte, *head, *dwte, *dhead;
    float *gp[ARCH_MAX_GLOBALS], *gg[ARCH_MAX_GLOBALS]; /* the Arch's globals (Arch.globals'
                                                          order): params, grads */
    float **lp, **lg;     /* [L * arch->nlayer_params] layer l's tensors (params, grads) at
                             lp + l * nlayer_params, by global layer; NULL when not owned */
    float *dhead_tied;    /* [Vp,C] the head's share of d(wte) when this rank holds both the
                             first and the last stage ([Note: tied gradient order]) */
    /* Scratch shared by all chunks (one op runs at a time). */
    void *logits;         /* [logits_rows,Vp] last stage: one chunk of the head's rows
                             ([Note: chunked head] in model.c), counted in act_bytes; of
                             be->logits's type ([Note: logits type]) */
    int logits_rows;      /* be->logits_chunk_rows, or N = B*T when that is 0 or more */
    void *dlogits;        /* [logits_rows,Vp] (operand) when the operand type is not the
                             logits' type;
                             NULL: the head's dlogits overwrite its logits */
    float *losses;        /* [N] */
    void *bufs[ARCH_MAX_BUFS]; /* the Arch's backward scratch (Arch.scratch); NULL where its
                                  ArchBuf.when leaves one out */
    float *scratch;       /* be->scratch_floats(N, T, C) for the backward ops */
    float *consts[ARCH_MAX_BUFS]; /* the Arch's constants (Arch.consts: RoPE's inv_freq),
                                     filled at model_init; not counted in the plan */
    size_t act_bytes;     /* activation slot (and block) bytes and the logits buffer, for the
                             build report */
    size_t recv_bytes;    /* receive buffer bytes, for the build report */
    size_t wstate_bytes;  /* W state bytes ([Note: W state]), for the build report */
    void *work[ARCH_MAX_BUFS]; /* the recompute workspace ([Note: recompute]), in the
                                  Arch's activation order: what one layer drops, NULL
                                  members when nothing recomputes */
    size_t work_bytes;    /* its bytes, for the build report */
    size_t att_floats;    /* be->attention_saved_floats(B, T, NH), asked once: the backward
                             reads it per layer ([Note: W state]) */
    int pooled;           /* the layers' activations are in blocks (model_init_recompute) */
    int nblocks, nblocks_keep; /* activation blocks ([Note: activation blocks] in model.c);
                                  the first nblocks_keep keep everything */
    void **blocks;        /* [nblocks] */
    long recomputes;      /* layer recomputes run so far (a backward, I or W of one layer on
                             a slot without keep), for the runtime's check */
};

typedef struct {
    int stage, l0, l1, first, last, nslots, nrecv;
} ChunkSpec;

/* A chunk's recompute ([Note: recompute]); model_init keeps everything. */
typedef struct {
    int mode;   /* PP_RECOMPUTE_*; none keeps everything */
    int layers; /* pipeline.recompute_layers: 0 = every layer of the chunk */
} ChunkRecompute;

/* [Note: memory plan] What model_init and model_init_wstate allocate for these chunks,
 * computed from the sizes alone (nothing is allocated): `pptrain schedule` prints it,
 * the build report prints what was allocated, and a test holds the two equal. Bytes. */
typedef struct {
    size_t params, grads, optimizer; /* grads include the tied head's part */
    size_t slots;                    /* activation slots and blocks, and the last stage's
                                        logits buffer (Model.act_bytes) */
    size_t logits;                   /* of slots: that logits buffer, [R,Vp] of the logits
                                        type ([Note: logits type]) */
    size_t work;                     /* the recompute workspace (Model.work_bytes) */
    size_t recv;                     /* receive buffers (Model.recv_bytes) */
    size_t wstate;                   /* W state sets (Model.wstate_bytes) */
} ModelPlan;

/* Fill *p for model_init_recompute(d, specs, rc, nchunks, B, T, be, nblocks_keep,
 * nblocks_drop) (rc NULL: model_init) with a backend whose attention keeps att_floats
 * floats per layer (be->attention_saved_floats(B, T, NH)), whose operand activations
 * take operand_bytes an element (pp_dtype_bytes(be->operand)), whose residual stream
 * residual_bytes (pp_dtype_bytes(be->residual)), whose logits take
 * logits_bytes (pp_dtype_bytes(be->logits)) and whose head computes logits_rows rows at
 * once (be->logits_chunk_rows, 0: all), nopt optimizer arrays, and
 * nwstate[c] W state sets for chunk c. */
void model_plan(ModelPlan *p, const ModelDims *d, const ChunkSpec *specs, const ChunkRecompute *rc,
                const int *nwstate, int nchunks, int B, int T, size_t att_floats,
                size_t operand_bytes, size_t residual_bytes, size_t logits_bytes, int logits_rows,
                int nopt, int nblocks_keep, int nblocks_drop);
/* The activation total of a plan: slots, workspace, receive buffers and W state. */
size_t model_plan_activations(const ModelPlan *p);

/* Build the tensor table and allocate parameters, gradients, slots, receive buffers and
 * scratch (device memory of be) for the given chunks (stages) of this rank, microbatch
 * B x T. Dies on out of memory. */
void model_init(Model *m, const ModelDims *d, const ChunkSpec *specs, int nchunks, int B,
                int T, const Backend *be);
/* model_init for the forward only (`pptrain export`, `pptrain sample`): no gradients
 * (grads and the per-tensor gradient pointers NULL), half the parameter memory; nothing that
 * reads or writes gradients may be called on it. */
void model_init_forward(Model *m, const ModelDims *d, const ChunkSpec *specs, int nchunks, int B,
                        int T, const Backend *be);
/* model_init with rc[c] the recompute of chunk c ([Note: recompute]), the slots'
 * layer activations in the rank's shared blocks ([Note: activation blocks] in model.c):
 * nblocks_keep that keep everything and nblocks_drop that drop what the recompute
 * drops. A slot has no layer activations until model_slot_attach gives it a block.
 * rc NULL: model_init (each slot keeps its own, every activation). */
void model_init_recompute(Model *m, const ModelDims *d, const ChunkSpec *specs,
                          const ChunkRecompute *rc, int nchunks, int B, int T, const Backend *be,
                          int nblocks_keep, int nblocks_drop);
/* Lay slot s of chunk c's layer activations out in block b (keep: b < nblocks_keep).
 * The caller keeps each block with one slot at a time, and a block's last holder's
 * posted send of its output (model_chunk_output) complete before it moves on. */
void model_slot_attach(Model *m, int c, int s, int b);
/* Allocate `narrays` (0..2) zeroed optimizer state arrays of nparams each (opt_m, then
 * opt_v): optim_state_arrays() of the run's optimizer. Call once, after model_init. */
void model_init_optimizer(Model *m, int narrays);
/* Allocate chunk c's n W state sets ([Note: W state]; n = sched_peak_pending_w of its
 * stage), counted in wstate_bytes. Call at most once per chunk, after model_init; a
 * chunk without them (n = 0) can run model_backward only. */
void model_init_wstate(Model *m, int c, int n);
void model_free(Model *m);

/* Initialisation by each tensor's rule (ParamTensor.init, from the Arch: GPT-2's
 * weights ~ N(0, std), the residual projections with std/sqrt(2L), biases 0, LayerNorm
 * weights 1), independent of the split: each tensor is drawn from its own stream seeded
 * by (seed, global name). Padded vocabulary rows of wte and lm_head are 0. */
void model_init_weights(Model *m, uint64_t seed, float std);

/* Index of the tensor with this global name, or -1. */
int model_find(const Model *m, const char *name);
/* Whether chunk c holds tensor t of this rank's table: its actions write t's gradient
 * (a layer's tensor on its layers' chunk, a global on its stage, wte on the first stage
 * and, tied, the last). */
int model_chunk_holds(const Model *m, int c, const ParamTensor *t);

/* Forward of chunk c on slot s. The first stage embeds s->tokens; other stages read
 * s->input. On the last stage it computes the loss against s->targets and writes the
 * SUM of per-token losses to *loss (one device double; not touched elsewhere, may be
 * NULL there); with want_grad it also computes d(loss)/d(final norm output) into the
 * slot (model_head_grad) and the head's contribution to d(head), scaling every token's
 * loss by dloss (1/(global tokens), so the microbatches add up to the mean). The stage
 * output is model_chunk_output(). */
void model_forward(Model *m, int c, int s, float dloss, int want_grad, double *loss);
/* Backward of chunk c on slot s. Reads s->grad as d(stage output) (ignored on the last
 * stage, which starts from model_head_grad) and leaves d(stage input) in s->grad (the first
 * stage instead accumulates into the embedding gradients). Weight grads accumulate. */
void model_backward(Model *m, int c, int s);
/* The two halves of model_backward for zero-bubble schedules ([Note: split backward]
 * in backend.h). model_backward_input: what model_backward leaves in s->grad, through
 * every layer, computing no weight gradient; it keeps each op's output gradient in W
 * state set w of the chunk ([Note: W state]). model_backward_weight: the weight and
 * bias gradients of chunk c on slot s from W state set w (and the embedding gradients
 * from s->grad on the first stage, the final norm's from model_head_grad on the last); it
 * reads the slot's activations, so the slot must stay held until it has run. Input
 * then weight gives model_backward's bits in every gradient. */
void model_backward_input(Model *m, int c, int s, int w);
void model_backward_weight(Model *m, int c, int s, int w);
/* The [N,C] output activation (residual) of chunk c, slot s (not for the last stage). */
void *model_chunk_output(Model *m, int c, int s);
/* The last stage's d(loss)/d(final norm output) [N,C] (operand) of chunk c, slot s: what
 * the forward with want_grad left for the backward. */
void *model_head_grad(const Model *m, int c, int s);

/* For an Arch's head_forward ([Note: chunked head] in model.c): the loss of the head's
 * input x [N,C] (operand; the final norm's output) against targets [N], its sum into
 * *loss (may be NULL) and, with want_grad, dx [N,C] (operand) = d(loss)/d(x) (OVERWRITTEN)
 * and d(head) added, every token's loss scaled by dloss. */
void model_head_loss(Model *m, const void *x, void *dx, const int *targets, float dloss,
                     int want_grad, double *loss);

/* Receive buffer r of chunk c ([N,C] (residual), device). */
void *model_recv_buffer(Model *m, int c, int r);
/* Make receive buffer r of chunk c the input of slot s: the two buffers trade places
 * (no copy), so the slot's old input buffer becomes receive buffer r. */
void model_take_input(Model *m, int c, int s, int r);

void model_zero_grads(Model *m);

/* [Note: tied gradient order] d(wte) has two parts: the embedding's (stage 0's
 * backward) and the head's (the last stage's forward). Where both stages are on one
 * rank they are accumulated apart and added once per step, embedding part first:
 * the same order as the pair sum of two ranks, and independent of how a schedule
 * interleaves forwards and backwards, so every schedule gives the same bits. Call
 * after the step's last backward; no-op when the rank does not hold both. */
void model_fold_tied_grad(Model *m);

/* [Note: held weights] hold 1: the parameters do not change until model_hold_weights(m,
 * 0), so the backend may convert them once (Backend.weight_hold: the bf16 copy of a
 * bf16 GPU run) instead of in every matmul of every microbatch. The runtime holds them
 * over each action list (a step's forwards and backwards, a validation batch): the
 * optimizer, the data-parallel gather and a checkpoint load all write them outside it.
 * hold MODEL_HOLD_KEPT: as 1, and since the last hold only the backend's optimizer
 * entries wrote the parameters (no ZeRO-1 gather, no load), so the backend may reuse the
 * copy its AdamW kept current (weight_hold's kept) instead of converting them again. */
enum { MODEL_HOLD = 1, MODEL_HOLD_KEPT = 2 };
void model_hold_weights(Model *m, int hold);

/* Load llm.c's fp32 GPT-2 checkpoint (DESIGN.md §6) into the tensors this rank holds,
 * through the Arch's import_llmc. The file's V, L, NH, C must equal the config's; its
 * maxT must be >= maxT; any padded vocabulary. Returns PP_OK, or PP_EUSAGE with a
 * message naming the file (or saying that model.arch has no llm.c format). */
int model_load_llmc(Model *m, const char *path, char *err, size_t errlen);

/* Write the tensors of a model that holds every stage (a 1-rank, all-layer model) as
 * llm.c's fp32 checkpoint, padded vocabulary Vp, through the Arch's export_llmc. tmp
 * file + rename. Returns PP_OK or PP_ERUNTIME with a message. The inverse of
 * model_load_llmc. */
int model_save_llmc(const Model *m, const char *path, char *err, size_t errlen);

/* Elements of this rank's largest tensor (at least 1): the size of a host staging
 * buffer through which any one tensor can be copied. */
size_t model_largest_tensor(const Model *m);

/* Number of parameters of the whole model (all stages) for these dims: its table's. */
size_t model_total_params(const ModelDims *d);

/* [Note: architecture costs] in arch.h, from d's Arch: a layer's, the embedding's and
 * the head's parameters and forward FLOPs per token (attention at sequence length T),
 * the floats crossing a stage boundary and those the head keeps, per token. */
void model_arch_costs(const ModelDims *d, int T, ArchCosts *a);
/* The dims of the model a config describes, its Arch the one model.arch names. */
ModelDims model_dims(const Config *cfg);
/* What a device backend reserves its workspace for (backend_select's sizes, [Note: CUDA
 * workspace] in cuda/backend_cuda.cu) to run microbatches of B x T of this model on a
 * rank that holds `params` parameters (model_plan's, over sizeof(float); 0: unknown, the
 * held copy then grows at the first hold): the widest row and the largest matrix of the
 * architecture's layer tensors and of the head, attention's heads and head size. */
BackendSizes model_backend_sizes(const ModelDims *d, int B, int T, size_t params);
/* Elements of the activation (and of its gradient) crossing a stage boundary for a
 * microbatch of B sequences of T tokens: one function, so every buffer and message
 * agrees. The activation is of the backend's residual type ([Note: residual stream
 * type] in backend.h: model_boundary_bytes), its gradient fp32. */
size_t model_boundary_elems(const ModelDims *d, int B, int T);
/* Bytes of the activation that crosses m's stage boundaries (its slots' inputs, receive
 * buffers and messages): model_boundary_elems at the residual type. */
size_t model_boundary_bytes(const Model *m);
/* Bytes of that activation's gradient (its slots' grad, backward messages): fp32. */
size_t model_boundary_grad_bytes(const Model *m);
/* Bytes of an element of ArchBuf type `type` (ARCH_F32, ARCH_OPERAND, ARCH_RESIDUAL in
 * arch.h) with operand elements of ob bytes and residual ones of rb. */
size_t model_type_bytes(int type, size_t ob, size_t rb);
/* [Note: W state] in a pre-norm residual block (gpt2.c's and llama.c's): the four [N,C]
 * output gradients of a layer that keeps its activations — two matmul douts (dres3, dres2)
 * and two norm douts (dln2, dln1), all operands — live in its attention state when that
 * holds them. model_ws_four_fit says whether it does for m's sizes; model_ws_four points
 * the four into att, one after the other, each at a multiple of 16 bytes. The input half's
 * staging buffer (the Arch's dkeep scratch) is carved the same way: model_ws_four_elems
 * operands hold the four. */
int model_ws_four_fit(size_t att_floats, size_t N, size_t C, size_t operand_bytes);
void model_ws_four(const Model *m, float *att, void **dln2, void **dln1, void **dres3,
                   void **dres2);
size_t model_ws_four_elems(size_t N, size_t C);
/* Bytes one layer keeps for its backward for N tokens under recompute mode `mode`
 * (model_recompute_mode: 0 none, 1 selective, 2 full), att floats of attention's saved
 * state, operands of ob bytes and the residual stream of rb (the backend's types,
 * [Note: backend layout] in backend_load.h): the memory balance's per-layer cost, from
 * the Arch's activations and what each mode keeps. */
double model_layer_act_bytes(const ModelDims *d, double N, double att, size_t ob, size_t rb,
                             int mode);
/* Bytes the head keeps per last-stage slot for N tokens (the Arch's ARCH_HEAD buffers),
 * operands of ob bytes and the residual stream of rb. */
double model_head_act_bytes(const ModelDims *d, double N, size_t ob, size_t rb);
/* Bytes of the head's logits buffer for a microbatch of B x T: one chunk of logits_rows
 * rows (all B T when 0 or more: [Note: chunked head] in model.c) of Vp elements of
 * logits_bytes. */
size_t model_logits_bytes(const ModelDims *d, int B, int T, size_t logits_bytes, int logits_rows);
/* Model FLOPs per token of a training step (forward and backward: 3x the forward, the
 * embedding not counted), as ../shared/GPU.md counts them for the MFU. */
double model_train_flops_per_token(const ModelDims *d, int T);

/* Whether dims describe a model this code can build: V >= 1, Vp >= V, maxT, L, NH >= 1,
 * tied 0 or 1, no table size overflows an int, and what the Arch requires (GPT-2: C in
 * [1, INT_MAX/4], a multiple of NH). Returns PP_OK, or PP_EUSAGE with what is wrong
 * ("NH=0: the number of heads must be >= 1") in err. For dims that come from a file (a
 * manifest), before model_table or model_init. */
int model_dims_check(const ModelDims *d, char *err, size_t errlen);

/* The tensor table of the whole model (embeddings, every layer, final norm, and lm_head
 * when untied) in model_init's order, names and shapes only, nothing else allocated: for
 * checking a file against dims before model_init allocates them. Returns the malloc'd
 * table (the caller frees) and its length in *n. d must pass model_dims_check. */
ParamTensor *model_table(const ModelDims *d, int *n);

#endif
