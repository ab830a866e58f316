/* test_auth.c — the job token and the connection handshake (dist_auth.c), and the rendezvous
 * and transport under attack (issue 17): forged hellos, idle and slow-drip connections,
 * wrong or missing tokens, a forged message header claiming 2^62 bytes; and (issue 25)
 * connections cut before the job has formed, which the ranks make again. Every attack is
 * mounted by forked processes against a real job on loopback; the job must go on (or
 * fail within its deadline, naming the right rank) and never die of it. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dist/dist_auth.h"
#include "comm/comm_socket_internal.h" /* WireHdr, WIRE_MAGIC: to forge a message header */
#include "commtest.h"
#include "checkrun.h"
#include "dist/dist_net.h"    /* dist_auth_client */

/* ------------------------------------------------------------ the handshake -- */

static void pair(int sv[2]) {
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    for (int i = 0; i < 2; i++) fcntl(sv[i], F_SETFL, fcntl(sv[i], F_GETFL) | O_NONBLOCK);
}

/* Step client c on fd cf and server s on fd sf in turns until both are finished; a
 * side that fails shuts its end (as a closing rank would). */
static void run_pair(DistAuthConn *c, int cf, DistAuthConn *s, int sf, int *rc, int *rs) {
    *rc = *rs = AUTH_MORE;
    for (int i = 0; i < 100 && (*rc == AUTH_MORE || *rs == AUTH_MORE); i++) {
        if (*rc == AUTH_MORE && (*rc = dist_auth_step(c, cf)) == AUTH_FAIL) shutdown(cf, SHUT_RDWR);
        if (*rs == AUTH_MORE && (*rs = dist_auth_step(s, sf)) == AUTH_FAIL) shutdown(sf, SHUT_RDWR);
    }
}

typedef struct {
    const char *ctok, *stok;
    int cpurpose, spurpose;
    int cfail, sfail;        /* AUTH_OK: done */
    const char *cerr, *serr; /* in the failure texts */
} HsCase;

static const HsCase HS[] = {
    {"the-same-token-0123", "the-same-token-0123", AUTH_RDZV, AUTH_RDZV, AUTH_OK, AUTH_OK, "", ""},
    {"", "", AUTH_MESH, AUTH_MESH, AUTH_OK, AUTH_OK, "", ""},
    {"a-token-of-rank-one", "another-token-rank0", AUTH_RDZV, AUTH_RDZV, AUTH_BAD_MAC, AUTH_BAD_MAC,
     "failed to prove it knows this rank's PPTRAIN_JOB_TOKEN", "proof is wrong"},
    {"", "the-same-token-0123", AUTH_RDZV, AUTH_RDZV, AUTH_MISMATCH, AUTH_MISMATCH,
     "the job has a PPTRAIN_JOB_TOKEN and this rank has none", "it has no job token"},
    {"the-same-token-0123", "", AUTH_RDZV, AUTH_RDZV, AUTH_MISMATCH, AUTH_MISMATCH,
     "it has no PPTRAIN_JOB_TOKEN while this rank has one", "holds a job token"},
    {"the-same-token-0123", "the-same-token-0123", AUTH_RDZV, AUTH_MESH, AUTH_MISMATCH,
     AUTH_MISMATCH, "another kind", "another purpose"},
};

