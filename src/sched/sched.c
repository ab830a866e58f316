/* sched.c — pipeline schedules as data: action IR, generators, lowering, validator. */
#include "sched.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================= IR === */

static const char *const TYPE_NAMES[ACT_NTYPES] = {
    [ACT_F] = "F",           [ACT_B] = "B",           [ACT_SEND_F] = "SEND_F",
    [ACT_RECV_F] = "RECV_F", [ACT_SEND_B] = "SEND_B", [ACT_RECV_B] = "RECV_B",
    [ACT_I] = "I",           [ACT_W] = "W",
};

const char *sched_type_name(int type) {
    return (type >= 0 && type < ACT_NTYPES) ? TYPE_NAMES[type] : "?";
}

int sched_action_format(Action a, char *buf, size_t n) {
    int len = snprintf(buf, n, "%d%s%d", a.stage, sched_type_name(a.type), (int)a.mb);
    return len < 0 ? 0 : len;
}

/* Read a canonical decimal (no sign, no leading zero) of at most `max` at *p. */
static int parse_decimal(const char **p, long max, long *out) {
    const char *q = *p;
    long v = 0;
    if (!isdigit((unsigned char)*q)) return 0;
    if (*q == '0' && isdigit((unsigned char)q[1])) return 0;
    for (; isdigit((unsigned char)*q); q++) {
        v = v * 10 + (*q - '0');
        if (v > max) return 0;
    }
    *p = q;
    *out = v;
    return 1;
}

int sched_action_parse(const char *text, Action *a) {
    const char *p = text, *name;
    long stage, mb;
    if (!parse_decimal(&p, SCHED_MAX_STAGES - 1, &stage)) return PP_EUSAGE;
    for (name = p; isupper((unsigned char)*p) || *p == '_'; p++) {}
    size_t name_len = (size_t)(p - name);
    int type = -1;
    for (int t = 0; t < ACT_NTYPES; t++)
        if (strlen(TYPE_NAMES[t]) == name_len && !strncmp(name, TYPE_NAMES[t], name_len))
            type = t;
    if (type < 0 || !parse_decimal(&p, INT32_MAX, &mb) || *p) return PP_EUSAGE;
    a->type = (uint8_t)type;
    a->stage = (int16_t)stage;
    a->mb = (int32_t)mb;
    return PP_OK;
}

static Action act(int type, int stage, int mb) {
    Action a = {(uint8_t)type, (int16_t)stage, (int32_t)mb};
    return a;
}

static int is_send(int t) { return t == ACT_SEND_F || t == ACT_SEND_B; }
static int is_recv(int t) { return t == ACT_RECV_F || t == ACT_RECV_B; }

/* Stage on the other end of a transfer ([Note: action semantics]); a's own otherwise. */
static int peer_stage(Action a) {
    if (a.type == ACT_SEND_F || a.type == ACT_RECV_B) return a.stage + 1;
    return a.type == ACT_RECV_F || a.type == ACT_SEND_B ? a.stage - 1 : a.stage;
}

/* ================================================================ placement === */

int sched_stage_rank(const Schedule *s, int stage) {
    return stage >= 0 && stage < s->S ? s->stage_rank[stage] : -1;
}

int sched_stage_chunk(const Schedule *s, int stage) {
    return stage >= 0 && stage < s->S ? s->stage_chunk[stage] : -1;
}

int sched_rank_stage(const Schedule *s, int rank, int chunk) {
    for (int st = 0; st < s->S; st++)
        if (s->stage_rank[st] == rank && s->stage_chunk[st] == chunk) return st;
    return -1;
}

void sched_place_looped(int P, int v, int *stage_rank) {
    for (int st = 0; st < P * v; st++) stage_rank[st] = st % P;
}

/* stage_chunk from stage_rank: each rank's stages numbered in increasing order. */
static void number_chunks(Schedule *s) {
    int *seen = pp_calloc((size_t)s->P, sizeof(int));
    for (int st = 0; st < s->S; st++) s->stage_chunk[st] = seen[s->stage_rank[st]]++;
    free(seen);
}

int sched_set_placement(Schedule *s, const int *stage_rank, char *err, size_t errlen) {
    int *held = pp_calloc((size_t)s->P, sizeof(int)), rc = PP_OK;
    for (int r = 0; r < s->P && rc == PP_OK; r++)
        if (s->len[r] > 0)
            rc = pp_errf(err, errlen, PP_EUSAGE, "placement set after actions were added");
    for (int st = 0; st < s->S && rc == PP_OK; st++) {
        if (stage_rank[st] < 0 || stage_rank[st] >= s->P)
            rc = pp_errf(err, errlen, PP_EUSAGE, "placement puts stage %d on rank %d, but there"
                         " are %d ranks", st, stage_rank[st], s->P);
        else
            held[stage_rank[st]]++;
    }
    for (int r = 0; r < s->P && rc == PP_OK; r++)
        if (held[r] != s->v)
            rc = pp_errf(err, errlen, PP_EUSAGE, "placement gives rank %d %d stages, but every rank"
                         " holds virtual_stages = %d", r, held[r], s->v);
    free(held);
    if (rc != PP_OK) return rc;
    memcpy(s->stage_rank, stage_rank, (size_t)s->S * sizeof *stage_rank);
    number_chunks(s);
    return PP_OK;
}

