/* gpt2.c — GPT-2's Arch table ([Note: Arch table] in arch.h): pre-LN blocks of causal
 * multi-head attention and a GELU-tanh MLP, learned positions, LayerNorm with biases;
 * its tensors, layer, embedding and head ops, the activations and W state they keep,
 * its costs, llm.c's fp32 checkpoint and its names in Hugging Face's GPT2LMHeadModel. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "common.h"
#include "model.h"

/* ---- tensors ---- */

/* Per-layer parameter kinds, in llm.c's order (DESIGN.md §6). */
enum {
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
    P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_NLAYER
};

/* One layer's parameters (or gradients): the engine's nlayer_params pointers into the
 * flat buffer (Model.lp, .lg), read as this struct. */
typedef struct {
    float *ln1w, *ln1b;         /* [C] */
    float *qkvw, *qkvb;         /* [3C,C], [3C] */
    float *attprojw, *attprojb; /* [C,C], [C] */
    float *ln2w, *ln2b;         /* [C] */
    float *fcw, *fcb;           /* [4C,C], [4C] */
    float *fcprojw, *fcprojb;   /* [C,4C], [C] */
} LayerParams;

static const ArchTensor layer_tensors[P_NLAYER] = {
    {"ln1w", ARCH_INIT_ONE, 0},    {"ln1b", ARCH_INIT_ZERO, 0}, {"qkvw", ARCH_INIT_NORMAL, 0},
    {"qkvb", ARCH_INIT_ZERO, 0},   {"attprojw", ARCH_INIT_PROJ, 0},
    {"attprojb", ARCH_INIT_ZERO, 0}, {"ln2w", ARCH_INIT_ONE, 0}, {"ln2b", ARCH_INIT_ZERO, 0},
    {"fcw", ARCH_INIT_NORMAL, 0},  {"fcb", ARCH_INIT_ZERO, 0},  {"fcprojw", ARCH_INIT_PROJ, 0},
    {"fcprojb", ARCH_INIT_ZERO, 0},
};

/* The globals besides wte and the head (Model.gp, .gg). */
enum { G_WPE, G_LNFW, G_LNFB, G_N };
static const ArchTensor globals[G_N] = {
    {"wpe", ARCH_INIT_NORMAL, ARCH_FIRST}, /* [maxT,C] */
    {"lnfw", ARCH_INIT_ONE, ARCH_LAST},    /* [C] */
    {"lnfb", ARCH_INIT_ZERO, ARCH_LAST},   /* [C] */
};

static void shape(const ModelDims *d, int global, int k, int s[2]) {
    static const int r[P_NLAYER] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1}; /* x C */
    static const int c[P_NLAYER] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0}; /* x C */
    if (global) {
        s[0] = k == G_WPE ? d->maxT : d->C;
        s[1] = k == G_WPE ? d->C : 0;
        return;
    }
    s[0] = r[k] * d->C;
    s[1] = c[k] * d->C;
}

static int dims_check(const ModelDims *d, char *err, size_t errlen) {
    if (d->C < 1 || d->C > INT_MAX / 4)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "C=%d: the channels must be in [1, %d] (fcw has 4C rows)", d->C,
                       INT_MAX / 4);
    if (d->C % d->NH)
        return pp_errf(err, errlen, PP_EUSAGE, "C=%d is not a multiple of NH=%d", d->C, d->NH);
    return PP_OK;
}

/* ---- buffers ---- */

/* One layer's saved activations for one microbatch (N = B*T rows), the engine's nacts
 * pointers read as this struct. The void * members hold the backend's operand type, or its
 * residual type (res2, res3: [Note: residual stream type] in backend.h). */
typedef struct {
    void *ln1;                  /* [N,C] (operand) */
    float *ln1_mean, *ln1_rstd; /* [N], [N] */
    void *qkv;                  /* [N,3C] (operand) */
    void *atty;                 /* [N,C] (operand) */
    float *att;                 /* [be->attention_saved_floats(B,T,NH)]: on the CPU the
                                   probabilities [B,NH,T,T] */
    void *res2;                 /* [N,C] (residual) after attention */
    void *ln2;                  /* [N,C] (operand) */
    float *ln2_mean, *ln2_rstd; /* [N], [N] */
    void *fch;                  /* [N,4C] (operand) before GELU ([Note: fused GELU]) */
    void *fch_gelu;             /* [N,4C] (operand) */
    void *res3;                 /* [N,C] (residual) layer output */
} LayerActs;

enum { A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT, A_RES2, A_LN2, A_LN2_MEAN, A_LN2_RSTD,
       A_FCH, A_GELU, A_RES3, A_N };
