/* model.c — the stage engine: the parameter table, initialisation, activation slots and
 * blocks, recompute, W state, the memory plan and forward/backward of a chunk of decoder
 * layers on one microbatch; the layers, embedding and head are the Arch's (arch.h). */
#include "model.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

_Static_assert(ARCH_SEL == 1 << PP_RECOMPUTE_SELECTIVE && ARCH_FULL == 1 << PP_RECOMPUTE_FULL,
               "ArchBuf.keep / .work: one bit per recompute mode");

/* Tensors outside the layers at most: wte, the head and ARCH_MAX_GLOBALS of the Arch's. */
#define MAX_GLOBALS (2 + ARCH_MAX_GLOBALS)

static const Arch *const k_archs[] = {&arch_gpt2, &arch_llama, &arch_qwen2, &arch_mistral};
#define N_ARCHS (sizeof k_archs / sizeof k_archs[0])

const Arch *arch_find(const char *name) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(k_archs[i]->name, name)) return k_archs[i];
    return NULL;
}

const Arch *arch_find_hf(const char *model_type) {
    for (size_t i = 0; i < N_ARCHS; i++)
        for (const char *const *t = k_archs[i]->hf ? k_archs[i]->hf->model_types : NULL; t && *t;
             t++)
            if (!strcmp(*t, model_type)) return k_archs[i];
    return NULL;
}

void arch_hf_names(char *buf, size_t n) {
    buf[0] = '\0';
    for (size_t i = 0; i < N_ARCHS; i++)
        for (const char *const *t = k_archs[i]->hf ? k_archs[i]->hf->model_types : NULL; t && *t;
             t++)
            pp_strappendf(buf, n, "%s%s", buf[0] ? ", " : "", *t);
}

/* d's architecture (dims without one are a caller's bug). */
static const Arch *model_arch(const ModelDims *d) {
    PP_CHECK(d->arch);
    return d->arch;
}

ModelDims model_dims(const Config *cfg) {
    const Arch *a = arch_find(cfg->arch);
    PP_CHECK(a); /* the config's choices */
    int gpt2 = a == &arch_gpt2; /* a config filled in directly may leave the 0s and auto */
    ModelDims d = {.V = cfg->vocab_size,
                   .Vp = cfg->padded_vocab_size,
                   .maxT = cfg->max_seq_len,
                   .L = cfg->n_layers,
                   .NH = cfg->n_heads,
                   .C = cfg->dim,
                   .tied = cfg->tie_embeddings < 0 ? gpt2 : cfg->tie_embeddings,
                   .arch = a,
                   .NKV = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads,
                   .F = cfg->ffn_dim || !gpt2 ? cfg->ffn_dim : 4 * cfg->dim,
                   .eps = cfg->norm_eps,
                   .rope = {cfg->rope_theta, !strcmp(cfg->rope_scaling, "llama3"), cfg->rope_factor,
                            cfg->rope_low_freq_factor, cfg->rope_high_freq_factor,
                            cfg->rope_original_max_seq_len}};
    return d;
}

/* ---- sizes from the Arch ---- */

/* Elements of tensor k of a layer (global 0) or of the Arch's globals (global 1). */
static size_t tensor_numel(const ModelDims *d, int global, int k) {
    int s[2];
    model_arch(d)->shape(d, global, k, s);
    return (size_t)s[0] * (s[1] ? s[1] : 1);
}

/* Parameters of one layer, and of the Arch's globals on the first or the last stage. */
static size_t layer_numel(const ModelDims *d) {
    size_t n = 0;
    for (int k = 0; k < model_arch(d)->nlayer_params; k++) n += tensor_numel(d, 0, k);
    return n;
}

static size_t globals_numel(const ModelDims *d, int stage) {
    const Arch *A = model_arch(d);
    size_t n = 0;
    for (int k = 0; k < A->nglobals; k++)
        if (A->globals[k].stage == stage) n += tensor_numel(d, 1, k);
    return n;
}

/* The buffers of one of the Arch's sets (ARCH_ACTS, ...) and their count. */
static const ArchBuf *set_bufs(const Arch *A, int set, int *n) {
    const ArchBuf *b[] = {A->acts, A->head, A->ws, A->scratch, A->consts};
    int c[] = {A->nacts, A->nhead, A->nws, A->nscratch, A->nconst};
    PP_CHECK(c[set] <= ARCH_MAX_BUFS);
    *n = c[set];
    return b[set];
}

size_t model_type_bytes(int type, size_t ob, size_t rb) {
    return type == ARCH_OPERAND ? ob : type == ARCH_RESIDUAL ? rb : sizeof(float);
}

/* Bytes of each buffer of a set for N tokens, att floats of saved attention state,
 * operand elements of ob bytes ([Note: operand activations] in backend.h) and residual
 * ones of rb ([Note: residual stream type]). Returns the count. */
static int set_bytes(const ModelDims *d, int set, size_t N, size_t att, size_t ob, size_t rb,
                     size_t bytes[ARCH_MAX_BUFS]) {
    const Arch *A = model_arch(d);
    int n;
    const ArchBuf *b = set_bufs(A, set, &n);
    for (int k = 0; k < n; k++)
        bytes[k] = A->elems(d, set, k, N, att) * model_type_bytes(b[k].type, ob, rb);
    return n;
}

size_t model_total_params(const ModelDims *d) {
    size_t VC = (size_t)d->Vp * d->C;
    size_t n =
        VC + d->L * layer_numel(d) + globals_numel(d, ARCH_FIRST) + globals_numel(d, ARCH_LAST);
    return d->tied ? n : n + VC;
}

void model_arch_costs(const ModelDims *d, int T, ArchCosts *a) { model_arch(d)->costs(d, T, a); }

