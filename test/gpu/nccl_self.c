/* nccl_self.c — the NCCL transport (cuda/comm_nccl.cu) on one GPU: a 1-rank
 * communicator over the 1-rank memory Comm, through the same code paths as between
 * ranks ([Note: NCCL transport]):
 *   nccl_self [--probe]
 *  1. messages to itself: isend/irecv on device buffers, completed by wait and by test
 *     loops, receive posted before and after its send, sizes 1 B .. 5 MB + 3, FIFO;
 *  2. grouped posting (comm_group_start/end): several messages in one NCCL group;
 *  3. a host-buffer message (carried by the socket/memory Comm) next to device ones;
 *  4. every collective on device memory against the memory transport's bits (1 rank:
 *     the identity with NaNs made canonical) and the host collectives;
 *  5. split: a group of the one rank (messages and a collective on it) and color -1;
 *  6. mismatches: a receive of another size, and of another tag, fail naming both;
 *  7. abort: a message whose transfer never completes (the comm stream held by the
 *     PPTRAIN_NCCL_TEST_STALL hook, [Note: stall hook]: NCCL refuses an unmatched
 *     receive from itself) ends at runtime.timeout_s with the timeout message, the
 *     communicator is aborted, later calls fail at once, and destroy returns.
 * Prints one line per check ("ok ..." / "FAIL ..."); exit 0 all passed, 1 a failure, 77
 * no GPU or no NCCL here ("skipped: ..."). Data every check can predict, outputs
 * poisoned before each run, wrong bytes counted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_load.h"
#include "comm/comm_nccl.h"
#include "comm/comm_nccl_load.h"
#include "config.h"

static const Backend *gpu;
static int failures;
static const double TIMEOUT_S = 3.0;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            printf("ok   ");                                                                       \
        } else {                                                                                   \
            failures++;                                                                            \
            printf("FAIL ");                                                                       \
        }                                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
    } while (0)

static uint8_t pat(int seq, size_t i) {
    return (uint8_t)(i * 131u + (unsigned)seq * 17u + (i >> 8) + 1u);
}

static void *dev_filled(size_t n, int seq) {
    uint8_t *h = pp_malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) h[i] = pat(seq, i);
    void *d = gpu->alloc(gpu, n ? n : 1);
    gpu->to_device(gpu, d, h, n);
    gpu->wait(gpu);
    free(h);
    return d;
}

static void *dev_poisoned(size_t n) {
    uint8_t *h = pp_malloc(n ? n : 1);
    memset(h, 0xA5, n);
    void *d = gpu->alloc(gpu, n ? n : 1);
    gpu->to_device(gpu, d, h, n);
    gpu->wait(gpu);
    free(h);
    return d;
}

/* Bytes of device buffer d that differ from pattern seq. */
static size_t wrong(const void *d, size_t n, int seq) {
    uint8_t *h = pp_malloc(n ? n : 1);
    size_t bad = 0;
    gpu->to_host(gpu, h, d, n);
    gpu->wait(gpu);
    for (size_t i = 0; i < n; i++) bad += h[i] != pat(seq, i);
    free(h);
    return bad;
}

/* The NCCL Comm of one rank over a fresh 1-rank memory Comm (*base, destroyed after). */
static Comm *nccl_one(Comm **base, char *err, size_t n) {
    Comm *c = NULL;
    *base = comm_local_create();
    (*base)->timeout_s = TIMEOUT_S;
    int rc = comm_nccl_create(*base, gpu, &c, err, n);
    if (rc) {
        comm_destroy(*base);
        *base = NULL;
        return NULL;
    }
    return c;
}

static void done_with(Comm *c, Comm *base) {
    double t0 = pp_now();
    comm_destroy(c);
    comm_destroy(base);
    double t = pp_now() - t0;
    if (t > 10) CHECK(0, "destroy took %.1f s", t);
}

static CommTag tag(int step, int mb) { return (CommTag){step, 1, mb, 1}; }

