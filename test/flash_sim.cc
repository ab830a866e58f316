/* flash_sim.cc — cuda/flash_attn.cu's own kernels, compiled for the host and run there,
 * against the CPU backend's attention (built as build/cpu/test/test_flash_sim; part of
 * make test).
 *
 * test_flash_emul.c checks the algorithm; this checks the code: the kernel source is
 * included unchanged (FLASH_HOST_SIM swaps the CUDA built-ins for test/flash_sim.h's),
 * each CTA runs as 128 fibers (ucontext) that meet at every collective — __syncthreads,
 * __shfl_xor_sync and mma.sync — and mma_bf16 rebuilds the warp's A (16x16), B (16x8)
 * and C (16x8) from the 32 lanes' registers by the PTX ISA's fragment rules (§9.7.14.5.8,
 * as written in [Note: mma fragments]) and hands each lane its part of A B + C. So a
 * wrong fragment index, a mask on the wrong column, a missing stage or an output not
 * written shows here as it would on the GPU, provided the PTX layout is what the note
 * says (the one thing this cannot check). What it also checks:
 *  - shared memory is filled with bf16 NaN (0xFFFF) before each CTA: a read of an element
 *    the CTA did not stage turns the result NaN; bytes past the launch's dynamic size
 *    must still hold the fill afterwards (no write past the layout);
 *  - every output is NaN-poisoned first, and guard words after each output buffer must
 *    be untouched;
 *  - every fiber passes the same number of barriers (no collective in divergent code).
 * What it cannot check: timing, the order of the tensor core's additions, races between
 * CTAs (they run one after the other here; the kernels share no outputs), and the
 * hardware's view of the layout. Bound: relative L2 1e-2 against the fp32 CPU op, as
 * test_flash_emul; expected ~3e-3. Slow on purpose (a context switch per lane per
 * collective): small shapes only. */
#include <ucontext.h>

#include <functional>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "flash_attn.cu"

extern "C" {
#include "backend/backend.h"
#include "relerr.h"
}

SimDim sim_block, sim_grid;
int sim_cur;

enum { NT = FA_THREADS, STACK = 128 * 1024, SMEM = 128 * 1024 };
alignas(16) unsigned char smem[SMEM]; /* the block's shared memory: the kernels' extern array */
static ucontext_t sched_ctx, fib[NT];
static std::vector<char> stacks((size_t)NT * STACK);
static int done[NT];
static long nbar[NT];
static std::function<void()> body;
static float xf[NT];
static uint32_t xa[NT][4], xb[NT][2];

static void fail(const char *what) {
    fprintf(stderr, "flash_sim: %s\n", what);
    exit(1);
}

void __syncthreads(void) {
    int t = sim_cur;
    nbar[t]++;
    swapcontext(&fib[t], &sched_ctx);
}

float __shfl_xor_sync(unsigned, float v, int m) {
    int t = sim_cur;
    xf[t] = v;
    __syncthreads();
    float r = xf[(t & ~31) | ((t & 31) ^ m)];
    __syncthreads(); /* all have read before the next collective overwrites */
    return r;
}

