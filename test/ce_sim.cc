/* ce_sim.cc — cuda/ce_kernels.cuh's fused cross-entropy kernels (crossentropy, two passes
 * over the row in global memory; crossentropy_smem, the row kept in shared memory: [Note:
 * cross-entropy row in shared memory]) compiled for the host and run there against the CPU
 * backend's crossentropy_forward_backward (built as build/cpu/test/test_ce_sim; part of
 * make test).
 *
 * The kernel source is the header kernels.cu includes, compiled unchanged over
 * test/flash_sim.h's stand-ins and run by test/block_sim.cc (each CTA as fibers, a warp
 * running ahead of the others to the next __syncthreads, shared memory, ce_sh included, NaN
 * before each CTA and untouched past the launch's size), at the launches k_crossentropy makes: 512
 * threads a row for the two-pass kernel, 1024 and Vp floats of shared memory for the other. Per
 * shape, fp32 and bf16 dlogits: the losses within 1e-5 relative of the CPU's, dlogits
 * within 1e-5 relative L2 (bf16: 4e-3, its rounding), the padded columns exactly zero;
 * the shared-memory kernel's losses and fp32 dlogits within 1e-6 of the two-pass kernel's
 * (bf16: one rounding step apart at most); fp32 in place (dlogits = logits) bit for bit
 * the out-of-place result; without a gradient the two-pass kernel leaves dlogits and the
 * logits untouched. The same with bf16 logits (check_bf16_logits): bf16 in place bit for
 * bit out of place. Outputs start as NaN and guard bytes follow every buffer; the padded
 * input columns are NaN, so a kernel that adds one shows. It cannot check timing or the
 * device's own expf and logf (libm's here). */
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "block_sim.h"
#include "flash_sim.h"
/* crossentropy_smem's `extern __shared__ float4 row[]` is the runner's shared memory */
extern float4 row[] __asm__("smem");
#include "ce_kernels.cuh"

extern "C" {
#include "backend/backend.h"
#include "relerr.h"
}

static void fail(const char *what) {
    fprintf(stderr, "ce_sim: %s\n", what);
    exit(1);
}

/* ---- buffers: NaN-poisoned or copied, guard bytes after ------------------------------- */

enum { GUARD = 64 };
static const unsigned char GUARD_BYTE = 0xa5;

static void *buffer(size_t bytes, const void *init) {
    unsigned char *p = (unsigned char *)aligned_alloc(16, (bytes + GUARD + 15) / 16 * 16);
    if (init)
        memcpy(p, init, bytes);
    else
        memset(p, 0xff, bytes); /* NaN in fp32 and in bf16 */
    memset(p + bytes, GUARD_BYTE, GUARD);
    return p;
}
static bool guards_intact(const void *p, size_t bytes) {
    const unsigned char *g = (const unsigned char *)p + bytes;
    for (int i = 0; i < GUARD; i++)
        if (g[i] != GUARD_BYTE) return false;
    return true;
}

static float value(float x) { return x; }
static float value(__nv_bfloat16 x) { return __bfloat162float(x); }
static bool zero(float x) { return !memcmp(&x, "\0\0\0\0", 4); }
static bool zero(__nv_bfloat16 x) { return x.bits == 0; }

/* ---- the launches k_crossentropy makes (cuda/kernels.cu) ------------------------------- */

template <typename InT, typename OutT>
static void two_pass(OutT *dl, float *loss, const InT *x, const int *tg, float dloss, int N, int V,
                     int Vp, int want_grad) {
    bsim_run(N, 512, 0, [&] { crossentropy<InT, OutT>(dl, loss, x, tg, dloss, V, Vp, want_grad); });
}

/* k_crossentropy's condition for the shared-memory kernel, at an H100's opt-in */
static bool smem_fits(int Vp) {
    return Vp % 4 == 0 && (size_t)Vp * sizeof(float) + 64 * sizeof(float) <= BSIM_SMEM;
}

template <typename InT, typename OutT>
static void in_smem(OutT *dl, float *loss, const InT *x, const int *tg, float dloss, int N, int V,
                    int Vp) {
    if (!smem_fits(Vp)) fail("a shape the shared-memory kernel does not take");
    bsim_run(N, CE_SMEM_THREADS, (size_t)Vp * sizeof(float),
             [&] { crossentropy_smem<InT, OutT>(dl, loss, x, tg, dloss, V, Vp); });
}

