/* test_comm.c — the process-group layer: environment parsing, the rendezvous and its
 * config check, point-to-point messages and the job's collectives over the socket
 * transport between real forked processes on loopback and over the memory transport
 * between threads (the same bodies: the memory transport must behave as sockets do),
 * and the 1-rank local transport. Ranks report through exit codes and stderr. Groups
 * are tested in test_comm_groups.c. */
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "commtest.h"
#include "checkrun.h"

/* -------------------------------------------------------- point-to-point tests -- */

/* Ring (to rank+1, from rank-1) for 3 rounds, then every pair at once; sizes differ per
 * (src, dst, round) so that mixed-up messages cannot pass. */
static int body_ring_allpairs(Comm *c, void *arg) {
    int P = c->world, me = c->rank, next = (me + 1) % P, prev = (me + P - 1) % P;
    size_t wrong = 0;
    uint8_t *sb[MAXP], *rb[MAXP];
    CommReq *sr[MAXP], *rr[MAXP];
    for (int round = 0; round < 3; round++) {
        size_t ns = 1000 + 17 * me + round, nr = 1000 + 17 * prev + round;
        uint8_t *s = malloc(ns), *r = malloc(nr);
        fill(s, ns, me, next, round);
        CHILD_CHECK(comm_irecv(c, prev, &(CommTag){round, prev, 0, 0}, r, nr, &rr[0]) == 0);
        CHILD_CHECK(comm_isend(c, next, &(CommTag){round, me, 0, 0}, s, ns, &sr[0]) == 0);
        CHILD_CHECK(comm_wait(c, sr[0]) == 0);
        CHILD_CHECK(comm_wait(c, rr[0]) == 0);
        wrong += count_wrong(r, nr, prev, me, round);
        free(s);
        free(r);
    }
    for (int p = 0; p < P; p++) {
        size_t ns = 4096 + 100 * me + p, nr = 4096 + 100 * p + me;
        if (p == me) continue;
        sb[p] = malloc(ns);
        rb[p] = malloc(nr);
        fill(sb[p], ns, me, p, 7);
        CHILD_CHECK(comm_isend(c, p, &(CommTag){7, me, p, 1}, sb[p], ns, &sr[p]) == 0);
        CHILD_CHECK(comm_irecv(c, p, &(CommTag){7, p, me, 1}, rb[p], nr, &rr[p]) == 0);
    }
    for (int p = 0; p < P; p++) {
        if (p == me) continue;
        CHILD_CHECK(comm_wait(c, rr[p]) == 0);
        CHILD_CHECK(comm_wait(c, sr[p]) == 0);
        wrong += count_wrong(rb[p], 4096 + 100 * p + me, p, me, 7);
        free(sb[p]);
        free(rb[p]);
    }
    return wrong != 0;
}

/* _i: P = 2, 3, 4 over sockets (3 with a job token), then over memory. */
START_TEST(test_ring_allpairs) {
    Job j = {2 + _i % 3, 5.0, NULL, 0, body_ring_allpairs, NULL, _i == 1 ? TEST_TOKEN : NULL};
    run_job_via(_i < 3 ? VIA_SOCKETS : VIA_MEMORY, &j, 20);
}
END_TEST

