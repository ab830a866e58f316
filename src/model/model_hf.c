/* model_hf.c — Hugging Face model directories for the stage engine: config.json's model
 * keys, the check of a directory's weights, a rank's import and a whole model's export
 * (model_hf.h), through the Arch's hf table. */
#include "model_hf.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "hf/hf_config.h"
#include "hf/hf_dir.h"
#include "pathpat.h"

#define HUB_NAME_MAX 256

int model_hf_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- config.json's model keys ([Note: init_from config merge] in model_hf.h) ---- */

/* A row's value: an int, a bool (in the config a tristate, -1 auto), a float, or RoPE's
 * scaling (model.rope_scaling's five keys as one value: none, or llama3 and its four
 * numbers). */
enum { K_INT, K_BOOL, K_REAL, K_ROPE };

/* How a row merges. */
enum {
    R_REQUIRED = 1, /* config.json or the config must give it */
    R_AUTO = 2,     /* the config's default (0, or tie_embeddings' auto -1) is no choice:
                       written in the config, config.json's value still holds */
    R_CAP = 4,      /* where the Arch has no position table (ArchHf.no_position_table), the
                       config may set less than config.json's */
    R_WINDOW = 8,   /* at least train.seq_len (pptrain's attention covers the whole
                       sequence); no ModelDims field: merged, never matched or exported */
};
#define NO_DIMS SIZE_MAX

/* One model key: the config's, the ModelDims field it becomes, and config.json's field
 * (an HfConfigInt, HfConfigBool, HfConfigReal or the HfConfigRope), named by its keys
 * where the file lacks it. The first six are every architecture's; an Arch's hf->keys
 * lists which of the rest its config.json has. A key of another architecture is one
 * more row. */
typedef struct {
    const char *key;
    size_t cfg, dims, hf;
    int kind, flags;
    const char *hf_name;
} HfKey;

#define ROW(key, cfgf, dimf, hff, kind, flags, names)                                              \
    {key, offsetof(Config, cfgf), offsetof(ModelDims, dimf), offsetof(HfConfig, hff),             \
     kind, flags, names}
static const HfKey k_keys[] = {
    ROW("model.vocab_size", vocab_size, V, vocab_size, K_INT, R_REQUIRED, "vocab_size"),
    ROW("model.max_seq_len", max_seq_len, maxT, max_position_embeddings, K_INT, R_REQUIRED | R_CAP,
        "max_position_embeddings (n_positions)"),
    ROW("model.n_layers", n_layers, L, num_hidden_layers, K_INT, R_REQUIRED,
        "num_hidden_layers (n_layer)"),
    ROW("model.n_heads", n_heads, NH, num_attention_heads, K_INT, R_REQUIRED,
        "num_attention_heads (n_head)"),
    ROW("model.dim", dim, C, hidden_size, K_INT, R_REQUIRED, "hidden_size (n_embd)"),
    ROW("model.tie_embeddings", tie_embeddings, tied, tie_word_embeddings, K_BOOL, R_AUTO,
        "tie_word_embeddings"),
    ROW("model.n_kv_heads", n_kv_heads, NKV, num_key_value_heads, K_INT, R_AUTO,
        "num_key_value_heads"),
    ROW("model.ffn_dim", ffn_dim, F, intermediate_size, K_INT, R_AUTO, "intermediate_size"),
    ROW("model.norm_eps", norm_eps, eps, norm_eps, K_REAL, 0, "rms_norm_eps"),
    ROW("model.rope_theta", rope_theta, rope.theta, rope_theta, K_REAL, 0, "rope_theta"),
    ROW("model.rope_scaling", rope_scaling, rope, rope, K_ROPE, 0, "rope_scaling"),
    {"model.sliding_window", offsetof(Config, sliding_window), NO_DIMS,
     offsetof(HfConfig, sliding_window), K_INT, R_WINDOW, "sliding_window"},
};
#undef ROW
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])
#define N_BASE_KEYS 6 /* every architecture's */

/* Whether row r is a key of architecture hf's config.json. */
static int row_applies(const HfKey *r, const ArchHf *hf) {
    if (r < k_keys + N_BASE_KEYS) return 1;
    for (const char *const *k = hf->keys; k && *k; k++)
        if (!strcmp(*k, r->key)) return 1;
    return 0;
}

/* Scalar row r's value in c: 1 with *v and *key (the file's key, or what the model class
 * defaults to when the file leaves it out: tie_word_embeddings), else 0. */
static int hf_value(const HfKey *r, const HfConfig *c, const ArchHf *hf, double *v,
                    const char **key) {
    const char *p = (const char *)c + r->hf;
    if (r->kind == K_BOOL) {
        const HfConfigBool *b = (const HfConfigBool *)p;
        *v = b->present ? b->value : hf->tie_default;
        *key = b->present ? b->key : "tie_word_embeddings (left out: the model class's default)";
        return 1;
    }
    int present = r->kind == K_REAL ? ((const HfConfigReal *)p)->present
                                    : ((const HfConfigInt *)p)->present;
    *v = r->kind == K_REAL ? ((const HfConfigReal *)p)->value
                           : (double)((const HfConfigInt *)p)->value;
    *key = r->kind == K_REAL ? ((const HfConfigReal *)p)->key : ((const HfConfigInt *)p)->key;
    if (!present) *key = r->hf_name;
    return present;
}

/* A scalar row's field (an int, or a float for K_REAL) in a Config or ModelDims. */
static double field_get(const HfKey *r, const void *base, size_t off) {
    const char *p = (const char *)base + off;
    return r->kind == K_REAL ? *(const float *)p : *(const int *)p;
}

