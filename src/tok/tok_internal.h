/* tok_internal.h — what src/tok/ shares: the loaded tokenizer's layout (its pipeline as
 * data), the hash maps of the vocabulary and the merges, UTF-8 and byte-level helpers.
 * Private to src/tok/. */
#ifndef PP_TOK_INTERNAL_H
#define PP_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define TOK_MAX_STEPS 8 /* normalizers, pre-tokenizer steps, decoders, each */

/* A string inside Tokenizer.blob. len == UINT32_MAX: none. */
typedef struct {
    uint32_t off, len;
} TokStr;

/* string -> id, open addressing over ids whose strings are `strs[id]` in `blob` */
typedef struct {
    int32_t *slot; /* [mask + 1], -1 empty */
    size_t mask;
} TokMap;

/* (left id, right id) -> (rank, merged id) */
typedef struct {
    uint64_t *key; /* left << 32 | right; UINT64_MAX empty */
    int32_t *rank, *merged;
    size_t mask;
} TokPairMap;

enum { TOK_NORM_PREPEND, TOK_NORM_REPLACE, TOK_NORM_UNICODE };
enum { TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD };
enum { TOK_PRE_SPLIT, TOK_PRE_PREFIX_SPACE, TOK_PRE_METASPACE };
/* Metaspace's prepend_scheme: where the replacement is put before a piece */
enum { TOK_PREPEND_NEVER, TOK_PREPEND_FIRST, TOK_PREPEND_ALWAYS };
enum {
    TOK_DEC_BYTELEVEL,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_METASPACE
};

typedef struct {
    int kind;
    TokStr a, b; /* PREPEND: a; REPLACE: a -> b */
    int form;    /* UNICODE: TOK_NFC .. TOK_NFKD */
} TokNorm;

typedef struct {
    int kind;
    pcre2_code *re; /* SPLIT: the pattern (JIT-compiled where PCRE2 could) */
    TokStr pat;     /* SPLIT: its text, for messages */
    int removed;    /* SPLIT: behavior Removed (else Isolated) */
    TokStr rep;     /* METASPACE: the replacement, one character */
    int prepend;    /* METASPACE: TOK_PREPEND_* */
    int split;      /* METASPACE: split before each replacement */
} TokPre;

typedef struct {
    int kind;
    TokStr a, b;     /* REPLACE: a -> b; STRIP: a (one character); METASPACE: a */
    int start, stop; /* STRIP */
    int prepend;     /* METASPACE: TOK_PREPEND_* */
} TokDec;

typedef struct {
    TokStr s;
    int32_t id;
    int special, normalized;
} TokAdded;

struct Tokenizer {
    char path[PP_PATH_MAX];
    char *blob; /* every string: vocabulary, added tokens, normalizer and decoder args */
    size_t blob_len, blob_cap;

    int32_t n_ids;     /* 1 + the largest id */
    TokStr *vocab_str; /* [n_ids] the model's vocabulary by id */
    int32_t *added_of; /* [n_ids] index into added[], or -1 */
    TokMap vocab;      /* model vocabulary: string -> id */
    TokPairMap merges;

    int32_t unk_id; /* -1: no unk_token */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t fallback_id[256]; /* byte_fallback: id of "<0xHH>", -1 absent */

    /* added tokens, each list ordered by first byte then longest first; first[b] ..
     * first[b + 1] are those starting with byte b */
    TokAdded *added;
    int n_added;
    TokAdded *raw_added, *norm_added; /* normalized false / true (content normalized) */
    int n_raw, n_norm_added;
    int raw_first[257], norm_first[257];

    TokNorm norm[TOK_MAX_STEPS];
    int n_norm;
    TokPre pre[TOK_MAX_STEPS];
    int n_pre;
    int byte_level;            /* words are mapped to ByteLevel's characters last */
    int32_t byte_char_id[256]; /* byte_level: id of the character of byte b, -1 absent */

    int has_template;
    int32_t *tmpl_pre, *tmpl_post; /* the single template's special ids around $A */
    int n_tmpl_pre, n_tmpl_post;

    TokDec dec[TOK_MAX_STEPS];
    int n_dec, has_decoder;
};

static inline const char *tok_s(const Tokenizer *t, TokStr s) { return t->blob + s.off; }

/* tok_map.c */
uint64_t tok_hash(const char *s, size_t n);
void tok_map_build(TokMap *m, const Tokenizer *t, const TokStr *strs, int32_t n);
int32_t tok_map_get(const TokMap *m, const Tokenizer *t, const TokStr *strs, const char *s,
                    size_t n);
void tok_map_free(TokMap *m);
void tok_pairs_init(TokPairMap *m, size_t n);
/* Set (a, b) -> (rank, merged); a later set of the same pair replaces it (the library
 * keeps the last of duplicated merges). */
void tok_pairs_put(TokPairMap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* The rank of (a, b) with *merged, or -1 when the pair does not merge. */
static inline int32_t tok_pairs_get(const TokPairMap *m, int32_t a, int32_t b, int32_t *merged) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    for (size_t i = (h ^ h >> 29) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) {
            *merged = m->merged[i];
            return m->rank[i];
        }
        if (m->key[i] == UINT64_MAX) return -1;
    }
}
void tok_pairs_free(TokPairMap *m);

/* The length of the maximal well-formed UTF-8 prefix of s[n] that is one character:
 * 1..4 for a character; -k (k >= 1) for k bytes that are the maximal ill-formed
 * subpart (one U+FFFD), as Python's decode(errors="replace") and Rust's
 * String::from_utf8_lossy count them. n >= 1. */
int tok_utf8_next(const unsigned char *s, size_t n);
/* Append s[n] to b with every maximal ill-formed subpart replaced by U+FFFD. */
void tok_text_lossy(TokText *b, const char *s, size_t n);
void tok_text_append(TokText *b, const void *s, size_t n);
/* ByteLevel's map: the code point of byte b, and back (-1 for other code points) */
uint32_t tok_byte_char(unsigned b);
int tok_char_byte(uint32_t cp);
/* tok_encode.c: s[n] through the tokenizer's normalizers into out (its len reset) */
void tok_normalize(const Tokenizer *t, const char *s, size_t n, TokText *out);
/* UTF-8 of cp into out[4]; returns its length */
int tok_utf8_put(uint32_t cp, char *out);
/* The code point of the valid UTF-8 character s[len] (len from tok_utf8_next) */
uint32_t tok_utf8_get(const unsigned char *s, int len);
/* tok_unicode.c: s[n] (valid UTF-8) in normalization form `form` (TOK_NFC ..) appended
 * to out, as the tokenizers library normalizes: [Note: Unicode 9.0 normalization] */
void tok_unicode_normalize(int form, const char *s, size_t n, TokText *out);

#endif
