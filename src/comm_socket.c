/* comm_socket.c — the socket transport behind comm.h (TCP full mesh, one progress
 * thread), the 1-rank local transport, and comm_create which picks between them. */
#define _GNU_SOURCE /* pipe2 */
#include "comm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* [Note: socket transport]
 * dist_connect gives every pair of ranks two TCP connections.
 * - The data channel carries point-to-point messages, each a WireHdr (tag, byte count)
 *   followed by the payload. Only the progress thread touches it: it writes each peer's
 *   queued sends in order, and reads whatever arrives, straight into the oldest posted
 *   receive for that peer when there is one, else into a buffer of its own (an "early"
 *   message, copied out when its receive is posted). So a send never waits for the
 *   receiver to post, and two ranks that both send before they receive cannot deadlock.
 *   The n-th message from a peer matches the n-th receive posted for it (FIFO).
 * - The collective channel carries allreduce / pair sum / broadcast / barrier and is
 *   driven by the calling thread alone, so a collective can neither consume nor queue
 *   behind a point-to-point message. Each collective message starts with a CollHdr
 *   (operation, per-pair sequence number, count): ranks that call different collectives
 *   fail with a message instead of exchanging garbage.
 * Failure: a closed or reset connection marks the peer lost and fails every request on
 * it at once; a wait that sees no byte from (or to) its peer for timeout_s fails with a
 * timeout and marks the peer lost too (shutting the connection, so that the peer learns
 * promptly). Messages that fully arrived before the loss can still be received.
 * Byte order is the host's: every rank runs the same binary. */

#define WIRE_MAGIC 0x6d777070u /* "ppwm" */
#define COLL_MAGIC 0x63777070u /* "ppwc" */
#define IO_BUDGET (8u << 20)   /* bytes moved per peer per progress round (fairness) */
#define COLL_CHUNK (1u << 18)  /* floats per pair-sum exchange (1 MiB) */

typedef struct {
    uint32_t magic;
    CommTag tag;
    uint32_t pad;
    uint64_t bytes; /* payload that follows */
} WireHdr;

enum { REQ_SEND, REQ_RECV };

typedef struct Early Early;

struct CommReq {
    int type, peer;
    CommTag tag;
    char *buf;
    size_t bytes;
    double posted;          /* pp_now() at isend/irecv: silence is measured from here */
    int done, status;
    char err[PP_ERR_MAX];
    Early *early;           /* receive: the early message it copies from on arrival */
    CommReq *next;          /* in its peer's send or receive queue */
    CommReq *prev_live, *next_live; /* every request not yet freed */
};

/* A message that started arriving before its receive was posted. */
struct Early {
    CommTag tag;
    size_t bytes;
    char *buf;
    int complete;
    CommReq *req; /* the receive that claimed it while it was still arriving */
    Early *next;
};

typedef struct {
    CommReq *head, *tail;
} ReqQueue;

typedef struct {
    Early *head, *tail;
} EarlyList;

/* ------------------------------------------------------ shared request helpers -- */

void comm_tag_format(const Comm *c, const CommTag *t, char *buf, size_t n) {
    if (c && c->kind_names && t->kind >= 0 && t->kind < c->n_kind_names &&
        c->kind_names[t->kind])
        snprintf(buf, n, "step %d, stage %d, microbatch %d, %s", t->step, t->stage, t->mb,
                 c->kind_names[t->kind]);
    else
        snprintf(buf, n, "step %d, stage %d, microbatch %d, kind %d", t->step, t->stage,
                 t->mb, t->kind);
}

