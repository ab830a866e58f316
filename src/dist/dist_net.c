/* dist_net.c — socket helpers of the rendezvous and the transport: full-duplex transfers
 * with deadlines, connecting by a deadline, the dialer's handshake, and the door that
 * hears many pending connections at once (dist_net.h). */
#define _GNU_SOURCE /* accept4 */
#include "dist_net.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)

void dist_warn(const char *fmt, ...) {
    va_list ap;
    char line[PP_ERR_MAX];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pp_warn("%s", line);
}

int dist_poll_ms(double left) {
    return left > 1.0 ? 1000 : left > 0 ? (int)(left * 1000) + 1 : 0;
}

void dist_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    if (s > 0) nanosleep(&ts, NULL);
}

void dist_backoff(double *delay) {
    dist_sleep(*delay);
    *delay = *delay * 2 < 1.0 ? *delay * 2 : 1.0;
}

static int io_again(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

static int io_errno(char *why, size_t n) {
    int closed = errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN;
    return pp_errf(why, n, closed ? DIST_IO_CLOSED : DIST_IO_ERROR, "%s", strerror(errno));
}

/* ------------------------------------------------------------------ transfers -- */

double dist_deadline(double timeout_s, size_t bytes) {
    return pp_now() + timeout_s + (double)bytes / DIST_MIN_RATE;
}

int dist_xfer_part(int fd, const void *sbuf, size_t sn, size_t *so, void *rbuf, size_t rn,
                   size_t *ro, int until_recv, double deadline, char *why, size_t whylen) {
    const char *sp = sbuf;
    char *rp = rbuf;
    while ((*so < sn && !(until_recv && *ro == rn)) || *ro < rn) {
        struct pollfd pfd = {fd, (short)((*so < sn ? POLLOUT : 0) | (*ro < rn ? POLLIN : 0)), 0};
        double left = deadline - pp_now();
        int r;
        if (left <= 0)
            return pp_errf(why, whylen, DIST_IO_TIMEOUT, "the transfer was not done by its "
                           "deadline (%zu of %zu bytes received)", *ro, rn);
        r = poll(&pfd, 1, dist_poll_ms(left));
        if (r < 0 && errno != EINTR) return io_errno(why, whylen);
        if (r <= 0) continue;
        if (*ro < rn && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t k = recv(fd, rp + *ro, rn - *ro, MSG_DONTWAIT);
            if (k == 0)
                return pp_errf(why, whylen, DIST_IO_CLOSED, "connection closed by the peer");
            if (k < 0 && !io_again()) return io_errno(why, whylen);
            if (k > 0) *ro += (size_t)k;
        }
        if (*so < sn && (pfd.revents & (POLLOUT | POLLHUP | POLLERR))) {
            ssize_t k = send(fd, sp + *so, sn - *so, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0 && !io_again()) return io_errno(why, whylen);
            if (k > 0) *so += (size_t)k;
        }
    }
    return DIST_IO_OK;
}

int dist_xfer(int fd, const void *sbuf, size_t sn, void *rbuf, size_t rn,
              double timeout_s, char *why, size_t whylen) {
    size_t so = 0, ro = 0;
    return dist_xfer_part(fd, sbuf, sn, &so, rbuf, rn, &ro, 0, dist_deadline(timeout_s, sn + rn),
                          why, whylen);
}

int dist_xfer_until(int fd, const void *sbuf, size_t sn, size_t *sent, void *rbuf,
                    size_t rn, double timeout_s, char *why, size_t whylen) {
    size_t ro = 0;
    *sent = 0;
    return dist_xfer_part(fd, sbuf, sn, sent, rbuf, rn, &ro, 1,
                          dist_deadline(timeout_s, sn + rn), why, whylen);
}

/* ---------------------------------------------------------------- addresses -- */

void dist_addr_str(const struct sockaddr *sa, socklen_t len, char *buf, size_t n) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, n, "(unknown address)");
        return;
    }
    snprintf(buf, n, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

void dist_peer_str(int fd, char *buf, size_t n) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) snprintf(buf, n, "(unknown address)");
    else dist_addr_str((struct sockaddr *)&ss, len, buf, n);
}

void dist_peer_host(int fd, char *host, size_t n) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    host[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
        getnameinfo((struct sockaddr *)&ss, len, host, (socklen_t)n, NULL, 0, NI_NUMERICHOST);
}

int dist_addr_is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int dist_resolve(const char *host, int port, int numeric, struct addrinfo **res, char *err,
                 size_t n) {
    struct addrinfo hints;
    char serv[16];
    int rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (numeric ? AI_NUMERICHOST : 0);
    snprintf(serv, sizeof serv, "%d", port);
    rc = getaddrinfo(host, serv, &hints, res);
    if (rc != 0)
        return pp_errf(err, n, PP_ERUNTIME, "cannot resolve \"%s\": %s — check MASTER_ADDR",
                       host, gai_strerror(rc));
    return PP_OK;
}

