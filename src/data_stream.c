/* data_stream.c — token files read in order as one stream of batches ([Note: shard
 * streams]). */
#include "data_stream.h"

#include <errno.h>
#include <inttypes.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* [Note: shard streams] data.train and data.val are streams of one or more token files
 * (shards), read in order the way llm.c's DataLoader reads a glob of shards
 * (llmc/dataloader.h): each shard gives floor((ntok - 1) / (B*T)) batches of B*T tokens
 * (and one more target) from its start, the tokens left at a shard's end are not read (a
 * batch never straddles two shards; a shard too short for one batch gives none, where llm.c
 * asserts), and after the last shard the stream starts again at the first, a new pass. A
 * single file is a stream of one shard: exactly data_batch's order. llm.c walks this with a
 * cursor (shard, sample) that its resume restores; here batch n is a pure function of n
 * (the shard whose batches hold n mod the batches of a pass, by binary search over the
 * shards' first batches), so a run resumed at step n reads what the run that never stopped
 * would have read, and the checkpoint's record of the stream (ckpt_state.c) only checks
 * that the stream is still the one it was. A data-parallel replica reads the global batch
 * and keeps its share (load_batch in runtime.c), as llm.c's processes read their slices
 * of the same window of B*T*processes tokens.
 *
 * Validation is lazy after the first shard. Opening a stream reads each shard's header
 * and size (an open and a 1 KiB read each: a missing, truncated or foreign file, or
 * uint16 and uint32 shards mixed, fail at the start with exit 2) and validates the first
 * shard whole (data_open: every id below model.vocab_size, each block's CRC), where a
 * wrong tokenizer shows. Every other shard is validated whole when a batch first needs it
 * (a 200 MB shard in a fraction of a second, once a pass): the start does not read the
 * whole data set (hundreds of 100M-token shards are tens of GB), and a bad id in a later
 * shard ends the run there with exit 1 and the checkpoint of the last good step ([Note: a
 * batch that cannot be read] in runtime.c). At most DATA_STREAM_OPEN shards are open at
 * once (a descriptor, a CRC table of 4 bytes per 16 KiB, a batch buffer), the least
 * recently read closed first, so memory does not grow with the number of shards, and a
 * validation pass over up to that many shards validates them once a run. An open shard is
 * read through its descriptor as a single file is ([Note: checked batch reads] in data.c);
 * a shard opened again (the next pass, or after it was closed) must hold what it held
 * before (its header and size at the start, and the CRC of its block CRCs once it was read
 * whole), else its batches fail as a file changed under the run. */

#define GLOB_CHARS "*?["

/* Append shard `path` (its header checked) to s. */
static int add_shard(DataStream *s, const char *path, char *err, size_t errlen) {
    size_t ntok = 0;
    long long bytes = 0;
    int w = 0, rc = data_peek(path, &ntok, &w, &bytes, err, errlen);
    if (rc != PP_OK) return rc;
    if (s->nshards && w != s->width)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: shard '%s' holds %s tokens but shard '%s' holds %s tokens: the "
                       "shards of one stream must all have one width (prepare them with one "
                       "tokenizer)",
                       s->key, s->shards[0].path, s->width == 2 ? "uint16" : "uint32", path,
                       w == 2 ? "uint16" : "uint32");
    if ((s->nshards & (s->nshards - 1)) == 0) { /* 0, 1, 2, 4, ...: double the room */
        s->shards = realloc(s->shards,
                            (size_t)(s->nshards ? 2 * s->nshards : 1) * sizeof *s->shards);
        PP_CHECK(s->shards);
    }
    DataShard *sh = &s->shards[s->nshards++];
    *sh = (DataShard){.path = strdup(path), .ntok = ntok, .bytes = bytes};
    PP_CHECK(sh->path);
    s->width = w;
    s->ntok += ntok;
    return PP_OK;
}

/* Append the shards of one pattern: the file itself, or the files its glob matches. */
static int add_pattern(DataStream *s, const char *pat, char *err, size_t errlen) {
    struct stat st;
    if (!strpbrk(pat, GLOB_CHARS) || stat(pat, &st) == 0) return add_shard(s, pat, err, errlen);
    glob_t g;
    int grc = glob(pat, GLOB_ERR, NULL, &g), rc = PP_OK;
    if (grc == GLOB_NOMATCH)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: no file matches '%s' (a glob, expanded in sorted order): check the "
                       "path, or create the shards (`pptrain prepare-data ... --shard-tokens N`)",
                       s->key, pat);
    if (grc == GLOB_ABORTED)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: cannot expand '%s': a directory on its way cannot be read", s->key,
                       pat);
    if (grc != 0)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: cannot expand '%s' (glob(3) error %d)", s->key,
                       pat, grc);
    for (size_t i = 0; rc == PP_OK && i < g.gl_pathc; i++)
        rc = add_shard(s, g.gl_pathv[i], err, errlen);
    globfree(&g);
    return rc;
}

