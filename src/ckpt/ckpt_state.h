/* ckpt_state.h — saving and resuming a run: a rank's parameters and optimizer state
 * under global tensor names through the checkpoint store (ckpt.h), written in the
 * background and committed by rank 0 once every rank's shard is on disk; loading into
 * any split; export to llm.c's format or a Hugging Face directory. */
#ifndef PP_CKPT_STATE_H
#define PP_CKPT_STATE_H

#include "ckpt.h"
#include "runtime/runtime.h"

typedef struct {
    CkptWriter *writer;
    char root[PP_PATH_MAX + 16]; /* output.dir/checkpoints */
    long pending;            /* step submitted but not yet committed, -1 if none */
    char *config_text;       /* the printed config, stored in the manifest */
} CkptState;

/* Prepare saving for this rank (starts the writer thread). */
void ckpt_state_init(CkptState *c, const Runtime *rt, const char *config_text);
/* Finish a pending save (collectively) is the caller's job; this only frees. */
void ckpt_state_free(CkptState *c);

/* Collective: save the state after `step` optimizer steps. Rank 0 prepares the
 * staging directory; every rank hands its shard to the background writer (the step
 * stalls only for the copy) and returns. A pending earlier save is finished first.
 * With `wait`, the save is also finished (written and committed) before returning.
 * Returns PP_OK or PP_ERUNTIME with a message. */
int ckpt_state_save(CkptState *c, Runtime *rt, long step, int wait, char *err,
                    size_t errlen);

/* 1 when this rank has no save in progress (its part of a pending save is written). */
int ckpt_state_idle(const CkptState *c);

/* Collective: wait for this rank's shard, agree that every rank's shard is written,
 * then rank 0 commits (manifest, rename, `latest`, pruning to output.checkpoint_keep).
 * No-op without a pending save. */
int ckpt_state_finish(CkptState *c, Runtime *rt, char *err, size_t errlen);

/* Collective: load the checkpoint at `path` (a checkpoint root, its `latest`, or a
 * step directory) into this rank's tensors and optimizer state, whatever split wrote
 * it: tensors are found by global name. *step is the number of steps it had done.
 * PP_OK only if every rank loaded its part; errors (PP_ERUNTIME) name the file and the
 * tensor on the rank that failed. Nothing is loaded partially into a run that then
 * continues: the caller exits on error. */
int ckpt_state_load(Runtime *rt, const char *path, long *step, char *err, size_t errlen);

/* Collective: a fresh run (no --resume) must not take over the checkpoints of another
 * run in the same output.dir (its commits would replace step directories of the same
 * step, move `latest` and prune the rest). Returns PP_OK, or PP_EUSAGE on every rank
 * when any rank sees ROOT/latest or a committed ROOT/step_NNNNNNN (with or without
 * `latest`: a copy may have dropped the symlink), or cannot read ROOT; PP_ERUNTIME when
 * a rank is lost meanwhile. */
int ckpt_state_refuse_existing(CkptState *c, Runtime *rt, char *err, size_t errlen);

/* The parameters of the checkpoint at `path` (a checkpoint root, its `latest`, or a step
 * directory; ckpt_resolve) into *m, a model of every stage on backend be built from the
 * manifest's dimensions (model_init at B = T = 1: no slots), after the checks `pptrain
 * export` makes (the manifest's model against the shards, every chunk's CRC); *step: the
 * steps it had done. The caller model_free's m when PP_OK. Returns PP_OK, PP_EUSAGE when
 * path names no checkpoint, or PP_ERUNTIME naming the file and tensor (nothing left
 * allocated). `pptrain sample` reads a checkpoint so. eos (may be NULL): [PP_IDS_MAX], the
 * model.eos_token_id of the run that wrote it ("" when none or not recorded). */
int ckpt_state_load_model(const char *path, const Backend *be, Model *m, long *step, char *eos,
                          char *err, size_t errlen);

/* `pptrain export --checkpoint DIR --out model.bin [--format llmc]`: llm.c's fp32 GPT-2
 * file; `--format hf --out DIR2 [--dtype fp32|bf16] [--max-shard-size SIZE]`: a Hugging
 * Face model directory (model_save_hf). Exit 2 for a bad flag (named), before anything
 * is read. */
int ckpt_state_export_main(int argc, char **argv);

#endif
