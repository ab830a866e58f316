/* backend_cpu.c — the reference backend: GEMMs through OpenBLAS sgemm, everything else
 * in OpenMP loops. Every other backend is tested against these ops. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "backend.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fastmath.h"
#include "optim.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define LN_EPS 1e-5f
#define ATT_BLOCK 64 /* query rows per causal block: skips the masked upper triangle */

int backend_cpu_cpus(void) {
    cpu_set_t set;
    long cpus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
    if (cpus <= 0) cpus = sysconf(_SC_NPROCESSORS_ONLN); /* more CPUs than a cpu_set_t holds */
    return cpus < 1 ? 1 : cpus > INT_MAX ? INT_MAX : (int)cpus;
}

int backend_cpu_set_threads(int n) {
    if (n <= 0) return omp_get_max_threads();
    int cpus = backend_cpu_cpus();
    if (n > cpus) { /* more threads than CPUs only wait on each other */
        pp_warn("runtime.threads is %d, more than the %d CPU(s) this process may run on (its "
                "affinity mask): using %d compute threads",
                n, cpus, cpus);
        n = cpus;
    }
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
}

static void encoder_forward(const Backend *be, void *outp, const int *inp, const float *wte,
                            const float *wpe, int B, int T, int C) {
    float *out = outp; /* the CPU's residual type is fp32 ([Note: residual stream type]) */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *we = wte + (size_t)inp[n] * C;
        float *o = out + (size_t)n * C;
        if (!wpe) { /* no position table */
            memcpy(o, we, (size_t)C * sizeof(float));
            continue;
        }
        const float *pe = wpe + (size_t)(n % T) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

static void encoder_backward(const Backend *be, float *dwte, float *dwpe, const float *dout,
                             const int *inp, int B, int T, int C) {
    /* Threads own disjoint channel ranges, so rows with the same token never race and
     * the summation order (row order) is fixed. */
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)C * id / nt), c1 = (int)((long)C * (id + 1) / nt);
        for (int n = 0; n < B * T; n++) {
            const float *d = dout + (size_t)n * C;
            float *dw = dwte + (size_t)inp[n] * C;
            if (!dwpe) { /* no position table */
                for (int c = c0; c < c1; c++) dw[c] += d[c];
                continue;
            }
            float *dp = dwpe + (size_t)(n % T) * C;
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c];
                dp[c] += d[c];
            }
        }
    }
}

/* The CPU's operand and residual types are fp32 ([Note: operand activations], [Note:
 * residual stream type]): the (operand) and (residual) void * arguments below are float
 * arrays. */

static void layernorm_forward(const Backend *be, void *outp, float *mean, float *rstd,
                              const void *inpp, const float *w, const float *b, int N, int C) {
    float *out = outp;
    const float *inp = inpp;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / C, v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / C + LN_EPS);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* Scratch: per-thread dw/db partial sums of layernorm_backward (rmsnorm_backward's dw
 * takes half), or per-thread blocks of dP in attention_backward, whichever is larger. */
static size_t scratch_floats(const Backend *be, int N, int T, int C) {
    size_t nt = (size_t)omp_get_max_threads(), ln = nt * 2 * C, att = nt * ATT_BLOCK * (size_t)T;
    (void)N;
    return ln > att ? ln : att;
}

/* [Note: split backward] dinp == NULL computes only dw/db, dw == db == NULL only dinp
 * (the I and W halves of a zero-bubble backward). Each output is computed by the same
 * expressions, in the same order, whichever others are asked for: the halves give the
 * bits of the fused call. */
static void to_operand(const Backend *be, void *dst, const float *src, size_t count);

static void layernorm_backward(const Backend *be, float *dinp, void *dinp_op, float *dw, float *db,
                               const void *doutp, const void *inpp, const float *mean,
                               const float *rstd, const float *w, int N, int C, float *scratch) {
    const float *dout = doutp, *inp = inpp;
    int nt = omp_get_max_threads(), weights = dw != NULL;
    float *part = scratch; /* [nt][2][C]: per-thread dw, db */
    if (weights) memset(part, 0, (size_t)nt * 2 * C * sizeof(float));
#pragma omp parallel
    {
        int id = omp_get_thread_num();
        float *pdw = part + (size_t)id * 2 * C, *pdb = pdw + C;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], r = rstd[n], sd = 0.0f, sdx = 0.0f;
            if (weights) {
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    float xhat = (x[c] - m) * r;
                    pdb[c] += d[c];
                    pdw[c] += d[c] * xhat;
                }
            }
            if (!dinp) continue;
            float *dx = dinp + (size_t)n * C;
