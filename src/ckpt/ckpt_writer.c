/* ckpt_writer.c — the asynchronous checkpoint writer: the caller's tensors are copied
 * into reused host staging buffers, then one background thread compresses and writes
 * the shard (ckpt_write_shard) while training goes on. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_internal.h"

#define COPY_BLOCK (16u << 20) /* bytes per parallel memcpy job */
#define STAGE_ALIGN 64         /* each tensor's copy starts on a cache line */

struct CkptWriter {
    CkptOptions opt;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* broadcast on every change of busy or quit */
    int busy;               /* a save is submitted and not finished */
    int quit;
    /* The save in progress; written by submit only while !busy. */
    char path[PP_PATH_MAX];
    CkptMeta *meta;
    CkptTensor *tensors;    /* [ntensors], data pointing into stage */
    char (*names)[CKPT_NAME_MAX];
    int ntensors, cap_tensors;
    uint8_t *stage;         /* [stage_cap] reused between saves, from dev.alloc if set */
    size_t stage_cap;
    CkptDevice dev;         /* the staging copy from the caller's tensors (copy NULL: memcpy) */
    /* The last finished save. */
    int status, collected;  /* collected: returned by ckpt_writer_wait */
    char err[PP_ERR_MAX];
};

static void *writer_main(void *arg) {
    CkptWriter *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy) break; /* quit, nothing pending */
        pthread_mutex_unlock(&w->mu);
        if (w->dev.finish) w->dev.finish(w->dev.ctx); /* the device's copies have landed */
        char err[PP_ERR_MAX] = "";
        int rc = ckpt_write_shard(w->path, w->meta, w->tensors, w->ntensors, &w->opt, err,
                                  sizeof err);
        pthread_mutex_lock(&w->mu);
        w->status = rc;
        w->collected = 0;
        memcpy(w->err, err, sizeof err);
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

CkptWriter *ckpt_writer_create(const CkptOptions *opt) {
    CkptWriter *w = pp_calloc(1, sizeof *w);
    if (opt) w->opt = *opt;
    else ckpt_options_default(&w->opt);
    w->meta = ckpt_meta_create();
    w->collected = 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
        PP_DIE("cannot start the checkpoint writer thread");
    return w;
}

static void wait_idle(CkptWriter *w);

/* The staging buffer at least `total` bytes (its contents are dropped when it grows). */
static void stage_grow(CkptWriter *w, size_t total) {
    if (total <= w->stage_cap) return;
    if (w->dev.release) w->dev.release(w->dev.ctx, w->stage);
    else free(w->stage);
    w->stage = w->dev.alloc ? w->dev.alloc(w->dev.ctx, total) : pp_malloc(total);
    w->stage_cap = total;
    memset(w->stage, 0, total); /* fault the pages in now, not during a later save */
}

void ckpt_writer_reserve(CkptWriter *w, const CkptTensor *t, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += ((size_t)ckpt_numel(t[i].ndim, t[i].shape) * 4 + STAGE_ALIGN - 1) / STAGE_ALIGN *
                 STAGE_ALIGN;
    pthread_mutex_lock(&w->mu);
    wait_idle(w);
    stage_grow(w, total);
    pthread_mutex_unlock(&w->mu);
}

/* Wait until no save is in progress; called with w->mu held. */
static void wait_idle(CkptWriter *w) {
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
}

typedef struct { /* one piece of the staging copy */
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
    const CkptWriter *w;
} CopyJob;

static void copy_block(void *ctx, int j, int tid) {
    const CopyJob *c = (const CopyJob *)ctx + j;
    if (c->w->dev.copy) c->w->dev.copy(c->w->dev.ctx, c->dst, c->src, c->len);
    else memcpy(c->dst, c->src, c->len);
}

void ckpt_writer_set_device(CkptWriter *w, const CkptDevice *dev) {
    pthread_mutex_lock(&w->mu);
    wait_idle(w);
    /* the staging memory is the old hooks' */
    if (w->dev.release) w->dev.release(w->dev.ctx, w->stage);
    else free(w->stage);
    w->stage = NULL;
    w->stage_cap = 0;
    if (dev) w->dev = *dev;
    else memset(&w->dev, 0, sizeof w->dev);
    pthread_mutex_unlock(&w->mu);
}

