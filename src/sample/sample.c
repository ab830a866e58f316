/* sample.c — the sampling rule ([Note: sampling rule] in sample.h) and the generator that
 * decodes a prompt's continuation with it. */
#include "sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void sample_rng_seed(SampleRng *r, uint64_t seed) { r->state = seed; }

double sample_rng_next(SampleRng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z >> 11) * 0x1.0p-53;
}

/* Larger z first, then the lower id: a total order, so the sort is the same everywhere. */
static int cand_cmp(const void *a_, const void *b_) {
    const SampleCand *a = a_, *b = b_;
    if (a->z != b->z) return a->z > b->z ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int argmax(const float *z, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[best]) best = i;
    return best;
}

int sample_pick(const float *logits, int V, const SampleRule *rule, SampleRng *rng,
                SampleCand *cand) {
    if (rule->temperature == 0 || rule->top_k == 1) return argmax(logits, V);
    int n = V, sorted = (rule->top_k > 0 && rule->top_k < V) || rule->top_p < 1;
    for (int i = 0; i < V; i++) cand[i] = (SampleCand){logits[i] / rule->temperature, i};
    if (sorted) qsort(cand, V, sizeof *cand, cand_cmp);
    if (rule->top_k > 0 && rule->top_k < n) n = rule->top_k;
    float mx = cand[0].z;
    for (int i = 1; i < n && !sorted; i++) mx = cand[i].z > mx ? cand[i].z : mx;
    /* a temperature so small that z overflows (1e-40: every exp(z - mx) would be NaN)
     * samples as its limit, the greedy choice */
    if (isinf(mx)) return argmax(logits, V);
    double total = 0;
    for (int i = 0; i < n; i++) total += exp((double)cand[i].z - mx);
    if (rule->top_p < 1) { /* the shortest run of the largest reaching top_p of the total */
        double run = 0;
        int keep = 0;
        while (keep < n && (keep == 0 || run < rule->top_p * total))
            run += exp((double)cand[keep++].z - mx);
        n = keep;
        total = run;
    }
    double u = sample_rng_next(rng) * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)cand[i].z - mx);
        if (acc > u) return cand[i].id;
    }
    return cand[n - 1].id; /* u * total rounded up to the sum */
}

int sample_cache_len(int np, int max_new, int maxT) {
    int last = max_new < maxT - np ? np + max_new : maxT; /* the text's length at most */
    return last - 1 > np ? last - 1 : np;
}

int sampler_init(Sampler *s, const Model *m, int cap, int rows, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    int rc = decode_init(&s->dec, m, cap, rows, 1, err, errlen);
    if (rc != PP_OK) return rc;
    s->rule = (SampleRule){0, 0, 1};
    s->logits = pp_malloc((size_t)m->d.Vp * sizeof(float));
    s->cand = pp_malloc((size_t)m->d.V * sizeof(SampleCand));
    return PP_OK;
}

void sampler_free(Sampler *s) {
    decode_free(&s->dec);
    free(s->logits);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

/* The logits decode_run left for the last position, to the host. */
static void fetch(Sampler *s) {
    const Backend *be = s->dec.m->be;
    be->to_host(be, s->logits, s->dec.logits, (size_t)s->dec.m->d.Vp * sizeof(float));
    be->wait(be);
}

static int is_eos(const Sampler *s, int id) {
    for (int i = 0; i < s->neos; i++)
        if (s->eos[i] == id) return 1;
    return 0;
}

int sampler_generate(Sampler *s, const int *prompt, int np, int max_new, int *out) {
    Decoder *dc = &s->dec;
    int V = dc->m->d.V, maxT = dc->m->d.maxT, count = 0;
    PP_CHECK(np >= 1 && np < maxT && sample_cache_len(np, max_new, maxT) <= dc->cap);
    double t0 = pp_now();
    decode_reset(dc);
    for (int i = 0; i < np; i += dc->rows) { /* the prompt, rows positions at a time */
        int n = np - i < dc->rows ? np - i : dc->rows;
        decode_run(dc, prompt + i, n, 1);
    }
    fetch(s);
    s->prefill_s = pp_now() - t0;
    s->decode_steps = 0;
    s->stop = SAMPLE_STOP_MAX_NEW;
    t0 = pp_now();
    while (count < max_new) {
        int id = sample_pick(s->logits, V, &s->rule, &s->rng, s->cand);
        out[count++] = id;
        if (is_eos(s, id)) s->stop = SAMPLE_STOP_EOS;
        else if (count < max_new && np + count >= maxT) s->stop = SAMPLE_STOP_MAX_SEQ;
        if (s->stop != SAMPLE_STOP_MAX_NEW || count == max_new) break;
        decode_run(dc, &id, 1, 1); /* one position: the token just chosen */
        fetch(s);
        s->decode_steps++;
    }
    s->decode_s = pp_now() - t0;
    return count;
}

void sampler_set_eos(Sampler *s, const char *cfg_eos, const Tokenizer *tok, int V, char *why,
                     size_t n) {
    s->neos = 0;
    if (cfg_eos && cfg_eos[0]) {
        int ids[SAMPLE_MAX_EOS], cnt = config_ids(cfg_eos, ids, SAMPLE_MAX_EOS);
        for (int i = 0; i < cnt; i++)
            if (ids[i] < V) s->eos[s->neos++] = ids[i];
        snprintf(why, n, "model.eos_token_id");
        return;
    }
    if (!tok) {
        snprintf(why, n, "%s", V == 256 ? "none (byte-level: no end-of-text token)"
                               : "none (no tokenizer, and model.eos_token_id is null: --eos ID "
                                 "or --tokenizer FILE names one)");
        return;
    }
    int id = tok_token_id(tok, "<|endoftext|>");
    TokIds t = {0};
    if (id < 0) tok_encode(tok, "", 0, 0, &t);
    if (id < 0 && t.n > 0) id = t.ids[0];
    tok_ids_free(&t);
    if (id >= 0 && id < V) s->eos[s->neos++] = id;
    snprintf(why, n, "%s", id < 0 ? "none (the tokenizer has no <|endoftext|> or BOS)"
                                  : "the tokenizer's document token");
}
