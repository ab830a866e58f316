/* llama.c — Llama's Arch table ([Note: Arch table] in arch.h): pre-norm blocks of RMSNorm,
 * grouped-query causal attention with rotary position embeddings on q and k, and a
 * SwiGLU MLP, no biases, no position table; Hugging Face's LlamaForCausalLM
 * (transformers, models/llama/modeling_llama.py). The same table with q/k/v biases is
 * Qwen2's block (model.arch qwen2), and as it is Mistral's (model.arch mistral: its
 * sliding window must cover the sequence, config.c's check_arch). Its tensors, layer,
 * embedding and head ops, the activations and W state they keep, RoPE's frequencies, its
 * costs and its names in Hugging Face's LlamaForCausalLM, Qwen2ForCausalLM and
 * MistralForCausalLM. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "common.h"
#include "model.h"

/* ---- tensors ---- */

/* Per-layer parameter kinds, in the flat buffer's order; qwen2's table adds P_QKVB. */
enum { P_LN1W, P_QKVW, P_ATTPROJW, P_LN2W, P_GATEW, P_UPW, P_DOWNW, P_NLAYER, P_QKVB = P_NLAYER };

/* One layer's parameters (or gradients): the engine's nlayer_params pointers, read as
 * this struct. HS = C / NH channels a head, QKV = (NH + 2 NKV) HS. */
typedef struct {
    float *ln1w;        /* [C] */
    float *qkvw;        /* [QKV, C]: the NH q heads' rows, then the NKV k heads', then v's
                           (Hugging Face's q_proj, k_proj, v_proj stacked) */
    float *attprojw;    /* [C, NH HS] (o_proj) */
    float *ln2w;        /* [C] */
    float *gatew, *upw; /* [F, C] (gate_proj, up_proj) */
    float *downw;       /* [C, F] (down_proj) */
} LayerParams;

/* qwen2's q/k/v bias [QKV] of layer pointers p (params or grads), NULL where the table
 * has none (llama, mistral): never read past the table's nlayer_params pointers. */
static float *qkv_bias(const Model *m, float *const *p) {
    return p && m->arch->nlayer_params > P_QKVB ? p[P_QKVB] : NULL;
}

/* The matrices N(0, std); the two that write into the residual stream (attprojw, downw)
 * N(0, std / sqrt(2L)) as GPT-2's do: pptrain's choice (transformers' _init_weights
 * draws every Llama matrix with plain initializer_range). Norm weights 1, biases 0. */
static const ArchTensor layer_tensors[P_NLAYER + 1] = {
    {"ln1w", ARCH_INIT_ONE, 0},       {"qkvw", ARCH_INIT_NORMAL, 0},
    {"attprojw", ARCH_INIT_PROJ, 0},  {"ln2w", ARCH_INIT_ONE, 0},
    {"gatew", ARCH_INIT_NORMAL, 0},   {"upw", ARCH_INIT_NORMAL, 0},
    {"downw", ARCH_INIT_PROJ, 0},     {"qkvb", ARCH_INIT_ZERO, 0},
};

/* The globals besides wte and the head: the final norm (no wpe: positions are RoPE's). */
enum { G_LNFW, G_N };
static const ArchTensor globals[G_N] = {{"lnfw", ARCH_INIT_ONE, ARCH_LAST}}; /* [C] */

static int head_size(const ModelDims *d) { return d->C / d->NH; }
static int qkv_width(const ModelDims *d) { return (d->NH + 2 * d->NKV) * head_size(d); }

static void shape(const ModelDims *d, int global, int k, int s[2]) {
    int C = d->C;
    s[0] = C;
    s[1] = 0;
    if (global) return; /* lnfw */
    switch (k) {
    case P_QKVW:
        s[0] = qkv_width(d);
        s[1] = C;
        break;
    case P_ATTPROJW: s[1] = d->NH * head_size(d); break;
    case P_GATEW:
    case P_UPW:
        s[0] = d->F;
        s[1] = C;
        break;
    case P_DOWNW: s[1] = d->F; break;
    case P_QKVB: s[0] = qkv_width(d); break;
    }
}

static int dims_check(const ModelDims *d, char *err, size_t errlen) {
#define BAD(...) return pp_errf(err, errlen, PP_EUSAGE, __VA_ARGS__)
    const ModelRope *r = &d->rope;
    if (d->C < 1 || d->C > INT_MAX / 4) /* QKV <= 3C rows */
        BAD("C=%d: the channels must be in [1, %d]", d->C, INT_MAX / 4);
    if (d->C % d->NH) BAD("C=%d is not a multiple of NH=%d", d->C, d->NH);
    if (head_size(d) % 2) BAD("C/NH=%d: RoPE needs an even head size", head_size(d));
    if (d->NKV < 1 || d->NH % d->NKV)
        BAD("NKV=%d: the key/value heads must be >= 1 and divide NH=%d", d->NKV, d->NH);
    if (d->F < 1) BAD("F=%d: the MLP's hidden size must be >= 1", d->F);
    if (!(d->eps > 0) || !isfinite(d->eps)) BAD("eps=%g: the norm epsilon must be > 0", d->eps);
    if (!(r->theta > 0) || !isfinite(r->theta)) BAD("theta=%g: RoPE's base must be > 0", r->theta);
    if (r->llama3 && (!(r->factor > 0) || !(r->low_freq_factor > 0) ||
                      !(r->high_freq_factor > r->low_freq_factor) || r->original_max_seq_len < 1 ||
                      !isfinite(r->factor) || !isfinite(r->high_freq_factor)))
        BAD("llama3 RoPE scaling factor=%g low=%g high=%g orig=%d: needs factor > 0, 0 < low < "
            "high, orig >= 1",
            r->factor, r->low_freq_factor, r->high_freq_factor, r->original_max_seq_len);
    return PP_OK;
#undef BAD
}