/* 1 if the stages of a and b (in range) live on the same rank. */
static int same_rank(const Schedule *s, int a, int b) {
    return s->stage_rank[a] == s->stage_rank[b];
}

/* ================================================================ container === */

int sched_init(Schedule *s, const char *name, int P, int v, int M, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (P < 1 || v < 1 || M < 1)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline needs stages >= 1, virtual_stages >= 1 and microbatches >= 1"
                       " (got P=%d, v=%d, M=%d)", P, v, M);
    if ((long)P * v > SCHED_MAX_STAGES)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "P*v = %ld stages is more than the %d a schedule can hold",
                       (long)P * v, SCHED_MAX_STAGES);
    s->P = P;
    s->v = v;
    s->M = M;
    s->S = P * v;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->len = pp_calloc((size_t)P, sizeof *s->len);
    s->cap = pp_calloc((size_t)P, sizeof *s->cap);
    s->acts = pp_calloc((size_t)P, sizeof *s->acts);
    s->stage_rank = pp_calloc((size_t)s->S, sizeof *s->stage_rank);
    s->stage_chunk = pp_calloc((size_t)s->S, sizeof *s->stage_chunk);
    s->split = pp_calloc((size_t)s->S * M, 1);
    s->keep = pp_calloc((size_t)s->S * M, 1);
    sched_place_looped(P, v, s->stage_rank);
    number_chunks(s);
    return PP_OK;
}

void sched_append(Schedule *s, int rank, Action a) {
    if (s->len[rank] == s->cap[rank]) {
        int cap = s->cap[rank] ? 2 * s->cap[rank] : 16;
        Action *grown = pp_malloc((size_t)cap * sizeof *grown);
        if (s->len[rank]) memcpy(grown, s->acts[rank], (size_t)s->len[rank] * sizeof *grown);
        free(s->acts[rank]);
        s->acts[rank] = grown;
        s->cap[rank] = cap;
    }
    s->acts[rank][s->len[rank]++] = a;
    if ((a.type == ACT_I || a.type == ACT_W) && a.stage >= 0 && a.stage < s->S && a.mb >= 0 &&
        a.mb < s->M)
        s->split[(size_t)a.stage * s->M + a.mb] = 1;
}

void sched_free(Schedule *s) {
    if (s->acts)
        for (int r = 0; r < s->P; r++) free(s->acts[r]);
    free(s->acts);
    free(s->len);
    free(s->cap);
    free(s->stage_rank);
    free(s->stage_chunk);
    free(s->split);
    free(s->keep);
    memset(s, 0, sizeof *s);
}

/* ====================================================== what an action means === */

/* The backward of (stage, m) that produces its input gradient: I when split, else B. */
static Action grad_action(const Schedule *s, int stage, int m) {
    return act(s->split[(size_t)stage * s->M + m] ? ACT_I : ACT_B, stage, m);
}

int sched_action_deps(const Schedule *s, Action a, Action deps[SCHED_MAX_DEPS]) {
    int st = a.stage, m = a.mb, n = 0;
    memset(deps, 0, SCHED_MAX_DEPS * sizeof *deps); /* all defined: quiet -Wmaybe-uninitialized */
    switch (a.type) {
    case ACT_F: /* its input: the tokens, the local stage below, or a receive */
        if (st > 0)
            deps[n++] = same_rank(s, st - 1, st) ? act(ACT_F, st - 1, m) : act(ACT_RECV_F, st, m);
        return n;
    case ACT_B: /* its forward, and its output gradient: the loss, local, or received */
    case ACT_I:
        deps[n++] = act(ACT_F, st, m);
        if (st + 1 < s->S)
            deps[n++] = same_rank(s, st + 1, st) ? grad_action(s, st + 1, m)
                                                 : act(ACT_RECV_B, st, m);
        return n;
    case ACT_W: /* its I; and the send that reads the slot W gives back */
        deps[n++] = act(ACT_I, st, m);
        if (st > 0 && !same_rank(s, st - 1, st)) deps[n++] = act(ACT_SEND_B, st, m);
        return n;
    case ACT_SEND_F: deps[0] = act(ACT_F, st, m); return 1;
    case ACT_SEND_B: deps[0] = grad_action(s, st, m); return 1;
    case ACT_RECV_F: deps[0] = act(ACT_SEND_F, st - 1, m); return 1;
    case ACT_RECV_B: deps[0] = act(ACT_SEND_B, st + 1, m); return 1;
    default: return -1;
    }
}

int sched_action_frees(const Schedule *s, Action a, int stages[2]) {
    int st = a.stage, n = 0;
    if (s->forward_only) {
        if (a.type == ACT_SEND_F) stages[n++] = st;
        if (a.type == ACT_F && st == s->S - 1) stages[n++] = st;
        if (a.type == ACT_F && st > 0 && same_rank(s, st - 1, st)) stages[n++] = st - 1;
    } else {
        int split = s->split[(size_t)st * s->M + a.mb];
        if (a.type == ACT_SEND_B && !split) stages[n++] = st;
        if (a.type == ACT_B && (st == 0 || same_rank(s, st - 1, st))) stages[n++] = st;
        if (a.type == ACT_W) stages[n++] = st;
    }
    return n;
}

