/* cudnn_attn.cc — the causal attention through cuDNN's fused flash attention
 * (PPTRAIN_ATTENTION=cudnn, [Note: cuDNN attention]). Host code only, built by the host
 * C++ compiler (no device code: the two casts it needs are kernels.cu's), with the
 * graphs described through NVIDIA's cuDNN frontend (header-only; scripts/cudnn-frontend
 * fetches it at build time) and libcudnn.so.9 opened at run time, so that
 * libpptrain_cuda.so links no cuDNN and loads where there is none. */
#include <dlfcn.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.cuh"

/* [Note: cuDNN attention] The third implementation of the contract's causal attention
 * ([Note: attention path] in backend_cuda.cu), for the speed issue (23): llm.c reaches
 * 501 K tokens/s on GPT-2 124M with it where its own attention gives 320 K (../shared/
 * GPU.md), and pptrain's flash kernels took ~12.5 ms of a 51 ms step. What it computes:
 *  - forward: out[B,T,NH HS] (bf16 operand) and the log-sum-exp of each row's scaled
 *    scores (cuDNN's "stats", natural log: what the flash kernels save, so
 *    attention_saved_floats is B·NH·T for both and gpu_ops' lse check applies);
 *  - backward: dq, dk and dv written by cuDNN straight into dqkv's layout (strided
 *    views of the packed rows, as q, k and v are read), with cuDNN's deterministic
 *    algorithm: the same bits every run, the product's promise. dk and dv of a kv
 *    head are its group's sums, as the contract asks ([Note: grouped-query attention]).
 * Operands: qkv, out and the backward's dout are bf16 operands as they are (the qkv GEMM
 * writes qkv in bf16, RoPE rotates it in place, attproj's backward GEMM writes dout in
 * bf16: [Note: operand activations] in src/backend/backend.h), read in place through
 * strided views: no cast (there were three a layer, qkv in the forward, qkv and dout in the
 * backward: 2.1 ms a step at GPT-2 124M, B 16, before). So the path runs only where operands are
 * bf16 (precision bf16, PPTRAIN_BF16_OPERANDS unset) and at head sizes that are multiples of 8 up
 * to 128 (cuDNN's rule for the backward on sm_80; sm_90 allows 256, one rule is simpler): both
 * checked at open where the run's head size is known, at the call otherwise (the op tests). cuDNN
 * refuses s_q = s_kv = 1: sequences of one position (out = v) run the flash kernels, whose
 * log-sum-exp is the same quantity. Graphs: one per shape and direction, built at its first call
 * (cuDNN's heuristics, then the engine's runtime compilation through NVRTC: a second or so; one
 * line on stderr gives its time and workspace) and kept (the oldest dropped past CUDNN_GRAPHS; a
 * run has one or two shapes). The forward is pinned to the frontend's composite SDPA node, the one
 * test/cuda.sh checks (with cuDNN >= 9.21 headers the frontend could otherwise pick its newer
 * unified node). Workspace: the deterministic backward on sm_90 keeps dP, B·NH·T·T bf16 (403 MB at
 * GPT-2's B 16, T 1024), reserved at open from the run's sizes (reserve_workspace: in the build
 * report's memory) and grown if cuDNN asks more. The frontend is built with dynamic loading: this
 * file opens libcudnn.so.9 (from the loader's path, or the file PPTRAIN_CUDNN_LIB names) at the
 * backend's open, which fails naming the variable and the library when it cannot. It is the default
 * where it loads ([Note: attention path] in backend_cuda.cu): there a graph cuDNN refuses at its
 * first call says cuDNN's reason once and hands the run to the flash kernels; under
 * PPTRAIN_ATTENTION=cudnn it ends the run with the reason and the way back
 * (PPTRAIN_ATTENTION=flash). Checked on the build machine without a GPU
 * by pp_cudnn_graph_check (test/cuda.sh, part 9): the same graphs, built for an H100's
 * properties, must validate and get engine configurations from cuDNN's heuristics; the numbers are
 * gpu_ops' (against the CPU op) on a GPU. */

#ifdef PP_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the frontend's dynamic loading reads it */
}
namespace fe = cudnn_frontend;

