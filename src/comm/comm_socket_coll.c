/* comm_socket_coll.c — the socket transport's collectives, on each pair's collective
 * channel ([Note: socket transport] in comm_socket.c), for the job and for its groups. */
#include "comm_socket_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* [Note: socket collectives]
 * Every collective but broadcast, the 2-rank float all-reduce, reduce-scatter and
 * all-gather (rings: [Note: socket ring collectives]) runs through the group's rank 0
 * (the root): each other member sends it a CollHdr and its input; the
 * root takes them in rank order, adds (or places) them, then sends every member its
 * result. So sums are ((v0 + v1) + v2) + ..., computed once, and every rank gets the
 * same bits. Float sums use comm.c's helpers and make NaNs canonical at the end, as
 * the memory transport does. On 2 ranks the float all-reduce is one full-duplex swap,
 * chunk by chunk, and each rank adds: v0 + v1 on both (IEEE addition is commutative
 * and exactly rounded; NaN payloads are made canonical), half the time of going
 * through the root.
 * The float collectives carry megabytes, more than a socket holds, so a member must
 * never sit blocked in a send the root is not reading (no byte would move, and it
 * would blame the root when the root is waiting on someone else): a member sends its
 * header, waits for the root's go-ahead (sent once every member's header is in, with
 * keep-alives meanwhile, [Note: collective keep-alive]), then uploads while watching
 * for an abort, and the root reads the uploads a chunk from each member in turn.
 * The f64 all-reduce, barrier and split carry a few values and send at once.
 * A member's connection is addressed by its rank in the job; sequence numbers count
 * per group and member; the header carries the group id, so a group's collective
 * never matches another group's. A failed collective may leave a pair's stream out of
 * step: later collectives of that pair then fail ("out of step"), never read garbage. */

#define COLL_MAGIC 0x63777070u /* "ppwc" */

enum { COLL_ALLREDUCE = 1, COLL_ALLREDUCE_F32, COLL_REDUCE_SCATTER, COLL_ALL_GATHER,
       COLL_BROADCAST, COLL_BARRIER, COLL_SPLIT, COLL_ABORT, COLL_KEEPALIVE };

typedef struct {
    uint32_t magic, op;
    uint32_t seq, pad; /* collectives this pair completed in the group before this one */
    uint64_t count;    /* elements (bytes for broadcast, text bytes for an abort) */
    uint64_t gid;      /* the group */
} CollHdr;

static const char *coll_name(uint32_t op) {
    switch (op) {
    case COLL_ALLREDUCE: return "allreduce";
    case COLL_ALLREDUCE_F32: return "allreduce_f32";
    case COLL_REDUCE_SCATTER: return "reduce_scatter";
    case COLL_ALL_GATHER: return "all_gather";
    case COLL_BROADCAST: return "broadcast";
    case COLL_BARRIER: return "barrier";
    case COLL_SPLIT: return "split";
    case COLL_KEEPALIVE: return "keep-alive";
    default: return "an unknown collective";
    }
}

static int coll_fd(const SockComm *s, int r) { return s->net->peers[s->ranks[r]].coll_fd; }

/* The header of this rank's part in a collective with member r. */
static CollHdr coll_hdr(const SockComm *s, int r, uint32_t op, uint64_t count) {
    CollHdr h = {COLL_MAGIC, op, s->coll_seq[r], 0, count, s->gid};
    return h;
}

/* Give up on member r, silent in the collective `mine` (why: what the probe found):
 * the failure names it, and it is marked lost ([Note: blame] in comm_socket_blame.c). */
static int coll_timeout(SockComm *s, int r, const CollHdr *mine, const char *why) {
    char msg[PP_ERR_MAX], lose[PP_ERR_MAX / 2];
    snprintf(msg, sizeof msg, "timed out in %s #%u%s: rank %d sent nothing for %g s "
             "(runtime.timeout_s) and %s — or is it in a different collective? see its log",
             coll_name(mine->op), mine->seq, s->name, s->ranks[r], s->base.timeout_s, why);
    snprintf(lose, sizeof lose, "rank %d gave up on it in %s #%u: it sent nothing for %g s "
             "and %s", s->net->rank, coll_name(mine->op), mine->seq, s->base.timeout_s, why);
    sock_member_failed(s, r, 0, lose);
    sock_blame(s, s->ranks[r], msg, s->base.err, sizeof s->base.err);
    return PP_ERUNTIME;
}

