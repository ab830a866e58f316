/* plan_cmd.c — `pptrain schedule`: build, simulate and show a schedule. */
#include "plan_cmd.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/partition.h"
#include "plan.h"
#include "runtime/runtime.h"
#include "sched/sched.h"
#include "sched/sched_show.h"
#include "sched/sched_sim.h"

typedef struct {
    int text, json, measure, plan, given_costs;
    const char *svg;        /* path or NULL */
    const char *costs_from; /* --costs-from TRACE, or NULL */
    SchedSimCosts costs;
    LayerCosts layer;       /* --layer-costs (have_layer), or measured */
    int have_layer;
    PlanGrid grid;          /* --plan's sweep; links from --link */
    int act_bytes_given;    /* --act-bytes; else the residual stream's ([Note: backend layout]) */
    BackendLayout lay;      /* what the config's device stores (plan_layout), for the memory */
    int nlinks;             /* --link flags given */
} SchedCmdOpts;

void plan_cmd_usage(FILE *f) {
    fprintf(f,
            "usage: pptrain schedule --config FILE [--set key=value ...] [--text | --json]\n"
            "                        [--svg FILE] [--costs F,B[,X] | --costs F=f,B=b,W=w[,X=x]]\n"
            "                        [--measure | --costs-from TRACE | "
            "--layer-costs F,B[,EF,EB,HF,HB]]\n"
            "                        [--link nvlink|ib|ib-hdr|none|LAT_us,GBps ...] "
            "[--act-bytes 4|2] [--grad-bytes 4|2]\n"
            "                        [--plan [--plan-ranks 2-8] [--plan-microbatches 8,16,32]\n"
            "                                [--plan-schedules 1f1b,interleaved-1f1b]]\n"
            "  --text          per-rank action lists, text timeline and summary (default)\n"
            "  --json          one JSON object for tools instead of the text\n"
            "  --svg FILE      also draw the timeline as an SVG picture\n"
            "  --costs F,B,X   time of one forward, one backward and one transfer (1,2,0)\n"
            "  --costs F=1,B=1,W=1,X=0\n"
            "                  named: B is then the input-gradient half (I) and W the weight\n"
            "                  half; a full backward costs B+W (zero-bubble schedules)\n"
            "  --measure       time a layer's, the embedding's and the head's forward "
            "and backward\n"
            "                  on runtime.device first; pipeline.balance: time balances those and\n"
            "                  the timeline is in milliseconds\n"
            "  --costs-from TRACE\n"
            "                  per-stage F and B milliseconds (medians) of the run that wrote\n"
            "                  TRACE (./pptrain --trace: output.dir/trace.json)\n"
            "  --layer-costs F,B[,EF,EB,HF,HB]\n"
            "                  milliseconds per microbatch: a layer's F and B, then the\n"
            "                  embedding's and the head's\n"
            "  --link L        transfer time of each SEND: latency + bytes / bandwidth "
            "(nvlink 5us\n"
            "                  450GB/s, ib 10us 50GB/s, ib-hdr 10us 25GB/s, none, "
            "or LAT_us,GBps);\n"
            "                  repeat it for one --plan table per link (default nvlink and ib)\n"
            "  --act-bytes N   bytes per element of a transferred activation: 4 (fp32) or 2\n"
            "                  (bf16); default: what the config's device sends (2 on a bf16\n"
            "                  GPU, 4 on the CPU)\n"
            "  --grad-bytes N  ... of a transferred gradient: 4 (fp32, what pptrain sends) or 2\n"
            "  --plan          predict step time, bubble, efficiency, tokens/s and memory per\n"
            "                  rank for every P, schedule and M instead (docs/schedules.md)\n");
}

static int usage(const char *why) {
    if (why) pp_error("%s", why);
    plan_cmd_usage(stderr);
    return PP_EUSAGE;
}

