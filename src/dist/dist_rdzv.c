/* dist_rdzv.c — the rendezvous at rank 0 and the mesh of connections between every pair
 * of ranks (dist_connect in dist.h), every connection authenticated (dist_auth.h). */
#include "dist_net.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* [Note: rendezvous under attack]
 * Rank 0's port, and in a multi-node job every rank's mesh port, can be reached by any
 * host on the network, so what arrives there may be a port scan, an idle connection,
 * one that sends a byte every few seconds, a flood of thousands of connections a
 * second, a forged hello, or a process of another job. None of them may stop or stall
 * the job:
 * - A listening rank hears all its pending connections together in one poll loop (a
 *   door, dist_net.c), each under its own deadline of DIST_HANDSHAKE_S from accept to
 *   a complete hello (DOOR_FIRST_BYTE_S to its first byte): idle and slow-drip
 *   connections are dropped when it passes, and never delay the others. The rendezvous
 *   itself ends timeout_s after rank 0 started listening, however many bytes trickle in.
 * - Under a flood the door sheds the least advanced connections, never one that proved
 *   the token, and counts them in one line ([Note: a flood of connections] in
 *   dist_net.c). A rank whose connection ends before the job has formed all the same
 *   (shed, or cut) makes it again with backoff until its deadline: rdzv_member until
 *   rank 0's verdict, mesh_dial until its hello is sent.
 * - Every connection first proves it holds the job token (dist_auth.c); one that fails is
 *   dropped, logged with its address, and the job goes on.
 * - Every length a hello announces is checked before anything is allocated for it
 *   (config text: at most DIST_CONFIG_MAX).
 * - What a hello claims (world size, rank, config) decides the job only when the peer
 *   proved the token: then it is a real rank of this job, misconfigured, and every rank
 *   fails at once with the same message. Without a token rank 0 cannot tell a forged
 *   hello from a misconfigured rank, so it decides per connection: a hello with the
 *   wrong world size, a rank out of range or already taken, or a different config is
 *   refused (that process gets the message, so a real misconfigured rank exits with it,
 *   and a launcher such as pprun then stops the job), and rank 0 keeps waiting for the
 *   rank it lacks. What still cannot be decided safely without a token: a forged hello
 *   that is well-formed (right world, a free rank, the same config — the config is
 *   printed by every run) takes that rank's place first; only the token prevents that.
 * - A hello names its job (DistEnv.job: the SLURM job and step, or torchrun's run id).
 *   A rank of another job that reaches this job's port (two jobs on one node with the
 *   same port) is refused alone, token or not, with a message that says so; its own
 *   job then fails, and this one keeps waiting for its ranks.
 * - When rank 0 times out it names only the ranks that never completed their hello,
 *   and the connections it refused meanwhile. */

#define RDZV_MAGIC 0x76727070u /* "pprv" */
#define RDZV_VERSION 3u /* 3: the hello names the job (DistEnv.job) */
#define MESH_MAGIC 0x6d737070u /* "ppsm" */
#define RDZV_HOST 80
#define ROOT_NOTES 3           /* refused connections recalled in the timeout message */

typedef struct {
    uint32_t magic, version;
    int32_t rank, world;
    uint32_t listen_port; /* the rank's mesh listen port */
    uint32_t job_len;     /* bytes of job identity that follow (< DIST_JOB_MAX) ... */
    uint32_t cfg_len;     /* ... then bytes of config text */
} RdzvHello;

typedef struct {
    uint32_t magic;
    int32_t status; /* PP_OK: a table of `world` RdzvEntry follows; else `len` bytes of text */
    uint32_t len, pad;
} RdzvReply;

typedef struct {
    uint32_t port;
    char host[RDZV_HOST]; /* numeric; "" for rank 0 = the address you reached it at */
} RdzvEntry;

typedef struct {
    uint32_t magic;
    int32_t rank, world, channel;
} MeshHello;

/* ---------------------------------------------------------------- rank 0's side -- */

/* Rank 0's listening socket at MASTER_ADDR:rdzv_port (see dist_connect); *wide says
 * whether it listens beyond loopback. */
