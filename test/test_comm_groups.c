/* test_comm_groups.c — groups of a job's ranks (comm_split) and the float collectives,
 * over sockets between forked processes and over memory between threads: the groups
 * a split must form, their collectives and messages interleaved with the parent's
 * without crossing, float sums bit for bit (in rank order; reduce-scatter's in the
 * ring's order), reduce-scatter and all-gather at counts 1, odd and 1M, grouped
 * posting, Comms destroyed with requests pending or before their groups, and a dead or
 * silent member failing the group's collective with a message naming it. Data every
 * rank can predict; wrong elements are counted. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "commtest.h"
#include "checkrun.h"

/* ------------------------------------------------------------------ helpers -- */

/* The ranks of the group that rank me joins when rank r passes color[r], key[r]: those
 * of its color ordered by (key, rank), into members[]; returns their count (0 for a
 * negative color) and me's index in *index. Written apart from comm_split_plan. */
static int expect_group(int P, const int *color, const int *key, int me, int *members,
                        int *index) {
    int n = 0, taken[MAXP] = {0};
    if (color[me] < 0) return 0;
    for (;;) {
        int best = -1;
        for (int r = 0; r < P; r++)
            if (!taken[r] && color[r] == color[me] &&
                (best < 0 || key[r] < key[best] || (key[r] == key[best] && r < best)))
                best = r;
        if (best < 0) break;
        taken[best] = 1;
        if (best == me) *index = n;
        members[n++] = best;
    }
    return n;
}

/* Rank r's float input, element i: random signs and mantissas, magnitudes from 2^0 to
 * 2^19, so the order of the additions changes the rounding; and NaNs with a payload per
 * rank. Not inlined, so that GCC cannot contract anything into the expected sums. */
__attribute__((noinline)) static float f_input(int r, size_t i, int seed) {
    uint32_t x = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)r * 0x85EBCA77u ^
                 (uint32_t)seed * 0xC2B2AE3Du;
    uint32_t bits;
    float f;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    x *= 0x297A2D39u;
    x ^= x >> 15;
    bits = i % 1009 == 5 ? 0x7fc00000u | (uint32_t)(r + 1)
                         : (x & 0x80000000u) | (127u + (x >> 23) % 20) << 23 | (x & 0x7fffffu);
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The sum of element i over members[n] in that order, NaNs canonical. */
static float want_sum(const int *members, int n, size_t i, int seed) {
    uint32_t canon_bits = 0x7fc00000u;
    float want = f_input(members[0], i, seed), canon;
    for (int k = 1; k < n; k++) want += f_input(members[k], i, seed);
    memcpy(&canon, &canon_bits, sizeof canon);
    return isnan(want) ? canon : want;
}

static size_t report(size_t wrong, size_t n, const char *what, Comm *g) {
    if (wrong)
        fprintf(stderr, "%s (count %zu) on group rank %d of %d: %zu elements wrong\n", what,
                n, g->rank, g->world, wrong);
    return wrong;
}

/* allreduce_sum_f32, reduce_scatter_sum_f32 and all_gather_f32 of count elements on
 * group g (members[], this rank's rank in the job `me`), every element checked. */
static int check_float_collectives(Comm *g, int me, const int *members, size_t count,
                                   int seed) {
    size_t W = (size_t)g->world, ar = 0, rs = 0, ag = 0;
    float *a = malloc(W * count * sizeof *a), *b = malloc(W * count * sizeof *b);
    CHILD_CHECK(a && b);
    for (size_t i = 0; i < count; i++) a[i] = f_input(me, i, seed);
    CHILD_CHECK(comm_allreduce_sum_f32(g, a, count) == 0);
    for (size_t i = 0; i < count; i++) ar += !same_bits(a[i], want_sum(members, g->world, i, seed));
    for (size_t i = 0; i < W * count; i++) a[i] = f_input(me, i, seed + 1);
    CHILD_CHECK(comm_reduce_scatter_sum_f32(g, a, b, count) == 0);
    int ring[MAXP]; /* the ring's order for this rank's block: members r+1, r+2, ..., r */
    for (int k = 0; k < g->world; k++) ring[k] = members[(g->rank + 1 + k) % g->world];
    for (size_t i = 0; i < count; i++)
        rs += !same_bits(b[i], want_sum(ring, g->world, g->rank * count + i, seed + 1));
    for (size_t i = 0; i < count; i++) a[i] = f_input(me, i, seed + 2);
    CHILD_CHECK(comm_all_gather_f32(g, a, b, count) == 0);
    for (size_t q = 0; q < W; q++)
        for (size_t i = 0; i < count; i++)
            ag += !same_bits(b[q * count + i], f_input(members[q], i, seed + 2));
    free(a);
    free(b);
    CHILD_CHECK(report(ar, count, "allreduce_sum_f32", g) + report(rs, count, "reduce_scatter", g) +
                report(ag, count, "all_gather", g) == 0);
    return 0;
}

