/* sched.h — pipeline schedules as data: the action IR, one generator per schedule,
 * the lowering pass that adds communication, and the validator. */
#ifndef PP_SCHED_H
#define PP_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"

/* [Note: stages and placement]
 * A model of S = P*v stages runs on P ranks, v stages (chunks) per rank.
 * Activations flow from stage s to s+1, gradients from s+1 to s. Which rank holds
 * which stage is data: the schedule's table stage_rank[S], made by its kind's
 * placement generator. Looped placement (sched_place_looped, Megatron's and torch's
 * interleaving) puts stage s on rank s mod P as its chunk s / P; a V placement
 * (ZB-V: rank r holds stages r and 2P-1-r) is another generator of the same table.
 * A rank's chunks are its stages in increasing order (stage_chunk). Two adjacent
 * stages on the same rank (P = 1, the wrap of looped placement, the tip of a V) hand
 * tensors over locally: no SEND/RECV is ever emitted between them. Schedule files
 * use looped placement. */

/* [Note: action semantics]
 * An action names the stage ON THE RANK THAT EXECUTES IT (torch's convention):
 *   F(s,m)       forward of stage s on microbatch m; needs its input (microbatch m's
 *                tokens when s = 0, else stage s-1's output of m, received or local).
 *   B(s,m)       full backward of stage s on m (input grad and weight grad); needs
 *                F(s,m) done and the gradient of the stage output (from the loss when
 *                s = S-1, else from stage s+1, received or local).
 *   SEND_F(s,m)  send stage s's output of m to stage s+1 (another rank).
 *   RECV_F(s,m)  receive stage s's input of m from stage s-1 (another rank).
 *   SEND_B(s,m)  send the gradient of stage s's input of m to stage s-1.
 *   RECV_B(s,m)  receive the gradient of stage s's output of m from stage s+1.
 *   I(s,m)       the input-gradient half of B ([Note: zero-bubble schedules] in
 *                sched_gen.c): the gradient of stage s's input only, with B's
 *                dependencies; the previous stage waits for it. Text form "0I3" (torch
 *                and the paper call it B; ours is the full backward).
 *   W(s,m)       the weight-gradient half: the weight and bias gradients of stage s on
 *                m; needs I(s,m), and SEND_B(s,m) when stage s-1 is on another rank
 *                (W gives the activation slot back, and that send reads its gradient).
 * A (stage, microbatch) has either one B or one I and one W: whichever the
 * schedule's lists hold (Schedule.split), and a schedule may mix the two. Where the
 * rules below say "the backward of (s,m)", they mean B(s,m) or, when split, I(s,m).
 * So SEND_F(s,m) on rank(s) pairs with RECV_F(s+1,m) on rank(s+1), and SEND_B(s,m)
 * on rank(s) pairs with RECV_B(s-1,m) on rank(s-1). sched_action_deps is this note
 * as a function, and the only place the rules are written: the lowering, the
 * validator, the simulator and the pool sizes all ask it.
 * Runtime contract for a lowered schedule that passed sched_validate:
 *  - a SEND must not block the sender's compute (post it, complete it later);
 *  - a RECV may block until its data arrives, or post a receive that the compute
 *    consuming it waits for: both are deadlock-free, because the validator proves a
 *    global order exists in which every RECV comes after its SEND;
 *  - between any two ranks, messages are received in the order they were sent
 *    ([Note: FIFO send order]), so a transport may match them by arrival order. */

/* [Note: FIFO send order]
 * The lowering walks all ranks in lock step; when a rank emits a compute action
 * whose output goes to another rank, it appends the SEND to its own list and the
 * matching RECV to the receiver's list at that same moment. Receives of every rank
 * pair therefore occur in the order of the sends by construction, and a compute
 * action is emitted only once its input has been received. */

typedef enum {
    ACT_F = 0,
    ACT_B,
    ACT_SEND_F,
    ACT_RECV_F,
    ACT_SEND_B,
    ACT_RECV_B,
    ACT_I, /* backward to the stage input only (zero-bubble) */
    ACT_W, /* backward to the weights only (zero-bubble) */
    ACT_NTYPES
} ActType;

/* 1 for the compute types (F, B, I, W), 0 for the transfers: the one definition. */
static inline int sched_is_compute(int type) {
    return type == ACT_F || type == ACT_B || type == ACT_I || type == ACT_W;
}

typedef struct {
    uint8_t type;  /* ActType */
    int16_t stage; /* global stage index s, 0 <= s < S */
    int32_t mb;    /* microbatch m, 0 <= m < M */
} Action;

#define SCHED_NAME_MAX 32
#define SCHED_ACTION_TEXT_MAX 32 /* enough for any formatted action */
#define SCHED_MAX_STAGES 32767   /* stage is an int16_t */

