/* decode.c — decoding one sequence with a KV cache ([Note: decoding] in decode.h). */
#include "decode.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* The key/value heads: GPT-2's dims may leave NKV 0 (a manifest's, [Note: manifest model]
 * in ckpt_state.c), its block having NKV = NH (model.h). */
static size_t kv_heads(const ModelDims *d) { return (size_t)(d->NKV > 0 ? d->NKV : d->NH); }

size_t decode_cache_bytes(const ModelDims *d, int cap) {
    size_t HS = (size_t)d->C / d->NH;
    return 2 * (size_t)d->L * kv_heads(d) * (size_t)cap * HS * sizeof(float);
}

/* Whether m holds every stage's tensors: the name of the first it lacks, or NULL. */
static const char *missing(const Model *m) {
    const Arch *A = m->arch;
    if (!m->wte) return "wte";
    if (!m->head) return m->d.tied ? "wte" : "lm_head";
    for (int k = 0; k < A->nglobals; k++)
        if (!m->gp[k]) return A->globals[k].name;
    for (int l = 0; l < m->d.L; l++)
        if (!m->lp[(size_t)l * A->nlayer_params]) return "a layer";
    return NULL;
}

static void *dalloc(Decoder *dc, size_t bytes) {
    const Backend *be = dc->m->be;
    dc->bytes += bytes;
    return be->alloc(be, bytes ? bytes : sizeof(float));
}

/* Every buffer of one of the Arch's sets (ARCH_ACTS, ARCH_HEAD) for N rows, attention
 * saving nothing (decoding keeps no probabilities). */
static void set_alloc(Decoder *dc, int set, size_t N, void **bufs) {
    const Arch *A = dc->m->arch;
    const ArchBuf *b = set == ARCH_ACTS ? A->acts : A->head;
    int n = set == ARCH_ACTS ? A->nacts : A->nhead;
    size_t ob = pp_dtype_bytes(dc->m->be->operand), rb = pp_dtype_bytes(dc->m->be->residual);
    for (int k = 0; k < n; k++)
        bufs[k] = dalloc(dc,
                         A->elems(&dc->m->d, set, k, N, 0) * model_type_bytes(b[k].type, ob, rb));
}

int decode_init(Decoder *dc, const Model *m, int cap, int rows, int lrows, char *err,
                size_t errlen) {
    const Backend *be = m->be;
    const ModelDims *d = &m->d;
    const char *lack = missing(m);
    memset(dc, 0, sizeof *dc);
    if (lack)
        return pp_errf(err, errlen, PP_EUSAGE, "decoding needs a model of every stage, and this "
                       "one lacks %s (a rank of a pipeline holds only its stages)", lack);
    if (!be->kv_append || !be->attention_decode || !m->arch->layer_decode)
        return pp_errf(err, errlen, PP_EUSAGE, "the %s backend has no decoding ops (kv_append, "
                       "attention_decode): sample on the CPU (--device cpu)", be->name);
    if (cap < 1 || cap > d->maxT || rows < 1 || rows > cap || lrows < 1 || lrows > rows)
        return pp_errf(err, errlen, PP_EUSAGE, "decoding %d positions, %d at a time, %d logits: "
                       "needs 1 <= logits <= rows <= positions <= model.max_seq_len (%d)", cap,
                       rows, lrows, d->maxT);
    dc->m = m;
    dc->cap = cap;
    dc->rows = rows;
    dc->lrows = lrows;
    dc->kv = pp_calloc(d->L, sizeof(ArchKv));
    size_t half = decode_cache_bytes(d, cap) / d->L / 2;
    for (int l = 0; l < d->L; l++) {
        dc->kv[l] = (ArchKv){dalloc(dc, half), dalloc(dc, half), 0, cap};
        dc->cache_bytes += 2 * half;
    }
    set_alloc(dc, ARCH_ACTS, rows, dc->acts);
    set_alloc(dc, ARCH_HEAD, lrows, dc->head);
    dc->x = dalloc(dc, (size_t)rows * d->C * pp_dtype_bytes(be->residual));
    dc->tokens = dalloc(dc, (size_t)rows * sizeof(int));
    dc->logits = dalloc(dc, (size_t)lrows * d->Vp * sizeof(float));
    return PP_OK;
}

void decode_free(Decoder *dc) {
    if (!dc->m) return;
    const Backend *be = dc->m->be;
    const Arch *A = dc->m->arch;
    for (int l = 0; l < dc->m->d.L; l++) {
        be->dealloc(be, dc->kv[l].k);
        be->dealloc(be, dc->kv[l].v);
    }
    for (int k = 0; k < A->nacts; k++) be->dealloc(be, dc->acts[k]);
    for (int k = 0; k < A->nhead; k++) be->dealloc(be, dc->head[k]);
    be->dealloc(be, dc->x);
    be->dealloc(be, dc->tokens);
    be->dealloc(be, dc->logits);
    free(dc->kv);
    memset(dc, 0, sizeof *dc);
}

void decode_reset(Decoder *dc) { dc->pos = 0; }

void decode_run(Decoder *dc, const int *tokens, int n, int nlogits) {
    const Model *m = dc->m;
    const Backend *be = m->be;
    const Arch *A = m->arch;
    int C = m->d.C;
    size_t rb = pp_dtype_bytes(be->residual); /* [Note: residual stream type] */
    PP_CHECK(n >= 1 && n <= dc->rows && dc->pos + n <= dc->cap && nlogits >= 1 && nlogits <= n &&
             nlogits <= dc->lrows);
    be->to_device(be, dc->tokens, tokens, (size_t)n * sizeof(int));
    A->embed_decode(m, dc->x, dc->tokens, dc->pos, n);
    for (int l = 0; l < m->d.L; l++) {
        ArchKv *kv = &dc->kv[l];
        kv->pos = dc->pos;
        A->layer_decode(m, dc->acts, m->lp + (size_t)l * A->nlayer_params, dc->x, kv, n);
        be->copy(be, dc->x, dc->acts[A->act_out], (size_t)n * C * rb);
    }
    const void *h = A->head_norm(m, dc->head, (char *)dc->x + (size_t)(n - nlogits) * C * rb,
                                 nlogits);
    be->matmul_forward(be, dc->logits, h, m->head, NULL, nlogits, C, m->d.Vp);
    dc->pos += n;
}
