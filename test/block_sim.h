/* block_sim.h — a CUDA launch's CTAs run on the host, one after another, each CTA's threads
 * as fibers (ucontext), for kernels compiled over test/flash_sim.h's stand-ins
 * (test/norm_sim.cc, test/ce_sim.cc; test/flash_sim.cc has a runner of its own, for its
 * 128-thread CTAs and its warp collectives).
 *
 * Any block size up to 1024 threads (whole warps). A shuffle is a collective of its warp
 * only, so warps run one at a time, each as far as its next __syncthreads (in warp order in
 * even CTAs, in reverse in odd ones): a warp runs ahead of the others as far as the
 * hardware lets it, and a missing barrier, or shared memory rewritten before another warp
 * has read it, shows. The dynamic shared memory (the kernel's `extern __shared__` array,
 * the symbol `smem`) is filled with NaN before each CTA and must be untouched past the
 * launch's size; every thread of a CTA must pass the same barriers, every lane of a warp
 * the same shuffles. A kernel's fixed shared arrays must be statics on the host to be the
 * block's ([Note: static shared arrays] in cuda/ce_kernels.cuh); registered with
 * bsim_static_shared, they too are NaN before each CTA. Any breach: a message and exit(1). */
#ifndef PP_BLOCK_SIM_H
#define PP_BLOCK_SIM_H

#include <stddef.h>

#include <functional>

#include "flash_sim.h"

enum {
    BSIM_MAXT = 1024,        /* threads a block */
    BSIM_SMEM = 227 * 1024,  /* dynamic shared memory a launch may ask for (an H100's opt-in) */
    BSIM_ARENA = 320 * 1024, /* what the runner holds: room to see a kernel write past it */
};
/* The dynamic shared memory, BSIM_ARENA bytes, 16-byte aligned: the kernels' `extern
 * __shared__ unsigned char smem[]`; a kernel whose extern array has another name or type
 * declares that name as this symbol (test/ce_sim.cc). */
extern unsigned char smem[];

/* Every CTA of a 1-D launch of blocks x threads with smem_bytes of dynamic shared memory;
 * kernel is one thread's program (it reads threadIdx, blockIdx, blockDim, gridDim). */
void bsim_run(unsigned blocks, int threads, size_t smem_bytes, const std::function<void()> &kernel);

/* Fill bytes at p with NaN before every CTA of every later launch: a kernel's fixed shared
 * array (up to 8). */
void bsim_static_shared(void *p, size_t bytes);

/* Print "block_sim: what" and exit(1). */
[[noreturn]] void bsim_fail(const char *what);

#endif
