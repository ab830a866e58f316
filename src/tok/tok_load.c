/* tok_load.c — tokenizer.json (the Hugging Face tokenizers library's file) read with
 * jansson into a Tokenizer, every field checked, anything pptrain would not encode as the
 * library does refused with the file and the field named.
 *
 * [Note: tokenizer.json support]
 * Read: model BPE (vocab; merges as "a b" strings or [a, b] pairs, a later duplicate
 * ranking as the library ranks it; unk_token, fuse_unk, byte_fallback, ignore_merges;
 * dropout null or 0); added_tokens (special or not, normalized or not, matched leftmost
 * longest); normalizer null, Sequence, Prepend, Replace with a String pattern, NFC (Qwen2),
 * NFD, NFKC, NFKD (utf8proc: [Note: Unicode 9.0 normalization] in tok_unicode.c);
 * pre_tokenizer null, Sequence, Split (a Regex or String pattern, behavior Isolated or
 * Removed, not inverted), ByteLevel (add_prefix_space, use_regex with GPT-2's pattern;
 * last of a Sequence), Metaspace (replacement, prepend_scheme first, always or never,
 * split; the older add_prefix_space: non-legacy Llama 2 / Mistral files; [Note:
 * Metaspace] in tok_encode.c); post_processor null, ByteLevel (no effect on ids),
 * Sequence, TemplateProcessing (its single template: special tokens around $A); decoder
 * null, ByteLevel, Sequence, Replace (String), ByteFallback, Fuse, Strip, Metaspace.
 * Refused, naming the type or field: any other model (WordPiece, Unigram, WordLevel),
 * normalizer (Precompiled, Lowercase, Strip, StripAccents, BertNormalizer, NMT, Replace
 * with a Regex), pre-tokenizer (Digits, Whitespace, WhitespaceSplit, Punctuation,
 * BertPreTokenizer, UnicodeScripts, CharDelimiterSplit), post-processor (Bert, Roberta),
 * decoder (WordPiece, BPEDecoder, CTC); truncation or padding set;
 * continuing_subword_prefix or end_of_word_suffix; added tokens with lstrip, rstrip or
 * single_word; Split with invert or another behavior; what the library itself refuses to
 * load (a Metaspace replacement of more than one character, add_prefix_space false with a
 * prepend_scheme other than never). Ignored: trim_offsets (offsets only), type ids, the
 * pair template, version, Metaspace's str_rep. Regexes run in PCRE2 with UTF and UCP,
 * which agrees with Oniguruma (the library's engine) on GPT-2's, Llama 3's and Qwen2's
 * patterns; \s differs on U+180E only. */
#define _GNU_SOURCE /* memmem, qsort_r */
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define GPT2_PATTERN                                                                               \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct {
    Tokenizer *t;
    char *err;
    size_t errlen;
} Load;

