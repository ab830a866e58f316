/* data.c — token files in llm.c's .bin format: open and check, batches, atomic writing. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The header and tokens are read and written in host order, which must be the
 * little-endian order of the format. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data.c assumes a little-endian host (llm.c's .bin files are little-endian)"
#endif

/* Appended to every message about a bad file; the argument is the file's path. */
#define DATA_HINT                                                                                  \
    "; regenerate it with `pptrain prepare-data --text FILE --out %s` (or llm.c's data scripts)"

/* ---- reading ---------------------------------------------------------------- */

/* The token width that the header h names: 2 (uint16) or 4 (uint32) bytes, 0 for
 * neither of llm.c's formats. */
static int header_width(const int32_t *h) {
    if (h[0] == DATA_MAGIC && h[1] == DATA_VERSION) return 2;
    if (h[0] == DATA_MAGIC32 && h[1] == DATA_VERSION32) return 4;
    return 0;
}

static const char *width_name(int w) { return w == 2 ? "uint16" : "uint32"; }

/* Check the header h of a file of `size` bytes (size >= DATA_HEADER_BYTES): PP_OK with
 * the token width in *width, or PP_EUSAGE. */
static int check_header(const char *path, const int32_t *h, long long size, int *width, char *err,
                        size_t errlen) {
    int w = header_width(h);
    if (!w)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' is not a token file pptrain reads: its magic number is %d "
                       "and its version %d, but llm.c's .bin token files have magic %d version "
                       "%d (uint16 tokens) or magic %d version %d (uint32 tokens, its Llama 3 "
                       "files)" DATA_HINT,
                       path, h[0], h[1], DATA_MAGIC, DATA_VERSION, DATA_MAGIC32, DATA_VERSION32,
                       path);
    if (h[2] < 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' has a negative token count (%d) in its header" DATA_HINT,
                       path, h[2], path);
    long long want = DATA_HEADER_BYTES + (long long)w * h[2];
    /* a body of the other width (6 - w bytes): the magic does not match the tokens */
    char other[128] = "";
    if (h[2] > 0 && size == DATA_HEADER_BYTES + (long long)(6 - w) * h[2])
        snprintf(other, sizeof other,
                 " (it is the size of %d %s tokens: the magic number does not match the tokens)",
                 h[2], width_name(6 - w));
    if (size < want)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' is truncated: it is %lld bytes, but its header says %d %s "
                       "tokens, which need %d + %d*%d = %lld bytes%s" DATA_HINT,
                       path, size, h[2], width_name(w), DATA_HEADER_BYTES, w, h[2], want, other,
                       path);
    if (size > want)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' has %lld trailing bytes: it is %lld bytes, but its "
                       "header says %d %s tokens, which need %d + %d*%d = %lld bytes%s" DATA_HINT,
                       path, size - want, size, h[2], width_name(w), DATA_HEADER_BYTES, w, h[2],
                       want, other, path);
    *width = w;
    return PP_OK;
}

/* [Note: checked batch reads] A run reads its token files for days, and nothing
 * stops another program from writing them meanwhile. So the file is read with pread
 * through the descriptor opened at the start, never mapped (a mapping of a file
 * truncated under it faults with SIGBUS), and what data_open validated is what every
 * batch gets, or the batch is an error:
 *   - the size: fstat before each batch; a file that shrank or grew has changed;
 *   - the bytes: data_open checks every id against vocab_size (and a uint32 id against
 *     2^31, the ints a batch holds) and keeps the CRC-32 of each DATA_BLOCK_BYTES block;
 *     a batch reads the blocks it spans whole and compares them, so a batch is only ever
 *     what was checked at open, and no op sees an id out of range whatever the file holds
 *     now (the embedding and the classifier index with them unchecked, on CPU and GPU). A
 *     block that differs is an error, naming the first id out of range when the change
 *     made one, else the changed bytes.
 * Both token widths are read alike: a block holds whole tokens of either (DATA_BLOCK_BYTES
 * and the header are multiples of 4), and a token's byte offset is header + width*index.
 * A file replaced by a rename (data_write, or any careful writer) is another inode: the
 * open descriptor still reads the old one, and the run goes on unchanged. The cost per
 * batch is one fstat, a copy of at most width*(B*T + 1) + 2*DATA_BLOCK_BYTES bytes and
 * a CRC over them (about 4 GB/s): microseconds against a step's milliseconds. What the run
 * does with the error is the runtime's ([Note: a batch that cannot be read] in
 * runtime.c). */

