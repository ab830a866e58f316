/* bench_allreduce.c — the ring all-reduce of comm_ring.h between W forked processes over
 * the socket transport on loopback: time per call and the nccl-tests figures, algbw =
 * bytes / time and busbw = algbw x 2 (W-1) / W (what each link carries), for 1 MB ..
 * 256 MB. Usage: bench_allreduce W [max_MB]. Prints one row per size from rank 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_ring.h"

static int run_rank(int rank, int W, int port, size_t max_mb) {
    DistEnv e;
    memset(&e, 0, sizeof e);
    e.rank = e.local_rank = rank;
    e.world = e.local_world = W;
    snprintf(e.master_addr, sizeof e.master_addr, "127.0.0.1");
    e.master_port = e.rdzv_port = port;
    e.source = DIST_SRC_TORCHRUN;
    char err[PP_ERR_MAX];
    Comm *c;
    if (comm_create(&e, "bench_allreduce\n", 60.0, &c, err, sizeof err) != PP_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    c->max_message_bytes = (max_mb << 20) + 64;
    size_t nmax = (max_mb << 20) / sizeof(float);
    float *buf = malloc(nmax * sizeof *buf), *tmp = malloc((nmax / (size_t)W + 1) * sizeof *tmp);
    for (size_t i = 0; i < nmax; i++) buf[i] = (float)(i % 7);
    if (rank == 0)
        printf("%10s %6s %10s %12s %12s\n", "bytes", "ranks", "time ms", "algbw GB/s",
               "busbw GB/s");
    int seq = 0;
    for (size_t mb = 1; mb <= max_mb; mb *= 4) {
        size_t n = (mb << 20) / sizeof(float);
        int iters = mb >= 64 ? 3 : 10;
        double best = 1e30;
        for (int it = -1; it < iters; it++) { /* one warm-up call */
            CommRing r;
            CommTag t = {seq++, 0, 0, 1};
            if (comm_barrier(c) != PP_OK) return fprintf(stderr, "%s\n", comm_error(c)), 1;
            double t0 = pp_now();
            if (comm_ring_start(&r, c, RING_ALLREDUCE, buf, n, NULL, tmp, &t) != PP_OK ||
                comm_ring_wait(&r) != PP_OK)
                return fprintf(stderr, "rank %d: %s\n", rank, comm_error(c)), 1;
            double dt = pp_now() - t0;
            if (it >= 0 && dt < best) best = dt;
        }
        double alg = (double)(mb << 20) / best / 1e9;
        if (rank == 0)
            printf("%10zu %6d %10.2f %12.2f %12.2f\n", mb << 20, W, best * 1e3, alg,
                   alg * 2 * (W - 1) / W);
        fflush(stdout);
    }
    free(buf);
    free(tmp);
    comm_destroy(c);
    return 0;
}

int main(int argc, char **argv) {
    int W = argc > 1 ? atoi(argv[1]) : 2;
    size_t max_mb = argc > 2 ? (size_t)atol(argv[2]) : 256;
    if (W < 2 || W > 16 || max_mb < 1) {
        fprintf(stderr, "usage: bench_allreduce W(2..16) [max_MB]\n");
        return 2;
    }
    int port = 20000 + (int)(getpid() % 20000);
    pid_t pids[16];
    for (int r = 0; r < W; r++)
        if ((pids[r] = fork()) == 0) _exit(run_rank(r, W, port, max_mb));
    int bad = 0;
    for (int r = 0; r < W; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return bad;
}