static void field_set(const HfKey *r, void *base, size_t off, double v) {
    char *p = (char *)base + off;
    if (r->kind == K_REAL) *(float *)p = (float)v;
    else *(int *)p = (int)v;
}

/* The shortest decimal that reads back as the float f ("1e-05", not 9.99999974738e-06;
 * "500000", not 5e+05) into buf, and its value: what config.json holds for a value
 * pptrain keeps in fp32. */
static double float_decimal(float f, char *buf, size_t n) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, f);
        if (strtof(buf, NULL) == f) break;
    }
    double v = strtod(buf, NULL);
    if (v == (double)(long long)v && fabs(v) < 1e15) snprintf(buf, n, "%lld", (long long)v);
    return v;
}

static void value_text(const HfKey *r, double v, char *buf, size_t n) {
    if (r->kind == K_BOOL) snprintf(buf, n, "%s", v > 0 ? "true" : v < 0 ? "auto" : "false");
    else if (r->kind == K_REAL) float_decimal((float)v, buf, n);
    else snprintf(buf, n, "%lld", (long long)v);
}

/* Whether the config's (or model's) v agrees with config.json's theirs: equal (a float as
 * the float it becomes), or below it where r is R_CAP and the Arch has no position table. */
static int agrees(const HfKey *r, const ArchHf *hf, double mine, double theirs) {
    if (r->kind == K_REAL) return (float)mine == (float)theirs;
    return mine == theirs || ((r->flags & R_CAP) && hf->no_position_table && mine <= theirs);
}

/* ---- RoPE's scaling as one value (the K_ROPE row) ---- */

/* The scaling config.json gives: rope_scaling / rope_parameters of type llama3 with its
 * numbers (the Arch's config_check made sure they are there), else none; *key names
 * where it came from. */
static void rope_of_hf(const HfConfig *c, ModelRope *r, const char **key) {
    const HfConfigRope *h = &c->rope;
    memset(r, 0, sizeof *r);
    *key = h->present ? h->key : "rope_scaling (left out: none)";
    if (!h->present || !h->type.present || strcmp(h->type.value, "llama3")) return;
    *r = (ModelRope){0,
                     1,
                     (float)h->factor.value,
                     (float)h->low_freq_factor.value,
                     (float)h->high_freq_factor.value,
                     (int)h->original_max_position_embeddings.value};
}

static void rope_of_cfg(const Config *c, ModelRope *r) {
    *r = (ModelRope){0,
                     !strcmp(c->rope_scaling, "llama3"),
                     c->rope_factor,
                     c->rope_low_freq_factor,
                     c->rope_high_freq_factor,
                     c->rope_original_max_seq_len};
}

/* The scalings are the same (theta is its own row's): both none, or llama3 alike. */
static int rope_same(const ModelRope *a, const ModelRope *b) {
    if (a->llama3 != b->llama3) return 0;
    return !a->llama3 || (a->factor == b->factor && a->low_freq_factor == b->low_freq_factor &&
                          a->high_freq_factor == b->high_freq_factor &&
                          a->original_max_seq_len == b->original_max_seq_len);
}

static void rope_text(const ModelRope *r, char *buf, size_t n) {
    char f[32], lo[32], hi[32];
    if (!r->llama3) {
        snprintf(buf, n, "none");
        return;
    }
    float_decimal(r->factor, f, sizeof f);
    float_decimal(r->low_freq_factor, lo, sizeof lo);
    float_decimal(r->high_freq_factor, hi, sizeof hi);
    snprintf(buf, n,
             "llama3 (factor %s, low_freq_factor %s, high_freq_factor %s, "
             "original_max_position_embeddings %d)",
             f, lo, hi, r->original_max_seq_len);
}

/* Any of model.rope_scaling's keys given. */
static int rope_given(const Config *cfg) {
    static const char *const keys[] = {"model.rope_scaling.type", "model.rope_scaling.factor",
                                       "model.rope_scaling.low_freq_factor",
                                       "model.rope_scaling.high_freq_factor",
                                       "model.rope_scaling.original_max_seq_len"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (config_given(cfg, keys[i])) return 1;
    return 0;
}

/* DIR/config.json read, its architecture found, completed as its model class does and its
 * own requirements checked. */
static int read_config(const char *dir, HfConfig *c, const Arch **arch, char *err, size_t errlen) {
    char path[PP_PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (stat(path, &st) != 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "model.init_from: '%s' is a directory without config.json: point it at a "
                       "Hugging Face model directory (config.json and model.safetensors) or at an "
                       "llm.c checkpoint file",
                       dir);
    int rc = hf_config_read(path, c, err, errlen);
    if (rc != PP_OK) return rc;
    char known[128];
    arch_hf_names(known, sizeof known);
    if (!c->model_type.present)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: no model_type: pptrain reads %s", path, known);
    if (!(*arch = arch_find_hf(c->model_type.value)))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: model_type \"%s\" is not supported: pptrain reads %s", path,
                       c->model_type.value, known);
    const ArchHf *hf = (*arch)->hf;
    if (hf->config_complete) hf->config_complete(c);
    return hf->config_check ? hf->config_check(c, err, errlen) : PP_OK;
}

/* The message for a key the config gives with another value than config.json's. */
static int disagree(const char *key, const char *ours, const char *path, const char *hf_key,
                    const char *theirs, char *err, size_t errlen) {
    return pp_errf(err, errlen, PP_EUSAGE,
                   "%s is %s in the config, but %s has %s %s: leave %s out of the config "
                   "(config.json gives it) or set it to %s",
                   key, ours, path, hf_key, theirs, key, theirs);
}

/* The K_ROPE row into cfg. */
static int merge_rope(Config *cfg, const HfConfig *c, char *err, size_t errlen) {
    ModelRope mine, theirs;
    const char *key;
    char a[192], b[192];
    rope_of_hf(c, &theirs, &key);
    rope_of_cfg(cfg, &mine);
    if (rope_given(cfg) && !rope_same(&mine, &theirs)) {
        rope_text(&mine, a, sizeof a);
        rope_text(&theirs, b, sizeof b);
        return disagree("model.rope_scaling", a, c->path, key, b, err, errlen);
    }
    snprintf(cfg->rope_scaling, sizeof cfg->rope_scaling, "%s", theirs.llama3 ? "llama3" : "none");
    if (theirs.llama3) {
        const float v[3] = {theirs.factor, theirs.low_freq_factor, theirs.high_freq_factor};
        for (int i = 0; i < 3; i++)
            if (!isfinite(v[i]))
                return pp_errf(err, errlen, PP_EUSAGE, "%s: %s.%s is out of range (a finite float)",
                               c->path, key, i == 0 ? "factor" : i == 1 ? "low_freq_factor"
                                                                        : "high_freq_factor");
        int64_t omax = c->rope.original_max_position_embeddings.value; /* int64: 2^32 + 5 is no 5 */
        if (omax < 1 || omax > INT_MAX)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: %s.original_max_position_embeddings %lld "
                           "is out of range (1 to %d)",
                           c->path, key, (long long)omax, INT_MAX);
        cfg->rope_factor = theirs.factor;
        cfg->rope_low_freq_factor = theirs.low_freq_factor;
        cfg->rope_high_freq_factor = theirs.high_freq_factor;
        cfg->rope_original_max_seq_len = theirs.original_max_seq_len;
    }
    return PP_OK;
}

