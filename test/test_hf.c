/* test_hf.c — src/hf/ against the reference implementations' files in test/hf/ (made by
 * test/hf/gen.py with the safetensors package, huggingface_hub and Python's json): F32,
 * BF16 and F16 values read exactly (F16 subnormals, infinities, NaNs), element ranges
 * and the bytes they cost, the writer byte for byte equal to the reference's files
 * (mixed dtypes, BF16 rounding, a sharded directory with its index and config.json),
 * round trips, the all-or-nothing directory writer, config.json in the Hub's, the
 * transformers 5 and the GPT-2 forms; and damaged inputs built here (truncation, huge
 * or non-JSON headers, bad offsets, dtypes and shapes, broken indexes, config values of
 * the wrong type), each refused with a message naming the file and tensor or key. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf/hf_config.h"
#include "hf/hf_dir.h"
#include "hf/hf_json_internal.h" /* the Python-style writer, tested on its own */
#include "hf/safetensors.h"
#include "testdir.h"
#include "checkrun.h"

static char g_err[PP_ERR_MAX];

static void setup(void) {
    testdir_create("pp_test_hf");
    g_err[0] = 0;
}

static void teardown(void) { testdir_remove(); }

#define ASSERT_ERR_HAS(s) ck_assert_msg(strstr(g_err, (s)) != NULL, "'%s' lacks '%s'", g_err, (s))

/* test/hf/NAME, next to this file (the tests run from the repository root). */
static const char *golden(const char *name) {
    static char buf[4][PP_PATH_MAX + 64];
    static int k;
    k = (k + 1) % 4;
    const char *slash = strrchr(__FILE__, '/');
    snprintf(buf[k], sizeof buf[k], "%.*shf/%s", slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__,
             name);
    return buf[k];
}

/* ---- the values gen.py wrote (its W_BITS, SRC_BITS, H_BITS, formula) ---------------- */

static const uint32_t W_BITS[12] = {0x00000000, 0x80000000, 0x3F800000, 0xBF800000,
                                    0x00000001, 0x007FFFFF, 0x7F7FFFFF, 0x7F800000,
                                    0xFF800000, 0x7FC00000, 0x3EAAAAAB, 0xC0490FDB};
static const uint32_t SRC_BITS[10] = {0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF,
                                      0xFF800000, 0xFFC00001, 0x00000001, 0xC0490FDB, 0x80000000};
/* SRC_BITS rounded as torch rounds: ties to even (0x3F80, 0x3F82), above and below a
 * tie, FLT_MAX to inf, any NaN to 0x7FC0, a subnormal to 0, -0 kept */
static const uint16_t SRC_BF16[10] = {0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80,
                                      0xFF80, 0x7FC0, 0x0000, 0xC049, 0x8000};
static const uint16_t H_BITS[16] = {0x0001, 0x03FF, 0x0400, 0x7BFF, 0x3C00, 0xBC00, 0x8000, 0x7C00,
                                    0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x3555, 0x8001, 0x0200, 0x2E66};

static float formula(int t, size_t i) {
    return (float)(((int)(i * 37 + t * 11) % 101) - 50) / 64.0f;
}

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The first index where a and b differ bit for bit, -1 if none. */
static long first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (bits(a[i]) != bits(b[i])) return (long)i;
    return -1;
}

/* ---- files --------------------------------------------------------------------------- */

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

static void put_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void assert_same_files(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *pa = read_all(a, &na), *pb = read_all(b, &nb);
    size_t i = 0;
    while (i < na && i < nb && pa[i] == pb[i]) i++;
    ck_assert_msg(na == nb && i == na, "%s and %s differ at byte %zu (%zu and %zu bytes)", a, b, i,
                  na, nb);
    free(pa);
    free(pb);
}

/* A .safetensors file from a header text: its length, it, then `data` zero bytes. */
static void put_st(const char *path, const char *header, size_t data) {
    size_t h = strlen(header);
    unsigned char *p = calloc(1, 8 + h + data);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(p + 8, header, h);
    put_file(path, p, 8 + h + data);
    free(p);
}

/* Number of entries in directory d (not . and ..), their names space-separated. */
static int dir_entries(const char *d, char *names, size_t n) {
    DIR *dp = opendir(d);
    if (!dp) return -1;
    int k = 0;
    names[0] = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            pp_strappendf(names, n, "%s ", de->d_name);
            k++;
        }
    closedir(dp);
    return k;
}

/* The whole tensor `name` of f as fp32 (malloc'd), numel in *n. */
static float *read_tensor(SafetensorsFile *f, const char *name, size_t *n) {
    const SafetensorsTensor *t = safetensors_find(f, name);
    ck_assert_msg(t != NULL, "no tensor %s", name);
    *n = (size_t)t->numel;
    float *v = malloc((*n + 1) * sizeof *v);
    ck_assert_int_eq(safetensors_read(f, t, 0, t->numel, v, g_err, sizeof g_err), PP_OK);
    return v;
}

/* ---- reading ------------------------------------------------------------------------- */

START_TEST(test_read_f32) {
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(golden("f32.safetensors"), &f, g_err, sizeof g_err), PP_OK);
    ck_assert_uint_eq(safetensors_count(f), 4);
    ck_assert_str_eq(safetensors_meta_get(f, "format"), "pt");
    ck_assert_uint_eq(safetensors_meta_count(f), 1);
    ck_assert_ptr_null(safetensors_find(f, "nope"));

    const SafetensorsTensor *w = safetensors_find(f, "w");
    ck_assert_int_eq(w->dtype, SAFETENSORS_F32);
    ck_assert_int_eq(w->ndim, 2);
    ck_assert_int_eq(w->shape[0], 3);
    ck_assert_int_eq(w->shape[1], 4);
    ck_assert_uint_eq(w->numel, 12);
    ck_assert_uint_eq(safetensors_tensor(f, 0)->begin, safetensors_header_bytes(f));
    size_t n;
    float *v = read_tensor(f, "w", &n), want[12];
    for (int i = 0; i < 12; i++) want[i] = from_bits(W_BITS[i]);
    ck_assert_int_eq(first_diff(v, want, 12), -1);
    free(v);
    v = read_tensor(f, "b", &n);
    ck_assert_uint_eq(n, 5);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(v[i], formula(1, i));
    free(v);
    v = read_tensor(f, "scalar", &n);
    ck_assert_int_eq(safetensors_find(f, "scalar")->ndim, 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_float_eq(v[0], 2.5f);
    free(v);
    v = read_tensor(f, "empty", &n);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(safetensors_find(f, "empty")->shape[0], 0);
    free(v);
    ck_assert_uint_eq(safetensors_bytes_read(f), 48 + 20 + 4);
    safetensors_close(f);
}
END_TEST

