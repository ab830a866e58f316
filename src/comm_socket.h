/* comm_socket.h — shared by the socket transport's two files only: comm_socket.c (the
 * connections, the progress thread, point-to-point, groups' lifecycle) and
 * comm_socket_coll.c (the collectives). See [Note: socket transport]. */
#ifndef PP_COMM_SOCKET_H
#define PP_COMM_SOCKET_H

#include <pthread.h>

#include "comm_impl.h"

#define COLL_CHUNK (1u << 18) /* floats per exchange of a float collective (1 MiB) */

typedef struct {
    uint32_t magic;
    CommTag tag;
    uint32_t pad;
    uint64_t bytes; /* payload that follows */
    uint64_t gid;   /* the group it belongs to (SockComm.gid) */
} WireHdr;

/* One group's messages from one peer. */
typedef struct Lane {
    uint64_t gid;
    ReqQueue recvs;   /* posted, waiting for their message */
    EarlyList early;  /* arrived (or arriving) before their receive, unclaimed */
    struct Lane *next;
} Lane;

typedef struct {
    int fd, coll_fd;
    ReqQueue sends;      /* of every group, in posting order; the head is being written */
    size_t sent;         /* bytes of the head's header + payload written */
    Lane *lanes;         /* one per group this peer shares with this rank */
    WireHdr in_hdr;      /* the incoming message's header ... */
    size_t in_hdr_got;
    int in_payload;      /* ... and, once complete, its payload: */
    char *in_dst;
    size_t in_len, in_got;
    CommReq *in_req;     /* its owner: the matched receive, */
    Early *in_early;     /* or an early (or discard) buffer, */
    Lane *in_lane;       /* in this lane's list while unclaimed */
    int lost;            /* unusable from now on, because of `why` */
    char why[PP_ERR_MAX / 2];
    double last_rx, last_tx; /* pp_now() of the last byte received from / sent to it */
} Peer;

/* What the job's Comm and the groups split from it share. */
typedef struct {
    int rank, world;    /* in the job */
    Peer *peers;        /* [world] by rank in the job */
    pthread_t thread;
    pthread_mutex_t mu; /* guards everything the progress thread touches */
    pthread_cond_t cv;  /* signalled when a request completes */
    int wake[2];        /* pipe that interrupts the progress thread's poll */
    int stop;
    int refs;           /* Comms using it: the last comm_destroy frees it */
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

/* The group of the members global[n] (ranks in the job) of parent's net, this rank
 * being member `index`; its lanes exist from now on. */
SockComm *sock_group_new(SockComm *parent, uint64_t gid, const int *global, int n,
                         int index);

/* Whether member r's connection is lost (takes the lock). */
int sock_member_lost(SockComm *s, int r);

/* The collectives (comm_socket_coll.c), for the ops table. */
int sock_allreduce_sum_f64(Comm *c, double *v, int n);
int sock_allreduce_sum_f32(Comm *c, float *buf, size_t n);
int sock_reduce_scatter_sum_f32(Comm *c, const float *send, float *recv, size_t count);
int sock_all_gather_f32(Comm *c, const float *send, float *recv, size_t count);
int sock_broadcast(Comm *c, int root, void *buf, size_t bytes);
int sock_barrier(Comm *c);
int sock_split(Comm *c, int color, int key, Comm **out);

#endif
