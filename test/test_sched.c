/* test_sched.c — schedules: IR round trip, generators against closed forms,
 * lowering, validator and simulator on broken plans, file loading, CLI output. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "sched/sched.h"
#include "plan/plan_cmd.h"
#include "sched/sched_show.h"
#include "sched/sched_sim.h"
#include "checkrun.h"

#define ERRLEN 2048

/* ------------------------------------------------------------------ helpers --- */

static Action mk(int type, int stage, int mb) {
    Action a = {(uint8_t)type, (int16_t)stage, (int32_t)mb};
    return a;
}

/* Whole text of a memstream / file after the fact. */
typedef struct {
    char *buf;
    size_t len;
    FILE *f;
} Capture;

static void cap_open(Capture *c) {
    c->buf = NULL;
    c->len = 0;
    c->f = open_memstream(&c->buf, &c->len);
    ck_assert_ptr_nonnull(c->f);
}

static const char *cap_text(Capture *c) {
    fflush(c->f);
    return c->buf ? c->buf : "";
}

static void cap_close(Capture *c) {
    fclose(c->f);
    free(c->buf);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    text[got] = '\0';
    fclose(f);
    return text;
}

static int action_eq(Action a, Action b) {
    return a.type == b.type && a.stage == b.stage && a.mb == b.mb;
}

static int same_lists(const Schedule *a, const Schedule *b) {
    if (a->P != b->P || a->S != b->S || a->M != b->M) return 0;
    for (int r = 0; r < a->P; r++) {
        if (a->len[r] != b->len[r]) return 0;
        for (int i = 0; i < a->len[r]; i++)
            if (!action_eq(a->acts[r][i], b->acts[r][i])) return 0;
    }
    return 1;
}

static char *write_to_string(const Schedule *s) {
    Capture c;
    cap_open(&c);
    sched_write(s, c.f);
    char *text = strdup(cap_text(&c));
    cap_close(&c);
    return text;
}

/* ------------------------------------------------------------------- the IR --- */

