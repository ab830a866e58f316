/* plan.c — costs, links and the sweep that plans a pipeline past one machine (see
 * plan.h; the model and its assumptions: [Note: planning model], docs/schedules.md). */
#include "plan.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_load.h"
#include "backend/optim.h"
#include "runtime/runtime.h"
#include "sched/sched_sim.h"

/* [Note: planning model]
 * A row of the sweep is one schedule on P ranks (v chunks each) with M microbatches of
 * the config's microbatch (B sequences of T tokens; M changes the global batch, not the
 * microbatch, so the measured per-microbatch costs hold for every M).
 *  - Partition: the L layers over S = P*v stages by pipeline.balance: time on the given
 *    costs (F + B per layer, the embedding on stage 0, the head on the last).
 *  - Compute: stage s's F and B are its layers' plus the embedding / head; a rank runs
 *    one compute action at a time, in its lowered list's order (sched_sim.h).
 *  - Transfers: each SEND of an activation carries B*T*C elements of act_bytes each, of a
 *    gradient of grad_bytes (the runtime sends fp32 gradients in every precision, and
 *    activations in the residual stream's type: `pptrain schedule` defaults act_bytes to
 *    the config's device's, 2 on a bf16 GPU: [Note: residual stream type] in backend.h,
 *    [Note: backend layout] in backend_load.h; exec_transfer in runtime.c),
 *    and takes latency + bytes / bandwidth on the link from its rank to the peer's; a link
 *    carries one message at a time per direction, in send order ([Note: link model] in
 *    sched_sim.h). Transfers overlap compute completely (posted sends, a communication
 *    stream): they delay only the compute that consumes them.
 *  - The tied embedding: where stage 0 and the last stage are on different ranks, the
 *    two sum their d(wte) (Vp*C fp32 each way at once) once both have finished the
 *    step's compute: step = max(makespan, max(end of those two ranks) + the exchange).
 *  - Not counted: the optimizer update, the gradient-norm sum, data loading, host
 *    staging copies on a GPU without a direct transport, data-parallel all-reduce, a
 *    recompute's extra forward (the costs are of a backward that keeps everything).
 *  - Efficiency = (T1 / P) / step, T1 = M * (L*(F+B)_layer + (F+B)_embedding +
 *    (F+B)_head): the whole model's compute for the step, spread evenly over P ranks
 *    with nothing idle, against the predicted step. 1 - efficiency is what the
 *    schedule's bubble, the partition's imbalance, the transfers the schedule cannot
 *    hide and the tied exchange cost together; bubble alone is the idle fraction of the
 *    makespan (sched_sim.h), which counts the first three.
 *  - Memory per rank: the memory plan ([Note: memory plan] in model.h): parameters,
 *    gradients and optimizer state (fp32 in every precision, as pptrain keeps them)
 *    and the activations the schedule keeps in flight on that rank, at the sizes the
 *    run's backend stores them ([Note: backend layout] in backend_load.h: bf16 operands
 *    and flash attention's [B,NH,T] on a bf16 GPU); not the backend's workspace
 *    (cuBLASLt's, the weights' bf16 copy) or the CUDA context. */

/* ===================================================================== costs === */

static int parse_doubles(const char *text, double *v, int max, int *n) {
    const char *p = text;
    *n = 0;
    for (;;) {
        char *end;
        if (*n == max) return PP_EUSAGE;
        errno = 0;
        v[*n] = strtod(p, &end);
        if (end == p || errno || !isfinite(v[*n]) || v[*n] < 0) return PP_EUSAGE;
        (*n)++;
        p = end;
        if (!*p) return PP_OK;
        if (*p++ != ',') return PP_EUSAGE;
    }
}

int plan_parse_layer_costs(const char *text, LayerCosts *c) {
    double v[6] = {0, 0, 0, 0, 0, 0};
    int n;
    if (parse_doubles(text, v, 6, &n) != PP_OK || (n != 2 && n != 6) || v[0] <= 0 || v[1] <= 0)
        return PP_EUSAGE;
    *c = (LayerCosts){v[0], v[1], v[2], v[3], v[4], v[5]};
    return PP_OK;
}

void plan_partition_costs(const LayerCosts *c, int S, PartitionCosts *pc) {
    memset(pc, 0, sizeof *pc);
    for (int s = 0; s < S && s < PP_MAX_STAGES; s++) pc->layer[s] = c->layer_f + c->layer_b;
    pc->embed = c->embed_f + c->embed_b;
    pc->head = c->head_f + c->head_b;
    pc->unit = "given time";
}

void plan_stage_costs(const LayerCosts *c, const Partition *p, double *F, double *B) {
    for (int s = 0; s < p->S; s++) {
        int n = p->l1[s] - p->l0[s];
        F[s] = n * c->layer_f + (s == 0 ? c->embed_f : 0) + (s == p->S - 1 ? c->head_f : 0);
        B[s] = n * c->layer_b + (s == 0 ? c->embed_b : 0) + (s == p->S - 1 ? c->head_b : 0);
    }
}

