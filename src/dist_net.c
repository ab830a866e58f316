/* dist.c — who am I (environment) and the TCP rendezvous that builds the mesh. */
#define _GNU_SOURCE /* accept4 */
#include "dist.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- environment -- */

/* getenv with "" treated as unset. */
static const char *env_get(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* Parse the variable `name` as an integer in [lo, hi] into *out; *set says whether it
 * was set (when unset *out is left alone). PP_EUSAGE for anything else. */
static int env_int(const char *name, long lo, long hi, int *out, int *set, char *err,
                   size_t n) {
    const char *v = env_get(name);
    char *end;
    long x;
    *set = v != NULL;
    if (!v) return PP_OK;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0' || x < lo || x > hi)
        return pp_errf(err, n, PP_EUSAGE,
                       "%s=%s is not a whole number in [%ld, %ld] — fix the launcher's "
                       "environment (or unset it for a 1-rank run)", name, v, lo, hi);
    *out = (int)x;
    return PP_OK;
}

/* One "count" or "count(xreps)" entry of a tasks-per-node list at *p. */
static int tpn_entry(const char **p, int *count, int *reps, int *plain) {
    char *end;
    long c = strtol(*p, &end, 10), r = 1;
    if (end == *p || c < 1 || c > INT_MAX || **p == '-' || **p == '+') return -1;
    *p = end;
    *plain = 1;
    if (**p == '(') {
        if ((*p)[1] != 'x') return -1;
        r = strtol(*p + 2, &end, 10);
        if (end == *p + 2 || *end != ')' || r < 1 || r > INT_MAX || (*p)[2] == '-')
            return -1;
        *p = end + 1;
        *plain = 0;
    }
    *count = (int)c;
    *reps = (int)r;
    return 0;
}

int dist_parse_tasks_per_node(const char *s, int node, int *ntasks, char *err,
                              size_t errlen) {
    const char *p = s;
    int entries = 0, found = 0, plain = 0, left = node, count = 0, reps = 0;
    if (!s || node < 0) return pp_errf(err, errlen, PP_EUSAGE, "bad tasks-per-node query");
    for (;;) {
        if (tpn_entry(&p, &count, &reps, &plain) != 0)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "tasks-per-node list \"%s\" is malformed (expected forms like "
                           "\"4\", \"2,3\" or \"4(x2),2\")", s);
        entries++;
        if (!found && left < reps) { *ntasks = count; found = 1; }
        if (!found) left -= reps;
        if (*p == '\0') break;
        if (*p++ != ',')
            return pp_errf(err, errlen, PP_EUSAGE, "tasks-per-node list \"%s\" is malformed "
                           "(expected forms like \"4\", \"2,3\" or \"4(x2),2\")", s);
    }
    if (entries == 1 && plain) { *ntasks = count; return PP_OK; } /* "4": every node */
    if (!found)
        return pp_errf(err, errlen, PP_EUSAGE, "tasks-per-node list \"%s\" has no entry "
                       "for node %d (SLURM_NODEID)", s, node);
    return PP_OK;
}

/* RANK/WORLD_SIZE/LOCAL_* as set by torchrun or scripts/pprun. */
static int env_torchrun(DistEnv *e, int has_rank, int has_world, char *err, size_t n) {
    int set, rc;
    if (has_rank != has_world)
        return pp_errf(err, n, PP_EUSAGE, "%s is set but %s is not: a torchrun-style launch "
                       "sets both (unset both for a 1-rank run)",
                       has_rank ? "RANK" : "WORLD_SIZE", has_rank ? "WORLD_SIZE" : "RANK");
    e->source = DIST_SRC_TORCHRUN;
    e->local_rank = e->rank;
    e->local_world = e->world;
    if ((rc = env_int("LOCAL_RANK", 0, INT_MAX, &e->local_rank, &set, err, n))) return rc;
    return env_int("LOCAL_WORLD_SIZE", 1, INT_MAX, &e->local_world, &set, err, n);
}