#pragma omp simd reduction(+ : sd, sdx)
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * r, dn = w[c] * d[c];
                sd += dn;
                sdx += dn * xhat;
            }
            sd /= C;
            sdx /= C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * r, dn = w[c] * d[c];
                dx[c] += r * (dn - sd - xhat * sdx); /* d/dx of (x-m)*rstd, both paths */
            }
        }
    }
    if (dinp && dinp_op) to_operand(be, dinp_op, dinp, (size_t)N * C);
    if (!weights) return;
    for (int t = 0; t < nt; t++) { /* fixed order: deterministic for a thread count */
        const float *pdw = part + (size_t)t * 2 * C, *pdb = pdw + C;
        for (int c = 0; c < C; c++) {
            dw[c] += pdw[c];
            db[c] += pdb[c];
        }
    }
}

/* [Note: RMSNorm] in backend.h: Hugging Face's order of operations, x * rstd, then * w. */
static void rmsnorm_forward(const Backend *be, void *outp, float *rstd, const void *inpp,
                            const float *w, float eps, int N, int C) {
    float *out = outp;
    const float *inp = inpp;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

/* With xhat = x * rstd and dn = w * dout: dw += sum over rows of dout * xhat, and
 * dx += rstd * (dn - xhat * mean(dn * xhat)) (the second term through rstd). Split as
 * layernorm_backward ([Note: split backward]): each output by the same expressions
 * whichever others are asked for. */
static void rmsnorm_backward(const Backend *be, float *dinp, void *dinp_op, float *dw,
                             const void *doutp, const void *inpp, const float *rstd, const float *w,
                             int N, int C, float *scratch) {
    const float *dout = doutp, *inp = inpp;
    int nt = omp_get_max_threads();
    float *part = scratch; /* [nt][C]: per-thread dw */
    if (dw) memset(part, 0, (size_t)nt * C * sizeof(float));
#pragma omp parallel
    {
        float *pdw = part + (size_t)omp_get_thread_num() * C;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float r = rstd[n], sdx = 0.0f;
            if (dw) {
#pragma omp simd
                for (int c = 0; c < C; c++) pdw[c] += d[c] * (x[c] * r);
            }
            if (!dinp) continue;
            float *dx = dinp + (size_t)n * C;
#pragma omp simd reduction(+ : sdx)
            for (int c = 0; c < C; c++) sdx += w[c] * d[c] * (x[c] * r);
            sdx /= C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (w[c] * d[c] - x[c] * r * sdx);
        }
    }
    if (dinp && dinp_op) to_operand(be, dinp_op, dinp, (size_t)N * C);
    if (!dw) return;
    for (int t = 0; t < nt; t++) { /* fixed order: deterministic for a thread count */
        const float *pdw = part + (size_t)t * C;
        for (int c = 0; c < C; c++) dw[c] += pdw[c];
    }
}

static void matmul_forward(const Backend *be, float *out, const void *inpp, const float *w,
                           const float *b, int N, int C, int OC) {
    const float *inp = inpp;
    if (N == 1) /* one row (decoding's step): sgemv; OpenBLAS's sgemm would pack all of w */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, w, C, inp, 1, 0.0f, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f,
                    out, OC);
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
#pragma omp simd
        for (int k = 0; k < OC; k++) o[k] += b[k];
    }
}

static void add_inplace(const Backend *be, float *dst, const float *src, size_t count);

/* matmul_forward, then add_inplace: the two ops' bits. */
static void matmul_residual_forward(const Backend *be, void *out, const void *res, const void *inp,
                                    const float *w, const float *b, int N, int C, int OC) {
    matmul_forward(be, out, inp, w, b, N, C, OC);
    add_inplace(be, out, res, (size_t)N * OC);
}

static void matmul_backward(const Backend *be, float *dinp, float *dw, float *db, const void *doutp,
                            const void *inpp, const float *w, int N, int C, int OC) {
    const float *dout = doutp, *inp = inpp;
    if (dinp) /* dinp[N,C] = dout[N,OC] @ w[OC,C] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    0.0f, dinp, C);
    if (!dw) return; /* [Note: split backward]: the input half only (db needs dw) */
    /* dw[OC,C] += dout^T @ inp */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                1.0f, dw, C);
    if (!db) return;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int k0 = (int)((long)OC * id / nt), k1 = (int)((long)OC * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
#pragma omp simd
            for (int k = k0; k < k1; k++) db[k] += d[k];
        }
    }
}