/* ---- buffers ---- */

/* One layer's saved activations for one microbatch (N = B*T rows), the engine's nacts
 * pointers read as this struct. The void * members hold the backend's operand type, or its
 * residual type (res2, res3: [Note: residual stream type] in backend.h). */
typedef struct {
    void *ln1;        /* [N,C] (operand) */
    float *rstd1;     /* [N] */
    void *qkv;        /* [N,QKV] (operand), q and k rotated (RoPE): what attention read */
    void *atty;       /* [N,NH HS] (operand) */
    float *att;       /* [be->attention_saved_floats(B,T,NH)]: on the CPU the
                         probabilities [B,NH,T,T] */
    void *res2;       /* [N,C] (residual) after attention */
    void *ln2;        /* [N,C] (operand) */
    float *rstd2;     /* [N] */
    float *gate, *up; /* [N,F] the MLP's two projections */
    void *swi;        /* [N,F] silu(gate) * up (operand) */
    void *res3;       /* [N,C] (residual) layer output */
} LayerActs;

enum { A_LN1, A_RSTD1, A_QKV, A_ATTY, A_ATT, A_RES2, A_LN2, A_RSTD2, A_GATE, A_UP, A_SWI, A_RES3,
       A_N };
_Static_assert(sizeof(LayerActs) == A_N * sizeof(void *), "LayerActs: one pointer per A_ kind");
_Static_assert(offsetof(LayerActs, res3) == A_RES3 * sizeof(void *), "LayerActs: A_ order");

/* [Note: recompute] in model.h, Llama's part, as GPT-2's (gpt2.c): full keeps the output
 * res3 only and recomputes the layer into the workspace; selective drops the attention
 * probabilities and the SwiGLU product swi, and recomputes attention on the kept (rotated)
 * qkv and the product from the kept gate and up: one elementwise pass, against the two
 * matmuls that dropping gate and up would cost. */
#define K_ALL (ARCH_SEL | ARCH_FULL)
static const ArchBuf acts[A_N] = {
    {"ln1", 1, ARCH_SEL, ARCH_FULL, 0},
    {"rstd1", 0, ARCH_SEL, ARCH_FULL, 0},
    {"qkv", 1, ARCH_SEL, ARCH_FULL, 0},
    {"atty", 1, ARCH_SEL, K_ALL, 0},
    {"att", 0, 0, K_ALL, 0},
    {"res2", ARCH_RESIDUAL, ARCH_SEL, ARCH_FULL, 0},
    {"ln2", 1, ARCH_SEL, ARCH_FULL, 0},
    {"rstd2", 0, ARCH_SEL, ARCH_FULL, 0},
    {"gate", 0, ARCH_SEL, ARCH_FULL, 0},
    {"up", 0, ARCH_SEL, ARCH_FULL, 0},
    {"swi", 1, 0, K_ALL, 0},
    {"res3", ARCH_RESIDUAL, K_ALL, ARCH_FULL, 0},
};

/* The head's saved activations: the final RMSNorm's output and rstd, and d(loss)/d(its
 * output), computed in the forward ([Note: fused head] in model.c). */
enum { H_LNF, H_RSTD, H_DLNF, H_N };
static const ArchBuf head[H_N] = {
    {"lnf", 1, 0, 0, 0}, {"lnf_rstd", 0, 0, 0, 0}, {"dlnf", 1, 0, 0, 0}};

/* [Note: Llama W state] ([Note: W state] in model.h; GPT-2's in gpt2.c) What the weight
 * half reads besides the slot: the output gradient of each matmul and RMSNorm of a layer,
 * (5C + 2F + QKV) N floats. After the input half, qkv (W reads ln1, not it), gate and up
 * (W reads ln2 and swi) and the attention probabilities are dead, so a layer that keeps
 * its activations stores dqkv in qkv, dgate in gate, dup in up, and the four [N,C]
 * douts in the probabilities where those hold 4 N C operands (model_ws_four_fit); a layer that
 * recomputes keeps it all in its W state set. */
typedef struct {
    void *dres3; /* [N,C] d(layer output): downw's dout (operand) */
    void *dgate; /* [N,F] gatew's dout (operand) */
    void *dup;   /* [N,F] upw's dout (operand) */
    void *dln2;  /* [N,C] d(ln2 output) (operand) */
    void *dres2; /* [N,C] d(res2): attprojw's dout (operand) */
    void *dqkv;  /* [N,QKV] qkvw's dout, RoPE's backward applied (operand) */
    void *dln1;  /* [N,C] d(ln1 output) (operand) */
} LayerWState;

