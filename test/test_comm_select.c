/* test_comm_select.c — runtime.transport ([Note: transport selection] in comm_select.h):
 * every rule of comm_select and its messages, the exchange of the ranks' devices over
 * real sockets (every rank gets every rank's record and so decides the same), and the
 * socket transport's peer_state (alive, lost, silent) that the NCCL transport polls. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_select.h"
#include "commtest.h"
#include "checkrun.h"

static CommDevice gpu(const char *host, const char *bus) {
    CommDevice d = {1, 1, "", ""};
    snprintf(d.host, sizeof d.host, "%s", host);
    snprintf(d.bus, sizeof d.bus, "%s", bus);
    return d;
}

#define CPU {0, 0, "node1", ""}

typedef struct {
    const char *want;
    int world;
    CommDevice dev[4];
    int rc, use;
    const char *says[3]; /* in why (PP_OK) or in err (PP_EUSAGE) */
} Case;

#define G0 {1, 1, "node1", "0000:1b:00.0"}
#define G1 {1, 1, "node1", "0000:29:00.0"}
#define G0B {1, 1, "node2", "0000:1b:00.0"} /* the same bus id on another host: another GPU */

static Case CASES[] = {
    /* one rank: nothing moves, whatever is asked */
    {"auto", 1, {G0}, PP_OK, COMM_USE_LOCAL, {"one rank"}},
    {"nccl", 1, {G0}, PP_OK, COMM_USE_LOCAL, {"runtime.transport nccl: one rank"}},
    {"socket", 1, {CPU}, PP_OK, COMM_USE_LOCAL, {"one rank"}},
    {"nccl", 1, {CPU}, PP_EUSAGE, COMM_USE_SOCKET,
     {"runtime.transport=nccl: rank 0 runs on the CPU", "runtime.transport: socket"}},
    /* socket is always honoured */
    {"socket", 2, {G0, G1}, PP_OK, COMM_USE_SOCKET, {"runtime.transport socket: host-staged"}},
    {"socket", 2, {CPU, CPU}, PP_OK, COMM_USE_SOCKET, {"runtime.transport socket"}},
    /* auto */
    {"auto", 2, {G0, G1}, PP_OK, COMM_USE_NCCL,
     {"runtime.transport auto: every rank has a GPU of its own"}},
    {"auto", 2, {G0, G0B}, PP_OK, COMM_USE_NCCL, {"every rank has a GPU of its own"}},
    {"auto", 2, {G0, G0}, PP_OK, COMM_USE_SOCKET,
     {"runtime.transport auto: ranks 0 and 1 share GPU 0000:1b:00.0"}},
    {"auto", 3, {G1, G0, G0}, PP_OK, COMM_USE_SOCKET,
     {"ranks 1 and 2 share GPU 0000:1b:00.0 on host node1"}},
    {"auto", 2, {G0, CPU}, PP_OK, COMM_USE_SOCKET,
     {"runtime.transport auto: rank 1 runs on the CPU"}},
    {"auto", 2, {CPU, CPU}, PP_OK, COMM_USE_SOCKET, {"rank 0 runs on the CPU"}},
    {"auto", 2, {G0, {1, 0, "node1", "0000:29:00.0"}}, PP_OK, COMM_USE_SOCKET,
     {"rank 1 cannot load NCCL"}},
    /* nccl forced */
    {"nccl", 4, {G0, G1, G0B, {1, 1, "node2", "0000:29:00.0"}}, PP_OK, COMM_USE_NCCL,
     {"runtime.transport nccl"}},
    {"nccl", 2, {G0, G0}, PP_EUSAGE, COMM_USE_SOCKET,
     {"runtime.transport=nccl: ranks 0 and 1 share GPU 0000:1b:00.0",
      "NCCL refuses two ranks on one GPU", "runtime.transport: socket (or auto)"}},
    {"nccl", 2, {CPU, G0}, PP_EUSAGE, COMM_USE_SOCKET,
     {"runtime.transport=nccl: rank 0 runs on the CPU", "runtime.device: cuda",
      "runtime.transport: socket"}},
    {"nccl", 3, {G0, G1, {1, 0, "node1", "0000:3a:00.0"}}, PP_EUSAGE, COMM_USE_SOCKET,
     {"runtime.transport=nccl: rank 2 cannot load NCCL", "libnccl.so.2",
      "runtime.transport: socket"}},
    /* the CPU is named before a shared GPU */
    {"nccl", 3, {G0, G0, CPU}, PP_EUSAGE, COMM_USE_SOCKET, {"rank 2 runs on the CPU"}},
};

START_TEST(test_select_rules) {
    const Case *k = &CASES[_i];
    char why[PP_ERR_MAX], err[PP_ERR_MAX] = "";
    int use = -1;
    int rc = comm_select(k->want, k->world, k->dev, "", &use, why, sizeof why, err, sizeof err);
    ck_assert_msg(rc == k->rc, "case %d (%s, %d ranks): rc %d, want %d (%s%s)", _i, k->want,
                  k->world, rc, k->rc, why, err);
    ck_assert_msg(use == k->use, "case %d: use %s, want %s", _i, comm_select_name(use),
                  comm_select_name(k->use));
    for (int i = 0; i < 3 && k->says[i]; i++)
        ck_assert_msg(strstr(rc ? err : why, k->says[i]), "case %d: \"%s\" lacks \"%s\"", _i,
                      rc ? err : why, k->says[i]);
}
END_TEST