/* 1. messages to itself, through wait and through test. */
static void check_self(Comm *c) {
    static const size_t sizes[] = {1, 1000, 4096, (5u << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        for (int recv_first = 0; recv_first < 2; recv_first++) {
            void *src = dev_filled(n, (int)k), *dst = dev_poisoned(n);
            CommReq *s = NULL, *r = NULL;
            CommTag t = tag((int)k, recv_first);
            int rc = recv_first
                         ? comm_irecv(c, 0, &t, dst, n, &r) || comm_isend(c, 0, &t, src, n, &s)
                         : comm_isend(c, 0, &t, src, n, &s) || comm_irecv(c, 0, &t, dst, n, &r);
            rc = rc || comm_wait(c, r) || comm_wait(c, s);
            size_t bad = rc ? n : wrong(dst, n, (int)k);
            CHECK(rc == 0 && bad == 0,
                  "self message of %zu bytes (receive posted %s), wait: %zu wrong bytes%s%s", n,
                  recv_first ? "first" : "second", bad, rc ? "; " : "", rc ? comm_error(c) : "");
            gpu->dealloc(gpu, src);
            gpu->dealloc(gpu, dst);
        }
    }
    /* test(): bounded polling until both are done */
    size_t n = 1 << 20;
    void *src = dev_filled(n, 7), *dst = dev_poisoned(n);
    CommReq *s = NULL, *r = NULL;
    CommTag t = tag(9, 0);
    int rc = comm_isend(c, 0, &t, src, n, &s) || comm_irecv(c, 0, &t, dst, n, &r), ds = 0, dr = 0;
    int polls = 0;
    double t0 = pp_now();
    while (!rc && (!ds || !dr) && pp_now() - t0 < 20) {
        if (!ds) rc = comm_test(c, s, &ds);
        if (!rc && !dr) rc = comm_test(c, r, &dr);
        polls++;
    }
    size_t bad = rc || !ds || !dr ? n : wrong(dst, n, 7);
    CHECK(rc == 0 && ds && dr && bad == 0,
          "self message of %zu bytes through test(): %d polls, %zu wrong bytes%s%s", n, polls, bad,
          rc ? "; " : "", rc ? comm_error(c) : "");
    gpu->dealloc(gpu, src);
    gpu->dealloc(gpu, dst);
}

/* 2. grouped posting: three messages each way in one group, FIFO kept. */
static void check_group(Comm *c) {
    enum { K = 3 };
    size_t n = 300000;
    void *src[K], *dst[K];
    CommReq *s[K], *r[K];
    int rc = comm_group_start(c);
    for (int i = 0; i < K; i++) {
        CommTag t = tag(20, i);
        src[i] = dev_filled(n, 20 + i);
        dst[i] = dev_poisoned(n);
        rc = rc || comm_isend(c, 0, &t, src[i], n, &s[i]) || comm_irecv(c, 0, &t, dst[i], n, &r[i]);
    }
    rc = rc || comm_group_end(c);
    for (int i = 0; i < K; i++) rc = rc || comm_wait(c, r[i]) || comm_wait(c, s[i]);
    size_t bad = 0;
    for (int i = 0; i < K; i++) bad += rc ? n : wrong(dst[i], n, 20 + i);
    CHECK(rc == 0 && bad == 0,
          "grouped posting: %d sends and %d receives in one NCCL group: %zu wrong bytes%s%s", K, K,
          bad, rc ? "; " : "", rc ? comm_error(c) : "");
    for (int i = 0; i < K; i++) {
        gpu->dealloc(gpu, src[i]);
        gpu->dealloc(gpu, dst[i]);
    }
}

/* 3. a host message between device ones. */
static void check_host_message(Comm *c) {
    char hs[64] = "host bytes over the socket Comm", hr[64] = "";
    size_t n = 5000;
    void *src = dev_filled(n, 30), *dst = dev_poisoned(n);
    CommReq *q[4];
    CommTag t0 = tag(30, 0), t1 = tag(30, 1);
    int rc = comm_isend(c, 0, &t0, src, n, &q[0]) || comm_isend(c, 0, &t1, hs, sizeof hs, &q[1]) ||
             comm_irecv(c, 0, &t0, dst, n, &q[2]) || comm_irecv(c, 0, &t1, hr, sizeof hr, &q[3]);
    for (int i = 3; i >= 0 && !rc; i--) rc = comm_wait(c, q[i]);
    size_t bad = rc ? n : wrong(dst, n, 30);
    CHECK(rc == 0 && bad == 0 && !strcmp(hs, hr),
          "a host message between device messages: %zu wrong device bytes, host text '%s'%s%s", bad,
          hr, rc ? "; " : "", rc ? comm_error(c) : "");
    gpu->dealloc(gpu, src);
    gpu->dealloc(gpu, dst);
}

/* Floats with NaNs of odd payloads, infinities, signed zeros and ordinary values. */
static void fill_floats(float *h, size_t n, int seq) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(i * 2654435761u + (unsigned)seq * 40503u);
        float v;
        switch (i % 97) {
        /* a signalling-pattern NaN */
        case 0: u = 0x7f800001u + (u & 0xffff); memcpy(&v, &u, 4); break;
        case 1: u = 0xffc12345u; memcpy(&v, &u, 4); break;                 /* a negative NaN */
        case 2: v = INFINITY; break;
        case 3: v = -0.0f; break;
        default: v = ldexpf((float)(u % 2000001) / 1e6f - 1.0f, (int)(u % 40) - 20);
        }
        h[i] = v;
    }
}