/* SLURM_* as set by srun for each task. */
static int env_slurm(DistEnv *e, char *err, size_t n) {
    int set, node = 0, rc;
    const char *tpn, *tpn_name = "SLURM_STEP_TASKS_PER_NODE";
    if ((rc = env_int("SLURM_NTASKS", 1, INT_MAX, &e->world, &set, err, n))) return rc;
    if (!set)
        return pp_errf(err, n, PP_EUSAGE, "SLURM_PROCID is set but SLURM_NTASKS is not — "
                       "launch with srun inside the job");
    e->source = DIST_SRC_SLURM;
    e->local_rank = 0;
    if ((rc = env_int("SLURM_LOCALID", 0, INT_MAX, &e->local_rank, &set, err, n))) return rc;
    if ((rc = env_int("SLURM_NODEID", 0, INT_MAX, &node, &set, err, n))) return rc;
    tpn = env_get(tpn_name);
    if (!tpn) tpn = env_get(tpn_name = "SLURM_NTASKS_PER_NODE");
    e->local_world = e->world; /* no list: as if one node */
    if (tpn && dist_parse_tasks_per_node(tpn, node, &e->local_world, err, n) != PP_OK) {
        char inner[PP_ERR_MAX / 2];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return pp_errf(err, n, PP_EUSAGE, "%s: %s", tpn_name, inner);
    }
    return PP_OK;
}

/* MASTER_ADDR, MASTER_PORT and the rendezvous port, once rank and world are known. */
static int env_master(DistEnv *e, char *err, size_t n) {
    const char *addr = env_get("MASTER_ADDR");
    int set, rc, rdzv = 0;
    e->master_port = DIST_DEFAULT_PORT;
    if ((rc = env_int("MASTER_PORT", 1, 65535, &e->master_port, &set, err, n))) return rc;
    if (addr && strlen(addr) >= sizeof e->master_addr)
        return pp_errf(err, n, PP_EUSAGE, "MASTER_ADDR is too long (%zu characters)",
                       strlen(addr));
    if (addr) snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
    if (!addr && e->world > 1)
        return pp_errf(err, n, PP_EUSAGE, "MASTER_ADDR is not set: rank %d of %d needs "
                       "rank 0's host to rendezvous — %s", e->rank, e->world,
                       e->source == DIST_SRC_SLURM
                           ? "export it in the batch script: export MASTER_ADDR=$(scontrol "
                             "show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)"
                           : "launch with scripts/pprun or torchrun, or export it");
    e->under_torchrun = env_get("TORCHELASTIC_RUN_ID") != NULL;
    e->rdzv_port = e->master_port;
    if (e->under_torchrun) {
        if (e->master_port == 65535)
            return pp_errf(err, n, PP_EUSAGE, "MASTER_PORT=65535 leaves no port for "
                           "pptrain's rendezvous under torchrun (it uses MASTER_PORT+1) — "
                           "set PPTRAIN_RDZV_PORT");
        e->rdzv_port = e->master_port + 1;
    }
    return env_int("PPTRAIN_RDZV_PORT", 1, 65535, &e->rdzv_port, &rdzv, err, n);
}

int dist_env_read(DistEnv *e, char *err, size_t n) {
    int has_rank, has_world, rc;
    const char *rname = "RANK", *wname = "WORLD_SIZE";
    memset(e, 0, sizeof *e);
    e->world = e->local_world = 1;
    if ((rc = env_int("RANK", 0, INT_MAX, &e->rank, &has_rank, err, n))) return rc;
    if ((rc = env_int("WORLD_SIZE", 1, INT_MAX, &e->world, &has_world, err, n))) return rc;
    if (has_rank || has_world) {
        rc = env_torchrun(e, has_rank, has_world, err, n);
    } else if ((rc = env_int("SLURM_PROCID", 0, INT_MAX, &e->rank, &has_rank, err, n)) ==
                   PP_OK && has_rank) {
        rc = env_slurm(e, err, n);
        rname = "SLURM_PROCID";
        wname = "SLURM_NTASKS";
    }
    if (rc) return rc;
    if (e->rank >= e->world)
        return pp_errf(err, n, PP_EUSAGE, "%s=%d is not below %s=%d: ranks are numbered 0 "
                       "to %d — fix the launch", rname, e->rank, wname, e->world, e->world - 1);
    if (e->local_world > e->world || e->local_rank >= e->local_world)
        return pp_errf(err, n, PP_EUSAGE, "local rank %d of %d ranks on this node does not "
                       "fit %d ranks in all — check LOCAL_RANK/LOCAL_WORLD_SIZE (or "
                       "SLURM_LOCALID and the tasks per node)", e->local_rank,
                       e->local_world, e->world);
    return env_master(e, err, n);
}

/* ------------------------------------------------------------- config compare -- */

#define KEY_DEPTH 8
#define KEY_LEN 96

typedef struct {
    char key[KEY_DEPTH][KEY_LEN]; /* the enclosing key at each indent level */
} KeyPath;