/* This rank's reason for NCCL being unloadable is quoted where the rule names it. */
START_TEST(test_select_quotes_reason) {
    CommDevice d[2] = {G0, {1, 0, "node1", "0000:29:00.0"}};
    char why[256], err[PP_ERR_MAX];
    int use;
    ck_assert_int_eq(comm_select("nccl", 2, d, "libnccl.so.2: cannot open shared object file", &use,
                                 why, sizeof why, err, sizeof err),
                     PP_EUSAGE);
    ck_assert_msg(strstr(err, "rank 1 cannot load NCCL: libnccl.so.2: cannot open"), "%s", err);
}
END_TEST

/* Over sockets: every rank gets every rank's record (bus ids that each rank can
 * predict), and two ranks given the same bus decide alike for socket. */
static int exchange_body(Comm *c, void *arg) {
    CommDevice mine = gpu("hostA", ""), all[MAXP];
    char why[PP_ERR_MAX], err[PP_ERR_MAX];
    int use;
    /* 0 and 1 share */
    snprintf(mine.bus, sizeof mine.bus, "0000:%02x:00.0", c->rank < 2 ? 0x1b : 0x20 + c->rank);
    CHILD_CHECK(comm_select_exchange(c, &mine, all) == PP_OK);
    for (int r = 0; r < c->world; r++) {
        char bus[COMM_BUS_MAX];
        snprintf(bus, sizeof bus, "0000:%02x:00.0", r < 2 ? 0x1b : 0x20 + r);
        CHILD_CHECK(!strcmp(all[r].bus, bus) && !strcmp(all[r].host, "hostA") && all[r].cuda == 1);
    }
    CHILD_CHECK(comm_select("auto", c->world, all, "", &use, why, sizeof why, err, sizeof err) ==
                PP_OK);
    CHILD_CHECK(use == COMM_USE_SOCKET && strstr(why, "ranks 0 and 1 share GPU 0000:1b:00.0"));
    CHILD_CHECK(comm_select("nccl", c->world, all, "", &use, why, sizeof why, err, sizeof err) ==
                PP_EUSAGE);
    return 0;
}

START_TEST(test_exchange_sockets) {
    Job j = {3, 5.0, NULL, 0, exchange_body, NULL, NULL};
    run_job_ok(&j, 30);
}
END_TEST

/* peer_state: alive while the peer is; lost (with the reason) once it exits; the
 * memory transport has none. */
static int peer_state_body(Comm *c, void *arg) {
    char why[PP_ERR_MAX] = "";
    CHILD_CHECK(c->ops->peer_state);
    CHILD_CHECK(c->ops->peer_state(c, 1 - c->rank, 60.0, why, sizeof why) == 0);
    CHILD_CHECK(c->ops->peer_state(c, c->rank, 60.0, why, sizeof why) == 0); /* itself */
    CHILD_CHECK(comm_barrier(c) == PP_OK);
    if (c->rank == 1) _exit(0); /* without a goodbye: a crash as rank 0 sees it */
    for (int i = 0; i < 500 && c->ops->peer_state(c, 1, 60.0, why, sizeof why) != 1; i++)
        sleep_s(0.01);
    CHILD_CHECK(c->ops->peer_state(c, 1, 60.0, why, sizeof why) == 1);
    /* an orderly close, or a reset when rank 1 died with bytes unread (a timing matter) */
    CHILD_CHECK(strstr(why, "rank 1 closed the connection") ||
                strstr(why, "the connection was reset"));
    return 0;
}

START_TEST(test_peer_state_lost) {
    Job j = {2, 5.0, NULL, 0, peer_state_body, NULL, NULL};
    run_job_ok(&j, 30);
}
END_TEST

/* A peer that is stopped (SIGSTOP) sends no heartbeat: silent after silent_s. */
static int peer_silent_body(Comm *c, void *arg) {
    char why[PP_ERR_MAX] = "";
    CHILD_CHECK(comm_barrier(c) == PP_OK);
    if (c->rank == 1) {
        raise(SIGSTOP); /* the harness kills it */
        return 0;
    }
    sleep_s(0.2);
    CHILD_CHECK(c->ops->peer_state(c, 1, 30.0, why, sizeof why) == 0); /* not yet */
    double t0 = pp_now();
    while (pp_now() - t0 < 10 && c->ops->peer_state(c, 1, 1.5, why, sizeof why) != 2) sleep_s(0.05);
    CHILD_CHECK(c->ops->peer_state(c, 1, 1.5, why, sizeof why) == 2);
    CHILD_CHECK(strstr(why, "not even a heartbeat"));
    return 0;
}

static int silent_main(int rank, int port, void *arg) { return job_main(rank, port, arg); }

START_TEST(test_peer_state_silent) {
    Job j = {2, 1.0, NULL, 0, peer_silent_body, NULL, NULL}; /* heartbeats every 0.25 s */
    int st[2];
    spawn_until(2, 1, silent_main, &j, 30, st);
    ck_assert_msg(st[0] == 0, "rank 0 exited %d", st[0]);
}
END_TEST

START_TEST(test_memory_has_no_peer_state) {
    Comm *c = comm_local_create();
    ck_assert_ptr_null(c->ops->peer_state);
    ck_assert_int_eq(c->device_memory, 0);
    comm_destroy(c);
}
END_TEST

static Suite *select_suite(void) {
    Suite *s = suite_create("comm_select");
    TCase *rules = tcase_create("rules"), *net = tcase_create("sockets");
    tcase_add_loop_test(rules, test_select_rules, 0, (int)(sizeof CASES / sizeof CASES[0]));
    tcase_add_test(rules, test_select_quotes_reason);
    tcase_add_test(rules, test_memory_has_no_peer_state);
    tcase_set_timeout(net, 60);
    tcase_add_test(net, test_exchange_sockets);
    tcase_add_test(net, test_peer_state_lost);
    tcase_add_test(net, test_peer_state_silent);
    suite_add_tcase(s, rules);
    suite_add_tcase(s, net);
    return s;
}

int main(void) {
    return check_run(select_suite(), 0);
}
