/* sample_cmd.c — `pptrain sample`: a model of every stage in one process (a checkpoint, a
 * Hugging Face directory, or a config's model as a run starts it), a prompt as text or ids,
 * and its continuation by the sampling rule on the KV-cache decoder, as text or ids. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend_load.h"
#include "ckpt/ckpt_state.h"
#include "common.h"
#include "hf/hf_config.h"
#include "model/model_hf.h"
#include "sample.h"
#include "tok/tokenizer.h"

static const char *const k_usage =
    "usage: pptrain sample (--checkpoint DIR | --init-from HF_DIR | --config FILE [--set k=v]...)\n"
    "           [--tokenizer FILE] (--prompt TEXT | --prompt-ids 1,2,3) --max-new-tokens N\n"
    "           [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ids] [--eos ID,...|none]\n"
    "           [--device cpu|cuda|auto] [--precision auto|fp32|tf32|bf16] [--threads N]\n"
    "  --checkpoint DIR   a pptrain checkpoint (a run's checkpoints/, its latest, a step_N)\n"
    "  --init-from DIR    a Hugging Face model directory (its tokenizer.json by default)\n"
    "  --config FILE      the model a config describes, initialized as its run starts\n"
    "  --temperature T    0: greedy (transformers' generate(do_sample=False)); default 1\n"
    "  --top-k K, --top-p P  keep the K likeliest / the likeliest up to probability P\n"
    "  --seed S           the sampling's random numbers (splitmix64; default 1337)\n"
    "  --ids              print the new token ids (comma-separated), not text\n"
    "  --eos ID,...|none  the end-of-text ids (default: the model's; README, Sampling)\n"
    "  --device D         cpu (default), cuda or auto (the CUDA decoding ops: README, Sampling)\n"
    "  --threads N        CPU threads (default: the CPUs of this process's affinity mask)\n";

#define MAX_SETS 64

typedef struct {
    const char *checkpoint, *init_from, *config, *tokenizer, *prompt, *prompt_ids, *eos;
    const char *device, *precision;
    const char *sets[MAX_SETS];
    int nsets, max_new, threads, ids;
    SampleRule rule;
    uint64_t seed;
} SampleArgs;

#define USAGE(...) return pp_errf(err, errlen, PP_EUSAGE, __VA_ARGS__)

/* A whole decimal integer in [lo, hi]: digits, after a '-' for a negative one (strtoll
 * alone would take leading blanks and a '+'). */
static int parse_long(const char *s, long long lo, long long hi, long long *v) {
    char *end;
    const char *d = s + (s[0] == '-');
    if (!(*d >= '0' && *d <= '9')) return 0;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (*end || errno || x < lo || x > hi) return 0;
    *v = x;
    return 1;
}

static int parse_real(const char *s, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    /* ERANGE on underflow too (4.9e-324, 1e-400): a tiny value, taken as it rounds */
    if (!*s || *end || (errno && fabs(x) > DBL_MIN) || !isfinite(x)) return 0;
    *v = x;
    return 1;
}

/* Whether s is one of the '|'-separated words of list. */
static int in_list(const char *s, const char *list) {
    size_t n = strlen(s);
    if (n == 0) return 0; /* strstr finds "" everywhere: p would never move */
    for (const char *p = list; (p = strstr(p, s)); p += n)
        if ((p == list || p[-1] == '|') && (p[n] == '|' || !p[n])) return 1;
    return 0;
}

/* A flag's number; PP_EUSAGE naming the flag and what it takes. */
static int number(const char *flag, const char *v, int real, double lo, double hi, double *out,
                  char *err, size_t errlen) {
    long long i;
    int ok = real ? parse_real(v, out) : parse_long(v, (long long)lo, (long long)hi, &i);
    if (!real && ok) *out = (double)i;
    if (!ok || *out < lo || *out > hi)
        USAGE("sample: %s %s: expected %s in [%.15g, %.15g]", flag, v,
              real ? "a number" : "an integer", lo, hi);
    return PP_OK;
}