enum { W_DRES3, W_DGATE, W_DUP, W_DLN2, W_DRES2, W_DQKV, W_DLN1, W_N };
_Static_assert(sizeof(LayerWState) == W_N * sizeof(void *), "LayerWState: one pointer per W_ kind");
static const ArchBuf wstate[W_N] = {
    {"dres3", 1, 0, 0, 0}, {"dgate", 1, 0, 0, 0}, {"dup", 1, 0, 0, 0},  {"dln2", 1, 0, 0, 0},
    {"dres2", 1, 0, 0, 0}, {"dqkv", 1, 0, 0, 0},  {"dln1", 1, 0, 0, 0},
};

/* The backward's scratch (Model.bufs): the fused backward's douts, the two projections'
 * parts of d(ln2 output) in fp32 (matmul_backward overwrites its dinp; their sum in dmid,
 * then at the operand type in dtmp, the fused backward's dln2), the residual gradient cast
 * for a matmul (non-fp32 operands only), and dkeep, the input half's four [N,C] douts
 * (operands, carved as model_ws_four does) until they move into the layer. */
enum { S_DSWI, S_DMID, S_DTMP, S_DQKV, S_DGATE, S_DUP, S_DRES, S_DKEEP, S_N };
static const ArchBuf scratch[S_N] = {
    {"dswi", 0, 0, 0, ARCH_ALWAYS},    /* [N,F] */
    {"dmid", 0, 0, 0, ARCH_ALWAYS},    /* [N,C]: d(ln2)'s sum; d(atty), d(ln1) (operand) */
    {"dtmp", 0, 0, 0, ARCH_ALWAYS},    /* [N,C]: d(ln2)'s up part; d(ln2) (operand) */
    {"dqkv", 1, 0, 0, ARCH_ALWAYS},    /* [N,QKV] */
    {"dgate", 1, 0, 0, ARCH_ALWAYS},   /* [N,F] */
    {"dup", 1, 0, 0, ARCH_ALWAYS},     /* [N,F] */
    {"dres", 1, 0, 0, ARCH_CAST},      /* [N,C] */
    {"dkeep", 1, 0, 0, ARCH_WS_STAGE}, /* 4 x [N,C] */
};

/* The constants: RoPE's inverse frequencies ([Note: RoPE frequencies]). */
enum { K_INV_FREQ, K_N };
static const ArchBuf consts[K_N] = {{"inv_freq", 0, 0, 0, 0}}; /* [HS/2] */

/* Widths of a set's buffers per token: in C, F or QKV units, or 1 float (a norm's
 * statistic), or attention's own size. */
enum { U_C, U_F, U_QKV, U_1, U_ATT };

static size_t elems(const ModelDims *d, int set, int k, size_t N, size_t att) {
    static const unsigned char act_u[A_N] = {U_C, U_1, U_QKV, U_C, U_ATT, U_C,
                                             U_C, U_1, U_F,   U_F, U_F,   U_C};
    static const unsigned char head_u[H_N] = {U_C, U_1, U_C};
    static const unsigned char ws_u[W_N] = {U_C, U_F, U_F, U_C, U_C, U_QKV, U_C};
    static const unsigned char scratch_u[S_N] = {U_F, U_C, U_C, U_QKV, U_F, U_F, U_C, U_C};
    size_t w[] = {d->C, d->F, qkv_width(d), 1, 0};
    switch (set) {
    case ARCH_ACTS: return act_u[k] == U_ATT ? att : N * w[act_u[k]];
    case ARCH_HEAD: return N * w[head_u[k]];
    case ARCH_WS: return N * w[ws_u[k]];
    case ARCH_SCRATCH: return k == S_DKEEP ? model_ws_four_elems(N, d->C) : N * w[scratch_u[k]];
    default: return head_size(d) / 2; /* ARCH_CONST: inv_freq */
    }
}

static int ws_in_acts(const ModelDims *d, size_t N, size_t att, size_t ob, int k) {
    if (k == W_DGATE || k == W_DUP || k == W_DQKV) return 1; /* in gate, up and qkv */
    return model_ws_four_fit(att, N, d->C, ob);
}

static void ws_place(const Model *m, void *const *acts_, void **ws_) {
    const LayerActs *la = (const LayerActs *)acts_;
    LayerWState *ws = (LayerWState *)ws_;
    size_t N = (size_t)m->B * m->T, ob = pp_dtype_bytes(m->be->operand);
    ws->dgate = la->gate;
    ws->dup = la->up;
    ws->dqkv = la->qkv;
    if (model_ws_four_fit(m->att_floats, N, m->d.C, ob))
        model_ws_four(m, la->att, &ws->dln2, &ws->dln1, &ws->dres3, &ws->dres2);
}

static void ws_stage(const Model *m, void **ws_) {
    LayerWState *ws = (LayerWState *)ws_;
    ws->dgate = m->bufs[S_DGATE];
    ws->dup = m->bufs[S_DUP];
    ws->dqkv = m->bufs[S_DQKV];
    model_ws_four(m, m->bufs[S_DKEEP], &ws->dln2, &ws->dln1, &ws->dres3, &ws->dres2);
}

/* ---- RoPE's frequencies ---- */