START_TEST(test_handshake_cases) {
    const HsCase *k = &HS[_i];
    DistAuthConn c, s;
    int sv[2], rc, rs;
    pair(sv);
    dist_auth_begin(&c, 0, k->cpurpose, k->ctok);
    dist_auth_begin(&s, 1, k->spurpose, k->stok);
    run_pair(&c, sv[0], &s, sv[1], &rc, &rs);
    ck_assert_msg(rc == (k->cfail ? AUTH_FAIL : AUTH_DONE) && c.fail == k->cfail,
                  "case %d client: %d/%d (%s)", _i, rc, c.fail, c.err);
    ck_assert_msg(rs == (k->sfail ? AUTH_FAIL : AUTH_DONE) && s.fail == k->sfail,
                  "case %d server: %d/%d (%s)", _i, rs, s.fail, s.err);
    ck_assert_msg(strstr(c.err, k->cerr), "case %d client says: %s", _i, c.err);
    ck_assert_msg(strstr(s.err, k->serr), "case %d server says: %s", _i, s.err);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* Copy what is readable on `from` to `to` and append it to rec[*n]. */
static void relay(int from, int to, unsigned char *rec, size_t *n) {
    unsigned char buf[256];
    ssize_t k;
    while ((k = read(from, buf, sizeof buf)) > 0) {
        ck_assert_int_eq(write(to, buf, (size_t)k), k);
        memcpy(rec + *n, buf, (size_t)k);
        *n += (size_t)k;
    }
}

/* A recorded handshake, replayed: the client's hello and proof to a new server, the
 * server's challenge to a new client. Both fail: each side draws a fresh nonce. */
START_TEST(test_handshake_replay) {
    const char *tok = "the-same-token-0123";
    unsigned char cs[512], sc[512], junk[256];
    size_t ncs = 0, nsc = 0;
    int a[2], b[2], sv[2];
    int rc, rs;
    DistAuthConn c, s;
    pair(a);
    pair(b);
    dist_auth_begin(&c, 0, AUTH_RDZV, tok);
    dist_auth_begin(&s, 1, AUTH_RDZV, tok);
    rc = rs = AUTH_MORE;
    for (int i = 0; i < 50 && (rc == AUTH_MORE || rs == AUTH_MORE); i++) {
        if (rc == AUTH_MORE) rc = dist_auth_step(&c, a[0]);
        relay(a[1], b[0], cs, &ncs);
        if (rs == AUTH_MORE) rs = dist_auth_step(&s, b[1]);
        relay(b[0], a[1], sc, &nsc);
    }
    ck_assert_int_eq(rc, AUTH_DONE);
    ck_assert_int_eq(rs, AUTH_DONE);
    ck_assert_uint_eq(ncs, 48 + 40); /* hello + proof */
    ck_assert_uint_eq(nsc, 80 + 8);  /* challenge + result */
    /* the client's messages to a new server */
    pair(sv);
    dist_auth_begin(&s, 1, AUTH_RDZV, tok);
    ck_assert_int_eq(write(sv[0], cs, 48), 48);
    ck_assert_int_eq(dist_auth_step(&s, sv[1]), AUTH_MORE);
    while (read(sv[0], junk, sizeof junk) > 0) {}
    ck_assert_int_eq(write(sv[0], cs + 48, 40), 40);
    ck_assert_int_eq(dist_auth_step(&s, sv[1]), AUTH_FAIL);
    ck_assert_int_eq(s.fail, AUTH_BAD_MAC);
    close(sv[0]);
    close(sv[1]);
    /* the server's challenge to a new client */
    pair(sv);
    dist_auth_begin(&c, 0, AUTH_RDZV, tok);
    ck_assert_int_eq(dist_auth_step(&c, sv[0]), AUTH_MORE);
    ck_assert_int_eq(write(sv[1], sc, 80), 80);
    ck_assert_int_eq(dist_auth_step(&c, sv[0]), AUTH_FAIL);
    ck_assert_int_eq(c.fail, AUTH_BAD_MAC);
    close(sv[0]);
    close(sv[1]);
    close(a[0]);
    close(a[1]);
    close(b[0]);
    close(b[1]);
}
END_TEST

/* Something that is not a rank: an HTTP request, then a peer that closes at once. */
START_TEST(test_handshake_garbage) {
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: scanner\r\nAccept: */*\r\n\r\n";
    DistAuthConn s;
    int sv[2];
    pair(sv);
    dist_auth_begin(&s, 1, AUTH_RDZV, "the-same-token-0123");
    ck_assert_int_eq(write(sv[0], http, strlen(http)), (ssize_t)strlen(http));
    ck_assert_int_eq(dist_auth_step(&s, sv[1]), AUTH_FAIL);
    ck_assert_int_eq(s.fail, AUTH_GARBAGE);
    ck_assert(strstr(s.err, "does not speak pptrain's protocol"));
    close(sv[0]);
    close(sv[1]);
    pair(sv);
    dist_auth_begin(&s, 1, AUTH_RDZV, "");
    close(sv[0]);
    ck_assert_int_eq(dist_auth_step(&s, sv[1]), AUTH_FAIL);
    ck_assert_int_eq(s.fail, AUTH_CLOSED);
    close(sv[1]);
}
END_TEST

/* The MAC is OpenSSL's HMAC-SHA256: RFC 4231, test case 2. */
START_TEST(test_hmac_known_answer) {
    static const unsigned char want[AUTH_MAC] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e,
                                                 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                                                 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83,
                                                 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
    const char *msg = "what do ya want for nothing?";
    unsigned char mac[AUTH_MAC];
    dist_auth_hmac("Jefe", 4, msg, strlen(msg), mac);
    ck_assert_mem_eq(mac, want, AUTH_MAC);
}
END_TEST

START_TEST(test_token_env) {
    char tok[AUTH_TOKEN_MAX + 1], err[PP_ERR_MAX] = "", big[AUTH_TOKEN_MAX + 2];
    DistEnv e;
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("SLURM_PROCID");
    unsetenv("PPTRAIN_JOB_TOKEN");
    ck_assert_int_eq(dist_auth_token_read(tok, err, sizeof err), PP_OK);
    ck_assert_str_eq(tok, "");
    setenv("PPTRAIN_JOB_TOKEN", "0123456789abcdef", 1);
    ck_assert_int_eq(dist_auth_token_read(tok, err, sizeof err), PP_OK);
    ck_assert_str_eq(tok, "0123456789abcdef");
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_str_eq(e.token, "0123456789abcdef");
    setenv("PPTRAIN_JOB_TOKEN", "short", 1);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "PPTRAIN_JOB_TOKEN has 5 characters: use 16 to 256"), "%s", err);
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    setenv("PPTRAIN_JOB_TOKEN", big, 1);
    ck_assert_int_eq(dist_auth_token_read(tok, err, sizeof err), PP_EUSAGE);
    unsetenv("PPTRAIN_JOB_TOKEN");
}
END_TEST

