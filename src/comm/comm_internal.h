/* comm_internal.h — for transports only (callers include comm.h): the request record and
 * its queues, and the helpers that make every transport fail with the same words and
 * add floats in the same order. Defined in comm.c. */
#ifndef PP_COMM_INTERNAL_H
#define PP_COMM_INTERNAL_H

#include "comm.h"

enum { REQ_SEND, REQ_RECV };

typedef struct Early Early;

struct CommReq {
    int type, peer;         /* peer: its rank in the job, which messages name */
    CommTag tag;
    char *buf;
    size_t bytes;
    double posted;          /* pp_now() at isend/irecv: silence is measured from here */
    int done, status;
    double done_at;         /* pp_now() when it completed (comm_req_ok, comm_req_fail) */
    char err[PP_ERR_MAX];
    const Comm *owner;      /* names the tag's kind; NULL once the Comm is destroyed */
    uint64_t gid;           /* socket: the group of its message */
    Early *early;           /* socket receive: the early message it copies from */
    char *owned;            /* socket send: its payload's copy, once its Comm is gone */
    CommReq *next;          /* in its peer's send or receive queue */
    CommReq *prev_live, *next_live; /* every request of its Comm not yet freed */
};

/* A message that arrived (or started arriving) before its receive was posted. */
struct Early {
    CommTag tag;
    size_t bytes;
    char *buf;
    int complete;
    int discard;  /* socket: arriving for a destroyed Comm, freed once complete */
    CommReq *req; /* socket: the receive that claimed it while it was still arriving */
    Early *next;
};

typedef struct {
    CommReq *head, *tail;
} ReqQueue;

typedef struct {
    Early *head, *tail;
} EarlyList;

/* c->err <- the message; returns PP_ERUNTIME. */
int comm_fail(Comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Complete r with an error (the first reason stands) or with success. */
void comm_req_fail(CommReq *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void comm_req_ok(CommReq *r);

/* A new request of Comm c, linked into *live. */
CommReq *comm_req_new(Comm *c, CommReq **live, int type, int peer, const CommTag *tag,
                      void *buf, size_t bytes);
/* Unlink r from *live and free it; returns its status (its message copied to c->err). */
int comm_req_release(Comm *c, CommReq **live, CommReq *r);

/* [Note: intrusive FIFO] One queue for every element type T with a `next` member, whose
 * queue type Q holds T *head, *tail: FIFO_FNS defines prefix_push (at the tail),
 * prefix_pop (the head, or NULL) and prefix_remove (e, which must be in q). */
#define FIFO_FNS(prefix, Q, T)                                                                     \
    static inline void prefix##_push(Q *q, T *e) {                                                 \
        e->next = NULL;                                                                            \
        if (q->tail) q->tail->next = e;                                                            \
        else q->head = e;                                                                          \
        q->tail = e;                                                                               \
    }                                                                                              \
    static inline T *prefix##_pop(Q *q) {                                                          \
        T *e = q->head;                                                                            \
        if (e && !(q->head = e->next)) q->tail = NULL;                                             \
        return e;                                                                                  \
    }                                                                                              \
    static inline void prefix##_remove(Q *q, T *e) {                                               \
        T **pp = &q->head, *last = NULL;                                                           \
        while (*pp != e) {                                                                         \
            last = *pp;                                                                            \
            pp = &(*pp)->next;                                                                     \
        }                                                                                          \
        *pp = e->next;                                                                             \
        if (q->tail == e) q->tail = last;                                                          \
    }

FIFO_FNS(comm_queue, ReqQueue, CommReq) /* a peer's sends, a lane's posted receives */
FIFO_FNS(comm_early, EarlyList, Early)  /* messages that arrived before their receive */

/* A message of n bytes with tag t; its buffer is allocated, not filled. comm_early_new
 * dies when memory runs out; comm_early_try_new returns NULL instead. */
Early *comm_early_new(const CommTag *t, size_t n);
Early *comm_early_try_new(const CommTag *t, size_t n);
void comm_early_free(Early *e);

/* Check a message (tag t, n bytes) from r->peer against receive r posted by rank `me`
 * (ranks in the job); on a mismatch fail r naming both sides and return 0. */
int comm_recv_matches(const Comm *c, int me, CommReq *r, const CommTag *t, size_t n);

/* acc[0..n) += x[0..n): one step of a rank-order sum. */
void comm_add_f32(float *acc, const float *x, size_t n);
/* Every NaN in v[0..n) becomes the canonical quiet NaN 0x7fc00000. */
void comm_canon_nan_f32(float *v, size_t n);

/* split's plan: from every rank's color[world] and key[world], the ranks of c that
 * join rank me's group, ordered by (key, rank), into members[]; returns their count
 * (0 when color[me] < 0) and this rank's index among them in *index. */
int comm_split_plan(int world, const int *color, const int *key, int me, int *members,
                    int *index);

/* " in the group of ranks {0, 3}" for a group of the job's ranks global[n] (at most 8
 * listed, then "..."): what a group's collective errors add. */
void comm_group_name(const int *global, int n, char *buf, size_t len);

#endif
