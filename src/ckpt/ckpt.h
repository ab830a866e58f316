/* ckpt.h — checkpoint storage: sharded, chunk-compressed, CRC-checked tensor files, the
 * crash-safe directory protocol, validated loading by global name, and an asynchronous
 * writer. Knows nothing of models or ranks' transports; the byte format is in
 * docs/checkpoint-format.md. */
#ifndef PP_CKPT_H
#define PP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define CKPT_NAME_MAX 64              /* tensor names and metadata keys: 1..63 chars */
#define CKPT_MAX_DIMS 8
#define CKPT_FORMAT_VERSION 1         /* of both the shard files and the manifest */
#define CKPT_DEFAULT_CHUNK (4u << 20) /* raw bytes per independently compressed chunk */

/* [Note: checkpoint protocol]
 * A checkpoint of step N is the directory ROOT/step_NNNNNNN/ (N printed with at least 7
 * digits) holding shard_RRRRR.ckpt for each rank R < world and a `manifest` that lists
 * them with their byte sizes and CRC32s. Only ckpt_commit creates that name, by
 * renaming the complete staging directory ROOT/step_NNNNNNN.tmp/, and only then does it
 * point the symlink ROOT/latest at it (by renaming a new symlink over the old). So at
 * every instant `latest` names a complete checkpoint, and a crash mid-save leaves only
 * a *.tmp directory that the next commit removes. One save across P ranks:
 *
 *   rank 0:     ckpt_stage_dir(root, step, dir, ...)        others: ckpt_dir_path(...,1,...)
 *   barrier                                      (the staging directory exists)
 *   every rank: ckpt_shard_path(dir, rank, path); ckpt_write_shard(path, ...)
 *               (or ckpt_writer_submit(..., path, ...) now and ckpt_writer_wait later)
 *   barrier     with every rank's status (commit only if all shards were written)
 *   rank 0:     ckpt_commit(root, step, P, extra, nextra, keep, ...)
 *
 * Every file is written as NAME.part (or NAME.tmp), fsynced, renamed to NAME, and its
 * directory fsynced, so a power loss also leaves either the old or the new state. */

typedef enum { CKPT_F32 = 0 } CkptDtype; /* the only dtype so far; stored per tensor */

/* One tensor to save. `data` holds prod(shape) elements (1 when ndim == 0) in the
 * caller's memory, row-major, read only during the save call (or the submit call of
 * the asynchronous writer). A zero-initialized struct is an fp32 scalar. */
typedef struct {
    const char *name;              /* global name, e.g. "h.7.qkvw.adam_m", 1..63 chars */
    CkptDtype dtype;
    int ndim;                      /* 0..CKPT_MAX_DIMS */
    int64_t shape[CKPT_MAX_DIMS];  /* each >= 0 */
    const void *data;
} CkptTensor;

/* zlib's match-finding strategy. Any inflate reads either; the file does not record it.
 * On shuffled fp32 weights CKPT_RLE is several times faster than level 6 and a little
 * smaller (docs/checkpoint-format.md has the measurements); the level then barely
 * matters. */
typedef enum { CKPT_DEFLATE = 0, CKPT_RLE = 1 } CkptStrategy;

/* How shards are written. The bytes of a shard depend on level, shuffle, strategy and
 * chunk_bytes but never on threads. */
typedef struct {
    int level;             /* zlib level 0..9; 0 stores the chunks uncompressed */
    int shuffle;           /* 1: byte-shuffle each chunk before deflate (not at level 0) */
    CkptStrategy strategy; /* CKPT_DEFLATE (zlib's default, as compress2) or CKPT_RLE */
    int threads;           /* compression threads per shard; <= 0: the online CPU count */
    size_t chunk_bytes;    /* raw bytes per chunk, a multiple of 4 up to 1 GiB; 0: default */
} CkptOptions;

/* level 6, shuffle on (fp32 weights come out ~8% smaller: see the format doc),
 * CKPT_DEFLATE, threads 0 (all online CPUs), chunk_bytes CKPT_DEFAULT_CHUNK. */
void ckpt_options_default(CkptOptions *o);

/* ---- per-shard metadata: a small typed key/value table ----------------------------- */

typedef struct CkptMeta CkptMeta;

