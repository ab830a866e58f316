/* backend_cuda.h — the plain-C face of libpptrain_cuda.so, the CUDA backend: what
 * src/backend/backend_load.c looks up with dlsym after dlopen. Nothing here needs a CUDA header
 * ([Note: CUDA backend loading] in src/backend/backend_load.c). */
#ifndef PP_BACKEND_CUDA_H
#define PP_BACKEND_CUDA_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the Backend struct or a function below changes: the loader refuses a
 * shared object built from another version of the sources. */
/* 15: pp_cuda_layout (what the backend would store, known without a device). 14: the residual
 * stream's type (Backend.residual; encoder_forward, the norms and matmul_residual_forward take it
 * as void *). 13: weight_hold's kept (AdamW keeps the held copy). 12: the norms' backward takes an
 * operand dout and writes dinp's operand copy (dinp_op). 11: sumsq_many, adamw_many ([Note: many
 * tensors]). 10: qkv and attention's dout operands (matmul_operand_forward,
 * matmul_operand_backward). 9: head_logits and the logits type ([Note: logits type]); gelu_in_gemm.
 * 8: the fused GEMM ops (matmul_gelu_forward/backward, matmul_residual_forward); GELU's input an
 * operand. 7: the decoding ops (kv_append, attention_decode). 6: the Llama block's ops (rmsnorm,
 * rope, swiglu), attention by (NH, NKV, HS). 5: PPCudaSizes from the model (width, weight, params;
 * HS for C). 4: attention_backward takes the forward's output; weight_hold. 3: Backend grew
 * (logits_chunk_rows, snapshot), struct Comm and CommOps too (comm_nccl.h) */
#define PP_CUDA_ABI 15

/* runtime.precision of a CUDA backend. */
typedef enum { PP_PREC_FP32 = 0, PP_PREC_TF32 = 1, PP_PREC_BF16 = 2 } PPPrecision;

/* Sizes the backend reserves its workspace for at open (it grows it, once, if an op is
 * called with larger ones): the loader's BackendSizes (backend_load.h), field for field.
 * All 0: reserve nothing. */
typedef struct {
    int N, T, NH, HS, Vp;
    size_t width, weight, params;
} PPCudaSizes;

/* The symbols, with their types (the loader declares pointers of these types). */
typedef int (*PPCudaAbiFn)(size_t backend_struct_size);
/* Number of visible GPUs (>= 1), or 0 with the reason in err: no driver, driver too old
 * for this build, no device, CUDA_VISIBLE_DEVICES hides them all. */
typedef int (*PPCudaDeviceCountFn)(char *err, size_t errlen);
/* Open the backend on GPU `device` (0 .. count-1) at `precision`; `rank` prefixes its
 * fatal messages. Returns the backend (closed by be->close), or NULL with the reason. */
typedef Backend *(*PPCudaOpenFn)(int device, PPPrecision precision, const PPCudaSizes *sizes,
                                 int rank, char *err, size_t errlen);
/* "CUDA 13.0, cuBLASLt 13.0.2, NCCL 2.28.3; sm_80 sm_90": what the object was built with. */
typedef const char *(*PPCudaBuiltWithFn)(void);
/* What pp_cuda_open at `precision` for `sizes` would store, decided as open decides it
 * (the same switches, the same checks): the element types of the operands, the residual
 * stream and the logits, whether attention saves only the log-sum-exp [B,NH,T] (flash,
 * cuDNN) or the probabilities [B,NH,T,T] (the materialised path), and the head's chunk
 * rows on GPU `device`'s memory; device -1 touches no device (no driver needed) and
 * takes an 80 GB card's. For the memory plan ([Note: backend layout] in
 * src/backend/backend_load.h). */
typedef struct {
    PPDType operand, residual, logits;
    int att_lse;           /* 1: attention saves [B,NH,T]; 0: [B,NH,T,T] */
    int logits_chunk_rows; /* as Backend.logits_chunk_rows */
} PPCudaLayout;
/* 0, or -1 with the reason in err (a switch's value, a head size a forced path refuses). */
typedef int (*PPCudaLayoutFn)(int device, PPPrecision precision, const PPCudaSizes *sizes,
                              PPCudaLayout *out, char *err, size_t errlen);

int pp_cuda_abi(size_t backend_struct_size);
int pp_cuda_device_count(char *err, size_t errlen);
Backend *pp_cuda_open(int device, PPPrecision precision, const PPCudaSizes *sizes, int rank,
                      char *err, size_t errlen);
const char *pp_cuda_built_with(void);
int pp_cuda_layout(int device, PPPrecision precision, const PPCudaSizes *sizes, PPCudaLayout *out,
                   char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
