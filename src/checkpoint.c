/* checkpoint.c — the run's state to and from the checkpoint store. */
#include "checkpoint.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "common.h"

/* [Note: checkpoint names] Parameters are stored under their global names (model.h),
 * optimizer state as "<name>.opt_m" and "<name>.opt_v" (AdamW moments; SGD keeps its
 * momentum in opt_m). The tied wte is held by the first and the last stage's rank with
 * identical values ([Note: tied embeddings]); only the rank of stage 0 stores it, and
 * both load it from there. The manifest holds the model's dimensions ("model") and the
 * printed config ("config"). */

#define MAX_TENSORS_PER_PARAM 3

static const char *const state_suffix[MAX_TENSORS_PER_PARAM] = {"", ".opt_m", ".opt_v"};

/* The arrays stored for parameter t (device memory): its values, then the optimizer
 * state this run keeps (NULL where it keeps none), in state_suffix order. */
static void state_arrays(const Runtime *rt, const ParamTensor *t, float *out[MAX_TENSORS_PER_PARAM]) {
    const Model *m = &rt->model;
    out[0] = m->params + t->offset;
    out[1] = m->opt_m ? m->opt_m + t->offset : NULL;
    out[2] = m->opt_v ? m->opt_v + t->offset : NULL;
}

/* The writer's staging copy reads device memory through the backend. */
static void copy_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
    const Backend *be = ctx;
    be->to_host(be, dst, src, bytes);
    be->wait(be);
}

static void model_string(const Runtime *rt, char *buf, size_t n) {
    const ModelDims *d = &rt->model.d;
    snprintf(buf, n, "V=%d Vp=%d maxT=%d L=%d NH=%d C=%d tied=%d", d->V, d->Vp, d->maxT, d->L, d->NH, d->C, d->tied);
}

/* The tensors this rank stores: parameters and optimizer state. */
static int collect(const Runtime *rt, CkptTensor *out, char (*names)[64]) {
    const Model *m = &rt->model;
    int n = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        if (runtime_tied_replica(rt, t)) continue;
        float *src[MAX_TENSORS_PER_PARAM];
        state_arrays(rt, t, src);
        for (int k = 0; k < MAX_TENSORS_PER_PARAM; k++) {
            if (!src[k]) continue;
            snprintf(names[n], 64, "%s%s", t->name, state_suffix[k]);
            out[n] = (CkptTensor){.name = names[n], .dtype = CKPT_F32, .ndim = t->ndim, .data = src[k]};
            out[n].shape[0] = t->shape[0];
            out[n].shape[1] = t->shape[1];
            n++;
        }
    }
    return n;
}

void checkpoint_init(Checkpointer *c, const Runtime *rt, const char *config_text) {
    memset(c, 0, sizeof *c);
    snprintf(c->root, sizeof c->root, "%s/checkpoints", rt->cfg->out_dir);
    CkptOptions o;
    ckpt_options_default(&o);
    o.level = rt->cfg->compression_level;
    /* Level 1 is "fastest": on byte-shuffled floats zlib's run-length strategy is both
     * faster and smaller than level-1 deflate (bench_ckpt: 0.86 vs 0.88 of the raw size
     * on trained weights). Levels 2-9 are deflate at that level. */
    o.strategy = o.level == 1 ? CKPT_RLE : CKPT_DEFLATE;
    c->writer = ckpt_writer_create(&o);
    ckpt_writer_set_copy(c->writer, copy_to_host, (void *)rt->model.be);
    c->pending = -1;
    if (rt->cfg->checkpoint_every > 0) { /* background saves: no page faults in a step */
        int cap = rt->model.ntensors * MAX_TENSORS_PER_PARAM;
        CkptTensor *t = pp_calloc(cap, sizeof *t);
        char(*names)[64] = pp_calloc(cap, 64);
        ckpt_writer_reserve(c->writer, t, collect(rt, t, names));
        free(t);
        free(names);
    }
    c->config_text = strdup(config_text);
}

void checkpoint_free(Checkpointer *c) {
    ckpt_writer_destroy(c->writer);
    free(c->config_text);
    memset(c, 0, sizeof *c);
}

int checkpoint_idle(const Checkpointer *c) { return !ckpt_writer_busy(c->writer); }

