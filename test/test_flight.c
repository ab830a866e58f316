/* test_flight.c — the flight recorder (runtime/flight.c): the ring keeps the last N
 * records whole and in order, a wait finds its transfer's record (or makes one when it
 * left the ring), the file says what the rank waits on and for which peer (a
 * collective's from the probe), a failure's message names the file, SIGUSR2 writes the
 * file and the process goes on; and `pptrain flight` (flight_cmd.c): the chain's head
 * over ranks that wrote no file, that wait on no one, or that wait in a cycle. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "runtime/flight.h"
#include "testdir.h"
#include "checkrun.h"

static void setup(void) { testdir_create("pp_test_flight"); }
static void teardown(void) { testdir_remove(); }

/* The whole of a file (static buffer; "" when it cannot be read). */
static const char *slurp(const char *path) {
    static char buf[1 << 20];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return buf;
}

#define ASSERT_HAS(text, s)                                                                        \
    ck_assert_msg(strstr((text), (s)) != NULL, "lacks '%s' in:\n%s", (s), (text))
#define ASSERT_LACKS(text, s)                                                                      \
    ck_assert_msg(strstr((text), (s)) == NULL, "has '%s' in:\n%s", (s), (text))

static const char *rank_file(int r) {
    static char p[512];
    snprintf(p, sizeof p, "%s/flight/rank_%05d.txt", g_dir, r);
    return p;
}

START_TEST(test_off_is_null) {
    FlightRec *f = flight_create(g_dir, 0, 1, 0);
    ck_assert_ptr_null(f);
    ck_assert_int_eq(flight_compute(f, "F", 1, 0, 0), 0);
    flight_end(f, 1, 1, 0);
    flight_fail(f, NULL, 0);
    flight_destroy(f);
}
END_TEST

/* 4 records kept of 10: the last 4, oldest first; the count says so. */
START_TEST(test_ring_keeps_the_last) {
    FlightRec *f = flight_create(g_dir, 3, 4, 4);
    for (int m = 0; m < 10; m++) flight_end(f, flight_compute(f, "F", 7, 3, m), 1, 0);
    ck_assert_int_eq(flight_dump(f, "test"), 0);
    const char *t = slurp(rank_file(3));
    ASSERT_HAS(t, "rank 3 of 4");
    ASSERT_HAS(t, "reason: test\n");
    ASSERT_HAS(t, "records 4 of 10");
    ASSERT_LACKS(t, "F s3 mb5\n");
    const char *m6 = strstr(t, "F s3 mb6\n"), *m9 = strstr(t, "F s3 mb9\n");
    ck_assert_msg(m6 && m9 && m6 < m9, "not the last four in order:\n%s", t);
    ASSERT_HAS(t, "waiting: nobody");
    ck_assert_int_eq(file_exists(tmp("flight/rank_00003.txt.tmp")), 0);
    flight_destroy(f);
}
END_TEST

static int g_blocked = -1;
static int probe(const void *ctx) { return *(const int *)ctx; }

/* A wait finds the posted transfer by its request; its record leaves the ring, and the
 * wait makes a record of its own. The waited-on transfer names its peer. */
