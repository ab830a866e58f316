/* runtime_dp.c — data parallelism: the replicas of a pipeline rank all-reduce their
 * gradients, bucket by bucket, each bucket as soon as the step's last action that adds
 * to it has run. */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "backend/optim.h"

/* [Note: data parallel]
 * D replicas of the pipeline ([Note: rank layout] in layout.h) each run the whole
 * schedule on their 1/D of the global batch (runtime.c's load_batch: replica dp takes
 * sequences [dp B/D, (dp+1) B/D)), with the one-process run's loss scale 1/(B T), so
 * their gradients add up to the one-process run's. The D ranks holding one pipeline
 * rank form a group (dp_init) and sum their gradients with the ring all-reduce of
 * comm_ring.h: a fixed order, so every replica gets the same bits, repeated runs too, and
 * the replicas' weights stay identical without ever being compared or broadcast.
 * Overlap: the gradients of a rank are cut into buckets of whole tensors (at most
 * DP_BUCKET_FLOATS, a longer tensor alone), grouped by the action after which they are
 * final: the last action (F, B, I or W) of the stage that owns them in this rank's list
 * (the tied wte on a rank holding both ends: after the list, once model_fold_tied_grad
 * has added the head's part). Buckets run one at a time in (that action, offset) order,
 * the same on every replica; after each action the runtime starts those that became
 * final and advances the running ring without blocking (dp_after_action), and while it
 * waits for a pipeline message it keeps advancing the ring (dp_wait); after the list
 * dp_finish runs the rest to the end. So the ring of the last stage, which finishes
 * its backwards first in 1F1B-like schedules, runs while the earlier stages still
 * compute; on the rank of stage 0 it starts when the list ends and is exposed. The ring
 * advances only between actions and during waits (no thread does its additions), and a
 * stage's gradients are final only after its last action: with one stage per rank and
 * no later stage (1 x D) nothing can hide. The report (runtime_report) says how much of
 * it ended before the slowest rank's action list did ([Note: hidden all-reduce]). The
 * grad norm then counts each tensor once (replica 0), the tied embedding's pair sum
 * (runtime.c) runs after the replicas' sums: ((sum over replicas of stage 0's part) +
 * (sum of the head's part)), the same on all 2D ranks. On a device backend the rings
 * run on a host copy of the gradients ([Note: host staging] in runtime.c). */

enum { KIND_DP = 4 }; /* runtime.c's kind_names[4] */

/* The local stages whose actions write tensor t's gradient. */
static int tensor_stages(const Runtime *rt, const ParamTensor *t, int *stages) {
    const Model *m = &rt->model;
    int n = 0;
    for (int c = 0; c < m->nchunks; c++)
        if (model_chunk_holds(m, c, t)) stages[n++] = m->chunks[c].stage;
    return n;
}

/* After which action of this rank's training list tensor t's gradient is final. */
static int tensor_ready(const Runtime *rt, const ParamTensor *t, const int *last) {
    int stages[PP_MAX_CHUNKS], n = tensor_stages(rt, t, stages);
    int len = rt->sched.len[rt->lay.pp], ready = -1;
    /* the fold */
    if (!strcmp(t->name, "wte") && rt->chunk_of[0] >= 0 && rt->chunk_of[rt->S - 1] >= 0) return len;
    for (int i = 0; i < n; i++)
        if (last[stages[i]] > ready) ready = last[stages[i]];
    return ready < 0 ? len : ready;
}

/* Whether tensor i goes before tensor j: by the action that makes it final, then by offset. */
static int goes_before(const Model *m, const int *ready, int i, int j) {
    if (ready[i] != ready[j]) return ready[i] < ready[j];
    return m->tensors[i].offset < m->tensors[j].offset;
}

/* Whether t is the tied wte of a rank whose pair partner is another rank (the pair's
 * all-reduce sums it whole). */
static int tied_pair_wte(const Runtime *rt, const ParamTensor *t) {
    return rt->tied && !strcmp(t->name, "wte");
}