static int root_listen(const DistEnv *e, int *out, int *wide, char *err, size_t n) {
    struct addrinfo *res, *ai;
    int rc = dist_resolve(e->master_addr, e->rdzv_port, 0, &res, err, n), one = 1, zero = 0;
    int eno = 0;
    if (rc) return rc;
    for (ai = res; ai; ai = ai->ai_next) {
        struct sockaddr_storage ss;
        socklen_t len = ai->ai_addrlen;
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        memcpy(&ss, ai->ai_addr, len);
        /* ranks on other hosts, or an address that may not be this host's own (a
         * service IP, LOCAL_WORLD_SIZE unset): listen everywhere; loopback on one node
         * stays on loopback */
        *wide = e->local_world < e->world || !dist_addr_is_loopback(ai->ai_addr);
        if (*wide) {
            if (ss.ss_family == AF_INET6) {
                ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            } else {
                ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
            }
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&ss, len) == 0 && listen(fd, DIST_BACKLOG) == 0) {
            freeaddrinfo(res);
            *out = fd;
            return PP_OK;
        }
        eno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return pp_errf(err, n, PP_ERUNTIME, "rank 0 cannot listen on %s:%d: %s%s", e->master_addr,
                   e->rdzv_port, eno ? strerror(eno) : "no usable address",
                   eno == EADDRINUSE ? " — another program (or an earlier run) uses that port; "
                                       "set MASTER_PORT (or PPTRAIN_RDZV_PORT) to a free port"
                                     : " — check MASTER_ADDR: it must name this host (rank 0's)");
}

/* What rank 0 learns while the other ranks join. */
typedef struct {
    const DistEnv *e;
    const char *cfg;
    RdzvEntry *tab;
    int *fds;              /* [world] admitted ranks' rendezvous connections, -1 = not yet */
    int extra[8], n_extra; /* refused ranks (with a token) that still get the verdict */
    int joined;            /* ranks admitted, rank 0 included */
    int stop;              /* a verdict is in that ends the rendezvous at once */
    int status, fail_rank; /* first failure, by rank (0 = the launch itself is wrong) */
    char msg[PP_ERR_MAX];
    char notes[ROOT_NOTES][PP_ERR_MAX / 4]; /* refused connections (without a token) */
    int n_notes, n_refused;
} RootState;