/* -------------------------------------------------------- the job under attack -- */

/* What the processes beyond ranks 0 and 1 of a job do to it. */
enum {
    ATT_FORGED,     /* forged hellos (rank -7, WORLD_SIZE=3, "config differs") */
    ATT_IDLE,       /* connect and say nothing */
    ATT_DRIP,       /* one byte every 0.3 s */
    ATT_WRONG_TOKEN,/* join as rank 1 with another token */
    ATT_NO_TOKEN,   /* join as rank 1 without the token */
};

typedef struct {
    int attack, n_att;
    const char *token;   /* the job's (ranks 0 and 1) */
    double timeout_s;
    int with_rank1;      /* 0: rank 0 alone (it must give up by its deadline) */
} AttackArg;

/* The wire layout of RdzvHello (dist_rdzv.c), to forge one. */
typedef struct {
    uint32_t magic, version;
    int32_t rank, world;
    uint32_t listen_port, job_len, cfg_len; /* then job_len bytes of job identity, the config */
} ForgedHello;

/* A raw TCP connection to 127.0.0.1:port, retried for up to 3 s; -1 if none. */
static int raw_connect(int port) {
    struct sockaddr_in a = {AF_INET, htons((uint16_t)port), {htonl(INADDR_LOOPBACK)}, {0}};
    double end = pp_now() + 3;
    while (pp_now() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        sleep_s(0.02);
    }
    return -1;
}

/* Attacker k: a forged hello after a (token-less) handshake; it must be refused. k % 4
 * picks what is wrong: the rank, the world size, the config, or the job (a rank of
 * another job at this job's port). */
