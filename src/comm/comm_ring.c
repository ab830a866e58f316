/* comm_ring.c — the ring collectives over point-to-point messages ([Note: ring
 * all-reduce] in comm_ring.h). */
#include "comm_ring.h"

#include "comm_internal.h"

size_t comm_ring_block(size_t n, int W, int q, size_t *len) {
    size_t a = n * (size_t)q / (size_t)W, b = n * (size_t)(q + 1) / (size_t)W;
    if (len) *len = b - a;
    return a;
}

size_t comm_ring_max_block(size_t n, int W) { return (n + (size_t)W - 1) / (size_t)W; }

static int mod(int a, int W) { return ((a % W) + W) % W; }

static size_t ring_block(const CommRing *r, int q, size_t *len) {
    if (!r->bounds) return comm_ring_block(r->n, r->c->world, q, len);
    *len = r->bounds[q + 1] - r->bounds[q];
    return r->bounds[q];
}

/* Post the messages of step (phase, k). */
static int ring_post(CommRing *r) {
    Comm *c = r->c;
    int W = c->world, me = c->rank, next = mod(me + 1, W), prev = mod(me - 1, W);
    int sb = r->phase == 0 ? mod(me - r->k - 1, W) : mod(me - r->k, W);
    size_t slen, rlen, so = ring_block(r, sb, &slen), ro;
    r->rb = r->phase == 0 ? mod(me - r->k - 2, W) : mod(me - r->k - 1, W);
    ro = ring_block(r, r->rb, &rlen);
    CommTag t = r->tag;
    t.mb = r->phase * W + r->k;
    int rc = comm_irecv(c, prev, &t, r->phase == 0 ? r->tmp : r->buf + ro, rlen * sizeof(float),
                        &r->rreq);
    if (rc == PP_OK) rc = comm_isend(c, next, &t, r->buf + so, slen * sizeof(float), &r->sreq);
    r->posted = 1;
    if (rc != PP_OK) r->phase = 2;
    return rc;
}

/* The step's messages completed: add the received block, go to the next step. */
static void ring_step_done(CommRing *r) {
    int W = r->c->world;
    if (r->phase == 0) {
        size_t len, off = ring_block(r, r->rb, &len);
        comm_add_f32(r->buf + off, r->tmp, len); /* partial from upstream + own: commutative */
    }
    r->posted = 0;
    if (++r->k < W - 1) return;
    r->k = 0;
    if (r->phase == 0) { /* this rank's block is summed */
        size_t len, off = ring_block(r, r->c->rank, &len);
        comm_canon_nan_f32(r->buf + off, len);
    }
    r->phase = r->phase == 0 && r->op == RING_ALLREDUCE ? 1 : 2;
}

int comm_ring_start(CommRing *r, Comm *c, RingOp op, float *buf, size_t n,
                    const size_t *bounds, float *tmp, const CommTag *tag) {
    *r = (CommRing){.c = c, .op = op, .buf = buf, .n = n, .bounds = bounds, .tmp = tmp,
                    .tag = *tag};
    r->phase = op == RING_ALL_GATHER ? 1 : 0;
    if (c->world == 1) {
        if (op != RING_ALL_GATHER) comm_canon_nan_f32(buf, n);
        r->phase = 2;
    }
    return PP_OK;
}

/* Complete *req if it is done (or, when block, once it is). */
static int ring_req(CommRing *r, CommReq **req, int block, int *pending) {
    int done = 1, rc = PP_OK;
    if (!*req) return PP_OK;
    rc = block ? comm_wait(r->c, *req) : comm_test(r->c, *req, &done);
    if (!done) {
        *pending = 1;
        return PP_OK;
    }
    *req = NULL;
    return rc;
}

static int ring_advance(CommRing *r, int block, int *done) {
    while (r->phase < 2) {
        int pending = 0, rc;
        if (!r->posted && (rc = ring_post(r)) != PP_OK) return rc;
        if ((rc = ring_req(r, &r->rreq, block, &pending)) ||
            (rc = ring_req(r, &r->sreq, block, &pending))) {
            r->phase = 2;
            return rc;
        }
        if (pending) break;
        ring_step_done(r);
    }
    *done = r->phase == 2;
    return PP_OK;
}

int comm_ring_test(CommRing *r, int *done) { return ring_advance(r, 0, done); }

int comm_ring_wait(CommRing *r) {
    int done;
    return ring_advance(r, 1, &done);
}