_Static_assert(sizeof(LayerActs) == A_N * sizeof(void *), "LayerActs: one pointer per A_ kind");
_Static_assert(offsetof(LayerActs, res3) == A_RES3 * sizeof(void *), "LayerActs: A_ order");

/* [Note: recompute] in model.h, GPT-2's part. Full keeps a layer's output res3 only and
 * recomputes the whole layer into the workspace. Selective drops the attention
 * probabilities (the [B,NH,T,T] term, which dominates at long T) and the GELU output
 * fch_gelu, and recomputes attention's forward on the kept qkv (its output into the
 * workspace's atty: the slot's atty stays as it was) and GELU on the kept pre-GELU fch
 * (or, where the backend's GELU runs in the fc GEMM, be->gelu_in_gemm, the fc matmul and
 * its GELU again: fch is rewritten with the bits it holds; a recomputing layer keeps its W
 * state apart, so fch is intact in the W half too).
 * (Dropping fch instead would save the same bytes but recompute the fc matmul, about a
 * third of the layer's forward; GELU's output is one elementwise pass. Under gelu_in_gemm
 * the matmul is recomputed anyway, and the kept fch is memory the rerun does not need:
 * dropping it there too is left for later, cuda/NOTES.md.) */
#define K_ALL (ARCH_SEL | ARCH_FULL)
static const ArchBuf acts[A_N] = {
    {"ln1", 1, ARCH_SEL, ARCH_FULL, 0},
    {"ln1_mean", 0, ARCH_SEL, ARCH_FULL, 0},
    {"ln1_rstd", 0, ARCH_SEL, ARCH_FULL, 0},
    {"qkv", 1, ARCH_SEL, ARCH_FULL, 0},
    {"atty", 1, ARCH_SEL, K_ALL, 0},
    {"att", 0, 0, K_ALL, 0},
    {"res2", ARCH_RESIDUAL, ARCH_SEL, ARCH_FULL, 0},
    {"ln2", 1, ARCH_SEL, ARCH_FULL, 0},
    {"ln2_mean", 0, ARCH_SEL, ARCH_FULL, 0},
    {"ln2_rstd", 0, ARCH_SEL, ARCH_FULL, 0},
    {"fch", 1, ARCH_SEL, ARCH_FULL, 0},
    {"fch_gelu", 1, 0, K_ALL, 0},
    {"res3", ARCH_RESIDUAL, K_ALL, ARCH_FULL, 0},
};

/* The head's saved activations: the final LayerNorm's output and statistics, and
 * d(loss)/d(lnf output), computed in the forward ([Note: fused head] in model.c). */
enum { H_LNF, H_MEAN, H_RSTD, H_DLNF, H_N };
static const ArchBuf head[H_N] = {
    {"lnf", 1, 0, 0, 0}, {"lnf_mean", 0, 0, 0, 0}, {"lnf_rstd", 0, 0, 0, 0}, {"dlnf", 1, 0, 0, 0},
};

/* [Note: GPT-2 W state] ([Note: W state] in model.h) What the weight half reads besides
 * the slot: the output gradient of each matmul and LayerNorm of a layer, 11*N*C floats.
 *
 * Where it lives. Once the input half is through a layer, three of the layer's saved
 * activations are dead: W reads neither the attention probabilities, nor qkv, nor the
 * pre-GELU fch. So a layer that keeps its activations (every layer without recompute,
 * and those past pipeline.recompute_layers) stores dqkv in qkv, dfch in fch and the four
 * [N,C] douts in the probabilities: the input half computes them in scratch (dkeep and
 * the fused backward's buffers, ws_stage) and the engine moves them there at the end of
 * the layer. Only the four [N,C] douts need memory of their own, and only where the
 * probabilities are smaller than the four (4*N*C operands, model_ws_four_fit: at fp32
 * attention_saved_floats' NH*T < 4C, at bf16 NH*T < 2C; or a flash attention). A layer that
 * recomputes keeps all 11*N*C in its W state set. */
typedef struct {
    void *dres3; /* [N,C] d(layer output): fcproj's dout (operand) */
    void *dfch;  /* [N,4C] d(fch): fc's dout (operand) */
    void *dln2;  /* [N,C] d(ln2 output) (operand) */
    void *dres2; /* [N,C] d(res2): attproj's dout (operand) */
    void *dqkv;  /* [N,3C] qkv's dout (operand) */
    void *dln1;  /* [N,C] d(ln1 output) (operand) */
} LayerWState;

enum { W_DRES3, W_DFCH, W_DLN2, W_DRES2, W_DQKV, W_DLN1, W_N };
_Static_assert(sizeof(LayerWState) == W_N * sizeof(void *), "LayerWState: one pointer per W_ kind");
static const ArchBuf wstate[W_N] = {
    {"dres3", 1, 0, 0, 0}, {"dfch", 1, 0, 0, 0}, {"dln2", 1, 0, 0, 0},
    {"dres2", 1, 0, 0, 0}, {"dqkv", 1, 0, 0, 0}, {"dln1", 1, 0, 0, 0},
};

