/* flash_sim.h — host stand-ins for the CUDA built-ins that cuda/flash_attn.cu's kernels
 * use, so that test/flash_sim.cc can compile that file unchanged (FLASH_HOST_SIM) and run
 * its kernels on the host: each CTA's 128 threads as fibers, every collective
 * (__syncthreads, __shfl_xor_sync, mma.sync, ldmatrix) a barrier over them, mma_bf16
 * computing the product of the fragments as the PTX ISA lays them out (§9.7.14.5.8),
 * ldmatrix .trans handing out the elements by its rule, cp.async deferred to the wait.
 * test/norm_sim.cc and test/ce_sim.cc run cuda/norm_kernels.cuh's and cuda/ce_kernels.cuh's
 * kernels on the same stand-ins, plus float4, float2, uint2, blockDim (test/block_sim.cc's
 * runner's block size) and the explicitly rounded arithmetic. __shared__ is defined away: a
 * kernel's fixed shared array is the block's on the host only as a static (at namespace
 * scope: [Note: static shared arrays] in cuda/ce_kernels.cuh); its extern array is the
 * runner's. */
#ifndef PP_FLASH_SIM_H
#define PP_FLASH_SIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct SimDim {
    unsigned x, y, z;
};
extern SimDim sim_block, sim_grid;
extern int sim_cur; /* the running thread of the block: the fiber on the CPU */
#define blockIdx sim_block
#define gridDim sim_grid
#define threadIdx (SimDim{(unsigned)sim_cur, 0, 0})

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y; /* x at the lower address: the low half of the 32-bit word */
};
static inline uint16_t sim_bf16_bits(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{sim_bf16_bits(f)}; }
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return __nv_bfloat162{{sim_bf16_bits(lo)}, {sim_bf16_bits(hi)}};
}

struct uint4 {
    uint32_t x, y, z, w;
};
struct alignas(8) uint2 {
    uint32_t x, y;
};
struct alignas(8) float2 {
    float x, y;
};
static inline float2 __bfloat1622float2(__nv_bfloat162 b) {
    return float2{__bfloat162float(b.x), __bfloat162float(b.y)};
}
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
extern SimDim sim_bdim; /* the block's size (test/block_sim.cc's runner) */
#define blockDim sim_bdim
static inline int min(int a, int b) { return a < b ? a : b; }
/* IEEE single operations, rounded to nearest, never contracted: what the device's _rn
 * intrinsics promise (built with -ffp-contract=off, so the host keeps each rounding too) */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

void __syncthreads(void);
/* cp.async: the destination reads as bf16 NaN from the issue until this thread's wait,
 * which writes the data; so a read before the wait (and its barrier), and a copy issued
 * into a buffer others still read, both show as NaN. Addresses must be 16-byte aligned. */
void cp_async16(void *dst, const void *src, int valid);
void cp_async_commit(void);
void cp_async_wait_all(void);
/* ldmatrix.sync.aligned.m8n8.x4.trans: a warp collective, by the PTX ISA's rule. */
void ldsm_x4_t(uint32_t r[4], const __nv_bfloat16 *p);
float __shfl_xor_sync(unsigned mask, float v, int lanemask);
/* D = A B + C for the warp, each lane passing its fragments (the PTX layout). */
void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

#endif
