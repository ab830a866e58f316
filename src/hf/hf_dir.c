/* hf_dir.c — a Hugging Face model directory's weights: the index, the shards, lookup
 * and ranged reads by name, and the all-at-once directory writer (see hf_dir.h). */
#define _GNU_SOURCE
#include "hf_dir.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_json_internal.h"

#define INDEX_MAX (64u << 20) /* bytes of an index file: a 1T-parameter model's is ~5 MB */

typedef struct {
    const char *name;
    size_t shard;
    const SafetensorsTensor *t;
} HfDirEntry;

struct HfDir {
    char dir[PP_PATH_MAX];
    int sharded;
    json_t *index; /* the parsed index (owns the names); NULL for one file */
    size_t nshards;
    SafetensorsFile **shards; /* [nshards] */
    const char **files;       /* [nshards] the shards' names in the index */
    size_t n;
    HfDirEntry *e; /* [n] sorted by name */
    uint64_t index_bytes;
};

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const HfDirEntry *)a)->name, ((const HfDirEntry *)b)->name);
}

/* A name that stays inside the directory: not empty, no '/', not "." or "..". */
static int plain_file_name(const char *s) {
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int path_join(char *out, const char *dir, const char *name, char *err, size_t errlen) {
    if ((size_t)snprintf(out, PP_PATH_MAX, "%s/%s", dir, name) >= PP_PATH_MAX)
        return pp_errf(err, errlen, PP_EUSAGE, "%s/%s: path too long", dir, name);
    return PP_OK;
}

/* The shard `file`'s slot, opening it on first use. */
static int shard_of(HfDir *d, const char *index_path, const char *tensor, const char *file,
                    size_t *slot, char *err, size_t errlen) {
    for (size_t s = 0; s < d->nshards; s++)
        if (strcmp(file, d->files[s]) == 0) {
            *slot = s;
            return PP_OK;
        }
    if (!plain_file_name(file))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: weight_map puts tensor \"%s\" in \"%s\", which is not a file name "
                       "in the directory",
                       index_path, tensor, file);
    char path[PP_PATH_MAX], why[PP_ERR_MAX];
    if (path_join(path, d->dir, file, NULL, 0) != PP_OK)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: weight_map puts tensor \"%s\" in a file whose name (%zu bytes) makes "
                       "a path too long",
                       index_path, tensor, strlen(file));
    SafetensorsFile *f;
    int rc = safetensors_open(path, &f, why, sizeof why);
    if (rc != PP_OK)
        return pp_errf(err, errlen, rc, "%s: weight_map puts tensor \"%s\" in %s: %s", index_path,
                       tensor, file, why);
    d->shards = realloc(d->shards, (d->nshards + 1) * sizeof *d->shards);
    d->files = realloc(d->files, (d->nshards + 1) * sizeof *d->files);
    PP_CHECK(d->shards != NULL && d->files != NULL);
    d->shards[d->nshards] = f;
    d->files[d->nshards] = file;
    *slot = d->nshards++;
    return PP_OK;
}

static int open_index(HfDir *d, const char *index_path, char *err, size_t errlen) {
    struct stat st;
    if (stat(index_path, &st) == 0) d->index_bytes = (uint64_t)st.st_size;
    int rc = hf_json_load_file(index_path, INDEX_MAX, &d->index, err, errlen);
    if (rc != PP_OK) return rc;
    const json_t *map = json_object_get(d->index, "weight_map");
    if (!map || !json_is_object(map))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: \"weight_map\" is %s, not an object",
                       index_path, map ? hf_json_kind(map) : "missing");
    const json_t *meta = json_object_get(d->index, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: \"metadata\" is %s, not an object", index_path,
                       hf_json_kind(meta));
    d->e = pp_calloc(json_object_size(map) + 1, sizeof *d->e);
    const char *name;
    json_t *file;
    json_object_foreach((json_t *)map, name, file) {
        if (!json_is_string(file))
            return pp_errf(err, errlen, PP_EUSAGE, "%s: weight_map[\"%s\"] is %s, not a file name",
                           index_path, name, hf_json_kind(file));
        size_t s = 0;
        rc = shard_of(d, index_path, name, json_string_value(file), &s, err, errlen);
        if (rc != PP_OK) return rc;
        const SafetensorsTensor *t = safetensors_find(d->shards[s], name);
        if (!t)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: weight_map puts tensor \"%s\" in %s, but %s has no such tensor",
                           index_path, name, json_string_value(file),
                           safetensors_path(d->shards[s]));
        d->e[d->n++] = (HfDirEntry){name, s, t};
    }
    return PP_OK;
}

