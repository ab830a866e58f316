/* sample.h — text from a model: `pptrain sample` (a checkpoint, a Hugging Face directory or
 * a config's model; the prompt as text or ids; greedy or sampled decoding on a KV cache,
 * stopping at the end-of-text token), the sampling rule and its seeded generator, and the
 * samples a one-process training run prints after its checkpoints (train.sample_every). */
#ifndef PP_SAMPLE_H
#define PP_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "model/decode.h"
#include "model/model.h"
#include "tok/tokenizer.h"

/* [Note: sampling rule] How the next token is chosen from the logits z[V] of the last
 * position (the padded columns are never chosen), in transformers' order (temperature,
 * then top-k, then top-p: generate's logits processors):
 *  - temperature 0: greedy, the first id of the largest logit (torch.argmax's), what
 *    generate(do_sample=False) picks; no random number is drawn.
 *  - otherwise z / temperature; top-k k > 0 keeps the k largest (ties: the lower id
 *    first), so top-k 1 is the greedy choice; top-p p < 1 keeps, in that order, the
 *    shortest run of the largest whose probabilities (softmax of what top-k kept) add up
 *    to at least p (at least one); then one uniform u in [0, 1) picks the first kept
 *    token, largest first, at which the running sum of kept probabilities passes u times
 *    their total (without top-k and top-p: in id order, no sort). Probabilities are
 *    exp(z - max) summed in double.
 * The uniform numbers are splitmix64's (Steele, Lea and Flood 2014, as model.c's init
 * streams): state += 0x9E3779B97F4A7C15, mixed, u = (x >> 11) / 2^53, one per token: a
 * seed and the same logits give the same tokens on every run and machine. */
typedef struct {
    float temperature; /* >= 0; 0: greedy */
    int top_k;         /* >= 0; 0: no top-k */
    float top_p;       /* (0, 1]; 1: no top-p */
} SampleRule;

typedef struct {
    uint64_t state;
} SampleRng;

void sample_rng_seed(SampleRng *r, uint64_t seed);
/* The next uniform number in [0, 1). */
double sample_rng_next(SampleRng *r);

/* One candidate of sample_pick's scratch. */
typedef struct {
    float z;
    int id;
} SampleCand;

/* The token rule chooses from logits[V] (host), drawing from rng unless greedy; cand is
 * scratch of V entries. */
int sample_pick(const float *logits, int V, const SampleRule *rule, SampleRng *rng,
                SampleCand *cand);

/* Why sampler_generate stopped. */
enum { SAMPLE_STOP_MAX_NEW, SAMPLE_STOP_EOS, SAMPLE_STOP_MAX_SEQ };

#define SAMPLE_MAX_EOS 16

/* A generator on a model of every stage: its decoder ([Note: decoding] in decode.h), the
 * rule, the end-of-text ids, host buffers, and the last run's figures. */
typedef struct {
    Decoder dec;
    SampleRule rule;
    SampleRng rng;
    int eos[SAMPLE_MAX_EOS], neos; /* ids that end the text (generated, then stop) */
    float *logits;                 /* [Vp] host */
    SampleCand *cand;              /* [V] */
    int stop;                      /* SAMPLE_STOP_* of the last run */
    double prefill_s, decode_s;    /* the last run: the prompt (to the first token's logits),
                                      and the steps after it (a position and a pick each) */
    int decode_steps;
} Sampler;

/* The positions a sampler of prompts of np tokens and max_new new ones decodes: the new
 * tokens stop where the text would pass maxT tokens, and the last one is never fed back. */
int sample_cache_len(int np, int max_new, int maxT);

/* A sampler of m (every stage) for texts of up to cap positions, prompts fed rows at a time
 * (decode_init's checks; PP_EUSAGE naming what is wrong). */
int sampler_init(Sampler *s, const Model *m, int cap, int rows, char *err, size_t errlen);
void sampler_free(Sampler *s);

/* s's end-of-text ids from a model's own files ([Note: end-of-text ids] in sample_cmd.c,
 * its last steps): cfg_eos (model.eos_token_id's text) when it names any; else tok's
 * document token (<|endoftext|>, else the BOS its post-processor puts first); else none
 * (tok NULL: byte-level). Ids at or past V are left out. why[n]: where they came from.
 * Training samples and `pptrain sample --checkpoint` take their ids so, and agree. */
void sampler_set_eos(Sampler *s, const char *cfg_eos, const Tokenizer *tok, int V, char *why,
                     size_t n);

/* The continuation of prompt[np] (ids below V, 1 <= np < maxT, np + max_new - 1 <= the
 * sampler's cap, see sample_cache_len): up to max_new ids into out, ending with an
 * end-of-text id when one is chosen (generate's output includes it), or earlier where
 * the text reaches model.max_seq_len tokens; returns the count, s->stop says why. */
int sampler_generate(Sampler *s, const int *prompt, int np, int max_new, int *out);

/* `pptrain sample ...` (argv[0] "sample"): the exit code (0, 1 runtime failure, 2 bad usage
 * with a message naming the argument). */
int sample_main(int argc, char **argv);

/* [Note: samples while training] train.sample_every > 0: after a checkpoint is saved,
 * when that many steps have passed since the last sample (or the run's start), a
 * one-process run prints the continuation of train.sample_prompt by the weights it just
 * saved, decoded on its own model's parameters (no copy; nothing a step uses is
 * touched, so the losses are those of a run without samples): 64 new tokens, temperature
 * 1, seed train.seed + step, so that `pptrain sample --checkpoint DIR --seed SEED+STEP
 * --max-new-tokens 64` prints the same text from the checkpoint. A run of several ranks
 * (pipeline stages apart, or data-parallel replicas that would wait for rank 0's sample at
 * their next all-reduce) says once why it prints none, as does a run whose prompt cannot
 * be encoded (neither byte-level nor a Hugging Face init_from with a tokenizer.json). */
typedef struct SampleTrain SampleTrain;

/* NULL when train.sample_every is 0, or after saying why not (rank 0 prints). */
SampleTrain *sample_train_create(const Config *cfg, const Model *m, int world, int rank,
                                 int start);
/* After the checkpoint of `step` was saved (NULL: nothing to do). */
void sample_train_after_save(SampleTrain *t, int step);
void sample_train_free(SampleTrain *t);

#endif
