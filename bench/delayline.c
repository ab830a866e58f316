/* delayline.c — bench/netem.sh's stand-in for `tc netem delay` on kernels built without
 * it: a wire between two network namespaces that holds every packet for a fixed delay.
 *   delayline NS_A NS_B DELAY_US
 * makes a TUN device "pptun0" in each namespace (named as by `ip netns add`), prints
 * "ready" on stdout, and from then on writes each packet read from one device into the
 * other DELAY_US microseconds later, in order (IP packets, no link header). The caller
 * gives the devices their addresses, brings them up, and may shape their queues (tc tbf
 * on each device's root: the rate of the direction leaving that namespace). Runs until
 * killed; the devices go with the process. A full queue drops (as a router would: TCP
 * retransmits); exits 1 with a message on a setup failure. */
#define _GNU_SOURCE /* setns, ppoll */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define QCAP 8192   /* packets held per direction */
#define PKT_MAX 2048 /* > the devices' MTU (1500) */

typedef struct {
    unsigned char buf[QCAP][PKT_MAX];
    int len[QCAP];
    double due[QCAP];
    int head, n;
} Queue;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *arg) {
    fprintf(stderr, "delayline: %s %s: %s\n", what, arg, strerror(errno));
    exit(1);
}

/* A TUN device "pptun0" in namespace ns (from /run/netns), non-blocking. */
static int tun_in(const char *ns) {
    char path[256];
    struct ifreq ifr;
    int nsfd, fd;
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    if ((nsfd = open(path, O_RDONLY | O_CLOEXEC)) < 0) die("cannot open namespace", path);
    if (setns(nsfd, CLONE_NEWNET) != 0) die("cannot enter namespace", ns);
    close(nsfd);
    if ((fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK)) < 0)
        die("cannot open", "/dev/net/tun");
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "pptun0");
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) die("cannot make a TUN device in", ns);
    return fd;
}

/* Read every packet waiting on fd into q, due `delay` seconds from now. */
static void take(int fd, Queue *q, double delay) {
    static unsigned char drop[PKT_MAX];
    for (;;) {
        int i = (q->head + q->n) % QCAP, full = q->n == QCAP;
        ssize_t k = read(fd, full ? drop : q->buf[i], PKT_MAX);
        if (k <= 0) return; /* EAGAIN: drained */
        if (full) continue;
        q->len[i] = (int)k;
        q->due[i] = now_s() + delay;
        q->n++;
    }
}

/* Write q's packets that are due to fd; returns when the next one is due (0: none). */
static double give(int fd, Queue *q) {
    while (q->n > 0) {
        int i = q->head;
        if (q->due[i] > now_s()) return q->due[i];
        if (write(fd, q->buf[i], (size_t)q->len[i]) < 0 && errno == EAGAIN) return now_s() + 1e-4;
        q->head = (q->head + 1) % QCAP;
        q->n--;
    }
    return 0;
}

int main(int argc, char **argv) {
    static Queue ab, ba; /* A to B, B to A */
    double delay;
    int fa, fb;
    if (argc != 4) {
        fprintf(stderr, "usage: delayline NS_A NS_B DELAY_US\n");
        return 2;
    }
    delay = atof(argv[3]) * 1e-6;
    fa = tun_in(argv[1]);
    fb = tun_in(argv[2]);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
        double t1 = give(fb, &ab), t2 = give(fa, &ba), next = 0, left;
        struct timespec ts;
        if (t1 > 0) next = t1;
        if (t2 > 0 && (next == 0 || t2 < next)) next = t2;
        left = next > 0 ? next - now_s() : 1.0;
        if (left < 0) left = 0;
        ts.tv_sec = (time_t)left;
        ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
        if (ppoll(p, 2, &ts, NULL) < 0 && errno != EINTR) die("poll", "");
        if (p[0].revents & POLLIN) take(fa, &ab, delay);
        if (p[1].revents & POLLIN) take(fb, &ba, delay);
    }
}
