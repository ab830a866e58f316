/* sched_cmd.c — `pptrain schedule`: build, simulate and show a schedule. */
#include "sched_cmd.h"

#include "partition.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "optim.h"
#include "runtime.h"
#include "sched.h"
#include "sched_show.h"
#include "sim.h"

typedef struct {
    int text, json, measure;
    const char *svg; /* path or NULL */
    SimCosts costs;
} SchedCmdOpts;

static int usage(const char *why) {
    if (why) pp_error("%s", why);
    fprintf(stderr,
            "usage: pptrain schedule --config FILE [--set key=value ...] [--text | --json]\n"
            "                        [--svg FILE] [--costs F,B[,X] | --costs F=f,B=b,W=w[,X=x]]\n"
            "  --text          per-rank action lists, text timeline and summary (default)\n"
            "  --json          one JSON object for tools instead of the text\n"
            "  --svg FILE      also draw the timeline as an SVG picture\n"
            "  --costs F,B,X   time of one forward, one backward and one transfer (1,2,0)\n"
            "  --measure       time one forward and backward of a layer, the embedding and the\n"
            "                  head here first; pipeline.balance: time then balances those\n"
            "  --costs F=1,B=1,W=1,X=0\n"
            "                  named: B is then the input-gradient half (I) and W the weight\n"
            "                  half; a full backward costs B+W (zero-bubble schedules)\n");
    return PP_EUSAGE;
}

/* Named costs "F=1,B=1,W=1,X=0" in any order: F and B required (> 0), W and X >= 0
 * optional (W absent: B stays the full backward, [Note: split costs] in sim.h). */
static int parse_named_costs(const char *text, SimCosts *c) {
    double v[4] = {-1, -1, -1, 0}; /* F, B, W, X */
    int seen[4] = {0, 0, 0, 0};
    const char *p = text, *keys = "FBWX";
    for (;;) {
        const char *k = strchr(keys, *p);
        if (!*p || !k || p[1] != '=') return PP_EUSAGE;
        int i = (int)(k - keys);
        char *end;
        errno = 0;
        v[i] = strtod(p + 2, &end);
        if (end == p + 2 || errno || !isfinite(v[i]) || v[i] < 0 || seen[i]++) return PP_EUSAGE;
        p = end;
        if (!*p) break;
        if (*p++ != ',') return PP_EUSAGE;
    }
    if (!seen[0] || !seen[1] || v[0] <= 0 || v[1] <= 0) return PP_EUSAGE;
    c->F = v[0], c->B = v[1], c->W = seen[2] ? v[2] : -1, c->X = v[3];
    return PP_OK;
}

/* "F,B" or "F,B,X": F, B > 0 and X >= 0, all finite; or the named form. */
static int parse_costs(const char *text, SimCosts *c) {
    if (strchr(text, '=')) return parse_named_costs(text, c);
    double v[3] = {0, 0, 0};
    const char *p = text;
    int n = 0;
    while (n < 3) {
        char *end;
        errno = 0;
        v[n] = strtod(p, &end);
        if (end == p || errno || !isfinite(v[n]) || v[n] < 0) return PP_EUSAGE;
        n++, p = end;
        if (*p != ',' || n == 3) break;
        p++;
    }
    if (*p || n < 2 || v[0] <= 0 || v[1] <= 0) return PP_EUSAGE;
    c->F = v[0], c->B = v[1], c->X = v[2];
    return PP_OK;
}

static int parse_opts(int argc, char **argv, SchedCmdOpts *o) {
    memset(o, 0, sizeof *o);
    sim_costs_default(&o->costs);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--text")) {
            o->text = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--measure")) {
            o->measure = 1;
        } else if (!strcmp(a, "--svg") && has_value) {
            o->svg = argv[++i];
        } else if (!strcmp(a, "--costs") && has_value) {
            if (parse_costs(argv[++i], &o->costs) != PP_OK)
                return usage("--costs wants F,B or F,B,X (forward and backward > 0, transfer >= 0), or"
                             " named F=1,B=1,W=1,X=0 (F and B required)");
        } else if ((!strcmp(a, "--config") || !strcmp(a, "--set")) && has_value) {
            i++; /* applied by main */
        } else if (!strncmp(a, "--config=", 9) || !strncmp(a, "--set=", 6)) {
            continue;
        } else {
            char why[PP_ERR_MAX];
            snprintf(why, sizeof why, "schedule: unknown option or missing value: '%s'", a);
            return usage(why);
        }
    }
    if (o->text && o->json) return usage("--text and --json are alternatives: pick one");
    return PP_OK;
}

/* Sequences per microbatch: the global batch over the replicas (a fixed
 * pipeline.data_parallel; auto, which needs the process count, plans one replica) and the
 * microbatches, as runtime_init splits it. */
static int plan_replicas(const Config *cfg) { return cfg->data_parallel > 0 ? cfg->data_parallel : 1; }
static int plan_microbatch(const Config *cfg) { return cfg->batch_size / (plan_replicas(cfg) * cfg->microbatches); }