START_TEST(test_read_bf16) {
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(golden("bf16.safetensors"), &f, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(safetensors_find(f, "x")->dtype, SAFETENSORS_BF16);
    size_t n, nw, ns;
    float *x = read_tensor(f, "x", &n), *wide = read_tensor(f, "x.wide", &nw),
          *src = read_tensor(f, "src", &ns);
    ck_assert_uint_eq(n, 10);
    ck_assert_int_eq(first_diff(x, wide, n), -1); /* equal to numpy's widening */
    for (int i = 0; i < 10; i++) {
        ck_assert_uint_eq(bits(src[i]), SRC_BITS[i]);
        ck_assert_uint_eq(bits(x[i]), (uint32_t)SRC_BF16[i] << 16);
        ck_assert_uint_eq(safetensors_f32_to_bf16(src[i]), SRC_BF16[i]); /* torch's rounding */
    }
    ck_assert_uint_eq(safetensors_bytes_read(f), 20 + 40 + 40);
    free(x);
    free(wide);
    free(src);
    safetensors_close(f);
}
END_TEST

START_TEST(test_read_f16) {
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(golden("f16.safetensors"), &f, g_err, sizeof g_err), PP_OK);
    size_t n, nw;
    float *h = read_tensor(f, "h", &n), *wide = read_tensor(f, "h.wide", &nw);
    ck_assert_uint_eq(n, 16);
    ck_assert_int_eq(first_diff(h, wide, n), -1); /* numpy's exact widening, NaNs too */
    ck_assert_float_eq(h[0], ldexpf(1, -24));     /* the smallest subnormal */
    ck_assert_float_eq(h[1], ldexpf(1023, -24));  /* the largest */
    ck_assert_float_eq(h[2], ldexpf(1, -14));     /* the smallest normal */
    ck_assert_float_eq(h[3], 65504.0f);
    ck_assert_uint_eq(bits(h[6]), 0x80000000); /* -0 */
    ck_assert(isinf(h[7]) && h[7] > 0 && isinf(h[8]) && h[8] < 0);
    ck_assert(isnan(h[9]) && isnan(h[10]) && isnan(h[11]) && signbit(h[11]));
    ck_assert_uint_eq(bits(h[10]), 0x7F802000); /* the payload kept */
    ck_assert_float_eq(h[13], -ldexpf(1, -24));
    for (int i = 0; i < 16; i++)
        ck_assert_uint_eq(bits(safetensors_f16_to_f32(H_BITS[i])), bits(wide[i]));
    free(h);
    free(wide);
    safetensors_close(f);
}
END_TEST

/* Every range of every readable dtype equals the whole read's slice, and costs exactly
 * its bytes. */
START_TEST(test_read_ranges) {
    static const struct {
        const char *file, *tensor;
        unsigned size;
    } cases[] = {{"f32.safetensors", "w", 4},
                 {"bf16.safetensors", "x", 2},
                 {"f16.safetensors", "h", 2}};
    for (size_t c = 0; c < 3; c++) {
        SafetensorsFile *f;
        ck_assert_int_eq(safetensors_open(golden(cases[c].file), &f, g_err, sizeof g_err), PP_OK);
        size_t n;
        float *all = read_tensor(f, cases[c].tensor, &n), part[16];
        const SafetensorsTensor *t = safetensors_find(f, cases[c].tensor);
        uint64_t before = safetensors_bytes_read(f), want = 0;
        int checked = 0;
        for (size_t first = 0; first <= n; first++)
            for (size_t m = 0; first + m <= n; m++) {
                for (size_t i = 0; i < 16; i++) part[i] = -7.0f;
                ck_assert_int_eq(safetensors_read(f, t, first, m, part, g_err, sizeof g_err),
                                 PP_OK);
                ck_assert_int_eq(first_diff(part, all + first, m), -1);
                if (m < 16) ck_assert_float_eq(part[m], -7.0f); /* nothing past n */
                want += m * cases[c].size;
                checked++;
            }
        ck_assert_int_ge(checked, 66);
        ck_assert_uint_eq(safetensors_bytes_read(f) - before, want);
        ck_assert_int_eq(safetensors_read(f, t, n - 1, 2, part, g_err, sizeof g_err), PP_EUSAGE);
        ASSERT_ERR_HAS(cases[c].file);
        ASSERT_ERR_HAS(cases[c].tensor);
        ASSERT_ERR_HAS("past its end");
        free(all);
        safetensors_close(f);
    }
}
END_TEST

/* ---- writing ------------------------------------------------------------------------- */

static const SafetensorsMeta PT = {"format", "pt"};

/* Every tensor of the file at path as a write list (data malloc'd), in reverse name
 * order (so the writer's sorting is what puts them in place). */
static size_t load_all(const char *path, SafetensorsWriteTensor *w, float **data) {
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(path, &f, g_err, sizeof g_err), PP_OK);
    size_t n = safetensors_count(f);
    for (size_t i = 0; i < n; i++) {
        const SafetensorsTensor *t = safetensors_tensor(f, i);
        size_t k = n - 1 - i, m;
        data[k] = read_tensor(f, t->name, &m);
        w[k] = (SafetensorsWriteTensor){strdup(t->name), t->dtype, t->ndim, {0}, data[k]};
        memcpy(w[k].shape, t->shape, sizeof t->shape);
    }
    safetensors_close(f);
    return n;
}

static void free_all(SafetensorsWriteTensor *w, float **data, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)w[i].name);
        free(data[i]);
    }
}

START_TEST(test_write_identical) {
    const char *files[] = {"f32.safetensors", "bf16.safetensors"};
    for (int k = 0; k < 2; k++) {
        SafetensorsWriteTensor w[8];
        float *data[8];
        size_t n = load_all(golden(files[k]), w, data);
        if (k == 1) /* the BF16 tensor from the fp32 source: the rounding is ours */
            for (size_t i = 0; i < n; i++)
                if (strcmp(w[i].name, "x") == 0)
                    for (size_t j = 0; j < n; j++)
                        if (strcmp(w[j].name, "src") == 0) w[i].data = data[j];
        ck_assert_int_eq(safetensors_write(tmp("out.safetensors"), w, n, &PT, 1, NULL, NULL, g_err,
                                           sizeof g_err),
                         PP_OK);
        assert_same_files(tmp("out.safetensors"), golden(files[k]));
        free_all(w, data, n);
    }
    char names[256];
    ck_assert_int_eq(dir_entries(g_dir, names, sizeof names), 1); /* no temporary left */
}
END_TEST

/* The fill callback serves tensors without data: the file is the same. */
static int fill_from(void *ctx, const SafetensorsWriteTensor *t, float *dst, char *err,
                     size_t errlen) {
    SafetensorsWriteTensor *src = ctx;
    while (strcmp(src->name, t->name) != 0) src++;
    memcpy(dst, src->data, safetensors_write_bytes(src));
    return PP_OK;
}

static int fill_fails(void *ctx, const SafetensorsWriteTensor *t, float *dst, char *err,
                      size_t errlen) {
    return pp_errf(err, errlen, PP_ERUNTIME, "no data for %s", t->name);
}

START_TEST(test_write_fill) {
    SafetensorsWriteTensor w[8], lazy[8];
    float *data[8];
    size_t n = load_all(golden("f32.safetensors"), w, data);
    memcpy(lazy, w, sizeof lazy);
    for (size_t i = 0; i < n; i++) lazy[i].data = NULL;
    ck_assert_int_eq(safetensors_write(tmp("out.safetensors"), lazy, n, &PT, 1, fill_from, w, g_err,
                                       sizeof g_err),
                     PP_OK);
    assert_same_files(tmp("out.safetensors"), golden("f32.safetensors"));
    ck_assert_int_eq(safetensors_write(tmp("bad.safetensors"), lazy, n, &PT, 1, fill_fails, w,
                                       g_err, sizeof g_err),
                     PP_ERUNTIME);
    ASSERT_ERR_HAS("no data for");
    char names[256];
    ck_assert_int_eq(dir_entries(g_dir, names, sizeof names), 1); /* only out.safetensors */
    free_all(w, data, n);
}
END_TEST

/* F16 values (subnormals, inf, NaN payloads) -> F32 file -> read: the same bits; and
 * the F32 file written again from what was read is the same file. */
