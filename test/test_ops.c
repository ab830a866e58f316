/* test_ops.c — the backend ops a Llama block adds (issue 26), on the CPU backend, the
 * reference every other backend is held to: RMSNorm, RoPE, SwiGLU, grouped-query
 * attention and the embedding without a position table. Every backward against central
 * finite differences; RMSNorm's split halves against the fused call bit for bit; RoPE,
 * RMSNorm and SwiGLU against values computed here independently in double; RoPE's
 * backward as its forward's inverse and position 0 as the identity; GQA against
 * multi-head attention on k and v repeated per query head (transformers' repeat_kv, the
 * definition) and, at NKV = NH, against the multi-head code it replaced, bit for bit
 * (kept below verbatim). The fused GEMM ops ([Note: fused GELU]): the separate ops' bits,
 * and their backward against finite differences. (The other GPT-2 ops are test_model.c's.) */
#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backend/backend.h"
#include "backend/fastmath.h"
#include "checkrun.h"

#define CPU backend_cpu()

/* Test allocations, freed together at the end of each test. */
static void *allocs[1024];
static int nallocs;
static void *talloc(size_t n) {
    ck_assert_int_lt(nallocs, 1024);
    return allocs[nallocs++] = malloc(n ? n : 1);
}
static void tfree_all(void) {
    while (nallocs) free(allocs[--nallocs]);
}

static uint64_t rng = 2026;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rand_buf(size_t n, float scale) {
    float *x = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}
static float *fill(size_t n, float v) {
    float *x = talloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}
static float *copy_of(const float *x, size_t n) {
    float *y = talloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
static size_t bits_differ(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}
/* |a - b| <= atol + rtol |b| everywhere, the first failure named. */
static void assert_close(const char *what, const float *a, const double *b, size_t n, double atol,
                         double rtol) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(a[i] - b[i]) <= atol + rtol * fabs(b[i]),
                      "%s[%zu]: got %.8g, want %.8g", what, i, a[i], b[i]);
}
/* ||a - b|| / ||b|| over n floats. */
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Central differences of f() = <R, op(x)> with respect to every element of x. */
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

/* ---- RMSNorm ---------------------------------------------------------------------------- */

