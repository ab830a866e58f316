/* ckpt_state.c — the run's state to and from the checkpoint store. */
#include "ckpt_state.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "common.h"
#include "hf/hf_dir.h"
#include "model/model_hf.h"

/* [Note: checkpoint names] Parameters are stored under their global names (model.h),
 * optimizer state as "<name>.opt_m" and "<name>.opt_v" (AdamW moments; SGD keeps its
 * momentum in opt_m). The tied wte is held by the first and the last stage's rank with
 * identical values ([Note: tied embeddings]); only the rank of stage 0 stores it, and
 * both load it from there. Data-parallel replicas hold identical copies too ([Note: data
 * parallel] in runtime_dp.c): only replica 0 stores its tensors, the other replicas
 * write a shard with none (with ZeRO-1 each replica stores the state of the tensors it
 * holds, [Note: ZeRO-1] in runtime_dp.c), and every rank loads by name from wherever it
 * is, so a checkpoint loads into any number of replicas, sharded or not, and any split.
 * The manifest holds the model's dimensions ("model") and the printed config
 * ("config"). */

/* [Note: manifest model] The manifest's "model" entry is the model's shape as text:
 * GPT-2's "V=50257 Vp=50304 maxT=1024 L=12 NH=12 C=768 tied=1", as every checkpoint
 * before the llama family had it (an entry without arch= is GPT-2's), and for the others
 * that, then "arch=llama NKV=8 F=8192 eps=1e-05 theta=500000" and the RoPE scaling,
 * "rope=none" or "rope=llama3 factor=32 low=1 high=4 orig=8192" (floats as %.9g: they
 * read back to the same bits). A resume compares the texts, so another arch or any
 * other dimension is refused naming both. */

#define MAX_TENSORS_PER_PARAM 3

static const char *const state_suffix[MAX_TENSORS_PER_PARAM] = {"", ".opt_m", ".opt_v"};

/* The arrays stored for parameter t (device memory): its values, then the optimizer
 * state this run keeps (NULL where it keeps none), in state_suffix order. */
static void state_arrays(const Runtime *rt, const ParamTensor *t,
                         float *out[MAX_TENSORS_PER_PARAM]) {
    const Model *m = &rt->model;
    int i = (int)(t - m->tensors);
    out[0] = m->params + t->offset;
    out[1] = dp_opt_state(rt, i, 0); /* NULL where another ZeRO-1 replica holds it */
    out[2] = dp_opt_state(rt, i, 1);
}

/* The writer's staging copy reads device memory through the backend ([Note: checkpoint
 * snapshot] in backend.h): a device backend's snapshot copies into pinned staging memory
 * on its side stream while the host goes on, and the writer's thread waits for it; else
 * to_host and a wait per block (the CPU backend: a memcpy). */
static void copy_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
    const Backend *be = ctx;
    be->to_host(be, dst, src, bytes);
    be->wait(be);
}
static void snapshot_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    const Backend *be = ctx;
    be->snapshot(be, dst, src, bytes);
}
static void snapshot_finish(void *ctx) {
    const Backend *be = ctx;
    be->snapshot_wait(be);
}
static void *staging_alloc(void *ctx, size_t bytes) {
    const Backend *be = ctx;
    return be->host_alloc(be, bytes);
}
static void staging_release(void *ctx, void *p) {
    const Backend *be = ctx;
    be->host_free(be, p);
}

static void writer_device(CkptWriter *w, const Backend *be) {
    CkptDevice dev = {copy_to_host, NULL, NULL, NULL, (void *)be};
    if (be->snapshot && be->snapshot_wait) {
        dev.copy = snapshot_copy;
        dev.finish = snapshot_finish;
    }
    if (be->host_alloc && be->host_free) {
        dev.alloc = staging_alloc;
        dev.release = staging_release;
    }
    ckpt_writer_set_device(w, &dev);
}

#define MODEL_STRING_MAX 320