/* The compute on the neighbouring stage that reads compute a's result: F(s,m) ->
 * F(s+1,m), B or I(s,m) -> the backward of (s-1,m); 0 at the ends of the pipeline
 * and for W, whose result stays on its rank. */
static int next_compute(const Schedule *s, Action a, Action *next) {
    int to = a.type == ACT_F ? a.stage + 1 : a.stage - 1;
    if (a.type == ACT_W || to < 0 || to >= s->S) return 0;
    *next = a.type == ACT_F ? act(ACT_F, to, a.mb) : grad_action(s, to, a.mb);
    return 1;
}

/* The SEND (on a's rank) and the RECV (on the reader's rank) that carry compute a's
 * result to the next stage, when the reader depends on a receive; 0 if it is local. */
static int transfer_of(const Schedule *s, Action a, Action *send, Action *recv) {
    Action next, deps[SCHED_MAX_DEPS];
    if (!next_compute(s, a, &next)) return 0;
    int n = sched_action_deps(s, next, deps);
    for (int i = 0; i < n; i++)
        if (is_recv(deps[i].type)) {
            *recv = deps[i];
            sched_action_deps(s, *recv, deps);
            *send = deps[0];
            return 1;
        }
    return 0;
}

/* ============================================================ action checks === */

/* Where each action sits: pos[type][s*M + m] = its index in its rank's list or -1.
 * mark[r] flags the offending action of
 * rank r for the grid (-1: none). */
typedef struct {
    const Schedule *s;
    int *pos[ACT_NTYPES];
    int *mark;
    char *err;
    size_t errlen;
} Check;

static void check_init(Check *c, const Schedule *s, char *err, size_t errlen) {
    size_t n = (size_t)s->S * s->M;
    c->s = s;
    c->err = err;
    c->errlen = errlen;
    for (int t = 0; t < ACT_NTYPES; t++) {
        c->pos[t] = pp_malloc(n * sizeof(int));
        for (size_t i = 0; i < n; i++) c->pos[t][i] = -1;
    }
    c->mark = pp_malloc((size_t)s->P * sizeof(int));
    for (int r = 0; r < s->P; r++) c->mark[r] = -1;
    if (err && errlen) err[0] = '\0';
}

static void check_free(Check *c) {
    for (int t = 0; t < ACT_NTYPES; t++) free(c->pos[t]);
    free(c->mark);
}