typedef struct {
    float *out, *rstd, *x, *w, *R, eps;
    int N, C;
} RmsCtx;
static double rms_loss(void *p) {
    RmsCtx *c = p;
    CPU->rmsnorm_forward(CPU, c->out, c->rstd, c->x, c->w, c->eps, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

/* Hugging Face's LlamaRMSNorm, in double: rstd = 1 / sqrt(mean(x^2) + eps), x * rstd * w. */
START_TEST(test_rmsnorm_reference) {
    int N = 7, C = 37; /* C no multiple of a vector */
    float eps[2] = {1e-5f, 1e-6f};
    for (int k = 0; k < 2; k++) {
        float *x = rand_buf((size_t)N * C, 2), *w = rand_buf(C, 1.5f);
        for (int c = 0; c < C; c++) x[c] *= 1e-3f; /* a row where eps matters */
        float *out = talloc((size_t)N * C * 4), *rstd = talloc(N * 4);
        CPU->rmsnorm_forward(CPU, out, rstd, x, w, eps[k], N, C);
        double *want = talloc((size_t)N * C * sizeof(double)), *wr = talloc(N * sizeof(double));
        for (int n = 0; n < N; n++) {
            double ss = 0;
            for (int c = 0; c < C; c++) ss += (double)x[n * C + c] * x[n * C + c];
            wr[n] = 1.0 / sqrt(ss / C + (double)eps[k]);
            for (int c = 0; c < C; c++) want[n * C + c] = x[n * C + c] * wr[n] * w[c];
        }
        assert_close("rstd", rstd, wr, N, 0, 1e-6);
        assert_close("out", out, want, (size_t)N * C, 1e-9, 2e-6);
        if (k == 0) { /* the row of small values: eps moves its rstd far from 1 / rms */
            double ss = 0;
            for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
            ck_assert(fabs(rstd[0] - 1.0 / sqrt(ss / C)) > 0.1 * rstd[0]);
        }
    }
    tfree_all();
}
END_TEST

START_TEST(test_rmsnorm_grad) {
    int N = 5, C = 37;
    RmsCtx c = {talloc((size_t)N * C * 4), talloc(N * 4), rand_buf((size_t)N * C, 2),
                rand_buf(C, 1.5f), rand_buf((size_t)N * C, 1), 1e-5f, N, C};
    rms_loss(&c);
    float *dx = fill((size_t)N * C, 0.25f), *dw = fill(C, 1.0f); /* both accumulate */
    float *scratch = talloc(CPU->scratch_floats(CPU, N, 1, C) * sizeof(float));
    CPU->rmsnorm_backward(CPU, dx, NULL, dw, c.R, c.x, c.rstd, c.w, N, C, scratch);
    double *gx = numgrad(rms_loss, &c, c.x, (size_t)N * C, 1e-2f);
    double *gw = numgrad(rms_loss, &c, c.w, C, 1e-2f);
    for (int i = 0; i < N * C; i++) gx[i] += 0.25;
    for (int i = 0; i < C; i++) gw[i] += 1.0;
    assert_close("dinp", dx, gx, (size_t)N * C, 2e-3, 2e-3);
    assert_close("dw", dw, gw, C, 2e-3, 2e-3);
    tfree_all();
}
END_TEST

/* [Note: split backward]: the I half (dw NULL) and the W half (dinp NULL) give the fused
 * call's bits, and leave what they do not compute as it was. */
START_TEST(test_rmsnorm_split) {
    int N = 13, C = 21;
    float *x = rand_buf((size_t)N * C, 2), *w = rand_buf(C, 1), *d = rand_buf((size_t)N * C, 1);
    float *out = talloc((size_t)N * C * 4), *rstd = talloc(N * 4);
    float *scratch = talloc(CPU->scratch_floats(CPU, N, 1, C) * sizeof(float));
    CPU->rmsnorm_forward(CPU, out, rstd, x, w, 1e-6f, N, C);
    float *dx0 = rand_buf((size_t)N * C, 1), *dw0 = rand_buf(C, 1);
    float *dx_f = copy_of(dx0, (size_t)N * C), *dw_f = copy_of(dw0, C);
    float *dx_s = copy_of(dx0, (size_t)N * C), *dw_s = copy_of(dw0, C);
    CPU->rmsnorm_backward(CPU, dx_f, NULL, dw_f, d, x, rstd, w, N, C, scratch);
    CPU->rmsnorm_backward(CPU, dx_s, NULL, NULL, d, x, rstd, w, N, C, scratch);
    ck_assert_uint_eq(bits_differ(dw_s, dw0, C), 0); /* untouched by the I half */
    float *dx_w = copy_of(dx0, (size_t)N * C);
    CPU->rmsnorm_backward(CPU, NULL, NULL, dw_s, d, x, rstd, w, N, C, scratch);
    ck_assert_uint_eq(bits_differ(dx_f, dx_s, (size_t)N * C), 0);
    ck_assert_uint_eq(bits_differ(dw_f, dw_s, C), 0);
    ck_assert_uint_gt(bits_differ(dw_f, dw0, C), 0); /* it did add something */
    ck_assert_uint_gt(bits_differ(dx_f, dx_w, (size_t)N * C), 0);
    tfree_all();
}
END_TEST

/* ---- RoPE ------------------------------------------------------------------------------- */

/* inv_freq[HS/2] in double, rounded once: transformers' _compute_default_rope_parameters
 * (1 / theta^(2i/HS)) and, with factor > 0, _compute_llama3_parameters (low-frequency
 * components divided by factor, a smooth blend between; modeling_rope_utils.py). */
static void inv_freq_of(float *inv, int HS, double theta, double factor, double low, double high,
                        double old_ctx) {
    for (int i = 0; i < HS / 2; i++) {
        double f = 1.0 / pow(theta, 2.0 * i / HS);
        if (factor > 0) {
            double wavelen = 2 * M_PI / f, low_wl = old_ctx / low, high_wl = old_ctx / high;
            if (wavelen > low_wl) f = f / factor;
            else if (!(wavelen < high_wl)) {
                double smooth = (old_ctx / wavelen - low) / (high - low);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        }
        inv[i] = (float)f;
    }
}

/* The rotation of every q and k head in double from the fp32 angle t * inv_freq[i] (the
 * product rounded to fp32, as transformers' freqs), the v heads as they are. */
static double *rope_reference(const float *qkv, const float *inv, int B, int T, int NH, int NKV,
                              int HS) {
    int W = (NH + 2 * NKV) * HS, half = HS / 2;
    size_t n = (size_t)B * T * W;
    double *y = talloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = qkv[i];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++)
                for (int i = 0; i < half; i++) {
                    size_t o = ((size_t)b * T + t) * W + (size_t)h * HS + i;
                    double a = (float)t * inv[i], x0 = qkv[o], x1 = qkv[o + half];
                    y[o] = x0 * cos(a) - x1 * sin(a);
                    y[o + half] = x1 * cos(a) + x0 * sin(a);
                }
    return y;
}

START_TEST(test_rope_reference) {
    static const struct {
        int B, T, NH, NKV, HS, llama3;
        double theta;
    } cases[] = {
        {2, 9, 4, 2, 16, 0, 10000.0},  /* GQA, theta 10000 */
        {1, 33, 3, 3, 64, 1, 500000.0}, /* Llama 3's theta and scaling */
        {1, 2050, 1, 1, 8, 1, 500000.0}, /* angles past 2000 radians */
        {3, 5, 2, 1, 2, 0, 10000.0},    /* MQA; one pair a head */
    };
    const typeof(cases[0]) *s = &cases[_i];
    int W = (s->NH + 2 * s->NKV) * s->HS;
    size_t n = (size_t)s->B * s->T * W;
    float *inv = talloc((s->HS / 2) * sizeof(float));
    inv_freq_of(inv, s->HS, s->theta, s->llama3 ? 8.0 : 0.0, 1.0, 4.0, 8192.0);
    float *x = rand_buf(n, 1), *y = copy_of(x, n);
    CPU->rope_forward(CPU, y, inv, s->B, s->T, s->NH, s->NKV, s->HS);
    double *want = rope_reference(x, inv, s->B, s->T, s->NH, s->NKV, s->HS);
    assert_close("rope", y, want, n, 2e-7, 2e-7); /* a few ulp of values below 1.5 */
    for (int r = 0; r < s->B * s->T; r++) /* the v heads are not touched */
        ck_assert_uint_eq(bits_differ(y + (size_t)r * W + (s->NH + s->NKV) * s->HS,
                                      x + (size_t)r * W + (s->NH + s->NKV) * s->HS,
                                      (size_t)s->NKV * s->HS),
                          0);
    tfree_all();
}
END_TEST

/* Against numbers known by heart: q = (1, 0) and k = (0, 1) at position t with one pair
 * and inv_freq 1 become (cos t, sin t) and (-sin t, cos t); v = (5, 7) stays. */
START_TEST(test_rope_values) {
    float inv = 1.0f, x[3][6];
    for (int t = 0; t < 3; t++) {
        float row[6] = {1, 0, 0, 1, 5, 7};
        memcpy(x[t], row, sizeof row);
    }
    CPU->rope_forward(CPU, &x[0][0], &inv, 1, 3, 1, 1, 2);
    static const double cs[3] = {1.0, 0.5403023058681398, -0.4161468365471424};
    static const double sn[3] = {0.0, 0.8414709848078965, 0.9092974268256817};
    for (int t = 0; t < 3; t++) {
        double want[6] = {cs[t], sn[t], -sn[t], cs[t], 5, 7};
        assert_close("rope (1,0),(0,1)", x[t], want, 6, 1e-7, 1e-7);
    }
}
END_TEST

/* Position 0 is the identity, bit for bit; the backward undoes the forward within
 * rounding. */
START_TEST(test_rope_inverse_and_position0) {
    int B = 2, T = 40, NH = 6, NKV = 2, HS = 32, W = (NH + 2 * NKV) * HS;
    size_t n = (size_t)B * T * W;
    float *inv = talloc(HS / 2 * sizeof(float));
    inv_freq_of(inv, HS, 10000.0, 0, 0, 0, 0);
    float *x = rand_buf(n, 1), *y = copy_of(x, n);
    CPU->rope_forward(CPU, y, inv, B, T, NH, NKV, HS);
    for (int b = 0; b < B; b++)
        ck_assert_uint_eq(bits_differ(y + (size_t)b * T * W, x + (size_t)b * T * W, W), 0);
    ck_assert_uint_gt(bits_differ(y + W, x + W, W), 0); /* position 1 moves */
    CPU->rope_backward(CPU, y, inv, B, T, NH, NKV, HS);
    double e = rel_err(y, x, n);
    ck_assert_msg(e < 1e-6, "forward then backward: relative error %.3g", e);
    tfree_all();
}
END_TEST

typedef struct {
    float *qkv, *out, *R, *inv;
    int B, T, NH, NKV, HS;
} RopeCtx;
static double rope_loss(void *p) {
    RopeCtx *c = p;
    size_t n = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HS;
    memcpy(c->out, c->qkv, n * sizeof(float));
    CPU->rope_forward(CPU, c->out, c->inv, c->B, c->T, c->NH, c->NKV, c->HS);
    return dot(c->out, c->R, n);
}

START_TEST(test_rope_grad) {
    int B = 2, T = 6, NH = 3, NKV = 1, HS = 8;
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    RopeCtx c = {rand_buf(n, 1), talloc(n * 4), rand_buf(n, 1), talloc(HS / 2 * 4),
                 B, T, NH, NKV, HS};
    inv_freq_of(c.inv, HS, 100.0, 0, 0, 0, 0); /* large angles at these positions */
    float *d = copy_of(c.R, n);
    CPU->rope_backward(CPU, d, c.inv, B, T, NH, NKV, HS);
    double *g = numgrad(rope_loss, &c, c.qkv, n, 1e-2f);
    assert_close("dqkv", d, g, n, 1e-4, 1e-4);
    tfree_all();
}
END_TEST

/* ---- SwiGLU ----------------------------------------------------------------------------- */

typedef struct {
    float *out, *gate, *up, *R;
    int n;
} SwiCtx;
static double swiglu_loss(void *p) {
    SwiCtx *c = p;
    CPU->swiglu_forward(CPU, c->out, c->gate, c->up, c->n);
    return dot(c->out, c->R, c->n);
}

START_TEST(test_swiglu) {
    int n = 67;
    SwiCtx c = {talloc(n * 4), rand_buf(n, 6), rand_buf(n, 2), rand_buf(n, 1), n};
    c.gate[0] = 95.0f; /* exp(-g) underflows: silu(g) = g */
    c.gate[1] = -95.0f; /* exp(-g) overflows: silu(g) = -0 */
    c.gate[2] = 0.0f;
    swiglu_loss(&c);
    for (int i = 0; i < n; i++) { /* silu(g) * up in double */
        double g = c.gate[i], want = g / (1.0 + exp(-g)) * c.up[i];
        ck_assert_msg(fabs(c.out[i] - want) <= 1e-6 * fabs(want) + 1e-30,
                      "swiglu[%d] (g %g, up %g) = %.8g, want %.8g", i, g, c.up[i], c.out[i],
                      want);
    }
    ck_assert(c.out[0] == c.gate[0] * c.up[0] && c.out[1] == 0.0f && c.out[2] == 0.0f);
    float *dg = fill(n, 99.0f), *du = fill(n, 99.0f); /* overwritten */
    CPU->swiglu_backward(CPU, dg, du, c.gate, c.up, c.R, n);
    /* the saturated ends: silu' = 1 and 0, no NaN from inf * 0 */
    ck_assert(dg[0] == c.R[0] * c.up[0] && du[0] == c.R[0] * c.gate[0]);
    ck_assert(dg[1] == 0.0f && du[1] == 0.0f && dg[2] == 0.5f * c.R[2] * c.up[2] && du[2] == 0.0f);
    for (int i = 0; i < 3; i++) c.gate[i] = 0.5f * (float)i - 0.3f; /* back in the bulk */
    CPU->swiglu_backward(CPU, dg, du, c.gate, c.up, c.R, n);
    swiglu_loss(&c);
    double *gg = numgrad(swiglu_loss, &c, c.gate, n, 1e-2f);
    double *gu = numgrad(swiglu_loss, &c, c.up, n, 1e-2f);
    assert_close("dgate", dg, gg, n, 1e-3, 1e-3);
    assert_close("dup", du, gu, n, 1e-4, 1e-4);
    tfree_all();
}
END_TEST

/* ---- grouped-query attention ------------------------------------------------------------ */

typedef struct {
    float *out, *att, *qkv, *R;
    int B, T, NH, NKV, HS;
} AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    CPU->attention_forward(CPU, c->out, c->att, c->qkv, c->B, c->T, c->NH, c->NKV, c->HS);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->HS);
}

