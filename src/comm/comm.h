/* comm.h — the transport interface: tagged non-blocking point-to-point messages and
 * small deterministic collectives between the ranks of one job or of a group of them.
 * Implementations fill in a CommOps table: socket (CPU, comm_socket.c), memory (ranks
 * as threads of one process, for tests; 1 rank for a 1-rank run: comm_memory.c), nccl
 * (GPUs, cuda/comm_nccl.cu in the CUDA backend, over a socket Comm). comm.c creates the
 * job's socket or memory Comm; the runtime may replace it by an NCCL Comm over it
 * (comm_select.h). */
#ifndef PP_COMM_H
#define PP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "dist/dist.h"

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
                                   defines the struct privately (comm_internal.h) */

/* [Note: groups] A Comm is either a whole job (from comm_create / comm_socket_create /
 * comm_memory_create) or a group of some of its ranks (from split), such as the two
 * ranks holding the tied embedding or, later, the replicas of one stage. A group has
 * its own rank and world, numbers its point-to-point peers within the group, and has
 * its own collectives: its messages and collectives never match those of its parent
 * or of another group, in flight or not. A transport may carry several groups over
 * the same connections, so two ranks must call the collectives they both take part
 * in, of whatever Comm, in the same order (as on one NCCL stream); when they do not,
 * they fail with "collectives out of step" or a timeout, never exchange wrong data.
 * Errors name peers by their rank in the job (the rank of their log), whatever Comm
 * the failing call was on; a group's collectives add "in the group of ranks {0, 3}".
 * Each Comm, the job's and every group, is freed by its own comm_destroy, in any
 * order. */

/* Every function returns PP_OK or PP_ERUNTIME; on failure comm_error(c) says what
 * happened in one line that names the peer rank and, for messages, the tag. */