/* Record a failure at (rank, idx): "rank R step I (ACTION): why". */
static int check_fail(Check *c, int rank, int idx, const char *fmt, ...) {
    char text[SCHED_ACTION_TEXT_MAX];
    sched_action_format(c->s->acts[rank][idx], text, sizeof text);
    c->mark[rank] = idx;
    if (c->err && c->errlen) {
        int n = snprintf(c->err, c->errlen, "rank %d step %d (%s): ", rank, idx, text);
        if (n > 0 && (size_t)n < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return PP_EUSAGE;
}

/* 1 if s has looped placement (what its messages may call "stage mod P"). */
static int placed_looped(const Schedule *s) {
    int *looped = pp_malloc((size_t)s->S * sizeof *looped);
    sched_place_looped(s->P, s->v, looped);
    int same = !memcmp(looped, s->stage_rank, (size_t)s->S * sizeof *looped);
    free(looped);
    return same;
}

/* Why action a (on rank r) cannot exist, or NULL if its stage and peer are fine. */
static const char *placement_error(const Schedule *s, int r, Action a) {
    int st = a.stage;
    if (a.type >= ACT_NTYPES) return "unknown action type";
    if (st < 0 || st >= s->S) return "stage out of range (0 <= stage < P*v)";
    if (a.mb < 0 || a.mb >= s->M) return "microbatch out of range (0 <= mb < M)";
    if (sched_stage_rank(s, st) != r)
        return placed_looped(s) ? "its stage lives on another rank (stage mod P)"
                                : "its stage lives on another rank (see the placement)";
    if (s->forward_only && (a.type == ACT_B || a.type == ACT_I || a.type == ACT_W ||
                            a.type == ACT_SEND_B || a.type == ACT_RECV_B))
        return "a forward-only schedule has no backward actions";
    int peer = peer_stage(a);
    if (peer < 0 || peer >= s->S) return "there is no stage on the other end";
    if (!sched_is_compute(a.type) && sched_stage_rank(s, peer) == r)
        return "the neighbouring stage is on the same rank (handed over locally, no transfer)";
    return NULL;
}

/* Ranges, placement, duplicates; fills c->pos. `lowered`: transfers allowed. */
static int check_index(Check *c, int lowered) {
    const Schedule *s = c->s;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action a = s->acts[r][i];
            const char *why = placement_error(s, r, a);
            if (why) return check_fail(c, r, i, "%s", why);
            if (!lowered && !sched_is_compute(a.type))
                return check_fail(c, r, i, "transfer in a schedule being lowered");
            int *slot = &c->pos[a.type][a.stage * s->M + a.mb];
            if (*slot >= 0)
                return check_fail(c, r, i, "appears twice (first at step %d)", *slot);
            *slot = i;
        }
    return PP_OK;
}

/* Position of the type-t action on (stage, mb) in its rank's list, -1 if absent. */
static int at(const Check *c, int t, int stage, int mb) {
    return c->pos[t][stage * c->s->M + mb];
}

/* The transfer that carries compute a's result (index i on rank r) to the next
 * stage, if there is one, is complete: its SEND and its RECV exist. */
static int check_transfer(Check *c, int r, Action a, int i, const char *what) {
    Action send, recv;
    char text[SCHED_ACTION_TEXT_MAX];
    if (!transfer_of(c->s, a, &send, &recv)) return PP_OK;
    int si = at(c, send.type, send.stage, send.mb);
    if (si < 0) {
        sched_action_format(send, text, sizeof text);
        return check_fail(c, r, i, "%s never sent (no %s)", what, text);
    }
    if (at(c, recv.type, recv.stage, recv.mb) >= 0) return PP_OK;
    sched_action_format(recv, text, sizeof text);
    return check_fail(c, r, si, "never received (no %s)", text);
}

/* Every F present once, and a B or an I and a W; with `lowered`, every cross-rank edge
 * has its SEND and its RECV. A missing action is reported at the one it belongs with. */
static int check_complete(Check *c, int lowered) {
    const Schedule *s = c->s;
    for (int st = 0; st < s->S; st++)
        for (int m = 0; m < s->M; m++) {
            int r = sched_stage_rank(s, st), f = at(c, ACT_F, st, m), b = at(c, ACT_B, st, m);
            int i = at(c, ACT_I, st, m), w = at(c, ACT_W, st, m);
            if (f < 0)
                return pp_errf(c->err, c->errlen, PP_EUSAGE,
                               "rank %d has no %dF%d: every stage runs every microbatch", r, st, m);
            if (!s->forward_only && b >= 0 && (i >= 0 || w >= 0))
                return check_fail(c, r, b, "has a full backward and a split one (%dI%d/%dW%d):"
                                  " one of the two", st, m, st, m);
            if (!s->forward_only && i >= 0 && w < 0)
                return check_fail(c, r, i, "has no weight gradient %dW%d (every I needs its W)",
                                  st, m);
            if (!s->forward_only && w >= 0 && i < 0)
                return check_fail(c, r, w, "has no input gradient %dI%d (every W needs its I)",
                                  st, m);
            if (!s->forward_only && b < 0 && i < 0)
                return check_fail(c, r, f, "has no backward %dB%d (or %dI%d and %dW%d)", st, m,
                                  st, m, st, m);
            if (i >= 0) b = i;
            if (!lowered) continue;
            int rc = check_transfer(c, r, act(ACT_F, st, m), f, "output");
            if (rc == PP_OK && !s->forward_only)
                rc = check_transfer(c, r, grad_action(s, st, m), b, "gradient");
            if (rc != PP_OK) return rc;
        }
    return PP_OK;
}

/* What is wrong when action a comes before its dependency d (text %s) on a rank. */
static const char *order_why(Action a, Action d) {
    if (is_send(a.type)) return "sends before %s computed it";
    if (d.type == ACT_RECV_F) return "runs before its input is received (%s)";
    if (d.type == ACT_RECV_B) return "runs before its gradient is received (%s)";
    if (a.type == ACT_F) return "runs before its input %s";
    if (a.type == ACT_W && d.type == ACT_I) return "runs before its input-gradient half %s";
    if (a.type == ACT_W) return "runs before %s (W gives back the slot that send reads)";
    return d.type == ACT_F ? "runs before its forward %s" : "runs before the gradient from %s";
}

/* On one rank: each action after its dependencies on that rank (sched_action_deps);
 * those on other ranks are check_no_wait_cycle's. Absent actions are check_complete's. */
static int check_order(Check *c) {
    static const int order[] = {ACT_F, ACT_SEND_F, ACT_RECV_F, ACT_B, ACT_I, ACT_W, ACT_SEND_B,
                                ACT_RECV_B};
    const Schedule *s = c->s;
    Action deps[SCHED_MAX_DEPS];
    char text[SCHED_ACTION_TEXT_MAX];
    for (int st = 0; st < s->S; st++)
        for (int m = 0; m < s->M; m++)
            for (size_t t = 0; t < sizeof order / sizeof order[0]; t++) {
                Action a = act(order[t], st, m);
                int i = at(c, a.type, st, m), r = sched_stage_rank(s, st);
                int n = i < 0 ? 0 : sched_action_deps(s, a, deps);
                for (int j = 0; j < n; j++) {
                    Action d = deps[j];
                    if (sched_stage_rank(s, d.stage) != r || at(c, d.type, d.stage, d.mb) < i)
                        continue;
                    sched_action_format(d, text, sizeof text);
                    return check_fail(c, r, i, order_why(a, d), text);
                }
            }
    return PP_OK;
}

/* Sender stage and direction of the message a transfer action carries:
 * SEND_F(s)/RECV_F(s+1) carry F-message s; SEND_B(s)/RECV_B(s-1) carry B-message s. */
static int msg_stage(Action a) {
    return a.type == ACT_RECV_F ? a.stage - 1 : a.type == ACT_RECV_B ? a.stage + 1 : a.stage;
}
static int msg_is_b(Action a) { return a.type == ACT_SEND_B || a.type == ACT_RECV_B; }
/* Rank on the other end of a transfer. */
static int peer_rank(const Schedule *s, Action a) { return sched_stage_rank(s, peer_stage(a)); }

/* Index of rank `from`'s n-th transfer of kind send/recv with rank `to`. */
static int nth_transfer(const Schedule *s, int from, int to, int send, int n) {
    for (int i = 0; i < s->len[from]; i++) {
        Action a = s->acts[from][i];
        if ((send ? is_send(a.type) : is_recv(a.type)) && peer_rank(s, a) == to && n-- == 0)
            return i;
    }
    return -1;
}

/* FIFO per ordered rank pair: the k-th receive on b from a carries a's k-th send to b
 * ([Note: FIFO send order]). Ordinals are numbered per pair, F and B together. */
static int check_fifo(Check *c) {
    const Schedule *s = c->s;
    size_t n = (size_t)s->S * s->M;
    int *ord = pp_malloc(2 * n * sizeof(int)); /* [is_b][msg stage * M + mb] */
    int *count = pp_malloc((size_t)s->P * sizeof(int));
    int rc = PP_OK;
    for (int pass = 0; pass < 2 && rc == PP_OK; pass++) /* 0: sends, 1: receives */
        for (int r = 0; r < s->P && rc == PP_OK; r++) {
            memset(count, 0, (size_t)s->P * sizeof(int));
            for (int i = 0; i < s->len[r] && rc == PP_OK; i++) {
                Action a = s->acts[r][i];
                if (!(pass ? is_recv(a.type) : is_send(a.type))) continue;
                int peer = peer_rank(s, a), k = count[peer]++;
                size_t slot = (size_t)msg_is_b(a) * n + (size_t)msg_stage(a) * s->M + a.mb;
                if (!pass) {
                    ord[slot] = k;
                } else if (ord[slot] != k) {
                    int j = nth_transfer(s, peer, r, 1, k);
                    char other[SCHED_ACTION_TEXT_MAX] = "nothing";
                    if (j >= 0) sched_action_format(s->acts[peer][j], other, sizeof other);
                    if (j >= 0) c->mark[peer] = j;
                    rc = check_fail(c, r, i,
                                    "is receive #%d from rank %d, but rank %d's send #%d to rank %d"
                                    " is %s: each rank pair must receive in the order of the sends",
                                    k, peer, peer, k, r, other);
                }
            }
        }
    free(ord);
    free(count);
    return rc;
}

/* Whether every dependency of a has run (ran[type][stage * M + mb]). */
static int deps_ran(const Schedule *s, const uint8_t *ran, Action a) {
    Action deps[SCHED_MAX_DEPS];
    size_t n = (size_t)s->S * s->M;
    for (int j = 0, nd = sched_action_deps(s, a, deps); j < nd; j++)
        if (!ran[deps[j].type * n + (size_t)deps[j].stage * s->M + deps[j].mb]) return 0;
    return 1;
}

/* Replay all ranks, each action once its dependencies ran: with check_order passed,
 * only a RECV can wait (for its SEND), so this models blocking receives. Fails if
 * every unfinished rank is stuck (a wait cycle). */
static int check_no_wait_cycle(Check *c) {
    const Schedule *s = c->s;
    size_t n = (size_t)s->S * s->M;
    uint8_t *ran = pp_calloc(ACT_NTYPES * n, 1);
    int *ptr = pp_calloc((size_t)s->P, sizeof(int));
    int left = 0, rc = PP_OK;
    for (int r = 0; r < s->P; r++) left += s->len[r];
    while (left > 0) {
        int progressed = 0;
        for (int r = 0; r < s->P; r++)
            for (; ptr[r] < s->len[r]; ptr[r]++, left--, progressed = 1) {
                Action a = s->acts[r][ptr[r]];
                if (!deps_ran(s, ran, a)) break;
                ran[a.type * n + (size_t)a.stage * s->M + a.mb] = 1;
            }
        if (progressed) continue;
        for (int r = 0; r < s->P; r++) c->mark[r] = ptr[r] < s->len[r] ? ptr[r] : -1;
        rc = pp_errf(c->err, c->errlen, PP_EUSAGE,
                     "deadlock: every unfinished rank waits in a RECV whose SEND comes after"
                     " something that waits for it (the marked actions)");
        break;
    }
    free(ran);
    free(ptr);
    return rc;
}

/* Validate; on failure print the grid and leave the first marked rank in *where. */
static int validate_at(const Schedule *s, char *err, size_t errlen, FILE *grid, int *where) {
    Check c;
    check_init(&c, s, err, errlen);
    int rc = check_index(&c, 1);
    if (rc == PP_OK) rc = check_complete(&c, 1);
    if (rc == PP_OK) rc = check_order(&c);
    if (rc == PP_OK) rc = check_fifo(&c);
    if (rc == PP_OK) rc = check_no_wait_cycle(&c);
    if (where) *where = -1;
    if (rc != PP_OK) {
        for (int r = 0; r < s->P && where; r++)
            if (c.mark[r] >= 0 && *where < 0) *where = r;
        if (grid) sched_print_grid(s, c.mark, grid);
    }
    check_free(&c);
    return rc;
}

int sched_validate(const Schedule *s, char *err, size_t errlen, FILE *grid) {
    return validate_at(s, err, errlen, grid, NULL);
}

/* ================================================================= lowering === */

/* The lowering's state: emitted[type * S*M + stage * M + mb] for the compute types. */
static uint8_t *lower_flag(const Schedule *s, uint8_t *emitted, Action a) {
    return &emitted[(size_t)a.type * s->S * s->M + (size_t)a.stage * s->M + a.mb];
}

/* The compute whose result dependency d is: d itself, or the compute at the start of
 * a transfer chain (RECV_F(s,m) <- SEND_F(s-1,m) <- F(s-1,m)). */
static Action producer(const Schedule *s, Action d) {
    Action deps[SCHED_MAX_DEPS];
    while (!sched_is_compute(d.type) && sched_action_deps(s, d, deps) == 1) d = deps[0];
    return d;
}

/* Compute action a can be emitted: the producer of each dependency has been (its
 * transfer, if any, was emitted with it). */
static int lower_ready(const Schedule *s, uint8_t *emitted, Action a) {
    Action deps[SCHED_MAX_DEPS];
    for (int j = 0, n = sched_action_deps(s, a, deps); j < n; j++)
        if (!*lower_flag(s, emitted, producer(s, deps[j]))) return 0;
    return 1;
}

/* Emit compute action a on rank r into out, and the transfer its result needs. */
static void lower_emit(Schedule *out, uint8_t *emitted, int r, Action a) {
    Action send, recv;
    sched_append(out, r, a);
    *lower_flag(out, emitted, a) = 1;
    if (transfer_of(out, a, &send, &recv)) {
        sched_append(out, r, send);
        sched_append(out, sched_stage_rank(out, recv.stage), recv);
    }
}

/* Message for ranks stuck at pos[r]; marks them. */
static int lower_stuck(const Schedule *s, uint8_t *emitted, const int *pos, int *mark,
                       char *err, size_t errlen) {
    pp_errf(err, errlen, PP_EUSAGE, "deadlock: no rank can run its next action:");
    for (int r = 0; r < s->P; r++) {
        mark[r] = pos[r] < s->len[r] ? pos[r] : -1;
        if (mark[r] < 0) continue;
        Action a = s->acts[r][pos[r]];
        char text[SCHED_ACTION_TEXT_MAX];
        sched_action_format(a, text, sizeof text);
        int forward_done = *lower_flag(s, emitted, act(ACT_F, a.stage, a.mb));
        const char *why = a.type == ACT_F ? "for its input from the previous stage"
                        : a.type == ACT_W ? "for its input-gradient half I"
                        : !forward_done ? "for its own forward"
                        : "for the gradient from the next stage";
        pp_strappendf(err, errlen, " rank %d waits at %s %s;", r, text, why);
    }
    return PP_EUSAGE;
}

/* Lower s into out (initialised with s's placement, empty); on deadlock mark[r] flags
 * rank r's stuck action. */
static int lower_into(const Schedule *s, Schedule *out, int *mark, char *err, size_t errlen) {
    uint8_t *emitted = pp_calloc(ACT_NTYPES * (size_t)s->S * s->M, 1); /* compute types */
    int *pos = pp_calloc((size_t)s->P, sizeof(int));
    int left = 0, rc = PP_OK;
    for (int r = 0; r < s->P; r++) left += s->len[r];
    while (left > 0 && rc == PP_OK) {
        int progressed = 0;
        for (int r = 0; r < s->P; r++) { /* lock step: one compute action per rank */
            if (pos[r] == s->len[r] || !lower_ready(s, emitted, s->acts[r][pos[r]])) continue;
            lower_emit(out, emitted, r, s->acts[r][pos[r]++]);
            left--;
            progressed = 1;
        }
        if (!progressed) rc = lower_stuck(s, emitted, pos, mark, err, errlen);
    }
    free(emitted);
    free(pos);
    return rc;
}

/* The keep marks of a lowered schedule ([Note: schedule-aware recompute]): F(s,m) keeps
 * everything when the next compute action of its rank is the backward of (s,m). */
static void mark_keep(Schedule *s) {
    memset(s->keep, 0, (size_t)s->S * s->M);
    if (s->forward_only) return;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action f = s->acts[r][i];
            if (f.type != ACT_F) continue;
            int j = i + 1;
            while (j < s->len[r] && !sched_is_compute(s->acts[r][j].type)) j++;
            if (j == s->len[r]) continue;
            Action b = s->acts[r][j];
            if ((b.type == ACT_B || b.type == ACT_I) && b.stage == f.stage && b.mb == f.mb)
                s->keep[(size_t)f.stage * s->M + f.mb] = 1;
        }
}

