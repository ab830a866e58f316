/* model.c — GPT-2 stages: the parameter table, initialisation, activation slots and
 * forward/backward of a chunk of decoder layers on one microbatch. */
#include "model.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* LayerParams and LayerActs are walked as arrays of pointers (llm.c's loaders do the
 * same): their members must be exactly that. */
_Static_assert(sizeof(LayerParams) == P_NLAYER * sizeof(float *), "LayerParams: one float * per kind");
_Static_assert(sizeof(LayerActs) % sizeof(void *) == 0, "LayerActs: pointer members only");
_Static_assert(sizeof(LayerWState) == 6 * sizeof(void *), "LayerWState: six pointer members");

static const char *layer_names[P_NLAYER] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                            "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"};

/* Shape of per-layer tensor kind k: rows x cols (cols 0 = a vector). */
static void layer_shape(int k, int C, int *rows, int *cols) {
    static const int r[P_NLAYER] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1}; /* x C */
    static const int c[P_NLAYER] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0}; /* x C */
    *rows = r[k] * C;
    *cols = c[k] * C;
}

size_t model_total_params(const ModelDims *d) {
    size_t C = d->C, per_layer = 12 * C * C + 13 * C;
    size_t n = (size_t)d->Vp * C + (size_t)d->maxT * C + d->L * per_layer + 2 * C;
    return d->tied ? n : n + (size_t)d->Vp * C;
}

void model_arch_costs(const ModelDims *d, int T, ArchCosts *a) {
    double C = d->C, Vp = d->Vp;
    a->layer_params = 12.0 * C * C + 13.0 * C; /* qkv, attproj, fc, fcproj; 13 C of biases and norms */
    a->embed_params = (Vp + d->maxT) * C;
    a->head_params = Vp * C + 2.0 * C; /* its matrix (the tied head: its copy of wte) and the final norm */
    a->layer_flops = 24.0 * C * C + 4.0 * T * C; /* the four matmuls, and attention's QK^T and PV */
    a->embed_flops = C;                          /* a gather and an add */
    a->head_flops = 2.0 * Vp * C;                /* the logits */
    a->boundary_floats = C;
    a->head_act_floats = 2.0 * C + 2; /* lnf and its gradient, mean and rstd */
    a->logits_floats = Vp;
}

ModelDims model_dims(const Config *cfg) {
    return (ModelDims){cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, cfg->n_layers, cfg->n_heads,
                       cfg->dim, cfg->tie_embeddings};
}

size_t model_boundary_floats(const ModelDims *d, int B, int T) { return (size_t)B * T * d->C; }

double model_layer_act_floats(const ModelDims *d, double N, double att, int mode) {
    double C = d->C, all = N * (16.0 * C + 4) + att; /* [Note: recompute] in model.h */
    return mode == 2 ? N * C : mode == 1 ? all - att - 4 * N * C : all;
}

double model_train_flops_per_token(const ModelDims *d, int T) {
    ArchCosts a;
    model_arch_costs(d, T, &a);
    return 3 * (d->L * a.layer_flops + a.head_flops);
}

static void build_table(Model *m);

int model_dims_check(const ModelDims *d, char *err, size_t errlen) {
#define BAD(...) return pp_errf(err, errlen, PP_EUSAGE, __VA_ARGS__)
    if (d->V < 1) BAD("V=%d: the vocabulary must have at least 1 token", d->V);
    if (d->Vp < d->V) BAD("Vp=%d: the padded vocabulary must be >= V=%d", d->Vp, d->V);
    if (d->maxT < 1) BAD("maxT=%d: the position table needs at least 1 row", d->maxT);
    if (d->L < 1 || d->L > (INT_MAX - 6) / P_NLAYER)
        BAD("L=%d: the number of layers must be in [1, %d]", d->L, (INT_MAX - 6) / P_NLAYER);
    if (d->NH < 1) BAD("NH=%d: the number of heads must be >= 1", d->NH);
    if (d->C < 1 || d->C > INT_MAX / 4)
        BAD("C=%d: the channels must be in [1, %d] (fcw has 4C rows)", d->C, INT_MAX / 4);
    if (d->C % d->NH) BAD("C=%d is not a multiple of NH=%d", d->C, d->NH);
    if (d->tied != 0 && d->tied != 1) BAD("tied=%d: must be 0 or 1", d->tied);
    return PP_OK;
#undef BAD
}

ParamTensor *model_table(const ModelDims *d, int *n) {
    Model *m = pp_calloc(1, sizeof *m); /* only the table is filled */
    m->d = *d;
    m->nchunks = 1;
    m->chunks[0] = (Chunk){.stage = 0, .l0 = 0, .l1 = d->L, .first = 1, .last = 1};
    build_table(m);
    ParamTensor *t = m->tensors;
    *n = m->ntensors;
    free(m);
    return t;
}

int model_find(const Model *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

/* Append a tensor to the table unless this rank already holds it. */
static void add_tensor(Model *m, int cap, const char *name, int rows, int cols, int decay) {
    if (model_find(m, name) >= 0) return;
    PP_CHECK(m->ntensors < cap);
    ParamTensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->numel = (size_t)rows * (cols ? cols : 1);
    t->offset = m->nparams;
    t->dtype = PP_F32;
    t->decay = decay;
    m->nparams += t->numel;
}

static float *tensor_ptr(Model *m, float *base, const char *name) {
    int i = model_find(m, name);
    return i < 0 ? NULL : base + m->tensors[i].offset;
}

static void build_table(Model *m) {
    const ModelDims *d = &m->d;
    int cap = 4 + d->L * P_NLAYER + 2;
    char name[32];
    m->tensors = pp_calloc(cap, sizeof(ParamTensor));
    for (int c = 0; c < m->nchunks; c++) {
        const Chunk *ck = &m->chunks[c];
        if (ck->first) {
            add_tensor(m, cap, "wte", d->Vp, d->C, 1);
            add_tensor(m, cap, "wpe", d->maxT, d->C, 1);
        }
        for (int l = ck->l0; l < ck->l1; l++)
            for (int k = 0; k < P_NLAYER; k++) {
                int rows, cols;
                layer_shape(k, d->C, &rows, &cols);
                snprintf(name, sizeof name, "h.%d.%s", l, layer_names[k]);
                add_tensor(m, cap, name, rows, cols, cols != 0);
            }
        if (ck->last) {
            add_tensor(m, cap, "lnfw", d->C, 0, 0);
            add_tensor(m, cap, "lnfb", d->C, 0, 0);
            add_tensor(m, cap, d->tied ? "wte" : "lm_head", d->Vp, d->C, 1);
        }
    }
}

/* Point the per-layer and global pointers of params (or grads) into base. */
static void bind(Model *m, float *base, LayerParams *lp, float **wte, float **wpe,
                 float **lnfw, float **lnfb, float **head) {
    char name[32];
    for (int l = 0; l < m->d.L; l++) {
        float **f = (float **)&lp[l];
        for (int k = 0; k < P_NLAYER; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, layer_names[k]);
            f[k] = tensor_ptr(m, base, name);
        }
    }
    *wte = tensor_ptr(m, base, "wte");
    *wpe = tensor_ptr(m, base, "wpe");
    *lnfw = tensor_ptr(m, base, "lnfw");
    *lnfb = tensor_ptr(m, base, "lnfb");
    *head = tensor_ptr(m, base, m->d.tied ? "wte" : "lm_head");
}