/* The backward's scratch (Model.bufs): the fused backward's douts, the residual
 * gradient cast for a matmul (bf16 operands only: an fp32 operand is the gradient
 * itself), and dkeep, the input half's four [N,C] douts (operands, carved as
 * model_ws_four does) until they move into the layer.
 * (GELU's backward runs inside fcproj's: [Note: fused GELU] in backend.h; no [N,4C]
 * fp32 gradient between them.) */
enum { S_DMID, S_DQKV, S_DFCH, S_DRES, S_DKEEP, S_N };
static const ArchBuf scratch[S_N] = {
    {"dmid", 0, 0, 0, ARCH_ALWAYS},    /* [N,C]: d(ln2), d(atty), d(ln1) (operand) */
    {"dqkv", 1, 0, 0, ARCH_ALWAYS},    /* [N,3C] */
    {"dfch", 1, 0, 0, ARCH_ALWAYS},    /* [N,4C] */
    {"dres", 1, 0, 0, ARCH_CAST},      /* [N,C] */
    {"dkeep", 1, 0, 0, ARCH_WS_STAGE}, /* 4 x [N,C] */
};

static size_t elems(const ModelDims *d, int set, int k, size_t N, size_t att) {
    size_t C = d->C;
    /* per token, in C: 0 is one float a token (a norm's statistic), or att's own size */
    static const size_t act_w[A_N] = {1, 0, 0, 3, 1, 0, 1, 1, 0, 0, 4, 4, 1}; /* x C */
    static const size_t head_w[H_N] = {1, 0, 0, 1};                             /* x C */
    static const size_t ws_w[W_N] = {1, 4, 1, 1, 3, 1};                         /* x C */
    static const size_t scratch_w[S_N] = {1, 3, 4, 1, 4};                       /* x C */
    switch (set) {
    case ARCH_ACTS: return k == A_ATT ? att : act_w[k] ? N * act_w[k] * C : N;
    case ARCH_HEAD: return head_w[k] ? N * head_w[k] * C : N;
    case ARCH_WS: return N * ws_w[k] * C;
    default: return k == S_DKEEP ? model_ws_four_elems(N, C) : N * scratch_w[k] * C;
    }
}

static int ws_in_acts(const ModelDims *d, size_t N, size_t att, size_t ob, int k) {
    if (k == W_DFCH || k == W_DQKV) return 1; /* in fch and qkv */
    return model_ws_four_fit(att, N, d->C, ob);
}

static void ws_place(const Model *m, void *const *acts_, void **ws_) {
    const LayerActs *la = (const LayerActs *)acts_;
    LayerWState *ws = (LayerWState *)ws_;
    size_t N = (size_t)m->B * m->T, ob = pp_dtype_bytes(m->be->operand);
    ws->dfch = la->fch;
    ws->dqkv = la->qkv;
    if (model_ws_four_fit(m->att_floats, N, m->d.C, ob))
        model_ws_four(m, la->att, &ws->dln2, &ws->dln1, &ws->dres3, &ws->dres2);
}

static void ws_stage(const Model *m, void **ws_) {
    LayerWState *ws = (LayerWState *)ws_;
    ws->dfch = m->bufs[S_DFCH];
    ws->dqkv = m->bufs[S_DQKV];
    model_ws_four(m, m->bufs[S_DKEEP], &ws->dln2, &ws->dln1, &ws->dres3, &ws->dres2);
}

/* ---- compute ---- */

static void embed_forward(const Model *m, void *out, const int *tokens) {
    m->be->encoder_forward(m->be, out, tokens, m->wte, m->gp[G_WPE], m->B, m->T, m->d.C);
}

static void embed_backward(const Model *m, const float *dout, const int *tokens) {
    m->be->encoder_backward(m->be, m->dwte, m->gg[G_WPE], dout, tokens, m->B, m->T, m->d.C);
}