static int lower_at(Schedule *s, char *err, size_t errlen, FILE *grid, int *where) {
    Check c;
    Schedule out;
    if (where) *where = -1;
    if (s->lowered) return pp_errf(err, errlen, PP_EUSAGE, "schedule is already lowered");
    check_init(&c, s, err, errlen);
    int rc = check_index(&c, 0);
    if (rc == PP_OK) rc = check_complete(&c, 0);
    if (rc == PP_OK) rc = check_order(&c);
    if (rc == PP_OK) {
        sched_init(&out, s->name, s->P, s->v, s->M, NULL, 0);
        sched_set_placement(&out, s->stage_rank, NULL, 0); /* s's own: valid */
        memcpy(out.split, s->split, (size_t)s->S * s->M); /* before any I reaches out */
        out.forward_only = s->forward_only;
        rc = lower_into(s, &out, c.mark, err, errlen);
        if (rc == PP_OK) {
            sched_free(s);
            *s = out;
            s->lowered = 1;
            mark_keep(s);
        } else {
            sched_free(&out);
        }
    }
    if (rc != PP_OK) {
        for (int r = 0; r < s->P && where; r++)
            if (c.mark[r] >= 0 && *where < 0) *where = r;
        if (grid) sched_print_grid(s, c.mark, grid);
    }
    check_free(&c);
    return rc;
}