/* The next line of *s (without '\n' and trailing spaces/'\r'); 0 at the end. */
static int next_line(const char **s, const char **line, size_t *len) {
    const char *p = *s, *e;
    if (!*p) return 0;
    e = strchr(p, '\n');
    if (!e) e = p + strlen(p);
    *s = *e ? e + 1 : e;
    *line = p;
    while (e > p && (e[-1] == ' ' || e[-1] == '\r')) e--;
    *len = (size_t)(e - p);
    return 1;
}

/* Record the key of `line` in kp and write its dotted path and its value. */
static void line_key(KeyPath *kp, const char *line, size_t len, char *path, size_t pn,
                     char *val, size_t vn) {
    size_t ind = 0, klen, off = 0;
    const char *colon;
    int level;
    while (ind < len && line[ind] == ' ') ind++;
    level = (int)(ind / 2) < KEY_DEPTH ? (int)(ind / 2) : KEY_DEPTH - 1;
    colon = memchr(line + ind, ':', len - ind);
    klen = colon ? (size_t)(colon - line) - ind : len - ind;
    snprintf(kp->key[level], KEY_LEN, "%.*s", (int)klen, line + ind);
    if (colon) {
        const char *v = colon + 1;
        while (v < line + len && *v == ' ') v++;
        snprintf(val, vn, "%.*s", (int)(line + len - v), v);
    } else {
        snprintf(val, vn, "%s", "");
    }
    path[0] = '\0';
    for (int i = 0; i <= level && off < pn; i++)
        off += (size_t)snprintf(path + off, pn - off, "%s%s", i ? "." : "", kp->key[i]);
}

int dist_config_diff(const char *a, const char *b, char *where, size_t n) {
    KeyPath ka, kb;
    char pa[256] = "", pb[256] = "", va[192] = "", vb[192] = "";
    const char *la, *lb;
    size_t na, nb;
    memset(&ka, 0, sizeof ka);
    memset(&kb, 0, sizeof kb);
    for (;;) {
        int ha = next_line(&a, &la, &na), hb = next_line(&b, &lb, &nb);
        if (!ha && !hb) return 0;
        if (ha) line_key(&ka, la, na, pa, sizeof pa, va, sizeof va);
        if (hb) line_key(&kb, lb, nb, pb, sizeof pb, vb, sizeof vb);
        if (ha && hb && na == nb && memcmp(la, lb, na) == 0) continue;
        if (!hb) snprintf(where, n, "%s: %s vs (missing)", pa, va);
        else if (!ha) snprintf(where, n, "%s: (missing) vs %s", pb, vb);
        else if (strcmp(pa, pb) == 0) snprintf(where, n, "%s: %s vs %s", pa, va, vb);
        else snprintf(where, n, "%s: %s vs %s: %s", pa, va, pb, vb);
        return 1;
    }
}

/* ------------------------------------------------------------- socket helpers -- */

/* A poll() timeout for `left` seconds, at most one second (callers loop). */
static int poll_ms(double left) {
    return left > 1.0 ? 1000 : left > 0 ? (int)(left * 1000) + 1 : 0;
}

