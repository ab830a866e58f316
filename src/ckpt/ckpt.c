/* ckpt.c — checkpoint directories ([Note: checkpoint protocol] in ckpt.h): writing a
 * shard safely, the manifest, commit with `latest` and pruning, resolving a path, and
 * reading tensors by global name across the shards. */
#define _GNU_SOURCE
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt_internal.h"

#define MANIFEST_FORMAT "pptrain-checkpoint"
#define MANIFEST_MAX (64u << 20)

/* ---- checks of the caller's input ------------------------------------------------------ */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int ckpt_check_tensors(const CkptTensor *t, int n, char *err, size_t errlen) {
    if (n < 0 || (n > 0 && !t)) return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: no tensors");
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name ? t[i].name : "(null)";
        if (!ckpt_name_ok(t[i].name))
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: tensor %d: name '%s' must "
                           "be 1..%d printable characters without spaces", i, name,
                           CKPT_NAME_MAX - 1);
        if (t[i].dtype != CKPT_F32)
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: tensor '%s': dtype %d is "
                           "not supported (only CKPT_F32)", name, (int)t[i].dtype);
        if (t[i].ndim < 0 || t[i].ndim > CKPT_MAX_DIMS)
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: tensor '%s': ndim %d is "
                           "outside 0..%d", name, t[i].ndim, CKPT_MAX_DIMS);
        int64_t numel = ckpt_numel(t[i].ndim, t[i].shape);
        if (numel < 0)
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: tensor '%s': a dimension "
                           "is negative or the size overflows", name);
        if (numel > 0 && !t[i].data)
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: tensor '%s' has no data",
                           name);
    }
    const char **names = pp_malloc((size_t)n * sizeof *names + 1);
    for (int i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    int rc = PP_OK;
    for (int i = 1; i < n && rc == PP_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = pp_errf(err, errlen, PP_EUSAGE, "checkpoint: tensor name '%s' appears "
                         "twice in one shard", names[i]);
    free(names);
    return rc;
}

void ckpt_options_default(CkptOptions *o) {
    o->level = 6;
    o->shuffle = 1;
    o->strategy = CKPT_DEFLATE;
    o->threads = 0;
    o->chunk_bytes = CKPT_DEFAULT_CHUNK;
}

int ckpt_options_resolve(const CkptOptions *in, CkptOptions *out, char *err,
                         size_t errlen) {
    if (in) *out = *in;
    else ckpt_options_default(out);
    if (out->level < 0 || out->level > 9)
        return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: compression level %d is "
                       "outside 0..9", out->level);
    if (out->strategy != CKPT_DEFLATE && out->strategy != CKPT_RLE)
        return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: unknown strategy %d",
                       (int)out->strategy);
    if (out->chunk_bytes == 0) out->chunk_bytes = CKPT_DEFAULT_CHUNK;
    if (out->chunk_bytes % 4 != 0 || out->chunk_bytes > CKPT_MAX_CHUNK)
        return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: chunk_bytes %zu must be a "
                       "multiple of 4 up to %u", out->chunk_bytes, CKPT_MAX_CHUNK);
    if (out->threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        out->threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    }
    out->shuffle = out->shuffle ? 1 : 0;
    return PP_OK;
}

/* 1 if s is a valid manifest key from a caller: 1..63 of [A-Za-z0-9_.-]. */
static int manifest_key_ok(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= CKPT_NAME_MAX) return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

/* ---- file-system helpers (0, or -1 with errno) ------------------------------------------ */

/* out[PP_PATH_MAX] = dir/name; -1 with errno ENAMETOOLONG if it does not fit. */
static int join(char *out, const char *dir, const char *name) {
    int n = snprintf(out, PP_PATH_MAX, "%s/%s", dir, name);
    return n < 0 || n >= PP_PATH_MAX ? (errno = ENAMETOOLONG, -1) : 0;
}

/* rm -rf path (symlinks are removed, not followed); a missing path is fine. */
static int remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d)) != NULL;) {
        char sub[PP_PATH_MAX];
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        rc = join(sub, path, de->d_name) == 0 ? remove_tree(sub) : -1;
    }
    int saved = errno;
    closedir(d);
    errno = saved;
    return rc == 0 ? rmdir(path) : -1;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- paths and writing ------------------------------------------------------------------ */

int ckpt_dir_path(const char *root, long step, int staging, char *out, size_t n) {
    if (step < 0) return PP_EUSAGE;
    int len = snprintf(out, n, "%s/step_%07ld%s", root, step, staging ? ".tmp" : "");
    return len < 0 || (size_t)len >= n ? PP_EUSAGE : PP_OK;
}

int ckpt_shard_path(const char *dir, int rank, char *out, size_t n) {
    if (rank < 0) return PP_EUSAGE;
    int len = snprintf(out, n, "%s/shard_%05d.ckpt", dir, rank);
    return len < 0 || (size_t)len >= n ? PP_EUSAGE : PP_OK;
}