/* Named costs "F=1,B=1,W=1,X=0" in any order: F and B required (> 0), W and X >= 0
 * optional (W absent: B stays the full backward, [Note: split costs] in sched_sim.h). */
static int parse_named_costs(const char *text, SchedSimCosts *c) {
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
    c->F = v[0];
    c->B = v[1];
    c->W = seen[2] ? v[2] : -1;
    c->X = v[3];
    return PP_OK;
}

/* "F,B" or "F,B,X": F, B > 0 and X >= 0, all finite; or the named form. */
static int parse_costs(const char *text, SchedSimCosts *c) {
    if (strchr(text, '=')) return parse_named_costs(text, c);
    double v[3] = {0, 0, 0};
    const char *p = text;
    int n = 0;
    while (n < 3) {
        char *end;
        errno = 0;
        v[n] = strtod(p, &end);
        if (end == p || errno || !isfinite(v[n]) || v[n] < 0) return PP_EUSAGE;
        n++;
        p = end;
        if (*p != ',' || n == 3) break;
        p++;
    }
    if (*p || n < 2 || v[0] <= 0 || v[1] <= 0) return PP_EUSAGE;
    c->F = v[0];
    c->B = v[1];
    c->X = v[2];
    return PP_OK;
}

/* "2,4,8" or "2-8" (or both: "2-4,8"): integers in 1..max, at most PLAN_MAX_LIST. */
static int parse_int_list(const char *text, int *vals, int *n, int max) {
    const char *p = text;
    *n = 0;
    for (;;) {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p || a < 1 || a > max) return PP_EUSAGE;
        b = a;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a || b > max) return PP_EUSAGE;
            p = end;
        }
        for (long x = a; x <= b; x++) {
            if (*n == PLAN_MAX_LIST) return PP_EUSAGE;
            vals[(*n)++] = (int)x;
        }
        if (!*p) return PP_OK;
        if (*p++ != ',') return PP_EUSAGE;
    }
}

/* "1f1b,interleaved-1f1b:2": schedule kinds, each with an optional chunk count. */
static int parse_schedules(const char *text, PlanGrid *g) {
    g->nschedules = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, ",");
        if (!n || n >= PP_NAME_MAX || g->nschedules == PLAN_MAX_LIST) return PP_EUSAGE;
        snprintf(g->schedules[g->nschedules++], PP_NAME_MAX, "%.*s", (int)n, p);
        p += n + (p[n] == ',');
    }
    return g->nschedules ? PP_OK : PP_EUSAGE;
}