static int io_again(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

static int io_errno(char *why, size_t n) {
    int closed = errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN;
    return pp_errf(why, n, closed ? DIST_IO_CLOSED : DIST_IO_ERROR, "%s", strerror(errno));
}

/* dist_xfer's loop; with `until`, it ends once rbuf is full. */
static int xfer(int fd, const void *sbuf, size_t sn, size_t *sent, void *rbuf, size_t rn,
                int until, double timeout_s, char *why, size_t whylen) {
    const char *sp = sbuf;
    char *rp = rbuf;
    size_t so = 0, ro = 0;
    double last = pp_now();
    *sent = 0;
    while ((so < sn && !(until && ro == rn)) || ro < rn) {
        struct pollfd pfd = {fd, (short)((so < sn ? POLLOUT : 0) | (ro < rn ? POLLIN : 0)), 0};
        double left = last + timeout_s - pp_now();
        int r;
        if (left <= 0)
            return pp_errf(why, whylen, DIST_IO_TIMEOUT, "nothing arrived for %g s", timeout_s);
        r = poll(&pfd, 1, poll_ms(left));
        if (r < 0 && errno != EINTR) return io_errno(why, whylen);
        if (r <= 0) continue;
        if (ro < rn && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t k = recv(fd, rp + ro, rn - ro, MSG_DONTWAIT);
            if (k == 0)
                return pp_errf(why, whylen, DIST_IO_CLOSED, "connection closed by the peer");
            if (k < 0 && !io_again()) return io_errno(why, whylen);
            if (k > 0) ro += (size_t)k, last = pp_now();
        }
        if (so < sn && (pfd.revents & (POLLOUT | POLLHUP | POLLERR))) {
            ssize_t k = send(fd, sp + so, sn - so, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k < 0 && !io_again()) return io_errno(why, whylen);
            if (k > 0) so += (size_t)k, *sent = so, last = pp_now();
        }
    }
    return DIST_IO_OK;
}

int dist_xfer(int fd, const void *sbuf, size_t sn, void *rbuf, size_t rn,
              double timeout_s, char *why, size_t whylen) {
    size_t sent;
    return xfer(fd, sbuf, sn, &sent, rbuf, rn, 0, timeout_s, why, whylen);
}

int dist_xfer_until(int fd, const void *sbuf, size_t sn, size_t *sent, void *rbuf,
                    size_t rn, double timeout_s, char *why, size_t whylen) {
    return xfer(fd, sbuf, sn, sent, rbuf, rn, 1, timeout_s, why, whylen);
}

/* "host:port" or "[v6host]:port" of a socket address. */
static void addr_str(const struct sockaddr *sa, socklen_t len, char *buf, size_t n) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, n, "(unknown address)");
        return;
    }
    snprintf(buf, n, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

static int resolve(const char *host, int port, int numeric, struct addrinfo **res,
                   char *err, size_t n) {
    struct addrinfo hints;
    char serv[16];
    int rc;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (numeric ? AI_NUMERICHOST : 0);
    snprintf(serv, sizeof serv, "%d", port);
    rc = getaddrinfo(host, serv, &hints, res);
    if (rc != 0)
        return pp_errf(err, n, PP_ERUNTIME, "cannot resolve \"%s\": %s — check MASTER_ADDR",
                       host, gai_strerror(rc));
    return PP_OK;
}

/* Make a connected/accepted socket ready for the mesh: no Nagle, non-blocking. */
static void tune_socket(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Connect fd to addr within timeout_s (non-blocking connect + poll). 0 or errno. */
static int connect_timed(int fd, const struct sockaddr *sa, socklen_t len, double timeout_s) {
    struct pollfd pfd = {fd, POLLOUT, 0};
    double end = pp_now() + timeout_s;
    int soerr = 0, r = 0;
    socklen_t sl = sizeof soerr;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (connect(fd, sa, len) == 0) return 0;
    if (errno != EINPROGRESS) return errno;
    while (r == 0 && pp_now() < end)
        if ((r = poll(&pfd, 1, poll_ms(end - pp_now()))) < 0 && errno == EINTR) r = 0;
    if (r <= 0) return ETIMEDOUT;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) return errno;
    return soerr;
}

/* Accept one connection on lfd, waiting at most timeout_s; -1 on timeout/error. */
static int accept_timed(int lfd, double timeout_s) {
    struct pollfd pfd = {lfd, POLLIN, 0};
    double end = pp_now() + timeout_s;
    for (;;) {
        double left = end - pp_now();
        int r;
        if (left <= 0) return -1;
        r = poll(&pfd, 1, poll_ms(left));
        if (r < 0 && errno != EINTR) return -1;
        if (r > 0) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 || !io_again()) return fd;
        }
    }
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Connect to host:port, retrying with backoff until timeout_s. */
static int connect_retry(const char *host, int port, double timeout_s, int *out, char *err,
                         size_t n) {
    double t0 = pp_now(), delay = 0.02;
    char last[128] = "no attempt";
    for (;;) {
        struct addrinfo *res, *ai;
        int rc = resolve(host, port, 0, &res, err, n);
        if (rc == PP_OK) {
            for (ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0), e;
                if (fd < 0) continue;
                e = connect_timed(fd, ai->ai_addr, ai->ai_addrlen, 5.0);
                if (e == 0) { freeaddrinfo(res); *out = fd; return PP_OK; }
                snprintf(last, sizeof last, "%s", strerror(e));
                close(fd);
            }
            freeaddrinfo(res);
        } else {
            snprintf(last, sizeof last, "%s", err ? err : "cannot resolve");
        }
        if (pp_now() - t0 + delay > timeout_s) break;
        sleep_s(delay);
        delay = delay * 2 < 1.0 ? delay * 2 : 1.0;
    }
    return pp_errf(err, n, PP_ERUNTIME, "could not reach rank 0 at %s:%d within %g s (%s) — "
                   "is rank 0 running, MASTER_ADDR/MASTER_PORT the same for every rank, and "
                   "the port reachable from this host?", host, port, timeout_s, last);
}

