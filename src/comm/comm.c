/* comm.c — what every transport shares: the request record's helpers, tag and group
 * names, the order floats are added in. The transports build on it; which transport a
 * job gets (comm_create) is comm_select.c's, above them. */
#include "comm_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------- messages -- */

void comm_tag_format(const Comm *c, const CommTag *t, char *buf, size_t n) {
    if (c && c->kind_names && t->kind >= 0 && t->kind < c->n_kind_names &&
        c->kind_names[t->kind])
        snprintf(buf, n, "step %d, stage %d, microbatch %d, %s", t->step, t->stage, t->mb,
                 c->kind_names[t->kind]);
    else
        snprintf(buf, n, "step %d, stage %d, microbatch %d, kind %d", t->step, t->stage,
                 t->mb, t->kind);
}

void comm_die_grouped(const Comm *c, const char *call) {
    if (c->group_depth == 0) /* comm_group_end */
        PP_DIE("%s without comm_group_start (transport %s)", call, c->ops->name);
    PP_DIE("%s between comm_group_start and comm_group_end (transport %s): only isend "
           "and irecv may be posted in a group, and its requests waited for after "
           "comm_group_end (on NCCL the group is issued only then)", call, c->ops->name);
}

int comm_fail(Comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return PP_ERUNTIME;
}

void comm_group_name(const int *global, int n, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, " in the group of ranks {");
    for (int i = 0; i < n && i < 8 && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? ", " : "", global[i]);
    if (k < len) snprintf(buf + k, len - k, "%s}", n > 8 ? ", ..." : "");
}

/* ------------------------------------------------------------------- requests -- */

void comm_req_fail(CommReq *r, const char *fmt, ...) {
    va_list ap;
    if (r->done) return; /* the first reason stands */
    r->done = 1;
    r->done_at = pp_now();
    r->status = PP_ERUNTIME;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

void comm_req_ok(CommReq *r) {
    r->done = 1;
    r->done_at = pp_now();
    r->status = PP_OK;
}

CommReq *comm_req_new(Comm *c, CommReq **live, int type, int peer, const CommTag *tag,
                      void *buf, size_t bytes) {
    CommReq *r = pp_calloc(1, sizeof *r);
    r->type = type;
    r->peer = peer;
    r->tag = *tag;
    r->buf = buf;
    r->bytes = bytes;
    r->posted = pp_now();
    r->owner = c;
    r->next_live = *live;
    if (*live) (*live)->prev_live = r;
    *live = r;
    return r;
}

int comm_req_release(Comm *c, CommReq **live, CommReq *r) {
    int st = r->status;
    if (st != PP_OK) snprintf(c->err, sizeof c->err, "%s", r->err);
    c->done_at = r->done_at;
    if (r->prev_live) r->prev_live->next_live = r->next_live;
    else *live = r->next_live;
    if (r->next_live) r->next_live->prev_live = r->prev_live;
    free(r);
    return st;
}

Early *comm_early_new(const CommTag *t, size_t n) {
    Early *e = comm_early_try_new(t, n);
    if (!e) PP_DIE("out of memory allocating %zu bytes for an early message", n);
    return e;
}

Early *comm_early_try_new(const CommTag *t, size_t n) {
    Early *e = calloc(1, sizeof *e);
    if (!e || !(e->buf = malloc(n ? n : 1))) {
        free(e);
        return NULL;
    }
    e->tag = *t;
    e->bytes = n;
    return e;
}

void comm_early_free(Early *e) {
    free(e->buf);
    free(e);
}

static int tag_equal(const CommTag *a, const CommTag *b) {
    return a->step == b->step && a->stage == b->stage && a->mb == b->mb && a->kind == b->kind;
}

int comm_recv_matches(const Comm *c, int me, CommReq *r, const CommTag *t, size_t n) {
    char sent[160], want[160];
    if (tag_equal(t, &r->tag) && n == r->bytes) return 1;
    comm_tag_format(c, t, sent, sizeof sent);
    comm_tag_format(c, &r->tag, want, sizeof want);
    comm_req_fail(r, "message from rank %d does not match the receive posted for it: rank "
                  "%d sent (%s; %zu bytes) but rank %d expected (%s; %zu bytes) — the "
                  "ranks disagree on the schedule", r->peer, r->peer, sent, n, me, want,
                  r->bytes);
    return 0;
}

/* ----------------------------------------------------------------- arithmetic -- */

void comm_add_f32(float *acc, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void comm_canon_nan_f32(float *v, size_t n) {
    const float canon = __builtin_nanf(""); /* 0x7fc00000 */
    for (size_t i = 0; i < n; i++) v[i] = v[i] == v[i] ? v[i] : canon;
}

int comm_split_plan(int world, const int *color, const int *key, int me, int *members,
                    int *index) {
    int n = 0;
    *index = -1;
    if (color[me] < 0) return 0;
    for (int r = 0; r < world; r++) { /* insertion by (key, rank): r rises, so ties keep order */
        int i;
        if (color[r] != color[me]) continue;
        i = n++;
        while (i > 0 && key[members[i - 1]] > key[r]) {
            members[i] = members[i - 1];
            i--;
        }
        members[i] = r;
    }
    for (int i = 0; i < n; i++)
        if (members[i] == me) *index = i;
    return n;
}