/* Scalar row r into cfg. */
static int merge_row(Config *cfg, const HfKey *r, const HfConfig *c, const ArchHf *hf, char *err,
                     size_t errlen) {
    char theirs[64], ours[64];
    double mine = field_get(r, cfg, r->cfg), v;
    const char *key;
    int unset = (r->flags & R_AUTO) && mine == (r->kind == K_BOOL ? -1 : 0);
    int given = config_given(cfg, r->key) && !unset;
    if (!hf_value(r, c, hf, &v, &key)) {
        if (given || !(r->flags & R_REQUIRED)) return PP_OK;
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s has no %s, and the config does not set %s: add it to the config",
                       c->path, key, r->key);
    }
    if (r->kind == K_INT && (v < 1 || v > INT_MAX))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s %.0f is out of range (1 to %d)", c->path,
                       key, v, INT_MAX);
    if (r->kind == K_REAL && !isfinite((float)v)) /* 1e308 is a double, inf as a float */
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s %g is out of range (a finite float)",
                       c->path, key, v);
    value_text(r, v, theirs, sizeof theirs);
    value_text(r, mine, ours, sizeof ours);
    if (given && !agrees(r, hf, mine, v))
        return disagree(r->key, ours, c->path, key, theirs, err, errlen);
    if (!given) field_set(r, cfg, r->cfg, v);
    if ((r->flags & R_WINDOW) && v < cfg->seq_len)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: %s %s is shorter than train.seq_len %d: pptrain's attention is causal "
                       "over the whole sequence, which a sliding window equals only where it "
                       "covers it; lower train.seq_len to at most %s",
                       c->path, key, theirs, cfg->seq_len, theirs);
    return PP_OK;
}

/* config.json's token ids f as model.bos_token_id / eos_token_id text[PP_IDS_MAX]: "" for
 * none (absent or null), "2" for one id, "[1, 2]" for a list (written back as one). -1 when
 * the ids do not fit the text (nothing is dropped quietly). */
static int ids_text(const HfConfigIds *f, char *text) {
    char buf[PP_IDS_MAX + 32];
    size_t len = 0;
    text[0] = '\0';
    if (!f->present) return 0;
    if (f->list) len += (size_t)snprintf(buf, sizeof buf, "[");
    for (int i = 0; i < f->n && len < PP_IDS_MAX; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%" PRId64, i ? ", " : "",
                                f->ids[i]);
    if (f->list && len < PP_IDS_MAX) len += (size_t)snprintf(buf + len, sizeof buf - len, "]");
    if (len >= PP_IDS_MAX) return -1;
    memcpy(text, buf, len + 1);
    return 0;
}

/* What config_finalize says of cfg, on a copy: where it refuses a model key the config
 * left to config.json (or a token id config.json gave), the message says so and names the
 * file, which config_finalize's own, about model.* keys alone, cannot ("model.dim (33) is
 * not a multiple of model.n_heads (2)" when the YAML names neither). A refusal of
 * anything else is config_finalize's to give, later. */
static int finalize_named(const Config *cfg, const HfConfig *c, const ArchHf *hf,
                          const int ids_from_hf[2], char *err, size_t errlen) {
    char why[PP_ERR_MAX], from[512] = "", theirs[64];
    Config *t = pp_malloc(sizeof *t);
    *t = *cfg;
    int rc = config_finalize(t, why, sizeof why);
    free(t);
    if (rc == PP_OK) return PP_OK;
    for (size_t k = 0; k < N_KEYS; k++) {
        const HfKey *r = &k_keys[k];
        double v;
        const char *key;
        int given = r->kind == K_ROPE ? rope_given(cfg) : config_given(cfg, r->key);
        if (!row_applies(r, hf) || given || !strstr(why, r->key)) continue;
        if (r->kind == K_ROPE) {
            ModelRope rp;
            rope_of_hf(c, &rp, &key);
            pp_strappendf(from, sizeof from, "%s%s gives %s", from[0] ? "; " : "", key, r->key);
        } else if (hf_value(r, c, hf, &v, &key)) {
            value_text(r, v, theirs, sizeof theirs);
            pp_strappendf(from, sizeof from, "%s%s %s gives %s", from[0] ? "; " : "", key,
                          theirs, r->key);
        } else {
            pp_strappendf(from, sizeof from, "%sit has no %s for %s", from[0] ? "; " : "", key,
                          r->key);
        }
    }
    for (int k = 0; k < 2; k++)
        if (ids_from_hf[k] && strstr(why, k ? "model.eos_token_id" : "model.bos_token_id"))
            pp_strappendf(from, sizeof from, "%sits %s gives model.%s", from[0] ? "; " : "",
                          k ? "eos_token_id" : "bos_token_id",
                          k ? "eos_token_id" : "bos_token_id");
    if (!from[0]) return PP_OK;
    return pp_errf(err, errlen, rc, "%s: %s (%s)", c->path, why, from);
}

