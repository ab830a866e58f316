/* test_interp.c — the pipeline interpreter in one process: every rank of a schedule is
 * a Runtime on its own thread over the in-memory transport, and a turn hook steps their
 * actions one at a time in the order the simulator runs them. After two optimizer steps
 * the losses and every parameter must equal the one-rank run bitwise, for every
 * generated schedule over a sweep of P, v and M (DESIGN.md §5; without gradient
 * clipping, whose global norm each rank sums over its own tensors first: the norm
 * itself agrees to rounding), GPT-2 and Llama's block. A schedule
 * whose dependencies are wrong makes a rank consume a message that is not there yet:
 * the receive times out and the case fails. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "runtime/runtime.h"
#include "sched/sched_sim.h"
#include "checkrun.h"

#define STEPS 2
#define MAX_P 4
#define TURN_TIMEOUT_S 20

/* ---- turns: one global order of every rank's actions of the training schedule ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int P, n;           /* ranks, actions per step over all ranks */
    int *pos;           /* [P][max len]: position of (rank, k) in the global order */
    int maxlen;
    long next;          /* the global position whose turn it is (over all steps) */
    int steps[MAX_P];   /* steps each rank has begun */
} Turns;

typedef struct {
    int r, k;
    double t;
} Slot;

static int by_time(const void *a, const void *b) {
    const Slot *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->r != y->r ? x->r - y->r : x->k - y->k;
}

/* The simulator's order for sc: sort by start time. Transfers cost X > 0, so that a
 * message's consumer starts strictly after its sender; a rank's own actions keep their
 * list order (their start times never decrease). */
static void turns_build(Turns *t, const Schedule *sc) {
    SchedSimCosts c;
    SchedSimResult res;
    char err[PP_ERR_MAX];
    sched_sim_costs_default(&c);
    c.X = 0.5;
    ck_assert_msg(sched_sim_run(sc, &c, &res, err, sizeof err, NULL) == PP_OK, "sim: %s", err);
    t->n = 0;
    t->maxlen = 0;
    for (int r = 0; r < sc->P; r++) {
        t->n += sc->len[r];
        t->maxlen = sc->len[r] > t->maxlen ? sc->len[r] : t->maxlen;
    }
    Slot *all = malloc(t->n * sizeof *all);
    int i = 0;
    for (int r = 0; r < sc->P; r++)
        for (int k = 0; k < sc->len[r]; k++) all[i++] = (Slot){r, k, res.start[r][k]};
    qsort(all, t->n, sizeof *all, by_time);
    t->pos = malloc((size_t)sc->P * t->maxlen * sizeof(int));
    for (i = 0; i < t->n; i++) t->pos[all[i].r * t->maxlen + all[i].k] = i;
    free(all);
    sched_sim_result_free(&res);
}

/* Runtime action hook: wait for (rank, k)'s turn before it runs; pass the turn on after. */
static void turn_hook(void *ctx, const Schedule *sc, int pp, int k, int done) {
    Turns *t = ctx;
    if (sc->forward_only) return; /* validation is not stepped (the tests run none) */
    pthread_mutex_lock(&t->mu);
    if (!t->pos) turns_build(t, sc);
    if (done) {
        t->next++;
        pthread_cond_broadcast(&t->cv);
    } else {
        if (k == 0) t->steps[pp]++;
        long mine = (long)(t->steps[pp] - 1) * t->n + t->pos[pp * t->maxlen + k];
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += TURN_TIMEOUT_S;
        while (t->next != mine)
            if (pthread_cond_timedwait(&t->cv, &t->mu, &until) != 0) {
                fprintf(stderr, "rank %d action %d never got its turn (a rank is stuck)\n", pp, k);
                abort(); /* fork mode: the case fails */
            }
    }
    pthread_mutex_unlock(&t->mu);
}

/* ---- one run: P ranks on threads, or one rank ---- */

typedef struct {
    char name[32];
    float *data;
    size_t n;
} Named;