/* The operand-output matmuls: the operand type is fp32 here, so they are the fp32 ops. */
static void matmul_operand_forward(const Backend *be, void *out, const void *inp, const float *w,
                                   const float *b, int N, int C, int OC) {
    matmul_forward(be, out, inp, w, b, N, C, OC);
}

static void matmul_operand_backward(const Backend *be, void *dinp, float *dw, float *db,
                                    const void *dout, const void *inp, const float *w, int N, int C,
                                    int OC) {
    matmul_backward(be, dinp, dw, db, dout, inp, w, N, C, OC);
}

/* Softmax of row t (columns 0..t) of the scaled scores, in place; columns t+1..end-1
 * are zeroed so a block's P @ V may use whole rows. */
static void causal_softmax_row(float *row, int t, int end) {
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

/* [Note: grouped-query attention] in backend.h. Query head h of sequence b reads kv head
 * h / G (G = NH / NKV query heads a group); with NKV = NH (GPT-2) the calls, and so the
 * bits, are those of multi-head attention with k and v at C and 2C. */
static void attention_forward(const Backend *be, void *outp, float *att, const void *qkvp, int B,
                              int T, int NH, int NKV, int HS) {
    float *out = outp;
    const float *qkv = qkvp;
    int G = NH / NKV, C = NH * HS, ld = (NH + 2 * NKV) * HS;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, kv = h / G;
        const float *base = qkv + (size_t)b * T * ld, *q = base + (size_t)h * HS;
        const float *k = base + (size_t)(NH + kv) * HS, *v = base + (size_t)(NH + NKV + kv) * HS;
        float *P = att + (size_t)bh * T * T, *y = out + (size_t)b * T * C + (size_t)h * HS;
        for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            int m = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, i1 = i0 + m;
            /* S[i0:i1, 0:i1] = scale * Q[i0:i1] @ K[0:i1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, HS, scale,
                        q + (size_t)i0 * ld, ld, k, ld, 0.0f, P + (size_t)i0 * T, T);
            for (int t = i0; t < i1; t++) causal_softmax_row(P + (size_t)t * T, t, i1);
            /* Y[i0:i1] = P[i0:i1, 0:i1] @ V[0:i1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, i1, 1.0f,
                        P + (size_t)i0 * T, T, v, ld, 0.0f, y + (size_t)i0 * C, C);
        }
    }
}

/* One query head's backward, block by block: dq OVERWRITTEN; dk, dv (its kv head's) +=.
 * q, dq, k, dk, v, dv are rows of stride ld; P [T,T] its probabilities, dy rows of stride
 * C; dS a [ATT_BLOCK,T] block of scratch. */
static void attention_head_backward(float *dq, float *dk, float *dv, const float *dy,
                                    const float *q, const float *k, const float *v, const float *P,
                                    float *dS, int T, int HS, int ld, int C, float scale) {
    for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
        int m = T - i0 < ATT_BLOCK ? T - i0 : ATT_BLOCK, i1 = i0 + m;
        const float *Pb = P + (size_t)i0 * T;
        /* dP = dY[i0:i1] @ V[0:i1]^T;  dV[0:i1] += P^T @ dY[i0:i1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, HS, 1.0f, dy + (size_t)i0 * C,
                    C, v, ld, 0.0f, dS, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, HS, m, 1.0f, Pb, T,
                    dy + (size_t)i0 * C, C, 1.0f, dv, ld);
        /* softmax backward: dS = P * (dP - sum_j P dP) * scale, causal part only */
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
        /* dQ[i0:i1] = dS @ K[0:i1];  dK[0:i1] += dS^T @ Q[i0:i1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, i1, 1.0f, dS, T, k, ld, 0.0f,
                    dq + (size_t)i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, HS, m, 1.0f, dS, T,
                    q + (size_t)i0 * ld, ld, 1.0f, dk, ld);
    }
}

/* A task per (sequence, kv head): its group's query heads in order, each over its causal
 * blocks in order, add into the kv head's dk and dv (the fixed order of the contract). */
static void attention_backward(const Backend *be, void *dqkvp, const void *doutp, const void *qkvp,
                               const void *out, const float *att, int B, int T, int NH, int NKV,
                               int HS, float *scratch) {
    float *dqkv = dqkvp;
    const float *dout = doutp, *qkv = qkvp;
    int G = NH / NKV, C = NH * HS, ld = (NH + 2 * NKV) * HS;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel
    {
        float *dS = scratch + (size_t)omp_get_thread_num() * ATT_BLOCK * T; /* a block of dP */
#pragma omp for schedule(dynamic, 1)
        for (int bk = 0; bk < B * NKV; bk++) {
            int b = bk / NKV, kv = bk % NKV;
            size_t base = (size_t)b * T * ld;
            size_t ko = base + (size_t)(NH + kv) * HS, vo = base + (size_t)(NH + NKV + kv) * HS;
            float *dk = dqkv + ko, *dv = dqkv + vo;
            for (int t = 0; t < T; t++) { /* dk, dv accumulate over heads and blocks */
                memset(dk + (size_t)t * ld, 0, HS * sizeof(float));
                memset(dv + (size_t)t * ld, 0, HS * sizeof(float));
            }
            for (int g = 0; g < G; g++) {
                int h = kv * G + g;
                size_t qo = base + (size_t)h * HS, yo = (size_t)b * T * C + (size_t)h * HS;
                attention_head_backward(dqkv + qo, dk, dv, dout + yo, qkv + qo, qkv + ko, qkv + vo,
                                        att + ((size_t)b * NH + h) * T * T, dS, T, HS, ld, C,
                                        scale);
            }
        }
    }
}

/* [Note: RoPE] in backend.h. cs, sn[HS/2] = cos, sin of t * inv_freq[i] (the fp32 product:
 * transformers' freqs), by libm's cosf and sinf. */
static void rope_angles(float *cs, float *sn, const float *inv_freq, int t, int half) {
    for (int i = 0; i < half; i++) {
        float a = (float)t * inv_freq[i];
        cs[i] = cosf(a);
        sn[i] = sinf(a);
    }
}

/* The q and k heads of every sequence's row t, at position pos0 + t, rotated by +a (dir 1)
 * or -a (dir -1, the transpose: the backward). A task per position, so each angle is
 * computed once. */
static void rope_apply(float *qkv, const float *inv_freq, int B, int T, int pos0, int NH, int NKV,
                       int HS, int dir) {
    int half = HS / 2, heads = NH + NKV;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
#pragma omp parallel
    {
        float *cs = pp_malloc(2 * (size_t)(half ? half : 1) * sizeof(float)), *sn = cs + half;
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            rope_angles(cs, sn, inv_freq, pos0 + t, half);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < heads; h++) {
                    float *x = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS, *y = x + half;
                    if (dir > 0) {
#pragma omp simd
                        for (int i = 0; i < half; i++) {
                            float x0 = x[i], x1 = y[i];
                            x[i] = x0 * cs[i] - x1 * sn[i];
                            y[i] = x1 * cs[i] + x0 * sn[i];
                        }
                    } else {
#pragma omp simd
                        for (int i = 0; i < half; i++) {
                            float x0 = x[i], x1 = y[i];
                            x[i] = x0 * cs[i] + x1 * sn[i];
                            y[i] = x1 * cs[i] - x0 * sn[i];
                        }
                    }
                }
        }
        free(cs);
    }
}

static void rope_forward(const Backend *be, void *qkv, const float *inv_freq, int B, int T, int NH,
                         int NKV, int HS) {
    rope_apply(qkv, inv_freq, B, T, 0, NH, NKV, HS, 1);
}

static void rope_backward(const Backend *be, void *dqkv, const float *inv_freq, int B, int T,
                          int NH, int NKV, int HS) {
    rope_apply(dqkv, inv_freq, B, T, 0, NH, NKV, HS, -1);
}

/* [Note: KV cache] in backend.h. */
static void kv_append(const Backend *be, float *kcache, float *vcache, void *qkvp,
                      const float *inv_freq, int pos, int n, int NH, int NKV, int HS, int cap) {
    float *qkv = qkvp;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    if (inv_freq) rope_apply(qkv, inv_freq, 1, n, pos, NH, NKV, HS, 1);
    for (int i = 0; i < n; i++)
        for (int g = 0; g < NKV; g++) {
            size_t to = ((size_t)g * cap + pos + i) * HS;
            const float *k = qkv + i * ld + (size_t)(NH + g) * HS;
            memcpy(kcache + to, k, (size_t)HS * sizeof(float));
            memcpy(vcache + to, k + (size_t)NKV * HS, (size_t)HS * sizeof(float));
        }
}

/* attention_forward's blocks of ATT_BLOCK query rows on the cache: a task per (query head,
 * block), S = scale Q K^T over the block's keys 0..pos+i1-1, each row's causal softmax
 * (row i: columns 0..pos+i), Y = P V. Rows of S are as long as the block's keys, and the
 * scratch of a thread is one block's S, so at pos 0 the calls, and the bits, are
 * attention_forward's. */
static void attention_decode(const Backend *be, void *outp, const void *qkvp, const float *kcache,
                             const float *vcache, int pos, int n, int NH, int NKV, int HS,
                             int cap) {
    float *out = outp;
    const float *qkv = qkvp;
    int G = NH / NKV, C = NH * HS, ld = (NH + 2 * NKV) * HS, nb = (n + ATT_BLOCK - 1) / ATT_BLOCK;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel
    {
        int most = n < ATT_BLOCK ? n : ATT_BLOCK;
        float *S = pp_malloc((size_t)most * (pos + n) * sizeof(float)); /* the last block's */
#pragma omp for schedule(dynamic, 1)
        for (int hb = 0; hb < NH * nb; hb++) {
            int h = hb / nb, i0 = hb % nb * ATT_BLOCK, m = n - i0 < ATT_BLOCK ? n - i0 : ATT_BLOCK;
            int keys = pos + i0 + m;
            const float *k = kcache + (size_t)(h / G) * cap * HS;
            const float *v = vcache + (size_t)(h / G) * cap * HS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, keys, HS, scale,
                        qkv + (size_t)i0 * ld + (size_t)h * HS, ld, k, HS, 0.0f, S, keys);
            for (int r = 0; r < m; r++)
                causal_softmax_row(S + (size_t)r * keys, pos + i0 + r, keys);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, keys, 1.0f, S, keys, v,
                        HS, 0.0f, out + (size_t)i0 * C + (size_t)h * HS, C);
        }
        free(S);
    }
}

