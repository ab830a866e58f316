/* dist.h — who am I (rank, world, master address and job token from the environment) and
 * the authenticated TCP rendezvous that connects every pair of ranks. See
 * docs/launching.md. dist.c reads the environment, dist_rdzv.c holds the rendezvous and
 * the mesh, dist_net.c the socket helpers they share (dist_net.h). */
#ifndef PP_DIST_H
#define PP_DIST_H

#include <stddef.h>

#include "dist_auth.h"
#include "common.h"

#define DIST_DEFAULT_PORT 29500 /* MASTER_PORT when the environment does not set it */
/* Under SLURM without MASTER_PORT: DIST_SLURM_PORT_BASE + (job % 2000) * 10 + step % 10,
 * so that jobs (and steps of one job) sharing a node rendezvous on different ports. */
#define DIST_SLURM_PORT_BASE 10000
#define DIST_JOB_MAX 64 /* longest job identity ("SLURM job 123 step 0") */
#define DIST_HOST_MAX 256
#define DIST_CONFIG_MAX (1 << 20) /* longest config text a rank may send */

/* Where the identity came from. */
typedef enum { DIST_SRC_NONE, DIST_SRC_TORCHRUN, DIST_SRC_SLURM } DistSource;

typedef struct {
    int rank, world;             /* this process's global rank, number of ranks P */
    int local_rank, local_world; /* rank among, and number of, the ranks on this node */
    char master_addr[DIST_HOST_MAX]; /* rank 0's host; "" only when world == 1 */
    int master_port;             /* MASTER_PORT, DIST_DEFAULT_PORT when unset */
    int rdzv_port;               /* the port pptrain's rendezvous uses (see dist_env_read) */
    int under_torchrun;          /* TORCHELASTIC_RUN_ID is set */
    DistSource source;
    /* Which job this rank belongs to, as far as the launcher says: "SLURM job J step S"
     * (SLURM_JOB_ID, SLURM_STEP_ID), "torchrun run R" (TORCHELASTIC_RUN_ID), or "" when
     * unknown. Sent in the rendezvous hello, so that a rank of another job that reaches
     * this job's port is recognised as such ([Note: rendezvous under attack]). */
    char job[DIST_JOB_MAX];
    char token[AUTH_TOKEN_MAX + 1]; /* PPTRAIN_JOB_TOKEN; "" = none (unauthenticated) */
} DistEnv;

/* Read the identity of this process from the environment, first found wins
 * (DESIGN.md §2):
 *   1. torchrun-style RANK, WORLD_SIZE (both required if either is set), LOCAL_RANK,
 *      LOCAL_WORLD_SIZE (default: RANK, WORLD_SIZE, i.e. one node), MASTER_ADDR,
 *      MASTER_PORT;
 *   2. SLURM: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the tasks on this node
 *      (SLURM_NODEID) from SLURM_STEP_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE
 *      (forms "4", "4(x2),2"); MASTER_ADDR must be exported by the batch script. With
 *      SLURM_NTASKS > 1 the process must be a task of a job step (SLURM_STEP_ID set,
 *      as srun sets it): the batch shell itself has SLURM_PROCID=0 and SLURM_NTASKS but
 *      no step, and a pptrain it starts directly would wait for ranks that never come,
 *      so that is a usage error naming srun;
 *   3. nothing: rank 0 of 1.
 * MASTER_ADDR is required when world > 1; MASTER_PORT defaults to DIST_DEFAULT_PORT, or
 * under SLURM (SLURM_JOB_ID set) to a port derived from the job and step
 * (DIST_SLURM_PORT_BASE).
 * rdzv_port = PPTRAIN_RDZV_PORT if set, else MASTER_PORT + 1 under torchrun (its own
 * TCPStore already listens on MASTER_PORT), else MASTER_PORT. token = PPTRAIN_JOB_TOKEN
 * (dist_auth_token_read: 16 to 256 characters, or unset).
 * Returns PP_OK, or PP_EUSAGE with a message naming the variable and the fix when a
 * value is not a number, out of range or inconsistent (RANK >= WORLD_SIZE, ...). */
int dist_env_read(DistEnv *env, char *err, size_t errlen);

/* Parse a SLURM tasks-per-node list ("4", "2,3", "4(x2),2") and return the count of
 * node `node` (0-based) in *ntasks. A single plain count ("4") applies to every node.
 * Returns PP_OK or PP_EUSAGE (malformed list, node out of range). */
int dist_parse_tasks_per_node(const char *s, int node, int *ntasks, char *err,
                              size_t errlen);

/* Compare two printed configs (YAML, two spaces of indent per level) line by line.
 * Returns 0 when they are equal; else 1 and writes the first difference into `where`
 * as "<dotted key>: <value in a> vs <value in b>", e.g. "train.steps: 20 vs 10"
 * (a missing line reads "(missing)"; differing keys are both written in full). */
int dist_config_diff(const char *a, const char *b, char *where, size_t n);

