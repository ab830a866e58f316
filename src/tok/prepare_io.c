/* prepare_io.c — prepare-data's input and output: the reader that cuts the input into
 * batches of whole documents, the token files of each split (one, or shards) written all
 * or nothing, and the progress line. [Note: prepare-data] in prepare.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prepare_internal.h"

/* The token files are written in host order, which must be the format's little-endian. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "prepare_io.c assumes a little-endian host (llm.c's .bin files are little-endian)"
#endif

/* ---- input ------------------------------------------------------------------------ */

const char *prep_input_name(const PrepArgs *a, int k) {
    return strcmp(a->inputs[k], "-") ? a->inputs[k] : "<standard input>";
}

int reader_open(Reader *r, const PrepArgs *a, PrepStop *stop, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->a = a;
    r->stop = stop;
    r->fd = -1;
    r->size = pp_calloc((size_t)a->ninputs, sizeof *r->size);
    int nstdin = 0;
    for (int k = 0; k < a->ninputs; k++) {
        if (!strcmp(a->inputs[k], "-")) {
            if (nstdin++)
                return pp_errf(err, errlen, PP_EUSAGE, "standard input (\"-\") is named twice");
            r->size[k] = -1;
            r->total = -1;
            continue;
        }
        struct stat st;
        int fd = pp_open_regular(a->inputs[k], &st);
        if (fd < 0)
            return pp_errf(err, errlen, PP_EUSAGE, "cannot open input '%s': %s", a->inputs[k],
                           fd == -2 ? pp_file_kind(st.st_mode) : strerror(errno));
        close(fd);
        r->size[k] = st.st_size;
        if (r->total >= 0) r->total += st.st_size;
    }
    return PP_OK;
}

/* Close the current input's descriptor (standard input's stays open). */
static void close_fd(Reader *r) {
    if (r->fd >= 0 && r->size[r->cur] >= 0) close(r->fd);
    r->fd = -1;
}

void reader_close(Reader *r) {
    if (r->size) close_fd(r);
    free(r->size);
    free(r->carry);
    memset(r, 0, sizeof *r);
}

size_t reader_next_bytes(const Reader *r) {
    if (r->a->jsonl || !r->a->tokenizer || r->cur >= r->a->ninputs || r->size[r->cur] < 0)
        return PREP_BATCH_BYTES;
    return (size_t)r->size[r->cur];
}

static int open_cur(Reader *r, char *err, size_t errlen) {
    if (r->fd >= 0) return PP_OK;
    const char *path = r->a->inputs[r->cur];
    if (!strcmp(path, "-")) {
        r->fd = STDIN_FILENO;
        return PP_OK;
    }
    struct stat st;
    r->fd = pp_open_regular(path, &st);
    if (r->fd < 0) {
        int fd = r->fd;
        r->fd = -1;
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot open input '%s': %s", path,
                       fd == -2 ? pp_file_kind(st.st_mode) : strerror(errno));
    }
    return PP_OK;
}

/* Close the current input (its size must be what it was at the start) and go on to the
 * next. */
static int close_cur(Reader *r, char *err, size_t errlen) {
    long long size = r->size[r->cur];
    close_fd(r);
    if (size >= 0 && r->got != size)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "input '%s' changed while it was read: it was %lld bytes at the start, "
                       "and %lld were read",
                       r->a->inputs[r->cur], size, r->got);
    r->cur++;
    r->got = 0;
    r->line = 0;
    return PP_OK;
}

static void batch_reserve(Batch *b, size_t n) {
    if (n <= b->cap) return;
    size_t cap = b->cap * 2 > n ? b->cap * 2 : n;
    char *p = realloc(b->buf, cap + 1);
    if (!p) PP_DIE("out of memory for %zu bytes of input", cap);
    b->buf = p, b->cap = cap;
}

/* Room for `want` more bytes of the current input on b's buffer, and one read(2) of up to
 * PREP_READ_BYTES of them once poll(2) says the input is ready (a short read is progress):
 * PP_OK (*eof when it has ended), an error, PREP_IDLE when nothing came for PREP_WAIT_MS, or
 * -SIG once *r->stop is SIG (poll returns at once on a signal). [Note: stopping
 * prepare-data] in prepare.c */
