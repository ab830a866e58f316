/* data.c — token files in llm.c's .bin format, batches, and the text preparer. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header and tokens are read and written in host order, which must be the
 * little-endian order of the format. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data.c assumes a little-endian host (llm.c's .bin files are little-endian)"
#endif

/* Appended to every message about a bad file; the argument is the file's path. */
#define DATA_HINT "; regenerate it with `pptrain prepare-data --text FILE --out %s` (or llm.c's data scripts)"

#define PREP_USAGE "usage: pptrain prepare-data --text FILE --out FILE.bin [--val-fraction F]\n"

/* ---- reading ---------------------------------------------------------------- */

/* Check the header h of a file of `size` bytes (size >= DATA_HEADER_BYTES). */
static int check_header(const char *path, const int32_t *h, long long size, char *err,
                        size_t errlen) {
    if (h[0] != DATA_MAGIC)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' is not a token file: its magic number is %d, expected "
                       "%d (llm.c .bin: 256 int32 header, then uint16 tokens)" DATA_HINT,
                       path, h[0], DATA_MAGIC, path);
    if (h[1] != DATA_VERSION)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' has format version %d, but pptrain reads version %d "
                       "(uint16 tokens)" DATA_HINT,
                       path, h[1], DATA_VERSION, path);
    if (h[2] < 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' has a negative token count (%d) in its header" DATA_HINT,
                       path, h[2], path);
    long long want = DATA_HEADER_BYTES + 2LL * h[2];
    if (size < want)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' is truncated: it is %lld bytes, but its header says %d "
                       "tokens, which need %d + 2*%d = %lld bytes" DATA_HINT,
                       path, size, h[2], DATA_HEADER_BYTES, h[2], want, path);
    if (size > want)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' has %lld trailing bytes: it is %lld bytes, but its "
                       "header says %d tokens, which need %d + 2*%d = %lld bytes" DATA_HINT,
                       path, size - want, size, h[2], DATA_HEADER_BYTES, h[2], want, path);
    return PP_OK;
}

/* Index of the first token >= vocab_size, or n if there is none. The parallel min is
 * exact, so the answer does not depend on the thread count. */
static size_t first_bad_token(const uint16_t *tok, size_t n, int vocab_size) {
    size_t first = n;
#pragma omp parallel for reduction(min : first) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        if ((int)tok[i] >= vocab_size && i < first) first = i;
    return first;
}

/* Map the whole file at path read-only into *map, *size bytes (at least the header).
 * Returns PP_OK or PP_EUSAGE with a message. */
static int map_file(const char *path, void **map, long long *size, char *err, size_t errlen) {
    struct stat st;
    int fd = pp_open_regular(path, &st); /* a FIFO must not block the open */
    if (fd == -2)
        return pp_errf(err, errlen, PP_EUSAGE, "data file '%s' is %s, not a regular file: point "
                       "data.train / data.val at a token file (llm.c's .bin format)", path,
                       pp_file_kind(st.st_mode));
    if (fd < 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "cannot open data file '%s': %s; check data.train / data.val, or create "
                       "it with `pptrain prepare-data --text FILE --out %s` (`make data` makes "
                       "data/tiny)",
                       path, strerror(errno), path);
    *size = st.st_size;
    if (*size < DATA_HEADER_BYTES) {
        close(fd);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "data file '%s' is truncated or not a token file: it is %lld bytes, "
                       "shorter than the %d-byte header" DATA_HINT,
                       path, *size, DATA_HEADER_BYTES, path);
    }
    *map = mmap(NULL, (size_t)*size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (*map == MAP_FAILED)
        return pp_errf(err, errlen, PP_EUSAGE, "cannot map data file '%s': %s", path,
                       strerror(map_errno));
    return PP_OK;
}

