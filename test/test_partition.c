/* test_partition.c — explicit splits, split points, cost balancing, and their errors. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "partition.h"

static char err[PP_ERR_MAX];

START_TEST(test_counts) {
    Partition p;
    ck_assert_int_eq(partition_build(&p, "[3, 2]", 5, 2, 64, 256, 64, err, sizeof err), PP_OK);
    ck_assert_int_eq(p.l0[0], 0); ck_assert_int_eq(p.l1[0], 3);
    ck_assert_int_eq(p.l0[1], 3); ck_assert_int_eq(p.l1[1], 5);
}
END_TEST

START_TEST(test_points) {
    Partition p;
    ck_assert_int_eq(partition_build(&p, "[\"layers.4\"]", 8, 2, 512, 10112, 500, err, sizeof err), PP_OK);
    ck_assert_int_eq(p.l1[0], 4); ck_assert_int_eq(p.l0[1], 4); ck_assert_int_eq(p.l1[1], 8);
    ck_assert_int_eq(partition_build(&p, "[\"layers.2\", \"layers.5\"]", 8, 3, 8, 16, 8, err, sizeof err), PP_OK);
    ck_assert_int_eq(p.l1[1], 5);
}
END_TEST

START_TEST(test_auto_balances_head) {
    Partition p;
    /* GPT-2 124M at T=256: the head costs about 5 layers, so the last stage gets fewer */
    ck_assert_int_eq(partition_build(&p, "auto", 12, 2, 768, 50304, 256, err, sizeof err), PP_OK);
    ck_assert_int_eq(p.l0[0], 0); ck_assert_int_eq(p.l1[1], 12);
    ck_assert_int_gt(p.l1[0] - p.l0[0], p.l1[1] - p.l0[1]);
    ck_assert_int_eq(p.l1[0], 9);
    /* tiny head: an even split */
    ck_assert_int_eq(partition_build(&p, "auto", 8, 4, 256, 256, 64, err, sizeof err), PP_OK);
    for (int s = 0; s < 4; s++) ck_assert_int_eq(p.l1[s] - p.l0[s], 2);
    /* every stage gets at least one layer even if the head dominates */
    ck_assert_int_eq(partition_build(&p, "auto", 4, 4, 8, 1 << 20, 8, err, sizeof err), PP_OK);
    for (int s = 0; s < 4; s++) ck_assert_int_eq(p.l1[s] - p.l0[s], 1);
}
END_TEST

START_TEST(test_errors) {
    Partition p;
    ck_assert_int_eq(partition_build(&p, "[3, 3]", 5, 2, 8, 16, 8, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "adds up to 6"));
    ck_assert_int_eq(partition_build(&p, "[5, 0]", 5, 2, 8, 16, 8, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
    ck_assert_int_eq(partition_build(&p, "[2, 3]", 5, 3, 8, 16, 8, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "lists 2 stages"));
    ck_assert_int_eq(partition_build(&p, "[\"layers.9\"]", 5, 2, 8, 16, 8, err, sizeof err), PP_EUSAGE);
    ck_assert_int_eq(partition_build(&p, "[\"layers.3\", \"layers.2\"]", 5, 3, 8, 16, 8, err, sizeof err), PP_EUSAGE);
    ck_assert_int_eq(partition_build(&p, "auto", 2, 3, 8, 16, 8, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "only 2 layers"));
    ck_assert_int_eq(partition_build(&p, "[\"layers.2\", 3]", 5, 3, 8, 16, 8, err, sizeof err), PP_EUSAGE);
}
END_TEST

START_TEST(test_print_placement) {
    /* the print says where each stage lives from the schedule's table, here a V */
    Partition p;
    int v_shape[4] = {0, 1, 1, 0};
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(partition_build(&p, "[1, 1, 1, 1]", 4, 4, 8, 16, 8, err, sizeof err), PP_OK);
    FILE *f = open_memstream(&text, &len);
    partition_print(&p, 2, v_shape, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "partition (4 stages on 2 ranks):\n"));
    ck_assert_ptr_nonnull(strstr(text, "  stage 0 on rank 0: layers 0-0 +embeddings  ("));
    ck_assert_ptr_nonnull(strstr(text, "  stage 2 on rank 1: layers 2-2  ("));
    ck_assert_ptr_nonnull(strstr(text, "  stage 3 on rank 0: layers 3-3 +final norm, head, loss  ("));
    free(text);
}
END_TEST

int main(void) {
    Suite *s = suite_create("partition");
    TCase *tc = tcase_create("partition");
    tcase_add_test(tc, test_counts);
    tcase_add_test(tc, test_points);
    tcase_add_test(tc, test_auto_balances_head);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_print_placement);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