/* dqkv against finite differences at groups of 1, 2, 3 and multi-query. */
START_TEST(test_gqa_grad) {
    static const struct {
        int B, T, NH, NKV, HS;
    } cases[] = {
        {2, 5, 2, 2, 4}, {2, 5, 4, 2, 4}, {1, 6, 6, 2, 3}, {2, 4, 3, 1, 4}, {1, 70, 2, 1, 2},
    };
    const typeof(cases[0]) *s = &cases[_i];
    int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HS = s->HS;
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    AttCtx c = {talloc(no * 4), talloc(CPU->attention_saved_floats(CPU, B, T, NH) * 4),
                rand_buf(nq, 1), rand_buf(no, 1), B, T, NH, NKV, HS};
    att_loss(&c);
    float *dqkv = fill(nq, 99.0f); /* overwritten */
    float *scratch = talloc(CPU->scratch_floats(CPU, B * T, T, NH * HS) * 4);
    CPU->attention_backward(CPU, dqkv, c.R, c.qkv, c.out, c.att, B, T, NH, NKV, HS, scratch);
    double *g = numgrad(att_loss, &c, c.qkv, nq, 1e-2f);
    assert_close("dqkv", dqkv, g, nq, 2e-3, 2e-3);
    tfree_all();
}
END_TEST

