/* test_model_hf.c — model_hf: a model written as a Hugging Face directory and read back
 * into other splits (every held tensor bit for bit, the padded rows zero, only its own
 * bytes read), untied and bf16 exports, a stacked row through a table of the test's own,
 * the merge of config.json's model keys into a config and what GPT-2 refuses in it; the
 * Llama family's (llama, qwen2, mistral) names, stacked q/k/v, config.json both ways,
 * the merge of its keys, the class defaults and what its block refuses.
 * (test_hf.c tests src/hf/ itself; test/hf.sh the command line.) Run from the
 * repository root (reads test/hf/gpt2). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "checkrun.h"
#include "config.h"
#include "hf/hf_config.h"
#include "hf/hf_dir.h"
#include "model/model.h"
#include "model/model_hf.h"
#include "testdir.h"

static char g_err[PP_ERR_MAX];

static void setup(void) {
    testdir_create("pp_test_model_hf");
    g_err[0] = 0;
}

static void teardown(void) { testdir_remove(); }

/* V 13 padded to 16; 4 layers. */
static const ModelDims tiny =
    {.V = 13, .Vp = 16, .maxT = 8, .L = 4, .NH = 2, .C = 8, .tied = 1, .arch = &arch_gpt2};
static const ChunkSpec whole = {0, 0, 4, 1, 1, 1, 0};

/* A model of every stage whose every parameter is distinct (so a tensor read into the
 * wrong place, or not transposed, shows), the padded vocabulary rows 0 as pptrain keeps
 * them. */
static void make_whole(Model *m, const ModelDims *d) {
    model_init(m, d, &whole, 1, 1, 4, backend_cpu());
    for (size_t i = 0; i < m->nparams; i++) m->params[i] = (float)((i * 37) % 1009) / 512.0f - 1;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        if (!strcmp(t->name, "wte") || !strcmp(t->name, "lm_head"))
            memset(m->params + t->offset + (size_t)d->V * d->C, 0,
                   (size_t)(d->Vp - d->V) * d->C * sizeof(float));
    }
}

/* Every tensor b holds equals a's of the same name, bit for bit. */
static void assert_same(const Model *a, const Model *b) {
    for (int i = 0; i < b->ntensors; i++) {
        const ParamTensor *t = &b->tensors[i];
        int j = model_find(a, t->name);
        ck_assert_msg(j >= 0, "%s", t->name);
        ck_assert_msg(memcmp(b->params + t->offset, a->params + a->tensors[j].offset,
                             t->numel * sizeof(float)) == 0,
                      "%s differs", t->name);
    }
}

/* A whole model written at fp32 and read into a middle stage, the last stage (which
 * holds the tied wte) and a model with another padded vocabulary: every held tensor
 * equal, the padded rows zero, and each reads the bytes of its own tensors alone. */
