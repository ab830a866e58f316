/* test_nccl_sum.c — the NCCL transport's float sums, emulated on the host: its kernel
 * adds the gathered parts with pp_nccl_sum_at (cuda/comm_nccl_sum.h), which must give
 * the bits of the memory transport's all-reduce (rank order) and reduce-scatter (ring
 * order), NaNs canonical, for 2 to 6 ranks — the socket transport's bits too, as
 * test_comm_groups proves for those. Inputs where the order of the additions changes
 * the result (magnitudes 2^-20 .. 2^20, cancellations, NaNs, infinities), so an order
 * off by one rank is caught; every rank can predict every rank's input. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl_sum.h"
#include "commtest.h"
#include "checkrun.h"

#define COUNT 4099 /* per block: odd */

/* Rank r's input element i (of its world*COUNT). */
static float input(int r, size_t i) {
    uint32_t u = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 7u);
    u ^= u >> 13;
    u *= 0x5bd1e995u;
    u ^= u >> 15;
    switch (u % 211) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return r % 2 ? 1e30f : -1e30f; /* cancels in one order, not another */
    default: return ldexpf((float)(u % 2000003) / 1e6f - 1.0f, (int)((u >> 8) % 41) - 20);
    }
}

static int same_bits(const float *a, const float *b, size_t n, const char *what, int rank) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    if (bad) fprintf(stderr, "rank %d: %s: %zu of %zu elements differ\n", rank, what, bad, n);
    return bad == 0;
}

static int sums_body(Comm *c, void *arg) {
    int W = c->world, r = c->rank;
    size_t n = (size_t)W * COUNT;
    float *send = pp_malloc(n * sizeof(float)), *got = pp_malloc(n * sizeof(float));
    float *parts = pp_malloc(n * sizeof(float)), *want = pp_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) send[i] = input(r, i);
    /* all-reduce: the kernel sees every rank's whole buffer (ncclAllGather), f = 0 */
    memcpy(got, send, n * sizeof(float));
    CHILD_CHECK(comm_allreduce_sum_f32(c, got, n) == PP_OK);
    float *all = pp_malloc((size_t)W * n * sizeof(float));
    for (int q = 0; q < W; q++)
        for (size_t i = 0; i < n; i++) all[(size_t)q * n + i] = input(q, i);
    for (size_t i = 0; i < n; i++) want[i] = pp_nccl_sum_at(all, n, W, 0, i);
    CHILD_CHECK(same_bits(got, want, n, "allreduce", r));
    /* reduce-scatter: part q = block r of rank q's buffer (grouped send/recv), f = r+1 */
    CHILD_CHECK(comm_reduce_scatter_sum_f32(c, send, got, COUNT) == PP_OK);
    for (int q = 0; q < W; q++)
        for (size_t i = 0; i < COUNT; i++)
            parts[(size_t)q * COUNT + i] = input(q, (size_t)r * COUNT + i);
    for (size_t i = 0; i < COUNT; i++) want[i] = pp_nccl_sum_at(parts, COUNT, W, (r + 1) % W, i);
    CHILD_CHECK(same_bits(got, want, COUNT, "reduce-scatter", r));
    /* the emulation is not trivially right: another start gives other bits somewhere */
    size_t differ = 0;
    for (size_t i = 0; i < COUNT && W > 2; i++) {
        float o = pp_nccl_sum_at(parts, COUNT, W, r, i);
        differ += memcmp(&o, &want[i], sizeof o) != 0;
    }
    CHILD_CHECK(W <= 2 || differ > 0);
    free(send);
    free(got);
    free(parts);
    free(want);
    free(all);
    return 0;
}

START_TEST(test_sums_match_memory_transport) {
    Job j = {_i, 10.0, NULL, 0, sums_body, NULL, NULL};
    run_job_via(VIA_MEMORY, &j, 60);
}
END_TEST

/* One rank: the identity, NaNs made canonical (what nccl_self checks on the GPU). */
START_TEST(test_one_rank_canonical_nan) {
    float parts[3] = {1.5f, NAN, -0.0f}, out[3];
    uint32_t u;
    memcpy(&u, &parts[1], 4);
    u |= 0x80000001u; /* a negative NaN with a payload */
    memcpy(&parts[1], &u, 4);
    for (size_t i = 0; i < 3; i++) out[i] = pp_nccl_sum_at(parts, 3, 1, 0, i);
    memcpy(&u, &out[1], 4);
    ck_assert(out[0] == 1.5f && u == 0x7fc00000u && out[2] == 0.0f && signbit(out[2]));
}
END_TEST

int main(void) {
    Suite *s = suite_create("nccl_sum");
    TCase *tc = tcase_create("order");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_sums_match_memory_transport, 2, 7);
    tcase_add_test(tc, test_one_rank_canonical_nan);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
