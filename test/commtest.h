/* commtest.h — the harness of the transport tests (test_comm.c, test_comm_groups.c):
 * the ranks of a job as forked processes over real sockets on loopback, or as threads
 * over the memory transport, running one body each; and bytes every rank can predict,
 * after nccl-tests. */
#ifndef PP_COMMTEST_H
#define PP_COMMTEST_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "comm/comm.h"
#include "dist/dist.h"

#define MAXP 8

extern const char *BASE_CFG;      /* the config text every rank of a job sends */
extern const char *TEST_TOKEN;    /* a job token (PPTRAIN_JOB_TOKEN) for tests that want one */
extern const char *KIND_NAMES[2]; /* "activation", "gradient" */

/* In a rank's body: print what is wrong and make the rank fail (return 1). */
#define CHILD_CHECK(cond)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "child %d: %s:%d: check failed: %s\n", (int)getpid(),      \
                    __FILE__, __LINE__, #cond);                                        \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

void sleep_s(double s);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int free_port(void);

/* The torchrun-style identity of rank `rank` of `world` (addr NULL = 127.0.0.1). */
DistEnv make_env(int rank, int world, int port, const char *addr);

typedef int (*ChildMain)(int rank, int port, void *arg); /* returns the exit code */

/* Fork P children running fn(rank, port, arg); wait at most limit_s for all of them.
 * status[r] = exit code, 128+signal if killed, or -1 if it hung (then killed). */
void spawn(int P, ChildMain fn, void *arg, double limit_s, int *status);
/* spawn, but wait only for ranks 0..wait_n-1 (a stopped rank never exits): the others
 * are then killed, with status -2 unless they exited before. */
void spawn_until(int P, int wait_n, ChildMain fn, void *arg, double limit_s, int *status);

/* A rank's part of a job: returns 0 when everything it checked held. The Comm is the
 * job's (kind_names set); the harness destroys it afterwards. */
typedef int (*RankBody)(Comm *c, void *arg);

typedef enum { VIA_SOCKETS, VIA_MEMORY } Via;

typedef struct {
    int world;
    double timeout_s;
    const char *addr;    /* sockets: NULL = 127.0.0.1 */
    double root_delay_s; /* sockets: rank 0 starts this late (the others must retry) */
    RankBody body;
    void *arg;
    const char *token;   /* sockets: the job token, NULL = none */
} Job;

/* A forked child's main for a job (j = arg): comm_create, body, comm_destroy. */
int job_main(int rank, int port, void *arg);

/* Run a job over `via` and require every rank to return 0 within limit_s (memory: the
 * Check test's own timeout ends a hang). */
void run_job_via(Via via, const Job *j, double limit_s);
static inline void run_job_ok(const Job *j, double limit_s) {
    run_job_via(VIA_SOCKETS, j, limit_s);
}

/* Bytes every rank can predict: message `seq` from src to dst, byte i. */
uint8_t pattern(int src, int dst, int seq, size_t i);
void fill(uint8_t *b, size_t n, int src, int dst, int seq);
/* The bytes of b that differ from the pattern (and a line on stderr if any). */
size_t count_wrong(const uint8_t *b, size_t n, int src, int dst, int seq);

#endif
