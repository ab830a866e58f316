/* norm_sim.cc — cuda/norm_kernels.cuh's one-pass LayerNorm and RMSNorm backward
 * ([Note: one-pass norm backward]), compiled for the host and run there against the CPU
 * backend's layernorm_backward and rmsnorm_backward (built as build/cpu/test/test_norm_sim;
 * part of make test).
 *
 * The kernel source is the header kernels.cu includes, compiled unchanged over
 * test/flash_sim.h's stand-ins and run by test/block_sim.cc: each CTA as blockDim fibers
 * (ucontext), a shuffle a collective of its warp only, so one warp runs ahead of the others
 * up to the next __syncthreads (in warp order, and in reverse order in every other CTA): a
 * missing barrier, or shared memory rewritten before another warp has read it, shows.
 * Per shape: dinp, dw and db (col_final's order of adding the chunks, emulated here)
 * within 1e-5 relative L2 of the CPU op; the I half's dinp and the W half's chunk sums
 * bit for bit the fused call's ([Note: split backward]); where C % 4 == 0 the single-float
 * kernel's chunk sums bit for bit the float4 kernel's (the launcher relies on it when dinp
 * alone is misaligned). Shared memory is filled with NaN before each CTA and must be
 * untouched past the launch's size; the chunk sums are NaN-poisoned and guard words
 * follow dinp and the sums; every fiber must pass the same barriers. It cannot check
 * timing, races between CTAs (run one after another; they share no output) or the
 * device's own rounding (the _rn stand-ins are IEEE single operations). Every shape runs
 * with dout in fp32 and in bf16 (the operand type it has at bf16: [Note: operand
 * activations]), the CPU reading the same bf16-rounded values. */
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "block_sim.h"
#include "flash_sim.h"
#include "norm_kernels.cuh"

extern "C" {
#include "backend/backend.h"
#include "relerr.h"
}

static void fail(const char *what) {
    fprintf(stderr, "norm_sim: %s\n", what);
    exit(1);
}

/* ---- the check ------------------------------------------------------------------------- */

enum { GUARD = 16 };
static const uint32_t GUARD_BITS = 0x7fc0dead; /* a NaN with a payload nothing computes */

/* n floats (a copy of init, else NaN) followed by GUARD guard words, 16-byte aligned. */
static float *buffer(size_t n, const float *init) {
    float *x = (float *)aligned_alloc(16, ((n + GUARD) * sizeof(float) + 15) / 16 * 16);
    if (init)
        memcpy(x, init, n * sizeof(float));
    else
        memset(x, 0xff, n * sizeof(float));
    for (int i = 0; i < GUARD; i++) memcpy(&x[n + i], &GUARD_BITS, 4);
    return x;
}
static int guards_intact(const float *x, size_t n) {
    for (int i = 0; i < GUARD; i++)
        if (memcmp(&x[n + i], &GUARD_BITS, 4)) return 0;
    return 1;
}

static uint64_t rng = 7;
static std::vector<float> rnd(size_t n, float scale) {
    std::vector<float> v(n);
    for (auto &x : v) x = scale * splitmix_unit(&rng);
    return v;
}

/* norm_bwd<V4, RMS, DX, DW, K, DT> over the chunks of `rows` rows, as nb_launch does; dout
 * of type DT (fp32 or bf16). */
template <bool V4, bool RMS, bool DX, bool DW, int K, typename DT>
static void launch(float *dinp, void *dop, float *part, const void *dout, const float *inp,
                   const float *mean, const float *rstd, const float *w, int N, int C, int rows,
                   int T) {
    unsigned P = (unsigned)((N + rows - 1) / rows);
    bsim_run(P, T, nb_smem(T, RMS, K), [&] {
        norm_bwd<V4, RMS, DX, DW, K, DT>(dinp, (DT *)dop, part, (const DT *)dout, inp, mean, rstd,
                                         w, N, C, rows);
    });
}