/* One ordered action list per rank, and where each stage lives. Owned by the struct;
 * sched_free releases it. */
typedef struct {
    int P, v, M, S;             /* ranks, chunks per rank, microbatches, S = P*v stages */
    char name[SCHED_NAME_MAX];  /* schedule kind, or "file" for a loaded one */
    int lowered;                /* 1 once SEND/RECV actions are in the lists */
    int forward_only;           /* 1: F (and its transfers) only, no backward */
    int *stage_rank;            /* [S] rank holding each stage ([Note: stages and placement]) */
    int *stage_chunk;           /* [S] index of the stage among its rank's stages, in
                                   increasing stage order */
    uint8_t *split;             /* [S*M] 1 when (stage, mb)'s backward is split into I
                                   and W: set by sched_append for any I or W */
    uint8_t *keep;              /* [S*M] 1 when F(stage, mb) keeps every activation
                                   ([Note: schedule-aware recompute]): set by the
                                   lowering, and for a loaded lowered schedule */
    int *len;                   /* [P] actions in each rank's list */
    int *cap;                   /* [P] allocated entries */
    Action **acts;              /* [P][len[r]] */
} Schedule;

/* ---- action IR ---------------------------------------------------------------- */

/* Name of an action type as it appears in the text form ("F", "SEND_F", ...). */
const char *sched_type_name(int type);

/* Write the text form of a, e.g. "1F0", "0SEND_F1", "3RECV_B2", into buf (n bytes,
 * SCHED_ACTION_TEXT_MAX always suffices). Returns the length written. */
int sched_action_format(Action a, char *buf, size_t n);

/* Parse one whole action in text form: <stage><TYPE><microbatch>, decimal numbers
 * without sign or leading zeros, so that format(parse(t)) == t for every accepted t
 * and parse(format(a)) == a for every action. Returns PP_OK, or PP_EUSAGE with *a
 * untouched. */
int sched_action_parse(const char *text, Action *a);

/* ---- placement ---------------------------------------------------------------- */

/* Rank that holds stage `stage` (s->stage_rank), or -1 when 0 <= stage < S fails. */
int sched_stage_rank(const Schedule *s, int stage);
/* Index of stage `stage` among its rank's stages (s->stage_chunk), or -1 when out of
 * range. */
int sched_stage_chunk(const Schedule *s, int stage);
/* The inverse: the stage that is chunk `chunk` of rank `rank`, or -1 if none. */
int sched_rank_stage(const Schedule *s, int rank, int chunk);

/* Looped placement, a placement generator: stage s on rank s mod P, for the P*v
 * entries of stage_rank. */
void sched_place_looped(int P, int v, int *stage_rank);

/* V placement, ZB-V's placement generator: stage s on rank s mod P when s / P is even,
 * P-1 - s mod P when odd; for v = 2 rank r holds stages r and 2P-1-r (sched_gen.c). */
void sched_place_v(int P, int v, int *stage_rank);

/* Replace s's placement by stage_rank ([S], copied) and derive stage_chunk. Every
 * rank must hold exactly v stages. Call it before any action is appended. Returns
 * PP_OK, or PP_EUSAGE with a message and s unchanged. */
int sched_set_placement(Schedule *s, const int *stage_rank, char *err, size_t errlen);

/* ---- schedule kinds ----------------------------------------------------------- */

/* One row of the kind table: everything about a schedule kind outside its
 * generator's body. The rows live in sched.c; the only other list of the kinds is
 * SCHED_KIND_CHOICES, which a test ties to them. */
typedef struct SchedKindInfo {
    const char *name;          /* pipeline.schedule value, e.g. "1f1b" */
    int v_min, v_max;          /* allowed pipeline.virtual_stages, inclusive */
    const char *instead;       /* the kind to suggest when v is outside that range */
    void (*place)(int P, int v, int *stage_rank);  /* placement generator */
    void (*generate)(Schedule *s); /* s initialised, placed and empty: compute lists */
    /* published bubble fraction, its formula in *formula (may be NULL); -1 if none */
    double (*bubble)(int P, int v, int M, const char **formula);
} SchedKindInfo;

/* The kinds' names joined by '|', in table order: config's pipeline.schedule choices
 * (a static initializer cannot call sched_kinds()); test_sched checks it against the
 * table. */
#define SCHED_KIND_CHOICES "gpipe|1f1b|interleaved-1f1b|looped-bfs|zb-h1|zbv"

/* Names of the kinds in table order, NULL-terminated. */
const char *const *sched_kinds(void);

/* The row of kind `name`, or NULL if there is none. */
const SchedKindInfo *sched_kind_find(const char *name);

/* Whether kind `kind` can run P ranks, v chunks per rank, M microbatches. Returns
 * PP_OK, or PP_EUSAGE with the message config validation prints (unknown kind, or
 * virtual_stages outside the row's range, naming the key to change and the kind to
 * use instead). P and M are for rows whose range depends on them (none yet). */
