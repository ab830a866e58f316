/* ce_kernels.cuh — the fused cross-entropy kernels (one block per row: crossentropy's two
 * passes over the row in global memory, crossentropy_smem's row kept in shared memory) and
 * their (max, sum of exp) reductions. Device code only, no launches: kernels.cu includes it
 * after the CUDA headers (its launcher k_crossentropy picks the kernel), and test/ce_sim.cc
 * after test/flash_sim.h's host stand-ins, to run these very kernels on the host against
 * the CPU backend.
 *
 * [Note: static shared arrays] The kernels' fixed shared array, ce_sh, is declared once at
 * namespace scope: on the device the same as a `__shared__` array of each kernel (every
 * kernel that uses it has its own, one a block, in its static shared memory: 256 bytes);
 * on the host, where test/flash_sim.h defines __shared__ away, one static array that every
 * fiber of the simulated block uses (a `__shared__` array inside a kernel would be a local
 * of each thread there), and which test/ce_sim.cc has the runner fill with NaN before each
 * CTA, as the dynamic shared memory is. */
#ifndef PP_CE_KERNELS_CUH
#define PP_CE_KERNELS_CUH

#include "operand_io.cuh" /* put, put4, get, get4 */

/* The reductions' (max, sum) pairs of the warps: [Note: static shared arrays]. */
static __shared__ float ce_sh[64];

/* (m, s) += (m2, s2): running max and sum of exp(x - m). Commutative to the bit (the two
 * terms are formed alike and a + b == b + a), so a butterfly gives every lane the same. */
static __device__ __forceinline__ void ms_add(float &m, float &s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    float a = m == -INFINITY ? 0.0f : s * expf(m - mn);
    float b = m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mn);
    m = mn;
    s = a + b;
}

/* The warp's pair, in every lane (a butterfly). */
static __device__ __forceinline__ void warp_ms(float &m, float &s) {
    for (int o = 16; o > 0; o >>= 1)
        ms_add(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

/* The block's (max, sum of exp) pair, in every thread; sh holds 64 floats. */
static __device__ void block_reduce_ms(float &m, float &s, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_ms(m, s);
    __syncthreads();
    if (lane == 0) {
        sh[wid] = m;
        sh[32 + wid] = s;
    }
    __syncthreads();
    m = lane < nw ? sh[lane] : -INFINITY;
    s = lane < nw ? sh[32 + lane] : 0.0f;
    warp_ms(m, s);
}

/* A thread's running (max, sum of exp) after one more logit, or four more. */
static __device__ __forceinline__ void ms_push(float &mx, float &s, float v) {
    if (v > mx) {
        s *= expf(mx - v);
        mx = v;
    }
    s += expf(v - mx);
}
static __device__ __forceinline__ void ms_push4(float &mx, float &s, float4 v) {
    float lm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    if (lm > mx) {
        s *= expf(mx - lm);
        mx = lm;
    }
    s += expf(v.x - mx) + expf(v.y - mx) + expf(v.z - mx) + expf(v.w - mx);
}

/* The loss's gradient at the four logits v of columns 4j..4j+3: softmax * dloss (k =
 * dloss / s), less dloss at the target, 0 in the padded columns. */
static __device__ __forceinline__ float4 ce_grad4(float4 v, int j, int V, int tgt, float mx,
                                                  float k, float dloss) {
    float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int col = 4 * j + i;
        e[i] = col < V ? expf(e[i] - mx) * k : 0.0f;
        if (col == tgt) e[i] -= dloss;
    }
    return make_float4(e[0], e[1], e[2], e[3]);
}

/* One pass over the row for its max and sum (online), one for the loss's gradient,
 * written over the logits: 2 reads and 1 write of the row, four elements an access (16
 * bytes of fp32, 8 of bf16) when Vp is a multiple of 4 (then every row is so aligned;
 * the default Vp is a multiple of 128), else one at a time. The logits are InT, fp32 or
 * bf16 ([Note: logits type] in src/backend/backend.h); dlogits OutT, and they may be the
 * logits themselves when the types are the same (each thread writes only the elements it
 * has read). */
template <typename InT, typename OutT>
__global__ void crossentropy(OutT *dlogits, float *losses, const InT *logits, const int *targets,
                             float dloss, int V, int Vp, int want_grad) {
    const InT *x = logits + (size_t)blockIdx.x * Vp;
    OutT *y = dlogits + (size_t)blockIdx.x * Vp;
    int tgt = targets[blockIdx.x], V4 = Vp % 4 ? 0 : V / 4; /* whole vectors below V */
    float xt = get(x + tgt), mx = -INFINITY, s = 0.0f; /* read before any thread writes the row */
    for (int j = threadIdx.x; j < V4; j += blockDim.x) ms_push4(mx, s, get4(x + 4 * j));
    for (int j = 4 * V4 + threadIdx.x; j < V; j += blockDim.x) ms_push(mx, s, get(x + j));
    block_reduce_ms(mx, s, ce_sh);
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) - (xt - mx);
    if (!want_grad) return;
    float k = dloss / s;
    if (Vp % 4) {
        for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
            float v = j < V ? expf(get(x + j) - mx) * k : 0.0f;
            put(y + j, j == tgt ? v - dloss : v);
        }
        return;
    }
    /* each thread reads its 4 before writing them */
    for (int j = threadIdx.x; j < Vp / 4; j += blockDim.x)
        put4(y + 4 * j, ce_grad4(get4(x + 4 * j), j, V, tgt, mx, k, dloss));
}

