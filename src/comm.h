/* comm.h — the transport interface: tagged non-blocking point-to-point messages and
 * small deterministic collectives between the ranks of one job. Implementations fill
 * in a CommOps table: socket (CPU, comm_socket.c), local (1 rank), nccl (later). */
#ifndef PP_COMM_H
#define PP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "dist.h"

/* What a point-to-point message is. The sender and the receiver both state it; the
 * transport checks that they agree and names it in every error. */
typedef struct {
    int32_t step;  /* optimizer step */
    int32_t stage; /* pipeline stage */
    int32_t mb;    /* microbatch */
    int32_t kind;  /* activation, gradient, ...: values are the runtime's (see kind_names) */
} CommTag;

typedef struct Comm Comm;
typedef struct CommReq CommReq; /* one pending isend/irecv; owned by the transport, which
                                   defines the struct privately in its own .c file */

/* Every function returns PP_OK or PP_ERUNTIME; on failure comm_error(c) says what
 * happened in one line that names the peer rank and, for messages, the tag. */
typedef struct CommOps {
    const char *name; /* "socket", "local", ... */
    /* Start sending `bytes` of buf to rank `peer`; buf must stay unchanged until the
     * request completes. Never blocks on the receiver (a peer already lost fails at
     * once with *req = NULL). */
    int (*isend)(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                 CommReq **req);
    /* Post a receive of exactly `bytes` from `peer` into buf. The n-th message sent by
     * a peer to this rank matches the n-th receive this rank posts for that peer
     * (FIFO per pair); its tag and size must equal the posted ones, else this irecv
     * (message already there) or the wait fails naming both. Posting before or after
     * the message arrives are both fine. Failing at once: *req = NULL, nothing to wait. */
    int (*irecv)(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes,
                 CommReq **req);
    /* Block until req completes and free it (on success and on failure). A peer that
     * dies fails the wait promptly ("lost connection to rank N ..."); one that moved no
     * byte of this pair's traffic for timeout_s since the request was posted fails it
     * with a timeout error ("timed out waiting for rank N ...") — never a hang. After
     * either, every other request on that peer fails too. */
    int (*wait)(Comm *c, CommReq *req);
    /* Non-blocking wait: *done = 1 when req completed (then it is freed, and the return
     * value is its status), 0 while it is pending. */
    int (*test)(Comm *c, CommReq *req, int *done);
    /* Collectives: every rank calls them in the same order (the pair sum: both ranks
     * of the pair). They never match point-to-point messages, in flight or not.
     * v[0..n) <- the sum over ranks, added in rank order, bitwise equal on all ranks. */
    int (*allreduce_sum_f64)(Comm *c, double *v, int n);
    /* buf[0..n) <- (this rank's buf) + (peer's buf), bitwise equal on both ranks (a NaN
     * sum becomes the canonical quiet NaN 0x7fc00000). */
    int (*pair_sum_f32)(Comm *c, int peer, float *buf, size_t n);
    /* buf[0..bytes) of rank `root` copied to every rank. */
    int (*broadcast)(Comm *c, int root, void *buf, size_t bytes);
    /* Return once every rank has entered the barrier. */
    int (*barrier)(Comm *c);
    /* Free everything: stop the transport's threads, close its connections, free
     * requests never waited for. Wait for your sends first: pending ones are dropped. */
    void (*destroy)(Comm *c);
} CommOps;

/* The part of every transport that callers may read. One thread uses a Comm at a time. */
struct Comm {
    const CommOps *ops;
    int rank, world;
    double timeout_s;               /* runtime.timeout_s: how long a silent peer is waited for */
    const char *const *kind_names;  /* optional: kind_names[tag.kind] for messages, set by */
    int n_kind_names;               /* the runtime after creation */
    char err[PP_ERR_MAX];           /* the last failure's message */
};

/* A 1-rank transport with no sockets: collectives are identities, messages to rank 0
 * (itself) are delivered in FIFO order; a wait that could only be satisfied by a send
 * not yet posted fails at once (in one process it would wait forever). */
Comm *comm_local_create(void);

/* Wrap the connected mesh from dist_connect (which it takes over: the mesh is left
 * empty, its sockets closed by comm_destroy) in the socket transport, starting its
 * progress thread. Returns PP_OK, or PP_ERUNTIME with a message (the mesh is closed). */
int comm_socket_create(DistMesh *mesh, double timeout_s, Comm **out, char *err,
                       size_t errlen);

/* Everything a rank needs: comm_local_create when env->world == 1, else dist_connect
 * (rendezvous and config check, see dist.h) then comm_socket_create. Errors as those
 * (PP_EUSAGE for a config or world-size mismatch). */
int comm_create(const DistEnv *env, const char *config_text, double timeout_s, Comm **out,
                char *err, size_t errlen);

/* "step 3, stage 1, microbatch 2, activation" (or "kind 4" without a name). */
void comm_tag_format(const Comm *c, const CommTag *tag, char *buf, size_t n);

/* Calls through the table, so that callers read comm_isend(c, ...). */
static inline int comm_isend(Comm *c, int peer, const CommTag *t, const void *buf,
                             size_t bytes, CommReq **req) {
    return c->ops->isend(c, peer, t, buf, bytes, req);
}
static inline int comm_irecv(Comm *c, int peer, const CommTag *t, void *buf, size_t bytes,
                             CommReq **req) {
    return c->ops->irecv(c, peer, t, buf, bytes, req);
}
static inline int comm_wait(Comm *c, CommReq *req) { return c->ops->wait(c, req); }
static inline int comm_test(Comm *c, CommReq *req, int *done) {
    return c->ops->test(c, req, done);
}
static inline int comm_allreduce_sum_f64(Comm *c, double *v, int n) {
    return c->ops->allreduce_sum_f64(c, v, n);
}
static inline int comm_pair_sum_f32(Comm *c, int peer, float *buf, size_t n) {
    return c->ops->pair_sum_f32(c, peer, buf, n);
}
static inline int comm_broadcast(Comm *c, int root, void *buf, size_t bytes) {
    return c->ops->broadcast(c, root, buf, bytes);
}
static inline int comm_barrier(Comm *c) { return c->ops->barrier(c); }
static inline void comm_destroy(Comm *c) {
    if (c) c->ops->destroy(c);
}
static inline const char *comm_error(const Comm *c) { return c->err; }

#endif
