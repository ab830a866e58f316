/* data_stream.h — data.train / data.val as one stream of token files (shards): files and
 * globs read in order, in llm.c's multi-shard order, batch n a pure function of n. */
#ifndef PP_DATA_STREAM_H
#define PP_DATA_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* Shards held open at once (validated, each with its descriptor, CRC table and a batch
 * buffer), the least recently used closed first ([Note: shard streams] in data_stream.c). */
#define DATA_STREAM_OPEN 4

typedef struct {
    char *path;      /* as its pattern or glob gave it */
    size_t ntok;     /* tokens, as its header said when the stream was opened */
    long long bytes; /* its size then */
    long nbatches;   /* B x T batches it gives (data_stream_check_batch), 0 = skipped */
    long first;      /* the index, in one pass over the stream, of its first batch */
    uint32_t sum;    /* the CRC-32 of its block CRCs when first validated (`validated`) */
    int validated;   /* it has been read whole once: opened again, it must match `sum` */
} DataShard;

/* A stream. A zeroed DataStream is an empty one (data_stream_close is safe on it). */
typedef struct {
    char key[32];      /* names the stream in messages: "data.train" */
    DataShard *shards; /* [nshards] in stream order */
    int nshards;
    int width;                        /* bytes per token, the same in every shard: 2 or 4 */
    int vocab_size;                   /* every id is below it (data_open) */
    size_t ntok;                      /* tokens of all shards */
    int B, T;                         /* the batch shape (data_stream_check_batch); 0 before */
    long nbatches;                    /* batches in one pass over the stream */
    DataSet open[DATA_STREAM_OPEN];   /* validated shards (a slot is in use when open[k].crc) */
    int open_shard[DATA_STREAM_OPEN]; /* which shard slot k holds */
    unsigned long open_used[DATA_STREAM_OPEN]; /* when slot k was last read (tick) */
    unsigned long tick;
    int news;        /* the shard opened by a batch since data_stream_news, else -1 */
    long news_batch; /* ... the batch that opened it, and how long validating it took */
    double news_s;
} DataStream;

/* Open the stream of `patterns`: one or more, each followed by '\0' and the last by a
 * second '\0' (config.h's data.train / data.val). A pattern names a file (taken as it is
 * when a file has that exact name or it holds none of the glob characters *?[) or is a
 * glob, expanded in sorted order (glob(3)); the shards are the files in pattern order
 * (a file named twice is read twice). Every shard's header and size are checked now
 * (data_peek), every shard must have the same token width, and the first shard is opened
 * and validated whole (data_open: each id below vocab_size); the others are validated when
 * a batch first needs them ([Note: shard streams] in data_stream.c). `key` names the
 * stream in messages. Returns PP_OK, or PP_EUSAGE with a message naming the pattern that
 * matches no file, the bad file (data_open's messages) or the two shards whose token
 * widths differ; *s is then empty. */
int data_stream_open(DataStream *s, const char *key, const char *patterns, int vocab_size,
                     char *err, size_t errlen);

/* Close every open shard, free and empty *s. Safe on a zeroed or closed DataStream. */
void data_stream_close(DataStream *s);

/* Fix the batch shape: shard i gives floor((ntok_i - 1) / (B*T)) batches (0 when it holds
 * fewer than B*T + 1 tokens: it is skipped), in shard order. PP_OK when the stream holds
 * at least one batch, and then makes room to read one (the open shards' buffers); else
 * PP_EUSAGE with a message naming the file (one shard: data_check_batch's) or the
 * largest shard, its token count and what one batch needs. Callers of data_stream_batch
 * must call it first, once. */
int data_stream_check_batch(DataStream *s, int B, int T, char *err, size_t errlen);

/* Batch n (0-based, any n >= 0) in llm.c's order: with n' = n mod nbatches, the batch
 * n' - first of the shard whose batches hold n' (data_stream_locate), that is
 *   inputs[i] = tokens[t + i],  targets[i] = tokens[t + i + 1]  (i < B*T)
 * of that shard with t = (n' - first) * B*T; a batch never straddles two shards. Stateless
 * in n, so resuming at step n needs no saved position. inputs, targets: [B*T], written.
 * The shard is opened and validated whole when no open slot holds it (the least recently
 * read is closed); then it must be what the stream saw before (its header and size at
 * data_stream_open, its bytes if it was read whole before). Every token is checked as
 * data_batch checks it. Returns PP_OK, or PP_ERUNTIME with a message naming the shard and
 * what is wrong; then inputs and targets are token 0 throughout. */
int data_stream_batch(DataStream *s, long n, int *inputs, int *targets, char *err, size_t errlen);

/* Where batch n (any n >= 0) lies: the index of its shard and of its first token there. */
void data_stream_locate(const DataStream *s, long n, int *shard, size_t *tok);

/* The stream's identity: FNV-1a 64 over each shard's file name (its last component: a
 * data set moved to another directory is the same stream), token count and width, in
 * order. Two streams with the same hash map every batch to the same tokens (the shards'
 * contents aside, which only reading them shows). */
uint64_t data_stream_hash(const DataStream *s);

/* The last path component of shard i (a pointer into its path). */
const char *data_stream_name(const DataStream *s, int i);

/* [Note: stream records] in data_stream.c: what a checkpoint keeps of the stream. */
#define DATA_RECORD_MAX (PP_PATH_MAX + 160)
typedef enum {
    DATA_RECORD_SAME,    /* the same stream, batch n where it was */
    DATA_RECORD_CHANGED, /* another stream (shards added, removed...), batch n where it was */
    DATA_RECORD_MOVED,   /* batch n is elsewhere: the batches from here differ */
    DATA_RECORD_NONE,    /* no record (a checkpoint from before streams were recorded) */
} DataRecordMatch;

/* The record of the stream at batch n (the next one a run reads) into buf[n], one line:
 * "shards=3 tokens=3801 width=2 hash=<16 hex digits> batch=10 shard=1 token=384 file=NAME"
 * (shard: 0-based; file: its last path component, the rest of the line). */
void data_stream_record(const DataStream *s, long n, char *buf, size_t len);

/* Compare the record a checkpoint holds (NULL: none) with this stream at batch n, and
 * say so in msg[len]: a line that names the stream, what differs, where batch n was and
 * is, and, for DATA_RECORD_MOVED, what to restore. A record that cannot be read is
 * DATA_RECORD_MOVED, saying so. */
DataRecordMatch data_stream_compare(const DataStream *s, long n, const char *record, char *msg,
                                    size_t len);

/* One line describing the stream for the build report: its files (or the first and last
 * of its shards), tokens and width, batches per pass, and the shards skipped. */
void data_stream_describe(const DataStream *s, char *buf, size_t n);

/* 1, with a line in buf[n], when a batch since the last call opened (validated) a
 * shard: which, at which batch, and how long it took; 0 otherwise. */
int data_stream_news(DataStream *s, char *buf, size_t n);

/* The patterns of a list (as data_stream_open takes them) as text for messages: the
 * only one as it is, several as "'a', 'b' (and N more)". */
void data_stream_patterns_text(const char *patterns, char *buf, size_t n);

#endif
