/* ckpt_internal.h — internal to the checkpoint module (ckpt.c, ckpt_io.c, ckpt_writer.c): the
 * shard file's byte format (docs/checkpoint-format.md) both ways, the chunk codec, file
 * helpers and the checks shared by the writers. Other modules use ckpt.h. */
#ifndef PP_CKPT_INTERNAL_H
#define PP_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

#define CKPT_HEADER_BYTES 64
#define CKPT_TRAILER_BYTES 32
#define CKPT_ENTRY_BYTES 160 /* fixed part of an index record */
#define CKPT_CHUNK_REC_BYTES 16
#define CKPT_MAX_CHUNK (1u << 30)
#define CKPT_MAX_VALUE (16u << 20) /* largest metadata value */

enum { CKPT_META_U64 = 1, CKPT_META_F64 = 2, CKPT_META_STR = 3, CKPT_META_BYTES = 4 };
enum { CKPT_FILTER_NONE = 0, CKPT_FILTER_SHUFFLE4 = 1 };
enum { CKPT_CODEC_STORED = 0, CKPT_CODEC_ZLIB = 1 };

typedef struct {
    int type;                 /* CKPT_META_* */
    char key[CKPT_NAME_MAX];
    uint8_t *val;             /* len bytes, plus a NUL after them (strings) */
    uint32_t len;
} CkptMetaEntry;

struct CkptMeta {
    CkptMetaEntry *e;
    int n, cap;
};

/* Deep copy of src into dst (replacing dst's entries). */
void ckpt_meta_copy(CkptMeta *dst, const CkptMeta *src);
/* Remove every entry (keeps the allocation). */
void ckpt_meta_clear(CkptMeta *m);
/* The entry of `key`, or NULL. */
const CkptMetaEntry *ckpt_meta_find(const CkptMeta *m, const char *key);

/* 1 if s is a valid tensor name or metadata key: 1..63 printable ASCII, no space. */
int ckpt_name_ok(const char *s);

/* prod(shape[0..ndim)) (1 for ndim 0), or -1 if a dimension is negative or the
 * product exceeds 2^58 elements. */
int64_t ckpt_numel(int ndim, const int64_t *shape);

/* What ckpt_write_shard rejects before touching a file (names, dtype, ndim, shape,
 * missing data, a name twice): PP_OK or PP_EUSAGE with err. (ckpt.c) */
int ckpt_check_tensors(const CkptTensor *t, int n, char *err, size_t errlen);

/* *out = *in (or the defaults if in is NULL) with threads and chunk_bytes resolved and
 * the ranges checked: PP_OK or PP_EUSAGE with err. (ckpt.c) */
int ckpt_options_resolve(const CkptOptions *in, CkptOptions *out, char *err, size_t errlen);

/* One chunk's record in the index. */
typedef struct {
    uint32_t raw_len, comp_len, raw_crc, comp_crc;
} CkptChunk;

/* One tensor's index record, decoded and validated. */
typedef struct {
    char name[CKPT_NAME_MAX];
    int dtype, ndim, filter, codec;
    int64_t shape[CKPT_MAX_DIMS];
    uint64_t raw_bytes, data_offset, data_bytes;
    uint32_t nchunks;
    const CkptChunk *chunks; /* [nchunks], in the shard's chunk array */
} CkptEntry;

/* A shard file opened for reading, its header, metadata, trailer and index validated. */
typedef struct {
    char path[PP_PATH_MAX];
    int fd;
    uint64_t file_bytes;
    uint32_t body_crc;       /* trailer's CRC32 of all bytes before the trailer */
    uint32_t file_crc;       /* CRC32 of the whole file, derived from body_crc */
    CkptMeta meta;
    int ntensors;
    CkptEntry *entries;      /* [ntensors] */
    CkptChunk *chunks;       /* all chunk records */
} CkptShard;

/* Write the shard's bytes to fd (a new empty file, written from offset 0); `name` is the
 * file named in messages. No fsync, rename or fsync of the directory: ckpt_write_shard
 * adds those (PPFile). opt must be resolved. PP_OK or PP_ERUNTIME with err. */
int ckpt_shard_write(int fd, const char *name, const CkptMeta *meta, const CkptTensor *t,
                     int n, const CkptOptions *opt, char *err, size_t errlen);

/* Open and validate `path`. If expect_bytes >= 0 the file must be that long. On error
 * *s is left closed (ckpt_shard_close is safe) and err names the file. */
int ckpt_shard_open(CkptShard *s, const char *path, int64_t expect_bytes, char *err,
                    size_t errlen);
void ckpt_shard_close(CkptShard *s);

/* Read entry e of shard s into dst (raw_bytes bytes) on `threads` threads: read the
 * stored bytes, check every chunk's compressed CRC, then inflate, check sizes and raw
 * CRCs, unshuffle. PP_OK or PP_ERUNTIME with err naming file and tensor. */
int ckpt_shard_read(const CkptShard *s, const CkptEntry *e, void *dst, int threads,
                    char *err, size_t errlen);

/* ---- file helpers (each returns 0, or -1 with errno set) ------------------------------ */

int ckpt_write_all(int fd, const void *p, size_t n);
/* Read exactly n bytes at off; a file that ends first gives -1 with errno 0. */
int ckpt_pread_all(int fd, void *p, size_t n, uint64_t off);
/* Text of the last file error: strerror(errno), or "unexpected end of file" for errno 0. */
const char *ckpt_syserr(void);

/* Run fn(ctx, job, tid) for every job in [0, njobs) on up to `threads` threads, the
 * caller being one of them; tid in [0, threads) tells which (for per-thread buffers).
 * Returns when all jobs are done. */
void ckpt_parallel_for(int threads, int njobs, void (*fn)(void *ctx, int job, int tid),
                       void *ctx);

#endif
