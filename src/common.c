/* common.c — error reporting, checked allocation, clock, paths, whole-file reads and
 * atomic file writes. */
#define _GNU_SOURCE /* fopencookie */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1; /* the only process-wide state: who prefixes messages */

void pp_set_rank(int rank) { g_rank = rank; }
int pp_rank(void) { return g_rank; }

static void prefix(void) {
    if (g_rank >= 0) fprintf(stderr, "[rank %d] ", g_rank);
}

void pp_log_error(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    prefix();
    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* One line on stderr: the rank's prefix, what ("error: ", "warning: "), the message. */
static void report(const char *what, const char *fmt, va_list ap) {
    prefix();
    fputs(what, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void pp_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("error: ", fmt, ap);
    va_end(ap);
}

void pp_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("warning: ", fmt, ap);
    va_end(ap);
}

void pp_die(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    prefix();
    fprintf(stderr, "%s:%d: fatal: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stdout);
    exit(PP_ERUNTIME);
}

void *pp_malloc_at(size_t n, const char *file, int line) {
    void *p = NULL;
    if (n == 0) n = 1;
    /* 64-byte alignment: cache lines and AVX-512 loads. */
    if (posix_memalign(&p, 64, n) != 0)
        pp_die(file, line, "out of memory allocating %zu bytes", n);
    return p;
}

void *pp_calloc_at(size_t count, size_t size, const char *file, int line) {
    void *p = pp_malloc_at(count * size, file, line);
    memset(p, 0, count * size);
    return p;
}

double pp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* [Note: peak RSS] The kernel's VmHWM (/proc/self/status): the high-water mark of this
 * program's memory since its exec. getrusage's ru_maxrss is not that: Linux carries the
 * peak of the process image an exec replaced into it, so a rank that torchrun's agent
 * forks from its Python process (hundreds of MB with torch imported) and execs reported
 * the agent's peak (555 MB for a 15 MB rank; test/torchrun.sh checks the report, and
 * test/train.sh part 5 a 400 MB parent of its own). ru_maxrss only where /proc cannot be
 * read. */
double pp_peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    if (f) fclose(f);
    if (kib < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kib = ru.ru_maxrss;
    }
    return kib * 1024.0 / 1e6;
}

int pp_errf(char *err, size_t n, int status, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return status;
}