/* The step of a directory entry "step_NNNNNNN" (7+ digits) or, if *staging is
 * allowed, "step_NNNNNNN.tmp" (then *staging = 1); -1 for any other name. */
static long step_of(const char *name, int *staging) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *d = name + 5;
    size_t nd = strspn(d, "0123456789");
    if (nd < 7 || nd > 18) return -1;
    *staging = strcmp(d + nd, ".tmp") == 0;
    if (d[nd] && !*staging) return -1;
    return strtol(d, NULL, 10);
}

static int cmp_long_desc(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

int ckpt_list_steps(const char *root, long **steps) {
    *steps = NULL;
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? 0 : -1;
    int n = 0, staging;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        long s = step_of(de->d_name, &staging);
        if (s < 0 || staging) continue;
        *steps = realloc(*steps, (size_t)(n + 1) * sizeof **steps);
        PP_CHECK(*steps != NULL);
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof **steps, cmp_long_desc);
    return n;
}

int ckpt_stage_dir(const char *root, long step, char *tmpdir_out, size_t n, char *err,
                   size_t errlen) {
    char tmp[PP_PATH_MAX];
    if (ckpt_dir_path(root, step, 1, tmp, sizeof tmp) != PP_OK ||
        snprintf(tmpdir_out, n, "%s", tmp) >= (int)n)
        return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: step %ld is negative or the "
                       "path under '%s' is too long", step, root);
    if (pp_mkdirs(root) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint: cannot create directory "
                       "'%s': %s", root, strerror(errno));
    if (remove_tree(tmp) != 0 || mkdir(tmp, 0755) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint: cannot create a fresh "
                       "staging directory '%s': %s", tmp, strerror(errno));
    return PP_OK;
}