/* allreduce_sum_f64 on group g: the rank-order sum of values whose order matters. */
static int check_f64(Comm *g, int me, const int *members, int seed) {
    double v[3] = {me % 2 ? -1e16 : 1e16, 1.0 + me, seed * 0.25 + me * 0.1}, want[3];
    for (int i = 0; i < 3; i++) {
        double x[3] = {members[0] % 2 ? -1e16 : 1e16, 1.0 + members[0],
                       seed * 0.25 + members[0] * 0.1};
        want[i] = x[i];
        for (int k = 1; k < g->world; k++) {
            double y[3] = {members[k] % 2 ? -1e16 : 1e16, 1.0 + members[k],
                           seed * 0.25 + members[k] * 0.1};
            want[i] += y[i];
        }
    }
    CHILD_CHECK(comm_allreduce_sum_f64(g, v, 3) == 0);
    CHILD_CHECK(memcmp(v, want, sizeof v) == 0);
    return 0;
}

/* ------------------------------------------------------------- split shapes -- */

enum { SHAPE_PAIRS, SHAPE_PARITY, SHAPE_ALL_BUT_1, SHAPE_REVERSED, SHAPE_SINGLES, NSHAPES };

static void shape_of(int shape, int r, int P, int *color, int *key) {
    switch (shape) {
    case SHAPE_PAIRS: *color = r / 2; *key = r; break;        /* the tied pair's kind */
    case SHAPE_PARITY: *color = r % 2; *key = -r; break;      /* interleaved, reversed */
    case SHAPE_ALL_BUT_1: *color = r == 1 ? -1 : 3; *key = 0; break; /* ties: rank order */
    case SHAPE_REVERSED: *color = 7; *key = P - r; break;     /* everyone, reversed */
    default: *color = r; *key = 0; break;                     /* 1-rank groups */
    }
}

/* Messages of the group and of the parent between the same two ranks with the same
 * tag but other sizes and bytes, received in the opposite order: none may cross. */
static int check_no_crossing(Comm *c, Comm *g, const int *members) {
    int n = g->world, next = (g->rank + 1) % n, prev = (g->rank + n - 1) % n;
    int me = c->rank, to = members[next], from = members[prev];
    size_t gs = 3000 + 10 * (size_t)me, ps = 5000 + 10 * (size_t)me;
    size_t gr = 3000 + 10 * (size_t)from, pr = 5000 + 10 * (size_t)from;
    uint8_t *gsb, *psb, *grb, *prb;
    CommTag t = {1, 2, 3, 0};
    CommReq *req[4];
    size_t wrong;
    if (n == 1) return 0;
    gsb = malloc(gs);
    psb = malloc(ps);
    grb = malloc(gr);
    prb = malloc(pr);
    fill(gsb, gs, me, to, 100);
    fill(psb, ps, me, to, 200);
    CHILD_CHECK(comm_isend(g, next, &t, gsb, gs, &req[0]) == 0);
    CHILD_CHECK(comm_isend(c, to, &t, psb, ps, &req[1]) == 0);
    CHILD_CHECK(comm_irecv(c, from, &t, prb, pr, &req[2]) == 0);
    CHILD_CHECK(comm_irecv(g, prev, &t, grb, gr, &req[3]) == 0);
    CHILD_CHECK(comm_wait(c, req[2]) == 0);
    CHILD_CHECK(comm_wait(g, req[3]) == 0);
    CHILD_CHECK(comm_wait(g, req[0]) == 0);
    CHILD_CHECK(comm_wait(c, req[1]) == 0);
    wrong = count_wrong(grb, gr, from, me, 100) + count_wrong(prb, pr, from, me, 200);
    free(gsb);
    free(psb);
    free(grb);
    free(prb);
    CHILD_CHECK(wrong == 0);
    return 0;
}