static int parse_args(int argc, char **argv, SampleArgs *a, char *err, size_t errlen) {
    double x;
    memset(a, 0, sizeof *a);
    a->max_new = -1;
    a->rule = (SampleRule){1.0f, 0, 1.0f};
    a->seed = 1337;
    a->device = "cpu";
    a->precision = "auto";
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--ids")) {
            a->ids = 1;
            continue;
        }
        const char **dst = !strcmp(f, "--checkpoint")   ? &a->checkpoint
                           : !strcmp(f, "--init-from")  ? &a->init_from
                           : !strcmp(f, "--config")     ? &a->config
                           : !strcmp(f, "--tokenizer")  ? &a->tokenizer
                           : !strcmp(f, "--prompt")     ? &a->prompt
                           : !strcmp(f, "--prompt-ids") ? &a->prompt_ids
                           : !strcmp(f, "--eos")        ? &a->eos
                           : !strcmp(f, "--device")     ? &a->device
                           : !strcmp(f, "--precision")  ? &a->precision
                                                        : NULL;
        static const char *const nums[] = {"--set",   "--max-new-tokens", "--temperature",
                                           "--top-k", "--top-p",          "--seed",
                                           "--threads"};
        int known = dst != NULL;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) known |= !strcmp(f, nums[k]);
        if (!known) USAGE("sample: unknown argument '%s'", f);
        if (!v) USAGE("sample: %s needs a value", f);
        i++;
        int rc = PP_OK;
        if (dst) *dst = v;
        else if (!strcmp(f, "--set") && a->nsets == MAX_SETS) USAGE("sample: too many --set");
        else if (!strcmp(f, "--set")) a->sets[a->nsets++] = v;
        else if (!strcmp(f, "--max-new-tokens")) {
            if (!(rc = number(f, v, 0, 0, INT_MAX, &x, err, errlen))) a->max_new = (int)x;
        } else if (!strcmp(f, "--temperature")) {
            if (!(rc = number(f, v, 1, 0, 1e30, &x, err, errlen))) a->rule.temperature = (float)x;
        } else if (!strcmp(f, "--top-k")) {
            if (!(rc = number(f, v, 0, 0, INT_MAX, &x, err, errlen))) a->rule.top_k = (int)x;
        } else if (!strcmp(f, "--top-p")) {
            if (!(rc = number(f, v, 1, 0, 1, &x, err, errlen))) a->rule.top_p = (float)x;
            if (!rc && !(x > 0)) USAGE("sample: --top-p %s: expected a number in (0, 1]", v);
        } else if (!strcmp(f, "--seed")) {
            char *end = NULL;
            errno = 0;
            if (*v >= '0' && *v <= '9') a->seed = strtoull(v, &end, 10); /* digits only */
            if (!end || *end || errno)
                USAGE("sample: --seed %s: expected an unsigned 64-bit integer (digits, at "
                      "most 18446744073709551615)", v);
        } else if (!(rc = number(f, v, 0, 0, 4096, &x, err, errlen))) {
            a->threads = (int)x; /* --threads */
        }
        if (rc) return rc;
    }
    int sources = !!a->checkpoint + !!a->init_from + !!a->config;
    if (sources != 1)
        USAGE("sample: give one model: --checkpoint DIR, --init-from HF_DIR or --config FILE");
    if (a->nsets && !a->config) USAGE("sample: --set changes a --config's keys; there is none");
    if (!a->prompt == !a->prompt_ids) USAGE("sample: give one prompt: --prompt TEXT or "
                                            "--prompt-ids 1,2,3");
    if (a->max_new < 0) USAGE("sample: --max-new-tokens N is required");
    if (!in_list(a->device, "cpu|cuda|auto"))
        USAGE("sample: --device %s: expected cpu, cuda or auto", a->device);
    if (!in_list(a->precision, "auto|fp32|tf32|bf16"))
        USAGE("sample: --precision %s: expected auto, fp32, tf32 or bf16", a->precision);
    return PP_OK;
}

/* ---- the model ---- */

/* A config's model on be, initialized as its run starts it (train.seed and init_std, then
 * model.init_from's weights). */
static int model_from_config(const Config *c, const Backend *be, Model *m, char *err,
                             size_t errlen) {
    ModelDims d = model_dims(c);
    ChunkSpec all = {0, 0, d.L, 1, 1, 0, 0};
    model_init_forward(m, &d, &all, 1, 1, 1, be);
    model_init_weights(m, c->seed, c->init_std);
    int rc = PP_OK;
    if (c->init_from[0] && model_hf_is_dir(c->init_from))
        rc = model_load_hf(m, c->init_from, NULL, err, errlen);
    else if (c->init_from[0])
        rc = model_load_llmc(m, c->init_from, err, errlen);
    if (rc != PP_OK) model_free(m);
    return rc;
}

/* *c from --init-from (a config of defaults whose model is the directory's) or --config
 * and --set; its model keys merged from a Hugging Face init_from and checked. */
