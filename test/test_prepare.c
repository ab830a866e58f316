/* test_prepare.c — `pptrain prepare-data` end to end, in process (prep_main): byte-level
 * files as before; through the six tokenizers of test/tok, JSONL records and text files
 * give the document token then the ids the tokenizers library gives (cases.json); the val
 * rule, shards, uint32 files, the same bytes for any --threads; and bad input: exit 2, a
 * message that says what and where, and nothing written. (test/prepare.sh runs the binary:
 * many batches, and SIGINT / SIGTERM midway.) */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkrun.h"
#include "data.h"
#include "testdir.h"
#include "tok/prepare.h"
#include "tok/tokenizer.h"
#include "tokcases.h"

#define PREP_BATCH_BYTES_TEST (1 << 20) /* prepare_internal.h's PREP_BATCH_BYTES */

static void setup(void) { testdir_create("pp_test_prepare"); }

static void teardown(void) { testdir_remove(); }

/* Run prepare-data with a NULL-terminated argument list (argv[0] = "prepare-data"), its
 * stdout and stderr going to files in g_dir. */
static int run_prepare(const char *first, ...) {
    char *argv[32] = {"prepare-data"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    fflush(stdout);
    fflush(stderr);
    ck_assert_ptr_nonnull(freopen(tmp("stdout.txt"), "w", stdout));
    ck_assert_ptr_nonnull(freopen(tmp("stderr.txt"), "w", stderr));
    int rc = prep_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    return rc;
}

/* The whole of a small file, NUL-terminated (empty string if absent). */
static const char *slurp(const char *path) {
    static char buf[8192];
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

#define ERR_HAS(s)                                                                                 \
    ck_assert_msg(strstr(slurp(tmp("stderr.txt")), (s)), "stderr lacks '%s': %s", (s),             \
                  slurp(tmp("stderr.txt")))

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void write_str(const char *path, const char *s) { write_file(path, s, strlen(s)); }

/* A token file's tokens (malloc'd, *n of them), checked by data_open against vocab; its
 * width in *width. */
static uint32_t *read_bin(const char *path, int vocab, int *width, size_t *n) {
    DataSet d;
    char err[PP_ERR_MAX] = "";
    ck_assert_msg(data_open(&d, path, vocab, err, sizeof err) == PP_OK, "%s", err);
    *n = d.ntok;
    *width = d.width;
    data_close(&d);
    FILE *f = fopen(path, "rb");
    uint32_t *t = malloc((*n + 1) * sizeof *t);
    fseek(f, DATA_HEADER_BYTES, SEEK_SET);
    for (size_t i = 0; i < *n; i++) {
        uint32_t v = 0; /* little-endian: a uint16 fills the low half */
        ck_assert_uint_eq(fread(&v, (size_t)*width, 1, f), 1);
        t[i] = v;
    }
    fclose(f);
    return t;
}

/* Every entry of g_dir is one of the NULL-terminated names: nothing else was written
 * (no output, no .part, no temporary file). */
static void only_files(const char *first, ...) {
    const char *allowed[32] = {"stdout.txt", "stderr.txt"};
    int n = 2;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 32; a = va_arg(ap, const char *)) allowed[n++] = a;
    va_end(ap);
    DIR *d = opendir(g_dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int ok = 0;
        for (int k = 0; k < n; k++) ok |= !strcmp(e->d_name, allowed[k]);
        ck_assert_msg(ok, "'%s' was left in the test directory", e->d_name);
    }
    closedir(d);
}

/* ---- byte-level: the files of earlier versions ---------------------------------- */

/* A text of n bytes with every byte value (0 and 255 included). */
static void write_text(const char *path, unsigned char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)((i * 37 + 11) % 256);
    write_file(path, bytes, n);
}

static void expect_tokens(const char *path, const unsigned char *bytes, size_t n) {
    int w;
    size_t got;
    uint32_t *t = read_bin(path, 256, &w, &got);
    ck_assert_int_eq(w, 2);
    ck_assert_uint_eq(got, n);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(t[i], bytes[i]);
    free(t);
}

/* 1000 bytes, --val-fraction 0.1: the first 900 bytes train, the last 100 val, into
 * directories that do not exist yet. */
START_TEST(test_bytes_with_val_split) {
    unsigned char bytes[1000];
    write_text(tmp("corpus.txt"), bytes, 1000);
    int rc = run_prepare("--text", tmp("corpus.txt"), "--out", tmp("a/b/train.bin"),
                         "--val-fraction", "0.1", NULL);
    ck_assert_msg(rc == PP_OK, "rc %d: %s", rc, slurp(tmp("stderr.txt")));
    expect_tokens(tmp("a/b/train.bin"), bytes, 900);
    expect_tokens(tmp("a/b/val.bin"), bytes + 900, 100);
    const char *out = slurp(tmp("stdout.txt"));
    ck_assert_ptr_nonnull(strstr(out, "wrote 900 tokens"));
    ck_assert_ptr_nonnull(strstr(out, "wrote 100 tokens"));
    ck_assert_ptr_nonnull(strstr(out, "a/b/val.bin"));
}
END_TEST