static void root_fail(RootState *st, int rank, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void root_fail(RootState *st, int rank, int status, const char *fmt, ...) {
    va_list ap;
    if (rank >= st->fail_rank) return;
    st->fail_rank = rank;
    st->status = status;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
}

static long root_body_len(void *ctx, const void *hdr, char *why, size_t n) {
    RdzvHello h;
    memcpy(&h, hdr, sizeof h);
    if (h.magic != RDZV_MAGIC || h.version != RDZV_VERSION)
        return pp_errf(why, n, -1, "its hello is not a pptrain rank's (version %u, this rank "
                       "speaks %u)", h.magic == RDZV_MAGIC ? h.version : 0, RDZV_VERSION);
    if (h.cfg_len > DIST_CONFIG_MAX || h.job_len >= DIST_JOB_MAX)
        return pp_errf(why, n, -1, "its hello announces %u bytes of config and %u of job "
                       "identity, more than the %d and %d a rank may send", h.cfg_len,
                       h.job_len, DIST_CONFIG_MAX, DIST_JOB_MAX - 1);
    return (long)h.job_len + (long)h.cfg_len;
}

/* The job identity at the start of a hello's body, NUL-terminated into job[DIST_JOB_MAX]
 * (root_body_len checked its length). */
static void hello_job(const RdzvHello *h, const char *body, char *job) {
    memcpy(job, body, h->job_len);
    job[h->job_len] = '\0';
}

/* A hello of another job's rank (the jobs share rank 0's port): the message, which reads
 * right for both sides (rank 0 logs it, the other job's rank exits with it). */
static int root_other_job(const DistEnv *e, int rank, const char *job, char *msg, size_t n) {
    return pp_errf(msg, n, PP_EUSAGE, "rank %d of %s reached the rendezvous of another job "
                   "(%s) at %s:%d: the two jobs use the same rendezvous port — give each job "
                   "its own MASTER_PORT (under SLURM leave it unset: pptrain derives one from "
                   "the job and step)", rank, job[0] ? job : "a job without an id",
                   e->job[0] ? e->job : "without an id", e->master_addr, e->rdzv_port);
}

/* What is wrong with a hello (h, its body: job identity, config text) for this job: 0
 * if nothing, else a status, the message into msg and into *rank the rank root_fail
 * orders it by (0 for a world size or rank that does not fit; -1 for a rank of another
 * job, which is refused alone, token or not: it is not this job's misconfigured rank). */
static int root_judge(const RootState *st, const RdzvHello *h, const char *body, int *rank,
                      char *msg, size_t n) {
    const DistEnv *e = st->e;
    char where[PP_ERR_MAX / 2], job[DIST_JOB_MAX];
    const char *text = body + h->job_len;
    int r = h->rank;
    *rank = 0;
    hello_job(h, body, job);
    if (strcmp(job, e->job) != 0) return *rank = -1, root_other_job(e, r, job, msg, n);
    if (h->world != e->world)
        return pp_errf(msg, n, PP_EUSAGE, "rank %d was launched with WORLD_SIZE=%d but rank 0 "
                       "with WORLD_SIZE=%d — launch every rank with the same world size",
                       r, h->world, e->world);
    if (r < 0 || r >= e->world)
        return pp_errf(msg, n, PP_EUSAGE, "a process claims rank %d, outside 0..%d — check "
                       "RANK (or SLURM_PROCID) of every process", r, e->world - 1);
    if (r == 0 || st->fds[r] >= 0)
        return pp_errf(msg, n, PP_EUSAGE, "two processes claim rank %d (of %d) — check RANK "
                       "(or SLURM_PROCID) of every process", r, e->world);
    *rank = r;
    if (dist_config_diff(text, st->cfg, where, sizeof where))
        return pp_errf(msg, n, PP_EUSAGE, "rank %d's config differs from rank 0's at %s — "
                       "launch every rank with the same config and --set flags", r, where);
    return PP_OK;
}

/* Tell a refused process why, without waiting (the reply fits a socket's buffer). */
static void root_refuse_now(int fd, const char *msg) {
    RdzvReply rep = {RDZV_MAGIC, PP_EUSAGE, (uint32_t)strlen(msg), 0};
    char buf[sizeof rep + PP_ERR_MAX];
    memcpy(buf, &rep, sizeof rep);
    memcpy(buf + sizeof rep, msg, rep.len);
    if (send(fd, buf, sizeof rep + rep.len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* it is dropped either way */
    }
}

/* A connection proved the token (or the job has none) and said hello: admit it, or
 * decide per [Note: rendezvous under attack]. */
static int root_ready(void *ctx, DoorConn *c, char *why, size_t n) {
    RootState *st = ctx;
    RdzvHello h;
    char msg[PP_ERR_MAX / 2];
    int rank, status;
    memcpy(&h, c->hdr, sizeof h);
    status = root_judge(st, &h, c->body, &rank, msg, sizeof msg);
    if (status == PP_OK || (st->e->token[0] && rank > 0)) { /* a config difference: */
        if (status != PP_OK) root_fail(st, rank, status, "%s", msg); /* everyone hears it */
        st->fds[h.rank] = c->fd;
        st->joined++;
        st->tab[h.rank].port = h.listen_port;
        dist_peer_host(c->fd, st->tab[h.rank].host, sizeof st->tab[h.rank].host);
        c->fd = -1;
        return DOOR_TAKEN;
    }
    /* an authenticated process that cannot be part of this job */
    if (st->e->token[0] && rank == 0) {
        root_fail(st, 0, status, "%s", msg);
        if (st->n_extra < (int)(sizeof st->extra / sizeof st->extra[0])) {
            st->extra[st->n_extra++] = c->fd;
            c->fd = -1;
        }
        st->stop = 1;
        return c->fd < 0 ? DOOR_TAKEN : DOOR_DROP;
    }
    root_refuse_now(c->fd, msg);
    st->n_refused++;
    if (st->n_notes < ROOT_NOTES)
        snprintf(st->notes[st->n_notes++], sizeof st->notes[0], "%s: %.160s", c->addr, msg);
    return pp_errf(why, n, DOOR_DROP, "refused: %s (%s)", msg, rank < 0
                   ? "rank 0 keeps waiting for this job's own ranks"
                   : "without PPTRAIN_JOB_TOKEN rank 0 cannot tell a misconfigured rank from "
                     "a forged hello, so it keeps waiting for the real one");
}

static int root_done(void *ctx) {
    RootState *st = ctx;
    return st->stop || st->joined == st->e->world;
}

/* Send the verdict (the table, or the failure text) to one joined process by deadline. */
static int root_tell(const RootState *st, int fd, double deadline) {
    RdzvReply rep = {RDZV_MAGIC, st->status, 0, 0};
    const void *body = st->status == PP_OK ? (const void *)st->tab : (const void *)st->msg;
    size_t so = 0, ro = 0, bo = 0;
    rep.len = st->status == PP_OK ? (uint32_t)(st->e->world * sizeof *st->tab)
                                  : (uint32_t)strlen(st->msg);
    if (dist_xfer_part(fd, &rep, sizeof rep, &so, NULL, 0, &ro, 0, deadline, NULL, 0)) return -1;
    return dist_xfer_part(fd, body, rep.len, &bo, NULL, 0, &ro, 0, deadline, NULL, 0) ? -1 : 0;
}

/* The timeout's message: the ranks that never joined, and what was refused meanwhile. */
static void root_timeout(RootState *st, double timeout) {
    const DistEnv *e = st->e;
    char missing[256] = "", notes[PP_ERR_MAX / 2] = "";
    size_t off = 0, k = 0;
    for (int r = 1; r < e->world && off < sizeof missing - 8; r++)
        if (st->fds[r] < 0)
            off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d",
                                    off ? ", " : "", r);
    for (int i = 0; i < st->n_notes && k < sizeof notes; i++)
        k += (size_t)snprintf(notes + k, sizeof notes - k, "%s%s", i ? "; " : "", st->notes[i]);
    root_fail(st, 0, PP_ERUNTIME, "timed out after %g s waiting for rank(s) %s to join the "
              "rendezvous at %s:%d — did every rank start, with the same MASTER_ADDR, "
              "MASTER_PORT and PPTRAIN_JOB_TOKEN?%s%.*s%s", timeout, missing, e->master_addr,
              e->rdzv_port, st->n_refused ? " (refused meanwhile: " : "", (int)k, notes,
              st->n_refused ? ")" : "");
}

/* Rank 0's side of the rendezvous: admit world-1 ranks on lfd, then tell them all. */
static int rdzv_root(const DistEnv *e, const char *cfg, double timeout, int lfd,
                     RdzvEntry *tab, char *err, size_t n) {
    RootState st;
    Door d = {.lfd = lfd, .purpose = AUTH_RDZV, .token = e->token, .what = "the rendezvous",
              .hdr_len = sizeof(RdzvHello), .body_len = root_body_len, .ready = root_ready,
              .done = root_done, .ctx = &st};
    double end = pp_now() + timeout, tell_end;
    int lost = -1;
    memset(&st, 0, sizeof st);
    st.e = e;
    st.cfg = cfg;
    st.tab = tab;
    st.fds = pp_malloc(e->world * sizeof(int));
    for (int r = 0; r < e->world; r++) st.fds[r] = -1;
    st.joined = 1;
    st.fail_rank = INT_MAX;
    if (!door_run(&d, end)) root_timeout(&st, timeout);
    tell_end = pp_now() + (timeout < 10 ? timeout : 10);
    for (int r = 1; r < e->world; r++)
        if (st.fds[r] >= 0) {
            if (root_tell(&st, st.fds[r], tell_end) != 0 && lost < 0) lost = r;
            close(st.fds[r]);
        }
    for (int i = 0; i < st.n_extra; i++) {
        root_tell(&st, st.extra[i], tell_end);
        close(st.extra[i]);
    }
    free(st.fds);
    if (st.status != PP_OK) return pp_errf(err, n, st.status, "%s", st.msg);
    if (lost >= 0)
        return pp_errf(err, n, PP_ERUNTIME, "lost connection to rank %d during the rendezvous "
                       "— see rank %d's log", lost, lost);
    return PP_OK;
}

/* ------------------------------------------------------------ the other ranks -- */

/* A listening socket on an ephemeral port of the local address of connection fd.
 * [Note: loopback on rank 0's node] In a multi-node job, a rank on rank 0's node may
 * reach rank 0 over loopback (MASTER_ADDR is a hostname that resolves to 127.0.1.1
 * there, as Debian's /etc/hosts does): it then listens on every address, and ranks on
 * other nodes dial it at the address they reach rank 0 at (mesh_dial). */
static int member_listen(int fd, int multi_node, int *lfd, int *port, char *err, size_t n) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int l;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) goto fail;
    if (multi_node && dist_addr_is_loopback((struct sockaddr *)&ss)) {
        if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
        else ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
    }
    if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    else ((struct sockaddr_in *)&ss)->sin_port = 0;
    l = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0) goto fail;
    if (bind(l, (struct sockaddr *)&ss, len) != 0 || listen(l, DIST_BACKLOG) != 0 ||
        getsockname(l, (struct sockaddr *)&ss, &len) != 0) {
        close(l);
        goto fail;
    }
    *lfd = l;
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    return PP_OK;
fail:
    return pp_errf(err, n, PP_ERUNTIME, "cannot listen for the other ranks: %s",
                   strerror(errno));
}

