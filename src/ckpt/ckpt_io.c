/* ckpt_io.c — the shard file's byte format both ways (header, metadata table, chunked
 * and deflated tensor data, index, trailer: docs/checkpoint-format.md), the chunk codec
 * and its threads, and the file helpers of the checkpoint module. */
#define _GNU_SOURCE
#include "ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint tensor data is stored little-endian: add byte swapping for this host"
#endif

static const char SHARD_MAGIC[8] = {'P', 'P', 'C', 'K', 'S', 'H', 'R', 'D'};
static const char TRAILER_MAGIC[8] = {'P', 'P', 'C', 'K', 'T', 'A', 'I', 'L'};
#define MAX_NUMEL ((int64_t)1 << 58) /* raw bytes stay below 2^60 */

/* ---- little-endian fields and a growable byte buffer ---------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

/* Append n zeroed bytes to b and return them. */
static uint8_t *buf_add(Buf *b, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        PP_CHECK(b->p != NULL);
        b->cap = cap;
    }
    uint8_t *q = b->p + b->len;
    memset(q, 0, n);
    b->len += n;
    return q;
}

/* "checkpoint shard PATH: <message>" into err; returns PP_ERUNTIME. */
static int shard_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int shard_err(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    char msg[PP_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s: %s", path, msg);
}

/* ---- names and sizes ------------------------------------------------------------------ */

int ckpt_name_ok(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= CKPT_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~') return 0;
    return 1;
}

int64_t ckpt_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        if (shape[d] != 0 && n > MAX_NUMEL / shape[d]) return -1;
        n *= shape[d];
    }
    return n;
}

/* ---- metadata table --------------------------------------------------------------------- */

CkptMeta *ckpt_meta_create(void) { return pp_calloc(1, sizeof(CkptMeta)); }

void ckpt_meta_clear(CkptMeta *m) {
    for (int i = 0; i < m->n; i++) free(m->e[i].val);
    m->n = 0;
}

void ckpt_meta_destroy(CkptMeta *m) {
    if (!m) return;
    ckpt_meta_clear(m);
    free(m->e);
    free(m);
}

const CkptMetaEntry *ckpt_meta_find(const CkptMeta *m, const char *key) {
    for (int i = 0; m && i < m->n; i++)
        if (strcmp(m->e[i].key, key) == 0) return &m->e[i];
    return NULL;
}

/* Set key to a copy of p[0..n) with type `type`, replacing an existing entry. */
static int meta_set(CkptMeta *m, int type, const char *key, const void *p, size_t n) {
    if (!ckpt_name_ok(key) || n > CKPT_MAX_VALUE) return PP_EUSAGE;
    CkptMetaEntry *e = (CkptMetaEntry *)ckpt_meta_find(m, key);
    if (!e) {
        if (m->n == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 16;
            m->e = realloc(m->e, (size_t)m->cap * sizeof *m->e);
            PP_CHECK(m->e != NULL);
        }
        e = &m->e[m->n++];
        snprintf(e->key, sizeof e->key, "%s", key);
    } else {
        free(e->val);
    }
    e->type = type;
    e->len = (uint32_t)n;
    e->val = pp_malloc(n + 1);
    if (n) memcpy(e->val, p, n);
    e->val[n] = 0;
    return PP_OK;
}

int ckpt_meta_set_u64(CkptMeta *m, const char *key, uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    return meta_set(m, CKPT_META_U64, key, b, 8);
}

int ckpt_meta_set_f64(CkptMeta *m, const char *key, double v) {
    uint64_t bits;
    uint8_t b[8];
    memcpy(&bits, &v, 8);
    put_u64(b, bits);
    return meta_set(m, CKPT_META_F64, key, b, 8);
}

int ckpt_meta_set_str(CkptMeta *m, const char *key, const char *s) {
    return meta_set(m, CKPT_META_STR, key, s, s ? strlen(s) : 0);
}

int ckpt_meta_set_bytes(CkptMeta *m, const char *key, const void *p, size_t n) {
    return meta_set(m, CKPT_META_BYTES, key, p, n);
}

void ckpt_meta_copy(CkptMeta *dst, const CkptMeta *src) {
    ckpt_meta_clear(dst);
    for (int i = 0; src && i < src->n; i++)
        meta_set(dst, src->e[i].type, src->e[i].key, src->e[i].val, src->e[i].len);
}

/* Entry: u8 type, u8 key length, u16 zero, u32 value length, key, value. */
static void meta_encode(const CkptMeta *m, Buf *b) {
    for (int i = 0; m && i < m->n; i++) {
        const CkptMetaEntry *e = &m->e[i];
        size_t klen = strlen(e->key);
        uint8_t *p = buf_add(b, 8 + klen + e->len);
        p[0] = (uint8_t)e->type;
        p[1] = (uint8_t)klen;
        put_u32(p + 4, e->len);
        memcpy(p + 8, e->key, klen);
        if (e->len) memcpy(p + 8 + klen, e->val, e->len);
    }
}