static int forge(int k, int port) {
    static const char *cfg_other = "model:\n  n_layers: 4\n  dim: 64\ntrain:\n  steps: 99\n";
    ForgedHello h = {0x76727070u, 3, 1, 2, 1234, 0, 0};
    const char *cfg = BASE_CFG, *job = "SLURM job 999 step 0";
    char reply[PP_ERR_MAX] = "";
    int fd = raw_connect(port);
    DistAuthConn a;
    CHILD_CHECK(fd >= 0);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    CHILD_CHECK(dist_auth_client(&a, fd, AUTH_RDZV, "", pp_now() + 3) == AUTH_DONE);
    if (k % 4 == 0) h.rank = -7;
    if (k % 4 == 1) h.world = 3;
    if (k % 4 == 2) cfg = cfg_other;
    h.job_len = k % 4 == 3 ? (uint32_t)strlen(job) : 0;
    h.cfg_len = (uint32_t)strlen(cfg);
    CHILD_CHECK(dist_xfer(fd, &h, sizeof h, NULL, 0, 3, NULL, 0) == DIST_IO_OK);
    CHILD_CHECK(dist_xfer(fd, job, h.job_len, NULL, 0, 3, NULL, 0) == DIST_IO_OK);
    CHILD_CHECK(dist_xfer(fd, cfg, h.cfg_len, reply, 16, 3, NULL, 0) == DIST_IO_OK);
    CHILD_CHECK(((int32_t *)reply)[1] == PP_EUSAGE); /* refused, and told why */
    close(fd);
    return 0;
}

/* Attacker k against the job at port. */
static int attacker(int k, const AttackArg *a, int port) {
    sleep_s(0.1 + 0.01 * k); /* after rank 0 listens, before rank 1 comes */
    if (a->attack == ATT_FORGED) return forge(k, port);
    if (a->attack == ATT_IDLE || a->attack == ATT_DRIP) {
        int fd[8], n = a->attack == ATT_IDLE ? 8 : 1; /* 6 processes: 48 idle connections */
        for (int i = 0; i < n; i++) CHILD_CHECK((fd[i] = raw_connect(port)) >= 0);
        for (int i = 0; i < 200; i++) { /* until the harness kills it */
            if (a->attack == ATT_DRIP && send(fd[0], "p", 1, MSG_NOSIGNAL) != 1) break;
            sleep_s(0.3);
        }
        return 0;
    }
    /* a process that is not of the job tries to join as rank 1 */
    DistEnv e = make_env(1, 2, port, NULL);
    char err[PP_ERR_MAX] = "";
    Comm *c = NULL;
    if (a->attack == ATT_WRONG_TOKEN) snprintf(e.token, sizeof e.token, "not-the-job-token-42");
    CHILD_CHECK(comm_create(&e, BASE_CFG, 3.0, &c, err, sizeof err) == PP_EUSAGE);
    fprintf(stderr, "(expected) intruder: %s\n", err);
    CHILD_CHECK(strstr(err, a->attack == ATT_WRONG_TOKEN ? "failed to prove it knows this "
                                                           "rank's PPTRAIN_JOB_TOKEN"
                                                         : "this rank has none"));
    return 0;
}

/* Ranks 0 and 1 of the job (rank 1 comes 0.6 s late), then the attackers. */
static int attack_main(int rank, int port, void *arg) {
    const AttackArg *a = arg;
    DistEnv e = make_env(rank, 2, port, NULL);
    char err[PP_ERR_MAX] = "";
    double t0 = pp_now(), v = rank + 1;
    Comm *c;
    int rc;
    if (rank >= 2) return attacker(rank - 2, a, port);
    if (rank == 1 && !a->with_rank1) return 0;
    if (a->token) snprintf(e.token, sizeof e.token, "%s", a->token);
    if (rank == 1) sleep_s(0.6);
    rc = comm_create(&e, BASE_CFG, a->timeout_s, &c, err, sizeof err);
    if (!a->with_rank1) { /* rank 0 alone: it gives up by its deadline, blaming rank 1 */
        fprintf(stderr, "(expected, after %.2f s) %s\n", pp_now() - t0, err);
        CHILD_CHECK(rc == PP_ERUNTIME && strstr(err, "waiting for rank(s) 1 to join"));
        CHILD_CHECK(pp_now() - t0 < a->timeout_s + 1.0);
        return 0;
    }
    if (rc) fprintf(stderr, "rank %d: %s\n", rank, err);
    CHILD_CHECK(rc == PP_OK);
    CHILD_CHECK(comm_allreduce_sum_f64(c, &v, 1) == PP_OK && v == 3);
    comm_destroy(c);
    CHILD_CHECK(pp_now() - t0 < 4.0); /* the attackers held up nothing */
    return 0;
}