int data_open(DataSet *d, const char *path, int vocab_size, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (strlen(path) >= sizeof d->path)
        return pp_errf(err, errlen, PP_EUSAGE, "data file path is too long: '%s'", path);
    void *map = NULL;
    long long size = 0;
    int rc = map_file(path, &map, &size, err, errlen);
    if (rc != PP_OK) return rc;
    rc = check_header(path, (const int32_t *)map, size, err, errlen);
    const uint16_t *tok = (const uint16_t *)((const char *)map + DATA_HEADER_BYTES);
    size_t ntok = (size_t)((const int32_t *)map)[2];
    if (rc == PP_OK && vocab_size > 0 && vocab_size <= UINT16_MAX) {
        size_t bad = first_bad_token(tok, ntok, vocab_size);
        if (bad < ntok)
            rc = pp_errf(err, errlen, PP_EUSAGE,
                         "data file '%s': token %zu (byte offset %lld) is %u, not below "
                         "model.vocab_size = %d; the file was made with a larger vocabulary: "
                         "set model.vocab_size to its tokenizer's (256 for prepare-data files, "
                         "50257 for GPT-2) or re-tokenize the text for this model",
                         path, bad, DATA_HEADER_BYTES + 2LL * (long long)bad,
                         (unsigned)tok[bad], vocab_size);
    }
    if (rc != PP_OK) {
        munmap(map, (size_t)size);
        return rc;
    }
    strcpy(d->path, path);
    d->map = map;
    d->map_bytes = (size_t)size;
    d->tokens = tok;
    d->ntok = ntok;
    return PP_OK;
}

void data_close(DataSet *d) {
    if (d->map) munmap(d->map, d->map_bytes);
    memset(d, 0, sizeof *d);
}

long data_num_batches(const DataSet *d, int B, int T) {
    size_t bt = (size_t)B * (size_t)T;
    if (B <= 0 || T <= 0 || d->ntok < bt + 1) return 0;
    return (long)((d->ntok - 1) / bt);
}

int data_check_batch(const DataSet *d, int B, int T, char *err, size_t errlen) {
    if (data_num_batches(d, B, T) >= 1) return PP_OK;
    return pp_errf(err, errlen, PP_EUSAGE,
                   "data file '%s' has %zu tokens, fewer than one batch needs (batch_size * "
                   "seq_len + 1 = %d * %d + 1 = %lld); use a bigger file or lower "
                   "train.batch_size / train.seq_len",
                   d->path, d->ntok, B, T, (long long)B * T + 1);
}

void data_batch(const DataSet *d, long n, int B, int T, int *inputs, int *targets) {
    long nb = data_num_batches(d, B, T);
    PP_CHECK(nb >= 1 && n >= 0);
    size_t bt = (size_t)B * (size_t)T;
    const uint16_t *tok = d->tokens + (size_t)(n % nb) * bt;
    for (size_t i = 0; i < bt; i++) {
        inputs[i] = tok[i];
        targets[i] = tok[i + 1];
    }
}

/* ---- writing ---------------------------------------------------------------- */

int data_write(const char *path, const uint16_t *tok, size_t n, char *err, size_t errlen) {
    if (n > INT32_MAX)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "cannot write '%s': %zu tokens do not fit the int32 count of the format",
                       path, n);
    PPFile pf;
    int rc = pp_file_create(&pf, path, NULL, err, errlen);
    if (rc != PP_OK) return rc;
    int32_t header[DATA_HEADER_INTS] = {DATA_MAGIC, DATA_VERSION, (int32_t)n};
    fwrite(header, sizeof header, 1, pf.f);
    if (n) fwrite(tok, sizeof *tok, n, pf.f);
    return pp_file_commit(&pf, err, errlen); /* reports a failed fwrite too */
}

/* ---- prepare-data ----------------------------------------------------------- */

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