int sched_lower(Schedule *s, char *err, size_t errlen, FILE *grid) {
    return lower_at(s, err, errlen, grid, NULL);
}

/* ===================================================================== grid === */

/* Grid of the lists for error reports (declared in sched.h, used by the validator,
 * the lowering and the simulator: here, beside them, so that nothing below calls up). */
void sched_print_grid(const Schedule *s, const int *mark, FILE *f) {
    char text[SCHED_ACTION_TEXT_MAX + 2];
    int width = 8, rows = 0;
    for (int r = 0; r < s->P; r++) {
        if (s->len[r] > rows) rows = s->len[r];
        for (int i = 0; i < s->len[r]; i++) {
            int n = sched_action_format(s->acts[r][i], text, sizeof text) + 3;
            if (n > width) width = n;
        }
    }
    fprintf(f, "schedule %s (P=%d, v=%d, M=%d) as a grid%s\n", s->name, s->P, s->v, s->M,
            mark ? "; * marks the offending action" : "");
    fprintf(f, " step");
    for (int r = 0; r < s->P; r++) fprintf(f, " | rank %-*d", width - 6, r);
    fputc('\n', f);
    for (int i = 0; i < rows; i++) {
        fprintf(f, "%5d", i);
        for (int r = 0; r < s->P; r++) {
            char cell[SCHED_ACTION_TEXT_MAX + 4] = "";
            if (i < s->len[r]) {
                sched_action_format(s->acts[r][i], text, sizeof text);
                int marked = mark && mark[r] == i;
                snprintf(cell, sizeof cell, "%s%s%s", marked ? "*" : " ", text, marked ? "*" : "");
            }
            fprintf(f, " |%-*s", width, cell);
        }
        fputc('\n', f);
    }
}