namespace {

enum { UQ = 1, UK, UV, UO, USTATS, UDO, UDQ, UDK, UDV };

struct Shape {
    int bwd, B, T, NH, NKV, HS;
    bool operator==(const Shape &o) const { return !memcmp(this, &o, sizeof o); }
};

struct Graph {
    Shape s;
    std::shared_ptr<fe::graph::Graph> g;
    int64_t workspace;
};

enum { CUDNN_GRAPHS = 32 };

struct Cudnn {
    cudnnHandle_t handle = nullptr;
    size_t version = 0;
    std::vector<Graph> graphs;
};

/* The graph of one direction at one shape ([Note: cuDNN attention]): q, k and v are
 * strided views of the packed rows [B,T,(NH + 2 NKV) HS] (head j of a part at channels
 * j·HS..), as are dq, dk and dv; out and dout are [B,T,NH HS]; the stats [B,NH,T]. */
std::shared_ptr<fe::graph::Graph> describe(const Shape &s, int sm) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_sm_version(sm)
        .set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    int64_t B = s.B, T = s.T, HS = s.HS, NH = s.NH, ld = (NH + 2 * s.NKV) * HS, C = NH * HS;
    using TA = fe::graph::Tensor_attributes;
    /* t as h heads of rows of `row` elements: [B,h,T,HS] */
    auto heads = [&](TA &t, const char *name, int uid, int64_t h, int64_t row) -> TA & {
        return t.set_name(name)
            .set_uid(uid)
            .set_dim({B, h, T, HS})
            .set_stride({T * row, HS, row, 1});
    };
    /* t as the log-sum-exp of each query row, fp32 [B,NH,T] */
    auto stats = [&](TA &t) -> TA & {
        return t.set_name("stats")
            .set_uid(USTATS)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({B, NH, T, 1})
            .set_stride({NH * T, T, 1, 1});
    };
    TA tq, tk, tv;
    auto q = g->tensor(heads(tq, "q", UQ, NH, ld));
    auto k = g->tensor(heads(tk, "k", UK, s.NKV, ld));
    auto v = g->tensor(heads(tv, "v", UV, s.NKV, ld));
    float scale = 1.0f / sqrtf((float)s.HS);
    if (!s.bwd) {
        auto o = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_implementation(fe::AttentionImplementation_t::COMPOSITE)
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(scale);
        auto [O, S] = g->sdpa(q, k, v, o);
        heads(O->set_output(true), "out", UO, NH, C);
        stats(S->set_output(true));
    } else {
        TA to, tdo, ts;
        auto O = g->tensor(heads(to, "out", UO, NH, C));
        auto dO = g->tensor(heads(tdo, "dout", UDO, NH, C));
        auto S = g->tensor(stats(ts));
        auto o = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(scale)
                     .set_deterministic_algorithm(true);
        auto [dQ, dK, dV] = g->sdpa_backward(q, k, v, O, dO, S, o);
        heads(dQ->set_output(true), "dq", UDQ, NH, ld);
        heads(dK->set_output(true), "dk", UDK, s.NKV, ld);
        heads(dV->set_output(true), "dv", UDV, s.NKV, ld);
    }
    return g;
}

/* "what: cuDNN's message" into err, 0 when e is good. */
int failed(fe::error_t e, const char *what, char *err, size_t n) {
    if (e.is_good()) return 0;
    snprintf(err, n, "%s: %s", what, e.get_message().c_str());
    return 1;
}

/* The build of a described graph on a handle: its operation graph, cuDNN's heuristics'
 * plans, the first that builds. 0, or 1 with the step and cuDNN's reason in err. */
int build(fe::graph::Graph &g, cudnnHandle_t h, char *err, size_t n) {
    return failed(g.validate(), "validate", err, n) ||
           failed(g.build_operation_graph(h), "build_operation_graph", err, n) ||
           failed(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", err,
                  n) ||
           failed(g.check_support(h), "check_support", err, n) ||
           failed(g.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans", err,
                  n);
}

Cudnn *cudnn_of(const CudaCtx *c) { return (Cudnn *)c->cudnn; }

