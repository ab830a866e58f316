/* test_ckpt.c — checkpoint storage: round trips over sizes, levels, shuffle and thread
 * counts (identical bytes), metadata and manifest entries, every corruption (each byte
 * flipped, truncation, missing shard, wrong magic/version/shape/name), the directory
 * protocol (staging, keep-N, latest, resolve), SIGKILL at random moments while saving,
 * and the asynchronous writer. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt/ckpt.h"
#include "testdir.h"
#include "checkrun.h"

static char g_err[PP_ERR_MAX];

static void setup(void) {
    testdir_create("pp_test_ckpt");
    g_err[0] = 0;
}

static void teardown(void) { testdir_remove(); }

/* The whole file in a malloc'd buffer, its length in *n. */
static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n + 1);
    ck_assert_uint_eq(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static int same_files(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *pa = read_all(a, &na), *pb = read_all(b, &nb);
    int same = na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

/* XOR one byte of a file in place. */
static void flip_byte(const char *path, long long off, unsigned char mask) {
    int fd = open(path, O_RDWR);
    unsigned char c;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, &c, 1, off), 1);
    c ^= mask;
    ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

static uint64_t g_rng;

static double uniform(void) { /* xorshift64*, in (0, 1) */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return ((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
}

/* Gaussian values with std 0.02 rounded to float: what trained weights look like. */
static void fill_gauss(float *a, size_t n, uint64_t seed) {
    g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++)
        a[i] = (float)(0.02 * sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

/* ---- a set of tensors of awkward sizes ------------------------------------------------- */

#define NT 9
#define BIG (1024 + 3) /* floats: more than one 4096-byte chunk, not a multiple of 4 */

typedef struct {
    CkptTensor t[NT];
    float *data[NT];
} Set;

/* Tensors: a 0-d scalar, 1 element, 3, 5x7, 2x3x5, 0x5 (empty), 1000x3, BIG, 4x BIG.
 * Values depend on `seed`. */
static void set_init(Set *s, uint64_t seed) {
    static const struct { const char *name; int ndim; int64_t shape[3]; } spec[NT] = {
        {"scalar", 0, {0}},         {"one", 1, {1}},          {"h.0.three", 1, {3}},
        {"h.0.m5x7", 2, {5, 7}},    {"h.1.c2x3x5", 3, {2, 3, 5}}, {"empty", 2, {0, 5}},
        {"h.1.w1000x3", 2, {1000, 3}}, {"big", 1, {BIG}},       {"h.11.bigger", 2, {4, BIG}}};
    memset(s, 0, sizeof *s);
    for (int i = 0; i < NT; i++) {
        int64_t n = 1;
        s->t[i].name = spec[i].name;
        s->t[i].ndim = spec[i].ndim;
        for (int d = 0; d < spec[i].ndim; d++) n *= (s->t[i].shape[d] = spec[i].shape[d]);
        s->data[i] = malloc((size_t)n * 4 + 4);
        fill_gauss(s->data[i], (size_t)n, seed * 100 + (uint64_t)i);
        s->t[i].data = s->data[i];
    }
}

static void set_free(Set *s) {
    for (int i = 0; i < NT; i++) free(s->data[i]);
}

static int64_t numel(const CkptTensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static CkptOptions opts(int level, int shuffle, int threads, size_t chunk) {
    CkptOptions o;
    ckpt_options_default(&o);
    o.level = level;
    o.shuffle = shuffle;
    o.threads = threads;
    o.chunk_bytes = chunk;
    return o;
}

/* Save tensors t[i] with i % world == rank into shard `rank` of step `step` under
 * root, every rank with meta "rank" and "step", then commit. */
static void save(const char *root, long step, int world, const CkptTensor *t, int n,
                 const CkptOptions *o, int keep) {
    char dir[512], path[600];
    ck_assert_int_eq(ckpt_stage_dir(root, step, dir, sizeof dir, g_err, sizeof g_err), PP_OK);
    for (int r = 0; r < world; r++) {
        CkptTensor mine[64];
        int k = 0;
        for (int i = r; i < n; i += world) mine[k++] = t[i];
        CkptMeta *m = ckpt_meta_create();
        ckpt_meta_set_u64(m, "rank", (uint64_t)r);
        ckpt_meta_set_u64(m, "step", (uint64_t)step);
        ckpt_shard_path(dir, r, path, sizeof path);
        int rc = ckpt_write_shard(path, m, mine, k, o, g_err, sizeof g_err);
        ck_assert_msg(rc == PP_OK, "write_shard: %s", g_err);
        ckpt_meta_destroy(m);
    }
    int rc = ckpt_commit(root, step, world, NULL, 0, keep, g_err, sizeof g_err);
    ck_assert_msg(rc == PP_OK, "commit: %s", g_err);
}

/* Open dir and read every tensor of t[0..n) with its expected shape; check values. */
static void check_all(const char *dir, const CkptTensor *t, int n, int threads) {
    CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
    ck_assert_msg(r != NULL, "open: %s", g_err);
    ckpt_set_threads(r, threads);
    ck_assert_int_eq(ckpt_ntensors(r), n);
    for (int i = 0; i < n; i++) {
        int64_t ne = numel(&t[i]);
        float *got = malloc((size_t)ne * 4 + 4);
        int rc = ckpt_read(r, t[i].name, got, t[i].shape, t[i].ndim, g_err, sizeof g_err);
        ck_assert_msg(rc == PP_OK, "read %s: %s", t[i].name, g_err);
        ck_assert_msg(memcmp(got, t[i].data, (size_t)ne * 4) == 0, "%s differs", t[i].name);
        free(got);
    }
    ckpt_close(r);
}

/* Try to load everything; PP_OK, or the first error (in g_err). *at_read tells whether
 * the error came from ckpt_read (then *which is the tensor index and the dst was checked
 * to be untouched). */
static int try_load(const char *dir, const CkptTensor *t, int n, int *at_read, int *which) {
    CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
    *at_read = 0;
    if (!r) return PP_ERUNTIME;
    int rc = PP_OK;
    for (int i = 0; i < n && rc == PP_OK; i++) {
        int64_t ne = numel(&t[i]);
        float *got = malloc((size_t)ne * 4 + 4);
        for (int64_t j = 0; j < ne; j++) got[j] = -7.0f;
        rc = ckpt_read(r, t[i].name, got, t[i].shape, t[i].ndim, g_err, sizeof g_err);
        if (rc != PP_OK) {
            *at_read = 1;
            *which = i;
            for (int64_t j = 0; j < ne; j++) ck_assert_msg(got[j] == -7.0f, "dst written");
        }
        free(got);
    }
    ckpt_close(r);
    return rc;
}

#define ASSERT_ERR_HAS(needle) \
    ck_assert_msg(strstr(g_err, (needle)) != NULL, "error '%s' lacks '%s'", g_err, (needle))

/* ---- round trips ----------------------------------------------------------------------- */

/* Every level and shuffle setting reads back bit-exactly, on 1 and 3 threads, and the
 * shard bytes do not depend on the compression thread count. */
START_TEST(test_roundtrip_levels_shuffle_threads) {
    static const int levels[] = {0, 1, 6, 9};
    Set s;
    set_init(&s, 1);
    for (int li = 0; li < 4; li++)
        for (int sh = 0; sh < 4; sh++) { /* sh: shuffle bit 0, Z_RLE bit 1 */
            char root[64], dir[600];
            snprintf(root, sizeof root, "l%d_s%d", levels[li], sh);
            CkptOptions o1 = opts(levels[li], sh & 1, 1, 4096);
            CkptOptions o3 = opts(levels[li], sh & 1, 3, 4096);
            o1.strategy = o3.strategy = sh & 2 ? CKPT_RLE : CKPT_DEFLATE;
            save(tmp(root), 5, 1, s.t, NT, &o1, 2);
            snprintf(dir, sizeof dir, "%s/step_0000005", tmp(root));
            ck_assert_int_eq(ckpt_write_shard(tmp("one"), NULL, s.t, NT, &o1, g_err, 256), 0);
            ck_assert_int_eq(ckpt_write_shard(tmp("three"), NULL, s.t, NT, &o3, g_err, 256), 0);
            ck_assert_msg(same_files(tmp("one"), tmp("three")), "level %d shuffle/rle %d: "
                          "bytes differ between 1 and 3 threads", levels[li], sh);
            check_all(dir, s.t, NT, 1);
            check_all(dir, s.t, NT, 3);
            CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
            CkptTensorInfo info;
            ck_assert_int_eq(ckpt_find(r, "h.11.bigger", &info), 0);
            ck_assert_int_eq(info.ndim, 2);
            ck_assert_int_eq(info.shape[0], 4);
            ck_assert_int_eq(info.shape[1], BIG);
            ck_assert_int_eq(info.numel, 4 * BIG);
            ck_assert_int_eq(info.shuffle, levels[li] > 0 && (sh & 1));
            ck_assert_int_eq(info.compressed, levels[li] > 0);
            if (levels[li] == 0) ck_assert_uint_eq(info.stored_bytes, info.raw_bytes);
            ck_assert_int_eq(ckpt_find(r, "scalar", &info), 0);
            ck_assert_int_eq(info.ndim, 0);
            ck_assert_int_eq(info.numel, 1);
            ck_assert_int_eq(ckpt_find(r, "nope", &info), -1);
            ck_assert_int_eq(ckpt_verify(r, g_err, sizeof g_err), PP_OK);
            ckpt_close(r);
        }
    set_free(&s);
}
END_TEST

/* The default 4 MiB chunks: a tensor of one chunk and 3 floats; 1 and 3 threads. */
START_TEST(test_roundtrip_default_chunk) {
    int64_t n = (int64_t)CKPT_DEFAULT_CHUNK / 4 + 3;
    float *a = malloc((size_t)n * 4);
    fill_gauss(a, (size_t)n, 7);
    CkptTensor t = {.name = "wte", .ndim = 2, .shape = {3, n / 3}, .data = a};
    CkptOptions o1 = opts(1, 1, 1, 0), o3 = opts(1, 1, 3, 0);
    save(g_dir, 1, 1, &t, 1, &o1, 1);
    ck_assert_int_eq(ckpt_write_shard(tmp("one"), NULL, &t, 1, &o1, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_write_shard(tmp("three"), NULL, &t, 1, &o3, g_err, 256), PP_OK);
    ck_assert(same_files(tmp("one"), tmp("three")));
    check_all(tmp("step_0000001"), &t, 1, 3);
    free(a);
}
END_TEST

/* On gaussian weights the byte shuffle makes the shard smaller at levels 1 and 6. */
START_TEST(test_shuffle_helps_on_weights) {
    size_t n = 1 << 18;
    float *a = malloc(n * 4);
    fill_gauss(a, n, 3);
    CkptTensor t = {.name = "w", .ndim = 1, .shape = {(int64_t)n}, .data = a};
    for (int level = 1; level <= 6; level += 5) {
        CkptOptions plain = opts(level, 0, 2, 0), shuf = opts(level, 1, 2, 0);
        ck_assert_int_eq(ckpt_write_shard(tmp("plain"), NULL, &t, 1, &plain, g_err, 256), 0);
        ck_assert_int_eq(ckpt_write_shard(tmp("shuf"), NULL, &t, 1, &shuf, g_err, 256), 0);
        long long p = file_size(tmp("plain")), q = file_size(tmp("shuf"));
        ck_assert_msg(q < p * 0.97, "level %d: shuffled %lld vs plain %lld bytes", level, q, p);
        ck_assert_msg(p < (long long)n * 4, "level %d: deflate did not compress", level);
    }
    free(a);
}
END_TEST

/* Typed metadata per shard and the caller's manifest entries come back as written. */
START_TEST(test_meta_and_extra) {
    float x = 1.5f;
    CkptTensor t = {.name = "x", .data = &x};
    char dir[600], path[700];
    const unsigned char blob[] = {0, 1, 2, 255, 0, 7};
    ck_assert_int_eq(ckpt_stage_dir(g_dir, 42, dir, sizeof dir, g_err, 256), PP_OK);
    for (int r = 0; r < 2; r++) {
        CkptMeta *m = ckpt_meta_create();
        ck_assert_int_eq(ckpt_meta_set_u64(m, "rank", (uint64_t)r), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_u64(m, "max", UINT64_MAX), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_f64(m, "lr", 3.0e-4), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_f64(m, "negzero", -0.0), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_str(m, "config", "model:\n  dim: 768\n"), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_str(m, "empty", ""), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_bytes(m, "rng", blob, sizeof blob), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_str(m, "retyped", "text"), PP_OK);
        ck_assert_int_eq(ckpt_meta_set_u64(m, "retyped", 9), PP_OK); /* replaces */
        ck_assert_int_eq(ckpt_meta_set_u64(m, "bad key", 1), PP_EUSAGE);
        ck_assert_int_eq(ckpt_meta_set_u64(m, "", 1), PP_EUSAGE);
        ckpt_shard_path(dir, r, path, sizeof path);
        t.name = r ? "y" : "x";
        ck_assert_int_eq(ckpt_write_shard(path, m, &t, 1, NULL, g_err, 256), PP_OK);
        ckpt_meta_destroy(m);
    }
    CkptKV extra[] = {{"config_hash", "0x12ab"}, {"config", "a: 1\nb: \\x\r\n"},
                      {"empty", ""}};
    ck_assert_int_eq(ckpt_commit(g_dir, 42, 2, extra, 3, 2, g_err, 256), PP_OK);
    CkptReader *r = ckpt_open(tmp("step_0000042"), g_err, sizeof g_err);
    ck_assert_msg(r != NULL, "%s", g_err);
    ck_assert_int_eq(ckpt_step(r), 42);
    ck_assert_int_eq(ckpt_nshards(r), 2);
    ck_assert_str_eq(ckpt_extra(r, "config_hash"), "0x12ab");
    ck_assert_str_eq(ckpt_extra(r, "config"), "a: 1\nb: \\x\r\n");
    ck_assert_str_eq(ckpt_extra(r, "empty"), "");
    ck_assert_ptr_null(ckpt_extra(r, "missing"));
    for (int s = 0; s < 2; s++) {
        uint64_t u;
        double d;
        const char *str;
        const void *p;
        size_t n;
        ck_assert_int_eq(ckpt_meta_u64(r, s, "rank", &u), PP_OK);
        ck_assert_uint_eq(u, (uint64_t)s);
        ck_assert_int_eq(ckpt_meta_u64(r, s, "max", &u), PP_OK);
        ck_assert(u == UINT64_MAX);
        ck_assert_int_eq(ckpt_meta_f64(r, s, "lr", &d), PP_OK);
        ck_assert(d == 3.0e-4);
        ck_assert_int_eq(ckpt_meta_f64(r, s, "negzero", &d), PP_OK);
        ck_assert(d == 0.0 && signbit(d));
        ck_assert_int_eq(ckpt_meta_str(r, s, "config", &str), PP_OK);
        ck_assert_str_eq(str, "model:\n  dim: 768\n");
        ck_assert_int_eq(ckpt_meta_str(r, s, "empty", &str), PP_OK);
        ck_assert_str_eq(str, "");
        ck_assert_int_eq(ckpt_meta_bytes(r, s, "rng", &p, &n), PP_OK);
        ck_assert_uint_eq(n, sizeof blob);
        ck_assert(memcmp(p, blob, n) == 0);
        ck_assert_int_eq(ckpt_meta_u64(r, s, "retyped", &u), PP_OK);
        ck_assert_uint_eq(u, 9);
        ck_assert_int_eq(ckpt_meta_str(r, s, "retyped", &str), PP_ERUNTIME); /* type */
        ck_assert_int_eq(ckpt_meta_u64(r, s, "lr", &u), PP_ERUNTIME);
        ck_assert_int_eq(ckpt_meta_u64(r, s, "missing", &u), PP_ERUNTIME);
    }
    uint64_t u;
    ck_assert_int_eq(ckpt_meta_u64(r, 2, "rank", &u), PP_ERUNTIME); /* no shard 2 */
    ckpt_close(r);
}
END_TEST

/* Tensors are found by global name in whichever shard holds them, so any split can
 * load them; the same name in two shards is an error. */
START_TEST(test_global_names_across_shards) {
    Set s;
    set_init(&s, 2);
    CkptOptions o = opts(6, 1, 2, 4096);
    save(g_dir, 3, 3, s.t, NT, &o, 2);
    check_all(tmp("step_0000003"), s.t, NT, 2);
    CkptReader *r = ckpt_open(tmp("step_0000003"), g_err, sizeof g_err);
    CkptTensorInfo info;
    for (int i = 0; i < NT; i++) {
        ck_assert_int_eq(ckpt_find(r, s.t[i].name, &info), 0);
        ck_assert_int_eq(info.shard, i % 3);
    }
    for (int i = 0; i < NT; i++) { /* shard order, then file order */
        ck_assert_int_eq(ckpt_tensor_at(r, i, &info), 0);
        ck_assert_int_eq(info.shard, i / 3);
        ck_assert_str_eq(info.name, s.t[(i % 3) * 3 + i / 3].name);
    }
    ck_assert_int_eq(ckpt_tensor_at(r, NT, &info), -1);
    ckpt_close(r);
    /* a name in two shards */
    char dir[600], path[700];
    ck_assert_int_eq(ckpt_stage_dir(g_dir, 4, dir, sizeof dir, g_err, 256), PP_OK);
    for (int k = 0; k < 2; k++) {
        ckpt_shard_path(dir, k, path, sizeof path);
        ck_assert_int_eq(ckpt_write_shard(path, NULL, &s.t[1], 1, &o, g_err, 256), PP_OK);
    }
    ck_assert_int_eq(ckpt_commit(g_dir, 4, 2, NULL, 0, 3, g_err, 256), PP_OK);
    ck_assert_ptr_null(ckpt_open(tmp("step_0000004"), g_err, sizeof g_err));
    ASSERT_ERR_HAS("'one' is in both");
    set_free(&s);
}
END_TEST

/* ---- corruption ----------------------------------------------------------------------- */

/* Flipping any single byte of a shard is caught: at open (header, metadata, index,
 * trailer) naming the file, or at read naming the file and the tensor, with the
 * destination untouched. */
START_TEST(test_flip_every_shard_byte) {
    Set s;
    set_init(&s, 3);
    /* a small shard */
    s.t[6].shape[0] = 100;
    s.t[7].shape[0] = 40;
    s.t[8].shape[1] = 30;
    CkptMeta *m = ckpt_meta_create();
    ckpt_meta_set_str(m, "note", "meta");
    char dir[600], path[700];
    ck_assert_int_eq(ckpt_stage_dir(g_dir, 1, dir, sizeof dir, g_err, 256), PP_OK);
    ckpt_shard_path(dir, 0, path, sizeof path);
    CkptOptions o = opts(6, 1, 1, 64); /* several chunks per tensor */
    ck_assert_int_eq(ckpt_write_shard(path, m, s.t, NT, &o, g_err, 256), PP_OK);
    ckpt_shard_path(dir, 1, path, sizeof path);
    CkptTensor other = {.name = "other", .ndim = 1, .shape = {3}, .data = s.data[2]};
    ck_assert_int_eq(ckpt_write_shard(path, NULL, &other, 1, &o, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_commit(g_dir, 1, 2, NULL, 0, 2, g_err, 256), PP_OK);
    char shard[600];
    snprintf(shard, sizeof shard, "%s", tmp("step_0000001/shard_00000.ckpt"));
    int at_read, which, nread = 0, nopen = 0;
    ck_assert_int_eq(try_load(tmp("step_0000001"), s.t, NT, &at_read, &which), PP_OK);
    long long size = file_size(shard);
    for (long long off = 0; off < size; off++) {
        unsigned char mask = (unsigned char)(1u << (off % 8));
        flip_byte(shard, off, mask);
        int rc = try_load(tmp("step_0000001"), s.t, NT, &at_read, &which);
        ck_assert_msg(rc == PP_ERUNTIME, "flip at %lld of %lld not detected", off, size);
        ASSERT_ERR_HAS(shard);
        if (at_read) {
            char want[128];
            snprintf(want, sizeof want, "tensor '%s'", s.t[which].name);
            ASSERT_ERR_HAS(want);
            ASSERT_ERR_HAS("CRC32");
        }
        nread += at_read;
        nopen += !at_read;
        flip_byte(shard, off, mask);
    }
    ck_assert_int_gt(nread, size / 4); /* most bytes are tensor data */
    ck_assert_int_gt(nopen, 64);       /* the header alone is 64 */
    ckpt_meta_destroy(m);
    set_free(&s);
}
END_TEST

/* Any byte of the manifest flipped: the open fails and says it is the manifest. */
START_TEST(test_flip_every_manifest_byte) {
    Set s;
    set_init(&s, 4);
    CkptOptions o = opts(1, 1, 1, 4096);
    save(g_dir, 2, 2, s.t, 3, &o, 2);
    char man[600];
    snprintf(man, sizeof man, "%s", tmp("step_0000002/manifest"));
    long long size = file_size(man);
    ck_assert_int_gt(size, 100);
    for (long long off = 0; off < size; off++) {
        flip_byte(man, off, 0x04);
        CkptReader *r = ckpt_open(tmp("step_0000002"), g_err, sizeof g_err);
        ck_assert_msg(r == NULL, "manifest flip at %lld not detected", off);
        ASSERT_ERR_HAS("manifest");
        flip_byte(man, off, 0x04);
    }
    set_free(&s);
}
END_TEST

/* Write `body` (the manifest without its CRC line) as dir/manifest with a correct CRC
 * line: what someone editing a manifest on purpose would do. */
static void forge_manifest(const char *dir, const char *body) {
    char path[700];
    snprintf(path, sizeof path, "%s/manifest", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%scrc32 = %08x\n", body, (uint32_t)crc32(0, (const unsigned char *)body,
                                                          (uInt)strlen(body)));
    fclose(f);
}

/* A manifest edited with its CRC recomputed is still checked: every fixed key present
 * once, one shard per rank, a step that fits a long. */
START_TEST(test_forged_manifest_fields) {
    Set s;
    set_init(&s, 4);
    CkptOptions o = opts(1, 1, 1, 4096);
    save(g_dir, 2, 2, s.t, 3, &o, 2);
    const char *dir = tmp("step_0000002");
    size_t n;
    char *orig = (char *)read_all(tmp("step_0000002/manifest"), &n);
    orig[n] = 0;
    strstr(orig, "\ncrc32 = ")[1] = 0; /* the body: all but the last line, the CRC's */
    static const struct { const char *from, *to, *why; } cases[] = {
        {"format = pptrain-checkpoint\n", "", "format, version, step or world_size is missing"},
        {"version = 1\n", "", "is missing"},
        {"step = 2\n", "", "is missing"},
        {"world_size = 2\n", "", "is missing"},
        {"step = 2\n", "step = 2\nstep = 3\n", "a key is given twice"},
        {"world_size = 2\n", "world_size = 3\n", "shards and world_size differ"},
        {"world_size = 2\n", "world_size = 1\n", "shards and world_size differ"},
        {"step = 2\n", "step = 9223372036854775808\n", "bad step"},
        {"step = 2\n", "step = -1\n", "bad step"},
        {"step = 2\n", "step = 0x10\n", "bad step"},
    };
    char body[8192];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *at = strstr(orig, cases[i].from);
        ck_assert_ptr_nonnull(at);
        snprintf(body, sizeof body, "%.*s%s%s", (int)(at - orig), orig, cases[i].to,
                 at + strlen(cases[i].from));
        forge_manifest(dir, body);
        CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
        ck_assert_msg(r == NULL, "case %zu (%s) was accepted", i, cases[i].to);
        ASSERT_ERR_HAS("step_0000002/manifest");
        ASSERT_ERR_HAS(cases[i].why);
    }
    /* the largest step a long holds is the manifest's business; callers bound it */
    snprintf(body, sizeof body, "%s", orig);
    char *at = strstr(body, "step = 2\n");
    memmove(at + strlen("step = 9223372036854775807"), at + strlen("step = 2"),
            strlen(at + strlen("step = 2")) + 1);
    memcpy(at, "step = 9223372036854775807", strlen("step = 9223372036854775807"));
    forge_manifest(dir, body);
    CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
    ck_assert_msg(r != NULL, "%s", g_err);
    ck_assert_int_eq(ckpt_step(r), 9223372036854775807L);
    ck_assert_str_eq(ckpt_shard_file(r, 1), tmp("step_0000002/shard_00001.ckpt"));
    ck_assert_ptr_null(ckpt_shard_file(r, 2));
    ckpt_close(r);
    free(orig);
    set_free(&s);
}
END_TEST

/* A FIFO in place of the manifest or of a shard is refused at once (a plain open would
 * wait for a writer forever: the test's timeout). */
START_TEST(test_fifo_manifest_and_shard) {
    Set s;
    set_init(&s, 4);
    CkptOptions o = opts(1, 1, 1, 4096);
    save(g_dir, 2, 2, s.t, 3, &o, 2);
    const char *dir = tmp("step_0000002"), *shard = tmp("step_0000002/shard_00001.ckpt");
    ck_assert_int_eq(rename(shard, tmp("kept")), 0);
    ck_assert_int_eq(mkfifo(shard, 0600), 0);
    ck_assert_ptr_null(ckpt_open(dir, g_err, sizeof g_err));
    ASSERT_ERR_HAS("shard_00001.ckpt: it is a FIFO, not a regular file");
    ck_assert_int_eq(unlink(shard), 0);
    ck_assert_int_eq(rename(tmp("kept"), shard), 0);
    const char *man = tmp("step_0000002/manifest");
    ck_assert_int_eq(unlink(man), 0);
    ck_assert_int_eq(mkfifo(man, 0600), 0);
    ck_assert_ptr_null(ckpt_open(dir, g_err, sizeof g_err));
    ASSERT_ERR_HAS("step_0000002/manifest: it is a FIFO, not a regular file");
    set_free(&s);
}
END_TEST

/* Without `latest` (a copy that dropped symlinks) ROOT's checkpoints are still listed,
 * and resolving ROOT says which one to pass rather than guessing. */
START_TEST(test_steps_without_latest) {
    Set s;
    set_init(&s, 4);
    CkptOptions o = opts(1, 1, 1, 4096);
    long *steps = (long *)1;
    ck_assert_int_eq(ckpt_list_steps(tmp("absent"), &steps), 0);
    ck_assert_ptr_null(steps);
    ck_assert_int_eq(ckpt_list_steps(g_dir, &steps), 0);
    for (long step = 2; step <= 6; step += 2) save(g_dir, step, 2, s.t, 3, &o, 0);
    ck_assert_int_eq(mkdir(tmp("step_0000008"), 0755), 0); /* no manifest: not complete */
    ck_assert_int_eq(mkdir(tmp("step_0000009.tmp"), 0755), 0);
    ck_assert_int_eq(ckpt_list_steps(g_dir, &steps), 4);
    ck_assert(steps[0] == 8 && steps[1] == 6 && steps[2] == 4 && steps[3] == 2);
    free(steps);
    FILE *f = fopen(tmp("file"), "w");
    fclose(f);
    ck_assert_int_eq(ckpt_list_steps(tmp("file"), &steps), -1);
    ck_assert_int_eq(errno, ENOTDIR);
    ck_assert_int_eq(unlink(tmp("latest")), 0);
    char got[600], want[700];
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, sizeof g_err), PP_ERUNTIME);
    snprintf(want, sizeof want, "'%s' holds 4 checkpoint(s) but no `latest` link", g_dir);
    ASSERT_ERR_HAS(want);
    snprintf(want, sizeof want, "e.g. '%s' (the newest complete one)", tmp("step_0000006"));
    ASSERT_ERR_HAS(want);
    snprintf(want, sizeof want, "`ln -s step_0000006 %s/latest`", g_dir);
    ASSERT_ERR_HAS(want);
    ck_assert_int_eq(ckpt_resolve(tmp("step_0000006"), got, sizeof got, g_err, 256), PP_OK);
    set_free(&s);
}
END_TEST

/* A shard cut short anywhere: the open fails naming it (against the manifest); and
 * commit, which has no manifest to compare with, catches it from the shard alone. */
START_TEST(test_truncated_shard) {
    Set s;
    set_init(&s, 5);
    CkptOptions o = opts(6, 1, 1, 4096);
    save(g_dir, 7, 2, s.t, NT, &o, 2);
    char shard[600];
    snprintf(shard, sizeof shard, "%s", tmp("step_0000007/shard_00001.ckpt"));
    size_t n;
    unsigned char *orig = read_all(shard, &n);
    long long cuts[] = {0, 1, 63, 64, 65, 100, (long long)n / 2, (long long)n - 33,
                        (long long)n - 32, (long long)n - 1};
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(truncate(shard, cuts[i]), 0);
        int at_read, which;
        ck_assert_int_eq(try_load(tmp("step_0000007"), s.t, NT, &at_read, &which),
                         PP_ERUNTIME);
        ck_assert(!at_read);
        ASSERT_ERR_HAS(shard);
        /* the same cut in a staged shard: commit refuses it */
        char dir[600], path[700];
        ck_assert_int_eq(ckpt_stage_dir(g_dir, 8, dir, sizeof dir, g_err, 256), PP_OK);
        ckpt_shard_path(dir, 0, path, sizeof path);
        FILE *f = fopen(path, "wb");
        fwrite(orig, 1, (size_t)cuts[i], f);
        fclose(f);
        ck_assert_int_eq(ckpt_commit(g_dir, 8, 1, NULL, 0, 2, g_err, 256), PP_ERUNTIME);
        ASSERT_ERR_HAS("shard_00000.ckpt");
        FILE *g = fopen(shard, "wb");
        fwrite(orig, 1, n, g);
        fclose(g);
    }
    check_all(tmp("step_0000007"), s.t, NT, 1);
    ck_assert_int_eq(ckpt_resolve(g_dir, NULL, 0, g_err, 0), PP_ERUNTIME); /* no room */
    char got[600];
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, 256), PP_OK);
    ck_assert_str_eq(got, tmp("step_0000007")); /* the failed commits changed nothing */
    free(orig);
    set_free(&s);
}
END_TEST

