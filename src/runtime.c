/* runtime.c — the pipeline interpreter: one rank's stages, its lowered action list,
 * and the per-step synchronisation (tied embeddings, gradient norm, loss). */
#include "runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>

#include "optim.h"
#include "sim.h"

enum { KIND_ACT = 1, KIND_GRAD = 2, KIND_VAL_ACT = 3 };
static const char *const kind_names[] = {"?", "activation", "gradient", "validation activation"};

/* ---- slot pool ----------------------------------------------------------------
 * [Note: activation slots] A local chunk keeps one slot per microbatch it holds. A
 * slot is taken at F and given back when nothing will read it again: in training
 * after B(s,m) when s is stage 0 or stage s-1 is local (B pushes the input gradient
 * into stage s-1's slot), else after SEND_B(s,m) was posted; in a forward-only pass after F on the last stage, after SEND_F, or after F(s+1,m)
 * copied the output. A given-back slot may still be read by a posted send; taking it
 * again first waits for that send. runtime_pool_size replays the list by these same
 * rules, so the pool is exactly as large as the schedule needs (sched_peak_inflight).
 * A RECV_F, which the lowering may place well before its F, receives into a small
 * [N,C] buffer that F then swaps into the slot it takes: a received microbatch does not
 * hold a whole slot of activations while it waits. */

static int stage_local(const Schedule *s, int rank, int stage) {
    return stage >= 0 && stage < s->S && sched_stage_rank(stage, s->P) == rank;
}

/* Does action a (on `rank`) give back the slot of (stage, a->mb)? */
static int releases(const Schedule *s, int rank, const Action *a, int stage) {
    int fwd = s->forward_only, t = a->type;
    if (fwd) return (t == ACT_F && a->stage == stage && stage == s->S - 1) ||
                    (t == ACT_SEND_F && a->stage == stage) ||
                    (t == ACT_F && a->stage == stage + 1 && stage_local(s, rank, stage + 1));
    return (t == ACT_B && a->stage == stage && (stage == 0 || stage_local(s, rank, stage - 1))) ||
           (t == ACT_SEND_B && a->stage == stage);
}

int runtime_pool_size(const Schedule *s, int rank, int stage) {
    int held = 0, peak = 0;
    char *have = pp_calloc(s->M, 1);
    for (int i = 0; i < s->len[rank]; i++) {
        const Action *a = &s->acts[rank][i];
        if (a->type == ACT_F && a->stage == stage && !have[a->mb]) {
            have[a->mb] = 1;
            peak = ++held > peak ? held : peak;
        }
        if (releases(s, rank, a, stage) && have[a->mb]) {
            have[a->mb] = 0;
            held--;
        }
    }
    free(have);
    return peak;
}

int runtime_recv_pool_size(const Schedule *s, int rank, int stage) {
    int held = 0, peak = 0;
    for (int i = 0; i < s->len[rank]; i++) {
        const Action *a = &s->acts[rank][i];
        if (a->stage != stage) continue;
        if (a->type == ACT_RECV_F) peak = ++held > peak ? held : peak;
        if (a->type == ACT_F && held > 0 && stage > 0 && !stage_local(s, rank, stage - 1)) held--;
    }
    return peak;
}

static int wait_req(Runtime *rt, CommReq **req, const char *what, int stage, int mb, int step,
                    char *err, size_t errlen) {
    if (!*req) return PP_OK;
    double t0 = trace_now_us();
    int rc = comm_wait(rt->comm, *req);
    *req = NULL;
    if (rt->trace) trace_add(rt->trace, what, "wait", t0, trace_now_us(), stage, mb, step);
    if (rc != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "while waiting for %s of stage %d microbatch %d at step %d: %s",
                       what, stage, mb, step, comm_error(rt->comm));
    return PP_OK;
}

static int slot_find(Runtime *rt, int c, int mb) {
    for (int i = 0; i < rt->model.chunks[c].nslots; i++)
        if (rt->slots[c][i].busy && rt->slots[c][i].mb == mb) return i;
    return -1;
}