/* Connect to host:port by `deadline`, retrying with backoff, and pass the handshake.
 * A connection that closes during the handshake (rank 0 dropped it, or is not up yet
 * behind a proxy) is retried; a refusal or a failed proof is final. While rank 0 cannot
 * be reached, a line every quarter of the timeout (at most 30 s) says so, so that a rank
 * started without its rank 0 (dead, or not launched) shows what it waits for. */
static int member_join(const DistEnv *e, double deadline, double timeout, int *out, char *err,
                       size_t n) {
    double delay = 0.02, every = timeout / 4 < 30 ? timeout / 4 : 30, note = pp_now() + every;
    char last[PP_ERR_MAX / 2] = "no attempt";
    for (;;) {
        struct addrinfo *res, *ai;
        int rc = dist_resolve(e->master_addr, e->rdzv_port, 0, &res, err, n);
        if (rc == PP_OK) {
            for (ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0), eno;
                double cend = pp_now() + 5.0 < deadline ? pp_now() + 5.0 : deadline;
                DistAuthConn a;
                if (fd < 0) continue;
                eno = dist_connect_by(fd, ai->ai_addr, ai->ai_addrlen, cend);
                if (eno == 0 &&
                    dist_auth_client(&a, fd, AUTH_RDZV, e->token, deadline) == AUTH_DONE) {
                    freeaddrinfo(res);
                    *out = fd;
                    return PP_OK;
                }
                close(fd);
                if (eno == 0 && a.fail != AUTH_CLOSED && a.fail != AUTH_IO) {
                    freeaddrinfo(res);
                    return pp_errf(err, n, a.fail == AUTH_GARBAGE ? PP_ERUNTIME : PP_EUSAGE,
                                   "cannot join rank 0 at %s:%d: %s", e->master_addr,
                                   e->rdzv_port, a.err);
                }
                snprintf(last, sizeof last, "%s", eno ? strerror(eno) : a.err);
            }
            freeaddrinfo(res);
        } else {
            snprintf(last, sizeof last, "%s", err ? err : "cannot resolve");
        }
        if (pp_now() + delay > deadline) break;
        if (pp_now() >= note) {
            dist_warn("rank 0 at %s:%d not reached yet (%s); trying until "
                      "runtime.timeout_s = %g s runs out (%.0f s left)",
                      e->master_addr, e->rdzv_port, last, timeout, deadline - pp_now());
            note = pp_now() + every;
        }
        dist_backoff(&delay);
    }
    return pp_errf(err, n, PP_ERUNTIME, "could not reach rank 0 at %s:%d in time (%s) — is "
                   "rank 0 running, MASTER_ADDR/MASTER_PORT the same for every rank, and the "
                   "port reachable from this host?", e->master_addr, e->rdzv_port, last);
}

