/* flash_attn.cu — causal flash attention, forward and backward, on bf16 tensor cores
 * (mma.sync m16n8k16, fp32 accumulation): no [T,T] matrix in device memory, the forward
 * saves the log-sum-exp of each row, the backward recomputes the probabilities from it
 * and is deterministic (no atomics). The backend's switch between this and the
 * materialised attention is in backend_cuda.cu ([Note: attention path]); the design,
 * the counts and what is still unverified are in cuda/NOTES.md ("Flash attention").
 * test/test_flash_emul.c replays this file's tiling on the host, step for step, and
 * test/flash_sim.cc compiles this very file for the host (FLASH_HOST_SIM) and runs its
 * kernels there, each CTA's threads as fibers, mma.sync by the layout below.
 *
 * [Note: flash tiling]
 * The activations are fp32 [B,T,(NH + 2 NKV) hs]: the NH q heads, the NKV k heads, the NKV
 * v heads, head j of a part at channels j*hs.. ([Note: grouped-query attention] in
 * src/backend/backend.h; query head h reads kv head h / G, G = NH / NKV). A pack kernel
 * first writes them as bf16 (round to nearest even) in a head-major layout grouped by kv
 * head, [B][NKV][G + 2][T][HSP]: kv head j's block holds its group's G query heads, then
 * its k, then its v, so k and v are packed once per kv head and never copied per query
 * head; with G = 1 (GPT-2) this is [B][NH][3][T][HSP], q, k, v per head. dO [B,T,NH hs]
 * goes to [B][NH][T][HSP] for the backward. Each head's
 * rows contiguous, the head size zero-padded to a template size HSP (32, 64, 80, 96,
 * 128; zero columns add nothing to a dot product, and the padded output columns are
 * never written). Tiles then move with 16-byte cp.async copies, rows past T zero-filled,
 * into row-major shared arrays, the next tile's copies in flight while the current one
 * is computed (two buffers; a barrier after each tile's work guards the reuse). The
 * operand that an MMA reads transposed (V in P V, K in dS K, dO in P^T dO, Q in
 * dS^T Q) is read from its row-major tile by ldmatrix .trans; the operands a warp uses
 * on every tile (its Q rows, or its K and V rows in the dkv kernel) sit in registers.
 * Scores are handled in base 2: s2 = (q.k) * sl2 with sl2 = log2(e)/sqrt(hs), so
 * p = exp2(s2 - m) is the softmax numerator.
 *
 * forward: one CTA of 4 warps per (query tile of 64 rows, head, sequence); each warp
 *   owns 16 query rows. Key tiles of 64 (kt = 0..qt: the tiles past the diagonal are
 *   fully masked and never visited); S = Q K^T (fp32), the running max m and the
 *   running sum l per row are updated (O and l rescaled by exp2(m_old - m_new)), P is
 *   rounded to bf16 and O += P V. The causal mask (key > query) is applied on the
 *   diagonal tile only. At the end O / l is written, and lse = (m + log2 l) * ln 2
 *   (natural log, of the scaled scores) to lse[B,NH,T]: the backend's saved floats.
 * backward, two kernels, each output element written by exactly one thread:
 *   D = rowsum(dO o O) per row and head, in fp32 from the forward's output (a warp per
 *     row and head; the contract passes O to the backward), into a [B,NH,T] buffer.
 *   dq kernel, per query tile of 64 (4 warps x 16 rows): over the key tiles 0..qt
 *     recomputes S, P = exp2(S*sl2 - lse2) and dP = dO V^T, forms dS = P o (dP - D),
 *     rounds it to bf16 and accumulates dQ += dS K; dQ * scale is written.
 *   dkv kernel, per key tile of 64 of a kv head (4 warps x 16 keys): over the query
 *     steps of 32 (head sizes up to 64, three CTAs an SM: bwd's launch), 64 (80) or 32
 *     (96, 128: dkv_bq) from the tile's first key to T, recomputes S^T = K Q^T and
 *     dP^T = V dO^T, P^T and dS^T = P^T o (dP^T - D), and accumulates dV += P^T dO and
 *     dK += dS^T Q (both operands rounded to bf16); queries before the key or at/after T
 *     are masked. With G > 1 (the GQA instantiation) it does so for the group's query
 *     heads in order, 0..G-1, into the same registers: dK and dV of the kv head are the
 *     group's sum, written once, with no atomics and no per-head copy; the G = 1
 *     instantiation is the multi-head kernel, with no group loop.
 *   The fixed loop orders make the bits a function of the inputs alone.
 *
 * [Note: mma fragments] mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, checked
 * against the PTX ISA, section 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with
 * floating point type" (its A-operand rule was read in the stored copy; the B and C
 * rules below are the same section's, as used throughout CUTLASS-style code). With
 * g = lane / 4 and t = lane % 4, each 32-bit register holds two bf16, the lower index
 * in the low half:
 *   A (16x16, row-major): reg0 = A[g][2t, 2t+1], reg1 = A[g+8][2t, 2t+1],
 *                         reg2 = A[g][2t+8, 2t+9], reg3 = A[g+8][2t+8, 2t+9];
 *   B (16x8, k x n):      reg0 = B[2t, 2t+1][g], reg1 = B[2t+8, 2t+9][g];
 *   C, D (16x8, fp32):    c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1].
 * So A is read from a [m][k] shared array and B from an [n][k] one (each register one
 * aligned 32-bit load), and the C fragments of two adjacent 8-column score blocks are
 * exactly the A fragment of a 16-key chunk (reg0 = block 2kk c0,c1; reg1 = block 2kk
 * c2,c3; reg2 = block 2kk+1 c0,c1; reg3 = block 2kk+1 c2,c3): P and dS go from the
 * accumulators into the next MMA without shared memory. Rows of the shared arrays are
 * padded by 8 bf16 (16 bytes) so that a fragment load's 32 lanes hit 32 banks.
 *
 * [Note: flash backward v2] The backward's kernels are latency-bound at low occupancy
 * (Nsight Compute, H100, GPT-2 124M: dq 175 registers, 2 CTAs = 8 warps an SM; dkv 168
 * registers, 3 CTAs = 12 warps; issue slots 32-40% busy), so v2 trades registers for
 * warps, with the same products summed in the same order (v1's bits, checked by
 * test/flash_sim.cc and gpu_ops):
 *   prep: flash_prep packs dO and computes D in one pass over dout (flash_pack of dO and
 *     flash_rowdot each read it: 50 MB of fp32 less a layer at B 16, T 1024);
 *   dq:   key tiles of FA_BK2 = 32 (S and dP take 32 registers, not 64), held to
 *     dq2_minb CTAs an SM: at hs 64, 128 registers and 4 CTAs (16 warps), no spill;
 *   dkv:  the warp's K and V rows read from the staged tile at each step (mma_rows_s)
 *     instead of held (32 registers), query steps of 32, dkv2_minb CTAs an SM: at hs 64,
 *     128 registers and 4 CTAs (16 warps), 28 bytes of spill (ptxas, sm_90; v1 held 3
 *     CTAs at 168 without), 25% more shared-memory reads.
 * The v2 dq kernel visits the 32-key tiles up to the query tile's last row and stops at
 * T; what v1 visits and v2 does not (the half of a 64-key tile past T, and at hs 80 the
 * dkv kernel's 64-query step past T) adds only zero products. PPTRAIN_FLASH_BWD (read once at open, backend_cuda.cu [Note: attention
 * path]) picks v2 (unset or "v2"), v1, or v2's parts joined by '+' ("prep+dq"), so one
 * GPU call can time each part; cuda/NOTES.md has the counts and the predictions. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef FLASH_HOST_SIM /* test/flash_sim.cc: these kernels run on the host, lanes as fibers */