static float bf_lo(uint32_t w) { /* the low half of a bf16 pair, as a float */
    uint32_t u = w << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float bf_hi(uint32_t w) {
    uint32_t u = w & 0xffff0000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    int t = sim_cur, w0 = t & ~31, lane = t & 31;
    memcpy(xa[t], a, sizeof xa[t]);
    xb[t][0] = b0;
    xb[t][1] = b1;
    __syncthreads();
    float A[16][16], Bm[16][8];
    for (int L = 0; L < 32; L++) { /* PTX ISA 9.7.14.5.8, lane L = 4 g + q */
        int g = L / 4, q = L % 4;
        const uint32_t *ra = xa[w0 + L], *rb = xb[w0 + L];
        A[g][2 * q] = bf_lo(ra[0]);
        A[g][2 * q + 1] = bf_hi(ra[0]);
        A[g + 8][2 * q] = bf_lo(ra[1]);
        A[g + 8][2 * q + 1] = bf_hi(ra[1]);
        A[g][2 * q + 8] = bf_lo(ra[2]);
        A[g][2 * q + 9] = bf_hi(ra[2]);
        A[g + 8][2 * q + 8] = bf_lo(ra[3]);
        A[g + 8][2 * q + 9] = bf_hi(ra[3]);
        Bm[2 * q][g] = bf_lo(rb[0]);
        Bm[2 * q + 1][g] = bf_hi(rb[0]);
        Bm[2 * q + 8][g] = bf_lo(rb[1]);
        Bm[2 * q + 9][g] = bf_hi(rb[1]);
    }
    int g = lane / 4, q = lane % 4;
    for (int e = 0; e < 4; e++) { /* c0, c1: row g; c2, c3: row g + 8; columns 2q, 2q + 1 */
        int r = g + 8 * (e / 2), col = 2 * q + (e & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s += A[r][k] * Bm[k][col];
        c[e] += s;
    }
    __syncthreads();
}

struct Pending {
    void *dst;
    const void *src;
    int valid;
};
static std::vector<Pending> pend[NT];

static void in_smem(const void *p, size_t n, const char *what) {
    const unsigned char *c = (const unsigned char *)p;
    if (c < smem || c + n > smem + SMEM) fail(what);
    if ((uintptr_t)p % 16) fail("an ldmatrix row or cp.async destination not 16-byte aligned");
}

void cp_async16(void *dst, const void *src, int valid) {
    in_smem(dst, 16, "cp.async to an address outside shared memory");
    if ((uintptr_t)src % 16) fail("cp.async from a global address not 16-byte aligned");
    if (valid != 0 && valid != 16) fail("cp.async with a source size other than 0 or 16");
    memset(dst, 0xff, 16); /* in flight: NaN until the wait */
    pend[sim_cur].push_back(Pending{dst, src, valid});
}

void cp_async_commit(void) {}

void cp_async_wait_all(void) {
    for (const Pending &p : pend[sim_cur]) {
        if (p.valid) memcpy(p.dst, p.src, 16);
        else memset(p.dst, 0, 16);
    }
    pend[sim_cur].clear();
}

static const __nv_bfloat16 *xp[NT];

void ldsm_x4_t(uint32_t r[4], const __nv_bfloat16 *p) {
    int t = sim_cur, w0 = t & ~31, lane = t & 31;
    in_smem(p, 16, "ldmatrix from an address outside shared memory");
    xp[t] = p;
    __syncthreads();
    int g = lane / 4, q = lane % 4; /* matrix i's row j is at lane 8i+j's address; .trans: */
    for (int i = 0; i < 4; i++) {   /* register i = M_i[2q][g] (low half), M_i[2q+1][g] (high) */
        const __nv_bfloat16 *r0 = xp[w0 + 8 * i + 2 * q], *r1 = xp[w0 + 8 * i + 2 * q + 1];
        r[i] = (uint32_t)r0[g].bits | (uint32_t)r1[g].bits << 16;
    }
    __syncthreads();
}

static void entry(void) {
    body();
    done[sim_cur] = 1;
}

/* Run every CTA of a launch, its threads as fibers; smem_bytes is the launch's dynamic
 * shared memory (the rest of the array must stay untouched). */
static void run(SimDim grid, size_t smem_bytes, const std::function<void()> &kernel) {
    if (smem_bytes > SMEM) fail("dynamic shared memory over the simulator's 128 KB");
    body = kernel;
    sim_grid = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                sim_block = SimDim{x, y, z};
                memset(smem, 0xff, SMEM); /* bf16 NaN everywhere: unstaged reads show */
                for (int t = 0; t < NT; t++) {
                    getcontext(&fib[t]);
                    fib[t].uc_stack.ss_sp = &stacks[(size_t)t * STACK];
                    fib[t].uc_stack.ss_size = STACK;
                    fib[t].uc_link = &sched_ctx;
                    makecontext(&fib[t], entry, 0);
                    done[t] = 0;
                    nbar[t] = 0;
                }
                for (;;) { /* one round: every fiber runs to its next collective (or its end) */
                    for (int t = 0; t < NT; t++) {
                        sim_cur = t;
                        swapcontext(&sched_ctx, &fib[t]);
                    }
                    int nd = 0;
                    for (int t = 0; t < NT; t++) {
                        nd += done[t];
                        if (nbar[t] != nbar[0])
                            fail("threads of a block passed different numbers of barriers");
                    }
                    if (nd == NT) break;
                    if (nd) fail("some threads of a block ended while others wait at a barrier");
                }
                for (int t = 0; t < NT; t++)
                    if (!pend[t].empty()) fail("a cp.async was never waited for");
                for (size_t i = smem_bytes; i < SMEM; i++)
                    if (smem[i] != 0xff)
                        fail("a kernel wrote shared memory past its launch's dynamic size");
            }
}

/* ---- the check ------------------------------------------------------------------------- */

enum { GUARD = 64 };
static const uint32_t GUARD_BITS = 0x7fc0dead; /* a NaN with a payload nothing computes */

/* n floats NaN-poisoned, followed by GUARD guard words. */
static float *poisoned(size_t n) {
    float *x = (float *)malloc((n + GUARD) * sizeof(float));
    memset(x, 0xff, n * sizeof(float));
    for (int i = 0; i < GUARD; i++) memcpy(&x[n + i], &GUARD_BITS, 4);
    return x;
}
static void guards_intact(const float *x, size_t n, const char *what) {
    for (int i = 0; i < GUARD; i++)
        if (memcmp(&x[n + i], &GUARD_BITS, 4)) {
            fprintf(stderr, "flash_sim: a kernel wrote past the end of %s\n", what);
            exit(1);
        }
}

static uint64_t rng = 99;
static float urand(void) { return splitmix_unit(&rng); }

/* Words (4 bytes) that n elements of T take. */
template <typename T> static size_t words(size_t n) { return (n * sizeof(T) + 3) / 4; }

/* The kernels' out and dqkv in the operand type OutT ([Note: operand activations] in
 * src/backend/backend.h), widened to fp32. */
template <typename OutT> static std::vector<float> widened(const float *x, size_t n) {
    std::vector<float> w(n);
    for (size_t i = 0; i < n; i++) w[i] = get((const OutT *)x + i);
    return w;
}

/* The flash kernels on B sequences of T, NH query heads and NKV kv heads of hs channels
 * ([Note: grouped-query attention] in src/backend/backend.h: query head h reads kv head
 * h / (NH / NKV)) against the CPU op: the multi-head instantiations at NKV = NH, the GQA
 * ones otherwise, as the launchers choose. With both (NKV = NH only), the GQA
 * instantiations run too, on groups of one, and must give the multi-head kernels' bits. */
template <int HSP, int BQ = dkv_bq<HSP>(), typename OutT = float>
static int check(int B, int T, int NH, int NKV, int hs, bool both = false) {
    const Backend *cpu = backend_cpu();
    int C = NH * hs, N = B * T, G = NH / NKV, W = (NH + 2 * NKV) * hs;
    size_t Q = (size_t)N * W, NC = (size_t)N * C, NL = (size_t)B * NH * T;
    std::vector<float> qkv(Q), dout(NC), ref(NC), dref(Q);
    for (auto &x : qkv) x = 1.5f * urand();
    for (auto &x : dout) x = urand();
    /* qkv and dout as the backend holds them, of the operand type OutT ([Note: operand
     * activations]), and the reference on their values */
    std::vector<OutT> qkv_op(Q), dout_op(NC);
    for (size_t i = 0; i < Q; i++) put(&qkv_op[i], qkv[i]), qkv[i] = get(&qkv_op[i]);
    for (size_t i = 0; i < NC; i++) put(&dout_op[i], dout[i]), dout[i] = get(&dout_op[i]);
    std::vector<float> att(cpu->attention_saved_floats(cpu, B, T, NH)),
        scratch(cpu->scratch_floats(cpu, N, T, C));
    cpu->attention_forward(cpu, ref.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
    cpu->attention_backward(cpu, dref.data(), dout.data(), qkv.data(), ref.data(), att.data(), B, T,
                            NH, NKV, hs, scratch.data());

    float *out = poisoned(words<OutT>(NC)), *lse = poisoned(NL), *dqkv = poisoned(words<OutT>(Q));
    float *D = poisoned(NL);
    OutT *o = (OutT *)out, *dq = (OutT *)dqkv;
    float scale = 1.0f / sqrtf((float)hs), sl2 = FA_LOG2E * scale;
    unsigned nq = (unsigned)((T + FA_BR - 1) / FA_BR), nk = (unsigned)((T + FA_BC - 1) / FA_BC);
    const OutT *pq = qkv_op.data(), *pd = dout_op.data();
    /* the packed bf16 copies ([Note: flash tiling]: [B][NKV][G + 2][T][HSP] and
     * [B][NH][T][HSP]), bf16 NaN first (an element the pack kernel skips shows); 3 blocks:
     * the grid-stride loop goes round */
    size_t nqh = (size_t)B * (NH + 2 * NKV) * T * HSP, ndo = (size_t)B * NH * T * HSP;
    std::vector<bf16> qh(nqh + 8), doh(ndo + 8); /* +8: 16-byte alignment slack */
    auto aligned = [](bf16 *p) { return (bf16 *)(((uintptr_t)p + 15) & ~(uintptr_t)15); };
    bf16 *pqh = aligned(qh.data()), *pdo = aligned(doh.data());
    memset(pqh, 0xff, nqh * sizeof(bf16));
    memset(pdo, 0xff, ndo * sizeof(bf16));
    run(SimDim{3, 1, 1}, 0, [&] { flash_pack<HSP>(pqh, pq, B, T, NKV, G, G + 2, hs, (size_t)W); });
    run(SimDim{3, 1, 1}, 0, [&] { flash_pack<HSP>(pdo, pd, B, T, NH, 1, 1, hs, (size_t)C); });
    SimDim qgrid{nq, (unsigned)NH, (unsigned)B}, kgrid{nk, (unsigned)NKV, (unsigned)B};
    if (G == 1) /* the multi-head kernels */
        run(qgrid, FwdSmem<HSP>::bytes,
            [&] { flash_fwd<HSP, OutT>(o, lse, pqh, T, C, NH, hs, sl2, 1); });
    else
        run(qgrid, FwdSmem<HSP>::bytes,
            [&] { flash_fwd<HSP, OutT, true>(o, lse, pqh, T, C, NH, hs, sl2, G); });
    /* D from the forward's out */
    run(SimDim{2, 1, 1}, 0, [&] { flash_rowdot(D, pd, (const OutT *)o, B, T, NH, hs); });
    if (G == 1) {
        run(qgrid, DqSmem<HSP>::bytes,
            [&] { flash_bwd_dq<HSP, OutT>(dq, D, pdo, pqh, lse, T, C, NH, hs, sl2, scale, 1); });
        run(kgrid, DkvSmem<HSP, BQ>::bytes, [&] {
            flash_bwd_dkv<HSP, BQ, OutT>(dq, D, pdo, pqh, lse, T, C, NH, hs, sl2, scale, 1);
        });
    } else {
        run(qgrid, DqSmem<HSP>::bytes, [&] {
            flash_bwd_dq<HSP, OutT, true>(dq, D, pdo, pqh, lse, T, C, NH, hs, sl2, scale, G);
        });
        run(kgrid, DkvSmem<HSP, BQ>::bytes, [&] {
            flash_bwd_dkv<HSP, BQ, OutT, 1, true>(dq, D, pdo, pqh, lse, T, C, NH, hs, sl2, scale,
                                                  G);
        });
    }
    guards_intact(out, words<OutT>(NC), "out");
    guards_intact(lse, NL, "lse");
    guards_intact(dqkv, words<OutT>(Q), "dqkv");
    guards_intact(D, NL, "D");
    /* the backward v2 ([Note: flash backward v2]) on the same inputs, into fresh poisoned
     * buffers: the prep kernel (dO packed and D), the dq kernel on key tiles of 32, the
     * dkv kernel reading K and V from shared memory, with the launchers' template
     * arguments; it reorders no sum, so it must give v1's bits (doh, D, dqkv) */
    int v2same;
    {
        std::vector<bf16> doh2(ndo + 8);
        bf16 *pdo2 = aligned(doh2.data());
        memset(pdo2, 0xff, ndo * sizeof(bf16));
        float *D2 = poisoned(NL), *dqv2 = poisoned(words<OutT>(Q));
        OutT *dq2v = (OutT *)dqv2;
        run(SimDim{2, 1, 1}, 0,
            [&] { flash_prep<HSP>(pdo2, D2, pd, (const OutT *)o, B, T, NH, hs); });
        if (G == 1) {
            run(qgrid, DqSmem<HSP, FA_BK2>::bytes, [&] {
                flash_bwd_dq<HSP, OutT, false, FA_BK2, dq2_minb<HSP, false>()>(
                    dq2v, D2, pdo2, pqh, lse, T, C, NH, hs, sl2, scale, 1);
            });
            run(kgrid, DkvSmem<HSP, FA_BQ2>::bytes, [&] {
                flash_bwd_dkv<HSP, FA_BQ2, OutT, dkv2_minb<HSP>(), false, true>(
                    dq2v, D2, pdo2, pqh, lse, T, C, NH, hs, sl2, scale, 1);
            });
        } else {
            run(qgrid, DqSmem<HSP, FA_BK2>::bytes, [&] {
                flash_bwd_dq<HSP, OutT, true, FA_BK2, dq2_minb<HSP, true>()>(
                    dq2v, D2, pdo2, pqh, lse, T, C, NH, hs, sl2, scale, G);
            });
            run(kgrid, DkvSmem<HSP, FA_BQ2>::bytes, [&] {
                flash_bwd_dkv<HSP, FA_BQ2, OutT, dkv2_minb<HSP>(), true, true>(
                    dq2v, D2, pdo2, pqh, lse, T, C, NH, hs, sl2, scale, G);
            });
        }
        guards_intact(D2, NL, "D (v2)");
        guards_intact(dqv2, words<OutT>(Q), "dqkv (v2)");
        v2same = !memcmp(pdo2, pdo, ndo * sizeof(bf16)) && !memcmp(D2, D, NL * 4) &&
                 !memcmp(dqv2, dqkv, words<OutT>(Q) * 4);
        if (!v2same) { /* say how far: the v2 dqkv against the CPU op */
            std::vector<float> w = widened<OutT>(dqv2, Q);
            printf("     v2 differs from v1: doh %s, D %s, dqkv %s (rel %.2e against the CPU)\n",
                   memcmp(pdo2, pdo, ndo * sizeof(bf16)) ? "differs" : "same",
                   memcmp(D2, D, NL * 4) ? "differs" : "same",
                   memcmp(dqv2, dqkv, words<OutT>(Q) * 4) ? "differs" : "same",
                   rel_l2(w.data(), dref.data(), Q));
        }
        free(D2);
        free(dqv2);
    }
    int same = 1; /* the GQA instantiations at G = 1: the multi-head kernels' bits */
    if (both && G == 1) {
        float *out2 = poisoned(words<OutT>(NC)), *lse2 = poisoned(NL);
        float *dq2 = poisoned(words<OutT>(Q));
        run(qgrid, FwdSmem<HSP>::bytes, [&] {
            flash_fwd<HSP, OutT, true>((OutT *)out2, lse2, pqh, T, C, NH, hs, sl2, 1);
        });
        run(qgrid, DqSmem<HSP>::bytes, [&] {
            flash_bwd_dq<HSP, OutT, true>((OutT *)dq2, D, pdo, pqh, lse, T, C, NH, hs, sl2, scale,
                                          1);
        });
        run(kgrid, DkvSmem<HSP, BQ>::bytes, [&] {
            flash_bwd_dkv<HSP, BQ, OutT, 1, true>((OutT *)dq2, D, pdo, pqh, lse, T, C, NH, hs, sl2,
                                                  scale, 1);
        });
        guards_intact(out2, words<OutT>(NC), "out (GQA instantiation)");
        guards_intact(dq2, words<OutT>(Q), "dqkv (GQA instantiation)");
        same = !memcmp(out2, out, words<OutT>(NC) * 4) && !memcmp(lse2, lse, NL * 4) &&
               !memcmp(dq2, dqkv, words<OutT>(Q) * 4);
        free(out2);
        free(lse2);
        free(dq2);
    }

    std::vector<float> outw = widened<OutT>(out, NC), dqkvw = widened<OutT>(dqkv, Q);
    double eo = rel_l2(outw.data(), ref.data(), NC), ed = rel_l2(dqkvw.data(), dref.data(), Q);
    double edk = 0; /* d(k) and d(v) alone: the group's sums */
    {
        std::vector<float> a, r;
        for (size_t n = 0; n < (size_t)N; n++)
            for (int c = C; c < W; c++) {
                a.push_back(dqkvw[n * W + c]);
                r.push_back(dref[n * W + c]);
            }
        edk = rel_l2(a.data(), r.data(), a.size());
    }
    double el = 0;
    for (int b = 0; b < B; b++) /* the log-sum-exp against double */
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *qi = &qkv[((size_t)b * T + i) * W + (size_t)h * hs];
                double mx = -INFINITY, sum = 0;
                std::vector<double> sc(i + 1);
                for (int j = 0; j <= i; j++) {
                    const float *kj = &qkv[((size_t)b * T + j) * W + (size_t)(NH + h / G) * hs];
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)qi[d] * kj[d];
                    sc[j] = s / sqrt((double)hs);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= i; j++) sum += exp(sc[j] - mx);
                double e = fabs(lse[((size_t)b * NH + h) * T + i] - (mx + log(sum)));
                el = e == e && e > el ? e : e == e ? el : INFINITY;
            }
    int ok = eo <= 1e-2 && ed <= 1e-2 && edk <= 1e-2 && el <= 2e-2 && eo > 1e-4 && ed > 1e-4 &&
             same && v2same;
    printf("%-4s flash kernels on the host, B=%d T=%d NH=%d NKV=%d hs=%d (template %d): out rel "
           "%.2e, dqkv rel %.2e (dk, dv %.2e), lse max abs %.2e (bounds 1e-2, 1e-2, 2e-2); backward v2: "
           "%s%s%s%s\n",
           ok ? "ok" : "FAIL", B, T, NH, NKV, hs, HSP, eo, ed, edk, el,
           v2same ? "v1's bits" : "DIFFERENT bits",
           BQ != dkv_bq<HSP>() ? " (dkv query step changed)" : "",
           sizeof(OutT) == 2 ? " (bf16 out and dqkv)" : "",
           !both ? "" : same ? "; the GQA kernels at G = 1: the multi-head ones' bits"
                             : "; the GQA kernels at G = 1: DIFFERENT bits");
    free(out);
    free(lse);
    free(dqkv);
    free(D);
    return !ok;
}