BackendSizes model_backend_sizes(const ModelDims *d, int B, int T, size_t params) {
    const Arch *A = model_arch(d);
    size_t width = d->C, weight = (size_t)d->Vp * d->C; /* the residual stream; the head */
    for (int k = 0; k < A->nlayer_params; k++) { /* a layer's matrices: its matmuls' */
        int s[2];
        A->shape(d, 0, k, s);
        if (!s[1]) continue; /* a vector */
        size_t wide = (size_t)(s[0] > s[1] ? s[0] : s[1]), n = (size_t)s[0] * s[1];
        width = wide > width ? wide : width;
        weight = n > weight ? n : weight;
    }
    return (BackendSizes){B * T, T, d->NH, d->C / d->NH, d->Vp, width, weight, params};
}

size_t model_boundary_elems(const ModelDims *d, int B, int T) { return (size_t)B * T * d->C; }

size_t model_boundary_bytes(const Model *m) {
    return model_boundary_elems(&m->d, m->B, m->T) * pp_dtype_bytes(m->be->residual);
}

size_t model_boundary_grad_bytes(const Model *m) {
    return model_boundary_elems(&m->d, m->B, m->T) * sizeof(float);
}

/* One of the four's room: N C operands, rounded up to 16 bytes so that each starts at a
 * 16-byte address as the fused backward's buffers do (the norm kernels' vector paths, and so
 * the bits of a split backward's W half, depend on it). */
static size_t ws_four_room(size_t N, size_t C, size_t operand_bytes) {
    return (N * C * operand_bytes + 15) / 16 * 16;
}

int model_ws_four_fit(size_t att_floats, size_t N, size_t C, size_t operand_bytes) {
    return att_floats * sizeof(float) >= 4 * ws_four_room(N, C, operand_bytes);
}

/* Operands that hold the four at any operand size: each N C rounded up to 8 elements (16
 * bytes at bf16, 32 at fp32: at least ws_four_room). */
size_t model_ws_four_elems(size_t N, size_t C) { return 4 * ((N * C + 7) / 8 * 8); }

void model_ws_four(const Model *m, float *att, void **dln2, void **dln1, void **dres3,
                   void **dres2) {
    size_t room = ws_four_room((size_t)m->B * m->T, m->d.C, pp_dtype_bytes(m->be->operand));
    char *p = (char *)att;
    *dln2 = p;
    *dln1 = p + room;
    *dres3 = p + 2 * room;
    *dres2 = p + 3 * room;
}

double model_layer_act_bytes(const ModelDims *d, double N, double att, size_t ob, size_t rb,
                             int mode) {
    const Arch *A = model_arch(d);
    size_t bytes[ARCH_MAX_BUFS], sum = 0;
    int n = set_bytes(d, ARCH_ACTS, (size_t)N, (size_t)att, ob, rb, bytes);
    for (int k = 0; k < n; k++) /* [Note: recompute] in model.h */
        if (mode == PP_RECOMPUTE_NONE || A->acts[k].keep & 1 << mode) sum += bytes[k];
    return (double)sum;
}

double model_head_act_bytes(const ModelDims *d, double N, size_t ob, size_t rb) {
    size_t bytes[ARCH_MAX_BUFS], sum = 0;
    int n = set_bytes(d, ARCH_HEAD, (size_t)N, 0, ob, rb, bytes);
    for (int k = 0; k < n; k++) sum += bytes[k];
    return (double)sum;
}

double model_train_flops_per_token(const ModelDims *d, int T) {
    ArchCosts a;
    model_arch_costs(d, T, &a);
    return 3 * (d->L * a.layer_flops + a.head_flops);
}

/* ---- the tensor table ---- */

static void build_table(Model *m);

int model_dims_check(const ModelDims *d, char *err, size_t errlen) {
#define BAD(...) return pp_errf(err, errlen, PP_EUSAGE, __VA_ARGS__)
    const Arch *A = model_arch(d);
    int most = (INT_MAX - MAX_GLOBALS) / A->nlayer_params;
    if (d->V < 1) BAD("V=%d: the vocabulary must have at least 1 token", d->V);
    if (d->Vp < d->V) BAD("Vp=%d: the padded vocabulary must be >= V=%d", d->Vp, d->V);
    if (d->maxT < 1) BAD("maxT=%d: the position table needs at least 1 row", d->maxT);
    if (d->L < 1 || d->L > most) BAD("L=%d: the number of layers must be in [1, %d]", d->L, most);
    if (d->NH < 1) BAD("NH=%d: the number of heads must be >= 1", d->NH);
    int rc = A->dims_check(d, err, errlen);
    if (rc != PP_OK) return rc;
    if (d->tied != 0 && d->tied != 1) BAD("tied=%d: must be 0 or 1", d->tied);
    return PP_OK;
#undef BAD
}

ParamTensor *model_table(const ModelDims *d, int *n) {
    Model *m = pp_calloc(1, sizeof *m); /* only the table is filled */
    m->d = *d;
    m->arch = model_arch(d);
    m->nchunks = 1;
    m->chunks[0] = (Chunk){.stage = 0, .l0 = 0, .l1 = d->L, .first = 1, .last = 1};
    build_table(m);
    ParamTensor *t = m->tensors;
    *n = m->ntensors;
    free(m->tensor_index);
    free(m);
    return t;
}

/* [Note: tensor index] model_find runs once per tensor in the table's own duplicate check,
 * in bind and in the Hugging Face import, so a linear search made building a model
 * quadratic in its tensors: n_layers 100000 (10^6 tensors) spun for many minutes before
 * any check. The table keeps an open-addressing index of its names (FNV-1a, linear
 * probing, at most half full), filled by add_tensor. */
static size_t name_slot(const Model *m, const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
    size_t i = h & (m->tensor_index_cap - 1);
    while (m->tensor_index[i] >= 0 && strcmp(m->tensors[m->tensor_index[i]].name, name) != 0)
        i = (i + 1) & (m->tensor_index_cap - 1);
    return i;
}

int model_find(const Model *m, const char *name) {
    return m->tensor_index ? m->tensor_index[name_slot(m, name)] : -1;
}

int model_chunk_holds(const Model *m, int c, const ParamTensor *t) {
    const Chunk *ck = &m->chunks[c];
    int layer;
    if (sscanf(t->name, "h.%d.", &layer) == 1) return layer >= ck->l0 && layer < ck->l1;
    if (!strcmp(t->name, "wte")) return ck->first || (ck->last && m->d.tied);
    for (int k = 0; k < m->arch->nglobals; k++)
        if (!strcmp(t->name, m->arch->globals[k].name))
            return m->arch->globals[k].stage == ARCH_FIRST ? ck->first : ck->last;
    return ck->last; /* lm_head */
}

