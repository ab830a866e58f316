/* hf_config.h — a Hugging Face config.json: the fields a Llama, Qwen2, Mistral or GPT-2
 * import needs, each with whether the file gave it and under which key (GPT-2's n_embd
 * and Llama's hidden_size fill one field), the RoPE settings in both the Hub's form
 * (rope_theta, rope_scaling) and current transformers' (rope_parameters); the keys
 * generation takes from a generation_config.json; and the writer of config.json for an
 * export, as transformers writes it. Only reads and writes:
 * which values pptrain supports is the model's to say, naming the key this gives. */
#ifndef PP_HF_CONFIG_H
#define PP_HF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define HF_CONFIG_STR_MAX 64
#define HF_CONFIG_IDS_MAX 16

/* One field. `present` is 0 when the file does not have the key or has it as null (the
 * value is then 0 / "" and the caller applies the model type's default); `key` is the
 * key it came from, for messages ("n_embd", "rope_scaling.factor"), NULL if absent. */
typedef struct {
    int present;
    const char *key;
    int64_t value;
} HfConfigInt;
typedef struct {
    int present;
    const char *key;
    double value;
} HfConfigReal;
typedef struct {
    int present;
    const char *key;
    int value;
} HfConfigBool;
typedef struct {
    int present;
    const char *key;
    char value[HF_CONFIG_STR_MAX];
} HfConfigStr;
typedef struct { /* a token id or a list of them (Llama 3's eos_token_id) */
    int present;
    const char *key;
    int list; /* 1: the file gave a list (written back as one) */
    int n;
    int64_t ids[HF_CONFIG_IDS_MAX];
} HfConfigIds;

/* RoPE scaling, from rope_scaling (the Hub's files, transformers 4) or rope_parameters
 * (transformers 5: also holds rope_theta, and rope_type "default" for none). */
typedef struct {
    int present;      /* either object was given (not null) */
    const char *key;  /* "rope_parameters" or "rope_scaling" */
    HfConfigStr type; /* rope_type, or the older type */
    HfConfigReal factor, low_freq_factor, high_freq_factor;
    HfConfigInt original_max_position_embeddings;
} HfConfigRope;

typedef struct {
    char path[PP_PATH_MAX];   /* the file read, for messages */
    HfConfigStr model_type;   /* "llama", "qwen2", "mistral", "gpt2" */
    HfConfigStr architecture; /* architectures[0] */
    HfConfigInt vocab_size;
    HfConfigInt hidden_size;         /* hidden_size | n_embd */
    HfConfigInt num_hidden_layers;   /* num_hidden_layers | n_layer */
    HfConfigInt num_attention_heads; /* num_attention_heads | n_head */
    HfConfigInt num_key_value_heads;
    HfConfigInt head_dim;
    HfConfigInt intermediate_size;       /* intermediate_size | n_inner */
    HfConfigInt max_position_embeddings; /* max_position_embeddings | n_positions */
    HfConfigReal norm_eps;               /* rms_norm_eps | layer_norm_epsilon */
    HfConfigStr hidden_act;              /* hidden_act | activation_function */
    HfConfigReal rope_theta;             /* rope_theta | rope_parameters.rope_theta */
    HfConfigRope rope;
    HfConfigBool tie_word_embeddings;
    HfConfigBool attention_bias;
    HfConfigBool mlp_bias;
    HfConfigInt sliding_window;
    HfConfigBool use_sliding_window; /* qwen2 */
    HfConfigBool scale_attn_weights, scale_attn_by_inverse_layer_idx; /* gpt2 (read only) */
    HfConfigIds bos_token_id, eos_token_id;
    HfConfigStr dtype; /* torch_dtype | dtype (transformers 5) */
} HfConfig;

/* Read the config.json at `path` into *c (zeroed first). Unknown keys are ignored; null
 * reads as absent. Where two keys fill one field (n_embd and hidden_size; rope_theta
 * and rope_parameters.rope_theta; rope_scaling and rope_parameters) both may appear
 * only with equal values. Returns PP_OK, or PP_EUSAGE with "PATH: KEY is a string,
 * expected an integer" (a value of the wrong JSON type, named by its key), "PATH:
 * hidden_size 2048 and n_embd 768 disagree", an unreadable or non-JSON file
 * (line and column), or rope_parameters given per layer type (not supported). */
int hf_config_read(const char *path, HfConfig *c, char *err, size_t errlen);

/* Read the generation_config.json at `path` into *c (zeroed first) as hf_config_read
 * does, but only the keys generation takes from it: eos_token_id (an integer or a list of
 * them; null: absent). Every other key is ignored whatever its value, model keys
 * included (vocab_size "x" is nothing generation reads; transformers' GenerationConfig
 * keeps what it does not know as it is). Returns PP_OK, or PP_EUSAGE naming the file and
 * the key ("PATH: eos_token_id is a string, expected an integer or a list of integers"),
 * or an unreadable or non-JSON file. */
int hf_generation_config_read(const char *path, HfConfig *c, char *err, size_t errlen);

/* How an export writes RoPE and the dtype: the Hub's form (rope_theta, rope_scaling or
 * null, torch_dtype), read by transformers 4 and 5, or transformers 5's (rope_parameters
 * {rope_theta, rope_type, ...}, dtype). GPT-2 has no RoPE either way. */
typedef enum { HF_CONFIG_ROPE_SCALING = 0, HF_CONFIG_ROPE_PARAMETERS = 1 } HfConfigForm;

/* config.json's text for *c, as transformers' save_pretrained writes it
 * (json.dumps(indent=2, sort_keys=True) and a newline) with the present fields under
 * the keys of c's model type: GPT-2's (n_embd, n_layer, n_head, n_inner, n_positions,
 * layer_norm_epsilon, activation_function) for "gpt2", Llama's otherwise (an absent
 * sliding_window written null for "mistral" and "qwen2", whose classes read a missing one
 * as 4096); architectures is [architecture], or the model type's class (LlamaForCausalLM,
 * GPT2LMHeadModel) when absent. model_type, vocab_size, hidden_size,
 * num_hidden_layers, num_attention_heads, max_position_embeddings and norm_eps are
 * required. Returns PP_OK with a malloc'd NUL-terminated *text of *len bytes (the
 * caller frees it), or PP_EUSAGE naming the missing field. */
int hf_config_format(const HfConfig *c, HfConfigForm form, char **text, size_t *len, char *err,
                     size_t errlen);

/* hf_config_format into the file `path`, atomically (common.h's PPFile). */
int hf_config_write(const char *path, const HfConfig *c, HfConfigForm form, char *err,
                    size_t errlen);

#endif
