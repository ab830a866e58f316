/* test_report.c — what the end-of-run report says (issue 17, item 11): the pipeline
 * efficiency is never printed above 100%; when the measured time is shorter than the
 * simulator's estimate the report says so in words. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "checkrun.h"

START_TEST(test_efficiency_at_most_100) {
    char buf[256];
    runtime_efficiency_text(0.0098, 0.0100, buf, sizeof buf);
    ck_assert_str_eq(buf, "efficiency 98.0%");
    runtime_efficiency_text(0.0100, 0.0100, buf, sizeof buf);
    ck_assert_str_eq(buf, "efficiency 100.0%");
    /* the measured run beat the estimate: both times are on the line, no 104% */
    runtime_efficiency_text(0.0104, 0.0100, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "%") == NULL &&
                      strstr(buf, "measured faster than the simulator's estimate"),
                  "%s", buf);
    runtime_efficiency_text(0.0100, 0.0, buf, sizeof buf); /* nothing measured: no division by 0 */
    ck_assert_msg(strstr(buf, "%") == NULL, "%s", buf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");
    tcase_add_test(tc, test_efficiency_at_most_100);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