void dist_tune_socket(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int dist_connect_by(int fd, const struct sockaddr *sa, socklen_t len, double deadline) {
    struct pollfd pfd = {fd, POLLOUT, 0};
    int soerr = 0, r = 0;
    socklen_t sl = sizeof soerr;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (connect(fd, sa, len) == 0) return 0;
    if (errno != EINPROGRESS) return errno;
    while (r == 0 && pp_now() < deadline)
        if ((r = poll(&pfd, 1, dist_poll_ms(deadline - pp_now()))) < 0 && errno == EINTR) r = 0;
    if (r <= 0) return ETIMEDOUT;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) return errno;
    return soerr;
}

int dist_auth_client(DistAuthConn *a, int fd, int purpose, const char *token, double deadline) {
    dist_auth_begin(a, 0, purpose, token);
    for (;;) {
        int r = dist_auth_step(a, fd);
        struct pollfd pfd = {fd, 0, 0};
        double left = deadline - pp_now();
        if (r != AUTH_MORE) return r;
        if (left <= 0) {
            a->fail = AUTH_IO;
            snprintf(a->err, sizeof a->err, "no answer to the connection handshake in time");
            return AUTH_FAIL;
        }
        pfd.events = dist_auth_events(a);
        if (poll(&pfd, 1, dist_poll_ms(left)) < 0 && errno != EINTR) {
            a->fail = AUTH_IO;
            snprintf(a->err, sizeof a->err, "poll: %s", strerror(errno));
            return AUTH_FAIL;
        }
    }
}

/* --------------------------------------------------------------------- doors -- */

/* [Note: a flood of connections]
 * Anyone who reaches a door's port can open connections faster than a rank finishes
 * one handshake. Issue 25: 2,000 silent connects a second at rank 0's port stopped the
 * job, because the door then held 64 pending connections and evicted the oldest, which
 * soon was the joining rank's, halfway through its hello. So that no flood can push a
 * real rank out:
 * - A pending connection is ranked by how far it has come (door_class): silent (not a
 *   byte yet), in the handshake, past the handshake of a job without a token (anyone
 *   gets that far, so its hello, taken the moment it is complete, is what counts), and
 *   proven (it proved the job token). When the table is full, the lowest goes, the
 *   oldest among equals, the newcomer included: a connection is never given up for a
 *   less advanced one, and a proven one never.
 * - A newcomer is heard at once: a real rank sends its first message as soon as it is
 *   connected, so it usually arrives in the handshake, above every silent connection.
 * - A silent connection has DOOR_FIRST_BYTE_S to send its first byte; the handshake and
 *   hello then have the rest of DIST_HANDSHAKE_S.
 * - The table holds DOOR_MAX_CONNS (half the open-file limit when that is lower), and a
 *   round accepts at most that many, so the pending ones are heard between rounds. At
 *   5,000 silent connects a second, 1,024 slots leave a newcomer 0.2 s before it is the
 *   oldest silent one. The listen backlog is as long as the kernel allows (DIST_BACKLOG),
 *   for the time before a door opens (a mesh port listens from the rendezvous on).
 * - Connections that never send a byte (a flood or a port scan: they close, stay silent
 *   or are shed before they do) and those shed to make room are counted, not logged
 *   one a line; door_run ends with one line with the counts. A connection that says
 *   something wrong (garbage, a wrong token, a forged hello) is logged with its address.
 * - A shed connection closes: the rank behind it, if any, connects again with backoff
 *   until its deadline (member_join, rdzv_member, mesh_dial in dist_rdzv.c). */

enum { DC_SILENT, DC_HANDSHAKE, DC_HELLO, DC_PROVEN };

/* How far c has come ([Note: a flood of connections]). */
static int door_class(const Door *d, const DoorConn *c) {
    if (!c->heard) return DC_SILENT;
    if (!c->authed) return DC_HANDSHAKE;
    return d->token && d->token[0] ? DC_PROVEN : DC_HELLO;
}

/* When c is dropped unless it has moved on. */
static double door_deadline(const DoorConn *c) {
    return c->since + (c->heard ? DIST_HANDSHAKE_S : DOOR_FIRST_BYTE_S);
}

static void door_close(DoorConn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->body);
    c->fd = -1;
    c->body = NULL;
}

/* Drop c with a log line saying why (DOOR_LOG_MAX of them, then only counted). */
static void door_drop(Door *d, DoorConn *c, const char *why) {
    d->dropped++;
    if (d->logged < DOOR_LOG_MAX) {
        d->logged++;
        dist_warn("dropped a connection from %s to %s: %s%s", c->addr, d->what, why,
                  d->logged == DOOR_LOG_MAX ? " (further drops are counted, not logged)" : "");
    }
    door_close(c);
}