#include "flash_sim.h"
#else
#include "cuda_internal.cuh"
#endif

#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)
#define FA_BR 64 /* query rows per CTA (forward, dq kernel) */
#define FA_BC 64 /* keys per tile (forward, dq kernel); keys per CTA (dkv kernel) */
/* Query rows per step of the dkv kernel: 64 (8% faster than 32 at hs 64 on the H100,
 * cuda/NOTES.md), 32 from HSP 96 on, where 64 would spill registers. */
template <int HSP> constexpr int dkv_bq() { return HSP >= 96 ? 32 : 64; }
/* The backward v2 ([Note: flash backward v2]): the dq kernel's CTAs an SM (key tiles of
 * 32), the dkv kernel's (K and V read from shared memory, query steps of 32): the most
 * that ptxas fits without a spill (but the dkv kernel at 64, 28 bytes: the note). */
template <int HSP, bool GQA> constexpr int dq2_minb() {
    return HSP <= 32 ? 4 : HSP <= 64 ? (GQA ? 3 : 4) : HSP <= 80 ? 3 : HSP <= 96 ? (GQA ? 2 : 3) : 2;
}
template <int HSP> constexpr int dkv2_minb() { return HSP <= 64 ? 4 : HSP <= 96 ? 3 : 2; }
#define FA_BK2 32 /* the v2 dq kernel's key tile */
#define FA_BQ2 32 /* the v2 dkv kernel's query step */
/* The backward's parts that run the v2 code (CudaCtx.flash_bwd, a mask of these). */
enum { FLASH_BWD_PREP = 1, FLASH_BWD_DQ = 2, FLASH_BWD_DKV = 4, FLASH_BWD_V2 = 7 };
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16;

#ifndef FLASH_HOST_SIM /* the simulator's mma_bf16 computes the PTX layout's product on the host */
static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                                uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

#ifndef FLASH_HOST_SIM /* the simulator's versions: test/flash_sim.cc */
static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
/* 16 bytes from global to shared memory, asynchronously; valid = 0 writes 16 zero bytes
 * (src is then not read, but must be a valid address). Both addresses 16-byte aligned. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid));
}
static __device__ __forceinline__ void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::);
}
/* This thread's copies have landed (a barrier then makes every thread's visible). */
static __device__ __forceinline__ void cp_async_wait_all(void) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
/* Four 8x8 bf16 matrices read transposed: lane l passes the address of row l % 8 of
 * matrix l / 8 (16-byte aligned); register i gets matrix i's elements [2t][g], [2t+1][g]
 * (g = lane / 4, t = lane % 4), the B fragment of a row-major [k][n] array. */
static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const __nv_bfloat16 *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}
#endif

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (low half) = lo */
    uint32_t u;
    memcpy(&u, &v, sizeof u); /* a register move once compiled */
    return u;
}

static __device__ __forceinline__ uint32_t ld32(const bf16 *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}

/* The A fragment of rows r0.., columns c0.. of a [m][k] array with row stride ld. */
static __device__ __forceinline__ void load_a(uint32_t a[4], const bf16 *x, int ld, int r0, int c0,
                                              int g, int t) {
    a[0] = ld32(x + (r0 + g) * ld + c0 + 2 * t);
    a[1] = ld32(x + (r0 + g + 8) * ld + c0 + 2 * t);
    a[2] = ld32(x + (r0 + g) * ld + c0 + 2 * t + 8);
    a[3] = ld32(x + (r0 + g + 8) * ld + c0 + 2 * t + 8);
}

/* D[16 x 8*NB] += A[16 x 16*KC] B, A in fragment registers (the warp's 16 rows), B from
 * the [n][k] array b (rows n = 0..8*NB-1, row stride ldb). */
template <int NB, int KC>
static __device__ __forceinline__ void mma_rows(float d[NB][4], const uint32_t a[KC][4],
                                                const bf16 *b, int ldb, int g, int t) {
#pragma unroll
    for (int kc = 0; kc < KC; kc++)
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
            mma_bf16(d[nb], a[kc], ld32(b + (nb * 8 + g) * ldb + kc * 16 + 2 * t),
                     ld32(b + (nb * 8 + g) * ldb + kc * 16 + 2 * t + 8));
}

/* mma_rows with A read from shared memory: rows r0..r0+15 of the [m][k] array x (row
 * stride ldx), one 16-column fragment at a time, in mma_rows' order (the same sums). */
template <int NB, int KC>
static __device__ __forceinline__ void mma_rows_s(float d[NB][4], const bf16 *x, int ldx, int r0,
                                                  const bf16 *b, int ldb, int g, int t) {
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        uint32_t a[4];
        load_a(a, x, ldx, r0, kc * 16, g, t);
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
            mma_bf16(d[nb], a, ld32(b + (nb * 8 + g) * ldb + kc * 16 + 2 * t),
                     ld32(b + (nb * 8 + g) * ldb + kc * 16 + 2 * t + 8));
    }
}

/* D[16 x 8*NO] += P[16 x 16*KC] X where P is in C-fragment form (p[2*KC][4], rounded to
 * bf16 here) and X is the row-major [k][n] array x (k = 16*KC rows, row stride ld): the
 * B fragments by ldmatrix .trans, two 8-column blocks per load. */
