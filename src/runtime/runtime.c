/* runtime.c — the pipeline interpreter: one rank's stages, its lowered action list,
 * and the per-step synchronisation (tied embeddings, gradient norm, loss). */
#include "runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_load.h"
#include "comm/comm_nccl_load.h"
#include "comm/comm_select.h"
#include "backend/optim.h"
#include "sched/sched_sim.h"

enum { KIND_ACT = 1, KIND_GRAD = 2, KIND_VAL_ACT = 3 }; /* 4: runtime_dp.c's ring messages */
static const char *const kind_names[] = {"?", "activation", "gradient", "validation activation",
                                         "gradient all-reduce"};
static const char *const kind_short[] = {"?", "act", "grad", "val act", "dp"}; /* flight records */

/* ---- slot pool ----------------------------------------------------------------
 * [Note: runtime slots] The pool of each local chunk has sched_peak_inflight slots and
 * sched_peak_recv receive buffers; an action takes a slot at the first F of (stage, m)
 * and gives back the slots sched_action_frees names once it has run ([Note: activation
 * slots] in sched.h): the interpreter and the pool size read the same rule. A given-back
 * slot may still be read by a posted send; taking it again first waits for that send.
 * A RECV_F, which the lowering may place well before its F, receives into a small
 * [N,C] buffer of the model that F then swaps into the slot it takes
 * (model_take_input): a received microbatch does not hold a whole slot of activations
 * while it waits. */

static int wait_req(Runtime *rt, CommReq **req, const char *what, int stage, int mb, int step,
                    char *err, size_t errlen) {
    if (!*req) return PP_OK;
    double t0 = trace_now_us();
    uint64_t fl = flight_wait(rt->flight, *req, what, step, stage, mb);
    int ring_failed = 0; /* the replicas' ring advances while this rank waits (runtime_dp.c) */
    int rc = rt->dp.active ? dp_wait(rt, rt->comm, *req, &ring_failed, err, errlen)
                           : comm_wait(rt->comm, *req);
    *req = NULL;
    flight_end(rt->flight, fl, rc == PP_OK, ring_failed ? 0 : rt->comm->done_at);
    if (ring_failed) return rc;
    double t1 = trace_now_us();
    rt->wait_s += (t1 - t0) * 1e-6;
    if (rt->trace) trace_add(rt->trace, what, "wait", t0, t1, stage, mb, step);
    if (rc != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "while waiting for %s of stage %d microbatch %d at step %d: %s", what, stage,
                       mb, step, comm_error(rt->comm));
    return PP_OK;
}

static int slot_find(Runtime *rt, int c, int mb) {
    for (int i = 0; i < rt->model.chunks[c].nslots; i++)
        if (rt->slots[c][i].busy && rt->slots[c][i].mb == mb) return i;
    return -1;
}

/* A free activation block ([Note: activation blocks] in model.c) for a slot: keep 1,
 * one that keeps everything; 0, one that drops what the recompute drops; -1 (a
 * forward-only pass, or nothing recomputes), any. Its last holder's send of its output
 * is waited for first, unless that slot was taken again since (which waited). */
static int block_take(Runtime *rt, int keep, int stage, int mb, int step, int *out, char *err,
                      size_t errlen) {
    int nk = rt->model.nblocks_keep, n = rt->model.nblocks;
    for (int pass = 0; pass < (keep < 0 ? 2 : 1); pass++) { /* any: the recomputing ones first */
        int kept = keep == 1 || pass == 1, lo = kept ? 0 : nk, hi = kept ? nk : n;
        for (int b = lo; b < hi; b++) {
            ActBlock *k = &rt->blocks[b];
            if (k->busy) continue;
            SlotState *last = k->gen ? &rt->slots[k->c][k->i] : NULL;
            if (last && last->gen == k->gen) {
                int rc = wait_req(rt, &last->send[0], "an earlier send",
                                  rt->model.chunks[k->c].stage, last->mb, step, err, errlen);
                if (rc) return rc;
            }
            *out = b;
            return PP_OK;
        }
    }
    PP_DIE("activation blocks of rank %d exhausted (%d %sblocks) at stage %d microbatch %d: the "
           "pool size does not match the schedule (a bug)",
           rt->lay.rank, keep < 0 ? n : keep ? nk : n - nk,
           keep < 0 ? "" : keep ? "keep-all " : "recomputing ", stage, mb);
}

/* A free slot of chunk c for microbatch mb, with a block of kind keep (block_take). */
static int slot_acquire(Runtime *rt, int c, int mb, int keep, int step, int *out, char *err,
                        size_t errlen) {
    const Chunk *ck = &rt->model.chunks[c];
    int stage = ck->stage, b, rc;
    for (int i = 0; i < ck->nslots; i++) {
        SlotState *st = &rt->slots[c][i];
        if (st->busy) continue;
        for (int k = 0; k < 2; k++)
            if ((rc = wait_req(rt, &st->send[k], "an earlier send", stage, st->mb, step, err,
                               errlen)))
                return rc;
        if ((rc = block_take(rt, keep, stage, mb, step, &b, err, errlen))) return rc;
        st->busy = 1;
        st->mb = mb;
        st->block = b;
        rt->blocks[b] = (ActBlock){1, c, i, ++st->gen};
        model_slot_attach(&rt->model, c, i, b);
        *out = i;
        return PP_OK;
    }
    PP_DIE("activation pool of stage %d exhausted (%d slots) at microbatch %d: the pool size "
           "does not match the schedule (a bug)", stage, ck->nslots, mb);
}

static void slot_release(Runtime *rt, int c, int i) {
    rt->slots[c][i].busy = 0;
    rt->blocks[rt->slots[c][i].block].busy = 0; /* its last holder stays recorded */
}

/* Index of chunk c's receive buffer holding microbatch mb (-1: a free one), or -1. */
static int recv_find(Runtime *rt, int c, int mb) {
    for (int i = 0; i < rt->model.chunks[c].nrecv; i++)
        if (rt->rbufs[c][i].mb == mb) return i;
    return -1;
}

/* World rank that holds `stage` in this rank's replica of the pipeline. */
static int stage_peer(const Runtime *rt, int stage) {
    return layout_rank_of(&rt->lay, sched_stage_rank(&rt->sched, stage), rt->lay.dp);
}

/* ---- host staging ---------------------------------------------------------------
 * [Note: host staging] A device backend's memory (be->device_memory) is not the host's,
 * and the socket transport reads and writes host memory. So on such a backend every
 * activation or gradient this rank sends is copied into a pinned host buffer first (the
 * host waits for that copy), every receive lands in one and is copied to the device
 * once it is complete, and the tied embedding's all-reduce runs on a host copy. Each
 * buffer belongs to one direction of one slot (SlotState.host: the output's send, the
 * input gradient's send, the output gradient's receive) or to one receive buffer
 * (RecvBuf.host), so it is refilled only after the send or receive that used it has been
 * waited for. This is how several ranks share one GPU (NCCL refuses two ranks on one
 * device); the NCCL transport replaces it where each rank has its own GPU: a Comm that
 * moves device memory itself (Comm.device_memory) gets the device buffers, and no
 * buffer exists ([Note: transport selection] in comm_select.h). On the CPU backend no
 * buffer exists and the transport uses the device memory itself. The data-parallel
 * ring keeps its host copy on every transport: it adds on the host (runtime_dp.c). */

enum { HOST_SEND_OUT = 0, HOST_SEND_DIN = 1, HOST_RECV_DOUT = 2 };

static void *host_alloc(Runtime *rt, size_t bytes) {
    const Backend *be = rt->model.be;
    rt->staging_bytes += bytes;
    return be->host_alloc ? be->host_alloc(be, bytes) : pp_malloc(bytes);
}

static void host_free(const Backend *be, void *p) {
    if (be->host_free) be->host_free(be, p);
    else free(p);
}

/* The buffer to hand the transport for sending device buffer dev: dev itself, or its
 * host copy (made now: the host waits for it). */
static void *stage_send(Runtime *rt, void *host, const void *dev, size_t bytes) {
    const Backend *be = rt->model.be;
    if (!host) return (void *)dev;
    be->to_host(be, host, dev, bytes);
    be->wait(be);
    return host;
}

/* A receive that landed in host (when staged) goes to device buffer dev; the host waits
 * for the copy, so the buffer may take the next receive. */
static void stage_received(Runtime *rt, const void *host, void *dev, size_t bytes) {
    const Backend *be = rt->model.be;
    if (!host) return;
    be->to_device(be, dev, host, bytes);
    be->wait(be);
}