typedef struct CommOps {
    const char *name; /* "socket", "memory", ... */
    /* Start sending `bytes` of buf to rank `peer`; buf must stay unchanged until the
     * request completes. Never blocks on the receiver (a peer already lost fails at
     * once with *req = NULL). */
    int (*isend)(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                 CommReq **req);
    /* Post a receive of exactly `bytes` from `peer` into buf. The n-th message sent by
     * a peer to this rank matches the n-th receive this rank posts for that peer
     * (FIFO per pair and Comm); its tag and size must equal the posted ones, else this
     * irecv (message already there) or the wait fails naming both. Posting before or
     * after the message arrives are both fine. Failing at once: *req = NULL, nothing
     * to wait for. */
    int (*irecv)(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes,
                 CommReq **req);
    /* Block until req completes and free it (on success and on failure). A peer that
     * dies fails the wait promptly ("lost connection to rank N ..."); one that completed
     * no message of this pair's traffic for timeout_s since the request was posted fails
     * it with a timeout error ("timed out waiting for rank N ...") — never a hang: the
     * deadline is fixed by whole messages (plus transfer time for one in flight), bytes
     * that trickle in do not extend it. Before blaming a silent peer the socket
     * transport asks it whether it is itself blocked on another rank and then waits for
     * that one's verdict ([Note: blame] in comm_socket_blame.c). After either, the socket
     * transport fails every other request on that peer too. When another rank failed
     * first (this rank saw it die, or a peer reported it), the message names that rank
     * first: "rank 3 failed first (...); then lost connection to rank 2 ...". */
    int (*wait)(Comm *c, CommReq *req);
    /* Non-blocking wait: *done = 1 when req completed (then it is freed, and the return
     * value is its status), 0 while it is pending. It fails a request for silence no
     * sooner than a wait would. */
    int (*test)(Comm *c, CommReq *req, int *done);
    /* Grouped posting, as ncclGroupStart/End: the isends and irecvs a rank posts
     * between group_start and group_end are issued together at group_end, so a rank's
     * sends and receives cannot deadlock on one stream. Groups nest; only isend and
     * irecv may be called inside one, and its requests may be waited for (or tested)
     * only after the outermost group_end — the comm_* wrappers below enforce this and
     * die naming the call, since only a bug breaks it. No-ops on sockets (sends never
     * block) and in memory. */
    int (*group_start)(Comm *c);
    int (*group_end)(Comm *c);
    /* Collectives: every rank of the Comm calls them in the same order ([Note: groups]).
     * They block until this rank's part is done; a peer that died or stayed silent for
     * timeout_s fails them on every rank that waits for it, with one message naming
     * it ("lost connection to rank N in allreduce #3: ...", "timed out in barrier #0:
     * rank N sent nothing for 5 s ...") — never a hang; silence and first failures are
     * judged as for wait. After a failed collective the Comm's later ones may fail too
     * (the job is expected to stop).
     * v[0..n) <- the sum over ranks, added in rank order ((v0 + v1) + v2) + ...,
     * bitwise equal on all ranks. */
    int (*allreduce_sum_f64)(Comm *c, double *v, int n);
    /* buf[0..n) <- the sum over ranks, added in rank order as above, bitwise equal on
     * all ranks; a NaN sum becomes the canonical quiet NaN 0x7fc00000 (which NaN
     * payload survives an addition depends on the operand order, which the compiler
     * may swap). On 2 ranks this is the old pair sum: v0 + v1 on both. */
    int (*allreduce_sum_f32)(Comm *c, float *buf, size_t n);
    /* NCCL's reduce-scatter: send[world*count] on every rank; this rank r gets
     * recv[0..count) <- the sum over ranks of block r of send (send[r*count ..)),
     * added in the ring's order ((v[r+1] + v[r+2]) + ...) + v[r] (ranks mod world;
     * [Note: ring all-reduce] in comm_ring.h), NaNs canonical, the same bits whatever
     * the timing. The socket transport runs it as a ring. send and recv must not
     * overlap. */
    int (*reduce_scatter_sum_f32)(Comm *c, const float *send, float *recv, size_t count);
    /* NCCL's all-gather: recv[world*count] <- block q is rank q's send[0..count), bits
     * unchanged (a ring on sockets). send and recv must not overlap. */
    int (*all_gather_f32)(Comm *c, const float *send, float *recv, size_t count);
    /* buf[0..bytes) of rank `root` copied to every rank. */
    int (*broadcast)(Comm *c, int root, void *buf, size_t bytes);
    /* Return once every rank has entered the barrier. */
    int (*barrier)(Comm *c);
    /* MPI_Comm_split / ncclCommSplit: a collective of c. The ranks that pass the same
     * color >= 0 form a new group, ranked by (key, rank in c); *out is this rank's
     * Comm of it (timeout_s and kind_names copied from c), or NULL for color < 0. The
     * group shares c's connections ([Note: groups]) and is freed by comm_destroy.
     * Fails as a collective does; then *out = NULL on every rank. */
    int (*split)(Comm *c, int color, int key, Comm **out);
    /* Optional (NULL: every peer counts as alive): whether peer `peer` (rank in this
     * Comm) is lost (1; why <- the reason, as "lost connection" messages quote it) or
     * sent nothing at all, not even a heartbeat, for silent_s (2; why <- what was
     * heard), else 0. Never blocks. The socket transport answers from its heartbeats
     * ([Note: heartbeat] in comm_socket_blame.c); the NCCL transport asks its socket
     * Comm this while it polls a transfer ([Note: NCCL transport] in cuda/comm_nccl.cu). */
    int (*peer_state)(Comm *c, int peer, double silent_s, char *why, size_t whylen);
    /* Optional (NULL: not known): the rank in the job that this rank's blocking call (a
     * wait, a collective) waits on now, or between calls the last one it waited on (-1:
     * none yet) — whom a collective is blocked on, which its caller cannot tell ([Note:
     * flight recorder] in runtime/flight.c). Reads one int without a lock: it may be a
     * moment stale, and it is async-signal-safe (a SIGUSR2 dump calls it). */
    int (*blocked_on)(const Comm *c);
    /* Free this Comm, and with the last Comm of a job (its own or a group's, in any
     * order) the transport's threads and connections. Wait for your requests first:
     * pending ones are dropped (a receive is no longer filled, a send is finished
     * from a copy or not at all), and so are messages that arrived for this Comm and
     * were never received. */
    void (*destroy)(Comm *c);
} CommOps;