CkptMeta *ckpt_meta_create(void);
void ckpt_meta_destroy(CkptMeta *m); /* NULL is fine */

/* Set `key` (1..63 printable ASCII characters, no spaces) to a value, replacing any
 * earlier value of that key whatever its type. The value is copied. Returns PP_OK, or
 * PP_EUSAGE for a bad key or a value over 16 MiB. */
int ckpt_meta_set_u64(CkptMeta *m, const char *key, uint64_t v);
int ckpt_meta_set_f64(CkptMeta *m, const char *key, double v);
int ckpt_meta_set_str(CkptMeta *m, const char *key, const char *s);
int ckpt_meta_set_bytes(CkptMeta *m, const char *key, const void *p, size_t n);

/* ---- writing ------------------------------------------------------------------------ */

/* Write "ROOT/step_NNNNNNN" (staging = 0) or "ROOT/step_NNNNNNN.tmp" (staging = 1) into
 * out[n]. Returns PP_OK, or PP_EUSAGE if step < 0 or the path does not fit. */
int ckpt_dir_path(const char *root, long step, int staging, char *out, size_t n);

/* Write "DIR/shard_RRRRR.ckpt" into out[n]. PP_EUSAGE if rank < 0 or it does not fit. */
int ckpt_shard_path(const char *dir, int rank, char *out, size_t n);

/* Create ROOT (and its parents) if missing, remove a stale ROOT/step_NNNNNNN.tmp/ of
 * this step, create it empty and return its path in tmpdir_out[n]. Called by one rank
 * (rank 0) before a barrier: it deletes the shards of an earlier attempt. Returns
 * PP_OK, PP_EUSAGE (bad step, path too long) or PP_ERUNTIME (file system) with err. */
int ckpt_stage_dir(const char *root, long step, char *tmpdir_out, size_t n, char *err,
                   size_t errlen);

/* Write one shard file: meta (NULL = none) and the tensors, each split into chunks of
 * opt->chunk_bytes raw bytes that are shuffled and deflated independently on
 * opt->threads threads (opt NULL = defaults). Writes path.part, fsyncs it, renames it
 * to path and fsyncs the directory, so `path` never exists half-written. Tensor names
 * must be unique in the shard. Returns PP_OK; PP_EUSAGE for a bad name, shape, dtype
 * or option; PP_ERUNTIME for an I/O error, with the file in err (path.part removed). */
int ckpt_write_shard(const char *path, const CkptMeta *meta, const CkptTensor *tensors,
                     int ntensors, const CkptOptions *opt, char *err, size_t errlen);

/* One manifest entry from the caller: key 1..63 characters of [A-Za-z0-9_.-], value
 * any string (newlines included). */
typedef struct {
    const char *key;
    const char *value;
} CkptKV;

/* Rank 0, after a barrier confirming that all `world` shards are written: check that
 * each shard of ROOT/step_NNNNNNN.tmp exists and has a valid header, trailer and index;
 * write the manifest (format, step, world size, each shard's name, size and CRC32, the
 * extra entries, and its own CRC32) via manifest.tmp + fsync + rename; rename the
 * directory to ROOT/step_NNNNNNN (exchanging it atomically with an existing checkpoint
 * of the same step, which is then removed); fsync ROOT; point the symlink ROOT/latest
 * at it (a new symlink renamed over the old); then remove stale *.tmp entries and all
 * complete checkpoints but this one and the keep-1 others with the highest steps
 * (keep <= 0 keeps all). Pruned directories are first renamed to *.tmp, so a crash
 * never leaves a half-deleted step_NNNNNNN. Returns PP_OK, PP_EUSAGE (bad arguments)
 * or PP_ERUNTIME with err naming the shard or path at fault; on any error before the
 * directory rename, the previous checkpoint and `latest` are untouched. */
int ckpt_commit(const char *root, long step, int world, const CkptKV *extra, int nextra,
                int keep, char *err, size_t errlen);