static int source_config(const SampleArgs *a, Config *c, char *err, size_t errlen) {
    config_defaults(c);
    if (a->init_from) {
        if (!model_hf_is_dir(a->init_from))
            USAGE("sample: --init-from %s: not a directory (a Hugging Face model: config.json and "
                  "safetensors; a pptrain checkpoint is --checkpoint)", a->init_from);
        snprintf(c->init_from, sizeof c->init_from, "%s", a->init_from);
        c->seq_len = 1; /* no training: any max_seq_len will do */
    } else {
        int rc = config_load_file(c, a->config, err, errlen);
        for (int i = 0; i < a->nsets && rc == PP_OK; i++)
            rc = config_set(c, a->sets[i], err, errlen);
        if (rc) return rc;
    }
    if (model_hf_config(c, err, errlen) || config_finalize(c, err, errlen) ||
        model_hf_check(c, err, errlen))
        return PP_EUSAGE;
    return PP_OK;
}

/* ---- tokens ---- */

/* The Hugging Face directory the model came from (for its tokenizer.json and end-of-text
 * ids), or NULL. */
static const char *hf_dir(const SampleArgs *a, const Config *c) {
    if (a->checkpoint) return NULL;
    return c->init_from[0] && model_hf_is_dir(c->init_from) ? c->init_from : NULL;
}

/* flag's comma-separated ids s, each below V, into *ids[*n] (malloc'd; NULL on error). */
static int parse_ids(const char *flag, const char *s, int V, int **ids, int *n, char *err,
                     size_t errlen) {
    int cap = 16, rc = PP_OK;
    *ids = pp_malloc(cap * sizeof(int));
    *n = 0;
    for (const char *p = s; rc == PP_OK; p++) {
        char tok[32];
        size_t len = strcspn(p, ",");
        long long v = 0;
        snprintf(tok, sizeof tok, "%.*s", (int)(len < 31 ? len : 31), p);
        if (len == 0 || len > 30 || !parse_long(tok, 0, LLONG_MAX, &v))
            rc = pp_errf(err, errlen, PP_EUSAGE, "sample: %s '%s': id %d is '%.*s', not a "
                         "non-negative integer (ids are comma-separated: 1,2,3)", flag, s, *n + 1,
                         (int)len, p);
        else if (v >= V)
            rc = pp_errf(err, errlen, PP_EUSAGE, "sample: %s: id %lld (number %d) is not in the "
                         "model's vocabulary (ids 0..%d)", flag, v, *n + 1, V - 1);
        if (rc) break;
        if (*n == cap) *ids = realloc(*ids, (size_t)(cap *= 2) * sizeof(int));
        PP_CHECK(*ids);
        (*ids)[(*n)++] = (int)v;
        p += len;
        if (!*p) break;
    }
    if (rc) free(*ids), *ids = NULL;
    return rc;
}

/* The prompt's ids: --prompt-ids, or --prompt encoded by the tokenizer (with its special
 * tokens, as tokenizer(text) gives them to generate) or as bytes (a byte-level model). */
static int prompt_ids(const SampleArgs *a, const Tokenizer *tok, int V, int maxT, int **ids,
                      int *n, char *err, size_t errlen) {
    if (a->prompt_ids) {
        int rc = parse_ids("--prompt-ids", a->prompt_ids, V, ids, n, err, errlen);
        if (rc) return rc;
    } else if (tok) {
        TokIds t = {0};
        tok_encode(tok, a->prompt, strlen(a->prompt), 0, &t);
        *ids = pp_malloc((t.n ? t.n : 1) * sizeof(int));
        *n = (int)t.n;
        for (size_t i = 0; i < t.n; i++) (*ids)[i] = t.ids[i];
        tok_ids_free(&t);
        for (int i = 0; i < *n; i++)
            if ((*ids)[i] >= V)
                USAGE("sample: the tokenizer gives the prompt id %d, beyond the model's vocabulary "
                      "(ids 0..%d): the tokenizer is not the model's", (*ids)[i], V - 1);
    } else if (V == 256) { /* byte-level: prepare-data's tokens */
        *n = (int)strlen(a->prompt);
        *ids = pp_malloc((*n ? *n : 1) * sizeof(int));
        for (int i = 0; i < *n; i++) (*ids)[i] = (unsigned char)a->prompt[i];
    } else {
        USAGE("sample: --prompt TEXT needs --tokenizer FILE: the model's vocabulary has %d ids, "
              "not a byte-level 256 (or give --prompt-ids)", V);
    }
    if (*n == 0) USAGE("sample: the prompt has no tokens: give at least one");
    if (*n >= maxT)
        USAGE("sample: the prompt has %d tokens, and model.max_seq_len is %d: it leaves no "
              "position for a new token (shorten it)", *n, maxT);
    return PP_OK;
}

