/* test_comm_ring.c — the ring reduce-scatter / all-gather / all-reduce (comm_ring.h)
 * against a plain sum, over sockets between forked processes and over memory between
 * threads: 2..5 ranks, sizes 1 .. 10^6 including sizes the rank count does not divide
 * (and sizes below it: empty blocks). Integer-valued inputs must sum exactly to the
 * plain sum; random ones must give, on every rank, the bits of the ring's documented
 * order and lie within rounding of the exact sum; caller-given (uneven, some empty)
 * blocks too, as ZeRO-1 uses them. Every element is checked. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_ring.h"
#include "commtest.h"
#include "checkrun.h"

static const size_t k_sizes[] = {1, 2, 3, 4, 5, 7, 13, 64, 1001, 65537, 1000000};
#define NSIZES (sizeof k_sizes / sizeof k_sizes[0])

/* Rank r's input, element i: integer-valued in [-64, 64] (sums exact) when exact, else
 * random signs, mantissas and magnitudes 2^0 .. 2^19 (rounding depends on the order).
 * Not inlined, so that GCC cannot contract anything into the expected sums. */
__attribute__((noinline)) static float input(int r, size_t i, int exact) {
    uint32_t x = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(r + 1) * 0x85EBCA77u ^
                 (uint32_t)exact * 0xC2B2AE3Du;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    x *= 0x297A2D39u;
    x ^= x >> 15;
    if (exact) return (float)((int)(x % 129) - 64);
    uint32_t bits = (x & 0x80000000u) | (127u + (x >> 23) % 20) << 23 | (x & 0x7fffffu);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Element i of block q summed in the ring's order: ((v[q+1] + v[q+2]) + ...) + v[q]. */
__attribute__((noinline)) static float ring_order_sum(int W, int q, size_t i, int exact) {
    float s = input((q + 1) % W, i, exact);
    for (int k = 2; k <= W; k++) s += input((q + k) % W, i, exact);
    return s;
}

static int block_of(size_t n, int W, size_t i) {
    int q = (int)(i * (size_t)W / n);
    size_t len;
    while (comm_ring_block(n, W, q, &len) > i) q--;
    while (comm_ring_block(n, W, q, &len) + len <= i) q++;
    return q;
}

/* Run op on n elements; poll with comm_ring_test (overlapped use) when poll, else wait. */
static int run_ring(Comm *c, RingOp op, float *buf, size_t n, float *tmp, int seq, int poll) {
    CommRing r;
    CommTag t = {seq, 0, 0, 1};
    int done = 0;
    if (comm_ring_start(&r, c, op, buf, n, NULL, tmp, &t) != PP_OK) return 1;
    if (!poll) return comm_ring_wait(&r) != PP_OK;
    for (long spins = 0; !done; spins++) {
        if (comm_ring_test(&r, &done) != PP_OK) return 1;
        if (spins > 100000000L) return 1; /* bounded: a hang fails */
    }
    return 0;
}

static int body_ring(Comm *c, void *arg) {
    int W = c->world, me = c->rank, seq = 0;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = k_sizes[s], wrong = 0, checked = 0;
        float *buf = malloc(n * sizeof *buf);
        float *tmp = malloc((comm_ring_max_block(n, W) + 1) * sizeof *tmp);
        CHILD_CHECK(buf && tmp);
        for (int exact = 0; exact < 2; exact++) {
            /* all-reduce: every element of every rank */
            for (size_t i = 0; i < n; i++) buf[i] = input(me, i, exact);
            CHILD_CHECK(run_ring(c, RING_ALLREDUCE, buf, n, tmp, seq++, (int)(s + exact) % 2) == 0);
            for (size_t i = 0; i < n; i++, checked++) {
                double plain = 0, mag = 0;
                for (int r = 0; r < W; r++) {
                    plain += input(r, i, exact);
                    mag += fabs(input(r, i, exact));
                }
                float want = ring_order_sum(W, block_of(n, W, i), i, exact);
                int bad = memcmp(&buf[i], &want, sizeof want) != 0 ||
                          fabs(buf[i] - plain) > 1e-6 * mag || (exact && buf[i] != (float)plain);
                wrong += bad;
            }
            /* reduce-scatter: this rank's block */
            for (size_t i = 0; i < n; i++) buf[i] = input(me, i, exact);
            CHILD_CHECK(run_ring(c, RING_REDUCE_SCATTER, buf, n, tmp, seq++, 0) == 0);
            size_t len, off = comm_ring_block(n, W, me, &len);
            for (size_t i = off; i < off + len; i++, checked++) {
                float want = ring_order_sum(W, me, i, exact);
                wrong += memcmp(&buf[i], &want, sizeof want) != 0;
            }
            /* all-gather: rank q's block q everywhere, bits unchanged */
            for (size_t i = 0; i < n; i++)
                buf[i] = block_of(n, W, i) == me ? input(me, i, exact) : NAN;
            CHILD_CHECK(run_ring(c, RING_ALL_GATHER, buf, n, tmp, seq++, 1) == 0);
            for (size_t i = 0; i < n; i++, checked++) {
                float want = input(block_of(n, W, i), i, exact);
                wrong += memcmp(&buf[i], &want, sizeof want) != 0;
            }
        }
        /* caller's blocks (ZeRO-1 cuts at tensor boundaries): skewed, some empty */
        size_t bounds[MAXP + 1];
        for (int q = 0; q <= W; q++) bounds[q] = n * (size_t)(q * q) / (size_t)(W * W);
        for (size_t i = 0; i < n; i++) buf[i] = input(me, i, 0);
        CommRing r;
        CommTag t = {seq++, 0, 0, 1};
        float *big = malloc(n * sizeof *big);
        CHILD_CHECK(big &&
                    comm_ring_start(&r, c, RING_REDUCE_SCATTER, buf, n, bounds, big, &t) == PP_OK &&
                    comm_ring_wait(&r) == PP_OK);
        for (size_t i = bounds[me]; i < bounds[me + 1]; i++, checked++) {
            float want = ring_order_sum(W, me, i, 0);
            wrong += memcmp(&buf[i], &want, sizeof want) != 0;
        }
        t.step = seq++;
        CHILD_CHECK(comm_ring_start(&r, c, RING_ALL_GATHER, buf, n, bounds, big, &t) == PP_OK &&
                    comm_ring_wait(&r) == PP_OK);
        for (int q = 0; q < W; q++)
            for (size_t i = bounds[q]; i < bounds[q + 1]; i++, checked++) {
                float want = ring_order_sum(W, q, i, 0);
                wrong += memcmp(&buf[i], &want, sizeof want) != 0;
            }
        free(big);
        if (wrong)
            fprintf(stderr, "ring on %d ranks, n %zu: rank %d has %zu wrong elements\n", W, n, me,
                    wrong);
        CHILD_CHECK(wrong == 0 && checked >= 3 * n);
        free(buf);
        free(tmp);
    }
    return 0;
}

