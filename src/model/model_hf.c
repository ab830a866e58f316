/* model_hf.c — Hugging Face model directories for the stage engine: config.json's model
 * keys, the check of a directory's weights, a rank's import and a whole model's export
 * (model_hf.h), through the Arch's hf table. */
#include "model_hf.h"

#include <limits.h>
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

enum { K_INT, K_BOOL };

/* One model key: the config's, the ModelDims field it becomes (both ints), and
 * config.json's field (an HfConfigInt, or an HfConfigBool), named by its keys where the
 * file lacks it. A key of another architecture is one more row. */
typedef struct {
    const char *key;
    size_t cfg, dims, hf;
    int kind;
    const char *hf_name;
} HfKey;

#define ROW(key, cfgf, dimf, hff, kind, names)                                                     \
    { key, offsetof(Config, cfgf), offsetof(ModelDims, dimf), offsetof(HfConfig, hff), kind, names }
static const HfKey k_keys[] = {
    ROW("model.vocab_size", vocab_size, V, vocab_size, K_INT, "vocab_size"),
    ROW("model.max_seq_len", max_seq_len, maxT, max_position_embeddings, K_INT,
        "max_position_embeddings (n_positions)"),
    ROW("model.n_layers", n_layers, L, num_hidden_layers, K_INT, "num_hidden_layers (n_layer)"),
    ROW("model.n_heads", n_heads, NH, num_attention_heads, K_INT, "num_attention_heads (n_head)"),
    ROW("model.dim", dim, C, hidden_size, K_INT, "hidden_size (n_embd)"),
    ROW("model.tie_embeddings", tie_embeddings, tied, tie_word_embeddings, K_BOOL,
        "tie_word_embeddings"),
};
#undef ROW
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

/* Row r's value in c: 1 with *v and *key (the file's key, or what the model class
 * defaults to when the file leaves it out: tie_word_embeddings), else 0. */
static int hf_value(const HfKey *r, const HfConfig *c, const ArchHf *hf, long long *v,
                    const char **key) {
    const char *p = (const char *)c + r->hf;
    if (r->kind == K_BOOL) {
        const HfConfigBool *b = (const HfConfigBool *)p;
        *v = b->present ? b->value : hf->tie_default;
        *key = b->present ? b->key : "tie_word_embeddings (left out: the model class's default)";
        return 1;
    }
    const HfConfigInt *i = (const HfConfigInt *)p;
    *v = i->value;
    *key = i->present ? i->key : r->hf_name;
    return i->present;
}

static int *int_at(void *base, size_t off) { return (int *)((char *)base + off); }

static void value_text(const HfKey *r, long long v, char *buf, size_t n) {
    if (r->kind == K_BOOL)
        snprintf(buf, n, "%s", v ? "true" : "false");
    else
        snprintf(buf, n, "%lld", v);
}

/* DIR/config.json read, its architecture found and its own requirements checked. */
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
    return (*arch)->hf->config_check ? (*arch)->hf->config_check(c, err, errlen) : PP_OK;
}

int model_hf_config(Config *cfg, char *err, size_t errlen) {
    char dir[PP_PATH_MAX], why[PP_ERR_MAX], theirs[32], ours[32];
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
    for (size_t k = 0; k < N_KEYS; k++) {
        const HfKey *r = &k_keys[k];
        int *mine = int_at(cfg, r->cfg);
        /* tie_embeddings: auto (-1) in the file leaves the choice to config.json */
        int given = config_given(cfg, r->key) && !(r->kind == K_BOOL && *mine < 0);
        long long v;
        const char *key;
        if (!hf_value(r, &c, a->hf, &v, &key)) {
            if (given) continue;
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s has no %s, and the config does not set %s: add it to the config",
                           c.path, key, r->key);
        }
        if (r->kind == K_INT && (v < 1 || v > INT_MAX))
            return pp_errf(err, errlen, PP_EUSAGE, "%s: %s %lld is out of range (1 to %d)", c.path,
                           key, v, INT_MAX);
        value_text(r, v, theirs, sizeof theirs);
        value_text(r, *mine, ours, sizeof ours);
        if (given && *mine != v)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s is %s in the config, but %s has %s %s: leave %s out of the config "
                           "(config.json gives it) or set it to %s",
                           r->key, ours, c.path, key, theirs, r->key, theirs);
        *mine = (int)v;
    }
    return PP_OK;
}

/* config.json against dims d (the merge made them agree; a caller with dims of its own
 * may not have). */
static int config_matches(const HfConfig *c, const Arch *a, const ModelDims *d, char *err,
                          size_t errlen) {
    char theirs[32], ours[32];
    if (strcmp(a->name, d->arch->name)) /* names: a test may build its own Arch */
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: model_type \"%s\" is model.arch %s, but the model is %s", c->path,
                       c->model_type.value, a->name, d->arch->name);
    for (size_t k = 0; k < N_KEYS; k++) {
        const HfKey *r = &k_keys[k];
        long long v;
        const char *key;
        int mine = *int_at((void *)d, r->dims);
        if (hf_value(r, c, a->hf, &v, &key) && v != mine) {
            value_text(r, v, theirs, sizeof theirs);
            value_text(r, mine, ours, sizeof ours);
            return pp_errf(err, errlen, PP_EUSAGE, "%s has %s %s, but the model's %s is %s",
                           c->path, key, theirs, r->key, ours);
        }
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

/* Open `dir` for dims d: config.json read and matched against d, the weights opened and
 * tensors t[0..n) checked. */
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

/* config.json of m: the model keys' rows from its dims, the rest from its Arch. */
static int export_config(const Model *m, SafetensorsDtype dtype, char **text, size_t *len,
                         char *err, size_t errlen) {
    const ArchHf *hf = m->arch->hf;
    HfConfig c;
    memset(&c, 0, sizeof c);
    c.model_type.present = c.architecture.present = c.dtype.present = 1;
    snprintf(c.model_type.value, sizeof c.model_type.value, "%s", hf->model_types[0]);
    snprintf(c.architecture.value, sizeof c.architecture.value, "%s", hf->architecture);
    snprintf(c.dtype.value, sizeof c.dtype.value, "%s",
             dtype == SAFETENSORS_BF16 ? "bfloat16" : "float32");
    for (size_t k = 0; k < N_KEYS; k++) {
        int v = *int_at((void *)&m->d, k_keys[k].dims);
        char *f = (char *)&c + k_keys[k].hf;
        if (k_keys[k].kind == K_BOOL)
            *(HfConfigBool *)f = (HfConfigBool){1, NULL, v};
        else
            *(HfConfigInt *)f = (HfConfigInt){1, NULL, v};
    }
    if (hf->config_fill) hf->config_fill(&m->d, &c);
    return hf_config_format(&c, HF_CONFIG_ROPE_SCALING, text, len, err, errlen);
}

int model_save_hf(const Model *m, const char *dir, SafetensorsDtype dtype, uint64_t max_shard_size,
                  char *err, size_t errlen) {
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
    if (rc == PP_OK) rc = export_config(m, dtype, &text, &len, err, errlen);
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
