/* data.h — token files in llm.c's .bin format: open and validate, batch access,
 * atomic writing. `pptrain prepare-data`, which makes them, is src/tok/prepare.c. */
#ifndef PP_DATA_H
#define PP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* File layout (DESIGN.md §6), llm.c's two formats (dev/data/data_common.py's
 * write_datafile), little-endian:
 *   header  int32[256]: [0] = magic, [1] = version, [2] = token count N, the rest zero
 *   body    N tokens of the width the magic and version name:
 *             DATA_MAGIC,   DATA_VERSION:   uint16 (llm.c's "gpt-2" files)
 *             DATA_MAGIC32, DATA_VERSION32: uint32 (llm.c's "llama-3" files)
 * so a valid file is exactly DATA_HEADER_BYTES + width*N bytes long. The header holds no
 * width of its own: the magic is the only sign of it. */
#define DATA_MAGIC 20240520
#define DATA_VERSION 1
#define DATA_MAGIC32 20240801
#define DATA_VERSION32 7
#define DATA_HEADER_INTS 256
#define DATA_HEADER_BYTES (DATA_HEADER_INTS * 4)

/* The file is checked in blocks of this many bytes ([Note: checked batch reads] in
 * data.c): block k holds bytes [k*DATA_BLOCK_BYTES, (k+1)*DATA_BLOCK_BYTES) of the file,
 * header included, the last one what is left. A multiple of 4, as the header is: no token
 * of either width straddles two blocks. */
#define DATA_BLOCK_BYTES 16384

/* An open token file. Batches are read from the file as it was opened, through its file
 * descriptor: a file replaced on disk by a rename (as data_write does) does not change
 * an open DataSet, and one changed in place is an error of data_batch. */
typedef struct {
    char path[PP_PATH_MAX]; /* "" when not open */
    int fd;
    size_t ntok;            /* tokens, as the header says */
    int width;              /* bytes per token: 2 (DATA_MAGIC) or 4 (DATA_MAGIC32) */
    long long bytes;        /* the file's size when it was opened */
    int vocab_size;         /* every token is below it (0: not checked) */
    uint32_t *crc;          /* [nblocks] the CRC-32 of each block when it was opened */
    size_t nblocks;
    unsigned char *buf;     /* [buf_bytes] the blocks of one batch (data_check_batch) */
    size_t buf_bytes;
} DataSet;

/* Open `path`, read it whole and validate it: magic and version (either pair above, which
 * sets the width), file size == DATA_HEADER_BYTES + width*count, and every token <
 * vocab_size (vocab_size 0: not checked, except that a uint32 id must be below 2^31, the
 * ints of a batch); keep it open, with each block's CRC-32. Returns PP_OK, or PP_EUSAGE
 * (a bad or missing data file is a config problem) with a message in err that names the
 * file, what is wrong (the magic and version found and the two pairs read; expected vs
 * actual size; the index, byte offset and value of the first out-of-range token) and how
 * to fix it; PP_ERUNTIME if reading it fails or it changes while being read. On error *d
 * is left empty, so data_close(d) is safe either way. */
int data_open(DataSet *d, const char *path, int vocab_size, char *err, size_t errlen);

/* The cheap half of data_open: open `path`, check its header and size as data_open does
 * (a regular file, either magic and version pair, size == DATA_HEADER_BYTES + width*count,
 * the same PP_EUSAGE messages), read no token and close it. *ntok, *width and *bytes as a
 * DataSet's. For the shards of a stream that are validated whole only when a run reaches
 * them (data_stream.h). */
int data_peek(const char *path, size_t *ntok, int *width, long long *bytes, char *err,
              size_t errlen);

/* Close the file, free and empty *d. Safe on a zeroed or already closed DataSet. */
void data_close(DataSet *d);

/* Batches per pass over the file: floor((ntok - 1) / (B*T)), 0 when the file has
 * fewer than B*T + 1 tokens (one batch reads B*T inputs plus one more target). */
long data_num_batches(const DataSet *d, int B, int T);

/* PP_OK if the file holds at least one B x T batch (B*T + 1 tokens), and then makes
 * room in *d to read one (the only allocation of reading); else PP_EUSAGE with a
 * message naming the file, its token count and what one batch needs. Callers of
 * data_batch must call this first, with the same or a larger B*T. */
int data_check_batch(DataSet *d, int B, int T, char *err, size_t errlen);

/* Batch n (0-based, any n >= 0) in llm.c's order, no shuffle: with nb =
 * data_num_batches, start = (n mod nb) * B*T, and for i < B*T
 *   inputs[i] = tokens[start + i],  targets[i] = tokens[start + i + 1].
 * Row b of the B x T batch is inputs[b*T .. b*T+T). Stateless in n, so resuming at
 * step n needs no saved position. inputs, targets: [B*T], written.
 * Every token is read from the file now and checked: below vocab_size, its blocks as
 * they were when the file was opened, the file's size unchanged. Returns PP_OK, or
 * PP_ERUNTIME with a message naming the file, the batch, and the token and byte
 * position of what changed ([Note: checked batch reads]); then inputs and targets
 * are token 0 throughout, so that a caller may still run the step on them. */
int data_batch(DataSet *d, long n, int B, int T, int *inputs, int *targets, char *err,
               size_t errlen);

/* The token width, in bytes, of the files for a vocabulary of vocab_size ids: 2 (uint16,
 * data_write) when every id fits 16 bits (vocab_size <= 65536), else 4 (data_write32). */
int data_token_width(int vocab_size);

/* Write n uint16 tokens to `path` as a DATA_MAGIC file, atomically and durably (PPFile,
 * [Note: atomic file writes] in common.c): readers see the old file or the complete new
 * one. n must fit the int32 count. Returns PP_OK or PP_ERUNTIME with a message naming the
 * file (the temporary file is removed on error). */
int data_write(const char *path, const uint16_t *tok, size_t n, char *err, size_t errlen);

/* data_write for uint32 tokens: a DATA_MAGIC32 file (llm.c's Llama 3 format). Every id
 * must be below 2^31 (no reader's int holds more); the first that is not is PP_ERUNTIME
 * naming its index, and nothing is written. */
int data_write32(const char *path, const uint32_t *tok, size_t n, char *err, size_t errlen);

/* The validation file name that prepare-data (without --shard-tokens) derives from the
 * --out name: the last "train" in the file name (not the directories) becomes "val";
 * otherwise a trailing ".bin" is dropped and "_val.bin" appended ("a/x.bin" -> "a/x_val.bin",
 * "a/x" -> "a/x_val.bin"). Returns PP_OK, or PP_EUSAGE if it does not fit in n. */
int data_val_path(const char *out, char *val, size_t n);

#endif