static void model_string(const Runtime *rt, char *buf, size_t n) {
    const ModelDims *d = &rt->model.d;
    const ModelRope *r = &d->rope;
    int k = snprintf(buf, n, "V=%d Vp=%d maxT=%d L=%d NH=%d C=%d tied=%d", d->V, d->Vp, d->maxT,
                     d->L, d->NH, d->C, d->tied);
    if (d->arch == &arch_gpt2) return; /* [Note: manifest model] */
    k += snprintf(buf + k, n - k, " arch=%s NKV=%d F=%d eps=%.9g theta=%.9g rope=%s", d->arch->name,
                  d->NKV, d->F, d->eps, r->theta, r->llama3 ? "llama3" : "none");
    if (r->llama3)
        snprintf(buf + k, n - k, " factor=%.9g low=%.9g high=%.9g orig=%d", r->factor,
                 r->low_freq_factor, r->high_freq_factor, r->original_max_seq_len);
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
            if (!src[k] || !dp_counts(rt, i, k == 0 ? DP_PARAMS : DP_STATE)) continue;
            snprintf(names[n], 64, "%s%s", t->name, state_suffix[k]);
            out[n] = (CkptTensor){.name = names[n], .dtype = CKPT_F32, .ndim = t->ndim,
                                  .data = src[k]};
            out[n].shape[0] = t->shape[0];
            out[n].shape[1] = t->shape[1];
            n++;
        }
    }
    return n;
}

void ckpt_state_init(CkptState *c, const Runtime *rt, const char *config_text) {
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
    writer_device(c->writer, rt->model.be);
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

void ckpt_state_free(CkptState *c) {
    ckpt_writer_destroy(c->writer);
    free(c->config_text);
    memset(c, 0, sizeof *c);
}

int ckpt_state_idle(const CkptState *c) { return !ckpt_writer_busy(c->writer); }

/* Sum `ok` (1/0) over the ranks; PP_OK only if every rank is ok. */
static int agree(Runtime *rt, int ok, const char *what, char *err, size_t errlen) {
    double v = ok ? 1.0 : 0.0;
    if (comm_allreduce_sum_f64(rt->comm, &v, 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s: %s", what, comm_error(rt->comm));
    if (v != rt->lay.world && ok)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "%s failed on another rank (see its message)", what);
    return ok ? PP_OK : PP_ERUNTIME;
}

int ckpt_state_save(CkptState *c, Runtime *rt, long step, int wait, char *err, size_t errlen) {
    char dir[PP_PATH_MAX], path[PP_PATH_MAX + 32], model[MODEL_STRING_MAX];
    double t0 = pp_now(); /* the stall: waiting for an earlier save, then the copy */
    int rc = ckpt_state_finish(c, rt, err, errlen);
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
    rt->saves++;
    rt->sum_save_stall_s += rt->save_stall_s;
    if (rt->save_stall_s > rt->max_save_stall_s) rt->max_save_stall_s = rt->save_stall_s;
    ckpt_meta_destroy(meta);
    free(t);
    free(names);
    if (rc) return rc;
    c->pending = step;
    return wait ? ckpt_state_finish(c, rt, err, errlen) : PP_OK;
}

int ckpt_state_finish(CkptState *c, Runtime *rt, char *err, size_t errlen) {
    if (c->pending < 0) return PP_OK;
    char model[MODEL_STRING_MAX], step[32], hash[32], data[DATA_RECORD_MAX];
    int rc = ckpt_writer_wait(c->writer, err, errlen);
    if ((rc = agree(rt, rc == PP_OK, "writing the checkpoint shards", err, errlen))) return rc;
    if (rt->lay.rank == 0) {
        model_string(rt, model, sizeof model);
        snprintf(hash, sizeof hash, "%" PRIu64, config_hash(rt->cfg, 1)); /* as in each shard */
        CkptKV kv[] = {{"model", model}, {"model_hash", hash}, {"optimizer", rt->cfg->optimizer},
                       {"config", c->config_text}, {"data_train", data}};
        int nkv = 4;
        /* [Note: stream records] in data_stream.c; rank 0 reads stage 0's batches */
        if (rt->train.nbatches > 0) {
            data_stream_record(&rt->train, c->pending, data, sizeof data);
            nkv++;
        }
        rc = ckpt_commit(c->root, c->pending, rt->lay.world, kv, nkv, rt->cfg->checkpoint_keep,
                         err, errlen);
    }
    if ((rc = agree(rt, rc == PP_OK, "committing the checkpoint", err, errlen))) return rc;
    snprintf(step, sizeof step, "%07ld", c->pending);
    if (rt->chunk_of[rt->S - 1] >= 0)
        printf("saved checkpoint %s/step_%s (training stalled %.1f ms to hand it over)\n", c->root,
               step, rt->save_stall_s * 1e3);
    c->pending = -1;
    return PP_OK;
}

/* [Note: checkpoint trust] CRCs catch damage, not intent: a manifest or shard edited
 * with its CRCs recomputed passes ckpt_open. So what the run then relies on is checked
 * against what else the checkpoint says: the manifest's step must fit the run's step
 * counter (an int, like train.steps); each shard's own record of step, rank, world size,
 * model and model hash must agree with the manifest (one shard from another run or step
 * is named); export checks the manifest's model dimensions before it allocates anything
 * and then against the shapes and the set of tensors in the shards. */

/* The manifest's step as the run's step (an int), or an error naming the manifest. */
static int manifest_step(const CkptReader *r, const char *dir, long *step, char *err,
                         size_t errlen) {
    long s = ckpt_step(r);
    if (s < 0 || s > INT_MAX)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint manifest %s/manifest: step %ld is "
                       "more than any run can reach (train.steps is at most %d): the manifest "
                       "is corrupted or was edited; use another checkpoint", dir, s, INT_MAX);
    *step = s;
    return PP_OK;
}

/* One shard's u64 metadata `key`, which must equal `want`. */
static int meta_agrees(const CkptReader *r, int s, const char *key, uint64_t want,
                       const char *what, char *err, size_t errlen) {
    uint64_t v;
    if (ckpt_meta_u64(r, s, key, &v) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s has no '%s' entry: it was "
                       "not written by a pptrain run", ckpt_shard_file(r, s), key);
    if (v != want)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s was written %s %llu, but "
                       "its manifest says %llu: the shard belongs to another checkpoint (copied "
                       "in?) or was edited; use another checkpoint", ckpt_shard_file(r, s), what,
                       (unsigned long long)v, (unsigned long long)want);
    return PP_OK;
}

