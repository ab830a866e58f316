/* tok_decode.c — ids to text as the tokenizers library decodes: the tokens' strings
 * through the decoder chain (each decoder maps a list of strings to a list of strings,
 * the library's decode_chain), joined. */
#define _GNU_SOURCE /* memmem, qsort_r */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* a list of strings: string i is text.p[end[i-1] .. end[i]) */
typedef struct {
    TokText text;
    size_t *end;
    size_t n, cap;
} List;

static void list_push(List *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->end = realloc(l->end, l->cap * sizeof *l->end);
        if (!l->end) PP_DIE("out of memory for a list of %zu strings", l->cap);
    }
    tok_text_append(&l->text, s, n);
    l->end[l->n++] = l->text.len;
}

static const char *list_get(const List *l, size_t i, size_t *n) {
    size_t start = i ? l->end[i - 1] : 0;
    *n = l->end[i] - start;
    return l->text.p + start;
}

static void list_clear(List *l) { l->n = 0, l->text.len = 0; }

static void list_free(List *l) {
    tok_text_free(&l->text);
    free(l->end);
}

/* ByteLevel: each token's characters back to bytes (a token with a character outside
 * the map stays as it is), all joined and read as UTF-8 with U+FFFD for what is not */
static void dec_bytelevel(const List *in, List *out) {
    TokText bytes = {0};
    for (size_t i = 0; i < in->n; i++) {
        size_t n, start = bytes.len;
        const char *s = list_get(in, i, &n);
        for (size_t k = 0; k < n;) {
            int len = tok_utf8_next((const unsigned char *)s + k, n - k);
            if (len <= 0) break;
            int b = tok_char_byte(tok_utf8_get((const unsigned char *)s + k, len));
            if (b < 0) { /* not all mapped: the raw token */
                bytes.len = start;
                tok_text_append(&bytes, s, n);
                break;
            }
            unsigned char c = (unsigned char)b;
            tok_text_append(&bytes, &c, 1);
            k += (size_t)len;
        }
    }
    TokText text = {0};
    tok_text_lossy(&text, bytes.p ? bytes.p : "", bytes.len);
    list_push(out, text.p ? text.p : "", text.len);
    tok_text_free(&bytes), tok_text_free(&text);
}

static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* ByteFallback: runs of <0xHH> tokens become their bytes when those are UTF-8, else one
 * U+FFFD for each byte token of the run */
static void flush_bytes(List *out, TokText *run, size_t count) {
    if (!count) return;
    size_t i = 0;
    while (i < run->len) {
        int k = tok_utf8_next((const unsigned char *)run->p + i, run->len - i);
        if (k < 0) break;
        i += (size_t)k;
    }
    if (i == run->len)
        list_push(out, run->p, run->len);
    else
        for (size_t k = 0; k < count; k++) list_push(out, "\xEF\xBF\xBD", 3);
    run->len = 0;
}

static void dec_bytefallback(const List *in, List *out) {
    TokText run = {0};
    size_t count = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t n;
        const char *s = list_get(in, i, &n);
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex(s[3]) >= 0 && hex(s[4]) >= 0) {
            unsigned char b = (unsigned char)(hex(s[3]) << 4 | hex(s[4]));
            tok_text_append(&run, &b, 1);
            count++;
            continue;
        }
        flush_bytes(out, &run, count);
        count = 0;
        list_push(out, s, n);
    }
    flush_bytes(out, &run, count);
    tok_text_free(&run);
}

/* Strip: up to `start` leading and `stop` trailing copies of one character; the number
 * of characters kept is computed as the library computes it (from the byte length) */
static void dec_strip(const Tokenizer *t, const TokDec *d, const List *in, List *out) {
    const char *c = tok_s(t, d->a);
    size_t cn = d->a.len;
    for (size_t i = 0; i < in->n; i++) {
        size_t n, chars = 0, start_cut = 0, stop_cut = 0, k;
        const char *s = list_get(in, i, &n);
        for (k = 0; k < n; chars++) k += (size_t)tok_utf8_next((const unsigned char *)s + k, n - k);
        for (k = 0; start_cut < (size_t)d->start && k + cn <= n && memcmp(s + k, c, cn) == 0;
             k += cn)
            start_cut++;
        size_t from = k;
        for (k = n; stop_cut < (size_t)d->stop && k >= from + cn && memcmp(s + k - cn, c, cn) == 0;
             k -= cn)
            stop_cut++;
        size_t keep = chars - start_cut;
        if (n - start_cut - stop_cut < keep) keep = n - start_cut - stop_cut;
        size_t to = from;
        for (size_t j = 0; j < keep && to < n; j++)
            to += (size_t)tok_utf8_next((const unsigned char *)s + to, n - to);
        list_push(out, s + from, to - from);
    }
}

