/* flight.h — the flight recorder: each rank's last N actions and transfers in a ring,
 * written to output.dir/flight/rank_NNNNN.txt on a runtime failure, on SIGUSR2 and on a
 * fatal signal; and `pptrain flight`, which merges those files into one table and names
 * the rank that the others wait for ([Note: flight recorder] in flight.c). */
#ifndef PP_FLIGHT_H
#define PP_FLIGHT_H

#include <stddef.h>
#include <stdint.h>

typedef struct FlightRec FlightRec;

/* What a record is. */
enum { FLIGHT_COMPUTE = 1, FLIGHT_SEND, FLIGHT_RECV, FLIGHT_COLL };
/* Where it stands: a transfer is posted (isend/irecv returned), then waiting while this
 * rank blocks on it, then done or failed; a compute action is running, then done; a
 * collective is waiting, then done or failed. */
enum { FLIGHT_POSTED = 1, FLIGHT_RUNNING, FLIGHT_WAITING, FLIGHT_DONE, FLIGHT_FAILED };

#define FLIGHT_DEFAULT_RECORDS 256

/* A recorder of the last `records` records of rank `rank` of `world`, whose file is
 * out_dir/flight/rank_NNNNN.txt (the directory is made when a file is first written).
 * Everything a dump needs is allocated here, none later. NULL when records is 0 (off):
 * every function below takes NULL and does nothing. */
FlightRec *flight_create(const char *out_dir, int rank, int world, int records);
/* Undo flight_signals first when f was given to it. */
void flight_destroy(FlightRec *f);

/* The recording calls: the runtime's interpreter thread only (one writer, no lock); a
 * dump on another thread or in a signal handler reads the ring meanwhile. Each returns
 * the record's id (0 when f is NULL) for flight_end. Times are pp_now()'s. `what` and
 * every string passed must be static (a dump reads them later, from a signal handler).
 * A compute action (F, B, I, W) of stage `stage`, microbatch mb: running. */
uint64_t flight_compute(FlightRec *f, const char *what, int step, int stage, int mb);
/* A transfer posted to or from rank `peer`: type FLIGHT_SEND or FLIGHT_RECV, `what`
 * the kind ("act", "grad"), from stage `stage` to stage `to` (a receive: stage is
 * this rank's and to is the sender's), `req` its request (a key: flight_wait finds the
 * record by it). ok 0: the post itself failed (the record is failed). */
uint64_t flight_post(FlightRec *f, int type, const char *what, int step, int stage, int to, int mb,
                     int peer, size_t bytes, const void *req, int ok);
/* This rank starts to block on the transfer of request req: its record (found by req
 * among the last records) is waiting from now; when it has left the ring, a new record
 * of what/stage/mb is. */
uint64_t flight_wait(FlightRec *f, const void *req, const char *what, int step, int stage, int mb);
/* This rank enters a collective of all ranks (or a group) named what: waiting on the
 * rank that the peer probe (flight_set_probe) names. */
uint64_t flight_coll(FlightRec *f, const char *what, int step);
/* Record id ended: done (ok) or failed; done_at > 0 is when it completed (a transfer:
 * the transport's time, Comm.done_at), else now. A failed collective (or wait of unknown
 * peer) keeps the rank that the probe names now. */
void flight_end(FlightRec *f, uint64_t id, int ok, double done_at);

/* The rank that this rank is blocked on in a collective, now or last ([Note: flight
 * recorder]: comm_blocked_on); called from a signal handler too, so it must be
 * async-signal-safe. */
void flight_set_probe(FlightRec *f, int (*probe)(const void *ctx), const void *ctx);

/* Write the file now (atomically: a temporary file renamed over it), giving `reason`
 * (one line) as why. Returns 0, or -1 with errno (nothing written, or another dump of
 * this process under way). Async-signal-safe. */
int flight_dump(FlightRec *f, const char *reason);

/* After a runtime failure whose message is err: write the file with err as the reason
 * and append to err where it is and what this rank was waiting on, for which peer:
 * "; flight record runs/x/flight/rank_00001.txt: this rank was waiting on rank 2 for
 * recv act s1<-s2 mb3 (step 5)". A failure before the first record (setting up: a damaged
 * checkpoint, a bad data file) writes nothing and leaves err as it is: there is nothing to
 * read in the file, and output.dir stays as it was. */
void flight_fail(FlightRec *f, char *err, size_t errlen);

/* Handle SIGUSR2 (write the file and go on) and, unless under AddressSanitizer, the fatal
 * signals SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (write it, then die of the signal as
 * before), for recorder f; both say so on stderr. One recorder per process; NULL undoes
 * it (the default actions again) and returns once no handler holds the recorder (waiting at
 * most 5 s for one still dumping it), so that it may be destroyed. */
void flight_signals(FlightRec *f);

/* For a signal handler about to _exit (main.c's stop during setup, [Note: a signal during
 * setup]): waits for a dump of the handled recorder under way on another thread (at most
 * 0.2 s) and keeps any other from starting, so that none leaves its temporary file behind;
 * one still under way after that (the handler interrupted it on its own thread) has its
 * temporary file removed. The process must exit next. Async-signal-safe. */
void flight_before_exit(void);

/* `pptrain flight DIR [--last N]`: argv[0] is "flight". Returns the exit code. */
int flight_main(int argc, char **argv);

/* ---- the files, read back (flight_cmd.c) ---- */

/* One rank's file: its rank and world, the peer it waits on (-1: none) and for what. */
typedef struct {
    int rank, world;
    int waiting_on; /* -1: not waiting on anyone */
    char waiting_for[160];
    double started, written; /* wall clock, s */
} FlightFileInfo;

/* The largest world `pptrain flight` reads files of: a header naming more ranks is no
 * record of a run it can merge. */
#define FLIGHT_MAX_WORLD (1 << 20)

/* The head of the wait chain of every rank r with a file (by_rank[world], NULL where a
 * rank wrote none) into head[r]: follow waiting_on from r until a rank that waits on no
 * one, or that has no file (stopped, killed or still running): that rank; -1 when the
 * chain runs into a cycle (then cycle_at[r] is a rank on it, else -1). Each rank is
 * walked once, so a chain through thousands of files costs its length, not its square. */
void flight_chain_heads(const FlightFileInfo *const *by_rank, int world, int *head,
                        int *cycle_at);

#endif
