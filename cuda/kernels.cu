/* kernels.cu — the CUDA backend's own kernels: the GPU twins of backend_cpu.c's loops
 * (encoder, LayerNorm, RMSNorm, RoPE, GELU, SwiGLU, the causal softmax of attention, the
 * fused cross-entropy, the optimizer, the reductions). The GEMMs are cuBLASLt's (backend_cuda.cu).
 *
 * [Note: deterministic kernels] No kernel adds floats with atomics, whose order would
 * vary run to run: every sum runs in an order fixed by the sizes alone (a warp's xor
 * butterfly, a block's tree, partial sums per fixed chunk of rows added in chunk order),
 * so two runs give the same bits. Where the CPU sums in row order (the embedding
 * gradients), the kernel does too and gives the CPU's bits. cuda/NOTES.md counts each
 * kernel's FLOPs and bytes. */
#include <math.h>

#include <cub/cub.cuh>

#include "cuda_internal.cuh"
#include "norm_kernels.cuh" /* Row4, sum4, warp_sum; the one-pass norm backward */
#include "operand_io.cuh"   /* put, get, put4, get4 of fp32 or bf16 */
#include "ce_kernels.cuh"   /* the fused cross-entropy kernels */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define LN_EPS 1e-5f
#define ROWS_PER_WARP_BLOCK 8 /* warps (rows) per 256-thread block of the row kernels */
#define COL_ROWS 256          /* rows per partial sum of the column reductions */
#define SUM_BLOCKS 256        /* partial sums of sum / sumsq (fixed: the order is n's alone) */

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The block's sum (or max) of v, in every thread; sh holds 32 floats. */
template <bool MAX> static __device__ float block_reduce(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* sh may still be read by an earlier call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : (MAX ? -INFINITY : 0.0f);
    return MAX ? warp_max(r) : warp_sum(r); /* every warp the same: fixed order */
}

/* Whether p is a multiple of `to` bytes. */
static inline int aligned(const void *p, size_t to) { return (uintptr_t)p % to == 0; }

/* ---- encoder ------------------------------------------------------------------- */

/* POS: add the position table wpe (GPT-2); without, the token's row alone (Llama). */
template <bool POS, typename OutT>
__global__ void enc_fwd(OutT *out, const int *inp, const float *wte, const float *wpe, size_t NC,
                        int T, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < NC;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C;
        int c = (int)(i % C);
        if (POS)
            put(out + i, wte[(size_t)inp[n] * C + c] + wpe[(size_t)(n % T) * C + c]);
        else
            put(out + i, wte[(size_t)inp[n] * C + c]);
    }
}

/* nxt[n] = the next row after n with the same token, or -1, from the rows sorted by
 * token (a stable sort: rows of one token in row order): the next entry, if its token
 * is the same. */
__global__ void enc_next(int *nxt, const int *tok_sorted, const int *row_sorted, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    nxt[row_sorted[i]] = i + 1 < N && tok_sorted[i + 1] == tok_sorted[i] ? row_sorted[i + 1] : -1;
}

__global__ void iota(int *x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] = i;
}

/* flag[m] = 1 when some earlier row has m's token (m is not the first of its chain). */
__global__ void enc_flag(int *flag, const int *nxt, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && nxt[n] >= 0) flag[nxt[n]] = 1; /* one writer per m: its predecessor */
}

/* One block per chain head: dwte[tok, c] += dout rows of the chain, in row order (the
 * CPU's order, so the CPU's bits). */
__global__ void enc_bwd_wte(float *dwte, const float *dout, const int *inp, const int *nxt,
                            const int *flag, int C) {
    int n = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (flag[n] || c >= C) return;
    float *dw = dwte + (size_t)inp[n] * C;
    float acc = dw[c];
    for (int m = n; m >= 0; m = nxt[m]) acc += dout[(size_t)m * C + c];
    dw[c] = acc;
}

/* dwpe[t, c] += dout[b, t, c] for b = 0.. in order (the CPU's order). */
__global__ void enc_bwd_wpe(float *dwpe, const float *dout, int B, int T, int C) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, TC = (size_t)T * C;
    if (i >= TC) return;
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[b * TC + i];
    dwpe[i] = acc;
}

template <typename OutT>
static void encoder_forward(CudaCtx *c, OutT *out, const int *inp, const float *wte,
                            const float *wpe, int B, int T, int C) {
    size_t NC = (size_t)B * T * C;
    if (wpe) enc_fwd<true><<<grid_for(NC, 256), 256, 0, c->stream>>>(out, inp, wte, wpe, NC, T, C);
    else enc_fwd<false><<<grid_for(NC, 256), 256, 0, c->stream>>>(out, inp, wte, wpe, NC, T, C);
    KCHECK(c, "enc_fwd");
}

void k_encoder_forward(CudaCtx *c, void *out, const int *inp, const float *wte, const float *wpe,
                       int B, int T, int C) {
    if (c->res == PP_BF16)
        encoder_forward(c, (__nv_bfloat16 *)out, inp, wte, wpe, B, T, C);
    else
        encoder_forward(c, (float *)out, inp, wte, wpe, B, T, C);
}

/* The radix sort's temporary storage for N rows, rounded up to 256 bytes. */
static size_t enc_sort_bytes(int N) {
    size_t tmp = 0;
    const int *none = NULL;
    cub::DeviceRadixSort::SortPairs(NULL, tmp, none, (int *)NULL, none, (int *)NULL, N, 0, 32);
    return (tmp + 255) / 256 * 256;
}

size_t k_encoder_workspace(int N) { return enc_sort_bytes(N) + 5 * (size_t)N * sizeof(int); }

void k_encoder_backward(CudaCtx *c, float *dwte, float *dwpe, const float *dout, const int *inp,
                        int B, int T, int C) {
    int N = B * T;
    /* the rows sorted by token (CUB's stable radix sort), then each row's successor; the
     * sort's own storage first (256-byte aligned, as cudaMalloc's), then 5 int arrays */
    size_t tmp = enc_sort_bytes(N);
    char *base = (char *)grow(c, &c->enc, k_encoder_workspace(N));
    int *nxt = (int *)(base + tmp), *flag = nxt + N, *rows = flag + N;
    int *tok_s = rows + N, *rows_s = tok_s + N;
    CK(c, cudaMemsetAsync(flag, 0, (size_t)N * sizeof(int), c->stream));
    iota<<<(N + 255) / 256, 256, 0, c->stream>>>(rows, N);
    KCHECK(c, "iota");
    CK(c, cub::DeviceRadixSort::SortPairs(base, tmp, inp, tok_s, rows, rows_s, N, 0, 32,
                                          c->stream));
    enc_next<<<(N + 255) / 256, 256, 0, c->stream>>>(nxt, tok_s, rows_s, N);
    KCHECK(c, "enc_next");
    enc_flag<<<(N + 255) / 256, 256, 0, c->stream>>>(flag, nxt, N);
    KCHECK(c, "enc_flag");
    dim3 g(N, (C + 255) / 256);
    enc_bwd_wte<<<g, 256, 0, c->stream>>>(dwte, dout, inp, nxt, flag, C);
    KCHECK(c, "enc_bwd_wte");
    if (!dwpe) return; /* no position table */
    size_t TC = (size_t)T * C;
    enc_bwd_wpe<<<(unsigned)((TC + 255) / 256), 256, 0, c->stream>>>(dwpe, dout, B, T, C);
    KCHECK(c, "enc_bwd_wpe");
}

/* ---- LayerNorm: one warp per row --------------------------------------------------- */

/* Row4 and sum4 (the lanes' share of a row): norm_kernels.cuh. */