/* transformers' repeat_kv: GQA equals multi-head attention on k and v repeated per query
 * head, and d(k), d(v) of a kv head are the sums of the repeated heads' gradients. */
START_TEST(test_gqa_is_repeat_kv) {
    static const struct {
        int B, T, NH, NKV, HS;
    } cases[] = {{2, 7, 4, 2, 8}, {1, 70, 6, 2, 16}, {3, 130, 3, 1, 8}};
    const typeof(cases[0]) *s = &cases[_i];
    int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HS = s->HS, G = NH / NKV;
    int W = (NH + 2 * NKV) * HS, WR = 3 * NH * HS, C = NH * HS;
    size_t N = (size_t)B * T, natt = CPU->attention_saved_floats(CPU, B, T, NH);
    float *qkv = rand_buf(N * W, 1.5f), *rep = talloc(N * WR * 4), *dout = rand_buf(N * C, 1);
    for (size_t r = 0; r < N; r++) {
        float *dst = rep + r * WR;
        const float *src = qkv + r * W;
        memcpy(dst, src, (size_t)C * 4);
        for (int h = 0; h < NH; h++) { /* head h's k and v: kv head h / G's */
            memcpy(dst + C + h * HS, src + (NH + h / G) * HS, HS * 4);
            memcpy(dst + 2 * C + h * HS, src + (NH + NKV + h / G) * HS, HS * 4);
        }
    }
    float *o1 = talloc(N * C * 4), *o2 = talloc(N * C * 4);
    float *a1 = talloc(natt * 4), *a2 = talloc(natt * 4);
    float *d1 = talloc(N * W * 4), *d2 = talloc(N * WR * 4);
    float *scratch = talloc(CPU->scratch_floats(CPU, (int)N, T, C) * 4);
    CPU->attention_forward(CPU, o1, a1, qkv, B, T, NH, NKV, HS);
    CPU->attention_forward(CPU, o2, a2, rep, B, T, NH, NH, HS);
    CPU->attention_backward(CPU, d1, dout, qkv, o1, a1, B, T, NH, NKV, HS, scratch);
    CPU->attention_backward(CPU, d2, dout, rep, o2, a2, B, T, NH, NH, HS, scratch);
    double eo = rel_err(o1, o2, N * C);
    size_t nbits = bits_differ(o1, o2, N * C);
    /* dq as it is; dk, dv of kv head j the sum over its group (in double, for the reference) */
    float *dq1 = talloc(N * C * 4), *dq2 = talloc(N * C * 4);
    float *dkv1 = talloc(N * 2 * NKV * HS * 4), *dkv2 = talloc(N * 2 * NKV * HS * 4);
    for (size_t r = 0; r < N; r++) {
        memcpy(dq1 + r * C, d1 + r * W, (size_t)C * 4);
        memcpy(dq2 + r * C, d2 + r * WR, (size_t)C * 4);
        memcpy(dkv1 + r * 2 * NKV * HS, d1 + r * W + C, (size_t)2 * NKV * HS * 4);
        for (int p = 0; p < 2; p++)
            for (int j = 0; j < NKV; j++)
                for (int i = 0; i < HS; i++) {
                    double sum = 0;
                    for (int g = 0; g < G; g++)
                        sum += d2[r * WR + (1 + p) * C + (j * G + g) * HS + i];
                    dkv2[r * 2 * NKV * HS + (p * NKV + j) * HS + i] = (float)sum;
                }
    }
    double eq = rel_err(dq1, dq2, N * C), ekv = rel_err(dkv1, dkv2, N * 2 * NKV * HS);
    printf("GQA B=%d T=%d NH=%d NKV=%d HS=%d against repeat_kv: out %.2e (%zu of %zu bits "
           "differ), dq %.2e, dk dv %.2e\n",
           B, T, NH, NKV, HS, eo, nbits, N * C, eq, ekv);
    ck_assert_msg(eo < 1e-6 && eq < 1e-6 && ekv < 1e-5, "GQA differs from repeat_kv");
    tfree_all();
}
END_TEST