int model_hf_config(Config *cfg, char *err, size_t errlen) {
    char dir[PP_PATH_MAX], why[PP_ERR_MAX];
    if (!cfg->init_from[0] || pathpat_expand(cfg->init_from, dir, sizeof dir, why, sizeof why) ||
        !model_hf_is_dir(dir))
        return PP_OK;
    HfConfig c;
    const Arch *a;
    int rc = read_config(dir, &c, &a, err, errlen);
    if (rc != PP_OK) return rc;
    /* model.arch: the model_type itself where it is one (qwen2 runs the llama block), a
     * known name; else the Arch's */
    const char *arch = arch_find(c.model_type.value) ? c.model_type.value : a->name;
    if (config_given(cfg, "model.arch") && strcmp(cfg->arch, arch))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "model.arch is %s in the config, but %s has model_type \"%s\": leave "
                       "model.arch out of the config (config.json gives it) or set it to %s",
                       cfg->arch, c.path, c.model_type.value, arch);
    snprintf(cfg->arch, sizeof cfg->arch, "%.*s", (int)sizeof cfg->arch - 1, arch);
    for (size_t k = 0; k < N_KEYS && rc == PP_OK; k++)
        if (row_applies(&k_keys[k], a->hf))
            rc = k_keys[k].kind == K_ROPE ? merge_rope(cfg, &c, err, errlen)
                                          : merge_row(cfg, &k_keys[k], &c, a->hf, err, errlen);
    /* the token ids, where the config sets none: they shape no weight, so a config's own
     * (a fine-tune with another end-of-text id) is taken as it is */
    int ids_from_hf[2] = {0, 0};
    for (int k = 0; k < 2 && rc == PP_OK; k++) {
        const char *key = k ? "eos_token_id" : "bos_token_id";
        char field[32];
        snprintf(field, sizeof field, "model.%s", key);
        ids_from_hf[k] = !config_given(cfg, field);
        if (ids_from_hf[k] && ids_text(k ? &c.eos_token_id : &c.bos_token_id,
                                       k ? cfg->eos_token_id : cfg->bos_token_id))
            rc = pp_errf(err, errlen, PP_EUSAGE, "%s: %s lists more ids than pptrain keeps "
                         "(%d characters of text): set %s in the config (the ids that matter)",
                         c.path, key, PP_IDS_MAX - 1, field);
    }
    return rc == PP_OK ? finalize_named(cfg, &c, a->hf, ids_from_hf, err, errlen) : rc;
}

/* config.json against dims d (the merge made them agree; a caller with dims of its own
 * may not have). */
static int config_matches(const HfConfig *c, const Arch *a, const ModelDims *d, char *err,
                          size_t errlen) {
    char theirs[192], ours[192];
    if (strcmp(a->name, d->arch->name)) /* names: a test may build its own Arch */
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: model_type \"%s\" is model.arch %s, but the model is %s", c->path,
                       c->model_type.value, a->name, d->arch->name);
    for (size_t k = 0; k < N_KEYS; k++) {
        const HfKey *r = &k_keys[k];
        const char *key;
        double v;
        if (r->dims == NO_DIMS || !row_applies(r, a->hf)) continue;
        if (r->kind == K_ROPE) {
            ModelRope theirs_r;
            rope_of_hf(c, &theirs_r, &key);
            if (rope_same(&d->rope, &theirs_r)) continue;
            rope_text(&theirs_r, theirs, sizeof theirs);
            rope_text(&d->rope, ours, sizeof ours);
        } else {
            double mine = field_get(r, d, r->dims);
            if (!hf_value(r, c, a->hf, &v, &key) || agrees(r, a->hf, mine, v)) continue;
            value_text(r, v, theirs, sizeof theirs);
            value_text(r, mine, ours, sizeof ours);
        }
        return pp_errf(err, errlen, PP_EUSAGE, "%s has %s %s, but the model's %s is %s", c->path,
                       key, theirs, r->key, ours);
    }
    return PP_OK;
}

/* ---- tensors: pptrain's and the Hub's ([Note: Hugging Face names] in arch.h) ---- */

/* The table's row of pptrain tensor `name` ("h.3.qkvw": layer 3's qkvw; "wte"), and its
 * layer in *layer (-1: a global); NULL if it has none. */
static const ArchHfTensor *hf_row(const ArchHf *hf, const char *name, int *layer) {
    int l = -1, n = 0;
    const char *kind = name;
    if (sscanf(name, "h.%d.%n", &l, &n) == 1 && n > 0)
        kind = name + n;
    else
        l = -1;
    for (int i = 0; i < hf->ntensors; i++)
        if (hf->tensors[i].layer == (l >= 0) && !strcmp(hf->tensors[i].tensor, kind)) {
            *layer = l;
            return &hf->tensors[i];
        }
    return NULL;
}

