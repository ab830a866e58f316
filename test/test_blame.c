/* test_blame.c — at 4 ranks over sockets, a rank that dies (SIGKILL) or goes silent
 * (SIGSTOP) is the rank every survivor's message names first, however the survivors
 * wait on each other (issue 17, item 5; [Note: blame] in comm_socket_blame.c). */
#include <check.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commtest.h"
#include "checkrun.h"
#include "comm/comm_socket_internal.h" /* to forge a control message */

/* The first rank a message names ("... rank 3 ..."), or -1. */
static int first_rank(const char *msg) {
    for (const char *p = strstr(msg, "rank "); p; p = strstr(p + 1, "rank "))
        if (p[5] >= '0' && p[5] <= '9') return atoi(p + 5);
    return -1;
}

typedef struct {
    int sig;   /* what happens to rank 3: SIGKILL or SIGSTOP */
    int shape; /* how the survivors wait: SHAPE_CHAIN or SHAPE_COLL */
} BlameArg;

/* CHAIN: rank r waits for a message from rank r+1, the waits starting 0.1 s apart in
 * rank order (rank 0 runs out of patience first). COLL: rank 0 enters an all-reduce at
 * once, ranks 1 and 2 first wait for a message from rank 3. */
enum { SHAPE_CHAIN, SHAPE_COLL };

static int body_blame(Comm *c, void *arg) {
    const BlameArg *a = arg;
    char buf[16];
    double t = pp_now(), v = 1, T = c->timeout_s;
    CommReq *r;
    int rc, who;
    if (c->rank == 3) {
        sleep_s(0.4);
        raise(a->sig);
        sleep_s(60); /* stopped, or (if SIGCONT came) out of the way */
        return 0;
    }
    if (a->shape == SHAPE_CHAIN || c->rank > 0) {
        int from = a->shape == SHAPE_CHAIN ? c->rank + 1 : 3;
        sleep_s(0.1 * c->rank);
        CHILD_CHECK(comm_irecv(c, from, &(CommTag){1, from, 0, 1}, buf, sizeof buf, &r) == 0);
        rc = comm_wait(c, r);
    } else {
        rc = comm_allreduce_sum_f64(c, &v, 1);
    }
    who = first_rank(comm_error(c));
    fprintf(stderr, "(expected, %s, after %.2f s) rank %d: %s\n",
            a->sig == SIGKILL ? "SIGKILL" : "SIGSTOP", pp_now() - t, c->rank, comm_error(c));
    CHILD_CHECK(rc == PP_ERUNTIME);
    CHILD_CHECK(who == 3);
    CHILD_CHECK(pp_now() - t < (a->sig == SIGKILL ? 2.0 : 4 * T + 2.0));
    return 0;
}

/* _i: SIGKILL/SIGSTOP x chain/collective. */
START_TEST(test_blame_rank3) {
    BlameArg a = {_i % 2 ? SIGSTOP : SIGKILL, _i / 2 ? SHAPE_COLL : SHAPE_CHAIN};
    Job j = {4, 1.0, NULL, 0, body_blame, &a, TEST_TOKEN};
    int st[MAXP];
    spawn_until(4, 3, job_main, &j, 30, st);
    for (int r = 0; r < 3; r++) ck_assert_msg(st[r] == 0, "rank %d exited %d", r, st[r]);
}
END_TEST

/* A rank that is blocked on another is not blamed for its silence: rank 0 waits on
 * rank 1, which waits 2.5 timeouts for rank 2 (alive, computing) — rank 1 blames
 * rank 2 ("running but has not sent it"), and rank 0 names rank 2 first. */
static int body_busy(Comm *c, void *arg) {
    char buf[16];
    CommReq *r;
    int rc;
    if (c->rank == 2) {
        sleep_s(2.5 * c->timeout_s);
        return 0;
    }
    CHILD_CHECK(comm_irecv(c, c->rank + 1, &(CommTag){1, 0, 0, 1}, buf, sizeof buf, &r) == 0);
    rc = comm_wait(c, r);
    fprintf(stderr, "(expected) rank %d: %s\n", c->rank, comm_error(c));
    CHILD_CHECK(rc == PP_ERUNTIME && first_rank(comm_error(c)) == 2);
    if (c->rank == 1) CHILD_CHECK(strstr(comm_error(c), "running but has not sent it"));
    return 0;
}

START_TEST(test_blame_busy_rank) {
    Job j = {3, 1.0, NULL, 0, body_busy, NULL, NULL};
    run_job_ok(&j, 20);
}
END_TEST

/* [Note: heartbeat]: rank 1 goes silent (SIGSTOP) while rank 0 computes for 2 timeouts;
 * rank 0's receive, posted after that, fails at once (nothing at all, not even a
 * heartbeat, came for longer than timeout_s) instead of waiting a timeout and a probe's
 * grace from its posting. And a receive posted before the silence fails within timeout_s
 * of it (the probe alone would take timeout_s + grace after the posting). */
