/* sched_show.h — a simulated schedule for people and tools: text timeline, summary,
 * JSON and SVG. */
#ifndef PP_SCHED_SHOW_H
#define PP_SCHED_SHOW_H

#include <stdio.h>

#include "sched.h"
#include "sched_sim.h"

/* Text timeline in the style of the classic pipeline diagrams: one row per rank, one
 * column per time unit (the shortest compute cost, or the fraction of it on which all
 * actions start and end; coarser beyond 1000 columns), each cell naming the compute
 * action running at the column's middle ("F3"/"B3"; "5F3" with the stage when
 * v > 1) or "." when the rank is idle. Wide timelines are wrapped in blocks of
 * columns. res must come from a completed sched_sim_run of s. */
void sched_show_timeline(const Schedule *s, const SchedSimResult *res, FILE *f);

/* Summary: makespan, simulated bubble fraction next to the closed form, per-rank
 * busy/idle/peak in-flight, per-stage placement and peak in-flight. stage_layers
 * ([S] strings such as "layers 0-5", or NULL) adds what each stage holds once the
 * partition is known. */
void sched_show_summary(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c,
                        const char *const *stage_layers, FILE *f);

/* One JSON object: schedule, ranks, virtual_stages, stages, microbatches, costs,
 * makespan, bubble_fraction, bubble_fraction_closed_form (null if none), per_rank
 * [{rank, actions (lowered, text form), busy, idle, peak_inflight}], per_stage
 * [{stage, rank, chunk, peak_inflight[, layers]}]. */
void sched_show_json(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c,
                     const char *const *stage_layers, FILE *f);

/* SVG timeline: one lane per rank, one colour per microbatch, forwards light and
 * backwards dark, idle time hatched, a time axis and a legend. */
void sched_show_svg(const Schedule *s, const SchedSimResult *res, const SchedSimCosts *c, FILE *f);

#endif