/* A deleted shard, a manifest naming an absent file, wrong magic, a newer version. */
START_TEST(test_missing_shard_magic_version) {
    Set s;
    set_init(&s, 6);
    CkptOptions o = opts(1, 0, 1, 4096);
    save(g_dir, 9, 2, s.t, NT, &o, 2);
    char dir[600], shard[600];
    snprintf(dir, sizeof dir, "%s", tmp("step_0000009"));
    snprintf(shard, sizeof shard, "%s", tmp("step_0000009/shard_00001.ckpt"));
    ck_assert_int_eq(rename(shard, tmp("moved")), 0);
    ck_assert_ptr_null(ckpt_open(dir, g_err, sizeof g_err));
    ASSERT_ERR_HAS(shard);
    ASSERT_ERR_HAS("No such file");
    ck_assert_int_eq(rename(tmp("moved"), shard), 0);
    flip_byte(shard, 0, 0x20); /* 'P' -> 'p' */
    ck_assert_ptr_null(ckpt_open(dir, g_err, sizeof g_err));
    ASSERT_ERR_HAS(shard);
    ASSERT_ERR_HAS("bad magic");
    flip_byte(shard, 0, 0x20);
    flip_byte(shard, 8, 0x03); /* version 1 -> 2 */
    ck_assert_ptr_null(ckpt_open(dir, g_err, sizeof g_err));
    ASSERT_ERR_HAS(shard);
    ASSERT_ERR_HAS("version 2");
    flip_byte(shard, 8, 0x03);
    check_all(dir, s.t, NT, 1);
    /* the missing shard at commit time: refused, `latest` stays */
    char sdir[600];
    ck_assert_int_eq(ckpt_stage_dir(g_dir, 10, sdir, sizeof sdir, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_commit(g_dir, 10, 1, NULL, 0, 2, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("shard_00000.ckpt");
    char got[600];
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, 256), PP_OK);
    ck_assert_str_eq(got, dir);
    ck_assert(!file_exists(tmp("step_0000010")));
    set_free(&s);
}
END_TEST

/* A wrong expected shape or a missing name is an error naming both, dst untouched. */
START_TEST(test_wrong_shape_and_missing_tensor) {
    Set s;
    set_init(&s, 7);
    CkptOptions o = opts(6, 1, 1, 4096);
    save(g_dir, 1, 2, s.t, NT, &o, 2);
    CkptReader *r = ckpt_open(tmp("step_0000001"), g_err, sizeof g_err);
    float dst[64];
    for (int i = 0; i < 64; i++) dst[i] = 42.0f;
    int64_t want[] = {7, 5};
    ck_assert_int_eq(ckpt_read(r, "h.0.m5x7", dst, want, 2, g_err, sizeof g_err),
                     PP_ERUNTIME);
    ASSERT_ERR_HAS("shard_00001.ckpt"); /* tensor 3 is on shard 3 % 2 */
    ASSERT_ERR_HAS("'h.0.m5x7'");
    ASSERT_ERR_HAS("[5, 7]");
    ASSERT_ERR_HAS("[7, 5]");
    ck_assert_int_eq(ckpt_read(r, "h.0.m5x7", dst, want, 1, g_err, sizeof g_err),
                     PP_ERUNTIME);
    ck_assert_int_eq(ckpt_read(r, "h.9.absent", dst, NULL, 0, g_err, sizeof g_err),
                     PP_ERUNTIME);
    ASSERT_ERR_HAS("'h.9.absent'");
    ASSERT_ERR_HAS(tmp("step_0000001"));
    for (int i = 0; i < 64; i++) ck_assert(dst[i] == 42.0f);
    ck_assert_int_eq(ckpt_read(r, "h.0.m5x7", dst, NULL, 0, g_err, sizeof g_err), PP_OK);
    ck_assert(memcmp(dst, s.data[3], 35 * 4) == 0);
    ckpt_close(r);
    set_free(&s);
}
END_TEST

/* Bad input to the writer is a usage error and leaves no file behind. */
START_TEST(test_writer_rejects_bad_input) {
    float x[4] = {0};
    CkptTensor ok = {.name = "a", .ndim = 1, .shape = {4}, .data = x};
    CkptTensor bad[] = {
        {.name = "has space", .data = x},
        {.name = "0123456789012345678901234567890123456789012345678901234567890123", .data = x},
        {.name = "neg", .ndim = 1, .shape = {-1}, .data = x},
        {.name = "dims", .ndim = CKPT_MAX_DIMS + 1, .data = x},
        {.name = "nodata", .ndim = 1, .shape = {2}},
        {.name = "dtype", .dtype = (CkptDtype)3, .data = x},
    };
    char path[600];
    snprintf(path, sizeof path, "%s", tmp("s.ckpt"));
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(ckpt_write_shard(path, NULL, &bad[i], 1, NULL, g_err, 256), PP_EUSAGE);
        ck_assert(!file_exists(path));
    }
    CkptTensor twice[] = {ok, ok};
    ck_assert_int_eq(ckpt_write_shard(path, NULL, twice, 2, NULL, g_err, 256), PP_EUSAGE);
    ASSERT_ERR_HAS("twice");
    CkptOptions o = opts(10, 1, 1, 0);
    ck_assert_int_eq(ckpt_write_shard(path, NULL, &ok, 1, &o, g_err, 256), PP_EUSAGE);
    o = opts(6, 1, 1, 6);
    ck_assert_int_eq(ckpt_write_shard(path, NULL, &ok, 1, &o, g_err, 256), PP_EUSAGE);
    ck_assert(!file_exists(path));
    ck_assert_int_eq(ckpt_write_shard(tmp("no/such/dir/s.ckpt"), NULL, &ok, 1, NULL, g_err,
                                      256), PP_ERUNTIME);
    ASSERT_ERR_HAS("no/such/dir/s.ckpt.part");
    ck_assert_int_eq(ckpt_write_shard(path, NULL, &ok, 1, NULL, g_err, 256), PP_OK);
    ck_assert(!file_exists(tmp("s.ckpt.part")));
    ck_assert_int_eq(ckpt_write_shard(path, NULL, NULL, 0, NULL, g_err, 256), PP_OK);
}
END_TEST

