/* test_optim.c — optim: AdamW / SGD against hand-computed steps, the LR schedule at
 * its boundaries, clipping, and the deterministic sum of squares. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/optim.h"
#include "checkrun.h"

/* A config with only the fields optim reads set (no config.c at link time). */
static Config make_config(const char *optimizer, const char *decay, float lr, int steps,
                          int warmup, float min_lr_ratio) {
    Config c;
    memset(&c, 0, sizeof c);
    snprintf(c.optimizer, sizeof c.optimizer, "%s", optimizer);
    snprintf(c.decay, sizeof c.decay, "%s", decay);
    c.lr = lr;
    c.steps = steps;
    c.warmup_steps = warmup;
    c.min_lr_ratio = min_lr_ratio;
    c.beta1 = 0.9f;
    c.beta2 = 0.99f;
    c.eps = 1e-8f;
    c.weight_decay = 0.1f;
    c.momentum = 0.9f;
    return c;
}

/* Deterministic pseudo-random floats in [-1, 1). */
static void fill_random(float *x, size_t n, unsigned seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) / 8388608.0 - 1.0);
    }
}

/* ---- AdamW ------------------------------------------------------------------- */

/* lr 0.1, beta1 0.9, beta2 0.99, eps 1e-8; p starts at 1, gradients 0.5 then -1.
 * Step 1 (t = 1), g = 0.5:
 *   m = 0.1 * 0.5 = 0.05            v = 0.01 * 0.25 = 0.0025
 *   mhat = 0.05 / (1 - 0.9) = 0.5   vhat = 0.0025 / (1 - 0.99) = 0.25, sqrt = 0.5
 *   p = 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.900000002
 * Step 2 (t = 2), g = -1:
 *   m = 0.9 * 0.05 + 0.1 * (-1) = -0.055
 *   v = 0.99 * 0.0025 + 0.01 * 1 = 0.012475
 *   mhat = -0.055 / (1 - 0.81) = -0.28947368
 *   vhat = 0.012475 / (1 - 0.9801) = 0.62688442, sqrt = 0.79176033
 *   p = 0.900000002 - 0.1 * (-0.28947368 / 0.79176033) = 0.93656077
 * With weight_decay 0.1 the same moments give
 *   step 1: p = 1 - 0.1 * (1 + 0.1 * 1) = 0.89
 *   step 2: p = 0.89 - 0.1 * (-0.36560771 + 0.1 * 0.89) = 0.91766077 */
START_TEST(test_adamw_hand_computed) {
    float p[2] = {1.0f, 1.0f}, m[2] = {0}, v[2] = {0};
    float g1[2] = {0.5f, 0.5f}, g2[2] = {-1.0f, -1.0f};
    /* element 0 without weight decay, element 1 with it: separate calls, as the model
     * does for biases and weights */
    optim_adamw_update(p, g1, m, v, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1.0f, 1);
    optim_adamw_update(p + 1, g1 + 1, m + 1, v + 1, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0f, 1);
    ck_assert_float_eq_tol(m[0], 0.05f, 1e-7f);
    ck_assert_float_eq_tol(v[0], 0.0025f, 1e-8f);
    ck_assert(m[1] == m[0] && v[1] == v[0]); /* decay never touches the moments */
    ck_assert_float_eq_tol(p[0], 0.900000002f, 1e-6f);
    ck_assert_float_eq_tol(p[1], 0.89f, 1e-6f);
    optim_adamw_update(p, g2, m, v, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1.0f, 2);
    optim_adamw_update(p + 1, g2 + 1, m + 1, v + 1, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0f, 2);
    ck_assert_float_eq_tol(m[0], -0.055f, 1e-7f);
    ck_assert_float_eq_tol(v[0], 0.012475f, 1e-7f); /* 1 - 0.99f is 0.0099999905 */
    ck_assert_float_eq_tol(p[0], 0.93656077f, 1e-6f);
    ck_assert_float_eq_tol(p[1], 0.91766077f, 1e-6f);
}
END_TEST

/* Bias correction makes the first step lr * sign(g) whatever |g| is (eps aside):
 * mhat = g, vhat = g^2. (Without it the step would be lr * 0.1 / sqrt(0.05) = 0.447 lr.) */
