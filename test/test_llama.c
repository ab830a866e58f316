/* test_llama.c — the llama family's Arch table (src/model/llama.c) through the stage
 * engine, as test_model.c checks GPT-2's: every tensor's gradient against finite
 * differences (tied and untied, grouped-query attention with 1, 2 and NH heads per
 * group, qwen2's biases), stage boundaries that reproduce the whole model bit for bit,
 * the split backward and the recompute modes bitwise equal to the fused backward that
 * keeps everything, the memory plan equal to what is allocated over every schedule, the
 * costs against the tensor table, and RoPE's frequencies (Llama 3's scaling) against
 * the formula. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/partition.h"
#include "runtime/runtime.h"
#include "sched/sched.h"
#include "checkrun.h"

/* Test allocations, freed together at the end of each test. */
static void *allocs[1024];
static int nallocs;
static void *talloc(size_t n) {
    ck_assert_int_lt(nallocs, 1024);
    return allocs[nallocs++] = malloc(n);
}
static void tfree_all(void) {
    while (nallocs) free(allocs[--nallocs]);
}

static uint64_t rng = 42;
static float *rand_buf(size_t n, float scale) { /* uniform in [-scale, scale) */
    float *x = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f) * scale;
    }
    return x;
}

/* n floats of a and b that differ in their bits (0 expected). */
static size_t bits_differ(const float *a, const float *b, size_t n) {
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return wrong;
}

/* A small model of the family: L = 4 layers of NH heads of 4 channels (C = 4 NH), NKV
 * key/value heads, an MLP of 12, RoPE base 10000 (T <= 16: angles up to 15 radians). */
static ModelDims dims(const Arch *A, int NH, int NKV, int tied) {
    ModelDims d = {.V = 13, .Vp = 16, .maxT = 16, .L = 4, .NH = NH, .C = 4 * NH, .tied = tied,
                   .arch = A, .NKV = NKV, .F = 12, .eps = 1e-5f};
    d.rope.theta = 10000.0f;
    return d;
}

static double fwd(Model *m, int c, int s, float dloss, int want_grad) {
    double loss = 0.0; /* on the CPU backend device memory is host memory */
    model_forward(m, c, s, dloss, want_grad, &loss);
    return loss;
}

static void setup(Model *m, const ModelDims *d, const ChunkSpec *spec, int B, int T) {
    model_init(m, d, spec, 1, B, T, backend_cpu());
    model_init_weights(m, 21, 0.3f); /* large std: gradients well above rounding */
}

static void fill_tokens(Model *m, int slot, int B, int T) {
    ActSlot *a = &m->chunks[0].slots[slot];
    for (int i = 0; i < B * T; i++) {
        a->tokens[i] = (i * 7 + 3) % m->d.V;
        a->targets[i] = (i * 5 + 1) % m->d.V;
    }
}

/* ---- RoPE's frequencies ([Note: RoPE frequencies] in llama.c) ---- */

/* transformers' _compute_default_rope_parameters and _compute_llama3_parameters written
 * out again, in double: band -1 kept, 0 smoothed, 1 divided by factor. */
static double want_inv_freq(const ModelRope *r, int HS, int i, int *band) {
    double f = 1.0 / pow(r->theta, 2.0 * i / HS), orig = r->original_max_seq_len;
    double wavelen = 2 * M_PI / f, lo = r->low_freq_factor, hi = r->high_freq_factor;
    *band = wavelen < orig / hi ? -1 : wavelen > orig / lo ? 1 : 0;
    if (!r->llama3 || *band < 0) return f;
    if (*band > 0) return f / r->factor;
    double smooth = (orig / wavelen - lo) / (hi - lo);
    return (1 - smooth) * f / r->factor + smooth * f;
}

/* Llama 3.2 1B's frequencies (HS 64, base 500000, llama3: factor 32, low 1, high 4,
 * original 8192): the formula's, rounded once; 15 kept, 3 in the smooth band, 14 divided.
 * And against transformers' own numbers: its _compute_llama3_parameters (transformers'
 * modeling_rope_utils.py as installed, 2026; numpy in float32 standing in for torch, which
 * computes each step in fp32) gave, for i = 0, 1, 14, 15, 16, 17, 18, 31: 1.0,
 * 0.6636012196540833, 0.0032114461064338684, 0.0012905480107292533, 0.000429556705057621,
 * 9.708286233944818e-05, 1.9461638657958247e-05, 9.41830720080361e-08; ours are within 3
 * ulps of them (fp32 steps against one rounding; the smooth band's cancellation shows it
 * most). The model's device copy is the table's const_fill. */
