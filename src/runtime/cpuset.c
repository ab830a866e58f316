/* cpuset.c — runtime.threads 0 from the ranks' affinity masks ([Note: thread share] in
 * cpuset.h). */
#define _GNU_SOURCE /* sched_getaffinity */
#include "cpuset.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int has(const CpuSet *s, int cpu) { return (int)(s->bits[cpu / 64] >> (cpu % 64) & 1); }

void cpuset_mine(CpuSet *s) {
    cpu_set_t set;
    memset(s, 0, sizeof *s);
    if (gethostname(s->host, sizeof s->host - 1) != 0) s->host[0] = '\0';
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPUSET_MAX && c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) s->bits[c / 64] |= (uint64_t)1 << (c % 64);
        return;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN); /* more CPUs than a cpu_set_t holds */
    for (int c = 0; c < CPUSET_MAX && c < n; c++) s->bits[c / 64] |= (uint64_t)1 << (c % 64);
}

int cpuset_exchange(Comm *c, const CpuSet *mine, CpuSet *all) {
    for (int r = 0; r < c->world; r++) {
        if (r == c->rank) all[r] = *mine;
        if (comm_broadcast(c, r, &all[r], sizeof all[r]) != PP_OK) return PP_ERUNTIME;
        all[r].host[CPUSET_HOST_MAX - 1] = '\0'; /* a peer's string */
    }
    return PP_OK;
}

int cpuset_count(const CpuSet *s) {
    int n = 0;
    for (int w = 0; w < CPUSET_MAX / 64; w++) n += __builtin_popcountll(s->bits[w]);
    return n;
}

int cpuset_threads(int world, const CpuSet *all, int rank, char *why, size_t whylen) {
    const CpuSet *me = &all[rank];
    double share = 0;
    int cpus = 0, shared = 0, kmin = 0, kmax = 0;
    int threads;
    for (int c = 0; c < CPUSET_MAX; c++) {
        if (!has(me, c)) continue;
        int k = 0; /* the ranks of this node that may run on CPU c, this one included */
        for (int q = 0; q < world; q++) k += has(&all[q], c) && !strcmp(all[q].host, me->host);
        share += 1.0 / k;
        cpus++;
        shared += k > 1;
        kmin = kmin == 0 || k < kmin ? k : kmin;
        kmax = k > kmax ? k : kmax;
    }
    threads = (int)(share + 1e-9); /* 3 ranks on 3 CPUs: 3 * (1/3) is 0.999... */
    if (threads < 1) threads = 1;
    if (cpus == 0) /* an empty mask cannot run: the kernel never reports one */
        snprintf(why, whylen, "no CPU in its affinity mask");
    else if (shared == 0)
        snprintf(why, whylen,
                 "the %d CPU(s) of its affinity mask, which no other rank on this node may run on",
                 cpus);
    else if (kmin == kmax && shared == cpus)
        snprintf(why, whylen,
                 "the %d CPU(s) of its affinity mask, shared by %d rank(s) on this node",
                 cpus, kmax);
    else
        snprintf(why, whylen,
                 "its share of the %d CPU(s) of its affinity mask, %d of which other ranks on this "
                 "node may run on too: a CPU that k ranks share counts 1/k",
                 cpus, shared);
    return threads;
}
