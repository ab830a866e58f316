/* test_partition.c — explicit splits, split points, cost balancing, and their errors. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model.h"
#include "model/partition.h"
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

START_TEST(test_counts) {
    Partition p;
    ck_assert_int_eq(partition_build(&p, "[3, 2]", 5, 2, arch(64, 256, 64), err, sizeof err),
                     PP_OK);
    ck_assert_int_eq(p.l0[0], 0); ck_assert_int_eq(p.l1[0], 3);
    ck_assert_int_eq(p.l0[1], 3); ck_assert_int_eq(p.l1[1], 5);
}
END_TEST

START_TEST(test_points) {
    Partition p;
    ck_assert_int_eq(partition_build(&p, "[\"layers.4\"]", 8, 2, arch(512, 10112, 500), err,
                                     sizeof err),
                     PP_OK);
    ck_assert_int_eq(p.l1[0], 4); ck_assert_int_eq(p.l0[1], 4); ck_assert_int_eq(p.l1[1], 8);
    ck_assert_int_eq(partition_build(&p, "[\"layers.2\", \"layers.5\"]", 8, 3, arch(8, 16, 8), err,
                                     sizeof err),
                     PP_OK);
    ck_assert_int_eq(p.l1[1], 5);
}
END_TEST

START_TEST(test_auto_balances_head) {
    Partition p;
    /* GPT-2 124M at T=256: the head costs about 5 layers, so the last stage gets fewer */
    ck_assert_int_eq(partition_build(&p, "auto", 12, 2, arch(768, 50304, 256), err, sizeof err),
                     PP_OK);
    ck_assert_int_eq(p.l0[0], 0); ck_assert_int_eq(p.l1[1], 12);
    ck_assert_int_gt(p.l1[0] - p.l0[0], p.l1[1] - p.l0[1]);
    ck_assert_int_eq(p.l1[0], 9);
    /* tiny head: an even split */
    ck_assert_int_eq(partition_build(&p, "auto", 8, 4, arch(256, 256, 64), err, sizeof err), PP_OK);
    for (int s = 0; s < 4; s++) ck_assert_int_eq(p.l1[s] - p.l0[s], 2);
    /* every stage gets at least one layer even if the head dominates */
    ck_assert_int_eq(partition_build(&p, "auto", 4, 4, arch(8, 1 << 20, 8), err, sizeof err),
                     PP_OK);
    for (int s = 0; s < 4; s++) ck_assert_int_eq(p.l1[s] - p.l0[s], 1);
}
END_TEST

START_TEST(test_errors) {
    Partition p;
    ck_assert_int_eq(partition_build(&p, "[3, 3]", 5, 2, arch(8, 16, 8), err, sizeof err),
                     PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "adds up to 6"));
    ck_assert_int_eq(partition_build(&p, "[5, 0]", 5, 2, arch(8, 16, 8), err, sizeof err),
                     PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
    ck_assert_int_eq(partition_build(&p, "[2, 3]", 5, 3, arch(8, 16, 8), err, sizeof err),
                     PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "lists 2 stages"));
    ck_assert_int_eq(partition_build(&p, "[\"layers.9\"]", 5, 2, arch(8, 16, 8), err, sizeof err),
                     PP_EUSAGE);
    ck_assert_int_eq(partition_build(&p, "[\"layers.3\", \"layers.2\"]", 5, 3, arch(8, 16, 8), err,
                                     sizeof err),
                     PP_EUSAGE);
    ck_assert_int_eq(partition_build(&p, "auto", 2, 3, arch(8, 16, 8), err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "only 2 layers"));
    ck_assert_int_eq(partition_build(&p, "[\"layers.2\", 3]", 5, 3, arch(8, 16, 8), err,
                                     sizeof err),
                     PP_EUSAGE);
}
END_TEST

START_TEST(test_print_placement) {
    /* the print says where each stage lives from the schedule's table, here a V */
    Partition p;
    int v_shape[4] = {0, 1, 1, 0};
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(partition_build(&p, "[1, 1, 1, 1]", 4, 4, arch(8, 16, 8), err, sizeof err),
                     PP_OK);
    FILE *f = open_memstream(&text, &len);
    partition_print(&p, 2, v_shape, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "partition (4 stages on 2 ranks):\n"));
    ck_assert_ptr_nonnull(strstr(text, "  stage 0 on rank 0: layers 0-0 +embeddings  ("));
    ck_assert_ptr_nonnull(strstr(text, "  stage 2 on rank 1: layers 2-2  ("));
    ck_assert_ptr_nonnull(
        strstr(text, "  stage 3 on rank 0: layers 3-3 +final norm, head, loss  ("));
    free(text);
}
END_TEST

/* The most expensive stage of split counts n[S] under pc. */
static double max_cost(const PartitionCosts *pc, const int *n, int S) {
    double worst = 0;
    for (int s = 0; s < S; s++) {
        double c = n[s] * pc->layer[s] + (s == 0 ? pc->embed : 0) + (s == S - 1 ? pc->head : 0);
        worst = c > worst ? c : worst;
    }
    return worst;
}