START_TEST(test_inv_freq_llama3) {
    static const int idx[] = {0, 1, 14, 15, 16, 17, 18, 31};
    static const double hf[] = {1.0,
                                0.6636012196540833,
                                0.0032114461064338684,
                                0.0012905480107292533,
                                0.000429556705057621,
                                9.708286233944818e-05,
                                1.9461638657958247e-05,
                                9.41830720080361e-08};
    ModelDims d = {.V = 128256, .Vp = 128256, .maxT = 131072, .L = 16, .NH = 32, .C = 2048,
                   .tied = 1, .arch = &arch_llama, .NKV = 8, .F = 8192, .eps = 1e-5f};
    d.rope = (ModelRope){500000.0f, 1, 32.0f, 1.0f, 4.0f, 8192};
    ck_assert_int_eq(model_dims_check(&d, NULL, 0), PP_OK);
    ck_assert_uint_eq(arch_llama.elems(&d, ARCH_CONST, 0, 7, 0), 32);
    float inv[32];
    int bands[3] = {0, 0, 0}, band;
    arch_llama.const_fill(&d, 0, inv);
    for (int i = 0; i < 32; i++) {
        float want = (float)want_inv_freq(&d.rope, 64, i, &band);
        ck_assert_msg(memcmp(&inv[i], &want, sizeof want) == 0, "inv_freq[%d] %.9g, formula %.9g",
                      i, inv[i], want);
        bands[band + 1]++;
    }
    ck_assert_int_eq(bands[0], 15);
    ck_assert_int_eq(bands[1], 3);
    ck_assert_int_eq(bands[2], 14);
    for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
        float theirs = (float)hf[k];
        int32_t a, b;
        memcpy(&a, &inv[idx[k]], 4);
        memcpy(&b, &theirs, 4);
        ck_assert_msg(abs(a - b) <= 3, "inv_freq[%d] %.9g, transformers %.9g", idx[k], inv[idx[k]],
                      theirs);
    }
    /* without scaling: 1 / theta^(2i/HS) */
    d.rope.llama3 = 0;
    arch_llama.const_fill(&d, 0, inv);
    for (int i = 0; i < 32; i++) ck_assert(inv[i] == (float)(1.0 / pow(500000.0, i / 32.0)));
}
END_TEST

/* The model's copy: what model_init uploads, and a bad scaling refused by the dims check. */
START_TEST(test_inv_freq_model) {
    ModelDims d = dims(&arch_llama, 2, 1, 1);
    d.rope = (ModelRope){10000.0f, 1, 8.0f, 1.0f, 4.0f, 8};
    ChunkSpec spec = {0, 0, 4, 1, 1, 1, 0};
    Model m;
    float want[2];
    int band;
    setup(&m, &d, &spec, 1, 4);
    for (int i = 0; i < 2; i++) want[i] = (float)want_inv_freq(&d.rope, 4, i, &band);
    ck_assert_mem_eq(m.consts[0], want, sizeof want);
    model_free(&m);
    d.rope.high_freq_factor = 1.0f;
    char err[256];
    ck_assert_int_eq(model_dims_check(&d, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "llama3"));
    d = dims(&arch_llama, 4, 3, 1);
    ck_assert_int_eq(model_dims_check(&d, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "NKV=3"));
    d = dims(&arch_llama, 2, 1, 1);
    d.C = 6; /* head size 3 */
    ck_assert_int_eq(model_dims_check(&d, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "even"));
    tfree_all();
}
END_TEST

/* ---- gradients ---- */

typedef struct {
    Model *m;
    int N;
} WholeCtx;

static double whole_loss(void *p) {
    WholeCtx *c = p;
    return fwd(c->m, 0, 0, 0.0f, 0) / c->N;
}

static double numgrad1(WholeCtx *c, float *x, float eps) {
    float save = *x;
    *x = save + eps;
    double lp = whole_loss(c);
    *x = save - eps;
    double lm = whole_loss(c);
    *x = save;
    return (lp - lm) / (2.0 * eps);
}

/* Every tensor's gradient (a few elements each: the embedding's, every layer's, the
 * final norm's and the head's) against central differences of the mean loss. */