/* Allocate the staging buffers of the chunks that talk to another rank, and of the tied
 * all-reduce; nothing on a host-memory backend. */
static void staging_init(Runtime *rt) {
    const Backend *be = rt->model.be;
    if (!be->device_memory || rt->comm->device_memory) return;
    /* an activation at the residual type, its gradient fp32 ([Note: residual stream type]) */
    size_t act = model_boundary_bytes(&rt->model), grad = model_boundary_grad_bytes(&rt->model);
    for (int c = 0; c < rt->model.nchunks; c++) {
        const Chunk *ck = &rt->model.chunks[c];
        int s = ck->stage, prev = s > 0 && rt->chunk_of[s - 1] < 0;
        int next = s < rt->S - 1 && rt->chunk_of[s + 1] < 0;
        for (int i = 0; i < ck->nslots; i++) {
            void **h = rt->slots[c][i].host;
            if (next) {
                h[HOST_SEND_OUT] = host_alloc(rt, act);
                h[HOST_RECV_DOUT] = host_alloc(rt, grad);
            }
            if (prev) h[HOST_SEND_DIN] = host_alloc(rt, grad);
        }
        for (int r = 0; r < ck->nrecv && prev; r++) rt->rbufs[c][r].host = host_alloc(rt, act);
    }
    if (rt->tied)
        rt->tied_host = host_alloc(rt, (size_t)rt->model.d.Vp * rt->model.d.C * sizeof(float));
}

static void staging_free(Runtime *rt) {
    const Backend *be = rt->model.be;
    for (int c = 0; c < rt->model.nchunks && be && be->device_memory; c++) {
        for (int i = 0; rt->slots[c] && i < rt->model.chunks[c].nslots; i++)
            for (int k = 0; k < 3; k++)
                if (rt->slots[c][i].host[k]) host_free(be, rt->slots[c][i].host[k]);
        for (int r = 0; rt->rbufs[c] && r < rt->model.chunks[c].nrecv; r++)
            if (rt->rbufs[c][r].host) host_free(be, rt->rbufs[c][r].host);
    }
    if (rt->tied_host) host_free(be, rt->tied_host);
}

/* The tied embedding gradient's all-reduce, on the host copy when staged. */
static int allreduce_tied(Runtime *rt, int step) {
    const Backend *be = rt->model.be;
    size_t n = (size_t)rt->model.d.Vp * rt->model.d.C;
    float *buf = stage_send(rt, rt->tied_host, rt->model.dwte, n * sizeof(float));
    uint64_t fl = flight_coll(rt->flight, "allreduce tied wte gradient", step);
    int rc = comm_allreduce_sum_f32(rt->tied, buf, n);
    flight_end(rt->flight, fl, rc == PP_OK, 0);
    if (rc == PP_OK && rt->tied_host)
        be->to_device(be, rt->model.dwte, rt->tied_host, n * sizeof(float));
    return rc;
}

/* ---- the interpreter ---------------------------------------------------------- */

typedef struct {
    int step, fwd_only, kind_act;
    int dp;      /* advance the replicas' gradient all-reduce after each action (runtime_dp.c) */
    float dloss;
} StepCtx;

static CommTag tag_of(int step, int stage, int mb, int kind) {
    CommTag t = {.step = step, .stage = stage, .mb = mb, .kind = kind};
    return t;
}

/* The slot of (stage, mb) on this rank; dies if it is not held (schedule bug). */
static int held_slot(Runtime *rt, int c, int mb) {
    int i = slot_find(rt, c, mb);
    if (i < 0)
        PP_DIE("stage %d has no activations for microbatch %d (schedule bug)",
               rt->model.chunks[c].stage, mb);
    return i;
}

/* [Note: traced device time] On a device backend the ops only enqueue work, so the time
 * around model_forward is the host's, not the GPU's. Under --trace the runtime therefore
 * waits for the device after each compute action: the trace (and `pptrain schedule
 * --costs-from`) then shows what each action costs on the device, at the price of the
 * overlap of host and device in a traced run. Untraced runs never wait here. */
static double compute_end(const Runtime *rt) {
    const Backend *be = rt->model.be;
    if (rt->trace && be->device_memory) be->wait(be);
    return trace_now_us();
}

static int exec_forward(Runtime *rt, const Action *a, StepCtx *x, char *err, size_t errlen) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], i = slot_find(rt, c, m), rc;
    const Backend *be = rt->model.be;
    size_t ntok = (size_t)rt->Bmb * rt->T, rows = (size_t)m * ntok;
    size_t act = model_boundary_bytes(&rt->model);
    /* the schedule's mark says whether it keeps everything ([Note: schedule-aware recompute]) */
    int keep = x->fwd_only || rt->model.nblocks_keep == rt->model.nblocks
                   ? -1
                   : rt->sched.keep[(size_t)s * rt->M + m];
    if (i < 0 && (rc = slot_acquire(rt, c, m, keep, x->step, &i, err, errlen))) return rc;
    ActSlot *as = &rt->model.chunks[c].slots[i];
    if (s > 0 && rt->chunk_of[s - 1] < 0) { /* take over the received input */
        int r = recv_find(rt, c, m);
        if (r < 0) PP_DIE("stage %d: no receive posted for microbatch %d (schedule bug)", s, m);
        if ((rc = wait_req(rt, &rt->rbufs[c][r].req, "recv activation", s, m, x->step, err,
                           errlen)))
            return rc;
        stage_received(rt, rt->rbufs[c][r].host, model_recv_buffer(&rt->model, c, r), act);
        model_take_input(&rt->model, c, i, r);
        rt->rbufs[c][r].mb = -1;
    }
    /* the host batch stays put until the next wait (local_sums'; load_batch waits if none) */
    if (s == 0) be->to_device(be, as->tokens, rt->inputs + rows, ntok * sizeof(int));
    if (s == rt->S - 1) be->to_device(be, as->targets, rt->targets + rows, ntok * sizeof(int));
    rt->uploads_pending |= s == 0 || s == rt->S - 1;
    if (s > 0 && rt->chunk_of[s - 1] >= 0) { /* local handover from stage s-1 */
        int pc = rt->chunk_of[s - 1], pi = held_slot(rt, pc, m);
        be->copy(be, as->input, model_chunk_output(&rt->model, pc, pi), act);
    }
    double t0 = trace_now_us();
    model_forward(&rt->model, c, i, x->dloss, !x->fwd_only, &rt->loss_dev[m]);
    double t1 = compute_end(rt);
    rt->busy_s += (t1 - t0) * 1e-6;
    if (!x->fwd_only) rt->cur_f[s] += (t1 - t0) * 1e-6;
    if (rt->trace) trace_add(rt->trace, "F", "compute", t0, t1, s, m, x->step);
    return PP_OK;
}

/* Chunk c's W state set holding microbatch mb ([Note: W state]; mb -1: a free one);
 * dies if there is none (the pool size does not match the schedule: a bug). */
static int wset_find(Runtime *rt, int c, int mb) {
    for (int w = 0; w < rt->model.chunks[c].nwstate; w++)
        if (rt->wsets[c][w] == mb) return w;
    PP_DIE("stage %d: no W state set %s microbatch %d (%d sets; a bug)", rt->model.chunks[c].stage,
           mb < 0 ? "free for" : "holds", mb, rt->model.chunks[c].nwstate);
}

/* B, or I: the input half of a split backward, which keeps what W needs in a W state
 * set until W(s,m) (exec_weight). */
static int exec_backward(Runtime *rt, const Action *a, StepCtx *x, char *err, size_t errlen) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], i = held_slot(rt, c, m), rc;
    size_t grad = model_boundary_grad_bytes(&rt->model);
    SlotState *st = &rt->slots[c][i];
    ActSlot *as = &rt->model.chunks[c].slots[i];
    if ((rc = wait_req(rt, &st->recv, "recv gradient", s, m, x->step, err, errlen))) return rc;
    if (s < rt->S - 1 && rt->chunk_of[s + 1] < 0)
        stage_received(rt, st->host[HOST_RECV_DOUT], as->grad, grad);
    double t0 = trace_now_us();
    if (a->type == ACT_I) {
        int w = wset_find(rt, c, -1);
        rt->wsets[c][w] = m;
        model_backward_input(&rt->model, c, i, w);
    } else {
        model_backward(&rt->model, c, i);
    }
    double t1 = compute_end(rt);
    rt->busy_s += (t1 - t0) * 1e-6;
    rt->cur_b[s] += (t1 - t0) * 1e-6;
    if (rt->trace) trace_add(rt->trace, sched_type_name(a->type), "compute", t0, t1, s, m, x->step);
    if (s > 0 && rt->chunk_of[s - 1] >= 0) { /* local handover: push d(input) to stage s-1 */
        int pc = rt->chunk_of[s - 1];
        const Backend *be = rt->model.be;
        be->copy(be, rt->model.chunks[pc].slots[held_slot(rt, pc, m)].grad, as->grad, grad);
    }
    return PP_OK;
}