/* The options that take a value. Returns PP_OK, or usage's status naming the flag. */
static int parse_value_opt(const char *a, const char *val, SchedCmdOpts *o) {
    if (!strcmp(a, "--svg")) {
        o->svg = val;
    } else if (!strcmp(a, "--costs")) {
        o->given_costs = 1;
        if (parse_costs(val, &o->costs) != PP_OK)
            return usage("--costs wants F,B or F,B,X (forward and backward > 0, transfer >= 0), or"
                         " named F=1,B=1,W=1,X=0 (F and B required)");
    } else if (!strcmp(a, "--costs-from")) {
        o->costs_from = val;
    } else if (!strcmp(a, "--layer-costs")) {
        o->have_layer = 1;
        if (plan_parse_layer_costs(val, &o->layer) != PP_OK)
            return usage(
                "--layer-costs wants F,B or F,B,EF,EB,HF,HB: milliseconds per microbatch of a "
                "layer's forward and backward (> 0), then the embedding's and the head's (>= 0)");
    } else if (!strcmp(a, "--link")) {
        if (o->nlinks == PLAN_MAX_LINKS) return usage("--link: at most 8 links");
        if (plan_parse_link(val, &o->grid.links[o->nlinks++]) != PP_OK)
            return usage("--link wants nvlink, ib, ib-hdr, none, or LATENCY_us,GBps with latency "
                         ">= 0 and bandwidth > 0 (e.g. --link 5,450)");
    } else if (!strcmp(a, "--act-bytes")) {
        if (strcmp(val, "4") && strcmp(val, "2"))
            return usage("--act-bytes wants 4 (fp32) or 2 (bf16)");
        o->grid.act_bytes = atoi(val);
        o->act_bytes_given = 1;
    } else if (!strcmp(a, "--grad-bytes")) {
        if (strcmp(val, "4") && strcmp(val, "2"))
            return usage("--grad-bytes wants 4 (fp32) or 2 (bf16)");
        o->grid.grad_bytes = atoi(val);
    } else if (!strcmp(a, "--plan-ranks")) {
        if (parse_int_list(val, o->grid.ranks, &o->grid.nranks, PP_MAX_STAGES) != PP_OK)
            return usage("--plan-ranks wants ranks such as 2-8 or 2,4,8 (at most 32 values)");
    } else if (!strcmp(a, "--plan-microbatches")) {
        if (parse_int_list(val, o->grid.mbs, &o->grid.nmbs, 1 << 16) != PP_OK)
            return usage(
                "--plan-microbatches wants counts such as 8,16,32 or 8-12 (at most 32 values)");
    } else if (!strcmp(a, "--plan-schedules")) {
        if (parse_schedules(val, &o->grid) != PP_OK)
            return usage("--plan-schedules wants schedule kinds such as 1f1b,interleaved-1f1b "
                         "(kind:v for v chunks)");
    } else {
        return -1;
    }
    return PP_OK;
}

/* The combinations that cannot work. */
static int check_opts(const SchedCmdOpts *o) {
    if (o->text && o->json) return usage("--text and --json are alternatives: pick one");
    if (o->measure + !!o->costs_from + o->have_layer > 1)
        return usage(
            "--measure, --costs-from and --layer-costs are alternatives: pick one source of costs");
    int timed = o->measure || o->costs_from || o->have_layer;
    if (o->plan && !timed)
        return usage("--plan needs per-layer costs in milliseconds: --measure, --costs-from TRACE "
                     "or --layer-costs");
    if (o->plan && (o->given_costs || o->svg))
        return usage("--plan takes its costs from --measure, --costs-from or --layer-costs and "
                     "draws no timeline: drop --costs and --svg");
    if (o->nlinks && (!timed || o->given_costs))
        return usage("--link gives transfer times in milliseconds: use it with --measure, "
                     "--costs-from or --layer-costs (not with --costs, whose units are arbitrary)");
    if (o->nlinks > 1 && !o->plan)
        return usage("--link: one link without --plan (the transfers of this schedule)");
    return PP_OK;
}