static int read_more(Reader *r, Batch *b, size_t want, int *eof, char *err, size_t errlen) {
    batch_reserve(b, b->len + want); /* a whole text file: its size + 1 at once */
    struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
    int ready = poll(&pfd, 1, PREP_WAIT_MS);
    size_t chunk = want < PREP_READ_BYTES ? want : PREP_READ_BYTES;
    ssize_t n = ready > 0 ? read(r->fd, b->buf + b->len, chunk) : 0;
    if (*r->stop) return -*r->stop;
    if (ready == 0) return PREP_IDLE;
    if (ready < 0 || n < 0) {
        if (errno == EINTR || errno == EAGAIN) return PP_OK;
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot read input '%s': %s",
                       prep_input_name(r->a, r->cur), strerror(errno));
    }
    b->len += (size_t)n;
    r->got += n;
    *eof = n == 0;
    return PP_OK;
}

static void add_unit(Batch *b, size_t off, size_t len, int input, long line) {
    if (b->nunit == b->unit_cap) {
        b->unit_cap = b->unit_cap ? 2 * b->unit_cap : 256;
        b->unit = realloc(b->unit, b->unit_cap * sizeof *b->unit);
        b->end = realloc(b->end, b->unit_cap * sizeof *b->end);
        if (!b->unit || !b->end) PP_DIE("out of memory for %zu documents", b->unit_cap);
    }
    b->unit[b->nunit++] = (Unit){.off = off, .len = len, .input = input, .line = line};
}

/* A JSONL line: a document unless it is blank (spaces, tabs, a CR). */
static void add_line(Reader *r, Batch *b, size_t off, size_t len) {
    r->line++;
    for (size_t i = 0; i < len; i++) {
        char c = b->buf[off + i];
        if (c != ' ' && c != '\t' && c != '\r') {
            add_unit(b, off, len, r->cur, r->line);
            return;
        }
    }
}

/* JSONL: the lines of one input up to about PREP_BATCH_BYTES; a line the batch cuts is
 * carried to the next one. PREP_IDLE leaves the batch partial (r->partial), to go on with. */
static int read_jsonl(Reader *r, Batch *b, char *err, size_t errlen) {
    while (r->cur < r->a->ninputs && (b->nunit == 0 || r->partial)) {
        int rc = open_cur(r, err, errlen), eof = 0;
        if (rc != PP_OK) return rc;
        if (!r->partial) { /* this input's part of the batch begins with the cut line */
            batch_reserve(b, r->ncarry);
            if (r->ncarry) memcpy(b->buf, r->carry, r->ncarry);
            b->len = r->ncarry;
            r->ncarry = 0;
            r->scan = 0;
            r->partial = 1;
        }
        while (!eof && (b->nunit == 0 || b->len < PREP_BATCH_BYTES)) {
            size_t want = b->len < PREP_BATCH_BYTES ? PREP_BATCH_BYTES - b->len : PREP_BATCH_BYTES;
            if ((rc = read_more(r, b, want, &eof, err, errlen)) != PP_OK) return rc;
            for (char *nl; (nl = memchr(b->buf + r->scan, '\n', b->len - r->scan));
                 r->scan = (size_t)(nl + 1 - b->buf))
                add_line(r, b, r->scan, (size_t)(nl - (b->buf + r->scan)));
        }
        r->partial = 0;
        size_t scan = r->scan;
        if (eof && scan < b->len) add_line(r, b, scan, b->len - scan);
        if (!eof) { /* carry the cut line */
            r->ncarry = b->len - scan;
            if (r->ncarry > r->carry_cap) {
                free(r->carry);
                r->carry = pp_malloc(r->ncarry);
                r->carry_cap = r->ncarry;
            }
            if (r->ncarry) memcpy(r->carry, b->buf + scan, r->ncarry); /* carry may be NULL */
            b->len = scan;
        }
        b->in_bytes += b->len;
        if (eof && (rc = close_cur(r, err, errlen)) != PP_OK) return rc;
    }
    return PP_OK;
}