/* Seconds of one forward and backward on one microbatch of a single chunk `spec` of
 * a 2-layer model of the config's shape: the fastest of 3 after a warm-up. */
static double time_chunk(const Config *cfg, ChunkSpec spec) {
    int B = plan_microbatch(cfg), T = cfg->seq_len;
    size_t N = (size_t)B * T, C = cfg->dim;
    ModelDims d = {cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, 2, cfg->n_heads, cfg->dim,
                   cfg->tie_embeddings};
    const Backend *be = backend_cpu();
    Model m;
    model_init(&m, &d, &spec, 1, B, T, be);
    model_init_weights(&m, cfg->seed, cfg->init_std);
    ActSlot *a = &m.chunks[0].slots[0];
    float *x = pp_malloc(N * C * sizeof(float));
    int *tok = pp_calloc(N, sizeof(int));
    for (size_t i = 0; i < N * C; i++) x[i] = (float)((i * 7919) % 13) * 0.1f - 0.6f;
    double best = 1e300;
    for (int rep = 0; rep < 4; rep++) {
        be->to_device(be, a->input, x, N * C * sizeof(float));
        be->to_device(be, a->tokens, tok, N * sizeof(int));
        be->to_device(be, a->targets, tok, N * sizeof(int));
        be->to_device(be, a->grad, x, N * C * sizeof(float));
        be->wait(be);
        double t0 = pp_now();
        model_forward(&m, 0, 0, 1.0f / N, 1, NULL);
        model_backward(&m, 0, 0);
        be->wait(be);
        double t = pp_now() - t0;
        if (rep > 0 && t < best) best = t;
    }
    free(x), free(tok);
    model_free(&m);
    return best;
}

/* `--measure`: the seconds of a decoder layer, the embedding and the head (each the
 * difference of a chunk with it and one without), for pipeline.balance: time. */
static void measure_costs(const Config *cfg, double out[3], FILE *f) {
    ChunkSpec mid = {1, 1, 2, 0, 0, 1, 0}, first = {0, 0, 1, 1, 0, 1, 0}, last = {1, 1, 2, 0, 1, 1, 0};
    double tm = time_chunk(cfg, mid), tf = time_chunk(cfg, first), tl = time_chunk(cfg, last);
    out[0] = tm;
    out[1] = tf > tm ? tf - tm : 0;
    out[2] = tl > tm ? tl - tm : 0;
    fprintf(f, "measured on this machine (one microbatch of %d x %d tokens, forward + backward, CPU backend): "
           "layer %.3f ms, embedding %.3f ms, head %.3f ms\n\n", plan_microbatch(cfg), cfg->seq_len,
           out[0] * 1e3, out[1] * 1e3, out[2] * 1e3);
}

/* "layers a-b" per stage from the partition (pipeline.split, pipeline.balance), or
 * NULL with a message when the split does not fit the model. Free with free_layers. */