/* The status of a transfer with member r in the collective `mine` (io: dist_xfer's
 * result other than a timeout, why: its reason); a failure names the member and the
 * collective, after the first failure if that was another rank's. */
static int coll_io_status(SockComm *s, int r, const CollHdr *mine, int io, const char *why) {
    char msg[PP_ERR_MAX], lose[PP_ERR_MAX / 2];
    if (io == DIST_IO_OK) return PP_OK;
    snprintf(msg, sizeof msg, "lost connection to rank %d in %s #%u%s: %s — did it crash? "
             "see its log", s->ranks[r], coll_name(mine->op), mine->seq, s->name, why);
    snprintf(lose, sizeof lose, "its collective connection failed in %s #%u: %s",
             coll_name(mine->op), mine->seq, why);
    sock_member_failed(s, r, io == DIST_IO_CLOSED, lose);
    sock_blame(s, s->ranks[r], msg, s->base.err, sizeof s->base.err);
    return PP_ERUNTIME;
}

/* Move bytes with member r on its collective channel (full duplex) — with until_recv,
 * only until rb is full, *sent saying how much of sb went out — by the deadline
 * timeout_s (plus transfer time) from now, extended only while r answers probes that
 * it is blocked on another rank ([Note: blame]). Once r is gone for good
 * (sock_member_gone) it fails as soon as nothing more arrives: what r sent before it
 * went is still read. */
static int coll_move(SockComm *s, int r, const CollHdr *mine, const void *sb, size_t sn,
                     size_t *sent, void *rb, size_t rn, int until_recv) {
    double base = dist_deadline(s->base.timeout_s, sn + rn);
    size_t so = 0, ro = 0;
    char why[PP_ERR_MAX / 4], gone_why[PP_ERR_MAX / 4];
    SockWatch w;
    int rc;
    sock_watch_begin(s->net, &w, s->ranks[r]);
    for (;;) {
        double until, slice;
        size_t moved = so + ro;
        int io, gone = sock_member_gone(s, r, gone_why, sizeof gone_why);
        if (sock_watch_check(s->net, &w, base, &until, why, sizeof why)) {
            rc = coll_timeout(s, r, mine, why);
            break;
        }
        /* wake now and then to see whether r is gone, soon when it is or is probed */
        slice = pp_now() + (gone || w.ping_at > 0 ? 0.05 : 0.25);
        io = dist_xfer_part(coll_fd(s, r), sb, sn, &so, rb, rn, &ro, until_recv,
                            until < slice ? until : slice, why, sizeof why);
        if (io != DIST_IO_TIMEOUT) {
            rc = coll_io_status(s, r, mine, io, why);
            break;
        }
        if (gone && so + ro == moved) {
            rc = coll_io_status(s, r, mine, DIST_IO_ERROR, gone_why);
            break;
        }
    }
    sock_watch_end(s->net);
    if (sent) *sent = so;
    return rc;
}

static int coll_io(SockComm *s, int r, const CollHdr *mine, const void *sb, size_t sn,
                   void *rb, size_t rn) {
    return coll_move(s, r, mine, sb, sn, NULL, rb, rn, 0);
}

/* Check header `got` from member r against this rank's `mine`. An abort from the root
 * carries the message every rank then fails with. */
static int coll_check(SockComm *s, int r, const CollHdr *mine, const CollHdr *got) {
    if (got->magic == COLL_MAGIC && got->op == COLL_ABORT) {
        char text[PP_ERR_MAX];
        size_t len = got->count < sizeof text - 1 ? (size_t)got->count : sizeof text - 1;
        if (coll_io(s, r, mine, NULL, 0, text, len)) return PP_ERUNTIME;
        text[len] = '\0';
        return comm_fail(&s->base, "%s", text);
    }
    if (got->magic == COLL_MAGIC && got->op == mine->op && got->seq == mine->seq &&
        got->count == mine->count && got->gid == mine->gid)
        return PP_OK;
    return comm_fail(&s->base, "collectives out of step: rank %d called %s #%u (count %llu)"
                     "%s while rank %d called %s #%u (count %llu)%s — every rank must call "
                     "the same collectives in the same order", s->ranks[r],
                     coll_name(got->op), got->seq, (unsigned long long)got->count,
                     got->gid != mine->gid ? " in another group" : "", s->net->rank,
                     coll_name(mine->op), mine->seq, (unsigned long long)mine->count,
                     s->name);
}