/* ===================================================================== links === */

int plan_parse_link(const char *text, Link *l) {
    static const Link named[] = {
        {"nvlink", 5, 450}, {"ib", 10, 50}, {"ib-hdr", 10, 25}, {"none", 0, 0},
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(text, named[i].name)) return *l = named[i], PP_OK;
    double v[2];
    int n;
    if (parse_doubles(text, v, 2, &n) != PP_OK || n != 2 || v[1] <= 0) return PP_EUSAGE;
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%gus,%gGB/s", v[0], v[1]);
    l->latency_us = v[0];
    l->gbps = v[1];
    return PP_OK;
}

double plan_link_ms(const Link *l, double bytes) {
    if (bytes <= 0) return 0;
    return l->latency_us * 1e-3 + (l->gbps > 0 ? bytes / (l->gbps * 1e9) * 1e3 : 0);
}

/* ================================================================== measure === */

/* Weights for timing only: what model_init_weights gives in shape and scale (norm
 * weights 1, biases 0, matrices of standard deviation std: ParamTensor.init), drawn
 * uniformly from a cheap generator: dense kernels take the same time whatever the values,
 * and the normal draws of a vocabulary-sized table take seconds on a CPU. */
static void fill_for_timing(Model *m, float std) {
    float *p = pp_malloc(model_largest_tensor(m) * sizeof(float));
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        float one = t->init == ARCH_INIT_ONE;
        for (size_t j = 0; j < t->numel; j++) {
            /* uniform in [-sqrt3, sqrt3) std */
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            p[j] = t->ndim == 2
                       ? std * 1.7320508f * ((float)(x >> 40) * (2.0f / 16777216.0f) - 1.0f)
                       : one;
        }
        m->be->to_device(m->be, m->params + t->offset, p, t->numel * sizeof(float));
        m->be->wait(m->be);
    }
    free(p);
}

/* Milliseconds of one forward (f[c]) and one backward (b[c]) of each chunk c of a
 * 3-layer model of the config's shape held whole on backend be, one microbatch of
 * B x seq_len: chunk 0 the embedding and layer 0, chunk 1 layer 1, chunk 2 layer 2 and
 * the head. The fastest of 3 after a warm-up, the host waiting for the device after
 * each; one model, so the vocabulary-sized tables are allocated and initialised once. */
/* The 3-layer timing model: the embedding with a layer, a layer, a layer with the head.
 * ChunkSpec: stage, l0, l1, first, last, nslots, nrecv. */
static const ChunkSpec timing_specs[3] = {
    {0, 0, 1, 1, 0, 1, 0}, {1, 1, 2, 0, 0, 1, 0}, {2, 2, 3, 0, 1, 1, 0}};

static ModelDims timing_dims(const Config *cfg) {
    ModelDims d = model_dims(cfg);
    d.L = 3;
    return d;
}

static void time_chunks(const Config *cfg, const Backend *be, int B, double f[3], double b[3]) {
    int T = cfg->seq_len;
    size_t N = (size_t)B * T, C = cfg->dim;
    ModelDims d = timing_dims(cfg);
    Model m;
    model_init(&m, &d, timing_specs, 3, B, T, be);
    fill_for_timing(&m, cfg->init_std);
    float *x = pp_malloc(N * C * sizeof(float));
    int *tok = pp_calloc(N, sizeof(int));
    for (size_t i = 0; i < N * C; i++) x[i] = (float)((i * 7919) % 13) * 0.1f - 0.6f;
    /* tokens spread over the vocabulary, as text's are: all-zero tokens would make the
     * GPU encoder backward (rows of one token id summed in order) one serial chain and
     * overstate the embedding's cost */
    for (size_t i = 0; i < N; i++) tok[i] = (int)((i * 2654435761u) % (unsigned)cfg->vocab_size);
    for (int c = 0; c < 3; c++) {
        ActSlot *a = &m.chunks[c].slots[0];
        f[c] = b[c] = 1e300;
        for (int rep = 0; rep < 4; rep++) {
            /* the input at the residual type: fp32, or the operand type ([Note: residual
             * stream type]), converted on the device through the fp32 gradient buffer */
            be->to_device(be, be->residual == PP_F32 ? a->input : a->grad, x,
                          N * C * sizeof(float));
            if (be->residual != PP_F32) be->to_operand(be, a->input, a->grad, N * C);
            if (a->tokens) be->to_device(be, a->tokens, tok, N * sizeof(int));
            if (a->targets) be->to_device(be, a->targets, tok, N * sizeof(int));
            be->to_device(be, a->grad, x, N * C * sizeof(float));
            be->wait(be);
            double t0 = pp_now();
            model_forward(&m, c, 0, 1.0f / N, 1, NULL);
            be->wait(be);
            double t1 = pp_now();
            model_backward(&m, c, 0);
            be->wait(be);
            double t2 = pp_now();
            if (rep > 0 && (t1 - t0) * 1e3 < f[c]) f[c] = (t1 - t0) * 1e3;
            if (rep > 0 && (t2 - t1) * 1e3 < b[c]) b[c] = (t2 - t1) * 1e3;
        }
    }
    free(x);
    free(tok);
    model_free(&m);
}