/* 4. the collectives against the memory transport's bits (1 rank). */
static void check_collectives(Comm *c) {
    size_t n = 1000003; /* odd, one chunk */
    Comm *ref = comm_local_create();
    float *h = pp_malloc(n * sizeof(float)), *want = pp_malloc(n * sizeof(float));
    float *got = pp_malloc(n * sizeof(float));
    float *d = gpu->alloc(gpu, n * sizeof(float)), *d2 = gpu->alloc(gpu, n * sizeof(float));
    struct {
        const char *name;
        int op;
    } ops[] = {{"allreduce_sum_f32", 0},
               {"reduce_scatter_sum_f32", 1},
               {"all_gather_f32", 2},
               {"broadcast", 3}};
    for (int k = 0; k < 4; k++) {
        fill_floats(h, n, 40 + k);
        memcpy(want, h, n * sizeof(float));
        int rr = ops[k].op == 0 ? comm_allreduce_sum_f32(ref, want, n)
                 : ops[k].op == 1 ? comm_reduce_scatter_sum_f32(ref, h, want, n)
                 : ops[k].op == 2 ? comm_all_gather_f32(ref, h, want, n)
                                  : comm_broadcast(ref, 0, want, n * sizeof(float));
        gpu->to_device(gpu, d, h, n * sizeof(float));
        memset(got, 0xA5, n * sizeof(float));
        gpu->to_device(gpu, d2, got, n * sizeof(float)); /* poisoned output */
        int rc = ops[k].op == 0 ? comm_allreduce_sum_f32(c, d, n)
                 : ops[k].op == 1 ? comm_reduce_scatter_sum_f32(c, d, d2, n)
                 : ops[k].op == 2 ? comm_all_gather_f32(c, d, d2, n)
                                  : comm_broadcast(c, 0, d, n * sizeof(float));
        gpu->to_host(gpu, got, ops[k].op == 1 || ops[k].op == 2 ? d2 : d, n * sizeof(float));
        gpu->wait(gpu);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
        CHECK(rr == 0 && rc == 0 && bad == 0,
              "%s of %zu floats on device memory: %zu elements differ from the memory transport's "
              "bits%s%s",
              ops[k].name, n, bad, rc ? "; " : "", rc ? comm_error(c) : "");
    }
    /* host buffers and the host collectives: through the socket (here memory) Comm */
    double v[3] = {1.5, -2.25, 1e300};
    float hf[5] = {1, 2, NAN, 4, 5};
    int rc = comm_allreduce_sum_f64(c, v, 3) || comm_barrier(c) || comm_allreduce_sum_f32(c, hf, 5);
    CHECK(rc == 0 && v[0] == 1.5 && v[1] == -2.25 && v[2] == 1e300 && hf[1] == 2 && isnan(hf[2]),
          "allreduce_sum_f64, barrier and a host-buffer allreduce_sum_f32 over the socket Comm%s%s",
          rc ? ": " : "", rc ? comm_error(c) : "");
    gpu->dealloc(gpu, d);
    gpu->dealloc(gpu, d2);
    free(h);
    free(want);
    free(got);
    comm_destroy(ref);
}

