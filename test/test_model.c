/* test_model.c — every op's backward against central finite differences, whole-model
 * gradients, and stage boundaries that reproduce the whole model exactly. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_load.h"
#include "backend/fastmath.h"
#include "model/decode.h"
#include "model/model.h"
#include "backend/optim.h"
#include "runtime/runtime.h"
#include "checkrun.h"
#include "emu_bf16.h"

/* Test allocations, freed together at the end of each test (LeakSanitizer-clean). */
static void *allocs[4096];
static int nallocs;
static void *talloc(size_t n) {
    ck_assert_int_lt(nallocs, 4096);
    return allocs[nallocs++] = malloc(n);
}
static void *tcalloc(size_t c, size_t n) {
    void *p = talloc(c * n);
    memset(p, 0, c * n);
    return p;
}
static void tfree_all(void) {
    while (nallocs) free(allocs[--nallocs]);
}

static uint64_t rng = 42;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rand_buf(size_t n, float scale) {
    float *x = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
/* |a-b| <= atol + rtol*|b| for all, with the first failure reported. */
static void assert_close(const char *what, const float *a, const double *b, size_t n, double atol,
                         double rtol) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(a[i] - b[i]) <= atol + rtol * fabs(b[i]),
                      "%s[%zu]: analytic %.7g vs numeric %.7g", what, i, a[i], b[i]);
}

/* Central differences of f(x) = <R, op(x)> with respect to every element of x. */
typedef double (*LossFn)(void *ctx);
static double *numgrad(LossFn f, void *ctx, float *x, size_t n, float eps) {
    double *g = talloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + eps;
        double lp = f(ctx);
        x[i] = save - eps;
        double lm = f(ctx);
        x[i] = save;
        g[i] = (lp - lm) / (2.0 * eps);
    }
    return g;
}

START_TEST(test_expf_accuracy) {
    double worst = 0;
    for (float x = -80.0f; x < 80.0f; x += 0.0137f) {
        double rel = fabs(pp_expf(x) - exp((double)x)) / exp((double)x);
        worst = rel > worst ? rel : worst;
    }
    ck_assert_msg(worst < 3e-7, "pp_expf worst relative error %g", worst);
    ck_assert_float_eq(pp_tanhf(30.0f), 1.0f);
    ck_assert_float_eq(pp_tanhf(-30.0f), -1.0f);
    ck_assert(fabsf(pp_tanhf(0.5f) - tanhf(0.5f)) < 2e-7f);
    tfree_all();
}
END_TEST

/* pp_expf is defined for every input (issue 17, item 8: a NaN went through a float to
 * int conversion and a shift of a negative value, undefined; UBSan caught it with a huge
 * lr). Each value goes through a scalar call and through an `omp simd` loop like the
 * backend's, so the vector code is checked too. */
