/* model_hf.h — Hugging Face model directories (config.json and safetensors, one file or
 * shards with an index) as model.init_from and as `pptrain export --format hf`: the
 * config.json's model keys merged into the config, each rank's tensors read by their
 * byte ranges into its fp32 masters, and a whole model written as such a directory.
 * Knows no architecture: the names and transforms are the Arch's hf table ([Note:
 * Hugging Face names] in arch.h). The files themselves are src/hf/'s. */
#ifndef PP_MODEL_HF_H
#define PP_MODEL_HF_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "hf/safetensors.h"
#include "model.h"

/* 1 when `path` is a directory (a Hugging Face model as model.init_from), else 0 (a
 * file: llm.c's checkpoint, whose loader names what is wrong with it). */
int model_hf_is_dir(const char *path);

/* [Note: init_from config merge] Before config_finalize: when model.init_from names a
 * directory, its config.json gives the model keys the config file and --set left out
 * (config_given), by one table (model_hf.c's k_keys: vocab_size, max_seq_len, n_layers,
 * n_heads, dim, tie_embeddings, every architecture's; n_kv_heads, ffn_dim, norm_eps,
 * rope_theta, rope_scaling and sliding_window, those the Arch's hf->keys lists), and a
 * key they gave must hold the config.json's value. A value that is no choice is not
 * given: tie_embeddings auto, n_kv_heads 0, ffn_dim 0. Where the Arch has no position
 * table (RoPE), max_seq_len may be below max_position_embeddings. A key config.json
 * leaves out is the model class's default where the Arch fills one in
 * (hf->config_complete: Llama's rms_norm_eps 1e-6, tie_word_embeddings false), else the
 * config's own (its default, or what it gives; a required one must be given). A sliding
 * window shorter than train.seq_len is refused. model.arch likewise from model_type
 * (arch_find_hf). What the architecture requires of the rest of config.json is its
 * hf->config_check's (GPT-2: the activation; Llama: silu, the head size, no biases,
 * RoPE default or llama3). Returns PP_OK (also when init_from is not a directory, or
 * its pattern does not expand: config_finalize says so), or PP_EUSAGE naming the file,
 * the key and both values ("model.dim is 64 in the config, but DIR/config.json has
 * n_embd 32: ..."), an unsupported model_type or activation, an unreadable
 * config.json, a value out of its field's range, or what config_finalize refuses of the
 * values config.json gave, its message prefixed with the file and followed by the keys
 * they came from ("DIR/config.json: model.norm_eps (...) is 0.0: expected a number > 0
 * (rms_norm_eps 0 gives model.norm_eps)"). */
int model_hf_config(Config *cfg, char *err, size_t errlen);

/* After config_finalize, before anything is built or written: when model.init_from
 * names a directory, its weights against the model cfg describes, from the headers
 * alone: every tensor the model needs is there (lm_head only when untied) with its
 * shape and a dtype that reads into fp32 (F32, BF16, F16), every shard the index names
 * opens and is as long as its header says. Returns PP_OK or PP_EUSAGE naming the file
 * and the tensor. */
int model_hf_check(const Config *cfg, char *err, size_t errlen);

/* What model_load_hf read, for the build report: tensor bytes read by this rank, of all
 * the directory's tensor bytes, and the header and index bytes besides. */
typedef struct {
    uint64_t read, total, headers;
} ModelHfRead;

/* Load the Hugging Face directory `dir` into the tensors this rank holds (m's table:
 * its stages only), each by its own bytes in its shard (hf_dir_read: never a whole
 * file), converted to fp32 and transformed as the Arch's hf table says, then copied to
 * the device. The directory's config.json must describe m's dims. *st (may be NULL)
 * says what was read. Returns PP_OK, or PP_EUSAGE naming the file and tensor or key
 * (nothing is loaded partially into a run that goes on: the caller exits), PP_ERUNTIME
 * for an I/O error. */
int model_load_hf(Model *m, const char *dir, ModelHfRead *st, char *err, size_t errlen);

/* Write a model that holds every stage as a Hugging Face directory `dir` that
 * transformers' from_pretrained loads: config.json (the Hub's form, vocab_size the real
 * V) and safetensors in `dtype` (SAFETENSORS_F32 or _BF16), cut into shards of at most
 * max_shard_size bytes (0: 5 GB) with an index when there are several, in the state
 * dict's order, under the Hub names; padded vocabulary rows dropped. Atomic (hf_dir_write):
 * `dir` appears whole or not at all, and must not exist or be empty. Returns PP_OK, or
 * PP_EUSAGE (no Hugging Face format for the arch, `dir` not empty) or PP_ERUNTIME.
 * bos, eos: config.json's bos_token_id and eos_token_id as model.bos_token_id /
 * eos_token_id hold them ("2", "[1, 2]"; NULL or "": null). */
int model_save_hf(const Model *m, const char *dir, SafetensorsDtype dtype, uint64_t max_shard_size,
                  const char *bos, const char *eos, char *err, size_t errlen);

#endif
