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

static int is_compute(int type) { return type == ACT_F || type == ACT_B; }
static int is_send(int t) { return t == ACT_SEND_F || t == ACT_SEND_B; }
static int is_recv(int t) { return t == ACT_RECV_F || t == ACT_RECV_B; }

/* Stage on the other end of a transfer ([Note: action semantics]); a's own otherwise. */
static int peer_stage(Action a) {
    if (a.type == ACT_SEND_F || a.type == ACT_RECV_B) return a.stage + 1;
    return a.type == ACT_RECV_F || a.type == ACT_SEND_B ? a.stage - 1 : a.stage;
}

/* Append printf-style text to a message buffer, truncating silently. */
static void msg_append(char *err, size_t n, const char *fmt, ...) {
    size_t used = err ? strlen(err) : 0;
    if (!err || used + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + used, n - used, fmt, ap);
    va_end(ap);
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
    s->P = P, s->v = v, s->M = M, s->S = P * v;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->len = pp_calloc((size_t)P, sizeof *s->len);
    s->cap = pp_calloc((size_t)P, sizeof *s->cap);
    s->acts = pp_calloc((size_t)P, sizeof *s->acts);
    s->stage_rank = pp_calloc((size_t)s->S, sizeof *s->stage_rank);
    s->stage_chunk = pp_calloc((size_t)s->S, sizeof *s->stage_chunk);
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
}

void sched_free(Schedule *s) {
    if (s->acts)
        for (int r = 0; r < s->P; r++) free(s->acts[r]);
    free(s->acts);
    free(s->len);
    free(s->cap);
    free(s->stage_rank);
    free(s->stage_chunk);
    memset(s, 0, sizeof *s);
}

/* ====================================================== what an action means === */

int sched_action_deps(const Schedule *s, Action a, Action deps[SCHED_MAX_DEPS]) {
    int st = a.stage, m = a.mb, n = 0;
    memset(deps, 0, SCHED_MAX_DEPS * sizeof *deps); /* all defined: quiet -Wmaybe-uninitialized */
    switch (a.type) {
    case ACT_F: /* its input: the tokens, the local stage below, or a receive */
        if (st > 0)
            deps[n++] = same_rank(s, st - 1, st) ? act(ACT_F, st - 1, m) : act(ACT_RECV_F, st, m);
        return n;
    case ACT_B: /* its forward, and its output gradient: the loss, local, or received */
        deps[n++] = act(ACT_F, st, m);
        if (st + 1 < s->S)
            deps[n++] = same_rank(s, st + 1, st) ? act(ACT_B, st + 1, m) : act(ACT_RECV_B, st, m);
        return n;
    case ACT_SEND_F: deps[0] = act(ACT_F, st, m); return 1;
    case ACT_SEND_B: deps[0] = act(ACT_B, st, m); return 1;
    case ACT_RECV_F: deps[0] = act(ACT_SEND_F, st - 1, m); return 1;
    case ACT_RECV_B: deps[0] = act(ACT_SEND_B, st + 1, m); return 1;
    default: return -1; /* I, W: reserved */
    }
}

int sched_action_frees(const Schedule *s, Action a, int stages[2]) {
    int st = a.stage, n = 0;
    if (s->forward_only) {
        if (a.type == ACT_SEND_F) stages[n++] = st;
        if (a.type == ACT_F && st == s->S - 1) stages[n++] = st;
        if (a.type == ACT_F && st > 0 && same_rank(s, st - 1, st)) stages[n++] = st - 1;
    } else {
        if (a.type == ACT_SEND_B) stages[n++] = st;
        if (a.type == ACT_B && (st == 0 || same_rank(s, st - 1, st))) stages[n++] = st;
    }
    return n;
}

/* The compute on the neighbouring stage that reads compute a's result: F(s,m) ->
 * F(s+1,m), B(s,m) -> B(s-1,m); 0 at the ends of the pipeline. */