/* The CRC-32 of an open DataSet's block CRCs: what it held when it was read whole. */
static uint32_t shard_sum(const DataSet *d) {
    return (uint32_t)crc32_z(0, (const unsigned char *)d->crc, d->nblocks * sizeof *d->crc);
}

/* Open and validate shard i into slot k (empty): PP_OK, or an error of data_open, or
 * PP_ERUNTIME when the shard is not what it was (its header and size at the start, its
 * bytes when it was read whole before). */
static int open_slot(DataStream *s, int i, int k, char *err, size_t errlen) {
    DataShard *sh = &s->shards[i];
    DataSet *d = &s->open[k];
    int rc = data_open(d, sh->path, s->vocab_size, err, errlen);
    if (rc != PP_OK) return rc;
    const char *what = NULL;
    if (d->ntok != sh->ntok || d->bytes != sh->bytes || d->width != s->width)
        what = "its header or size";
    else if (sh->validated && shard_sum(d) != sh->sum)
        what = "its tokens";
    if (what) {
        rc = pp_errf(err, errlen, PP_ERUNTIME,
                     "data file '%s' changed under the run: %s differ from when the run first "
                     "read it (%zu tokens, %lld bytes then; %zu tokens, %lld bytes now); a shard "
                     "must not change while a run reads its stream: restore it",
                     sh->path, what, sh->ntok, sh->bytes, d->ntok, d->bytes);
        data_close(d);
        return rc;
    }
    if (s->B && (rc = data_check_batch(d, s->B, s->T, err, errlen)) != PP_OK) {
        data_close(d);
        return rc;
    }
    sh->sum = shard_sum(d);
    sh->validated = 1;
    s->open_shard[k] = i;
    s->open_used[k] = ++s->tick;
    return PP_OK;
}

int data_stream_open(DataStream *s, const char *key, const char *patterns, int vocab_size,
                     char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    for (int k = 0; k < DATA_STREAM_OPEN; k++) s->open[k].fd = -1;
    snprintf(s->key, sizeof s->key, "%s", key);
    s->vocab_size = vocab_size;
    s->news = -1;
    int rc = PP_OK;
    for (const char *p = patterns; *p && rc == PP_OK; p += strlen(p) + 1)
        rc = add_pattern(s, p, err, errlen);
    if (rc == PP_OK && !s->nshards) rc = pp_errf(err, errlen, PP_EUSAGE, "%s names no file", key);
    if (rc == PP_OK) rc = open_slot(s, 0, 0, err, errlen);
    if (rc != PP_OK) data_stream_close(s);
    return rc;
}

void data_stream_close(DataStream *s) {
    for (int k = 0; k < DATA_STREAM_OPEN; k++) data_close(&s->open[k]);
    for (int i = 0; i < s->nshards; i++) free(s->shards[i].path);
    free(s->shards);
    memset(s, 0, sizeof *s);
    for (int k = 0; k < DATA_STREAM_OPEN; k++) s->open[k].fd = -1;
    s->news = -1;
}

