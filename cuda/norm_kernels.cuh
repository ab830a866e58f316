/* norm_kernels.cuh — the row helpers of the norm kernels (Row4, sum4, warp_sum) and the
 * one-pass backward of LayerNorm and RMSNorm ([Note: one-pass norm backward]). Device code
 * and the launch arithmetic only, no launches: kernels.cu includes it after the CUDA
 * headers, and test/norm_sim.cc after test/flash_sim.h's host stand-ins, to run these
 * very kernels on the host against the CPU backend.
 *
 * [Note: one-pass norm backward] LayerNorm's backward needs two sums along each row for
 * dinp (sd = mean(w dout), sdx = mean(w dout xhat)) and two down each column for the
 * weights (dw = sum dout xhat, db = sum dout); RMSNorm's one of each (sdx; dw). The
 * two-pass kernels (ln_bwd_dx / rms_bwd_dx, then col_partial) read dout and inp once for
 * each. norm_bwd reads them once: a CTA takes a chunk of `rows` consecutive rows, and
 * thread t of its T owns the groups (float4, or single floats where C % 4 or an alignment
 * forbids: [Note: vector loads]) t, t + T, .., t + (K-1) T of every row. A step takes
 * S = NB_STEP / K rows: all its loads first (dout, inp, dinp: 3 S K float4 a thread in
 * flight), then the row sums (each thread's groups in order, the warp's butterfly, the
 * warps' partial sums in warp order through shared memory: one __syncthreads a step, two
 * buffers taking turns), dinp written, and the step's rows added, in row order, into the
 * thread's column sums, held in registers. At the end the CTA writes its chunk's sums,
 * part[chunk][NS][C] (NS = 2: dw, db; RMS 1: dw) as col_partial does, and col_final adds
 * the chunks in order. Every sum runs in an order fixed by C, N and rows ([Note:
 * deterministic kernels] in kernels.cu). [Note: split backward]: the I half is the same
 * template with the column sums compiled out (DW), the W half with the dinp work (DX);
 * the arithmetic is written with explicit rounding (__fmul_rn, __fadd_rn, __fmaf_rn, which
 * the compiler never contracts or reorders), so the three instantiations give the same
 * bits. A column's sum is the same chain of its rows in row order whatever the groups
 * (float4 or single) or K: the chunk sums are the same bits either way (kernels.cu's
 * norm_backward relies on it where dinp alone is misaligned). Shapes (nb_shape, nb_rows):
 * K the least of 1, 2, 4 with T = 32 ceil(G / K / 32) <= 512 threads (C = 768: K 1, T 192;
 * C up to 8192 with float4, 2048 without; wider rows take the two-pass kernels); rows a
 * multiple of NB_STEP making about NB_CHUNKS chunks (N = 16384: 64 rows, 256 chunks of 16
 * steps; the arithmetic is in cuda/NOTES.md). */
#ifndef PP_NORM_KERNELS_CUH
#define PP_NORM_KERNELS_CUH

#include "operand_io.cuh" /* get, get4: dout is an operand (fp32 or bf16) */

/* Element group j (of 4 floats when V4, else 1) of row x: the lane's share of a row is
 * groups lane, lane + 32, ... ([Note: vector loads]; V4 needs C % 4 == 0 and 16-byte
 * aligned rows). The sums run in each lane's group order, then the warp's butterfly:
 * an order fixed by C alone. */
template <bool V4> struct Row4 {
    static __device__ __forceinline__ int groups(int C) { return V4 ? C / 4 : C; }
    static __device__ __forceinline__ float4 load(const float *x, int j) {
        if (V4) return ((const float4 *)x)[j];
        return make_float4(x[j], 0.0f, 0.0f, 0.0f);
    }
    /* a bf16 operand row (dout): 8 bytes a group, widened */
    static __device__ __forceinline__ float4 load(const __nv_bfloat16 *x, int j) {
        if (V4) return get4(x + 4 * j);
        return make_float4(get(x + j), 0.0f, 0.0f, 0.0f);
    }
    static __device__ __forceinline__ void store(float *x, int j, float4 v) {
        if (V4) ((float4 *)x)[j] = v;
        else x[j] = v.x;
    }
    static __device__ __forceinline__ void store(__nv_bfloat16 *x, int j, float4 v) {
        if (V4) put4(x + 4 * j, v);
        else put(x + j, v.x);
    }
};

static __device__ __forceinline__ float sum4(float4 v, bool all) {
    return all ? (v.x + v.y) + (v.z + v.w) : v.x;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v; /* the same bits in every lane: a + b == b + a */
}

#define NB_STEP 4      /* rows a step times groups a thread (S K) */
#define NB_THREADS 512 /* the most threads of a CTA */
#define NB_CHUNKS 256  /* about this many chunks, so col_final's partial rows stay few */

