/* test_runtime.c — the runtime's activation pool is exactly what the schedule keeps in
 * flight ([Note: activation slots]), for every generated schedule. */
#include <check.h>

#include "runtime.h"
#include "sched.h"

static void check_kind(const char *kind, int vmax) {
    char err[PP_ERR_MAX];
    int checked = 0;
    for (int P = 1; P <= 4; P++)
        for (int v = 1; v <= vmax; v++)
            for (int M = 1; M <= 8; M++) {
                Schedule s, f;
                if (sched_build(&s, kind, P, v, M, err, sizeof err) != PP_OK) continue;
                ck_assert_int_eq(sched_build_forward_only(&f, &s, err, sizeof err), PP_OK);
                for (int st = 0; st < s.S; st++) {
                    int r = sched_stage_rank(&s, st);
                    ck_assert_msg(runtime_pool_size(&s, r, st) == sched_peak_inflight(&s, st),
                                  "%s P=%d v=%d M=%d stage %d: pool %d, peak in flight %d", kind, P, v, M, st,
                                  runtime_pool_size(&s, r, st), sched_peak_inflight(&s, st));
                    ck_assert_int_eq(runtime_pool_size(&f, r, st), 1); /* forward-only: one at a time */
                    int nr = runtime_recv_pool_size(&s, r, st);
                    int remote_input = st > 0 && sched_stage_rank(&s, st - 1) != r;
                    ck_assert_msg(remote_input ? (nr >= 1 && nr <= M) : nr == 0, "%s P=%d v=%d M=%d stage %d: %d receive buffers",
                                  kind, P, v, M, st, nr);
                    checked++;
                }
                sched_free(&s);
                sched_free(&f);
            }
    ck_assert_int_gt(checked, 20);
}

START_TEST(test_pool_gpipe) { check_kind("gpipe", 1); }
END_TEST
START_TEST(test_pool_1f1b) {
    check_kind("1f1b", 1);
    /* 1F1B keeps min(P - r, M) microbatches on rank r (PipeDream-Flush) */
    char err[PP_ERR_MAX];
    Schedule s;
    ck_assert_int_eq(sched_build(&s, "1f1b", 4, 1, 8, err, sizeof err), PP_OK);
    for (int r = 0; r < 4; r++) ck_assert_int_eq(runtime_pool_size(&s, r, r), 4 - r);
    sched_free(&s);
}
END_TEST
START_TEST(test_pool_interleaved) { check_kind("interleaved-1f1b", 3); }
END_TEST

int main(void) {
    Suite *s = suite_create("runtime");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, test_pool_gpipe);
    tcase_add_test(tc, test_pool_1f1b);
    tcase_add_test(tc, test_pool_interleaved);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
