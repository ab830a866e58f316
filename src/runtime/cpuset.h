/* cpuset.h — how many compute threads runtime.threads 0 gives a rank: the CPUs of its
 * affinity mask, divided only among the ranks of its node that may run on them too. */
#ifndef PP_CPUSET_H
#define PP_CPUSET_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

#define CPUSET_MAX 1024 /* CPUs a mask holds (glibc's CPU_SETSIZE) */
#define CPUSET_HOST_MAX 64

/* One rank's CPUs as the thread count sees them. */
typedef struct {
    char host[CPUSET_HOST_MAX];    /* gethostname: ranks with one name share a node */
    uint64_t bits[CPUSET_MAX / 64]; /* bit c set: the rank may run on CPU c */
} CpuSet;

/* [Note: thread share]
 * runtime.threads 0 must not count a CPU twice, nor leave one idle. A launcher either
 * lets every rank of a node run on all its CPUs (pprun, torchrun, srun without binding)
 * or binds each rank to CPUs of its own (SLURM's task/affinity or cgroups, taskset,
 * numactl): then the mask already is the rank's share, and dividing it again by the
 * ranks on the node leaves most of it idle (8 bound CPUs gave 2 threads on 4 ranks).
 * So the mask is divided only where ranks overlap: each CPU c of rank r's mask counts
 * 1/k, where k is the number of ranks on r's node (the same host name) whose masks hold
 * c, r included; r gets the sum, rounded down, at least 1. Disjoint masks of 8 give 8
 * each; one mask of 16 shared by 2 ranks gives 8 each (16/2, as before); masks 0-7 and
 * 4-11 give 4 + 4/2 = 6 each. The shares of a node add up to at most its CPUs. */

/* This process's host name and affinity mask (sched_getaffinity; CPUs 0..n-1 of the
 * online ones where the mask does not fit CPUSET_MAX). */
void cpuset_mine(CpuSet *s);

/* Every rank's set into all[c->world] (all[c->rank] = *mine), over c's broadcasts: a
 * collective of c. PP_OK, or PP_ERUNTIME with comm_error(c). */
int cpuset_exchange(Comm *c, const CpuSet *mine, CpuSet *all);

/* The number of CPUs in s's mask. */
int cpuset_count(const CpuSet *s);

/* Rank `rank`'s thread count by [Note: thread share] from the sets of all `world` ranks,
 * at least 1. why[whylen] gets the reason for the build report, e.g. "the 8 CPU(s) of
 * its affinity mask, which no other rank on this node may run on". Pure. */
int cpuset_threads(int world, const CpuSet *all, int rank, char *why, size_t whylen);

#endif