static void gradcheck(const ModelDims *d) {
    int B = 2, T = 5, N = B * T, checked = 0;
    ChunkSpec spec = {0, 0, d->L, 1, 1, 1, 0};
    Model m;
    setup(&m, d, &spec, B, T);
    fill_tokens(&m, 0, B, T);
    model_zero_grads(&m);
    fwd(&m, 0, 0, 1.0f / N, 1);
    model_backward(&m, 0, 0);
    model_fold_tied_grad(&m);
    WholeCtx c = {&m, N};
    for (int i = 0; i < m.ntensors; i++) {
        const ParamTensor *t = &m.tensors[i];
        for (size_t j = 0; j < t->numel; j += 1 + t->numel / 5) {
            if ((!strcmp(t->name, "wte") || !strcmp(t->name, "lm_head")) &&
                j >= (size_t)d->V * d->C)
                continue;
            double g = numgrad1(&c, m.params + t->offset + j, 1e-2f);
            float a = m.grads[t->offset + j];
            ck_assert_msg(fabs(a - g) <= 2e-4 + 2e-2 * fabs(g), "%s NKV=%d %s[%zu]: analytic %g "
                          "numeric %g", d->arch->name, d->NKV, t->name, j, a, g);
            checked++;
        }
    }
    ck_assert_int_gt(checked, 50);
    model_free(&m);
}

/* Multi-query (1), grouped (2) and multi-head (4) attention over 4 query heads; tied and
 * untied; qwen2's q/k/v biases (zero at init: set here, so that they matter). */
START_TEST(test_llama_gradcheck) {
    static const int nkv[] = {1, 2, 4};
    for (int k = 0; k < 3; k++)
        for (int tied = 0; tied < 2; tied++) {
            ModelDims d = dims(&arch_llama, 4, nkv[k], tied);
            gradcheck(&d);
        }
    ModelDims q = dims(&arch_qwen2, 4, 2, 0);
    q.rope = (ModelRope){10000.0f, 1, 4.0f, 1.0f, 4.0f, 16}; /* with llama3 scaling too */
    gradcheck(&q);
    tfree_all();
}
END_TEST

/* qwen2's biases are trained: a model with them set gives them gradients that differ
 * from zero and match finite differences (gradcheck's init leaves them 0). */
START_TEST(test_qwen2_bias_gradcheck) {
    int B = 2, T = 4, N = B * T;
    ModelDims d = dims(&arch_qwen2, 2, 1, 1);
    ChunkSpec spec = {0, 0, d.L, 1, 1, 1, 0};
    Model m;
    setup(&m, &d, &spec, B, T);
    int b = model_find(&m, "h.1.qkvb");
    ck_assert_int_ge(b, 0);
    ck_assert_int_eq(model_find(&m, "h.1.qkvw") >= 0 && model_find(&m, "wpe") < 0, 1);
    const ParamTensor *t = &m.tensors[b];
    ck_assert_int_eq(t->numel, (2 + 2 * 1) * 4);
    memcpy(m.params + t->offset, rand_buf(t->numel, 0.5f), t->numel * sizeof(float));
    fill_tokens(&m, 0, B, T);
    model_zero_grads(&m);
    fwd(&m, 0, 0, 1.0f / N, 1);
    model_backward(&m, 0, 0);
    WholeCtx c = {&m, N};
    for (size_t j = 0; j < t->numel; j++) {
        double g = numgrad1(&c, m.params + t->offset + j, 1e-2f);
        float a = m.grads[t->offset + j];
        ck_assert_msg(fabs(a - g) <= 2e-4 + 2e-2 * fabs(g), "qkvb[%zu]: analytic %g numeric %g", j,
                      a, g);
    }
    model_free(&m);
    tfree_all();
}
END_TEST

/* The loss at init is about ln V (std 0.02, as training starts). */
START_TEST(test_llama_loss_at_init) {
    ModelDims d = dims(&arch_llama, 4, 2, 0);
    d.V = d.Vp = 256;
    ChunkSpec spec = {0, 0, d.L, 1, 1, 1, 0};
    Model m;
    model_init(&m, &d, &spec, 1, 4, 16, backend_cpu());
    model_init_weights(&m, 1337, 0.02f);
    fill_tokens(&m, 0, 4, 16);
    double loss = fwd(&m, 0, 0, 0.0f, 0) / 64;
    ck_assert_msg(fabs(loss - log(256.0)) < 0.05, "loss at init %g, ln V = %g", loss, log(256.0));
    model_free(&m);
}
END_TEST