static int open_single(HfDir *d, const char *path, char *err, size_t errlen) {
    d->shards = pp_calloc(1, sizeof *d->shards);
    int rc = safetensors_open(path, &d->shards[0], err, errlen);
    if (rc != PP_OK) return rc;
    d->nshards = 1;
    size_t n = safetensors_count(d->shards[0]);
    d->e = pp_calloc(n + 1, sizeof *d->e);
    for (size_t i = 0; i < n; i++) {
        const SafetensorsTensor *t = safetensors_tensor(d->shards[0], i);
        d->e[d->n++] = (HfDirEntry){t->name, 0, t};
    }
    return PP_OK;
}

static const HfDirEntry *find_entry(const HfDir *d, const char *name);

/* Every tensor of every shard is one the index names, in that shard: a tensor the
 * weight_map leaves out would be in the model for transformers (which loads every key of
 * each shard the index names) and nowhere for a reader of the index. After the sort. */
static int check_shards(const HfDir *d, const char *index_path, char *err, size_t errlen) {
    for (size_t s = 0; s < d->nshards; s++)
        for (size_t i = 0; i < safetensors_count(d->shards[s]); i++) {
            const char *name = safetensors_tensor(d->shards[s], i)->name;
            const HfDirEntry *e = find_entry(d, name);
            if (e && e->shard == s) continue;
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s holds tensor \"%s\", but %s's weight_map %s%s: the index must "
                           "name every tensor of its shards, in the shard that holds it (a shard "
                           "of another checkpoint, or an index edited by hand?)",
                           safetensors_path(d->shards[s]), name, index_path,
                           e ? "puts it in " : "does not name it", e ? d->files[e->shard] : "");
        }
    return PP_OK;
}

int hf_dir_open(const char *dir, HfDir **out, char *err, size_t errlen) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return pp_errf(err, errlen, PP_EUSAGE, "cannot open model directory %s: %s", dir,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pp_errf(err, errlen, PP_EUSAGE, "%s is %s, not a model directory", dir,
                       pp_file_kind(st.st_mode));
    if (strlen(dir) >= PP_PATH_MAX - 64)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: path too long", dir);
    HfDir *d = pp_calloc(1, sizeof *d);
    strcpy(d->dir, dir);
    char single[PP_PATH_MAX], index[PP_PATH_MAX];
    path_join(single, dir, HF_DIR_WEIGHTS, NULL, 0);
    path_join(index, dir, HF_DIR_INDEX, NULL, 0);
    int rc; /* lstat: a dangling link (a Hub cache's blob not downloaded) is named as such */
    if (lstat(single, &st) == 0) {
        rc = open_single(d, single, err, errlen);
    } else if (lstat(index, &st) == 0) {
        d->sharded = 1;
        rc = open_index(d, index, err, errlen);
    } else {
        rc = pp_errf(err, errlen, PP_EUSAGE,
                     "%s has neither %s nor %s (not a Hugging Face model directory with "
                     "safetensors weights?)",
                     dir, HF_DIR_WEIGHTS, HF_DIR_INDEX);
    }
    if (rc == PP_OK) qsort(d->e, d->n, sizeof *d->e, cmp_entry);
    if (rc == PP_OK && d->sharded) rc = check_shards(d, index, err, errlen);
    if (rc != PP_OK) {
        hf_dir_close(d);
        return rc;
    }
    *out = d;
    return PP_OK;
}

void hf_dir_close(HfDir *d) {
    if (!d) return;
    for (size_t s = 0; s < d->nshards; s++) safetensors_close(d->shards[s]);
    free(d->shards);
    free(d->files);
    free(d->e);
    json_decref(d->index);
    free(d);
}

