/* test_tok.c — src/tok/ against the tokenizers library's own ids (test/tok/, made by
 * test/tok/gen.py): three small trained tokenizers (GPT-2's byte-level kind, Llama 3's
 * Split + ByteLevel with ignore_merges and a BOS template, SentencePiece's byte-fallback
 * kind as Llama 2's file has it) encode a text hard on tokenizers (CJK, emoji with
 * modifiers and ZWJ, combining marks, RTL, CRLF, tabs, runs of spaces and digits,
 * Unicode spaces), empty and one-space texts, special tokens inside text and bytes that
 * are not UTF-8 to exactly the library's ids, with and without the template's special
 * tokens, and decode them to exactly its text, skipping special tokens or not. Then: the
 * decode round trip, 100,000-character words (the min-heap BPE; a quadratic one would
 * take minutes), many threads on one tokenizer, and damaged or unsupported
 * tokenizer.json files refused naming the file and the field. */
#define _GNU_SOURCE
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checkrun.h"
#include "testdir.h"
#include "tok/tokenizer.h"

static char g_err[PP_ERR_MAX];
static const char *KINDS[] = {"gpt2", "llama3", "sp"};

static void setup(void) {
    testdir_create("pp_test_tok");
    g_err[0] = 0;
}

static void teardown(void) { testdir_remove(); }

#define ASSERT_ERR_HAS(s) ck_assert_msg(strstr(g_err, (s)) != NULL, "'%s' lacks '%s'", g_err, (s))

/* test/tok/NAME, next to this file (the tests run from the repository root) */
static const char *golden(const char *name) {
    static char buf[4][PP_PATH_MAX + 64];
    static int k;
    k = (k + 1) % 4;
    const char *slash = strrchr(__FILE__, '/');
    snprintf(buf[k], sizeof buf[k], "%.*stok/%s", slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__,
             name);
    return buf[k];
}

static Tokenizer *load(const char *kind) {
    char name[64];
    Tokenizer *t = NULL;
    snprintf(name, sizeof name, "%s.json", kind);
    int rc = tok_load(golden(name), &t, g_err, sizeof g_err);
    ck_assert_msg(rc == PP_OK && t, "%s: %s", name, g_err);
    return t;
}

static json_t *cases(void) {
    json_error_t je;
    json_t *c = json_load_file(golden("cases.json"), 0, &je);
    ck_assert_msg(c, "cases.json: %s at line %d", je.text, je.line);
    return c;
}

/* hex text -> bytes (malloc'd, *n) */
static char *unhex(const char *hex, size_t *n) {
    size_t len = strlen(hex) / 2;
    char *out = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[len] = 0;
    *n = len;
    return out;
}

static char *text_of(json_t *c, const char *name, size_t *n) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(c, "texts"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            return unhex(json_string_value(json_object_get(e, "hex")), n);
    }
    return NULL;
}

/* the wrong ids of got against the library's list; prints the first difference */
static int compare_ids(const char *what, const TokIds *got, json_t *want) {
    size_t n = json_array_size(want), wrong = 0, first = (size_t)-1;
    for (size_t i = 0; i < n || i < got->n; i++) {
        long w = i < n ? (long)json_integer_value(json_array_get(want, i)) : -1;
        long g = i < got->n ? got->ids[i] : -1;
        if (w != g && wrong++ == 0) first = i;
    }
    if (wrong)
        fprintf(stderr,
                "%s: %zu of %zu ids wrong (we give %zu ids), first at %zu: %ld, library %ld\n",
                what, wrong, n, got->n, first, first < got->n ? (long)got->ids[first] : -1L,
                first < n ? (long)json_integer_value(json_array_get(want, first)) : -1L);
    return wrong != 0;
}

/* want_hex "=": the text itself */
static int compare_text(const char *what, const TokText *got, const char *want_hex,
                        const char *text, size_t text_n) {
    size_t n = text_n;
    char *want = strcmp(want_hex, "=") == 0 ? strndup(text, text_n) : unhex(want_hex, &n);
    int bad = got->len != n || memcmp(got->p ? got->p : "", want, n) != 0;
    if (bad)
        fprintf(stderr, "%s: decode gives \"%.*s\", the library \"%s\"\n", what, (int)got->len,
                got->p ? got->p : "", want);
    free(want);
    return bad;
}

