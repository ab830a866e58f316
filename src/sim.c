/* sim.c — dry-run simulator over lowered schedules (see sim.h for the cost model). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* Replay state; times are -1 until known. k = stage * M + microbatch. */
typedef struct {
    const Schedule *s;
    const SimCosts *c;
    SimResult *res;
    double *fdone, *bdone;     /* [S*M] end of F(s,m) / B(s,m) */
    double *arr_f, *arr_b;     /* [S*M] arrival of SEND_F(s,m) / SEND_B(s,m)'s message */
    uint8_t *recv_f, *recv_b;  /* [S*M] RECV_F(s,m) / RECV_B(s,m) posted */
    int *ptr;                  /* [P] next action of each rank */
    double *clock;             /* [P] when each rank is free */
} Sim;

void sim_costs_default(SimCosts *c) {
    memset(c, 0, sizeof *c);
    c->F = 1, c->B = 2, c->X = 0;
}

static double action_cost(const SimCosts *c, int rank, Action a) {
    if (c->action_cost) return c->action_cost(c->ctx, rank, a);
    if (a.type == ACT_F) return c->F_stage ? c->F_stage[a.stage] : c->F;
    if (a.type == ACT_B) return c->B_stage ? c->B_stage[a.stage] : c->B;
    return a.type == ACT_SEND_F || a.type == ACT_SEND_B ? c->X : 0;
}

static double *times(size_t n) {
    double *t = pp_malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = -1;
    return t;
}

/* Earliest start of compute action a on rank r given what has run, or -1 if its
 * inputs are not there yet ([Note: action semantics]). */
static double compute_ready(const Sim *sim, int r, Action a) {
    const Schedule *s = sim->s;
    int M = s->M, k = a.stage * M + a.mb, st = a.stage;
    if (a.type == ACT_F) {
        if (st == 0) return 0;
        if (sched_stage_rank(s, st - 1) == r) return sim->fdone[k - M];
        return sim->recv_f[k] ? sim->arr_f[k - M] : -1;
    }
    if (sim->fdone[k] < 0) return -1;
    if (st == s->S - 1) return sim->fdone[k];
    if (sched_stage_rank(s, st + 1) == r) return sim->bdone[k + M];
    return sim->recv_b[k] ? sim->arr_b[k + M] : -1;
}

/* Run rank r's actions until one must wait. Returns how many ran. */
static int sim_advance(Sim *sim, int r) {
    const Schedule *s = sim->s;
    int ran = 0;
    for (; sim->ptr[r] < s->len[r]; sim->ptr[r]++, ran++) {
        int i = sim->ptr[r];
        Action a = s->acts[r][i];
        int k = a.stage * s->M + a.mb;
        double t = sim->clock[r], cost = action_cost(sim->c, r, a);
        if (a.type == ACT_F || a.type == ACT_B) {
            double ready = compute_ready(sim, r, a);
            if (ready < 0) break;
            if (ready > t) t = ready;
            sim->clock[r] = t + cost;
            sim->res->busy[r] += cost;
            (a.type == ACT_F ? sim->fdone : sim->bdone)[k] = t + cost;
        } else if (a.type == ACT_SEND_F || a.type == ACT_SEND_B) {
            double done = (a.type == ACT_SEND_F ? sim->fdone : sim->bdone)[k];
            if (done < 0) break; /* nothing to send yet */
            (a.type == ACT_SEND_F ? sim->arr_f : sim->arr_b)[k] = t + cost;
        } else {
            (a.type == ACT_RECV_F ? sim->recv_f : sim->recv_b)[k] = 1; /* posted */
        }
        sim->res->start[r][i] = t;
        sim->res->end[r][i] = sim->clock[r];
    }
    return ran;
}

