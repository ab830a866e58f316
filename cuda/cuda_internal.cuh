/* cuda_internal.cuh — what the CUDA backend's translation units share: the context
 * (stream, cuBLASLt handle, workspaces), the check macros, and the kernel launchers
 * kernels.cu defines for backend_cuda.cu. Never included from src/. */
#ifndef PP_CUDA_INTERNAL_CUH
#define PP_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend_cuda.h"
#include "gemm_file.h" /* GemmKey, the file of GEMM algorithms */

/* A cached cuBLASLt algorithm for one GEMM shape ([Note: GEMM cache] in backend_cuda.cu). */
struct GemmEntry {
    GemmKey key;
    cublasLtMatmulAlgo_t algo;
    int with_epi; /* the epilogue runs with this algorithm (else a bias on fp32 D is added by
                     a separate kernel; any other epilogue is not found) */
    int found;    /* 0: cuBLASLt has no algorithm for this key (cached too: asked once) */
};
#define GEMM_CACHE 128

/* A device buffer of the backend's own, grown (never shrunk) when an op needs more than
 * was reserved at open ([Note: CUDA workspace]). */
struct Grow {
    void *p;
    size_t bytes;
};

/* One allocation from be->alloc, for the bytes-in-use count. */
struct Alloc {
    void *p;
    size_t bytes;
};

struct CudaCtx {
    Backend be;               /* the table; be.ctx points back here */
    int device, rank;
    PPPrecision prec;
    PPCudaSizes sizes;
    cudaStream_t stream;
    cudaStream_t side;        /* checkpoint snapshots ([Note: checkpoint snapshot]) */
    cudaEvent_t issued;       /* recorded on stream: what a snapshot must follow */
    cudaEvent_t landed;       /* recorded on side after the last snapshot copy */
    cublasLtHandle_t lt;
    Grow lt_ws;               /* cuBLASLt workspace */
    Grow castA, castB;        /* bf16 copies of a matmul's or flash attention's operands */
    Grow castW;               /* the held weight's bf16 copy (weight_hold) */
    Grow castBias;            /* a bias in bf16 for a bf16 GEMM output's epilogue */
    const float *held;        /* the held weight, held_n floats (NULL: none) */
    size_t held_n;
    const float *kept; /* castW's weights, kept_n floats ([Note: kept weight copy]) */
    size_t kept_n;
    int adamw_copy;           /* PPTRAIN_ADAMW_COPY (default 1): weight_hold's kept reuses it */
    int gemm_log;             /* PPTRAIN_GEMM_LOG=1: each new GEMM's algorithm on stderr */
    int gemm_tune;            /* PPTRAIN_GEMM_TUNE=1: each new GEMM's algorithm by timing the
                                 heuristic's candidates ([Note: GEMM tuning]) */
    char gemm_file[1024];     /* PPTRAIN_GEMM_ALGOS ("": none), [Note: GEMM algorithm file] */
    char gemm_tag[256];       /* this device's and cuBLASLt's tag in it (gemm_file_tag) */
    GemmPin *pins;            /* its lines for the tag, npins of them */
    int npins;
    int warned_pin;           /* a line that does not run here: said once */
    int warned_append;        /* an append that failed: said once */
    Grow partials;            /* column partial sums (bias and LayerNorm weight grads) */
    Grow sums;                /* double partials of sum / sumsq */
    Grow enc;                 /* encoder backward: the sort of rows by token, next row with
                                 the same token, flags */
    Grow att;                 /* attention backward: dP of one sequence, [NH,T,T] */
    Grow flashD;              /* flash attention backward: D = rowsum(dO o O), [B,NH,T] */
    int att_flash;            /* 1: flash attention ([Note: attention path] in backend_cuda.cu),
                                 or cuDNN's (att_cudnn): both save the log-sum-exp */
    int att_cudnn;            /* 1: cuDNN's fused attention ([Note: cuDNN attention] in
                                 cudnn_attn.cc) */
    int att_cudnn_default;    /* it is the default choice, not PPTRAIN_ATTENTION=cudnn: a graph
                                 cuDNN refuses hands the run to the flash kernels */
    void *cudnn;              /* its handle and graphs (cudnn_attn.cc's own) */
    Grow cudnn_ws;            /* cuDNN's workspace for the graphs */
    int sm;                   /* the device's compute capability, 10 major + minor */
    int flash_bwd;            /* its backward's v2 parts (flash_bwd_mode, flash_attn.cu) */
    int ln_rows;              /* the norms' backward ([Note: one-pass norm backward] in
                                 norm_kernels.cuh): -1 the two-pass kernels, else the one-pass
                                 kernel's rows a chunk (0: from N); PPTRAIN_LN_BWD */
    PPDType op;               /* the operand activations' type (be.operand,
                                 [Note: CUDA precision]) */
    PPDType res;              /* the residual stream's type (be.residual: op, or fp32 under
                                 PPTRAIN_RESIDUAL=fp32; [Note: residual stream type] in
                                 src/backend/backend.h) */
    Grow stage;               /* fp32 staging of the materialised attention's bf16 outputs */
    Grow widen;               /* fp32 copies of its bf16 inputs (qkv; dout) */
    Grow wide;                /* fp32 [N, width]: a fused GEMM's result where its epilogue is
                                 off or has no algorithm ([Note: GEMM epilogues]) */
    int fuse_gelu;            /* PPTRAIN_FUSE_GELU (default 1): the GELU epilogues at bf16 */
    int gelu_epi;             /* PPTRAIN_GELU_EPILOGUE (default 1): with fuse_gelu, GELU itself
                                 in the fc GEMM's epilogue (else its kernel after the GEMM) */
    int fuse_residual;        /* PPTRAIN_FUSE_RESIDUAL (default 1): the residual as C */
    int fuse_bgrad;           /* PPTRAIN_FUSE_BGRAD (default 1): the bias gradient in the dw
                                 GEMM at bf16 ([Note: bias gradient epilogue]) */
    Grow bgrad;               /* fp32 [OC]: that GEMM's bias gradient, then added to db */
    int fuse_cast;            /* PPTRAIN_FUSE_CAST (default 1): the qkv and d atty GEMMs write
                                 the bf16 operand themselves ([Note: operand activations]) */
    Alloc *allocs;
    int nallocs, cap_allocs;
    size_t allocated;
    GemmEntry gemm[GEMM_CACHE];
    int ngemm;
    int warned_fallback;      /* a fast GEMM mode fell back to fp32 (said once) */
    int warned_epi;           /* fused GEMMs that ran unfused (epi_unfused: said once each) */
    size_t smem_optin;        /* shared memory a block may opt in to (bytes) */
    int logits_bf16;          /* the head's logits in bf16 (be.logits; bf16 operands unless
                                 PPTRAIN_LOGITS=fp32: [Note: logits type] in backend.h) */
    int ce_two_pass;          /* PPTRAIN_CE=two-pass: the cross-entropy reads each row twice
                                 ([Note: cross-entropy row in shared memory] in ce_kernels.cuh) */
    char desc[1024];
};

