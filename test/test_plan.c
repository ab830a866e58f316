/* test_plan.c — the planner's pieces: serial links in the simulator against closed
 * forms, the link and cost parsers, the per-layer fit, and reading a trace. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "plan/plan.h"
#include "sched/sched.h"
#include "sched/sched_sim.h"
#include "testdir.h"
#include "checkrun.h"

/* GPT-2's costs at width C, padded vocabulary Vp and length T (= the position table). */
static const ArchCosts *arch(int C, int Vp, int T) {
    static ArchCosts a;
    ModelDims d = {.V = Vp, .Vp = Vp, .maxT = T, .L = 1, .NH = 1, .C = C, .tied = 1,
                   .arch = &arch_gpt2};
    model_arch_costs(&d, T, &a);
    return &a;
}

static char err[PP_ERR_MAX];

static double makespan(const char *kind, int P, int M, double F, double B, double X, int serial) {
    Schedule s;
    SchedSimCosts c;
    SchedSimResult res;
    ck_assert_int_eq(sched_build(&s, kind, P, 1, M, err, sizeof err), PP_OK);
    sched_sim_costs_default(&c);
    c.F = F;
    c.B = B;
    c.X = X;
    c.serial_links = serial;
    ck_assert_msg(sched_sim_run(&s, &c, &res, err, sizeof err, NULL) == PP_OK, "%s", err);
    double t = res.makespan;
    sched_sim_result_free(&res);
    sched_free(&s);
    return t;
}

/* GPipe, P = 2, M = 4, F = B = 1, X = 3 > F: rank 0's four sends queue on the one link
 * to rank 1, the k-th arriving at F + kX; rank 1's last forward ends at 2F + MX, its
 * four gradients queue the same way back, and rank 0's last backward ends at
 * 2F + 2B + 2MX = 28. Independent messages: rank 1's forwards end at MF + X + F = 8, its
 * backwards at 12, the last gradient arrives at 15 and rank 0 ends at 16. */
START_TEST(test_serial_links_queue) {
    ck_assert_double_eq_tol(makespan("gpipe", 2, 4, 1, 1, 3, 1), 28, 1e-12);
    ck_assert_double_eq_tol(makespan("gpipe", 2, 4, 1, 1, 3, 0), 16, 1e-12);
    /* a link that is free again before the next send changes nothing */
    ck_assert_double_eq_tol(makespan("gpipe", 2, 4, 1, 1, 0.5, 1),
                            makespan("gpipe", 2, 4, 1, 1, 0.5, 0), 1e-12);
}
END_TEST

/* [Note: link model] 1F1B on P stages of equal F and B with each transfer X <= F + B:
 * makespan = (M + P - 1)(F + B) + 2(P - 1 + floor((M - 1)(P - 1) / P)) X: the first
 * microbatch's trip down and back (2(P-1) transfers), and each further round trip
 * between neighbours the steady state cannot hide. Held for every P <= 8, M <= 24 and
 * X from 0 to F + B; past F + B the pattern changes (checked: the formula no longer
 * holds at X = 1.4(F + B)). */
START_TEST(test_1f1b_transfer_closed_form) {
    const double F = 1, B = 2, xs[] = {0, 0.1, 0.75, 1.5, 3};
    int checked = 0;
    for (int P = 2; P <= 8; P++)
        for (int M = 1; M <= 24; M++)
            for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
                double X = xs[k], crossings = 2.0 * (P - 1 + (M - 1) * (P - 1) / P);
                double want = (M + P - 1) * (F + B) + crossings * X;
                double got = makespan("1f1b", P, M, F, B, X, 1);
                ck_assert_msg(fabs(got - want) < 1e-9,
                              "P=%d M=%d X=%g: makespan %.12g, closed form %.12g", P, M, X, got,
                              want);
                checked++;
            }
    ck_assert_int_eq(checked, 7 * 24 * 5);
    int off = 0; /* beyond X = F + B the closed form is not the simulator's */
    for (int P = 2; P <= 8; P++) {
        double X = 1.4 * (F + B);
        double want = (16 + P - 1) * (F + B) + 2.0 * (P - 1 + 15 * (P - 1) / P) * X;
        off += fabs(makespan("1f1b", P, 16, F, B, X, 1) - want) > 1e-9;
    }
    ck_assert_int_gt(off, 0);
}
END_TEST