/* "PATH: FIELD: message" (FIELD may be NULL); returns PP_EUSAGE */
static int bad(Load *L, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(Load *L, const char *field, const char *fmt, ...) {
    char msg[PP_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (field) return pp_errf(L->err, L->errlen, PP_EUSAGE, "%s: %s %s", L->t->path, field, msg);
    return pp_errf(L->err, L->errlen, PP_EUSAGE, "%s: %s", L->t->path, msg);
}

static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static TokStr put_str(Tokenizer *t, const char *s, size_t n) {
    if (t->blob_len + n + 1 > t->blob_cap) {
        size_t cap = t->blob_cap ? t->blob_cap : 4096;
        while (cap < t->blob_len + n + 1) cap *= 2;
        char *p = realloc(t->blob, cap);
        if (!p) PP_DIE("out of memory for %zu bytes of token strings", cap);
        t->blob = p, t->blob_cap = cap;
    }
    memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = 0;
    TokStr r = {(uint32_t)t->blob_len, (uint32_t)n};
    t->blob_len += n + 1;
    return r;
}

/* object member `key` of obj as a string (required), into *s */
static int get_string(Load *L, const json_t *obj, const char *field, const char *key, TokStr *s) {
    json_t *v = json_object_get(obj, key);
    if (!v || !json_is_string(v))
        return bad(L, field, "needs \"%s\" as a string, not %s", key, v ? kind(v) : "nothing");
    *s = put_str(L->t, json_string_value(v), json_string_length(v));
    return PP_OK;
}

/* optional boolean member; absent or null is `dflt` */
static int get_bool(Load *L, const json_t *obj, const char *field, const char *key, int dflt,
                    int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return *out = dflt, PP_OK;
    if (!json_is_boolean(v))
        return bad(L, field, "member \"%s\" must be a boolean, not %s", key, kind(v));
    *out = json_is_true(v);
    return PP_OK;
}

/* the "type" of a component, or an error */
static int get_type(Load *L, const json_t *v, const char *field, const char **type) {
    if (!json_is_object(v)) return bad(L, field, "must be an object or null, not %s", kind(v));
    json_t *ty = json_object_get(v, "type");
    if (!json_is_string(ty)) return bad(L, field, "has no \"type\" string");
    *type = json_string_value(ty);
    return PP_OK;
}

/* a {"String": s} pattern; Regex refused where only strings are read */
static int get_string_pattern(Load *L, const json_t *v, const char *field, TokStr *s) {
    json_t *p = json_object_get(v, "pattern"), *str = p ? json_object_get(p, "String") : NULL;
    if (!json_is_string(str))
        return bad(L, field,
                   "pattern must be {\"String\": ...} (a Regex pattern is not supported "
                   "here)");
    *s = put_str(L->t, json_string_value(str), json_string_length(str));
    return PP_OK;
}

/* ---- model ---------------------------------------------------------------------------- */

/* [Note: sparse ids]
 * The tables by id (vocab_str, added_of, the vocabulary's hash map) take about 20 bytes per
 * id up to the largest, so an id far above the number of tokens the file defines (a
 * 16 kB file with one token at id 10^9: 20 GB) is refused, naming the token: every id
 * must be below 2 x the tokens (vocabulary entries and added tokens) + TOK_ID_SLACK. Real
 * vocabularies are dense, or have a few holes; the slack leaves room for a small test
 * tokenizer with added tokens at high ids. The tables then grow with the file, as the
 * vocabulary itself does. */
#define TOK_ID_SLACK (1 << 20)

static int dense_id(Load *L, const char *field, const char *name, json_int_t id, size_t ntok) {
    if (id < (json_int_t)(2 * ntok + TOK_ID_SLACK)) return PP_OK;
    return bad(L, field,
               "gives \"%s\" the id %lld, but the file defines only %zu tokens: ids that sparse "
               "are not supported (each id must be below 2 x the tokens + %d)",
               name, (long long)id, ntok, TOK_ID_SLACK);
}

/* The vocabulary's ids, checked; t->n_ids = 1 + the largest. ntok: the tokens the file
 * defines ([Note: sparse ids]). */
static int load_vocab(Load *L, const json_t *vocab, size_t ntok) {
    Tokenizer *t = L->t;
    if (!json_is_object(vocab)) return bad(L, "model.vocab", "must be an object");
    const char *key;
    json_t *v;
    int64_t max = -1;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= INT32_MAX / 2)
            return bad(L, "model.vocab", "entry \"%s\" must be an id (an integer >= 0), not %s",
                       key, kind(v));
        int rc = dense_id(L, "model.vocab", key, json_integer_value(v), ntok);
        if (rc) return rc;
        if (json_integer_value(v) > max) max = json_integer_value(v);
    }
    t->n_ids = (int32_t)(max + 1);
    return PP_OK;
}

static int fill_vocab(Load *L, const json_t *vocab) {
    Tokenizer *t = L->t;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->vocab_str[id].len != UINT32_MAX)
            return bad(L, "model.vocab", "gives id %d to both \"%s\" and \"%s\"", id,
                       tok_s(t, t->vocab_str[id]), key);
        t->vocab_str[id] = put_str(t, key, strlen(key));
    }
    tok_map_build(&t->vocab, t, t->vocab_str, t->n_ids);
    return PP_OK;
}

static int32_t vocab_id(const Tokenizer *t, const char *s, size_t n) {
    return tok_map_get(&t->vocab, t, t->vocab_str, s, n);
}