static int next_compute(const Schedule *s, Action a, Action *next) {
    int to = a.type == ACT_F ? a.stage + 1 : a.stage - 1;
    if (to < 0 || to >= s->S) return 0;
    *next = act(a.type, to, a.mb);
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

/* =============================================================== generators === */

/* [Note: the 1F1B family]
 * GPipe, 1F1B and interleaved 1F1B all give each rank the same three phases:
 * `warmup` forwards, then alternately one forward and one backward until the
 * forwards run out, then the remaining backwards. They differ only in the warm-up
 * count and in the order in which a rank visits its (chunk, microbatch) pairs:
 *  - GPipe: warmup = all v*M forwards (all forwards, then all backwards).
 *  - 1F1B (PipeDream-Flush, Narayanan et al. 2019/2021): warmup = P-1-r on rank r.
 *  - interleaved (Megatron-LM, Narayanan et al. SC'21, §2.2.2): microbatches go in
 *    groups of P; within a group the rank runs the forwards of chunk 0 for every
 *    microbatch of the group, then those of chunk 1, ...; backwards visit the chunks
 *    in the reverse order. warmup = (v-1)*G + 2*(P-1-r), G the group size: the last
 *    rank starts its first backward right after its last chunk's forward of the
 *    group's first microbatch, and each rank further away needs two more forwards
 *    to cover the round trip of that gradient. Its row asks for v >= 2: with one
 *    chunk per rank Megatron runs the non-interleaved schedule, which is 1f1b.
 *    When P does not divide M (torch and Megatron allow it) the last group also
 *    takes the remainder, and G in the warm-up is that largest group (M when
 *    M < 2P). A group smaller than P would make chunk c+1's forward wait for the
 *    same microbatch to travel around all P ranks while the rank is held in the
 *    1F1B steady state: that deadlocks (e.g. P=4, v=3, M=5 with a trailing group of
 *    one). With these rules every P, M >= 1 and v >= 2 lowers without deadlock (the
 *    tests check P <= 8, v <= 4, M <= 32) and for M >= P the makespan meets the
 *    published bubble (P-1)/(v*M+P-1); only M < P leaves a larger bubble.
 * All three use looped placement ([Note: stages and placement]): the warm-up counts
 * assume the stage after chunk c of rank P-1 is chunk c+1 of rank 0. */

/* Microbatch groups of P; the last group takes the remainder. */
static int group_count(int P, int M) { return M / P > 1 ? M / P : 1; }

/* k-th forward (backward when `backward`) of a rank in grouped order. */
static void grouped_order(int P, int v, int M, int k, int backward, int *chunk, int *mb) {
    int groups = group_count(P, M);
    int g = k / (v * P) < groups - 1 ? k / (v * P) : groups - 1;
    int first = g * P;
    int size = g == groups - 1 ? M - first : P;
    int off = k - first * v;
    int c = off / size;
    *chunk = backward ? v - 1 - c : c;
    *mb = first + off % size;
}

static void emit_compute(Schedule *s, int r, int type, int k) {
    int chunk, mb;
    grouped_order(s->P, s->v, s->M, k, type == ACT_B, &chunk, &mb);
    sched_append(s, r, act(type, sched_rank_stage(s, r, chunk), mb));
}

/* Rank r's compute list: warm-up forwards, 1F1B steady state, cool-down backwards. */
static void emit_1f1b_family(Schedule *s, int r, int warmup) {
    int total = s->v * s->M, nf = 0, nb = 0;
    if (warmup > total) warmup = total;
    if (warmup < 0) warmup = 0;
    while (nf < warmup) emit_compute(s, r, ACT_F, nf++);
    while (nf < total) {
        emit_compute(s, r, ACT_F, nf++);
        emit_compute(s, r, ACT_B, nb++);
    }
    while (nb < total) emit_compute(s, r, ACT_B, nb++);
}

static void gen_gpipe(Schedule *s) {
    for (int r = 0; r < s->P; r++) emit_1f1b_family(s, r, s->v * s->M);
}

static void gen_1f1b(Schedule *s) {
    for (int r = 0; r < s->P; r++) emit_1f1b_family(s, r, s->P - 1 - r);
}

static void gen_interleaved(Schedule *s) {
    int G = s->M - (group_count(s->P, s->M) - 1) * s->P; /* largest group: the last */
    for (int r = 0; r < s->P; r++) emit_1f1b_family(s, r, (s->v - 1) * G + 2 * (s->P - 1 - r));
}

/* Bubble fraction = idle / (P * makespan) with uniform F, B and free transfers. */
static double bubble_flat(int P, int v, int M, const char **formula) {
    if (formula) *formula = "(P-1)/(M+P-1)";
    return (double)(P - 1) / (M + P - 1);
}

static double bubble_interleaved(int P, int v, int M, const char **formula) {
    if (formula) *formula = "(P-1)/(v*M+P-1)";
    if (M < P) return -1; /* chunk c+1 waits for chunk c to cross all ranks */
    return (double)(P - 1) / ((double)v * M + P - 1);
}

/* The kind table: the one list of schedule kinds ([Note: the 1F1B family]). With
 * one chunk per rank, interleaving is 1f1b: that kind is the one to use. */
static const SchedKindInfo KINDS[] = {
    {"gpipe", 1, 1, "interleaved-1f1b", sched_place_looped, gen_gpipe, bubble_flat},
    {"1f1b", 1, 1, "interleaved-1f1b", sched_place_looped, gen_1f1b, bubble_flat},
    {"interleaved-1f1b", 2, INT_MAX, "1f1b", sched_place_looped, gen_interleaved,
     bubble_interleaved},
};
#define NKINDS ((int)(sizeof KINDS / sizeof KINDS[0]))

const char *const *sched_kinds(void) {
    static const char *names[NKINDS + 1]; /* the last stays NULL */
    for (int i = 0; i < NKINDS; i++) names[i] = KINDS[i].name;
    return names;
}

const SchedKindInfo *sched_kind_find(const char *name) {
    for (int i = 0; i < NKINDS; i++)
        if (!strcmp(KINDS[i].name, name)) return &KINDS[i];
    return NULL;
}

int sched_kind_check(const char *kind, int P, int v, int M, char *err, size_t errlen) {
    const SchedKindInfo *k = sched_kind_find(kind);
    char text[128] = "";
    if (!k) {
        for (int i = 0; i < NKINDS; i++)
            msg_append(text, sizeof text, "%s%s", i ? ", " : "", KINDS[i].name);
        return pp_errf(err, errlen, PP_EUSAGE, "unknown schedule '%s' (known: %s)", kind, text);
    }
    if (v > k->v_max) {
        if (k->v_max == 1) snprintf(text, sizeof text, "one model chunk");
        else snprintf(text, sizeof text, "%d model chunks", k->v_max);
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.virtual_stages is %d but pipeline."
                       "schedule is %s: more than %s per rank needs schedule %s (or set"
                       " virtual_stages: %d)", v, kind, text, k->instead, k->v_max);
    }
    if (v < k->v_min)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.schedule %s needs pipeline."
                       "virtual_stages >= %d (got %d): set virtual_stages to %d or more, or use"
                       " schedule %s", kind, k->v_min, v, k->v_min, k->instead);
    return PP_OK;
}

