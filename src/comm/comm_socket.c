/* comm_socket.c — the socket transport behind comm.h: a TCP full mesh with one progress
 * thread for point-to-point messages, shared by the job's Comm and its groups. The
 * collectives are in comm_socket_coll.c. */
#define _GNU_SOURCE /* pipe2 */
#include "comm_socket_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_net.h"

/* [Note: socket transport]
 * dist_connect gives every pair of ranks two TCP connections, which the job's Comm and
 * every group split from it share (a SockNet; each group has an id, `gid`).
 * - The data channel carries point-to-point messages, each a WireHdr (tag, byte count,
 *   group id) followed by the payload. Only the progress thread touches it: it writes
 *   each peer's queued sends in order, and reads whatever arrives, straight into the
 *   oldest receive posted for that peer in that group (its Lane) when there is one,
 *   else into a buffer of its own (an "early" message, copied out when its receive is
 *   posted). So a send never waits for the receiver to post, and two ranks that both
 *   send before they receive cannot deadlock. The n-th message from a peer in a group
 *   matches the n-th receive posted for it in that group (FIFO).
 * - The collective channel carries the collectives (comm_socket_coll.c) and is driven
 *   by the calling thread alone, so a collective can neither consume nor queue behind a
 *   point-to-point message. Each collective message starts with a CollHdr (operation,
 *   group id, per-pair sequence number, count): ranks that call different collectives
 *   fail with a message instead of exchanging garbage.
 * - Between messages the data channel also carries small control messages (a WireHdr
 *   with CTRL_MAGIC and up to CTRL_TEXT bytes of text): probes and their answers, the
 *   report of a lost rank, goodbye ([Note: blame] in comm_socket_blame.c), heartbeats
 *   after a quiet spell ([Note: heartbeat], ibid.). They are
 *   written only at a message boundary and never count as a peer's progress.
 * - Every header is checked before anything is allocated for its payload: a data
 *   message longer than its group's max_message_bytes (comm.h) marks the peer lost.
 * Failure: a closed or reset connection marks the peer lost and fails every request on
 * it at once, in every group; a wait whose peer completed no message for timeout_s
 * (and, probed, does not say it is blocked on another rank), or sent no byte at all, not
 * even a heartbeat, for timeout_s, fails with a timeout and marks the peer lost too
 * (shutting the connection, so that the peer learns promptly).
 * Messages that fully arrived before the loss can still be received.
 * Destroying a Comm detaches its requests: a queued send or receive is dropped, a send
 * already on the wire is finished from a copy (the stream must stay whole), a receive
 * being filled is read on into a buffer that is then freed. The connections and the
 * thread go with the last Comm.
 * Byte order is the host's: every rank runs the same binary. */

#define IO_BUDGET (8u << 20)   /* bytes moved per peer per progress round (fairness) */

static void sock_wake(SockNet *n) {
    ssize_t k = write(n->wake[1], "", 1); /* full pipe = a wake-up is already pending */
    (void)k;
}

static Lane *lane_find(Peer *P, uint64_t gid) {
    Lane *l = P->lanes;
    while (l && l->gid != gid) l = l->next;
    return l;
}

/* The lane of group gid, made on first use (a message may come before its group is). */
static Lane *lane_get(Peer *P, uint64_t gid) {
    Lane *l = lane_find(P, gid);
    if (!l) {
        l = pp_calloc(1, sizeof *l);
        l->gid = gid;
        l->max_bytes = COMM_MAX_MESSAGE_DEFAULT; /* until its Comm says (sock_irecv) */
        l->next = P->lanes;
        P->lanes = l;
    }
    return l;
}

/* Free the send r of a destroyed Comm, which finished from its copy. */
static void orphan_free(CommReq *r) {
    free(r->owned);
    free(r);
}

static void req_lost(const SockNet *n, CommReq *r, const char *why) {
    char t[160], msg[PP_ERR_MAX], out[PP_ERR_MAX];
    comm_tag_format(r->owner, &r->tag, t, sizeof t);
    snprintf(msg, sizeof msg, "lost connection to rank %d while %s (%s): %s", r->peer,
             r->type == REQ_SEND ? "sending" : "waiting to receive", t, why);
    sock_blame_text(n, r->peer, msg, out, sizeof out);
    comm_req_fail(r, "%s", out);
}

/* Whether anything of this rank's is under way with peer P: a send, a posted receive, a
 * message half read. */
