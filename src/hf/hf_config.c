/* hf_config.c — config.json read through one table of keys, and written as
 * transformers writes it (see hf_config.h). */
#include "hf_config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hf_json_internal.h"

#define CONFIG_MAX (16u << 20) /* bytes: real config.json files are a few KB */

typedef enum { F_INT, F_REAL, F_BOOL, F_STR, F_IDS, F_ARCH } FieldKind;

/* One key of config.json and the field it fills. A key with a '.' is inside an object
 * ("rope_scaling.factor"). Several keys may fill one field: they must then agree, except
 * that a `weak` key is ignored once the field is filled (transformers reads
 * rope_scaling's rope_type before its older type). */
typedef struct {
    const char *key;
    FieldKind kind;
    size_t off;
    int weak;
} Field;

#define F(key, kind, field)                                                                        \
    { key, kind, offsetof(HfConfig, field), 0 }
static const Field g_fields[] = {
    F("model_type", F_STR, model_type),
    F("architectures", F_ARCH, architecture),
    F("vocab_size", F_INT, vocab_size),
    F("hidden_size", F_INT, hidden_size),
    F("n_embd", F_INT, hidden_size),
    F("num_hidden_layers", F_INT, num_hidden_layers),
    F("n_layer", F_INT, num_hidden_layers),
    F("num_attention_heads", F_INT, num_attention_heads),
    F("n_head", F_INT, num_attention_heads),
    F("num_key_value_heads", F_INT, num_key_value_heads),
    F("head_dim", F_INT, head_dim),
    F("intermediate_size", F_INT, intermediate_size),
    F("n_inner", F_INT, intermediate_size),
    F("max_position_embeddings", F_INT, max_position_embeddings),
    F("n_positions", F_INT, max_position_embeddings),
    F("rms_norm_eps", F_REAL, norm_eps),
    F("layer_norm_epsilon", F_REAL, norm_eps),
    F("hidden_act", F_STR, hidden_act),
    F("activation_function", F_STR, hidden_act),
    F("rope_theta", F_REAL, rope_theta),
    F("rope_parameters.rope_theta", F_REAL, rope_theta),
    F("rope_parameters.rope_type", F_STR, rope.type),
    F("rope_parameters.factor", F_REAL, rope.factor),
    F("rope_parameters.low_freq_factor", F_REAL, rope.low_freq_factor),
    F("rope_parameters.high_freq_factor", F_REAL, rope.high_freq_factor),
    F("rope_parameters.original_max_position_embeddings", F_INT,
      rope.original_max_position_embeddings),
    F("rope_scaling.rope_type", F_STR, rope.type),
    {"rope_scaling.type", F_STR, offsetof(HfConfig, rope.type), 1},
    F("rope_scaling.factor", F_REAL, rope.factor),
    F("rope_scaling.low_freq_factor", F_REAL, rope.low_freq_factor),
    F("rope_scaling.high_freq_factor", F_REAL, rope.high_freq_factor),
    F("rope_scaling.original_max_position_embeddings", F_INT,
      rope.original_max_position_embeddings),
    F("tie_word_embeddings", F_BOOL, tie_word_embeddings),
    F("attention_bias", F_BOOL, attention_bias),
    F("mlp_bias", F_BOOL, mlp_bias),
    F("sliding_window", F_INT, sliding_window),
    F("use_sliding_window", F_BOOL, use_sliding_window),
    F("scale_attn_weights", F_BOOL, scale_attn_weights),
    F("scale_attn_by_inverse_layer_idx", F_BOOL, scale_attn_by_inverse_layer_idx),
    F("bos_token_id", F_IDS, bos_token_id),
    F("eos_token_id", F_IDS, eos_token_id),
    F("torch_dtype", F_STR, dtype),
    F("dtype", F_STR, dtype),
};
/* generation_config.json's keys that generation takes from it (pptrain sample's
 * end-of-text ids): the rest of a GenerationConfig is no model key (hf_config.h) */
static const Field g_generation_fields[] = {
    F("eos_token_id", F_IDS, eos_token_id),
};
#undef F