int ckpt_write_shard(const char *path, const CkptMeta *meta, const CkptTensor *tensors,
                     int ntensors, const CkptOptions *opt, char *err, size_t errlen) {
    CkptOptions o;
    char why[PP_ERR_MAX];
    int rc = ckpt_options_resolve(opt, &o, err, errlen);
    if (rc == PP_OK) rc = ckpt_check_tensors(tensors, ntensors, err, errlen);
    if (rc != PP_OK) return rc;
    if (strlen(path) + sizeof ".part" > PP_PATH_MAX)
        return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: path too long: %s", path);
    PPFile pf; /* path.part; fsync, rename to path, fsync the directory */
    if (pp_file_create(&pf, path, ".part", why, sizeof why) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint: %s", why);
    rc = ckpt_shard_write(pf.fd, pf.tmp, meta, tensors, ntensors, &o, err, errlen);
    if (rc != PP_OK) {
        pp_file_abort(&pf);
        return rc;
    }
    if (pp_file_commit(&pf, why, sizeof why) != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint: %s", why);
    return PP_OK;
}

/* ---- the manifest: "key = value" lines, the last one the CRC32 of all before it -------- */

/* Append value to f with backslash, newline and carriage return escaped. */
static void put_escaped(FILE *f, const char *v) {
    for (; *v; v++) {
        if (*v == '\\') fputs("\\\\", f);
        else if (*v == '\n') fputs("\\n", f);
        else if (*v == '\r') fputs("\\r", f);
        else fputc(*v, f);
    }
}

/* Undo put_escaped in place; -1 on a bad escape. */
static int unescape(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (*s != '\\') {
            *o++ = *s;
            continue;
        }
        s++;
        if (*s == '\\') *o++ = '\\';
        else if (*s == 'n') *o++ = '\n';
        else if (*s == 'r') *o++ = '\r';
        else return -1;
    }
    *o = 0;
    return 0;
}

typedef struct {
    uint64_t bytes;
    uint32_t crc;
} ShardSum;

/* Write DIR/manifest via manifest.tmp, fsync, rename, fsync DIR (PPFile). */
static int manifest_write(const char *dir, long step, int world, const ShardSum *sums,
                          const CkptKV *extra, int nextra, char *err, size_t errlen) {
    char *text = NULL, path[PP_PATH_MAX], why[PP_ERR_MAX];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    PP_CHECK(f != NULL);
    fprintf(f, "# pptrain checkpoint manifest (docs/checkpoint-format.md)\n");
    fprintf(f, "format = %s\nversion = %d\nstep = %ld\nworld_size = %d\nshards = %d\n",
            MANIFEST_FORMAT, CKPT_FORMAT_VERSION, step, world, world);
    for (int r = 0; r < world; r++)
        fprintf(f, "shard.%d.file = shard_%05d.ckpt\nshard.%d.bytes = %llu\n"
                "shard.%d.crc32 = %08x\n", r, r, r, (unsigned long long)sums[r].bytes, r,
                sums[r].crc);
    for (int i = 0; i < nextra; i++) {
        fprintf(f, "extra.%s = ", extra[i].key);
        put_escaped(f, extra[i].value);
        fputc('\n', f);
    }
    fflush(f);
    fprintf(f, "crc32 = %08x\n", (uint32_t)crc32_z(0, (const uint8_t *)text, len));
    fclose(f);
    PPFile pf;
    int rc = join(path, dir, "manifest") != 0
                 ? pp_errf(why, sizeof why, PP_ERUNTIME, "path too long: %s/manifest", dir)
                 : pp_file_create(&pf, path, ".tmp", why, sizeof why);
    if (rc == PP_OK) {
        fwrite(text, 1, len, pf.f);
        rc = pp_file_commit(&pf, why, sizeof why);
    }
    free(text);
    if (rc != PP_OK) return pp_errf(err, errlen, rc, "checkpoint: %s", why);
    return PP_OK;
}

/* The keys every manifest has, once each (Manifest.seen). */
enum { SEEN_FORMAT = 1, SEEN_VERSION = 2, SEEN_STEP = 4, SEEN_WORLD = 8, SEEN_ALL = 15 };

typedef struct {
    long step;
    int world, nshards;
    unsigned seen;          /* SEEN_* of the keys read so far */
    char (*file)[256];      /* [nshards] shard file names in the directory */
    int64_t *bytes;         /* [nshards] */
    uint32_t *crc;          /* [nshards] */
    int nextra;
    char **ekey, **eval;    /* [nextra] the caller's entries, "extra." removed */
} Manifest;

static void manifest_free(Manifest *m) {
    for (int i = 0; i < m->nextra; i++) {
        free(m->ekey[i]);
        free(m->eval[i]);
    }
    free(m->ekey);
    free(m->eval);
    free(m->file);
    free(m->bytes);
    free(m->crc);
    memset(m, 0, sizeof *m);
}

/* Parse a decimal or (with hex = 1) hexadecimal number that is all of s. */
static int parse_num(const char *s, int hex, long long lo, long long hi, long long *v) {
    char *end;
    if (!*s || *s == ' ' || *s == '-' || *s == '+') return -1;
    errno = 0;
    unsigned long long u = strtoull(s, &end, hex ? 16 : 10);
    if (errno || *end || u > (unsigned long long)hi || (long long)u < lo) return -1;
    *v = (long long)u;
    return 0;
}

/* Apply one "key = value" line (value unescaped) to m; NULL or what is wrong. */
static const char *manifest_line(Manifest *m, const char *key, char *val) {
    long long v;
    int r;
    char field[16];
    static const char *const once[] = {"format", "version", "step", "world_size"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(key, once[i])) continue;
        if (m->seen & (1u << i)) return "a key is given twice";
        m->seen |= 1u << i;
    }
    if (!strcmp(key, "format")) return strcmp(val, MANIFEST_FORMAT) ? "unknown format" : NULL;
    if (!strcmp(key, "version"))
        return parse_num(val, 0, 0, 1 << 30, &v) || v != CKPT_FORMAT_VERSION
                   ? "unsupported version (written by another pptrain?)" : NULL;
    if (!strcmp(key, "step")) /* a long: ckpt_step's type (callers bound it further) */
        return parse_num(val, 0, 0, LONG_MAX, &v) ? "bad step" : (m->step = (long)v, NULL);
    if (!strcmp(key, "world_size"))
        return parse_num(val, 0, 1, 1 << 20, &v) ? "bad world_size" : (m->world = (int)v, NULL);
    if (!strcmp(key, "shards")) {
        if (m->nshards || parse_num(val, 0, 1, 1 << 20, &v)) return "bad shards";
        m->nshards = (int)v;
        m->file = pp_calloc((size_t)v, sizeof *m->file);
        m->bytes = pp_malloc((size_t)v * sizeof *m->bytes);
        m->crc = pp_calloc((size_t)v, sizeof *m->crc);
        for (int i = 0; i < m->nshards; i++) m->bytes[i] = -1;
        return NULL;
    }
    if (!strncmp(key, "shard.", 6) && strspn(key + 6, "0123456789") <= 7 &&
        sscanf(key, "shard.%d.%15s", &r, field) == 2) { /* 7 digits: %d cannot overflow */
        if (r < 0 || r >= m->nshards) return "shard entry before `shards` or out of range";
        if (!strcmp(field, "file")) {
            if (!*val || strchr(val, '/') || !strcmp(val, ".") || !strcmp(val, "..") ||
                strlen(val) >= sizeof m->file[r])
                return "bad shard file name";
            snprintf(m->file[r], sizeof m->file[r], "%s", val);
        } else if (!strcmp(field, "bytes")) {
            if (parse_num(val, 0, 0, INT64_MAX, &v)) return "bad shard size";
            m->bytes[r] = v;
        } else if (!strcmp(field, "crc32")) {
            if (strlen(val) != 8 || parse_num(val, 1, 0, UINT32_MAX, &v)) return "bad crc32";
            m->crc[r] = (uint32_t)v;
        }
        return NULL;
    }
    if (!strncmp(key, "extra.", 6) && manifest_key_ok(key + 6)) {
        m->ekey = realloc(m->ekey, (size_t)(m->nextra + 1) * sizeof *m->ekey);
        m->eval = realloc(m->eval, (size_t)(m->nextra + 1) * sizeof *m->eval);
        PP_CHECK(m->ekey && m->eval);
        m->ekey[m->nextra] = strdup(key + 6);
        m->eval[m->nextra++] = strdup(val);
        return NULL;
    }
    return NULL; /* unknown keys are ignored: later versions may add some */
}

