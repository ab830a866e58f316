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
    if (pp_rank() >= 0) fprintf(stderr, "[rank %d] warning: %s\n", pp_rank(), line);
    else fprintf(stderr, "warning: %s\n", line);
}

int dist_poll_ms(double left) {
    return left > 1.0 ? 1000 : left > 0 ? (int)(left * 1000) + 1 : 0;
}

void dist_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    if (s > 0) nanosleep(&ts, NULL);
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

int dist_auth_client(AuthConn *a, int fd, int purpose, const char *token, double deadline) {
    auth_begin(a, 0, purpose, token);
    for (;;) {
        int r = auth_step(a, fd);
        struct pollfd pfd = {fd, 0, 0};
        double left = deadline - pp_now();
        if (r != AUTH_MORE) return r;
        if (left <= 0) {
            a->fail = AUTH_IO;
            snprintf(a->err, sizeof a->err, "no answer to the connection handshake in time");
            return AUTH_FAIL;
        }
        pfd.events = auth_events(a);
        if (poll(&pfd, 1, dist_poll_ms(left)) < 0 && errno != EINTR) {
            a->fail = AUTH_IO;
            snprintf(a->err, sizeof a->err, "poll: %s", strerror(errno));
            return AUTH_FAIL;
        }
    }
}

/* --------------------------------------------------------------------- doors -- */

static void door_drop(Door *d, DoorConn *c, const char *why) {
    d->dropped++;
    if (d->logged < DOOR_LOG_MAX) {
        d->logged++;
        dist_warn("dropped a connection from %s to %s: %s%s", c->addr, d->what, why,
                  d->logged == DOOR_LOG_MAX ? " (further drops are counted, not logged)" : "");
    }
    if (c->fd >= 0) close(c->fd);
    free(c->body);
    c->fd = -1;
    c->body = NULL;
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
    if (!c->authed) {
        int r = auth_step(&c->auth, c->fd);
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

/* Accept what waits at the listening socket into free slots of conns. */
static void door_accept(Door *d, DoorConn *conns, int *n) {
    for (;;) {
        int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), slot = -1;
        if (fd < 0) return;
        for (int i = 0; i < *n && slot < 0; i++)
            if (conns[i].fd < 0) slot = i;
        if (slot < 0 && *n < DOOR_MAX_CONNS) slot = (*n)++;
        if (slot < 0) { /* full: the oldest goes (a real rank's hello takes milliseconds) */
            slot = 0;
            for (int i = 1; i < *n; i++)
                if (conns[i].deadline < conns[slot].deadline) slot = i;
            door_drop(d, &conns[slot], "too many connections at once; this one was the oldest");
        }
        memset(&conns[slot], 0, sizeof conns[slot]);
        conns[slot].fd = fd;
        conns[slot].deadline = pp_now() + DIST_HANDSHAKE_S;
        dist_peer_str(fd, conns[slot].addr, sizeof conns[slot].addr);
        auth_begin(&conns[slot].auth, 1, d->purpose, d->token);
    }
}

int door_run(Door *d, double deadline) {
    DoorConn *conns = pp_calloc(DOOR_MAX_CONNS, sizeof *conns);
    struct pollfd *pfd = pp_malloc((DOOR_MAX_CONNS + 1) * sizeof *pfd);
    int n = 0, done = d->done(d->ctx), logged0 = d->logged, dropped0 = d->dropped;
    fcntl(d->lfd, F_SETFL, fcntl(d->lfd, F_GETFL) | O_NONBLOCK); /* accept until EAGAIN */
    while (!done && pp_now() < deadline) {
        double wake = deadline;
        int k = 0;
        pfd[k++] = (struct pollfd){d->lfd, POLLIN, 0};
        for (int i = 0; i < n; i++) {
            if (conns[i].fd < 0) continue;
            if (conns[i].deadline < wake) wake = conns[i].deadline;
            pfd[k++] = (struct pollfd){conns[i].fd,
                                       conns[i].authed ? POLLIN : auth_events(&conns[i].auth), 0};
        }
        if (poll(pfd, (nfds_t)k, dist_poll_ms(wake - pp_now())) < 0 && errno != EINTR) break;
        for (int i = 0; i < n && !done; i++) {
            DoorConn *c = &conns[i];
            if (c->fd < 0) continue;
            door_step(d, c);
            if (c->fd >= 0 && pp_now() >= c->deadline)
                door_drop(d, c, c->authed ? "its hello was not complete within "
                                            STR(DIST_HANDSHAKE_S) " s"
                                          : "it did not complete the handshake within "
                                            STR(DIST_HANDSHAKE_S) " s (an idle or slow "
                                            "connection)");
            done = d->done(d->ctx);
        }
        if (!done && (pfd[0].revents & POLLIN)) door_accept(d, conns, &n);
        while (n > 0 && conns[n - 1].fd < 0) n--;
    }
    for (int i = 0; i < n; i++)
        if (conns[i].fd >= 0) close(conns[i].fd), free(conns[i].body);
    if (d->dropped - dropped0 > d->logged - logged0)
        dist_warn("dropped %d connection(s) to %s in all, %d of them not logged", d->dropped - dropped0,
                  d->what, (d->dropped - dropped0) - (d->logged - logged0));
    free(conns);
    free(pfd);
    return done;
}