/* W: the weight half of a split backward; gives its W state set back. */
static void exec_weight(Runtime *rt, const Action *a, StepCtx *x) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], w = wset_find(rt, c, m);
    double t0 = trace_now_us();
    model_backward_weight(&rt->model, c, held_slot(rt, c, m), w);
    double t1 = compute_end(rt);
    rt->wsets[c][w] = -1;
    rt->busy_s += (t1 - t0) * 1e-6;
    rt->cur_w[s] += (t1 - t0) * 1e-6;
    if (rt->trace) trace_add(rt->trace, "W", "compute", t0, t1, s, m, x->step);
}

static int exec_transfer(Runtime *rt, const Action *a, StepCtx *x, char *err, size_t errlen) {
    int s = a->stage, m = a->mb, c = rt->chunk_of[s], i, rc;
    /* an activation at the residual type, a gradient fp32 ([Note: residual stream type]) */
    size_t bytes = a->type == ACT_SEND_F || a->type == ACT_RECV_F
                       ? model_boundary_bytes(&rt->model)
                       : model_boundary_grad_bytes(&rt->model);
    Comm *cm = rt->comm;
    double t0 = trace_now_us();
    CommTag tag;
    CommReq **rq; /* its request, and its peer, for the flight recorder */
    int peer;
    const char *what;
    switch (a->type) {
    case ACT_SEND_F:
        i = held_slot(rt, c, m);
        tag = tag_of(x->step, s, m, x->kind_act);
        peer = stage_peer(rt, s + 1);
        rq = &rt->slots[c][i].send[0];
        rc = comm_isend(cm, peer, &tag,
                        stage_send(rt, rt->slots[c][i].host[HOST_SEND_OUT],
                                   model_chunk_output(&rt->model, c, i), bytes),
                        bytes, rq);
        what = "send activation";
        break;
    case ACT_RECV_F: {
        int r = recv_find(rt, c, -1);
        if (r < 0)
            PP_DIE("stage %d: all %d receive buffers busy at microbatch %d (a bug)", s,
                   rt->model.chunks[c].nrecv, m);
        rt->rbufs[c][r].mb = m;
        tag = tag_of(x->step, s - 1, m, x->kind_act);
        peer = stage_peer(rt, s - 1);
        rq = &rt->rbufs[c][r].req;
        rc = comm_irecv(cm, peer, &tag,
                        rt->rbufs[c][r].host ? rt->rbufs[c][r].host
                                             : model_recv_buffer(&rt->model, c, r),
                        bytes, rq);
        what = "post recv activation";
        break;
    }
    case ACT_SEND_B:
        i = held_slot(rt, c, m);
        tag = tag_of(x->step, s, m, KIND_GRAD);
        peer = stage_peer(rt, s - 1);
        rq = &rt->slots[c][i].send[1];
        rc = comm_isend(cm, peer, &tag,
                        stage_send(rt, rt->slots[c][i].host[HOST_SEND_DIN],
                                   rt->model.chunks[c].slots[i].grad, bytes),
                        bytes, rq);
        what = "send gradient";
        break;
    case ACT_RECV_B:
        i = held_slot(rt, c, m);
        tag = tag_of(x->step, s + 1, m, KIND_GRAD);
        peer = stage_peer(rt, s + 1);
        rq = &rt->slots[c][i].recv;
        rc = comm_irecv(cm, peer, &tag,
                        rt->slots[c][i].host[HOST_RECV_DOUT] ? rt->slots[c][i].host[HOST_RECV_DOUT]
                                                             : rt->model.chunks[c].slots[i].grad,
                        bytes, rq);
        what = "post recv gradient";
        break;
    default:
        PP_DIE("action type %d is not executable by this runtime", a->type);
    }
    if (rt->trace) trace_add(rt->trace, what, "comm", t0, trace_now_us(), s, m, x->step);
    int send = a->type == ACT_SEND_F || a->type == ACT_SEND_B;
    int to = a->type == ACT_SEND_F || a->type == ACT_RECV_B ? s + 1 : s - 1; /* the other stage */
    flight_post(rt->flight, send ? FLIGHT_SEND : FLIGHT_RECV, kind_short[tag.kind], x->step, s, to,
                m, peer, bytes, *rq, rc == PP_OK);
    if (rc != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s of stage %d microbatch %d at step %d: %s",
                       what, s, m, x->step, comm_error(cm));
    return PP_OK;
}

/* Give back the slots action a frees ([Note: runtime slots]). */
static void release_after(Runtime *rt, const Schedule *sc, const Action *a) {
    int stages[2], n = sched_action_frees(sc, *a, stages);
    for (int k = 0; k < n; k++) {
        int c = rt->chunk_of[stages[k]];
        slot_release(rt, c, held_slot(rt, c, a->mb));
    }
}

/* Run one lowered action list; then wait until every send has left. */
static int run_actions(Runtime *rt, const Schedule *sc, StepCtx *x, char *err, size_t errlen) {
    int rc = PP_OK;
    int pp = rt->lay.pp;
    /* [Note: held weights]: between two action lists only update() writes the parameters,
     * through the backend's optimizer entries, but for ZeRO-1's gather */
    model_hold_weights(&rt->model, rt->dp.zero ? MODEL_HOLD : MODEL_HOLD_KEPT);
    for (int k = 0; k < sc->len[pp] && rc == PP_OK; k++) {
        const Action *a = &sc->acts[pp][k];
        if (rt->action_hook) rt->action_hook(rt->hook_ctx, sc, pp, k, 0);
        const char *name = x->fwd_only ? "val F" : sched_type_name(a->type);
        uint64_t fl = sched_is_compute(a->type)
                          ? flight_compute(rt->flight, name, x->step, a->stage, a->mb)
                          : 0;
        switch (a->type) {
        case ACT_F: rc = exec_forward(rt, a, x, err, errlen); break;
        case ACT_B:
        case ACT_I: rc = exec_backward(rt, a, x, err, errlen); break;
        case ACT_W: exec_weight(rt, a, x); break;
        default: rc = exec_transfer(rt, a, x, err, errlen); break;
        }
        flight_end(rt->flight, fl, rc == PP_OK, 0);
        if (rc == PP_OK) release_after(rt, sc, a);
        if (rc == PP_OK && x->dp) rc = dp_after_action(rt, k, err, errlen);
        if (rt->action_hook) rt->action_hook(rt->hook_ctx, sc, pp, k, 1);
    }
    model_hold_weights(&rt->model, 0);
    for (int c = 0; c < rt->model.nchunks && rc == PP_OK; c++) {
        /* every F ran */
        for (int i = 0; i < rt->model.chunks[c].nrecv; i++) PP_CHECK(rt->rbufs[c][i].mb < 0);
        /* every W ran */
        for (int w = 0; w < rt->model.chunks[c].nwstate; w++) PP_CHECK(rt->wsets[c][w] < 0);
        for (int i = 0; i < rt->model.chunks[c].nslots && rc == PP_OK; i++) {
            SlotState *st = &rt->slots[c][i];
            PP_CHECK(!st->busy && !st->recv); /* the schedule released everything */
            for (int k = 0; k < 2 && rc == PP_OK; k++)
                rc = wait_req(rt, &st->send[k], "a send to complete", rt->model.chunks[c].stage,
                              st->mb, x->step, err, errlen);
        }
    }
    return rc;
}

/* [Note: a batch that cannot be read] A token file changed under the run fails the read
 * of a batch ([Note: checked batch reads] in data.c), on the ranks of the first and last
 * stage only, which read it. Those ranks do not stop there: the others would wait for
 * them until the timeout and then blame them as lost. They run the step (or the
 * validation pass) on a stand-in batch of token 0, which any model can read, and say so
 * in the all-reduce that ends it anyway (one more double: no extra message), so that
 * every rank learns it at the same point and fails the same way, before the optimizer
 * has changed a weight. The stand-in batch's loss is a loss of the weights all the same:
 * main.c saves them when it is finite, as the checkpoint of the last good step
 * ([Note: diverged weights] in main.c), and the run ends with exit 1. */