int data_stream_check_batch(DataStream *s, int B, int T, char *err, size_t errlen) {
    PP_CHECK(s->nshards > 0 && B > 0 && T > 0);
    size_t bt = (size_t)B * (size_t)T;
    long total = 0;
    int largest = 0;
    for (int i = 0; i < s->nshards; i++) {
        DataShard *sh = &s->shards[i];
        sh->first = total;
        sh->nbatches = sh->ntok < bt + 1 ? 0 : (long)((sh->ntok - 1) / bt);
        total += sh->nbatches;
        if (sh->ntok > s->shards[largest].ntok) largest = i;
    }
    if (total < 1 && s->nshards == 1) return data_check_batch(&s->open[0], B, T, err, errlen);
    if (total < 1)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: none of its %d shards holds one batch (batch_size * seq_len + 1 = "
                       "%d * %d + 1 = %lld tokens): the largest, '%s', has %zu tokens; use "
                       "bigger shards or lower train.batch_size / train.seq_len",
                       s->key, s->nshards, B, T, (long long)bt + 1, s->shards[largest].path,
                       s->shards[largest].ntok);
    s->B = B;
    s->T = T;
    s->nbatches = total;
    for (int k = 0; k < DATA_STREAM_OPEN; k++) {
        DataSet *d = &s->open[k];
        if (d->crc && s->shards[s->open_shard[k]].nbatches > 0)
            PP_CHECK(data_check_batch(d, B, T, err, errlen) == PP_OK);
    }
    return PP_OK;
}

void data_stream_locate(const DataStream *s, long n, int *shard, size_t *tok) {
    PP_CHECK(s->nbatches >= 1 && n >= 0);
    long m = n % s->nbatches;
    /* the last shard whose first batch is <= m: shards that give no batch share their
     * first with the next one, or lie past every m at the end */
    int lo = 0, hi = s->nshards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (s->shards[mid].first <= m) lo = mid;
        else hi = mid - 1;
    }
    const DataShard *sh = &s->shards[lo];
    PP_CHECK(m < sh->first + sh->nbatches);
    *shard = lo;
    *tok = (size_t)(m - sh->first) * (size_t)s->B * (size_t)s->T;
}

/* The open DataSet of shard i: a slot holding it, or the least recently read slot, closed
 * and given shard i (validated now; batch n, for messages, is the one that needs it). */
static int shard_set(DataStream *s, int i, long n, DataSet **out, char *err, size_t errlen) {
    int k, pick = 0;
    for (k = 0; k < DATA_STREAM_OPEN; k++) {
        if (s->open[k].crc && s->open_shard[k] == i) break;
        if (!s->open[k].crc) s->open_used[k] = 0; /* an empty slot goes first */
        if (s->open_used[k] < s->open_used[pick]) pick = k;
    }
    if (k == DATA_STREAM_OPEN) {
        char why[PP_ERR_MAX];
        double t0 = pp_now();
        k = pick;
        data_close(&s->open[k]);
        if (open_slot(s, i, k, why, sizeof why) != PP_OK)
            return pp_errf(err, errlen, PP_ERUNTIME, "%s shard %d of %d, needed by batch %ld: %s",
                           s->key, i + 1, s->nshards, n, why);
        s->news = i;
        s->news_batch = n;
        s->news_s = pp_now() - t0;
    }
    s->open_used[k] = ++s->tick;
    *out = &s->open[k];
    return PP_OK;
}

int data_stream_batch(DataStream *s, long n, int *inputs, int *targets, char *err, size_t errlen) {
    int i;
    size_t tok, bt = (size_t)s->B * (size_t)s->T;
    data_stream_locate(s, n, &i, &tok);
    DataSet *d = NULL;
    int rc = shard_set(s, i, n, &d, err, errlen);
    if (rc == PP_OK)
        return data_batch(d, (long)(tok / bt), s->B, s->T, inputs, targets, err, errlen);
    memset(inputs, 0, bt * sizeof *inputs);
    memset(targets, 0, bt * sizeof *targets);
    return rc;
}

const char *data_stream_name(const DataStream *s, int i) {
    const char *slash = strrchr(s->shards[i].path, '/');
    return slash ? slash + 1 : s->shards[i].path;
}