static int slot_acquire(Runtime *rt, int c, int mb, int step, int *out, char *err, size_t errlen) {
    int n = rt->model.chunks[c].nslots, stage = rt->model.chunks[c].stage;
    for (int i = 0; i < n; i++) {
        SlotState *st = &rt->slots[c][i];
        if (st->busy) continue;
        for (int k = 0; k < 2; k++) {
            int rc = wait_req(rt, &st->send[k], "an earlier send", stage, st->mb, step, err, errlen);
            if (rc) return rc;
        }
        st->busy = 1;
        st->mb = mb;
        *out = i;
        return PP_OK;
    }
    PP_DIE("activation pool of stage %d exhausted (%d slots) at microbatch %d: the pool size "
           "does not match the schedule (a bug)", stage, n, mb);
}

static void slot_release(Runtime *rt, int c, int i) { rt->slots[c][i].busy = 0; }

static RecvBuf *recv_find(Runtime *rt, int c, int mb) {
    for (int i = 0; i < rt->nrbufs[c]; i++)
        if (rt->rbufs[c][i].mb == mb) return &rt->rbufs[c][i];
    return NULL;
}

/* ---- the interpreter ---------------------------------------------------------- */

typedef struct {
    int step, fwd_only, kind_act;
    float dloss;
    double loss_sum;
} StepCtx;

static CommTag tag_of(int step, int stage, int mb, int kind) {
    CommTag t = {.step = step, .stage = stage, .mb = mb, .kind = kind};
    return t;
}

/* The slot of (stage, mb) on this rank; dies if it is not held (schedule bug). */
static int held_slot(Runtime *rt, int c, int mb) {
    int i = slot_find(rt, c, mb);
    if (i < 0) PP_DIE("stage %d has no activations for microbatch %d (schedule bug)", rt->model.chunks[c].stage, mb);
    return i;
}

static int exec_forward(Runtime *rt, const Action *a, StepCtx *x, char *err, size_t errlen) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], i = slot_find(rt, c, m), rc;
    size_t NC = (size_t)rt->Bmb * rt->T * rt->model.d.C, rows = (size_t)m * rt->Bmb * rt->T;
    if (i < 0 && (rc = slot_acquire(rt, c, m, x->step, &i, err, errlen))) return rc;
    ActSlot *as = &rt->model.chunks[c].slots[i];
    if (s > 0 && rt->chunk_of[s - 1] < 0) { /* take over the received input */
        RecvBuf *rb = recv_find(rt, c, m);
        if (!rb) PP_DIE("stage %d: no receive posted for microbatch %d (schedule bug)", s, m);
        if ((rc = wait_req(rt, &rb->req, "recv activation", s, m, x->step, err, errlen))) return rc;
        float *t = as->input;
        as->input = rb->buf;
        rb->buf = t;
        rb->mb = -1;
    }
    if (s == 0) memcpy(as->tokens, rt->inputs + rows, rt->Bmb * rt->T * sizeof(int));
    if (s == rt->S - 1) memcpy(as->targets, rt->targets + rows, rt->Bmb * rt->T * sizeof(int));
    if (s > 0 && rt->chunk_of[s - 1] >= 0) { /* local handover from stage s-1 */
        int pc = rt->chunk_of[s - 1], pi = held_slot(rt, pc, m);
        memcpy(as->input, model_chunk_output(&rt->model, pc, pi), NC * sizeof(float));
        if (x->fwd_only) slot_release(rt, pc, pi);
    }
    double t0 = trace_now_us();
    x->loss_sum += model_forward(&rt->model, c, i, x->dloss, !x->fwd_only);
    double t1 = trace_now_us();
    rt->busy_s += (t1 - t0) * 1e-6;
    if (!x->fwd_only) rt->cur_f[s] += (t1 - t0) * 1e-6;
    if (rt->trace) trace_add(rt->trace, "F", "compute", t0, t1, s, m, x->step);
    if (x->fwd_only && s == rt->S - 1) slot_release(rt, c, i);
    return PP_OK;
}