int sched_generate(Schedule *s, const char *kind, int P, int v, int M, char *err,
                   size_t errlen) {
    const SchedKindInfo *k = sched_kind_find(kind);
    memset(s, 0, sizeof *s);
    if (!k) return sched_kind_check(kind, P, v, M, err, errlen); /* names the known kinds */
    int rc = sched_init(s, kind, P, v, M, err, errlen);
    if (rc == PP_OK) rc = sched_kind_check(kind, P, v, M, err, errlen);
    if (rc == PP_OK) { /* the row's placement */
        int *table = pp_malloc((size_t)s->S * sizeof *table);
        k->place(P, v, table);
        rc = sched_set_placement(s, table, err, errlen);
        free(table);
    }
    if (rc != PP_OK) {
        sched_free(s);
        return rc;
    }
    k->generate(s);
    return PP_OK;
}

double sched_bubble_closed_form(const Schedule *s, const char **formula) {
    const SchedKindInfo *k = s->forward_only ? NULL : sched_kind_find(s->name);
    if (formula) *formula = "";
    return k ? k->bubble(s->P, s->v, s->M, formula) : -1;
}

/* ============================================================ action checks === */

/* Where each action sits: pos[type][s*M + m] = its index in its rank's list or -1.
 * Only the six implemented types are indexed. mark[r] flags the offending action of
 * rank r for the grid (-1: none). */
