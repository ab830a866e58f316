/* test_sample.c — decoding with a KV cache ([Note: decoding] in src/model/decode.h) and the
 * sampling rule ([Note: sampling rule] in src/sample/sample.h). The decoder's logits of a
 * sequence fed all at once give the training forward's per-token losses; fed one position
 * at a time (the cache doing the rest) and in pieces they give the all-at-once logits;
 * the two decoding ops against the training ops they stand in for (bitwise where the
 * contract says so); for GPT-2, Llama with 1, 2 and NH heads per kv group, and qwen2's
 * biases. Then the rule: greedy is the first largest, top-k 1 is greedy, a seed repeats
 * its tokens, the kept sets and their frequencies are the rule's, and the generator's
 * stops (end-of-text id, model.max_seq_len). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/decode.h"
#include "model/model.h"
#include "sample/sample.h"
#include "checkrun.h"

#define T_SEQ 16

static uint64_t rng = 7;
static float urand(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* A small model: L = 3 layers of NH heads of 4 channels, V = 13 (Vp 16), maxT T_SEQ. */
static ModelDims dims(const Arch *A, int NH, int NKV, int tied) {
    ModelDims d = {.V = 13, .Vp = 16, .maxT = T_SEQ, .L = 3, .NH = NH, .C = 4 * NH, .tied = tied,
                   .arch = A, .NKV = NKV, .F = 12, .eps = 1e-5f};
    d.rope.theta = 10000.0f;
    if (A == &arch_gpt2) d.NKV = 0, d.F = 0; /* as a GPT-2 manifest leaves them */
    return d;
}

static void build(Model *m, const ModelDims *d) {
    ChunkSpec all = {0, 0, d->L, 1, 1, 1, 0};
    model_init(m, d, &all, 1, 1, T_SEQ, backend_cpu());
    model_init_weights(m, 3, 0.3f); /* large: logits far apart, every layer matters */
}

/* -log softmax(z[0..V))[target], in double. */
static double nll(const float *z, int V, int target) {
    double mx = z[0], s = 0;
    for (int i = 1; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    for (int i = 0; i < V; i++) s += exp(z[i] - mx);
    return log(s) + mx - z[target];
}

/* The largest |a - b| over n values, and the largest |b|. */
static double maxdiff(const float *a, const float *b, size_t n, double *scale) {
    double m = 0;
    *scale = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - b[i]));
        *scale = fmax(*scale, fabs((double)b[i]));
    }
    return m;
}

/* [Note: decoding]: one architecture's shape. Tolerances: the training forward's per-token
 * losses 2e-6 (its cross-entropy sums in fp32, nll here in double: a few ulps of ~2.5);
 * logits decoded one position or three at a time 2e-5 of their largest (the same calls
 * on GEMMs of other heights, which a BLAS may sum in another order, and one row through
 * sgemv: measured 1.7e-6 at most with OpenBLAS 0.3.21, 2026-11-26). */
static void check_decode(const Arch *A, int NH, int NKV, int tied) {
    ModelDims d = dims(A, NH, NKV, tied);
    Model m;
    build(&m, &d);
    int tok[T_SEQ], V = d.V, Vp = d.Vp;
    ActSlot *a = &m.chunks[0].slots[0];
    for (int i = 0; i < T_SEQ; i++) tok[i] = (i * 7 + 3) % V;
    for (int i = 0; i < T_SEQ; i++) a->tokens[i] = tok[i], a->targets[i] = tok[(i + 1) % T_SEQ];
    double loss;
    model_forward(&m, 0, 0, 1.0f, 0, &loss);
    Decoder all, one, three;
    char err[256];
    ck_assert_int_eq(decode_init(&all, &m, T_SEQ, T_SEQ, T_SEQ, err, sizeof err), PP_OK);
    ck_assert_int_eq(decode_init(&one, &m, T_SEQ, 1, 1, err, sizeof err), PP_OK);
    ck_assert_int_eq(decode_init(&three, &m, T_SEQ, 3, 3, err, sizeof err), PP_OK);
    decode_run(&all, tok, T_SEQ, T_SEQ);
    double worst = 0;
    for (int i = 0; i < T_SEQ; i++)
        worst = fmax(worst, fabs(nll(all.logits + (size_t)i * Vp, V, a->targets[i]) - m.losses[i]));
    ck_assert_msg(worst < 2e-6, "%s NH=%d NKV=%d: decoded losses off the forward's by %g", A->name,
                  NH, NKV, worst);
    for (int i = 0; i < T_SEQ; i++) { /* one position at a time: the cache holds the rest */
        decode_run(&one, tok + i, 1, 1);
        double sc, e = maxdiff(one.logits, all.logits + (size_t)i * Vp, Vp, &sc);
        ck_assert_msg(e <= 2e-5 * sc, "%s NH=%d NKV=%d: position %d decoded alone: logits off "
                      "by %g (of %g)", A->name, NH, NKV, i, e, sc);
    }
    for (int i = 0; i < T_SEQ; i += 3) { /* pieces of 3, the last of 1 */
        int n = T_SEQ - i < 3 ? T_SEQ - i : 3;
        decode_run(&three, tok + i, n, n);
        double sc, e = maxdiff(three.logits, all.logits + (size_t)i * Vp, (size_t)n * Vp, &sc);
        ck_assert_msg(e <= 2e-5 * sc, "%s: positions %d.. decoded in a piece: off by %g", A->name,
                      i, e);
    }
    decode_reset(&one); /* a new sequence: the first position again, as at the start */
    decode_run(&one, tok, 1, 1);
    double sc;
    ck_assert(maxdiff(one.logits, all.logits, Vp, &sc) <= 2e-5 * sc);
    ck_assert_int_eq(one.pos, 1);
    decode_free(&all);
    decode_free(&one);
    decode_free(&three);
    model_free(&m);
}