/* Append a tensor of shape s (s[1] 0: a vector) to the table unless this rank already
 * holds it. AdamW decays the 2-D ones. */
static void add_tensor(Model *m, int cap, const char *name, const int s[2], int init) {
    size_t slot = name_slot(m, name);
    if (m->tensor_index[slot] >= 0) return;
    PP_CHECK(m->ntensors < cap);
    m->tensor_index[slot] = m->ntensors;
    ParamTensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = s[1] ? 2 : 1;
    t->shape[0] = s[0];
    t->shape[1] = s[1];
    t->numel = (size_t)s[0] * (s[1] ? s[1] : 1);
    t->offset = m->nparams;
    t->dtype = PP_F32;
    t->decay = s[1] != 0;
    t->init = init;
    m->nparams += t->numel;
}

static float *tensor_ptr(Model *m, float *base, const char *name) {
    int i = model_find(m, name);
    return i < 0 ? NULL : base + m->tensors[i].offset;
}

/* The Arch's globals of one stage (ARCH_FIRST, ARCH_LAST) into the table. */
static void add_globals(Model *m, int cap, int stage) {
    const Arch *A = m->arch;
    for (int k = 0; k < A->nglobals; k++) {
        int s[2];
        if (A->globals[k].stage != stage) continue;
        A->shape(&m->d, 1, k, s);
        add_tensor(m, cap, A->globals[k].name, s, A->globals[k].init);
    }
}

/* The table in the flat buffer's order: per chunk, wte and the first stage's globals,
 * the layers, the last stage's globals and the head. */
static void build_table(Model *m) {
    const ModelDims *d = &m->d;
    const Arch *A = m->arch;
    int cap = MAX_GLOBALS + d->L * A->nlayer_params, vocab[2] = {d->Vp, d->C};
    char name[32];
    PP_CHECK(A->nglobals <= ARCH_MAX_GLOBALS);
    m->tensors = pp_calloc(cap, sizeof(ParamTensor));
    for (m->tensor_index_cap = 16; m->tensor_index_cap < 2 * (size_t)cap;)
        m->tensor_index_cap *= 2;
    m->tensor_index = pp_malloc(m->tensor_index_cap * sizeof *m->tensor_index);
    memset(m->tensor_index, 0xff, m->tensor_index_cap * sizeof *m->tensor_index); /* all -1 */
    for (int c = 0; c < m->nchunks; c++) {
        const Chunk *ck = &m->chunks[c];
        if (ck->first) {
            add_tensor(m, cap, "wte", vocab, ARCH_INIT_NORMAL);
            add_globals(m, cap, ARCH_FIRST);
        }
        for (int l = ck->l0; l < ck->l1; l++)
            for (int k = 0; k < A->nlayer_params; k++) {
                int s[2];
                A->shape(d, 0, k, s);
                snprintf(name, sizeof name, "h.%d.%s", l, A->layer_params[k].name);
                add_tensor(m, cap, name, s, A->layer_params[k].init);
            }
        if (ck->last) {
            add_globals(m, cap, ARCH_LAST);
            add_tensor(m, cap, d->tied ? "wte" : "lm_head", vocab, ARCH_INIT_NORMAL);
        }
    }
}

/* Point the per-layer and global pointers of params (or grads) into base. */
static void bind(Model *m, float *base, float **lp, float **gp, float **wte, float **head) {
    const Arch *A = m->arch;
    char name[32];
    for (int l = 0; l < m->d.L; l++)
        for (int k = 0; k < A->nlayer_params; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, A->layer_params[k].name);
            lp[(size_t)l * A->nlayer_params + k] = tensor_ptr(m, base, name);
        }
    for (int k = 0; k < A->nglobals; k++) gp[k] = tensor_ptr(m, base, A->globals[k].name);
    *wte = tensor_ptr(m, base, "wte");
    *head = tensor_ptr(m, base, m->d.tied ? "wte" : "lm_head");
}

/* Layer l's parameter (or gradient) pointers, in the Arch's order. */
static float *const *layer_params(const Model *m, float *const *lp, int l) {
    return lp + (size_t)l * m->arch->nlayer_params;
}

/* ---- activation slots, blocks and the workspace ---- */

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

static int set_bytes_of(const Model *m, int set, size_t bytes[ARCH_MAX_BUFS]) {
    return set_bytes(&m->d, set, (size_t)m->B * m->T, m->att_floats, pp_dtype_bytes(m->be->operand),
                     pp_dtype_bytes(m->be->residual), bytes);
}

/* Layer li's activations in slot a. */
static void **slot_acts(const Model *m, const ActSlot *a, int li) {
    return a->acts + (size_t)li * m->arch->nacts;
}

/* Whether activation k of layer li is the slot's own (1) or the workspace's (0): all
 * kept in a keep slot and on layers that do not recompute; else what the Arch keeps
 * under the chunk's mode ([Note: recompute]). */
