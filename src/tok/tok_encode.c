/* tok_encode.c — text to ids, step for step as the tokenizers library encodes: added
 * tokens split out of the raw text, then each piece normalized, the normalized added
 * tokens split out of it, the rest pre-tokenized into words (regex splits, ByteLevel's
 * prefix space and byte map, Metaspace) and each word through BPE; the template's special
 * tokens around it all. */
#define _GNU_SOURCE /* memmem, qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct {
    int32_t id, prev, next, removed;
} Sym;

typedef struct {
    int32_t rank, pos, merged;
} Cand;

/* one call's scratch: nothing in the Tokenizer is written while encoding */
typedef struct {
    const Tokenizer *t;
    TokIds *out;
    pcre2_match_data *md;
    TokText clean;                   /* the input with U+FFFD for ill-formed bytes */
    TokText norm, norm_tmp;          /* a normalized piece */
    TokText prefixed[TOK_MAX_STEPS]; /* ByteLevel's prefix space, Metaspace's text, per step */
    TokText word;                    /* a word in ByteLevel's characters (ignore_merges) */
    Sym *sym;
    size_t sym_cap;
    Cand *heap;
    size_t heap_n, heap_cap;
    pcre2_match_context *mc;       /* the match limit of each call: [Note: regex budget] */
    uint64_t budget;               /* match steps left */
    uint64_t spent[TOK_MAX_STEPS]; /* by each pre-tokenizer step */
    int failed;                    /* a pattern failed: nothing more is encoded, err says why */
    char err[PP_ERR_MAX];
} Enc;

static void emit(Enc *e, int32_t id) {
    TokIds *o = e->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        int32_t *p = realloc(o->ids, cap * sizeof *p);
        if (!p) PP_DIE("out of memory growing an id array to %zu ids", cap);
        o->ids = p, o->cap = cap;
    }
    o->ids[o->n++] = id;
}

/* ---- BPE ---------------------------------------------------------------------------------
 * The library's BPE::merge_word and Word::merge_all: a word's characters become symbols
 * (a character missing from the vocabulary: its bytes' <0xHH> tokens with byte_fallback,
 * else unk, runs of unk fused with fuse_unk), then the pair of lowest rank (leftmost on
 * ties) is merged until none is left. Symbols are a doubly linked list in an array and
 * candidate pairs a min-heap on (rank, position); a popped pair that no longer exists is
 * skipped. O(n log n) for a word of n characters. */