/* Every shard's own record (step, rank, world, model, model hash) against the manifest
 * of dir ([Note: checkpoint trust]). Checkpoints written before the manifest recorded
 * the model hash have their shards' hashes compared with the first shard's. */
static int check_shards(const CkptReader *r, const char *dir, char *err, size_t errlen) {
    const char *model = ckpt_extra(r, "model"), *hash = ckpt_extra(r, "model_hash"), *theirs;
    uint64_t h0 = 0;
    int n = ckpt_nshards(r), rc = PP_OK;
    if (hash) {
        char *end;
        errno = 0;
        h0 = strtoull(hash, &end, 10);
        if (errno || end == hash || *end || *hash == '-')
            return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint manifest %s/manifest: model_hash "
                           "'%.40s' is not a number: the manifest was edited", dir, hash);
    } else if (ckpt_meta_u64(r, 0, "model_hash", &h0) != PP_OK) {
        h0 = 0; /* meta_agrees below names the missing entry */
    }
    if (!model)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint manifest %s/manifest has no model "
                       "entry: not a pptrain run's checkpoint", dir);
    for (int s = 0; s < n && rc == PP_OK; s++) {
        if ((rc = meta_agrees(r, s, "step", (uint64_t)ckpt_step(r), "at step", err, errlen)) ||
            (rc = meta_agrees(r, s, "rank", (uint64_t)s, "by rank", err, errlen)) ||
            (rc = meta_agrees(r, s, "world", (uint64_t)n, "by a run of world size", err, errlen)) ||
            (rc = meta_agrees(r, s, "model_hash", h0, "for a model of config hash", err, errlen)))
            break;
        if (ckpt_meta_str(r, s, "model", &theirs) != PP_OK) theirs = "(none)";
        if (strcmp(theirs, model))
            rc = pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s holds model '%s', but its "
                         "manifest says '%s': the shard belongs to another checkpoint or one of "
                         "them was edited; use another checkpoint", ckpt_shard_file(r, s), theirs,
                         model);
    }
    return rc;
}

