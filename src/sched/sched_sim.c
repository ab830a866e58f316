/* sched_sim.c — dry-run simulator over lowered schedules (see sched_sim.h for the cost model). */
#include "sched_sim.h"

#include <stdlib.h>
#include <string.h>

#define NTYPES ACT_NTYPES /* the types the simulator runs */

/* Replay state; times are -1 until known. */
typedef struct {
    const Schedule *s;
    const SchedSimCosts *c;
    SchedSimResult *res;
    double *done;              /* [NTYPES][S*M] when each action ran: the end of F/B, the
                                  arrival of a SEND's message, the posting of a RECV */
    int *ptr;                  /* [P] next action of each rank */
    double *clock;             /* [P] when each rank is free */
    double *link;              /* [P*P] when the link from rank r to rank q (r*P+q) is
                                  free ([Note: link model] in sched_sim.h) */
} Sim;

void sched_sim_costs_default(SchedSimCosts *c) {
    memset(c, 0, sizeof *c);
    c->F = 1;
    c->B = 2;
    c->X = 0;
    c->X_B = -1;
    c->W = -1;
}

int sched_sim_costs_split(const SchedSimCosts *c) { return c->W_stage != NULL || c->W >= 0; }

/* [Note: split costs] in sched_sim.h. */
static double action_cost(const SchedSimCosts *c, int rank, Action a) {
    if (c->action_cost) return c->action_cost(c->ctx, rank, a);
    double b = c->B_stage ? c->B_stage[a.stage] : c->B;
    double w = c->W_stage ? c->W_stage[a.stage] : c->W;
    int split = sched_sim_costs_split(c);
    switch (a.type) {
    case ACT_F: return c->F_stage ? c->F_stage[a.stage] : c->F;
    case ACT_B: return split ? b + w : b;
    case ACT_I: return split ? b : b / 2;
    case ACT_W: return split ? w : b / 2;
    case ACT_SEND_F: return c->X;
    case ACT_SEND_B: return c->X_B >= 0 ? c->X_B : c->X;
    default: return 0;
    }
}

static double *times(size_t n) {
    double *t = pp_malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = -1;
    return t;
}

/* Where the time of action a is kept. */
static double *done_at(const Sim *sim, Action a) {
    const Schedule *s = sim->s;
    return &sim->done[(size_t)a.type * s->S * s->M + (size_t)a.stage * s->M + a.mb];
}

/* When what dependency d provides is there, or -1 if not yet: a compute's result when
 * it ends, a SEND's message when it arrives, a posted RECV's data when its SEND's
 * message arrives. */
static double available(const Sim *sim, Action d) {
    Action deps[SCHED_MAX_DEPS];
    double t = *done_at(sim, d);
    if (t < 0 || (d.type != ACT_RECV_F && d.type != ACT_RECV_B)) return t;
    sched_action_deps(sim->s, d, deps);
    return *done_at(sim, deps[0]);
}

/* Earliest time F, B or a SEND can start given what has run (its dependencies from
 * sched_action_deps), or -1 if one is missing. */
static double ready_at(const Sim *sim, Action a) {
    Action deps[SCHED_MAX_DEPS];
    double ready = 0;
    for (int j = 0, n = sched_action_deps(sim->s, a, deps); j < n; j++) {
        double t = available(sim, deps[j]);
        if (t < 0) return -1;
        if (t > ready) ready = t;
    }
    return ready;
}

/* When a SEND posted by rank r at time t arrives: t + cost, or with serial links after
 * the messages ahead of it on the link to its peer ([Note: link model] in sched_sim.h). */
static double transfer_end(Sim *sim, int r, Action a, double t, double cost) {
    if (!sim->c->serial_links) return t + cost;
    const Schedule *s = sim->s;
    int q = sched_stage_rank(s, a.type == ACT_SEND_F ? a.stage + 1 : a.stage - 1);
    double *free_at = &sim->link[(size_t)r * s->P + q];
    if (*free_at > t) t = *free_at;
    return *free_at = t + cost;
}