/* Parse n entries from p[0..len) into m; NULL or the reason it is malformed. */
static const char *meta_decode(CkptMeta *m, const uint8_t *p, uint64_t len, uint32_t n) {
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (len - at < 8) return "entry runs past the table";
        int type = p[at], klen = p[at + 1];
        uint32_t vlen = get_u32(p + at + 4);
        char key[CKPT_NAME_MAX] = {0};
        if (type < CKPT_META_U64 || type > CKPT_META_BYTES) return "unknown value type";
        if ((type == CKPT_META_U64 || type == CKPT_META_F64) && vlen != 8)
            return "number value is not 8 bytes";
        if (klen == 0 || klen >= CKPT_NAME_MAX || p[at + 2] || p[at + 3] ||
            vlen > CKPT_MAX_VALUE || len - at - 8 < (uint64_t)klen + vlen)
            return "bad key or value length";
        memcpy(key, p + at + 8, (size_t)klen);
        if (!ckpt_name_ok(key) || ckpt_meta_find(m, key)) return "bad or repeated key";
        meta_set(m, type, key, p + at + 8 + klen, vlen);
        at += 8 + (uint64_t)klen + vlen;
    }
    return at == len ? NULL : "table longer than its entries";
}

/* ---- byte shuffle: the 4 bytes of each element grouped by significance ---------------- */

/* out = [byte 0 of every element][byte 1 ...][byte 2 ...][byte 3 ...][n % 4 tail bytes] */
static void shuffle4(uint8_t *out, const uint8_t *in, size_t n) {
    size_t ne = n / 4;
    for (size_t b = 0; b < 4; b++) {
        uint8_t *o = out + b * ne;
        for (size_t i = 0; i < ne; i++) o[i] = in[4 * i + b];
    }
    memcpy(out + 4 * ne, in + 4 * ne, n - 4 * ne);
}

static void unshuffle4(uint8_t *out, const uint8_t *in, size_t n) {
    size_t ne = n / 4;
    for (size_t b = 0; b < 4; b++) {
        const uint8_t *s = in + b * ne;
        for (size_t i = 0; i < ne; i++) out[4 * i + b] = s[i];
    }
    memcpy(out + 4 * ne, in + 4 * ne, n - 4 * ne);
}

/* ---- writing: chunks encoded on worker threads, written in order ----------------------- */

typedef struct { /* one chunk to encode: raw bytes in the caller's (or staging) memory */
    const uint8_t *src;
    uint32_t raw_len;
    int filter, codec;
} ChunkJob;

typedef struct { /* an encoded chunk waiting to be written */
    uint8_t *buf;
    size_t cap;
    const uint8_t *out; /* buf, or the job's src when stored as is */
    uint32_t out_len, raw_crc, comp_crc;
    int zerr, done;
} Slot;

typedef struct {
    const ChunkJob *jobs;
    const CkptOptions *opt; /* level and strategy */
    int njobs, nslots;
    Slot *slots; /* chunk k is encoded into slots[k % nslots] */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int next_claim, next_write, stop;
} Pipe;

typedef struct {
    Pipe *pipe;
    uint8_t *scratch; /* chunk_bytes, for the shuffled copy */
    pthread_t thread;
} Worker;

/* One complete zlib stream (RFC 1950) of in[0..n) into out[0..*len); Z_OK or an error.
 * With CKPT_DEFLATE the bytes are those of compress2 at that level. */
static int deflate_chunk(uint8_t *out, uLongf *len, const uint8_t *in, uint32_t n,
                         const CkptOptions *opt) {
    z_stream z = {0};
    int strategy = opt->strategy == CKPT_RLE ? Z_RLE : Z_DEFAULT_STRATEGY;
    int rc = deflateInit2(&z, opt->level, Z_DEFLATED, 15, 8, strategy);
    if (rc != Z_OK) return rc;
    z.next_in = (Bytef *)in;
    z.avail_in = n;
    z.next_out = out;
    z.avail_out = (uInt)*len;
    rc = deflate(&z, Z_FINISH);
    *len = z.total_out;
    deflateEnd(&z);
    return rc == Z_STREAM_END ? Z_OK : Z_BUF_ERROR;
}

