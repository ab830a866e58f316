/* testdir.h — a fresh temporary directory per test (a Check checked fixture) and
 * paths in it, shared by the tests that write files. */
#ifndef PP_TESTDIR_H
#define PP_TESTDIR_H

extern char g_dir[256]; /* the current test's directory */

/* mkdtemp /tmp/<prefix>.XXXXXX into g_dir (fails the test if it cannot). */
void testdir_create(const char *prefix);
/* Remove g_dir and everything in it. */
void testdir_remove(void);
/* g_dir + "/" + name, in a ring of 16 buffers: valid for the next 15 calls. */
const char *tmp(const char *name);
/* lstat succeeds (a dangling symlink exists too). */
int file_exists(const char *path);
/* The file's size, -1 if it cannot be stat'ed. */
long long file_size(const char *path);

#endif