/* every text of cases.json through each tokenizer: ids and decodes equal the library's */
START_TEST(test_library_ids) {
    json_t *c = cases();
    int wrong = 0, checked = 0;
    for (int k = 0; k < 3; k++) {
        Tokenizer *t = load(KINDS[k]);
        json_t *rows = json_object_get(json_object_get(c, "tokenizers"), KINDS[k]), *row;
        size_t i;
        json_array_foreach(rows, i, row) {
            const char *name = json_string_value(json_object_get(row, "name"));
            char what[128];
            TokIds ids = {0}, ns = {0};
            TokText dec = {0}, skip = {0};
            size_t n = 0;
            char *text = text_of(c, name, &n);
            json_t *want = json_object_get(row, "ids");
            if (text) { /* partial_bytes has ids only */
                snprintf(what, sizeof what, "%s %s", KINDS[k], name);
                tok_encode(t, text, n, 0, &ids);
                wrong += compare_ids(what, &ids, want);
                snprintf(what, sizeof what, "%s %s (no special tokens)", KINDS[k], name);
                tok_encode(t, text, n, TOK_ENCODE_NO_SPECIAL, &ns);
                wrong += compare_ids(what, &ns, json_object_get(row, "ids_nospecial"));
            } else {
                for (size_t j = 0; j < json_array_size(want); j++) {
                    int32_t id = (int32_t)json_integer_value(json_array_get(want, j));
                    tok_encode(t, "", 0, TOK_ENCODE_NO_SPECIAL, &ids); /* nothing */
                    if (ids.n == ids.cap)
                        ids.ids = realloc(ids.ids, (ids.cap = 2 * ids.cap + 8) * 4);
                    ids.ids[ids.n++] = id;
                }
            }
            snprintf(what, sizeof what, "%s %s", KINDS[k], name);
            ck_assert_int_eq(tok_decode(t, ids.ids, ids.n, 0, &dec, g_err, sizeof g_err), PP_OK);
            wrong += compare_text(what, &dec, json_string_value(json_object_get(row, "decode")),
                                  text, n);
            ck_assert_int_eq(tok_decode(t, ids.ids, ids.n, TOK_DECODE_SKIP_SPECIAL, &skip, g_err,
                                        sizeof g_err),
                             PP_OK);
            wrong += compare_text(what, &skip,
                                  json_string_value(json_object_get(row, "decode_skip")), text, n);
            checked++;
            free(text);
            tok_ids_free(&ids), tok_ids_free(&ns), tok_text_free(&dec), tok_text_free(&skip);
        }
        tok_free(t);
    }
    json_decref(c);
    ck_assert_int_ge(checked, 3 * 15);
    ck_assert_msg(wrong == 0, "%d of %d cases differ from the tokenizers library", wrong, checked);
}
END_TEST

static const char *ROUND_TRIP[] = {"hard",   "empty",      "space",      "spaces",
                                   "digits", "long_word",  "mixed_word", "long_spaces_word",
                                   "crlf",   "apostrophes"};

/* decode(encode(x)) == x for UTF-8 without added tokens in it, and for byte-level with them
 * when special tokens are kept */
START_TEST(test_round_trip) {
    json_t *c = cases();
    for (int k = 0; k < 3; k++) {
        Tokenizer *t = load(KINDS[k]);
        for (size_t r = 0; r < sizeof ROUND_TRIP / sizeof *ROUND_TRIP; r++) {
            size_t n;
            char *text = text_of(c, ROUND_TRIP[r], &n);
            ck_assert_ptr_nonnull(text);
            for (unsigned flags = 0; flags < 2; flags++) {
                TokIds ids = {0};
                TokText out = {0};
                tok_encode(t, text, n, flags ? TOK_ENCODE_NO_SPECIAL : 0, &ids);
                ck_assert_int_eq(tok_decode(t, ids.ids, ids.n, TOK_DECODE_SKIP_SPECIAL, &out, g_err,
                                            sizeof g_err),
                                 PP_OK);
                ck_assert_msg(out.len == n && memcmp(out.p, text, n) == 0, "%s %s: \"%s\"",
                              KINDS[k], ROUND_TRIP[r], out.p);
                tok_ids_free(&ids), tok_text_free(&out);
            }
            free(text);
        }
        tok_free(t);
    }
    /* byte-level: special tokens come back as they were written */
    const char *with[][2] = {{"gpt2", "specials_gpt2"}, {"llama3", "specials_llama3"}};
    for (int k = 0; k < 2; k++) {
        Tokenizer *t = load(with[k][0]);
        size_t n;
        char *text = text_of(c, with[k][1], &n);
        TokIds ids = {0};
        TokText out = {0};
        tok_encode(t, text, n, TOK_ENCODE_NO_SPECIAL, &ids);
        ck_assert_int_eq(tok_decode(t, ids.ids, ids.n, 0, &out, g_err, sizeof g_err), PP_OK);
        ck_assert_msg(out.len == n && memcmp(out.p, text, n) == 0, "%s: \"%s\"", with[k][1], out.p);
        free(text);
        tok_ids_free(&ids), tok_text_free(&out);
        tok_free(t);
    }
    json_decref(c);
}
END_TEST

