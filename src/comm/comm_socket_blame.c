/* comm_socket_blame.c — the socket transport's judgement of failures: which rank failed
 * first, telling the others, and probing a silent peer before blaming it. */
#include "comm_socket_internal.h"

#include <string.h>
#include <time.h>

/* [Note: blame]
 * A failure message must name the rank that actually died or went silent, on every
 * survivor, as NCCL's asynchronous error and torchrun's first-failure report do. Two
 * things get in the way: when rank 3 dies, its neighbour stops too, and a rank that
 * waited on the neighbour sees *it* close; and when rank 3 is stopped (SIGSTOP), every
 * rank waiting along a chain (0 on 1, 1 on 2, 2 on 3) runs out of patience around the
 * same time, and whoever started waiting first blames a live neighbour.
 * - First failure, propagated. The first rank that this rank loses — its connection
 *   closed or reset, or this rank gave up on it — is the job's first failure as far as
 *   this rank knows (SockNet.origin). It is reported at once to every other peer in a
 *   CTRL_LOST control message on the data channel, which is read by the progress
 *   thread whatever the main thread is doing; a rank that receives one records that
 *   origin if it has none yet and passes the report on (it does not drop the reported
 *   rank: what that rank sent it stays receivable, and a wait on it finds out for
 *   itself). A rank writes its reports before it closes its connections, and its data
 *   channel delivers them before its end of file, so a survivor learns the origin
 *   before it sees the messenger go. Every failure message about a rank other than the
 *   origin then starts with it: "rank 3 failed first (...); then lost connection to
 *   rank 2 ...". A collective that sees a connection close first waits (at most half a
 *   second) for the progress thread to reach that peer's end of file.
 * - Probes before blame. Every blocking call (wait, collectives) records the rank it is
 *   blocked on and when it will give up (SockNet.block_on/until). When a wait's own
 *   deadline passes, it sends its peer a CTRL_PING, which the peer's progress thread
 *   answers with a CTRL_PONG naming the rank it is blocked on and for how long. No
 *   answer within the grace G (timeout_s / 4, clamped to [0.25, 5] s): the peer is
 *   stopped or unreachable, and blamed. "Not blocked": it is running but not sending
 *   (stuck, or much slower), and blamed. "Blocked on this rank": the two wait for each
 *   other, and the peer is blamed with that said. "Blocked on rank r for t more
 *   seconds": the wait extends to t + G from now, by which time r's own wait will have
 *   failed and been reported — so the rank at the end of the chain, the one that waits
 *   on the silent rank itself, is the one that gives up first and reports it. A wait
 *   is extended at most to world * (timeout_s + 3 G) after it began (a cycle of waits,
 *   which the schedule's simulator rules out, cannot hang). Control messages never
 *   count as progress, so a peer that only answers probes is still silent.
 * - Dropped. A rank that gives up on a peer (silence, a broken protocol) first tells
 *   that peer, in a CTRL_LOST naming the peer itself, so that the peer takes the closing
 *   that follows for what it is, not for a failure of the rank that closed: otherwise
 *   the peer would report the wrong rank to the others, racing the right report. The
 *   dropped rank reports nothing of that closing to the others (sock_origin_set).
 * - Goodbye. The last comm_destroy of a process sends CTRL_BYE. A peer that said
 *   goodbye and then closes while nothing of this rank's is under way with it (no send,
 *   no posted receive, no half-read message) finished its part: that is no failure. If
 *   something was under way, or a later send, receive or collective needs it, it is
 *   the first failure like any other, and the message says whether it closed in an
 *   orderly way ("it finished, or stopped on an error of its own") or vanished ("did it
 *   crash?").
 * - Claims about this rank. A CTRL_LOST that names the receiving rank says only that the
 *   sender gives up on it (the Dropped case): it marks that peer's closing as no
 *   failure of the peer's, in the peer's words, and nothing more. It never makes this
 *   rank the first failure in its own messages — a rank with the job token could
 *   otherwise make rank 0 print "rank 0 failed first" about itself (issue 25, section 3).
 *   What a rank says about itself it learns from its own clock ([Note: stopped]).
 * Every message about a peer on another host ends with where it runs (its address as
 * this rank's connection sees it), and the first failure is named with its host: across
 * nodes, the host is what one needs to find the peer's log, or the link that broke.
 */