/* The launch shape of rows of C: K groups a thread, T threads; K = 0 where the one-pass
 * kernel does not take C (then the two-pass kernels run). */
struct NbShape {
    int K, T;
};
static inline NbShape nb_shape(int C, bool v4) {
    int G = v4 ? C / 4 : C;
    for (int K = 1; K <= NB_STEP; K *= 2) {
        int T = ((G + K - 1) / K + 31) / 32 * 32;
        if (T <= NB_THREADS) return NbShape{K, T};
    }
    return NbShape{0, 0};
}

/* Rows a chunk: `forced` (PPTRAIN_LN_BWD=one-pass:R) when positive, else the least
 * multiple of NB_STEP that makes at most NB_CHUNKS chunks of N rows. */
static inline int nb_rows(int N, int forced) {
    if (forced > 0) return forced;
    int r = (N + NB_CHUNKS - 1) / NB_CHUNKS;
    return r < 1 ? NB_STEP : (r + NB_STEP - 1) / NB_STEP * NB_STEP;
}

/* Dynamic shared memory of a launch of T threads: two buffers of each warp's row sums. */
static inline size_t nb_smem(int T, bool rms, int K) {
    return 2 * (size_t)(T / 32) * (rms ? 1 : 2) * (NB_STEP / K) * sizeof(float);
}

/* ---- the arithmetic, rounded explicitly (the same bits in every instantiation) ---- */

/* xhat = (x - mean) * rstd (LayerNorm) or x * rstd (RMSNorm), per element. */
template <bool RMS> static __device__ __forceinline__ float nb_xh(float x, float m, float r) {
    return RMS ? __fmul_rn(x, r) : __fmul_rn(__fsub_rn(x, m), r);
}
template <bool RMS> static __device__ __forceinline__ float4 nb_xh4(float4 x, float m, float r) {
    return make_float4(nb_xh<RMS>(x.x, m, r), nb_xh<RMS>(x.y, m, r), nb_xh<RMS>(x.z, m, r),
                       nb_xh<RMS>(x.w, m, r));
}
static __device__ __forceinline__ float4 nb_mul4(float4 a, float4 b) {
    return make_float4(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y), __fmul_rn(a.z, b.z),
                       __fmul_rn(a.w, b.w));
}
static __device__ __forceinline__ float nb_sum4(float4 v, bool all) {
    return all ? __fadd_rn(__fadd_rn(v.x, v.y), __fadd_rn(v.z, v.w)) : v.x;
}
/* dinp += rstd (dn - sd - xhat sdx), dn = w dout (LayerNorm; RMSNorm has no sd term). */
template <bool RMS>
static __device__ __forceinline__ float nb_dx(float o, float dn, float xh, float r, float sd,
                                              float sdx) {
    float a = RMS ? dn : __fsub_rn(dn, sd);
    return __fadd_rn(o, __fmul_rn(r, __fmaf_rn(-xh, sdx, a)));
}

/* The one-pass backward of chunk blockIdx.x ([Note: one-pass norm backward]), dout of the
 * operand type DT (fp32 or bf16, widened on load: the arithmetic is fp32 either way): with DX,
 * dinp[N,C] += LayerNorm's (RMSNorm's) input gradient, and where dop is not NULL dop[N,C] (DT)
 * = the sum rounded, to_operand's bits (the residual gradient a matmul reads next); with DW,
 * part[chunk][0][c] = sum over the chunk's rows of dout xhat and (LayerNorm) part[chunk][1][c] =
 * sum of dout. mean is not read for RMS. inp, the forward's input, is of the residual type XT
 * (fp32 or bf16, widened on load). T = blockDim.x (a multiple of 32) threads, nb_smem bytes
 * of dynamic shared memory. */