static void encode_chunk(const ChunkJob *j, const CkptOptions *opt, Slot *s,
                         uint8_t *scratch) {
    s->raw_crc = (uint32_t)crc32(0, j->src, j->raw_len);
    s->zerr = Z_OK;
    if (j->codec == CKPT_CODEC_STORED) { /* filter is NONE then (see ckpt_shard_write) */
        s->out = j->src;
        s->out_len = j->raw_len;
        s->comp_crc = s->raw_crc;
        return;
    }
    const uint8_t *in = j->src;
    if (j->filter == CKPT_FILTER_SHUFFLE4) {
        shuffle4(scratch, j->src, j->raw_len);
        in = scratch;
    }
    uLong bound = compressBound(j->raw_len);
    if (s->cap < bound) {
        free(s->buf);
        s->buf = pp_malloc(bound);
        s->cap = bound;
    }
    uLongf len = bound;
    s->zerr = deflate_chunk(s->buf, &len, in, j->raw_len, opt);
    s->out = s->buf;
    s->out_len = (uint32_t)len;
    s->comp_crc = (uint32_t)crc32(0, s->buf, (uInt)len);
}

static void *pipe_worker(void *arg) {
    Worker *w = arg;
    Pipe *p = w->pipe;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->next_claim < p->njobs &&
               p->next_claim >= p->next_write + p->nslots)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop || p->next_claim >= p->njobs) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        int k = p->next_claim++;
        pthread_mutex_unlock(&p->mu);
        Slot *s = &p->slots[k % p->nslots];
        encode_chunk(&p->jobs[k], p->opt, s, w->scratch);
        pthread_mutex_lock(&p->mu);
        s->done = 1;
        pthread_cond_broadcast(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

typedef struct { /* the file being written and the CRC32 of everything written so far */
    int fd;
    uint64_t off;
    uint32_t crc;
} Out;

static int out_write(Out *o, const void *p, size_t n) {
    if (ckpt_write_all(o->fd, p, n) != 0) return -1;
    o->crc = (uint32_t)crc32_z(o->crc, p, n);
    o->off += n;
    return 0;
}

/* Wait for chunk k (or encode it here when there are no workers), write it, free its
 * slot. 0, or -1 with errno (0 for a zlib failure). */
static int pipe_write_one(Pipe *p, int k, int nworkers, uint8_t *scratch, Out *o,
                          CkptChunk *rec) {
    Slot *s = &p->slots[k % p->nslots];
    if (nworkers == 0) {
        encode_chunk(&p->jobs[k], p->opt, s, scratch);
    } else {
        pthread_mutex_lock(&p->mu);
        while (!s->done) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    if (s->zerr != Z_OK) {
        errno = 0;
        return -1;
    }
    if (ckpt_write_all(o->fd, s->out, s->out_len) != 0) return -1;
    /* The body CRC goes on from the chunk's own CRC: no second pass over the bytes. */
    o->crc = (uint32_t)crc32_combine(o->crc, s->comp_crc, s->out_len);
    o->off += s->out_len;
    *rec = (CkptChunk){p->jobs[k].raw_len, s->out_len, s->raw_crc, s->comp_crc};
    pthread_mutex_lock(&p->mu);
    s->done = 0;
    p->next_write++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* Encode jobs[0..njobs) on up to `threads` threads and write them in order, filling
 * recs. The bytes do not depend on the thread count: every chunk is deflated alone. */
static int pipe_run(const ChunkJob *jobs, int njobs, const CkptOptions *opt, Out *o,
                    CkptChunk *recs) {
    int nworkers = opt->threads > 1 ? (opt->threads < njobs ? opt->threads : njobs) : 0;
    Pipe p = {.jobs = jobs, .opt = opt, .njobs = njobs, .nslots = nworkers + 2};
    p.slots = pp_calloc((size_t)p.nslots, sizeof *p.slots);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work, NULL);
    pthread_cond_init(&p.done, NULL);
    Worker *w = pp_calloc((size_t)nworkers + 1, sizeof *w);
    int started = 0;
    for (; started < nworkers; started++) {
        w[started].pipe = &p;
        w[started].scratch = pp_malloc(opt->chunk_bytes);
        if (pthread_create(&w[started].thread, NULL, pipe_worker, &w[started]) != 0) {
            free(w[started].scratch);
            break; /* fewer threads (maybe none): the same bytes, only slower */
        }
    }
    uint8_t *scratch = started == 0 ? pp_malloc(opt->chunk_bytes) : NULL;
    int rc = 0;
    for (int k = 0; k < njobs && rc == 0; k++)
        rc = pipe_write_one(&p, k, started, scratch, o, &recs[k]);
    int saved_errno = errno;
    pthread_mutex_lock(&p.mu);
    p.stop = 1;
    pthread_cond_broadcast(&p.work);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < started; i++) {
        pthread_join(w[i].thread, NULL);
        free(w[i].scratch);
    }
    for (int i = 0; i < p.nslots; i++) free(p.slots[i].buf);
    free(p.slots);
    free(w);
    free(scratch);
    pthread_cond_destroy(&p.work);
    pthread_cond_destroy(&p.done);
    pthread_mutex_destroy(&p.mu);
    errno = saved_errno;
    return rc;
}

/* Header: magic, version, flags, nmeta, ntensors, meta bytes, meta CRC, chunk size, zero
 * padding, and the CRC of the first 60 bytes. */
static void header_encode(uint8_t *h, uint32_t nmeta, uint32_t ntensors, const Buf *meta,
                          uint32_t chunk_bytes) {
    memset(h, 0, CKPT_HEADER_BYTES);
    memcpy(h, SHARD_MAGIC, 8);
    put_u32(h + 8, CKPT_FORMAT_VERSION);
    put_u32(h + 12, 0);
    put_u32(h + 16, nmeta);
    put_u32(h + 20, ntensors);
    put_u64(h + 24, meta->len);
    put_u32(h + 32, (uint32_t)crc32_z(0, meta->p, meta->len));
    put_u32(h + 36, chunk_bytes);
    put_u32(h + 60, (uint32_t)crc32(0, h, 60));
}

static void index_encode(Buf *b, const CkptTensor *t, int filter, int codec,
                         uint64_t data_offset, uint64_t data_bytes, const CkptChunk *c,
                         uint32_t nchunks) {
    uint8_t *p = buf_add(b, CKPT_ENTRY_BYTES + (size_t)nchunks * CKPT_CHUNK_REC_BYTES);
    memcpy(p, t->name, strlen(t->name));
    p[64] = (uint8_t)t->dtype;
    p[65] = (uint8_t)t->ndim;
    p[66] = (uint8_t)filter;
    p[67] = (uint8_t)codec;
    put_u32(p + 68, nchunks);
    for (int d = 0; d < t->ndim; d++) put_u64(p + 72 + 8 * d, (uint64_t)t->shape[d]);
    put_u64(p + 136, (uint64_t)ckpt_numel(t->ndim, t->shape) * 4);
    put_u64(p + 144, data_offset);
    put_u64(p + 152, data_bytes);
    for (uint32_t k = 0; k < nchunks; k++) {
        uint8_t *r = p + CKPT_ENTRY_BYTES + (size_t)k * CKPT_CHUNK_REC_BYTES;
        put_u32(r, c[k].raw_len);
        put_u32(r + 4, c[k].comp_len);
        put_u32(r + 8, c[k].raw_crc);
        put_u32(r + 12, c[k].comp_crc);
    }
}

/* Level 0 stores chunks as they are (unshuffled); else deflate, shuffled if asked. */
static void pick_codec(const CkptOptions *opt, int *filter, int *codec) {
    *codec = opt->level > 0 ? CKPT_CODEC_ZLIB : CKPT_CODEC_STORED;
    *filter = *codec == CKPT_CODEC_ZLIB && opt->shuffle ? CKPT_FILTER_SHUFFLE4
                                                        : CKPT_FILTER_NONE;
}

/* Split every tensor into chunk jobs; first[i] is tensor i's first job. */
static ChunkJob *make_jobs(const CkptTensor *t, int n, const CkptOptions *opt, int *first,
                           int *njobs) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t raw = (uint64_t)ckpt_numel(t[i].ndim, t[i].shape) * 4;
        total += (int64_t)((raw + opt->chunk_bytes - 1) / opt->chunk_bytes);
    }
    PP_CHECK(total < INT32_MAX);
    ChunkJob *jobs = pp_malloc((size_t)total * sizeof *jobs + 1);
    int k = 0, filter, codec;
    pick_codec(opt, &filter, &codec);
    for (int i = 0; i < n; i++) {
        uint64_t raw = (uint64_t)ckpt_numel(t[i].ndim, t[i].shape) * 4;
        first[i] = k;
        for (uint64_t off = 0; off < raw; off += opt->chunk_bytes) {
            uint64_t len = raw - off < opt->chunk_bytes ? raw - off : opt->chunk_bytes;
            jobs[k++] = (ChunkJob){(const uint8_t *)t[i].data + off, (uint32_t)len, filter,
                                   codec};
        }
    }
    first[n] = k;
    *njobs = k;
    return jobs;
}