static inline CudaCtx *ctx_of(const Backend *be) { return (CudaCtx *)be->ctx; }

/* [Note: CUDA checks] Every CUDA and cuBLASLt call goes through a check that names the
 * call, the library's message, the rank and the device, then exits 1 (nothing can be
 * recovered on a broken device). After each kernel launch KCHECK reads the last error.
 * The exit is _exit after flushing stdout and stderr: exit() would run the static
 * destructors of cudart and NCCL's proxy thread on a broken device, and those can hang;
 * the peers learn of the death from the closed sockets. */
#define CK(c, call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            pp_cuda_die((c), __FILE__, __LINE__, #call, cudaGetErrorName(e_),                      \
                        cudaGetErrorString(e_));                                                   \
    } while (0)
#define LTCK(c, call)                                                                              \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            pp_cuda_die((c), __FILE__, __LINE__, #call, cublasLtGetStatusName(s_),                 \
                        cublasLtGetStatusString(s_));                                              \
    } while (0)
#define KCHECK(c, name)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess)                                                                     \
            pp_cuda_die((c), __FILE__, __LINE__, "launch of " name, cudaGetErrorName(e_),          \
                        cudaGetErrorString(e_));                                                   \
    } while (0)

void pp_cuda_die(const CudaCtx *c, const char *file, int line, const char *call, const char *name,
                 const char *msg) __attribute__((noreturn));

/* Make g hold at least `bytes` (waits for the stream first when it must reallocate). */
void *grow(CudaCtx *c, Grow *g, size_t bytes);

/* Blocks for a grid-stride elementwise launch of n items. */
static inline unsigned grid_for(size_t n, int threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 65535u * 16 ? (b ? b : 1) : 65535u * 16);
}

/* ---- kernel launchers (kernels.cu): same arguments as the backend ops ---- */
/* wpe, dwpe NULL: no position table */
/* (residual) void * arguments are of c->res's type ([Note: residual stream type] in
 * src/backend/backend.h): fp32, or bf16 only with bf16 operands. */
void k_encoder_forward(CudaCtx *c, void *out, const int *inp, const float *wte, const float *wpe,
                       int B, int T, int C);
