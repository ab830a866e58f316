/* backend_cuda.cu — the CUDA backend: memory, the cuBLASLt GEMMs (matmul and attention)
 * and the Backend table, with the state of a rank's GPU (stream, cuBLASLt handle,
 * workspaces) in its context. The kernels are in kernels.cu. Built into
 * libpptrain_cuda.so and loaded by src/backend/backend_load.c ([Note: CUDA backend loading]). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h> /* _exit */

#include "cuda_internal.cuh"

#include <nccl.h> /* only its version, for --version and pp_cuda_built_with */

#define LT_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's workspace: 32 MiB, as advised for Hopper */

/* ---- errors ------------------------------------------------------------------------ */

void pp_cuda_die(const CudaCtx *c, const char *file, int line, const char *call, const char *name,
                 const char *msg) {
    fflush(stdout);
    if (c && c->rank >= 0) fprintf(stderr, "[rank %d] ", c->rank);
    fprintf(stderr, "%s:%d: CUDA error on cuda:%d: %s failed: %s: %s\n", file, line,
            c ? c->device : -1, call, name, msg);
    fflush(stderr);
    _exit(1); /* not exit: [Note: CUDA checks] */
}

static void die_msg(const CudaCtx *c, const char *file, int line, const char *what) {
    pp_cuda_die(c, file, line, what, "error", "see above");
}

void *grow(CudaCtx *c, Grow *g, size_t bytes) {
    if (bytes <= g->bytes) return g->p;
    /* [Note: CUDA workspace] The backend's own buffers are reserved at open for the
     * run's sizes (PPCudaSizes); an op called with larger ones (the op tests) grows one
     * here, after the stream has finished with the old one. */
    CK(c, cudaStreamSynchronize(c->stream));
    CK(c, cudaFree(g->p));
    g->p = NULL;
    g->bytes = 0;
    cudaError_t e = cudaMalloc(&g->p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        char what[160];
        snprintf(what, sizeof what, "cudaMalloc of %.1f MB of workspace (%.1f MB free of %.1f MB)",
                 bytes / 1e6, fr / 1e6, tot / 1e6);
        pp_cuda_die(c, __FILE__, __LINE__, what, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    g->bytes = bytes;
    return g->p;
}

/* ---- memory ------------------------------------------------------------------------ */

static void *cu_alloc(const Backend *be, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        fflush(stdout);
        if (c->rank >= 0) fprintf(stderr, "[rank %d] ", c->rank);
        fprintf(stderr,
                "out of GPU memory on cuda:%d allocating %.1f MB (%.1f MB free of %.1f MB, %.1f MB "
                "held by this rank): lower train.batch_size, raise pipeline.microbatches or "
                "pipeline.stages\n",
                c->device, bytes / 1e6, fr / 1e6, tot / 1e6, c->allocated / 1e6);
        fflush(stderr);
        _exit(1); /* not exit: [Note: CUDA checks] */
    }
    if (c->nallocs == c->cap_allocs) {
        c->cap_allocs = c->cap_allocs ? 2 * c->cap_allocs : 256;
        c->allocs = (Alloc *)realloc(c->allocs, c->cap_allocs * sizeof(Alloc));
        if (!c->allocs) die_msg(c, __FILE__, __LINE__, "realloc of the allocation table");
    }
    c->allocs[c->nallocs++] = Alloc{p, bytes};
    c->allocated += bytes;
    return p;
}

static void drop_kept(CudaCtx *c, const void *dst, size_t bytes);

static void cu_dealloc(const Backend *be, void *p) {
    CudaCtx *c = ctx_of(be);
    if (!p) return;
    CK(c, cudaStreamSynchronize(c->stream)); /* work still using p finishes first */
    for (int i = 0; i < c->nallocs; i++)
        if (c->allocs[i].p == p) {
            drop_kept(c, p, c->allocs[i].bytes); /* no copy of freed weights */
            c->allocated -= c->allocs[i].bytes;
            c->allocs[i] = c->allocs[--c->nallocs];
            break;
        }
    CK(c, cudaFree(p));
}

/* The memory entries may be called from other threads than the one that opened the
 * backend (the checkpoint writer's copy threads): each makes the rank's GPU current on
 * its thread first (cudaSetDevice is per thread and cheap). Those threads only read device
 * memory (to_host, snapshots): the entries that write it (to_device, zero, copy) and so
 * drop_kept's c->kept stay on the runtime's thread. */
static void cu_to_device(const Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    CK(c, cudaSetDevice(c->device));
    drop_kept(c, dst, bytes);
    if (bytes) CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
}

static void cu_to_host(const Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    CK(c, cudaSetDevice(c->device));
    if (bytes) CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
}

static void cu_zero(const Backend *be, void *dst, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    drop_kept(c, dst, bytes);
    if (bytes) CK(c, cudaMemsetAsync(dst, 0, bytes, c->stream));
}

static void cu_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    drop_kept(c, dst, bytes);
    if (bytes) CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static void cu_wait(const Backend *be) {
    CudaCtx *c = ctx_of(be);
    CK(c, cudaSetDevice(c->device));
    CK(c, cudaStreamSynchronize(c->stream));
}

static void *cu_host_alloc(const Backend *be, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    void *p = NULL;
    CK(c, cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
}

static void cu_host_free(const Backend *be, void *p) {
    CudaCtx *c = ctx_of(be);
    if (p) CK(c, cudaFreeHost(p));
}

/* [Note: checkpoint snapshot] The copy runs on the side stream after the work issued so
 * far (event `issued`), and the compute stream waits for it (event `landed`) before any
 * later work, which may overwrite src. The GPU thus stalls for the copy only (pinned
 * memory: PCIe speed), the host not at all; the checkpoint writer's thread blocks on
 * `landed` before it compresses. */
static void cu_snapshot(const Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *c = ctx_of(be);
    CK(c, cudaSetDevice(c->device));
    CK(c, cudaEventRecord(c->issued, c->stream));
    CK(c, cudaStreamWaitEvent(c->side, c->issued, 0));
    CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->side));
    CK(c, cudaEventRecord(c->landed, c->side));
    CK(c, cudaStreamWaitEvent(c->stream, c->landed, 0));
}

static void cu_snapshot_wait(const Backend *be) {
    CudaCtx *c = ctx_of(be);
    CK(c, cudaSetDevice(c->device)); /* the writer's thread: its own current device */
    CK(c, cudaEventSynchronize(c->landed));
}

/* Every workspace of the context, into g: what cu_memory counts and cu_close frees (one
 * list, so that a workspace added to CudaCtx is in both). */
enum { N_GROW = 15 };
static void workspaces(CudaCtx *c, Grow *g[N_GROW]) {
    Grow *all[N_GROW] = {&c->lt_ws,    &c->castA, &c->castB, &c->castW,    &c->castBias,
                         &c->partials, &c->sums,  &c->enc,   &c->att,      &c->flashD,
                         &c->stage,    &c->wide,  &c->bgrad, &c->cudnn_ws, &c->widen};
    memcpy(g, all, sizeof all);
}

static void cu_memory(const Backend *be, size_t *allocated, size_t *workspace) {
    CudaCtx *c = ctx_of(be);
    Grow *g[N_GROW];
    workspaces(c, g);
    *allocated = c->allocated;
    *workspace = 0;
    for (int i = 0; i < N_GROW; i++) *workspace += g[i]->bytes;
}

/* ---- GEMMs through cuBLASLt -------------------------------------------------------- */

enum { AB_F32 = 0, AB_BF16 = 1 };

/* Alignment in bytes (<= 256) that p and every batch's p + k * stride share. */
static int align_of(const void *p, long long stride_bytes) {
    unsigned long long a = (unsigned long long)(uintptr_t)p | (unsigned long long)stride_bytes |
                           256ull;
    return (int)(a & (~a + 1ull));
}

static void layout(CudaCtx *c, cublasLtMatrixLayout_t *l, cudaDataType t, int rows, int cols,
                   int ld, int batch, long long stride) {
    LTCK(c, cublasLtMatrixLayoutCreate(l, t, rows, cols, ld));
    if (batch > 1) {
        LTCK(c, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                 sizeof batch));
        LTCK(c, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof stride));
    }
}

/* PPTRAIN_GEMM_LOG=1: one line on stderr for each new GEMM of the cache, its row-major shape
 * (the key holds cuBLASLt's column-major view: m and n, A and B swapped) and what cuBLASLt's
 * heuristic chose for it (r, its answer #pick, or the tuned one: [Note: GEMM tuning]; NULL:
 * nothing) of the n answers it returned: the algorithm's id,
 * tile (cublasLtMatmulTile_t), stages (cublasLtMatmulStages_t), split-K count and reduction
 * scheme (cublasLtReductionScheme_t), cluster shape, waves and workspace. A diagnostic for
 * the GEMMs below the GEMM rate (cuda/NOTES.md, "PPTRAIN_GEMM_LOG"). */
static void gemm_log(const CudaCtx *c, const GemmKey *k, const GemmEntry *e, int n, int pick,
                     const cublasLtMatmulHeuristicResult_t *r) {
    int32_t id = -1, splitk = 0;
    uint32_t tile = 0, stages = 0, red = 0;
    uint16_t cluster = 0;
    size_t got;
    if (r) { /* a failed query leaves its default */
        cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id,
                                             &got);
        cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                             sizeof red, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                             &cluster, sizeof cluster, &got);
    }
    fprintf(stderr,
            "[rank %d] cuda: gemm M=%d N=%d K=%d op %d%d batch %d, %s in, %s out%s, epilogue %d%s, "
            "bias %d: ",
            c->rank, k->n, k->m, k->k, k->opB, k->opA, k->batch, k->ab ? "bf16" : "fp32",
            k->d_bf16 ? "bf16" : "fp32", k->oop ? " (C apart)" : "", k->epi,
            r && !e->with_epi && k->epi != CUBLASLT_EPILOGUE_DEFAULT ? " (not fused)" : "",
            k->bias);
    if (r && n < 0) /* [Note: GEMM algorithm file] */
        fprintf(stderr,
                "algo %d, tile %u, stages %u, split-K %d, reduction %u, cluster %u, workspace %zu "
                "B (from PPTRAIN_GEMM_ALGOS)\n",
                id, tile, stages, splitk, red, (unsigned)cluster, r->workspaceSize);
    else if (r)
        fprintf(stderr,
                "algo %d, tile %u, stages %u, split-K %d, reduction %u, cluster %u, waves %.2f, "
                "workspace %zu B (answer #%d of the %d returned)\n",
                id, tile, stages, splitk, red, (unsigned)cluster, r->wavesCount, r->workspaceSize,
                pick, n);
    else
        fprintf(stderr,
                n ? "no algorithm (%d returned, none writes out of place)\n"
                  : "no algorithm (%d returned)\n",
                n);
}

static void set_attr(CudaCtx *c, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                     const void *v, size_t n) {
    LTCK(c, cublasLtMatmulDescSetAttribute(d, a, v, n));
}

/* Whether heuristic result r can run the call: with C != D (out_of_place), only an
 * algorithm that says it can write out of place. */
static int can_run(const cublasLtMatmulHeuristicResult_t *r, int out_of_place) {
    int32_t oop = 0;
    size_t got = 0;
    if (r->state != CUBLAS_STATUS_SUCCESS) return 0; /* its other fields are not valid */
    return !out_of_place ||
           (cublasLtMatmulAlgoCapGetAttribute(&r->algo,
                                              CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &oop,
                                              sizeof oop, &got) == CUBLAS_STATUS_SUCCESS &&
            oop);
}

/* The first of n heuristic results that can run (can_run). -1: none. */
static int pick_algo(cublasLtMatmulHeuristicResult_t *res, int n, int out_of_place) {
    for (int i = 0; i < n; i++)
        if (can_run(&res[i], out_of_place)) return i;
    return -1;
}

/* [Note: GEMM tuning] PPTRAIN_GEMM_TUNE=1 (off by default): a GEMM new to the cache takes,
 * of the heuristic's first 16 answers that can run it, the fastest on this device, timed
 * on the call's own operands (cuBLASLt's documented way past its heuristic, which ranks
 * without running anything), instead of the heuristic's first. Each answer runs twice to
 * size the count (the second timed), then once more and enough times for about a
 * millisecond between two events on the stream (the untimed run first, so that the first
 * event is not recorded on an idle stream, which would time the host's launch); the
 * heuristic's first is kept unless another is 3% faster, so that timing noise alone does
 * not move it. What the timed runs write goes to a zeroed scratch allocation of the same
 * extent (D, the GELU epilogue's aux output, the bias gradient; C with D when the GEMM
 * adds into D in place), never to the caller's buffers, so the call's result is the
 * chosen algorithm's one run, as without tuning. The scratch is allocated and freed in
 * stream order (cudaMallocAsync: no wait on the whole device, where an NCCL receive may
 * be waiting for a peer); no room for it keeps the heuristic's first. It costs a wait on
 * the stream and a few milliseconds a GEMM (up to ~0.1 s for the head's), at its first
 * call only (the cache holds the choice for the run; a full cache's evicted key is tuned
 * again, unless PPTRAIN_GEMM_ALGOS below kept its line). The same shape can take
 * another algorithm in another process, so tuned runs need not give the bits of an
 * untuned run or of each other (the other switches never change what runs from run to
 * run), unless PPTRAIN_GEMM_ALGOS names a file that keeps the choices ([Note: GEMM
 * algorithm file] in gemm_file.h): the tuning appends each to it, and every later run
 * that reads it runs the same algorithms. Not yet a default: bench/gpu.sh's switch row
 * measures it first. Each tuned GEMM is one stderr line: the heuristic's first's time, the
 * choice's and how many were timed. */
typedef struct {
    float alpha, beta;
    const void *A, *B, *C; /* as cublasLtMatmul takes them (A and B are the row-major call's B
                              and A; C is D itself when in place) */
    size_t d_bytes;        /* D's extent, every batch */
    int in_place;          /* C is D */
    void *aux_out;         /* the GELU epilogue's aux output (D's extent), or NULL */
    float *bgrad_out;      /* the bias-gradient epilogue's output, or NULL */
    size_t bgrad_bytes;
} GemmTune;

/* ms of one run of candidate r on t's operands, its D (and C when in place) the scratch d,
 * the epilogue's outputs already pointed at the scratch by desc; -1 when cuBLASLt refuses
 * to run it. */