/* Read n bytes at off into p: the count read (short only at the end of the file), or -1
 * with errno. */
static long long read_at(int fd, void *p, size_t n, long long off) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)p + done, n - done, (off_t)(off + (long long)done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        done += (size_t)r;
    }
    return (long long)done;
}

/* Bytes of block k of a file of `bytes` bytes. */
static size_t block_len(long long bytes, size_t k) {
    long long from = (long long)k * DATA_BLOCK_BYTES, left = bytes - from;
    return (size_t)(left < DATA_BLOCK_BYTES ? left : DATA_BLOCK_BYTES);
}

/* Token i of the tokens of width w (2 or 4 bytes) at p. */
static inline uint32_t tok_at(const unsigned char *p, int w, size_t i) {
    return w == 2 ? ((const uint16_t *)p)[i] : ((const uint32_t *)p)[i];
}

/* What every id of d must be below: vocab_size, or 2^31 (an int) when it is 0. */
static uint32_t id_limit(const DataSet *d) {
    return d->vocab_size > 0 ? (uint32_t)d->vocab_size : UINT32_C(1) << 31;
}

/* "model.vocab_size = V" or "2^31 = ...": id_limit(d) in words, for messages. */
static const char *id_limit_text(const DataSet *d, char *buf, size_t n) {
    if (d->vocab_size > 0) snprintf(buf, n, "model.vocab_size = %d", d->vocab_size);
    else snprintf(buf, n, "2^31 = 2147483648 (an int holds no larger id)");
    return buf;
}

/* Index of the first token >= limit among the n tokens of width w at p, or n. */
static size_t first_bad_token(const unsigned char *p, int w, size_t n, uint32_t limit) {
    uint32_t mx = 0;
    if (w == 2) {
        const uint16_t *t = (const uint16_t *)p;
#pragma omp simd reduction(max : mx)
        for (size_t i = 0; i < n; i++) mx = t[i] > mx ? t[i] : mx;
    } else {
        const uint32_t *t = (const uint32_t *)p;
#pragma omp simd reduction(max : mx)
        for (size_t i = 0; i < n; i++) mx = t[i] > mx ? t[i] : mx;
    }
    if (mx < limit) return n;
    size_t i = 0;
    while (tok_at(p, w, i) < limit) i++;
    return i;
}

/* The tokens of width w of a block that starts at file byte `from` (the header is no
 * token): *ntok of them, the first being token *first of the file. */
static const unsigned char *block_tokens(const unsigned char *blk, long long from, size_t len,
                                         int w, size_t *ntok, size_t *first) {
    size_t skip = from < DATA_HEADER_BYTES ? (size_t)(DATA_HEADER_BYTES - from) : 0;
    skip = skip < len ? skip : len;
    *ntok = (len - skip) / (size_t)w;
    *first = (size_t)((from + (long long)skip - DATA_HEADER_BYTES) / w);
    return blk + skip;
}

/* Read the whole file once: each block's CRC into d->crc, and the index of the first
 * token >= id_limit(d) into *bad (d->ntok if none). The blocks are read in parallel; the
 * minimum index is exact, so the answer does not depend on the thread count. Returns PP_OK
 * or PP_ERUNTIME (a read failed or came up short: the file changed while being read). */
static int scan_file(DataSet *d, const char *path, size_t *bad, char *err, size_t errlen) {
    size_t nb = d->nblocks, first_bad = d->ntok, failed = nb;
    uint32_t limit = id_limit(d);
    int check = d->width == 4 || limit <= UINT16_MAX; /* else every uint16 id is below */
#pragma omp parallel if (nb > 16)
    {
        unsigned char *blk = pp_malloc(DATA_BLOCK_BYTES);
#pragma omp for schedule(static) reduction(min : first_bad, failed)
        for (size_t k = 0; k < nb; k++) {
            size_t len = block_len(d->bytes, k), n, t0;
            long long from = (long long)k * DATA_BLOCK_BYTES;
            if (read_at(d->fd, blk, len, from) != (long long)len) {
                failed = k < failed ? k : failed;
                continue;
            }
            d->crc[k] = (uint32_t)crc32_z(0, blk, len);
            const unsigned char *tok = block_tokens(blk, from, len, d->width, &n, &t0);
            size_t i = check ? first_bad_token(tok, d->width, n, limit) : n;
            if (i < n && t0 + i < first_bad) first_bad = t0 + i;
        }
        free(blk);
    }
    *bad = first_bad;
    if (failed == nb) return PP_OK;
    long long from = (long long)failed * DATA_BLOCK_BYTES;
    unsigned char *blk = pp_malloc(DATA_BLOCK_BYTES); /* again, for errno */
    long long got = read_at(d->fd, blk, block_len(d->bytes, failed), from);
    int e = errno;
    free(blk);
    if (got < 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot read data file '%s' at byte %lld: %s",
                       path, from, strerror(e));
    return pp_errf(err, errlen, PP_ERUNTIME,
                   "data file '%s' changed while it was being opened: it ended at byte %lld, %lld "
                   "bytes before the end it had; write token files under another name and rename "
                   "them into place (as prepare-data does)",
                   path, from + got, d->bytes - from - got);
}