/* Two stages (layers 0..1, 2..3) reproduce the whole model's loss and every gradient bit
 * for bit; each holds only its own tensors (no wpe; lnfw and the head on the last). */
START_TEST(test_llama_stage_split_exact) {
    int B = 2, T = 6, N = B * T;
    for (int tied = 0; tied < 2; tied++) {
        ModelDims d = dims(&arch_llama, 4, 2, tied);
        int C = d.C;
        ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0}, s0 = {0, 0, 2, 1, 0, 1, 0},
                  s1 = {1, 2, 4, 0, 1, 1, 0};
        Model w, a, b;
        setup(&w, &d, &whole, B, T);
        setup(&a, &d, &s0, B, T);
        setup(&b, &d, &s1, B, T);
        ck_assert_int_eq(model_find(&w, "wpe"), -1);
        ck_assert_int_eq(model_find(&a, "lnfw"), -1);
        ck_assert_int_ge(model_find(&b, "lnfw"), 0);
        ck_assert_int_eq(model_find(&b, "wte") >= 0, tied);
        ck_assert_int_eq(model_find(&b, "lm_head") >= 0, !tied);
        ck_assert_int_eq(model_find(&b, "h.1.gatew"), -1);
        fill_tokens(&w, 0, B, T);
        fill_tokens(&a, 0, B, T);
        fill_tokens(&b, 0, B, T);
        float dloss = 1.0f / N;
        double lw = fwd(&w, 0, 0, dloss, 1);
        fwd(&a, 0, 0, dloss, 1);
        memcpy(b.chunks[0].slots[0].input, model_chunk_output(&a, 0, 0), (size_t)N * C * 4);
        ck_assert(lw == fwd(&b, 0, 0, dloss, 1));
        model_backward(&w, 0, 0);
        model_backward(&b, 0, 0);
        memcpy(a.chunks[0].slots[0].grad, b.chunks[0].slots[0].grad, (size_t)N * C * 4);
        model_backward(&a, 0, 0);
        model_fold_tied_grad(&w);
        for (int i = 0; i < w.ntensors; i++) { /* the tied wte's: the sum of both stages' */
            const ParamTensor *t = &w.tensors[i];
            int ia = model_find(&a, t->name), ib = model_find(&b, t->name);
            ck_assert_msg(ia >= 0 || ib >= 0, "%s held by no stage", t->name);
            for (size_t j = 0; j < t->numel; j++) {
                float g = (ia >= 0 ? a.grads[a.tensors[ia].offset + j] : 0.0f) +
                          (ib >= 0 ? b.grads[b.tensors[ib].offset + j] : 0.0f);
                ck_assert_msg(g == w.grads[t->offset + j], "%s[%zu]: %g vs %g", t->name, j, g,
                              w.grads[t->offset + j]);
            }
        }
        model_free(&w);
        model_free(&a);
        model_free(&b);
    }
    tfree_all();
}
END_TEST

/* ---- split backward and recompute: bitwise ---- */

/* Chunks that are the whole model, the first, a middle and the last stage. */
static const ChunkSpec k_chunks[4] = {
    {0, 0, 4, 1, 1, 2, 0}, {0, 0, 2, 1, 0, 2, 0}, {1, 1, 3, 0, 0, 2, 0}, {2, 2, 4, 0, 1, 2, 0}};

/* Two microbatches forward (slots 0 and 1) on every model of ms, the same inputs, tokens
 * and output gradients. */
static void forward_two(Model **ms, int n, int B, int T) {
    size_t NC = (size_t)B * T * ms[0]->d.C;
    float *in[2] = {rand_buf(NC, 1), rand_buf(NC, 1)},
          *dout[2] = {rand_buf(NC, 1), rand_buf(NC, 1)};
    for (int i = 0; i < n; i++) {
        model_zero_grads(ms[i]);
        for (int s = 0; s < 2; s++) {
            fill_tokens(ms[i], s, B, T);
            memcpy(ms[i]->chunks[0].slots[s].input, in[s], NC * 4);
            fwd(ms[i], 0, s, 1.0f / (B * T), 1);
            memcpy(ms[i]->chunks[0].slots[s].grad, dout[s], NC * 4);
        }
    }
}

/* f and r gave the same bits: d(input) of both microbatches and every gradient, and
 * the gradients were real. */