START_TEST(test_expf_special_values) {
    static const struct { float x, want; } cases[] = {
        {NAN, NAN}, {-NAN, NAN}, {INFINITY, INFINITY}, {-INFINITY, 0.0f},
        {89.0f, INFINITY}, {1e30f, INFINITY}, {-88.0f, 0.0f}, {-1e30f, 0.0f}, {0.0f, 1.0f},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    float in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = cases[i].x;
#pragma omp simd
    for (int i = 0; i < N; i++) out[i] = pp_expf(in[i]);
    for (int i = 0; i < N; i++) {
        float want = cases[i].want, got[2] = {pp_expf(cases[i].x), out[i]};
        for (int k = 0; k < 2; k++)
            ck_assert_msg(isnan(want) ? isnan(got[k]) : got[k] == want,
                          "pp_expf(%g) = %g (%s), want %g", cases[i].x, got[k],
                          k ? "vector loop" : "scalar", want);
    }
    /* the ends of the accurate range */
    for (float x = -87.3f; x < 88.3f; x += 175.6f)
        ck_assert_msg(fabs(pp_expf(x) - exp((double)x)) / exp((double)x) < 3e-7, "pp_expf(%g) = %g",
                      x, pp_expf(x));
    ck_assert(isnan(pp_tanhf(NAN)));
    ck_assert_float_eq(pp_tanhf(INFINITY), 1.0f);
    ck_assert_float_eq(pp_tanhf(-INFINITY), -1.0f);
}
END_TEST

/* ---- layernorm ---- */
typedef struct { float *out, *mean, *rstd, *x, *w, *b, *R; int N, C; } LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    backend_cpu()->layernorm_forward(backend_cpu(), c->out, c->mean, c->rstd, c->x, c->w, c->b,
                                     c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
/* The memory and step entries of the backend, through its own interface only (as a
 * CUDA twin will be checked): a round trip to the device and back, zero, copy, the two
 * sums against plain double loops, and the optimizer entries against optim.c's
 * reference loops. */
START_TEST(test_backend_memory_and_step) {
    const Backend *be = backend_cpu();
    enum { N = 10007 };
    float *h = talloc(N * sizeof(float)), *back = talloc(N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = sinf(0.37f * i) * (i % 7 - 3);
    float *d = be->alloc(be, N * sizeof(float)), *d2 = be->alloc(be, N * sizeof(float));
    double *sums = be->alloc(be, 2 * sizeof(double)), hs[2];
    be->to_device(be, d, h, N * sizeof(float));
    be->copy(be, d2, d, N * sizeof(float));
    be->sum(be, &sums[0], d2, N);
    be->sumsq(be, &sums[1], d2, N);
    be->to_host(be, back, d2, N * sizeof(float));
    be->to_host(be, hs, sums, sizeof hs);
    be->wait(be);
    ck_assert_int_eq(memcmp(back, h, N * sizeof(float)), 0);
    double s = 0, sq = 0;
    for (int i = 0; i < N; i++) {
        s += h[i];
        sq += (double)h[i] * h[i];
    }
    ck_assert_double_eq(hs[0], s); /* sequential: the same bits */
    ck_assert_double_eq_tol(hs[1], sq, 1e-9 * sq);
    be->zero(be, d2, N * sizeof(float));
    be->to_host(be, back, d2, N * sizeof(float));
    be->wait(be);
    for (int i = 0; i < N; i++) ck_assert_float_eq(back[i], 0.0f);
    /* AdamW and SGD through the backend equal the reference loops bitwise */
    size_t nb = N * sizeof(float);
    float *p1 = talloc(nb), *p2 = talloc(nb);
    float *m1 = talloc(nb), *m2 = talloc(nb);
    float *v1 = talloc(nb), *v2 = talloc(nb);
    for (int i = 0; i < N; i++) {
        p1[i] = p2[i] = cosf(0.11f * i);
        m1[i] = m2[i] = 0.01f * (i % 5);
        v1[i] = v2[i] = 0.001f * (i % 3);
    }
    be->adamw_update(be, p1, h, m1, v1, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    optim_adamw_update(p2, h, m2, v2, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    be->sgd_update(be, p1, h, m1, N, 1e-2f, 0.9f, 0.01f, 1.0f, 2);
    optim_sgd_update(p2, h, m2, N, 1e-2f, 0.9f, 0.01f, 1.0f, 2);
    be->wait(be);
    ck_assert_int_eq(memcmp(p1, p2, N * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(m1, m2, N * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(v1, v2, N * sizeof(float)), 0);
    ck_assert_uint_eq(be->attention_saved_floats(be, 2, 5, 3), 2 * 3 * 5 * 5);
    be->dealloc(be, d);
    be->dealloc(be, d2);
    be->dealloc(be, sums);
}
END_TEST

START_TEST(test_layernorm_grad) {
    const Backend *be = backend_cpu();
    int N = 5, C = 24;
    LnCtx c = {talloc(N * C * 4), talloc(N * 4), talloc(N * 4), rand_buf(N * C, 2), rand_buf(C, 1),
               rand_buf(C, 1), rand_buf(N * C, 1), N, C};
    ln_loss(&c);
    float *dx = tcalloc(N * C, 4), *dw = tcalloc(C, 4), *db = tcalloc(C, 4);
    for (int i = 0; i < N * C; i++) dx[i] = 0.25f; /* accumulates: starts from 0.25 */
    be->layernorm_backward(be, dx, NULL, dw, db, c.R, c.x, c.mean, c.rstd, c.w, N, C,
                           talloc(be->scratch_floats(be, N, 1, C) * 4));
    double *gx = numgrad(ln_loss, &c, c.x, N * C, 1e-2f), *gw = numgrad(ln_loss, &c, c.w, C, 1e-2f);
    double *gb = numgrad(ln_loss, &c, c.b, C, 1e-2f);
    for (int i = 0; i < N * C; i++) gx[i] += 0.25;
    assert_close("dx", dx, gx, N * C, 2e-3, 2e-3);
    assert_close("dw", dw, gw, C, 2e-3, 2e-3);
    assert_close("db", db, gb, C, 2e-3, 2e-3);
    tfree_all();
}
END_TEST

/* ---- matmul ---- */
typedef struct { float *out, *x, *w, *b, *R; int N, C, OC; } MmCtx;
static double mm_loss(void *p) {
    MmCtx *c = p;
    backend_cpu()->matmul_forward(backend_cpu(), c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}
START_TEST(test_matmul_grad) {
    int N = 6, C = 9, OC = 7;
    MmCtx c = {talloc(N * OC * 4), rand_buf(N * C, 1), rand_buf(OC * C, 1), rand_buf(OC, 1),
               rand_buf(N * OC, 1), N, C, OC};
    float *dx = talloc(N * C * 4), *dw = tcalloc(OC * C, 4), *db = tcalloc(OC, 4);
    for (int i = 0; i < OC * C; i++) dw[i] = 1.0f; /* weight grads accumulate */
    for (int i = 0; i < N * C; i++) dx[i] = 99.0f; /* input grad is overwritten */
    backend_cpu()->matmul_backward(backend_cpu(), dx, dw, db, c.R, c.x, c.w, N, C, OC);
    double *gx = numgrad(mm_loss, &c, c.x, N * C, 1e-2f);
    double *gw = numgrad(mm_loss, &c, c.w, OC * C, 1e-2f);
    double *gb = numgrad(mm_loss, &c, c.b, OC, 1e-2f);
    for (int i = 0; i < OC * C; i++) gw[i] += 1.0;
    assert_close("dx", dx, gx, N * C, 1e-3, 1e-3);
    assert_close("dw", dw, gw, OC * C, 1e-3, 1e-3);
    assert_close("db", db, gb, OC, 1e-3, 1e-3);
    tfree_all();
}
END_TEST

/* ---- attention ---- */
typedef struct { float *out, *att, *qkv, *R; int B, T, C, NH; } AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    backend_cpu()->attention_forward(backend_cpu(), c->out, c->att, c->qkv, c->B, c->T, c->NH,
                                     c->NH, c->C / c->NH);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void check_attention(int B, int T, int C, int NH) {
    AttCtx c = {talloc((size_t)B * T * C * 4), talloc((size_t)B * NH * T * T * 4),
                rand_buf((size_t)B * T * 3 * C, 1), rand_buf((size_t)B * T * C, 1), B, T, C, NH};
    att_loss(&c);
    float *dqkv = talloc((size_t)B * T * 3 * C * 4);
    float *scratch = talloc(backend_cpu()->scratch_floats(backend_cpu(), B * T, T, C) * 4);
    backend_cpu()->attention_backward(backend_cpu(), dqkv, c.R, c.qkv, c.out, c.att, B, T, NH, NH,
                                      C / NH, scratch);
    double *g = numgrad(att_loss, &c, c.qkv, (size_t)B * T * 3 * C, 1e-2f);
    assert_close("dqkv", dqkv, g, (size_t)B * T * 3 * C, 2e-3, 2e-3);
    /* causality: output row t must not depend on positions > t */
    float *out0 = talloc((size_t)B * T * C * 4);
    memcpy(out0, c.out, (size_t)B * T * C * 4);
    for (int i = 0; i < 3 * C; i++) c.qkv[(size_t)(T - 1) * 3 * C + i] += 1.0f;
    att_loss(&c);
    ck_assert_mem_eq(out0, c.out, (size_t)(T - 1) * C * 4);
}
START_TEST(test_attention_grad) { check_attention(2, 5, 8, 2); }
END_TEST
START_TEST(test_attention_grad_blocks) { check_attention(1, 70, 4, 2); } /* > one causal block */
END_TEST

/* ---- gelu ---- */
typedef struct { float *out, *x, *R; int n; } GeluCtx;
static double gelu_loss(void *p) {
    GeluCtx *c = p;
    backend_cpu()->gelu_forward(backend_cpu(), c->out, c->x, c->n);
    return dot(c->out, c->R, c->n);
}
START_TEST(test_gelu_grad) {
    int n = 64;
    GeluCtx c = {talloc(n * 4), rand_buf(n, 4), rand_buf(n, 1), n};
    gelu_loss(&c);
    /* reference values: gelu_tanh(1) = 0.8411920, gelu_tanh(-2) = -0.0454023 */
    float x2[2] = {1.0f, -2.0f}, y2[2];
    backend_cpu()->gelu_forward(backend_cpu(), y2, x2, 2);
    ck_assert(fabsf(y2[0] - 0.8411920f) < 1e-6f && fabsf(y2[1] + 0.0454023f) < 1e-6f);
    float *dx = talloc(n * 4);
    backend_cpu()->gelu_backward(backend_cpu(), dx, c.x, c.R, n);
    double *g = numgrad(gelu_loss, &c, c.x, n, 1e-2f);
    assert_close("dx", dx, g, n, 1e-3, 1e-3);
    tfree_all();
}
END_TEST

/* ---- encoder ---- */
START_TEST(test_encoder) {
    int B = 2, T = 3, C = 4, V = 5;
    int inp[6] = {1, 4, 1, 0, 1, 3};
    float *wte = rand_buf(V * C, 1), *wpe = rand_buf(T * C, 1), out[24], dout[24];
    backend_cpu()->encoder_forward(backend_cpu(), out, inp, wte, wpe, B, T, C);
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++)
            ck_assert_float_eq(out[n * C + c], wte[inp[n] * C + c] + wpe[(n % T) * C + c]);
    for (int i = 0; i < 24; i++) dout[i] = (float)i;
    float dwte[20] = {0}, dwpe[12] = {0};
    backend_cpu()->encoder_backward(backend_cpu(), dwte, dwpe, dout, inp, B, T, C);
    /* token 1 appears at rows 0, 2, 4 */
    for (int c = 0; c < C; c++) {
        ck_assert_float_eq(dwte[1 * C + c], dout[0 * C + c] + dout[2 * C + c] + dout[4 * C + c]);
        ck_assert_float_eq(dwpe[1 * C + c], dout[1 * C + c] + dout[4 * C + c]);
        ck_assert_float_eq(dwte[2 * C + c], 0.0f);
    }
    tfree_all();
}
END_TEST

/* ---- cross-entropy ---- */
typedef struct { float *logits, *work, *losses; int *targets, N, V, Vp; } CeCtx;
static double ce_loss(void *p) {
    CeCtx *c = p;
    memcpy(c->work, c->logits, (size_t)c->N * c->Vp * 4);
    backend_cpu()->crossentropy_forward(backend_cpu(), c->work, c->losses, c->targets, c->N, c->V,
                                        c->Vp);
    double s = 0;
    for (int n = 0; n < c->N; n++) s += c->losses[n];
    return s / c->N;
}
START_TEST(test_crossentropy_grad) {
    int N = 4, V = 11, Vp = 16, targets[4] = {0, 3, 10, 7};
    CeCtx c = {rand_buf(N * Vp, 3), talloc(N * Vp * 4), talloc(N * 4), targets, N, V, Vp};
    for (int n = 0; n < N; n++) /* padded columns must be ignored whatever they hold */
        for (int j = V; j < Vp; j++) c.logits[n * Vp + j] = 50.0f;
    double loss = ce_loss(&c);
    /* reference loss in double */
    double ref = 0;
    for (int n = 0; n < N; n++) {
        double mx = -1e30, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, c.logits[n * Vp + j]);
        for (int j = 0; j < V; j++) s += exp(c.logits[n * Vp + j] - mx);
        ref += log(s) - (c.logits[n * Vp + targets[n]] - mx);
    }
    ck_assert_msg(fabs(loss - ref / N) < 1e-5, "loss %g vs %g", loss, ref / N);
    float *d = talloc(N * Vp * 4);
    memcpy(d, c.logits, N * Vp * 4);
    float *e = talloc(N * Vp * 4), *scratch = talloc(N * Vp * 4);
    memcpy(scratch, c.logits, N * Vp * 4);
    backend_cpu()->crossentropy_forward_backward(backend_cpu(), d, c.losses, d, targets, 1.0f / N,
                                                 N, V, Vp);
    backend_cpu()->crossentropy_forward_backward(backend_cpu(), e, c.losses, scratch, targets,
                                                 1.0f / N, N, V, Vp);
    ck_assert_msg(!memcmp(d, e, N * Vp * 4),
                  "dlogits into their own buffer differ from those in place");
    double *g = numgrad(ce_loss, &c, c.logits, N * Vp, 1e-2f);
    assert_close("dlogits", d, g, N * Vp, 1e-4, 2e-3);
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) ck_assert_float_eq(d[n * Vp + j], 0.0f);
    tfree_all();
}
END_TEST

/* ---- bf16 operand activations on the CPU: emu_bf16_backend (test/emu_bf16.c) ---- */
/* The CUDA backend's default at bf16: GELU in the fc GEMM, a bf16 residual stream */
static const Backend *backend_bf16_operands(void) { return emu_bf16_backend(1, PP_BF16); }

/* The backend the whole-model tests below run on: loop tests set it from _i (0: the CPU;
 * 1: bf16 operand activations, the CUDA default; 2: bf16 operands with GELU after the GEMM
 * and an fp32 residual stream, the switches PPTRAIN_GELU_EPILOGUE=0 and PPTRAIN_RESIDUAL=fp32
 * together). */
static const Backend *model_be;
static void pick_backend(int i) {
    model_be = i ? emu_bf16_backend(i == 1, i == 1 ? PP_BF16 : PP_F32) : backend_cpu();
}

/* ---- whole model ---- */
static const ModelDims tiny = {.V = 13, .Vp = 16, .maxT = 8, .L = 4, .NH = 2, .C = 8, .tied = 1,
                               .arch = &arch_gpt2};

/* model_forward's loss sum: on the CPU backend device memory is host memory. */
static double fwd(Model *m, int c, int s, float dloss, int want_grad) {
    double loss = 0.0;
    model_forward(m, c, s, dloss, want_grad, &loss);
    return loss;
}

static void fill_tokens(Model *m, int c, int slot, int B, int T);

/* Slot s of chunk c's input = x[n], at the backend's residual type ([Note: residual stream
 * type]: the emulated bf16 backend rounds it, as a bf16 stage boundary does). */
static void put_input(Model *m, int c, int s, const float *x, size_t n) {
    void *in = m->chunks[c].slots[s].input;
    if (m->be->residual == PP_BF16)
        emu_bf16_narrow(in, x, n);
    else
        memcpy(in, x, n * sizeof(float));
}

/* Models a and b of one chunk, gradients zeroed, each run forward on the same two
 * microbatches (slots 0 and 1: the same random inputs, the same tokens), the same random
 * output gradient then put in each slot for the backward. */
static void forward_pair(Model *a, Model *b, int B, int T) {
    size_t NC = (size_t)B * T * a->d.C;
    Model *ms[2] = {a, b};
    float *in[2], *dout[2];
    for (int s = 0; s < 2; s++) {
        in[s] = rand_buf(NC, 1);
        dout[s] = rand_buf(NC, 1);
    }
    for (int i = 0; i < 2; i++) {
        model_zero_grads(ms[i]);
        for (int s = 0; s < 2; s++) { /* both microbatches forward, as slots 0 and 1 */
            fill_tokens(ms[i], 0, s, B, T);
            put_input(ms[i], 0, s, in[s], NC);
            fwd(ms[i], 0, s, 1.0f / (B * T), 1);
            memcpy(ms[i]->chunks[0].slots[s].grad, dout[s], NC * sizeof(float));
        }
    }
}

static void setup_model_dims(Model *m, const ModelDims *d, const ChunkSpec *specs, int n, int B,
                             int T, uint64_t seed) {
    model_init(m, d, specs, n, B, T, model_be ? model_be : backend_cpu());
    model_init_weights(m, seed, 0.3f); /* large std: gradients well above rounding */
}
static void setup_model(Model *m, const ChunkSpec *specs, int n, int B, int T, uint64_t seed) {
    setup_model_dims(m, &tiny, specs, n, B, T, seed);
}
/* tiny as a Llama: RoPE, grouped-query attention (one kv head), SwiGLU, RMSNorm */
static ModelDims tiny_llama(void) {
    ModelDims d = tiny;
    d.arch = &arch_llama;
    d.NKV = 1;
    d.F = 12;
    d.eps = 1e-5f;
    d.rope.theta = 10000.0f;
    return d;
}
static void fill_tokens(Model *m, int c, int slot, int B, int T) {
    ActSlot *a = &m->chunks[c].slots[slot];
    for (int i = 0; i < B * T; i++) {
        a->tokens[i] = (i * 7 + 3) % tiny.V;
        a->targets[i] = (i * 5 + 1) % tiny.V;
    }
}

typedef struct { Model *m; int B, T; } WholeCtx;
static double whole_loss(void *p) {
    WholeCtx *c = p;
    return fwd(c->m, 0, 0, 0.0f, 0) / (c->B * c->T);
}

/* Every tensor's gradient against finite differences of the mean loss, the head's logits
 * in chunks of `rows` rows (0: all; [Note: chunked head] in model.c): the training
 * forward and the validation one that the differences run are both chunked. */
static void model_gradcheck(const ModelDims *d, int rows) {
    int B = 2, T = 5;
    ChunkSpec spec = {0, 0, d->L, 1, 1, 1, 0};
    Backend be = *backend_cpu();
    be.logits_chunk_rows = rows;
    Model m;
    model_init(&m, d, &spec, 1, B, T, &be);
    ck_assert_int_eq(m.logits_rows, rows ? rows : B * T);
    model_init_weights(&m, 7, 0.3f);
    fill_tokens(&m, 0, 0, B, T);
    model_zero_grads(&m);
    fwd(&m, 0, 0, 1.0f / (B * T), 1);
    model_backward(&m, 0, 0);
    model_fold_tied_grad(&m);
    WholeCtx c = {&m, B, T};
    int checked = 0;
    for (int i = 0; i < m.ntensors; i++) { /* a few elements of every tensor */
        const ParamTensor *t = &m.tensors[i];
        for (size_t j = 0; j < t->numel; j += 1 + t->numel / 5) {
            float *x = m.params + t->offset + j;
            if ((!strcmp(t->name, "wte") || !strcmp(t->name, "lm_head")) &&
                j >= (size_t)d->V * d->C)
                continue;
            double g = *numgrad(whole_loss, &c, x, 1, 1e-2f);
            float a = m.grads[t->offset + j];
            ck_assert_msg(fabs(a - g) <= 2e-4 + 2e-2 * fabs(g), "%s[%zu]: analytic %g numeric %g",
                          t->name, j, a, g);
            checked++;
        }
    }
    ck_assert_int_gt(checked, 50);
    model_free(&m);
    tfree_all();
}

START_TEST(test_model_gradcheck) { model_gradcheck(&tiny, 0); }
END_TEST

START_TEST(test_model_gradcheck_untied) { /* a separate lm_head */
    ModelDims d = tiny;
    d.tied = 0;
    model_gradcheck(&d, 0);
}
END_TEST

/* The head in chunks of 3 and of 1 of the 10 rows (3 does not divide them). */
START_TEST(test_model_gradcheck_chunked) {
    ModelDims d = tiny;
    model_gradcheck(&d, 3);
    d.tied = 0;
    model_gradcheck(&d, 1);
}
END_TEST

/* A middle stage (layers 1..2: no embeddings, no head) alone: its input gradient and
 * weight gradients against finite differences of <R, stage output>. */
typedef struct { Model *m; const float *R; size_t n; } MidCtx;
static double mid_loss(void *p) {
    MidCtx *c = p;
    fwd(c->m, 0, 0, 0.0f, 0);
    return dot(model_chunk_output(c->m, 0, 0), c->R, c->n);
}
START_TEST(test_middle_stage_gradcheck) {
    int B = 2, T = 4, N = B * T, C = tiny.C;
    ChunkSpec mid = {1, 1, 3, 0, 0, 1, 0};
    Model m;
    setup_model(&m, &mid, 1, B, T, 3);
    ck_assert_int_eq(model_find(&m, "wte"), -1);
    ActSlot *a = &m.chunks[0].slots[0];
    float *x = rand_buf((size_t)N * C, 1), *R = rand_buf((size_t)N * C, 1);
    memcpy(a->input, x, (size_t)N * C * 4);
    MidCtx c = {&m, R, (size_t)N * C};
    model_zero_grads(&m);
    fwd(&m, 0, 0, 0.0f, 1);
    memcpy(a->grad, R, (size_t)N * C * 4); /* d(output) = R */
    model_backward(&m, 0, 0);
    float *dx = talloc((size_t)N * C * 4);
    memcpy(dx, a->grad, (size_t)N * C * 4);
    double *gx = numgrad(mid_loss, &c, a->input, (size_t)N * C, 1e-2f);
    assert_close("d(stage input)", dx, gx, (size_t)N * C, 2e-3, 2e-2);
    for (int i = 0; i < m.ntensors; i++) {
        const ParamTensor *t = &m.tensors[i];
        for (size_t j = 0; j < t->numel; j += 1 + t->numel / 4) {
            double g = *numgrad(mid_loss, &c, m.params + t->offset + j, 1, 1e-2f);
            float an = m.grads[t->offset + j];
            ck_assert_msg(fabs(an - g) <= 2e-3 + 2e-2 * fabs(g), "%s[%zu]: analytic %g numeric %g",
                          t->name, j, an, g);
        }
    }
    model_free(&m);
    tfree_all();
}
END_TEST

START_TEST(test_loss_at_init) {
    ModelDims d = {.V = 256, .Vp = 256, .maxT = 16, .L = 2, .NH = 2, .C = 32, .tied = 1,
                   .arch = &arch_gpt2};
    ChunkSpec spec = {0, 0, d.L, 1, 1, 1, 0};
    Model m;
    model_init(&m, &d, &spec, 1, 4, 16, backend_cpu());
    model_init_weights(&m, 1337, 0.02f);
    ActSlot *a = &m.chunks[0].slots[0];
    for (int i = 0; i < 64; i++) {
        a->tokens[i] = (i * 37) % 256;
        a->targets[i] = (i * 11) % 256;
    }
    double loss = fwd(&m, 0, 0, 0.0f, 0) / 64;
    ck_assert_msg(fabs(loss - log(256.0)) < 0.05, "loss at init %g, ln V = %g", loss, log(256.0));
    model_free(&m);
    tfree_all();
}
END_TEST

/* A stage with layers 2..3 fed the output of a stage with 0..1 reproduces the whole
 * model's forward and backward bit for bit. */
START_TEST(test_stage_split_exact) {
    int B = 2, T = 6, N = B * T, C = tiny.C;
    ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0}, s0 = {0, 0, 2, 1, 0, 1, 0}, s1 = {1, 2, 4, 0, 1, 1, 0};
    Model w, a, b;
    setup_model(&w, &whole, 1, B, T, 11);
    setup_model(&a, &s0, 1, B, T, 11);
    setup_model(&b, &s1, 1, B, T, 11);
    ck_assert_int_eq(model_find(&a, "lnfw"), -1); /* a stage holds only its own tensors */
    ck_assert_int_eq(model_find(&b, "wpe"), -1);
    ck_assert_int_ge(model_find(&b, "wte"), 0);   /* tied head on the last stage */
    ck_assert_int_eq(model_find(&b, "h.1.qkvw"), -1);
    fill_tokens(&w, 0, 0, B, T);
    fill_tokens(&a, 0, 0, B, T);
    fill_tokens(&b, 0, 0, B, T);
    float dloss = 1.0f / N;
    double lw = fwd(&w, 0, 0, dloss, 1);
    fwd(&a, 0, 0, dloss, 1);
    memcpy(b.chunks[0].slots[0].input, model_chunk_output(&a, 0, 0), (size_t)N * C * 4);
    double lb = fwd(&b, 0, 0, dloss, 1);
    ck_assert(lw == lb);
    model_backward(&w, 0, 0);
    model_backward(&b, 0, 0);
    memcpy(a.chunks[0].slots[0].grad, b.chunks[0].slots[0].grad, (size_t)N * C * 4);
    model_backward(&a, 0, 0);
    model_fold_tied_grad(&w);
    /* every tensor's gradient equals the whole model's; wte's is the sum of both stages' */
    for (int i = 0; i < w.ntensors; i++) {
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
    tfree_all();
}
END_TEST

static float *copy_of(const float *x, size_t n) {
    float *y = talloc(n * 4);
    memcpy(y, x, n * 4);
    return y;
}

/* n floats of a and b have the same bits; returns how many differ (0 expected). */
static size_t bits_differ(const float *a, const float *b, size_t n) {
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return wrong;
}

/* ||a - b|| / ||b|| over n floats. */
static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- chunked head ([Note: chunked head] in model.c) ---- */

/* The head in chunks of R rows against the unchunked head, for a whole model (tied and
 * untied, and at a size where the BLAS blocks its GEMMs) with R from 1 to more than N,
 * dividing N or not. Rows are independent, but the CPU's GEMM does not promise a row the
 * same sums whatever rows it is blocked with (OpenBLAS 0.3.21 here: bitwise at the tiny
 * size, a few ulps apart at C = 64, Vp = 512), and the head's weight gradient is one
 * GEMM per chunk summed: so float rounding apart, measured here <= 2e-7 relative per
 * row's loss, 4e-7 (relative L2) in dlnf = d(loss)/d(lnf output) and 1e-6 in any
 * gradient after two layers. The bounds below are 5-10x that; a chunk whose rows were
 * misplaced would be off by O(1). The logits buffer, and so the plan, shrink by exactly
 * (N - R) * Vp floats. */
START_TEST(test_chunked_head) {
    ModelDims dims[3] = {tiny, tiny,
                         {.V = 500, .Vp = 512, .maxT = 64, .L = 2, .NH = 2, .C = 64, .tied = 1,
                          .arch = &arch_gpt2}};
    dims[1].tied = 0;
    int Ts[3] = {5, 5, 50}, rows[] = {1, 3, 4, 7, 64, 99, 1000}, checked = 0;
    double worst[3] = {0, 0, 0}; /* a row's loss, dlnf, a gradient */
    for (int k = 0; k < 3; k++) {
        const ModelDims *d = &dims[k];
        int B = 2, T = Ts[k], N = B * T;
        int C = d->C, Vp = d->Vp;
        ChunkSpec spec = {0, 0, d->L, 1, 1, 1, 0};
        Model ref;
        setup_model_dims(&ref, d, &spec, 1, B, T, 5);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            int R = rows[ri], Reff = R < N ? R : N;
            Backend be = *backend_cpu();
            be.logits_chunk_rows = R;
            Model ch;
            model_init(&ch, d, &spec, 1, B, T, &be);
            model_init_weights(&ch, 5, 0.3f);
            ck_assert_int_eq(ch.logits_rows, Reff);
            ck_assert_uint_eq(ref.act_bytes - ch.act_bytes,
                              (size_t)(N - Reff) * Vp * sizeof(float));
            ModelPlan plan;
            model_plan(&plan, d, &spec, NULL, NULL, 1, B, T,
                       be.attention_saved_floats(&be, B, T, d->NH), pp_dtype_bytes(be.operand),
                       pp_dtype_bytes(be.residual), pp_dtype_bytes(be.logits), R, 0, 0, 0);
            ck_assert_uint_eq(plan.slots, ch.act_bytes);
            ck_assert_uint_eq(plan.logits, (size_t)Reff * Vp * pp_dtype_bytes(be.logits));
            Model *ms[2] = {&ref, &ch};
            double loss[2], vloss[2];
            float *losses[2], *vlosses[2], *dlnf[2];
            for (int i = 0; i < 2; i++) {
                ActSlot *a = &ms[i]->chunks[0].slots[0];
                for (int n = 0; n < N; n++) {
                    a->tokens[n] = (n * 7 + 3) % d->V;
                    a->targets[n] = (n * 31 + 1) % d->V;
                }
                model_zero_grads(ms[i]);
                vloss[i] = fwd(ms[i], 0, 0, 0.0f, 0); /* validation */
                vlosses[i] = copy_of(ms[i]->losses, N);
                loss[i] = fwd(ms[i], 0, 0, 1.0f / N, 1);
                losses[i] = copy_of(ms[i]->losses, N);
                dlnf[i] = copy_of(model_head_grad(ms[i], 0, 0), (size_t)N * C);
                model_backward(ms[i], 0, 0);
                model_fold_tied_grad(ms[i]);
            }
            ck_assert_msg(fabs(loss[1] - loss[0]) <= 1e-6 * loss[0] &&
                              fabs(vloss[1] - vloss[0]) <= 1e-6 * vloss[0],
                          "dims %d R=%d: loss %.9g vs %.9g, validation %.9g vs %.9g", k, R, loss[1],
                          loss[0], vloss[1], vloss[0]);
            for (int n = 0; n < N; n++) {
                double e = fabs(losses[1][n] - losses[0][n]) / losses[0][n];
                worst[0] = e > worst[0] ? e : worst[0];
                ck_assert_msg(e <= 1e-6 &&
                                  fabs(vlosses[1][n] - vlosses[0][n]) <= 1e-6 * vlosses[0][n],
                              "dims %d R=%d row %d: loss %.9g vs %.9g", k, R, n, losses[1][n],
                              losses[0][n]);
            }
            double e = rel_l2(dlnf[1], dlnf[0], (size_t)N * C);
            worst[1] = e > worst[1] ? e : worst[1];
            ck_assert_msg(e <= 2e-6, "dims %d R=%d: dlnf %.2e off (relative L2)", k, R, e);
            for (int t = 0; t < ref.ntensors; t++) {
                const ParamTensor *pt = &ref.tensors[t];
                e = rel_l2(ch.grads + pt->offset, ref.grads + pt->offset, pt->numel);
                worst[2] = e > worst[2] ? e : worst[2];
                ck_assert_msg(e <= 1e-5, "dims %d R=%d: d%s %.2e off (relative L2)", k, R,
                              pt->name, e);
            }
            model_free(&ch);
            checked++;
        }
        model_free(&ref);
    }
    ck_assert_int_eq(checked, 21);
    printf("chunked head vs unchunked, worst relative difference: a row's loss %.2e, dlnf %.2e, "
           "a gradient %.2e\n",
           worst[0], worst[1], worst[2]);
    tfree_all();
}
END_TEST

/* [Note: logits chunk knob] in backend_load.c: PPTRAIN_LOGITS_CHUNK_ROWS sets the chosen
 * backend's chunk, alone and with host staging, says so in the build report's device
 * line, and a value that is not a row count is a usage error naming the variable. */
START_TEST(test_logits_knob) {
    Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.device, sizeof cfg.device, "cpu");
    BackendSizes sz = {10, 5, 2, 4, 16, 32, 16 * 8, 0};
    const Backend *be;
    char note[256], err[PP_ERR_MAX];
    ck_assert_int_eq(backend_select(&cfg, 0, &sz, &be, note, sizeof note, err, sizeof err), PP_OK);
    ck_assert_int_eq(be->logits_chunk_rows, 0); /* the CPU: all rows */
    ck_assert_ptr_null(strstr(note, "chunks"));
    backend_release(be);
    for (int staged = 0; staged < 2; staged++) {
        setenv("PPTRAIN_HOST_STAGING", staged ? "1" : "0", 1);
        setenv("PPTRAIN_LOGITS_CHUNK_ROWS", "5", 1);
        ck_assert_int_eq(backend_select(&cfg, 0, &sz, &be, note, sizeof note, err, sizeof err),
                         PP_OK);
        ck_assert_int_eq(be->logits_chunk_rows, 5);
        ck_assert_int_eq(be->device_memory, staged);
        ck_assert_msg(strstr(note, "head logits in chunks of 5 rows (PPTRAIN_LOGITS_CHUNK_ROWS)"),
                      "%s", note);
        Model m; /* the model takes them */
        ChunkSpec spec = {0, 0, tiny.L, 1, 1, 1, 0};
        model_init(&m, &tiny, &spec, 1, 2, 5, be);
        ck_assert_int_eq(m.logits_rows, 5);
        model_free(&m);
        backend_release(be);
        /* a copy: the CPU backend is unchanged */
        ck_assert_int_eq(backend_cpu()->logits_chunk_rows, 0);
    }
    const char *bad[] = {"-1", "x", "3x", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("PPTRAIN_LOGITS_CHUNK_ROWS", bad[i], 1);
        ck_assert_int_eq(backend_select(&cfg, 0, &sz, &be, note, sizeof note, err, sizeof err),
                         PP_EUSAGE);
        ck_assert_msg(strstr(err, "PPTRAIN_LOGITS_CHUNK_ROWS") && strstr(err, bad[i]) &&
                          strstr(err, ">= 0"),
                      "%s", err);
    }
    unsetenv("PPTRAIN_LOGITS_CHUNK_ROWS");
    unsetenv("PPTRAIN_HOST_STAGING");
}
END_TEST

/* ---- split backward ([Note: split backward] in backend.h) ---- */


/* Per op: the input half (weight outputs NULL) then the weight half (input output
 * NULL) leave exactly the bits of the fused call, for matmul and LayerNorm, at odd
 * shapes, with weight gradients and LayerNorm's input gradient starting non-zero
 * (they accumulate). */
START_TEST(test_split_backward_ops) {
    const Backend *be = backend_cpu();
    int N = 13, C = 21, OC = 11;
    float *dout = rand_buf((size_t)N * OC, 1), *x = rand_buf((size_t)N * C, 1);
    float *w = rand_buf((size_t)OC * C, 1);
    float *dw0 = rand_buf((size_t)OC * C, 1), *db0 = rand_buf(OC, 1);
    float *dx_f = talloc((size_t)N * C * 4);
    float *dw_f = copy_of(dw0, (size_t)OC * C), *db_f = copy_of(db0, OC);
    float *dx_s = talloc((size_t)N * C * 4);
    float *dw_s = copy_of(dw0, (size_t)OC * C), *db_s = copy_of(db0, OC);
    be->matmul_backward(be, dx_f, dw_f, db_f, dout, x, w, N, C, OC);
    be->matmul_backward(be, dx_s, NULL, NULL, dout, x, w, N, C, OC);
    /* untouched */
    ck_assert(bits_differ(dw_s, dw0, (size_t)OC * C) == 0 && bits_differ(db_s, db0, OC) == 0);
    be->matmul_backward(be, NULL, dw_s, db_s, dout, x, w, N, C, OC);
    ck_assert_uint_eq(bits_differ(dx_f, dx_s, (size_t)N * C), 0);
    ck_assert_uint_eq(bits_differ(dw_f, dw_s, (size_t)OC * C), 0);
    ck_assert_uint_eq(bits_differ(db_f, db_s, OC), 0);
    ck_assert_uint_gt(bits_differ(dw_f, dw0, (size_t)OC * C), 0); /* it did add something */
    /* LayerNorm: dinp accumulates too */
    float *lx = rand_buf((size_t)N * C, 2), *lw = rand_buf(C, 1), *lb = rand_buf(C, 1);
    float *ld = rand_buf((size_t)N * C, 1);
    float *out = talloc((size_t)N * C * 4), *mean = talloc(N * 4), *rstd = talloc(N * 4);
    float *scratch = talloc(be->scratch_floats(be, N, 1, C) * 4);
    be->layernorm_forward(be, out, mean, rstd, lx, lw, lb, N, C);
    float *dx0 = rand_buf((size_t)N * C, 1), *gw0 = rand_buf(C, 1), *gb0 = rand_buf(C, 1);
    float *ldx_f = copy_of(dx0, (size_t)N * C), *lgw_f = copy_of(gw0, C), *lgb_f = copy_of(gb0, C);
    float *ldx_s = copy_of(dx0, (size_t)N * C), *lgw_s = copy_of(gw0, C), *lgb_s = copy_of(gb0, C);
    be->layernorm_backward(be, ldx_f, NULL, lgw_f, lgb_f, ld, lx, mean, rstd, lw, N, C, scratch);
    be->layernorm_backward(be, ldx_s, NULL, NULL, NULL, ld, lx, mean, rstd, lw, N, C, scratch);
    ck_assert(bits_differ(lgw_s, gw0, C) == 0 && bits_differ(lgb_s, gb0, C) == 0);
    be->layernorm_backward(be, NULL, NULL, lgw_s, lgb_s, ld, lx, mean, rstd, lw, N, C, scratch);
    ck_assert_uint_eq(bits_differ(ldx_f, ldx_s, (size_t)N * C), 0);
    ck_assert_uint_eq(bits_differ(lgw_f, lgw_s, C), 0);
    ck_assert_uint_eq(bits_differ(lgb_f, lgb_s, C), 0);
    ck_assert_uint_gt(bits_differ(ldx_f, dx0, (size_t)N * C), 0);
    tfree_all();
}
END_TEST

/* Per chunk: for a whole model (embeddings, layers, head), a first, a middle and a
 * last chunk, the input half then the weight half give model_backward's d(input)
 * and every gradient bitwise, over two microbatches whose Ws run after both Is (two
 * W state sets, as a zero-bubble schedule holds them). Twice ([Note: W state]): with
 * NH*T < 4C the four [N,C] douts go to the sets; with NH*T >= 4C into the attention
 * probabilities, and the sets hold nothing. */
START_TEST(test_split_backward_chunk) {
    pick_backend(_i);
    ModelDims wide = tiny, llama = tiny_llama();
    wide.NH = 4; /* T = 8: NH*T = 32 = 4C */
    const ModelDims *dims[3] = {&tiny, &wide, &llama}; /* and a Llama: dqkv in its qkv */
    int Ts[3] = {5, 8, 5};
    for (int v = 0; v < 3; v++) {
        int B = 2, T = Ts[v], N = B * T, C = tiny.C;
        ChunkSpec specs[] = {{0, 0, 4, 1, 1, 2, 0},
                             {0, 0, 2, 1, 0, 2, 0},
                             {1, 1, 3, 0, 0, 2, 0},
                             {2, 2, 4, 0, 1, 2, 0}};
        for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
            Model f, sp;
            setup_model_dims(&f, dims[v], &specs[k], 1, B, T, 21);
            setup_model_dims(&sp, dims[v], &specs[k], 1, B, T, 21);
            model_init_wstate(&sp, 0, 2);
            size_t nl = (size_t)(specs[k].l1 - specs[k].l0), nc = (size_t)N * C * sizeof(float);
            size_t four = (size_t)N * C * 4 * pp_dtype_bytes(model_be->operand);
            /* the input half's scratch (the four at the operand size: half at bf16), and the
             * [N,C] four per set and layer when they do not fit (GPT-2's) */
            size_t keep = model_ws_four_elems((size_t)N, (size_t)C) *
                          pp_dtype_bytes(model_be->operand);
            ck_assert_uint_eq(keep, _i ? 2 * nc : 4 * nc); /* N C a multiple of 8 here */
            if (v < 2)
                ck_assert_uint_eq(sp.wstate_bytes, keep + (v == 0 ? 2 * nl * four : 0));
            else
                ck_assert_uint_gt(sp.wstate_bytes, 0);
            ck_assert_uint_eq(f.wstate_bytes, 0);
            forward_pair(&f, &sp, B, T);
            long casts = emu_bf16_casts;
            model_backward(&f, 0, 0);
            model_backward(&f, 0, 1);
            long fused = emu_bf16_casts - casts;
            model_backward_input(&sp, 0, 0, 1); /* W state sets in either order */
            model_backward_input(&sp, 0, 1, 0);
            long input = emu_bf16_casts - casts - fused;
            if (_i && v < 2) { /* [Note: residual gradient's operand]: GPT-2's fused backward
                                  casts only a top layer whose gradient came from outside */
                ck_assert_int_eq(fused, 2 * (specs[k].last ? 0 : 1));
                ck_assert_int_eq(input, 2 * (long)nl); /* the input half: each layer its own */
            }
            for (int s = 0; s < 2; s++)
                ck_assert_msg(bits_differ(f.chunks[0].slots[s].grad, sp.chunks[0].slots[s].grad,
                                          (size_t)N * C) == 0,
                              "chunk %zu microbatch %d: d(input) of the input half differs", k, s);
            /* no W yet */
            for (size_t j = 0; j < sp.nparams; j++) ck_assert(sp.grads[j] == 0.0f || specs[k].last);
            model_backward_weight(&sp, 0, 0, 1);
            model_backward_weight(&sp, 0, 1, 0);
            model_fold_tied_grad(&f);
            model_fold_tied_grad(&sp);
            ck_assert_uint_eq(f.nparams, sp.nparams);
            ck_assert_msg(bits_differ(f.grads, sp.grads, f.nparams) == 0,
                          "chunk %zu: %zu of %zu gradients differ", k,
                          bits_differ(f.grads, sp.grads, f.nparams), f.nparams);
            size_t nonzero = 0;
            for (size_t j = 0; j < f.nparams; j++) nonzero += f.grads[j] != 0.0f;
            ck_assert_uint_gt(nonzero, f.nparams / 2); /* the comparison saw real gradients */
            model_free(&f);
            model_free(&sp);
        }
    }
    model_be = NULL;
    tfree_all();
}
END_TEST

/* [Note: recompute] Per chunk (whole, first, middle, last) and per mode (selective,
 * full; every layer or the first only): slots without keep give the bits of slots
 * that keep everything, in d(input) and every gradient, fused and split backward;
 * the slots are smaller, and the model counts one recompute per layer per backward
 * action. Two microbatches forward before either backward, so the workspace holds
 * the second's layers when the first's backward runs. */
START_TEST(test_recompute_chunk) {
    pick_backend(_i);
    int B = 2, T = 5, N = B * T, C = tiny.C;
    ChunkSpec specs[] = {{0, 0, 4, 1, 1, 2, 0}, {0, 0, 2, 1, 0, 2, 0},
                         {1, 1, 3, 0, 0, 2, 0}, {2, 2, 4, 0, 1, 2, 0}};
    ModelDims llama = tiny_llama();
    const ModelDims *dims[2] = {&tiny, &llama}; /* GPT-2 and a Llama (RoPE'd qkv kept) */
    int checked = 0;
    for (int a = 0; a < 2; a++)
        for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
            for (int mode = PP_RECOMPUTE_SELECTIVE; mode <= PP_RECOMPUTE_FULL; mode++)
                for (int layers = 0; layers <= 1; layers++)
                    for (int split = 0; split <= 1; split++) {
                        Model f, r;
                        ChunkRecompute rc = {mode, layers};
                        int nl = specs[k].l1 - specs[k].l0, nrc = layers ? 1 : nl;
                        setup_model_dims(&f, dims[a], &specs[k], 1, B, T, 21);
                        model_init_recompute(&r, dims[a], &specs[k], &rc, 1, B, T, model_be, 0, 2);
                        model_init_weights(&r, 21, 0.3f);
                        /* blocks crosswise */
                        model_slot_attach(&r, 0, 0, 1);
                        model_slot_attach(&r, 0, 1, 0);
                        /* layer 0 recomputes: what the mode drops is the workspace's, the output
                         * the slot's own */
                        void **a0 = r.chunks[0].slots[0].acts, **a1 = r.chunks[0].slots[1].acts;
                        int out = r.arch->act_out, dropped = 0;
                        for (int j = 0; j < r.arch->nacts; j++)
                            if (!(r.arch->acts[j].keep & 1 << mode)) {
                                ck_assert(a0[j] == r.work[j]);
                                dropped++;
                            }
                        ck_assert_int_gt(dropped, 0);
                        ck_assert(a1[out] && a1[out] != r.work[out]);
                        if (split) model_init_wstate(&r, 0, 2);
                        ck_assert_uint_gt(r.work_bytes, 0);
                        forward_pair(&f, &r, B, T);
                        for (int s = 0; s < 2; s++) {
                            model_backward(&f, 0, s);
                            if (split)
                                model_backward_input(&r, 0, s, s);
                            else
                                model_backward(&r, 0, s);
                        }
                        for (int s = 0; split && s < 2; s++) model_backward_weight(&r, 0, s, s);
                        ck_assert_int_eq(r.recomputes, (long)2 * nrc * (split ? 2 : 1));
                        ck_assert_int_eq(f.recomputes, 0);
                        for (int s = 0; s < 2; s++)
                            ck_assert_msg(bits_differ(f.chunks[0].slots[s].grad,
                                                      r.chunks[0].slots[s].grad,
                                                      (size_t)N * C) == 0,
                                          "%s chunk %zu mode %d layers %d split %d mb %d: "
                                          "d(input) differs",
                                          dims[a]->arch->name, k, mode, layers, split, s);
                        model_fold_tied_grad(&f);
                        model_fold_tied_grad(&r);
                        ck_assert_msg(bits_differ(f.grads, r.grads, f.nparams) == 0,
                                      "%s chunk %zu mode %d layers %d split %d: %zu gradients "
                                      "differ",
                                      dims[a]->arch->name, k, mode, layers, split,
                                      bits_differ(f.grads, r.grads, f.nparams));
                        size_t nonzero = 0;
                        for (size_t j = 0; j < f.nparams; j++) nonzero += f.grads[j] != 0.0f;
                        ck_assert_uint_gt(nonzero, f.nparams / 2);
                        model_free(&f);
                        model_free(&r);
                        checked++;
                    }
    ck_assert_int_eq(checked, 64);
    model_be = NULL;
    tfree_all();
}
END_TEST

/* [Note: operand activations] The model on bf16 operand activations (the CPU emulating
 * a bf16 GPU's storage) against fp32, per chunk (whole, first, middle, last) and head
 * chunk rows (all, 3): the loss and d(input) within bf16's rounding, the gradients within
 * a few of its ulps (relative L2), and not equal (the emulation really rounds). GPT-2 and
 * a Llama (RoPE rotating the bf16 qkv in place, grouped-query attention). */
START_TEST(test_operand_bf16) {
    int B = 2, T = 5, N = B * T, C = tiny.C;
    int checked = 0;
    ChunkSpec specs[] = {{0, 0, 4, 1, 1, 1, 0}, {0, 0, 2, 1, 0, 1, 0},
                         {1, 1, 3, 0, 0, 1, 0}, {2, 2, 4, 0, 1, 1, 0}};
    float *in = rand_buf((size_t)N * C, 1), *dout = rand_buf((size_t)N * C, 1);
    ModelDims llama = tiny_llama();
    const ModelDims *dims[] = {&tiny, &llama};
    for (int a = 0; a < 2; a++)
        for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
            for (int rows = 0; rows <= 3; rows += 3) {
                Backend fb = *backend_cpu(), hb = *backend_bf16_operands();
                fb.logits_chunk_rows = hb.logits_chunk_rows = rows;
                Model f, h;
                model_init(&f, dims[a], &specs[k], 1, B, T, &fb);
                model_init(&h, dims[a], &specs[k], 1, B, T, &hb);
                Model *ms[2] = {&f, &h};
                double loss[2];
                for (int i = 0; i < 2; i++) {
                    model_init_weights(ms[i], 9, 0.3f);
                    model_zero_grads(ms[i]);
                    fill_tokens(ms[i], 0, 0, B, T);
                    put_input(ms[i], 0, 0, in, (size_t)N * C);
                    loss[i] = fwd(ms[i], 0, 0, 1.0f / N, 1);
                    if (!specs[k].last)
                        memcpy(ms[i]->chunks[0].slots[0].grad, dout, (size_t)N * C * 4);
                    model_backward(ms[i], 0, 0);
                    model_fold_tied_grad(ms[i]);
                }
                if (specs[k].last)
                    ck_assert_msg(fabs(loss[1] - loss[0]) <= 1e-2 * fabs(loss[0]),
                                  "%s chunk %zu rows %d: loss %g against fp32 %g",
                                  dims[a]->arch->name, k, rows, loss[1], loss[0]);
                double eg = rel_l2(h.grads, f.grads, f.nparams);
                double ei = rel_l2(h.chunks[0].slots[0].grad, f.chunks[0].slots[0].grad,
                                   (size_t)N * C);
                ck_assert_msg(eg <= 3e-2 && eg > 0,
                              "%s chunk %zu rows %d: gradients %.2e from fp32's",
                              dims[a]->arch->name, k, rows, eg);
                ck_assert_msg(ei <= 3e-2 && ei > 0,
                              "%s chunk %zu rows %d: d(input) %.2e from fp32's",
                              dims[a]->arch->name, k, rows, ei);
                model_free(&f);
                model_free(&h);
                checked++;
            }
    ck_assert_int_eq(checked, 16);
    tfree_all();
}
END_TEST

/* [Note: KV cache] on bf16 operand activations (the CPU emulating a bf16 GPU): GPT-2 and a
 * Llama (RoPE rotating the bf16 qkv in place as it appends, the cache holding the rounded
 * values) decode a sequence all at once and one position at a time: the per-token losses of
 * the logits within bf16's rounding of the training forward's (whose logits are bf16 too),
 * and one at a time within it of all at once. A decoding op reading the bf16 qkv as fp32
 * gives NaN or values ~1e38 off. */
START_TEST(test_decode_operand_bf16) {
    ModelDims llama = tiny_llama();
    const ModelDims *dims[2] = {&tiny, &llama};
    int T = tiny.maxT;
    for (int a = 0; a < 2; a++) {
        Backend hb = *backend_bf16_operands();
        ChunkSpec all = {0, 0, dims[a]->L, 1, 1, 1, 0};
        Model m;
        model_init(&m, dims[a], &all, 1, 1, T, &hb);
        model_init_weights(&m, 3, 0.3f);
        ActSlot *sl = &m.chunks[0].slots[0];
        int tok[8], V = tiny.V, Vp = tiny.Vp;
        for (int i = 0; i < T; i++) tok[i] = (i * 7 + 3) % V;
        for (int i = 0; i < T; i++) sl->tokens[i] = tok[i], sl->targets[i] = tok[(i + 1) % T];
        double loss;
        model_forward(&m, 0, 0, 1.0f, 0, &loss);
        Decoder whole, one;
        char err[256];
        ck_assert_int_eq(decode_init(&whole, &m, T, T, T, err, sizeof err), PP_OK);
        ck_assert_int_eq(decode_init(&one, &m, T, 1, 1, err, sizeof err), PP_OK);
        decode_run(&whole, tok, T, T);
        for (int i = 0; i < T; i++) {
            const float *z = whole.logits + (size_t)i * Vp;
            double mx = z[0], sum = 0;
            for (int j = 1; j < V; j++) mx = z[j] > mx ? z[j] : mx;
            for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
            double nll = log(sum) + mx - z[sl->targets[i]];
            ck_assert_msg(fabs(nll - m.losses[i]) <= 2e-2 * fabs(m.losses[i]),
                          "%s position %d: decoded loss %g, the forward's %g", dims[a]->arch->name,
                          i, nll, m.losses[i]);
        }
        for (int i = 0; i < T; i++) {
            decode_run(&one, tok + i, 1, 1);
            double e = 0, sc = 0;
            for (int j = 0; j < Vp; j++) {
                e = fmax(e, fabs((double)one.logits[j] - whole.logits[(size_t)i * Vp + j]));
                sc = fmax(sc, fabs((double)whole.logits[(size_t)i * Vp + j]));
            }
            ck_assert_msg(e <= 2e-2 * sc, "%s position %d alone: logits off by %g (of %g)",
                          dims[a]->arch->name, i, e, sc);
        }
        decode_free(&whole);
        decode_free(&one);
        model_free(&m);
    }
}
END_TEST

/* [Note: memory plan] For every schedule kind over P <= 4, its v range (<= 2) and
 * M <= 5, every recompute mode and every rank: what model_init_recompute,
 * model_init_optimizer and model_init_wstate allocate for runtime_chunk_plan's chunks
 * equals model_plan's bytes, term by term. Twice ([Note: W state]): NH*T < 4C (the
 * [N,C] douts in sets) and NH*T = 4C (in the probabilities). On the CPU and with bf16
 * operand activations ([Note: operand activations] in backend.h). */
START_TEST(test_memory_plan_sweep) {
    ModelDims dims[2] = {
        {.V = 16, .Vp = 16, .maxT = 4, .L = 8, .NH = 2, .C = 8, .tied = 1, .arch = &arch_gpt2},
        {.V = 16, .Vp = 16, .maxT = 4, .L = 8, .NH = 8, .C = 8, .tied = 1, .arch = &arch_gpt2}};
    int B = 1, T = 4, checked = 0, kinds = 0;
    for (int di = 0; di < 2; di++) {
    ModelDims d = dims[di];
    kinds = 0;
    for (const char *const *kind = sched_kinds(); *kind; kind++, kinds++)
        for (int P = 1; P <= 4; P++)
            for (int v = 1; v <= 2; v++)
                for (int M = 1; M <= 5; M++) {
                    Schedule s, fwd;
                    Partition part;
                    char err[PP_ERR_MAX];
                    if (sched_kind_check(*kind, P, v, M, err, sizeof err) != PP_OK) continue;
                    ck_assert_msg(sched_build(&s, *kind, P, v, M, err, sizeof err) == PP_OK,
                                  "%s", err);
                    ck_assert(sched_build_forward_only(&fwd, &s, err, sizeof err) == PP_OK);
                    ArchCosts ac;
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
                            runtime_chunk_plan(&s, &fwd, &part, r, mode, M % 2, specs, rc, nws, nb);
                            Backend be = *(_i ? backend_bf16_operands() : backend_cpu());
                            /* all, 1 or 2 of the 4 rows ([Note: chunked head]) */
                            be.logits_chunk_rows = M % 3;
                            model_plan(&plan, &d, specs, rc, nws, v, B, T,
                                       be.attention_saved_floats(&be, B, T, d.NH),
                                       pp_dtype_bytes(be.operand), pp_dtype_bytes(be.residual),
                                       pp_dtype_bytes(be.logits), be.logits_chunk_rows, 2, nb[1],
                                       nb[0]);
                            model_init_recompute(&m, &d, specs, rc, v, B, T, &be, nb[1], nb[0]);
                            model_init_optimizer(&m, 2);
                            for (int c = 0; c < v; c++) model_init_wstate(&m, c, nws[c]);
                            size_t pb = m.nparams * sizeof(float);
                            size_t gb = pb +
                                        (m.dhead_tied ? (size_t)d.Vp * d.C * sizeof(float) : 0);
                            ck_assert_msg(plan.params == pb && plan.grads == gb &&
                                              plan.optimizer == 2 * pb,
                                          "%s P=%d v=%d M=%d rank %d: params %zu/%zu grads %zu/%zu",
                                          *kind, P, v, M, r, plan.params, pb, plan.grads, gb);
                            ck_assert_msg(plan.slots == m.act_bytes && plan.work == m.work_bytes &&
                                              plan.recv == m.recv_bytes &&
                                              plan.wstate == m.wstate_bytes,
                                          "%s P=%d v=%d M=%d mode %d rank %d: planned slots %zu "
                                          "work %zu recv %zu W %zu, allocated %zu %zu %zu %zu",
                                          *kind, P, v, M, mode, r, plan.slots, plan.work, plan.recv,
                                          plan.wstate, m.act_bytes, m.work_bytes, m.recv_bytes,
                                          m.wstate_bytes);
                            int last = 0;
                            for (int c = 0; c < v; c++) last |= specs[c].last;
                            ck_assert_uint_eq(plan.logits, last ? (size_t)(M % 3 ? M % 3 : B * T) *
                                                                      d.Vp *
                                                                      pp_dtype_bytes(be.logits)
                                                                : 0);
                            model_free(&m);
                            checked++;
                        }
                    sched_free(&s);
                    sched_free(&fwd);
                }
    }
    ck_assert_int_eq(kinds, 6);
    ck_assert_int_gt(checked, 1000);
}
END_TEST

/* Weights do not depend on the split: each tensor has its own random stream. */
START_TEST(test_init_split_independent) {
    ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0}, s1 = {1, 2, 4, 0, 1, 1, 0};
    Model w, b;
    setup_model(&w, &whole, 1, 1, 4, 5);
    setup_model(&b, &s1, 1, 1, 4, 5);
    for (int i = 0; i < b.ntensors; i++) {
        int iw = model_find(&w, b.tensors[i].name);
        ck_assert_mem_eq(b.params + b.tensors[i].offset, w.params + w.tensors[iw].offset,
                         b.tensors[i].numel * 4);
    }
    ck_assert_uint_eq(w.nparams, model_total_params(&tiny));
    model_free(&w);
    model_free(&b);
    tfree_all();
}
END_TEST