/* ------------------------------------------------------------------ rendezvous -- */

#define RDZV_MAGIC 0x76727070u /* "pprv" */
#define RDZV_VERSION 1u
#define MESH_MAGIC 0x6d737070u /* "ppsm" */
#define RDZV_HOST 80

typedef struct {
    uint32_t magic, version;
    int32_t rank, world;
    uint32_t listen_port; /* the rank's mesh listen port */
    uint32_t cfg_len;     /* bytes of config text that follow */
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

/* Rank 0's listening socket at MASTER_ADDR:rdzv_port (see dist_connect). */
/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. */
static int addr_is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static int root_listen(const DistEnv *e, int *out, char *err, size_t n) {
    struct addrinfo *res, *ai;
    int rc = resolve(e->master_addr, e->rdzv_port, 0, &res, err, n), one = 1, zero = 0, eno = 0;
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
        if (e->local_world < e->world || !addr_is_loopback(ai->ai_addr)) {
            if (ss.ss_family == AF_INET6) {
                ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            } else {
                ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
            }
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&ss, len) == 0 && listen(fd, SOMAXCONN) == 0) {
            freeaddrinfo(res);
            *out = fd;
            return PP_OK;
        }
        eno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return pp_errf(err, n, PP_ERUNTIME, "rank 0 cannot listen on %s:%d: %s%s", e->master_addr, e->rdzv_port,
                   eno ? strerror(eno) : "no usable address",
                   eno == EADDRINUSE ? " — another program (or an earlier run) uses that port; set MASTER_PORT "
                                       "(or PPTRAIN_RDZV_PORT) to a free port"
                                     : " — check MASTER_ADDR: it must name this host (rank 0's)");
}

/* The numeric host of a socket's peer. */
static void peer_host(int fd, char *host, size_t n) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    host[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
        getnameinfo((struct sockaddr *)&ss, len, host, (socklen_t)n, NULL, 0, NI_NUMERICHOST);
}


/* What rank 0 learns while the other ranks join. */
typedef struct {
    int *fds;             /* [world] admitted ranks' rendezvous connections, -1 = not yet */
    int extra[8], n_extra; /* refused connections that still get the verdict */
    int joined;           /* ranks admitted, rank 0 included */
    int status, fail_rank; /* first failure, by rank (0 = the launch itself is wrong) */
    char msg[PP_ERR_MAX];
} RootState;

enum { ADMIT_OK, ADMIT_IGNORE, ADMIT_STOP };

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

/* Refuse a connection whose process cannot be part of this world; it still gets told. */
static int root_refuse(RootState *st, int fd) {
    if (st->n_extra < (int)(sizeof st->extra / sizeof st->extra[0]))
        st->extra[st->n_extra++] = fd;
    else
        close(fd);
    return ADMIT_STOP;
}

/* Rank 0: read one joining rank's hello and config text and admit it into the table.
 * Connections that do not speak the protocol are ignored; a wrong world size or a
 * duplicate rank stops the rendezvous; a config difference is recorded and the others
 * are still awaited, so that every rank hears the verdict promptly. */
