/* sched_gen.h — what sched.c needs from the generators (sched_gen.c) beyond sched.h. */
#ifndef PP_SCHED_GEN_H
#define PP_SCHED_GEN_H

#include "sched.h"

/* Append rank r's k-th forward of the interleaved order (chunk-major groups of P
 * microbatches, [Note: the 1F1B family]) to s: sched_build_forward_only's order. */
void sched_gen_forward(Schedule *s, int r, int k);

#endif