/* The root tells every other member that the collective failed, with its message. */
static void coll_abort(SockComm *s) {
    size_t len = strlen(s->base.err);
    for (int r = 1; r < s->base.world; r++) {
        CollHdr h = {COLL_MAGIC, COLL_ABORT, 0, 0, len, s->gid};
        if (!sock_member_lost(s, r) &&
            dist_xfer(coll_fd(s, r), &h, sizeof h, NULL, 0, 1.0, NULL, 0) == DIST_IO_OK)
            dist_xfer(coll_fd(s, r), s->base.err, len, NULL, 0, 1.0, NULL, 0);
    }
}

/* [Note: collective keep-alive] The root gathers from one member at a time, and the
 * others may enter a collective well before the root does (in 1F1B rank 0 finishes its
 * step last). So that a silent member r, and not the root, gets the blame, the root
 * tells every other member every timeout_s/4 while it waits for r that it is alive;
 * they skip these keep-alives while they wait for the result, and each one restarts
 * their clock (a keep-alive is a whole message: the deadline of the wait that read it
 * is over). The root gives up on r after timeout_s — later if r, probed, says it is
 * blocked on another rank ([Note: blame] in comm_socket_blame.c) — and sends everyone
 * its message naming r. */
static int coll_await(SockComm *s, int r, const CollHdr *mine) {
    double base = pp_now() + s->base.timeout_s, slice = s->base.timeout_s / 4;
    char why[PP_ERR_MAX / 4];
    SockWatch w;
    int rc = PP_OK;
    sock_watch_begin(s->net, &w, s->ranks[r]);
    for (;;) {
        double until, left;
        int gone = sock_member_gone(s, r, why, sizeof why);
        struct pollfd pfd = {coll_fd(s, r), POLLIN, 0};
        if (!gone && sock_watch_check(s->net, &w, base, &until, why, sizeof why)) {
            rc = coll_timeout(s, r, mine, why);
            break;
        }
        left = gone ? 0.05 : until - pp_now();
        left = (w.ping_at > 0 || gone) && left > 0.05 ? 0.05 : left < slice ? left : slice;
        if (poll(&pfd, 1, (int)(1000 * left) + 1) != 0)
            break; /* data, end of file or an error: the read says which */
        if (gone) { /* and nothing came from it */
            rc = coll_io_status(s, r, mine, DIST_IO_ERROR, why);
            break;
        }
        for (int q = 1; q < s->base.world; q++) {
            CollHdr ka = {COLL_MAGIC, COLL_KEEPALIVE, 0, 0, 0, s->gid};
            if (q != r && !sock_member_lost(s, q))
                dist_xfer(coll_fd(s, q), &ka, sizeof ka, NULL, 0, 1.0, NULL, 0);
        }
    }
    sock_watch_end(s->net);
    return rc;
}

/* A member: *got holds a header from the root; read on past keep-alives (the root
 * waits on another member) and check the first other one. */
static int leaf_check_hdr(SockComm *s, const CollHdr *mine, CollHdr *got) {
    int rc;
    while (got->magic == COLL_MAGIC && got->op == COLL_KEEPALIVE)
        if ((rc = coll_io(s, 0, mine, NULL, 0, got, sizeof *got))) return rc;
    return coll_check(s, 0, mine, got);
}

/* A member's part of a small collective through the root: send the header and
 * up[0..up_n) at once, then take the root's header and down[0..down_n). */
static int leaf_small(SockComm *s, uint32_t op, uint64_t count, const void *up, size_t up_n,
                      void *down, size_t down_n) {
    CollHdr mine = coll_hdr(s, 0, op, count), got;
    int rc;
    if ((rc = coll_io(s, 0, &mine, &mine, sizeof mine, NULL, 0)) ||
        (rc = coll_io(s, 0, &mine, up, up_n, &got, sizeof got)) ||
        (rc = leaf_check_hdr(s, &mine, &got)) ||
        (rc = coll_io(s, 0, &mine, NULL, 0, down, down_n)))
        return rc;
    s->coll_seq[0]++;
    return PP_OK;
}