static int root_admit(const DistEnv *e, const char *cfg, double timeout, int fd,
                      RootState *st, RdzvEntry *tab) {
    RdzvHello h;
    char where[PP_ERR_MAX / 2], *text;
    int r;
    if (dist_xfer(fd, NULL, 0, &h, sizeof h, timeout, NULL, 0) != DIST_IO_OK ||
        h.magic != RDZV_MAGIC || h.version != RDZV_VERSION || h.cfg_len > DIST_CONFIG_MAX)
        return ADMIT_IGNORE;
    text = pp_malloc(h.cfg_len + 1);
    if (dist_xfer(fd, NULL, 0, text, h.cfg_len, timeout, NULL, 0) != DIST_IO_OK) {
        free(text);
        return ADMIT_IGNORE;
    }
    text[h.cfg_len] = '\0';
    r = h.rank;
    if (h.world != e->world || r < 1 || r >= e->world || st->fds[r] >= 0) {
        if (h.world != e->world)
            root_fail(st, 0, PP_EUSAGE, "rank %d was launched with WORLD_SIZE=%d but rank 0 "
                      "with WORLD_SIZE=%d — launch every rank with the same world size",
                      r, h.world, e->world);
        else if (r < 0 || r >= e->world)
            root_fail(st, 0, PP_EUSAGE, "a process claims rank %d, outside 0..%d — check "
                      "RANK (or SLURM_PROCID) of every process", r, e->world - 1);
        else
            root_fail(st, 0, PP_EUSAGE, "two processes claim rank %d (of %d) — check RANK "
                      "(or SLURM_PROCID) of every process", r, e->world);
        free(text);
        return root_refuse(st, fd);
    }
    if (dist_config_diff(text, cfg, where, sizeof where))
        root_fail(st, r, PP_EUSAGE, "rank %d's config differs from rank 0's at %s — launch "
                  "every rank with the same config and --set flags", r, where);
    free(text);
    st->fds[r] = fd;
    st->joined++;
    tab[r].port = h.listen_port;
    peer_host(fd, tab[r].host, sizeof tab[r].host);
    return ADMIT_OK;
}

/* Send the verdict (the table, or the failure text) to one joined process. */
static int root_tell(const RootState *st, int fd, const RdzvEntry *tab, int world) {
    RdzvReply rep = {RDZV_MAGIC, st->status, 0, 0};
    const void *body = st->status == PP_OK ? (const void *)tab : (const void *)st->msg;
    rep.len = st->status == PP_OK ? (uint32_t)(world * sizeof *tab) : (uint32_t)strlen(st->msg);
    if (dist_xfer(fd, &rep, sizeof rep, NULL, 0, 10.0, NULL, 0) != DIST_IO_OK) return -1;
    return dist_xfer(fd, body, rep.len, NULL, 0, 10.0, NULL, 0) == DIST_IO_OK ? 0 : -1;
}

