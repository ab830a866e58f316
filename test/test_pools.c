/* test_pools.c — the pool sizes the runtime allocates from the schedule ([Note:
 * runtime slots]: sched_peak_inflight / sched_peak_recv), for every generated schedule,
 * and the rank layout. The interpreter itself is tested in test_interp.c. */
#include <check.h>

#include <string.h>

#include "runtime/layout.h"
#include "runtime/runtime.h"
#include "sched/sched.h"
#include "checkrun.h"

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
                    int pool = sched_peak_inflight(&s, st);
                    ck_assert_msg(pool >= 1 && pool <= M, "%s P=%d v=%d M=%d stage %d: pool %d",
                                  kind, P, v, M, st, pool);
                    /* forward-only: one at a time */
                    ck_assert_int_eq(sched_peak_inflight(&f, st), 1);
                    int nr = sched_peak_recv(&s, st);
                    int remote_input = st > 0 && sched_stage_rank(&s, st - 1) != r;
                    ck_assert_msg(remote_input ? (nr >= 1 && nr <= M) : nr == 0,
                                  "%s P=%d v=%d M=%d stage %d: %d receive buffers", kind, P, v, M,
                                  st, nr);
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
    for (int r = 0; r < 4; r++) ck_assert_int_eq(sched_peak_inflight(&s, r), 4 - r);
    sched_free(&s);
}
END_TEST
START_TEST(test_pool_interleaved) { check_kind("interleaved-1f1b", 3); }
END_TEST

/* [Note: rank layout]: replicas of a pipeline rank are neighbours; every world rank is
 * one (pp, dp) and back; a world that is not stages x replicas is refused. */
START_TEST(test_layout) {
    char err[PP_ERR_MAX];
    Layout l;
    int seen[12] = {0};
    for (int rank = 0; rank < 12; rank++) {
        ck_assert_int_eq(layout_init(&l, 12, rank, 3, 4, err, sizeof err), PP_OK);
        ck_assert_int_eq(l.pp, rank / 4);
        ck_assert_int_eq(l.dp, rank % 4);
        ck_assert_int_eq(layout_rank_of(&l, l.pp, l.dp), rank);
        seen[layout_rank_of(&l, 2 - l.pp, l.dp)]++;
    }
    for (int r = 0; r < 12; r++) ck_assert_int_eq(seen[r], 1);
    /* auto: D = world / stages */
    ck_assert_int_eq(layout_init(&l, 6, 5, 3, 0, err, sizeof err), PP_OK);
    ck_assert_int_eq(l.D, 2);
    ck_assert_int_eq(layout_init(&l, 3, 0, 2, 1, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "pipeline.stages 2 x pipeline.data_parallel 1 = 2 processes, but 3 "
                              "processes were launched"),
                  "%s", err);
    /* auto: 3 is not a multiple of 2 */
    ck_assert_int_eq(layout_init(&l, 3, 0, 2, 0, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "the world size must be a multiple of the stages"), "%s", err);
    char line[512];
    ck_assert_int_eq(layout_init(&l, 4, 3, 2, 0, err, sizeof err), PP_OK);
    layout_describe(&l, line, sizeof line);
    ck_assert_str_eq(line, "layout: 2 pipeline ranks x 2 replicas = 4 processes; pipelines: {0 2} "
                           "{1 3}; replicas of a pipeline rank (gradient all-reduce): {0 1} {2 3}");
    ck_assert_int_eq(layout_init(&l, 1, 0, 1, 1, err, sizeof err), PP_OK);
    ck_assert_int_eq(l.P * l.D, 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pools and layout");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, test_pool_gpipe);
    tcase_add_test(tc, test_pool_1f1b);
    tcase_add_test(tc, test_pool_interleaved);
    tcase_add_test(tc, test_layout);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