static int member_kept(const Model *m, const Chunk *ck, int li, int keep, int k) {
    if (keep || li >= ck->nrc || ck->recompute == PP_RECOMPUTE_NONE) return 1;
    return (m->arch->acts[k].keep & 1 << ck->recompute) != 0;
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
static size_t block_pad(size_t bytes) {
    return (bytes + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
}

/* Lay the layer activations of a slot of chunk ck (keep or not) out from base: kept
 * members carved in order, dropped ones the workspace's. base NULL: only count.
 * Returns the bytes used. */
static size_t layers_carve(const Model *m, const Chunk *ck, void **acts, int keep, char *base) {
    size_t sizes[ARCH_MAX_BUFS], used = 0;
    int n = set_bytes_of(m, ARCH_ACTS, sizes);
    for (int li = 0; li < ck->l1 - ck->l0; li++)
        for (int k = 0; k < n; k++) {
            void **f = acts ? acts + (size_t)li * n + k : NULL;
            if (!member_kept(m, ck, li, keep, k)) {
                if (f) *f = m->work[k];
                continue;
            }
            if (f) *f = base + used;
            used += block_pad(sizes[k]);
        }
    return used;
}

/* A slot's own layer activations (model_init: no blocks), every member kept. */
static void layers_own(Model *m, const Chunk *ck, void **acts) {
    size_t sizes[ARCH_MAX_BUFS];
    int n = set_bytes_of(m, ARCH_ACTS, sizes);
    for (int li = 0; li < ck->l1 - ck->l0; li++)
        for (int k = 0; k < n; k++) acts[(size_t)li * n + k] = act_alloc(m, sizes[k]);
}

static void slot_init(Model *m, const Chunk *ck, ActSlot *a) {
    size_t N = (size_t)m->B * m->T;
    memset(a, 0, sizeof *a);
    a->keep = 1;
    a->block = -1;
    a->input = act_alloc(m, model_boundary_bytes(m));
    a->grad = act_alloc(m, model_boundary_grad_bytes(m));
    a->tokens = dev_alloc(m, N * sizeof(int));
    a->targets = dev_alloc(m, N * sizeof(int));
    a->acts = pp_calloc((size_t)(ck->l1 - ck->l0) * m->arch->nacts, sizeof(void *));
    if (!m->pooled) layers_own(m, ck, a->acts); /* else model_slot_attach */
    if (ck->last) {
        size_t bytes[ARCH_MAX_BUFS];
        int n = set_bytes_of(m, ARCH_HEAD, bytes);
        for (int k = 0; k < n; k++) a->head[k] = act_alloc(m, bytes[k]);
    }
}

static void slot_free(const Model *m, const Chunk *ck, ActSlot *a) {
    const Backend *be = m->be;
    void *own[] = {a->input, a->grad, a->tokens, a->targets};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) be->dealloc(be, own[k]);
    for (int k = 0; k < m->arch->nhead; k++) be->dealloc(be, a->head[k]);
    size_t n = (size_t)(ck->l1 - ck->l0) * m->arch->nacts;
    for (size_t k = 0; k < n && !m->pooled; k++) be->dealloc(be, a->acts[k]); /* else blocks */
    free(a->acts);
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
    PP_CHECK(m->pooled && c >= 0 && c < m->nchunks && s >= 0 && s < m->chunks[c].nslots && b >= 0 &&
             b < m->nblocks);
    ActSlot *a = &m->chunks[c].slots[s];
    a->keep = b < m->nblocks_keep;
    a->block = b;
    layers_carve(m, &m->chunks[c], a->acts, a->keep, m->blocks[b]);
}

/* Whether the workspace holds activation k when some chunk recomputes fully (full) and
 * some selectively (sel). */
static int work_holds(const ArchBuf *b, int full, int sel) {
    return (full && b->work & ARCH_FULL) || (sel && b->work & ARCH_SEL);
}

/* The recompute workspace: what the Arch's recompute writes under the modes in use (a
 * whole layer for GPT-2's full). */
static void work_init(Model *m) {
    int full = 0, sel = 0;
    for (int c = 0; c < m->nchunks; c++) {
        const Chunk *ck = &m->chunks[c];
        if (!chunk_uses_work(ck->recompute, ck->nrc, m->nblocks - m->nblocks_keep)) continue;
        full |= ck->recompute == PP_RECOMPUTE_FULL;
        sel |= ck->recompute == PP_RECOMPUTE_SELECTIVE;
    }
    if (!full && !sel) return;
    size_t sizes[ARCH_MAX_BUFS];
    int n = set_bytes_of(m, ARCH_ACTS, sizes);
    for (int k = 0; k < n; k++) {
        if (!work_holds(&m->arch->acts[k], full, sel)) continue;
        m->work[k] = dev_alloc(m, sizes[k]);
        m->work_bytes += sizes[k];
    }
}

/* ---- W state ([Note: W state] in model.h) ---- */

/* Whether W state member k of layer li needs memory of its own: every member of a layer
 * that recomputes (li < nrc), else those the Arch does not place in the activations. */
static int ws_own(const ModelDims *d, int li, int nrc, size_t N, size_t att, size_t ob, int k) {
    return li < nrc || !model_arch(d)->ws_in_acts(d, N, att, ob, k);
}

/* Bytes of W state set memory layer li of a chunk needs. */
static size_t ws_layer_bytes(const ModelDims *d, int li, int nrc, size_t N, size_t att, size_t ob,
                             size_t rb) {
    size_t bytes[ARCH_MAX_BUFS], sum = 0;
    int n = set_bytes(d, ARCH_WS, N, att, ob, rb, bytes);
    for (int k = 0; k < n; k++)
        if (ws_own(d, li, nrc, N, att, ob, k)) sum += bytes[k];
    return sum;
}

/* Layer li's W state pointers in set ws. */
static void **set_ws(const Model *m, void **ws, int li) { return ws + (size_t)li * m->arch->nws; }

static void wstate_init(Model *m, const Chunk *ck, void **ws) {
    size_t N = (size_t)m->B * m->T, att = m->att_floats, ob = pp_dtype_bytes(m->be->operand);
    size_t bytes[ARCH_MAX_BUFS];
    int n = set_bytes_of(m, ARCH_WS, bytes);
    for (int l = 0; l < ck->l1 - ck->l0; l++)
        for (int k = 0; k < n; k++) {
            if (!ws_own(&m->d, l, ck->nrc, N, att, ob, k)) continue;
            set_ws(m, ws, l)[k] = dev_alloc(m, bytes[k]);
            m->wstate_bytes += bytes[k];
        }
}

/* Where layer li of slot a keeps its W state, into out: set's when the layer
 * recomputes, else partly its own activations (Arch.ws_place). */
static void wstate_at(const Model *m, const Chunk *ck, const ActSlot *a, int li, void **set,
                      void **out) {
    memcpy(out, set_ws(m, set, li), m->arch->nws * sizeof(void *));
    if (li >= ck->nrc) m->arch->ws_place(m, slot_acts(m, a, li), out);
}

static void wstate_free(const Model *m, const Chunk *ck, void **ws) {
    size_t n = (size_t)(ck->l1 - ck->l0) * m->arch->nws;
    for (size_t k = 0; k < n; k++) m->be->dealloc(m->be, ws[k]);
    free(ws);
}

/* Bytes of the Arch's scratch buffers allocated when (ArchBuf.when). */
static size_t scratch_bytes(const ModelDims *d, size_t N, size_t ob, size_t rb, int when) {
    size_t bytes[ARCH_MAX_BUFS], sum = 0;
    int n = set_bytes(d, ARCH_SCRATCH, N, 0, ob, rb, bytes);
    for (int k = 0; k < n; k++)
        if (model_arch(d)->scratch[k].when == when) sum += bytes[k];
    return sum;
}

/* Allocate the Arch's scratch buffers of one kind (ArchBuf.when); returns their bytes. */
static size_t scratch_init(Model *m, int when) {
    size_t bytes[ARCH_MAX_BUFS], sum = 0;
    int n = set_bytes_of(m, ARCH_SCRATCH, bytes);
    for (int k = 0; k < n; k++)
        if (m->arch->scratch[k].when == when && !m->bufs[k]) {
            m->bufs[k] = dev_alloc(m, bytes[k]);
            sum += bytes[k];
        }
    return sum;
}

/* The Arch's constants ([Note: Arch table] in arch.h): allocated and filled once. */
static void consts_init(Model *m) {
    size_t bytes[ARCH_MAX_BUFS];
    int n = set_bytes_of(m, ARCH_CONST, bytes);
    for (int k = 0; k < n; k++) {
        float *host = pp_malloc(bytes[k] ? bytes[k] : 1);
        m->arch->const_fill(&m->d, k, host);
        m->consts[k] = dev_alloc(m, bytes[k]);
        m->be->to_device(m->be, m->consts[k], host, bytes[k]);
        m->be->wait(m->be); /* host is freed */
        free(host);
    }
}

/* ---- building ---- */

/* Rows of the head's logits buffer for a backend's chunk rows ([Note: chunked head]):
 * all B*T when it asks for 0 or for more. */
static int head_rows(int chunk_rows, int B, int T) {
    return chunk_rows > 0 && chunk_rows < B * T ? chunk_rows : B * T;
}

size_t model_logits_bytes(const ModelDims *d, int B, int T, size_t logits_bytes, int logits_rows) {
    return logits_bytes * (size_t)head_rows(logits_rows, B, T) * d->Vp;
}

/* Zeroed device memory for n floats. */
static float *dev_zeros(const Model *m, size_t n) {
    float *p = dev_alloc(m, n * sizeof(float));
    m->be->zero(m->be, p, n * sizeof(float));
    return p;
}

static void init_model(Model *m, const ModelDims *d, const ChunkSpec *specs,
                       const ChunkRecompute *rc, int nchunks, int B, int T, const Backend *be,
                       int nblocks_keep, int nblocks_drop, int grads);

void model_init(Model *m, const ModelDims *d, const ChunkSpec *specs, int nchunks, int B, int T,
                const Backend *be) {
    init_model(m, d, specs, NULL, nchunks, B, T, be, 0, 0, 1);
}

void model_init_forward(Model *m, const ModelDims *d, const ChunkSpec *specs, int nchunks, int B,
                        int T, const Backend *be) {
    init_model(m, d, specs, NULL, nchunks, B, T, be, 0, 0, 0);
}

void model_init_recompute(Model *m, const ModelDims *d, const ChunkSpec *specs,
                          const ChunkRecompute *rc, int nchunks, int B, int T, const Backend *be,
                          int nblocks_keep, int nblocks_drop) {
    init_model(m, d, specs, rc, nchunks, B, T, be, nblocks_keep, nblocks_drop, 1);
}

/* model_init_recompute; grads 0: no gradients (model_init_forward). */
static void init_model(Model *m, const ModelDims *d, const ChunkSpec *specs,
                       const ChunkRecompute *rc, int nchunks, int B, int T, const Backend *be,
                       int nblocks_keep, int nblocks_drop, int grads) {
    PP_CHECK(nchunks >= 1 && nchunks <= PP_MAX_CHUNKS);
    memset(m, 0, sizeof *m);
    m->d = *d;
    m->arch = m->d.arch = model_arch(d);
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
    m->grads = grads ? dev_zeros(m, m->nparams) : NULL;
    m->lp = pp_calloc((size_t)d->L * m->arch->nlayer_params, sizeof(float *));
    m->lg = pp_calloc((size_t)d->L * m->arch->nlayer_params, sizeof(float *));
    bind(m, m->params, m->lp, m->gp, &m->wte, &m->head);
    if (grads) bind(m, m->grads, m->lg, m->gg, &m->dwte, &m->dhead); /* else all NULL */
    if (grads && d->tied && any_first && any_last) { /* first and last stage on this rank (a tied head
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
        ck->recv = pp_calloc(ck->nrecv ? ck->nrecv : 1, sizeof(void *));
        for (int r = 0; r < ck->nrecv; r++) ck->recv[r] = dev_alloc(m, model_boundary_bytes(m));
        m->recv_bytes += (size_t)ck->nrecv * model_boundary_bytes(m);
    }
    size_t N = (size_t)B * T;
    scratch_init(m, ARCH_ALWAYS);
    if (be->operand != PP_F32) scratch_init(m, ARCH_CAST); /* else the fp32 buffer serves */
    m->scratch = dev_alloc(m, be->scratch_floats(be, (int)N, T, d->C) * sizeof(float));
    consts_init(m);
    m->losses = dev_alloc(m, N * sizeof(float));
    m->logits_rows = head_rows(be->logits_chunk_rows, B, T);
    if (any_last) /* [Note: chunked head], [Note: logits type] */
        m->logits = act_alloc(m, (size_t)m->logits_rows * d->Vp * pp_dtype_bytes(be->logits));
    if (any_last && be->operand != be->logits) /* else dlogits overwrite the logits */
        m->dlogits = dev_alloc(m, (size_t)m->logits_rows * d->Vp * pp_dtype_bytes(be->operand));
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
    ck->wstate = pp_calloc(n ? n : 1, sizeof(void **));
    if (n > 0 && ck->l1 - ck->l0 > ck->nrc) /* a layer stores W state in itself */
        m->wstate_bytes += scratch_init(m, ARCH_WS_STAGE);
    for (int w = 0; w < n; w++) {
        size_t nl = ck->l1 - ck->l0 ? ck->l1 - ck->l0 : 1;
        ck->wstate[w] = pp_calloc(nl * m->arch->nws, sizeof(void *));
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
    for (int k = 0; k < ARCH_MAX_BUFS; k++) {
        be->dealloc(be, m->work[k]);
        be->dealloc(be, m->bufs[k]);
        be->dealloc(be, m->consts[k]);
    }
    for (int b = 0; b < m->nblocks; b++) be->dealloc(be, m->blocks[b]);
    free(m->blocks);
    void *own[] = {m->params, m->grads,   m->opt_m,      m->opt_v,   m->losses,
                   m->logits, m->dlogits, m->dhead_tied, m->scratch};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) be->dealloc(be, own[k]);
    free(m->tensors), free(m->tensor_index), free(m->lp), free(m->lg);
    memset(m, 0, sizeof *m);
}

void model_zero_grads(Model *m) {
    m->be->zero(m->be, m->grads, m->nparams * sizeof(float));
    if (m->dhead_tied) m->be->zero(m->be, m->dhead_tied, (size_t)m->d.Vp * m->d.C * sizeof(float));
}

void model_hold_weights(Model *m, int hold) {
    const Backend *be = m->be;
    m->weights_held = hold && be->weight_hold;
    if (be->weight_hold)
        be->weight_hold(be, hold ? m->params : NULL, hold ? m->nparams : 0,
                        hold == MODEL_HOLD_KEPT);
}

void model_fold_tied_grad(Model *m) {
    if (m->dhead_tied) m->be->add_inplace(m->be, m->dwte, m->dhead_tied, (size_t)m->d.Vp * m->d.C);
}

/* ---- initialisation ---- */

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
        double u1 = ((splitmix64(&s) >> 11) + 1.0) * 0x1.0p-53;
        double u2 = (splitmix64(&s) >> 11) * 0x1.0p-53;
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
        if (t->init == ARCH_INIT_NORMAL || t->init == ARCH_INIT_PROJ) {
            fill_normal(p, t->numel, t->init == ARCH_INIT_PROJ ? proj_std : std,
                        name_seed(seed, t->name));
        } else {
            float v = t->init == ARCH_INIT_ONE ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->numel; j++) p[j] = v;
        }
        if (!strcmp(t->name, "wte") || !strcmp(t->name, "lm_head")) /* padded rows: 0 */
            memset(p + (size_t)m->d.V * m->d.C, 0,
                   (size_t)(m->d.Vp - m->d.V) * m->d.C * sizeof(float));
        m->be->to_device(m->be, m->params + t->offset, p, t->numel * sizeof(float));
        m->be->wait(m->be); /* p is refilled for the next tensor */
    }
    free(p);
}

