/* comm_ring.h — ring reduce-scatter, all-gather and all-reduce of floats over a Comm's
 * point-to-point messages, as a state machine the caller advances between computations
 * (comm_ring_test) or drives to the end (comm_ring_wait): the data-parallel gradient
 * all-reduce that overlaps the pipeline ([Note: data parallel] in runtime_dp.c). */
#ifndef PP_COMM_RING_H
#define PP_COMM_RING_H

#include "comm.h"

/* [Note: ring all-reduce] The W ranks of a Comm form the ring 0 -> 1 -> ... -> W-1 -> 0.
 * A buffer of n floats is cut into W blocks, block q = [n*q/W, n*(q+1)/W) (sizes differ
 * by at most one element; any n >= 0 works, blocks may be empty).
 * Reduce-scatter: W-1 steps; at step k rank r sends block (r-k-1) mod W to r+1 and adds
 * block (r-k-2) mod W received from r-1 into its own, so rank r ends holding the sum of
 * block r (NCCL's reduce-scatter assignment), added in the fixed order
 *     ((v[r+1] + v[r+2]) + ...) + v[r]      (ranks mod W),
 * the same bits whatever the timing; NaN sums are made the canonical quiet NaN.
 * All-gather: W-1 steps; at step k rank r sends block (r-k) mod W to r+1 and stores
 * block (r-k-1) mod W from r-1: every rank ends with every rank's block, bits unchanged.
 * All-reduce = reduce-scatter then all-gather: each rank sends and receives
 * 2 (W-1)/W of the buffer, whatever W (the bus bandwidth figure of nccl-tests), and every
 * rank ends with the same bits. A step's messages are posted together (receive first),
 * and the next step starts only when both completed. */

typedef enum { RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALL_GATHER } RingOp;

typedef struct {
    Comm *c;
    RingOp op;
    float *buf;      /* [n], in place */
    size_t n;
    const size_t *bounds; /* [W+1] block q = [bounds[q], bounds[q+1]) when not NULL (0 ..
                        n, non-decreasing), else the even blocks */
    float *tmp;      /* [the longest block] the caller's scratch for a received block */
    CommTag tag;     /* the caller's; .mb is set to the step number of each message */
    int phase;       /* 0 reduce-scatter, 1 all-gather, 2 done */
    int k;           /* step within the phase */
    int posted;      /* this step's messages are posted */
    int rb;          /* the block this step receives */
    CommReq *sreq, *rreq;
} CommRing;

/* Offset of block q of n floats over W ranks; *len its length. */
size_t comm_ring_block(size_t n, int W, int q, size_t *len);
/* The longest block: ceil(n / W) floats. */
size_t comm_ring_max_block(size_t n, int W);

/* Start op on buf[0..n) of every rank of c (all ranks start the same op with the same n,
 * bounds and tag, in the same order as their other rings on c). bounds NULL: the even
 * blocks above; else block q = [bounds[q], bounds[q+1]) (the caller's, kept until done:
 * ZeRO-1 cuts at tensor boundaries; an uneven cut moves more per step). The ring's messages are c's
 * point-to-point messages with the caller's tag (mb = step): c must carry no other
 * messages between ring neighbours meanwhile, so give it a group of its own. buf and tmp
 * belong to the ring until it is done. Returns PP_OK or PP_ERUNTIME (comm_error(c)). */
int comm_ring_start(CommRing *r, Comm *c, RingOp op, float *buf, size_t n,
                    const size_t *bounds, float *tmp, const CommTag *tag);
/* Advance without blocking: *done = 1 once the op finished on this rank. Returns PP_OK,
 * or PP_ERUNTIME with comm_error(c) naming the peer that failed (then the ring is over). */
int comm_ring_test(CommRing *r, int *done);
/* Advance until done (waits fail after timeout_s as comm_wait's do). */
int comm_ring_wait(CommRing *r);

#endif