/* The block on x [B*T,C]; with kv (decoding: B 1), attention on the layer's cache. */
static void block_forward(const Model *m, void *const *acts_, float *const *p_, const void *x,
                          int B, int T, const ArchKv *kv) {
    const Backend *be = m->be;
    const LayerActs *a = (const LayerActs *)acts_;
    const LayerParams *p = (const LayerParams *)p_;
    int N = B * T, C = m->d.C, NH = m->d.NH;
    be->layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
    be->matmul_operand_forward(be, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
    /* multi-head: as many kv heads as heads ([Note: grouped-query attention] in backend.h) */
    if (kv) { /* [Note: KV cache] in backend.h: no rotation (learned positions) */
        be->kv_append(be, kv->k, kv->v, a->qkv, NULL, kv->pos, T, NH, NH, C / NH, kv->cap);
        be->attention_decode(be, a->atty, a->qkv, kv->k, kv->v, kv->pos, T, NH, NH, C / NH,
                             kv->cap);
    } else {
        be->attention_forward(be, a->atty, a->att, a->qkv, B, T, NH, NH, C / NH);
    }
    /* res2 = x + attn(ln1(x)) */
    be->matmul_residual_forward(be, a->res2, x, a->atty, p->attprojw, p->attprojb, N, C, C);
    be->layernorm_forward(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C);
    /* fch = ln2 @ fcw^T + fcb, fch_gelu = gelu(fch) ([Note: fused GELU]) */
    be->matmul_gelu_forward(be, a->fch_gelu, a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
    /* res3 = res2 + mlp(ln2(res2)) */
    be->matmul_residual_forward(be, a->res3, a->res2, a->fch_gelu, p->fcprojw, p->fcprojb, N,
                                4 * C, C);
}

static void layer_forward(const Model *m, void *const *a, float *const *p, const void *x) {
    block_forward(m, a, p, x, m->B, m->T, NULL);
}

static void layer_decode(const Model *m, void *const *a, float *const *p, const void *x,
                         const ArchKv *kv, int n) {
    block_forward(m, a, p, x, 1, n, kv);
}

/* The positions' rows of wpe: row i of the n is position pos + i (encoder_forward's
 * n mod T with T = n). */
static void embed_decode(const Model *m, void *out, const int *tokens, int pos, int n) {
    m->be->encoder_forward(m->be, out, tokens, m->wte, m->gp[G_WPE] + (size_t)pos * m->d.C, 1, n,
                           m->d.C);
}

/* Fused (g, ws NULL): ws is the model's scratch with dres3 and dres2 NULL, so the
 * residual gradient goes to the matmuls through bufs[S_DRES]. Input half (g NULL): ws
 * keeps each op's output gradient for layer_backward_weight. One body for both, so the
 * two compute dres by the same calls. */
static void layer_backward(const Model *m, float *const *g_, float *dres, void *const *acts_,
                           float *const *p_, const void *x, void *const *ws_, int chain) {
    const Backend *be = m->be;
    const LayerActs *a = (const LayerActs *)acts_;
    const LayerParams *p = (const LayerParams *)p_, none = {0};
    const LayerParams *g = g_ ? (const LayerParams *)g_ : &none; /* NULL: the ops skip them */
    const LayerWState fused = {NULL, m->bufs[S_DFCH], m->bufs[S_DMID], NULL, m->bufs[S_DQKV],
                               m->bufs[S_DMID]};
    const LayerWState *ws = ws_ ? (const LayerWState *)ws_ : &fused;
    int B = m->B, T = m->T, N = B * T, C = m->d.C, NH = m->d.NH;
    size_t NC = (size_t)N * C;
    float *dmid = m->bufs[S_DMID];
    void *cast = m->bufs[S_DRES];
    /* [Note: operand activations] in backend.h: an fp32 operand is dres itself */
    void *dr = ws->dres3 ? ws->dres3 : cast ? cast : dres;
    PP_CHECK(!chain || !ws_); /* [Note: residual gradient's operand] in arch.h */
    if (dr != dres && !(chain & ARCH_DRES_OP_IN)) be->to_operand(be, dr, dres, NC);
    /* dfch = gelu'(fch) * (dres3 @ fcprojw); fcproj's weight gradients */
    be->matmul_gelu_backward(be, ws->dfch, g->fcprojw, g->fcprojb, dr, a->fch_gelu, p->fcprojw,
                             a->fch, N, 4 * C, C);
    /* d(ln2), which only LayerNorm's backward reads, at the operand type */
    be->matmul_operand_backward(be, ws->dln2, g->fcw, g->fcb, ws->dfch, a->ln2, p->fcw, N, C,
                                4 * C);
    /* the MLP branch's gradient joins the residual path: dres = d(res2), and its operand for
     * attproj's backward in the same pass (where that is not dres itself) */
    void *op = ws->dres2 ? ws->dres2 : cast;
    be->layernorm_backward(be, dres, op, g->ln2w, g->ln2b, ws->dln2, a->res2, a->ln2_mean,
                           a->ln2_rstd, p->ln2w, N, C, m->scratch);
    dr = op ? op : dres;
    /* d(atty), which only attention's backward reads, at the operand type */
    be->matmul_operand_backward(be, dmid, g->attprojw, g->attprojb, dr, a->atty, p->attprojw, N, C,
                                C);
    be->attention_backward(be, ws->dqkv, dmid, a->qkv, a->atty, a->att, B, T, NH, NH, C / NH,
                           m->scratch);
    be->matmul_operand_backward(be, ws->dln1, g->qkvw, g->qkvb, ws->dqkv, a->ln1, p->qkvw, N, C,
                                3 * C);
    /* the attention branch's gradient joins too: dres = d(x), and its operand for the layer
     * below when the chain asks */
    be->layernorm_backward(be, dres, chain & ARCH_DRES_OP_OUT ? cast : NULL, g->ln1w, g->ln1b,
                           ws->dln1, x, a->ln1_mean, a->ln1_rstd, p->ln1w, N, C, m->scratch);
}

/* The weight half: the same weight-gradient calls as the fused layer_backward, each on
 * the output gradient the input half kept in ws. */
static void layer_backward_weight(const Model *m, float *const *g_, void *const *acts_,
                                  float *const *p_, const void *x, void *const *ws_) {
    const Backend *be = m->be;
    const LayerActs *a = (const LayerActs *)acts_;
    const LayerParams *p = (const LayerParams *)p_, *g = (const LayerParams *)g_;
    const LayerWState *ws = (const LayerWState *)ws_;
    int N = m->B * m->T, C = m->d.C;
    be->matmul_backward(be, NULL, g->fcprojw, g->fcprojb, ws->dres3, a->fch_gelu, p->fcprojw, N,
                        4 * C, C);
    be->matmul_backward(be, NULL, g->fcw, g->fcb, ws->dfch, a->ln2, p->fcw, N, C, 4 * C);
    be->layernorm_backward(be, NULL, NULL, g->ln2w, g->ln2b, ws->dln2, a->res2, a->ln2_mean,
                           a->ln2_rstd, p->ln2w, N, C, m->scratch);
    be->matmul_backward(be, NULL, g->attprojw, g->attprojb, ws->dres2, a->atty, p->attprojw, N,
                        C, C);
    be->matmul_backward(be, NULL, g->qkvw, g->qkvb, ws->dqkv, a->ln1, p->qkvw, N, C, 3 * C);
    be->layernorm_backward(be, NULL, NULL, g->ln1w, g->ln1b, ws->dln1, x, a->ln1_mean, a->ln1_rstd,
                           p->ln1w, N, C, m->scratch);
}

static void *const *layer_recompute(const Model *m, int mode, int weight_half, void *const *acts_,
                                    void *const *work, float *const *p, const void *x) {
    const Backend *be = m->be;
    const LayerActs *la = (const LayerActs *)acts_, *w = (const LayerActs *)work;
    int B = m->B, T = m->T, N = B * T, C = m->d.C, NH = m->d.NH;
    if (mode == PP_RECOMPUTE_FULL) {
        layer_forward(m, work, p, x);
        return work;
    }
    if (!weight_half) /* W does not read the probabilities */
        be->attention_forward(be, w->atty, la->att, la->qkv, B, T, NH, NH, C / NH);
    if (be->gelu_in_gemm) { /* [Note: fused GELU]: the op again (fch rewritten, same bits) */
        const LayerParams *lp = (const LayerParams *)p;
        be->matmul_gelu_forward(be, la->fch_gelu, la->fch, la->ln2, lp->fcw, lp->fcb, N, C, 4 * C);
    } else {
        be->gelu_forward(be, la->fch_gelu, la->fch, (size_t)N * 4 * C);
    }
    return acts_;
}

static const void *head_norm(const Model *m, void *const *h, const void *x, int N) {
    m->be->layernorm_forward(m->be, h[H_LNF], h[H_MEAN], h[H_RSTD], x, m->gp[G_LNFW], m->gp[G_LNFB],
                             N, m->d.C);
    return h[H_LNF];
}

static void head_forward(Model *m, void *const *h, const int *targets, const void *x, float dloss,
                         int want_grad, double *loss) {
    head_norm(m, h, x, m->B * m->T);
    model_head_loss(m, h[H_LNF], h[H_DLNF], targets, dloss, want_grad, loss);
}

static void head_backward(const Model *m, float *dx, int weights, void *const *h, const void *x,
                          int chain) {
    const Backend *be = m->be;
    int N = m->B * m->T, C = m->d.C;
    void *op = chain & ARCH_DRES_OP_OUT ? m->bufs[S_DRES] : NULL; /* the top layer's cast */
    if (dx) be->zero(be, dx, (size_t)N * C * sizeof(float)); /* layernorm_backward adds */
    be->layernorm_backward(be, dx, op, weights ? m->gg[G_LNFW] : NULL,
                           weights ? m->gg[G_LNFB] : NULL, h[H_DLNF], x, h[H_MEAN], h[H_RSTD],
                           m->gp[G_LNFW], N, C, m->scratch);
}

/* ---- costs ([Note: architecture costs] in arch.h) ---- */

static void costs(const ModelDims *d, int T, ArchCosts *a) {
    double C = d->C, Vp = d->Vp;
    a->layer_params = 12.0 * C * C + 13.0 * C; /* qkv, attproj, fc, fcproj; 13 C of biases, norms */
    a->embed_params = (Vp + d->maxT) * C;
    a->head_params = Vp * C + 2.0 * C; /* its matrix (tied: its wte copy), the final norm */
    a->layer_flops = 24.0 * C * C + 4.0 * T * C; /* the four matmuls, attention's QK^T and PV */
    a->embed_flops = C;                          /* a gather and an add */
    a->head_flops = 2.0 * Vp * C;                /* the logits */
}

/* ---- llm.c fp32 checkpoint (DESIGN.md §6) ---- */

#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3

/* Read n floats at byte offset off of f into device dst, through the host buffer. */
static int read_at(const Model *m, FILE *f, long off, float *dst, size_t n, float *host) {
    if (fseek(f, off, SEEK_SET) != 0 || fread(host, sizeof(float), n, f) != n) return 0;
    m->be->to_device(m->be, dst, host, n * sizeof(float));
    m->be->wait(m->be); /* host is reused for the next tensor */
    return 1;
}

/* Layer l's tensor k of params (grads: lg). */
#define LP(m, l, k) ((m)->lp[(size_t)(l) * P_NLAYER + (k)])

static int import_llmc(Model *m, const char *path, char *err, size_t errlen) {
    const ModelDims *d = &m->d;
    int h[256];
    struct stat st;
    int fd = pp_open_regular(path, &st); /* a FIFO must not block, a directory is named */
    if (fd == -2)
        return pp_errf(err, errlen, PP_EUSAGE, "model.init_from: '%s' is %s, not a regular file: "
                       "point it at an llm.c fp32 GPT-2 checkpoint (a .bin file)", path,
                       pp_file_kind(st.st_mode));
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return pp_errf(err, errlen, PP_EUSAGE, "model.init_from: cannot open '%s': %m", path);
    }
    if (fread(h, sizeof(int), 256, f) != 256) {
        fclose(f);
        return pp_errf(err, errlen, PP_EUSAGE, "%s: shorter than the 1024-byte llm.c header", path);
    }
    if (h[0] != LLMC_MAGIC || h[1] != LLMC_VERSION) {
        fclose(f);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: not an llm.c fp32 GPT-2 checkpoint (magic %d version %d, expected %d "
                       "version %d; bf16 files are version 5 and are not supported)",
                       path, h[0], h[1], LLMC_MAGIC, LLMC_VERSION);
    }
    int fT = h[2], fV = h[3], fL = h[4], fNH = h[5], fC = h[6], fVp = h[7];
    if (fV != d->V || fL != d->L || fNH != d->NH || fC != d->C || fT < d->maxT || fVp < fV) {
        fclose(f);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: model shape V=%d Vp=%d L=%d NH=%d C=%d maxT=%d does not match the "
                       "config's V=%d L=%d NH=%d C=%d maxT=%d (maxT may be larger in the file, and "
                       "Vp >= V)",
                       path, fV, fVp, fL, fNH, fC, fT, d->V, d->L, d->NH, d->C, d->maxT);
    }
    size_t C = fC, L = fL;
    size_t expect =
        1024 + 4 * ((size_t)fVp * C + (size_t)fT * C + L * (12 * C * C + 13 * C) + 2 * C);
    if (fseek(f, 0, SEEK_END) != 0 || (size_t)ftell(f) != expect) {
        long got = ftell(f);
        fclose(f);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: file has %ld bytes, its header implies %zu (truncated?)", path, got,
                       expect);
    }
    /* File layout: wte[Vp,C], wpe[maxT,C], then each per-layer kind stacked over L,
     * then lnfw, lnfb. */
    long off = 1024, ok = 1;
    float *host = pp_malloc(model_largest_tensor(m) * sizeof(float));
    if (m->wte) ok &= read_at(m, f, off, m->wte, (size_t)d->V * C, host);
    if (m->head && !d->tied) ok &= read_at(m, f, off, m->head, (size_t)d->V * C, host);
    off += 4L * fVp * C;
    if (m->gp[G_WPE]) ok &= read_at(m, f, off, m->gp[G_WPE], (size_t)d->maxT * C, host);
    off += 4L * fT * C;
    for (int k = 0; k < P_NLAYER; k++) {
        int s[2];
        shape(d, 0, k, s);
        size_t n = (size_t)s[0] * (s[1] ? s[1] : 1);
        for (int l = 0; l < fL; l++)
            if (LP(m, l, k)) ok &= read_at(m, f, off + 4L * l * n, LP(m, l, k), n, host);
        off += 4L * fL * n;
    }
    if (m->gp[G_LNFW])
        ok &= read_at(m, f, off, m->gp[G_LNFW], C, host) &&
              read_at(m, f, off + 4L * C, m->gp[G_LNFB], C, host);
    free(host);
    fclose(f);
    if (!ok) return pp_errf(err, errlen, PP_ERUNTIME, "%s: read failed: %m", path);
    return PP_OK;
}