/* The multi-head attention before grouped-query attention (backend_cpu.c at 2681116),
 * verbatim but for its name and its (C, NH) sizes: NKV = NH must give its bits. */
#define ATT_BLOCK 64
static void old_softmax_row(float *row, int t, int end) {
    float mx = -INFINITY, s = 0.0f;
    for (int j = 0; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j <= t; j++) {
        row[j] = pp_expf(row[j] - mx);
        s += row[j];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < end; j++) row[j] = 0.0f;
}

static void old_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH) {
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
        float *P = att + (size_t)bh * T * T, *y = out + (size_t)b * T * C + h * hs;
        for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            int m = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, i1 = i0 + m;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, scale,
                        q + (size_t)i0 * ld, ld, k, ld, 0.0f, P + (size_t)i0 * T, T);
            for (int t = i0; t < i1; t++) old_softmax_row(P + (size_t)t * T, t, i1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f,
                        P + (size_t)i0 * T, T, v, ld, 0.0f, y + (size_t)i0 * C, C);
        }
    }
}

static void old_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *att, int B, int T, int C, int NH, float *scratch) {
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *dS = scratch + (size_t)omp_get_thread_num() * ATT_BLOCK * T;
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t base = (size_t)b * T * ld + h * hs;
            const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
            const float *P = att + (size_t)bh * T * T, *dy = dout + (size_t)b * T * C + h * hs;
            for (int t = 0; t < T; t++) {
                memset(dk + (size_t)t * ld, 0, hs * sizeof(float));
                memset(dv + (size_t)t * ld, 0, hs * sizeof(float));
            }
            for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
                int m = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, i1 = i0 + m;
                const float *Pb = P + (size_t)i0 * T;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, 1.0f,
                            dy + (size_t)i0 * C, C, v, ld, 0.0f, dS, T);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, m, 1.0f, Pb, T,
                            dy + (size_t)i0 * C, C, 1.0f, dv, ld);
                for (int r = 0; r < m; r++) {
                    const float *p = Pb + (size_t)r * T;
                    float *d = dS + (size_t)r * T, dot = 0.0f;
                    int t = i0 + r;
#pragma omp simd reduction(+ : dot)
                    for (int j = 0; j <= t; j++) dot += p[j] * d[j];
#pragma omp simd
                    for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - dot) * scale;
                    for (int j = t + 1; j < i1; j++) d[j] = 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f, dS, T,
                            k, ld, 0.0f, dq + (size_t)i0 * ld, ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, m, 1.0f, dS, T,
                            q + (size_t)i0 * ld, ld, 1.0f, dk, ld);
            }
        }
    }
}