/* the special tokens by name; the template adds BOS unless told not to */
START_TEST(test_special_tokens) {
    Tokenizer *g = load("gpt2"), *l = load("llama3"), *s = load("sp");
    ck_assert_int_eq(tok_token_id(g, "<|endoftext|>"), 0);
    ck_assert_int_eq(tok_token_id(l, "<|begin_of_text|>"), 0);
    ck_assert_int_eq(tok_token_id(l, "<|eot_id|>"), 4);
    ck_assert_int_eq(tok_token_id(s, "<s>"), 1);
    ck_assert_int_eq(tok_token_id(s, "<0x41>"), 3 + 0x41);
    ck_assert_int_eq(tok_token_id(g, "no such token"), -1);
    ck_assert_int_eq(tok_vocab_size(g), 700);
    ck_assert_int_eq(tok_vocab_size(s), 756);
    size_t n;
    const char *str = tok_token_str(l, 4, &n);
    ck_assert_str_eq(str, "<|eot_id|>");
    ck_assert_ptr_null(tok_token_str(l, 800, &n));
    TokIds ids = {0};
    ck_assert_uint_eq(tok_encode(l, "", 0, 0, &ids), 1);
    ck_assert_int_eq(ids.ids[0], 0);
    ck_assert_uint_eq(tok_encode(l, "", 0, TOK_ENCODE_NO_SPECIAL, &ids), 0);
    ck_assert_uint_eq(tok_encode(g, "<|endoftext|>", 13, 0, &ids), 1);
    ck_assert_int_eq(ids.ids[1], 0);
    /* an id past the vocabulary: an error, out unchanged */
    int32_t badid[2] = {5, 900};
    TokText out = {0};
    ck_assert_int_eq(tok_decode(s, badid, 2, 0, &out, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("token id 900 (at 1) is not in the tokenizer");
    ck_assert_uint_eq(out.len, 0);
    tok_ids_free(&ids);
    tok_free(g), tok_free(l), tok_free(s);
}
END_TEST

/* 100,000-character words: O(n log n) merging (the min-heap), seconds at most even under
 * the sanitizers; a BPE that rescans the word for each merge would take minutes. The
 * SentencePiece kind has no pre-tokenizer, so its whole text is one word. */
START_TEST(test_long_word) {
    size_t n = 100000;
    char *a = malloc(n), *mixed = malloc(n);
    memset(a, 'a', n);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        mixed[i] = "etaoinshr"[(x >> 16) % 9];
    }
    for (int k = 0; k < 3; k++) {
        Tokenizer *t = load(KINDS[k]);
        const char *texts[2] = {a, mixed};
        for (int j = 0; j < 2; j++) {
            TokIds ids = {0};
            TokText out = {0};
            double t0 = pp_now();
            tok_encode(t, texts[j], n, TOK_ENCODE_NO_SPECIAL, &ids);
            double dt = pp_now() - t0;
            fprintf(stderr, "test_tok: %s, %zu characters (%s): %zu ids in %.3f s\n", KINDS[k], n,
                    j ? "mixed" : "one letter", ids.n, dt);
            ck_assert_int_eq(tok_decode(t, ids.ids, ids.n, 0, &out, g_err, sizeof g_err), PP_OK);
            ck_assert(out.len == n && memcmp(out.p, texts[j], n) == 0);
            tok_ids_free(&ids), tok_text_free(&out);
        }
        tok_free(t);
    }
    free(a), free(mixed);
}
END_TEST

/* one tokenizer, many threads at once: each gets the ids one thread alone gets */
typedef struct {
    const Tokenizer *t;
    const char *text;
    size_t n;
    TokIds ids;
} Job;

static void *encode_job(void *p) {
    Job *j = p;
    for (int r = 0; r < 20; r++) {
        j->ids.n = 0;
        tok_encode(j->t, j->text, j->n, 0, &j->ids);
    }
    return NULL;
}

START_TEST(test_threads) {
    json_t *c = cases();
    size_t n;
    char *text = text_of(c, "hard", &n);
    for (int k = 0; k < 3; k++) {
        Tokenizer *t = load(KINDS[k]);
        TokIds one = {0};
        tok_encode(t, text, n, 0, &one);
        Job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (Job){t, text, n, {0}};
            ck_assert_int_eq(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            ck_assert_uint_eq(jobs[i].ids.n, one.n);
            ck_assert(memcmp(jobs[i].ids.ids, one.ids, one.n * sizeof *one.ids) == 0);
            tok_ids_free(&jobs[i].ids);
        }
        tok_ids_free(&one);
        tok_free(t);
    }
    free(text);
    json_decref(c);
}
END_TEST

/* ---- refused files --------------------------------------------------------------------- */

/* gpt2.json (or `base`) with edit applied, written to the test directory as `name` */
static const char *edited(const char *base, const char *name, void (*edit)(json_t *)) {
    json_error_t je;
    json_t *j = json_load_file(golden(base), 0, &je);
    ck_assert_ptr_nonnull(j);
    edit(j);
    const char *path = tmp(name);
    ck_assert_int_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
    return path;
}

static void set_wordpiece(json_t *j) {
    json_object_set_new(json_object_get(j, "model"), "type", json_string("WordPiece"));
}
static void set_unigram(json_t *j) {
    json_object_set_new(json_object_get(j, "model"), "type", json_string("Unigram"));
}
static void set_digits(json_t *j) { /* llama3.json: its Sequence's second step */
    json_t *seq = json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers");
    json_object_set_new(json_array_get(seq, 1), "type", json_string("Digits"));
}
static void set_merge_unknown(json_t *j) {
    json_t *merges = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(merges, 3, json_string("Ġ zzqx"));
}
static void set_nfc(json_t *j) {
    json_t *n = json_object();
    json_object_set_new(n, "type", json_string("NFC"));
    json_object_set_new(j, "normalizer", n);
}
static void set_lstrip(json_t *j) {
    json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0), "lstrip",
                        json_true());
}
static void set_vocab_string(json_t *j) {
    json_object_set_new(json_object_get(json_object_get(j, "model"), "vocab"), "Ġthe",
                        json_string("7"));
}
static void set_truncation(json_t *j) { json_object_set_new(j, "truncation", json_object()); }