/* Lay the tensors out in the staging buffer (grown if needed) and copy their data in
 * blocks on opt.threads threads. */
static void stage_tensors(CkptWriter *w, const CkptTensor *t, int n, int threads) {
    size_t total = 0, njobs = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)ckpt_numel(t[i].ndim, t[i].shape) * 4;
        total += (bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
        njobs += (bytes + COPY_BLOCK - 1) / COPY_BLOCK;
    }
    stage_grow(w, total);
    if (n > w->cap_tensors) {
        free(w->tensors);
        free(w->names);
        w->tensors = pp_malloc((size_t)n * sizeof *w->tensors);
        w->names = pp_malloc((size_t)n * sizeof *w->names);
        w->cap_tensors = n;
    }
    CopyJob *jobs = pp_malloc(njobs * sizeof *jobs + 1);
    size_t at = 0, k = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)ckpt_numel(t[i].ndim, t[i].shape) * 4;
        w->tensors[i] = t[i];
        snprintf(w->names[i], sizeof w->names[i], "%s", t[i].name);
        w->tensors[i].name = w->names[i];
        w->tensors[i].data = w->stage + at;
        for (size_t off = 0; off < bytes; off += COPY_BLOCK)
            jobs[k++] = (CopyJob){w->stage + at + off, (const uint8_t *)t[i].data + off,
                                  bytes - off < COPY_BLOCK ? bytes - off : COPY_BLOCK, w};
        at += (bytes + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
    }
    /* an asynchronous copy (dev.finish set) is only issued here, in order, by this thread */
    ckpt_parallel_for(w->dev.finish ? 1 : threads, (int)njobs, copy_block, jobs);
    free(jobs);
    w->ntensors = n;
}

int ckpt_writer_submit(CkptWriter *w, const char *path, const CkptMeta *meta,
                       const CkptTensor *tensors, int ntensors, char *err, size_t errlen) {
    CkptOptions o;
    int rc = ckpt_options_resolve(&w->opt, &o, err, errlen);
    if (rc == PP_OK) rc = ckpt_check_tensors(tensors, ntensors, err, errlen);
    if (rc == PP_OK && (!path || strlen(path) >= PP_PATH_MAX - 8))
        rc = pp_errf(err, errlen, PP_EUSAGE, "checkpoint: no shard path, or one too long");
    if (rc != PP_OK) return rc;
    pthread_mutex_lock(&w->mu);
    wait_idle(w);
    if (!w->collected && w->status != PP_OK) {
        rc = pp_errf(err, errlen, w->status, "%s", w->err);
        w->collected = 1;
    }
    pthread_mutex_unlock(&w->mu);
    if (rc != PP_OK) return rc;
    /* The thread is idle and only looks at the job once busy is set. */
    snprintf(w->path, sizeof w->path, "%s", path);
    ckpt_meta_copy(w->meta, meta);
    stage_tensors(w, tensors, ntensors, o.threads);
    pthread_mutex_lock(&w->mu);
    w->busy = 1;
    w->status = PP_OK;
    w->collected = 0;
    w->err[0] = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return PP_OK;
}

void ckpt_writer_set_threads(CkptWriter *w, int threads) {
    pthread_mutex_lock(&w->mu);
    wait_idle(w); /* the running save keeps the options it started with */
    w->opt.threads = threads;
    pthread_mutex_unlock(&w->mu);
}

int ckpt_writer_wait(CkptWriter *w, char *err, size_t errlen) {
    pthread_mutex_lock(&w->mu);
    wait_idle(w);
    int rc = w->status;
    if (err && errlen) snprintf(err, errlen, "%s", w->err);
    w->collected = 1;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ckpt_writer_busy(CkptWriter *w) {
    pthread_mutex_lock(&w->mu);
    int busy = w->busy;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

void ckpt_writer_destroy(CkptWriter *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    wait_idle(w);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    if (!w->collected && w->status != PP_OK)
        pp_error("checkpoint: the last asynchronous save failed: %s", w->err);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    ckpt_meta_destroy(w->meta);
    free(w->tensors);
    free(w->names);
    if (w->dev.release) w->dev.release(w->dev.ctx, w->stage);
    else free(w->stage);
    free(w);
}