typedef struct {
    int shape;
} ShapeArg;

/* Split by the shape; check the group's membership, then its collectives between the
 * parent's (with a parent message in flight), its messages beside the parent's, and a
 * split of the group itself. */
static int body_shape(Comm *c, void *arg) {
    const ShapeArg *a = arg;
    int P = c->world, me = c->rank;
    int color[MAXP] = {0}, key[MAXP] = {0}, members[MAXP];
    int idx = -1, n;
    int all[MAXP], bc[64];
    Comm *g = (Comm *)1, *h = NULL;
    CommReq *inflight = NULL;
    uint8_t msg[1000];
    for (int r = 0; r < P; r++) {
        shape_of(a->shape, r, P, &color[r], &key[r]);
        all[r] = r;
    }
    n = expect_group(P, color, key, me, members, &idx);
    fill(msg, sizeof msg, me, (me + 1) % P, 5);
    CHILD_CHECK(comm_isend(c, (me + 1) % P, &(CommTag){0, 0, 0, 1}, msg, sizeof msg,
                           &inflight) == 0);
    CHILD_CHECK(comm_split(c, color[me], key[me], &g) == 0);
    if (n == 0) CHILD_CHECK(g == NULL);
    if (check_f64(c, me, all, 1)) return 1;
    if (g) {
        CHILD_CHECK(g->world == n && g->rank == idx);
        if (check_f64(g, me, members, 2) || check_float_collectives(g, me, members, 1, 3) ||
            check_float_collectives(g, me, members, 333, 4))
            return 1;
        for (int i = 0; i < 64; i++) bc[i] = g->rank == n - 1 ? i * 7 + members[n - 1] : -1;
        CHILD_CHECK(comm_broadcast(g, n - 1, bc, sizeof bc) == 0);
        for (int i = 0; i < 64; i++) CHILD_CHECK(bc[i] == i * 7 + members[n - 1]);
    }
    CHILD_CHECK(comm_barrier(c) == 0); /* the parent's, between the group's */
    {   /* the parent's message, in flight across all of the above */
        uint8_t got[1000];
        int from = (me + P - 1) % P;
        CommReq *r;
        CHILD_CHECK(comm_irecv(c, from, &(CommTag){0, 0, 0, 1}, got, sizeof got, &r) == 0);
        CHILD_CHECK(comm_wait(c, r) == 0 && comm_wait(c, inflight) == 0);
        CHILD_CHECK(count_wrong(got, sizeof got, from, me, 5) == 0);
    }
    if (g) {
        CHILD_CHECK(comm_barrier(g) == 0);
        if (check_no_crossing(c, g, members)) return 1;
        /* a group of the group: its halves by parity, each in reverse */
        CHILD_CHECK(comm_split(g, g->rank % 2, -g->rank, &h) == 0);
        int hm[MAXP], hc[MAXP], hk[MAXP];
    int hi = -1, hn;
        for (int i = 0; i < n; i++) {
            hc[i] = i % 2;
            hk[i] = -i;
        }
        hn = expect_group(n, hc, hk, g->rank, hm, &hi);
        for (int i = 0; i < hn; i++) hm[i] = members[hm[i]];
        CHILD_CHECK(h && h->world == hn && h->rank == hi);
        if (check_f64(h, me, hm, 3) || check_f64(g, me, members, 4)) return 1;
        comm_destroy(h);
        comm_destroy(g);
    }
    return check_f64(c, me, all, 5);
}

/* _i: shape, world 3 or 4, sockets or memory. */
START_TEST(test_split_shapes) {
    ShapeArg a = {_i % NSHAPES};
    Job j = {3 + (_i / NSHAPES) % 2, 5.0, NULL, 0, body_shape, &a, NULL};
    run_job_via(_i < 2 * NSHAPES ? VIA_SOCKETS : VIA_MEMORY, &j, 30);
}
END_TEST

