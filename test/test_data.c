/* test_data.c — data: token-file round trip (uint16 and uint32 files), every kind of bad
 * file, batch order and wrap-around, atomic writes (prepare-data: test_prepare.c). */
#define _GNU_SOURCE
#include <check.h>
#include <ftw.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "testdir.h"
#include "checkrun.h"


static void setup(void) {
    testdir_create("pp_test_data");
}

static void teardown(void) { testdir_remove(); }

/* Write a raw file: header {magic, version, count}, then ntok tokens of w bytes, then
 * `extra` zero bytes; a hand-made file independent of data_write. */
static void write_raw_w(const char *path, int32_t magic, int32_t version, int32_t count,
                        const void *tok, size_t ntok, int w, size_t extra) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    int32_t h[DATA_HEADER_INTS] = {magic, version, count};
    ck_assert_uint_eq(fwrite(h, 4, DATA_HEADER_INTS, f), DATA_HEADER_INTS);
    if (ntok) ck_assert_uint_eq(fwrite(tok, (size_t)w, ntok, f), ntok);
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
}

static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                      const uint16_t *tok, size_t ntok, size_t extra) {
    write_raw_w(path, magic, version, count, tok, ntok, 2, extra);
}

/* A uint32 file (DATA_MAGIC32) of ntok tokens, hand-made. */
static void write_raw32(const char *path, const uint32_t *tok, size_t ntok) {
    write_raw_w(path, DATA_MAGIC32, DATA_VERSION32, (int32_t)ntok, tok, ntok, 4, 0);
}

/* Tokens t[i] = (7 i + 3) mod 50. */
static uint16_t *make_tokens(size_t n) {
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)((7 * i + 3) % 50);
    return t;
}

/* Llama 3's vocabulary: 128256 ids, most over 65535. */
#define V32 128256
/* Tokens t[i] = V32 - 50 + (7 i + 3) mod 50: make_tokens's pattern at the top of Llama
 * 3's vocabulary, where no id fits 16 bits. */
static uint32_t *make_tokens32(size_t n) {
    uint32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint32_t)(V32 - 50 + (7 * i + 3) % 50);
    return t;
}

/* Open must fail with PP_EUSAGE, leave *d empty, and the message contain each of the
 * NULL-terminated strings. */