static int cand_less(Cand a, Cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(Enc *e, Cand c) {
    if (e->heap_n == e->heap_cap) {
        e->heap_cap = e->heap_cap ? 2 * e->heap_cap : 64;
        e->heap = realloc(e->heap, e->heap_cap * sizeof *e->heap);
        if (!e->heap) PP_DIE("out of memory for a BPE heap of %zu pairs", e->heap_cap);
    }
    size_t i = e->heap_n++;
    while (i > 0 && cand_less(c, e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static Cand heap_pop(Enc *e) {
    Cand top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(e->heap[c + 1], e->heap[c])) c++;
        if (!cand_less(e->heap[c], last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

static void push_sym(Enc *e, size_t *ns, int32_t id) {
    Sym *s = &e->sym[*ns];
    s->id = id, s->prev = (int32_t)*ns - 1, s->next = (int32_t)*ns + 1, s->removed = 0;
    (*ns)++;
}

/* a character c[n] not in the vocabulary; *unk: an unk symbol is pending */
static void missing_char(Enc *e, size_t *ns, int *unk, const unsigned char *c, int n) {
    const Tokenizer *t = e->t;
    if (t->byte_fallback) {
        int all = 1;
        for (int i = 0; i < n; i++) all &= t->fallback_id[c[i]] >= 0;
        if (all) { /* the library adds these before a pending unk: kept */
            for (int i = 0; i < n; i++) push_sym(e, ns, t->fallback_id[c[i]]);
            return;
        }
    }
    if (t->unk_id < 0) return; /* no unk_token: the character is dropped */
    if (*unk && !t->fuse_unk) push_sym(e, ns, t->unk_id);
    *unk = 1;
}

static void add_char(Enc *e, size_t *ns, int *unk, int32_t id) {
    if (*unk) push_sym(e, ns, e->t->unk_id);
    *unk = 0;
    push_sym(e, ns, id);
}

static size_t word_symbols(Enc *e, const char *s, size_t n) {
    const Tokenizer *t = e->t;
    size_t ns = 0;
    int unk = 0;
    if (e->sym_cap < 2 * n + 2) {
        e->sym_cap = 2 * n + 2;
        free(e->sym);
        e->sym = pp_malloc(e->sym_cap * sizeof *e->sym);
    }
    for (size_t i = 0; i < n;) {
        if (t->byte_level) {
            unsigned b = (unsigned char)s[i++];
            if (t->byte_char_id[b] >= 0)
                add_char(e, &ns, &unk, t->byte_char_id[b]);
            else {
                char c[4];
                int cn = tok_utf8_put(tok_byte_char(b), c);
                missing_char(e, &ns, &unk, (const unsigned char *)c, cn);
            }
            continue;
        }
        int k = tok_utf8_next((const unsigned char *)s + i, n - i); /* valid: cleaned */
        int32_t id = tok_map_get(&t->vocab, t, t->vocab_str, s + i, (size_t)k);
        if (id >= 0)
            add_char(e, &ns, &unk, id);
        else
            missing_char(e, &ns, &unk, (const unsigned char *)s + i, k);
        i += (size_t)k;
    }
    if (unk) push_sym(e, &ns, t->unk_id);
    if (ns) e->sym[ns - 1].next = -1;
    return ns;
}

static void bpe_word(Enc *e, const char *s, size_t n) {
    const Tokenizer *t = e->t;
    if (t->ignore_merges) { /* a word that is itself a token is not merged */
        const char *w = s;
        size_t wn = n;
        if (t->byte_level) {
            e->word.len = 0;
            for (size_t i = 0; i < n; i++) {
                char c[4];
                tok_text_append(&e->word, c,
                                (size_t)tok_utf8_put(tok_byte_char((unsigned char)s[i]), c));
            }
            w = e->word.p, wn = e->word.len;
        }
        int32_t id = tok_map_get(&t->vocab, t, t->vocab_str, w, wn);
        if (id >= 0) {
            emit(e, id);
            return;
        }
    }
    size_t ns = word_symbols(e, s, n);
    Sym *sym = e->sym;
    int32_t merged, rank;
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        if ((rank = tok_pairs_get(&t->merges, sym[i].id, sym[i + 1].id, &merged)) >= 0)
            heap_push(e, (Cand){rank, (int32_t)i, merged});
    while (e->heap_n) {
        Cand c = heap_pop(e);
        Sym *left = &sym[c.pos];
        if (left->removed || left->next < 0) continue;
        Sym *right = &sym[left->next];
        rank = tok_pairs_get(&t->merges, left->id, right->id, &merged);
        if (rank < 0 || merged != c.merged) continue; /* stale: the pair has changed */
        left->id = c.merged;
        left->next = right->next;
        right->removed = 1;
        if (left->next >= 0) sym[left->next].prev = c.pos;
        if (left->prev >= 0 &&
            (rank = tok_pairs_get(&t->merges, sym[left->prev].id, left->id, &merged)) >= 0)
            heap_push(e, (Cand){rank, left->prev, merged});
        if (left->next >= 0 &&
            (rank = tok_pairs_get(&t->merges, left->id, sym[left->next].id, &merged)) >= 0)
            heap_push(e, (Cand){rank, c.pos, merged});
    }
    for (size_t i = 0; i < ns; i++)
        if (!sym[i].removed) emit(e, sym[i].id);
}

/* ---- pre-tokenizer ---------------------------------------------------------------------- */

/* [Note: regex budget]
 * A pre-tokenizer pattern may backtrack catastrophically ((a|aa)+$: exponential in a word)
 * or scan to the end of the text from every position ((?:a|b)*c|a: quadratic, hours on a
 * 100 MB document); the library's Oniguruma would hang as well. PCRE2's match limit counts
 * the backtracking steps of one call, and real patterns take a handful per match (GPT-2's,
 * Llama 3's and Qwen2's at most 46, about 2 per byte of text). So each encode has a budget
 * of TOK_MATCH_BASE + TOK_MATCH_PER_BYTE steps per byte, and each call draws from it: first
 * with a limit of TOK_MATCH_FIRST steps (enough for every match of a real pattern), then,
 * where that is not enough, 8 times more, and so on while the budget lasts; each try costs
 * its limit. The calls that fit the first limit advance at least a byte each, so they use at
 * most a quarter of the budget; a pattern that needs more than the rest fails with a message
 * in a time linear in the text (about TOK_MATCH_PER_BYTE steps a byte), not hangs. */
#define TOK_MATCH_FIRST 64
#define TOK_MATCH_PER_BYTE 256
#define TOK_MATCH_BASE 10000000 /* PCRE2's own default limit of one call */

/* the next match of pre-tokenizer step p in s[n] from pos: 1 with [*ms, *me), 0 for none
 * or when the pattern failed (e->failed, e->err) */
static int next_match(Enc *e, int k, const char *s, size_t n, size_t pos, size_t *ms, size_t *me) {
    const TokPre *p = &e->t->pre[k];
    uint64_t limit = TOK_MATCH_FIRST;
    int rc;
    for (;;) {
        limit = limit < e->budget ? limit : e->budget;
        pcre2_set_match_limit(e->mc, (uint32_t)(limit < UINT32_MAX ? limit : UINT32_MAX));
        rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, e->md, e->mc);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its stack on the heap */
            rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md,
                             e->mc);
        e->budget -= limit;
        e->spent[k] += limit;
        if (rc != PCRE2_ERROR_MATCHLIMIT || e->budget == 0) break;
        limit *= 8;
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        if (rc == PCRE2_ERROR_MATCHLIMIT) /* name the step that used the budget */
            for (int j = 0; j < e->t->n_pre; j++)
                if (e->t->pre[j].kind == TOK_PRE_SPLIT && e->spent[j] > e->spent[k]) k = j;
        p = &e->t->pre[k];
        pcre2_get_error_message(rc, msg, sizeof msg);
        pp_errf(e->err, sizeof e->err, PP_EUSAGE,
                "%s: the pre-tokenizer pattern \"%.80s\"%s failed at byte %zu of a text of "
                "%zu bytes: %s%s",
                e->t->path, tok_s(e->t, p->pat), p->pat.len > 80 ? "..." : "", pos, n,
                (const char *)msg,
                rc == PCRE2_ERROR_MATCHLIMIT
                    ? " (it backtracks catastrophically: pptrain gives a pattern about 256 "
                      "match steps per byte of text, real tokenizers' take 2)"
                    : "");
        e->failed = 1;
        return 0;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    *ms = ov[0], *me = ov[1];
    return 1;
}

static void pre_step(Enc *e, int k, const char *s, size_t n, int at_start);

/* [Note: Metaspace]
 * The library's Metaspace pre-tokenizer, on each piece: every ' ' becomes the replacement
 * (▁), which is then put before the piece unless it starts with one already: always
 * (prepend_scheme "always"), never, or ("first") only where the piece starts at offset 0
 * of the original text. Pieces are what the added tokens left (a text that begins with
 * <s> has no piece at 0: nothing after it gets ▁) and, within a Sequence, what earlier
 * steps split. `at_start` follows that offset: the raw piece at 0, its normalized text
 * still starting with the original's first character (a Replace to "" that removed it
 * moves the start), the split at 0 of its parent. (The library counts a split after
 * characters that a normalizer inserted, Prepend's, as at 0 too; no file on the Hub splits
 * before Metaspace, and pptrain does not follow that case.) With split true the piece is
 * cut before each ▁, each ▁ starting a word ("▁Hey", "▁", "▁friend"). */
static void metaspace(Enc *e, int k, const TokPre *p, const char *s, size_t n, int at_start) {
    const Tokenizer *t = e->t;
    const char *rep = tok_s(t, p->rep);
    size_t nr = p->rep.len, from = 0;
    TokText *b = &e->prefixed[k];
    b->len = 0;
    int starts = s[0] == ' ' || (n >= nr && memcmp(s, rep, nr) == 0);
    if (!starts &&
        (p->prepend == TOK_PREPEND_ALWAYS || (p->prepend == TOK_PREPEND_FIRST && at_start)))
        tok_text_append(b, rep, nr);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ') continue;
        tok_text_append(b, s + from, i - from);
        tok_text_append(b, rep, nr);
        from = i + 1;
    }
    tok_text_append(b, s + from, n - from);
    if (!p->split) {
        pre_step(e, k + 1, b->p, b->len, at_start);
        return;
    }
    const char *w = b->p;
    size_t last = 0, len = b->len;
    for (size_t i = 1; i + nr <= len; i++) /* a word from each ▁ to the next */
        if (memcmp(w + i, rep, nr) == 0) { /* at a character: rep starts with a lead byte */
            pre_step(e, k + 1, w + last, i - last, at_start && last == 0);
            last = i;
            i += nr - 1;
        }
    pre_step(e, k + 1, w + last, len - last, at_start && last == 0);
}

/* s[n] through pre-tokenizer steps k.. and BPE; at_start: s starts at offset 0 of the
 * original text ([Note: Metaspace]) */
static void pre_step(Enc *e, int k, const char *s, size_t n, int at_start) {
    const Tokenizer *t = e->t;
    if (n == 0 || e->failed) return;
    if (k == t->n_pre) {
        bpe_word(e, s, n);
        return;
    }
    const TokPre *p = &t->pre[k];
    if (p->kind == TOK_PRE_METASPACE) {
        metaspace(e, k, p, s, n, at_start);
        return;
    }
    if (p->kind == TOK_PRE_PREFIX_SPACE) {
        TokText *b = &e->prefixed[k];
        if (s[0] != ' ') {
            b->len = 0;
            tok_text_append(b, " ", 1);
            tok_text_append(b, s, n);
            s = b->p, n = b->len;
        }
        pre_step(e, k + 1, s, n, at_start);
        return;
    }
    /* Split: the gaps between matches are pieces too (Isolated). An empty match splits
     * there too, unless it is right where the last match ended: the library's find_iter
     * (Oniguruma's, as Rust's regex) skips those and goes on a character further. */
    size_t pos = 0, last = 0, ms, me, end = SIZE_MAX;
    while (pos < n && next_match(e, k, s, n, pos, &ms, &me)) {
        if (me == ms && ms == end) {
            if (ms >= n) break;
            int c = tok_utf8_next((const unsigned char *)s + ms, n - ms);
            pos = ms + (size_t)(c > 0 ? c : 1);
            continue;
        }
        if (ms > last) pre_step(e, k + 1, s + last, ms - last, at_start && last == 0);
        if (!p->removed) pre_step(e, k + 1, s + ms, me - ms, at_start && ms == 0);
        pos = last = end = me;
    }
    if (last < n) pre_step(e, k + 1, s + last, n - last, at_start && last == 0);
}

/* ---- normalizer and added tokens -------------------------------------------------------- */

static void replace_all(TokText *out, const char *s, size_t n, const char *a, size_t na,
                        const char *b, size_t nb) {
    size_t i = 0;
    for (;;) {
        const char *hit = n - i >= na ? memmem(s + i, n - i, a, na) : NULL;
        if (!hit) break;
        tok_text_append(out, s + i, (size_t)(hit - (s + i)));
        tok_text_append(out, b, nb);
        i = (size_t)(hit - s) + na;
    }
    tok_text_append(out, s + i, n - i);
}

/* s[n] through the normalizers into out (tmp: scratch). Returns 0 where the text no
 * longer starts with s's first character (a Replace to "" removed it; [Note: Metaspace]),
 * else 1. */
static int normalize(const Tokenizer *t, const char *s, size_t n, TokText *out, TokText *tmp) {
    int at_start = 1;
    out->len = 0;
    tok_text_append(out, s, n);
    for (int k = 0; k < t->n_norm; k++) {
        const TokNorm *m = &t->norm[k];
        TokText swap;
        tmp->len = 0;
        if (m->kind == TOK_NORM_PREPEND) {
            if (out->len == 0) continue; /* the library prepends only to a non-empty text */
            tok_text_append(tmp, tok_s(t, m->a), m->a.len);
            tok_text_append(tmp, out->p, out->len);
        } else if (m->kind == TOK_NORM_UNICODE) {
            tok_unicode_normalize(m->form, out->p, out->len, tmp);
        } else {
            if (m->b.len == 0 && out->len >= m->a.len &&
                memcmp(out->p, tok_s(t, m->a), m->a.len) == 0)
                at_start = 0;
            replace_all(tmp, out->p, out->len, tok_s(t, m->a), m->a.len, tok_s(t, m->b), m->b.len);
        }
        swap = *out, *out = *tmp, *tmp = swap;
    }
    return at_start;
}

void tok_normalize(const Tokenizer *t, const char *s, size_t n, TokText *out) {
    TokText tmp = {0};
    normalize(t, s, n, out, &tmp);
    tok_text_free(&tmp);
}

static void split_added(Enc *e, int normalized, const char *s, size_t n, int at_start);

/* at_start: s starts at offset 0 of the original text ([Note: Metaspace]) */
static void piece(Enc *e, int normalized, const char *s, size_t n, int at_start) {
    if (n == 0) return;
    if (normalized) {
        pre_step(e, 0, s, n, at_start);
        return;
    }
    at_start &= normalize(e->t, s, n, &e->norm, &e->norm_tmp);
    split_added(e, 1, e->norm.p, e->norm.len, at_start);
}

/* Added tokens out of s[n], leftmost longest (the library's Aho-Corasick
 * LeftmostLongest); the pieces between them go on. First the raw text against the tokens
 * with normalized false, then each normalized piece against those with normalized true. */
static void split_added(Enc *e, int normalized, const char *s, size_t n, int at_start) {
    const Tokenizer *t = e->t;
    const TokAdded *list = normalized ? t->norm_added : t->raw_added;
    const int *first = normalized ? t->norm_first : t->raw_first;
    size_t i = 0, last = 0;
    if ((normalized ? t->n_norm_added : t->n_raw) == 0) i = n;
    while (i < n) {
        unsigned c = (unsigned char)s[i];
        int hit = -1;
        for (int k = first[c]; k < first[c + 1] && hit < 0; k++)
            if (list[k].s.len <= n - i && memcmp(tok_s(t, list[k].s), s + i, list[k].s.len) == 0)
                hit = k;
        if (hit < 0) {
            i++;
            continue;
        }
        piece(e, normalized, s + last, i - last, at_start && last == 0);
        emit(e, list[hit].id);
        i += list[hit].s.len;
        last = i;
    }
    piece(e, normalized, s + last, n - last, at_start && last == 0);
}

static int utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int k = tok_utf8_next((const unsigned char *)s + i, n - i);
        if (k < 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

int tok_encode_checked(const Tokenizer *t, const char *text, size_t len, unsigned flags,
                       TokIds *out, char *err, size_t errlen) {
    Enc e = {.t = t, .out = out};
    size_t n0 = out->n;
    e.md = pcre2_match_data_create(1, NULL);
    e.mc = pcre2_match_context_create(NULL);
    if (!e.md || !e.mc) PP_DIE("out of memory for PCRE2 match data");
    e.budget = TOK_MATCH_BASE + (uint64_t)TOK_MATCH_PER_BYTE * len;
    if (!utf8_valid(text, len)) {
        tok_text_lossy(&e.clean, text, len);
        text = e.clean.p, len = e.clean.len;
    }
    int special = t->has_template && !(flags & TOK_ENCODE_NO_SPECIAL);
    if (special)
        for (int i = 0; i < t->n_tmpl_pre; i++) emit(&e, t->tmpl_pre[i]);
    split_added(&e, 0, text, len, 1);
    if (special)
        for (int i = 0; i < t->n_tmpl_post; i++) emit(&e, t->tmpl_post[i]);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mc);
    tok_text_free(&e.clean), tok_text_free(&e.norm), tok_text_free(&e.norm_tmp);
    tok_text_free(&e.word);
    for (int k = 0; k < TOK_MAX_STEPS; k++) tok_text_free(&e.prefixed[k]);
    free(e.sym), free(e.heap);
    if (!e.failed) return PP_OK;
    out->n = n0;
    return pp_errf(err, errlen, PP_EUSAGE, "%s", e.err);
}

size_t tok_encode(const Tokenizer *t, const char *text, size_t len, unsigned flags, TokIds *out) {
    char err[PP_ERR_MAX];
    size_t n0 = out->n;
    if (tok_encode_checked(t, text, len, flags, out, err, sizeof err) != PP_OK) PP_DIE("%s", err);
    return out->n - n0;
}