/* The root: wait for member r's header of this collective and check it. */
static int root_take_hdr(SockComm *s, int r, const CollHdr *mine) {
    CollHdr got;
    int rc;
    if ((rc = coll_await(s, r, mine)) || (rc = coll_io(s, r, mine, NULL, 0, &got, sizeof got)))
        return rc;
    return coll_check(s, r, mine, &got);
}

/* The root: send member r its header and result. */
static int root_give(SockComm *s, int r, uint32_t op, uint64_t count, const void *data,
                     size_t n) {
    CollHdr mine = coll_hdr(s, r, op, count);
    int rc = coll_io(s, r, &mine, &mine, sizeof mine, NULL, 0);
    if (!rc) rc = coll_io(s, r, &mine, data, n, NULL, 0);
    s->coll_seq[r]++;
    return rc;
}

/* The root's part after gathering: on failure tell the members, else send each its
 * result (the same buffer, or block r of it when per_rank). */
static int root_answer(SockComm *s, int rc, uint32_t op, uint64_t count, const void *res,
                       size_t n, int per_rank) {
    if (rc) {
        coll_abort(s);
        return rc;
    }
    for (int r = 1; r < s->base.world && rc == PP_OK; r++)
        rc = root_give(s, r, op, count, (const char *)res + (per_rank ? r * n : 0), n);
    return rc;
}

/* Allreduce, barrier and split's exchange: v[n] <- ((v0 + v1) + v2) + ... */
static int coll_reduce_f64(SockComm *s, uint32_t op, double *v, int n) {
    size_t bytes = (size_t)n * sizeof *v;
    double *tmp;
    int rc = PP_OK;
    if (s->base.rank != 0) return leaf_small(s, op, (uint64_t)n, v, bytes, v, bytes);
    tmp = pp_malloc(bytes ? bytes : 1);
    for (int r = 1; r < s->base.world && rc == PP_OK; r++) {
        CollHdr mine = coll_hdr(s, r, op, (uint64_t)n);
        if ((rc = root_take_hdr(s, r, &mine)) || (rc = coll_io(s, r, &mine, NULL, 0, tmp, bytes)))
            break;
        for (int i = 0; i < n; i++) v[i] += tmp[i];
    }
    free(tmp);
    return root_answer(s, rc, op, (uint64_t)n, v, bytes, 0);
}

int sock_allreduce_sum_f64(Comm *c, double *v, int n) {
    if (n < 0) return comm_fail(c, "allreduce_sum_f64: negative count %d", n);
    return coll_reduce_f64((SockComm *)c, COLL_ALLREDUCE, v, n);
}

int sock_barrier(Comm *c) { return coll_reduce_f64((SockComm *)c, COLL_BARRIER, NULL, 0); }

/* Two ranks: swap buf in chunks and add ([Note: socket collectives]). */
static int pair_sum_f32(SockComm *s, float *buf, size_t n) {
    int peer = 1 - s->base.rank, rc;
    CollHdr mine = coll_hdr(s, peer, COLL_ALLREDUCE_F32, n), got;
    if ((rc = coll_io(s, peer, &mine, &mine, sizeof mine, &got, sizeof got)) ||
        (rc = coll_check(s, peer, &mine, &got)))
        return rc;
    for (size_t off = 0; off < n; off += COLL_CHUNK) {
        size_t len = n - off < COLL_CHUNK ? n - off : COLL_CHUNK;
        float *b = buf + off;
        if ((rc = coll_io(s, peer, &mine, b, len * sizeof *b, s->scratch, len * sizeof *b)))
            return rc;
        comm_add_f32(b, s->scratch, len);
        comm_canon_nan_f32(b, len);
    }
    s->coll_seq[peer]++;
    return PP_OK;
}

/* A member's part of a float collective through the root: its header, the root's
 * go-ahead (skipping keep-alives), then up[up_n] — cut short if the root aborts
 * meanwhile — and the root's header and down[down_n]. */