/* This rank's part of ckpt_state_load. */
static int load_local(Runtime *rt, const char *path, long *step, char *err, size_t errlen) {
    char dir[PP_PATH_MAX], model[MODEL_STRING_MAX], name[80];
    int rc = ckpt_resolve(path, dir, sizeof dir, err, errlen);
    if (rc) return rc;
    CkptReader *r = ckpt_open(dir, err, errlen);
    if (!r) return PP_ERUNTIME;
    if ((rc = manifest_step(r, dir, step, err, errlen)) ||
        (rc = check_shards(r, dir, err, errlen))) {
        ckpt_close(r);
        return rc;
    }
    model_string(rt, model, sizeof model);
    const char *theirs = ckpt_extra(r, "model");
    if (!theirs || strcmp(theirs, model) != 0) { /* theirs lives in r: format first */
        pp_errf(err, errlen, PP_ERUNTIME,
                "%s holds another model (%s) than this config (%s): resume with the model config "
                "it was written with",
                dir, theirs ? theirs : "no model entry", model);
        ckpt_close(r);
        return PP_ERUNTIME;
    }
    const char *opt = ckpt_extra(r, "optimizer");
    if (!opt || strcmp(opt, rt->cfg->optimizer) != 0) { /* SGD's momentum is not Adam's m */
        pp_errf(err, errlen, PP_ERUNTIME,
                "%s was written with train.optimizer.name %s, this run uses %s: resume with the "
                "same optimizer",
                dir, opt ? opt : "(unknown)", rt->cfg->optimizer);
        ckpt_close(r);
        return PP_ERUNTIME;
    }
    if (rt->lay.rank == 0 && rt->train.nbatches > 0) { /* [Note: stream records] */
        char why[PP_ERR_MAX];
        DataRecordMatch match = data_stream_compare(&rt->train, *step, ckpt_extra(r, "data_train"),
                                                    why, sizeof why);
        if (match == DATA_RECORD_MOVED) pp_warn("%s", why);
        else printf("%s\n", why);
    }
    const Model *m = &rt->model;
    /* each array is read here, then copied to the device */
    float *host = pp_malloc(model_largest_tensor(m) * sizeof(float));
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
                             k ? ": it was written with another optimizer (train.optimizer.name)"
                               : "");
                break;
            }
            rc = ckpt_read(r, name, host, shape, t->ndim, err, errlen);
            if (rc == PP_OK) m->be->to_device(m->be, dst[k], host, t->numel * sizeof(float));
            m->be->wait(m->be);
        }
    }
    free(host);
    ckpt_close(r);
    return rc;
}

/* ---- export ------------------------------------------------------------------- */

/* The fields of the manifest's model entry ([Note: manifest model]), in order: an int
 * (decimal digits that fit one), a number as %.9g writes it (finite, no sign), the arch
 * (of the llama family: GPT-2's entry has none) or the RoPE scaling's name. */
typedef struct {
    const char *key;
    char kind; /* 'i' int, 'f' float, 'a' arch, 'r' rope */
    size_t off;
} ModelField;
#define MF(k, t, m) {k, t, offsetof(ModelDims, m)}
static const ModelField k_model_fields[] = {
    MF("V", 'i', V),        MF("Vp", 'i', Vp),       MF("maxT", 'i', maxT),
    MF("L", 'i', L),        MF("NH", 'i', NH),       MF("C", 'i', C),
    MF("tied", 'i', tied),  MF("arch", 'a', arch),   MF("NKV", 'i', NKV),
    MF("F", 'i', F),        MF("eps", 'f', eps),     MF("theta", 'f', rope.theta),
    MF("rope", 'r', rope),  MF("factor", 'f', rope.factor),
    MF("low", 'f', rope.low_freq_factor),            MF("high", 'f', rope.high_freq_factor),
    MF("orig", 'i', rope.original_max_seq_len),
};
#undef MF
#define N_MODEL_FIELDS (int)(sizeof k_model_fields / sizeof k_model_fields[0])

