/* test_data_stream.c — data streams of shards: batch n against the shard and offset that
 * llm.c's order gives (boundaries, short shards skipped, wrap-around), glob and list order,
 * every error at the start naming its file or pattern, lazy validation, shards closed and
 * opened again, and the checkpoint's record of the stream. */
#define _GNU_SOURCE
#include <check.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkrun.h"
#include "data_stream.h"
#include "testdir.h"

#define V 256 /* the vocabulary of every stream here */

static void setup(void) { testdir_create("pp_test_data_stream"); }
static void teardown(void) { testdir_remove(); }

/* The tokens of shard `seed`: t[i] = (seed * 61 + 7 i) mod 251, distinct across shards at
 * the same index, below V. Caller frees. */
static uint16_t *shard_tokens(int seed, size_t n) {
    uint16_t *t = malloc((n ? n : 1) * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)((seed * 61 + 7 * i) % 251);
    return t;
}

/* Write shard `seed` of n tokens as tmp(name). */
static void write_shard(const char *name, int seed, size_t n) {
    char err[PP_ERR_MAX] = "";
    uint16_t *t = shard_tokens(seed, n);
    ck_assert_msg(data_write(tmp(name), t, n, err, sizeof err) == PP_OK, "%s", err);
    free(t);
}

/* A pattern list (data_stream_open's form) of the NULL-terminated names, each in g_dir. */
static const char *list_of(const char *first, ...) {
    static char buf[4096];
    size_t len = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *name = first; name; name = va_arg(ap, const char *)) {
        const char *p = tmp(name);
        ck_assert_uint_lt(len + strlen(p) + 2, sizeof buf);
        memcpy(buf + len, p, strlen(p) + 1);
        len += strlen(p) + 1;
    }
    va_end(ap);
    buf[len] = '\0';
    return buf;
}

static void open_ok(DataStream *s, const char *patterns, int B, int T) {
    char err[PP_ERR_MAX] = "";
    ck_assert_msg(data_stream_open(s, "data.train", patterns, V, err, sizeof err) == PP_OK, "%s",
                  err);
    ck_assert_msg(data_stream_check_batch(s, B, T, err, sizeof err) == PP_OK, "%s", err);
}

/* Batch n of s must be tokens [tok, tok + B*T] of shard `seed` (its own n tokens). */
static void expect_batch(DataStream *s, long n, int seed, size_t ntok, size_t tok) {
    size_t bt = (size_t)s->B * s->T;
    int *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
    char err[PP_ERR_MAX] = "";
    ck_assert_msg(data_stream_batch(s, n, in, tg, err, sizeof err) == PP_OK, "batch %ld: %s", n,
                  err);
    uint16_t *t = shard_tokens(seed, ntok);
    ck_assert_uint_le(tok + bt + 1, ntok);
    for (size_t i = 0; i < bt; i++) {
        ck_assert_msg(in[i] == t[tok + i], "batch %ld input %zu: %d, want %d", n, i, in[i],
                      t[tok + i]);
        ck_assert_msg(tg[i] == t[tok + i + 1], "batch %ld target %zu", n, i);
    }
    free(t);
    free(in);
    free(tg);
}

static void expect_locate(const DataStream *s, long n, int shard, size_t tok) {
    int i;
    size_t t;
    data_stream_locate(s, n, &i, &t);
    ck_assert_msg(i == shard && t == tok, "batch %ld: shard %d token %zu, want shard %d token %zu",
                  n, i, t, shard, tok);
}

/* ---- the order of batches ---------------------------------------------------- */