/* Write n floats of device src to f, through the host buffer (a failed write is
 * reported by pp_file_commit). */
static void write_from(const Model *m, FILE *f, const float *src, size_t n, float *host) {
    m->be->to_host(m->be, host, src, n * sizeof(float));
    m->be->wait(m->be);
    fwrite(host, sizeof(float), n, f);
}

static int export_llmc(const Model *m, const char *path, char *err, size_t errlen) {
    const ModelDims *d = &m->d;
    for (int l = 0; l < d->L; l++)
        if (!LP(m, l, P_QKVW))
            return pp_errf(err, errlen, PP_ERUNTIME,
                           "model_save_llmc needs every layer; layer %d is not held", l);
    if (!m->wte || !m->gp[G_WPE] || !m->gp[G_LNFW])
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "model_save_llmc needs the embeddings and the final norm");
    if (!d->tied)
        return pp_errf(err, errlen, PP_EUSAGE, "llm.c's format has no separate lm_head: untied "
                       "embeddings (model.tie_embeddings: false) cannot be written to %s", path);
    PPFile pf; /* [Note: atomic file writes] in common.c */
    int rc = pp_file_create(&pf, path, NULL, err, errlen);
    if (rc != PP_OK) return rc;
    FILE *f = pf.f;
    int h[256] = {LLMC_MAGIC, LLMC_VERSION, d->maxT, d->V, d->L, d->NH, d->C, d->Vp};
    size_t C = d->C;
    float *host = pp_malloc(model_largest_tensor(m) * sizeof(float));
    fwrite(h, sizeof h, 1, f);
    write_from(m, f, m->wte, (size_t)d->Vp * C, host);
    write_from(m, f, m->gp[G_WPE], (size_t)d->maxT * C, host);
    for (int k = 0; k < P_NLAYER; k++) {
        int s[2];
        shape(d, 0, k, s);
        size_t n = (size_t)s[0] * (s[1] ? s[1] : 1);
        for (int l = 0; l < d->L; l++) write_from(m, f, LP(m, l, k), n, host);
    }
    write_from(m, f, m->gp[G_LNFW], C, host);
    write_from(m, f, m->gp[G_LNFB], C, host);
    free(host);
    return pp_file_commit(&pf, err, errlen); /* fails on any failed fwrite above */
}

