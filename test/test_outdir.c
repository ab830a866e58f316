/* test_outdir.c — output.dir's lock ([Note: output.dir lock] in src/outdir.c): taken on
 * a fresh directory with the holder's line written; refused while another process
 * holds it, naming that process; free again once the holder is SIGKILLed or unlocks
 * (the file stays); a lock file that is a FIFO or a symlink refused without blocking.
 * The other process is a child of the test (POSIX locks of one process never conflict
 * with each other), ended by its PID. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "outdir.h"
#include "testdir.h"
#include "checkrun.h"

static char g_err[PP_ERR_MAX];

static void setup(void) {
    testdir_create("pp_test_outdir");
    g_err[0] = 0;
}

static void teardown(void) { testdir_remove(); }

#define ASSERT_ERR_HAS(s) ck_assert_msg(strstr(g_err, (s)) != NULL, "'%s' lacks '%s'", g_err, (s))

/* The lock file's content, NUL-terminated (read with plain stdio). */
static const char *lock_text(void) {
    static char buf[1024];
    FILE *f = fopen(tmp(OUTDIR_LOCK_FILE), "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* "pid P on host H" of this host. */
static void holder_of(pid_t pid, char *buf, size_t n) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(buf, n, "pid %d on host %s", (int)pid, host);
}

/* A child that locks g_dir (through outdir_lock, or with `raw` by a bare fcntl lock on
 * the file, writing no line), then, with `unlock`, unlocks again; it tells the parent
 * over a pipe and sleeps until killed (at most a minute). Returns its pid. */
static pid_t child_holding(int raw, int unlock) {
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        OutdirLock l;
        char err[PP_ERR_MAX], ok = 1;
        alarm(60); /* gone on its own if a failed check leaves it behind */
        close(p[0]);
        if (raw) {
            int fd = open(tmp(OUTDIR_LOCK_FILE), O_RDWR | O_CREAT, 0644);
            struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            ok = fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0;
        } else {
            ok = outdir_lock(&l, g_dir, err, sizeof err) == PP_OK && l.fd >= 0;
            if (unlock) outdir_unlock(&l);
        }
        if (write(p[1], &ok, 1) != 1) _exit(1);
        for (;;) pause();
    }
    close(p[1]);
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    close(p[0]);
    ck_assert_msg(ok == 1, "the child could not lock %s", g_dir);
    return pid;
}

static void end_child(pid_t pid) {
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
}

START_TEST(test_lock_fresh_dir) {
    OutdirLock l;
    char me[300];
    ck_assert_int_eq(outdir_lock(&l, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_int_ge(l.fd, 0);
    holder_of(getpid(), me, sizeof me);
    ck_assert_msg(strncmp(lock_text(), me, strlen(me)) == 0, "lock file '%s', want '%s...'",
                  lock_text(), me);
    ck_assert_ptr_null(strstr(lock_text(), "SLURM")); /* not a SLURM job here */
    outdir_unlock(&l);
    ck_assert_int_eq(l.fd, -1);
    ck_assert_int_eq(access(tmp(OUTDIR_LOCK_FILE), F_OK), 0); /* the file stays */
}
END_TEST

START_TEST(test_lock_names_slurm_job) {
    OutdirLock l;
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_ARRAY_JOB_ID", "4240", 1);
    setenv("SLURM_ARRAY_TASK_ID", "2", 1);
    ck_assert_int_eq(outdir_lock(&l, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_ptr_nonnull(strstr(lock_text(), ", SLURM job 4242 (array job 4240 task 2), since "));
    outdir_unlock(&l);
}
END_TEST

/* Held by another process: refused naming it; taken once it was SIGKILLed. */
START_TEST(test_held_then_killed) {
    OutdirLock l;
    char them[300], me[300];
    pid_t pid = child_holding(0, 0);
    holder_of(pid, them, sizeof them);
    ck_assert_int_eq(outdir_lock(&l, g_dir, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_int_eq(l.fd, -1);
    ASSERT_ERR_HAS("is in use by another run: ");
    ASSERT_ERR_HAS(them);
    ASSERT_ERR_HAS("wait until that run ends");
    ck_assert_msg(strncmp(lock_text(), them, strlen(them)) == 0,
                  "the refused run changed the file: %s", lock_text());
    end_child(pid);
    ck_assert_msg(outdir_lock(&l, g_dir, g_err, sizeof g_err) == PP_OK, "after SIGKILL: %s", g_err);
    holder_of(getpid(), me, sizeof me);
    ck_assert_msg(strncmp(lock_text(), me, strlen(me)) == 0, "lock file '%s', want '%s...'",
                  lock_text(), me);
    outdir_unlock(&l);
}
END_TEST

/* A holder that unlocked (and lives on) no longer keeps anyone out. */
START_TEST(test_unlocked_holder) {
    OutdirLock l;
    pid_t pid = child_holding(0, 1);
    ck_assert_msg(outdir_lock(&l, g_dir, g_err, sizeof g_err) == PP_OK, "%s", g_err);
    outdir_unlock(&l);
    end_child(pid);
}
END_TEST

/* A holder that has not written its line yet: still refused, saying so. */
START_TEST(test_held_without_line) {
    OutdirLock l;
    pid_t pid = child_holding(1, 0);
    ck_assert_int_eq(outdir_lock(&l, g_dir, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("a process that has not yet written its host and pid into the file");
    end_child(pid);
}
END_TEST

START_TEST(test_lock_file_not_regular) {
    OutdirLock l;
    ck_assert_int_eq(mkfifo(tmp(OUTDIR_LOCK_FILE), 0644), 0); /* would block a plain open */
    ck_assert_int_eq(outdir_lock(&l, g_dir, g_err, sizeof g_err), PP_ERUNTIME);
    ASSERT_ERR_HAS("is a FIFO, not a regular file: remove it");
    unlink(tmp(OUTDIR_LOCK_FILE));
    ck_assert_int_eq(symlink("elsewhere", tmp(OUTDIR_LOCK_FILE)), 0);
    ck_assert_int_eq(outdir_lock(&l, g_dir, g_err, sizeof g_err), PP_ERUNTIME);
    ASSERT_ERR_HAS("(a symbolic link: remove it)");
    ck_assert_int_eq(access(tmp("elsewhere"), F_OK), -1); /* nothing created through it */
    ck_assert_int_eq(outdir_lock(&l, tmp("no-such-dir"), g_err, sizeof g_err), PP_ERUNTIME);
    ASSERT_ERR_HAS("No such file or directory");
    ck_assert_int_eq(l.fd, -1);
}
END_TEST

static Suite *outdir_suite(void) {
    Suite *s = suite_create("outdir");
    TCase *tc = tcase_create("outdir");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_lock_fresh_dir);
    tcase_add_test(tc, test_lock_names_slurm_job);
    tcase_add_test(tc, test_held_then_killed);
    tcase_add_test(tc, test_unlocked_holder);
    tcase_add_test(tc, test_held_without_line);
    tcase_add_test(tc, test_lock_file_not_regular);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return check_run(outdir_suite(), 0);
}