static void *dev_alloc(const Model *m, size_t bytes) { return m->be->alloc(m->be, bytes); }

static void *act_alloc(Model *m, size_t bytes) {
    m->act_bytes += bytes;
    return dev_alloc(m, bytes);
}

/* Layers of a chunk of nl layers that recompute ([Note: recompute]). */
static int chunk_nrc(int recompute, int rc_layers, int nl) {
    if (recompute == PP_RECOMPUTE_NONE) return 0;
    return rc_layers == 0 || rc_layers > nl ? nl : rc_layers;
}

int model_recompute_mode(const char *name) {
    static const char *const names[] = {"none", "selective", "full"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

#define NACTS (sizeof(LayerActs) / sizeof(float *))

/* Bytes of each LayerActs member, in its order, for N rows of C channels, att floats of
 * saved attention state and operand elements of ob bytes ([Note: operand activations]
 * in backend.h). */
static void act_bytes_of(size_t N, size_t C, size_t att, size_t ob, size_t bytes[NACTS]) {
    size_t f = sizeof(float);
    size_t s[] = {N * C * ob, N * f, N * f, N * 3 * C * f, N * C * ob, att * f, N * C * f,
                  N * C * ob, N * f, N * f, N * 4 * C * f, N * 4 * C * ob, N * C * f}; /* LayerActs' order */
    _Static_assert(sizeof s / sizeof s[0] == NACTS, "bytes: LayerActs' order");
    memcpy(bytes, s, sizeof s);
}

static void layer_sizes(const Model *m, size_t bytes[NACTS]) {
    act_bytes_of((size_t)m->B * m->T, m->d.C, m->att_floats, pp_dtype_bytes(m->be->operand), bytes);
}

enum { ACT_ATTY = offsetof(LayerActs, atty) / sizeof(void *), ACT_ATT = offsetof(LayerActs, att) / sizeof(void *),
       ACT_GELU = offsetof(LayerActs, fch_gelu) / sizeof(void *), ACT_RES3 = offsetof(LayerActs, res3) / sizeof(void *) };

/* Whether member k of layer li is the slot's own (1) or the workspace's (0): all kept
 * in a keep slot and on layers that do not recompute; else full keeps res3 only and
 * selective all but att and fch_gelu ([Note: recompute]). */
static int member_kept(const Chunk *ck, int li, int keep, size_t k) {
    if (keep || li >= ck->nrc || ck->recompute == PP_RECOMPUTE_NONE) return 1;
    if (ck->recompute == PP_RECOMPUTE_FULL) return k == ACT_RES3;
    return k != ACT_ATT && k != ACT_GELU;
}

/* Whether a model whose chunks recompute like this, with nred slots or blocks that do
 * not keep all, needs the workspace. */
static int chunk_uses_work(int recompute, int nrc, int nred) {
    return recompute != PP_RECOMPUTE_NONE && nrc > 0 && nred > 0;
}

/* [Note: activation blocks] With a recompute (model_init_recompute) a chunk's slots
 * hold only its input, gradient and head activations; the layers' activations live in
 * blocks shared by every chunk of the rank, as many as the rank keeps microbatches in
 * flight over all its chunks together (sched_peak_inflight_rank), which is fewer than
 * the sum of each chunk's own peak when the chunks' peaks fall at different times
 * (ZB-V, interleaving). A block fits the largest chunk; model_slot_attach lays a
 * chunk's layers out in it. Blocks 0 .. nblocks_keep-1 keep everything, the others
 * drop what the recompute drops. Each tensor starts BLOCK_ALIGN bytes aligned. */
#define BLOCK_ALIGN 256
static size_t block_pad(size_t bytes) { return (bytes + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN; }

/* Lay the layer activations of a slot of chunk ck (keep or not) out from base: kept
 * members carved in order, dropped ones the workspace's. base NULL: only count.
 * Returns the bytes used. */
static size_t layers_carve(const Model *m, const Chunk *ck, LayerActs *layers, int keep, char *base) {
    size_t sizes[NACTS], used = 0;
    layer_sizes(m, sizes);
    void *const *work = (void *const *)&m->work; /* LayerActs as an array of pointers */
    for (int li = 0; li < ck->l1 - ck->l0; li++)
        for (size_t k = 0; k < NACTS; k++) {
            void **f = layers ? (void **)&layers[li] + k : NULL;
            if (!member_kept(ck, li, keep, k)) {
                if (f) *f = work[k];
                continue;
            }
            if (f) *f = base + used;
            used += block_pad(sizes[k]);
        }
    return used;
}

/* A slot's own layer activations (model_init: no blocks), every member kept. */
static void layers_own(Model *m, const Chunk *ck, LayerActs *layers) {
    size_t sizes[NACTS];
    layer_sizes(m, sizes);
    for (int li = 0; li < ck->l1 - ck->l0; li++)
        for (size_t k = 0; k < NACTS; k++) ((void **)&layers[li])[k] = act_alloc(m, sizes[k]);
}

static void slot_init(Model *m, const Chunk *ck, ActSlot *a) {
    size_t N = (size_t)m->B * m->T, C = m->d.C;
    memset(a, 0, sizeof *a);
    a->keep = 1;
    a->block = -1;
    size_t f = sizeof(float);
    a->input = act_alloc(m, N * C * f);
    a->grad = act_alloc(m, N * C * f);
    a->tokens = dev_alloc(m, N * sizeof(int));
    a->targets = dev_alloc(m, N * sizeof(int));
    a->layers = pp_calloc(ck->l1 - ck->l0, sizeof(LayerActs));
    if (!m->pooled) layers_own(m, ck, a->layers); /* else model_slot_attach */
    if (ck->last) {
        a->lnf = act_alloc(m, N * C * pp_dtype_bytes(m->be->operand));
        a->lnf_mean = act_alloc(m, N * f);
        a->lnf_rstd = act_alloc(m, N * f);
        a->dlnf = act_alloc(m, N * C * f);
    }
}

static void slot_free(const Model *m, const Chunk *ck, ActSlot *a) {
    const Backend *be = m->be;
    void *own[] = {a->input, a->grad, a->tokens, a->targets, a->lnf, a->lnf_mean, a->lnf_rstd, a->dlnf};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) be->dealloc(be, own[k]);
    for (int l = 0; l < ck->l1 - ck->l0 && !m->pooled; l++) { /* blocks go at model_free */
        void **f = (void **)&a->layers[l];
        for (size_t k = 0; k < NACTS; k++) be->dealloc(be, f[k]);
    }
    free(a->layers);
}

/* The rank's activation blocks ([Note: activation blocks]), each sized for the largest
 * chunk's layout of its kind. */
static void blocks_init(Model *m, int nkeep, int nred) {
    size_t fl[2] = {0, 0}; /* bytes of a block that drops, that keeps */
    for (int c = 0; c < m->nchunks; c++)
        for (int keep = 0; keep < 2; keep++) {
            size_t n = layers_carve(m, &m->chunks[c], NULL, keep, NULL);
            fl[keep] = n > fl[keep] ? n : fl[keep];
        }
    m->nblocks = nkeep + nred;
    m->nblocks_keep = nkeep;
    m->blocks = pp_calloc(m->nblocks ? m->nblocks : 1, sizeof(void *));
    for (int b = 0; b < m->nblocks; b++) m->blocks[b] = act_alloc(m, fl[b < nkeep]);
}

void model_slot_attach(Model *m, int c, int s, int b) {
    PP_CHECK(m->pooled && c >= 0 && c < m->nchunks && s >= 0 && s < m->chunks[c].nslots && b >= 0 && b < m->nblocks);
    ActSlot *a = &m->chunks[c].slots[s];
    a->keep = b < m->nblocks_keep;
    a->block = b;
    layers_carve(m, &m->chunks[c], a->layers, a->keep, m->blocks[b]);
}

/* The recompute workspace: a whole layer for full, what selective drops (and
 * attention's output, which its recompute writes) for selective. */
static void work_init(Model *m) {
    int full = 0, sel = 0;
    for (int c = 0; c < m->nchunks; c++) {
        const Chunk *ck = &m->chunks[c];
        if (!chunk_uses_work(ck->recompute, ck->nrc, m->nblocks - m->nblocks_keep)) continue;
        full |= ck->recompute == PP_RECOMPUTE_FULL;
        sel |= ck->recompute == PP_RECOMPUTE_SELECTIVE;
    }
    if (!full && !sel) return;
    size_t sizes[NACTS];
    layer_sizes(m, sizes);
    void **f = (void **)&m->work;
    LayerActs want = {0};
    want.att = (float *)1, want.atty = want.fch_gelu = (void *)1; /* selective's */
    void *const *w = (void *const *)&want;
    for (size_t k = 0; k < NACTS; k++) {
        if (!full && !w[k]) continue;
        f[k] = dev_alloc(m, sizes[k]);
        m->work_bytes += sizes[k];
    }
}

/* Bytes of the four [N,C] douts of the W state: dres3 and dres2 operands, dln2 and
 * dln1 fp32 ([Note: W state]; ob: the operand's element bytes). */
static size_t wstate_four_bytes(size_t NC, size_t ob) { return NC * (2 * ob + 2 * sizeof(float)); }

/* Whether the four [N,C] douts of the W state fit in a layer's attention probabilities
 * ([Note: W state]). */
static int wstate_in_att(size_t att_floats, size_t N, size_t C, size_t ob) {
    return att_floats * sizeof(float) >= wstate_four_bytes(N * C, ob);
}

/* Bytes of W state set memory layer li of a chunk needs ([Note: W state]): all six
 * douts when it recomputes (li < nrc), else the four [N,C] ones when the probabilities
 * cannot hold them. */
static size_t wstate_layer_bytes(int li, int nrc, size_t att_floats, size_t N, size_t C, size_t ob) {
    if (li < nrc) return N * C * (9 * ob + 2 * sizeof(float)); /* dres3, dfch 4, dres2, dqkv 3; dln2, dln1 */
    return wstate_in_att(att_floats, N, C, ob) ? 0 : wstate_four_bytes(N * C, ob);
}

#define NWS (sizeof(LayerWState) / sizeof(float *))

/* Floats of each LayerWState member, in its order, for [N,C] = NC floats. */
static void wstate_sizes(size_t NC, size_t sizes[NWS]) {
    size_t s[] = {NC, 4 * NC, NC, NC, 3 * NC, NC}; /* LayerWState's order */
    _Static_assert(sizeof s / sizeof s[0] == NWS, "sizes: LayerWState's order");
    memcpy(sizes, s, sizeof s);
}

/* Bytes of an element of each LayerWState member, in its order: the matmul douts are
 * operands ([Note: operand activations] in backend.h), the LayerNorm douts fp32. */
static void wstate_elem_bytes(const Backend *be, size_t bytes[NWS]) {
    size_t o = pp_dtype_bytes(be->operand), f = sizeof(float);
    size_t s[] = {o, o, f, o, o, f}; /* LayerWState's order */
    _Static_assert(sizeof s / sizeof s[0] == NWS, "bytes: LayerWState's order");
    memcpy(bytes, s, sizeof s);
}

static void wstate_init(Model *m, const Chunk *ck, LayerWState *ws) {
    size_t N = (size_t)m->B * m->T, C = m->d.C, sizes[NWS], bytes[NWS];
    size_t att = m->att_floats, ob = pp_dtype_bytes(m->be->operand);
    wstate_sizes(N * C, sizes);
    wstate_elem_bytes(m->be, bytes);
    for (int l = 0; l < ck->l1 - ck->l0; l++) {
        void **f = (void **)&ws[l]; /* LayerWState as an array of pointers */
        int own = l < ck->nrc; /* all six, or ... */
        for (size_t k = 0; k < NWS; k++) {
            if (!own && (sizes[k] != N * C || wstate_in_att(att, N, C, ob))) continue; /* ... the [N,C] four */
            f[k] = dev_alloc(m, sizes[k] * bytes[k]);
            m->wstate_bytes += sizes[k] * bytes[k];
        }
    }
}

/* Where layer li of slot a keeps its W state ([Note: W state]): set[li] when the layer
 * recomputes, else its own dead activations (qkv, fch, the probabilities, or set[li]'s
 * [N,C] buffers when they do not fit). */
static LayerWState wstate_at(const Model *m, const Chunk *ck, const ActSlot *a, int li, const LayerWState *set) {
    if (li < ck->nrc) return set[li];
    const LayerActs *la = &a->layers[li];
    size_t NC = (size_t)m->B * m->T * m->d.C, ob = pp_dtype_bytes(m->be->operand), f = sizeof(float);
    LayerWState ws = set[li];
    ws.dfch = la->fch;
    ws.dqkv = la->qkv;
    if (wstate_in_att(m->att_floats, (size_t)m->B * m->T, m->d.C, ob)) { /* the fp32 two first: aligned */
        char *p = (char *)la->att;
        ws.dln2 = (float *)p;
        ws.dln1 = (float *)(p + NC * f);
        ws.dres3 = p + 2 * NC * f;
        ws.dres2 = p + 2 * NC * f + NC * ob;
    }
    return ws;
}

static void wstate_free(const Model *m, const Chunk *ck, LayerWState *ws) {
    for (int l = 0; l < ck->l1 - ck->l0; l++) {
        void **f = (void **)&ws[l];
        for (size_t k = 0; k < NWS; k++) m->be->dealloc(m->be, f[k]);
    }
    free(ws);
}

/* Rows of the head's logits buffer for a backend's chunk rows ([Note: chunked head]):
 * all B*T when it asks for 0 or for more. */
static int head_rows(int chunk_rows, int B, int T) {
    return chunk_rows > 0 && chunk_rows < B * T ? chunk_rows : B * T;
}

/* Zeroed device memory for n floats. */
static float *dev_zeros(const Model *m, size_t n) {
    float *p = dev_alloc(m, n * sizeof(float));
    m->be->zero(m->be, p, n * sizeof(float));
    return p;
}

void model_init(Model *m, const ModelDims *d, const ChunkSpec *specs, int nchunks, int B,
                int T, const Backend *be) {
    model_init_recompute(m, d, specs, NULL, nchunks, B, T, be, 0, 0);
}

void model_init_recompute(Model *m, const ModelDims *d, const ChunkSpec *specs, const ChunkRecompute *rc,
                          int nchunks, int B, int T, const Backend *be, int nblocks_keep, int nblocks_drop) {
    PP_CHECK(nchunks >= 1 && nchunks <= PP_MAX_CHUNKS);
    memset(m, 0, sizeof *m);
    m->d = *d;
    m->B = B;
    m->T = T;
    m->be = be;
    m->att_floats = be->attention_saved_floats(be, B, T, d->NH);
    m->nchunks = nchunks;
    m->pooled = rc != NULL;
    int any_last = 0, any_first = 0;
    for (int c = 0; c < nchunks; c++) {
        Chunk *ck = &m->chunks[c];
        ck->stage = specs[c].stage;
        ck->l0 = specs[c].l0;
        ck->l1 = specs[c].l1;
        ck->first = specs[c].first;
        ck->last = specs[c].last;
        ck->nslots = specs[c].nslots;
        ck->nrecv = specs[c].nrecv;
        ck->recompute = rc ? rc[c].mode : PP_RECOMPUTE_NONE;
        ck->nrc = chunk_nrc(ck->recompute, rc ? rc[c].layers : 0, ck->l1 - ck->l0);
        any_last |= ck->last;
        any_first |= ck->first;
    }
    build_table(m);
    m->params = dev_zeros(m, m->nparams);
    m->grads = dev_zeros(m, m->nparams);
    m->lp = pp_calloc(d->L, sizeof(LayerParams));
    m->lg = pp_calloc(d->L, sizeof(LayerParams));
    bind(m, m->params, m->lp, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, &m->head);
    bind(m, m->grads, m->lg, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, &m->dhead);
    if (d->tied && any_first && any_last) { /* first and last stage on this rank (a tied head
                                              * pointer alone is no sign: it is wte) */
        m->dhead_tied = dev_zeros(m, (size_t)d->Vp * d->C);
        m->dhead = m->dhead_tied;
    }
    if (m->pooled) blocks_init(m, nblocks_keep, nblocks_drop);
    work_init(m);
    for (int c = 0; c < nchunks; c++) {
        Chunk *ck = &m->chunks[c];
        ck->slots = pp_calloc(ck->nslots, sizeof(ActSlot));
        for (int s = 0; s < ck->nslots; s++) slot_init(m, ck, &ck->slots[s]);
        ck->recv = pp_calloc(ck->nrecv ? ck->nrecv : 1, sizeof(float *));
        for (int r = 0; r < ck->nrecv; r++) ck->recv[r] = dev_alloc(m, (size_t)B * T * d->C * sizeof(float));
        m->recv_bytes += (size_t)ck->nrecv * B * T * d->C * sizeof(float);
    }
    size_t N = (size_t)B * T, C = d->C;
    size_t ob = pp_dtype_bytes(be->operand);
    m->dbig = dev_alloc(m, N * 4 * C * sizeof(float));
    m->dmid = dev_alloc(m, N * C * sizeof(float));
    m->dqkv = dev_alloc(m, N * 3 * C * ob);
    m->dfch = dev_alloc(m, N * 4 * C * ob);
    if (be->operand != PP_F32) m->dres = dev_alloc(m, N * C * ob); /* else dres serves as it is */
    m->scratch = dev_alloc(m, be->scratch_floats(be, (int)N, T, (int)C) * sizeof(float));
    m->losses = dev_alloc(m, N * sizeof(float));
    m->logits_rows = head_rows(be->logits_chunk_rows, B, T);
    m->logits = any_last ? act_alloc(m, (size_t)m->logits_rows * d->Vp * sizeof(float)) : NULL; /* [Note: chunked head] */
    if (any_last && be->operand != PP_F32) m->dlogits = dev_alloc(m, (size_t)m->logits_rows * d->Vp * ob);
}

void model_init_optimizer(Model *m, int narrays) {
    PP_CHECK(narrays >= 0 && narrays <= 2 && m->nopt == 0);
    m->nopt = narrays;
    if (narrays >= 1) m->opt_m = dev_zeros(m, m->nparams);
    if (narrays >= 2) m->opt_v = dev_zeros(m, m->nparams);
}

void model_init_wstate(Model *m, int c, int n) {
    Chunk *ck = &m->chunks[c];
    PP_CHECK(c >= 0 && c < m->nchunks && n >= 0 && ck->nwstate == 0 && !ck->wstate);
    ck->nwstate = n;
    ck->wstate = pp_calloc(n ? n : 1, sizeof(LayerWState *));
    if (n > 0 && ck->l1 - ck->l0 > ck->nrc && !m->dkeep) { /* a layer stores W state in itself */
        size_t bytes = (size_t)m->B * m->T * 4 * m->d.C * sizeof(float);
        m->dkeep = dev_alloc(m, bytes);
        m->wstate_bytes += bytes;
    }
    for (int w = 0; w < n; w++) {
        ck->wstate[w] = pp_calloc(ck->l1 - ck->l0 ? ck->l1 - ck->l0 : 1, sizeof(LayerWState));
        wstate_init(m, ck, ck->wstate[w]);
    }
}

void model_free(Model *m) {
    const Backend *be = m->be;
    if (!be) return;
    for (int c = 0; c < m->nchunks; c++) {
        Chunk *ck = &m->chunks[c];
        for (int s = 0; s < ck->nslots; s++) slot_free(m, ck, &ck->slots[s]);
        for (int r = 0; r < ck->nrecv; r++) be->dealloc(be, ck->recv[r]);
        for (int w = 0; w < ck->nwstate; w++) wstate_free(m, ck, ck->wstate[w]);
        free(ck->slots), free(ck->recv), free(ck->wstate);
    }
    void **work = (void **)&m->work;
    for (size_t k = 0; k < NACTS; k++) be->dealloc(be, work[k]);
    for (int b = 0; b < m->nblocks; b++) be->dealloc(be, m->blocks[b]);
    free(m->blocks);
    void *own[] = {m->params, m->grads,  m->opt_m,  m->opt_v,      m->dbig,    m->dmid,   m->dqkv,   m->dfch,
                   m->dres,   m->dkeep,  m->losses, m->logits,     m->dlogits, m->dhead_tied, m->scratch};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) be->dealloc(be, own[k]);
    free(m->tensors), free(m->lp), free(m->lg);
    memset(m, 0, sizeof *m);
}

void model_zero_grads(Model *m) {
    m->be->zero(m->be, m->grads, m->nparams * sizeof(float));
    if (m->dhead_tied) m->be->zero(m->be, m->dhead_tied, (size_t)m->d.Vp * m->d.C * sizeof(float));
}

void model_hold_weights(Model *m, int hold) {
    const Backend *be = m->be;
    m->weights_held = hold && be->weight_hold;
    if (be->weight_hold) be->weight_hold(be, hold ? m->params : NULL, hold ? m->nparams : 0);
}

void model_fold_tied_grad(Model *m) {
    if (m->dhead_tied) m->be->add_inplace(m->be, m->dwte, m->dhead_tied, (size_t)m->d.Vp * m->d.C);
}

/* splitmix64: the per-tensor random stream. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
    return h;
}

static void fill_normal(float *x, size_t n, float std, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 2) { /* Box–Muller: two normals per two uniforms */
        double u1 = ((splitmix64(&s) >> 11) + 1.0) * 0x1.0p-53, u2 = (splitmix64(&s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
    }
}

size_t model_largest_tensor(const Model *m) {
    size_t n = 1;
    for (int i = 0; i < m->ntensors; i++) n = m->tensors[i].numel > n ? m->tensors[i].numel : n;
    return n;
}

void model_init_weights(Model *m, uint64_t seed, float std) {
    float proj_std = std / sqrtf(2.0f * m->d.L);
    float *p = pp_malloc(model_largest_tensor(m) * sizeof(float)); /* filled on the host */
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        const char *kind = strrchr(t->name, '.') ? strrchr(t->name, '.') + 1 : t->name;
        if (t->ndim == 2) {
            int proj = !strcmp(kind, "attprojw") || !strcmp(kind, "fcprojw");
            fill_normal(p, t->numel, proj ? proj_std : std, name_seed(seed, t->name));
        } else {
            float v = (!strcmp(kind, "ln1w") || !strcmp(kind, "ln2w") || !strcmp(kind, "lnfw")) ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->numel; j++) p[j] = v;
        }
        if (!strcmp(t->name, "wte") || !strcmp(t->name, "lm_head")) /* padded rows: 0 */
            memset(p + (size_t)m->d.V * m->d.C, 0, (size_t)(m->d.Vp - m->d.V) * m->d.C * sizeof(float));
        m->be->to_device(m->be, m->params + t->offset, p, t->numel * sizeof(float));
        m->be->wait(m->be); /* p is refilled for the next tensor */
    }
    free(p);
}

