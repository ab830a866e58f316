/* test_common.c — the file helpers of common.c: pp_read_file (whole files, NULs,
 * regular files only, a size limit, every error), PPFile (nothing under the final name
 * before commit, abort leaves nothing, atomic replacement, a failed write or rename
 * reported with its reason and cleaned up, unwritable directories, stale temporary
 * names, stdio and fd writers) and pp_fsync_dir. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "testdir.h"
#include "checkrun.h"

static char g_err[PP_ERR_MAX];

static void setup(void) {
    testdir_create("pp_test_common");
    g_err[0] = 0;
}

static void teardown(void) {
    chmod(g_dir, 0755); /* a test may have made it read-only */
    testdir_remove();
}

#define ASSERT_ERR_HAS(s) ck_assert_msg(strstr(g_err, (s)) != NULL, "'%s' lacks '%s'", g_err, (s))

/* Write n bytes to path with plain stdio (independent of the code under test). */
static void put_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* The file's content (NUL-terminated, malloc'd) read with stdio; NULL if absent. */
static char *get_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *p = calloc(1, 1 << 20);
    size_t n = fread(p, 1, (1 << 20) - 1, f);
    p[n] = 0;
    fclose(f);
    return p;
}

/* Entries of g_dir other than . and .., as one string "a b c " in readdir order. */
static int dir_entries(char *names, size_t n) {
    DIR *d = opendir(g_dir);
    ck_assert_ptr_nonnull(d);
    int count = 0;
    names[0] = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        strncat(names, de->d_name, n - strlen(names) - 2);
        strcat(names, " ");
        count++;
    }
    closedir(d);
    return count;
}

/* ---- pp_read_file ---------------------------------------------------------------- */

START_TEST(test_read_whole_file_with_nuls) {
    const char data[] = "line one\n\0binary\xff tail"; /* a NUL inside */
    put_file(tmp("a.txt"), data, sizeof data - 1);
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(pp_read_file(tmp("a.txt"), NULL, &text, &len, g_err, sizeof g_err), PP_OK);
    ck_assert_uint_eq(len, sizeof data - 1);
    ck_assert_mem_eq(text, data, len);
    ck_assert_int_eq(text[len], 0); /* NUL-terminated */
    free(text);
    put_file(tmp("empty"), "", 0);
    ck_assert_int_eq(pp_read_file(tmp("empty"), NULL, &text, &len, g_err, sizeof g_err), PP_OK);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(text, "");
    free(text);
}
END_TEST

/* Only regular files are read: a FIFO without a writer (a plain open(2) would block
 * forever: the test's timeout), a device that never ends (/dev/zero) and a directory are
 * refused at once, saying what they are; a file over the limit is refused unread. */