START_TEST(test_action_text_examples) {
    struct { const char *text; Action a; } cases[] = {
        {"1F0", mk(ACT_F, 1, 0)},           {"2B3", mk(ACT_B, 2, 3)},
        {"0SEND_F1", mk(ACT_SEND_F, 0, 1)}, {"3RECV_B2", mk(ACT_RECV_B, 3, 2)},
        {"4RECV_F10", mk(ACT_RECV_F, 4, 10)}, {"12SEND_B7", mk(ACT_SEND_B, 12, 7)},
        {"1I0", mk(ACT_I, 1, 0)},           {"5W31", mk(ACT_W, 5, 31)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Action a;
        char buf[SCHED_ACTION_TEXT_MAX];
        ck_assert_int_eq(sched_action_parse(cases[i].text, &a), PP_OK);
        ck_assert_int_eq(a.type, cases[i].a.type);
        ck_assert_int_eq(a.stage, cases[i].a.stage);
        ck_assert_int_eq(a.mb, cases[i].a.mb);
        sched_action_format(cases[i].a, buf, sizeof buf);
        ck_assert_str_eq(buf, cases[i].text);
    }
}
END_TEST

START_TEST(test_action_text_rejects) {
    const char *bad[] = {"", "F0", "1F", "01F0", "1F01", "1X0", "1f0", "1F0 ", " 1F0", "-1F0",
                         "1SEND_F", "1SENDF0", "1F+2", "32767F0", "1F2147483648", "1F0x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Action a = mk(ACT_B, 9, 9);
        ck_assert_msg(sched_action_parse(bad[i], &a) == PP_EUSAGE, "accepted '%s'", bad[i]);
        ck_assert_int_eq(a.stage, 9); /* untouched */
    }
    Action a;
    ck_assert_int_eq(sched_action_parse("32766F2147483647", &a), PP_OK);
    ck_assert_int_eq(a.stage, 32766);
    ck_assert_int_eq(a.mb, 2147483647);
}
END_TEST

START_TEST(test_placement) {
    char err[ERRLEN];
    Schedule s;
    int table[12];
    /* looped: stage s on rank s mod P as chunk s / P, the default of sched_init */
    sched_place_looped(4, 3, table);
    ck_assert_int_eq(sched_init(&s, "t", 4, 3, 2, err, sizeof err), PP_OK);
    for (int st = 0; st < 12; st++) {
        ck_assert_int_eq(table[st], st % 4);
        ck_assert_int_eq(sched_stage_rank(&s, st), st % 4);
        ck_assert_int_eq(sched_stage_chunk(&s, st), st / 4);
        ck_assert_int_eq(sched_rank_stage(&s, st % 4, st / 4), st);
    }
    ck_assert_int_eq(sched_stage_rank(&s, 12), -1);
    ck_assert_int_eq(sched_stage_chunk(&s, -1), -1);
    ck_assert_int_eq(sched_rank_stage(&s, 4, 0), -1);
    ck_assert_int_eq(sched_rank_stage(&s, 0, 3), -1);
    sched_free(&s);
    ck_assert_int_eq(sched_init(&s, "t", 1, 3, 1, err, sizeof err), PP_OK);
    for (int st = 0; st < 3; st++) ck_assert_int_eq(sched_rank_stage(&s, 0, st), st);
    sched_free(&s);
    /* a V (ZB-V): rank 0 holds stages 0 and 3, rank 1 stages 1 and 2; chunks go by
     * increasing stage */
    int v_shape[4] = {0, 1, 1, 0}, bad1[4] = {0, 0, 0, 1}, bad2[4] = {0, 1, 2, 0};
    ck_assert_int_eq(sched_init(&s, "v", 2, 2, 1, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_set_placement(&s, v_shape, err, sizeof err), PP_OK);
    int want_chunk[4] = {0, 0, 1, 1};
    for (int st = 0; st < 4; st++) {
        ck_assert_int_eq(sched_stage_rank(&s, st), v_shape[st]);
        ck_assert_int_eq(sched_stage_chunk(&s, st), want_chunk[st]);
    }
    ck_assert_int_eq(sched_rank_stage(&s, 0, 1), 3);
    ck_assert_int_eq(sched_rank_stage(&s, 1, 1), 2);
    /* tables that are not placements are refused, and s keeps its own */
    ck_assert_int_eq(sched_set_placement(&s, bad1, err, sizeof err), PP_EUSAGE);
    ck_assert_str_eq(err,
                     "placement gives rank 0 3 stages, but every rank holds virtual_stages = 2");
    ck_assert_int_eq(sched_set_placement(&s, bad2, err, sizeof err), PP_EUSAGE);
    ck_assert_str_eq(err, "placement puts stage 2 on rank 2, but there are 2 ranks");
    ck_assert_int_eq(sched_stage_rank(&s, 3), 0);
    sched_append(&s, 0, mk(ACT_F, 0, 0));
    ck_assert_int_eq(sched_set_placement(&s, v_shape, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "after actions"));
    sched_free(&s);
}
END_TEST

/* ------------------------------------------------ what an action means --- */

/* A schedule with no actions: P ranks, v chunks, M microbatches, the placement
 * `stage_rank` (NULL: looped). */
static void empty_schedule(Schedule *s, int P, int v, int M, const int *stage_rank,
                           int forward_only) {
    char err[ERRLEN];
    ck_assert_int_eq(sched_init(s, "hand", P, v, M, err, sizeof err), PP_OK);
    if (stage_rank) ck_assert_int_eq(sched_set_placement(s, stage_rank, err, sizeof err), PP_OK);
    s->forward_only = forward_only;
}

static void append_text(Schedule *s, int r, const char *text);

/* sched_action_deps of the action `text`, as text ("1F0 1RECV_B0"). */
static void expect_deps(const Schedule *s, const char *text, const char *want) {
    Action a, deps[SCHED_MAX_DEPS];
    char got[256] = "", one[SCHED_ACTION_TEXT_MAX];
    ck_assert_int_eq(sched_action_parse(text, &a), PP_OK);
    int n = sched_action_deps(s, a, deps);
    ck_assert_int_ge(n, 0);
    ck_assert_int_le(n, SCHED_MAX_DEPS);
    for (int i = 0; i < n; i++) {
        sched_action_format(deps[i], one, sizeof one);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? " " : "", one);
    }
    ck_assert_msg(!strcmp(got, want), "deps of %s (P=%d v=%d): '%s', want '%s'", text, s->P,
                  s->v, got, want);
}

START_TEST(test_action_deps) {
    Schedule s;
    Action a, deps[SCHED_MAX_DEPS];
    /* looped P=2, v=2: stages 0 2 | 1 3, every neighbour on the other rank */
    empty_schedule(&s, 2, 2, 2, NULL, 0);
    expect_deps(&s, "0F1", "");              /* first stage: the tokens */
    expect_deps(&s, "1F1", "1RECV_F1");      /* middle, remote input */
    expect_deps(&s, "3F0", "3RECV_F0");      /* last */
    expect_deps(&s, "0B0", "0F0 0RECV_B0");
    expect_deps(&s, "2B1", "2F1 2RECV_B1");
    expect_deps(&s, "3B0", "3F0");           /* last stage: the loss */
    expect_deps(&s, "1SEND_F0", "1F0");
    expect_deps(&s, "2SEND_B1", "2B1");
    expect_deps(&s, "2RECV_F0", "1SEND_F0"); /* on the other rank */
    expect_deps(&s, "0RECV_B1", "1SEND_B1");
    a = mk(ACT_NTYPES, 1, 0);
    ck_assert_int_eq(sched_action_deps(&s, a, deps), -1); /* no such type */
    sched_free(&s);
    /* split backwards (an appended I or W marks its stage and microbatch split): I has
     * B's rule, W needs its I and, when the stage below is remote, the send W's slot
     * release would cut short; SEND_B carries I's result */
    empty_schedule(&s, 2, 1, 2, NULL, 0);
    append_text(&s, 0, "0I0 0W0");
    append_text(&s, 1, "1I0 1W0 1B1");
    expect_deps(&s, "1I0", "1F0");
    expect_deps(&s, "0I0", "0F0 0RECV_B0");
    expect_deps(&s, "1W0", "1I0 1SEND_B0");
    expect_deps(&s, "0W0", "0I0");
    expect_deps(&s, "1SEND_B0", "1I0");
    expect_deps(&s, "1SEND_B1", "1B1"); /* microbatch 1 is not split */
    sched_free(&s);
    /* one rank, two chunks: stage 0's I waits for stage 1's I, or its B when not split */
    empty_schedule(&s, 1, 2, 2, NULL, 0);
    append_text(&s, 0, "0I0 0W0 1I0 1W0 0I1 0W1");
    expect_deps(&s, "0I0", "0F0 1I0");
    expect_deps(&s, "0I1", "0F1 1B1");
    expect_deps(&s, "1W0", "1I0"); /* stage 0 is local: no send */
    sched_free(&s);
    /* one rank, three chunks: every neighbour local */
    empty_schedule(&s, 1, 3, 2, NULL, 0);
    expect_deps(&s, "0F0", "");
    expect_deps(&s, "1F0", "0F0");
    expect_deps(&s, "2F1", "1F1");
    expect_deps(&s, "0B0", "0F0 1B0");
    expect_deps(&s, "1B1", "1F1 2B1");
    expect_deps(&s, "2B0", "2F0");
    sched_free(&s);
    /* a V: 0 3 | 1 2, so 1 -> 2 is local and the rest remote */
    int v_shape[4] = {0, 1, 1, 0};
    empty_schedule(&s, 2, 2, 1, v_shape, 0);
    expect_deps(&s, "1F0", "1RECV_F0");
    expect_deps(&s, "2F0", "1F0");
    expect_deps(&s, "3F0", "3RECV_F0");
    expect_deps(&s, "1B0", "1F0 2B0");
    expect_deps(&s, "2B0", "2F0 2RECV_B0");
    expect_deps(&s, "0B0", "0F0 0RECV_B0");
    sched_free(&s);
}
END_TEST

/* sched_action_frees of the action `text`, as stage numbers ("2 1"). */
static void expect_frees(const Schedule *s, const char *text, const char *want) {
    Action a;
    int stages[2];
    char got[64] = "";
    ck_assert_int_eq(sched_action_parse(text, &a), PP_OK);
    int n = sched_action_frees(s, a, stages);
    ck_assert_int_ge(n, 0);
    ck_assert_int_le(n, 2);
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", i ? " " : "", stages[i]);
    ck_assert_msg(!strcmp(got, want), "%s%s frees '%s', want '%s'",
                  s->forward_only ? "forward-only " : "", text, got, want);
}

/* [Note: schedule-aware recompute] The keep marks in closed form: 1F1B (M >= 2, P >= 2)
 * marks every microbatch of the last stage and nothing else; GPipe nothing (its
 * backwards run in forward order, B0 first, after all M forwards); a forward-only
 * schedule nothing.
 * The slot pools split by mark add up to at least the whole pool. */
START_TEST(test_keep_marks) {
    char err[PP_ERR_MAX];
    int checked = 0;
    for (int P = 2; P <= 4; P++)
        for (int M = 2; M <= 6; M++) {
            Schedule a, g, f;
            ck_assert(sched_build(&a, "1f1b", P, 1, M, err, sizeof err) == PP_OK);
            ck_assert(sched_build(&g, "gpipe", P, 1, M, err, sizeof err) == PP_OK);
            ck_assert(sched_build_forward_only(&f, &a, err, sizeof err) == PP_OK);
            for (int st = 0; st < P; st++)
                for (int m = 0; m < M; m++) {
                    ck_assert_int_eq(a.keep[st * M + m], st == P - 1);
                    ck_assert_int_eq(g.keep[st * M + m], 0);
                    ck_assert_int_eq(f.keep[st * M + m], 0);
                    checked++;
                }
            for (int st = 0; st < P; st++) {
                int run, skipped;
                sched_recompute_count(&a, st, &run, &skipped);
                ck_assert_int_eq(run, st == P - 1 ? 0 : M);
                ck_assert_int_eq(skipped, st == P - 1 ? M : 0);
                ck_assert_int_eq(sched_peak_inflight_kept(&a, st, 1), st == P - 1);
                ck_assert_int_ge(sched_peak_inflight_kept(&a, st, 0) +
                                     sched_peak_inflight_kept(&a, st, 1),
                                 sched_peak_inflight(&a, st));
            }
            sched_free(&a);
            sched_free(&g);
            sched_free(&f);
        }
    ck_assert_int_gt(checked, 100);
}
END_TEST

START_TEST(test_action_frees) {
    Schedule s;
    int v_shape[4] = {0, 1, 1, 0};
    /* training on a V ([Note: activation slots]) */
    empty_schedule(&s, 2, 2, 1, v_shape, 0);
    expect_frees(&s, "0B0", "0");       /* stage 0: nothing below it */
    expect_frees(&s, "1B0", "");        /* stage 0 is remote: SEND_B frees */
    expect_frees(&s, "1SEND_B0", "1");
    expect_frees(&s, "2B0", "2");       /* stage 1 is local and takes over */
    expect_frees(&s, "3B0", "");
    expect_frees(&s, "3SEND_B0", "3");
    expect_frees(&s, "1F0", "");
    expect_frees(&s, "0SEND_F0", "");
    expect_frees(&s, "2RECV_B0", "");
    sched_free(&s);
    /* split: W gives the slot back, not I nor the SEND_B of a split backward */
    empty_schedule(&s, 2, 1, 2, NULL, 0);
    append_text(&s, 1, "1I0 1W0");
    expect_frees(&s, "1I0", "");
    expect_frees(&s, "1SEND_B0", "");
    expect_frees(&s, "1W0", "1");
    expect_frees(&s, "1SEND_B1", "1"); /* microbatch 1 is not split */
    sched_free(&s);
    /* forward only, one rank: F(s+1) frees s, the last F its own slot too */
    empty_schedule(&s, 1, 3, 1, NULL, 1);
    expect_frees(&s, "0F0", "");
    expect_frees(&s, "1F0", "0");
    expect_frees(&s, "2F0", "2 1");
    sched_free(&s);
    /* forward only, looped over two ranks: the SEND frees */
    empty_schedule(&s, 2, 2, 1, NULL, 1);
    expect_frees(&s, "1F0", "");
    expect_frees(&s, "1SEND_F0", "1");
    expect_frees(&s, "3F0", "3");
    sched_free(&s);
}
END_TEST

START_TEST(test_kind_table) {
    char err[ERRLEN], joined[256] = "";
    const char *const *names = sched_kinds();
    for (int i = 0; names[i]; i++) {
        const SchedKindInfo *k = sched_kind_find(names[i]);
        ck_assert_ptr_nonnull(k);
        ck_assert_str_eq(k->name, names[i]);
        ck_assert_ptr_nonnull(sched_kind_find(k->instead)); /* suggests a real kind */
        ck_assert_int_eq(sched_kind_check(names[i], 2, k->v_min, 4, err, sizeof err), PP_OK);
        ck_assert_int_eq(sched_kind_check(names[i], 2, k->v_min - 1, 4, err, sizeof err),
                         PP_EUSAGE);
        size_t used = strlen(joined);
        snprintf(joined + used, sizeof joined - used, "%s%s", i ? "|" : "", names[i]);
        /* the generator runs on the row's placement */
        Schedule s;
        int table[4];
        k->place(2, k->v_min, table);
        ck_assert_int_eq(sched_generate(&s, names[i], 2, k->v_min, 2, err, sizeof err), PP_OK);
        for (int st = 0; st < s.S; st++) ck_assert_int_eq(sched_stage_rank(&s, st), table[st]);
        sched_free(&s);
    }
    ck_assert_str_eq(joined, SCHED_KIND_CHOICES); /* config's choices are the table */
    ck_assert_ptr_null(sched_kind_find("zigzag"));
    /* the messages config validation prints */
    ck_assert_int_eq(sched_kind_check("zigzag", 2, 1, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_str_eq(err, "unknown schedule 'zigzag' (known: gpipe, 1f1b, interleaved-1f1b, "
                          "looped-bfs, zb-h1, zbv)");
    ck_assert_int_eq(sched_kind_check("1f1b", 2, 2, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_str_eq(err, "pipeline.virtual_stages is 2 but pipeline.schedule is 1f1b: more than "
                          "one model chunk per rank needs schedule interleaved-1f1b (or set "
                          "virtual_stages: 1)");
    ck_assert_int_eq(sched_kind_check("interleaved-1f1b", 2, 1, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_str_eq(err, "pipeline.schedule interleaved-1f1b needs pipeline.virtual_stages >= 2"
                          " (got 1): set virtual_stages to 2 or more, or use schedule 1f1b");
    ck_assert_int_eq(sched_kind_check("interleaved-1f1b", 2, 7, 4, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_kind_check("zbv", 2, 3, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_str_eq(err, "pipeline.schedule zbv needs pipeline.virtual_stages = 2 (got 3): set"
                          " virtual_stages: 2, or use schedule zb-h1");
    ck_assert_int_eq(sched_kind_check("zb-h1", 2, 2, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "needs schedule zbv"));
    ck_assert_int_eq(sched_kind_check("looped-bfs", 2, 3, 4, err, sizeof err), PP_OK);
}
END_TEST

/* -------------------------------------------------------- the big sweep --- */

/* Published peak in-flight (activation sets held at once) on rank r, with F=B
 * uniform; each schedule's source:
 *  - GPipe (Huang et al. 2019): every rank keeps all M microbatches: M.
 *  - 1F1B / PipeDream-Flush (Narayanan et al. 2021, "Memory-Efficient Pipeline-
 *    Parallel DNN Training", §3): rank r warms up with P-1-r forwards, so it holds
 *    min(P-r, M).
 *  - interleaved (Narayanan et al. SC'21 §2.2.2; Megatron-LM schedules.py,
 *    forward_backward_pipelining_with_interleaving): num_warmup = (P-r-1)*2 +
 *    (v-1)*P capped at v*M, and one more forward enters before the first backward:
 *    min(v*M, (v-1)*P + 2*(P-1-r) + 1) chunk activations. (Megatron also runs all
 *    warm-up when M == P; we keep the formula there.) For M not a multiple of P the
 *    group size P becomes our largest group G (M if M < 2P, else P + M mod P);
 *    with v = 1 the schedule is plain 1F1B. */
static int expected_rank_peak(const char *kind, int P, int v, int M, int r) {
    if (!strcmp(kind, "gpipe")) return M;
    if (!strcmp(kind, "1f1b") || v == 1) return P - r < M ? P - r : M;
    int G = M % P == 0 ? P : M < 2 * P ? M : P + M % P;
    int peak = (v - 1) * G + 2 * (P - 1 - r) + 1;
    return peak < v * M ? peak : v * M;
}

/* Check's ck_assert records every passing assertion through a pipe in fork mode;
 * the sweep runs millions of checks, so it only calls into Check on failure. */
#define REQUIRE(cond, ...)                                                              \
    do {                                                                                \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                         \
    } while (0)
#define REQUIRE_NEAR(x, want, what)                                                     \
    REQUIRE(fabs((x) - (want)) <= 1e-12, "%s P=%d v=%d M=%d: %s = %.17g, want %.17g",    \
            kind, P, v, M, what, (double)(x), (double)(want))

/* 1 if the kind splits every backward into I and W. */
static int split_kind(const char *kind) { return !strncmp(kind, "zb", 2); }

/* Every action prints and parses back, each rank runs 2vM compute actions (3vM when
 * the backward is split), and the whole schedule written as text loads back to the
 * same lists (files have looped placement: not for zbv's V). */
static void check_text_round_trip(const char *kind, const Schedule *s, int P, int v, int M) {
    char err[ERRLEN];
    Schedule back;
    for (int r = 0; r < P; r++) {
        int compute = 0;
        for (int i = 0; i < s->len[r]; i++) {
            char text[SCHED_ACTION_TEXT_MAX];
            Action a;
            sched_action_format(s->acts[r][i], text, sizeof text);
            REQUIRE(sched_action_parse(text, &a) == PP_OK && action_eq(a, s->acts[r][i]),
                    "%s does not round-trip", text);
            compute += a.type == ACT_F || a.type == ACT_B || a.type == ACT_I || a.type == ACT_W;
        }
        REQUIRE(compute == (split_kind(kind) ? 3 : 2) * v * M, "%s P=%d v=%d M=%d: rank %d runs %d"
                " compute actions", kind, P, v, M, r, compute);
    }
    if (!strcmp(kind, "zbv")) return;
    char *text = write_to_string(s);
    REQUIRE(sched_load_text(&back, text, "gen", P, v, M, err, sizeof err, NULL) == PP_OK,
            "%s", err);
    REQUIRE(same_lists(s, &back), "%s P=%d v=%d M=%d: text does not load back", kind, P, v, M);
    sched_free(&back);
    free(text);
}

/* Simulated time and memory against the closed forms, F = B = 1, free transfers. */
static void check_unit_costs(const char *kind, const Schedule *s, int P, int v, int M) {
    char err[ERRLEN];
    SchedSimResult res;
    SchedSimCosts unit;
    sched_sim_costs_default(&unit);
    unit.B = 1;
    REQUIRE(sched_sim_run(s, &unit, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
    int flat = strcmp(kind, "interleaved-1f1b") != 0 || v == 1;
    if (flat) { /* GPipe and 1F1B: 2(M+P-1) units, bubble (P-1)/(M+P-1) */
        REQUIRE_NEAR(res.makespan, 2.0 * (M + P - 1), "makespan");
        REQUIRE_NEAR(res.bubble, (P - 1.0) / (M + P - 1), "bubble");
    } else if (M >= P) { /* published for M a multiple of P; ours meets it for M >= P */
        REQUIRE_NEAR(res.makespan, 2.0 * (v * M + P - 1), "makespan");
        REQUIRE_NEAR(res.bubble, (P - 1.0) / (v * M + P - 1), "bubble");
    }
    double closed = sched_bubble_closed_form(s, NULL);
    if (closed >= 0) REQUIRE_NEAR(res.bubble, closed, "bubble vs closed form");
    for (int r = 0; r < P; r++) {
        REQUIRE_NEAR(res.busy[r], 2.0 * v * M, "busy");
        REQUIRE_NEAR(res.idle[r], res.makespan - res.busy[r], "idle");
        int want = expected_rank_peak(kind, P, v, M, r);
        REQUIRE(res.rank_peak[r] == want && sched_peak_inflight_rank(s, r) == want,
                "%s P=%d v=%d M=%d: rank %d peak %d, want %d", kind, P, v, M, r,
                res.rank_peak[r], want);
    }
    for (int st = 0; st < s->S; st++) {
        int peak = res.stage_peak[st];
        REQUIRE(peak == sched_peak_inflight(s, st) && peak >= 1 && peak <= M,
                "%s P=%d v=%d M=%d: stage %d peak %d", kind, P, v, M, st, peak);
        REQUIRE(v > 1 || peak == res.rank_peak[st], "stage %d peak %d", st, peak);
        int nr = sched_peak_recv(s, st);
        int remote_input = st > 0 && sched_stage_rank(s, st - 1) != sched_stage_rank(s, st);
        REQUIRE(remote_input ? nr >= 1 && nr <= M : nr == 0, "%s P=%d v=%d M=%d: stage %d has"
                " %d receive buffers", kind, P, v, M, st, nr);
    }
    sched_sim_result_free(&res);
}

/* Invariants of one generated schedule. */
static void check_generated(const char *kind, int P, int v, int M) {
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    SchedSimCosts dflt;
    REQUIRE(sched_build(&s, kind, P, v, M, err, sizeof err) == PP_OK, "%s", err);
    REQUIRE(sched_validate(&s, err, sizeof err, NULL) == PP_OK, "%s", err);
    REQUIRE(s.lowered, "not lowered");
    check_text_round_trip(kind, &s, P, v, M);
    check_unit_costs(kind, &s, P, v, M);
    sched_sim_costs_default(&dflt); /* F=1, B=2: (M+P-1)(F+B) resp. (vM+P-1)(F+B) */
    REQUIRE(sched_sim_run(&s, &dflt, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
    int flat = strcmp(kind, "interleaved-1f1b") != 0 || v == 1;
    if (flat) REQUIRE_NEAR(res.makespan, 3.0 * (M + P - 1), "makespan (F=1, B=2)");
    if (!flat && M >= P) REQUIRE_NEAR(res.makespan, 3.0 * (v * M + P - 1), "makespan (F=1, B=2)");
    sched_sim_result_free(&res);
    sched_free(&s);
}

static void sweep(const char *kind) {
    for (int P = 1; P <= 8; P++)
        for (int v = 1; v <= 4; v++)
            for (int M = 1; M <= 32; M++) {
                char err[ERRLEN];
                Schedule s;
                const SchedKindInfo *k = sched_kind_find(kind);
                int rc = sched_build(&s, kind, P, v, M, err, sizeof err);
                if (v < k->v_min || v > k->v_max) { /* the message says what to change */
                    REQUIRE(rc == PP_EUSAGE && strstr(err, "pipeline.virtual_stages") &&
                            strstr(err, k->instead), "%s", err);
                    continue;
                }
                REQUIRE(rc == PP_OK, "%s P=%d v=%d M=%d: %s", kind, P, v, M, err);
                sched_free(&s);
                check_generated(kind, P, v, M);
            }
}

/* Weight gradients of every stage accumulate in microbatch order (its Bs or Ws run
 * m = 0, 1, ...): what makes every schedule's weights bitwise equal. */
static void check_weight_order(const char *kind, const Schedule *s, int P, int v, int M) {
    int *next = calloc((size_t)s->S, sizeof(int));
    for (int r = 0; r < P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action a = s->acts[r][i];
            if (a.type != ACT_B && a.type != ACT_W) continue;
            REQUIRE(a.mb == next[a.stage]++, "%s P=%d v=%d M=%d: stage %d adds microbatch %d's"
                    " weight gradient out of order", kind, P, v, M, a.stage, a.mb);
        }
    free(next);
}

/* Most activation slots any rank of kind's schedule holds (sched_peak_inflight_rank). */
static int max_rank_peak(const char *kind, int P, int v, int M) {
    char err[ERRLEN];
    Schedule s;
    int peak = 0;
    REQUIRE(sched_build(&s, kind, P, v, M, err, sizeof err) == PP_OK, "%s", err);
    for (int r = 0; r < P; r++)
        if (sched_peak_inflight_rank(&s, r) > peak) peak = sched_peak_inflight_rank(&s, r);
    sched_free(&s);
    return peak;
}

/* Bubble of kind at P, v, M with costs c. */
static double bubble_of(const char *kind, int P, int v, int M, const SchedSimCosts *c) {
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    REQUIRE(sched_build(&s, kind, P, v, M, err, sizeof err) == PP_OK, "%s", err);
    REQUIRE(sched_sim_run(&s, c, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
    double b = res.bubble;
    sched_sim_result_free(&res);
    sched_free(&s);
    return b;
}

/* looped-bfs, zb-h1 and zbv against their closed forms ([Note: looped BFS] and
 * [Note: zero-bubble schedules] in sched_gen.c), with unit costs: F = B = 1 for
 * looped-bfs, F = I = W = 1 (--costs F=1,B=1,W=1) for the split kinds. */
static void check_new_kind(const char *kind, int P, int v, int M) {
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    SchedSimCosts unit;
    sched_sim_costs_default(&unit);
    unit.B = 1;
    if (split_kind(kind)) unit.W = 1;
    REQUIRE(sched_build(&s, kind, P, v, M, err, sizeof err) == PP_OK, "%s", err);
    REQUIRE(sched_validate(&s, err, sizeof err, NULL) == PP_OK, "%s", err);
    check_text_round_trip(kind, &s, P, v, M);
    check_weight_order(kind, &s, P, v, M);
    REQUIRE(sched_sim_run(&s, &unit, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
    double work = (split_kind(kind) ? 3.0 : 2.0) * v * M;
    double closed = sched_bubble_closed_form(&s, NULL);
    if (closed >= 0) REQUIRE_NEAR(res.bubble, closed, "bubble vs closed form");
    for (int r = 0; r < P; r++) {
        REQUIRE_NEAR(res.busy[r], work, "busy");
        REQUIRE_NEAR(res.idle[r], res.makespan - work, "idle");
    }
    int peak = 0;
    for (int r = 0; r < P; r++) peak = res.rank_peak[r] > peak ? res.rank_peak[r] : peak;
    if (!strcmp(kind, "looped-bfs")) { /* GPipe's memory; chunk waves max(M, P) apart */
        double span = (v - 1.0) * (M > P ? M : P) + M + P - 1;
        REQUIRE_NEAR(res.makespan, 2 * span, "makespan");
        REQUIRE(peak == v * M, "%s P=%d v=%d M=%d: peak %d", kind, P, v, M, peak);
    } else if (!strcmp(kind, "zb-h1")) { /* idle (P-1)(F+B-W) per rank for M >= P */
        double want = 3.0 * M + P - 1 > 2.0 * M + 2 * P - 1 ? 3.0 * M + P - 1 : 2.0 * M + 2 * P - 1;
        REQUIRE_NEAR(res.makespan, want, "makespan");
        if (M >= P) REQUIRE_NEAR(res.idle[0], P - 1.0, "idle per rank");
        REQUIRE(peak == max_rank_peak("1f1b", P, 1, M),
                "%s P=%d M=%d: peak in-flight %d, 1f1b's %d", kind, P, M, peak,
                max_rank_peak("1f1b", P, 1, M));
    } else { /* zbv: a chunk is half a 1F1B stage's layers */
        if (P <= 4 && M >= 2 * P) REQUIRE_NEAR(res.makespan, 6.0 * M + P - 1, "makespan");
        SchedSimCosts h1 = unit;
        REQUIRE(res.bubble <= bubble_of("zb-h1", P, 1, M, &h1) + 1e-12,
                "%s P=%d M=%d: bubble %g above zb-h1's", kind, P, M, res.bubble);
        REQUIRE(peak <= 2 * max_rank_peak("1f1b", P, 1, M),
                "%s P=%d M=%d: peak %d chunks, more than twice 1f1b's stages", kind, P, M, peak);
    }
    for (int st = 0; st < s.S; st++) {
        int pw = sched_peak_pending_w(&s, st);
        REQUIRE(split_kind(kind) ? pw >= 1 && pw <= M : pw == 0, "%s P=%d v=%d M=%d: stage %d has"
                " %d pending Ws", kind, P, v, M, st, pw);
    }
    sched_sim_result_free(&res);
    sched_free(&s);
}

static void sweep_new(const char *kind) {
    int checked = 0;
    for (int P = 1; P <= 8; P++)
        for (int v = 1; v <= 4; v++)
            for (int M = 1; M <= 32; M++) {
                char err[ERRLEN];
                Schedule s;
                const SchedKindInfo *k = sched_kind_find(kind);
                int rc = sched_build(&s, kind, P, v, M, err, sizeof err);
                if (v < k->v_min || v > k->v_max) {
                    REQUIRE(rc == PP_EUSAGE && strstr(err, "pipeline.virtual_stages"), "%s", err);
                    continue;
                }
                REQUIRE(rc == PP_OK, "%s P=%d v=%d M=%d: %s", kind, P, v, M, err);
                sched_free(&s);
                check_new_kind(kind, P, v, M);
                checked++;
            }
    ck_assert_int_ge(checked, 8 * 32); /* the sweep ran */
}

START_TEST(test_sweep_looped_bfs) { sweep_new("looped-bfs"); }
END_TEST
START_TEST(test_sweep_zb_h1) { sweep_new("zb-h1"); }
END_TEST
START_TEST(test_sweep_zbv) { sweep_new("zbv"); }
END_TEST

/* The numbers: F = B = W = 1, P = 4, M = 8. */
START_TEST(test_zero_bubble_must_show) {
    SchedSimCosts unit;
    sched_sim_costs_default(&unit);
    unit.B = 1;
    unit.W = 1;
    double b1 = bubble_of("1f1b", 4, 1, 8, &unit), bh = bubble_of("zb-h1", 4, 1, 8, &unit);
    double bv = bubble_of("zbv", 4, 2, 8, &unit);
    ck_assert_double_eq_tol(b1, 9.0 / 33, 1e-12); /* a full B costs B + W = 2 */
    ck_assert_double_eq_tol(bh, 3.0 / 27, 1e-12);
    ck_assert(bv <= bh);
    ck_assert_int_eq(max_rank_peak("zbv", 4, 2, 8), 8); /* 8 half-stage chunks = 4 stages */
    ck_assert_int_eq(max_rank_peak("1f1b", 4, 1, 8), 4);
}
END_TEST

START_TEST(test_sweep_gpipe) { sweep("gpipe"); }
END_TEST
START_TEST(test_sweep_1f1b) { sweep("1f1b"); }
END_TEST
START_TEST(test_sweep_interleaved) { sweep("interleaved-1f1b"); }
END_TEST

START_TEST(test_compute_order_shapes) {
    /* The generators' compute orders for hand-checked small cases. */
    char err[ERRLEN];
    Schedule s;
    ck_assert_int_eq(sched_generate(&s, "1f1b", 3, 1, 4, err, sizeof err), PP_OK);
    char *text = write_to_string(&s);
    ck_assert_ptr_nonnull(strstr(text, "rank 0: 0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3\n"));
    ck_assert_ptr_nonnull(strstr(text, "rank 1: 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3\n"));
    ck_assert_ptr_nonnull(strstr(text, "rank 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3\n"));
    free(text);
    sched_free(&s);
    ck_assert_int_eq(sched_generate(&s, "gpipe", 2, 1, 3, err, sizeof err), PP_OK);
    text = write_to_string(&s);
    ck_assert_ptr_nonnull(strstr(text, "rank 1: 1F0 1F1 1F2 1B0 1B1 1B2\n"));
    free(text);
    sched_free(&s);
    /* interleaved P=2 v=2 M=4: groups of 2, chunk-major within a group; the last
     * rank warms up (v-1)*P = 2 forwards, rank 0 two more. */
    ck_assert_int_eq(sched_generate(&s, "interleaved-1f1b", 2, 2, 4, err, sizeof err), PP_OK);
    text = write_to_string(&s);
    ck_assert_ptr_nonnull(strstr(text, "rank 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 "
                                       "2B2 2B3 0B2 0B3\n"));
    ck_assert_ptr_nonnull(strstr(text, "rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 "
                                       "3F3 3B3 1B2 1B3\n"));
    free(text);
    sched_free(&s);
}
END_TEST

START_TEST(test_build_errors) {
    char err[ERRLEN];
    Schedule s;
    ck_assert_int_eq(sched_build(&s, "zero-bubble", 2, 1, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "unknown schedule 'zero-bubble'"));
    ck_assert_ptr_nonnull(strstr(err, "interleaved-1f1b"));
    ck_assert_int_eq(sched_build(&s, "1f1b", 0, 1, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "P=0"));
    ck_assert_int_eq(sched_build(&s, "gpipe", 2, 1, 0, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "M=0"));
    ck_assert_int_eq(sched_build(&s, "interleaved-1f1b", 200, 200, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "40000 stages"));
    ck_assert_int_eq(sched_build(&s, "gpipe", 2, 2, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "needs schedule interleaved-1f1b"));
    ck_assert_int_eq(sched_build(&s, "interleaved-1f1b", 2, 1, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "needs pipeline.virtual_stages >= 2"));
    ck_assert_ptr_null(s.acts); /* left empty */
    sched_free(&s);             /* and freeing it again is harmless */
}
END_TEST

/* ------------------------------------------------------------- golden files --- */

static void golden_path(char *buf, size_t n, const char *name) {
    const char *dir = getenv("PP_GOLDEN_DIR");
    if (dir) {
        snprintf(buf, n, "%s/%s", dir, name);
        return;
    }
    const char *slash = strrchr(__FILE__, '/'); /* test/golden next to this file */
    snprintf(buf, n, "%.*sgolden/%s", slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__, name);
}

/* Lowered schedules in file form for small cases; PP_UPDATE_GOLDEN=1 rewrites them
 * (review the diff before committing). */
START_TEST(test_golden) {
    struct { const char *kind; int P, v, M; const char *file; } cases[] = {
        {"gpipe", 2, 1, 3, "gpipe_P2_M3.txt"},
        {"1f1b", 3, 1, 4, "1f1b_P3_M4.txt"},
        {"interleaved-1f1b", 2, 2, 4, "interleaved_P2_v2_M4.txt"},
        {"interleaved-1f1b", 3, 2, 4, "interleaved_P3_v2_M4.txt"},
        {"zb-h1", 3, 1, 4, "zb-h1_P3_M4.txt"},
        {"zbv", 2, 2, 4, "zbv_P2_v2_M4.txt"},
        {"looped-bfs", 2, 2, 3, "looped-bfs_P2_v2_M3.txt"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[ERRLEN], path[1024];
        Schedule s;
        ck_assert_int_eq(sched_build(&s, cases[i].kind, cases[i].P, cases[i].v, cases[i].M, err,
                                     sizeof err), PP_OK);
        char *got = write_to_string(&s);
        golden_path(path, sizeof path, cases[i].file);
        if (getenv("PP_UPDATE_GOLDEN")) {
            FILE *f = fopen(path, "w");
            ck_assert_ptr_nonnull(f);
            fputs(got, f);
            fclose(f);
        }
        char *want = read_all(path);
        ck_assert_msg(want != NULL, "missing golden file %s", path);
        ck_assert_str_eq(got, want);
        free(got);
        free(want);
        sched_free(&s);
    }
}
END_TEST

/* --------------------------------------------------------- broken schedules --- */

/* Load text that must be rejected; check the message and the marked grid cells. */
static void expect_rejected(const char *text, int P, int v, int M, const char *msg,
                            const char *mark1, const char *mark2) {
    char err[ERRLEN];
    Schedule s;
    Capture grid;
    cap_open(&grid);
    ck_assert_int_eq(sched_load_text(&s, text, "plan.txt", P, v, M, err, sizeof err, grid.f),
                     PP_EUSAGE);
    ck_assert_msg(strstr(err, msg) != NULL, "message '%s' lacks '%s'", err, msg);
    ck_assert_msg(!strncmp(err, "plan.txt:", 9), "message '%s' does not name the file", err);
    const char *g = cap_text(&grid);
    if (mark1) {
        ck_assert_msg(strstr(g, "as a grid") != NULL, "no grid printed for '%s'", err);
        ck_assert_msg(strstr(g, mark1) != NULL, "grid lacks %s:\n%s", mark1, g);
    }
    if (mark2) ck_assert_msg(strstr(g, mark2) != NULL, "grid lacks %s:\n%s", mark2, g);
    ck_assert_ptr_null(s.acts);
    cap_close(&grid);
}

START_TEST(test_reject_missing_backward) {
    expect_rejected("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1\n", 2, 1, 2,
                    "has no backward 1B1", "*1F1*", NULL);
    /* the same in a lowered plan */
    expect_rejected("0F0 0SEND_F0 0RECV_B0 0B0\n1RECV_F0 1F0 1SEND_B0\n", 2, 1, 1,
                    "plan.txt:2: rank 1 step 1 (1F0): has no backward 1B0", "*1F0*", NULL);
}
END_TEST

START_TEST(test_reject_swapped_sends) {
    /* rank 0 sends microbatch 1 before 0; rank 1 receives 0 first */
    expect_rejected("rank 0: 0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0B0 0RECV_B1 0B1\n"
                    "rank 1: 1RECV_F0 1RECV_F1 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1\n",
                    2, 1, 2, "order of the sends", "*0SEND_F1*", "*1RECV_F0*");
}
END_TEST

START_TEST(test_reject_cycle) {
    /* rank 0's 0B0 needs 1B0, which rank 1 runs after 1F1, which needs 0F1, which
     * rank 0 runs after 0B0: no order of actions can satisfy both ranks */
    expect_rejected("0F0 0B0 0F1 0B1\n1F1 1B1 1F0 1B0\n", 2, 1, 2, "deadlock", "*0B0*", "*1F1*");
    /* a lowered plan whose receives block before their sends can happen */
    expect_rejected("0RECV_B0 0F0 0SEND_F0 0B0\n1RECV_F0 1F0 1B0 1SEND_B0\n", 2, 1, 1,
                    "deadlock", "*0RECV_B0*", "*1RECV_F0*");
}
END_TEST

START_TEST(test_reject_local_order_and_ranges) {
    expect_rejected("0B0 0F0\n", 1, 1, 1, "runs before its forward 0F0", "*0B0*", NULL);
    /* two chunks on one rank hand over locally, in order */
    expect_rejected("1F0 0F0 1B0 0B0\n", 1, 2, 1, "runs before its input 0F0", "*1F0*", NULL);
    expect_rejected("0F0 1F0 0B0 1B0\n", 1, 2, 1, "runs before the gradient from 1B0", "*0B0*",
                    NULL);
}
END_TEST

START_TEST(test_reject_text_errors) {
    struct { const char *text; int P, v, M; const char *msg; } cases[] = {
        {"0F0 0xF1\n", 1, 1, 2, "plan.txt:1: bad action '0xF1'"},
        {"# header\n\n0F0 0B0\n1F0 1B0\n", 1, 1, 1, "plan.txt:4: more rank lines than"},
        {"0F0 0B0\n", 2, 1, 1, "1 rank line, but pipeline.stages=2"},
        {"rank 1: 0F0 0B0\n", 1, 1, 1, "line says rank 1"},
        {"0F0 0B0\n1F0 0B0\n", 2, 1, 1, "plan.txt:2: action 0B0 on rank 1: its stage lives on"},
        {"0F0 0B0 0F5 0B5\n", 1, 1, 2, "microbatch out of range"},
        {"0F0 0B0 2F0\n", 1, 2, 1, "stage out of range"},
        {"0F0 0I0\n", 1, 1, 1, "has no weight gradient 0W0"},
        {"0F0 0W0\n", 1, 1, 1, "has no input gradient 0I0"},
        {"0F0 0B0 0I0 0W0\n", 1, 1, 1, "has a full backward and a split one"},
        {"0F0 0W0 0I0\n", 1, 1, 1, "runs before its input-gradient half 0I0"},
        {"0F0 0SEND_F0 0RECV_B0 0B0\n1RECV_F0 1F0 1I0 1W0 1SEND_B0\n", 2, 1, 1,
         "runs before 1SEND_B0 (W gives back the slot that send reads)"},
        {"0F0 0SEND_F0 1F0 1B0 0B0\n", 1, 2, 1, "handed over locally"},
        {"0F0 0SEND_F0 0B0\n", 1, 1, 1, "no stage on the other end"},
        {"0F0 0F0 0B0\n", 1, 1, 1, "appears twice"},
        {"0F0 1F0 1B0 0B0\n0F1\n", 2, 1, 1, "its stage lives on another rank"},
        /* lowered plans: each action after what it needs on its own rank */
        {"0F0 0SEND_F0 0RECV_B0 0B0\n1F0 1RECV_F0 1B0 1SEND_B0\n", 2, 1, 1,
         "plan.txt:2: rank 1 step 0 (1F0): runs before its input is received (1RECV_F0)"},
        {"0SEND_F0 0F0 0RECV_B0 0B0\n1RECV_F0 1F0 1B0 1SEND_B0\n", 2, 1, 1,
         "plan.txt:1: rank 0 step 0 (0SEND_F0): sends before 0F0 computed it"},
        {"0F0 0SEND_F0 0B0 0RECV_B0\n1RECV_F0 1F0 1B0 1SEND_B0\n", 2, 1, 1,
         "runs before its gradient is received (0RECV_B0)"},
        {"0F0 0SEND_F0 0RECV_B0 0B0\n1RECV_F0 1F0 1SEND_B0 1B0\n", 2, 1, 1,
         "sends before 1B0 computed it"},
        {"0F0 0SEND_F0 0RECV_B0 0B0\n1RECV_F0 1F0 1B0\n", 2, 1, 1, "gradient never sent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_rejected(cases[i].text, cases[i].P, cases[i].v, cases[i].M, cases[i].msg, NULL,
                        NULL);
}
END_TEST

START_TEST(test_validate_direct) {
    /* sched_validate on a hand-built lowered schedule: missing RECV for a SEND */
    char err[ERRLEN];
    Schedule s;
    Capture grid;
    ck_assert_int_eq(sched_init(&s, "hand", 2, 1, 1, err, sizeof err), PP_OK);
    s.lowered = 1;
    Action r0[] = {mk(ACT_F, 0, 0), mk(ACT_SEND_F, 0, 0), mk(ACT_RECV_B, 0, 0), mk(ACT_B, 0, 0)};
    Action r1[] = {mk(ACT_F, 1, 0), mk(ACT_B, 1, 0), mk(ACT_SEND_B, 1, 0)};
    for (int i = 0; i < 4; i++) sched_append(&s, 0, r0[i]);
    for (int i = 0; i < 3; i++) sched_append(&s, 1, r1[i]);
    cap_open(&grid);
    ck_assert_int_eq(sched_validate(&s, err, sizeof err, grid.f), PP_EUSAGE);
    ck_assert_str_eq(err, "rank 0 step 1 (0SEND_F0): never received (no 1RECV_F0)");
    ck_assert_ptr_nonnull(strstr(cap_text(&grid), "*0SEND_F0*"));
    cap_close(&grid);
    sched_free(&s);
}
END_TEST

/* ------------------------------------------------------------ file loading --- */

START_TEST(test_load_compute_only_and_lowered) {
    char err[ERRLEN];
    Schedule gen, built, loaded;
    ck_assert_int_eq(sched_generate(&gen, "interleaved-1f1b", 3, 2, 5, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_build(&built, "interleaved-1f1b", 3, 2, 5, err, sizeof err), PP_OK);
    char *compute = write_to_string(&gen), *lowered = write_to_string(&built);
    /* a compute-only file goes through the same lowering as the generator's output */
    ck_assert_msg(sched_load_text(&loaded, compute, "c.txt", 3, 2, 5, err, sizeof err, NULL) ==
                      PP_OK,
                  "%s", err);
    ck_assert(same_lists(&loaded, &built));
    ck_assert_str_eq(loaded.name, "file");
    sched_free(&loaded);
    /* commas, comments, blank lines and no "rank R:" prefix are fine too */
    ck_assert_int_eq(sched_load_text(&loaded,
                                     "# one rank, two chunks\n\n  0F0, 1F0,1B0\t0B0 # all\n\n",
                                     "t", 1, 2, 1, err, sizeof err, NULL),
                     PP_OK);
    ck_assert_int_eq(loaded.len[0], 4);
    ck_assert_int_eq(loaded.acts[0][2].type, ACT_B);
    ck_assert_int_eq(loaded.acts[0][2].stage, 1);
    sched_free(&loaded);
    /* through a real file */
    char path[] = "/tmp/test_sched_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, lowered, strlen(lowered)), (ssize_t)strlen(lowered));
    close(fd);
    ck_assert_msg(sched_load_file(&loaded, path, 3, 2, 5, err, sizeof err) == PP_OK, "%s", err);
    ck_assert(same_lists(&loaded, &built));
    sched_free(&loaded);
    /* the file's sizes must be those of the config */
    ck_assert_int_eq(sched_load_file(&loaded, path, 3, 2, 4, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "microbatch out of range"));
    unlink(path);
    ck_assert_int_eq(sched_load_file(&loaded, path, 3, 2, 5, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
    ck_assert_ptr_nonnull(strstr(err, path));
    free(compute);
    free(lowered);
    sched_free(&gen);
    sched_free(&built);
}
END_TEST

START_TEST(test_lower_is_fifo_and_local) {
    /* P = 1: everything is local, lowering adds nothing */
    char err[ERRLEN];
    Schedule s;
    ck_assert_int_eq(sched_build(&s, "interleaved-1f1b", 1, 3, 2, err, sizeof err), PP_OK);
    for (int i = 0; i < s.len[0]; i++)
        ck_assert(s.acts[0][i].type == ACT_F || s.acts[0][i].type == ACT_B);
    ck_assert_int_eq(s.len[0], 12);
    sched_free(&s);
    /* lowering twice is refused */
    ck_assert_int_eq(sched_build(&s, "1f1b", 2, 1, 2, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_lower(&s, err, sizeof err, NULL), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "already lowered"));
    /* each SEND is immediately followed by nothing else of its rank's compute before
     * the receiver's RECV exists: RECV comes after the SEND in a global order, which
     * is what the no-wait-cycle check proves; the per-pair order is FIFO */
    ck_assert_int_eq(sched_validate(&s, err, sizeof err, NULL), PP_OK);
    sched_free(&s);
}
END_TEST

/* ------------------------------------------------------ placement as data --- */

/* Append the actions of `text` (space separated) to rank r of s. */
static void append_text(Schedule *s, int r, const char *text) {
    char *copy = strdup(text), *save = NULL;
    for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        Action a;
        ck_assert_msg(sched_action_parse(tok, &a) == PP_OK, "bad action %s", tok);
        sched_append(s, r, a);
    }
    free(copy);
}

START_TEST(test_v_placement) {
    /* P=2, v=2 in a V (ZB-V's placement, by hand): rank 0 holds stages 0 and 3, rank 1
     * stages 1 and 2, so 1 -> 2 is handed over locally and 0 -> 1, 2 -> 3 cross */
    char err[ERRLEN];
    int v_shape[4] = {0, 1, 1, 0};
    Schedule s, fwd;
    SchedSimResult res;
    empty_schedule(&s, 2, 2, 2, v_shape, 0);
    append_text(&s, 0, "0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1");
    append_text(&s, 1, "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1");
    ck_assert_msg(sched_lower(&s, err, sizeof err, NULL) == PP_OK, "%s", err);
    char *text = write_to_string(&s);
    ck_assert_msg(strstr(text, "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 3RECV_F0 3F0 3B0 3SEND_B0 "
                               "3RECV_F1 3F1 3B1 3SEND_B1 0RECV_B0 0B0 0RECV_B1 0B1\n") &&
                      strstr(text, "rank 1: 1RECV_F0 1F0 1RECV_F1 2F0 2SEND_F0 1F1 2RECV_B0 2F1 "
                                   "2SEND_F1 2B0 2RECV_B1 1B0 1SEND_B0 2B1 1B1 1SEND_B1\n"),
                  "%s", text);
    free(text);
    for (int r = 0; r < 2; r++) /* transfers only across ranks: none on the 1 -> 2 edge */
        for (int i = 0; i < s.len[r]; i++) {
            Action a = s.acts[r][i];
            if (a.type == ACT_F || a.type == ACT_B) continue;
            int peer = a.type == ACT_SEND_F || a.type == ACT_RECV_B ? a.stage + 1 : a.stage - 1;
            ck_assert_int_ne(sched_stage_rank(&s, peer), r);
            ck_assert(!(a.stage == 1 && peer == 2) && !(a.stage == 2 && peer == 1));
        }
    ck_assert_msg(sched_validate(&s, err, sizeof err, NULL) == PP_OK, "%s", err);
    /* F=1, B=2: rank 0 waits for 1B0 (ends at 10) and 1B1 (ends at 14) */
    ck_assert_msg(sched_sim_run(&s, NULL, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
    ck_assert_double_eq(res.makespan, 16);
    ck_assert_double_eq(res.busy[0], 12);
    ck_assert_double_eq(res.bubble, 0.25);
    int peak[4] = {2, 2, 2, 1}, recv[4] = {0, 1, 0, 1}; /* stage 3's slot goes at 3SEND_B */
    for (int st = 0; st < 4; st++) {
        ck_assert_int_eq(sched_peak_inflight(&s, st), peak[st]);
        ck_assert_int_eq(res.stage_peak[st], peak[st]);
        ck_assert_int_eq(sched_peak_recv(&s, st), recv[st]);
    }
    ck_assert_int_eq(sched_peak_inflight_rank(&s, 0), 3);
    ck_assert_int_eq(sched_peak_inflight_rank(&s, 1), 4);
    sched_sim_result_free(&res);
    /* the forward-only schedule takes the placement from the training one */
    ck_assert_msg(sched_build_forward_only(&fwd, &s, err, sizeof err) == PP_OK, "%s", err);
    text = write_to_string(&fwd);
    ck_assert_msg(strstr(text, "rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 2F0 2SEND_F0 2F1 2SEND_F1\n"),
                  "%s", text);
    free(text);
    ck_assert_int_eq(sched_sim_run(&fwd, NULL, &res, err, sizeof err, NULL), PP_OK);
    ck_assert_double_eq(res.makespan, 6);
    sched_sim_result_free(&res);
    sched_free(&fwd);
    sched_free(&s);
}
END_TEST

START_TEST(test_v_placement_checks) {
    /* the validator reads the same table: 2F0 needs the local 1F0, and a transfer on
     * the local edge is refused; a file, placed looped, cannot say this V */
    char err[ERRLEN];
    int v_shape[4] = {0, 1, 1, 0};
    Schedule s;
    empty_schedule(&s, 2, 2, 1, v_shape, 0);
    s.lowered = 1;
    append_text(&s, 0, "0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0");
    append_text(&s, 1, "1RECV_F0 2F0 1F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0");
    ck_assert_int_eq(sched_validate(&s, err, sizeof err, NULL), PP_EUSAGE);
    ck_assert_str_eq(err, "rank 1 step 1 (2F0): runs before its input 1F0");
    sched_free(&s);
    empty_schedule(&s, 2, 2, 1, v_shape, 0);
    append_text(&s, 1, "1SEND_F0");
    ck_assert_int_eq(sched_validate(&s, err, sizeof err, NULL), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "handed over locally"));
    sched_free(&s);
    /* a schedule file has looped placement: the same lists are on the wrong ranks */
    ck_assert_int_eq(sched_load_text(&s, "0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1\n"
                                     "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1\n", "v.txt", 2, 2, 2, err,
                                     sizeof err, NULL), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "its stage lives on another rank (stage mod P)"));
}
END_TEST

START_TEST(test_peak_inflight) {
    /* the pool sizes by stage against the published closed forms (the sweep checks
     * them by rank): GPipe keeps all M, 1F1B min(P - r, M) on stage r */
    char err[ERRLEN];
    Schedule s;
    ck_assert_int_eq(sched_build(&s, "1f1b", 4, 1, 8, err, sizeof err), PP_OK);
    for (int r = 0; r < 4; r++) ck_assert_int_eq(sched_peak_inflight(&s, r), 4 - r);
    sched_free(&s);
    ck_assert_int_eq(sched_build(&s, "1f1b", 4, 1, 2, err, sizeof err), PP_OK);
    for (int r = 0; r < 4; r++) ck_assert_int_eq(sched_peak_inflight(&s, r), 4 - r < 2 ? 4 - r : 2);
    sched_free(&s);
    ck_assert_int_eq(sched_build(&s, "gpipe", 3, 1, 5, err, sizeof err), PP_OK);
    for (int r = 0; r < 3; r++) ck_assert_int_eq(sched_peak_inflight(&s, r), 5);
    sched_free(&s);
    /* interleaved, P=2 v=2 M=4: the chunks of a rank share its (v-1)*P + 2(P-1-r) + 1 */
    ck_assert_int_eq(sched_build(&s, "interleaved-1f1b", 2, 2, 4, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_peak_inflight_rank(&s, 0), 5);
    ck_assert_int_eq(sched_peak_inflight_rank(&s, 1), 3);
    for (int st = 0; st < 4; st++) {
        int rank_peak = sched_peak_inflight_rank(&s, sched_stage_rank(&s, st));
        ck_assert_int_le(sched_peak_inflight(&s, st), rank_peak);
    }
    sched_free(&s);
}
END_TEST

/* ------------------------------------------------- one rule for everyone --- */

/* The k-th (0 <= k < n!) permutation of the n actions of src, into dst. */
static void permutation(const Action *src, int n, int k, Action *dst) {
    Action pool[8];
    memcpy(pool, src, (size_t)n * sizeof *src);
    for (int i = 0; i < n; i++) {
        int f = 1;
        for (int j = 2; j < n - i; j++) f *= j;
        int q = k / f;
        k %= f;
        dst[i] = pool[q];
        memmove(&pool[q], &pool[q + 1], (size_t)(n - 1 - i - q) * sizeof *pool);
    }
}

/* Node of compute action a: F and B of each (stage, microbatch). */
static int node_of(const Schedule *s, Action a) { return (a.type * s->S + a.stage) * s->M + a.mb; }

/* The reference, independent of the lowering: whether the rank orders of compute-only
 * s and the dependencies of sched_action_deps (a transfer followed back to the compute
 * that produces it) admit one global order (Kahn's algorithm). */
static int orders_consistent(const Schedule *s) {
    enum { N = 64 };
    int indeg[N] = {0}, nout[N] = {0}, out[N][8], queue[N];
    int head = 0, tail = 0;
    ck_assert_int_le(2 * s->S * s->M, N);
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action a = s->acts[r][i], deps[SCHED_MAX_DEPS];
            int to = node_of(s, a), n = sched_action_deps(s, a, deps);
            if (i > 0) { /* the rank's order */
                int from = node_of(s, s->acts[r][i - 1]);
                out[from][nout[from]++] = to;
            }
            for (int j = 0; j < n; j++) { /* the dependencies */
                Action d = deps[j];
                for (Action dd[SCHED_MAX_DEPS]; d.type != ACT_F && d.type != ACT_B; d = dd[0])
                    sched_action_deps(s, d, dd);
                out[node_of(s, d)][nout[node_of(s, d)]++] = to;
            }
        }
    for (int u = 0; u < 2 * s->S * s->M; u++)
        for (int j = 0; j < nout[u]; j++) indeg[out[u][j]]++;
    for (int u = 0; u < 2 * s->S * s->M; u++)
        if (!indeg[u]) queue[tail++] = u;
    while (head < tail)
        for (int u = queue[head++], j = 0; j < nout[u]; j++)
            if (--indeg[out[u][j]] == 0) queue[tail++] = out[u][j];
    return tail == 2 * s->S * s->M;
}

/* The orders of rank r's n compute actions in base: all of them when `keep_mb` is 0,
 * else those that keep each microbatch's actions in base's order. Returns how many
 * (malloc'd into *orders, n actions each). */
static int rank_orders(const Schedule *base, int r, int keep_mb, Action **orders) {
    int n = base->len[r], fact = 1, count = 0;
    for (int j = 2; j <= n; j++) fact *= j;
    *orders = malloc((size_t)fact * n * sizeof(Action));
    for (int k = 0; k < fact; k++) {
        Action *o = *orders + (size_t)count * n;
        permutation(base->acts[r], n, k, o);
        int ok = 1;
        for (int i = 0; i < n && keep_mb; i++) /* base position of o[i] must increase per mb */
            for (int j = i + 1; j < n; j++)
                if (o[i].mb == o[j].mb) {
                    int pi = 0, pj = 0;
                    while (!action_eq(base->acts[r][pi], o[i])) pi++;
                    while (!action_eq(base->acts[r][pj], o[j])) pj++;
                    ok &= pi < pj;
                }
        count += ok;
    }
    return count;
}

/* Each plan one adjacent swap away from lowered s that the validator accepts, the
 * simulator runs. Returns how many there were. */
static int check_swaps(Schedule *s) {
    char err[ERRLEN];
    SchedSimResult res;
    int accepted = 0;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i + 1 < s->len[r]; i++) {
            Action tmp = s->acts[r][i];
            s->acts[r][i] = s->acts[r][i + 1];
            s->acts[r][i + 1] = tmp;
            if (sched_validate(s, err, sizeof err, NULL) == PP_OK) {
                accepted++;
                REQUIRE(sched_sim_run(s, NULL, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
                sched_sim_result_free(&res);
            }
            s->acts[r][i + 1] = s->acts[r][i];
            s->acts[r][i] = tmp;
        }
    return accepted;
}

/* Every pair of rank orders (rank_orders) of the compute lists rank0, rank1 on two
 * ranks: the lowering succeeds exactly when the reference finds a global order, and
 * then the validator and the simulator accept the result (and check_swaps holds). */
static void check_orders(int v, int M, const int *placement, const char *rank0, const char *rank1,
                         int keep_mb) {
    char err[ERRLEN];
    Schedule base;
    Action *orders[2];
    empty_schedule(&base, 2, v, M, placement, 0);
    append_text(&base, 0, rank0);
    append_text(&base, 1, rank1);
    int n0 = rank_orders(&base, 0, keep_mb, &orders[0]);
    int n1 = rank_orders(&base, 1, keep_mb, &orders[1]);
    int lowered = 0, refused = 0, swaps_ok = 0;
    for (int k = 0; k < n0 * n1; k++) {
        Schedule s;
        SchedSimResult res;
        empty_schedule(&s, 2, v, M, placement, 0);
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < base.len[r]; i++)
                sched_append(&s, r, orders[r][(size_t)(r ? k % n1 : k / n1) * base.len[r] + i]);
        int want = orders_consistent(&s), rc = sched_lower(&s, err, sizeof err, NULL);
        REQUIRE((rc == PP_OK) == want, "orders %d: lowering says %d (%s), reference %d", k, rc,
                err, want);
        if (rc == PP_OK) {
            lowered++;
            REQUIRE(sched_validate(&s, err, sizeof err, NULL) == PP_OK, "%s", err);
            REQUIRE(sched_sim_run(&s, NULL, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
            sched_sim_result_free(&res);
            swaps_ok += check_swaps(&s);
        } else {
            refused++;
            REQUIRE(strstr(err, "runs before") || strstr(err, "deadlock"), "%s", err);
        }
        sched_free(&s);
    }
    ck_assert_int_gt(lowered, 0); /* the sweep checked both outcomes */
    ck_assert_int_gt(refused, 0);
    ck_assert_int_gt(swaps_ok, 0);
    free(orders[0]);
    free(orders[1]);
    sched_free(&base);
}

START_TEST(test_one_rule) {
    int v_shape[4] = {0, 1, 1, 0};
    /* every order of 1F1B's two ranks, local order broken or not */
    check_orders(1, 2, NULL, "0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1", 0);
    /* two microbatches interleaved in every way, on a V and looped */
    check_orders(2, 2, v_shape, "0F0 3F0 3B0 0B0 0F1 3F1 3B1 0B1",
                 "1F0 2F0 2B0 1B0 1F1 2F1 2B1 1B1", 1);
    check_orders(2, 2, NULL, "0F0 2F0 2B0 0B0 0F1 2F1 2B1 0B1",
                 "1F0 3F0 3B0 1B0 1F1 3F1 3B1 1B1", 1);
}
END_TEST

/* ------------------------------------------------------------ forward-only --- */

START_TEST(test_forward_only) {
    char err[ERRLEN];
    for (int P = 1; P <= 4; P++)
        for (int v = 1; v <= 3; v++)
            for (int M = 1; M <= 9; M += 4) {
                Schedule s, train;
                SchedSimResult res;
                ck_assert_int_eq(sched_build(&train, v > 1 ? "interleaved-1f1b" : "1f1b", P, v, M,
                                             err, sizeof err), PP_OK);
                ck_assert_msg(sched_build_forward_only(&s, &train, err, sizeof err) == PP_OK, "%s",
                              err);
                ck_assert(s.forward_only && s.lowered);
                ck_assert(!memcmp(s.stage_rank, train.stage_rank, s.S * sizeof(int)));
                sched_free(&train);
                for (int r = 0; r < P; r++) {
                    int nf = 0;
                    for (int i = 0; i < s.len[r]; i++) {
                        int t = s.acts[r][i].type;
                        ck_assert(t == ACT_F || t == ACT_SEND_F || t == ACT_RECV_F);
                        nf += t == ACT_F;
                    }
                    ck_assert_int_eq(nf, v * M);
                }
                for (int st = 0; st < s.S; st++) ck_assert_int_eq(sched_peak_inflight(&s, st), 1);
                /* on one rank F(s+1) reads stage s's slot while it fills its own */
                for (int r = 0; r < P; r++)
                    ck_assert_int_eq(sched_peak_inflight_rank(&s, r), P == 1 && v > 1 ? 2 : 1);
                ck_assert_int_eq(sched_sim_run(&s, NULL, &res, err, sizeof err, NULL), PP_OK);
                if (v == 1) ck_assert_double_eq(res.makespan, M + P - 1.0); /* F = 1 */
                ck_assert_double_eq(sched_bubble_closed_form(&s, NULL), -1);
                sched_sim_result_free(&res);
                sched_free(&s);
            }
}
END_TEST

/* --------------------------------------------------------------- simulator --- */

static double cost_by_stage(void *ctx, int rank, Action a) {
    const double *per_stage = ctx;
    if (a.type == ACT_SEND_F || a.type == ACT_SEND_B) return 0.25;
    return a.type == ACT_F ? per_stage[a.stage] : 2 * per_stage[a.stage];
}

START_TEST(test_sim_costs) {
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    SchedSimCosts c;
    /* one microbatch through P stages: P(F+B) + 2(P-1)X */
    ck_assert_int_eq(sched_build(&s, "gpipe", 4, 1, 1, err, sizeof err), PP_OK);
    sched_sim_costs_default(&c);
    c.F = 1.5;
    c.B = 2.5;
    c.X = 0.5;
    ck_assert_int_eq(sched_sim_run(&s, &c, &res, err, sizeof err, NULL), PP_OK);
    ck_assert_double_eq_tol(res.makespan, 4 * 4.0 + 2 * 3 * 0.5, 1e-12);
    ck_assert_double_eq_tol(res.busy[2], 4.0, 1e-12);
    sched_sim_result_free(&res);
    /* per-stage arrays: the slowest stage sets the pace of GPipe */
    double fs[4] = {1, 1, 3, 1}, bs[4] = {1, 1, 3, 1};
    sched_sim_costs_default(&c);
    c.F_stage = fs;
    c.B_stage = bs;
    sched_free(&s);
    ck_assert_int_eq(sched_build(&s, "gpipe", 4, 1, 5, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_sim_run(&s, &c, &res, err, sizeof err, NULL), PP_OK);
    /* forward: 2 + 5*3 + 1 = 18 until the last F ends; backward mirrors it: 18 */
    ck_assert_double_eq_tol(res.makespan, 36, 1e-12);
    ck_assert_double_eq_tol(res.busy[2], 30, 1e-12);
    sched_sim_result_free(&res);
    /* a callback overrides everything, transfers included */
    sched_sim_costs_default(&c);
    c.action_cost = cost_by_stage;
    c.ctx = fs;
    sched_free(&s);
    ck_assert_int_eq(sched_build(&s, "1f1b", 4, 1, 1, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_sim_run(&s, &c, &res, err, sizeof err, NULL), PP_OK);
    ck_assert_double_eq_tol(res.makespan, 6 + 12 + 6 * 0.25, 1e-12);
    sched_sim_result_free(&res);
    sched_free(&s);
}
END_TEST

START_TEST(test_sim_deadlock) {
    /* lowered, never validated: rank 1 computes microbatch 1 first, rank 0 needs
     * microbatch 0's gradient before it sends microbatch 1 */
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    Capture grid;
    ck_assert_int_eq(sched_init(&s, "cycle", 2, 1, 2, err, sizeof err), PP_OK);
    s.lowered = 1;
    const char *r0[] = {"0F0", "0SEND_F0", "0RECV_B0", "0B0", "0F1", "0SEND_F1", "0RECV_B1", "0B1"};
    const char *r1[] = {"1RECV_F0", "1RECV_F1", "1F1", "1B1", "1SEND_B1", "1F0", "1B0", "1SEND_B0"};
    for (int i = 0; i < 8; i++) {
        Action a;
        ck_assert_int_eq(sched_action_parse(r0[i], &a), PP_OK);
        sched_append(&s, 0, a);
        ck_assert_int_eq(sched_action_parse(r1[i], &a), PP_OK);
        sched_append(&s, 1, a);
    }
    cap_open(&grid);
    ck_assert_int_eq(sched_sim_run(&s, NULL, &res, err, sizeof err, grid.f), PP_ERUNTIME);
    ck_assert_ptr_nonnull(strstr(err, "deadlock"));
    ck_assert_ptr_nonnull(strstr(err, "rank 0 stuck at step 3 (0B0)"));
    ck_assert_ptr_nonnull(strstr(err, "rank 1 stuck at step 2 (1F1)"));
    ck_assert_ptr_nonnull(strstr(cap_text(&grid), "*0B0*"));
    ck_assert_ptr_nonnull(strstr(cap_text(&grid), "*1F1*"));
    sched_sim_result_free(&res);
    /* the validator rejects it too (the gradients come back out of order) */
    ck_assert_int_eq(sched_validate(&s, err, sizeof err, NULL), PP_EUSAGE);
    cap_close(&grid);
    sched_free(&s);
    /* a compute-only multi-rank schedule cannot be simulated */
    ck_assert_int_eq(sched_generate(&s, "1f1b", 2, 1, 2, err, sizeof err), PP_OK);
    ck_assert_int_eq(sched_sim_run(&s, NULL, &res, err, sizeof err, NULL), PP_EUSAGE);
    sched_sim_result_free(&res);
    sched_free(&s);
}
END_TEST

START_TEST(test_sim_posted_receives) {
    /* A receive listed early is only posted: the simulator runs a plan the
     * validator rejects for blocking receives (see sched.h's runtime contract). */
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    ck_assert_int_eq(sched_init(&s, "early", 2, 1, 1, err, sizeof err), PP_OK);
    s.lowered = 1;
    const char *r0[] = {"0RECV_B0", "0F0", "0SEND_F0", "0B0"};
    const char *r1[] = {"1RECV_F0", "1F0", "1B0", "1SEND_B0"};
    for (int i = 0; i < 4; i++) {
        Action a;
        sched_action_parse(r0[i], &a);
        sched_append(&s, 0, a);
        sched_action_parse(r1[i], &a);
        sched_append(&s, 1, a);
    }
    ck_assert_int_eq(sched_sim_run(&s, NULL, &res, err, sizeof err, NULL), PP_OK);
    ck_assert_double_eq(res.makespan, 6);
    ck_assert_int_eq(sched_validate(&s, err, sizeof err, NULL), PP_EUSAGE);
    sched_sim_result_free(&res);
    sched_free(&s);
}
END_TEST

/* ----------------------------------------------------------------- display --- */

START_TEST(test_timeline_text) {
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    SchedSimCosts c;
    Capture out;
    ck_assert_int_eq(sched_build(&s, "gpipe", 2, 1, 2, err, sizeof err), PP_OK);
    sched_sim_costs_default(&c);
    c.B = 1;
    ck_assert_int_eq(sched_sim_run(&s, &c, &res, err, sizeof err, NULL), PP_OK);
    cap_open(&out);
    sched_show_timeline(&s, &res, out.f);
    ck_assert_str_eq(cap_text(&out),
                     "timeline (one column = 1 time unit, '.' = idle):\n"
                     "time    0              5\n"
                     "rank 0  F0 F1 .  .  B0 B1\n"
                     "rank 1  .  F0 F1 B0 B1 .\n");
    cap_close(&out);
    sched_sim_result_free(&res);
    sched_free(&s);
}
END_TEST

START_TEST(test_json_and_svg) {
    char err[ERRLEN];
    Schedule s;
    SchedSimResult res;
    SchedSimCosts c;
    Capture out;
    ck_assert_int_eq(sched_build(&s, "interleaved-1f1b", 2, 2, 4, err, sizeof err), PP_OK);
    sched_sim_costs_default(&c);
    ck_assert_int_eq(sched_sim_run(&s, &c, &res, err, sizeof err, NULL), PP_OK);
    cap_open(&out);
    const char *layers[4] = {"layers 0-1", "layers 2-3", "layers 4-5", "layers \"6-7\""};
    sched_show_json(&s, &res, &c, layers, out.f);
    const char *j = cap_text(&out);
    const char *keys[] = {"\"schedule\": \"interleaved-1f1b\"",
                          "\"ranks\": 2",
                          "\"virtual_stages\": 2",
                          "\"microbatches\": 4",
                          "\"makespan\": 27",
                          "\"bubble_fraction\": 0.1111111111",
                          "\"per_rank\": [",
                          "{\"rank\": 1, \"busy\": 24, \"idle\": 3, \"peak_inflight\": 3, "
                          "\"actions\": [\"1RECV_F0\", \"1F0\", \"1SEND_F0\"",
                          "\"layers\": \"layers \\\"6-7\\\"\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(j, keys[i]) != NULL, "JSON lacks %s:\n%s", keys[i], j);
    ck_assert_int_eq(j[0], '{');
    ck_assert_str_eq(j + strlen(j) - 2, "}\n");
    cap_close(&out);
    cap_open(&out);
    sched_show_svg(&s, &res, &c, out.f);
    const char *svg = cap_text(&out);
    ck_assert(!strncmp(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39));
    ck_assert_str_eq(svg + strlen(svg) - 7, "</svg>\n");
    ck_assert_ptr_nonnull(strstr(svg, "rank 1</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "url(#idle)"));
    ck_assert_ptr_nonnull(strstr(svg, "<title>3B3: "));
    cap_close(&out);
    sched_sim_result_free(&res);
    sched_free(&s);
}
END_TEST

/* -------------------------------------------------------------------- CLI --- */

static Config cmd_config(const char *kind, int P, int v, int M) {
    Config c;
    memset(&c, 0, sizeof c);
    c.stages = P;
    c.virtual_stages = v;
    c.microbatches = M;
    snprintf(c.schedule, sizeof c.schedule, "%s", kind);
    /* the model the partition column splits: one layer per stage at least */
    c.n_layers = 2 * P * v;
    c.dim = 64;
    c.padded_vocab_size = 256;
    c.seq_len = 64;
    snprintf(c.split, sizeof c.split, "auto");
    /* and what the memory plan reads */
    snprintf(c.arch, sizeof c.arch, "gpt2");
    c.vocab_size = 256;
    c.max_seq_len = 64;
    c.n_heads = 4;
    c.batch_size = M;
    c.tie_embeddings = 1;
    snprintf(c.balance, sizeof c.balance, "time");
    snprintf(c.recompute, sizeof c.recompute, "none");
    snprintf(c.optimizer, sizeof c.optimizer, "adamw");
    return c;
}

/* Run plan_cmd_main with stdout and stderr captured into *out (malloc'd). */
static int run_cmd(const Config *cfg, char **out, int argc, char **argv) {
    char path[] = "/tmp/test_sched_out_XXXXXX";
    int fd = mkstemp(path), saved_out = dup(1), saved_err = dup(2);
    ck_assert_int_ge(fd, 0);
    fflush(stdout);
    fflush(stderr);
    dup2(fd, 1);
    dup2(fd, 2);
    int rc = plan_cmd_main(cfg, argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(fd);
    close(saved_out);
    close(saved_err);
    *out = read_all(path);
    unlink(path);
    return rc;
}

START_TEST(test_cmd_default_and_json) {
    Config cfg = cmd_config("gpipe", 2, 1, 4);
    char *out, *argv1[] = {"schedule", "--costs", "1,1,0"};
    ck_assert_int_eq(run_cmd(&cfg, &out, 3, argv1), 0);
    const char *want[] = {"rank 0: 0F0 0SEND_F0", "timeline", "rank 1  .  F0 F1 F2 F3 B0",
                          "makespan 10, bubble fraction 0.2000 (closed form (P-1)/(M+P-1) = 0.2000",
                          "peak_inflight"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out, want[i]) != NULL, "output lacks '%s':\n%s", want[i], out);
    free(out);
    char *argv2[] = {"schedule", "--json", "--config", "x.yaml", "--set", "a=b"};
    ck_assert_int_eq(run_cmd(&cfg, &out, 6, argv2), 0);
    ck_assert_int_eq(out[0], '{');
    ck_assert_ptr_nonnull(strstr(out, "\"makespan\": 15"));
    ck_assert_ptr_null(strstr(out, "timeline"));
    free(out);
}
END_TEST

START_TEST(test_cmd_svg) {
    Config cfg = cmd_config("interleaved-1f1b", 4, 2, 8);
    char path[] = "/tmp/test_sched_svg_XXXXXX";
    close(mkstemp(path));
    char *out, *argv[] = {"schedule", "--svg", path};
    ck_assert_int_eq(run_cmd(&cfg, &out, 3, argv), 0);
    ck_assert_ptr_nonnull(strstr(out, "wrote the timeline picture to"));
    ck_assert_ptr_nonnull(strstr(out, "bubble fraction 0.1579"));
    free(out);
    char *svg = read_all(path);
    ck_assert_ptr_nonnull(svg);
    ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
    free(svg);
    unlink(path);
    char *argv2[] = {"schedule", "--svg", "/nonexistent-dir/x.svg"};
    ck_assert_int_eq(run_cmd(&cfg, &out, 3, argv2), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot write SVG"));
    free(out);
}
END_TEST

START_TEST(test_cmd_errors) {
    Config cfg = cmd_config("1f1b", 2, 1, 4);
    struct { int argc; char *argv[4]; const char *msg; } cases[] = {
        {2, {"schedule", "--bogus"}, "unknown option"},
        {2, {"schedule", "--svg"}, "missing value: '--svg'"},
        {3, {"schedule", "--text", "--json"}, "alternatives"},
        {3, {"schedule", "--costs", "1"}, "--costs wants"},
        {3, {"schedule", "--costs", "1,0,0"}, "--costs wants"},
        {3, {"schedule", "--costs", "1,2,3,"}, "--costs wants"},
        {3, {"schedule", "--costs", "1,2,-1"}, "--costs wants"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        ck_assert_int_eq(run_cmd(&cfg, &out, cases[i].argc, cases[i].argv), 2);
        ck_assert_msg(strstr(out, cases[i].msg) && strstr(out, "usage: pptrain schedule"),
                      "case %zu: %s", i, out);
        free(out);
    }
    char *out, *argv[] = {"schedule"};
    cfg.virtual_stages = 2;
    ck_assert_int_eq(run_cmd(&cfg, &out, 1, argv), 2);
    ck_assert_ptr_nonnull(
        strstr(out, "pipeline.virtual_stages is 2 but pipeline.schedule is 1f1b"));
    free(out);
    cfg = cmd_config("1f1b", 2, 1, 4);
    snprintf(cfg.schedule_file, sizeof cfg.schedule_file, "/nonexistent/plan.txt");
    ck_assert_int_eq(run_cmd(&cfg, &out, 1, argv), 2);
    ck_assert_ptr_nonnull(strstr(out, "/nonexistent/plan.txt"));
    free(out);
}
END_TEST

/* -------------------------------------------------------------------------- */

static Suite *sched_suite(void) {
    Suite *s = suite_create("sched");
    struct { const char *name; const TTest *fn; } tests[] = {
        {"action_text_examples", test_action_text_examples},
        {"action_text_rejects", test_action_text_rejects},
        {"placement", test_placement},
        {"action_deps", test_action_deps},
        {"action_frees", test_action_frees},
        {"keep_marks", test_keep_marks},
        {"kind_table", test_kind_table},
        {"sweep_gpipe", test_sweep_gpipe},
        {"sweep_1f1b", test_sweep_1f1b},
        {"sweep_interleaved", test_sweep_interleaved},
        {"sweep_looped_bfs", test_sweep_looped_bfs},
        {"sweep_zb_h1", test_sweep_zb_h1},
        {"sweep_zbv", test_sweep_zbv},
        {"zero_bubble_must_show", test_zero_bubble_must_show},
        {"compute_order_shapes", test_compute_order_shapes},
        {"build_errors", test_build_errors},
        {"golden", test_golden},
        {"reject_missing_backward", test_reject_missing_backward},
        {"reject_swapped_sends", test_reject_swapped_sends},
        {"reject_cycle", test_reject_cycle},
        {"reject_local_order_and_ranges", test_reject_local_order_and_ranges},
        {"reject_text_errors", test_reject_text_errors},
        {"validate_direct", test_validate_direct},
        {"load_compute_only_and_lowered", test_load_compute_only_and_lowered},
        {"lower_is_fifo_and_local", test_lower_is_fifo_and_local},
        {"v_placement", test_v_placement},
        {"v_placement_checks", test_v_placement_checks},
        {"peak_inflight", test_peak_inflight},
        {"one_rule", test_one_rule},
        {"forward_only", test_forward_only},
        {"sim_costs", test_sim_costs},
        {"sched_sim_deadlock", test_sim_deadlock},
        {"sched_sim_posted_receives", test_sim_posted_receives},
        {"timeline_text", test_timeline_text},
        {"json_and_svg", test_json_and_svg},
        {"cmd_default_and_json", test_cmd_default_and_json},
        {"cmd_svg", test_cmd_svg},
        {"cmd_errors", test_cmd_errors},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        TCase *tc = tcase_create(tests[i].name);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, tests[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void) {
    return check_run(sched_suite(), 0);
}