/* Text files, each a document: whole files up to about PREP_BATCH_BYTES (one larger file
 * alone); byte-level: one chunk of PREP_BATCH_BYTES at most. PREP_IDLE leaves the batch
 * partial (r->partial: the document from r->off), to go on with. */
static int read_text(Reader *r, Batch *b, char *err, size_t errlen) {
    int whole = r->a->tokenizer != NULL;
    while (r->cur < r->a->ninputs) {
        long long size = r->size[r->cur];
        if (!r->partial) {
            if (b->nunit > 0 && (!whole || size < 0 || b->len + (size_t)size > PREP_BATCH_BYTES))
                break;
            r->off = b->len;
            r->partial = 1;
        }
        int rc = open_cur(r, err, errlen), eof = 0;
        if (rc != PP_OK) return rc;
        while (!eof && (whole || b->len - r->off < PREP_BATCH_BYTES)) {
            size_t want = PREP_BATCH_BYTES - (b->len - r->off);
            if (whole) /* + 1: its end */
                want = size >= r->got ? (size_t)(size - r->got) + 1 : PREP_BATCH_BYTES;
            if ((rc = read_more(r, b, want, &eof, err, errlen)) != PP_OK) return rc;
        }
        r->partial = 0;
        if (whole || b->len > r->off) add_unit(b, r->off, b->len - r->off, r->cur, 0);
        if (eof && (rc = close_cur(r, err, errlen)) != PP_OK) return rc;
    }
    b->in_bytes = b->len;
    return PP_OK;
}

int reader_batch(Reader *r, Batch *b, char *err, size_t errlen) {
    if (!r->partial) b->len = b->nunit = b->in_bytes = 0;
    return r->a->jsonl ? read_jsonl(r, b, err, errlen) : read_text(r, b, err, errlen);
}

void batch_trim(Batch *b) {
    if (b->cap > 4 * PREP_BATCH_BYTES) {
        free(b->buf);
        b->buf = NULL;
        b->cap = 0;
    }
    if (b->ids.cap > PREP_BATCH_BYTES) tok_ids_free(&b->ids);
}

void batch_free(Batch *b) {
    free(b->buf);
    free(b->unit);
    free(b->end);
    tok_ids_free(&b->ids);
    memset(b, 0, sizeof *b);
}

/* ---- output ----------------------------------------------------------------------- */

/* File k of split s (k ignored without shards), with ".part" when part; 0, or -1 when it
 * does not fit path[n]. */
static int path_fits(const PrepSplit *s, int k, int part, char *path, size_t n) {
    int len;
    if (s->sharded)
        len = snprintf(path, n, "%s_%s_%06d.bin%s", s->name, s->split, k, part ? ".part" : "");
    else
        len = snprintf(path, n, "%s%s", s->name, part ? ".part" : "");
    return len >= 0 && (size_t)len < n ? 0 : -1;
}

/* path_fits for a name prep_out_init has checked to fit. */
static void split_path(const PrepSplit *s, int k, int part, char *path, size_t n) {
    PP_CHECK(path_fits(s, k, part, path, n) == 0);
}

int prep_out_init(PrepOut *o, const PrepArgs *a, int width, PrepStop *stop, char *err,
                  size_t errlen) {
    memset(o, 0, sizeof *o);
    o->byte_level = !a->tokenizer;
    o->one_doc = a->tokenizer && !a->jsonl && a->ninputs == 1;
    o->val_fraction = a->val_fraction;
    o->byte_train = SIZE_MAX;
    size_t n = strlen(a->out);
    for (int k = 0; k < 2; k++) {
        PrepSplit *s = &o->s[k];
        *s = (PrepSplit){.split = k ? "val" : "train",
                         .width = width,
                         .sharded = a->shard_tokens > 0,
                         .stop = stop,
                         .cap = a->shard_tokens > 0 ? (size_t)a->shard_tokens : INT32_MAX};
        int bad = n >= sizeof s->name;
        if (!bad && s->sharded) /* the prefix: --out less a ".bin" */
            snprintf(s->name, sizeof s->name, "%.*s",
                     (int)(n >= 4 && !strcmp(a->out + n - 4, ".bin") ? n - 4 : n), a->out);
        else if (!bad && k == 0)
            snprintf(s->name, sizeof s->name, "%s", a->out);
        else if (!bad)
            bad = data_val_path(a->out, s->name, sizeof s->name) != PP_OK;
        char path[PP_PATH_MAX];
        if (bad || path_fits(s, INT32_MAX, 1, path, sizeof path) != 0) /* the longest */
            return pp_errf(err, errlen, PP_EUSAGE, "--out path is too long: %s", a->out);
    }
    return PP_OK;
}

