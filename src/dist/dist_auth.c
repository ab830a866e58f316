/* dist_auth.c — the job token and the challenge-response of every connection
 * (see dist_auth.h). */
#include "dist_auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <poll.h>

#include "common.h"

/* [Note: job authentication]
 * Every rank of a job holds the same secret, PPTRAIN_JOB_TOKEN (scripts/pprun and the
 * SLURM batch script make a fresh one per job; torchrun and srun users export their
 * own). Every TCP connection of the job — a rank joining rank 0's rendezvous, a rank
 * dialing another for the mesh — starts with four messages, the dialer ("client")
 * first:
 *   hello      C -> S  magic, version, purpose, has-token flag, nonce_c (32 random bytes)
 *   challenge  S -> C  status, nonce_s, mac_s = HMAC(token, "pptrain-auth server" |
 *                      purpose | nonce_c | nonce_s)
 *   proof      C -> S  status, mac_c = HMAC(token, "pptrain-auth client" | purpose |
 *                      nonce_c | nonce_s)
 *   result     S -> C  status
 * HMAC-SHA256 is OpenSSL's; MACs are compared in constant time (CRYPTO_memcmp). Each
 * side proves it holds the token on a nonce the other just drew, so a recorded
 * handshake replayed later fails; the two directions use different labels, so one
 * side's MAC cannot be reflected back as the other's; the purpose is in both MACs.
 * A server that refuses (no token where the job has one, a token where it has none,
 * another version or purpose, a wrong proof) says why in its reply before closing, so
 * that a misconfigured rank fails with a message that names the fix.
 * What this does not do: encrypt, or protect the bytes after the handshake from a
 * host that sits on the path between two ranks (it could relay a handshake and then
 * tamper). Run jobs on a network you trust not to do that; the token keeps out every
 * host that merely reaches the ports.
 * Without a token on either side the same four messages go with zero MACs: the job
 * runs unauthenticated, as it did before tokens existed (dist_net.c warns when rank 0
 * listens beyond loopback then). */

#define AUTH_MAGIC 0x75617070u /* "ppau" */
#define AUTH_VERSION 1u
#define FLAG_TOKEN 1u

enum { ST_OK, ST_NEED_TOKEN, ST_NO_TOKEN, ST_VERSION, ST_PURPOSE, ST_BAD_MAC };

typedef struct {
    uint32_t magic, version, purpose, flags;
    unsigned char nonce[AUTH_NONCE];
} Hello;

typedef struct {
    uint32_t magic, status, flags, pad;
    unsigned char nonce[AUTH_NONCE];
    unsigned char mac[AUTH_MAC];
} Challenge;

typedef struct {
    uint32_t magic, status;
    unsigned char mac[AUTH_MAC];
} Proof;

typedef struct {
    uint32_t magic, status;
} Result;

enum {
    C_HELLO, C_CHALLENGE, C_PROOF, C_RESULT,   /* client: sending/awaiting each */
    S_HELLO, S_CHALLENGE, S_PROOF, S_RESULT,   /* server */
    A_REFUSE,                                  /* sending a refusal, then fail */
    A_DONE, A_FAILED
};

int dist_auth_token_read(char *token, char *err, size_t errlen) {
    const char *v = getenv("PPTRAIN_JOB_TOKEN");
    size_t n = v ? strlen(v) : 0;
    token[0] = '\0';
    if (n == 0) return PP_OK;
    if (n < AUTH_TOKEN_MIN || n > AUTH_TOKEN_MAX)
        return pp_errf(err, errlen, PP_EUSAGE, "PPTRAIN_JOB_TOKEN has %zu characters: use "
                       "%d to %d random ones, the same on every rank (e.g. export "
                       "PPTRAIN_JOB_TOKEN=$(openssl rand -hex 32))", n, AUTH_TOKEN_MIN,
                       AUTH_TOKEN_MAX);
    memcpy(token, v, n + 1);
    return PP_OK;
}

void dist_auth_hmac(const void *key, size_t keylen, const void *msg, size_t n,
               unsigned char mac[AUTH_MAC]) {
    unsigned int len = AUTH_MAC;
    PP_CHECK(HMAC(EVP_sha256(), key, (int)keylen, msg, n, mac, &len) != NULL &&
             len == AUTH_MAC);
}

/* The MAC one side sends: label | purpose | nonce_c | nonce_s under the token. */
static void side_mac(const DistAuthConn *a, int server_side, unsigned char mac[AUTH_MAC]) {
    unsigned char msg[32 + 4 + 2 * AUTH_NONCE];
    const char *label = server_side ? "pptrain-auth server" : "pptrain-auth client";
    uint32_t purpose = (uint32_t)a->purpose;
    size_t k = strlen(label);
    memcpy(msg, label, k);
    memcpy(msg + k, &purpose, 4);
    memcpy(msg + k + 4, a->nonce_c, AUTH_NONCE);
    memcpy(msg + k + 4 + AUTH_NONCE, a->nonce_s, AUTH_NONCE);
    if (!a->token[0]) {
        memset(mac, 0, AUTH_MAC);
        return;
    }
    dist_auth_hmac(a->token, strlen(a->token), msg, k + 4 + 2 * AUTH_NONCE, mac);
}