START_TEST(test_adamw_bias_correction_first_step) {
    float g[3] = {1e-3f, -100.0f, 7.0f}, p[3] = {0}, m[3] = {0}, v[3] = {0};
    optim_adamw_update(p, g, m, v, 3, 0.01f, 0.9f, 0.95f, 1e-12f, 0.0f, 1.0f, 1);
    ck_assert_float_eq_tol(p[0], -0.01f, 1e-8f);
    ck_assert_float_eq_tol(p[1], 0.01f, 1e-8f);
    ck_assert_float_eq_tol(p[2], -0.01f, 1e-8f);
}
END_TEST

/* grad_scale multiplies the gradient before both moments: g = 2 with scale 0.25 is
 * g = 0.5 with scale 1 (both exact in binary), so the states agree bitwise. */
START_TEST(test_adamw_grad_scale) {
    float pa = 1, ma = 0, va = 0;
    float pb = 1, mb = 0, vb = 0;
    float ga = 2.0f, gb = 0.5f;
    for (int t = 1; t <= 3; t++) {
        optim_adamw_update(&pa, &ga, &ma, &va, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.25f, t);
        optim_adamw_update(&pb, &gb, &mb, &vb, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0f, t);
    }
    ck_assert(pa == pb && ma == mb && va == vb);
    ck_assert_float_eq_tol(ma, 0.5f * (1 - 0.9f * 0.9f * 0.9f), 1e-6f);
}
END_TEST

/* A big array (parallel path) matches a double-precision reference of the same
 * formula, and is bitwise the same for 1 and 2 threads. */
