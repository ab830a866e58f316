/* arch.h — a decoder architecture as one table: its tensors, the forward and backward of
 * its embedding, layer and head, the activations, W state, scratch and constants they
 * keep, its costs and its weight files. The stage engine (model.c) runs whatever the
 * table says; gpt2.c fills GPT-2's, llama.c Llama's (and qwen2's, mistral's), selected by
 * model.arch. */
#ifndef PP_ARCH_H
#define PP_ARCH_H

#include <stddef.h>

#include "hf/hf_config.h"

typedef struct Arch Arch;
typedef struct ModelDims ModelDims; /* model.h */
typedef struct Model Model;         /* model.h */

/* [Note: architecture costs] What the partitioner's balance modes, the planner and the
 * MFU need of an architecture, per token: Arch.costs fills it (model_arch_costs), so
 * that no architecture's arithmetic is restated outside its own file. */
typedef struct {
    double layer_params, embed_params, head_params; /* parameters (the tied head: its wte copy) */
    double layer_flops, embed_flops, head_flops;    /* forward FLOPs per token, attention at T */
} ArchCosts;

/* How model_init_weights fills a tensor (seeded by its global name): N(0, std), N(0,
 * std / sqrt(2L)) (the residual projections), ones (norm weights) or zeros (biases). */
enum { ARCH_INIT_NORMAL, ARCH_INIT_PROJ, ARCH_INIT_ONE, ARCH_INIT_ZERO };

/* Which stage holds a global tensor. */
enum { ARCH_FIRST, ARCH_LAST };

/* A parameter tensor kind. A layer's "ln1w" is layer l's global "h.<l>.ln1w"; a
 * global's name is its global name. Its shape comes from Arch.shape (AdamW decays the
 * 2-D ones). */
typedef struct {
    const char *name;
    int init;  /* ARCH_INIT_* */
    int stage; /* globals: ARCH_FIRST or ARCH_LAST */
} ArchTensor;

/* The buffer sets an architecture declares (Arch.elems' set argument). */
enum {
    ARCH_ACTS,   /* a layer's saved activations, per slot (or block) and layer */
    ARCH_HEAD,   /* the head's saved activations, per last-stage slot */
    ARCH_WS,      /* a layer's W state ([Note: W state] in model.h), per set and layer */
    ARCH_SCRATCH, /* the backward's model-wide scratch, one op at a time */
    ARCH_CONST    /* model-wide constants (fp32), filled once at model_init (Arch.const_fill) */
};

/* When a scratch buffer is allocated (ArchBuf.when). */
enum {
    ARCH_ALWAYS,
    ARCH_CAST,    /* only where the operand type is not fp32 (a cast copy of an fp32 buffer) */
    ARCH_WS_STAGE /* at model_init_wstate, when some layer keeps its W state in its own
                     activations (Arch.ws_stage carves it; counted in the W state bytes) */
};

/* [Note: residual gradient's operand] With bf16 operands a layer's backward reads the
 * residual gradient (fp32) as a matmul operand first (the last matmul's backward), so it
 * casts it into its ARCH_CAST scratch buffer of the residual gradient's operand. In the
 * fused backward of a chunk the op above (the head's final norm, or the layer above's
 * first norm) writes that copy instead, in the pass that finishes the gradient
 * (layernorm_backward's dinp_op): no cast a layer. The chain argument says who does what:
 *  - ARCH_DRES_OP_IN (layer_backward): the buffer already holds dres's operand copy;
 *  - ARCH_DRES_OP_OUT (layer_backward, head_backward): leave there the operand copy of
 *    the gradient this call leaves in dres (dx), for the layer below.
 * The engine (model.c chunk_backward) sets OUT on every call that has a fused layer below
 * it in the chunk, and IN on the call after one that had OUT. Same bits either way: the
 * copy has to_operand's bits (layernorm_backward's contract in backend.h). The input
 * half keeps its own copies in ws (the layer below's ws is not the buffer). */
enum { ARCH_DRES_OP_IN = 1, ARCH_DRES_OP_OUT = 2 };

/* The recompute modes as bits (1 << PP_RECOMPUTE_SELECTIVE, 1 << PP_RECOMPUTE_FULL). */
#define ARCH_SEL 2
#define ARCH_FULL 4

/* A buffer's element type (ArchBuf.type): fp32, the backend's operand type ([Note: operand
 * activations] in backend.h) or its residual type ([Note: residual stream type]). */