int hf_dir_sharded(const HfDir *d) { return d->sharded; }
size_t hf_dir_count(const HfDir *d) { return d->n; }
const char *hf_dir_name(const HfDir *d, size_t i) { return i < d->n ? d->e[i].name : NULL; }

static const HfDirEntry *find_entry(const HfDir *d, const char *name) {
    HfDirEntry key = {name, 0, NULL};
    return bsearch(&key, d->e, d->n, sizeof *d->e, cmp_entry);
}

const SafetensorsTensor *hf_dir_find(const HfDir *d, const char *name, const char **file) {
    const HfDirEntry *e = find_entry(d, name);
    if (e && file) *file = safetensors_path(d->shards[e->shard]);
    return e ? e->t : NULL;
}

int hf_dir_read(HfDir *d, const char *name, uint64_t first, uint64_t n, float *out, char *err,
                size_t errlen) {
    const HfDirEntry *e = find_entry(d, name);
    if (!e)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: no tensor \"%s\" in %s", d->dir, name,
                       d->sharded ? HF_DIR_INDEX "'s weight_map" : HF_DIR_WEIGHTS);
    return safetensors_read(d->shards[e->shard], e->t, first, n, out, err, errlen);
}

uint64_t hf_dir_bytes_read(const HfDir *d) {
    uint64_t b = 0;
    for (size_t s = 0; s < d->nshards; s++) b += safetensors_bytes_read(d->shards[s]);
    return b;
}

uint64_t hf_dir_header_bytes(const HfDir *d) {
    uint64_t b = d->index_bytes;
    for (size_t s = 0; s < d->nshards; s++) b += safetensors_header_bytes(d->shards[s]);
    return b;
}

/* ---- writing ------------------------------------------------------------------------ */

/* huggingface_hub's split_state_dict_into_shards_factory: shard[i] for each tensor and
 * the number of shards. Tensors fill the current shard in order until the next would
 * take it past `max`; a tensor larger than max gets a shard of its own at once. Shards
 * are numbered in the order they are closed, so a large tensor's shard comes before the
 * one being filled when it arrived. */
static size_t plan_shards(const SafetensorsWriteTensor *t, size_t n, uint64_t max, size_t *shard) {
    const size_t OPEN = (size_t)-1; /* in the shard being filled */
    size_t nshards = 0, first_open = 0, nopen = 0;
    uint64_t cur_size = 0;
    for (size_t i = 0; i <= n; i++) {
        uint64_t size = i < n ? safetensors_write_bytes(&t[i]) : 0;
        if (i < n && size > max) {
            shard[i] = nshards++;
            continue;
        }
        if (nopen && (i == n || cur_size + size > max)) { /* close the current shard */
            for (size_t j = first_open; j < i; j++)
                if (shard[j] == OPEN) shard[j] = nshards;
            nshards++;
            nopen = 0;
            cur_size = 0;
        }
        if (i == n) break;
        if (!nopen) first_open = i;
        shard[i] = OPEN;
        nopen++;
        cur_size += size;
    }
    return nshards;
}

/* Remove the staging directory `dir` and what is in it (only files: we put them there). */
static void remove_dir(const char *dir) {
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *de;
        while ((de = readdir(dp)) != NULL)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                unlinkat(dirfd(dp), de->d_name, 0);
        closedir(dp);
    }
    rmdir(dir);
}

/* `dir` may be written: absent, or an empty directory. */
static int check_target(const char *dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT) return PP_OK;
        return pp_errf(err, errlen, PP_EUSAGE, "cannot write %s: %s", dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return pp_errf(err, errlen, PP_EUSAGE, "cannot write the model directory %s: it is %s", dir,
                       pp_file_kind(st.st_mode));
    DIR *dp = opendir(dir);
    if (!dp) return pp_errf(err, errlen, PP_EUSAGE, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(dp)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) empty = 0;
    closedir(dp);
    if (!empty)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "cannot write the model directory %s: it exists and is not empty", dir);
    return PP_OK;
}

