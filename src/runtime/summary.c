/* summary.c — the run summary block and the per-step figures of a rank. */
#include "summary.h"

#include <stdlib.h>
#include <string.h>

/* Peak memory of this rank in MB: the GPU's (allocated + workspace: pptrain allocates at
 * build time only, so that is its peak) or the peak RSS. */
static double peak_mb(const Runtime *rt, int *gpu) {
    const Backend *be = rt->model.be;
    *gpu = be && be->device_memory && be->memory;
    if (*gpu) {
        size_t alloc = 0, ws = 0;
        be->memory(be, &alloc, &ws);
        return (alloc + ws) / 1e6;
    }
    return pp_peak_rss_mb();
}

/* [Note: traced device time] in runtime.c: a device's untraced action times are enqueue
 * times (no backend yet: nothing was timed on a device) */
static int timed(const Runtime *rt) {
    return !rt->model.be || !rt->model.be->device_memory || rt->trace != NULL;
}

double summary_mfu_flops(const Runtime *rt) {
    double peak = rt->model.be ? rt->model.be->peak_flops : 0.0;
    if (peak <= 0) return 0.0;
    return model_train_flops_per_token(&rt->model.d, rt->T) / (peak * rt->lay.world);
}

void summary_step(const Runtime *rt, double *bubble, double *wait, double *mb) {
    int gpu;
    *bubble = *wait = -1.0;
    if (timed(rt) && rt->step_s > 0) {
        *bubble = (rt->step_s - rt->busy_s) / rt->step_s;
        *wait = rt->wait_s / rt->step_s;
    }
    *mb = peak_mb(rt, &gpu);
}

void summary_rank(const Runtime *rt, SummaryRank *r) {
    memset(r, 0, sizeof *r);
    r->rank = rt->lay.rank;
    r->pp = rt->lay.pp;
    r->dp = rt->lay.dp;
    r->measured = rt->measured;
    r->timed = timed(rt);
    if (rt->measured > 0 && rt->sum_step_s > 0) {
        r->step_ms = rt->sum_step_s / rt->measured * 1e3;
        r->busy = rt->sum_busy_s / rt->sum_step_s;
        r->bubble = 1.0 - r->busy;
        r->wait = rt->sum_wait_s / rt->sum_step_s;
    }
    r->peak_mb = peak_mb(rt, &r->gpu);
    r->saves = rt->saves;
    r->stall_ms = rt->sum_save_stall_s * 1e3;
    r->stall_max_ms = rt->max_save_stall_s * 1e3;
}

void summary_run(const Runtime *rt, SummaryRun *s) {
    double per_step = (double)rt->global_batch * rt->T, flops = summary_mfu_flops(rt);
    memset(s, 0, sizeof *s);
    s->first_step = rt->first_step;
    s->last_step = rt->first_step + rt->steps_run;
    s->total_steps = rt->cfg ? rt->cfg->steps : 0;
    s->tokens = per_step * rt->steps_run;
    s->wall_s = rt->steps_run > 0 ? pp_now() - rt->t_first : 0.0;
    if (rt->measured > 0 && rt->sum_step_s > 0)
        s->tokens_per_s = per_step * rt->measured / rt->sum_step_s;
    s->mfu = flops > 0 ? s->tokens_per_s * flops : -1.0;
}

/* "rank 3", or with replicas "rank 3 (pp 1, dp 1)": its pipeline rank and replica */
static void rank_label(const SummaryRank *r, int replicas, char *buf, size_t n) {
    if (replicas)
        snprintf(buf, n, "rank %d (pp %d, dp %d)", r->rank, r->pp, r->dp);
    else
        snprintf(buf, n, "rank %d", r->rank);
}

static void print_rank(FILE *f, const SummaryRank *r, int replicas, int w) {
    char who[64];
    rank_label(r, replicas, who, sizeof who);
    fprintf(f, "  %-*s ", w, who);
    if (r->measured == 0)
        fprintf(f, "no step measured (only the warm-up step ran)");
    else if (!r->timed)
        fprintf(f,
                "step %.1f ms, busy and bubble not timed (the GPU runs asynchronously: "
                "--trace times them)",
                r->step_ms);
    else
        fprintf(f, "step %.1f ms: busy %.1f%%, bubble %.1f%% (transfer wait %.1f%%)", r->step_ms,
                100.0 * r->busy, 100.0 * r->bubble, 100.0 * r->wait);
    fprintf(f, " | peak %s %.1f MB | checkpoints %d", r->gpu ? "GPU memory" : "RSS", r->peak_mb,
            r->saves);
    if (r->saves > 0)
        fprintf(f, ", stalled %.1f ms (longest %.1f ms)", r->stall_ms, r->stall_max_ms);
    fprintf(f, "\n");
}