/* One file is a stream of one shard: data_batch's order, wrap-around included. */
START_TEST(test_one_file_is_data_batch) {
    write_shard("one.bin", 0, 95); /* (95 - 1) / 12 = 7 batches of 3 x 4 */
    DataStream s;
    DataSet d;
    char err[PP_ERR_MAX] = "";
    open_ok(&s, list_of("one.bin", NULL), 3, 4);
    ck_assert_int_eq(s.nshards, 1);
    ck_assert_int_eq(s.nbatches, 7);
    ck_assert_int_eq(data_open(&d, tmp("one.bin"), V, err, sizeof err), PP_OK);
    ck_assert_int_eq(data_check_batch(&d, 3, 4, err, sizeof err), PP_OK);
    int a[12], b[12], c[12], e[12];
    for (long n = 0; n < 16; n++) {
        ck_assert_int_eq(data_stream_batch(&s, n, a, b, err, sizeof err), PP_OK);
        ck_assert_int_eq(data_batch(&d, n, 3, 4, c, e, err, sizeof err), PP_OK);
        ck_assert_mem_eq(a, c, sizeof a);
        ck_assert_mem_eq(b, e, sizeof b);
    }
    data_close(&d);
    data_stream_close(&s);
}
END_TEST

/* Three shards of 35, 21 and 50 tokens, batches of 10: 3 + 2 + 4 = 9 a pass. Each shard
 * gives floor((ntok - 1) / 10) batches from its start; its last tokens are not read (no
 * batch straddles two shards); after the last shard the stream starts again. */
START_TEST(test_shard_mapping) {
    write_shard("a.bin", 1, 35);
    write_shard("b.bin", 2, 21);
    write_shard("c.bin", 3, 50);
    DataStream s;
    open_ok(&s, list_of("a.bin", "b.bin", "c.bin", NULL), 2, 5);
    ck_assert_int_eq(s.nbatches, 9);
    ck_assert_uint_eq(s.ntok, 106);
    static const struct {
        int shard;
        size_t tok;
    } want[9] = {{0, 0}, {0, 10}, {0, 20}, {1, 0}, {1, 10}, {2, 0}, {2, 10}, {2, 20}, {2, 30}};
    static const int seed[3] = {1, 2, 3};
    static const size_t ntok[3] = {35, 21, 50};
    for (long n = 0; n < 27; n++) { /* three passes */
        expect_locate(&s, n, want[n % 9].shard, want[n % 9].tok);
        expect_batch(&s, n, seed[want[n % 9].shard], ntok[want[n % 9].shard], want[n % 9].tok);
    }
    /* the boundary batches: shard a's last reads its tokens 20..30 (target 30 included),
     * shard b's first starts at b's token 0, and b's last is exactly its 21 tokens */
    expect_batch(&s, 2, 1, 35, 20);
    expect_batch(&s, 3, 2, 21, 0);
    expect_batch(&s, 4, 2, 21, 10);
    data_stream_close(&s);
}
END_TEST

/* Shards shorter than one batch (B*T + 1 tokens) give none and are never read: empty, at
 * the start, in the middle and at the end. */
START_TEST(test_short_shards_skipped) {
    write_shard("0.bin", 1, 0);
    write_shard("1.bin", 2, 10); /* 10 < 11: none */
    write_shard("2.bin", 3, 11); /* exactly one */
    write_shard("3.bin", 4, 5);
    write_shard("4.bin", 5, 31); /* three */
    write_shard("5.bin", 6, 3);
    DataStream s;
    open_ok(&s, list_of("0.bin", "1.bin", "2.bin", "3.bin", "4.bin", "5.bin", NULL), 1, 10);
    ck_assert_int_eq(s.nbatches, 4);
    for (long n = 0; n < 8; n++) {
        int shard = n % 4 == 0 ? 2 : 4;
        size_t tok = n % 4 == 0 ? 0 : (size_t)(n % 4 - 1) * 10;
        expect_locate(&s, n, shard, tok);
        expect_batch(&s, n, shard + 1, shard == 2 ? 11 : 31, tok);
    }
    char line[2048];
    data_stream_describe(&s, line, sizeof line);
    ck_assert_msg(strstr(line, "6 shards") && strstr(line, "4 batches of 1 x 10") &&
                      strstr(line, "4 shard(s) shorter than one batch skipped") &&
                      strstr(line, "0.bin"),
                  "%s", line);
    data_stream_close(&s);
}
END_TEST

/* A glob is expanded in sorted order (glob(3)), whatever the order the files were made
 * in; a list is read in its own order, its globs each sorted. */