START_TEST(test_round_trip) {
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(golden("f16.safetensors"), &f, g_err, sizeof g_err), PP_OK);
    size_t n;
    float *h = read_tensor(f, "h", &n);
    safetensors_close(f);
    SafetensorsWriteTensor w = {"h", SAFETENSORS_F32, 2, {4, 4}, h};
    ck_assert_int_eq(safetensors_write(tmp("a.safetensors"), &w, 1, NULL, 0, NULL, NULL, g_err,
                                       sizeof g_err),
                     PP_OK);
    ck_assert_int_eq(safetensors_open(tmp("a.safetensors"), &f, g_err, sizeof g_err), PP_OK);
    ck_assert_uint_eq(safetensors_meta_count(f), 0);
    float *back = read_tensor(f, "h", &n);
    ck_assert_int_eq(first_diff(back, h, 16), -1);
    safetensors_close(f);
    w.data = back;
    ck_assert_int_eq(safetensors_write(tmp("b.safetensors"), &w, 1, NULL, 0, NULL, NULL, g_err,
                                       sizeof g_err),
                     PP_OK);
    assert_same_files(tmp("a.safetensors"), tmp("b.safetensors"));
    free(h);
    free(back);
}
END_TEST

START_TEST(test_write_refuses) {
    float x[4] = {1, 2, 3, 4};
    SafetensorsWriteTensor dup[2] = {{"a", SAFETENSORS_F32, 1, {4}, x},
                                     {"a", SAFETENSORS_F32, 1, {4}, x}};
    ck_assert_int_eq(safetensors_write(tmp("o"), dup, 2, NULL, 0, NULL, NULL, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("\"a\" is given twice");
    SafetensorsWriteTensor f16 = {"h", SAFETENSORS_F16, 1, {4}, x};
    ck_assert_int_eq(safetensors_write(tmp("o"), &f16, 1, NULL, 0, NULL, NULL, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("cannot write dtype F16");
    SafetensorsWriteTensor neg = {"n", SAFETENSORS_F32, 2, {2, -2}, x};
    ck_assert_int_eq(safetensors_write(tmp("o"), &neg, 1, NULL, 0, NULL, NULL, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("tensor \"n\": shape[1] = -2");
    SafetensorsWriteTensor noname = {"", SAFETENSORS_F32, 1, {4}, x};
    ck_assert_int_eq(safetensors_write(tmp("o"), &noname, 1, NULL, 0, NULL, NULL, g_err,
                                       sizeof g_err),
                     PP_EUSAGE);
    SafetensorsMeta twice[2] = {{"k", "1"}, {"k", "2"}};
    ck_assert_int_eq(safetensors_write(tmp("o"), dup, 1, twice, 2, NULL, NULL, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("metadata key \"k\" is given twice");
    SafetensorsWriteTensor nodata = {"z", SAFETENSORS_F32, 1, {4}, NULL};
    ck_assert_int_eq(safetensors_write(tmp("o"), &nodata, 1, NULL, 0, NULL, NULL, g_err,
                                       sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("\"z\" has no data");
    char names[256];
    ck_assert_int_eq(dir_entries(g_dir, names, sizeof names), 0);
}
END_TEST

/* A name with quotes, a backslash, control characters and UTF-8 is escaped as
 * serde_json does, and reads back. */
START_TEST(test_write_escapes) {
    float x = 1;
    const char *name = "a\"b\\c\n\x01\x7f\xc3\xa9";
    SafetensorsWriteTensor w = {name, SAFETENSORS_F32, 0, {0}, &x};
    ck_assert_int_eq(safetensors_write(tmp("e"), &w, 1, NULL, 0, NULL, NULL, g_err, sizeof g_err),
                     PP_OK);
    size_t n;
    unsigned char *p = read_all(tmp("e"), &n);
    const char *want = "{\"a\\\"b\\\\c\\n\\u0001\x7f\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[],"
                       "\"data_offsets\":[0,4]}}";
    ck_assert_int_eq(memcmp(p + 8, want, strlen(want)), 0);
    ck_assert_uint_eq((8 + strlen(want) + 7) / 8 * 8 + 4, n); /* padded to 8 */
    free(p);
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(tmp("e"), &f, g_err, sizeof g_err), PP_OK);
    ck_assert_ptr_nonnull(safetensors_find(f, name));
    safetensors_close(f);
}
END_TEST

/* ---- damaged files ------------------------------------------------------------------- */

/* Opening `path` fails with status rc and a message holding `a` and `b` (b may be NULL)
 * and the path. */
static void open_fails(const char *path, int rc, const char *a, const char *b) {
    SafetensorsFile *f = (SafetensorsFile *)1;
    g_err[0] = 0;
    ck_assert_int_eq(safetensors_open(path, &f, g_err, sizeof g_err), rc);
    ck_assert_ptr_null(f);
    ASSERT_ERR_HAS(path);
    ASSERT_ERR_HAS(a);
    if (b) ASSERT_ERR_HAS(b);
}

START_TEST(test_damaged_lengths) {
    size_t n;
    unsigned char *p = read_all(golden("f32.safetensors"), &n);
    put_file(tmp("short"), p, 5);
    open_fails(tmp("short"), PP_EUSAGE, "too few for the 8-byte header length", NULL);
    put_file(tmp("cut_header"), p, 40);
    open_fails(tmp("cut_header"), PP_EUSAGE, "runs past the end of the file", "truncated");
    put_file(tmp("cut_data"), p, n - 1);
    open_fails(tmp("cut_data"), PP_EUSAGE, "run past the end of the data", "tensor \"");
    unsigned char huge[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'};
    put_file(tmp("huge"), huge, sizeof huge);
    open_fails(tmp("huge"), PP_EUSAGE, "header length 1099511627776 is over the limit", NULL);
    uint64_t over = SAFETENSORS_HEADER_MAX + 1ull;
    for (int i = 0; i < 8; i++) huge[i] = (unsigned char)(over >> (8 * i));
    put_file(tmp("over"), huge, sizeof huge);
    open_fails(tmp("over"), PP_EUSAGE, "over the limit of 100000000 bytes", NULL);
    open_fails(tmp("absent"), PP_EUSAGE, "cannot open", "No such file");
    mkdir(tmp("dir"), 0755);
    open_fails(tmp("dir"), PP_EUSAGE, "a directory", NULL);
    free(p);
}
END_TEST

START_TEST(test_damaged_json) {
    put_st(tmp("notjson"), "{\"a\": {\"dtype\": F32}}", 0);
    open_fails(tmp("notjson"), PP_EUSAGE, "the header is not valid JSON", "line 1, column");
    put_st(tmp("trailing"), "{}  x", 0);
    open_fails(tmp("trailing"), PP_EUSAGE, "not valid JSON", "end of file expected");
    put_st(tmp("array"), "[1, 2]", 0);
    open_fails(tmp("array"), PP_EUSAGE, "the header is an array, not a JSON object", NULL);
    put_st(tmp("dupkey"),
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}",
           8);
    open_fails(tmp("dupkey"), PP_EUSAGE, "duplicate object key", NULL);
    put_st(tmp("badutf8"), "{\"\xff\":1}", 0);
    open_fails(tmp("badutf8"), PP_EUSAGE, "not valid JSON", NULL);
    put_st(tmp("meta"), "{\"__metadata__\":{\"format\":3}}", 0);
    open_fails(tmp("meta"), PP_EUSAGE, "\"__metadata__\" key \"format\" is an integer", NULL);
    put_st(tmp("entry"), "{\"t\": 3}", 0);
    open_fails(tmp("entry"), PP_EUSAGE, "tensor \"t\": expected an object", NULL);
}
END_TEST

/* One tensor entry `entry` for tensor "t" in a file with `data` data bytes fails to open
 * with a message holding `want`. */
static void entry_fails(const char *entry, size_t data, const char *want) {
    char header[512];
    snprintf(header, sizeof header, "{\"t\":%s}", entry);
    put_st(tmp("e.safetensors"), header, data);
    open_fails(tmp("e.safetensors"), PP_EUSAGE, "tensor \"t\"", want);
}

START_TEST(test_damaged_entries) {
    entry_fails("{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                "unknown dtype \"F17\"");
    entry_fails("{\"shape\":[1],\"data_offsets\":[0,4]}", 4, "\"dtype\" is missing");
    entry_fails("{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}", 4, "\"dtype\" is an integer");
    entry_fails("{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}", 4,
                "\"shape\" is an integer");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}", 4, "shape[0] is not");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}", 4, "shape[0] is not");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}", 4,
                "9 dimensions, more than 8");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}",
                4, "more elements than 64 bits count");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}", 4,
                "more elements than 64 bits count");
    put_st(tmp("big"),
           "{\"t\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
           "\"data_offsets\":[0,4]}}",
           4); /* past int64: refused by jansson */
    open_fails(tmp("big"), PP_EUSAGE, "not valid JSON: too big integer", "line 1, column");
    entry_fails("{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}", 2,
                "does not fill whole bytes");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[2]}", 8, "\"data_offsets\" is not [BEGIN, END]");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}", 8, "BEGIN <= END");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}", 9,
                "not [BEGIN, END]");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,6]}", 8,
                "hold 6 bytes, but F32 of shape [2] takes 8");
    entry_fails("{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}", 24,
                "hold 24 bytes, but BF16 of shape [2, 3] takes 12");
    entry_fails("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}", 8,
                "run past the end of the data (8 bytes");
}
END_TEST