/* 5. split. */
static void check_split(Comm *c) {
    Comm *g = NULL, *none = (Comm *)1;
    int rc = comm_split(c, 3, 0, &g);
    CHECK(rc == 0 && g && g->world == 1 && g->rank == 0 && g->device_memory &&
              !strcmp(g->ops->name, "nccl"),
          "split into a group of one: world %d, transport %s%s%s", g ? g->world : -1,
          g ? g->ops->name : "-", rc ? "; " : "", rc ? comm_error(c) : "");
    if (g) {
        size_t n = 65536;
        void *src = dev_filled(n, 50), *dst = dev_poisoned(n);
        float *f = gpu->alloc(gpu, 4 * sizeof(float));
        float hv[4] = {1, -2, 3.5f, 0}, back[4];
        gpu->to_device(gpu, f, hv, sizeof hv);
        CommReq *s, *r;
        CommTag t = tag(50, 0);
        rc = comm_isend(g, 0, &t, src, n, &s) || comm_irecv(g, 0, &t, dst, n, &r) ||
             comm_wait(g, r) || comm_wait(g, s) || comm_allreduce_sum_f32(g, f, 4);
        gpu->to_host(gpu, back, f, sizeof back);
        gpu->wait(gpu);
        size_t bad = rc ? n : wrong(dst, n, 50);
        CHECK(rc == 0 && bad == 0 && !memcmp(back, hv, sizeof hv),
              "a message and an allreduce on the group: %zu wrong bytes%s%s", bad, rc ? "; " : "",
              rc ? comm_error(g) : "");
        gpu->dealloc(gpu, src);
        gpu->dealloc(gpu, dst);
        gpu->dealloc(gpu, f);
    }
    rc = comm_split(c, -1, 0, &none);
    CHECK(rc == 0 && none == NULL, "split with color -1: no group%s%s", rc ? "; " : "",
          rc ? comm_error(c) : "");
    comm_destroy(g); /* before its parent, which the caller destroys */
}

/* 6. a receive that does not match the message: its own Comm (the failure aborts it). */
static void check_mismatch(int tags) {
    char err[PP_ERR_MAX];
    Comm *base, *c = nccl_one(&base, err, sizeof err);
    if (!c) {
        CHECK(0, "a second NCCL Comm: %s", err);
        return;
    }
    c->max_message_bytes = 1 << 20;
    void *src = dev_filled(100, 60), *dst = dev_poisoned(200);
    CommReq *s = NULL, *r = NULL;
    CommTag ts = tag(60, 1), tr = tag(60, tags ? 2 : 1);
    int rc = comm_isend(c, 0, &ts, src, 100, &s) ||
             comm_irecv(c, 0, &tr, dst, tags ? 100 : 200, &r);
    if (!rc) rc = comm_wait(c, r);
    const char *e = comm_error(c);
    if (tags)
        CHECK(rc && strstr(e, "does not match the receive posted for it") &&
                  strstr(e, "microbatch 1") && strstr(e, "microbatch 2"),
              "a receive of another tag fails naming both tags: %s", e);
    else
        CHECK(rc && strstr(e, "does not match the receive posted for it") &&
                  strstr(e, "100 bytes") && strstr(e, "200 bytes"),
              "a receive of another size fails naming both sizes: %s", e);
    if (s) comm_wait(c, s); /* fails: the Comm is aborted */
    gpu->dealloc(gpu, src);
    gpu->dealloc(gpu, dst);
    done_with(c, base);
}