/* Check the trailing CRC line of text[0..len) and parse the lines before it. */
static const char *manifest_parse(Manifest *m, char *text, size_t len) {
    if (len == 0 || text[len - 1] != '\n') return "does not end with a newline";
    text[len - 1] = 0;
    char *last = strrchr(text, '\n');
    last = last ? last + 1 : text;
    long long v;
    if (strncmp(last, "crc32 = ", 8) || strlen(last + 8) != 8 || parse_num(last + 8, 1, 0,
                                                                           UINT32_MAX, &v))
        return "has no crc32 line at the end (truncated?)";
    if ((uint32_t)v != (uint32_t)crc32_z(0, (const uint8_t *)text, (size_t)(last - text)))
        return "CRC32 mismatch: the manifest is corrupted";
    if (last > text) last[-1] = 0;
    else *last = 0;
    const char *why = NULL;
    for (char *line = text, *next; *line && !why; line = next) {
        next = strchr(line, '\n');
        next = next ? (*next = 0, next + 1) : line + strlen(line);
        if (line[0] == '#' || line[0] == 0) continue;
        char *eq = strstr(line, " = ");
        if (!eq) return "a line is not 'key = value'";
        *eq = 0;
        if (unescape(eq + 3) != 0) return "bad escape in a value";
        why = manifest_line(m, line, eq + 3);
    }
    if (!why && (m->seen & SEEN_ALL) != SEEN_ALL)
        why = "format, version, step or world_size is missing";
    if (!why && (m->nshards == 0 || m->world != m->nshards))
        why = "shards and world_size differ (one shard per rank)";
    for (int r = 0; !why && r < m->nshards; r++)
        if (!m->file[r][0] || m->bytes[r] < 0) why = "a shard's file or size is missing";
    return why;
}

/* Read and parse DIR/manifest into m. */
static int manifest_load(const char *dir, Manifest *m, char *err, size_t errlen) {
    char path[PP_PATH_MAX];
    memset(m, 0, sizeof *m);
    struct stat st;
    int fd = join(path, dir, "manifest") == 0 ? pp_open_regular(path, &st) : -1;
    if (fd == -2)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint manifest %s: it is %s, not a "
                       "regular file: the checkpoint directory was tampered with", path,
                       pp_file_kind(st.st_mode));
    if (fd < 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint %s: cannot open the manifest: "
                       "%s%s", dir, strerror(errno), errno == ENOENT ? " (not a complete "
                       "checkpoint directory; pass ROOT or ROOT/step_NNNNNNN)" : "");
    const char *why = NULL;
    char *text = NULL;
    if (st.st_size > MANIFEST_MAX) why = "too large";
    else {
        text = pp_malloc((size_t)st.st_size + 1);
        if (ckpt_pread_all(fd, text, (size_t)st.st_size, 0) != 0) why = ckpt_syserr();
        else {
            text[st.st_size] = 0;
            why = manifest_parse(m, text, (size_t)st.st_size);
        }
    }
    close(fd);
    free(text);
    if (!why) return PP_OK;
    manifest_free(m);
    return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint manifest %s: %s", path, why);
}

/* ---- commit, pruning, resolving --------------------------------------------------------- */

/* Size and whole-file CRC32 of each shard of the staging directory, checking that each
 * opens as a valid shard. */
static int shard_sums(const char *tmp, int world, ShardSum *sums, char *err, size_t errlen) {
    for (int r = 0; r < world; r++) {
        char path[PP_PATH_MAX];
        CkptShard s;
        if (ckpt_shard_path(tmp, r, path, sizeof path) != PP_OK)
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint: path too long: %s", tmp);
        int rc = ckpt_shard_open(&s, path, -1, err, errlen);
        if (rc != PP_OK) return rc;
        sums[r] = (ShardSum){s.file_bytes, s.file_crc};
        ckpt_shard_close(&s);
    }
    return PP_OK;
}

/* Rename the staging directory to its final name; a complete checkpoint of the same
 * step already there is swapped out atomically (and left at the staging name). */
static int install_dir(const char *tmp, const char *fin) {
    if (rename(tmp, fin) == 0) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return -1;
    return renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE);
}