static int sim_stuck(Sim *sim, char *err, size_t errlen, FILE *grid) {
    const Schedule *s = sim->s;
    int *mark = pp_malloc((size_t)s->P * sizeof(int));
    size_t used;
    pp_errf(err, errlen, PP_ERUNTIME, "deadlock in simulation: no rank can make progress:");
    for (int r = 0; r < s->P; r++) {
        mark[r] = sim->ptr[r] < s->len[r] ? sim->ptr[r] : -1;
        if (mark[r] < 0 || !err || (used = strlen(err)) + 1 >= errlen) continue;
        char text[SCHED_ACTION_TEXT_MAX];
        sched_action_format(s->acts[r][mark[r]], text, sizeof text);
        snprintf(err + used, errlen - used, " rank %d stuck at step %d (%s);", r, mark[r], text);
    }
    if (grid) sched_print_grid(s, mark, grid);
    free(mark);
    return PP_ERUNTIME;
}

static int sim_check_input(const Schedule *s, char *err, size_t errlen) {
    if (!s->lowered && s->P > 1)
        return pp_errf(err, errlen, PP_EUSAGE, "simulate a lowered schedule (see sched_lower)");
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action a = s->acts[r][i];
            if (a.type > ACT_RECV_B || a.stage < 0 || a.stage >= s->S || a.mb < 0 || a.mb >= s->M)
                return pp_errf(err, errlen, PP_EUSAGE, "rank %d step %d: action out of range"
                               " or of a reserved type", r, i);
        }
    return PP_OK;
}

static void result_init(SimResult *res, const Schedule *s) {
    memset(res, 0, sizeof *res);
    res->P = s->P, res->S = s->S;
    res->busy = pp_calloc((size_t)s->P, sizeof(double));
    res->idle = pp_calloc((size_t)s->P, sizeof(double));
    res->stage_peak = pp_calloc((size_t)s->S, sizeof(int));
    res->rank_peak = pp_calloc((size_t)s->P, sizeof(int));
    res->start = pp_calloc((size_t)s->P, sizeof(double *));
    res->end = pp_calloc((size_t)s->P, sizeof(double *));
    for (int r = 0; r < s->P; r++) {
        res->start[r] = times((size_t)s->len[r]);
        res->end[r] = times((size_t)s->len[r]);
    }
}

static void result_finish(SimResult *res, const Schedule *s, const double *clock) {
    double idle = 0;
    for (int r = 0; r < s->P; r++)
        if (clock[r] > res->makespan) res->makespan = clock[r];
    for (int r = 0; r < s->P; r++) {
        res->idle[r] = res->makespan - res->busy[r];
        idle += res->idle[r];
        res->rank_peak[r] = sched_peak_inflight_rank(s, r);
    }
    for (int st = 0; st < s->S; st++) res->stage_peak[st] = sched_peak_inflight(s, st);
    res->bubble = res->makespan > 0 ? idle / (s->P * res->makespan) : 0;
}

int sim_run(const Schedule *s, const SimCosts *c, SimResult *res, char *err, size_t errlen,
            FILE *grid) {
    SimCosts defaults;
    if (!c) sim_costs_default(&defaults), c = &defaults;
    memset(res, 0, sizeof *res);
    int rc = sim_check_input(s, err, errlen);
    if (rc != PP_OK) return rc;
    result_init(res, s);
    size_t n = (size_t)s->S * s->M;
    Sim sim = {s, c, res, times(n), times(n), times(n), times(n), pp_calloc(n, 1),
               pp_calloc(n, 1), pp_calloc((size_t)s->P, sizeof(int)),
               pp_calloc((size_t)s->P, sizeof(double))};
    int left = 0;
    for (int r = 0; r < s->P; r++) left += s->len[r];
    while (left > 0 && rc == PP_OK) {
        int ran = 0;
        for (int r = 0; r < s->P; r++) ran += sim_advance(&sim, r);
        left -= ran;
        if (!ran) rc = sim_stuck(&sim, err, errlen, grid);
    }
    result_finish(res, s, sim.clock);
    free(sim.fdone), free(sim.bdone), free(sim.arr_f), free(sim.arr_b);
    free(sim.recv_f), free(sim.recv_b), free(sim.ptr), free(sim.clock);
    return rc;
}

void sim_result_free(SimResult *res) {
    for (int r = 0; res->start && r < res->P; r++) {
        free(res->start[r]);
        free(res->end[r]);
    }
    free(res->start), free(res->end), free(res->busy), free(res->idle);
    free(res->stage_peak), free(res->rank_peak);
    memset(res, 0, sizeof *res);
}
