/* test_cpuset.c — runtime.threads 0 ([Note: thread share] in cpuset.h): the thread count
 * and reason of every rank for masks that are disjoint, shared, partly overlapping, on
 * one node or two, at sizes a 2-core machine cannot show (8 + 8 bound CPUs give 8 each,
 * not 4); and the exchange over a real job's Comm, after which every rank holds every
 * rank's host and mask. */
#include <check.h>
#include <string.h>

#include "checkrun.h"
#include "commtest.h"
#include "runtime/cpuset.h"

/* A set on host `host` holding CPUs lo..hi. */
static CpuSet cpus(const char *host, int lo, int hi) {
    CpuSet s;
    memset(&s, 0, sizeof s);
    snprintf(s.host, sizeof s.host, "%s", host);
    for (int c = lo; c <= hi; c++) s.bits[c / 64] |= (uint64_t)1 << (c % 64);
    return s;
}

typedef struct {
    const char *host;
    int lo, hi;
} Mask; /* CPUs lo..hi on host */

typedef struct {
    const char *what;
    int world;
    Mask mask[4];
    int threads[4];     /* each rank's count */
    const char *why[4]; /* in each rank's reason */
} Case;

#define OWN "which no other rank on this node may run on"
static const Case CASES[] = {
    {"SLURM binding: 8 + 8 CPUs of their own", 2, {{"n1", 0, 7}, {"n1", 8, 15}}, {8, 8},
     {"the 8 CPU(s) of its affinity mask, " OWN, "the 8 CPU(s) of its affinity mask, " OWN}},
    {"no binding: 16 CPUs shared by 2", 2, {{"n1", 0, 15}, {"n1", 0, 15}}, {8, 8},
     {"the 16 CPU(s) of its affinity mask, shared by 2 rank(s) on this node"}},
    {"no binding: 16 CPUs shared by 3 (rounded down)", 3,
     {{"n1", 0, 15}, {"n1", 0, 15}, {"n1", 0, 15}}, {5, 5, 5}, {"shared by 3 rank(s)"}},
    {"3 ranks on 3 CPUs: 1 each, not 0", 3, {{"n1", 0, 2}, {"n1", 0, 2}, {"n1", 0, 2}}, {1, 1, 1},
     {"the 3 CPU(s) of its affinity mask, shared by 3 rank(s)"}},
    {"4 ranks on 2 CPUs: at least 1", 4, {{"n1", 0, 1}, {"n1", 0, 1}, {"n1", 0, 1}, {"n1", 0, 1}},
     {1, 1, 1, 1}, {"the 2 CPU(s) of its affinity mask, shared by 4 rank(s)"}},
    {"partly overlapping: 0-7 and 4-11 share 4-7", 2, {{"n1", 0, 7}, {"n1", 4, 11}}, {6, 6},
     {"its share of the 8 CPU(s) of its affinity mask, 4 of which other ranks on this node "
      "may run on too",
      "its share of the 8 CPU(s)"}},
    {"one rank on the node's 16, two bound to 8 each inside them", 3,
     {{"n1", 0, 15}, {"n1", 0, 7}, {"n1", 8, 15}}, {8, 4, 4},
     {"the 16 CPU(s) of its affinity mask, shared by 2 rank(s)",
      "the 8 CPU(s) of its affinity mask, shared by 2 rank(s)"}},
    {"two nodes with the same CPU numbers: no sharing", 2, {{"n1", 0, 7}, {"n2", 0, 7}}, {8, 8},
     {OWN, OWN}},
    {"2 nodes x 2 ranks, unbound", 4, {{"n1", 0, 15}, {"n1", 0, 15}, {"n2", 0, 15}, {"n2", 0, 15}},
     {8, 8, 8, 8},
     {"shared by 2 rank(s)", "shared by 2 rank(s)", "shared by 2 rank(s)", "shared by 2 rank(s)"}},
    {"one rank alone", 1, {{"n1", 0, 63}}, {64}, {"the 64 CPU(s) of its affinity mask, " OWN}},
    {"CPUs past 64 count", 2, {{"n1", 0, 99}, {"n1", 100, 1023}}, {100, 924}, {OWN, OWN}},
};

/* The sets of case k into set[]. */
static void sets_of(const Case *k, CpuSet *set) {
    for (int r = 0; r < k->world; r++) set[r] = cpus(k->mask[r].host, k->mask[r].lo, k->mask[r].hi);
}