/* ---- the check -------------------------------------------------------------------------- */

struct Shape {
    int V, Vp;
    std::vector<int> targets; /* one a row */
};

struct Want { /* the CPU's result */
    std::vector<float> dl, loss;
};

/* The largest relative difference of the losses. */
static double loss_err(const float *got, const float *want, int N) {
    double e = 0;
    for (int n = 0; n < N; n++) {
        double d = fabs((double)got[n] - want[n]) / fabs((double)want[n]);
        if (d != d) return INFINITY; /* a loss not written */
        e = d > e ? d : e;
    }
    return e;
}

/* One kernel's result against the CPU's: every check but the cross-kernel ones. */
template <typename OutT> struct Got {
    OutT *dl;
    float *loss;
    size_t n;
    int N;
    double edl = 0, eloss = 0;
    bool pads = true, guards = true;

    Got(size_t n_, int N_) : n(n_), N(N_) {
        dl = (OutT *)buffer(n * sizeof(OutT), NULL);
        loss = (float *)buffer(N * sizeof(float), NULL);
    }
    ~Got() {
        free(dl);
        free(loss);
    }
    std::vector<float> floats() const {
        std::vector<float> f(n);
        for (size_t i = 0; i < n; i++) f[i] = value(dl[i]);
        return f;
    }
    void compare(const Want &w, int V, int Vp) {
        edl = rel_l2(floats().data(), w.dl.data(), n);
        eloss = loss_err(loss, w.loss.data(), N);
        for (int r = 0; r < N; r++)
            for (int j = V; j < Vp; j++) pads = pads && zero(dl[(size_t)r * Vp + j]);
        guards = guards_intact(dl, n * sizeof(OutT)) && guards_intact(loss, N * sizeof(float));
    }
    bool ok(double bound) const { return edl <= bound && eloss <= 1e-5 && pads && guards; }
};

static uint64_t rng = 11;

/* bf16 logits ([Note: logits type] in src/backend/backend.h), as the CUDA backend's head
 * writes them at bf16: both kernels against the CPU on the same rounded logits, bf16
 * dlogits out of place and in place over the logits (the same bits), and the losses
 * without a gradient (the logits kept). 0 when all hold. */
static int check_bf16_logits(const Shape &s, const std::vector<float> &x, const int *tg,
                             float dloss) {
    const Backend *cpu = backend_cpu();
    int N = (int)s.targets.size(), V = s.V, Vp = s.Vp, bad = 0;
    size_t n = (size_t)N * Vp;
    std::vector<__nv_bfloat16> xb(n);
    std::vector<float> xr(n);
    for (size_t i = 0; i < n; i++) { /* the padded columns stay NaN */
        xb[i] = __float2bfloat16_rn(x[i]);
        xr[i] = value(xb[i]);
    }
    Want w{std::vector<float>(n), std::vector<float>(N)};
    cpu->crossentropy_forward_backward(cpu, w.dl.data(), w.loss.data(), xr.data(), s.targets.data(),
                                       dloss, N, V, Vp);
    __nv_bfloat16 *in = (__nv_bfloat16 *)buffer(n * 2, xb.data());
    bool smem = smem_fits(Vp);
    for (int k = 0; k < (smem ? 2 : 1); k++) {
        Got<__nv_bfloat16> o(n, N), p(n, N);
        memcpy(p.dl, xb.data(), n * 2);
        if (k) {
            in_smem(o.dl, o.loss, in, tg, dloss, N, V, Vp);
            in_smem(p.dl, p.loss, (const __nv_bfloat16 *)p.dl, tg, dloss, N, V, Vp);
        } else {
            two_pass(o.dl, o.loss, in, tg, dloss, N, V, Vp, 1);
            two_pass(p.dl, p.loss, (const __nv_bfloat16 *)p.dl, tg, dloss, N, V, Vp, 1);
        }
        o.compare(w, V, Vp);
        bool inplace = !memcmp(p.dl, o.dl, n * 2) && !memcmp(p.loss, o.loss, N * sizeof(float)) &&
                       guards_intact(p.dl, n * 2);
        bool ok = o.ok(4e-3) && inplace;
        printf("%-4s %s V=%d Vp=%d N=%d, bf16 logits: losses %.1e, dlogits %.1e (bounds 1e-5, "
               "4e-3); in place %s%s%s\n",
               ok ? "ok" : "FAIL", k ? "shared-memory row" : "two passes       ", V, Vp, N, o.eloss,
               o.edl, inplace ? "= out of place" : "DIFFERS",
               o.pads ? "" : "; a padded column not 0",
               o.guards ? "" : "; a guard byte was overwritten");
        bad += !ok;
    }
    Got<float> l(n, N); /* no gradient */
    two_pass(l.dl, l.loss, in, tg, dloss, N, V, Vp, 0);
    bool untouched = true;
    for (size_t i = 0; i < n; i++)
        untouched = untouched && !memcmp(&l.dl[i], "\xff\xff\xff\xff", 4);
    bool kept = !memcmp(in, xb.data(), n * 2) && guards_intact(in, n * 2);
    double el = loss_err(l.loss, w.loss.data(), N);
    bool ok = el <= 1e-5 && untouched && kept;
    printf("%-4s two passes, bf16 logits, no gradient: losses %.1e%s%s\n", ok ? "ok" : "FAIL", el,
           untouched ? ", dlogits untouched" : ", dlogits WRITTEN",
           kept ? "" : "; the logits changed");
    free(in);
    return bad + !ok;
}