START_TEST(test_gqa_mha_bits) {
    static const struct {
        int B, T, C, NH;
    } cases[] = {{2, 5, 8, 2}, {1, 70, 12, 3}, {3, 130, 64, 4}, {2, 200, 48, 12}};
    const typeof(cases[0]) *s = &cases[_i];
    int B = s->B, T = s->T, C = s->C, NH = s->NH, HS = C / NH;
    size_t N = (size_t)B * T, natt = (size_t)B * NH * T * T;
    float *qkv = rand_buf(N * 3 * C, 1.5f), *dout = rand_buf(N * C, 1);
    float *o1 = talloc(N * C * 4), *o2 = talloc(N * C * 4);
    float *a1 = fill(natt, 0.0f), *a2 = fill(natt, 0.0f);
    float *d1 = talloc(N * 3 * C * 4), *d2 = talloc(N * 3 * C * 4);
    float *scratch = talloc(CPU->scratch_floats(CPU, (int)N, T, C) * 4);
    CPU->attention_forward(CPU, o1, a1, qkv, B, T, NH, NH, HS);
    old_attention_forward(o2, a2, qkv, B, T, C, NH);
    CPU->attention_backward(CPU, d1, dout, qkv, o1, a1, B, T, NH, NH, HS, scratch);
    old_attention_backward(d2, dout, qkv, a2, B, T, C, NH, scratch);
    ck_assert_uint_eq(bits_differ(o1, o2, N * C), 0);
    ck_assert_uint_eq(bits_differ(a1, a2, natt), 0);
    ck_assert_uint_eq(bits_differ(d1, d2, N * 3 * C), 0);
    tfree_all();
}
END_TEST

/* ---- the embedding without positions ---------------------------------------------------- */