START_TEST(test_decode_gpt2) { check_decode(&arch_gpt2, 2, 2, 1); }
END_TEST

START_TEST(test_decode_llama) {
    check_decode(&arch_llama, 4, 2, 0); /* groups of 2, untied */
    check_decode(&arch_llama, 4, 1, 1); /* multi-query, tied */
    check_decode(&arch_llama, 2, 2, 0); /* multi-head */
    check_decode(&arch_qwen2, 4, 2, 0); /* q/k/v biases */
}
END_TEST

/* The decoder refuses what it cannot run, naming it. */
START_TEST(test_decode_refuses) {
    ModelDims d = dims(&arch_llama, 4, 2, 0);
    Model m;
    build(&m, &d);
    Decoder dc;
    char err[256];
    ck_assert_int_eq(decode_init(&dc, &m, T_SEQ + 1, 1, 1, err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_nonnull(strstr(err, "max_seq_len (16)"));
    ck_assert_int_eq(decode_init(&dc, &m, 4, 5, 1, err, sizeof err), PP_EUSAGE);
    model_free(&m);
    ChunkSpec half = {0, 0, 2, 1, 0, 1, 0}; /* the first stage alone: no head */
    model_init(&m, &d, &half, 1, 1, T_SEQ, backend_cpu());
    ck_assert_int_eq(decode_init(&dc, &m, 4, 1, 1, err, sizeof err), PP_EUSAGE);
    ck_assert_msg(strstr(err, "every stage") && strstr(err, "lm_head"), "%s", err);
    model_free(&m);
}
END_TEST

/* [Note: KV cache] in backend.h: kv_append's rotation is rope_forward's at positions pos..,
 * and attention_decode at pos 0 over a whole sequence is attention_forward, bit for bit;
 * at pos > 0 it gives attention_forward's last rows (2e-6: other GEMM shapes), n of them
 * in three blocks of query rows (ATT_BLOCK 64 in backend_cpu.c). */
START_TEST(test_decode_ops) {
    const Backend *be = backend_cpu();
    int T = 200, NH = 6, NKV = 2, HS = 8, W = (NH + 2 * NKV) * HS, cap = 210, pos = 66;
    int n = T - pos;
    size_t Q = (size_t)T * W;
    float *qkv = malloc(Q * sizeof(float)), *rot = malloc(Q * sizeof(float));
    float *inv = malloc(HS / 2 * sizeof(float));
    for (size_t i = 0; i < Q; i++) qkv[i] = urand();
    for (int i = 0; i < HS / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / HS);
    memcpy(rot, qkv, Q * sizeof(float));
    be->rope_forward(be, rot, inv, 1, T, NH, NKV, HS); /* the training path's rotation */
    float *kc = calloc((size_t)NKV * cap * HS, sizeof(float));
    float *vc = calloc((size_t)NKV * cap * HS, sizeof(float));
    float *part = malloc((size_t)n * W * sizeof(float));
    memcpy(part, qkv + (size_t)pos * W, (size_t)n * W * sizeof(float));
    be->kv_append(be, kc, vc, qkv, inv, 0, pos, NH, NKV, HS, cap); /* two appends */
    be->kv_append(be, kc, vc, part, inv, pos, n, NH, NKV, HS, cap);
    ck_assert_int_eq(memcmp(qkv, rot, (size_t)pos * W * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(part, rot + (size_t)pos * W, (size_t)n * W * sizeof(float)), 0);
    size_t wrong = 0;
    for (int t = 0; t < T; t++)
        for (int g = 0; g < NKV; g++) {
            const float *k = rot + (size_t)t * W + (size_t)(NH + g) * HS;
            wrong += memcmp(kc + ((size_t)g * cap + t) * HS, k, HS * sizeof(float)) != 0;
            wrong += memcmp(vc + ((size_t)g * cap + t) * HS, k + NKV * HS, HS * sizeof(float)) != 0;
        }
    ck_assert_uint_eq(wrong, 0);
    size_t Y = (size_t)T * NH * HS;
    float *ref = malloc(Y * sizeof(float)), *got = malloc(Y * sizeof(float));
    float *att = malloc(be->attention_saved_floats(be, 1, T, NH) * sizeof(float));
    be->attention_forward(be, ref, att, rot, 1, T, NH, NKV, HS);
    be->attention_decode(be, got, rot, kc, vc, 0, T, NH, NKV, HS, cap);
    ck_assert_int_eq(memcmp(got, ref, Y * sizeof(float)), 0);
    be->attention_decode(be, got, rot + (size_t)pos * W, kc, vc, pos, n, NH, NKV, HS, cap);
    double sc, e = maxdiff(got, ref + (size_t)pos * NH * HS, (size_t)n * NH * HS, &sc);
    ck_assert_msg(e <= 2e-6 * sc, "attention_decode at pos %d: off by %g (of %g)", pos, e, sc);
    free(qkv), free(rot), free(inv), free(kc), free(vc), free(part), free(ref), free(got);
    free(att);
}
END_TEST

/* ---- the rule ---- */

static int pick(const float *z, int V, float t, int k, float p, SampleRng *r) {
    SampleCand cand[64];
    SampleRule rule = {t, k, p};
    return sample_pick(z, V, &rule, r, cand);
}

START_TEST(test_rule_greedy) {
    SampleRng r;
    sample_rng_seed(&r, 1);
    float z[7] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -3.0f, 0.0f}; /* a tie: the first, 1 */
    ck_assert_int_eq(pick(z, 7, 0, 0, 1, &r), 1);
    ck_assert_uint_eq(r.state, 1); /* greedy draws nothing */
    for (int trial = 0; trial < 200; trial++) { /* top-k 1 is greedy at any temperature */
        float y[37];
        for (int i = 0; i < 37; i++) y[i] = 3 * urand();
        int g = pick(y, 37, 0, 0, 1, &r);
        ck_assert_int_eq(pick(y, 37, 1.0f, 1, 1, &r), g);
        ck_assert_int_eq(pick(y, 37, 5.0f, 1, 0.9f, &r), g);
        ck_assert_int_eq(pick(y, 37, 1.0f, 0, 1e-6f, &r), g); /* top-p: at least one, the first */
    }
    ck_assert_int_eq(pick(z, 7, 1.0f, 1, 1, &r), 1);
    /* a temperature so small that z / t overflows (every exp(z - max) NaN: the last id
     * came out) samples as its limit, greedy: with and without top-k / top-p */
    float y[7] = {0.5f, 2.0f, -1.0f, 1.0f, 1.9f, -3.0f, 0.0f};
    for (int k = 0; k < 3; k++)
        for (float t = 1e-40f; t > 0; t /= 1000) {
            ck_assert_int_eq(pick(y, 7, t, k, 1, &r), 1);
            ck_assert_int_eq(pick(y, 7, t, k, 0.5f, &r), 1);
        }
}
END_TEST

/* Frequencies of n draws against the rule's probabilities (0.01: n = 40000 gives a
 * standard deviation below 0.0025). */
static void freq(const float *z, int V, float t, int k, float p, const double *want) {
    SampleRng r;
    sample_rng_seed(&r, 99);
    int n = 40000, count[8] = {0};
    for (int i = 0; i < n; i++) count[pick(z, V, t, k, p, &r)]++;
    for (int i = 0; i < V; i++)
        ck_assert_msg(fabs((double)count[i] / n - want[i]) < 0.01,
                      "t=%g k=%d p=%g: id %d drawn %g, want %g", t, k, p, i, (double)count[i] / n,
                      want[i]);
}

START_TEST(test_rule_distribution) {
    float z[4];
    double p[4] = {0.1, 0.2, 0.3, 0.4};
    for (int i = 0; i < 4; i++) z[i] = logf((float)p[i]);
    freq(z, 4, 1.0f, 0, 1, p);
    double k2[4] = {0, 0, 3.0 / 7, 4.0 / 7};
    freq(z, 4, 1.0f, 2, 1, k2);
    freq(z, 4, 1.0f, 0, 0.5f, k2); /* 0.4 < 0.5, 0.4 + 0.3 >= 0.5 */
    freq(z, 4, 1.0f, 3, 0.5f, k2);
    double p1[4] = {0, 0, 0, 1};
    freq(z, 4, 1.0f, 0, 0.4f, p1);
    double sq[4] = {0.01 / 0.3, 0.04 / 0.3, 0.09 / 0.3, 0.16 / 0.3}; /* temperature 1/2: p^2 */
    freq(z, 4, 0.5f, 0, 1, sq);
}
END_TEST

START_TEST(test_rule_seeded) {
    float z[50];
    for (int i = 0; i < 50; i++) z[i] = urand();
    int a[100], b[100], same = 0;
    SampleRng r;
    for (int pass = 0; pass < 3; pass++) {
        sample_rng_seed(&r, pass == 2 ? 43 : 42);
        for (int i = 0; i < 100; i++) {
            int id = pick(z, 50, 0.8f, pass ? 20 : 0, pass ? 0.9f : 1, &r);
            if (pass == 0) a[i] = id;
            else if (pass == 1) b[i] = id;
            else same += id == b[i];
        }
        if (pass == 0) { /* the same seed and rule again */
            SampleRng r2;
            sample_rng_seed(&r2, 42);
            for (int i = 0; i < 100; i++) ck_assert_int_eq(pick(z, 50, 0.8f, 0, 1, &r2), a[i]);
        }
    }
    ck_assert_int_lt(same, 30); /* another seed, other tokens (about 1 in 20 alike) */
    sample_rng_seed(&r, 0); /* splitmix64's first output for seed 0 (its reference value) */
    ck_assert_double_eq(sample_rng_next(&r), (0xE220A8397B1DCDAFull >> 11) * 0x1.0p-53);
}
END_TEST

/* The generator: greedy equals top-k 1 sampled, a seed repeats, the end-of-text id ends
 * the text (and is in it), and model.max_seq_len ends it too. */
START_TEST(test_sampler) {
    ModelDims d = dims(&arch_llama, 4, 2, 0);
    Model m;
    build(&m, &d);
    Sampler s;
    char err[256];
    int prompt[3] = {1, 5, 7}, g[16], o[16], n;
    ck_assert_int_eq(sampler_init(&s, &m, T_SEQ - 1, 3, err, sizeof err), PP_OK);
    n = sampler_generate(&s, prompt, 3, 8, g);
    ck_assert_int_eq(n, 8);
    ck_assert_int_eq(s.stop, SAMPLE_STOP_MAX_NEW);
    ck_assert_int_eq(s.decode_steps, 7);
    s.rule = (SampleRule){1.0f, 1, 1};
    ck_assert_int_eq(sampler_generate(&s, prompt, 3, 8, o), 8);
    ck_assert_int_eq(memcmp(g, o, sizeof(int) * 8), 0);
    s.rule = (SampleRule){1.5f, 0, 1};
    for (int pass = 0; pass < 2; pass++) {
        sample_rng_seed(&s.rng, 5);
        ck_assert_int_eq(sampler_generate(&s, prompt, 3, 12, pass ? o : g), 12);
    }
    ck_assert_int_eq(memcmp(g, o, sizeof(int) * 12), 0);
    s.rule = (SampleRule){0, 0, 1};
    n = sampler_generate(&s, prompt, 3, 8, g);
    s.eos[0] = g[2];
    s.neos = 1;
    n = sampler_generate(&s, prompt, 3, 8, o);
    ck_assert_int_le(n, 3);
    ck_assert_int_eq(o[n - 1], g[2]);
    ck_assert_int_eq(s.stop, SAMPLE_STOP_EOS);
    s.neos = 0;
    int longp[T_SEQ - 2] = {0}; /* 14 of 16 positions: room for 2 new tokens */
    ck_assert_int_eq(sample_cache_len(T_SEQ - 2, 8, T_SEQ), T_SEQ - 1);
    ck_assert_int_eq(sampler_generate(&s, longp, T_SEQ - 2, 8, o), 2);
    ck_assert_int_eq(s.stop, SAMPLE_STOP_MAX_SEQ);
    ck_assert_int_eq(sampler_generate(&s, longp, T_SEQ - 2, 2, o), 2);
    ck_assert_int_eq(s.stop, SAMPLE_STOP_MAX_NEW);
    sampler_free(&s);
    model_free(&m);
}
END_TEST

int main(void) {
    backend_cpu_set_threads(2);
    Suite *s = suite_create("sample");
    TCase *tc = tcase_create("sample");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_decode_gpt2);
    tcase_add_test(tc, test_decode_llama);
    tcase_add_test(tc, test_decode_refuses);
    tcase_add_test(tc, test_decode_ops);
    tcase_add_test(tc, test_rule_greedy);
    tcase_add_test(tc, test_rule_distribution);
    tcase_add_test(tc, test_rule_seeded);
    tcase_add_test(tc, test_sampler);
    suite_add_tcase(s, tc);
    return check_run(s, 0);
}