typedef struct {
    const Config *cfg;
    Comm *comm;
    Turns *turns;
    double loss[STEPS], norm[STEPS];
    Named *params; /* [ntensors] host copies after the last step */
    int nparams, rc;
    long recomputes, plan, skipped; /* the model's layer recomputes over STEPS; the
                                       runtime's per-step plan and skips */
    int logits_rows;                /* the model's head chunk ([Note: chunked head] in model.c) */
    char err[PP_ERR_MAX];
} Job;

static void *run_rank(void *arg) {
    Job *j = arg;
    Runtime rt;
    j->rc = runtime_init(&rt, j->cfg, j->comm, NULL, j->err, sizeof j->err);
    if (j->rc == PP_OK) {
        rt.action_hook = j->turns ? turn_hook : NULL;
        rt.hook_ctx = j->turns;
        for (int step = 0; step < STEPS && j->rc == PP_OK; step++) {
            StepResult res;
            j->rc = runtime_step(&rt, step, NULL, 0, &res, j->err, sizeof j->err);
            j->loss[step] = res.loss;
            j->norm[step] = res.grad_norm;
        }
    }
    if (j->rc == PP_OK) {
        const Model *m = &rt.model;
        j->recomputes = m->recomputes;
        j->plan = rt.recompute_plan;
        j->skipped = rt.recompute_skipped;
        j->logits_rows = m->logits_rows;
        j->nparams = m->ntensors;
        j->params = calloc(m->ntensors, sizeof(Named));
        for (int i = 0; i < m->ntensors; i++) {
            const ParamTensor *t = &m->tensors[i];
            Named *p = &j->params[i];
            snprintf(p->name, sizeof p->name, "%s", t->name);
            p->n = t->numel;
            p->data = malloc(t->numel * sizeof(float));
            m->be->to_host(m->be, p->data, m->params + t->offset, t->numel * sizeof(float));
        }
        m->be->wait(m->be);
    }
    if (j->rc != PP_OK) fprintf(stderr, "rank %d: %s\n", j->comm->rank, j->err);
    if (rt.cfg) runtime_free(&rt);
    return NULL;
}

static void job_free(Job *j) {
    for (int i = 0; i < j->nparams; i++) free(j->params[i].data);
    free(j->params);
}

/* The model the cases train: gpt-tiny's GPT-2, or (g_llama, set by a case: each runs in
 * its own fork) llama-tiny's block with 4 query heads sharing 2 key/value heads. */
static int g_llama;

/* recompute: "pipeline.recompute=..." (and any other setting), or NULL */
static void make_config(Config *c, const char *kind, int P, int v, int M, int tied,
                        const char *recompute) {
    char err[PP_ERR_MAX], set[128];
    config_defaults(c);
    const char *file = g_llama ? "configs/llama-tiny.yaml" : "configs/gpt-tiny.yaml";
    ck_assert_msg(config_load_file(c, file, err, sizeof err) == PP_OK, "%s", err);
    const char *fixed[] = {"model.n_layers=8", "model.dim=16", "model.n_heads=2",
                           "model.max_seq_len=8", "train.seq_len=8", "data.val=null",
                           "runtime.threads=1", "train.grad_clip=0"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        ck_assert_msg(config_set(c, fixed[i], err, sizeof err) == PP_OK, "%s: %s", fixed[i], err);
    const char *llama[] = {"model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=24"};
    for (size_t i = 0; g_llama && i < sizeof llama / sizeof llama[0]; i++)
        ck_assert_msg(config_set(c, llama[i], err, sizeof err) == PP_OK, "%s: %s", llama[i], err);
    const char *fmt[] = {"pipeline.schedule=%s", "pipeline.stages=%d",
                         "pipeline.virtual_stages=%d", "pipeline.microbatches=%d",
                         "train.batch_size=%d", "model.tie_embeddings=%s"};
    for (int i = 0; i < 6; i++) {
        if (i == 0) snprintf(set, sizeof set, fmt[i], kind);
        else if (i == 5) snprintf(set, sizeof set, fmt[i], tied ? "true" : "false");
        else snprintf(set, sizeof set, fmt[i], i == 1 ? P : i == 2 ? v : M);
        ck_assert_msg(config_set(c, set, err, sizeof err) == PP_OK, "%s: %s", set, err);
    }
    if (recompute)
        ck_assert_msg(config_set(c, recompute, err, sizeof err) == PP_OK, "%s: %s", recompute, err);
    ck_assert_msg(config_finalize(c, err, sizeof err) == PP_OK, "%s", err);
}

/* Run the config on its P ranks (threads over the memory transport, stepped in the
 * simulator's order), or on one rank when P is 1. jobs[P] filled. */
static void run(const Config *c, Job *jobs) {
    int P = c->stages;
    Comm *comms[MAX_P];
    Turns turns = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .P = P};
    ck_assert_int_eq(comm_memory_create(P, 10.0, comms), PP_OK);
    pthread_t th[MAX_P];
    for (int r = 0; r < P; r++) {
        jobs[r] = (Job){.cfg = c, .comm = comms[r], .turns = P > 1 ? &turns : NULL};
        ck_assert_int_eq(pthread_create(&th[r], NULL, run_rank, &jobs[r]), 0);
    }
    for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < P; r++) comm_destroy(comms[r]);
    free(turns.pos);
    for (int r = 0; r < P; r++) ck_assert_msg(jobs[r].rc == PP_OK, "rank %d: %s", r, jobs[r].err);
}