static const char *kind_words(FieldKind k) {
    switch (k) {
    case F_INT: return "an integer";
    case F_REAL: return "a number";
    case F_BOOL: return "true or false";
    case F_STR: return "a string";
    case F_IDS: return "an integer or a list of integers";
    case F_ARCH: return "a list of strings";
    }
    return "?";
}

/* The value at the table key `key` in root ("a.b" one level down); NULL if absent or
 * null. */
static const json_t *lookup(const json_t *root, const char *key) {
    const char *dot = strchr(key, '.');
    const json_t *v;
    if (dot) {
        char parent[64];
        snprintf(parent, sizeof parent, "%.*s", (int)(dot - key), key);
        const json_t *o = json_object_get(root, parent);
        v = o && json_is_object(o) ? json_object_get(o, dot + 1) : NULL;
    } else {
        v = json_object_get(root, key);
    }
    return v && !json_is_null(v) ? v : NULL;
}

/* Parse v as the field's kind into a fresh field *out (an HfConfig* field's type). */
static int parse_value(const char *path, const Field *f, const json_t *v, void *out, char *err,
                       size_t errlen) {
    int ok = 1;
    switch (f->kind) {
    case F_INT:
        if ((ok = json_is_integer(v))) ((HfConfigInt *)out)->value = json_integer_value(v);
        break;
    case F_REAL:
        if ((ok = json_is_number(v))) ((HfConfigReal *)out)->value = json_number_value(v);
        break;
    case F_BOOL:
        if ((ok = json_is_boolean(v))) ((HfConfigBool *)out)->value = json_is_true(v);
        break;
    case F_ARCH:
    case F_STR:
        if (f->kind == F_ARCH) { /* its first element is the string; [] is absent */
            if (!(ok = json_is_array(v)) || json_array_size(v) == 0) break;
            v = json_array_get(v, 0);
        }
        if (!json_is_string(v))
            return pp_errf(err, errlen, PP_EUSAGE, "%s: %s%s is %s, expected a string", path,
                           f->key, f->kind == F_ARCH ? "[0]" : "", hf_json_kind(v));
        if (json_string_length(v) >= HF_CONFIG_STR_MAX)
            return pp_errf(err, errlen, PP_EUSAGE, "%s: %s is %zu bytes long, over %d", path,
                           f->key, json_string_length(v), HF_CONFIG_STR_MAX - 1);
        strcpy(((HfConfigStr *)out)->value, json_string_value(v));
        break;
    case F_IDS: {
        HfConfigIds *ids = out;
        ids->list = json_is_array(v);
        size_t n = ids->list ? json_array_size(v) : 1;
        if (n > HF_CONFIG_IDS_MAX)
            return pp_errf(err, errlen, PP_EUSAGE, "%s: %s lists %zu ids, more than %d", path,
                           f->key, n, HF_CONFIG_IDS_MAX);
        for (size_t i = 0; i < n && ok; i++) {
            const json_t *e = ids->list ? json_array_get(v, i) : v;
            if (json_is_integer(e))
                ids->ids[ids->n++] = json_integer_value(e);
            else if (ids->list)
                return pp_errf(err, errlen, PP_EUSAGE, "%s: %s[%zu] is %s, expected an integer",
                               path, f->key, i, hf_json_kind(e));
            else
                ok = 0;
        }
        break;
    }
    }
    if (!ok)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s is %s, expected %s", path, f->key,
                       hf_json_kind(v), kind_words(f->kind));
    return PP_OK;
}

/* The field's value in words, for a disagreement. */
static void value_str(FieldKind k, const void *p, char *buf, size_t n) {
    buf[0] = 0;
    switch (k) {
    case F_INT: snprintf(buf, n, "%lld", (long long)((const HfConfigInt *)p)->value); break;
    case F_REAL: hf_json_format_real(((const HfConfigReal *)p)->value, buf); break;
    case F_BOOL: snprintf(buf, n, "%s", ((const HfConfigBool *)p)->value ? "true" : "false"); break;
    case F_STR:
    case F_ARCH: snprintf(buf, n, "\"%s\"", ((const HfConfigStr *)p)->value); break;
    case F_IDS: {
        const HfConfigIds *ids = p;
        for (int i = 0; i < ids->n; i++)
            pp_strappendf(buf, n, "%s%lld", i ? "," : "", (long long)ids->ids[i]);
        break;
    }
    }
}