/* The least max_cost over every split of L layers into S non-empty stages. */
static double brute(const PartitionCosts *pc, int L, int S, int *n, int s, int left) {
    if (s == S - 1) {
        n[s] = left;
        return max_cost(pc, n, S);
    }
    double best = 1e300;
    for (int k = 1; k <= left - (S - 1 - s); k++) {
        n[s] = k;
        double v = brute(pc, L, S, n, s + 1, left - k);
        best = v < best ? v : best;
    }
    return best;
}

/* Hand-made cost tables: split auto reaches the least possible most-expensive stage
 * (against every split), per-stage layer costs included, over random tables. */
START_TEST(test_balance_tables) {
    unsigned seed = 7;
    int cases = 0;
    for (int L = 2; L <= 9; L++)
        for (int S = 1; S <= 4 && S <= L; S++)
            for (int rep = 0; rep < 20; rep++) {
                PartitionCosts pc = {.unit = "test"};
                for (int s = 0; s < S; s++) pc.layer[s] = 1 + rand_r(&seed) % 9;
                pc.embed = rand_r(&seed) % 12;
                pc.head = rand_r(&seed) % 20;
                Partition p;
                int n[8];
                ck_assert_int_eq(partition_build_costs(&p, "auto", L, S, &pc, err, sizeof err),
                                 PP_OK);
                for (int s = 0; s < S; s++) ck_assert_int_ge(p.l1[s] - p.l0[s], 1);
                ck_assert_int_eq(p.l1[S - 1], L);
                double want = brute(&pc, L, S, n + 0, 0, L), got;
                for (int s = 0; s < S; s++) n[s] = p.l1[s] - p.l0[s];
                got = max_cost(&pc, n, S);
                ck_assert_msg(got == want, "L=%d S=%d: split's worst stage %g, best possible %g",
                              L, S, got, want);
                cases++;
            }
    ck_assert_int_gt(cases, 400);
    /* one by hand: layers cost 1, 2, 1 on three stages, the head 3: [4, 2, 1] gives
     * stages 4, 4, 4; nothing beats 4 */
    PartitionCosts pc = {.layer = {1, 2, 1}, .embed = 0, .head = 3, .unit = "test"};
    Partition p;
    ck_assert_int_eq(partition_build_costs(&p, "auto", 7, 3, &pc, err, sizeof err), PP_OK);
    ck_assert_int_eq(p.l1[0], 4);
    ck_assert_int_eq(p.l1[1], 6);
}
END_TEST

/* The three pipeline.balance tables on GPT-2 124M shapes split as their costs say. */
START_TEST(test_balance_modes) {
    PartitionCosts t, pr, mem;
    Partition pt, pp, pm;
    int S = 4, L = 12;
    int C = 768, Vp = 50304, T = 1024;
    int inflight[4] = {4, 3, 2, 1}; /* 1F1B */
    partition_costs_time(&t, S, arch(C, Vp, T), NULL);
    partition_costs_parameters(&pr, S, arch(C, Vp, T));
    /* activations dominate: a layer's slot bytes at T=1024, B=8 */
    double N = 8 * T;
    PartitionActBytes ab = {4.0 * N * (16.0 * C + 4 + 12 * T), 2.0 * 4 * N * C,
                            4.0 * N * (2.0 * C + 2), 4.0 * N * Vp};
    partition_costs_memory(&mem, S, arch(C, Vp, T), 2, inflight, &ab);
    ck_assert_int_eq(partition_build_costs(&pt, "auto", L, S, &t, err, sizeof err), PP_OK);
    ck_assert_int_eq(partition_build_costs(&pp, "auto", L, S, &pr, err, sizeof err), PP_OK);
    ck_assert_int_eq(partition_build_costs(&pm, "auto", L, S, &mem, err, sizeof err), PP_OK);
    /* time: the embedding is nearly free, the head about 2.5 layers: the first stage
     * gets the most layers, the last the fewest */
    ck_assert_int_gt(pt.l1[0] - pt.l0[0], pt.l1[3] - pt.l0[3]);
    /* parameters: wte (38.6M, ~5 layers of 7.1M) sits on both the first and the last
     * stage: both get fewer layers than the middle ones */
    ck_assert_int_lt(pp.l1[0] - pp.l0[0], pp.l1[1] - pp.l0[1]);
    ck_assert_int_lt(pp.l1[3] - pp.l0[3], pp.l1[2] - pp.l0[2]);
    /* memory: stage s keeps 4-s microbatches in flight, so the first stage gets the
     * fewest layers and the counts do not decrease towards the last */
    for (int s = 1; s < S; s++) ck_assert_int_ge(pm.l1[s] - pm.l0[s], pm.l1[s - 1] - pm.l0[s - 1]);
    ck_assert_int_lt(pm.l1[0] - pm.l0[0], pt.l1[0] - pt.l0[0]);
    ck_assert_str_eq(pm.unit, "memory");
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
    tcase_add_test(tc, test_balance_tables);
    tcase_add_test(tc, test_balance_modes);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