static int exec_backward(Runtime *rt, const Action *a, StepCtx *x, char *err, size_t errlen) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], i = held_slot(rt, c, m), rc;
    size_t NC = (size_t)rt->Bmb * rt->T * rt->model.d.C;
    SlotState *st = &rt->slots[c][i];
    ActSlot *as = &rt->model.chunks[c].slots[i];
    if ((rc = wait_req(rt, &st->recv, "recv gradient", s, m, x->step, err, errlen))) return rc;
    double t0 = trace_now_us();
    model_backward(&rt->model, c, i);
    double t1 = trace_now_us();
    rt->busy_s += (t1 - t0) * 1e-6;
    rt->cur_b[s] += (t1 - t0) * 1e-6;
    if (rt->trace) trace_add(rt->trace, "B", "compute", t0, t1, s, m, x->step);
    if (s > 0 && rt->chunk_of[s - 1] >= 0) { /* local handover: push d(input) to stage s-1 */
        int pc = rt->chunk_of[s - 1];
        memcpy(rt->model.chunks[pc].slots[held_slot(rt, pc, m)].grad, as->grad, NC * sizeof(float));
    }
    if (s == 0 || rt->chunk_of[s - 1] >= 0) slot_release(rt, c, i);
    return PP_OK;
}

static int exec_transfer(Runtime *rt, const Action *a, StepCtx *x, char *err, size_t errlen) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], i, rc;
    size_t bytes = (size_t)rt->Bmb * rt->T * rt->model.d.C * sizeof(float);
    Comm *cm = rt->comm;
    double t0 = trace_now_us();
    CommTag tag;
    const char *what;
    switch (a->type) {
    case ACT_SEND_F:
        i = held_slot(rt, c, m);
        tag = tag_of(x->step, s, m, x->kind_act);
        rc = comm_isend(cm, sched_stage_rank(s + 1, rt->P), &tag, model_chunk_output(&rt->model, c, i), bytes, &rt->slots[c][i].send[0]);
        if (x->fwd_only) slot_release(rt, c, i);
        what = "send activation";
        break;
    case ACT_RECV_F: {
        RecvBuf *rb = recv_find(rt, c, -1);
        if (!rb) PP_DIE("stage %d: all %d receive buffers busy at microbatch %d (a bug)", s, rt->nrbufs[c], m);
        rb->mb = m;
        tag = tag_of(x->step, s - 1, m, x->kind_act);
        rc = comm_irecv(cm, sched_stage_rank(s - 1, rt->P), &tag, rb->buf, bytes, &rb->req);
        what = "post recv activation";
        break;
    }
    case ACT_SEND_B:
        i = held_slot(rt, c, m);
        tag = tag_of(x->step, s, m, KIND_GRAD);
        rc = comm_isend(cm, sched_stage_rank(s - 1, rt->P), &tag, rt->model.chunks[c].slots[i].grad, bytes, &rt->slots[c][i].send[1]);
        slot_release(rt, c, i);
        what = "send gradient";
        break;
    case ACT_RECV_B:
        i = held_slot(rt, c, m);
        tag = tag_of(x->step, s + 1, m, KIND_GRAD);
        rc = comm_irecv(cm, sched_stage_rank(s + 1, rt->P), &tag, rt->model.chunks[c].slots[i].grad, bytes, &rt->slots[c][i].recv);
        what = "post recv gradient";
        break;
    default:
        PP_DIE("action type %d is not executable by this runtime", a->type);
    }
    if (rt->trace) trace_add(rt->trace, what, "comm", t0, trace_now_us(), s, m, x->step);
    if (rc != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s of stage %d microbatch %d at step %d: %s", what, s, m, x->step,
                       comm_error(cm));
    return PP_OK;
}

/* Run one lowered action list; then wait until every send has left. */
static int run_actions(Runtime *rt, const Schedule *sc, StepCtx *x, char *err, size_t errlen) {
    int rc = PP_OK;
    for (int k = 0; k < sc->len[rt->rank] && rc == PP_OK; k++) {
        const Action *a = &sc->acts[rt->rank][k];
        switch (a->type) {
        case ACT_F: rc = exec_forward(rt, a, x, err, errlen); break;
        case ACT_B: rc = exec_backward(rt, a, x, err, errlen); break;
        default: rc = exec_transfer(rt, a, x, err, errlen); break;
        }
    }
    for (int c = 0; c < rt->model.nchunks && rc == PP_OK; c++) {
        for (int i = 0; i < rt->nrbufs[c]; i++) PP_CHECK(rt->rbufs[c][i].mb < 0); /* every F ran */
        for (int i = 0; i < rt->model.chunks[c].nslots && rc == PP_OK; i++) {
            SlotState *st = &rt->slots[c][i];
            PP_CHECK(!st->busy && !st->recv); /* the schedule released everything */
            for (int k = 0; k < 2 && rc == PP_OK; k++)
                rc = wait_req(rt, &st->send[k], "a send to complete", rt->model.chunks[c].stage, st->mb, x->step, err, errlen);
        }
    }
    return rc;
}