/* [Note: end-of-text ids] The ids that end a sample (it includes the one chosen):
 * --eos ID,... or none; else a Hugging Face directory's generation_config.json
 * eos_token_id, or its config.json's (one id or a list; null: none), as generate takes
 * them; else the model.eos_token_id of the config (a checkpoint's: its run's config, which
 * a Hugging Face init_from's config.json filled); else, with a tokenizer, its <|endoftext|>
 * or else the BOS its post-processor puts first (prepare-data's document token: the one a
 * model trained on its files writes after a document); else none: a byte-level model's 256
 * ids are all bytes (prepare-data writes no document token), so its samples run to
 * --max-new-tokens. why: where they came from. */
static int end_ids(const SampleArgs *a, const char *dir, const char *cfg_eos,
                   const Tokenizer *tok, int V, Sampler *s, char *why, size_t n, char *err,
                   size_t errlen) {
    s->neos = 0;
    if (a->eos && !strcmp(a->eos, "none")) return snprintf(why, n, "none (--eos none)"), PP_OK;
    if (a->eos) {
        int *ids, cnt, rc = parse_ids("--eos", a->eos, V, &ids, &cnt, err, errlen);
        if (rc) return rc;
        if (cnt > SAMPLE_MAX_EOS) { /* not some of them silently */
            free(ids);
            USAGE("sample: --eos: %d ids, over the %d end-of-text ids a sample stops at", cnt,
                  SAMPLE_MAX_EOS);
        }
        for (int i = 0; i < cnt && s->neos < SAMPLE_MAX_EOS; i++) s->eos[s->neos++] = ids[i];
        free(ids);
        return snprintf(why, n, "--eos"), PP_OK;
    }
    static const char *const files[] = {"generation_config.json", "config.json"};
    for (int f = 0; f < 2 && dir; f++) {
        char path[PP_PATH_MAX + 32];
        struct stat st;
        HfConfig c;
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        if (stat(path, &st) != 0) continue;
        if ((f == 0 ? hf_generation_config_read : hf_config_read)(path, &c, err, errlen))
            return PP_EUSAGE;
        if (!c.eos_token_id.present && f == 0) continue;
        for (int i = 0; i < c.eos_token_id.n && s->neos < SAMPLE_MAX_EOS; i++)
            if (c.eos_token_id.ids[i] >= 0 && c.eos_token_id.ids[i] < V)
                s->eos[s->neos++] = (int)c.eos_token_id.ids[i];
        return snprintf(why, n, "%s's eos_token_id%s", path, s->neos ? "" : " (null: none)"),
               PP_OK;
    }
    sampler_set_eos(s, cfg_eos, tok, V, why, n);
    return PP_OK;
}

/* ---- running ---- */

typedef struct {
    Model m;
    int loaded;
    Tokenizer *tok;
    int *prompt, np, *out;
    Sampler s;
} SampleRun;

static void run_free(SampleRun *r) {
    sampler_free(&r->s);
    if (r->loaded) model_free(&r->m);
    tok_free(r->tok);
    free(r->prompt);
    free(r->out);
}

/* Print the text of prompt and continuation (special tokens skipped), or the new ids. */
static int print_result(const SampleArgs *a, SampleRun *r, int count, char *err, size_t errlen) {
    if (a->ids) {
        for (int i = 0; i < count; i++) printf("%s%d", i ? "," : "", r->out[i]);
        printf("\n");
        return PP_OK;
    }
    int *all = pp_malloc((size_t)(r->np + count) * sizeof(int));
    memcpy(all, r->prompt, (size_t)r->np * sizeof(int));
    memcpy(all + r->np, r->out, (size_t)count * sizeof(int));
    int rc = PP_OK;
    if (r->tok) {
        TokText t = {0};
        int32_t *ids = pp_malloc((size_t)(r->np + count) * sizeof(int32_t));
        for (int i = 0; i < r->np + count; i++) ids[i] = all[i];
        rc = tok_decode(r->tok, ids, (size_t)(r->np + count), TOK_DECODE_SKIP_SPECIAL, &t, err,
                        errlen);
        if (rc == PP_OK) fwrite(t.p, 1, t.len, stdout);
        tok_text_free(&t);
        free(ids);
    } else {
        for (int i = 0; i < r->np + count; i++) putchar(all[i]); /* bytes */
    }
    free(all);
    if (rc == PP_OK) printf("\n");
    return rc;
}

static const char *k_stops[] = {"--max-new-tokens", "the end-of-text token",
                                "model.max_seq_len"};