/* Open path: a regular file of at least the header's size, its header read into h and
 * its size into *size. Returns the descriptor, or -1 with a PP_EUSAGE message in err. */
static int open_file(const char *path, int32_t *h, long long *size, char *err, size_t errlen) {
    struct stat st;
    int fd = pp_open_regular(path, &st); /* a FIFO must not block the open */
    if (fd == -2)
        return pp_errf(err, errlen, PP_EUSAGE, "data file '%s' is %s, not a regular file: point "
                       "data.train / data.val at a token file (llm.c's .bin format)", path,
                       pp_file_kind(st.st_mode)), -1;
    if (fd < 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "cannot open data file '%s': %s; check data.train / data.val, or create "
                       "it with `pptrain prepare-data --text FILE --out %s` (`make data` makes "
                       "data/tiny)",
                       path, strerror(errno), path), -1;
    *size = st.st_size;
    if (*size < DATA_HEADER_BYTES || read_at(fd, h, DATA_HEADER_BYTES, 0) != DATA_HEADER_BYTES) {
        close(fd);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' is truncated or not a token file: it is %lld bytes, "
                       "shorter than the %d-byte header" DATA_HINT,
                       path, *size, DATA_HEADER_BYTES, path), -1;
    }
    return fd;
}

int data_open(DataSet *d, const char *path, int vocab_size, char *err, size_t errlen) {
    int32_t h[DATA_HEADER_INTS];
    long long size = 0;
    size_t bad;
    memset(d, 0, sizeof *d);
    d->fd = -1;
    if (strlen(path) >= sizeof d->path)
        return pp_errf(err, errlen, PP_EUSAGE, "data file path is too long: '%s'", path);
    int fd = open_file(path, h, &size, err, errlen);
    if (fd < 0) return PP_EUSAGE;
    int w = 0;
    int rc = check_header(path, h, size, &w, err, errlen);
    if (rc != PP_OK) {
        close(fd);
        return rc;
    }
    *d = (DataSet){.fd = fd, .ntok = (size_t)h[2], .width = w, .bytes = size,
                   .vocab_size = vocab_size,
                   .nblocks = (size_t)((size + DATA_BLOCK_BYTES - 1) / DATA_BLOCK_BYTES)};
    d->crc = pp_malloc(d->nblocks * sizeof *d->crc);
    rc = scan_file(d, path, &bad, err, errlen);
    if (rc == PP_OK && bad < d->ntok) {
        uint32_t tok = 0; /* little-endian: a uint16 read fills its low half */
        long long at = DATA_HEADER_BYTES + (long long)w * (long long)bad;
        char lim[64];
        read_at(fd, &tok, (size_t)w, at);
        rc = pp_errf(err, errlen, PP_EUSAGE,
                     "data file '%s': token %zu (byte offset %lld) is %u, not below %s; %s", path,
                     bad, at, (unsigned)tok, id_limit_text(d, lim, sizeof lim),
                     vocab_size > 0 ? "the file was made with a larger vocabulary: set "
                                      "model.vocab_size to its tokenizer's (256 for prepare-data "
                                      "files, 50257 for GPT-2, 128256 for Llama 3) or re-tokenize "
                                      "the text for this model"
                                    : "no vocabulary is that large: the file is damaged");
    }
    if (rc != PP_OK) {
        data_close(d);
        return rc;
    }
    strcpy(d->path, path);
    return PP_OK;
}

int data_peek(const char *path, size_t *ntok, int *width, long long *bytes, char *err,
              size_t errlen) {
    int32_t h[DATA_HEADER_INTS];
    if (strlen(path) >= PP_PATH_MAX)
        return pp_errf(err, errlen, PP_EUSAGE, "data file path is too long: '%s'", path);
    int fd = open_file(path, h, bytes, err, errlen);
    if (fd < 0) return PP_EUSAGE;
    close(fd);
    int rc = check_header(path, h, *bytes, width, err, errlen);
    if (rc == PP_OK) *ntok = (size_t)h[2];
    return rc;
}