/* libcudnn.so.9 (or PPTRAIN_CUDNN_LIB) into the frontend's handle: 0, or 1 with why. */
int load_library(char *err, size_t n) {
    if (fe::cudnn_dlhandle) return 0;
    const char *lib = getenv("PPTRAIN_CUDNN_LIB");
    const char *name = lib && *lib ? lib : "libcudnn.so.9";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, n,
                 "PPTRAIN_ATTENTION=cudnn: cannot load %s (%s); install cuDNN 9 (or point "
                 "LD_LIBRARY_PATH at it, e.g. a pip wheel's nvidia/cudnn/lib, or "
                 "PPTRAIN_CUDNN_LIB at the file), or unset PPTRAIN_ATTENTION",
                 name, dlerror());
        return 1;
    }
    fe::cudnn_dlhandle = h; /* kept open for the process: the frontend's symbols point in */
    return 0;
}

/* The graph of shape s, built at its first call (one line on stderr says so: its build
 * time and workspace), the oldest dropped beyond CUDNN_GRAPHS; dies with cuDNN's reason. */
/* The shape's graph, built at its first call; a refusal ends the run, or under the default
 * choice (c->att_cudnn_default) says so once and returns NULL: the flash kernels take
 * over for the rest of the run (they read the log-sum-exp cuDNN's forward saved). */
Graph *graph_for(CudaCtx *c, const Shape &s) {
    Cudnn *d = cudnn_of(c);
    for (auto &gr : d->graphs)
        if (gr.s == s) return &gr;
    char why[1024] = "", what[1400];
    try {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        auto g = describe(s, c->sm);
        int64_t ws = 0;
        if (!build(*g, d->handle, why, sizeof why) &&
            !failed(g->get_workspace_size(ws), "get_workspace_size", why, sizeof why)) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (d->graphs.size() >= CUDNN_GRAPHS) { /* none of them is running: the stream */
                CK(c, cudaStreamSynchronize(c->stream));
                d->graphs.erase(d->graphs.begin());
            }
            fprintf(stderr,
                    "[rank %d] cuDNN %zu attention %s graph for B=%d T=%d NH=%d NKV=%d HS=%d: "
                    "built in %.0f ms, workspace %.1f MB\n",
                    c->rank, d->version, s.bwd ? "backward" : "forward", s.B, s.T, s.NH, s.NKV,
                    s.HS, (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
                    ws / 1e6);
            d->graphs.push_back({s, g, ws});
            return &d->graphs.back();
        }
    } catch (const std::exception &x) { /* the frontend throws where it cannot go on */
        snprintf(why, sizeof why, "%s", x.what());
    }
    snprintf(what, sizeof what, "cuDNN %zu attention %s for B=%d T=%d NH=%d NKV=%d HS=%d: %s",
             d->version, s.bwd ? "backward" : "forward", s.B, s.T, s.NH, s.NKV, s.HS, why);
    if (c->att_cudnn_default) {
        fprintf(stderr,
                "[rank %d] %s: running pptrain's flash kernels instead for the rest of the run "
                "(PPTRAIN_ATTENTION=flash chooses them from the start)\n",
                c->rank, what);
        c->att_cudnn = 0;
        return nullptr;
    }
    snprintf(what + strlen(what), sizeof what - strlen(what),
             "; set PPTRAIN_ATTENTION=flash to run pptrain's flash kernels");
    pp_cuda_die(c, __FILE__, __LINE__, what, "error", "see above");
}

void run(CudaCtx *c, Graph &gr, std::unordered_map<int64_t, void *> &pack) {
    void *ws = gr.workspace ? grow(c, &c->cudnn_ws, (size_t)gr.workspace) : nullptr;
    std::string why;
    try {
        auto e = gr.g->execute(cudnn_of(c)->handle, pack, ws);
        if (e.is_good()) return;
        why = e.get_message();
    } catch (const std::exception &x) { why = x.what(); }
    char what[1200];
    snprintf(what, sizeof what,
             "cuDNN attention %s: execute: %s; set PPTRAIN_ATTENTION=flash to run pptrain's flash "
             "kernels",
             gr.s.bwd ? "backward" : "forward", why.c_str());
    pp_cuda_die(c, __FILE__, __LINE__, what, "error", "see above");
}

} // namespace

