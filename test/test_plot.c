/* test_plot.c — what `pptrain plot` computes before it draws: nice ticks (1, 2, 5 ×
 * 10^k) on linear and log axes and their labels (src/plot/plot_axis.c); a run's files
 * read (src/plot/plot_data.c): the tokens derived from tokens_per_s × step_ms ([Note:
 * tokens of a run]), validation rows, and every malformed file refused naming
 * file:line. The picture itself is test/plot.sh's. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "plot/plot_axis.h"
#include "plot/plot_data.h"
#include "testdir.h"
#include "checkrun.h"

static char g_err[PP_ERR_MAX];

#define ASSERT_ERR_HAS(s) ck_assert_msg(strstr(g_err, (s)) != NULL, "'%s' lacks '%s'", g_err, (s))

/* The ticks' labels joined by spaces. */
static const char *labels(const PlotAxis *a, int si) {
    static char out[512];
    char one[64];
    out[0] = '\0';
    for (int i = 0; i < a->n; i++) {
        plot_axis_label(a, a->v[i], si, one, sizeof one);
        pp_strappendf(out, sizeof out, "%s%s", i ? " " : "", one);
    }
    return out;
}

#define ASSERT_LABELS(a, si, want) ck_assert_str_eq(labels((a), (si)), (want))

START_TEST(test_nice) {
    static const double raw[][2] = {{1, 1},  {1.01, 2}, {0.3, 0.5},     {2.5, 5},
                                    {7, 10}, {45, 50},  {1.8e-4, 2e-4}, {2e5, 2e5}};
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++)
        ck_assert_msg(fabs(plot_nice(raw[i][0]) / raw[i][1] - 1) < 1e-12, "nice(%g) = %g, not %g",
                      raw[i][0], plot_nice(raw[i][0]), raw[i][1]);
}
END_TEST

START_TEST(test_linear_ticks) {
    PlotAxis a;
    plot_axis_linear(&a, 0, 60, 7); /* steps */
    ASSERT_LABELS(&a, 1, "0 10 20 30 40 50 60");
    plot_axis_linear(&a, 2.78, 5.63, 6); /* a loss: every 0.5, one decimal on each */
    ASSERT_LABELS(&a, 0, "3.0 3.5 4.0 4.5 5.0 5.5");
    plot_axis_linear(&a, 5.08, 5.56, 6); /* every 0.1 */
    ASSERT_LABELS(&a, 0, "5.1 5.2 5.3 5.4 5.5");
    plot_axis_linear(&a, 0, 1.08e-3, 6); /* a learning rate */
    ASSERT_LABELS(&a, 0, "0 2e-4 4e-4 6e-4 8e-4 1e-3");
    plot_axis_linear(&a, 0, 2.7e-4, 6);
    ASSERT_LABELS(&a, 0, "0 5e-5 1e-4 1.5e-4 2e-4 2.5e-4");
    plot_axis_linear(&a, 0, 51200, 7); /* tokens: SI suffixes */
    ASSERT_LABELS(&a, 1, "0 10k 20k 30k 40k 50k");
    plot_axis_linear(&a, 0, 1.3e6, 7);
    ASSERT_LABELS(&a, 1, "0 200k 400k 600k 800k 1M 1.2M");
    plot_axis_linear(&a, 0, 3.2e9, 7);
    ASSERT_LABELS(&a, 1, "0 500M 1G 1.5G 2G 2.5G 3G");
    plot_axis_linear(&a, 0, 2, 2); /* two steps: no tick between */
    ASSERT_LABELS(&a, 1, "0 1 2");
    plot_axis_linear(&a, -0.3, 0.3, 6); /* zero is "0", not "-0.0" */
    ASSERT_LABELS(&a, 0, "-0.3 -0.2 -0.1 0 0.1 0.2 0.3");
}
END_TEST

START_TEST(test_log_ticks) {
    PlotAxis a;
    plot_axis_log(&a, 1.6, 5.8, 6); /* a loss over a decade's part: every digit */
    ASSERT_LABELS(&a, 0, "2 3 4 5");
    plot_axis_log(&a, 0.9, 12, 6); /* 1 and 5 × 10^k */
    ASSERT_LABELS(&a, 0, "1 5 10");
    plot_axis_log(&a, 1.5, 25, 6); /* 1, 2 and 5 × 10^k */
    ASSERT_LABELS(&a, 0, "2 5 10 20");
    plot_axis_log(&a, 0.05, 600, 6); /* the powers of ten */
    ASSERT_LABELS(&a, 0, "0.1 1 10 100");
    plot_axis_log(&a, 1e-6, 1e6, 4); /* 13 decades, over 2 × 4: every fourth */
    ASSERT_LABELS(&a, 0, "1e-4 1 10000");
    plot_axis_log(&a, 4.9, 5.6, 6); /* too narrow: linear ticks on the log scale */
    ASSERT_LABELS(&a, 0, "5.0 5.2 5.4 5.6");
    ck_assert(a.log);
    ck_assert_double_eq_tol(plot_axis_frac(&a, 4.9), 0, 1e-12);
    ck_assert_double_eq_tol(plot_axis_frac(&a, 5.6), 1, 1e-12);
    ck_assert_double_eq_tol(plot_axis_frac(&a, sqrt(4.9 * 5.6)), 0.5, 1e-12);
    ck_assert(isnan(plot_axis_frac(&a, 0)));
}
END_TEST