/* Point ROOT/latest at step_NNNNNNN: a new symlink renamed over the old one. */
static int point_latest(const char *root, long step) {
    char target[64], link[PP_PATH_MAX], tmp[PP_PATH_MAX];
    snprintf(target, sizeof target, "step_%07ld", step);
    if (join(link, root, "latest") != 0 || join(tmp, root, "latest.tmp") != 0) return -1;
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) return -1;
    return pp_fsync_dir(root);
}

/* Remove stale *.tmp entries and every complete checkpoint except `current` and the
 * keep-1 others with the highest steps below it. Steps above `current` (left by a run
 * that was resumed from an earlier step) are neither counted nor removed. Problems are
 * reported, not fatal: the new checkpoint is committed by now. */
static void prune(const char *root, long current, int keep) {
    DIR *d = opendir(root);
    if (!d) return;
    long *steps = NULL, *stale = NULL;
    int nsteps = 0, nstale = 0, staging;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        long s = step_of(de->d_name, &staging);
        if (s < 0 || (!staging && s >= current)) continue;
        long **arr = staging ? &stale : &steps;
        int *cnt = staging ? &nstale : &nsteps;
        *arr = realloc(*arr, (size_t)(*cnt + 1) * sizeof **arr);
        PP_CHECK(*arr != NULL);
        (*arr)[(*cnt)++] = s;
    }
    closedir(d);
    if (nsteps) qsort(steps, (size_t)nsteps, sizeof *steps, cmp_long_desc);
    char path[PP_PATH_MAX], tmp[PP_PATH_MAX];
    for (int i = keep > 0 ? keep - 1 : nsteps; i < nsteps; i++) {
        ckpt_dir_path(root, steps[i], 0, path, sizeof path);
        ckpt_dir_path(root, steps[i], 1, tmp, sizeof tmp);
        if (remove_tree(tmp) != 0 || rename(path, tmp) != 0 || remove_tree(tmp) != 0)
            pp_error("checkpoint: could not remove old checkpoint '%s': %s", path,
                     strerror(errno));
    }
    for (int i = 0; i < nstale; i++) {
        ckpt_dir_path(root, stale[i], 1, tmp, sizeof tmp);
        if (remove_tree(tmp) != 0)
            pp_error("checkpoint: could not remove stale '%s': %s", tmp, strerror(errno));
    }
    if (join(tmp, root, "latest.tmp") == 0) unlink(tmp);
    free(steps);
    free(stale);
}

int ckpt_commit(const char *root, long step, int world, const CkptKV *extra, int nextra,
                int keep, char *err, size_t errlen) {
    char tmp[PP_PATH_MAX], fin[PP_PATH_MAX];
    if (world < 1 || nextra < 0 || ckpt_dir_path(root, step, 1, tmp, sizeof tmp) != PP_OK ||
        ckpt_dir_path(root, step, 0, fin, sizeof fin) != PP_OK)
        return pp_errf(err, errlen, PP_EUSAGE, "checkpoint commit: bad step %ld, world %d "
                       "or root '%s'", step, world, root);
    for (int i = 0; i < nextra; i++)
        if (!manifest_key_ok(extra[i].key) || !extra[i].value)
            return pp_errf(err, errlen, PP_EUSAGE, "checkpoint commit: manifest key '%s' "
                           "must be 1..63 of [A-Za-z0-9_.-] with a value",
                           extra[i].key ? extra[i].key : "(null)");
    ShardSum *sums = pp_malloc((size_t)world * sizeof *sums);
    int rc = shard_sums(tmp, world, sums, err, errlen);
    if (rc == PP_OK) rc = manifest_write(tmp, step, world, sums, extra, nextra, err, errlen);
    free(sums);
    if (rc != PP_OK) return rc;
    if (install_dir(tmp, fin) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint commit: cannot rename '%s' to "
                       "'%s': %s", tmp, fin, strerror(errno));
    char parent[PP_PATH_MAX];
    pp_dirname(root, parent, sizeof parent);
    /* ROOT's own entry too: on the first save ROOT itself may be new */
    if (pp_fsync_dir(root) != 0 || pp_fsync_dir(parent) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint commit: cannot sync '%s': %s", root,
                       strerror(errno));
    if (point_latest(root, step) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint commit: '%s' is complete but "
                       "'%s/latest' could not be pointed at it: %s", fin, root,
                       strerror(errno));
    prune(root, step, keep);
    return PP_OK;
}

/* 1 if path (without trailing slashes) ends in ".tmp": a staging directory. */
static int is_staging(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    return n >= 4 && !strncmp(path + n - 4, ".tmp", 4);
}

/* The message for a ROOT without `latest` (and without a manifest of its own): what to
 * pass instead, naming its newest complete step directory if it has one. */