float *model_recv_buffer(Model *m, int c, int r) {
    PP_CHECK(r >= 0 && r < m->chunks[c].nrecv);
    return m->chunks[c].recv[r];
}

void model_take_input(Model *m, int c, int s, int r) {
    ActSlot *a = &m->chunks[c].slots[s];
    float *t = a->input;
    a->input = model_recv_buffer(m, c, r);
    m->chunks[c].recv[r] = t;
}

float *model_chunk_output(Model *m, int c, int s) {
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    return ck->l1 > ck->l0 ? a->layers[ck->l1 - ck->l0 - 1].res3 : a->input;
}

static void layer_forward(Model *m, const LayerParams *p, LayerActs *a, const float *x) {
    const Backend *be = m->be;
    int B = m->B, T = m->T, N = B * T, C = m->d.C, NH = m->d.NH;
    be->layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
    be->matmul_forward(be, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
    be->attention_forward(be, a->atty, a->att, a->qkv, B, T, C, NH);
    be->matmul_forward(be, a->res2, a->atty, p->attprojw, p->attprojb, N, C, C);
    be->add_inplace(be, a->res2, x, (size_t)N * C); /* res2 = x + attn(ln1(x)) */
    be->layernorm_forward(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C);
    be->matmul_forward(be, a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
    be->gelu_forward(be, a->fch_gelu, a->fch, (size_t)N * 4 * C);
    be->matmul_forward(be, a->res3, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C);
    be->add_inplace(be, a->res3, a->res2, (size_t)N * C); /* res3 = res2 + mlp(ln2(res2)) */
}

/* dres[N,C]: in d(layer output), out d(layer input x). With g, weight grads
 * accumulate in g (the fused backward; ws points at the model's scratch, dres3 and
 * dres2 NULL: the residual gradient goes to the matmuls through m->dres); with g NULL
 * only the input gradient, and ws keeps each op's output gradient for
 * layer_backward_weight ([Note: W state]). One body for both, so the two compute dres
 * by the same calls. */
static void layer_backward(Model *m, LayerParams *g, float *dres, const LayerActs *a,
                           const LayerParams *p, const float *x, const LayerWState *ws) {
    const Backend *be = m->be;
    int B = m->B, T = m->T, N = B * T, C = m->d.C, NH = m->d.NH;
    size_t NC = (size_t)N * C;
    LayerParams none = {0};
    if (!g) g = &none; /* NULL weight grads: the ops skip them */
    /* [Note: operand activations] in backend.h: an fp32 operand is dres itself */
    void *dr = ws->dres3 ? ws->dres3 : m->dres ? m->dres : dres;
    if (dr != dres) be->to_operand(be, dr, dres, NC);
    be->matmul_backward(be, m->dbig, g->fcprojw, g->fcprojb, dr, a->fch_gelu, p->fcprojw, N, 4 * C, C);
    be->gelu_backward(be, ws->dfch, a->fch, m->dbig, (size_t)N * 4 * C);
    be->matmul_backward(be, ws->dln2, g->fcw, g->fcb, ws->dfch, a->ln2, p->fcw, N, C, 4 * C);
    /* the MLP branch's gradient joins the residual path: dres = d(res2) */
    be->layernorm_backward(be, dres, g->ln2w, g->ln2b, ws->dln2, a->res2, a->ln2_mean, a->ln2_rstd, p->ln2w, N, C,
                           m->scratch);
    dr = ws->dres2 ? ws->dres2 : m->dres ? m->dres : dres;
    if (dr != dres) be->to_operand(be, dr, dres, NC);
    be->matmul_backward(be, m->dmid, g->attprojw, g->attprojb, dr, a->atty, p->attprojw, N, C, C);
    be->attention_backward(be, ws->dqkv, m->dmid, a->qkv, a->atty, a->att, B, T, C, NH, m->scratch);
    be->matmul_backward(be, ws->dln1, g->qkvw, g->qkvb, ws->dqkv, a->ln1, p->qkvw, N, C, 3 * C);
    /* the attention branch's gradient joins too: dres = d(x) */
    be->layernorm_backward(be, dres, g->ln1w, g->ln1b, ws->dln1, x, a->ln1_mean, a->ln1_rstd, p->ln1w, N, C,
                           m->scratch);
}

/* The weight half: the same weight-gradient calls as the fused layer_backward, each
 * on the output gradient the input half kept in ws. */
static void layer_backward_weight(Model *m, LayerParams *g, const LayerActs *a, const LayerParams *p,
                                  const float *x, const LayerWState *ws) {
    const Backend *be = m->be;
    int N = m->B * m->T, C = m->d.C;
    be->matmul_backward(be, NULL, g->fcprojw, g->fcprojb, ws->dres3, a->fch_gelu, p->fcprojw, N, 4 * C, C);
    be->matmul_backward(be, NULL, g->fcw, g->fcb, ws->dfch, a->ln2, p->fcw, N, C, 4 * C);
    be->layernorm_backward(be, NULL, g->ln2w, g->ln2b, ws->dln2, a->res2, a->ln2_mean, a->ln2_rstd, p->ln2w, N, C,
                           m->scratch);
    be->matmul_backward(be, NULL, g->attprojw, g->attprojb, ws->dres2, a->atty, p->attprojw, N, C, C);
    be->matmul_backward(be, NULL, g->qkvw, g->qkvb, ws->dqkv, a->ln1, p->qkvw, N, C, 3 * C);
    be->layernorm_backward(be, NULL, g->ln1w, g->ln1b, ws->dln1, x, a->ln1_mean, a->ln1_rstd, p->ln1w, N, C,
                           m->scratch);
}

/* [Note: chunked head] The head's logits are [N,Vp] fp32, 3.3 GB for GPT-2 124M at B = 16,
 * T = 1024: more than any layer's activations. So the last stage computes them in chunks
 * of R rows (m->logits_rows: be->logits_chunk_rows, all N when 0) through one [R,Vp]
 * buffer, the only one there is. Per chunk of rows r0..r0+R:
 *   logits[R,Vp] = lnf[r0..] @ head^T                          (matmul_forward)
 *   losses[r0..] = -log p(target); logits become dlogits       (crossentropy_forward_backward)
 *   dlnf[r0..]   = dlogits @ head, overwriting that chunk's rows (matmul_backward's dinp)
 *   dhead       += dlogits^T @ lnf[r0..]                        (matmul_backward's dw)
 * and validation only the first two (crossentropy_forward). Rows are independent, so a
 * row's loss, dlogits and dlnf are the unchunked ones but for the GEMM's own blocking (a
 * BLAS may sum a row differently in a GEMM of other height: OpenBLAS does, by a few
 * ulps); dhead is one GEMM per chunk summed instead of one GEMM: the same value to
 * summation order (test_model.c bounds both). The CPU backend keeps R = 0, one chunk:
 * its calls, and so its bits, are those of before the chunks.
 *
 * All of it, dhead too, runs in the forward ([Note: fused head]), with or without a
 * split backward: I and W start from dlnf as before, and every rank and schedule chunks
 * a microbatch alike, so schedules that trained the same bits still do (zero-bubble and
 * 1F1B: test_interp.c). Deferring dhead to W would keep each pending microbatch's
 * [N,Vp] dlogits alive until its W, the memory this note saves.
 *
 * R is the backend's: a chunk's GEMMs must stay large enough to fill the device, and
 * dhead [Vp,C] is read and written once per chunk (cuda/NOTES.md: the CUDA figures). */
static void head_forward(Model *m, ActSlot *a, const float *x, float dloss, int want_grad, double *loss) {
    const Backend *be = m->be;
    int N = m->B * m->T, C = m->d.C, V = m->d.V, Vp = m->d.Vp;
    be->layernorm_forward(be, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->lnfw, m->lnfb, N, C);
    size_t ob = pp_dtype_bytes(be->operand);
    void *dl = m->dlogits ? m->dlogits : m->logits; /* in place when the operand type is fp32 */
    int hold = be->weight_hold && !m->weights_held; /* converted once, not per chunk */
    if (hold) be->weight_hold(be, m->head, (size_t)Vp * C);
    for (int r0 = 0; r0 < N; r0 += m->logits_rows) {
        int R = N - r0 < m->logits_rows ? N - r0 : m->logits_rows;
        const void *xr = (const char *)a->lnf + (size_t)r0 * C * ob;
        be->matmul_forward(be, m->logits, xr, m->head, NULL, R, C, Vp);
        if (!want_grad) {
            be->crossentropy_forward(be, m->logits, m->losses + r0, a->targets + r0, R, V, Vp);
            continue;
        }
        /* [Note: fused head] the last stage's forward already turns the logits into
         * d(loss)/d(logits) and pushes them through the head, so only dlnf [N,C]
         * survives until backward, not [N,Vp] logits per in-flight microbatch. */
        be->crossentropy_forward_backward(be, dl, m->losses + r0, m->logits, a->targets + r0, dloss, R, V, Vp);
        be->matmul_backward(be, a->dlnf + (size_t)r0 * C, m->dhead, NULL, dl, xr, m->head, R, C, Vp);
    }
    if (hold) be->weight_hold(be, NULL, 0);
    if (loss) be->sum(be, loss, m->losses, (size_t)N);
}

static const float *layer_input(const ActSlot *a, int li) {
    return li == 0 ? a->input : a->layers[li - 1].res3;
}

/* The activations layer li of slot a has for its backward (weight_half: for
 * layer_backward_weight): the slot's own, or, where [Note: recompute] dropped some,
 * the same again from the kept ones by the forward's own calls. */
static const LayerActs *backward_acts(Model *m, const Chunk *ck, ActSlot *a, int li, int weight_half) {
    LayerActs *la = &a->layers[li];
    if (a->keep || li >= ck->nrc) return la;
    const Backend *be = m->be;
    int B = m->B, T = m->T, N = B * T, C = m->d.C, NH = m->d.NH;
    m->recomputes++;
    if (ck->recompute == PP_RECOMPUTE_FULL) {
        layer_forward(m, &m->lp[ck->l0 + li], &m->work, layer_input(a, li));
        return &m->work;
    }
    if (!weight_half) /* W does not read the probabilities */
        be->attention_forward(be, m->work.atty, la->att, la->qkv, B, T, C, NH);
    be->gelu_forward(be, la->fch_gelu, la->fch, (size_t)N * 4 * C);
    return la;
}

void model_forward(Model *m, int c, int s, float dloss, int want_grad, double *loss) {
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    if (ck->first)
        m->be->encoder_forward(m->be, a->input, a->tokens, m->wte, m->wpe, m->B, m->T, m->d.C);
    for (int l = ck->l0; l < ck->l1; l++)
        layer_forward(m, &m->lp[l], &a->layers[l - ck->l0], layer_input(a, l - ck->l0));
    if (ck->last) head_forward(m, a, layer_input(a, ck->l1 - ck->l0), dloss, want_grad, loss);
}

/* The backward of chunk c on slot s into s->grad: fused (weights, W state NULL) or the
 * input half (weights 0, W state set w). */
static void chunk_backward(Model *m, int c, int s, int weights, LayerWState *wstate) {
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    int N = m->B * m->T, C = m->d.C, nl = ck->l1 - ck->l0;
    LayerWState fused = {NULL, m->dfch, m->dmid, NULL, m->dqkv, m->dmid};
    if (ck->last) {
        m->be->zero(m->be, a->grad, (size_t)N * C * sizeof(float));
        m->be->layernorm_backward(m->be, a->grad, weights ? m->dlnfw : NULL, weights ? m->dlnfb : NULL, a->dlnf,
                                  layer_input(a, nl), a->lnf_mean, a->lnf_rstd, m->lnfw, N, C, m->scratch);
    }
    for (int l = ck->l1 - 1; l >= ck->l0; l--) {
        int li = l - ck->l0;
        const LayerActs *la = backward_acts(m, ck, a, li, 0);
        if (weights || li < ck->nrc) { /* fused, or W state in a set of its own */
            layer_backward(m, weights ? &m->lg[l] : NULL, a->grad, la, &m->lp[l], layer_input(a, li),
                           weights ? &fused : &wstate[li]);
            continue;
        }
        /* the douts in scratch, then into the layer's dead activations ([Note: W state]) */
        size_t NC = (size_t)N * C;
        LayerWState tmp = {m->dkeep, m->dfch, m->dkeep + NC, m->dkeep + 2 * NC, m->dqkv, m->dkeep + 3 * NC};
        LayerWState to = wstate_at(m, ck, a, li, wstate);
        layer_backward(m, NULL, a->grad, la, &m->lp[l], layer_input(a, li), &tmp);
        void *const *from = (void *const *)&tmp, *const *dst = (void *const *)&to;
        size_t sizes[NWS], bytes[NWS];
        wstate_sizes(NC, sizes);
        wstate_elem_bytes(m->be, bytes);
        for (size_t k = 0; k < NWS; k++) m->be->copy(m->be, dst[k], from[k], sizes[k] * bytes[k]);
    }
    if (ck->first && weights)
        m->be->encoder_backward(m->be, m->dwte, m->dwpe, a->grad, a->tokens, m->B, m->T, C);
}

void model_backward(Model *m, int c, int s) { chunk_backward(m, c, s, 1, NULL); }

void model_backward_input(Model *m, int c, int s, int w) {
    PP_CHECK(w >= 0 && w < m->chunks[c].nwstate);
    chunk_backward(m, c, s, 0, m->chunks[c].wstate[w]);
}

void model_backward_weight(Model *m, int c, int s, int w) {
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    int N = m->B * m->T, C = m->d.C, nl = ck->l1 - ck->l0;
    PP_CHECK(w >= 0 && w < ck->nwstate);
    if (ck->last)
        m->be->layernorm_backward(m->be, NULL, m->dlnfw, m->dlnfb, a->dlnf, layer_input(a, nl), a->lnf_mean,
                                  a->lnf_rstd, m->lnfw, N, C, m->scratch);
    for (int l = ck->l1 - 1; l >= ck->l0; l--) {
        int li = l - ck->l0;
        LayerWState ws = wstate_at(m, ck, a, li, ck->wstate[w]);
        layer_backward_weight(m, &m->lg[l], backward_acts(m, ck, a, li, 1), &m->lp[l], layer_input(a, li), &ws);
    }
    if (ck->first) /* s->grad holds d(embedding output), left by the input half */
        m->be->encoder_backward(m->be, m->dwte, m->dwpe, a->grad, a->tokens, m->B, m->T, C);
}

/* ---- memory plan ([Note: memory plan] in model.h) ---- */

void model_plan(ModelPlan *p, const ModelDims *d, const ChunkSpec *specs, const ChunkRecompute *rc,
                const int *nwstate, int nchunks, int B, int T, size_t att_floats, size_t operand_bytes,
                int logits_rows, int nopt, int nblocks_keep, int nblocks_drop) {
    size_t N = (size_t)B * T, C = d->C, f = sizeof(float), ob = operand_bytes, params = 0, head_tied = 0;
    size_t blk[2] = {0, 0}, ab[NACTS], layer_all = 0, layer_raw = 0;
#define PAD(n) (rc ? block_pad(n) : (n)) /* blocks align each tensor ([Note: activation blocks]) */
    act_bytes_of(N, C, att_floats, ob, ab);
    for (size_t k = 0; k < NACTS; k++) layer_all += PAD(ab[k]), layer_raw += ab[k];
    int first = 0, last = 0, full = 0, sel = 0;
    size_t dkeep = 0; /* the input half's scratch for in-layer W state, once per model */
    memset(p, 0, sizeof *p);
    for (int c = 0; c < nchunks; c++) first |= specs[c].first, last |= specs[c].last;
    for (int c = 0; c < nchunks; c++) {
        const ChunkSpec *k = &specs[c];
        int mode = rc ? rc[c].mode : PP_RECOMPUTE_NONE, nl = k->l1 - k->l0,
            nrc = chunk_nrc(mode, rc ? rc[c].layers : 0, nl);
        /* input and grad; the last stage's lnf (operand), its statistics and dlnf */
        size_t own = 2 * N * C * f + (k->last ? N * C * ob + 2 * N * f + N * C * f : 0), kept = (size_t)nl * layer_all;
        /* a layer that drops keeps res3 (full), or all but att and fch_gelu (selective) */
        size_t drops = mode == PP_RECOMPUTE_FULL ? layer_all - PAD(ab[ACT_RES3]) : PAD(ab[ACT_ATT]) + PAD(ab[ACT_GELU]);
        size_t dropped = kept - (size_t)nrc * drops;
        if (rc) { /* the slot's own part; the layers in the rank's blocks */
            p->slots += (size_t)k->nslots * own;
            blk[1] = kept > blk[1] ? kept : blk[1];
            blk[0] = dropped > blk[0] ? dropped : blk[0];
        } else {
            p->slots += (size_t)k->nslots * (own + kept);
        }
        p->recv += f * (size_t)k->nrecv * N * C;
        for (int li = 0; li < nl; li++) /* [Note: W state] */
            p->wstate += (size_t)(nwstate ? nwstate[c] : 0) * wstate_layer_bytes(li, nrc, att_floats, N, C, ob);
        if (nwstate && nwstate[c] > 0 && nl > nrc) dkeep = 4 * N * C * f;
        if (rc && chunk_uses_work(mode, nrc, nblocks_drop)) {
            full |= mode == PP_RECOMPUTE_FULL;
            sel |= mode == PP_RECOMPUTE_SELECTIVE;
        }
        params += (size_t)nl * (12 * C * C + 13 * C);
        if (k->first) params += (size_t)d->Vp * C + (size_t)d->maxT * C;
        if (k->last) params += 2 * C + (d->tied && first ? 0 : (size_t)d->Vp * C); /* a shared wte counts once */
    }
#undef PAD
    if (rc) p->slots += (size_t)nblocks_keep * blk[1] + (size_t)nblocks_drop * blk[0];
    if (last) p->logits = f * (size_t)head_rows(logits_rows, B, T) * d->Vp; /* [Note: chunked head] */
    p->slots += p->logits;
    p->wstate += dkeep;
    if (d->tied && first && last) head_tied = (size_t)d->Vp * C; /* [Note: tied gradient order] */
    /* the workspace: a whole layer (full), or what selective recomputes: att, atty, fch_gelu */
    p->work = full ? layer_raw : sel ? ab[ACT_ATT] + ab[ACT_ATTY] + ab[ACT_GELU] : 0;
    p->params = f * params;
    p->grads = f * (params + head_tied);
    p->optimizer = f * (size_t)nopt * params;
}

size_t model_plan_activations(const ModelPlan *p) { return p->slots + p->work + p->recv + p->wstate; }

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

int model_load_llmc(Model *m, const char *path, char *err, size_t errlen) {
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
                       "%s: model shape V=%d Vp=%d L=%d NH=%d C=%d maxT=%d does not match the config's "
                       "V=%d L=%d NH=%d C=%d maxT=%d (maxT may be larger in the file, and Vp >= V)",
                       path, fV, fVp, fL, fNH, fC, fT, d->V, d->L, d->NH, d->C, d->maxT);
    }
    size_t C = fC, L = fL, expect = 1024 + 4 * ((size_t)fVp * C + (size_t)fT * C + L * (12 * C * C + 13 * C) + 2 * C);
    if (fseek(f, 0, SEEK_END) != 0 || (size_t)ftell(f) != expect) {
        long got = ftell(f);
        fclose(f);
        return pp_errf(err, errlen, PP_EUSAGE, "%s: file has %ld bytes, its header implies %zu (truncated?)",
                       path, got, expect);
    }
    /* File layout: wte[Vp,C], wpe[maxT,C], then each per-layer kind stacked over L,
     * then lnfw, lnfb. */
    long off = 1024, ok = 1;
    float *host = pp_malloc(model_largest_tensor(m) * sizeof(float));
    if (m->wte) ok &= read_at(m, f, off, m->wte, (size_t)d->V * C, host);
    if (m->head && !d->tied) ok &= read_at(m, f, off, m->head, (size_t)d->V * C, host);
    off += 4L * fVp * C;
    if (m->wpe) ok &= read_at(m, f, off, m->wpe, (size_t)d->maxT * C, host);
    off += 4L * fT * C;
    for (int k = 0; k < P_NLAYER; k++) {
        int rows, cols;
        layer_shape(k, fC, &rows, &cols);
        size_t n = (size_t)rows * (cols ? cols : 1);
        for (int l = 0; l < fL; l++) {
            float *dst = ((float **)&m->lp[l])[k];
            if (dst) ok &= read_at(m, f, off + 4L * l * n, dst, n, host);
        }
        off += 4L * fL * n;
    }
    if (m->lnfw) ok &= read_at(m, f, off, m->lnfw, C, host) && read_at(m, f, off + 4L * C, m->lnfb, C, host);
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

int model_save_llmc(const Model *m, const char *path, char *err, size_t errlen) {
    const ModelDims *d = &m->d;
    for (int l = 0; l < d->L; l++)
        if (!m->lp[l].qkvw)
            return pp_errf(err, errlen, PP_ERUNTIME, "model_save_llmc needs every layer; layer %d is not held", l);
    if (!m->wte || !m->wpe || !m->lnfw)
        return pp_errf(err, errlen, PP_ERUNTIME, "model_save_llmc needs the embeddings and the final norm");
    if (!d->tied)
        return pp_errf(err, errlen, PP_EUSAGE, "llm.c's format has no separate lm_head: untied embeddings "
                       "(model.tie_embeddings: false) cannot be written to %s", path);
    PPFile pf; /* [Note: atomic file writes] in common.c */
    int rc = pp_file_create(&pf, path, NULL, err, errlen);
    if (rc != PP_OK) return rc;
    FILE *f = pf.f;
    int h[256] = {LLMC_MAGIC, LLMC_VERSION, d->maxT, d->V, d->L, d->NH, d->C, d->Vp};
    size_t C = d->C;
    float *host = pp_malloc(model_largest_tensor(m) * sizeof(float));
    fwrite(h, sizeof h, 1, f);
    write_from(m, f, m->wte, (size_t)d->Vp * C, host);
    write_from(m, f, m->wpe, (size_t)d->maxT * C, host);
    for (int k = 0; k < P_NLAYER; k++) {
        int rows, cols;
        layer_shape(k, d->C, &rows, &cols);
        size_t n = (size_t)rows * (cols ? cols : 1);
        for (int l = 0; l < d->L; l++) write_from(m, f, ((float *const *)&m->lp[l])[k], n, host);
    }
    write_from(m, f, m->lnfw, C, host);
    write_from(m, f, m->lnfb, C, host);
    free(host);
    return pp_file_commit(&pf, err, errlen); /* fails on any failed fwrite above */
}