/* Batch n of d, this replica's share of it first: sequences [dp, dp + 1) x local_batch
 * of the global batch ([Note: data parallel] in runtime_dp.c). PP_OK, or PP_ERUNTIME
 * with a message when it could not be read: then the batch is token 0 throughout. */
static int load_batch(Runtime *rt, DataStream *d, long n, char *err, size_t errlen) {
    if (rt->chunk_of[0] < 0 && rt->chunk_of[rt->S - 1] < 0) return PP_OK;
    const Backend *be = rt->model.be;
    char news[PP_ERR_MAX];
    /* The last uploads read these (pinned) buffers until done. A step's own wait
     * (local_sums) has normally seen them done: then the batch is read while the device
     * still runs the optimizer's update, instead of after it. */
    if (be->device_memory && rt->uploads_pending) be->wait(be);
    rt->uploads_pending = 0;
    int rc = data_stream_batch(d, n, rt->inputs, rt->targets, err, errlen);
    /* a shard reached and validated ([Note: shard streams] in data_stream.c) */
    if (data_stream_news(d, news, sizeof news) && rt->lay.rank == 0) printf("%s\n", news);
    size_t share = (size_t)rt->local_batch * rt->T, from = (size_t)rt->lay.dp * share;
    if (from) {
        memmove(rt->inputs, rt->inputs + from, share * sizeof(int));
        memmove(rt->targets, rt->targets + from, share * sizeof(int));
    }
    return rc;
}

/* After the all-reduce in which `failed` ranks said that they could not read their batch
 * of the data files `paths` (data.train's or data.val's; this rank among them if mine is
 * PP_ERUNTIME, with its message in why): the error of every rank, "<when>: <what>". */
static int batch_failed(Runtime *rt, double failed, int mine, const char *why, const char *paths,
                        const char *when, char *err, size_t errlen) {
    char files[2 * PP_PATH_MAX + 64];
    rt->data_failed = 1;
    if (mine != PP_OK) return pp_errf(err, errlen, PP_ERUNTIME, "%s: %s", when, why);
    data_stream_patterns_text(paths, files, sizeof files);
    return pp_errf(err, errlen, PP_ERUNTIME,
                   "%s: %d rank(s) could not read their batch of %s (see their message)", when,
                   (int)failed, files);
}

int runtime_tied_replica(const Runtime *rt, const ParamTensor *t) {
    return rt->tied_peer >= 0 && rt->chunk_of[0] < 0 && !strcmp(t->name, "wte");
}

/* This rank's step sums, read back from the device in one wait: the loss (the sum over
 * its last stage's microbatches, in microbatch order, so that it does not depend on the
 * schedule) and the squared gradients, each tensor's sum added in tensor order, counting
 * the tied wte once over all ranks (on the rank of stage 0) and every tensor once over
 * the replicas, which hold the same sums (replica 0; with ZeRO-1 each replica its own
 * tensors). */
static void local_sums(Runtime *rt, int want_sumsq, double *loss, double *sumsq) {
    const Model *m = &rt->model;
    const Backend *be = m->be;
    int last = rt->chunk_of[rt->S - 1] >= 0;
    if (want_sumsq) { /* one call for every tensor ([Note: many tensors] in backend.h) */
        be->sumsq_many(be, rt->sumsq_dev, rt->sum_x, rt->sum_n, m->ntensors);
        be->to_host(be, rt->sumsq_host, rt->sumsq_dev, (size_t)m->ntensors * sizeof(double));
    }
    if (last) be->to_host(be, rt->loss_host, rt->loss_dev, (size_t)rt->M * sizeof(double));
    be->wait(be);
    rt->uploads_pending = 0; /* the batch's uploads are done too */
    *loss = 0.0;
    for (int k = 0; last && k < rt->M; k++) *loss += rt->loss_host[k];
    *sumsq = 0.0;
    for (int i = 0; want_sumsq && i < m->ntensors; i++)
        if (!runtime_tied_replica(rt, &m->tensors[i]) && dp_counts(rt, i, DP_NORM))
            *sumsq += rt->sumsq_host[i];
}

/* The tensors this rank updates (with ZeRO-1: those whose state this replica holds,
 * [Note: ZeRO-1] in runtime_dp.c), each with its state and weight decay: the list every
 * step's update passes ([Note: many tensors] in backend.h), made once after dp_init. */
static void update_list(Runtime *rt) {
    Model *m = &rt->model;
    rt->nupd = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *p = &m->tensors[i];
        if (rt->dp.zero && rt->dp.zoff[i] == DP_NOT_HELD) continue;
        rt->upd[rt->nupd++] = (PPOptTensor){m->params + p->offset,
                                            m->grads + p->offset,
                                            dp_opt_state(rt, i, 0),
                                            dp_opt_state(rt, i, 1),
                                            p->numel,
                                            optim_weight_decay(rt->cfg, p->decay)};
    }
}

/* One optimizer update of every tensor of this rank's list (update_list). */
static void update(Runtime *rt, float lr, float scale, int t) {
    optim_update_many(rt->cfg, rt->model.be, rt->upd, rt->nupd, lr, scale, t);
}

int runtime_step(Runtime *rt, int step, double *ctl, int nctl, StepResult *res, char *err,
                 size_t errlen) {
    const Config *cfg = rt->cfg;
    Model *m = &rt->model;
    Comm *cm = rt->comm;
    double t0 = pp_now();
    rt->busy_s = rt->wait_s = 0;
    if (rt->steps_run == 0) { /* this run's first step: the summary counts from here */
        rt->first_step = step;
        rt->t_first = t0;
    }
    memset(rt->cur_f, 0, sizeof rt->cur_f);
    memset(rt->cur_b, 0, sizeof rt->cur_b);
    memset(rt->cur_w, 0, sizeof rt->cur_w);
    char why[PP_ERR_MAX], when[32];
    rt->data_failed = 0;
    /* [Note: a batch that cannot be read] */
    int read = load_batch(rt, &rt->train, step, why, sizeof why);
    model_zero_grads(m);
    dp_begin(rt, step + 1);
    StepCtx x = {.step = step + 1, .kind_act = KIND_ACT, .dp = rt->dp.group != NULL,
                 .dloss = 1.0f / ((float)rt->global_batch * rt->T)}; /* 1-based, as logged */
    long recomputed = m->recomputes;
    int rc = run_actions(rt, &rt->sched, &x, err, errlen);
    if (rc) return rc;
    if (m->recomputes - recomputed != rt->recompute_plan) /* the model obeyed the marks */
        PP_DIE("rank %d step %d: %ld layer recomputes, the schedule's marks say %ld (a bug)",
               rt->lay.rank, step + 1, m->recomputes - recomputed, rt->recompute_plan);
    rt->pipe_s = pp_now() - t0;
    double ts = trace_now_us();
    model_fold_tied_grad(m);
    uint64_t fl = rt->dp.group ? flight_coll(rt->flight, "replicas' gradient all-reduce", step + 1)
                               : 0;
    rc = dp_finish(rt, err, errlen);
    flight_end(rt->flight, fl, rc == PP_OK, 0);
    if (rc) return rc;
    /* [Note: tied embeddings] stage 0 and stage S-1 each hold wte; when they are on
     * different ranks, the pair's 2-rank group all-reduces the gradient (stage 0's part
     * first: the same bits on both), so the identical optimizer update keeps the copies
     * identical. On one rank the two chunks share a single tensor. */
    if (rt->tied && allreduce_tied(rt, step + 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "summing tied embedding gradients with rank %d: %s", rt->tied_peer,
                       comm_error(rt->tied));
    /* loss, squared gradient norm, ranks that could not read their batch, ctl */
    double red[3 + RUNTIME_MAX_CTL];
    local_sums(rt, 1, &red[0], &red[1]);
    red[2] = read != PP_OK;
    PP_CHECK(nctl >= 0 && nctl <= RUNTIME_MAX_CTL);
    for (int i = 0; i < nctl; i++) red[3 + i] = ctl[i];
    fl = flight_coll(rt->flight, "allreduce loss, grad norm", step + 1);
    rc = comm_allreduce_sum_f64(cm, red, 3 + nctl);
    flight_end(rt->flight, fl, rc == PP_OK, 0);
    if (rc != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "all-reduce of loss and gradient norm at step %d: %s", step, comm_error(cm));
    for (int i = 0; i < nctl; i++) ctl[i] = red[3 + i];
    res->loss = red[0] / ((double)rt->global_batch * rt->T);
    res->grad_norm = sqrt(red[1]);
    res->lr = optim_lr(cfg, step);
    if (red[2] > 0) {
        snprintf(when, sizeof when, "step %d", step + 1);
        return batch_failed(rt, red[2], read, why, cfg->train_path, when, err, errlen);
    }
    if (!isfinite(res->loss) || !isfinite(res->grad_norm))
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "step %d: loss %g, gradient norm %g are not finite: lower "
                       "train.optimizer.lr%s, or resume from an earlier checkpoint",
                       step + 1, res->loss, res->grad_norm,
                       cfg->grad_clip > 0 ? "" : " or enable train.grad_clip");
    update(rt, res->lr, optim_clip_scale(red[1], cfg->grad_clip), step + 1);
    if ((rc = dp_gather_params(rt, err, errlen))) return rc;
    if (rt->trace) trace_add(rt->trace, "optimizer", "compute", ts, trace_now_us(), -1, -1, step);
    rt->step_s = pp_now() - t0;
    rt->steps_run++;
    return PP_OK;
}