START_TEST(test_encoder_no_positions) {
    int B = 2, T = 3, C = 5, V = 6;
    int inp[6] = {1, 4, 1, 0, 1, 3};
    float *wte = rand_buf(V * C, 1), *out = fill(B * T * C, 99.0f);
    CPU->encoder_forward(CPU, out, inp, wte, NULL, B, T, C);
    for (int n = 0; n < B * T; n++)
        ck_assert_uint_eq(bits_differ(out + n * C, wte + inp[n] * C, C), 0);
    float *dout = rand_buf(B * T * C, 1), *dw1 = rand_buf(V * C, 1), *dw2 = copy_of(dw1, V * C);
    float *dwpe = fill(T * C, 0.0f);
    CPU->encoder_backward(CPU, dw1, NULL, dout, inp, B, T, C);
    CPU->encoder_backward(CPU, dw2, dwpe, dout, inp, B, T, C); /* dwte: the same either way */
    ck_assert_uint_eq(bits_differ(dw1, dw2, V * C), 0);
    float *seed = copy_of(dw1, V * C);
    memcpy(dw1, seed, V * C * 4);
    CPU->encoder_backward(CPU, dw1, NULL, dout, inp, B, T, C);
    for (int c = 0; c < C; c++) { /* token 1 at rows 0, 2, 4, added in row order; 2 unseen */
        ck_assert(dw1[1 * C + c] == ((seed[1 * C + c] + dout[0 * C + c]) + dout[2 * C + c]) +
                                        dout[4 * C + c]);
        ck_assert(dw1[2 * C + c] == seed[2 * C + c]);
    }
    tfree_all();
}
END_TEST

/* ---- fused GEMM ops ([Note: fused GELU] in backend.h) ------------------------------------ */

/* matmul_gelu_forward and matmul_gelu_backward are the separate ops' bits on the CPU:
 * pre = matmul_forward, out = gelu_forward(pre); dpre = gelu_backward(pre, matmul_backward's
 * dinp), dw and db matmul_backward's (added: seeded), dpre overwritten (seeded with 99);
 * the halves ([Note: split backward]) give the fused call's bits and leave the rest. */
START_TEST(test_matmul_gelu_bits) {
    int N = 7 + _i, C = 13, H = 4 * C + _i; /* H odd at _i 1 */
    size_t NC = (size_t)N * C, NH = (size_t)N * H, HC = (size_t)H * C;
    float *x = rand_buf(NC, 1), *w = rand_buf(HC, 0.3f), *b = rand_buf(H, 1);
    float *pre = talloc(NH * 4), *out = talloc(NH * 4), *pre1 = talloc(NH * 4);
    float *out1 = talloc(NH * 4);
    CPU->matmul_gelu_forward(CPU, out, pre, x, w, b, N, C, H);
    CPU->matmul_forward(CPU, pre1, x, w, b, N, C, H);
    CPU->gelu_forward(CPU, out1, pre1, NH);
    ck_assert_uint_eq(bits_differ(pre, pre1, NH), 0);
    ck_assert_uint_eq(bits_differ(out, out1, NH), 0);
    /* the backward of the matmul H -> C that reads out */
    float *w2 = rand_buf(HC, 0.3f), *dout = rand_buf(NC, 1);
    float *dpre = fill(NH, 99), *dw = fill(HC, 1), *db = fill(C, 1);
    float *t = talloc(NH * 4), *dpre1 = talloc(NH * 4), *dw1 = fill(HC, 1), *db1 = fill(C, 1);
    CPU->matmul_gelu_backward(CPU, dpre, dw, db, dout, out, w2, pre, N, H, C);
    CPU->matmul_backward(CPU, t, dw1, db1, dout, out, w2, N, H, C);
    CPU->gelu_backward(CPU, dpre1, pre, t, NH);
    ck_assert_uint_eq(bits_differ(dpre, dpre1, NH), 0);
    ck_assert_uint_eq(bits_differ(dw, dw1, HC), 0);
    ck_assert_uint_eq(bits_differ(db, db1, C), 0);
    float *ipre = fill(NH, 99), *wdw = fill(HC, 1), *wdb = fill(C, 1);
    CPU->matmul_gelu_backward(CPU, ipre, NULL, NULL, dout, out, w2, pre, N, H, C);
    CPU->matmul_gelu_backward(CPU, NULL, wdw, wdb, dout, out, w2, pre, N, H, C);
    ck_assert_uint_eq(bits_differ(ipre, dpre, NH), 0);
    ck_assert_uint_eq(bits_differ(wdw, dw, HC), 0);
    ck_assert_uint_eq(bits_differ(wdb, db, C), 0);
    tfree_all();
}
END_TEST