static int load_merges(Load *L, const json_t *merges) {
    Tokenizer *t = L->t;
    if (!json_is_array(merges)) return bad(L, "model.merges", "must be an array");
    size_t n = json_array_size(merges);
    tok_pairs_init(&t->merges, n);
    char field[64], *joined = NULL;
    size_t joined_cap = 0;
    int rc = PP_OK;
    for (size_t i = 0; i < n && rc == PP_OK; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t na, nb;
        snprintf(field, sizeof field, "model.merges[%zu]", i);
        if (i > 0 && json_is_string(m) != json_is_string(json_array_get(merges, 0))) {
            /* the library reads either form, not a mix */
            rc = bad(L, field,
                     "is %s, but model.merges[0] is %s: the merges must be all \"a b\" "
                     "strings or all [\"a\", \"b\"] pairs",
                     kind(m), kind(json_array_get(merges, 0)));
            break;
        }
        if (json_is_string(m)) { /* "a b": two tokens around the one space */
            a = json_string_value(m);
            const char *sp = memchr(a, ' ', json_string_length(m));
            if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - a))) {
                rc = bad(L, field, "\"%s\" is not two tokens separated by one space", a);
                break;
            }
            na = (size_t)(sp - a), b = sp + 1, nb = json_string_length(m) - na - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)),
            na = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)),
            nb = json_string_length(json_array_get(m, 1));
        } else {
            rc = bad(L, field, "must be \"a b\" or [\"a\", \"b\"], not %s", kind(m));
            break;
        }
        if (na + nb + 1 > joined_cap) {
            joined_cap = 2 * (na + nb + 1);
            free(joined);
            joined = pp_malloc(joined_cap);
        }
        memcpy(joined, a, na), memcpy(joined + na, b, nb);
        int32_t ia = vocab_id(t, a, na), ib = vocab_id(t, b, nb), im = vocab_id(t, joined, na + nb);
        if (ia < 0)
            rc = bad(L, field, "\"%.*s\" + \"%.*s\": \"%.*s\" is not in model.vocab", (int)na, a,
                     (int)nb, b, (int)na, a);
        else if (ib < 0)
            rc = bad(L, field, "\"%.*s\" + \"%.*s\": \"%.*s\" is not in model.vocab", (int)na, a,
                     (int)nb, b, (int)nb, b);
        else if (im < 0)
            rc = bad(L, field,
                     "\"%.*s\" + \"%.*s\": the merged \"%.*s\" is not in "
                     "model.vocab",
                     (int)na, a, (int)nb, b, (int)(na + nb), joined);
        else
            tok_pairs_put(&t->merges, ia, ib, (int32_t)i, im);
    }
    free(joined);
    return rc;
}