static void hub_name(const ArchHfTensor *r, int p, int layer, char name[HUB_NAME_MAX]) {
    if (r->layer)
        snprintf(name, HUB_NAME_MAX, r->hub[p], layer);
    else
        snprintf(name, HUB_NAME_MAX, "%s", r->hub[p]);
}

static int is_vocab(const ParamTensor *t) {
    return !strcmp(t->name, "wte") || !strcmp(t->name, "lm_head");
}

/* The shape of part p of pptrain tensor t on the Hub: its ndim, shape in s. The
 * vocabulary tables have V rows there, not Vp. */
static int hub_shape(const ModelDims *d, const ArchHfTensor *r, const ParamTensor *t, int p,
                     int64_t s[2]) {
    int64_t rows = is_vocab(t) ? d->V : t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 0;
    if (r->transform == ARCH_HF_STACKED) rows = d->arch->hf->part_rows(d, r, p);
    if (r->transform == ARCH_HF_TRANSPOSED) {
        s[0] = cols;
        s[1] = rows;
        return 2;
    }
    s[0] = rows;
    s[1] = cols;
    return cols ? 2 : 1;
}

/* Hub tensor `name` in h, or without the base model's prefix (name is then shortened
 * to the name found); NULL if neither is there. */
static const SafetensorsTensor *hub_find(const HfDir *h, const ArchHf *hf, char *name,
                                         const char **file) {
    const SafetensorsTensor *t = hf_dir_find(h, name, file);
    size_t np = hf->prefix ? strlen(hf->prefix) : 0;
    if (!t && np && !strncmp(name, hf->prefix, np) && (t = hf_dir_find(h, name + np, file)))
        memmove(name, name + np, strlen(name + np) + 1);
    return t;
}

static void shape_text(int nd, const int64_t *s, char *buf, size_t n) {
    snprintf(buf, n, "[");
    for (int i = 0; i < nd; i++) pp_strappendf(buf, n, "%s%lld", i ? ", " : "", (long long)s[i]);
    pp_strappendf(buf, n, "]");
}

/* Every Hub tensor of pptrain tensor t is in h, readable, with its shape. */
static int check_tensor(const HfDir *h, const char *dir, const ModelDims *d, const ParamTensor *t,
                        char *err, size_t errlen) {
    const ArchHf *hf = d->arch->hf;
    int layer = -1;
    const ArchHfTensor *r = hf_row(hf, t->name, &layer);
    if (!r)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "model.arch %s: tensor %s has no Hugging Face name (its Arch's hf table "
                       "lacks a row)",
                       d->arch->name, t->name);
    for (int p = 0; p < ARCH_HF_PARTS && r->hub[p]; p++) {
        char name[HUB_NAME_MAX], got[96], want[96];
        const char *file;
        int64_t s[2];
        hub_name(r, p, layer, name);
        const SafetensorsTensor *st = hub_find(h, hf, name, &file);
        if (!st)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s/%s has no tensor \"%s\" (pptrain's %s): the directory does not hold "
                           "this model",
                           dir, hf_dir_sharded(h) ? HF_DIR_INDEX : HF_DIR_WEIGHTS, name, t->name);
        if (st->dtype != SAFETENSORS_F32 && st->dtype != SAFETENSORS_BF16 &&
            st->dtype != SAFETENSORS_F16)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: tensor \"%s\" is %s: pptrain reads F32, BF16 and F16 weights", file,
                           name, safetensors_dtype_name(st->dtype));
        int nd = hub_shape(d, r, t, p, s);
        if (st->ndim != nd || st->shape[0] != s[0] || (nd == 2 && st->shape[1] != s[1])) {
            shape_text(st->ndim, st->shape, got, sizeof got);
            shape_text(nd, s, want, sizeof want);
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: tensor \"%s\" has shape %s, expected %s (pptrain's %s%s)", file,
                           name, got, want, t->name,
                           r->transform == ARCH_HF_TRANSPOSED ? ", stored transposed" : "");
        }
    }
    return PP_OK;
}

/* Whether Hub name `name` is `pat` (a global's name, or a layer's with one %d, the layer
 * as %d writes it): 1 with *layer (-1 for a global), else 0. */
static int hub_match(const char *pat, const char *name, int *layer) {
    const char *pd = strstr(pat, "%d"), *s, *e;
    if (!pd) {
        *layer = -1;
        return !strcmp(pat, name);
    }
    if (strncmp(name, pat, (size_t)(pd - pat))) return 0;
    for (s = e = name + (pd - pat); *e >= '0' && *e <= '9'; e++) continue;
    if (e == s || e - s > 9 || (*s == '0' && e - s > 1) || strcmp(e, pd + 2)) return 0;
    *layer = atoi(s);
    return 1;
}

/* Whether Hub tensor `name` is one of hf's (a row's part, lm_head included, or a
 * buffer): 1 with its layer (-1: a global), else 0. A name without the base model's
 * prefix is the prefixed one's, unless h holds that too (then it is a stray copy). */
static int hub_known(const HfDir *h, const ArchHf *hf, const char *name, int *layer) {
    char full[HUB_NAME_MAX];
    size_t np = hf->prefix ? strlen(hf->prefix) : 0, nn = strlen(name);
    if (np && strncmp(name, hf->prefix, np) && np + nn < sizeof full) {
        memcpy(full, hf->prefix, np);
        memcpy(full + np, name, nn + 1);
        if (!hf_dir_find(h, full, NULL) && hub_known(h, hf, full, layer)) return 1;
    }
    for (int i = 0; i < hf->ntensors; i++)
        for (int p = 0; p < ARCH_HF_PARTS && hf->tensors[i].hub[p]; p++)
            if (hub_match(hf->tensors[i].hub[p], name, layer)) return 1;
    for (const char *const *b = hf->buffers; b && *b; b++)
        if (hub_match(*b, name, layer)) return 1;
    return 0;
}