static int no_latest(const char *root, char *err, size_t errlen) {
    long *steps;
    int n = ckpt_list_steps(root, &steps), newest = -1;
    char dir[PP_PATH_MAX], manifest[PP_PATH_MAX];
    for (int i = 0; i < n && newest < 0; i++)
        if (ckpt_dir_path(root, steps[i], 0, dir, sizeof dir) == PP_OK &&
            join(manifest, dir, "manifest") == 0 && exists(manifest))
            newest = i;
    int rc;
    if (newest < 0)
        rc = pp_errf(err, errlen, PP_ERUNTIME, "no checkpoint in '%s': it has neither a "
                     "manifest nor `latest`%s (pass ROOT or ROOT/step_NNNNNNN)", root,
                     n > 0 ? ", and none of its step directories is complete" : "");
    else
        rc = pp_errf(err, errlen, PP_ERUNTIME, "'%s' holds %d checkpoint(s) but no `latest` "
                     "link (was it copied without symlinks?): pass the one to continue from, "
                     "e.g. '%s' (the newest complete one), or recreate the link with `ln -s "
                     "step_%07ld %s/latest`", root, n, dir, steps[newest], root);
    free(steps);
    return rc;
}

int ckpt_resolve(const char *p, char *dir_out, size_t n, char *err, size_t errlen) {
    char path[PP_PATH_MAX], link[PP_PATH_MAX], target[PP_PATH_MAX], base[PP_PATH_MAX];
    struct stat st;
    if (stat(p, &st) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "no checkpoint at '%s': %s", p,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pp_errf(err, errlen, PP_ERUNTIME, "'%s' is not a checkpoint directory", p);
    if (join(path, p, "manifest") != 0 || snprintf(link, sizeof link, "%s", p) >= PP_PATH_MAX)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint path too long: %s", p);
    if (!exists(path) && !is_staging(p)) {
        join(link, p, "latest");
        if (lstat(link, &st) != 0) return no_latest(p, err, errlen);
    }
    /* Follow a symlink (ROOT/latest, or one passed in) one level, relative to its dir. */
    ssize_t tl = readlink(link, target, sizeof target - 1);
    if (tl < 0) {
        snprintf(base, sizeof base, "%s", link);
    } else {
        target[tl] = 0;
        pp_dirname(link, path, sizeof path);
        if (target[0] == '/') snprintf(base, sizeof base, "%s", target);
        else if (join(base, path, target) != 0)
            return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint path too long: %s", path);
    }
    if (is_staging(base))
        return pp_errf(err, errlen, PP_ERUNTIME, "'%s' is an incomplete checkpoint (a save "
                       "was interrupted): pass its parent directory to use `latest`", base);
    if (join(path, base, "manifest") != 0 || !exists(path))
        return pp_errf(err, errlen, PP_ERUNTIME, "'%s' names '%s', which is not a complete "
                       "checkpoint (no manifest): pass a step directory explicitly", link,
                       base);
    if (snprintf(dir_out, n, "%s", base) >= (int)n)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint path too long: %s", base);
    return PP_OK;
}

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct {
    int shard;
    const CkptEntry *e;
} TRef;

struct CkptReader {
    char dir[PP_PATH_MAX];
    Manifest m;
    CkptShard *shards; /* [m.nshards] */
    int ntensors, threads;
    TRef *order;       /* [ntensors] shard order, then file order */
    TRef *byname;      /* [ntensors] sorted by name */
};

static int cmp_tref(const void *a, const void *b) {
    return strcmp(((const TRef *)a)->e->name, ((const TRef *)b)->e->name);
}

/* Index every tensor of every shard by name; names must be unique. */
static int index_names(CkptReader *r, char *err, size_t errlen) {
    for (int s = 0; s < r->m.nshards; s++) r->ntensors += r->shards[s].ntensors;
    r->order = pp_malloc((size_t)r->ntensors * sizeof *r->order + 1);
    r->byname = pp_malloc((size_t)r->ntensors * sizeof *r->byname + 1);
    int k = 0;
    for (int s = 0; s < r->m.nshards; s++)
        for (int i = 0; i < r->shards[s].ntensors; i++)
            r->order[k++] = (TRef){s, &r->shards[s].entries[i]};
    memcpy(r->byname, r->order, (size_t)r->ntensors * sizeof *r->order);
    qsort(r->byname, (size_t)r->ntensors, sizeof *r->byname, cmp_tref);
    for (int i = 1; i < r->ntensors; i++)
        if (cmp_tref(&r->byname[i - 1], &r->byname[i]) == 0)
            return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint %s: tensor '%s' is in both "
                           "%s and %s", r->dir, r->byname[i].e->name,
                           r->shards[r->byname[i - 1].shard].path,
                           r->shards[r->byname[i].shard].path);
    return PP_OK;
}