/* Metaspace: each replacement character becomes a space, except in the first token
 * (unless prepend_scheme is "never"), where every one is dropped: the library's decoder */
static void dec_metaspace(const Tokenizer *t, const TokDec *d, const List *in, List *out) {
    const char *rep = tok_s(t, d->a);
    size_t nr = d->a.len;
    TokText r = {0};
    for (size_t i = 0; i < in->n; i++) {
        size_t n, from = 0;
        const char *s = list_get(in, i, &n);
        r.len = 0;
        for (size_t k = 0; k + nr <= n;) {
            if (memcmp(s + k, rep, nr) != 0) {
                int c = tok_utf8_next((const unsigned char *)s + k, n - k);
                k += (size_t)(c > 0 ? c : -c);
                continue;
            }
            tok_text_append(&r, s + from, k - from);
            if (i > 0 || d->prepend == TOK_PREPEND_NEVER) tok_text_append(&r, " ", 1);
            k += nr;
            from = k;
        }
        tok_text_append(&r, s + from, n - from);
        list_push(out, r.p ? r.p : "", r.len);
    }
    tok_text_free(&r);
}

static void dec_step(const Tokenizer *t, const TokDec *d, const List *in, List *out) {
    size_t n;
    const char *s;
    switch (d->kind) {
    case TOK_DEC_BYTELEVEL: dec_bytelevel(in, out); break;
    case TOK_DEC_BYTEFALLBACK: dec_bytefallback(in, out); break;
    case TOK_DEC_FUSE:
        if (!in->n) break;
        list_push(out, in->text.p, in->text.len);
        break;
    case TOK_DEC_STRIP: dec_strip(t, d, in, out); break;
    case TOK_DEC_METASPACE: dec_metaspace(t, d, in, out); break;
    case TOK_DEC_REPLACE: {
        TokText r = {0};
        for (size_t i = 0; i < in->n; i++) {
            s = list_get(in, i, &n);
            r.len = 0;
            size_t k = 0, na = d->a.len;
            for (;;) {
                const char *hit = n - k >= na ? memmem(s + k, n - k, tok_s(t, d->a), na) : NULL;
                if (!hit) break;
                tok_text_append(&r, s + k, (size_t)(hit - (s + k)));
                tok_text_append(&r, tok_s(t, d->b), d->b.len);
                k = (size_t)(hit - s) + na;
            }
            tok_text_append(&r, s + k, n - k);
            list_push(out, r.p, r.len);
        }
        tok_text_free(&r);
        break;
    }
    }
}

int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, unsigned flags, TokText *out,
               char *err, size_t errlen) {
    List a = {0}, b = {0};
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tok_token_str(t, ids[i], &len);
        if (!s) {
            list_free(&a);
            return pp_errf(err, errlen, PP_EUSAGE,
                           "token id %d (at %zu) is not in the tokenizer %s (ids are 0..%d)",
                           ids[i], i, t->path, t->n_ids - 1);
        }
        int added = t->added_of[ids[i]];
        if ((flags & TOK_DECODE_SKIP_SPECIAL) && added >= 0 && t->added[added].special) continue;
        list_push(&a, s, len);
    }
    if (!t->has_decoder) { /* the library joins the tokens with spaces */
        for (size_t i = 0; i < a.n; i++) {
            size_t len;
            const char *s = list_get(&a, i, &len);
            if (i) tok_text_append(out, " ", 1);
            tok_text_append(out, s, len);
        }
    } else {
        for (int k = 0; k < t->n_dec; k++) {
            list_clear(&b);
            dec_step(t, &t->dec[k], &a, &b);
            List swap = a;
            a = b, b = swap;
        }
        tok_text_append(out, a.text.p ? a.text.p : "", a.text.len);
    }
    list_free(&a), list_free(&b);
    return PP_OK;
}
