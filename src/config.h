/* config.h — the run configuration (DESIGN.md §3): one table drives defaults, YAML
 * parsing, --set overrides, validation and printing. */
#ifndef PP_CONFIG_H
#define PP_CONFIG_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define PP_NAME_MAX 32
#define PP_SPLIT_MAX 512 /* text of pipeline.split */
#define PP_IDS_MAX 256  /* text of model.bos_token_id / eos_token_id: "", "2" or "[1, 2]" */
#define PP_CONFIG_KEYS 128 /* room for the keys' given marks (config.c checks it holds all) */
#define PP_DATA_LIST_MAX 16384 /* data.train / data.val: all of a list's paths */

typedef struct {
    /* model: */
    char arch[PP_NAME_MAX];          /* gpt2 | llama | qwen2 | mistral (model/arch.h) */
    int vocab_size;                  /* V, required */
    int padded_vocab_size;           /* Vp; 0 in the file = round V up to a multiple of 128 */
    int max_seq_len;                 /* maxT, required */
    int n_layers;                    /* L, required */
    int n_heads;                     /* NH, required */
    int dim;                         /* C, required */
    int n_kv_heads;                  /* NKV; 0 in the file = n_heads */
    int ffn_dim;                     /* F; 0 in the file = 4 dim (gpt2; llama: required) */
    float norm_eps;                  /* the norms' epsilon (gpt2: 1e-5 only) */
    float rope_theta;                /* RoPE base (llama) */
    char rope_scaling[PP_NAME_MAX];  /* model.rope_scaling.type: none | llama3 */
    float rope_factor;               /* model.rope_scaling.factor, ... (llama3) */
    float rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_seq_len;
    int sliding_window;              /* mistral, qwen2: 0 = none, else >= seq_len */
    int tie_embeddings;              /* bool; -1 in the file = auto (true for gpt2 only) */
    char init_from[PP_PATH_MAX];     /* "" = none (YAML null) */
    float init_std;
    char bos_token_id[PP_IDS_MAX];   /* "" = none (YAML null), "1", or "[1, 2]" (config_ids) */
    char eos_token_id[PP_IDS_MAX];   /* the ids that end a text, as bos_token_id */
    /* pipeline: */
    int stages;                      /* P, pipeline ranks */
    int virtual_stages;              /* v, chunks per rank */
    int data_parallel;               /* D, replicas of the pipeline; 0 = auto (world / P) */
    char schedule[PP_NAME_MAX];      /* gpipe | 1f1b | interleaved-1f1b */
    char schedule_file[PP_PATH_MAX]; /* "" = none; one line per rank of actions in text form */
    int microbatches;                /* M */
    char split[PP_SPLIT_MAX];        /* "auto", or a flow sequence as text: "[4, 4]" or
                                        "[\"layers.4\"]" (interpreted by the partition) */
    char balance[PP_NAME_MAX];       /* time | parameters | memory: what split auto balances */
    char recompute[PP_NAME_MAX];     /* none | selective | full ([Note: recompute] in model.h) */
    int recompute_layers;            /* the first N layers of each chunk recompute; 0 = all */
    /* train: */
    int batch_size;                  /* B, sequences per optimizer step (global) */
    int seq_len;                     /* T */
    int steps;
    uint64_t seed;
    float grad_clip;                 /* 0 disables */
    char optimizer[PP_NAME_MAX];     /* train.optimizer.name: adamw | sgd */
    float lr, beta1, beta2, eps, weight_decay;
    float momentum;                  /* train.optimizer.momentum (sgd) */
    int optimizer_shard;             /* train.optimizer.shard: ZeRO-1 over the replicas */
    int warmup_steps;                /* train.lr_schedule.warmup_steps */
    char decay[PP_NAME_MAX];         /* train.lr_schedule.decay: constant | linear | cosine */
    float min_lr_ratio;
    int sample_every;                /* train.sample_every: 0 = no samples while training */
    char sample_prompt[256];         /* train.sample_prompt (text) */
    /* data: */
    /* data.train, data.val: one or more path patterns (a file or a glob, [Note: data
     * lists] in config.c), each ending with '\0', the last followed by another '\0' (a
     * list of one is the plain C string); config_list_next walks them. val: "" = none */
    char train_path[PP_DATA_LIST_MAX];
    char val_path[PP_DATA_LIST_MAX];
    int val_every;
    int val_batches;                 /* data.val_batches: batches per validation pass */
    /* output: */
    char out_dir[PP_PATH_MAX];       /* output.dir */
    int log_every;
    int checkpoint_every;
    int checkpoint_keep;
    int checkpoint_final;            /* bool: save at the end of the run */
    int compression_level;
    int trace;                       /* bool */
    int tensorboard;                 /* bool: event files in output.dir/tb/ */
    int flight_records;              /* flight recorder ring size; 0 = off */
    /* runtime: */
    char device[PP_NAME_MAX];        /* auto | cpu | cuda */
    char precision[PP_NAME_MAX];     /* auto | fp32 | tf32 | bf16
                                        (auto: bf16 on cuda, fp32 on cpu) */
    char transport[PP_NAME_MAX];     /* auto | socket | nccl */
    int threads;                     /* 0 = this rank's share of its affinity mask
                                        ([Note: thread share]) */
    int timeout_s;
    /* Not a setting: which keys the YAML file or a --set gave, by the table's order
     * (config_given). Printing, hashing and comparing configs ignore it. */
    unsigned char given[PP_CONFIG_KEYS];
} Config;