/* ---- Hugging Face's GPT2LMHeadModel ([Note: Hugging Face names] in arch.h) ---- */

/* transformers' modeling_gpt2.py: the matrices are Conv1D, y = x W + b with W [in, out],
 * the transpose of pptrain's [out, in]; attn.bias / attn.masked_bias (the causal mask,
 * a buffer in files saved before transformers 4.x made it non-persistent) are not
 * parameters and are neither read nor written; lm_head.weight is wte's when tied, left
 * out of the file by save_pretrained. */
#define H "transformer.h.%d."
static const ArchHfTensor hf_tensors[] = {
    {"wte", 0, ARCH_HF_AS_IS, {"transformer.wte.weight"}},
    {"wpe", 0, ARCH_HF_AS_IS, {"transformer.wpe.weight"}},
    {"ln1w", 1, ARCH_HF_AS_IS, {H "ln_1.weight"}},
    {"ln1b", 1, ARCH_HF_AS_IS, {H "ln_1.bias"}},
    {"qkvw", 1, ARCH_HF_TRANSPOSED, {H "attn.c_attn.weight"}},
    {"qkvb", 1, ARCH_HF_AS_IS, {H "attn.c_attn.bias"}},
    {"attprojw", 1, ARCH_HF_TRANSPOSED, {H "attn.c_proj.weight"}},
    {"attprojb", 1, ARCH_HF_AS_IS, {H "attn.c_proj.bias"}},
    {"ln2w", 1, ARCH_HF_AS_IS, {H "ln_2.weight"}},
    {"ln2b", 1, ARCH_HF_AS_IS, {H "ln_2.bias"}},
    {"fcw", 1, ARCH_HF_TRANSPOSED, {H "mlp.c_fc.weight"}},
    {"fcb", 1, ARCH_HF_AS_IS, {H "mlp.c_fc.bias"}},
    {"fcprojw", 1, ARCH_HF_TRANSPOSED, {H "mlp.c_proj.weight"}},
    {"fcprojb", 1, ARCH_HF_AS_IS, {H "mlp.c_proj.bias"}},
    {"lnfw", 0, ARCH_HF_AS_IS, {"transformer.ln_f.weight"}},
    {"lnfb", 0, ARCH_HF_AS_IS, {"transformer.ln_f.bias"}},
    {"lm_head", 0, ARCH_HF_AS_IS, {"lm_head.weight"}},
};
static const char *const hf_buffers[] = {H "attn.bias", H "attn.masked_bias", NULL};
#undef H