/* --opt=value form, no split: only --out is written; non-"train" names get _val.bin */
START_TEST(test_bytes_no_split_and_val_name) {
    unsigned char bytes[1000];
    write_text(tmp("c.txt"), bytes, 1000);
    char text_arg[600], out_arg[600];
    snprintf(text_arg, sizeof text_arg, "--text=%s", tmp("c.txt"));
    snprintf(out_arg, sizeof out_arg, "--out=%s", tmp("corpus.bin"));
    ck_assert_int_eq(run_prepare(text_arg, out_arg, NULL), PP_OK);
    expect_tokens(tmp("corpus.bin"), bytes, 1000);
    ck_assert(!file_exists(tmp("corpus_val.bin")));
    /* floor(0.25 * 1000) = 250 bytes of validation */
    ck_assert_int_eq(run_prepare(text_arg, out_arg, "--val-fraction=0.25", NULL), PP_OK);
    expect_tokens(tmp("corpus.bin"), bytes, 750);
    expect_tokens(tmp("corpus_val.bin"), bytes + 750, 250);
}
END_TEST

/* Two files are one byte stream; shards of 400 tokens; val the last floor(0.2 * 1500). */
START_TEST(test_bytes_files_and_shards) {
    unsigned char bytes[1500];
    write_text(tmp("all.txt"), bytes, 1500);
    write_file(tmp("one.txt"), bytes, 1000);
    write_file(tmp("two.txt"), bytes + 1000, 500);
    int rc = run_prepare("--text", tmp("one.txt"), tmp("two.txt"), "--out", tmp("s/bytes.bin"),
                         "--shard-tokens", "400", "--val-fraction", "0.2", NULL);
    ck_assert_msg(rc == PP_OK, "rc %d: %s", rc, slurp(tmp("stderr.txt")));
    expect_tokens(tmp("s/bytes_train_000000.bin"), bytes, 400);
    expect_tokens(tmp("s/bytes_train_000001.bin"), bytes + 400, 400);
    expect_tokens(tmp("s/bytes_train_000002.bin"), bytes + 800, 400);
    ck_assert(!file_exists(tmp("s/bytes_train_000003.bin")));
    expect_tokens(tmp("s/bytes_val_000000.bin"), bytes + 1200, 300);
    ck_assert(!file_exists(tmp("s/bytes_val_000001.bin")));
    ck_assert_ptr_nonnull(strstr(slurp(tmp("stdout.txt")), "to 3 files"));
}
END_TEST

START_TEST(test_bad_args) {
    unsigned char bytes[1000];
    write_text(tmp("c.txt"), bytes, 1000);
    write_str(tmp("c.jsonl"), "{\"text\": \"a\"}\n");
    char t[512], o[512], j[512], tk[600];
    snprintf(t, sizeof t, "%s", tmp("c.txt"));
    snprintf(o, sizeof o, "%s", tmp("o.bin"));
    snprintf(j, sizeof j, "%s", tmp("c.jsonl"));
    snprintf(tk, sizeof tk, "%s", tokcase_path("gpt2.json"));
    ck_assert_int_eq(run_prepare(NULL), PP_EUSAGE);
    ERR_HAS("usage: pptrain prepare-data");
    ck_assert_int_eq(run_prepare("--text", t, NULL), PP_EUSAGE);
    ERR_HAS("--out");
    ck_assert_int_eq(run_prepare("--out", o, NULL), PP_EUSAGE);
    ck_assert_int_eq(run_prepare("--text", t, "--out", o, "--bogus", "1", NULL), PP_EUSAGE);
    ERR_HAS("--bogus");
    ck_assert_int_eq(run_prepare("--text", t, "--out", o, "extra", NULL), PP_EUSAGE);
    ck_assert_int_eq(run_prepare("--text", t, "--out", NULL), PP_EUSAGE);
    ck_assert_int_eq(run_prepare("--text", "--out", o, NULL), PP_EUSAGE);
    ERR_HAS("missing file after --text");
    const char *bad[5] = {"1", "-0.1", "abc", "0.5x", "nan"};
    for (int k = 0; k < 5; k++) {
        ck_assert_int_eq(run_prepare("--text", t, "--out", o, "--val-fraction", bad[k], NULL),
                         PP_EUSAGE);
        ERR_HAS("[0, 1)");
    }
    const char *shards[4] = {"0", "-5", "2147483648", "1e8"};
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(run_prepare("--text", t, "--out", o, "--shard-tokens", shards[k], NULL),
                         PP_EUSAGE);
        ERR_HAS("--shard-tokens must be a whole number in [1, 2147483647]");
    }
    ck_assert_int_eq(run_prepare("--text", t, "--out", o, "--threads", "0", NULL), PP_EUSAGE);
    /* the options that need another */
    ck_assert_int_eq(run_prepare("--jsonl", j, "--tokenizer", tk, "--out", o, NULL), PP_EUSAGE);
    ERR_HAS("--jsonl needs --field NAME");
    ck_assert_int_eq(run_prepare("--jsonl", j, "--field", "text", "--out", o, NULL), PP_EUSAGE);
    ERR_HAS("--jsonl needs --tokenizer");
    ck_assert_int_eq(run_prepare("--text", t, "--field", "text", "--out", o, NULL), PP_EUSAGE);
    ck_assert_int_eq(run_prepare("--text", t, "--doc-token", "x", "--out", o, NULL), PP_EUSAGE);
    ERR_HAS("--doc-token needs --tokenizer");
    ck_assert_int_eq(run_prepare("--text", t, "--jsonl", j, "--out", o, NULL), PP_EUSAGE);
    ERR_HAS("cannot be mixed");
    only_files("c.txt", "c.jsonl", NULL); /* nothing written on usage errors */
    ck_assert_int_eq(run_prepare("--help", NULL), PP_OK);
    ck_assert_ptr_nonnull(strstr(slurp(tmp("stdout.txt")), "usage:"));
}
END_TEST