static int mac_ok(const DistAuthConn *a, int server_side, const unsigned char *got) {
    unsigned char want[AUTH_MAC];
    if (!a->token[0]) return 1;
    side_mac(a, server_side, want);
    return CRYPTO_memcmp(want, got, AUTH_MAC) == 0;
}

static void fresh_nonce(unsigned char *nonce) {
    if (RAND_bytes(nonce, AUTH_NONCE) != 1)
        PP_DIE("cannot draw random bytes for the connection handshake (OpenSSL RAND_bytes)");
}

/* Queue msg[n] to send, then go to state `next` once it is out. */
static void put(DistAuthConn *a, const void *msg, size_t n, int next) {
    memcpy(a->out, msg, n);
    a->out_len = n;
    a->out_off = 0;
    a->state = next;
}

/* Expect n bytes next. */
static void expect(DistAuthConn *a, size_t n) {
    a->in_len = n;
    a->in_got = 0;
}

static int fail(DistAuthConn *a, int why, const char *text) {
    a->fail = why;
    a->state = A_FAILED;
    snprintf(a->err, sizeof a->err, "%s", text);
    return AUTH_FAIL;
}

/* Send a refusal (status st) and fail with text once it is out. */
static void refuse(DistAuthConn *a, const void *msg, size_t n, int why, const char *text) {
    put(a, msg, n, A_REFUSE);
    a->fail = why;
    snprintf(a->err, sizeof a->err, "%s", text);
}

void dist_auth_begin(DistAuthConn *a, int server, int purpose, const char *token) {
    memset(a, 0, sizeof *a);
    a->server = server;
    a->purpose = purpose;
    a->token = token ? token : "";
    if (server) {
        fresh_nonce(a->nonce_s);
        a->state = S_HELLO;
        expect(a, sizeof(Hello));
    } else {
        Hello h = {AUTH_MAGIC, AUTH_VERSION, (uint32_t)purpose, a->token[0] ? FLAG_TOKEN : 0, {0}};
        fresh_nonce(a->nonce_c);
        memcpy(h.nonce, a->nonce_c, AUTH_NONCE);
        put(a, &h, sizeof h, C_HELLO);
        expect(a, sizeof(Challenge));
    }
}

/* The server has the client's hello in a->in. */
static int on_hello(DistAuthConn *a) {
    Hello h;
    Challenge c = {AUTH_MAGIC, ST_OK, a->token[0] ? FLAG_TOKEN : 0, 0, {0}, {0}};
    char text[160];
    memcpy(&h, a->in, sizeof h);
    if (h.magic != AUTH_MAGIC)
        return fail(a, AUTH_GARBAGE, "it does not speak pptrain's protocol (a port scan, or "
                    "another program?)");
    if (h.version != AUTH_VERSION) {
        c.status = ST_VERSION;
        snprintf(text, sizeof text, "it speaks handshake version %u, this rank %u (ranks "
                 "run different pptrain builds?)", h.version, AUTH_VERSION);
        refuse(a, &c, sizeof c, AUTH_MISMATCH, text);
    } else if (h.purpose != (uint32_t)a->purpose) {
        c.status = ST_PURPOSE;
        refuse(a, &c, sizeof c, AUTH_MISMATCH, "it connected for another purpose (a "
               "rendezvous attempt at a rank's mesh port, or the reverse)");
    } else if (a->token[0] && !(h.flags & FLAG_TOKEN)) {
        c.status = ST_NEED_TOKEN;
        refuse(a, &c, sizeof c, AUTH_MISMATCH, "it has no job token, and this job has one "
               "(PPTRAIN_JOB_TOKEN)");
    } else if (!a->token[0] && (h.flags & FLAG_TOKEN)) {
        c.status = ST_NO_TOKEN;
        refuse(a, &c, sizeof c, AUTH_MISMATCH, "it holds a job token and this rank has none "
               "— export the same PPTRAIN_JOB_TOKEN to every rank");
    } else {
        memcpy(a->nonce_c, h.nonce, AUTH_NONCE);
        memcpy(c.nonce, a->nonce_s, AUTH_NONCE);
        side_mac(a, 1, c.mac);
        put(a, &c, sizeof c, S_CHALLENGE);
        expect(a, sizeof(Proof));
    }
    return AUTH_MORE;
}