/* [Note: RoPE frequencies] inv_freq[i] = 1 / theta^(2i / HS) for i < HS/2
 * (transformers' _compute_default_rope_parameters), and with rope_scaling llama3
 * (_compute_llama3_parameters, modeling_rope_utils.py), by each frequency's wavelength
 * wl = 2 pi / inv_freq against the original context length orig:
 *   wl < orig / high_freq_factor    kept (high frequencies),
 *   wl > orig / low_freq_factor     divided by factor (low frequencies),
 *   otherwise                      (1 - s) inv_freq / factor + s inv_freq, with the
 *                                   smooth factor s = (orig / wl - low) / (high - low).
 * Computed here in double and rounded once to fp32; transformers computes each step in
 * fp32 (torch's pow), so the two may differ in the last bit or two. test_llama.c checks
 * this against the formula written out again. */
static double llama3_scale(double f, const ModelRope *r) {
    double orig = r->original_max_seq_len, wl = 2 * M_PI / f;
    if (wl < orig / r->high_freq_factor) return f;
    if (wl > orig / r->low_freq_factor) return f / r->factor;
    double s = (orig / wl - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (1 - s) * f / r->factor + s * f;
}

static void const_fill(const ModelDims *d, int k, float *host) {
    int HS = head_size(d);
    for (int i = 0; i < HS / 2; i++) {
        double f = 1.0 / pow(d->rope.theta, 2.0 * i / HS);
        host[i] = (float)(d->rope.llama3 ? llama3_scale(f, &d->rope) : f);
    }
}

/* ---- compute ---- */

static void embed_forward(const Model *m, void *out, const int *tokens) {
    m->be->encoder_forward(m->be, out, tokens, m->wte, NULL, m->B, m->T, m->d.C);
}

static void embed_backward(const Model *m, const float *dout, const int *tokens) {
    m->be->encoder_backward(m->be, m->dwte, NULL, dout, tokens, m->B, m->T, m->d.C);
}

/* The block on x [B*T,C]; with kv (decoding: B 1), RoPE at the new positions and
 * attention on the layer's cache. */
static void block_forward(const Model *m, void *const *acts_, float *const *p_, const void *x,
                          int B, int T, const ArchKv *kv) {
    const Backend *be = m->be;
    const LayerActs *a = (const LayerActs *)acts_;
    const LayerParams *p = (const LayerParams *)p_;
    const ModelDims *d = &m->d;
    int N = B * T, C = d->C, NH = d->NH, NKV = d->NKV, HS = head_size(d);
    int F = d->F;
    const float *inv_freq = m->consts[K_INV_FREQ];
    be->rmsnorm_forward(be, a->ln1, a->rstd1, x, p->ln1w, d->eps, N, C);
    be->matmul_operand_forward(be, a->qkv, a->ln1, p->qkvw, qkv_bias(m, p_), N, C, qkv_width(d));
    if (kv) { /* [Note: KV cache] in backend.h: q and k rotated at positions kv->pos.. */
        be->kv_append(be, kv->k, kv->v, a->qkv, inv_freq, kv->pos, T, NH, NKV, HS, kv->cap);
        be->attention_decode(be, a->atty, a->qkv, kv->k, kv->v, kv->pos, T, NH, NKV, HS, kv->cap);
    } else {
        be->rope_forward(be, a->qkv, inv_freq, B, T, NH, NKV, HS);
        be->attention_forward(be, a->atty, a->att, a->qkv, B, T, NH, NKV, HS);
    }
    /* res2 = x + attn(ln1(x)) */
    be->matmul_residual_forward(be, a->res2, x, a->atty, p->attprojw, NULL, N, NH * HS, C);
    be->rmsnorm_forward(be, a->ln2, a->rstd2, a->res2, p->ln2w, d->eps, N, C);
    be->matmul_forward(be, a->gate, a->ln2, p->gatew, NULL, N, C, F);
    be->matmul_forward(be, a->up, a->ln2, p->upw, NULL, N, C, F);
    be->swiglu_forward(be, a->swi, a->gate, a->up, (size_t)N * F);
    /* res3 = res2 + mlp(ln2(res2)) */
    be->matmul_residual_forward(be, a->res3, a->res2, a->swi, p->downw, NULL, N, F, C);
}

static void layer_forward(const Model *m, void *const *a, float *const *p, const void *x) {
    block_forward(m, a, p, x, m->B, m->T, NULL);
}

static void layer_decode(const Model *m, void *const *a, float *const *p, const void *x,
                         const ArchKv *kv, int n) {
    block_forward(m, a, p, x, 1, n, kv);
}

/* No position table: the positions are RoPE's, in layer_decode. */
static void embed_decode(const Model *m, void *out, const int *tokens, int pos, int n) {
    m->be->encoder_forward(m->be, out, tokens, m->wte, NULL, 1, n, m->d.C);
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
    const LayerWState fused = {NULL, m->bufs[S_DGATE], m->bufs[S_DUP], m->bufs[S_DTMP],
                               NULL, m->bufs[S_DQKV],  m->bufs[S_DMID]};
    const LayerWState *ws = ws_ ? (const LayerWState *)ws_ : &fused;
    const ModelDims *d = &m->d;
    int B = m->B, T = m->T, N = B * T, C = d->C, NH = d->NH, NKV = d->NKV, HS = head_size(d);
    int F = d->F;
    size_t NC = (size_t)N * C;
    float *dswi = m->bufs[S_DSWI], *dmid = m->bufs[S_DMID], *dtmp = m->bufs[S_DTMP];
    void *cast = m->bufs[S_DRES];
    /* [Note: operand activations] in backend.h: an fp32 operand is dres itself */
    void *dr = ws->dres3 ? ws->dres3 : cast ? cast : dres;
    PP_CHECK(!chain || !ws_); /* [Note: residual gradient's operand] in arch.h */
    if (dr != dres && !(chain & ARCH_DRES_OP_IN)) be->to_operand(be, dr, dres, NC);
    be->matmul_backward(be, dswi, g->downw, NULL, dr, a->swi, p->downw, N, F, C);
    be->swiglu_backward(be, ws->dgate, ws->dup, a->gate, a->up, dswi, (size_t)N * F);
    /* d(ln2 output) = dgate @ gatew + dup @ upw, summed in fp32, then at the operand type
     * (RMSNorm's backward reads it so) */
    be->matmul_backward(be, dmid, g->gatew, NULL, ws->dgate, a->ln2, p->gatew, N, C, F);
    be->matmul_backward(be, dtmp, g->upw, NULL, ws->dup, a->ln2, p->upw, N, C, F);
    be->add_inplace(be, dmid, dtmp, NC);
    be->to_operand(be, ws->dln2, dmid, NC);
    /* the MLP branch's gradient joins the residual path: dres = d(res2), and its operand for
     * attproj's backward in the same pass (where that is not dres itself) */
    void *op = ws->dres2 ? ws->dres2 : cast;
    be->rmsnorm_backward(be, dres, op, g->ln2w, ws->dln2, a->res2, a->rstd2, p->ln2w, N, C,
                         m->scratch);
    dr = op ? op : dres;
    /* d(atty), which only attention's backward reads, at the operand type */
    be->matmul_operand_backward(be, dmid, g->attprojw, NULL, dr, a->atty, p->attprojw, N, NH * HS,
                                C);
    be->attention_backward(be, ws->dqkv, dmid, a->qkv, a->atty, a->att, B, T, NH, NKV, HS,
                           m->scratch);
    be->rope_backward(be, ws->dqkv, m->consts[K_INV_FREQ], B, T, NH, NKV, HS);
    be->matmul_operand_backward(be, ws->dln1, g->qkvw, qkv_bias(m, g_), ws->dqkv, a->ln1, p->qkvw,
                                N, C, qkv_width(d));
    /* the attention branch's gradient joins too: dres = d(x), and its operand for the layer
     * below when the chain asks */
    be->rmsnorm_backward(be, dres, chain & ARCH_DRES_OP_OUT ? cast : NULL, g->ln1w, ws->dln1, x,
                         a->rstd1, p->ln1w, N, C, m->scratch);
}

/* The weight half: the same weight-gradient calls as the fused layer_backward, each on
 * the output gradient the input half kept in ws. */
static void layer_backward_weight(const Model *m, float *const *g_, void *const *acts_,
                                  float *const *p_, const void *x, void *const *ws_) {
    const Backend *be = m->be;
    const LayerActs *a = (const LayerActs *)acts_;
    const LayerParams *p = (const LayerParams *)p_, *g = (const LayerParams *)g_;
    const LayerWState *ws = (const LayerWState *)ws_;
    const ModelDims *d = &m->d;
    int N = m->B * m->T, C = d->C, F = d->F, AC = d->NH * head_size(d);
    be->matmul_backward(be, NULL, g->downw, NULL, ws->dres3, a->swi, p->downw, N, F, C);
    be->matmul_backward(be, NULL, g->gatew, NULL, ws->dgate, a->ln2, p->gatew, N, C, F);
    be->matmul_backward(be, NULL, g->upw, NULL, ws->dup, a->ln2, p->upw, N, C, F);
    be->rmsnorm_backward(be, NULL, NULL, g->ln2w, ws->dln2, a->res2, a->rstd2, p->ln2w, N, C,
                         m->scratch);
    be->matmul_backward(be, NULL, g->attprojw, NULL, ws->dres2, a->atty, p->attprojw, N, AC, C);
    be->matmul_backward(be, NULL, g->qkvw, qkv_bias(m, g_), ws->dqkv, a->ln1, p->qkvw, N, C,
                        qkv_width(d));
    be->rmsnorm_backward(be, NULL, NULL, g->ln1w, ws->dln1, x, a->rstd1, p->ln1w, N, C, m->scratch);
}

static void *const *layer_recompute(const Model *m, int mode, int weight_half, void *const *acts_,
                                    void *const *work, float *const *p, const void *x) {
    const Backend *be = m->be;
    const LayerActs *la = (const LayerActs *)acts_, *w = (const LayerActs *)work;
    const ModelDims *d = &m->d;
    if (mode == PP_RECOMPUTE_FULL) {
        layer_forward(m, work, p, x);
        return work;
    }
    if (!weight_half) /* W does not read the probabilities */
        be->attention_forward(be, w->atty, la->att, la->qkv, m->B, m->T, d->NH, d->NKV,
                              head_size(d));
    be->swiglu_forward(be, la->swi, la->gate, la->up, (size_t)m->B * m->T * d->F);
    return acts_;
}

static const void *head_norm(const Model *m, void *const *h, const void *x, int N) {
    m->be->rmsnorm_forward(m->be, h[H_LNF], h[H_RSTD], x, m->gp[G_LNFW], m->d.eps, N, m->d.C);
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
    if (dx) be->zero(be, dx, (size_t)N * C * sizeof(float)); /* rmsnorm_backward adds */
    be->rmsnorm_backward(be, dx, op, weights ? m->gg[G_LNFW] : NULL, h[H_DLNF], x, h[H_RSTD],
                         m->gp[G_LNFW], N, C, m->scratch);
}

/* ---- costs ([Note: architecture costs] in arch.h) ---- */

/* Forward FLOPs per token: 2 per multiply-add of the matmuls (q, k, v: C QKV; the
 * output projection C NH HS; gate, up, down: 3 C F) and of attention's QK^T and PV over
 * all T positions (2 T NH HS each, GPT-2's count: the causal half is not subtracted);
 * RMSNorm, RoPE, SwiGLU and the residual adds are not counted (GPT-2 counts no
 * LayerNorm or GELU either). The embedding is a gather: no FLOPs, its Vp C parameters.
 * The head: the logits' 2 Vp C; with a 128K vocabulary that is several layers' worth,
 * which split: auto gives the last stage (Llama 3.2 1B at T = 2048: 3.8 layers). */
static void costs(const ModelDims *d, int T, ArchCosts *a) {
    double C = d->C, Vp = d->Vp, F = d->F, QKV = qkv_width(d), AC = (double)d->NH * head_size(d);
    double bias = d->arch->nlayer_params > P_QKVB ? QKV : 0;
    a->layer_params = C * QKV + AC * C + 3.0 * C * F + 2.0 * C + bias;
    a->embed_params = Vp * C;
    a->head_params = Vp * C + C; /* its matrix (tied: its wte copy), the final norm */
    a->layer_flops = 2.0 * (C * QKV + AC * C + 3.0 * C * F) + 4.0 * T * AC;
    a->embed_flops = 0;
    a->head_flops = 2.0 * Vp * C;
}

/* ---- Hugging Face's Llama, Qwen2 and Mistral ([Note: Hugging Face names] in arch.h) ---- */

/* transformers' modeling_llama.py, modeling_qwen2.py and modeling_mistral.py (the same
 * modules): nn.Linear weights are [out, in], pptrain's layout. q_proj [NH HS, C], k_proj
 * and v_proj [NKV HS, C] stack into qkvw's rows in that order with no permutation:
 * pptrain's RoPE is transformers' rotate-half on the same channels ([Note: RoPE] in
 * backend.h). qwen2's q/k/v biases stack into qkvb likewise. The state dict's order:
 * embed_tokens; each layer's self_attn (q, k, v, o), mlp (gate, up, down),
 * input_layernorm, post_attention_layernorm; norm; lm_head (left out of the file when
 * tied). qwen2's state dict interleaves each projection's weight and bias (q_proj.weight,
 * q_proj.bias, k_proj.weight, ...), which a row of three parts cannot: its export writes
 * the three weights, then the three biases, the same tensors, a shard cut possibly
 * elsewhere. */
#define L "model.layers.%d."
static const ArchHfTensor hf_tensors[] = {
    {"wte", 0, ARCH_HF_AS_IS, {"model.embed_tokens.weight"}},
    {"qkvw",
     1,
     ARCH_HF_STACKED,
     {L "self_attn.q_proj.weight", L "self_attn.k_proj.weight", L "self_attn.v_proj.weight"}},
    {"attprojw", 1, ARCH_HF_AS_IS, {L "self_attn.o_proj.weight"}},
    {"gatew", 1, ARCH_HF_AS_IS, {L "mlp.gate_proj.weight"}},
    {"upw", 1, ARCH_HF_AS_IS, {L "mlp.up_proj.weight"}},
    {"downw", 1, ARCH_HF_AS_IS, {L "mlp.down_proj.weight"}},
    {"ln1w", 1, ARCH_HF_AS_IS, {L "input_layernorm.weight"}},
    {"ln2w", 1, ARCH_HF_AS_IS, {L "post_attention_layernorm.weight"}},
    {"lnfw", 0, ARCH_HF_AS_IS, {"model.norm.weight"}},
    {"lm_head", 0, ARCH_HF_AS_IS, {"lm_head.weight"}},
};
static const ArchHfTensor hf_tensors_qwen2[] = {
    {"wte", 0, ARCH_HF_AS_IS, {"model.embed_tokens.weight"}},
    {"qkvw",
     1,
     ARCH_HF_STACKED,
     {L "self_attn.q_proj.weight", L "self_attn.k_proj.weight", L "self_attn.v_proj.weight"}},
    {"qkvb",
     1,
     ARCH_HF_STACKED,
     {L "self_attn.q_proj.bias", L "self_attn.k_proj.bias", L "self_attn.v_proj.bias"}},
    {"attprojw", 1, ARCH_HF_AS_IS, {L "self_attn.o_proj.weight"}},
    {"gatew", 1, ARCH_HF_AS_IS, {L "mlp.gate_proj.weight"}},
    {"upw", 1, ARCH_HF_AS_IS, {L "mlp.up_proj.weight"}},
    {"downw", 1, ARCH_HF_AS_IS, {L "mlp.down_proj.weight"}},
    {"ln1w", 1, ARCH_HF_AS_IS, {L "input_layernorm.weight"}},
    {"ln2w", 1, ARCH_HF_AS_IS, {L "post_attention_layernorm.weight"}},
    {"lnfw", 0, ARCH_HF_AS_IS, {"model.norm.weight"}},
    {"lm_head", 0, ARCH_HF_AS_IS, {"lm_head.weight"}},
};
/* RoPE's inverse frequencies, a persistent buffer of each layer in files older
 * transformers saved (Llama 2's conversions): pptrain computes them from the config */
static const char *const hf_buffers[] = {L "self_attn.rotary_emb.inv_freq", NULL};
#undef L

/* qkvw's (and qkvb's) parts: q's NH heads, then k's and v's NKV. */
static int hf_part_rows(const ModelDims *d, const ArchHfTensor *t, int p) {
    return (p == 0 ? d->NH : d->NKV) * head_size(d);
}

static int is_type(const HfConfig *c, const char *model_type) {
    return !strcmp(c->model_type.value, model_type);
}

/* What LlamaConfig, Qwen2Config and MistralConfig (transformers 5) make of keys the file
 * leaves out: num_key_value_heads num_attention_heads (Qwen2Config's default 32,
 * MistralConfig's 8), rms_norm_eps 1e-6, rope_theta 10000; qwen2's sliding_window is
 * None unless use_sliding_window. A null sliding_window reads as absent (hf_config.c):
 * no window (MistralConfig would read a missing key as 4096; save_pretrained always
 * writes it). */
static void hf_config_complete(HfConfig *c) {
#define DEFAULT(key) key " (left out: the model class's default)"
    HfConfigInt *kv = &c->num_key_value_heads;
    if (!kv->present && is_type(c, "llama") && c->num_attention_heads.present)
        *kv = (HfConfigInt){1, "num_key_value_heads (left out: num_attention_heads)",
                            c->num_attention_heads.value};
    else if (!kv->present && !is_type(c, "llama"))
        *kv = (HfConfigInt){1, DEFAULT("num_key_value_heads"), is_type(c, "qwen2") ? 32 : 8};
    if (!c->norm_eps.present) c->norm_eps = (HfConfigReal){1, DEFAULT("rms_norm_eps"), 1e-6};
    if (!c->rope_theta.present) c->rope_theta = (HfConfigReal){1, DEFAULT("rope_theta"), 10000.0};
#undef DEFAULT
    if (is_type(c, "qwen2") && !(c->use_sliding_window.present && c->use_sliding_window.value))
        c->sliding_window.present = 0;
}

/* What pptrain's block fixes: SwiGLU with silu, heads of hidden_size / num_attention_heads
 * channels, no biases but qwen2's q/k/v (llama's attention_bias also biases o_proj), and
 * RoPE unscaled or scaled as Llama 3 (transformers' rope_type default or llama3, whose
 * four numbers it requires too). */
static int hf_config_check(const HfConfig *c, char *err, size_t errlen) {
#define REFUSE(...) return pp_errf(err, errlen, PP_EUSAGE, __VA_ARGS__)
    const HfConfigRope *r = &c->rope;
    const char *type = r->type.present ? r->type.value : "default";
    if (c->hidden_act.present && strcmp(c->hidden_act.value, "silu"))
        REFUSE("%s: %s \"%s\" is not supported: pptrain's %s MLP is SwiGLU with silu", c->path,
               c->hidden_act.key, c->hidden_act.value, c->model_type.value);
    int64_t hd_x_nh; /* config.json's int64s: their product may overflow */
    if (c->head_dim.present && c->hidden_size.present && c->num_attention_heads.present &&
        (__builtin_mul_overflow(c->head_dim.value, c->num_attention_heads.value, &hd_x_nh) ||
         hd_x_nh != c->hidden_size.value))
        REFUSE("%s: head_dim %lld is not supported: pptrain's heads are hidden_size / "
               "num_attention_heads = %lld / %lld channels",
               c->path, (long long)c->head_dim.value, (long long)c->hidden_size.value,
               (long long)c->num_attention_heads.value);
    const HfConfigBool *bias[] = {&c->attention_bias, &c->mlp_bias};
    for (int i = 0; i < 2 && is_type(c, "llama"); i++)
        if (bias[i]->present && bias[i]->value)
            REFUSE("%s: %s true is not supported: pptrain's llama block has no biases (q/k/v "
                   "biases alone are model_type qwen2)",
                   c->path, bias[i]->key);
    if (strcmp(type, "default") && strcmp(type, "llama3"))
        REFUSE("%s: %s \"%s\" is not supported: pptrain's RoPE is unscaled (default) or scaled as "
               "Llama 3's (llama3)",
               c->path, r->type.key, type);
    const struct {
        int present;
        const char *name;
    } need[] = {{r->factor.present, "factor"},
                {r->low_freq_factor.present, "low_freq_factor"},
                {r->high_freq_factor.present, "high_freq_factor"},
                {r->original_max_position_embeddings.present, "original_max_position_embeddings"}};
    for (int i = 0; i < 4 && !strcmp(type, "llama3"); i++)
        if (!need[i].present)
            REFUSE("%s: %s \"llama3\" without %s.%s: the directory's config.json is incomplete",
                   c->path, r->type.key, r->key, need[i].name);
    return PP_OK;
#undef REFUSE
}

/* An export's keys beyond the engine's rows, as transformers writes each class: silu;
 * head_dim (LlamaConfig, MistralConfig); llama's attention_bias and mlp_bias false;
 * qwen2's use_sliding_window false. pptrain's attention has no window, so mistral's and
 * qwen2's sliding_window is null (hf_config.c). */
static void hf_config_fill(const ModelDims *d, HfConfig *c) {
    c->hidden_act.present = 1;
    snprintf(c->hidden_act.value, sizeof c->hidden_act.value, "silu");
    if (!is_type(c, "qwen2")) c->head_dim = (HfConfigInt){1, NULL, head_size(d)};
    if (is_type(c, "llama")) {
        c->attention_bias = (HfConfigBool){1, NULL, 0};
        c->mlp_bias = (HfConfigBool){1, NULL, 0};
    }
    if (is_type(c, "qwen2")) c->use_sliding_window = (HfConfigBool){1, NULL, 0};
}

static const char *const hf_keys[] = {"model.n_kv_heads", "model.ffn_dim",      "model.norm_eps",
                                      "model.rope_theta", "model.rope_scaling", NULL};
static const char *const hf_keys_window[] = {"model.n_kv_heads",
                                             "model.ffn_dim",
                                             "model.norm_eps",
                                             "model.rope_theta",
                                             "model.rope_scaling",
                                             "model.sliding_window",
                                             NULL};
static const char *const hf_types_llama[] = {"llama", NULL};
static const char *const hf_types_qwen2[] = {"qwen2", NULL};
static const char *const hf_types_mistral[] = {"mistral", NULL};

/* One ArchHf for each model type: its name and class, its tensors and keys. */
#define LLAMA_HF(TYPES, CLASS, TENSORS, KEYS)                                                      \
    {                                                                                              \
        .model_types = TYPES, .architecture = CLASS, .prefix = "model.",                           \
        .tie_default = 0, /* tie_word_embeddings false in all three classes */                     \
        .no_position_table = 1, .keys = KEYS, .ntensors = sizeof TENSORS / sizeof TENSORS[0],      \
        .tensors = TENSORS, .buffers = hf_buffers, .part_rows = hf_part_rows,                      \
        .config_complete = hf_config_complete, .config_check = hf_config_check,                    \
        .config_fill = hf_config_fill,                                                             \
    }
static const ArchHf hf_llama = LLAMA_HF(hf_types_llama, "LlamaForCausalLM", hf_tensors, hf_keys);
static const ArchHf hf_qwen2 = LLAMA_HF(hf_types_qwen2, "Qwen2ForCausalLM", hf_tensors_qwen2,
                                        hf_keys_window);
static const ArchHf hf_mistral = LLAMA_HF(hf_types_mistral, "MistralForCausalLM", hf_tensors,
                                          hf_keys_window);
#undef LLAMA_HF

/* One table for the three model types of this block: they differ in their name, in
 * whether the layer lists qkvb (nlayer_params P_NLAYER + 1) and in their Hugging Face
 * table. No llm.c format (model_load_llmc says so). */
#define LLAMA_ARCH(NAME, NPARAMS, HF)                                                              \
    {                                                                                              \
        .name = NAME, .nlayer_params = NPARAMS, .layer_params = layer_tensors, .nglobals = G_N,    \
        .globals = globals, .shape = shape, .dims_check = dims_check, .nacts = A_N, .acts = acts,  \
        .act_out = A_RES3, .nhead = H_N, .head = head, .head_dout = H_DLNF, .nws = W_N,            \
        .ws = wstate, .nscratch = S_N, .scratch = scratch, .nconst = K_N, .consts = consts,        \
        .elems = elems, .const_fill = const_fill, .ws_in_acts = ws_in_acts, .ws_place = ws_place,  \
        .ws_stage = ws_stage, .embed_forward = embed_forward, .embed_backward = embed_backward,    \
        .layer_forward = layer_forward, .layer_backward = layer_backward,                          \
        .layer_backward_weight = layer_backward_weight, .layer_recompute = layer_recompute,        \
        .head_forward = head_forward, .head_backward = head_backward,                              \
        .embed_decode = embed_decode, .layer_decode = layer_decode, .head_norm = head_norm,        \
        .costs = costs, .hf = HF,                                                                  \
    }

const Arch arch_llama = LLAMA_ARCH("llama", P_NLAYER, &hf_llama);
const Arch arch_qwen2 = LLAMA_ARCH("qwen2", P_NLAYER + 1, &hf_qwen2);
const Arch arch_mistral = LLAMA_ARCH("mistral", P_NLAYER, &hf_mistral);