int plan_measure(const Config *cfg, int B, LayerCosts *c, char *note, size_t notelen, char *err,
                 size_t errlen) {
    const Backend *be;
    ModelDims d = timing_dims(cfg);
    ModelPlan p;
    model_plan(&p, &d, timing_specs, NULL, NULL, 3, B, cfg->seq_len, 0, sizeof(float),
               sizeof(float), sizeof(float), 0, 0, 0, 0);
    BackendSizes sizes = model_backend_sizes(&d, B, cfg->seq_len, p.params / sizeof(float));
    int rc = backend_select(cfg, 0, &sizes, &be, note, notelen, err, errlen);
    if (rc != PP_OK) return rc;
    if (cfg->threads > 0) backend_cpu_set_threads(cfg->threads); /* the CPU's; a GPU ignores it */
    double f[3], b[3]; /* the embedding and the head: their chunk less the layer alone */
    time_chunks(cfg, be, B, f, b);
    backend_release(be);
    *c = (LayerCosts){f[1], b[1], f[0] > f[1] ? f[0] - f[1] : 0, b[0] > b[1] ? b[0] - b[1] : 0,
                      f[2] > f[1] ? f[2] - f[1] : 0, b[2] > b[1] ? b[2] - b[1] : 0};
    return PP_OK;
}

/* ==================================================================== trace === */

/* The value of "key" in the JSON object text of one trace line: a pointer past the
 * colon (and blanks), or NULL. */
static const char *json_value(const char *line, const char *key) {
    char quoted[40];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(line, quoted);
    if (!p) return NULL;
    p += strlen(quoted);
    while (*p == ' ' || *p == '\t') p++;
    if (*p++ != ':') return NULL;
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

typedef struct {
    double *v;
    int n, cap;
} Samples;

static void samples_add(Samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        double *v = realloc(s->v, (size_t)s->cap * sizeof *v);
        PP_CHECK(v);
        s->v = v;
    }
    s->v[s->n++] = x;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(Samples *s) {
    qsort(s->v, (size_t)s->n, sizeof *s->v, by_value);
    return s->n % 2 ? s->v[s->n / 2] : 0.5 * (s->v[s->n / 2 - 1] + s->v[s->n / 2]);
}

/* One compute slice of a trace line ("F 3.5" of cat compute with a stage): its type
 * index (0 F, 1 B, 2 I, 3 W), stage, step and duration in µs; -1 for anything else. */
static int trace_slice(const char *line, int *stage, int *step, double *dur) {
    const char *name = json_value(line, "name"), *cat = json_value(line, "cat"), *types = "FBIW";
    const char *st = json_value(line, "stage"), *sp = json_value(line, "step");
    const char *du = json_value(line, "dur");
    if (!name || !cat || !st || !sp || !du || strncmp(cat, "\"compute\"", 9) || name[0] != '"' ||
        !name[1] || name[2] != ' ' || !strchr(types, name[1]))
        return -1;
    *stage = atoi(st);
    *step = atoi(sp);
    *dur = atof(du);
    if (*stage < 0 || !isfinite(*dur) || *dur < 0) return -1;
    return (int)(strchr(types, name[1]) - types);
}

/* The lowest step of the compute slices, and whether another step follows it. */
static void trace_steps(const char *text, int *first, int *more, int *nsteps) {
    char line[1024];
    int lo = 1 << 30, hi = -1;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        p += n + (p[n] == '\n');
        int stage, step;
        double dur;
        if (trace_slice(line, &stage, &step, &dur) < 0) continue;
        if (step < lo) lo = step;
        if (step > hi) hi = step;
    }
    *first = lo;
    *more = hi > lo;
    *nsteps = hi >= lo ? hi - lo + 1 : 0;
}

static int trace_check(const char *path, const TraceCosts *tc, Samples (*by)[4], char *err,
                       size_t errlen) {
    static const char *names = "FBIW";
    for (int s = 0; s < tc->S; s++) {
        int has_b = by[s][1].n > 0, has_iw = by[s][2].n > 0 && by[s][3].n > 0;
        if (!by[s][0].n || (!has_b && !has_iw))
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: no %c slices of stage %d (a trace written by ./pptrain --trace "
                           "holds F and B, or I and W, slices of every stage): is it a trace of "
                           "this config's run?",
                           path, !by[s][0].n ? names[0] : names[1], s);
        if (has_b && has_iw)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: stage %d has both B and I/W slices: a trace of one "
                           "schedule, please", path, s);
    }
    return PP_OK;
}