void data_close(DataSet *d) {
    if (d->crc) close(d->fd); /* an open DataSet always has a block (the header's) */
    free(d->crc);
    free(d->buf);
    memset(d, 0, sizeof *d);
    d->fd = -1;
}

long data_num_batches(const DataSet *d, int B, int T) {
    size_t bt = (size_t)B * (size_t)T;
    if (B <= 0 || T <= 0 || d->ntok < bt + 1) return 0;
    return (long)((d->ntok - 1) / bt);
}

int data_check_batch(DataSet *d, int B, int T, char *err, size_t errlen) {
    if (data_num_batches(d, B, T) < 1)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' has %zu tokens, fewer than one batch needs (batch_size * "
                       "seq_len + 1 = %d * %d + 1 = %lld); use a bigger file or lower "
                       "train.batch_size / train.seq_len",
                       d->path, d->ntok, B, T, (long long)B * T + 1);
    /* B*T + 1 tokens from any token's offset span at most this many whole blocks */
    size_t span = (size_t)d->width * ((size_t)B * T + 1);
    size_t need = ((span + DATA_BLOCK_BYTES - 1) / DATA_BLOCK_BYTES + 1) * DATA_BLOCK_BYTES;
    if (need > d->buf_bytes) {
        free(d->buf);
        d->buf = pp_malloc(need);
        d->buf_bytes = need;
    }
    return PP_OK;
}

/* Appended to every message about a file changed under the run. */
#define DATA_CHANGED_HINT                                                                          \
    "; a token file must not be written while a run reads it (write a new one under "              \
    "another name and rename it into place): restore the file"

/* The message for a file now `now` bytes long while reading batch n, tokens t0 .. t1. */
static int changed_size(const DataSet *d, long long now, long n, size_t t0, size_t t1, char *err,
                        size_t errlen) {
    long long w = d->width, lo = DATA_HEADER_BYTES + w * (long long)t0;
    return pp_errf(err, errlen, PP_ERUNTIME,
                   "data file '%s' changed under the run: it was %lld bytes when opened and is "
                   "%lld bytes now (reading batch %ld (tokens %zu..%zu, bytes "
                   "%lld..%lld))" DATA_CHANGED_HINT,
                   d->path, d->bytes, now, n, t0, t1, lo, lo + w * (long long)(t1 - t0 + 1) - 1);
}

/* data_batch, except that inputs and targets are left as they are on an error. */
static int read_batch(DataSet *d, long n, long nb, size_t bt, int *inputs, int *targets, char *err,
                      size_t errlen) {
    size_t t0 = (size_t)(n % nb) * bt, t1 = t0 + bt;
    int w = d->width;
    /* tokens t0 .. t1 are bytes lo .. hi - 1, in blocks k0 .. k1, bytes from .. to - 1 */
    long long lo = DATA_HEADER_BYTES + (long long)w * (long long)t0;
    long long hi = lo + (long long)w * (long long)(bt + 1);
    size_t k0 = (size_t)(lo / DATA_BLOCK_BYTES), k1 = (size_t)((hi - 1) / DATA_BLOCK_BYTES);
    long long from = (long long)k0 * DATA_BLOCK_BYTES, to = (long long)(k1 + 1) * DATA_BLOCK_BYTES;
    to = to < d->bytes ? to : d->bytes;
    PP_CHECK(to - from <= (long long)d->buf_bytes); /* data_check_batch made room */
    struct stat st;
    long long got = -1;
    if (fstat(d->fd, &st) == 0) {
        if (st.st_size != d->bytes) return changed_size(d, st.st_size, n, t0, t1, err, errlen);
        got = read_at(d->fd, d->buf, (size_t)(to - from), from);
    }
    if (got < 0)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "cannot read data file '%s' (batch %ld, bytes %lld..%lld): %s", d->path, n,
                       lo, hi - 1, strerror(errno));
    if (got < to - from) /* it shrank since the fstat */
        return changed_size(d,
                            fstat(d->fd, &st) == 0 && st.st_size != d->bytes ? st.st_size
                                                                             : from + got,
                            n, t0, t1, err, errlen);
    const unsigned char *tok = d->buf + (lo - from);
    /* blocks as they were at open, whose ids were checked then: nothing more to check */
    for (size_t k = k0; k <= k1; k++) {
        long long at = (long long)k * DATA_BLOCK_BYTES;
        size_t len = block_len(d->bytes, k);
        if ((uint32_t)crc32_z(0, d->buf + (at - from), len) == d->crc[k]) continue;
        size_t bad = first_bad_token(tok, w, bt + 1, id_limit(d));
        char lim[64];
        if (bad <= bt) /* the more telling message */
            return pp_errf(err, errlen, PP_ERUNTIME,
                           "data file '%s' changed under the run: token %zu (byte offset %lld) is "
                           "%u, not below %s, as every token was when it was opened (reading "
                           "batch %ld)" DATA_CHANGED_HINT,
                           d->path, t0 + bad, lo + (long long)w * (long long)bad,
                           (unsigned)tok_at(tok, w, bad), id_limit_text(d, lim, sizeof lim), n);
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "data file '%s' changed under the run: bytes %lld..%lld differ from when it "
                       "was opened (reading batch %ld (tokens %zu..%zu))" DATA_CHANGED_HINT,
                       d->path, at, at + (long long)len - 1, n, t0, t1);
    }
    /* every id is below id_limit(d) <= 2^31: an int holds it */
    if (w == 2) {
        const uint16_t *t = (const uint16_t *)tok;
        for (size_t i = 0; i < bt; i++) {
            inputs[i] = t[i];
            targets[i] = t[i + 1];
        }
    } else {
        const uint32_t *t = (const uint32_t *)tok;
        for (size_t i = 0; i < bt; i++) {
            inputs[i] = (int)t[i];
            targets[i] = (int)t[i + 1];
        }
    }
    return PP_OK;
}