static void refused(const char *base, const char *name, void (*edit)(json_t *), const char *what) {
    Tokenizer *t = (Tokenizer *)1;
    const char *path = edited(base, name, edit);
    ck_assert_int_eq(tok_load(path, &t, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_ptr_null(t);
    ASSERT_ERR_HAS(path);
    ASSERT_ERR_HAS(what);
}

START_TEST(test_refused) {
    refused("gpt2.json", "wp.json", set_wordpiece,
            "model.type is \"WordPiece\": pptrain reads only BPE tokenizers");
    refused("gpt2.json", "uni.json", set_unigram, "model.type is \"Unigram\"");
    refused("llama3.json", "digits.json", set_digits,
            "pre_tokenizer.pretokenizers[1].type \"Digits\" is not supported");
    refused("gpt2.json", "merge.json", set_merge_unknown,
            "model.merges[3] \"Ġ\" + \"zzqx\": \"zzqx\" is not in model.vocab");
    refused("sp.json", "nfc.json", set_nfc, "normalizer.type \"NFC\" is not supported");
    refused("gpt2.json", "lstrip.json", set_lstrip,
            "added_tokens[0] \"<|endoftext|>\" has lstrip set: not supported");
    refused("gpt2.json", "vocab.json", set_vocab_string,
            "model.vocab entry \"Ġthe\" must be an id (an integer >= 0), not a string");
    refused("gpt2.json", "trunc.json", set_truncation, "truncation is set");

    /* not JSON; not there */
    Tokenizer *t = NULL;
    FILE *f = fopen(tmp("broken.json"), "w");
    fputs("{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0,}}", f);
    fclose(f);
    ck_assert_int_eq(tok_load(tmp("broken.json"), &t, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS(tmp("broken.json"));
    ASSERT_ERR_HAS("not valid JSON");
    ASSERT_ERR_HAS("line 2");
    ck_assert_int_eq(tok_load(tmp("absent.json"), &t, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("cannot open tokenizer file");
    f = fopen(tmp("array.json"), "w");
    fputs("[1, 2]", f);
    fclose(f);
    ck_assert_int_eq(tok_load(tmp("array.json"), &t, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("is not a JSON object");
}
END_TEST

static Suite *tok_suite(void) {
    Suite *s = suite_create("tok");
    TCase *tc = tcase_create("library");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120); /* the sanitizer build on a slow machine */
    tcase_add_test(tc, test_library_ids);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_special_tokens);
    tcase_add_test(tc, test_long_word);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    tc = tcase_create("refused");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return check_run(tok_suite(), 0); }