enum { ARCH_F32 = 0, ARCH_OPERAND = 1, ARCH_RESIDUAL = 2 };

/* One buffer of a set: its elements come from Arch.elems, its element type from here. */
typedef struct {
    const char *name;
    int type;    /* ARCH_F32, ARCH_OPERAND or ARCH_RESIDUAL */
    int keep;    /* ARCH_ACTS: the recompute modes (ARCH_SEL, ARCH_FULL) under which a layer
                    that recomputes still keeps it in its slot ([Note: recompute] in
                    model.h); the layer's output is kept under every mode */
    int work;    /* ARCH_ACTS: the modes whose recompute workspace holds it */
    int when;    /* ARCH_SCRATCH: ARCH_ALWAYS, ARCH_CAST or ARCH_WS_STAGE */
} ArchBuf;

/* The most buffers in a set and globals an Arch may declare: the engine's fixed arrays
 * (Model.work, .bufs, .gp, ActSlot.head, stack arrays). */
#define ARCH_MAX_BUFS 32
#define ARCH_MAX_GLOBALS 4

/* [Note: Hugging Face names] How an architecture's tensors are stored in a Hugging Face
 * model directory (model_hf.c reads and writes them, knowing no architecture): one row
 * per pptrain tensor, naming its Hub tensor(s) and the transform between them.
 *  - ARCH_HF_AS_IS: the same matrix or vector. The engine's vocabulary tables ("wte",
 *    "lm_head", [Vp,C] in pptrain) are [V,C] on the Hub: the padded rows are dropped on
 *    export and zero on import.
 *  - ARCH_HF_TRANSPOSED: the Hub holds the transpose (GPT-2's Conv1D: c_attn.weight is
 *    [C,3C] for pptrain's qkvw [3C,C]).
 *  - ARCH_HF_STACKED: pptrain's rows are the Hub tensors' rows one after another, in
 *    hub[] order, part p having part_rows(d, row, p) rows (Llama: q_proj, k_proj and
 *    v_proj into qkvw; their biases likewise).
 * Hub names of a layer's tensor hold one %d, the layer. The rows are in the state dict's
 * order (the non-layer rows before the first layer row, each layer's rows, the rest):
 * the order an export writes them in, as save_pretrained does, which decides the shard
 * cuts. A tensor the Hub checkpoint of the base model lacks the prefix of (GPT-2's
 * files on the Hub were saved from GPT2Model: "h.0.attn.c_attn.weight") is found
 * without it too. Every tensor of the directory must be one the model uses: a row's, at a
 * layer below n_layers, or a buffer the table lists (the causal mask or RoPE's inv_freq
 * older files hold, transformers' _keys_to_ignore_on_load_unexpected), or the untied
 * lm_head of a tied model (transformers ties it over). Any other is refused, not skipped
 * with a warning as from_pretrained does: a trainer that skipped it would train and save
 * another model than the directory's (a config.json with fewer layers than the weights: a
 * truncated one), and nothing in what it writes would say so. */
enum { ARCH_HF_AS_IS, ARCH_HF_TRANSPOSED, ARCH_HF_STACKED };
#define ARCH_HF_PARTS 3

typedef struct {
    const char *tensor; /* a layer tensor ("qkvw", layer 1) or a global ("wte", "lm_head") */
    int layer;
    int transform;                  /* ARCH_HF_* */
    const char *hub[ARCH_HF_PARTS]; /* the Hub tensor(s); NULL after the last */
} ArchHfTensor;