static int run(const SampleArgs *a, SampleRun *r, char *err, size_t errlen) {
    char note[256], why[PP_PATH_MAX + 64];
    const Backend *be;
    BackendSizes none = {0}; /* the CUDA backend grows its workspace as needed */
    Config c;
    config_defaults(&c);
    snprintf(c.device, sizeof c.device, "%s", a->device);
    snprintf(c.precision, sizeof c.precision, "%s", a->precision);
    backend_cpu_set_threads(a->threads);
    int rc = backend_select(&c, 0, &none, &be, note, sizeof note, err, errlen);
    if (rc) return rc;
    long step = -1;
    if (a->checkpoint)
        rc = ckpt_state_load_model(a->checkpoint, be, &r->m, &step, c.eos_token_id, err, errlen);
    else if (!(rc = source_config(a, &c, err, errlen)))
        rc = model_from_config(&c, be, &r->m, err, errlen);
    if (rc) return rc;
    r->loaded = 1;
    const ModelDims *d = &r->m.d;
    const char *dir = hf_dir(a, &c), *tpath = a->tokenizer;
    char own[PP_PATH_MAX + 32];
    struct stat st;
    snprintf(own, sizeof own, "%s/tokenizer.json", dir ? dir : ".");
    if (!tpath && dir && stat(own, &st) == 0) tpath = own;
    char terr[PP_ERR_MAX];
    if (tpath && tok_load(tpath, &r->tok, terr, sizeof terr)) /* its messages name the file */
        USAGE("sample: %s", terr);
    if (!a->ids && !r->tok && d->V != 256)
        USAGE("sample: printing text needs --tokenizer FILE (the model's vocabulary has %d ids, "
              "not a byte-level 256), or print ids with --ids", d->V);
    if ((rc = prompt_ids(a, r->tok, d->V, d->maxT, &r->prompt, &r->np, err, errlen))) return rc;
    int cap = sample_cache_len(r->np, a->max_new, d->maxT);
    if (!a->checkpoint && c.sliding_window > 0 && cap > c.sliding_window)
        USAGE("sample: %d positions exceed the model's sliding window (%d), which pptrain's "
              "attention does not apply: lower --max-new-tokens or the prompt", cap,
              c.sliding_window);
    int rows = r->np < 512 ? r->np : 512; /* the prompt in pieces of at most 512 positions */
    if ((rc = sampler_init(&r->s, &r->m, cap, rows, err, errlen))) return rc;
    if ((rc = end_ids(a, dir, c.eos_token_id, r->tok, d->V, &r->s, why, sizeof why, err, errlen)))
        return rc;
    r->s.rule = a->rule;
    sample_rng_seed(&r->s.rng, a->seed);
    int most = a->max_new < d->maxT - r->np ? a->max_new : d->maxT - r->np; /* new ids at most */
    r->out = pp_malloc((size_t)(most ? most : 1) * sizeof(int));
    model_hold_weights(&r->m, MODEL_HOLD); /* [Note: held weights]: a GPU's bf16 copy made once */
    int count = sampler_generate(&r->s, r->prompt, r->np, a->max_new, r->out);
    model_hold_weights(&r->m, 0);
    char from[48] = "";
    if (step >= 0) snprintf(from, sizeof from, " (a checkpoint after %ld steps)", step);
    fprintf(stderr, "sample: %s; model %s, %d layers, vocabulary %d%s; end of text: ", note,
            d->arch->name, d->L, d->V, from);
    for (int i = 0; i < r->s.neos; i++) fprintf(stderr, "%s%d", i ? "," : "", r->s.eos[i]);
    fprintf(stderr, "%s%s\n", r->s.neos ? " from " : "", why);
    const Sampler *s = &r->s;
    fprintf(stderr, "sample: %d new tokens (stopped at %s): prompt %d tokens in %.1f ms (%.0f "
            "tokens/s), then %d steps in %.1f ms (%.1f tokens/s); KV cache %.1f MB\n",
            count, k_stops[s->stop], r->np, s->prefill_s * 1e3, r->np / s->prefill_s,
            s->decode_steps, s->decode_s * 1e3,
            s->decode_steps ? s->decode_steps / s->decode_s : 0.0, s->dec.cache_bytes / 1e6);
    return print_result(a, r, count, err, errlen);
}

int sample_main(int argc, char **argv) {
    char err[PP_ERR_MAX];
    SampleArgs a;
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(k_usage, stdout), PP_OK;
    int rc = parse_args(argc, argv, &a, err, sizeof err);
    if (rc) return pp_error("%s\n%s", err, k_usage), rc;
    SampleRun r;
    memset(&r, 0, sizeof r);
    rc = run(&a, &r, err, sizeof err);
    if (rc) pp_error("%s", err);
    run_free(&r);
    return rc;
}