void pp_strappendf(char *buf, size_t n, const char *fmt, ...) {
    size_t used = buf ? strlen(buf) : 0;
    if (!buf || used + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
}

void pp_dirname(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

int pp_mkdirs(const char *path) {
    char p[PP_PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != 0) continue;
        char c = *q;
        *q = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *q = c;
        if (c == 0) break;
    }
    struct stat st;
    if (stat(p, &st) != 0) return -1;
    return S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
}

/* ---- whole-file reads --------------------------------------------------------------- */

const char *pp_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

int pp_open_regular_flags(const char *path, int flags, struct stat *st) {
    int fd = open(path, (flags & ~O_TRUNC) | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno; /* ENXIO: a FIFO nobody reads (write opens only) */
        if (e == ENXIO && stat(path, st) == 0 && !S_ISREG(st->st_mode)) return errno = EINVAL, -2;
        return errno = e, -1;
    }
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return errno = e, -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return errno = S_ISDIR(st->st_mode) ? EISDIR : EINVAL, -2;
    }
    if ((flags & O_TRUNC) && ftruncate(fd, 0) != 0) {
        int e = errno;
        close(fd);
        return errno = e, -1;
    }
    int fl = fcntl(fd, F_GETFL); /* I/O on a regular file never blocks anyway */
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int pp_open_regular(const char *path, struct stat *st) {
    return pp_open_regular_flags(path, O_RDONLY, st);
}

FILE *pp_fopen_regular(const char *path, const char *mode, const char *hint, char *err,
                       size_t errlen) {
    int flags = mode[0] == 'r' ? O_RDONLY
              : mode[0] == 'a' ? O_WRONLY | O_CREAT | O_APPEND : O_WRONLY | O_CREAT | O_TRUNC;
    const char *how = mode[0] == 'r' ? "reading" : "writing";
    struct stat st;
    int fd = pp_open_regular_flags(path, flags, &st);
    FILE *f = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (f && mode[0] == 'a' && fseek(f, 0, SEEK_END) != 0) { /* as fopen "a": ftell = size */
        fclose(f);
        f = NULL;
        fd = -1;
    }
    if (f) return f;
    int e = errno;
    if (fd >= 0) close(fd);
    char why[128];
    if (fd == -2)
        snprintf(why, sizeof why, "it is %s, not a regular file", pp_file_kind(st.st_mode));
    else snprintf(why, sizeof why, "%s", strerror(e));
    pp_errf(err, errlen, PP_ERUNTIME, "cannot open %s for %s: %s%s%s%s", path, how, why,
            hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
    errno = e;
    return NULL;
}

int pp_read_file_max(const char *path, const char *what, size_t max_bytes, char **text,
                     size_t *len, char *err, size_t errlen) {
    const char *name = what ? what : path;
    *text = NULL;
    *len = 0;
    struct stat st;
    int fd = pp_open_regular(path, &st);
    if (fd < 0) {
        int e = errno;
        if (fd == -1) pp_errf(err, errlen, PP_EUSAGE, "cannot open %s: %s", name, strerror(e));
        else pp_errf(err, errlen, PP_EUSAGE, "cannot read %s: it is %s, not a regular file",
                     name, pp_file_kind(st.st_mode));
        return errno = e, PP_EUSAGE;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        pp_errf(err, errlen, PP_EUSAGE, "cannot read %s: it is %lld bytes, over the limit of "
                "%zu bytes", name, (long long)st.st_size, max_bytes);
        return errno = EFBIG, PP_EUSAGE;
    }
    /* The size + 2: the last read sees end of file without growing. */
    size_t cap = (size_t)st.st_size + 2, n = 0;
    char *buf = pp_malloc(cap);
    for (;;) {
        if (n > max_bytes) { /* it grew while we read it */
            close(fd);
            free(buf);
            pp_errf(err, errlen, PP_EUSAGE, "cannot read %s: it grew past the limit of %zu "
                    "bytes while being read", name, max_bytes);
            return errno = EFBIG, PP_EUSAGE;
        }
        if (n + 1 == cap) { /* the file grew while we read it */
            char *grown = pp_malloc(cap * 2);
            memcpy(grown, buf, n);
            free(buf);
            buf = grown;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            int e = got < 0 ? errno : 0;
            close(fd);
            if (got == 0) break;
            free(buf);
            pp_errf(err, errlen, PP_EUSAGE, "cannot read %s: %s", name, strerror(e));
            return errno = e, PP_EUSAGE;
        }
        n += (size_t)got;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return PP_OK;
}

int pp_read_file(const char *path, const char *what, char **text, size_t *len, char *err,
                 size_t errlen) {
    return pp_read_file_max(path, what, SIZE_MAX - 2, text, len, err, errlen);
}

/* ---- atomic file writes ------------------------------------------------------------- */

/* [Note: atomic file writes]
 * Every file pptrain writes whole (checkpoint shards and manifests, model exports, token
 * files, losses.csv rewritten on resume, the merged trace) goes through PPFile: write a
 * temporary file in the same directory, fsync it, close it, rename it over the final
 * name, fsync the directory. rename(2) within a directory is atomic, so a reader sees
 * the old file or the complete new one, never a mix; the first fsync makes the data
 * durable before the name points at it (else a crash can leave the new name on an
 * empty file), the last one makes the rename itself durable. A failure anywhere removes
 * the temporary file. Files appended as they go (losses.csv rows, trace parts) do not
 * need this: a crash loses their tail, which the resumed run writes again. */

/* The state behind PPFile.f: stdio's buffer flushes through this write function, which
 * keeps the first error, since a failed fwrite drops its buffer and its errno is lost
 * before commit can report it. */
struct PPFileSink {
    int fd;   /* -1: discard (an abort is closing the stream) */
    int werr; /* errno of the first failed write, 0 if none */
};

static ssize_t sink_write(void *cookie, const char *p, size_t n) {
    struct PPFileSink *s = cookie;
    if (s->fd < 0) return (ssize_t)n;
    for (size_t left = n; left > 0;) {
        ssize_t w = write(s->fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!s->werr) s->werr = w < 0 ? errno : EIO;
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    return (ssize_t)n;
}

/* Open pf->tmp: path + suffix, or the first free "path.tmp.PID[.N]". 0 or -1 (errno). */
static int open_tmp(PPFile *pf, const char *path, const char *suffix) {
    size_t room = sizeof pf->tmp;
    if (suffix) {
        if (snprintf(pf->tmp, room, "%s%s", path, suffix) >= (int)room)
            return errno = ENAMETOOLONG, -1;
        unlink(pf->tmp); /* a stale one (or a symlink, which O_EXCL will not follow) */
        return pf->fd = open(pf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    long pid = (long)getpid();
    for (int k = 0; k < 100; k++) { /* taken: another thread's, or a crashed process's */
        if (k == 0) snprintf(pf->tmp, room, "%s.tmp.%ld", path, pid);
        else snprintf(pf->tmp, room, "%s.tmp.%ld.%d", path, pid, k);
        pf->fd = open(pf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (pf->fd >= 0 || errno != EEXIST) return pf->fd;
    }
    return -1; /* errno EEXIST */
}

int pp_file_create(PPFile *pf, const char *path, const char *tmp_suffix, char *err,
                   size_t errlen) {
    memset(pf, 0, sizeof *pf);
    pf->fd = -1;
    int e = ENAMETOOLONG;
    if (strlen(path) < sizeof pf->path) {
        strcpy(pf->path, path);
        if (open_tmp(pf, path, tmp_suffix) >= 0) {
            pf->sink = pp_calloc(1, sizeof *pf->sink);
            pf->sink->fd = pf->fd;
            pf->f = fopencookie(pf->sink, "w", (cookie_io_functions_t){.write = sink_write});
            if (pf->f) return PP_OK;
            e = errno;
            pp_file_abort(pf);
        } else {
            e = errno;
        }
    }
    pp_errf(err, errlen, PP_ERUNTIME, "writing %s failed: cannot create %s: %s", path,
            pf->tmp[0] ? pf->tmp : path, strerror(e));
    return errno = e, PP_ERUNTIME;
}

/* Close f and fd; the first failure's description into *what and errno into *e. */
static void file_close(PPFile *pf, const char **what, int *e) {
    *what = NULL;
    if (fflush(pf->f) != 0 || pf->sink->werr) {
        *what = "";
        *e = pf->sink->werr ? pf->sink->werr : errno;
    }
    fclose(pf->f);
    if (!*what && fsync(pf->fd) != 0) {
        *what = "fsync: ";
        *e = errno;
    }
    if (close(pf->fd) != 0 && !*what) {
        *what = "close: ";
        *e = errno;
    }
    free(pf->sink);
    pf->f = NULL;
    pf->fd = -1;
    pf->sink = NULL;
}

int pp_file_commit(PPFile *pf, char *err, size_t errlen) {
    if (!pf->f)
        return pp_errf(err, errlen, PP_ERUNTIME, "writing %s failed: not open", pf->path);
    const char *what;
    int e = 0;
    file_close(pf, &what, &e);
    if (!what && rename(pf->tmp, pf->path) != 0) {
        what = "cannot rename the temporary file over it: ";
        e = errno;
    }
    if (what) {
        unlink(pf->tmp);
        pp_errf(err, errlen, PP_ERUNTIME, "writing %s failed: %s%s", pf->path, what,
                strerror(e));
        return errno = e, PP_ERUNTIME;
    }
    char dir[PP_PATH_MAX];
    pp_dirname(pf->path, dir, sizeof dir);
    if (pp_fsync_dir(dir) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "writing %s failed: cannot fsync directory %s: %s", pf->path, dir,
                       strerror(errno));
    return PP_OK;
}

void pp_file_abort(PPFile *pf) {
    if (pf->f) {
        pf->sink->fd = -1; /* drop what stdio still buffers */
        fclose(pf->f);
    }
    if (pf->fd >= 0) {
        close(pf->fd);
        unlink(pf->tmp);
    }
    free(pf->sink);
    pf->f = NULL;
    pf->fd = -1;
    pf->sink = NULL;
}

int pp_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    if (rc != 0 && errno == EINVAL) rc = 0; /* file systems without directory fsync */
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}