static void assert_same(Model *f, Model *r, int B, int T, const char *what) {
    size_t NC = (size_t)B * T * f->d.C, nonzero = 0;
    for (int s = 0; s < 2; s++)
        ck_assert_msg(bits_differ(f->chunks[0].slots[s].grad, r->chunks[0].slots[s].grad, NC) == 0,
                      "%s: d(input) of microbatch %d differs", what, s);
    model_fold_tied_grad(f);
    model_fold_tied_grad(r);
    ck_assert_uint_eq(f->nparams, r->nparams);
    ck_assert_msg(bits_differ(f->grads, r->grads, f->nparams) == 0, "%s: %zu of %zu gradients "
                  "differ", what, bits_differ(f->grads, r->grads, f->nparams), f->nparams);
    for (size_t j = 0; j < f->nparams; j++) nonzero += f->grads[j] != 0.0f;
    ck_assert_uint_gt(nonzero, f->nparams / 2);
}

/* [Note: Llama W state] The input half then the weight half give the fused backward's
 * bits, per chunk; at T = 5 the four [N,C] douts go to the W state sets (NH T < 4 C), at
 * T = 16 into the attention probabilities (NH T = 4 C), and the sets hold only what has
 * no dead activation. MQA and GQA; qwen2's biases. */
START_TEST(test_llama_split_backward) {
    static const int Ts[2] = {5, 16};
    char what[96];
    for (int v = 0; v < 2; v++)
        for (int q = 0; q < 3; q++)
            for (size_t k = 0; k < 4; k++) {
                const Arch *A = q == 2 ? &arch_qwen2 : &arch_llama;
                ModelDims d = dims(A, 2, q == 0 ? 1 : 2, q != 1); /* C = 8: 4C = 2 x 16 */
                int B = 2, T = Ts[v], N = B * T;
                Model f, sp;
                setup(&f, &d, &k_chunks[k], B, T);
                setup(&sp, &d, &k_chunks[k], B, T);
                model_init_wstate(&sp, 0, 2);
                size_t nl = (size_t)(k_chunks[k].l1 - k_chunks[k].l0), nc = (size_t)N * d.C * 4;
                /* dkeep (the four operands, fp32 here), and per set and layer the four [N,C]
                 * when they do not fit */
                size_t keep = model_ws_four_elems((size_t)N, (size_t)d.C) * sizeof(float);
                ck_assert_uint_eq(sp.wstate_bytes, keep + (v == 0 ? 2 * nl * 4 * nc : 0));
                Model *ms[2] = {&f, &sp};
                forward_two(ms, 2, B, T);
                model_backward(&f, 0, 0);
                model_backward(&f, 0, 1);
                model_backward_input(&sp, 0, 0, 1); /* W state sets in either order */
                model_backward_input(&sp, 0, 1, 0);
                for (size_t j = 0; j < sp.nparams && !k_chunks[k].last; j++)
                    ck_assert(sp.grads[j] == 0.0f); /* no W yet (the head's is the forward's) */
                model_backward_weight(&sp, 0, 0, 1);
                model_backward_weight(&sp, 0, 1, 0);
                snprintf(what, sizeof what, "%s NKV=%d T=%d chunk %zu", A->name, d.NKV, T, k);
                assert_same(&f, &sp, B, T, what);
                model_free(&f);
                model_free(&sp);
            }
    tfree_all();
}
END_TEST

/* [Note: recompute] Per chunk and mode (selective, full; every layer or the first),
 * fused and split: slots without keep give the bits of slots that keep everything. */