/* One shape: both kernels (the shared-memory one where k_crossentropy takes it), fp32 and
 * bf16 dlogits, in place, and the two-pass kernel without a gradient. 0 when all hold. */
static int check(const Shape &s, float scale) {
    const Backend *cpu = backend_cpu();
    int N = (int)s.targets.size(), V = s.V, Vp = s.Vp;
    size_t n = (size_t)N * Vp;
    float dloss = 1.0f / 3.0f;
    std::vector<float> x(n);
    for (int r = 0; r < N; r++)
        for (int j = 0; j < Vp; j++) /* row r shifted by 8 r: the max differs row to row */
            x[(size_t)r * Vp + j] = j < V ? scale * splitmix_unit(&rng) + 8.0f * r : NAN;
    Want w{std::vector<float>(n), std::vector<float>(N)};
    std::vector<float> cx = x;
    cpu->crossentropy_forward_backward(cpu, w.dl.data(), w.loss.data(), cx.data(), s.targets.data(),
                                       dloss, N, V, Vp);
    const int *tg = (const int *)buffer(N * sizeof(int), s.targets.data());
    float *in = (float *)buffer(n * sizeof(float), x.data());
    bool smem = smem_fits(Vp);
    int bad = 0;

    /* the two-pass kernel, then the shared-memory one: fp32, bf16, fp32 in place */
    Got<float> f2(n, N), fs(n, N), p2(n, N), ps(n, N);
    Got<__nv_bfloat16> b2(n, N), bs(n, N);
    two_pass(f2.dl, f2.loss, in, tg, dloss, N, V, Vp, 1);
    two_pass(b2.dl, b2.loss, in, tg, dloss, N, V, Vp, 1);
    memcpy(p2.dl, x.data(), n * sizeof(float));
    two_pass(p2.dl, p2.loss, p2.dl, tg, dloss, N, V, Vp, 1);
    if (smem) {
        in_smem(fs.dl, fs.loss, in, tg, dloss, N, V, Vp);
        in_smem(bs.dl, bs.loss, in, tg, dloss, N, V, Vp);
        memcpy(ps.dl, x.data(), n * sizeof(float));
        in_smem(ps.dl, ps.loss, ps.dl, tg, dloss, N, V, Vp);
    }
    /* no gradient: the losses alone, dlogits not written */
    Got<float> l2(n, N);
    two_pass(l2.dl, l2.loss, in, tg, dloss, N, V, Vp, 0);
    bool untouched = true;
    for (size_t i = 0; i < n; i++)
        untouched = untouched && !memcmp(&l2.dl[i], "\xff\xff\xff\xff", 4);
    bool in_kept = !memcmp(in, x.data(), n * sizeof(float)) && guards_intact(in, n * 4) &&
                   guards_intact(tg, N * sizeof(int));

    for (int k = 0; k < (smem ? 2 : 1); k++) {
        Got<float> &f = k ? fs : f2, &p = k ? ps : p2;
        Got<__nv_bfloat16> &b = k ? bs : b2;
        f.compare(w, V, Vp);
        b.compare(w, V, Vp);
        bool inplace = !memcmp(p.dl, f.dl, n * sizeof(float)) &&
                       !memcmp(p.loss, f.loss, N * sizeof(float)) && guards_intact(p.dl, n * 4);
        bool ok = f.ok(1e-5) && b.ok(4e-3) && inplace;
        printf("%-4s %s V=%d Vp=%d N=%d: losses %.1e, dlogits fp32 %.1e, bf16 %.1e (bounds 1e-5, "
               "1e-5, 4e-3); in place %s%s%s\n",
               ok ? "ok" : "FAIL", k ? "shared-memory row" : "two passes       ", V, Vp, N,
               f.eloss > b.eloss ? f.eloss : b.eloss, f.edl, b.edl,
               inplace ? "= out of place" : "DIFFERS",
               f.pads && b.pads ? "" : "; a padded column not 0",
               f.guards && b.guards ? "" : "; a guard byte was overwritten");
        bad += !ok;
    }
    if (smem) { /* the two kernels agree, up to their different orders of adding */
        double el = loss_err(fs.loss, f2.loss, N), ed = rel_l2(fs.dl, f2.dl, n);
        size_t far = 0; /* bf16 elements more than one rounding step apart */
        for (size_t i = 0; i < n; i++) {
            float a = value(bs.dl[i]), c = value(b2.dl[i]);
            far += !(fabsf(a - c) <= 0x1p-7f * fmaxf(fabsf(a), fabsf(c))); /* an ulp at most */
        }
        bool ok = el <= 1e-6 && ed <= 1e-6 && !far;
        printf("%-4s shared-memory row = two passes: losses %.1e, dlogits %.1e (bound 1e-6); "
               "bf16 %zu element(s) over one step apart\n",
               ok ? "ok" : "FAIL", el, ed, far);
        bad += !ok;
    }
    double el = loss_err(l2.loss, w.loss.data(), N);
    bool ok = el <= 1e-5 && untouched && in_kept && guards_intact(l2.loss, N * 4);
    printf("%-4s two passes, no gradient: losses %.1e%s%s\n", ok ? "ok" : "FAIL", el,
           untouched ? ", dlogits untouched" : ", dlogits WRITTEN",
           in_kept ? "" : "; the logits or the targets changed");
    bad += !ok;
    bad += check_bf16_logits(s, x, tg, dloss);
    free((void *)tg);
    free(in);
    return bad;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    bsim_static_shared(ce_sh, sizeof ce_sh); /* NaN before each CTA, as on a fresh block */
    int bad = 0;
    /* GPT-2: V % 4 == 1, so the last real column is the scalar tail's (its vector holds 3
     * padded columns); 3 passes of the shared-memory kernel's 4-vector loads, the last short */
    bad += check(Shape{50257, 50304, {0, 50256}}, 4.0f);
    /* the padded-tail vector: V % 4 == 1 (V - 1 alone in it), 2 (V - 2, V - 1), 3 */
    bad += check(Shape{1001, 1004, {1000, 0, 517}}, 4.0f);
    bad += check(Shape{1002, 1004, {1000, 1001, 0}}, 4.0f);
    bad += check(Shape{251, 256, {250, 248, 0}}, 4.0f);
    /* no padding; padding of whole vectors only (V % 4 == 0) */
    bad += check(Shape{1024, 1024, {0, 1023, 511}}, 4.0f);
    bad += check(Shape{1000, 1024, {999, 0}}, 4.0f);
    /* Vp % 4 != 0: the two-pass kernel's single floats (the shared-memory one does not take
     * it) */
    bad += check(Shape{999, 1001, {998, 0, 3}}, 4.0f);
    /* 1025 vectors: thread 0 of 1024 owns two; wide logits (exp underflows in most columns) */
    bad += check(Shape{4096, 4100, {4095, 17}}, 60.0f);
    printf("ce_sim: %s\n", bad ? "FAILED" : "every shape within the bounds");
    return bad ? 1 : 0;
}