static float time_candidate(CudaCtx *c, const GemmTune *t, cublasLtMatmulDesc_t desc,
                            const cublasLtMatmulHeuristicResult_t *r, cublasLtMatrixLayout_t la,
                            cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, void *d,
                            cudaEvent_t e0, cudaEvent_t e1) {
    const void *cp = t->in_place ? d : t->C;
    float ms = 0;
    int reps = 1;
    for (int round = 0; round < 2; round++) { /* sizing, then the timed runs */
        /* a run not timed first, so that e0 is not recorded on an idle stream, which
         * would count the host's launch of the first timed run */
        for (int i = 0; i <= reps; i++) {
            if (i == 1) CK(c, cudaEventRecord(e0, c->stream));
            if (cublasLtMatmul(c->lt, desc, &t->alpha, t->A, la, t->B, lb, &t->beta, cp, lc, d, lc,
                               &r->algo, c->lt_ws.p, c->lt_ws.bytes,
                               c->stream) != CUBLAS_STATUS_SUCCESS) {
                cudaGetLastError(); /* a refused launch's error, not the next kernel's */
                return -1;
            }
        }
        CK(c, cudaEventRecord(e1, c->stream));
        CK(c, cudaEventSynchronize(e1));
        CK(c, cudaEventElapsedTime(&ms, e0, e1));
        ms /= (float)reps;
        if (round == 0) reps = ms > 0.5f ? 2 : ms < 0.05f ? 20 : (int)(1.0f / ms) + 1;
    }
    return ms;
}

/* The index of the candidate t's GEMM takes ([Note: GEMM tuning]): the fastest of res[0..n)
 * that can run it, first (the heuristic's) unless another is 3% faster. */
static int gemm_tune(CudaCtx *c, const GemmKey *key, const GemmTune *t, cublasLtMatmulDesc_t desc,
                     const cublasLtMatmulHeuristicResult_t *res, int n, int first, int out_of_place,
                     cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                     cublasLtMatrixLayout_t lc) {
    size_t dpad = (t->d_bytes + 255) & ~(size_t)255;
    size_t bytes = dpad * (t->aux_out ? 2 : 1) + t->bgrad_bytes;
    char *s = NULL;
    /* stream-ordered: no device-wide wait (an NCCL receive posted on another stream may be
     * waiting for a peer), and zeroed, so that an in-place GEMM's beta reads set memory */
    cudaError_t ae = cudaMallocAsync((void **)&s, bytes, c->stream);
    if (ae == cudaSuccess) ae = cudaMemsetAsync(s, 0, bytes, c->stream);
    if (ae != cudaSuccess) {
        cudaGetLastError(); /* an allocation's failure is not sticky: clear it */
        if (s) CK(c, cudaFreeAsync(s, c->stream));
        fprintf(stderr,
                "[rank %d] cuda: gemm tune M=%d N=%d K=%d: no scratch of %.1f MB (%s), the "
                "heuristic's first kept\n",
                c->rank, key->n, key->m, key->k, bytes / 1e6, cudaGetErrorString(ae));
        return first;
    }
    /* the epilogue's outputs into the scratch too, the caller's restored after */
    if (t->aux_out) {
        void *aux = s + dpad;
        set_attr(c, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    }
    if (t->bgrad_out) {
        void *bg = s + dpad * (t->aux_out ? 2 : 1);
        set_attr(c, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bg, sizeof bg);
    }
    cudaEvent_t e0, e1;
    CK(c, cudaEventCreate(&e0));
    CK(c, cudaEventCreate(&e1));
    int best = first, timed = 0, refused = 0;
    float first_ms = -1, best_ms = -1;
    for (int i = 0; i < n; i++) {
        if (!can_run(&res[i], out_of_place) || res[i].workspaceSize > c->lt_ws.bytes) continue;
        float ms = time_candidate(c, t, desc, &res[i], la, lb, lc, s, e0, e1);
        if (ms < 0) {
            refused++;
            continue;
        }
        timed++;
        if (i == first) first_ms = ms;
        if (best_ms < 0 || ms < best_ms) best_ms = ms, best = i;
    }
    /* the heuristic's first unless another is clearly faster (or it would not run) */
    if (first_ms >= 0 && best != first && best_ms > 0.97f * first_ms)
        best = first, best_ms = first_ms;
    if (best_ms < 0) best = first;
    CK(c, cudaEventDestroy(e0));
    CK(c, cudaEventDestroy(e1));
    CK(c, cudaFreeAsync(s, c->stream)); /* after the timed runs, in stream order */
    if (t->aux_out)
        set_attr(c, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &t->aux_out,
                 sizeof t->aux_out);
    if (t->bgrad_out)
        set_attr(c, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &t->bgrad_out, sizeof t->bgrad_out);
    fprintf(stderr,
            "[rank %d] cuda: gemm tune M=%d N=%d K=%d op %d%d batch %d, %s out%s, epilogue %d: "
            "the heuristic's first (answer #%d) %.4f ms, chose answer #%d %.4f ms (%+.1f%%); %d "
            "timed, %d refused, of %d\n",
            c->rank, key->n, key->m, key->k, key->opB, key->opA, key->batch,
            key->d_bf16 ? "bf16" : "fp32", key->oop ? " (C apart)" : "", key->epi, first, first_ms,
            best, best_ms, first_ms > 0 ? 100.0 * (best_ms / first_ms - 1) : 0.0, timed, refused,
            n);
    return best;
}

/* The reduction schemes a key's GEMM may use ([Note: deterministic kernels]): split-K only
 * through the workspace (partial sums reduced in a separate, ordered step), never "in
 * place" into the output, whose order of additions is the one thing here not fixed by
 * the shape; under a bf16 D with partials in fp32 only (bf16 partials would round the sum
 * twice). */
static uint32_t reduction_mask(const GemmKey *key) {
    return CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
           (key->d_bf16 ? 0 : CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
}

/* e into the cache (a full cache overwrites a slot chosen by the shape); its place. */
static const GemmEntry *cache_put(CudaCtx *c, const GemmEntry *e) {
    int slot = c->ngemm < GEMM_CACHE ? c->ngemm++
                                     : (int)(((unsigned)e->key.m * 31u + e->key.n) % GEMM_CACHE);
    c->gemm[slot] = *e;
    return &c->gemm[slot];
}

/* The algorithm PPTRAIN_GEMM_ALGOS's file holds for key ([Note: GEMM algorithm file]), cached,
 * when it still runs the call here (cublasLtMatmulAlgoCheck with the descriptor it was
 * chosen with, the workspace, C apart from D, a deterministic reduction); NULL: none, and
 * the heuristic chooses, with *rejected set when the file's line would not run (then the
 * heuristic's first, untuned: what a later run reading the file runs too). */
static const GemmEntry *gemm_pinned(CudaCtx *c, const GemmKey *key, cublasLtMatmulDesc_t desc_epi,
                                    int epi_optional, cublasLtMatmulDesc_t desc_plain,
                                    cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                    cublasLtMatrixLayout_t lc, int out_of_place, int *rejected) {
    const GemmPin *pin = NULL;
    *rejected = 0;
    for (int i = 0; i < c->npins && !pin; i++)
        if (!memcmp(&c->pins[i].key, key, sizeof *key)) pin = &c->pins[i];
    if (!pin) return NULL;
    /* the epilogue fused as the line says: a fused line needs the epilogue's descriptor, an
     * unfused one a GEMM whose epilogue may go (none, or an fp32 D's bias) */
    cublasLtMatmulDesc_t desc = pin->with_epi ? desc_epi : desc_plain;
    int fits = pin->with_epi ? desc_epi != NULL : !desc_epi || epi_optional;
    cublasLtMatmulHeuristicResult_t chk;
    memset(&chk, 0, sizeof chk);
    memcpy(&chk.algo, pin->algo, sizeof chk.algo);
    cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (fits) s = cublasLtMatmulAlgoCheck(c->lt, desc, la, lb, lc, lc, &chk.algo, &chk);
    uint32_t red = 0;
    size_t got = 0;
    int det = cublasLtMatmulAlgoConfigGetAttribute(&chk.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                   &red, sizeof red,
                                                   &got) == CUBLAS_STATUS_SUCCESS &&
              (red & ~reduction_mask(key)) == 0; /* NONE is 0 */
    if (s == CUBLAS_STATUS_SUCCESS && chk.state == CUBLAS_STATUS_SUCCESS && det &&
        chk.workspaceSize <= c->lt_ws.bytes && can_run(&chk, out_of_place)) {
        GemmEntry e;
        memset(&e, 0, sizeof e);
        e.key = *key;
        e.algo = chk.algo;
        e.with_epi = pin->with_epi;
        e.found = 1;
        if (c->gemm_log) gemm_log(c, key, &e, -1, -1, &chk);
        return cache_put(c, &e);
    }
    *rejected = 1;
    if (!c->warned_pin++)
        fprintf(stderr,
                "[rank %d] cuda: PPTRAIN_GEMM_ALGOS %s: its line for the GEMM M=%d N=%d K=%d "
                "epilogue %d does not run here (%s): the heuristic's first instead (said once)\n",
                c->rank, c->gemm_file, key->n, key->m, key->k, key->epi,
                !fits                                ? "fused otherwise"
                : s != CUBLAS_STATUS_SUCCESS         ? cublasLtGetStatusString(s)
                : !det                               ? "a reduction that is not deterministic"
                : chk.workspaceSize > c->lt_ws.bytes ? "more workspace"
                                                     : "not out of place");
    return NULL;
}

/* pin appended to the file ([Note: GEMM algorithm file]) and kept in c->pins, so that a key
 * the cache evicts gets it back instead of being tuned again. */
static void pin_keep(CudaCtx *c, const GemmEntry *e) {
    GemmPin pin;
    char why[512];
    memset(&pin, 0, sizeof pin);
    pin.key = e->key;
    pin.with_epi = e->with_epi;
    memcpy(pin.algo, &e->algo, sizeof pin.algo);
    if (gemm_file_append(c->gemm_file, c->gemm_tag, &pin, why, sizeof why) && !c->warned_append++)
        fprintf(stderr, "[rank %d] cuda: %s (the run goes on; said once)\n", c->rank, why);
    GemmPin *more = (GemmPin *)realloc(c->pins, (size_t)(c->npins + 1) * sizeof *more);
    if (more) {
        c->pins = more;
        c->pins[c->npins++] = pin;
    }
}

/* [Note: GEMM cache] cuBLASLt's heuristic query costs far more than the GEMM descriptors,
 * so its answer is kept per shape, operand and output types, epilogue and alignment: the
 * same key always runs the same algorithm, which also keeps results the same run to run.
 * A shape whose algorithm cannot fuse the bias into an fp32 output (none found with the
 * epilogue) runs without it and adds the bias in a kernel; any other epilogue it cannot
 * fuse is "not found", and the caller runs its unfused path ([Note: GEMM epilogues]). */
static const GemmEntry *gemm_algo(CudaCtx *c, const GemmKey *key, cublasLtMatmulDesc_t desc_epi,
                                  int epi_optional, cublasLtMatmulDesc_t desc_plain,
                                  cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                  cublasLtMatrixLayout_t lc, int out_of_place,
                                  const GemmTune *tune) {
    for (int i = 0; i < c->ngemm; i++)
        if (!memcmp(&c->gemm[i].key, key, sizeof *key)) return &c->gemm[i];
    int rejected = 0;
    const GemmEntry *pinned = gemm_pinned(c, key, desc_epi, epi_optional, desc_plain, la, lb, lc,
                                          out_of_place, &rejected);
    if (pinned) return pinned;
    int tuning = tune && !rejected; /* [Note: GEMM tuning]: tune is NULL when it is off */
    cublasLtMatmulPreference_t pref;
    LTCK(c, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c->lt_ws.bytes;
    uint32_t al[4] = {(uint32_t)key->alA, (uint32_t)key->alB, (uint32_t)key->alC,
                      (uint32_t)key->alD};
    LTCK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws));
    LTCK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                 &al[0], 4));
    LTCK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                 &al[1], 4));
    LTCK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 &al[2], 4));
    LTCK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                 &al[3], 4));
    /* split-K's reduction: reduction_mask */
    uint32_t red = reduction_mask(key);
    LTCK(c, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &red, sizeof red));
    /* the heuristic's best first; C != D takes the best that says it can write out of
     * place, so one algorithm without that capability does not cost the fusion; tuning
     * times up to CAND ([Note: GEMM tuning]) */
    enum { CAND = 16 };
    cublasLtMatmulHeuristicResult_t res[CAND];
    int n = 0, want = tuning ? CAND : out_of_place ? 8 : 1;
    GemmEntry e;
    memset(&e, 0, sizeof e);
    e.key = *key;
    if (desc_epi) { /* any refusal of the epilogue (type, alignment) is "no algorithm" */
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(c->lt, desc_epi, la, lb, lc, lc, pref,
                                                          want, res, &n);
        e.with_epi = s == CUBLAS_STATUS_SUCCESS && n > 0;
        if (!e.with_epi) n = 0;
    }
    int pick = e.with_epi ? pick_algo(res, n, out_of_place) : -1;
    /* an optional epilogue (the fp32 D's bias) that no algorithm writes out of place either:
     * the plain GEMM, and the bias in a kernel */
    if (pick < 0 && (!desc_epi || epi_optional)) {
        e.with_epi = 0;
        cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(c->lt, desc_plain, la, lb, lc, lc, pref,
                                                          want, res, &n);
        if (s == CUBLAS_STATUS_NOT_SUPPORTED) n = 0;
        else LTCK(c, s);
        pick = pick_algo(res, n, out_of_place);
    }
    LTCK(c, cublasLtMatmulPreferenceDestroy(pref));
    e.found = pick >= 0; /* if not, the caller falls back, or dies naming the shape */
    if (e.found && tuning)
        pick = gemm_tune(c, key, tune, e.with_epi ? desc_epi : desc_plain, res, n, pick,
                         out_of_place, la, lb, lc);
    if (e.found) e.algo = res[pick].algo;
    if (c->gemm_log) gemm_log(c, key, &e, n, pick, e.found ? &res[pick] : NULL);
    if (e.found && tuning && c->gemm_file[0]) pin_keep(c, &e); /* [Note: GEMM algorithm file] */
    return cache_put(c, &e);
}