/* Header and metadata, the chunks, the index, the trailer. */
static int shard_write_fd(Out *o, const CkptMeta *meta, const CkptTensor *t, int n,
                          const CkptOptions *opt) {
    Buf mb = {0}, ib = {0};
    uint8_t h[CKPT_HEADER_BYTES], tr[CKPT_TRAILER_BYTES] = {0};
    int *first = pp_malloc(((size_t)n + 1) * sizeof *first); /* tensor i: jobs [first[i],
                                                                first[i+1]) */
    int njobs = 0, filter, codec;
    pick_codec(opt, &filter, &codec);
    ChunkJob *jobs = make_jobs(t, n, opt, first, &njobs);
    CkptChunk *recs = pp_malloc((size_t)njobs * sizeof *recs + 1);
    meta_encode(meta, &mb);
    header_encode(h, meta ? (uint32_t)meta->n : 0, (uint32_t)n, &mb,
                  (uint32_t)opt->chunk_bytes);
    int rc = out_write(o, h, sizeof h);
    if (rc == 0 && mb.len) rc = out_write(o, mb.p, mb.len);
    uint64_t data_start = o->off;
    if (rc == 0) rc = pipe_run(jobs, njobs, opt, o, recs);
    for (int i = 0; i < n && rc == 0; i++) {
        uint64_t bytes = 0;
        for (int k = first[i]; k < first[i + 1]; k++) bytes += recs[k].comp_len;
        index_encode(&ib, &t[i], filter, codec, data_start, bytes, recs + first[i],
                     (uint32_t)(first[i + 1] - first[i]));
        data_start += bytes;
    }
    if (rc == 0) {
        put_u64(tr, o->off);
        put_u64(tr + 8, ib.len);
        put_u32(tr + 16, (uint32_t)crc32_z(0, ib.p, ib.len));
        rc = out_write(o, ib.p, ib.len);
    }
    if (rc == 0) {
        put_u32(tr + 20, o->crc); /* CRC32 of every byte before the trailer */
        memcpy(tr + 24, TRAILER_MAGIC, 8);
        rc = out_write(o, tr, sizeof tr);
    }
    free(mb.p);
    free(ib.p);
    free(first);
    free(jobs);
    free(recs);
    return rc;
}