/* [Note: ZeRO-1] With train.optimizer.shard, the replicas of a pipeline rank split the
 * optimizer state: each bucket is cut at tensor boundaries into D blocks (tensor by
 * tensor, a tensor goes to the replica whose even share holds its middle), and replica q
 * keeps the state of, and updates, block q only. The gradient ring is then a
 * reduce-scatter with those blocks (each replica gets the sums of its tensors), the
 * norm adds each replica's own tensors, the update touches only them, and an
 * all-gather of the parameters with the same blocks (dp_gather_params) gives every
 * replica the new weights. Whole tensors keep checkpoints simple: a tensor's state is
 * stored once, under its global name, by the replica that holds it, and any other
 * number of replicas loads it by name. The tied wte of a pair on two ranks goes to
 * replica 0 alone, on both ranks, so that the pair's sum (runtime.c) adds two complete
 * gradients. The blocks differ from the even ones of the plain all-reduce, so the sums
 * are added in another order: the same math to float rounding, not the same bits. */
static void zero_plan(Runtime *rt, const int *order, const int *first) {
    DpSync *d = &rt->dp;
    const Model *m = &rt->model;
    int D = rt->lay.D, nt = m->ntensors;
    d->zoff = pp_malloc((size_t)nt * sizeof(size_t));
    for (int i = 0; i < nt; i++) d->zoff[i] = DP_NOT_HELD;
    d->held = 0;
    for (int b = 0; b < d->nb; b++) {
        DpBucket *bk = &d->b[b];
        /* a bucket of its own (plan_buckets) */
        int alone = tied_pair_wte(rt, &m->tensors[order[first[b]]]);
        bk->bounds = pp_calloc((size_t)D + 1, sizeof(size_t));
        int q = 0;
        for (int j = first[b]; j < first[b + 1]; j++) {
            const ParamTensor *t = &m->tensors[order[j]];
            size_t mid = t->offset - bk->off + t->numel / 2;
            int owner = alone ? 0 : (int)(mid * (size_t)D / bk->n);
            if (owner > D - 1) owner = D - 1;
            while (q < owner) bk->bounds[++q] = t->offset - bk->off; /* blocks q+1.. start here */
            if (owner == rt->lay.dp) {
                d->zoff[order[j]] = d->held;
                d->held += t->numel;
            }
        }
        while (q < D) bk->bounds[++q] = bk->n;
    }
    const Backend *be = rt->model.be;
    int arrays = optim_state_arrays(rt->cfg);
    if (arrays >= 1) {
        d->opt_m = be->alloc(be, (d->held ? d->held : 1) * sizeof(float));
        be->zero(be, d->opt_m, d->held * sizeof(float));
    }
    if (arrays >= 2) {
        d->opt_v = be->alloc(be, (d->held ? d->held : 1) * sizeof(float));
        be->zero(be, d->opt_v, d->held * sizeof(float));
    }
    printf("rank %d: ZeRO-1: optimizer state of %zu of this stage's %zu parameters (%d array%s) = "
           "%.1f MB instead of %.1f MB: %.1f MB saved\n",
           rt->lay.rank, d->held, m->nparams, arrays, arrays == 1 ? "" : "s",
           arrays * d->held * 4 / 1e6, arrays * m->nparams * 4 / 1e6,
           arrays * (m->nparams - d->held) * 4 / 1e6);
}