/* ckpt_verify catches what only a whole-file CRC sees: the open checks sizes and
 * the index, not every data byte. */
START_TEST(test_verify_whole_file) {
    Set s;
    set_init(&s, 8);
    CkptOptions o = opts(6, 1, 1, 4096);
    save(g_dir, 1, 1, s.t, NT, &o, 2);
    flip_byte(tmp("step_0000001/shard_00000.ckpt"), 200, 0x10);
    CkptReader *r = ckpt_open(tmp("step_0000001"), g_err, sizeof g_err);
    ck_assert_msg(r != NULL, "%s", g_err);
    ck_assert_int_eq(ckpt_verify(r, g_err, sizeof g_err), PP_ERUNTIME);
    ASSERT_ERR_HAS("shard_00000.ckpt");
    ckpt_close(r);
    set_free(&s);
}
END_TEST

/* ---- the documented byte format, read without the ckpt code ---------------------------- */

static uint32_t le32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Read shard file `path` with this page's rules alone and compare every tensor with
 * t[0..nt); check the step stored in its metadata; return the whole-file CRC32. */
static uint32_t doc_check_shard(const char *path, const CkptTensor *t, int nt, int level,
                                int deflate_default, long step) {
    size_t n;
    unsigned char *f = read_all(path, &n);
    ck_assert(memcmp(f, "PPCKSHRD", 8) == 0);
    ck_assert_uint_eq(le32(f + 8), 1);
    ck_assert_uint_eq(le32(f + 12), 0);
    ck_assert_uint_eq(le32(f + 60), crc32(0, f, 60));
    ck_assert_uint_eq(le32(f + 20), (uint32_t)nt);
    uint64_t mbytes = le64(f + 24);
    ck_assert_uint_eq(le32(f + 32), crc32(0, f + 64, (uInt)mbytes));
    int found_step = 0;
    for (const unsigned char *m = f + 64; m < f + 64 + mbytes;) { /* metadata entries */
        int type = m[0], klen = m[1];
        uint32_t vlen = le32(m + 4);
        if (klen == 4 && !memcmp(m + 8, "step", 4)) {
            ck_assert(type == 1 && vlen == 8 && (long)le64(m + 12) == step);
            found_step = 1;
        }
        m += 8 + klen + vlen;
    }
    ck_assert(found_step);
    const unsigned char *tr = f + n - 32;
    uint64_t ioff = le64(tr), ibytes = le64(tr + 8), off = 64 + mbytes;
    ck_assert(memcmp(tr + 24, "PPCKTAIL", 8) == 0);
    ck_assert_uint_eq(ioff + ibytes, n - 32);
    ck_assert_uint_eq(le32(tr + 16), crc32(0, f + ioff, (uInt)ibytes));
    ck_assert_uint_eq(le32(tr + 20), crc32(0, f, (uInt)(n - 32)));
    const unsigned char *rec = f + ioff;
    for (int i = 0; i < nt; i++) {
        int ndim = rec[65], filter = rec[66], codec = rec[67];
        uint32_t nch = le32(rec + 68);
        ck_assert_str_eq((const char *)rec, t[i].name);
        ck_assert_int_eq(rec[64], 0);
        ck_assert_int_eq(ndim, t[i].ndim);
        for (int d = 0; d < ndim; d++) ck_assert_uint_eq(le64(rec + 72 + 8 * d), t[i].shape[d]);
        uint64_t raw_bytes = le64(rec + 136);
        ck_assert_uint_eq(raw_bytes, (uint64_t)numel(&t[i]) * 4);
        ck_assert_uint_eq(le64(rec + 144), off);
        unsigned char *raw = malloc(raw_bytes + 1), *tmpb = malloc(raw_bytes + 1);
        unsigned char *zb = malloc(compressBound(4096) + raw_bytes);
        uint64_t at = 0;
        for (uint32_t k = 0; k < nch; k++) {
            const unsigned char *c = rec + 160 + 16 * k, *st = f + off;
            uint32_t rl = le32(c), sl = le32(c + 4);
            ck_assert_uint_eq(le32(c + 12), crc32(0, st, sl));
            uLongf dl = rl;
            if (codec == 1) ck_assert(uncompress(tmpb, &dl, st, sl) == Z_OK && dl == rl);
            else memcpy(tmpb, st, rl);
            for (uint32_t b = 0; b < 4; b++) /* undo the shuffle */
                for (uint32_t e = 0; e < rl / 4; e++)
                    raw[at + 4 * e + b] = filter ? tmpb[b * (rl / 4) + e] : tmpb[4 * e + b];
            ck_assert_uint_eq(le32(c + 8), crc32(0, raw + at, rl));
            if (codec == 1 && deflate_default) {
                uLongf zl = compressBound(rl);
                ck_assert(compress2(zb, &zl, tmpb, rl, level) == Z_OK);
                ck_assert(zl == sl && memcmp(zb, st, sl) == 0);
            }
            at += rl;
            off += sl;
        }
        ck_assert_uint_eq(at, raw_bytes);
        ck_assert(memcmp(raw, t[i].data, raw_bytes) == 0);
        ck_assert_uint_eq(off, le64(rec + 144) + le64(rec + 152));
        free(raw);
        free(tmpb);
        free(zb);
        rec += 160 + 16 * nch;
    }
    ck_assert(rec == f + n - 32 && off == ioff);
    uint32_t crc = (uint32_t)crc32(0, f, (uInt)n);
    free(f);
    return crc;
}

