/* comm_nccl.cu — the NCCL transport behind comm.h: activations and gradients move
 * between device buffers with ncclSend/ncclRecv on a communication stream of its own,
 * the float collectives run on device memory, and the job's socket Comm carries what
 * NCCL cannot: the unique id, message headers, liveness, the host collectives. Built
 * into libpptrain_cuda.so; loaded through src/comm/comm_nccl.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h> /* _exit */
#include <time.h>

#include "cuda_internal.cuh"

#include <nccl.h>

#include "comm/comm_nccl.h"
#include "comm_nccl_sum.h"
#include "dist/dist.h" /* DIST_MIN_RATE */

/* [Note: NCCL transport]
 * One NCCL communicator per Comm (the job's; each group's from ncclCommSplit), all
 * non-blocking (config.blocking = 0): no NCCL call waits for a peer, so every wait is a
 * loop here that polls the CUDA event of the transfer, ncclCommGetAsyncError, and the
 * peers' liveness on the socket Comm underneath (CommOps.peer_state: lost, or not even
 * a heartbeat for timeout_s, [Note: heartbeat] in comm_socket_blame.c), against
 * runtime.timeout_s. On a lost or silent peer, a deadline passed or an NCCL error, the
 * communicator is aborted (ncclCommAbort, which also ends kernels stuck on the dead
 * peer) and the Comm fails with the socket transport's words ("lost connection to
 * rank N ...", "timed out waiting for rank N ..."); every later call fails with the
 * same message.
 * Streams: the transfers run on the Comm's own stream. At post time the comm stream
 * waits for an event recorded on the backend's compute stream (the data a send reads,
 * or the buffer a receive overwrites, is the compute stream's until then); a
 * completion event is recorded after the NCCL call. wait() polls it on the host (the
 * contract: wait returns once the request completed, and only a host loop can give up
 * on a dead peer — a stream waiting on an event of a dead transfer would hang the
 * next cudaStreamSynchronize), then makes the compute stream wait for it too.
 * Posting order: each isend/irecv is issued at once (or at the outermost group_end when
 * posted in a group, as one ncclGroupStart/End), on one stream, so a rank's transfers
 * run in its posting order. That cannot deadlock for a lowered schedule: the lowering
 * appends a SEND and its RECV to the two ranks' lists at the same moment ([Note: FIFO
 * send order] in sched.h), so every rank posts its transfers in the order of one global
 * sequence, and the earliest unfinished transfer of that sequence always has both ends
 * at the head of their streams. Messages to itself (1 rank) are held until both ends
 * are posted, then issued as one group: on one stream a send to itself would
 * otherwise wait for a receive queued behind it.
 * Tags and sizes: NCCL matches sends to receives by order only. So every device
 * message is announced by a 16-byte header message on the socket Comm with the same
 * tag (magic, byte count): the socket transport matches it FIFO per pair, as the NCCL
 * transfers are matched, and checks the tag; the receiver compares the byte count with
 * its receive. A mismatch therefore fails as on sockets ("does not match the receive
 * posted for it", naming both tags — on a tag mismatch the sizes it quotes are the
 * headers' 16 bytes). A receive waits for its header first, through the socket
 * transport's own wait, so a dead or silent sender fails it exactly as on sockets
 * (probes and blame included); the header costs one small TCP message per transfer.
 * Host memory: a message or collective on host buffers (the data-parallel ring, which
 * stages through the host, [Note: data parallel] in runtime_dp.c) goes over the socket
 * Comm unchanged. Both ends of a message must agree on where it lives.
 * Collectives on device memory: all_gather and broadcast are NCCL's. The float sums
 * must give the socket transport's bits (rank order for the all-reduce, the ring's
 * order for the reduce-scatter, NaNs canonical; the tied embedding's copies must stay
 * bitwise equal), which NCCL's own reductions do not promise: so each rank gathers
 * every rank's part (ncclAllGather for the all-reduce; grouped ncclSend/ncclRecv of the
 * blocks for the reduce-scatter), in chunks of NC_CHUNK floats, and adds them in that
 * order with a kernel (IEEE adds, no contraction: the CPU's bits). It moves W times the
 * data of a ring reduction; the tied pair (W = 2) is the one user on the hot path.
 * allreduce_sum_f64 (a few host doubles: loss, norm) and barrier go over the socket
 * Comm: its rank-order sum is the reference, and they are small.
 * Ownership: the job's NCCL Comm borrows the socket Comm it was made from (which must
 * outlive it: main.c destroys that, the runtime this one); groups own the socket group
 * split alongside. destroy finalizes a communicator with nothing pending and aborts
 * one with transfers outstanding or after a failure: it never waits on a peer. */

#define NC_MAGIC PP_NCCL_HDR_MAGIC
#define NC_CHUNK ((size_t)1 << 22) /* floats per round of a float sum: 16 MiB per rank */

enum { NC_SEND, NC_RECV };

/* ---- NCCL, loaded at run time -------------------------------------------------------
 * The object does not link libnccl: it loads on a machine without NCCL (the CPU suite,
 * or a GPU machine that only runs the socket transport); NCCL is opened on first use,
 * from $PPTRAIN_NCCL_LIB when set (a path, or a name the loader looks up), else
 * libnccl.so.2 (LD_LIBRARY_PATH, then this object's run path: /usr/local/cuda/lib64). */

#define NC_FNS(X)                                                                                  \
    X(GetUniqueId) X(CommInitRankConfig) X(CommGetAsyncError) X(CommAbort) X(CommFinalize)         \
    X(CommDestroy) X(CommSplit) X(Send) X(Recv) X(GroupStart) X(GroupEnd) X(AllGather)             \
    X(Broadcast) X(GetErrorString) X(GetLastError) X(GetVersion)

static struct {
#define NC_FIELD(f) decltype(&nccl##f) f;
    NC_FNS(NC_FIELD)
#undef NC_FIELD
    int state; /* 0 not tried, 1 loaded, -1 failed (why) */
    char why[256];
} nccl;