START_TEST(test_llama_recompute) {
    int B = 2, T = 5, checked = 0;
    char what[96];
    ModelDims d = dims(&arch_llama, 4, 2, 0);
    for (size_t k = 0; k < 4; k++)
        for (int mode = PP_RECOMPUTE_SELECTIVE; mode <= PP_RECOMPUTE_FULL; mode++)
            for (int layers = 0; layers <= 1; layers++)
                for (int split = 0; split <= 1; split++) {
                    Model f, r;
                    ChunkRecompute rc = {mode, layers};
                    int nl = k_chunks[k].l1 - k_chunks[k].l0, nrc = layers ? 1 : nl;
                    setup(&f, &d, &k_chunks[k], B, T);
                    model_init_recompute(&r, &d, &k_chunks[k], &rc, 1, B, T, backend_cpu(), 0, 2);
                    model_init_weights(&r, 21, 0.3f);
                    model_slot_attach(&r, 0, 0, 1); /* blocks crosswise */
                    model_slot_attach(&r, 0, 1, 0);
                    if (split) model_init_wstate(&r, 0, 2);
                    ck_assert_uint_gt(r.work_bytes, 0);
                    Model *ms[2] = {&f, &r};
                    forward_two(ms, 2, B, T);
                    for (int s = 0; s < 2; s++) {
                        model_backward(&f, 0, s);
                        if (split) model_backward_input(&r, 0, s, s);
                        else model_backward(&r, 0, s);
                    }
                    for (int s = 0; split && s < 2; s++) model_backward_weight(&r, 0, s, s);
                    ck_assert_int_eq(r.recomputes, (long)2 * nrc * (split ? 2 : 1));
                    snprintf(what, sizeof what, "chunk %zu mode %d layers %d split %d", k, mode,
                             layers, split);
                    assert_same(&f, &r, B, T, what);
                    model_free(&f);
                    model_free(&r);
                    checked++;
                }
    ck_assert_int_eq(checked, 32);
    tfree_all();
}
END_TEST

/* [Note: memory plan] For every schedule kind over P <= 4, v <= 2, M <= 5, every
 * recompute mode and rank: what the engine allocates for runtime_chunk_plan's chunks is
 * model_plan's, term by term; with the W state's four [N,C] in sets (T = 4) and in the
 * probabilities (T = 16), tied and untied. */
START_TEST(test_llama_memory_plan_sweep) {
    int B = 1, checked = 0;
    for (int di = 0; di < 2; di++) {
        ModelDims d = dims(&arch_llama, 2, 1, di);
        d.L = 8;
        int T = di ? 16 : 4;
        for (const char *const *kind = sched_kinds(); *kind; kind++)
            for (int P = 1; P <= 4; P++)
                for (int v = 1; v <= 2; v++)
                    for (int M = 1; M <= 5; M += 2) {
                        Schedule s, fw;
                        Partition part;
                        ArchCosts ac;
                        char err[PP_ERR_MAX];
                        if (sched_kind_check(*kind, P, v, M, err, sizeof err) != PP_OK) continue;
                        ck_assert(sched_build(&s, *kind, P, v, M, err, sizeof err) == PP_OK);
                        ck_assert(sched_build_forward_only(&fw, &s, err, sizeof err) == PP_OK);
                        model_arch_costs(&d, T, &ac);
                        ck_assert(partition_build(&part, "auto", d.L, P * v, &ac, err,
                                                  sizeof err) == PP_OK);
                        for (int mode = 0; mode < 3; mode++)
                            for (int r = 0; r < P; r++) {
                                ChunkSpec specs[PP_MAX_CHUNKS];
                                ChunkRecompute rc[PP_MAX_CHUNKS];
                                int nws[PP_MAX_CHUNKS], nb[2];
                                ModelPlan plan;
                                Model m;
                                const Backend *be = backend_cpu();
                                runtime_chunk_plan(&s, &fw, &part, r, mode, M % 2, specs, rc, nws,
                                                   nb);
                                model_plan(&plan, &d, specs, rc, nws, v, B, T,
                                           be->attention_saved_floats(be, B, T, d.NH), 4, 4, 4, 0,
                                           2, nb[1], nb[0]);
                                model_init_recompute(&m, &d, specs, rc, v, B, T, be, nb[1], nb[0]);
                                model_init_optimizer(&m, 2);
                                for (int c = 0; c < v; c++) model_init_wstate(&m, c, nws[c]);
                                size_t pb = m.nparams * 4;
                                size_t gb = pb + (m.dhead_tied ? (size_t)d.Vp * d.C * 4 : 0);
                                ck_assert(plan.params == pb && plan.grads == gb &&
                                          plan.optimizer == 2 * pb);
                                ck_assert_msg(plan.slots == m.act_bytes &&
                                                  plan.work == m.work_bytes &&
                                                  plan.recv == m.recv_bytes &&
                                                  plan.wstate == m.wstate_bytes,
                                              "%s P=%d v=%d M=%d mode %d rank %d: planned slots "
                                              "%zu work %zu recv %zu W %zu, allocated %zu %zu %zu "
                                              "%zu", *kind, P, v, M, mode, r, plan.slots,
                                              plan.work, plan.recv, plan.wstate, m.act_bytes,
                                              m.work_bytes, m.recv_bytes, m.wstate_bytes);
                                model_free(&m);
                                checked++;
                            }
                        sched_free(&s);
                        sched_free(&fw);
                    }
    }
    ck_assert_int_gt(checked, 500);
}
END_TEST