int ckpt_shard_write(int fd, const char *name, const CkptMeta *meta, const CkptTensor *t,
                     int n, const CkptOptions *opt, char *err, size_t errlen) {
    Out o = {fd, 0, 0};
    errno = 0;
    if (shard_write_fd(&o, meta, t, n, opt) == 0) return PP_OK;
    const char *why = errno ? ckpt_syserr() : "zlib compression failed (out of memory?)";
    return shard_err(err, errlen, name, "write failed after %llu bytes: %s",
                     (unsigned long long)o.off, why);
}

/* ---- reading: validate the layout, then decode tensors on demand ---------------------- */

void ckpt_shard_close(CkptShard *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    ckpt_meta_clear(&s->meta);
    free(s->meta.e);
    free(s->entries);
    free(s->chunks);
    s->meta = (CkptMeta){0};
    s->entries = NULL;
    s->chunks = NULL;
}

/* Decode the index record at p[0..avail) into e, taking its chunk records into chunks.
 * *cursor is where its data must start (records are contiguous); on success it moves
 * past the data and *used is the record's size. NULL, or what is wrong. */
static const char *entry_decode(CkptEntry *e, const uint8_t *p, uint64_t avail,
                                CkptChunk *chunks, uint64_t *cursor, uint64_t data_end,
                                uint64_t *used) {
    if (avail < CKPT_ENTRY_BYTES) return "record runs past the index";
    const uint8_t *nul = memchr(p, 0, CKPT_NAME_MAX);
    if (!nul) return "name is not terminated";
    memcpy(e->name, p, CKPT_NAME_MAX);
    for (const uint8_t *q = nul; q < p + CKPT_NAME_MAX; q++)
        if (*q) return "name padding is not zero";
    if (!ckpt_name_ok(e->name)) return "invalid name";
    e->dtype = p[64];
    e->ndim = p[65];
    e->filter = p[66];
    e->codec = p[67];
    e->nchunks = get_u32(p + 68);
    if (e->dtype != CKPT_F32) return "unknown dtype";
    if (e->ndim > CKPT_MAX_DIMS || e->filter > CKPT_FILTER_SHUFFLE4 ||
        e->codec > CKPT_CODEC_ZLIB)
        return "unknown ndim, filter or codec";
    for (int d = 0; d < CKPT_MAX_DIMS; d++) {
        uint64_t v = get_u64(p + 72 + 8 * d);
        if ((d < e->ndim && v > (uint64_t)INT64_MAX) || (d >= e->ndim && v != 0))
            return "bad shape";
        e->shape[d] = (int64_t)v;
    }
    int64_t numel = ckpt_numel(e->ndim, e->shape);
    e->raw_bytes = get_u64(p + 136);
    e->data_offset = get_u64(p + 144);
    e->data_bytes = get_u64(p + 152);
    if (numel < 0 || e->raw_bytes != (uint64_t)numel * 4) return "size does not match shape";
    if (e->data_offset != *cursor || e->data_bytes > data_end - *cursor)
        return "data is not where the index says";
    if ((avail - CKPT_ENTRY_BYTES) / CKPT_CHUNK_REC_BYTES < e->nchunks)
        return "chunk table runs past the index";
    uint64_t raw = 0, comp = 0;
    for (uint32_t k = 0; k < e->nchunks; k++) {
        const uint8_t *r = p + CKPT_ENTRY_BYTES + (size_t)k * CKPT_CHUNK_REC_BYTES;
        CkptChunk c = {get_u32(r), get_u32(r + 4), get_u32(r + 8), get_u32(r + 12)};
        if (c.raw_len == 0 || c.raw_len % 4 || c.raw_len > CKPT_MAX_CHUNK || c.comp_len == 0 ||
            (e->codec == CKPT_CODEC_STORED && c.comp_len != c.raw_len))
            return "bad chunk sizes";
        chunks[k] = c;
        raw += c.raw_len;
        comp += c.comp_len;
    }
    if (raw != e->raw_bytes || comp != e->data_bytes) return "chunk sizes do not add up";
    e->chunks = chunks;
    *cursor += e->data_bytes;
    *used = CKPT_ENTRY_BYTES + (uint64_t)e->nchunks * CKPT_CHUNK_REC_BYTES;
    return NULL;
}