START_TEST(test_read_only_regular_files) {
    const char *fifo = tmp("fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    char *text = (char *)"untouched", want[600];
    size_t len = 7;
    ck_assert_int_eq(pp_read_file(fifo, NULL, &text, &len, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(text);
    ck_assert_uint_eq(len, 0);
    snprintf(want, sizeof want, "cannot read %s: it is a FIFO, not a regular file", fifo);
    ck_assert_str_eq(g_err, want);
    ck_assert_int_eq(pp_read_file("/dev/zero", "config file", &text, &len, g_err, sizeof g_err),
                     PP_EUSAGE);
    ck_assert_str_eq(g_err, "cannot read config file: it is a character device, not a regular "
                            "file");
    put_file(tmp("ten"), "0123456789", 10);
    ck_assert_int_eq(pp_read_file_max(tmp("ten"), "x", 9, &text, &len, g_err, sizeof g_err),
                     PP_EUSAGE);
    ck_assert_int_eq(errno, EFBIG);
    ck_assert_str_eq(g_err, "cannot read x: it is 10 bytes, over the limit of 9 bytes");
    ck_assert_int_eq(pp_read_file_max(tmp("ten"), "x", 10, &text, &len, g_err, sizeof g_err),
                     PP_OK);
    ck_assert_uint_eq(len, 10);
    free(text);
    /* pp_open_regular: the descriptor is blocking again, the kind is named */
    struct stat st;
    int fd = pp_open_regular(tmp("ten"), &st);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    ck_assert_int_eq(pp_open_regular(fifo, &st), -2);
    ck_assert_str_eq(pp_file_kind(st.st_mode), "a FIFO");
    ck_assert_int_eq(pp_open_regular(g_dir, &st), -2);
    ck_assert_int_eq(errno, EISDIR);
    ck_assert_int_eq(pp_open_regular(tmp("missing"), &st), -1);
    ck_assert_int_eq(errno, ENOENT);
}
END_TEST

START_TEST(test_read_errors) {
    char *text = (char *)"untouched";
    size_t len = 7;
    const char *missing = tmp("missing.yaml");
    ck_assert_int_eq(pp_read_file(missing, NULL, &text, &len, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_ptr_null(text);
    ck_assert_uint_eq(len, 0);
    char want[600];
    snprintf(want, sizeof want, "cannot open %s: No such file or directory", missing);
    ck_assert_str_eq(g_err, want);
    /* a directory is not read */
    ck_assert_int_eq(pp_read_file(g_dir, NULL, &text, &len, g_err, sizeof g_err), PP_EUSAGE);
    ck_assert_int_eq(errno, EISDIR);
    snprintf(want, sizeof want, "cannot read %s: it is a directory, not a regular file", g_dir);
    ck_assert_str_eq(g_err, want);
    /* `what` names the file instead of its path */
    ck_assert_int_eq(pp_read_file(missing, "config file", &text, &len, g_err, sizeof g_err),
                     PP_EUSAGE);
    ck_assert_str_eq(g_err, "cannot open config file: No such file or directory");
    ck_assert_int_eq(pp_read_file(g_dir, "config file", &text, &len, NULL, 0), PP_EUSAGE);
}
END_TEST

/* ---- PPFile ----------------------------------------------------------------------- */

/* Before commit only the temporary name exists, holding what was written; after it
 * only the final name, and the directory holds nothing else. */
START_TEST(test_nothing_under_the_final_name_before_commit) {
    const char *path = tmp("out.csv");
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, NULL, g_err, sizeof g_err), PP_OK);
    ck_assert_str_eq(pf.path, path);
    char want[600];
    snprintf(want, sizeof want, "%s.tmp.%ld", path, (long)getpid());
    ck_assert_str_eq(pf.tmp, want);
    fprintf(pf.f, "step,loss\n");
    for (int i = 1; i <= 1000; i++) fprintf(pf.f, "%d,%d\n", i, 1000 - i);
    fflush(pf.f);
    ck_assert(!file_exists(path));
    ck_assert(file_exists(pf.tmp));
    char names[4096];
    ck_assert_int_eq(dir_entries(names, sizeof names), 1);
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_OK);
    ck_assert(!file_exists(want));
    ck_assert_int_eq(dir_entries(names, sizeof names), 1);
    ck_assert_str_eq(names, "out.csv ");
    char *got = get_file(path);
    ck_assert_ptr_nonnull(strstr(got, "step,loss\n1,999\n"));
    ck_assert_ptr_nonnull(strstr(got, "\n1000,0\n"));
    free(got);
    pp_file_abort(&pf); /* after a commit: a no-op, the file stays */
    ck_assert(file_exists(path));
}
END_TEST

START_TEST(test_abort_leaves_nothing) {
    const char *path = tmp("x.bin");
    put_file(path, "old", 3);
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, NULL, g_err, sizeof g_err), PP_OK);
    fputs("buffered, never flushed", pf.f);
    ck_assert_int_eq(write(pf.fd, "written", 7), 7);
    pp_file_abort(&pf);
    pp_file_abort(&pf); /* twice is safe */
    char names[4096];
    ck_assert_int_eq(dir_entries(names, sizeof names), 1); /* only the old x.bin */
    char *got = get_file(path);
    ck_assert_str_eq(got, "old");
    free(got);
}
END_TEST