/* [Note: GEMM epilogues] What a GEMM writes besides alpha op(A) op(B) + beta C, through
 * cuBLASLt's epilogues, so that an elementwise pass over the output is not a kernel of
 * its own: D bf16 (the operand type) instead of fp32; C (beta's input) another buffer
 * than D (the residual added into a projection: out = res + x W^T); the bias (in D's
 * type under a bf16 D: cuBLASLt 13.0 on an H100 had no algorithm for GELU's fc GEMM with
 * an fp32 bias, so the fc adds the bias's bf16 copy, as llm.c does); GELU itself with
 * its input kept (CUBLASLT_EPILOGUE_GELU_AUX_BIAS: D is GELU's output, the aux buffer the
 * pre-activation, in D's type and layout); GELU's derivative (CUBLASLT_EPILOGUE_DGELU, its aux
 * input the pre-activation in D's type and layout; cuBLASLt wants its leading dimension a multiple
 * of 8 and at least D's rows, cublasLt.h's CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); the bias
 * gradient, op(A)'s row sums (CUBLASLT_EPILOGUE_BGRADB, [Note: bias gradient epilogue]). An
 * epilogue the heuristic refuses for a shape makes try_gemm_out return -1 (cached: asked once), and
 * the op runs its unfused path, with the same contract; only a bias on an fp32 D is still added by
 * a kernel of its own. */
struct GemmOut {
    void *D;              /* row-major [M,N], leading dimension ldc */
    int d_bf16;           /* D and C are bf16 (else fp32) */
    const void *C;        /* beta's input, D's type and layout (NULL: D itself) */
    const void *bias;     /* + bias[N] on every row (CUBLASLT_EPILOGUE_BIAS): fp32, or bf16
                             when bias_bf16 */
    const void *gelu_pre; /* D = gelu'(gelu_pre) * (...) (CUBLASLT_EPILOGUE_DGELU) */
    float *bgrad;         /* bgrad[M] = sum over k of op(A)[m,k], written, not added (fp32 D,
                             batch 1; CUBLASLT_EPILOGUE_BGRADB: [Note: bias gradient
                             epilogue]) */
    int bias_bf16;        /* the bias is bf16: cuBLASLt takes a bf16 D's bias only in D's
                             type (its heuristic finds no algorithm with an fp32 one) */
    void *gelu_aux;       /* D = gelu(... + bias) (cuBLASLt's tanh GELU), gelu_aux = ... +
                             bias, both bf16 in D's layout (CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                             GELU_AUX without a bias; [Note: fused GELU] in backend.h) */
};

/* Row-major D[M,N] (leading dimension ldc) = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C,
 * with o's epilogue (bias only with batch 1 and ldc N); op transposes when tA / tB.
 * `batch` matrices at element strides sA, sB, sC. A and B are fp32, or bf16 when ab is
 * AB_BF16. 0, or -1 when cuBLASLt has no algorithm (with the epilogue asked for).
 *
 * cuBLASLt is column-major, and a row-major X is the column-major X^T, so this computes
 * D^T = op(B)^T op(A)^T: m = N, n = M, the first operand is B (op tB), the second A. */