/* [Note: Arch table] What the engine relies on of every architecture: model.arch finds
 * it by its name; it fits the engine's fixed arrays; the layer's output is fp32 [N,C]
 * and kept under every recompute mode, the head's d(x) an operand [N,C]; what a mode drops,
 * the workspace of that mode holds (a dropped activation points there), full drops all
 * but the output and selective something. */
START_TEST(test_arch_table) {
    const Arch *archs[] = {&arch_gpt2, &arch_llama, &arch_qwen2, &arch_mistral};
    ck_assert_ptr_null(arch_find("gpt3"));
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const Arch *A = archs[i];
        ModelDims d = tiny; /* and the llama family's members, which GPT-2 does not read */
        d.arch = A;
        d.NKV = 1;
        d.F = 12;
        d.eps = 1e-5f;
        d.rope.theta = 10000.0f;
        size_t N = 10;
        ck_assert_ptr_eq(arch_find(A->name), A);
        ck_assert(A->nacts <= ARCH_MAX_BUFS && A->nhead <= ARCH_MAX_BUFS &&
                  A->nws <= ARCH_MAX_BUFS && A->nscratch <= ARCH_MAX_BUFS &&
                  A->nconst <= ARCH_MAX_BUFS && A->nglobals <= ARCH_MAX_GLOBALS);
        ck_assert(!A->nconst || A->const_fill); /* constants: fp32, filled at init */
        for (int k = 0; k < A->nconst; k++) ck_assert(A->consts[k].type == ARCH_F32);
        ck_assert_int_eq(model_dims_check(&d, NULL, 0), PP_OK);
        const ArchBuf *out = &A->acts[A->act_out], *dx = &A->head[A->head_dout];
        /* the layer's output is the residual stream ([Note: residual stream type]) */
        ck_assert(out->type == ARCH_RESIDUAL && out->keep == (ARCH_SEL | ARCH_FULL));
        ck_assert_uint_eq(A->elems(&d, ARCH_ACTS, A->act_out, N, 0), N * d.C);
        ck_assert(dx->type == ARCH_OPERAND);
        ck_assert_uint_eq(A->elems(&d, ARCH_HEAD, A->head_dout, N, 0), N * d.C);
        int dropped[2] = {0, 0}; /* selective, full */
        for (int k = 0; k < A->nacts; k++)
            for (int mode = ARCH_SEL; mode <= ARCH_FULL; mode <<= 1)
                if (!(A->acts[k].keep & mode)) {
                    ck_assert(A->acts[k].work & mode);
                    dropped[mode == ARCH_FULL]++;
                }
        ck_assert_int_gt(dropped[0], 0);
        ck_assert_int_eq(dropped[1], A->nacts - 1);
    }
}
END_TEST

