/* bench_ops.c — the per-op table of one GPT-2 decoder layer, its head and its optimizer
 * step on the backend runtime.device selects (issue 11's kernel bench; METHOD.md "count
 * the FLOPs and bytes first"): for each op the time per call, the FLOPs and the least
 * bytes it must move (4 per fp32 element; the operand activations at the backend's
 * operand size, [Note: operand activations]), the rate reached and its fraction of the
 * ceiling that bounds it (the GEMM rate for matmuls and attention, the copy bandwidth
 * for the rest), then the sum over a whole step of an L-layer model.
 *
 *   bench_ops [--device cpu|cuda] [--precision P] [--B 16] [--T 1024] [--C 768] [--NH 12]
 *             [--L 12] [--Vp 50304] [--reps 10] [--gemm-tflops X] [--copy-gbps Y]
 *             [--only WORD]
 *
 * Times are wall time over `reps` back-to-back calls between two be->wait (device work
 * is asynchronous, so launch gaps count too, as in a step), after one warm-up call. The
 * inputs are random; ops that work in place (cross-entropy on an fp32 operand) or
 * clobber their input (cross-entropy's logits) see their own output again, which changes
 * no time. Without --gemm-tflops / --copy-gbps no fraction is printed. --only times just
 * the rows whose name holds WORD (e.g. "attention": the flash forward and backward, run
 * once per PPTRAIN_FLASH_BWD value to compare the backward's kernels, cuda/NOTES.md).
 * On the CUDA backend the environment's switches hold (the first line names the ones
 * set): the "layernorm bwd" row with PPTRAIN_LN_BWD=two-pass against unset (or one-pass:R) is the
 * one-pass norm backward's A/B ([Note: one-pass norm backward] in cuda/norm_kernels.cuh); its MB
 * column counts the one pass: dout (an operand), inp, dinp read and dinp written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_load.h"
#include "common.h"
#include "config.h"
#include "model/model.h"

typedef struct {
    const Backend *be;
    int reps;
    const char *only; /* time only the rows whose name holds this (NULL: all) */
} Bench;

static float *dev_random(const Backend *be, size_t n, uint64_t seed, float scale) {
    float *h = pp_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { /* a hash of (seed, i): values in [-scale, scale) */
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z ^= z >> 31;
        h[i] = (float)(((z >> 40) * (1.0 / (1ull << 24)) * 2.0 - 1.0) * scale);
    }
    float *d = be->alloc(be, n * sizeof(float));
    be->to_device(be, d, h, n * sizeof(float));
    be->wait(be);
    free(h);
    return d;
}

/* n random values (as dev_random) in the backend's operand type. */
static void *dev_operand(const Backend *be, size_t n, uint64_t seed, float scale) {
    float *x = dev_random(be, n, seed, scale);
    void *d = be->alloc(be, n * pp_dtype_bytes(be->operand));
    be->to_operand(be, d, x, n);
    be->dealloc(be, x); /* waits for the conversion */
    return d;
}

/* n random values of the residual stream's type ([Note: residual stream type]: fp32 or the
 * operand type). */
static void *dev_residual(const Backend *be, size_t n, uint64_t seed, float scale) {
    return be->residual == PP_F32 ? (void *)dev_random(be, n, seed, scale)
                                  : dev_operand(be, n, seed, scale);
}

static int *dev_tokens(const Backend *be, size_t n, int V) {
    int *h = pp_malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) h[i] = (int)((i * 2654435761u) % (unsigned)V);
    int *d = be->alloc(be, n * sizeof(int));
    be->to_device(be, d, h, n * sizeof(int));
    be->wait(be);
    free(h);
    return d;
}

/* One row of the table. kind 'G': bounded by the GEMM rate, 'M': by memory. */
typedef struct {
    const char *name;
    double s, flops, bytes, per_step; /* per_step: calls per training step */
    char kind;
    int in_step; /* 0: an unfused path the model no longer runs (shown, not summed) */
} Row;
static int row_in_step = 1; /* what TIME records */