static int comm_fail(Comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int comm_fail(Comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return PP_ERUNTIME;
}

static void req_fail(CommReq *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void req_fail(CommReq *r, const char *fmt, ...) {
    va_list ap;
    if (r->done) return; /* the first reason stands */
    r->done = 1;
    r->status = PP_ERUNTIME;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

static void req_ok(CommReq *r) {
    r->done = 1;
    r->status = PP_OK;
}

static CommReq *req_new(CommReq **live, int type, int peer, const CommTag *tag, void *buf,
                        size_t bytes) {
    CommReq *r = pp_calloc(1, sizeof *r);
    r->type = type;
    r->peer = peer;
    r->tag = *tag;
    r->buf = buf;
    r->bytes = bytes;
    r->posted = pp_now();
    r->next_live = *live;
    if (*live) (*live)->prev_live = r;
    *live = r;
    return r;
}

/* Unlink and free a request; returns its status (its message copied to c->err). */
static int req_release(Comm *c, CommReq **live, CommReq *r) {
    int st = r->status;
    if (st != PP_OK) snprintf(c->err, sizeof c->err, "%s", r->err);
    if (r->prev_live) r->prev_live->next_live = r->next_live;
    else *live = r->next_live;
    if (r->next_live) r->next_live->prev_live = r->prev_live;
    free(r);
    return st;
}

static void queue_push(ReqQueue *q, CommReq *r) {
    r->next = NULL;
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
}

static CommReq *queue_pop(ReqQueue *q) {
    CommReq *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head) q->tail = NULL;
    }
    return r;
}

static void early_push(EarlyList *l, Early *e) {
    e->next = NULL;
    if (l->tail) l->tail->next = e;
    else l->head = e;
    l->tail = e;
}

static Early *early_pop(EarlyList *l) {
    Early *e = l->head;
    if (e) {
        l->head = e->next;
        if (!l->head) l->tail = NULL;
    }
    return e;
}

static void early_free(Early *e) {
    free(e->buf);
    free(e);
}

static int tag_equal(const CommTag *a, const CommTag *b) {
    return a->step == b->step && a->stage == b->stage && a->mb == b->mb && a->kind == b->kind;
}

/* Check a message (tag t, n bytes) from `peer` against receive r; on a mismatch fail
 * r naming both sides and return 0. */
static int recv_matches(Comm *c, CommReq *r, const CommTag *t, size_t n) {
    char sent[160], want[160];
    if (tag_equal(t, &r->tag) && n == r->bytes) return 1;
    comm_tag_format(c, t, sent, sizeof sent);
    comm_tag_format(c, &r->tag, want, sizeof want);
    req_fail(r, "message from rank %d does not match the receive posted for it: rank %d "
             "sent (%s; %zu bytes) but rank %d expected (%s; %zu bytes) — the ranks "
             "disagree on the schedule", r->peer, r->peer, sent, n, c->rank, want, r->bytes);
    return 0;
}

/* ------------------------------------------------------------- socket transport -- */

typedef struct {
    int fd, coll_fd;
    ReqQueue sends;      /* head is being written */
    size_t sent;         /* bytes of the head's header + payload written */
    ReqQueue recvs;      /* posted, waiting for their message */
    EarlyList early;     /* arrived (or arriving) before their receive, unclaimed */
    WireHdr in_hdr;      /* the incoming message's header ... */
    size_t in_hdr_got;
    int in_payload;      /* ... and, once complete, its payload: */
    char *in_dst;
    size_t in_len, in_got;
    CommReq *in_req;     /* its owner: the matched receive, */
    Early *in_early;     /* or an early buffer */
    int lost;            /* unusable from now on, because of `why` */
    char why[PP_ERR_MAX / 2];
    double last_rx, last_tx; /* pp_now() of the last byte received from / sent to it */
    uint32_t coll_seq;   /* collectives completed with this peer */
} Peer;

typedef struct {
    Comm base; /* first: a SockComm * is a Comm * */
    Peer *peers;
    pthread_t thread;
    pthread_mutex_t mu; /* guards everything the progress thread touches */
    pthread_cond_t cv;  /* signalled when a request completes */
    int wake[2];        /* pipe that interrupts the progress thread's poll */
    int stop;
    CommReq *live;
    float *scratch;     /* COLL_CHUNK floats for pair sums */
} SockComm;

static void sock_wake(SockComm *s) {
    ssize_t k = write(s->wake[1], "", 1); /* full pipe = a wake-up is already pending */
    (void)k;
}

static void req_lost(SockComm *s, CommReq *r, const char *why) {
    char t[160];
    comm_tag_format(&s->base, &r->tag, t, sizeof t);
    req_fail(r, "lost connection to rank %d while %s (%s): %s", r->peer,
             r->type == REQ_SEND ? "sending" : "waiting to receive", t, why);
}

/* Mark peer p unusable: fail every request on it, drop partial messages, shut the
 * connection so that the peer notices. Complete early messages stay receivable. */
static void peer_lose(SockComm *s, int p, const char *why) {
    Peer *P = &s->peers[p];
    CommReq *r;
    if (P->lost) return;
    P->lost = 1;
    snprintf(P->why, sizeof P->why, "%s", why);
    shutdown(P->fd, SHUT_RDWR);
    while ((r = queue_pop(&P->sends))) req_lost(s, r, why);
    while ((r = queue_pop(&P->recvs))) req_lost(s, r, why);
    if (P->in_req) req_lost(s, P->in_req, why);
    if (P->in_early) {
        Early *e = P->in_early, **pp = &P->early.head;
        if (e->req) {
            req_lost(s, e->req, why); /* claimed: not in the list */
        } else {                      /* unclaimed and incomplete: the list's tail */
            while (*pp != e) pp = &(*pp)->next;
            *pp = NULL;
            P->early.tail = NULL;
            for (Early *q = P->early.head; q; q = q->next) P->early.tail = q;
        }
        early_free(e);
    }
    P->in_req = NULL;
    P->in_early = NULL;
    P->in_payload = 0;
    P->in_hdr_got = 0;
    P->sent = 0;
    pthread_cond_broadcast(&s->cv);
}

static void peer_lose_errno(SockComm *s, int p, const char *doing) {
    char why[256];
    int closed = errno == ECONNRESET || errno == EPIPE;
    snprintf(why, sizeof why, "%s %s (%s) — did rank %d crash? see its log", doing,
             closed ? "failed, the connection was reset" : "failed", strerror(errno), p);
    peer_lose(s, p, why);
}

/* The payload of the message in P has fully arrived. */
static void on_payload(SockComm *s, Peer *P) {
    P->in_payload = 0;
    if (P->in_req) {
        req_ok(P->in_req);
    } else {
        Early *e = P->in_early;
        e->complete = 1;
        if (e->req) { /* claimed while arriving: deliver */
            memcpy(e->req->buf, e->buf, e->bytes);
            req_ok(e->req);
            early_free(e);
        }
    }
    P->in_req = NULL;
    P->in_early = NULL;
    pthread_cond_broadcast(&s->cv);
}

/* A header from peer p has fully arrived: pick where its payload goes. */
static void on_header(SockComm *s, int p) {
    Peer *P = &s->peers[p];
    WireHdr *h = &P->in_hdr;
    CommReq *r;
    P->in_hdr_got = 0;
    if (h->magic != WIRE_MAGIC) {
        peer_lose(s, p, "it sent a corrupt message header (is something else connected?)");
        return;
    }
    if ((r = queue_pop(&P->recvs))) {
        if (!recv_matches(&s->base, r, &h->tag, h->bytes)) {
            pthread_cond_broadcast(&s->cv);
            peer_lose(s, p, "its messages no longer line up with this rank's receives");
            return;
        }
        P->in_req = r;
        P->in_dst = r->buf;
    } else {
        Early *e = pp_calloc(1, sizeof *e);
        e->tag = h->tag;
        e->bytes = h->bytes;
        e->buf = pp_malloc(h->bytes);
        early_push(&P->early, e);
        P->in_early = e;
        P->in_dst = e->buf;
    }
    P->in_len = h->bytes;
    P->in_got = 0;
    P->in_payload = 1;
    if (P->in_len == 0) on_payload(s, P);
}

/* Read what peer p has sent (up to IO_BUDGET bytes) into headers and payloads. */
static void peer_read(SockComm *s, int p) {
    Peer *P = &s->peers[p];
    size_t budget = IO_BUDGET;
    while (!P->lost && budget > 0) {
        char *dst = P->in_payload ? P->in_dst + P->in_got : (char *)&P->in_hdr + P->in_hdr_got;
        size_t want = P->in_payload ? P->in_len - P->in_got : sizeof(WireHdr) - P->in_hdr_got;
        ssize_t k = recv(P->fd, dst, want < budget ? want : budget, MSG_DONTWAIT);
        if (k == 0) {
            char why[256];
            snprintf(why, sizeof why, "rank %d closed the connection%s — did it crash or "
                     "exit early? see its log", p,
                     P->in_payload || P->in_hdr_got ? " in the middle of a message" : "");
            peer_lose(s, p, why);
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            peer_lose_errno(s, p, "receiving");
        if (k <= 0) return;
        P->last_rx = pp_now();
        budget -= (size_t)k;
        if (!P->in_payload) {
            P->in_hdr_got += (size_t)k;
            if (P->in_hdr_got == sizeof(WireHdr)) on_header(s, p);
        } else if ((P->in_got += (size_t)k) == P->in_len) {
            on_payload(s, P);
        }
    }
}

/* Write peer p's queued sends (up to IO_BUDGET bytes), header then payload each. */
static void peer_write(SockComm *s, int p) {
    Peer *P = &s->peers[p];
    size_t budget = IO_BUDGET;
    while (!P->lost && P->sends.head && budget > 0) {
        CommReq *r = P->sends.head;
        WireHdr h = {WIRE_MAGIC, r->tag, 0, r->bytes};
        struct iovec iov[2];
        struct msghdr mh;
        ssize_t k;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        if (P->sent < sizeof h) {
            iov[0] = (struct iovec){(char *)&h + P->sent, sizeof h - P->sent};
            iov[1] = (struct iovec){r->buf, r->bytes};
            mh.msg_iovlen = 2;
        } else {
            iov[0] = (struct iovec){r->buf + (P->sent - sizeof h), r->bytes - (P->sent - sizeof h)};
            mh.msg_iovlen = 1;
        }
        k = sendmsg(P->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            peer_lose_errno(s, p, "sending");
        if (k <= 0) return;
        P->last_tx = pp_now();
        P->sent += (size_t)k;
        budget = (size_t)k < budget ? budget - (size_t)k : 0;
        if (P->sent == sizeof h + r->bytes) {
            queue_pop(&P->sends);
            P->sent = 0;
            req_ok(r);
            pthread_cond_broadcast(&s->cv);
        }
    }
}

/* The progress thread: poll every live data connection (and the wake pipe), move bytes.
 * Holds s->mu except while it sleeps in poll. */
static void *progress_main(void *arg) {
    SockComm *s = arg;
    int P = s->base.world;
    struct pollfd *pfd = pp_malloc((size_t)(P + 1) * sizeof *pfd);
    int *who = pp_malloc((size_t)(P + 1) * sizeof *who);
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        int n = 0;
        pfd[n] = (struct pollfd){s->wake[0], POLLIN, 0};
        who[n++] = -1;
        for (int p = 0; p < P; p++)
            if (p != s->base.rank && !s->peers[p].lost) {
                short ev = (short)(POLLIN | (s->peers[p].sends.head ? POLLOUT : 0));
                pfd[n] = (struct pollfd){s->peers[p].fd, ev, 0};
                who[n++] = p;
            }
        pthread_mutex_unlock(&s->mu);
        poll(pfd, (nfds_t)n, -1);
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n; i++) {
            char drain[64];
            short ev = pfd[i].revents;
            if (who[i] < 0) {
                while (ev && read(s->wake[0], drain, sizeof drain) > 0) {}
                continue;
            }
            if (ev & (POLLIN | POLLHUP | POLLERR)) peer_read(s, who[i]);
            if (ev & (POLLOUT | POLLERR)) peer_write(s, who[i]);
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(pfd);
    free(who);
    return NULL;
}

static int sock_check_peer(Comm *c, int peer, const char *op) {
    if (peer >= 0 && peer < c->world && peer != c->rank) return PP_OK;
    return comm_fail(c, "%s: no peer rank %d (this is rank %d of %d)", op, peer, c->rank,
                     c->world);
}

static int sock_isend(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                      CommReq **out) {
    SockComm *s = (SockComm *)c;
    int rc = sock_check_peer(c, peer, "isend");
    char t[160];
    *out = NULL;
    if (rc) return rc;
    pthread_mutex_lock(&s->mu);
    if (s->peers[peer].lost) {
        comm_tag_format(c, tag, t, sizeof t);
        rc = comm_fail(c, "lost connection to rank %d, cannot send (%s): %s", peer, t,
                       s->peers[peer].why);
    } else {
        *out = req_new(&s->live, REQ_SEND, peer, tag, (void *)buf, bytes);
        queue_push(&s->peers[peer].sends, *out);
    }
    pthread_mutex_unlock(&s->mu);
    if (!rc) sock_wake(s);
    return rc;
}

static int sock_irecv(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes,
                      CommReq **out) {
    SockComm *s = (SockComm *)c;
    int rc = sock_check_peer(c, peer, "irecv");
    Peer *P;
    CommReq *r;
    *out = NULL;
    if (rc) return rc;
    P = &s->peers[peer];
    pthread_mutex_lock(&s->mu);
    r = req_new(&s->live, REQ_RECV, peer, tag, buf, bytes);
    if (P->early.head) { /* its message already started arriving */
        Early *e = P->early.head;
        if (!recv_matches(c, r, &e->tag, e->bytes)) {
            peer_lose(s, peer, "its messages no longer line up with this rank's receives");
        } else if (early_pop(&P->early), e->complete) {
            memcpy(buf, e->buf, bytes);
            early_free(e);
            req_ok(r);
        } else {
            e->req = r;
            r->early = e;
        }
    } else if (P->lost) {
        req_lost(s, r, P->why);
    } else {
        queue_push(&P->recvs, r);
    }
    if (r->done && r->status != PP_OK) {
        rc = req_release(c, &s->live, r); /* fails at once: nothing to wait for */
        r = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return rc;
}

/* Fail r if its peer has been silent for timeout_s since r was posted; else set *until
 * to the moment it would be. Call with s->mu held. */
static int sock_timed_out(SockComm *s, CommReq *r, double *until) {
    Peer *P = &s->peers[r->peer];
    double last = r->type == REQ_SEND ? P->last_tx : P->last_rx;
    char t[160], why[256];
    if (last < r->posted) last = r->posted;
    *until = last + s->base.timeout_s;
    if (pp_now() < *until) return 0;
    comm_tag_format(&s->base, &r->tag, t, sizeof t);
    req_fail(r, "timed out %s rank %d (%s): %s for %g s (runtime.timeout_s) — is rank %d "
             "stuck or much slower? see its log", r->type == REQ_SEND ? "sending to" :
             "waiting for", r->peer, t, r->type == REQ_SEND ? "it accepted no data" :
             "nothing arrived", s->base.timeout_s, r->peer);
    snprintf(why, sizeof why, "this rank gave up on it after %g s of silence",
             s->base.timeout_s);
    peer_lose(s, r->peer, why);
    return 1;
}

static int sock_wait(Comm *c, CommReq *r) {
    SockComm *s = (SockComm *)c;
    int rc;
    pthread_mutex_lock(&s->mu);
    while (!r->done) {
        double until;
        struct timespec ts;
        if (sock_timed_out(s, r, &until)) break;
        until += 1e-3; /* pp_now() is CLOCK_MONOTONIC, the clock of s->cv */
        ts.tv_sec = (time_t)until;
        ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    rc = req_release(c, &s->live, r);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sock_test(Comm *c, CommReq *r, int *done) {
    SockComm *s = (SockComm *)c;
    double until;
    int rc = PP_OK;
    pthread_mutex_lock(&s->mu);
    if (!r->done) sock_timed_out(s, r, &until);
    *done = r->done;
    if (r->done) rc = req_release(c, &s->live, r);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ----------------------------------------- collectives ([Note: socket transport]) -- */

enum { COLL_ALLREDUCE = 1, COLL_PAIR_SUM, COLL_BROADCAST, COLL_BARRIER, COLL_ABORT, COLL_KEEPALIVE };

typedef struct {
    uint32_t magic, op;
    uint32_t seq, pad; /* collectives this pair completed before this one */
    uint64_t count;    /* elements (bytes for broadcast, text bytes for an abort) */
} CollHdr;

static const char *coll_name(uint32_t op) {
    switch (op) {
    case COLL_ALLREDUCE: return "allreduce";
    case COLL_PAIR_SUM: return "pair_sum";
    case COLL_BROADCAST: return "broadcast";
    case COLL_BARRIER: return "barrier";
    case COLL_KEEPALIVE: return "keep-alive";
    default: return "an unknown collective";
    }
}

static CollHdr coll_hdr(SockComm *s, int p, uint32_t op, uint64_t count) {
    CollHdr h = {COLL_MAGIC, op, s->peers[p].coll_seq, 0, count};
    return h;
}

static int coll_timeout(SockComm *s, int p, const CollHdr *mine) {
    return comm_fail(&s->base, "timed out in %s #%u: rank %d sent nothing for %g s "
                     "(runtime.timeout_s) — is it stuck, or in a different collective? "
                     "see its log", coll_name(mine->op), mine->seq, p, s->base.timeout_s);
}

/* Move bytes with peer p on its collective channel (full duplex); a failure names the
 * peer and the collective `mine`. */
static int coll_io(SockComm *s, int p, const CollHdr *mine, const void *sb, size_t sn,
                   void *rb, size_t rn) {
    char why[256];
    int io = dist_xfer(s->peers[p].coll_fd, sb, sn, rb, rn, s->base.timeout_s, why, sizeof why);
    if (io == DIST_IO_OK) return PP_OK;
    if (io == DIST_IO_TIMEOUT) return coll_timeout(s, p, mine);
    return comm_fail(&s->base, "lost connection to rank %d in %s #%u: %s — did it crash? "
                     "see its log", p, coll_name(mine->op), mine->seq, why);
}

/* Check header `got` from peer p against this rank's `mine`. An abort from rank 0
 * carries the message every rank then fails with. */
static int coll_check(SockComm *s, int p, const CollHdr *mine, const CollHdr *got) {
    if (got->magic == COLL_MAGIC && got->op == COLL_ABORT) {
        char text[PP_ERR_MAX];
        size_t len = got->count < sizeof text - 1 ? (size_t)got->count : sizeof text - 1;
        if (coll_io(s, p, mine, NULL, 0, text, len)) return PP_ERUNTIME;
        text[len] = '\0';
        return comm_fail(&s->base, "%s", text);
    }
    if (got->magic == COLL_MAGIC && got->op == mine->op && got->seq == mine->seq &&
        got->count == mine->count)
        return PP_OK;
    return comm_fail(&s->base, "collectives out of step: rank %d called %s #%u (count %llu) "
                     "while rank %d called %s #%u (count %llu) — every rank must call the "
                     "same collectives in the same order", p, coll_name(got->op), got->seq,
                     (unsigned long long)got->count, s->base.rank, coll_name(mine->op),
                     mine->seq, (unsigned long long)mine->count);
}

/* Rank 0 tells every other rank that the collective failed, with its message. */
static void coll_abort(SockComm *s) {
    size_t len = strlen(s->base.err);
    for (int r = 1; r < s->base.world; r++) {
        CollHdr h = {COLL_MAGIC, COLL_ABORT, 0, 0, len};
        if (!s->peers[r].lost && dist_xfer(s->peers[r].coll_fd, &h, sizeof h, NULL, 0, 1.0,
                                           NULL, 0) == DIST_IO_OK)
            dist_xfer(s->peers[r].coll_fd, s->base.err, len, NULL, 0, 1.0, NULL, 0);
    }
}

/* [Note: collective keep-alive] Rank 0 gathers from one rank at a time, and the other
 * ranks may enter a collective well before rank 0 does (in 1F1B rank 0 finishes its
 * step last). So that a silent rank r, and not rank 0, gets the blame, rank 0 tells
 * every other rank every timeout_s/4 while it waits for r that it is alive; they skip
 * these keep-alives while they wait for the result, and each one restarts their clock.
 * Rank 0 gives up on r after timeout_s and sends everyone its message naming r. */
static int coll_await(SockComm *s, int p, const CollHdr *mine) {
    double end = pp_now() + s->base.timeout_s, slice = s->base.timeout_s / 4;
    for (;;) {
        double left = end - pp_now();
        if (left <= 0) return coll_timeout(s, p, mine);
        struct pollfd pfd = {s->peers[p].coll_fd, POLLIN, 0};
        if (poll(&pfd, 1, (int)(1000 * (left < slice ? left : slice)) + 1) != 0)
            return PP_OK; /* data, end of file or an error: the read says which */
        for (int q = 1; q < s->base.world; q++) {
            CollHdr ka = {COLL_MAGIC, COLL_KEEPALIVE, 0, 0, 0};
            if (q != p && !s->peers[q].lost)
                dist_xfer(s->peers[q].coll_fd, &ka, sizeof ka, NULL, 0, 1.0, NULL, 0);
        }
    }
}

/* Allreduce and barrier: rank 0 gathers v from ranks 1..P-1 and adds them in rank
 * order, ((v0 + v1) + v2) + ..., then sends the sum back, so every rank ends with the
 * same bits. */
static int coll_reduce(SockComm *s, uint32_t op, double *v, int n) {
    size_t bytes = (size_t)n * sizeof *v;
    double *tmp;
    int rc = PP_OK;
    if (s->base.rank != 0) {
        CollHdr mine = coll_hdr(s, 0, op, (uint64_t)n), got;
        if ((rc = coll_io(s, 0, &mine, &mine, sizeof mine, NULL, 0)) ||
            (rc = coll_io(s, 0, &mine, v, bytes, &got, sizeof got)))
            return rc;
        while (got.magic == COLL_MAGIC && got.op == COLL_KEEPALIVE) /* rank 0 waits on another */
            if ((rc = coll_io(s, 0, &mine, NULL, 0, &got, sizeof got))) return rc;
        if ((rc = coll_check(s, 0, &mine, &got)) ||
            (rc = coll_io(s, 0, &mine, NULL, 0, v, bytes)))
            return rc;
        s->peers[0].coll_seq++;
        return PP_OK;
    }
    tmp = pp_malloc(bytes);
    for (int r = 1; r < s->base.world && rc == PP_OK; r++) {
        CollHdr mine = coll_hdr(s, r, op, (uint64_t)n), got;
        if ((rc = coll_await(s, r, &mine)) || (rc = coll_io(s, r, &mine, NULL, 0, &got, sizeof got)) ||
            (rc = coll_check(s, r, &mine, &got)) ||
            (rc = coll_io(s, r, &mine, NULL, 0, tmp, bytes)))
            break;
        for (int i = 0; i < n; i++) v[i] += tmp[i];
    }
    free(tmp);
    if (rc) {
        coll_abort(s);
        return rc;
    }
    for (int r = 1; r < s->base.world && rc == PP_OK; r++) {
        CollHdr mine = coll_hdr(s, r, op, (uint64_t)n);
        rc = coll_io(s, r, &mine, &mine, sizeof mine, NULL, 0);
        if (!rc) rc = coll_io(s, r, &mine, v, bytes, NULL, 0);
        s->peers[r].coll_seq++;
    }
    return rc;
}

static int sock_allreduce_sum_f64(Comm *c, double *v, int n) {
    if (n < 0) return comm_fail(c, "allreduce_sum_f64: negative count %d", n);
    return coll_reduce((SockComm *)c, COLL_ALLREDUCE, v, n);
}

static int sock_barrier(Comm *c) { return coll_reduce((SockComm *)c, COLL_BARRIER, NULL, 0); }

static int sock_broadcast(Comm *c, int root, void *buf, size_t bytes) {
    SockComm *s = (SockComm *)c;
    int rc = PP_OK;
    if (root < 0 || root >= c->world)
        return comm_fail(c, "broadcast: no root rank %d (world %d)", root, c->world);
    if (c->rank != root) {
        CollHdr mine = coll_hdr(s, root, COLL_BROADCAST, bytes), got;
        if ((rc = coll_io(s, root, &mine, NULL, 0, &got, sizeof got)) ||
            (rc = coll_check(s, root, &mine, &got)) ||
            (rc = coll_io(s, root, &mine, NULL, 0, buf, bytes)))
            return rc;
        s->peers[root].coll_seq++;
        return PP_OK;
    }
    for (int r = 0; r < c->world && rc == PP_OK; r++) {
        CollHdr mine;
        if (r == root) continue;
        mine = coll_hdr(s, r, COLL_BROADCAST, bytes);
        rc = coll_io(s, r, &mine, &mine, sizeof mine, NULL, 0);
        if (!rc) rc = coll_io(s, r, &mine, buf, bytes, NULL, 0);
        s->peers[r].coll_seq++;
    }
    return rc;
}

/* Both ranks swap buf in chunks and add. IEEE addition is commutative and exactly
 * rounded, so both get the same bits, except that which NaN payload survives depends
 * on the operand order, which the compiler may swap: any NaN becomes the canonical
 * quiet NaN, so even NaNs agree bit for bit. */
static int sock_pair_sum_f32(Comm *c, int peer, float *buf, size_t n) {
    SockComm *s = (SockComm *)c;
    CollHdr mine, got;
    const float canon_nan = __builtin_nanf(""); /* 0x7fc00000 */
    int rc = sock_check_peer(c, peer, "pair_sum_f32");
    if (rc) return rc;
    mine = coll_hdr(s, peer, COLL_PAIR_SUM, n);
    if ((rc = coll_io(s, peer, &mine, &mine, sizeof mine, &got, sizeof got)) ||
        (rc = coll_check(s, peer, &mine, &got)))
        return rc;
    for (size_t off = 0; off < n; off += COLL_CHUNK) {
        size_t len = n - off < COLL_CHUNK ? n - off : COLL_CHUNK;
        float *b = buf + off, *t = s->scratch;
        if ((rc = coll_io(s, peer, &mine, b, len * sizeof *b, t, len * sizeof *t))) return rc;
        for (size_t i = 0; i < len; i++) {
            float x = b[i] + t[i];
            b[i] = x == x ? x : canon_nan;
        }
    }
    s->peers[peer].coll_seq++;
    return PP_OK;
}

/* ------------------------------------------------------------------- lifecycle -- */

/* Free s; the progress thread must not be running. */
static void sock_free(SockComm *s) {
    for (int p = 0; p < s->base.world; p++) {
        Peer *P = &s->peers[p];
        Early *e;
        if (p == s->base.rank) continue;
        if (P->fd >= 0) close(P->fd);
        if (P->coll_fd >= 0) close(P->coll_fd);
        while ((e = early_pop(&P->early))) early_free(e);
        if (P->in_early && P->in_early->req) early_free(P->in_early); /* claimed: unlisted */
    }
    while (s->live) {
        CommReq *r = s->live;
        s->live = r->next_live;
        free(r);
    }
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->peers);
    free(s->scratch);
    free(s);
}

static void sock_destroy(Comm *c) {
    SockComm *s = (SockComm *)c;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    sock_wake(s);
    pthread_join(s->thread, NULL);
    sock_free(s);
}

static const CommOps sock_ops = {
    "socket", sock_isend, sock_irecv, sock_wait, sock_test, sock_allreduce_sum_f64,
    sock_pair_sum_f32, sock_broadcast, sock_barrier, sock_destroy,
};

int comm_socket_create(DistMesh *m, double timeout_s, Comm **out, char *err, size_t n) {
    SockComm *s = pp_calloc(1, sizeof *s);
    pthread_condattr_t ca;
    *out = NULL;
    s->base.ops = &sock_ops;
    s->base.rank = m->rank;
    s->base.world = m->world;
    s->base.timeout_s = timeout_s;
    s->peers = pp_calloc((size_t)m->world, sizeof *s->peers);
    for (int p = 0; p < m->world; p++) {
        s->peers[p].fd = m->data_fd[p];
        s->peers[p].coll_fd = m->coll_fd[p];
        m->data_fd[p] = m->coll_fd[p] = -1;
    }
    dist_mesh_close(m);
    s->scratch = pp_malloc(COLL_CHUNK * sizeof(float));
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of pp_now */
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->wake[0] = s->wake[1] = -1;
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
        pthread_create(&s->thread, NULL, progress_main, s) != 0) {
        int rc = pp_errf(err, n, PP_ERUNTIME, "cannot start the socket transport: %s",
                         strerror(errno));
        sock_free(s);
        return rc;
    }
    *out = &s->base;
    return PP_OK;
}

/* ------------------------------------------------------------- local transport -- */

typedef struct {
    Comm base;
    ReqQueue recvs; /* posted, nothing sent for them yet */
    EarlyList sent; /* sent (copied), not yet received */
    CommReq *live;
} LocalComm;

static int local_check_peer(Comm *c, int peer, const char *op) {
    return peer == 0 ? PP_OK : comm_fail(c, "%s: no rank %d in a 1-rank run", op, peer);
}

static int local_isend(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                       CommReq **out) {
    LocalComm *l = (LocalComm *)c;
    CommReq *rr;
    *out = NULL;
    if (local_check_peer(c, peer, "isend")) return PP_ERUNTIME;
    if ((rr = queue_pop(&l->recvs))) {
        if (recv_matches(c, rr, tag, bytes)) { /* else rr's wait reports the mismatch */
            memcpy(rr->buf, buf, bytes);
            req_ok(rr);
        }
    } else {
        Early *e = pp_calloc(1, sizeof *e);
        e->tag = *tag;
        e->bytes = bytes;
        e->buf = pp_malloc(bytes);
        memcpy(e->buf, buf, bytes);
        e->complete = 1;
        early_push(&l->sent, e);
    }
    *out = req_new(&l->live, REQ_SEND, 0, tag, (void *)buf, bytes);
    req_ok(*out);
    return PP_OK;
}

static int local_irecv(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes,
                       CommReq **out) {
    LocalComm *l = (LocalComm *)c;
    CommReq *r;
    Early *e;
    *out = NULL;
    if (local_check_peer(c, peer, "irecv")) return PP_ERUNTIME;
    r = req_new(&l->live, REQ_RECV, 0, tag, buf, bytes);
    if (!(e = early_pop(&l->sent))) {
        queue_push(&l->recvs, r);
    } else {
        if (recv_matches(c, r, &e->tag, e->bytes)) {
            memcpy(buf, e->buf, bytes);
            req_ok(r);
        }
        early_free(e);
        if (r->status != PP_OK) return req_release(c, &l->live, r);
    }
    *out = r;
    return PP_OK;
}

static int local_wait(Comm *c, CommReq *r) {
    LocalComm *l = (LocalComm *)c;
    if (!r->done) { /* a pending receive: only a later send of this rank could match */
        char t[160];
        CommReq **pp = &l->recvs.head;
        while (*pp != r) pp = &(*pp)->next;
        *pp = r->next;
        l->recvs.tail = NULL;
        for (CommReq *q = l->recvs.head; q; q = q->next) l->recvs.tail = q;
        comm_tag_format(c, &r->tag, t, sizeof t);
        req_fail(r, "receive of (%s) can never complete: nothing was sent for it and a "
                 "1-rank run has no other rank to send it — the schedule is out of order", t);
    }
    return req_release(c, &l->live, r);
}

static int local_test(Comm *c, CommReq *r, int *done) {
    *done = r->done;
    return r->done ? req_release(c, &((LocalComm *)c)->live, r) : PP_OK;
}

static int local_allreduce(Comm *c, double *v, int n) { return PP_OK; }
static int local_barrier(Comm *c) { return PP_OK; }

static int local_pair_sum(Comm *c, int peer, float *buf, size_t n) {
    return comm_fail(c, "pair_sum_f32: no peer rank %d in a 1-rank run", peer);
}

static int local_broadcast(Comm *c, int root, void *buf, size_t bytes) {
    return local_check_peer(c, root, "broadcast");
}

static void local_destroy(Comm *c) {
    LocalComm *l = (LocalComm *)c;
    Early *e;
    while ((e = early_pop(&l->sent))) early_free(e);
    while (l->live) {
        CommReq *r = l->live;
        l->live = r->next_live;
        free(r);
    }
    free(l);
}

static const CommOps local_ops = {
    "local", local_isend, local_irecv, local_wait, local_test, local_allreduce,
    local_pair_sum, local_broadcast, local_barrier, local_destroy,
};

Comm *comm_local_create(void) {
    LocalComm *l = pp_calloc(1, sizeof *l);
    l->base.ops = &local_ops;
    l->base.rank = 0;
    l->base.world = 1;
    return &l->base;
}

int comm_create(const DistEnv *env, const char *config_text, double timeout_s, Comm **out,
                char *err, size_t errlen) {
    DistMesh m;
    int rc;
    *out = NULL;
    if (env->world == 1) {
        *out = comm_local_create();
        (*out)->timeout_s = timeout_s;
        return PP_OK;
    }
    if ((rc = dist_connect(env, config_text, timeout_s, &m, err, errlen))) return rc;
    return comm_socket_create(&m, timeout_s, out, err, errlen);
}