/* The mean loss of the current weights over batches first .. first + n - 1 of d
 * (forward only, all ranks together); `what` names it in an error, `path` is d's files
 * (the config's patterns). */
static int forward_loss(Runtime *rt, DataStream *d, const char *path, int first, int n,
                        const char *what, double *loss, char *err, size_t errlen) {
    double sum[2] = {0, 0}; /* the loss, ranks that could not read a batch */
    char why[PP_ERR_MAX], later[PP_ERR_MAX], when[128];
    int read = PP_OK;
    rt->data_failed = 0;
    for (int b = first; b < first + n; b++) {
        /* the first failure's message */
        int rc = load_batch(rt, d, b, read == PP_OK ? why : later, sizeof why);
        if (read == PP_OK) read = rc;
        StepCtx x = {.step = b, .fwd_only = 1, .kind_act = KIND_VAL_ACT};
        if ((rc = run_actions(rt, &rt->fwd, &x, err, errlen))) return rc;
        double batch_loss, unused;
        local_sums(rt, 0, &batch_loss, &unused);
        sum[0] += batch_loss;
    }
    sum[1] = read != PP_OK;
    uint64_t fl = flight_coll(rt->flight, "allreduce forward-only loss", first);
    int rc = comm_allreduce_sum_f64(rt->comm, sum, 2);
    flight_end(rt->flight, fl, rc == PP_OK, 0);
    if (rc != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of %s: %s", what,
                       comm_error(rt->comm));
    *loss = sum[0] / ((double)n * rt->global_batch * rt->T);
    if (sum[1] == 0) return PP_OK;
    snprintf(when, sizeof when, "while computing %s", what);
    return batch_failed(rt, sum[1], read, why, path, when, err, errlen);
}

int runtime_validate(Runtime *rt, int batches, double *loss, char *err, size_t errlen) {
    return forward_loss(rt, &rt->val, rt->cfg->val_path, 0, batches, "the validation loss", loss,
                        err, errlen);
}

int runtime_check_loss(Runtime *rt, int step, double *loss, char *err, size_t errlen) {
    return forward_loss(rt, &rt->train, rt->cfg->train_path, step, 1,
                        "the loss before a checkpoint", loss, err, errlen);
}

int runtime_check_finite(const Runtime *rt, int step, const char *what, double loss, char *err,
                         size_t errlen) {
    if (isfinite(loss)) return PP_OK;
    return pp_errf(err, errlen, PP_ERUNTIME,
                   "step %d: %s is %g, not finite: the weights diverged, and no checkpoint of them "
                   "is written; lower train.optimizer.lr%s, or resume from an earlier checkpoint",
                   step, what, loss, rt->cfg->grad_clip > 0 ? "" : " or enable train.grad_clip");
}

/* ---- build -------------------------------------------------------------------- */

static int open_data(Runtime *rt, char *err, size_t errlen) {
    const Config *c = rt->cfg;
    /* every rank takes part in validation (it is collective); only the ranks of the
     * first and last stage read tokens */
    rt->has_val = c->val_path[0] != 0 && c->val_every > 0;
    if (rt->chunk_of[0] < 0 && rt->chunk_of[rt->S - 1] < 0) return PP_OK;
    int rc = data_stream_open(&rt->train, "data.train", c->train_path, c->vocab_size, err, errlen);
    if (!rc) rc = data_stream_check_batch(&rt->train, rt->global_batch, rt->T, err, errlen);
    if (rc || !rt->has_val) return rc;
    rc = data_stream_open(&rt->val, "data.val", c->val_path, c->vocab_size, err, errlen);
    return rc ? rc : data_stream_check_batch(&rt->val, rt->global_batch, rt->T, err, errlen);
}

static int build_schedules(Runtime *rt, char *err, size_t errlen) {
    const Config *c = rt->cfg;
    int P = rt->lay.P;
    int rc = c->schedule_file[0]
                 ? sched_load_file(&rt->sched, c->schedule_file, P, rt->v, rt->M, err, errlen)
                 : sched_build(&rt->sched, c->schedule, P, rt->v, rt->M, err, errlen);
    return rc ? rc : sched_build_forward_only(&rt->fwd, &rt->sched, err, errlen);
}

int runtime_partition(const Config *cfg, const Schedule *sched, const double *measured,
                      int replicas, Partition *part, char *err, size_t errlen) {
    PartitionCosts pc;
    ModelDims d = model_dims(cfg);
    ArchCosts a;
    int S = sched->S, T = cfg->seq_len;
    int B = cfg->batch_size / (replicas * cfg->microbatches);
    if (S > PP_MAX_STAGES)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline: %d stages is out of range 1..%d", S,
                       PP_MAX_STAGES);
    model_arch_costs(&d, T, &a);
    if (!strcmp(cfg->balance, "parameters")) {
        partition_costs_parameters(&pc, S, &a);
    } else if (!strcmp(cfg->balance, "memory")) {
        /* a microbatch's activation bytes under the recompute mode ([Note: recompute] in
         * model.h), as the run's backend stores them ([Note: backend layout]) */
        BackendLayout lay;
        BackendSizes bs = model_backend_sizes(&d, B, T, 0);
        int mode = model_recompute_mode(cfg->recompute);
        int rc = backend_layout(cfg, &bs, &lay, err, errlen);
        if (rc != PP_OK) return rc;
        double N = (double)B * T, att = (double)backend_layout_att_floats(&lay, B, T, d.NH);
        size_t ob = pp_dtype_bytes(lay.operand), rb = pp_dtype_bytes(lay.residual);
        PartitionActBytes ab = {.layer = model_layer_act_bytes(&d, N, att, ob, rb,
                                                               mode < 0 ? 0 : mode),
                                .boundary = (double)model_boundary_elems(&d, B, T) *
                                            (rb + sizeof(float)), /* grad fp32 */
                                .head = model_head_act_bytes(&d, N, ob, rb),
                                .logits = (double)model_logits_bytes(&d, B, T,
                                                                     pp_dtype_bytes(lay.logits),
                                                                     lay.logits_chunk_rows)};
        int inflight[PP_MAX_STAGES];
        for (int s = 0; s < S; s++) inflight[s] = sched_peak_inflight(sched, s);
        partition_costs_memory(&pc, S, &a, optim_state_arrays(cfg), inflight, &ab);
    } else {
        partition_costs_time(&pc, S, &a, measured);
    }
    return partition_build_costs(part, cfg->split, cfg->n_layers, S, &pc, err, errlen);
}

void runtime_chunk_plan(const Schedule *train, const Schedule *fwd, const Partition *part, int pp,
                        int recompute, int rc_layers, ChunkSpec *specs, ChunkRecompute *rc,
                        int *nwstate, int nblocks[2]) {
    int S = train->S;
    for (int c = 0; c < train->v; c++) {
        int s = sched_rank_stage(train, pp, c);
        int pool = sched_peak_inflight(train, s), vpool = sched_peak_inflight(fwd, s);
        int nr = sched_peak_recv(train, s), nrv = sched_peak_recv(fwd, s);
        specs[c] = (ChunkSpec){s, part->l0[s], part->l1[s], s == 0, s == S - 1,
                               pool > vpool ? pool : vpool, nr > nrv ? nr : nrv};
        rc[c] = (ChunkRecompute){recompute, rc_layers};
        nwstate[c] = sched_peak_pending_w(train, s); /* [Note: W state] */
    }
    /* the blocks: the rank's peak over all its chunks together ([Note: activation blocks]
     * in model.c), split by the keep marks when something recomputes; a forward-only
     * pass takes blocks of either kind */
    int fwd_peak = sched_peak_inflight_rank(fwd, pp);
    if (recompute == PP_RECOMPUTE_NONE) {
        int train_peak = sched_peak_inflight_rank(train, pp);
        nblocks[1] = train_peak > fwd_peak ? train_peak : fwd_peak;
        nblocks[0] = 0;
    } else {
        nblocks[1] = sched_peak_inflight_rank_kept(train, pp, 1);
        int rest = sched_peak_inflight_rank_kept(train, pp, 0);
        nblocks[0] = rest > fwd_peak - nblocks[1] ? rest : fwd_peak - nblocks[1];
    }
}

