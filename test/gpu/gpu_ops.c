/* gpu_ops.c — every CUDA backend op against the CPU op (the reference), on fresh random
 * inputs at odd shapes, forward and backward, at each precision (make test-gpu).
 *
 *   gpu_ops [--probe] [--prec fp32|tf32|bf16] [--seed S] [--cpu|--emu] [--small]
 *           [--cudnn skip|only]
 *
 * Exit 0: every check passed; 77: no GPU (the reason on stdout: "skipped: no GPU ...");
 * 1: a check failed (each failure is printed). --probe only opens the backend. --cpu
 * puts the CPU backend (flagged as device memory, backend_cpu_staged) in the GPU's
 * place: this program's own checking then runs on a machine without a GPU, and every
 * check must pass (the ops are the reference's, bit for bit). --emu: as --cpu, but at bf16
 * the CPU posing as the bf16 CUDA backend (test/emu_bf16.h: bf16 operands, logits and
 * residual stream, widened and rounded as the CUDA backend stores them; PPTRAIN_GELU_EPILOGUE
 * and PPTRAIN_RESIDUAL as its switches), so that the bf16 checks' own code (uploads at the
 * operand and residual types, tolerances, poisoning) runs where a GPU is not.
 *
 * Each check draws new inputs, poisons the outputs an op overwrites with NaN (an element
 * the op forgets stays NaN and fails), seeds the outputs it accumulates into (+=) with
 * random values on both devices, and compares ||gpu - cpu|| / ||cpu|| over the output
 * with a tolerance per kind of op and precision (../shared/GPU.md): elementwise fp32
 * 1e-5; reductions 1e-4; GEMM-based ops 1e-4 (fp32), 2e-3 (tf32), 1.5e-2 (bf16). A NaN
 * never passes. The ops that promise determinism run twice and must give the same bits.
 * [Note: operand activations]: where gpu->operand is bf16, an operand input goes to the
 * GPU in bf16 and the CPU reads the same bf16-rounded values (in fp32), so a comparison
 * measures the op and not the rounding of its inputs; an operand output is poisoned with
 * a bf16 NaN, read back in bf16, widened, and compared within at least TOL_BF16_STORE.
 * to_operand must give the host's own rounding bit for bit (a bitwise copy in fp32).
 * [Note: residual stream type]: where gpu->residual is bf16 (the default at bf16), the
 * residual stream's tensors (the encoder's output, the norms' input, the residual GEMM's res
 * and out, the head's input) are handled as operands are; PPTRAIN_RESIDUAL=fp32 runs those
 * ops again with an fp32 residual.
 * --small: the two smallest shapes and the flash shapes with T <= 129 only (every kernel,
 * template and tile edge still runs), for compute-sanitizer (scripts/gpu/second-call).
 * The fused GEMM ops ([Note: GEMM epilogues] in cuda/backend_cuda.cu) run again with their
 * switches off (PPTRAIN_FUSE_GELU=0, PPTRAIN_FUSE_RESIDUAL=0, PPTRAIN_FUSE_BGRAD=0,
 * PPTRAIN_FUSE_CAST=0: the unfused paths).
 * The head of src/model/model.c runs on the GPU with its logits in row chunks (all, 1, 7 rows:
 * [Note: chunked head]) against the CPU's unchunked head. The norms' backward runs its
 * one-pass kernel's edges, then again under PPTRAIN_LN_BWD=one-pass:32 and =two-pass (the
 * kernels of before): [Note: one-pass norm backward] in cuda/norm_kernels.cuh.
 * --cudnn skip|only: without cuDNN's attention checks, or only them (check_cudnn). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/backend_load.h"
#include "config.h"
#include "model/model.h"
#include "../emu_bf16.h" /* --emu */

static const Backend *cpu, *gpu;
static int failures, checks;
static uint64_t rng;
static const char *prec = "fp32";

static double urand(void) { /* splitmix64 -> [0, 1) */
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static float *rnd(size_t n, float scale) { /* fresh values in [-scale, scale) */
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((2 * urand() - 1) * scale);
    return x;
}

static float *nanbuf(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    memset(x, 0xff, (n ? n : 1) * sizeof(float)); /* all-ones bits: a NaN */
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* A device copy of host x. */
static void *dev(const void *x, size_t bytes) {
    void *d = gpu->alloc(gpu, bytes ? bytes : 4);
    if (bytes && x) gpu->to_device(gpu, d, x, bytes);
    return d;
}

/* Release n device buffers. */
static void free_all(void **p, size_t n) {
    for (size_t i = 0; i < n; i++) gpu->dealloc(gpu, p[i]);
}

/* The device buffer's contents (the host copy is malloc'd). */
static float *host(const void *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    gpu->to_host(gpu, h, d, n * sizeof(float));
    gpu->wait(gpu);
    return h;
}

/* Record one comparison: relative L2 error of got against want over n floats. */
static void compare(const char *op, const char *what, const char *shape, const float *got,
                    const float *want, size_t n, double tol) {
    double num = 0, den = 0;
    size_t bad_nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i])) bad_nan++;
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = !bad_nan && !isnan(rel) && rel <= tol;
    checks++;
    if (!ok) failures++;
    printf("%-4s %-28s %-10s %-34s %-5s rel %.2e  tol %.0e%s\n", ok ? "ok" : "FAIL", op, what,
           shape, prec, rel, tol, bad_nan ? "  (NaN: an element not written)" : "");
}

/* Record one bitwise comparison of n floats. (An operand output compared here was widened
 * by host_op; widening bf16 is exact and one-to-one, so equal widened bits are equal
 * stored bits: the n * 2 bytes the op wrote.) */
static void same_bits(const char *op, const char *shape, const float *a, const float *b, size_t n) {
    checks++;
    int ok = memcmp(a, b, n * sizeof(float)) == 0;
    if (!ok) failures++;
    printf("%-4s %-28s %-10s %-34s %-5s %s\n", ok ? "ok" : "FAIL", op, "bits", shape, prec,
           ok ? "bitwise equal" : "DIFFER");
}

/* Record a check that counts the wrong elements of `of`: any fails. */
static void none_wrong(const char *op, const char *shape, size_t wrong, size_t of) {
    checks++;
    failures += wrong != 0;
    printf("%-4s %-28s %-10s %-34s %-5s %zu of %zu wrong\n", wrong ? "FAIL" : "ok", op, "bits",
           shape, prec, wrong, of);
}

/* Tolerances (GPU.md): elementwise, reductions, and ops built on GEMMs at this precision. */
#define TOL_ELEM 1e-5
#define TOL_RED 1e-4
static double tol_gemm(void) {
    return !strcmp(prec, "bf16") ? 1.5e-2 : !strcmp(prec, "tf32") ? 2e-3 : 1e-4;
}

/* ---- operand tensors ([Note: operand activations] in src/backend/backend.h) --------------
 * bf16 is the upper 16 bits of the fp32 pattern after rounding to nearest even. An
 * output stored in bf16 carries up to 2^-8 (3.9e-3) relative rounding error per element
 * (8 significant bits), so its relative L2 error against the CPU's fp32 output can
 * reach that however exact the op: such outputs are compared within TOL_BF16_STORE at
 * least (the rounding bound plus the fp32 op's own 1e-5 to 1e-4). fp32 outputs keep the
 * op's tolerance. */
#define TOL_BF16_STORE 4e-3

static int op_bf16(void) { return gpu->operand == PP_BF16; }

static uint16_t bf16_round(float f) { /* round to nearest even; a NaN stays a (quiet) NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

static float bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The tolerance of an operand output for an op whose fp32 tolerance is tol. */
static double tol_op(double tol) {
    return op_bf16() && tol < TOL_BF16_STORE ? TOL_BF16_STORE : tol;
}

/* Round x[0..n) in place to the values the GPU's operand type holds (nothing in fp32), so
 * that the CPU reference reads what the GPU op reads. */
static void op_round(float *x, size_t n) {
    if (op_bf16())
        for (size_t i = 0; i < n; i++) x[i] = bf16_widen(bf16_round(x[i]));
}

/* A device operand tensor of n elements holding x (NULL: contents undefined). */
static void *dev_op(const float *x, size_t n) {
    if (!op_bf16()) return dev(x, n * sizeof(float));
    void *d = gpu->alloc(gpu, n ? n * 2 : 4);
    if (n && x) {
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = bf16_round(x[i]);
        gpu->to_device(gpu, d, h, n * 2);
        gpu->wait(gpu); /* h must outlive the copy */
        free(h);
    }
    return d;
}

/* A device fp32 tensor of n NaNs (all-ones bits, as nanbuf). */
static void *dev_nan_f32(size_t n) {
    float *x = nanbuf(n);
    void *d = dev(x, n * sizeof(float));
    gpu->wait(gpu);
    free(x);
    return d;
}

/* A device operand tensor of n NaNs: all-ones bits in fp32 (as nanbuf), 0x7FC0 in bf16. */
static void *dev_op_nan(size_t n) {
    if (!op_bf16()) return dev_nan_f32(n);
    uint16_t *h = malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) h[i] = 0x7FC0;
    void *d = gpu->alloc(gpu, n ? n * 2 : 4);
    if (n) gpu->to_device(gpu, d, h, n * 2);
    gpu->wait(gpu);
    free(h);
    return d;
}

/* n elements of be's operand type at device p, widened to fp32 (malloc'd). */
static float *fetch_op(const Backend *be, const void *p, size_t n) {
    if (be->operand != PP_BF16) {
        float *h = malloc((n ? n : 1) * sizeof(float));
        be->to_host(be, h, p, n * sizeof(float));
        be->wait(be);
        return h;
    }
    uint16_t *h = malloc((n ? n : 1) * 2);
    be->to_host(be, h, p, n * 2);
    be->wait(be);
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = bf16_widen(h[i]);
    free(h);
    return x;
}

/* The device operand tensor's n elements, widened to fp32 (malloc'd). */
static float *host_op(const void *d, size_t n) { return fetch_op(gpu, d, n); }

/* The residual stream's type ([Note: residual stream type] in src/backend/backend.h): fp32, or
 * the operand type (bf16) by default at bf16; the helpers of its tensors, as the operand's. */
static int res_bf16(void) { return gpu->residual == PP_BF16; }
static double tol_res(double tol) {
    return res_bf16() && tol < TOL_BF16_STORE ? TOL_BF16_STORE : tol;
}
static void res_round(float *x, size_t n) {
    if (res_bf16()) op_round(x, n); /* a bf16 residual comes with bf16 operands */
}
static void *dev_res(const float *x, size_t n) {
    return res_bf16() ? dev_op(x, n) : dev(x, n * sizeof(float));
}
static void *dev_res_nan(size_t n) { return res_bf16() ? dev_op_nan(n) : dev_nan_f32(n); }
static float *host_res(const void *d, size_t n) { return res_bf16() ? host_op(d, n) : host(d, n); }

/* Element i of device operand tensor d. */
static void *op_at(void *d, size_t i) { return (char *)d + i * pp_dtype_bytes(gpu->operand); }

/* ---- memory, reductions, optimizer ---------------------------------------------------- */

static void check_memory(size_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    float *x = rnd(n, 3), *d = dev(x, n * 4), *d2 = gpu->alloc(gpu, n * 4 + 4);
    gpu->copy(gpu, d2, d, n * 4);
    float *back = host(d2, n);
    same_bits("to_device/copy/to_host", shape, back, x, n);
    gpu->zero(gpu, d2, n * 4);
    float *z = host(d2, n), *zero = calloc(n ? n : 1, 4);
    same_bits("zero", shape, z, zero, n);
    double *s = gpu->alloc(gpu, 2 * sizeof(double)), hs[2], hs2[2], ref[2];
    gpu->sum(gpu, &s[0], d, n);
    gpu->sumsq(gpu, &s[1], d, n);
    gpu->to_host(gpu, hs, s, sizeof hs);
    gpu->wait(gpu);
    gpu->sum(gpu, &s[0], d, n);
    gpu->sumsq(gpu, &s[1], d, n);
    gpu->to_host(gpu, hs2, s, sizeof hs2);
    gpu->wait(gpu);
    cpu->sum(cpu, &ref[0], x, n);
    cpu->sumsq(cpu, &ref[1], x, n);
    double e0 = fabs(hs[0] - ref[0]) / (fabs(ref[0]) + 1e-30);
    double e1 = fabs(hs[1] - ref[1]) / (fabs(ref[1]) + 1e-30);
    checks++;
    int ok = e0 < 1e-9 * sqrt((double)n + 1) && e1 < 1e-12 && !isnan(hs[0]) && !isnan(hs[1]);
    failures += !ok;
    printf("%-4s %-28s %-10s %-34s %-5s rel %.2e / %.2e (double)\n", ok ? "ok" : "FAIL",
           "sum, sumsq", "value", shape, prec, e0, e1);
    same_bits("sum, sumsq", shape, (float *)hs, (float *)hs2, 4);
    gpu->dealloc(gpu, d);
    gpu->dealloc(gpu, d2);
    gpu->dealloc(gpu, s);
    free(x);
    free(back);
    free(z);
    free(zero);
}

/* to_operand on n random values led by the cases rounding gets wrong (ties to even, carries
 * into the exponent, overflow to infinity, subnormals, NaNs that naive rounding turns into
 * infinity or zero): in bf16 the host's rounding bit for bit (a NaN only needs to stay a
 * NaN: its payload is free), in fp32 the CPU op's bits (a copy); every element wrong is
 * counted. The output is poisoned first. */
static void check_to_operand(size_t n) {
    static const uint32_t special[] = {
        0x00000000, 0x80000000, 0x3F800000, 0x3F808000, 0x3F818000, 0xBF808000,
        0x3F808001, 0x3F807FFF, 0x3FFF8000, 0x7F7FFFFF, 0x7F7F7FFF, 0xFF7FFFFF,
        0x7F800000, 0xFF800000, 0x00000001, 0x00008000, 0x00018000, 0x0000C000,
        0x807FFFFF, 0x7FC00000, 0x7F800001, 0xFFFFFFFF,
    };
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    float *x = rnd(n, 3);
    for (size_t i = 0; i < n && i < sizeof special / sizeof special[0]; i++)
        memcpy(&x[i], &special[i], 4);
    size_t ob = pp_dtype_bytes(gpu->operand);
    void *dx = dev(x, n * sizeof(float)), *dy = dev_op_nan(n);
    gpu->to_operand(gpu, dy, dx, n);
    unsigned char *got = malloc(n ? n * ob : 1), *want = malloc(n ? n * ob : 1);
    gpu->to_host(gpu, got, dy, n * ob);
    gpu->wait(gpu);
    if (op_bf16())
        for (size_t i = 0; i < n; i++) ((uint16_t *)want)[i] = bf16_round(x[i]);
    else
        cpu->to_operand(cpu, want, x, n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        if (!op_bf16()) {
            wrong += memcmp(got + 4 * i, want + 4 * i, 4) != 0;
            continue;
        }
        uint16_t g = ((uint16_t *)got)[i], w = ((uint16_t *)want)[i];
        wrong += isnan(x[i]) ? !isnan(bf16_widen(g)) : g != w;
    }
    checks++;
    failures += wrong != 0;
    printf("%-4s %-28s %-10s %-34s %-5s %s %zu of %zu elements wrong\n", wrong ? "FAIL" : "ok",
           "to_operand", "bits", shape, prec,
           op_bf16() ? "bf16 (rounded to nearest even)" : "fp32 (a copy)", wrong, n);
    gpu->dealloc(gpu, dx);
    gpu->dealloc(gpu, dy);
    free(x);
    free(got);
    free(want);
}