void summary_print(FILE *f, const SummaryRun *s, const SummaryRank *ranks, int n) {
    int replicas = 0, steps = s->last_step - s->first_step, w = 10; /* "throughput" */
    char who[64];
    for (int i = 0; i < n; i++) replicas |= ranks[i].dp > 0;
    for (int i = 0; i < n; i++) { /* the labels' column */
        rank_label(&ranks[i], replicas, who, sizeof who);
        if ((int)strlen(who) > w) w = (int)strlen(who);
    }
    fprintf(f, "run summary\n");
    if (steps > 1)
        fprintf(f, "  %-*s %d-%d of %d (%d in this run)\n", w, "steps", s->first_step + 1,
                s->last_step, s->total_steps, steps);
    else
        fprintf(f, "  %-*s %d of %d (%d in this run)\n", w, "steps", s->last_step, s->total_steps,
                steps);
    fprintf(f, "  %-*s %.0f (%.0f a step)\n", w, "tokens", s->tokens,
            steps ? s->tokens / steps : 0);
    fprintf(f,
            "  %-*s %.2f s (from this run's first step; validation and checkpoints "
            "included)\n",
            w, "wall time", s->wall_s);
    if (s->tokens_per_s > 0)
        fprintf(f,
                "  %-*s %.0f tokens/s (the mean step's; the first step, which warms up, "
                "left out)\n",
                w, "throughput", s->tokens_per_s);
    else
        fprintf(f, "  %-*s - (no step measured)\n", w, "throughput");
    if (s->mfu >= 0)
        fprintf(f, "  %-*s %.1f%%\n", w, "MFU", 100.0 * s->mfu);
    else
        fprintf(f, "  %-*s - (a GPU's figure: the CPU backend has no peak FLOP/s)\n", w, "MFU");
    for (int i = 0; i < n; i++) print_rank(f, &ranks[i], replicas, w);
    fflush(f);
}

enum {
    G_PP,
    G_DP,
    G_MEASURED,
    G_TIMED,
    G_STEP,
    G_BUSY,
    G_WAIT,
    G_PEAK,
    G_GPU,
    G_SAVES,
    G_STALL,
    G_STALL_MAX,
    G_N
};

int summary_report(Runtime *rt, char *err, size_t errlen) {
    int world = rt->lay.world, me = rt->lay.rank;
    SummaryRank mine, *all;
    SummaryRun run;
    if (rt->steps_run == 0) return PP_OK; /* the same on every rank */
    summary_rank(rt, &mine);
    /* a gather as an all-reduce: each rank fills its own row, the rest stay 0 */
    double *v = pp_calloc((size_t)world * G_N, sizeof(double)), *row = v + (size_t)me * G_N;
    row[G_PP] = mine.pp;
    row[G_DP] = mine.dp;
    row[G_MEASURED] = mine.measured;
    row[G_TIMED] = mine.timed;
    row[G_STEP] = mine.step_ms;
    row[G_BUSY] = mine.busy;
    row[G_WAIT] = mine.wait;
    row[G_PEAK] = mine.peak_mb;
    row[G_GPU] = mine.gpu;
    row[G_SAVES] = mine.saves;
    row[G_STALL] = mine.stall_ms;
    row[G_STALL_MAX] = mine.stall_max_ms;
    if (comm_allreduce_sum_f64(rt->comm, v, world * G_N) != PP_OK) {
        free(v);
        return pp_errf(err, errlen, PP_ERUNTIME, "all-reduce of the run summary: %s",
                       comm_error(rt->comm));
    }
    if (me == 0) {
        all = pp_calloc((size_t)world, sizeof *all);
        for (int r = 0; r < world; r++) {
            const double *x = v + (size_t)r * G_N;
            all[r] = (SummaryRank){.rank = r,
                                   .pp = (int)x[G_PP],
                                   .dp = (int)x[G_DP],
                                   .measured = (int)x[G_MEASURED],
                                   .timed = (int)x[G_TIMED],
                                   .step_ms = x[G_STEP],
                                   .busy = x[G_BUSY],
                                   .bubble = x[G_MEASURED] > 0 ? 1.0 - x[G_BUSY] : 0.0,
                                   .wait = x[G_WAIT],
                                   .peak_mb = x[G_PEAK],
                                   .gpu = (int)x[G_GPU],
                                   .saves = (int)x[G_SAVES],
                                   .stall_ms = x[G_STALL],
                                   .stall_max_ms = x[G_STALL_MAX]};
        }
        summary_run(rt, &run);
        summary_print(stdout, &run, all, world);
        free(all);
    }
    free(v);
    return PP_OK;
}