/* Receive rank 0's verdict on connection fd by deadline: the table, or its message.
 * *lost = 1 when the connection ended before a byte of it came: rank 0 did not admit
 * this connection (or died), and joining again may work. */
static int member_verdict(const DistEnv *e, int fd, double deadline, RdzvEntry *tab,
                          int *lost, char *err, size_t n) {
    RdzvReply rep;
    char why[128] = "", text[PP_ERR_MAX];
    size_t so = 0, ro = 0;
    int io = dist_xfer_part(fd, NULL, 0, &so, &rep, sizeof rep, &ro, 0, deadline, why, sizeof why);
    *lost = (io == DIST_IO_CLOSED || io == DIST_IO_ERROR) && ro == 0;
    if (io == DIST_IO_OK && rep.magic != RDZV_MAGIC) io = DIST_IO_ERROR;
    if (io == DIST_IO_OK && rep.status != PP_OK) {
        uint32_t len = rep.len < sizeof text - 1 ? rep.len : (uint32_t)sizeof text - 1;
        ro = 0;
        io = dist_xfer_part(fd, NULL, 0, &so, text, len, &ro, 0, deadline, why, sizeof why);
        text[io == DIST_IO_OK ? len : 0] = '\0';
        return pp_errf(err, n, rep.status == PP_EUSAGE ? PP_EUSAGE : PP_ERUNTIME, "%s", text);
    }
    if (io == DIST_IO_OK && rep.len != e->world * sizeof *tab) io = DIST_IO_ERROR;
    ro = 0;
    if (io == DIST_IO_OK)
        io = dist_xfer_part(fd, NULL, 0, &so, tab, rep.len, &ro, 0, deadline, why, sizeof why);
    if (io == DIST_IO_TIMEOUT)
        return pp_errf(err, n, PP_ERUNTIME, "rank 0 did not finish the rendezvous in time — "
                       "are all %d ranks started? see rank 0's log", e->world);
    if (io != DIST_IO_OK)
        return pp_errf(err, n, PP_ERUNTIME,
                       "lost connection to rank 0 during the rendezvous (%s) — see rank 0's log",
                       io == DIST_IO_ERROR && !*lost ? "bad reply" : why);
    for (int r = 0; r < e->world; r++) tab[r].host[RDZV_HOST - 1] = '\0';
    return PP_OK;
}

/* Send hello h and its body (job identity, config text) on fd by deadline; *lost = 1
 * when the connection ended (rank 0 dropped it, or died). */
