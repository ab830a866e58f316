/* decode.h — decoding one sequence with a KV cache: the layers of a model that holds every
 * stage run over the new positions only (the prompt, then one token a step), each layer's
 * keys and values of the earlier positions read from its cache, through the Arch's decode
 * functions and the backend's ops; the logits of the last positions out. */
#ifndef PP_DECODE_H
#define PP_DECODE_H

#include <stddef.h>

#include "model.h"

/* [Note: decoding] A Decoder borrows a Model's parameters (all L layers, the embedding,
 * the final norm and the head: a 1-rank model of every stage, as `pptrain sample`,
 * `pptrain export` and a one-process run build) and owns what decoding adds, all from
 * be->alloc at decode_init ([Note: device memory]):
 *  - the KV cache: each layer's keys and values [NKV, cap, HS] fp32 ([Note: KV cache] in
 *    backend.h), 2 L NKV cap HS floats, cap the longest sequence it decodes (prompt and
 *    new tokens; at most model.max_seq_len);
 *  - one layer's activations for `rows` positions (the Arch's acts set, attention saving
 *    nothing), reused by every layer, the residual stream x [rows,C] between layers, the
 *    token ids, and the head's set and the logits [lrows,Vp] for the last lrows positions
 *    of a run (1 to sample the next token).
 * decode_run feeds n positions: embed_decode at pos.., each layer's layer_decode (its
 * calls are layer_forward's at B 1, T n, but attention appends the new keys and values
 * to the cache and attends over the cached positions), the final norm and the head on
 * the last nlogits rows. A prompt runs in pieces of at most `rows` positions, then each
 * new token is one decode_run of n 1: its cost is one position's, not the prefix's. A
 * piece of n positions computes what the training forward computes for those rows of
 * the sequence (test_sample.c: the logits of a sequence decoded one position at a time,
 * in pieces and all at once, against each other and the training forward's losses). */
typedef struct {
    const Model *m;
    int cap;                   /* positions the caches hold */
    int rows;                  /* most positions one decode_run takes */
    int lrows;                 /* most positions a run gives the logits of */
    int pos;                   /* positions cached so far */
    ArchKv *kv;                /* [L] each layer's cache */
    void *acts[ARCH_MAX_BUFS]; /* one layer's activations for rows positions */
    void *head[ARCH_MAX_BUFS]; /* the head's set for lrows positions */
    void *x;                   /* [rows,C] the residual stream (residual) */
    int *tokens;               /* [rows] the ids of a decode_run (device) */
    float *logits;             /* [lrows,Vp] (device) */
    size_t cache_bytes, bytes; /* the KV cache's device bytes, and all decode_init took */
} Decoder;

/* Bytes of the KV cache of d for cap positions. */
size_t decode_cache_bytes(const ModelDims *d, int cap);

/* Allocate a decoder of m for sequences of up to cap positions, fed at most rows at a
 * time, giving the logits of at most lrows of them (1 <= lrows <= rows <= cap <= maxT).
 * Returns PP_OK, or PP_EUSAGE when m does not hold every
 * stage, its backend has no decoding ops (kv_append, attention_decode), or the sizes are
 * out of range, naming what. m must outlive it; its parameters may change between runs
 * (a training run samples its current weights). */
int decode_init(Decoder *dc, const Model *m, int cap, int rows, int lrows, char *err,
                size_t errlen);
void decode_free(Decoder *dc);

/* Start a new sequence: nothing cached. */
void decode_reset(Decoder *dc);

/* Feed tokens[n] (host ids below V, unchecked; n <= rows, pos + n <= cap) at positions
 * pos..pos+n-1, caching their keys and values; the logits of the last nlogits of them
 * (1 <= nlogits <= min(n, lrows)) into dc->logits [nlogits,Vp] (device: read them with
 * to_host and a wait, which also releases tokens). */
void decode_run(Decoder *dc, const int *tokens, int n, int nlogits);

#endif