template <int NO, int KC>
static __device__ __forceinline__ void mma_acc_t(float d[NO][4], const float p[2 * KC][4],
                                                 const bf16 *x, int ld, int lane) {
    int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lc = (lane >> 4) * 8; /* this lane's row address */
#pragma unroll
    for (int kk = 0; kk < KC; kk++) {
        uint32_t fa[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                          pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                          pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                          pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int n2 = 0; n2 < NO / 2; n2++) {
            uint32_t r[4];
            ldsm_x4_t(r, x + (kk * 16 + lr) * ld + n2 * 16 + lc);
            mma_bf16(d[2 * n2], fa, r[0], r[1]);
            mma_bf16(d[2 * n2 + 1], fa, r[2], r[3]);
        }
    }
}

/* The kernels' outputs (out, dqkv) and the backward's reading of out are in the backend's
 * operand type ([Note: operand activations] in src/backend/backend.h): fp32, or bf16 rounded to
 * nearest even. */
static __device__ __forceinline__ void put(float *y, float v) { *y = v; }
static __device__ __forceinline__ void put(bf16 *y, float v) { *y = __float2bfloat16_rn(v); }
static __device__ __forceinline__ float get(const float *x) { return *x; }
static __device__ __forceinline__ float get(const bf16 *x) { return __bfloat162float(*x); }

/* Row half hf of a warp's [16 x 8*NO] fp32 accumulator acc (C-fragment layout, [Note: mma
 * fragments]) times `scale`, to y[0..hs) (the columns of this thread's row that exist). */
template <int NO, typename OutT>
static __device__ __forceinline__ void store_row(OutT *y, const float acc[NO][4], int hf, int t,
                                                 int hs, float scale) {
#pragma unroll
    for (int i = 0; i < NO; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int col = i * 8 + 2 * t + e;
            if (col < hs) put(y + col, acc[i][2 * hf + e] * scale);
        }
}

/* ---- packing ----------------------------------------------------------------------------- */

/* src rows [B,T][ld] of hs-channel heads (InT: the operand type) -> dst bf16
 * [B][NKV][parts][T][HSP] ([Note: flash tiling]), channels hs..HSP-1 zero: block p < G of kv head j
 * is query head j*G + p (channels (j*G + p)*hs..), blocks G and G + 1 its k and v head (channels
 * (NH + j)*hs.. and (NH + NKV + j)*hs.., NH = NKV*G). q, k, v: parts = G + 2; dO: NKV = NH, G = 1,
 * parts = 1. A thread per 8 channels (one 16-byte store). */
template <int HSP, typename InT>
__global__ void __launch_bounds__(FA_THREADS)
flash_pack(bf16 *dst, const InT *src, int B, int T, int NKV, int G, int parts, int hs, size_t ld) {
    constexpr int CH = HSP / 8;
    size_t total = (size_t)B * NKV * parts * T * CH;
    for (size_t i = (size_t)blockIdx.x * FA_THREADS + threadIdx.x; i < total;
         i += (size_t)gridDim.x * FA_THREADS) {
        int c = (int)(i % CH);
        size_t row = i / CH; /* ((b * NKV + j) * parts + p) * T + tt */
        int tt = (int)(row % T), p = (int)(row / T % parts), j = (int)(row / T / parts % NKV);
        int b = (int)(row / T / parts / NKV);
        int head = p < G ? j * G + p : NKV * G + (p - G) * NKV + j; /* q; k, v */
        const InT *x = src + ((size_t)b * T + tt) * ld + (size_t)head * hs;
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int d = c * 8 + 2 * k;
            w[k] = pack_bf16(d < hs ? get(x + d) : 0.0f, d + 1 < hs ? get(x + d + 1) : 0.0f);
        }
        uint4 v = {w[0], w[1], w[2], w[3]};
        *reinterpret_cast<uint4 *>(dst + row * HSP + c * 8) = v;
    }
}

/* The packed q and k of query head h of sequence b ([Note: flash tiling]; v follows k):
 * with GQA, kv head h / G's block holds the group's G q matrices, then k, then v, each
 * [T][HSP]; without (the multi-head kernels: G = 1), head h's block holds its q, k, v,
 * addressed as before grouped-query attention came. */
template <int HSP, bool GQA>
static __device__ __forceinline__ void head_ptrs(const bf16 *qh, int b, int h, int NH, int G,
                                                 int T, const bf16 *&q, const bf16 *&k) {
    if (GQA) {
        int kv = h / G;
        const bf16 *grp = qh + ((size_t)b * (NH / G) + kv) * (G + 2) * T * HSP;
        q = grp + (size_t)(h - kv * G) * T * HSP;
        k = grp + (size_t)G * T * HSP;
    } else {
        q = qh + ((size_t)b * NH + h) * 3 * T * HSP;
        k = q + (size_t)T * HSP;
    }
}

/* D[b,h,t] = sum over head h's channels of dout o out in fp32 ([B,T,C] both, InT and OutT
 * the operand type): the
 * backward's D = rowsum(dO o O), a warp per (row, head), lanes over the channels, then a
 * fixed shuffle tree. The loop is the block's (every warp the same trips). */
template <typename OutT, typename InT>
__global__ void __launch_bounds__(FA_THREADS)
flash_rowdot(float *D, const InT *dout, const OutT *out, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * T * NH, C = (size_t)NH * hs;
    int lane = threadIdx.x % 32;
    for (size_t w0 = (size_t)blockIdx.x * FA_WARPS; w0 < n; w0 += (size_t)gridDim.x * FA_WARPS) {
        size_t w = w0 + threadIdx.x / 32, row = w / NH; /* row = b * T + t */
        int h = (int)(w % NH);
        const InT *x = dout + row * C + (size_t)h * hs;
        const OutT *o = out + row * C + (size_t)h * hs;
        float acc = 0.0f;
        if (w < n)
            for (int d = lane; d < hs; d += 32) acc += get(x + d) * get(o + d);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (w < n && lane == 0) D[(row / T * NH + h) * T + row % T] = acc;
    }
}

/* The backward v2's prep ([Note: flash backward v2]): flash_pack of dO (NH groups of one)
 * and flash_rowdot in one pass over dout, a warp per (row, head) as flash_rowdot, lane l
 * on channels l, l + 32, .. : D gets flash_rowdot's sums in its order (the same bits),
 * doh[B][NH][T][HSP] flash_pack's bf16 values, channels hs..HSP-1 zero. */