template <bool V4, bool RMS, bool DX, bool DW, int K, typename DT = float, typename XT = float>
__global__ void __launch_bounds__(NB_THREADS)
    norm_bwd(float *dinp, DT *dop, float *part, const DT *dout, const XT *inp, const float *mean,
             const float *rstd, const float *w, int N, int C, int rows) {
    typedef Row4<V4> R;
    constexpr int S = NB_STEP / K, NV = RMS ? S : 2 * S; /* rows a step; row sums a step */
    extern __shared__ __align__(16) unsigned char smem[];
    float *red = (float *)smem; /* [2][warps][NV] */
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, wid = t >> 5, nw = T >> 5;
    const int G = R::groups(C), r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 wv[K], aw[K], ab[K]; /* w; the column sums of dout xhat and of dout */
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = t + k * T;
        wv[k] = DX && j < G ? R::load(w, j) : z;
        aw[k] = z;
        ab[k] = z;
    }
    int buf = 0;
    for (int r = r0; r < r1; r += S) {
        float4 d[S][K], x[S][K], o[S][K];
        float m[S], rs[S];
#pragma unroll
        for (int s = 0; s < S; s++) { /* every load of the step first: 3 S K in flight */
            int row = r + s;
            bool ok = row < r1;
            size_t off = (size_t)row * C;
            m[s] = !RMS && ok ? mean[row] : 0.0f;
            rs[s] = ok ? rstd[row] : 0.0f;
#pragma unroll
            for (int k = 0; k < K; k++) {
                int j = t + k * T;
                bool in = ok && j < G;
                d[s][k] = in ? R::load(dout + off, j) : z;
                x[s][k] = in ? R::load(inp + off, j) : z;
                o[s][k] = DX && in ? R::load(dinp + off, j) : z;
            }
        }
        if (DX) {
            /* row s's sums: v[s] = sdx (RMS); v[2s] = sd, v[2s + 1] = sdx (LayerNorm). The
             * rows past r1 and the groups past G hold zeros: they add nothing. */
            float v[NV];
#pragma unroll
            for (int s = 0; s < S; s++) {
                float sd = 0.0f, sdx = 0.0f;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    float4 dn = nb_mul4(wv[k], d[s][k]), xh = nb_xh4<RMS>(x[s][k], m[s], rs[s]);
                    sd = __fadd_rn(sd, nb_sum4(dn, V4));
                    sdx = __fadd_rn(sdx, nb_sum4(nb_mul4(dn, xh), V4));
                }
                v[RMS ? s : 2 * s] = sd; /* (RMS: overwritten next) */
                v[RMS ? s : 2 * s + 1] = sdx;
            }
#pragma unroll
            for (int i = 0; i < NV; i++) v[i] = warp_sum(v[i]);
            float *rb = red + buf * nw * NV;
            if (lane == 0)
#pragma unroll
                for (int i = 0; i < NV; i++) rb[wid * NV + i] = v[i];
            __syncthreads(); /* every warp's sums are in rb; the other buffer is free */
#pragma unroll
            for (int i = 0; i < NV; i++) {
                float tot = 0.0f;
                for (int q = 0; q < nw; q++) tot = __fadd_rn(tot, rb[q * NV + i]);
                v[i] = __fdiv_rn(tot, (float)C);
            }
            buf ^= 1;
#pragma unroll
            for (int s = 0; s < S; s++) {
                if (r + s >= r1) continue;
                float sd = RMS ? 0.0f : v[RMS ? s : 2 * s], sdx = v[RMS ? s : 2 * s + 1];
                float rr = rs[s];
                float *dx = dinp + (size_t)(r + s) * C;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    int j = t + k * T;
                    if (j >= G) continue;
                    float4 dn = nb_mul4(wv[k], d[s][k]), xh = nb_xh4<RMS>(x[s][k], m[s], rr);
                    float4 ov = o[s][k];
                    float4 nv = make_float4(nb_dx<RMS>(ov.x, dn.x, xh.x, rr, sd, sdx),
                                            nb_dx<RMS>(ov.y, dn.y, xh.y, rr, sd, sdx),
                                            nb_dx<RMS>(ov.z, dn.z, xh.z, rr, sd, sdx),
                                            nb_dx<RMS>(ov.w, dn.w, xh.w, rr, sd, sdx));
                    R::store(dx, j, nv);
                    if (dop) R::store(dop + (size_t)(r + s) * C, j, nv); /* to_operand's bits */
                }
            }
        }
        if (DW) {
#pragma unroll
            for (int s = 0; s < S; s++) { /* the chunk's rows in order */
                if (r + s >= r1) continue;
#pragma unroll
                for (int k = 0; k < K; k++) {
                    float4 dv = d[s][k], xh = nb_xh4<RMS>(x[s][k], m[s], rs[s]);
                    aw[k] =
                        make_float4(__fmaf_rn(dv.x, xh.x, aw[k].x), __fmaf_rn(dv.y, xh.y, aw[k].y),
                                    __fmaf_rn(dv.z, xh.z, aw[k].z), __fmaf_rn(dv.w, xh.w, aw[k].w));
                    if (!RMS)
                        ab[k] = make_float4(__fadd_rn(ab[k].x, dv.x), __fadd_rn(ab[k].y, dv.y),
                                            __fadd_rn(ab[k].z, dv.z), __fadd_rn(ab[k].w, dv.w));
                }
            }
        }
    }
    if (!DW) return;
    float *p = part + (size_t)blockIdx.x * (RMS ? 1 : 2) * C;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int j = t + k * T;
        if (j >= G) continue;
        R::store(p, j, aw[k]);
        if (!RMS) R::store(p + C, j, ab[k]);
    }
}

#endif