int sched_kind_check(const char *kind, int P, int v, int M, char *err, size_t errlen);

/* ---- what an action means ----------------------------------------------------- */

/* [Note: activation slots]
 * The runtime keeps one activation slot per microbatch a local stage holds. The
 * first F of (stage, m) takes the slot of (stage, m); it is given back when nothing
 * will read it again (sched_action_frees):
 *  - training: B(s,m) frees stage s's slot when s = 0 or stage s-1 is on the same
 *    rank (B pushes the input gradient into stage s-1's slot, which then owns it);
 *    otherwise SEND_B(s,m) frees it once the gradient is posted;
 *  - split backward: W(s,m) frees it (W reads the layer inputs the slot keeps, and
 *    runs after the SEND_B of its gradient); I frees nothing;
 *  - forward only: F(S-1,m) frees its own slot; SEND_F(s,m) frees stage s's slot;
 *    F(s+1,m) frees stage s's slot when s is on the same rank (it copied the
 *    output), so F(S-1,m) with a local S-2 frees two.
 * Replaying a rank's list by these rules gives the pool size of each stage
 * (sched_peak_inflight), the one number the runtime allocates. */

#define SCHED_MAX_DEPS 4 /* most dependencies any action has (sched_action_deps) */

/* The actions (on any rank) that must have completed before a can run
 * ([Note: action semantics]), written to deps; returns how many (0 for F(0,m)).
 * F(s,m): F(s-1,m) when stage s-1 is on the same rank, else RECV_F(s,m).
 * B(s,m) and I(s,m): F(s,m), then the backward of (s+1,m) (B or I) when local, else
 * RECV_B(s,m) (nothing for S-1). W(s,m): I(s,m), and SEND_B(s,m) when stage s-1 is
 * remote. SEND_F(s,m): F(s,m). SEND_B(s,m): the backward of (s,m). RECV_F(s,m):
 * SEND_F(s-1,m) (on the other rank). RECV_B(s,m): SEND_B(s+1,m). The stage and
 * microbatch of a must be in range; returns -1 for an unknown type. */
int sched_action_deps(const Schedule *s, Action a, Action deps[SCHED_MAX_DEPS]);

/* How many activation slots action a, executed on its stage's rank, gives back
 * ([Note: activation slots]), their stages in stages[]; each is the slot of
 * microbatch a.mb. 0 for actions that free nothing. */
int sched_action_frees(const Schedule *s, Action a, int stages[2]);

/* ---- schedules ---------------------------------------------------------------- */

/* Initialise an empty schedule (no actions) for P ranks, v chunks, M microbatches,
 * with looped placement (sched_set_placement changes it). Returns PP_EUSAGE with a
 * message if the sizes are out of range. */
int sched_init(Schedule *s, const char *name, int P, int v, int M, char *err, size_t errlen);

/* Append action a to rank r's list (grows the list; dies only on out of memory). */
void sched_append(Schedule *s, int rank, Action a);

/* Release the lists and zero the struct. Safe on a zeroed or already freed struct. */
void sched_free(Schedule *s);

/* Run generator `kind` alone: compute-only lists (F and B, or F, I and W, in each
 * rank's order), on the placement of the kind's row. On error returns PP_EUSAGE with a
 * message saying which combination is impossible and why (sched_kind_check), and leaves
 * s empty. */
int sched_generate(Schedule *s, const char *kind, int P, int v, int M, char *err,
                   size_t errlen);

/* Generate, lower and validate: the lists the runtime executes. On error returns
 * PP_EUSAGE (bad kind or combination) with a message; a schedule that fails to lower
 * or validate is a bug, reported as PP_ERUNTIME with the grid on stderr. s is left
 * empty on error. */
int sched_build(Schedule *s, const char *kind, int P, int v, int M, char *err,
                size_t errlen);

/* A lowered forward-only schedule (F and its transfers, no B) for validation passes,
 * with the P, v, M and placement of the training schedule `train` (read only): the
 * runtime runs both on the same chunks. Each rank runs its forwards in the
 * interleaved order (chunk-major groups of P microbatches), which cannot deadlock on
 * looped placement; any failure to lower is PP_ERUNTIME as in sched_build. */
int sched_build_forward_only(Schedule *s, const Schedule *train, char *err, size_t errlen);

/* Replace compute-only lists by lowered lists ([Note: FIFO send order]). Checks the
 * compute actions first (ranges, placement, each F once, B or I and W once). If no rank
 * can run its next action, returns PP_EUSAGE naming the stuck actions and prints the
 * grid with them marked to `grid` (may be NULL). s is unchanged on error. */
int sched_lower(Schedule *s, char *err, size_t errlen, FILE *grid);