/* [Note: heartbeat]
 * A link that goes down (a cable, a switch, `ip link set down`) closes nothing: TCP
 * retransmits into the void for many minutes, so only silence can tell. A probe alone
 * is too slow for runtime.timeout_s to hold: a wait posted just after the link failed
 * would probe at its deadline and give up a grace G later — and a rank that was
 * computing when it failed would only start its timeout_s when it next waits. So each
 * progress thread writes a CTRL_BEAT to every peer it has written nothing to for G
 * (sock_beat_every), at a message boundary; a message being written is a sign of life
 * of its own, as its bytes arrive. Every byte read from a peer, beat or not, sets its
 * last_heard. A watched wait (sock_watch_check) gives up on a peer that this rank has
 * heard nothing at all from for timeout_s, whatever its own deadline: at most timeout_s
 * after the link failed, or at once if that is past when the wait begins. A peer that
 * is merely busy or blocked still beats, so this never blames the live link in a chain
 * of waits; beats never count as a message (last_rx), so a rank that only beats is
 * still silent for the rest of [Note: blame]. G is timeout_s / 4 (at most 5 s): a beat
 * or two late (a loaded machine) is no failure.
 */

/* [Note: stopped]
 * A rank that was itself stopped (SIGSTOP, a debugger, an overloaded host) for longer
 * than its peers wait has been given up on by them; when it runs again, every peer
 * looks silent to it (their beats sit unread in its sockets) and its waits are past
 * their deadlines, so it would blame a live neighbour. It notices from its own clock
 * instead: the progress thread sleeps in poll at most until n->poll_due, and a poll that
 * returns, or a wait that finds it still asleep, more than stall_min later means that
 * this process did not run in between (sock_stall_note). Awake, the thread takes a few
 * microseconds between polls: poll_due is then the time it woke, and it notes again
 * before each peer's bytes and at the top of its loop, so a stop that caught it awake
 * (more likely on a loaded host) is seen before anything it reads afterwards. Such a stall
 * - does not count against a peer: the heartbeat's silence and a wait's deadline are
 *   both extended by the part of the stall inside them (sock_stall_within), and no verdict
 *   is given while the progress thread is overdue (it may have unread bytes);
 * - when recent (stall_recent: within the longest a wait can take, sock_watch_span),
 *   heads every failure message of this rank: "rank 1 (this rank) was itself stopped or
 *   too slow (...); then " + the message (after a first failure that a peer reported
 *   before, if any); and what this rank loses then is not reported to the others as a
 *   peer's failure (sock_origin_set) — the peers already blamed this rank.
 * stall_min is timeout_s / 2: a peer gives up after timeout_s of silence, and beats are
 * grace() apart, so a shorter stall cannot be what made the job fail.
 */
static double stall_min(const SockNet *n) { return n->timeout_s / 2; }

double sock_stall_note(SockNet *n, double now) {
    double late = n->poll_due > 0 ? now - n->poll_due : 0;
    if (late >= stall_min(n)) { /* an episode's notes only grow: poll_due is the same */
        n->stall_s = late;
        n->stall_end = now;
    }
    return late;
}

double sock_stall_within(const SockNet *n, double since) {
    double begin = n->stall_end - n->stall_s;
    if (n->stall_end <= since) return 0;
    return begin < since ? n->stall_end - since : n->stall_s;
}

static int stall_recent(const SockNet *n) {
    return n->stall_end > 0 && pp_now() - n->stall_end < sock_watch_span(n) + n->timeout_s;
}

static double grace(const SockNet *n) {
    double g = n->timeout_s / 4;
    return g < 0.25 ? 0.25 : g > 5.0 ? 5.0 : g;
}

double sock_watch_span(const SockNet *n) { return n->world * (n->timeout_s + 3 * grace(n)); }

double sock_beat_every(const SockNet *n) { return grace(n); }

/* The address of rank p's host, "" when it is this host (loopback) or p no peer. */
static const char *host_of(const SockNet *n, int p) {
    return p >= 0 && p < n->world && p != n->rank ? n->peers[p].host : "";
}

