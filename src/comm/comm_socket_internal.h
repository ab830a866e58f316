/* comm_socket_internal.h — shared by the socket transport's two files only: comm_socket.c (the
 * connections, the progress thread, point-to-point, groups' lifecycle) and
 * comm_socket_coll.c (the collectives). See [Note: socket transport]. */
#ifndef PP_COMM_SOCKET_INTERNAL_H
#define PP_COMM_SOCKET_INTERNAL_H

#include <pthread.h>

#include "comm_internal.h"

#define COLL_CHUNK (1u << 18) /* floats per exchange of a float collective (1 MiB) */

#define WIRE_MAGIC 0x6d777070u /* "ppwm": a data message's header */

typedef struct {
    uint32_t magic;
    CommTag tag;
    uint32_t pad;
    uint64_t bytes; /* payload that follows */
    uint64_t gid;   /* the group it belongs to (SockComm.gid) */
} WireHdr;

#define CTRL_TEXT 512  /* the longest text a control message carries */
#define CTRL_BUF 4096  /* control messages queued for one peer */

/* One group's messages from one peer. */
typedef struct Lane {
    uint64_t gid;
    size_t max_bytes; /* the longest message accepted (Comm.max_message_bytes) */
    ReqQueue recvs;   /* posted, waiting for their message */
    EarlyList early;  /* arrived (or arriving) before their receive, unclaimed */
    struct Lane *next;
} Lane;

typedef struct {
    int fd, coll_fd;
    ReqQueue sends;      /* of every group, in posting order; the head is being written */
    size_t sent;         /* bytes of the head's header + payload written */
    unsigned char ctrl[CTRL_BUF]; /* control messages to write at the next message */
    size_t ctrl_len, ctrl_sent;   /* boundary ([Note: blame]) */
    Lane *lanes;         /* one per group this peer shares with this rank */
    WireHdr in_hdr;      /* the incoming message's header ... */
    size_t in_hdr_got;
    int in_payload;      /* ... and, once complete, its payload: */
    int in_ctrl;         /* a control message's text, into ctrl_in */
    char *in_dst;
    size_t in_len, in_got;
    CommReq *in_req;     /* its owner: the matched receive, */
    Early *in_early;     /* or an early (or discard) buffer, */
    Lane *in_lane;       /* in this lane's list while unclaimed */
    char ctrl_in[CTRL_TEXT + 1];
    int lost;            /* unusable from now on, because of `why` */
    int bye;             /* it said it is closing its connections */
    int dropped_me;      /* it said it gave up on this rank (its closing is no failure), */
    char dropped_why[CTRL_TEXT + 1]; /* in these words */
    char why[PP_ERR_MAX / 2];
    double last_rx, last_tx; /* pp_now() of the last whole message from / to it */
    double last_heard;   /* pp_now() of the last bytes of any kind from it (heartbeats too) */
    double last_wrote;   /* ... and of the last bytes written to it ([Note: heartbeat]) */
    char host[64];       /* its numeric address as this rank sees it; "" on loopback */
    double pong_at;      /* when its last answer to a probe came, and what it said: */
    int pong_on;         /* the rank it is blocked on (-1: none) */
    double pong_left;    /* and for how long at most */
} Peer;

/* What the job's Comm and the groups split from it share. */
typedef struct {
    int rank, world;    /* in the job */
    Peer *peers;        /* [world] by rank in the job */
    pthread_t thread;
    pthread_mutex_t mu; /* guards everything the progress thread touches */
    pthread_cond_t cv;  /* signalled when a request completes or a peer answers */
    int wake[2];        /* pipe that interrupts the progress thread's poll */
    int stop;
    int stopping;       /* the last Comm is being destroyed: losses are not failures */
    int refs;           /* Comms using it: the last comm_destroy frees it */
    double timeout_s;   /* the job Comm's, for the probe's grace */
    int origin;         /* the first rank lost in this job (seen or reported), -1: none */
    char origin_why[PP_ERR_MAX / 2];
    int block_on;       /* the rank this rank's caller is blocked on (-1: none) ... */
    double block_until; /* ... and when it gives up at the latest (pp_now() clock) */
    int block_last;     /* the last rank it was blocked on (-1: none): CommOps.blocked_on */
    double poll_due;    /* the progress thread sleeps in poll until then at the latest; while
                           awake (holding mu), the time it woke (0: not yet started) */
    double stall_end, stall_s; /* this process last did not run for stall_s s, until
                                * stall_end ([Note: stopped], comm_socket_blame.c) */
} SockNet;

typedef struct {
    Comm base; /* first: a SockComm * is a Comm * */
    SockNet *net;
    uint64_t gid;       /* 0: the job; a group's is derived from its parent's at split */
    int *ranks;         /* [base.world] each member's rank in the job */
    uint32_t *coll_seq; /* [base.world] collectives completed with each member */
    uint32_t nsplit;    /* splits of this Comm so far */
    CommReq *live;
    float *scratch;     /* COLL_CHUNK floats */
    char name[96];      /* comm_group_name: "" for the job */
} SockComm;

/* A wait on one peer that probes it before blaming it ([Note: blame]). */
typedef struct {
    int peer;         /* its rank in the job */
    double start;     /* when the wait began */
    double ext;       /* a deadline the peer's answers earned (0: none) */
    double ping_at;   /* > 0: a probe is out since then ... */
    double probe_end; /* ... and is unanswered after this */
} SockWatch;