static int peer_busy(const Peer *P) {
    if (P->sends.head || P->in_payload || P->in_hdr_got) return 1;
    for (const Lane *l = P->lanes; l; l = l->next)
        if (l->recvs.head) return 1;
    return 0;
}

/* Before this rank drops p, tell p itself why (a CTRL_LOST naming p), so that p does not
 * take this rank's closing for a failure of this rank's ([Note: blame]). Best effort:
 * only at a message boundary, and without waiting. */
static void tell_dropped(SockNet *n, int p, const char *why) {
    Peer *P = &n->peers[p];
    if (P->sent != 0 || P->ctrl_sent != 0 || n->stopping) return;
    sock_ctrl_push(n, p, CTRL_LOST, p, 0, why);
    if (send(P->fd, P->ctrl, P->ctrl_len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* it is dropped either way */
    }
}

void sock_peer_lose(SockNet *n, int p, const char *why) {
    Peer *P = &n->peers[p];
    CommReq *r;
    if (P->lost) return;
    /* a first failure, reported to the others ([Note: blame]) — unless p said goodbye
     * and leaves nothing of this rank's broken (it finished its part), or p gave up on
     * this rank (p's report of that is the one the others get) */
    if (!P->dropped_me && (!P->bye || peer_busy(P))) sock_origin_set(n, p, why, -1);
    tell_dropped(n, p, why);
    P->lost = 1;
    snprintf(P->why, sizeof P->why, "%s", why);
    shutdown(P->fd, SHUT_RDWR);
    while ((r = comm_queue_pop(&P->sends))) {
        req_lost(n, r, why);
        if (r->owned) orphan_free(r);
    }
    for (Lane *l = P->lanes; l; l = l->next)
        while ((r = comm_queue_pop(&l->recvs))) req_lost(n, r, why);
    if (P->in_req) req_lost(n, P->in_req, why);
    if (P->in_early) {
        Early *e = P->in_early;
        if (e->req) req_lost(n, e->req, why);                           /* claimed: unlisted */
        else if (!e->discard) comm_early_remove(&P->in_lane->early, e); /* incomplete */
        comm_early_free(e);
    }
    P->in_req = NULL;
    P->in_early = NULL;
    P->in_lane = NULL;
    P->in_payload = 0;
    P->in_ctrl = 0;
    P->in_hdr_got = 0;
    P->sent = 0;
    P->ctrl_len = P->ctrl_sent = 0;
    pthread_cond_broadcast(&n->cv);
}

static void peer_lose_errno(SockNet *n, int p, const char *doing) {
    char why[256];
    int closed = errno == ECONNRESET || errno == EPIPE;
    snprintf(why, sizeof why, "%s %s (%s) — did rank %d crash? see its log", doing,
             closed ? "failed, the connection was reset" : "failed", strerror(errno), p);
    sock_peer_lose(n, p, why);
}

void sock_ctrl_push(SockNet *n, int p, int op, int rank, int ms, const char *text) {
    Peer *P = &n->peers[p];
    size_t len = text ? strlen(text) : 0;
    WireHdr h;
    if (p == n->rank || P->lost) return;
    if (len > CTRL_TEXT) len = CTRL_TEXT;
    memset(&h, 0, sizeof h);
    h.magic = CTRL_MAGIC;
    h.tag = (CommTag){op, rank, ms, 0};
    h.bytes = len;
    if (P->ctrl_len + sizeof h + len > CTRL_BUF && P->ctrl_sent > 0) { /* compact */
        memmove(P->ctrl, P->ctrl + P->ctrl_sent, P->ctrl_len - P->ctrl_sent);
        P->ctrl_len -= P->ctrl_sent;
        P->ctrl_sent = 0;
    }
    if (P->ctrl_len + sizeof h + len > CTRL_BUF) return; /* full: a probe is repeated */
    memcpy(P->ctrl + P->ctrl_len, &h, sizeof h);
    if (len) memcpy(P->ctrl + P->ctrl_len + sizeof h, text, len);
    P->ctrl_len += sizeof h + len;
    sock_wake(n);
}

/* The payload of the message in P (peer p) has fully arrived. */
static void on_payload(SockNet *n, int p) {
    Peer *P = &n->peers[p];
    P->in_payload = 0;
    if (P->in_ctrl) {
        P->in_ctrl = 0;
        P->ctrl_in[P->in_len] = '\0';
        sock_on_ctrl(n, p);
        return;
    }
    P->last_rx = pp_now();
    if (P->in_req) {
        comm_req_ok(P->in_req);
    } else {
        Early *e = P->in_early;
        e->complete = 1;
        if (e->req) { /* claimed while arriving: deliver */
            memcpy(e->req->buf, e->buf, e->bytes);
            comm_req_ok(e->req);
            comm_early_free(e);
        } else if (e->discard) {
            comm_early_free(e);
        }
    }
    P->in_req = NULL;
    P->in_early = NULL;
    P->in_lane = NULL;
    pthread_cond_broadcast(&n->cv);
}

/* A header from peer p has fully arrived: pick where its payload goes. */
static void on_header(SockNet *n, int p) {
    Peer *P = &n->peers[p];
    WireHdr *h = &P->in_hdr;
    Lane *l;
    CommReq *r;
    char why[256];
    P->in_hdr_got = 0;
    if (h->magic == CTRL_MAGIC && h->bytes <= CTRL_TEXT) {
        P->in_ctrl = 1;
        P->in_dst = P->ctrl_in;
        P->in_len = h->bytes;
        P->in_got = 0;
        P->in_payload = 1;
        if (P->in_len == 0) on_payload(n, p);
        return;
    }
    if (h->magic != WIRE_MAGIC) {
        sock_peer_lose(n, p, "it sent a corrupt message header (is something else connected?)");
        return;
    }
    l = lane_get(P, h->gid);
    if (h->bytes > l->max_bytes) { /* before anything is allocated for it */
        snprintf(why, sizeof why, "it sent a message header claiming %llu bytes, more than "
                 "the %zu a message may have (Comm.max_message_bytes) — a corrupt stream, "
                 "or not a pptrain rank of this job?", (unsigned long long)h->bytes,
                 l->max_bytes);
        sock_peer_lose(n, p, why);
        return;
    }
    if ((r = comm_queue_pop(&l->recvs))) {
        if (!comm_recv_matches(r->owner, n->rank, r, &h->tag, h->bytes)) {
            pthread_cond_broadcast(&n->cv);
            sock_peer_lose(n, p, "its messages no longer line up with this rank's receives");
            return;
        }
        P->in_req = r;
        P->in_dst = r->buf;
    } else {
        Early *e = comm_early_try_new(&h->tag, h->bytes);
        if (!e) {
            snprintf(why, sizeof why, "out of memory for its message of %llu bytes",
                     (unsigned long long)h->bytes);
            sock_peer_lose(n, p, why);
            return;
        }
        comm_early_push(&l->early, e);
        P->in_early = e;
        P->in_lane = l;
        P->in_dst = e->buf;
    }
    P->in_len = h->bytes;
    P->in_got = 0;
    P->in_payload = 1;
    if (P->in_len == 0) on_payload(n, p);
}

/* Read what peer p has sent (up to IO_BUDGET bytes) into headers and payloads. */
static void peer_read(SockNet *n, int p) {
    Peer *P = &n->peers[p];
    size_t budget = IO_BUDGET;
    while (!P->lost && budget > 0) {
        char *dst = P->in_payload ? P->in_dst + P->in_got : (char *)&P->in_hdr + P->in_hdr_got;
        size_t want = P->in_payload ? P->in_len - P->in_got : sizeof(WireHdr) - P->in_hdr_got;
        ssize_t k = recv(P->fd, dst, want < budget ? want : budget, MSG_DONTWAIT);
        if (k == 0) {
            char why[PP_ERR_MAX / 2], gave_up[360];
            snprintf(gave_up, sizeof gave_up, ": it gave up on this rank (%.320s)",
                     P->dropped_why);
            snprintf(why, sizeof why, "rank %d closed the connection%s%s", p,
                     P->in_payload || P->in_hdr_got ? " in the middle of a message" : "",
                     P->dropped_me ? gave_up
                     : P->bye      ? " (it was closing down: it finished, or stopped on an "
                                     "error of its own — see its log)"
                                   : " — did it crash or exit early? see its log");
            sock_peer_lose(n, p, why);
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            peer_lose_errno(n, p, "receiving");
        if (k <= 0) return;
        P->last_heard = pp_now();
        budget -= (size_t)k;
        if (!P->in_payload) {
            P->in_hdr_got += (size_t)k;
            if (P->in_hdr_got == sizeof(WireHdr)) on_header(n, p);
        } else if ((P->in_got += (size_t)k) == P->in_len) {
            on_payload(n, p);
        }
    }
}

/* Write peer p's control messages, which wait for a message boundary. Returns 1 when
 * none is left. */
static int ctrl_write(SockNet *n, int p) {
    Peer *P = &n->peers[p];
    while (P->ctrl_sent < P->ctrl_len) {
        ssize_t k = send(P->fd, P->ctrl + P->ctrl_sent, P->ctrl_len - P->ctrl_sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            peer_lose_errno(n, p, "sending");
        if (k <= 0) return 0;
        P->last_wrote = pp_now();
        P->ctrl_sent += (size_t)k;
    }
    P->ctrl_len = P->ctrl_sent = 0;
    pthread_cond_broadcast(&n->cv); /* sock_destroy waits for this */
    return 1;
}

/* Write peer p's queued sends (up to IO_BUDGET bytes), header then payload each. */
static void peer_write(SockNet *n, int p) {
    Peer *P = &n->peers[p];
    size_t budget = IO_BUDGET;
    while (!P->lost && budget > 0) {
        if (P->sent == 0 && P->ctrl_len > 0 && !ctrl_write(n, p)) return;
        if (P->lost || !P->sends.head) return;
        CommReq *r = P->sends.head;
        WireHdr h = {WIRE_MAGIC, r->tag, 0, r->bytes, r->gid};
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
            peer_lose_errno(n, p, "sending");
        if (k <= 0) return;
        P->last_wrote = pp_now();
        P->sent += (size_t)k;
        budget = (size_t)k < budget ? budget - (size_t)k : 0;
        if (P->sent == sizeof h + r->bytes) {
            comm_queue_pop(&P->sends);
            P->sent = 0;
            P->last_tx = pp_now();
            comm_req_ok(r);
            if (r->owned) orphan_free(r);
            pthread_cond_broadcast(&n->cv);
        }
    }
}

/* Queue a heartbeat for every live peer that this rank has written nothing to for
 * sock_beat_every ([Note: heartbeat]); returns the poll() timeout in ms until the next
 * one is due. A peer with control messages still queued (a stuck message in front of
 * them, or a link down) gets no more: its POLLOUT wakes the thread when they move. */
static int beat_peers(SockNet *n) {
    double now = pp_now(), every = sock_beat_every(n), next = now + every;
    for (int p = 0; p < n->world; p++) {
        Peer *P = &n->peers[p];
        if (p == n->rank || P->lost || P->ctrl_len > 0) continue;
        if (P->last_wrote + every <= now)
            sock_ctrl_push(n, p, CTRL_BEAT, n->rank, 0, NULL);
        else if (P->last_wrote + every < next)
            next = P->last_wrote + every;
    }
    return (int)((next - now) * 1000) + 1;
}

/* The progress thread: poll every live data connection (and the wake pipe), move bytes,
 * beat. Holds n->mu except while it sleeps in poll. */
static void *progress_main(void *arg) {
    SockNet *n = arg;
    int P = n->world;
    struct pollfd *pfd = pp_malloc((size_t)(P + 1) * sizeof *pfd);
    int *who = pp_malloc((size_t)(P + 1) * sizeof *who);
    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        sock_stall_note(n, pp_now()); /* [Note: stopped]: a stop while it was awake */
        int k = 0, ms = beat_peers(n);
        pfd[k] = (struct pollfd){n->wake[0], POLLIN, 0};
        who[k++] = -1;
        for (int p = 0; p < P; p++)
            if (p != n->rank && !n->peers[p].lost) {
                short ev = (short)(POLLIN | (n->peers[p].sends.head || n->peers[p].ctrl_len
                                                 ? POLLOUT : 0));
                pfd[k] = (struct pollfd){n->peers[p].fd, ev, 0};
                who[k++] = p;
            }
        n->poll_due = pp_now() + ms / 1000.0;
        pthread_mutex_unlock(&n->mu);
        poll(pfd, (nfds_t)k, ms);
        pthread_mutex_lock(&n->mu);
        sock_stall_note(n, pp_now()); /* before anything read counts as heard */
        n->poll_due = pp_now(); /* awake since: it runs on, and a stop now shows later */
        for (int i = 0; i < k; i++) {
            char drain[64];
            short ev = pfd[i].revents;
            if (who[i] < 0) {
                while (ev && read(n->wake[0], drain, sizeof drain) > 0) {}
                continue;
            }
            sock_stall_note(n, pp_now()); /* a stop since it woke: before this peer's bytes */
            if (ev & (POLLIN | POLLHUP | POLLERR)) peer_read(n, who[i]);
            if (ev & (POLLOUT | POLLERR)) peer_write(n, who[i]);
        }
    }
    pthread_mutex_unlock(&n->mu);
    free(pfd);
    free(who);
    return NULL;
}

/* ------------------------------------------------------------- point to point -- */

static int sock_check_peer(Comm *c, int peer, const char *op) {
    if (peer >= 0 && peer < c->world && peer != c->rank) return PP_OK;
    return comm_fail(c, "%s: no peer rank %d (this is rank %d of %d)", op, peer, c->rank,
                     c->world);
}

static int sock_isend(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                      CommReq **out) {
    SockComm *s = (SockComm *)c;
    SockNet *n = s->net;
    int rc = sock_check_peer(c, peer, "isend"), g;
    char t[160];
    *out = NULL;
    if (rc) return rc;
    g = s->ranks[peer];
    pthread_mutex_lock(&n->mu);
    if (n->peers[g].lost) {
        char msg[PP_ERR_MAX];
        sock_origin_set(n, g, n->peers[g].why, -1); /* it leaves this send undone */
        comm_tag_format(c, tag, t, sizeof t);
        snprintf(msg, sizeof msg, "lost connection to rank %d, cannot send (%s): %s", g, t,
                 n->peers[g].why);
        sock_blame_text(n, g, msg, c->err, sizeof c->err);
        rc = PP_ERUNTIME;
    } else {
        *out = comm_req_new(c, &s->live, REQ_SEND, g, tag, (void *)buf, bytes);
        (*out)->gid = s->gid;
        comm_queue_push(&n->peers[g].sends, *out);
    }
    pthread_mutex_unlock(&n->mu);
    if (!rc) sock_wake(n);
    return rc;
}

static int sock_irecv(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes,
                      CommReq **out) {
    SockComm *s = (SockComm *)c;
    SockNet *n = s->net;
    int rc = sock_check_peer(c, peer, "irecv"), g;
    Peer *P;
    Lane *l;
    CommReq *r;
    *out = NULL;
    if (rc) return rc;
    g = s->ranks[peer];
    P = &n->peers[g];
    pthread_mutex_lock(&n->mu);
    l = lane_get(P, s->gid);
    l->max_bytes = c->max_message_bytes;
    r = comm_req_new(c, &s->live, REQ_RECV, g, tag, buf, bytes);
    if (l->early.head) { /* its message already started arriving */
        Early *e = l->early.head;
        if (!comm_recv_matches(c, n->rank, r, &e->tag, e->bytes)) {
            sock_peer_lose(n, g, "its messages no longer line up with this rank's receives");
        } else if (comm_early_pop(&l->early), e->complete) {
            memcpy(buf, e->buf, bytes);
            comm_early_free(e);
            comm_req_ok(r);
        } else {
            e->req = r;
            r->early = e;
            P->in_lane = NULL; /* claimed: no longer in the lane's list */
        }
    } else if (P->lost) {
        sock_origin_set(n, g, P->why, -1); /* it leaves this receive undone */
        req_lost(n, r, P->why);
    } else {
        comm_queue_push(&l->recvs, r);
    }
    if (r->done && r->status != PP_OK) {
        rc = comm_req_release(c, &s->live, r); /* fails at once: nothing to wait for */
        r = NULL;
    }
    pthread_mutex_unlock(&n->mu);
    *out = r;
    return rc;
}

/* When the wait for r runs out of patience, unless its peer's answers extend it:
 * timeout_s after r was posted or after the last whole message that passed to or from
 * its peer, whichever is later, plus the transfer time allowed for a message in flight
 * (DIST_MIN_RATE). Bytes alone do not move it. Call with the lock held. */
static double req_deadline(const SockComm *s, const CommReq *r) {
    const Peer *P = &s->net->peers[r->peer];
    double last = r->type == REQ_SEND ? P->last_tx : P->last_rx;
    size_t flight = r->type == REQ_SEND ? (P->sends.head ? P->sends.head->bytes : 0)
                                        : (P->in_payload ? P->in_len : 0);
    if (last < r->posted) last = r->posted;
    return last + s->base.timeout_s + (double)flight / DIST_MIN_RATE;
}

/* Fail r for silence (why: what the probe found) and give up on its peer. Call with
 * the lock held. */
static void req_timeout(SockComm *s, CommReq *r, const char *why) {
    char t[160], msg[PP_ERR_MAX], out[PP_ERR_MAX], lose[PP_ERR_MAX / 2];
    comm_tag_format(&s->base, &r->tag, t, sizeof t);
    snprintf(msg, sizeof msg, "timed out %s rank %d (%s): %s for %g s (runtime.timeout_s) "
             "and %s — see rank %d's log", r->type == REQ_SEND ? "sending to" : "waiting for",
             r->peer, t, r->type == REQ_SEND ? "it accepted no data" : "nothing arrived",
             s->base.timeout_s, why, r->peer);
    sock_blame_text(s->net, r->peer, msg, out, sizeof out);
    comm_req_fail(r, "%s", out);
    snprintf(lose, sizeof lose, "rank %d gave up on it: nothing arrived for %g s and %s",
             s->net->rank, s->base.timeout_s, why);
    sock_peer_lose(s->net, r->peer, lose);
}

static int sock_wait(Comm *c, CommReq *r) {
    SockComm *s = (SockComm *)c;
    SockNet *n = s->net;
    SockWatch w;
    int rc;
    pthread_mutex_lock(&n->mu);
    sock_watch_begin_locked(n, &w, r->peer);
    while (!r->done) {
        double until;
        char why[PP_ERR_MAX / 4];
        struct timespec ts;
        if (sock_watch_check_locked(n, &w, req_deadline(s, r), &until, why, sizeof why)) {
            req_timeout(s, r, why);
            break;
        }
        until += 1e-3; /* pp_now() is CLOCK_MONOTONIC, the clock of the condition */
        ts.tv_sec = (time_t)until;
        ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
    n->block_on = -1;
    rc = comm_req_release(c, &s->live, r);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* Without probing, a request fails for silence only once no wait would have waited on:
 * its deadline plus the longest extension a wait may earn. */
static int sock_test(Comm *c, CommReq *r, int *done) {
    SockComm *s = (SockComm *)c;
    int rc = PP_OK;
    pthread_mutex_lock(&s->net->mu);
    if (!r->done && pp_now() > req_deadline(s, r) + sock_watch_span(s->net))
        req_timeout(s, r, "it has not answered for much longer");
    *done = r->done;
    if (r->done) rc = comm_req_release(c, &s->live, r);
    pthread_mutex_unlock(&s->net->mu);
    return rc;
}

static int sock_group_call(Comm *c) { return PP_OK; } /* isend never blocks: nothing to batch */

int sock_member_lost(SockComm *s, int r) {
    int lost;
    pthread_mutex_lock(&s->net->mu);
    lost = s->net->peers[s->ranks[r]].lost;
    pthread_mutex_unlock(&s->net->mu);
    return lost;
}

int sock_member_gone(SockComm *s, int r, char *why, size_t n) {
    const Peer *P = &s->net->peers[s->ranks[r]];
    int gone;
    pthread_mutex_lock(&s->net->mu);
    gone = P->lost && !P->bye;
    if (gone) snprintf(why, n, "%s", P->why);
    pthread_mutex_unlock(&s->net->mu);
    return gone;
}

/* CommOps.peer_state: what this rank knows of member r from its connection alone. */
static int sock_peer_state(Comm *c, int r, double silent_s, char *why, size_t len) {
    SockComm *s = (SockComm *)c;
    const Peer *P;
    int st = 0;
    if (r < 0 || r >= c->world || r == c->rank) return 0;
    P = &s->net->peers[s->ranks[r]];
    pthread_mutex_lock(&s->net->mu);
    if (P->lost) {
        st = 1;
        snprintf(why, len, "%s", P->why);
    } else if (sock_stall_note(s->net, pp_now()) <= SOCK_STALL_OVERDUE && /* [Note: stopped] */
               pp_now() - P->last_heard - sock_stall_within(s->net, P->last_heard) > silent_s) {
        st = 2;
        snprintf(why, len, "nothing at all came from it, not even a heartbeat, for %.3g s",
                 pp_now() - P->last_heard);
    }
    pthread_mutex_unlock(&s->net->mu);
    return st;
}

/* CommOps.blocked_on: whom the caller blocks on, or last blocked on; two plain int reads,
 * without the lock (a signal handler may call it). */
static int sock_blocked_on(const Comm *c) {
    const SockNet *n = ((const SockComm *)c)->net;
    int b = __atomic_load_n(&n->block_on, __ATOMIC_RELAXED);
    return b >= 0 ? b : __atomic_load_n(&n->block_last, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ lifecycle -- */

/* The numeric address of fd's peer into host; "" over loopback (the peer runs on this
 * host). */
static void peer_host(int fd, char *host, size_t n) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    host[0] = '\0';
    if (fd >= 0 && getpeername(fd, (struct sockaddr *)&ss, &len) == 0 &&
        dist_addr_is_loopback((const struct sockaddr *)&ss))
        return;
    if (fd >= 0) dist_peer_host(fd, host, n);
    if (!host[0]) snprintf(host, n, "(address unknown)");
}

/* Free the net; the progress thread must not be running, every Comm is destroyed. */
static void net_free(SockNet *n) {
    for (int p = 0; p < n->world; p++) {
        Peer *P = &n->peers[p];
        CommReq *r;
        if (p == n->rank) continue;
        if (P->fd >= 0) close(P->fd);
        if (P->coll_fd >= 0) close(P->coll_fd);
        while ((r = comm_queue_pop(&P->sends))) orphan_free(r); /* the rest were detached */
        if (P->in_early && P->in_early->discard) comm_early_free(P->in_early); /* unlisted */
        while (P->lanes) {
            Lane *l = P->lanes;
            Early *e;
            P->lanes = l->next;
            while ((e = comm_early_pop(&l->early))) comm_early_free(e);
            free(l);
        }
    }
    if (n->wake[0] >= 0) close(n->wake[0]);
    if (n->wake[1] >= 0) close(n->wake[1]);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->cv);
    free(n->peers);
    free(n);
}

/* Receive into a buffer that is freed on arrival: r, which is being filled, is gone. */
static void recv_divert(Peer *P) {
    Early *e = comm_early_new(&P->in_hdr.tag, P->in_len);
    e->discard = 1;
    P->in_early = e;
    P->in_dst = e->buf;
    P->in_req = NULL;
}

/* Drop s's lane from peer p: its unreceived messages are freed, one still arriving is
 * read on and freed. */
static void lane_drop(Peer *P, uint64_t gid) {
    Lane *l = lane_find(P, gid), **pp = &P->lanes;
    Early *e;
    if (!l) return;
    if (P->in_lane == l) { /* P->in_early, unclaimed, still arriving */
        comm_early_remove(&l->early, P->in_early);
        P->in_early->discard = 1;
        P->in_lane = NULL;
    }
    while ((e = comm_early_pop(&l->early))) comm_early_free(e);
    while (*pp != l) pp = &(*pp)->next;
    *pp = l->next;
    free(l);
}

/* Detach every request of s and drop its lanes ([Note: socket transport]). Call with the
 * lock held. */
static void sock_detach(SockComm *s) {
    SockNet *n = s->net;
    while (s->live) {
        CommReq *r = s->live;
        Peer *P = &n->peers[r->peer];
        s->live = r->next_live;
        r->owner = NULL;
        if (!r->done && r->type == REQ_SEND) {
            if (r == P->sends.head && P->sent > 0) { /* on the wire: finish from a copy */
                r->owned = pp_malloc(r->bytes ? r->bytes : 1);
                memcpy(r->owned, r->buf, r->bytes);
                r->buf = r->owned;
                continue;
            }
            comm_queue_remove(&P->sends, r);
        } else if (!r->done && r == P->in_req) {
            recv_divert(P);
        } else if (!r->done && r->early) { /* claimed an arriving message */
            r->early->req = NULL;
            r->early->discard = 1;
        } else if (!r->done) {
            comm_queue_remove(&lane_find(P, s->gid)->recvs, r);
        }
        free(r);
    }
    for (int i = 0; i < s->base.world; i++)
        if (i != s->base.rank) lane_drop(&n->peers[s->ranks[i]], s->gid);
}

/* The last Comm is going: say goodbye to every live peer (so that its closing reads as
 * an orderly one, [Note: blame]) and give the progress thread a moment to write that and
 * any report still queued. Call with the lock held. */
static void net_goodbye(SockNet *n) {
    double end = pp_now() + 0.2;
    int pending = 1;
    n->stopping = 1;
    for (int p = 0; p < n->world; p++) sock_ctrl_push(n, p, CTRL_BYE, n->rank, 0, NULL);
    while (pending && pp_now() < end) {
        struct timespec ts;
        double until = end;
        pending = 0;
        for (int p = 0; p < n->world; p++)
            pending |= p != n->rank && !n->peers[p].lost && n->peers[p].ctrl_len > 0;
        if (!pending) break;
        ts.tv_sec = (time_t)until;
        ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
}

static void sock_destroy(Comm *c) {
    SockComm *s = (SockComm *)c;
    SockNet *n = s->net;
    int last;
    pthread_mutex_lock(&n->mu);
    sock_detach(s);
    last = --n->refs == 0;
    if (last) net_goodbye(n);
    n->stop = last;
    pthread_mutex_unlock(&n->mu);
    if (last) {
        sock_wake(n);
        pthread_join(n->thread, NULL);
        net_free(n);
    }
    free(s->ranks);
    free(s->coll_seq);
    free(s->scratch);
    free(s);
}

static const CommOps sock_ops = {
    .name = "socket",
    .isend = sock_isend,
    .irecv = sock_irecv,
    .wait = sock_wait,
    .test = sock_test,
    .group_start = sock_group_call,
    .group_end = sock_group_call,
    .allreduce_sum_f64 = sock_allreduce_sum_f64,
    .allreduce_sum_f32 = sock_allreduce_sum_f32,
    .reduce_scatter_sum_f32 = sock_reduce_scatter_sum_f32,
    .all_gather_f32 = sock_all_gather_f32,
    .broadcast = sock_broadcast,
    .barrier = sock_barrier,
    .split = sock_split,
    .peer_state = sock_peer_state,
    .blocked_on = sock_blocked_on,
    .destroy = sock_destroy,
};

static SockComm *comm_new(SockNet *n, uint64_t gid, const int *global, int world, int index,
                          double timeout_s) {
    SockComm *s = pp_calloc(1, sizeof *s);
    s->base.ops = &sock_ops;
    s->base.rank = index;
    s->base.world = world;
    s->base.timeout_s = timeout_s;
    s->base.max_message_bytes = COMM_MAX_MESSAGE_DEFAULT;
    s->net = n;
    s->gid = gid;
    s->ranks = pp_malloc((size_t)world * sizeof *s->ranks);
    memcpy(s->ranks, global, (size_t)world * sizeof *s->ranks);
    s->coll_seq = pp_calloc((size_t)world, sizeof *s->coll_seq);
    s->scratch = pp_malloc(COLL_CHUNK * sizeof(float));
    if (gid) comm_group_name(global, world, s->name, sizeof s->name);
    return s;
}

SockComm *sock_group_new(SockComm *parent, uint64_t gid, const int *global, int world,
                         int index) {
    SockNet *n = parent->net;
    SockComm *s = comm_new(n, gid, global, world, index, parent->base.timeout_s);
    s->base.kind_names = parent->base.kind_names;
    s->base.n_kind_names = parent->base.n_kind_names;
    s->base.max_message_bytes = parent->base.max_message_bytes;
    pthread_mutex_lock(&n->mu);
    n->refs++;
    for (int i = 0; i < world; i++)
        if (i != index) lane_get(&n->peers[global[i]], gid)->max_bytes = s->base.max_message_bytes;
    pthread_mutex_unlock(&n->mu);
    return s;
}

int comm_socket_create(DistMesh *m, double timeout_s, Comm **out, char *err, size_t errlen) {
    SockNet *n = pp_calloc(1, sizeof *n);
    SockComm *s;
    pthread_condattr_t ca;
    int *all = pp_malloc((size_t)m->world * sizeof *all);
    *out = NULL;
    n->rank = m->rank;
    n->world = m->world;
    n->refs = 1;
    n->timeout_s = timeout_s;
    n->origin = n->block_on = n->block_last = -1;
    n->peers = pp_calloc((size_t)m->world, sizeof *n->peers);
    for (int p = 0; p < m->world; p++) {
        n->peers[p].fd = m->data_fd[p];
        n->peers[p].coll_fd = m->coll_fd[p];
        m->data_fd[p] = m->coll_fd[p] = -1;
        n->peers[p].last_heard = pp_now();
        n->peers[p].last_wrote = 0; /* a first beat at once: the peers' clocks start now */
        if (p != m->rank) {
            lane_get(&n->peers[p], 0);
            peer_host(n->peers[p].fd, n->peers[p].host, sizeof n->peers[p].host);
        }
        all[p] = p;
    }
    dist_mesh_close(m);
    s = comm_new(n, 0, all, n->world, n->rank, timeout_s);
    free(all);
    pthread_mutex_init(&n->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of pp_now */
    pthread_cond_init(&n->cv, &ca);
    pthread_condattr_destroy(&ca);
    n->wake[0] = n->wake[1] = -1;
    if (pipe2(n->wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
        pthread_create(&n->thread, NULL, progress_main, n) != 0) {
        int rc = pp_errf(err, errlen, PP_ERUNTIME, "cannot start the socket transport: %s",
                         strerror(errno));
        net_free(n);
        free(s->ranks);
        free(s->coll_seq);
        free(s->scratch);
        free(s);
        return rc;
    }
    *out = &s->base;
    return PP_OK;
}