/* The manifest's CRC line and shard entries, as the page describes them. */
static void doc_check_manifest(const char *dir, long step, uint32_t shard_crc,
                               long long shard_bytes) {
    char path[700], want[128];
    snprintf(path, sizeof path, "%s/manifest", dir);
    size_t n;
    char *text = (char *)read_all(path, &n);
    text[n] = 0;
    char *last = text + n - 1;
    while (last > text && last[-1] != '\n') last--;
    snprintf(want, sizeof want, "crc32 = %08x\n", (uint32_t)crc32(0, (unsigned char *)text,
                                                                  (uInt)(last - text)));
    ck_assert_str_eq(last, want);
    snprintf(want, sizeof want, "\nstep = %ld\n", step);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "\nshard.0.file = shard_00000.ckpt\nshard.0.bytes = %lld\n"
             "shard.0.crc32 = %08x\n", shard_bytes, shard_crc);
    ck_assert_msg(strstr(text, want) != NULL, "manifest lacks:%s", want);
    free(text);
}

START_TEST(test_bytes_match_the_format_doc) {
    static const int cfg[][3] = {{0, 0, 0}, {1, 1, 0}, {6, 0, 0}, {9, 1, 0}, {6, 1, 1}};
    Set s;
    set_init(&s, 12);
    for (int c = 0; c < 5; c++) {
        char dir[600], shard[700];
        CkptOptions o = opts(cfg[c][0], cfg[c][1], 2, 4096);
        o.strategy = cfg[c][2] ? CKPT_RLE : CKPT_DEFLATE;
        save(g_dir, c, 1, s.t, NT, &o, 10);
        ckpt_dir_path(g_dir, c, 0, dir, sizeof dir);
        ckpt_shard_path(dir, 0, shard, sizeof shard);
        uint32_t crc = doc_check_shard(shard, s.t, NT, cfg[c][0], !cfg[c][2], c);
        doc_check_manifest(dir, c, crc, file_size(shard));
    }
    set_free(&s);
}
END_TEST

