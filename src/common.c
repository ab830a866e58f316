/* common.c — error reporting, checked allocation, clock. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

void pp_error(const char *fmt, ...) {
    va_list ap;
    prefix();
    fputs("error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
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

int pp_errf(char *err, size_t n, int status, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return status;
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
