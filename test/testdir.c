/* testdir.c — temporary directories for the tests (see testdir.h). */
#define _XOPEN_SOURCE 700
#include "testdir.h"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

char g_dir[256];

void testdir_create(const char *prefix) {
    snprintf(g_dir, sizeof g_dir, "/tmp/%s.XXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

void testdir_remove(void) { nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

const char *tmp(const char *name) {
    static char buf[16][512];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

int file_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}