int plan_trace_costs(const char *path, int S, TraceCosts *tc, char *err, size_t errlen) {
    char *text, line[1024];
    size_t len;
    memset(tc, 0, sizeof *tc);
    if (S < 1 || S > PP_MAX_STAGES)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %d stages is out of range", path, S);
    int rc = pp_read_file_max(path, "the trace (--costs-from)", (size_t)1 << 30, &text, &len, err,
                              errlen);
    if (rc != PP_OK) return rc;
    if (!strstr(text, "\"traceEvents\"")) {
        free(text);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s is not a trace (no traceEvents): give --costs-from the trace.json that "
                       "./pptrain --trace (output.trace: true) writes into output.dir",
                       path);
    }
    int first, more, nsteps;
    trace_steps(text, &first, &more, &nsteps);
    Samples(*by)[4] = pp_calloc((size_t)S, sizeof *by);
    tc->S = S;
    tc->steps = more ? nsteps - 1 : nsteps;
    for (const char *p = text; *p && rc == PP_OK;) {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        p += n + (p[n] == '\n');
        int stage, step;
        double dur;
        int type = trace_slice(line, &stage, &step, &dur);
        if (type < 0) continue;
        if (stage >= S) {
            rc = pp_errf(err, errlen, PP_EUSAGE,
                         "%s has slices of stage %d, but this config plans %d stages "
                         "(pipeline.stages x virtual_stages): plan with the config of the "
                         "run that wrote it", path, stage, S);
        } else if (!more || step != first) {
            samples_add(&by[stage][type], dur * 1e-3);
            tc->slices++;
        }
    }
    if (rc == PP_OK && !tc->slices)
        rc = pp_errf(err, errlen, PP_EUSAGE,
                     "%s holds no F or B slices of a stage (a trace of a training run written by "
                     "./pptrain --trace has them)",
                     path);
    if (rc == PP_OK) rc = trace_check(path, tc, by, err, errlen);
    for (int s = 0; s < S; s++) tc->split |= by[s][2].n > 0; /* a schedule may mix B and I/W */
    for (int s = 0; s < S; s++) {
        if (rc == PP_OK) { /* a stage with B: W 0, so that B + W is its backward either way */
            int split = by[s][2].n > 0;
            tc->F[s] = median(&by[s][0]);
            tc->B[s] = split ? median(&by[s][2]) : median(&by[s][1]);
            tc->W[s] = split ? median(&by[s][3]) : 0;
        }
        for (int k = 0; k < 4; k++) free(by[s][k].v);
    }
    free(by);
    free(text);
    return rc;
}

/* ====================================================================== fit === */

/* Least squares of y[s] ~ sum_k a[s][k] x[k] over the unknowns k with use[k]; the others
 * stay as given in x. Gaussian elimination on the normal equations (3 x 3 at most).
 * Returns 0 when they are singular. */
static int least_squares(int S, double (*a)[3], const double *y, const int *use, double *x) {
    double m[3][4] = {{0}};
    int idx[3], n = 0;
    for (int k = 0; k < 3; k++)
        if (use[k]) idx[n++] = k;
    for (int s = 0; s < S; s++) {
        double r = y[s];
        for (int k = 0; k < 3; k++)
            if (!use[k]) r -= a[s][k] * x[k];
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) m[i][j] += a[s][idx[i]] * a[s][idx[j]];
            m[i][n] += a[s][idx[i]] * r;
        }
    }
    for (int i = 0; i < n; i++) {
        int piv = i;
        for (int r = i + 1; r < n; r++)
            if (fabs(m[r][i]) > fabs(m[piv][i])) piv = r;
        if (fabs(m[piv][i]) < 1e-12 * (1 + fabs(m[0][0]))) return 0;
        for (int j = 0; j <= n; j++) {
            double t = m[i][j];
            m[i][j] = m[piv][j];
            m[piv][j] = t;
        }
        for (int r = 0; r < n; r++) {
            if (r == i) continue;
            double f = m[r][i] / m[i][i];
            for (int j = i; j <= n; j++) m[r][j] -= f * m[i][j];
        }
    }
    for (int i = 0; i < n; i++) x[idx[i]] = m[i][n] / m[i][i];
    return 1;
}

/* x = (layer, embedding, head) for per-stage costs y of partition p (plan_fit_layers). */
static void fit_one(const Partition *p, const double *y, double re, double rh, double x[3]) {
    double (*a)[3] = pp_calloc((size_t)p->S, sizeof *a);
    for (int s = 0; s < p->S; s++) {
        a[s][0] = p->l1[s] - p->l0[s];
        a[s][1] = s == 0;
        a[s][2] = s == p->S - 1;
    }
    int use[3] = {1, 1, 1};
    x[0] = x[1] = x[2] = 0;
    /* drop an unknown that comes out negative (noise on a small embedding), then refit */
    for (int tries = 0; tries < 3; tries++) {
        if (p->S < 3 || !least_squares(p->S, a, y, use, x)) break;
        if (x[1] >= 0 && x[2] >= 0) goto done;
        if (x[1] < 0) {
            use[1] = 0;
            x[1] = 0;
        }
        if (x[2] < 0) {
            use[2] = 0;
            x[2] = 0;
        }
    }
    /* not separable: embedding and head in the FLOP model's proportion to a layer */
    double num = 0, den = 0;
    for (int s = 0; s < p->S; s++) {
        num += y[s];
        den += a[s][0] + a[s][1] * re + a[s][2] * rh;
    }
    x[0] = num / den;
    x[1] = re * x[0];
    x[2] = rh * x[0];
done:
    free(a);
}