/* The longest point-to-point message a peer may send, unless the caller says otherwise
 * (Comm.max_message_bytes). */
#define COMM_MAX_MESSAGE_DEFAULT ((size_t)1 << 30)

/* The part of every transport that callers may read. One thread uses a Comm (and the
 * Comms split from it, see [Note: groups]) at a time. */
struct Comm {
    const CommOps *ops;
    int rank, world;                /* in this Comm: the job, or a group of it */
    double timeout_s;               /* runtime.timeout_s: how long a silent peer is waited for */
    const char *const *kind_names;  /* optional: kind_names[tag.kind] for messages, set by */
    int n_kind_names;               /* the runtime after creation */
    /* The longest point-to-point message a peer may send on this Comm: a message header
     * that claims more is refused before anything is allocated for it, the peer is
     * marked lost, and the error names it ("rank 1 sent a message header claiming
     * 4611686018427387904 bytes ..."). COMM_MAX_MESSAGE_DEFAULT after creation; the
     * runtime may set it to the largest message its schedule sends (groups copy it at
     * split). A message whose receive is already posted must match that receive's size
     * exactly whatever this says. The memory transport ignores it (nothing is framed). */
    size_t max_message_bytes;
    int group_depth;                /* open group_start calls (kept by the wrappers) */
    /* 1: this Comm moves device memory itself (NCCL): its messages and float
     * collectives take a device backend's buffers as they are, so the runtime stages
     * nothing through the host ([Note: host staging] in runtime.c). 0: it reads and
     * writes host memory only (socket, memory). Host buffers work on both. */
    int device_memory;
    /* When the transport completed the request that the last wait or test freed (pp_now()
     * clock; 0: not known, as on NCCL): a send's end is when its last byte left, which
     * may be long before the wait. The flight recorder logs it as the transfer's end. */
    double done_at;
    char err[PP_ERR_MAX];           /* the last failure's message */
};

/* A 1-rank transport with no sockets: comm_memory_create with world 1 (timeout 0).
 * Collectives are identities (NaNs made canonical), messages to rank 0 (itself) are
 * delivered in FIFO order; a wait that could only be satisfied by a send not yet
 * posted fails at once (in one thread it would wait forever). */
Comm *comm_local_create(void);

/* world ranks in one process, for tests: out[r] is rank r's Comm, each used by its
 * own thread (world 1: the caller's). isend copies the message (its request is done
 * at once); receives match FIFO per pair with the socket transport's checks and
 * messages; a wait blocks until its message arrives, its sender's Comm is destroyed
 * ("lost connection to rank N ...") or timeout_s passes ("timed out waiting for rank
 * N ..."), except that in a 1-rank Comm it fails at once (comm_local_create).
 * Collectives block until every rank of the Comm arrived, give the socket transport's
 * bits and fail with its messages; after one failed, every later collective of that
 * Comm fails with the same message. Returns PP_OK, or PP_EUSAGE for world < 1. */
int comm_memory_create(int world, double timeout_s, Comm **out /* [world] */);

/* Wrap the connected mesh from dist_connect (which it takes over: the mesh is left
 * empty, its sockets closed by comm_destroy) in the socket transport, starting its
 * progress thread. Returns PP_OK, or PP_ERUNTIME with a message (the mesh is closed). */
int comm_socket_create(DistMesh *mesh, double timeout_s, Comm **out, char *err,
                       size_t errlen);

