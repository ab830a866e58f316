/* plan_cmd.h — `pptrain schedule`: plan a pipeline without training (lists,
 * timeline, bubble, peak activations, JSON, SVG). */
#ifndef PP_PLAN_CMD_H
#define PP_PLAN_CMD_H

#include <stdio.h>

#include "config.h"

/* Run the schedule subcommand. cfg is the finalized config (pipeline.stages,
 * virtual_stages, microbatches, schedule, schedule_file are used); argv[0] is
 * "schedule" and the rest are the subcommand's options:
 *   --text            per-rank lowered lists, text timeline and summary (default)
 *   --json            only one JSON object on stdout (see sched_show_json)
 *   --svg FILE        also draw the timeline as SVG into FILE
 *   --costs F,B[,X]   per-action forward, backward and transfer time (1,2,0); or named
 *                     F=f,B=b,W=w[,X=x]: B the input-gradient half, W the weight half
 *   --measure | --costs-from TRACE | --layer-costs F,B[,EF,EB,HF,HB]
 *                     milliseconds per microbatch (plan.h): measured on runtime.device,
 *                     a run's trace, or given; measured and given ones balance the
 *                     partition, and all of them time the simulation without --costs
 *   --link L          each transfer's time: latency + bytes / bandwidth (plan_parse_link)
 *   --act-bytes 4|2   bytes per transferred activation (default: the residual stream's on the
 *                     config's device, backend_layout); --grad-bytes 4|2 its gradient's (4)
 *   --plan [--plan-ranks LIST] [--plan-microbatches LIST] [--plan-schedules LIST]
 *                     the sweep instead of the one schedule (plan_sweep)
 * --config/--set (and their values) are skipped: main has applied them.
 * Returns an exit code: 0 done; 1 simulation or I/O failure; 2 bad usage (with a
 * usage message on stderr) or an impossible schedule/config combination. */
int plan_cmd_main(const Config *cfg, int argc, char **argv);

/* The subcommand's options, one per line with what each does (--help). */
void plan_cmd_usage(FILE *f);

#endif