/* _i: W = 2..5 over sockets, then over memory. */
START_TEST(test_ring_vs_sum) {
    Job j = {2 + _i % 4, 20.0, NULL, 0, body_ring, NULL, NULL};
    run_job_via(_i < 4 ? VIA_SOCKETS : VIA_MEMORY, &j, 120);
}
END_TEST

/* One rank: the identity (NaNs canonical), nothing sent. */
START_TEST(test_ring_one_rank) {
    Comm *c = comm_local_create();
    float v[3] = {1.5f, NAN, -2.0f}, tmp[3];
    CommRing r;
    CommTag t = {0, 0, 0, 1};
    int done = 0;
    ck_assert_int_eq(comm_ring_start(&r, c, RING_ALLREDUCE, v, 3, NULL, tmp, &t), PP_OK);
    ck_assert_int_eq(comm_ring_test(&r, &done), PP_OK);
    ck_assert_int_eq(done, 1);
    ck_assert(v[0] == 1.5f && v[2] == -2.0f && isnan(v[1]));
    comm_destroy(c);
}
END_TEST

/* A ring member that dies: every other member fails naming a rank, never hangs. */
static int body_ring_dead(Comm *c, void *arg) {
    size_t n = 1 << 16;
    float *buf = calloc(n, sizeof *buf), *tmp = calloc(n, sizeof *tmp);
    CHILD_CHECK(buf && tmp);
    if (c->rank == 2) _exit(9); /* dies before the ring */
    CommRing r;
    CommTag t = {0, 0, 0, 1};
    CHILD_CHECK(comm_ring_start(&r, c, RING_ALLREDUCE, buf, n, NULL, tmp, &t) == PP_OK);
    CHILD_CHECK(comm_ring_wait(&r) != PP_OK);
    CHILD_CHECK(strstr(comm_error(c), "rank ") != NULL);
    fprintf(stderr, "rank %d: %s\n", c->rank, comm_error(c));
    free(buf);
    free(tmp);
    return 0;
}

START_TEST(test_ring_dead_member) {
    Job j = {3, 3.0, NULL, 0, body_ring_dead, NULL, NULL};
    int status[MAXP];
    spawn(3, job_main, &j, 30, status);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
    ck_assert_int_eq(status[2], 9);
}
END_TEST

/* The transport's ring reduce-scatter (_i even) and all-gather (odd) (comm.h) with a
 * member that died (_i < 2) or stopped answering (rank 2 sleeps past the timeout): the
 * other members fail, naming rank 2, within the timeout; never a hang. */
static int body_coll_dead(Comm *c, void *arg) {
    int stop = *(int *)arg / 2, gather = *(int *)arg % 2;
    float a[3 * 5] = {0}, b[3 * 5];
    if (c->rank == 2) {
        if (stop) sleep_s(6.0);
        _exit(9);
    }
    double t0 = pp_now();
    int rc = gather ? comm_all_gather_f32(c, a, b, 5) : comm_reduce_scatter_sum_f32(c, a, b, 5);
    fprintf(stderr, "rank %d after %.1f s: %s\n", c->rank, pp_now() - t0, comm_error(c));
    CHILD_CHECK(rc == PP_ERUNTIME && strstr(comm_error(c), "rank 2") && pp_now() - t0 < 5.0);
    return 0;
}

START_TEST(test_ring_coll_dead_member) {
    int how = _i;
    Job j = {3, 1.0, NULL, 0, body_coll_dead, &how, NULL};
    int status[MAXP];
    spawn(3, job_main, &j, 30, status);
    ck_assert_int_eq(status[0], 0);
    ck_assert_int_eq(status[1], 0);
}
END_TEST

static Suite *ring_suite(void) {
    Suite *s = suite_create("comm_ring");
    TCase *t = tcase_create("ring");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_ring_vs_sum, 0, 8);
    tcase_add_test(t, test_ring_one_rank);
    tcase_add_test(t, test_ring_dead_member);
    tcase_add_loop_test(t, test_ring_coll_dead_member, 0, 4);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    return check_run(ring_suite(), 1);
}