static const Named *find(const Job *j, const char *name) {
    for (int i = 0; i < j->nparams; i++)
        if (!strcmp(j->params[i].name, name)) return &j->params[i];
    return NULL;
}

/* Every tensor of every rank equals the reference's bitwise; every reference tensor
 * is held somewhere. Returns the tensors compared. */
static int compare(const Job *ref, const Job *jobs, int P, const char *what) {
    int compared = 0;
    for (int s = 0; s < STEPS; s++)
        for (int r = 0; r < P; r++) {
            ck_assert_msg(jobs[r].loss[s] == ref->loss[s],
                          "%s rank %d step %d: loss %.17g, one rank %.17g", what, r, s,
                          jobs[r].loss[s], ref->loss[s]);
            ck_assert_msg(fabs(jobs[r].norm[s] - ref->norm[s]) <= 1e-12 * ref->norm[s],
                          "%s rank %d step %d: norm %.17g, one rank %.17g", what, r, s,
                          jobs[r].norm[s], ref->norm[s]);
        }
    for (int i = 0; i < ref->nparams; i++) {
        const Named *want = &ref->params[i];
        int held = 0;
        for (int r = 0; r < P; r++) {
            const Named *got = find(&jobs[r], want->name);
            if (!got) continue;
            held++;
            ck_assert_uint_eq(got->n, want->n);
            size_t wrong = 0;
            for (size_t e = 0; e < want->n; e++)
                wrong += memcmp(&got->data[e], &want->data[e], sizeof(float)) != 0;
            ck_assert_msg(wrong == 0,
                          "%s rank %d: %zu of %zu elements of %s differ from the one-rank run",
                          what, r, wrong, want->n, want->name);
            compared++;
        }
        ck_assert_msg(held >= 1, "%s: no rank holds %s", what, want->name);
    }
    return compared;
}

/* Every P <= MAX_P, v <= vmax, M <= mmax of a schedule kind against the one-rank run;
 * rows: the head's logits chunk every rank must have built with (0: not checked). */
static void sweep_rows(const char *kind, int vmin, int vmax, int mmax, int tied, int rows) {
    int cases = 0;
    for (int M = 1; M <= mmax; M++) {
        Config c1;
        Job ref;
        make_config(&c1, "1f1b", 1, 1, M, tied, NULL);
        run(&c1, &ref);
        for (int P = 2; P <= MAX_P; P++)
            for (int v = vmin; v <= vmax; v++) {
                Config c;
                Job jobs[MAX_P];
                char what[64];
                make_config(&c, kind, P, v, M, tied, NULL);
                snprintf(what, sizeof what, "%s P=%d v=%d M=%d", kind, P, v, M);
                run(&c, jobs);
                ck_assert_int_gt(compare(&ref, jobs, P, what), 0);
                for (int r = 0; r < P && rows; r++)
                    ck_assert_msg(jobs[r].logits_rows == rows && ref.logits_rows == rows,
                                  "%s rank %d: the head computes %d rows at once, one rank %d, "
                                  "expected %d",
                                  what, r, jobs[r].logits_rows, ref.logits_rows, rows);
                for (int r = 0; r < P; r++) job_free(&jobs[r]);
                cases++;
            }
        job_free(&ref);
    }
    ck_assert_int_ge(cases, 3 * mmax); /* the sweep ran */
}

