/* bench_gpu.cu — the two ceilings of the GPU (METHOD.md "two numbers first"): the bf16
 * cuBLASLt GEMM rate at 8192^3 (bf16 operands and output, fp32 accumulation, as the
 * peers' table measures torch.matmul) and the device-to-device copy bandwidth (bytes
 * read + written). Random data, warm-up first, CUDA events, median of the repeats.
 *
 *   bench_gpu [--probe]      prints "gemm_bf16_tflops=X" and "d2d_gbps=Y"; 77 without a GPU */
#include <algorithm>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_gpu: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,        \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define LTCK(call)                                                                                 \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "bench_gpu: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,        \
                    cublasLtGetStatusString(s_));                                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void fill(__nv_bfloat16 *x, size_t n, uint64_t seed) { /* a hash: values in [-1, 1) */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z ^= z >> 31;
        x[i] = __float2bfloat16((float)((z >> 40) * (1.0 / (1ull << 24)) * 2.0 - 1.0));
    }
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("skipped: no GPU\n");
        return 77;
    }
    if (argc > 1) return 0; /* --probe */
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    /* 1. bf16 GEMM, m = n = k = 8192: two operand sets, alternated (no warm cache) */
    const int S = 8192, REP = 20;
    size_t ne = (size_t)S * S;
    __nv_bfloat16 *A[2], *B[2], *D;
    for (int i = 0; i < 2; i++) {
        CK(cudaMalloc(&A[i], ne * 2));
        CK(cudaMalloc(&B[i], ne * 2));
        fill<<<4096, 256, 0, st>>>(A[i], ne, 11 + i);
        fill<<<4096, 256, 0, st>>>(B[i], ne, 23 + i);
        CK(cudaGetLastError());
    }
    CK(cudaMalloc(&D, ne * 2));
    void *ws;
    size_t wsb = (size_t)32 << 20;
    CK(cudaMalloc(&ws, wsb));
    cublasLtHandle_t lt;
    LTCK(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t desc;
    LTCK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    LTCK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr));
    LTCK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
    cublasLtMatrixLayout_t l;
    LTCK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, S, S, S));
    cublasLtMatmulPreference_t pref;
    LTCK(cublasLtMatmulPreferenceCreate(&pref));
    LTCK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                              sizeof wsb));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    LTCK(cublasLtMatmulAlgoGetHeuristic(lt, desc, l, l, l, l, pref, 1, &res, &nres));
    if (nres == 0) return fprintf(stderr, "bench_gpu: no bf16 GEMM algorithm\n"), 1;
    float alpha = 1, beta = 0;
    std::vector<float> ms;
    for (int r = 0; r < REP + 3; r++) {
        CK(cudaEventRecord(e0, st));
        LTCK(cublasLtMatmul(lt, desc, &alpha, A[r & 1], l, B[r & 1], l, &beta, D, l, D, l,
                            &res.algo, ws, wsb, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 3) ms.push_back(t);
    }
    double gemm = 2.0 * S * S * (double)S / (median(ms) * 1e-3) / 1e12;
    printf("gemm_bf16_tflops=%.1f   (cuBLASLt bf16 8192^3, fp32 accumulation, median of %d: "
           "%.3f ms)\n", gemm, REP, median(ms));

    /* 2. device-to-device copy of 2 GiB */
    size_t bytes = (size_t)2 << 30;
    void *src, *dst;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    CK(cudaMemsetAsync(src, 1, bytes, st));
    ms.clear();
    for (int r = 0; r < 13; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 3) ms.push_back(t);
    }
    printf("d2d_gbps=%.0f   (2 GiB cudaMemcpyAsync, read + write, median of 10: %.3f ms)\n",
           2.0 * bytes / (median(ms) * 1e-3) / 1e9, median(ms));
    return 0;
}