/* Drop c without a line: it sent nothing (shed = 0) or was shed to make room. */
static void door_quiet(Door *d, DoorConn *c, int shed) {
    d->dropped++;
    if (shed) d->shed++;
    else d->silent++;
    door_close(c);
}

/* Read what c sent after the handshake: the hello's fixed part, then its body. Returns
 * 1 once complete, 0 for more, -1 after dropping it. */
static int door_hello(Door *d, DoorConn *c) {
    char why[PP_ERR_MAX / 2];
    for (;;) {
        char *dst = c->hdr_got < d->hdr_len ? (char *)c->hdr + c->hdr_got : c->body + c->body_got;
        size_t want = c->hdr_got < d->hdr_len ? d->hdr_len - c->hdr_got : c->body_len - c->body_got;
        ssize_t k;
        if (want == 0) return 1;
        k = recv(c->fd, dst, want, MSG_DONTWAIT);
        if (k < 0 && io_again()) return 0;
        if (k <= 0) {
            door_drop(d, c, k == 0 ? "it closed the connection before its hello was complete"
                                   : strerror(errno));
            return -1;
        }
        if (c->hdr_got < d->hdr_len) {
            long blen;
            if ((c->hdr_got += (size_t)k) < d->hdr_len) continue;
            blen = d->body_len(d->ctx, c->hdr, why, sizeof why);
            if (blen < 0) {
                door_drop(d, c, why);
                return -1;
            }
            c->body_len = (size_t)blen; /* bounded by body_len: now it may be allocated */
            c->body = malloc(c->body_len + 1);
            if (!c->body) {
                door_drop(d, c, "out of memory for its hello");
                return -1;
            }
            c->body[c->body_len] = '\0';
        } else {
            c->body_got += (size_t)k;
        }
    }
}

/* Move connection c on as far as it goes. */
static void door_step(Door *d, DoorConn *c) {
    char why[PP_ERR_MAX / 2];
    if (!c->heard) { /* a first byte, or the end of a connection that never sent one */
        char b;
        ssize_t k = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k < 0 && io_again()) return;
        if (k <= 0) {
            door_quiet(d, c, 0);
            return;
        }
        c->heard = 1;
    }
    if (!c->authed) {
        int r = dist_auth_step(&c->auth, c->fd);
        if (r == AUTH_FAIL) {
            door_drop(d, c, c->auth.err);
            return;
        }
        if (r == AUTH_MORE) return;
        c->authed = 1;
    }
    if (door_hello(d, c) != 1) return;
    if (d->ready(d->ctx, c, why, sizeof why) == DOOR_DROP) {
        door_drop(d, c, why);
        return;
    }
    free(c->body);
    c->body = NULL;
    c->fd = -1; /* taken */
}

/* Drop c, whose deadline passed. */
static void door_expire(Door *d, DoorConn *c) {
    if (!c->heard) door_quiet(d, c, 0);
    else
        door_drop(d, c, c->authed ? "its hello was not complete within " STR(DIST_HANDSHAKE_S) " s"
                                  : "it did not complete the handshake within "
                                    STR(DIST_HANDSHAKE_S) " s (an idle or slow connection)");
}

/* The pending connection to shed for room: the least advanced, the oldest among equals;
 * -1 when every one has proven the token. */
static int door_victim(const Door *d, const DoorConn *conns, int n) {
    int v = -1, vc = DC_PROVEN;
    for (int i = 0; i < n; i++) {
        int k;
        if (conns[i].fd < 0) continue;
        k = door_class(d, &conns[i]);
        if (k < vc || (k == vc && v >= 0 && conns[i].since < conns[v].since)) {
            v = i;
            vc = k;
        }
    }
    return v;
}

/* Pending connections a door holds: DOOR_MAX_CONNS, or half the open-file limit. */
static int door_capacity(void) {
    struct rlimit rl;
    rlim_t cap = DOOR_MAX_CONNS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 2 < cap)
        cap = rl.rlim_cur / 2;
    return cap < 16 ? 16 : (int)cap;
}

/* Accept up to cap connections waiting at the listening socket into conns (*n used of
 * cap), hearing each at once and shedding per [Note: a flood of connections]. Returns 0,
 * or 1 when out of file descriptors with nothing to shed (the caller pauses). */