#define MAX_ROWS 40
static Row rows[MAX_ROWS];
static int nrows;

/* Hold w[0..n) (its bf16 copy made) and let go, as the runtime does around an action list. */
static void hold_once(const Backend *be, const float *w, size_t n) {
    be->weight_hold(be, w, n, 0);
    be->weight_hold(be, NULL, 0, 0);
}

#define TIME(b, name_, kind_, flops_, bytes_, per_step_, call)                                     \
    do {                                                                                           \
        if ((b)->only && !strstr(name_, (b)->only)) break;                                         \
        call;                                                                                      \
        (b)->be->wait((b)->be);                                                                    \
        double t0_ = pp_now();                                                                     \
        for (int r_ = 0; r_ < (b)->reps; r_++) call;                                               \
        (b)->be->wait((b)->be);                                                                    \
        rows[nrows++] =                                                                            \
            (Row){name_,  (pp_now() - t0_) / (b)->reps, (flops_), (bytes_), (per_step_), (kind_), \
                  row_in_step};                                                                    \
    } while (0)

static double arg(int argc, char **argv, const char *name, double dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atof(argv[i + 1]);
    return dflt;
}
static const char *sarg(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv) {
    const char *device = sarg(argc, argv, "--device", "cpu");
    const char *prec = sarg(argc, argv, "--precision", "auto");
    int gpu = strcmp(device, "cpu") != 0;
    int B = (int)arg(argc, argv, "--B", gpu ? 16 : 1);
    int T = (int)arg(argc, argv, "--T", gpu ? 1024 : 256);
    int C = (int)arg(argc, argv, "--C", 768), NH = (int)arg(argc, argv, "--NH", 12);
    int L = (int)arg(argc, argv, "--L", 12);
    int Vp = (int)arg(argc, argv, "--Vp", 50304), V = Vp > 50257 ? 50257 : Vp;
    double gemm = arg(argc, argv, "--gemm-tflops", 0) * 1e12;
    double copy = arg(argc, argv, "--copy-gbps", 0) * 1e9;
    Bench b = {NULL, (int)arg(argc, argv, "--reps", gpu ? 10 : 2),
               sarg(argc, argv, "--only", NULL)};
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH || L < 1 || Vp < 1 || b.reps < 1) {
        fprintf(stderr, "bench_ops: sizes must be positive and C a multiple of NH\n");
        return 2;
    }

    Config cfg;
    char err[PP_ERR_MAX], note[512], set[128];
    config_defaults(&cfg);
    snprintf(set, sizeof set, "runtime.device=%s", device);
    int rc = config_set(&cfg, set, err, sizeof err);
    snprintf(set, sizeof set, "runtime.precision=%s", prec);
    if (rc != PP_OK || (rc = config_set(&cfg, set, err, sizeof err)) != PP_OK) {
        fprintf(stderr, "bench_ops: %s\n", err);
        return 2;
    }
    size_t N = (size_t)B * T;
    /* a GPT-2 layer's sizes (the ops below are its), nothing held */
    ModelDims d = {.V = V, .Vp = Vp, .maxT = T, .L = L, .NH = NH, .C = C, .tied = 1,
                   .arch = &arch_gpt2};
    BackendSizes sz = model_backend_sizes(&d, B, T, 0);
    if (backend_select(&cfg, 0, &sz, &b.be, note, sizeof note, err, sizeof err) != PP_OK) {
        fprintf(stderr, "bench_ops: %s\n", err);
        return 2;
    }
    const Backend *be = b.be;
    if (!gpu) backend_cpu_set_threads(0);

    /* one layer's tensors, as model.c lays them out; the operand activations ([Note:
     * operand activations]: ln, qkv, y, hg and the gradients dxo, dho, dqkv, dyo (attention's
     * dout), dlogits) in the backend's operand type, the residual stream (xr, rr) in its
     * residual type, the rest fp32 */
    size_t NC = N * C, nlayer = 12 * (size_t)C * C + 13 * (size_t)C;
    /* GPT-2 parameters */
    size_t P = (size_t)L * nlayer + (size_t)Vp * C + 1024 * (size_t)C + 2 * (size_t)C;
    float *x = dev_random(be, NC, 1, 1), *mean = dev_random(be, N, 3, 1);
    void *xr = dev_residual(be, NC, 37, 1), *rr = dev_residual(be, NC, 38, 1);
    float *rstd = dev_random(be, N, 4, 1), *lnw = dev_random(be, C, 5, 1);
    float *lnb = dev_random(be, C, 6, 0.1f);
    void *ln = dev_operand(be, NC, 2, 1);
    void *qkv = dev_operand(be, 3 * NC, 7, 1);
    float *wqkv = dev_random(be, 3 * (size_t)C * C, 8, 0.02f),
          *bqkv = dev_random(be, 3 * (size_t)C, 9, 0.02f);
    size_t natt = be->attention_saved_floats(be, B, T, NH);
    float *att = dev_random(be, natt, 10, 0.01f);
    void *y = dev_operand(be, NC, 11, 1), *hg = dev_operand(be, 4 * NC, 13, 1);
    void *ho = dev_operand(be, 4 * NC, 35, 2); /* the pre-activation ([Note: fused GELU]) */
    float *h = dev_random(be, 4 * NC, 12, 1), *wfc = dev_random(be, 4 * (size_t)C * C, 14, 0.02f),
          *bfc = dev_random(be, 4 * (size_t)C, 15, 0.02f);
    float *dx = dev_random(be, NC, 16, 1), *dw = dev_random(be, 4 * (size_t)C * C, 17, 0);
    float *db = dev_random(be, 4 * (size_t)C, 18, 0);
    float *dh = dev_random(be, 4 * NC, 20, 1), *dy = dev_random(be, NC, 31, 1);
    void *dqkv = dev_operand(be, 3 * NC, 19, 1), *dxo = dev_operand(be, NC, 32, 1),
         *dho = dev_operand(be, 4 * NC, 33, 1), *dyo = dev_operand(be, NC, 36, 1);
    float *scratch = be->alloc(be, be->scratch_floats(be, (int)N, T, C) * sizeof(float) + 64);
    float *wte = dev_random(be, (size_t)Vp * C, 21, 0.02f);
    float *dwte = dev_random(be, (size_t)Vp * C, 22, 0);
    float *wpe = dev_random(be, (size_t)T * C, 23, 0.02f);
    float *dwpe = dev_random(be, (size_t)T * C, 24, 0);
    /* the logits of the backend's type ([Note: logits type]: fp32 or the operand's);
     * dlogits the logits themselves where that is the operand type (in place, as the model) */
    void *logits = be->logits == be->operand ? dev_operand(be, N * Vp, 25, 1)
                                             : (void *)dev_random(be, N * Vp, 25, 1);
    float *losses = dev_random(be, N, 26, 0);
    void *dlogits = be->logits == be->operand ? logits : dev_operand(be, N * Vp, 34, 0.001f);
    int *tok = dev_tokens(be, N, V);
    float *p = dev_random(be, P, 27, 0.02f), *g = dev_random(be, P, 28, 0.01f);
    float *m = dev_random(be, P, 29, 0.001f), *v = dev_random(be, P, 30, 0.001f);
    double *sum = be->alloc(be, sizeof(double));
    be->wait(be);

    /* bytes per element: fp32, operand, logits, residual */
    const double f = 4, o = (double)pp_dtype_bytes(be->operand),
                 lb = (double)pp_dtype_bytes(be->logits), rs = (double)pp_dtype_bytes(be->residual);
    double Nd = (double)N, Cd = C, Vd = Vp, Pd = (double)P;
    double BT2C = (double)B * T * (double)T * C;
    /* forward of a layer */
    TIME(&b, "layernorm fwd", 'M', 8 * Nd * Cd, rs * Nd * Cd + f * (2 * Nd + 2 * Cd) + o * Nd * Cd,
         2 * L, be->layernorm_forward(be, ln, mean, rstd, xr, lnw, lnb, (int)N, C));
    TIME(&b, "matmul fwd qkv", 'G', 2 * Nd * Cd * 3 * Cd,
         o * (Nd * Cd + 3 * Nd * Cd) + f * 3 * Cd * Cd, L,
         be->matmul_operand_forward(be, qkv, ln, wqkv, bqkv, (int)N, C, 3 * C));
    TIME(&b, "attention fwd (causal)", 'G', 2 * BT2C, o * (3 * Nd * Cd + Nd * Cd), L,
         be->attention_forward(be, y, att, qkv, B, T, NH, NH, C / NH));
    /* the residual as the GEMM's C: out = res + y W^T + b */
    TIME(&b, "matmul+residual fwd attproj", 'G', 2 * Nd * Cd * Cd,
         o * Nd * Cd + rs * 2 * Nd * Cd + f * Cd * Cd, L,
         be->matmul_residual_forward(be, xr, rr, y, wqkv, bqkv, (int)N, C, C));
    row_in_step = 0;
    TIME(&b, "matmul fwd attproj *", 'G', 2 * Nd * Cd * Cd, o * Nd * Cd + f * (Nd * Cd + Cd * Cd),
         L, be->matmul_forward(be, x, y, wqkv, bqkv, (int)N, C, C));
    /* (the fp32 stream's add; at a bf16 residual the unfused path's add_residual moves
     * (f + 2 rs) N C bytes instead) */
    TIME(&b, "residual add *", 'M', Nd * Cd, f * 3 * Nd * Cd, 2 * L,
         be->add_inplace(be, x, dy, NC));
    row_in_step = 1;
    /* [Note: fused GELU]: the fc GEMM writes the operand pre and GELU's output (GELU in
     * its epilogue, be->gelu_in_gemm), or pre alone and GELU's kernel reads it back */
    TIME(&b, "matmul+gelu fwd fc", 'G', 2 * Nd * Cd * 4 * Cd + 20 * 4 * Nd * Cd,
         o * Nd * Cd + f * 4 * Cd * Cd + (be->gelu_in_gemm ? 2 : 3) * o * 4 * Nd * Cd, L,
         be->matmul_gelu_forward(be, hg, ho, ln, wfc, bfc, (int)N, C, 4 * C));
    row_in_step = 0; /* the unfused path it replaces: fp32 pre */
    TIME(&b, "matmul fwd fc *", 'G', 2 * Nd * Cd * 4 * Cd,
         o * Nd * Cd + f * (4 * Cd * Cd + 4 * Nd * Cd), L,
         be->matmul_forward(be, h, ln, wfc, bfc, (int)N, C, 4 * C));
    TIME(&b, "gelu fwd *", 'M', 20 * 4 * Nd * Cd, 2 * o * 4 * Nd * Cd, L,
         be->gelu_forward(be, hg, ho, 4 * NC));
    row_in_step = 1;
    TIME(&b, "matmul+residual fwd fcproj", 'G', 2 * Nd * 4 * Cd * Cd,
         o * 4 * Nd * Cd + rs * 2 * Nd * Cd + f * 4 * Cd * Cd, L,
         be->matmul_residual_forward(be, xr, rr, hg, wfc, bfc, (int)N, 4 * C, C));
    row_in_step = 0; /* and the residual add above */
    TIME(&b, "matmul fwd fcproj *", 'G', 2 * Nd * 4 * Cd * Cd,
         o * 4 * Nd * Cd + f * (4 * Cd * Cd + Nd * Cd), L,
         be->matmul_forward(be, x, hg, wfc, bfc, (int)N, 4 * C, C));
    row_in_step = 1;
    /* backward of a layer; its residual gradient's operand comes from the norm above ([Note:
     * residual gradient's operand] in src/model/arch.h): (*) the cast each layer made before */
    row_in_step = 0;
    TIME(&b, "to operand (cast) *", 'M', 0, (f + o) * Nd * Cd, L, be->to_operand(be, dxo, dx, NC));
    row_in_step = 1;
    TIME(&b, "matmul+dgelu bwd fcproj", 'G', 4 * Nd * 4 * Cd * Cd + 24 * 4 * Nd * Cd,
         o * (Nd * Cd + 3 * 4 * Nd * Cd) + f * 3 * 4 * Cd * Cd, L,
         be->matmul_gelu_backward(be, dho, dw, db, dxo, hg, wfc, ho, (int)N, 4 * C, C));
    row_in_step = 0; /* the unfused path: fp32 dinp, then GELU's backward */
    TIME(&b, "matmul bwd fcproj *", 'G', 4 * Nd * 4 * Cd * Cd,
         o * (Nd * Cd + 4 * Nd * Cd) + f * (4 * Nd * Cd + 3 * 4 * Cd * Cd), L,
         be->matmul_backward(be, dh, dw, db, dxo, hg, wfc, (int)N, 4 * C, C));
    TIME(&b, "gelu bwd *", 'M', 24 * 4 * Nd * Cd, (f + 2 * o) * 4 * Nd * Cd, L,
         be->gelu_backward(be, dho, ho, dh, 4 * NC));
    row_in_step = 1;
    TIME(&b, "matmul bwd fc", 'G', 4 * Nd * Cd * 4 * Cd,
         o * (4 * Nd * Cd + 2 * Nd * Cd) + f * 3 * 4 * Cd * Cd, L,
         be->matmul_operand_backward(be, dyo, dw, db, dho, ln, wfc, (int)N, C, 4 * C));
    /* the lowest layer's ln1; every other norm backward also writes the residual gradient's
     * operand for the next matmul (ln2's for attproj's backward, ln1's for the layer below) */
    TIME(&b, "layernorm bwd", 'M', 12 * Nd * Cd, f * (2 * Nd * Cd + 2 * Nd) + (rs + o) * Nd * Cd, 1,
         be->layernorm_backward(be, dx, NULL, dw, db, dyo, xr, mean, rstd, lnw, (int)N, C,
                                scratch));
    TIME(&b, "layernorm bwd + operand", 'M', 12 * Nd * Cd,
         f * (2 * Nd * Cd + 2 * Nd) + (rs + 2 * o) * Nd * Cd, 2 * L - 1,
         be->layernorm_backward(be, dx, dxo, dw, db, dyo, xr, mean, rstd, lnw, (int)N, C, scratch));
    TIME(&b, "matmul bwd attproj", 'G', 4 * Nd * Cd * Cd, o * 3 * Nd * Cd + f * 3 * Cd * Cd, L,
         be->matmul_operand_backward(be, dyo, dw, db, dxo, y, wqkv, (int)N, C, C));
    TIME(&b, "attention bwd (causal)", 'G', 5 * BT2C, o * (3 * Nd * Cd + 2 * Nd * Cd + 3 * Nd * Cd),
         L, be->attention_backward(be, dqkv, dyo, qkv, y, att, B, T, NH, NH, C / NH, scratch));
    TIME(&b, "matmul bwd qkv", 'G', 4 * Nd * Cd * 3 * Cd,
         o * (3 * Nd * Cd + 2 * Nd * Cd) + f * 3 * 3 * Cd * Cd, L,
         be->matmul_operand_backward(be, dyo, dw, db, dqkv, ln, wqkv, (int)N, C, 3 * C));
    /* once per step */
    TIME(&b, "encoder fwd", 'M', Nd * Cd, f * 2 * Nd * Cd + rs * Nd * Cd, 1,
         be->encoder_forward(be, xr, tok, wte, wpe, B, T, C));
    TIME(&b, "head matmul fwd (logits)", 'G', 2 * Nd * Cd * Vd,
         o * Nd * Cd + f * Vd * Cd + lb * Nd * Vd, 1,
         be->head_logits(be, logits, ln, wte, (int)N, C, Vp));
    TIME(&b, "cross-entropy fwd+bwd", 'M', 5 * Nd * Vd, (lb + o) * Nd * Vd, 1,
         be->crossentropy_forward_backward(be, dlogits, losses, logits, tok, 1.0f / (float)N,
                                           (int)N, V, Vp));
    TIME(&b, "head matmul bwd", 'G', 4 * Nd * Cd * Vd,
         o * (Nd * Vd + 2 * Nd * Cd) + f * 3 * Vd * Cd, 1,
         be->matmul_operand_backward(be, dyo, dwte, NULL, dlogits, ln, wte, (int)N, C, Vp));
    TIME(&b, "encoder bwd", 'M', Nd * Cd, f * 3 * Nd * Cd, 1,
         be->encoder_backward(be, dwte, dwpe, dx, tok, B, T, C));
    /* the step's norm and update as the runtime calls them: over GPT-2's tensors, one call
     * for all ([Note: many tensors] in backend.h), and (*) one call a tensor, as before */
    int nt = 0;
    size_t tn[12 * 64 + 4];
    const float *tx[12 * 64 + 4];
    PPOptTensor tu[12 * 64 + 4];
    double *sums = be->alloc(be, sizeof tn / sizeof tn[0] * sizeof(double));
    {
        size_t Cz = (size_t)C; /* per layer, in llm.c's order (gpt2.c) */
        size_t per[12] = {Cz, Cz, 3 * Cz * Cz, 3 * Cz, Cz * Cz,     Cz,
                          Cz, Cz, 4 * Cz * Cz, 4 * Cz, 4 * Cz * Cz, Cz};
        size_t glob[4] = {(size_t)Vp * Cz, 1024 * Cz, Cz, Cz}, at = 0;
        for (int l = 0; l < L + 1 && l < 64; l++)
            for (int k = 0; k < (l < L ? 12 : 4); k++) {
                size_t n = l < L ? per[k] : glob[k];
                tn[nt] = n;
                tx[nt] = g + at;
                int matrix = l < L && (k == 2 || k == 4 || k == 8 || k == 10); /* decays */
                tu[nt] = (PPOptTensor){p + at, g + at, m + at, v + at, n, matrix ? 0.1f : 0.0f};
                at += n;
                nt++;
            }
    }
    TIME(&b, "grad norm (sumsq_many)", 'M', 2 * Pd, f * Pd, 1,
         be->sumsq_many(be, sums, tx, tn, nt));
    row_in_step = 0;
    TIME(&b, "grad norm, a call a tensor *", 'M', 2 * Pd, f * Pd, 1,
         for (int i = 0; i < nt; i++) be->sumsq(be, sums + i, tx[i], tn[i]));
    /* the weights' bf16 copy ([Note: kept weight copy] in cuda/backend_cuda.cu): (*) the
     * conversion at every hold before; now AdamW writes it (the hold leaves p's copy kept) */
    row_in_step = 0;
    if (be->weight_hold)
        TIME(&b, "weights' bf16 copy (hold) *", 'M', 0, (f + 2) * Pd, 1, hold_once(be, p, P));
    row_in_step = 1;
    if (be->weight_hold) hold_once(be, p, P); /* the copy AdamW keeps (if that row was not run) */
    const char *ac = getenv("PPTRAIN_ADAMW_COPY"); /* the copy AdamW writes (bf16, kept) */
    double kb = be->weight_hold && !strcmp(prec, "bf16") && !(ac && !strcmp(ac, "0")) ? 2 : 0;
    TIME(&b, "AdamW (adamw_many)", 'M', 15 * Pd, f * 7 * Pd + kb * Pd, 1,
         be->adamw_many(be, tu, nt, 1e-4f, 0.9f, 0.95f, 1e-8f, 1.0f, 2));
    row_in_step = 0;
    TIME(&b, "AdamW, a call a tensor *", 'M', 15 * Pd, f * 7 * Pd, 1,
         for (int i = 0; i < nt; i++)
             be->adamw_update(be, tu[i].p, tu[i].g, tu[i].m, tu[i].v, tu[i].n, 1e-4f, 0.9f, 0.95f,
                              1e-8f, tu[i].weight_decay, 1.0f, 2));
    row_in_step = 1;
    be->dealloc(be, sums);

    printf("bench_ops: %s; one layer of GPT-2 (C %d, NH %d) at B %d x T %d, the head (Vp %d), "
           "AdamW over %zu parameters (L %d); %d calls each\n",
           note, C, NH, B, T, Vp, P, L, b.reps);
    printf("%-26s %10s %9s %9s %10s %9s %7s %10s\n", "op", "ms/call", "GFLOP", "MB", "TFLOP/s",
           "GB/s", "% ceil", "ms/step");
    double step = 0, gemm_s = 0, flops = 0;
    for (int i = 0; i < nrows; i++) {
        Row *r = &rows[i];
        double tf = r->flops / r->s / 1e12, gbs = r->bytes / r->s / 1e9;
        double ceil = r->kind == 'G' ? gemm : copy;
        double frac = ceil > 0 ? 100 * (r->kind == 'G' ? r->flops : r->bytes) / r->s / ceil : NAN;
        char pc[16] = "-";
        if (!isnan(frac)) snprintf(pc, sizeof pc, "%.0f%%", frac);
        printf("%-26s %10.3f %9.2f %9.1f %10.2f %9.1f %7s %10.2f\n", r->name, r->s * 1e3,
               r->flops / 1e9, r->bytes / 1e6, tf, gbs, pc, r->s * r->per_step * 1e3);
        if (!r->in_step) continue;
        step += r->s * r->per_step;
        flops += r->flops * r->per_step;
        if (r->kind == 'G') gemm_s += r->s * r->per_step;
    }
    printf("*: the unfused path of the fused row above it, not in the sum (PPTRAIN_FUSE_GELU=0, "
           "PPTRAIN_FUSE_RESIDUAL=0 run the fused op's own unfused path: [Note: GEMM "
           "epilogues]); the norm and AdamW a call a tensor are the runtime's calls before "
           "[Note: many tensors]; the cast is the one a layer made before the norm above wrote "
           "its operand, and the weights' copy the conversion before AdamW kept it\n");
    printf("the matmul bwd rows include db: summed by the dw GEMM at bf16, by the column-sum "
           "kernels under PPTRAIN_FUSE_BGRAD=0 ([Note: bias gradient epilogue])\n");
    /* model FLOPs per token, as bench/gpu.sh */
    double fpt = 6 * (12.0 * L * Cd * Cd + Vd * Cd) + 12.0 * L * T * Cd;
    if (b.only) printf("(--only %s: the sum is of these rows alone)\n", b.only);
    printf("sum over a step of %d layers: %.2f ms (matmuls and attention %.2f ms, the rest %.2f "
           "ms): %.0f tokens/s, %.1f model TFLOP/s%s\n",
           L, step * 1e3, gemm_s * 1e3, (step - gemm_s) * 1e3, Nd / step, Nd * fpt / step / 1e12,
           gemm > 0 ? "" : " (no ceilings given)");
    (void)flops;
    be->dealloc(be, sum);
    void *all[] = {x,   xr,      rr,  ln,   mean, rstd, lnw,    lnb,    qkv,  wqkv, bqkv, att, y,
                   h,   hg,      ho,  wfc,  bfc,  dx,   dw,     db,     dqkv, dh,   dy,   dxo, dho,
                   dyo, scratch, wte, dwte, wpe,  dwpe, logits, losses, p,    g,    m,    v};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->dealloc(be, all[i]);
    if (dlogits != logits) be->dealloc(be, dlogits);
    be->dealloc(be, tok);
    backend_release(be);
    return 0;
}