static int parse_opts(int argc, char **argv, SchedCmdOpts *o) {
    memset(o, 0, sizeof *o);
    sched_sim_costs_default(&o->costs);
    plan_grid_default(&o->grid);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc, rc;
        if (!strcmp(a, "--text")) {
            o->text = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--measure")) {
            o->measure = 1;
        } else if (!strcmp(a, "--plan")) {
            o->plan = 1;
        } else if (has_value && (rc = parse_value_opt(a, argv[i + 1], o)) >= 0) {
            if (rc != PP_OK) return rc;
            i++;
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
    if (o->nlinks) o->grid.nlinks = o->nlinks;
    return check_opts(o);
}

/* Sequences per microbatch: the global batch over the replicas (a fixed
 * pipeline.data_parallel; auto, which needs the process count, plans one replica) and the
 * microbatches, as runtime_init splits it. */
static int plan_replicas(const Config *cfg) {
    return cfg->data_parallel > 0 ? cfg->data_parallel : 1;
}
static int plan_microbatch(const Config *cfg) {
    return cfg->batch_size / (plan_replicas(cfg) * cfg->microbatches);
}

/* `--measure`: the milliseconds of a decoder layer, the embedding and the head on the
 * configured device (plan_measure), printed to f. */
static int measure_costs(const Config *cfg, LayerCosts *c, FILE *f) {
    char note[256], err[PP_ERR_MAX];
    if (plan_measure(cfg, plan_microbatch(cfg), c, note, sizeof note, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return PP_EUSAGE;
    }
    fprintf(f,
            "measured on this machine, device %s, one microbatch of %d x %d tokens, the fastest "
            "of 3: layer F %.4f ms B %.4f ms, embedding F %.4f ms B %.4f ms, head F %.4f ms "
            "B %.4f ms\n"
            "  (as --layer-costs %.6g,%.6g,%.6g,%.6g,%.6g,%.6g)\n\n",
            note, plan_microbatch(cfg), cfg->seq_len, c->layer_f, c->layer_b, c->embed_f,
            c->embed_b, c->head_f, c->head_b, c->layer_f, c->layer_b, c->embed_f, c->embed_b,
            c->head_f, c->head_b);
    return PP_OK;
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
        snprintf(names[st], 48, "layers %d-%d%s%s", part.l0[st], part.l1[st] - 1,
                 st == 0 ? " +emb" : "", st == s->S - 1 ? " +head" : "");
    }
    return names;
}

static void free_layers(char **names, int S) {
    for (int st = 0; names && st < S; st++) free(names[st]);
    free(names);
}

static int write_svg(const char *path, const Schedule *s, const SchedSimResult *res,
                     const SchedSimCosts *c) {
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

/* Per rank: parameters, gradients, optimizer state and activations for the config,
 * and the activation peak under each recompute mode side by side. The numbers the
 * build report's "allocated:" line prints for the same config (test/recompute.sh). */
static int print_memory_plan(const Config *cfg, const BackendLayout *lay, const Schedule *s,
                             const double *measured, FILE *f) {
    Schedule fwd;
    Partition part;
    char err[PP_ERR_MAX];
    if (runtime_partition(cfg, s, measured, plan_replicas(cfg), &part, err, sizeof err) != PP_OK ||
        sched_build_forward_only(&fwd, s, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return PP_EUSAGE;
    }
    int mode = model_recompute_mode(cfg->recompute);
    fprintf(f,
            "memory plan per rank (bytes on %s; microbatch %d x %d tokens%s, "
            "recompute %s%s):\n",
            lay->what, plan_microbatch(cfg), cfg->seq_len,
            cfg->data_parallel > 1    ? " of one replica"
            : cfg->data_parallel == 0 ? " (data_parallel auto: one replica)"
                                      : "",
            cfg->recompute,
            cfg->recompute_layers ? " on the first recompute_layers of each chunk" : "");
    for (int r = 0; r < s->P; r++) {
        ModelPlan p, by[3];
        plan_rank_memory(cfg, lay, s, &fwd, &part, r, mode, plan_microbatch(cfg), &p);
        for (int k = 0; k < 3; k++)
            plan_rank_memory(cfg, lay, s, &fwd, &part, r, k, plan_microbatch(cfg), &by[k]);
        size_t none = model_plan_activations(&by[0]);
        fprintf(f,
                "rank %d: plan: params %zu B, grads %zu B, optimizer %zu B, activations %zu B "
                "(slots %zu + recompute workspace %zu + receive %zu + W state %zu), recompute %s\n",
                r, p.params, p.grads, p.optimizer, model_plan_activations(&p), p.slots, p.work,
                p.recv, p.wstate, cfg->recompute);
        fprintf(f,
                "rank %d: activation peak: none %.1f MB, selective %.1f MB (%.2fx less), "
                "full %.1f MB (%.2fx less)\n",
                r, none / 1e6, model_plan_activations(&by[1]) / 1e6,
                (double)none / model_plan_activations(&by[1]), model_plan_activations(&by[2]) / 1e6,
                (double)none / model_plan_activations(&by[2]));
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

/* The time costs of the options ([Note: planning model] in plan.c): --measure (printed
 * to f) or --layer-costs into o->layer; --costs-from into *trace. */
static int time_costs(const Config *cfg, SchedCmdOpts *o, const Schedule *s, TraceCosts *trace,
                      FILE *f) {
    char err[PP_ERR_MAX];
    if (o->measure) {
        if (measure_costs(cfg, &o->layer, f) != PP_OK) return PP_EUSAGE;
        o->have_layer = 1;
    }
    if (o->costs_from && plan_trace_costs(o->costs_from, s->S, trace, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return PP_EUSAGE;
    }
    if (o->costs_from) {
        fprintf(f,
                "costs from %s (medians of %d compute slices over %d step%s), ms per microbatch:",
                o->costs_from, trace->slices, trace->steps, trace->steps == 1 ? "" : "s");
        for (int st = 0; st < s->S; st++)
            fprintf(f, "%s stage %d F %.4f %s %.4f", st ? "," : "", st, trace->F[st],
                    trace->split ? "I" : "B", trace->B[st]);
        if (trace->split)
            for (int st = 0; st < s->S; st++) fprintf(f, "%s W %.4f", st ? "," : ";", trace->W[st]);
        fprintf(f, "\n\n");
    }
    return PP_OK;
}

/* --plan: per-layer costs (measured, given, or fitted to the trace's stages over the
 * config's partition), then the sweep. */
static int run_plan(const Config *cfg, SchedCmdOpts *o, const Schedule *s,
                    const TraceCosts *trace) {
    char err[PP_ERR_MAX], from[PP_PATH_MAX + 160];
    FILE *note = o->json ? stderr : stdout;
    snprintf(from, sizeof from, "%s", o->measure ? "measured here" : "given");
    if (o->costs_from) {
        Partition part;
        double B[PP_MAX_STAGES];
        if (runtime_partition(cfg, s, NULL, plan_replicas(cfg), &part, err, sizeof err) != PP_OK) {
            pp_error("%s", err);
            return PP_EUSAGE;
        }
        for (int st = 0; st < s->S; st++) B[st] = trace->B[st] + trace->W[st]; /* a full backward */
        ModelDims d = model_dims(cfg);
        ArchCosts a;
        model_arch_costs(&d, cfg->seq_len, &a);
        double miss = plan_fit_layers(&part, trace->F, B, &a, &o->layer);
        snprintf(from, sizeof from,
                 "fitted to the %d stages of %s, largest misfit of a stage's F+B %.1f%%", s->S,
                 o->costs_from, 100 * miss);
        if (s->S < 3)
            fprintf(note,
                    "note: %d stages cannot separate the embedding and head from the layers: they "
                    "take the FLOP model's share\n",
                    s->S);
    }
    o->grid.costs_from = from;
    if (plan_sweep(cfg, &o->lay, &o->layer, &o->grid, o->json, stdout, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return PP_ERUNTIME;
    }
    return PP_OK;
}

/* The simulator's costs for the config's own schedule: --costs as given; else the time
 * costs in milliseconds per stage (F, B in F/B; the trace's W), with --link's transfer
 * time on serial links. */
static void schedule_costs(const Config *cfg, const SchedCmdOpts *o, const Schedule *s,
                           const TraceCosts *trace, const double *measured, double *F, double *B,
                           SchedSimCosts *c) {
    *c = o->costs;
    if (o->given_costs || !(o->have_layer || o->costs_from)) return;
    sched_sim_costs_default(c);
    if (o->costs_from) {
        c->F_stage = trace->F;
        c->B_stage = trace->B;
        c->W_stage = trace->split ? trace->W : NULL;
    } else {
        Partition part;
        char err[PP_ERR_MAX];
        if (runtime_partition(cfg, s, measured, plan_replicas(cfg), &part, err,
                              sizeof err) != PP_OK)
            return;
        plan_stage_costs(&o->layer, &part, F, B); /* stage_layers already reported a bad split */
        c->F_stage = F;
        c->B_stage = B;
    }
    if (o->nlinks) {
        double elems = (double)plan_microbatch(cfg) * cfg->seq_len * cfg->dim;
        double bytes = elems * o->grid.act_bytes, gbytes = elems * o->grid.grad_bytes;
        c->X = plan_link_ms(&o->grid.links[0], bytes);
        c->X_B = plan_link_ms(&o->grid.links[0], gbytes); /* X itself when the sizes agree */
        c->serial_links = 1;
        if (!o->json && gbytes == bytes)
            printf("link %s: an activation or gradient of %.2f MB takes %.4f ms (one message at a "
                   "time per link and direction)\n\n",
                   o->grid.links[0].name, bytes / 1e6, c->X);
        else if (!o->json)
            printf("link %s: an activation of %.2f MB takes %.4f ms, a gradient of %.2f MB %.4f ms "
                   "(one message at a time per link and direction)\n\n",
                   o->grid.links[0].name, bytes / 1e6, c->X, gbytes / 1e6, c->X_B);
    }
}

int plan_cmd_main(const Config *cfg, int argc, char **argv) {
    SchedCmdOpts o;
    Schedule s;
    SchedSimResult res;
    SchedSimCosts costs;
    TraceCosts trace;
    char err[PP_ERR_MAX];
    int rc = parse_opts(argc, argv, &o);
    if (rc != PP_OK) return rc;
    if (plan_layout(cfg, plan_microbatch(cfg), &o.lay, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return PP_EUSAGE;
    }
    /* what the run's device sends forward: its residual stream */
    if (!o.act_bytes_given) o.grid.act_bytes = (int)pp_dtype_bytes(o.lay.residual);
    if ((rc = load_schedule(cfg, &s)) != PP_OK) return rc;
    rc = time_costs(cfg, &o, &s, &trace, o.json ? stderr : stdout); /* JSON stays one object */
    if (rc == PP_OK && o.plan) rc = run_plan(cfg, &o, &s, &trace);
    if (rc != PP_OK || o.plan) {
        sched_free(&s);
        return rc;
    }
    double measured[3], F[PP_MAX_STAGES], B[PP_MAX_STAGES];
    LayerCosts *l = &o.layer;
    measured[0] = l->layer_f + l->layer_b;
    measured[1] = l->embed_f + l->embed_b;
    measured[2] = l->head_f + l->head_b;
    const double *balance = o.have_layer ? measured : NULL;
    char **layers = stage_layers(cfg, &s, balance);
    if (!layers) {
        sched_free(&s);
        return PP_EUSAGE;
    }
    schedule_costs(cfg, &o, &s, &trace, balance, F, B, &costs);
    rc = sched_sim_run(&s, &costs, &res, err, sizeof err, stderr);
    if (rc != PP_OK) {
        pp_error("%s", err);
        rc = PP_ERUNTIME;
    } else if (o.json) {
        sched_show_json(&s, &res, &costs, (const char *const *)layers, stdout);
    } else {
        printf("per-rank actions (lowered; text form <stage><action><microbatch>):\n");
        sched_write(&s, stdout);
        printf("\n");
        sched_show_timeline(&s, &res, stdout);
        printf("\n");
        sched_show_summary(&s, &res, &costs, (const char *const *)layers, stdout);
        printf("\n");
        rc = print_memory_plan(cfg, &o.lay, &s, balance, stdout);
    }
    if (rc == PP_OK && o.svg) {
        rc = write_svg(o.svg, &s, &res, &costs);
        if (rc == PP_OK && !o.json) printf("\nwrote the timeline picture to %s\n", o.svg);
    }
    sched_sim_result_free(&res);
    free_layers(layers, s.S);
    sched_free(&s);
    return rc;
}