/* The connections between this rank and every other: two TCP streams per pair
 * ([Note: socket transport] in comm_socket.c). fds of this rank itself are -1. */
typedef struct {
    int rank, world;
    int *data_fd; /* [world] point-to-point messages */
    int *coll_fd; /* [world] collectives */
} DistMesh;

/* Rendezvous at MASTER_ADDR:rdzv_port and connect every pair of ranks.
 * Rank 0 listens there (SO_REUSEADDR; on the MASTER_ADDR's address when all ranks are
 * on one node, else on every address); the others connect with retries and backoff for
 * up to timeout_s, each listening on an ephemeral port of the address it reaches rank
 * 0 from; rank 0 sends everyone the table of listen addresses and the ranks connect
 * to each other directly (IPv4 or IPv6). Every connection starts with the job token's
 * challenge-response ([Note: job authentication] in dist_auth.c); a listening rank handles
 * all its pending connections at once and drops, with one log line naming the peer's
 * address, those that fail it or do not finish within DIST_HANDSHAKE_S; those that
 * send nothing, or are shed under a flood of connections, are counted in one line.
 * None of them stops the job: a rank whose connection ends before the job has formed
 * makes it again with backoff ([Note: rendezvous under attack] in dist_rdzv.c).
 * Every rank sends `config_text` (the printed effective config) and its WORLD_SIZE;
 * rank 0 compares them with its own. With a token, any difference makes every rank
 * fail with the same message, e.g. "rank 1's config differs from rank 0's at
 * train.steps: 20 vs 10 — ..."; without one, rank 0 cannot tell a misconfigured rank
 * from a forged hello, so it refuses that connection alone (the process gets the
 * message) and keeps waiting for the real rank. Without a token and with rank 0
 * listening beyond loopback, rank 0 prints one warning that the job is unauthenticated.
 * Every wait has a deadline: rank 0 gives up timeout_s after it started listening,
 * naming the ranks that never joined.
 * On success the mesh owns world*2-2 connected TCP sockets (TCP_NODELAY, non-blocking)
 * and returns PP_OK; release them with dist_mesh_close (or hand them to
 * comm_socket_create). Errors: PP_EUSAGE for a config/world/token mismatch or
 * duplicate rank, PP_ERUNTIME for network failures and timeouts; nothing is left open. */
int dist_connect(const DistEnv *env, const char *config_text, double timeout_s,
                 DistMesh *mesh, char *err, size_t errlen);

/* Close every socket of the mesh and free its arrays (safe on a zeroed mesh). */
void dist_mesh_close(DistMesh *mesh);

/* Results of dist_xfer. */
#define DIST_IO_OK 0
#define DIST_IO_CLOSED (-1)  /* the peer closed the connection or reset it */
#define DIST_IO_TIMEOUT (-2) /* not done by the deadline */
#define DIST_IO_ERROR (-3)   /* another socket error (see `why`) */

/* How long an accepted connection may take to prove the token and say hello. */
#define DIST_HANDSHAKE_S 5.0
/* Bulk transfers are allowed timeout_s plus one second per DIST_MIN_RATE bytes. */
#define DIST_MIN_RATE (16.0 * 1024 * 1024)

/* The deadline (pp_now() clock) of a transfer of `bytes` that starts now with the
 * timeout timeout_s: now + timeout_s + bytes / DIST_MIN_RATE. Fixed when the transfer
 * starts: bytes that trickle in do not extend it. */
double dist_deadline(double timeout_s, size_t bytes);

/* Send sbuf[*so, sn) and receive rbuf[*ro, rn) on socket `fd` at the same time (full
 * duplex, so two ranks exchanging large buffers cannot deadlock on full socket
 * buffers), advancing *so and *ro, until both are done — or, with `until_recv`, until
 * rbuf is full (for a sender that must stop when its peer answers early: an abort) —
 * or until the absolute `deadline` (pp_now() clock): then DIST_IO_TIMEOUT, and a later
 * call with the same *so, *ro resumes. Never raises SIGPIPE. On failure `why` (may be
 * NULL) gets the system's reason. */
int dist_xfer_part(int fd, const void *sbuf, size_t sn, size_t *so, void *rbuf, size_t rn,
                   size_t *ro, int until_recv, double deadline, char *why, size_t whylen);

/* dist_xfer_part from the start, with the deadline dist_deadline(timeout_s, sn + rn):
 * fails with DIST_IO_TIMEOUT when the transfer is not complete by then, however many
 * bytes moved. */
int dist_xfer(int fd, const void *sbuf, size_t sn, void *rbuf, size_t rn,
              double timeout_s, char *why, size_t whylen);

/* dist_xfer, except that it returns as soon as the rn > 0 bytes are received, even if
 * the send is not done: *sent (never NULL) says how much of sbuf went out. */
int dist_xfer_until(int fd, const void *sbuf, size_t sn, size_t *sent, void *rbuf,
                    size_t rn, double timeout_s, char *why, size_t whylen);

#endif