/* PPTRAIN_FLASH_BWD's values ([Note: flash backward v2]). */
static int check_modes(void) {
    static const struct {
        const char *env;
        int mode;
    } cases[] = {{NULL, FLASH_BWD_V2}, {"", FLASH_BWD_V2},     {"v2", FLASH_BWD_V2},
                 {"v1", 0},            {"dq", FLASH_BWD_DQ},   {"dkv+prep", 5},
                 {"prep+dq+dkv", 7},   {"dq+dq", -1},          {"dq+", -1},
                 {"+dq", -1},          {"v3", -1},             {"dkvx", -1},
                 {"d", -1},            {"prep+dq+dkv+v1", -1}};
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (flash_bwd_mode(cases[i].env) != cases[i].mode) {
            printf("FAIL flash_bwd_mode(%s) = %d, expected %d\n",
                   cases[i].env ? cases[i].env : "NULL", flash_bwd_mode(cases[i].env),
                   cases[i].mode);
            bad++;
        }
    printf("%-4s PPTRAIN_FLASH_BWD's values (%zu cases)\n", bad ? "FAIL" : "ok",
           sizeof cases / sizeof cases[0]);
    return bad;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int bad = check_modes();
    /* every template, T = 1, under a tile, one tile, one past, two tiles and a bit;
     * head sizes padded (20 -> 32, 48 -> 64, 72 -> 80), B and NH > 1 */
    bad += check<64>(1, 1, 1, 1, 64);
    bad += check<32>(2, 7, 2, 2, 32);
    bad += check<64>(1, 64, 3, 3, 64, true); /* and the GQA kernels at G = 1 */
    bad += check<80>(1, 65, 1, 1, 80);
    bad += check<96>(1, 129, 1, 1, 96, true);
    bad += check<128>(1, 130, 1, 1, 128);
    bad += check<64>(2, 70, 1, 1, 48);
    bad += check<32>(1, 100, 1, 1, 20);
    bad += check<80>(1, 40, 2, 2, 72);
    /* the other query step of the dkv kernel at each size */
    bad += check<64, 32>(1, 130, 2, 2, 64);
    bad += check<128, 64>(1, 70, 1, 1, 128);
    /* bf16 operand activations: out, dqkv, D's read of out */
    bad += check<64, dkv_bq<64>(), bf16>(2, 70, 2, 2, 64);
    bad += check<96, dkv_bq<96>(), bf16>(1, 65, 1, 1, 72);
    /* grouped-query attention: groups of 2 and 3, multi-query (NKV = 1); several groups,
     * B > 1, the sequence over several tiles (the group loop of the dkv kernel crosses a
     * head with the next step's copies in flight), padded head sizes, both dkv query
     * steps (32 is what the launcher runs up to 64 channels), bf16 outputs */
    bad += check<64>(2, 70, 4, 2, 64);                     /* G 2, two kv heads */
    bad += check<32>(1, 100, 6, 2, 20);                    /* G 3 */
    bad += check<64>(1, 130, 4, 1, 48);                    /* MQA, G 4 */
    bad += check<64, 32>(2, 67, 6, 3, 64);                 /* G 2, the launched query step */
    bad += check<32, 32>(1, 129, 3, 1, 32);                /* MQA, G 3 */
    bad += check<80>(1, 40, 3, 1, 80);                     /* MQA at the 80 template */
    bad += check<96>(1, 65, 4, 2, 96);                     /* G 2 at 96 (query steps of 32) */
    bad += check<128>(1, 70, 2, 1, 128);                   /* MQA at 128 */
    bad += check<32>(1, 1, 2, 1, 32);                      /* T = 1 */
    bad += check<64, 32, bf16>(2, 70, 4, 1, 64);           /* MQA, bf16 out and dqkv */
    bad += check<64, dkv_bq<64>(), bf16>(1, 65, 6, 2, 56); /* G 3, bf16 */
    printf("flash_sim: %s\n", bad ? "FAILED" : "every shape within the bounds");
    return bad ? 1 : 0;
}