START_TEST(test_roundtrip_splits) {
    Model w;
    make_whole(&w, &tiny);
    ck_assert_msg(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                sizeof g_err) == PP_OK,
                  "%s", g_err);
    ck_assert(file_exists(tmp("out/model.safetensors")) && file_exists(tmp("out/config.json")));
    ck_assert(!file_exists(tmp("out/" HF_DIR_INDEX)));
    const ChunkSpec specs[] = {{1, 1, 3, 0, 0, 1, 0}, {2, 3, 4, 0, 1, 1, 0}};
    for (int k = 0; k < 2; k++) {
        Model b;
        ModelHfRead st;
        model_init(&b, &tiny, &specs[k], 1, 1, 4, backend_cpu());
        ck_assert_msg(model_load_hf(&b, tmp("out"), &st, g_err, sizeof g_err) == PP_OK, "%s",
                      g_err);
        assert_same(&w, &b);
        uint64_t want = 0; /* its tensors' bytes on the Hub: wte has V rows there */
        for (int i = 0; i < b.ntensors; i++)
            want += strcmp(b.tensors[i].name, "wte") ? b.tensors[i].numel * 4
                                                     : (uint64_t)tiny.V * tiny.C * 4;
        ck_assert_uint_eq(st.read, want);
        ck_assert_uint_lt(st.read, st.total);
        ck_assert_uint_eq(st.total, (uint64_t)(w.nparams - (tiny.Vp - tiny.V) * tiny.C) * 4);
        model_free(&b);
    }
    ModelDims d2 = tiny;
    d2.Vp = 32;
    Model c;
    model_init(&c, &d2, &whole, 1, 1, 4, backend_cpu());
    model_init_weights(&c, 5, 0.3f); /* the padded rows must come out zero, not random */
    for (size_t i = 0; i < c.nparams; i++) c.params[i] += 1;
    ck_assert_msg(model_load_hf(&c, tmp("out"), NULL, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    for (int i = 0; i < c.ntensors; i++) {
        const ParamTensor *t = &c.tensors[i];
        const float *cw = c.params + t->offset;
        int j = model_find(&w, t->name);
        size_t n = strcmp(t->name, "wte") ? t->numel : (size_t)tiny.V * tiny.C;
        ck_assert_msg(memcmp(cw, w.params + w.tensors[j].offset, n * 4) == 0, "%s", t->name);
        for (size_t e = n; e < t->numel; e++) ck_assert_msg(cw[e] == 0, "%s[%zu]", t->name, e);
    }
    model_free(&c);
    model_free(&w);
}
END_TEST

/* The Hub's names and transposes, looked at in the file: c_attn.weight is qkvw's
 * transpose, wte has V rows, no lm_head.weight when tied; config.json is GPT-2's. */
START_TEST(test_hub_layout) {
    Model w;
    make_whole(&w, &tiny);
    ck_assert_int_eq(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    HfDir *h;
    ck_assert_int_eq(hf_dir_open(tmp("out"), &h, g_err, sizeof g_err), PP_OK);
    ck_assert_uint_eq(hf_dir_count(h), (size_t)w.ntensors);
    ck_assert_ptr_null(hf_dir_find(h, "lm_head.weight", NULL));
    const SafetensorsTensor *t = hf_dir_find(h, "transformer.h.3.attn.c_attn.weight", NULL);
    ck_assert(t && t->ndim == 2 && t->shape[0] == tiny.C && t->shape[1] == 3 * tiny.C);
    float got[8 * 24];
    ck_assert_int_eq(hf_dir_read(h, "transformer.h.3.attn.c_attn.weight", 0, 8 * 24, got, g_err,
                                 sizeof g_err),
                     PP_OK);
    const float *q = w.params + w.tensors[model_find(&w, "h.3.qkvw")].offset; /* [3C, C] */
    for (int r = 0; r < 3 * tiny.C; r++)
        for (int c = 0; c < tiny.C; c++) ck_assert(got[c * 3 * tiny.C + r] == q[r * tiny.C + c]);
    t = hf_dir_find(h, "transformer.wte.weight", NULL);
    ck_assert(t && t->shape[0] == tiny.V && t->shape[1] == tiny.C);
    hf_dir_close(h);
    HfConfig c;
    ck_assert_int_eq(hf_config_read(tmp("out/config.json"), &c, g_err, sizeof g_err), PP_OK);
    ck_assert_str_eq(c.model_type.value, "gpt2");
    ck_assert_str_eq(c.architecture.value, "GPT2LMHeadModel");
    ck_assert_str_eq(c.hidden_size.key, "n_embd");
    ck_assert(c.vocab_size.value == 13 && c.hidden_size.value == 8 &&
              c.num_hidden_layers.value == 4);
    ck_assert(c.num_attention_heads.value == 2 && c.max_position_embeddings.value == 8);
    ck_assert(c.tie_word_embeddings.present && c.tie_word_embeddings.value == 1);
    ck_assert_str_eq(c.hidden_act.value, "gelu_new");
    ck_assert_str_eq(c.dtype.value, "float32");
    model_free(&w);
}
END_TEST

/* Untied: lm_head.weight is written ([V, C]) and read back; tie_word_embeddings false. */
START_TEST(test_untied) {
    ModelDims d = tiny;
    d.tied = 0;
    Model w, b;
    make_whole(&w, &d);
    ck_assert_int_eq(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    HfDir *h;
    ck_assert_int_eq(hf_dir_open(tmp("out"), &h, g_err, sizeof g_err), PP_OK);
    const SafetensorsTensor *t = hf_dir_find(h, "lm_head.weight", NULL);
    ck_assert(t && t->shape[0] == d.V && t->shape[1] == d.C);
    hf_dir_close(h);
    const ChunkSpec last = {3, 3, 4, 0, 1, 1, 0};
    model_init(&b, &d, &last, 1, 1, 4, backend_cpu());
    ck_assert_msg(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert_int_ge(model_find(&b, "lm_head"), 0);
    assert_same(&w, &b);
    model_free(&b);
    /* the untied directory into a tied model: config.json disagrees, named */
    model_init(&b, &tiny, &last, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "has tie_word_embeddings false, but the model's "
                                "model.tie_embeddings is true"),
                  "%s", g_err);
    model_free(&b);
    model_free(&w);
}
END_TEST

/* bf16: every value reads back as its bf16 rounding, nearest even. */
START_TEST(test_bf16) {
    Model w, b;
    make_whole(&w, &tiny);
    for (size_t i = 0; i < w.nparams; i++) w.params[i] *= 1.0f + 1.0f / 3;
    ck_assert_int_eq(model_save_hf(&w, tmp("out"), SAFETENSORS_BF16, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    model_init(&b, &tiny, &whole, 1, 1, 4, backend_cpu());
    ck_assert_msg(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    long changed = 0;
    for (size_t i = 0; i < w.nparams; i++) {
        float want = safetensors_bf16_to_f32(safetensors_f32_to_bf16(w.params[i]));
        ck_assert_msg(b.params[i] == want, "element %zu: %g, want %g", i, b.params[i], want);
        changed += b.params[i] != w.params[i];
    }
    ck_assert_int_gt(changed, (long)w.nparams / 2); /* it was rounded */
    model_free(&b);
    model_free(&w);
}
END_TEST

/* A stacked row of a table of the test's own: GPT-2's with qkvw and
 * qkvb stored as three Hub tensors each, C rows apiece. Written, the parts are qkvw's
 * row blocks; read back, qkvw again; a shard limit cuts the file into several. */
static int three_parts(const ModelDims *d, const ArchHfTensor *t, int p) { return d->C; }

START_TEST(test_stacked) {
    ArchHfTensor rows[32];
    const ArchHf *g = arch_gpt2.hf;
    ck_assert_int_le(g->ntensors, 32);
    memcpy(rows, g->tensors, g->ntensors * sizeof *rows);
    for (int i = 0; i < g->ntensors; i++) {
        if (!strcmp(rows[i].tensor, "qkvw"))
            rows[i] = (ArchHfTensor){"qkvw",
                                     1,
                                     ARCH_HF_STACKED,
                                     {"transformer.h.%d.q.weight", "transformer.h.%d.k.weight",
                                      "transformer.h.%d.v.weight"}};
        if (!strcmp(rows[i].tensor, "qkvb"))
            rows[i] = (ArchHfTensor){"qkvb",
                                     1,
                                     ARCH_HF_STACKED,
                                     {"transformer.h.%d.q.bias", "transformer.h.%d.k.bias",
                                      "transformer.h.%d.v.bias"}};
    }
    ArchHf hf = *g;
    hf.tensors = rows;
    hf.part_rows = three_parts;
    Arch arch = arch_gpt2;
    arch.hf = &hf;
    ModelDims d = tiny;
    d.arch = &arch;
    Model w, b;
    make_whole(&w, &d);
    ck_assert_msg(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 2000, NULL, NULL, g_err,
                                sizeof g_err) == PP_OK,
                  "%s", g_err);
    ck_assert(file_exists(tmp("out/" HF_DIR_INDEX)) && !file_exists(tmp("out/model.safetensors")));
    HfDir *h;
    ck_assert_int_eq(hf_dir_open(tmp("out"), &h, g_err, sizeof g_err), PP_OK);
    ck_assert_ptr_null(hf_dir_find(h, "transformer.h.0.attn.c_attn.weight", NULL));
    const float *qkvw = w.params + w.tensors[model_find(&w, "h.2.qkvw")].offset;
    const char *parts[] = {"transformer.h.2.q.weight", "transformer.h.2.k.weight",
                           "transformer.h.2.v.weight"};
    float got[64];
    for (int p = 0; p < 3; p++) {
        const SafetensorsTensor *t = hf_dir_find(h, parts[p], NULL);
        ck_assert(t && t->ndim == 2 && t->shape[0] == d.C && t->shape[1] == d.C);
        ck_assert_int_eq(hf_dir_read(h, parts[p], 0, 64, got, g_err, sizeof g_err), PP_OK);
        ck_assert_mem_eq(got, qkvw + p * 64, sizeof got);
    }
    hf_dir_close(h);
    const ChunkSpec mid = {1, 2, 4, 0, 1, 1, 0};
    model_init(&b, &d, &mid, 1, 1, 4, backend_cpu());
    ck_assert_msg(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    assert_same(&w, &b);
    model_free(&b);
    model_free(&w);
}
END_TEST

/* Dims that disagree with config.json, and a missing tensor, refused by name. */
START_TEST(test_load_refusals) {
    Model w, b;
    make_whole(&w, &tiny);
    ck_assert_int_eq(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    ModelDims d = tiny;
    d.NH = 4;
    model_init(&b, &d, &whole, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "config.json has n_head 2, but the model's model.n_heads is 4"),
                  "%s", g_err);
    model_free(&b);
    /* a second export into the written directory: refused, the directory as it was */
    ck_assert_int_eq(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "exists and is not empty"), "%s", g_err);
    model_free(&w);
}
END_TEST

/* ---- config.json's model keys merged into a config ([Note: init_from config merge]) -- */

static void config_with(Config *c, const char *const *sets) {
    config_defaults(c);
    for (; *sets; sets++)
        ck_assert_msg(config_set(c, *sets, g_err, sizeof g_err) == PP_OK, "%s", g_err);
}

/* Rewrite DIR/model.safetensors (one file) with its own tensors, read back as fp32, and
 * the extra ones named in `extra` (each [2] fp32, any values). */
static void rewrite_with(const char *dir, const char *const *extra) {
    HfDir *h;
    ck_assert_msg(hf_dir_open(dir, &h, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    size_t n = hf_dir_count(h), ne = 0;
    while (extra[ne]) ne++;
    SafetensorsWriteTensor *w = calloc(n + ne, sizeof *w);
    float **data = calloc(n, sizeof *data);
    static const float two[2] = {1, 2};
    for (size_t i = 0; i < n; i++) {
        const SafetensorsTensor *t = hf_dir_find(h, hf_dir_name(h, i), NULL);
        data[i] = malloc(t->numel * sizeof(float));
        ck_assert_int_eq(hf_dir_read(h, hf_dir_name(h, i), 0, t->numel, data[i], g_err,
                                     sizeof g_err),
                         PP_OK);
        w[i] = (SafetensorsWriteTensor){.name = hf_dir_name(h, i),
                                        .dtype = SAFETENSORS_F32,
                                        .ndim = t->ndim,
                                        .data = data[i]};
        memcpy(w[i].shape, t->shape, sizeof t->shape);
    }
    for (size_t i = 0; i < ne; i++)
        w[n + i] = (SafetensorsWriteTensor){.name = extra[i],
                                            .dtype = SAFETENSORS_F32,
                                            .ndim = 1,
                                            .shape = {2},
                                            .data = two};
    char path[PP_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(safetensors_write(path, w, n + ne, NULL, 0, NULL, NULL, g_err, sizeof g_err) ==
                      PP_OK,
                  "%s", g_err);
    hf_dir_close(h); /* after the write: w's names are its */
    for (size_t i = 0; i < n; i++) free(data[i]);
    free(data);
    free(w);
}

/* Weights the model config.json describes does not use are refused, by every reader
 * (model_load_hf on a rank holding a part, model_hf_check), naming the file, the first
 * tensors and their count: a config.json with fewer layers than the weights (pptrain
 * would train and save a truncated model), a stray tensor, another architecture's. The
 * buffers transformers skips (GPT-2's attn.bias / attn.masked_bias, with and without the
 * prefix) and a tied model's lm_head.weight are no weights to use. */
START_TEST(test_unused_refused) {
    ModelDims d2 = tiny;
    d2.L = 2;
    Model w4, w2, b;
    make_whole(&w4, &tiny);
    const ChunkSpec whole2 = {0, 0, 2, 1, 1, 1, 0};
    model_init(&w2, &d2, &whole2, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_save_hf(&w4, tmp("l4"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    ck_assert_int_eq(model_save_hf(&w2, tmp("l2"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    /* config.json of 2 layers over the weights of 4 */
    ck_assert_int_eq(rename(tmp("l4/model.safetensors"), tmp("l2/model.safetensors")), 0);
    const ChunkSpec mid = {1, 1, 2, 0, 0, 1, 0}; /* layer 1 alone */
    model_init(&b, &d2, &mid, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_hf(&b, tmp("l2"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, tmp("l2/model.safetensors")) &&
                      strstr(g_err, "holds 24 tensors that the model") &&
                      strstr(g_err, "\"transformer.h.2.attn.c_attn.bias\"") &&
                      strstr(g_err, "and 19 more") && strstr(g_err, "layers 2-3") &&
                      strstr(g_err, "n_layer 2") && strstr(g_err, "truncated"),
                  "%s", g_err);
    model_free(&b);
    Config c;
    char set[PP_PATH_MAX + 32];
    snprintf(set, sizeof set, "model.init_from=%s", tmp("l2"));
    config_with(&c, (const char *const[]){set, "train.seq_len=8", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK &&
                      config_finalize(&c, g_err, sizeof g_err) == PP_OK,
                  "%s", g_err);
    ck_assert_int_eq(c.n_layers, 2);
    ck_assert_int_eq(model_hf_check(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "holds 24 tensors"), "%s", g_err);
    model_free(&w2);
    /* buffers and a tied lm_head.weight: read as before */
    ck_assert_int_eq(model_save_hf(&w4, tmp("b"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    rewrite_with(tmp("b"), (const char *const[]){"transformer.h.0.attn.bias",
                                                 "transformer.h.3.attn.masked_bias",
                                                 "h.1.attn.bias", "lm_head.weight", NULL});
    model_init(&b, &tiny, &whole, 1, 1, 4, backend_cpu());
    ck_assert_msg(model_load_hf(&b, tmp("b"), NULL, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    assert_same(&w4, &b);
    /* a stray tensor and a Llama one */
    rewrite_with(tmp("b"), (const char *const[]){"foo.weight",
                                                 "model.layers.0.self_attn.q_proj.weight", NULL});
    ck_assert_int_eq(model_load_hf(&b, tmp("b"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, tmp("b/model.safetensors")) && strstr(g_err, "holds 2 tensors") &&
                      strstr(g_err, "\"foo.weight\", \"model.layers.0.self_attn.q_proj.weight\"") &&
                      !strstr(g_err, "more") && !strstr(g_err, "attn.bias") &&
                      !strstr(g_err, "truncated"),
                  "%s", g_err);
    model_free(&b);
    model_free(&w4);
}
END_TEST

START_TEST(test_config_merge) {
    Config c;
    /* nothing given: every model key from test/hf/gpt2/config.json */
    config_with(&c, (const char *const[]){"model.init_from=test/hf/gpt2", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert(c.vocab_size == 256 && c.max_seq_len == 64 && c.n_layers == 4 && c.n_heads == 2 &&
              c.dim == 32 && c.tie_embeddings == 1);
    ck_assert_str_eq(c.arch, "gpt2");
    ck_assert(!config_given(&c, "model.dim")); /* still the file's, not the user's */
    ck_assert_msg(config_finalize(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert_int_eq(c.padded_vocab_size, 256); /* a multiple of 128 already */
    ck_assert_msg(model_hf_check(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    /* given and equal: fine; given and different: both named */
    config_with(&c, (const char *const[]){"model.init_from=test/hf/gpt2", "model.dim=32",
                                          "model.tie_embeddings=true", "model.arch=gpt2", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    config_with(&c, (const char *const[]){"model.init_from=test/hf/gpt2", "model.max_seq_len=128",
                                          NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_str_eq(g_err, "model.max_seq_len is 128 in the config, but "
                            "test/hf/gpt2/config.json has n_positions 64: leave "
                            "model.max_seq_len out of the config (config.json gives it) or set "
                            "it to 64");
    /* a file, or nothing, as init_from: the config is not touched */
    config_with(&c, (const char *const[]){"model.init_from=test/hf/loss.txt", NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(c.dim, 0);
    config_with(&c, (const char *const[]){"model.dim=7", NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(c.dim, 7);
}
END_TEST

/* tie_word_embeddings left out: the class's default (GPT-2: tied); a key left out
 * that the config gives stands; left out by both, named. */
START_TEST(test_config_absent_keys) {
    FILE *f = fopen(tmp("config.json"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_layer\": 2, \"n_head\": 4, "
          "\"n_embd\": 64, \"n_positions\": null}\n",
          f);
    fclose(f);
    char set[PP_PATH_MAX + 32];
    snprintf(set, sizeof set, "model.init_from=%s", g_dir);
    Config c;
    config_with(&c, (const char *const[]){set, NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "config.json has no max_position_embeddings (n_positions), and "
                                "the config does not set model.max_seq_len"),
                  "%s", g_err);
    config_with(&c, (const char *const[]){set, "model.max_seq_len=16", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert(c.max_seq_len == 16 && c.vocab_size == 300 && c.tie_embeddings == 1);
    config_with(&c, (const char *const[]){set, "model.max_seq_len=16", "model.tie_embeddings=false",
                                          NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "model.tie_embeddings is false in the config"), "%s", g_err);
    ck_assert_msg(strstr(g_err, "tie_word_embeddings (left out: the model class's default) true"),
                  "%s", g_err);
}
END_TEST

/* What pptrain's GPT-2 cannot run, refused naming the file and the key. */
#define GPT2 "\"model_type\": \"gpt2\", "
static const char *const k_gpt2_refused[][2] = {
    {GPT2 "\"activation_function\": \"gelu\"", "activation_function \"gelu\" is not supported"},
    {GPT2 "\"layer_norm_epsilon\": 1e-06", "layer_norm_epsilon 1e-06 is not supported"},
    {GPT2 "\"n_inner\": 100",
     "n_inner 100 is not supported: pptrain's GPT-2 MLP is 4 x n_embd = 256"},
    {GPT2 "\"scale_attn_weights\": false", "scale_attn_weights false is not supported"},
    {GPT2 "\"scale_attn_by_inverse_layer_idx\": true",
     "scale_attn_by_inverse_layer_idx true is not supported"},
    {"\"model_type\": \"gemma\"",
     "model_type \"gemma\" is not supported: pptrain reads gpt2, llama, qwen2, mistral"},
};
#undef GPT2

START_TEST(test_gpt2_config_refusals) {
    FILE *f = fopen(tmp("config.json"), "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "{\"vocab_size\": 300, \"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, "
            "\"n_positions\": 32, %s}\n",
            k_gpt2_refused[_i][0]);
    fclose(f);
    char set[PP_PATH_MAX + 32];
    snprintf(set, sizeof set, "model.init_from=%s", g_dir);
    Config c;
    config_with(&c, (const char *const[]){set, NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, tmp("config.json")) && strstr(g_err, k_gpt2_refused[_i][1]), "%s",
                  g_err);
}
END_TEST

/* ---- the Llama family ---- */

/* Llama 3's shape in little: 4 query heads of 4 channels sharing 2 key/value heads, an
 * MLP of 24, untied, llama3 RoPE scaling; 4 layers. */
static ModelDims llama_dims(const Arch *a) {
    return (ModelDims){.V = 13,
                       .Vp = 16,
                       .maxT = 8,
                       .L = 4,
                       .NH = 4,
                       .C = 16,
                       .tied = 0,
                       .arch = a,
                       .NKV = 2,
                       .F = 24,
                       .eps = 1e-5f,
                       .rope = {500000.0f, 1, 8.0f, 1.0f, 4.0f, 64}};
}

/* Written and read back into other splits, bit for bit; q_proj, k_proj and v_proj are
 * qkvw's row blocks [16, 16], [8, 16], [8, 16] (qwen2's biases likewise qkvb's), o_proj
 * and the MLP as they are; config.json is the class's (GQA, the MLP, rms_norm_eps 1e-05
 * exactly, RoPE's base and llama3 scaling, head_dim, no biases, untied; mistral's window
 * null) and reads back to the same dims. */
START_TEST(test_llama_roundtrip) {
    const Arch *archs[] = {&arch_llama, &arch_qwen2, &arch_mistral};
    const Arch *a = archs[_i];
    ModelDims d = llama_dims(a);
    Model w, b;
    make_whole(&w, &d);
    ck_assert_msg(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                sizeof g_err) == PP_OK,
                  "%s", g_err);
    HfDir *h;
    ck_assert_int_eq(hf_dir_open(tmp("out"), &h, g_err, sizeof g_err), PP_OK);
    const char *proj[] = {"q_proj", "k_proj", "v_proj"};
    const int rows[] = {16, 8, 8};
    float got[16 * 16];
    for (int kind = 0; kind < (a == &arch_qwen2 ? 2 : 1); kind++) {
        const float *qkv = w.params +
                           w.tensors[model_find(&w, kind ? "h.1.qkvb" : "h.1.qkvw")].offset;
        size_t first = 0, cols = kind ? 1 : 16;
        for (int p = 0; p < 3; p++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.1.self_attn.%s.%s", proj[p],
                     kind ? "bias" : "weight");
            const SafetensorsTensor *t = hf_dir_find(h, name, NULL);
            ck_assert_msg(t && t->ndim == 2 - kind && t->shape[0] == rows[p] &&
                              (kind || t->shape[1] == 16),
                          "%s", name);
            ck_assert_int_eq(hf_dir_read(h, name, 0, rows[p] * cols, got, g_err, sizeof g_err),
                             PP_OK);
            ck_assert_msg(memcmp(got, qkv + first, rows[p] * cols * 4) == 0, "%s", name);
            first += rows[p] * cols;
        }
    }
    ck_assert_ptr_nonnull(hf_dir_find(h, "model.layers.3.self_attn.o_proj.weight", NULL));
    ck_assert_ptr_nonnull(hf_dir_find(h, "model.layers.0.mlp.down_proj.weight", NULL));
    ck_assert_ptr_nonnull(hf_dir_find(h, "model.layers.2.post_attention_layernorm.weight", NULL));
    ck_assert_ptr_nonnull(hf_dir_find(h, "model.norm.weight", NULL));
    const SafetensorsTensor *t = hf_dir_find(h, "lm_head.weight", NULL);
    ck_assert(t && t->shape[0] == d.V && t->shape[1] == d.C);
    ck_assert_int_eq(hf_dir_find(h, "model.layers.0.self_attn.q_proj.bias", NULL) != NULL,
                     a == &arch_qwen2);
    hf_dir_close(h);
    HfConfig c;
    ck_assert_int_eq(hf_config_read(tmp("out/config.json"), &c, g_err, sizeof g_err), PP_OK);
    ck_assert_str_eq(c.model_type.value, a->name);
    ck_assert(c.num_key_value_heads.value == 2 && c.intermediate_size.value == 24);
    ck_assert(c.norm_eps.value == 1e-5 && c.rope_theta.value == 500000.0);
    ck_assert_str_eq(c.rope.type.value, "llama3");
    ck_assert(c.rope.factor.value == 8 && c.rope.low_freq_factor.value == 1 &&
              c.rope.high_freq_factor.value == 4 &&
              c.rope.original_max_position_embeddings.value == 64);
    ck_assert(c.tie_word_embeddings.present && !c.tie_word_embeddings.value);
    ck_assert_str_eq(c.hidden_act.value, "silu");
    ck_assert_int_eq(c.head_dim.present, a != &arch_qwen2);
    ck_assert_int_eq(c.attention_bias.present, a == &arch_llama);
    ck_assert(!c.sliding_window.present);
    const ChunkSpec specs[] = {{1, 1, 3, 0, 0, 1, 0}, {2, 3, 4, 0, 1, 1, 0}};
    for (int k = 0; k < 2; k++) {
        model_init(&b, &d, &specs[k], 1, 1, 4, backend_cpu());
        ck_assert_msg(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err) == PP_OK, "%s",
                      g_err);
        assert_same(&w, &b);
        model_free(&b);
    }
    /* dims that disagree with config.json, named */
    ModelDims e = d;
    e.NKV = 4;
    model_init(&b, &e, &whole, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "has num_key_value_heads 2, but the model's model.n_kv_heads is 4"),
                  "%s", g_err);
    model_free(&b);
    e = d;
    e.rope.factor = 32;
    model_init(&b, &e, &whole, 1, 1, 4, backend_cpu());
    ck_assert_int_eq(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "has rope_scaling llama3 (factor 8, low_freq_factor 1, "
                                "high_freq_factor 4, original_max_position_embeddings 64), but "
                                "the model's model.rope_scaling is llama3 (factor 32"),
                  "%s", g_err);
    model_free(&b);
    model_free(&w);
}
END_TEST

/* Llama's inv_freq buffers (older files hold one per layer) are no weights to use: read
 * as before; one of a layer past the model's is an unused tensor, named. */
START_TEST(test_llama_buffers) {
    ModelDims d = llama_dims(&arch_llama);
    Model w, b;
    make_whole(&w, &d);
    ck_assert_int_eq(model_save_hf(&w, tmp("out"), SAFETENSORS_F32, 0, NULL, NULL, g_err,
                                   sizeof g_err),
                     PP_OK);
    rewrite_with(tmp("out"),
                 (const char *const[]){"model.layers.0.self_attn.rotary_emb.inv_freq",
                                       "model.layers.3.self_attn.rotary_emb.inv_freq", NULL});
    model_init(&b, &d, &whole, 1, 1, 4, backend_cpu());
    ck_assert_msg(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    assert_same(&w, &b);
    rewrite_with(tmp("out"),
                 (const char *const[]){"model.layers.4.self_attn.rotary_emb.inv_freq", NULL});
    ck_assert_int_eq(model_load_hf(&b, tmp("out"), NULL, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "holds 1 tensor that") &&
                      strstr(g_err, "\"model.layers.4.self_attn.rotary_emb.inv_freq\", the "
                                    "tensors of layer 4, past its num_hidden_layers 4"),
                  "%s", g_err);
    model_free(&b);
    model_free(&w);
}
END_TEST

static void write_config(const char *body) {
    FILE *f = fopen(tmp("config.json"), "w");
    ck_assert_ptr_nonnull(f);
    fputs(body, f);
    fclose(f);
}

static const char *init_set(void) {
    static char set[PP_PATH_MAX + 32];
    snprintf(set, sizeof set, "model.init_from=%s", g_dir);
    return set;
}

/* test/hf/llama3's config.json (the Hub's form) merged: every model key from it; keys the
 * config gives must agree, named with both values; max_seq_len may be below
 * max_position_embeddings (RoPE has no table), not above; n_kv_heads 0 and
 * tie_embeddings auto are no choice. */
START_TEST(test_llama_config_merge) {
    Config c;
    config_with(&c, (const char *const[]){"model.init_from=test/hf/llama3", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert_str_eq(c.arch, "llama");
    ck_assert(c.vocab_size == 256 && c.max_seq_len == 512 && c.n_layers == 4 && c.n_heads == 4 &&
              c.dim == 32 && c.n_kv_heads == 2 && c.ffn_dim == 64 && c.tie_embeddings == 0);
    ck_assert(c.norm_eps == 1e-5f && c.rope_theta == 500000.0f);
    ck_assert_str_eq(c.rope_scaling, "llama3");
    ck_assert(c.rope_factor == 8 && c.rope_low_freq_factor == 1 && c.rope_high_freq_factor == 4 &&
              c.rope_original_max_seq_len == 256);
    ck_assert_msg(config_finalize(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert_msg(model_hf_check(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    config_with(&c, (const char *const[]){"model.init_from=test/hf/llama3", "model.max_seq_len=64",
                                          "model.n_kv_heads=0", "model.tie_embeddings=auto",
                                          "model.ffn_dim=64", "model.norm_eps=1e-5", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert(c.max_seq_len == 64 && c.n_kv_heads == 2 && c.tie_embeddings == 0);
    ck_assert_msg(config_finalize(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert_msg(model_hf_check(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    static const char *const refused[][2] = {
        {"model.max_seq_len=1024", "model.max_seq_len is 1024 in the config, but "
                                   "test/hf/llama3/config.json has max_position_embeddings 512"},
        {"model.n_kv_heads=4", "model.n_kv_heads is 4 in the config, but "
                               "test/hf/llama3/config.json has num_key_value_heads 2: leave "
                               "model.n_kv_heads out of the config (config.json gives it) or set "
                               "it to 2"},
        {"model.norm_eps=1e-6", "model.norm_eps is 1e-06 in the config, but "
                                "test/hf/llama3/config.json has rms_norm_eps 1e-05"},
        {"model.rope_theta=10000", "model.rope_theta is 10000 in the config, but "
                                   "test/hf/llama3/config.json has rope_theta 500000"},
        {"model.rope_scaling=null", "model.rope_scaling is none in the config, but "
                                    "test/hf/llama3/config.json has rope_scaling llama3 (factor "
                                    "8, low_freq_factor 1, high_freq_factor 4, "
                                    "original_max_position_embeddings 256)"},
        {"model.rope_scaling={type: llama3, factor: 32, original_max_seq_len: 256}",
         "model.rope_scaling is llama3 (factor 32, low_freq_factor 1, high_freq_factor 4, "
         "original_max_position_embeddings 256) in the config"},
        {"model.rope_scaling.factor=8", "model.rope_scaling is none in the config"},
        {"model.tie_embeddings=true", "model.tie_embeddings is true in the config, but "
                                      "test/hf/llama3/config.json has tie_word_embeddings false"},
        {"model.arch=qwen2", "model.arch is qwen2 in the config, but test/hf/llama3/config.json "
                             "has model_type \"llama\""},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        config_with(&c,
                    (const char *const[]){"model.init_from=test/hf/llama3", refused[i][0], NULL});
        ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
        ck_assert_msg(strstr(g_err, refused[i][1]), "%s: %s", refused[i][0], g_err);
    }
    /* GPT-2 has a position table: max_seq_len below n_positions is refused */
    config_with(&c, (const char *const[]){"model.init_from=test/hf/gpt2", "model.max_seq_len=32",
                                          NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "has n_positions 64"), "%s", g_err);
}
END_TEST

/* What the classes make of keys left out: llama's key/value heads the query heads,
 * rms_norm_eps 1e-6 (named as the default where a given key disagrees), qwen2's window
 * dropped without use_sliding_window; a window shorter than train.seq_len refused with
 * the file's key; transformers 5's rope_parameters read as the Hub's rope_scaling. */
START_TEST(test_llama_config_complete) {
#define DIMS                                                                                       \
    "\"vocab_size\": 64, \"hidden_size\": 16, \"num_hidden_layers\": 2, "                          \
    "\"num_attention_heads\": 4, \"intermediate_size\": 24, "                                      \
    "\"max_position_embeddings\": 128, "
    Config c;
    write_config("{\"model_type\": \"llama\", " DIMS "\"tie_word_embeddings\": true}");
    config_with(&c, (const char *const[]){init_set(), NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert(c.n_kv_heads == 4 && c.norm_eps == 1e-6f && c.rope_theta == 10000.0f &&
              c.tie_embeddings == 1);
    ck_assert_str_eq(c.rope_scaling, "none");
    config_with(&c, (const char *const[]){init_set(), "model.norm_eps=1e-5", NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, "has rms_norm_eps (left out: the model class's default) 1e-06"),
                  "%s", g_err);
    write_config("{\"model_type\": \"qwen2\", " DIMS "\"num_key_value_heads\": 2, "
                 "\"sliding_window\": 16, \"use_sliding_window\": false, "
                 "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 50000.0, "
                 "\"factor\": 4.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 2.0, "
                 "\"original_max_position_embeddings\": 64}}");
    config_with(&c, (const char *const[]){init_set(), NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert(c.sliding_window == 0 && c.rope_theta == 50000.0f && c.rope_factor == 4.0f &&
              c.rope_high_freq_factor == 2.0f && c.rope_original_max_seq_len == 64);
    ck_assert_str_eq(c.arch, "qwen2");
    ck_assert_str_eq(c.rope_scaling, "llama3");
    /* MistralConfig's 8 key/value heads, which 4 heads cannot share: refused naming the
     * file and where both numbers came from (the config names neither) */
    write_config("{\"model_type\": \"mistral\", " DIMS "\"sliding_window\": 16}");
    config_with(&c, (const char *const[]){init_set(), "train.seq_len=16", NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, tmp("config.json")) &&
                      strstr(g_err, "is not a multiple of model.n_kv_heads (8)") &&
                      strstr(g_err, "num_attention_heads 4 gives model.n_heads; "
                                    "num_key_value_heads (left out: the model class's default) "
                                    "8 gives model.n_kv_heads"),
                  "%s", g_err);
    write_config("{\"model_type\": \"mistral\", " DIMS "\"num_key_value_heads\": 2, "
                 "\"sliding_window\": 16}");
    config_with(&c, (const char *const[]){init_set(), "train.seq_len=16", NULL});
    ck_assert_msg(model_hf_config(&c, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    ck_assert(c.sliding_window == 16 && c.n_kv_heads == 2);
    config_with(&c, (const char *const[]){init_set(), "train.seq_len=32", NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, tmp("config.json")) &&
                      strstr(g_err, "sliding_window 16 is shorter than train.seq_len 32"),
                  "%s", g_err);
#undef DIMS
}
END_TEST

/* What pptrain's Llama block cannot run, refused naming the file and the key. */
#define LLAMA "\"model_type\": \"llama\", "
static const char *const k_llama_refused[][2] = {
    {LLAMA "\"hidden_act\": \"gelu\"", "hidden_act \"gelu\" is not supported"},
    {LLAMA "\"head_dim\": 32", "head_dim 32 is not supported: pptrain's heads are hidden_size / "
                               "num_attention_heads = 64 / 4 channels"},
    {LLAMA "\"attention_bias\": true", "attention_bias true is not supported"},
    {LLAMA "\"mlp_bias\": true", "mlp_bias true is not supported"},
    {LLAMA "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
     "rope_scaling.rope_type \"yarn\" is not supported"},
    {LLAMA "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}",
     "rope_scaling.type \"dynamic\" is not supported"},
    {LLAMA "\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0}",
     "rope_parameters.rope_type \"linear\" is not supported"},
    {LLAMA "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": "
           "1.0, \"high_freq_factor\": 4.0}",
     "rope_scaling.rope_type \"llama3\" without rope_scaling.original_max_position_embeddings"},
    {"\"model_type\": \"mistral\", \"hidden_act\": \"relu\"",
     "hidden_act \"relu\" is not supported"},
    /* head_dim x num_attention_heads past int64: 4 x (2^62 + 16) wrapped to hidden_size 64
     * (and is undefined behaviour) */
    {LLAMA "\"head_dim\": 4611686018427387920", "head_dim 4611686018427387920 is not supported"},
    /* values a float cannot hold, or an int past int's range, never become inf or wrap */
    {LLAMA "\"rms_norm_eps\": 1e308", "rms_norm_eps 1e+308 is out of range (a finite float)"},
    {LLAMA "\"rope_theta\": -1e300", "rope_theta -1e+300 is out of range (a finite float)"},
    {LLAMA "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 1e300, \"low_freq_factor\": "
           "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8}",
     "rope_scaling.factor is out of range (a finite float)"},
    {LLAMA "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": "
           "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 4294967304}",
     "rope_scaling.original_max_position_embeddings 4294967304 is out of range"},
    /* what config_finalize refuses of config.json's values, named with the file and key */
    {LLAMA "\"rms_norm_eps\": 0", "model.norm_eps (epsilon of the norms"},
    {LLAMA "\"rms_norm_eps\": -1e-6", "(rms_norm_eps -1e-06 gives model.norm_eps)"},
    {LLAMA "\"num_key_value_heads\": 3", "(num_attention_heads 4 gives model.n_heads; "
                                         "num_key_value_heads 3 gives model.n_kv_heads)"},
    {LLAMA "\"eos_token_id\": 300", "its eos_token_id gives model.eos_token_id)"},
};
#undef LLAMA

START_TEST(test_llama_config_refusals) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"vocab_size\": 300, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
             "\"hidden_size\": 64, \"intermediate_size\": 96, \"max_position_embeddings\": 32, "
             "%s}\n",
             k_llama_refused[_i][0]);
    write_config(body);
    Config c;
    config_with(&c, (const char *const[]){init_set(), NULL});
    ck_assert_int_eq(model_hf_config(&c, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_msg(strstr(g_err, tmp("config.json")) && strstr(g_err, k_llama_refused[_i][1]), "%s",
                  g_err);
}
END_TEST

static Suite *model_hf_suite(void) {
    Suite *s = suite_create("model_hf");
    TCase *tc = tcase_create("model_hf");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip_splits);
    tcase_add_test(tc, test_hub_layout);
    tcase_add_test(tc, test_untied);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_stacked);
    tcase_add_test(tc, test_load_refusals);
    tcase_add_test(tc, test_unused_refused);
    tcase_add_test(tc, test_config_merge);
    tcase_add_test(tc, test_config_absent_keys);
    tcase_add_loop_test(tc, test_gpt2_config_refusals, 0,
                        sizeof k_gpt2_refused / sizeof k_gpt2_refused[0]);
    tcase_add_loop_test(tc, test_llama_roundtrip, 0, 3);
    tcase_add_test(tc, test_llama_buffers);
    tcase_add_test(tc, test_llama_config_merge);
    tcase_add_test(tc, test_llama_config_complete);
    tcase_add_loop_test(tc, test_llama_config_refusals, 0,
                        sizeof k_llama_refused / sizeof k_llama_refused[0]);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    backend_cpu_set_threads(1);
    return check_run(model_hf_suite(), 0);
}