/* ---- forward and backward ---- */

void *model_recv_buffer(Model *m, int c, int r) {
    PP_CHECK(r >= 0 && r < m->chunks[c].nrecv);
    return m->chunks[c].recv[r];
}

void model_take_input(Model *m, int c, int s, int r) {
    ActSlot *a = &m->chunks[c].slots[s];
    void *t = a->input;
    a->input = model_recv_buffer(m, c, r);
    m->chunks[c].recv[r] = t;
}

/* The input of layer li of slot a: the slot's input, or the layer before's output. */
static const void *layer_input(const Model *m, const ActSlot *a, int li) {
    return li == 0 ? a->input : slot_acts(m, a, li - 1)[m->arch->act_out];
}

void *model_chunk_output(Model *m, int c, int s) {
    const Chunk *ck = &m->chunks[c];
    return (void *)layer_input(m, &ck->slots[s], ck->l1 - ck->l0);
}

void *model_head_grad(const Model *m, int c, int s) {
    PP_CHECK(m->chunks[c].last);
    return m->chunks[c].slots[s].head[m->arch->head_dout];
}

/* [Note: chunked head] The head's logits are [N,Vp] fp32 (bf16 on a GPU: [Note: logits
 * type] in backend.h), 3.3 GB for GPT-2 124M at B = 16, T = 1024 in fp32: more than any layer's
 * activations. So the last stage computes them in chunks of R rows (m->logits_rows:
 * be->logits_chunk_rows, all N when 0) through one [R,Vp] buffer, the only one there is. Per chunk
 * of rows r0..r0+R, x the final norm's output and dx its gradient (GPT-2's lnf and dlnf):
 *   logits[R,Vp] = x[r0..] @ head^T                          (head_logits)
 *   losses[r0..] = -log p(target); logits become dlogits     (crossentropy_forward_backward)
 *   dx[r0..]     = dlogits @ head, overwriting that chunk's rows (matmul_operand_backward's
 *                  dinp: the operand the final norm's backward reads)
 *   dhead       += dlogits^T @ x[r0..]                        (matmul_backward's dw)
 * and validation only the first two (crossentropy_forward). Rows are independent, so a
 * row's loss, dlogits and dx are the unchunked ones but for the GEMM's own blocking (a
 * BLAS may sum a row differently in a GEMM of other height: OpenBLAS does, by a few
 * ulps); dhead is one GEMM per chunk summed instead of one GEMM: the same value to
 * summation order (test_model.c bounds both). The CPU backend keeps R = 0, one chunk:
 * its calls, and so its bits, are those of before the chunks.
 *
 * All of it, dhead too, runs in the forward ([Note: fused head]), with or without a
 * split backward: I and W start from dx as before, and every rank and schedule chunks a
 * microbatch alike, so schedules that trained the same bits still do (zero-bubble and
 * 1F1B: test_interp.c). Deferring dhead to W would keep each pending microbatch's
 * [N,Vp] dlogits alive until its W, the memory this note saves.
 *
 * R is the backend's: a chunk's GEMMs must stay large enough to fill the device, and
 * dhead [Vp,C] is read and written once per chunk (cuda/NOTES.md: the CUDA figures). */