static void sweep(const char *kind, int vmin, int vmax, int mmax, int tied) {
    sweep_rows(kind, vmin, vmax, mmax, tied, 0);
}

/* [Note: recompute] selective and full recompute, on every layer or the first of each
 * chunk, against the one-rank run without recompute: bitwise. The model's count of
 * layer recomputes is what the schedule's keep marks imply each step; on 1F1B the
 * last stage keeps every forward (its backward follows at once) and, with M >= 2,
 * the first stage none. */
static void sweep_recompute(const char *kind, int v) {
    const char *modes[] = {"pipeline.recompute=selective", "pipeline.recompute=full"};
    int cases = 0, M = 4, P2[] = {2, 4}, layers = 8; /* make_config's n_layers */
    Config c1;
    Job ref;
    make_config(&c1, "1f1b", 1, 1, M, 1, NULL);
    run(&c1, &ref);
    for (int k = 0; k < 2; k++)
        for (int pi = 0; pi < 2; pi++)
            for (int rcl = 0; rcl <= 1; rcl++) {
                Config c;
                Job jobs[MAX_P];
                char what[128];
                int P = P2[pi];
                make_config(&c, kind, P, v, M, 1, modes[k]);
                if (rcl) {
                    char err[PP_ERR_MAX];
                    ck_assert(config_set(&c, "pipeline.recompute_layers=1", err, sizeof err) ==
                              PP_OK);
                }
                snprintf(what, sizeof what, "%s P=%d v=%d M=%d %s layers=%d", kind, P, v, M,
                         modes[k], rcl);
                run(&c, jobs);
                ck_assert_int_gt(compare(&ref, jobs, P, what), 0);
                long total = 0;
                for (int r = 0; r < P; r++) {
                    ck_assert_msg(jobs[r].recomputes == STEPS * jobs[r].plan,
                                  "%s rank %d: %ld recomputes, plan %ld x %d", what, r,
                                  jobs[r].recomputes, jobs[r].plan, STEPS);
                    total += jobs[r].plan + jobs[r].skipped;
                }
                /* every backward action (B, or I and W) of every layer that recomputes */
                int per = rcl ? P * v : layers, nback = strstr(kind, "zb") ? 2 : 1;
                ck_assert_msg(total == (long)M * per * nback,
                              "%s: %ld recomputes planned or skipped, want %d", what, total,
                              M * per * nback);
                if (!strcmp(kind, "1f1b")) {
                    /* M backwards of each of its layers (split: auto gives the head's stage
                     * fewer) */
                    ck_assert_msg(jobs[P - 1].plan == 0 && jobs[P - 1].skipped > 0 &&
                                      jobs[P - 1].skipped % M == 0,
                                  "%s: the last stage recomputes %ld, skips %ld", what,
                                  jobs[P - 1].plan, jobs[P - 1].skipped);
                    ck_assert_msg(jobs[0].skipped == 0 && jobs[0].plan > 0 && jobs[0].plan % M == 0,
                                  "%s: the first stage recomputes %ld, skips %ld", what,
                                  jobs[0].plan, jobs[0].skipped);
                }
                for (int r = 0; r < P; r++) job_free(&jobs[r]);
                cases++;
            }
    job_free(&ref);
    ck_assert_int_eq(cases, 8);
}

START_TEST(test_recompute_gpipe) { sweep_recompute("gpipe", 1); }
END_TEST
START_TEST(test_recompute_1f1b) { sweep_recompute("1f1b", 1); }
END_TEST
START_TEST(test_recompute_interleaved) { sweep_recompute("interleaved-1f1b", 2); }
END_TEST
START_TEST(test_recompute_zbv) { sweep_recompute("zbv", 2); }
END_TEST