typedef struct {
    const Schedule *s;
    int *pos[ACT_RECV_B + 1];
    int *mark;
    char *err;
    size_t errlen;
} Check;

static void check_init(Check *c, const Schedule *s, char *err, size_t errlen) {
    size_t n = (size_t)s->S * s->M;
    c->s = s, c->err = err, c->errlen = errlen;
    for (int t = 0; t <= ACT_RECV_B; t++) {
        c->pos[t] = pp_malloc(n * sizeof(int));
        for (size_t i = 0; i < n; i++) c->pos[t][i] = -1;
    }
    c->mark = pp_malloc((size_t)s->P * sizeof(int));
    for (int r = 0; r < s->P; r++) c->mark[r] = -1;
    if (err && errlen) err[0] = '\0';
}

static void check_free(Check *c) {
    for (int t = 0; t <= ACT_RECV_B; t++) free(c->pos[t]);
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
    if (a.type == ACT_I || a.type == ACT_W)
        return "I/W actions are reserved for zero-bubble schedules and not supported yet";
    if (a.type >= ACT_NTYPES) return "unknown action type";
    if (st < 0 || st >= s->S) return "stage out of range (0 <= stage < P*v)";
    if (a.mb < 0 || a.mb >= s->M) return "microbatch out of range (0 <= mb < M)";
    if (sched_stage_rank(s, st) != r)
        return placed_looped(s) ? "its stage lives on another rank (stage mod P)"
                                : "its stage lives on another rank (see the placement)";
    if (s->forward_only && (a.type == ACT_B || a.type == ACT_SEND_B || a.type == ACT_RECV_B))
        return "a forward-only schedule has no backward actions";
    int peer = peer_stage(a);
    if (peer < 0 || peer >= s->S) return "there is no stage on the other end";
    if (!is_compute(a.type) && sched_stage_rank(s, peer) == r)
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
            if (!lowered && !is_compute(a.type))
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

/* Every F and B present once; with `lowered`, every cross-rank edge has its SEND
 * and its RECV. A missing action is reported at the one it belongs with. */
static int check_complete(Check *c, int lowered) {
    const Schedule *s = c->s;
    for (int st = 0; st < s->S; st++)
        for (int m = 0; m < s->M; m++) {
            int r = sched_stage_rank(s, st), f = at(c, ACT_F, st, m), b = at(c, ACT_B, st, m);
            if (f < 0)
                return pp_errf(c->err, c->errlen, PP_EUSAGE,
                               "rank %d has no %dF%d: every stage runs every microbatch", r, st, m);
            if (!s->forward_only && b < 0)
                return check_fail(c, r, f, "has no backward %dB%d", st, m);
            if (!lowered) continue;
            int rc = check_transfer(c, r, act(ACT_F, st, m), f, "output");
            if (rc == PP_OK && !s->forward_only)
                rc = check_transfer(c, r, act(ACT_B, st, m), b, "gradient");
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
    return d.type == ACT_F ? "runs before its forward %s" : "runs before the gradient from %s";
}

/* On one rank: each action after its dependencies on that rank (sched_action_deps);
 * those on other ranks are check_no_wait_cycle's. Absent actions are check_complete's. */
static int check_order(Check *c) {
    static const int order[] = {ACT_F, ACT_SEND_F, ACT_RECV_F, ACT_B, ACT_SEND_B, ACT_RECV_B};
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
    uint8_t *ran = pp_calloc((ACT_RECV_B + 1) * n, 1);
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
    while (!is_compute(d.type) && sched_action_deps(s, d, deps) == 1) d = deps[0];
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
                        : !forward_done ? "for its own forward"
                        : "for the gradient from the next stage";
        msg_append(err, errlen, " rank %d waits at %s %s;", r, text, why);
    }
    return PP_EUSAGE;
}

/* Lower s into out (initialised with s's placement, empty); on deadlock mark[r] flags
 * rank r's stuck action. */
static int lower_into(const Schedule *s, Schedule *out, int *mark, char *err, size_t errlen) {
    uint8_t *emitted = pp_calloc(2 * (size_t)s->S * s->M, 1); /* F and B */
    int *pos = pp_calloc((size_t)s->P, sizeof(int));
    int left = 0, rc = PP_OK;
    for (int r = 0; r < s->P; r++) left += s->len[r];
    while (left > 0 && rc == PP_OK) {
        int progressed = 0;
        for (int r = 0; r < s->P; r++) { /* lock step: one compute action per rank */
            if (pos[r] == s->len[r] || !lower_ready(s, emitted, s->acts[r][pos[r]])) continue;
            lower_emit(out, emitted, r, s->acts[r][pos[r]++]);
            left--, progressed = 1;
        }
        if (!progressed) rc = lower_stuck(s, emitted, pos, mark, err, errlen);
    }
    free(emitted), free(pos);
    return rc;
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
        out.forward_only = s->forward_only;
        rc = lower_into(s, &out, c.mark, err, errlen);
        if (rc == PP_OK) {
            sched_free(s);
            *s = out;
            s->lowered = 1;
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

/* =================================================================== builds === */

/* Lower and validate a freshly generated schedule; failures here are bugs. */
static int finish_generated(Schedule *s, char *err, size_t errlen) {
    char why[PP_ERR_MAX];
    int rc = sched_lower(s, why, sizeof why, stderr);
    if (rc == PP_OK) rc = sched_validate(s, why, sizeof why, stderr);
    if (rc == PP_OK) return PP_OK;
    pp_errf(err, errlen, PP_ERUNTIME, "internal error: generated schedule %s (P=%d v=%d M=%d)"
            " is invalid: %s", s->name, s->P, s->v, s->M, why);
    sched_free(s);
    return PP_ERUNTIME;
}

int sched_build(Schedule *s, const char *kind, int P, int v, int M, char *err,
                size_t errlen) {
    int rc = sched_generate(s, kind, P, v, M, err, errlen);
    return rc == PP_OK ? finish_generated(s, err, errlen) : rc;
}

int sched_build_forward_only(Schedule *s, const Schedule *train, char *err, size_t errlen) {
    int rc = sched_init(s, "forward-only", train->P, train->v, train->M, err, errlen);
    if (rc == PP_OK) rc = sched_set_placement(s, train->stage_rank, err, errlen);
    if (rc != PP_OK) {
        sched_free(s);
        return rc;
    }
    s->forward_only = 1;
    for (int r = 0; r < s->P; r++)
        for (int k = 0; k < s->v * s->M; k++) emit_compute(s, r, ACT_F, k);
    return finish_generated(s, err, errlen);
}

/* =============================================================== properties === */

/* Slots held at once on rank `rank` ([Note: activation slots]), of stage `stage`
 * only or of all its stages (-1): the first F of (stage, m) takes a slot,
 * sched_action_frees gives slots back. */
static int peak_replay(const Schedule *s, int rank, int stage) {
    uint8_t *held = pp_calloc((size_t)s->S * s->M, 1); /* [stage * M + mb] */
    int cur = 0, peak = 0, freed[2];
    for (int i = 0; i < s->len[rank]; i++) {
        Action a = s->acts[rank][i];
        size_t k = (size_t)a.stage * s->M + a.mb;
        if (a.type == ACT_F && (stage < 0 || a.stage == stage) && !held[k]) {
            held[k] = 1;
            if (++cur > peak) peak = cur;
        }
        for (int j = 0, n = sched_action_frees(s, a, freed); j < n; j++) {
            k = (size_t)freed[j] * s->M + a.mb;
            if ((stage < 0 || freed[j] == stage) && held[k]) held[k] = 0, cur--;
        }
    }
    free(held);
    return peak;
}

int sched_peak_inflight(const Schedule *s, int stage) {
    return peak_replay(s, sched_stage_rank(s, stage), stage);
}

int sched_peak_inflight_rank(const Schedule *s, int rank) { return peak_replay(s, rank, -1); }

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
            return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: bad action '%s' (expected <stage><TYPE>"
                           "<microbatch>, e.g. 1F0, 2B3, 0SEND_F1, 3RECV_B2)", origin, line, tok);
        const char *why = placement_error(s, rank, a);
        if (why)
            return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: action %s on rank %d: %s (P=%d, v=%d,"
                           " M=%d)", origin, line, tok, rank, why, s->P, s->v, s->M);
        sched_append(s, rank, a);
        if (!is_compute(a.type)) s->lowered = 1;
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
