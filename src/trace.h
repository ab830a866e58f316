/* trace.h — the execution trace: Chrome trace events (Perfetto / chrome://tracing), one
 * track per rank, one slice per action, on the wall clock shared by all ranks. */
#ifndef PP_TRACE_H
#define PP_TRACE_H

#include <stddef.h>

typedef struct Trace Trace;

/* Start recording for `rank`; events are buffered in memory and appended to
 * `dir`/trace.rank<R>.part by trace_flush. Returns NULL (and disables tracing) when
 * dir is NULL. */
Trace *trace_create(const char *dir, int rank);
/* The clock of trace events: wall-clock microseconds (comparable across hosts that
 * keep NTP time). */
double trace_now_us(void);
/* Record a slice [t0, t1) µs named `name` with stage/microbatch args (-1 = none). */
void trace_add(Trace *t, const char *name, const char *cat, double t0, double t1, int stage,
               int mb, int step);
/* Append buffered events to this rank's part file. */
void trace_flush(Trace *t);
/* Rank 0, after every rank flushed: merge the part files into `dir`/trace.json (written
 * atomically: PPFile in common.h) and remove them. Returns 0 or -1 (message on stderr). */
int trace_merge(const char *dir, int world);
void trace_destroy(Trace *t);

#endif