static int door_accept(Door *d, DoorConn *conns, int *n, int cap) {
    for (int round = 0; round < cap && !d->done(d->ctx); round++) {
        int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), slot = -1, v;
        DoorConn nc;
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            if ((v = door_victim(d, conns, *n)) < 0) return 1;
            door_quiet(d, &conns[v], 1);
            continue;
        }
        if (fd < 0 && (errno == ECONNABORTED || errno == EINTR)) continue;
        if (fd < 0) return 0; /* EAGAIN: all taken */
        memset(&nc, 0, sizeof nc);
        nc.fd = fd;
        nc.since = pp_now();
        dist_peer_str(fd, nc.addr, sizeof nc.addr);
        dist_auth_begin(&nc.auth, 1, d->purpose, d->token);
        door_step(d, &nc); /* its first message may be here already */
        if (nc.fd < 0) continue; /* taken or dropped */
        for (int i = 0; i < *n && slot < 0; i++)
            if (conns[i].fd < 0) slot = i;
        if (slot < 0 && *n < cap) slot = (*n)++;
        if (slot < 0) { /* full: the least advanced goes, the newcomer included */
            v = door_victim(d, conns, *n);
            if (v < 0 || door_class(d, &conns[v]) > door_class(d, &nc)) {
                door_quiet(d, &nc, 1);
                continue;
            }
            door_quiet(d, &conns[v], 1);
            slot = v;
        }
        conns[slot] = nc;
    }
    return 0;
}

/* The one line on what a door dropped beyond the lines it logged, if any. */
static void door_report(const Door *d, const Door *before, int cap) {
    int dropped = d->dropped - before->dropped, silent = d->silent - before->silent;
    int shed = d->shed - before->shed, logged = d->logged - before->logged;
    int unlogged = dropped - silent - shed - logged;
    char line[PP_ERR_MAX];
    size_t k = 0;
    if (silent + shed + unlogged == 0) return;
    k += (size_t)snprintf(line + k, sizeof line - k, "dropped %d connection(s) to %s in all:",
                          dropped, d->what);
    if (silent)
        k += (size_t)snprintf(line + k, sizeof line - k, " %d closed or stayed silent for "
                              "%g s without sending a byte,", silent, DOOR_FIRST_BYTE_S);
    if (shed)
        k += (size_t)snprintf(line + k, sizeof line - k, " %d shed to make room when %d "
                              "were pending at once (a flood of connections: the job went "
                              "on),", shed, cap);
    if (logged)
        k += (size_t)snprintf(line + k, sizeof line - k, " %d logged above,", logged);
    if (unlogged)
        k += (size_t)snprintf(line + k, sizeof line - k, " %d more not logged,", unlogged);
    if (k < sizeof line) line[k - 1] = '\0'; /* the last comma */
    dist_warn("%s", line);
}

int door_run(Door *d, double deadline) {
    int cap = door_capacity();
    DoorConn *conns = pp_calloc((size_t)cap, sizeof *conns);
    struct pollfd *pfd = pp_malloc((size_t)(cap + 1) * sizeof *pfd);
    int *at = pp_malloc((size_t)(cap + 1) * sizeof *at); /* pfd[j] is conns[at[j]]'s */
    int n = 0, done = d->done(d->ctx);
    double accept_at = 0; /* out of file descriptors: no accepting before then */
    Door before = *d;
    fcntl(d->lfd, F_SETFL, fcntl(d->lfd, F_GETFL) | O_NONBLOCK); /* accept until EAGAIN */
    while (!done && pp_now() < deadline) {
        double wake = deadline;
        int k = 0, listening = pp_now() >= accept_at;
        if (listening) {
            pfd[k] = (struct pollfd){d->lfd, POLLIN, 0};
            at[k++] = -1;
        } else if (accept_at < wake) {
            wake = accept_at;
        }
        for (int i = 0; i < n; i++) {
            if (conns[i].fd < 0) continue;
            if (door_deadline(&conns[i]) < wake) wake = door_deadline(&conns[i]);
            pfd[k] = (struct pollfd){
                conns[i].fd,
                !conns[i].heard || conns[i].authed ? POLLIN : dist_auth_events(&conns[i].auth), 0};
            at[k++] = i;
        }
        if (poll(pfd, (nfds_t)k, dist_poll_ms(wake - pp_now())) < 0 && errno != EINTR) break;
        for (int j = listening; j < k && !done; j++) {
            DoorConn *c = &conns[at[j]];
            if (pfd[j].revents) door_step(d, c);
            if (c->fd >= 0 && pp_now() >= door_deadline(c)) door_expire(d, c);
            done = d->done(d->ctx);
        }
        if (!done && listening && (pfd[0].revents & POLLIN) && door_accept(d, conns, &n, cap))
            accept_at = pp_now() + 0.05;
        done = d->done(d->ctx);
        while (n > 0 && conns[n - 1].fd < 0) n--;
    }
    for (int i = 0; i < n; i++) door_close(&conns[i]);
    door_report(d, &before, cap);
    free(conns);
    free(pfd);
    free(at);
    return done;
}