/* matmul_residual_forward is matmul_forward then add_inplace, bit for bit; res unchanged. */
START_TEST(test_matmul_residual_bits) {
    int N = 9, C = 13, OC = 7 + 2 * _i;
    size_t NC = (size_t)N * C, NO = (size_t)N * OC;
    float *x = rand_buf(NC, 1), *w = rand_buf((size_t)OC * C, 0.3f), *b = rand_buf(OC, 1);
    float *res = rand_buf(NO, 2), *res0 = copy_of(res, NO), *out = fill(NO, 99);
    float *out1 = talloc(NO * 4);
    const float *bias = _i ? b : NULL;
    CPU->matmul_residual_forward(CPU, out, res, x, w, bias, N, C, OC);
    CPU->matmul_forward(CPU, out1, x, w, bias, N, C, OC);
    CPU->add_inplace(CPU, out1, res, NO);
    ck_assert_uint_eq(bits_differ(out, out1, NO), 0);
    ck_assert_uint_eq(bits_differ(res, res0, NO), 0);
    tfree_all();
}
END_TEST

/* L = <R, gelu(pre) @ w^T + b>: dpre, dw, db against central differences (dw and db
 * seeded with 1: they add; dpre with 99: it is overwritten). */
typedef struct {
    float *pre, *g, *w, *b, *y, *R;
    int N, H, C;
} GeluMmCtx;
static double gelu_mm_loss(void *p) {
    GeluMmCtx *c = p;
    CPU->gelu_forward(CPU, c->g, c->pre, (size_t)c->N * c->H);
    CPU->matmul_forward(CPU, c->y, c->g, c->w, c->b, c->N, c->H, c->C);
    return dot(c->y, c->R, (size_t)c->N * c->C);
}
START_TEST(test_matmul_gelu_grad) {
    int N = 5, H = 11, C = 6;
    size_t NH = (size_t)N * H, HC = (size_t)H * C;
    GeluMmCtx c = {rand_buf(NH, 3), talloc(NH * 4), rand_buf(HC, 0.5f), rand_buf(C, 1),
                   talloc((size_t)N * C * 4), rand_buf((size_t)N * C, 1), N, H, C};
    gelu_mm_loss(&c);
    float *dpre = fill(NH, 99), *dw = fill(HC, 1), *db = fill(C, 1);
    CPU->matmul_gelu_backward(CPU, dpre, dw, db, c.R, c.g, c.w, c.pre, N, H, C);
    double *gp = numgrad(gelu_mm_loss, &c, c.pre, NH, 1e-2f);
    double *gw = numgrad(gelu_mm_loss, &c, c.w, HC, 1e-2f);
    double *gb = numgrad(gelu_mm_loss, &c, c.b, C, 1e-2f);
    for (size_t i = 0; i < HC; i++) gw[i] += 1.0;
    for (int i = 0; i < C; i++) gb[i] += 1.0;
    assert_close("dpre", dpre, gp, NH, 3e-3, 3e-3);
    assert_close("dw", dw, gw, HC, 3e-3, 3e-3);
    assert_close("db", db, gb, C, 3e-3, 3e-3);
    tfree_all();
}
END_TEST

int main(void) {
    backend_cpu_set_threads(2);
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("llama");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rmsnorm_reference);
    tcase_add_test(tc, test_rmsnorm_grad);
    tcase_add_test(tc, test_rmsnorm_split);
    tcase_add_test(tc, test_rope_values);
    tcase_add_loop_test(tc, test_rope_reference, 0, 4);
    tcase_add_test(tc, test_rope_inverse_and_position0);
    tcase_add_test(tc, test_rope_grad);
    tcase_add_test(tc, test_swiglu);
    tcase_add_loop_test(tc, test_gqa_grad, 0, 5);
    tcase_add_loop_test(tc, test_gqa_is_repeat_kv, 0, 3);
    tcase_add_loop_test(tc, test_gqa_mha_bits, 0, 4);
    tcase_add_test(tc, test_encoder_no_positions);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("fused");
    tcase_set_timeout(tf, 60);
    tcase_add_loop_test(tf, test_matmul_gelu_bits, 0, 2);
    tcase_add_test(tf, test_matmul_gelu_grad);
    tcase_add_loop_test(tf, test_matmul_residual_bits, 0, 2);
    suite_add_tcase(s, tf);
    return check_run(s, 0);
}