/* Everything a rank needs (comm_select.c): comm_local_create when env->world == 1, else
 * dist_connect (rendezvous and config check, see dist.h) then comm_socket_create.
 * Errors as those (PP_EUSAGE for a config or world-size mismatch). */
int comm_create(const DistEnv *env, const char *config_text, double timeout_s, Comm **out,
                char *err, size_t errlen);

/* "step 3, stage 1, microbatch 2, activation" (or "kind 4" without a name). */
void comm_tag_format(const Comm *c, const CommTag *tag, char *buf, size_t n);

/* Calls through the table, so that callers read comm_isend(c, ...). Those that must not
 * run between group_start and group_end (see there) die naming the call if they do. */
void comm_die_grouped(const Comm *c, const char *call) __attribute__((noreturn));
#define COMM_NOT_GROUPED(c, call)                                                      \
    do {                                                                               \
        if ((c)->group_depth) comm_die_grouped((c), (call));                           \
    } while (0)

static inline int comm_isend(Comm *c, int peer, const CommTag *t, const void *buf,
                             size_t bytes, CommReq **req) {
    return c->ops->isend(c, peer, t, buf, bytes, req);
}
static inline int comm_irecv(Comm *c, int peer, const CommTag *t, void *buf, size_t bytes,
                             CommReq **req) {
    return c->ops->irecv(c, peer, t, buf, bytes, req);
}
static inline int comm_wait(Comm *c, CommReq *req) {
    COMM_NOT_GROUPED(c, "comm_wait");
    return c->ops->wait(c, req);
}
static inline int comm_test(Comm *c, CommReq *req, int *done) {
    COMM_NOT_GROUPED(c, "comm_test");
    return c->ops->test(c, req, done);
}
static inline int comm_group_start(Comm *c) {
    c->group_depth++;
    return c->ops->group_start(c);
}
static inline int comm_group_end(Comm *c) {
    if (c->group_depth == 0) comm_die_grouped(c, "comm_group_end");
    c->group_depth--;
    return c->ops->group_end(c);
}
static inline int comm_allreduce_sum_f64(Comm *c, double *v, int n) {
    COMM_NOT_GROUPED(c, "comm_allreduce_sum_f64");
    return c->ops->allreduce_sum_f64(c, v, n);
}
static inline int comm_allreduce_sum_f32(Comm *c, float *buf, size_t n) {
    COMM_NOT_GROUPED(c, "comm_allreduce_sum_f32");
    return c->ops->allreduce_sum_f32(c, buf, n);
}
static inline int comm_reduce_scatter_sum_f32(Comm *c, const float *send, float *recv,
                                              size_t count) {
    COMM_NOT_GROUPED(c, "comm_reduce_scatter_sum_f32");
    return c->ops->reduce_scatter_sum_f32(c, send, recv, count);
}
static inline int comm_all_gather_f32(Comm *c, const float *send, float *recv,
                                      size_t count) {
    COMM_NOT_GROUPED(c, "comm_all_gather_f32");
    return c->ops->all_gather_f32(c, send, recv, count);
}
static inline int comm_broadcast(Comm *c, int root, void *buf, size_t bytes) {
    COMM_NOT_GROUPED(c, "comm_broadcast");
    return c->ops->broadcast(c, root, buf, bytes);
}
static inline int comm_barrier(Comm *c) {
    COMM_NOT_GROUPED(c, "comm_barrier");
    return c->ops->barrier(c);
}
static inline int comm_split(Comm *c, int color, int key, Comm **out) {
    COMM_NOT_GROUPED(c, "comm_split");
    return c->ops->split(c, color, key, out);
}
static inline void comm_destroy(Comm *c) {
    if (c) c->ops->destroy(c);
}
static inline const char *comm_error(const Comm *c) { return c->err; }
static inline int comm_blocked_on(const Comm *c) {
    return c && c->ops->blocked_on ? c->ops->blocked_on(c) : -1;
}

#endif