/* --------------------------------------------------------- float collectives -- */

/* The job's float collectives at counts 1, odd and 1M (several chunks); a reversed
 * group's (its root is the job's last rank) at 1 and odd. */
static int body_float_counts(Comm *c, void *arg) {
    static const size_t counts[] = {1, 4097, 1u << 20};
    int P = c->world, all[MAXP], rev[MAXP];
    Comm *g;
    for (int r = 0; r < P; r++) {
        all[r] = r;
        rev[r] = P - 1 - r;
    }
    CHILD_CHECK(comm_split(c, 0, -c->rank, &g) == 0);
    for (int k = 0; k < 3; k++)
        if (check_float_collectives(c, c->rank, all, counts[k], k) ||
            (k < 2 && check_float_collectives(g, c->rank, rev, counts[k], 10 + k)))
            return 1;
    comm_destroy(g);
    return 0;
}

/* _i: P = 2 (the swap path), 3, 4; sockets, then memory. */
START_TEST(test_float_counts) {
    Job j = {2 + _i % 3, 10.0, NULL, 0, body_float_counts, NULL, NULL};
    run_job_via(_i < 3 ? VIA_SOCKETS : VIA_MEMORY, &j, 60);
}
END_TEST

/* ----------------------------------------------------------- grouped posting -- */

/* Every rank posts a send to and a receive from every other rank inside one group
 * (with a nested one), and waits only after group_end; on the job and on a group. */
static int exchange_grouped(Comm *c, int seq) {
    int P = c->world, me = c->rank;
    uint8_t *sb[MAXP], *rb[MAXP];
    CommReq *sr[MAXP], *rr[MAXP];
    size_t wrong = 0;
    CHILD_CHECK(comm_group_start(c) == 0);
    for (int p = 0; p < P; p++) {
        if (p == me) continue;
        sb[p] = malloc(2000 + 3 * (size_t)(me * P + p));
        rb[p] = malloc(2000 + 3 * (size_t)(p * P + me));
        fill(sb[p], 2000 + 3 * (size_t)(me * P + p), me, p, seq);
        if (p % 2) CHILD_CHECK(comm_group_start(c) == 0);
        CHILD_CHECK(comm_irecv(c, p, &(CommTag){seq, p, me, 0}, rb[p],
                               2000 + 3 * (size_t)(p * P + me), &rr[p]) == 0);
        CHILD_CHECK(comm_isend(c, p, &(CommTag){seq, me, p, 0}, sb[p],
                               2000 + 3 * (size_t)(me * P + p), &sr[p]) == 0);
        if (p % 2) CHILD_CHECK(comm_group_end(c) == 0);
    }
    CHILD_CHECK(comm_group_end(c) == 0);
    CHILD_CHECK(c->group_depth == 0);
    for (int p = 0; p < P; p++) {
        if (p == me) continue;
        CHILD_CHECK(comm_wait(c, rr[p]) == 0 && comm_wait(c, sr[p]) == 0);
        wrong += count_wrong(rb[p], 2000 + 3 * (size_t)(p * P + me), p, me, seq);
        free(sb[p]);
        free(rb[p]);
    }
    CHILD_CHECK(wrong == 0);
    return 0;
}

static int body_grouped(Comm *c, void *arg) {
    Comm *g;
    if (exchange_grouped(c, 1)) return 1;
    CHILD_CHECK(comm_split(c, 0, -c->rank, &g) == 0);
    if (exchange_grouped(g, 2)) return 1;
    comm_destroy(g);
    return 0;
}