static void run_attack(const AttackArg *a) {
    int st[MAXP], P = 2 + a->n_att;
    spawn_until(P, a->with_rank1 ? 2 : 1, attack_main, (void *)a, 30, st);
    for (int r = 0; r < (a->with_rank1 ? 2 : 1); r++)
        ck_assert_msg(st[r] == 0, "rank %d exited %d", r, st[r]);
    if (a->attack == ATT_FORGED || a->attack == ATT_WRONG_TOKEN || a->attack == ATT_NO_TOKEN)
        for (int r = 2; r < P; r++) ck_assert_msg(st[r] == 0, "attacker %d exited %d", r, st[r]);
}

/* Issue 17, item 3: forged hellos without a token made rank 0 exit 2 and locked rank 1
 * out; now each is refused alone and the job goes on. */
START_TEST(test_forged_hellos) {
    AttackArg a = {ATT_FORGED, 4, NULL, 10, 1};
    run_attack(&a);
}
END_TEST

/* Idle connections (40 made rank 0 blame rank 1 and give up; here 48) and slow-drip
 * ones hold nobody up; _i: without and with a token. */
START_TEST(test_idle_and_drip) {
    AttackArg a = {_i % 2 ? ATT_DRIP : ATT_IDLE, _i % 2 ? 5 : 6, _i / 2 ? TEST_TOKEN : NULL, 10, 1};
    run_attack(&a);
}
END_TEST

/* Issue 17, item 2: one byte every 0.3 s kept rank 0 past its timeout (the read timeout
 * restarted on every byte); now it gives up by its deadline, naming rank 1. */
START_TEST(test_drip_deadline) {
    AttackArg a = {ATT_DRIP, 1, NULL, 2.0, 0};
    run_attack(&a);
}
END_TEST

/* Issue 17, item 1: a process without the job's token cannot join it; _i: a wrong token,
 * no token. */
START_TEST(test_intruder_refused) {
    AttackArg a = {_i ? ATT_NO_TOKEN : ATT_WRONG_TOKEN, 2, TEST_TOKEN, 10, 1};
    run_attack(&a);
}
END_TEST

/* Issue 17, item 1: a peer's message header claiming 2^62 bytes killed rank 0 ("out of
 * memory allocating 4611686018427387904 bytes"); now the header is refused before
 * anything is allocated, and the receive fails naming the peer. Rank 1 here is a
 * process that joined the job (it holds the token) and then writes raw bytes. */