START_TEST(test_wait_finds_its_transfer) {
    FlightRec *f = flight_create(g_dir, 1, 4, 8);
    int req1, req2;
    flight_post(f, FLIGHT_SEND, "act", 5, 1, 2, 0, 2, 4096, &req1, 1);
    flight_post(f, FLIGHT_RECV, "grad", 5, 1, 2, 0, 2, 4096, &req2, 1);
    uint64_t w = flight_wait(f, &req1, "a send to complete", 5, 1, 0);
    ck_assert_int_eq(w, 1); /* the send's record, not a new one */
    flight_end(f, w, 1, 0);
    w = flight_wait(f, &req2, "recv gradient", 5, 1, 0);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(flight_dump(f, "hung"), 0);
    const char *t = slurp(rank_file(1));
    ASSERT_HAS(t, "waiting: rank 2 for recv grad s1<-s2 mb0 (step 5): waiting for ");
    ASSERT_HAS(t, "done        2       4096      5  send act s1->s2 mb0\n");
    ASSERT_HAS(t, "waiting     2       4096      5  recv grad s1<-s2 mb0\n");
    flight_end(f, w, 0, 0);
    /* a transfer posted, then pushed out of the ring before its wait */
    int req3;
    flight_post(f, FLIGHT_RECV, "act", 6, 1, 0, 3, 0, 4096, &req3, 1);
    for (int m = 0; m < 8; m++) flight_end(f, flight_compute(f, "F", 6, 1, m), 1, 0);
    w = flight_wait(f, &req3, "recv activation", 6, 1, 3);
    ck_assert_int_gt(w, 11);
    ck_assert_int_eq(flight_dump(f, "hung again"), 0);
    ASSERT_HAS(slurp(rank_file(1)), "waiting: nobody known for recv activation s1 mb3 (step 6)");
    flight_set_probe(f, probe, &g_blocked); /* the transport knows: it blocks on rank 0 */
    g_blocked = 0;
    ck_assert_int_eq(flight_dump(f, "hung again"), 0);
    ASSERT_HAS(slurp(rank_file(1)), "waiting: rank 0 for recv activation s1 mb3 (step 6)");
    flight_set_probe(f, NULL, NULL);
    flight_destroy(f);
}
END_TEST

/* A collective's peer is the probe's: at the dump while it waits, at the failure after. */
START_TEST(test_collective_peer_from_probe) {
    FlightRec *f = flight_create(g_dir, 0, 4, 16);
    flight_set_probe(f, probe, &g_blocked);
    g_blocked = 3;
    uint64_t c = flight_coll(f, "allreduce loss, grad norm", 9);
    ck_assert_int_eq(flight_dump(f, "usr2"), 0);
    ASSERT_HAS(slurp(rank_file(0)), "waiting: rank 3 for allreduce loss, grad norm (step 9)");
    flight_end(f, c, 0, 0); /* fails while blocked on rank 3 */
    g_blocked = 1;          /* the transport went on to another */
    char err[PP_ERR_MAX] = "timed out in allreduce #9";
    flight_fail(f, err, sizeof err);
    ASSERT_HAS(err, "timed out in allreduce #9; flight record ");
    ASSERT_HAS(err, rank_file(0));
    ASSERT_HAS(err, ": this rank was waiting on rank 3 for allreduce loss, grad norm (step 9)");
    const char *t = slurp(rank_file(0));
    ASSERT_HAS(t, "reason: timed out in allreduce #9\n");
    ASSERT_HAS(t, "waiting: rank 3 for allreduce loss, grad norm (step 9): failed after ");
    flight_set_probe(f, NULL, NULL);
    flight_destroy(f);
}
END_TEST

/* SIGUSR2 writes the file and the process goes on. */
START_TEST(test_sigusr2_dumps_and_goes_on) {
    FlightRec *f = flight_create(g_dir, 2, 4, 16);
    int req;
    flight_signals(f);
    flight_post(f, FLIGHT_RECV, "act", 1, 2, 1, 0, 1, 64, &req, 1);
    flight_wait(f, &req, "recv activation", 1, 2, 0);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2); /* the handler's line on stderr */
    raise(SIGUSR2);
    dup2(saved, 2);
    close(null);
    close(saved);
    const char *t = slurp(rank_file(2));
    ASSERT_HAS(t, "reason: SIGUSR2 (on demand: the run goes on)");
    ASSERT_HAS(t, "waiting: rank 1 for recv act s2<-s1 mb0 (step 1)");
    flight_signals(NULL);
    raise(SIGUSR2); /* ignored now */
    flight_destroy(f);
}
END_TEST