static int leaf_f32(SockComm *s, uint32_t op, uint64_t count, const float *up, size_t up_n,
                    float *down, size_t down_n) {
    CollHdr mine = coll_hdr(s, 0, op, count), got;
    size_t sent;
    int rc;
    if ((rc = coll_io(s, 0, &mine, &mine, sizeof mine, &got, sizeof got)) ||
        (rc = leaf_check_hdr(s, &mine, &got)) || /* the go-ahead */
        (rc = coll_move(s, 0, &mine, up, up_n * sizeof *up, &sent, &got, sizeof got, 1)) ||
        (rc = coll_check(s, 0, &mine, &got)) || /* the result's header, or an abort */
        (rc = coll_io(s, 0, &mine, NULL, 0, down, down_n * sizeof *down)))
        return rc;
    s->coll_seq[0]++;
    return PP_OK;
}

typedef void (*TakeF32)(void *ctx, int r, size_t off, const float *x, size_t len);

/* The root's gathering of a float collective: every member's header in rank order
 * (with keep-alives), the go-ahead to all, then n floats from each, chunk by chunk and
 * in rank order within a chunk, handed to take (so that every member's upload moves,
 * and the sums stay in rank order). On failure the members get its message. */
static int root_gather_f32(SockComm *s, uint32_t op, uint64_t count, size_t n, TakeF32 take,
                           void *ctx) {
    int W = s->base.world, rc = PP_OK;
    for (int r = 1; r < W && rc == PP_OK; r++) {
        CollHdr mine = coll_hdr(s, r, op, count);
        rc = root_take_hdr(s, r, &mine);
    }
    for (int r = 1; r < W && rc == PP_OK; r++) {
        CollHdr go = coll_hdr(s, r, op, count);
        rc = coll_io(s, r, &go, &go, sizeof go, NULL, 0);
    }
    for (size_t off = 0; off < n && rc == PP_OK; off += COLL_CHUNK) {
        size_t len = n - off < COLL_CHUNK ? n - off : COLL_CHUNK;
        for (int r = 1; r < W && rc == PP_OK; r++) {
            CollHdr mine = coll_hdr(s, r, op, count);
            if (!(rc = coll_io(s, r, &mine, NULL, 0, s->scratch, len * sizeof(float))))
                take(ctx, r, off, s->scratch, len);
        }
    }
    if (rc) coll_abort(s);
    return rc;
}

static void take_add(void *acc, int r, size_t off, const float *x, size_t len) {
    comm_add_f32((float *)acc + off, x, len);
}

int sock_allreduce_sum_f32(Comm *c, float *buf, size_t n) {
    SockComm *s = (SockComm *)c;
    int rc;
    if (c->world == 2) return pair_sum_f32(s, buf, n);
    if (c->rank != 0) return leaf_f32(s, COLL_ALLREDUCE_F32, n, buf, n, buf, n);
    if ((rc = root_gather_f32(s, COLL_ALLREDUCE_F32, n, n, take_add, buf))) return rc;
    comm_canon_nan_f32(buf, n);
    return root_answer(s, PP_OK, COLL_ALLREDUCE_F32, n, buf, n * sizeof *buf, 0);
}

/* ---- ring reduce-scatter and all-gather ([Note: socket ring collectives]) -------
 * [Note: socket ring collectives] Reduce-scatter and all-gather run on the ring
 * 0 -> 1 -> ... -> W-1 -> 0 of the group ([Note: ring all-reduce] in comm_ring.h: the
 * same block order and the same sums, ((v[q+1] + v[q+2]) + ...) + v[q] for block q),
 * on the collective channels: each rank sends to its successor and receives from its
 * predecessor at the same time, so each link carries (W-1)/W of the data instead of the
 * root's link carrying all of it. A rank first swaps headers along the ring (its
 * predecessor's is checked as every collective's is), then moves W-1 blocks, chunk by
 * chunk. A rank never blocks in a send: one poll loop writes to the successor and reads
 * from the predecessor until both are done, so a ring of full socket buffers drains.
 * A silent predecessor is watched and blamed as a silent root would be ([Note: blame]);
 * a successor that stops reading fails the send at its deadline, named. */

/* Send sb[sn] to member `to` and receive rb[rn] from member `from` together, by the
 * deadline timeout_s (plus transfer time) from now, extended only while `from`, probed,
 * says it is blocked on another rank. */