static int try_gemm_out(CudaCtx *c, int tA, int tB, int M, int N, int K, float alpha,
                        const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
                        float beta, int ldc, long long sC, int batch, int ab,
                        cublasComputeType_t comp, const GemmOut *o) {
    if (M <= 0 || N <= 0) return 0;
    /* the epilogue reads the bias with vector loads: only a 16-byte aligned one is fused */
    int fuse_bias = o->bias && (uintptr_t)o->bias % 16 == 0;
    if (o->bias && !fuse_bias && o->d_bf16) return -1; /* no kernel adds a bias to bf16 */
    if ((o->gelu_pre || o->gelu_aux) && ldc % 8) return -1; /* the aux leading dimension */
    size_t es = ab == AB_BF16 ? 2 : 4, ds = o->d_bf16 ? 2 : 4;
    cudaDataType t = ab == AB_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType dt = o->d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const void *Cp = o->C ? o->C : o->D;
    cublasLtEpilogue_t epi = o->gelu_pre   ? CUBLASLT_EPILOGUE_DGELU
                             : o->gelu_aux ? (fuse_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                        : CUBLASLT_EPILOGUE_GELU_AUX)
                             : o->bgrad    ? CUBLASLT_EPILOGUE_BGRADB
                             : fuse_bias   ? CUBLASLT_EPILOGUE_BIAS
                                           : CUBLASLT_EPILOGUE_DEFAULT;
    if (o->gelu_pre && (o->bias || o->gelu_aux)) return -1; /* not asked for by any op */
    if (o->gelu_aux && (!o->d_bf16 || (o->bias && !fuse_bias))) return -1; /* nor these */
    if (o->bgrad && (o->bias || o->gelu_pre || o->gelu_aux || o->d_bf16 || batch != 1)) return -1;
    GemmKey key;
    memset(&key, 0, sizeof key);
    key.opA = tB;
    key.opB = tA;
    key.m = N;
    key.n = M;
    key.k = K;
    key.lda = ldb;
    key.ldb = lda;
    key.ldc = ldc;
    key.batch = batch;
    key.sA = sB;
    key.sB = sA;
    key.sC = sC;
    key.ab = ab;
    key.compute = (int)comp;
    /* the bias and aux pointers' alignment too: the heuristic reads them from the descriptor */
    key.bias = fuse_bias ? align_of(o->bias, 0) * (o->bias_bf16 ? -1 : 1) : 0;
    key.alA = align_of(B, sB * (long long)es);
    key.alB = align_of(A, sA * (long long)es);
    key.alC = align_of(Cp, sC * (long long)ds);
    key.alD = align_of(o->D, sC * (long long)ds);
    key.alX = o->gelu_pre   ? align_of(o->gelu_pre, 0)
              : o->gelu_aux ? align_of(o->gelu_aux, 0)
              : o->bgrad    ? align_of(o->bgrad, 0)
                            : 0;
    key.epi = (int)epi;
    key.oop = Cp != o->D; /* an in-place algorithm must not serve an out-of-place call */
    key.d_bf16 = o->d_bf16;
    cublasLtMatrixLayout_t la, lb, lc;
    layout(c, &la, t, tB ? K : N, tB ? N : K, ldb, batch, sB);
    layout(c, &lb, t, tA ? M : K, tA ? K : M, lda, batch, sA);
    layout(c, &lc, dt, N, M, ldc, batch, sC);
    cublasOperation_t opa = tB ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t plain, withe = NULL;
    LTCK(c, cublasLtMatmulDescCreate(&plain, comp, CUDA_R_32F));
    set_attr(c, plain, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    set_attr(c, plain, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        LTCK(c, cublasLtMatmulDescCreate(&withe, comp, CUDA_R_32F));
        set_attr(c, withe, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
        set_attr(c, withe, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
        set_attr(c, withe, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        if (fuse_bias) {
            /* the fp32 master bias, or its bf16 copy (bias_bf16) */
            cudaDataType bt = o->bias_bf16 ? CUDA_R_16BF : CUDA_R_32F;
            set_attr(c, withe, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o->bias, sizeof o->bias);
            set_attr(c, withe, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        }
        if (o->gelu_pre || o->gelu_aux) { /* aux: D's type (the default), D's layout */
            int64_t ld = ldc;
            const void *aux = o->gelu_pre ? o->gelu_pre : o->gelu_aux;
            set_attr(c, withe, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
            set_attr(c, withe, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        }
        if (o->bgrad) { /* the bias-gradient vector: D's type, fp32 (cublasLt.h) */
            cudaDataType bt = CUDA_R_32F;
            set_attr(c, withe, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o->bgrad, sizeof o->bgrad);
            set_attr(c, withe, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        }
    }
    int optional = epi == CUBLASLT_EPILOGUE_BIAS && !o->d_bf16;
    GemmTune tune; /* [Note: GEMM tuning]: what the candidates are timed on, when tuning */
    if (c->gemm_tune) {
        tune.alpha = alpha;
        tune.beta = beta;
        tune.A = B;
        tune.B = A;
        tune.C = Cp;
        tune.d_bytes = ((size_t)(batch - 1) * (size_t)sC + (size_t)(M - 1) * ldc + N) * ds;
        tune.in_place = Cp == o->D;
        tune.aux_out = o->gelu_aux;
        tune.bgrad_out = o->bgrad;
        tune.bgrad_bytes = o->bgrad ? (size_t)(M > N ? M : N) * sizeof(float) : 0;
    }
    const GemmEntry *e = gemm_algo(c, &key, withe, optional, plain, la, lb, lc, Cp != o->D,
                                   c->gemm_tune ? &tune : NULL);
    int found = e->found, fused = found && withe && e->with_epi;
    if (found) {
        LTCK(c, cublasLtMatmul(c->lt, fused ? withe : plain, &alpha, B, la, A, lb, &beta, Cp, lc,
                               o->D, lc, &e->algo, c->lt_ws.p, c->lt_ws.bytes, c->stream));
        if (o->bias && !fused) k_add_bias(c, (float *)o->D, (const float *)o->bias, M, N);
    }
    LTCK(c, cublasLtMatmulDescDestroy(plain));
    if (withe) LTCK(c, cublasLtMatmulDescDestroy(withe));
    LTCK(c, cublasLtMatrixLayoutDestroy(la));
    LTCK(c, cublasLtMatrixLayoutDestroy(lb));
    LTCK(c, cublasLtMatrixLayoutDestroy(lc));
    return found ? 0 : -1;
}

/* try_gemm_out into an fp32 C (in place), plus bias[N] when given. */
static int try_gemm(CudaCtx *c, int tA, int tB, int M, int N, int K, float alpha, const void *A,
                    int lda, long long sA, const void *B, int ldb, long long sB, float beta,
                    float *C, int ldc, long long sC, int batch, int ab, cublasComputeType_t comp,
                    const float *bias) {
    GemmOut o = {C, 0, NULL, bias, NULL};
    return try_gemm_out(c, tA, tB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, ldc, sC, batch,
                        ab, comp, &o);
}

/* try_gemm, or die naming the GEMM when cuBLASLt has no algorithm for it. */
static void gemm(CudaCtx *c, int tA, int tB, int M, int N, int K, float alpha, const void *A,
                 int lda, long long sA, const void *B, int ldb, long long sB, float beta, float *C,
                 int ldc, long long sC, int batch, int ab, cublasComputeType_t comp,
                 const float *bias) {
    if (try_gemm(c, tA, tB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch, ab,
                 comp, bias) == 0)
        return;
    /* a fast mode has no algorithm here: plain fp32, said once */
    if (comp != CUBLAS_COMPUTE_32F && ab == AB_F32) {
        if (!c->warned_fallback++)
            fprintf(stderr,
                    "[rank %d] cuda: cuBLASLt has no algorithm for a GEMM (M=%d N=%d K=%d "
                    "batch=%d) at compute type %d: running it in fp32 (said once)\n",
                    c->rank, M, N, K, batch, (int)comp);
        if (try_gemm(c, tA, tB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch, ab,
                     CUBLAS_COMPUTE_32F, bias) == 0)
            return;
    }
    char what[256];
    snprintf(what, sizeof what,
             "cuBLASLt has no algorithm for the row-major GEMM M=%d N=%d K=%d lda=%d ldb=%d ldc=%d "
             "batch=%d (operands %s, compute type %d)",
             M, N, K, lda, ldb, ldc, batch, ab == AB_BF16 ? "bf16" : "fp32", (int)comp);
    die_msg(c, __FILE__, __LINE__, what);
}

/* [Note: CUDA precision] fp32: fp32 operands, fp32 math (CUBLAS_COMPUTE_32F). tf32: the
 * same operands on the tensor cores' tf32 path (CUBLAS_COMPUTE_32F_FAST_TF32). bf16: the
 * operand activations are bf16 (be.operand, [Note: operand activations] in
 * src/backend/backend.h): the ops that write them round to bf16, and every matmul runs a bf16
 * GEMM with fp32 accumulation and fp32 output on them as they are (the fc GEMM writes
 * its bf16 pre-activation itself: [Note: GEMM epilogues]; the head's GEMM its bf16
 * logits: [Note: logits type] in backend.h). The fp32 master weights are
 * converted once per action list while the model holds them ([Note: held weights] in
 * model.h; per call otherwise). qkv is an operand too (matmul_operand_forward writes it in
 * bf16), and so is attention's output gradient (matmul_operand_backward). The residual stream
 * is of the operand type too unless PPTRAIN_RESIDUAL=fp32 ([Note: residual stream type] in
 * backend.h: c->res). LayerNorm's statistics, the gradients and the optimizer stay fp32; the
 * materialised attention's GEMMs run CUBLAS_COMPUTE_32F_FAST_16BF on fp32 copies of qkv and
 * dout (its slow path: head sizes over 128, or PPTRAIN_ATTENTION=materialized).
 * PPTRAIN_BF16_OPERANDS=fp32 keeps fp32 operand activations at bf16 and casts them in every matmul
 * instead (the path before bf16 activations, kept for side-by-side measurement: cuda/NOTES.md). */
static cublasComputeType_t mm_compute(const CudaCtx *c) {
    return c->prec == PP_PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static cublasComputeType_t att_compute(const CudaCtx *c) {
    return c->prec == PP_PREC_TF32   ? CUBLAS_COMPUTE_32F_FAST_TF32
           : c->prec == PP_PREC_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                     : CUBLAS_COMPUTE_32F;
}

/* Weight x[n] as bf16 in workspace g (precision bf16; the held copy when x lies inside
 * the held weights), else x itself. */
static const void *operand(CudaCtx *c, Grow *g, const float *x, size_t n) {
    if (c->prec != PP_PREC_BF16) return x;
    if (inside(x, n, c->held, c->held_n)) /* inside the held weights */
        return (const __nv_bfloat16 *)c->castW.p + (x - c->held);
    __nv_bfloat16 *d = (__nv_bfloat16 *)grow(c, g, n * sizeof(__nv_bfloat16));
    k_to_bf16(c, d, x, n);
    return d;
}

/* Activation x[n] (operand) as a bf16 GEMM operand at precision bf16: itself when the
 * operand type is bf16, else cast into workspace g; itself at fp32 and tf32. */
static const void *act_operand(CudaCtx *c, Grow *g, const void *x, size_t n) {
    if (c->prec != PP_PREC_BF16 || c->op == PP_BF16) return x;
    __nv_bfloat16 *d = (__nv_bfloat16 *)grow(c, g, n * sizeof(__nv_bfloat16));
    k_to_bf16(c, d, (const float *)x, n);
    return d;
}

/* One matmul GEMM (batch 1) at the backend's precision: at bf16 on the bf16 operands A16
 * and B16; when cuBLASLt has no bf16 algorithm for the shape and both fp32 operands A and
 * B exist (fp32 operand activations), on those with its own bf16 conversion
 * (CUBLAS_COMPUTE_32F_FAST_16BF); with bf16 activations, gemm names the shape and stops. */
static void mm_gemm(CudaCtx *c, int tA, int tB, int M, int N, int K, const float *A,
                    const void *A16, int lda, const float *B, const void *B16, int ldb, float beta,
                    float *C, int ldc, const float *bias) {
    if (c->prec == PP_PREC_BF16) {
        if (try_gemm(c, tA, tB, M, N, K, 1.0f, A16, lda, 0, B16, ldb, 0, beta, C, ldc, 0, 1,
                     AB_BF16, CUBLAS_COMPUTE_32F, bias) == 0)
            return;
        if (!A || !B) { /* dies naming the shape */
            gemm(c, tA, tB, M, N, K, 1.0f, A16, lda, 0, B16, ldb, 0, beta, C, ldc, 0, 1, AB_BF16,
                 CUBLAS_COMPUTE_32F, bias);
            return;
        }
    }
    cublasComputeType_t comp = c->prec == PP_PREC_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                       : mm_compute(c);
    gemm(c, tA, tB, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, AB_F32, comp, bias);
}

/* [Note: kept weight copy] The held weights' bf16 copy (castW) outlives the hold: it stays
 * the copy of c->kept[0..kept_n) for as long as every write to those floats comes through
 * adamw_many, which writes the bf16 of each new value it stores into the copy in the same
 * pass (k_to_bf16's rounding: the bits a new conversion would give). A hold with kept of the
 * same weights then has its copy already: GPT-2 124M's step saves the conversion's pass
 * (read 4 and write 2 bytes a parameter, 0.75 GB) for 2 more bytes written by AdamW, and a
 * launch. The caller promises that nothing outside this backend wrote them (the runtime: no
 * ZeRO-1 gather); the backend's own other writes drop the copy (drop_kept: to_device, copy,
 * zero, adamw_update, sgd_update, dealloc), and so does any hold that converts other weights
 * into castW (the head's own). PPTRAIN_ADAMW_COPY=0 converts at every hold, as before. */
static void drop_kept(CudaCtx *c, const void *dst, size_t bytes) {
    const char *d = (const char *)dst, *k = (const char *)c->kept;
    if (c->kept && d < k + c->kept_n * sizeof(float) && k < d + bytes) c->kept = NULL;
}

static void cu_weight_hold(const Backend *be, const float *w, size_t n, int kept) {
    CudaCtx *c = ctx_of(be);
    c->held = NULL;
    c->held_n = 0;
    if (!w || c->prec != PP_PREC_BF16) return;
    if (!(kept && c->adamw_copy && c->kept == w && c->kept_n == n)) { /* in stream order */
        k_to_bf16(c, (__nv_bfloat16 *)grow(c, &c->castW, n * sizeof(__nv_bfloat16)), w, n);
        c->kept = w;
        c->kept_n = n;
    }
    c->held = w;
    c->held_n = n;
}

/* The fp32 view of an operand activation (NULL when it is bf16: no fp32 copy exists). */
static const float *act_f32(const CudaCtx *c, const void *x) {
    return c->op == PP_F32 ? (const float *)x : NULL;
}

static void cu_matmul_forward(const Backend *be, float *out, const void *inp, const float *w,
                              const float *b, int N, int C, int OC) {
    CudaCtx *c = ctx_of(be);
    const void *A = act_operand(c, &c->castA, inp, (size_t)N * C);
    const void *W = operand(c, &c->castB, w, (size_t)OC * C);
    /* out[N,OC] = inp[N,C] @ w[OC,C]^T + b */
    mm_gemm(c, 0, 1, N, OC, C, act_f32(c, inp), A, C, w, W, C, 0.0f, out, OC, b);
}

/* [Note: logits type] (src/backend/backend.h): the head's GEMM writes the logits in bf16
 * (c->logits_bf16: D bf16, no epilogue) or fp32 (matmul_forward's). A bf16 D with no
 * algorithm stops the run naming the switch back: its fp32 result would need room the
 * chunk does not have. */
static void cu_head_logits(const Backend *be, void *logits, const void *inp, const float *w, int N,
                           int C, int OC) {
    CudaCtx *c = ctx_of(be);
    if (!c->logits_bf16) {
        cu_matmul_forward(be, (float *)logits, inp, w, NULL, N, C, OC);
        return;
    }
    const void *A = act_operand(c, &c->castA, inp, (size_t)N * C);
    const void *W = operand(c, &c->castB, w, (size_t)OC * C);
    GemmOut o = {logits, 1, NULL, NULL, NULL, NULL, 0};
    if (try_gemm_out(c, 0, 1, N, OC, C, 1.0f, A, C, 0, W, C, 0, 0.0f, OC, 0, 1, AB_BF16,
                     CUBLAS_COMPUTE_32F, &o) == 0)
        return;
    char what[200];
    snprintf(what, sizeof what,
             "cuBLASLt has no algorithm for the head's GEMM with bf16 logits (M=%d N=%d K=%d): "
             "set PPTRAIN_LOGITS=fp32",
             N, OC, C);
    die_msg(c, __FILE__, __LINE__, what);
}

/* Said once per kind (bit `kind` of c->warned_epi): cuBLASLt had no algorithm for a fused
 * GEMM, so its op runs unfused: the result is the same contract, only slower, and the
 * speed switches' A/B (bench/gpu.sh) would otherwise not show why a fusion gained nothing.
 * Kinds: 0 residual, 1 GELU forward, 2 DGELU, 3 bias gradient, 4 GELU in the epilogue, 5 and 6
 * an operand output's GEMM (qkv; d atty and the norms' douts: [Note: operand activations]). */
static void epi_unfused(CudaCtx *c, int kind, const char *what, int M, int N, int K) {
    if (c->warned_epi & (1 << kind)) return;
    c->warned_epi |= 1 << kind;
    fprintf(stderr,
            "[rank %d] cuda: no fused algorithm for %s (M=%d N=%d K=%d: cuBLASLt's heuristic "
            "found none, or an aux leading dimension is not a multiple of 8): running it "
            "unfused (said once)\n",
            c->rank, what, M, N, K);
}

/* [Note: bias gradient epilogue] db[OC] += the column sums of dout[N,OC]. k_bias_backward
 * re-reads dout after the dw GEMM has read it (2·N·OC bytes at bf16); the GEMM can sum it
 * on its way instead. In try_gemm_out's mapping the dw GEMM dw[OC,C] = dout^T inp is, in
 * cuBLASLt's column-major terms, D'[C,OC] = inp'[C,N] x dout'[N,OC] (first operand inp,
 * second dout^T, transposed): m = C, n = OC, k = N. db is the sum over k of the second
 * operand, one value per column of D': CUBLASLT_EPILOGUE_BGRADB ("bias gradient based on
 * the input matrix B ... the number of columns of the matrix D ... reduction over k";
 * BGRADA would give inp's C column sums). cublasLt.h: it "stores" the gradient in the
 * vector at CUBLASLT_MATMUL_DESC_BIAS_POINTER, in the output's type (fp32 here) -- written,
 * not added, and beta's C (dw's old value) takes no part in it. So the GEMM writes it
 * into the scratch c->bgrad (OC floats, the backend's own cudaMalloc: 256-byte aligned),
 * and add_k adds it to db in stream order. The header promises no order for that sum:
 * gpu_ops runs it twice for the bits. Taken at precision bf16 with bf16 operand
 * activations only (the GEMM's operand is dout itself: with fp32 activations it would
 * sum the bf16 cast of dout; fp32 and tf32 are not the speed path); where cuBLASLt has
 * no algorithm with the epilogue (cached "not found", said once) or under
 * PPTRAIN_FUSE_BGRAD=0, the plain GEMM and k_bias_backward as before. The split halves
 * keep their bits: the W half and the fused call both come here. */

/* dw[OC,C] += dout^T @ inp, db[OC] += column sums of dout (NULL: skipped); D is dout as
 * the GEMM's operand. One function for matmul_backward and matmul_gelu_backward, so that
 * their W halves are the same bits. castB is reused in stream order, after any GEMM
 * before that read it. */
static void mm_weight_grads(CudaCtx *c, float *dw, float *db, const void *dout, const void *D,
                            const void *inp, int N, int C, int OC) {
    const void *I = act_operand(c, &c->castB, inp, (size_t)N * C);
    if (db && c->fuse_bgrad && c->prec == PP_PREC_BF16 && c->op == PP_BF16 && N > 0) {
        float *s = (float *)grow(c, &c->bgrad, (size_t)OC * sizeof(float));
        GemmOut o = {dw, 0, NULL, NULL, NULL, s};
        if (try_gemm_out(c, 1, 0, OC, C, N, 1.0f, D, OC, 0, I, C, 0, 1.0f, C, 0, 1, AB_BF16,
                         CUBLAS_COMPUTE_32F, &o) == 0) {
            k_add_inplace(c, db, s, (size_t)OC);
            return;
        }
        epi_unfused(c, 3, "the weight gradient's GEMM with the bias-gradient epilogue (BGRADB)", OC,
                    C, N);
    }
    mm_gemm(c, 1, 0, OC, C, N, act_f32(c, dout), D, OC, act_f32(c, inp), I, C, 1.0f, dw, C, NULL);
    if (db) k_bias_backward(c, db, dout, N, OC);
}

static const void *bias_bf16(CudaCtx *c, const float *b, size_t n);

/* [Note: GEMM epilogues]: out = res + inp @ w^T + b in one GEMM, res as C (beta 1, C != D)
 * and the bias in the epilogue, at every precision; C and D of the residual type ([Note:
 * residual stream type] in backend.h): fp32, or bf16 with the bias's bf16 copy (bias_bf16, as
 * cuBLASLt takes a bf16 D's bias), so that the GEMM reads and writes 2 bytes an element of
 * the stream instead of 4. Under PPTRAIN_FUSE_RESIDUAL=0, or where cuBLASLt has no algorithm
 * for it, matmul_forward's GEMM (into c->wide at a bf16 residual) and then add_inplace's or
 * add_residual's kernel. */
static void cu_matmul_residual_forward(const Backend *be, void *out, const void *res,
                                       const void *inp, const float *w, const float *b, int N,
                                       int C, int OC) {
    CudaCtx *c = ctx_of(be);
    const void *A = act_operand(c, &c->castA, inp, (size_t)N * C);
    const void *W = operand(c, &c->castB, w, (size_t)OC * C);
    int bf = c->prec == PP_PREC_BF16, rbf = c->res == PP_BF16;
    if (c->fuse_residual) {
        GemmOut o = {out, rbf, res, b && rbf ? bias_bf16(c, b, OC) : b, NULL, NULL, b && rbf};
        if (try_gemm_out(c, 0, 1, N, OC, C, 1.0f, A, C, 0, W, C, 0, 1.0f, OC, 0, 1,
                         bf ? AB_BF16 : AB_F32, bf ? CUBLAS_COMPUTE_32F : mm_compute(c), &o) == 0)
            return;
        epi_unfused(c, 0, "the residual GEMM (C != D, beta 1)", N, OC, C);
    }
    size_t n = (size_t)N * OC;
    float *F = rbf ? (float *)grow(c, &c->wide, n * sizeof(float)) : (float *)out;
    mm_gemm(c, 0, 1, N, OC, C, act_f32(c, inp), A, C, w, W, C, 0.0f, F, OC, b);
    if (rbf)
        k_add_residual(c, out, F, res, n);
    else
        k_add_inplace(c, (float *)out, (const float *)res, n);
}

static void cu_matmul_backward(const Backend *be, float *dinp, float *dw, float *db,
                               const void *dout, const void *inp, const float *w, int N, int C,
                               int OC) {
    CudaCtx *c = ctx_of(be);
    const void *D = dinp || dw ? act_operand(c, &c->castA, dout, (size_t)N * OC) : NULL;
    if (dinp) { /* dinp[N,C] = dout[N,OC] @ w[OC,C] (overwrites) */
        const void *W = operand(c, &c->castB, w, (size_t)OC * C);
        mm_gemm(c, 0, 0, N, C, OC, act_f32(c, dout), D, OC, w, W, C, 0.0f, dinp, C, NULL);
    }
    if (dw) mm_weight_grads(c, dw, db, dout, D, inp, N, C, OC);
    else if (db) k_bias_backward(c, db, dout, N, OC);
}

/* [Note: fused GELU] (src/backend/backend.h), [Note: GEMM epilogues]. At bf16 operands the
 * fc GEMM writes GELU's output and pre in bf16, the bias and GELU in its epilogue
 * (CUBLASLT_EPILOGUE_GELU_AUX_BIAS: be->gelu_in_gemm, so selective recompute reruns this
 * op); under PPTRAIN_GELU_EPILOGUE=0, or where cuBLASLt has no algorithm for that, it writes
 * pre with the bias epilogue and GELU's kernel reads it back (the kernel a recompute without
 * gelu_in_gemm runs). fcproj's dinp GEMM applies GELU's derivative in its epilogue
 * (CUBLASLT_EPILOGUE_DGELU on the bf16 pre) and writes dpre in bf16. Elsewhere, under
 * PPTRAIN_FUSE_GELU=0, or where cuBLASLt has no algorithm with the epilogue: the GEMM in
 * fp32 (into the op's own output at fp32 operands, else into the workspace c->wide), then
 * the elementwise kernel, rounding once. */
static float *wide_fp32(CudaCtx *c, void *op_out, size_t n) {
    return c->op == PP_F32 ? (float *)op_out : (float *)grow(c, &c->wide, n * sizeof(float));
}

/* The bf16 copy of a bias b[n] for the epilogue of a GEMM with a bf16 D: the held weights'
 * when b lies inside them at a 16-byte address (the epilogue loads it in vectors), else
 * cast into c->castBias. */
static const void *bias_bf16(CudaCtx *c, const float *b, size_t n) {
    const void *p = operand(c, &c->castBias, b, n);
    if ((uintptr_t)p % 16 == 0) return p;
    __nv_bfloat16 *d = (__nv_bfloat16 *)grow(c, &c->castBias, n * sizeof(__nv_bfloat16));
    k_to_bf16(c, d, b, n);
    return d;
}

static void cu_matmul_gelu_forward(const Backend *be, void *out, void *pre, const void *inp,
                                   const float *w, const float *b, int N, int C, int OC) {
    CudaCtx *c = ctx_of(be);
    size_t n = (size_t)N * OC;
    const void *A = act_operand(c, &c->castA, inp, (size_t)N * C);
    const void *W = operand(c, &c->castB, w, (size_t)OC * C);
    int fuse = c->op == PP_BF16 && c->fuse_gelu;
    /* the bias in bf16, as cuBLASLt takes it with a bf16 D ([Note: GEMM epilogues]) */
    GemmOut o = {pre, 1, NULL, b && fuse ? bias_bf16(c, b, OC) : NULL, NULL, NULL, b && fuse};
    if (fuse && c->gelu_epi) { /* GELU too, in the epilogue: D = out, aux = pre */
        GemmOut g = o;
        g.D = out;
        g.gelu_aux = pre;
        if (try_gemm_out(c, 0, 1, N, OC, C, 1.0f, A, C, 0, W, C, 0, 0.0f, OC, 0, 1, AB_BF16,
                         CUBLAS_COMPUTE_32F, &g) == 0)
            return;
        epi_unfused(c, 4, "GELU's GEMM with GELU in the epilogue (GELU_AUX_BIAS)", N, OC, C);
    }
    if (!(fuse && try_gemm_out(c, 0, 1, N, OC, C, 1.0f, A, C, 0, W, C, 0, 0.0f, OC, 0, 1, AB_BF16,
                               CUBLAS_COMPUTE_32F, &o) == 0)) {
        if (fuse)
            epi_unfused(c, 1, "GELU's GEMM with a bf16 output and the bias epilogue", N, OC, C);
        float *F = wide_fp32(c, pre, n); /* pre = inp @ w^T + b, rounded once */
        mm_gemm(c, 0, 1, N, OC, C, act_f32(c, inp), A, C, w, W, C, 0.0f, F, OC, b);
        if ((void *)F != pre) k_to_operand(c, pre, F, n);
    }
    k_gelu_forward(c, out, pre, n);
}

static void cu_matmul_gelu_backward(const Backend *be, void *dpre, float *dw, float *db,
                                    const void *dout, const void *inp, const float *w,
                                    const void *pre, int N, int C, int OC) {
    CudaCtx *c = ctx_of(be);
    const void *D = dpre || dw ? act_operand(c, &c->castA, dout, (size_t)N * OC) : NULL;
    if (dpre) { /* dpre[N,C] = gelu'(pre) * (dout[N,OC] @ w[OC,C]) (overwrites) */
        const void *W = operand(c, &c->castB, w, (size_t)OC * C);
        GemmOut o = {dpre, 1, NULL, NULL, pre};
        if (!(c->op == PP_BF16 && c->fuse_gelu &&
              try_gemm_out(c, 0, 0, N, C, OC, 1.0f, D, OC, 0, W, C, 0, 0.0f, C, 0, 1, AB_BF16,
                           CUBLAS_COMPUTE_32F, &o) == 0)) {
            if (c->op == PP_BF16 && c->fuse_gelu)
                epi_unfused(c, 2, "GELU's backward GEMM with the DGELU epilogue", N, C, OC);
            float *F = wide_fp32(c, dpre, (size_t)N * C);
            mm_gemm(c, 0, 0, N, C, OC, act_f32(c, dout), D, OC, w, W, C, 0.0f, F, C, NULL);
            k_gelu_backward(c, dpre, pre, F, (size_t)N * C); /* in place at fp32 */
        }
    }
    if (dw) mm_weight_grads(c, dw, db, dout, D, inp, N, C, OC);
    else if (db) k_bias_backward(c, db, dout, N, OC);
}

/* [Note: operand activations] (src/backend/backend.h): qkv, attention's output gradient
 * (d atty) and the norms' (d ln1, d ln2, d lnf) are only ever read by ops that read the
 * operand type (attention, RoPE, decoding, the norms' backward): at bf16 operands the GEMM
 * writes them in bf16 itself (qkv's bias in the epilogue, in bf16
 * as cuBLASLt takes it with a bf16 D), where there were an fp32 D and then a cast in every
 * attention call (cuDNN's and the flash kernels' alike: a qkv cast in the forward, qkv and
 * dout casts in the backward, ~0.2 ms a layer at GPT-2 124M, B 16: cuda/NOTES.md). Where
 * cuBLASLt has no algorithm for the bf16 D (said once), or under PPTRAIN_FUSE_CAST=0, the
 * fp32 GEMM into c->wide and a cast. At fp32 operands: matmul_forward's and matmul_backward's
 * GEMMs. */
static void cu_matmul_operand_forward(const Backend *be, void *out, const void *inp, const float *w,
                                      const float *b, int N, int C, int OC) {
    CudaCtx *c = ctx_of(be);
    if (c->op != PP_BF16) return cu_matmul_forward(be, (float *)out, inp, w, b, N, C, OC);
    const void *A = act_operand(c, &c->castA, inp, (size_t)N * C);
    const void *W = operand(c, &c->castB, w, (size_t)OC * C);
    if (c->fuse_cast) {
        GemmOut o = {out, 1, NULL, b ? bias_bf16(c, b, OC) : NULL, NULL, NULL, b != NULL};
        if (try_gemm_out(c, 0, 1, N, OC, C, 1.0f, A, C, 0, W, C, 0, 0.0f, OC, 0, 1, AB_BF16,
                         CUBLAS_COMPUTE_32F, &o) == 0)
            return;
        epi_unfused(c, 5, "an operand output's GEMM (qkv: a bf16 output and the bias epilogue)", N,
                    OC, C);
    }
    float *F = wide_fp32(c, out, (size_t)N * OC);
    mm_gemm(c, 0, 1, N, OC, C, NULL, A, C, w, W, C, 0.0f, F, OC, b);
    k_to_operand(c, out, F, (size_t)N * OC);
}

static void cu_matmul_operand_backward(const Backend *be, void *dinp, float *dw, float *db,
                                       const void *dout, const void *inp, const float *w, int N,
                                       int C, int OC) {
    CudaCtx *c = ctx_of(be);
    if (c->op != PP_BF16 || !dinp)
        return cu_matmul_backward(be, (float *)dinp, dw, db, dout, inp, w, N, C, OC);
    /* dinp[N,C] = dout[N,OC] @ w[OC,C] in bf16 (overwrites); dout is a bf16 operand */
    const void *W = operand(c, &c->castB, w, (size_t)OC * C);
    GemmOut o = {dinp, 1, NULL, NULL, NULL};
    if (!c->fuse_cast || try_gemm_out(c, 0, 0, N, C, OC, 1.0f, dout, OC, 0, W, C, 0, 0.0f, C, 0, 1,
                                      AB_BF16, CUBLAS_COMPUTE_32F, &o) != 0) {
        if (c->fuse_cast)
            epi_unfused(c, 6,
                        "an operand input gradient's GEMM (d atty, d ln1, d ln2, d lnf: a bf16 "
                        "output)",
                        N, C, OC);
        float *F = wide_fp32(c, dinp, (size_t)N * C);
        mm_gemm(c, 0, 0, N, C, OC, NULL, dout, OC, w, W, C, 0.0f, F, C, NULL);
        k_to_operand(c, dinp, F, (size_t)N * C);
    }
    /* dw, db: matmul_backward's W half (its bits, as the split backward needs) */
    if (dw || db) cu_matmul_backward(be, NULL, dw, db, dout, inp, w, N, C, OC);
}

/* ---- attention ----------------------------------------------------------------------------
 * [Note: attention path] Two implementations of the contract's causal attention:
 *  - flash (flash_attn.cu, [Note: flash tiling]): bf16 tensor cores with fp32
 *    accumulation, no [T,T] matrix; saves the log-sum-exp [B,NH,T]; head sizes up to 128;
 *  - materialised: the scores [B,NH,T,T] through batched cuBLASLt GEMMs (one batch of NH
 *    heads per sequence) and the softmax kernels; saves the probabilities, as the CPU.
 * The choice is made once, at open (attention_saved_floats must answer for the path
 * the forward takes, and it is given no head size): PPTRAIN_ATTENTION=flash or
 * =materialized forces one; unset, flash runs at precision bf16 (its operands are bf16
 * anyway) when the run's head size C/NH is at most 128, the materialised path otherwise
 * (fp32 and tf32 keep their tighter tolerances). A flash backend called at a head size
 * over 128 (possible only when open was given no sizes: the op tests) stops with a
 * message naming the variable. The path is in the backend's description line.
 * PPTRAIN_FLASH_BWD (read once at open) picks flash's backward kernels: v2 (unset), v1,
 * or v2's parts joined by '+' (prep, dq, dkv): [Note: flash backward v2] in flash_attn.cu.
 * cuDNN's fused flash attention ([Note: cuDNN attention] in cudnn_attn.cc) runs instead of
 * the flash kernels by default where it can: bf16 operands, the run's head size a multiple
 * of 8 up to 128, and libcudnn.so.9 loads (else flash, and the description says cuDNN's
 * did not load); a graph cuDNN refuses at its first call hands the run to the flash
 * kernels, saying so once. On an H100 it took 7.4 ms of a GPT-2 124M step at B = 16 where
 * the flash kernels took 11.6-11.7 (cuda/NOTES.md). PPTRAIN_ATTENTION=cudnn asks for it
 * (an open that cannot load it, or a graph it refuses, ends the run saying why); =flash
 * keeps pptrain's own kernels. */

/* [Note: cuDNN attention]'s head sizes (the run's are checked at open, attention_choice). */
static int cudnn_head_ok(int HS) { return HS > 0 && HS <= 128 && HS % 8 == 0; }

/* The head-size rule of the flash kernels (cudnn 0) or cuDNN's attention (1), at open
 * (attention_choice, the run's C/NH) and at the call: 0 when HS is taken, else 1 with the
 * rule and the way out in buf. */
static int head_size_refused(int HS, int cudnn, char *buf, size_t n) {
    if (cudnn ? cudnn_head_ok(HS) : flash_head_pad(HS) != 0) return 0;
    snprintf(buf, n,
             cudnn ? "PPTRAIN_ATTENTION=cudnn: cuDNN's attention here takes head sizes that are "
                     "multiples of 8 up to 128, not HS = C/NH = %d; unset PPTRAIN_ATTENTION"
                   : "flash attention supports head sizes up to 128, not HS = C/NH = %d; unset "
                     "PPTRAIN_ATTENTION or set it to materialized",
             HS);
    return 1;
}

/* The head size at the call (refused there only when open was given no sizes: the op
 * tests): stops with the rule. */
static void head_size_check(const CudaCtx *c, int HS, int cudnn) {
    char what[256];
    if (head_size_refused(HS, cudnn, what, sizeof what)) die_msg(c, __FILE__, __LINE__, what);
}

/* The materialised path computes in fp32: its bf16 outputs go through c->stage, */
static float *staged(CudaCtx *c, void *x, size_t n) {
    return c->op == PP_BF16 ? (float *)grow(c, &c->stage, n * sizeof(float)) : (float *)x;
}

/* and its bf16 inputs (qkv, dout) are widened into c->widen, at float offset `at`. */
static const float *widened(CudaCtx *c, const void *x, size_t n, size_t at) {
    if (c->op != PP_BF16) return (const float *)x;
    float *w = (float *)grow(c, &c->widen, (at + n) * sizeof(float)) + at;
    k_from_operand(c, w, x, n);
    return w;
}

/* [Note: grouped-query attention] in src/backend/backend.h, materialised: query head
 * h = j*G + g reads kv head j. Each GEMM below is one batch over the NKV kv heads for one
 * member g of every group (query heads g, G + g, ...: stride G heads), G of them a
 * sequence; with G = 1 that is one batch of all NH heads, the multi-head calls. */
static void materialized_forward(const Backend *be, void *outp, float *att, const void *qkvp, int B,
                                 int T, int NH, int NKV, int HS) {
    CudaCtx *c = ctx_of(be);
    int G = NH / NKV, C = NH * HS, ld = (NH + 2 * NKV) * HS;
    float *out = staged(c, outp, (size_t)B * T * C);
    const float *qkv = widened(c, qkvp, (size_t)B * T * ld, 0);
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HS);
    cublasComputeType_t comp = att_compute(c);
    /* S[h] = scale * Q_h K_j^T, all T x T (the mask is the softmax's) */
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + (size_t)NH * HS;
        float *S = att + (size_t)b * NH * TT;
        for (int g = 0; g < G; g++)
            gemm(c, 0, 1, T, T, HS, scale, q + (size_t)g * HS, ld, (long long)G * HS, k, ld, HS,
                 0.0f, S + g * TT, T, G * TT, NKV, AB_F32, comp, NULL);
    }
    k_softmax_causal(c, att, B * NH * T, T);
    for (int b = 0; b < B; b++) { /* Y_h = P_h V_j */
        const float *v = qkv + (size_t)b * T * ld + (size_t)(NH + NKV) * HS;
        const float *P = att + (size_t)b * NH * TT;
        float *y = out + (size_t)b * T * C;
        for (int g = 0; g < G; g++)
            gemm(c, 0, 0, T, HS, T, 1.0f, P + g * TT, T, G * TT, v, ld, HS, 0.0f,
                 y + (size_t)g * HS, C, (long long)G * HS, NKV, AB_F32, comp, NULL);
    }
    if (out != outp) k_to_operand(c, outp, out, (size_t)B * T * C);
}

/* dK_j and dV_j are the sums over the group's heads g = 0..G-1 in order: the GEMM of g = 0
 * overwrites (beta 0), the later ones add (beta 1), one after the other on the stream. */
static void materialized_backward(const Backend *be, void *dqkvp, const void *doutp,
                                  const void *qkvp, const float *att, int B, int T, int NH, int NKV,
                                  int HS, float *scratch) {
    CudaCtx *c = ctx_of(be);
    int G = NH / NKV, C = NH * HS, ld = (NH + 2 * NKV) * HS;
    float *dqkv = staged(c, dqkvp, (size_t)B * T * ld);
    size_t nq = (size_t)B * T * ld;
    /* room for both first: a grow between the two would move what the first wrote */
    grow(c, &c->widen, (nq + (size_t)B * T * C) * sizeof(float));
    const float *qkv = widened(c, qkvp, nq, 0), *dout = widened(c, doutp, (size_t)B * T * C, nq);
    long long TT = (long long)T * T, sG = (long long)G * HS;
    float scale = 1.0f / sqrtf((float)HS);
    cublasComputeType_t comp = att_compute(c);
    /* one sequence's [NH,T,T] */
    float *dP = (float *)grow(c, &c->att, (size_t)NH * TT * sizeof(float));
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + (size_t)NH * HS, *v = k + NKV * HS;
        const float *P = att + (size_t)b * NH * TT, *dy = dout + (size_t)b * T * C;
        float *dq = dqkv + (size_t)b * T * ld, *dk = dq + (size_t)NH * HS, *dv = dk + NKV * HS;
        for (int g = 0; g < G; g++) { /* dP_h = dY_h V_j^T;  dV_j (+)= P_h^T dY_h */
            gemm(c, 0, 1, T, T, HS, 1.0f, dy + (size_t)g * HS, C, sG, v, ld, HS, 0.0f, dP + g * TT,
                 T, G * TT, NKV, AB_F32, comp, NULL);
            gemm(c, 1, 0, T, HS, T, 1.0f, P + g * TT, T, G * TT, dy + (size_t)g * HS, C, sG,
                 g ? 1.0f : 0.0f, dv, ld, HS, NKV, AB_F32, comp, NULL);
        }
        /* dS = P * (dP - rowsum(P dP)) * scale, causal part only */
        k_softmax_causal_backward(c, dP, P, NH * T, T, scale);
        for (int g = 0; g < G; g++) { /* dQ_h = dS_h K_j;  dK_j (+)= dS_h^T Q_h */
            gemm(c, 0, 0, T, HS, T, 1.0f, dP + g * TT, T, G * TT, k, ld, HS, 0.0f,
                 dq + (size_t)g * HS, ld, sG, NKV, AB_F32, comp, NULL);
            gemm(c, 1, 0, T, HS, T, 1.0f, dP + g * TT, T, G * TT, q + (size_t)g * HS, ld, sG,
                 g ? 1.0f : 0.0f, dk, ld, HS, NKV, AB_F32, comp, NULL);
        }
    }
    if (dqkv != dqkvp) k_to_operand(c, dqkvp, dqkv, (size_t)B * T * ld);
}

static void cu_attention_forward(const Backend *be, void *out, float *att, const void *qkv, int B,
                                 int T, int NH, int NKV, int HS) {
    CudaCtx *c = ctx_of(be);
    if (!c->att_flash) return materialized_forward(be, out, att, qkv, B, T, NH, NKV, HS);
    if (c->att_cudnn && T > 1) { /* T = 1: the flash kernels ([Note: cuDNN attention]) */
        head_size_check(c, HS, 1);
        if (!k_cudnn_attention_forward(c, out, att, qkv, B, T, NH, NKV, HS)) return;
    } /* else, or where cuDNN refused the shape under the default: the flash kernels */
    head_size_check(c, HS, 0);
    k_flash_forward(c, out, att, qkv, B, T, NH, NKV, HS);
}

static void cu_attention_backward(const Backend *be, void *dqkv, const void *dout, const void *qkv,
                                  const void *out, const float *att, int B, int T, int NH, int NKV,
                                  int HS, float *scratch) {
    CudaCtx *c = ctx_of(be);
    if (!c->att_flash)
        return materialized_backward(be, dqkv, dout, qkv, att, B, T, NH, NKV, HS, scratch);
    if (c->att_cudnn && T > 1) { /* T = 1: the flash kernels ([Note: cuDNN attention]) */
        head_size_check(c, HS, 1);
        /* cuDNN reads q, k, v in place while it writes dq, dk, dv (flash packs them first) */
        if (dqkv == qkv)
            pp_cuda_die(c, __FILE__, __LINE__, "attention_backward", "dqkv == qkv",
                        "the contract's dqkv must not overlap qkv (a caller's bug)");
        if (!k_cudnn_attention_backward(c, dqkv, dout, qkv, out, att, B, T, NH, NKV, HS)) return;
    }
    head_size_check(c, HS, 0);
    float *D = (float *)grow(c, &c->flashD, (size_t)B * NH * T * sizeof(float));
    k_flash_backward(c, dqkv, D, dout, qkv, out, att, B, T, NH, NKV, HS);
}

static size_t cu_attention_saved_floats(const Backend *be, int B, int T, int NH) {
    return ctx_of(be)->att_flash ? (size_t)B * NH * T  /* the log-sum-exp of each row */
                                 : (size_t)B * NH * T * T; /* the probabilities, as on the CPU */
}

static void cu_rope_forward(const Backend *be, void *qkv, const float *inv_freq, int B, int T,
                            int NH, int NKV, int HS) {
    k_rope(ctx_of(be), qkv, inv_freq, B, T, NH, NKV, HS, 1);
}

static void cu_rope_backward(const Backend *be, void *dqkv, const float *inv_freq, int B, int T,
                             int NH, int NKV, int HS) {
    k_rope(ctx_of(be), dqkv, inv_freq, B, T, NH, NKV, HS, -1);
}

static void cu_kv_append(const Backend *be, float *kcache, float *vcache, void *qkv,
                         const float *inv_freq, int pos, int n, int NH, int NKV, int HS, int cap) {
    k_kv_append(ctx_of(be), kcache, vcache, qkv, inv_freq, pos, n, NH, NKV, HS, cap);
}

static void cu_attention_decode(const Backend *be, void *out, const void *qkv, const float *kcache,
                                const float *vcache, int pos, int n, int NH, int NKV, int HS,
                                int cap) {
    k_attention_decode(ctx_of(be), out, qkv, kcache, vcache, pos, n, NH, NKV, HS, cap);
}

/* ---- the other ops: kernels.cu -------------------------------------------------------- */

static void cu_encoder_forward(const Backend *be, void *out, const int *inp, const float *wte,
                               const float *wpe, int B, int T, int C) {
    k_encoder_forward(ctx_of(be), out, inp, wte, wpe, B, T, C);
}

static void cu_encoder_backward(const Backend *be, float *dwte, float *dwpe, const float *dout,
                                const int *inp, int B, int T, int C) {
    k_encoder_backward(ctx_of(be), dwte, dwpe, dout, inp, B, T, C);
}

static void cu_layernorm_forward(const Backend *be, void *out, float *mean, float *rstd,
                                 const void *inp, const float *w, const float *b, int N, int C) {
    k_layernorm_forward(ctx_of(be), out, mean, rstd, inp, w, b, N, C);
}

static void cu_layernorm_backward(const Backend *be, float *dinp, void *dinp_op, float *dw,
                                  float *db, const void *dout, const void *inp, const float *mean,
                                  const float *rstd, const float *w, int N, int C, float *scratch) {
    k_layernorm_backward(ctx_of(be), dinp, dinp ? dinp_op : NULL, dw, db, dout, inp, mean, rstd, w,
                         N, C);
}

static void cu_rmsnorm_forward(const Backend *be, void *out, float *rstd, const void *inp,
                               const float *w, float eps, int N, int C) {
    k_rmsnorm_forward(ctx_of(be), out, rstd, inp, w, eps, N, C);
}

static void cu_rmsnorm_backward(const Backend *be, float *dinp, void *dinp_op, float *dw,
                                const void *dout, const void *inp, const float *rstd,
                                const float *w, int N, int C, float *scratch) {
    k_rmsnorm_backward(ctx_of(be), dinp, dinp ? dinp_op : NULL, dw, dout, inp, rstd, w, N, C);
}

static void cu_swiglu_forward(const Backend *be, void *out, const float *gate, const float *up,
                              size_t count) {
    k_swiglu_forward(ctx_of(be), out, gate, up, count);
}

static void cu_swiglu_backward(const Backend *be, void *dgate, void *dup, const float *gate,
                               const float *up, const float *dout, size_t count) {
    k_swiglu_backward(ctx_of(be), dgate, dup, gate, up, dout, count);
}

static void cu_gelu_forward(const Backend *be, void *out, const void *inp, size_t count) {
    k_gelu_forward(ctx_of(be), out, inp, count);
}

static void cu_gelu_backward(const Backend *be, void *dinp, const void *inp, const float *dout,
                             size_t count) {
    k_gelu_backward(ctx_of(be), dinp, inp, dout, count);
}

static void cu_crossentropy_forward_backward(const Backend *be, void *dlogits, float *losses,
                                             void *logits, const int *targets, float dloss, int N,
                                             int V, int Vp) {
    k_crossentropy(ctx_of(be), dlogits, losses, logits, targets, dloss, N, V, Vp, 1);
}

static void cu_crossentropy_forward(const Backend *be, void *logits, float *losses,
                                    const int *targets, int N, int V, int Vp) {
    k_crossentropy(ctx_of(be), logits, losses, logits, targets, 0.0f, N, V, Vp, 0);
}

/* The ops' scratch is the backend's own (c->partials, c->att), sized at open. */
static size_t cu_scratch_floats(const Backend *be, int N, int T, int C) { return 1; }

static void cu_add_inplace(const Backend *be, float *dst, const float *src, size_t count) {
    k_add_inplace(ctx_of(be), dst, src, count);
}

static void cu_to_operand(const Backend *be, void *dst, const float *src, size_t count) {
    k_to_operand(ctx_of(be), dst, src, count);
}

static void cu_sum(const Backend *be, double *out, const float *x, size_t n) {
    k_sum(ctx_of(be), out, x, n, 0);
}

static void cu_sumsq(const Backend *be, double *out, const float *x, size_t n) {
    k_sum(ctx_of(be), out, x, n, 1);
}

static void cu_adamw(const Backend *be, float *p, const float *g, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, int t) {
    /* the bias corrections as optim_adamw_update computes them: in double, then float */
    float bc1 = (float)(1.0 - pow(beta1, t)), bc2 = (float)(1.0 - pow(beta2, t));
    drop_kept(ctx_of(be), p, n * sizeof(float));
    k_adamw(ctx_of(be), p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
}

/* [Note: many tensors] in src/backend/backend.h */
static void cu_sumsq_many(const Backend *be, double *out, const float *const *x, const size_t *n,
                          int count) {
    k_sumsq_many(ctx_of(be), out, x, n, count);
}

static void cu_adamw_many(const Backend *be, const PPOptTensor *t, int count, float lr, float beta1,
                          float beta2, float eps, float grad_scale, int step) {
    CudaCtx *c = ctx_of(be);
    /* the bias corrections as cu_adamw's */
    float bc1 = (float)(1.0 - pow(beta1, step)), bc2 = (float)(1.0 - pow(beta2, step));
    /* [Note: kept weight copy]: a tensor only partly inside the kept weights drops the copy
     * (so does any tensor inside them under PPTRAIN_ADAMW_COPY=0); else each tensor inside
     * them updates its copy too */
    for (int i = 0; i < count && c->kept; i++)
        if (!c->adamw_copy || !inside(t[i].p, t[i].n, c->kept, c->kept_n))
            drop_kept(c, t[i].p, t[i].n * sizeof(float));
    KeptCopy kc = {c->kept, c->kept_n, (__nv_bfloat16 *)c->castW.p};
    k_adamw_many(c, t, c->kept ? &kc : NULL, count, lr, beta1, beta2, eps, grad_scale, bc1, bc2);
}

static void cu_sgd(const Backend *be, float *p, const float *g, float *buf, size_t n, float lr,
                   float momentum, float weight_decay, float grad_scale, int t) {
    if (momentum != 0.0f && !buf)
        die_msg(ctx_of(be), __FILE__, __LINE__, "sgd_update with momentum and no buffer");
    drop_kept(ctx_of(be), p, n * sizeof(float));
    k_sgd(ctx_of(be), p, g, buf, n, lr, momentum, weight_decay, grad_scale, t == 1);
}

/* ---- open, close ------------------------------------------------------------------------ */

static void cu_close(const Backend *be) {
    CudaCtx *c = ctx_of(be);
    CK(c, cudaStreamSynchronize(c->stream));
    CK(c, cudaStreamSynchronize(c->side));
    Grow *g[N_GROW];
    workspaces(c, g);
    for (int i = 0; i < N_GROW; i++) CK(c, cudaFree(g[i]->p));
    /* leaks of the caller's */
    for (int i = 0; i < c->nallocs; i++) CK(c, cudaFree(c->allocs[i].p));
    cudnn_attn_close(c);
    LTCK(c, cublasLtDestroy(c->lt));
    CK(c, cudaEventDestroy(c->issued));
    CK(c, cudaEventDestroy(c->landed));
    CK(c, cudaStreamDestroy(c->side));
    CK(c, cudaStreamDestroy(c->stream));
    free(c->allocs);
    free(c->pins);
    free(c);
}

/* Dense matrix rate (FLOP/s) by device and precision, from the vendors' data sheets; 0
 * where unknown (no MFU is printed). */
static double peak_flops(const cudaDeviceProp *p, PPPrecision prec) {
    static const struct {
        const char *name;
        double bf16, tf32, fp32;
    } table[] = {
        {"H200", 989e12, 494e12, 67e12},     {"H100 PCIe", 756e12, 378e12, 51e12},
        {"H100", 989e12, 494e12, 67e12},     {"A100", 312e12, 156e12, 19.5e12},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(p->name, table[i].name))
            return prec == PP_PREC_BF16   ? table[i].bf16
                   : prec == PP_PREC_TF32 ? table[i].tf32
                                          : table[i].fp32;
    return 0.0;
}

static const char *prec_name(PPPrecision p, PPDType op, PPDType res) {
    if (p == PP_PREC_BF16)
        return op != PP_BF16 ? "bf16 (bf16 GEMM operands cast per call, fp32 activations, weights "
                               "and gradients)"
               : res == PP_BF16 ? "bf16 (bf16 GEMMs on bf16 operand activations, bf16 residual "
                                  "stream; fp32 weights and gradients)"
                                : "bf16 (bf16 GEMMs on bf16 operand activations; fp32 residual "
                                  "stream, weights and gradients)";
    return p == PP_PREC_TF32 ? "tf32 (tf32 GEMMs, fp32 storage)" : "fp32";
}

/* The Backend table: the same entries as backend_cpu.c's, in its order. */
static void fill_table(Backend *be, CudaCtx *c) {
    be->name = "cuda";
    be->ctx = c;
    be->alloc = cu_alloc;
    be->dealloc = cu_dealloc;
    be->to_device = cu_to_device;
    be->to_host = cu_to_host;
    be->zero = cu_zero;
    be->copy = cu_copy;
    be->wait = cu_wait;
    be->sum = cu_sum;
    be->sumsq = cu_sumsq;
    be->adamw_update = cu_adamw;
    be->sgd_update = cu_sgd;
    be->sumsq_many = cu_sumsq_many;
    be->adamw_many = cu_adamw_many;
    be->encoder_forward = cu_encoder_forward;
    be->encoder_backward = cu_encoder_backward;
    be->layernorm_forward = cu_layernorm_forward;
    be->layernorm_backward = cu_layernorm_backward;
    be->rmsnorm_forward = cu_rmsnorm_forward;
    be->rmsnorm_backward = cu_rmsnorm_backward;
    be->matmul_forward = cu_matmul_forward;
    be->matmul_backward = cu_matmul_backward;
    be->matmul_residual_forward = cu_matmul_residual_forward;
    be->matmul_operand_forward = cu_matmul_operand_forward;
    be->matmul_operand_backward = cu_matmul_operand_backward;
    be->rope_forward = cu_rope_forward;
    be->rope_backward = cu_rope_backward;
    be->attention_forward = cu_attention_forward;
    be->attention_backward = cu_attention_backward;
    be->attention_saved_floats = cu_attention_saved_floats;
    be->kv_append = cu_kv_append;
    be->attention_decode = cu_attention_decode;
    be->gelu_forward = cu_gelu_forward;
    be->gelu_backward = cu_gelu_backward;
    be->matmul_gelu_forward = cu_matmul_gelu_forward;
    be->matmul_gelu_backward = cu_matmul_gelu_backward;
    be->swiglu_forward = cu_swiglu_forward;
    be->swiglu_backward = cu_swiglu_backward;
    be->head_logits = cu_head_logits;
    be->crossentropy_forward_backward = cu_crossentropy_forward_backward;
    be->crossentropy_forward = cu_crossentropy_forward;
    be->scratch_floats = cu_scratch_floats;
    be->add_inplace = cu_add_inplace;
    be->to_operand = cu_to_operand;
    be->operand = c->op;
    be->logits = c->logits_bf16 ? PP_BF16 : PP_F32;
    be->residual = c->res;
    /* selective recompute reruns matmul_gelu_forward ([Note: fused GELU] in backend.h) */
    be->gelu_in_gemm = c->op == PP_BF16 && c->fuse_gelu && c->gelu_epi;
    be->device_memory = 1;
    be->weight_hold = cu_weight_hold;
    be->host_alloc = cu_host_alloc;
    be->host_free = cu_host_free;
    be->snapshot = cu_snapshot;
    be->snapshot_wait = cu_snapshot_wait;
    be->memory = cu_memory;
    be->close = cu_close;
}

#define OPEN_CK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(err, errlen, "%s: %s (%s)", #call, cudaGetErrorString(e_),                    \
                     cudaGetErrorName(e_));                                                        \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* [Note: attention path]: flash, cuDNN's (*att_cudnn, with *att_flash: it saves what flash
 * saves; 1 when PPTRAIN_ATTENTION=cudnn asks for it, 2 when it is the default and the open
 * runs flash if cuDNN does not load) or materialised, from PPTRAIN_ATTENTION and the run's
 * head size (0: unknown, the op tests: flash), for the whole run. bf16_operands: the operand
 * activations are bf16 (cuDNN's path needs them). 0, or -1 with the reason in err. */
static int attention_choice(PPPrecision precision, int bf16_operands, int run_hs, int *att_flash,
                            int *att_cudnn, char *err, size_t errlen) {
    const char *att_env = getenv("PPTRAIN_ATTENTION");
    *att_cudnn = 0;
    if (att_env && !strcmp(att_env, "cudnn")) {
        if (!bf16_operands) {
            snprintf(err, errlen,
                     "PPTRAIN_ATTENTION=cudnn runs on bf16 operands: precision bf16 with "
                     "PPTRAIN_BF16_OPERANDS unset, not precision %s%s; unset PPTRAIN_ATTENTION",
                     precision == PP_PREC_BF16   ? "bf16"
                     : precision == PP_PREC_TF32 ? "tf32"
                                                 : "fp32",
                     precision == PP_PREC_BF16 ? " with PPTRAIN_BF16_OPERANDS=fp32" : "");
            return -1;
        }
        if (run_hs && head_size_refused(run_hs, 1, err, errlen)) return -1;
        *att_flash = *att_cudnn = 1;
    } else if (!att_env || !*att_env) {
        *att_flash = precision == PP_PREC_BF16 && (!run_hs || flash_head_pad(run_hs));
        /* cuDNN's where it takes the run's head size and loads (2: flash if it does not) */
        *att_cudnn = *att_flash && bf16_operands && run_hs && cudnn_head_ok(run_hs) ? 2 : 0;
    } else if (!strcmp(att_env, "flash")) {
        if (run_hs && head_size_refused(run_hs, 0, err, errlen)) return -1;
        *att_flash = 1;
    } else if (!strcmp(att_env, "materialized")) {
        *att_flash = 0;
    } else {
        snprintf(err, errlen,
                 "PPTRAIN_ATTENTION='%.40s': expected 'flash', 'materialized' or 'cudnn' (or "
                 "unset: cuDNN's where it loads, else flash, at bf16 when the head size "
                 "allows)",
                 att_env);
        return -1;
    }
    return 0;
}

/* The norms' backward ([Note: one-pass norm backward] in cuda/norm_kernels.cuh), from
 * PPTRAIN_LN_BWD: unset or one-pass, the one-pass kernel (rows a chunk from N); one-pass:R,
 * R rows a chunk (to tune it); two-pass, the two kernels of before (dinp, then the column
 * sums). *rows as CudaCtx.ln_rows; 0, or -1 with the reason in err. */
/* [Note: speed switches] (cuda/NOTES.md) An environment switch that picks among named code
 * paths: *idx = the index of its value in vals[0..n) (unset or empty: 0, the default);
 * another value fails the open naming the variable and the values. */
static int env_switch(const char *var, const char *const *vals, int n, int *idx, char *err,
                      size_t errlen) {
    const char *v = getenv(var);
    *idx = 0;
    if (!v || !*v) return 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, vals[i])) {
            *idx = i;
            return 0;
        }
    int k = snprintf(err, errlen, "%s='%.40s': expected", var, v);
    for (int i = 0; i < n && k > 0 && (size_t)k < errlen; i++)
        k += snprintf(err + k, errlen - k, "%s %s", i ? "," : "", vals[i]);
    if (k > 0 && (size_t)k < errlen) snprintf(err + k, errlen - k, " (unset: %s)", vals[0]);
    return -1;
}

static int ln_bwd_choice(int *rows, char *err, size_t errlen) {
    const char *v = getenv("PPTRAIN_LN_BWD");
    char *end = NULL;
    long r = 0;
    if (v && !strncmp(v, "one-pass:", 9)) r = strtol(v + 9, &end, 10);
    if (!v || !*v || !strcmp(v, "one-pass"))
        *rows = 0;
    else if (!strcmp(v, "two-pass"))
        *rows = -1;
    else if (end && end != v + 9 && !*end && r >= 1 && r <= 65536)
        *rows = (int)r;
    else {
        snprintf(err, errlen,
                 "PPTRAIN_LN_BWD='%.40s': expected 'one-pass', 'one-pass:R' (R rows a chunk, 1 to "
                 "65536) or 'two-pass' (or unset: one-pass)",
                 v);
        return -1;
    }
    return 0;
}

/* [Note: chunked head] in src/model/model.c: the head's logits in chunks of at most 2 GiB of
 * fp32 and 1/32 of the device's memory, in whole 128-row tiles, the N rows split evenly
 * (GPT-2's Vp on an 80 GB H100: 8192 rows, 2 chunks at B = 16, T = 1024, 4 at B = 32).
 * Measured there (cuda/NOTES.md, the third GPU session, GPT-2 124M, bf16): 1280-row
 * chunks cost 1.1-1.3 ms a step at B = 16 and 2048-row ones 1.0 ms more than 4096,
 * 8192 or all 16384 rows (equal); at B = 32, 7 chunks of 4736 rows 1.3-1.7 ms more
 * than 4 of 8192. The head's rows per chunk (0: no head). */
static size_t head_chunk_rows(const PPCudaSizes *sizes, size_t device_bytes) {
    size_t N = sizes->N, Vp = sizes->Vp;
    size_t cap = device_bytes / 32 < ((size_t)2 << 30) ? device_bytes / 32 : ((size_t)2 << 30);
    size_t rows = Vp ? cap / (Vp * sizeof(float)) / 128 * 128 : 0;
    rows = Vp && rows < 128 ? 128 : rows;
    if (rows && N > rows) { /* ceil(N / chunks) rows, rounded up to 128: still <= rows */
        size_t chunks = (N + rows - 1) / rows;
        rows = ((N + chunks - 1) / chunks + 127) / 128 * 128;
    }
    return rows;
}

/* [Note: CUDA workspace]: reserve for the run's sizes now, so that training allocates
 * nothing. The sizes are the model's (model_backend_sizes: the architecture's widest
 * matmul row and largest weight, this rank's parameters), so nothing here knows a
 * model's shapes: N rows, T positions, NH heads of HS, Vp padded vocabulary (the head's
 * rows), width columns, weight and params elements; rows: the head's logits rows per
 * chunk (head_chunk_rows, the layout's). */
static void reserve_workspace(CudaCtx *c, const PPCudaSizes *sizes, size_t rows) {
    size_t N = sizes->N, Vp = sizes->Vp, T = sizes->T, NH = sizes->NH, HS = sizes->HS;
    size_t width = sizes->width;
    size_t head = (rows < N ? rows : N) * Vp; /* a chunk's logits: their bf16 copy */
    grow(c, &c->lt_ws, LT_WORKSPACE);
    grow(c, &c->sums, k_sums_workspace()); /* k_sum's, and k_sumsq_many's 64 tensors */
    if (N && width) {
        /* the column sums of a bias gradient, at most width columns */
        grow(c, &c->partials, ((N + 255) / 256) * width * sizeof(float));
        if (c->ln_rows == 0) grow(c, &c->partials, k_norm_backward_workspace(width));
        grow(c, &c->enc, k_encoder_workspace((int)N));
        if (NH && T && !c->att_flash) grow(c, &c->att, NH * T * T * sizeof(float));
        if (NH && T && !c->att_flash && c->op == PP_BF16) { /* fp32 dqkv; qkv and dout */
            grow(c, &c->stage, N * 3 * NH * HS * sizeof(float));
            grow(c, &c->widen, N * 4 * NH * HS * sizeof(float));
        }
        /* D, [B,NH,T]; the packed bf16 q, k, v and dO ([Note: flash tiling]) */
        if (NH && T && c->att_cudnn) /* [Note: cuDNN attention]: the deterministic backward's
                                        dP (B·NH·T·T bf16, by the frontend's count: grown if
                                        cuDNN asks more) */
            grow(c, &c->cudnn_ws, N * NH * T * sizeof(__nv_bfloat16));
        /* the flash kernels' too where they run, or may take over from cuDNN's (a graph it
         * refuses under the default) */
        if (NH && T && c->att_flash && (!c->att_cudnn || c->att_cudnn_default)) {
            grow(c, &c->flashD, N / T * NH * T * sizeof(float));
            /* q, k and v: NH + 2 NKV heads, at most 3 NH (the sizes carry no NKV) */
            grow(c, &c->castA, flash_pack_bytes((int)(N / T), (int)T, 3 * (int)NH, (int)HS));
            grow(c, &c->castB, flash_pack_bytes((int)(N / T), (int)T, (int)NH, (int)HS));
        }
        /* bf16 operand activations need no cast: only the weights' */
        if (c->prec == PP_PREC_BF16) {
            size_t wb = sizes->weight;
            size_t acts = c->op == PP_F32 ? N * width : 0;
            if (acts) grow(c, &c->castA, (acts > head ? acts : head) * sizeof(__nv_bfloat16));
            grow(c, &c->castB, (acts > wb ? acts : wb) * sizeof(__nv_bfloat16));
            /* the rank's parameters, held over each action list ([Note: held weights]) */
            grow(c, &c->castW, sizes->params * sizeof(__nv_bfloat16));
            /* the unfused GELU's, qkv's or bf16 residual's fp32 GEMM result ([Note: GEMM
             * epilogues]); with the epilogues on, only grown if cuBLASLt has no algorithm
             * for them (at the first step: the answer is cached) */
            if (c->op == PP_BF16 &&
                (!c->fuse_gelu || !c->fuse_cast || (c->res == PP_BF16 && !c->fuse_residual)))
                grow(c, &c->wide, N * width * sizeof(float));
            /* a bias gradient from the dw GEMM ([Note: bias gradient epilogue]): at most
             * width columns */
            if (c->op == PP_BF16 && c->fuse_bgrad) grow(c, &c->bgrad, width * sizeof(float));
            /* the fc and qkv GEMMs' bias in bf16 when the held copy is not 16-byte aligned */
            if (c->op == PP_BF16) grow(c, &c->castBias, width * sizeof(__nv_bfloat16));
        }
    }
}

/* The choices that decide what the backend stores ([Note: backend layout] in
 * src/backend/backend_load.h): pp_cuda_open's and pp_cuda_layout's, one function so that
 * the plan and the run cannot differ. */
typedef struct {
    int bf16_operands, att_flash, att_cudnn, logits_fp32, residual_fp32;
} StoreChoice;

static int store_choice(PPPrecision precision, const PPCudaSizes *sizes, StoreChoice *k, char *err,
                        size_t errlen) {
    static const char *const lg[] = {"bf16", "fp32"};
    const char *ov = getenv("PPTRAIN_BF16_OPERANDS"); /* [Note: CUDA precision] */
    k->bf16_operands = precision == PP_PREC_BF16 && !(ov && !strcmp(ov, "fp32"));
    if (attention_choice(precision, k->bf16_operands, sizes->HS, &k->att_flash, &k->att_cudnn, err,
                         errlen) ||
        /* [Note: logits type] in backend.h: bf16 (the operand type) unless fp32 */
        env_switch("PPTRAIN_LOGITS", lg, 2, &k->logits_fp32, err, errlen) ||
        /* [Note: residual stream type] in backend.h: the operand type unless fp32 */
        env_switch("PPTRAIN_RESIDUAL", lg, 2, &k->residual_fp32, err, errlen))
        return -1;
    return 0;
}

static PPCudaLayout layout_of(const StoreChoice *k, const PPCudaSizes *sizes, size_t device_bytes) {
    PPCudaLayout l;
    l.operand = k->bf16_operands ? PP_BF16 : PP_F32;
    l.residual = k->bf16_operands && !k->residual_fp32 ? PP_BF16 : PP_F32;
    /* a bf16 D's rows must stay 16-byte aligned for cuBLASLt: Vp a multiple of 8 */
    l.logits = k->bf16_operands && !k->logits_fp32 && sizes->Vp % 8 == 0 ? PP_BF16 : PP_F32;
    l.att_lse = k->att_flash; /* flash's and cuDNN's log-sum-exp, [Note: attention path] */
    l.logits_chunk_rows = (int)head_chunk_rows(sizes, device_bytes);
    return l;
}

/* The switches of the other code paths ([Note: speed switches]), each value checked:
 * what pp_cuda_open reads and pp_cuda_layout checks (a value open refuses fails both). */
typedef struct {
    int flash_bwd, ln_rows, fuse_gelu_off, fuse_residual_off, fuse_bgrad_off;
    int ce_two_pass, gelu_epi_off, fuse_cast_off, adamw_copy_off, gemm_log_on, gemm_tune_on;
    const char *gemm_file; /* PPTRAIN_GEMM_ALGOS, or NULL ([Note: GEMM algorithm file]) */
} SpeedSwitches;

static int speed_switches(SpeedSwitches *w, char *err, size_t errlen) {
    const char *fb_env = getenv("PPTRAIN_FLASH_BWD"); /* [Note: attention path] */
    if ((w->flash_bwd = flash_bwd_mode(fb_env)) < 0) {
        snprintf(err, errlen,
                 "PPTRAIN_FLASH_BWD='%.40s': expected v2, v1 or v2's parts joined by '+' (prep, "
                 "dq, dkv); unset: v2",
                 fb_env);
        return -1;
    }
    if (ln_bwd_choice(&w->ln_rows, err, errlen)) return -1;
    { /* [Note: speed switches]: the other paths' switches, each value checked here */
        static const char *const fuse[] = {"1", "0"}, *const off_on[] = {"0", "1"},
                                 *const ce[] = {"shared", "two-pass"};
        if (env_switch("PPTRAIN_FUSE_GELU", fuse, 2, &w->fuse_gelu_off, err, errlen) ||
            env_switch("PPTRAIN_FUSE_RESIDUAL", fuse, 2, &w->fuse_residual_off, err, errlen) ||
            /* [Note: fused GELU] in backend.h: GELU in the fc GEMM's epilogue */
            env_switch("PPTRAIN_GELU_EPILOGUE", fuse, 2, &w->gelu_epi_off, err, errlen) ||
            env_switch("PPTRAIN_FUSE_BGRAD", fuse, 2, &w->fuse_bgrad_off, err, errlen) ||
            /* [Note: operand activations]: the qkv and d atty GEMMs write bf16 */
            env_switch("PPTRAIN_FUSE_CAST", fuse, 2, &w->fuse_cast_off, err, errlen) ||
            /* [Note: kept weight copy]: AdamW keeps the held weights' bf16 copy */
            env_switch("PPTRAIN_ADAMW_COPY", fuse, 2, &w->adamw_copy_off, err, errlen) ||
            /* a diagnostic: what cuBLASLt chose for each GEMM (gemm_log) */
            env_switch("PPTRAIN_GEMM_LOG", off_on, 2, &w->gemm_log_on, err, errlen) ||
            /* [Note: GEMM tuning]: each GEMM's algorithm by timing (off by default) */
            env_switch("PPTRAIN_GEMM_TUNE", off_on, 2, &w->gemm_tune_on, err, errlen) ||
            /* [Note: cross-entropy row in shared memory] in ce_kernels.cuh */
            env_switch("PPTRAIN_CE", ce, 2, &w->ce_two_pass, err, errlen))
            return -1;
    }
    /* [Note: GEMM algorithm file]: its every line checked here, so that the plan and the
     * open refuse the same files; a file that is not there yet only with the tuning on */
    const char *gf = getenv("PPTRAIN_GEMM_ALGOS");
    w->gemm_file = gf && *gf ? gf : NULL;
    if (w->gemm_file) {
        if (strlen(w->gemm_file) >= sizeof(((CudaCtx *)0)->gemm_file)) {
            snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: a path of over %zu characters",
                     sizeof(((CudaCtx *)0)->gemm_file) - 1);
            return -1;
        }
        int r = gemm_file_read(w->gemm_file, NULL, NULL, NULL, err, errlen);
        if (r < 0) return -1;
        if (r == 1 && !w->gemm_tune_on) {
            snprintf(err, errlen,
                     "PPTRAIN_GEMM_ALGOS='%.300s': no such file (PPTRAIN_GEMM_TUNE=1 writes it)",
                     w->gemm_file);
            return -1;
        }
    }
    return 0;
}

/* sm_8x runs sm_80 code; nothing here runs on 10.x and later. 1, or 0 with why. */
static int capability_ok(const cudaDeviceProp *prop, char *err, size_t errlen) {
    if (prop->major >= 8 && prop->major <= 9) return 1;
    snprintf(err, errlen,
             "%s has compute capability %d.%d; this build has machine code for 8.0 and 9.0 only",
             prop->name, prop->major, prop->minor);
    return 0;
}

/* What an open that failed after calloc had made (nothing allocated from its buffers). */
static void ctx_abandon(CudaCtx *c) {
    free(c->pins);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->issued) cudaEventDestroy(c->issued);
    if (c->landed) cudaEventDestroy(c->landed);
    if (c->side) cudaStreamDestroy(c->side);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" Backend *pp_cuda_open(int device, PPPrecision precision, const PPCudaSizes *sizes,
                                 int rank, char *err, size_t errlen) {
    cudaDeviceProp prop;
    CudaCtx *c = NULL;
    StoreChoice k;
    PPCudaLayout lay;
    SpeedSwitches w;
    const char *fb_env = getenv("PPTRAIN_FLASH_BWD"); /* [Note: attention path] */
    OPEN_CK(cudaSetDevice(device));
    OPEN_CK(cudaGetDeviceProperties(&prop, device));
    if (!capability_ok(&prop, err, errlen) || store_choice(precision, sizes, &k, err, errlen) ||
        speed_switches(&w, err, errlen))
        return NULL;
    lay = layout_of(&k, sizes, prop.totalGlobalMem);
    if (!(c = (CudaCtx *)calloc(1, sizeof(CudaCtx)))) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    c->device = device;
    c->rank = rank;
    c->prec = precision;
    c->sizes = *sizes;
    c->att_flash = k.att_flash;
    c->att_cudnn = k.att_cudnn != 0;
    c->att_cudnn_default = k.att_cudnn == 2;
    c->sm = prop.major * 10 + prop.minor;
    c->flash_bwd = w.flash_bwd;
    c->ln_rows = w.ln_rows;
    {
        c->op = lay.operand; /* layout_of: what pp_cuda_layout tells the planner */
        c->res = lay.residual;
        /* [Note: GEMM epilogues]: "0" runs each fused op's unfused path */
        c->fuse_gelu = !w.fuse_gelu_off;
        c->gelu_epi = !w.gelu_epi_off;
        c->fuse_residual = !w.fuse_residual_off;
        c->fuse_bgrad = !w.fuse_bgrad_off; /* [Note: bias gradient epilogue] */
        c->fuse_cast = !w.fuse_cast_off;
        c->adamw_copy = !w.adamw_copy_off;
        c->gemm_log = w.gemm_log_on;
        c->gemm_tune = w.gemm_tune_on;
        if (w.gemm_file) { /* [Note: GEMM algorithm file]: this device's lines */
            snprintf(c->gemm_file, sizeof c->gemm_file, "%s", w.gemm_file);
            gemm_file_tag(c->gemm_tag, sizeof c->gemm_tag, c->sm, prop.name, cublasLtGetVersion());
        }
    }
    c->smem_optin = prop.sharedMemPerBlockOptin;
    c->ce_two_pass = w.ce_two_pass;
    c->logits_bf16 = lay.logits == PP_BF16;
    OPEN_CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    OPEN_CK(cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
    OPEN_CK(cudaEventCreateWithFlags(&c->issued, cudaEventDisableTiming));
    OPEN_CK(cudaEventCreateWithFlags(&c->landed, cudaEventDisableTiming));
    {
        cublasStatus_t s = cublasLtCreate(&c->lt);
        if (s != CUBLAS_STATUS_SUCCESS) {
            c->lt = NULL;
            snprintf(err, errlen, "cublasLtCreate: %s", cublasLtGetStatusString(s));
            goto fail;
        }
    }
    if (k.att_cudnn && cudnn_attn_open(c, err, errlen)) {
        if (k.att_cudnn == 1) goto fail; /* asked for by PPTRAIN_ATTENTION=cudnn */
        c->att_cudnn = 0;              /* the default: flash, and the description says so */
        err[0] = 0;
    }
    if (c->gemm_file[0] && /* [Note: GEMM algorithm file]: this device's lines */
        gemm_file_read(c->gemm_file, c->gemm_tag, &c->pins, &c->npins, err, errlen) < 0)
        goto fail;
    {
        reserve_workspace(c, sizes, (size_t)lay.logits_chunk_rows);
        Backend *be = &c->be;
        fill_table(be, c);
        be->logits_chunk_rows = lay.logits_chunk_rows;
        be->peak_flops = peak_flops(&prop, precision);
        char lnd[64] = ""; /* the norms' backward, when not the default */
        if (w.ln_rows)
            snprintf(lnd, sizeof lnd,
                     w.ln_rows < 0 ? ", norm backward two-pass"
                                   : ", norm backward one-pass, %d rows a chunk",
                     w.ln_rows);
        char gf[256] = ""; /* [Note: GEMM algorithm file] */
        if (c->gemm_file[0])
            snprintf(gf, sizeof gf, ", PPTRAIN_GEMM_ALGOS=%.120s (%d GEMMs for %.60s)",
                     c->gemm_file, c->npins, c->gemm_tag);
        char att[160]; /* [Note: attention path] */
        size_t cv = cudnn_attn_version(c);
        if (c->att_cudnn)
            snprintf(att, sizeof att,
                     "cudnn (cuDNN %zu.%zu.%zu fused flash, deterministic backward)", cv / 10000,
                     cv / 100 % 100, cv % 100);
        else if (k.att_flash)
            snprintf(att, sizeof att, "flash (bf16 mma.sync, backward %.40s%s)",
                     fb_env && *fb_env ? fb_env : "v2",
                     k.att_cudnn == 2 ? "; cuDNN's not loaded: PPTRAIN_ATTENTION=cudnn says why"
                                      : "");
        else
            snprintf(att, sizeof att, "materialized (cuBLASLt)");
        snprintf(c->desc, sizeof c->desc,
                 "cuda:%d %.100s (sm_%d%d, %d SMs, %.1f GB), %s, attention "
                 "%s%s%s%s%s%s%s%s%s%s%s%s%s%s",
                 device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                 prop.totalGlobalMem / 1e9, prec_name(precision, c->op, c->res), att,
                 c->fuse_gelu ? "" : ", PPTRAIN_FUSE_GELU=0",
                 c->gelu_epi ? "" : ", PPTRAIN_GELU_EPILOGUE=0",
                 c->fuse_residual ? "" : ", PPTRAIN_FUSE_RESIDUAL=0",
                 c->fuse_bgrad ? "" : ", PPTRAIN_FUSE_BGRAD=0",
                 c->fuse_cast ? "" : ", PPTRAIN_FUSE_CAST=0",
                 c->adamw_copy ? "" : ", PPTRAIN_ADAMW_COPY=0",
                 c->gemm_log ? ", PPTRAIN_GEMM_LOG=1" : "",
                 c->gemm_tune ? ", PPTRAIN_GEMM_TUNE=1 (GEMM algorithms by timing)" : "", gf,
                 c->ce_two_pass ? ", PPTRAIN_CE=two-pass" : "",
                 !k.bf16_operands || c->logits_bf16 ? ""
                 : k.logits_fp32                    ? ", PPTRAIN_LOGITS=fp32"
                                                    : ", fp32 logits (Vp not a multiple of 8)",
                 k.bf16_operands && k.residual_fp32 ? ", PPTRAIN_RESIDUAL=fp32" : "", lnd);
        be->description = c->desc;
        return be;
    }
fail:
    if (c) ctx_abandon(c);
    return NULL;
}

extern "C" int pp_cuda_layout(int device, PPPrecision precision, const PPCudaSizes *sizes,
                              PPCudaLayout *out, char *err, size_t errlen) {
    StoreChoice k;
    SpeedSwitches w;
    size_t bytes = (size_t)80 << 30; /* device -1: an 80 GB card's head chunks */
    if (device >= 0) { /* what open refuses before it stores anything, refused here too */
        cudaDeviceProp prop;
        cudaError_t e = cudaGetDeviceProperties(&prop, device);
        if (e != cudaSuccess) {
            snprintf(err, errlen, "GPU %d: %s", device, cudaGetErrorString(e));
            return -1;
        }
        if (!capability_ok(&prop, err, errlen)) return -1;
        bytes = prop.totalGlobalMem;
    }
    if (store_choice(precision, sizes, &k, err, errlen) || speed_switches(&w, err, errlen))
        return -1;
    *out = layout_of(&k, sizes, bytes);
    return 0;
}

extern "C" int pp_cuda_device_count(char *err, size_t errlen) {
    /* the static CUDA runtime opens the driver itself; opening it here first names the
     * real cause ("no driver") instead of the runtime's "driver version is insufficient" */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        snprintf(err, errlen, "no NVIDIA driver: libcuda.so.1 cannot be loaded (%s)", dlerror());
        return 0;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(err, errlen, "cudaGetDeviceCount: %s (%s)%s%s%s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no devices",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0",
                 vis ? "; CUDA_VISIBLE_DEVICES is '" : "", vis ? vis : "", vis ? "'" : "");
        return 0;
    }
    return n;
}

extern "C" int pp_cuda_abi(size_t backend_struct_size) {
    return backend_struct_size == sizeof(Backend) ? PP_CUDA_ABI : -1;
}

#define STR2(x) #x
#define STR(x) STR2(x)
extern "C" const char *pp_cuda_built_with(void) {
    return "CUDA " STR(CUDART_VERSION)
           ", cuBLASLt " STR(CUBLAS_VER_MAJOR) "." STR(CUBLAS_VER_MINOR) "." STR(CUBLAS_VER_PATCH)
           ", NCCL " STR(NCCL_MAJOR) "." STR(NCCL_MINOR) "." STR(NCCL_PATCH);
}