CkptReader *ckpt_open(const char *dir, char *err, size_t errlen) {
    CkptReader *r = pp_calloc(1, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->threads = 1;
    if (manifest_load(dir, &r->m, err, errlen) != PP_OK) {
        free(r);
        return NULL;
    }
    r->shards = pp_calloc((size_t)r->m.nshards, sizeof *r->shards);
    for (int s = 0; s < r->m.nshards; s++) r->shards[s].fd = -1;
    int rc = PP_OK;
    for (int s = 0; s < r->m.nshards && rc == PP_OK; s++) {
        char path[PP_PATH_MAX];
        if (join(path, dir, r->m.file[s]) != 0)
            rc = pp_errf(err, errlen, PP_ERUNTIME, "checkpoint %s: path too long", dir);
        else rc = ckpt_shard_open(&r->shards[s], path, r->m.bytes[s], err, errlen);
        if (rc == PP_OK && r->shards[s].file_crc != r->m.crc[s])
            rc = pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s: its CRC32 %08x "
                         "differs from the manifest's %08x: the file was replaced or "
                         "corrupted", path, r->shards[s].file_crc, r->m.crc[s]);
    }
    if (rc == PP_OK) rc = index_names(r, err, errlen);
    if (rc != PP_OK) {
        ckpt_close(r);
        return NULL;
    }
    return r;
}

void ckpt_close(CkptReader *r) {
    if (!r) return;
    for (int s = 0; r->shards && s < r->m.nshards; s++) ckpt_shard_close(&r->shards[s]);
    free(r->shards);
    free(r->order);
    free(r->byname);
    manifest_free(&r->m);
    free(r);
}

void ckpt_set_threads(CkptReader *r, int threads) { r->threads = threads < 1 ? 1 : threads; }
long ckpt_step(const CkptReader *r) { return r->m.step; }
int ckpt_nshards(const CkptReader *r) { return r->m.nshards; }
int ckpt_ntensors(const CkptReader *r) { return r->ntensors; }

const char *ckpt_shard_file(const CkptReader *r, int shard) {
    return shard >= 0 && shard < r->m.nshards ? r->shards[shard].path : NULL;
}

const char *ckpt_extra(const CkptReader *r, const char *key) {
    for (int i = 0; i < r->m.nextra; i++)
        if (!strcmp(r->m.ekey[i], key)) return r->m.eval[i];
    return NULL;
}

static void fill_info(const TRef *t, CkptTensorInfo *info) {
    const CkptEntry *e = t->e;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", e->name);
    info->dtype = (CkptDtype)e->dtype;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof info->shape);
    info->numel = ckpt_numel(e->ndim, e->shape);
    info->raw_bytes = e->raw_bytes;
    info->stored_bytes = e->data_bytes;
    info->shuffle = e->filter == CKPT_FILTER_SHUFFLE4;
    info->compressed = e->codec == CKPT_CODEC_ZLIB;
    info->shard = t->shard;
}

int ckpt_tensor_at(const CkptReader *r, int i, CkptTensorInfo *info) {
    if (i < 0 || i >= r->ntensors) return -1;
    fill_info(&r->order[i], info);
    return 0;
}

static const TRef *find(const CkptReader *r, const char *name) {
    CkptEntry key;
    snprintf(key.name, sizeof key.name, "%s", name);
    TRef probe = {0, &key};
    return r->ntensors ? bsearch(&probe, r->byname, (size_t)r->ntensors, sizeof probe,
                                 cmp_tref)
                       : NULL;
}

int ckpt_find(const CkptReader *r, const char *name, CkptTensorInfo *info) {
    const TRef *t = name && strlen(name) < CKPT_NAME_MAX ? find(r, name) : NULL;
    if (!t) return -1;
    if (info) fill_info(t, info);
    return 0;
}

/* "[a, b, c]" into out[n]. */
static void shape_str(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < n) snprintf(out + at, n - at, "]");
}

int ckpt_read(CkptReader *r, const char *name, float *dst, const int64_t *expect_shape,
              int expect_ndim, char *err, size_t errlen) {
    const TRef *t = name && strlen(name) < CKPT_NAME_MAX ? find(r, name) : NULL;
    if (!t)
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint %s: no tensor '%s' in its %d "
                       "shard(s): it was written for a different model or optimizer", r->dir,
                       name ? name : "(null)", r->m.nshards);
    const CkptEntry *e = t->e;
    int same = !expect_shape || expect_ndim == e->ndim;
    for (int d = 0; same && expect_shape && d < e->ndim; d++)
        same = expect_shape[d] == e->shape[d];
    if (!same) {
        char have[256], want[256];
        shape_str(have, sizeof have, e->ndim, e->shape);
        shape_str(want, sizeof want, expect_ndim, expect_shape);
        return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s: tensor '%s' has "
                       "shape %s but %s was expected: the checkpoint is for a different "
                       "model config", r->shards[t->shard].path, e->name, have, want);
    }
    return ckpt_shard_read(&r->shards[t->shard], e, dst, r->threads, err, errlen);
}

