/* prepare_internal.h — what prepare.c (the command and its threads) and prepare_io.c (the
 * input reader, the output files, the progress line) share. Private to src/tok/. */
#ifndef PP_TOK_PREPARE_INTERNAL_H
#define PP_TOK_PREPARE_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "data.h"
#include "tokenizer.h"

#define PREP_BATCH_BYTES ((size_t)1 << 20)     /* input per batch, or one larger document */
#define PREP_INFLIGHT_BYTES ((size_t)64 << 20) /* input read and not yet written, at most */
#define PREP_WRITE_BYTES ((size_t)1 << 20)     /* staged output bytes per file */
#define PREP_READ_BYTES ((size_t)1 << 20)      /* input per read(2), at most */
#define PREP_WAIT_MS 100 /* the longest wait for input or a worker between looks at the stop */

/* The stop signal's flag (prepare.c's, set by its handler; 0: none). Whatever can take long
 * looks at it at least every PREP_WAIT_MS or PREP_READ_BYTES / PREP_WRITE_BYTES and returns
 * -SIG, the signal's number negated: [Note: stopping prepare-data] in prepare.c. */
typedef const volatile sig_atomic_t PrepStop;

#define PREP_IDLE 3 /* reader_batch: no input for PREP_WAIT_MS (never leaves pipe_run) */

typedef struct {
    const char *tokenizer, *field, *out, *doc_token; /* NULL when not given */
    const char **inputs; /* [ninputs] --text or --jsonl files in order; "-": stdin */
    int ninputs, jsonl;
    double val_fraction;
    long long shard_tokens; /* 0: one file per split */
    int threads;
} PrepArgs;

/* One document (a JSONL line, a text file) or a byte-level chunk, in Batch.buf. */
typedef struct {
    size_t off, len;
    int input; /* index into PrepArgs.inputs */
    long line; /* JSONL: the line's number, from 1; else 0 */
} Unit;

enum { BATCH_FREE, BATCH_READY, BATCH_BUSY, BATCH_DONE };

/* A batch of whole documents: read by the main thread (FREE -> READY), encoded by a
 * worker (BUSY -> DONE), written by the main thread (-> FREE). */
typedef struct {
    int state; /* the pipe's mutex guards it; whoever's state it is owns the rest */
    long seq;  /* its number in input order */
    char *buf; /* [len] the input bytes of the units */
    size_t len, cap;
    Unit *unit;  /* [nunit] */
    size_t *end; /* [nunit] encoded: unit k's ids are ids[end[k-1] .. end[k]) */
    size_t nunit, unit_cap;
    size_t in_bytes; /* input bytes read for it (JSON syntax and blank lines included) */
    TokIds ids;
    size_t text_bytes; /* bytes of document text encoded */
    int rc;            /* an encoding error: PP_EUSAGE with err ("FILE:LINE: ...") */
    char err[PP_ERR_MAX];
} Batch;

/* The workers and the batches they share with the main thread. */
typedef struct {
    const PrepArgs *a;
    const Tokenizer *tok; /* NULL: byte-level */
    int32_t doc_id;       /* the document token, -1: none */
    int32_t vocab;
    Batch *slot; /* [nslot] batch seq is slot[seq % nslot] */
    int nslot;
    pthread_mutex_t mu;
    pthread_cond_t work, done; /* a batch became READY; a batch became DONE */
    long take;                 /* the next batch a worker takes */
    long written;              /* batches written */
    int quit;
    size_t inflight; /* main thread's: input bytes read and not yet written */
} PrepPipe;

/* The input, read in order by the main thread. */
typedef struct {
    const PrepArgs *a;
    long long *size; /* [ninputs] bytes, -1: unknown (standard input) */
    long long total; /* their sum, -1 if one is unknown */
    PrepStop *stop;  /* reading gives up when it is set */
    int cur;         /* the input being read; ninputs: all read */
    int fd;          /* cur's descriptor (0 for standard input), -1 before it is opened */
    long line;       /* JSONL: lines of cur read */
    long long got;   /* bytes of cur read */
    char *carry;     /* JSONL: the start of a line the last batch cut */
    size_t ncarry, carry_cap;
    int partial; /* a batch is half read (PREP_IDLE): reader_batch goes on with it */
    size_t scan; /* partial JSONL: its bytes looked through for lines */
    size_t off;  /* partial text: where its last document starts */
} Reader;