/* Rewrite the CRCs that cover chunk data (the chunk's stored CRC, the index CRC, the
 * body CRC, the manifest's shard CRC and its own) after a byte of chunk data changed,
 * as a forger would: only the inflate and the raw CRC are left to notice. */
static void forge_chunk_byte(const char *dir, const char *name) {
    char shard[700], man[700];
    snprintf(shard, sizeof shard, "%s/shard_00000.ckpt", dir);
    snprintf(man, sizeof man, "%s/manifest", dir);
    size_t n, mn;
    unsigned char *f = read_all(shard, &n), *tr = f + n - 32, *rec = f + le64(tr);
    while (strcmp((const char *)rec, name) != 0) rec += 160 + 16 * le32(rec + 68);
    uint64_t off = le64(rec + 144);
    f[off + 5] ^= 0x01;                                     /* in chunk 0 */
    put_le32(rec + 160 + 12, (uint32_t)crc32(0, f + off, le32(rec + 164)));
    put_le32(tr + 16, (uint32_t)crc32(0, f + le64(tr), (uInt)le64(tr + 8)));
    put_le32(tr + 20, (uint32_t)crc32(0, f, (uInt)(n - 32)));
    FILE *o = fopen(shard, "wb");
    fwrite(f, 1, n, o);
    fclose(o);
    char *text = (char *)read_all(man, &mn), hex[9];
    text[mn] = 0;
    snprintf(hex, sizeof hex, "%08x", (uint32_t)crc32(0, f, (uInt)n));
    memcpy(strstr(text, "shard.0.crc32 = ") + 16, hex, 8);
    char *last = text + mn - 1;
    while (last[-1] != '\n') last--;
    snprintf(hex, sizeof hex, "%08x", (uint32_t)crc32(0, (unsigned char *)text,
                                                     (uInt)(last - text)));
    memcpy(last + 8, hex, 8);
    o = fopen(man, "wb");
    fwrite(text, 1, mn, o);
    fclose(o);
    free(f);
    free(text);
}