START_TEST(test_glob_and_list_order) {
    write_shard("part_2.bin", 2, 30);
    write_shard("part_10.bin", 10, 30);
    write_shard("part_1.bin", 1, 30);
    write_shard("other.bin", 7, 30);
    char pat[512];
    snprintf(pat, sizeof pat, "%s/part_*.bin%c", g_dir, '\0');
    DataStream s;
    open_ok(&s, pat, 1, 29);
    ck_assert_int_eq(s.nshards, 3);
    ck_assert_str_eq(data_stream_name(&s, 0), "part_1.bin");
    ck_assert_str_eq(data_stream_name(&s, 1), "part_10.bin");
    ck_assert_str_eq(data_stream_name(&s, 2), "part_2.bin");
    expect_batch(&s, 1, 10, 30, 0);
    data_stream_close(&s);
    /* other.bin, then the glob, then part_1.bin again */
    char list[2048];
    int len = snprintf(list, sizeof list, "%s/other.bin%c%s/part_?.bin%c%s/part_1.bin%c", g_dir,
                       '\0', g_dir, '\0', g_dir, '\0');
    list[len] = '\0';
    open_ok(&s, list, 1, 29);
    static const char *const want[] = {"other.bin", "part_1.bin", "part_2.bin", "part_1.bin"};
    ck_assert_int_eq(s.nshards, 4);
    for (int i = 0; i < 4; i++) ck_assert_str_eq(data_stream_name(&s, i), want[i]);
    expect_batch(&s, 0, 7, 30, 0);
    expect_batch(&s, 3, 1, 30, 0);
    data_stream_close(&s);
}
END_TEST

/* A file whose name holds glob characters is taken as it is when it exists. */
START_TEST(test_literal_name_with_glob_chars) {
    write_shard("x[1].bin", 4, 30);
    write_shard("x1.bin", 5, 30);
    DataStream s;
    open_ok(&s, list_of("x[1].bin", NULL), 1, 29);
    ck_assert_int_eq(s.nshards, 1);
    ck_assert_str_eq(data_stream_name(&s, 0), "x[1].bin");
    expect_batch(&s, 0, 4, 30, 0);
    data_stream_close(&s);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

/* data_stream_open must fail with rc, leave *s empty, and say every NULL-terminated
 * string. */
static void expect_open_error(const char *patterns, int rc, ...) {
    DataStream s;
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_stream_open(&s, "data.train", patterns, V, err, sizeof err), rc);
    ck_assert_int_eq(s.nshards, 0);
    ck_assert_ptr_null(s.shards);
    data_stream_close(&s);
    va_list ap;
    va_start(ap, rc);
    for (const char *want; (want = va_arg(ap, const char *));)
        ck_assert_msg(strstr(err, want), "message lacks '%s': %s", want, err);
    va_end(ap);
}

START_TEST(test_open_errors) {
    write_shard("a.bin", 1, 30);
    /* a glob matching nothing: exit 2 naming the pattern */
    char pat[512];
    snprintf(pat, sizeof pat, "%s/none_*.bin%c", g_dir, '\0');
    expect_open_error(pat, PP_EUSAGE, "data.train", "no file matches", "none_*.bin", NULL);
    /* a list entry that is missing: named */
    expect_open_error(list_of("a.bin", "missing.bin", NULL), PP_EUSAGE, "missing.bin",
                      "No such file", NULL);
    /* uint16 and uint32 shards mixed: both named */
    uint32_t t32[30];
    for (int i = 0; i < 30; i++) t32[i] = (uint32_t)i;
    char err[PP_ERR_MAX];
    ck_assert_int_eq(data_write32(tmp("w.bin"), t32, 30, err, sizeof err), PP_OK);
    expect_open_error(list_of("a.bin", "w.bin", NULL), PP_EUSAGE, "a.bin", "w.bin", "uint16",
                      "uint32", NULL);
    /* a bad header in a later shard fails at the start too */
    FILE *f = fopen(tmp("bad.bin"), "wb");
    ck_assert_ptr_nonnull(f);
    fputs("not a token file", f);
    fclose(f);
    expect_open_error(list_of("a.bin", "bad.bin", NULL), PP_EUSAGE, "bad.bin", NULL);
    /* an id out of range in the first shard: at the start, as for one file */
    uint16_t big[30];
    for (int i = 0; i < 30; i++) big[i] = (uint16_t)(i == 17 ? 300 : i);
    ck_assert_int_eq(data_write(tmp("big.bin"), big, 30, err, sizeof err), PP_OK);
    expect_open_error(list_of("big.bin", "a.bin", NULL), PP_EUSAGE, "big.bin", "token 17", "300",
                      NULL);
}
END_TEST