static void gelu_forward(const Backend *be, void *outp, const void *inpp, size_t count) {
    float *out = outp;
    const float *inp = inpp;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + pp_tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

/* dinp[i] = gelu_tanh'(inp[i]) * dout[i]; dinp may be dout itself (each element is read
 * before it is written), which matmul_gelu_backward uses. */
static void gelu_backward_into(float *dinp, const float *inp, const float *dout, size_t count) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) {
        float x = inp[i], u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = pp_tanhf(u), sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = g * dout[i];
    }
}

static void gelu_backward(const Backend *be, void *dinp, const void *inp, const float *dout,
                          size_t count) {
    gelu_backward_into(dinp, inp, dout, count);
}

/* [Note: fused GELU]: the two ops one after the other (fp32 operands: the bits of the
 * separate calls). */
static void matmul_gelu_forward(const Backend *be, void *out, void *pre, const void *inp,
                                const float *w, const float *b, int N, int C, int OC) {
    matmul_forward(be, pre, inp, w, b, N, C, OC);
    gelu_forward(be, out, pre, (size_t)N * OC);
}

static void matmul_gelu_backward(const Backend *be, void *dpre, float *dw, float *db,
                                 const void *dout, const void *inp, const float *w,
                                 const void *pre, int N, int C, int OC) {
    matmul_backward(be, dpre, dw, db, dout, inp, w, N, C, OC);
    if (dpre) gelu_backward_into(dpre, pre, dpre, (size_t)N * C);
}