/* The server has the client's proof in a->in. */
static int on_proof(DistAuthConn *a) {
    Proof p;
    Result r = {AUTH_MAGIC, ST_OK};
    memcpy(&p, a->in, sizeof p);
    if (p.magic != AUTH_MAGIC)
        return fail(a, AUTH_GARBAGE, "it does not speak pptrain's protocol");
    if (p.status == ST_BAD_MAC)
        return fail(a, AUTH_BAD_MAC, "it says this rank's proof is wrong: its "
                    "PPTRAIN_JOB_TOKEN differs from this rank's");
    if (!mac_ok(a, 0, p.mac)) {
        r.status = ST_BAD_MAC;
        refuse(a, &r, sizeof r, AUTH_BAD_MAC, "it failed to prove it knows this job's "
               "PPTRAIN_JOB_TOKEN (a different token, or not a rank of this job)");
        return AUTH_MORE;
    }
    put(a, &r, sizeof r, S_RESULT);
    return AUTH_MORE;
}

static const char *refusal_text(uint32_t st) {
    switch (st) {
    case ST_NEED_TOKEN:
        return "it refused this rank: the job has a PPTRAIN_JOB_TOKEN and this rank has "
               "none — export the same token to every rank";
    case ST_NO_TOKEN:
        return "it has no PPTRAIN_JOB_TOKEN while this rank has one — export the same token "
               "to every rank (or to none)";
    case ST_VERSION: return "it speaks another handshake version (a different pptrain build?)";
    case ST_PURPOSE: return "it expected a connection of another kind (wrong port?)";
    default: return "it refused this rank";
    }
}

/* The client has the server's challenge in a->in. */
static int on_challenge(DistAuthConn *a) {
    Challenge c;
    Proof p = {AUTH_MAGIC, ST_OK, {0}};
    memcpy(&c, a->in, sizeof c);
    if (c.magic != AUTH_MAGIC)
        return fail(a, AUTH_GARBAGE, "the process there does not speak pptrain's protocol");
    if (c.status != ST_OK) return fail(a, AUTH_MISMATCH, refusal_text(c.status));
    memcpy(a->nonce_s, c.nonce, AUTH_NONCE);
    if (!mac_ok(a, 1, c.mac)) {
        p.status = ST_BAD_MAC;
        refuse(a, &p, sizeof p, AUTH_BAD_MAC, "it failed to prove it knows this rank's "
               "PPTRAIN_JOB_TOKEN (a different token, or not a rank of this job)");
        return AUTH_MORE;
    }
    side_mac(a, 0, p.mac);
    put(a, &p, sizeof p, C_PROOF);
    expect(a, sizeof(Result));
    return AUTH_MORE;
}

static int on_result(DistAuthConn *a) {
    Result r;
    memcpy(&r, a->in, sizeof r);
    if (r.magic != AUTH_MAGIC)
        return fail(a, AUTH_GARBAGE, "the process there does not speak pptrain's protocol");
    if (r.status != ST_OK)
        return fail(a, AUTH_BAD_MAC, "it rejected this rank's proof: the two hold different "
                    "PPTRAIN_JOB_TOKENs — export the same token to every rank");
    a->state = A_DONE;
    return AUTH_DONE;
}

static int io_fail(DistAuthConn *a, ssize_t k) {
    if (k == 0 || errno == ECONNRESET || errno == EPIPE)
        return fail(a, AUTH_CLOSED, "the connection closed during the handshake");
    char text[128];
    snprintf(text, sizeof text, "socket error during the handshake: %s", strerror(errno));
    return fail(a, AUTH_IO, text);
}

/* The state a sent message leads to. */
static int after_send(DistAuthConn *a) {
    switch (a->state) {
    case C_HELLO: a->state = C_CHALLENGE; break;
    case C_PROOF: a->state = C_RESULT; break;
    case S_CHALLENGE: a->state = S_PROOF; break;
    case S_RESULT: a->state = A_DONE; return AUTH_DONE;
    case A_REFUSE: a->state = A_FAILED; return AUTH_FAIL;
    }
    return AUTH_MORE;
}

int dist_auth_step(DistAuthConn *a, int fd) {
    for (;;) {
        if (a->state == A_DONE) return AUTH_DONE;
        if (a->state == A_FAILED) return AUTH_FAIL;
        if (a->out_off < a->out_len) {
            ssize_t k = send(fd, a->out + a->out_off, a->out_len - a->out_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return AUTH_MORE;
            if (k <= 0) {
                if (a->state == A_REFUSE) return a->state = A_FAILED, AUTH_FAIL;
                return io_fail(a, k);
            }
            a->out_off += (size_t)k;
            if (a->out_off < a->out_len) continue;
            int r = after_send(a);
            if (r != AUTH_MORE) return r;
            continue;
        }
        ssize_t k = recv(fd, a->in + a->in_got, a->in_len - a->in_got, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return AUTH_MORE;
        if (k <= 0) return io_fail(a, k);
        a->in_got += (size_t)k;
        if (a->in_got < a->in_len) continue;
        int r = a->state == S_HELLO       ? on_hello(a)
                : a->state == S_PROOF     ? on_proof(a)
                : a->state == C_CHALLENGE ? on_challenge(a)
                                          : on_result(a);
        if (r != AUTH_MORE) return r;
    }
}

short dist_auth_events(const DistAuthConn *a) {
    return a->out_off < a->out_len ? POLLOUT : POLLIN;
}
