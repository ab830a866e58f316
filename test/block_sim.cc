/* block_sim.cc — the host runner of block_sim.h: a launch's CTAs one after another, each
 * CTA's threads as fibers, warps running ahead to the next __syncthreads in turn. */
#include "block_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

SimDim sim_block, sim_grid, sim_bdim;
int sim_cur;
alignas(16) unsigned char smem[BSIM_ARENA];

enum { STACK = 64 * 1024 };
enum { READY, AT_WARP, AT_BLOCK, DONE };
static ucontext_t sched_ctx, fib[BSIM_MAXT];
static char *stacks; /* BSIM_MAXT stacks, mapped once; a page is touched when first used */
static int st[BSIM_MAXT];
static long nbar[BSIM_MAXT], nwbar[BSIM_MAXT];
static const std::function<void()> *body;
static float xf[2][BSIM_MAXT]; /* the shuffles' values, two buffers taking turns */
static struct {
    void *p;
    size_t bytes;
} statics[8]; /* bsim_static_shared's arrays */
static int nstatics;

void bsim_fail(const char *what) {
    fprintf(stderr, "block_sim: %s (CTA %u of %u, %u threads)\n", what, sim_block.x, sim_grid.x,
            sim_bdim.x);
    exit(1);
}

/* A fiber stops at a collective: the warp's (a shuffle) or the block's (__syncthreads). */
static void stop(int how) {
    int t = sim_cur;
    st[t] = how;
    (how == AT_WARP ? nwbar : nbar)[t]++;
    swapcontext(&fib[t], &sched_ctx);
}

void __syncthreads(void) { stop(AT_BLOCK); }

/* A lane writes the buffer of its shuffle's parity and reads its partner's from it once the
 * warp is released: no lane can reach the next shuffle of the same parity before every lane
 * has passed the one between, so the value it reads is still there. */
float __shfl_xor_sync(unsigned mask, float v, int m) {
    int t = sim_cur, b = nwbar[t] & 1;
    if (mask != 0xffffffffu) bsim_fail("a shuffle over part of a warp");
    xf[b][t] = v;
    stop(AT_WARP);
    return xf[b][(t & ~31) | ((t & 31) ^ m)];
}

void bsim_static_shared(void *p, size_t bytes) {
    if (nstatics == 8) bsim_fail("more than 8 static shared arrays");
    statics[nstatics].p = p;
    statics[nstatics++].bytes = bytes;
}

static void entry(void) {
    (*body)();
    st[sim_cur] = DONE;
}

/* Run warp w until each of its lanes waits at __syncthreads or has ended: its lanes in
 * turn, each to its next collective; a shuffle releases when all 32 lanes are at it. */
static void run_warp(int w) {
    for (;;) {
        for (int t = 32 * w; t < 32 * w + 32; t++)
            if (st[t] == READY) {
                sim_cur = t;
                swapcontext(&sched_ctx, &fib[t]);
            }
        int at = 0;
        for (int t = 32 * w; t < 32 * w + 32; t++) at += st[t] == AT_WARP;
        if (!at) return;
        if (at < 32) bsim_fail("a shuffle that not every lane of the warp reaches");
        for (int t = 32 * w; t < 32 * w + 32; t++) {
            if (nwbar[t] != nwbar[32 * w]) bsim_fail("lanes of a warp at different shuffles");
            st[t] = READY;
        }
    }
}

static void run_block(unsigned b, int nt, size_t smem_bytes) {
    int nw = nt / 32;
    sim_block = SimDim{b, 0, 0};
    memset(smem, 0xff, sizeof smem); /* NaN everywhere: a read of what no thread wrote shows */
    for (int i = 0; i < nstatics; i++) memset(statics[i].p, 0xff, statics[i].bytes);
    for (int t = 0; t < nt; t++) {
        getcontext(&fib[t]);
        fib[t].uc_stack.ss_sp = stacks + (size_t)t * STACK;
        fib[t].uc_stack.ss_size = STACK;
        fib[t].uc_link = &sched_ctx;
        makecontext(&fib[t], entry, 0);
        st[t] = READY;
        nbar[t] = nwbar[t] = 0;
    }
    for (;;) { /* each warp to the next __syncthreads, then release the block */
        for (int i = 0; i < nw; i++) run_warp(b % 2 ? nw - 1 - i : i);
        int nd = 0;
        for (int t = 0; t < nt; t++) {
            nd += st[t] == DONE;
            if (nbar[t] != nbar[0])
                bsim_fail("threads of a block passed different numbers of barriers");
        }
        if (nd == nt) break;
        if (nd) bsim_fail("some threads of a block ended while others wait at a barrier");
        for (int t = 0; t < nt; t++) st[t] = READY;
    }
    for (size_t i = smem_bytes; i < sizeof smem; i++)
        if (smem[i] != 0xff)
            bsim_fail("a kernel wrote shared memory past its launch's dynamic size");
}

void bsim_run(unsigned blocks, int threads, size_t smem_bytes,
              const std::function<void()> &kernel) {
    sim_grid = SimDim{blocks, 1, 1};
    sim_bdim = SimDim{(unsigned)threads, 1, 1};
    if (threads < 32 || threads > BSIM_MAXT || threads % 32)
        bsim_fail("a block size over 1024 or not whole warps");
    if (smem_bytes > BSIM_SMEM) bsim_fail("dynamic shared memory over the device's 227 KB");
    if (!stacks) {
        void *p = mmap(NULL, (size_t)BSIM_MAXT * STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) bsim_fail("no memory for the fibers' stacks");
        stacks = (char *)p;
    }
    body = &kernel;
    for (unsigned b = 0; b < blocks; b++) run_block(b, threads, smem_bytes);
}