/* Run rank r's actions until one must wait. Returns how many ran. */
static int sched_sim_advance(Sim *sim, int r) {
    const Schedule *s = sim->s;
    int ran = 0;
    for (; sim->ptr[r] < s->len[r]; sim->ptr[r]++, ran++) {
        int i = sim->ptr[r];
        Action a = s->acts[r][i];
        double t = sim->clock[r], cost = action_cost(sim->c, r, a);
        if (a.type == ACT_RECV_F || a.type == ACT_RECV_B) {
            *done_at(sim, a) = t; /* posted: the consumer waits for the data */
        } else {
            double ready = ready_at(sim, a);
            if (ready < 0) break;
            if (ready > t) t = ready;
            if (sched_is_compute(a.type)) { /* sends cost the sender nothing */
                sim->clock[r] = t + cost;
                sim->res->busy[r] += cost;
                *done_at(sim, a) = t + cost;
            } else {
                *done_at(sim, a) = transfer_end(sim, r, a, t, cost);
            }
        }
        sim->res->start[r][i] = t;
        sim->res->end[r][i] = sim->clock[r];
    }
    return ran;
}

static int sched_sim_stuck(Sim *sim, char *err, size_t errlen, FILE *grid) {
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

static int sched_sim_check_input(const Schedule *s, char *err, size_t errlen) {
    if (!s->lowered && s->P > 1)
        return pp_errf(err, errlen, PP_EUSAGE, "simulate a lowered schedule (see sched_lower)");
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->len[r]; i++) {
            Action a = s->acts[r][i];
            if (a.type >= ACT_NTYPES || a.stage < 0 || a.stage >= s->S || a.mb < 0 || a.mb >= s->M)
                return pp_errf(err, errlen, PP_EUSAGE, "rank %d step %d: action out of range"
                               " or of an unknown type", r, i);
        }
    return PP_OK;
}

static void result_init(SchedSimResult *res, const Schedule *s) {
    memset(res, 0, sizeof *res);
    res->P = s->P;
    res->S = s->S;
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

static void result_finish(SchedSimResult *res, const Schedule *s, const double *clock) {
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

int sched_sim_run(const Schedule *s, const SchedSimCosts *c, SchedSimResult *res, char *err,
                  size_t errlen, FILE *grid) {
    SchedSimCosts defaults;
    if (!c) {
        sched_sim_costs_default(&defaults);
        c = &defaults;
    }
    memset(res, 0, sizeof *res);
    int rc = sched_sim_check_input(s, err, errlen);
    if (rc != PP_OK) return rc;
    result_init(res, s);
    Sim sim = {s, c, res, times(NTYPES * (size_t)s->S * s->M),
               pp_calloc((size_t)s->P, sizeof(int)), pp_calloc((size_t)s->P, sizeof(double)),
               pp_calloc((size_t)s->P * s->P, sizeof(double))};
    int left = 0;
    for (int r = 0; r < s->P; r++) left += s->len[r];
    while (left > 0 && rc == PP_OK) {
        int ran = 0;
        for (int r = 0; r < s->P; r++) ran += sched_sim_advance(&sim, r);
        left -= ran;
        if (!ran) rc = sched_sim_stuck(&sim, err, errlen, grid);
    }
    result_finish(res, s, sim.clock);
    free(sim.done);
    free(sim.ptr);
    free(sim.clock);
    free(sim.link);
    return rc;
}

void sched_sim_result_free(SchedSimResult *res) {
    for (int r = 0; res->start && r < res->P; r++) {
        free(res->start[r]);
        free(res->end[r]);
    }
    free(res->start);
    free(res->end);
    free(res->busy);
    free(res->idle);
    free(res->stage_peak);
    free(res->rank_peak);
    memset(res, 0, sizeof *res);
}