/* Field f of d from its value text v. 0 on success. */
static int model_field(ModelDims *d, const ModelField *f, const char *v) {
    void *dst = (char *)d + f->off;
    char *end;
    size_t nd = strspn(v, "0123456789");
    switch (f->kind) {
    case 'i':
        if (nd == 0 || nd > 10 || v[nd] || strtoll(v, NULL, 10) > INT_MAX) return -1;
        *(int *)dst = (int)strtoll(v, NULL, 10);
        return 0;
    case 'f':
        if (nd == 0) return -1; /* no sign, inf or nan */
        *(float *)dst = strtof(v, &end);
        return *end || !isfinite(*(float *)dst) ? -1 : 0;
    case 'a':
        d->arch = arch_find(v);
        return !d->arch || d->arch == &arch_gpt2 ? -1 : 0;
    default:
        d->rope.llama3 = !strcmp(v, "llama3");
        return strcmp(v, "none") && !d->rope.llama3 ? -1 : 0;
    }
}

/* Parse model_string's entry ([Note: manifest model]) strictly: every field, in order,
 * one space apart; GPT-2's first 7, or the llama family's 13 (rope=none) or all 17
 * (rope=llama3). 0 on success. */
static int parse_model(const char *s, ModelDims *d) {
    char v[32];
    memset(d, 0, sizeof *d);
    d->arch = &arch_gpt2;
    for (int i = 0; i < N_MODEL_FIELDS; i++) {
        size_t k = strlen(k_model_fields[i].key), len;
        if (strncmp(s, k_model_fields[i].key, k) || s[k] != '=') return -1;
        s += k + 1;
        len = strcspn(s, " ");
        if (len == 0 || len >= sizeof v) return -1;
        memcpy(v, s, len);
        v[len] = '\0';
        if (model_field(d, &k_model_fields[i], v)) return -1;
        s += len;
        if (!*s) return i == 6 || (i == 12 && !d->rope.llama3) || i == 16 ? 0 : -1;
        if (*s++ != ' ') return -1;
    }
    return -1;
}

/* Whether a tensor name is optimizer state ([Note: checkpoint names]). */
static int is_state(const char *name) {
    size_t n = strlen(name);
    for (int k = 1; k < MAX_TENSORS_PER_PARAM; k++) {
        size_t sl = strlen(state_suffix[k]);
        if (n > sl && !strcmp(name + n - sl, state_suffix[k])) return 1;
    }
    return 0;
}

/* The manifest's model dimensions, parsed and checked (model_dims_check) before anything
 * is sized from them; for llm.c's format (llmc) also what it cannot hold, refused before
 * a tensor is read. */
static int export_dims(const CkptReader *r, const char *dir, int llmc, ModelDims *d, char *err,
                       size_t errlen) {
    const char *ms = ckpt_extra(r, "model");
    char why[256];
    if (!ms) return pp_errf(err, errlen, PP_ERUNTIME, "%s: the manifest has no model entry; not a "
                            "pptrain checkpoint", dir);
    if (parse_model(ms, d) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s/manifest: model entry '%.200s' is not 'V=.. "
                       "Vp=.. maxT=.. L=.. NH=.. C=.. tied=..' (and for the llama family 'arch=.. "
                       "NKV=.. F=.. eps=.. theta=.. rope=..'): the manifest was edited", dir, ms);
    if (model_dims_check(d, why, sizeof why) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s/manifest: model entry '%s' describes no "
                       "buildable model (%s): the manifest was edited", dir, ms, why);
    if (llmc && !d->arch->export_llmc)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: a model.arch %s checkpoint: llm.c's format "
                       "holds GPT-2 only: export --format hf", dir, d->arch->name);
    if (llmc && !d->tied)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: untied embeddings (model.tie_embeddings: "
                       "false) cannot be written in llm.c's format: export --format hf", dir);
    return PP_OK;
}

/* The model of dims d against the shards: every parameter is stored with its shape, and
 * no shard stores a parameter the model lacks (L=3 claimed of 4 layers is caught here,
 * also when the shards' own records were edited to agree). */