static void check_optimizer(size_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    /* adamw t=3; sgd momentum t=1 and t=2; sgd plain */
    for (int variant = 0; variant < 3; variant++) {
        float *p = rnd(n, 1), *g = rnd(n, 1), *m = rnd(n, 0.1f), *v = rnd(n, 0.01f);
        for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
        float *dp = dev(p, n * 4), *dg = dev(g, n * 4), *dm = dev(m, n * 4), *dv = dev(v, n * 4);
        const char *name;
        if (variant == 0) {
            name = "adamw_update t=3";
            gpu->adamw_update(gpu, dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
            cpu->adamw_update(cpu, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3);
        } else if (variant == 1) {
            name = "sgd_update momentum t=1,2";
            gpu->sgd_update(gpu, dp, dg, dm, n, 1e-2f, 0.9f, 0.01f, 1.0f, 1);
            cpu->sgd_update(cpu, p, g, m, n, 1e-2f, 0.9f, 0.01f, 1.0f, 1);
            gpu->sgd_update(gpu, dp, dg, dm, n, 1e-2f, 0.9f, 0.01f, 0.5f, 2);
            cpu->sgd_update(cpu, p, g, m, n, 1e-2f, 0.9f, 0.01f, 0.5f, 2);
        } else {
            name = "sgd_update no momentum";
            gpu->sgd_update(gpu, dp, dg, NULL, n, 1e-2f, 0.0f, 0.01f, 1.0f, 4);
            cpu->sgd_update(cpu, p, g, NULL, n, 1e-2f, 0.0f, 0.01f, 1.0f, 4);
        }
        float *hp = host(dp, n), *hm = host(dm, n);
        compare(name, "params", shape, hp, p, n, TOL_ELEM);
        if (variant < 2) compare(name, "state m", shape, hm, m, n, TOL_ELEM);
        if (variant == 0) {
            float *hv = host(dv, n);
            compare(name, "state v", shape, hv, v, n, TOL_ELEM);
            free(hv);
        }
        gpu->dealloc(gpu, dp);
        gpu->dealloc(gpu, dg);
        gpu->dealloc(gpu, dm);
        gpu->dealloc(gpu, dv);
        free(p);
        free(g);
        free(m);
        free(v);
        free(hp);
        free(hm);
    }
}

/* [Note: many tensors] (src/backend/backend.h): sumsq_many and adamw_many over 70 tensors
 * (two launches on the GPU, 64 a launch) of 0 to 70001 elements with gaps between them and
 * two weight decays: the bits of sumsq and adamw_update on each tensor alone, the gaps
 * untouched, and the CPU's values within the ops' tolerances. */
static void check_many(void) {
    enum { K = 70 };
    static const size_t sizes[] = {768, 1, 0, 3, 2304, 70001, 767, 4099};
    size_t n[K], off[K + 1];
    off[0] = 0;
    for (int i = 0; i < K; i++) {
        n[i] = sizes[i % 8];
        off[i + 1] = off[i] + n[i] + (size_t)(i % 3); /* a gap of 0-2 floats */
    }
    size_t tot = off[K];
    const char *sh = "70 tensors";
    float *p = rnd(tot, 1), *g = rnd(tot, 1), *m = rnd(tot, 0.1f), *v = rnd(tot, 0.01f);
    for (size_t i = 0; i < tot; i++) v[i] = fabsf(v[i]);
    float *d[2][4]; /* [the many-tensor entry, the one-tensor one][p, g, m, v] */
    const float *init[4] = {p, g, m, v};
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4; k++) d[r][k] = dev(init[k], tot * 4);
    PPOptTensor t[K], tc[K];
    const float *x[K], *xc[K];
    float *cp = dup(p, tot), *cm = dup(m, tot), *cv = dup(v, tot);
    for (int i = 0; i < K; i++) {
        size_t o = off[i];
        float wd = i % 2 ? 0.1f : 0.0f;
        t[i] = (PPOptTensor){d[0][0] + o, d[0][1] + o, d[0][2] + o, d[0][3] + o, n[i], wd};
        tc[i] = (PPOptTensor){cp + o, g + o, cm + o, cv + o, n[i], wd};
        x[i] = d[0][1] + o;
        xc[i] = g + o;
    }
    double *s1 = gpu->alloc(gpu, K * sizeof(double)), *s2 = gpu->alloc(gpu, K * sizeof(double));
    double h1[K], h2[K], ref[K];
    gpu->sumsq_many(gpu, s1, x, n, K);
    for (int i = 0; i < K; i++) gpu->sumsq(gpu, s2 + i, d[1][1] + off[i], n[i]);
    gpu->to_host(gpu, h1, s1, sizeof h1);
    gpu->to_host(gpu, h2, s2, sizeof h2);
    gpu->wait(gpu);
    cpu->sumsq_many(cpu, ref, xc, n, K);
    same_bits("sumsq_many=sumsq", sh, (const float *)h1, (const float *)h2, 2 * K);
    size_t off_ref = 0;
    for (int i = 0; i < K; i++) off_ref += !(fabs(h1[i] - ref[i]) <= 1e-12 * fabs(ref[i]));
    none_wrong("sumsq_many against the CPU (rel 1e-12)", sh, off_ref, K);
    gpu->adamw_many(gpu, t, K, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.7f, 3);
    for (int i = 0; i < K; i++)
        gpu->adamw_update(gpu, d[1][0] + off[i], d[1][1] + off[i], d[1][2] + off[i],
                          d[1][3] + off[i], n[i], 1e-3f, 0.9f, 0.95f, 1e-8f, t[i].weight_decay,
                          0.7f, 3);
    cpu->adamw_many(cpu, tc, K, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.7f, 3);
    const char *what[4] = {"adamw_many=adamw_update p", "", "adamw_many=adamw_update m",
                           "adamw_many=adamw_update v"};
    float *want[4] = {cp, g, cm, cv};
    for (int k = 0; k < 4; k++) {
        if (k == 1) continue;
        float *a = host(d[0][k], tot), *b = host(d[1][k], tot);
        same_bits(what[k], sh, a, b, tot);
        compare("adamw_many",
                k == 0   ? "params"
                : k == 2 ? "state m"
                         : "state v",
                sh, a, want[k], tot, TOL_ELEM);
        size_t moved = 0; /* the gaps between the tensors keep their values */
        for (int i = 0; i < K; i++)
            for (size_t j = off[i] + n[i]; j < off[i + 1]; j++)
                moved += memcmp(&a[j], &init[k][j], 4) != 0;
        none_wrong("adamw_many leaves the gaps", sh, moved, tot);
        free(a);
        free(b);
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4; k++) gpu->dealloc(gpu, d[r][k]);
    gpu->dealloc(gpu, s1);
    gpu->dealloc(gpu, s2);
    float *fr[] = {p, g, m, v, cp, cm, cv};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* [Note: kept weight copy] (cuda/backend_cuda.cu): K weights [oc[i], C] at w + off[i] in one
 * held buffer, an input x [N,C] (operand) and the weights' optimizer state, for
 * check_kept_copy. */
enum { KW = 5 };
typedef struct {
    int N, C, oc[KW];
    size_t off[KW + 1];
    float *w, *g, *m, *v; /* device */
    void *x;
    PPOptTensor t[KW];
} Kept;

/* The bits of matmul_forward(x) on the first k weights (the last one's first rows rows only
 * when rows > 0), held as weight_hold(w, n, kept) holds them: out[i], [N, OC] each (malloc'd). */
static void held_matmuls(const Kept *q, float **out, size_t n, int kept, int k, int rows) {
    gpu->weight_hold(gpu, q->w, n, kept);
    for (int i = 0; i < k; i++) {
        int oc = i == k - 1 && rows > 0 ? rows : q->oc[i];
        float *d = dev_nan_f32((size_t)q->N * oc);
        gpu->matmul_forward(gpu, d, q->x, q->w + q->off[i], NULL, q->N, q->C, oc);
        out[i] = host(d, (size_t)q->N * oc);
        gpu->dealloc(gpu, d);
    }
    gpu->weight_hold(gpu, NULL, 0, 0);
}

/* Hold n floats of the weights, run `write` (0: adamw_many over all K tensors, 1: to_device
 * inside weight 3, 2: zero inside weight 1, 3: copy weight 2's start over weight 4's, 4: the
 * one-tensor adamw_update on weight 0, 5: sgd_update on weight 3), then the matmuls under a
 * hold with kept must give the bits of a new hold (the copy kept current, or dropped), and
 * differ from those before the write (so that a stale copy would show). k weights are
 * multiplied (the last, rows rows of it when rows > 0). */
static void kept_after(Kept *q, int write, size_t n, int k, int rows, const char *what) {
    float *before[KW], *kept[KW], *fresh[KW], *nv = rnd(100, 1);
    held_matmuls(q, before, n, 0, k, rows);
    switch (write) {
    case 0: gpu->adamw_many(gpu, q->t, KW, 5e-2f, 0.9f, 0.95f, 1e-8f, 1.0f, 3); break;
    case 1: gpu->to_device(gpu, q->w + q->off[3] + 50, nv, 100 * sizeof(float)); break;
    case 2: gpu->zero(gpu, q->w + q->off[1] + 7, 200 * sizeof(float)); break;
    case 3: gpu->copy(gpu, q->w + q->off[4], q->w + q->off[2], 300 * sizeof(float)); break;
    case 4:
        gpu->adamw_update(gpu, q->t[0].p, q->t[0].g, q->t[0].m, q->t[0].v, q->t[0].n, 5e-2f, 0.9f,
                          0.95f, 1e-8f, 0.1f, 1.0f, 4);
        break;
    default: gpu->sgd_update(gpu, q->t[3].p, q->t[3].g, NULL, q->t[3].n, 5e-2f, 0, 0, 1, 1);
    }
    gpu->wait(gpu); /* nv */
    held_matmuls(q, kept, n, 1, k, rows);
    held_matmuls(q, fresh, n, 0, k, rows);
    size_t differ = 0, moved = 0;
    for (int i = 0; i < k; i++) {
        size_t b = (size_t)q->N * (i == k - 1 && rows > 0 ? rows : q->oc[i]) * sizeof(float);
        differ += memcmp(kept[i], fresh[i], b) != 0;
        moved += memcmp(fresh[i], before[i], b) != 0;
        free(before[i]), free(kept[i]), free(fresh[i]);
    }
    char sh[48];
    snprintf(sh, sizeof sh, "%d weights", k);
    none_wrong(what, sh, differ, (size_t)k);
    int want = write == 0 ? k : 1; /* adamw_many moves all; the others one weight */
    checks++;
    failures += (int)moved != want;
    printf("%-4s %-28s %-10s %-34s %-5s %zu of %d weights moved (want %d)\n",
           (int)moved == want ? "ok" : "FAIL", what, "moved", sh, prec, moved, k, want);
    free(nv);
}

/* [Note: kept weight copy] (cuda/backend_cuda.cu): weights held with kept after adamw_many
 * updated them give the matmuls of a new hold bit for bit; so do they after each other
 * writer inside them (to_device, zero, copy, adamw_update, sgd_update: each drops the copy),
 * and after an adamw_many whose last tensor lies partly outside the held floats (it drops
 * the copy: that weight's held rows are multiplied too). 5 weights with gaps between them,
 * a learning rate that moves their bf16 values; each write must change the matmuls of the
 * weights it writes, so that a stale copy would fail. The CPU holds nothing, nor does a GPU
 * at fp32 or tf32 (its hold converts nothing): skipped. */
static void check_kept_copy(void) {
    if (!gpu->weight_hold || strcmp(prec, "bf16")) { /* a hold converts at bf16 only */
        printf("skip kept weight copy: no weights held here (%s, %s)\n", gpu->name, prec);
        return;
    }
    static const int oc[KW] = {96, 64, 8, 128, 40};
    Kept q = {.N = 7, .C = 64};
    memcpy(q.oc, oc, sizeof oc);
    q.off[0] = 0;
    /* gaps of 0, 8 and 16 floats: each weight's bf16 copy 16-byte aligned, as a GEMM's */
    for (int i = 0; i < KW; i++)
        q.off[i + 1] = q.off[i] + (size_t)oc[i] * q.C + (size_t)(i % 3) * 8;
    size_t tot = q.off[KW];
    float *p = rnd(tot, 1), *g = rnd(tot, 1), *m = rnd(tot, 0.1f), *v = rnd(tot, 0.01f);
    for (size_t i = 0; i < tot; i++) v[i] = fabsf(v[i]);
    float *x = rnd((size_t)q.N * q.C, 1);
    q.w = dev(p, tot * 4), q.g = dev(g, tot * 4), q.m = dev(m, tot * 4), q.v = dev(v, tot * 4);
    q.x = dev_op(x, (size_t)q.N * q.C);
    for (int i = 0; i < KW; i++)
        q.t[i] = (PPOptTensor){.p = q.w + q.off[i],
                               .g = q.g + q.off[i],
                               .m = q.m + q.off[i],
                               .v = q.v + q.off[i],
                               .n = (size_t)oc[i] * q.C,
                               .weight_decay = i % 2 ? 0.1f : 0.0f};
    static const char *what[6] = {"kept copy: adamw_many",   "kept copy: to_device",
                                  "kept copy: zero",         "kept copy: copy",
                                  "kept copy: adamw_update", "kept copy: sgd_update"};
    for (int w = 0; w < 6; w++) kept_after(&q, w, tot, KW, 0, what[w]);
    /* held without the last weight's last row */
    kept_after(&q, 0, q.off[KW - 1] + (size_t)(oc[KW - 1] - 1) * q.C, KW, oc[KW - 1] - 1,
               "kept copy: a tensor half in");
    gpu->dealloc(gpu, q.w);
    gpu->dealloc(gpu, q.g);
    gpu->dealloc(gpu, q.m);
    gpu->dealloc(gpu, q.v);
    gpu->dealloc(gpu, q.x);
    float *fr[] = {p, g, m, v, x};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* [Note: kept weight copy]: a dealloc drops the copy of the weights it frees, so new weights
 * at the same address (cudaMalloc hands a freed block of the same size back) are converted
 * anew by a hold with kept. The new weights are written by matmul_forward, as its output:
 * the one kind of write that does not drop the copy itself, so that only the dealloc's
 * drop stands between that hold and a stale copy. Where the allocator gives another
 * address the check cannot tell, and says so instead of passing. */
static void check_kept_dealloc(void) {
    if (!gpu->weight_hold || strcmp(prec, "bf16")) { /* a hold converts at bf16 only */
        printf("skip kept copy after dealloc: no weights held here (%s, %s)\n", gpu->name, prec);
        return;
    }
    enum { N = 7, C = 64, OC = 96, K = 32 };
    size_t n = (size_t)OC * C;
    float *w0 = rnd(n, 1), *x = rnd((size_t)N * C, 1), *xa = rnd((size_t)OC * K, 1);
    float *wb = rnd((size_t)C * K, 1);
    op_round(x, (size_t)N * C);
    op_round(xa, (size_t)OC * K);
    void *dx = dev_op(x, (size_t)N * C), *dxa = dev_op(xa, (size_t)OC * K);
    float *dwb = dev(wb, (size_t)C * K * 4), *dw = dev(w0, n * 4), *out[3];
    for (int r = 0; r < 3; r++) {
        if (r == 1) { /* free the held weights, take new ones, write them as an op's output */
            float *old = dw;
            gpu->dealloc(gpu, dw);
            dw = gpu->alloc(gpu, n * 4);
            if (dw != old) {
                printf("skip kept copy after dealloc: the allocator gave another address (%p, "
                       "was %p): nothing to tell\n",
                       (void *)dw, (void *)old);
                free(out[0]);
                goto done;
            }
            gpu->matmul_forward(gpu, dw, dxa, dwb, NULL, OC, K, C); /* [OC, C] */
        }
        gpu->weight_hold(gpu, dw, n, r == 1); /* r 1: with kept, r 0 and 2: a new copy */
        float *d = dev_nan_f32((size_t)N * OC);
        gpu->matmul_forward(gpu, d, dx, dw, NULL, N, C, OC);
        out[r] = host(d, (size_t)N * OC);
        gpu->dealloc(gpu, d);
        gpu->weight_hold(gpu, NULL, 0, 0);
    }
    {
        size_t b = (size_t)N * OC * sizeof(float);
        none_wrong("kept copy: dealloc", "new weights at the old address",
                   (size_t)(memcmp(out[1], out[2], b) != 0), 1);
        none_wrong("kept copy: dealloc", "the new weights differ",
                   (size_t)(memcmp(out[0], out[2], b) == 0), 1);
        for (int r = 0; r < 3; r++) free(out[r]);
    }
done:
    gpu->dealloc(gpu, dw);
    gpu->dealloc(gpu, dx);
    gpu->dealloc(gpu, dxa);
    gpu->dealloc(gpu, dwb);
    free(w0), free(x), free(xa), free(wb);
}

/* ---- layer ops at one shape ------------------------------------------------------------ */

typedef struct {
    int B, T, C, NH, V, Vp;
} Shape;

static void check_encoder(const Shape *s, const char *sh) {
    int N = s->B * s->T, C = s->C, V = s->V;
    int *tok = malloc(N * sizeof(int));
    /* few distinct: long chains */
    for (int i = 0; i < N; i++) tok[i] = (int)(urand() * (V < 7 ? V : 7));
    float *wte = rnd((size_t)s->Vp * C, 1), *wpe = rnd((size_t)s->T * C, 1);
    float *out = nanbuf((size_t)N * C);
    int *dtok = dev(tok, N * sizeof(int));
    float *dwte = dev(wte, (size_t)s->Vp * C * 4), *dwpe = dev(wpe, (size_t)s->T * C * 4);
    void *dout = dev_res_nan((size_t)N * C); /* the residual stream */
    gpu->encoder_forward(gpu, dout, dtok, dwte, dwpe, s->B, s->T, C);
    cpu->encoder_forward(cpu, out, tok, wte, wpe, s->B, s->T, C);
    float *h = host_res(dout, (size_t)N * C);
    compare("encoder_forward", "out", sh, h, out, (size_t)N * C, tol_res(TOL_ELEM));
    /* backward: grads seeded (they accumulate) */
    float *d = rnd((size_t)N * C, 1), *gte = rnd((size_t)s->Vp * C, 1);
    float *gpe = rnd((size_t)s->T * C, 1);
    float *dd = dev(d, (size_t)N * C * 4), *dgte = dev(gte, (size_t)s->Vp * C * 4);
    float *dgpe = dev(gpe, (size_t)s->T * C * 4);
    float *dgte2 = dev(gte, (size_t)s->Vp * C * 4), *dgpe2 = dev(gpe, (size_t)s->T * C * 4);
    gpu->encoder_backward(gpu, dgte, dgpe, dd, dtok, s->B, s->T, C);
    gpu->encoder_backward(gpu, dgte2, dgpe2, dd, dtok, s->B, s->T, C);
    cpu->encoder_backward(cpu, gte, gpe, d, tok, s->B, s->T, C);
    float *hte = host(dgte, (size_t)s->Vp * C), *hpe = host(dgpe, (size_t)s->T * C);
    float *hte2 = host(dgte2, (size_t)s->Vp * C);
    compare("encoder_backward", "dwte", sh, hte, gte, (size_t)s->Vp * C, TOL_RED);
    compare("encoder_backward", "dwpe", sh, hpe, gpe, (size_t)s->T * C, TOL_RED);
    same_bits("encoder_backward dwte", sh, hte, hte2, (size_t)s->Vp * C);
    /* no position table (wpe, dwpe NULL: Llama): out = wte rows, dwte alone */
    float *out0 = nanbuf((size_t)N * C);
    void *dout0 = dev_res_nan((size_t)N * C);
    gpu->encoder_forward(gpu, dout0, dtok, dwte, NULL, s->B, s->T, C);
    cpu->encoder_forward(cpu, out0, tok, wte, NULL, s->B, s->T, C);
    float *h0 = host_res(dout0, (size_t)N * C);
    compare("encoder_forward wpe=NULL", "out", sh, h0, out0, (size_t)N * C, tol_res(TOL_ELEM));
    float *gte0 = rnd((size_t)s->Vp * C, 1), *dgte0 = dev(gte0, (size_t)s->Vp * C * 4);
    gpu->encoder_backward(gpu, dgte0, NULL, dd, dtok, s->B, s->T, C);
    cpu->encoder_backward(cpu, gte0, NULL, d, tok, s->B, s->T, C);
    float *hte0 = host(dgte0, (size_t)s->Vp * C);
    compare("encoder_backward dwpe=NULL", "dwte", sh, hte0, gte0, (size_t)s->Vp * C, TOL_RED);
    gpu->dealloc(gpu, dout0);
    gpu->dealloc(gpu, dgte0);
    free(out0);
    free(h0);
    free(gte0);
    free(hte0);
    void *all[] = {dtok, dwte, dwpe, dout, dd, dgte, dgpe, dgte2, dgpe2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(tok);
    free(wte);
    free(wpe);
    free(out);
    free(h);
    free(d);
    free(gte);
    free(gpe);
    free(hte);
    free(hpe);
    free(hte2);
}

static void check_layernorm(const Shape *s, const char *sh) {
    int N = s->B * s->T, C = s->C;
    size_t NC = (size_t)N * C;
    float *x = rnd(NC, 2), *w = rnd(C, 1), *b = rnd(C, 1);
    float *out = nanbuf(NC), *mean = nanbuf(N), *rstd = nanbuf(N);
    for (size_t i = 0; i < NC; i++) x[i] += 0.5f; /* a non-zero mean */
    res_round(x, NC);                             /* the input is the residual stream */
    void *dx = dev_res(x, NC);
    float *dw = dev(w, C * 4), *db = dev(b, C * 4);
    float *dm = dev(mean, N * 4), *dr = dev(rstd, N * 4);
    void *dout = dev_op_nan(NC);
    gpu->layernorm_forward(gpu, dout, dm, dr, dx, dw, db, N, C);
    cpu->layernorm_forward(cpu, out, mean, rstd, x, w, b, N, C);
    float *ho = host_op(dout, NC), *hm = host(dm, N), *hr = host(dr, N);
    compare("layernorm_forward", "out", sh, ho, out, NC, tol_op(TOL_ELEM));
    compare("layernorm_forward", "mean", sh, hm, mean, N, TOL_ELEM);
    compare("layernorm_forward", "rstd", sh, hr, rstd, N, TOL_ELEM);
    /* backward, with the NULL variants of the split backward: all, only dinp, only dw/db.
     * The CPU reference always computes all three (its NULL variants are another
     * branch's); an output the GPU was not asked for must keep its seed, bit for bit. */
    float *scratch = malloc(cpu->scratch_floats(cpu, N, s->T, C) * sizeof(float));
    /* as the model's */
    float *gscratch = gpu->alloc(gpu, gpu->scratch_floats(gpu, N, s->T, C) * sizeof(float));
    for (int variant = 0; variant < 3; variant++) {
        const char *vn[] = {"layernorm_backward", "layernorm_backward dinp",
                            "layernorm_backward dw,db"};
        /* all accumulate */
        float *g = rnd(NC, 1), *gx = rnd(NC, 1), *gw = rnd(C, 1), *gb = rnd(C, 1);
        float *gx0 = dup(gx, NC), *gw0 = dup(gw, C), *gb0 = dup(gb, C);
        op_round(g, NC); /* dout is an operand */
        void *dg = dev_op(g, NC);
        float *dgx = dev(gx, NC * 4), *dgw = dev(gw, C * 4);
        float *dgb = dev(gb, C * 4);
        int want_x = variant != 2, want_w = variant != 1;
        gpu->layernorm_backward(gpu, want_x ? dgx : NULL, NULL, want_w ? dgw : NULL,
                                want_w ? dgb : NULL, dg, dx, dm, dr, dw, N, C, gscratch);
        cpu->layernorm_backward(cpu, gx, NULL, gw, gb, g, x, mean, rstd, w, N, C, scratch);
        float *hx = host(dgx, NC), *hw = host(dgw, C), *hb = host(dgb, C);
        if (want_x) compare(vn[variant], "dinp", sh, hx, gx, NC, TOL_RED);
        else same_bits("layernorm_backward dinp=NULL", sh, hx, gx0, NC);
        if (want_w) {
            compare(vn[variant], "dw", sh, hw, gw, C, TOL_RED);
            compare(vn[variant], "db", sh, hb, gb, C, TOL_RED);
        } else {
            same_bits("layernorm_backward dw=NULL", sh, hw, gw0, C);
            same_bits("layernorm_backward db=NULL", sh, hb, gb0, C);
        }
        gpu->dealloc(gpu, dg);
        gpu->dealloc(gpu, dgx);
        gpu->dealloc(gpu, dgw);
        gpu->dealloc(gpu, dgb);
        free(g);
        free(gx);
        free(gw);
        free(gb);
        free(gx0);
        free(gw0);
        free(gb0);
        free(hx);
        free(hw);
        free(hb);
    }
    /* determinism of the column sums: two runs from the same seed */
    {
        float *g = rnd(NC, 1), *gw = rnd(C, 1), *gb = rnd(C, 1);
        op_round(g, NC); /* dout is an operand */
        void *dg = dev_op(g, NC);
        float *w1 = dev(gw, C * 4), *b1 = dev(gb, C * 4);
        float *w2 = dev(gw, C * 4), *b2 = dev(gb, C * 4);
        gpu->layernorm_backward(gpu, NULL, NULL, w1, b1, dg, dx, dm, dr, dw, N, C, gscratch);
        gpu->layernorm_backward(gpu, NULL, NULL, w2, b2, dg, dx, dm, dr, dw, N, C, gscratch);
        float *h1 = host(w1, C), *h2 = host(w2, C);
        same_bits("layernorm_backward dw", sh, h1, h2, C);
        gpu->dealloc(gpu, dg);
        gpu->dealloc(gpu, w1);
        gpu->dealloc(gpu, b1);
        gpu->dealloc(gpu, w2);
        gpu->dealloc(gpu, b2);
        free(g);
        free(gw);
        free(gb);
        free(h1);
        free(h2);
    }
    /* [Note: split backward]: each half gives the fused call's bits */
    {
        float *g = rnd(NC, 1), *gx = rnd(NC, 1), *gw = rnd(C, 1), *gb = rnd(C, 1);
        op_round(g, NC); /* dout is an operand */
        void *dg = dev_op(g, NC);
        float *fx = dev(gx, NC * 4), *fw = dev(gw, C * 4);
        float *fb = dev(gb, C * 4);
        float *ix = dev(gx, NC * 4), *ww = dev(gw, C * 4), *wb = dev(gb, C * 4);
        /* the fused call with dinp's operand copy, the I half without */
        void *fo = dev_op_nan(NC), *fo2 = dev_op_nan(NC);
        gpu->layernorm_backward(gpu, fx, fo, fw, fb, dg, dx, dm, dr, dw, N, C, gscratch);
        gpu->layernorm_backward(gpu, ix, NULL, NULL, NULL, dg, dx, dm, dr, dw, N, C, gscratch);
        gpu->layernorm_backward(gpu, NULL, NULL, ww, wb, dg, dx, dm, dr, dw, N, C, gscratch);
        gpu->to_operand(gpu, fo2, fx, NC);
        float *hfx = host(fx, NC), *hix = host(ix, NC), *hfw = host(fw, C), *hww = host(ww, C);
        float *hfb = host(fb, C), *hwb = host(wb, C), *hfo = host_op(fo, NC),
              *hfo2 = host_op(fo2, NC);
        same_bits("layernorm_backward dinp_op=to_operand(dinp)", sh, hfo, hfo2, NC);
        gpu->dealloc(gpu, fo);
        gpu->dealloc(gpu, fo2);
        free(hfo);
        free(hfo2);
        same_bits("layernorm_backward I half=fused", sh, hix, hfx, NC);
        same_bits("layernorm_backward W half=fused", sh, hww, hfw, C);
        same_bits("layernorm_backward W half=fused db", sh, hwb, hfb, C);
        void *all[] = {dg, fx, fw, fb, ix, ww, wb};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
        free(g);
        free(gx);
        free(gw);
        free(gb);
        free(hfx);
        free(hix);
        free(hfw);
        free(hww);
        free(hfb);
        free(hwb);
    }
    void *all[] = {dx, dw, db, dout, dm, dr, gscratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(x);
    free(w);
    free(b);
    free(out);
    free(mean);
    free(rstd);
    free(ho);
    free(hm);
    free(hr);
    free(scratch);
}

/* RMSNorm ([Note: RMSNorm] in src/backend/backend.h) as LayerNorm above: the forward's
 * out (operand) and rstd, at eps 1e-5 and 1e-6 with rows of small values where eps counts;
 * the backward whole and in its split halves (an output not asked for keeps its seed, each
 * half gives the fused call's bits), and the column sums twice for the same bits. */
static void check_rmsnorm(const Shape *s, const char *sh) {
    int N = s->B * s->T, C = s->C;
    size_t NC = (size_t)N * C;
    float *x = rnd(NC, 2), *w = rnd(C, 1.5f), *out = nanbuf(NC), *rstd = nanbuf(N);
    for (int n = 0; n < N; n += 3)
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] *= 1e-3f; /* eps matters there */
    res_round(x, NC); /* the input is the residual stream */
    void *dx = dev_res(x, NC);
    float *dw = dev(w, C * 4), *dr = dev(rstd, N * 4);
    void *dout = dev_op_nan(NC);
    float eps[2] = {1e-5f, 1e-6f};
    for (int k = 0; k < 2; k++) {
        char shk[128];
        snprintf(shk, sizeof shk, "%s eps=%g", sh, eps[k]);
        gpu->rmsnorm_forward(gpu, dout, dr, dx, dw, eps[k], N, C);
        cpu->rmsnorm_forward(cpu, out, rstd, x, w, eps[k], N, C);
        float *ho = host_op(dout, NC), *hr = host(dr, N);
        compare("rmsnorm_forward", "out", shk, ho, out, NC, tol_op(TOL_ELEM));
        compare("rmsnorm_forward", "rstd", shk, hr, rstd, N, TOL_ELEM);
        free(ho);
        free(hr);
    }
    float *scratch = malloc(cpu->scratch_floats(cpu, N, s->T, C) * sizeof(float));
    float *gscratch = gpu->alloc(gpu, gpu->scratch_floats(gpu, N, s->T, C) * sizeof(float));
    for (int variant = 0; variant < 3; variant++) {
        const char *vn[] = {"rmsnorm_backward", "rmsnorm_backward dinp", "rmsnorm_backward dw"};
        float *g = rnd(NC, 1), *gx = rnd(NC, 1), *gw = rnd(C, 1); /* both accumulate */
        float *gx0 = dup(gx, NC), *gw0 = dup(gw, C);
        op_round(g, NC); /* dout is an operand */
        void *dg = dev_op(g, NC);
        float *dgx = dev(gx, NC * 4), *dgw = dev(gw, C * 4);
        int want_x = variant != 2, want_w = variant != 1;
        gpu->rmsnorm_backward(gpu, want_x ? dgx : NULL, NULL, want_w ? dgw : NULL, dg, dx, dr, dw,
                              N, C, gscratch);
        cpu->rmsnorm_backward(cpu, gx, NULL, gw, g, x, rstd, w, N, C, scratch);
        float *hx = host(dgx, NC), *hw = host(dgw, C);
        if (want_x) compare(vn[variant], "dinp", sh, hx, gx, NC, TOL_RED);
        else same_bits("rmsnorm_backward dinp=NULL", sh, hx, gx0, NC);
        if (want_w) compare(vn[variant], "dw", sh, hw, gw, C, TOL_RED);
        else same_bits("rmsnorm_backward dw=NULL", sh, hw, gw0, C);
        void *all[] = {dg, dgx, dgw};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
        free(g);
        free(gx);
        free(gw);
        free(gx0);
        free(gw0);
        free(hx);
        free(hw);
    }
    { /* [Note: split backward] and determinism: fused, I half, W half, W half again */
        float *g = rnd(NC, 1), *gx = rnd(NC, 1), *gw = rnd(C, 1);
        op_round(g, NC); /* dout is an operand */
        void *dg = dev_op(g, NC);
        float *fx = dev(gx, NC * 4), *fw = dev(gw, C * 4);
        float *ix = dev(gx, NC * 4), *ww = dev(gw, C * 4), *ww2 = dev(gw, C * 4);
        void *fo = dev_op_nan(NC), *fo2 = dev_op_nan(NC); /* dinp's operand copy */
        gpu->rmsnorm_backward(gpu, fx, fo, fw, dg, dx, dr, dw, N, C, gscratch);
        gpu->rmsnorm_backward(gpu, ix, NULL, NULL, dg, dx, dr, dw, N, C, gscratch);
        gpu->rmsnorm_backward(gpu, NULL, NULL, ww, dg, dx, dr, dw, N, C, gscratch);
        gpu->rmsnorm_backward(gpu, NULL, NULL, ww2, dg, dx, dr, dw, N, C, gscratch);
        gpu->to_operand(gpu, fo2, fx, NC);
        float *hfx = host(fx, NC), *hix = host(ix, NC), *hfw = host(fw, C), *hww = host(ww, C);
        float *hww2 = host(ww2, C), *hfo = host_op(fo, NC), *hfo2 = host_op(fo2, NC);
        same_bits("rmsnorm_backward dinp_op=to_operand(dinp)", sh, hfo, hfo2, NC);
        gpu->dealloc(gpu, fo);
        gpu->dealloc(gpu, fo2);
        free(hfo);
        free(hfo2);
        same_bits("rmsnorm_backward I half=fused", sh, hix, hfx, NC);
        same_bits("rmsnorm_backward W half=fused", sh, hww, hfw, C);
        same_bits("rmsnorm_backward dw", sh, hww, hww2, C);
        void *all[] = {dg, fx, fw, ix, ww, ww2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
        free(g);
        free(gx);
        free(gw);
        free(hfx);
        free(hix);
        free(hfw);
        free(hww);
        free(hww2);
    }
    void *all[] = {dx, dw, dr, dout, gscratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(x);
    free(w);
    free(out);
    free(rstd);
    free(scratch);
}

/* The norms' backward with dinp alone 4 bytes off a 16-byte boundary ([Note: one-pass norm
 * backward] in cuda/norm_kernels.cuh: the path must not depend on dinp, so the fused call
 * runs the single-float kernel, or at C over 2048 the float4 kernel's W half beside the
 * two-pass dinp kernel): dinp against the CPU, and the halves the fused call's bits. */
static void check_norm_misaligned(int N, int C, const char *sh) {
    size_t NC = (size_t)N * C;
    float *x = rnd(NC, 2), *w = rnd(C, 1.5f), *b = rnd(C, 1), *g = rnd(NC, 1);
    float *mean = nanbuf(N), *rstd = nanbuf(N), *out = nanbuf(NC);
    float *gx = rnd(NC + 1, 1), *gw = rnd(C, 1), *gb = rnd(C, 1);
    float *scratch = malloc(cpu->scratch_floats(cpu, N, 1, C) * sizeof(float));
    float *gscratch = gpu->alloc(gpu, gpu->scratch_floats(gpu, N, 1, C) * sizeof(float));
    res_round(x, NC); /* the norms' input is the residual stream */
    for (int rms = 0; rms < 2; rms++) {
        const char *name = rms ? "rmsnorm_bwd dinp+1" : "layernorm_bwd dinp+1";
        if (rms)
            cpu->rmsnorm_forward(cpu, out, rstd, x, w, 1e-5f, N, C);
        else
            cpu->layernorm_forward(cpu, out, mean, rstd, x, w, b, N, C);
        void *dx = dev_res(x, NC);
        float *dw = dev(w, C * 4);
        op_round(g, NC); /* dout is an operand */
        void *dg = dev_op(g, NC);
        float *dm = dev(mean, N * 4), *dr = dev(rstd, N * 4);
        float *fx = dev(gx, (NC + 1) * 4), *ix = dev(gx, (NC + 1) * 4); /* dinp at +1 */
        float *fw = dev(gw, C * 4), *fb = dev(gb, C * 4), *ww = dev(gw, C * 4),
              *wb = dev(gb, C * 4);
        float *cx = dup(gx + 1, NC), *cw = dup(gw, C), *cb = dup(gb, C);
        /* the I half with dinp's operand copy one element past an allocation (misaligned
         * too): it must not change dinp's bits, and must be to_operand's */
        void *io = dev_op_nan(NC + 1), *io2 = dev_op_nan(NC);
        if (rms) {
            gpu->rmsnorm_backward(gpu, fx + 1, NULL, fw, dg, dx, dr, dw, N, C, gscratch);
            gpu->rmsnorm_backward(gpu, ix + 1, op_at(io, 1), NULL, dg, dx, dr, dw, N, C, gscratch);
            gpu->rmsnorm_backward(gpu, NULL, NULL, ww, dg, dx, dr, dw, N, C, gscratch);
            cpu->rmsnorm_backward(cpu, cx, NULL, cw, g, x, rstd, w, N, C, scratch);
        } else {
            gpu->layernorm_backward(gpu, fx + 1, NULL, fw, fb, dg, dx, dm, dr, dw, N, C, gscratch);
            gpu->layernorm_backward(gpu, ix + 1, op_at(io, 1), NULL, NULL, dg, dx, dm, dr, dw, N, C,
                                    gscratch);
            gpu->layernorm_backward(gpu, NULL, NULL, ww, wb, dg, dx, dm, dr, dw, N, C, gscratch);
            cpu->layernorm_backward(cpu, cx, NULL, cw, cb, g, x, mean, rstd, w, N, C, scratch);
        }
        gpu->to_operand(gpu, io2, ix + 1, NC);
        float *hio = host_op(io, NC + 1), *hio2 = host_op(io2, NC);
        same_bits(rms ? "rmsnorm_bwd dinp_op+1=to_operand" : "layernorm_bwd dinp_op+1=to_operand",
                  sh, hio + 1, hio2, NC);
        gpu->dealloc(gpu, io);
        gpu->dealloc(gpu, io2);
        free(hio);
        free(hio2);
        float *hfx = host(fx, NC + 1), *hix = host(ix, NC + 1), *hfw = host(fw, C);
        float *hww = host(ww, C), *hfb = host(fb, C), *hwb = host(wb, C);
        compare(name, "dinp", sh, hfx + 1, cx, NC, TOL_RED);
        compare(name, "dw", sh, hfw, cw, C, TOL_RED);
        same_bits(rms ? "rmsnorm_bwd dinp[-1] kept" : "layernorm_bwd dinp[-1] kept", sh, hfx, gx,
                  1);
        same_bits(rms ? "rmsnorm_bwd dinp+1 I half" : "layernorm_bwd dinp+1 I half", sh, hix, hfx,
                  NC + 1);
        same_bits(rms ? "rmsnorm_bwd dinp+1 W half" : "layernorm_bwd dinp+1 W half", sh, hww, hfw,
                  C);
        if (!rms) {
            compare(name, "db", sh, hfb, cb, C, TOL_RED);
            same_bits("layernorm_bwd dinp+1 W db", sh, hwb, hfb, C);
        }
        void *all[] = {dx, dw, dg, dm, dr, fx, ix, fw, fb, ww, wb};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
        float *hs[] = {cx, cw, cb, hfx, hix, hfw, hww, hfb, hwb};
        for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
    }
    gpu->dealloc(gpu, gscratch);
    float *hs[] = {x, w, b, g, mean, rstd, out, gx, gw, gb, scratch};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
}

/* The one-pass norm backward's edges ([Note: one-pass norm backward] in
 * cuda/norm_kernels.cuh), on the backend open now: N over 1024 (chunks of several steps:
 * 12 rows at N = 2101, the last chunk of 1 row), float4 rows at 1, 2 and 4 groups a thread,
 * single floats at C = 771, rows too wide for it (the two-pass kernels run), and dinp
 * alone misaligned. */
static void check_norm_edges(void) {
    static const Shape ns[] = {
        {1, 2101, 768, 1, 0, 0}, {1, 2101, 771, 1, 0, 0}, {3, 67, 2400, 1, 0, 0},
        {1, 5, 4100, 1, 0, 0},   {1, 3, 8200, 1, 0, 0},   {1, 7, 2050, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        char sh[96];
        snprintf(sh, sizeof sh, "norms B=%d T=%d C=%d", ns[i].B, ns[i].T, ns[i].C);
        check_layernorm(&ns[i], sh);
        check_rmsnorm(&ns[i], sh);
    }
    check_norm_misaligned(37, 768, "norms N=37 C=768");
    check_norm_misaligned(9, 4100, "norms N=9 C=4100");
}

static void check_matmul(int N, int C, int OC, int bias, const char *sh0) {
    char sh[96];
    snprintf(sh, sizeof sh, "%s N=%d C=%d OC=%d%s", sh0, N, C, OC, bias ? "" : " nobias");
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = rnd(NC, 1), *w = rnd(OCC, 0.1f), *b = bias ? rnd(OC, 1) : NULL, *out = nanbuf(NO);
    op_round(x, NC); /* inp is an operand */
    void *dx = dev_op(x, NC);
    float *dw = dev(w, OCC * 4), *db = bias ? dev(b, OC * 4) : NULL, *dout = dev(out, NO * 4);
    gpu->matmul_forward(gpu, dout, dx, dw, db, N, C, OC);
    cpu->matmul_forward(cpu, out, x, w, b, N, C, OC);
    float *h = host(dout, NO);
    compare("matmul_forward", "out", sh, h, out, NO, tol_gemm());
    /* backward: all; only dinp (dw = db = NULL); only dw, db (dinp NULL); dw without db
     * (the head). The CPU reference computes all; what the GPU was not asked for must
     * keep its seed (dinp: its NaN poison). */
    for (int variant = 0; variant < 4; variant++) {
        const char *vn[] = {"matmul_backward", "matmul_backward dinp", "matmul_backward dw,db",
                            "matmul_backward dw"};
        int want_x = variant == 0 || variant == 1, want_w = variant != 1;
        int want_b = (variant == 0 || variant == 2) && bias;
        float *g = rnd(NO, 1), *gx = nanbuf(NC), *gw = rnd(OCC, 1), *gb = rnd(OC, 1);
        float *gw0 = dup(gw, OCC), *gb0 = dup(gb, OC);
        op_round(g, NO); /* dout is an operand */
        void *dg = dev_op(g, NO);
        float *dgx = dev(gx, NC * 4), *dgw = dev(gw, OCC * 4), *dgb = dev(gb, OC * 4);
        gpu->matmul_backward(gpu, want_x ? dgx : NULL, want_w ? dgw : NULL, want_b ? dgb : NULL, dg,
                             dx, dw, N, C, OC);
        cpu->matmul_backward(cpu, gx, gw, gb, g, x, w, N, C, OC);
        float *hx = host(dgx, NC), *hw = host(dgw, OCC), *hb = host(dgb, OC);
        if (want_x) compare(vn[variant], "dinp", sh, hx, gx, NC, tol_gemm());
        if (want_w) compare(vn[variant], "dw", sh, hw, gw, OCC, tol_gemm());
        else same_bits("matmul_backward dw=NULL", sh, hw, gw0, OCC);
        if (want_b) compare(vn[variant], "db", sh, hb, gb, OC, TOL_RED);
        else same_bits("matmul_backward db=NULL", sh, hb, gb0, OC);
        if (variant == 0) { /* dw twice from the same seed: the same bits; with db too
                               ([Note: bias gradient epilogue]: the GEMM's own sum) */
            float *w0 = rnd(OCC, 1), *dw0 = dev(w0, OCC * 4), *dw1 = dev(w0, OCC * 4);
            gpu->matmul_backward(gpu, NULL, dw0, NULL, dg, dx, dw, N, C, OC);
            gpu->matmul_backward(gpu, NULL, dw1, NULL, dg, dx, dw, N, C, OC);
            float *h0 = host(dw0, OCC), *h1 = host(dw1, OCC);
            same_bits("matmul_backward dw", sh, h0, h1, OCC);
            if (bias) {
                float *b0 = rnd(OC, 1), *db0 = dev(b0, OC * 4), *db1 = dev(b0, OC * 4);
                gpu->to_device(gpu, dw0, w0, OCC * 4);
                gpu->to_device(gpu, dw1, w0, OCC * 4);
                gpu->matmul_backward(gpu, NULL, dw0, db0, dg, dx, dw, N, C, OC);
                gpu->matmul_backward(gpu, NULL, dw1, db1, dg, dx, dw, N, C, OC);
                float *g0 = host(dw0, OCC), *g1 = host(dw1, OCC);
                float *c0 = host(db0, OC), *c1 = host(db1, OC);
                same_bits("matmul_backward dw,db dw", sh, g0, g1, OCC);
                same_bits("matmul_backward dw,db db", sh, c0, c1, OC);
                void *d2[] = {db0, db1};
                free_all(d2, 2);
                float *f2[] = {b0, g0, g1, c0, c1};
                for (size_t i = 0; i < 5; i++) free(f2[i]);
            }
            gpu->dealloc(gpu, dw0);
            gpu->dealloc(gpu, dw1);
            free(w0);
            free(h0);
            free(h1);
        }
        gpu->dealloc(gpu, dg);
        gpu->dealloc(gpu, dgx);
        gpu->dealloc(gpu, dgw);
        gpu->dealloc(gpu, dgb);
        free(g);
        free(gx);
        free(gw);
        free(gb);
        free(gw0);
        free(gb0);
        free(hx);
        free(hw);
        free(hb);
    }
    /* [Note: split backward]: the I half's dinp and the W half's dw, db are the bits of the
     * fused call (what makes a zero-bubble schedule train bitwise like 1F1B) */
    {
        float *g = rnd(NO, 1), *gw = rnd(OCC, 1), *gb = rnd(OC, 1);
        /* (rounded on the way: both halves and the fused call read the same) */
        void *dg = dev_op(g, NO);
        float *fx = dev(NULL, NC * 4), *fw = dev(gw, OCC * 4), *fb = dev(gb, OC * 4);
        float *ix = dev(NULL, NC * 4), *ww = dev(gw, OCC * 4), *wb = dev(gb, OC * 4);
        gpu->matmul_backward(gpu, fx, fw, bias ? fb : NULL, dg, dx, dw, N, C, OC);
        gpu->matmul_backward(gpu, ix, NULL, NULL, dg, dx, dw, N, C, OC);
        gpu->matmul_backward(gpu, NULL, ww, bias ? wb : NULL, dg, dx, dw, N, C, OC);
        float *hfx = host(fx, NC), *hix = host(ix, NC), *hfw = host(fw, OCC), *hww = host(ww, OCC);
        float *hfb = host(fb, OC), *hwb = host(wb, OC);
        same_bits("matmul_backward I half=fused", sh, hix, hfx, NC);
        same_bits("matmul_backward W half=fused", sh, hww, hfw, OCC);
        if (bias) same_bits("matmul_backward W half=fused db", sh, hwb, hfb, OC);
        void *all[] = {dg, fx, fw, fb, ix, ww, wb};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
        free(g);
        free(gw);
        free(gb);
        free(hfx);
        free(hix);
        free(hfw);
        free(hww);
        free(hfb);
        free(hwb);
    }
    gpu->dealloc(gpu, dx);
    gpu->dealloc(gpu, dw);
    gpu->dealloc(gpu, db);
    gpu->dealloc(gpu, dout);
    free(x);
    free(w);
    free(b);
    free(out);
    free(h);
}

/* Attention of NH query heads and NKV kv heads of HS ([Note: grouped-query attention] in
 * src/backend/backend.h; GPT-2: NKV = NH). */
static void check_attention_gqa(int B, int T, int NH, int NKV, int HS, const char *sh) {
    int N = B * T, C = NH * HS;
    size_t Q = (size_t)N * (NH + 2 * NKV) * HS, NC = (size_t)N * C;
    size_t nsave = cpu->attention_saved_floats(cpu, B, T, NH);
    size_t gsave = gpu->attention_saved_floats(gpu, B, T, NH);
    float *qkv = rnd(Q, 1), *out = nanbuf(NC), *att = nanbuf(nsave);
    op_round(qkv, Q); /* qkv is an operand */
    float *datt = dev(NULL, gsave * 4);
    void *dq = dev_op(qkv, Q), *dout = dev_op_nan(NC);
    gpu->attention_forward(gpu, dout, datt, dq, B, T, NH, NKV, HS);
    cpu->attention_forward(cpu, out, att, qkv, B, T, NH, NKV, HS);
    float *h = host_op(dout, NC);
    compare("attention_forward", "out", sh, h, out, NC, tol_op(tol_gemm()));
    /* the probabilities, causal part only (the CPU leaves the rest unwritten), on the
     * materialised path: flash saves each row's log-sum-exp, B*NH*T floats, which at T = 1
     * is as many as the probabilities (the first H100 run compared those, and failed) */
    int flash = gpu->description && strstr(gpu->description, "attention flash");
    if (gsave == nsave && !flash) {
        float *ha = host(datt, gsave), *pg = malloc(nsave * 4), *pc = malloc(nsave * 4);
        size_t k = 0;
        for (size_t bh = 0; bh < (size_t)B * NH; bh++)
            for (int t = 0; t < T; t++)
                for (int j = 0; j <= t; j++, k++) {
                    pg[k] = ha[(bh * T + t) * T + j];
                    pc[k] = att[(bh * T + t) * T + j];
                }
        compare("attention_forward", "probs", sh, pg, pc, k, tol_gemm());
        free(ha);
        free(pg);
        free(pc);
    }
    /* out: each its own forward's (the CPU's op reads only att) */
    float *g = rnd(NC, 1), *gq = nanbuf(Q);
    op_round(g, NC); /* dout is an operand */
    void *dg = dev_op(g, NC), *dgq = dev_op_nan(Q);
    float *scratch = malloc(cpu->scratch_floats(cpu, N, T, C) * sizeof(float));
    float *gscratch = gpu->alloc(gpu, gpu->scratch_floats(gpu, N, T, C) * sizeof(float));
    gpu->attention_backward(gpu, dgq, dg, dq, dout, datt, B, T, NH, NKV, HS, gscratch);
    cpu->attention_backward(cpu, gq, g, qkv, out, att, B, T, NH, NKV, HS, scratch);
    float *hq = host_op(dgq, Q);
    compare("attention_backward", "dqkv", sh, hq, gq, Q, tol_op(tol_gemm()));
    void *dgq2 = dev_op(NULL, Q);
    gpu->attention_backward(gpu, dgq2, dg, dq, dout, datt, B, T, NH, NKV, HS, gscratch);
    float *hq2 = host_op(dgq2, Q);
    same_bits("attention_backward", sh, hq, hq2, Q);
    void *all[] = {dq, dout, datt, dg, dgq, dgq2, gscratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(qkv);
    free(out);
    free(att);
    free(h);
    free(g);
    free(gq);
    free(hq);
    free(hq2);
    free(scratch);
}

/* [Note: fused GELU] (src/backend/backend.h): matmul_gelu_forward N x C -> H and
 * matmul_gelu_backward of the matmul H -> C that reads GELU's output (GPT-2's fc and
 * fcproj), against the CPU's separate ops on the same (operand-rounded) inputs. */

static void check_matmul_gelu_forward(int N, int C, int H, int bias, const char *sh) {
    size_t NC = (size_t)N * C, NH = (size_t)N * H, HC = (size_t)H * C;
    float *x = rnd(NC, 1), *w = rnd(HC, 0.1f), *b = bias ? rnd(H, 1) : NULL;
    float *pre = nanbuf(NH), *out = nanbuf(NH);
    op_round(x, NC);
    void *dx = dev_op(x, NC), *dpre = dev_op_nan(NH), *dout = dev_op_nan(NH);
    void *dpre2 = dev_op_nan(NH), *dout2 = dev_op_nan(NH), *dout3 = dev_op_nan(NH);
    float *dw = dev(w, HC * 4), *db = bias ? dev(b, H * 4) : NULL;
    gpu->matmul_gelu_forward(gpu, dout, dpre, dx, dw, db, N, C, H);
    gpu->matmul_gelu_forward(gpu, dout2, dpre2, dx, dw, db, N, C, H);
    gpu->gelu_forward(gpu, dout3, dpre, NH); /* selective recompute's call without gelu_in_gemm */
    cpu->matmul_forward(cpu, pre, x, w, b, N, C, H);
    op_round(pre, NH); /* the stored pre: GELU reads it as stored */
    cpu->gelu_forward(cpu, out, pre, NH);
    float *hp = host_op(dpre, NH), *ho = host_op(dout, NH), *hp2 = host_op(dpre2, NH);
    float *ho2 = host_op(dout2, NH), *ho3 = host_op(dout3, NH);
    compare("matmul_gelu_forward", "pre", sh, hp, pre, NH, tol_op(tol_gemm()));
    compare("matmul_gelu_forward", "out", sh, ho, out, NH, tol_op(tol_gemm()));
    same_bits("matmul_gelu_forward pre", sh, hp, hp2, NH);
    same_bits("matmul_gelu_forward out", sh, ho, ho2, NH);
    if (gpu->gelu_in_gemm) { /* GELU on the unrounded pre ([Note: fused GELU]) */
        compare("matmul_gelu_forward out ~ gelu_forward(pre)", "out", sh, ho3, ho, NH,
                tol_op(tol_gemm()));
        /* the epilogue ran where the shape lets it (H a multiple of 8): bits of its own. At
         * under 64 rows cuBLASLt may refuse the epilogue for the shape, which the backend
         * takes as its documented fallback (GELU's kernel after the GEMM, said once on
         * stderr): a note there, not a failure */
        int same = !memcmp(ho3, ho, NH * sizeof(float));
        if (H % 8 == 0 && N >= 64)
            none_wrong("matmul_gelu_forward out != gelu_forward(pre) (GELU in the GEMM)", sh,
                       (size_t)same, 1);
        else if (H % 8 == 0 && same)
            printf("note matmul_gelu_forward %s: GELU ran after the GEMM (cuBLASLt refused the "
                   "epilogue at %d rows: the fallback)\n",
                   sh, N);
    } else {
        same_bits("gelu_forward(pre)=fused out", sh, ho3, ho, NH);
    }
    void *all[] = {dx, dpre, dout, dpre2, dout2, dout3, dw, db};
    free_all(all, bias ? 8 : 7);
    float *fr[] = {x, w, b, pre, out, hp, ho, hp2, ho2, ho3};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* One call of a matmul backward's split-backward check ([Note: split backward]): its operand
 * input gradient dd (xname, nx elements) against rx, dw (nw) against rw and db (nb) against rb
 * where asked for, else their seeds w0, b0 bit for bit; the host copies into keep[3] for the
 * halves' comparisons after; dd, ddw and ddb released. */
static void split_outputs(const char *op, const char *xname, const char *sh, int want_x, int want_w,
                          int want_b, void *dd, float *ddw, float *ddb, const float *rx, size_t nx,
                          const float *rw, const float *w0, size_t nw, const float *rb,
                          const float *b0, size_t nb, float *keep[3]) {
    char nm[128];
    float *hd = host_op(dd, nx), *hw = host(ddw, nw), *hb = host(ddb, nb);
    if (want_x) compare(op, xname, sh, hd, rx, nx, tol_op(tol_gemm()));
    snprintf(nm, sizeof nm, "%s dw=NULL", op);
    if (want_w)
        compare(op, "dw", sh, hw, rw, nw, tol_gemm());
    else
        same_bits(nm, sh, hw, w0, nw);
    snprintf(nm, sizeof nm, "%s db=NULL", op);
    if (want_b)
        compare(op, "db", sh, hb, rb, nb, TOL_RED);
    else
        same_bits(nm, sh, hb, b0, nb);
    keep[0] = hd;
    keep[1] = hw;
    keep[2] = hb;
    void *all[] = {dd, ddw, ddb};
    free_all(all, 3);
}

/* matmul_gelu_backward: dpre[N,H] = gelu'(pre) * (dout[N,C] @ w[C,H]); dw[C,H], db[C]. */
static void check_matmul_gelu_backward(int N, int C, int H, int bias, const char *sh) {
    size_t NC = (size_t)N * C, NH = (size_t)N * H, HC = (size_t)H * C;
    float *g = rnd(NC, 1), *x = rnd(NH, 1), *w = rnd(HC, 0.1f), *p = rnd(NH, 4);
    op_round(g, NC);
    op_round(x, NH);
    op_round(p, NH);
    void *dg = dev_op(g, NC), *dx = dev_op(x, NH), *dp = dev_op(p, NH);
    float *dw = dev(w, HC * 4);
    /* the reference: the separate ops */
    float *t = nanbuf(NH), *ref = nanbuf(NH), *gw = rnd(HC, 1), *gb = rnd(C, 1);
    float *gw0 = dup(gw, HC), *gb0 = dup(gb, C);
    cpu->matmul_backward(cpu, t, gw, bias ? gb : NULL, g, x, w, N, H, C);
    cpu->gelu_backward(cpu, ref, p, t, NH);
    /* all; only dpre (the I half); only dw, db (the W half) */
    const char *vn[] = {"matmul_gelu_backward", "matmul_gelu_backward dpre",
                        "matmul_gelu_backward dw,db"};
    float *keep[3][3] = {{0}};
    for (int v = 0; v < 3; v++) {
        int want_x = v != 2, want_w = v != 1;
        void *dd = dev_op_nan(NH);
        float *ddw = dev(gw0, HC * 4), *ddb = dev(gb0, C * 4);
        gpu->matmul_gelu_backward(gpu, want_x ? dd : NULL, want_w ? ddw : NULL,
                                  want_w && bias ? ddb : NULL, dg, dx, dw, dp, N, H, C);
        split_outputs(vn[v], "dpre", sh, want_x, want_w, want_w && bias, dd, ddw, ddb, ref, NH, gw,
                      gw0, HC, gb, gb0, C, keep[v]);
    }
    /* [Note: split backward]: the halves give the fused call's bits; the W half is
     * matmul_backward's; dpre twice is the same bits */
    same_bits("matmul_gelu_backward I half=fused", sh, keep[1][0], keep[0][0], NH);
    same_bits("matmul_gelu_backward W half=fused", sh, keep[2][1], keep[0][1], HC);
    if (bias) same_bits("matmul_gelu_backward W half=fused db", sh, keep[2][2], keep[0][2], C);
    {
        void *dd = dev_op_nan(NH);
        float *ddw = dev(gw0, HC * 4), *ddb = dev(gb0, C * 4);
        gpu->matmul_gelu_backward(gpu, dd, NULL, NULL, dg, dx, dw, dp, N, H, C);
        gpu->matmul_backward(gpu, NULL, ddw, bias ? ddb : NULL, dg, dx, dw, N, H, C);
        float *hd = host_op(dd, NH), *hw = host(ddw, HC), *hb = host(ddb, C);
        same_bits("matmul_gelu_backward dpre", sh, hd, keep[0][0], NH);
        same_bits("matmul_gelu_backward W=matmul_backward W", sh, hw, keep[0][1], HC);
        if (bias) same_bits("matmul_gelu_backward db=matmul_backward db", sh, hb, keep[0][2], C);
        void *all[] = {dd, ddw, ddb};
        free_all(all, 3);
        free(hd);
        free(hw);
        free(hb);
    }
    for (int v = 0; v < 3; v++)
        for (int k = 0; k < 3; k++) free(keep[v][k]);
    void *all[] = {dg, dx, dp, dw};
    free_all(all, 4);
    float *fr[] = {g, x, w, p, t, ref, gw, gb, gw0, gb0};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* [Note: bias gradient epilogue] (cuda/backend_cuda.cu): the W half's db, which at bf16
 * the dw GEMM sums itself, into a db one float past an allocation's start (as a bias in
 * the flat parameter buffer can be: only 4-byte aligned) whose guard float before it must
 * keep its bits: matmul_backward's dw and db against the CPU, the same bits a second time,
 * and matmul_gelu_backward's W half (the same function) the same bits again. */
static void check_bias_grads(int N, int C, int OC, const char *sh0) {
    char sh[96];
    snprintf(sh, sizeof sh, "%s N=%d C=%d OC=%d db+1", sh0, N, C, OC);
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = rnd(NC, 1), *g = rnd(NO, 1), *w = rnd(OCC, 0.1f);
    float *gw = rnd(OCC, 1), *gb = rnd(OC + 1, 1), *cw = dup(gw, OCC), *cb = dup(gb, OC + 1);
    op_round(x, NC);
    op_round(g, NO);
    void *dx = dev_op(x, NC), *dg = dev_op(g, NO), *dp = dev_op(x, NC); /* pre: any values */
    float *dw = dev(w, OCC * 4), *w1[3], *b1[3], *hw[3], *hb[3];
    cpu->matmul_backward(cpu, NULL, cw, cb + 1, g, x, w, N, C, OC);
    for (int r = 0; r < 3; r++) {
        w1[r] = dev(gw, OCC * 4);
        b1[r] = dev(gb, (OC + 1) * 4);
        if (r < 2)
            gpu->matmul_backward(gpu, NULL, w1[r], b1[r] + 1, dg, dx, dw, N, C, OC);
        else
            gpu->matmul_gelu_backward(gpu, NULL, w1[r], b1[r] + 1, dg, dx, dw, dp, N, C, OC);
        hw[r] = host(w1[r], OCC);
        hb[r] = host(b1[r], OC + 1);
    }
    compare("matmul_backward W half", "dw", sh, hw[0], cw, OCC, tol_gemm());
    compare("matmul_backward W half", "db", sh, hb[0] + 1, cb + 1, OC, TOL_RED);
    same_bits("matmul_backward db[-1] kept", sh, hb[0], gb, 1);
    same_bits("matmul_backward W twice dw", sh, hw[1], hw[0], OCC);
    same_bits("matmul_backward W twice db", sh, hb[1], hb[0], OC + 1);
    same_bits("matmul_gelu_backward W=mm dw", sh, hw[2], hw[0], OCC);
    same_bits("matmul_gelu_backward W=mm db", sh, hb[2], hb[0], OC + 1);
    for (int r = 0; r < 3; r++) {
        gpu->dealloc(gpu, w1[r]);
        gpu->dealloc(gpu, b1[r]);
        free(hw[r]);
        free(hb[r]);
    }
    void *all[] = {dx, dg, dp, dw};
    free_all(all, 4);
    float *fr[] = {x, g, w, gw, gb, cw, cb};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* The bias-gradient shapes: the first 6 an odd OC, OCs that are no multiple of 8 or 16, N no
 * multiple of 16, N = 1, OC = 1; then (unless small) GPT-2's qkv, fc, fcproj and attproj at
 * B 1, T 1024. */
static void check_bias_grad_shapes(int small, const char *sh0) {
    static const int bs[][3] = {
        {201, 64, 67}, {74, 768, 771}, {37, 64, 12}, {130, 1024, 1028}, {1, 64, 5}, {17, 40, 1},
        {1024, 768, 2304}, {1024, 768, 3072}, {1024, 3072, 768}, {1024, 768, 768},
    };
    char gpt2[64]; /* the row's own label and GPT-2's */
    snprintf(gpt2, sizeof gpt2, "%s gpt2", sh0);
    for (size_t i = 0; i < (small ? 6 : sizeof bs / sizeof bs[0]); i++)
        check_bias_grads(bs[i][0], bs[i][1], bs[i][2], i < 6 ? sh0 : gpt2);
}

/* Which GELU the backward's derivative is: the tanh form (the CPU's, GPT-2's) and not
 * erf's. The GEMM is made exact (dout @ w = 1: dout row n is e_0, w's row 0 all ones), so
 * dpre is gelu'(pre) itself, rounded once to the operand type; pre in [-3, -1.8), where
 * the two derivatives differ by 2e-4 to 9e-4 (absolute; up to 3%). The RMS distance of
 * dpre to the tanh form's derivative (in double) must be below half its distance to
 * erf's: a fast tanh in an epilogue passes, the other function does not. */
static double dgelu_tanh(double x) {
    double k = 0.7978845608028654, th = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}

static double dgelu_erf(double x) {
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

/* Record which GELU form got[i] follows: its RMS distance to tanh_form(pre[i % period])
 * must be under half its distance to erf_form's. */
static void gelu_form(const char *op, const float *got, const float *pre, size_t n, size_t period,
                      double (*tanh_form)(double), double (*erf_form)(double)) {
    double et = 0, ee = 0;
    for (size_t i = 0; i < n; i++) {
        double v = pre[i % period], a = got[i] - tanh_form(v), b = got[i] - erf_form(v);
        et += a * a;
        ee += b * b;
    }
    et = sqrt(et / n);
    ee = sqrt(ee / n);
    int ok = !isnan(et) && et < 0.5 * ee;
    checks++;
    failures += !ok;
    printf("%-4s %-28s %-10s %-34s %-5s RMS to tanh form %.2e, to erf form %.2e\n",
           ok ? "ok" : "FAIL", op, "gelu form", "pre in [-3,-1.8), exact GEMM", prec, et, ee);
}

static void check_gelu_form(void) {
    int N = 256, C = 64, H = 1024; /* K = 64: a GEMM cuBLASLt runs with its epilogue */
    size_t NC = (size_t)N * C, NH = (size_t)N * H, HC = (size_t)H * C;
    float *g = calloc(NC, 4), *x = rnd(NH, 1), *w = rnd(HC, 0.1f), *p = rnd(NH, 0.6f);
    for (int n = 0; n < N; n++) g[(size_t)n * C] = 1.0f;
    for (int h = 0; h < H; h++) w[h] = 1.0f; /* w[0, :] of [C, H] */
    for (size_t i = 0; i < NH; i++) p[i] = -2.4f + p[i]; /* [-3, -1.8) */
    op_round(x, NH);
    op_round(p, NH);
    void *dg = dev_op(g, NC), *dx = dev_op(x, NH), *dp = dev_op(p, NH), *dd = dev_op_nan(NH);
    float *dw = dev(w, HC * 4);
    gpu->matmul_gelu_backward(gpu, dd, NULL, NULL, dg, dx, dw, dp, N, H, C);
    float *hd = host_op(dd, NH);
    gelu_form("matmul_gelu_backward", hd, p, NH, NH, dgelu_tanh, dgelu_erf);
    void *all[] = {dg, dx, dp, dd, dw};
    free_all(all, 5);
    float *fr[] = {g, x, w, p, hd};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* The forward's GELU has the tanh form too (the GELU epilogue where gelu_in_gemm, [Note:
 * fused GELU]): inp one-hot on column 0, so pre[n,h] = w[h,0] exactly, in [-3,-1.8) where
 * tanh's and erf's GELU differ by about 2%; out's RMS distance to each form. */
static double gelu_tanh_of(double x) {
    return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double gelu_erf_of(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

static void check_gelu_form_forward(void) {
    int N = 256, C = 64, H = 1024;
    size_t NC = (size_t)N * C, NH = (size_t)N * H, HC = (size_t)H * C;
    float *x = calloc(NC, 4), *w = calloc(HC, 4), *p = rnd(H, 0.6f);
    for (int n = 0; n < N; n++) x[(size_t)n * C] = 1.0f;
    for (int h = 0; h < H; h++) p[h] = -2.4f + p[h];
    op_round(p, H);
    for (int h = 0; h < H; h++) w[(size_t)h * C] = p[h];
    void *dx = dev_op(x, NC), *dpre = dev_op_nan(NH), *dout = dev_op_nan(NH);
    float *dw = dev(w, HC * 4);
    gpu->matmul_gelu_forward(gpu, dout, dpre, dx, dw, NULL, N, C, H);
    float *ho = host_op(dout, NH);
    gelu_form("matmul_gelu_forward", ho, p, NH, H, gelu_tanh_of, gelu_erf_of);
    void *all[] = {dx, dpre, dout, dw};
    free_all(all, 4);
    float *fr[] = {x, w, p, ho};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* matmul_residual_forward: out = res + inp @ w^T + b against the CPU's two ops, res and out
 * of the residual type (the CPU's on res as the GPU holds it); res left as it was; the same
 * bits twice. */
static void check_matmul_residual(int N, int C, int OC, int bias, const char *sh0) {
    char sh[96];
    snprintf(sh, sizeof sh, "%s N=%d C=%d OC=%d%s", sh0, N, C, OC, bias ? "" : " nobias");
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = rnd(NC, 1), *w = rnd(OCC, 0.1f), *b = bias ? rnd(OC, 1) : NULL, *r = rnd(NO, 2);
    float *out = nanbuf(NO);
    op_round(x, NC);
    res_round(r, NO);
    void *dx = dev_op(x, NC), *dr = dev_res(r, NO), *d1 = dev_res_nan(NO), *d2 = dev_res_nan(NO);
    float *dw = dev(w, OCC * 4), *db = bias ? dev(b, OC * 4) : NULL;
    gpu->matmul_residual_forward(gpu, d1, dr, dx, dw, db, N, C, OC);
    gpu->matmul_residual_forward(gpu, d2, dr, dx, dw, db, N, C, OC);
    cpu->matmul_residual_forward(cpu, out, r, x, w, b, N, C, OC);
    float *h1 = host_res(d1, NO), *h2 = host_res(d2, NO), *hr = host_res(dr, NO);
    /* a bf16 out: the GEMM's tolerance and one rounding (the bias rounded to bf16 too) */
    compare("matmul_residual_forward", "out", sh, h1, out, NO,
            res_bf16() ? tol_gemm() + TOL_BF16_STORE : tol_gemm());
    same_bits("matmul_residual_forward", sh, h1, h2, NO);
    same_bits("matmul_residual_forward leaves res", sh, hr, r, NO);
    void *all[] = {dx, dw, dr, d1, d2, db};
    free_all(all, bias ? 6 : 5);
    float *fr[] = {x, w, b, r, out, h1, h2, hr};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

static void check_matmul_gelu(int N, int C, int H, int bias, const char *sh0) {
    char sh[96];
    snprintf(sh, sizeof sh, "%s N=%d C=%d H=%d%s", sh0, N, C, H, bias ? "" : " nobias");
    check_matmul_gelu_forward(N, C, H, bias, sh);
    check_matmul_gelu_backward(N, C, H, bias, sh);
}

/* [Note: operand activations]: matmul_operand_forward (qkv) and matmul_operand_backward (d
 * atty) against the CPU's matmul_forward and matmul_backward on the same operand-rounded
 * inputs, their operand outputs NaN-poisoned first and written within the operand type's
 * rounding; twice for the bits; the split halves give the fused call's bits, and the W half
 * is matmul_backward's. */
static void check_matmul_operand(int N, int C, int OC, int bias, const char *sh0) {
    char sh[96];
    snprintf(sh, sizeof sh, "%s N=%d C=%d OC=%d%s", sh0, N, C, OC, bias ? "" : " nobias");
    size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    float *x = rnd(NC, 1), *w = rnd(OCC, 0.1f), *b = bias ? rnd(OC, 1) : NULL, *out = nanbuf(NO);
    float *g = rnd(NO, 1), *gx = nanbuf(NC), *gw = rnd(OCC, 1), *gb = rnd(OC, 1);
    float *gw0 = dup(gw, OCC), *gb0 = dup(gb, OC);
    op_round(x, NC);
    op_round(g, NO);
    void *dx = dev_op(x, NC), *dg = dev_op(g, NO), *o1 = dev_op_nan(NO), *o2 = dev_op_nan(NO);
    float *dw = dev(w, OCC * 4), *db = bias ? dev(b, OC * 4) : NULL;
    gpu->matmul_operand_forward(gpu, o1, dx, dw, db, N, C, OC);
    gpu->matmul_operand_forward(gpu, o2, dx, dw, db, N, C, OC);
    cpu->matmul_forward(cpu, out, x, w, b, N, C, OC);
    float *h1 = host_op(o1, NO), *h2 = host_op(o2, NO);
    compare("matmul_operand_forward", "out", sh, h1, out, NO, tol_op(tol_gemm()));
    same_bits("matmul_operand_forward", sh, h1, h2, NO);
    cpu->matmul_backward(cpu, gx, gw, bias ? gb : NULL, g, x, w, N, C, OC);
    /* all; only dinp (the I half); only dw, db (the W half); matmul_backward's W half */
    float *keep[4][3] = {{0}};
    for (int v = 0; v < 4; v++) {
        int want_x = v < 2, want_w = v != 1;
        void *dd = dev_op_nan(NC);
        float *ddw = dev(gw0, OCC * 4), *ddb = dev(gb0, OC * 4);
        if (v < 3)
            gpu->matmul_operand_backward(gpu, want_x ? dd : NULL, want_w ? ddw : NULL,
                                         want_w && bias ? ddb : NULL, dg, dx, dw, N, C, OC);
        else
            gpu->matmul_backward(gpu, NULL, ddw, bias ? ddb : NULL, dg, dx, dw, N, C, OC);
        split_outputs("matmul_operand_backward", "dinp", sh, want_x, want_w, want_w && bias, dd,
                      ddw, ddb, gx, NC, gw, gw0, OCC, gb, gb0, OC, keep[v]);
    }
    same_bits("matmul_operand_backward I half=fused", sh, keep[1][0], keep[0][0], NC);
    same_bits("matmul_operand_backward W half=fused", sh, keep[2][1], keep[0][1], OCC);
    same_bits("matmul_operand_backward W=matmul_backward W", sh, keep[3][1], keep[0][1], OCC);
    if (bias) {
        same_bits("matmul_operand_backward W half=fused db", sh, keep[2][2], keep[0][2], OC);
        same_bits("matmul_operand_backward db=matmul_backward db", sh, keep[3][2], keep[0][2], OC);
    }
    for (int v = 0; v < 4; v++)
        for (int k = 0; k < 3; k++) free(keep[v][k]);
    void *all[] = {dx, dg, o1, o2, dw, db};
    free_all(all, bias ? 6 : 5);
    float *fr[] = {x, w, out, g, gx, gw, gb, gw0, gb0, h1, h2, b};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

static void check_attention(const Shape *s, const char *sh) {
    check_attention_gqa(s->B, s->T, s->NH, s->NH, s->C / s->NH, sh);
}

/* inv_freq[HS/2]: transformers' _compute_default_rope_parameters at theta and, with
 * llama3, _compute_llama3_parameters (factor 8, low 1, high 4, original context 8192), in
 * double, rounded once. */
static void rope_inv_freq(float *inv, int HS, double theta, int llama3) {
    for (int i = 0; i < HS / 2; i++) {
        double f = 1.0 / pow(theta, 2.0 * i / HS), wavelen = 2 * M_PI / f;
        if (llama3 && wavelen > 8192.0) f /= 8.0;
        else if (llama3 && !(wavelen < 2048.0)) {
            double smooth = (8192.0 / wavelen - 1.0) / 3.0;
            f = (1 - smooth) * f / 8.0 + smooth * f;
        }
        inv[i] = (float)f;
    }
}

/* RoPE ([Note: RoPE] in src/backend/backend.h): the forward on the operand qkv in place,
 * the backward on the operand dqkv in place (the inputs rounded to the operand type for
 * both devices; the CPU's results are fp32); v, and dv, must come back bit for bit. */
static void check_rope(int B, int T, int NH, int NKV, int HS, int llama3) {
    char sh[96];
    snprintf(sh, sizeof sh, "B=%d T=%d NH=%d NKV=%d HS=%d%s", B, T, NH, NKV, HS,
             llama3 ? " llama3" : "");
    int W = (NH + 2 * NKV) * HS, V0 = (NH + NKV) * HS;
    size_t n = (size_t)B * T * W;
    float *inv = malloc((HS / 2 + 1) * sizeof(float));
    rope_inv_freq(inv, HS, llama3 ? 500000.0 : 10000.0, llama3);
    float *dinv = dev(inv, (HS / 2) * sizeof(float));
    float *x = rnd(n, 2);
    op_round(x, n); /* qkv is an operand */
    float *y = dup(x, n);
    void *dx = dev_op(x, n);
    gpu->rope_forward(gpu, dx, dinv, B, T, NH, NKV, HS);
    cpu->rope_forward(cpu, y, inv, B, T, NH, NKV, HS);
    float *h = host_op(dx, n);
    compare("rope_forward", "qkv", sh, h, y, n, tol_op(TOL_ELEM));
    size_t vbad = 0, rows = (size_t)B * T; /* the v heads are not touched */
    for (size_t r = 0; r < rows; r++)
        vbad += memcmp(h + r * W + V0, x + r * W + V0, (size_t)NKV * HS * 4) != 0;
    none_wrong("rope_forward v rows", sh, vbad, rows);
    float *g = rnd(n, 1);
    op_round(g, n); /* dqkv is an operand */
    float *g0 = dup(g, n);
    void *dg = dev_op(g, n);
    gpu->rope_backward(gpu, dg, dinv, B, T, NH, NKV, HS);
    cpu->rope_backward(cpu, g, inv, B, T, NH, NKV, HS);
    float *hg = host_op(dg, n);
    compare("rope_backward", "dqkv", sh, hg, g, n, tol_op(TOL_ELEM));
    vbad = 0;
    for (size_t r = 0; r < rows; r++)
        vbad += memcmp(hg + r * W + V0, g0 + r * W + V0, (size_t)NKV * HS * 4) != 0;
    none_wrong("rope_backward dv rows", sh, vbad, rows);
    gpu->dealloc(gpu, dinv);
    gpu->dealloc(gpu, dx);
    gpu->dealloc(gpu, dg);
    free(inv);
    free(x);
    free(y);
    free(h);
    free(g);
    free(g0);
    free(hg);
}

/* Decoding on a KV cache ([Note: KV cache] in src/backend/backend.h): kv_append of a
 * prompt's pos rows, then of n more at position pos (RoPE's rotation with Llama 3's
 * frequencies, or none as GPT-2's), into caches of cap > pos + n rows poisoned with NaN;
 * the rotated qkv and the written cache rows against the CPU's (the v rows and, without
 * RoPE, everything bit for bit); then attention_decode of the n rows on the cache (its
 * output poisoned first), and again on the cache the prompt's append left plus the first
 * new row (n 1 at pos: a decoding step). */
static void check_kv_decode(int pos, int n, int NH, int NKV, int HS, int rope) {
    char sh[96];
    snprintf(sh, sizeof sh, "pos=%d n=%d NH=%d NKV=%d HS=%d%s", pos, n, NH, NKV, HS,
             rope ? " rope" : "");
    int W = (NH + 2 * NKV) * HS, cap = pos + n + 3, T = pos + n;
    size_t Q = (size_t)T * W, K = (size_t)NKV * cap * HS, Y = (size_t)n * NH * HS;
    float *inv = malloc((HS / 2 + 1) * sizeof(float));
    rope_inv_freq(inv, HS, 500000.0, 1);
    float *dinv = rope ? dev(inv, (HS / 2) * sizeof(float)) : NULL;
    float *x = rnd(Q, 1);
    op_round(x, Q); /* qkv is an operand */
    float *y = dup(x, Q);
    void *dx = dev_op(x, Q);
    float *kc = nanbuf(K), *vc = nanbuf(K), *dk = dev(kc, K * 4), *dv = dev(vc, K * 4);
    float *out = nanbuf(Y);
    void *dout = dev_op_nan(Y);
    const float *ci = rope ? inv : NULL;
    cpu->kv_append(cpu, kc, vc, y, ci, 0, pos, NH, NKV, HS, cap);
    cpu->kv_append(cpu, kc, vc, y + (size_t)pos * W, ci, pos, n, NH, NKV, HS, cap);
    gpu->kv_append(gpu, dk, dv, dx, dinv, 0, pos, NH, NKV, HS, cap);
    gpu->kv_append(gpu, dk, dv, op_at(dx, (size_t)pos * W), dinv, pos, n, NH, NKV, HS, cap);
    float *hx = host_op(dx, Q), *hk = host(dk, K), *hv = host(dv, K);
    compare("kv_append", "qkv", sh, hx, y, Q, tol_op(TOL_ELEM));
    size_t vbad = 0, rows = (size_t)NKV * T, kw = 0; /* the rows written: g cap + t, t < T */
    float *gk = malloc(rows * HS * 4), *ck = malloc(rows * HS * 4);
    for (int g = 0; g < NKV; g++)
        for (int t = 0; t < T; t++, kw++) {
            size_t at = ((size_t)g * cap + t) * HS;
            memcpy(gk + kw * HS, hk + at, HS * 4);
            memcpy(ck + kw * HS, kc + at, HS * 4);
            vbad += memcmp(hv + at, vc + at, HS * 4) != 0;
        }
    /* the GPU's cache holds its rotated qkv as rounded to the operand type */
    compare("kv_append", "kcache", sh, gk, ck, rows * HS, tol_op(TOL_ELEM));
    none_wrong("kv_append vcache rows", sh, vbad, rows);
    if (!rope) same_bits("kv_append kcache", sh, gk, ck, rows * HS);
    cpu->attention_decode(cpu, out, y + (size_t)pos * W, kc, vc, pos, n, NH, NKV, HS, cap);
    gpu->attention_decode(gpu, dout, op_at(dx, (size_t)pos * W), dk, dv, pos, n, NH, NKV, HS, cap);
    float *h = host_op(dout, Y);
    compare("attention_decode", "out", sh, h, out, Y, tol_op(tol_gemm()));
    free(h);
    /* one step: the first new row alone, keys 0..pos */
    cpu->attention_decode(cpu, out, y + (size_t)pos * W, kc, vc, pos, 1, NH, NKV, HS, cap);
    gpu->attention_decode(gpu, dout, op_at(dx, (size_t)pos * W), dk, dv, pos, 1, NH, NKV, HS, cap);
    h = host_op(dout, (size_t)NH * HS);
    compare("attention_decode", "out n=1", sh, h, out, (size_t)NH * HS, tol_op(tol_gemm()));
    void *all[] = {dinv, dx, dk, dv, dout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(inv), free(x), free(y), free(kc), free(vc), free(out), free(hx), free(hk), free(hv);
    free(gk), free(ck), free(h);
}

/* SwiGLU ([Note: SwiGLU] in src/backend/backend.h) over n values (an odd n: the kernels'
 * one-at-a-time tail runs too), gates up to saturation; both outputs poisoned first. */
static void check_swiglu(size_t n, const char *sh) {
    float *gt = rnd(n, 8), *up = rnd(n, 2), *d = rnd(n, 1), *out = nanbuf(n);
    if (n > 2) {
        gt[0] = 95.0f;
        gt[1] = -95.0f;
    }
    float *dgt = dev(gt, n * 4), *dup_ = dev(up, n * 4), *dd = dev(d, n * 4);
    void *dout = dev_op_nan(n), *dgg = dev_op_nan(n), *dgu = dev_op_nan(n);
    gpu->swiglu_forward(gpu, dout, dgt, dup_, n);
    cpu->swiglu_forward(cpu, out, gt, up, n);
    float *h = host_op(dout, n);
    compare("swiglu_forward", "out", sh, h, out, n, tol_op(TOL_ELEM));
    float *gg = nanbuf(n), *gu = nanbuf(n);
    gpu->swiglu_backward(gpu, dgg, dgu, dgt, dup_, dd, n);
    cpu->swiglu_backward(cpu, gg, gu, gt, up, d, n);
    float *hg = host_op(dgg, n), *hu = host_op(dgu, n);
    compare("swiglu_backward", "dgate", sh, hg, gg, n, tol_op(TOL_ELEM));
    compare("swiglu_backward", "dup", sh, hu, gu, n, tol_op(TOL_ELEM));
    void *all[] = {dgt, dup_, dd, dout, dgg, dgu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(gt);
    free(up);
    free(d);
    free(out);
    free(h);
    free(gg);
    free(gu);
    free(hg);
    free(hu);
}

static void check_elementwise(const Shape *s, const char *sh) {
    size_t n = (size_t)s->B * s->T * 4 * s->C;
    float *x = rnd(n, 4), *out = nanbuf(n);
    op_round(x, n);            /* GELU's input is an operand (the pre-activation as stored) */
    float *dx = dev(x, n * 4); /* add_inplace's fp32 source */
    void *dxo = dev_op(x, n), *dout = dev_op_nan(n);
    gpu->gelu_forward(gpu, dout, dxo, n);
    cpu->gelu_forward(cpu, out, x, n);
    float *h = host_op(dout, n);
    compare("gelu_forward", "out", sh, h, out, n, tol_op(TOL_ELEM));
    /* dinp (an operand) in a buffer of its own: it may no longer alias dout, which must come
     * back unchanged */
    float *g = rnd(n, 1), *dg = dev(g, n * 4), *gi = nanbuf(n);
    void *dgi = dev_op_nan(n);
    gpu->gelu_backward(gpu, dgi, dxo, dg, n);
    cpu->gelu_backward(cpu, gi, x, g, n);
    float *hg = host_op(dgi, n);
    compare("gelu_backward", "dinp", sh, hg, gi, n, tol_op(TOL_ELEM));
    float *hg2 = host(dg, n);
    same_bits("gelu_backward leaves dout", sh, hg2, g, n);
    float *a = rnd(n, 1), *da = dev(a, n * 4);
    gpu->add_inplace(gpu, da, dx, n);
    cpu->add_inplace(cpu, a, x, n);
    float *ha = host(da, n);
    compare("add_inplace", "dst", sh, ha, a, n, TOL_ELEM);
    void *all[] = {dx, dxo, dout, dg, dgi, da};
    for (size_t i = 0; i < 6; i++) gpu->dealloc(gpu, all[i]);
    free(x);
    free(out);
    free(h);
    free(g);
    free(gi);
    free(hg);
    free(hg2);
    free(a);
    free(ha);
}

/* [Note: logits type] in src/backend/backend.h: the head's logits are bf16 where the
 * backend says so (the CUDA backend at bf16 unless PPTRAIN_LOGITS=fp32), else fp32. */
static int logits_bf16(void) { return gpu->logits == PP_BF16; }

/* Device logits of n elements holding x, rounded in place to what they hold (NULL: NaN). */
static void *dev_logits(float *x, size_t n) {
    if (!logits_bf16()) return x ? dev(x, n * sizeof(float)) : dev_nan_f32(n);
    if (!x) return dev_op_nan(n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_widen(bf16_round(x[i]));
    return dev_op(x, n);
}

/* head_logits: logits[N,Vp] = x (operand) @ w^T at the logits type, against the CPU's
 * matmul_forward (its bf16 rounding within TOL_BF16_STORE), twice for the bits. */
static void check_head_logits(const Shape *s, const char *sh) {
    int N = s->B * s->T, C = s->C, Vp = s->Vp;
    size_t NV = (size_t)N * Vp;
    float *x = rnd((size_t)N * C, 1), *w = rnd((size_t)Vp * C, 0.5f), *want = nanbuf(NV);
    op_round(x, (size_t)N * C);
    void *dx = dev_op(x, (size_t)N * C), *dw = dev(w, (size_t)Vp * C * 4);
    void *d1 = dev_logits(NULL, NV), *d2 = dev_logits(NULL, NV);
    gpu->head_logits(gpu, d1, dx, dw, N, C, Vp);
    gpu->head_logits(gpu, d2, dx, dw, N, C, Vp);
    cpu->matmul_forward(cpu, want, x, w, NULL, N, C, Vp);
    float *h1 = logits_bf16() ? host_op(d1, NV) : host(d1, NV);
    float *h2 = logits_bf16() ? host_op(d2, NV) : host(d2, NV);
    double tol = tol_gemm();
    compare("head_logits", logits_bf16() ? "logits (bf16)" : "logits", sh, h1, want, NV,
            logits_bf16() && tol < TOL_BF16_STORE ? TOL_BF16_STORE : tol);
    same_bits("head_logits twice", sh, h2, h1, NV);
    void *all[] = {dx, dw, d1, d2};
    free_all(all, 4);
    free(x);
    free(w);
    free(want);
    free(h1);
    free(h2);
}

static void check_crossentropy(const Shape *s, const char *sh) {
    int N = s->B * s->T, V = s->V, Vp = s->Vp;
    size_t NV = (size_t)N * Vp;
    int *tgt = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tgt[i] = (int)(urand() * V);
    float *lg = rnd(NV, 5), *loss = nanbuf(N), *loss2 = nanbuf(N);
    int *dt = dev(tgt, N * sizeof(int));
    /* the logits as the GPU holds them (rounded to bf16 in lg when it holds bf16) */
    void *dl = dev_logits(lg, NV), *dl2 = dev_logits(lg, NV), *dl3 = dev_logits(lg, NV);
    float *lg2 = dup(lg, NV);
    float *dloss = dev(loss, N * 4), *dloss2 = dev(loss, N * 4), *dloss3 = dev(loss, N * 4);
    void *dd = dev_op_nan(NV); /* dlogits in a buffer of their own */
    /* in place (dlogits = logits), where the logits are of the operand type */
    int inplace = gpu->logits == gpu->operand;
    if (inplace) gpu->crossentropy_forward_backward(gpu, dl, dloss, dl, dt, 1.0f / 777, N, V, Vp);
    gpu->crossentropy_forward_backward(gpu, dd, dloss3, dl3, dt, 1.0f / 777, N, V, Vp);
    cpu->crossentropy_forward_backward(cpu, lg, loss, lg, tgt, 1.0f / 777, N, V, Vp);
    if (inplace) {
        float *hl = host_op(dl, NV), *hloss = host(dloss, N), *hd = host_op(dd, NV);
        compare("crossentropy_fwd_bwd", "dlogits", sh, hl, lg, NV, tol_op(TOL_RED));
        compare("crossentropy_fwd_bwd", "losses", sh, hloss, loss, N, TOL_RED);
        same_bits("crossentropy_fwd_bwd in place=own buffer", sh, hl, hd, NV);
        free(hl);
        free(hloss);
        free(hd);
    }
    float *hd = host_op(dd, NV), *hloss3 = host(dloss3, N);
    compare("crossentropy_fwd_bwd (own)", "dlogits", sh, hd, lg, NV, tol_op(TOL_RED));
    compare("crossentropy_fwd_bwd (own)", "losses", sh, hloss3, loss, N, TOL_RED);
    gpu->crossentropy_forward(gpu, dl2, dloss2, dt, N, V, Vp);
    cpu->crossentropy_forward(cpu, lg2, loss2, tgt, N, V, Vp);
    float *hloss2 = host(dloss2, N);
    compare("crossentropy_forward", "losses", sh, hloss2, loss2, N, TOL_RED);
    void *all[] = {dt, dl, dl2, dl3, dloss, dloss2, dloss3, dd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(tgt);
    free(lg);
    free(lg2);
    free(loss);
    free(loss2);
    free(hd);
    free(hloss3);
    free(hloss2);
}

/* ---- flash attention (cuda/flash_attn.cu, issue 11) --------------------------------------
 * The CUDA backend opened with PPTRAIN_ATTENTION=flash at precision bf16, against the
 * CPU op: out and dqkv within the bf16 GEMM tolerance 1.5e-2 (relative L2; the host
 * emulation test/test_flash_emul.c of the same tiling gives 1.5e-3 to 3.3e-3, the bf16
 * roundings of Q, K, V, dO, P and dS with fp32 accumulation), the saved log-sum-exp
 * within 2e-2 absolute of a double reference (its error is the bf16 score error, ~5e-3
 * in the emulation), every output poisoned with NaN first, and forward and backward
 * run twice for the same bits. Shapes: T = 1, 7, 64, 127, 129, 1024 (not multiples of
 * the 64-row tiles), head sizes 32, 48, 64, 80, 96, 128 and 20 (zero-padded to the
 * kernels' template sizes), NH = 1 and 12, B = 1 and 3. Every shape runs under both
 * backwards of PPTRAIN_FLASH_BWD ([Note: flash backward v2] in cuda/flash_attn.cu): v2,
 * the default, and v1 (the shape's name starts "v1"); v2 must also give v1's bits (v2
 * reorders no sum: its kernels skip only tiles whose every product is zero). Returns the
 * backward's dqkv (host, the caller frees it); given v2's (v2, on the same inputs), it
 * must be the same bits. */

static float *check_flash_shape(int B, int T, int NH, int NKV, int hs, const char *tag,
                                const float *v2) {
    int C = NH * hs, N = B * T, W = (NH + 2 * NKV) * hs, G = NH / NKV;
    char sh[96];
    snprintf(sh, sizeof sh, "%s%sB=%d T=%d NH=%d NKV=%d hs=%d", tag, *tag ? " " : "", B, T, NH,
             NKV, hs);
    size_t Q = (size_t)N * W, NC = (size_t)N * C, nl = (size_t)B * NH * T;
    size_t nsave = cpu->attention_saved_floats(cpu, B, T, NH);
    size_t gsave = gpu->attention_saved_floats(gpu, B, T, NH);
    float *qkv = rnd(Q, 1), *out = nanbuf(NC), *att = nanbuf(nsave), *poison = nanbuf(gsave);
    op_round(qkv, Q); /* qkv is an operand */
    float *datt = dev(poison, gsave * 4), *datt2 = dev(poison, gsave * 4);
    void *dq = dev_op(qkv, Q), *dout = dev_op_nan(NC), *dout2 = dev_op_nan(NC);
    gpu->attention_forward(gpu, dout, datt, dq, B, T, NH, NKV, hs);
    gpu->attention_forward(gpu, dout2, datt2, dq, B, T, NH, NKV, hs);
    cpu->attention_forward(cpu, out, att, qkv, B, T, NH, NKV, hs);
    float *h = host_op(dout, NC), *h2 = host_op(dout2, NC), *ha = host(datt, gsave);
    float *ha2 = host(datt2, gsave);
    compare("flash attention_forward", "out", sh, h, out, NC, tol_op(1.5e-2));
    same_bits("flash attention_forward", sh, h, h2, NC);
    same_bits("flash attention_forward lse", sh, ha, ha2, gsave);
    int flash = gpu->description && gsave == nl &&
                (strstr(gpu->description, "attention flash") ||
                 strstr(gpu->description, "attention cudnn"));
    if (flash) { /* the log-sum-exp of each row's scaled scores, against double */
        double worst = 0, scale = 1.0 / sqrt((double)hs);
        size_t bad = 0;
        double *sc = malloc((size_t)T * sizeof(double));
        for (int b = 0; b < B; b++)
            for (int hh = 0; hh < NH; hh++)
                for (int i = 0; i < T; i++) {
                    const float *qi = qkv + ((size_t)b * T + i) * W + (size_t)hh * hs;
                    double mx = -INFINITY, sum = 0;
                    for (int j = 0; j <= i; j++) {
                        const float *kj = qkv + ((size_t)b * T + j) * W +
                                          (size_t)(NH + hh / G) * hs;
                        double d = 0;
                        for (int c = 0; c < hs; c++) d += (double)qi[c] * kj[c];
                        sc[j] = d * scale;
                        mx = fmax(mx, sc[j]);
                    }
                    for (int j = 0; j <= i; j++) sum += exp(sc[j] - mx);
                    double e = fabs(ha[((size_t)b * NH + hh) * T + i] - (mx + log(sum)));
                    if (!(e <= 1e30)) bad++; /* NaN or inf: not written */
                    else if (e > worst) worst = e;
                }
        free(sc);
        checks++;
        int ok = !bad && worst <= 2e-2;
        failures += !ok;
        printf("%-4s %-28s %-10s %-34s %-5s max abs %.2e  tol 2e-02%s\n", ok ? "ok" : "FAIL",
               "flash attention_forward", "lse", sh, prec, worst,
               bad ? "  (NaN: a row not written)" : "");
    } else {
        printf("note flash attention_forward: not the flash path (saves %zu floats; the "
               "log-sum-exp is %zu): no lse check\n",
               gsave, nl);
    }
    float *g = rnd(NC, 1), *gq = nanbuf(Q);
    op_round(g, NC); /* dout is an operand */
    void *dg = dev_op(g, NC), *dgq = dev_op_nan(Q), *dgq2 = dev_op_nan(Q);
    float *scratch = malloc(cpu->scratch_floats(cpu, N, T, C) * sizeof(float));
    float *gscratch = gpu->alloc(gpu, gpu->scratch_floats(gpu, N, T, C) * sizeof(float));
    gpu->attention_backward(gpu, dgq, dg, dq, dout, datt, B, T, NH, NKV, hs, gscratch);
    gpu->attention_backward(gpu, dgq2, dg, dq, dout, datt, B, T, NH, NKV, hs, gscratch);
    cpu->attention_backward(cpu, gq, g, qkv, out, att, B, T, NH, NKV, hs, scratch);
    float *hq = host_op(dgq, Q), *hq2 = host_op(dgq2, Q);
    compare("flash attention_backward", "dqkv", sh, hq, gq, Q, tol_op(1.5e-2));
    same_bits("flash attention_backward", sh, hq, hq2, Q);
    if (v2) same_bits("flash attention_backward v2=v1", sh, v2, hq, Q);
    void *all[] = {dq, dout, dout2, datt, datt2, dg, dgq, dgq2, gscratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->dealloc(gpu, all[i]);
    free(qkv);
    free(out);
    free(att);
    free(poison);
    free(h);
    free(h2);
    free(ha);
    free(ha2);
    free(g);
    free(gq);
    free(hq2);
    free(scratch);
    return hq;
}

typedef int (*OpenFn)(const char *precision, char *why, size_t n);
static int open_env(OpenFn open, const char *var, const char *val, const char *precision,
                    char *why, size_t n);

/* Open the backend at bf16 with PPTRAIN_ATTENTION=att and PPTRAIN_FLASH_BWD=bwd (NULL:
 * unset; both variables restored after). */
static int open_attention(OpenFn open, const char *att, const char *bwd, char *why, size_t n) {
    const char *names[2] = {"PPTRAIN_ATTENTION", "PPTRAIN_FLASH_BWD"}, *vals[2] = {att, bwd};
    char saved[2][64];
    int had[2];
    for (int i = 0; i < 2; i++) {
        const char *was = getenv(names[i]);
        had[i] = was != NULL;
        snprintf(saved[i], sizeof saved[i], "%s", was ? was : "");
        if (vals[i]) setenv(names[i], vals[i], 1);
        else unsetenv(names[i]);
    }
    prec = "bf16";
    int rc = open("bf16", why, n);
    for (int i = 0; i < 2; i++) {
        if (had[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
    }
    return rc;
}

/* One check: an open with var=val set (rc, why) must have failed naming var; a backend
 * that opened anyway is released. */
static void refused(int rc, const char *var, const char *val, const char *why) {
    int ok = rc != PP_OK && strstr(why, var);
    checks++;
    failures += !ok;
    printf("%-4s %s=%s refused at open: %s\n", ok ? "ok" : "FAIL", var, val,
           rc == PP_OK ? "opened" : why);
    if (rc == PP_OK) backend_release(gpu);
}

/* The flash attention shapes (check_flash, check_cudnn). */
typedef struct {
    int B, T, NH, NKV, hs;
} FlashShape;
static const FlashShape flash_shapes[] = {
    {1, 1, 1, 1, 64},      {3, 7, 12, 12, 64},    {1, 64, 12, 12, 32},  {3, 127, 12, 12, 64},
    {1, 129, 1, 1, 80},    {3, 129, 12, 12, 128}, {1, 127, 12, 12, 96}, {1, 129, 16, 16, 48},
    {3, 70, 1, 1, 20},     {3, 1024, 12, 12, 64}, {1, 1024, 1, 1, 128}, {1, 1024, 12, 12, 80},
    {3, 1024, 1, 1, 32},
    /* grouped-query attention: groups of 2, 3, 4 and 12 (multi-query) */
    {2, 1, 4, 2, 64},      {3, 129, 12, 4, 64},   {1, 127, 6, 2, 96},   {3, 70, 9, 3, 80},
    {2, 129, 8, 1, 32},    {1, 128, 4, 2, 128},   {2, 1024, 12, 1, 64}, {1, 1024, 32, 8, 128},
    {3, 1024, 8, 4, 64},
};

/* --cudnn: run cuDNN's attention checks with the rest (default), skip them, or run only
 * them (a GPU session gives them a step of their own: each graph is compiled by NVRTC at
 * its first call, seconds that must not cost the other checks' results). */
enum { CUDNN_WITH, CUDNN_SKIP, CUDNN_ONLY };
static int cudnn_mode = CUDNN_WITH;

/* [Note: cuDNN attention] in cuda/cudnn_attn.cc: PPTRAIN_ATTENTION=cudnn on eight of the
 * flash shapes (each a graph cuDNN compiles at its first call: T = 1, which runs the flash
 * kernels, short and long sequences, head sizes 48, 64 and 128, groups of 3, 4 and 12), the
 * same tolerances and bits twice; not in the small set (compute-sanitizer); skipped,
 * saying why, where cuDNN cannot be loaded or the backend was built without it. Returns
 * 0, or 1 when the backend cannot be opened for another reason. */
static int check_cudnn(OpenFn open, int small) {
    static const int cudnn_shapes[] = {0, 1, 5, 7, 9, 14, 19, 20};
    char why[PP_ERR_MAX];
    uint64_t seed = rng;
    if (small) {
        printf("note cuDNN attention: not in the small set\n");
    } else if (open_attention(open, "cudnn", NULL, why, sizeof why) != PP_OK) {
        if (!strstr(why, "cannot load") && !strstr(why, "built without")) {
            printf("FAIL open the CUDA backend with PPTRAIN_ATTENTION=cudnn: %s\n", why);
            return 1;
        }
        printf("skip cuDNN attention: %s\n", why);
    } else {
        printf("gpu_ops: cuDNN attention checks on %s\n",
               gpu->description ? gpu->description : "the CPU (--cpu)");
        for (size_t k = 0; k < sizeof cudnn_shapes / sizeof cudnn_shapes[0]; k++) {
            const FlashShape *f = &flash_shapes[cudnn_shapes[k]];
            rng = seed + (uint64_t)cudnn_shapes[k] * 0x51ED27ull;
            free(check_flash_shape(f->B, f->T, f->NH, f->NKV, f->hs, "cudnn", NULL));
        }
        backend_release(gpu);
    }
    return 0;
}

/* The flash checks on a backend of their own (PPTRAIN_ATTENTION=flash, bf16); then the
 * materialised path at bf16 (no longer the default there, still the fallback) with the
 * attention check above; then cuDNN's (PPTRAIN_ATTENTION=cudnn) on the flash shapes; then
 * bad values of the variables, which the open must refuse naming them (a real CUDA
 * backend only: the CPU ignores the variables). Returns 0, or 1
 * when a backend cannot be opened. small: only the shapes with T <= 129 (every template
 * size and tile edge, cheap enough for compute-sanitizer's `gpu_ops --prec fp32` in
 * scripts/gpu/device-check). */
static int check_flash(OpenFn open, int small, int cpu_mode) {
    char why[PP_ERR_MAX];
    /* the backward v2 (PPTRAIN_FLASH_BWD unset), then v1 ([Note: flash backward v2]) on
     * the same inputs (each shape's own seed), v1's dqkv the bits of v2's */
    enum { NS = sizeof flash_shapes / sizeof flash_shapes[0] };
    float *v2[NS] = {NULL};
    uint64_t seed = rng;
    for (int v1 = 0; v1 < 2; v1++) {
        if (open_attention(open, "flash", v1 ? "v1" : NULL, why, sizeof why) != PP_OK) {
            printf("FAIL open the CUDA backend with PPTRAIN_ATTENTION=flash%s: %s\n",
                   v1 ? " PPTRAIN_FLASH_BWD=v1" : "", why);
            return 1;
        }
        printf("gpu_ops: flash attention checks on %s\n",
               gpu->description ? gpu->description : "the CPU (--cpu)");
        for (int i = 0; i < NS; i++) {
            const FlashShape *f = &flash_shapes[i];
            if (small && f->T > 129) continue;
            rng = seed + (uint64_t)i * 0x51ED27ull;
            float *dqkv = check_flash_shape(f->B, f->T, f->NH, f->NKV, f->hs, v1 ? "v1" : "",
                                            v1 ? v2[i] : NULL);
            if (v1) {
                free(v2[i]);
                free(dqkv);
            } else {
                v2[i] = dqkv;
            }
        }
        backend_release(gpu);
    }

    if (open_attention(open, "materialized", NULL, why, sizeof why) != PP_OK) {
        printf("FAIL open the CUDA backend with PPTRAIN_ATTENTION=materialized: %s\n", why);
        return 1;
    }
    printf("gpu_ops: the materialised attention at bf16 on %s\n",
           gpu->description ? gpu->description : "the CPU (--cpu)");
    static const Shape ms[] = {{3, 67, 768, 12, 0, 0}, {1, 130, 1024, 16, 0, 0}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        char sh[96];
        snprintf(sh, sizeof sh, "materialized B=%d T=%d C=%d NH=%d", ms[i].B, ms[i].T,
                 ms[i].C, ms[i].NH);
        check_attention(&ms[i], sh);
    }
    check_attention_gqa(2, 67, 12, 4, 64, "materialized B=2 T=67 NH=12 NKV=4 HS=64");
    backend_release(gpu);

    if (cudnn_mode != CUDNN_SKIP && check_cudnn(open, small)) return 1;

    if (!cpu_mode) {
        refused(open_attention(open, "bogus", NULL, why, sizeof why), "PPTRAIN_ATTENTION", "bogus",
                why);
        refused(open_attention(open, "flash", "dq+bogus", why, sizeof why), "PPTRAIN_FLASH_BWD",
                "dq+bogus", why);
        /* cuDNN's path runs on bf16 operands only */
        refused(open_env(open, "PPTRAIN_ATTENTION", "cudnn", "fp32", why, sizeof why),
                "PPTRAIN_ATTENTION", "cudnn (at fp32)", why);
    }
    return 0;
}

/* Open the backend at `precision` with the environment variable var=val (restored after;
 * val NULL: unset). */
static int open_env(OpenFn open, const char *var, const char *val, const char *precision,
                    char *why, size_t n) {
    const char *was = getenv(var);
    char saved[64];
    snprintf(saved, sizeof saved, "%s", was ? was : "");
    if (val) setenv(var, val, 1);
    else unsetenv(var);
    prec = precision;
    int rc = open(precision, why, n);
    if (was) setenv(var, saved, 1);
    else unsetenv(var);
    return rc;
}

/* The older code paths that environment switches restore without a rebuild, each on a
 * bf16 backend of its own, so that the GPU session can fall back on one and A/B it
 * (bench/gpu.sh), and the GEMM tuning (a new path, off by default); then a bad value of
 * each, which the open must refuse naming the variable (a real CUDA backend only: the
 * CPU ignores them). Returns 0, or 1 when a
 * backend cannot be opened. */
static int check_switches(OpenFn open, int small, int cpu_mode) {
    static const struct {
        const char *var, *old, *bogus;
    } sw[] = {
        {"PPTRAIN_CE", "two-pass", "one-and-a-half"},
        {"PPTRAIN_LOGITS", "fp32", "half"},   /* [Note: logits type] */
        {"PPTRAIN_GELU_EPILOGUE", "0", "on"}, /* [Note: fused GELU] */
        /* their paths are checked above, under both switches at once; here the refusal */
        {"PPTRAIN_FUSE_GELU", "0", "off"},
        {"PPTRAIN_FUSE_RESIDUAL", "0", "no"},
        {"PPTRAIN_FUSE_BGRAD", "0", "yes"},
        {"PPTRAIN_FUSE_CAST", "0", "maybe"},
        {"PPTRAIN_ADAMW_COPY", "0", "sometimes"}, /* [Note: kept weight copy] */
        {"PPTRAIN_RESIDUAL", "fp32", "bf8"},      /* [Note: residual stream type] */
        {"PPTRAIN_GEMM_TUNE", "1", "fast"},       /* a new path, off by default: [Note: GEMM
                                                     tuning] in cuda/backend_cuda.cu */
    };
    char why[PP_ERR_MAX];
    for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++) {
        if (open_env(open, sw[i].var, sw[i].old, "bf16", why, sizeof why) != PP_OK) {
            printf("FAIL open the CUDA backend with %s=%s: %s\n", sw[i].var, sw[i].old, why);
            return 1;
        }
        printf("gpu_ops: %s=%s on %s\n", sw[i].var, sw[i].old,
               gpu->description ? gpu->description : "the CPU (--cpu)");
        if (!strcmp(sw[i].var, "PPTRAIN_CE")) {
            static const Shape s1 = {2, 37, 64, 1, 251, 256}, s2 = {1, 3, 64, 1, 50257, 50304};
            check_crossentropy(&s1, "PPTRAIN_CE=two-pass B=2 T=37 V=251/256");
            if (!small) check_crossentropy(&s2, "PPTRAIN_CE=two-pass B=1 T=3 V=50257/50304");
        }
        if (!strcmp(sw[i].var, "PPTRAIN_GELU_EPILOGUE")) { /* gelu_forward's bits again */
            none_wrong("PPTRAIN_GELU_EPILOGUE=0: gelu_in_gemm", "the backend's flag",
                       (size_t)gpu->gelu_in_gemm, 1);
            check_matmul_gelu_forward(2 * 37, 64, 256, 1,
                                      "PPTRAIN_GELU_EPILOGUE=0 N=74 C=64 H=256");
        }
        if (!strcmp(sw[i].var, "PPTRAIN_ADAMW_COPY")) check_kept_copy(); /* a new copy each */
        if (!strcmp(sw[i].var, "PPTRAIN_RESIDUAL")) { /* the fp32 residual's paths again */
            static const Shape s1 = {2, 37, 64, 1, 251, 256};
            none_wrong("PPTRAIN_RESIDUAL=fp32: the residual type", "be.residual",
                       (size_t)(gpu->residual != PP_F32), 1);
            check_encoder(&s1, "PPTRAIN_RESIDUAL=fp32 B=2 T=37 C=64");
            check_layernorm(&s1, "PPTRAIN_RESIDUAL=fp32 B=2 T=37 C=64");
            check_rmsnorm(&s1, "PPTRAIN_RESIDUAL=fp32 B=2 T=37 C=64");
            check_matmul_residual(2 * 37, 64, 192, 1, "PPTRAIN_RESIDUAL=fp32");
        }
        if (!strcmp(sw[i].var, "PPTRAIN_GEMM_TUNE")) { /* every kind of GEMM, each tuned at
                                                          its first call, then its bits again */
            static const Shape s1 = {2, 37, 64, 1, 251, 256};
            const char *t = "PPTRAIN_GEMM_TUNE=1";
            check_matmul(2 * 37, 64, 192, 1, t);
            check_matmul(2 * 37, 64, 67, 0, t);
            check_matmul_operand(2 * 37, 64, 192, 1, t);
            check_matmul_gelu(2 * 37, 64, 256, 1, t);
            check_matmul_residual(2 * 37, 64, 64, 1, t);
            check_matmul_residual(2 * 37, 256, 64, 0, t);
            check_head_logits(&s1, t);
            check_bias_grad_shapes(small, t);
            if (!small) { /* GPT-2's MLP and projections at B 1, T 1024 */
                check_matmul_gelu(1024, 768, 3072, 1, t);
                check_matmul_residual(1024, 768, 768, 1, t);
                check_matmul_residual(1024, 3072, 768, 1, t);
                check_matmul_operand(1024, 768, 2304, 1, t);
            }
        }
        if (!strcmp(sw[i].var, "PPTRAIN_LOGITS")) {
            static const Shape s1 = {2, 37, 64, 1, 251, 256}, s2 = {1, 3, 64, 1, 50257, 50304};
            check_crossentropy(&s1, "PPTRAIN_LOGITS=fp32 B=2 T=37 V=251/256");
            check_head_logits(&s1, "PPTRAIN_LOGITS=fp32 B=2 T=37 V=251/256");
            if (!small) check_crossentropy(&s2, "PPTRAIN_LOGITS=fp32 B=1 T=3 V=50257/50304");
        }
        backend_release(gpu);
        if (!cpu_mode) {
            refused(open_env(open, sw[i].var, sw[i].bogus, "bf16", why, sizeof why), sw[i].var,
                    sw[i].bogus, why);
        }
    }
    return 0;
}

/* The norms' backward paths (PPTRAIN_LN_BWD, [Note: one-pass norm backward] in
 * cuda/norm_kernels.cuh) at `precision`: the one-pass kernel's edges (check_norm_edges);
 * under one-pass:32 (chunks of 32 rows, not a whole number of steps at N = 2101); under
 * two-pass, the kernels of before, still the fallback; then a bad value, which the open
 * must refuse naming it (a real CUDA backend only: the CPU ignores the variable). Returns
 * 0, or 1 when a backend cannot be opened. */
static int check_norm_paths(OpenFn open, const char *precision, int cpu_mode) {
    static const Shape ps[] = {{1, 2101, 768, 1, 0, 0},
                               {1, 2101, 771, 1, 0, 0},
                               {3, 67, 768, 12, 0, 0}};
    const char *vals[] = {"one-pass", "one-pass:32", "two-pass"};
    char why[PP_ERR_MAX];
    for (int v = 0; v < 3; v++) {
        if (open_env(open, "PPTRAIN_LN_BWD", vals[v], precision, why, sizeof why) != PP_OK) {
            printf("FAIL open the CUDA backend with PPTRAIN_LN_BWD=%s: %s\n", vals[v], why);
            return 1;
        }
        printf("gpu_ops: the norms' backward, PPTRAIN_LN_BWD=%s, on %s\n", vals[v],
               gpu->description ? gpu->description : "the CPU (--cpu)");
        if (v == 0)
            check_norm_edges();
        else
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
                char sh[96];
                snprintf(sh, sizeof sh, "%s B=%d T=%d C=%d", vals[v], ps[i].B, ps[i].T, ps[i].C);
                check_layernorm(&ps[i], sh);
                check_rmsnorm(&ps[i], sh);
            }
        if (v == 2) check_norm_misaligned(37, 768, "two-pass N=37 C=768");
        backend_release(gpu);
    }
    if (!cpu_mode) {
        refused(open_env(open, "PPTRAIN_LN_BWD", "one-pass:0", precision, why, sizeof why),
                "PPTRAIN_LN_BWD", "one-pass:0", why);
    }
    return 0;
}

/* ---- the chunked head ([Note: chunked head] in src/model/model.c) ------------------------ */

typedef struct {
    double loss, vloss;              /* the loss sums: training, validation */
    float *losses, *vlosses, *dlnf, *dwte; /* [N], [N], [N,C], [Vp,C] */
} HeadOut;

/* n floats of be's memory at p, on the host (malloc'd). */
static float *fetch(const Backend *be, const void *p, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    be->to_host(be, h, p, n * sizeof(float));
    be->wait(be);
    return h;
}

/* The last stage's head alone (final LayerNorm, tied head, loss; no layers) through
 * src/model/model.c on `base` with its logits in chunks of `rows` (0: all N): a validation
 * forward, then a training one. x[N,C] the stage input, tgt[N] the targets. */
static void head_run(const Backend *base, const Shape *s, int rows, const float *x, const int *tgt,
                     HeadOut *o) {
    Backend be = *base; /* the model keeps this pointer: it lives until model_free */
    be.logits_chunk_rows = rows;
    ModelDims d = {.V = s->V, .Vp = s->Vp, .maxT = s->T, .L = 1, .NH = s->NH, .C = s->C,
                   .tied = 1, .arch = &arch_gpt2};
    ChunkSpec spec = {1, 1, 1, 0, 1, 1, 0}; /* stage 1 of 2: layers [1, 1), the head */
    int N = s->B * s->T, C = s->C;
    Model m;
    model_init(&m, &d, &spec, 1, s->B, s->T, &be);
    model_init_weights(&m, 11, 0.05f);
    ActSlot *a = &m.chunks[0].slots[0];
    if (be.residual ==
        PP_BF16) { /* the input at the residual type ([Note: residual stream type]) */
        uint16_t *h = malloc((size_t)N * C * 2);
        for (size_t i = 0; i < (size_t)N * C; i++) h[i] = bf16_round(x[i]);
        be.to_device(&be, a->input, h, (size_t)N * C * 2);
        be.wait(&be); /* h must outlive the copy */
        free(h);
    } else {
        be.to_device(&be, a->input, x, (size_t)N * C * sizeof(float));
    }
    be.to_device(&be, a->targets, tgt, (size_t)N * sizeof(int));
    double *dsum = be.alloc(&be, sizeof(double));
    model_zero_grads(&m);
    model_forward(&m, 0, 0, 0.0f, 0, dsum);
    be.to_host(&be, &o->vloss, dsum, sizeof(double));
    o->vlosses = fetch(&be, m.losses, N);
    model_forward(&m, 0, 0, 1.0f / N, 1, dsum);
    be.to_host(&be, &o->loss, dsum, sizeof(double));
    o->losses = fetch(&be, m.losses, N);
    o->dlnf = fetch_op(&be, model_head_grad(&m, 0, 0), (size_t)N * C); /* an operand */
    o->dwte = fetch(&be, m.dhead, (size_t)s->Vp * C);
    be.dealloc(&be, dsum);
    model_free(&m);
}

static void head_free(HeadOut *o) {
    free(o->losses);
    free(o->vlosses);
    free(o->dlnf);
    free(o->dwte);
}

/* The GPU's head in chunks of `rows` (0: all) against the CPU's unchunked head: every
 * output at the GEMM tolerance of the precision (the logits and both head GEMMs are
 * matmuls; the loss sum as a one-element comparison), and the same bits run twice. */
static void check_head(const Shape *s, const char *sh0, int rows) {
    int N = s->B * s->T, C = s->C;
    char sh[128];
    snprintf(sh, sizeof sh, "%s rows=%d%s", sh0, rows, rows == 0 || rows >= N ? " (all)" : "");
    float *x = rnd((size_t)N * C, 2);
    res_round(x, (size_t)N * C); /* the head's input is the residual stream: the CPU reads it too */
    int *tgt = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tgt[i] = (int)(urand() * s->V);
    HeadOut g, g2, c;
    head_run(gpu, s, rows, x, tgt, &g);
    head_run(gpu, s, rows, x, tgt, &g2);
    head_run(cpu, s, 0, x, tgt, &c);
    float gl[2] = {(float)g.loss, (float)g.vloss}, cl[2] = {(float)c.loss, (float)c.vloss};
    compare("head (model.c)", "loss sums", sh, gl, cl, 2, tol_gemm());
    compare("head (model.c)", "losses", sh, g.losses, c.losses, N, tol_gemm());
    compare("head (model.c)", "val losses", sh, g.vlosses, c.vlosses, N, tol_gemm());
    compare("head (model.c)", "dlnf", sh, g.dlnf, c.dlnf, (size_t)N * C, tol_gemm());
    compare("head (model.c)", "dwte", sh, g.dwte, c.dwte, (size_t)s->Vp * C, tol_gemm());
    same_bits("head (model.c) dwte", sh, g.dwte, g2.dwte, (size_t)s->Vp * C);
    same_bits("head (model.c) dlnf", sh, g.dlnf, g2.dlnf, (size_t)N * C);
    head_free(&g);
    head_free(&g2);
    head_free(&c);
    free(x);
    free(tgt);
}

static int cpu_as_gpu; /* --cpu: 1, --emu: 2 */

static int open_gpu(const char *precision, char *why, size_t n) {
    const char *ov = getenv("PPTRAIN_BF16_OPERANDS"); /* fp32: the CPU's types at bf16 too */
    if (cpu_as_gpu == 2 && !strcmp(precision, "bf16") && !(ov && !strcmp(ov, "fp32"))) {
        /* --emu: test/emu_bf16.h, with the switches that change what it stores */
        static Backend emu; /* the table the backend returns, flagged as device memory */
        static char desc[160];
        const char *ge = getenv("PPTRAIN_GELU_EPILOGUE"), *rv = getenv("PPTRAIN_RESIDUAL"),
                   *lg = getenv("PPTRAIN_LOGITS");
        int gelu_off = ge && !strcmp(ge, "0"), res32 = rv && !strcmp(rv, "fp32"),
            lg32 = lg && !strcmp(lg, "fp32");
        emu = *emu_bf16_backend(!gelu_off, res32 ? PP_F32 : PP_BF16);
        if (lg32) emu.logits = PP_F32;
        emu.device_memory = 1;
        snprintf(desc, sizeof desc, "the CPU posing as the bf16 CUDA backend (--emu)%s%s%s",
                 gelu_off ? ", PPTRAIN_GELU_EPILOGUE=0" : "",
                 res32 ? ", PPTRAIN_RESIDUAL=fp32" : "", lg32 ? ", PPTRAIN_LOGITS=fp32" : "");
        emu.description = desc;
        gpu = &emu;
        return PP_OK;
    }
    if (cpu_as_gpu) {
        gpu = backend_cpu_staged();
        return PP_OK;
    }
    Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.device, sizeof cfg.device, "cuda");
    snprintf(cfg.precision, sizeof cfg.precision, "%s", precision);
    BackendSizes sz = {0}; /* reserve nothing: the checks grow what they need */
    char note[256];
    return backend_select(&cfg, 0, &sz, &gpu, note, sizeof note, why, n);
}

int main(int argc, char **argv) {
    static const char usage[] = "usage: gpu_ops [--probe] [--prec fp32|tf32|bf16] [--seed S] "
                                "[--cpu|--emu] [--small] [--cudnn skip|only]\n";
    setvbuf(stdout, NULL, _IOLBF, 0);
    int probe = 0, small = 0;
    const char *only = NULL;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--probe")) probe = 1;
        else if (!strcmp(argv[i], "--prec") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cpu")) cpu_as_gpu = 1;
        else if (!strcmp(argv[i], "--emu"))
            cpu_as_gpu = 2;
        else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--cudnn") && i + 1 < argc && !strcmp(argv[i + 1], "skip"))
            cudnn_mode = CUDNN_SKIP, i++;
        else if (!strcmp(argv[i], "--cudnn") && i + 1 < argc && !strcmp(argv[i + 1], "only"))
            cudnn_mode = CUDNN_ONLY, i++;
        else
            return fputs(usage, stderr), 2;
    }
    char why[PP_ERR_MAX];
    if (open_gpu("fp32", why, sizeof why) != PP_OK) {
        printf("skipped: no GPU (%s)\n", why);
        return 77;
    }
    printf("gpu_ops: %s, seed %llu\n",
           cpu_as_gpu == 2 ? "the CPU backend in the GPU's place, at bf16 posing as the bf16 CUDA "
                             "backend (--emu)"
           : cpu_as_gpu    ? "the CPU backend in the GPU's place (--cpu)"
                           : gpu->description,
           (unsigned long long)seed);
    const void *entries[] = {gpu->alloc, gpu->dealloc, gpu->to_device, gpu->to_host, gpu->zero,
                             gpu->copy, gpu->wait, gpu->sum, gpu->sumsq, gpu->adamw_update,
                             gpu->sgd_update, gpu->encoder_forward, gpu->encoder_backward,
                             gpu->layernorm_forward, gpu->layernorm_backward, gpu->rmsnorm_forward,
                             gpu->rmsnorm_backward, gpu->rope_forward, gpu->rope_backward,
                             gpu->swiglu_forward, gpu->swiglu_backward, gpu->matmul_forward,
                             gpu->matmul_backward, gpu->attention_forward, gpu->attention_backward,
                             gpu->attention_saved_floats, gpu->kv_append, gpu->attention_decode,
                             gpu->gelu_forward, gpu->gelu_backward, gpu->matmul_gelu_forward,
                             gpu->matmul_gelu_backward, gpu->matmul_residual_forward,
                             gpu->head_logits, gpu->crossentropy_forward_backward,
                             gpu->crossentropy_forward, gpu->scratch_floats, gpu->add_inplace,
                             gpu->to_operand, gpu->host_alloc, gpu->host_free, gpu->memory,
                             gpu->close, gpu->sumsq_many, gpu->adamw_many,
                             gpu->matmul_operand_forward, gpu->matmul_operand_backward};
    /* the CPU has no device extras */
    for (size_t i = 0; i < sizeof entries / sizeof entries[0] && !cpu_as_gpu; i++)
        if (!entries[i]) return printf("FAIL the CUDA backend's table has no entry %zu\n", i), 1;
    if (!gpu->device_memory)
        return printf("FAIL the CUDA backend does not say its memory is a device's\n"), 1;
    if (probe) return backend_release(gpu), 0;
    backend_release(gpu);
    cpu = backend_cpu();
    rng = seed;
    if (cudnn_mode == CUDNN_ONLY) { /* cuDNN's attention alone, at bf16 */
        if (check_cudnn(open_gpu, small)) return 1;
        printf("gpu_ops: %d checks, %d failed (seed %llu)\n", checks, failures,
               (unsigned long long)seed);
        return failures ? 1 : 0;
    }
    /* odd shapes: T not a multiple of any tile, C = 64 / 768 / 1024, NH = 1, V not a
     * multiple of 8, N = 1 */
    static const Shape shapes[] = {
        {1, 1, 64, 1, 5, 8},        /* N = 1 */
        {2, 37, 64, 1, 251, 256},   /* NH = 1, odd T and V */
        {3, 67, 768, 12, 1003, 1024},
        {1, 130, 1024, 16, 509, 512},
    };
    const char *precs[] = {"fp32", "tf32", "bf16"};
    for (int p = 0; p < 3; p++) {
        if (only && strcmp(only, precs[p])) continue;
        prec = precs[p];
        if (open_gpu(prec, why, sizeof why) != PP_OK) {
            printf("FAIL open the CUDA backend at %s: %s\n", prec, why);
            return 1;
        }
        /* The fp32 ops run once (at fp32, or at the one precision asked for); the ops with
         * an operand output again wherever the operand is not fp32. */
        int fp32_ops = p == 0 || only, operand_ops = fp32_ops || gpu->operand != PP_F32;
        if (cpu_as_gpu != 1) { /* [Note: operand activations]: bf16 exactly at precision bf16,
                                * unless PPTRAIN_BF16_OPERANDS=fp32 ([Note: CUDA precision]) */
            const char *ov = getenv("PPTRAIN_BF16_OPERANDS");
            int keep_fp32 = ov && !strcmp(ov, "fp32");
            PPDType want = !strcmp(prec, "bf16") && !keep_fp32 ? PP_BF16 : PP_F32;
            checks++;
            failures += gpu->operand != want;
            printf("%-4s operand type at %s: %s (want %s)\n", gpu->operand == want ? "ok" : "FAIL",
                   prec, gpu->operand == PP_BF16 ? "bf16" : "fp32",
                   want == PP_BF16 ? "bf16" : "fp32");
            /* [Note: residual stream type]: the operand type unless PPTRAIN_RESIDUAL=fp32 (so
             * that the residual rows below cannot pass on an fp32 stream by mistake) */
            const char *rv = getenv("PPTRAIN_RESIDUAL");
            PPDType want_res = rv && !strcmp(rv, "fp32") ? PP_F32 : want;
            checks++;
            failures += gpu->residual != want_res;
            printf("%-4s residual type at %s: %s (want %s)\n",
                   gpu->residual == want_res ? "ok" : "FAIL", prec,
                   gpu->residual == PP_BF16 ? "bf16" : "fp32",
                   want_res == PP_BF16 ? "bf16" : "fp32");
        }
        if (fp32_ops) {
            check_memory(1);
            check_memory(1000003);
            check_optimizer(1);
            check_optimizer(300007);
            check_many();
        }
        if (operand_ops) {
            check_to_operand(1);
            check_to_operand(1000003);
            check_kept_copy();
            check_kept_dealloc();
        }
        for (size_t k = 0; k < (small ? 2 : sizeof shapes / sizeof shapes[0]); k++) {
            const Shape *s = &shapes[k];
            char sh[96];
            snprintf(sh, sizeof sh, "B=%d T=%d C=%d NH=%d V=%d/%d", s->B, s->T, s->C, s->NH,
                     s->V, s->Vp);
            int N = s->B * s->T;
            if (fp32_ops || gpu->residual != PP_F32) check_encoder(s, sh); /* its output's type */
            if (operand_ops) {
                check_layernorm(s, sh);
                check_rmsnorm(s, sh);
                check_elementwise(s, sh);
                check_swiglu((size_t)N * 4 * s->C - 1, sh);
                check_crossentropy(s, sh);
                check_head_logits(s, sh);
            }
            char shm[16];
            snprintf(shm, sizeof shm, "#%zu", k);
            check_matmul(N, s->C, 3 * s->C, 1, shm);
            check_matmul_operand(N, s->C, 3 * s->C, 1, shm); /* qkv */
            check_matmul_operand(N, s->C, s->C, 0, shm);     /* attention's dout (Llama's) */
            if (k < 2) check_matmul_operand(N, s->C, s->C + 3, 1, shm); /* odd OC */
            check_matmul(N, s->C, s->Vp, 0, shm); /* the head: no bias, odd OC at V's */
            check_matmul(N, 4 * s->C, s->C, 1, shm);
            if (k < 2) check_matmul(N, s->C, s->C + 3, 1, shm); /* odd OC with a bias */
            check_matmul_gelu(N, s->C, 4 * s->C, 1, shm);
            check_matmul_residual(N, s->C, s->C, 1, shm);
            check_matmul_residual(N, 4 * s->C, s->C, k & 1, shm);
            if (k < 2) check_matmul_residual(N, s->C, s->C + 3, 1, shm); /* odd OC */
            if (k < 2) { /* odd H, no bias */
                check_matmul_gelu(N, s->C, 4 * s->C + 1, 1, shm);
                check_matmul_gelu(N, s->C, 4 * s->C, 0, shm);
            }
            check_attention(s, sh);
            int rows[] = {0, 1, 7}; /* all, one, and a count that divides no N here */
            for (int r = 0; r < 3; r++) check_head(s, sh, rows[r]);
        }
        check_gelu_form();
        check_gelu_form_forward();
        check_bias_grad_shapes(small, "bgrad");
        if (!small) { /* GPT-2's MLP and projections at B 1, T 1024 */
            check_matmul_gelu(1024, 768, 3072, 1, "gpt2");
            check_matmul_residual(1024, 768, 768, 1, "gpt2");
            check_matmul_residual(1024, 3072, 768, 1, "gpt2");
        }
        if (operand_ops) { /* a padded vocabulary that is no multiple of 4: the scalar path */
            static const Shape odd = {2, 9, 64, 1, 37, 39};
            check_crossentropy(&odd, "B=2 T=9 V=37/39 (Vp odd)");
            /* GPT-2's vocabulary: a row in shared memory on a GPU ([Note: cross-entropy row
             * in shared memory]); and one over the 227 KB a block may have: two passes */
            static const Shape gpt2 = {1, 3, 64, 1, 50257, 50304}, wide = {1, 2, 64, 1, 60001, 60032};
            if (!small) {
                check_crossentropy(&gpt2, "B=1 T=3 V=50257/50304");
                check_crossentropy(&wide, "B=1 T=2 V=60001/60032 (row over shared memory)");
            }
            /* RoPE: GQA and MQA layouts, Llama 3's frequencies, positions past 1000 */
            check_rope(2, 37, 4, 2, 64, 0);
            check_rope(3, 67, 12, 4, 64, 1);
            check_rope(1, 1030, 2, 1, 128, 1);
            check_rope(2, 9, 3, 3, 2, 0);
            /* decoding: GQA with Llama 3's RoPE, GPT-2's multi-head without, MQA at HS 128,
             * a prompt past 1000 positions (the GPU's key loop over many tiles) */
            check_kv_decode(37, 5, 4, 2, 64, 1);
            check_kv_decode(20, 1, 12, 12, 64, 0);
            check_kv_decode(9, 3, 2, 1, 128, 1);
            check_kv_decode(1030, 2, 9, 3, 64, 1);
        }
        /* grouped-query attention (the path the precision takes: materialised at fp32 and
         * tf32, flash at bf16): groups of 2, 3, 4 and multi-query */
        {
            static const int gq[][5] = {
                {2, 37, 4, 2, 16}, {3, 67, 12, 4, 64}, {1, 130, 16, 1, 64}, {2, 45, 6, 2, 32},
            };
            for (size_t k = 0; k < (small ? 2 : sizeof gq / sizeof gq[0]); k++) {
                char sh[96];
                snprintf(sh, sizeof sh, "B=%d T=%d NH=%d NKV=%d HS=%d", gq[k][0], gq[k][1],
                         gq[k][2], gq[k][3], gq[k][4]);
                check_attention_gqa(gq[k][0], gq[k][1], gq[k][2], gq[k][3], gq[k][4], sh);
            }
        }
        backend_release(gpu);
    }
    /* [Note: GEMM epilogues]: the fused ops' unfused paths, as the switches give them */
    setenv("PPTRAIN_FUSE_GELU", "0", 1);
    setenv("PPTRAIN_FUSE_RESIDUAL", "0", 1);
    setenv("PPTRAIN_FUSE_BGRAD", "0", 1);
    setenv("PPTRAIN_FUSE_CAST", "0", 1);
    for (int p = 0; p < 3; p++) {
        if (only && strcmp(only, precs[p])) continue;
        prec = precs[p];
        if (open_gpu(prec, why, sizeof why) != PP_OK) {
            printf("FAIL open the CUDA backend at %s: %s\n", prec, why);
            return 1;
        }
        printf("(switches off: PPTRAIN_FUSE_GELU=0 PPTRAIN_FUSE_RESIDUAL=0 "
               "PPTRAIN_FUSE_BGRAD=0 PPTRAIN_FUSE_CAST=0)\n");
        check_gelu_form();
        check_gelu_form_forward();
        check_matmul_gelu(67, 64, 257, 1, "off");
        check_matmul_gelu(201, 768, 3072, 0, "off");
        check_matmul_residual(67, 64, 67, 1, "off");
        check_matmul_residual(201, 3072, 768, 0, "off");
        check_matmul(74, 64, 67, 1, "off");
        check_matmul_operand(74, 64, 192, 1, "off");
        check_bias_grad_shapes(small, "off");
        backend_release(gpu);
    }
    unsetenv("PPTRAIN_FUSE_GELU");
    unsetenv("PPTRAIN_FUSE_RESIDUAL");
    unsetenv("PPTRAIN_FUSE_BGRAD");
    unsetenv("PPTRAIN_FUSE_CAST");
    /* the norms' backward: the one-pass kernel's edges, its chunk override, the two-pass
     * fallback (the kernels are fp32 at every precision: one precision suffices) */
    if (check_norm_paths(open_gpu, only ? only : "fp32", cpu_as_gpu)) return 1;
    /* flash attention (issue 11) */
    if (check_flash(open_gpu, small || (only && strcmp(only, "bf16")), cpu_as_gpu)) return 1;
    /* the paths that environment switches restore ([Note: speed switches] in cuda/NOTES.md) */
    if (!(only && strcmp(only, "bf16")) && check_switches(open_gpu, small, cpu_as_gpu)) return 1;
    printf("gpu_ops: %d checks, %d failed (seed %llu)\n", checks, failures,
           (unsigned long long)seed);
    return failures ? 1 : 0;
}