/* Commit swaps the inode: a reader that opened the old file keeps reading it whole,
 * the name gives the new one whole; until the commit the name gives the old one. */
START_TEST(test_commit_replaces_atomically) {
    const char *path = tmp("model.bin");
    put_file(path, "the old content", 15);
    struct stat before, after;
    ck_assert_int_eq(stat(path, &before), 0);
    int old_fd = open(path, O_RDONLY);
    ck_assert_int_ge(old_fd, 0);
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, NULL, g_err, sizeof g_err), PP_OK);
    fputs("the new content, longer", pf.f);
    fflush(pf.f);
    char *got = get_file(path);
    ck_assert_str_eq(got, "the old content");
    free(got);
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(stat(path, &after), 0);
    ck_assert(before.st_ino != after.st_ino);
    got = get_file(path);
    ck_assert_str_eq(got, "the new content, longer");
    free(got);
    char buf[64] = {0};
    ck_assert_int_eq(read(old_fd, buf, sizeof buf - 1), 15);
    ck_assert_str_eq(buf, "the old content");
    close(old_fd);
}
END_TEST

/* Writing through fd (as the checkpoint shards do), with a fixed suffix. */
START_TEST(test_fd_writer_and_fixed_suffix) {
    const char *path = tmp("shard.ckpt");
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, ".part", g_err, sizeof g_err), PP_OK);
    ck_assert_str_eq(pf.tmp, tmp("shard.ckpt.part"));
    ck_assert_int_eq(write(pf.fd, "abc", 3), 3);
    ck_assert_int_eq(pwrite(pf.fd, "X", 1, 1), 1);
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_OK);
    char *got = get_file(path);
    ck_assert_str_eq(got, "aXc");
    free(got);
    ck_assert(!file_exists(tmp("shard.ckpt.part")));
}
END_TEST

/* A stale temporary file is replaced, and a symlink under that name is not followed. */
START_TEST(test_stale_temporary_names) {
    const char *path = tmp("m");
    put_file(tmp("victim"), "keep me", 7);
    ck_assert_int_eq(symlink(tmp("victim"), tmp("m.tmp")), 0);
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, ".tmp", g_err, sizeof g_err), PP_OK);
    fputs("manifest", pf.f);
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_OK);
    char *got = get_file(tmp("victim"));
    ck_assert_str_eq(got, "keep me");
    free(got);
    /* unique names: a leftover of this pid is skipped, not reused */
    char stale[600];
    snprintf(stale, sizeof stale, "%s.tmp.%ld", path, (long)getpid());
    put_file(stale, "leftover", 8);
    PPFile a, b;
    ck_assert_int_eq(pp_file_create(&a, path, NULL, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(pp_file_create(&b, path, NULL, g_err, sizeof g_err), PP_OK);
    ck_assert_str_ne(a.tmp, stale);
    ck_assert_str_ne(a.tmp, b.tmp);
    fputs("from a", a.f);
    fputs("from b", b.f);
    ck_assert_int_eq(pp_file_commit(&a, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(pp_file_commit(&b, g_err, sizeof g_err), PP_OK);
    got = get_file(path);
    ck_assert_str_eq(got, "from b");
    free(got);
    got = get_file(stale);
    ck_assert_str_eq(got, "leftover");
    free(got);
}
END_TEST

/* An unwritable or missing directory: a clear message naming both names, nothing left,
 * and the PPFile closed (abort and commit are safe). As root a mode-0555 directory is
 * still writable, so root tries /sys (sysfs refuses new files even to root). */
START_TEST(test_unwritable_directory) {
    char path[600], want[1400];
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(g_dir, 0555), 0);
        snprintf(path, sizeof path, "%s", tmp("out.bin"));
    } else {
        snprintf(path, sizeof path, "/sys/pptrain-test-%ld.bin", (long)getpid());
    }
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, NULL, g_err, sizeof g_err), PP_ERUNTIME);
    int e = errno;
    ck_assert_msg(e == EACCES || e == EROFS || e == EPERM, "errno %d", e);
    snprintf(want, sizeof want, "writing %s failed: cannot create %s.tmp.%ld: %s", path, path,
             (long)getpid(), strerror(e));
    ck_assert_str_eq(g_err, want);
    ck_assert(!file_exists(path));
    ck_assert_ptr_null(pf.f);
    pp_file_abort(&pf);
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_ERUNTIME);
    /* a directory that does not exist */
    ck_assert_int_eq(pp_file_create(&pf, tmp("no/such/dir/x"), ".part", g_err, sizeof g_err),
                     PP_ERUNTIME);
    ASSERT_ERR_HAS("no/such/dir/x.part: No such file or directory");
    ASSERT_ERR_HAS("writing ");
    char long_path[PP_PATH_MAX + 10];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = 0;
    ck_assert_int_eq(pp_file_create(&pf, long_path, NULL, NULL, 0), PP_ERUNTIME);
    ck_assert_int_eq(errno, ENAMETOOLONG);
}
END_TEST