/* [Note: cross-entropy row in shared memory] With a gradient, the kernel above reads each
 * fp32 row twice from HBM: a block's row (201 KB at Vp = 50304) has left the 50 MB L2 by
 * its second pass, since 528 rows are in flight (4 blocks of 512 threads an SM). Here one
 * block of 1024 threads an SM keeps its row in shared memory from the first pass (the
 * loads go to registers, then shared memory, while the max and sum run) and the second
 * pass reads it there: one HBM read of the logits and one write of dlogits, 3.3 + 1.65
 * GB a GPT-2 124M step at B 16 and bf16 against 6.6 + 1.65 (cuda/NOTES.md: 2.7 ms
 * measured, 1.65 ms predicted for this one). Each thread reads back only the vectors it
 * stored, so no barrier is needed between the passes beyond the reduction's. bf16 logits
 * are widened into the fp32 row (the same bytes of shared memory). Taken when
 * Vp is a multiple of 4 and Vp floats fit the device's shared memory per block
 * (c->smem_optin: 227 KB on an H100, less the 256 static bytes: Vp <= 58048), unless
 * PPTRAIN_CE=two-pass. */
#define CE_SMEM_THREADS 1024
template <typename InT, typename OutT>
__global__ void __launch_bounds__(CE_SMEM_THREADS, 1)
    crossentropy_smem(OutT *dlogits, float *losses, const InT *logits, const int *targets,
                      float dloss, int V, int Vp) {
    extern __shared__ float4 row[]; /* Vp / 4 vectors */
    const InT *x = logits + (size_t)blockIdx.x * Vp; /* dlogits may be logits (one type) */
    OutT *y = dlogits + (size_t)blockIdx.x * Vp;
    int tgt = targets[blockIdx.x], V4 = V / 4, P4 = Vp / 4;
    float xt = get(x + tgt), mx = -INFINITY, s = 0.0f; /* read before any thread writes the row */
    /* four loads in flight a thread before their values are used */
    for (int j0 = threadIdx.x; j0 < P4; j0 += 4 * CE_SMEM_THREADS) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = j0 + u * CE_SMEM_THREADS;
            if (j < P4) v[u] = get4(x + 4 * j);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int j = j0 + u * CE_SMEM_THREADS;
            if (j >= P4) break;
            row[j] = v[u];
            if (j < V4) ms_push4(mx, s, v[u]); /* else padded columns: the loop below */
        }
    }
    for (int j = 4 * V4 + threadIdx.x; j < V; j += CE_SMEM_THREADS) ms_push(mx, s, get(x + j));
    block_reduce_ms(mx, s, ce_sh);
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) - (xt - mx);
    float k = dloss / s;
    for (int j = threadIdx.x; j < P4; j += CE_SMEM_THREADS) /* the vectors this thread stored */
        put4(y + 4 * j, ce_grad4(row[j], j, V, tgt, mx, k, dloss));
}

#endif
