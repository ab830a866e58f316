/* common.h — status codes, error reporting and check macros shared by every module. */
#ifndef PP_COMMON_H
#define PP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

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
/* Print "[rank R] warning: message" to stderr: a setting taken otherwise than given. */
void pp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
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

/* [Note: peak RSS] This process's peak resident set in MB (10^6 bytes). */
double pp_peak_rss_mb(void);

/* The directory part of path ("." if none, "/" for a file in the root) into dir[n]. */
void pp_dirname(const char *path, char *dir, size_t n);

/* mkdir -p: create path and its missing parents (mode 0755). Returns 0, or -1 with
 * errno set (ENOTDIR when something on the way is not a directory). */
int pp_mkdirs(const char *path);

/* ---- files: whole reads, and writes that replace a file atomically and durably ---- */

/* Open `path` read-only as a regular file: open(2) with O_NONBLOCK (a FIFO with no
 * writer would block a plain open forever), fstat(2), and anything but a regular file
 * closed again. Returns the descriptor (O_NONBLOCK cleared, O_CLOEXEC set) with *st
 * filled; -1 when open or fstat fails (errno set); or -2 when the path is not a regular
 * file: errno EISDIR for a directory, EINVAL for anything else, and *st says what it is
 * (pp_file_kind names it for messages). */
int pp_open_regular(const char *path, struct stat *st);

/* pp_open_regular for any open(2) access `flags`: O_RDONLY, or O_WRONLY with O_CREAT and
 * O_APPEND or O_TRUNC (mode 0644). A FIFO is refused whether or not it has a reader (a
 * write open of one with none fails ENXIO: that is reported as -2 too), and O_TRUNC is
 * applied only once the file is known to be regular. Same returns. */
int pp_open_regular_flags(const char *path, int flags, struct stat *st);

/* fopen(path, "r" | "w" | "a") through pp_open_regular_flags. NULL on failure with a
 * message "cannot open PATH for reading|writing: reason (hint)" in err; `hint` may be
 * NULL. */
FILE *pp_fopen_regular(const char *path, const char *mode, const char *hint, char *err,
                       size_t errlen);

/* What a file of mode `mode` is, for messages: "a directory", "a FIFO", "a character
 * device", "a block device", "a socket", "a regular file", "not a regular file". */
const char *pp_file_kind(mode_t mode);

/* Read the whole regular file at `path` into a malloc'd buffer *text of *len bytes with
 * a NUL after them (the file may itself hold NULs); the caller frees *text. `what` names
 * the file in messages ("config file" gives "cannot open config file: reason"); NULL
 * names it by its path. A FIFO, a device or a directory is refused without blocking or
 * reading (pp_open_regular); a file over `max_bytes` is refused without being read
 * whole. Returns PP_OK, or PP_EUSAGE (a file the user named cannot be read) with
 * *text = NULL, *len = 0, "cannot open WHAT: reason" or "cannot read WHAT: reason" in
 * err ("cannot read WHAT: it is a FIFO, not a regular file"; "cannot read WHAT: it is
 * N bytes, over the limit of M bytes"), and errno left at the cause (ENOENT: no such
 * file; EISDIR: a directory; EINVAL: another kind of file; EFBIG: too big), for callers
 * to which a missing file is no error. Dies only when memory runs out. */
int pp_read_file_max(const char *path, const char *what, size_t max_bytes, char **text,
                     size_t *len, char *err, size_t errlen);

/* pp_read_file_max without a size limit. */
int pp_read_file(const char *path, const char *what, char **text, size_t *len, char *err,
                 size_t errlen);

/* A file being written under a temporary name beside its final name `path`, so that a
 * reader of `path` never sees a partial file and a crash leaves the old file or the
 * complete new one: [Note: atomic file writes] in common.c. Write through `f` (stdio)
 * or through `fd` (write(2), pwrite(2)), not both. The struct may be moved while open
 * (the stream's state is on the heap); commit or abort one copy. */
typedef struct {
    FILE *f;                    /* a stdio stream on the temporary file (not fileno(f)) */
    int fd;                     /* the temporary file's descriptor (-1 when closed) */
    char path[PP_PATH_MAX];     /* the final name */
    char tmp[PP_PATH_MAX + 32]; /* the temporary name */
    struct PPFileSink *sink;    /* private: f's first write error, for the message */
} PPFile;

/* Create the temporary file for `path` (mode 0644 less the umask; its directory must
 * exist). The name is `path` + tmp_suffix (".part", ".tmp": a stale file of that name is
 * replaced, so the caller must be that name's only writer), or with tmp_suffix NULL a
 * fresh name "PATH.tmp.PID[.N]" made with O_EXCL (safe beside concurrent writers of the
 * same path). Returns PP_OK; or PP_ERUNTIME with "writing PATH failed: cannot create
 * TMP: reason" in err, errno at the cause and *pf closed (pf->tmp still names the file
 * it tried), so pp_file_abort is safe either way. */
int pp_file_create(PPFile *pf, const char *path, const char *tmp_suffix, char *err,
                   size_t errlen);

/* Make what was written `path`'s content: flush f, fsync, close, rename the temporary
 * file over `path` (atomically replacing any old file), fsync the directory. Fails if
 * any write through f failed earlier. Returns PP_OK; or PP_ERUNTIME with "writing PATH
 * failed: reason" in err and the temporary file removed (path keeps its old content, or
 * with "cannot fsync directory" its new content, not yet durable). *pf is closed either
 * way. A caller whose own writes through fd failed calls pp_file_abort instead. */
int pp_file_commit(PPFile *pf, char *err, size_t errlen);

/* Close and remove the temporary file, leaving `path` untouched; what was buffered in f
 * is dropped. A no-op on a closed *pf (after a failed create, a commit, an abort). */
void pp_file_abort(PPFile *pf);

/* fsync the directory `dir`, making the entries created, renamed or removed in it
 * durable. Returns 0, or -1 with errno (a file system that cannot fsync a directory,
 * EINVAL, counts as done). */
int pp_fsync_dir(const char *dir);

/* snprintf into a fixed error buffer (err may be NULL). Returns status. */
int pp_errf(char *err, size_t n, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Append printf-style text to the NUL-terminated text in buf[n] (buf may be NULL),
 * truncating silently. */
void pp_strappendf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