int cudnn_attn_open(CudaCtx *c, char *err, size_t n) {
    /* the frontend opens a CUDA runtime of its own (this library links cudart statically):
     * CUDA 13's, not a libcudart.so.12 that happens to be on the path */
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", 0);
    if (load_library(err, n)) return 1;
    auto version = reinterpret_cast<size_t (*)(void)>(dlsym(fe::cudnn_dlhandle, "cudnnGetVersion"));
    size_t v = version ? version() : 0;
    if (v < 90000 || (v >= 91000 && v < 91100)) { /* the frontend refuses SDPA on 9.10 */
        snprintf(err, n,
                 "PPTRAIN_ATTENTION=cudnn: the cuDNN loaded is version %zu; its fused attention "
                 "needs cuDNN 9 (9.0.0 or later, not 9.10); unset PPTRAIN_ATTENTION",
                 v);
        return 1;
    }
    Cudnn *d = new Cudnn;
    d->version = v;
    try {
        cudnnStatus_t s = fe::detail::create_handle(&d->handle);
        if (s == CUDNN_STATUS_SUCCESS) s = fe::detail::set_stream(d->handle, c->stream);
        if (s != CUDNN_STATUS_SUCCESS) {
            snprintf(err, n, "PPTRAIN_ATTENTION=cudnn: cudnnCreate: %s",
                     fe::detail::get_error_string(s));
            if (d->handle) fe::detail::destroy_handle(d->handle);
            delete d;
            return 1;
        }
    } catch (const std::exception &x) {
        snprintf(err, n, "PPTRAIN_ATTENTION=cudnn: %s", x.what());
        delete d;
        return 1;
    }
    c->cudnn = d;
    return 0;
}

void cudnn_attn_close(CudaCtx *c) {
    Cudnn *d = cudnn_of(c);
    if (!d) return;
    d->graphs.clear(); /* the plans before the handle they were built on */
    fe::detail::destroy_handle(d->handle);
    delete d;
    c->cudnn = NULL;
}

size_t cudnn_attn_version(const CudaCtx *c) { return c->cudnn ? cudnn_of(c)->version : 0; }

int k_cudnn_attention_forward(CudaCtx *c, void *out, float *lse, const void *qkv, int B, int T,
                              int NH, int NKV, int HS) {
    Graph *gr = graph_for(c, {0, B, T, NH, NKV, HS});
    if (!gr) return 1;
    auto *q = (__nv_bfloat16 *)const_cast<void *>(qkv);
    std::unordered_map<int64_t, void *> pack = {{UQ, q},
                                                {UK, q + (size_t)NH * HS},
                                                {UV, q + (size_t)(NH + NKV) * HS},
                                                {UO, out},
                                                {USTATS, lse}};
    run(c, *gr, pack);
    return 0;
}

int k_cudnn_attention_backward(CudaCtx *c, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, int B, int T, int NH, int NKV,
                               int HS) {
    Graph *gr = graph_for(c, {1, B, T, NH, NKV, HS});
    if (!gr) return 1;
    auto *q = (__nv_bfloat16 *)const_cast<void *>(qkv);
    auto *dO = const_cast<void *>(dout);
    auto *dq = (__nv_bfloat16 *)dqkv;
    std::unordered_map<int64_t, void *> pack = {{UQ, q},
                                                {UK, q + (size_t)NH * HS},
                                                {UV, q + (size_t)(NH + NKV) * HS},
                                                {UO, const_cast<void *>(out)},
                                                {UDO, dO},
                                                {USTATS, const_cast<float *>(lse)},
                                                {UDQ, dq},
                                                {UDK, dq + (size_t)NH * HS},
                                                {UDV, dq + (size_t)(NH + NKV) * HS}};
    run(c, *gr, pack);
    return 0;
}

/* An H100 SXM's properties as cuDNN reads them (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION)
 * for the check without a GPU below: the heuristics pick engines by them. */
static const char H100_PROPS[] =
    "{\"deviceName\":\"NVIDIA H100 80GB HBM3\",\"deviceVer\":900,\"driverVer\":13000,"
    "\"cudaDeviceId\":0,\"multiProcessorCount\":132,\"warpSize\":32,\"regsPerBlock\":65536,"
    "\"maxRegistersPerSM\":65536,\"maxSharedMemoryPerBlock\":49152,"
    "\"maxSharedMemoryPerBlockOptin\":232448,\"reservedSharedMemoryPerBlock\":1024,"
    "\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,"
    "\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],"
    "\"pciDeviceId\":9008,\"isTccDriver\":0,\"supportCoopLaunch\":1,"
    "\"totalGlobalMem\":85045460992,\"smClockRateKHz\":1980000,\"memClockRateKHz\":2619000,"
    "\"l2CacheSize\":52428800}";