/* Check a lowered schedule: every action in range and on the rank of its stage;
 * exactly one F and either one B or one I and one W per (stage, microbatch) (no
 * backward if forward_only); each
 * action after its dependencies on its own rank (sched_action_deps), so every W after
 * its I and every backward after its F; every SEND has
 * exactly one matching RECV and vice versa; per rank pair the receives come in the
 * order of the sends; and no rank waits forever, even when a RECV blocks. Returns
 * PP_OK, or PP_EUSAGE with a message naming the rank and step and the grid printed
 * to `grid` (may be NULL) with the offending action(s) marked. */
int sched_validate(const Schedule *s, char *err, size_t errlen, FILE *grid);

/* Print the lists as a grid, one row per step (list index) and one column per rank;
 * mark[r] (or NULL) is the index on rank r to flag with '*', -1 for none. */
void sched_print_grid(const Schedule *s, const int *mark, FILE *f);

/* ---- text files (pipeline.schedule_file) -------------------------------------- */

/* Write the schedule in the file form sched_load_text reads back: a '#' header
 * comment, then one line per rank: "rank R: <action> <action> ...". */
void sched_write(const Schedule *s, FILE *f);

/* Parse a schedule from text: one line per rank (blank lines and '#' comments are
 * skipped, an optional "rank R:" prefix must match the line's rank), actions
 * separated by spaces or commas, compute-only (then lowered here) or already
 * lowered (any SEND/RECV present). The result is validated. Errors return PP_EUSAGE
 * with "origin:line: what is wrong"; validation failures also print the grid to
 * `grid` (may be NULL). s is left empty on error. */
int sched_load_text(Schedule *s, const char *text, const char *origin, int P, int v,
                    int M, char *err, size_t errlen, FILE *grid);

/* sched_load_text on the contents of `path` (grid to stderr). A file that cannot be
 * read is PP_EUSAGE with the path and the system's reason. */
int sched_load_file(Schedule *s, const char *path, int P, int v, int M, char *err,
                    size_t errlen);

/* ---- properties --------------------------------------------------------------- */

/* Most activation slots stage `stage` holds at once, replaying its rank's list with
 * sched_action_frees ([Note: activation slots]): the size of the runtime's
 * activation pool for that stage. */
int sched_peak_inflight(const Schedule *s, int stage);

/* The same over all stages of rank r together (chunk activations held at once). */
int sched_peak_inflight_rank(const Schedule *s, int rank);

/* [Note: schedule-aware recompute]
 * With pipeline.recompute, a forward keeps only part of its activations and the
 * backward recomputes the rest ([Note: recompute] in model.h). A forward whose
 * backward (B, or I) is the very next compute action of its rank gains nothing from
 * dropping them: nothing runs in between that could use the memory, so it keeps all
 * and its backward recomputes nothing. This is torch Pipe's checkpoint='except_last'
 * read off the schedule instead of fixed: 1F1B's last stage keeps every microbatch,
 * and so does any other place where a backward follows its own forward. The lowering
 * writes the marks (Schedule.keep); the runtime takes a complete slot for a marked
 * forward and knows nothing else of the rule. A training schedule only: a forward-only
 * one marks nothing. */

/* Most slots of stage `stage` held at once whose forward's keep mark is `keep` (0 or
 * 1): the two pools of a recomputing stage. */
int sched_peak_inflight_kept(const Schedule *s, int stage, int keep);
/* The same over all stages of rank r together (sched_peak_inflight_rank by mark). */
int sched_peak_inflight_rank_kept(const Schedule *s, int rank, int keep);

/* The backward actions of stage `stage` (B, I and W, each of which recomputes: one per
 * recomputed layer) whose forward is not marked keep, in *run, and those whose forward
 * is, in *skipped: a step's recomputes under the marks. */
void sched_recompute_count(const Schedule *s, int stage, int *run, int *skipped);

/* Most split backwards of stage `stage` pending at once (I(stage,m) run, W(stage,m)
 * not yet), replaying its rank's list: how many sets of what W reads besides the
 * activation slot (model.h's W state) the runtime allocates; 0 when nothing is split. */
int sched_peak_pending_w(const Schedule *s, int stage);

/* Most receive buffers stage `stage` needs at once: RECV_F(stage,m) posted, the F
 * that consumes it (the F whose dependency it is) not yet run. 0 when the stage's
 * input is local or the tokens. */
int sched_peak_recv(const Schedule *s, int stage);

/* Published bubble fraction (idle / total time, F and B uniform, free transfers)
 * of the schedule's kind for its P, v, M, and its formula as text in *formula
 * (may be NULL); returns -1 when no closed form is known (e.g. loaded files, or
 * interleaved with M not a multiple of P). */
double sched_bubble_closed_form(const Schedule *s, const char **formula);

#endif