/* Cut the gradients into buckets ([Note: data parallel]). */
static void plan_buckets(Runtime *rt) {
    const Model *m = &rt->model;
    const Schedule *sc = &rt->sched;
    int pp = rt->lay.pp, nt = m->ntensors, *last = pp_malloc((size_t)rt->S * sizeof(int));
    int *ready = pp_malloc((size_t)nt * sizeof(int)), *order = pp_malloc((size_t)nt * sizeof(int));
    for (int s = 0; s < rt->S; s++) last[s] = -1;
    for (int k = 0; k < sc->len[pp]; k++) {
        const Action *a = &sc->acts[pp][k];
        if (a->type == ACT_F || a->type == ACT_B || a->type == ACT_I || a->type == ACT_W)
            last[a->stage] = k;
    }
    for (int i = 0; i < nt; i++) {
        ready[i] = tensor_ready(rt, &m->tensors[i], last);
        order[i] = i;
    }
    for (int i = 1; i < nt; i++) /* insertion sort: a few hundred tensors at most */
        for (int j = i; j > 0 && goes_before(m, ready, order[j], order[j - 1]); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    DpSync *d = &rt->dp;
    d->b = pp_calloc((size_t)nt * 2 + 1, sizeof(DpBucket));
    d->nb = 0;
    /* bucket b's tensors: order[first[b] .. first[b+1]) */
    int *first = pp_malloc((size_t)(nt + 1) * sizeof(int));
    int cur_alone = 0; /* the last bucket is the tied wte's own, which nothing joins */
    for (int j = 0; j < nt; j++) {
        const ParamTensor *t = &m->tensors[order[j]];
        DpBucket *cur = d->nb ? &d->b[d->nb - 1] : NULL;
        int alone = d->zero && tied_pair_wte(rt, t); /* [Note: ZeRO-1] */
        if (cur && !alone && !cur_alone && cur->ready == ready[order[j]] &&
            cur->off + cur->n == t->offset && cur->n + t->numel <= DP_BUCKET_FLOATS) {
            cur->n += t->numel;
        } else {
            first[d->nb] = j;
            d->b[d->nb++] = (DpBucket){t->offset, t->numel, ready[order[j]], NULL};
        }
        cur_alone = alone;
    }
    first[d->nb] = nt;
    if (d->zero) zero_plan(rt, order, first);
    free(first);
    free(last);
    free(ready);
    free(order);
}

int dp_init(Runtime *rt, char *err, size_t errlen) {
    DpSync *d = &rt->dp;
    memset(d, 0, sizeof *d);
    if (rt->lay.D == 1) return PP_OK;
    d->zero = rt->cfg->optimizer_shard;
    if (comm_split(rt->comm, rt->lay.pp, rt->lay.dp, &d->group) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "forming the group of replicas of pipeline rank %d: %s", rt->lay.pp,
                       comm_error(rt->comm));
    plan_buckets(rt);
    size_t most = 1; /* the longest block any ring receives */
    for (int i = 0; i < d->nb; i++)
        for (int q = 0; q < rt->lay.D; q++) {
            size_t len;
            if (d->b[i].bounds) len = d->b[i].bounds[q + 1] - d->b[i].bounds[q];
            else comm_ring_block(d->b[i].n, rt->lay.D, q, &len);
            if (len > most) most = len;
        }
    d->tmp = pp_malloc(most * sizeof(float));
    const Backend *be = rt->model.be;
    if (be->device_memory) {
        size_t bytes = rt->model.nparams * sizeof(float);
        d->host = be->host_alloc ? be->host_alloc(be, bytes) : pp_malloc(bytes);
        rt->staging_bytes += bytes;
    }
    return PP_OK;
}

void dp_free(Runtime *rt) {
    DpSync *d = &rt->dp;
    const Backend *be = rt->model.be;
    if (d->host) {
        if (be && be->host_free) be->host_free(be, d->host);
        else free(d->host);
    }
    for (int i = 0; i < d->nb && d->b; i++) free(d->b[i].bounds);
    if (be) {
        be->dealloc(be, d->opt_m);
        be->dealloc(be, d->opt_v);
    }
    free(d->tmp);
    free(d->b);
    free(d->zoff);
    comm_destroy(d->group);
    memset(d, 0, sizeof *d);
}

void dp_begin(Runtime *rt, int step) {
    DpSync *d = &rt->dp;
    d->next = d->active = 0;
    d->step = step;
    d->t0 = pp_now();
    d->t_first = d->t_done = 0;
}

/* The buffer bucket b's ring runs on: its part of flat (the gradients or the
 * parameters), or its host copy (made now). */
static float *bucket_buf(Runtime *rt, float *flat, const DpBucket *b) {
    const Backend *be = rt->model.be;
    float *g = flat + b->off;
    if (!rt->dp.host) return g;
    be->to_host(be, rt->dp.host + b->off, g, b->n * sizeof(float));
    be->wait(be);
    return rt->dp.host + b->off;
}

/* Start the buckets final after action `limit` and advance the running ring, without
 * blocking unless block (then until every such bucket is done). */
static int dp_advance(Runtime *rt, int limit, int block, char *err, size_t errlen) {
    DpSync *d = &rt->dp;
    const Backend *be = rt->model.be;
    for (;;) {
        if (d->active) {
            int done = 0, rc = block ? comm_ring_wait(&d->ring) : comm_ring_test(&d->ring, &done);
            if (rc != PP_OK)
                return pp_errf(err, errlen, PP_ERUNTIME,
                               "gradient all-reduce among the replicas of pipeline rank %d (bucket "
                               "%d of %d) at step %d: %s",
                               rt->lay.pp, d->next, d->nb, d->step, comm_error(d->group));
            if (!block && !done) return PP_OK;
            const DpBucket *b = &d->b[d->next - 1];
            if (d->host) {
                be->to_device(be, rt->model.grads + b->off, d->host + b->off, b->n * sizeof(float));
                be->wait(be);
            }
            d->active = 0;
            d->t_done = pp_now();
            if (rt->trace)
                trace_add(rt->trace, "all-reduce", "comm", d->bucket_us, trace_now_us(), -1,
                          d->next - 1, d->step);
        }
        if (d->next >= d->nb || d->b[d->next].ready > limit) return PP_OK;
        const DpBucket *b = &d->b[d->next];
        CommTag tag = {.step = d->step, .stage = d->next, .mb = 0, .kind = KIND_DP};
        if (d->next == 0) d->t_first = pp_now();
        d->bucket_us = trace_now_us();
        if (comm_ring_start(&d->ring, d->group, d->zero ? RING_REDUCE_SCATTER : RING_ALLREDUCE,
                            bucket_buf(rt, rt->model.grads, b), b->n, b->bounds,
                            d->tmp, &tag) != PP_OK)
            return pp_errf(err, errlen, PP_ERUNTIME,
                           "starting the gradient all-reduce at step %d: %s", d->step,
                           comm_error(d->group));
        d->next++;
        d->active = 1;
    }
}

int dp_after_action(Runtime *rt, int k, char *err, size_t errlen) {
    if (!rt->dp.group) return PP_OK;
    rt->dp.limit = k;
    return dp_advance(rt, k, 0, err, errlen);
}

int dp_wait(Runtime *rt, Comm *c, CommReq *req, int *ring_failed, char *err, size_t errlen) {
    DpSync *d = &rt->dp;
    *ring_failed = 0;
    while (d->active) { /* poll both; a silent peer fails comm_test as it would comm_wait */
        int done = 0, rc = comm_test(c, req, &done);
        if (done) return rc;
        if ((rc = dp_advance(rt, d->limit, 0, err, errlen))) {
            *ring_failed = 1;
            return rc;
        }
        struct timespec ts = {0, 100 * 1000}; /* 0.1 ms: a ring step's latency at most */
        if (d->active) nanosleep(&ts, NULL);
    }
    return comm_wait(c, req);
}

int dp_finish(Runtime *rt, char *err, size_t errlen) {
    DpSync *d = &rt->dp;
    if (!d->group) return PP_OK;
    double t = pp_now();
    int rc = dp_advance(rt, rt->sched.len[rt->lay.pp], 1, err, errlen);
    PP_CHECK(rc != PP_OK || (d->next == d->nb && !d->active));
    d->exposed_s = pp_now() - t;
    d->span_s = d->nb ? d->t_done - d->t_first : 0;
    return rc;
}

void dp_measure(Runtime *rt) {
    DpSync *d = &rt->dp;
    if (!d->group) return;
    d->sum_span_s += d->span_s;
    d->sum_end_s += d->t_done - d->t0;
    d->sum_exposed_s += d->exposed_s;
}

/* [Note: hidden all-reduce] Each rank measures from its step's start: when its action
 * list ended (pipe_s), when its last bucket's ring ended, and how long its rings ran
 * (span: first start to last end). The ranks start a step within one small all-reduce
 * of each other, so the step's pipeline ends at the latest list end over all ranks;
 * the all-reduce of pipeline rank p costs the step only what of it runs past that:
 * exposed_p = max(0, latest ring end among p's replicas - latest list end). A ring
 * cannot end before its last replica joins it, so its duration is taken as the
 * shortest span among the replicas (the others include waiting for that one). Hidden
 * share = 1 - (sum of exposed_p) / (sum of durations), from means over measured steps. */
int dp_report(Runtime *rt, char *err, size_t errlen) {
    DpSync *d = &rt->dp;
    int W = rt->lay.world, D = rt->lay.D, n = rt->measured;
    if (!d->group || n == 0) return PP_OK;
    double *v = pp_calloc(4 * (size_t)W, sizeof(double));
    int r = rt->lay.rank;
    v[r] = rt->sum_pipe_s / n;
    v[W + r] = d->sum_end_s / n;
    v[2 * W + r] = d->sum_span_s / n;
    v[3 * W + r] = d->sum_exposed_s / n;
    if (comm_allreduce_sum_f64(rt->comm, v, 4 * W) != PP_OK) {
        free(v);
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the data-parallel report: %s",
                       comm_error(rt->comm));
    }
    if (r == 0) {
        double pipe = 0, exposed = 0, dur = 0, wait = 0;
        for (int q = 0; q < W; q++) {
            pipe = v[q] > pipe ? v[q] : pipe;
            wait += v[3 * W + q] / W;
        }
        for (int p = 0; p < rt->lay.P; p++) {
            double end = 0, span = 1e30;
            for (int k = 0; k < D; k++) {
                int q = layout_rank_of(&rt->lay, p, k);
                end = v[W + q] > end ? v[W + q] : end;
                span = v[2 * W + q] < span ? v[2 * W + q] : span;
            }
            exposed += end > pipe ? end - pipe : 0;
            dur += span;
        }
        double hidden = dur > 0 ? 1 - exposed / dur : 1;
        printf("data parallel: %d replicas; gradient all-reduce %.1f MB per step on pipeline rank "
               "0 (%d bucket%s): runs %.1f ms summed over the pipeline ranks, %.1f ms of it after "
               "the slowest action list: %.0f%% hidden behind computation (ranks wait %.1f ms for "
               "it on average)\n",
               D, rt->model.nparams * 4 / 1e6, d->nb, d->nb == 1 ? "" : "s", dur * 1e3,
               exposed * 1e3, 100 * (hidden < 0 ? 0 : hidden), wait * 1e3);
    }
    free(v);
    return PP_OK;
}