double plan_fit_layers(const Partition *p, const double *F, const double *B, const ArchCosts *a,
                       LayerCosts *c) {
    PartitionCosts flops;
    partition_costs_time(&flops, 1, a, NULL);
    double re = flops.embed / flops.layer[0], rh = flops.head / flops.layer[0];
    double xf[3], xb[3], worst = 0;
    fit_one(p, F, re, rh, xf);
    fit_one(p, B, re, rh, xb);
    *c = (LayerCosts){xf[0], xb[0], xf[1], xb[1], xf[2], xb[2]};
    double sf[PP_MAX_STAGES], sb[PP_MAX_STAGES];
    plan_stage_costs(c, p, sf, sb);
    for (int s = 0; s < p->S; s++) {
        double miss = fabs(sf[s] + sb[s] - F[s] - B[s]) / (F[s] + B[s]);
        if (miss > worst) worst = miss;
    }
    return worst;
}

/* =================================================================== memory === */

int plan_layout(const Config *cfg, int B, BackendLayout *lay, char *err, size_t errlen) {
    ModelDims d = model_dims(cfg);
    BackendSizes sizes = model_backend_sizes(&d, B, cfg->seq_len, 0);
    return backend_layout(cfg, &sizes, lay, err, errlen);
}

void plan_rank_memory(const Config *cfg, const BackendLayout *lay, const Schedule *s,
                      const Schedule *fwd, const Partition *part, int pp, int mode, int B,
                      ModelPlan *plan) {
    ChunkSpec specs[PP_MAX_CHUNKS];
    ChunkRecompute rc[PP_MAX_CHUNKS];
    int nws[PP_MAX_CHUNKS], nblocks[2], T = cfg->seq_len;
    ModelDims d = model_dims(cfg);
    runtime_chunk_plan(s, fwd, part, pp, mode, cfg->recompute_layers, specs, rc, nws, nblocks);
    model_plan(plan, &d, specs, rc, nws, s->v, B, T, backend_layout_att_floats(lay, B, T, d.NH),
               pp_dtype_bytes(lay->operand), pp_dtype_bytes(lay->residual),
               pp_dtype_bytes(lay->logits), lay->logits_chunk_rows, optim_state_arrays(cfg),
               nblocks[1], nblocks[0]);
}

/* ==================================================================== sweep === */

void plan_grid_default(PlanGrid *g) {
    memset(g, 0, sizeof *g);
    for (int P = 2; P <= 8; P++) g->ranks[g->nranks++] = P;
    g->mbs[0] = 8;
    g->mbs[1] = 16;
    g->mbs[2] = 32;
    g->nmbs = 3;
    snprintf(g->schedules[0], PP_NAME_MAX, "1f1b");
    snprintf(g->schedules[1], PP_NAME_MAX, "interleaved-1f1b");
    g->nschedules = 2;
    plan_parse_link("nvlink", &g->links[0]);
    plan_parse_link("ib", &g->links[1]);
    g->nlinks = 2;
    g->act_bytes = 4;
    g->grad_bytes = 4;
}

/* Chunks per rank of a schedule entry "kind" or "kind:v": 2 for the kinds that need
 * more than one (interleaved-1f1b, looped-bfs, zbv), else 1. */
static int entry_kind(const char *entry, char *kind, size_t n) {
    const char *colon = strchr(entry, ':');
    snprintf(kind, n, "%.*s", colon ? (int)(colon - entry) : (int)strlen(entry), entry);
    if (colon) return atoi(colon + 1);
    return !strcmp(kind, "interleaved-1f1b") || !strcmp(kind, "looped-bfs") || !strcmp(kind, "zbv")
               ? 2 : 1;
}

typedef struct {
    char kind[PP_NAME_MAX];
    int P, v, M, S;
    double makespan, step, bubble, eff, tok_s;
    double mem_max;   /* bytes */
    int mem_rank;
    double *mem;      /* [P] bytes */
    int layers[PP_MAX_STAGES];
} PlanRow;

typedef struct {
    const Config *cfg;
    const LayerCosts *c;
    int B, T;           /* the microbatch */
    const BackendLayout *lay; /* what the run's device stores ([Note: backend layout]) */
    double act_bytes;   /* of one activation's transfer */
    double grad_bytes;  /* of one gradient's */
    double tied_bytes;  /* of the tied exchange, 0 when untied */
    double T1;          /* one microbatch through the whole model, F + B, ms */
} Sweep;