static int body_quiet(Comm *c, void *arg) {
    char buf[16];
    CommReq *r;
    double t, T = c->timeout_s, late = *(const double *)arg;
    if (c->rank == 1) {
        sleep_s(0.2);
        raise(SIGSTOP);
        sleep_s(60);
        return 0;
    }
    sleep_s(late);
    CHILD_CHECK(comm_irecv(c, 1, &(CommTag){1, 1, 0, 1}, buf, sizeof buf, &r) == 0);
    t = pp_now();
    CHILD_CHECK(comm_wait(c, r) == PP_ERUNTIME);
    t = pp_now() - t;
    fprintf(stderr, "(expected, posted %.1f s in, failed %.2f s later) %s\n", late, t,
            comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "timed out waiting for rank 1") &&
                strstr(comm_error(c), "not even the heartbeat"));
    CHILD_CHECK(late > T ? t < 0.3 : late + t < 0.2 + T + 0.5);
    return 0;
}

/* _i: the receive posted 2 timeouts in, or at once. */
START_TEST(test_quiet_peer) {
    static const double late[2] = {2.0, 0.0};
    double T = _i ? 4.0 : 1.0; /* the grace T / 4 must be more than the 0.5 s of slack */
    Job j = {2, T, NULL, 0, body_quiet, (void *)&late[_i], TEST_TOKEN};
    int st[MAXP];
    spawn_until(2, 1, job_main, &j, 30, st);
    ck_assert_msg(st[0] == 0, "rank 0 exited %d", st[0]);
}
END_TEST

/* Issue 25, section 3: rank 1 is stopped (SIGSTOP, by a helper it forks) for 2.5 timeouts
 * and then continued (SIGCONT). Rank 0 blames rank 1; rank 1's own message must say that
 * it was itself stopped or too slow, and name itself first, not the live rank 0.
 * *arg: 0 = stopped while it waits on rank 0; 1 = while it computes, the wait after. */
static int body_stopped(Comm *c, void *arg) {
    char buf[16];
    CommReq *r;
    double T = c->timeout_s;
    pid_t helper;
    int rc;
    if (c->rank == 0) {
        CHILD_CHECK(comm_irecv(c, 1, &(CommTag){1, 1, 0, 1}, buf, sizeof buf, &r) == 0);
        CHILD_CHECK(comm_wait(c, r) == PP_ERUNTIME);
        fprintf(stderr, "(expected) rank 0: %s\n", comm_error(c));
        CHILD_CHECK(first_rank(comm_error(c)) == 1);
        return 0;
    }
    helper = fork();
    CHILD_CHECK(helper >= 0);
    if (helper == 0) { /* one thread, async-signal-safe calls only */
        pid_t me = getppid();
        struct timespec a = {0, 300000000}, b = {(time_t)(2.5 * T), (long)(0.5 * 1e9)};
        nanosleep(&a, NULL);
        kill(me, SIGSTOP);
        nanosleep(&b, NULL);
        kill(me, SIGCONT);
        _exit(0);
    }
    if (*(const int *)arg) sleep_s(0.6 + 2.5 * T);
    rc = comm_irecv(c, 0, &(CommTag){1, 0, 0, 1}, buf, sizeof buf, &r);
    if (rc == 0) rc = comm_wait(c, r); /* or it failed at once: rank 0 is gone */
    CHILD_CHECK(rc == PP_ERUNTIME);
    waitpid(helper, NULL, 0);
    fprintf(stderr, "(expected) rank 1: %s\n", comm_error(c));
    CHILD_CHECK(strstr(comm_error(c), "was itself stopped or too slow"));
    CHILD_CHECK(first_rank(comm_error(c)) == 1);
    return 0;
}

START_TEST(test_stopped_self) {
    static const int late[2] = {0, 1};
    Job j = {2, 1.0, NULL, 0, body_stopped, (void *)&late[_i], TEST_TOKEN};
    run_job_ok(&j, 20);
}
END_TEST

/* Issue 25, section 3: an insider (rank 1, with the token) tells rank 0 that rank 0 failed
 * first (a CTRL_LOST naming the receiving rank), then leaves. Rank 0 must not print that
 * about itself: its message names rank 1, whose closing it is. */
static int body_forged(Comm *c, void *arg) {
    char buf[16];
    CommReq *r;
    if (c->rank == 1) {
        SockNet *n = ((SockComm *)c)->net;
        pthread_mutex_lock(&n->mu);
        sock_ctrl_push(n, 0, CTRL_LOST, 0, 0, "forged: rank 0 crashed");
        pthread_mutex_unlock(&n->mu);
        sleep_s(0.5); /* the progress thread writes it at its next beat */
        return 0;
    }
    CHILD_CHECK(comm_irecv(c, 1, &(CommTag){1, 1, 0, 1}, buf, sizeof buf, &r) == 0);
    CHILD_CHECK(comm_wait(c, r) == PP_ERUNTIME);
    fprintf(stderr, "(expected) rank 0: %s\n", comm_error(c));
    CHILD_CHECK(!strstr(comm_error(c), "rank 0 failed first"));
    CHILD_CHECK(first_rank(comm_error(c)) == 1);
    return 0;
}

START_TEST(test_forged_self_blame) {
    Job j = {2, 1.0, NULL, 0, body_forged, NULL, TEST_TOKEN};
    run_job_ok(&j, 20);
}
END_TEST

int main(void) {
    Suite *s = suite_create("blame");
    TCase *tc = tcase_create("blame");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_blame_rank3, 0, 4);
    tcase_add_test(tc, test_blame_busy_rank);
    tcase_add_loop_test(tc, test_quiet_peer, 0, 2);
    tcase_add_loop_test(tc, test_stopped_self, 0, 2);
    tcase_add_test(tc, test_forged_self_blame);
    suite_add_tcase(s, tc);
    return check_run(s, 1);
}