START_TEST(test_link_parse) {
    Link l;
    ck_assert_int_eq(plan_parse_link("nvlink", &l), PP_OK);
    ck_assert_double_eq(l.gbps, 450);
    ck_assert_double_eq(l.latency_us, 5);
    ck_assert_int_eq(plan_parse_link("ib", &l), PP_OK);
    ck_assert_double_eq(l.gbps, 50);
    ck_assert_int_eq(plan_parse_link("ib-hdr", &l), PP_OK);
    ck_assert_double_eq(l.gbps, 25);
    ck_assert_int_eq(plan_parse_link("none", &l), PP_OK);
    ck_assert_double_eq(plan_link_ms(&l, 1e9), 0);
    ck_assert_int_eq(plan_parse_link("10,50", &l), PP_OK);
    /* 10 us + 50e6 B / 50 GB/s = 0.01 ms + 1 ms */
    ck_assert_double_eq_tol(plan_link_ms(&l, 50e6), 1.01, 1e-12);
    ck_assert_double_eq(plan_link_ms(&l, 0), 0);
    const char *bad[] = {"", "fast", "5", "5,0", "-1,3", "5,inf", "5,nan", "5,450,1", "5,,450",
                         "5;450", "nvlink2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(plan_parse_link(bad[i], &l) == PP_EUSAGE, "'%s' was accepted", bad[i]);
}
END_TEST

START_TEST(test_layer_costs_parse) {
    LayerCosts c;
    ck_assert_int_eq(plan_parse_layer_costs("1.5,3", &c), PP_OK);
    ck_assert_double_eq(c.layer_f, 1.5);
    ck_assert_double_eq(c.layer_b, 3);
    ck_assert_double_eq(c.head_f, 0);
    ck_assert_int_eq(plan_parse_layer_costs("1,2,0.1,0.2,5,0.5", &c), PP_OK);
    ck_assert_double_eq(c.embed_b, 0.2);
    ck_assert_double_eq(c.head_f, 5);
    ck_assert_double_eq(c.head_b, 0.5);
    const char *bad[] = {"", "1", "0,2", "1,0", "1,2,3", "1,2,3,4,5", "1,2,3,4,5,6,7", "1,-2",
                         "1,2,x,1,1,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(plan_parse_layer_costs(bad[i], &c) == PP_EUSAGE, "'%s' was accepted", bad[i]);
}
END_TEST

/* The fit recovers per-layer costs that made the stage costs, and keeps the total
 * where the stages cannot separate them. */
START_TEST(test_fit_layers) {
    Partition p;
    LayerCosts want = {1.0, 2.0, 0.1, 0.2, 5.0, 0.5}, got;
    double F[PP_MAX_STAGES], B[PP_MAX_STAGES];
    ck_assert_int_eq(partition_build(&p, "[2, 3, 3, 2]", 10, 4, arch(64, 256, 64), err, sizeof err),
                     PP_OK);
    plan_stage_costs(&want, &p, F, B);
    ck_assert_double_eq_tol(F[0], 2.1, 1e-12);
    ck_assert_double_eq_tol(B[3], 4.5, 1e-12);
    ck_assert_double_eq_tol(plan_fit_layers(&p, F, B, arch(64, 256, 64), &got), 0, 1e-9);
    ck_assert_double_eq_tol(got.layer_f, 1.0, 1e-9);
    ck_assert_double_eq_tol(got.layer_b, 2.0, 1e-9);
    ck_assert_double_eq_tol(got.embed_f, 0.1, 1e-9);
    ck_assert_double_eq_tol(got.head_f, 5.0, 1e-9);
    ck_assert_double_eq_tol(got.head_b, 0.5, 1e-9);
    /* a negative embedding (noise) is held at 0 and the rest refitted */
    F[0] -= 0.3;
    plan_fit_layers(&p, F, B, arch(64, 256, 64), &got);
    ck_assert_double_eq(got.embed_f, 0);
    ck_assert(got.layer_f > 0.8 && got.layer_f < 1.0);
    /* two stages: the FLOP model's shares; the stages' total is kept */
    ck_assert_int_eq(partition_build(&p, "[5, 5]", 10, 2, arch(64, 256, 64), err, sizeof err),
                     PP_OK);
    plan_stage_costs(&want, &p, F, B);
    plan_fit_layers(&p, F, B, arch(64, 256, 64), &got);
    double sf[2], sb[2];
    plan_stage_costs(&got, &p, sf, sb);
    ck_assert_double_eq_tol(sf[0] + sf[1], F[0] + F[1], 1e-9);
    ck_assert_double_eq_tol(sb[0] + sb[1], B[0] + B[1], 1e-9);
    ck_assert(got.head_f > 0 && got.embed_f > 0 && got.embed_f < got.layer_f);
}
END_TEST

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* One compute slice line as trace.c writes it. */
static void slice(FILE *f, const char *type, int stage, int mb, int step, double dur_us) {
    fprintf(f,
            ",\n{\"name\":\"%s %d.%d\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":0,\"tid\":0,"
            "\"ts\":1.000,\"dur\":%.3f,\"args\":{\"stage\":%d,\"microbatch\":%d,\"step\":%d}}",
            type, stage, mb, dur_us, stage, mb, step);
}

START_TEST(test_trace_costs) {
    testdir_create("test_plan");
    const char *path = tmp("trace.json");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n{\"name\":\"thread_name\","
               "\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"rank 0\"}}");
    /* step 1 warms up (slow, left out); steps 2-3: stage 0 F 1,2,3 ms, B 4,6,8; stage 1
     * F 10, B 20 (with one outlier) */
    for (int m = 0; m < 3; m++) {
        slice(f, "F", 0, m, 1, 99000);
        slice(f, "B", 0, m, 1, 99000);
    }
    for (int step = 2; step <= 3; step++)
        for (int m = 0; m < 3; m++) {
            slice(f, "F", 0, m, step, 1000.0 * (m + 1));
            slice(f, "B", 0, m, step, 2000.0 * (m + 2));
            slice(f, "F", 1, m, step, 10000);
            slice(f, "B", 1, m, step, step == 3 && m == 2 ? 90000 : 20000);
        }
    fprintf(f, ",\n{\"name\":\"optimizer\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":0,\"tid\":0,"
               "\"ts\":1,\"dur\":5e6,\"args\":{\"stage\":-1,\"microbatch\":-1,\"step\":2}}\n]}\n");
    fclose(f);
    TraceCosts tc;
    ck_assert_msg(plan_trace_costs(path, 2, &tc, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_int_eq(tc.steps, 2);
    ck_assert_int_eq(tc.slices, 24);
    ck_assert_int_eq(tc.split, 0);
    ck_assert_double_eq_tol(tc.F[0], 2, 1e-12);   /* median of 1,1,2,2,3,3 */
    ck_assert_double_eq_tol(tc.B[0], 6, 1e-12);   /* median of 4,4,6,6,8,8 */
    ck_assert_double_eq_tol(tc.F[1], 10, 1e-12);
    ck_assert_double_eq_tol(tc.B[1], 20, 1e-12);  /* the outlier does not move it */
    /* a plan of one stage: the trace is of another split */
    ck_assert_int_eq(plan_trace_costs(path, 1, &tc, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "slices of stage 1, but this config plans 1 stages"));
    /* a plan of three stages: stage 2 has no slices */
    ck_assert_int_eq(plan_trace_costs(path, 3, &tc, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "no F slices of stage 2"));
    testdir_remove();
}
END_TEST

START_TEST(test_trace_errors) {
    testdir_create("test_plan");
    TraceCosts tc;
    ck_assert_int_eq(plan_trace_costs(tmp("missing.json"), 2, &tc, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "cannot open the trace (--costs-from)"));
    ck_assert_int_eq(plan_trace_costs(g_dir, 2, &tc, err, sizeof err), PP_EUSAGE); /* a directory */
    write_file(tmp("losses.csv"), "step,loss\n1,5.5\n");
    ck_assert_int_eq(plan_trace_costs(tmp("losses.csv"), 2, &tc, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "is not a trace (no traceEvents)"));
    write_file(tmp("empty.json"), "{\"traceEvents\":[\n]}\n");
    ck_assert_int_eq(plan_trace_costs(tmp("empty.json"), 2, &tc, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "holds no F or B slices"));
    /* forwards only */
    FILE *f = fopen(tmp("fonly.json"), "w");
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"thread_name\",\"ph\":\"M\"}");
    slice(f, "F", 0, 0, 1, 5);
    slice(f, "F", 1, 0, 1, 5);
    fprintf(f, "\n]}\n");
    fclose(f);
    ck_assert_int_eq(plan_trace_costs(tmp("fonly.json"), 2, &tc, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "no B slices of stage 0"));
    testdir_remove();
}
END_TEST

/* A split backward's I and W slices: B is I's median, W W's. */
START_TEST(test_trace_split) {
    testdir_create("test_plan");
    FILE *f = fopen(tmp("zb.json"), "w");
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"thread_name\",\"ph\":\"M\"}");
    for (int s = 0; s < 2; s++) {
        slice(f, "F", s, 0, 1, 1000);
        slice(f, "I", s, 0, 1, 1500);
        slice(f, "W", s, 0, 1, 700);
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    TraceCosts tc;
    ck_assert_msg(plan_trace_costs(tmp("zb.json"), 2, &tc, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_int_eq(tc.split, 1);
    ck_assert_int_eq(tc.steps, 1);
    ck_assert_double_eq_tol(tc.B[1], 1.5, 1e-12);
    ck_assert_double_eq_tol(tc.W[1], 0.7, 1e-12);
    /* a schedule may mix them: a stage with B keeps W = 0, so B + W is its backward */
    f = fopen(tmp("mixed.json"), "w");
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"thread_name\",\"ph\":\"M\"}");
    slice(f, "F", 0, 0, 1, 1000);
    slice(f, "B", 0, 0, 1, 2200);
    slice(f, "F", 1, 0, 1, 1000);
    slice(f, "I", 1, 0, 1, 1500);
    slice(f, "W", 1, 0, 1, 700);
    fprintf(f, "\n]}\n");
    fclose(f);
    ck_assert_msg(plan_trace_costs(tmp("mixed.json"), 2, &tc, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_int_eq(tc.split, 1);
    ck_assert_double_eq_tol(tc.B[0], 2.2, 1e-12);
    ck_assert_double_eq(tc.W[0], 0);
    ck_assert_double_eq_tol(tc.B[1] + tc.W[1], 2.2, 1e-12);
    testdir_remove();
}
END_TEST

int main(void) {
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_serial_links_queue);
    tcase_add_test(tc, test_1f1b_transfer_closed_form);
    tcase_add_test(tc, test_link_parse);
    tcase_add_test(tc, test_layer_costs_parse);
    tcase_add_test(tc, test_fit_layers);
    tcase_add_test(tc, test_trace_costs);
    tcase_add_test(tc, test_trace_errors);
    tcase_add_test(tc, test_trace_split);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