template <int HSP, typename OutT, typename InT>
__global__ void __launch_bounds__(FA_THREADS)
flash_prep(bf16 *doh, float *D, const InT *dout, const OutT *out, int B, int T, int NH, int hs) {
    size_t n = (size_t)B * T * NH, C = (size_t)NH * hs;
    int lane = threadIdx.x % 32;
    for (size_t w0 = (size_t)blockIdx.x * FA_WARPS; w0 < n; w0 += (size_t)gridDim.x * FA_WARPS) {
        size_t w = w0 + threadIdx.x / 32, row = w / NH; /* row = b * T + t */
        int h = (int)(w % NH);
        size_t bht = (row / T * NH + h) * T + row % T; /* D's and doh's row: (b, h, t) */
        const InT *x = dout + row * C + (size_t)h * hs;
        const OutT *o = out + row * C + (size_t)h * hs;
        float acc = 0.0f;
        if (w < n)
            for (int d = lane; d < HSP; d += 32) {
                float xd = d < hs ? get(x + d) : 0.0f;
                if (d < hs) acc += xd * get(o + d);
                doh[bht * HSP + d] = __float2bfloat16_rn(xd);
            }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (w < n && lane == 0) D[bht] = acc;
    }
}

/* Copy rows r0..r0+R-1 of a packed [T][HSP] matrix into x[R][LD] with cp.async (issued,
 * not waited for); rows past T zero. */
template <int R, int HSP>
static __device__ __forceinline__ void stage(bf16 *x, int LD, const bf16 *src, int r0, int T) {
    constexpr int CH = HSP / 8;
    for (int i = threadIdx.x; i < R * CH; i += FA_THREADS) {
        int r = i / CH, c = i % CH;
        bool in = r0 + r < T;
        cp_async16(x + r * LD + c * 8, src + (size_t)(in ? r0 + r : 0) * HSP + c * 8, in ? 16 : 0);
    }
}

/* ---- forward --------------------------------------------------------------------------- */

template <int HSP> struct FwdSmem {
    static constexpr int LD = HSP + 8;
    /* Q, 2 x (K, V) */
    static constexpr size_t bytes = (size_t)(FA_BR * LD + 4 * FA_BC * LD) * sizeof(bf16);
};

/* GQA: query head h reads kv head h / G (the group-of-one instantiation is the multi-head
 * kernel, G unused). C = NH * hs, out's row. */
template <int HSP, typename OutT = float, bool GQA = false>
__global__ void __launch_bounds__(FA_THREADS)
flash_fwd(OutT *out, float *lse, const bf16 *qh, int T, int C, int NH, int hs, float sl2, int G) {
    constexpr int LD = FwdSmem<HSP>::LD, KC = HSP / 16, NO = HSP / 8;
    constexpr int NS = FA_BC / 8, KV = FA_BC * LD;
    extern __shared__ __align__(16) unsigned char smem[];
    /* sK, sV: two buffers each */
    bf16 *sQ = (bf16 *)smem, *sK = sQ + FA_BR * LD, *sV = sK + 2 * KV;
    int qt = gridDim.x - 1 - blockIdx.x; /* the longest rows (most key tiles) start first */
    int h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const bf16 *q, *k;
    head_ptrs<HSP, GQA>(qh, b, h, NH, G, T, q, k);
    const bf16 *v = k + (size_t)T * HSP;
    int q0 = qt * FA_BR, wr = warp * 16; /* the warp's rows in the tile */

    stage<FA_BR, HSP>(sQ, LD, q, q0, T);
    stage<FA_BC, HSP>(sK, LD, k, 0, T);
    stage<FA_BC, HSP>(sV, LD, v, 0, T);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    uint32_t qf[KC][4];
#pragma unroll
    for (int kc = 0; kc < KC; kc++) load_a(qf[kc], sQ, LD, wr, kc * 16, g, t);
    float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < NO; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const bf16 *K = sK + (kt & 1) * KV, *V = sV + (kt & 1) * KV;
        if (kt < qt) { /* the next tile's copies fly while this one is computed */
            stage<FA_BC, HSP>(sK + ((kt + 1) & 1) * KV, LD, k, (kt + 1) * FA_BC, T);
            stage<FA_BC, HSP>(sV + ((kt + 1) & 1) * KV, LD, v, (kt + 1) * FA_BC, T);
        }
        cp_async_commit();
        float s[NS][4];
#pragma unroll
        for (int i = 0; i < NS; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        mma_rows<NS, KC>(s, qf, K, LD, g, t);
        bool diag = kt == qt; /* q0 == k0: key column j is masked for tile row r when j > r */
#pragma unroll
        for (int hf = 0; hf < 2; hf++) { /* hf 0: row wr+g (c0, c1); hf 1: row wr+g+8 (c2, c3) */
            int r = wr + g + 8 * hf;
            float mx = -INFINITY;
#pragma unroll
            for (int nb = 0; nb < NS; nb++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = s[nb][2 * hf + e] * sl2;
                    if (diag && nb * 8 + 2 * t + e > r) x = -INFINITY;
                    s[nb][2 * hf + e] = x;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); /* the row's 4 threads */
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mnew = fmaxf(m[hf], mx); /* finite: every visited tile has a key <= the row */
            float alpha = exp2f(m[hf] - mnew), sum = 0.0f;
            m[hf] = mnew;
#pragma unroll
            for (int nb = 0; nb < NS; nb++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float p = exp2f(s[nb][2 * hf + e] - mnew);
                    s[nb][2 * hf + e] = p;
                    sum += p;
                }
            l[hf] = l[hf] * alpha + sum; /* this thread's columns; the row's sum at the end */
#pragma unroll
            for (int i = 0; i < NO; i++) o[i][2 * hf] *= alpha, o[i][2 * hf + 1] *= alpha;
        }
        mma_acc_t<NO, FA_BC / 16>(o, s, V, LD, lane);
        cp_async_wait_all();
        __syncthreads(); /* the next tile landed; nobody reads this one's buffers any more */
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float L = l[hf];
        L += __shfl_xor_sync(0xffffffffu, L, 1);
        L += __shfl_xor_sync(0xffffffffu, L, 2);
        int row = q0 + wr + g + 8 * hf;
        if (row >= T) continue;
        float inv = 1.0f / L;
        store_row<NO>(out + ((size_t)b * T + row) * C + (size_t)h * hs, o, hf, t, hs, inv);
        if (t == 0) lse[((size_t)b * NH + h) * T + row] = (m[hf] + log2f(L)) * FA_LN2;
    }
}

/* ---- backward: dQ (and D) per query tile ------------------------------------------------ */