START_TEST(test_damaged_overlap) {
    put_st(tmp("o"),
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
           20);
    open_fails(tmp("o"), PP_EUSAGE, "tensors \"a\" and \"b\" overlap", NULL);
    put_st(tmp("inside"),
           "{\"big\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
           "\"small\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
           "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
           32);
    open_fails(tmp("inside"), PP_EUSAGE, "tensors \"big\" and \"small\" overlap", NULL);
    /* gaps, empty tensors anywhere and unordered entries are fine (the data ending where
     * the last tensor ends) */
    put_st(tmp("ok"),
           "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
           "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           12);
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(tmp("ok"), &f, g_err, sizeof g_err), PP_OK);
    ck_assert_str_eq(safetensors_tensor(f, 0)->name, "a");
    ck_assert_str_eq(safetensors_tensor(f, 2)->name, "b");
    safetensors_close(f);
}
END_TEST

/* Bytes after the last tensor are refused: what a header length a few bytes short leaves
 * (the header's padding spaces still parse, and every tensor would be read from that many
 * bytes too early), or an appended file. */
START_TEST(test_damaged_trailing) {
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}          ";
    size_t n = strlen(h); /* 64: padded to 8 as the writers do */
    unsigned char p[8 + 64 + 8] = {0};
    ck_assert_uint_eq(n, 64);
    memcpy(p + 8, h, n);
    for (int cut = 0; cut <= 10; cut++) { /* N - cut: still JSON while the spaces last */
        uint64_t N = n - (uint64_t)cut;
        for (int i = 0; i < 8; i++) p[i] = (unsigned char)(N >> (8 * i));
        put_file(tmp("short_n"), p, sizeof p);
        SafetensorsFile *f = NULL;
        int rc = safetensors_open(tmp("short_n"), &f, g_err, sizeof g_err);
        ck_assert_msg(cut == 0 ? rc == PP_OK : rc == PP_EUSAGE, "N - %d: rc %d %s", cut, rc,
                      g_err);
        if (cut) ASSERT_ERR_HAS(tmp("short_n"));
        if (cut) ASSERT_ERR_HAS("bytes follow the last tensor's data");
        safetensors_close(f);
    }
    put_st(tmp("appended"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 5);
    open_fails(tmp("appended"), PP_EUSAGE, "1 bytes follow the last tensor's data", NULL);
    put_st(tmp("none"), "{}", 1);
    open_fails(tmp("none"), PP_EUSAGE, "1 bytes follow", NULL);
}
END_TEST