/* Resolve what the user passed: a step directory (one holding a manifest, or a
 * symlink to one such as ROOT/latest) gives that directory with the symlink followed;
 * a checkpoint ROOT gives the directory its `latest` names. Writes the path into
 * dir_out[n]. Returns PP_OK, or PP_ERUNTIME with a message saying what is there
 * instead (nothing, an incomplete *.tmp directory, a ROOT without `latest`, a
 * `latest` naming a missing directory) and what to pass. A ROOT that holds step
 * directories but no `latest` (a copy that dropped symlinks) is not guessed at: the
 * newest step directory need not be the one `latest` named (a run resumed from an
 * earlier step leaves higher ones); the message names the newest complete one and says
 * to pass it, or to recreate `latest`. */
int ckpt_resolve(const char *root_or_dir, char *dir_out, size_t n, char *err,
                 size_t errlen);

/* The steps of the committed checkpoints under ROOT: its step_NNNNNNN directories
 * (only ckpt_commit makes that name; a *.tmp staging directory is none), highest first,
 * into a malloc'd array *steps that the caller frees (NULL when there are none). Returns
 * their count, 0 also when ROOT does not exist; or -1 with errno when ROOT cannot be
 * read (not a directory, no permission). */
int ckpt_list_steps(const char *root, long **steps);

/* ---- reading ------------------------------------------------------------------------ */

typedef struct CkptReader CkptReader;

typedef struct {
    char name[CKPT_NAME_MAX];
    CkptDtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t numel;         /* prod(shape), 1 for ndim 0 */
    uint64_t raw_bytes;    /* numel * 4 for fp32 */
    uint64_t stored_bytes; /* the compressed chunks' bytes in the file */
    int shuffle;           /* 1 if the chunks were byte-shuffled */
    int compressed;        /* 1 if the chunks are zlib streams, 0 if stored (level 0) */
    int shard;             /* index of the shard (= the writing rank) that holds it */
} CkptTensorInfo;

/* Open the checkpoint directory `dir` (see ckpt_resolve): read and check the manifest
 * (format, version, its CRC32) and every shard it names: the file exists, its size is
 * the manifest's, its header (magic, version, CRC), metadata table (CRC), trailer and
 * index (bounds, CRC) are valid and the CRC32 it records for its body agrees with the
 * manifest. Tensor names must be unique across shards. Tensor data is read by
 * ckpt_read. Returns the reader, or NULL with err naming the file and the fault. */
CkptReader *ckpt_open(const char *dir, char *err, size_t errlen);
void ckpt_close(CkptReader *r); /* NULL is fine */

/* Threads that ckpt_read and ckpt_verify decompress / checksum with (default 1). */
void ckpt_set_threads(CkptReader *r, int threads);

long ckpt_step(const CkptReader *r);
int ckpt_nshards(const CkptReader *r);
int ckpt_ntensors(const CkptReader *r);

/* The path of shard `shard`'s file (for messages), or NULL if there is no such shard. */
const char *ckpt_shard_file(const CkptReader *r, int shard);

/* Value of the caller's manifest entry `key` (as given to ckpt_commit), or NULL. */
const char *ckpt_extra(const CkptReader *r, const char *key);

/* Describe tensor i, 0 <= i < ckpt_ntensors, in shard order then file order. Returns
 * 0, or -1 if i is out of range. */
int ckpt_tensor_at(const CkptReader *r, int i, CkptTensorInfo *info);

/* Describe the tensor called `name` in whichever shard holds it: 0 if present (info
 * filled when non-NULL), -1 if not. */
int ckpt_find(const CkptReader *r, const char *name, CkptTensorInfo *info);

/* Read tensor `name` into dst[numel] (fp32). If expect_shape is non-NULL the stored
 * shape must equal expect_shape[0..expect_ndim). Checks the CRC32 of every chunk's
 * compressed bytes before writing anything into dst, then inflates the chunks, checks
 * their sizes and raw CRC32s and undoes the shuffle. Returns PP_OK, or PP_ERUNTIME with
 * err naming the shard file and the tensor: not found, other shape, I/O error, CRC
 * mismatch. On error dst is untouched unless the compressed bytes were intact (only a
 * writer bug or a forged file get that far). Not thread-safe on one reader. */
int ckpt_read(CkptReader *r, const char *name, float *dst, const int64_t *expect_shape,
              int expect_ndim, char *err, size_t errlen);