void model_head_loss(Model *m, const void *x, void *dx, const int *targets, float dloss,
                     int want_grad, double *loss) {
    const Backend *be = m->be;
    int N = m->B * m->T, C = m->d.C, V = m->d.V, Vp = m->d.Vp;
    size_t ob = pp_dtype_bytes(be->operand);
    /* in place when the logits are of the operand type ([Note: logits type]) */
    void *dl = m->dlogits ? m->dlogits : m->logits;
    int hold = be->weight_hold && !m->weights_held; /* converted once, not per chunk */
    if (hold) be->weight_hold(be, m->head, (size_t)Vp * C, 0);
    for (int r0 = 0; r0 < N; r0 += m->logits_rows) {
        int R = N - r0 < m->logits_rows ? N - r0 : m->logits_rows;
        const void *xr = (const char *)x + (size_t)r0 * C * ob;
        be->head_logits(be, m->logits, xr, m->head, R, C, Vp);
        if (!want_grad) {
            be->crossentropy_forward(be, m->logits, m->losses + r0, targets + r0, R, V, Vp);
            continue;
        }
        /* [Note: fused head] the last stage's forward already turns the logits into
         * d(loss)/d(logits) and pushes them through the head, so only dx [N,C] survives
         * until backward, not [N,Vp] logits per in-flight microbatch. */
        be->crossentropy_forward_backward(be, dl, m->losses + r0, m->logits, targets + r0, dloss, R,
                                          V, Vp);
        be->matmul_operand_backward(be, (char *)dx + (size_t)r0 * C * ob, m->dhead, NULL, dl, xr,
                                    m->head, R, C, Vp);
    }
    if (hold) be->weight_hold(be, NULL, 0, 0);
    if (loss) be->sum(be, loss, m->losses, (size_t)N);
}