START_TEST(test_threads_rules) {
    const Case *k = &CASES[_i];
    CpuSet set[4];
    sets_of(k, set);
    for (int r = 0; r < k->world; r++) {
        char why[256];
        int t = cpuset_threads(k->world, set, r, why, sizeof why);
        ck_assert_msg(t == k->threads[r], "%s: rank %d gets %d thread(s), expected %d (%s)",
                      k->what, r, t, k->threads[r], why);
        if (k->why[r]) {
            ck_assert_msg(strstr(why, k->why[r]), "%s: rank %d says '%s', expected '%s' in it",
                          k->what, r, why, k->why[r]);
        }
    }
}
END_TEST

/* The shares of a node never add up to more than its CPUs (none counted twice). */
START_TEST(test_threads_add_up) {
    int n = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const Case *k = &CASES[i];
        CpuSet node, set[4];
        char why[256];
        int sum = 0;
        memset(&node, 0, sizeof node);
        sets_of(k, set);
        for (int r = 0; r < k->world; r++) {
            if (strcmp(set[r].host, "n1")) continue;
            for (int w = 0; w < CPUSET_MAX / 64; w++) node.bits[w] |= set[r].bits[w];
            sum += cpuset_threads(k->world, set, r, why, sizeof why);
        }
        if (cpuset_count(&node) < k->world) continue; /* the at-least-1 rule may exceed it */
        ck_assert_msg(sum <= cpuset_count(&node), "%s: node n1's ranks use %d threads on %d CPUs",
                      k->what, sum, cpuset_count(&node));
        n++;
    }
    ck_assert_int_ge(n, 8); /* it checked something */
}
END_TEST

/* This process's own set: its host name and the mask the kernel reports. */
START_TEST(test_mine) {
    CpuSet s;
    cpuset_mine(&s);
    ck_assert_int_ge(cpuset_count(&s), 1);
    ck_assert_int_gt((int)strlen(s.host), 0);
}
END_TEST

/* Over sockets: every rank gets every rank's host and mask (rank r: CPUs r..r+1 on host
 * "h<r/2>", which every rank can predict), and each rank's count follows from them. */
static int exchange_body(Comm *c, void *arg) {
    CpuSet mine, all[4];
    char host[16], why[256];
    snprintf(host, sizeof host, "h%d", c->rank / 2);
    /* ranks 2q, 2q+1 share one CPU */
    mine = cpus(host, 2 * c->rank, 2 * c->rank + 1 + (c->rank % 2 == 0));
    CHILD_CHECK(cpuset_exchange(c, &mine, all) == PP_OK);
    for (int r = 0; r < c->world; r++) {
        CpuSet want;
        snprintf(host, sizeof host, "h%d", r / 2);
        want = cpus(host, 2 * r, 2 * r + 1 + (r % 2 == 0));
        CHILD_CHECK(!memcmp(&all[r], &want, sizeof want));
    }
    /* rank 2q: CPUs 4q..4q+2, one shared: 2 + 1/2 -> 2; rank 2q+1: 4q+2, 4q+3: 1/2 + 1 -> 1 */
    CHILD_CHECK(cpuset_threads(c->world, all, c->rank, why, sizeof why) ==
                (c->rank % 2 == 0 ? 2 : 1));
    CHILD_CHECK(strstr(why, "1 of which other ranks on this node may run on too"));
    return 0;
}

START_TEST(test_exchange_sockets) {
    Job j = {4, 10.0, NULL, 0, exchange_body, NULL, NULL};
    run_job_ok(&j, 60);
}
END_TEST

static Suite *cpuset_suite(void) {
    Suite *s = suite_create("cpuset");
    TCase *rules = tcase_create("rules"), *net = tcase_create("sockets");
    tcase_add_loop_test(rules, test_threads_rules, 0, (int)(sizeof CASES / sizeof CASES[0]));
    tcase_add_test(rules, test_threads_add_up);
    tcase_add_test(rules, test_mine);
    tcase_set_timeout(net, 60);
    tcase_add_test(net, test_exchange_sockets);
    suite_add_tcase(s, rules);
    suite_add_tcase(s, net);
    return s;
}

int main(void) {
    return check_run(cpuset_suite(), 0);
}