static int member_hello(const DistEnv *e, int fd, const RdzvHello *h, const char *cfg,
                        double deadline, int *lost, char *err, size_t n) {
    size_t so = 0, ro = 0, co = 0, jo = 0;
    char why[128];
    int io = dist_xfer_part(fd, h, sizeof *h, &so, NULL, 0, &ro, 0, deadline, why, sizeof why);
    if (io == DIST_IO_OK)
        io = dist_xfer_part(fd, e->job, h->job_len, &jo, NULL, 0, &ro, 0, deadline, why,
                            sizeof why);
    if (io == DIST_IO_OK)
        io = dist_xfer_part(fd, cfg, h->cfg_len, &co, NULL, 0, &ro, 0, deadline, why, sizeof why);
    *lost = io == DIST_IO_CLOSED || io == DIST_IO_ERROR;
    if (io != DIST_IO_OK)
        return pp_errf(err, n, PP_ERUNTIME, "lost connection to rank 0 during the rendezvous "
                       "(%s) — see rank 0's log", why);
    return PP_OK;
}

/* A rank > 0's side: join rank 0, announce the listen port and config, get the table.
 * *root gets rank 0's address (the one this rank reached it at). A connection that ends
 * before rank 0's verdict (a door sheds it under a flood of connections, [Note: a flood
 * of connections] in dist_net.c) is made again, with backoff, until timeout. */
static int rdzv_member(const DistEnv *e, const char *cfg, double timeout, int *lfd,
                       RdzvEntry *tab, struct sockaddr_storage *root, socklen_t *rootlen,
                       char *err, size_t n) {
    RdzvHello h = {RDZV_MAGIC, RDZV_VERSION, e->rank, e->world, 0, (uint32_t)strlen(e->job),
                   (uint32_t)strlen(cfg)};
    double t0 = pp_now(), end = t0 + timeout, delay = 0.02;
    int port = 0, rc;
    for (int again = 0;; again++) {
        int fd = -1, lost = 0;
        if ((rc = member_join(e, end, timeout, &fd, err, n))) return rc;
        if (*lfd < 0) /* the first time only: every hello announces the same port */
            rc = member_listen(fd, e->local_world < e->world, lfd, &port, err, n);
        h.listen_port = (uint32_t)port;
        *rootlen = sizeof *root;
        if (rc == PP_OK && getpeername(fd, (struct sockaddr *)root, rootlen) != 0)
            rc = pp_errf(err, n, PP_ERUNTIME, "getpeername: %s", strerror(errno));
        if (rc == PP_OK) rc = member_hello(e, fd, &h, cfg, end, &lost, err, n);
        /* Rank 0 answers once every rank joined: allow it its own timeout and then some. */
        if (rc == PP_OK) rc = member_verdict(e, fd, t0 + 2 * timeout + 5, tab, &lost, err, n);
        close(fd);
        if (!lost || pp_now() + delay > end) return rc;
        if (again == 0)
            dist_warn("the connection to rank 0 ended before rank 0 admitted this rank (a "
                      "flood of connections there? see its log); joining again until the "
                      "rendezvous's deadline (runtime.timeout_s = %g)", timeout);
        dist_backoff(&delay);
    }
}

/* ------------------------------------------------------------------------ mesh -- */

/* The address to dial rank p at: its table entry, or rank 0's own for p = 0 ([Note:
 * loopback on rank 0's node]). */
static int mesh_addr(int p, const RdzvEntry *tab, const struct sockaddr_storage *root,
                     socklen_t rootlen, struct sockaddr_storage *sa, socklen_t *len,
                     char *err, size_t n) {
    struct addrinfo *res = NULL;
    int rc;
    memcpy(sa, root, rootlen);
    *len = rootlen;
    if (p == 0) return PP_OK;
    if ((rc = dist_resolve(tab[p].host, (int)tab[p].port, 1, &res, err, n))) return rc;
    if (!dist_addr_is_loopback(res->ai_addr) ||
        dist_addr_is_loopback((const struct sockaddr *)root)) {
        memcpy(sa, res->ai_addr, res->ai_addrlen);
        *len = res->ai_addrlen;
    } else if (sa->ss_family == AF_INET6) { /* rank p is on rank 0's node, reached over */
        ((struct sockaddr_in6 *)sa)->sin6_port = htons(tab[p].port); /* loopback there */
    } else {
        ((struct sockaddr_in *)sa)->sin_port = htons(tab[p].port);
    }
    freeaddrinfo(res);
    return PP_OK;
}

/* One connection to rank p at sa for channel ch by deadline: connect, authenticate,
 * announce. Returns PP_OK with *out, or an error with *again = 1 when it ended before
 * it was made (rank p's door shed it under a flood of connections, [Note: a flood of
 * connections] in dist_net.c): a new one may get through. A refusal (nobody listens:
 * rank p is gone) or a failed proof is final. */