uint64_t data_stream_hash(const DataStream *s) {
    uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 offset basis */
    for (int i = 0; i < s->nshards; i++) {
        const char *name = data_stream_name(s, i);
        unsigned char rec[9];
        uint64_t ntok = s->shards[i].ntok;
        for (int b = 0; b < 8; b++) rec[b] = (unsigned char)(ntok >> (8 * b));
        rec[8] = (unsigned char)s->width;
        for (size_t k = 0; k <= strlen(name); k++)
            h = (h ^ (unsigned char)name[k]) * 1099511628211ULL;
        for (int b = 0; b < 9; b++) h = (h ^ rec[b]) * 1099511628211ULL;
    }
    return h;
}

void data_stream_describe(const DataStream *s, char *buf, size_t n) {
    int skipped = 0, first_skipped = -1;
    for (int i = s->nshards - 1; s->B && i >= 0; i--)
        if (!s->shards[i].nbatches) skipped++, first_skipped = i;
    size_t len;
    if (s->nshards == 1)
        len = (size_t)snprintf(buf, n, "%s: '%s'", s->key, s->shards[0].path);
    else
        len = (size_t)snprintf(buf, n, "%s: %d shards ('%s' .. '%s', in this order)", s->key,
                               s->nshards, s->shards[0].path, s->shards[s->nshards - 1].path);
    if (len < n)
        len += (size_t)snprintf(buf + len, n - len,
                                ", %zu %s tokens, %ld batches of %d x %d a pass", s->ntok,
                                s->width == 2 ? "uint16" : "uint32", s->nbatches, s->B, s->T);
    if (len < n && skipped)
        len += (size_t)snprintf(buf + len, n - len,
                                "; %d shard(s) shorter than one batch skipped (the first: '%s')",
                                skipped, s->shards[first_skipped].path);
    if (len < n && s->nshards > 1)
        snprintf(buf + len, n - len, "; the first shard is validated, the others when first read");
}

int data_stream_news(DataStream *s, char *buf, size_t n) {
    if (s->news < 0) return 0;
    const DataShard *sh = &s->shards[s->news];
    snprintf(buf, n,
             "%s: batch %ld opens shard %d of %d, '%s' (%zu tokens, %ld batches): validated in "
             "%.2f s",
             s->key, s->news_batch, s->news + 1, s->nshards, sh->path, sh->ntok, sh->nbatches,
             s->news_s);
    s->news = -1;
    return 1;
}

void data_stream_patterns_text(const char *patterns, char *buf, size_t n) {
    int count = 0;
    for (const char *p = patterns; *p; p += strlen(p) + 1) count++;
    if (count == 1 && !strpbrk(patterns, GLOB_CHARS)) {
        snprintf(buf, n, "data file '%s'", patterns);
        return;
    }
    const char *second = patterns + strlen(patterns) + 1;
    if (count == 1)
        snprintf(buf, n, "data files '%s'", patterns);
    else if (count == 2)
        snprintf(buf, n, "data files '%s', '%s'", patterns, second);
    else
        snprintf(buf, n, "data files '%s', '%s' (and %d more)", patterns, second, count - 2);
}

/* [Note: stream records] A checkpoint keeps one line about data.train at the step it
 * was saved (the manifest's data_train entry, ckpt_state.c): the stream's identity (shard
 * count, tokens, width, data_stream_hash) and where the next batch lies (its index, its
 * shard's index, the token there, the shard's file name). Resuming needs none of it
 * ([Note: shard streams]: batch n is a function of n); it is there to say when the stream
 * given now is not the one the run was reading. A resume compares where batch n lies now
 * with where it lay then: the same file and token is the same place (if the shard list
 * changed elsewhere, a line says so: shards appended to a glob as they are prepared change
 * nothing before them); another place gets a warning that names both and what to restore
 * (data.train, or train.batch_size / seq_len, which move every batch), and the run goes
 * on from the new place, as Megatron-LM (its consumed-sample count) and llm.c (its shard
 * and sample index) go on with whatever data they are given: changing the data mix at a
 * resume is a thing users do on purpose. A checkpoint from before these records is
 * resumed as before, with a line saying that its position is not checked. */

