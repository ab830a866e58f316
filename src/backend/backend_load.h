/* backend_load.h — a rank's backend from runtime.device and runtime.precision: the CPU
 * backend built into the binary, or the CUDA backend opened from libpptrain_cuda.so
 * only when it is asked for ([Note: CUDA backend loading] in backend_load.c). */
#ifndef PP_BACKEND_LOAD_H
#define PP_BACKEND_LOAD_H

#include <stddef.h>

#include "backend.h"
#include "config.h"

/* What a device backend reserves its workspace for ([Note: CUDA workspace] in
 * cuda/backend_cuda.cu), from the model (model_backend_sizes): rows of a microbatch N =
 * B*T and its sequence length T; attention's heads NH and head size HS (its packed q, k,
 * v input is [N, 3 NH HS]); the head's rows Vp (the padded vocabulary); the widest
 * activation row a matmul reads or writes (columns: a bias gradient's length too), the
 * largest weight matrix (elements), and the parameters this rank holds (the copy a held
 * run keeps: [Note: held weights] in model/model.h). All 0: reserve nothing. */
typedef struct {
    int N, T, NH, HS, Vp;
    size_t width, weight, params;
} BackendSizes;

/* Choose and open this rank's backend. runtime.device: cpu -> the CPU backend; cuda ->
 * the CUDA backend on GPU LOCAL_RANK mod (visible GPUs); auto -> cuda when the CUDA
 * backend loads and sees a GPU, else cpu. runtime.precision auto is bf16 on cuda and fp32
 * on cpu; tf32 or bf16 on cpu is an error. `note` receives one line for the build report
 * ("cuda:0 NVIDIA H100 ..., bf16" or "cpu (runtime.device auto: no GPU: ...)").
 * PPTRAIN_LOGITS_CHUNK_ROWS=R in the environment sets the backend's logits_chunk_rows to
 * R (a test knob, [Note: logits chunk knob] in backend_load.c); the CPU backend is then a
 * copy that backend_release frees. Returns PP_OK, or PP_EUSAGE with a message naming
 * the key and the cause (no CUDA build, a library that does not load, no driver, no GPU,
 * a knob that is not a row count) and what to do. */
int backend_select(const Config *cfg, int rank, const BackendSizes *sizes, const Backend **be,
                   char *note, size_t notelen, char *err, size_t errlen);

/* [Note: backend layout] What a rank's backend will store, known before it is opened
 * and on a machine without its GPU: the element types of the operands, the residual
 * stream and the logits, what attention saves for the backward, and the head's chunk
 * rows. The memory plan takes its sizes from it, so that `pptrain schedule`'s memory
 * plan, `--plan`'s memory column and `pipeline.balance: memory` weigh what the run's
 * device keeps (a bf16 GPU rank keeps a fraction of the CPU's activations: flash
 * attention saves [B,NH,T] where the CPU keeps [B,NH,T,T]). runtime.device cpu: the CPU
 * backend's; cuda: the CUDA backend's choices for runtime.precision and the PPTRAIN_*
 * switches (pp_cuda_layout: the same decisions as its open), on this process's GPU when
 * one is visible, else an 80 GB card's head chunks; the CPU's if the CUDA backend cannot
 * be loaded; auto: cuda's when a GPU is visible here and pp_cuda_layout accepts the
 * switches and the card (as pp_cuda_open would), else the CPU's, as the run falls back.
 * `what` says which, for a report's header. PPTRAIN_LOGITS_CHUNK_ROWS applies as in
 * backend_select. */
typedef struct {
    PPDType operand, residual, logits;
    int att_lse;           /* attention saves [B,NH,T] (1) or the probabilities [B,NH,T,T] */
    int logits_chunk_rows; /* as Backend.logits_chunk_rows */
    char what[PP_ERR_MAX];
} BackendLayout;

/* PP_OK, or PP_EUSAGE with a message: PPTRAIN_LOGITS_CHUNK_ROWS's bad value, or under
 * runtime.device cuda what pp_cuda_layout refuses (a switch's value, the card). */
int backend_layout(const Config *cfg, const BackendSizes *sizes, BackendLayout *lay, char *err,
                   size_t errlen);
/* Floats attention saves for a microbatch of B sequences of T tokens over NH heads. */
size_t backend_layout_att_floats(const BackendLayout *lay, int B, int T, int NH);

/* The CPU backend flagged device_memory: the runtime then moves every activation,
 * gradient and tied all-reduce through host staging buffers ([Note: host staging] in
 * runtime.c), as on a GPU, so that path is tested without one. backend_select returns it
 * for the CPU when the environment has PPTRAIN_HOST_STAGING=1 (a test knob; the results
 * are the CPU's, bit for bit). */
const Backend *backend_cpu_staged(void);

/* The loaded CUDA backend's shared object, as dlopen returned it, or NULL when no run
 * has opened it: the NCCL transport's loader (comm/comm_nccl_load.c) looks its entry
 * points up there. */
void *backend_cuda_library(void);

/* Close a backend from backend_select (the CPU backend: nothing to do). */
void backend_release(const Backend *be);

/* The backends built in, one per line, for --version: "cpu (OpenBLAS, OpenMP)" and,
 * when nvcc was found at build time, "cuda (CUDA 13.0, cuBLASLt ..., NCCL ...; sm_80
 * sm_90), libpptrain_cuda.so: PATH" (or "not found"). */
void backend_print_builtin(FILE *f);

/* Where libpptrain_cuda.so would be loaded from into path[n]: $PPTRAIN_CUDA_LIB, else
 * the first that exists of DIR/libpptrain_cuda.so, DIR/build/cuda/libpptrain_cuda.so and
 * DIR/../cuda/libpptrain_cuda.so (DIR/../../cuda/ for the test programs), DIR the directory of
 * /proc/self/exe. Returns 1 when
 * found (or set by the variable), 0 when not (path then names the first place looked). */
int backend_cuda_path(char *path, size_t n);

#endif
