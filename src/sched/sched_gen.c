/* sched_gen.c — the schedule generators (pure functions of P, v, M) and the table of
 * schedule kinds; the IR, lowering and validator they feed are in sched.c. */
#include "sched.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static Action act(int type, int stage, int mb) {
    Action a = {(uint8_t)type, (int16_t)stage, (int32_t)mb};
    return a;
}

/* ============================================================ the 1F1B family === */

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

/* Rank r's k-th forward of the interleaved order (chunk-major groups of P microbatches,
 * [Note: the 1F1B family]): sched_build_forward_only's order. */
static void gen_forward(Schedule *s, int r, int k) { emit_compute(s, r, ACT_F, k); }

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

/* ================================================================ looped BFS === */

/* [Note: looped BFS] torch.distributed.pipelining's ScheduleLoopedBFS (breadth-first
 * pipeline parallelism, Lamy-Poirier 2021): on looped placement each rank runs every
 * microbatch's forward of its chunk 0, then of chunk 1, ..., then the backwards chunk
 * by chunk in reverse (microbatches in increasing order, so weight gradients add up in
 * microbatch order as in every other schedule). Memory is GPipe's (all v*M chunk
 * activations); what it buys is fewer, larger batches per chunk. Closed form with
 * uniform F, B and free transfers: a chunk's forward wave reaches the next chunk of
 * rank 0 after max(M, P) forwards, so the makespan is
 * (F+B) * ((v-1) * max(M, P) + M + P - 1): for M >= P the bubble is
 * (P-1)/(v*M+P-1), interleaved 1F1B's. */
static void gen_looped_bfs(Schedule *s) {
    for (int r = 0; r < s->P; r++) {
        for (int c = 0; c < s->v; c++)
            for (int m = 0; m < s->M; m++)
                sched_append(s, r, act(ACT_F, sched_rank_stage(s, r, c), m));
        for (int c = s->v - 1; c >= 0; c--)
            for (int m = 0; m < s->M; m++)
                sched_append(s, r, act(ACT_B, sched_rank_stage(s, r, c), m));
    }
}

static double bubble_looped_bfs(int P, int v, int M, const char **formula) {
    if (formula) *formula = "((v-1)max(M,P)+M+P-1-v*M)/((v-1)max(M,P)+M+P-1)";
    double span = (double)(v - 1) * (M > P ? M : P) + M + P - 1;
    return (span - (double)v * M) / span;
}

/* ============================================================ zero bubble === */

/* [Note: zero-bubble schedules] Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
 * 2024: a backward splits into I (the gradient of the stage input, which the previous
 * stage waits for) and W (the weight gradients, which nothing waits for), so W can
 * fill the idle time 1F1B leaves. Closed forms below are for F = I = W = 1 (the
 * simulator's --costs F=1,B=1,W=1,X=0) and free transfers.
 *
 * ZB-H1 (the paper's §3.1, "ZB-H1"): rank r warms up with 1F1B's P-1-r forwards, then
 * runs F, I and W per microbatch but keeps up to r Ws pending: the steady state is
 * F I [W], the cool-down I [W], and the pending Ws close the list. A rank then holds
 * at most (P-1-r) + 1 + r = P microbatches between F and W, the most any 1F1B rank
 * holds (the paper's "same peak memory as 1F1B"), and the Is of the cool-down reach
 * rank 0 without waiting behind Ws. Each rank idles (P-1)(F+B-W) instead of
 * (P-1)(F+B+W): makespan max(3M + P - 1, 2M + 2P - 1) (the second when M < P: the
 * first microbatch's forward and input-gradient waves then dominate), bubble
 * (P-1)/(3M+P-1) for M >= P. Ws run in microbatch order on every stage, so the
 * weight gradients add up in the order 1F1B adds them (bitwise the same). */
static void gen_zb_h1(Schedule *s) {
    for (int r = 0; r < s->P; r++) {
        int M = s->M, nf = 0, ni = 0, nw = 0;
        int warmup = s->P - 1 - r < M ? s->P - 1 - r : M;
        while (nf < warmup) sched_append(s, r, act(ACT_F, r, nf++));
        while (ni < M) {
            if (nf < M) sched_append(s, r, act(ACT_F, r, nf++));
            sched_append(s, r, act(ACT_I, r, ni++));
            if (ni - nw > r) sched_append(s, r, act(ACT_W, r, nw++));
        }
        while (nw < M) sched_append(s, r, act(ACT_W, r, nw++));
    }
}

static double bubble_zb_h1(int P, int v, int M, const char **formula) {
    if (formula) *formula = "(P-1)/(3M+P-1) with F=B=W (M >= P; (2P-1-M)/(2M+2P-1) below)";
    double span = 3.0 * M + P - 1 > 2.0 * M + 2 * P - 1 ? 3.0 * M + P - 1 : 2.0 * M + 2 * P - 1;
    return (span - 3.0 * M) / span;
}

/* V placement, a placement generator ([Note: stages and placement]): stage s goes
 * down the ranks and back up, s mod P on even passes and P-1 - s mod P on odd ones;
 * for v = 2 rank r holds stages r and 2P-1-r (ZB-V). */
void sched_place_v(int P, int v, int *stage_rank) {
    for (int st = 0; st < P * v; st++) stage_rank[st] = (st / P) % 2 ? P - 1 - st % P : st % P;
}