static void load_batch(Runtime *rt, const DataSet *d, long n) {
    if (rt->chunk_of[0] >= 0 || rt->chunk_of[rt->S - 1] >= 0)
        data_batch(d, n, rt->B, rt->T, rt->inputs, rt->targets);
}

int runtime_tied_replica(const Runtime *rt, const ParamTensor *t) {
    return rt->tied_peer >= 0 && rt->chunk_of[0] < 0 && !strcmp(t->name, "wte");
}

/* Sum of squared gradients of this rank, counting the tied wte once over all ranks
 * (on the rank of stage 0). */
static double local_sumsq(const Runtime *rt) {
    const Model *m = &rt->model;
    double s = 0.0;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        if (runtime_tied_replica(rt, t)) continue;
        s += optim_sumsq(m->grads + t->offset, t->numel);
    }
    return s;
}

int runtime_step(Runtime *rt, int step, double *ctl, int nctl, StepResult *res, char *err,
                 size_t errlen) {
    const Config *cfg = rt->cfg;
    Model *m = &rt->model;
    Comm *cm = rt->comm;
    double t0 = pp_now();
    rt->busy_s = 0;
    memset(rt->cur_f, 0, sizeof rt->cur_f);
    memset(rt->cur_b, 0, sizeof rt->cur_b);
    load_batch(rt, &rt->train, step);
    model_zero_grads(m);
    StepCtx x = {.step = step + 1, .kind_act = KIND_ACT, .dloss = 1.0f / ((float)rt->B * rt->T)}; /* 1-based, as logged */
    int rc = run_actions(rt, &rt->sched, &x, err, errlen);
    if (rc) return rc;
    rt->pipe_s = pp_now() - t0;
    double ts = trace_now_us();
    model_fold_tied_grad(m);
    /* [Note: tied embeddings] stage 0 and stage S-1 each hold wte; when they are on
     * different ranks, both add the other's gradient (their 2-rank all-reduce gives the
     * same bits on both), so the identical optimizer update keeps the copies identical.
     * On one rank the two chunks share a single tensor. */
    int r0 = sched_stage_rank(0, rt->P), rl = sched_stage_rank(rt->S - 1, rt->P);
    if (m->d.tied && r0 != rl) { /* a collective of every rank: the pair's group, then its sum */
        Comm *pair = NULL;
        if (comm_split(cm, rt->tied_peer >= 0 ? 0 : -1, rt->rank, &pair) != PP_OK)
            return pp_errf(err, errlen, PP_ERUNTIME, "forming the tied embedding pair: %s", comm_error(cm));
        rc = pair ? comm_allreduce_sum_f32(pair, m->dwte, (size_t)m->d.Vp * m->d.C) : PP_OK;
        if (rc) pp_errf(err, errlen, PP_ERUNTIME, "summing tied embedding gradients with rank %d: %s", rt->tied_peer, comm_error(pair));
        comm_destroy(pair);
        if (rc) return rc;
    }
    double red[2 + RUNTIME_MAX_CTL] = {x.loss_sum, local_sumsq(rt)};
    PP_CHECK(nctl >= 0 && nctl <= RUNTIME_MAX_CTL);
    for (int i = 0; i < nctl; i++) red[2 + i] = ctl[i];
    if (comm_allreduce_sum_f64(cm, red, 2 + nctl) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of loss and gradient norm at step %d: %s", step, comm_error(cm));
    for (int i = 0; i < nctl; i++) ctl[i] = red[2 + i];
    res->loss = red[0] / ((double)rt->B * rt->T);
    res->grad_norm = sqrt(red[1]);
    res->lr = optim_lr(cfg, step);
    if (!isfinite(res->loss) || !isfinite(res->grad_norm))
        return pp_errf(err, errlen, PP_ERUNTIME, "step %d: loss %g, gradient norm %g are not finite: lower "
                       "train.optimizer.lr%s, or resume from an earlier checkpoint", step + 1, res->loss, res->grad_norm,
                       cfg->grad_clip > 0 ? "" : " or enable train.grad_clip");
    float scale = optim_clip_scale(red[1], cfg->grad_clip);
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        optim_update(cfg, m->params + t->offset, m->grads + t->offset, rt->opt_m ? rt->opt_m + t->offset : NULL,
                     rt->opt_v ? rt->opt_v + t->offset : NULL, t->numel, res->lr, t->decay, scale, step + 1);
    }
    if (rt->trace) trace_add(rt->trace, "optimizer", "compute", ts, trace_now_us(), -1, -1, step);
    rt->step_s = pp_now() - t0;
    return PP_OK;
}