static int mesh_dial_one(const DistEnv *e, int p, int ch, const struct sockaddr *sa,
                         socklen_t len, double deadline, int *out, int *again, char *err,
                         size_t n) {
    MeshHello h = {MESH_MAGIC, e->rank, e->world, ch};
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = PP_OK, io;
    int eno = fd < 0 ? errno : dist_connect_by(fd, sa, len, deadline);
    char where[DIST_ADDR_MAX], why[256] = "";
    size_t so = 0, ro = 0;
    DistAuthConn a;
    dist_addr_str(sa, len, where, sizeof where);
    *again = eno == ECONNRESET || eno == ECONNABORTED;
    if (eno != 0) {
        rc = pp_errf(err, n, PP_ERUNTIME, "cannot connect to rank %d at %s: %s — is that "
                     "address reachable from this host?", p, where, strerror(eno));
    } else if (dist_auth_client(&a, fd, AUTH_MESH, e->token, deadline) != AUTH_DONE) {
        *again = a.fail == AUTH_CLOSED || a.fail == AUTH_IO;
        rc = pp_errf(err, n, a.fail == AUTH_MISMATCH || a.fail == AUTH_BAD_MAC ? PP_EUSAGE
                                                                             : PP_ERUNTIME,
                     "cannot connect to rank %d at %s: %s", p, where, a.err);
    } else if ((io = dist_xfer_part(fd, &h, sizeof h, &so, NULL, 0, &ro, 0, deadline, why,
                                    sizeof why)) != DIST_IO_OK) {
        *again = io == DIST_IO_CLOSED || io == DIST_IO_ERROR;
        rc = pp_errf(err, n, PP_ERUNTIME, "lost connection to rank %d at %s while connecting "
                     "(%s) — see its log", p, where, why);
    }
    if (rc != PP_OK && fd >= 0) close(fd);
    if (rc == PP_OK) *out = fd;
    return rc;
}

/* Connect to rank p twice (data and collective channel), each made again with backoff
 * until deadline when it ends before it is made (mesh_dial_one). */
static int mesh_dial(const DistEnv *e, int p, const RdzvEntry *tab,
                     const struct sockaddr_storage *root, socklen_t rootlen, double deadline,
                     DistMesh *m, char *err, size_t n) {
    struct sockaddr_storage sa;
    socklen_t len;
    int rc = mesh_addr(p, tab, root, rootlen, &sa, &len, err, n);
    for (int ch = 0; ch < 2 && rc == PP_OK; ch++) {
        int *slot = &(ch == 0 ? m->data_fd : m->coll_fd)[p], again = 1;
        double delay = 0.02;
        for (int tries = 0; again; tries++) {
            rc = mesh_dial_one(e, p, ch, (struct sockaddr *)&sa, len, deadline, slot, &again,
                               err, n);
            if (rc == PP_OK || !again || pp_now() + delay > deadline) break;
            if (tries == 0)
                dist_warn("%s; connecting again until the deadline (runtime.timeout_s)", err);
            dist_backoff(&delay);
        }
    }
    return rc;
}

typedef struct {
    const DistEnv *e;
    DistMesh *m;
    int need; /* connections of higher ranks still to come */
} MeshState;

static long mesh_body_len(void *ctx, const void *hdr, char *why, size_t n) {
    const MeshState *ms = ctx;
    MeshHello h;
    memcpy(&h, hdr, sizeof h);
    if (h.magic != MESH_MAGIC || h.world != ms->e->world || h.rank <= ms->e->rank ||
        h.rank >= ms->e->world || (h.channel != 0 && h.channel != 1))
        return pp_errf(why, n, -1, "its mesh hello does not fit this job (claims rank %d of "
                       "%d, channel %d; this is rank %d of %d)", h.rank, h.world, h.channel,
                       ms->e->rank, ms->e->world);
    return 0;
}

static int mesh_ready(void *ctx, DoorConn *c, char *why, size_t n) {
    MeshState *ms = ctx;
    MeshHello h, ack;
    int *slot;
    memcpy(&h, c->hdr, sizeof h);
    slot = &(h.channel == 0 ? ms->m->data_fd : ms->m->coll_fd)[h.rank];
    if (*slot >= 0)
        return pp_errf(why, n, DOOR_DROP,
                       "rank %d's %s connection is already made (a second process claims rank %d)",
                       h.rank, h.channel ? "collective" : "data", h.rank);
    ack = (MeshHello){MESH_MAGIC, ms->e->rank, ms->e->world, h.channel};
    if (dist_xfer(c->fd, &ack, sizeof ack, NULL, 0, 1.0, why, n) != DIST_IO_OK) return DOOR_DROP;
    *slot = c->fd;
    c->fd = -1;
    ms->need--;
    return DOOR_TAKEN;
}

static int mesh_done(void *ctx) { return ((MeshState *)ctx)->need == 0; }

