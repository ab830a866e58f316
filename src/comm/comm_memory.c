/* comm_memory.c — the memory transport behind comm.h: the ranks of a job are threads of
 * one process (for tests), or the one rank of a 1-rank run (comm_local_create). */
#include "comm_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* [Note: memory transport]
 * The members of a job or of a group share one MemGroup: a lock, a condition that is
 * broadcast on every change, and per ordered pair of members the messages sent and not
 * yet received and the receives posted and not yet matched. isend copies the message
 * into the receiver's oldest waiting receive (or into the pair's list) and completes
 * at once; a wait sleeps on the condition until its request is done, its sender's Comm
 * is destroyed, or timeout_s passes.
 * A collective is a rendezvous: each member posts a pointer to its input and sleeps;
 * the last to arrive adds the inputs in rank order (the helpers of comm.c, so the bits
 * are the socket transport's) into one result; each member copies its part out, and
 * the last to leave makes room for the next collective. A mismatch, a member whose Comm
 * was destroyed, or timeout_s without every member fails the collective for everyone
 * with one message, which stays: every later collective of the group fails with it. */

enum { MC_ALLREDUCE = 1, MC_ALLREDUCE_F32, MC_REDUCE_SCATTER, MC_ALL_GATHER, MC_BROADCAST,
       MC_BARRIER, MC_SPLIT };

static const char *mc_name(int op) {
    static const char *names[] = {"?", "allreduce", "allreduce_f32", "reduce_scatter",
                                  "all_gather", "broadcast", "barrier", "split"};
    return names[op];
}

typedef struct MemGroup MemGroup;

typedef struct {
    MemGroup *group; /* NULL: color < 0 */
    int index;       /* this member's rank in it */
} MemSplitOut;

typedef struct {
    uint32_t seq;        /* collectives this group completed */
    int op, root, first; /* of the current one: what the first member to arrive called */
    size_t count;
    int arrived, left;   /* members in it; of those, gone with their part of the result */
    int *here;           /* [world] arrived */
    const void **in;     /* [world] each member's input while it waits */
    void *result;        /* computed by the last to arrive */
    int ready;
    int failed;          /* sticky: every later collective fails with err */
    char err[PP_ERR_MAX];
} MemColl;

struct MemGroup {
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* broadcast on every change */
    int world;
    int *global;        /* [world] each member's rank in the job */
    int refs;           /* members whose Comm is not destroyed */
    int *gone;          /* [world] destroyed its Comm */
    EarlyList *msgs;    /* [src*world + dst] sent, not yet received */
    ReqQueue *recvs;    /* [src*world + dst] posted, waiting for their message */
    MemColl coll;
    char name[96];      /* comm_group_name; "" for the job */
};

typedef struct {
    Comm base; /* first: a MemComm * is a Comm * */
    MemGroup *g;
    CommReq *live;
} MemComm;

static const CommOps mem_ops;

/* ---------------------------------------------------------------- the group -- */

static MemGroup *group_new(int world, const int *global, int job) {
    MemGroup *g = pp_calloc(1, sizeof *g);
    pthread_condattr_t ca;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of pp_now */
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    g->world = g->refs = world;
    g->global = pp_malloc((size_t)world * sizeof *g->global);
    memcpy(g->global, global, (size_t)world * sizeof *g->global);
    g->gone = pp_calloc((size_t)world, sizeof *g->gone);
    g->msgs = pp_calloc((size_t)world * world, sizeof *g->msgs);
    g->recvs = pp_calloc((size_t)world * world, sizeof *g->recvs);
    g->coll.here = pp_calloc((size_t)world, sizeof *g->coll.here);
    g->coll.in = pp_calloc((size_t)world, sizeof *g->coll.in);
    if (!job) comm_group_name(global, world, g->name, sizeof g->name);
    return g;
}

static void group_free(MemGroup *g) {
    for (int i = 0; i < g->world * g->world; i++) {
        Early *e;
        while ((e = comm_early_pop(&g->msgs[i]))) comm_early_free(e);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->global);
    free(g->gone);
    free(g->msgs);
    free(g->recvs);
    free(g->coll.here);
    free(g->coll.in);
    free(g->coll.result);
    free(g);
}

static MemComm *comm_new(MemGroup *g, int index, double timeout_s) {
    MemComm *m = pp_calloc(1, sizeof *m);
    m->base.ops = &mem_ops;
    m->base.rank = index;
    m->base.world = g->world;
    m->base.timeout_s = timeout_s;
    m->base.max_message_bytes = COMM_MAX_MESSAGE_DEFAULT; /* kept for callers; unused here */
    m->g = g;
    return m;
}

/* Sleep on g->cv until `until` (pp_now() seconds) at the latest. Call with g->mu held. */
static void group_sleep(MemGroup *g, double until) {
    struct timespec ts;
    until += 1e-3;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
}

static int member_of(const MemGroup *g, int global) {
    for (int i = 0; i < g->world; i++)
        if (g->global[i] == global) return i;
    return -1;
}

/* ------------------------------------------------------------- point to point -- */

static int mem_check_peer(Comm *c, int peer, const char *op) {
    if (peer >= 0 && peer < c->world && (peer != c->rank || c->world == 1)) return PP_OK;
    return comm_fail(c, "%s: no peer rank %d (this is rank %d of %d)", op, peer, c->rank,
                     c->world);
}

static const char *gone_why(void) {
    return "its Comm was destroyed — did it exit early? see its log";
}

static int mem_isend(Comm *c, int peer, const CommTag *tag, const void *buf, size_t bytes,
                     CommReq **out) {
    MemComm *m = (MemComm *)c;
    MemGroup *g = m->g;
    int lane = c->rank * g->world + peer, rc = PP_OK;
    CommReq *rr;
    *out = NULL;
    if (mem_check_peer(c, peer, "isend")) return PP_ERUNTIME;
    pthread_mutex_lock(&g->mu);
    if (g->gone[peer]) {
        char t[160];
        comm_tag_format(c, tag, t, sizeof t);
        rc = comm_fail(c, "lost connection to rank %d, cannot send (%s): %s", g->global[peer],
                       t, gone_why());
    } else if ((rr = comm_queue_pop(&g->recvs[lane]))) {
        /* else rr's wait reports the mismatch */
        if (comm_recv_matches(rr->owner, g->global[peer], rr, tag, bytes)) {
            memcpy(rr->buf, buf, bytes);
            comm_req_ok(rr);
        }
    } else {
        Early *e = comm_early_new(tag, bytes);
        memcpy(e->buf, buf, bytes);
        e->complete = 1;
        comm_early_push(&g->msgs[lane], e);
    }
    if (!rc) {
        *out = comm_req_new(c, &m->live, REQ_SEND, g->global[peer], tag, (void *)buf, bytes);
        comm_req_ok(*out);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int mem_irecv(Comm *c, int peer, const CommTag *tag, void *buf, size_t bytes,
                     CommReq **out) {
    MemComm *m = (MemComm *)c;
    MemGroup *g = m->g;
    int lane = peer * g->world + c->rank, rc = PP_OK;
    CommReq *r;
    Early *e;
    *out = NULL;
    if (mem_check_peer(c, peer, "irecv")) return PP_ERUNTIME;
    pthread_mutex_lock(&g->mu);
    r = comm_req_new(c, &m->live, REQ_RECV, g->global[peer], tag, buf, bytes);
    if ((e = comm_early_pop(&g->msgs[lane]))) {
        if (comm_recv_matches(c, g->global[c->rank], r, &e->tag, e->bytes)) {
            memcpy(buf, e->buf, bytes);
            comm_req_ok(r);
        }
        comm_early_free(e);
    } else if (g->gone[peer]) {
        char t[160];
        comm_tag_format(c, tag, t, sizeof t);
        comm_req_fail(r, "lost connection to rank %d while waiting to receive (%s): %s",
                      r->peer, t, gone_why());
    } else {
        comm_queue_push(&g->recvs[lane], r);
    }
    if (r->done && r->status != PP_OK) {
        rc = comm_req_release(c, &m->live, r); /* fails at once: nothing to wait for */
        r = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    *out = r;
    return rc;
}

/* Fail the pending receive r if it can no longer complete (a 1-rank Comm, its sender
 * gone, timeout_s passed); else set *until to when it times out. Call with g->mu held. */
static void recv_check(MemComm *m, CommReq *r, double *until) {
    MemGroup *g = m->g;
    int peer = member_of(g, r->peer);
    char t[160];
    *until = r->posted + m->base.timeout_s;
    comm_tag_format(&m->base, &r->tag, t, sizeof t);
    if (m->base.world == 1)
        comm_req_fail(r, "receive of (%s) can never complete: nothing was sent for it and "
                      "a 1-rank run has no other rank to send it — the schedule is out of "
                      "order", t);
    else if (g->gone[peer])
        comm_req_fail(r, "lost connection to rank %d while waiting to receive (%s): %s",
                      r->peer, t, gone_why());
    else if (pp_now() >= *until)
        comm_req_fail(r, "timed out waiting for rank %d (%s): nothing arrived for %g s "
                      "(runtime.timeout_s) — is rank %d stuck or much slower? see its log",
                      r->peer, t, m->base.timeout_s, r->peer);
    if (r->done) comm_queue_remove(&g->recvs[peer * g->world + m->base.rank], r);
}

static int mem_wait(Comm *c, CommReq *r) {
    MemComm *m = (MemComm *)c;
    int rc;
    pthread_mutex_lock(&m->g->mu);
    while (!r->done) {
        double until;
        recv_check(m, r, &until);
        if (!r->done) group_sleep(m->g, until);
    }
    rc = comm_req_release(c, &m->live, r);
    pthread_mutex_unlock(&m->g->mu);
    return rc;
}

static int mem_test(Comm *c, CommReq *r, int *done) {
    MemComm *m = (MemComm *)c;
    double until;
    int rc = PP_OK;
    pthread_mutex_lock(&m->g->mu);
    if (!r->done && c->world > 1) recv_check(m, r, &until); /* 1 rank: a later send may come */
    *done = r->done;
    if (r->done) rc = comm_req_release(c, &m->live, r);
    pthread_mutex_unlock(&m->g->mu);
    return rc;
}

static int mem_group_call(Comm *c) { return PP_OK; } /* isend never waits: nothing to batch */

/* --------------------------------------------------------------- collectives -- */

/* The result of the current collective, from every member's input (the last member to
 * arrive calls it, with g->mu held). Sums run in rank order with comm.c's helpers, a
 * reduce-scatter's in the socket ring's order (the same bits). */
static void coll_combine(MemGroup *g) {
    MemColl *k = &g->coll;
    size_t n = k->count;
    switch (k->op) {
    case MC_ALLREDUCE: {
        double *v = pp_malloc((n ? n : 1) * sizeof *v);
        memcpy(v, k->in[0], n * sizeof *v);
        for (int r = 1; r < g->world; r++)
            for (size_t i = 0; i < n; i++) v[i] += ((const double *)k->in[r])[i];
        k->result = v;
        break;
    }
    case MC_ALLREDUCE_F32: {
        float *v = pp_malloc((n ? n : 1) * sizeof *v);
        memcpy(v, k->in[0], n * sizeof *v);
        for (int r = 1; r < g->world; r++) comm_add_f32(v, k->in[r], n);
        comm_canon_nan_f32(v, n);
        k->result = v;
        break;
    }
    case MC_REDUCE_SCATTER: { /* count: all the floats each rank gives; block q summed in
                                 the socket ring's order, ((v[q+1] + v[q+2]) + ...) + v[q] */
        int W = g->world;
        size_t blk = n / (size_t)W;
        float *v = pp_malloc((n ? n : 1) * sizeof *v);
        for (int q = 0; q < W; q++) {
            float *dst = v + (size_t)q * blk;
            memcpy(dst, (const float *)k->in[(q + 1) % W] + (size_t)q * blk, blk * sizeof *v);
            for (int j = 2; j <= W; j++)
                comm_add_f32(dst, (const float *)k->in[(q + j) % W] + (size_t)q * blk, blk);
        }
        comm_canon_nan_f32(v, n);
        k->result = v;
        break;
    }
    case MC_ALL_GATHER: {
        float *v = pp_malloc((n ? n : 1) * g->world * sizeof *v);
        for (int r = 0; r < g->world; r++) memcpy(v + (size_t)r * n, k->in[r], n * sizeof *v);
        k->result = v;
        break;
    }
    case MC_BROADCAST:
        k->result = pp_malloc(n ? n : 1);
        memcpy(k->result, k->in[k->root], n);
        break;
    case MC_SPLIT: { /* in[r]: {color, key}; the result: each member's MemSplitOut */
        int W = g->world, *ints = pp_malloc(4 * (size_t)W * sizeof *ints);
        int *color = ints, *key = ints + W, *members = ints + 2 * W, *glob = ints + 3 * W;
        MemSplitOut *out = pp_calloc((size_t)W, sizeof *out);
        for (int r = 0; r < W; r++) {
            color[r] = ((const int *)k->in[r])[0];
            key[r] = ((const int *)k->in[r])[1];
        }
        for (int r = 0; r < W; r++) {
            int idx, n_in = comm_split_plan(W, color, key, r, members, &idx);
            MemGroup *sub;
            if (n_in == 0 || out[r].group) continue; /* none, or made with an earlier member */
            for (int i = 0; i < n_in; i++) glob[i] = g->global[members[i]];
            sub = group_new(n_in, glob, 0);
            for (int i = 0; i < n_in; i++) out[members[i]] = (MemSplitOut){sub, i};
        }
        free(ints);
        k->result = out;
        break;
    }
    default: /* MC_BARRIER */
        break;
    }
}

/* Fail the current collective for every member with the message; returns PP_ERUNTIME.
 * Call with g->mu held. */
static int coll_fail(MemComm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int coll_fail(MemComm *m, const char *fmt, ...) {
    MemColl *k = &m->g->coll;
    va_list ap;
    if (!k->failed) {
        k->failed = 1;
        va_start(ap, fmt);
        vsnprintf(k->err, sizeof k->err, fmt, ap);
        va_end(ap);
        pthread_cond_broadcast(&m->g->cv);
    }
    return comm_fail(&m->base, "%s", k->err);
}

/* Wait for every member to arrive (op called by the first one), failing on a member
 * gone or after timeout_s. Call with g->mu held, this member counted in. */
static int coll_await(MemComm *m, int op, double end) {
    MemGroup *g = m->g;
    MemColl *k = &g->coll;
    while (!k->ready && !k->failed) {
        int missing = -1;
        for (int r = g->world - 1; r >= 0; r--) /* the lowest missing, or one gone */
            if (!k->here[r] && (missing < 0 || !g->gone[missing])) missing = r;
        if (g->gone[missing])
            return coll_fail(m, "lost connection to rank %d in %s #%u%s: %s",
                             g->global[missing], mc_name(op), k->seq, g->name, gone_why());
        if (pp_now() >= end)
            return coll_fail(m, "timed out in %s #%u%s: rank %d sent nothing for %g s "
                             "(runtime.timeout_s) — is it stuck, or in a different "
                             "collective? see its log", mc_name(op), k->seq, g->name,
                             g->global[missing], m->base.timeout_s);
        group_sleep(g, end);
    }
    return k->ready ? PP_OK : comm_fail(&m->base, "%s", k->err); /* a result stands */
}

/* One collective: post `in`, wait for the others, then copy out_bytes of the result
 * from out_off into out. root matters to broadcast only. */
static int coll_run(MemComm *m, int op, int root, size_t count, const void *in, void *out,
                    size_t out_off, size_t out_bytes) {
    MemGroup *g = m->g;
    MemColl *k = &g->coll;
    double end = pp_now() + m->base.timeout_s;
    int me = m->base.rank, rc = PP_OK;
    pthread_mutex_lock(&g->mu);
    while (k->ready && !k->failed && pp_now() < end) group_sleep(g, end); /* the last one drains */
    if (k->failed) {
        rc = comm_fail(&m->base, "%s", k->err);
    } else if (k->ready) {
        rc = coll_fail(m, "timed out in %s #%u%s: the previous collective did not finish",
                       mc_name(op), k->seq + 1, g->name);
    } else if (k->arrived > 0 && (k->op != op || k->count != count || k->root != root)) {
        rc = coll_fail(m, "collectives out of step: rank %d called %s #%u (count %zu) while "
                       "rank %d called %s #%u (count %zu)%s — every rank must call the same "
                       "collectives in the same order", g->global[k->first], mc_name(k->op),
                       k->seq, k->count, g->global[me], mc_name(op), k->seq, count, g->name);
    } else {
        if (k->arrived == 0) {
            k->op = op;
            k->count = count;
            k->root = root;
            k->first = me;
        }
        k->in[me] = in;
        k->here[me] = 1;
        if (++k->arrived == g->world) {
            coll_combine(g);
            k->ready = 1;
            pthread_cond_broadcast(&g->cv);
        }
        rc = coll_await(m, op, end);
    }
    if (rc == PP_OK) {
        if (out_bytes) memcpy(out, (char *)k->result + out_off, out_bytes);
        if (++k->left == g->world) { /* the last one out makes room for the next */
            free(k->result);
            k->result = NULL;
            k->ready = k->arrived = k->left = 0;
            memset(k->here, 0, (size_t)g->world * sizeof *k->here);
            k->seq++;
            pthread_cond_broadcast(&g->cv);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int mem_allreduce_sum_f64(Comm *c, double *v, int n) {
    if (n < 0) return comm_fail(c, "allreduce_sum_f64: negative count %d", n);
    return coll_run((MemComm *)c, MC_ALLREDUCE, 0, (size_t)n, v, v, 0, (size_t)n * sizeof *v);
}

static int mem_allreduce_sum_f32(Comm *c, float *buf, size_t n) {
    return coll_run((MemComm *)c, MC_ALLREDUCE_F32, 0, n, buf, buf, 0, n * sizeof *buf);
}

static int mem_reduce_scatter_sum_f32(Comm *c, const float *send, float *recv, size_t count) {
    size_t all = count * (size_t)c->world;
    return coll_run((MemComm *)c, MC_REDUCE_SCATTER, 0, all, send, recv,
                    (size_t)c->rank * count * sizeof *recv, count * sizeof *recv);
}

static int mem_all_gather_f32(Comm *c, const float *send, float *recv, size_t count) {
    return coll_run((MemComm *)c, MC_ALL_GATHER, 0, count, send, recv, 0,
                    count * (size_t)c->world * sizeof *recv);
}

static int mem_broadcast(Comm *c, int root, void *buf, size_t bytes) {
    if (root < 0 || root >= c->world)
        return comm_fail(c, "broadcast: no root rank %d (world %d)", root, c->world);
    return coll_run((MemComm *)c, MC_BROADCAST, root, bytes, buf, buf, 0, bytes);
}

static int mem_barrier(Comm *c) {
    return coll_run((MemComm *)c, MC_BARRIER, 0, 0, NULL, NULL, 0, 0);
}

static int mem_split(Comm *c, int color, int key, Comm **out) {
    MemComm *m = (MemComm *)c, *sub;
    int in[2] = {color < 0 ? -1 : color, key};
    MemSplitOut mine;
    int rc;
    *out = NULL;
    rc = coll_run(m, MC_SPLIT, 0, 2, in, &mine, (size_t)c->rank * sizeof mine, sizeof mine);
    if (rc || !mine.group) return rc;
    sub = comm_new(mine.group, mine.index, c->timeout_s);
    sub->base.kind_names = c->kind_names;
    sub->base.n_kind_names = c->n_kind_names;
    sub->base.max_message_bytes = c->max_message_bytes;
    *out = &sub->base;
    return PP_OK;
}

/* ----------------------------------------------------------------- lifecycle -- */

/* Drop this member's requests (pending receives leave their queues) and unreceived
 * messages, and tell the others it is gone; the last member frees the group. */
static void mem_destroy(Comm *c) {
    MemComm *m = (MemComm *)c;
    MemGroup *g = m->g;
    int me = c->rank, last;
    pthread_mutex_lock(&g->mu);
    while (m->live) {
        CommReq *r = m->live;
        m->live = r->next_live;
        if (!r->done) comm_queue_remove(&g->recvs[member_of(g, r->peer) * g->world + me], r);
        free(r);
    }
    for (int src = 0; src < g->world; src++) {
        Early *e;
        while ((e = comm_early_pop(&g->msgs[src * g->world + me]))) comm_early_free(e);
    }
    g->gone[me] = 1;
    last = --g->refs == 0;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (last) group_free(g);
    free(m);
}

static const CommOps mem_ops = {
    .name = "memory",
    .isend = mem_isend,
    .irecv = mem_irecv,
    .wait = mem_wait,
    .test = mem_test,
    .group_start = mem_group_call,
    .group_end = mem_group_call,
    .allreduce_sum_f64 = mem_allreduce_sum_f64,
    .allreduce_sum_f32 = mem_allreduce_sum_f32,
    .reduce_scatter_sum_f32 = mem_reduce_scatter_sum_f32,
    .all_gather_f32 = mem_all_gather_f32,
    .broadcast = mem_broadcast,
    .barrier = mem_barrier,
    .split = mem_split,
    .destroy = mem_destroy,
};

int comm_memory_create(int world, double timeout_s, Comm **out) {
    MemGroup *g;
    int *ranks;
    if (world < 1) return PP_EUSAGE;
    ranks = pp_malloc((size_t)world * sizeof *ranks);
    for (int r = 0; r < world; r++) ranks[r] = r;
    g = group_new(world, ranks, 1);
    for (int r = 0; r < world; r++) out[r] = &comm_new(g, r, timeout_s)->base;
    free(ranks);
    return PP_OK;
}