/* The memory plan of every rank of schedule s on partition part. */
static int row_memory(const Sweep *w, const Schedule *s, const Partition *part, PlanRow *row,
                      char *err, size_t errlen) {
    Schedule fwd;
    if (sched_build_forward_only(&fwd, s, err, errlen) != PP_OK) return PP_ERUNTIME;
    int mode = model_recompute_mode(w->cfg->recompute);
    row->mem = pp_calloc((size_t)s->P, sizeof(double));
    for (int r = 0; r < s->P; r++) {
        ModelPlan p;
        plan_rank_memory(w->cfg, w->lay, s, &fwd, part, r, mode < 0 ? 0 : mode, w->B, &p);
        row->mem[r] = (double)p.params + p.grads + p.optimizer + model_plan_activations(&p);
        if (row->mem[r] > row->mem_max) {
            row->mem_max = row->mem[r];
            row->mem_rank = r;
        }
    }
    sched_free(&fwd);
    return PP_OK;
}

/* Simulate one row ([Note: planning model]). */
static int row_run(const Sweep *w, const Link *link, PlanRow *row, char *err, size_t errlen) {
    Schedule s;
    Partition part;
    PartitionCosts pc;
    SchedSimCosts sc;
    SchedSimResult res;
    double F[PP_MAX_STAGES], B[PP_MAX_STAGES];
    if (sched_build(&s, row->kind, row->P, row->v, row->M, err, errlen) != PP_OK)
        return PP_ERUNTIME;
    row->S = s.S;
    plan_partition_costs(w->c, s.S, &pc);
    int rc = partition_build_costs(&part, "auto", w->cfg->n_layers, s.S, &pc, err, errlen);
    if (rc == PP_OK) {
        plan_stage_costs(w->c, &part, F, B);
        for (int st = 0; st < s.S; st++) row->layers[st] = part.l1[st] - part.l0[st];
        sched_sim_costs_default(&sc);
        sc.F_stage = F;
        sc.B_stage = B;
        sc.X = plan_link_ms(link, w->act_bytes);
        sc.X_B = plan_link_ms(link, w->grad_bytes); /* X itself when the sizes agree */
        sc.serial_links = 1;
        rc = sched_sim_run(&s, &sc, &res, err, errlen, NULL);
    }
    if (rc == PP_OK) {
        int r0 = sched_stage_rank(&s, 0), rl = sched_stage_rank(&s, s.S - 1);
        double end0 = s.len[r0] ? res.end[r0][s.len[r0] - 1] : 0;
        double endl = s.len[rl] ? res.end[rl][s.len[rl] - 1] : 0;
        double tied = r0 != rl && w->tied_bytes > 0
                          ? (end0 > endl ? end0 : endl) + plan_link_ms(link, w->tied_bytes)
                          : 0;
        row->makespan = res.makespan;
        row->step = tied > res.makespan ? tied : res.makespan;
        row->bubble = res.bubble;
        row->eff = w->T1 * row->M / row->P / row->step;
        row->tok_s = (double)row->M * w->B * w->T / (row->step * 1e-3);
        sched_sim_result_free(&res);
        rc = row_memory(w, &s, &part, row, err, errlen);
    }
    sched_free(&s);
    return rc == PP_OK ? PP_OK : PP_ERUNTIME;
}

static void print_header(const Sweep *w, const PlanGrid *g, FILE *f) {
    const Config *cfg = w->cfg;
    const LayerCosts *c = w->c;
    fprintf(f,
            "plan: %s L=%d C=%d NH=%d Vp=%d%s, one pipeline (replica), microbatch %d x %d "
            "tokens, recompute %s\n",
            cfg->arch, cfg->n_layers, cfg->dim, cfg->n_heads, cfg->padded_vocab_size,
            cfg->tie_embeddings ? " (tied head)" : "", w->B, w->T, cfg->recompute);
    fprintf(f,
            "costs per microbatch, ms (%s): layer F %.4f B %.4f, embedding F %.4f B %.4f, "
            "head F %.4f B %.4f\n",
            g->costs_from ? g->costs_from : "given", c->layer_f, c->layer_b, c->embed_f, c->embed_b,
            c->head_f, c->head_b);
    fprintf(f, "  (as --layer-costs %.6g,%.6g,%.6g,%.6g,%.6g,%.6g)\n", c->layer_f, c->layer_b,
            c->embed_f, c->embed_b, c->head_f, c->head_b);
    if (g->grad_bytes == g->act_bytes)
        fprintf(f, "transfers: an activation or its gradient = %d x %d x %d x %d B = %.2f MB", w->B,
                w->T, cfg->dim, g->act_bytes, w->act_bytes / 1e6);
    else
        fprintf(f,
                "transfers: an activation = %d x %d x %d x %d B = %.2f MB, its gradient %d B an "
                "element = %.2f MB",
                w->B, w->T, cfg->dim, g->act_bytes, w->act_bytes / 1e6, g->grad_bytes,
                w->grad_bytes / 1e6);
    if (w->tied_bytes > 0)
        fprintf(f, "; the tied-embedding gradient exchange %d x %d x 4 B = %.1f MB",
                cfg->padded_vocab_size, cfg->dim, w->tied_bytes / 1e6);
    fprintf(f, "\nstep = the simulated pipeline (each transfer latency + bytes / bandwidth, one "
               "message at a time per link and direction, overlapping compute), then the tied "
               "exchange; not counted: the optimizer, the gradient-norm sum, data loading\n");
    fprintf(f,
            "efficiency = (M x %.4f ms, the whole model's F+B per microbatch) / P / step; "
            "bubble = idle fraction of the pipeline; memory = params + grads + optimizer + "
            "activations of the fullest rank on %s, MB = 1e6 bytes (docs/schedules.md)\n",
            w->T1, w->lay->what);
}