static int export_match(const CkptReader *r, const char *dir, const ModelDims *d, char *err,
                        size_t errlen) {
    const char *ms = ckpt_extra(r, "model");
    int nt, rc = PP_OK;
    ParamTensor *t = model_table(d, &nt);
    for (int i = 0; i < nt && rc == PP_OK; i++) {
        CkptTensorInfo info;
        int same = ckpt_find(r, t[i].name, &info) == 0 && info.ndim == t[i].ndim;
        for (int k = 0; same && k < t[i].ndim; k++) same = info.shape[k] == t[i].shape[k];
        if (!same)
            rc = pp_errf(err, errlen, PP_ERUNTIME, "%s: its manifest's model (%s) has tensor '%s' "
                         "of shape [%d, %d], which no shard holds with that shape: the manifest "
                         "does not match its shards (edited?)", dir, ms, t[i].name, t[i].shape[0],
                         t[i].shape[1]);
    }
    for (int i = 0; i < ckpt_ntensors(r) && rc == PP_OK; i++) {
        CkptTensorInfo info;
        ckpt_tensor_at(r, i, &info);
        int known = is_state(info.name);
        for (int k = 0; k < nt && !known; k++) known = !strcmp(t[k].name, info.name);
        if (!known)
            rc = pp_errf(err, errlen, PP_ERUNTIME, "%s: shard %s holds tensor '%s', which its "
                         "manifest's model (%s) does not have: the manifest does not match its "
                         "shards (edited?)", dir, ckpt_shard_file(r, info.shard), info.name, ms);
    }
    free(t);
    return rc;
}

static const char *const k_export_usage =
    "usage: pptrain export --checkpoint DIR --out model.bin [--format llmc]\n"
    "       pptrain export --checkpoint DIR --format hf --out DIR2 [--dtype fp32|bf16] "
    "[--max-shard-size 5GB]";

typedef struct {
    const char *in, *out;
    int hf;                 /* --format hf (else llmc) */
    SafetensorsDtype dtype; /* --dtype */
    uint64_t max_shard;     /* --max-shard-size; 0: 5GB */
} ExportArgs;

/* The export's flags; PP_EUSAGE naming the one that is wrong (nothing is read yet). */
static int export_args(int argc, char **argv, ExportArgs *a, char *err, size_t errlen) {
    const char *format = "llmc", *dtype = NULL, *shard = NULL;
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char **dst = !strcmp(argv[i], "--checkpoint")       ? &a->in
                           : !strcmp(argv[i], "--out")            ? &a->out
                           : !strcmp(argv[i], "--format")         ? &format
                           : !strcmp(argv[i], "--dtype")          ? &dtype
                           : !strcmp(argv[i], "--max-shard-size") ? &shard
                                                                  : NULL;
        if (!dst) return pp_errf(err, errlen, PP_EUSAGE, "export: unknown argument '%s'", argv[i]);
        if (i + 1 >= argc)
            return pp_errf(err, errlen, PP_EUSAGE, "export: %s needs a value", argv[i]);
        *dst = argv[++i];
    }
    if (!a->in || !a->out)
        return pp_errf(err, errlen, PP_EUSAGE, "export: --checkpoint and --out are required");
    if (strcmp(format, "llmc") && strcmp(format, "hf"))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "export: --format %s: expected llmc (llm.c's fp32 GPT-2 file) or hf (a "
                       "Hugging Face model directory)",
                       format);
    a->hf = !strcmp(format, "hf");
    if (!a->hf && (dtype || shard))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "export: %s is for --format hf (llm.c's format is one fp32 file)",
                       dtype ? "--dtype" : "--max-shard-size");
    if (dtype && strcmp(dtype, "fp32") && strcmp(dtype, "bf16"))
        return pp_errf(err, errlen, PP_EUSAGE, "export: --dtype %s: expected fp32 or bf16", dtype);
    a->dtype = dtype && !strcmp(dtype, "bf16") ? SAFETENSORS_BF16 : SAFETENSORS_F32;
    char why[PP_ERR_MAX];
    if (shard && hf_dir_parse_size(shard, &a->max_shard, why, sizeof why) != PP_OK)
        return pp_errf(err, errlen, PP_EUSAGE, "export: --max-shard-size: %s", why);
    return PP_OK;
}