/* Start watching peer (rank in the job) for the caller, who blocks on it. Takes the lock. */
void sock_watch_begin(SockNet *n, SockWatch *w, int peer);
/* The caller no longer blocks. Takes the lock. */
void sock_watch_end(SockNet *n);
/* Whether to give up on w's peer now, given that the wait's own deadline is `base`:
 * 0 = keep waiting until *until (probing the peer once base has passed, extending while
 * it answers that it is blocked on another rank); 1 = give up, with the reason in
 * why ("it does not answer ..."). Whatever base, it gives up once nothing at all, not
 * even a heartbeat, came from the peer for timeout_s ([Note: heartbeat]). Takes the
 * lock. */
int sock_watch_check(SockNet *n, SockWatch *w, double base, double *until, char *why,
                     size_t whylen);

/* Record that the caller gave up on member r (a collective failed on it: the
 * connection closed, or it stayed silent): mark it lost, which reports it to the other
 * ranks when it is the first failure ([Note: blame]). For a closed connection it first
 * waits briefly for the progress thread to read the rest of r's data channel, where r
 * may have reported a failure of its own first. Takes the lock. */
void sock_member_failed(SockComm *s, int r, int closed, const char *why);

/* msg, or "rank O on host H failed first (...); then " + msg when rank O, another than
 * `peer` (rank in the job), was the first failure this rank knows of; then, for a peer
 * on another host, where it runs: " (rank 1 runs on host 10.77.0.2)" (a host is named
 * only when it is not this one, reached over loopback). Takes the lock. */
void sock_blame(SockComm *s, int peer, const char *msg, char *out, size_t n);

/* Control messages on the data channel ([Note: blame] in comm_socket_blame.c): a
 * WireHdr with CTRL_MAGIC, tag.step = the operation, tag.stage = a rank, tag.mb =
 * milliseconds, `bytes` of text after it (at most CTRL_TEXT). */
#define CTRL_MAGIC 0x6d637070u /* "ppcm" */
enum {
    CTRL_PING = 1, /* are you blocked, and on whom? */
    CTRL_PONG,     /* stage: the rank this one is blocked on (-1: none), mb: for how long */
    CTRL_LOST,     /* stage: a rank that failed first; text: how this one learnt it */
    CTRL_BYE,      /* this rank is closing its connections */
    CTRL_BEAT      /* nothing else went to this peer for a while: still here */
};

/* Queue a control message for peer p (rank in the job), written at its next message
 * boundary; dropped if p is lost or its queue is full. Call with the lock held. */
void sock_ctrl_push(SockNet *n, int p, int op, int rank, int ms, const char *text);

/* Mark peer p unusable because of `why`: fail every request on it, drop partial
 * messages, shut the data connection so that it notices. Complete early messages stay
 * receivable. When p is the first failure this rank knows of, the other ranks are told
 * (sock_origin_set). Call with the lock held. */
void sock_peer_lose(SockNet *n, int p, const char *why);

/* A control message from peer p is in p's in_hdr and ctrl_in: act on it. Lock held. */
void sock_on_ctrl(SockNet *n, int p);

/* Record rank o as the first failure (if none is recorded and the net is not closing
 * down) and tell every other live peer; `from` is the rank that reported it (-1: this
 * rank saw it). Call with the lock held. */
void sock_origin_set(SockNet *n, int o, const char *why, int from);

/* sock_blame without taking the lock. */
void sock_blame_text(const SockNet *n, int peer, const char *msg, char *out, size_t len);

/* How overdue (seconds) the progress thread may be before this process counts as having
 * been stopped ([Note: stopped]): a scheduler's hiccup is not a stall. */
#define SOCK_STALL_OVERDUE 0.05

/* Record a stall of this process ([Note: stopped]) if the progress thread, asleep in
 * poll until n->poll_due at the latest, is overdue at `now`; returns how long it is
 * overdue (<= 0: it is not). Call with the lock held. */
double sock_stall_note(SockNet *n, double now);
/* How much of the time since `since` (pp_now() clock) this process was found not
 * running: silence in it is no peer's. Call with the lock held. */
double sock_stall_within(const SockNet *n, double since);

/* The SockWatch functions without taking the lock. */
void sock_watch_begin_locked(SockNet *n, SockWatch *w, int peer);
int sock_watch_check_locked(SockNet *n, SockWatch *w, double base, double *until, char *why,
                            size_t whylen);
/* How much later than its own deadline a watched wait may give up at the latest. */
double sock_watch_span(const SockNet *n);
/* The longest a peer goes without bytes from this rank while the link is up: the
 * progress thread sends a CTRL_BEAT after this much quiet ([Note: heartbeat]). */
double sock_beat_every(const SockNet *n);

/* The group of the members global[n] (ranks in the job) of parent's net, this rank
 * being member `index`; its lanes exist from now on. */
SockComm *sock_group_new(SockComm *parent, uint64_t gid, const int *global, int n,
                         int index);

/* Whether member r's connection is lost (takes the lock). */
int sock_member_lost(SockComm *s, int r);
/* Whether member r is gone for good — its data connection lost other than by an orderly
 * goodbye (it crashed, broke the protocol, or this rank gave up on it) — with the
 * reason in why: a collective then fails at once instead of waiting on its other
 * connection (takes the lock). */
int sock_member_gone(SockComm *s, int r, char *why, size_t n);

/* The collectives (comm_socket_coll.c), for the ops table. */
int sock_allreduce_sum_f64(Comm *c, double *v, int n);
int sock_allreduce_sum_f32(Comm *c, float *buf, size_t n);
int sock_reduce_scatter_sum_f32(Comm *c, const float *send, float *recv, size_t count);
int sock_all_gather_f32(Comm *c, const float *send, float *recv, size_t count);
int sock_broadcast(Comm *c, int root, void *buf, size_t bytes);
int sock_barrier(Comm *c);
int sock_split(Comm *c, int color, int key, Comm **out);

#endif