/* mkdir -p for the directory that will hold `path`. Returns PP_OK or PP_ERUNTIME. */
static int make_parent_dirs(const char *path, char *err, size_t errlen) {
    char dir[PP_PATH_MAX];
    pp_dirname(path, dir, sizeof dir);
    if (pp_mkdirs(dir) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot create directory '%s': %s", dir, strerror(errno));
    return PP_OK;
}

typedef struct {
    const char *text, *out;
    double val_fraction;
} PrepArgs;

/* Print a usage error (message, then the usage line) and return PP_EUSAGE. */
static int prep_usage(const char *msg, const char *what) {
    pp_error("prepare-data: %s%s", msg, what);
    fputs(PREP_USAGE, stderr);
    return PP_EUSAGE;
}

/* Parse "--opt value" / "--opt=value" arguments. Returns PP_OK, PP_EUSAGE (reported),
 * or -1 for --help (usage printed on stdout). */
static int prep_parse(int argc, char **argv, PrepArgs *a) {
    memset(a, 0, sizeof *a);
    const char *frac = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(PREP_USAGE, stdout);
            return -1;
        }
        const char *eq = strchr(arg, '=');
        size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
        const char **slot = NULL;
        if (klen == 6 && strncmp(arg, "--text", klen) == 0) slot = &a->text;
        if (klen == 5 && strncmp(arg, "--out", klen) == 0) slot = &a->out;
        if (klen == 14 && strncmp(arg, "--val-fraction", klen) == 0) slot = &frac;
        if (!slot) return prep_usage("unknown argument: ", arg);
        if (!eq && i + 1 >= argc) return prep_usage("missing value after ", arg);
        *slot = eq ? eq + 1 : argv[++i];
    }
    if (!a->text || !*a->text) return prep_usage("--text FILE is required", "");
    if (!a->out || !*a->out) return prep_usage("--out FILE.bin is required", "");
    if (frac) {
        char *end;
        errno = 0;
        a->val_fraction = strtod(frac, &end);
        if (end == frac || *end || errno || !(a->val_fraction >= 0 && a->val_fraction < 1))
            return prep_usage("--val-fraction must be a number in [0, 1), got ", frac);
    }
    return PP_OK;
}

/* Tokenize bytes [0, n) (token = byte value) and write them to path; print a line. */
static int prep_write(const char *path, const unsigned char *bytes, size_t n,
                      const char *text, char *err, size_t errlen) {
    int rc = make_parent_dirs(path, err, errlen);
    if (rc != PP_OK) return rc;
    uint16_t *tok = pp_malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = bytes[i];
    rc = data_write(path, tok, n, err, errlen);
    free(tok);
    if (rc == PP_OK)
        printf("prepare-data: wrote %zu tokens to %s (byte-level, vocab 256, from %s)\n", n,
               path, text);
    return rc;
}

int data_prepare_main(int argc, char **argv) {
    PrepArgs a;
    int rc = prep_parse(argc, argv, &a);
    if (rc != PP_OK) return rc < 0 ? PP_OK : rc;
    char val[PP_PATH_MAX], err[PP_ERR_MAX];
    if (data_val_path(a.out, val, sizeof val) != PP_OK || strlen(a.out) >= PP_PATH_MAX)
        return prep_usage("--out path is too long: ", a.out);
    char *text = NULL, what[PP_PATH_MAX + 16];
    size_t n = 0;
    snprintf(what, sizeof what, "text file '%s'", a.text);
    if (pp_read_file(a.text, what, &text, &n, err, sizeof err) != PP_OK) {
        pp_error("prepare-data: %s", err);
        return PP_ERUNTIME;
    }
    const unsigned char *bytes = (const unsigned char *)text;
    size_t nval = (size_t)floor(a.val_fraction * (double)n);
    if (n == 0 || n > INT32_MAX) {
        rc = prep_usage(n ? "text file is too big (over 2^31-1 bytes): "
                          : "text file is empty, nothing to tokenize: ", a.text);
    } else if (a.val_fraction > 0 && nval == 0) {
        rc = prep_usage("--val-fraction leaves no byte for the validation file of ", a.text);
    } else {
        rc = prep_write(a.out, bytes, n - nval, a.text, err, sizeof err);
        if (rc == PP_OK && nval > 0)
            rc = prep_write(val, bytes + (n - nval), nval, a.text, err, sizeof err);
        if (rc != PP_OK) pp_error("prepare-data: %s", err);
    }
    free(text);
    return rc;
}