/* Read the index at [ioff, ioff + ibytes), check its CRC and decode it. */
static int index_load(CkptShard *s, uint64_t data_start, uint64_t ioff, uint64_t ibytes,
                      uint32_t icrc, char *err, size_t errlen) {
    uint8_t *ix = pp_malloc(ibytes);
    int rc = PP_OK;
    if (ckpt_pread_all(s->fd, ix, ibytes, ioff) != 0) {
        rc = shard_err(err, errlen, s->path, "cannot read the index: %s", ckpt_syserr());
    } else if ((uint32_t)crc32_z(0, ix, ibytes) != icrc) {
        rc = shard_err(err, errlen, s->path, "index CRC32 mismatch: the file is corrupted");
    } else {
        s->entries = pp_calloc((size_t)s->ntensors + 1, sizeof *s->entries);
        s->chunks = pp_malloc(ibytes / CKPT_CHUNK_REC_BYTES * sizeof *s->chunks + 1);
        uint64_t at = 0, cursor = data_start, used = 0, nch = 0;
        for (int i = 0; i < s->ntensors && rc == PP_OK; i++) {
            const char *why = entry_decode(&s->entries[i], ix + at, ibytes - at,
                                           s->chunks + nch, &cursor, ioff, &used);
            if (why)
                rc = shard_err(err, errlen, s->path, "index record %d: %s", i, why);
            at += used;
            nch += s->entries[i].nchunks;
        }
        if (rc == PP_OK && (at != ibytes || cursor != ioff))
            rc = shard_err(err, errlen, s->path, "index and data sizes disagree");
    }
    free(ix);
    return rc;
}

/* Header, metadata table, trailer, index. s->fd and s->file_bytes are set. */
static int shard_parse(CkptShard *s, char *err, size_t errlen) {
    uint8_t h[CKPT_HEADER_BYTES], tr[CKPT_TRAILER_BYTES];
    if (s->file_bytes < CKPT_HEADER_BYTES + CKPT_TRAILER_BYTES)
        return shard_err(err, errlen, s->path, "only %llu bytes: too short for a shard",
                         (unsigned long long)s->file_bytes);
    if (ckpt_pread_all(s->fd, h, sizeof h, 0) != 0 ||
        ckpt_pread_all(s->fd, tr, sizeof tr, s->file_bytes - sizeof tr) != 0)
        return shard_err(err, errlen, s->path, "read failed: %s", ckpt_syserr());
    if (memcmp(h, SHARD_MAGIC, 8) != 0)
        return shard_err(err, errlen, s->path, "not a pptrain checkpoint shard (bad magic)");
    if (get_u32(h + 8) != CKPT_FORMAT_VERSION)
        return shard_err(err, errlen, s->path, "format version %u, but this pptrain reads "
                         "version %d: load it with the pptrain that wrote it",
                         get_u32(h + 8), CKPT_FORMAT_VERSION);
    if (get_u32(h + 60) != (uint32_t)crc32(0, h, 60) || get_u32(h + 12) != 0)
        return shard_err(err, errlen, s->path, "header CRC32 mismatch: the file is corrupted");
    uint32_t nmeta = get_u32(h + 16);
    uint64_t mbytes = get_u64(h + 24), data_start = CKPT_HEADER_BYTES + mbytes;
    s->ntensors = (int)get_u32(h + 20);
    if (memcmp(tr + 24, TRAILER_MAGIC, 8) != 0)
        return shard_err(err, errlen, s->path, "no trailer at the end: the file is "
                         "truncated or corrupted");
    uint64_t ioff = get_u64(tr), ibytes = get_u64(tr + 8), end = s->file_bytes - sizeof tr;
    if (s->ntensors < 0 || mbytes > end - CKPT_HEADER_BYTES || ioff < data_start ||
        ioff > end || ibytes != end - ioff ||
        (uint64_t)s->ntensors > ibytes / CKPT_ENTRY_BYTES)
        return shard_err(err, errlen, s->path, "header and trailer sizes do not fit the "
                         "file (%llu bytes): truncated or corrupted",
                         (unsigned long long)s->file_bytes);
    uint8_t *mt = pp_malloc(mbytes);
    const char *why = NULL;
    if (ckpt_pread_all(s->fd, mt, mbytes, CKPT_HEADER_BYTES) != 0) why = ckpt_syserr();
    else if ((uint32_t)crc32_z(0, mt, mbytes) != get_u32(h + 32)) why = "CRC32 mismatch";
    else why = meta_decode(&s->meta, mt, mbytes, nmeta);
    free(mt);
    if (why) return shard_err(err, errlen, s->path, "metadata table: %s", why);
    int rc = index_load(s, data_start, ioff, ibytes, get_u32(tr + 16), err, errlen);
    if (rc != PP_OK) return rc;
    s->body_crc = get_u32(tr + 20);
    s->file_crc = (uint32_t)crc32_combine(s->body_crc, crc32(0, tr, sizeof tr), sizeof tr);
    return PP_OK;
}

