/* bench_ckpt.c — checkpoint throughput on a GPT-2 124M-sized set of tensors: save and
 * load MB/s (raw fp32), the asynchronous writer's submit stall, and the compressed/raw
 * ratio, at zlib levels 1 and 6 with and without the byte shuffle.
 *
 *   bench_ckpt [--weights gpt2_124M.bin] [--threads N] [--dir /tmp]
 *
 * --weights: an llm.c fp32 checkpoint (DESIGN.md §6); without it the weights are
 * synthetic, drawn to resemble trained ones, and the output says so. Files go to a
 * fresh directory under --dir (default /tmp) that is removed at the end. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "common.h"

#define MAX_TENSORS 1024

typedef struct {
    int maxT, V, L, NH, C, Vp;
} Dims;

typedef struct {
    Dims d;
    float *flat;         /* all parameters in llm.c's order */
    size_t nparams;
    CkptTensor t[MAX_TENSORS];
    char names[MAX_TENSORS][CKPT_NAME_MAX];
    int n;
} Model;

/* Parameter counts in llm.c's order: wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw,
 * attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb. */
static void param_sizes(const Dims *d, size_t sz[16]) {
    size_t C = (size_t)d->C, L = (size_t)d->L;
    size_t v[16] = {(size_t)d->Vp * C, (size_t)d->maxT * C, L * C, L * C, L * 3 * C * C,
                    L * 3 * C, L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                    L * C * 4 * C, L * C, C, C};
    memcpy(sz, v, sizeof v);
}

static void add(Model *m, const char *name, const float *data, int ndim, int64_t d0,
                int64_t d1) {
    CkptTensor *t = &m->t[m->n];
    snprintf(m->names[m->n], CKPT_NAME_MAX, "%s", name);
    *t = (CkptTensor){.name = m->names[m->n], .ndim = ndim, .shape = {d0, d1}, .data = data};
    m->n++;
}

