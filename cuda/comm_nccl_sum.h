/* comm_nccl_sum.h — the order in which the NCCL transport adds the ranks' parts of a
 * float sum ([Note: NCCL transport] in comm_nccl.cu): one function, compiled into the
 * device kernel and into the host test that holds it to the socket and memory
 * transports' bits (test/test_nccl_sum.c). Plain C; no CUDA header needed. */
#ifndef PP_COMM_NCCL_SUM_H
#define PP_COMM_NCCL_SUM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PP_HOST_DEVICE __host__ __device__
#else
#define PP_HOST_DEVICE
#endif

/* Element i of the sum of the W parts p[q] = parts + q*len, added from part f on:
 * ((p[f] + p[f+1]) + ...) + p[f+W-1] (parts mod W); a NaN sum becomes the canonical
 * quiet NaN 0x7fc00000. f = 0: the all-reduce's rank order; f = r+1 on rank r: the
 * ring reduce-scatter's order, v[r] last (comm.h). Plain IEEE single additions, no
 * contraction possible (no multiply), so host and device give the same bits. */
static inline PP_HOST_DEVICE float pp_nccl_sum_at(const float *parts, size_t len, int W, int f,
                                                  size_t i) {
    float acc = parts[(size_t)f * len + i];
    for (int k = 1; k < W; k++) acc = acc + parts[(size_t)((f + k) % W) * len + i];
    if (acc != acc) {
        uint32_t canon = 0x7fc00000u;
        memcpy(&acc, &canon, sizeof acc);
    }
    return acc;
}

#endif