/* Rank 0's side of the rendezvous: admit world-1 ranks on lfd, then tell them all. */
static int rdzv_root(const DistEnv *e, const char *cfg, double timeout, int lfd,
                     RdzvEntry *tab, char *err, size_t n) {
    RootState st;
    double end = pp_now() + timeout;
    int lost = -1;
    memset(&st, 0, sizeof st);
    st.fds = pp_malloc(e->world * sizeof(int));
    for (int r = 0; r < e->world; r++) st.fds[r] = -1;
    st.joined = 1;
    st.fail_rank = INT_MAX;
    while (st.joined < e->world) {
        int fd = accept_timed(lfd, end - pp_now()), a;
        if (fd < 0) {
            char missing[256] = "";
            size_t off = 0;
            for (int r = 1; r < e->world && off < sizeof missing - 8; r++)
                if (st.fds[r] < 0)
                    off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d",
                                            off ? ", " : "", r);
            root_fail(&st, 0, PP_ERUNTIME, "timed out after %g s waiting for rank(s) %s to "
                      "join the rendezvous at %s:%d — did every rank start, with the same "
                      "MASTER_ADDR and MASTER_PORT?", timeout, missing, e->master_addr,
                      e->rdzv_port);
            break;
        }
        /* a joining rank says hello at once: a connection that stays silent (a port
         * probe, a stopped process) may hold up the others for a few seconds only */
        double left = end - pp_now();
        a = root_admit(e, cfg, left < 0.5 ? 0.5 : left > 5.0 ? 5.0 : left, fd, &st, tab);
        if (a == ADMIT_IGNORE) close(fd);
        if (a == ADMIT_STOP) break;
    }
    for (int r = 1; r < e->world; r++)
        if (st.fds[r] >= 0) {
            if (root_tell(&st, st.fds[r], tab, e->world) != 0 && lost < 0) lost = r;
            close(st.fds[r]);
        }
    for (int i = 0; i < st.n_extra; i++) {
        root_tell(&st, st.extra[i], tab, e->world);
        close(st.extra[i]);
    }
    free(st.fds);
    if (st.status != PP_OK) return pp_errf(err, n, st.status, "%s", st.msg);
    if (lost >= 0)
        return pp_errf(err, n, PP_ERUNTIME, "lost connection to rank %d during the rendezvous "
                       "— see rank %d's log", lost, lost);
    return PP_OK;
}

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
    if (multi_node && addr_is_loopback((struct sockaddr *)&ss)) {
        if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
        else ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
    }
    if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    else ((struct sockaddr_in *)&ss)->sin_port = 0;
    l = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0) goto fail;
    if (bind(l, (struct sockaddr *)&ss, len) != 0 || listen(l, SOMAXCONN) != 0 ||
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

/* Receive rank 0's verdict on connection fd: the table, or its failure message. */
static int member_verdict(const DistEnv *e, int fd, double timeout, RdzvEntry *tab,
                          char *err, size_t n) {
    RdzvReply rep;
    char why[128], text[PP_ERR_MAX];
    int io = dist_xfer(fd, NULL, 0, &rep, sizeof rep, timeout, why, sizeof why);
    if (io == DIST_IO_OK && rep.magic != RDZV_MAGIC) io = DIST_IO_ERROR;
    if (io == DIST_IO_OK && rep.status != PP_OK) {
        uint32_t len = rep.len < sizeof text - 1 ? rep.len : (uint32_t)sizeof text - 1;
        io = dist_xfer(fd, NULL, 0, text, len, timeout, why, sizeof why);
        text[io == DIST_IO_OK ? len : 0] = '\0';
        return pp_errf(err, n, rep.status == PP_EUSAGE ? PP_EUSAGE : PP_ERUNTIME, "%s", text);
    }
    if (io == DIST_IO_OK && rep.len != e->world * sizeof *tab) io = DIST_IO_ERROR;
    if (io == DIST_IO_OK) io = dist_xfer(fd, NULL, 0, tab, rep.len, timeout, why, sizeof why);
    if (io == DIST_IO_TIMEOUT)
        return pp_errf(err, n, PP_ERUNTIME, "rank 0 did not finish the rendezvous within %g s "
                       "— are all %d ranks started? see rank 0's log", timeout, e->world);
    if (io != DIST_IO_OK)
        return pp_errf(err, n, PP_ERUNTIME, "lost connection to rank 0 during the rendezvous "
                       "(%s) — see rank 0's log", io == DIST_IO_ERROR ? "bad reply" : why);
    return PP_OK;
}

/* A rank > 0's side: join rank 0, announce the listen port and config, get the table.
 * *root gets rank 0's address (the one this rank reached it at). */
static int rdzv_member(const DistEnv *e, const char *cfg, double timeout, int *lfd,
                       RdzvEntry *tab, struct sockaddr_storage *root, socklen_t *rootlen,
                       char *err, size_t n) {
    RdzvHello h = {RDZV_MAGIC, RDZV_VERSION, e->rank, e->world, 0, (uint32_t)strlen(cfg)};
    int fd = -1, port = 0, rc;
    char why[128];
    if ((rc = connect_retry(e->master_addr, e->rdzv_port, timeout, &fd, err, n))) return rc;
    rc = member_listen(fd, e->local_world < e->world, lfd, &port, err, n);
    h.listen_port = (uint32_t)port;
    *rootlen = sizeof *root;
    if (rc == PP_OK && getpeername(fd, (struct sockaddr *)root, rootlen) != 0)
        rc = pp_errf(err, n, PP_ERUNTIME, "getpeername: %s", strerror(errno));
    if (rc == PP_OK && (dist_xfer(fd, &h, sizeof h, NULL, 0, timeout, why, sizeof why) ||
                        dist_xfer(fd, cfg, h.cfg_len, NULL, 0, timeout, why, sizeof why)))
        rc = pp_errf(err, n, PP_ERUNTIME, "lost connection to rank 0 during the rendezvous "
                     "(%s) — see rank 0's log", why);
    /* Rank 0 answers once every rank joined: allow it its own timeout and then some. */
    if (rc == PP_OK) rc = member_verdict(e, fd, 2 * timeout + 5, tab, err, n);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------------ mesh -- */

/* Connect to rank p twice (data and collective channel) and announce this rank. */
static int mesh_dial(const DistEnv *e, int p, const RdzvEntry *tab,
                     const struct sockaddr_storage *root, socklen_t rootlen, double timeout,
                     DistMesh *m, char *err, size_t n) {
    struct addrinfo *res = NULL;
    const struct sockaddr *sa = (const struct sockaddr *)root;
    socklen_t len = rootlen;
    int rc = PP_OK;
    struct sockaddr_storage via_root;
    if (p > 0) {
        if ((rc = resolve(tab[p].host, (int)tab[p].port, 1, &res, err, n))) return rc;
        sa = res->ai_addr;
        len = res->ai_addrlen;
        if (addr_is_loopback(sa) && !addr_is_loopback((const struct sockaddr *)root)) {
            /* rank p is on rank 0's node and reached it over loopback ([Note: loopback
             * on rank 0's node]): dial it where this rank reaches rank 0 */
            memcpy(&via_root, root, rootlen);
            if (via_root.ss_family == AF_INET6) ((struct sockaddr_in6 *)&via_root)->sin6_port = htons(tab[p].port);
            else ((struct sockaddr_in *)&via_root)->sin_port = htons(tab[p].port);
            sa = (const struct sockaddr *)&via_root;
            len = rootlen;
        }
    }
    for (int ch = 0; ch < 2 && rc == PP_OK; ch++) {
        MeshHello h = {MESH_MAGIC, e->rank, e->world, ch};
        int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int eno = fd < 0 ? errno : connect_timed(fd, sa, len, timeout);
        char where[NI_MAXHOST + 16];
        if (eno == 0 && dist_xfer(fd, &h, sizeof h, NULL, 0, timeout, NULL, 0) != DIST_IO_OK)
            eno = ECONNRESET;
        if (eno != 0) {
            addr_str(sa, len, where, sizeof where);
            if (fd >= 0) close(fd);
            rc = pp_errf(err, n, PP_ERUNTIME, "cannot connect to rank %d at %s: %s — is "
                         "that address reachable from this host?", p, where, strerror(eno));
            break;
        }
        (ch == 0 ? m->data_fd : m->coll_fd)[p] = fd;
    }
    if (res) freeaddrinfo(res);
    return rc;
}

/* Accept the two connections of every higher rank on lfd and acknowledge each. */
static int mesh_accept(const DistEnv *e, int lfd, double timeout, DistMesh *m, char *err,
                       size_t n) {
    int need = 2 * (e->world - 1 - e->rank);
    double end = pp_now() + timeout;
    while (need > 0) {
        MeshHello h, ack = {MESH_MAGIC, e->rank, e->world, 0};
        int fd = accept_timed(lfd, end - pp_now()), *slot;
        if (fd < 0)
            return pp_errf(err, n, PP_ERUNTIME, "timed out after %g s waiting for the higher "
                           "ranks to connect to rank %d — see their logs", timeout, e->rank);
        if (dist_xfer(fd, NULL, 0, &h, sizeof h, timeout, NULL, 0) != DIST_IO_OK ||
            h.magic != MESH_MAGIC || h.world != e->world || h.rank <= e->rank ||
            h.rank >= e->world || (h.channel != 0 && h.channel != 1)) {
            close(fd);
            continue;
        }
        slot = &(h.channel == 0 ? m->data_fd : m->coll_fd)[h.rank];
        ack.channel = h.channel;
        if (*slot >= 0 || dist_xfer(fd, &ack, sizeof ack, NULL, 0, timeout, NULL, 0)) {
            close(fd);
            continue;
        }
        *slot = fd;
        need--;
    }
    return PP_OK;
}

/* Wait for the acknowledgements of the lower ranks on the connections this rank made. */
static int mesh_confirm(const DistEnv *e, double timeout, DistMesh *m, char *err, size_t n) {
    for (int p = 0; p < e->rank; p++)
        for (int ch = 0; ch < 2; ch++) {
            MeshHello h;
            char why[128] = "bad acknowledgement";
            int fd = (ch == 0 ? m->data_fd : m->coll_fd)[p];
            int io = dist_xfer(fd, NULL, 0, &h, sizeof h, timeout, why, sizeof why);
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
    int lfd = -1, rc;
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
        rc = root_listen(e, &lfd, err, n);
        if (rc == PP_OK) rc = rdzv_root(e, cfg, timeout, lfd, tab, err, n);
    } else {
        rc = rdzv_member(e, cfg, timeout, &lfd, tab, &root, &rootlen, err, n);
    }
    for (int p = 0; p < e->rank && rc == PP_OK; p++)
        rc = mesh_dial(e, p, tab, &root, rootlen, timeout, m, err, n);
    if (rc == PP_OK) rc = mesh_accept(e, lfd, timeout, m, err, n);
    if (rc == PP_OK) rc = mesh_confirm(e, timeout, m, err, n);
    if (lfd >= 0) close(lfd);
    free(tab);
    if (rc != PP_OK) {
        dist_mesh_close(m);
        return rc;
    }
    for (int p = 0; p < e->world; p++)
        if (p != e->rank) tune_socket(m->data_fd[p]), tune_socket(m->coll_fd[p]);
    return PP_OK;
}