void sock_origin_set(SockNet *n, int o, const char *why, int from) {
    if (n->origin >= 0 || n->stopping || o == n->rank || o < 0 || o >= n->world) return;
    /* this rank's own loss of o: o gave up on this rank, or this rank was stopped */
    if (from < 0 && (n->peers[o].dropped_me || stall_recent(n))) return;
    n->origin = o;
    if (from >= 0)
        snprintf(n->origin_why, sizeof n->origin_why, "%s, as rank %d reported", why, from);
    else
        snprintf(n->origin_why, sizeof n->origin_why, "%s", why);
    for (int p = 0; p < n->world; p++)
        if (p != o && p != from) sock_ctrl_push(n, p, CTRL_LOST, o, 0, why);
}

void sock_blame_text(const SockNet *n, int peer, const char *msg, char *out, size_t len) {
    char first[PP_ERR_MAX], self[PP_ERR_MAX / 2], where[96] = "";
    const char *ho = host_of(n, n->origin), *hp = host_of(n, peer);
    first[0] = self[0] = '\0';
    if (n->origin >= 0 && n->origin != peer)
        snprintf(first, sizeof first, "rank %d%s%s failed first (%s); then ", n->origin,
                 ho[0] ? " on host " : "", ho, n->origin_why);
    if (stall_recent(n)) /* [Note: stopped] */
        snprintf(self, sizeof self, "rank %d (this rank) was itself stopped or too slow (its "
                 "process did not run for %.1f s or more, and its peers give up after %g s "
                 "of silence, runtime.timeout_s: SIGSTOP, Ctrl-Z, a debugger, or an "
                 "overloaded host?); then ", n->rank, n->stall_s, n->timeout_s);
    if (hp[0]) snprintf(where, sizeof where, " (rank %d runs on host %s)", peer, hp);
    snprintf(out, len, "%s%s%s%s", first, self, msg, where);
}

void sock_blame(SockComm *s, int peer, const char *msg, char *out, size_t n) {
    pthread_mutex_lock(&s->net->mu);
    /* [Note: stopped] a failure this thread meets first after a stall (a send to a peer
     * that gave up) may come before the progress thread has woken to note the stall */
    sock_stall_note(s->net, pp_now());
    sock_blame_text(s->net, peer, msg, out, n);
    pthread_mutex_unlock(&s->net->mu);
}

void sock_on_ctrl(SockNet *n, int p) {
    Peer *P = &n->peers[p];
    const WireHdr *h = &P->in_hdr;
    int who = h->tag.stage;
    switch (h->tag.step) {
    case CTRL_PING: {
        double left = n->block_on >= 0 ? n->block_until - pp_now() : 0;
        left = left < 0 ? 0 : left > 1e6 ? 1e6 : left;
        sock_ctrl_push(n, p, CTRL_PONG, n->block_on, (int)(left * 1000), NULL);
        break;
    }
    case CTRL_PONG:
        P->pong_at = pp_now();
        P->pong_on = who >= -1 && who < n->world ? who : -1;
        P->pong_left = h->tag.mb > 0 ? h->tag.mb / 1000.0 : 0;
        pthread_cond_broadcast(&n->cv);
        break;
    case CTRL_LOST: /* recorded only: what who sent this rank stays receivable, and a
                     * wait on who learns for itself (its end of file, or a probe) */
        if (who >= 0 && who < n->world && who != n->rank && who != p)
            sock_origin_set(n, who, P->ctrl_in, p);
        if (who == n->rank) { /* p gave up on this rank and is closing: no failure of p's,
                               * and no first failure of this rank's ([Note: blame]) */
            P->dropped_me = P->bye = 1;
            snprintf(P->dropped_why, sizeof P->dropped_why, "%s", P->ctrl_in);
        }
        break;
    case CTRL_BYE:
        P->bye = 1;
        break;
    case CTRL_BEAT: /* its bytes set last_heard as they were read ([Note: heartbeat]) */
        break;
    default:
        break; /* a newer build's message: ignored */
    }
}

void sock_watch_begin_locked(SockNet *n, SockWatch *w, int peer) {
    memset(w, 0, sizeof *w);
    w->peer = peer;
    w->start = pp_now();
    n->block_on = n->block_last = peer;
    n->block_until = w->start + n->timeout_s + grace(n);
}

void sock_watch_begin(SockNet *n, SockWatch *w, int peer) {
    pthread_mutex_lock(&n->mu);
    sock_watch_begin_locked(n, w, peer);
    pthread_mutex_unlock(&n->mu);
}