/* Make the staging directory beside `dir`: DIR.tmp.PID[.K], into stage. */
static int make_stage(const char *dir, char *stage, char *err, size_t errlen) {
    char parent[PP_PATH_MAX];
    pp_dirname(dir, parent, sizeof parent);
    if (pp_mkdirs(parent) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot create %s: %s", parent, strerror(errno));
    for (int k = 0; k < 1000; k++) {
        int m = k ? snprintf(stage, PP_PATH_MAX, "%s.tmp.%ld.%d", dir, (long)getpid(), k)
                  : snprintf(stage, PP_PATH_MAX, "%s.tmp.%ld", dir, (long)getpid());
        if (m >= PP_PATH_MAX - 64) return pp_errf(err, errlen, PP_EUSAGE, "%s: path too long", dir);
        if (mkdir(stage, 0755) == 0) return PP_OK;
        if (errno != EEXIST) break;
    }
    return pp_errf(err, errlen, PP_ERUNTIME, "cannot create %s: %s", stage, strerror(errno));
}

static int write_blob(const char *stage, const char *name, const void *data, size_t len, char *err,
                      size_t errlen) {
    char path[PP_PATH_MAX];
    PPFile pf;
    int rc = path_join(path, stage, name, err, errlen);
    if (rc == PP_OK) rc = pp_file_create(&pf, path, ".part", err, errlen);
    if (rc != PP_OK) return rc;
    fwrite(data, 1, len, pf.f);
    return pp_file_commit(&pf, err, errlen);
}

static void shard_name(char *buf, size_t n, size_t s, size_t nshards) {
    if (nshards == 1)
        snprintf(buf, n, "%s", HF_DIR_WEIGHTS);
    else
        snprintf(buf, n, "model-%05zu-of-%05zu.safetensors", s + 1, nshards);
}

/* The index as transformers writes it. */
static void build_index(HfBuf *b, const SafetensorsWriteTensor *t, size_t n, const size_t *shard,
                        size_t nshards) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    uint64_t total = 0;
    char name[64];
    for (size_t i = 0; i < n; i++) {
        total += safetensors_write_bytes(&t[i]);
        shard_name(name, sizeof name, shard[i], nshards);
        json_object_set_new(map, t[i].name, json_string(name));
    }
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "weight_map", map);
    hf_json_dump_python(b, root);
    hf_buf_puts(b, "\n");
    json_decref(root);
}

/* Write the shards, the index and the other files into `stage`. */
static int write_stage(const char *stage, const SafetensorsWriteTensor *t, size_t n,
                       const HfDirWriteOptions *o, uint64_t max, char *err, size_t errlen) {
    size_t *shard = pp_malloc((n + 1) * sizeof *shard);
    SafetensorsWriteTensor *sub = pp_malloc((n + 1) * sizeof *sub);
    size_t nshards = plan_shards(t, n, max, shard);
    if (nshards == 0) nshards = 1; /* no tensors: one empty model.safetensors */
    int rc = PP_OK;
    char name[64], path[PP_PATH_MAX];
    for (size_t s = 0; s < nshards && rc == PP_OK; s++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (shard[i] == s) sub[m++] = t[i];
        shard_name(name, sizeof name, s, nshards);
        rc = path_join(path, stage, name, err, errlen);
        if (rc == PP_OK)
            rc = safetensors_write(path, sub, m, o->meta, o->nmeta, o->fill, o->ctx, err, errlen);
    }
    if (rc == PP_OK && nshards > 1) {
        HfBuf b = {0};
        build_index(&b, t, n, shard, nshards);
        rc = write_blob(stage, HF_DIR_INDEX, b.p, b.len, err, errlen);
        hf_buf_free(&b);
    }
    for (size_t i = 0; i < o->nfiles && rc == PP_OK; i++)
        rc = write_blob(stage, o->files[i].name, o->files[i].data, o->files[i].len, err, errlen);
    free(sub);
    free(shard);
    return rc;
}

/* Names the caller chose: tensors without repeats (safetensors_write checks each
 * shard; the index needs them unique across shards), files plain and not ours. */