/* The build report's lines on activation memory and recompute ([Note: memory plan]). */
static void report_memory(Runtime *rt) {
    const Model *m = &rt->model;
    if (m->wstate_bytes) { /* [Note: W state] */
        printf("rank %d: split backward: W state", rt->lay.rank);
        for (int c = 0; c < rt->v; c++)
            printf(" %d set%s on stage %d", m->chunks[c].nwstate,
                   m->chunks[c].nwstate == 1 ? "" : "s", m->chunks[c].stage);
        printf(" (the most Ws the schedule keeps pending) = %.1f MB\n", m->wstate_bytes / 1e6);
    }
    size_t p = m->nparams * sizeof(float);
    size_t g = p + (m->dhead_tied ? (size_t)m->d.Vp * m->d.C * sizeof(float) : 0);
    size_t act = m->act_bytes + m->work_bytes + m->recv_bytes + m->wstate_bytes;
    printf("rank %d: allocated: params %zu B, grads %zu B, optimizer %zu B, activations %zu B "
           "(slots %zu + recompute workspace %zu + receive %zu + W state %zu), recompute %s\n",
           rt->lay.rank, p, g, (size_t)m->nopt * p, act, m->act_bytes, m->work_bytes, m->recv_bytes,
           m->wstate_bytes, rt->cfg->recompute);
    printf("rank %d: activation blocks: %d that keep all + %d that recompute (the most "
           "microbatches its chunks hold at once together; slots per chunk:",
           rt->lay.rank, m->nblocks_keep, m->nblocks - m->nblocks_keep);
    for (int c = 0; c < rt->v; c++)
        printf(" %d on stage %d", m->chunks[c].nslots, m->chunks[c].stage);
    printf(")\n");
    if (model_recompute_mode(rt->cfg->recompute) == PP_RECOMPUTE_NONE) return;
    printf("rank %d: recompute: per step %ld layer recomputes, %ld skipped where the schedule runs "
           "a backward right after its forward\n",
           rt->lay.rank, rt->recompute_plan, rt->recompute_skipped);
}

/* Allocate this rank's model (its stages: slots and receive buffers sized by the
 * schedules, the recompute marks splitting each pool), the optimizer state and the
 * step's sums. */
static void build_model(Runtime *rt, const ModelDims *d, const Backend *be) {
    const Config *cfg = rt->cfg;
    ChunkSpec specs[PP_MAX_CHUNKS];
    ChunkRecompute rc[PP_MAX_CHUNKS];
    int nws[PP_MAX_CHUNKS], nblocks[2], mode = model_recompute_mode(cfg->recompute);
    PP_CHECK(mode >= 0); /* the config's choices */
    runtime_chunk_plan(&rt->sched, &rt->fwd, &rt->part, rt->lay.pp, mode, cfg->recompute_layers,
                       specs, rc, nws, nblocks);
    for (int s = 0; s < rt->S; s++) rt->chunk_of[s] = -1;
    for (int c = 0; c < rt->v; c++) rt->chunk_of[specs[c].stage] = c;
    model_init_recompute(&rt->model, d, specs, rc, rt->v, rt->Bmb, rt->T, be,
                         nblocks[1], nblocks[0]);
    rt->blocks = pp_calloc(nblocks[0] + nblocks[1] ? nblocks[0] + nblocks[1] : 1, sizeof(ActBlock));
    /* ZeRO-1 keeps the state of this replica's share only (runtime_dp.c) */
    model_init_optimizer(&rt->model,
                         cfg->optimizer_shard && rt->lay.D > 1 ? 0 : optim_state_arrays(cfg));
    rt->recompute_plan = rt->recompute_skipped = 0;
    for (int c = 0; c < rt->v; c++) {
        rt->slots[c] = pp_calloc(specs[c].nslots, sizeof(SlotState));
        for (int i = 0; i < specs[c].nslots; i++) {
            rt->slots[c][i].mb = -1;
            rt->slots[c][i].block = -1;
        }
        rt->rbufs[c] = pp_calloc(specs[c].nrecv ? specs[c].nrecv : 1, sizeof(RecvBuf));
        for (int i = 0; i < specs[c].nrecv; i++) rt->rbufs[c][i] = (RecvBuf){-1, NULL, NULL};
        model_init_wstate(&rt->model, c, nws[c]);
        rt->wsets[c] = pp_malloc((size_t)(nws[c] ? nws[c] : 1) * sizeof(int));
        for (int w = 0; w < nws[c]; w++) rt->wsets[c][w] = -1;
        /* each backward action recomputes nrc layers */
        int run, skipped, nrc = rt->model.chunks[c].nrc;
        sched_recompute_count(&rt->sched, specs[c].stage, &run, &skipped);
        rt->recompute_plan += (long)run * nrc;
        rt->recompute_skipped += (long)skipped * nrc;
    }
    report_memory(rt);
    int nt = rt->model.ntensors;
    rt->loss_dev = be->alloc(be, (size_t)rt->M * sizeof(double));
    rt->sumsq_dev = be->alloc(be, (size_t)nt * sizeof(double));
    rt->loss_host = pp_calloc(rt->M, sizeof(double));
    rt->sumsq_host = pp_calloc(nt, sizeof(double));
    rt->sum_x = pp_calloc(nt ? nt : 1, sizeof *rt->sum_x);
    rt->sum_n = pp_calloc(nt ? nt : 1, sizeof *rt->sum_n);
    rt->upd = pp_calloc(nt ? nt : 1, sizeof *rt->upd);
    for (int i = 0; rt->model.grads && i < nt; i++) {
        rt->sum_x[i] = rt->model.grads + rt->model.tensors[i].offset;
        rt->sum_n[i] = rt->model.tensors[i].numel;
    }
}

/* runtime.transport ([Note: transport selection] in comm_select.h): the ranks exchange
 * their devices over the job's Comm and all choose alike; on nccl, rt->comm becomes an
 * NCCL Comm over the job's, which the runtime owns (runtime_free destroys it; the job's
 * own Comm stays its creator's, main.c's). */
static int transport_init(Runtime *rt, Comm *comm, const Backend *be, char *err, size_t errlen) {
    CommDevice mine, *all = pp_calloc(comm->world, sizeof *all);
    char nccl_why[PP_ERR_MAX / 4], why[PP_ERR_MAX / 2];
    int use, rc;
    comm_nccl_device(be, &mine, nccl_why, sizeof nccl_why);
    if (comm_select_exchange(comm, &mine, all) != PP_OK) {
        free(all);
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "exchanging the ranks' devices (runtime.transport): %s", comm_error(comm));
    }
    rc = comm_select(rt->cfg->transport, comm->world, all, nccl_why, &use, why, sizeof why, err,
                     errlen);
    free(all);
    if (rc) return rc;
    snprintf(rt->transport_note, sizeof rt->transport_note, "%s (%s)", comm_select_name(use), why);
    if (use != COMM_USE_NCCL) return PP_OK;
    Comm *nc;
    char msg[PP_ERR_MAX];
    if ((rc = comm_nccl_create(comm, be, &nc, msg, sizeof msg)))
        return pp_errf(err, errlen, rc, "runtime.transport %s chose NCCL (%s), but %s",
                       rt->cfg->transport, why, msg);
    nc->kind_names = kind_names;
    nc->n_kind_names = 5;
    rt->comm_base = comm;
    rt->comm = nc;
    rt->own_comm = 1;
    return PP_OK;
}

/* What every rank must agree on before the model is built, in one all-reduce on every rank:
 *  - [Note: residual stream type] in backend.h: the activations a stage sends are of its
 *    backend's residual type, so the ranks of one pipeline must store the stream alike (a
 *    CPU rank and a GPU rank at bf16 would not: the messages' sizes would differ; replicas
 *    exchange only fp32 gradients). Each replica's count of each type; a pipeline that
 *    mixes them is refused, naming the counts and the way out.
 *  - [Note: partition agreement] Every rank computes the partition itself, and under
 *    pipeline.balance: memory from what its own device stores ([Note: backend layout] in
 *    backend_load.h): ranks on different devices (a CPU and a GPU under runtime.device
 *    auto, cards of different memory, different PPTRAIN_* switches) could split the layers
 *    differently, and the messages, whose sizes do not depend on the split, would not show
 *    it. The sums over all ranks of each stage's end and of its square equal world x this
 *    rank's (and its square) only when every rank has the same ends (sum (x - m)^2 = 0).
 *    Exact in doubles: layer counts and ranks are small.
 * Every rank reaches the same verdict from the same sums. */