int ckpt_shard_open(CkptShard *s, const char *path, int64_t expect_bytes, char *err,
                    size_t errlen) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat st;
    s->fd = pp_open_regular(path, &st); /* a FIFO must not block the open */
    if (s->fd == -2) {
        s->fd = -1;
        return shard_err(err, errlen, path, "it is %s, not a regular file: the checkpoint "
                         "directory was tampered with", pp_file_kind(st.st_mode));
    }
    if (s->fd < 0)
        return shard_err(err, errlen, path, "cannot open: %s%s", ckpt_syserr(),
                         errno == ENOENT ? " (the manifest lists it: was it deleted, or "
                                           "the checkpoint copied only in part?)" : "");
    int rc = PP_OK;
    if (expect_bytes >= 0 && st.st_size != expect_bytes)
        rc = shard_err(err, errlen, path, "is %lld bytes but the manifest says %lld: the "
                       "file was truncated or replaced", (long long)st.st_size,
                       (long long)expect_bytes);
    if (rc == PP_OK) {
        s->file_bytes = (uint64_t)st.st_size;
        rc = shard_parse(s, err, errlen);
    }
    if (rc != PP_OK) ckpt_shard_close(s);
    return rc;
}

enum { FAULT_NONE, FAULT_STORED_CRC, FAULT_INFLATE, FAULT_RAW_CRC };

typedef struct { /* one ckpt_shard_read, shared by its threads */
    const CkptEntry *e;
    const uint8_t *stored;  /* the tensor's data_bytes, read from the file */
    uint64_t *stored_off;   /* [nchunks] chunk k's offset in stored */
    uint64_t *raw_off;      /* [nchunks] chunk k's offset in dst */
    uint8_t *dst;
    uint8_t **scratch;      /* [threads] inflate buffers for shuffled chunks */
    int *fault;             /* [nchunks] FAULT_* */
} ReadCtx;

static void check_stored(void *ctx, int k, int tid) {
    ReadCtx *c = ctx;
    const CkptChunk *ch = &c->e->chunks[k];
    uint32_t crc = (uint32_t)crc32(0, c->stored + c->stored_off[k], ch->comp_len);
    c->fault[k] = crc == ch->comp_crc ? FAULT_NONE : FAULT_STORED_CRC;
}

static void decode_chunk(void *ctx, int k, int tid) {
    ReadCtx *c = ctx;
    const CkptChunk *ch = &c->e->chunks[k];
    const uint8_t *src = c->stored + c->stored_off[k];
    uint8_t *out = c->dst + c->raw_off[k];
    int shuffled = c->e->filter == CKPT_FILTER_SHUFFLE4;
    if (c->e->codec == CKPT_CODEC_ZLIB) {
        uint8_t *to = shuffled ? c->scratch[tid] : out;
        uLongf dlen = ch->raw_len;
        uLong slen = ch->comp_len;
        if (uncompress2(to, &dlen, src, &slen) != Z_OK || dlen != ch->raw_len ||
            slen != ch->comp_len) {
            c->fault[k] = FAULT_INFLATE;
            return;
        }
        src = to;
    }
    if (shuffled) unshuffle4(out, src, ch->raw_len);
    else if (src != out) memcpy(out, src, ch->raw_len);
    if ((uint32_t)crc32(0, out, ch->raw_len) != ch->raw_crc) c->fault[k] = FAULT_RAW_CRC;
}