#define UNUSED_SHOWN 5 /* names an unused-tensors message lists */

/* Append `name` quoted to buf[n]: at most HUB_NAME_MAX bytes of it, control bytes as \xNN
 * (a name is any UTF-8 the file holds; the message stays one line). */
static void append_name(char *buf, size_t n, const char *name) {
    char q[4 * HUB_NAME_MAX + 8];
    size_t k = 0, i = 0;
    q[k++] = '"';
    for (; name[i] && i < HUB_NAME_MAX; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f) k += (size_t)snprintf(q + k, sizeof q - k, "\\x%02x", ch);
        else q[k++] = (char)ch;
    }
    snprintf(q + k, sizeof q - k, "%s\"", name[i] ? "..." : "");
    pp_strappendf(buf, n, "%s", q);
}

/* Every tensor of h is one the model of dims d uses ([Note: Hugging Face names]): else
 * PP_EUSAGE naming the weights file, the first UNUSED_SHOWN unused tensors in name order
 * and their count, and, where some are layers past config.json's layer count c, those. */
static int check_unused(const HfDir *h, const char *dir, const ModelDims *d, const HfConfig *c,
                        char *err, size_t errlen) {
    const ArchHf *hf = d->arch->hf;
    char shown[UNUSED_SHOWN * (4 * HUB_NAME_MAX + 8)] = "", layers[512] = "";
    size_t n = 0, deep = 0;
    int lo = INT_MAX, hi = -1;
    for (size_t i = 0; i < hf_dir_count(h); i++) {
        const char *name = hf_dir_name(h, i);
        int layer = -1, known = hub_known(h, hf, name, &layer);
        if (known && layer < d->L) continue;
        if (known) { /* a layer the model has not */
            deep++;
            lo = layer < lo ? layer : lo;
            hi = layer > hi ? layer : hi;
        }
        if (n++ < UNUSED_SHOWN) {
            if (n > 1) pp_strappendf(shown, sizeof shown, ", ");
            append_name(shown, sizeof shown, name);
        }
    }
    if (!n) return PP_OK;
    if (n > UNUSED_SHOWN) pp_strappendf(shown, sizeof shown, " and %zu more", n - UNUSED_SHOWN);
    const char *lkey = c->num_hidden_layers.key ? c->num_hidden_layers.key : "num_hidden_layers";
    char which[64] = ",", range[32];
    if (deep < n) snprintf(which, sizeof which, "; %zu of them are", deep);
    if (lo == hi) snprintf(range, sizeof range, "layer %d", lo);
    else snprintf(range, sizeof range, "layers %d-%d", lo, hi);
    if (deep)
        snprintf(layers, sizeof layers,
                 "%s the tensors of %s, past its %s %d: pptrain would train and save a "
                 "truncated model. If the weights are one model of %d layers, set %s %d in "
                 "config.json; to start from the first %d on purpose, keep only their tensors "
                 "(and the others the model uses) in the weights",
                 which, range, lkey, d->L, hi + 1, lkey, hi + 1, d->L);
    return pp_errf(err, errlen, PP_EUSAGE,
                   "%s/%s holds %zu %s that the model %s/config.json describes (model.arch "
                   "%s) does not use: %s%s%s",
                   dir, hf_dir_sharded(h) ? HF_DIR_INDEX : HF_DIR_WEIGHTS, n,
                   n == 1 ? "tensor" : "tensors", dir, d->arch->name, shown, layers,
                   deep == n ? ""
                             : ". pptrain takes every weight of the directory or refuses it "
                               "(transformers would leave them out, unused): check that "
                               "config.json is these weights' model, or remove the tensors that "
                               "are no part of it");
}

/* Open `dir` for dims d: config.json read and matched against d, the weights opened and
 * tensors t[0..n) checked, and every tensor of the weights one d's model uses. */
static int open_checked(const char *dir, const ModelDims *d, const ParamTensor *t, int n,
                        HfDir **out, char *err, size_t errlen) {
    HfConfig c;
    const Arch *a;
    *out = NULL;
    if (!d->arch->hf)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "model.init_from: '%s': model.arch %s has no Hugging Face format", dir,
                       d->arch->name);
    int rc = read_config(dir, &c, &a, err, errlen);
    if (rc == PP_OK) rc = config_matches(&c, a, d, err, errlen);
    if (rc == PP_OK) rc = hf_dir_open(dir, out, err, errlen);
    for (int i = 0; i < n && rc == PP_OK; i++) rc = check_tensor(*out, dir, d, &t[i], err, errlen);
    if (rc == PP_OK) rc = check_unused(*out, dir, d, &c, err, errlen);
    if (rc != PP_OK) {
        hf_dir_close(*out);
        *out = NULL;
    }
    return rc;
}

int model_hf_check(const Config *cfg, char *err, size_t errlen) {
    if (!cfg->init_from[0] || !model_hf_is_dir(cfg->init_from)) return PP_OK;
    ModelDims d = model_dims(cfg);
    int n, rc = model_dims_check(&d, err, errlen);
    if (rc != PP_OK) return rc;
    ParamTensor *t = model_table(&d, &n);
    HfDir *h;
    rc = open_checked(cfg->init_from, &d, t, n, &h, err, errlen);
    hf_dir_close(h);
    free(t);
    return rc;
}

/* ---- import ---- */