typedef struct {
    const char *const *model_types; /* config.json's model_type values, NULL-terminated; the
                                       first is written on export */
    const char *architecture;       /* architectures[0] on export ("GPT2LMHeadModel") */
    const char *prefix;             /* the base model's ("transformer."): see the note */
    int tie_default;                /* tie_word_embeddings when config.json leaves it out
                                       (the model class's default) */
    int no_position_table;          /* 1: no tensor is max_position_embeddings long (RoPE),
                                       so model.max_seq_len may be set below it */
    const char *const *keys;        /* the model keys its config.json holds beyond the six
                                       every architecture's does (model_hf.c's k_keys:
                                       "model.n_kv_heads", ...), NULL-terminated; NULL: none */
    int ntensors;
    const ArchHfTensor *tensors; /* [ntensors], in the state dict's order */
    const char *const *buffers;  /* Hub names (a layer's with one %d) of tensors a file may
                                    hold that are no parameters, never read; NULL-terminated;
                                    NULL: none */
    /* Rows of part p of a stacked row (NULL when no row is stacked). */
    int (*part_rows)(const ModelDims *d, const ArchHfTensor *t, int p);
    /* Fill in what config.json leaves out as the model class does (its defaults and
     * __post_init__: LlamaConfig's num_key_value_heads = num_attention_heads, rms_norm_eps
     * 1e-6), each filled field's key saying so; and drop what the class ignores (a window
     * qwen2 does not use). NULL: nothing to fill. Called on every config.json read, before
     * config_check. */
    void (*config_complete)(HfConfig *c);
    /* What the architecture requires of config.json beyond the model keys the engine
     * merges (model_hf.c): GPT-2's activation, epsilon and MLP width; Llama's activation,
     * head size, biases and RoPE type. PP_EUSAGE naming c->path and the key. */
    int (*config_check)(const HfConfig *c, char *err, size_t errlen);
    /* Its fields of an export's config.json beyond model_type, architectures and the
     * engine's rows (vocab_size, hidden_size, layers, heads, key/value heads, MLP size,
     * positions, epsilon, RoPE, tie_word_embeddings: model_hf.c's k_keys), which it may
     * also take back (GPT-2: n_inner null). */
    void (*config_fill)(const ModelDims *d, HfConfig *c);
} ArchHf;

/* One layer's KV cache for decoding ([Note: KV cache] in backend.h, [Note: decoding] in
 * decode.h): its keys and values [NKV, cap, HS] (device), the positions it holds before
 * the call (the new ones are pos..), and its capacity. */
typedef struct {
    float *k, *v;
    int pos, cap;
} ArchKv;

/* [Note: Arch table] An architecture is this table of constants and functions; the
 * engine (model.c) holds a layer's parameters as nlayer_params float pointers, its
 * saved activations as nacts void pointers, its W state as nws, the head's as nhead
 * and the backward's scratch as nscratch, every one sized and typed by the table, and
 * calls the table's functions on them. The vocabulary tables are the engine's, being
 * every decoder LM's: "wte" [Vp,C] on the first stage and the head, "wte" again when
 * tied (ModelDims.tied) or "lm_head" [Vp,C] on the last stage, with the tied gradient's
 * fold and all-reduce, the logits buffer, the chunked loss (model_head_loss) and the
 * stage boundary [N,C] (model_boundary_elems: the residual type forward, fp32 back).
 * Functions take the model for its backend, sizes (B, T, d), parameters (Model.wte, .head,
 * .gp[k], .lp) and buffers (.bufs[k], .scratch); p / g are a layer's parameter / gradient
 * pointers, acts its activations, ws its W state, in the table's order.
 *
 * How a Llama block fits (llama.c), with no change to the runtime or the schedules and
 * one to the engine, the constants set (ModelDims has its NKV, F, eps and RoPE; the
 * backend has the ops, backend.h: rmsnorm_*, rope_*, swiglu_*, attention_* with NKV kv
 * heads, encoder_* with no wpe):
 *  - RMSNorm: a norm with a weight only. The layer lists "ln1w" and "ln2w" and no bias,
 *    the globals "lnfw" (ARCH_LAST) alone; the activations keep rstd [N] and no mean;
 *    the head's set is lnf, its rstd and dlnf; head_forward / head_backward call the
 *    RMSNorm ops.
 *  - RoPE on q and k: inside layer_forward, between the qkv matmul and attention (an op
 *    on q and k in place, so acts' qkv is the rotated one attention reads); its
 *    backward in layer_backward, on dq and dk after attention_backward, before the qkv
 *    matmul's. The angles are position x inv_freq[HS/2], which rope_theta and any
 *    llama3 scaling give: a model-wide constant, the one thing the engine gained for
 *    Llama (the ARCH_CONST set: nconst fp32 buffers of elems() floats that model_init
 *    allocates and fills once through const_fill, Model.consts; not parameters, never
 *    written again, not in a checkpoint, not counted in the memory plan, as the scratch
 *    is not).
 *  - SwiGLU: three matrices, "gatew" [F,C], "upw" [F,C], "downw" [C,F] in
 *    layer_params, shaped by shape() from ffn_dim; acts declares the gate and up
 *    pre-activations (fp32) and the gated product (operand), with keep / work saying
 *    that selective drops the product and layer_recompute remakes it from the kept
 *    two; ws declares d(gate) and d(up); costs counts 3 C F per token.
 *  - Grouped-query attention: k and v narrower than q. The qkv matrix is [(NH + 2 NKV)
 *    HS, C] (shape()), the qkv activation and its W state [N, (NH + 2 NKV) HS]
 *    (elems()), the attention call passes NKV; the saved attention state stays the
 *    backend's (attention_saved_floats, per query head).
 *  - No biases: the tables list none, and the arch passes NULL biases to the matmuls
 *    (matmul_forward takes b NULL; matmul_backward skips a NULL db). qwen2's table adds
 *    "qkvb" [(NH + 2 NKV) HS] last, which the same functions pass where it is listed.
 *  - An untied head: ModelDims.tied 0, which the engine already builds ("lm_head" on
 *    the last stage, its own gradient and optimizer state; no tied fold or all-reduce).
 *    Llama has no wpe: embed_forward / embed_backward pass wpe, dwpe NULL.
 *  - Weight files: import_llmc / export_llmc NULL (llm.c's format is GPT-2's; the
 *    engine says so); Hugging Face's through the hf table ([Note: Hugging Face names]):
 *    q_proj, k_proj and v_proj stacked into qkvw (ARCH_HF_STACKED, part_rows NH HS,
 *    NKV HS, NKV HS; no permutation: pptrain's RoPE is Hugging Face's rotate-half) and
 *    qwen2's biases into qkvb, the rest as is, one table per model type (llama, qwen2,
 *    mistral). */