/* The activations layer li of slot a has for its backward (weight_half: for the weight
 * half): the slot's own, or, where [Note: recompute] dropped some, the same again from
 * the kept ones by the forward's own calls (Arch.layer_recompute). */
static void *const *backward_acts(Model *m, const Chunk *ck, ActSlot *a, int li, int weight_half) {
    void *const *la = slot_acts(m, a, li);
    if (a->keep || li >= ck->nrc) return la;
    m->recomputes++;
    return m->arch->layer_recompute(m, ck->recompute, weight_half, la, m->work,
                                    layer_params(m, m->lp, ck->l0 + li), layer_input(m, a, li));
}

void model_forward(Model *m, int c, int s, float dloss, int want_grad, double *loss) {
    const Arch *A = m->arch;
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    if (ck->first) A->embed_forward(m, a->input, a->tokens);
    for (int l = ck->l0; l < ck->l1; l++)
        A->layer_forward(m, slot_acts(m, a, l - ck->l0), layer_params(m, m->lp, l),
                         layer_input(m, a, l - ck->l0));
    if (ck->last)
        A->head_forward(m, a->head, a->targets, layer_input(m, a, ck->l1 - ck->l0), dloss,
                        want_grad, loss);
}

/* The backward of chunk c on slot s into s->grad: fused (weights, W state NULL) or the
 * input half (weights 0, W state set ws). The fused one passes the residual gradient's
 * operand copy from each call to the layer below ([Note: residual gradient's operand] in
 * arch.h). */
static void chunk_backward(Model *m, int c, int s, int weights, void **ws) {
    const Arch *A = m->arch;
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    int in = 0; /* the call above left a->grad's operand copy */
    if (ck->last) {
        int out = weights && ck->l1 > ck->l0 ? ARCH_DRES_OP_OUT : 0;
        A->head_backward(m, a->grad, weights, a->head, layer_input(m, a, ck->l1 - ck->l0), out);
        in = out ? ARCH_DRES_OP_IN : 0;
    }
    for (int l = ck->l1 - 1; l >= ck->l0; l--) {
        int li = l - ck->l0;
        void *const *la = backward_acts(m, ck, a, li, 0);
        float *const *p = layer_params(m, m->lp, l);
        if (weights) {
            int out = l > ck->l0 ? ARCH_DRES_OP_OUT : 0;
            A->layer_backward(m, layer_params(m, m->lg, l), a->grad, la, p, layer_input(m, a, li),
                              NULL, in | out);
            in = out ? ARCH_DRES_OP_IN : 0;
            continue;
        }
        if (li < ck->nrc) { /* W state in a set of its own */
            A->layer_backward(m, NULL, a->grad, la, p, layer_input(m, a, li), set_ws(m, ws, li), 0);
            continue;
        }
        /* the W state in scratch, then into the layer's dead activations ([Note: W state]) */
        void *tmp[ARCH_MAX_BUFS], *to[ARCH_MAX_BUFS];
        size_t bytes[ARCH_MAX_BUFS];
        A->ws_stage(m, tmp);
        wstate_at(m, ck, a, li, ws, to);
        A->layer_backward(m, NULL, a->grad, la, p, layer_input(m, a, li), tmp, 0);
        int n = set_bytes_of(m, ARCH_WS, bytes);
        for (int k = 0; k < n; k++) m->be->copy(m->be, to[k], tmp[k], bytes[k]);
    }
    if (ck->first && weights) A->embed_backward(m, a->grad, a->tokens);
}

void model_backward(Model *m, int c, int s) { chunk_backward(m, c, s, 1, NULL); }

void model_backward_input(Model *m, int c, int s, int w) {
    PP_CHECK(w >= 0 && w < m->chunks[c].nwstate);
    chunk_backward(m, c, s, 0, m->chunks[c].wstate[w]);
}