/* 7. a transfer that cannot complete: the timeout, the abort, and nothing hangs. */
static void check_abort(void) {
    char err[PP_ERR_MAX];
    setenv("PPTRAIN_NCCL_TEST_STALL", "1", 1);
    Comm *base, *c = nccl_one(&base, err, sizeof err);
    unsetenv("PPTRAIN_NCCL_TEST_STALL");
    if (!c) {
        CHECK(0, "an NCCL Comm for the abort check: %s", err);
        return;
    }
    size_t n = 1 << 16;
    void *src = dev_filled(n, 70), *dst = dev_poisoned(n);
    CommReq *s = NULL, *r = NULL;
    CommTag t = tag(70, 3);
    int rc = comm_isend(c, 0, &t, src, n, &s), rr = rc ? rc : comm_irecv(c, 0, &t, dst, n, &r);
    char e[PP_ERR_MAX];
    snprintf(e, sizeof e, "%s", comm_error(c));
    CHECK(rc == 0 && rr == 0, "posting a stalled message to itself: isend %d, irecv %d%s%s", rc, rr,
          rc || rr ? ": " : "", rc || rr ? e : "");
    double t0 = pp_now();
    if (r) rr = comm_wait(c, r);
    double took = pp_now() - t0;
    snprintf(e, sizeof e, "%s", comm_error(c));
    CHECK(r && rr && strstr(e, "timed out waiting for rank 0 (step 70, stage 1, microbatch 3") &&
              strstr(e, "runtime.timeout_s") && took >= TIMEOUT_S * 0.9 && took < TIMEOUT_S + 15,
          "a receive whose transfer never completes fails after %.2f s (timeout_s %g, wait "
          "returned %d): %s",
          took, TIMEOUT_S, rr, e);
    t0 = pp_now();
    rc = comm_allreduce_sum_f32(c, dst, 1);
    took = pp_now() - t0;
    CHECK(rc && took < 1 && !strcmp(comm_error(c), e),
          "after the abort a collective fails at once (%.3f s) with the same message: %s", took,
          comm_error(c));
    t0 = pp_now();
    rc = s ? comm_wait(c, s) : PP_ERUNTIME;
    took = pp_now() - t0;
    CHECK(rc && took < 1, "after the abort the send's wait fails at once (%.3f s): %s", took,
          comm_error(c));
    t0 = pp_now();
    done_with(c, base);
    CHECK(pp_now() - t0 < 10, "destroy after the abort returns (%.2f s)", pp_now() - t0);
    /* after destroy: the transfer may have written dst */
    gpu->dealloc(gpu, src);
    gpu->dealloc(gpu, dst);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* NCCL's own reason for a failure ("Trying to recv to self without a matching send")
     * goes to stderr, which test/gpu/run.sh keeps with the output; NCCL reads this at its
     * first call, and a caller's setting wins */
    setenv("NCCL_DEBUG", "WARN", 0);
    int probe = argc > 1 && !strcmp(argv[1], "--probe");
    Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.device, sizeof cfg.device, "cuda");
    snprintf(cfg.precision, sizeof cfg.precision, "fp32");
    BackendSizes sz = {0};
    char note[256], why[PP_ERR_MAX], nwhy[PP_ERR_MAX / 2];
    if (backend_select(&cfg, 0, &sz, &gpu, note, sizeof note, why, sizeof why) != PP_OK) {
        printf("skipped: no GPU (%s)\n", why);
        return 77;
    }
    CommDevice dev;
    comm_nccl_device(gpu, &dev, nwhy, sizeof nwhy);
    if (!dev.nccl) {
        printf("skipped: NCCL cannot be used here (%s)\n", nwhy);
        backend_release(gpu);
        return 77;
    }
    printf("nccl_self: %s, GPU %s on %s\n", gpu->description, dev.bus, dev.host);
    if (probe) return backend_release(gpu), 0;
    Comm *base, *c = nccl_one(&base, why, sizeof why);
    CHECK(c != NULL, "a 1-rank NCCL Comm over the memory Comm%s%s", c ? "" : ": ", c ? "" : why);
    if (c) {
        CHECK(c->device_memory == 1 && c->world == 1 && !strcmp(c->ops->name, "nccl") &&
                  c->ops->peer_state,
              "its table: transport %s, device_memory %d", c->ops->name, c->device_memory);
        check_self(c);
        check_group(c);
        check_host_message(c);
        check_collectives(c);
        check_split(c);
        done_with(c, base);
    }
    check_mismatch(0);
    check_mismatch(1);
    check_abort(); /* last: a GPU whose NCCL kernel was aborted is left for the process's end */
    backend_release(gpu);
    printf("nccl_self: %s (%d failed)\n", failures ? "FAILED" : "all passed", failures);
    return failures ? 1 : 0;
}