/* BK: keys per tile (64: the first backward; 32: [Note: flash backward v2]) */
template <int HSP, int BK = FA_BC> struct DqSmem {
    static constexpr int LD = HSP + 8;
    /* Q, dO, 2 x (K, V) */
    static constexpr size_t bytes = (size_t)(2 * FA_BR * LD + 4 * BK * LD) * sizeof(bf16);
};

/* S and dP of the warp's 16 rows against the staged key tile of BK keys, P from the lse;
 * masked where diag, key column col of tile row r being key off + col of the tile's query
 * r (off: the key tile's first key less the query tile's first row). */
template <int HSP, int BK>
static __device__ __forceinline__ void dq_tile(float s[BK / 8][4], float dp[BK / 8][4],
                                               const uint32_t qf[HSP / 16][4],
                                               const uint32_t df[HSP / 16][4], const bf16 *K,
                                               const bf16 *V, int wr, bool diag, int off,
                                               const float lse2[2], float sl2, int g, int t) {
    constexpr int LD = HSP + 8, KC = HSP / 16, NS = BK / 8;
#pragma unroll
    for (int i = 0; i < NS; i++)
        s[i][0] = s[i][1] = s[i][2] = s[i][3] = dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
    mma_rows<NS, KC>(s, qf, K, LD, g, t);
    mma_rows<NS, KC>(dp, df, V, LD, g, t);
#pragma unroll
    for (int nb = 0; nb < NS; nb++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = wr + g + 8 * (j / 2), col = nb * 8 + 2 * t + (j & 1);
            s[nb][j] = diag && off + col > r ? 0.0f : exp2f(s[nb][j] * sl2 - lse2[j / 2]);
        }
}

/* GQA as flash_fwd's; dqkv's rows hold NH + 2 NKV heads (3 NH without GQA). Key tiles of
 * BK (64, or 32 in the backward v2), held to MINB CTAs an SM ([Note: flash backward v2]):
 * the tiles from key 0 to the query tile's last row, in order, so the accumulation order
 * of dQ (16 keys an MMA) is the same at either BK. */