START_TEST(test_gpipe) { sweep("gpipe", 1, 1, 5, 1); }
END_TEST
START_TEST(test_1f1b) { sweep("1f1b", 1, 1, 6, 1); }
END_TEST
START_TEST(test_1f1b_untied) { sweep("1f1b", 1, 1, 3, 0); }
END_TEST
START_TEST(test_interleaved) { sweep("interleaved-1f1b", 2, 2, 6, 1); }
END_TEST
/* zero-bubble: the split backward adds weight gradients in microbatch order, as 1F1B's
 * fused one does, so these too equal the one-rank run bitwise */
START_TEST(test_zb_h1) { sweep("zb-h1", 1, 1, 6, 1); }
END_TEST
START_TEST(test_zb_h1_untied) { sweep("zb-h1", 1, 1, 3, 0); }
END_TEST
START_TEST(test_zbv) { sweep("zbv", 2, 2, 6, 1); }
END_TEST
START_TEST(test_looped_bfs) { sweep("looped-bfs", 1, 2, 4, 1); }
END_TEST

/* [Note: chunked head] in model.c: the head's logits in chunks of 3 and of 1 of a
 * microbatch's 8 rows (PPTRAIN_LOGITS_CHUNK_ROWS, which backend_select reads; set in
 * this test's own forked process). Every rank chunks alike, so every schedule, the
 * zero-bubble ones with their split backward too, still trains the one-rank run's bits. */
START_TEST(test_chunked_head) {
    setenv("PPTRAIN_LOGITS_CHUNK_ROWS", "3", 1);
    sweep_rows("1f1b", 1, 1, 3, 1, 3);
    sweep_rows("zb-h1", 1, 1, 3, 1, 3);
    sweep_rows("zbv", 2, 2, 3, 1, 3);
    sweep_rows("interleaved-1f1b", 2, 2, 3, 1, 3);
    setenv("PPTRAIN_LOGITS_CHUNK_ROWS", "1", 1);
    sweep_rows("gpipe", 1, 1, 3, 0, 1);
    sweep_rows("zb-h1", 1, 1, 3, 0, 1);
}
END_TEST

/* The llama family (model/llama.c) through the same interpreter: every schedule, tied and
 * untied, and the recompute modes, bitwise equal to the one-rank run. */
START_TEST(test_llama_schedules) {
    g_llama = 1;
    sweep("gpipe", 1, 1, 2, 0);
    sweep("1f1b", 1, 1, 3, 0);
    sweep("1f1b", 1, 1, 2, 1);
    sweep("interleaved-1f1b", 2, 2, 3, 0);
    sweep("zb-h1", 1, 1, 3, 0);
    sweep("zb-h1", 1, 1, 2, 1);
    sweep("zbv", 2, 2, 3, 0);
}
END_TEST
START_TEST(test_llama_recompute) {
    g_llama = 1;
    sweep_recompute("1f1b", 1);
    sweep_recompute("zbv", 2);
}
END_TEST

int main(void) {
    backend_cpu_set_threads(1);
    Suite *s = suite_create("interp");
    TCase *tc = tcase_create("one process");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gpipe);
    tcase_add_test(tc, test_1f1b);
    tcase_add_test(tc, test_1f1b_untied);
    tcase_add_test(tc, test_interleaved);
    tcase_add_test(tc, test_zb_h1);
    tcase_add_test(tc, test_zb_h1_untied);
    tcase_add_test(tc, test_zbv);
    tcase_add_test(tc, test_looped_bfs);
    tcase_add_test(tc, test_chunked_head);
    tcase_add_test(tc, test_recompute_gpipe);
    tcase_add_test(tc, test_recompute_1f1b);
    tcase_add_test(tc, test_recompute_interleaved);
    tcase_add_test(tc, test_recompute_zbv);
    tcase_add_test(tc, test_llama_schedules);
    tcase_add_test(tc, test_llama_recompute);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