/* Too short: one file says what data_check_batch says; several name the largest. */
START_TEST(test_too_short) {
    write_shard("a.bin", 1, 10);
    write_shard("b.bin", 2, 20);
    DataStream s;
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_stream_open(&s, "data.train", list_of("a.bin", NULL), V, err, sizeof err),
                     PP_OK);
    ck_assert_int_eq(data_stream_check_batch(&s, 2, 10, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "a.bin' has 10 tokens, fewer than one batch needs"), "%s", err);
    data_stream_close(&s);
    ck_assert_int_eq(data_stream_open(&s, "data.train", list_of("a.bin", "b.bin", NULL), V, err,
                                      sizeof err),
                     PP_OK);
    ck_assert_int_eq(data_stream_check_batch(&s, 2, 10, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "none of its 2 shards holds one batch") && strstr(err, "b.bin") &&
                      strstr(err, "20 tokens"),
                  "%s", err);
    data_stream_close(&s);
}
END_TEST

/* A later shard is validated when a batch first needs it: an id out of range there is
 * an error of that batch (PP_ERUNTIME, the shard and token named, the batch token 0), and
 * the batches before it are read. */
START_TEST(test_lazy_validation) {
    write_shard("a.bin", 1, 21);
    uint16_t t[21];
    for (int i = 0; i < 21; i++) t[i] = (uint16_t)(i == 15 ? 999 : i);
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(data_write(tmp("b.bin"), t, 21, err, sizeof err), PP_OK);
    DataStream s;
    open_ok(&s, list_of("a.bin", "b.bin", NULL), 1, 10);
    ck_assert_int_eq(s.nbatches, 4);
    expect_batch(&s, 0, 1, 21, 0);
    expect_batch(&s, 1, 1, 21, 10);
    int in[10], tg[10];
    memset(in, 0x55, sizeof in);
    ck_assert_int_eq(data_stream_batch(&s, 2, in, tg, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, "data.train shard 2 of 2, needed by batch 2") &&
                      strstr(err, "b.bin") && strstr(err, "token 15") && strstr(err, "999"),
                  "%s", err);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(in[i], 0);
    expect_batch(&s, 4, 1, 21, 0); /* the next pass reads shard 1 as before */
    char news[1024];
    ck_assert_int_eq(data_stream_news(&s, news, sizeof news), 0); /* nothing opened */
    data_stream_close(&s);
}
END_TEST

/* More shards than slots: the least recently read shard is closed and opened again when
 * needed, reading the same batches; the news says which batch opened which shard. A shard
 * changed while closed (its bytes, or its size) fails the batch that opens it again. */