/* =============================================================== properties === */

/* Slots held at once on rank `rank` ([Note: activation slots]), of stage `stage`
 * only or of all its stages (-1): the first F of (stage, m) takes a slot,
 * sched_action_frees gives slots back. */
static int peak_replay(const Schedule *s, int rank, int stage, int keep) {
    uint8_t *held = pp_calloc((size_t)s->S * s->M, 1); /* [stage * M + mb] */
    int cur = 0, peak = 0, freed[2];
    for (int i = 0; i < s->len[rank]; i++) {
        Action a = s->acts[rank][i];
        size_t k = (size_t)a.stage * s->M + a.mb;
        if (a.type == ACT_F && (stage < 0 || a.stage == stage) &&
            (keep < 0 || s->keep[k] == keep) && !held[k]) {
            held[k] = 1;
            if (++cur > peak) peak = cur;
        }
        for (int j = 0, n = sched_action_frees(s, a, freed); j < n; j++) {
            k = (size_t)freed[j] * s->M + a.mb;
            if ((stage < 0 || freed[j] == stage) && held[k]) {
                held[k] = 0;
                cur--;
            }
        }
    }
    free(held);
    return peak;
}

int sched_peak_inflight(const Schedule *s, int stage) {
    return peak_replay(s, sched_stage_rank(s, stage), stage, -1);
}

int sched_peak_inflight_kept(const Schedule *s, int stage, int keep) {
    return peak_replay(s, sched_stage_rank(s, stage), stage, keep);
}

int sched_peak_inflight_rank(const Schedule *s, int rank) { return peak_replay(s, rank, -1, -1); }

int sched_peak_inflight_rank_kept(const Schedule *s, int rank, int keep) {
    return peak_replay(s, rank, -1, keep);
}

void sched_recompute_count(const Schedule *s, int stage, int *run, int *skipped) {
    int r = sched_stage_rank(s, stage);
    *run = *skipped = 0;
    for (int i = 0; i < s->len[r]; i++) {
        Action a = s->acts[r][i];
        if (a.stage != stage || (a.type != ACT_B && a.type != ACT_I && a.type != ACT_W)) continue;
        if (s->keep[(size_t)a.stage * s->M + a.mb]) ++*skipped;
        else ++*run;
    }
}

int sched_peak_pending_w(const Schedule *s, int stage) {
    int r = sched_stage_rank(s, stage), pending = 0, peak = 0;
    for (int i = 0; i < s->len[r]; i++) {
        Action a = s->acts[r][i];
        if (a.stage != stage) continue;
        if (a.type == ACT_I && ++pending > peak) peak = pending;
        if (a.type == ACT_W && pending > 0) pending--;
    }
    return peak;
}

int sched_peak_recv(const Schedule *s, int stage) {
    int r = sched_stage_rank(s, stage), held = 0, peak = 0;
    Action deps[SCHED_MAX_DEPS];
    for (int i = 0; i < s->len[r]; i++) {
        Action a = s->acts[r][i];
        if (a.stage != stage) continue;
        if (a.type == ACT_RECV_F && ++held > peak) peak = held;
        if (a.type != ACT_F) continue;
        for (int j = 0, n = sched_action_deps(s, a, deps); j < n; j++)
            if (deps[j].type == ACT_RECV_F && held > 0) held--; /* F consumed the buffer */
    }
    return peak;
}