/* A NUL byte is no JSON: jansson alone would end a number at it ({"a": 1\0} as {"a": 1}). */
START_TEST(test_json_nul) {
    json_t *root;
    static const char text[] = "{\"eos_token_id\": 1\0}";
    ck_assert_int_eq(hf_json_parse("F", "the file", text, sizeof text - 1, &root, g_err,
                                   sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("F: the file is not valid JSON: a NUL byte at line 1, column 19");
    ck_assert_int_eq(hf_json_parse("F", "the file", "{\n\"a\": 1}", 9, &root, g_err, sizeof g_err),
                     PP_OK);
    json_decref(root);
}
END_TEST

/* A dtype the format knows but fp32 cannot hold opens, and the read names it. */
START_TEST(test_unreadable_dtype) {
    put_st(tmp("i"),
           "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
           "\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[16,20]}}",
           20);
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(tmp("i"), &f, g_err, sizeof g_err), PP_OK);
    float out[4];
    ck_assert_int_eq(safetensors_read(f, safetensors_find(f, "ids"), 0, 2, out, g_err,
                                      sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS(tmp("i"));
    ASSERT_ERR_HAS("tensor \"ids\" is stored as I64");
    ck_assert_int_eq(safetensors_read(f, safetensors_find(f, "q"), 0, 4, out, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("stored as F8_E4M3");
    ck_assert_uint_eq(safetensors_bytes_read(f), 0);
    safetensors_close(f);
}
END_TEST

/* A file cut after it was opened: the read says so, no crash. */
START_TEST(test_truncated_after_open) {
    size_t n;
    unsigned char *p = read_all(golden("f32.safetensors"), &n);
    put_file(tmp("f"), p, n);
    SafetensorsFile *f;
    ck_assert_int_eq(safetensors_open(tmp("f"), &f, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(truncate(tmp("f"), (off_t)safetensors_tensor(f, 0)->begin + 2), 0);
    float out[12];
    ck_assert_int_eq(safetensors_read(f, safetensors_tensor(f, 0), 0,
                                      safetensors_tensor(f, 0)->numel, out, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("the file ends inside tensor");
    safetensors_close(f);
    free(p);
}
END_TEST

/* ---- directories --------------------------------------------------------------------- */

static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
    int shard;
} SHARDED[8] = {
    {"model.embed_tokens.weight", 2, {8, 4}, 1},
    {"model.layers.0.input_layernorm.weight", 1, {4}, 1},
    {"model.layers.0.self_attn.q_proj.weight", 2, {4, 4}, 3},
    {"model.layers.0.mlp.up_proj.weight", 2, {12, 4}, 2},
    {"model.layers.1.input_layernorm.weight", 1, {4}, 3},
    {"model.layers.1.self_attn.q_proj.weight", 2, {4, 4}, 3},
    {"model.norm.weight", 1, {4}, 4},
    {"lm_head.weight", 2, {8, 4}, 4},
};

START_TEST(test_dir_sharded) {
    HfDir *d;
    ck_assert_int_eq(hf_dir_open(golden("sharded"), &d, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(hf_dir_sharded(d), 1);
    ck_assert_uint_eq(hf_dir_count(d), 8);
    ck_assert_str_eq(hf_dir_name(d, 0), "lm_head.weight"); /* by name */
    uint64_t bytes = 0;
    for (int t = 0; t < 8; t++) {
        const char *file;
        const SafetensorsTensor *ti = hf_dir_find(d, SHARDED[t].name, &file);
        ck_assert_ptr_nonnull(ti);
        char want[64];
        snprintf(want, sizeof want, "/model-%05d-of-00004.safetensors", SHARDED[t].shard);
        ck_assert_msg(strstr(file, want), "%s in %s, not %s", SHARDED[t].name, file, want);
        ck_assert_int_eq(ti->ndim, SHARDED[t].ndim);
        ck_assert_int_eq(ti->shape[0], SHARDED[t].shape[0]);
        float v[64];
        ck_assert_int_eq(hf_dir_read(d, SHARDED[t].name, 0, ti->numel, v, g_err, sizeof g_err),
                         PP_OK);
        for (size_t i = 0; i < ti->numel; i++) ck_assert_float_eq(v[i], formula(t, i));
        bytes += ti->numel * 4;
    }
    ck_assert_uint_eq(bytes, 624); /* the index's total_size */
    ck_assert_uint_eq(hf_dir_bytes_read(d), bytes);
    /* rows 2..5 of the embedding: 16 elements, 64 bytes and no more */
    float rows[16];
    ck_assert_int_eq(hf_dir_read(d, "model.embed_tokens.weight", 8, 16, rows, g_err, sizeof g_err),
                     PP_OK);
    for (int i = 0; i < 16; i++) ck_assert_float_eq(rows[i], formula(0, 8 + (size_t)i));
    ck_assert_uint_eq(hf_dir_bytes_read(d), bytes + 64);
    ck_assert_uint_gt(hf_dir_header_bytes(d), 659); /* the index, and the shards' headers */
    ck_assert_int_eq(hf_dir_read(d, "model.layers.2.input_layernorm.weight", 0, 4, rows, g_err,
                                 sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("no tensor \"model.layers.2.input_layernorm.weight\"");
    ASSERT_ERR_HAS("model.safetensors.index.json");
    ck_assert_ptr_null(hf_dir_find(d, "nope", NULL));
    hf_dir_close(d);
}
END_TEST

/* Every tensor of the sharded directory, in its state-dict order, for a writer. */
static void load_sharded(SafetensorsWriteTensor *w, float **data) {
    HfDir *d;
    ck_assert_int_eq(hf_dir_open(golden("sharded"), &d, g_err, sizeof g_err), PP_OK);
    for (int t = 0; t < 8; t++) {
        const SafetensorsTensor *ti = hf_dir_find(d, SHARDED[t].name, NULL);
        data[t] = malloc(ti->numel * sizeof(float));
        ck_assert_int_eq(hf_dir_read(d, SHARDED[t].name, 0, ti->numel, data[t], g_err,
                                     sizeof g_err),
                         PP_OK);
        w[t] = (SafetensorsWriteTensor){SHARDED[t].name, SAFETENSORS_F32, ti->ndim, {0}, data[t]};
        memcpy(w[t].shape, ti->shape, sizeof ti->shape);
    }
    hf_dir_close(d);
}

/* The directory written from what was read is the reference's: 4 shards cut as
 * huggingface_hub cuts them, the index and config.json, byte for byte, and no more. */
START_TEST(test_dir_write_identical) {
    SafetensorsWriteTensor w[8];
    float *data[8];
    load_sharded(w, data);
    HfConfig c;
    ck_assert_int_eq(hf_config_read(golden("sharded/config.json"), &c, g_err, sizeof g_err), PP_OK);
    char *cfg;
    size_t cfg_len;
    ck_assert_int_eq(hf_config_format(&c, HF_CONFIG_ROPE_SCALING, &cfg, &cfg_len, g_err,
                                      sizeof g_err),
                     PP_OK);
    HfDirFile files[1] = {{"config.json", cfg, cfg_len}};
    HfDirWriteOptions o = {.max_shard_size = 150,
                           .meta = &PT,
                           .nmeta = 1,
                           .files = files,
                           .nfiles = 1};
    ck_assert_int_eq(hf_dir_write(tmp("out/model"), w, 8, &o, g_err, sizeof g_err), PP_OK);
    const char *names[] = {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                           "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                           "model.safetensors.index.json",     "config.json"};
    char a[PP_PATH_MAX], b[PP_PATH_MAX], list[512];
    for (int i = 0; i < 6; i++) {
        snprintf(a, sizeof a, "%s/%s", tmp("out/model"), names[i]);
        snprintf(b, sizeof b, "sharded/%s", names[i]);
        assert_same_files(a, golden(b));
    }
    ck_assert_int_eq(dir_entries(tmp("out/model"), list, sizeof list), 6);
    ck_assert_int_eq(dir_entries(tmp("out"), list, sizeof list), 1); /* no staging left */
    free(cfg);
    for (int t = 0; t < 8; t++) free(data[t]);
}
END_TEST

/* One shard: model.safetensors and no index; BF16 halves the bytes; reads back. */
START_TEST(test_dir_single) {
    SafetensorsWriteTensor w[8];
    float *data[8];
    load_sharded(w, data);
    for (int t = 0; t < 8; t++) w[t].dtype = SAFETENSORS_BF16;
    ck_assert_int_eq(hf_dir_write(tmp("m"), w, 8, NULL, g_err, sizeof g_err), PP_OK);
    char list[512];
    ck_assert_int_eq(dir_entries(tmp("m"), list, sizeof list), 1);
    ck_assert_str_eq(list, "model.safetensors ");
    HfDir *d;
    ck_assert_int_eq(hf_dir_open(tmp("m"), &d, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(hf_dir_sharded(d), 0);
    float v[64];
    for (int t = 0; t < 8; t++) {
        const SafetensorsTensor *ti = hf_dir_find(d, SHARDED[t].name, NULL);
        ck_assert_int_eq(ti->dtype, SAFETENSORS_BF16);
        ck_assert_int_eq(hf_dir_read(d, SHARDED[t].name, 0, ti->numel, v, g_err, sizeof g_err),
                         PP_OK);
        for (size_t i = 0; i < ti->numel; i++) /* k/64 with |k| <= 50 is exact in BF16 */
            ck_assert_float_eq(v[i], formula(t, i));
    }
    ck_assert_uint_eq(hf_dir_bytes_read(d), 624 / 2);
    hf_dir_close(d);
    for (int t = 0; t < 8; t++) free(data[t]);
}
END_TEST

/* Nothing appears under the final name unless all of it was written. */
START_TEST(test_dir_write_all_or_nothing) {
    SafetensorsWriteTensor w[8];
    float *data[8];
    load_sharded(w, data);
    char list[512];
    /* a fill failing at the third shard: no directory, no staging left */
    w[4].data = NULL;
    HfDirWriteOptions o = {.max_shard_size = 150, .fill = fill_fails};
    ck_assert_int_eq(hf_dir_write(tmp("m"), w, 8, &o, g_err, sizeof g_err), PP_ERUNTIME);
    ASSERT_ERR_HAS("no data for model.layers.1.input_layernorm.weight");
    ck_assert_int_eq(dir_entries(g_dir, list, sizeof list), 0);
    w[4].data = data[4];
    /* a directory that is not empty is refused and left alone */
    mkdir(tmp("full"), 0755);
    put_file(tmp("full/keep"), "x", 1);
    ck_assert_int_eq(hf_dir_write(tmp("full"), w, 8, &o, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("exists and is not empty");
    ck_assert_int_eq(dir_entries(tmp("full"), list, sizeof list), 1);
    /* an empty directory is replaced (named with a trailing slash too) */
    mkdir(tmp("empty"), 0755);
    ck_assert_int_eq(hf_dir_write(tmp("empty/"), w, 8, &o, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(dir_entries(tmp("empty"), list, sizeof list), 5);
    /* names: a tensor twice, a file that is no plain name or is the weights' own */
    SafetensorsWriteTensor twice[2] = {w[0], w[0]};
    ck_assert_int_eq(hf_dir_write(tmp("t"), twice, 2, NULL, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("\"model.embed_tokens.weight\" is given twice");
    HfDirFile bad[2] = {{"../escape", "x", 1}, {"model.safetensors.index.json", "x", 1}};
    for (int i = 0; i < 2; i++) {
        HfDirWriteOptions ob = {.files = &bad[i], .nfiles = 1};
        ck_assert_int_eq(hf_dir_write(tmp("t"), w, 8, &ob, g_err, sizeof g_err), PP_EUSAGE);
        ASSERT_ERR_HAS(bad[i].name);
    }
    ck_assert_int_eq(dir_entries(g_dir, list, sizeof list), 2); /* full, empty */
    for (int t = 0; t < 8; t++) free(data[t]);
}
END_TEST

/* A copy of test/hf/sharded in g_dir/d, its index replaced by `index` when not NULL. */
static void copy_sharded(const char *index) {
    mkdir(tmp("d"), 0755);
    const char *names[] = {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                           "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                           "model.safetensors.index.json"};
    char src[PP_PATH_MAX], dst[PP_PATH_MAX];
    for (int i = 0; i < 5; i++) {
        snprintf(src, sizeof src, "sharded/%s", names[i]);
        snprintf(dst, sizeof dst, "d/%s", names[i]);
        size_t n;
        unsigned char *p = read_all(golden(src), &n);
        put_file(tmp(dst), i == 4 && index ? index : (const char *)p,
                 i == 4 && index ? strlen(index) : n);
        free(p);
    }
}

static void dir_fails(const char *want1, const char *want2) {
    HfDir *d = (HfDir *)1;
    g_err[0] = 0;
    ck_assert_int_eq(hf_dir_open(tmp("d"), &d, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_ptr_null(d);
    ASSERT_ERR_HAS(want1);
    if (want2) ASSERT_ERR_HAS(want2);
}

START_TEST(test_dir_damaged) {
    copy_sharded("{\"weight_map\": {\"a.weight\": \"model-00009-of-00009.safetensors\"}}");
    dir_fails("model.safetensors.index.json: weight_map puts tensor \"a.weight\" in "
              "model-00009-of-00009.safetensors",
              "No such file");
    copy_sharded("{\"weight_map\": {\"model.norm.weight\": \"model-00001-of-00004.safetensors\"}}");
    dir_fails("tensor \"model.norm.weight\" in model-00001-of-00004.safetensors, but",
              "has no such tensor");
    /* a shard's tensor the index leaves out, or puts in another shard: transformers
     * would load it (every key of every shard), a reader of the index would not */
    copy_sharded("{\"weight_map\": {\"model.embed_tokens.weight\": "
                 "\"model-00001-of-00004.safetensors\"}}");
    dir_fails("model-00001-of-00004.safetensors holds tensor "
              "\"model.layers.0.input_layernorm.weight\", but ",
              "model.safetensors.index.json's weight_map does not name it");
    copy_sharded("{\"weight_map\": {\"model.embed_tokens.weight\": "
                 "\"model-00001-of-00004.safetensors\", "
                 "\"model.layers.0.input_layernorm.weight\": \"x.safetensors\"}}");
    static const float two[2] = {1, 2};
    const SafetensorsWriteTensor x[] = {
        {"model.layers.0.input_layernorm.weight", SAFETENSORS_F32, 1, {2}, two}};
    ck_assert_int_eq(safetensors_write(tmp("d/x.safetensors"), x, 1, NULL, 0, NULL, NULL, g_err,
                                       sizeof g_err),
                     PP_OK);
    dir_fails("model-00001-of-00004.safetensors holds tensor "
              "\"model.layers.0.input_layernorm.weight\", but ",
              "weight_map puts it in x.safetensors");
    copy_sharded("{\"weight_map\": {\"x\": \"../sharded/model-00001-of-00004.safetensors\"}}");
    dir_fails("not a file name in the directory", NULL);
    copy_sharded("{\"weight_map\": {\"x\": 3}}");
    dir_fails("weight_map[\"x\"] is an integer, not a file name", NULL);
    copy_sharded("{\"metadata\": {}, \"weight_map\": []}");
    dir_fails("\"weight_map\" is an array", NULL);
    copy_sharded("{\"weight_map\": {}");
    dir_fails("model.safetensors.index.json: the file is not valid JSON", "line 1, column");
    copy_sharded(NULL); /* a shard cut short: named */
    ck_assert_int_eq(truncate(tmp("d/model-00003-of-00004.safetensors"), 400), 0);
    dir_fails("model-00003-of-00004.safetensors: tensor \"", "run past the end of the data");
    char body[8192] = "{\"weight_map\": {\"x\": \"";
    memset(body + strlen(body), 'y', 5000);
    strcat(body, "\"}}");
    copy_sharded(body); /* a shard's name too long for a path: the index named */
    dir_fails("model.safetensors.index.json: weight_map puts tensor \"x\" in a file whose name "
              "(5000 bytes) makes a path too long",
              NULL);
    unlink(tmp("d/model.safetensors.index.json"));
    dir_fails("has neither model.safetensors nor model.safetensors.index.json", NULL);
    /* a dangling link (a Hub cache's blob never downloaded) is named, not called absent */
    ck_assert_int_eq(symlink(tmp("d/nowhere"), tmp("d/model.safetensors")), 0);
    dir_fails("cannot open", "d/model.safetensors: No such file");
    unlink(tmp("d/model.safetensors"));
    ck_assert_int_eq(symlink("model.safetensors.index.json", tmp("d/model.safetensors.index.json")), 0);
    dir_fails("model.safetensors.index.json", "Too many levels of symbolic links");
    HfDir *d;
    ck_assert_int_eq(hf_dir_open(tmp("nowhere"), &d, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("No such file");
}
END_TEST

START_TEST(test_parse_size) {
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {{"5GB", 5000000000ull},    {"500MB", 500000000ull},
              {"1.5GiB", 1610612736ull}, {"100", 100},
              {"5gb", 5000000000ull},    {"2KiB", 2048},
              {"1TB", 1000000000000ull}, {"10 MB", 10000000}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        ck_assert_int_eq(hf_dir_parse_size(ok[i].s, &v, g_err, sizeof g_err), PP_OK);
        ck_assert_uint_eq(v, ok[i].v);
    }
    const char *bad[] = {"0", "abc", "5XB", "-1GB", "", "GB", "nan", "1e30TB", " 5GB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        ck_assert_int_eq(hf_dir_parse_size(bad[i], &v, g_err, sizeof g_err), PP_EUSAGE);
        ASSERT_ERR_HAS("bad size");
    }
}
END_TEST

/* ---- config.json ---------------------------------------------------------------------- */

#define ASSERT_INT(f, k, v)                                                                        \
    do {                                                                                           \
        ck_assert_int_eq((f).present, 1);                                                          \
        ck_assert_str_eq((f).key, k);                                                              \
        ck_assert_int_eq((f).value, v);                                                            \
    } while (0)
#define ASSERT_REAL(f, k, v)                                                                       \
    do {                                                                                           \
        ck_assert_int_eq((f).present, 1);                                                          \
        ck_assert_str_eq((f).key, k);                                                              \
        ck_assert_double_eq((f).value, v);                                                         \
    } while (0)
#define ASSERT_STR(f, k, v)                                                                        \
    do {                                                                                           \
        ck_assert_int_eq((f).present, 1);                                                          \
        ck_assert_str_eq((f).key, k);                                                              \
        ck_assert_str_eq((f).value, v);                                                            \
    } while (0)

/* What Llama 3.2 1B's two forms share. */
static void assert_llama32(const HfConfig *c) {
    ASSERT_STR(c->model_type, "model_type", "llama");
    ASSERT_STR(c->architecture, "architectures", "LlamaForCausalLM");
    ASSERT_INT(c->vocab_size, "vocab_size", 128256);
    ASSERT_INT(c->hidden_size, "hidden_size", 2048);
    ASSERT_INT(c->num_hidden_layers, "num_hidden_layers", 16);
    ASSERT_INT(c->num_attention_heads, "num_attention_heads", 32);
    ASSERT_INT(c->num_key_value_heads, "num_key_value_heads", 8);
    ASSERT_INT(c->head_dim, "head_dim", 64);
    ASSERT_INT(c->intermediate_size, "intermediate_size", 8192);
    ASSERT_INT(c->max_position_embeddings, "max_position_embeddings", 131072);
    ASSERT_REAL(c->norm_eps, "rms_norm_eps", 1e-5);
    ASSERT_STR(c->hidden_act, "hidden_act", "silu");
    ck_assert_int_eq(c->rope_theta.present, 1);
    ck_assert_double_eq(c->rope_theta.value, 500000.0);
    ck_assert_int_eq(c->rope.present, 1);
    ck_assert_str_eq(c->rope.type.value, "llama3");
    ck_assert_double_eq(c->rope.factor.value, 32.0);
    ck_assert_double_eq(c->rope.low_freq_factor.value, 1.0);
    ck_assert_double_eq(c->rope.high_freq_factor.value, 4.0);
    ck_assert_int_eq(c->rope.original_max_position_embeddings.value, 8192);
    ck_assert(c->tie_word_embeddings.present && c->tie_word_embeddings.value == 1);
    ck_assert(c->attention_bias.present && c->attention_bias.value == 0);
    ck_assert(c->mlp_bias.present && c->mlp_bias.value == 0);
    ck_assert_int_eq(c->sliding_window.present, 0);
    ck_assert_int_eq(c->bos_token_id.n, 1);
    ck_assert_int_eq(c->bos_token_id.list, 0);
    ck_assert_int_eq(c->bos_token_id.ids[0], 128000);
    ck_assert_int_eq(c->eos_token_id.n, 3);
    ck_assert_int_eq(c->eos_token_id.list, 1);
    ck_assert_int_eq(c->eos_token_id.ids[2], 128009);
    ck_assert_str_eq(c->dtype.value, "bfloat16");
}

START_TEST(test_config_llama32) {
    HfConfig c;
    ck_assert_int_eq(hf_config_read(golden("llama32_config.json"), &c, g_err, sizeof g_err), PP_OK);
    assert_llama32(&c);
    ck_assert_str_eq(c.rope.key, "rope_scaling");
    ck_assert_str_eq(c.rope.type.key, "rope_scaling.rope_type");
    ck_assert_str_eq(c.rope.factor.key, "rope_scaling.factor");
    ck_assert_str_eq(c.rope_theta.key, "rope_theta");
    ck_assert_str_eq(c.dtype.key, "torch_dtype");
    ck_assert_msg(strstr(c.path, "llama32_config.json") != NULL, "%s", c.path);
}
END_TEST

START_TEST(test_config_rope_parameters) {
    HfConfig c;
    ck_assert_int_eq(hf_config_read(golden("llama32_v5_config.json"), &c, g_err, sizeof g_err),
                     PP_OK);
    assert_llama32(&c);
    ck_assert_str_eq(c.rope.key, "rope_parameters");
    ck_assert_str_eq(c.rope.type.key, "rope_parameters.rope_type");
    ck_assert_str_eq(c.rope_theta.key, "rope_parameters.rope_theta");
    ck_assert_str_eq(c.dtype.key, "dtype");
}
END_TEST

START_TEST(test_config_gpt2) {
    HfConfig c;
    ck_assert_int_eq(hf_config_read(golden("gpt2_config.json"), &c, g_err, sizeof g_err), PP_OK);
    ASSERT_STR(c.model_type, "model_type", "gpt2");
    ASSERT_STR(c.architecture, "architectures", "GPT2LMHeadModel");
    ASSERT_INT(c.hidden_size, "n_embd", 768);
    ASSERT_INT(c.num_hidden_layers, "n_layer", 12);
    ASSERT_INT(c.num_attention_heads, "n_head", 12);
    ASSERT_INT(c.max_position_embeddings, "n_positions", 1024);
    ASSERT_INT(c.vocab_size, "vocab_size", 50257);
    ASSERT_REAL(c.norm_eps, "layer_norm_epsilon", 1e-5);
    ASSERT_STR(c.hidden_act, "activation_function", "gelu_new");
    ck_assert_int_eq(c.intermediate_size.present, 0); /* n_inner absent: 4 * n_embd */
    ck_assert_int_eq(c.rope.present, 0);
    ck_assert_int_eq(c.rope_theta.present, 0);
    ck_assert_int_eq(c.tie_word_embeddings.present, 0);
    ck_assert_int_eq(c.eos_token_id.ids[0], 50256);
}
END_TEST

START_TEST(test_config_qwen2) {
    HfConfig c;
    ck_assert_int_eq(hf_config_read(golden("qwen2_config.json"), &c, g_err, sizeof g_err), PP_OK);
    ASSERT_STR(c.model_type, "model_type", "qwen2");
    ASSERT_INT(c.num_key_value_heads, "num_key_value_heads", 2);
    ASSERT_INT(c.sliding_window, "sliding_window", 32768);
    ck_assert(c.use_sliding_window.present && c.use_sliding_window.value == 0);
    ck_assert_int_eq(c.attention_bias.present, 0);
    ck_assert_int_eq(c.head_dim.present, 0);
    ck_assert_int_eq(c.rope.present, 0);
    ASSERT_REAL(c.rope_theta, "rope_theta", 1e6);
    ASSERT_REAL(c.norm_eps, "rms_norm_eps", 1e-6);
}
END_TEST

/* config.json written as transformers writes it, in each form, from each form. */
START_TEST(test_config_write) {
    static const struct {
        const char *in;
        HfConfigForm form;
        const char *want;
    } cases[] = {
        {"llama32_config.json", HF_CONFIG_ROPE_SCALING, "export_llama_hub.json"},
        {"llama32_config.json", HF_CONFIG_ROPE_PARAMETERS, "export_llama_v5.json"},
        {"llama32_v5_config.json", HF_CONFIG_ROPE_PARAMETERS, "export_llama_v5.json"},
        {"llama32_v5_config.json", HF_CONFIG_ROPE_SCALING, "export_llama_hub.json"},
        {"gpt2_config.json", HF_CONFIG_ROPE_SCALING, "export_gpt2.json"},
        {"sharded/config.json", HF_CONFIG_ROPE_SCALING, "sharded/config.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        HfConfig c, back;
        ck_assert_int_eq(hf_config_read(golden(cases[i].in), &c, g_err, sizeof g_err), PP_OK);
        ck_assert_int_eq(hf_config_write(tmp("config.json"), &c, cases[i].form, g_err,
                                         sizeof g_err),
                         PP_OK);
        assert_same_files(tmp("config.json"), golden(cases[i].want));
        ck_assert_int_eq(hf_config_read(tmp("config.json"), &back, g_err, sizeof g_err), PP_OK);
        if (strncmp(cases[i].in, "llama32", 7) == 0) assert_llama32(&back);
        ck_assert_int_eq(back.hidden_size.value, c.hidden_size.value);
        ck_assert_double_eq(back.norm_eps.value, c.norm_eps.value);
    }
    HfConfig c;
    ck_assert_int_eq(hf_config_read(golden("gpt2_config.json"), &c, g_err, sizeof g_err), PP_OK);
    c.norm_eps.present = 0;
    char *text;
    size_t len;
    ck_assert_int_eq(hf_config_format(&c, HF_CONFIG_ROPE_SCALING, &text, &len, g_err, sizeof g_err),
                     PP_EUSAGE);
    ASSERT_ERR_HAS("norm_eps is not set");
    ck_assert_ptr_null(text);
}
END_TEST

/* A config.json with `body` fails with a message naming the file and holding `want`. */
static void config_fails(const char *body, const char *want) {
    put_file(tmp("config.json"), body, strlen(body));
    HfConfig c;
    g_err[0] = 0;
    ck_assert_int_eq(hf_config_read(tmp("config.json"), &c, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS(tmp("config.json"));
    ASSERT_ERR_HAS(want);
}

START_TEST(test_config_damaged) {
    config_fails("{\"hidden_size\": \"2048\"}", "hidden_size is a string, expected an integer");
    config_fails("{\"n_embd\": 768.0}", "n_embd is a real number, expected an integer");
    config_fails("{\"rms_norm_eps\": \"1e-5\"}", "rms_norm_eps is a string, expected a number");
    config_fails("{\"tie_word_embeddings\": 1}",
                 "tie_word_embeddings is an integer, expected true or false");
    config_fails("{\"architectures\": \"LlamaForCausalLM\"}",
                 "architectures is a string, expected a list");
    config_fails("{\"architectures\": [3]}", "architectures[0] is an integer, expected a string");
    config_fails("{\"eos_token_id\": [1, \"2\"]}",
                 "eos_token_id[1] is a string, expected an integer");
    config_fails("{\"bos_token_id\": \"1\"}",
                 "bos_token_id is a string, expected an integer or a list");
    config_fails("{\"rope_scaling\": 8}", "rope_scaling is an integer, expected an object or null");
    config_fails("{\"rope_scaling\": {\"factor\": \"8\"}}",
                 "rope_scaling.factor is a string, expected a number");
    config_fails("{\"rope_parameters\": {\"rope_type\": 3}}",
                 "rope_parameters.rope_type is an integer");
    config_fails("{\"rope_parameters\": {\"full_attention\": {\"rope_theta\": 1e6}}}",
                 "rope_parameters.full_attention is an object: RoPE parameters per layer type");
    config_fails("{\"hidden_size\": 2048, \"n_embd\": 768}",
                 "hidden_size 2048 and n_embd 768 disagree");
    config_fails("{\"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_theta\": 500000.0}}",
                 "rope_theta 10000.0 and rope_parameters.rope_theta 500000.0 disagree");
    config_fails("{\"model_type\": \"llama\",\n \"vocab_size\": 12,,}", "not valid JSON");
    config_fails("{\"model_type\": \"llama\",\n \"vocab_size\": 12,,}", "line 2, column");
    config_fails("{\"a\": 1} {\"b\": 2}", "end of file expected");
    config_fails("{\"a\": 1, \"a\": 2}", "duplicate object key");
    config_fails("[]", "is an array, not a JSON object");
    config_fails("{\"model_type\": "
                 "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
                 "model_type is 68 bytes long");
    HfConfig c;
    ck_assert_int_eq(hf_config_read(tmp("absent.json"), &c, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("absent.json");
    /* what is fine: null as absent, equal aliases, an id and a list of it, rope_scaling's
     * older "type" beside rope_type, [] architectures */
    const char *ok = "{\"hidden_size\": 4, \"n_embd\": 4, \"sliding_window\": null, "
                     "\"rope_scaling\": {\"type\": \"linear\", \"rope_type\": \"llama3\"}, "
                     "\"eos_token_id\": 5, \"architectures\": []}";
    put_file(tmp("ok.json"), ok, strlen(ok));
    ck_assert_int_eq(hf_config_read(tmp("ok.json"), &c, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(c.sliding_window.present, 0);
    ck_assert_str_eq(c.rope.type.value, "llama3");
    ck_assert_int_eq(c.architecture.present, 0);
    ck_assert_int_eq(c.hidden_size.value, 4);
}
END_TEST

/* JSON as Python's json.dumps(indent=2, sort_keys=True) writes it: the expected texts
 * are Python 3.11's output. */
START_TEST(test_json_python) {
    static const struct {
        double x;
        const char *repr;
    } reals[] = {{1e-05, "1e-05"},
                 {500000.0, "500000.0"},
                 {0.02, "0.02"},
                 {1e16, "1e+16"},
                 {1e15, "1000000000000000.0"},
                 {0.0001, "0.0001"},
                 {5e-324, "5e-324"},
                 {1.7976931348623157e+308, "1.7976931348623157e+308"},
                 {-0.0, "-0.0"},
                 {1.0 / 3, "0.3333333333333333"},
                 {2.5e-5, "2.5e-05"},
                 {9999999999999998.0, "9999999999999998.0"},
                 {123.456, "123.456"},
                 {-1.5e-300, "-1.5e-300"}};
    char out[32];
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        hf_json_format_real(reals[i].x, out);
        ck_assert_str_eq(out, reals[i].repr);
    }
    json_error_t je;
    json_t *v = json_loads("{\"b\": \"\xc3\xa9\\n\\u0001\x7f\\ud83d\\ude00\\\"\\\\\", \"a\": [], "
                           "\"c\": {}, \"d\": [1, 2.5, null, true], "
                           "\"B\": {\"z\": 1e-07, \"y\": 1e16}}",
                           0, &je);
    ck_assert_msg(v != NULL, "%s", je.text);
    HfBuf b = {0};
    hf_json_dump_python(&b, v);
    ck_assert_str_eq(b.p,
                     "{\n  \"B\": {\n    \"y\": 1e+16,\n    \"z\": 1e-07\n  },\n  \"a\": [],\n"
                     "  \"b\": \"\\u00e9\\n\\u0001\\u007f\\ud83d\\ude00\\\"\\\\\",\n  \"c\": {},\n"
                     "  \"d\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
    hf_buf_free(&b);
    json_decref(v);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

static Suite *hf_suite(void) {
    Suite *s = suite_create("hf");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_read_f32);
    tcase_add_test(tc, test_read_bf16);
    tcase_add_test(tc, test_read_f16);
    tcase_add_test(tc, test_read_ranges);
    tcase_add_test(tc, test_write_identical);
    tcase_add_test(tc, test_write_fill);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_write_refuses);
    tcase_add_test(tc, test_write_escapes);
    tcase_add_test(tc, test_damaged_lengths);
    tcase_add_test(tc, test_damaged_json);
    tcase_add_test(tc, test_damaged_entries);
    tcase_add_test(tc, test_damaged_overlap);
    tcase_add_test(tc, test_damaged_trailing);
    tcase_add_test(tc, test_json_nul);
    tcase_add_test(tc, test_unreadable_dtype);
    tcase_add_test(tc, test_truncated_after_open);
    suite_add_tcase(s, tc);
    tc = tcase_create("dir");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_dir_sharded);
    tcase_add_test(tc, test_dir_write_identical);
    tcase_add_test(tc, test_dir_single);
    tcase_add_test(tc, test_dir_write_all_or_nothing);
    tcase_add_test(tc, test_dir_damaged);
    tcase_add_test(tc, test_parse_size);
    suite_add_tcase(s, tc);
    tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_config_llama32);
    tcase_add_test(tc, test_config_rope_parameters);
    tcase_add_test(tc, test_config_gpt2);
    tcase_add_test(tc, test_config_qwen2);
    tcase_add_test(tc, test_config_write);
    tcase_add_test(tc, test_config_damaged);
    tcase_add_test(tc, test_json_python);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return check_run(hf_suite(), 0); }