/* [Note: architecture costs] agree with the model: the parameters of L layers, the
 * embedding and the head are the tensor table's (the tied head's copy of wte counted on
 * the head's side too), a built model holds that many, and the training FLOPs per token
 * of GPT-2 124M at T = 1024 are ../shared/GPU.md's 854,654,976. */
START_TEST(test_arch_costs) {
    for (int tied = 0; tied < 2; tied++) {
        ModelDims d = {.V = 37, .Vp = 40, .maxT = 9, .L = 3, .NH = 2, .C = 8, .tied = tied,
                       .arch = &arch_gpt2};
        ArchCosts a;
        model_arch_costs(&d, 7, &a);
        double table = (double)model_total_params(&d) + (tied ? (double)d.Vp * d.C : 0);
        ck_assert_double_eq(d.L * a.layer_params + a.embed_params + a.head_params, table);
        ck_assert_uint_eq(model_boundary_elems(&d, 5, 7), 5 * 7 * 8);
    }
    ModelDims g = {.V = 50257, .Vp = 50304, .maxT = 1024, .L = 12, .NH = 12, .C = 768, .tied = 1,
                   .arch = &arch_gpt2};
    ck_assert_double_eq(model_train_flops_per_token(&g, 1024), 854654976.0);
    ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0};
    Model w;
    setup_model(&w, &whole, 1, 1, 4, 5);
    ArchCosts t;
    model_arch_costs(&tiny, 4, &t);
    ck_assert_double_eq((double)w.nparams,
                        tiny.L * t.layer_params + t.embed_params + t.head_params -
                            (tiny.tied ? (double)tiny.Vp * tiny.C : 0));
    model_free(&w);
    tfree_all();
}
END_TEST