void k_encoder_backward(CudaCtx *c, float *dwte, float *dwpe, const float *dout, const int *inp,
                        int B, int T, int C);
/* The (operand) void * arguments below are of c->op's type ([Note: operand activations]
 * in src/backend/backend.h). */
void k_layernorm_forward(CudaCtx *c, void *out, float *mean, float *rstd, const void *inp,
                         const float *w, const float *b, int N, int C);
/* The norms' backward: dout (operand) of the operand type, inp (residual) of the residual
 * type, the rest fp32; dop (NULL, or an operand [N,C]) gets dinp's new value at the operand
 * type. */
void k_layernorm_backward(CudaCtx *c, float *dinp, void *dop, float *dw, float *db,
                          const void *dout, const void *inp, const float *mean, const float *rstd,
                          const float *w, int N, int C);
void k_rmsnorm_forward(CudaCtx *c, void *out, float *rstd, const void *inp, const float *w,
                       float eps, int N, int C);
void k_rmsnorm_backward(CudaCtx *c, float *dinp, void *dop, float *dw, const void *dout,
                        const void *inp, const float *rstd, const float *w, int N, int C);
/* The rotation of the q and k heads in place: x of the operand type (qkv at dir 1, the
 * forward; dqkv at dir -1, the backward's transpose). */
void k_rope(CudaCtx *c, void *x, const float *inv_freq, int B, int T, int NH, int NKV, int HS,
            int dir);
/* [Note: KV cache] in src/backend/backend.h: the rotation at positions pos.. and the cache
 * rows; attention of n query rows on the cache; qkv and out (operand). */
void k_kv_append(CudaCtx *c, float *kc, float *vc, void *qkv, const float *inv_freq, int pos, int n,
                 int NH, int NKV, int HS, int cap);
void k_attention_decode(CudaCtx *c, void *out, const void *qkv, const float *kc, const float *vc,
                        int pos, int n, int NH, int NKV, int HS, int cap);
void k_swiglu_forward(CudaCtx *c, void *out, const float *gate, const float *up, size_t n);
void k_swiglu_backward(CudaCtx *c, void *dgate, void *dup, const float *gate, const float *up,
                       const float *dout, size_t n);
/* GELU's input (the pre-activation) and output are operands ([Note: fused GELU]); the
 * backward's dinp may be dout itself when the operand type is fp32. */
void k_gelu_forward(CudaCtx *c, void *out, const void *inp, size_t n);
void k_gelu_backward(CudaCtx *c, void *dinp, const void *inp, const float *dout, size_t n);
void k_add_inplace(CudaCtx *c, float *dst, const float *src, size_t n);
/* out[n] (residual) = y[n] + res[n] (residual), rounded once: the residual GEMM's unfused
 * path at a bf16 residual (y its fp32 result; out, y and res do not overlap). */
void k_add_residual(CudaCtx *c, void *out, const float *y, const void *res, size_t n);
/* db[OC] += column sums of dout[N,OC] (operand), fixed order. */
void k_bias_backward(CudaCtx *c, float *db, const void *dout, int N, int OC);
/* out[N,OC] += b[OC] (where the bias epilogue is not available). */
void k_add_bias(CudaCtx *c, float *out, const float *b, int N, int OC);
/* In place over rows of length T: row t of each [T,T] block becomes the softmax of its
 * columns 0..t (columns t+1.. zero). rows = B*NH*T. */
void k_softmax_causal(CudaCtx *c, float *att, int rows, int T);
/* In place: dP (rows of length T) becomes dS = P * (dP - sum_j P dP) * scale, causal. */
void k_softmax_causal_backward(CudaCtx *c, float *dp, const float *p, int rows, int T, float scale);
/* losses[N]; with want_grad dlogits[N,Vp] (operand; logits itself allowed when the logits
 * are of that type: c->logits_bf16 at bf16 operands, else fp32). */
void k_crossentropy(CudaCtx *c, void *dlogits, float *losses, const void *logits,
                    const int *targets, float dloss, int N, int V, int Vp, int want_grad);
/* out (one double) = sum over x[0..n) of x or x^2, fixed order. */
void k_sum(CudaCtx *c, double *out, const float *x, size_t n, int squares);
void k_adamw(CudaCtx *c, float *p, const float *g, float *m, float *v, size_t n, float lr,
             float beta1, float beta2, float eps, float wd, float grad_scale, float bc1, float bc2);
/* [Note: many tensors] in src/backend/backend.h: out[i] = k_sum(x[i], n[i], squares 1);
 * k_adamw on each t[i] (the same bits), in a few launches. */
