/* outdir.c — output.dir held by one run at a time ([Note: output.dir lock]). */
#include "outdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* [Note: output.dir lock] Two runs writing one output.dir at once interleave their
 * losses.csv rows and checkpoint shards without a word (issue 25: the tasks of a job
 * array whose %a was taken literally). So a run holds output.dir exclusively: rank 0
 * takes an exclusive fcntl lock on output.dir/lock right after the rendezvous, before
 * any rank writes there, and every rank learns the outcome from one all-reduce (main.c,
 * lock_outdir), so that all ranks of a second run exit 2 together, rank 0 naming the
 * holder from the line the holder wrote into the file. Every rank writes into
 * output.dir (its checkpoint shard, its trace part; the last stage of replica 0
 * losses.csv; rank 0 the manifest, `latest`, `interrupted`, trace.json), but one lock
 * per run is enough: every run has a rank 0, and none of its ranks writes until rank 0
 * holds the lock. (A run's ranks on several hosts share output.dir: resume_choice in
 * main.c already requires it.)
 *
 * The lock dies with its process: the kernel drops a process's fcntl locks when the
 * process ends, normally or by SIGKILL or the OOM killer, so a later run (--resume,
 * --resume-if-present, or a fresh one after deleting the checkpoints) takes it again.
 * The file stays; its line may be stale, but a line without a lock names no holder.
 * It is never removed: a run could lock a file just unlinked while a third creates a
 * new one, and both would hold "the" lock.
 *
 * fcntl and not flock(2): Linux emulates flock on NFS with fcntl locks anyway, Lustre
 * treats both alike, and fcntl is the one POSIX names. Its pitfall: closing any
 * descriptor of the file drops the process's lock, so nothing but this module opens
 * output.dir/lock. fcntl locks are not inherited across fork, and O_CLOEXEC keeps an
 * exec'd child from holding the descriptor.
 *
 * What it relies on: a file system that shows the lock to every host mounting
 * output.dir. Local file systems do; NFSv4 does (a host that dies loses its locks when
 * its lease runs out, 90 s by default), NFSv3 with its lock manager (lockd) does;
 * Lustre mounted with -o flock does. Some only lock per host: NFS mounted with
 * `nolock`, Lustre with -o localflock, BeeGFS by default: there two runs on different
 * hosts are not stopped. Where fcntl locks fail outright (ENOLCK, EOPNOTSUPP, ENOSYS:
 * Lustre mounted with noflock, an NFSv3 server without lockd) the run warns and goes
 * on unlocked. */

/* The holder's line: "pid P on host H, SLURM job J (array job A task T), since TIME". */
static void holder_line(char *buf, size_t n) {
    char host[256] = "?", when[64] = "?", job[160] = "";
    const char *id = getenv("SLURM_JOB_ID"), *aj = getenv("SLURM_ARRAY_JOB_ID"),
               *at = getenv("SLURM_ARRAY_TASK_ID");
    time_t now = time(NULL);
    struct tm tm;
    gethostname(host, sizeof host - 1);
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", &tm);
    if (id && *id) {
        int k = snprintf(job, sizeof job, ", SLURM job %.40s", id);
        if (aj && *aj && at && *at)
            snprintf(job + k, sizeof job - k, " (array job %.40s task %.40s)", aj, at);
    }
    snprintf(buf, n, "pid %d on host %s%s, since %s\n", (int)getpid(), host, job, when);
}

/* The holder's line read from the lock file fd (printable, without its newline). */
static void read_holder(int fd, char *buf, size_t n) {
    ssize_t got = pread(fd, buf, n - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f) *p = '?';
    if (!*buf)
        snprintf(buf, n, "a process that has not yet written its host and pid into the file");
}

static int held_elsewhere(int fd, const char *dir, const char *path, char *err, size_t errlen) {
    char holder[512];
    read_holder(fd, holder, sizeof holder);
    return pp_errf(err, errlen, PP_EUSAGE,
                   "output.dir '%s' is in use by another run: %s (it holds the lock on %s). Two "
                   "runs writing one directory garble each other's losses.csv and checkpoints: "
                   "wait until that run ends (then --resume continues it), or give this run a "
                   "directory of its own (under SLURM, %%j or %%a in output.dir make one per job "
                   "or array task: docs/config.md)",
                   dir, holder, path);
}

/* Write the holder's line over the file's content, durably (a reader on another NFS
 * client sees it only once it reached the server). */
static int write_holder(int fd, const char *path, char *err, size_t errlen) {
    char line[600];
    holder_line(line, sizeof line);
    size_t len = strlen(line);
    errno = 0;
    if (pwrite(fd, line, len, 0) != (ssize_t)len || ftruncate(fd, (off_t)len) != 0 ||
        fdatasync(fd) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "cannot write %s: %s: check that output.dir is writable", path,
                       strerror(errno ? errno : EIO));
    return PP_OK;
}

int outdir_lock(OutdirLock *l, const char *dir, char *err, size_t errlen) {
    char path[PP_PATH_MAX + 8];
    struct stat st;
    l->fd = -1;
    snprintf(path, sizeof path, "%s/%s", dir, OUTDIR_LOCK_FILE);
    /* O_NONBLOCK: a FIFO put there must not block the open; O_NOFOLLOW: nor a symlink
     * lead the lock (and the holder's line) elsewhere */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "cannot open %s, the lock that keeps other runs out of output.dir: %s%s",
                       path, strerror(errno),
                       errno == ELOOP ? " (a symbolic link: remove it)"
                                      : ": check that output.dir is writable");
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "%s, the lock that keeps other runs out of output.dir, is %s, not a regular "
                       "file: remove it",
                       path, pp_file_kind(st.st_mode));
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int e = errno, rc;
        if (e == EACCES || e == EAGAIN) {
            rc = held_elsewhere(fd, dir, path, err, errlen);
        } else if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
            pp_warn("cannot lock %s: %s: this file system has no (working) fcntl locks, so another "
                    "run writing into output.dir '%s' at the same time would not be stopped "
                    "(docs/config.md, output.dir)",
                    path, strerror(e), dir);
            rc = PP_OK;
        } else {
            rc = pp_errf(err, errlen, PP_ERUNTIME, "cannot lock %s: %s", path, strerror(e));
        }
        close(fd);
        return rc;
    }
    int rc = write_holder(fd, path, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    l->fd = fd;
    return PP_OK;
}

void outdir_unlock(OutdirLock *l) {
    if (l->fd >= 0) close(l->fd); /* drops the lock */
    l->fd = -1;
}
