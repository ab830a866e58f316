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