/* ZB-V's per-rank order as a list scheduler (the paper's §4 builds ZB-V by hand
 * from the same three rules; torch's ScheduleZBVZeroBubble is that hand-built list):
 * time runs in unit steps (F = I = W = 1, free transfers), and a rank that is free
 * at time t runs, in this order of preference,
 *   1. an I whose forward ran and whose output gradient is there (the critical path),
 *   2. an F whose input is there, while fewer than 2P microbatch-chunks are held
 *      between F and W (P whole stages: 1F1B's largest peak, a chunk being half a
 *      stage's layers),
 *   3. the oldest pending W;
 * ties go to the smallest microbatch, then to the deeper stage. Each stage's F, I
 * and W run in microbatch order. For P <= 4 and M >= 2P this gives makespan
 * 6M + P - 1 (bubble (P-1)/(6M+P-1), against zb-h1's (P-1)/(3M+P-1)); for larger
 * P a few more units (test_sched checks the bubble never exceeds zb-h1's for
 * P <= 8, M <= 32). */
static int zbv_pick(const Schedule *s, int r, int t, const int *next, const int *done, int held) {
    int S = s->S, M = s->M, best = -1, best_key = INT_MAX;
    for (int kind = 0; kind < 3 && best < 0; kind++) { /* 0: I, 1: F, 2: W */
        if (kind == 1 && held >= 2 * s->P) continue;
        for (int c = 1; c >= 0; c--) {
            int st = sched_rank_stage(s, r, c);
            int type = kind == 0 ? ACT_I : kind == 1 ? ACT_F : ACT_W;
            int m = next[type * S + st];
            if (m >= M) continue;
            const int *fdone = done + (size_t)ACT_F * S * M, *idone = done + (size_t)ACT_I * S * M;
            int ok;
            if (type == ACT_I) {
                int f = fdone[st * M + m], g = st == S - 1 ? 0 : idone[(st + 1) * M + m];
                ok = f >= 0 && f <= t && g >= 0 && g <= t;
            } else if (type == ACT_F) {
                int in = st == 0 ? 0 : fdone[(st - 1) * M + m];
                ok = in >= 0 && in <= t;
            } else {
                ok = idone[st * M + m] >= 0 && idone[st * M + m] <= t;
            }
            int key = m * 2 + (1 - c); /* smallest microbatch, then the deeper chunk */
            if (ok && key < best_key) {
                best = type * S + st;
                best_key = key;
            }
        }
    }
    return best;
}

static void gen_zbv(Schedule *s) {
    int P = s->P, S = s->S, M = s->M, left = 3 * S * M;
    /* next microbatch per type, stage */
    int *next = pp_calloc((size_t)ACT_NTYPES * S, sizeof(int));
    /* end time, -1 not yet */
    int *done = pp_malloc((size_t)ACT_NTYPES * S * M * sizeof(int));
    int *free_at = pp_calloc((size_t)P, sizeof(int)), *held = pp_calloc((size_t)P, sizeof(int));
    for (size_t i = 0; i < (size_t)ACT_NTYPES * S * M; i++) done[i] = -1;
    for (int t = 0; left > 0; t++) {
        PP_CHECK(t <= 4 * S * M + 4 * P); /* the rules always make progress */
        for (int r = 0; r < P; r++) {
            if (free_at[r] > t) continue;
            int pick = zbv_pick(s, r, t, next, done, held[r]);
            if (pick < 0) continue;
            int type = pick / S, st = pick % S, m = next[pick]++;
            sched_append(s, r, act(type, st, m));
            done[(size_t)type * S * M + st * M + m] = t + 1;
            free_at[r] = t + 1;
            held[r] += type == ACT_F ? 1 : type == ACT_W ? -1 : 0;
            left--;
        }
    }
    free(next);
    free(done);
    free(free_at);
    free(held);
}

static double bubble_zbv(int P, int v, int M, const char **formula) {
    if (formula) *formula = "(P-1)/(6M+P-1) with F=B=W";
    if (P > 4 || M < 2 * P) return -1; /* the list scheduler's form holds there */
    return (P - 1.0) / (6.0 * M + P - 1);
}

/* ================================================================ kind table === */

/* The kind table: the one list of schedule kinds ([Note: the 1F1B family]). With
 * one chunk per rank, interleaving is 1f1b: that kind is the one to use. */
static const SchedKindInfo KINDS[] = {
    {"gpipe", 1, 1, "interleaved-1f1b", sched_place_looped, gen_gpipe, bubble_flat},
    {"1f1b", 1, 1, "interleaved-1f1b", sched_place_looped, gen_1f1b, bubble_flat},
    {"interleaved-1f1b", 2, INT_MAX, "1f1b", sched_place_looped, gen_interleaved,
     bubble_interleaved},
    {"looped-bfs", 1, INT_MAX, "gpipe", sched_place_looped, gen_looped_bfs, bubble_looped_bfs},
    {"zb-h1", 1, 1, "zbv", sched_place_looped, gen_zb_h1, bubble_zb_h1},
    {"zbv", 2, 2, "zb-h1", sched_place_v, gen_zbv, bubble_zbv},
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
            pp_strappendf(text, sizeof text, "%s%s", i ? ", " : "", KINDS[i].name);
        return pp_errf(err, errlen, PP_EUSAGE, "unknown schedule '%s' (known: %s)", kind, text);
    }
    if (k->v_min > 1 && k->v_min == k->v_max && v != k->v_min) /* zbv: exactly 2 */
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.schedule %s needs pipeline."
                       "virtual_stages = %d (got %d): set virtual_stages: %d, or use schedule %s",
                       kind, k->v_min, v, k->v_min, k->instead);
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

/* =================================================================== builds ===
 * The generators' output lowered and validated (sched.c): the builds live with the
 * generators, so that sched.c never calls up into them. */

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
        for (int k = 0; k < s->v * s->M; k++) gen_forward(s, r, k);
    return finish_generated(s, err, errlen);
}