/* One split's output files. */
typedef struct {
    const char *split;      /* "train" | "val" */
    char name[PP_PATH_MAX]; /* the file (one per split), or the prefix (shards) */
    int sharded;
    size_t cap; /* tokens per file */
    int width;  /* bytes per token: 2 or 4 */
    PPFile pf;  /* the file being written, under its name + ".part" */
    int open;
    PrepStop *stop;     /* writing gives up when it is set */
    size_t ntok;        /* tokens in it */
    int nfiles;         /* files finished (under their .part names) */
    int committed;      /* of them, renamed to their names */
    size_t total;       /* tokens */
    long docs;          /* documents begun in this split */
    unsigned char *buf; /* [PREP_WRITE_BYTES] staged for pf.fd */
    size_t blen;
} PrepSplit;

typedef struct {
    PrepSplit s[2]; /* train, val */
    int byte_level;
    int one_doc; /* a tokenizer and one --text file: val is cut from the document's end */
    double val_fraction;
    size_t byte_train; /* byte-level: the tokens of the stream that are train's */
    size_t stream;     /* tokens written, both splits */
    long long text_bytes;
    long docs;
} PrepOut;

typedef struct {
    double t0, next;
    long long total;   /* input bytes, -1: unknown */
    long long in_done; /* input bytes written */
    int tty, shown;
} Progress;

/* prepare_io.c */
const char *prep_input_name(const PrepArgs *a, int k);
/* Find every input's size (and that it can be opened): PP_OK or PP_EUSAGE. The reader
 * gives up when *stop is set. */
int reader_open(Reader *r, const PrepArgs *a, PrepStop *stop, char *err, size_t errlen);
void reader_close(Reader *r);
/* The input bytes the next batch will hold (about): for the in-flight bound. */
size_t reader_next_bytes(const Reader *r);
/* Read the next batch into b (b->nunit == 0: the input is through). PP_OK, an error, -SIG
 * when *stop is SIG, or PREP_IDLE when the input has had nothing for PREP_WAIT_MS: b is
 * half read, and the next call (with the same b) goes on with it. */
int reader_batch(Reader *r, Batch *b, char *err, size_t errlen);
/* Shrink a written batch's buffers that one large document grew; batch_free frees them. */
void batch_trim(Batch *b);
void batch_free(Batch *b);

/* The outputs of a; writing gives up when *stop is set. */
int prep_out_init(PrepOut *o, const PrepArgs *a, int width, PrepStop *stop, char *err,
                  size_t errlen);
/* Append the documents of encoded batch b to their splits; PP_OK, an error (b's own), or
 * -SIG when *stop is SIG (looked at every PREP_WRITE_BYTES written). */
int prep_out_batch(PrepOut *o, const Batch *b, char *err, size_t errlen);
/* Finish the open files; check that the corpus had text and each split it asks for has
 * tokens. PP_OK or an error. */
int prep_out_finish(PrepOut *o, int tokenizer, char *err, size_t errlen);
/* Rename every finished .part file to its name. PP_OK or PP_ERUNTIME. */
int prep_out_commit(PrepOut *o, char *err, size_t errlen);
/* Remove what was written: the open temporary files and the .part files. */
void prep_out_abort(PrepOut *o);
void prep_out_free(PrepOut *o);
/* The lines on stdout: each split's files, then the throughput. */
void prep_out_report(const PrepOut *o, const PrepArgs *a, const char *doc, int32_t vocab,
                     const Progress *g);
/* The progress line on stderr, at most every 0.5 s on a terminal and 10 s otherwise
 * (last: the final one on a terminal, then a newline). */
void progress_show(Progress *g, const PrepOut *o, int last);

#endif