/* A write through f that fails (here: past RLIMIT_FSIZE, as a full disk would) fails
 * the commit with its reason, although stdio's buffer and errno forgot it; the old
 * file stays and the temporary file is removed. Check forks each test, so the limit
 * ends with it. */
START_TEST(test_failed_write_fails_commit) {
    const char *path = tmp("big.bin");
    put_file(path, "old", 3);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, NULL, g_err, sizeof g_err), PP_OK);
    static char block[100000];
    fwrite(block, 1, sizeof block, pf.f);
    errno = 0;
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_ERUNTIME);
    char want[700];
    snprintf(want, sizeof want, "writing %s failed: %s", path, strerror(EFBIG));
    ck_assert_str_eq(g_err, want);
    char names[4096];
    ck_assert_int_eq(dir_entries(names, sizeof names), 1);
    char *got = get_file(path);
    ck_assert_str_eq(got, "old");
    free(got);
}
END_TEST

/* The rename fails when the final name is a non-empty directory: reported, cleaned. */
START_TEST(test_failed_rename) {
    const char *path = tmp("taken");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    put_file(tmp("taken/inside"), "x", 1);
    PPFile pf;
    ck_assert_int_eq(pp_file_create(&pf, path, NULL, g_err, sizeof g_err), PP_OK);
    fputs("data", pf.f);
    ck_assert_int_eq(pp_file_commit(&pf, g_err, sizeof g_err), PP_ERUNTIME);
    ASSERT_ERR_HAS("cannot rename the temporary file over it: Is a directory");
    ASSERT_ERR_HAS(path);
    ck_assert(!file_exists(pf.tmp));
    char names[4096];
    ck_assert_int_eq(dir_entries(names, sizeof names), 1);
}
END_TEST

START_TEST(test_fsync_dir) {
    ck_assert_int_eq(pp_fsync_dir(g_dir), 0);
    ck_assert_int_eq(pp_fsync_dir("."), 0);
    ck_assert_int_eq(pp_fsync_dir(tmp("absent")), -1);
    ck_assert_int_eq(errno, ENOENT);
    put_file(tmp("file"), "x", 1);
    ck_assert_int_eq(pp_fsync_dir(tmp("file")), -1);
    ck_assert_int_eq(errno, ENOTDIR);
}
END_TEST

static Suite *common_suite(void) {
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("files");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_read_whole_file_with_nuls);
    tcase_add_test(tc, test_read_only_regular_files);
    tcase_add_test(tc, test_read_errors);
    tcase_add_test(tc, test_nothing_under_the_final_name_before_commit);
    tcase_add_test(tc, test_abort_leaves_nothing);
    tcase_add_test(tc, test_commit_replaces_atomically);
    tcase_add_test(tc, test_fd_writer_and_fixed_suffix);
    tcase_add_test(tc, test_stale_temporary_names);
    tcase_add_test(tc, test_unwritable_directory);
    tcase_add_test(tc, test_failed_write_fails_commit);
    tcase_add_test(tc, test_failed_rename);
    tcase_add_test(tc, test_fsync_dir);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return check_run(common_suite(), 0);
}