/* Sum `ok` (1/0) over the ranks; PP_OK only if every rank is ok. */
static int agree(Runtime *rt, int ok, const char *what, char *err, size_t errlen) {
    double v = ok ? 1.0 : 0.0;
    if (comm_allreduce_sum_f64(rt->comm, &v, 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s: %s", what, comm_error(rt->comm));
    if (v != rt->lay.world && ok)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s failed on another rank (see its message)", what);
    return ok ? PP_OK : PP_ERUNTIME;
}

int checkpoint_save(Checkpointer *c, Runtime *rt, long step, int wait, char *err, size_t errlen) {
    char dir[PP_PATH_MAX], path[PP_PATH_MAX + 32], model[128];
    double t0 = pp_now(); /* the stall: waiting for an earlier save, then the copy */
    int rc = checkpoint_finish(c, rt, err, errlen);
    if (rc) return rc;
    if (rt->lay.rank == 0) rc = ckpt_stage_dir(c->root, step, dir, sizeof dir, err, errlen);
    if ((rc = agree(rt, rc == PP_OK, "preparing the checkpoint directory", err, errlen))) return rc;
    ckpt_dir_path(c->root, step, 1, dir, sizeof dir);
    ckpt_shard_path(dir, rt->lay.rank, path, sizeof path);
    int cap = rt->model.ntensors * MAX_TENSORS_PER_PARAM;
    CkptTensor *t = pp_calloc(cap, sizeof *t);
    char(*names)[64] = pp_calloc(cap, 64);
    int n = collect(rt, t, names);
    CkptMeta *meta = ckpt_meta_create();
    model_string(rt, model, sizeof model);
    ckpt_meta_set_u64(meta, "step", (uint64_t)step);
    ckpt_meta_set_u64(meta, "rank", (uint64_t)rt->lay.rank);
    ckpt_meta_set_u64(meta, "world", (uint64_t)rt->lay.world);
    ckpt_meta_set_u64(meta, "seed", rt->cfg->seed);
    ckpt_meta_set_u64(meta, "data_batch", (uint64_t)step); /* the next batch to read */
    ckpt_meta_set_str(meta, "model", model);
    ckpt_meta_set_u64(meta, "model_hash", config_hash(rt->cfg, 1)); /* the model: section */
    /* a save the run waits for (the end, a signal) may use every core; one written
     * while training goes on gets one thread, so the steps keep theirs */
    ckpt_writer_set_threads(c->writer, wait ? 0 : 1);
    rc = ckpt_writer_submit(c->writer, path, meta, t, n, err, errlen);
    rt->save_stall_s = pp_now() - t0;
    ckpt_meta_destroy(meta);
    free(t);
    free(names);
    if (rc) return rc;
    c->pending = step;
    return wait ? checkpoint_finish(c, rt, err, errlen) : PP_OK;
}

int checkpoint_finish(Checkpointer *c, Runtime *rt, char *err, size_t errlen) {
    if (c->pending < 0) return PP_OK;
    char model[128], step[32];
    int rc = ckpt_writer_wait(c->writer, err, errlen);
    if ((rc = agree(rt, rc == PP_OK, "writing the checkpoint shards", err, errlen))) return rc;
    if (rt->lay.rank == 0) {
        model_string(rt, model, sizeof model);
        CkptKV kv[] = {{"model", model}, {"optimizer", rt->cfg->optimizer}, {"config", c->config_text}};
        rc = ckpt_commit(c->root, c->pending, rt->lay.world, kv, 3, rt->cfg->checkpoint_keep, err, errlen);
    }
    if ((rc = agree(rt, rc == PP_OK, "committing the checkpoint", err, errlen))) return rc;
    snprintf(step, sizeof step, "%07ld", c->pending);
    if (rt->chunk_of[rt->S - 1] >= 0)
        printf("saved checkpoint %s/step_%s (training stalled %.1f ms to hand it over)\n", c->root, step,
               rt->save_stall_s * 1e3);
    c->pending = -1;
    return PP_OK;
}

/* This rank's part of checkpoint_load. */
static int load_local(Runtime *rt, const char *path, long *step, char *err, size_t errlen) {
    char dir[PP_PATH_MAX], model[128], name[80];
    int rc = ckpt_resolve(path, dir, sizeof dir, err, errlen);
    if (rc) return rc;
    CkptReader *r = ckpt_open(dir, err, errlen);
    if (!r) return PP_ERUNTIME;
    model_string(rt, model, sizeof model);
    const char *theirs = ckpt_extra(r, "model");
    if (!theirs || strcmp(theirs, model) != 0) { /* theirs lives in r: format first */
        pp_errf(err, errlen, PP_ERUNTIME, "%s holds another model (%s) than this config (%s): resume with the "
                "model config it was written with", dir, theirs ? theirs : "no model entry", model);
        ckpt_close(r);
        return PP_ERUNTIME;
    }
    const char *opt = ckpt_extra(r, "optimizer");
    if (!opt || strcmp(opt, rt->cfg->optimizer) != 0) { /* SGD's momentum is not Adam's m */
        pp_errf(err, errlen, PP_ERUNTIME, "%s was written with train.optimizer.name %s, this run uses %s: resume with "
                "the same optimizer", dir, opt ? opt : "(unknown)", rt->cfg->optimizer);
        ckpt_close(r);
        return PP_ERUNTIME;
    }
    const Model *m = &rt->model;
    size_t most = 1;
    for (int i = 0; i < m->ntensors; i++) most = m->tensors[i].numel > most ? m->tensors[i].numel : most;
    float *host = pp_malloc(most * sizeof(float)); /* each array is read here, then copied to the device */
    for (int i = 0; i < m->ntensors && rc == PP_OK; i++) {
        const ParamTensor *t = &m->tensors[i];
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        float *dst[MAX_TENSORS_PER_PARAM];
        state_arrays(rt, t, dst);
        for (int k = 0; k < MAX_TENSORS_PER_PARAM && rc == PP_OK; k++) {
            if (!dst[k]) continue;
            snprintf(name, sizeof name, "%s%s", t->name, state_suffix[k]);
            if (ckpt_find(r, name, NULL) != 0) {
                rc = pp_errf(err, errlen, PP_ERUNTIME, "%s has no tensor '%s'%s", dir, name,
                             k ? ": it was written with another optimizer (train.optimizer.name)" : "");
                break;
            }
            rc = ckpt_read(r, name, host, shape, t->ndim, err, errlen);
            if (rc == PP_OK) m->be->to_device(m->be, dst[k], host, t->numel * sizeof(float));
            m->be->wait(m->be);
        }
    }
    free(host);
    *step = ckpt_step(r);
    ckpt_close(r);
    return rc;
}

/* ---- export ------------------------------------------------------------------- */

int checkpoint_export_main(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    char err[PP_ERR_MAX], dir[PP_PATH_MAX];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) in = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else return pp_error("export: unknown argument '%s'\nusage: pptrain export --checkpoint DIR --out model.bin", argv[i]), PP_EUSAGE;
    }
    if (!in || !out) return pp_error("usage: pptrain export --checkpoint DIR --out model.bin"), PP_EUSAGE;
    if (ckpt_resolve(in, dir, sizeof dir, err, sizeof err)) return pp_error("%s", err), PP_ERUNTIME;
    CkptReader *r = ckpt_open(dir, err, sizeof err);
    if (!r) return pp_error("%s", err), PP_ERUNTIME;
    ModelDims d;
    const char *ms = ckpt_extra(r, "model");
    if (!ms || sscanf(ms, "V=%d Vp=%d maxT=%d L=%d NH=%d C=%d tied=%d", &d.V, &d.Vp, &d.maxT, &d.L, &d.NH, &d.C, &d.tied) != 7) {
        ckpt_close(r);
        return pp_error("%s: the manifest has no model entry; not a pptrain checkpoint", dir), PP_ERUNTIME;
    }
    if (!d.tied) {
        ckpt_close(r);
        return pp_error("%s: untied embeddings (model.tie_embeddings: false) cannot be written in llm.c's format", dir), PP_EUSAGE;
    }
    ChunkSpec all = {0, 0, d.L, 1, 1, 0, 0};
    Model m;
    model_init(&m, &d, &all, 1, 1, 1, backend_cpu());
    int rc = PP_OK;
    for (int i = 0; i < m.ntensors && rc == PP_OK; i++) { /* a CPU model: its memory is the host's */
        const ParamTensor *t = &m.tensors[i];
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        rc = ckpt_read(r, t->name, m.params + t->offset, shape, t->ndim, err, sizeof err);
    }
    ckpt_close(r);
    if (rc == PP_OK) rc = model_save_llmc(&m, out, err, sizeof err);
    if (rc == PP_OK) printf("exported %s (%zu parameters) to %s\n", dir, m.nparams, out);
    else pp_error("%s", err);
    model_free(&m);
    return rc;
}

int checkpoint_load(Runtime *rt, const char *path, long *step, char *err, size_t errlen) {
    int rc = load_local(rt, path, step, err, errlen);
    return agree(rt, rc == PP_OK, "loading the checkpoint", err, errlen);
}

int checkpoint_refuse_existing(Checkpointer *c, Runtime *rt, char *err, size_t errlen) {
    char latest[PP_PATH_MAX + 32];
    struct stat st;
    snprintf(latest, sizeof latest, "%s/latest", c->root);
    int found = lstat(latest, &st) == 0;
    if (found)
        pp_errf(err, errlen, PP_EUSAGE, "output.dir '%s' already holds the checkpoints of a run (%s): pass --resume "
                "to continue it, or choose another output.dir (or delete it) to start afresh", rt->cfg->out_dir, latest);
    int rc = agree(rt, !found, "checking output.dir for earlier checkpoints", err, errlen);
    return rc ? PP_EUSAGE : PP_OK;
}