/* [Note: CUDA workspace]: the sizes a device reserves for come from the tensor table
 * (GPT-2 124M: rows of 4C = 3072, its largest matrix the head's Vp C, attention's 12 heads
 * of 64), and the held copy is what the memory plan says the rank holds: a built model's
 * nparams for a split. */
START_TEST(test_backend_sizes) {
    ModelDims g = {.V = 50257, .Vp = 50304, .maxT = 1024, .L = 12, .NH = 12, .C = 768, .tied = 1,
                   .arch = &arch_gpt2};
    BackendSizes s = model_backend_sizes(&g, 16, 1024, 7);
    ck_assert_int_eq(s.N, 16 * 1024);
    ck_assert_int_eq(s.T, 1024);
    ck_assert_int_eq(s.NH, 12);
    ck_assert_int_eq(s.HS, 64);
    ck_assert_int_eq(s.Vp, 50304);
    ck_assert_uint_eq(s.width, 4 * 768);
    ck_assert_uint_eq(s.weight, (size_t)50304 * 768);
    ck_assert_uint_eq(s.params, 7);
    ModelDims small = {.V = 37, .Vp = 40, .maxT = 9, .L = 3, .NH = 2, .C = 64, .tied = 1,
                       .arch = &arch_gpt2}; /* 4C C > Vp C: a layer's matrix */
    ck_assert_uint_eq(model_backend_sizes(&small, 1, 1, 0).weight, (size_t)4 * 64 * 64);
    ChunkSpec split[2] = {{1, 1, 3, 0, 0, 1, 0}, {3, 3, 4, 0, 1, 1, 0}};
    Model m;
    ModelPlan p;
    setup_model(&m, split, 2, 1, 4, 5);
    model_plan(&p, &tiny, split, NULL, NULL, 2, 4, 5, 0, sizeof(float), sizeof(float),
               sizeof(float), 0, 0, 0, 0);
    ck_assert_uint_eq(p.params / sizeof(float), m.nparams);
    model_free(&m);
    tfree_all();
}
END_TEST