START_TEST(test_grouped_posting) {
    Job j = {3, 5.0, NULL, 0, body_grouped, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

/* Waiting inside a group, a collective inside one, or group_end without group_start
 * is a bug: the process dies naming the call (exit code 1). */
START_TEST(test_group_misuse_dies) {
    Comm *c = comm_local_create();
    int a = 1, b = 0;
    CommReq *s, *r;
    if (_i == 2) comm_group_end(c);
    comm_group_start(c);
    ck_assert_int_eq(comm_isend(c, 0, &(CommTag){0, 0, 0, 0}, &a, sizeof a, &s), 0);
    ck_assert_int_eq(comm_irecv(c, 0, &(CommTag){0, 0, 0, 0}, &b, sizeof b, &r), 0);
    if (_i == 0) comm_wait(c, r);
    if (_i == 1) comm_barrier(c);
}
END_TEST

/* ------------------------------------------------- destroying with work pending -- */

/* Rank 0 sends a group 8 MiB and 100 bytes and destroys it soon after (over sockets the
 * big one is likely on the wire: it is finished from a copy, its buffer freed here at
 * once); rank 1 posts the group's receive of the big one (when *arg) or not, and
 * destroys it, before or while the message arrives. The job's messages after it must
 * arrive whole, both ways. */
static int body_destroy_pending(Comm *c, void *arg) {
    size_t big = 8u << 20;
    int me = c->rank, peer = 1 - me;
    uint8_t *b = malloc(big), small[100] = {0}, got[4096], mine[4096];
    Comm *g;
    CommReq *r, *r2;
    CHILD_CHECK(comm_split(c, 0, me, &g) == 0);
    fill(b, big, me, peer, 1);
    if (me == 0) {
        CHILD_CHECK(comm_isend(g, 1, &(CommTag){1, 0, 0, 0}, b, big, &r) == 0);
        CHILD_CHECK(comm_isend(g, 1, &(CommTag){2, 0, 0, 0}, small, sizeof small, &r2) == 0);
    } else if (*(const int *)arg) {
        CHILD_CHECK(comm_irecv(g, 0, &(CommTag){1, 0, 0, 0}, b, big, &r) == 0);
    }
    CHILD_CHECK(comm_barrier(c) == 0); /* the sends are posted; the big one is under way */
    comm_destroy(g);
    free(b); /* the transport must no longer read or write it */
    fill(mine, sizeof mine, me, peer, 2);
    CHILD_CHECK(comm_isend(c, peer, &(CommTag){3, 0, 0, 0}, mine, sizeof mine, &r) == 0);
    CHILD_CHECK(comm_irecv(c, peer, &(CommTag){3, 0, 0, 0}, got, sizeof got, &r2) == 0);
    CHILD_CHECK(comm_wait(c, r2) == 0 && comm_wait(c, r) == 0);
    CHILD_CHECK(count_wrong(got, sizeof got, peer, me, 2) == 0);
    CHILD_CHECK(comm_barrier(c) == 0);
    return 0;
}

/* _i: receive posted or not, sockets then memory. */
START_TEST(test_destroy_pending) {
    int post = _i % 2;
    Job j = {2, 5.0, NULL, 0, body_destroy_pending, &post, NULL};
    run_job_via(_i < 2 ? VIA_SOCKETS : VIA_MEMORY, &j, 20);
}
END_TEST

/* The job's Comm destroyed first: its group keeps working, then goes too. */
static int order_main(int rank, int port, void *arg) {
    DistEnv e = make_env(rank, 3, port, NULL);
    char err[PP_ERR_MAX];
    Comm *c, *g;
    double v = rank + 1;
    int x = 0, val = 42;
    CommReq *r;
    CHILD_CHECK(comm_create(&e, BASE_CFG, 5.0, &c, err, sizeof err) == 0);
    CHILD_CHECK(comm_split(c, rank == 1 ? -1 : 0, 0, &g) == 0);
    comm_destroy(c);
    if (!g) return 0;
    CHILD_CHECK(comm_allreduce_sum_f64(g, &v, 1) == 0 && v == 4.0);
    if (g->rank == 0)
        CHILD_CHECK(comm_isend(g, 1, &(CommTag){0, 0, 0, 0}, &val, sizeof val, &r) == 0);
    else
        CHILD_CHECK(comm_irecv(g, 0, &(CommTag){0, 0, 0, 0}, &x, sizeof x, &r) == 0);
    CHILD_CHECK(comm_wait(g, r) == 0);
    CHILD_CHECK(g->rank == 0 || x == 42);
    comm_destroy(g);
    return 0;
}

START_TEST(test_destroy_parent_first) {
    int st[MAXP];
    spawn(3, order_main, NULL, 20, st);
    for (int r = 0; r < 3; r++) ck_assert_msg(st[r] == 0, "rank %d exited %d", r, st[r]);
}
END_TEST

/* ------------------------------------------------------------------ failures -- */

typedef struct {
    Via via;
    int pair; /* the group is {1, 3} (the 2-rank swap), else {1, 2, 3} (through rank 1) */
} DeadArg;

/* Rank 3 dies right after the split (over memory: destroys its group's Comm); the
 * others of the group fail its allreduce_f32 at once, naming rank 3 and the group. */
static int body_group_dead(Comm *c, void *arg) {
    const DeadArg *a = arg;
    int me = c->rank, in = me != 0 && !(a->pair && me == 2);
    float buf[1000] = {0};
    char want[128];
    Comm *g;
    double t;
    CHILD_CHECK(comm_split(c, in ? 0 : -1, me, &g) == 0);
    if (!g) return 0;
    if (me == 3) {
        if (a->via == VIA_MEMORY) {
            comm_destroy(g);
            return 0;
        }
        raise(SIGKILL);
    }
    t = pp_now();
    CHILD_CHECK(comm_allreduce_sum_f32(g, buf, 1000) == PP_ERUNTIME);
    fprintf(stderr, "(expected) rank %d: %s\n", me, comm_error(g));
    CHILD_CHECK(pp_now() - t < 2.0);
    snprintf(want, sizeof want, "lost connection to rank 3 in allreduce_f32 #0 in the "
             "group of ranks {1, %s3}", a->pair ? "" : "2, ");
    CHILD_CHECK(strstr(comm_error(g), want));
    comm_destroy(g);
    return 0;
}

/* _i: {1, 2, 3} / {1, 3}, sockets / memory. */
START_TEST(test_group_dead_member) {
    DeadArg a = {_i < 2 ? VIA_SOCKETS : VIA_MEMORY, _i % 2};
    Job j = {4, 5.0, NULL, 0, body_group_dead, &a, NULL};
    int st[MAXP];
    if (a.via == VIA_MEMORY) {
        run_job_via(a.via, &j, 20);
        return;
    }
    spawn(4, job_main, &j, 20, st);
    for (int r = 0; r < 3; r++) ck_assert_msg(st[r] == 0, "rank %d exited %d", r, st[r]);
    ck_assert_int_eq(st[3], 128 + SIGKILL);
}
END_TEST

/* Rank 2 is killed (SIGALRM, 50 ms in) while it and rank 1 upload 128 MB each to the
 * root, rank 0, for a float all-reduce: ranks 0 and 1 fail promptly, naming rank 2 —
 * rank 1 stops its upload when the root's abort arrives (should the kill come before
 * the uploads start, the root's abort reaches rank 1 before its upload: the same). */
static int body_dead_mid_upload(Comm *c, void *arg) {
    size_t n = 32u << 20;
    float *b = calloc(n, sizeof *b);
    struct itimerval it = {{0, 0}, {0, 50000}};
    double t = pp_now();
    CHILD_CHECK(b);
    if (c->rank == 2) {
        signal(SIGALRM, SIG_DFL);
        setitimer(ITIMER_REAL, &it, NULL);
    }
    CHILD_CHECK(comm_allreduce_sum_f32(c, b, n) == PP_ERUNTIME);
    fprintf(stderr, "(expected, after %.2f s) rank %d: %s\n", pp_now() - t, c->rank,
            comm_error(c));
    CHILD_CHECK(pp_now() - t < 3.0);
    /* rank 1 may learn of rank 2's death from the root's abort first (under load): then
     * its message starts with the origin, "rank 2 ... failed first (...); then ..." */
    CHILD_CHECK(strstr(comm_error(c), "lost connection to rank 2 in allreduce_f32 #0") ||
                (c->rank == 1 && !strncmp(comm_error(c), "rank 2", 6) &&
                 strstr(comm_error(c), "failed first")));
    free(b);
    return 0;
}

START_TEST(test_dead_mid_upload) {
    Job j = {3, 10.0, NULL, 0, body_dead_mid_upload, NULL, NULL};
    int st[MAXP];
    spawn(3, job_main, &j, 30, st);
    ck_assert_msg(st[0] == 0 && st[1] == 0, "ranks 0 and 1 exited %d and %d", st[0], st[1]);
    ck_assert_int_eq(st[2], 128 + SIGALRM);
}
END_TEST

/* In the group {2, 1, 0} (its root is rank 2), rank 1 stays silent: the others time
 * out in the group's allreduce after the timeout T, both naming rank 1. */
static int body_group_silent(Comm *c, void *arg) {
    double v = 1, T = c->timeout_s, t;
    Comm *g;
    CHILD_CHECK(comm_split(c, 0, -c->rank, &g) == 0);
    if (c->rank == 1) {
        sleep_s(2.5 * T);
        comm_destroy(g);
        return 0;
    }
    t = pp_now();
    CHILD_CHECK(comm_allreduce_sum_f64(g, &v, 1) == PP_ERUNTIME);
    t = pp_now() - t;
    fprintf(stderr, "(expected, after %.2f s) rank %d: %s\n", t, c->rank, comm_error(g));
    CHILD_CHECK(t > 0.9 * T && t < T + 0.8);
    CHILD_CHECK(strstr(comm_error(g), "timed out in allreduce #0 in the group of ranks "
                                      "{2, 1, 0}: rank 1 sent nothing"));
    comm_destroy(g);
    return 0;
}

START_TEST(test_group_silent_member) {
    Job j = {3, 0.5, NULL, 0, body_group_silent, NULL, NULL};
    run_job_via(_i ? VIA_MEMORY : VIA_SOCKETS, &j, 20);
}
END_TEST

/* Rank 0 calls its group's allreduce while rank 1 calls the job's: sockets see it at
 * once ("in another group"), memory after the timeout; nothing is exchanged. */
static int body_group_out_of_step(Comm *c, void *arg) {
    double v = 1;
    Comm *g;
    CHILD_CHECK(comm_split(c, 0, c->rank, &g) == 0);
    CHILD_CHECK(comm_allreduce_sum_f64(c->rank == 0 ? g : c, &v, 1) == PP_ERUNTIME);
    fprintf(stderr, "(expected) rank %d: %s\n", c->rank,
            comm_error(c->rank == 0 ? g : c));
    CHILD_CHECK(v == 1);
    if (*(const Via *)arg == VIA_SOCKETS)
        CHILD_CHECK(strstr(comm_error(c->rank == 0 ? g : c), "collectives out of step"));
    else
        CHILD_CHECK(strstr(comm_error(c->rank == 0 ? g : c), "timed out in allreduce #"));
    sleep_s(c->timeout_s); /* so that the other times out too, before this one is gone */
    comm_destroy(g);
    return 0;
}

START_TEST(test_group_out_of_step) {
    Via via = _i ? VIA_MEMORY : VIA_SOCKETS;
    Job j = {2, 0.5, NULL, 0, body_group_out_of_step, &via, NULL};
    run_job_via(via, &j, 20);
}
END_TEST

static Suite *groups_suite(void) {
    Suite *s = suite_create("comm_groups");
    TCase *split = tcase_create("split"), *fl = tcase_create("float"),
          *post = tcase_create("post"), *fail = tcase_create("fail");
    tcase_set_timeout(split, 60);
    tcase_add_loop_test(split, test_split_shapes, 0, 4 * NSHAPES);
    tcase_set_timeout(fl, 60);
    tcase_add_loop_test(fl, test_float_counts, 0, 6);
    tcase_set_timeout(post, 60);
    tcase_add_loop_test(post, test_grouped_posting, 0, 2);
    tcase_add_loop_exit_test(post, test_group_misuse_dies, PP_ERUNTIME, 0, 3);
    tcase_add_loop_test(post, test_destroy_pending, 0, 4);
    tcase_add_test(post, test_destroy_parent_first);
    tcase_set_timeout(fail, 60);
    tcase_add_loop_test(fail, test_group_dead_member, 0, 4);
    tcase_add_test(fail, test_dead_mid_upload);
    tcase_add_loop_test(fail, test_group_silent_member, 0, 2);
    tcase_add_loop_test(fail, test_group_out_of_step, 0, 2);
    suite_add_tcase(s, split);
    suite_add_tcase(s, fl);
    suite_add_tcase(s, post);
    suite_add_tcase(s, fail);
    return s;
}

int main(void) {
    return check_run(groups_suite(), 1);
}