/* Forged chunk data (all CRCs over stored bytes recomputed) is still caught: by the
 * inflate or by the CRC of the decoded data (stored chunks: only the latter). */
START_TEST(test_forged_chunk_caught_after_decoding) {
    Set s;
    set_init(&s, 13);
    for (int level = 0; level <= 6; level += 6) {
        char dir[600];
        CkptOptions o = opts(level, 1, 1, 4096);
        save(g_dir, level, 1, s.t, NT, &o, 5);
        ckpt_dir_path(g_dir, level, 0, dir, sizeof dir);
        forge_chunk_byte(dir, "big");
        CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
        ck_assert_msg(r != NULL, "the forged checkpoint should open: %s", g_err);
        ck_assert_int_eq(ckpt_verify(r, g_err, sizeof g_err), PP_OK); /* CRCs all agree */
        float *dst = malloc(BIG * 4);
        ck_assert_int_eq(ckpt_read(r, "big", dst, NULL, 0, g_err, sizeof g_err), PP_ERUNTIME);
        ASSERT_ERR_HAS("tensor 'big': chunk 0");
        ASSERT_ERR_HAS(level ? "inflate" : "CRC32 of its data");
        ck_assert_int_eq(ckpt_read(r, "one", dst, NULL, 0, g_err, sizeof g_err), PP_OK);
        free(dst);
        ckpt_close(r);
    }
    set_free(&s);
}
END_TEST

/* ---- the directory protocol ---------------------------------------------------------- */

/* Entries of g_dir named step_* that are staging directories (staging = 1) or
 * complete checkpoints (staging = 0). */
static int count_steps(int staging) {
    DIR *d = opendir(g_dir);
    int n = 0;
    ck_assert_ptr_nonnull(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        int is_tmp = len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0;
        n += strncmp(de->d_name, "step_", 5) == 0 && is_tmp == staging;
    }
    closedir(d);
    return n;
}