template <bool V4, typename OutT, typename XT>
__global__ void ln_fwd(OutT *out, float *mean, float *rstd, const XT *inp, const float *w,
                       const float *b, int N, int C) {
    typedef Row4<V4> R;
    int row = blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x & 31, G = R::groups(C);
    if (row >= N) return;
    const XT *x = inp + (size_t)row * C;
    OutT *o = out + (size_t)row * C;
    float s = 0.0f;
    for (int j = lane; j < G; j += 32) s += sum4(R::load(x, j), V4);
    float m = warp_sum(s) / C, v = 0.0f;
    for (int j = lane; j < G; j += 32) {
        float4 d = R::load(x, j);
        d = make_float4(d.x - m, d.y - m, d.z - m, d.w - m);
        v += sum4(make_float4(d.x * d.x, d.y * d.y, d.z * d.z, d.w * d.w), V4);
    }
    float r = 1.0f / sqrtf(warp_sum(v) / C + LN_EPS);
    for (int j = lane; j < G; j += 32) {
        float4 xv = R::load(x, j), wv = R::load(w, j), bv = R::load(b, j);
        float4 y = make_float4((xv.x - m) * r * wv.x + bv.x, (xv.y - m) * r * wv.y + bv.y,
                               (xv.z - m) * r * wv.z + bv.z, (xv.w - m) * r * wv.w + bv.w);
        if (V4) put4(o + 4 * j, y);
        else put(o + j, y.x);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* dinp[row] += r * (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)); dout of the operand
 * type DT, inp of the residual type XT. */
template <bool V4, typename DT, typename XT>
__global__ void ln_bwd_dx(float *dinp, const DT *dout, const XT *inp, const float *mean,
                          const float *rstd, const float *w, int N, int C) {
    typedef Row4<V4> R;
    int row = blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x & 31, G = R::groups(C);
    if (row >= N) return;
    const XT *x = inp + (size_t)row * C;
    const DT *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C, m = mean[row], r = rstd[row];
    float sd = 0.0f, sdx = 0.0f;
    for (int j = lane; j < G; j += 32) {
        float4 xv = R::load(x, j), wv = R::load(w, j), dv = R::load(d, j);
        float4 dn = make_float4(wv.x * dv.x, wv.y * dv.y, wv.z * dv.z, wv.w * dv.w);
        float4 xh = make_float4((xv.x - m) * r, (xv.y - m) * r, (xv.z - m) * r, (xv.w - m) * r);
        sd += sum4(dn, V4);
        sdx += sum4(make_float4(dn.x * xh.x, dn.y * xh.y, dn.z * xh.z, dn.w * xh.w), V4);
    }
    sd = warp_sum(sd) / C;
    sdx = warp_sum(sdx) / C;
    for (int j = lane; j < G; j += 32) {
        float4 xv = R::load(x, j), wv = R::load(w, j), dv = R::load(d, j), o = R::load(dx, j);
        float4 dn = make_float4(wv.x * dv.x, wv.y * dv.y, wv.z * dv.z, wv.w * dv.w);
        float4 xh = make_float4((xv.x - m) * r, (xv.y - m) * r, (xv.z - m) * r, (xv.w - m) * r);
        R::store(dx, j, make_float4(o.x + r * (dn.x - sd - xh.x * sdx),
                                    o.y + r * (dn.y - sd - xh.y * sdx),
                                    o.z + r * (dn.z - sd - xh.z * sdx),
                                    o.w + r * (dn.w - sd - xh.w * sdx)));
    }
}

/* Column partial sums over chunk blockIdx.y of COL_ROWS rows, 32 columns per block
 * (threads (32, 8): eight rows at a time, added in a fixed order): part[chunk][0][c]
 * = sum of dout * xhat (LayerNorm's dw; plain dout when mean is NULL: a bias grad; RMS:
 * RMSNorm's dw, xhat = inp * rstd) and, with two sums, part[chunk][1][c] = sum of dout
 * (db). */
template <typename DT, bool RMS = false, typename XT = float>
__global__ void col_partial(float *part, const DT *dout, const XT *inp, const float *mean,
                            const float *rstd, int N, int C, int two) {
    __shared__ float sa[8][33], sb[8][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx, chunk = blockIdx.y;
    int r0 = chunk * COL_ROWS, r1 = min(N, r0 + COL_ROWS);
    float a = 0.0f, b = 0.0f;
    if (c < C)
        for (int r = r0 + ty; r < r1; r += 8) {
            float d = get(dout + (size_t)r * C + c);
            if (RMS)
                a += d * (get(inp + (size_t)r * C + c) * rstd[r]);
            else
                a += mean ? d * ((get(inp + (size_t)r * C + c) - mean[r]) * rstd[r]) : d;
            b += d;
        }
    sa[ty][tx] = a;
    sb[ty][tx] = b;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    float ta = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; k++) {
        ta += sa[k][tx];
        tb += sb[k][tx];
    }
    float *p = part + (size_t)chunk * (two ? 2 : 1) * C;
    p[c] = ta;
    if (two) p[C + c] = tb;
}

/* dst[c] += the chunks' partial sums part[k * stride + c] (dst1: the second set at part +
 * C, when given; dst0 may be NULL), 32 columns per block (threads (32, TY)): lane row ty
 * adds chunks ty, ty + TY, ... in order, then the TY in order: an order fixed by the
 * sizes, with TY loads in flight per column instead of one chain of nchunks. TY 8 after
 * col_partial (N / 256 chunks); 32 after norm_bwd (up to NB_CHUNKS). */
template <int TY>
__global__ void col_final(float *dst0, float *dst1, const float *part, int nchunks, size_t stride,
                          int C) {
    __shared__ float sa[TY][33], sb[TY][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    float a = 0.0f, b = 0.0f;
    if (c < C)
        for (int k = ty; k < nchunks; k += TY) {
            a += part[k * stride + c];
            if (dst1) b += part[k * stride + C + c];
        }
    sa[ty][tx] = a;
    sb[ty][tx] = b;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    float ta = 0.0f, tb = 0.0f;
    for (int k = 0; k < TY; k++) {
        ta += sa[k][tx];
        tb += sb[k][tx];
    }
    if (dst0) dst0[c] += ta;
    if (dst1) dst1[c] += tb;
}

template <typename DT, bool RMS = false, typename XT = float>
static void col_sums(CudaCtx *c, float *dst0, float *dst1, const DT *dout, const XT *inp,
                     const float *mean, const float *rstd, int N, int C) {
    int nchunks = (N + COL_ROWS - 1) / COL_ROWS, two = dst1 != NULL;
    float *part = (float *)grow(c, &c->partials,
                                (size_t)nchunks * (two ? 2 : 1) * C * sizeof(float));
    dim3 g((C + 31) / 32, nchunks), b(32, 8);
    col_partial<DT, RMS, XT><<<g, b, 0, c->stream>>>(part, dout, inp, mean, rstd, N, C, two);
    KCHECK(c, "col_partial");
    size_t stride = (size_t)(two ? 2 : 1) * C;
    col_final<8><<<(C + 31) / 32, b, 0, c->stream>>>(dst0, dst1, part, nchunks, stride, C);
    KCHECK(c, "col_final");
}

/* Whether the LayerNorm rows of C floats at these pointers take float4 access. */
static int ln_vec4(int C, const void *a, const void *b, const void *d, const void *e,
                   const void *f) {
    return C % 4 == 0 && aligned(a, 16) && aligned(b, 16) && aligned(d, 16) && aligned(e, 16) &&
           aligned(f, 16);
}

template <typename OutT, typename XT>
static void ln_forward(CudaCtx *c, OutT *out, float *mean, float *rstd, const XT *inp,
                       const float *w, const float *b, int N, int C) {
    unsigned blocks = (N + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK;
    unsigned threads = 32 * ROWS_PER_WARP_BLOCK;
    if (ln_vec4(C, out, inp, w, b, NULL))
        ln_fwd<true><<<blocks, threads, 0, c->stream>>>(out, mean, rstd, inp, w, b, N, C);
    else
        ln_fwd<false><<<blocks, threads, 0, c->stream>>>(out, mean, rstd, inp, w, b, N, C);
    KCHECK(c, "ln_fwd");
}

void k_layernorm_forward(CudaCtx *c, void *out, float *mean, float *rstd, const void *inp,
                         const float *w, const float *b, int N, int C) {
    typedef __nv_bfloat16 bf;
    if (c->res == PP_BF16)
        ln_forward(c, (bf *)out, mean, rstd, (const bf *)inp, w, b, N, C);
    else if (c->op == PP_BF16)
        ln_forward(c, (bf *)out, mean, rstd, (const float *)inp, w, b, N, C);
    else
        ln_forward(c, (float *)out, mean, rstd, (const float *)inp, w, b, N, C);
}

template <bool V4, typename DT, typename XT>
__global__ void rms_bwd_dx(float *dinp, const DT *dout, const XT *inp, const float *rstd,
                           const float *w, int N, int C);

/* [Note: one-pass norm backward] (norm_kernels.cuh): norm_bwd over chunks of rows, then
 * col_final<32> over the chunks' sums. RMS: RMSNorm (mean unused, dw only). The halves run
 * the same template with DX or DW compiled out. DT: dout's type (the operand type). */
template <bool V4, bool RMS, int K, typename DT, typename XT>
static void nb_launch(CudaCtx *c, float *dinp, DT *dop, float *part, const DT *dout, const XT *inp,
                      const float *mean, const float *rstd, const float *w, int N, int C, int rows,
                      int T) {
    unsigned P = (unsigned)((N + rows - 1) / rows);
    size_t shm = nb_smem(T, RMS, K);
    if (dinp && part)
        norm_bwd<V4, RMS, true, true, K, DT, XT>
            <<<P, T, shm, c->stream>>>(dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows);
    else if (dinp)
        norm_bwd<V4, RMS, true, false, K, DT, XT>
            <<<P, T, shm, c->stream>>>(dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows);
    else
        norm_bwd<V4, RMS, false, true, K, DT, XT>
            <<<P, T, shm, c->stream>>>(dinp, NULL, part, dout, inp, mean, rstd, w, N, C, rows);
    KCHECK(c, "norm_bwd");
}

/* The one-pass kernel at K groups a thread (nb_shape), T threads. */
template <bool V4, bool RMS, typename DT, typename XT>
static void nb_run(CudaCtx *c, NbShape sh, float *dinp, DT *dop, float *part, const DT *dout,
                   const XT *inp, const float *mean, const float *rstd, const float *w, int N,
                   int C, int rows) {
    if (sh.K == 1)
        nb_launch<V4, RMS, 1>(c, dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows, sh.T);
    else if (sh.K == 2)
        nb_launch<V4, RMS, 2>(c, dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows, sh.T);
    else
        nb_launch<V4, RMS, 4>(c, dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows, sh.T);
}

/* The one-pass backward; 0 when PPTRAIN_LN_BWD=two-pass (c->ln_rows < 0) or the kernel does
 * not take this C: then the caller runs the two-pass kernels. dst0 += the chunks' first
 * sums (dw), dst1 += the second (db; LayerNorm only); either may be NULL. Which path runs
 * depends on C and on dout, inp and w alone, never on dinp, so that the W half (dinp NULL)
 * takes the fused call's: the column sums are the same bits with float4 or single groups
 * (each column adds its rows in row order either way), so where dinp alone forbids float4
 * the fused call may run the single-float kernel, or, for rows too wide for it, the
 * float4 kernel's W half and ln_bwd_dx's single-float path for dinp, as the I half does. */
template <bool RMS, typename DT, typename XT>
static int norm_backward(CudaCtx *c, float *dinp, DT *dop, float *dst0, float *dst1, const DT *dout,
                         const XT *inp, const float *mean, const float *rstd, const float *w, int N,
                         int C) {
    bool v4w = ln_vec4(C, dout, inp, w, NULL, NULL), v4 = v4w && aligned(dinp, 16);
    /* dop must not choose the kernel (dinp's sums would change with it): one it cannot store
     * to in the kernel's groups gets to_operand's pass after */
    DT *late = dop && !(aligned(dop, 16) || (!v4 && aligned(dop, sizeof(DT)))) ? dop : NULL;
    if (late) dop = NULL;
    NbShape shw = nb_shape(C, v4w), sh = nb_shape(C, v4);
    if (c->ln_rows < 0 || !shw.K || N < 1) return 0;
    int rows = nb_rows(N, c->ln_rows), P = (N + rows - 1) / rows, ns = RMS ? 1 : 2;
    float *part = NULL;
    if (dst0 || dst1) part = (float *)grow(c, &c->partials, (size_t)P * ns * C * sizeof(float));
    if (!dinp && !part) return 1; /* nothing asked */
    if (sh.K && v4)
        nb_run<true, RMS>(c, sh, dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows);
    else if (sh.K)
        nb_run<false, RMS>(c, sh, dinp, dop, part, dout, inp, mean, rstd, w, N, C, rows);
    else { /* dinp or dop alone is not 16-byte aligned, and the rows too wide without float4 */
        if (part)
            nb_run<true, RMS>(c, shw, NULL, (DT *)NULL, part, dout, inp, mean, rstd, w, N, C, rows);
        if (dinp) {
            unsigned blocks = (N + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK;
            unsigned threads = 32 * ROWS_PER_WARP_BLOCK;
            if (RMS)
                rms_bwd_dx<false, DT, XT>
                    <<<blocks, threads, 0, c->stream>>>(dinp, dout, inp, rstd, w, N, C);
            else
                ln_bwd_dx<false, DT, XT>
                    <<<blocks, threads, 0, c->stream>>>(dinp, dout, inp, mean, rstd, w, N, C);
            KCHECK(c, "ln_bwd_dx / rms_bwd_dx");
            if (dop) k_to_operand(c, dop, dinp, (size_t)N * C);
        }
    }
    if (late) k_to_operand(c, late, dinp, (size_t)N * C);
    if (part) {
        col_final<32>
            <<<(C + 31) / 32, dim3(32, 32), 0, c->stream>>>(dst0, dst1, part, P, (size_t)ns * C, C);
        KCHECK(c, "col_final");
    }
    return 1;
}

size_t k_norm_backward_workspace(size_t C) { return (size_t)NB_CHUNKS * 2 * C * sizeof(float); }

template <typename DT, typename XT>
static void layernorm_backward(CudaCtx *c, float *dinp, DT *dop, float *dw, float *db,
                               const DT *dout, const XT *inp, const float *mean, const float *rstd,
                               const float *w, int N, int C) {
    if (norm_backward<false>(c, dinp, dop, dw, db, dout, inp, mean, rstd, w, N, C)) return;
    if (dinp) {
        unsigned blocks = (N + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK;
        unsigned threads = 32 * ROWS_PER_WARP_BLOCK;
        if (ln_vec4(C, dinp, dout, inp, w, NULL))
            ln_bwd_dx<true, DT, XT>
                <<<blocks, threads, 0, c->stream>>>(dinp, dout, inp, mean, rstd, w, N, C);
        else
            ln_bwd_dx<false, DT, XT>
                <<<blocks, threads, 0, c->stream>>>(dinp, dout, inp, mean, rstd, w, N, C);
        KCHECK(c, "ln_bwd_dx");
        if (dop) k_to_operand(c, dop, dinp, (size_t)N * C);
    }
    if (dw || db) col_sums(c, dw, db ? db : NULL, dout, inp, mean, rstd, N, C);
}

/* The (operand, residual) type pairs: (fp32, fp32), (bf16, fp32) under PPTRAIN_RESIDUAL=fp32,
 * (bf16, bf16) ([Note: residual stream type] in src/backend/backend.h). */
void k_layernorm_backward(CudaCtx *c, float *dinp, void *dop, float *dw, float *db,
                          const void *dout, const void *inp, const float *mean, const float *rstd,
                          const float *w, int N, int C) {
    typedef __nv_bfloat16 bf;
    if (c->res == PP_BF16)
        layernorm_backward(c, dinp, (bf *)dop, dw, db, (const bf *)dout, (const bf *)inp, mean,
                           rstd, w, N, C);
    else if (c->op == PP_BF16)
        layernorm_backward(c, dinp, (bf *)dop, dw, db, (const bf *)dout, (const float *)inp, mean,
                           rstd, w, N, C);
    else
        layernorm_backward(c, dinp, (float *)dop, dw, db, (const float *)dout, (const float *)inp,
                           mean, rstd, w, N, C);
}

/* ---- RMSNorm ([Note: RMSNorm] in src/backend/backend.h): one warp per row ------------ */

/* rstd = 1 / sqrt(sum(x^2) / C + eps); out = x * rstd, then * w (Hugging Face's order). */
template <bool V4, typename OutT, typename XT>
__global__ void rms_fwd(OutT *out, float *rstd, const XT *inp, const float *w, float eps, int N,
                        int C) {
    typedef Row4<V4> R;
    int row = blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x & 31, G = R::groups(C);
    if (row >= N) return;
    const XT *x = inp + (size_t)row * C;
    OutT *o = out + (size_t)row * C;
    float ss = 0.0f;
    for (int j = lane; j < G; j += 32) {
        float4 v = R::load(x, j);
        ss += sum4(make_float4(v.x * v.x, v.y * v.y, v.z * v.z, v.w * v.w), V4);
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    for (int j = lane; j < G; j += 32) {
        float4 xv = R::load(x, j), wv = R::load(w, j);
        float4 y = make_float4(xv.x * r * wv.x, xv.y * r * wv.y, xv.z * r * wv.z, xv.w * r * wv.w);
        if (V4) put4(o + 4 * j, y);
        else put(o + j, y.x);
    }
    if (lane == 0) rstd[row] = r;
}

/* dinp[row] += r * (w*dout - xhat * mean(w*dout*xhat)), xhat = x * r (backend_cpu.c's);
 * dout of the operand type DT, inp of the residual type XT. */
template <bool V4, typename DT, typename XT>
__global__ void rms_bwd_dx(float *dinp, const DT *dout, const XT *inp, const float *rstd,
                           const float *w, int N, int C) {
    typedef Row4<V4> R;
    int row = blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x & 31, G = R::groups(C);
    if (row >= N) return;
    const XT *x = inp + (size_t)row * C;
    const DT *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C, r = rstd[row], sdx = 0.0f;
    for (int j = lane; j < G; j += 32) {
        float4 xv = R::load(x, j), wv = R::load(w, j), dv = R::load(d, j);
        float4 dn = make_float4(wv.x * dv.x, wv.y * dv.y, wv.z * dv.z, wv.w * dv.w);
        float4 xh = make_float4(xv.x * r, xv.y * r, xv.z * r, xv.w * r);
        sdx += sum4(make_float4(dn.x * xh.x, dn.y * xh.y, dn.z * xh.z, dn.w * xh.w), V4);
    }
    sdx = warp_sum(sdx) / C;
    for (int j = lane; j < G; j += 32) {
        float4 xv = R::load(x, j), wv = R::load(w, j), dv = R::load(d, j), o = R::load(dx, j);
        float4 dn = make_float4(wv.x * dv.x, wv.y * dv.y, wv.z * dv.z, wv.w * dv.w);
        float4 xh = make_float4(xv.x * r, xv.y * r, xv.z * r, xv.w * r);
        R::store(dx, j,
                 make_float4(o.x + r * (dn.x - xh.x * sdx), o.y + r * (dn.y - xh.y * sdx),
                             o.z + r * (dn.z - xh.z * sdx), o.w + r * (dn.w - xh.w * sdx)));
    }
}

template <typename OutT, typename XT>
static void rms_forward(CudaCtx *c, OutT *out, float *rstd, const XT *inp, const float *w,
                        float eps, int N, int C) {
    unsigned blocks = (N + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK;
    unsigned threads = 32 * ROWS_PER_WARP_BLOCK;
    if (ln_vec4(C, out, inp, w, NULL, NULL))
        rms_fwd<true><<<blocks, threads, 0, c->stream>>>(out, rstd, inp, w, eps, N, C);
    else
        rms_fwd<false><<<blocks, threads, 0, c->stream>>>(out, rstd, inp, w, eps, N, C);
    KCHECK(c, "rms_fwd");
}

void k_rmsnorm_forward(CudaCtx *c, void *out, float *rstd, const void *inp, const float *w,
                       float eps, int N, int C) {
    typedef __nv_bfloat16 bf;
    if (c->res == PP_BF16)
        rms_forward(c, (bf *)out, rstd, (const bf *)inp, w, eps, N, C);
    else if (c->op == PP_BF16)
        rms_forward(c, (bf *)out, rstd, (const float *)inp, w, eps, N, C);
    else
        rms_forward(c, (float *)out, rstd, (const float *)inp, w, eps, N, C);
}

/* [Note: split backward]: the one-pass kernel's halves are its own template with a part
 * compiled out ([Note: one-pass norm backward]); in the two-pass path dinp and dw come from
 * separate kernels. Either way each half is the fused call's bits. */
template <typename DT, typename XT>
static void rmsnorm_backward(CudaCtx *c, float *dinp, DT *dop, float *dw, const DT *dout,
                             const XT *inp, const float *rstd, const float *w, int N, int C) {
    if (norm_backward<true>(c, dinp, dop, dw, NULL, dout, inp, NULL, rstd, w, N, C)) return;
    if (dinp) {
        unsigned blocks = (N + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK;
        unsigned threads = 32 * ROWS_PER_WARP_BLOCK;
        if (ln_vec4(C, dinp, dout, inp, w, NULL))
            rms_bwd_dx<true, DT, XT>
                <<<blocks, threads, 0, c->stream>>>(dinp, dout, inp, rstd, w, N, C);
        else
            rms_bwd_dx<false, DT, XT>
                <<<blocks, threads, 0, c->stream>>>(dinp, dout, inp, rstd, w, N, C);
        KCHECK(c, "rms_bwd_dx");
        if (dop) k_to_operand(c, dop, dinp, (size_t)N * C);
    }
    if (dw) col_sums<DT, true, XT>(c, dw, NULL, dout, inp, NULL, rstd, N, C);
}

void k_rmsnorm_backward(CudaCtx *c, float *dinp, void *dop, float *dw, const void *dout,
                        const void *inp, const float *rstd, const float *w, int N, int C) {
    typedef __nv_bfloat16 bf;
    if (c->res == PP_BF16)
        rmsnorm_backward(c, dinp, (bf *)dop, dw, (const bf *)dout, (const bf *)inp, rstd, w, N, C);
    else if (c->op == PP_BF16)
        rmsnorm_backward(c, dinp, (bf *)dop, dw, (const bf *)dout, (const float *)inp, rstd, w, N,
                         C);
    else
        rmsnorm_backward(c, dinp, (float *)dop, dw, (const float *)dout, (const float *)inp, rstd,
                         w, N, C);
}

void k_bias_backward(CudaCtx *c, float *db, const void *dout, int N, int OC) {
    if (c->op == PP_BF16)
        col_sums(c, db, NULL, (const __nv_bfloat16 *)dout, (const float *)NULL, NULL, NULL, N, OC);
    else
        col_sums(c, db, NULL, (const float *)dout, (const float *)NULL, NULL, NULL, N, OC);
}

__global__ void add_bias(float *out, const float *b, size_t NOC, int OC) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < NOC;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += b[i % OC];
}

void k_add_bias(CudaCtx *c, float *out, const float *b, int N, int OC) {
    size_t n = (size_t)N * OC;
    add_bias<<<grid_for(n, 256), 256, 0, c->stream>>>(out, b, n, OC);
    KCHECK(c, "add_bias");
}

/* ---- elementwise ------------------------------------------------------------------ */

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* [Note: vector loads] The elementwise kernels move 16 bytes per load and store (float4)
 * over the first 4·n4 elements, and the last n - 4·n4 one at a time; the launcher sets
 * n4 = n / 4 when every pointer is 16-byte aligned (8 for a bf16 output), else 0 (all
 * one at a time). Each element's arithmetic is the same either way, and so are its bits. */
#define TAIL_STRIDE(i, n4, n)                                                                      \
    for (size_t i = 4 * (n4) + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);          \
         i += (size_t)gridDim.x * blockDim.x)

/* n / 4 when the pointers (16-byte alignment, a NULL ignored) allow float4 access, else 0. */
static size_t vec4_count(size_t n, const void *a, const void *b, const void *d) {
    return aligned(a, 16) && aligned(b, 16) && aligned(d, 16) ? n / 4 : 0;
}

static __device__ __forceinline__ float gelu_of(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

static __device__ __forceinline__ float dgelu_times(float x, float d) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(u), sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) +
              0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return g * d;
}

/* inp and out of the operand type ([Note: fused GELU] in src/backend/backend.h). */
template <typename T>
__global__ void gelu_fwd(T *out, const T *inp, size_t n4, size_t n) {
    GRID_STRIDE(i, n4) {
        float4 x = get4(inp + 4 * i);
        put4(out + 4 * i, make_float4(gelu_of(x.x), gelu_of(x.y), gelu_of(x.z), gelu_of(x.w)));
    }
    TAIL_STRIDE(i, n4, n) put(out + i, gelu_of(get(inp + i)));
}

/* dinp and inp of the operand type, dout fp32; dinp may be dout itself (fp32: each
 * element read before it is written). */
template <typename T>
__global__ void gelu_bwd(T *dinp, const T *inp, const float *dout, size_t n4, size_t n) {
    GRID_STRIDE(i, n4) {
        float4 x = get4(inp + 4 * i), d = ((const float4 *)dout)[i];
        put4(dinp + 4 * i, make_float4(dgelu_times(x.x, d.x), dgelu_times(x.y, d.y),
                                       dgelu_times(x.z, d.z), dgelu_times(x.w, d.w)));
    }
    TAIL_STRIDE(i, n4, n) put(dinp + i, dgelu_times(get(inp + i), dout[i]));
}

/* [Note: SwiGLU] (src/backend/backend.h): torch's silu, g / (1 + exp(-g)), then * up. */
static __device__ __forceinline__ float swiglu_of(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

/* d(gate) = (d * up) * s * (1 + g (1 - s)), s = 1 / (1 + exp(-g)); d(up) = d * silu(g). */
static __device__ __forceinline__ float2 dswiglu(float g, float u, float d) {
    float e = 1.0f + expf(-g), s = 1.0f / e;
    return make_float2(d * u * s * (1.0f + g * (1.0f - s)), d * (g / e));
}

template <typename OutT>
__global__ void swiglu_fwd(OutT *out, const float *gate, const float *up, size_t n4, size_t n) {
    GRID_STRIDE(i, n4) {
        float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
        put4(out + 4 * i, make_float4(swiglu_of(g.x, u.x), swiglu_of(g.y, u.y), swiglu_of(g.z, u.z),
                                      swiglu_of(g.w, u.w)));
    }
    TAIL_STRIDE(i, n4, n) put(out + i, swiglu_of(gate[i], up[i]));
}

template <typename OutT>
__global__ void swiglu_bwd(OutT *dgate, OutT *dup, const float *gate, const float *up,
                           const float *dout, size_t n4, size_t n) {
    GRID_STRIDE(i, n4) {
        float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
        float4 d = ((const float4 *)dout)[i];
        float2 a = dswiglu(g.x, u.x, d.x), b = dswiglu(g.y, u.y, d.y);
        float2 e = dswiglu(g.z, u.z, d.z), f = dswiglu(g.w, u.w, d.w);
        put4(dgate + 4 * i, make_float4(a.x, b.x, e.x, f.x));
        put4(dup + 4 * i, make_float4(a.y, b.y, e.y, f.y));
    }
    TAIL_STRIDE(i, n4, n) {
        float2 a = dswiglu(gate[i], up[i], dout[i]);
        put(dgate + i, a.x);
        put(dup + i, a.y);
    }
}

__global__ void add_k(float *dst, const float *src, size_t n4, size_t n) {
    GRID_STRIDE(i, n4) {
        float4 a = ((float4 *)dst)[i], b = ((const float4 *)src)[i];
        ((float4 *)dst)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
    TAIL_STRIDE(i, n4, n) dst[i] += src[i];
}

__global__ void to_bf16(__nv_bfloat16 *dst, const float *src, size_t n4, size_t n) {
    GRID_STRIDE(i, n4) {
        float4 x = ((const float4 *)src)[i];
        __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y), hi = __floats2bfloat162_rn(x.z, x.w);
        uint2 u;
        u.x = *(const unsigned *)&lo;
        u.y = *(const unsigned *)&hi;
        ((uint2 *)dst)[i] = u;
    }
    TAIL_STRIDE(i, n4, n) dst[i] = __float2bfloat16_rn(src[i]);
}

void k_gelu_forward(CudaCtx *c, void *out, const void *inp, size_t n) {
    size_t n4 = vec4_count(n, out, inp, NULL);
    unsigned g = grid_for(n4 ? n4 : n, 256);
    if (c->op == PP_BF16)
        gelu_fwd<<<g, 256, 0, c->stream>>>((__nv_bfloat16 *)out, (const __nv_bfloat16 *)inp, n4,
                                           n);
    else gelu_fwd<<<g, 256, 0, c->stream>>>((float *)out, (const float *)inp, n4, n);
    KCHECK(c, "gelu_fwd");
}

void k_gelu_backward(CudaCtx *c, void *dinp, const void *inp, const float *dout, size_t n) {
    size_t n4 = vec4_count(n, dinp, inp, dout);
    unsigned g = grid_for(n4 ? n4 : n, 256);
    if (c->op == PP_BF16)
        gelu_bwd<<<g, 256, 0, c->stream>>>((__nv_bfloat16 *)dinp, (const __nv_bfloat16 *)inp, dout,
                                           n4, n);
    else gelu_bwd<<<g, 256, 0, c->stream>>>((float *)dinp, (const float *)inp, dout, n4, n);
    KCHECK(c, "gelu_bwd");
}

void k_swiglu_forward(CudaCtx *c, void *out, const float *gate, const float *up, size_t n) {
    size_t n4 = vec4_count(n, out, gate, up);
    unsigned g = grid_for(n4 ? n4 : n, 256);
    if (c->op == PP_BF16)
        swiglu_fwd<<<g, 256, 0, c->stream>>>((__nv_bfloat16 *)out, gate, up, n4, n);
    else swiglu_fwd<<<g, 256, 0, c->stream>>>((float *)out, gate, up, n4, n);
    KCHECK(c, "swiglu_fwd");
}

void k_swiglu_backward(CudaCtx *c, void *dgate, void *dup, const float *gate, const float *up,
                       const float *dout, size_t n) {
    size_t n4 = vec4_count(n, dgate, dup, gate) && vec4_count(n, up, dout, NULL) ? n / 4 : 0;
    unsigned g = grid_for(n4 ? n4 : n, 256);
    if (c->op == PP_BF16)
        swiglu_bwd<<<g, 256, 0, c->stream>>>((__nv_bfloat16 *)dgate, (__nv_bfloat16 *)dup, gate, up,
                                             dout, n4, n);
    else
        swiglu_bwd<<<g, 256, 0, c->stream>>>((float *)dgate, (float *)dup, gate, up, dout, n4, n);
    KCHECK(c, "swiglu_bwd");
}

void k_add_inplace(CudaCtx *c, float *dst, const float *src, size_t n) {
    size_t n4 = vec4_count(n, dst, src, NULL);
    add_k<<<grid_for(n4 ? n4 : n, 256), 256, 0, c->stream>>>(dst, src, n4, n);
    KCHECK(c, "add_k");
}

/* out = y + res, rounded once to out's type (the residual's: [Note: residual stream type]). */
template <typename RT>
__global__ void add_residual(RT *out, const float *y, const RT *res, size_t n) {
    GRID_STRIDE(i, n) put(out + i, y[i] + get(res + i));
}

void k_add_residual(CudaCtx *c, void *out, const float *y, const void *res, size_t n) {
    typedef __nv_bfloat16 bf;
    if (c->res == PP_BF16)
        add_residual<<<grid_for(n, 256), 256, 0, c->stream>>>((bf *)out, y, (const bf *)res, n);
    else
        add_residual<<<grid_for(n, 256), 256, 0, c->stream>>>((float *)out, y, (const float *)res,
                                                              n);
    KCHECK(c, "add_residual");
}

void k_to_bf16(CudaCtx *c, __nv_bfloat16 *dst, const float *src, size_t n) {
    size_t n4 = aligned(dst, 8) ? vec4_count(n, src, NULL, NULL) : 0;
    to_bf16<<<grid_for(n4 ? n4 : n, 256), 256, 0, c->stream>>>(dst, src, n4, n);
    KCHECK(c, "to_bf16");
}

void k_to_operand(CudaCtx *c, void *dst, const float *src, size_t n) {
    if (c->op == PP_BF16) k_to_bf16(c, (__nv_bfloat16 *)dst, src, n);
    else CK(c, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
}

__global__ void from_bf16(float *dst, const __nv_bfloat16 *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}

void k_from_operand(CudaCtx *c, float *dst, const void *src, size_t n) {
    if (c->op != PP_BF16) {
        CK(c, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
        return;
    }
    from_bf16<<<grid_for(n, 256), 256, 0, c->stream>>>(dst, (const __nv_bfloat16 *)src, n);
    KCHECK(c, "from_bf16");
}

/* ---- RoPE ([Note: RoPE] in src/backend/backend.h) ---------------------------------------
 * A thread per (row, pair i): a = t * inv_freq[i] (one fp32 product), cos and sin once,
 * then pair i of each of the row's NH + NKV q and k heads rotated in place (dir 1) or
 * by the transpose (dir -1, the backward); consecutive threads take consecutive pairs,
 * so each head's loads and stores are coalesced. X: the operand type (qkv, dqkv: each
 * value rotated in fp32 and rounded back); the v heads are not touched. */
template <typename X>
__global__ void rope_k(X *x, const float *inv_freq, size_t rows, int T, int pos0, int heads,
                       int half, int HS, size_t ld, int dir) {
    GRID_STRIDE(i, rows * half) {
        size_t n = i / half;
        int k = (int)(i % half);
        float a = (float)(pos0 + (int)(n % T)) * inv_freq[k], sn, cs;
        sincosf(a, &sn, &cs);
        X *p = x + n * ld + k;
        for (int h = 0; h < heads; h++, p += HS) {
            float x0 = get(p), x1 = get(p + half);
            if (dir > 0) {
                put(p, x0 * cs - x1 * sn);
                put(p + half, x1 * cs + x0 * sn);
            } else {
                put(p, x0 * cs + x1 * sn);
                put(p + half, x1 * cs - x0 * sn);
            }
        }
    }
}

void k_rope(CudaCtx *c, void *x, const float *inv_freq, int B, int T, int NH, int NKV, int HS,
            int dir) {
    size_t rows = (size_t)B * T, ld = (size_t)(NH + 2 * NKV) * HS;
    int half = HS / 2;
    unsigned g = grid_for(rows * half, 256);
    if (c->op == PP_BF16)
        rope_k<<<g, 256, 0, c->stream>>>((__nv_bfloat16 *)x, inv_freq, rows, T, 0, NH + NKV, half,
                                         HS, ld, dir);
    else
        rope_k<<<g, 256, 0, c->stream>>>((float *)x, inv_freq, rows, T, 0, NH + NKV, half, HS, ld,
                                         dir);
    KCHECK(c, "rope_k");
}

/* ---- decoding on a KV cache ([Note: KV cache] in src/backend/backend.h) ------------------
 * kv_append: rope_k at positions pos.. on the n rows (the CPU's formula), then a thread per
 * (row, kv channel) copies k and v into the cache. */
template <typename X>
__global__ void kv_copy_k(float *kc, float *vc, const X *qkv, int n, int pos, int NH, int NKV,
                          int HS, int cap) {
    size_t W = (size_t)NKV * HS, ld = (size_t)(NH + 2 * NKV) * HS;
    GRID_STRIDE(i, (size_t)n * W) {
        size_t r = i / W, j = i % W, g = j / HS, ch = j % HS;
        size_t to = (g * cap + pos + r) * HS + ch;
        kc[to] = get(qkv + r * ld + (size_t)NH * HS + j);
        vc[to] = get(qkv + r * ld + (size_t)(NH + NKV) * HS + j);
    }
}

/* qkv of X, the operand type: rotated in place (rounded back), the cache widened from it */
template <typename X>
static void kv_append(CudaCtx *c, float *kc, float *vc, X *qkv, const float *inv_freq, int pos,
                      int n, int NH, int NKV, int HS, int cap) {
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    int half = HS / 2;
    if (inv_freq) {
        unsigned g = grid_for((size_t)n * half, 256);
        rope_k<<<g, 256, 0, c->stream>>>(qkv, inv_freq, (size_t)n, n, pos, NH + NKV, half, HS, ld,
                                         1);
        KCHECK(c, "rope_k");
    }
    unsigned g = grid_for((size_t)n * NKV * HS, 256);
    kv_copy_k<<<g, 256, 0, c->stream>>>(kc, vc, qkv, n, pos, NH, NKV, HS, cap);
    KCHECK(c, "kv_copy_k");
}

void k_kv_append(CudaCtx *c, float *kc, float *vc, void *qkv, const float *inv_freq, int pos, int n,
                 int NH, int NKV, int HS, int cap) {
    if (c->op == PP_BF16)
        kv_append(c, kc, vc, (__nv_bfloat16 *)qkv, inv_freq, pos, n, NH, NKV, HS, cap);
    else
        kv_append(c, kc, vc, (float *)qkv, inv_freq, pos, n, NH, NKV, HS, cap);
}

/* attention_decode: a block per (query row i, head h) of at least HS threads, thread t
 * owning output channel t. Pass 1: the row's largest scaled score (a key per thread, the
 * block's max). Pass 2, a tile of blockDim keys at a time: each thread a key's exp(s - max)
 * into shared memory, then each channel's sum of p V over the tile, in key order. The
 * row's sum of p is the block's tree sum; out = acc / sum. Fixed order: deterministic.
 * Shared memory: q [HS], the tile's p [blockDim], the reduction's 32. */
template <typename O>
__global__ void attention_decode_k(O *out, const O *qkv, const float *kc, const float *vc, int pos,
                                   int NH, int NKV, int HS, int cap, float scale) {
    extern __shared__ float sh[];
    float *q = sh, *p = sh + HS, *red = p + blockDim.x;
    int i = blockIdx.x / NH, h = blockIdx.x % NH, g = h / (NH / NKV), t = threadIdx.x;
    int keys = pos + i + 1;
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const float *K = kc + (size_t)g * cap * HS, *V = vc + (size_t)g * cap * HS;
    for (int j = t; j < HS; j += blockDim.x) q[j] = get(qkv + (size_t)i * ld + (size_t)h * HS + j);
    __syncthreads();
    float mx = -INFINITY;
    for (int j = t; j < keys; j += blockDim.x) {
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += q[d] * K[(size_t)j * HS + d];
        mx = fmaxf(mx, s * scale);
    }
    mx = block_reduce<true>(mx, red);
    float acc = 0.0f, sum = 0.0f;
    for (int j0 = 0; j0 < keys; j0 += blockDim.x) {
        int j = j0 + t;
        float e = 0.0f;
        if (j < keys) {
            float s = 0.0f;
            for (int d = 0; d < HS; d++) s += q[d] * K[(size_t)j * HS + d];
            e = expf(s * scale - mx);
        }
        sum += e;
        __syncthreads(); /* the last tile's p is read */
        p[t] = e;
        __syncthreads();
        int m = keys - j0 < (int)blockDim.x ? keys - j0 : (int)blockDim.x;
        if (t < HS)
            for (int jj = 0; jj < m; jj++) acc += p[jj] * V[(size_t)(j0 + jj) * HS + t];
    }
    sum = block_reduce<false>(sum, red);
    if (t < HS) put(out + (size_t)i * NH * HS + (size_t)h * HS + t, acc / sum);
}

void k_attention_decode(CudaCtx *c, void *out, const void *qkv, const float *kc, const float *vc,
                        int pos, int n, int NH, int NKV, int HS, int cap) {
    int threads = (HS + 31) / 32 * 32;
    threads = threads < 128 ? 128 : threads > 1024 ? 1024 : threads;
    size_t shm = (size_t)(HS + threads + 32) * sizeof(float);
    float scale = 1.0f / sqrtf((float)HS);
    unsigned blocks = (unsigned)((size_t)n * NH);
    if (c->op == PP_BF16)
        attention_decode_k<<<blocks, threads, shm, c->stream>>>((__nv_bfloat16 *)out,
                                                                (const __nv_bfloat16 *)qkv, kc, vc,
                                                                pos, NH, NKV, HS, cap, scale);
    else
        attention_decode_k<<<blocks, threads, shm, c->stream>>>((float *)out, (const float *)qkv,
                                                                kc, vc, pos, NH, NKV, HS, cap,
                                                                scale);
    KCHECK(c, "attention_decode_k");
}

/* ---- attention's causal softmax: one warp per row of a [T,T] block ---------------- */

__global__ void softmax_causal(float *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    float *x = att + (size_t)row * T, mx = -INFINITY, s = 0.0f;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    for (int j = lane; j <= t; j += 32) {
        float e = expf(x[j] - mx);
        x[j] = e;
        s += e;
    }
    float inv = 1.0f / warp_sum(s);
    for (int j = lane; j <= t; j += 32) x[j] *= inv;
    for (int j = t + 1 + lane; j < T; j += 32) x[j] = 0.0f;
}

__global__ void softmax_causal_bwd(float *dp, const float *p, int rows, int T, float scale) {
    int row = blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    const float *pr = p + (size_t)row * T;
    float *d = dp + (size_t)row * T, dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += pr[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j <= t; j += 32) d[j] = pr[j] * (d[j] - dot) * scale;
    for (int j = t + 1 + lane; j < T; j += 32) d[j] = 0.0f;
}

void k_softmax_causal(CudaCtx *c, float *att, int rows, int T) {
    softmax_causal<<<(rows + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK,
                     32 * ROWS_PER_WARP_BLOCK, 0, c->stream>>>(att, rows, T);
    KCHECK(c, "softmax_causal");
}

void k_softmax_causal_backward(CudaCtx *c, float *dp, const float *p, int rows, int T,
                               float scale) {
    softmax_causal_bwd<<<(rows + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK,
                         32 * ROWS_PER_WARP_BLOCK, 0, c->stream>>>(dp, p, rows, T, scale);
    KCHECK(c, "softmax_causal_bwd");
}

/* ---- fused cross-entropy: one block per row ----------------------------------------- */

/* The kernels (crossentropy, crossentropy_smem) are in ce_kernels.cuh. */

template <typename InT, typename OutT>
static void ce_launch(CudaCtx *c, OutT *dlogits, float *losses, const InT *logits,
                      const int *targets, float dloss, int N, int V, int Vp, int want_grad,
                      int smem) {
    if (smem) {
        size_t bytes = (size_t)Vp * sizeof(float);
        CK(c, cudaFuncSetAttribute(crossentropy_smem<InT, OutT>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        crossentropy_smem<InT, OutT><<<N, CE_SMEM_THREADS, bytes, c->stream>>>(dlogits, losses,
                                                                               logits, targets,
                                                                               dloss, V, Vp);
        KCHECK(c, "crossentropy_smem");
    } else {
        crossentropy<InT, OutT>
            <<<N, 512, 0, c->stream>>>(dlogits, losses, logits, targets, dloss, V, Vp, want_grad);
        KCHECK(c, "crossentropy");
    }
}

void k_crossentropy(CudaCtx *c, void *dlogits, float *losses, const void *logits,
                    const int *targets, float dloss, int N, int V, int Vp, int want_grad) {
    /* [Note: cross-entropy row in shared memory] (ce_kernels.cuh): the gradient's second
     * pass from the row kept on chip; without a gradient one pass reads the row once anyway */
    int smem = want_grad && !c->ce_two_pass && Vp % 4 == 0 &&
               (size_t)Vp * sizeof(float) + 64 * sizeof(float) <= c->smem_optin;
    /* dlogits are written only with a gradient: of the operand type, the logits of theirs */
    int out_bf16 = want_grad && c->op == PP_BF16;
    typedef __nv_bfloat16 bf;
    if (c->logits_bf16 && out_bf16)
        ce_launch(c, (bf *)dlogits, losses, (const bf *)logits, targets, dloss, N, V, Vp, 1, smem);
    else if (c->logits_bf16) /* no gradient (the logits are bf16 only with bf16 operands) */
        ce_launch(c, (float *)dlogits, losses, (const bf *)logits, targets, dloss, N, V, Vp, 0, 0);
    else if (out_bf16)
        ce_launch(c, (bf *)dlogits, losses, (const float *)logits, targets, dloss, N, V, Vp, 1,
                  smem);
    else
        ce_launch(c, (float *)dlogits, losses, (const float *)logits, targets, dloss, N, V, Vp,
                  want_grad, smem);
}

/* ---- reductions into a double, and the optimizer ------------------------------------ */

/* Block b of SUM_BLOCKS (256 threads) of x[n]'s sum: part[b] = the sum of [b chunk, (b + 1)
 * chunk) in a fixed order. One function for k_sum's and k_sumsq_many's kernels: the same
 * bits. */
static __device__ __forceinline__ void sum_block(double *part, const float *x, size_t n,
                                                 size_t chunk, int squares, unsigned b) {
    __shared__ double sh[256];
    size_t lo = b * chunk, hi = lo + chunk < n ? lo + chunk : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += 256) {
        double v = x[i];
        s += squares ? v * v : v;
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[b] = sh[0];
}

/* *out = the sum of part[0..nb), nb <= 256, in a fixed order (256 threads). */
static __device__ __forceinline__ void final_block(double *out, const double *part, int nb) {
    __shared__ double sh[256];
    sh[threadIdx.x] = threadIdx.x < nb ? part[threadIdx.x] : 0.0;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}

__global__ void sum_partial(double *part, const float *x, size_t n, size_t chunk, int squares) {
    sum_block(part, x, n, chunk, squares, blockIdx.x);
}

__global__ void sum_final(double *out, const double *part, int nb) { final_block(out, part, nb); }

static size_t sum_chunk(size_t n) {
    size_t chunk = (n + SUM_BLOCKS - 1) / SUM_BLOCKS;
    return chunk ? chunk : 1;
}

void k_sum(CudaCtx *c, double *out, const float *x, size_t n, int squares) {
    double *part = (double *)grow(c, &c->sums, SUM_BLOCKS * sizeof(double));
    sum_partial<<<SUM_BLOCKS, 256, 0, c->stream>>>(part, x, n, sum_chunk(n), squares);
    KCHECK(c, "sum_partial");
    sum_final<<<1, 256, 0, c->stream>>>(out, part, SUM_BLOCKS);
    KCHECK(c, "sum_final");
}

/* [Note: many tensors] (src/backend/backend.h): up to MT_MAX tensors a launch, their
 * pointers and sizes passed in the kernel's parameters (under the classic 4 KB), so a step
 * of GPT-2 124M's 148 tensors takes 3 launches of each kernel instead of 148 (AdamW) and 296
 * (the norm's sums). The sums of tensor y are sum_block's and final_block's blocks as k_sum
 * runs them (the same bits); AdamW's element is adamw_elem, adamw_k's. */
#define MT_MAX 64
struct MtSums {
    const float *x[MT_MAX];
    size_t n[MT_MAX], chunk[MT_MAX];
};

/* grid (SUM_BLOCKS, tensors): block (b, y) is k_sum's block b of tensor y; part [y][b] */
__global__ void sum_partial_many(double *part, MtSums a) {
    unsigned y = blockIdx.y;
    sum_block(part + (size_t)y * SUM_BLOCKS, a.x[y], a.n[y], a.chunk[y], 1, blockIdx.x);
}

/* grid (tensors): block y is k_sum's final block of tensor y */
__global__ void sum_final_many(double *out, const double *part) {
    final_block(out + blockIdx.x, part + (size_t)blockIdx.x * SUM_BLOCKS, SUM_BLOCKS);
}

size_t k_sums_workspace(void) { return (size_t)MT_MAX * SUM_BLOCKS * sizeof(double); }

void k_sumsq_many(CudaCtx *c, double *out, const float *const *x, const size_t *n, int count) {
    double *part = (double *)grow(c, &c->sums, k_sums_workspace());
    for (int i0 = 0; i0 < count; i0 += MT_MAX) { /* part is reused in stream order */
        int k = count - i0 < MT_MAX ? count - i0 : MT_MAX;
        MtSums a;
        memset(&a, 0, sizeof a);
        for (int j = 0; j < k; j++) {
            a.x[j] = x[i0 + j];
            a.n[j] = n[i0 + j];
            a.chunk[j] = sum_chunk(n[i0 + j]);
        }
        sum_partial_many<<<dim3(SUM_BLOCKS, (unsigned)k), 256, 0, c->stream>>>(part, a);
        KCHECK(c, "sum_partial_many");
        sum_final_many<<<(unsigned)k, 256, 0, c->stream>>>(out + i0, part);
        KCHECK(c, "sum_final_many");
    }
}

/* Element i of an AdamW step: optim.h optim_adamw_update, term for term; returns the new
 * p[i]. One function for adamw_k and adamw_many_k: the same bits. */
static __device__ __forceinline__ float adamw_elem(float *p, const float *g, float *m, float *v,
                                                   size_t i, float lr, float beta1, float beta2,
                                                   float eps, float wd, float grad_scale, float bc1,
                                                   float bc2) {
    float gi = grad_scale * g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2, pi = p[i];
    pi -= lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
    p[i] = pi;
    return pi;
}

__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, float grad_scale, float bc1,
                        float bc2) {
    GRID_STRIDE(i, n) adamw_elem(p, g, m, v, i, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
}

/* [Note: many tensors]: a block per MT_ELEMS elements of one tensor; tensor y's blocks are
 * first[y] .. first[y + 1] - 1 (none for an empty tensor); copy[y]: NULL, or where the new
 * values go in bf16 too ([Note: kept weight copy] in backend_cuda.cu). 3.6 KB of parameters
 * (under the classic 4 KB). */
#define MT_ELEMS 2048 /* 256 threads x 8 */
struct MtAdamw {
    float *p[MT_MAX];
    const float *g[MT_MAX];
    float *m[MT_MAX], *v[MT_MAX];
    __nv_bfloat16 *copy[MT_MAX];
    size_t n[MT_MAX];
    float wd[MT_MAX];
    unsigned first[MT_MAX + 1];
};
static_assert(sizeof(MtAdamw) + 8 * sizeof(float) + sizeof(int) <= 4096,
              "adamw_many_k's parameters within 4 KB");

__global__ void adamw_many_k(MtAdamw a, int k, float lr, float beta1, float beta2, float eps,
                             float grad_scale, float bc1, float bc2) {
    unsigned b = blockIdx.x;
    int y = 0;
    while (y + 1 < k && a.first[y + 1] <= b) y++; /* at most MT_MAX steps, the same in a block */
    size_t lo = (size_t)(b - a.first[y]) * MT_ELEMS, n = a.n[y];
    size_t hi = lo + MT_ELEMS < n ? lo + MT_ELEMS : n;
    __nv_bfloat16 *copy = a.copy[y];
    for (size_t i = lo + threadIdx.x; i < hi; i += 256) {
        float p = adamw_elem(a.p[y], a.g[y], a.m[y], a.v[y], i, lr, beta1, beta2, eps, a.wd[y],
                             grad_scale, bc1, bc2);
        if (copy) copy[i] = __float2bfloat16_rn(p); /* to_bf16's rounding */
    }
}

void k_adamw_many(CudaCtx *c, const PPOptTensor *t, const KeptCopy *kept, int count, float lr,
                  float beta1, float beta2, float eps, float grad_scale, float bc1, float bc2) {
    for (int i0 = 0; i0 < count; i0 += MT_MAX) {
        int k = count - i0 < MT_MAX ? count - i0 : MT_MAX;
        MtAdamw a;
        memset(&a, 0, sizeof a);
        size_t blocks = 0;
        for (int j = 0; j < k; j++) {
            const PPOptTensor *s = &t[i0 + j];
            a.p[j] = s->p;
            a.g[j] = s->g;
            a.m[j] = s->m;
            a.v[j] = s->v;
            a.copy[j] = kept && inside(s->p, s->n, kept->w, kept->n) ? kept->copy + (s->p - kept->w)
                                                                     : NULL;
            a.n[j] = s->n;
            a.wd[j] = s->weight_decay;
            a.first[j] = (unsigned)blocks;
            blocks += (s->n + MT_ELEMS - 1) / MT_ELEMS;
        }
        a.first[k] = (unsigned)blocks;
        if (blocks > 0x7fffffffu) /* 2^31 blocks of 2048: 4.4e12 parameters a launch */
            pp_cuda_die(c, __FILE__, __LINE__, "adamw_many", "too many blocks",
                        "split the tensors");
        if (!blocks) continue;
        adamw_many_k<<<(unsigned)blocks, 256, 0, c->stream>>>(a, k, lr, beta1, beta2, eps,
                                                              grad_scale, bc1, bc2);
        KCHECK(c, "adamw_many_k");
    }
}

__global__ void sgd_k(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                      float wd, float grad_scale, float keep) {
    GRID_STRIDE(i, n) { /* optim.h optim_sgd_update */
        float d = grad_scale * g[i] + wd * p[i];
        if (momentum == 0.0f) {
            p[i] -= lr * d;
        } else {
            float b = keep * buf[i] + d;
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

void k_adamw(CudaCtx *c, float *p, const float *g, float *m, float *v, size_t n, float lr,
             float beta1, float beta2, float eps, float wd, float grad_scale, float bc1,
             float bc2) {
    adamw_k<<<grid_for(n, 256), 256, 0, c->stream>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd,
                                                     grad_scale, bc1, bc2);
    KCHECK(c, "adamw_k");
}

void k_sgd(CudaCtx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
           float wd, float grad_scale, int first) {
    sgd_k<<<grid_for(n, 256), 256, 0, c->stream>>>(p, g, buf, n, lr, momentum, wd, grad_scale,
                                                    first ? 0.0f : momentum);
    KCHECK(c, "sgd_k");
}