template <int HSP, typename OutT = float, bool GQA = false, int BK = FA_BC, int MINB = 0>
__global__ void __launch_bounds__(FA_THREADS, MINB)
flash_bwd_dq(OutT *dqkv, const float *Din, const bf16 *doh, const bf16 *qh, const float *lse,
             int T, int C, int NH, int hs, float sl2, float scale, int G) {
    constexpr int LD = DqSmem<HSP, BK>::LD, KC = HSP / 16, NO = HSP / 8;
    constexpr int NS = BK / 8, KV = BK * LD;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem, *sdO = sQ + FA_BR * LD, *sK = sdO + FA_BR * LD, *sV = sK + 2 * KV;
    int qt = gridDim.x - 1 - blockIdx.x;
    int h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    size_t ld = GQA ? (size_t)(NH + 2 * (NH / G)) * hs : 3 * (size_t)C, bh = (size_t)b * NH + h;
    const bf16 *q, *k;
    head_ptrs<HSP, GQA>(qh, b, h, NH, G, T, q, k);
    const bf16 *v = k + (size_t)T * HSP;
    const bf16 *dy = doh + bh * T * HSP;
    int q0 = qt * FA_BR, wr = warp * 16;

    float lse2[2], D[2];
    /* rows past T: finite stand-ins (nothing of theirs is written) */
    for (int hf = 0; hf < 2; hf++) {
        int row = q0 + wr + g + 8 * hf;
        lse2[hf] = row < T ? lse[bh * T + row] * FA_LOG2E : 0.0f;
        D[hf] = row < T ? Din[bh * T + row] : 0.0f;
    }
    stage<FA_BR, HSP>(sQ, LD, q, q0, T);
    stage<FA_BR, HSP>(sdO, LD, dy, q0, T);
    stage<BK, HSP>(sK, LD, k, 0, T);
    stage<BK, HSP>(sV, LD, v, 0, T);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    uint32_t qf[KC][4], df[KC][4];
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        load_a(qf[kc], sQ, LD, wr, kc * 16, g, t);
        load_a(df[kc], sdO, LD, wr, kc * 16, g, t);
    }
    float s[NS][4], dp[NS][4], dq[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
    /* the key tiles up to the query tile's last row and T (at BK 64: 0..qt) */
    int nkt = qt + 1;
    if constexpr (BK != FA_BC) {
        int nkT = (T + BK - 1) / BK;
        nkt = (q0 + FA_BR) / BK < nkT ? (q0 + FA_BR) / BK : nkT;
    }
    for (int kt = 0; kt < nkt; kt++) { /* dS = P o (dP - D), dQ += dS K */
        const bf16 *K = sK + (kt & 1) * KV, *V = sV + (kt & 1) * KV;
        if (kt + 1 < nkt) {
            stage<BK, HSP>(sK + ((kt + 1) & 1) * KV, LD, k, (kt + 1) * BK, T);
            stage<BK, HSP>(sV + ((kt + 1) & 1) * KV, LD, v, (kt + 1) * BK, T);
        }
        cp_async_commit();
        /* a tile with a key past the query tile's first row is masked (BK 64: the last) */
        int off = BK == FA_BC ? 0 : kt * BK - q0;
        bool diag = BK == FA_BC ? kt == qt : off + BK - 1 > 0;
        dq_tile<HSP, BK>(s, dp, qf, df, K, V, wr, diag, off, lse2, sl2, g, t);
#pragma unroll
        for (int nb = 0; nb < NS; nb++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[nb][j] *= dp[nb][j] - D[j / 2];
        mma_acc_t<NO, BK / 16>(dq, s, K, LD, lane);
        cp_async_wait_all();
        __syncthreads();
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int row = q0 + wr + g + 8 * hf;
        if (row < T)
            store_row<NO>(dqkv + ((size_t)b * T + row) * ld + (size_t)h * hs, dq, hf, t, hs, scale);
    }
}

/* ---- backward: dK, dV per key tile ------------------------------------------------------ */

template <int HSP, int BQ = dkv_bq<HSP>()> struct DkvSmem {
    static constexpr int LD = HSP + 8;
    static constexpr size_t bytes =
        (size_t)(2 * FA_BC * LD + 4 * BQ * LD) * sizeof(bf16) /* K, V, 2 x (Q, dO) */
        + 4 * BQ * sizeof(float); /* 2 x (lse2, D) of the step's queries */
};

/* GQA: a CTA per key tile of a kv head (grid y), over its group's G query heads in turn,
 * dK and dV summed over them in registers; the group-of-one instantiation is the
 * multi-head kernel (grid y the head, G unused), with no group loop. KVS (the backward
 * v2, [Note: flash backward v2]): the warp's K and V rows are read from the staged tile
 * at every step instead of being held in registers (the same products, the same bits). */
template <int HSP, int BQ = dkv_bq<HSP>(), typename OutT = float, int MINB = 1, bool GQA = false,
          bool KVS = false>
__global__ void __launch_bounds__(FA_THREADS, MINB)
flash_bwd_dkv(OutT *dqkv, const float *Din, const bf16 *doh, const bf16 *qh, const float *lse,
              int T, int C, int NH, int hs, float sl2, float scale, int G) {
    constexpr int LD = DkvSmem<HSP, BQ>::LD, KC = HSP / 16, NO = HSP / 8;
    constexpr int NS = BQ / 8, QS = BQ * LD;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = (bf16 *)smem, *sV = sK + FA_BC * LD;
    bf16 *sQ = sV + FA_BC * LD, *sdO = sQ + 2 * QS;         /* two buffers each */
    float *sL = (float *)(sdO + 2 * QS), *sD = sL + 2 * BQ; /* two buffers each */
    const int GN = GQA ? G : 1;                             /* the group's query heads */
    int h = blockIdx.y, b = blockIdx.z; /* GQA: h is the kv head */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    /* bh: the (first) query head's row of lse and D */
    size_t ld = GQA ? (size_t)(NH + 2 * (NH / G)) * hs : 3 * (size_t)C;
    size_t bh = (size_t)b * NH + (size_t)h * GN;
    const bf16 *q, *k; /* GQA: the group's first q; the others follow it */
    if (GQA) {
        q = qh + ((size_t)b * (NH / G) + h) * (G + 2) * T * HSP;
        k = q + (size_t)G * T * HSP;
    } else {
        q = qh + bh * 3 * T * HSP;
        k = q + (size_t)T * HSP;
    }
    const bf16 *v = k + (size_t)T * HSP;
    const bf16 *dy = doh + bh * T * HSP; /* GQA: the group's dO, head after head */
    int k0 = blockIdx.x * FA_BC, wr = warp * 16; /* the warp's 16 keys: k0+wr.. */

    stage<FA_BC, HSP>(sK, LD, k, k0, T);
    stage<FA_BC, HSP>(sV, LD, v, k0, T);
    /* the first query step: queries before k0 see none of these keys */
    stage<BQ, HSP>(sQ, LD, q, k0, T);
    stage<BQ, HSP>(sdO, LD, dy, k0, T);
    cp_async_commit();
    if (threadIdx.x < BQ) {
        int row = k0 + threadIdx.x;
        sL[threadIdx.x] = row < T ? lse[bh * T + row] * FA_LOG2E : 0.0f;
        sD[threadIdx.x] = row < T ? Din[bh * T + row] : 0.0f;
    }
    cp_async_wait_all();
    __syncthreads();
    uint32_t kf[KC][4], vf[KC][4]; /* unused (and compiled away) with KVS */
    if (!KVS)
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            load_a(kf[kc], sK, LD, wr, kc * 16, g, t);
            load_a(vf[kc], sV, LD, wr, kc * 16, g, t);
        }
    float dk[NO][4], dv[NO][4];
#pragma unroll
    for (int i = 0; i < NO; i++)
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] =
            dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
    /* the steps (head gh of the group, queries q0..): without GQA, q0 = k0, k0 + BQ, .. < T */
    for (int it = 0, gh = 0, q0 = k0; GQA ? gh < GN : q0 < T; it++) {
        int cur = it & 1, nq = q0 + BQ, nh = gh;
        if (GQA && nq >= T) { /* next: the group's next head, from the tile's first key */
            nq = k0;
            nh = gh + 1;
        }
        bool more = GQA ? nh < GN : nq < T; /* is there a next step */
        const bf16 *Q = sQ + cur * QS, *dO = sdO + cur * QS;
        const float *L = sL + cur * BQ, *Dq = sD + cur * BQ;
        /* the next step's lse2 and D (thread < BQ), stored after the work */
        float nl = 0.0f, nd = 0.0f;
        if (more) {
            size_t nbh = GQA ? bh + nh : bh, nhead = GQA ? (size_t)nh * T * HSP : 0;
            stage<BQ, HSP>(sQ + (cur ^ 1) * QS, LD, q + nhead, nq, T);
            stage<BQ, HSP>(sdO + (cur ^ 1) * QS, LD, dy + nhead, nq, T);
            int row = nq + threadIdx.x;
            if (threadIdx.x < BQ && row < T) {
                nl = lse[nbh * T + row] * FA_LOG2E;
                nd = Din[nbh * T + row];
            }
        }
        cp_async_commit();
        float s[NS][4], dp[NS][4];
#pragma unroll
        for (int i = 0; i < NS; i++)
            s[i][0] = s[i][1] = s[i][2] = s[i][3] =
                dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
        if (KVS) {
            mma_rows_s<NS, KC>(s, sK, LD, wr, Q, LD, g, t);
            mma_rows_s<NS, KC>(dp, sV, LD, wr, dO, LD, g, t);
        } else {
            mma_rows<NS, KC>(s, kf, Q, LD, g, t);   /* S^T = K Q^T: keys x queries */
            mma_rows<NS, KC>(dp, vf, dO, LD, g, t); /* dP^T = V dO^T */
        }
#pragma unroll
        for (int nb = 0; nb < NS; nb++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + wr + g + 8 * (j / 2), qc = nb * 8 + 2 * t + (j & 1), qrow = q0 + qc;
                /* (queries past T are zero rows, so their dS and dO are 0 anyway) */
                float p = qrow < key || qrow >= T ? 0.0f : exp2f(s[nb][j] * sl2 - L[qc]);
                s[nb][j] = p;
                dp[nb][j] = p * (dp[nb][j] - Dq[qc]);
            }
        mma_acc_t<NO, BQ / 16>(dv, s, dO, LD, lane); /* dV += P^T dO */
        mma_acc_t<NO, BQ / 16>(dk, dp, Q, LD, lane); /* dK += dS^T Q */
        if (more && threadIdx.x < BQ) {
            sL[(cur ^ 1) * BQ + threadIdx.x] = nl;
            sD[(cur ^ 1) * BQ + threadIdx.x] = nd;
        }
        cp_async_wait_all();
        __syncthreads();
        q0 = nq;
        gh = nh;
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int key = k0 + wr + g + 8 * hf;
        if (key >= T) continue;
        OutT *yk, *yv;
        if (GQA) { /* kv head h's k and v: after the NH q heads, NKV = NH / G each */
            yk = dqkv + ((size_t)b * T + key) * ld + (size_t)(NH + h) * hs;
            yv = yk + (size_t)(NH / G) * hs;
        } else {
            yk = dqkv + ((size_t)b * T + key) * ld + C + (size_t)h * hs;
            yv = yk + C;
        }
#pragma unroll
        for (int i = 0; i < NO; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = i * 8 + 2 * t + e;
                if (col < hs) {
                    put(yk + col, dk[i][2 * hf + e] * scale);
                    put(yv + col, dv[i][2 * hf + e]);
                }
            }
    }
}

