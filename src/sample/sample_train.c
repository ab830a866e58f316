/* sample_train.c — the samples a one-process training run prints after its checkpoints
 * ([Note: samples while training] in sample.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "model/model_hf.h"
#include "sample.h"
#include "tok/tokenizer.h"

#define TRAIN_NEW_TOKENS 64

struct SampleTrain {
    Sampler s;
    Tokenizer *tok; /* NULL: byte-level */
    int *prompt, np, *out, *all;
    int every, last;
    uint64_t seed;
};

/* The prompt's ids into t (PP_OK), or why there are none into why. */
static int encode_prompt(SampleTrain *t, const Config *cfg, const Model *m, char *why, size_t n) {
    const char *text = cfg->sample_prompt;
    char path[PP_PATH_MAX + 32], err[PP_ERR_MAX];
    struct stat st;
    int hf = cfg->init_from[0] && model_hf_is_dir(cfg->init_from);
    snprintf(path, sizeof path, "%s/tokenizer.json", cfg->init_from);
    if (hf && stat(path, &st) == 0) {
        if (tok_load(path, &t->tok, err, sizeof err))
            return pp_errf(why, n, PP_EUSAGE, "its tokenizer: %s", err);
        TokIds ids = {0};
        tok_encode(t->tok, text, strlen(text), 0, &ids);
        t->np = (int)ids.n;
        t->prompt = pp_malloc((ids.n ? ids.n : 1) * sizeof(int));
        for (size_t i = 0; i < ids.n; i++) t->prompt[i] = ids.ids[i];
        tok_ids_free(&ids);
        for (int i = 0; i < t->np; i++)
            if (t->prompt[i] >= m->d.V)
                return pp_errf(why, n, PP_EUSAGE, "%s gives id %d, beyond the vocabulary", path,
                               t->prompt[i]);
    } else if (m->d.V == 256) {
        t->np = (int)strlen(text);
        t->prompt = pp_malloc((size_t)t->np * sizeof(int) + 1);
        for (int i = 0; i < t->np; i++) t->prompt[i] = (unsigned char)text[i];
    } else {
        return pp_errf(why, n, PP_EUSAGE, "the vocabulary has %d ids, not a byte-level 256, and "
                       "no tokenizer.json comes with model.init_from to encode "
                       "train.sample_prompt", m->d.V);
    }
    if (t->np < 1 || t->np >= m->d.maxT)
        return pp_errf(why, n, PP_EUSAGE, "train.sample_prompt is %d tokens: needs 1 to %d",
                       t->np, m->d.maxT - 1);
    return PP_OK;
}

SampleTrain *sample_train_create(const Config *cfg, const Model *m, int world, int rank,
                                 int start) {
    char why[PP_ERR_MAX];
    if (cfg->sample_every <= 0) return NULL;
    if (world > 1) {
        const char *apart = cfg->stages > 1 ? "each rank holds only its own stages"
                                            : "the other replicas would wait for rank 0's sample";
        if (rank == 0)
            printf("train.sample_every: no samples in this run of %d ranks (%s): a sample is "
                   "taken in a one-process run; sample a checkpoint with `pptrain sample "
                   "--checkpoint %s/checkpoints/latest ...`\n", world, apart, cfg->out_dir);
        return NULL;
    }
    SampleTrain *t = pp_calloc(1, sizeof *t);
    int rc = encode_prompt(t, cfg, m, why, sizeof why), cap = 0;
    if (rc == PP_OK) {
        cap = sample_cache_len(t->np, TRAIN_NEW_TOKENS, m->d.maxT);
        rc = sampler_init(&t->s, m, cap, t->np, why, sizeof why);
    }
    char eos_why[128];
    if (rc == PP_OK) /* the ids `pptrain sample --checkpoint` takes: the same text */
        sampler_set_eos(&t->s, cfg->eos_token_id, t->tok, m->d.V, eos_why, sizeof eos_why);
    if (rc != PP_OK) {
        printf("train.sample_every: no samples in this run: %s\n", why);
        sample_train_free(t);
        return NULL;
    }
    t->every = cfg->sample_every;
    t->last = start;
    t->seed = cfg->seed;
    t->s.rule = (SampleRule){1.0f, 0, 1.0f};
    t->out = pp_malloc(TRAIN_NEW_TOKENS * sizeof(int));
    t->all = pp_malloc((size_t)(t->np + TRAIN_NEW_TOKENS) * sizeof(int));
    printf("train.sample_every %d: a sample of %d new tokens after each checkpoint at least %d "
           "steps after the last (KV cache %.1f MB; end of text: %s)\n", t->every,
           TRAIN_NEW_TOKENS, t->every, t->s.dec.cache_bytes / 1e6, eos_why);
    return t;
}

void sample_train_after_save(SampleTrain *t, int step) {
    if (!t || step - t->last < t->every) return;
    t->last = step;
    sample_rng_seed(&t->s.rng, t->seed + (uint64_t)step); /* as `pptrain sample --seed` */
    int n = sampler_generate(&t->s, t->prompt, t->np, TRAIN_NEW_TOKENS, t->out);
    memcpy(t->all, t->prompt, (size_t)t->np * sizeof(int));
    memcpy(t->all + t->np, t->out, (size_t)n * sizeof(int));
    printf("sample after step %d (the checkpoint's weights, %d new tokens, %.0f tokens/s):\n", step,
           n, t->s.decode_steps ? t->s.decode_steps / t->s.decode_s : 0.0);
    if (t->tok) {
        TokText text = {0};
        char err[PP_ERR_MAX];
        int32_t ids[t->np + TRAIN_NEW_TOKENS];
        for (int i = 0; i < t->np + n; i++) ids[i] = t->all[i];
        if (tok_decode(t->tok, ids, (size_t)(t->np + n), TOK_DECODE_SKIP_SPECIAL, &text, err,
                       sizeof err) == PP_OK)
            fwrite(text.p, 1, text.len, stdout);
        tok_text_free(&text);
    } else {
        for (int i = 0; i < t->np + n; i++) putchar(t->all[i]);
    }
    printf("\n");
    fflush(stdout);
}

void sample_train_free(SampleTrain *t) {
    if (!t) return;
    sampler_free(&t->s);
    tok_free(t->tok);
    free(t->prompt);
    free(t->out);
    free(t->all);
    free(t);
}