static int check_names(const char *dir, const SafetensorsWriteTensor *t, size_t n,
                       const HfDirWriteOptions *o, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0])
            return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor %zu has no name", dir, i);
        if (safetensors_write_bytes(&t[i]) == UINT64_MAX)
            return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": its shape overflows", dir,
                           t[i].name);
    }
    const char **names = pp_malloc((n + 1) * sizeof *names);
    for (size_t i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, n, sizeof *names, cmp_str);
    int rc = PP_OK;
    for (size_t i = 1; i < n && rc == PP_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\" is given twice", dir, names[i]);
    free(names);
    for (size_t i = 0; i < o->nfiles && rc == PP_OK; i++) {
        const char *f = o->files[i].name;
        if (!f || !plain_file_name(f) || strcmp(f, HF_DIR_INDEX) == 0 ||
            (strncmp(f, "model", 5) == 0 && strstr(f, ".safetensors")))
            rc = pp_errf(err, errlen, PP_EUSAGE,
                         "%s: \"%s\" cannot be written beside the weights (not a plain file "
                         "name, or the weights' own)",
                         dir, f ? f : "(null)");
        for (size_t j = 0; j < i && rc == PP_OK; j++)
            if (strcmp(f, o->files[j].name) == 0)
                rc = pp_errf(err, errlen, PP_EUSAGE, "%s: file \"%s\" is given twice", dir, f);
    }
    return rc;
}

int hf_dir_write(const char *dir_arg, const SafetensorsWriteTensor *t, size_t n,
                 const HfDirWriteOptions *o, char *err, size_t errlen) {
    static const HfDirWriteOptions none;
    if (!o) o = &none;
    char dir[PP_PATH_MAX]; /* without trailing slashes: the staging name goes beside it */
    if ((size_t)snprintf(dir, sizeof dir, "%s", dir_arg) >= sizeof dir - 64)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: path too long", dir_arg);
    for (size_t k = strlen(dir); k > 1 && dir[k - 1] == '/'; k--) dir[k - 1] = 0;
    uint64_t max = o->max_shard_size ? o->max_shard_size : HF_DIR_DEFAULT_SHARD;
    int rc = check_names(dir, t, n, o, err, errlen);
    if (rc == PP_OK) rc = check_target(dir, err, errlen);
    char stage[PP_PATH_MAX];
    if (rc == PP_OK) rc = make_stage(dir, stage, err, errlen);
    if (rc != PP_OK) return rc;
    rc = write_stage(stage, t, n, o, max, err, errlen);
    if (rc == PP_OK && pp_fsync_dir(stage) != 0)
        rc = pp_errf(err, errlen, PP_ERUNTIME, "cannot fsync %s: %s", stage, strerror(errno));
    if (rc == PP_OK && rename(stage, dir) != 0) /* replaces an empty directory */
        rc = pp_errf(err, errlen, errno == ENOTEMPTY || errno == EEXIST ? PP_EUSAGE : PP_ERUNTIME,
                     "cannot rename %s to %s: %s", stage, dir, strerror(errno));
    if (rc != PP_OK) {
        remove_dir(stage);
        return rc;
    }
    char parent[PP_PATH_MAX];
    pp_dirname(dir, parent, sizeof parent);
    if (pp_fsync_dir(parent) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s written, but cannot fsync %s: %s", dir, parent,
                       strerror(errno));
    return PP_OK;
}

/* ---- sizes ---------------------------------------------------------------------------- */

int hf_dir_parse_size(const char *text, uint64_t *bytes, char *err, size_t errlen) {
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},
                 {"kb", 1e3},
                 {"mb", 1e6},
                 {"gb", 1e9},
                 {"tb", 1e12},
                 {"kib", 1024.0},
                 {"mib", 1048576.0},
                 {"gib", 1073741824.0},
                 {"tib", 1099511627776.0}};
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    while (*end == ' ') end++;
    if (end == text || errno || !isfinite(v) || v <= 0 || isspace((unsigned char)text[0])) goto bad;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].unit) != 0) continue;
        double b = floor(v * units[i].mult); /* Python's int(value * multiplier) */
        if (b < 1 || b >= 1.8e19) goto bad;
        *bytes = (uint64_t)b;
        return PP_OK;
    }
bad:
    return pp_errf(err, errlen, PP_EUSAGE,
                   "bad size \"%s\": expected bytes, or a number with KB, MB, GB, TB (powers "
                   "of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 5GB",
                   text);
}
