/* flood.c — a connection flood against one TCP port on loopback, for test/flood.sh
 * (issue 25): plain connects that never say a word, at a fixed rate, each held open until
 * `hold` newer ones exist and then reset (SO_LINGER 0: no TIME_WAIT, so a long flood does
 * not run out of ephemeral ports).
 *
 *   flood PORT RATE SECONDS [HOLD [MAX [BYTES]]]
 *
 * Connects to 127.0.0.1:PORT only (no address can be given), RATE times a second, for
 * at most SECONDS seconds and MAX connections (default RATE * SECONDS), holding at most
 * HOLD (default 1000) open at once; with BYTES > 0 each connection sends that many bytes
 * of junk as soon as it is up (a flood that gets past "silent"). Prints "flood: started"
 * after its first connect (the test waits for it), then one summary line:
 *   flood: N connections to 127.0.0.1:PORT in T s (R/s): E established, X refused,
 *   U unanswered, F failed
 * N counts every connect sent (a SYN), R = N / T; of them E reached the listener (the
 * kernel completed the handshake: they sat in its backlog or were accepted), X found no
 * listener (the job had closed the port, or not opened it yet), U were neither when
 * reset (their SYN was dropped: the backlog was full), F failed here (no socket, no
 * ephemeral port). Exits 0, or 2 on bad arguments. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

enum { UP, REFUSED, UNANSWERED };

/* Close fd with a reset; returns UP when it had been established (it has a peer),
 * REFUSED when nobody listened, else UNANSWERED (its SYN still waits: a full backlog). */
static int reset(int fd) {
    struct linger lg = {1, 0};
    struct sockaddr_in peer;
    socklen_t len = sizeof peer, elen = sizeof(int);
    int soerr = 0, how = UNANSWERED;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) == 0) how = UP;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) == 0 && soerr == ECONNREFUSED)
        how = REFUSED;
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    return how;
}

/* A number argument in [lo, hi], or exit 2. */
static long arg(const char *s, const char *what, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "flood: %s must be a number in %ld..%ld, not '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return v;
}

/* A connected (or connecting) non-blocking socket to `to`, or -1 (counted in *failed). */
static int dial(const struct sockaddr_in *to, long *failed) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)to, sizeof *to) != 0 &&
        errno != EINPROGRESS && errno != ECONNREFUSED) {
        close(fd); /* e.g. EADDRNOTAVAIL: out of ephemeral ports */
        fd = -1;
    }
    if (fd < 0) {
        (*failed)++;
        nap(1e-3);
    }
    return fd;
}

int main(int argc, char **argv) {
    static const char junk[64] = "flood";
    struct sockaddr_in to = {AF_INET, 0, {htonl(INADDR_LOOPBACK)}, {0}};
    struct rlimit rl;
    long port, rate, secs;
    long hold, max, bytes;
    long made = 0, failed = 0, next = 0;
    long count[3] = {0, 0, 0};
    double t0, t;
    int *ring;
    if (argc < 4 || argc > 7) {
        fprintf(stderr, "usage: flood PORT RATE SECONDS [HOLD [MAX [BYTES]]]  (127.0.0.1 only)\n");
        return 2;
    }
    port = arg(argv[1], "PORT", 1, 65535);
    rate = arg(argv[2], "RATE", 1, 1000000);
    secs = arg(argv[3], "SECONDS", 1, 60);
    hold = argc > 4 ? arg(argv[4], "HOLD", 1, 100000) : 1000;
    max = argc > 5 ? arg(argv[5], "MAX", 1, 10000000) : rate * secs;
    bytes = argc > 6 ? arg(argv[6], "BYTES", 0, (long)sizeof junk) : 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { /* room for HOLD sockets, if allowed */
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if ((rlim_t)hold + 16 > rl.rlim_cur) hold = (long)rl.rlim_cur - 16;
    }
    ring = hold > 0 ? calloc((size_t)hold, sizeof *ring) : NULL;
    if (!ring) return fprintf(stderr, "flood: no room for connections\n"), 1;
    for (long i = 0; i < hold; i++) ring[i] = -1;
    to.sin_port = htons((uint16_t)port);
    t0 = t = now();
    while (made + failed < max && (t = now()) - t0 < (double)secs) {
        int fd;
        if (made + failed >= (long)((t - t0) * (double)rate)) { /* ahead of the rate */
            nap(50e-6);
            continue;
        }
        if ((fd = dial(&to, &failed)) < 0) continue;
        if (made++ == 0) {
            printf("flood: started\n");
            fflush(stdout);
        }
        if (bytes > 0 && send(fd, junk, (size_t)bytes, MSG_NOSIGNAL) < 0 && errno == ECONNREFUSED) {
            count[REFUSED]++; /* (the send took the error: reset would not see it) */
            close(fd);
            continue;
        } /* else sent, or not up yet: then it stays silent */
        if (ring[next] >= 0) count[reset(ring[next])]++;
        ring[next] = fd;
        next = (next + 1) % hold;
    }
    for (long i = 0; i < hold; i++)
        if (ring[i] >= 0) count[reset(ring[i])]++;
    free(ring);
    printf("flood: %ld connections to 127.0.0.1:%ld in %.2f s (%.0f/s): %ld established, "
           "%ld refused, %ld unanswered, %ld failed\n", made, port, t - t0,
           t > t0 ? (double)made / (t - t0) : 0.0, count[UP], count[REFUSED],
           count[UNANSWERED], failed);
    return 0;
}