/* What pptrain's GPT-2 block fixes: GELU's tanh form (transformers' gelu_new, and
 * gelu_pytorch_tanh, the same function), LayerNorm's epsilon 1e-5 (backend_cpu.c's
 * LN_EPS), the MLP's 4C width (n_inner null) and attention scaled by 1/sqrt(head size)
 * alone (scale_attn_weights true, scale_attn_by_inverse_layer_idx false). */
static int hf_config_check(const HfConfig *c, char *err, size_t errlen) {
    const char *act = c->hidden_act.present ? c->hidden_act.value : "gelu_new";
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: %s \"%s\" is not supported: pptrain's GPT-2 uses GELU's tanh form "
                       "(gelu_new or gelu_pytorch_tanh)",
                       c->path, c->hidden_act.key, act);
    if (c->norm_eps.present && (float)c->norm_eps.value != 1e-5f)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: %s %g is not supported: pptrain's GPT-2 LayerNorm uses 1e-05", c->path,
                       c->norm_eps.key, c->norm_eps.value);
    int64_t four_c; /* config.json's int64: 4 x it may overflow */
    if (c->intermediate_size.present &&
        (__builtin_mul_overflow(c->hidden_size.value, 4, &four_c) ||
         c->intermediate_size.value != four_c))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: %s %lld is not supported: pptrain's GPT-2 MLP is 4 x %s = %.0f wide "
                       "(n_inner null)",
                       c->path, c->intermediate_size.key, (long long)c->intermediate_size.value,
                       c->hidden_size.key ? c->hidden_size.key : "n_embd",
                       4.0 * (double)c->hidden_size.value);
    if (c->scale_attn_weights.present && !c->scale_attn_weights.value)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: scale_attn_weights false is not supported: pptrain's GPT-2 scales "
                       "attention by 1/sqrt(head size)",
                       c->path);
    if (c->scale_attn_by_inverse_layer_idx.present && c->scale_attn_by_inverse_layer_idx.value)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: scale_attn_by_inverse_layer_idx true is not supported: pptrain's "
                       "GPT-2 scales attention by 1/sqrt(head size) alone",
                       c->path);
    return PP_OK;
}

