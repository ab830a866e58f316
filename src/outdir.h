/* outdir.h — output.dir held by one run at a time: an fcntl lock on output.dir/lock
 * that dies with the process holding it ([Note: output.dir lock] in outdir.c). */
#ifndef PP_OUTDIR_H
#define PP_OUTDIR_H

#include <stddef.h>

#define OUTDIR_LOCK_FILE "lock"

typedef struct {
    int fd; /* the open lock file, -1 when not held */
} OutdirLock;

/* Take the exclusive lock on `dir`/lock (created if missing; dir must exist) without
 * waiting, and write the holder into it: one line naming the host, the pid, the SLURM
 * job (and array task) when there is one, and the start time. Returns PP_OK holding
 * it; PP_OK without it (l->fd -1, a warning printed) where the file system has no
 * locks; PP_EUSAGE when another process holds it, with a message naming that holder
 * (from its line) and what to do; PP_ERUNTIME when the file cannot be opened or
 * written. The lock lasts until outdir_unlock or the end of the process, whichever
 * comes first, also SIGKILL. */
int outdir_lock(OutdirLock *l, const char *dir, char *err, size_t errlen);

/* Release the lock (closing the file); nothing when not held. The file stays. */
void outdir_unlock(OutdirLock *l);

#endif