/* A fatal signal writes the file and the process still dies of it (not under
 * AddressSanitizer, whose own handlers report faults: flight_signals leaves them). */
START_TEST(test_fatal_signal_dumps_and_dies) {
#if defined(__SANITIZE_ADDRESS__)
    return;
#endif
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FlightRec *f = flight_create(g_dir, 0, 1, 16);
        flight_signals(f);
        flight_compute(f, "B", 4, 0, 2);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        raise(SIGBUS);
        _exit(0); /* not reached */
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status %d", st);
    const char *t = slurp(rank_file(0));
    ASSERT_HAS(t, "reason: fatal signal SIGBUS\n");
    ASSERT_HAS(t, "running     -          0      4  B s0 mb2\n");
}
END_TEST

/* Files of ranks 0..world-1 but `skip`, rank r waiting on peers[r] (-1: on no one) in
 * a failed receive; the recorders all made before any file is written, as in one run. */
static void write_ranks_why(int world, const int *peers, int skip, const char *const *why) {
    FlightRec *f[8];
    for (int r = 0; r < world; r++) f[r] = r == skip ? NULL : flight_create(g_dir, r, world, 16);
    for (int r = 0; r < world; r++) {
        int req;
        if (!f[r]) continue;
        flight_end(f[r], flight_compute(f[r], "F", 3, r, 0), 1, 0);
        if (peers[r] >= 0) {
            flight_post(f[r], FLIGHT_RECV, "grad", 3, r, r + 1, 0, peers[r], 64, &req, 1);
            flight_end(f[r], flight_wait(f[r], &req, "recv gradient", 3, r, 0), 0, 0);
        }
        ck_assert_int_eq(flight_dump(f[r], why ? why[r] : "timed out"), 0);
        flight_destroy(f[r]);
    }
}

static void write_ranks(int world, const int *peers, int skip) {
    write_ranks_why(world, peers, skip, NULL);
}