static void hf_config_fill(const ModelDims *d, HfConfig *c) {
    c->hidden_act.present = 1;
    snprintf(c->hidden_act.value, sizeof c->hidden_act.value, "gelu_new");
    c->norm_eps = (HfConfigReal){1, NULL, 1e-5};
}

static const char *const hf_types[] = {"gpt2", NULL};
static const ArchHf hf = {
    .model_types = hf_types,
    .architecture = "GPT2LMHeadModel",
    .prefix = "transformer.",
    .tie_default = 1, /* GPT2Config has no tie_word_embeddings: PretrainedConfig's true */
    .ntensors = sizeof hf_tensors / sizeof hf_tensors[0],
    .tensors = hf_tensors,
    .buffers = hf_buffers,
    .config_check = hf_config_check,
    .config_fill = hf_config_fill,
};

const Arch arch_gpt2 = {
    .name = "gpt2",
    .nlayer_params = P_NLAYER,
    .layer_params = layer_tensors,
    .nglobals = G_N,
    .globals = globals,
    .shape = shape,
    .dims_check = dims_check,
    .nacts = A_N,
    .acts = acts,
    .act_out = A_RES3,
    .nhead = H_N,
    .head = head,
    .head_dout = H_DLNF,
    .nws = W_N,
    .ws = wstate,
    .nscratch = S_N,
    .scratch = scratch,
    .elems = elems,
    .ws_in_acts = ws_in_acts,
    .ws_place = ws_place,
    .ws_stage = ws_stage,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .layer_forward = layer_forward,
    .layer_backward = layer_backward,
    .layer_backward_weight = layer_backward_weight,
    .layer_recompute = layer_recompute,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .embed_decode = embed_decode,
    .layer_decode = layer_decode,
    .head_norm = head_norm,
    .costs = costs,
    .import_llmc = import_llmc,
    .export_llmc = export_llmc,
    .hf = &hf,
};