/* init_from round trip: save a whole model in llm.c's format, load it into a split
 * model with another padded vocabulary size: every held tensor equal. */
START_TEST(test_llmc_roundtrip) {
    ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0}, s1 = {1, 2, 4, 0, 1, 1, 0};
    ModelDims d2 = tiny;
    d2.Vp = 32;
    Model w, b;
    char err[256], path[] = "/tmp/pptrain_test_llmc_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    setup_model(&w, &whole, 1, 1, 4, 5);
    ck_assert_int_eq(model_save_llmc(&w, path, err, sizeof err), 0);
    model_init(&b, &d2, &s1, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_llmc(&b, path, err, sizeof err), 0);
    for (int i = 0; i < b.ntensors; i++) {
        int iw = model_find(&w, b.tensors[i].name);
        size_t n = strcmp(b.tensors[i].name, "wte") ? b.tensors[i].numel : (size_t)tiny.V * tiny.C;
        ck_assert_mem_eq(b.params + b.tensors[i].offset, w.params + w.tensors[iw].offset, n * 4);
    }
    /* a wrong shape is refused with the file's name */
    ModelDims d3 = tiny;
    d3.C = 16;
    Model c;
    model_init(&c, &d3, &whole, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_llmc(&c, path, err, sizeof err), 2);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "does not match"));
    /* a truncated file too */
    ck_assert_int_eq(truncate(path, 2000), 0);
    ck_assert_int_eq(model_load_llmc(&b, path, err, sizeof err), 2);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    unlink(path);
    model_free(&w);
    model_free(&b);
    model_free(&c);
    tfree_all();
}
END_TEST