/* ---- costs ([Note: architecture costs] in arch.h) ---- */

/* The costs' parameters are the tensor table's and a built model's, for every member of
 * the family, tied and untied; Llama 3.2 1B's are 1,235,814,400 (tied; Meta's 1.24B) and
 * its training FLOPs per token at T = 2048 are 3 (16 layers + the head): a layer's
 * 2 (2048 x 3072 + 2048 x 2048 + 3 x 2048 x 8192) + 4 x 2048 x 2048 = 138,412,032, the
 * head's 2 x 128256 x 2048 = 525,336,576 (3.8 layers, which split: auto weighs). */
START_TEST(test_llama_costs) {
    const Arch *archs[] = {&arch_llama, &arch_qwen2, &arch_mistral};
    for (int i = 0; i < 3; i++)
        for (int tied = 0; tied < 2; tied++) {
            ModelDims d = dims(archs[i], 4, 2, tied);
            ArchCosts a;
            model_arch_costs(&d, 7, &a);
            double table = (double)model_total_params(&d) + (tied ? (double)d.Vp * d.C : 0);
            ck_assert_double_eq(d.L * a.layer_params + a.embed_params + a.head_params, table);
            ck_assert_double_eq(a.embed_flops, 0);
            ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0};
            Model m;
            model_init(&m, &d, &whole, 1, 1, 4, backend_cpu());
            ck_assert_uint_eq(m.nparams, model_total_params(&d));
            model_free(&m);
        }
    ModelDims g = {.V = 128256, .Vp = 128256, .maxT = 131072, .L = 16, .NH = 32, .C = 2048,
                   .tied = 1, .arch = &arch_llama, .NKV = 8, .F = 8192, .eps = 1e-5f};
    g.rope.theta = 500000.0f;
    ArchCosts a;
    model_arch_costs(&g, 2048, &a);
    ck_assert_uint_eq(model_total_params(&g), 1235814400u);
    ck_assert_double_eq(a.layer_flops, 138412032.0);
    ck_assert_double_eq(a.head_flops, 525336576.0);
    ck_assert_double_eq(model_train_flops_per_token(&g, 2048),
                        3.0 * (16 * 138412032.0 + 525336576.0));
    /* the memory balance's per-layer activations: every buffer under none, less under
     * selective (att and swi dropped), the output alone under full */
    double none = model_layer_act_bytes(&g, 10, 100, 4, 4, 0);
    double sel = model_layer_act_bytes(&g, 10, 100, 4, 4, 1);
    ck_assert_double_eq(none, 4 * (10.0 * (5 * 2048 + 3072 + 2 + 3 * 8192) + 100));
    ck_assert_double_eq(sel, none - 4 * (100 + 10.0 * 8192));
    ck_assert_double_eq(model_layer_act_bytes(&g, 10, 100, 4, 4, 2), 4 * 10.0 * 2048);
    /* at a bf16 GPU's sizes: full keeps the residual stream's output alone, 2 bytes an
     * element; none keeps less than at fp32, more than half (the statistics stay fp32) */
    ck_assert_double_eq(model_layer_act_bytes(&g, 10, 100, 2, 2, 2), 2 * 10.0 * 2048);
    double half = model_layer_act_bytes(&g, 10, 100, 2, 2, 0);
    ck_assert(half < none && half > none / 2);
}
END_TEST

int main(void) {
    backend_cpu_set_threads(2);
    Suite *s = suite_create("llama");
    TCase *tc = tcase_create("llama");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_inv_freq_llama3);
    tcase_add_test(tc, test_inv_freq_model);
    tcase_add_test(tc, test_llama_gradcheck);
    tcase_add_test(tc, test_qwen2_bias_gradcheck);
    tcase_add_test(tc, test_llama_loss_at_init);
    tcase_add_test(tc, test_llama_stage_split_exact);
    tcase_add_test(tc, test_llama_split_backward);
    tcase_add_test(tc, test_llama_recompute);
    tcase_add_test(tc, test_llama_memory_plan_sweep);
    tcase_add_test(tc, test_llama_costs);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
