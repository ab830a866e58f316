/* test_gemm_file.c — the file of GEMM algorithms ([Note: GEMM algorithm file] in
 * cuda/gemm_file.h), on the host: what the CUDA backend appends, read back field for
 * field; only the lines of the run's tag, the first of a key; every malformed line refused
 * naming the file and line; a missing file told apart; ranks appending at once (forked
 * processes) leave whole lines. What only a GPU can show (an algorithm read back runs and
 * gives the tuning run's bits) is test/gpu/run.sh's (make test-gpu). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkrun.h"
#include "gemm_file.h"

static char dir[64];

/* A fresh directory (dir) and the path of a file in it, not yet there. */
static void new_path(char path[128]) {
    snprintf(dir, sizeof dir, "/tmp/pp_gemm_file.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, 128, "%s/algos.txt", dir);
}

static void rm_tmp(const char *path) {
    unlink(path);
    rmdir(dir);
}

/* A key and an algorithm whose every field differs from the others (seed s). */
static GemmPin pin_of(int s) {
    GemmPin p;
    memset(&p, 0, sizeof p);
    GemmKey *k = &p.key;
    k->opA = s & 1, k->opB = (s >> 1) & 1, k->m = 768 + s, k->n = 16384 - s, k->k = 3072 + 2 * s;
    k->lda = 769 + s, k->ldb = 3073 + s, k->ldc = 770 + s, k->batch = 1 + s % 3, k->oop = s & 1;
    k->sA = 5000000000LL + s, k->sB = -7 - s, k->sC = 1LL << 40;
    k->ab = 1, k->compute = 68 + s, k->bias = -16, k->alA = 256, k->alB = 128, k->alC = 64;
    k->epi = 32 + s, k->d_bf16 = 1, k->alD = 16, k->alX = 8 + s;
    p.with_epi = s % 2;
    for (int i = 0; i < 8; i++) p.algo[i] = 0x0123456789abcdefull * (uint64_t)(i + 1) + (uint64_t)s;
    p.algo[7] = ~0ull - (uint64_t)s; /* the top bit set */
    return p;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_round_trip) {
    char path[128], err[512];
    new_path(path);
    GemmPin *got = NULL;
    int n = -1;
    ck_assert_int_eq(gemm_file_read(path, "tagA", &got, &n, err, sizeof err), 1); /* no file */
    ck_assert_int_eq(n, 0);
    char tagA[256], tagB[256];
    gemm_file_tag(tagA, sizeof tagA, 90, "NVIDIA H100 80GB HBM3", 130100);
    gemm_file_tag(tagB, sizeof tagB, 80, "NVIDIA A100-SXM4-40GB", 130100);
    ck_assert_str_eq(tagA, "sm90_NVIDIA_H100_80GB_HBM3_cublasLt130100");
    ck_assert_str_eq(tagB, "sm80_NVIDIA_A100-SXM4-40GB_cublasLt130100");
    /* three of tagA, one of tagB, then a second line for key 1 of tagA: the first counts */
    GemmPin p[4] = {pin_of(0), pin_of(1), pin_of(2), pin_of(3)};
    ck_assert_int_eq(gemm_file_append(path, tagA, &p[0], err, sizeof err), 0);
    ck_assert_int_eq(gemm_file_append(path, tagB, &p[3], err, sizeof err), 0);
    ck_assert_int_eq(gemm_file_append(path, tagA, &p[1], err, sizeof err), 0);
    ck_assert_int_eq(gemm_file_append(path, tagA, &p[2], err, sizeof err), 0);
    GemmPin again = p[1];
    again.algo[0] ^= 1;
    again.with_epi ^= 1;
    ck_assert_int_eq(gemm_file_append(path, tagA, &again, err, sizeof err), 0);
    ck_assert_int_eq(gemm_file_read(path, tagA, &got, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < 3; i++) { /* field for field, in the order appended */
        ck_assert_mem_eq(&got[i].key, &p[i].key, sizeof p[i].key);
        ck_assert_int_eq(got[i].with_epi, p[i].with_epi);
        ck_assert_mem_eq(got[i].algo, p[i].algo, sizeof p[i].algo);
    }
    free(got);
    ck_assert_int_eq(gemm_file_read(path, tagB, &got, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_mem_eq(&got[0].key, &p[3].key, sizeof p[3].key);
    free(got);
    ck_assert_int_eq(gemm_file_read(path, "sm90_other", &got, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 0);
    free(got);
    /* a syntax check alone (tag NULL), as the plan does */
    ck_assert_int_eq(gemm_file_read(path, NULL, NULL, NULL, err, sizeof err), 0);
    /* a last line still being written (no newline yet, cut in its last word): skipped */
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs("gemm tagA 1 0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8", f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(gemm_file_read(path, tagA, &got, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 3);
    free(got);
    rm_tmp(path);
}
END_TEST

/* Each malformed line: refused, naming the file and the line. */
static const char *const BAD[] = {
    "gemm tagA 1 0 0\n", /* too few fields */
    "gemm tagA 2 "       /* FUSED not 0 or 1 */
    "0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8\n",
    "gemm tagA 1 "
    "0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8 9\n", /* one word more */
    "gemm tagA 1 " /* a key field past an int */
    "0 0 99999999999 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8\n",
    "gemm tagA 1 " /* not hex */
    "0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 zz\n",
    "gem tagA 1 0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8\n",
    "gemm tagA 1 0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7\n", /* 7 words */
};

START_TEST(test_bad_line) {
    char path[128], err[512], text[2048];
    new_path(path);
    /* a comment, a blank line and a good line first: the bad one is line 4 */
    snprintf(text, sizeof text,
             "# pptrain's GEMM algorithms\n\n"
             "gemm tagA 1 0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8\n%s",
             BAD[_i]);
    write_text(path, text);
    GemmPin *got = (GemmPin *)1;
    int n = -1;
    err[0] = 0;
    ck_assert_int_eq(gemm_file_read(path, "tagA", &got, &n, err, sizeof err), -1);
    ck_assert_ptr_null(got);
    ck_assert_int_eq(n, 0);
    char want[200];
    snprintf(want, sizeof want, "%s:4: not a line of GEMM algorithms", path);
    ck_assert_msg(strstr(err, want), "line %d: %s", _i, err);
    ck_assert_int_eq(gemm_file_read(path, NULL, NULL, NULL, err, sizeof err), -1);
    rm_tmp(path);
}
END_TEST

START_TEST(test_long_line_and_unreadable) {
    char path[128], err[512];
    new_path(path);
    char *text = malloc(3000);
    memset(text, '1', 2998);
    memcpy(text, "gemm ", 5);
    text[2998] = '\n';
    text[2999] = 0;
    write_text(path, text);
    free(text);
    ck_assert_int_eq(gemm_file_read(path, "tagA", NULL, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, ":1: a line over"), "%s", err);
    unlink(path);
    /* a directory where the file should be: not "no such file" */
    ck_assert_int_eq(gemm_file_read(dir, "tagA", NULL, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "PPTRAIN_GEMM_ALGOS") && strstr(err, dir), "%s", err);
    GemmPin zero;
    memset(&zero, 0, sizeof zero);
    ck_assert_int_eq(gemm_file_append(dir, "tagA", &zero, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cannot append"), "%s", err);
    rmdir(dir);
}
END_TEST

/* 4 processes appending 50 lines each at once: 200 whole lines, every key once. */
START_TEST(test_concurrent_append) {
    char path[128], err[512];
    new_path(path);
    pid_t kids[4];
    for (int w = 0; w < 4; w++) {
        kids[w] = fork();
        ck_assert_int_ge(kids[w], 0);
        if (kids[w] == 0) {
            char e[512];
            for (int i = 0; i < 50; i++) {
                GemmPin p = pin_of(100 * w + i);
                if (gemm_file_append(path, "tagA", &p, e, sizeof e)) _exit(1);
            }
            _exit(0);
        }
    }
    for (int w = 0; w < 4; w++) {
        int st = 0;
        ck_assert_int_eq(waitpid(kids[w], &st, 0), kids[w]);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    GemmPin *got = NULL;
    int n = 0;
    ck_assert_int_eq(gemm_file_read(path, "tagA", &got, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 200);
    int seen[400] = {0};
    for (int i = 0; i < n; i++) {
        int s = got[i].key.m - 768; /* pin_of's seed */
        ck_assert(s >= 0 && s < 400);
        GemmPin want = pin_of(s);
        ck_assert_mem_eq(&got[i].key, &want.key, sizeof want.key);
        ck_assert_int_eq(got[i].with_epi, want.with_epi);
        ck_assert_mem_eq(got[i].algo, want.algo, sizeof want.algo);
        seen[s]++;
    }
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < 50; i++) ck_assert_int_eq(seen[100 * w + i], 1);
    free(got);
    rm_tmp(path);
}
END_TEST

static Suite *gemm_file_suite(void) {
    Suite *s = suite_create("gemm_file");
    TCase *t = tcase_create("file");
    tcase_add_test(t, test_round_trip);
    tcase_add_loop_test(t, test_bad_line, 0, (int)(sizeof BAD / sizeof BAD[0]));
    tcase_add_test(t, test_long_line_and_unreadable);
    tcase_add_test(t, test_concurrent_append);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return check_run(gemm_file_suite(), 0); }
