/* test_flight_race.c — the flight recorder (runtime/flight.c) under concurrency, as a run
 * uses it: the interpreter thread records while another thread dumps (a SIGUSR2 taken by
 * an idle worker), and a run ends — flight_signals(NULL), flight_destroy — while SIGUSR2s
 * keep arriving ([Note: flight recorder], [Note: handlers]).
 * - A dump never shows a torn record: the writer gives every field of record id a value
 *   that is a function of id, in a ring small enough (16) that slots are rewritten all the
 *   time, and every line of every dump must agree with its seq; a "done" line has an end,
 *   a "waiting" one a blocked-on time.
 * - A handler never dumps a recorder being freed: under `make test DEBUG=1` (ASan) a use
 *   after free is an error; in the release build the test only shows no crash or hang.
 * Both are bounded in time (about half a second each). ThreadSanitizer is not the check here:
 * the readers' copy is a sequence lock's plain memcpy, which it reports by design. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkrun.h"
#include "common.h"
#include "runtime/flight.h"
#include "testdir.h"

static void setup(void) { testdir_create("pp_test_flight_race"); }
static void teardown(void) { testdir_remove(); }

enum { RING = 16, MAX_RECORDS = 100000000, MAX_DUMPS = 20000 };

/* Record id's fields ("req" keys: any distinct addresses will do). */
static int f_step(uint64_t id) { return (int)(id % 1000003); }
static int f_stage(uint64_t id) { return (int)(id % 5); }
static int f_mb(uint64_t id) { return (int)(id % 11); }
static int f_peer(uint64_t id) { return (int)(id % 7); }
static int f_to(uint64_t id) { return (int)(id % 13); }
static size_t f_bytes(uint64_t id) { return (size_t)id * 3; }

typedef struct {
    FlightRec *f;
    volatile int stop;
    uint64_t records;
    uint64_t bad_id; /* a record id the writer did not expect (0: none) */
} Writer;

/* Compute actions, and sends posted, waited on and ended: ids 1, 2, ... in order. */
static void *writer(void *arg) {
    Writer *w = arg;
    static char reqs[64];
    uint64_t id = 0;
    while (!w->stop && id < MAX_RECORDS) {
        uint64_t k = id + 1, got;
        if (k % 3 == 0) {
            got = flight_compute(w->f, "F", f_step(k), f_stage(k), f_mb(k));
            if (got == k) flight_end(w->f, got, 1, 0);
        } else {
            void *req = &reqs[k % 64];
            got = flight_post(w->f, FLIGHT_SEND, "act", f_step(k), f_stage(k), f_to(k), f_mb(k),
                              f_peer(k), f_bytes(k), req, 1);
            if (got == k && flight_wait(w->f, req, "act", f_step(k), f_stage(k), f_mb(k)) != k)
                got = 0;
            if (got == k && k % 2) flight_end(w->f, got, 1, 0); /* half stay waiting */
        }
        if (got != k) {
            w->bad_id = k;
            break;
        }
        id = k;
        if (k % 4096 == 0) /* a breath now and then: dumps that find the ring still */
            nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    w->records = id;
    return NULL;
}

/* Every record line of the file at path agrees with its seq; returns the lines checked,
 * or fails the test naming the line. */
static int check_dump(const char *path) {
    FILE *fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "no flight file %s", path);
    char line[512];
    int lines = 0, table = 0;
    while (fgets(line, sizeof line, fp)) {
        if (strncmp(line, "      seq", 9) == 0) {
            table = 1;
            continue;
        }
        if (!table) continue;
        unsigned long long seq, bytes;
        double start;
        char blocked[32], end[32], state[16], peer[16], kind[16], rest[128];
        int step;
        int n = sscanf(line, "%llu %lf %31s %31s %15s %15s %llu %d %15s %127[^\n]", &seq, &start,
                       blocked, end, state, peer, &bytes, &step, kind, rest);
        ck_assert_msg(n == 10, "unreadable record line: %s", line);
        char want[128];
        if (seq % 3 == 0) {
            snprintf(want, sizeof want, "s%d mb%d", f_stage(seq), f_mb(seq));
            int running = strcmp(state, "running") == 0, done = strcmp(state, "done") == 0;
            ck_assert_msg(strcmp(kind, "F") == 0 && strcmp(rest, want) == 0 && bytes == 0 &&
                              strcmp(peer, "-") == 0 && (running || done) &&
                              strcmp(blocked, "-") == 0,
                          "torn compute record: %s", line);
            ck_assert_msg(!done || strcmp(end, "-") != 0, "done without an end: %s", line);
        } else {
            snprintf(want, sizeof want, "act s%d->s%d mb%d", f_stage(seq), f_to(seq), f_mb(seq));
            ck_assert_msg(strcmp(kind, "send") == 0 && strcmp(rest, want) == 0 &&
                              bytes == f_bytes(seq) && atoi(peer) == f_peer(seq),
                          "torn send record: %s", line);
            int posted = strcmp(state, "posted") == 0, waiting = strcmp(state, "waiting") == 0,
                done = strcmp(state, "done") == 0;
            ck_assert_msg(posted || waiting || (done && seq % 2), "wrong state: %s", line);
            ck_assert_msg(!(waiting || done) || strcmp(blocked, "-") != 0,
                          "waited on without a blocked-on time: %s", line);
            ck_assert_msg(!done || strcmp(end, "-") != 0, "done without an end: %s", line);
        }
        ck_assert_msg(step == f_step(seq), "torn record (step): %s", line);
        lines++;
    }
    fclose(fp);
    ck_assert_msg(table, "no record table in %s", path);
    return lines;
}

