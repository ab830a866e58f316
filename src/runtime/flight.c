/* flight.c — the flight recorder: the ring of a rank's last actions and transfers, and
 * its file, written on a failure, on demand (SIGUSR2) and on a fatal signal. */
#define _GNU_SOURCE
#include "flight.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* [Note: flight recorder]
 * What a hung or failed pipeline needs is what every rank did last and what it is stuck
 * on: the recorder keeps each rank's last N records (output.flight_records) in a ring.
 * A record is a compute action ("F s1 mb3"), a transfer ("send act s1->s2 mb3": its
 * peer, bytes and tag) or a collective ("allreduce loss, grad norm"), with its start
 * (posted), when this rank began to block on it, its end, and its state.
 * - One writer. Only the runtime's interpreter thread records (runtime.c): it posts and
 *   waits for every transfer, so it knows each one's post, its wait and its end; the
 *   transport's progress thread writes nothing here. What only that thread knows — when a
 *   message actually completed — it stamps on the request under the lock it already holds
 *   (CommReq.done_at, comm.c), and a wait hands it on (Comm.done_at) to the record's end.
 *   So recording takes no lock, no atomic read-modify-write and no allocation: a few
 *   stores and a clock read or two, as the trace does (README: its cost on bench-small).
 * - Readers. A dump runs on the interpreter thread (a failure), in a signal handler on
 *   any thread (SIGUSR2) or on the thread that faulted. It copies each record between two
 *   reads of its seq, which the writer zeroes before it rewrites a slot and sets last: a
 *   record caught half written is left out. A state change of a live record (waiting,
 *   done) is a plain store, the end time stored before the state: a reader sees the old
 *   state or the new one, never a torn one.
 * - Signal safety. Everything a dump needs is allocated at flight_create: the text
 *   buffer, the file's name and its temporary name, the line that stderr gets. The dump
 *   formats numbers itself (no stdio, no malloc), makes the directory with mkdir(2) and
 *   writes the file with open, write and rename(2) — all async-signal-safe — so a dump in
 *   a SIGSEGV handler works whatever the faulting thread held. One dump at a time per
 *   process (a flag): a signal that finds one under way writes nothing.
 * - The waited-on peer. A transfer names its peer; in a collective, whom this rank is
 *   blocked on is the transport's business: the probe (comm_blocked_on in comm.h, the
 *   socket transport's SockNet.block_on, or the last one it blocked on) names that rank,
 *   at the dump for a collective still waiting, at its failure for one that failed.
 * - The chain. `pptrain flight` (flight_cmd.c) reads every rank's "waiting: rank P" line
 *   and follows those edges to the head of the chain: a rank that waits on no one, that
 *   wrote no file — stopped or killed, so it could not — or whose failure says that it was
 *   itself stopped ([Note: stopped] in comm/comm_socket_blame.c: what it waited on once it
 *   ran again had already given up on it): that is the rank to look at. A cycle of waits
 *   (which the schedule's simulator rules out) is named as one.
 */

typedef struct {
    uint64_t seq;      /* its id, 1-based; 0 while empty or being rewritten */
    const void *key;   /* a transfer's request until it ended (flight_wait finds it) */
    const char *what;  /* static text */
    double t0, tw, t1; /* pp_now(): began (posted), blocked on since (0: never), ended (0) */
    uint64_t bytes;
    int32_t step, stage, to, mb, peer;
    uint8_t type, state;
} Rec;

enum { FLIGHT_WAIT_ONLY = 5 }; /* a wait whose post left the ring (type) */

struct FlightRec {
    Rec *ring;
    int cap, next; /* next: the slot of the next record */
    uint64_t n;    /* records so far */
    int rank, world;
    int (*probe)(const void *ctx);
    const void *probe_ctx;
    double started; /* wall clock, s */
    char dir[PP_PATH_MAX + 16], path[PP_PATH_MAX + 48], tmp[PP_PATH_MAX + 64];
    char note[PP_PATH_MAX + 128]; /* "[rank 1] " ... for stderr */
    char *buf;                    /* a dump's text */
    size_t bufcap;
    char busy; /* a dump is under way */
};

#define REC_TEXT 256 /* the most a record's line takes */

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

FlightRec *flight_create(const char *out_dir, int rank, int world, int records) {
    if (records <= 0) return NULL;
    FlightRec *f = pp_calloc(1, sizeof *f);
    f->ring = pp_calloc((size_t)records, sizeof *f->ring);
    f->cap = records;
    f->rank = rank;
    f->world = world;
    f->started = wall_now();
    snprintf(f->dir, sizeof f->dir, "%s/flight", out_dir);
    snprintf(f->path, sizeof f->path, "%s/rank_%05d.txt", f->dir, rank);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp", f->path);
    if (pp_rank() >= 0) snprintf(f->note, sizeof f->note, "[rank %d] ", pp_rank());
    f->bufcap = 4096 + PP_ERR_MAX + (size_t)records * REC_TEXT;
    f->buf = pp_malloc(f->bufcap);
    return f;
}

void flight_destroy(FlightRec *f) {
    if (!f) return;
    free(f->ring);
    free(f->buf);
    free(f);
}

void flight_set_probe(FlightRec *f, int (*probe)(const void *ctx), const void *ctx) {
    if (!f) return;
    __atomic_store_n(&f->probe, NULL, __ATOMIC_SEQ_CST);
    /* a dump that read the old probe is over once the flag is free */
    struct timespec ms = {0, 1000000};
    int got = 0;
    for (int i = 0; i < 2000 && !(got = !__atomic_test_and_set(&f->busy, __ATOMIC_ACQUIRE)); i++)
        nanosleep(&ms, NULL);
    if (got) __atomic_clear(&f->busy, __ATOMIC_RELEASE);
    f->probe_ctx = ctx;
    __atomic_store_n(&f->probe, probe, __ATOMIC_SEQ_CST);
}

/* ---- recording (the interpreter thread) ---- */

/* The next slot, emptied for rewriting; the caller fills it and publishes it. */
static Rec *rec_open(FlightRec *f) {
    Rec *e = &f->ring[f->next];
    __atomic_store_n(&e->seq, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (++f->next == f->cap) f->next = 0;
    return e;
}

static uint64_t rec_publish(FlightRec *f, Rec *e) {
    uint64_t id = f->n + 1;
    __atomic_store_n(&e->seq, id, __ATOMIC_RELEASE);
    __atomic_store_n(&f->n, id, __ATOMIC_RELEASE);
    return id;
}

static Rec *rec_of(FlightRec *f, uint64_t id) {
    Rec *e = &f->ring[(id - 1) % (uint64_t)f->cap];
    return e->seq == id ? e : NULL;
}

static void rec_fill(Rec *e, int type, int state, const char *what, int step, int stage, int to,
                     int mb, int peer, size_t bytes, const void *key, double t0) {
    e->type = (uint8_t)type;
    e->state = (uint8_t)state;
    e->what = what;
    e->step = step;
    e->stage = stage;
    e->to = to;
    e->mb = mb;
    e->peer = peer;
    e->bytes = bytes;
    e->key = key;
    e->t0 = t0;
    e->tw = state == FLIGHT_WAITING ? t0 : 0;
    e->t1 = 0;
}

uint64_t flight_compute(FlightRec *f, const char *what, int step, int stage, int mb) {
    if (!f) return 0;
    Rec *e = rec_open(f);
    rec_fill(e, FLIGHT_COMPUTE, FLIGHT_RUNNING, what, step, stage, -1, mb, -1, 0, NULL, pp_now());
    return rec_publish(f, e);
}

uint64_t flight_post(FlightRec *f, int type, const char *what, int step, int stage, int to, int mb,
                     int peer, size_t bytes, const void *req, int ok) {
    if (!f) return 0;
    Rec *e = rec_open(f);
    double now = pp_now();
    rec_fill(e, type, ok ? FLIGHT_POSTED : FLIGHT_FAILED, what, step, stage, to, mb, peer, bytes,
             ok ? req : NULL, now);
    if (!ok) e->t1 = now;
    return rec_publish(f, e);
}

uint64_t flight_wait(FlightRec *f, const void *req, const char *what, int step, int stage, int mb) {
    if (!f) return 0;
    double now = pp_now();
    uint64_t n = f->n, lo = n > (uint64_t)f->cap ? n - (uint64_t)f->cap : 0;
    for (uint64_t id = n; req && id > lo; id--) { /* the newest first: it is near */
        Rec *e = rec_of(f, id);
        if (e && e->key == req && e->state == FLIGHT_POSTED) {
            e->tw = now;
            __atomic_store_n(&e->state, FLIGHT_WAITING, __ATOMIC_RELEASE);
            return id;
        }
    }
    Rec *e = rec_open(f);
    rec_fill(e, FLIGHT_WAIT_ONLY, FLIGHT_WAITING, what, step, stage, -1, mb, -1, 0, req, now);
    return rec_publish(f, e);
}

uint64_t flight_coll(FlightRec *f, const char *what, int step) {
    if (!f) return 0;
    Rec *e = rec_open(f);
    rec_fill(e, FLIGHT_COLL, FLIGHT_WAITING, what, step, -1, -1, -1, -1, 0, NULL, pp_now());
    return rec_publish(f, e);
}

static int probe_peer(FlightRec *f) {
    int (*probe)(const void *) = __atomic_load_n(&f->probe, __ATOMIC_ACQUIRE);
    return probe ? probe(f->probe_ctx) : -1;
}

void flight_end(FlightRec *f, uint64_t id, int ok, double done_at) {
    Rec *e = f && id ? rec_of(f, id) : NULL;
    if (!e) return; /* off, or overwritten meanwhile */
    if (!ok && e->peer < 0 && e->type != FLIGHT_COMPUTE) e->peer = probe_peer(f);
    e->key = NULL;
    e->t1 = done_at > 0 ? done_at : pp_now();
    __atomic_store_n(&e->state, ok ? FLIGHT_DONE : FLIGHT_FAILED, __ATOMIC_RELEASE);
}

/* ---- text without stdio or malloc (async-signal-safe) ---- */

typedef struct {
    char *p;
    size_t len, cap;
} Out;

static void out_chars(Out *o, const char *s, size_t n) {
    for (size_t i = 0; i < n && o->len < o->cap; i++) o->p[o->len++] = s[i];
}

static void out_str(Out *o, const char *s) { out_chars(o, s, strlen(s)); }

/* s on one line: its line breaks become spaces. */
static void out_oneline(Out *o, const char *s) {
    for (; *s && o->len < o->cap; s++) o->p[o->len++] = *s == '\n' ? ' ' : *s;
}

static void out_pad(Out *o, int n) {
    while (n-- > 0 && o->len < o->cap) o->p[o->len++] = ' ';
}

/* v in decimal, right-aligned to width. */
static void out_int(Out *o, long long v, int width) {
    char d[24];
    int k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do d[k++] = (char)('0' + u % 10);
    while ((u /= 10) && k < 22);
    if (v < 0) d[k++] = '-';
    out_pad(o, width - k);
    while (k > 0 && o->len < o->cap) o->p[o->len++] = d[--k];
}

/* v >= 0 with `dec` decimals (at most 6), right-aligned to width; plus: a leading '+'. */
static void out_fixed(Out *o, double v, int dec, int width, int plus) {
    long long scale = 1;
    for (int i = 0; i < dec; i++) scale *= 10;
    if (v < 0) v = 0;
    long long x = (long long)(v * scale + 0.5), ip = x / scale, fp = x % scale;
    char d[48];
    Out t = {d, 0, sizeof d};
    if (plus) out_str(&t, "+");
    out_int(&t, ip, 0);
    if (dec > 0) {
        out_str(&t, ".");
        for (long long s = scale / 10; s > 0; s /= 10) {
            char c = (char)('0' + fp / s % 10);
            out_chars(&t, &c, 1);
        }
    }
    out_pad(o, width - (int)t.len);
    out_chars(o, d, t.len);
}

static const char *state_name(int s) {
    static const char *const names[] = {"?", "posted", "running", "waiting", "done", "failed"};
    return s >= 0 && s <= FLIGHT_FAILED ? names[s] : "?";
}

/* "F s1 mb3", "send act s1->s2 mb3", "recv grad s1<-s2 mb3", "allreduce ...". */
static void out_what(Out *o, const Rec *e) {
    if (e->type == FLIGHT_SEND || e->type == FLIGHT_RECV) {
        out_str(o, e->type == FLIGHT_SEND ? "send " : "recv ");
        out_str(o, e->what);
        out_str(o, " s");
        out_int(o, e->stage, 0);
        out_str(o, e->type == FLIGHT_SEND ? "->s" : "<-s");
        out_int(o, e->to, 0);
    } else {
        out_str(o, e->what);
        if (e->type == FLIGHT_COLL) return;
        out_str(o, " s");
        out_int(o, e->stage, 0);
    }
    out_str(o, " mb");
    out_int(o, e->mb, 0);
}

/* Copy record id into *c if it is whole (not being rewritten); 0 if not. */
static int rec_copy(const FlightRec *f, uint64_t id, Rec *c) {
    const Rec *e = &f->ring[(id - 1) % (uint64_t)f->cap];
    uint64_t s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    if (s1 != id) return 0;
    memcpy(c, e, sizeof *c);
    /* what the writer set before its release of state (flight_wait: tw; flight_end: peer
     * and t1), read again after acquiring state: the copy above may predate them */
    c->state = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    c->tw = e->tw;
    c->peer = e->peer;
    c->t1 = e->t1;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s1;
}

/* The transfer or collective this rank blocks on (waiting), or whose failure stopped it
 * (a compute action that fails only passes on such a failure): the newest such; its peer
 * in *peer (the probe's for a collective, or a wait whose post left the ring, still
 * waiting). 0 if there is none. */
static int rec_blocking(FlightRec *f, Rec *out, int *peer) {
    uint64_t n = __atomic_load_n(&f->n, __ATOMIC_ACQUIRE);
    uint64_t lo = n > (uint64_t)f->cap ? n - (uint64_t)f->cap : 0;
    for (uint64_t id = n; id > lo; id--) {
        if (!rec_copy(f, id, out)) continue;
        if (out->type == FLIGHT_COMPUTE) continue; /* it fails only by a wait inside it */
        if (out->state != FLIGHT_WAITING && out->state != FLIGHT_FAILED) continue;
        *peer = out->peer;
        if (*peer < 0 && out->state == FLIGHT_WAITING) *peer = probe_peer(f);
        return 1;
    }
    return 0;
}

/* A record's line: seq, start (wall clock), blocked on since and end (relative to the
 * start; "-": not), state, peer, bytes, step, what. */
static void out_rec(Out *o, const Rec *e, double wall) {
    out_int(o, (long long)e->seq, 9);
    out_fixed(o, e->t0 + wall, 6, 19, 0);
    if (e->tw > 0)
        out_fixed(o, e->tw - e->t0, 6, 12, 1);
    else
        out_str(o, "           -");
    if (e->t1 > 0)
        out_fixed(o, e->t1 - e->t0, 6, 12, 1);
    else
        out_str(o, "           -");
    out_str(o, "  ");
    out_str(o, state_name(e->state));
    out_pad(o, 8 - (int)strlen(state_name(e->state)));
    if (e->peer >= 0)
        out_int(o, e->peer, 5);
    else
        out_str(o, "    -");
    out_int(o, (long long)e->bytes, 11);
    out_int(o, e->step, 7);
    out_str(o, "  ");
    out_what(o, e);
    out_str(o, "\n");
}

/* "waiting: rank 2 for recv act s1<-s2 mb3 (step 5): waiting for 3.2 s" (flight_cmd.c
 * reads it back), or "waiting: nobody ...". */
static void out_waiting(FlightRec *f, Out *o, double mono_now) {
    Rec b;
    int peer = -1;
    if (!rec_blocking(f, &b, &peer)) {
        out_str(o, "waiting: nobody (no record of this rank waits or failed)\n");
        return;
    }
    out_str(o, "waiting: ");
    if (peer >= 0) {
        out_str(o, "rank ");
        out_int(o, peer, 0);
    } else {
        out_str(o, "nobody known");
    }
    out_str(o, " for ");
    out_what(o, &b);
    out_str(o, " (step ");
    out_int(o, b.step, 0);
    out_str(o, "): ");
    out_str(o, state_name(b.state));
    out_str(o, b.state == FLIGHT_WAITING ? " for " : " after ");
    out_fixed(o, (b.state == FLIGHT_WAITING ? mono_now : b.t1) - (b.tw > 0 ? b.tw : b.t0), 3, 0, 0);
    out_str(o, " s\n");
}

static void format_dump(FlightRec *f, Out *o, const char *reason) {
    double mono = pp_now(), wall = wall_now() - mono; /* pp_now() + wall: the wall clock */
    uint64_t n = __atomic_load_n(&f->n, __ATOMIC_ACQUIRE);
    uint64_t lo = n > (uint64_t)f->cap ? n - (uint64_t)f->cap : 0;
    out_str(o, "# pptrain flight record (format 1): the last actions and transfers of one rank;"
               " `pptrain flight DIR` merges the ranks' files\n");
    out_str(o, "rank ");
    out_int(o, f->rank, 0);
    out_str(o, " of ");
    out_int(o, f->world, 0);
    out_str(o, ", pid ");
    out_int(o, getpid(), 0);
    out_str(o, "\nreason: ");
    out_oneline(o, reason);
    out_str(o, "\nstarted ");
    out_fixed(o, f->started, 6, 0, 0);
    out_str(o, "\nwritten ");
    out_fixed(o, mono + wall, 6, 0, 0);
    out_str(o, "\n");
    out_waiting(f, o, mono);
    out_str(o, "records ");
    out_int(o, (long long)(n - lo), 0);
    out_str(o, " of ");
    out_int(o, (long long)n, 0);
    out_str(o, " (the last ones, oldest first; times in s: start on the wall clock, "
               "blocked-on and end after the start)\n");
    out_str(o, "      seq          start (s)     blocked         end  state    peer      bytes"
               "   step  what\n");
    for (uint64_t id = lo + 1; id <= n; id++) {
        Rec c;
        if (rec_copy(f, id, &c)) out_rec(o, &c, wall);
    }
}

int flight_dump(FlightRec *f, const char *reason) {
    if (!f) return errno = EINVAL, -1;
    if (__atomic_test_and_set(&f->busy, __ATOMIC_ACQUIRE)) return errno = EBUSY, -1;
    Out o = {f->buf, 0, f->bufcap};
    int fd, rc = -1, saved;
    format_dump(f, &o, reason);
    if (mkdir(f->dir, 0755) != 0 && errno != EEXIST) goto out;
    if ((fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) goto out;
    size_t done = 0;
    while (done < o.len) {
        ssize_t k = write(fd, o.p + done, o.len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        done += (size_t)k;
    }
    saved = errno;
    if (close(fd) != 0 && done == o.len) saved = errno, done = 0;
    if (done == o.len && rename(f->tmp, f->path) == 0)
        rc = 0;
    else
        unlink(f->tmp), errno = saved;
out:
    saved = errno;
    __atomic_clear(&f->busy, __ATOMIC_RELEASE);
    errno = saved;
    return rc;
}

void flight_fail(FlightRec *f, char *err, size_t errlen) {
    if (!f || f->n == 0) return;
    char reason[PP_ERR_MAX], what[160];
    snprintf(reason, sizeof reason, "%s", err);
    int rc;
    struct timespec ms = {0, 1000000};
    for (int i = 0; (rc = flight_dump(f, reason)) != 0 && errno == EBUSY && i < 2000; i++)
        nanosleep(&ms, NULL); /* a SIGUSR2's dump on another thread */
    if (rc != 0) {
        pp_strappendf(err, errlen, "; the flight record %s could not be written: %s", f->path,
                      strerror(errno));
        return;
    }
    Rec b;
    int peer = -1;
    if (!rec_blocking(f, &b, &peer)) {
        pp_strappendf(err, errlen, "; flight record %s (this rank waited on no peer)", f->path);
        return;
    }
    Out o = {what, 0, sizeof what - 1};
    out_what(&o, &b);
    what[o.len] = '\0';
    if (b.state == FLIGHT_FAILED && b.tw == 0) /* its post failed: the peer was gone already */
        pp_strappendf(err, errlen,
                      "; flight record %s: this rank could not post %s (step %d) "
                      "to rank %d",
                      f->path, what, b.step, peer);
    else if (peer >= 0)
        pp_strappendf(err, errlen,
                      "; flight record %s: this rank was waiting on rank %d for %s "
                      "(step %d)",
                      f->path, peer, what, b.step);
    else
        pp_strappendf(err, errlen, "; flight record %s: this rank was waiting for %s (step %d)",
                      f->path, what, b.step);
}

/* ---- signals ---- */

static FlightRec *g_flight; /* the recorder the handlers dump (one per process) */
static int g_in_handler;    /* handlers that may hold g_flight's recorder ([Note: handlers]) */

/* [Note: handlers] Any thread may take SIGUSR2 (an idle OpenMP worker too), so a handler
 * can be dumping a recorder while the main thread ends the run. A handler counts itself in
 * g_in_handler before it loads g_flight and out after its last use of the recorder;
 * flight_signals(NULL) stores NULL and then waits for the count to reach 0, so that the
 * recorder flight_destroy frees next is one no handler holds (a handler that starts after
 * the store finds NULL). */
static FlightRec *handler_enter(void) {
    __atomic_add_fetch(&g_in_handler, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&g_flight, __ATOMIC_SEQ_CST);
}
static void handler_leave(void) { __atomic_sub_fetch(&g_in_handler, 1, __ATOMIC_SEQ_CST); }

static void say(const char *s) {
    ssize_t k = write(2, s, strlen(s));
    (void)k;
}

static void on_usr2(int sig) {
    int saved = errno;
    FlightRec *f = handler_enter();
    if (f) {
        int rc = flight_dump(f, "SIGUSR2 (on demand: the run goes on)");
        say(f->note);
        say(rc == 0 ? "SIGUSR2: flight record written to " : "SIGUSR2: could not write ");
        say(f->path);
        say(rc == 0 ? "\n" : errno == EBUSY ? " (another dump was under way)\n" : "\n");
    }
    handler_leave();
    errno = saved;
}

void flight_before_exit(void) {
    FlightRec *f = handler_enter(); /* never left: the process exits next */
    struct timespec ms = {0, 1000000};
    int got = 0;
    for (int i = 0; f && i < 200 && !(got = !__atomic_test_and_set(&f->busy, __ATOMIC_ACQUIRE));
         i++)
        nanosleep(&ms, NULL);
    if (f && !got) unlink(f->tmp);
}

#if defined(__SANITIZE_ADDRESS__)
#define FLIGHT_ASAN 1 /* its own reports of a fault say more: leave them its handlers */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLIGHT_ASAN 1
#endif
#endif

#ifndef FLIGHT_ASAN
static const char *sig_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
    }
}

static void on_fatal(int sig) {
    FlightRec *f = handler_enter();
    if (f) {
        char reason[64];
        Out o = {reason, 0, sizeof reason - 1};
        out_str(&o, "fatal signal ");
        out_str(&o, sig_name(sig));
        reason[o.len] = '\0';
        int rc = flight_dump(f, reason);
        say(f->note);
        say(reason);
        say(rc == 0 ? ": flight record written to " : ": could not write the flight record ");
        say(f->path);
        say("\n");
    }
    handler_leave();
    /* die of it as before: the default action, once this handler returns (the signal is
     * blocked until then; a fault happens again) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    raise(sig);
}
#endif

void flight_signals(FlightRec *f) {
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    static char *altstack; /* a stack overflow's SIGSEGV needs a stack of its own */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    __atomic_store_n(&g_flight, f, __ATOMIC_SEQ_CST);
    struct timespec ms = {0, 1000000};
    for (int i = 0; !f && i < 5000 && __atomic_load_n(&g_in_handler, __ATOMIC_SEQ_CST); i++)
        nanosleep(&ms, NULL); /* a handler still dumping the old recorder ([Note: handlers]) */
    sa.sa_handler = f ? on_usr2 : SIG_IGN; /* a late SIGUSR2 (pprun forwards it) is no death */
    sa.sa_flags = SA_RESTART;              /* any thread may take it: its system calls just go on */
    sigaction(SIGUSR2, &sa, NULL);
#ifndef FLIGHT_ASAN
    if (f && !altstack) {
        stack_t ss = {.ss_size = 1 << 16};
        altstack = pp_malloc(ss.ss_size);
        ss.ss_sp = altstack;
        sigaltstack(&ss, NULL); /* this thread's: the interpreter's, where faults are likely */
    }
    sa.sa_handler = f ? on_fatal : SIG_DFL;
    sa.sa_flags = SA_ONSTACK;
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) sigaction(fatal[i], &sa, NULL);
#else
    (void)fatal;
    (void)altstack;
#endif
}