static int ranks_agree(const Runtime *rt, Comm *comm, const Backend *be, char *err, size_t errlen) {
    int D = rt->lay.D, S = rt->part.S, rc = PP_OK, mixed = -1;
    double w = comm->world;
    double *n = pp_calloc(2 * (size_t)D + 2 * (size_t)S, sizeof *n); /* [replica][fp32, bf16] */
    double *x = n + 2 * D;                                           /* [stage][end, end^2] */
    n[2 * rt->lay.dp + (be->residual != PP_F32)] = 1;
    for (int s = 0; s < S; s++) {
        x[2 * s] = rt->part.l1[s];
        x[2 * s + 1] = (double)rt->part.l1[s] * rt->part.l1[s];
    }
    if (comm->world > 1 && comm_allreduce_sum_f64(comm, n, 2 * D + 2 * S) != PP_OK)
        rc = pp_errf(err, errlen, PP_ERUNTIME,
                     "agreeing on the residual stream's type and the partition: %s",
                     comm_error(comm));
    for (int r = 0; r < D && rc == PP_OK && mixed < 0; r++)
        if (n[2 * r] > 0 && n[2 * r + 1] > 0) mixed = r;
    if (mixed >= 0)
        rc = pp_errf(err, errlen, PP_EUSAGE,
                     "the ranks of pipeline replica %d store the residual stream in different "
                     "types (%.0f in fp32, %.0f in bf16; this rank %s: %s), so the activations "
                     "they send differ in size: set runtime.device (not auto) or "
                     "runtime.precision: fp32, or give PPTRAIN_RESIDUAL the same value on every "
                     "GPU rank (fp32 to match a CPU rank)",
                     mixed, n[2 * mixed], n[2 * mixed + 1],
                     be->residual == PP_F32 ? "fp32" : "bf16", be->name);
    for (int s = 0; s < S && rc == PP_OK; s++) {
        double m = rt->part.l1[s];
        if (x[2 * s] != w * m || x[2 * s + 1] != w * m * m)
            rc = pp_errf(err, errlen, PP_EUSAGE,
                         "the ranks split the layers differently (this rank ends stage %d at "
                         "layer %d; the ranks' mean is %.2f): pipeline.balance: %s weighs the "
                         "activations as each rank's device stores them, and the ranks' devices "
                         "differ (runtime.device auto on a mix of CPU and GPU ranks, cards of "
                         "different memory, or different PPTRAIN_* switches); give pipeline.split "
                         "explicitly, or the same device and switches to every rank",
                         s, rt->part.l1[s], x[2 * s] / w, rt->cfg->balance);
    }
    free(n);
    return rc;
}

/* runtime_init's first step: the config's shape, the rank layout and the batch split. */
static int shape_init(Runtime *rt, const Config *cfg, Comm *comm, Trace *trace, char *err,
                      size_t errlen) {
    memset(rt, 0, sizeof *rt);
    rt->cfg = cfg;
    rt->comm = comm;
    rt->trace = trace;
    comm->kind_names = kind_names;
    comm->n_kind_names = 5;
    rt->v = cfg->virtual_stages;
    rt->S = cfg->stages * rt->v;
    rt->M = cfg->microbatches;
    rt->global_batch = cfg->batch_size;
    rt->T = cfg->seq_len;
    int rc = layout_init(&rt->lay, comm->world, comm->rank, cfg->stages, cfg->data_parallel, err,
                         errlen);
    if (rc) return rc;
    int D = rt->lay.D;
    if (rt->global_batch % (D * rt->M))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "train.batch_size %d is not a multiple of %d replicas x "
                       "pipeline.microbatches %d: each replica takes batch_size / replicas "
                       "sequences, split into microbatches; use a batch_size that %d divides, or "
                       "other microbatches or replicas",
                       rt->global_batch, D, rt->M, D * rt->M);
    rt->local_batch = rt->global_batch / D;
    rt->Bmb = rt->local_batch / rt->M;
    if (rt->v > PP_MAX_CHUNKS)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline.virtual_stages %d is more than this build supports (%d)", rt->v,
                       PP_MAX_CHUNKS);
    return PP_OK;
}

/* The longest message this job sends: an activation's gradient (fp32: at least the
 * activation's bytes, [Note: residual stream type]), or the whole wte
 * in the tied pair's all-reduce, or a block of the replicas' ring; the small
 * collectives (loss, norm, report, agreement) fit in the 1 MiB floor. A peer claiming
 * more is refused unread. Set before any split: groups copy it. */
static void message_limit(Runtime *rt, Comm *comm, const ModelDims *d) {
    size_t act = model_boundary_elems(d, rt->Bmb, rt->T) * sizeof(float);
    size_t wte = d->tied ? (size_t)d->Vp * d->C * sizeof(float) : 0;
    size_t most = act > wte ? act : wte, big = model_largest_tensor(&rt->model);
    /* a whole bucket at most */
    size_t ring = (big > DP_BUCKET_FLOATS ? big : DP_BUCKET_FLOATS) * sizeof(float);
    if (rt->lay.D > 1 && ring > most) most = ring; /* [Note: data parallel] */
    comm->max_message_bytes = most > ((size_t)1 << 20) ? most : (size_t)1 << 20;
    /* its groups' host messages */
    if (rt->own_comm) rt->comm_base->max_message_bytes = comm->max_message_bytes;
}

/* The tied embedding's pair (stage 0's and the last stage's ranks, when they differ):
 * every rank takes part in the split (it is collective); stage 0's rank is the group's
 * rank 0, so its part of the sum comes first ([Note: tied gradient order]). */
static int tied_pair(Runtime *rt, Comm *comm, const ModelDims *d, char *err, size_t errlen) {
    int r0 = stage_peer(rt, 0), rl = stage_peer(rt, rt->S - 1);
    rt->tied_peer = (!d->tied || r0 == rl) ? -1
                    : rt->lay.rank == r0 ? rl
                    : rt->lay.rank == rl ? r0 : -1;
    if (d->tied && r0 != rl &&
        comm_split(comm, rt->tied_peer >= 0 ? rt->lay.dp : -1, rt->lay.rank == r0 ? 0 : 1,
                   &rt->tied) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "forming the tied embedding pair: %s",
                       comm_error(comm));
    return PP_OK;
}

/* The parameters this rank's chunks hold (the memory plan's), before the model is built:
 * what a device reserves for their held copy ([Note: held weights] in model/model.h). */
static size_t rank_params(const Runtime *rt, const ModelDims *d) {
    ChunkSpec specs[PP_MAX_CHUNKS];
    ChunkRecompute rc[PP_MAX_CHUNKS];
    int nws[PP_MAX_CHUNKS], nblocks[2];
    ModelPlan p;
    runtime_chunk_plan(&rt->sched, &rt->fwd, &rt->part, rt->lay.pp, PP_RECOMPUTE_NONE, 0, specs, rc,
                       nws, nblocks);
    model_plan(&p, d, specs, NULL, NULL, rt->v, rt->Bmb, rt->T, 0, sizeof(float), sizeof(float),
               sizeof(float), 0, 0, 0, 0);
    return p.params / sizeof(float);
}