static void print_table(const PlanGrid *g, const Link *link, double X, double XB, double tied,
                        PlanRow *rows, int n, FILE *f) {
    if (XB == X)
        fprintf(f,
                "\nlink %s: %g us + %g GB/s per direction: an activation or gradient takes %.4f ms",
                link->name, link->latency_us, link->gbps, X);
    else
        fprintf(f,
                "\nlink %s: %g us + %g GB/s per direction: an activation takes %.4f ms, a "
                "gradient %.4f ms",
                link->name, link->latency_us, link->gbps, X, XB);
    if (tied > 0) fprintf(f, ", the tied-embedding exchange %.4f ms", tied);
    fprintf(f, "\n%-18s %2s %2s %4s %10s %7s %10s %11s %11s %4s  %s\n", "schedule", "P", "v", "M",
            "step ms", "bubble", "efficiency", "tokens/s", "memory MB", "rank", "layers per stage");
    for (int i = 0; i < n; i++) {
        PlanRow *r = &rows[i];
        if (!r->S) continue;
        char split[4 * PP_MAX_STAGES] = "";
        for (int s = 0; s < r->S; s++)
            pp_strappendf(split, sizeof split, "%s%d", s ? "," : "", r->layers[s]);
        fprintf(f, "%-18s %2d %2d %4d %10.3f %6.1f%% %9.1f%% %11.0f %11.1f %4d  %s\n", r->kind,
                r->P, r->v, r->M, r->step, 100 * r->bubble, 100 * r->eff, r->tok_s,
                r->mem_max / 1e6, r->mem_rank, split);
    }
    /* the efficiency matrix: P down, schedule x M across */
    fprintf(f, "pipeline efficiency over %s (%%):\n%4s", link->name, "P");
    for (int k = 0; k < g->nschedules; k++) {
        char kind[PP_NAME_MAX];
        int v = entry_kind(g->schedules[k], kind, sizeof kind);
        char head[PP_NAME_MAX + 16];
        if (v > 1) snprintf(head, sizeof head, "%s v=%d", kind, v);
        else snprintf(head, sizeof head, "%s", kind);
        fprintf(f, "  | %-*s", 7 * g->nmbs - 1, head);
    }
    fprintf(f, "\n%4s", "");
    for (int k = 0; k < g->nschedules; k++) {
        fprintf(f, "  |");
        for (int j = 0; j < g->nmbs; j++) fprintf(f, " M=%-4d", g->mbs[j]);
    }
    fputc('\n', f);
    for (int i = 0; i < g->nranks; i++) {
        fprintf(f, "%4d", g->ranks[i]);
        for (int k = 0; k < g->nschedules; k++) {
            fprintf(f, "  |");
            for (int j = 0; j < g->nmbs; j++) {
                PlanRow *r = &rows[((size_t)k * g->nranks + i) * g->nmbs + j];
                if (r->S) fprintf(f, " %5.1f ", 100 * r->eff);
                else fprintf(f, " %5s ", "-");
            }
        }
        fputc('\n', f);
    }
}