/* Every field type begins with {int present; const char *key;}. */
typedef struct {
    int present;
    const char *key;
} FieldHead;

/* One field's value, whatever its kind. */
typedef union {
    FieldHead head;
    HfConfigInt i;
    HfConfigReal r;
    HfConfigBool b;
    HfConfigStr s;
    HfConfigIds ids;
} FieldValue;

static size_t field_size(FieldKind k) {
    switch (k) {
    case F_INT: return sizeof(HfConfigInt);
    case F_REAL: return sizeof(HfConfigReal);
    case F_BOOL: return sizeof(HfConfigBool);
    case F_STR:
    case F_ARCH: return sizeof(HfConfigStr);
    case F_IDS: return sizeof(HfConfigIds);
    }
    return 0;
}

/* Whether two keys of one field gave the same value (an id and a list of that one id
 * are the same). */
static int same_value(FieldKind k, const FieldValue *a, const FieldValue *b) {
    switch (k) {
    case F_INT: return a->i.value == b->i.value;
    case F_REAL: return a->r.value == b->r.value;
    case F_BOOL: return a->b.value == b->b.value;
    case F_STR:
    case F_ARCH: return strcmp(a->s.value, b->s.value) == 0;
    case F_IDS:
        return a->ids.n == b->ids.n &&
               memcmp(a->ids.ids, b->ids.ids, sizeof(int64_t) * (size_t)a->ids.n) == 0;
    }
    return 0;
}

static int read_field(HfConfig *c, const json_t *root, const Field *f, char *err, size_t errlen) {
    const json_t *v = lookup(root, f->key);
    FieldValue *dst = (FieldValue *)((char *)c + f->off), val;
    if (!v || (dst->head.present && f->weak)) return PP_OK;
    memset(&val, 0, sizeof val);
    int rc = parse_value(c->path, f, v, &val, err, errlen);
    if (rc != PP_OK) return rc;
    if (f->kind == F_ARCH && !val.s.value[0]) return PP_OK; /* [] */
    val.head.present = 1;
    val.head.key = f->key;
    if (!dst->head.present) {
        memcpy(dst, &val, field_size(f->kind));
    } else if (!same_value(f->kind, dst, &val)) {
        char a[96], b[96];
        value_str(f->kind, dst, a, sizeof a);
        value_str(f->kind, &val, b, sizeof b);
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s %s and %s %s disagree", c->path,
                       dst->head.key, a, f->key, b);
    }
    return PP_OK;
}

/* rope_scaling and rope_parameters: an object or null, and not per layer type. */
static int read_rope(HfConfig *c, const json_t *root, char *err, size_t errlen) {
    static const char *const keys[] = {"rope_scaling", "rope_parameters"};
    for (int k = 0; k < 2; k++) {
        const json_t *o = json_object_get(root, keys[k]);
        if (!o || json_is_null(o)) continue;
        if (!json_is_object(o))
            return pp_errf(err, errlen, PP_EUSAGE, "%s: %s is %s, expected an object or null",
                           c->path, keys[k], hf_json_kind(o));
        const char *sub;
        json_t *v;
        json_object_foreach((json_t *)o, sub, v) if (json_is_object(v)) return pp_errf(
            err, errlen, PP_EUSAGE,
            "%s: %s.%s is an object: RoPE parameters per layer type are not "
            "supported",
            c->path, keys[k], sub);
        c->rope.present = 1;
        c->rope.key = keys[k]; /* rope_parameters wins the name */
    }
    return PP_OK;
}

/* The JSON object at `path` into *c (zeroed first): the keys of fields[0..n), and RoPE's
 * objects where `rope`. */
static int read_file(const char *path, HfConfig *c, const Field *fields, size_t n, int rope,
                     char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    json_t *root;
    int rc = hf_json_load_file(path, CONFIG_MAX, &root, err, errlen);
    if (rc != PP_OK) return rc;
    if (rope) rc = read_rope(c, root, err, errlen);
    for (size_t i = 0; i < n && rc == PP_OK; i++) rc = read_field(c, root, &fields[i], err, errlen);
    json_decref(root);
    return rc;
}