static int ring_move(SockComm *s, int to, const void *sb, size_t sn, int from, void *rb,
                     size_t rn, const CollHdr *mine) {
    int fdo = coll_fd(s, to), fdi = coll_fd(s, from), rc = PP_OK;
    double base = dist_deadline(s->base.timeout_s, sn + rn);
    size_t so = 0, ro = 0;
    char why[PP_ERR_MAX / 4];
    SockWatch w;
    sock_watch_begin(s->net, &w, s->ranks[from]);
    while (so < sn || ro < rn) {
        double until;
        if (ro < rn && sock_watch_check(s->net, &w, base, &until, why, sizeof why)) {
            rc = coll_timeout(s, from, mine, why);
            break;
        }
        if (ro == rn && pp_now() > base) {
            rc = coll_timeout(s, to, mine, "did not read what this rank sent it");
            break;
        }
        if (ro < rn && sock_member_gone(s, from, why, sizeof why)) {
            rc = coll_io_status(s, from, mine, DIST_IO_ERROR, why);
            break;
        }
        struct pollfd p[2] = {{fdo, so < sn ? POLLOUT : 0, 0}, {fdi, ro < rn ? POLLIN : 0, 0}};
        if (poll(p, 2, 50) < 0 && errno != EINTR) {
            rc = coll_io_status(s, from, mine, DIST_IO_ERROR, strerror(errno));
            break;
        }
        if (ro < rn && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t k = recv(fdi, (char *)rb + ro, rn - ro, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                rc = coll_io_status(s, from, mine, k == 0 ? DIST_IO_CLOSED : DIST_IO_ERROR,
                                    k == 0 ? "connection closed by the peer" : strerror(errno));
                break;
            }
            if (k > 0) ro += (size_t)k;
        }
        if (so < sn && (p[0].revents & (POLLOUT | POLLHUP | POLLERR))) {
            ssize_t k = send(fdo, (const char *)sb + so, sn - so, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                rc = coll_io_status(s, to, mine, DIST_IO_ERROR, strerror(errno));
                break;
            }
            if (k > 0) so += (size_t)k;
        }
    }
    sock_watch_end(s->net);
    return rc;
}

/* The ring's header swap: send ours to the successor, check the predecessor's. */
static int ring_begin(SockComm *s, uint32_t op, uint64_t count, int next, int prev, CollHdr *mine) {
    CollHdr to = coll_hdr(s, next, op, count), got;
    int rc;
    *mine = coll_hdr(s, prev, op, count);
    if ((rc = ring_move(s, next, &to, sizeof to, prev, &got, sizeof got, mine))) return rc;
    return coll_check(s, prev, mine, &got);
}

static void ring_end(SockComm *s, int next, int prev) {
    s->coll_seq[next]++;
    if (prev != next) s->coll_seq[prev]++;
}

/* One ring step of block length n: send sb to the successor, receive into rb (add sb2,
 * this rank's own part, when add), chunk by chunk through the scratch when adding. */
static int ring_step(SockComm *s, int next, int prev, const CollHdr *mine, const float *sb,
                     float *rb, const float *own, size_t n) {
    for (size_t off = 0; off < n || (n == 0 && off == 0); off += COLL_CHUNK) {
        size_t len = n - off < COLL_CHUNK ? n - off : COLL_CHUNK;
        float *dst = own ? s->scratch : rb + off;
        int rc = ring_move(s, next, sb + off, len * sizeof(float), prev, dst,
                           len * sizeof(float), mine);
        if (rc) return rc;
        if (own) { /* the predecessor's partial sum, then this rank's part */
            memcpy(rb + off, s->scratch, len * sizeof(float));
            comm_add_f32(rb + off, own + off, len);
        }
        if (n == 0) break;
    }
    return PP_OK;
}

static int ring_mod(int a, int W) { return ((a % W) + W) % W; }

