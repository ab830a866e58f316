/* test_tb.c — TensorBoard event files (src/tb.c): CRC-32C against its standard check
 * values, the TFRecord mask against the bytes TensorBoard's own RecordWriter writes, the
 * records of a written file decoded by protobuf-c (a 0.0 scalar present), the names
 * (a resume in the same second still sorts after), a resume cutting the earlier files'
 * later steps and a damaged tail, and a fresh run removing the earlier files it owns. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "tb.h"
#include "tb_event.pb-c.h"
#include "checkrun.h"
#include "testdir.h"

static char g_err[PP_ERR_MAX];

static void setup(void) {
    testdir_create("pp_test_tb");
    g_err[0] = 0;
}

static void teardown(void) { testdir_remove(); }

START_TEST(crc32c_check_values) {
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    ck_assert_uint_eq(tb_crc32c(0, "123456789", 9), 0xE3069283u); /* the CRC catalogue's */
    ck_assert_uint_eq(tb_crc32c(0, "", 0), 0);
    /* RFC 3720 (iSCSI) B.4 */
    ck_assert_uint_eq(tb_crc32c(0, zeros, 32), 0x8A9136AAu);
    ck_assert_uint_eq(tb_crc32c(0, ones, 32), 0x62A8AB43u);
    ck_assert_uint_eq(tb_crc32c(0, inc, 32), 0x46DD794Eu);
    ck_assert_uint_eq(tb_crc32c(tb_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u); /* extends */
}
END_TEST

/* The record of "pptrain" as tensorboard.summary.writer.record_writer.RecordWriter
 * (TensorBoard 2.21) writes it: length, masked CRC of it, data, masked CRC of the data. */
START_TEST(mask_matches_tensorboard) {
    static const unsigned char rec[] = {0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                        0xbb, 0xd7, 0x9f, 0x11, 0x70, 0x70, 0x74, 0x72,
                                        0x61, 0x69, 0x6e, 0x16, 0xf0, 0xc4, 0xb8};
    ck_assert_uint_eq(tb_crc_mask(tb_crc32c(0, rec, 8)), 0x119fd7bbu);
    ck_assert_uint_eq(tb_crc_mask(tb_crc32c(0, rec + 12, 7)), 0xb8c4f016u);
    ck_assert_uint_eq(tb_crc_mask(0), 0xa282ead8u);
}
END_TEST

/* The names of g_dir's event files, sorted, joined by ' ' (static buffer). */
static const char *names(void) {
    static char buf[4096];
    struct dirent **e;
    int n = scandir(g_dir, &e, NULL, alphasort);
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        if (e[i]->d_name[0] != '.') pp_strappendf(buf, sizeof buf, "%s ", e[i]->d_name);
        free(e[i]);
    }
    free(e);
    return buf;
}

/* The events of file `path`: n records, steps[i] and, for summaries, the first value's
 * tag and value; fails the test on a bad framing or CRC. Returns the record count. */