/* The first faulty chunk's error, or PP_OK. */
static int read_fault(const CkptShard *s, const ReadCtx *c, char *err, size_t errlen) {
    static const char *what[] = {
        "", "the CRC32 of its stored bytes does not match the index",
        "it does not inflate to its recorded size", "the CRC32 of its data does not "
        "match the index"};
    for (uint32_t k = 0; k < c->e->nchunks; k++)
        if (c->fault[k] != FAULT_NONE)
            return shard_err(err, errlen, s->path, "tensor '%s': chunk %u of %u (file "
                             "offset %llu): %s: the file is corrupted", c->e->name, k,
                             c->e->nchunks,
                             (unsigned long long)(c->e->data_offset + c->stored_off[k]),
                             what[c->fault[k]]);
    return PP_OK;
}

int ckpt_shard_read(const CkptShard *s, const CkptEntry *e, void *dst, int threads,
                    char *err, size_t errlen) {
    uint32_t n = e->nchunks, maxraw = 0;
    ReadCtx c = {.e = e, .dst = dst};
    c.stored_off = pp_malloc((n + 1) * sizeof(uint64_t));
    c.raw_off = pp_malloc((n + 1) * sizeof(uint64_t));
    c.fault = pp_calloc(n + 1, sizeof(int));
    for (uint32_t k = 0; k < n; k++) {
        c.stored_off[k] = k ? c.stored_off[k - 1] + e->chunks[k - 1].comp_len : 0;
        c.raw_off[k] = k ? c.raw_off[k - 1] + e->chunks[k - 1].raw_len : 0;
        if (e->chunks[k].raw_len > maxraw) maxraw = e->chunks[k].raw_len;
    }
    if (threads < 1) threads = 1;
    uint8_t *stored = pp_malloc(e->data_bytes);
    c.stored = stored;
    int rc = PP_OK;
    if (ckpt_pread_all(s->fd, stored, e->data_bytes, e->data_offset) != 0) {
        rc = shard_err(err, errlen, s->path, "tensor '%s': read failed: %s", e->name,
                       ckpt_syserr());
    } else {
        ckpt_parallel_for(threads, (int)n, check_stored, &c); /* before dst is touched */
        rc = read_fault(s, &c, err, errlen);
    }
    if (rc == PP_OK) {
        int shuffled = e->filter == CKPT_FILTER_SHUFFLE4 && e->codec == CKPT_CODEC_ZLIB;
        c.scratch = pp_calloc((size_t)threads, sizeof *c.scratch);
        for (int t = 0; shuffled && t < threads; t++) c.scratch[t] = pp_malloc(maxraw);
        ckpt_parallel_for(threads, (int)n, decode_chunk, &c);
        rc = read_fault(s, &c, err, errlen);
        for (int t = 0; t < threads; t++) free(c.scratch[t]);
        free(c.scratch);
    }
    free(stored);
    free(c.stored_off);
    free(c.raw_off);
    free(c.fault);
    return rc;
}

/* ---- file helpers and a parallel loop ------------------------------------------- */

int ckpt_write_all(int fd, const void *p, size_t n) {
    const uint8_t *q = p;
    while (n > 0) {
        ssize_t w = write(fd, q, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

int ckpt_pread_all(int fd, void *p, size_t n, uint64_t off) {
    uint8_t *q = p;
    while (n > 0) {
        ssize_t r = pread(fd, q, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) {
            errno = 0; /* the file ended early */
            return -1;
        }
        q += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

const char *ckpt_syserr(void) { return errno ? strerror(errno) : "unexpected end of file"; }

typedef struct {
    void (*fn)(void *ctx, int job, int tid);
    void *ctx;
    int njobs, next; /* next: the next unclaimed job, taken atomically */
} PFor;

typedef struct {
    PFor *p;
    int tid;
    pthread_t th;
} PForThread;

static void *pfor_run(void *arg) {
    PForThread *t = arg;
    for (;;) {
        int j = __atomic_fetch_add(&t->p->next, 1, __ATOMIC_RELAXED);
        if (j >= t->p->njobs) return NULL;
        t->p->fn(t->p->ctx, j, t->tid);
    }
}

void ckpt_parallel_for(int threads, int njobs, void (*fn)(void *ctx, int job, int tid),
                       void *ctx) {
    if (threads > njobs) threads = njobs;
    PFor p = {fn, ctx, njobs, 0};
    PForThread *t = pp_calloc((size_t)(threads > 1 ? threads : 1), sizeof *t);
    int started = 1;
    for (; started < threads; started++) {
        t[started] = (PForThread){&p, started, 0};
        if (pthread_create(&t[started].th, NULL, pfor_run, &t[started]) != 0) break;
    }
    t[0] = (PForThread){&p, 0, 0};
    pfor_run(&t[0]); /* the caller works too; a failed thread start only means fewer */
    for (int i = 1; i < started; i++) pthread_join(t[i].th, NULL);
    free(t);
}