int sock_reduce_scatter_sum_f32(Comm *c, const float *send, float *recv, size_t count) {
    SockComm *s = (SockComm *)c;
    int W = c->world, me = c->rank;
    int next = ring_mod(me + 1, W), prev = ring_mod(me - 1, W), rc;
    CollHdr mine;
    if (W == 1) {
        memcpy(recv, send, count * sizeof *recv);
        comm_canon_nan_f32(recv, count);
        return PP_OK;
    }
    if ((rc = ring_begin(s, COLL_REDUCE_SCATTER, count, next, prev, &mine))) return rc;
    /* step k sends block (me-k-1) — this rank's own at k = 0, else the partial sum it
     * received at k-1 — and receives block (me-k-2), adding its own part of it; the last
     * block received is block me, summed into recv */
    float *buf = pp_malloc(2 * (count ? count : 1) * sizeof *buf), *part[2] = {buf, buf + count};
    const float *out = send + (size_t)ring_mod(me - 1, W) * count;
    for (int k = 0; k < W - 1 && rc == PP_OK; k++) {
        int rb = ring_mod(me - k - 2, W);
        float *in = k == W - 2 ? recv : part[k % 2];
        rc = ring_step(s, next, prev, &mine, out, in, send + (size_t)rb * count, count);
        out = in;
    }
    free(buf);
    if (rc) return rc;
    comm_canon_nan_f32(recv, count);
    ring_end(s, next, prev);
    return PP_OK;
}

int sock_all_gather_f32(Comm *c, const float *send, float *recv, size_t count) {
    SockComm *s = (SockComm *)c;
    int W = c->world, me = c->rank;
    int next = ring_mod(me + 1, W), prev = ring_mod(me - 1, W), rc;
    CollHdr mine;
    memcpy(recv + (size_t)me * count, send, count * sizeof *recv);
    if (W == 1) return PP_OK;
    if ((rc = ring_begin(s, COLL_ALL_GATHER, count, next, prev, &mine))) return rc;
    for (int k = 0; k < W - 1 && rc == PP_OK; k++) /* send block me-k, receive block me-k-1 */
        rc = ring_step(s, next, prev, &mine, recv + (size_t)ring_mod(me - k, W) * count,
                       recv + (size_t)ring_mod(me - k - 1, W) * count, NULL, count);
    if (rc) return rc;
    ring_end(s, next, prev);
    return PP_OK;
}

int sock_broadcast(Comm *c, int root, void *buf, size_t bytes) {
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
        s->coll_seq[root]++;
        return PP_OK;
    }
    for (int r = 0; r < c->world && rc == PP_OK; r++)
        if (r != root) rc = root_give(s, r, COLL_BROADCAST, bytes, buf, bytes);
    return rc;
}

/* A group's id, the same on its members: from its parent's id, the parent's split
 * count and the color (members of one split with different colors share no rank, so
 * only groups of different splits must differ: 64-bit mixing makes a clash as likely
 * as 2^-64 per pair of groups). 0 is the job's. */
static uint64_t group_id(uint64_t parent, uint32_t nsplit, int color) {
    uint64_t x = parent ^ (0x9E3779B97F4A7C15ull * ((uint64_t)nsplit + 1)) ^
                 ((uint64_t)(uint32_t)color << 32);
    for (int i = 0; i < 2; i++) { /* splitmix64's finalizer */
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
    }
    return x ? x : 1;
}

/* Every rank's (color, key) reach every rank through one allreduce of doubles (exact
 * for ints), then each rank builds its group from the same plan. */
int sock_split(Comm *c, int color, int key, Comm **out) {
    SockComm *s = (SockComm *)c;
    int W = c->world, rc, n, index;
    double *v = pp_calloc(2 * (size_t)W, sizeof *v);
    int *col = pp_malloc(3 * (size_t)W * sizeof *col), *k = col + W, *members = col + 2 * W;
    *out = NULL;
    v[2 * c->rank] = color < 0 ? -1 : color;
    v[2 * c->rank + 1] = key;
    rc = coll_reduce_f64(s, COLL_SPLIT, v, 2 * W);
    if (rc == PP_OK) {
        for (int r = 0; r < W; r++) {
            col[r] = (int)v[2 * r];
            k[r] = (int)v[2 * r + 1];
        }
        n = comm_split_plan(W, col, k, c->rank, members, &index);
        for (int i = 0; i < n; i++) members[i] = s->ranks[members[i]];
        if (n > 0)
            *out = &sock_group_new(s, group_id(s->gid, s->nsplit, col[c->rank]), members, n,
                                   index)->base;
        s->nsplit++;
    }
    free(v);
    free(col);
    return rc;
}