int runtime_validate(Runtime *rt, int batches, double *loss, char *err, size_t errlen) {
    double sum = 0;
    for (int n = 0; n < batches; n++) {
        load_batch(rt, &rt->val, n);
        StepCtx x = {.step = n, .fwd_only = 1, .kind_act = KIND_VAL_ACT};
        int rc = run_actions(rt, &rt->fwd, &x, err, errlen);
        if (rc) return rc;
        sum += x.loss_sum;
    }
    if (comm_allreduce_sum_f64(rt->comm, &sum, 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the validation loss: %s", comm_error(rt->comm));
    *loss = sum / ((double)batches * rt->B * rt->T);
    return PP_OK;
}

/* ---- build -------------------------------------------------------------------- */

static int open_data(Runtime *rt, char *err, size_t errlen) {
    const Config *c = rt->cfg;
    /* every rank takes part in validation (it is collective); only the ranks of the
     * first and last stage read tokens */
    rt->has_val = c->val_path[0] != 0 && c->val_every > 0;
    if (rt->chunk_of[0] < 0 && rt->chunk_of[rt->S - 1] < 0) return PP_OK;
    int rc = data_open(&rt->train, c->train_path, c->vocab_size, err, errlen);
    if (!rc) rc = data_check_batch(&rt->train, rt->B, rt->T, err, errlen);
    if (rc || !rt->has_val) return rc;
    rc = data_open(&rt->val, c->val_path, c->vocab_size, err, errlen);
    return rc ? rc : data_check_batch(&rt->val, rt->B, rt->T, err, errlen);
}

static int build_schedules(Runtime *rt, char *err, size_t errlen) {
    const Config *c = rt->cfg;
    int rc = c->schedule_file[0] ? sched_load_file(&rt->sched, c->schedule_file, rt->P, rt->v, rt->M, err, errlen)
                                 : sched_build(&rt->sched, c->schedule, rt->P, rt->v, rt->M, err, errlen);
    return rc ? rc : sched_build_forward_only(&rt->fwd, rt->P, rt->v, rt->M, err, errlen);
}

int runtime_init(Runtime *rt, const Config *cfg, Comm *comm, Trace *trace, char *err, size_t errlen) {
    memset(rt, 0, sizeof *rt);
    rt->cfg = cfg;
    rt->comm = comm;
    rt->trace = trace;
    rt->rank = comm->rank;
    comm->kind_names = kind_names;
    comm->n_kind_names = 4;
    rt->P = cfg->stages;
    rt->v = cfg->virtual_stages;
    rt->S = rt->P * rt->v;
    rt->M = cfg->microbatches;
    rt->B = cfg->batch_size;
    rt->T = cfg->seq_len;
    rt->Bmb = rt->B / rt->M;
    if (comm->world != rt->P)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.stages is %d but %d process%s launched: launch exactly "
                       "pipeline.stages ranks (e.g. scripts/pprun --nproc-per-node %d) or change pipeline.stages",
                       rt->P, comm->world, comm->world == 1 ? " was" : "es were", rt->P);
    /* [Note: backends] only the CPU backend and the socket transport exist so far: a
     * config asking for CUDA or NCCL is refused rather than run on something else */
    if (!strcmp(cfg->device, "cuda") || !strcmp(cfg->transport, "nccl"))
        return pp_errf(err, errlen, PP_EUSAGE, "runtime.device=%s, runtime.transport=%s: this build has only the CPU "
                       "backend and the socket transport; use runtime.device: cpu (or auto) and transport: socket "
                       "(or auto)", cfg->device, cfg->transport);
    if (rt->v > PP_MAX_CHUNKS)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.virtual_stages %d is more than this build supports (%d)", rt->v,
                       PP_MAX_CHUNKS);
    ModelDims d = {cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, cfg->n_layers, cfg->n_heads, cfg->dim,
                   cfg->tie_embeddings};
    int rc = partition_build(&rt->part, cfg->split, d.L, rt->S, d.C, d.Vp, rt->T, err, errlen);
    if (rc || (rc = build_schedules(rt, err, errlen))) return rc;
    ChunkSpec specs[PP_MAX_CHUNKS];
    for (int s = 0; s < rt->S; s++) rt->chunk_of[s] = -1;
    for (int c = 0; c < rt->v; c++) {
        int s = rt->rank + c * rt->P, pool = runtime_pool_size(&rt->sched, rt->rank, s);
        int vpool = runtime_pool_size(&rt->fwd, rt->rank, s);
        specs[c] = (ChunkSpec){s, rt->part.l0[s], rt->part.l1[s], s == 0, s == rt->S - 1, pool > vpool ? pool : vpool};
        rt->chunk_of[s] = c;
    }
    model_init(&rt->model, &d, specs, rt->v, rt->Bmb, rt->T, backend_cpu());
    size_t NC = (size_t)rt->Bmb * rt->T * d.C;
    for (int c = 0; c < rt->v; c++) {
        int s = specs[c].stage, nr = runtime_recv_pool_size(&rt->sched, rt->rank, s);
        int nrv = runtime_recv_pool_size(&rt->fwd, rt->rank, s);
        rt->slots[c] = pp_calloc(specs[c].nslots, sizeof(SlotState));
        for (int i = 0; i < specs[c].nslots; i++) rt->slots[c][i].mb = -1;
        rt->nrbufs[c] = nr > nrv ? nr : nrv;
        rt->rbufs[c] = pp_calloc(rt->nrbufs[c] ? rt->nrbufs[c] : 1, sizeof(RecvBuf));
        for (int i = 0; i < rt->nrbufs[c]; i++) {
            rt->rbufs[c][i] = (RecvBuf){pp_malloc(NC * sizeof(float)), -1, NULL};
            rt->recv_bytes += NC * sizeof(float);
        }
    }
    model_init_weights(&rt->model, cfg->seed, cfg->init_std);
    if (cfg->init_from[0] && (rc = model_load_llmc(&rt->model, cfg->init_from, err, errlen))) return rc;
    int nstate = optim_state_arrays(cfg);
    if (nstate >= 1) rt->opt_m = pp_calloc(rt->model.nparams, sizeof(float));
    if (nstate >= 2) rt->opt_v = pp_calloc(rt->model.nparams, sizeof(float));
    int r0 = sched_stage_rank(0, rt->P), rl = sched_stage_rank(rt->S - 1, rt->P);
    rt->tied_peer = (!d.tied || r0 == rl) ? -1 : rt->rank == r0 ? rl : rt->rank == rl ? r0 : -1;
    rt->inputs = pp_malloc((size_t)rt->B * rt->T * sizeof(int));
    rt->targets = pp_malloc((size_t)rt->B * rt->T * sizeof(int));
    return open_data(rt, err, errlen);
}

