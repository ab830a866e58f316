/* dist_net.h — the connections' socket layer, for dist_rdzv.c and the socket transport
 * (comm/comm_socket.c): socket helpers, the client side of the handshake, and the
 * "door": a listening socket whose pending connections are authenticated and heard
 * together in one poll loop, each under its own deadline. */
#ifndef PP_DIST_NET_H
#define PP_DIST_NET_H

#include <netdb.h>
#include <sys/socket.h>

#include "dist.h"

#define DIST_ADDR_MAX 80 /* "host:port" or "[v6host]:port", numeric */
/* The listen backlog asked for; the kernel caps it at net.core.somaxconn (4096 by
 * default since Linux 5.4). [Note: a flood of connections] in dist_net.c. */
#define DIST_BACKLOG 65535
#define DOOR_MAX_CONNS 1024    /* pending connections a door holds (fewer under a low
                                  open-file limit: door_capacity) */
#define DOOR_FIRST_BYTE_S 1.0  /* an accepted connection's time to send its first byte */
#define DOOR_LOG_MAX 10        /* dropped connections logged one per line, then counted */

/* "[rank R] warning: ..." on stderr. */
void dist_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A poll() timeout for `left` seconds, at most one second (callers loop). */
int dist_poll_ms(double left);
void dist_sleep(double s);
/* A reconnect's wait: sleep *delay seconds, then double it for the next try, up to one
 * second (the clients start at 0.02: [Note: a flood of connections] in dist_net.c). The
 * caller checks its deadline first. */
void dist_backoff(double *delay);

/* "host:port" (or "[v6]:port") of an address / of socket fd's peer; numeric host of
 * fd's peer. */
void dist_addr_str(const struct sockaddr *sa, socklen_t len, char *buf, size_t n);
void dist_peer_str(int fd, char *buf, size_t n);
void dist_peer_host(int fd, char *host, size_t n);

/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. */
int dist_addr_is_loopback(const struct sockaddr *sa);

/* getaddrinfo for a stream socket to host:port (numeric: no name lookup). */
int dist_resolve(const char *host, int port, int numeric, struct addrinfo **res,
                 char *err, size_t n);

/* No Nagle, non-blocking: a connected socket made ready for the mesh. */
void dist_tune_socket(int fd);

/* Connect fd to sa by the absolute `deadline` (non-blocking connect + poll); fd is left
 * non-blocking. Returns 0 or an errno (ETIMEDOUT at the deadline). */
int dist_connect_by(int fd, const struct sockaddr *sa, socklen_t len, double deadline);

/* The dialing side's handshake on connected non-blocking socket fd, by `deadline`.
 * Returns AUTH_DONE, or AUTH_FAIL with a->fail / a->err (a deadline gives AUTH_IO,
 * "no answer ..."). */
int dist_auth_client(DistAuthConn *a, int fd, int purpose, const char *token, double deadline);

/* A connection a door accepted, while it proves the token and says hello. */
typedef struct {
    int fd;
    double since;           /* accepted at (pp_now); see door_deadline in dist_net.c */
    int heard;              /* it sent a byte */
    char addr[DIST_ADDR_MAX];
    DistAuthConn auth;
    int authed;
    unsigned char hdr[32];  /* the hello's fixed part ... */
    size_t hdr_got;
    char *body;             /* ... and the body it announces (malloc'd, NUL-terminated) */
    size_t body_len, body_got;
} DoorConn;

enum { DOOR_TAKEN, DOOR_DROP };

typedef struct {
    int lfd, purpose;
    const char *token;
    const char *what; /* where connections come to, for log lines: "the rendezvous" */
    size_t hdr_len;   /* bytes of the hello's fixed part (at most 32) */
    /* The length of the body that hello hdr announces, or -1 when hdr is malformed
     * (why says how). Called before anything is allocated for it. */
    long (*body_len)(void *ctx, const void *hdr, char *why, size_t n);
    /* A connection said its whole hello: take it (set c->fd = -1 and return
     * DOOR_TAKEN) or return DOOR_DROP with why (it is then logged and closed). */
    int (*ready)(void *ctx, DoorConn *c, char *why, size_t n);
    /* Whether the door's owner has all it waits for. */
    int (*done)(void *ctx);
    void *ctx;
    /* Connections dropped; of them logged one a line, and counted only: those that
     * closed or stayed silent without a byte, and those shed to make room. */
    int dropped, logged, silent, shed;
} Door;

/* Accept, authenticate and hear the hellos of every connection at d->lfd together, each
 * with DOOR_FIRST_BYTE_S to send a byte and DIST_HANDSHAKE_S to finish, until
 * d->done(ctx) or the absolute `deadline`. Connections that fail the handshake, send a
 * malformed hello or do not finish in time are dropped with a log line naming their
 * address (DOOR_LOG_MAX of them, then counted); those that send nothing, and those shed
 * when the table is full (the least advanced first, never one that proved the token),
 * are counted; one line at the end gives the counts ([Note: a flood of connections] in
 * dist_net.c, [Note: rendezvous under attack] in dist_rdzv.c). Returns 1 when done, 0
 * at the deadline; connections still pending are closed either way. */
int door_run(Door *d, double deadline);

#endif