void sock_watch_end(SockNet *n) {
    pthread_mutex_lock(&n->mu);
    n->block_on = -1;
    pthread_mutex_unlock(&n->mu);
}

/* The peer answered the probe out at w->ping_at: extend, or give up (returns 1). */
static int watch_answer(SockNet *n, SockWatch *w, double now, double *until, char *why,
                        size_t len) {
    const Peer *P = &n->peers[w->peer];
    double g = grace(n), ext = P->pong_at + P->pong_left + g;
    w->ping_at = 0;
    if (P->pong_on < 0)
        return pp_errf(why, len, 1, "it is running but has not sent it (stuck, or much "
                       "slower?)");
    if (P->pong_on == n->rank)
        return pp_errf(why, len, 1, "it is waiting for this rank too (do the ranks run the "
                       "same schedule?)");
    if (ext > w->start + sock_watch_span(n))
        return pp_errf(why, len, 1, "it is itself still waiting for rank %d", P->pong_on);
    if (ext < now + g) ext = now + g; /* its own verdict is due: give it the grace */
    w->ext = ext;
    *until = ext;
    n->block_until = ext + g;
    return 0;
}

/* sock_watch_check_locked less the heartbeat's verdict: the deadline and the probe. */
static int watch_step(SockNet *n, SockWatch *w, double base, double now, double *until,
                      char *why, size_t len) {
    const Peer *P = &n->peers[w->peer];
    double g = grace(n), deadline = base > w->ext ? base : w->ext;
    deadline += sock_stall_within(n, w->start); /* [Note: stopped] */
    if (now < deadline) { /* still patient (the peer may have moved since a probe) */
        w->ping_at = 0;
        *until = deadline;
        n->block_until = deadline + g;
        return 0;
    }
    if (w->ping_at > 0 && P->pong_at >= w->ping_at)
        return watch_answer(n, w, now, until, why, len);
    if (w->ping_at > 0 && now >= w->probe_end)
        return pp_errf(why, len, 1, "it does not answer (stopped, e.g. SIGSTOP or a debugger, "
                       "or its host unreachable?)");
    if (P->lost)
        return pp_errf(why, len, 1, "this rank had already lost its other connection to it");
    if (w->ping_at == 0) {
        sock_ctrl_push(n, w->peer, CTRL_PING, 0, 0, NULL);
        w->ping_at = now;
        w->probe_end = now + g;
    }
    *until = w->probe_end;
    n->block_until = w->probe_end;
    return 0;
}

int sock_watch_check_locked(SockNet *n, SockWatch *w, double base, double *until, char *why,
                            size_t len) {
    const Peer *P = &n->peers[w->peer];
    double now = pp_now(), quiet = P->last_heard + n->timeout_s;
    /* [Note: stopped]: let it read */
    if (!n->stop && sock_stall_note(n, now) > SOCK_STALL_OVERDUE) {
        *until = now + 0.01;
        return 0;
    }
    quiet += sock_stall_within(n, P->last_heard); /* silence while this rank did not run */
    if (!P->lost && now >= quiet) /* [Note: heartbeat] */
        return pp_errf(why, len, 1, "not even the heartbeat it sends every %g s: its host "
                       "is unreachable (a network or link down?) or the process stopped "
                       "(SIGSTOP, a debugger)", grace(n));
    if (watch_step(n, w, base, now, until, why, len)) return 1;
    if (!P->lost && *until > quiet) *until = quiet;
    return 0;
}

int sock_watch_check(SockNet *n, SockWatch *w, double base, double *until, char *why,
                     size_t len) {
    int r;
    pthread_mutex_lock(&n->mu);
    r = sock_watch_check_locked(n, w, base, until, why, len);
    pthread_mutex_unlock(&n->mu);
    return r;
}

void sock_member_failed(SockComm *s, int r, int closed, const char *why) {
    SockNet *n = s->net;
    Peer *P = &n->peers[s->ranks[r]];
    double end = pp_now() + 0.5;
    pthread_mutex_lock(&n->mu);
    while (closed && !P->lost && pp_now() < end) {
        struct timespec ts = {(time_t)end, (long)((end - (double)(time_t)end) * 1e9)};
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
    sock_peer_lose(n, s->ranks[r], why);
    sock_origin_set(n, s->ranks[r], P->why, -1); /* it broke this collective */
    pthread_mutex_unlock(&n->mu);
}