int data_batch(DataSet *d, long n, int B, int T, int *inputs, int *targets, char *err,
               size_t errlen) {
    long nb = data_num_batches(d, B, T);
    PP_CHECK(nb >= 1 && n >= 0);
    size_t bt = (size_t)B * (size_t)T;
    int rc = read_batch(d, n, nb, bt, inputs, targets, err, errlen);
    if (rc != PP_OK) {
        memset(inputs, 0, bt * sizeof *inputs);
        memset(targets, 0, bt * sizeof *targets);
    }
    return rc;
}

/* ---- writing ---------------------------------------------------------------- */

int data_token_width(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

/* data_write and data_write32: n tokens of w bytes each at tok, in the format of width w. */
static int write_tokens(const char *path, const void *tok, size_t n, int w, char *err,
                        size_t errlen) {
    if (n > INT32_MAX)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "cannot write '%s': %zu tokens do not fit the int32 count of the format",
                       path, n);
    PPFile pf;
    int rc = pp_file_create(&pf, path, NULL, err, errlen);
    if (rc != PP_OK) return rc;
    int32_t header[DATA_HEADER_INTS] = {w == 2 ? DATA_MAGIC : DATA_MAGIC32,
                                        w == 2 ? DATA_VERSION : DATA_VERSION32, (int32_t)n};
    fwrite(header, sizeof header, 1, pf.f);
    if (n) fwrite(tok, (size_t)w, n, pf.f);
    return pp_file_commit(&pf, err, errlen); /* reports a failed fwrite too */
}

int data_write(const char *path, const uint16_t *tok, size_t n, char *err, size_t errlen) {
    return write_tokens(path, tok, n, 2, err, errlen);
}

int data_write32(const char *path, const uint32_t *tok, size_t n, char *err, size_t errlen) {
    size_t i = 0;
    while (i < n && tok[i] <= INT32_MAX) i++;
    if (i < n)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "cannot write '%s': token %zu is %u, over 2^31 - 1, the largest id that "
                       "a reader's int holds",
                       path, i, (unsigned)tok[i]);
    return write_tokens(path, tok, n, 4, err, errlen);
}

/* ---- names ------------------------------------------------------------------ */

int data_val_path(const char *out, char *val, size_t n) {
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    const char *hit = NULL;
    for (const char *p = strstr(base, "train"); p; p = strstr(p + 1, "train")) hit = p;
    int len;
    if (hit) {
        len = snprintf(val, n, "%.*s%s%s", (int)(hit - out), out, "val", hit + strlen("train"));
    } else {
        size_t keep = strlen(out);
        if (keep >= 4 && strcmp(out + keep - 4, ".bin") == 0) keep -= 4;
        len = snprintf(val, n, "%.*s_val.bin", (int)keep, out);
    }
    return (len < 0 || (size_t)len >= n) ? PP_EUSAGE : PP_OK;
}