static int load_model(Load *L, const json_t *root) {
    Tokenizer *t = L->t;
    json_t *m = json_object_get(root, "model");
    const char *type = NULL;
    if (!m) return bad(L, NULL, "has no \"model\"");
    int rc = get_type(L, m, "model", &type);
    if (rc) return rc;
    if (strcmp(type, "BPE") != 0)
        return bad(L, "model.type",
                   "is \"%s\": pptrain reads only BPE tokenizers (not WordPiece, Unigram or "
                   "WordLevel)",
                   type);
    json_t *drop = json_object_get(m, "dropout");
    if (drop && !json_is_null(drop) && !(json_is_number(drop) && json_number_value(drop) == 0))
        return bad(L, "model.dropout",
                   "is set: BPE dropout is not supported (encode would be "
                   "random)");
    const char *nulls[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(m, nulls[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return bad(L, "model", "has %s set: not supported", nulls[i]);
    }
    if ((rc = get_bool(L, m, "model", "fuse_unk", 0, &t->fuse_unk)) ||
        (rc = get_bool(L, m, "model", "byte_fallback", 0, &t->byte_fallback)) ||
        (rc = get_bool(L, m, "model", "ignore_merges", 0, &t->ignore_merges)))
        return rc;
    json_t *vocab = json_object_get(m, "vocab"), *added = json_object_get(root, "added_tokens");
    size_t ntok = json_object_size(vocab) + json_array_size(added);
    if ((rc = load_vocab(L, vocab, ntok))) return rc;
    /* added tokens may take ids past the vocabulary's: t->n_ids grows here, and load_added
     * checks the rest of each */
    if (json_is_array(added)) {
        size_t i;
        json_t *a, *c;
        char field[64];
        json_array_foreach(added, i, a) {
            json_t *id = json_object_get(a, "id");
            if (!json_is_integer(id) || json_integer_value(id) < t->n_ids ||
                json_integer_value(id) >= INT32_MAX / 2)
                continue;
            snprintf(field, sizeof field, "added_tokens[%zu]", i);
            c = json_object_get(a, "content");
            if ((rc = dense_id(L, field, json_is_string(c) ? json_string_value(c) : "",
                               json_integer_value(id), ntok)))
                return rc;
            t->n_ids = (int32_t)json_integer_value(id) + 1;
        }
    }
    t->vocab_str = pp_malloc((size_t)t->n_ids * sizeof *t->vocab_str);
    memset(t->vocab_str, 0xff, (size_t)t->n_ids * sizeof *t->vocab_str);
    if ((rc = fill_vocab(L, vocab))) return rc;
    if ((rc = load_merges(L, json_object_get(m, "merges")))) return rc;
    t->unk_id = -1;
    json_t *unk = json_object_get(m, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) return bad(L, "model.unk_token", "must be a string or null");
        t->unk_id = vocab_id(t, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return bad(L, "model.unk_token", "\"%s\" is not in model.vocab",
                       json_string_value(unk));
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->fallback_id[b] = vocab_id(t, name, 6);
    }
    return PP_OK;
}

/* ---- added tokens ---------------------------------------------------------------------- */

static int load_added(Load *L, const json_t *root) {
    Tokenizer *t = L->t;
    json_t *added = json_object_get(root, "added_tokens");
    t->added_of = pp_malloc((size_t)t->n_ids * sizeof *t->added_of);
    for (int32_t i = 0; i < t->n_ids; i++) t->added_of[i] = -1;
    if (!added || json_is_null(added)) return PP_OK;
    if (!json_is_array(added)) return bad(L, "added_tokens", "must be an array");
    t->added = pp_calloc(json_array_size(added) + 1, sizeof *t->added);
    size_t i;
    json_t *a;
    char field[64];
    json_array_foreach(added, i, a) {
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        TokAdded *d = &t->added[t->n_added];
        json_t *id = json_object_get(a, "id");
        int rc, flag;
        if (!json_is_object(a)) return bad(L, field, "must be an object");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= t->n_ids)
            return bad(L, field, "needs an \"id\" integer >= 0");
        if ((rc = get_string(L, a, field, "content", &d->s))) return rc;
        if (d->s.len == 0) return bad(L, field, "has an empty content");
        if ((rc = get_bool(L, a, field, "special", 0, &d->special)) ||
            (rc = get_bool(L, a, field, "normalized", !d->special, &d->normalized)))
            return rc;
        const char *refused[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++) {
            if ((rc = get_bool(L, a, field, refused[k], 0, &flag))) return rc;
            if (flag)
                return bad(L, field, "\"%s\" has %s set: not supported", tok_s(t, d->s),
                           refused[k]);
        }
        d->id = (int32_t)json_integer_value(id);
        int32_t vid = vocab_id(t, tok_s(t, d->s), d->s.len);
        if (vid >= 0 && vid != d->id) /* the library would take vid and ignore d->id */
            return bad(L, field,
                       "\"%s\" has id %d, but model.vocab gives it id %d: the tokenizers "
                       "library encodes it as %d; make the two ids agree",
                       tok_s(t, d->s), d->id, vid, vid);
        if (t->added_of[d->id] >= 0) return bad(L, field, "repeats id %d", d->id);
        t->added_of[d->id] = t->n_added++;
    }
    return PP_OK;
}

static int added_cmp(const void *pa, const void *pb, void *pt) {
    const Tokenizer *t = pt;
    const TokAdded *a = pa, *b = pb;
    unsigned char ca = (unsigned char)tok_s(t, a->s)[0], cb = (unsigned char)tok_s(t, b->s)[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    return a->s.len != b->s.len ? (a->s.len > b->s.len ? -1 : 1) : 0;
}

static void index_added(TokAdded *list, int n, int first[257], Tokenizer *t) {
    qsort_r(list, (size_t)n, sizeof *list, added_cmp, t);
    int k = 0;
    for (int b = 0; b < 256; b++) {
        first[b] = k;
        while (k < n && (unsigned char)tok_s(t, list[k].s)[0] == b) k++;
    }
    first[256] = n;
}

/* the two match lists of the added tokens; normalized ones through the normalizer
 * (as the library normalizes their content) */
static void split_added(Tokenizer *t) {
    t->raw_added = pp_calloc((size_t)t->n_added + 1, sizeof *t->raw_added);
    t->norm_added = pp_calloc((size_t)t->n_added + 1, sizeof *t->norm_added);
    for (int i = 0; i < t->n_added; i++) {
        TokAdded d = t->added[i];
        if (!d.normalized) {
            t->raw_added[t->n_raw++] = d;
            continue;
        }
        TokText norm = {0};
        tok_normalize(t, tok_s(t, d.s), d.s.len, &norm);
        if (norm.len == 0) continue;
        d.s = put_str(t, norm.p, norm.len);
        t->norm_added[t->n_norm_added++] = d;
        tok_text_free(&norm);
    }
    index_added(t->raw_added, t->n_raw, t->raw_first, t);
    index_added(t->norm_added, t->n_norm_added, t->norm_first, t);
}

/* ---- normalizer, pre-tokenizer ---------------------------------------------------------- */

/* A Sequence component: each element of v's array `key` through `load`, named
 * FIELD.KEY[i] in messages. */
typedef int (*LoadFn)(Load *L, const json_t *v, const char *field);
static int load_sequence(Load *L, const json_t *v, const char *field, const char *key,
                         LoadFn load) {
    json_t *list = json_object_get(v, key), *e;
    char sub[128];
    size_t i;
    int rc;
    if (!json_is_array(list)) return bad(L, field, "(Sequence) needs \"%s\"", key);
    json_array_foreach(list, i, e) {
        snprintf(sub, sizeof sub, "%s.%s[%zu]", field, key, i);
        if ((rc = load(L, e, sub))) return rc;
    }
    return PP_OK;
}

/* TOK_NFC .. TOK_NFKD for the normalizer type, or -1 */
static int unicode_form(const char *type) {
    const char *forms[] =
        {[TOK_NFC] = "NFC", [TOK_NFD] = "NFD", [TOK_NFKC] = "NFKC", [TOK_NFKD] = "NFKD"};
    for (int f = 0; f < 4; f++)
        if (strcmp(type, forms[f]) == 0) return f;
    return -1;
}

static int load_normalizer(Load *L, const json_t *v, const char *field) {
    Tokenizer *t = L->t;
    const char *type = NULL;
    char sub[128];
    if (!v || json_is_null(v)) return PP_OK;
    int rc = get_type(L, v, field, &type);
    if (rc) return rc;
    if (strcmp(type, "Sequence") == 0)
        return load_sequence(L, v, field, "normalizers", load_normalizer);
    if (t->n_norm == TOK_MAX_STEPS) return bad(L, field, "has over %d steps", TOK_MAX_STEPS);
    TokNorm *s = &t->norm[t->n_norm];
    if (strcmp(type, "Prepend") == 0) {
        s->kind = TOK_NORM_PREPEND;
        rc = get_string(L, v, field, "prepend", &s->a);
    } else if (strcmp(type, "Replace") == 0) {
        s->kind = TOK_NORM_REPLACE;
        if (!(rc = get_string_pattern(L, v, field, &s->a)))
            rc = get_string(L, v, field, "content", &s->b);
        if (!rc && s->a.len == 0) rc = bad(L, field, "replaces an empty string");
    } else if (unicode_form(type) >= 0) {
        s->kind = TOK_NORM_UNICODE;
        s->form = unicode_form(type);
    } else {
        snprintf(sub, sizeof sub, "%s.type", field);
        return bad(L, sub,
                   "\"%s\" is not supported (pptrain reads Sequence, Prepend, Replace, NFC, "
                   "NFD, NFKC, NFKD)",
                   type);
    }
    if (!rc) t->n_norm++;
    return rc;
}

static int compile(Load *L, const char *field, const char *pat, size_t n, uint32_t extra,
                   pcre2_code **out) {
    int code;
    PCRE2_SIZE at;
    /* \C (one byte, inside a character) would cut words that the encoder reads as UTF-8;
     * the library's Oniguruma refuses it too */
    *out = pcre2_compile((PCRE2_SPTR)pat, n,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C | extra, &code, &at, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return bad(L, field, "pattern does not compile in PCRE2: %s at offset %zu", msg,
                   (size_t)at);
    }
    /* JIT where this PCRE2 has it; pcre2_match uses the interpreter otherwise */
    (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    return PP_OK;
}

static int add_pre(Load *L, const char *field, TokPre **s) {
    *s = NULL;
    if (L->t->byte_level)
        return bad(L, field,
                   "follows ByteLevel: pptrain reads ByteLevel only as the last "
                   "pre-tokenizer");
    if (L->t->n_pre == TOK_MAX_STEPS) return bad(L, field, "has over %d steps", TOK_MAX_STEPS);
    *s = &L->t->pre[L->t->n_pre++];
    return PP_OK;
}

static int load_split(Load *L, const json_t *v, const char *field) {
    TokPre *s;
    int rc = add_pre(L, field, &s), invert = 0;
    if (rc) return rc;
    json_t *p = json_object_get(v, "pattern"), *re = p ? json_object_get(p, "Regex") : NULL;
    json_t *str = p ? json_object_get(p, "String") : NULL, *beh = json_object_get(v, "behavior");
    if ((rc = get_bool(L, v, field, "invert", 0, &invert))) return rc;
    if (invert) return bad(L, field, "(Split) has invert set: not supported");
    if (!json_is_string(beh)) return bad(L, field, "(Split) needs a \"behavior\" string");
    const char *b = json_string_value(beh);
    if (strcmp(b, "Removed") == 0)
        s->removed = 1;
    else if (strcmp(b, "Isolated") != 0)
        return bad(L, field, "(Split) behavior \"%s\" is not supported (Isolated, Removed are)", b);
    s->kind = TOK_PRE_SPLIT;
    json_t *pat = json_is_string(re) ? re : str;
    if (json_is_string(pat))
        s->pat = put_str(L->t, json_string_value(pat), json_string_length(pat));
    if (json_is_string(re))
        return compile(L, field, json_string_value(re), json_string_length(re), 0, &s->re);
    if (json_is_string(str) && json_string_length(str) > 0)
        return compile(L, field, json_string_value(str), json_string_length(str), PCRE2_LITERAL,
                       &s->re);
    return bad(L, field, "(Split) needs a pattern {\"Regex\": ...} or {\"String\": ...}");
}

/* Metaspace's fields, as the library reads them for the pre-tokenizer and the decoder:
 * replacement (one character), prepend_scheme (default always), the older
 * add_prefix_space (false needs prepend_scheme never, as the library requires), split
 * (default true) */
static int load_metaspace(Load *L, const json_t *v, const char *field, TokStr *rep, int *prepend,
                          int *split) {
    int rc, prefix = 1;
    json_t *scheme = json_object_get(v, "prepend_scheme");
    if ((rc = get_string(L, v, field, "replacement", rep))) return rc;
    const char *r = tok_s(L->t, *rep);
    if (rep->len == 0 || tok_utf8_next((const unsigned char *)r, rep->len) != (int)rep->len)
        return bad(L, field, "(Metaspace) replacement \"%s\" must be one character", r);
    *prepend = TOK_PREPEND_ALWAYS;
    if (scheme && !json_is_null(scheme)) {
        const char *names[] = {[TOK_PREPEND_NEVER] = "never",
                               [TOK_PREPEND_FIRST] = "first",
                               [TOK_PREPEND_ALWAYS] = "always"};
        *prepend = -1;
        for (int k = 0; k < 3; k++)
            if (json_is_string(scheme) && strcmp(json_string_value(scheme), names[k]) == 0)
                *prepend = k;
        if (*prepend < 0)
            return bad(L, field,
                       "(Metaspace) prepend_scheme must be \"first\", \"always\" or "
                       "\"never\"");
    }
    if ((rc = get_bool(L, v, field, "add_prefix_space", 1, &prefix)) ||
        (rc = get_bool(L, v, field, "split", 1, split)))
        return rc;
    if (!prefix && *prepend != TOK_PREPEND_NEVER)
        return bad(L, field,
                   "(Metaspace) has add_prefix_space false but prepend_scheme \"%s\": the "
                   "tokenizers library refuses this file too (make prepend_scheme \"never\")",
                   *prepend == TOK_PREPEND_FIRST ? "first" : "always");
    return PP_OK;
}

static int load_pre(Load *L, const json_t *v, const char *field) {
    Tokenizer *t = L->t;
    const char *type = NULL;
    char sub[128];
    if (!v || json_is_null(v)) return PP_OK;
    int rc = get_type(L, v, field, &type);
    if (rc) return rc;
    if (strcmp(type, "Sequence") == 0) return load_sequence(L, v, field, "pretokenizers", load_pre);
    if (strcmp(type, "Split") == 0) return load_split(L, v, field);
    if (strcmp(type, "ByteLevel") == 0) {
        int prefix = 0, regex = 0;
        TokPre *s = NULL;
        if ((rc = get_bool(L, v, field, "add_prefix_space", 1, &prefix)) ||
            (rc = get_bool(L, v, field, "use_regex", 1, &regex)))
            return rc;
        if (prefix) {
            if ((rc = add_pre(L, field, &s))) return rc;
            s->kind = TOK_PRE_PREFIX_SPACE;
        }
        if (regex) {
            if ((rc = add_pre(L, field, &s))) return rc;
            s->kind = TOK_PRE_SPLIT;
            s->pat = put_str(t, GPT2_PATTERN, strlen(GPT2_PATTERN));
            if ((rc = compile(L, field, GPT2_PATTERN, PCRE2_ZERO_TERMINATED, 0, &s->re))) return rc;
        }
        t->byte_level = 1;
        for (unsigned b = 0; b < 256; b++) {
            char c[4];
            int n = tok_utf8_put(tok_byte_char(b), c);
            t->byte_char_id[b] = vocab_id(t, c, (size_t)n);
        }
        return PP_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        TokPre *s = NULL;
        if ((rc = add_pre(L, field, &s))) return rc;
        s->kind = TOK_PRE_METASPACE;
        return load_metaspace(L, v, field, &s->rep, &s->prepend, &s->split);
    }
    snprintf(sub, sizeof sub, "%s.type", field);
    return bad(L, sub,
               "\"%s\" is not supported (pptrain reads Sequence, Split, ByteLevel, Metaspace)",
               type);
}

/* ---- post-processor, decoder ------------------------------------------------------------ */

static int load_template(Load *L, const json_t *v, const char *field) {
    Tokenizer *t = L->t;
    json_t *single = json_object_get(v, "single"), *specials = json_object_get(v, "special_tokens");
    if (!json_is_array(single)) return bad(L, field, "(TemplateProcessing) needs \"single\"");
    if (t->has_template) return bad(L, field, "is a second TemplateProcessing");
    size_t n = json_array_size(single), i;
    int seen_a = 0;
    json_t *item;
    t->tmpl_pre = pp_calloc(n * 8 + 1, sizeof *t->tmpl_pre);
    t->tmpl_post = pp_calloc(n * 8 + 1, sizeof *t->tmpl_post);
    json_array_foreach(single, i, item) {
        json_t *sp = json_object_get(item, "SpecialToken"),
               *seq = json_object_get(item, "Sequence");
        if (seq) {
            json_t *id = json_object_get(seq, "id");
            if (seen_a || !json_is_string(id) || strcmp(json_string_value(id), "A") != 0)
                return bad(L, field, "single template must hold $A once");
            seen_a = 1;
            continue;
        }
        json_t *name = sp ? json_object_get(sp, "id") : NULL;
        if (!json_is_string(name)) return bad(L, field, "single[%zu] is not a SpecialToken", i);
        json_t *def = json_object_get(specials, json_string_value(name));
        json_t *ids = json_object_get(def, "ids"), *e;
        size_t k;
        if (!json_is_array(ids) || json_array_size(ids) > 8)
            return bad(L, field, "special_tokens has no ids for \"%s\"", json_string_value(name));
        json_array_foreach(ids, k, e) {
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                json_integer_value(e) >= t->n_ids)
                return bad(L, field, "special_tokens \"%s\" has an id outside the vocabulary",
                           json_string_value(name));
            if (seen_a)
                t->tmpl_post[t->n_tmpl_post++] = (int32_t)json_integer_value(e);
            else
                t->tmpl_pre[t->n_tmpl_pre++] = (int32_t)json_integer_value(e);
        }
    }
    if (!seen_a) return bad(L, field, "single template must hold $A once");
    t->has_template = 1;
    return PP_OK;
}

static int load_post(Load *L, const json_t *v, const char *field) {
    const char *type = NULL;
    char sub[128];
    if (!v || json_is_null(v)) return PP_OK;
    int rc = get_type(L, v, field, &type);
    if (rc) return rc;
    if (strcmp(type, "Sequence") == 0) return load_sequence(L, v, field, "processors", load_post);
    if (strcmp(type, "ByteLevel") == 0) return PP_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0) return load_template(L, v, field);
    snprintf(sub, sizeof sub, "%s.type", field);
    return bad(L, sub,
               "\"%s\" is not supported (pptrain reads Sequence, ByteLevel, "
               "TemplateProcessing)",
               type);
}

static int load_decoder(Load *L, const json_t *v, const char *field) {
    Tokenizer *t = L->t;
    const char *type = NULL;
    char sub[128];
    if (!v || json_is_null(v)) return PP_OK;
    int rc = get_type(L, v, field, &type);
    if (rc) return rc;
    t->has_decoder = 1;
    if (strcmp(type, "Sequence") == 0) return load_sequence(L, v, field, "decoders", load_decoder);
    if (t->n_dec == TOK_MAX_STEPS) return bad(L, field, "has over %d steps", TOK_MAX_STEPS);
    TokDec *d = &t->dec[t->n_dec];
    if (strcmp(type, "ByteLevel") == 0)
        d->kind = TOK_DEC_BYTELEVEL;
    else if (strcmp(type, "ByteFallback") == 0)
        d->kind = TOK_DEC_BYTEFALLBACK;
    else if (strcmp(type, "Fuse") == 0)
        d->kind = TOK_DEC_FUSE;
    else if (strcmp(type, "Replace") == 0) {
        d->kind = TOK_DEC_REPLACE;
        if (!(rc = get_string_pattern(L, v, field, &d->a)))
            rc = get_string(L, v, field, "content", &d->b);
        if (!rc && d->a.len == 0) rc = bad(L, field, "replaces an empty string");
    } else if (strcmp(type, "Strip") == 0) {
        json_t *start = json_object_get(v, "start"), *stop = json_object_get(v, "stop");
        d->kind = TOK_DEC_STRIP;
        if ((rc = get_string(L, v, field, "content", &d->a))) return rc;
        if (tok_utf8_next((const unsigned char *)tok_s(t, d->a), d->a.len) != (int)d->a.len)
            return bad(L, field, "(Strip) content must be one character");
        if (!json_is_integer(start) || !json_is_integer(stop) || json_integer_value(start) < 0 ||
            json_integer_value(stop) < 0 || json_integer_value(start) > INT32_MAX ||
            json_integer_value(stop) > INT32_MAX)
            return bad(L, field, "(Strip) needs \"start\" and \"stop\" counts (0 .. 2^31 - 1)");
        d->start = (int)json_integer_value(start), d->stop = (int)json_integer_value(stop);
    } else if (strcmp(type, "Metaspace") == 0) {
        int split;
        d->kind = TOK_DEC_METASPACE;
        rc = load_metaspace(L, v, field, &d->a, &d->prepend, &split);
    } else {
        snprintf(sub, sizeof sub, "%s.type", field);
        return bad(L, sub,
                   "\"%s\" is not supported (pptrain reads Sequence, ByteLevel, Replace, "
                   "ByteFallback, Fuse, Strip, Metaspace)",
                   type);
    }
    if (!rc) t->n_dec++;
    return rc;
}

/* ---- the whole file --------------------------------------------------------------------- */

static int load_root(Load *L, const json_t *root) {
    int rc;
    const char *known[] = {"version",      "truncation",     "padding",
                           "added_tokens", "normalizer",     "pre_tokenizer",
                           "model",        "post_processor", "decoder"};
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)root, key, val) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k]) != 0) k++;
        if (k == sizeof known / sizeof *known) /* a misspelt component would be ignored */
            return bad(L, NULL,
                       "has an unknown member \"%s\" at the top (the tokenizers library refuses "
                       "it too; its members are version, truncation, padding, added_tokens, "
                       "normalizer, pre_tokenizer, model, post_processor, decoder)",
                       key);
    }
    const char *unset[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(root, unset[i]);
        if (v && !json_is_null(v))
            return bad(L, unset[i], "is set: pptrain encodes whole texts (set it to null)");
    }
    if ((rc = load_model(L, root)) || (rc = load_added(L, root)) ||
        (rc = load_normalizer(L, json_object_get(root, "normalizer"), "normalizer")) ||
        (rc = load_pre(L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer")) ||
        (rc = load_post(L, json_object_get(root, "post_processor"), "post_processor")) ||
        (rc = load_decoder(L, json_object_get(root, "decoder"), "decoder")))
        return rc;
    split_added(L->t);
    return PP_OK;
}

int tok_load(const char *path, Tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    char *text;
    size_t len;
    char what[PP_PATH_MAX + 32];
    snprintf(what, sizeof what, "tokenizer file '%s'", path);
    int rc = pp_read_file_max(path, what, (size_t)1 << 30, &text, &len, err, errlen);
    if (rc) return rc;
    Tokenizer *t = pp_calloc(1, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", path);
    Load L = {t, err, errlen};
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        rc = bad(&L, NULL, "not valid JSON: %s at line %d, column %d", je.text, je.line, je.column);
    else if (!json_is_object(root))
        rc = bad(&L, NULL, "is not a JSON object");
    else
        rc = load_root(&L, root);
    json_decref(root);
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return PP_OK;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    tok_map_free(&t->vocab);
    tok_pairs_free(&t->merges);
    free(t->vocab_str), free(t->added_of), free(t->added), free(t->raw_added);
    free(t->norm_added), free(t->tmpl_pre), free(t->tmpl_post), free(t->blob);
    free(t);
}

int32_t tok_vocab_size(const Tokenizer *t) { return t->n_ids; }

const char *tok_token_str(const Tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids) return NULL;
    TokStr s = t->added_of[id] >= 0 ? t->added[t->added_of[id]].s : t->vocab_str[id];
    if (s.len == UINT32_MAX) return NULL;
    if (len) *len = s.len;
    return tok_s(t, s);
}

int32_t tok_token_id(const Tokenizer *t, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].s.len == n && memcmp(tok_s(t, t->added[i].s), name, n) == 0)
            return t->added[i].id;
    return vocab_id(t, name, n);
}