int main(void) {
    backend_cpu_set_threads(2);
    Suite *s = suite_create("model");
    TCase *ops = tcase_create("ops");
    /* 0.2 s alone; OpenMP threads on a loaded 2-core machine can stall */
    tcase_set_timeout(ops, 30);
    tcase_add_test(ops, test_expf_accuracy);
    tcase_add_test(ops, test_expf_special_values);
    tcase_add_test(ops, test_backend_memory_and_step);
    tcase_add_test(ops, test_layernorm_grad);
    tcase_add_test(ops, test_matmul_grad);
    tcase_add_test(ops, test_attention_grad);
    tcase_add_test(ops, test_attention_grad_blocks);
    tcase_add_test(ops, test_gelu_grad);
    tcase_add_test(ops, test_encoder);
    tcase_add_test(ops, test_crossentropy_grad);
    tcase_add_test(ops, test_split_backward_ops);
    suite_add_tcase(s, ops);
    TCase *model = tcase_create("model");
    tcase_set_timeout(model, 60);
    tcase_add_test(model, test_model_gradcheck);
    tcase_add_test(model, test_model_gradcheck_untied);
    tcase_add_test(model, test_model_gradcheck_chunked);
    tcase_add_test(model, test_chunked_head);
    tcase_add_test(model, test_logits_knob);
    tcase_add_test(model, test_loss_at_init);
    tcase_add_test(model, test_middle_stage_gradcheck);
    tcase_add_test(model, test_stage_split_exact);
    tcase_add_test(model, test_init_split_independent);
    tcase_add_test(model, test_arch_table);
    tcase_add_test(model, test_arch_costs);
    tcase_add_test(model, test_backend_sizes);
    tcase_add_test(model, test_llmc_roundtrip);
    /* the CPU, bf16 operand activations */
    tcase_add_loop_test(model, test_split_backward_chunk, 0, 2);
    tcase_add_loop_test(model, test_recompute_chunk, 0, 3);
    tcase_add_test(model, test_operand_bf16);
    tcase_add_test(model, test_decode_operand_bf16);
    /* the CPU, bf16 operand activations */
    tcase_add_loop_test(model, test_memory_plan_sweep, 0, 2);
    suite_add_tcase(s, model);
    return check_run(s, 0);
}