/* Dumps on this thread while the writer records: every line whole. */
START_TEST(test_dump_while_recording) {
    Writer w = {.f = flight_create(g_dir, 0, 2, RING)};
    char path[PP_PATH_MAX];
    snprintf(path, sizeof path, "%s/flight/rank_00000.txt", g_dir);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, writer, &w), 0);
    int dumps = 0, lines = 0;
    for (double t0 = pp_now(); dumps < MAX_DUMPS && pp_now() - t0 < 0.5; dumps++) {
        ck_assert_int_eq(flight_dump(w.f, "race"), 0);
        lines += check_dump(path);
    }
    w.stop = 1;
    pthread_join(t, NULL);
    ck_assert_msg(w.bad_id == 0, "the writer got another id than %llu",
                  (unsigned long long)w.bad_id);
    /* lines caught being rewritten are left out: nearly all of a dump's while the writer
     * runs flat out on another core (it rewrites the ring many times during one dump),
     * the whole ring while it takes a breath; the test must have checked some */
    ck_assert_msg(lines >= 100, "%d lines in %d dumps", lines, dumps);
    fprintf(stderr, "test_dump_while_recording: %d dumps, %d record lines checked, %llu records\n",
            dumps, lines, (unsigned long long)w.records);
    flight_destroy(w.f);
}
END_TEST

typedef struct {
    pthread_t target;
    volatile int stop;
    long sent;
} Sender;

static void *sender(void *arg) {
    Sender *s = arg;
    struct timespec us = {0, 20000};
    while (!s->stop) {
        pthread_kill(s->target, SIGUSR2);
        s->sent++;
        nanosleep(&us, NULL);
    }
    return NULL;
}

static void *signal_worker(void *arg) {
    volatile int *stop = arg;
    struct timespec ms = {0, 1000000};
    while (!*stop) nanosleep(&ms, NULL); /* an idle worker: it takes the SIGUSR2s */
    return NULL;
}

/* Runs end (signals off, recorder freed) and start again while a worker thread keeps
 * taking SIGUSR2, each handler dumping the recorder of the moment. */
START_TEST(test_destroy_while_signalled) {
    /* each handler says on stderr that it wrote the file: that goes to a file, and so
     * does a sanitizer's report (the directory stays when the report ends the test) */
    fprintf(stderr, "test_destroy_while_signalled: its stderr goes to %s\n", tmp("stderr.txt"));
    int quiet = open(tmp("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644), saved = dup(2);
    ck_assert(quiet >= 0 && saved >= 0);
    dup2(quiet, 2);
    volatile int stop = 0;
    pthread_t worker;
    ck_assert_int_eq(pthread_create(&worker, NULL, signal_worker, (void *)&stop), 0);
    Sender s = {.target = worker};
    pthread_t send_thread;
    double t0 = pp_now();
    int runs = 0;
    for (; runs < 1000000 && pp_now() - t0 < 0.5; runs++) {
        FlightRec *f = flight_create(g_dir, runs % 4, 4, RING);
        flight_signals(f);
        if (runs == 0) ck_assert_int_eq(pthread_create(&send_thread, NULL, sender, &s), 0);
        for (int m = 0; m < 200; m++) flight_end(f, flight_compute(f, "F", runs, 0, m), 1, 0);
        flight_signals(NULL); /* as the run ends: then no handler holds f */
        flight_destroy(f);
    }
    s.stop = 1;
    pthread_join(send_thread, NULL);
    stop = 1;
    pthread_join(worker, NULL);
    dup2(saved, 2);
    close(saved);
    close(quiet);
    fprintf(stderr, "test_destroy_while_signalled: %d runs, %ld SIGUSR2s\n", runs, s.sent);
    ck_assert_int_gt(runs, 10);
    ck_assert_int_gt(s.sent, 100);
}
END_TEST

static Suite *flight_race_suite(void) {
    Suite *s = suite_create("flight_race");
    TCase *tc = tcase_create("race");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_dump_while_recording);
    tcase_add_test(tc, test_destroy_while_signalled);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return check_run(flight_race_suite(), 0); }