/* =============================================================== text files === */

void sched_write(const Schedule *s, FILE *f) {
    char text[SCHED_ACTION_TEXT_MAX];
    fprintf(f, "# pptrain schedule %s: P=%d ranks, v=%d chunks per rank, M=%d microbatches%s\n",
            s->name, s->P, s->v, s->M, s->lowered ? " (lowered)" : " (compute only)");
    for (int r = 0; r < s->P; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->len[r]; i++) {
            sched_action_format(s->acts[r][i], text, sizeof text);
            fprintf(f, " %s", text);
        }
        fputc('\n', f);
    }
}

/* Parse one rank's line (comment already cut) into s; 1-based `line` for messages. */
static int load_line(Schedule *s, char *text, int rank, const char *origin, int line,
                     char *err, size_t errlen) {
    char *p = text, *save = NULL;
    long named;
    while (isspace((unsigned char)*p)) p++;
    if (!strncmp(p, "rank", 4) && isspace((unsigned char)p[4])) {
        char *end;
        named = strtol(p + 4, &end, 10);
        if (end == p + 4 || *end != ':')
            return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: expected 'rank %d:'", origin, line,
                           rank);
        if (named != rank)
            return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: line says rank %ld, but it is the line"
                           " of rank %d (one line per rank, in order)", origin, line, named, rank);
        p = end + 1;
    }
    for (char *tok = strtok_r(p, " \t\r\n,", &save); tok; tok = strtok_r(NULL, " \t\r\n,", &save)) {
        Action a;
        if (sched_action_parse(tok, &a) != PP_OK)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s:%d: bad action '%s' (expected <stage><TYPE><microbatch>, e.g. 1F0, "
                           "2B3, 2I3, 2W3, 0SEND_F1, 3RECV_B2)",
                           origin, line, tok);
        const char *why = placement_error(s, rank, a);
        if (why)
            return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: action %s on rank %d: %s (P=%d, v=%d,"
                           " M=%d)", origin, line, tok, rank, why, s->P, s->v, s->M);
        sched_append(s, rank, a);
        if (!sched_is_compute(a.type)) s->lowered = 1;
    }
    return PP_OK;
}

/* Split text into rank lines; lines[r] is the 1-based line number of rank r. */
static int load_lines(Schedule *s, const char *text, const char *origin, int *lines,
                      char *err, size_t errlen) {
    char *copy = strdup(text), *next = copy;
    int rank = 0, line = 0, rc = PP_OK;
    PP_CHECK(copy != NULL);
    while (next && rc == PP_OK) {
        char *p = next;
        next = strchr(p, '\n');
        if (next) *next++ = '\0';
        line++;
        char *hash = strchr(p, '#');
        if (hash) *hash = '\0';
        if (strspn(p, " \t\r,") == strlen(p)) continue; /* blank or comment only */
        if (rank >= s->P) {
            rc = pp_errf(err, errlen, PP_EUSAGE, "%s:%d: more rank lines than pipeline.stages=%d",
                         origin, line, s->P);
            break;
        }
        lines[rank] = line;
        rc = load_line(s, p, rank++, origin, line, err, errlen);
    }
    free(copy);
    if (rc == PP_OK && rank != s->P)
        rc = pp_errf(err, errlen, PP_EUSAGE, "%s: %d rank line%s, but pipeline.stages=%d (one line"
                     " of actions per rank)", origin, rank, rank == 1 ? "" : "s", s->P);
    return rc;
}

int sched_load_text(Schedule *s, const char *text, const char *origin, int P, int v, int M,
                    char *err, size_t errlen, FILE *grid) {
    char why[PP_ERR_MAX];
    int rc = sched_init(s, "file", P, v, M, err, errlen), where = -1;
    if (rc != PP_OK) return rc;
    int *lines = pp_calloc((size_t)P, sizeof(int));
    rc = load_lines(s, text, origin, lines, err, errlen);
    if (rc == PP_OK) { /* lowering and validation report a rank: name its line */
        if (!s->lowered) rc = lower_at(s, why, sizeof why, grid, &where);
        if (rc == PP_OK) rc = validate_at(s, why, sizeof why, grid, &where);
        if (rc == PP_OK) mark_keep(s); /* again if lowered here: the same marks */
        if (rc != PP_OK && where >= 0)
            pp_errf(err, errlen, rc, "%s:%d: %s", origin, lines[where], why);
        else if (rc != PP_OK)
            pp_errf(err, errlen, rc, "%s: %s", origin, why);
    }
    free(lines);
    if (rc != PP_OK) sched_free(s);
    return rc;
}

int sched_load_file(Schedule *s, const char *path, int P, int v, int M, char *err,
                    size_t errlen) {
    char *text, why[PP_ERR_MAX];
    size_t len;
    memset(s, 0, sizeof *s);
    if (pp_read_file(path, NULL, &text, &len, why, sizeof why) != PP_OK)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.schedule_file: %s", why);
    int rc = sched_load_text(s, text, path, P, v, M, err, errlen, stderr);
    free(text);
    return rc;
}