extern "C" int pp_nccl_available(char *why, size_t whylen) {
    if (nccl.state == 0) { /* ranks are processes: one thread loads it */
        const char *lib = getenv("PPTRAIN_NCCL_LIB");
        void *h = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        nccl.state = h ? 1 : -1;
        if (!h) snprintf(nccl.why, sizeof nccl.why, "%s", dlerror());
#define NC_SYM(f)                                                                                  \
    if (nccl.state == 1 && !(nccl.f = (decltype(nccl.f))dlsym(h, "nccl" #f))) {                    \
        nccl.state = -1;                                                                           \
        snprintf(nccl.why, sizeof nccl.why,                                                        \
                 "libnccl.so.2 lacks nccl" #f " (NCCL older than 2.18?)");                         \
    }
        NC_FNS(NC_SYM)
#undef NC_SYM
        int v = 0;
        if (nccl.state == 1 && (nccl.GetVersion(&v) != ncclSuccess || v < 21800)) {
            nccl.state = -1;
            snprintf(nccl.why, sizeof nccl.why,
                     "libnccl.so.2 is NCCL %d; the transport needs 2.18 or later", v);
        }
    }
    if (nccl.state < 0) snprintf(why, whylen, "%s", nccl.why);
    return nccl.state == 1;
}

extern "C" int pp_cuda_bus_id(const Backend *be, char *buf, size_t n) {
    char id[32];
    cudaError_t e = cudaDeviceGetPCIBusId(id, (int)sizeof id, ctx_of(be)->device);
    if (e != cudaSuccess) {
        snprintf(buf, n, "cudaDeviceGetPCIBusId: %s", cudaGetErrorString(e));
        return -1;
    }
    for (char *p = id; *p; p++) *p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
    snprintf(buf, n, "%s", id);
    return 0;
}

/* ---- the Comm ----------------------------------------------------------------------- */

struct NcReq {
    int type, peer;          /* peer: rank in the Comm */
    CommTag tag;
    void *buf;
    size_t bytes;
    int device;              /* 0: a host message, carried whole by sreq */
    CommReq *sreq;           /* the socket request: the header (device) or the message (host) */
    uint64_t hdr[2];         /* the header sent, or the one received: {NC_MAGIC, bytes} */
    int hdr_ok;              /* receive: its header arrived and matched */
    int issued;              /* its NCCL call is made and `done` recorded after it */
    cudaEvent_t ready, done;
    double posted, since;    /* since: when its silence starts counting (header arrival) */
    NcReq *next_live, *prev_live, *next_q;
};

struct NcComm {
    Comm base;               /* first: an NcComm * is a Comm * */
    Comm *sock;              /* the same ranks over sockets (or memory, one rank) */
    int own_sock;            /* a group's: destroyed with it; the job's is borrowed */
    PPNcclHost host;
    CudaCtx *cx;             /* the backend: its device and compute stream */
    ncclComm_t nc;
    cudaStream_t stream;     /* the transfers' */
    cudaEvent_t ev;          /* collectives: the compute stream's point, then the end */
    int *jranks;             /* [world] each member's rank in the job, for messages */
    NcReq *live;
    NcReq *grp, *grp_tail;   /* posted inside the open group, issued at its end */
    NcReq *self_s, *self_r;  /* messages to itself waiting for their other end (FIFO) */
    int stall;               /* test hook: PPTRAIN_NCCL_TEST_STALL=1 ([Note: stall hook]) */
    int broken;              /* failed: aborted, every call fails with `why` */
    char why[PP_ERR_MAX];
    float *scratch;          /* [world * NC_CHUNK] at most, the float sums' parts */
    size_t scratch_floats;
    unsigned ncoll;          /* collectives so far, for messages */
    char name[96];           /* " in the group of ranks {0, 3}" for a group, "" for the job */
};

static inline NcComm *nc_of(Comm *c) { return (NcComm *)c; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Between two looks at a transfer: 1 us at first (a transfer about to end), then 50 us. */
static void nap(long iter) {
    struct timespec t = {0, iter < 256 ? 1000 : 50000};
    nanosleep(&t, NULL);
}

static int nc_fail(NcComm *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int nc_fail(NcComm *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->base.err, sizeof s->base.err, fmt, ap);
    va_end(ap);
    return PP_ERUNTIME;
}

/* [Note: stall hook]
 * One GPU cannot show a transfer that never completes the way a dead peer does: NCCL
 * refuses a receive from itself without its send (ncclInvalidUsage, "Trying to recv to
 * self without a matching send", enqueue.cc since NCCL 2.13), and a send to itself
 * completes. So with PPTRAIN_NCCL_TEST_STALL=1 in the environment when a Comm is made
 * (test/gpu/nccl_self.c), each of its issues first puts on the comm stream a host
 * function that holds the stream until the Comm breaks or is destroyed (30 s at most:
 * never a hang): its transfers, paired as usual, stay pending, time out and are aborted
 * through the ordinary paths. The stream is let go, and drained, before ncclCommAbort,
 * which may wait for the device. One flag for the process: the hook serves one Comm. */
static int nc_stall_open;

static void CUDART_CB stall_fn(void *) { /* a host function: no CUDA calls */
    struct timespec t = {0, 1000000};
    for (int ms = 0; ms < 30000 && !__atomic_load_n(&nc_stall_open, __ATOMIC_ACQUIRE); ms++)
        nanosleep(&t, NULL);
}

/* Let a stalled comm stream go and wait (10 s at most) until its transfers are done. */
static void stall_open(NcComm *s) {
    if (!s->stall || !s->stream) return;
    __atomic_store_n(&nc_stall_open, 1, __ATOMIC_RELEASE);
    double end = now_s() + 10;
    for (long it = 0; cudaStreamQuery(s->stream) == cudaErrorNotReady && now_s() < end; it++)
        nap(it);
}

/* Abort the communicator (once) and fail from now on with base.err's message. */
static int nc_break(NcComm *s) {
    if (!s->broken) {
        s->broken = 1;
        snprintf(s->why, sizeof s->why, "%s", s->base.err);
        stall_open(s);
        if (s->nc) nccl.CommAbort(s->nc); /* ends its kernels; waits on no peer */
        s->nc = NULL;
    }
    return PP_ERUNTIME;
}

static int nc_broken(NcComm *s) {
    snprintf(s->base.err, sizeof s->base.err, "%s", s->why);
    return PP_ERUNTIME;
}

static void tag_text(NcComm *s, const CommTag *t, char *buf, size_t n) {
    s->host.tag_format(&s->base, t, buf, n);
}

/* Where a buffer lives: 1 device (or managed) memory, 0 host memory. */
static int on_device(const void *p) {
    cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unregistered host pointer may set it on old runtimes */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* What the socket Comm knows of member p: 0 alive, 1 lost, 2 silent (why says). */
static int peer_state(NcComm *s, int p, char *why, size_t n) {
    if (p == s->base.rank || !s->sock->ops->peer_state) return 0;
    return s->sock->ops->peer_state(s->sock, p, s->base.timeout_s, why, n);
}

/* A CUDA or NCCL failure of this Comm as text ("" when none). */
static void nc_async(NcComm *s, ncclComm_t nc, char *why, size_t n) {
    ncclResult_t ar = ncclSuccess;
    why[0] = '\0';
    if (nc && nccl.CommGetAsyncError(nc, &ar) == ncclSuccess && ar != ncclSuccess &&
        ar != ncclInProgress)
        snprintf(why, n, "NCCL: %s (%s)", nccl.GetErrorString(ar), nccl.GetLastError(nc));
}

/* [Note: NCCL transport] the one poll loop: until `ev` completed (or, with ev NULL,
 * communicator nc left ncclInProgress), `deadline` passed, or a watched member (peer, or
 * all when peer < 0) is lost or silent. once: one look, no waiting (test). Returns 0
 * done, 1 lost, 2 silent or past the deadline, 3 a CUDA/NCCL error, 4 still running
 * (once); *who = the member blamed, why = the reason. */
static int nc_poll(NcComm *s, cudaEvent_t ev, ncclComm_t nc, int peer, double deadline, int once,
                   int *who, char *why, size_t n) {
    double next_look = 0;
    *who = peer;
    why[0] = '\0';
    for (long it = 0;; it++) {
        if (ev) {
            cudaError_t e = cudaEventQuery(ev);
            if (e == cudaSuccess) { /* done, unless the communicator failed meanwhile: then */
                nc_async(s, nc, why, n); /* nothing enqueued on it can be trusted (NCCL's docs) */
                return why[0] ? 3 : 0;
            }
            if (e != cudaErrorNotReady) {
                snprintf(why, n, "CUDA: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
                return 3;
            }
        } else {
            ncclResult_t ar = ncclSuccess;
            if (nccl.CommGetAsyncError(nc, &ar) != ncclSuccess) ar = ncclInternalError;
            if (ar == ncclSuccess) return 0;
            if (ar != ncclInProgress) {
                snprintf(why, n, "NCCL: %s (%s)", nccl.GetErrorString(ar), nccl.GetLastError(nc));
                return 3;
            }
        }
        double t = now_s();
        if (once || t >= next_look) { /* the slower looks: 1000 a second at most */
            next_look = t + 1e-3;
            if (ev) {
                nc_async(s, nc, why, n);
                if (why[0]) return 3;
            }
            for (int p = peer < 0 ? 0 : peer; p < (peer < 0 ? s->base.world : peer + 1); p++) {
                int st = peer_state(s, p, why, n);
                if (st) {
                    *who = p;
                    return st;
                }
            }
            if (t >= deadline) return 2;
            if (once) return 4;
        }
        nap(it);
    }
}

/* How long creating a communicator (init, split) may take: timeout_s, but at least
 * NC_SETUP_S — NCCL's first init in a process loads CUDA modules and probes the
 * topology for seconds, which a small timeout_s (tests use 3-5 s) must not cut; a peer
 * that dies meanwhile still fails it at once (its connection). */
#define NC_SETUP_S 60.0

/* After an NCCL call on a non-blocking communicator: ncclInProgress means "enqueued once
 * ncclCommGetAsyncError says ncclSuccess", waited for at most `patience` s. PP_OK, or
 * the Comm fails (aborted). ncclSuccess is polled the same way (one look when it is
 * true): NCCL 2.28's ncclCommSplit returns it while its thread still works (the first
 * H100 run), and a poll of a settled communicator costs one atomic load. */
static int nc_settle_for(NcComm *s, ncclComm_t nc, ncclResult_t r, const char *call,
                         double patience) {
    char why[PP_ERR_MAX / 2];
    int who, st;
    if (r != ncclSuccess && r != ncclInProgress) {
        nc_fail(s, "%s failed%s: %s (%s)", call, s->name, nccl.GetErrorString(r),
                nccl.GetLastError(nc));
        return nc_break(s);
    }
    st = nc_poll(s, NULL, nc, -1, now_s() + patience, 0, &who, why, sizeof why);
    if (st == 0) return PP_OK;
    if (st == 1)
        nc_fail(s, "lost connection to rank %d in %s%s: %s — did it crash? see its log",
                s->jranks[who], call, s->name, why);
    else if (st == 2 && who >= 0 && why[0])
        nc_fail(s,
                "timed out in %s%s: rank %d sent nothing for %g s (runtime.timeout_s) and %s "
                "— see its log",
                call, s->name, s->jranks[who], s->base.timeout_s, why);
    else if (st == 2)
        nc_fail(s,
                "timed out in %s%s: it did not complete in %g s%s while every rank still sends "
                "heartbeats — see the other ranks' logs",
                call, s->name, patience,
                patience == s->base.timeout_s ? " (runtime.timeout_s)" : "");
    else
        nc_fail(s, "%s failed%s: %s", call, s->name, why);
    return nc_break(s);
}

static int nc_settle(NcComm *s, ncclComm_t nc, ncclResult_t r, const char *call) {
    return nc_settle_for(s, nc, r, call, s->base.timeout_s);
}

static double setup_patience(const NcComm *s) {
    return s->base.timeout_s > NC_SETUP_S ? s->base.timeout_s : NC_SETUP_S;
}

/* ---- point to point ----------------------------------------------------------------- */

static NcReq *req_new(NcComm *s, int type, int peer, const CommTag *tag, void *buf, size_t bytes,
                      int device) {
    NcReq *r = (NcReq *)calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "comm_nccl: out of host memory\n");
        fflush(stdout);
        _exit(1); /* [Note: CUDA checks]: no static destructors after an error */
    }
    r->type = type;
    r->peer = peer;
    r->tag = *tag;
    r->buf = buf;
    r->bytes = bytes;
    r->device = device;
    r->posted = r->since = now_s();
    r->next_live = s->live;
    if (s->live) s->live->prev_live = r;
    s->live = r;
    return r;
}

static void unqueue(NcReq **head, NcReq *r) {
    while (*head && *head != r) head = &(*head)->next_q;
    if (*head) *head = r->next_q;
}

/* Unlink r and free it. A socket request it still holds (only after a failure: its
 * header, or its host message) is the socket Comm's until that Comm ends, and the
 * socket transport reads and writes the caller's buffer in place (r->hdr): then r's
 * memory is left allocated, a hundred bytes per failed request, rather than freed under
 * that Comm's thread. */
static void req_free(NcComm *s, NcReq *r) {
    unqueue(&s->self_s, r); /* a message to itself whose other end never came */
    unqueue(&s->self_r, r);
    if (r->prev_live) r->prev_live->next_live = r->next_live;
    else s->live = r->next_live;
    if (r->next_live) r->next_live->prev_live = r->prev_live;
    r->next_live = r->prev_live = NULL;
    if (r->ready) cudaEventDestroy(r->ready);
    if (r->done) cudaEventDestroy(r->done);
    r->ready = r->done = NULL;
    if (!r->sreq) free(r);
}

/* Enqueue r's NCCL call on the comm stream (inside the caller's ncclGroup, if any). */
static ncclResult_t req_enqueue(NcComm *s, NcReq *r) {
    return r->type == NC_SEND ? nccl.Send(r->buf, r->bytes, ncclChar, r->peer, s->nc, s->stream)
                              : nccl.Recv(r->buf, r->bytes, ncclChar, r->peer, s->nc, s->stream);
}

/* Issue the n requests of list (linked by next_q) as one NCCL group and record their
 * completion events. */
static int issue(NcComm *s, NcReq *list) {
    cudaError_t ce;
    if (s->stall && (ce = cudaLaunchHostFunc(s->stream, stall_fn, NULL)) != cudaSuccess) {
        nc_fail(s, "cudaLaunchHostFunc (PPTRAIN_NCCL_TEST_STALL)%s: %s", s->name,
                cudaGetErrorString(ce));
        return nc_break(s);
    }
    ncclResult_t r = nccl.GroupStart();
    for (NcReq *q = list; q && r == ncclSuccess; q = q->next_q) r = req_enqueue(s, q);
    ncclResult_t e = nccl.GroupEnd();
    if (r == ncclSuccess) r = e;
    if (nc_settle(s, s->nc, r, "ncclSend/ncclRecv") != PP_OK) return PP_ERUNTIME;
    for (NcReq *q = list; q; q = q->next_q) {
        ce = cudaEventRecord(q->done, s->stream);
        if (ce != cudaSuccess) {
            nc_fail(s, "cudaEventRecord after an NCCL transfer%s: %s", s->name,
                    cudaGetErrorString(ce));
            return nc_break(s);
        }
        q->issued = 1;
    }
    return PP_OK;
}

static void queue_push(NcReq **head, NcReq **tail, NcReq *r) {
    r->next_q = NULL;
    if (*tail) (*tail)->next_q = r;
    else *head = r;
    if (tail) *tail = r;
}

/* A device message posted outside a group: issue it now — or, to itself, once its other
 * end is posted too (both ends as one group). */
static int post_device(NcComm *s, NcReq *r) {
    if (s->base.group_depth > 0) {
        queue_push(&s->grp, &s->grp_tail, r);
        return PP_OK;
    }
    if (r->peer != s->base.rank) {
        r->next_q = NULL;
        return issue(s, r);
    }
    NcReq **mine = r->type == NC_SEND ? &s->self_s : &s->self_r;
    NcReq **other = r->type == NC_SEND ? &s->self_r : &s->self_s;
    if (!*other) { /* FIFO: append */
        NcReq **pp = mine;
        while (*pp) pp = &(*pp)->next_q;
        r->next_q = NULL;
        *pp = r;
        return PP_OK;
    }
    NcReq *o = *other;
    *other = o->next_q;
    if (o->bytes != r->bytes) /* never issued: the receive's header check names both sizes */
        return PP_OK;
    o->next_q = r;
    r->next_q = NULL;
    return issue(s, o);
}

static int nc_post(Comm *c, int type, int peer, const CommTag *tag, void *buf, size_t bytes,
                   CommReq **out) {
    NcComm *s = nc_of(c);
    const char *op = type == NC_SEND ? "isend" : "irecv";
    int device = on_device(buf), rc;
    cudaError_t ce;
    *out = NULL;
    if (s->broken) return nc_broken(s);
    if (peer < 0 || peer >= c->world)
        return nc_fail(s, "%s: no peer rank %d (this is rank %d of %d)", op, peer, c->rank,
                       c->world);
    NcReq *r = req_new(s, type, peer, tag, buf, bytes, device);
    if (!device) { /* a host message: the socket Comm carries it whole */
        rc = type == NC_SEND ? s->sock->ops->isend(s->sock, peer, tag, buf, bytes, &r->sreq)
                             : s->sock->ops->irecv(s->sock, peer, tag, buf, bytes, &r->sreq);
        if (rc) {
            snprintf(c->err, sizeof c->err, "%s", s->sock->err);
            req_free(s, r);
            return rc;
        }
        *out = (CommReq *)r;
        return PP_OK;
    }
    /* the header first ([Note: NCCL transport]): a sender that is already lost fails here */
    r->hdr[0] = NC_MAGIC;
    r->hdr[1] = bytes;
    rc = type == NC_SEND ? s->sock->ops->isend(s->sock, peer, tag, r->hdr, sizeof r->hdr, &r->sreq)
                         : s->sock->ops->irecv(s->sock, peer, tag, r->hdr, sizeof r->hdr, &r->sreq);
    if (rc) {
        snprintf(c->err, sizeof c->err, "%s", s->sock->err);
        req_free(s, r);
        return rc;
    }
    if ((ce = cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (ce = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming)) != cudaSuccess ||
        (ce = cudaEventRecord(r->ready, s->cx->stream)) != cudaSuccess ||
        (ce = cudaStreamWaitEvent(s->stream, r->ready, 0)) != cudaSuccess) {
        nc_fail(s, "%s to rank %d: CUDA: %s", op, s->jranks[peer], cudaGetErrorString(ce));
        return nc_break(s); /* r stays listed (its header is out): freed by destroy */
    }
    if (post_device(s, r) != PP_OK) return PP_ERUNTIME; /* aborted; r as above */
    *out = (CommReq *)r;
    return PP_OK;
}

static int nc_isend(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                    CommReq **out) {
    return nc_post(c, NC_SEND, peer, tag, (void *)buf, bytes, out);
}

static int nc_irecv(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes, CommReq **out) {
    return nc_post(c, NC_RECV, peer, tag, buf, bytes, out);
}

/* The message of r's failure (st from nc_poll, why its reason); aborts. */
static int req_failed(NcComm *s, NcReq *r, int st, const char *why) {
    char t[160];
    int jp = s->jranks[r->peer];
    tag_text(s, &r->tag, t, sizeof t);
    if (st == 1)
        nc_fail(s, "lost connection to rank %d while %s (%s): %s", jp,
                r->type == NC_SEND ? "sending" : "waiting to receive", t, why);
    else if (st == 2)
        nc_fail(s,
                "timed out %s rank %d (%s): %s for %g s (runtime.timeout_s) and %s "
                "— see rank %d's log",
                r->type == NC_SEND ? "sending to" : "waiting for", jp, t,
                r->type == NC_SEND ? "it accepted no data" : "nothing arrived", s->base.timeout_s,
                why[0] ? why : "its NCCL transfer did not complete (stopped, or its GPU stuck?)",
                jp);
    else
        nc_fail(s, "NCCL transfer %s rank %d (%s) failed: %s",
                r->type == NC_SEND ? "to" : "from", jp, t, why);
    return nc_break(s);
}

/* r's header, once it arrived: sizes must agree (the socket transport checked the tag). */
static int header_check(NcComm *s, NcReq *r) {
    char t[160];
    int jp = s->jranks[r->peer];
    if (r->hdr[0] == NC_MAGIC && r->hdr[1] == r->bytes) {
        r->hdr_ok = 1;
        r->since = now_s();
        return PP_OK;
    }
    tag_text(s, &r->tag, t, sizeof t);
    if (r->hdr[0] != NC_MAGIC)
        nc_fail(s,
                "message from rank %d does not match the receive posted for it: rank %d sent a "
                "host message (%s) where rank %d expected a device one — the ranks disagree on "
                "where the buffer lives",
                jp, jp, t, s->jranks[s->base.rank]);
    else
        nc_fail(s,
                "message from rank %d does not match the receive posted for it: rank %d sent (%s; "
                "%llu bytes) but rank %d expected (%s; %zu bytes) — the ranks disagree on the "
                "schedule",
                jp, jp, t, (unsigned long long)r->hdr[1], s->jranks[s->base.rank], t, r->bytes);
    return nc_break(s);
}

/* The deadline of r once its header is in: timeout_s plus the transfer time allowed. */
static double req_deadline(const NcComm *s, const NcReq *r) {
    return r->since + s->base.timeout_s + (double)r->bytes / DIST_MIN_RATE;
}

/* Complete r on the host; once: one look. 0 done (ok), 4 pending, else failed (err set). */
static int req_progress(NcComm *s, NcReq *r, int once) {
    char why[PP_ERR_MAX / 2];
    int who, st, d = 1, rc;
    if (s->broken) return nc_broken(s), 3;
    if (r->sreq && (r->type == NC_RECV || !r->device)) { /* the header, or a host message */
        rc = once ? s->sock->ops->test(s->sock, r->sreq, &d) : s->sock->ops->wait(s->sock, r->sreq);
        if (d) r->sreq = NULL;
        if (rc) { /* the socket transport's words; a transfer may be out: abort */
            snprintf(s->base.err, sizeof s->base.err, "%s", s->sock->err);
            return r->device ? (nc_break(s), 3) : 3;
        }
        if (!d) return 4;
        if (!r->device) return 0;
        if (header_check(s, r)) return 3;
    }
    if (!r->issued) { /* to itself, its other end never posted (or the Comm broke) */
        char t[160];
        tag_text(s, &r->tag, t, sizeof t);
        nc_fail(s,
                "timed out %s rank %d (%s): it is this rank, and the matching %s was never posted "
                "— in one thread it would wait forever",
                r->type == NC_SEND ? "sending to" : "waiting for", s->jranks[r->peer], t,
                r->type == NC_SEND ? "receive" : "send");
        return nc_break(s), 3;
    }
    st = nc_poll(s, r->done, s->nc, r->peer, req_deadline(s, r), once, &who, why, sizeof why);
    if (st == 4) return 4;
    if (st) return req_failed(s, r, st, why), 3;
    if (r->sreq) { /* a send's header: written by now, or its peer is gone */
        rc = once ? s->sock->ops->test(s->sock, r->sreq, &d) : s->sock->ops->wait(s->sock, r->sreq);
        if (d) r->sreq = NULL;
        if (rc) {
            snprintf(s->base.err, sizeof s->base.err, "%s", s->sock->err);
            return 3;
        }
        if (!d) return 4;
    }
    /* the compute stream's next work after it */
    cudaError_t e = cudaStreamWaitEvent(s->cx->stream, r->done, 0);
    if (e != cudaSuccess) {
        nc_fail(s, "cudaStreamWaitEvent after a transfer with rank %d%s: %s", s->jranks[r->peer],
                s->name, cudaGetErrorString(e));
        return nc_break(s), 3;
    }
    return 0;
}

static int nc_wait(Comm *c, CommReq *req) {
    NcComm *s = nc_of(c);
    NcReq *r = (NcReq *)req;
    int st = req_progress(s, r, 0);
    req_free(s, r);
    return st == 0 ? PP_OK : PP_ERUNTIME;
}

static int nc_test(Comm *c, CommReq *req, int *done) {
    NcComm *s = nc_of(c);
    NcReq *r = (NcReq *)req;
    int st = req_progress(s, r, 1);
    *done = st != 4;
    if (st == 4) return PP_OK;
    req_free(s, r);
    return st == 0 ? PP_OK : PP_ERUNTIME;
}

static int nc_group_start(Comm *c) { return PP_OK; } /* the wrapper counts; issued at the end */

static int nc_group_end(Comm *c) {
    NcComm *s = nc_of(c);
    NcReq *list = s->grp;
    if (c->group_depth > 0 || !list) return PP_OK;
    s->grp = s->grp_tail = NULL;
    if (s->broken) return nc_broken(s);
    return issue(s, list);
}

/* ---- collectives ---------------------------------------------------------------------- */

/* out[i] <- ((p[f] + p[f+1]) + ...) + p[f+W-1] (members mod W), the parts p[q] =
 * parts + q*len; NaN sums canonical (pp_nccl_sum_at, which the host test holds to the
 * socket transport's bits). */
__global__ static void sum_parts_kernel(float *out, const float *parts, size_t len, int W, int f) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = pp_nccl_sum_at(parts, len, W, f, i);
}

/* The status of a call the socket Comm made for this one, its message copied. */
static int sock_result(NcComm *s, int rc) {
    if (rc) snprintf(s->base.err, sizeof s->base.err, "%s", s->sock->err);
    return rc;
}

static const char *coll_names[] = {"allreduce", "reduce-scatter", "all-gather", "broadcast"};
enum { NC_ALLREDUCE, NC_REDUCE_SCATTER, NC_ALL_GATHER, NC_BROADCAST };

/* Start a device collective: the comm stream waits for the compute stream's work so far. */
static int coll_begin(NcComm *s) {
    cudaError_t e;
    if ((e = cudaEventRecord(s->ev, s->cx->stream)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(s->stream, s->ev, 0)))
        return nc_fail(s, "a collective%s: CUDA: %s", s->name, cudaGetErrorString(e)), nc_break(s);
    return PP_OK;
}

/* Wait on the host for the collective `op` (#seq) enqueued on the comm stream, watching
 * every member; then the compute stream's next work follows it. */
static int coll_end(NcComm *s, int op, unsigned seq, size_t bytes) {
    char why[PP_ERR_MAX / 2];
    int who, st;
    cudaError_t e = cudaEventRecord(s->ev, s->stream);
    if (e != cudaSuccess)
        return nc_fail(s, "%s%s: CUDA: %s", coll_names[op], s->name, cudaGetErrorString(e)),
               nc_break(s);
    st = nc_poll(s, s->ev, s->nc, -1, now_s() + s->base.timeout_s + (double)bytes / DIST_MIN_RATE,
                 0, &who, why, sizeof why);
    if (st == 0) {
        if ((e = cudaStreamWaitEvent(s->cx->stream, s->ev, 0)) == cudaSuccess) return PP_OK;
        return nc_fail(s, "%s%s: cudaStreamWaitEvent: %s", coll_names[op], s->name,
                       cudaGetErrorString(e)),
               nc_break(s);
    }
    if (st == 1)
        nc_fail(s, "lost connection to rank %d in %s #%u%s: %s — did it crash? see its log",
                s->jranks[who], coll_names[op], seq, s->name, why);
    else if (st == 2 && why[0])
        nc_fail(s,
                "timed out in %s #%u%s: rank %d sent nothing for %g s (runtime.timeout_s) and %s "
                "— see its log",
                coll_names[op], seq, s->name, s->jranks[who], s->base.timeout_s, why);
    else if (st == 2)
        nc_fail(s,
                "timed out in %s #%u%s: the NCCL collective did not complete in %g s "
                "(runtime.timeout_s) while every rank still sends heartbeats — is a rank "
                "stuck, or in a different collective? see their logs",
                coll_names[op], seq, s->name, s->base.timeout_s);
    else
        nc_fail(s, "%s #%u%s failed: %s", coll_names[op], seq, s->name, why);
    return nc_break(s);
}

static int scratch_for(NcComm *s, size_t floats) {
    if (floats <= s->scratch_floats) return PP_OK;
    /* nothing of ours is pending between collectives */
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e == cudaSuccess) e = cudaFree(s->scratch);
    if (e != cudaSuccess)
        return nc_fail(s, "freeing the float sums' buffer%s: %s", s->name, cudaGetErrorString(e)),
               nc_break(s);
    s->scratch = NULL;
    s->scratch_floats = 0;
    e = cudaMalloc(&s->scratch, floats * sizeof(float));
    if (e != cudaSuccess)
        return nc_fail(s, "cudaMalloc of %.1f MB for the float sums%s: %s", floats * 4 / 1e6,
                       s->name, cudaGetErrorString(e));
    s->scratch_floats = floats;
    return PP_OK;
}

static void sum_parts(NcComm *s, float *out, const float *parts, size_t len, int f) {
    if (!len) return;
    unsigned blocks = grid_for(len, 256);
    sum_parts_kernel<<<blocks, 256, 0, s->stream>>>(out, parts, len, s->base.world, f);
}

static int nc_allreduce_sum_f32(Comm *c, float *buf, size_t n) {
    NcComm *s = nc_of(c);
    int W = c->world;
    unsigned seq = s->ncoll++;
    if (s->broken) return nc_broken(s);
    if (!on_device(buf)) return sock_result(s, s->sock->ops->allreduce_sum_f32(s->sock, buf, n));
    size_t chunk = n < NC_CHUNK ? n : NC_CHUNK;
    if (coll_begin(s) || (W > 1 && scratch_for(s, (size_t)W * chunk))) return PP_ERUNTIME;
    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        if (W == 1) {
            sum_parts(s, buf + off, buf + off, len, 0);
            continue;
        }
        if (nc_settle(s, s->nc,
                      nccl.AllGather(buf + off, s->scratch, len, ncclFloat, s->nc, s->stream),
                      "ncclAllGather"))
            return PP_ERUNTIME;
        sum_parts(s, buf + off, s->scratch, len, 0); /* rank order: ((v0 + v1) + v2) ... */
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return nc_fail(s, "allreduce%s: launch: %s", s->name, cudaGetErrorString(e)), nc_break(s);
    return coll_end(s, NC_ALLREDUCE, seq, n * sizeof(float) * W);
}

static int nc_reduce_scatter_sum_f32(Comm *c, const float *send, float *recv, size_t count) {
    NcComm *s = nc_of(c);
    int W = c->world, r = c->rank;
    unsigned seq = s->ncoll++;
    if (s->broken) return nc_broken(s);
    if (!on_device(send) || !on_device(recv))
        return sock_result(s, s->sock->ops->reduce_scatter_sum_f32(s->sock, send, recv, count));
    size_t chunk = count < NC_CHUNK ? count : NC_CHUNK;
    if (coll_begin(s) || scratch_for(s, (size_t)W * (chunk ? chunk : 1))) return PP_ERUNTIME;
    for (size_t off = 0; off < count; off += chunk) {
        size_t len = count - off < chunk ? count - off : chunk;
        ncclResult_t res = nccl.GroupStart();
        /* block q of mine to q; block r of q's into part q */
        for (int q = 0; q < W && res == ncclSuccess; q++) {
            res = nccl.Send(send + (size_t)q * count + off, len, ncclFloat, q, s->nc, s->stream);
            if (res == ncclSuccess)
                res = nccl.Recv(s->scratch + (size_t)q * len, len, ncclFloat, q, s->nc, s->stream);
        }
        ncclResult_t e = nccl.GroupEnd();
        if (nc_settle(s, s->nc, res == ncclSuccess ? e : res, "ncclSend/ncclRecv (reduce-scatter)"))
            return PP_ERUNTIME;
        sum_parts(s, recv + off, s->scratch, len, (r + 1) % W); /* the ring's order, v[r] last */
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return nc_fail(s, "reduce-scatter%s: launch: %s", s->name, cudaGetErrorString(e)),
               nc_break(s);
    return coll_end(s, NC_REDUCE_SCATTER, seq, count * sizeof(float) * W);
}

static int nc_all_gather_f32(Comm *c, const float *send, float *recv, size_t count) {
    NcComm *s = nc_of(c);
    unsigned seq = s->ncoll++;
    if (s->broken) return nc_broken(s);
    if (!on_device(send) || !on_device(recv))
        return sock_result(s, s->sock->ops->all_gather_f32(s->sock, send, recv, count));
    if (coll_begin(s) ||
        nc_settle(s, s->nc, nccl.AllGather(send, recv, count, ncclFloat, s->nc, s->stream),
                  "ncclAllGather"))
        return PP_ERUNTIME;
    return coll_end(s, NC_ALL_GATHER, seq, count * sizeof(float) * c->world);
}

static int nc_broadcast(Comm *c, int root, void *buf, size_t bytes) {
    NcComm *s = nc_of(c);
    unsigned seq = s->ncoll++;
    if (s->broken) return nc_broken(s);
    if (!on_device(buf))
        return sock_result(s, s->sock->ops->broadcast(s->sock, root, buf, bytes));
    if (root < 0 || root >= c->world)
        return nc_fail(s, "broadcast: no root rank %d (this is rank %d of %d)", root, c->rank,
                       c->world);
    if (coll_begin(s) ||
        nc_settle(s, s->nc, nccl.Broadcast(buf, buf, bytes, ncclChar, root, s->nc, s->stream),
                  "ncclBroadcast"))
        return PP_ERUNTIME;
    return coll_end(s, NC_BROADCAST, seq, bytes);
}

/* Host doubles and the barrier: the socket Comm's ([Note: NCCL transport]). */
static int nc_allreduce_sum_f64(Comm *c, double *v, int n) {
    NcComm *s = nc_of(c);
    if (s->broken) return nc_broken(s);
    return sock_result(s, s->sock->ops->allreduce_sum_f64(s->sock, v, n));
}

static int nc_barrier(Comm *c) {
    NcComm *s = nc_of(c);
    if (s->broken) return nc_broken(s);
    return sock_result(s, s->sock->ops->barrier(s->sock));
}

static int nc_peer_state(Comm *c, int peer, double silent_s, char *why, size_t n) {
    NcComm *s = nc_of(c);
    return s->sock->ops->peer_state ? s->sock->ops->peer_state(s->sock, peer, silent_s, why, n) : 0;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

static void nc_destroy(Comm *c);
static int nc_split(Comm *c, int color, int key, Comm **out);

/* Filled by name (C++17 has no designated initializers); ranks are processes and the
 * table is written before the first Comm exists. */
static CommOps nc_ops;

static const CommOps *nc_ops_table(void) {
    if (!nc_ops.name) {
        nc_ops.isend = nc_isend;
        nc_ops.irecv = nc_irecv;
        nc_ops.wait = nc_wait;
        nc_ops.test = nc_test;
        nc_ops.group_start = nc_group_start;
        nc_ops.group_end = nc_group_end;
        nc_ops.allreduce_sum_f64 = nc_allreduce_sum_f64;
        nc_ops.allreduce_sum_f32 = nc_allreduce_sum_f32;
        nc_ops.reduce_scatter_sum_f32 = nc_reduce_scatter_sum_f32;
        nc_ops.all_gather_f32 = nc_all_gather_f32;
        nc_ops.broadcast = nc_broadcast;
        nc_ops.barrier = nc_barrier;
        nc_ops.split = nc_split;
        nc_ops.peer_state = nc_peer_state;
        nc_ops.destroy = nc_destroy;
        nc_ops.name = "nccl";
    }
    return &nc_ops;
}

/* Free s: its communicator finalized when nothing is pending (waiting at most 10 s,
 * on no peer: should NCCL's finalize wait for the peers' own, a rank that is slower to
 * exit costs that at most), else aborted. Its socket Comm is not touched unless it owns it. */
static void nc_destroy(Comm *c) {
    NcComm *s = nc_of(c);
    int pending = s->grp || s->self_s || s->self_r;
    stall_open(s);
    while (s->live) { /* one whose socket request is unfinished stays allocated (req_free) */
        NcReq *r = s->live;
        pending |= r->issued && cudaEventQuery(r->done) != cudaSuccess;
        req_free(s, r);
    }
    if (s->nc && !pending && !s->broken) {
        ncclResult_t r = nccl.CommFinalize(s->nc), ar = r;
        /* then abort: never a hang */
        double end = now_s() + (s->base.timeout_s < 10 ? s->base.timeout_s : 10);
        for (long it = 0; r == ncclInProgress || r == ncclSuccess; it++) {
            if (nccl.CommGetAsyncError(s->nc, &ar) != ncclSuccess || ar != ncclInProgress ||
                now_s() > end)
                break;
            nap(it);
        }
        if (ar == ncclSuccess && nccl.CommDestroy(s->nc) == ncclSuccess) s->nc = NULL;
    }
    if (s->nc) nccl.CommAbort(s->nc);
    if (s->stream) cudaStreamDestroy(s->stream);
    if (s->ev) cudaEventDestroy(s->ev);
    cudaFree(s->scratch);
    if (s->own_sock) s->sock->ops->destroy(s->sock);
    free(s->jranks);
    free(s);
}

/* A new Comm over sock and communicator nc (NULL: made by the caller later). */
static NcComm *nc_new(Comm *sock, int own_sock, const PPNcclHost *host, CudaCtx *cx) {
    NcComm *s = (NcComm *)calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base.ops = nc_ops_table();
    s->base.rank = sock->rank;
    s->base.world = sock->world;
    s->base.timeout_s = sock->timeout_s;
    s->base.kind_names = sock->kind_names;
    s->base.n_kind_names = sock->n_kind_names;
    s->base.max_message_bytes = sock->max_message_bytes;
    s->base.device_memory = 1;
    s->sock = sock;
    s->own_sock = own_sock;
    s->host = *host;
    s->cx = cx;
    const char *hook = getenv("PPTRAIN_NCCL_TEST_STALL");
    s->stall = hook && !strcmp(hook, "1");
    s->jranks = (int *)calloc((size_t)sock->world, sizeof(int));
    return s;
}

/* The comm stream and the collectives' event; PP_OK or the Comm fails. */
static int nc_streams(NcComm *s) {
    cudaError_t e;
    if ((e = cudaSetDevice(s->cx->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&s->ev, cudaEventDisableTiming)) != cudaSuccess)
        return nc_fail(s, "creating the NCCL transport's stream on cuda:%d: %s", s->cx->device,
                       cudaGetErrorString(e));
    return PP_OK;
}

static void name_group(NcComm *s) {
    size_t k = (size_t)snprintf(s->name, sizeof s->name, " in the group of ranks {");
    for (int i = 0; i < s->base.world && i < 8 && k < sizeof s->name; i++)
        k += (size_t)snprintf(s->name + k, sizeof s->name - k, "%s%d", i ? ", " : "", s->jranks[i]);
    if (k < sizeof s->name)
        snprintf(s->name + k, sizeof s->name - k, "%s}", s->base.world > 8 ? ", ..." : "");
}

static int nc_split(Comm *c, int color, int key, Comm **out) {
    NcComm *s = nc_of(c), *g = NULL;
    Comm *sg = NULL;
    ncclComm_t child = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    int rc;
    *out = NULL;
    if (s->broken) return nc_broken(s);
    if ((rc = s->sock->ops->split(s->sock, color, key, &sg))) {
        snprintf(c->err, sizeof c->err, "%s", s->sock->err);
        return rc;
    }
    cfg.blocking = 0;
    ncclResult_t r = nccl.CommSplit(s->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                    &child, &cfg);
    /* A non-blocking split is polled on the parent (NCCL's docs, usage/communicators.rst:
     * "nonblocking communicator split"): NCCL sets child from its own thread when the
     * split is complete. NCCL 2.28 returns ncclSuccess here, not ncclInProgress, while
     * that thread still runs (seen on the first H100 run: the child was NULL, and the
     * next call on the parent was refused as "before the previous operation returned
     * ncclSuccess"): so the parent is always polled (nc_settle_for), and a member then
     * waits for its child to appear and for the child's own state to settle. */
    double patience = setup_patience(s), end = now_s() + patience;
    int st = nc_settle_for(s, s->nc, r, "ncclCommSplit", patience);
    if (st == PP_OK && color >= 0) {
        for (long it = 0; !__atomic_load_n(&child, __ATOMIC_ACQUIRE) && now_s() < end; it++)
            nap(it);
        ncclComm_t got = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
        if (!got) {
            nc_fail(s, "ncclCommSplit%s: the parent settled but no communicator came back in %g s",
                    s->name, patience);
            st = nc_break(s);
        } else {
            st = nc_settle_for(s, got, ncclInProgress, "ncclCommSplit (the new communicator)",
                               patience);
        }
    }
    if (st != PP_OK) { /* aborted; child, if set, after it */
        if (child) nccl.CommAbort(child);
        if (sg) sg->ops->destroy(sg);
        return PP_ERUNTIME;
    }
    if (!sg) { /* not a member (color < 0) */
        if (child) nccl.CommAbort(child);
        return PP_OK;
    }
    if (!(g = nc_new(sg, 1, &s->host, s->cx))) {
        sg->ops->destroy(sg);
        if (child) nccl.CommAbort(child);
        return nc_fail(s, "split: out of host memory");
    }
    g->nc = child;
    g->base.kind_names = c->kind_names;
    g->base.n_kind_names = c->n_kind_names;
    g->base.max_message_bytes = c->max_message_bytes;
    g->base.timeout_s = c->timeout_s;
    /* the members' ranks in the job, for messages: each tells its own */
    for (int i = 0; i < sg->world && rc == PP_OK; i++) {
        if (i == sg->rank) g->jranks[i] = s->jranks[c->rank];
        rc = sg->ops->broadcast(sg, i, &g->jranks[i], sizeof(int));
    }
    if (rc || (rc = nc_streams(g))) {
        snprintf(c->err, sizeof c->err, "%s", rc && !g->base.err[0] ? sg->err : g->base.err);
        g->broken = 1; /* abort, do not finalize */
        nc_destroy(&g->base);
        return PP_ERUNTIME;
    }
    name_group(g);
    *out = &g->base;
    return PP_OK;
}

extern "C" int pp_nccl_create(Comm *sock, const Backend *be, const PPNcclHost *host, Comm **out,
                              char *err, size_t errlen) {
    char why[256];
    struct {
        int32_t ok;
        ncclUniqueId id;
    } hello;
    *out = NULL;
    if (!pp_nccl_available(why, sizeof why)) {
        snprintf(err, errlen, "NCCL cannot be loaded: %s", why);
        return PP_EUSAGE;
    }
    if (!be || !be->name || strcmp(be->name, "cuda")) {
        snprintf(err, errlen, "the NCCL transport needs the CUDA backend; this rank runs on %s",
                 be && be->name ? be->name : "no backend");
        return PP_EUSAGE;
    }
    NcComm *s = nc_new(sock, 0, host, ctx_of(be));
    if (!s) {
        snprintf(err, errlen, "out of host memory");
        return PP_ERUNTIME;
    }
    for (int i = 0; i < sock->world; i++) s->jranks[i] = i; /* the job's own Comm */
    if (nc_streams(s)) {
        snprintf(err, errlen, "%s", s->base.err);
        nc_destroy(&s->base);
        return PP_ERUNTIME;
    }
    /* the unique id from rank 0 over the socket Comm; ok = 0 tells the others it failed */
    memset(&hello, 0, sizeof hello);
    hello.ok = sock->rank != 0 || nccl.GetUniqueId(&hello.id) == ncclSuccess;
    if (sock->ops->broadcast(sock, 0, &hello, sizeof hello) != PP_OK) {
        snprintf(err, errlen, "sending the NCCL unique id: %s", sock->err);
        nc_destroy(&s->base);
        return PP_ERUNTIME;
    }
    if (!hello.ok) {
        snprintf(err, errlen,
                 "ncclGetUniqueId failed on rank 0 (see its log; NCCL_DEBUG=WARN says more)");
        nc_destroy(&s->base);
        return PP_ERUNTIME;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = nccl.CommInitRankConfig(&s->nc, sock->world, hello.id, sock->rank, &cfg);
    if (!s->nc && r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, errlen, "ncclCommInitRankConfig failed: %s", nccl.GetErrorString(r));
        nc_destroy(&s->base);
        return PP_ERUNTIME;
    }
    if (nc_settle_for(s, s->nc, r, "ncclCommInitRankConfig", setup_patience(s))) {
        snprintf(err, errlen, "%s", s->base.err);
        nc_destroy(&s->base);
        return PP_ERUNTIME;
    }
    *out = &s->base;
    return PP_OK;
}