static void expect_open_error(const char *path, int vocab, ...) {
    DataSet d;
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_open(&d, path, vocab, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_null(d.crc);
    ck_assert_int_eq(d.fd, -1);
    ck_assert_str_eq(d.path, "");
    ck_assert_uint_eq(d.ntok, 0);
    data_close(&d); /* safe on a failed open */
    ck_assert_ptr_nonnull(strstr(err, path));
    va_list ap;
    va_start(ap, vocab);
    for (const char *want; (want = va_arg(ap, const char *));)
        ck_assert_msg(strstr(err, want), "message lacks '%s': %s", want, err);
    va_end(ap);
}

/* Every token of an open file (at least 2), read as one batch of ntok - 1 inputs. */
static uint16_t *read_tokens(DataSet *d) {
    char err[PP_ERR_MAX] = "";
    int T = (int)d->ntok - 1, *in = malloc(T * sizeof *in), *tg = malloc(T * sizeof *tg);
    uint16_t *t = malloc(d->ntok * sizeof *t);
    ck_assert_int_eq(data_check_batch(d, 1, T, err, sizeof err), PP_OK);
    ck_assert_msg(data_batch(d, 0, 1, T, in, tg, err, sizeof err) == PP_OK, "%s", err);
    for (int i = 0; i < T; i++) t[i] = (uint16_t)in[i];
    t[T] = (uint16_t)tg[T - 1];
    free(in);
    free(tg);
    return t;
}

/* Every token of an open uint32 file (at least 2), read as one batch of ntok - 1 inputs. */
static uint32_t *read_tokens32(DataSet *d) {
    char err[PP_ERR_MAX] = "";
    int T = (int)d->ntok - 1, *in = malloc(T * sizeof *in), *tg = malloc(T * sizeof *tg);
    uint32_t *t = malloc(d->ntok * sizeof *t);
    ck_assert_int_eq(data_check_batch(d, 1, T, err, sizeof err), PP_OK);
    ck_assert_msg(data_batch(d, 0, 1, T, in, tg, err, sizeof err) == PP_OK, "%s", err);
    for (int i = 0; i < T; i++) t[i] = (uint32_t)in[i];
    t[T] = (uint32_t)tg[T - 1];
    free(in);
    free(tg);
    return t;
}

/* ---- files ------------------------------------------------------------------- */

START_TEST(test_round_trip) {
    size_t n = 1000;
    uint16_t *t = make_tokens(n);
    char err[PP_ERR_MAX] = "";
    const char *path = tmp("tok.bin");
    ck_assert_int_eq(data_write(path, t, n, err, sizeof err), PP_OK);
    ck_assert_int_eq(file_size(path), DATA_HEADER_BYTES + 2 * (long long)n);
    FILE *f = fopen(path, "rb");
    int32_t h[3];
    ck_assert_uint_eq(fread(h, 4, 3, f), 3);
    fclose(f);
    ck_assert(h[0] == 20240520 && h[1] == 1 && h[2] == 1000);

    DataSet d;
    ck_assert_int_eq(data_open(&d, path, 50, err, sizeof err), PP_OK);
    ck_assert_uint_eq(d.ntok, n);
    ck_assert_str_eq(d.path, path);
    uint16_t *got = read_tokens(&d);
    ck_assert_mem_eq(got, t, n * sizeof *t);
    free(got);
    data_close(&d);
    ck_assert_ptr_null(d.crc);
    ck_assert_int_eq(d.fd, -1);
    data_close(&d); /* twice is safe */
    /* nothing but the file is left behind: the temporary was renamed */
    ck_assert(!file_exists(tmp("tok.bin.tmp")));
    char tmpname[600];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", path, (long)getpid());
    ck_assert(!file_exists(tmpname));
    free(t);
}
END_TEST

/* Overwriting replaces the file; a DataSet opened before still reads the old tokens
 * (rename swaps the inode, the open descriptor reads the old one). */
START_TEST(test_write_replaces_atomically) {
    uint16_t a[5] = {1, 2, 3, 4, 5}, b[3] = {9, 8, 7};
    char err[PP_ERR_MAX];
    const char *path = tmp("x.bin");
    ck_assert_int_eq(data_write(path, a, 5, err, sizeof err), PP_OK);
    DataSet old, cur;
    ck_assert_int_eq(data_open(&old, path, 256, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_write(path, b, 3, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_open(&cur, path, 256, err, sizeof err), PP_OK);
    ck_assert_uint_eq(old.ntok, 5);
    uint16_t *got = read_tokens(&old);
    ck_assert_mem_eq(got, a, sizeof a);
    free(got);
    ck_assert_uint_eq(cur.ntok, 3);
    got = read_tokens(&cur);
    ck_assert_mem_eq(got, b, sizeof b);
    free(got);
    data_close(&old);
    data_close(&cur);
}
END_TEST

START_TEST(test_write_error_names_file) {
    uint16_t a[2] = {1, 2};
    char err[PP_ERR_MAX] = "";
    const char *path = tmp("no/such/dir/x.bin");
    ck_assert_int_eq(data_write(path, a, 2, err, sizeof err), PP_ERUNTIME);
    ck_assert_ptr_nonnull(strstr(err, "no/such/dir/x.bin"));
}
END_TEST

START_TEST(test_empty_file_is_valid) {
    char err[PP_ERR_MAX];
    const char *path = tmp("empty.bin");
    ck_assert_int_eq(data_write(path, NULL, 0, err, sizeof err), PP_OK);
    DataSet d;
    ck_assert_int_eq(data_open(&d, path, 256, err, sizeof err), PP_OK);
    ck_assert_uint_eq(d.ntok, 0);
    ck_assert_int_eq(data_num_batches(&d, 1, 1), 0);
    data_close(&d);
}
END_TEST

/* The messages name what the header holds and both pairs pptrain reads. */
#define BOTH_PAIRS "magic 20240520 version 1 (uint16 tokens)", "magic 20240801 version 7 (uint32"

START_TEST(test_bad_magic) {
    uint16_t t[4] = {1, 2, 3, 4};
    write_raw(tmp("m.bin"), 20240326, 3, 4, t, 4, 0); /* a GPT-2 weights header */
    expect_open_error(tmp("m.bin"), 256, "magic number is 20240326 and its version 3,", BOTH_PAIRS,
                      "prepare-data", NULL);
}
END_TEST

/* Each magic with the other's version, or with another: the pair decides, not the magic. */
START_TEST(test_bad_version) {
    static const int32_t pairs[][2] = {{DATA_MAGIC, 2},
                                       {DATA_MAGIC, DATA_VERSION32},
                                       {DATA_MAGIC32, DATA_VERSION},
                                       {DATA_MAGIC32, 8}};
    uint16_t t[4] = {1, 2, 3, 4};
    char found[96];
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        write_raw(tmp("v.bin"), pairs[k][0], pairs[k][1], 2, t, 4, 0); /* either width's size */
        snprintf(found, sizeof found, "magic number is %d and its version %d,", pairs[k][0],
                 pairs[k][1]);
        expect_open_error(tmp("v.bin"), 256, found, BOTH_PAIRS, NULL);
    }
}
END_TEST

/* Header says 100 tokens: 1024 + 200 = 1224 bytes expected. */
START_TEST(test_truncated) {
    uint16_t *t = make_tokens(100);
    write_raw(tmp("t.bin"), DATA_MAGIC, 1, 100, t, 99, 0);
    expect_open_error(tmp("t.bin"), 256, "truncated", "1222 bytes", "= 1224 bytes", NULL);
    free(t);
}
END_TEST

START_TEST(test_trailing_bytes) {
    uint16_t *t = make_tokens(100);
    write_raw(tmp("t.bin"), DATA_MAGIC, 1, 100, t, 100, 3);
    expect_open_error(tmp("t.bin"), 256, "3 trailing bytes", "1227 bytes", "= 1224 bytes",
                      NULL);
    free(t);
}
END_TEST

START_TEST(test_shorter_than_header) {
    FILE *f = fopen(tmp("s.bin"), "wb");
    for (int i = 0; i < 100; i++) fputc(1, f);
    fclose(f);
    expect_open_error(tmp("s.bin"), 256, "100 bytes", "1024-byte header", NULL);
}
END_TEST

START_TEST(test_negative_count) {
    write_raw(tmp("n.bin"), DATA_MAGIC, 1, -5, NULL, 0, 0);
    expect_open_error(tmp("n.bin"), 256, "negative token count", NULL);
}
END_TEST

START_TEST(test_missing_file) {
    expect_open_error(tmp("absent.bin"), 256, "cannot open", "No such file", "prepare-data",
                      NULL);
}
END_TEST

/* Token 37 = 60 with vocab 50: byte offset 1024 + 2*37 = 1098. */
/* A FIFO as data.train or data.val (a plain open would wait for a writer forever: the
 * test's timeout), a directory or a device: refused at once, saying what it is. */
START_TEST(test_not_a_regular_file) {
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo.bin", g_dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    expect_open_error(fifo, 256, "is a FIFO, not a regular file", "data.train / data.val",
                      NULL);
    expect_open_error(g_dir, 256, "is a directory, not a regular file", NULL);
    expect_open_error("/dev/zero", 256, "is a character device, not a regular file", NULL);
}
END_TEST

START_TEST(test_token_out_of_range) {
    uint16_t *t = make_tokens(100);
    t[37] = 60;
    t[80] = 51;
    write_raw(tmp("r.bin"), DATA_MAGIC, 1, 100, t, 100, 0);
    expect_open_error(tmp("r.bin"), 50, "token 37 ", "byte offset 1098", "is 60",
                      "model.vocab_size = 50", NULL);
    /* vocab_size 0 disables the check; 61 admits every token */
    DataSet d;
    char err[PP_ERR_MAX];
    ck_assert_int_eq(data_open(&d, tmp("r.bin"), 0, err, sizeof err), PP_OK);
    data_close(&d);
    ck_assert_int_eq(data_open(&d, tmp("r.bin"), 61, err, sizeof err), PP_OK);
    data_close(&d);
    free(t);
}
END_TEST

/* A file big enough for the parallel scan still reports the first bad token. */
START_TEST(test_token_out_of_range_parallel) {
    size_t n = 200000;
    uint16_t *t = make_tokens(n);
    t[199999] = 50;
    t[150000] = 50;
    t[150001] = 65535;
    write_raw(tmp("p.bin"), DATA_MAGIC, 1, (int32_t)n, t, n, 0);
    omp_set_num_threads(2);
    expect_open_error(tmp("p.bin"), 50, "token 150000 ", "byte offset 301024", "is 50,",
                      NULL);
    free(t);
}
END_TEST

/* The whole of a file: its bytes, *n of them (fails the test if it cannot be read). */
static unsigned char *file_bytes(const char *path, size_t *n) {
    long long size = file_size(path);
    ck_assert_int_ge(size, 0);
    unsigned char *b = malloc((size_t)size + 1);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(b, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return b;
}

/* llm.c's Llama 3 format (dev/data/data_common.py, "llama-3"): data_write32 writes the
 * hand-made file's bytes, header {20240801, 7, n} then n uint32 ids, and it reads back
 * whole, ids over 65535 included. */
START_TEST(test_round_trip32) {
    size_t n = 1000, na, nb;
    uint32_t *t = make_tokens32(n);
    t[999] = V32 - 1;
    char err[PP_ERR_MAX] = "";
    const char *path = tmp("tok32.bin");
    ck_assert_msg(data_write32(path, t, n, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_int_eq(file_size(path), DATA_HEADER_BYTES + 4 * (long long)n);
    write_raw32(tmp("raw32.bin"), t, n);
    unsigned char *a = file_bytes(path, &na), *b = file_bytes(tmp("raw32.bin"), &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(a, b, na);
    int32_t h[3];
    memcpy(h, a, sizeof h);
    ck_assert(h[0] == 20240801 && h[1] == 7 && h[2] == 1000);
    free(a);
    free(b);

    DataSet d;
    ck_assert_msg(data_open(&d, path, V32, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_uint_eq(d.ntok, n);
    ck_assert_int_eq(d.width, 4);
    uint32_t *got = read_tokens32(&d);
    ck_assert_mem_eq(got, t, n * sizeof *t);
    free(got);
    data_close(&d);
    /* the uint16 file of the same count is width 2 */
    uint16_t *t16 = make_tokens(n);
    ck_assert_int_eq(data_write(path, t16, n, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_open(&d, path, 50, err, sizeof err), PP_OK);
    ck_assert_int_eq(d.width, 2);
    data_close(&d);
    free(t16);
    free(t);
}
END_TEST

/* Sizes for a header of 100 tokens: a uint32 file needs 1024 + 4*100 = 1424 bytes, a
 * uint16 one 1224. A size that fits neither says what the header's width needs; one of
 * the other width's size says that too. */
START_TEST(test_size32) {
    uint32_t *t = make_tokens32(100);
    char err[PP_ERR_MAX] = "";
    DataSet d;
    write_raw_w(tmp("s.bin"), DATA_MAGIC32, DATA_VERSION32, 100, t, 99, 4, 0);
    expect_open_error(tmp("s.bin"), V32, "is truncated: it is 1420 bytes",
                      "says 100 uint32 tokens, which need 1024 + 4*100 = 1424 bytes", NULL);
    write_raw_w(tmp("s.bin"), DATA_MAGIC32, DATA_VERSION32, 100, t, 100, 4, 2);
    expect_open_error(tmp("s.bin"), V32, "2 trailing bytes: it is 1426 bytes", "= 1424 bytes",
                      NULL);
    /* 1324 bytes: neither 1224 nor 1424 */
    write_raw_w(tmp("s.bin"), DATA_MAGIC32, DATA_VERSION32, 100, t, 75, 4, 0);
    expect_open_error(tmp("s.bin"), V32, "is truncated: it is 1324 bytes", "= 1424 bytes", NULL);
    ck_assert_int_eq(data_open(&d, tmp("s.bin"), V32, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(!strstr(err, "the size of"), "%s", err);
    write_raw_w(tmp("s.bin"), DATA_MAGIC, DATA_VERSION, 100, t, 75, 4, 0);
    expect_open_error(tmp("s.bin"), V32, "100 trailing bytes: it is 1324 bytes",
                      "says 100 uint16 tokens, which need 1024 + 2*100 = 1224 bytes", NULL);
    /* the other width's size */
    write_raw_w(tmp("s.bin"), DATA_MAGIC, DATA_VERSION, 100, t, 100, 4, 0);
    expect_open_error(tmp("s.bin"), V32, "200 trailing bytes", "the size of 100 uint32 tokens",
                      NULL);
    write_raw_w(tmp("s.bin"), DATA_MAGIC32, DATA_VERSION32, 100, t, 50, 4, 0);
    expect_open_error(tmp("s.bin"), V32, "truncated", "the size of 100 uint16 tokens", NULL);
    free(t);
}
END_TEST

/* A uint32 id >= vocab_size: named with its index and byte offset 1024 + 4i, as in a
 * uint16 file; with vocab_size 0, an id an int cannot hold (>= 2^31). */
START_TEST(test_token_out_of_range32) {
    uint32_t *t = make_tokens32(100);
    t[37] = V32;
    t[80] = 0xffffffffu;
    write_raw32(tmp("r.bin"), t, 100);
    expect_open_error(tmp("r.bin"), V32,
                      "token 37 (byte offset 1172) is 128256, not below model.vocab_size = 128256",
                      "128256 for Llama 3", NULL);
    expect_open_error(tmp("r.bin"), 0, "token 80 (byte offset 1344) is 4294967295, not below 2^31",
                      NULL);
    t[80] = 0x80000000u;
    write_raw32(tmp("r.bin"), t, 100);
    expect_open_error(tmp("r.bin"), 0, "token 80 (byte offset 1344) is 2147483648,", NULL);
    /* INT32_MAX is an int: read as one */
    t[80] = INT32_MAX;
    write_raw32(tmp("r.bin"), t, 100);
    DataSet d;
    char err[PP_ERR_MAX];
    ck_assert_msg(data_open(&d, tmp("r.bin"), 0, err, sizeof err) == PP_OK, "%s", err);
    uint32_t *got = read_tokens32(&d);
    ck_assert_mem_eq(got, t, 100 * sizeof *t);
    free(got);
    data_close(&d);
    expect_open_error(tmp("r.bin"), INT32_MAX, "token 80 ", "is 2147483647,", NULL);
    /* a file big enough for the parallel scan: the first bad id still */
    size_t n = 200000;
    free(t);
    t = make_tokens32(n);
    t[199999] = V32;
    t[150000] = V32 + 5;
    t[150001] = 0xffffffffu;
    write_raw32(tmp("p.bin"), t, n);
    omp_set_num_threads(2);
    expect_open_error(tmp("p.bin"), V32, "token 150000 (byte offset 601024) is 128261,", NULL);
    free(t);
}
END_TEST

/* data_write32 refuses an id that no reader's int holds, writing nothing; data_token_width
 * picks uint16 files for up to 65536 ids. */
START_TEST(test_write32_limits) {
    uint32_t t[5] = {1, 2, 3, 0x80000000u, 5};
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_write32(tmp("w.bin"), t, 5, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, tmp("w.bin")) && strstr(err, "token 3 is 2147483648"), "%s", err);
    ck_assert(!file_exists(tmp("w.bin")));
    t[3] = INT32_MAX;
    ck_assert_int_eq(data_write32(tmp("w.bin"), t, 5, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_token_width(256), 2);
    ck_assert_int_eq(data_token_width(65536), 2);
    ck_assert_int_eq(data_token_width(65537), 4);
    ck_assert_int_eq(data_token_width(V32), 4);
}
END_TEST

/* ---- batches ------------------------------------------------------------------- */

/* 1000 tokens, B = 2, T = 5: nb = floor(999 / 10) = 99 batches at 0, 10, ..., 980. */
START_TEST(test_batches_and_wraparound) {
    size_t n = 1000;
    uint16_t *t = make_tokens(n);
    char err[PP_ERR_MAX];
    ck_assert_int_eq(data_write(tmp("b.bin"), t, n, err, sizeof err), PP_OK);
    DataSet d;
    ck_assert_int_eq(data_open(&d, tmp("b.bin"), 50, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_num_batches(&d, 2, 5), 99);
    ck_assert_int_eq(data_check_batch(&d, 2, 5, err, sizeof err), PP_OK);
    int in[10], tg[10], in2[10], tg2[10];
    long cases[4] = {0, 1, 50, 98};
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(data_batch(&d, cases[k], 2, 5, in, tg, err, sizeof err), PP_OK);
        for (int i = 0; i < 10; i++) {
            ck_assert_int_eq(in[i], t[cases[k] * 10 + i]);
            ck_assert_int_eq(tg[i], t[cases[k] * 10 + i + 1]);
        }
    }
    /* the last batch's last target is token 980 + 10 = 990 */
    ck_assert_int_eq(data_batch(&d, 98, 2, 5, in, tg, err, sizeof err), PP_OK);
    ck_assert_int_eq(tg[9], t[990]);
    /* batch 99 wraps to batch 0, batch 99 * 3 + 7 is batch 7 */
    ck_assert_int_eq(data_batch(&d, 0, 2, 5, in, tg, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_batch(&d, 99, 2, 5, in2, tg2, err, sizeof err), PP_OK);
    ck_assert_mem_eq(in, in2, sizeof in);
    ck_assert_mem_eq(tg, tg2, sizeof tg);
    ck_assert_int_eq(data_batch(&d, 7, 2, 5, in, tg, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_batch(&d, 99 * 3 + 7, 2, 5, in2, tg2, err, sizeof err), PP_OK);
    ck_assert_mem_eq(in, in2, sizeof in);
    ck_assert_mem_eq(tg, tg2, sizeof tg);
    data_close(&d);
    free(t);
}
END_TEST

/* The batch count at its edges: 21 tokens hold exactly 2 batches of 10 (the last
 * target is the last token), 20 tokens only 1, 11 tokens 1, 10 tokens none. */
START_TEST(test_batch_count_edges) {
    uint16_t *t = make_tokens(21);
    char err[PP_ERR_MAX] = "";
    size_t sizes[4] = {21, 20, 11, 10};
    long want[4] = {2, 1, 1, 0};
    for (int k = 0; k < 4; k++) {
        DataSet d;
        ck_assert_int_eq(data_write(tmp("e.bin"), t, sizes[k], err, sizeof err), PP_OK);
        ck_assert_int_eq(data_open(&d, tmp("e.bin"), 50, err, sizeof err), PP_OK);
        ck_assert_int_eq(data_num_batches(&d, 2, 5), want[k]);
        if (k == 0) {
            int in[10], tg[10];
            ck_assert_int_eq(data_check_batch(&d, 2, 5, err, sizeof err), PP_OK);
            ck_assert_int_eq(data_batch(&d, 1, 2, 5, in, tg, err, sizeof err), PP_OK);
            ck_assert_int_eq(tg[9], t[20]);
        }
        data_close(&d);
    }
    free(t);
}
END_TEST

START_TEST(test_file_shorter_than_batch) {
    uint16_t *t = make_tokens(10);
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_write(tmp("small.bin"), t, 10, err, sizeof err), PP_OK);
    DataSet d;
    ck_assert_int_eq(data_open(&d, tmp("small.bin"), 50, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_check_batch(&d, 2, 5, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, tmp("small.bin")));
    ck_assert_ptr_nonnull(strstr(err, "has 10 tokens"));
    ck_assert_ptr_nonnull(strstr(err, "= 11"));
    ck_assert_int_eq(data_check_batch(&d, 3, 3, err, sizeof err), PP_OK); /* 9 + 1 */
    data_close(&d);
    free(t);
}
END_TEST

/* llm.c's order in a uint32 file: 1000 tokens, B = 2, T = 5, 99 batches; batch n is
 * tokens (n mod 99)*10 + [0, 10), targets one further on. */
START_TEST(test_batches32) {
    size_t n = 1000;
    uint32_t *t = make_tokens32(n);
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_write32(tmp("b.bin"), t, n, err, sizeof err), PP_OK);
    DataSet d;
    ck_assert_int_eq(data_open(&d, tmp("b.bin"), V32, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_num_batches(&d, 2, 5), 99);
    ck_assert_int_eq(data_check_batch(&d, 2, 5, err, sizeof err), PP_OK);
    int in[10], tg[10];
    for (long b = 0; b < 2 * 99 + 3; b++) {
        ck_assert_int_eq(data_batch(&d, b, 2, 5, in, tg, err, sizeof err), PP_OK);
        for (int i = 0; i < 10; i++) {
            ck_assert_int_eq(in[i], (int)t[(b % 99) * 10 + i]);
            ck_assert_int_eq(tg[i], (int)t[(b % 99) * 10 + i + 1]);
        }
    }
    data_close(&d);
    free(t);
}
END_TEST

/* Runs without the fixture (exit skips the teardown): the file is removed before the
 * call that dies, the open descriptor keeps it. */
START_TEST(test_batch_without_check_dies) {
    setup();
    uint16_t t[4] = {1, 2, 3, 4};
    char err[PP_ERR_MAX];
    DataSet d;
    ck_assert_int_eq(data_write(tmp("tiny.bin"), t, 4, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_open(&d, tmp("tiny.bin"), 50, err, sizeof err), PP_OK);
    teardown();
    ck_assert(!file_exists(g_dir));
    ck_assert_ptr_nonnull(freopen("/dev/null", "w", stderr)); /* expected message */
    int in[8], tg[8];
    /* needs 9 tokens: a bug, dies with PP_ERUNTIME */
    data_batch(&d, 0, 2, 4, in, tg, err, sizeof err);
}
END_TEST

/* ---- a file changed under a run ([Note: checked batch reads] in data.c) ---------- */

/* 20000 tokens (1024 + 40000 bytes: blocks 0, 1 full, block 2 of 8576 bytes), opened
 * with vocab 50 and room for B = 4, T = 256 (1024 tokens a batch, 19 batches). */
#define CH_N 20000
#define CH_B 4
#define CH_T 256
static uint16_t *open_changing(DataSet *d, const char *path) {
    char err[PP_ERR_MAX] = "";
    uint16_t *t = make_tokens(CH_N);
    ck_assert_int_eq(data_write(path, t, CH_N, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_open(d, path, 50, err, sizeof err), PP_OK);
    ck_assert_uint_eq(d->nblocks, 3);
    ck_assert_int_eq(data_check_batch(d, CH_B, CH_T, err, sizeof err), PP_OK);
    return t;
}

/* Batch n must fail naming the file, "changed under the run" and each NULL-terminated
 * string, with inputs and targets token 0 throughout. */
static void expect_batch_error(DataSet *d, long n, ...) {
    static int in[CH_B * CH_T], tg[CH_B * CH_T];
    char err[PP_ERR_MAX] = "";
    for (int i = 0; i < CH_B * CH_T; i++) in[i] = tg[i] = 7;
    ck_assert_int_eq(data_batch(d, n, CH_B, CH_T, in, tg, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, d->path) && strstr(err, "changed under the run") &&
                      strstr(err, "restore the file"),
                  "%s", err);
    va_list ap;
    va_start(ap, n);
    for (const char *want; (want = va_arg(ap, const char *));)
        ck_assert_msg(strstr(err, want), "message lacks '%s': %s", want, err);
    va_end(ap);
    for (int i = 0; i < CH_B * CH_T; i++) ck_assert(in[i] == 0 && tg[i] == 0);
}

/* Batch n reads tokens [n*1024, n*1024 + 1024] of t. */
static void expect_batch(DataSet *d, long n, const uint16_t *t) {
    static int in[CH_B * CH_T], tg[CH_B * CH_T];
    char err[PP_ERR_MAX] = "";
    ck_assert_msg(data_batch(d, n, CH_B, CH_T, in, tg, err, sizeof err) == PP_OK, "%s", err);
    size_t t0 = (size_t)(n % 19) * CH_B * CH_T;
    for (int i = 0; i < CH_B * CH_T; i++) ck_assert(in[i] == t[t0 + i] && tg[i] == t[t0 + i + 1]);
}

/* Overwrite tokens [at, at + n) of the file in place. */
static void poke(const char *path, size_t at, const uint16_t *tok, size_t n) {
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, DATA_HEADER_BYTES + 2 * (long)at, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(tok, 2, n, f), n);
    fclose(f);
}

/* Every batch, across the block boundaries too, and wrapped. */
START_TEST(test_batches_across_blocks) {
    DataSet d;
    uint16_t *t = open_changing(&d, tmp("c.bin"));
    for (long n = 0; n < 40; n++) expect_batch(&d, n, t);
    data_close(&d);
    free(t);
}
END_TEST

/* Truncated: every batch fails, naming the sizes and the batch's position (batch 3 is
 * tokens 3072..4096, bytes 1024 + 6144 = 7168 .. 1024 + 8194 - 1 = 9217). */
START_TEST(test_batch_truncated) {
    DataSet d;
    uint16_t *t = open_changing(&d, tmp("c.bin"));
    expect_batch(&d, 3, t);
    ck_assert_int_eq(truncate(tmp("c.bin"), 30000), 0);
    expect_batch_error(&d, 3, "it was 41024 bytes when opened and is 30000 bytes now",
                       "batch 3 (tokens 3072..4096, bytes 7168..9217)", NULL);
    /* also where the bytes are still there */
    expect_batch_error(&d, 0, "is 30000 bytes now", NULL);
    ck_assert_int_eq(truncate(tmp("c.bin"), 0), 0);
    expect_batch_error(&d, 18, "is 0 bytes now", NULL);
    data_close(&d);
    free(t);
}
END_TEST

START_TEST(test_batch_grown) {
    DataSet d;
    uint16_t *t = open_changing(&d, tmp("c.bin"));
    FILE *f = fopen(tmp("c.bin"), "ab");
    fputs("more", f);
    fclose(f);
    expect_batch_error(&d, 5, "it was 41024 bytes when opened and is 41028 bytes now", NULL);
    data_close(&d);
    free(t);
}
END_TEST

/* A token >= vocab_size written in place: the batch that reads it fails naming the
 * token and its byte offset; the others still read (their blocks did not change). */
START_TEST(test_batch_bad_token_in_place) {
    DataSet d;
    uint16_t *t = open_changing(&d, tmp("c.bin"));
    uint16_t big[2] = {65535, 50};
    poke(tmp("c.bin"), 19000, big, 2);
    expect_batch_error(&d, 18,
                       "token 19000 (byte offset 39024) is 65535, not below model.vocab_size = 50",
                       "reading batch 18", NULL);
    expect_batch(&d, 0, t); /* block 0: unchanged */
    /* the last target of batch 17 (token 18432) is the first input of batch 18 */
    poke(tmp("c.bin"), 18432, big + 1, 1);
    expect_batch_error(&d, 17, "token 18432 (byte offset 37888) is 50", NULL);
    data_close(&d);
    free(t);
}
END_TEST

/* Other valid tokens written in place: caught by the block's CRC, at every batch that
 * reads the block (batches 7 .. 15 read bytes of block 1, 16384 .. 32767); the header is
 * in block 0. */
START_TEST(test_batch_changed_in_place) {
    DataSet d;
    uint16_t *t = open_changing(&d, tmp("c.bin"));
    uint16_t other = (uint16_t)((t[10000] + 1) % 50);
    poke(tmp("c.bin"), 10000, &other, 1);
    for (long n = 0; n < 19; n++) {
        if (n >= 7 && n <= 15)
            expect_batch_error(&d, n, "bytes 16384..32767 differ from when it was opened", NULL);
        else expect_batch(&d, n, t);
    }
    FILE *f = fopen(tmp("c.bin"), "r+b");
    int32_t count = 19999;
    ck_assert_int_eq(fseek(f, 8, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(&count, 4, 1, f), 1);
    fclose(f);
    expect_batch_error(&d, 0, "bytes 0..16383 differ", NULL);
    data_close(&d);
    free(t);
}
END_TEST

/* Replaced by a rename (data_write): harmless, the old file is read to the end. */
START_TEST(test_batch_after_rename) {
    DataSet d;
    char err[PP_ERR_MAX];
    uint16_t *t = open_changing(&d, tmp("c.bin")), junk[100];
    for (int i = 0; i < 100; i++) junk[i] = 65535;
    ck_assert_int_eq(data_write(tmp("c.bin"), junk, 100, err, sizeof err), PP_OK);
    for (long n = 0; n < 19; n++) expect_batch(&d, n, t);
    data_close(&d);
    free(t);
}
END_TEST

/* The uint32 twin of open_changing: CH_N ids of make_tokens32 (1024 + 80000 = 81024
 * bytes: blocks 0 .. 3 full, block 4 of 15488 bytes), opened with vocab V32. */
static uint32_t *open_changing32(DataSet *d, const char *path) {
    char err[PP_ERR_MAX] = "";
    uint32_t *t = make_tokens32(CH_N);
    ck_assert_int_eq(data_write32(path, t, CH_N, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_open(d, path, V32, err, sizeof err), PP_OK);
    ck_assert_uint_eq(d->nblocks, 5);
    ck_assert_int_eq(data_check_batch(d, CH_B, CH_T, err, sizeof err), PP_OK);
    return t;
}

static void expect_batch32(DataSet *d, long n, const uint32_t *t) {
    static int in[CH_B * CH_T], tg[CH_B * CH_T];
    char err[PP_ERR_MAX] = "";
    ck_assert_msg(data_batch(d, n, CH_B, CH_T, in, tg, err, sizeof err) == PP_OK, "%s", err);
    size_t t0 = (size_t)(n % 19) * CH_B * CH_T;
    for (int i = 0; i < CH_B * CH_T; i++)
        ck_assert(in[i] == (int)t[t0 + i] && tg[i] == (int)t[t0 + i + 1]);
}

static void poke32(const char *path, size_t at, uint32_t tok) {
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, DATA_HEADER_BYTES + 4 * (long)at, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(&tok, 4, 1, f), 1);
    fclose(f);
}

/* Every batch of a uint32 file across its blocks, then truncated: the positions are
 * uint32 ones (batch 3 is tokens 3072..4096, bytes 1024 + 4*3072 = 13312 .. 17411). */
START_TEST(test_batch_truncated32) {
    DataSet d;
    uint32_t *t = open_changing32(&d, tmp("c.bin"));
    for (long n = 0; n < 40; n++) expect_batch32(&d, n, t);
    ck_assert_int_eq(truncate(tmp("c.bin"), 30000), 0);
    expect_batch_error(&d, 3, "it was 81024 bytes when opened and is 30000 bytes now",
                       "batch 3 (tokens 3072..4096, bytes 13312..17411)", NULL);
    data_close(&d);
    free(t);
}
END_TEST

/* Ids >= vocab_size written in place into a uint32 file: named with index, byte offset
 * and value; batches of unchanged blocks still read. */
START_TEST(test_batch_bad_token32) {
    DataSet d;
    uint32_t *t = open_changing32(&d, tmp("c.bin"));
    poke32(tmp("c.bin"), 19000, V32);
    expect_batch_error(&d, 18,
                       "token 19000 (byte offset 77024) is 128256, not below model.vocab_size = "
                       "128256",
                       "reading batch 18", NULL);
    expect_batch32(&d, 0, t);
    /* the last target of batch 17 (token 18432) */
    poke32(tmp("c.bin"), 18432, 0xffffffffu);
    expect_batch_error(&d, 17, "token 18432 (byte offset 74752) is 4294967295", NULL);
    data_close(&d);
    free(t);
}
END_TEST

/* Another valid id written in place, differing in the high half of the uint32 only: caught
 * by the block's CRC at every batch that reads block 2 (bytes 32768 .. 49151, tokens
 * 7936 .. 12031: batches 7 .. 11). */
START_TEST(test_batch_changed32) {
    DataSet d;
    uint32_t *t = open_changing32(&d, tmp("c.bin"));
    poke32(tmp("c.bin"), 10000, t[10000] - 65536);
    for (long n = 0; n < 19; n++) {
        if (n >= 7 && n <= 11)
            expect_batch_error(&d, n, "bytes 32768..49151 differ from when it was opened", NULL);
        else expect_batch32(&d, n, t);
    }
    data_close(&d);
    free(t);
}
END_TEST

/* ---- the val file's name (prepare-data's: test_prepare.c) ---------------------- */

START_TEST(test_val_path) {
    char v[64];
    ck_assert_int_eq(data_val_path("data/tiny/train.bin", v, sizeof v), PP_OK);
    ck_assert_str_eq(v, "data/tiny/val.bin");
    ck_assert_int_eq(data_val_path("fw_train_000.bin", v, sizeof v), PP_OK);
    ck_assert_str_eq(v, "fw_val_000.bin");
    ck_assert_int_eq(data_val_path("train/train_train.bin", v, sizeof v), PP_OK);
    ck_assert_str_eq(v, "train/train_val.bin"); /* last one, file name only */
    ck_assert_int_eq(data_val_path("train/corpus.bin", v, sizeof v), PP_OK);
    ck_assert_str_eq(v, "train/corpus_val.bin");
    ck_assert_int_eq(data_val_path("corpus", v, sizeof v), PP_OK);
    ck_assert_str_eq(v, "corpus_val.bin");
    ck_assert_int_eq(data_val_path("corpus.bin", v, 8), PP_EUSAGE);
}
END_TEST

static Suite *data_suite(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("files");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_write_replaces_atomically);
    tcase_add_test(tc, test_write_error_names_file);
    tcase_add_test(tc, test_empty_file_is_valid);
    tcase_add_test(tc, test_bad_magic);
    tcase_add_test(tc, test_bad_version);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_trailing_bytes);
    tcase_add_test(tc, test_shorter_than_header);
    tcase_add_test(tc, test_negative_count);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_not_a_regular_file);
    tcase_add_test(tc, test_token_out_of_range);
    tcase_add_test(tc, test_token_out_of_range_parallel);
    tcase_add_test(tc, test_round_trip32);
    tcase_add_test(tc, test_size32);
    tcase_add_test(tc, test_token_out_of_range32);
    tcase_add_test(tc, test_write32_limits);
    suite_add_tcase(s, tc);
    tc = tcase_create("batches");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_batches_and_wraparound);
    tcase_add_test(tc, test_batch_count_edges);
    tcase_add_test(tc, test_file_shorter_than_batch);
    tcase_add_test(tc, test_batches32);
    suite_add_tcase(s, tc);
    tc = tcase_create("changed");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_batches_across_blocks);
    tcase_add_test(tc, test_batch_truncated);
    tcase_add_test(tc, test_batch_grown);
    tcase_add_test(tc, test_batch_bad_token_in_place);
    tcase_add_test(tc, test_batch_changed_in_place);
    tcase_add_test(tc, test_batch_after_rename);
    tcase_add_test(tc, test_batch_truncated32);
    tcase_add_test(tc, test_batch_bad_token32);
    tcase_add_test(tc, test_batch_changed32);
    suite_add_tcase(s, tc);
    tc = tcase_create("misuse"); /* no fixture: the test exits */
    tcase_add_exit_test(tc, test_batch_without_check_dies, PP_ERUNTIME);
    suite_add_tcase(s, tc);
    tc = tcase_create("names");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_val_path);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return check_run(data_suite(), 0);
}