/* [Note: SwiGLU] in backend.h: silu(g) = g / (1 + exp(-g)), then * up. */
static void swiglu_forward(const Backend *be, void *outp, const float *gate, const float *up,
                           size_t count) {
    float *out = outp;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + pp_expf(-g)) * up[i];
    }
}

/* torch's order: d(silu) = (dout * up) * s * (1 + g (1 - s)); d(up) = dout * silu(g). */
static void swiglu_backward(const Backend *be, void *dgatep, void *dupp, const float *gate,
                            const float *up, const float *dout, size_t count) {
    float *dgate = dgatep, *dup = dupp;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) {
        float g = gate[i], e = 1.0f + pp_expf(-g), s = 1.0f / e;
        dgate[i] = dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] = dout[i] * (g / e);
    }
}

static void add_inplace(const Backend *be, float *dst, const float *src, size_t count) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) dst[i] += src[i];
}

static void to_operand(const Backend *be, void *dst, const float *src, size_t count) {
    memcpy(dst, src, count * sizeof(float));
}

/* One row of softmax cross-entropy: returns -log p[target]; with want_grad the row
 * becomes (p - onehot) * dloss, else it holds unnormalized exponentials. */
static float crossentropy_row(float *x, int target, float dloss, int V, int Vp, int want_grad) {
    float mx = -INFINITY, s = 0.0f;
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    float xt = x[target];
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < V; j++) {
        x[j] = pp_expf(x[j] - mx);
        s += x[j];
    }
    if (want_grad) {
        float k = dloss / s;
#pragma omp simd
        for (int j = 0; j < V; j++) x[j] *= k;
        for (int j = V; j < Vp; j++) x[j] = 0.0f;
        x[target] -= dloss;
    }
    return logf(s) - (xt - mx);
}