START_TEST(test_reopen_and_changed_shard) {
    char name[32], err[PP_ERR_MAX] = "";
    const char *pats[8];
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "s%d.bin", i);
        write_shard(name, 10 + i, 25); /* 2 batches of 12 each */
    }
    char list[4096];
    size_t len = 0;
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "s%d.bin", i);
        pats[i] = tmp(name);
        memcpy(list + len, pats[i], strlen(pats[i]) + 1);
        len += strlen(pats[i]) + 1;
    }
    list[len] = '\0';
    DataStream s;
    open_ok(&s, list, 3, 4);
    ck_assert_int_eq(s.nbatches, 12);
    char news[1024];
    for (long n = 0; n < 36; n++) { /* three passes: every shard opened three times */
        expect_batch(&s, n, 10 + (int)(n % 12) / 2, 25, (size_t)(n % 2) * 12);
        int opened = data_stream_news(&s, news, sizeof news);
        ck_assert_int_eq(opened, n % 2 == 0 && n != 0);
        if (n == 2)
            ck_assert_msg(strstr(news, "batch 2 opens shard 2 of 6") && strstr(news, "s1.bin"),
                          "%s", news);
    }
    /* s1.bin rewritten with other valid tokens of the same size, by rename: batch 2 (of the
     * fourth pass: it was closed) sees it */
    write_shard("s1.bin", 99, 25);
    int in[12], tg[12];
    ck_assert_int_eq(data_stream_batch(&s, 36 + 2, in, tg, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, "s1.bin' changed under the run: its tokens differ"), "%s", err);
    write_shard("s1.bin", 11, 25); /* restored: read again */
    expect_batch(&s, 36 + 2, 11, 25, 0);
    /* s2.bin (closed for that open) grown by a token; s3.bin, open, is read through its
     * descriptor as it was ([Note: checked batch reads]) when replaced by a rename */
    write_shard("s2.bin", 12, 26);
    write_shard("s3.bin", 99, 25);
    expect_batch(&s, 6, 13, 25, 0);
    ck_assert_int_eq(data_stream_batch(&s, 4, in, tg, err, sizeof err), PP_ERUNTIME);
    ck_assert_msg(strstr(err, "s2.bin' changed under the run: its header or size differ") &&
                      strstr(err, "25 tokens"),
                  "%s", err);
    data_stream_close(&s);
}
END_TEST

/* ---- the checkpoint's record ------------------------------------------------- */