void model_backward_weight(Model *m, int c, int s, int w) {
    const Arch *A = m->arch;
    const Chunk *ck = &m->chunks[c];
    ActSlot *a = &ck->slots[s];
    PP_CHECK(w >= 0 && w < ck->nwstate);
    if (ck->last) A->head_backward(m, NULL, 1, a->head, layer_input(m, a, ck->l1 - ck->l0), 0);
    for (int l = ck->l1 - 1; l >= ck->l0; l--) {
        int li = l - ck->l0;
        void *ws[ARCH_MAX_BUFS];
        wstate_at(m, ck, a, li, ck->wstate[w], ws);
        A->layer_backward_weight(m, layer_params(m, m->lg, l), backward_acts(m, ck, a, li, 1),
                                 layer_params(m, m->lp, l), layer_input(m, a, li), ws);
    }
    if (ck->first) /* s->grad holds d(embedding output), left by the input half */
        A->embed_backward(m, a->grad, a->tokens);
}

/* ---- memory plan ([Note: memory plan] in model.h) ---- */

void model_plan(ModelPlan *p, const ModelDims *d, const ChunkSpec *specs, const ChunkRecompute *rc,
                const int *nwstate, int nchunks, int B, int T, size_t att_floats,
                size_t operand_bytes, size_t residual_bytes, size_t logits_bytes, int logits_rows,
                int nopt, int nblocks_keep, int nblocks_drop) {
    const Arch *A = model_arch(d);
    size_t N = (size_t)B * T, C = d->C, f = sizeof(float), ob = operand_bytes, params = 0;
    size_t rb = residual_bytes;
    size_t blk[2] = {0, 0}, ab[ARCH_MAX_BUFS], hb[ARCH_MAX_BUFS], layer_all = 0, layer_raw = 0;
    size_t head = 0, head_tied = 0, VC = (size_t)d->Vp * C;
#define PAD(n) (rc ? block_pad(n) : (n)) /* blocks align each tensor ([Note: activation blocks]) */
    int na = set_bytes(d, ARCH_ACTS, N, att_floats, ob, rb, ab),
        nh = set_bytes(d, ARCH_HEAD, N, 0, ob, rb, hb);
    for (int k = 0; k < na; k++) layer_all += PAD(ab[k]), layer_raw += ab[k];
    for (int k = 0; k < nh; k++) head += hb[k];
    int first = 0, last = 0, full = 0, sel = 0;
    size_t stage = 0; /* the input half's scratch for in-layer W state, once per model */
    memset(p, 0, sizeof *p);
    for (int c = 0; c < nchunks; c++) first |= specs[c].first, last |= specs[c].last;
    for (int c = 0; c < nchunks; c++) {
        const ChunkSpec *k = &specs[c];
        int mode = rc ? rc[c].mode : PP_RECOMPUTE_NONE, nl = k->l1 - k->l0,
            nrc = chunk_nrc(mode, rc ? rc[c].layers : 0, nl);
        /* input (residual) and grad; the last stage's head activations */
        size_t own = N * C * (rb + f) + (k->last ? head : 0), kept = (size_t)nl * layer_all;
        size_t drops = 0;
        /* what a layer that recomputes drops */
        for (int a = 0; a < na && mode != PP_RECOMPUTE_NONE; a++)
            if (!(A->acts[a].keep & 1 << mode)) drops += PAD(ab[a]);
        size_t dropped = kept - (size_t)nrc * drops;
        if (rc) { /* the slot's own part; the layers in the rank's blocks */
            p->slots += (size_t)k->nslots * own;
            blk[1] = kept > blk[1] ? kept : blk[1];
            blk[0] = dropped > blk[0] ? dropped : blk[0];
        } else {
            p->slots += (size_t)k->nslots * (own + kept);
        }
        p->recv += rb * (size_t)k->nrecv * model_boundary_elems(d, B, T);
        size_t sets = nwstate ? nwstate[c] : 0;
        for (int li = 0; li < nl; li++) /* [Note: W state] */
            p->wstate += sets * ws_layer_bytes(d, li, nrc, N, att_floats, ob, rb);
        if (nwstate && nwstate[c] > 0 && nl > nrc)
            stage = scratch_bytes(d, N, ob, rb, ARCH_WS_STAGE);
        if (rc && chunk_uses_work(mode, nrc, nblocks_drop)) {
            full |= mode == PP_RECOMPUTE_FULL;
            sel |= mode == PP_RECOMPUTE_SELECTIVE;
        }
        params += (size_t)nl * layer_numel(d);
        if (k->first) params += VC + globals_numel(d, ARCH_FIRST);
        if (k->last) /* a shared wte counts once */
            params += globals_numel(d, ARCH_LAST) + (d->tied && first ? 0 : VC);
    }
#undef PAD
    if (rc) p->slots += (size_t)nblocks_keep * blk[1] + (size_t)nblocks_drop * blk[0];
    if (last) /* [Note: chunked head] */
        p->logits = model_logits_bytes(d, B, T, logits_bytes, logits_rows);
    p->slots += p->logits;
    p->wstate += stage;
    if (d->tied && first && last) head_tied = VC; /* [Note: tied gradient order] */
    for (int k = 0; k < na; k++) /* the workspace: what the recompute of the modes in use writes */
        if (work_holds(&A->acts[k], full, sel)) p->work += ab[k];
    p->params = f * params;
    p->grads = f * (params + head_tied);
    p->optimizer = f * (size_t)nopt * params;
}

size_t model_plan_activations(const ModelPlan *p) {
    return p->slots + p->work + p->recv + p->wstate;
}

/* ---- llm.c fp32 checkpoint (DESIGN.md §6): the Arch's format ---- */

int model_load_llmc(Model *m, const char *path, char *err, size_t errlen) {
    if (!m->arch->import_llmc)
        return pp_errf(err, errlen, PP_EUSAGE, "model.init_from: '%s': llm.c's checkpoint format "
                       "holds GPT-2 only, and model.arch is %s", path, m->arch->name);
    return m->arch->import_llmc(m, path, err, errlen);
}

int model_save_llmc(const Model *m, const char *path, char *err, size_t errlen) {
    if (!m->arch->export_llmc)
        return pp_errf(err, errlen, PP_EUSAGE, "llm.c's checkpoint format holds GPT-2 only: a "
                       "model.arch %s model cannot be written to %s", m->arch->name, path);
    return m->arch->export_llmc(m, path, err, errlen);
}