void data_stream_record(const DataStream *s, long n, char *buf, size_t len) {
    int i;
    size_t tok;
    data_stream_locate(s, n, &i, &tok);
    snprintf(buf, len,
             "shards=%d tokens=%zu width=%d hash=%016" PRIx64 " batch=%ld shard=%d token=%zu "
             "file=%s",
             s->nshards, s->ntok, s->width, data_stream_hash(s), n, i, tok, data_stream_name(s, i));
}

/* A record's fields (data_stream_record's line). 0 when it reads whole. */
typedef struct {
    int nshards, width, shard;
    size_t ntok, tok;
    uint64_t hash;
    long batch;
    const char *file; /* into the record */
} Record;

/* The fields of record r into *x: 0 when it reads whole and holds what a stream can
 * (a shard count >= 1, a shard index below it, a width of 2 or 4, no negative batch or
 * token, a file name), -1 otherwise (a hand-edited manifest). */
static int parse_record(const char *r, Record *x) {
    int used = 0;
    long long ntok, tok;
    if (sscanf(r, "shards=%d tokens=%lld width=%d hash=%" SCNx64 " batch=%ld shard=%d token=%lld "
                  "file=%n",
               &x->nshards, &ntok, &x->width, &x->hash, &x->batch, &x->shard, &tok,
               &used) != 7 ||
        !used || !r[used])
        return -1;
    if (x->nshards < 1 || x->shard < 0 || x->shard >= x->nshards ||
        (x->width != 2 && x->width != 4) || x->batch < 0 || ntok < 0 || tok < 0 || tok >= ntok)
        return -1;
    x->ntok = (size_t)ntok;
    x->tok = (size_t)tok;
    x->file = r + used;
    return 0;
}

DataRecordMatch data_stream_compare(const DataStream *s, long n, const char *record, char *msg,
                                    size_t len) {
    int i;
    size_t tok;
    Record x;
    data_stream_locate(s, n, &i, &tok);
    const char *name = data_stream_name(s, i);
    char now[PP_PATH_MAX + 128];
    snprintf(now, sizeof now, "shard %d of %d '%s' at token %zu", i + 1, s->nshards, name, tok);
    if (!record) {
        snprintf(msg, len, "%s: the checkpoint has no record of its data stream (it is older): "
                 "batch %ld is read from %s, not checked against the run that wrote it",
                 s->key, n, now);
        return DATA_RECORD_NONE;
    }
    if (parse_record(record, &x) != 0) {
        snprintf(msg, len, "%s: the checkpoint's record of its data stream '%.200s' cannot be "
                 "read (the manifest was edited?): batch %ld is read from %s, unchecked",
                 s->key, record, n, now);
        return DATA_RECORD_MOVED;
    }
    int same = x.hash == data_stream_hash(s) && x.nshards == s->nshards && x.ntok == s->ntok &&
               x.width == s->width;
    int here = x.batch == n && x.tok == tok && !strcmp(x.file, name);
    char then[PP_PATH_MAX + 160];
    snprintf(then, sizeof then, "%d shard(s), %zu tokens then; %d shard(s), %zu tokens now",
             x.nshards, x.ntok, s->nshards, s->ntok);
    if (same && here) {
        snprintf(msg, len, "%s: batch %ld is read from %s, as the run that wrote the checkpoint "
                 "would have", s->key, n, now);
        return DATA_RECORD_SAME;
    }
    if (here) {
        snprintf(msg, len, "%s is not the stream the checkpoint was written with (%s), but batch "
                 "%ld is where it was: %s", s->key, then, n, now);
        return DATA_RECORD_CHANGED;
    }
    snprintf(msg, len, "%s is not where the checkpoint left it: batch %ld was shard %d of %d "
             "'%s' at token %zu and is now %s (%s); the run goes on from there, and its batches "
             "differ from those of the run that wrote the checkpoint. To continue that run's "
             "data, resume with its data.train (and train.batch_size and train.seq_len)",
             s->key, x.batch, x.shard + 1, x.nshards, x.file, x.tok, now, then);
    return DATA_RECORD_MOVED;
}