static char **stage_layers(const Config *cfg, const Schedule *s, const double *measured) {
    Partition part;
    char err[PP_ERR_MAX];
    if (runtime_partition(cfg, s, measured, plan_replicas(cfg), &part, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return NULL;
    }
    char **names = pp_calloc(s->S, sizeof(char *));
    for (int st = 0; st < s->S; st++) {
        names[st] = pp_malloc(48);
        snprintf(names[st], 48, "layers %d-%d%s%s", part.l0[st], part.l1[st] - 1, st == 0 ? " +emb" : "",
                 st == s->S - 1 ? " +head" : "");
    }
    return names;
}

static void free_layers(char **names, int S) {
    for (int st = 0; names && st < S; st++) free(names[st]);
    free(names);
}

static int write_svg(const char *path, const Schedule *s, const SimResult *res,
                     const SimCosts *c) {
    FILE *f = fopen(path, "w");
    if (!f) {
        pp_error("cannot write SVG to %s: %s", path, strerror(errno));
        return PP_ERUNTIME;
    }
    sched_show_svg(s, res, c, f);
    if (fclose(f) != 0) {
        pp_error("writing SVG to %s failed: %s", path, strerror(errno));
        return PP_ERUNTIME;
    }
    return PP_OK;
}

/* Rank pp's plan ([Note: memory plan] in model.h) under recompute mode `mode`: what
 * runtime_init would allocate on the CPU backend. */
static void plan_rank(const Config *cfg, const Schedule *s, const Schedule *fwd, const Partition *part, int pp,
                      int mode, ModelPlan *plan) {
    ChunkSpec specs[PP_MAX_CHUNKS];
    ChunkRecompute rc[PP_MAX_CHUNKS];
    int nws[PP_MAX_CHUNKS], nblocks[2], B = plan_microbatch(cfg), T = cfg->seq_len;
    ModelDims d = {cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, cfg->n_layers, cfg->n_heads, cfg->dim,
                   cfg->tie_embeddings};
    const Backend *be = backend_cpu();
    runtime_chunk_plan(s, fwd, part, pp, mode, cfg->recompute_layers, specs, rc, nws, nblocks);
    model_plan(plan, &d, specs, rc, nws, s->v, B, T, be->attention_saved_floats(be, B, T, d.NH),
               be->logits_chunk_rows, optim_state_arrays(cfg), nblocks[1], nblocks[0]);
}

/* Per rank: parameters, gradients, optimizer state and activations for the config,
 * and the activation peak under each recompute mode side by side. The numbers the
 * build report's "allocated:" line prints for the same config (test/recompute.sh). */
static int print_memory_plan(const Config *cfg, const Schedule *s, const double *measured, FILE *f) {
    Schedule fwd;
    Partition part;
    char err[PP_ERR_MAX];
    if (runtime_partition(cfg, s, measured, plan_replicas(cfg), &part, err, sizeof err) != PP_OK ||
        sched_build_forward_only(&fwd, s, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return PP_EUSAGE;
    }
    int mode = model_recompute_mode(cfg->recompute);
    fprintf(f, "memory plan per rank (bytes on the CPU backend, microbatch %d x %d tokens%s, recompute %s%s):\n",
            plan_microbatch(cfg), cfg->seq_len,
            cfg->data_parallel > 1 ? " of one replica" : cfg->data_parallel == 0 ? " (data_parallel auto: one replica)" : "",
            cfg->recompute, cfg->recompute_layers ? " on the first recompute_layers of each chunk" : "");
    for (int r = 0; r < s->P; r++) {
        ModelPlan p, by[3];
        plan_rank(cfg, s, &fwd, &part, r, mode, &p);
        for (int k = 0; k < 3; k++) plan_rank(cfg, s, &fwd, &part, r, k, &by[k]);
        size_t none = model_plan_activations(&by[0]);
        fprintf(f, "rank %d: plan: params %zu B, grads %zu B, optimizer %zu B, activations %zu B (slots %zu + recompute "
                "workspace %zu + receive %zu + W state %zu), recompute %s\n", r, p.params, p.grads, p.optimizer,
                model_plan_activations(&p), p.slots, p.work, p.recv, p.wstate, cfg->recompute);
        fprintf(f, "rank %d: activation peak: none %.1f MB, selective %.1f MB (%.2fx less), full %.1f MB (%.2fx less)\n",
                r, none / 1e6, model_plan_activations(&by[1]) / 1e6, (double)none / model_plan_activations(&by[1]),
                model_plan_activations(&by[2]) / 1e6, (double)none / model_plan_activations(&by[2]));
    }
    sched_free(&fwd);
    return PP_OK;
}

static int load_schedule(const Config *cfg, Schedule *s) {
    char err[PP_ERR_MAX];
    int rc = cfg->schedule_file[0]
                 ? sched_load_file(s, cfg->schedule_file, cfg->stages, cfg->virtual_stages,
                                   cfg->microbatches, err, sizeof err)
                 : sched_build(s, cfg->schedule, cfg->stages, cfg->virtual_stages,
                               cfg->microbatches, err, sizeof err);
    if (rc != PP_OK) pp_error("%s", err);
    return rc;
}

int sched_cmd_main(const Config *cfg, int argc, char **argv) {
    SchedCmdOpts o;
    Schedule s;
    SimResult res;
    char err[PP_ERR_MAX];
    int rc = parse_opts(argc, argv, &o);
    if (rc != PP_OK) return rc;
    if ((rc = load_schedule(cfg, &s)) != PP_OK) return rc;
    double measured[3];
    if (o.measure) measure_costs(cfg, measured, o.json ? stderr : stdout); /* JSON stays one object */
    char **layers = stage_layers(cfg, &s, o.measure ? measured : NULL);
    if (!layers) {
        sched_free(&s);
        return PP_EUSAGE;
    }
    rc = sim_run(&s, &o.costs, &res, err, sizeof err, stderr);
    if (rc != PP_OK) {
        pp_error("%s", err);
        rc = PP_ERUNTIME;
    } else if (o.json) {
        sched_show_json(&s, &res, &o.costs, (const char *const *)layers, stdout);
    } else {
        printf("per-rank actions (lowered; text form <stage><action><microbatch>):\n");
        sched_write(&s, stdout);
        printf("\n");
        sched_show_timeline(&s, &res, stdout);
        printf("\n");
        sched_show_summary(&s, &res, &o.costs, (const char *const *)layers, stdout);
        printf("\n");
        rc = print_memory_plan(cfg, &s, o.measure ? measured : NULL, stdout);
    }
    if (rc == PP_OK && o.svg) {
        rc = write_svg(o.svg, &s, &res, &o.costs);
        if (rc == PP_OK && !o.json) printf("\nwrote the timeline picture to %s\n", o.svg);
    }
    sim_result_free(&res);
    free_layers(layers, s.S);
    sched_free(&s);
    return rc;
}