static int split_open(PrepSplit *s, char *err, size_t errlen) {
    char path[PP_PATH_MAX], dir[PP_PATH_MAX];
    split_path(s, s->nfiles, 1, path, sizeof path);
    pp_dirname(path, dir, sizeof dir);
    if (pp_mkdirs(dir) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot create directory '%s': %s", dir,
                       strerror(errno));
    int rc = pp_file_create(&s->pf, path, NULL, err, errlen);
    if (rc != PP_OK) return rc;
    if (!s->buf) s->buf = pp_malloc(PREP_WRITE_BYTES);
    memset(s->buf, 0, DATA_HEADER_BYTES); /* the header, written again at the end */
    s->blen = DATA_HEADER_BYTES;
    s->ntok = 0;
    s->open = 1;
    return PP_OK;
}

/* write(2) all of p[n] at the descriptor's offset; 0 or -1 (errno). */
static int write_all(int fd, const void *p, size_t n) {
    for (const char *c = p; n > 0;) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -1 : (errno = EIO, -1);
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int split_flush(PrepSplit *s, char *err, size_t errlen) {
    int rc = write_all(s->pf.fd, s->buf, s->blen);
    s->blen = 0;
    if (rc == 0) return PP_OK;
    return pp_errf(err, errlen, PP_ERUNTIME, "writing %s failed: %s", s->pf.path, strerror(errno));
}

/* Flush the open file, write its header, and commit it under its .part name. */
static int split_close(PrepSplit *s, char *err, size_t errlen) {
    int32_t h[DATA_HEADER_INTS] = {s->width == 2 ? DATA_MAGIC : DATA_MAGIC32,
                                   s->width == 2 ? DATA_VERSION : DATA_VERSION32, (int32_t)s->ntok};
    int rc = split_flush(s, err, errlen);
    if (rc == PP_OK && pwrite(s->pf.fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        rc = pp_errf(err, errlen, PP_ERUNTIME, "writing %s failed: %s", s->pf.path,
                     strerror(errno));
    if (rc != PP_OK) return rc; /* prep_out_abort removes it */
    s->open = 0;
    rc = pp_file_commit(&s->pf, err, errlen);
    if (rc == PP_OK) s->nfiles++;
    return rc;
}

/* Append ids[n] to split s, in files of s->cap tokens. */
static int split_put(PrepSplit *s, const int32_t *ids, size_t n, char *err, size_t errlen) {
    int rc;
    while (n > 0) {
        if (!s->open && (rc = split_open(s, err, errlen)) != PP_OK) return rc;
        size_t k = s->cap - s->ntok;
        if (n > k && !s->sharded)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "the %s split has more than 2^31 - 1 tokens, the most that one "
                           "file's int32 count holds: give --shard-tokens N (100000000, say)",
                           s->split);
        k = n < k ? n : k;
        for (size_t done = 0; done < k;) {
            size_t room = (PREP_WRITE_BYTES - s->blen) / (size_t)s->width;
            if (!room && *s->stop) return -*s->stop; /* a batch of one large document */
            if (!room && (rc = split_flush(s, err, errlen)) != PP_OK) return rc;
            size_t m = k - done < room ? k - done : room;
            unsigned char *p = s->buf + s->blen;
            for (size_t i = 0; i < m; i++) {
                uint32_t v = (uint32_t)ids[done + i];
                if (ids[done + i] < 0 || (s->width == 2 && v > 0xFFFF))
                    return pp_errf(err, errlen, PP_EUSAGE,
                                   "token id %d does not fit the %s file's uint%d tokens",
                                   ids[done + i], s->split, 8 * s->width);
                if (s->width == 2)
                    memcpy(p + 2 * i, &(uint16_t){(uint16_t)v}, 2);
                else
                    memcpy(p + 4 * i, &v, 4);
            }
            s->blen += m * (size_t)s->width;
            done += m;
        }
        s->ntok += k;
        s->total += k;
        ids += k;
        n -= k;
        if (s->ntok == s->cap && (rc = split_close(s, err, errlen)) != PP_OK) return rc;
    }
    return PP_OK;
}

int prep_out_batch(PrepOut *o, const Batch *b, char *err, size_t errlen) {
    if (b->rc != PP_OK) return pp_errf(err, errlen, b->rc, "%s", b->err);
    PrepSplit *train = &o->s[0], *val = &o->s[1];
    for (size_t k = 0; k < b->nunit; k++) {
        size_t start = k ? b->end[k - 1] : 0, n = b->end[k] - start;
        const int32_t *ids = b->ids.ids + start;
        int rc = PP_OK;
        if (o->byte_level) { /* the stream's first byte_train tokens are train's */
            size_t t = o->stream >= o->byte_train ? 0 : o->byte_train - o->stream;
            t = t < n ? t : n;
            rc = split_put(train, ids, t, err, errlen);
            if (rc == PP_OK) rc = split_put(val, ids + t, n - t, err, errlen);
        } else if (o->one_doc) { /* val: the document's last floor(F * n) tokens */
            size_t nval = (size_t)floor(o->val_fraction * (double)n);
            if (o->val_fraction > 0 && nval == 0)
                return pp_errf(err, errlen, PP_EUSAGE,
                               "--val-fraction %g leaves none of the %zu tokens of the one "
                               "document for the validation file",
                               o->val_fraction, n);
            train->docs++;
            o->docs++;
            rc = split_put(train, ids, n - nval, err, errlen);
            if (rc == PP_OK) rc = split_put(val, ids + n - nval, nval, err, errlen);
        } else {
            double all = (double)(train->total + val->total + n);
            PrepSplit *s = (double)val->total < o->val_fraction * all ? val : train;
            s->docs++;
            o->docs++;
            rc = split_put(s, ids, n, err, errlen);
        }
        if (rc != PP_OK) return rc;
        o->stream += n;
    }
    o->text_bytes += (long long)b->text_bytes;
    return PP_OK;
}

int prep_out_finish(PrepOut *o, int tokenizer, char *err, size_t errlen) {
    for (int k = 0; k < 2; k++) {
        int rc = o->s[k].open ? split_close(&o->s[k], err, errlen) : PP_OK;
        if (rc != PP_OK) return rc;
    }
    if (o->stream == 0 || (tokenizer && o->text_bytes == 0))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "the corpus is empty: %ld documents, and no "
                       "text in them",
                       o->docs);
    if (o->s[0].total == 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "--val-fraction %g took all %ld documents for validation, none is left "
                       "to train on: give more documents or a smaller fraction",
                       o->val_fraction, o->docs);
    return PP_OK;
}

int prep_out_commit(PrepOut *o, char *err, size_t errlen) {
    char part[PP_PATH_MAX], path[PP_PATH_MAX], dir[PP_PATH_MAX];
    for (int k = 0; k < 2; k++) {
        PrepSplit *s = &o->s[k];
        for (; s->committed < s->nfiles; s->committed++) {
            split_path(s, s->committed, 1, part, sizeof part);
            split_path(s, s->committed, 0, path, sizeof path);
            if (rename(part, path) != 0)
                return pp_errf(err, errlen, PP_ERUNTIME, "cannot rename %s to %s: %s", part, path,
                               strerror(errno));
        }
        if (!s->nfiles) continue;
        pp_dirname(path, dir, sizeof dir);
        if (pp_fsync_dir(dir) != 0)
            return pp_errf(err, errlen, PP_ERUNTIME, "cannot fsync directory %s: %s", dir,
                           strerror(errno));
    }
    return PP_OK;
}

void prep_out_abort(PrepOut *o) {
    char part[PP_PATH_MAX];
    for (int k = 0; k < 2; k++) {
        PrepSplit *s = &o->s[k];
        pp_file_abort(&s->pf);
        s->open = 0;
        for (int f = s->committed; f < s->nfiles; f++) {
            split_path(s, f, 1, part, sizeof part);
            unlink(part);
        }
        s->nfiles = s->committed;
    }
}

void prep_out_free(PrepOut *o) {
    for (int k = 0; k < 2; k++) free(o->s[k].buf);
}

/* A file of a split beyond those this run wrote, left by an earlier run: a warning. */
static void warn_stale(const PrepSplit *s) {
    char path[PP_PATH_MAX];
    struct stat st;
    split_path(s, s->nfiles, 0, path, sizeof path);
    if (s->sharded && stat(path, &st) == 0)
        pp_warn("prepare-data: %s is left from an earlier run (this one wrote %d %s files): "
                "remove it, and any after it, before reading %s_%s_*.bin",
                path, s->nfiles, s->split, s->name, s->split);
}

void prep_out_report(const PrepOut *o, const PrepArgs *a, const char *doc, int32_t vocab,
                     const Progress *g) {
    char what[PP_PATH_MAX + 256], first[PP_PATH_MAX], last[PP_PATH_MAX];
    int w = o->s[0].width;
    if (o->byte_level)
        snprintf(what, sizeof what, "byte-level, vocab 256, uint16, from %s",
                 a->ninputs == 1 ? a->inputs[0] : "the text files");
    else
        snprintf(what, sizeof what, "%s, vocab %d, uint%d, each document after %s", a->tokenizer,
                 vocab, 8 * w, doc);
    for (int k = 0; k < 2; k++) {
        const PrepSplit *s = &o->s[k];
        if (!s->nfiles) continue;
        char docs[64] = "";
        if (!o->byte_level && !o->one_doc)
            snprintf(docs, sizeof docs, " (%ld document%s)", s->docs, s->docs == 1 ? "" : "s");
        split_path(s, 0, 0, first, sizeof first);
        split_path(s, s->nfiles - 1, 0, last, sizeof last);
        if (s->nfiles == 1)
            printf("prepare-data: wrote %zu tokens%s to %s (%s)\n", s->total, docs, first, what);
        else
            printf("prepare-data: wrote %zu tokens%s to %d files %s .. %s (%s)\n", s->total, docs,
                   s->nfiles, first, last, what);
        warn_stale(s);
    }
    double dt = pp_now() - g->t0;
    dt = dt > 1e-9 ? dt : 1e-9;
    printf("prepare-data: %.1f MB of text, %zu tokens in %.2f s: %.2f MB/s, %.0f tokens/s "
           "(%d threads)\n",
           o->text_bytes / 1e6, o->stream, dt, o->text_bytes / 1e6 / dt, o->stream / dt,
           a->threads);
}

/* ---- progress --------------------------------------------------------------------- */

void progress_show(Progress *g, const PrepOut *o, int last) {
    double now = pp_now(), every = g->tty ? 0.5 : 10;
    if (!g->next) g->next = g->t0 + every;
    if (last ? !(g->tty && g->shown) : now < g->next) return;
    g->next = now + every;
    g->shown = 1;
    double dt = now - g->t0 > 1e-9 ? now - g->t0 : 1e-9, rate = g->in_done / dt;
    char of[64] = "", eta[64] = "";
    if (g->total > 0) {
        snprintf(of, sizeof of, " of %.1f MB (%.1f%%)", g->total / 1e6,
                 100.0 * g->in_done / g->total);
        if (rate > 0 && !last) {
            long s = (long)((g->total - g->in_done) / rate);
            snprintf(eta, sizeof eta, ", ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
        }
    }
    fprintf(stderr, "%sprepare-data: %.1f MB%s%s, %.2f MB/s, %.0f tokens/s%s%s", g->tty ? "\r" : "",
            g->in_done / 1e6, g->total > 0 ? "" : " read", of, rate / 1e6, o->stream / dt, eta,
            g->tty && !last ? "   " : "\n");
}
