/* dist_auth.h — the job token (PPTRAIN_JOB_TOKEN) and the mutual challenge-response that
 * every connection of a job starts with, as a non-blocking state machine that one poll
 * loop can run for many connections at once. See [Note: job authentication] in dist_auth.c. */
#ifndef PP_DIST_AUTH_H
#define PP_DIST_AUTH_H

#include <stddef.h>

#define AUTH_TOKEN_MIN 16   /* characters: shorter secrets are refused at start */
#define AUTH_TOKEN_MAX 256
#define AUTH_NONCE 32
#define AUTH_MAC 32         /* HMAC-SHA256 */
#define AUTH_BUF 96         /* the largest handshake message */

/* What a connection is for; bound into both MACs, so that a handshake made for one
 * purpose cannot be passed off as the other. */
enum { AUTH_RDZV = 1, AUTH_MESH = 2 };

/* dist_auth_step's results. */
enum { AUTH_MORE, AUTH_DONE, AUTH_FAIL };

/* Why a handshake failed (DistAuthConn.fail). */
enum {
    AUTH_OK,
    AUTH_CLOSED,     /* the peer closed the connection (or reset it) mid-handshake */
    AUTH_IO,         /* another socket error */
    AUTH_GARBAGE,    /* the peer does not speak this protocol (a port scan, another program) */
    AUTH_MISMATCH,   /* the token is set on one side only, or purposes differ */
    AUTH_BAD_MAC,    /* the peer does not know the token (or holds a different one) */
};

typedef struct {
    int server;                 /* 1: the accepting side */
    int purpose;                /* AUTH_RDZV / AUTH_MESH */
    const char *token;          /* the job token; "" = none (not copied: must outlive) */
    int state;                  /* private */
    unsigned char nonce_c[AUTH_NONCE], nonce_s[AUTH_NONCE];
    unsigned char out[AUTH_BUF];
    size_t out_len, out_off;    /* bytes to send, bytes sent */
    unsigned char in[AUTH_BUF];
    size_t in_len, in_got;      /* bytes expected, bytes received */
    int fail;                   /* AUTH_OK, or why it failed */
    char err[256];              /* on failure: what happened, in words (no peer address) */
} DistAuthConn;

/* The token from PPTRAIN_JOB_TOKEN into token[AUTH_TOKEN_MAX + 1] ("" when unset or
 * empty). Returns 0, or PP_EUSAGE with a message when it is shorter than AUTH_TOKEN_MIN
 * characters (a guessable secret) or longer than AUTH_TOKEN_MAX. */
int dist_auth_token_read(char *token, char *err, size_t errlen);

/* Start the handshake on a connection: server = 1 on the accepting side. The client
 * speaks first. Draws a fresh nonce (dies only if the system has no randomness). */
void dist_auth_begin(DistAuthConn *a, int server, int purpose, const char *token);

/* Move the handshake on non-blocking socket fd as far as it goes without blocking.
 * Returns AUTH_MORE (poll fd for dist_auth_events(a) and call again), AUTH_DONE (both sides
 * proved they hold the same token, or both have none), or AUTH_FAIL (a->fail, a->err).
 * A server that refuses tells the client why before it closes, so the client's a->err
 * says what to fix (e.g. "rank 0 holds a different PPTRAIN_JOB_TOKEN"). */
int dist_auth_step(DistAuthConn *a, int fd);

/* POLLIN or POLLOUT: what dist_auth_step waits for. */
short dist_auth_events(const DistAuthConn *a);

/* HMAC-SHA256 of msg[n] under key[keylen] into mac[AUTH_MAC] (OpenSSL); for tests. */
void dist_auth_hmac(const void *key, size_t keylen, const void *msg, size_t n,
               unsigned char mac[AUTH_MAC]);

#endif