START_TEST(test_bytes_bad_inputs) {
    /* a missing text file: named */
    ck_assert_int_eq(run_prepare("--text", tmp("nope.txt"), "--out", tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("cannot open input");
    ERR_HAS("nope.txt");
    /* empty text: nothing to tokenize */
    write_file(tmp("empty.txt"), "", 0);
    ck_assert_int_eq(run_prepare("--text", tmp("empty.txt"), "--out", tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("empty");
    /* 5 bytes with --val-fraction 0.1: floor(0.5) = 0 bytes of validation */
    write_str(tmp("five.txt"), "hello");
    ck_assert_int_eq(run_prepare("--text", tmp("five.txt"), "--out", tmp("o.bin"), "--val-fraction",
                                 "0.1", NULL),
                     PP_EUSAGE);
    only_files("empty.txt", "five.txt", NULL);
    /* output directory blocked by a regular file: an I/O error naming it */
    ck_assert_int_eq(run_prepare("--text", tmp("five.txt"), "--out", tmp("five.txt/o.bin"), NULL),
                     PP_ERUNTIME);
    ERR_HAS("five.txt");
}
END_TEST

/* ---- tokenizers: ids equal to the library's --------------------------------------- */

/* A growable expected token list. */
typedef struct {
    uint32_t *t;
    size_t n, cap;
} Want;

static void want_push(Want *w, uint32_t v) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->t = realloc(w->t, w->cap * sizeof *w->t);
    }
    w->t[w->n++] = v;
}

/* Append doc, then the library's ids of case k for tokenizer kind (add_special_tokens=False). */
static void want_case(Want *w, json_t *c, const char *kind, size_t k, uint32_t doc) {
    json_t *tc = json_array_get(json_object_get(json_object_get(c, "tokenizers"), kind), k);
    json_t *ids = json_object_get(tc, "ids_nospecial");
    ck_assert_ptr_nonnull(ids);
    want_push(w, doc);
    for (size_t i = 0; i < json_array_size(ids); i++)
        want_push(w, (uint32_t)json_integer_value(json_array_get(ids, i)));
}

static void expect_file(const char *path, int vocab, int width, const Want *w) {
    int got_w;
    size_t n;
    uint32_t *t = read_bin(path, vocab, &got_w, &n);
    ck_assert_int_eq(got_w, width);
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < n && i < w->n; i++)
        if (t[i] != w->t[i] && wrong++ == 0) first = i;
    ck_assert_msg(n == w->n && !wrong, "%s: %zu tokens (want %zu), %zu wrong, first at %zu", path,
                  n, w->n, wrong, first);
    free(t);
}

/* Every valid-UTF-8 text of cases.json as a JSONL record (alternate records with non-ASCII
 * as \u escapes, a blank line and a CRLF ending among them): the document token, then the
 * library's ids, for each tokenizer kind. */
START_TEST(test_jsonl_ids) {
    json_t *c = tokcase_cases(), *texts = json_object_get(c, "texts");
    FILE *f = fopen(tmp("c.jsonl"), "wb");
    int valid[64] = {0};
    for (size_t k = 0; k < json_array_size(texts); k++) {
        size_t n;
        char *s = tokcase_unhex(json_string_value(json_object_get(json_array_get(texts, k), "hex")),
                                &n);
        json_t *str = json_stringn(s, n); /* NULL when s is not UTF-8 */
        free(s);
        if (!str) continue;
        valid[k] = 1;
        json_t *rec = json_pack("{s:i, s:o}", "id", (int)k, "text", str);
        char *line = json_dumps(rec, JSON_COMPACT | (k % 2 ? JSON_ENSURE_ASCII : 0));
        fprintf(f, "%s%s", line, k == 3 ? "\r\n \t\n" : "\n");
        free(line);
        json_decref(rec);
    }
    fclose(f);
    for (int t = 0; t < TOKCASE_NKINDS; t++) {
        char tk[64];
        snprintf(tk, sizeof tk, "%s.json", tokcase_kinds[t].name);
        int rc = run_prepare("--tokenizer", tokcase_path(tk), "--jsonl", tmp("c.jsonl"), "--field",
                             "text", "--out", tmp("x/c.bin"), "--threads", "2", NULL);
        ck_assert_msg(rc == PP_OK, "%s: rc %d: %s", tk, rc, slurp(tmp("stderr.txt")));
        Want w = {0};
        for (size_t k = 0; k < json_array_size(texts); k++)
            if (valid[k]) want_case(&w, c, tokcase_kinds[t].name, k, tokcase_kinds[t].doc_id);
        expect_file(tmp("x/c.bin"), tokcase_kinds[t].vocab, 2, &w);
        free(w.t);
        char line[128];
        snprintf(line, sizeof line, "each document after %s", tokcase_kinds[t].doc);
        ck_assert_msg(strstr(slurp(tmp("stdout.txt")), line), "%s", slurp(tmp("stdout.txt")));
    }
    only_files("c.jsonl", "x", NULL);
    json_decref(c);
}
END_TEST

/* Every text of cases.json (invalid UTF-8 and the empty one included) as a --text file. */
START_TEST(test_text_ids) {
    json_t *c = tokcase_cases(), *texts = json_object_get(c, "texts");
    size_t nt = json_array_size(texts);
    char *argv[40] = {"--tokenizer", NULL, "--out", NULL, "--text"};
    int argc = 5;
    char names[40][64];
    for (size_t k = 0; k < nt && k < 30; k++) {
        size_t n;
        char *s = tokcase_unhex(json_string_value(json_object_get(json_array_get(texts, k), "hex")),
                                &n);
        snprintf(names[k], sizeof names[k], "case%02zu.txt", k);
        write_file(tmp(names[k]), s, n);
        free(s);
        argv[argc++] = strdup(tmp(names[k]));
    }
    char out[600];
    snprintf(out, sizeof out, "%s", tmp("t.bin"));
    argv[3] = out;
    for (int t = 0; t < TOKCASE_NKINDS; t++) {
        char tk[64];
        snprintf(tk, sizeof tk, "%s.json", tokcase_kinds[t].name);
        argv[1] = (char *)tokcase_path(tk);
        fflush(stdout);
        ck_assert_ptr_nonnull(freopen(tmp("stdout.txt"), "w", stdout));
        ck_assert_ptr_nonnull(freopen(tmp("stderr.txt"), "w", stderr));
        char *full[42] = {"prepare-data"};
        memcpy(full + 1, argv, (size_t)argc * sizeof *argv);
        int rc = prep_main(argc + 1, full);
        fflush(stdout);
        fflush(stderr);
        ck_assert_msg(rc == PP_OK, "%s: rc %d: %s", tk, rc, slurp(tmp("stderr.txt")));
        Want w = {0};
        for (size_t k = 0; k < nt && k < 30; k++)
            want_case(&w, c, tokcase_kinds[t].name, k, tokcase_kinds[t].doc_id);
        expect_file(out, tokcase_kinds[t].vocab, 2, &w);
        free(w.t);
    }
    for (int k = 5; k < argc; k++) free(argv[k]);
    json_decref(c);
}
END_TEST

/* One --text file through a tokenizer: one document, so val is its last floor(0.1 * n)
 * tokens (the byte-level rule), cut at a token. */
START_TEST(test_one_text_file_split) {
    Tokenizer *t = NULL;
    char err[PP_ERR_MAX];
    ck_assert_int_eq(tok_load(tokcase_path("llama3.json"), &t, err, sizeof err), PP_OK);
    const char *text = "The big cat walked in the garden. Where is the apple? It is in the "
                       "kitchen. Anna saw the apple in the garden.";
    write_str(tmp("one.txt"), text);
    TokIds all = {0};
    tok_encode(t, "", 0, 0, &all); /* <|begin_of_text|>: the BOS, llama3.json's document token */
    ck_assert_uint_eq(all.n, 1);
    tok_encode(t, text, strlen(text), TOK_ENCODE_NO_SPECIAL, &all);
    size_t nval = all.n / 10; /* floor(0.1 * n) */
    ck_assert_uint_gt(nval, 0);
    int rc = run_prepare("--tokenizer", tokcase_path("llama3.json"), "--text", tmp("one.txt"),
                         "--out", tmp("d/train.bin"), "--val-fraction", "0.1", NULL);
    ck_assert_msg(rc == PP_OK, "rc %d: %s", rc, slurp(tmp("stderr.txt")));
    Want tr = {0}, va = {0};
    for (size_t i = 0; i < all.n; i++)
        want_push(i < all.n - nval ? &tr : &va, (uint32_t)all.ids[i]);
    expect_file(tmp("d/train.bin"), 800, 2, &tr);
    expect_file(tmp("d/val.bin"), 800, 2, &va);
    /* too few tokens for a validation token */
    ck_assert_int_eq(run_prepare("--tokenizer", tokcase_path("llama3.json"), "--text",
                                 tmp("one.txt"), "--out", tmp("e.bin"), "--val-fraction", "0.01",
                                 NULL),
                     PP_EUSAGE);
    ERR_HAS("leaves none of the");
    ck_assert(!file_exists(tmp("e.bin")) && !file_exists(tmp("e_val.bin")));
    free(tr.t);
    free(va.t);
    tok_ids_free(&all);
    tok_free(t);
}
END_TEST

/* The ids of one document as prepare-data writes it: doc, then encode without specials. */
static void doc_ids(const Tokenizer *t, int32_t doc, const char *s, TokIds *out) {
    if (!out->cap) {
        out->cap = 1024;
        out->ids = malloc(out->cap * sizeof *out->ids);
    }
    out->ids[0] = doc;
    out->n = 1;
    tok_encode(t, s, strlen(s), TOK_ENCODE_NO_SPECIAL, out);
}

/* 300 documents of varied length, --val-fraction 0.1, shards of 1000 tokens: val is the
 * documents the rule picks (val < F * all, it included), in order; every shard but a
 * split's last holds 1000 tokens; --threads 1 and 3 write the same bytes. */
START_TEST(test_val_rule_and_shards) {
    Tokenizer *t = NULL;
    char err[PP_ERR_MAX];
    ck_assert_int_eq(tok_load(tokcase_path("gpt2.json"), &t, err, sizeof err), PP_OK);
    TokIds ids = {0};
    Want train = {0}, val = {0};
    FILE *f = fopen(tmp("d.jsonl"), "wb");
    const char *words[6] = {"the apple",     "Anna saw", "a big cat",
                            "in the garden", "12345",    "Where is the book?"};
    for (int d = 0; d < 300; d++) {
        char text[1024] = "";
        for (int k = 0; k < 1 + (d * 7) % 23; k++)
            pp_strappendf(text, sizeof text, "%s%s", k ? " " : "", words[(d + k * k) % 6]);
        fprintf(f, "{\"text\": \"%s\", \"n\": %d}\n", text, d);
        doc_ids(t, 0, text, &ids);
        Want *to = (double)val.n < 0.1 * (double)(train.n + val.n + ids.n) ? &val : &train;
        for (size_t i = 0; i < ids.n; i++) want_push(to, (uint32_t)ids.ids[i]);
    }
    fclose(f);
    ck_assert(val.n > 0 && train.n > 3000);
    for (int threads = 1; threads <= 3; threads += 2) {
        char th[8], out[600];
        snprintf(th, sizeof th, "%d", threads);
        snprintf(out, sizeof out, "%s", tmp(threads == 1 ? "one/d" : "three/d.bin"));
        int rc = run_prepare("--tokenizer", tokcase_path("gpt2.json"), "--jsonl", tmp("d.jsonl"),
                             "--field", "text", "--out", out, "--val-fraction", "0.1",
                             "--shard-tokens", "1000", "--threads", th, NULL);
        ck_assert_msg(rc == PP_OK, "rc %d: %s", rc, slurp(tmp("stderr.txt")));
    }
    const Want *want[2] = {&train, &val};
    const char *split[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        size_t at = 0;
        int k = 0;
        for (; at < want[s]->n; k++) {
            char one[64], three[64];
            snprintf(one, sizeof one, "one/d_%s_%06d.bin", split[s], k);
            snprintf(three, sizeof three, "three/d_%s_%06d.bin", split[s], k);
            int w;
            size_t n;
            uint32_t *got = read_bin(tmp(one), 700, &w, &n);
            size_t expect = want[s]->n - at < 1000 ? want[s]->n - at : 1000;
            ck_assert_uint_eq(n, expect);
            ck_assert_msg(!memcmp(got, want[s]->t + at, n * sizeof *got), "%s differs", one);
            free(got);
            at += n;
            char cmd[2048];
            snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", tmp(one), tmp(three));
            ck_assert_msg(system(cmd) == 0, "%s and %s differ", one, three);
        }
        char next[64];
        snprintf(next, sizeof next, "one/d_%s_%06d.bin", split[s], k);
        ck_assert(!file_exists(tmp(next)));
    }
    free(train.t);
    free(val.t);
    tok_ids_free(&ids);
    tok_free(t);
}
END_TEST

/* ---- the document token, uint32 files ------------------------------------------------- */

static int g_big_id; /* set_big's token id */

static void set_big(json_t *j) { /* an added token past 65536: vocabulary 70001, uint32 */
    json_t *tok = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", g_big_id, "content",
                            "<|doc|>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                            "special", 1);
    json_array_append_new(json_object_get(j, "added_tokens"), tok);
}

static void set_no_eot(json_t *j) { /* <|endoftext|> renamed: no EOT, and no BOS either */
    json_t *added = json_array_get(json_object_get(j, "added_tokens"), 0);
    json_object_set_new(added, "content", json_string("<|pad|>"));
    json_t *vocab = json_object_get(json_object_get(j, "model"), "vocab");
    json_object_del(vocab, "<|endoftext|>");
    json_object_set_new(vocab, "<|pad|>", json_integer(0));
}

static void set_wordpiece(json_t *j) {
    json_object_set_new(json_object_get(j, "model"), "type", json_string("WordPiece"));
}

/* gpt2.json with edit applied, written to the test directory as `name` */
static const char *edited(const char *name, void (*edit)(json_t *)) {
    return tokcase_edited("gpt2.json", name, edit, NULL);
}

START_TEST(test_doc_token_and_uint32) {
    Tokenizer *t = NULL;
    char err[PP_ERR_MAX];
    ck_assert_int_eq(tok_load(tokcase_path("gpt2.json"), &t, err, sizeof err), PP_OK);
    write_str(tmp("a.jsonl"), "{\"text\": \"the apple\"}\n{\"text\": \"Anna saw\"}\n");
    TokIds a = {0}, b = {0};
    int32_t the = tok_token_id(t, "Ġthe");
    ck_assert_int_ge(the, 0);
    /* --doc-token a vocabulary entry, as the file writes it */
    doc_ids(t, the, "the apple", &a);
    doc_ids(t, the, "Anna saw", &b);
    Want w = {0};
    for (size_t i = 0; i < a.n; i++) want_push(&w, (uint32_t)a.ids[i]);
    for (size_t i = 0; i < b.n; i++) want_push(&w, (uint32_t)b.ids[i]);
    ck_assert_int_eq(run_prepare("--tokenizer", tokcase_path("gpt2.json"), "--jsonl",
                                 tmp("a.jsonl"), "--field", "text", "--out", tmp("a.bin"),
                                 "--doc-token", "Ġthe", NULL),
                     PP_OK);
    expect_file(tmp("a.bin"), 700, 2, &w);
    /* an id past 65535: uint32 tokens in llm.c's Llama 3 format */
    g_big_id = 70000;
    const char *big = edited("big.json", set_big);
    ck_assert_int_eq(run_prepare("--tokenizer", big, "--jsonl", tmp("a.jsonl"), "--field", "text",
                                 "--out", tmp("b.bin"), "--doc-token", "<|doc|>", NULL),
                     PP_OK);
    for (size_t i = 0; i < w.n; i++) w.t[i] = w.t[i] == (uint32_t)the ? 70000u : w.t[i];
    expect_file(tmp("b.bin"), 70001, 4, &w);
    ck_assert_ptr_nonnull(strstr(slurp(tmp("stdout.txt")), "vocab 70001, uint32"));
    /* a token that is not there; a tokenizer with neither EOT nor BOS */
    ck_assert_int_eq(run_prepare("--tokenizer", tokcase_path("gpt2.json"), "--jsonl",
                                 tmp("a.jsonl"), "--field", "text", "--out", tmp("c.bin"),
                                 "--doc-token", "<eos>", NULL),
                     PP_EUSAGE);
    ERR_HAS("--doc-token \"<eos>\" is not a token of");
    const char *none = edited("none.json", set_no_eot);
    ck_assert_int_eq(run_prepare("--tokenizer", none, "--jsonl", tmp("a.jsonl"), "--field", "text",
                                 "--out", tmp("c.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("has no <|endoftext|> token and its post-processor adds no BOS");
    only_files("a.jsonl", "a.bin", "b.bin", "big.json", "none.json", NULL);
    free(w.t);
    tok_ids_free(&a);
    tok_ids_free(&b);
    tok_free(t);
}
END_TEST

/* ---- bad input: exit 2, what and where, nothing written --------------------------- */

/* prepare-data of `jsonl` (written to c.jsonl) into shards of `shard` tokens over an old
 * file under the first shard's name: exit 2 with `msg`; the old file is as it was. */
static void refused_shards(const char *jsonl, const char *shard, const char *msg) {
    write_str(tmp("c.jsonl"), jsonl);
    write_str(tmp("o_train_000000.bin"), "old");
    char out[600];
    snprintf(out, sizeof out, "%s", tmp("o"));
    int rc = run_prepare("--tokenizer", tokcase_path("gpt2.json"), "--jsonl", tmp("c.jsonl"),
                         "--field", "text", "--out", out, "--shard-tokens", shard, "--val-fraction",
                         "0.5", "--threads", "2", NULL);
    ck_assert_msg(rc == PP_EUSAGE, "rc %d for %s", rc, msg);
    ERR_HAS(msg);
    ck_assert_str_eq(slurp(tmp("o_train_000000.bin")), "old");
    only_files("c.jsonl", "o_train_000000.bin", NULL);
}

static void refused_jsonl(const char *jsonl, const char *msg) { refused_shards(jsonl, "50", msg); }

START_TEST(test_bad_records) {
    refused_jsonl("{\"text\": \"a\"}\n\n{\"text\": \"b\",}\n", "c.jsonl:3: not valid JSON: ");
    refused_jsonl("{\"text\": \"a\"}\n[\"text\"]\n", "c.jsonl:2: the line is an array, not a JSON "
                                                     "object");
    refused_jsonl("{\"body\": \"a\", \"id\": 3}\n",
                  "c.jsonl:1: the record has no field \"text\" (its fields: \"body\", \"id\")");
    refused_jsonl("{\"text\": 7}\n", "c.jsonl:1: the field \"text\" is a number, not a string");
    refused_jsonl("{\"text\": \"\\ud800\"}\n", "c.jsonl:1: not valid JSON");
    /* a bad line in the second batch, after shards were finished: they are removed too */
    size_t cap = 4 << 20, len = 0;
    char *big = malloc(cap);
    for (int k = 0; k < 60000; k++)
        len += (size_t)snprintf(big + len, cap - len,
                                "{\"text\": \"the apple in the garden "
                                "%d\"}\n",
                                k);
    snprintf(big + len, cap - len, "{\"text\": \"no end\n");
    ck_assert_uint_gt(len, PREP_BATCH_BYTES_TEST);
    refused_shards(big, "20000", "c.jsonl:60001: not valid JSON");
    free(big);
    /* an empty corpus: no document; documents without text */
    refused_jsonl("", "the corpus is empty: 0 documents");
    refused_jsonl("\n  \n\t\r\n", "the corpus is empty: 0 documents");
    refused_jsonl("{\"text\": \"\"}\n{\"text\": \"\"}\n",
                  "the corpus is empty: 2 documents, and no text in them");
    /* --val-fraction 0.5 of one document: all of it val, none left to train on */
    refused_jsonl("{\"text\": \"one document\"}\n", "took all 1 documents for validation");
}
END_TEST

START_TEST(test_bad_tokenizer) {
    write_str(tmp("c.jsonl"), "{\"text\": \"a\"}\n");
    write_str(tmp("bad.json"), "{\"model\": ");
    const char *wp = edited("wp.json", set_wordpiece);
    ck_assert_int_eq(run_prepare("--tokenizer", tmp("bad.json"), "--jsonl", tmp("c.jsonl"),
                                 "--field", "text", "--out", tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("not valid JSON");
    ck_assert_int_eq(run_prepare("--tokenizer", wp, "--jsonl", tmp("c.jsonl"), "--field", "text",
                                 "--out", tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("WordPiece");
    ck_assert_int_eq(run_prepare("--tokenizer", tmp("nope.json"), "--jsonl", tmp("c.jsonl"),
                                 "--field", "text", "--out", tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ck_assert_int_eq(run_prepare("--tokenizer", tokcase_path("gpt2.json"), "--jsonl",
                                 tmp("c.jsonl"), tmp("nope.jsonl"), "--field", "text", "--out",
                                 tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("cannot open input");
    ERR_HAS("nope.jsonl");
    only_files("c.jsonl", "bad.json", "wp.json", NULL);
}
END_TEST

/* ---- hostile input (the hostile-input campaign, test/fuzz/fuzz_tok.py) ------------------------ */

static const char *g_pattern;      /* set_split's */
static void set_split(json_t *j) { /* a Split of g_pattern before gpt2.json's ByteLevel */
    json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
                              g_pattern, "behavior", "Isolated", "invert", 0);
    json_t *seq = json_pack("{s:s, s:[o, O]}", "type", "Sequence", "pretokenizers", split,
                            json_object_get(j, "pre_tokenizer"));
    json_object_set_new(j, "pre_tokenizer", seq);
}

/* A pattern that backtracks catastrophically ends the run with the file named (before: a
 * quadratic one ran for minutes on 300 kB, hours on 100 MB; an exponential one died of an
 * internal "fatal:"), and nothing is written. */
START_TEST(test_runaway_pattern) {
    size_t n = 300000;
    char *a = malloc(n + 1);
    memset(a, 'a', n);
    a[n] = 0;
    write_str(tmp("a.txt"), a);
    free(a);
    g_pattern = "(?:a|b)*c|a"; /* scans to the end from every position */
    const char *quad = edited("quad.json", set_split);
    ck_assert_int_eq(run_prepare("--tokenizer", quad, "--text", tmp("a.txt"), "--out", tmp("o.bin"),
                                 NULL),
                     PP_EUSAGE);
    ERR_HAS("a.txt: ");
    ERR_HAS("quad.json: the pre-tokenizer pattern \"(?:a|b)*c|a\"");
    ERR_HAS("match limit exceeded");
    g_pattern = "(a|aa)+$"; /* exponential */
    const char *expo = edited("expo.json", set_split);
    write_str(tmp("e.jsonl"),
              "{\"text\": \"fine\"}\n{\"text\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\"}\n");
    ck_assert_int_eq(run_prepare("--tokenizer", expo, "--jsonl", tmp("e.jsonl"), "--field", "text",
                                 "--out", tmp("o.bin"), NULL),
                     PP_EUSAGE);
    ERR_HAS("e.jsonl:2: ");
    ERR_HAS("match limit exceeded");
    only_files("a.txt", "quad.json", "expo.json", "e.jsonl", NULL);
}
END_TEST

static void set_no_a(json_t *j) { /* llama3.json without "a", and the merges that need it */
    json_t *vocab = json_object_get(json_object_get(j, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(j, "model"), "merges");
    json_object_del(vocab, "a");
    for (size_t i = json_array_size(merges); i-- > 0;) {
        json_t *m = json_array_get(merges, i);
        const char *l = json_string_value(json_array_get(m, 0));
        const char *r = json_string_value(json_array_get(m, 1));
        char both[256];
        snprintf(both, sizeof both, "%s%s", l, r);
        if (!json_object_get(vocab, l) || !json_object_get(vocab, r) ||
            !json_object_get(vocab, both))
            json_array_remove(merges, i);
    }
}

/* Input the reader cuts exactly at a line's end (no line carried to the next batch), and a
 * tokenizer that encodes "a" to nothing (the document token's search for the BOS): each
 * passed NULL to memcpy / memcmp, an undefined-behaviour report in the sanitizer build. */
START_TEST(test_empty_edges) {
    char line[1024];
    memset(line, 'x', sizeof line);
    memcpy(line, "{\"text\": \"", 10);
    memcpy(line + sizeof line - 3, "\"}\n", 3);
    FILE *f = fopen(tmp("k.jsonl"), "wb");
    for (int i = 0; i < 2 * PREP_BATCH_BYTES_TEST / (int)sizeof line; i++)
        fwrite(line, 1, sizeof line, f);
    fclose(f);
    ck_assert_int_eq(run_prepare("--tokenizer", tokcase_path("gpt2.json"), "--jsonl",
                                 tmp("k.jsonl"), "--field", "text", "--out", tmp("k.bin"), NULL),
                     PP_OK);
    ck_assert_ptr_nonnull(strstr(slurp(tmp("stdout.txt")), "(2048 documents)"));
    const char *noa = tokcase_edited("llama3.json", "noa.json", set_no_a, NULL);
    write_str(tmp("b.txt"), "bcd a");
    ck_assert_int_eq(run_prepare("--tokenizer", noa, "--text", tmp("b.txt"), "--out", tmp("b.bin"),
                                 NULL),
                     PP_OK);
    ck_assert_ptr_nonnull(
        strstr(slurp(tmp("stdout.txt")), "each document after <|begin_of_text|>"));
}
END_TEST

static Suite *prepare_suite(void) {
    Suite *s = suite_create("prepare");
    TCase *tc = tcase_create("bytes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_bytes_with_val_split);
    tcase_add_test(tc, test_bytes_no_split_and_val_name);
    tcase_add_test(tc, test_bytes_files_and_shards);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_bytes_bad_inputs);
    suite_add_tcase(s, tc);
    tc = tcase_create("tokenizers");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_jsonl_ids);
    tcase_add_test(tc, test_text_ids);
    tcase_add_test(tc, test_val_rule_and_shards);
    tcase_add_test(tc, test_one_text_file_split);
    tcase_add_test(tc, test_doc_token_and_uint32);
    tcase_add_test(tc, test_bad_records);
    tcase_add_test(tc, test_bad_tokenizer);
    tcase_add_test(tc, test_runaway_pattern);
    tcase_add_test(tc, test_empty_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return check_run(prepare_suite(), 0); }