int runtime_init(Runtime *rt, const Config *cfg, Comm *comm, Trace *trace, char *err,
                 size_t errlen) {
    int rc;
    if ((rc = shape_init(rt, cfg, comm, trace, err, errlen))) return rc;
    ModelDims d = model_dims(cfg);
    if ((rc = build_schedules(rt, err, errlen)) ||
        (rc = runtime_partition(cfg, &rt->sched, NULL, rt->lay.D, &rt->part, err, errlen)))
        return rc;
    /* [Note: backends] the device is chosen by backend_select (CPU, or the CUDA backend
     * loaded on demand), then the transport by transport_init. */
    const Backend *be;
    BackendSizes bs = model_backend_sizes(&d, rt->Bmb, rt->T, rank_params(rt, &d));
    if ((rc = backend_select(cfg, comm->rank, &bs, &be, rt->device_note, sizeof rt->device_note,
                             err, errlen)) ||
        (rc = transport_init(rt, comm, be, err, errlen)))
        return rc;
    comm = rt->comm; /* the job's NCCL Comm when chosen: every message and collective from here */
    if ((rc = ranks_agree(rt, comm, be, err, errlen))) return rc;
    build_model(rt, &d, be);
    model_init_weights(&rt->model, cfg->seed, cfg->init_std);
    rt->init_hf = cfg->init_from[0] && model_hf_is_dir(cfg->init_from);
    if (rt->init_hf)
        rc = model_load_hf(&rt->model, cfg->init_from, &rt->init_read, err, errlen);
    else if (cfg->init_from[0])
        rc = model_load_llmc(&rt->model, cfg->init_from, err, errlen);
    if (rc) return rc;
    message_limit(rt, comm, &d);
    if ((rc = tied_pair(rt, comm, &d, err, errlen)) || (rc = dp_init(rt, err, errlen))) return rc;
    update_list(rt);
    staging_init(rt);
    /* pinned on a GPU (host_alloc): the tokens and targets upload asynchronously */
    size_t tb = (size_t)rt->global_batch * rt->T * sizeof(int);
    rt->inputs = be->host_alloc ? be->host_alloc(be, tb) : pp_malloc(tb);
    rt->targets = be->host_alloc ? be->host_alloc(be, tb) : pp_malloc(tb);
    return open_data(rt, err, errlen);
}

void runtime_free(Runtime *rt) {
    const Backend *be = rt->model.be;
    staging_free(rt);
    dp_free(rt);
    for (int c = 0; c < rt->model.nchunks; c++) {
        free(rt->slots[c]);
        free(rt->rbufs[c]);
        free(rt->wsets[c]);
    }
    free(rt->blocks);
    if (be) {
        be->dealloc(be, rt->loss_dev);
        be->dealloc(be, rt->sumsq_dev);
    }
    comm_destroy(rt->tied); /* safe after its parent's (main.c destroys that first) */
    /* the NCCL Comm: before the buffers it may still write */
    if (rt->own_comm) comm_destroy(rt->comm);
    model_free(&rt->model);
    if (be) {
        host_free(be, rt->inputs);
        host_free(be, rt->targets);
    } else {
        free(rt->inputs);
        free(rt->targets);
    }
    backend_release(be);
    sched_free(&rt->sched);
    sched_free(&rt->fwd);
    data_stream_close(&rt->train);
    data_stream_close(&rt->val);
    free(rt->loss_host);
    free(rt->sumsq_host);
    free(rt->sum_x);
    free(rt->sum_n);
    free(rt->upd);
    memset(rt, 0, sizeof *rt);
}

void runtime_measure(Runtime *rt) {
    rt->min_step_s = rt->measured == 0 || rt->step_s < rt->min_step_s ? rt->step_s : rt->min_step_s;
    rt->measured++;
    rt->sum_step_s += rt->step_s;
    rt->sum_pipe_s += rt->pipe_s;
    rt->sum_busy_s += rt->busy_s;
    rt->sum_wait_s += rt->wait_s;
    for (int s = 0; s < rt->S; s++) {
        rt->sum_f[s] += rt->cur_f[s];
        rt->sum_b[s] += rt->cur_b[s];
        rt->sum_w[s] += rt->cur_w[s];
    }
    dp_measure(rt);
}

void runtime_efficiency_text(double simulated_s, double measured_s, char *buf, size_t n) {
    if (measured_s > 0 && simulated_s <= measured_s)
        snprintf(buf, n, "efficiency %.1f%%", 100.0 * simulated_s / measured_s);
    else /* the per-stage means include the times when the ranks compete for the cores */
        snprintf(buf, n,
                 "measured faster than the simulator's estimate (its F/B times are means over "
                 "steps in which the ranks compete for cores and memory bandwidth)");
}

int runtime_report(Runtime *rt, char *err, size_t errlen) {
    int n = rt->measured, S = rt->S, M = rt->M;
    if (n == 0) return PP_OK;
    double step = rt->sum_step_s / n, busy = rt->sum_busy_s / n;
    double rss_mb = pp_peak_rss_mb();
    /* [Note: traced device time]: untraced, a device's action times are the host's enqueue
     * times, so neither the busy share nor the simulated pipeline would mean anything */
    int timed = !rt->model.be->device_memory || rt->trace;
    if (timed)
        printf("rank %d: per step %.1f ms (fastest %.1f, pipeline %.1f ms), busy %.1f ms, "
               "idle (bubble) %.1f ms = %.1f%% | peak RSS %.1f MB\n",
               rt->lay.rank, step * 1e3, rt->min_step_s * 1e3, rt->sum_pipe_s / n * 1e3, busy * 1e3,
               (step - busy) * 1e3, 100.0 * (step - busy) / step, rss_mb);
    else
        printf("rank %d: per step %.1f ms (fastest %.1f, pipeline %.1f ms) | peak RSS %.1f MB "
               "(the GPU runs asynchronously: --trace times each action on it, and then the busy "
               "and bubble shares)\n",
               rt->lay.rank, step * 1e3, rt->min_step_s * 1e3, rt->sum_pipe_s / n * 1e3, rss_mb);
    /* mean per-action times of every stage (each rank contributes its own), and the
     * slowest rank's pipeline time: the step ends when the last rank finishes */
    /* F, B (or I), W of each stage; the pipeline */
    double *v = pp_calloc(3 * S + 1, sizeof(double));
    for (int s = 0; s < S; s++)
        if (rt->chunk_of[s] >= 0) {
            v[s] = rt->sum_f[s] / ((double)n * M);
            v[S + s] = rt->sum_b[s] / ((double)n * M);
            v[2 * S + s] = rt->sum_w[s] / ((double)n * M);
        }
    v[3 * S] = rt->lay.rank == 0 ? rt->sum_pipe_s / n : 0.0; /* rank 0 starts first and ends last */
    int rc = comm_allreduce_sum_f64(rt->comm, v, 3 * S + 1);
    if (rc != PP_OK) {
        free(v);
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the timing report: %s",
                       comm_error(rt->comm));
    }
    if (rt->lay.rank == 0 && timed) {
        SchedSimCosts c;
        SchedSimResult res;
        char serr[PP_ERR_MAX];
        sched_sim_costs_default(&c);
        c.F_stage = v;
        c.B_stage = v + S;
        c.X = 0.0;
        /* a split backward measured I into B_stage and W here ([Note: split costs]) */
        int split = 0;
        for (int s = 0; s < S; s++) split |= v[2 * S + s] > 0;
        c.W_stage = split ? v + 2 * S : NULL;
        if (sched_sim_run(&rt->sched, &c, &res, serr, sizeof serr, NULL) == PP_OK) {
            const char *formula;
            double cf = sched_bubble_closed_form(&rt->sched, &formula);
            char verdict[256];
            runtime_efficiency_text(res.makespan, v[3 * S], verdict, sizeof verdict);
            printf("pipeline: simulated makespan %.1f ms from the measured F/B times, "
                   "measured %.1f ms: %s; simulated bubble %.1f%%",
                   res.makespan * 1e3, v[3 * S] * 1e3, verdict, 100.0 * res.bubble);
            if (cf >= 0) printf(" (closed form %s = %.1f%%)", formula, 100.0 * cf);
            printf("\n");
            sched_sim_result_free(&res);
        }
    }
    free(v);
    return dp_report(rt, err, errlen);
}

int runtime_check_tied(Runtime *rt, char *err, size_t errlen) {
    /* a 32-bit FNV-1a hash of each copy, exact in a double: rank of stage 0 adds it, the
     * rank of stage S-1 subtracts it, every other rank adds 0 */
    double h = 0.0;
    if (rt->tied_peer >= 0) {
        const Backend *be = rt->model.be;
        size_t n = (size_t)rt->model.d.Vp * rt->model.d.C * sizeof(float);
        unsigned char *p = pp_malloc(n);
        be->to_host(be, p, rt->model.wte, n);
        be->wait(be);
        uint32_t x = 2166136261u;
        for (size_t i = 0; i < n; i++) x = (x ^ p[i]) * 16777619u;
        free(p);
        h = rt->chunk_of[0] >= 0 ? (double)x : -(double)x;
    }
    if (comm_allreduce_sum_f64(rt->comm, &h, 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the tied embedding check: %s",
                       comm_error(rt->comm));
    if (h != 0.0)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "the tied embedding copies on the first and the last stage's ranks differ "
                       "(a bug: please report it with the config)");
    if (rt->tied_peer >= 0 && rt->chunk_of[0] >= 0)
        printf("tied embeddings: the copies on ranks %d and %d are bitwise identical\n",
               rt->lay.rank, rt->tied_peer);
    return PP_OK;
}