/* [Note: cuDNN attention]'s check without a GPU: the graph of one direction and shape,
 * described as a run describes it, validated and given to cuDNN's heuristics for an
 * H100 (sm_90). 1: accepted (the heuristics offered engine configurations, and every
 * one was set aside only because this machine has no driver to compile it with);
 * 0: refused (cuDNN's reason in msg); -1: cannot be checked here (no libcudnn.so.9, or
 * a cuDNN before 9.11, which cannot read device properties). */
extern "C" int pp_cudnn_graph_check(int bwd, int B, int T, int NH, int NKV, int HS, char *msg,
                                    size_t n) {
    try {
        if (load_library(msg, n)) return -1;
        auto dp = std::make_shared<fe::DeviceProperties>();
        std::vector<uint8_t> js(H100_PROPS, H100_PROPS + sizeof H100_PROPS - 1);
        if (failed(dp->deserialize(js), "device properties", msg, n)) return -1;
        auto g = describe({bwd, B, T, NH, NKV, HS}, 90);
        g->set_device_properties(dp);
        if (failed(g->validate(), "validate", msg, n) ||
            failed(g->build_operation_graph(), "build_operation_graph", msg, n))
            return 0;
        auto e = g->create_execution_plans({fe::HeurMode_t::A});
        if (e.is_good()) { /* a cuDNN that can plan without a driver */
            snprintf(msg, n, "engine configurations planned");
            return 1;
        }
        /* the message lists each configuration offered ({"engineId":...}) followed by the
         * reasons it was set aside ("Warning: STATUS; Reason: ..."); one whose every reason
         * is a missing runtime prerequisite (no driver to compile or load it with) is an
         * engine that takes this graph */
        std::string m = e.get_message();
        const std::string cfg = "{\"engineId\"", warn = "Warning: ",
                          nodrv =
                              "Warning: CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING";
        size_t offered = 0, takes = 0;
        for (size_t at = m.find(cfg); at != std::string::npos;) {
            size_t next = m.find(cfg, at + 1), end = next == std::string::npos ? m.size() : next;
            bool other = false, any = false;
            for (size_t w = m.find(warn, at); w < end; w = m.find(warn, w + 1)) {
                any = true;
                other |= m.compare(w, nodrv.size(), nodrv) != 0;
            }
            offered++;
            takes += any && !other;
            at = next;
        }
        if (takes) {
            snprintf(msg, n,
                     "%zu of %zu engine configurations offered take it (unbuilt: no driver)", takes,
                     offered);
            return 1;
        }
        snprintf(msg, n, "create_execution_plans: %.900s", m.c_str());
        return 0;
    } catch (const std::exception &x) {
        snprintf(msg, n, "%s", x.what());
        return -1;
    }
}

#else /* built without the cuDNN frontend's headers (scripts/cudnn-frontend could not fetch them)  \
       */

int cudnn_attn_open(CudaCtx *c, char *err, size_t n) {
    snprintf(err, n,
             "PPTRAIN_ATTENTION=cudnn: this CUDA backend was built without the cuDNN attention "
             "(scripts/cudnn-frontend could not fetch the cuDNN frontend's headers from PyPI "
             "when it was built: run it, then make); unset PPTRAIN_ATTENTION");
    return 1;
}
void cudnn_attn_close(CudaCtx *c) {}
size_t cudnn_attn_version(const CudaCtx *c) { return 0; }
int k_cudnn_attention_forward(CudaCtx *c, void *out, float *lse, const void *qkv, int B, int T,
                              int NH, int NKV, int HS) {
    pp_cuda_die(c, __FILE__, __LINE__, "cuDNN attention", "error", "not built");
}
int k_cudnn_attention_backward(CudaCtx *c, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, int B, int T, int NH, int NKV,
                               int HS) {
    pp_cuda_die(c, __FILE__, __LINE__, "cuDNN attention", "error", "not built");
}
extern "C" int pp_cudnn_graph_check(int bwd, int B, int T, int NH, int NKV, int HS, char *msg,
                                    size_t n) {
    snprintf(msg, n, "built without the cuDNN frontend's headers");
    return -1;
}

#endif