struct Arch {
    const char *name; /* model.arch */

    /* ---- tensors ---- */
    int nlayer_params;              /* tensors per layer, in the flat buffer's order */
    const ArchTensor *layer_params; /* [nlayer_params] */
    int nglobals;                   /* tensors outside the layers besides wte and the head */
    const ArchTensor *globals;      /* [nglobals]: after wte on the first stage, before the
                                       head on the last, in this order */
    /* rows and cols (0: a vector) of layer tensor k (global 0) or global k (global 1) */
    void (*shape)(const ModelDims *d, int global, int k, int shape[2]);
    /* What the architecture requires of d beyond the engine's checks (model_dims_check). */
    int (*dims_check)(const ModelDims *d, char *err, size_t errlen);

    /* ---- buffers ---- */
    int nacts;            /* a layer's saved activations ... */
    const ArchBuf *acts;  /* [nacts] */
    int act_out;          /* ... of which the layer's output, [N,C] (residual): the next
                             layer's input and the chunk's; kept under every mode */
    int nhead;            /* the head's saved activations */
    const ArchBuf *head;  /* [nhead] */
    int head_dout;        /* of which d(loss)/d(the head matmul's input), [N,C] (operand) */
    int nws;              /* a layer's W state */
    const ArchBuf *ws;    /* [nws] */
    int nscratch;         /* the backward's scratch (Model.bufs) */
    const ArchBuf *scratch; /* [nscratch] */
    int nconst;           /* model-wide constants (Model.consts), fp32 */
    const ArchBuf *consts;  /* [nconst] */
    /* Elements of buffer k of a set (ARCH_*) for N tokens; att: the floats attention
     * saves (be->attention_saved_floats). */
    size_t (*elems)(const ModelDims *d, int set, int k, size_t N, size_t att);
    /* Constant k's values, elems(d, ARCH_CONST, k, ...) floats, into host memory. */
    void (*const_fill)(const ModelDims *d, int k, float *host);

    /* ---- W state ([Note: W state] in model.h) ---- */
    /* Whether W state member k of a layer that keeps its activations lives in them
     * (ws_place puts it there; it has no memory of its own). ob: operand bytes. */
    int (*ws_in_acts)(const ModelDims *d, size_t N, size_t att, size_t ob, int k);
    /* Point the members ws_in_acts names into a kept layer's activations acts. */
    void (*ws_place)(const Model *m, void *const *acts, void **ws);
    /* Point ws at scratch for an input half whose W state goes into its layer's
     * activations: the engine copies it there after the layer (which still reads them). */
    void (*ws_stage)(const Model *m, void **ws);

