/* commtest.c — the harness of the transport tests (see commtest.h). */
#include "commtest.h"

#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#ifdef __SANITIZE_ADDRESS__ /* make DEBUG=1: a child's leaks fail it too (_exit skips the check) */
#include <sanitizer/lsan_interface.h>
#define CHILD_LEAK_CHECK() __lsan_do_leak_check()
#else
#define CHILD_LEAK_CHECK() ((void)0)
#endif

const char *BASE_CFG = "model:\n  n_layers: 4\n  dim: 64\n"
                       "train:\n  steps: 10\n  optimizer:\n    name: adamw\n"
                       "    lr: 0.0003\n  seed: 1337\npipeline:\n  stages: 2\n";

const char *KIND_NAMES[2] = {"activation", "gradient"};

const char *TEST_TOKEN = "0123456789abcdef-test-token";

void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int free_port(void) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

DistEnv make_env(int rank, int world, int port, const char *addr) {
    DistEnv e;
    memset(&e, 0, sizeof e);
    e.rank = e.local_rank = rank;
    e.world = e.local_world = world;
    snprintf(e.master_addr, sizeof e.master_addr, "%s", addr ? addr : "127.0.0.1");
    e.master_port = e.rdzv_port = port;
    e.source = DIST_SRC_TORCHRUN;
    return e;
}

void spawn(int P, ChildMain fn, void *arg, double limit_s, int *status) {
    spawn_until(P, P, fn, arg, limit_s, status);
}

void spawn_until(int P, int wait_n, ChildMain fn, void *arg, double limit_s, int *status) {
    pid_t pid[MAXP];
    int port = free_port(), left = wait_n;
    double end = pp_now() + limit_s;
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < P; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) {
            int rc = fn(r, port, arg);
            CHILD_LEAK_CHECK();
            _exit(rc);
        }
        status[r] = -1;
    }
    while (left > 0 && pp_now() < end) {
        for (int r = 0; r < P; r++) {
            int st;
            if (pid[r] > 0 && waitpid(pid[r], &st, WNOHANG) == pid[r]) {
                status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                pid[r] = 0;
                left -= r < wait_n;
            }
        }
        sleep_s(0.005);
    }
    for (int r = 0; r < P; r++)
        if (pid[r] > 0) { /* hung (the test fails on status -1), or not waited for (-2) */
            kill(pid[r], SIGKILL);
            waitpid(pid[r], NULL, 0);
            if (r >= wait_n) status[r] = -2;
        }
}

int job_main(int rank, int port, void *arg) {
    const Job *j = arg;
    DistEnv e = make_env(rank, j->world, port, j->addr);
    char err[PP_ERR_MAX];
    Comm *c;
    int rc;
    if (j->token) snprintf(e.token, sizeof e.token, "%s", j->token);
    if (rank == 0 && j->root_delay_s > 0) sleep_s(j->root_delay_s);
    rc = comm_create(&e, BASE_CFG, j->timeout_s, &c, err, sizeof err);
    if (rc) {
        fprintf(stderr, "rank %d: comm_create: %s\n", rank, err);
        return 100 + rc;
    }
    c->kind_names = KIND_NAMES;
    c->n_kind_names = 2;
    rc = j->body(c, j->arg);
    comm_destroy(c);
    return rc;
}

typedef struct {
    const Job *job;
    Comm *c;
    int rc;
} ThreadRank;

static void *thread_main(void *arg) {
    ThreadRank *t = arg;
    t->rc = t->job->body(t->c, t->job->arg);
    comm_destroy(t->c);
    return NULL;
}

void run_job_via(Via via, const Job *j, double limit_s) {
    int st[MAXP];
    if (via == VIA_SOCKETS) {
        spawn(j->world, job_main, (void *)j, limit_s, st);
    } else {
        Comm *c[MAXP];
        pthread_t th[MAXP];
        ThreadRank t[MAXP];
        ck_assert_int_eq(comm_memory_create(j->world, j->timeout_s, c), PP_OK);
        for (int r = 0; r < j->world; r++) {
            c[r]->kind_names = KIND_NAMES;
            c[r]->n_kind_names = 2;
            t[r] = (ThreadRank){j, c[r], -1};
            ck_assert_int_eq(pthread_create(&th[r], NULL, thread_main, &t[r]), 0);
        }
        for (int r = 0; r < j->world; r++) {
            pthread_join(th[r], NULL);
            st[r] = t[r].rc;
        }
    }
    for (int r = 0; r < j->world; r++)
        ck_assert_msg(st[r] == 0, "rank %d of %d (%s) exited with %d (-1 = hung)", r, j->world,
                      via == VIA_SOCKETS ? "sockets" : "memory", st[r]);
}

uint8_t pattern(int src, int dst, int seq, size_t i) {
    uint32_t x = (uint32_t)src * 0x9E3779B1u ^ (uint32_t)dst * 0x85EBCA77u ^
                 (uint32_t)seq * 0xC2B2AE3Du ^ (uint32_t)(i >> 2) * 0x27D4EB2Fu;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return (uint8_t)(x >> (8 * (i & 3)));
}

void fill(uint8_t *b, size_t n, int src, int dst, int seq) {
    for (size_t i = 0; i < n; i++) b[i] = pattern(src, dst, seq, i);
}

size_t count_wrong(const uint8_t *b, size_t n, int src, int dst, int seq) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += b[i] != pattern(src, dst, seq, i);
    if (bad) fprintf(stderr, "message %d from %d to %d: %zu of %zu bytes wrong\n", seq, src,
                     dst, bad, n);
    return bad;
}