START_TEST(test_keep_latest_stale_resolve) {
    Set s;
    set_init(&s, 9);
    CkptOptions o = opts(1, 1, 1, 4096);
    char got[600], dir[600];
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("neither a manifest nor `latest`");
    ck_assert_int_eq(ckpt_resolve(tmp("absent"), got, sizeof got, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("No such file");
    /* stale staging directories of other steps, and one of a step about to be saved */
    ck_assert_int_eq(mkdir(tmp("step_0000099.tmp"), 0755), 0);
    FILE *f = fopen(tmp("step_0000099.tmp/shard_00000.ckpt.part"), "w");
    fclose(f);
    ck_assert_int_eq(mkdir(tmp("step_0000003.tmp"), 0755), 0);
    f = fopen(tmp("step_0000003.tmp/junk"), "w");
    fclose(f);
    ck_assert_int_eq(ckpt_stage_dir(g_dir, 3, dir, sizeof dir, g_err, 256), PP_OK);
    ck_assert_str_eq(dir, tmp("step_0000003.tmp"));
    ck_assert(!file_exists(tmp("step_0000003.tmp/junk")));
    for (long step = 1; step <= 5; step++) save(g_dir, step * 10, 2, s.t, NT, &o, 2);
    ck_assert(!file_exists(tmp("step_0000099.tmp")));
    ck_assert(!file_exists(tmp("step_0000003.tmp")));
    ck_assert(!file_exists(tmp("step_0000030")));
    ck_assert(file_exists(tmp("step_0000040")));
    ck_assert(file_exists(tmp("step_0000050")));
    ck_assert_int_eq(count_steps(0), 2);
    ck_assert_int_eq(count_steps(1), 0);
    /* ROOT, ROOT/latest and a step directory resolve; latest is a relative symlink */
    char link[64];
    ssize_t n = readlink(tmp("latest"), link, sizeof link - 1);
    ck_assert_int_gt(n, 0);
    link[n] = 0;
    ck_assert_str_eq(link, "step_0000050");
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, 256), PP_OK);
    ck_assert_str_eq(got, tmp("step_0000050"));
    ck_assert_int_eq(ckpt_resolve(tmp("latest"), got, sizeof got, g_err, 256), PP_OK);
    ck_assert_str_eq(got, tmp("step_0000050"));
    ck_assert_int_eq(ckpt_resolve(tmp("step_0000040"), got, sizeof got, g_err, 256), PP_OK);
    ck_assert_str_eq(got, tmp("step_0000040"));
    /* saving an older step (a run resumed from step 40) keeps it plus the keep-1 highest
     * below it, so the resumed run keeps its own fallback; steps above it (left by the
     * run it branched from) are neither counted nor removed */
    save(g_dir, 45, 2, s.t, NT, &o, 2);
    ck_assert(file_exists(tmp("step_0000045")) && file_exists(tmp("step_0000040")));
    ck_assert(file_exists(tmp("step_0000050")));
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, 256), PP_OK);
    ck_assert_str_eq(got, tmp("step_0000045"));
    /* saving the same step again replaces it */
    Set s2;
    set_init(&s2, 10);
    save(g_dir, 45, 1, s2.t, NT, &o, 2);
    check_all(tmp("step_0000045"), s2.t, NT, 1);
    ck_assert_int_eq(count_steps(1), 0);
    /* keep <= 0 keeps everything */
    for (long step = 60; step <= 62; step++) save(g_dir, step, 1, s.t, 2, &o, 0);
    ck_assert_int_eq(count_steps(0), 6); /* 40, 45, 50, 60, 61, 62 */
    /* a staging directory and a latest naming a deleted one are refused clearly */
    ck_assert_int_eq(ckpt_stage_dir(g_dir, 70, dir, sizeof dir, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_resolve(dir, got, sizeof got, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("incomplete");
    ck_assert_int_eq(rename(tmp("step_0000062"), tmp("gone")), 0);
    ck_assert_int_eq(ckpt_resolve(g_dir, got, sizeof got, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("step_0000062");
    set_free(&s);
    set_free(&s2);
}
END_TEST

/* The child saves checkpoints in a loop (each step's values derived from the step)
 * until the parent SIGKILLs it at a random moment; afterwards `latest` must always name
 * a complete checkpoint whose every tensor loads with the values of its step. */
static void child_save_loop(long first) {
    float *buf[2];
    size_t n = 3000;
    for (int r = 0; r < 2; r++) buf[r] = malloc(n * 4);
    CkptOptions o = opts(1, 1, 2, 2048);
    for (long step = first;; step++) {
        char dir[600], path[700];
        if (ckpt_stage_dir(g_dir, step, dir, sizeof dir, g_err, 256) != PP_OK) _exit(3);
        for (int r = 0; r < 2; r++) {
            fill_gauss(buf[r], n, (uint64_t)step * 2 + (uint64_t)r);
            CkptTensor t = {.name = r ? "b" : "a", .ndim = 1, .shape = {(int64_t)n},
                            .data = buf[r]};
            CkptMeta *m = ckpt_meta_create();
            ckpt_meta_set_u64(m, "step", (uint64_t)step);
            ckpt_shard_path(dir, r, path, sizeof path);
            if (ckpt_write_shard(path, m, &t, 1, &o, g_err, 256) != PP_OK) _exit(4);
            ckpt_meta_destroy(m);
        }
        if (ckpt_commit(g_dir, step, 2, NULL, 0, 2, g_err, 256) != PP_OK) _exit(5);
    }
}

/* Load the latest checkpoint and check it is complete and consistent; its step. */
static long check_latest(void) {
    char dir[600];
    ck_assert_msg(ckpt_resolve(g_dir, dir, sizeof dir, g_err, 256) == PP_OK, "%s", g_err);
    CkptReader *r = ckpt_open(dir, g_err, sizeof g_err);
    ck_assert_msg(r != NULL, "%s", g_err);
    long step = ckpt_step(r);
    size_t n = 3000;
    float *want = malloc(n * 4), *got = malloc(n * 4);
    for (int s = 0; s < 2; s++) {
        uint64_t ms;
        ck_assert_int_eq(ckpt_meta_u64(r, s, "step", &ms), PP_OK);
        ck_assert_int_eq((long)ms, step);
        fill_gauss(want, n, (uint64_t)step * 2 + (uint64_t)s);
        int64_t shape[1] = {(int64_t)n};
        ck_assert_msg(ckpt_read(r, s ? "b" : "a", got, shape, 1, g_err, 256) == PP_OK, "%s",
                      g_err);
        ck_assert(memcmp(got, want, n * 4) == 0);
    }
    ck_assert_int_eq(ckpt_verify(r, g_err, 256), PP_OK);
    ckpt_close(r);
    free(want);
    free(got);
    return step;
}

START_TEST(test_sigkill_while_saving) {
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    pid_t pid = fork();
    if (pid == 0) child_save_loop(0);
    for (int i = 0; i < 1000 && !file_exists(tmp("latest")); i++) usleep(10 * 1000);
    kill(pid, SIGKILL); /* after a first complete checkpoint */
    waitpid(pid, NULL, 0);
    long last = check_latest(), advanced = 0;
    for (int round = 0; round < 30; round++) {
        pid = fork();
        if (pid == 0) child_save_loop(last + 1);
        usleep((useconds_t)(rand() % 40000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        ck_assert_msg(WIFSIGNALED(status), "child failed (status %d), seed %u", status, seed);
        long step = check_latest();
        ck_assert_msg(step >= last, "latest went back from %ld to %ld", last, step);
        advanced += step > last;
        last = step;
    }
    ck_assert_int_gt(advanced, 0);
    char dir[600], path[700];
    float one = 1;
    CkptTensor t = {.name = "one", .data = &one};
    ck_assert_int_eq(ckpt_stage_dir(g_dir, last + 1, dir, sizeof dir, g_err, 256), PP_OK);
    ckpt_shard_path(dir, 0, path, sizeof path);
    ck_assert_int_eq(ckpt_write_shard(path, NULL, &t, 1, NULL, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_commit(g_dir, last + 1, 1, NULL, 0, 2, g_err, 256), PP_OK);
    ck_assert_int_eq(count_steps(1), 0);
    ck_assert_int_eq(count_steps(0), 2);
}
END_TEST

/* ---- the asynchronous writer ------------------------------------------------------------ */

START_TEST(test_async_writer_snapshot) {
    Set s, want;
    set_init(&s, 11);
    set_init(&want, 11);
    CkptOptions o = opts(6, 1, 2, 4096);
    CkptWriter *w = ckpt_writer_create(&o);
    ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_OK); /* nothing submitted */
    char dir[600], path[700];
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(ckpt_stage_dir(g_dir, round, dir, sizeof dir, g_err, 256), PP_OK);
        ckpt_shard_path(dir, 0, path, sizeof path);
        CkptMeta *m = ckpt_meta_create();
        ckpt_meta_set_u64(m, "round", (uint64_t)round);
        ck_assert_int_eq(ckpt_writer_submit(w, path, m, s.t, NT, g_err, 256), PP_OK);
        ckpt_meta_destroy(m); /* the writer has its own copy */
        for (int i = 0; i < NT; i++) /* training goes on and changes the weights */
            for (int64_t j = 0; j < numel(&s.t[i]); j++) s.data[i][j] = -1.0f;
        ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_OK);
        ck_assert_int_eq(ckpt_writer_busy(w), 0);
        ck_assert_int_eq(ckpt_commit(g_dir, round, 1, NULL, 0, 5, g_err, 256), PP_OK);
        check_all(tmp(round ? "step_0000001" : "step_0000000"), want.t, NT, 2);
        /* identical to what the synchronous writer makes of the same values */
        ck_assert_int_eq(ckpt_write_shard(tmp("sync.ckpt"), NULL, want.t, NT, &o, g_err, 256),
                         PP_OK);
        for (int i = 0; i < NT; i++)
            memcpy(s.data[i], want.data[i], (size_t)numel(&s.t[i]) * 4);
    }
    /* two submits in a row: the second waits for the first */
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("a.ckpt"), NULL, s.t, NT, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("b.ckpt"), NULL, s.t, NT, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_OK);
    ck_assert(same_files(tmp("a.ckpt"), tmp("b.ckpt")));
    ck_assert(same_files(tmp("a.ckpt"), tmp("sync.ckpt")));
    ckpt_writer_destroy(w);
    set_free(&s);
    set_free(&want);
}
END_TEST

/* An emulated device for the writer's hooks ([Note: checkpoint snapshot]): copy takes
 * the values now but they land in dst only at finish, as a device's side-stream copy
 * does; the staging memory comes from alloc. The writer must not read its staging
 * buffer before finish (it would find the poison there) and must call copy from one
 * thread and finish from its own. */
typedef struct {
    struct { void *dst; void *data; size_t bytes; } pend[64];
    int npend, copies, finishes, allocs, releases, finish_on_caller;
    pthread_t caller;
} FakeDevice;
static void fake_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    FakeDevice *d = ctx;
    ck_assert_int_lt(d->npend, 64);
    d->pend[d->npend].dst = dst;
    d->pend[d->npend].bytes = bytes;
    d->pend[d->npend].data = pp_malloc(bytes);
    memcpy(d->pend[d->npend++].data, src, bytes);
    memset(dst, 0xff, bytes); /* not there yet: NaN poison */
    d->copies++;
}
static void fake_finish(void *ctx) {
    FakeDevice *d = ctx;
    d->finish_on_caller += pthread_equal(pthread_self(), d->caller) != 0;
    for (int i = 0; i < d->npend; i++) {
        memcpy(d->pend[i].dst, d->pend[i].data, d->pend[i].bytes);
        free(d->pend[i].data);
    }
    d->npend = 0;
    d->finishes++;
}
static void *fake_alloc(void *ctx, size_t bytes) {
    return ((FakeDevice *)ctx)->allocs++, pp_malloc(bytes);
}
static void fake_release(void *ctx, void *p) {
    if (p) ((FakeDevice *)ctx)->releases++;
    free(p);
}

START_TEST(test_async_writer_device_copy) {
    Set s, want;
    set_init(&s, 12);
    set_init(&want, 12);
    CkptOptions o = opts(6, 1, 2, 4096);
    ck_assert_int_eq(ckpt_write_shard(tmp("sync.ckpt"), NULL, want.t, NT, &o, g_err, 256), PP_OK);
    FakeDevice d = {.caller = pthread_self()};
    int first = 0;
    CkptDevice dev = {fake_copy, fake_finish, fake_alloc, fake_release, &d};
    CkptWriter *w = ckpt_writer_create(&o);
    ckpt_writer_set_device(w, &dev);
    ckpt_writer_reserve(w, s.t, NT);
    for (int round = 0; round < 2; round++) {
        char path[64];
        snprintf(path, sizeof path, "dev%d.ckpt", round);
        ck_assert_int_eq(ckpt_writer_submit(w, tmp(path), NULL, s.t, NT, g_err, 256), PP_OK);
        for (int i = 0; i < NT; i++) /* training goes on */
            for (int64_t j = 0; j < numel(&s.t[i]); j++) s.data[i][j] = -1.0f;
        ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_OK);
        ck_assert(same_files(tmp(path), tmp("sync.ckpt")));
        for (int i = 0; i < NT; i++) memcpy(s.data[i], want.data[i], (size_t)numel(&s.t[i]) * 4);
        if (round == 0) first = d.copies;
    }
    ck_assert_int_gt(first, 0); /* a copy per non-empty tensor, each round the same */
    ck_assert_int_eq(d.copies, 2 * first);
    ck_assert_int_eq(d.finishes, 2);
    ck_assert_int_eq(d.finish_on_caller, 0); /* the writer's thread waits, not the caller */
    ck_assert_int_eq(d.allocs, 1);           /* reserved once, reused */
    ckpt_writer_set_device(w, NULL);          /* back to memcpy: the staging memory is released */
    ck_assert_int_eq(d.releases, 1);
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("host.ckpt"), NULL, s.t, NT, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_OK);
    ck_assert(same_files(tmp("host.ckpt"), tmp("sync.ckpt")));
    ck_assert_int_eq(d.copies, 2 * first); /* no hook called since */
    ck_assert_int_eq(d.finishes, 2);
    ckpt_writer_destroy(w);
    set_free(&s);
    set_free(&want);
}
END_TEST