/* dop (the operand copy of dinp) with the fused call and the I half; none with the W half */
template <bool V4, bool RMS, int K, typename DT> struct Kern {
    static void fused(float *a, void *o, float *p, const void *d, const float *x, const float *m,
                      const float *r, const float *w, int N, int C, int rows, int T) {
        launch<V4, RMS, true, true, K, DT>(a, o, p, d, x, m, r, w, N, C, rows, T);
    }
    static void ihalf(float *a, void *o, float *p, const void *d, const float *x, const float *m,
                      const float *r, const float *w, int N, int C, int rows, int T) {
        launch<V4, RMS, true, false, K, DT>(a, o, p, d, x, m, r, w, N, C, rows, T);
    }
    static void whalf(float *a, void *o, float *p, const void *d, const float *x, const float *m,
                      const float *r, const float *w, int N, int C, int rows, int T) {
        launch<V4, RMS, false, true, K, DT>(a, NULL, p, d, x, m, r, w, N, C, rows, T);
    }
};
typedef void (*KernFn)(float *, void *, float *, const void *, const float *, const float *,
                       const float *, const float *, int, int, int, int);
struct Trio {
    KernFn fused, ihalf, whalf;
};
template <bool V4, bool RMS, typename DT> static Trio trio_t(int K) {
    typedef Kern<V4, RMS, 1, DT> K1;
    typedef Kern<V4, RMS, 2, DT> K2;
    typedef Kern<V4, RMS, 4, DT> K4;
    if (K == 1) return Trio{K1::fused, K1::ihalf, K1::whalf};
    if (K == 2) return Trio{K2::fused, K2::ihalf, K2::whalf};
    return Trio{K4::fused, K4::ihalf, K4::whalf};
}
template <bool V4, bool RMS> static Trio trio(int K, bool bf) {
    return bf ? trio_t<V4, RMS, __nv_bfloat16>(K) : trio_t<V4, RMS, float>(K);
}

/* dst[c] += the P chunks' sums part[k * stride + c], in col_final<32>'s order (kernels.cu):
 * lane row ty adds chunks ty, ty + 32, ..., then the 32 rows in order. */
static void col_final32(float *dst, const float *part, int P, size_t stride, int C) {
    for (int c = 0; c < C; c++) {
        float t = 0.0f;
        for (int ty = 0; ty < 32; ty++) {
            float a = 0.0f;
            for (int k = ty; k < P; k += 32) a += part[k * stride + c];
            t += a;
        }
        dst[c] += t;
    }
}

/* One shape: LayerNorm (or RMSNorm) backward of N rows of C, chunks of `rows` (0: nb_rows),
 * float4 groups when v4, dout in bf16 when bf. Returns 0 when every check holds. */