int hf_config_read(const char *path, HfConfig *c, char *err, size_t errlen) {
    return read_file(path, c, g_fields, sizeof g_fields / sizeof g_fields[0], 1, err, errlen);
}

int hf_generation_config_read(const char *path, HfConfig *c, char *err, size_t errlen) {
    return read_file(path, c, g_generation_fields,
                     sizeof g_generation_fields / sizeof g_generation_fields[0], 0, err, errlen);
}

/* ---- writing ------------------------------------------------------------------------ */

static int need(const HfConfig *c, const void *field, const char *name, char *err, size_t errlen) {
    if (((const FieldHead *)field)->present) return PP_OK;
    return pp_errf(err, errlen, PP_EUSAGE, "cannot write config.json: %s is not set", name);
}

static void put_int(json_t *o, const char *key, const HfConfigInt *f) {
    if (f->present) json_object_set_new(o, key, json_integer((json_int_t)f->value));
}
static void put_real(json_t *o, const char *key, const HfConfigReal *f) {
    if (f->present) json_object_set_new(o, key, json_real(f->value));
}
static void put_bool(json_t *o, const char *key, const HfConfigBool *f) {
    if (f->present) json_object_set_new(o, key, json_boolean(f->value));
}
static void put_str(json_t *o, const char *key, const HfConfigStr *f) {
    if (f->present) json_object_set_new(o, key, json_string(f->value));
}
static void put_ids(json_t *o, const char *key, const HfConfigIds *f) {
    if (!f->present) return;
    if (!f->list) {
        json_object_set_new(o, key, json_integer((json_int_t)f->ids[0]));
        return;
    }
    json_t *a = json_array();
    for (int i = 0; i < f->n; i++) json_array_append_new(a, json_integer((json_int_t)f->ids[i]));
    json_object_set_new(o, key, a);
}

/* The class transformers names for a model type, NULL if we know none. */
static const char *default_architecture(const char *model_type) {
    static const char *const map[][2] = {{"llama", "LlamaForCausalLM"},
                                         {"mistral", "MistralForCausalLM"},
                                         {"qwen2", "Qwen2ForCausalLM"},
                                         {"gpt2", "GPT2LMHeadModel"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i][0], model_type) == 0) return map[i][1];
    return NULL;
}

/* RoPE in the chosen form. */
static void put_rope(json_t *o, const HfConfig *c, HfConfigForm form) {
    const HfConfigRope *r = &c->rope;
    json_t *p = json_object();
    if (form == HF_CONFIG_ROPE_PARAMETERS) {
        put_real(p, "rope_theta", &c->rope_theta);
        json_object_set_new(p, "rope_type",
                            json_string(r->type.present ? r->type.value : "default"));
    } else {
        put_real(o, "rope_theta", &c->rope_theta);
        put_str(p, "rope_type", &r->type);
    }
    put_real(p, "factor", &r->factor);
    put_real(p, "low_freq_factor", &r->low_freq_factor);
    put_real(p, "high_freq_factor", &r->high_freq_factor);
    put_int(p, "original_max_position_embeddings", &r->original_max_position_embeddings);
    if (form == HF_CONFIG_ROPE_PARAMETERS) {
        json_object_set_new(o, "rope_parameters", p);
    } else if (json_object_size(p) == 0 ||
               (r->type.present && strcmp(r->type.value, "default") == 0 &&
                json_object_size(p) == 1)) {
        json_decref(p);
        json_object_set_new(o, "rope_scaling", json_null());
    } else {
        json_object_set_new(o, "rope_scaling", p);
    }
}