int dp_gather_params(Runtime *rt, char *err, size_t errlen) {
    DpSync *d = &rt->dp;
    const Backend *be = rt->model.be;
    if (!d->zero) return PP_OK;
    for (int i = 0; i < d->nb; i++) {
        const DpBucket *b = &d->b[i];
        CommTag tag = {.step = d->step, .stage = d->nb + i, .mb = 0, .kind = KIND_DP};
        float *buf = bucket_buf(rt, rt->model.params, b);
        if (comm_ring_start(&d->ring, d->group, RING_ALL_GATHER, buf, b->n, b->bounds,
                            d->tmp, &tag) != PP_OK ||
            comm_ring_wait(&d->ring) != PP_OK)
            return pp_errf(err, errlen, PP_ERUNTIME,
                           "all-gather of the parameters among the replicas of pipeline rank %d "
                           "(bucket %d of %d) at step %d: %s",
                           rt->lay.pp, i, d->nb, d->step, comm_error(d->group));
        if (d->host) {
            be->to_device(be, rt->model.params + b->off, buf, b->n * sizeof(float));
            be->wait(be);
        }
    }
    return PP_OK;
}

float *dp_opt_state(const Runtime *rt, int i, int k) {
    const Model *m = &rt->model;
    const DpSync *d = &rt->dp;
    if (!d->zero) {
        float *a = k == 0 ? m->opt_m : m->opt_v;
        return a ? a + m->tensors[i].offset : NULL;
    }
    float *a = k == 0 ? d->opt_m : d->opt_v;
    return a && d->zoff[i] != DP_NOT_HELD ? a + d->zoff[i] : NULL;
}

int dp_counts(const Runtime *rt, int i, int what) {
    if (rt->dp.zero && what != DP_PARAMS) return rt->dp.zoff[i] != DP_NOT_HELD;
    return rt->lay.dp == 0;
}