    /* ---- compute (op pairs: STYLE.md habit 3) ---- */
    /* The residual stream (x, out below) is of the backend's residual type ([Note: residual
     * stream type] in backend.h); its gradients (dout, dres, dx) are fp32. */
    /* out [N,C] = the embedding of tokens [N]; its backward adds d(wte) (and the arch's
     * own first-stage gradients) from dout [N,C]: weight gradient only. */
    void (*embed_forward)(const Model *m, void *out, const int *tokens);
    void (*embed_backward)(const Model *m, const float *dout, const int *tokens);
    /* One layer, x [N,C] in, acts[act_out] out. */
    void (*layer_forward)(const Model *m, void *const *acts, float *const *p, const void *x);
    /* dres [N,C]: in d(layer output), out d(layer input). g NULL: the input half, keeping
     * each op's output gradient in ws for layer_backward_weight; else the fused backward
     * (ws NULL), weight gradients added into g. Both give dres by the same calls (up to
     * where dres's operand copy is made). chain: ARCH_DRES_OP_* (the fused backward only;
     * 0 otherwise), [Note: residual gradient's operand]. */
    void (*layer_backward)(const Model *m, float *const *g, float *dres, void *const *acts,
                           float *const *p, const void *x, void *const *ws, int chain);
    /* The weight half: the fused backward's weight-gradient calls on ws's gradients. */
    void (*layer_backward_weight)(const Model *m, float *const *g, void *const *acts,
                                  float *const *p, const void *x, void *const *ws);
    /* Recompute what mode (PP_RECOMPUTE_*) dropped, by the forward's own calls: acts are
     * the slot's (dropped members point into the workspace work); returns the
     * activations the backward reads. weight_half: for layer_backward_weight only. */
    void *const *(*layer_recompute)(const Model *m, int mode, int weight_half, void *const *acts,
                                    void *const *work, float *const *p, const void *x);
    /* The head on x [N,C], the last layer's output: the final norm into h, then
     * model_head_loss (the loss and, with want_grad, h[head_dout] and d(head)). */
    void (*head_forward)(Model *m, void *const *h, const int *targets, const void *x, float dloss,
                         int want_grad, double *loss);
    /* From h[head_dout]: dx [N,C] OVERWRITTEN with d(x) (NULL: skipped) and, with
     * weights, the final norm's gradients added. chain: 0 or ARCH_DRES_OP_OUT (with dx and
     * weights), [Note: residual gradient's operand]. */
    void (*head_backward)(const Model *m, float *dx, int weights, void *const *h, const void *x,
                          int chain);

    /* ---- decoding ([Note: decoding] in decode.h): one sequence, n new positions ---- */
    /* out [n,C] = the embedding of tokens [n] at positions pos..pos+n-1. */
    void (*embed_decode)(const Model *m, void *out, const int *tokens, int pos, int n);
    /* One layer on x [n,C], the positions kv->pos.. of the sequence, into acts[act_out]
     * (acts: the set for at least n rows): layer_forward's calls at B 1, T n, but for
     * attention, which reads the earlier positions' keys and values from the layer's
     * cache and appends the new ones (kv_append, attention_decode). */
    void (*layer_decode)(const Model *m, void *const *acts, float *const *p, const void *x,
                         const ArchKv *kv, int n);
    /* The final norm of x [n,C] into the head's set h (for at least n rows), as
     * head_forward computes it; returns its output [n,C] (operand), the logits' input. */
    const void *(*head_norm)(const Model *m, void *const *h, const void *x, int n);

    /* ---- costs and files ---- */
    void (*costs)(const ModelDims *d, int T, ArchCosts *a); /* [Note: architecture costs] */
    /* llm.c's checkpoint (model_load_llmc / model_save_llmc); NULL: no such format */
    int (*import_llmc)(Model *m, const char *path, char *err, size_t errlen);
    int (*export_llmc)(const Model *m, const char *path, char *err, size_t errlen);
    /* Hugging Face model directories ([Note: Hugging Face names]); NULL: no such format */
    const ArchHf *hf;
};

extern const Arch arch_gpt2;    /* gpt2.c */
extern const Arch arch_llama;   /* llama.c: Llama's block */
extern const Arch arch_qwen2;   /* llama.c: the block with q/k/v biases */
extern const Arch arch_mistral; /* llama.c: the block (a sliding window covering the sequence) */

/* The architecture model.arch names ("gpt2", "llama", "qwen2", "mistral"), or NULL. */
const Arch *arch_find(const char *name);
/* The architecture whose Hugging Face model_types include `model_type`, or NULL; and the
 * model types known, "gpt2" or "gpt2, llama", for messages. */
const Arch *arch_find_hf(const char *model_type);
void arch_hf_names(char *buf, size_t n);

#endif