/* Whether ::1 can be bound here (containers often run without IPv6). */
static int have_ipv6_loopback(void) {
    struct sockaddr_in6 a;
    int fd = socket(AF_INET6, SOCK_STREAM, 0), ok;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* Over IPv6 loopback, with rank 0 starting late so the others must retry; with a job
 * token. */
START_TEST(test_ipv6_late_root) {
    Job j = {3, 5.0, "::1", 0.4, body_ring_allpairs, NULL, TEST_TOKEN};
    if (!have_ipv6_loopback()) {
        fprintf(stderr, "note: no IPv6 loopback here; test_ipv6_late_root uses 127.0.0.1\n");
        j.addr = NULL;
    }
    run_job_ok(&j, 20);
}
END_TEST

/* Both ranks send 64 MiB + 3 bytes to each other before either receives; rank 1 posts
 * its receive late, so the message arrives before it (the early path). */
static int body_big(Comm *c, void *arg) {
    size_t n = (64u << 20) + 3;
    int me = c->rank, peer = 1 - me;
    uint8_t *s = malloc(n), *r = malloc(n);
    CommReq *sr, *rr;
    size_t wrong;
    CHILD_CHECK(s && r);
    fill(s, n, me, peer, 1);
    CHILD_CHECK(comm_isend(c, peer, &(CommTag){0, 0, 0, 0}, s, n, &sr) == 0);
    if (me == 1) sleep_s(0.3);
    CHILD_CHECK(comm_irecv(c, peer, &(CommTag){0, 0, 0, 0}, r, n, &rr) == 0);
    CHILD_CHECK(comm_wait(c, rr) == 0);
    CHILD_CHECK(comm_wait(c, sr) == 0);
    wrong = count_wrong(r, n, peer, me, 1);
    free(s);
    free(r);
    return wrong != 0;
}

START_TEST(test_big_message) {
    Job j = {2, 10.0, NULL, 0, body_big, NULL, NULL};
    run_job_ok(&j, 30);
}
END_TEST

#define NSMALL 300

static size_t small_size(int i) { return (size_t)((i * 7919) % 20011) * (i % 5 != 0); }

/* Rank 0 sends NSMALL messages of mixed sizes (zero included); rank 1 posts the first
 * 100 receives before they arrive, the rest after (early messages), and completes
 * some with comm_test. FIFO order and every byte are checked. */
static int body_fifo(Comm *c, void *arg) {
    CommReq *req[NSMALL];
    uint8_t *buf[NSMALL];
    size_t wrong = 0;
    for (int i = 0; i < NSMALL; i++) buf[i] = malloc(small_size(i) + 1);
    if (c->rank == 0) {
        for (int i = 0; i < NSMALL; i++) {
            fill(buf[i], small_size(i), 0, 1, i);
            CHILD_CHECK(comm_isend(c, 1, &(CommTag){i, 1, i % 4, 0}, buf[i], small_size(i),
                                   &req[i]) == 0);
        }
        for (int i = 0; i < NSMALL; i++) CHILD_CHECK(comm_wait(c, req[i]) == 0);
    } else {
        for (int i = 0; i < NSMALL; i++) {
            if (i == 100) sleep_s(0.3);
            CHILD_CHECK(comm_irecv(c, 0, &(CommTag){i, 1, i % 4, 0}, buf[i], small_size(i),
                                   &req[i]) == 0);
        }
        for (int i = 0; i < NSMALL; i++) {
            int done = 0;
            if (i % 3 == 0) {
                double end = pp_now() + 5;
                while (!done && pp_now() < end) CHILD_CHECK(comm_test(c, req[i], &done) == 0);
                CHILD_CHECK(done);
            } else {
                CHILD_CHECK(comm_wait(c, req[i]) == 0);
            }
            wrong += count_wrong(buf[i], small_size(i), 0, 1, i);
        }
    }
    for (int i = 0; i < NSMALL; i++) free(buf[i]);
    return wrong != 0;
}

START_TEST(test_fifo_mixed_sizes) {
    Job j = {2, 5.0, NULL, 0, body_fifo, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

/* Rank 0 sends two messages; rank 1 expects other tags: once posted before the message
 * arrives (the wait fails), once after (the irecv fails). Both name both tags. */
static int body_mismatch(Comm *c, void *arg) {
    char a[16] = {0}, b[16];
    CommReq *r;
    if (c->rank == 0) {
        CHILD_CHECK(comm_isend(c, 1, &(CommTag){5, 1, 3, 0}, a, 16, &r) == 0);
        CHILD_CHECK(comm_wait(c, r) == 0);
        return 0;
    }
    sleep_s(0.2); /* the message is there when irecv is called */
    CHILD_CHECK(comm_irecv(c, 0, &(CommTag){5, 1, 4, 0}, b, 16, &r) == PP_ERUNTIME);
    CHILD_CHECK(r == NULL);
    fprintf(stderr, "(expected) %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "rank 0 sent (step 5, stage 1, microbatch 3, activation"));
    CHILD_CHECK(strstr(comm_error(c), "rank 1 expected (step 5, stage 1, microbatch 4, "
                                      "activation; 16 bytes)"));
    return 0;
}

static int body_mismatch_posted(Comm *c, void *arg) {
    char a[16] = {0}, b[24];
    CommReq *r;
    if (c->rank == 0) {
        CHILD_CHECK(comm_barrier(c) == 0);
        CHILD_CHECK(comm_isend(c, 1, &(CommTag){6, 1, 0, 1}, a, 16, &r) == 0);
        CHILD_CHECK(comm_wait(c, r) == 0);
        return 0;
    }
    CHILD_CHECK(comm_irecv(c, 0, &(CommTag){6, 1, 0, 1}, b, 24, &r) == 0);
    CHILD_CHECK(comm_barrier(c) == 0);
    CHILD_CHECK(comm_wait(c, r) == PP_ERUNTIME);
    fprintf(stderr, "(expected) %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "rank 0 sent (step 6, stage 1, microbatch 0, gradient; "
                                      "16 bytes) but rank 1 expected (step 6, stage 1, "
                                      "microbatch 0, gradient; 24 bytes)"));
    return 0;
}

/* What the flight recorder reads of a transport: when the request a wait freed completed
 * (Comm.done_at: rank 0's send, long before its wait) and whom the caller blocks on or
 * last blocked on (comm_blocked_on: rank 2, whose send comes late; then the barrier's
 * root); the memory transport does not know (-1). */
static int body_done_at_blocked(Comm *c, void *arg) {
    char a[64] = {0}, b[64], d[64];
    CommReq *r, *r2;
    int sockets = !strcmp(c->ops->name, "socket");
    if (c->rank == 0) {
        CHILD_CHECK(comm_isend(c, 1, &(CommTag){1, 0, 0, 0}, a, sizeof a, &r) == 0);
        sleep_s(0.3);
        double t = pp_now();
        CHILD_CHECK(comm_wait(c, r) == 0);
        CHILD_CHECK(c->done_at > 0 && c->done_at < t - 0.2);
    } else if (c->rank == 2) {
        sleep_s(0.3);
        CHILD_CHECK(comm_isend(c, 1, &(CommTag){1, 2, 0, 0}, a, sizeof a, &r) == 0);
        CHILD_CHECK(comm_wait(c, r) == 0);
    } else {
        CHILD_CHECK(comm_blocked_on(c) == -1);
        CHILD_CHECK(comm_irecv(c, 0, &(CommTag){1, 0, 0, 0}, b, sizeof b, &r) == 0);
        CHILD_CHECK(comm_irecv(c, 2, &(CommTag){1, 2, 0, 0}, d, sizeof d, &r2) == 0);
        double t = pp_now();
        CHILD_CHECK(comm_wait(c, r2) == 0);
        CHILD_CHECK(c->done_at > t + 0.1 && c->done_at <= pp_now());
        CHILD_CHECK(comm_blocked_on(c) == (sockets ? 2 : -1));
        CHILD_CHECK(comm_wait(c, r) == 0);
    }
    CHILD_CHECK(comm_barrier(c) == 0);
    if (c->rank != 0) CHILD_CHECK(comm_blocked_on(c) == (sockets ? 0 : -1));
    return 0;
}

START_TEST(test_done_at_blocked_on) {
    Job j = {3, 5.0, NULL, 0, body_done_at_blocked, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

/* _i: message there first / receive posted first, over sockets then memory. */
START_TEST(test_tag_mismatch) {
    Job j = {2, 5.0, NULL, 0, _i % 2 ? body_mismatch_posted : body_mismatch, NULL, NULL};
    run_job_via(_i < 2 ? VIA_SOCKETS : VIA_MEMORY, &j, 20);
}
END_TEST

/* ---------------------------------------------------------------- collectives -- */

/* Rank r's allreduce input: the rank order of the additions changes the result
 * (1e16 + 1 rounds back to 1e16), so only the rank-ordered sum passes. */
static double ar_input(int r, int i) {
    static const double v[4] = {1e16, 1.0, -1e16, 1.0};
    return i == 0 ? v[r % 4] : (r + 1) * 0.1 + i * 1e-3;
}

/* Rank r's float all-reduce input, with NaNs of different payloads on every rank (which
 * one would survive depends on the operand order: the transport makes it canonical).
 * Not inlined: GCC would fuse its product with the expected sum's addition (an FMA). */
__attribute__((noinline)) static float ps_input(int r, size_t i) {
    uint32_t bits = 0x7fc00000u | (uint32_t)(r + 1);
    float f;
    if (i % 100000 == 7) {
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    return (float)sin((double)i * 0.001 + r) * (float)(r + 1);
}

typedef struct {
    double t0; /* pp_now() before the children were forked */
} CollArg;

static int check_allreduce(Comm *c) {
    double v[5], want[5];
    for (int i = 0; i < 5; i++) {
        v[i] = ar_input(c->rank, i);
        want[i] = ar_input(0, i);
        for (int r = 1; r < c->world; r++) want[i] += ar_input(r, i);
    }
    CHILD_CHECK(comm_allreduce_sum_f64(c, v, 5) == 0);
    CHILD_CHECK(memcmp(v, want, sizeof v) == 0);
    CHILD_CHECK(c->world != 4 || v[0] == 1.0); /* ((1e16 + 1) - 1e16) + 1 */
    return 0;
}

/* allreduce_sum_f32 on g, whose members are the job's ranks members[0..n) in order,
 * this rank being `me`: every element must be the rank-order sum of their inputs (NaNs
 * canonical), bit for bit. */
static int check_sum_f32(Comm *g, int me, const int *members, int n) {
    size_t len = 600001, wrong = 0; /* several chunks */
    uint32_t canon_bits = 0x7fc00000u;
    float *b = malloc(len * sizeof *b), canon;
    memcpy(&canon, &canon_bits, sizeof canon);
    for (size_t i = 0; i < len; i++) b[i] = ps_input(me, i);
    CHILD_CHECK(comm_allreduce_sum_f32(g, b, len) == 0);
    for (size_t i = 0; i < len; i++) {
        float want = ps_input(members[0], i);
        for (int k = 1; k < n; k++) want += ps_input(members[k], i);
        if (isnan(want)) want = canon;
        if (memcmp(&b[i], &want, sizeof want) != 0 && wrong++ < 3)
            fprintf(stderr, "rank %d: sum [%zu] = %a, want %a\n", me, i, b[i], want);
    }
    free(b);
    CHILD_CHECK(wrong == 0);
    return 0;
}

/* The float all-reduce of the pairs {0, 1}, {2, 3} (what the tied embedding's pair
 * sum is), then of the whole job. */
static int check_pairs_and_all_f32(Comm *c) {
    int pair[2] = {c->rank & ~1, c->rank | 1}, all[MAXP];
    Comm *g;
    CHILD_CHECK(comm_split(c, c->rank / 2, c->rank, &g) == 0);
    CHILD_CHECK(g && g->world == 2 && g->rank == c->rank % 2);
    if (check_sum_f32(g, c->rank, pair, 2)) return 1;
    comm_destroy(g);
    for (int r = 0; r < c->world; r++) all[r] = r;
    return check_sum_f32(c, c->rank, all, c->world);
}

static int body_collectives(Comm *c, void *arg) {
    const CollArg *a = arg;
    uint8_t bc[1000], *big = malloc(4 << 20), *got = malloc(4 << 20);
    CommReq *r = NULL;
    /* A point-to-point message in flight across the collectives must not confuse them. */
    if (c->rank == 0) fill(big, 4 << 20, 0, 1, 9);
    if (c->rank == 0) CHILD_CHECK(comm_isend(c, 1, &(CommTag){9, 0, 0, 0}, big, 4 << 20, &r) == 0);
    if (check_allreduce(c)) return 1;
    if (check_pairs_and_all_f32(c)) return 1;
    if (c->rank == 2) fill(bc, sizeof bc, 2, 2, 3);
    CHILD_CHECK(comm_broadcast(c, 2, bc, sizeof bc) == 0);
    CHILD_CHECK(count_wrong(bc, sizeof bc, 2, 2, 3) == 0);
    /* Barrier: rank r arrives r*0.15 s late; nobody leaves before the last arrives. */
    sleep_s(0.15 * c->rank);
    CHILD_CHECK(comm_barrier(c) == 0);
    CHILD_CHECK(pp_now() - a->t0 >= 0.15 * (c->world - 1));
    if (c->rank == 1) CHILD_CHECK(comm_irecv(c, 0, &(CommTag){9, 0, 0, 0}, got, 4 << 20, &r) == 0);
    if (r) CHILD_CHECK(comm_wait(c, r) == 0);
    if (c->rank == 1) CHILD_CHECK(count_wrong(got, 4 << 20, 0, 1, 9) == 0);
    free(big);
    free(got);
    return 0;
}

START_TEST(test_collectives) {
    CollArg a = {pp_now()};
    Job j = {4, 5.0, NULL, 0, body_collectives, &a, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 30);
}
END_TEST

/* Rank 0 calls a barrier while rank 1 calls an allreduce: both fail and say so. */
static int body_coll_mismatch(Comm *c, void *arg) {
    double v = 1;
    int rc = c->rank == 0 ? comm_barrier(c) : comm_allreduce_sum_f64(c, &v, 1);
    CHILD_CHECK(rc == PP_ERUNTIME);
    fprintf(stderr, "(expected) %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "rank 1 called allreduce #0"));
    CHILD_CHECK(strstr(comm_error(c), "rank 0 called barrier #0"));
    return 0;
}

START_TEST(test_collective_mismatch) {
    Job j = {2, 3.0, NULL, 0, body_coll_mismatch, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

/* ------------------------------------------------------------------- failures -- */

/* Rank 2 dies with SIGKILL (over memory: returns, and its Comm is destroyed); ranks 0
 * and 1, waiting on it, fail promptly (well within the timeout) naming rank 2 and the
 * tag, and sending to it fails without SIGPIPE. arg: a Via. */
static int body_killed(Comm *c, void *arg) {
    char buf[64] = {0};
    static char big[8 << 20];
    CommReq *r;
    double t;
    int rc;
    if (c->rank == 2) {
        sleep_s(0.2);
        if (*(const Via *)arg == VIA_MEMORY) return 0;
        raise(SIGKILL);
    }
    CHILD_CHECK(comm_irecv(c, 2, &(CommTag){4, 2, 7, 0}, buf, sizeof buf, &r) == 0);
    t = pp_now();
    CHILD_CHECK(comm_wait(c, r) == PP_ERUNTIME);
    CHILD_CHECK(pp_now() - t < 2.0);
    fprintf(stderr, "(expected) %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "lost connection to rank 2 while waiting to receive "
                                      "(step 4, stage 2, microbatch 7, activation)"));
    rc = comm_isend(c, 2, &(CommTag){4, 1, 7, 1}, big, sizeof big, &r);
    if (rc == PP_OK) rc = comm_wait(c, r);
    CHILD_CHECK(rc == PP_ERUNTIME && strstr(comm_error(c), "rank 2"));
    /* The survivors still talk to each other. */
    CHILD_CHECK(comm_isend(c, 1 - c->rank, &(CommTag){5, 0, 0, 0}, buf, 8, &r) == 0);
    CHILD_CHECK(comm_wait(c, r) == 0);
    CHILD_CHECK(comm_irecv(c, 1 - c->rank, &(CommTag){5, 0, 0, 0}, buf, 8, &r) == 0);
    CHILD_CHECK(comm_wait(c, r) == 0);
    return 0;
}

START_TEST(test_peer_killed) {
    Via via = _i ? VIA_MEMORY : VIA_SOCKETS;
    Job j = {3, 5.0, NULL, 0, body_killed, &via, NULL};
    int st[MAXP];
    if (via == VIA_MEMORY) {
        run_job_via(via, &j, 20);
        return;
    }
    spawn(3, job_main, &j, 20, st);
    ck_assert_int_eq(st[0], 0);
    ck_assert_int_eq(st[1], 0);
    ck_assert_int_eq(st[2], 128 + SIGKILL);
}
END_TEST

/* Rank 1 stays alive but silent for 3 timeouts; rank 0's receive times out after the
 * timeout T, naming rank 1, and then its barrier fails naming rank 1 too: over sockets at
 * once (rank 0 gave up on it), in memory after another T. */
static int body_silent(Comm *c, void *arg) {
    char buf[8];
    CommReq *r;
    double t, T = c->timeout_s;
    if (c->rank == 1) {
        sleep_s(3 * T);
        return 0;
    }
    CHILD_CHECK(comm_irecv(c, 1, &(CommTag){2, 1, 1, 1}, buf, sizeof buf, &r) == 0);
    t = pp_now();
    CHILD_CHECK(comm_wait(c, r) == PP_ERUNTIME);
    t = pp_now() - t;
    fprintf(stderr, "(expected, after %.2f s) %s\n", t, comm_error(c));
    CHILD_CHECK(t > 0.9 * T && t < T + 0.8);
    CHILD_CHECK(strstr(comm_error(c), "timed out waiting for rank 1 (step 2, stage 1, "
                                      "microbatch 1, gradient)"));
    t = pp_now();
    CHILD_CHECK(comm_barrier(c) == PP_ERUNTIME);
    t = pp_now() - t;
    fprintf(stderr, "(expected, after %.2f s) %s\n", t, comm_error(c));
    if (strcmp(c->ops->name, "socket") == 0) { /* given up on already: at once */
        CHILD_CHECK(t < 0.5);
        CHILD_CHECK(strstr(comm_error(c), "lost connection to rank 1 in barrier #0: rank 0 "
                                          "gave up on it"));
        return 0;
    }
    CHILD_CHECK(t > 0.9 * T && t < T + 0.8);
    CHILD_CHECK(strstr(comm_error(c), "timed out in barrier #0: rank 1 sent nothing"));
    return 0;
}

/* Rank 1 never enters the allreduce and rank 0 enters it late: rank 2, which waited
 * longest, must still blame rank 1, not rank 0 ([Note: collective keep-alive]). */
static int body_silent_middle(Comm *c, void *arg) {
    double v = 1.0;
    if (c->rank == 1) {
        sleep_s(3 * c->timeout_s);
        return 0;
    }
    if (c->rank == 0) sleep_s(0.5 * c->timeout_s);
    CHILD_CHECK(comm_allreduce_sum_f64(c, &v, 1) == PP_ERUNTIME);
    fprintf(stderr, "(expected) rank %d: %s\n", c->rank, comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "rank 1 sent nothing"));
    return 0;
}

START_TEST(test_silent_peer_blamed) {
    Job j = {3, _i ? 0.5 : 1.0, NULL, 0, body_silent_middle, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

START_TEST(test_silent_peer) {
    Job j = {2, _i ? 0.5 : 1.0, NULL, 0, body_silent, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

/* ----------------------------------------------------------------- rendezvous -- */

typedef struct {
    const char *cfg[MAXP];  /* per-rank config text (NULL = BASE_CFG) */
    int claim_rank[MAXP];   /* the rank each process claims */
    int claim_world[MAXP];  /* the world size each process claims */
    int want_status;        /* what comm_create must return on every rank */
    const char *want_msg;   /* ... with this in its message */
} RdzvArg;

/* With a job token every process is a real (if misconfigured) rank of the job, so a
 * mismatch fails them all at once (without one, see test_auth.c). */
static int rdzv_main(int rank, int port, void *arg) {
    const RdzvArg *a = arg;
    DistEnv e = make_env(a->claim_rank[rank], a->claim_world[rank], port, NULL);
    char err[PP_ERR_MAX] = "";
    snprintf(e.token, sizeof e.token, "%s", TEST_TOKEN);
    Comm *c = NULL;
    int rc = comm_create(&e, a->cfg[rank] ? a->cfg[rank] : BASE_CFG, 5.0, &c, err, sizeof err);
    if (rc == PP_OK) comm_destroy(c);
    fprintf(stderr, "(expected) process %d: %s\n", rank, err);
    CHILD_CHECK(rc == a->want_status);
    CHILD_CHECK(strstr(err, a->want_msg));
    return 0;
}

static void run_rdzv(int P, const RdzvArg *a) {
    int st[MAXP];
    double t = pp_now();
    spawn(P, rdzv_main, (void *)a, 20, st);
    for (int r = 0; r < P; r++) ck_assert_msg(st[r] == 0, "process %d exited %d", r, st[r]);
    ck_assert_msg(pp_now() - t < 4.0, "the verdict took %.1f s", pp_now() - t);
}

START_TEST(test_config_mismatch) {
    /* Ranks 1 and 2 both differ; every rank reports the lowest one. */
    RdzvArg a = {{NULL,
                  "model:\n  n_layers: 4\n  dim: 64\ntrain:\n  steps: 10\n  optimizer:\n"
                  "    name: adamw\n    lr: 0.001\n  seed: 1337\npipeline:\n  stages: 2\n",
                  "model:\n  n_layers: 4\n  dim: 64\ntrain:\n  steps: 20\n"},
                 {0, 1, 2}, {3, 3, 3}, PP_EUSAGE,
                 "rank 1's config differs from rank 0's at train.optimizer.lr: 0.001 vs "
                 "0.0003 — launch every rank with the same config and --set flags"};
    run_rdzv(3, &a);
}
END_TEST

START_TEST(test_config_mismatch_steps) {
    RdzvArg a = {{NULL, "model:\n  n_layers: 4\n  dim: 64\ntrain:\n  steps: 20\n"},
                 {0, 1}, {2, 2}, PP_EUSAGE,
                 "rank 1's config differs from rank 0's at train.steps: 20 vs 10"};
    run_rdzv(2, &a);
}
END_TEST

START_TEST(test_world_mismatch) {
    RdzvArg a = {{NULL}, {0, 1}, {2, 3}, PP_EUSAGE,
                 "rank 1 was launched with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"};
    run_rdzv(2, &a);
}
END_TEST

START_TEST(test_duplicate_rank) {
    RdzvArg a = {{NULL}, {0, 1, 1}, {3, 3, 3}, PP_EUSAGE, "two processes claim rank 1"};
    run_rdzv(3, &a);
}
END_TEST

/* Alone, rank 0 times out waiting for rank 1, and rank 1 for rank 0. */
START_TEST(test_rendezvous_timeout) {
    int port = free_port();
    DistEnv e0 = make_env(0, 2, port, NULL), e1 = make_env(1, 2, port, NULL);
    DistMesh m;
    char err[PP_ERR_MAX];
    double t = pp_now();
    ck_assert_int_eq(dist_connect(&e0, BASE_CFG, 0.5, &m, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, "waiting for rank(s) 1 to join"), "%s", err);
    ck_assert_int_eq(dist_connect(&e1, BASE_CFG, 0.5, &m, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, "could not reach rank 0 at 127.0.0.1:"), "%s", err);
    ck_assert(pp_now() - t < 2.5);
}
END_TEST

/* ---------------------------------------------------------- local transport -- */

/* The float collectives of one rank: identities, NaNs made canonical by the sums;
 * split gives a 1-rank group or none. Returns the number of wrong results. */
static int check_local_f32(Comm *c) {
    uint32_t nan_bits = 0x7fc00123u, canon_bits = 0x7fc00000u, bits;
    float x[3] = {1.5f, 0, -2}, y[3] = {0}, z[3] = {0};
    Comm *g = (Comm *)1;
    int wrong = 0;
    memcpy(&x[1], &nan_bits, sizeof x[1]);
    memcpy(z, x, sizeof z);
    wrong += comm_all_gather_f32(c, x, y, 3) != PP_OK || memcmp(x, y, sizeof x) != 0;
    wrong += comm_reduce_scatter_sum_f32(c, x, y, 3) != PP_OK || y[0] != 1.5f || y[2] != -2;
    memcpy(&bits, &y[1], sizeof bits);
    wrong += bits != canon_bits;
    wrong += comm_allreduce_sum_f32(c, z, 3) != PP_OK || memcmp(z, y, sizeof z) != 0;
    wrong += comm_split(c, -1, 0, &g) != PP_OK || g != NULL;
    wrong += comm_split(c, 5, 0, &g) != PP_OK || !g || g->world != 1 || g->rank != 0;
    wrong += comm_allreduce_sum_f32(g, x, 3) != PP_OK || memcmp(x, y, sizeof x) != 0;
    comm_destroy(g);
    return wrong;
}

START_TEST(test_local) {
    Comm *c = comm_local_create();
    int a[4] = {1, 2, 3, 4}, b[4] = {0}, x[4] = {0}, done;
    double v[2] = {1.5, -2};
    CommReq *s, *r, *r2;
    ck_assert_int_eq(c->world, 1);
    /* Send first, then receive; receive first, then send. */
    ck_assert_int_eq(comm_isend(c, 0, &(CommTag){0, 0, 0, 0}, a, sizeof a, &s), 0);
    ck_assert_int_eq(comm_wait(c, s), 0);
    ck_assert_int_eq(comm_irecv(c, 0, &(CommTag){0, 0, 0, 0}, b, sizeof b, &r), 0);
    ck_assert_int_eq(comm_wait(c, r), 0);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    ck_assert_int_eq(comm_irecv(c, 0, &(CommTag){1, 0, 0, 0}, x, sizeof x, &r), 0);
    ck_assert_int_eq(comm_test(c, r, &done), 0);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(comm_isend(c, 0, &(CommTag){1, 0, 0, 0}, a, sizeof a, &s), 0);
    ck_assert_int_eq(comm_test(c, r, &done), 0);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(comm_wait(c, s), 0);
    ck_assert_int_eq(memcmp(a, x, sizeof a), 0);
    /* A receive nothing can satisfy fails at once instead of hanging. */
    ck_assert_int_eq(comm_irecv(c, 0, &(CommTag){2, 0, 5, 1}, x, sizeof x, &r2), 0);
    ck_assert_int_eq(comm_wait(c, r2), PP_ERUNTIME);
    ck_assert_msg(strstr(comm_error(c), "(step 2, stage 0, microbatch 5, kind 1) can never "
                                        "complete"), "%s", comm_error(c));
    /* A mismatched tag is named. */
    ck_assert_int_eq(comm_isend(c, 0, &(CommTag){3, 0, 0, 0}, a, sizeof a, &s), 0);
    ck_assert_int_eq(comm_irecv(c, 0, &(CommTag){3, 0, 1, 0}, x, sizeof x, &r), PP_ERUNTIME);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(comm_error(c), "does not match"), "%s", comm_error(c));
    ck_assert_int_eq(comm_wait(c, s), 0);
    ck_assert_int_eq(comm_allreduce_sum_f64(c, v, 2), 0);
    ck_assert(v[0] == 1.5 && v[1] == -2);
    ck_assert_int_eq(comm_barrier(c), 0);
    ck_assert_int_eq(comm_broadcast(c, 0, a, sizeof a), 0);
    ck_assert_int_eq(check_local_f32(c), 0);
    ck_assert_int_eq(comm_isend(c, 1, &(CommTag){0, 0, 0, 0}, a, 4, &s), PP_ERUNTIME);
    /* Requests never waited for, and messages never received, are freed by destroy
     * (valgrind/ASan check this). */
    ck_assert_int_eq(comm_irecv(c, 0, &(CommTag){5, 0, 0, 0}, x, sizeof x, &r), 0);
    comm_destroy(c);
    c = comm_local_create();
    ck_assert_int_eq(comm_isend(c, 0, &(CommTag){4, 0, 0, 0}, a, sizeof a, &s), 0);
    comm_destroy(c);
}
END_TEST

/* --------------------------------------------------------------- environment -- */

static const char *ENV_VARS[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "PPTRAIN_RDZV_PORT", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOB_ID",
};

/* Start from a clean environment, then set NAME=VALUE pairs (NULL-terminated). Each
 * test runs in its own forked process, so nothing leaks between tests. */
static void env_set(const char *first, ...) {
    va_list ap;
    for (size_t i = 0; i < sizeof ENV_VARS / sizeof *ENV_VARS; i++) unsetenv(ENV_VARS[i]);
    va_start(ap, first);
    for (const char *k = first; k; k = va_arg(ap, const char *))
        setenv(k, va_arg(ap, const char *), 1);
    va_end(ap);
}

START_TEST(test_env_none) {
    DistEnv e;
    char err[PP_ERR_MAX];
    env_set(NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.rank, 0);
    ck_assert_int_eq(e.world, 1);
    ck_assert_int_eq(e.local_rank, 0);
    ck_assert_int_eq(e.local_world, 1);
    ck_assert_int_eq(e.source, DIST_SRC_NONE);
    ck_assert_int_eq(e.master_port, DIST_DEFAULT_PORT);
}
END_TEST

START_TEST(test_env_torchrun) {
    DistEnv e;
    char err[PP_ERR_MAX];
    env_set("RANK", "5", "WORLD_SIZE", "8", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "4",
            "MASTER_ADDR", "node7", "MASTER_PORT", "1234", "SLURM_PROCID", "0",
            "SLURM_NTASKS", "2", NULL); /* torchrun-style wins over SLURM */
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.source, DIST_SRC_TORCHRUN);
    ck_assert_int_eq(e.rank, 5);
    ck_assert_int_eq(e.world, 8);
    ck_assert_int_eq(e.local_rank, 1);
    ck_assert_int_eq(e.local_world, 4);
    ck_assert_str_eq(e.master_addr, "node7");
    ck_assert_int_eq(e.master_port, 1234);
    ck_assert_int_eq(e.rdzv_port, 1234);
    ck_assert_int_eq(e.under_torchrun, 0);
    /* Without LOCAL_*: one node. */
    env_set("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "::1", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.local_rank, 1);
    ck_assert_int_eq(e.local_world, 2);
    ck_assert_int_eq(e.master_port, DIST_DEFAULT_PORT);
}
END_TEST

START_TEST(test_env_torchrun_ports) {
    DistEnv e;
    char err[PP_ERR_MAX];
    env_set("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "29400",
            "TORCHELASTIC_RUN_ID", "abc", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.under_torchrun, 1);
    ck_assert_int_eq(e.master_port, 29400);
    ck_assert_int_eq(e.rdzv_port, 29401); /* torchrun's TCPStore has MASTER_PORT */
    setenv("PPTRAIN_RDZV_PORT", "31000", 1);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.rdzv_port, 31000);
}
END_TEST

START_TEST(test_env_slurm) {
    DistEnv e;
    char err[PP_ERR_MAX];
    env_set("SLURM_PROCID", "9", "SLURM_NTASKS", "10", "SLURM_LOCALID", "1", "SLURM_NODEID",
            "2", "SLURM_STEP_TASKS_PER_NODE", "4(x2),2", "SLURM_NTASKS_PER_NODE", "4",
            "MASTER_ADDR", "n0", "SLURM_STEP_ID", "0", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.source, DIST_SRC_SLURM);
    ck_assert_int_eq(e.rank, 9);
    ck_assert_int_eq(e.world, 10);
    ck_assert_int_eq(e.local_rank, 1);
    ck_assert_int_eq(e.local_world, 2); /* the step's list wins: node 2 has 2 */
    ck_assert_int_eq(e.master_port, DIST_DEFAULT_PORT);
    ck_assert_int_eq(e.rdzv_port, DIST_DEFAULT_PORT);
    unsetenv("SLURM_STEP_TASKS_PER_NODE");
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.local_world, 4); /* "4" applies to every node */
    unsetenv("MASTER_ADDR");
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "MASTER_ADDR is not set") && strstr(err, "scontrol show hostnames"),
                  "%s", err);
}
END_TEST

/* Under SLURM the default port and the job identity come from the job and step, so two
 * jobs on one node rendezvous apart, and a rank of the other job is recognised. */
START_TEST(test_env_slurm_job) {
    DistEnv e;
    char err[PP_ERR_MAX];
    env_set("SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_STEP_ID", "3", "SLURM_JOB_ID",
            "4321", "MASTER_ADDR", "n0", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.master_port, DIST_SLURM_PORT_BASE + 321 * 10 + 3); /* 4321 % 2000 */
    ck_assert_int_eq(e.rdzv_port, e.master_port);
    ck_assert_str_eq(e.job, "SLURM job 4321 step 3");
    setenv("SLURM_JOB_ID", "4322", 1); /* the next job: another port */
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.master_port, DIST_SLURM_PORT_BASE + 322 * 10 + 3);
    setenv("MASTER_PORT", "2345", 1); /* an explicit port wins */
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_int_eq(e.master_port, 2345);
    /* torchrun-style inside a SLURM job (pprun in a batch script): the job, no step */
    env_set("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "SLURM_JOB_ID", "7", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_str_eq(e.job, "SLURM job 7");
    ck_assert_int_eq(e.master_port, DIST_DEFAULT_PORT);
    env_set("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "TORCHELASTIC_RUN_ID", "r9", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_str_eq(e.job, "torchrun run r9");
    env_set("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", NULL);
    ck_assert_int_eq(dist_env_read(&e, err, sizeof err), PP_OK);
    ck_assert_str_eq(e.job, "");
}
END_TEST

START_TEST(test_tasks_per_node) {
    static const struct {
        const char *s;
        int node, want; /* want -1 = error */
    } cases[] = {
        {"4", 0, 4},        {"4", 5, 4},        {"4(x2),2", 0, 4}, {"4(x2),2", 1, 4},
        {"4(x2),2", 2, 2},  {"4(x2),2", 3, -1}, {"2,3", 1, 3},     {"1(x3)", 2, 1},
        {"1(x3)", 3, -1},   {"", 0, -1},        {"x", 0, -1},      {"4(x", 0, -1},
        {"4(x0)", 0, -1},   {"0", 0, -1},       {"4,", 0, -1},     {"4(2)", 0, -1},
        {"-1", 0, -1},      {"3,2(x2)", 2, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = -7;
        char err[PP_ERR_MAX];
        int rc = dist_parse_tasks_per_node(cases[i].s, cases[i].node, &n, err, sizeof err);
        if (cases[i].want < 0)
            ck_assert_msg(rc == PP_EUSAGE, "\"%s\" node %d: accepted (%d)", cases[i].s,
                          cases[i].node, n);
        else
            ck_assert_msg(rc == PP_OK && n == cases[i].want, "\"%s\" node %d: %d (%s)",
                          cases[i].s, cases[i].node, n, rc ? err : "ok");
    }
}
END_TEST

/* Set the variables of "NAME=VALUE NAME=VALUE ..." on a clean environment. */
static void env_set_str(const char *vars) {
    char buf[512], *save = NULL;
    env_set(NULL);
    snprintf(buf, sizeof buf, "%s", vars);
    for (char *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        setenv(kv, eq + 1, 1);
    }
}

START_TEST(test_env_bad) {
    static const struct {
        const char *vars; /* "NAME=VALUE ..." */
        const char *want; /* in the message */
    } cases[] = {
        {"RANK=2 WORLD_SIZE=2 MASTER_ADDR=h", "RANK=2 is not below WORLD_SIZE=2"},
        {"RANK=abc WORLD_SIZE=2 MASTER_ADDR=h", "RANK=abc is not a whole number"},
        {"RANK=0 WORLD_SIZE=0", "WORLD_SIZE=0 is not a whole number"},
        {"RANK=-1 WORLD_SIZE=2", "RANK=-1"},
        {"RANK=1", "RANK is set but WORLD_SIZE is not"},
        {"WORLD_SIZE=2", "WORLD_SIZE is set but RANK is not"},
        {"RANK=1 WORLD_SIZE=2", "MASTER_ADDR is not set"},
        {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=70000", "MASTER_PORT=70000"},
        {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=12x", "MASTER_PORT=12x"},
        {"RANK=0 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2", "local rank 2 of 2"},
        {"SLURM_PROCID=3 SLURM_NTASKS=2 MASTER_ADDR=h SLURM_STEP_ID=0",
         "SLURM_PROCID=3 is not below SLURM_NTASKS=2"},
        {"SLURM_PROCID=0", "SLURM_NTASKS is not"},
        {"SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_NODEID=1 SLURM_STEP_TASKS_PER_NODE=4 SLURM_STEP_ID=0",
         "MASTER_ADDR is not set"}, /* the control: everything else is valid */
        {"SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_NODEID=1 SLURM_STEP_TASKS_PER_NODE=4(x1) "
         "SLURM_STEP_ID=0",
         "SLURM_STEP_TASKS_PER_NODE: tasks-per-node list \"4(x1)\" has no entry for node 1"},
        /* the batch shell of #SBATCH -n 2: no job step ([Note: pptrain outside srun]) */
        {"SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_ID=9 MASTER_ADDR=h", "start the ranks with srun"},
        {"SLURM_NTASKS=2 SLURM_JOB_ID=9", "not a task of a job step"},
        {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=h PPTRAIN_RDZV_PORT=0", "PPTRAIN_RDZV_PORT=0"},
        {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=65535 TORCHELASTIC_RUN_ID=x",
         "MASTER_PORT=65535 leaves no port"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        DistEnv e;
        char err[PP_ERR_MAX] = "";
        int rc;
        env_set_str(cases[i].vars);
        rc = dist_env_read(&e, err, sizeof err);
        ck_assert_msg(rc == PP_EUSAGE, "case %zu (%s): accepted", i, cases[i].vars);
        ck_assert_msg(strstr(err, cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i, err,
                      cases[i].want);
    }
}
END_TEST

START_TEST(test_config_diff) {
    char w[256];
    const char *a = "model:\n  dim: 64\ntrain:\n  steps: 10\n  optimizer:\n    lr: 0.1\n"
                    "    eps: 1e-8\n  seed: 1\n";
    ck_assert_int_eq(dist_config_diff(a, a, w, sizeof w), 0);
    ck_assert_int_eq(dist_config_diff(a, "model:\n  dim: 64\ntrain:\n  steps: 10\n"
                                         "  optimizer:\n    lr: 0.1\n    eps: 1e-8\n"
                                         "  seed: 2\n", w, sizeof w), 1);
    ck_assert_str_eq(w, "train.seed: 1 vs 2"); /* back at level 2 after optimizer.* */
    ck_assert_int_eq(dist_config_diff(a, "model:\n  dim: 64\ntrain:\n  steps: 10\n"
                                         "  optimizer:\n    lr: 0.2\n", w, sizeof w), 1);
    ck_assert_str_eq(w, "train.optimizer.lr: 0.1 vs 0.2");
    ck_assert_int_eq(dist_config_diff("model:\n  dim: 64\n", "model:\n  dim: 64\n  x: 1\n",
                                      w, sizeof w), 1);
    ck_assert_str_eq(w, "model.x: (missing) vs 1");
    ck_assert_int_eq(dist_config_diff("a:\n  b: 1\n", "a:\n  c: 1\n", w, sizeof w), 1);
    ck_assert_str_eq(w, "a.b: 1 vs a.c: 1");
    ck_assert_int_eq(dist_config_diff("a:\n  b: 1\r\n", "a:\n  b: 1", w, sizeof w), 0);
}
END_TEST

static Suite *comm_suite(void) {
    Suite *s = suite_create("comm");
    TCase *env = tcase_create("env"), *p2p = tcase_create("p2p"), *fail = tcase_create("fail");
    tcase_add_test(env, test_env_none);
    tcase_add_test(env, test_env_torchrun);
    tcase_add_test(env, test_env_torchrun_ports);
    tcase_add_test(env, test_env_slurm);
    tcase_add_test(env, test_env_slurm_job);
    tcase_add_test(env, test_tasks_per_node);
    tcase_add_test(env, test_env_bad);
    tcase_add_test(env, test_config_diff);
    tcase_add_test(env, test_local);
    tcase_set_timeout(p2p, 60);
    /* loop tests: sockets first, then the same bodies over memory */
    tcase_add_loop_test(p2p, test_ring_allpairs, 0, 6);
    tcase_add_test(p2p, test_ipv6_late_root);
    tcase_add_test(p2p, test_big_message);
    tcase_add_loop_test(p2p, test_fifo_mixed_sizes, 0, 2);
    tcase_add_loop_test(p2p, test_tag_mismatch, 0, 4);
    tcase_add_loop_test(p2p, test_done_at_blocked_on, 0, 2);
    tcase_add_loop_test(p2p, test_collectives, 0, 2);
    tcase_add_loop_test(p2p, test_collective_mismatch, 0, 2);
    tcase_set_timeout(fail, 60);
    tcase_add_loop_test(fail, test_peer_killed, 0, 2);
    tcase_add_loop_test(fail, test_silent_peer, 0, 2);
    tcase_add_loop_test(fail, test_silent_peer_blamed, 0, 2);
    tcase_add_test(fail, test_config_mismatch);
    tcase_add_test(fail, test_config_mismatch_steps);
    tcase_add_test(fail, test_world_mismatch);
    tcase_add_test(fail, test_duplicate_rank);
    tcase_add_test(fail, test_rendezvous_timeout);
    suite_add_tcase(s, env);
    suite_add_tcase(s, p2p);
    suite_add_tcase(s, fail);
    return s;
}

int main(void) {
    return check_run(comm_suite(), 1);
}