static int forged_header_main(int rank, int port, void *arg) {
    DistEnv e = make_env(rank, 2, port, NULL);
    char err[PP_ERR_MAX] = "", buf[64];
    CommReq *r;
    Comm *c;
    snprintf(e.token, sizeof e.token, "%s", TEST_TOKEN);
    if (rank == 1) {
        DistMesh m;
        WireHdr h;
        CHILD_CHECK(dist_connect(&e, BASE_CFG, 5.0, &m, err, sizeof err) == PP_OK);
        memset(&h, 0, sizeof h);
        h.magic = WIRE_MAGIC;
        h.bytes = 1ull << 62;
        CHILD_CHECK(dist_xfer(m.data_fd[0], &h, sizeof h, NULL, 0, 2, NULL, 0) == DIST_IO_OK);
        sleep_s(2);
        dist_mesh_close(&m);
        return 0;
    }
    CHILD_CHECK(comm_create(&e, BASE_CFG, 5.0, &c, err, sizeof err) == PP_OK);
    sleep_s(0.5); /* the header arrives first: no receive is posted for it */
    CHILD_CHECK(comm_irecv(c, 1, &(CommTag){0, 0, 0, 0}, buf, sizeof buf, &r) != PP_OK ||
                comm_wait(c, r) != PP_OK);
    fprintf(stderr, "(expected) %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "lost connection to rank 1"));
    CHILD_CHECK(strstr(comm_error(c), "claiming 4611686018427387904 bytes"));
    comm_destroy(c);
    return 0;
}

START_TEST(test_forged_header_2e62) {
    int st[MAXP];
    spawn(2, forged_header_main, NULL, 20, st);
    ck_assert_msg(st[0] == 0, "rank 0 exited %d", st[0]);
}
END_TEST

/* A smaller limit set by the caller (Comm.max_message_bytes) holds too. */
static int max_message_early(Comm *c, void *arg) {
    static char big[4096];
    CommReq *r;
    c->max_message_bytes = 1000; /* in force on a lane from its first receive */
    if (c->rank == 1) {
        CHILD_CHECK(comm_isend(c, 0, &(CommTag){0, 0, 0, 0}, big, 10, &r) == 0);
        CHILD_CHECK(comm_wait(c, r) == 0);
        sleep_s(0.2);
        CHILD_CHECK(comm_isend(c, 0, &(CommTag){1, 0, 0, 0}, big, sizeof big, &r) == 0);
        comm_wait(c, r); /* done once written, or failed once rank 0 shut the connection */
        sleep_s(0.5);
        return 0;
    }
    CHILD_CHECK(comm_irecv(c, 1, &(CommTag){0, 0, 0, 0}, big, 10, &r) == PP_OK);
    CHILD_CHECK(comm_wait(c, r) == PP_OK);
    sleep_s(0.5); /* the long one arrives before its receive */
    CHILD_CHECK(comm_irecv(c, 1, &(CommTag){1, 0, 0, 0}, big, sizeof big, &r) != PP_OK);
    fprintf(stderr, "(expected) %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "lost connection to rank 1"));
    CHILD_CHECK(strstr(comm_error(c), "claiming 4096 bytes, more than the 1000"));
    return 0;
}

START_TEST(test_max_message_bytes) {
    Job j = {2, 5.0, NULL, 0, max_message_early, NULL, NULL};
    run_job_ok(&j, 20);
}
END_TEST

/* ------------------------------------------------ connections that end early -- */

/* Issue 25: a connection a rank makes before the job has formed may end early (rank 0's
 * or a peer's door sheds it under a flood of connections); the rank makes it again
 * until its deadline, where before it failed at once. Rank 1 reaches rank 0 through a
 * relay (process 2) that cuts rank 1's first rendezvous connection after the handshake,
 * halfway through its hello, and its first mesh connection halfway through the
 * handshake; the job must form all the same. */
typedef struct {
    int relay_port;
} CutArg;

#define RELAY_MAX 8

/* The relay: accept at relay_port, connect each to rank 0 at port and copy both ways.
 * Rank 1 makes 5 connections through it: the rendezvous, cut after CUT_RDZV bytes from
 * rank 1; the rendezvous again; the mesh's data connection, cut after CUT_MESH; again;
 * the collective connection. Exits 0 once all 5 came, both cuts were made and every
 * connection closed. */
enum { CUT_RDZV = 48 + 40 + 20, CUT_MESH = 10 }; /* auth hello, proof; 20 of the hello */
static int relay_main(int port, int relay_port) {
    struct sockaddr_in to = {AF_INET, htons((uint16_t)port), {htonl(INADDR_LOOPBACK)}, {0}};
    struct sockaddr_in at = {AF_INET, htons((uint16_t)relay_port), {htonl(INADDR_LOOPBACK)}, {0}};
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    int n = 0, open_n = 0, cuts = 0;
    int c[RELAY_MAX], s[RELAY_MAX];
    size_t up[RELAY_MAX] = {0};
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    CHILD_CHECK(bind(lfd, (struct sockaddr *)&at, sizeof at) == 0 && listen(lfd, 16) == 0);
    for (double end = pp_now() + 20; pp_now() < end && (n < 5 || open_n > 0);) {
        struct pollfd pfd[1 + 2 * RELAY_MAX];
        int k = 0, polled = n;
        pfd[k++] = (struct pollfd){n < RELAY_MAX ? lfd : -1, POLLIN, 0};
        for (int i = 0; i < polled; i++) {
            pfd[k++] = (struct pollfd){c[i], POLLIN, 0};
            pfd[k++] = (struct pollfd){s[i], POLLIN, 0};
        }
        if (poll(pfd, (nfds_t)k, 100) <= 0) continue;
        if (pfd[0].revents & POLLIN) {
            c[n] = accept(lfd, NULL, NULL);
            s[n] = socket(AF_INET, SOCK_STREAM, 0);
            CHILD_CHECK(c[n] >= 0 && connect(s[n], (struct sockaddr *)&to, sizeof to) == 0);
            n++;
            open_n++;
        }
        for (int i = 0; i < polled; i++) {
            char buf[4096];
            size_t cut = i == 0 ? CUT_RDZV : i == 2 ? CUT_MESH : (size_t)-1, want;
            for (int dir = 0; dir < 2 && c[i] >= 0; dir++) {
                int from = dir ? s[i] : c[i], to_fd = dir ? c[i] : s[i];
                ssize_t got;
                if (!(pfd[1 + 2 * i + dir].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                want = dir == 0 && cut - up[i] < sizeof buf ? cut - up[i] : sizeof buf;
                got = recv(from, buf, want, 0);
                if (got > 0 && send(to_fd, buf, (size_t)got, MSG_NOSIGNAL) == got) {
                    if (dir == 0 && (up[i] += (size_t)got) == cut) {
                        got = 0;
                        cuts++;
                    } else {
                        continue;
                    }
                }
                /* one side closed, or the cut: end both */
                close(c[i]);
                close(s[i]);
                c[i] = s[i] = -1;
                open_n--;
            }
        }
    }
    fprintf(stderr, "relay: %d connections, %d cut\n", n, cuts);
    CHILD_CHECK(n == 5 && cuts == 2 && open_n == 0);
    return 0;
}

static int cut_main(int rank, int port, void *arg) {
    const CutArg *a = arg;
    DistEnv e = make_env(rank, 2, rank == 1 ? a->relay_port : port, NULL);
    char err[PP_ERR_MAX] = "";
    double v = rank + 1;
    Comm *c;
    int rc;
    if (rank == 2) return relay_main(port, a->relay_port);
    snprintf(e.token, sizeof e.token, "%s", TEST_TOKEN);
    if (rank == 1) sleep_s(0.3); /* after the relay and rank 0 listen */
    if ((rc = comm_create(&e, BASE_CFG, 10.0, &c, err, sizeof err)) != PP_OK)
        fprintf(stderr, "rank %d: %s\n", rank, err);
    CHILD_CHECK(rc == PP_OK);
    CHILD_CHECK(comm_allreduce_sum_f64(c, &v, 1) == PP_OK && v == 3);
    comm_destroy(c);
    return 0;
}

START_TEST(test_cut_connections_retried) {
    CutArg a = {free_port()};
    int st[MAXP];
    spawn(3, cut_main, &a, 30, st);
    for (int r = 0; r < 3; r++) ck_assert_msg(st[r] == 0, "process %d exited %d", r, st[r]);
}
END_TEST

static Suite *auth_suite(void) {
    Suite *s = suite_create("auth");
    TCase *hs = tcase_create("handshake"), *att = tcase_create("attacks");
    tcase_add_loop_test(hs, test_handshake_cases, 0, (int)(sizeof HS / sizeof HS[0]));
    tcase_add_test(hs, test_handshake_replay);
    tcase_add_test(hs, test_handshake_garbage);
    tcase_add_test(hs, test_hmac_known_answer);
    tcase_add_test(hs, test_token_env);
    tcase_set_timeout(att, 60);
    tcase_add_test(att, test_forged_hellos);
    tcase_add_loop_test(att, test_idle_and_drip, 0, 4);
    tcase_add_test(att, test_drip_deadline);
    tcase_add_loop_test(att, test_intruder_refused, 0, 2);
    tcase_add_test(att, test_forged_header_2e62);
    tcase_add_test(att, test_max_message_bytes);
    tcase_add_test(att, test_cut_connections_retried);
    suite_add_tcase(s, hs);
    suite_add_tcase(s, att);
    return s;
}

int main(void) {
    return check_run(auth_suite(), 1);
}
