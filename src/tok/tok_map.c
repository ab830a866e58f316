/* tok_map.c — the tokenizer's hash maps (vocabulary: string -> id; merges: pair ->
 * rank and merged id), UTF-8 reading as the Unicode standard's "maximal subpart"
 * practice has it, and ByteLevel's byte <-> character map. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* FNV-1a, then a final mix: tokens are short */
uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ h >> 32;
}

static size_t table_size(size_t n) {
    size_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

void tok_map_build(TokMap *m, const Tokenizer *t, const TokStr *strs, int32_t n) {
    size_t size = table_size((size_t)n);
    m->slot = pp_malloc(size * sizeof *m->slot);
    m->mask = size - 1;
    for (size_t i = 0; i < size; i++) m->slot[i] = -1;
    for (int32_t id = 0; id < n; id++) {
        if (strs[id].len == UINT32_MAX) continue;
        size_t i = tok_hash(tok_s(t, strs[id]), strs[id].len) & m->mask;
        while (m->slot[i] >= 0) i = (i + 1) & m->mask;
        m->slot[i] = id;
    }
}

int32_t tok_map_get(const TokMap *m, const Tokenizer *t, const TokStr *strs, const char *s,
                    size_t n) {
    for (size_t i = tok_hash(s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (strs[id].len == n && memcmp(tok_s(t, strs[id]), s, n) == 0) return id;
    }
}

void tok_map_free(TokMap *m) {
    free(m->slot);
    m->slot = NULL;
}

void tok_pairs_init(TokPairMap *m, size_t n) {
    size_t size = table_size(n);
    m->key = pp_malloc(size * sizeof *m->key);
    m->rank = pp_malloc(size * sizeof *m->rank);
    m->merged = pp_malloc(size * sizeof *m->merged);
    m->mask = size - 1;
    memset(m->key, 0xff, size * sizeof *m->key);
}

void tok_pairs_put(TokPairMap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    size_t i = (h ^ h >> 29) & m->mask;
    while (m->key[i] != UINT64_MAX && m->key[i] != k) i = (i + 1) & m->mask;
    m->key[i] = k;
    m->rank[i] = rank;
    m->merged[i] = merged;
}

void tok_pairs_free(TokPairMap *m) {
    free(m->key);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

/* Table 3-7 of the Unicode standard: the well-formed byte sequences */
int tok_utf8_next(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return -1;
    size_t i = 1;
    for (; i <= (size_t)need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) return -(int)i;
        lo = 0x80, hi = 0xBF;
    }
    return need + 1;
}

void tok_text_append(TokText *b, const void *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) PP_DIE("out of memory growing a text buffer to %zu bytes", cap);
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void tok_text_lossy(TokText *b, const char *s, size_t n) {
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet appended */
    while (i < n) {
        int k = tok_utf8_next((const unsigned char *)s + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        tok_text_append(b, s + run, i - run);
        tok_text_append(b, "\xEF\xBF\xBD", 3);
        i += (size_t)-k;
        run = i;
    }
    tok_text_append(b, s + run, i - run);
}

void tok_text_free(TokText *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void tok_ids_free(TokIds *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

/* GPT-2's bytes_to_unicode: the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for
 * themselves; the other 68 take 256, 257, ... in byte order */
static int printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_char(unsigned b) {
    if (printable(b)) return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++) n += !printable(i);
    return 256 + n;
}

int tok_char_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!printable(b) && n-- == 0) return (int)b;
    return -1;
}

int tok_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12), o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18), o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t tok_utf8_get(const unsigned char *s, int len) {
    uint32_t cp = s[0];
    if (len > 1) cp &= 0xFFu >> (len + 1);
    for (int j = 1; j < len; j++) cp = cp << 6 | (s[j] & 0x3Fu);
    return cp;
}