/* The keys of the model type's form into o. */
static int put_fields(json_t *o, const HfConfig *c, HfConfigForm form, char *err, size_t errlen) {
    int gpt2 = strcmp(c->model_type.value, "gpt2") == 0;
    const char *arch = c->architecture.present ? c->architecture.value
                                               : default_architecture(c->model_type.value);
    if (!arch) return need(c, &c->architecture, "architecture", err, errlen);
    json_t *a = json_array();
    json_array_append_new(a, json_string(arch));
    json_object_set_new(o, "architectures", a);
    put_str(o, "model_type", &c->model_type);
    put_int(o, "vocab_size", &c->vocab_size);
    put_ids(o, "bos_token_id", &c->bos_token_id);
    put_ids(o, "eos_token_id", &c->eos_token_id);
    put_bool(o, "tie_word_embeddings", &c->tie_word_embeddings);
    put_str(o, form == HF_CONFIG_ROPE_PARAMETERS ? "dtype" : "torch_dtype", &c->dtype);
    if (gpt2) {
        put_int(o, "n_embd", &c->hidden_size);
        put_int(o, "n_layer", &c->num_hidden_layers);
        put_int(o, "n_head", &c->num_attention_heads);
        if (c->intermediate_size.present)
            put_int(o, "n_inner", &c->intermediate_size);
        else
            json_object_set_new(o, "n_inner", json_null());
        put_int(o, "n_positions", &c->max_position_embeddings);
        put_real(o, "layer_norm_epsilon", &c->norm_eps);
        put_str(o, "activation_function", &c->hidden_act);
        return PP_OK;
    }
    int rc = need(c, &c->intermediate_size, "intermediate_size", err, errlen);
    if (rc != PP_OK) return rc;
    put_int(o, "hidden_size", &c->hidden_size);
    put_int(o, "num_hidden_layers", &c->num_hidden_layers);
    put_int(o, "num_attention_heads", &c->num_attention_heads);
    put_int(o, "num_key_value_heads", &c->num_key_value_heads);
    put_int(o, "head_dim", &c->head_dim);
    put_int(o, "intermediate_size", &c->intermediate_size);
    put_int(o, "max_position_embeddings", &c->max_position_embeddings);
    put_real(o, "rms_norm_eps", &c->norm_eps);
    put_str(o, "hidden_act", &c->hidden_act);
    put_bool(o, "attention_bias", &c->attention_bias);
    put_bool(o, "mlp_bias", &c->mlp_bias);
    if (c->sliding_window.present)
        put_int(o, "sliding_window", &c->sliding_window);
    else if (!strcmp(c->model_type.value, "mistral") || !strcmp(c->model_type.value, "qwen2"))
        json_object_set_new(o, "sliding_window", json_null()); /* no window (absent: 4096) */
    put_bool(o, "use_sliding_window", &c->use_sliding_window);
    put_rope(o, c, form);
    return PP_OK;
}

int hf_config_format(const HfConfig *c, HfConfigForm form, char **text, size_t *len, char *err,
                     size_t errlen) {
    *text = NULL;
    *len = 0;
    static const struct {
        size_t off;
        const char *name;
    } required[] = {
        {offsetof(HfConfig, model_type), "model_type"},
        {offsetof(HfConfig, vocab_size), "vocab_size"},
        {offsetof(HfConfig, hidden_size), "hidden_size"},
        {offsetof(HfConfig, num_hidden_layers), "num_hidden_layers"},
        {offsetof(HfConfig, num_attention_heads), "num_attention_heads"},
        {offsetof(HfConfig, max_position_embeddings), "max_position_embeddings"},
        {offsetof(HfConfig, norm_eps), "norm_eps"},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        int rc = need(c, (const char *)c + required[i].off, required[i].name, err, errlen);
        if (rc != PP_OK) return rc;
    }
    json_t *o = json_object();
    int rc = put_fields(o, c, form, err, errlen);
    if (rc == PP_OK) {
        HfBuf b = {0};
        hf_json_dump_python(&b, o);
        hf_buf_puts(&b, "\n");
        *text = b.p;
        *len = b.len;
    }
    json_decref(o);
    return rc;
}

int hf_config_write(const char *path, const HfConfig *c, HfConfigForm form, char *err,
                    size_t errlen) {
    char *text;
    size_t len;
    int rc = hf_config_format(c, form, &text, &len, err, errlen);
    if (rc != PP_OK) return rc;
    PPFile pf;
    rc = pp_file_create(&pf, path, NULL, err, errlen);
    if (rc == PP_OK) {
        fwrite(text, 1, len, pf.f);
        rc = pp_file_commit(&pf, err, errlen);
    }
    free(text);
    return rc;
}