/* The checkpoint dir's parameters into a model of every stage on be, *m (model_free'd by
 * the caller when PP_OK), and its step; llmc: refuse up front what llm.c's format cannot
 * hold. A device backend's tensors go through a host buffer. */
/* The model.bos_token_id and eos_token_id of the config in r's manifest into bos and eos
 * [PP_IDS_MAX] (each may be NULL): "" when it names none, or was written before the keys
 * existed, or cannot be read (an id is a nicety of the export and of sample, not a reason
 * to refuse the weights). */
static void manifest_ids(const CkptReader *r, char *bos, char *eos) {
    const char *text = ckpt_extra(r, "config");
    Config c;
    char err[PP_ERR_MAX];
    config_defaults(&c);
    if (!text || config_load_text(&c, text, "the manifest's config", err, sizeof err) != PP_OK)
        c.bos_token_id[0] = c.eos_token_id[0] = '\0';
    if (bos) snprintf(bos, PP_IDS_MAX, "%s", c.bos_token_id);
    if (eos) snprintf(eos, PP_IDS_MAX, "%s", c.eos_token_id);
}

/* The checkpoint dir into *m (export's checks first; see ckpt_state_load_model), and its
 * run's token ids into bos and eos (manifest_ids). */
static int export_load(const char *dir, int llmc, const Backend *be, Model *m, long *step,
                       char *bos, char *eos, char *err, size_t errlen) {
    CkptReader *r = ckpt_open(dir, err, errlen);
    if (!r) return PP_ERUNTIME;
    manifest_ids(r, bos, eos);
    ModelDims d;
    int rc = manifest_step(r, dir, step, err, errlen);
    if (rc == PP_OK) rc = export_dims(r, dir, llmc, &d, err, errlen);
    if (rc == PP_OK) rc = check_shards(r, dir, err, errlen);
    if (rc == PP_OK) rc = export_match(r, dir, &d, err, errlen);
    if (rc != PP_OK) {
        ckpt_close(r);
        return rc;
    }
    ChunkSpec all = {0, 0, d.L, 1, 1, 0, 0};
    model_init_forward(m, &d, &all, 1, 1, 1, be);
    float *host = be->device_memory ? pp_malloc(model_largest_tensor(m) * sizeof(float)) : NULL;
    for (int i = 0; i < m->ntensors && rc == PP_OK; i++) {
        const ParamTensor *t = &m->tensors[i];
        int64_t shape[2] = {t->shape[0], t->shape[1]};
        rc = ckpt_read(r, t->name, host ? host : m->params + t->offset, shape, t->ndim, err,
                       errlen);
        if (rc == PP_OK && host) {
            be->to_device(be, m->params + t->offset, host, t->numel * sizeof(float));
            be->wait(be); /* host is refilled for the next tensor */
        }
    }
    free(host);
    ckpt_close(r);
    if (rc != PP_OK) model_free(m);
    return rc;
}

int ckpt_state_load_model(const char *path, const Backend *be, Model *m, long *step, char *eos,
                          char *err, size_t errlen) {
    char dir[PP_PATH_MAX];
    if (ckpt_resolve(path, dir, sizeof dir, err, errlen)) return PP_EUSAGE;
    return export_load(dir, 0, be, m, step, NULL, eos, err, errlen);
}

int ckpt_state_export_main(int argc, char **argv) {
    char err[PP_ERR_MAX], dir[PP_PATH_MAX];
    ExportArgs a;
    int rc = export_args(argc, argv, &a, err, sizeof err);
    if (rc != PP_OK) return pp_error("%s\n%s", err, k_export_usage), rc;
    if (ckpt_resolve(a.in, dir, sizeof dir, err, sizeof err))
        return pp_error("%s", err), PP_ERUNTIME;
    Model m;
    long step;
    char bos[PP_IDS_MAX], eos[PP_IDS_MAX];
    /* a CPU model: its memory is the host's */
    if ((rc = export_load(dir, !a.hf, backend_cpu(), &m, &step, bos, eos, err, sizeof err)))
        return pp_error("%s", err), rc;
    if (a.hf) rc = model_save_hf(&m, a.out, a.dtype, a.max_shard, bos, eos, err, sizeof err);
    else rc = model_save_llmc(&m, a.out, err, sizeof err);
    const char *what = a.dtype == SAFETENSORS_BF16 ? " (Hugging Face, bf16)" : " (Hugging Face)";
    if (rc == PP_OK)
        printf("exported %s (%zu parameters) to %s%s\n", dir, m.nparams, a.out, a.hf ? what : "");
    else pp_error("%s", err);
    model_free(&m);
    return rc;
}