static void print_json_link(const Link *link, double X, double XB, double tied, PlanRow *rows,
                            int n, int last, FILE *f) {
    fprintf(f,
            "    {\"link\": \"%s\", \"latency_us\": %.17g, \"gbps\": %.17g, "
            "\"transfer_ms\": %.17g, \"grad_transfer_ms\": %.17g, \"tied_exchange_ms\": %.17g, "
            "\"rows\": [\n",
            link->name, link->latency_us, link->gbps, X, XB, tied);
    int first = 1;
    for (int i = 0; i < n; i++) {
        PlanRow *r = &rows[i];
        if (!r->S) continue;
        fprintf(f,
                "%s      {\"schedule\": \"%s\", \"ranks\": %d, \"virtual_stages\": %d, "
                "\"microbatches\": %d, \"makespan_ms\": %.17g, \"step_ms\": %.17g, "
                "\"bubble\": %.17g, \"efficiency\": %.17g, \"tokens_per_s\": %.17g, "
                "\"memory_bytes\": [",
                first ? "" : ",\n", r->kind, r->P, r->v, r->M, r->makespan, r->step, r->bubble,
                r->eff, r->tok_s);
        for (int k = 0; k < r->P; k++) fprintf(f, "%s%.0f", k ? ", " : "", r->mem[k]);
        fprintf(f, "], \"layers\": [");
        for (int s = 0; s < r->S; s++) fprintf(f, "%s%d", s ? ", " : "", r->layers[s]);
        fprintf(f, "]}");
        first = 0;
    }
    fprintf(f, "\n    ]}%s\n", last ? "" : ",");
}

/* Fill rows[schedule][ranks][mbs] for one link; a row whose stages outnumber the
 * layers keeps S = 0 (shown as "-"). */
static int sweep_link(const Sweep *w, const PlanGrid *g, const Link *link, PlanRow *rows, char *err,
                      size_t errlen) {
    for (int k = 0; k < g->nschedules; k++)
        for (int i = 0; i < g->nranks; i++)
            for (int j = 0; j < g->nmbs; j++) {
                PlanRow *r = &rows[((size_t)k * g->nranks + i) * g->nmbs + j];
                memset(r, 0, sizeof *r);
                r->v = entry_kind(g->schedules[k], r->kind, sizeof r->kind);
                r->P = g->ranks[i];
                r->M = g->mbs[j];
                if (r->P * r->v > w->cfg->n_layers) continue;
                int rc = row_run(w, link, r, err, errlen);
                if (rc != PP_OK) return rc;
            }
    return PP_OK;
}

int plan_sweep(const Config *cfg, const BackendLayout *lay, const LayerCosts *c, const PlanGrid *g,
               int json, FILE *f, char *err, size_t errlen) {
    int replicas = cfg->data_parallel > 0 ? cfg->data_parallel : 1;
    Sweep w = {.cfg = cfg,
               .c = c,
               .B = cfg->batch_size / (replicas * cfg->microbatches),
               .T = cfg->seq_len,
               .lay = lay};
    w.act_bytes = (double)w.B * w.T * cfg->dim * g->act_bytes;
    w.grad_bytes = (double)w.B * w.T * cfg->dim * g->grad_bytes;
    w.tied_bytes = cfg->tie_embeddings ? (double)cfg->padded_vocab_size * cfg->dim * 4 : 0;
    w.T1 = cfg->n_layers * (c->layer_f + c->layer_b) + c->embed_f + c->embed_b + c->head_f +
           c->head_b;
    int n = g->nschedules * g->nranks * g->nmbs, rc = PP_OK;
    PlanRow *rows = pp_calloc((size_t)n, sizeof *rows);
    if (json)
        fprintf(f,
                "{\n  \"layers\": %d, \"dim\": %d, \"heads\": %d, \"padded_vocab\": %d, "
                "\"microbatch_sequences\": %d, \"seq_len\": %d, \"act_bytes\": %d, "
                "\"grad_bytes\": %d,\n"
                "  \"costs_ms\": {\"layer_f\": %.17g, \"layer_b\": %.17g, \"embed_f\": %.17g, "
                "\"embed_b\": %.17g, \"head_f\": %.17g, \"head_b\": %.17g},\n"
                "  \"transfer_bytes\": %.0f, \"grad_transfer_bytes\": %.0f, \"tied_bytes\": %.0f, "
                "\"model_ms_per_microbatch\": %.17g,\n  \"links\": [\n",
                cfg->n_layers, cfg->dim, cfg->n_heads, cfg->padded_vocab_size, w.B, w.T,
                g->act_bytes, g->grad_bytes, c->layer_f, c->layer_b, c->embed_f, c->embed_b,
                c->head_f, c->head_b, w.act_bytes, w.grad_bytes, w.tied_bytes, w.T1);
    else
        print_header(&w, g, f);
    for (int l = 0; l < g->nlinks && rc == PP_OK; l++) {
        const Link *link = &g->links[l];
        double X = plan_link_ms(link, w.act_bytes), XB = plan_link_ms(link, w.grad_bytes),
               tied = plan_link_ms(link, w.tied_bytes);
        rc = sweep_link(&w, g, link, rows, err, errlen);
        if (rc == PP_OK && json)
            print_json_link(link, X, XB, tied, rows, n, l + 1 == g->nlinks, f);
        else if (rc == PP_OK)
            print_table(g, link, X, XB, tied, rows, n, f);
        for (int i = 0; i < n; i++) {
            free(rows[i].mem);
            rows[i].mem = NULL;
        }
    }
    if (json && rc == PP_OK) fprintf(f, "  ]\n}\n");
    free(rows);
    return rc;
}