/* Tensor t from h into host [numel of t] in pptrain's layout; tmp: room for one. */
static int read_tensor(HfDir *h, const ModelDims *d, const ParamTensor *t, float *host, float *tmp,
                       char *err, size_t errlen) {
    const ArchHf *hf = d->arch->hf;
    int layer = -1, rc = PP_OK;
    const ArchHfTensor *r = hf_row(hf, t->name, &layer);
    size_t off = 0, rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    for (int p = 0; p < ARCH_HF_PARTS && r->hub[p] && rc == PP_OK; p++) {
        char name[HUB_NAME_MAX];
        hub_name(r, p, layer, name);
        const SafetensorsTensor *st = hub_find(h, hf, name, NULL); /* open_checked's */
        int transposed = r->transform == ARCH_HF_TRANSPOSED;
        rc = hf_dir_read(h, name, 0, st->numel, transposed ? tmp : host + off, err, errlen);
        if (rc == PP_OK && transposed) /* the Hub's [cols, rows] */
            for (size_t i = 0; i < rows; i++)
                for (size_t j = 0; j < cols; j++) host[i * cols + j] = tmp[j * rows + i];
        off += st->numel;
    }
    if (rc == PP_OK && off < t->numel) /* the padded vocabulary rows */
        memset(host + off, 0, (t->numel - off) * sizeof(float));
    return rc;
}

static uint64_t tensor_bytes(const HfDir *h) {
    uint64_t b = 0;
    for (size_t i = 0; i < hf_dir_count(h); i++) {
        const SafetensorsTensor *t = hf_dir_find(h, hf_dir_name(h, i), NULL);
        b += t->end - t->begin;
    }
    return b;
}

int model_load_hf(Model *m, const char *dir, ModelHfRead *st, char *err, size_t errlen) {
    HfDir *h;
    int rc = open_checked(dir, &m->d, m->tensors, m->ntensors, &h, err, errlen);
    if (rc != PP_OK) return rc;
    size_t big = model_largest_tensor(m);
    float *host = pp_malloc(big * sizeof(float)), *tmp = pp_malloc(big * sizeof(float));
    for (int i = 0; i < m->ntensors && rc == PP_OK; i++) {
        const ParamTensor *t = &m->tensors[i];
        rc = read_tensor(h, &m->d, t, host, tmp, err, errlen);
        if (rc != PP_OK) break;
        m->be->to_device(m->be, m->params + t->offset, host, t->numel * sizeof(float));
        m->be->wait(m->be); /* host is reused for the next tensor */
    }
    if (st) *st = (ModelHfRead){hf_dir_bytes_read(h), tensor_bytes(h), hf_dir_header_bytes(h)};
    free(host);
    free(tmp);
    hf_dir_close(h);
    return rc;
}

/* ---- export ---- */

/* What the writer's fill needs: for write tensor i (w[i], matched by its name pointer,
 * which the writer's copies keep), its pptrain tensor, transform and first element. */
typedef struct {
    const Model *m;
    size_t n;
    const SafetensorsWriteTensor *w;
    const ParamTensor **t;
    int *transform;
    size_t *first;
    float *host; /* [model_largest_tensor] */
} Export;

static int export_fill(void *ctx, const SafetensorsWriteTensor *w, float *dst, char *err,
                       size_t errlen) {
    const Export *x = ctx;
    size_t i = 0;
    while (i < x->n && x->w[i].name != w->name) i++;
    PP_CHECK(i < x->n);
    const ParamTensor *t = x->t[i];
    const Backend *be = x->m->be;
    be->to_host(be, x->host, x->m->params + t->offset, t->numel * sizeof(float));
    be->wait(be);
    if (x->transform[i] == ARCH_HF_TRANSPOSED) {
        size_t rows = t->shape[0], cols = t->shape[1];
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) dst[c * rows + r] = x->host[r * cols + c];
        return PP_OK;
    }
    uint64_t n = 1;
    for (int k = 0; k < w->ndim; k++) n *= (uint64_t)w->shape[k];
    memcpy(dst, x->host + x->first[i], n * sizeof(float));
    return PP_OK;
}

/* Append the Hub tensors of row r at `layer` (unless the model has no such tensor: the
 * tied lm_head) to the write list. */
static int export_row(const Model *m, const ArchHfTensor *r, int layer, SafetensorsDtype dtype,
                      Export *x, SafetensorsWriteTensor *w, char (*names)[HUB_NAME_MAX], char *err,
                      size_t errlen) {
    char name[48];
    if (r->layer)
        snprintf(name, sizeof name, "h.%d.%s", layer, r->tensor);
    else
        snprintf(name, sizeof name, "%s", r->tensor);
    int i = model_find(m, name);
    if (i < 0 && !strcmp(name, "lm_head") && m->d.tied) return PP_OK;
    if (i < 0)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "a Hugging Face export needs every tensor; the model holds no %s", name);
    const ParamTensor *t = &m->tensors[i];
    size_t first = 0, cols = t->ndim == 2 ? t->shape[1] : 1;
    for (int p = 0; p < ARCH_HF_PARTS && r->hub[p]; p++) {
        size_t k = x->n++;
        hub_name(r, p, layer, names[k]);
        w[k] = (SafetensorsWriteTensor){.name = names[k], .dtype = dtype};
        w[k].ndim = hub_shape(&m->d, r, t, p, w[k].shape);
        x->t[k] = t;
        x->transform[k] = r->transform;
        x->first[k] = first; /* a stacked part's rows follow the part before */
        first += (size_t)w[k].shape[0] * cols;
    }
    return PP_OK;
}

/* The text of model.bos_token_id / eos_token_id as config.json's ids (none: absent). */
static void text_ids(const char *text, HfConfigIds *f) {
    int ids[HF_CONFIG_IDS_MAX];
    int n = text && *text ? config_ids(text, ids, HF_CONFIG_IDS_MAX) : 0;
    memset(f, 0, sizeof *f);
    if (n <= 0) return;
    f->present = 1;
    f->list = text[0] == '[';
    f->n = n;
    for (int i = 0; i < n; i++) f->ids[i] = ids[i];
}