/* `pptrain flight DIR`'s output into a file, read back. */
static const char *run_flight_cmd(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/flight", g_dir);
    char *argv[] = {"flight", dir, NULL};
    fflush(stdout);
    int saved = dup(1), fd = open(tmp("out.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    int rc = flight_main(2, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(fd);
    close(saved);
    ck_assert_int_eq(rc, 0);
    return slurp(tmp("out.txt"));
}

/* `pptrain flight` with extra arguments on g_dir/flight (output in out.txt, stderr in
 * err.txt): its exit code. */
static int flight_cmd_rc(const char *a1, const char *a2) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/flight", g_dir);
    char *argv[] = {"flight", dir, (char *)a1, (char *)a2, NULL};
    int argc = 2 + (a1 != NULL) + (a2 != NULL);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(tmp("out.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(tmp("err.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = flight_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(fo);
    close(fe);
    close(so);
    close(se);
    return rc;
}

/* rank_00000.txt with the text t. */
static void put_rank0(const char *t) {
    FILE *f = fopen(rank_file(0), "w");
    ck_assert_ptr_nonnull(f);
    fputs(t, f);
    fclose(f);
}

/* Hostile directories: a FIFO or /dev/zero named rank_00000.txt is refused without being
 * read (it blocked or never ended), a header claiming 2^31 - 1 ranks is refused (it was
 * allocated for: out of memory), a file holding another rank's record and a file among
 * good ones that is not a record are named with exit 2 (the others still merged), a file
 * without records merges (qsort of none), --last takes a number only, an unknown option
 * or a second DIR is an error. */
START_TEST(test_cmd_hostile) {
    write_ranks(2, (int[]){1, -1}, -1);
    ck_assert_int_eq(flight_cmd_rc("--last", "abc"), PP_EUSAGE);
    ASSERT_HAS(slurp(tmp("err.txt")), "error: flight: --last needs a number of rows >= 0, not 'abc'");
    ck_assert_int_eq(flight_cmd_rc("--last", "-1"), PP_EUSAGE);
    ck_assert_int_eq(flight_cmd_rc("--last", NULL), PP_EUSAGE);
    ck_assert_int_eq(flight_cmd_rc("--bogus", NULL), PP_EUSAGE);
    ASSERT_HAS(slurp(tmp("err.txt")), "error: flight: unknown option '--bogus'");
    ck_assert_int_eq(flight_cmd_rc("other", NULL), PP_EUSAGE);
    ck_assert_int_eq(flight_cmd_rc("--last", "1"), PP_OK);
    ASSERT_HAS(slurp(tmp("out.txt")), "(the last 1 of ");
    put_rank0("rank 1 of 2\nstarted 1\nwritten 2\n");
    ck_assert_int_eq(flight_cmd_rc(NULL, NULL), PP_EUSAGE);
    ASSERT_HAS(slurp(tmp("err.txt")), "rank_00000.txt is not rank 0's pptrain flight record: it "
                                      "holds the record of rank 1");
    ASSERT_HAS(slurp(tmp("out.txt")), "flight records in "); /* rank 1's is merged */
    put_rank0("rank 0 of 2147483647\nstarted 1\nwritten 2\n");
    ck_assert_int_eq(flight_cmd_rc(NULL, NULL), PP_EUSAGE);
    ASSERT_HAS(slurp(tmp("err.txt")), "it is of a world of 2147483647 ranks");
    put_rank0("rank 0 of 2\nstarted 1\nwritten 2\n"); /* no records */
    unlink(rank_file(1));
    ck_assert_int_eq(flight_cmd_rc(NULL, NULL), PP_OK);
    ASSERT_HAS(slurp(tmp("out.txt")), "rank 1: no file");
    unlink(rank_file(0));
    ck_assert_int_eq(mkfifo(rank_file(0), 0644), 0);
    ck_assert_int_eq(flight_cmd_rc(NULL, NULL), PP_EUSAGE);
    ASSERT_HAS(slurp(tmp("err.txt")), "rank_00000.txt for reading: it is a FIFO");
    unlink(rank_file(0));
    ck_assert_int_eq(symlink("/dev/zero", rank_file(0)), 0);
    ck_assert_int_eq(flight_cmd_rc(NULL, NULL), PP_EUSAGE);
    ASSERT_HAS(slurp(tmp("err.txt")), "it is a character device");
}
END_TEST

/* 0 -> 1 -> 2, 3 -> 2, and rank 2 wrote nothing: it is the head. */
START_TEST(test_cmd_head_without_a_file) {
    write_ranks(4, (int[]){1, 2, -1, 2}, 2);
    const char *t = run_flight_cmd();
    ASSERT_HAS(t, "3 of 4 ranks");
    ASSERT_HAS(t, "rank 2: no file");
    ASSERT_HAS(t, "rank 0 -> rank 1 (recv grad s0<-s1 mb0) -> rank 2 (recv grad s1<-s2 mb0)\n");
    ASSERT_HAS(t, "head of the wait chain: rank 2: ");
    ASSERT_HAS(t, "it wrote no flight record");
    ASSERT_HAS(t, "recv grad s3<-s4 mb0\n"); /* the merged table holds every rank's records */
    ASSERT_HAS(t, "F s1 mb0\n");
}
END_TEST

/* A rank that waits on no one heads the chain; a cycle is said to be one; a file of an
 * earlier run (written before this run's ranks started) is left out; a rank that says it
 * was itself stopped heads the chain whatever it waited on afterwards. */
START_TEST(test_cmd_idle_head_cycle_stale) {
    write_ranks(3, (int[]){1, -1, 1}, -1);
    const char *t = run_flight_cmd();
    ASSERT_HAS(t, "head of the wait chain: rank 1: ");
    ASSERT_HAS(t, "it waits on no one");
    write_ranks(3, (int[]){1, 2, 1}, -1); /* 1 -> 2 -> 1 */
    t = run_flight_cmd();
    ASSERT_HAS(t, "a cycle");
    ASSERT_LACKS(t, "head of the wait chain");
    usleep(2000);
    write_ranks(3, (int[]){1, 2, 1}, 2); /* a new run without rank 2's file */
    t = run_flight_cmd();
    ASSERT_HAS(t, "rank 2: its file is older than the other ranks' run: left out");
    ASSERT_HAS(t, "head of the wait chain: rank 2: ");
    /* 0 -> 1 -> 2 -> 1, but rank 2 says that it was itself stopped: it is the head */
    usleep(2000);
    const char *why[] = {"lost rank 1", "timed out waiting for rank 2",
                         "rank 2 (this rank) was itself stopped or too slow (...); then ..."};
    write_ranks_why(3, (int[]){1, 2, 1}, -1, why);
    t = run_flight_cmd();
    ASSERT_HAS(t, "rank 2: was itself stopped or too slow\n");
    ASSERT_HAS(t, "head of the wait chain: rank 2: ");
    ASSERT_HAS(t, "it says that it was itself stopped");
}
END_TEST

/* The chain rule alone. */
START_TEST(test_chain_head) {
    FlightFileInfo in[4] = {{.waiting_on = 1},
                            {.waiting_on = 2},
                            {.waiting_on = -1},
                            {.waiting_on = 0}};
    const FlightFileInfo *by[4] = {&in[0], &in[1], &in[2], &in[3]};
    int head[4], at[4];
    flight_chain_heads(by, 4, head, at); /* 3 -> 0 -> 1 -> 2 */
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(head[r], 2);
        ck_assert_int_eq(at[r], -1);
    }
    by[1] = NULL; /* 3 -> 0 -> 1 (no file); 2 waits on no one */
    flight_chain_heads(by, 4, head, at);
    ck_assert_int_eq(head[3], 1);
    ck_assert_int_eq(head[0], 1);
    ck_assert_int_eq(head[2], 2);
    by[1] = &in[1];
    in[2].waiting_on = 3; /* 0 -> 1 -> 2 -> 3 -> 0: every rank on the cycle */
    flight_chain_heads(by, 4, head, at);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(head[r], -1);
        ck_assert_int_ge(at[r], 0);
    }
    in[2].waiting_on = 1; /* 3 -> 0 -> 1 -> 2 -> 1: a cycle the first ranks lead into */
    flight_chain_heads(by, 4, head, at);
    for (int r = 0; r < 4; r++) ck_assert_int_eq(head[r], -1);
    ck_assert(at[3] == 1 || at[3] == 2);
    ck_assert_int_eq(at[0], at[3]);
    in[2].waiting_on = 7; /* a peer past the world: 2 is the head */
    flight_chain_heads(by, 4, head, at);
    for (int r = 0; r < 4; r++) ck_assert_int_eq(head[r], 2);
}
END_TEST

static Suite *flight_suite(void) {
    Suite *s = suite_create("flight");
    TCase *tc = tcase_create("recorder");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_off_is_null);
    tcase_add_test(tc, test_ring_keeps_the_last);
    tcase_add_test(tc, test_wait_finds_its_transfer);
    tcase_add_test(tc, test_collective_peer_from_probe);
    tcase_add_test(tc, test_sigusr2_dumps_and_goes_on);
    tcase_add_test(tc, test_fatal_signal_dumps_and_dies);
    tcase_add_test(tc, test_chain_head);
    suite_add_tcase(s, tc);
    TCase *cmd = tcase_create("command");
    tcase_add_checked_fixture(cmd, setup, teardown);
    tcase_add_test(cmd, test_cmd_head_without_a_file);
    tcase_add_test(cmd, test_cmd_idle_head_cycle_stale);
    tcase_add_test(cmd, test_cmd_hostile);
    suite_add_tcase(s, cmd);
    return s;
}

int main(void) { return check_run(flight_suite(), 0); }