/* The path after `p` in a list of paths (data.train, data.val), or NULL after the last. */
static inline const char *config_list_next(const char *p) {
    p += strlen(p) + 1;
    return *p ? p : NULL;
}

/* Fill every key with its default (required keys get 0 / ""). */
void config_defaults(Config *c);

/* Read a YAML file over the current values. On error returns PP_EUSAGE with a message
 * naming the file, line and column, the key and what was expected ("did you mean ..."
 * for unknown keys). */
int config_load_file(Config *c, const char *path, char *err, size_t errlen);

/* config_load_file for YAML text already in memory (a checkpoint manifest's config);
 * `name` stands for the file in messages. */
int config_load_text(Config *c, const char *text, const char *name, char *err, size_t errlen);

/* Apply one "a.b=v" override (the value is parsed as YAML scalar or flow sequence). */
int config_set(Config *c, const char *assignment, char *err, size_t errlen);

/* 1 when the config file or a --set gave `key` ("model.dim"), 0 when it holds its
 * default (or nothing, for a required key) or a value set directly in the struct: a
 * value taken from elsewhere (model.init_from's config.json) may fill only a key not
 * given. An unknown key is a caller's bug (dies). */
int config_given(const Config *c, const char *key);

/* Resolve derived values (padded_vocab_size 0 -> round up to 128; n_kv_heads 0 ->
 * n_heads; ffn_dim 0 -> 4 dim for gpt2; tie_embeddings auto -> true for gpt2, false for
 * the llama family), expand the patterns of the path keys (%j, %A, %a, ${NAME}: [Note:
 * path patterns] in pathpat.c) and check every key and the cross-field rules. Returns
 * PP_OK or PP_EUSAGE with a message (an unset variable is named). Call it once per
 * config: a second call would expand the expanded paths again. */
int config_finalize(Config *c, char *err, size_t errlen);

/* Print the effective config as YAML that config_load_file reads back to the same
 * config (paths as expanded, with % and $ doubled so that they read back as they are). */
void config_print(const Config *c, FILE *f);

/* FNV-1a hash of the printed config; `model_only` hashes only the model-defining
 * keys (model.* but the token ids, which do not shape the weights: a checkpoint resumes
 * with other ids, and those written before the keys existed still resume), for
 * checkpoint compatibility checks. */
uint64_t config_hash(const Config *c, int model_only);

/* The ids of a model.bos_token_id / eos_token_id text ("" none, "2", "[1, 2]") into
 * ids[max]: their count (at most max), or -1 if the text is none of these forms. */
int config_ids(const char *text, int *ids, int max);

/* Name of the first key whose value differs between a and b, or NULL if none. */
const char *config_first_diff(const Config *a, const Config *b);

#endif