START_TEST(test_record_and_compare) {
    write_shard("a.bin", 1, 41); /* 4 batches of 10 */
    write_shard("b.bin", 2, 31); /* 3 */
    write_shard("c.bin", 3, 21); /* 2 */
    DataStream s, t;
    char rec[DATA_RECORD_MAX], msg[2048];
    open_ok(&s, list_of("a.bin", "b.bin", NULL), 2, 5);
    data_stream_record(&s, 5, rec, sizeof rec);
    ck_assert_msg(strstr(rec, "shards=2 tokens=72 width=2 hash=") &&
                      strstr(rec, " batch=5 shard=1 token=10 file=b.bin"),
                  "%s", rec);
    ck_assert_int_eq(data_stream_compare(&s, 5, rec, msg, sizeof msg), DATA_RECORD_SAME);
    ck_assert_msg(strstr(msg, "batch 5 is read from shard 2 of 2 'b.bin' at token 10"), "%s", msg);
    /* the same shards in another directory: the same stream */
    ck_assert_int_eq(mkdir(tmp("moved"), 0755), 0);
    write_shard("moved/a.bin", 1, 41);
    write_shard("moved/b.bin", 2, 31);
    open_ok(&t, list_of("moved/a.bin", "moved/b.bin", NULL), 2, 5);
    ck_assert_uint_eq(data_stream_hash(&t), data_stream_hash(&s));
    ck_assert_int_eq(data_stream_compare(&t, 5, rec, msg, sizeof msg), DATA_RECORD_SAME);
    data_stream_close(&t);
    /* a shard appended: another stream, batch 5 where it was */
    open_ok(&t, list_of("a.bin", "b.bin", "c.bin", NULL), 2, 5);
    ck_assert_uint_ne(data_stream_hash(&t), data_stream_hash(&s));
    ck_assert_int_eq(data_stream_compare(&t, 5, rec, msg, sizeof msg), DATA_RECORD_CHANGED);
    ck_assert_msg(strstr(msg, "2 shard(s), 72 tokens then; 3 shard(s), 93 tokens now") &&
                      strstr(msg, "batch 5 is where it was"),
                  "%s", msg);
    data_stream_close(&t);
    /* the shards in another order: batch 5 elsewhere, both places named */
    open_ok(&t, list_of("b.bin", "a.bin", NULL), 2, 5);
    ck_assert_int_eq(data_stream_compare(&t, 5, rec, msg, sizeof msg), DATA_RECORD_MOVED);
    ck_assert_msg(strstr(msg, "batch 5 was shard 2 of 2 'b.bin' at token 10 and is now shard 2 "
                              "of 2 'a.bin' at token 20") &&
                      strstr(msg, "resume with its data.train"),
                  "%s", msg);
    data_stream_close(&t);
    /* another batch shape moves every batch */
    open_ok(&t, list_of("a.bin", "b.bin", NULL), 1, 5);
    ck_assert_int_eq(data_stream_compare(&t, 5, rec, msg, sizeof msg), DATA_RECORD_MOVED);
    data_stream_close(&t);
    /* no record (an older checkpoint), or one that does not read */
    ck_assert_int_eq(data_stream_compare(&s, 5, NULL, msg, sizeof msg), DATA_RECORD_NONE);
    ck_assert_msg(strstr(msg, "no record") && strstr(msg, "'b.bin' at token 10"), "%s", msg);
    ck_assert_int_eq(data_stream_compare(&s, 5, "shards=two", msg, sizeof msg), DATA_RECORD_MOVED);
    ck_assert_msg(strstr(msg, "cannot be read"), "%s", msg);
    /* a hand-edited record that reads but holds what no stream can (a shard index of
     * INT_MAX was printed + 1: signed overflow; negative tokens wrapped to 2^64 - 1): it
     * cannot be read, said so, never compared */
    const char *edits[][2] = {{"shard=1", "shard=2147483647"}, {"shard=1", "shard=-1"},
                              {"shard=1", "shard=2"},          {"token=10", "token=-1"},
                              {"token=10", "token=72"},        {"batch=5", "batch=-1"},
                              {"shards=2", "shards=0"},        {"tokens=72", "tokens=-72"},
                              {"width=2", "width=3"}};
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        char bad[DATA_RECORD_MAX + 32], *at = strstr(rec, edits[e][0]);
        ck_assert_ptr_nonnull(at);
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - rec), rec, edits[e][1],
                 at + strlen(edits[e][0]));
        if (strstr(edits[e][1], "batch") == NULL) /* and batch 5 elsewhere: the MOVED text */
            memcpy(strstr(bad, "batch=5"), "batch=4", 7);
        ck_assert_int_eq(data_stream_compare(&s, 5, bad, msg, sizeof msg), DATA_RECORD_MOVED);
        ck_assert_msg(strstr(msg, "cannot be read"), "%s: %s", bad, msg);
    }
    data_stream_close(&s);
}
END_TEST

START_TEST(test_patterns_text) {
    char buf[256];
    data_stream_patterns_text("a.bin\0", buf, sizeof buf);
    ck_assert_str_eq(buf, "data file 'a.bin'");
    data_stream_patterns_text("d/x_*.bin\0", buf, sizeof buf);
    ck_assert_str_eq(buf, "data files 'd/x_*.bin'");
    data_stream_patterns_text("a\0b\0", buf, sizeof buf);
    ck_assert_str_eq(buf, "data files 'a', 'b'");
    data_stream_patterns_text("a\0b\0c\0d\0", buf, sizeof buf);
    ck_assert_str_eq(buf, "data files 'a', 'b' (and 2 more)");
}
END_TEST

static Suite *stream_suite(void) {
    Suite *s = suite_create("data_stream");
    TCase *tc = tcase_create("order");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_one_file_is_data_batch);
    tcase_add_test(tc, test_shard_mapping);
    tcase_add_test(tc, test_short_shards_skipped);
    tcase_add_test(tc, test_glob_and_list_order);
    tcase_add_test(tc, test_literal_name_with_glob_chars);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_too_short);
    tcase_add_test(tc, test_lazy_validation);
    tcase_add_test(tc, test_reopen_and_changed_shard);
    suite_add_tcase(s, tc);
    tc = tcase_create("record");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_record_and_compare);
    tcase_add_test(tc, test_patterns_text);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return check_run(stream_suite(), 0); }