START_TEST(test_async_writer_errors) {
    float x[3] = {1, 2, 3};
    CkptTensor t = {.name = "x", .ndim = 1, .shape = {3}, .data = x};
    CkptTensor bad = {.name = "x y", .ndim = 1, .shape = {3}, .data = x};
    CkptWriter *w = ckpt_writer_create(NULL);
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("s"), NULL, &bad, 1, g_err, 256), PP_EUSAGE);
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("no/dir/s"), NULL, &t, 1, g_err, 256), PP_OK);
    /* the failure is not collected: the next submit reports it and does not start */
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("s"), NULL, &t, 1, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("no/dir/s");
    ck_assert(!file_exists(tmp("s")));
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("no/dir/s"), NULL, &t, 1, g_err, 256), PP_OK);
    g_err[0] = 0;
    ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_ERUNTIME);
    ASSERT_ERR_HAS("no/dir/s");
    ck_assert_int_eq(ckpt_writer_submit(w, tmp("s"), NULL, &t, 1, g_err, 256), PP_OK);
    ck_assert_int_eq(ckpt_writer_wait(w, g_err, 256), PP_OK);
    ck_assert(file_exists(tmp("s")));
    ckpt_writer_destroy(w);
    ckpt_writer_destroy(NULL);
}
END_TEST

static Suite *ckpt_suite(void) {
    Suite *s = suite_create("ckpt");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip_levels_shuffle_threads);
    tcase_add_test(tc, test_roundtrip_default_chunk);
    tcase_add_test(tc, test_shuffle_helps_on_weights);
    tcase_add_test(tc, test_meta_and_extra);
    tcase_add_test(tc, test_global_names_across_shards);
    tcase_add_test(tc, test_flip_every_shard_byte);
    tcase_add_test(tc, test_flip_every_manifest_byte);
    tcase_add_test(tc, test_forged_manifest_fields);
    tcase_add_test(tc, test_fifo_manifest_and_shard);
    tcase_add_test(tc, test_steps_without_latest);
    tcase_add_test(tc, test_truncated_shard);
    tcase_add_test(tc, test_missing_shard_magic_version);
    tcase_add_test(tc, test_wrong_shape_and_missing_tensor);
    tcase_add_test(tc, test_writer_rejects_bad_input);
    tcase_add_test(tc, test_verify_whole_file);
    tcase_add_test(tc, test_bytes_match_the_format_doc);
    tcase_add_test(tc, test_forged_chunk_caught_after_decoding);
    tcase_add_test(tc, test_keep_latest_stale_resolve);
    tcase_add_test(tc, test_sigkill_while_saving);
    tcase_add_test(tc, test_async_writer_snapshot);
    tcase_add_test(tc, test_async_writer_device_copy);
    tcase_add_test(tc, test_async_writer_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return check_run(ckpt_suite(), 0);
}