/* Shard `shard`'s metadata value of `key`. Returns PP_OK, or PP_ERUNTIME if the shard
 * or key does not exist or holds another type (nothing written then). Strings and byte
 * values point into the reader (valid until ckpt_close); strings are NUL-terminated. */
int ckpt_meta_u64(const CkptReader *r, int shard, const char *key, uint64_t *v);
int ckpt_meta_f64(const CkptReader *r, int shard, const char *key, double *v);
int ckpt_meta_str(const CkptReader *r, int shard, const char *key, const char **s);
int ckpt_meta_bytes(const CkptReader *r, int shard, const char *key, const void **p,
                    size_t *n);

/* Read every shard file whole and check its CRC32 against the manifest (the per-chunk
 * CRCs already protect tensor data; this also covers everything else, byte for byte).
 * Returns PP_OK or PP_ERUNTIME naming the file. */
int ckpt_verify(CkptReader *r, char *err, size_t errlen);

/* ---- asynchronous writing ---------------------------------------------------------- */

/* One background thread that writes shards with ckpt_write_shard while the caller
 * trains on. It owns host staging buffers that are reused (grown when needed) between
 * saves, so memory use is about one copy of the largest save. One thread of the caller
 * submits and waits (the functions are not for concurrent callers). The copy and the
 * compression use opt->threads threads: pick fewer than the cores that training keeps
 * busy, or the background save slows the steps down. */
typedef struct CkptWriter CkptWriter;

/* Start the writer thread; opt NULL = defaults (copied). Dies if no thread can start. */
CkptWriter *ckpt_writer_create(const CkptOptions *opt);

/* Wait for the previous save to finish, then copy meta (may be NULL), the tensors'
 * descriptions and their data into the staging buffers, hand the shard `path` to the
 * background thread and return: the caller stalls only for the copy and may change its
 * arrays as soon as this returns. Returns PP_OK; PP_EUSAGE for invalid tensors (as
 * ckpt_write_shard; nothing submitted); or PP_ERUNTIME with the previous save's error
 * if that one failed and its status was not collected by ckpt_writer_wait (nothing
 * submitted then either). */
int ckpt_writer_submit(CkptWriter *w, const char *path, const CkptMeta *meta,
                       const CkptTensor *tensors, int ntensors, char *err, size_t errlen);

/* Wait until no save is in progress and return the last save's status (PP_OK when none
 * was submitted; the same again if called twice) with its error text in err ("" on
 * success); the status is then collected. Call it before ckpt_commit's barrier. */
int ckpt_writer_wait(CkptWriter *w, char *err, size_t errlen);

/* Size the staging buffers for saves of these tensors (their descriptions only; the
 * data is not read) and touch the memory, so that the first submit stalls only for the
 * copy and not for page faults. Optional. */
void ckpt_writer_reserve(CkptWriter *w, const CkptTensor *tensors, int ntensors);

/* Threads for the copy and compression of the next saves (<= 0: all cores); waits for
 * a save in progress first. */
void ckpt_writer_set_threads(CkptWriter *w, int threads);

/* [Note: checkpoint snapshot] Where the tensors' data is not host memory (a GPU's), the
 * staging copy of every later submit goes through these instead of memcpy. copy(ctx, dst,
 * src, bytes) copies `bytes` from src to the host dst: when `finish` is NULL it has
 * finished when it returns and may run on several threads at once; when `finish` is set
 * it only starts the copy (one thread calls it, in order), the caller may go on at once
 * (the device orders its later work after the copy), and the background thread calls
 * finish(ctx) before it reads the staged data. alloc / release, when set, provide the
 * staging memory (pinned host memory, which a device copies into fastest). A NULL
 * `dev` restores memcpy and malloc. Waits for a save in progress first. */
typedef struct {
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*finish)(void *ctx);
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *p);
    void *ctx;
} CkptDevice;
void ckpt_writer_set_device(CkptWriter *w, const CkptDevice *dev);

/* 1 while a submitted save is still being written, else 0. Does not block. */
int ckpt_writer_busy(CkptWriter *w);

/* Wait for a save in progress, stop the thread, free the buffers. NULL is fine. An
 * uncollected failure is reported with pp_error. */
void ckpt_writer_destroy(CkptWriter *w);

#endif
