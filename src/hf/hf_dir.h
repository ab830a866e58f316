/* hf_dir.h — the weights of a Hugging Face model directory: model.safetensors, or
 * model.safetensors.index.json and the shards it names; tensors looked up by name across
 * shards and read whole or by element range into fp32; and the writer of such a
 * directory (shards as transformers cuts and names them, the index, other files such as
 * config.json), all of it appearing at once. config.json itself is hf_config.h's. */
#ifndef PP_HF_DIR_H
#define PP_HF_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "safetensors.h"

#define HF_DIR_WEIGHTS "model.safetensors"
#define HF_DIR_INDEX "model.safetensors.index.json"
#define HF_DIR_DEFAULT_SHARD 5000000000ull /* "5GB", transformers' default max_shard_size */

typedef struct HfDir HfDir;

/* Open the directory `dir`'s weights: model.safetensors if it exists (what transformers
 * looks for first), else model.safetensors.index.json, whose weight_map (tensor name ->
 * shard file) must name plain files in `dir` that exist, open as safetensors files and
 * hold the tensors said to be in them, and no tensor it does not name there. Only headers
 * are read. Returns PP_OK with *out;
 * or PP_EUSAGE (no weights, a damaged index or shard: the message names the file and
 * the tensor or key) or PP_ERUNTIME (I/O) with *out = NULL. */
int hf_dir_open(const char *dir, HfDir **out, char *err, size_t errlen);
void hf_dir_close(HfDir *d); /* NULL is fine */

/* 1 when the weights come through the index. */
int hf_dir_sharded(const HfDir *d);
/* Number of tensors, and the i-th name in byte order of names. */
size_t hf_dir_count(const HfDir *d);
const char *hf_dir_name(const HfDir *d, size_t i);
/* The tensor `name` (dtype, shape) and, if file is not NULL, the path of the file that
 * holds it; NULL if the directory has no such tensor. */
const SafetensorsTensor *hf_dir_find(const HfDir *d, const char *name, const char **file);

/* Read elements [first, first + n) of tensor `name` into out[n] as fp32
 * (safetensors_read: only those bytes are read). Returns PP_OK; PP_EUSAGE for a tensor
 * the directory lacks ("DIR: no tensor \"NAME\" in FILE"), a range past its end or a
 * dtype that is not F32/BF16/F16, a file that ended early; PP_ERUNTIME for I/O. */
int hf_dir_read(HfDir *d, const char *name, uint64_t first, uint64_t n, float *out, char *err,
                size_t errlen);

/* Tensor bytes read so far across the directory's files (not headers nor the index). */
uint64_t hf_dir_bytes_read(const HfDir *d);
/* Bytes read at open: the index file and every shard's header. */
uint64_t hf_dir_header_bytes(const HfDir *d);

/* ---- writing ------------------------------------------------------------------------ */

/* A file other than the weights to put in the directory, e.g. config.json. */
typedef struct {
    const char *name; /* a plain file name */
    const void *data;
    size_t len;
} HfDirFile;

typedef struct {
    uint64_t max_shard_size;     /* tensor bytes per shard; 0: HF_DIR_DEFAULT_SHARD */
    const SafetensorsMeta *meta; /* every shard's __metadata__ ({"format": "pt"} is */
    size_t nmeta;                /*   what transformers writes) */
    SafetensorsFill fill;        /* for tensors whose data is NULL (safetensors.h) */
    void *ctx;
    const HfDirFile *files; /* written beside the weights */
    size_t nfiles;
} HfDirWriteOptions;

/* Write tensors t[0..n) (each in its own dtype, F32 or BF16) as the directory `dir`,
 * cut into shards as huggingface_hub's split_state_dict_into_shards_factory does (in
 * the order given, a new shard when the next tensor would take the current one past
 * max_shard_size, a tensor larger than that alone in a shard of its own), named
 * model.safetensors when one shard suffices, else model-00001-of-0000N.safetensors and
 * model.safetensors.index.json ({"metadata": {"total_size": tensor bytes}, "weight_map":
 * ...} as transformers writes it: json.dumps(indent=2, sort_keys=True) and a newline),
 * plus o->files. Everything is written into a fresh directory DIR.tmp.PID beside `dir`
 * and renamed to `dir` at the end, so `dir` appears complete or not at all (a crash can
 * leave the DIR.tmp.PID directory; an error removes it). `dir` must not exist
 * or be an empty directory; its parent is created if missing. Returns PP_OK;
 * PP_EUSAGE (a bad tensor or file name, `dir` not empty) or PP_ERUNTIME (I/O), or
 * fill's status, with nothing left behind. */
int hf_dir_write(const char *dir, const SafetensorsWriteTensor *t, size_t n,
                 const HfDirWriteOptions *o, char *err, size_t errlen);

/* Parse a size as transformers' max_shard_size takes it: an integer number of bytes,
 * or a number with a unit KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB
 * (powers of 1024), case-insensitive, "5GB", "500MB", "1.5GiB". Returns PP_OK with
 * *bytes > 0, or PP_EUSAGE naming the text. */
int hf_dir_parse_size(const char *text, uint64_t *bytes, char *err, size_t errlen);

#endif
