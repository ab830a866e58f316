/* common.h — status codes, error reporting and check macros shared by every module. */
#ifndef PP_COMMON_H
#define PP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Status codes; they double as process exit codes (DESIGN.md §4). */
#define PP_OK 0
#define PP_ERUNTIME 1 /* runtime failure: peer lost, NaN loss, I/O error */
#define PP_EUSAGE 2   /* bad usage or config */

#define PP_PATH_MAX 1024
#define PP_ERR_MAX 1024

/* The rank that prefixes every message on stderr; set once by main after the
 * environment is read (-1 = not yet known, no prefix). */
void pp_set_rank(int rank);
int pp_rank(void);

/* Print "[rank R] file:line: message" to stderr. */
void pp_log_error(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Print "[rank R] error: message" to stderr (no source location: for user errors). */
void pp_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Like pp_log_error, then exit(PP_ERUNTIME). For failures nothing can recover from. */
void pp_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define PP_DIE(...) pp_die(__FILE__, __LINE__, __VA_ARGS__)
/* Check a condition that only a bug or an exhausted machine can break. */
#define PP_CHECK(cond)                                                                 \
    do {                                                                               \
        if (!(cond)) PP_DIE("check failed: %s", #cond);                                \
    } while (0)

/* malloc/calloc that die with the size and the call site on failure. */
void *pp_malloc_at(size_t n, const char *file, int line);
void *pp_calloc_at(size_t count, size_t size, const char *file, int line);
#define pp_malloc(n) pp_malloc_at((n), __FILE__, __LINE__)
#define pp_calloc(c, s) pp_calloc_at((c), (s), __FILE__, __LINE__)

/* Monotonic wall clock in seconds. */
double pp_now(void);

/* The directory part of path ("." if none, "/" for a file in the root) into dir[n]. */
void pp_dirname(const char *path, char *dir, size_t n);

/* mkdir -p: create path and its missing parents (mode 0755). Returns 0, or -1 with
 * errno set (ENOTDIR when something on the way is not a directory). */
int pp_mkdirs(const char *path);

/* snprintf into a fixed error buffer (err may be NULL). Returns status. */
int pp_errf(char *err, size_t n, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