int flash_head_pad(int hs) {
    static const int pads[] = {32, 64, 80, 96, 128};
    for (int i = 0; i < 5; i++)
        if (hs >= 1 && hs <= pads[i]) return pads[i];
    return 0;
}

int flash_bwd_mode(const char *env) {
    if (!env || !*env || !strcmp(env, "v2")) return FLASH_BWD_V2;
    if (!strcmp(env, "v1")) return 0;
    static const struct {
        const char *name;
        int bit;
    } parts[] = {{"prep", FLASH_BWD_PREP}, {"dq", FLASH_BWD_DQ}, {"dkv", FLASH_BWD_DKV}};
    int mode = 0;
    for (const char *p = env;;) { /* part+part+.. */
        size_t n = strcspn(p, "+"), i = 0;
        while (i < 3 && !(strlen(parts[i].name) == n && !strncmp(p, parts[i].name, n))) i++;
        if (i == 3 || (mode & parts[i].bit)) return -1;
        mode |= parts[i].bit;
        if (!p[n]) return mode;
        p += n + 1;
    }
}

#ifndef FLASH_HOST_SIM
/* ---- launchers --------------------------------------------------------------------------- */

static unsigned qtiles(int T, int tile) { return (unsigned)((T + tile - 1) / tile); }

/* The packed bf16 copies ([Note: flash tiling]) live in the backend's bf16 operand
 * buffers (castA: q, k, v; castB: dO), which every op uses only while it runs. src rows
 * of ld values of the operand type InT, NKV groups of G heads of hs, parts blocks a group
 * (flash_pack). */
template <int HSP, typename InT>
static bf16 *pack(CudaCtx *c, Grow *buf, const InT *src, int B, int T, int NKV, int G, int parts,
                  int hs, size_t ld) {
    size_t rows = (size_t)B * NKV * parts * T, chunks = rows * (HSP / 8);
    bf16 *dst = (bf16 *)grow(c, buf, rows * HSP * sizeof(bf16));
    size_t blocks = (chunks + FA_THREADS - 1) / FA_THREADS;
    flash_pack<HSP><<<(unsigned)(blocks < 65536 ? blocks : 65536), FA_THREADS, 0, c->stream>>>(
        dst, src, B, T, NKV, G, parts, hs, ld);
    KCHECK(c, "flash_pack");
    return dst;
}

/* q, k and v of qkv [B,T,(NH + 2 NKV) hs], packed by kv head (castA). */
template <int HSP, typename InT>
static const bf16 *pack_qkv(CudaCtx *c, const InT *qkv, int B, int T, int NH, int NKV, int hs) {
    int G = NH / NKV;
    return pack<HSP>(c, &c->castA, qkv, B, T, NKV, G, G + 2, hs, (size_t)(NH + 2 * NKV) * hs);
}

/* [Note: flash tiling]: the multi-head kernels where every group is one head (NKV = NH),
 * the GQA instantiations otherwise. */