int ckpt_state_load(Runtime *rt, const char *path, long *step, char *err, size_t errlen) {
    int rc = load_local(rt, path, step, err, errlen);
    return agree(rt, rc == PP_OK, "loading the checkpoint", err, errlen);
}

/* A run that a launcher restarted (pprun's or torchrun's --max-restarts, a requeued SLURM
 * job) and that was not told to resume stops on its own checkpoints at every restart: the
 * message starts by saying which launcher did it and what to add (before the paths, which
 * may fill the rest). The innermost launcher is named: pprun or torchrun inside a job. */
static void restart_hint(char *err, size_t errlen) {
    static const char *const by[][2] = {
        {"PPRUN_RESTART_COUNT", "pprun restarted these ranks"},
        {"TORCHELASTIC_RESTART_COUNT", "torchrun restarted this worker group"},
        {"SLURM_RESTART_COUNT", "SLURM requeued this job"},
    };
    for (size_t i = 0; i < sizeof by / sizeof by[0]; i++) {
        const char *v = getenv(by[i][0]);
        if (v && atoi(v) > 0) {
            char rest[PP_ERR_MAX];
            snprintf(rest, sizeof rest, "%s", err);
            snprintf(err, errlen,
                     "%s (%s=%s) without --resume-if-present: put it on the "
                     "command line so that each restart resumes; %s",
                     by[i][1], by[i][0], v, rest);
            return;
        }
    }
}

/* Whether ROOT holds a run's checkpoints (`latest`, or any committed step directory:
 * a copy that dropped the symlink still holds them); the message says what to do. */
static int holds_checkpoints(const CkptState *c, const Runtime *rt, char *err, size_t errlen) {
    char latest[PP_PATH_MAX + 32], dir[PP_PATH_MAX];
    struct stat st;
    long *steps;
    int n = ckpt_list_steps(c->root, &steps), found = 1;
    snprintf(latest, sizeof latest, "%s/latest", c->root);
    if (n < 0)
        pp_errf(err, errlen, PP_EUSAGE, "cannot look into '%s' for the checkpoints of an earlier "
                "run: %s: fix it or choose another output.dir", c->root, strerror(errno));
    else if (lstat(latest, &st) == 0)
        pp_errf(err, errlen, PP_EUSAGE, "output.dir '%s' already holds the checkpoints of a run "
                "(%s): pass --resume to continue it, or choose another output.dir (or delete "
                "it) to start afresh", rt->cfg->out_dir, latest);
    else if (n > 0 && ckpt_dir_path(c->root, steps[0], 0, dir, sizeof dir) == PP_OK)
        pp_errf(err, errlen, PP_EUSAGE, "output.dir '%s' already holds the checkpoints of a run "
                "(%d step directories up to %s, but no `latest` link: copied without "
                "symlinks?): pass --resume %s to continue it, or choose another output.dir (or "
                "delete it) to start afresh", rt->cfg->out_dir, n, dir, dir);
    else
        found = 0;
    if (found && n >= 0) restart_hint(err, errlen);
    free(steps);
    return found;
}

int ckpt_state_refuse_existing(CkptState *c, Runtime *rt, char *err, size_t errlen) {
    int found = holds_checkpoints(c, rt, err, errlen);
    double none = found ? 0.0 : 1.0;
    /* a rank lost meanwhile is a runtime failure (1), not the directory's fault (2) */
    if (comm_allreduce_sum_f64(rt->comm, &none, 1) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "checking output.dir for earlier checkpoints: %s",
                       comm_error(rt->comm));
    if (!found && none != rt->lay.world)
        return pp_errf(err, errlen, PP_EUSAGE, "checking output.dir for earlier checkpoints "
                       "failed on another rank (see its message)");
    return found ? PP_EUSAGE : PP_OK;
}