/* [Note: logits type]: fp32 here, so the head's logits are matmul_forward's. */
static void head_logits(const Backend *be, void *logits, const void *inp, const float *w, int N,
                        int C, int OC) {
    matmul_forward(be, (float *)logits, inp, w, NULL, N, C, OC);
}

static void crossentropy_forward_backward(const Backend *be, void *dlogits, float *losses,
                                          void *logits, const int *targets, float dloss, int N,
                                          int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = (float *)logits + (size_t)n * Vp;
        losses[n] = crossentropy_row(x, targets[n], dloss, V, Vp, 1);
        if (dlogits != logits)
            memcpy((float *)dlogits + (size_t)n * Vp, x, (size_t)Vp * sizeof(float));
    }
}

static void crossentropy_forward(const Backend *be, void *logits, float *losses, const int *targets,
                                 int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        losses[n] = crossentropy_row((float *)logits + (size_t)n * Vp, targets[n], 0.0f, V, Vp, 0);
}

/* ---- memory, reductions, optimizer: host memory, so every entry is synchronous ---- */

static void *cpu_alloc(const Backend *be, size_t bytes) { return pp_malloc(bytes); }
static void cpu_dealloc(const Backend *be, void *p) { free(p); }
static void cpu_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}
static void cpu_zero(const Backend *be, void *dst, size_t bytes) { memset(dst, 0, bytes); }
static void cpu_wait(const Backend *be) {}

static void cpu_sum(const Backend *be, double *out, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *out = s;
}

static void cpu_sumsq(const Backend *be, double *out, const float *x, size_t n) {
    *out = optim_sumsq(x, n);
}

static void cpu_adamw(const Backend *be, float *p, const float *g, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t) {
    optim_adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}

/* [Note: many tensors] in backend.h: the one-tensor entries in turn (their bits). */
static void cpu_sumsq_many(const Backend *be, double *out, const float *const *x, const size_t *n,
                           int count) {
    for (int i = 0; i < count; i++) out[i] = optim_sumsq(x[i], n[i]);
}

static void cpu_adamw_many(const Backend *be, const PPOptTensor *t, int count, float lr,
                           float beta1, float beta2, float eps, float grad_scale, int step) {
    for (int i = 0; i < count; i++)
        optim_adamw_update(t[i].p, t[i].g, t[i].m, t[i].v, t[i].n, lr, beta1, beta2, eps,
                           t[i].weight_decay, grad_scale, step);
}

static void cpu_sgd(const Backend *be, float *p, const float *g, float *buf, size_t n, float lr,
                    float momentum, float weight_decay, float grad_scale, int t) {
    optim_sgd_update(p, g, buf, n, lr, momentum, weight_decay, grad_scale, t);
}

static size_t attention_saved_floats(const Backend *be, int B, int T, int NH) {
    return (size_t)B * NH * T * T; /* the probabilities */
}

static const Backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .dealloc = cpu_dealloc,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .wait = cpu_wait,
    .sum = cpu_sum,
    .sumsq = cpu_sumsq,
    .adamw_update = cpu_adamw,
    .sgd_update = cpu_sgd,
    .sumsq_many = cpu_sumsq_many,
    .adamw_many = cpu_adamw_many,
    .attention_saved_floats = attention_saved_floats,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_residual_forward = matmul_residual_forward,
    .matmul_backward = matmul_backward,
    .matmul_operand_forward = matmul_operand_forward,
    .matmul_operand_backward = matmul_operand_backward,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .kv_append = kv_append,
    .attention_decode = attention_decode,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .matmul_gelu_forward = matmul_gelu_forward,
    .matmul_gelu_backward = matmul_gelu_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .head_logits = head_logits,
    .crossentropy_forward_backward = crossentropy_forward_backward,
    .crossentropy_forward = crossentropy_forward,
    .scratch_floats = scratch_floats,
    .add_inplace = add_inplace,
    .to_operand = to_operand,
    .operand = PP_F32,
    .logits = PP_F32,
    .residual = PP_F32,
};

const Backend *backend_cpu(void) { return &cpu_backend; }