/* The entry `key` of type `type` in shard `shard`'s metadata, or NULL. */
static const CkptMetaEntry *meta_get(const CkptReader *r, int shard, const char *key,
                                     int type) {
    if (shard < 0 || shard >= r->m.nshards || !key) return NULL;
    const CkptMetaEntry *e = ckpt_meta_find(&r->shards[shard].meta, key);
    return e && e->type == type ? e : NULL;
}

int ckpt_meta_u64(const CkptReader *r, int shard, const char *key, uint64_t *v) {
    const CkptMetaEntry *e = meta_get(r, shard, key, CKPT_META_U64);
    if (!e) return PP_ERUNTIME;
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = (*v << 8) | e->val[i];
    return PP_OK;
}

int ckpt_meta_f64(const CkptReader *r, int shard, const char *key, double *v) {
    const CkptMetaEntry *e = meta_get(r, shard, key, CKPT_META_F64);
    uint64_t bits = 0;
    if (!e) return PP_ERUNTIME;
    for (int i = 7; i >= 0; i--) bits = (bits << 8) | e->val[i];
    memcpy(v, &bits, sizeof bits);
    return PP_OK;
}

int ckpt_meta_str(const CkptReader *r, int shard, const char *key, const char **s) {
    const CkptMetaEntry *e = meta_get(r, shard, key, CKPT_META_STR);
    if (!e) return PP_ERUNTIME;
    *s = (const char *)e->val;
    return PP_OK;
}

int ckpt_meta_bytes(const CkptReader *r, int shard, const char *key, const void **p,
                    size_t *n) {
    const CkptMetaEntry *e = meta_get(r, shard, key, CKPT_META_BYTES);
    if (!e) return PP_ERUNTIME;
    *p = e->val;
    *n = e->len;
    return PP_OK;
}

#define CRC_BLOCK (4u << 20)

typedef struct { /* one shard's whole-file CRC, computed in blocks on several threads */
    const CkptShard *s;
    uint8_t **buf; /* [threads] block buffers */
    uint32_t *crc; /* [nblocks] */
    int *failed;   /* [nblocks] errno + 1 of a failed read, else 0 */
} CrcCtx;

static void crc_block(void *ctx, int b, int tid) {
    CrcCtx *c = ctx;
    uint64_t off = (uint64_t)b * CRC_BLOCK, left = c->s->file_bytes - off;
    size_t len = left < CRC_BLOCK ? (size_t)left : CRC_BLOCK;
    errno = 0;
    if (ckpt_pread_all(c->s->fd, c->buf[tid], len, off) != 0) c->failed[b] = errno + 1;
    else c->crc[b] = (uint32_t)crc32(0, c->buf[tid], (uInt)len);
}

/* CRC32 of the whole shard file as it is on disk now. */
static int file_crc(const CkptShard *s, int threads, uint32_t *crc, char *err,
                    size_t errlen) {
    int nb = (int)((s->file_bytes + CRC_BLOCK - 1) / CRC_BLOCK), rc = PP_OK;
    threads = threads < 1 ? 1 : threads > nb ? nb : threads;
    CrcCtx c = {s, pp_calloc((size_t)threads + 1, sizeof(uint8_t *)),
                pp_calloc((size_t)nb + 1, sizeof(uint32_t)),
                pp_calloc((size_t)nb + 1, sizeof(int))};
    for (int t = 0; t < threads; t++) c.buf[t] = pp_malloc(CRC_BLOCK);
    ckpt_parallel_for(threads, nb, crc_block, &c);
    *crc = 0;
    for (int b = 0; b < nb && rc == PP_OK; b++) {
        uint64_t left = s->file_bytes - (uint64_t)b * CRC_BLOCK;
        errno = c.failed[b] - 1;
        if (c.failed[b])
            rc = pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s: read failed: %s",
                         s->path, ckpt_syserr());
        else
            *crc = (uint32_t)crc32_combine(*crc, c.crc[b], left < CRC_BLOCK ? left : CRC_BLOCK);
    }
    for (int t = 0; t < threads; t++) free(c.buf[t]);
    free(c.buf);
    free(c.crc);
    free(c.failed);
    return rc;
}

int ckpt_verify(CkptReader *r, char *err, size_t errlen) {
    for (int s = 0; s < r->m.nshards; s++) {
        uint32_t crc;
        int rc = file_crc(&r->shards[s], r->threads, &crc, err, errlen);
        if (rc != PP_OK) return rc;
        if (crc != r->m.crc[s])
            return pp_errf(err, errlen, PP_ERUNTIME, "checkpoint shard %s: CRC32 of the file "
                           "is %08x but the manifest says %08x: the file is corrupted",
                           r->shards[s].path, crc, r->m.crc[s]);
    }
    return PP_OK;
}