template <bool RMS> static int check1(int N, int C, bool v4, int rows, bool bf) {
    const Backend *cpu = backend_cpu();
    size_t NC = (size_t)N * C;
    NbShape sh = nb_shape(C, v4);
    if (!sh.K) fail("a shape the one-pass kernel does not take");
    rows = nb_rows(N, rows);
    int P = (N + rows - 1) / rows, ns = RMS ? 1 : 2;
    size_t np = (size_t)P * ns * C;
    std::vector<float> x = rnd(NC, 2.0f), w = rnd(C, 1.5f), b = rnd(C, 1.0f), g = rnd(NC, 1.0f);
    for (auto &v : x) v += 0.5f; /* a non-zero mean */
    std::vector<__nv_bfloat16> gh(NC + 8); /* dout in bf16, and the CPU on its values */
    if (bf)
        for (size_t i = 0; i < NC; i++) {
            gh[i] = __float2bfloat16_rn(g[i]);
            g[i] = __bfloat162float(gh[i]);
        }
    std::vector<float> gx0 = rnd(NC, 1.0f), gw0 = rnd(C, 1.0f), gb0 = rnd(C, 1.0f);
    std::vector<float> out(NC), mean(N), rstd(N);
    std::vector<float> scratch(cpu->scratch_floats(cpu, N, 1, C));
    if (RMS)
        cpu->rmsnorm_forward(cpu, out.data(), rstd.data(), x.data(), w.data(), 1e-5f, N, C);
    else
        cpu->layernorm_forward(cpu, out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                               b.data(), N, C);
    std::vector<float> gx = gx0, gw = gw0, gb = gb0; /* the CPU's, accumulated */
    if (RMS)
        cpu->rmsnorm_backward(cpu, gx.data(), NULL, gw.data(), g.data(), x.data(), rstd.data(),
                              w.data(), N, C, scratch.data());
    else
        cpu->layernorm_backward(cpu, gx.data(), NULL, gw.data(), gb.data(), g.data(), x.data(),
                                mean.data(), rstd.data(), w.data(), N, C, scratch.data());

    /* the kernel's inputs in aligned buffers with guards (inputs too: no stray writes) */
    float *dd = buffer(NC, g.data()), *dx = buffer(NC, x.data()), *dw = buffer(C, w.data());
    if (bf) memcpy(dd, gh.data(), NC * sizeof(__nv_bfloat16)); /* (within dd's room) */
    float *dm = buffer(N, mean.data()), *dr = buffer(N, rstd.data());
    float *fx = buffer(NC, gx0.data()), *fp = buffer(np, NULL); /* fused */
    float *ix = buffer(NC, gx0.data()), *wp = buffer(np, NULL); /* I half, W half */
    float *sp = buffer(np, NULL);                               /* W half, single floats */
    Trio k = v4 ? trio<true, RMS>(sh.K, bf) : trio<false, RMS>(sh.K, bf);
    const float *m = RMS ? NULL : dm;
    /* the operand copy of dinp (dout's type) with the fused call and the I half: the host's
     * rounding of the fused dinp, bit for bit, both; a bf16 copy leaves the rest of its fp32
     * room (bytes 2 NC..4 NC) as it was */
    float *fo = buffer(NC, NULL), *io = buffer(NC, NULL);
    k.fused(fx, fo, fp, dd, dx, m, dr, dw, N, C, rows, sh.T);
    k.ihalf(ix, io, NULL, dd, dx, m, dr, dw, N, C, rows, sh.T);
    k.whalf(NULL, NULL, wp, dd, dx, m, dr, dw, N, C, rows, sh.T);
    size_t ob = bf ? 2 : 4, op_wrong = memcmp(io, fo, NC * ob) != 0;
    for (size_t i = NC * ob; i < NC * 4; i++)
        op_wrong += ((const unsigned char *)fo)[i] != 0xff ||
                    ((const unsigned char *)io)[i] != 0xff;
    for (size_t i = 0; i < NC; i++) {
        if (!bf) {
            op_wrong += memcmp(&fo[i], &fx[i], 4) != 0;
            continue;
        }
        __nv_bfloat16 want = __float2bfloat16_rn(fx[i]), got;
        memcpy(&got, (const char *)fo + 2 * i, 2);
        op_wrong += memcmp(&got, &want, 2) != 0;
    }
    bool same_scalar = true;
    if (v4) { /* the single-float kernel's chunk sums: the float4 kernel's bits */
        NbShape s1 = nb_shape(C, false);
        if (s1.K) {
            trio<false, RMS>(s1.K, bf).whalf(NULL, NULL, sp, dd, dx, m, dr, dw, N, C, rows, s1.T);
            same_scalar = !memcmp(sp, fp, np * sizeof(float));
        }
    }
    std::vector<float> kw = gw0, kb = gb0;
    col_final32(kw.data(), fp, P, (size_t)ns * C, C);
    if (!RMS) col_final32(kb.data(), fp + C, P, (size_t)ns * C, C);
    double ex = rel_l2(fx, gx.data(), NC), ew = rel_l2(kw.data(), gw.data(), C);
    double eb = RMS ? 0 : rel_l2(kb.data(), gb.data(), C);
    bool guards = guards_intact(fx, NC) && guards_intact(fo, NC) && guards_intact(io, NC) &&
                  guards_intact(fp, np) && guards_intact(ix, NC) && guards_intact(wp, np) &&
                  guards_intact(sp, np) && guards_intact(dd, NC) && guards_intact(dx, NC) &&
                  guards_intact(dw, C) && guards_intact(dm, N) && guards_intact(dr, N);
    bool ihalf = !memcmp(ix, fx, NC * sizeof(float)), whalf = !memcmp(wp, fp, np * sizeof(float));
    bool ok = ex <= 1e-5 && ew <= 1e-5 && eb <= 1e-5 && guards && ihalf && whalf && same_scalar &&
              !op_wrong;
    printf("%-4s %s backward, one pass, N=%d C=%d %s, dout %s (K %d, %d threads, %d rows a "
           "chunk, %d chunks): dinp %.1e, dw %.1e, db %.1e (bound 1e-5); I half %s, W half "
           "%s; dinp's operand copy %zu of %zu wrong%s%s\n",
           ok ? "ok" : "FAIL", RMS ? "RMSNorm" : "LayerNorm", N, C, v4 ? "float4" : "single",
           bf ? "bf16" : "fp32", sh.K, sh.T, rows, P, ex, ew, eb, ihalf ? "= fused" : "DIFFERS",
           whalf ? "= fused" : "DIFFERS", op_wrong, NC,
           !v4           ? ""
           : same_scalar ? "; single-float sums = float4 sums"
                         : "; single-float sums DIFFER",
           guards ? "" : "; a guard word was overwritten");
    for (float *p : {dd, dx, dw, dm, dr, fx, fo, io, fp, ix, wp, sp}) free(p);
    return !ok;
}
template <bool RMS> static int check(int N, int C, bool v4, int rows = 0) {
    return check1<RMS>(N, C, v4, rows, false) + check1<RMS>(N, C, v4, rows, true);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int bad = 0;
    /* the launch arithmetic at GPT-2 124M's B 16 x T 1024 (cuda/NOTES.md) */
    NbShape g2 = nb_shape(768, true);
    int r2 = nb_rows(16384, 0);
    bool arith = g2.K == 1 && g2.T == 192 && r2 == 64 && nb_rows(1, 0) == NB_STEP &&
                 nb_rows(1025, 0) == 8 && nb_rows(100, 32) == 32 && nb_shape(8192, true).K == 4 &&
                 !nb_shape(8196, true).K && nb_shape(2048, false).K == 4 &&
                 !nb_shape(2049, false).K;
    printf("%-4s launch shape at N=16384 C=768: K %d, %d threads, %d rows a chunk, %d chunks\n",
           arith ? "ok" : "FAIL", g2.K, g2.T, r2, (16384 + r2 - 1) / r2);
    bad += !arith;
    /* float4 groups at K 1 (GPT-2's C, C 1024), K 2 and K 4; N = 1, N not a multiple of the
     * chunk, chunks over several steps, a chunk that is not a whole number of steps */
    bad += check<false>(37, 768, true);    /* 10 chunks of 4, the last of 1 row */
    bad += check<false>(1, 768, true);     /* N = 1 */
    bad += check<false>(9, 1024, true);    /* K 1, 256 threads */
    bad += check<false>(50, 64, true, 12); /* chunks of 12 rows: 3 steps, the last chunk 2 */
    bad += check<false>(45, 96, true, 7);  /* chunks of 7: a step cut short in every chunk */
    bad += check<false>(1100, 8, true);    /* nb_rows: 8 rows a chunk (138 chunks) */
    bad += check<false>(5, 2400, true);    /* K 2 (S 2), 320 threads */
    bad += check<false>(3, 4100, true);    /* K 4 (S 1), 288 threads */
    /* single floats: odd C (K 1, 2, 4) */
    bad += check<false>(23, 771, false); /* K 2, 416 threads */
    bad += check<false>(11, 99, false);  /* K 1 */
    bad += check<false>(2, 1500, false); /* K 4 */
    bad += check<false>(1, 771, false);  /* N = 1 */
    /* RMSNorm */
    bad += check<true>(37, 768, true);
    bad += check<true>(29, 1024, true, 12);
    bad += check<true>(5, 2400, true);
    bad += check<true>(23, 771, false);
    bad += check<true>(1, 99, false);
    printf("norm_sim: %s\n", bad ? "FAILED" : "every shape within the bounds, the halves bitwise");
    return bad ? 1 : 0;
}