template <int HSP, typename OutT>
static void fwd(CudaCtx *c, OutT *out, float *lse, const OutT *qkv, int B, int T, int NH, int NKV,
                int hs) {
    size_t sm = FwdSmem<HSP>::bytes;
    int C = NH * hs, G = NH / NKV;
    float sl2 = FA_LOG2E / sqrtf((float)hs);
    const bf16 *qh = pack_qkv<HSP>(c, qkv, B, T, NH, NKV, hs);
    dim3 grid(qtiles(T, FA_BR), NH, B);
    if (G == 1) {
        CK(c, cudaFuncSetAttribute(flash_fwd<HSP, OutT>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        flash_fwd<HSP, OutT><<<grid, FA_THREADS, sm, c->stream>>>(out, lse, qh, T, C, NH, hs, sl2,
                                                                  1);
    } else {
        CK(c, cudaFuncSetAttribute(flash_fwd<HSP, OutT, true>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        flash_fwd<HSP, OutT, true><<<grid, FA_THREADS, sm, c->stream>>>(out, lse, qh, T, C, NH, hs,
                                                                        sl2, G);
    }
    KCHECK(c, "flash_fwd");
}

/* The dq kernel (a CTA per query tile, head and sequence): v1's, or with V2 key tiles of
 * FA_BK2 held to dq2_minb CTAs an SM. */
template <int HSP, typename OutT, bool V2>
static void launch_dq(CudaCtx *c, OutT *dqkv, const float *D, const bf16 *doh, const bf16 *qh,
                      const float *lse, int B, int T, int NH, int NKV, int hs, float sl2,
                      float scale) {
    constexpr int BK = V2 ? FA_BK2 : FA_BC, M1 = V2 ? dq2_minb<HSP, false>() : 0;
    constexpr int MG = V2 ? dq2_minb<HSP, true>() : 0;
    size_t sm = DqSmem<HSP, BK>::bytes;
    int C = NH * hs, G = NH / NKV;
    dim3 grid(qtiles(T, FA_BR), NH, B);
    if (G == 1) {
        CK(c, cudaFuncSetAttribute(flash_bwd_dq<HSP, OutT, false, BK, M1>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        flash_bwd_dq<HSP, OutT, false, BK, M1><<<grid, FA_THREADS, sm, c->stream>>>(
            dqkv, D, doh, qh, lse, T, C, NH, hs, sl2, scale, 1);
    } else {
        CK(c, cudaFuncSetAttribute(flash_bwd_dq<HSP, OutT, true, BK, MG>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        flash_bwd_dq<HSP, OutT, true, BK, MG><<<grid, FA_THREADS, sm, c->stream>>>(
            dqkv, D, doh, qh, lse, T, C, NH, hs, sl2, scale, G);
    }
    KCHECK(c, "flash_bwd_dq");
}

/* The dkv kernel with query step BQ, held to MINB CTAs an SM (its registers capped to fit):
 * a CTA per key tile, head and sequence, or with GQA per key tile, kv head and sequence. */
template <int HSP, int BQ, typename OutT, int MINB, bool KVS = false>
static void launch_dkv(CudaCtx *c, OutT *dqkv, const float *D, const bf16 *doh, const bf16 *qh,
                       const float *lse, int B, int T, int NH, int NKV, int hs, float sl2,
                       float scale) {
    size_t sm = DkvSmem<HSP, BQ>::bytes;
    int C = NH * hs, G = NH / NKV;
    dim3 grid(qtiles(T, FA_BC), NKV, B);
    if (G == 1) {
        CK(c, cudaFuncSetAttribute(flash_bwd_dkv<HSP, BQ, OutT, MINB, false, KVS>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        flash_bwd_dkv<HSP, BQ, OutT, MINB, false, KVS><<<grid, FA_THREADS, sm, c->stream>>>(
            dqkv, D, doh, qh, lse, T, C, NH, hs, sl2, scale, 1);
    } else {
        CK(c, cudaFuncSetAttribute(flash_bwd_dkv<HSP, BQ, OutT, MINB, true, KVS>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
        flash_bwd_dkv<HSP, BQ, OutT, MINB, true, KVS><<<grid, FA_THREADS, sm, c->stream>>>(
            dqkv, D, doh, qh, lse, T, C, NH, hs, sl2, scale, G);
    }
    KCHECK(c, "flash_bwd_dkv");
}

template <int HSP, typename OutT>
static void bwd(CudaCtx *c, OutT *dqkv, float *D, const OutT *dout, const OutT *qkv,
                const OutT *out, const float *lse, int B, int T, int NH, int NKV, int hs) {
    float scale = 1.0f / sqrtf((float)hs), sl2 = FA_LOG2E * scale;
    int mode = c->flash_bwd; /* [Note: flash backward v2] */
    const bf16 *qh = pack_qkv<HSP>(c, qkv, B, T, NH, NKV, hs);
    size_t warps = (size_t)B * T * NH, blocks = (warps + FA_WARPS - 1) / FA_WARPS;
    unsigned nb = (unsigned)(blocks < 65536 ? blocks : 65536);
    const bf16 *doh;
    if (mode & FLASH_BWD_PREP) { /* dO packed and D in one pass over dout */
        bf16 *dst = (bf16 *)grow(c, &c->castB, warps * HSP * sizeof(bf16));
        flash_prep<HSP><<<nb, FA_THREADS, 0, c->stream>>>(dst, D, dout, out, B, T, NH, hs);
        KCHECK(c, "flash_prep");
        doh = dst;
    } else {
        /* dO [B,T,NH hs] per query head: NH groups of one */
        doh = pack<HSP>(c, &c->castB, dout, B, T, NH, 1, 1, hs, (size_t)NH * hs);
        flash_rowdot<<<nb, FA_THREADS, 0, c->stream>>>(D, dout, out, B, T, NH, hs);
        KCHECK(c, "flash_rowdot");
    }
    if (mode & FLASH_BWD_DQ)
        launch_dq<HSP, OutT, true>(c, dqkv, D, doh, qh, lse, B, T, NH, NKV, hs, sl2, scale);
    else
        launch_dq<HSP, OutT, false>(c, dqkv, D, doh, qh, lse, B, T, NH, NKV, hs, sl2, scale);
    /* v1: up to 64 channels, query steps of 32 let three CTAs share an SM within 168
     * registers and no spill (0.794 -> 0.760 ms a layer at GPT-2 124M, B 16:
     * cuda/NOTES.md); wider heads would spill there and keep two (if constexpr: only the
     * launched ones compile). v2: K and V from shared memory, dkv2_minb CTAs an SM. */
    if (mode & FLASH_BWD_DKV)
        launch_dkv<HSP, FA_BQ2, OutT, dkv2_minb<HSP>(), true>(c, dqkv, D, doh, qh, lse, B, T, NH,
                                                              NKV, hs, sl2, scale);
    else if constexpr (HSP <= 64)
        launch_dkv<HSP, 32, OutT, 3>(c, dqkv, D, doh, qh, lse, B, T, NH, NKV, hs, sl2, scale);
    else
        launch_dkv<HSP, dkv_bq<HSP>(), OutT, 1>(c, dqkv, D, doh, qh, lse, B, T, NH, NKV, hs, sl2,
                                                scale);
}

size_t flash_pack_bytes(int B, int T, int heads, int hs) {
    return (size_t)B * heads * T * flash_head_pad(hs) * sizeof(bf16);
}

/* The head-size switch of a launcher template, for fp32 or bf16 operands. */
#define FLASH_HS_SWITCH(c, HS, CALL)                                                               \
    switch (flash_head_pad(HS)) {                                                                  \
    case 32: CALL(32); break;                                                                      \
    case 64: CALL(64); break;                                                                      \
    case 80: CALL(80); break;                                                                      \
    case 96: CALL(96); break;                                                                      \
    case 128: CALL(128); break;                                                                    \
    default:                                                                                       \
        pp_cuda_die(c, __FILE__, __LINE__, "flash attention", "unsupported head size",             \
                    "head size over 128");                                                         \
    }

void k_flash_forward(CudaCtx *c, void *out, float *lse, const void *qkv, int B, int T, int NH,
                     int NKV, int HS) {
#define FWD_F32(H) fwd<H>(c, (float *)out, lse, (const float *)qkv, B, T, NH, NKV, HS)
#define FWD_BF16(H) fwd<H>(c, (bf16 *)out, lse, (const bf16 *)qkv, B, T, NH, NKV, HS)
    if (c->op == PP_BF16) FLASH_HS_SWITCH(c, HS, FWD_BF16)
    else FLASH_HS_SWITCH(c, HS, FWD_F32)
#undef FWD_F32
#undef FWD_BF16
}

void k_flash_backward(CudaCtx *c, void *dqkv, float *D, const void *dout, const void *qkv,
                      const void *out, const float *lse, int B, int T, int NH, int NKV, int HS) {
#define BWD_F32(H)                                                                                 \
    bwd<H>(c, (float *)dqkv, D, (const float *)dout, (const float *)qkv, (const float *)out, lse,  \
           B, T, NH, NKV, HS)
#define BWD_BF16(H)                                                                                \
    bwd<H>(c, (bf16 *)dqkv, D, (const bf16 *)dout, (const bf16 *)qkv, (const bf16 *)out, lse, B,   \
           T, NH, NKV, HS)
    if (c->op == PP_BF16) FLASH_HS_SWITCH(c, HS, BWD_BF16)
    else FLASH_HS_SWITCH(c, HS, BWD_F32)
#undef BWD_F32
#undef BWD_BF16
}
#endif /* FLASH_HOST_SIM */