void runtime_free(Runtime *rt) {
    for (int c = 0; c < rt->model.nchunks; c++) {
        free(rt->slots[c]);
        for (int i = 0; i < rt->nrbufs[c]; i++) free(rt->rbufs[c][i].buf);
        free(rt->rbufs[c]);
    }
    model_free(&rt->model);
    sched_free(&rt->sched);
    sched_free(&rt->fwd);
    data_close(&rt->train);
    data_close(&rt->val);
    free(rt->inputs), free(rt->targets), free(rt->opt_m), free(rt->opt_v);
    memset(rt, 0, sizeof *rt);
}

void runtime_measure(Runtime *rt) {
    rt->min_step_s = rt->measured == 0 || rt->step_s < rt->min_step_s ? rt->step_s : rt->min_step_s;
    rt->measured++;
    rt->sum_step_s += rt->step_s;
    rt->sum_pipe_s += rt->pipe_s;
    rt->sum_busy_s += rt->busy_s;
    for (int s = 0; s < rt->S; s++) rt->sum_f[s] += rt->cur_f[s], rt->sum_b[s] += rt->cur_b[s];
}

int runtime_report(Runtime *rt, char *err, size_t errlen) {
    int n = rt->measured, S = rt->S, M = rt->M;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (n == 0) return PP_OK;
    double step = rt->sum_step_s / n, busy = rt->sum_busy_s / n;
    printf("rank %d: per step %.1f ms (fastest %.1f, pipeline %.1f ms), busy %.1f ms, idle (bubble) %.1f ms = %.1f%% "
           "| peak RSS %.1f MB\n", rt->rank, step * 1e3, rt->min_step_s * 1e3, rt->sum_pipe_s / n * 1e3, busy * 1e3,
           (step - busy) * 1e3, 100.0 * (step - busy) / step, ru.ru_maxrss / 1024.0);
    /* mean per-action times of every stage (each rank contributes its own), and the
     * slowest rank's pipeline time: the step ends when the last rank finishes */
    double *v = pp_calloc(2 * S + 1, sizeof(double));
    for (int s = 0; s < S; s++)
        if (rt->chunk_of[s] >= 0) v[s] = rt->sum_f[s] / ((double)n * M), v[S + s] = rt->sum_b[s] / ((double)n * M);
    v[2 * S] = rt->rank == 0 ? rt->sum_pipe_s / n : 0.0; /* rank 0 starts first and ends last */
    int rc = comm_allreduce_sum_f64(rt->comm, v, 2 * S + 1);
    if (rc != PP_OK) {
        free(v);
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the timing report: %s", comm_error(rt->comm));
    }
    if (rt->rank == 0) {
        SimCosts c;
        SimResult res;
        char serr[PP_ERR_MAX];
        sim_costs_default(&c);
        c.F_stage = v;
        c.B_stage = v + S;
        c.X = 0.0;
        if (sim_run(&rt->sched, &c, &res, serr, sizeof serr, NULL) == PP_OK) {
            const char *formula;
            double cf = sched_bubble_closed_form(&rt->sched, &formula);
            printf("pipeline: simulated makespan %.1f ms from the measured F/B times, measured %.1f ms: "
                   "efficiency %.1f%%; simulated bubble %.1f%%", res.makespan * 1e3, v[2 * S] * 1e3,
                   100.0 * res.makespan / v[2 * S], 100.0 * res.bubble);
            if (cf >= 0) printf(" (closed form %s = %.1f%%)", formula, 100.0 * cf);
            printf("\n");
            sim_result_free(&res);
        }
    }
    free(v);
    return PP_OK;
}

int runtime_check_tied(Runtime *rt, char *err, size_t errlen) {
    /* a 32-bit FNV-1a hash of each copy, exact in a double: rank of stage 0 adds it, the
     * rank of stage S-1 subtracts it, every other rank adds 0 */
    double h = 0.0;
    if (rt->tied_peer >= 0) {
        const unsigned char *p = (const unsigned char *)rt->model.wte;
        size_t n = (size_t)rt->model.d.Vp * rt->model.d.C * sizeof(float);
        uint32_t x = 2166136261u;
        for (size_t i = 0; i < n; i++) x = (x ^ p[i]) * 16777619u;
        h = rt->chunk_of[0] >= 0 ? (double)x : -(double)x;
    }
    if (comm_allreduce_sum_f64(rt->comm, &h, 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the tied embedding check: %s", comm_error(rt->comm));
    if (h != 0.0)
        return pp_errf(err, errlen, PP_ERUNTIME, "the tied embedding copies on the first and the last stage's ranks "
                       "differ (a bug: please report it with the config)");
    if (rt->tied_peer >= 0 && rt->chunk_of[0] >= 0)
        printf("tied embeddings: the copies on ranks %d and %d are bitwise identical\n", rt->rank, rt->tied_peer);
    return PP_OK;
}