/* config.json of m: the model keys' rows from its dims, the token ids from bos and eos
 * (model.bos_token_id's text), the rest from its Arch. */
static int export_config(const Model *m, SafetensorsDtype dtype, const char *bos,
                         const char *eos, char **text, size_t *len, char *err, size_t errlen) {
    const ArchHf *hf = m->arch->hf;
    HfConfig c;
    char buf[32];
    memset(&c, 0, sizeof c);
    c.model_type.present = c.architecture.present = c.dtype.present = 1;
    snprintf(c.model_type.value, sizeof c.model_type.value, "%s", hf->model_types[0]);
    snprintf(c.architecture.value, sizeof c.architecture.value, "%s", hf->architecture);
    snprintf(c.dtype.value, sizeof c.dtype.value, "%s",
             dtype == SAFETENSORS_BF16 ? "bfloat16" : "float32");
    for (size_t k = 0; k < N_KEYS; k++) {
        const HfKey *r = &k_keys[k];
        char *f = (char *)&c + r->hf;
        if (r->dims == NO_DIMS || !row_applies(r, hf)) continue;
        if (r->kind == K_ROPE) {
            const ModelRope *rp = &m->d.rope;
            HfConfigRope *h = (HfConfigRope *)f;
            if (!rp->llama3) continue; /* none: rope_scaling null */
            h->present = h->type.present = 1;
            snprintf(h->type.value, sizeof h->type.value, "llama3");
            h->factor = (HfConfigReal){1, NULL, float_decimal(rp->factor, buf, sizeof buf)};
            h->low_freq_factor =
                (HfConfigReal){1, NULL, float_decimal(rp->low_freq_factor, buf, sizeof buf)};
            h->high_freq_factor =
                (HfConfigReal){1, NULL, float_decimal(rp->high_freq_factor, buf, sizeof buf)};
            h->original_max_position_embeddings = (HfConfigInt){1, NULL, rp->original_max_seq_len};
            continue;
        }
        double v = field_get(r, &m->d, r->dims);
        if (r->kind == K_BOOL)
            *(HfConfigBool *)f = (HfConfigBool){1, NULL, (int)v};
        else if (r->kind == K_REAL)
            *(HfConfigReal *)f = (HfConfigReal){1, NULL, float_decimal((float)v, buf, sizeof buf)};
        else
            *(HfConfigInt *)f = (HfConfigInt){1, NULL, (int64_t)v};
    }
    if (hf->config_fill) hf->config_fill(&m->d, &c);
    text_ids(bos, &c.bos_token_id);
    text_ids(eos, &c.eos_token_id);
    return hf_config_format(&c, HF_CONFIG_ROPE_SCALING, text, len, err, errlen);
}

int model_save_hf(const Model *m, const char *dir, SafetensorsDtype dtype, uint64_t max_shard_size,
                  const char *bos, const char *eos, char *err, size_t errlen) {
    const ArchHf *hf = m->arch->hf;
    if (!hf)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "model.arch %s has no Hugging Face format: %s cannot be written",
                       m->arch->name, dir);
    size_t cap = (size_t)(m->d.L + 1) * hf->ntensors * ARCH_HF_PARTS, nfirst = 0;
    SafetensorsWriteTensor *w = pp_calloc(cap, sizeof *w);
    char(*names)[HUB_NAME_MAX] = pp_calloc(cap, HUB_NAME_MAX);
    Export x = {.m = m, .w = w};
    x.t = pp_calloc(cap, sizeof *x.t);
    x.transform = pp_calloc(cap, sizeof *x.transform);
    x.first = pp_calloc(cap, sizeof *x.first);
    x.host = pp_malloc(model_largest_tensor(m) * sizeof(float));
    int rc = PP_OK;
    while (nfirst < (size_t)hf->ntensors && !hf->tensors[nfirst].layer) nfirst++;
    /* the state dict's order: the rows before the first layer's, the layers, the rest */
    for (size_t i = 0; i < nfirst && rc == PP_OK; i++)
        rc = export_row(m, &hf->tensors[i], -1, dtype, &x, w, names, err, errlen);
    for (int l = 0; l < m->d.L && rc == PP_OK; l++)
        for (int i = 0; i < hf->ntensors && rc == PP_OK; i++)
            if (hf->tensors[i].layer)
                rc = export_row(m, &hf->tensors[i], l, dtype, &x, w, names, err, errlen);
    for (int i = (int)nfirst; i < hf->ntensors && rc == PP_OK; i++)
        if (!hf->tensors[i].layer)
            rc = export_row(m, &hf->tensors[i], -1, dtype, &x, w, names, err, errlen);
    char *text = NULL;
    size_t len = 0;
    if (rc == PP_OK) rc = export_config(m, dtype, bos, eos, &text, &len, err, errlen);
    if (rc == PP_OK) {
        static const SafetensorsMeta meta[] = {{"format", "pt"}}; /* save_pretrained's */
        HfDirFile files[] = {{"config.json", text, len}};
        HfDirWriteOptions o = {.max_shard_size = max_shard_size,
                               .meta = meta,
                               .nmeta = 1,
                               .fill = export_fill,
                               .ctx = &x,
                               .files = files,
                               .nfiles = 1};
        rc = hf_dir_write(dir, w, x.n, &o, err, errlen);
    }
    free(text);
    free(x.t);
    free(x.transform);
    free(x.first);
    free(x.host);
    free(names);
    free(w);
    return rc;
}