/* Accept the two connections of every higher rank on lfd and acknowledge each. */
static int mesh_accept(const DistEnv *e, int lfd, double deadline, double timeout, DistMesh *m,
                       char *err, size_t n) {
    MeshState ms = {e, m, 2 * (e->world - 1 - e->rank)};
    Door d = {.lfd = lfd, .purpose = AUTH_MESH, .token = e->token,
              .what = "this rank's mesh port", .hdr_len = sizeof(MeshHello),
              .body_len = mesh_body_len, .ready = mesh_ready, .done = mesh_done, .ctx = &ms};
    char missing[256] = "";
    size_t off = 0;
    if (door_run(&d, deadline)) return PP_OK;
    for (int p = e->rank + 1; p < e->world && off < sizeof missing - 8; p++)
        if (m->data_fd[p] < 0 || m->coll_fd[p] < 0)
            off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d",
                                    off ? ", " : "", p);
    return pp_errf(err, n, PP_ERUNTIME, "timed out after %g s waiting for rank(s) %s to connect "
                   "to rank %d — see their logs", timeout, missing, e->rank);
}

/* Wait for the acknowledgements of the lower ranks on the connections this rank made. */
static int mesh_confirm(const DistEnv *e, double deadline, DistMesh *m, char *err, size_t n) {
    for (int p = 0; p < e->rank; p++)
        for (int ch = 0; ch < 2; ch++) {
            MeshHello h;
            char why[128] = "bad acknowledgement";
            int fd = (ch == 0 ? m->data_fd : m->coll_fd)[p];
            size_t so = 0, ro = 0;
            int io = dist_xfer_part(fd, NULL, 0, &so, &h, sizeof h, &ro, 0, deadline, why,
                                    sizeof why);
            if (io != DIST_IO_OK || h.magic != MESH_MAGIC || h.rank != p || h.channel != ch)
                return pp_errf(err, n, PP_ERUNTIME, "lost connection to rank %d while "
                               "connecting (%s) — see rank %d's log", p, why, p);
        }
    return PP_OK;
}

void dist_mesh_close(DistMesh *m) {
    for (int p = 0; p < m->world; p++) {
        if (m->data_fd && m->data_fd[p] >= 0) close(m->data_fd[p]);
        if (m->coll_fd && m->coll_fd[p] >= 0) close(m->coll_fd[p]);
    }
    free(m->data_fd);
    free(m->coll_fd);
    m->data_fd = m->coll_fd = NULL;
}

int dist_connect(const DistEnv *e, const char *cfg, double timeout, DistMesh *m, char *err,
                 size_t n) {
    struct sockaddr_storage root;
    socklen_t rootlen = 0;
    RdzvEntry *tab;
    int lfd = -1, rc, wide = 0;
    double mesh_end;
    if (!cfg) cfg = "";
    m->rank = e->rank;
    m->world = e->world;
    m->data_fd = pp_malloc(e->world * sizeof(int));
    m->coll_fd = pp_malloc(e->world * sizeof(int));
    for (int p = 0; p < e->world; p++) m->data_fd[p] = m->coll_fd[p] = -1;
    if (e->world == 1) return PP_OK;
    if (strlen(cfg) > DIST_CONFIG_MAX) {
        dist_mesh_close(m);
        return pp_errf(err, n, PP_EUSAGE, "config text too long for the rendezvous");
    }
    tab = pp_calloc(e->world, sizeof *tab);
    if (e->rank == 0) {
        rc = root_listen(e, &lfd, &wide, err, n);
        if (rc == PP_OK && wide && !e->token[0])
            dist_warn("this job is unauthenticated: rank 0 listens on every address (port %d) "
                      "and any host that reaches it can join the job — export the same "
                      "PPTRAIN_JOB_TOKEN to every rank (e.g. $(openssl rand -hex 32); "
                      "scripts/pprun and the SLURM batch script make one)", e->rdzv_port);
        if (rc == PP_OK) rc = rdzv_root(e, cfg, timeout, lfd, tab, err, n);
    } else {
        rc = rdzv_member(e, cfg, timeout, &lfd, tab, &root, &rootlen, err, n);
    }
    mesh_end = pp_now() + timeout;
    for (int p = 0; p < e->rank && rc == PP_OK; p++)
        rc = mesh_dial(e, p, tab, &root, rootlen, mesh_end, m, err, n);
    if (rc == PP_OK) rc = mesh_accept(e, lfd, mesh_end, timeout, m, err, n);
    if (rc == PP_OK) rc = mesh_confirm(e, mesh_end, m, err, n);
    if (lfd >= 0) close(lfd);
    free(tab);
    if (rc != PP_OK) {
        dist_mesh_close(m);
        return rc;
    }
    for (int p = 0; p < e->world; p++)
        if (p != e->rank) {
            dist_tune_socket(m->data_fd[p]);
            dist_tune_socket(m->coll_fd[p]);
        }
    return PP_OK;
}