/* The axis range of a loss curve: 5% (a twentieth of the decades) more each side, as
 * before, and finite whatever the values: a loss of 1.7e308 beside 1 made hi + pad inf
 * (no ticks, no curve), 1e-320 .. 1e308 on a log axis made the pad inf (0 .. inf). */
START_TEST(test_axis_pad) {
    double lo, hi;
    PlotAxis a;
    plot_axis_pad(2, 4, 0, &lo, &hi);
    ck_assert(lo == 2 - 0.05 * 2 && hi == 4 + 0.05 * 2);
    plot_axis_pad(3, 3, 0, &lo, &hi);
    ck_assert(lo == 3 - 0.15 && hi == 3 + 0.15);
    plot_axis_pad(1, 100, 1, &lo, &hi);
    ck_assert(lo == 1 / pow(100, 0.05) && hi == 100 * pow(100, 0.05));
    static const double ext[][3] = {{1, 1.7e308, 0},  {-1e308, 1e308, 0}, {-1.7e308, -1.7e308, 0},
                                    {1e308, 1e308, 0}, {1e-320, 1e308, 1}, {1e-320, 1e-320, 1},
                                    {1.7e308, 1.7e308, 1}, {5e-324, 1, 1}};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        int log = (int)ext[i][2];
        plot_axis_pad(ext[i][0], ext[i][1], log, &lo, &hi);
        ck_assert_msg(isfinite(lo) && isfinite(hi) && lo < hi && (!log || lo > 0),
                      "%g .. %g (log %d): axis %g .. %g", ext[i][0], ext[i][1], log, lo, hi);
        if (log) plot_axis_log(&a, lo, hi, 6);
        else plot_axis_linear(&a, lo, hi, 6);
        ck_assert_msg(a.n >= 2, "%g .. %g (log %d): %d ticks", ext[i][0], ext[i][1], log, a.n);
        ck_assert(isfinite(plot_axis_frac(&a, ext[i][0])) && isfinite(plot_axis_frac(&a, ext[i][1])));
    }
}
END_TEST

static void setup(void) {
    testdir_create("pp_test_plot");
    g_err[0] = '\0';
}

static void teardown(void) { testdir_remove(); }