static int read_events(const char *path, long *steps, char (*tags)[64], float *vals, int max) {
    char *text;
    size_t len, at = 0;
    int n = 0;
    ck_assert_int_eq(pp_read_file(path, NULL, &text, &len, g_err, sizeof g_err), PP_OK);
    const unsigned char *p = (const unsigned char *)text;
    while (at < len) {
        ck_assert_uint_ge(len - at, 16);
        uint64_t dl;
        uint32_t c1, c2;
        memcpy(&dl, p + at, 8); /* little-endian host */
        memcpy(&c1, p + at + 8, 4);
        ck_assert_uint_eq(c1, tb_crc_mask(tb_crc32c(0, p + at, 8)));
        ck_assert_uint_le(dl, len - at - 16);
        memcpy(&c2, p + at + 12 + dl, 4);
        ck_assert_uint_eq(c2, tb_crc_mask(tb_crc32c(0, p + at + 12, dl)));
        Tensorboard__Event *ev = tensorboard__event__unpack(NULL, dl, p + at + 12);
        ck_assert_ptr_nonnull(ev);
        ck_assert_int_lt(n, max);
        steps[n] = (long)ev->step;
        tags[n][0] = 0;
        if (n == 0) {
            ck_assert_int_eq(ev->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
            ck_assert_str_eq(ev->file_version, TB_FILE_VERSION);
        } else {
            ck_assert_int_eq(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
            ck_assert_uint_ge(ev->summary->n_value, 1);
            const Tensorboard__Summary__Value *v = ev->summary->value[0];
            ck_assert_int_eq(v->value_case, TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
            snprintf(tags[n], 64, "%s", v->tag);
            vals[n] = v->simple_value;
        }
        ck_assert(ev->wall_time > 1e9);
        tensorboard__event__free_unpacked(ev, NULL);
        at += 16 + dl;
        n++;
    }
    free(text);
    return n;
}

/* Write steps first..last (tag "t/x", value step - 2: 0.0 at step 2) to a new file of
 * rank; returns its path (static buffer of the ring). */
static const char *write_steps(int rank, int world, long resumed_at, int first, int last) {
    static char paths[4][PP_PATH_MAX];
    static int k;
    TbWriter *w;
    ck_assert_msg(tb_open(&w, g_dir, rank, world, resumed_at, g_err, sizeof g_err) == PP_OK, "%s",
                  g_err);
    for (int s = first; s <= last; s++) {
        TbScalar v[2] = {{"t/x", (float)(s - 2)}, {"t/y", -1.5f}};
        ck_assert_int_eq(tb_write(w, s, v, 2, g_err, sizeof g_err), PP_OK);
    }
    char *p = paths[k++ % 4];
    snprintf(p, PP_PATH_MAX, "%s", tb_path(w));
    tb_close(w);
    return p;
}

START_TEST(written_events_decode) {
    long steps[8];
    char tags[8][64];
    float vals[8];
    const char *path = write_steps(3, 4, -1, 1, 3);
    char want[300];
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, ".%s.rank00003", host);
    ck_assert_msg(strstr(path, "/" TB_FILE_PREFIX) &&
                      !strcmp(path + strlen(path) - strlen(want), want),
                  "%s", path);
    ck_assert_int_eq(read_events(path, steps, tags, vals, 8), 4);
    for (int i = 1; i < 4; i++) {
        ck_assert_int_eq(steps[i], i);
        ck_assert_str_eq(tags[i], "t/x");
        ck_assert(vals[i] == (float)(i - 2)); /* step 2: 0.0, present as a value */
    }
}
END_TEST

START_TEST(resume_cuts_later_steps) {
    long steps[16];
    char tags[16][64];
    float vals[16];
    const char *first = write_steps(0, 1, -1, 1, 8);
    /* a run killed while writing: half a record at the end */
    FILE *f = fopen(first, "ab");
    fwrite("\x10\0\0\0\0\0\0\0\1\2", 1, 10, f);
    fclose(f);
    const char *second = write_steps(0, 1, 5, 6, 7); /* at once: most likely the same second */
    ck_assert_msg(strcmp(first, second) < 0, "%s sorts before %s", second, first);
    ck_assert_int_eq(read_events(first, steps, tags, vals, 16), 6); /* version + steps 1-5 */
    ck_assert_int_eq(steps[5], 5);
    ck_assert_int_eq(read_events(second, steps, tags, vals, 16), 3);
    ck_assert_int_eq(steps[1], 6);
    /* resumed at step 7 again: the second file keeps 6-7, the first is not rewritten */
    const char *third = write_steps(0, 1, 7, 8, 8);
    ck_assert_msg(strcmp(second, third) < 0, "%s sorts before %s", third, second);
    ck_assert_int_eq(read_events(second, steps, tags, vals, 16), 3);
    ck_assert_int_eq(read_events(first, steps, tags, vals, 16), 6);
}
END_TEST

START_TEST(fresh_run_removes_its_files) {
    write_steps(0, 4, -1, 1, 2);
    write_steps(1, 4, -1, 1, 2);
    write_steps(5, 6, -1, 1, 2); /* a rank of an earlier, larger run */
    FILE *f = fopen(tmp("events.out.tfevents.123.other"), "w"); /* not ours: kept */
    fclose(f);
    /* a fresh run of 2 ranks: rank 1 removes its own; rank 0 its own and rank 5's */
    write_steps(1, 2, -1, 1, 1);
    ck_assert_msg(strstr(names(), "rank00005") && strstr(names(), "rank00000"), "%s", names());
    write_steps(0, 2, -1, 1, 1);
    const char *n = names();
    ck_assert_msg(!strstr(n, "rank00005") && strstr(n, "events.out.tfevents.123.other "), "%s", n);
    int count = 0;
    for (const char *p = n; (p = strstr(p, ".rank0000")); p++) count++;
    ck_assert_msg(count == 2, "%s", n); /* one file each of ranks 0 and 1 */
}
END_TEST

START_TEST(unwritable_dir_is_an_error) {
    TbWriter *w = (TbWriter *)1;
    FILE *f = fopen(tmp("file"), "w");
    fclose(f);
    ck_assert_int_eq(tb_open(&w, tmp("file/tb"), 0, 1, -1, g_err, sizeof g_err), PP_ERUNTIME);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(g_err, "cannot create") && strstr(g_err, "file/tb"), "%s", g_err);
}
END_TEST

static Suite *tb_suite(void) {
    Suite *s = suite_create("tb");
    TCase *tc = tcase_create("tb");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, crc32c_check_values);
    tcase_add_test(tc, mask_matches_tensorboard);
    tcase_add_test(tc, written_events_decode);
    tcase_add_test(tc, resume_cuts_later_steps);
    tcase_add_test(tc, fresh_run_removes_its_files);
    tcase_add_test(tc, unwritable_dir_is_an_error);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return check_run(tb_suite(), 0); }