START_TEST(test_adamw_large_matches_reference) {
    size_t n = 100003;
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *g = malloc(n * 4);
    float *m1 = calloc(n, 4), *v1 = calloc(n, 4), *m2 = calloc(n, 4), *v2 = calloc(n, 4);
    double *pr = malloc(n * 8), *mr = calloc(n, 8), *vr = calloc(n, 8);
    fill_random(p1, n, 1);
    memcpy(p2, p1, n * 4);
    for (size_t i = 0; i < n; i++) pr[i] = p1[i];
    for (int t = 1; t <= 3; t++) {
        fill_random(g, n, 10 + t);
        omp_set_num_threads(1);
        optim_adamw_update(p1, g, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        omp_set_num_threads(2);
        optim_adamw_update(p2, g, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        for (size_t i = 0; i < n; i++) {
            double gi = 0.5 * g[i];
            mr[i] = 0.9 * mr[i] + 0.1 * gi;
            vr[i] = 0.95 * vr[i] + 0.05 * gi * gi;
            double mh = mr[i] / (1 - pow(0.9, t)), vh = vr[i] / (1 - pow(0.95, t));
            pr[i] -= 1e-3 * (mh / (sqrt(vh) + 1e-8) + 0.1 * pr[i]);
        }
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += fabs(p1[i] - pr[i]) > 1e-6 || p1[i] != p2[i];
    ck_assert_uint_eq(wrong, 0);
    free(p1);
    free(p2);
    free(g);
    free(m1);
    free(v1);
    free(m2);
    free(v2);
    free(pr);
    free(mr);
    free(vr);
}
END_TEST

/* ---- SGD --------------------------------------------------------------------- */

/* lr 0.1, momentum 0.9, weight_decay 0.01; p starts at 1, gradients 0.5 then -1.
 * Step 1: d = 0.5 + 0.01 * 1 = 0.51; buf = d = 0.51 (stale buf ignored);
 *         p = 1 - 0.1 * 0.51 = 0.949
 * Step 2: d = -1 + 0.01 * 0.949 = -0.99051; buf = 0.9 * 0.51 - 0.99051 = -0.53151;
 *         p = 0.949 + 0.053151 = 1.002151 */
START_TEST(test_sgd_hand_computed) {
    float p = 1.0f, buf = 123.0f, g1 = 0.5f, g2 = -1.0f;
    optim_sgd_update(&p, &g1, &buf, 1, 0.1f, 0.9f, 0.01f, 1.0f, 1);
    ck_assert_float_eq_tol(buf, 0.51f, 1e-7f);
    ck_assert_float_eq_tol(p, 0.949f, 1e-7f);
    optim_sgd_update(&p, &g2, &buf, 1, 0.1f, 0.9f, 0.01f, 1.0f, 2);
    ck_assert_float_eq_tol(buf, -0.53151f, 1e-6f);
    ck_assert_float_eq_tol(p, 1.002151f, 1e-6f);
}
END_TEST

/* No momentum: no buffer needed; p -= lr * (scale * g + wd * p).
 * p = 2, g = 4, scale 0.5, lr 0.1, wd 0:   p = 2 - 0.1 * 2 = 1.8
 * p = 2, g = 4, scale 0.5, lr 0.1, wd 0.5: p = 2 - 0.1 * (2 + 1) = 1.7 */
START_TEST(test_sgd_plain_and_grad_scale) {
    float p[2] = {2.0f, 2.0f}, g[2] = {4.0f, 4.0f};
    optim_sgd_update(p, g, NULL, 1, 0.1f, 0.0f, 0.0f, 0.5f, 5);
    optim_sgd_update(p + 1, g + 1, NULL, 1, 0.1f, 0.0f, 0.5f, 0.5f, 5);
    ck_assert_float_eq_tol(p[0], 1.8f, 1e-6f);
    ck_assert_float_eq_tol(p[1], 1.7f, 1e-6f);
}
END_TEST

/* ---- dispatch ---------------------------------------------------------------- */

START_TEST(test_update_dispatch) {
    Config c = make_config("adamw", "cosine", 1e-3f, 10, 0, 0.1f);
    ck_assert_int_eq(optim_state_arrays(&c), 2);
    float p[2] = {1, 1}, g[2] = {0.5f, 0.5f}, m[2] = {0}, v[2] = {0};
    float q[2] = {1, 1}, mq[2] = {0}, vq[2] = {0};
    /* two tensors of one in one call ([Note: many tensors]): no decay, then decay 0.1 */
    ck_assert_float_eq(optim_weight_decay(&c, 0), 0.0f);
    ck_assert_float_eq(optim_weight_decay(&c, 1), 0.1f);
    PPOptTensor t[2] = {{p, g, m, v, 1, optim_weight_decay(&c, 0)},
                        {p + 1, g + 1, m + 1, v + 1, 1, optim_weight_decay(&c, 1)}};
    optim_update_many(&c, backend_cpu(), t, 2, 0.1f, 1.0f, 1);
    optim_adamw_update(q, g, mq, vq, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1.0f, 1);
    optim_adamw_update(q + 1, g + 1, mq + 1, vq + 1, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 1.0f, 1);
    ck_assert(p[0] == q[0] && p[1] == q[1] && p[0] != p[1]);

    Config s = make_config("sgd", "cosine", 1e-3f, 10, 0, 0.1f);
    ck_assert_int_eq(optim_state_arrays(&s), 1);
    float ps = 1, gs = 0.5f, buf = 0;
    PPOptTensor ts = {&ps, &gs, &buf, NULL, 1, optim_weight_decay(&s, 1)};
    optim_update_many(&s, backend_cpu(), &ts, 1, 0.1f, 1.0f, 1);
    /* d = 0.5 + 0.1 * 1 = 0.6; p = 1 - 0.1 * 0.6 = 0.94 */
    ck_assert_float_eq_tol(buf, 0.6f, 1e-7f);
    ck_assert_float_eq_tol(ps, 0.94f, 1e-7f);
    s.momentum = 0;
    ck_assert_int_eq(optim_state_arrays(&s), 0);
}
END_TEST

START_TEST(test_unknown_optimizer_dies) {
    Config c = make_config("lion", "cosine", 1e-3f, 10, 0, 0.1f);
    ck_assert_ptr_nonnull(freopen("/dev/null", "w", stderr)); /* expected message */
    optim_state_arrays(&c);
}
END_TEST

/* ---- LR schedule --------------------------------------------------------------- */

/* lr 0.5, steps 12, warm-up 2, min_lr_ratio 0.1 (lr_min 0.05); decay span
 * max(1, 12 - 2 - 1) = 9 steps, so step s >= 2 has p = (s - 2) / 9.
 *   step 0: 0.5 * 1/2 = 0.25     step 1: 0.5 * 2/2 = 0.5
 *   step 2: p = 0 -> 0.5 for every decay
 *   step 5: p = 1/3: linear 0.05 + 0.45 * 2/3 = 0.35;
 *                    cosine 0.05 + 0.45 * 0.5 * (1 + cos(pi/3)) = 0.05 + 0.45 * 0.75 = 0.3875
 *   step 11 (last): p = 1 -> 0.05 (linear, cosine); 0.5 (constant) */
START_TEST(test_lr_warmup_and_boundaries) {
    const char *decays[3] = {"constant", "linear", "cosine"};
    for (int k = 0; k < 3; k++) {
        Config c = make_config("adamw", decays[k], 0.5f, 12, 2, 0.1f);
        ck_assert_float_eq_tol(optim_lr(&c, 0), 0.25f, 1e-7f);
        ck_assert_float_eq_tol(optim_lr(&c, 1), 0.5f, 1e-7f);
        ck_assert_float_eq_tol(optim_lr(&c, 2), 0.5f, 1e-7f);
        ck_assert_float_eq_tol(optim_lr(&c, 11), k == 0 ? 0.5f : 0.05f, 1e-7f);
        ck_assert_float_eq_tol(optim_lr(&c, 20), k == 0 ? 0.5f : 0.05f, 1e-7f); /* clamped */
    }
    Config lin = make_config("adamw", "linear", 0.5f, 12, 2, 0.1f);
    Config cosn = make_config("adamw", "cosine", 0.5f, 12, 2, 0.1f);
    Config cst = make_config("adamw", "constant", 0.5f, 12, 2, 0.1f);
    ck_assert_float_eq_tol(optim_lr(&lin, 5), 0.35f, 1e-7f);
    ck_assert_float_eq_tol(optim_lr(&cosn, 5), 0.3875f, 1e-7f);
    ck_assert_float_eq_tol(optim_lr(&cst, 5), 0.5f, 1e-7f);
}
END_TEST

/* No warm-up, lr 1e-3, steps 11, min ratio 0: span 10, step 5 is the midpoint p = 1/2
 * where cosine and linear agree: 0.5e-3. Step 0 is the full lr. Step 8: p = 0.8:
 * linear 0.2e-3, cosine 0.5 * (1 + cos(0.8 pi)) e-3 = 0.0954915e-3. */
START_TEST(test_lr_no_warmup_midpoint) {
    Config lin = make_config("adamw", "linear", 1e-3f, 11, 0, 0.0f);
    Config cosn = make_config("adamw", "cosine", 1e-3f, 11, 0, 0.0f);
    ck_assert_float_eq_tol(optim_lr(&lin, 0), 1e-3f, 1e-9f);
    ck_assert_float_eq_tol(optim_lr(&cosn, 0), 1e-3f, 1e-9f);
    ck_assert_float_eq_tol(optim_lr(&lin, 5), 0.5e-3f, 1e-9f);
    ck_assert_float_eq_tol(optim_lr(&cosn, 5), 0.5e-3f, 1e-9f);
    ck_assert_float_eq_tol(optim_lr(&lin, 8), 0.2e-3f, 1e-9f);
    ck_assert_float_eq_tol(optim_lr(&cosn, 8), 0.0954915e-3f, 1e-9f);
    ck_assert_float_eq_tol(optim_lr(&cosn, 10), 0.0f, 1e-12f);
    /* cosine never increases over the decay */
    for (int s = 1; s < 11; s++) ck_assert(optim_lr(&cosn, s) <= optim_lr(&cosn, s - 1));
}
END_TEST

/* Degenerate lengths: all steps in warm-up; one step after warm-up (span 1, p = 0);
 * a 1-step run with no warm-up is the full lr. */
START_TEST(test_lr_degenerate) {
    Config all = make_config("adamw", "cosine", 1.0f, 4, 4, 0.1f);
    ck_assert_float_eq_tol(optim_lr(&all, 0), 0.25f, 1e-7f);
    ck_assert_float_eq_tol(optim_lr(&all, 3), 1.0f, 1e-7f);
    Config one = make_config("adamw", "linear", 1.0f, 5, 4, 0.1f);
    ck_assert_float_eq_tol(optim_lr(&one, 4), 1.0f, 1e-7f);
    Config single = make_config("adamw", "cosine", 1.0f, 1, 0, 0.1f);
    ck_assert_float_eq_tol(optim_lr(&single, 0), 1.0f, 1e-7f);
}
END_TEST

START_TEST(test_lr_unknown_decay_dies) {
    Config c = make_config("adamw", "exponential", 1.0f, 10, 0, 0.1f);
    ck_assert_ptr_nonnull(freopen("/dev/null", "w", stderr)); /* expected message */
    optim_lr(&c, 3);
}
END_TEST

/* ---- clipping and sum of squares ------------------------------------------------ */

START_TEST(test_clip_scale) {
    ck_assert(optim_clip_scale(1e6, 0.0f) == 1.0f);    /* disabled */
    ck_assert(optim_clip_scale(1e6, -1.0f) == 1.0f);   /* disabled */
    ck_assert(optim_clip_scale(0.25, 1.0f) == 1.0f);   /* norm 0.5 < 1: untouched */
    ck_assert(optim_clip_scale(0.0, 1.0f) == 1.0f);
    /* norm 4, clip 1: 1 / (4 + 1e-6) */
    ck_assert_float_eq_tol(optim_clip_scale(16.0, 1.0f), 1.0 / (4.0 + 1e-6), 1e-9);
    /* norm 10, clip 2.5: 0.25 (to the 1e-6 guard) */
    ck_assert_float_eq_tol(optim_clip_scale(100.0, 2.5f), 2.5 / (10.0 + 1e-6), 1e-9);
    /* norm == clip: the guard keeps it just below 1 */
    ck_assert(optim_clip_scale(1.0, 1.0f) < 1.0f);
    ck_assert(optim_clip_scale(INFINITY, 1.0f) == 0.0f);
}
END_TEST

START_TEST(test_sumsq_small_exact) {
    float g[3] = {1.0f, -2.0f, 3.0f};
    ck_assert(optim_sumsq(g, 3) == 14.0);
    ck_assert(optim_sumsq(g, 0) == 0.0);
    /* float overflow of a single square is avoided by the double accumulation */
    float big[2] = {3e30f, 4e30f};
    ck_assert_double_eq_tol(optim_sumsq(big, 2) / 25e60, 1.0, 1e-6);
}
END_TEST

/* n large enough for the parallel path and not a multiple of the blocking: exact for
 * values with exact squares, close to a long double sum for random values, and
 * bitwise the same for 1, 2 and 3 threads. */
START_TEST(test_sumsq_large_deterministic) {
    size_t n = 1000003;
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) g[i] = 0.5f;
    ck_assert(optim_sumsq(g, n) == 0.25 * (double)n);
    fill_random(g, n, 7);
    long double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (long double)g[i] * g[i];
    omp_set_num_threads(1);
    double s1 = optim_sumsq(g, n);
    omp_set_num_threads(2);
    double s2 = optim_sumsq(g, n);
    omp_set_num_threads(3);
    double s3 = optim_sumsq(g, n);
    ck_assert(s1 == s2 && s2 == s3);
    ck_assert_double_eq_tol(s1 / (double)ref, 1.0, 1e-12);
    free(g);
}
END_TEST

static Suite *optim_suite(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("adamw_sgd");
    tcase_add_test(tc, test_adamw_hand_computed);
    tcase_add_test(tc, test_adamw_bias_correction_first_step);
    tcase_add_test(tc, test_adamw_grad_scale);
    tcase_add_test(tc, test_adamw_large_matches_reference);
    tcase_add_test(tc, test_sgd_hand_computed);
    tcase_add_test(tc, test_sgd_plain_and_grad_scale);
    tcase_add_test(tc, test_update_dispatch);
    tcase_add_exit_test(tc, test_unknown_optimizer_dies, PP_ERUNTIME);
    suite_add_tcase(s, tc);
    tc = tcase_create("schedule_clip");
    tcase_add_test(tc, test_lr_warmup_and_boundaries);
    tcase_add_test(tc, test_lr_no_warmup_midpoint);
    tcase_add_test(tc, test_lr_degenerate);
    tcase_add_exit_test(tc, test_lr_unknown_decay_dies, PP_ERUNTIME);
    tcase_add_test(tc, test_clip_scale);
    tcase_add_test(tc, test_sumsq_small_exact);
    tcase_add_test(tc, test_sumsq_large_deterministic);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return check_run(optim_suite(), 0);
}