/* Name every tensor, per layer, pointing into m->flat. */
static void name_tensors(Model *m) {
    static const char *layer_names[12] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
                                          "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                                          "fcprojw", "fcprojb"};
    size_t sz[16], off[16], C = (size_t)m->d.C;
    param_sizes(&m->d, sz);
    for (int i = 0; i < 16; i++) off[i] = i ? off[i - 1] + sz[i - 1] : 0;
    add(m, "wte", m->flat + off[0], 2, m->d.Vp, m->d.C);
    add(m, "wpe", m->flat + off[1], 2, m->d.maxT, m->d.C);
    /* per-layer [rows, cols] of each stacked tensor (cols 0: a vector) */
    const size_t rows[12] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
    const size_t cols[12] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
    for (int l = 0; l < m->d.L; l++)
        for (int k = 0; k < 12; k++) {
            char name[CKPT_NAME_MAX];
            size_t per = sz[2 + k] / (size_t)m->d.L;
            snprintf(name, sizeof name, "h.%d.%s", l, layer_names[k]);
            add(m, name, m->flat + off[2 + k] + (size_t)l * per, cols[k] ? 2 : 1,
                (int64_t)rows[k], (int64_t)cols[k]);
        }
    add(m, "lnfw", m->flat + off[14], 1, m->d.C, 0);
    add(m, "lnfb", m->flat + off[15], 1, m->d.C, 0);
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static double uniform(void) { /* xorshift64*, in (0, 1) */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return ((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
}

static float gauss(double std) {
    return (float)(std * sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

/* GPT-2 124M dims with synthetic weights: matrices and biases gaussian with std 0.02,
 * LayerNorm weights 1 + gaussian 0.05 (as trained ones roughly are). */
static void synthesize(Model *m) {
    m->d = (Dims){1024, 50257, 12, 12, 768, 50304};
    size_t sz[16];
    param_sizes(&m->d, sz);
    m->nparams = 0;
    for (int i = 0; i < 16; i++) m->nparams += sz[i];
    m->flat = pp_malloc(m->nparams * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < 16; i++) {
        int is_lnw = i == 2 || i == 8 || i == 14;
        for (size_t j = 0; j < sz[i]; j++)
            m->flat[at + j] = is_lnw ? 1.0f + gauss(0.05) : gauss(0.02);
        at += sz[i];
    }
}

/* Read an llm.c fp32 checkpoint: 256 int32 header (magic 20240326, version 3, maxT, V,
 * L, NH, C, Vp), then the parameters. Dies with a message on a bad file. */
static void load_llmc(Model *m, const char *path) {
    FILE *f = fopen(path, "rb");
    int32_t h[256];
    if (!f) PP_DIE("cannot open %s", path);
    if (fread(h, 4, 256, f) != 256 || h[0] != 20240326 || h[1] != 3)
        PP_DIE("%s: not an llm.c fp32 v3 checkpoint (magic 20240326, version 3)", path);
    m->d = (Dims){h[2], h[3], h[4], h[5], h[6], h[7]};
    size_t sz[16];
    param_sizes(&m->d, sz);
    m->nparams = 0;
    for (int i = 0; i < 16; i++) m->nparams += sz[i];
    m->flat = pp_malloc(m->nparams * sizeof(float));
    if (fread(m->flat, sizeof(float), m->nparams, f) != m->nparams)
        PP_DIE("%s: file ends before its %zu parameters", path, m->nparams);
    fclose(f);
}

static size_t numel(const CkptTensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static long long dir_bytes(const char *dir) {
    long long total = 0;
    for (int r = 0;; r++) {
        char path[PP_PATH_MAX];
        struct stat st;
        ckpt_shard_path(dir, r, path, sizeof path);
        if (stat(path, &st) != 0) return total;
        total += st.st_size;
    }
}

typedef struct {
    double save_s, load_s, ratio;
} Result;

/* One synchronous save + commit and a full load checked against the source. */
static Result run_one(const Model *m, const char *root, const CkptOptions *o, long step,
                      float *back) {
    char err[PP_ERR_MAX], dir[PP_PATH_MAX], path[PP_PATH_MAX];
    Result res = {0};
    double t0 = pp_now();
    if (ckpt_stage_dir(root, step, dir, sizeof dir, err, sizeof err) ||
        ckpt_shard_path(dir, 0, path, sizeof path) ||
        ckpt_write_shard(path, NULL, m->t, m->n, o, err, sizeof err) ||
        ckpt_commit(root, step, 1, NULL, 0, 1, err, sizeof err))
        PP_DIE("save failed: %s", err);
    res.save_s = pp_now() - t0;
    ckpt_dir_path(root, step, 0, dir, sizeof dir);
    res.ratio = (double)dir_bytes(dir) / ((double)m->nparams * 4);
    t0 = pp_now();
    CkptReader *r = ckpt_open(dir, err, sizeof err);
    if (!r) PP_DIE("open failed: %s", err);
    ckpt_set_threads(r, o->threads);
    size_t total = 0;
    for (int i = 0; i < m->n; i++) { /* into back at the tensor's place in m->flat */
        float *dst = back + ((const float *)m->t[i].data - m->flat);
        if (ckpt_read(r, m->t[i].name, dst, m->t[i].shape, m->t[i].ndim, err,
                      sizeof err) != PP_OK)
            PP_DIE("read failed: %s", err);
        total += numel(&m->t[i]);
    }
    res.load_s = pp_now() - t0;
    ckpt_close(r);
    if (total != m->nparams || memcmp(back, m->flat, total * sizeof(float)) != 0)
        PP_DIE("loaded values differ from the saved ones");
    return res;
}

/* Two asynchronous saves: the submit stall (the copy into the staging buffers, first
 * into fresh memory, then reused) and the time until the second save is on disk. */
static void run_async(const Model *m, const char *root, const CkptOptions *o) {
    char err[PP_ERR_MAX], path[PP_PATH_MAX];
    double stall[2], total = 0;
    CkptWriter *w = ckpt_writer_create(o);
    for (int k = 0; k < 2; k++) {
        if (snprintf(path, sizeof path, "%s/async_%d.ckpt", root, k) >= (int)sizeof path)
            PP_DIE("path too long: %s", root);
        double t0 = pp_now();
        if (ckpt_writer_submit(w, path, NULL, m->t, m->n, err, sizeof err) != PP_OK)
            PP_DIE("submit failed: %s", err);
        stall[k] = (pp_now() - t0) * 1e3;
        if (ckpt_writer_wait(w, err, sizeof err) != PP_OK) PP_DIE("async save: %s", err);
        total = pp_now() - t0;
        unlink(path);
    }
    ckpt_writer_destroy(w);
    printf("\nasync writer (level %d, shuffle %s, %s): submit stall %.1f ms first (fresh "
           "staging memory), %.1f ms reused (%.1f GB/s copy); save done %.2f s after submit\n",
           o->level, o->shuffle ? "yes" : "no", o->strategy == CKPT_RLE ? "rle" : "default",
           stall[0], stall[1], (double)m->nparams * 4 / 1e6 / stall[1], total);
}

static char g_root[PP_PATH_MAX]; /* the temporary directory, removed at exit */

static void remove_root(void) {
    char cmd[PP_PATH_MAX + 16];
    if (!g_root[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "bench_ckpt: could not remove %s\n", g_root);
}

int main(int argc, char **argv) {
    const char *weights = NULL, *base = "/tmp";
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) base = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--weights llmc_fp32.bin] [--threads N] [--dir DIR]\n",
                    argv[0]);
            return PP_EUSAGE;
        }
    }
    static Model m;
    if (weights) load_llmc(&m, weights);
    else synthesize(&m);
    name_tensors(&m);
    char root[PP_PATH_MAX];
    snprintf(root, sizeof root, "%s/bench_ckpt.XXXXXX", base);
    if (!mkdtemp(root)) PP_DIE("cannot create a directory under %s", base);
    snprintf(g_root, sizeof g_root, "%s", root);
    atexit(remove_root); /* also when a check below dies */
    double mb = (double)m.nparams * 4 / 1e6;
    printf("bench_ckpt: GPT-2 dims L=%d C=%d Vp=%d maxT=%d: %d tensors, %zu params "
           "(%.1f MB fp32)\n", m.d.L, m.d.C, m.d.Vp, m.d.maxT, m.n, m.nparams, mb);
    printf("weights: %s\n", weights ? weights : "SYNTHETIC (gaussian std 0.02, LayerNorm "
           "weights 1 + N(0, 0.05)): ratios are indicative; pass --weights for real ones");
    printf("threads: %d (compression and decompression), dir: %s, 4 MiB chunks, warm page "
           "cache for loads\n\n", threads, root);
    printf("level shuffle strategy  save MB/s  load MB/s  compressed/raw\n");
    float *back = pp_malloc(m.nparams * sizeof(float));
    /* levels 1 and 6 with and without shuffle, then the RLE strategy */
    static const int cfg[][3] = {{1, 0, CKPT_DEFLATE}, {1, 1, CKPT_DEFLATE},
                                 {6, 0, CKPT_DEFLATE}, {6, 1, CKPT_DEFLATE},
                                 {1, 1, CKPT_RLE}};
    for (int c = 0; c < (int)(sizeof cfg / sizeof cfg[0]); c++) {
        CkptOptions o;
        ckpt_options_default(&o);
        o.level = cfg[c][0];
        o.shuffle = cfg[c][1];
        o.threads = threads;
        o.strategy = (CkptStrategy)cfg[c][2];
        Result r = run_one(&m, root, &o, c, back);
        printf("%5d %7s %8s  %9.1f  %9.1f  %14.4f\n", o.level, o.shuffle ? "yes" : "no",
               o.strategy == CKPT_RLE ? "rle" : "default", mb / r.save_s, mb / r.load_s,
               r.ratio);
        fflush(stdout);
        if (c == 4) run_async(&m, root, &o);
    }
    free(back);
    free(m.flat);
    return 0;
}