void k_sumsq_many(CudaCtx *c, double *out, const float *const *x, const size_t *n, int count);
/* Bytes of the sums' partials k_sum and k_sumsq_many need (reserved at open). */
size_t k_sums_workspace(void);
/* Whether x[0..n) lies inside w[0..wn) (w NULL: nothing does): a held or kept weight copy
 * serves x ([Note: kept weight copy] in backend_cuda.cu). */
static inline bool inside(const float *x, size_t n, const float *w, size_t wn) {
    return w && x >= w && x + n <= w + wn;
}
/* The bf16 copy of w[0..n) at copy ([Note: kept weight copy] in backend_cuda.cu). */
struct KeptCopy {
    const float *w;
    size_t n;
    __nv_bfloat16 *copy;
};
/* kept: NULL, or a copy that each t[i] lying inside kept->w gets its new values written into
 * (k_to_bf16's bits) in the same pass. */
void k_adamw_many(CudaCtx *c, const PPOptTensor *t, const KeptCopy *kept, int count, float lr,
                  float beta1, float beta2, float eps, float grad_scale, float bc1, float bc2);
void k_sgd(CudaCtx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
           float wd, float grad_scale, int first);
/* bf16 copy of n floats (round to nearest even). */
void k_to_bf16(CudaCtx *c, __nv_bfloat16 *dst, const float *src, size_t n);
/* dst[n] (operand) = src[n]: a copy, or k_to_bf16. */
void k_to_operand(CudaCtx *c, void *dst, const float *src, size_t n);
/* dst[n] = src[n] (operand) widened to fp32: a copy at fp32 operands. */
void k_from_operand(CudaCtx *c, float *dst, const void *src, size_t n);
/* Device bytes the encoder backward needs for N rows (the sort of rows by token). */
size_t k_encoder_workspace(int N);
/* Device bytes of the one-pass norm backward's column sums at rows of C (any N). */
size_t k_norm_backward_workspace(size_t C);

/* ---- flash attention (flash_attn.cu, [Note: flash tiling]) ---- */
/* The template head size that runs head size hs (hs padded with zeros up to it), or 0
 * when hs is over 128 (the materialised attention runs those). */
int flash_head_pad(int hs);
/* [Note: flash backward v2] in flash_attn.cu: the mask of the backward's parts that run
 * the v2 code, from PPTRAIN_FLASH_BWD's value env (NULL or "": v2, all of them; "v1":
 * none; or parts joined by '+': prep, dq, dkv), or -1 for any other value. */
int flash_bwd_mode(const char *env);
/* Bytes of the packed bf16 copy of `heads` heads of head size hs ([Note: flash tiling]):
 * NH + 2 NKV for q, k and v, NH for dO. */
size_t flash_pack_bytes(int B, int T, int heads, int hs);
/* out[B,T,NH HS] (operand) and lse[B,NH,T] (natural log-sum-exp of each row's scaled
 * scores) from qkv[B,T,(NH + 2 NKV) HS] (operand, [Note: grouped-query attention]). */
void k_flash_forward(CudaCtx *c, void *out, float *lse, const void *qkv, int B, int T, int NH,
                     int NKV, int HS);
/* dqkv[B,T,(NH + 2 NKV) HS] (operand) overwritten, from dout, qkv and out (operands);
 * D[B,NH,T] is the kernel pair's own scratch. */
void k_flash_backward(CudaCtx *c, void *dqkv, float *D, const void *dout, const void *qkv,
                      const void *out, const float *lse, int B, int T, int NH, int NKV, int HS);

/* ---- cuDNN's fused attention (cudnn_attn.cc, [Note: cuDNN attention]) ---- */
/* Loads libcudnn.so.9 and makes the handle on c->stream: 0, or 1 with why in err. */
int cudnn_attn_open(CudaCtx *c, char *err, size_t n);
void cudnn_attn_close(CudaCtx *c);
/* The cuDNN opened (cudnnGetVersion: 91900 for 9.19.0), 0 when none. */
size_t cudnn_attn_version(const CudaCtx *c);
/* As k_flash_forward / k_flash_backward: qkv, out, dout and dqkv bf16 operands (cuDNN's
 * path runs at bf16 operands only), lse [B,NH,T]. 0, or
 * 1 when cuDNN refused the shape's graph under the default choice (c->att_cudnn_default:
 * said once, c->att_cudnn cleared): the caller runs the flash kernels instead. */
int k_cudnn_attention_forward(CudaCtx *c, void *out, float *lse, const void *qkv, int B, int T,
                              int NH, int NKV, int HS);
int k_cudnn_attention_backward(CudaCtx *c, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, int B, int T, int NH, int NKV,
                               int HS);

#endif