static void write_file(const char *name, const char *text) {
    FILE *f = fopen(tmp(name), "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

#define HEADER "step,loss,lr,grad_norm,tokens_per_s,step_ms\n"

START_TEST(test_run_read) {
    PlotRun r;
    /* log_every 2; 512 tokens per step, as 36855.6 tok/s × 13.892 ms round to */
    write_file("losses.csv", HEADER "2,5.5,0.0001,4.9,36855.6,13.892\n"
                                    "4,5.1,0.0002,4.1,44557.2,11.491\n"
                                    "6,4.8,0.0003,3.1,44550.5,11.493\n");
    write_file("val_losses.csv", "step,val_loss\n3,5.2\n6,4.9\n");
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(r.n, 3);
    ck_assert_double_eq(r.step[2], 6);
    ck_assert_double_eq(r.loss[1], 5.1);
    ck_assert_double_eq(r.lr[2], 0.0003);
    ck_assert_double_eq(r.tokens_per_step, 512);
    ck_assert_double_eq(r.tokens[0], 1024); /* the first row stands for steps 1 and 2 */
    ck_assert_double_eq(r.tokens[2], 3072);
    ck_assert_int_eq(r.nval, 2);
    ck_assert_double_eq(r.val_loss[0], 5.2);
    ck_assert_double_eq(plot_run_tokens_at(&r, 3), 1536); /* between rows */
    ck_assert_double_eq(plot_run_tokens_at(&r, 8), 4096); /* past the last row */
    plot_run_free(&r);
    /* another batch size after a resume: each row at its own; columns in any order;
     * no val_losses.csv: no validation */
    unlink(tmp("val_losses.csv"));
    write_file("losses.csv", "loss,step,tokens_per_s,step_ms\n5.5,1,51200.0,10.000\n"
                             "5.4,2,102400.0,10.000\n5.3,3,nan,10.000\n");
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_ptr_null(r.lr);
    ck_assert_ptr_null(r.tokens); /* the third row gives none */
    ck_assert_int_eq(r.tokens_line, 4);
    ck_assert_int_eq(r.nval, 0);
    plot_run_free(&r);
    write_file("losses.csv", "loss,step,tokens_per_s,step_ms\n5.5,1,51200.0,10.000\n"
                             "5.4,2,102400.0,10.000\n");
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_double_eq(r.tokens[1], 512 + 1024);
    ck_assert_double_eq(r.tokens_per_step, 0); /* not the same on every row */
    plot_run_free(&r);
    /* millions of tokens a second: one row alone is a few tokens off (524288 in 50.00137
     * ms prints as 10485472.7 and 50.001: 524284.4), the rows together are exact; then a
     * resume at 4 times the batch */
    static const double step_ms[] = {50.00137, 49.9981, 50.3119, 51.0007, 49.7772, 50.1234};
    char text[1024];
    int len = snprintf(text, sizeof text, "step,loss,tokens_per_s,step_ms\n");
    for (int i = 0; i < 6; i++) {
        double tokens = i < 4 ? 524288 : 4 * 524288, ms = step_ms[i];
        len += snprintf(text + len, sizeof text - len, "%d,5.0,%.1f,%.3f\n", i + 1,
                        tokens / (ms / 1e3), ms);
    }
    write_file("losses.csv", text);
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_double_eq(r.tokens[3], 4 * 524288.0);
    ck_assert_double_eq(r.tokens[5], 4 * 524288.0 + 2 * 4 * 524288.0);
    plot_run_free(&r);
}
END_TEST

/* plot_run_load of g_dir refuses with PP_EUSAGE and a message holding `want`. */
static void refused(const char *want) {
    PlotRun r;
    g_err[0] = '\0';
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS(want);
}

START_TEST(test_run_refused) {
    char want[PP_PATH_MAX + 64];
    PlotRun r;
    snprintf(want, sizeof want, "%s: no losses.csv: not a run's output.dir", g_dir);
    refused(want);
    write_file("losses.csv", "");
    refused("losses.csv: empty file (no header)");
    write_file("losses.csv", HEADER);
    refused("losses.csv: a header and no rows");
    write_file("losses.csv", "step,lr\n1,0.1\n");
    refused("losses.csv:1: the header 'step,lr' has no 'loss' column");
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\n2,abc,1e-4,1,1,1\n");
    refused("losses.csv:3: loss 'abc' is not a number");
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\n2,5.4,1e-4,1\n");
    refused("losses.csv:3: 4 fields, the header has 6");
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\n\n2,5.4,1e-4,1,1,1\n");
    refused("losses.csv:3: an empty line");
    write_file("losses.csv", HEADER "2,5.5,1e-4,1,1,1\n2,5.4,1e-4,1,1,1\n");
    refused("losses.csv:3: step 2 after step 2 (steps must go up)");
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\n2,5.4,1e-4,1,1,1");  /* no newline: */
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_OK); /* a whole row */
    ck_assert_int_eq(r.n, 2);
    plot_run_free(&r);
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\n2,5.4,1e-4"); /* a row being written */
    ck_assert_int_eq(plot_run_load(&r, g_dir, g_err, sizeof g_err), PP_OK);
    ck_assert_int_eq(r.n, 1);
    plot_run_free(&r);
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\n2,5.4,1e-4\n"); /* a whole bad row */
    refused("losses.csv:3: 3 fields, the header has 6");
    write_file("losses.csv", HEADER "1.5,5.5,1e-4,1,1,1\n");
    refused("losses.csv:2: step '1.5' is not a step number");
    write_file("losses.csv", HEADER "1,5.5,1e-4,1,1,1\r\n"); /* CRLF is fine */
    write_file("val_losses.csv", "step,val_loss\n1,x\n");
    refused("val_losses.csv:2: val_loss 'x' is not a number");
    ck_assert_int_eq(plot_run_load(&r, tmp("losses.csv"), g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("not a directory");
    ck_assert_int_eq(plot_run_load(&r, tmp("none"), g_err, sizeof g_err), PP_EUSAGE);
    ASSERT_ERR_HAS("No such file or directory");
}
END_TEST

static Suite *plot_suite(void) {
    Suite *s = suite_create("plot");
    TCase *axis = tcase_create("axis"), *data = tcase_create("data");
    tcase_add_test(axis, test_nice);
    tcase_add_test(axis, test_linear_ticks);
    tcase_add_test(axis, test_log_ticks);
    tcase_add_test(axis, test_axis_pad);
    tcase_add_checked_fixture(data, setup, teardown);
    tcase_add_test(data, test_run_read);
    tcase_add_test(data, test_run_refused);
    suite_add_tcase(s, axis);
    suite_add_tcase(s, data);
    return s;
}

int main(void) { return check_run(plot_suite(), 0); }
