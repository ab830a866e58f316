/* test_config.c — config: defaults, shipped configs, print/load round trip, every error
 * path with its FILE:LINE:COL message, --set, cross-field rules, hash and first_diff.
 * Run from the repository root (reads configs/ and docs/config.md). */
#include <check.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "checkrun.h"

static const char *const k_shipped[] = {
    "configs/gpt-tiny.yaml",        "configs/gpt2-124m.yaml",      "configs/tutorial.yaml",
    "configs/bench-124m-t256.yaml", "configs/bench-124m-t64.yaml", "configs/bench-small.yaml",
    "configs/llama-tiny.yaml",      "configs/smollm-135m.yaml",    "configs/llama3.2-1b.yaml",
};
#define N_SHIPPED (sizeof k_shipped / sizeof k_shipped[0])

/* The model part every valid test config starts from. */
static const char *const k_model =
    "model:\n  vocab_size: 256\n  max_seq_len: 64\n  n_layers: 4\n  n_heads: 4\n  dim: 64\n";

static char g_path[64]; /* the temp file of the current test (each test is its own fork) */

/* Write `text` to a fresh temp file; returns its path (g_path). */
static const char *write_tmp(const char *text) {
    strcpy(g_path, "/tmp/test_config_XXXXXX.yaml");
    int fd = mkstemps(g_path, 5);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    return g_path;
}

/* Load YAML text over c via a temp file (removed again); returns the status. */
static int load_text(Config *c, const char *text, char *err, size_t errlen) {
    const char *path = write_tmp(text);
    int rc = config_load_file(c, path, err, errlen);
    unlink(path);
    return rc;
}

static void assert_has(const char *s, const char *sub) {
    ck_assert_msg(strstr(s, sub) != NULL, "expected '%s' in message: %s", sub, s);
}

/* Defaults + k_model, finalized: a valid starting point. */
static void valid_config(Config *c) {
    char err[PP_ERR_MAX];
    config_defaults(c);
    ck_assert_int_eq(load_text(c, k_model, err, sizeof err), PP_OK);
}

static void set_ok(Config *c, const char *assignment) {
    char err[PP_ERR_MAX] = "";
    ck_assert_msg(config_set(c, assignment, err, sizeof err) == PP_OK, "--set %s: %s",
                  assignment, err);
}

/* ---- defaults ------------------------------------------------------------------- */

START_TEST(test_defaults) {
    Config c;
    config_defaults(&c);
    ck_assert_str_eq(c.arch, "gpt2");
    ck_assert_int_eq(c.vocab_size, 0);
    ck_assert_int_eq(c.padded_vocab_size, 0);
    ck_assert_int_eq(c.max_seq_len + c.n_layers + c.n_heads + c.dim, 0);
    ck_assert_int_eq(c.n_kv_heads + c.ffn_dim + c.sliding_window, 0);
    ck_assert_float_eq(c.norm_eps, 1.0e-5f);
    ck_assert_float_eq(c.rope_theta, 10000.0f);
    ck_assert_str_eq(c.rope_scaling, "none");
    ck_assert_float_eq(c.rope_factor, 8.0f);
    ck_assert_float_eq(c.rope_low_freq_factor, 1.0f);
    ck_assert_float_eq(c.rope_high_freq_factor, 4.0f);
    ck_assert_int_eq(c.rope_original_max_seq_len, 8192);
    ck_assert_int_eq(c.tie_embeddings, -1); /* auto */
    ck_assert_str_eq(c.init_from, "");
    ck_assert_float_eq(c.init_std, 0.02f);
    ck_assert_int_eq(c.stages, 1);
    ck_assert_int_eq(c.virtual_stages, 1);
    ck_assert_str_eq(c.schedule, "1f1b");
    ck_assert_str_eq(c.schedule_file, "");
    ck_assert_int_eq(c.microbatches, 4);
    ck_assert_str_eq(c.split, "auto");
    ck_assert_int_eq(c.batch_size, 8);
    ck_assert_int_eq(c.seq_len, 64);
    ck_assert_int_eq(c.steps, 100);
    ck_assert_uint_eq(c.seed, 1337);
    ck_assert_float_eq(c.grad_clip, 1.0f);
    ck_assert_str_eq(c.optimizer, "adamw");
    ck_assert_float_eq(c.lr, 3.0e-4f);
    ck_assert_float_eq(c.beta1, 0.9f);
    ck_assert_float_eq(c.beta2, 0.95f);
    ck_assert_float_eq(c.eps, 1.0e-8f);
    ck_assert_float_eq(c.weight_decay, 0.1f);
    ck_assert_float_eq(c.momentum, 0.9f);
    ck_assert_int_eq(c.warmup_steps, 0);
    ck_assert_str_eq(c.decay, "cosine");
    ck_assert_float_eq(c.min_lr_ratio, 0.1f);
    ck_assert_str_eq(c.train_path, "data/tiny/train.bin");
    ck_assert_str_eq(c.val_path, "");
    ck_assert_int_eq(c.val_every, 0);
    ck_assert_int_eq(c.val_batches, 4);
    ck_assert_str_eq(c.out_dir, "runs/gpt-tiny");
    ck_assert_int_eq(c.log_every, 1);
    ck_assert_int_eq(c.checkpoint_every, 0);
    ck_assert_int_eq(c.checkpoint_keep, 2);
    ck_assert_int_eq(c.compression_level, 6);
    ck_assert_int_eq(c.trace, 0);
    ck_assert_str_eq(c.device, "auto");
    ck_assert_str_eq(c.precision, "auto");
    ck_assert_str_eq(c.transport, "auto");
    ck_assert_int_eq(c.threads, 0);
    ck_assert_int_eq(c.timeout_s, 300);
}
END_TEST

/* Each required key, when it alone is missing, is named by finalize. */
START_TEST(test_required_keys) {
    static const char *const keys[] = {"vocab_size", "max_seq_len", "n_layers", "n_heads", "dim"};
    static const char *const values[] = {"256", "64", "4", "4", "64"};
    char err[PP_ERR_MAX], arg[64], want[64];
    for (int missing = 0; missing < 5; missing++) {
        Config c;
        config_defaults(&c);
        for (int k = 0; k < 5; k++) {
            if (k == missing) continue;
            snprintf(arg, sizeof arg, "model.%s=%s", keys[k], values[k]);
            set_ok(&c, arg);
        }
        ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
        snprintf(want, sizeof want, "missing required key model.%s", keys[missing]);
        assert_has(err, want);
    }
    Config c;
    valid_config(&c);
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_OK);
}
END_TEST

/* ---- shipped configs -------------------------------------------------------------- */

static void load_shipped(Config *c, const char *path) {
    char err[PP_ERR_MAX] = "";
    config_defaults(c);
    ck_assert_msg(config_load_file(c, path, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_msg(config_finalize(c, err, sizeof err) == PP_OK, "%s: %s", path, err);
}

START_TEST(test_shipped_configs_load) {
    Config c;
    for (size_t i = 0; i < N_SHIPPED; i++) load_shipped(&c, k_shipped[i]);

    load_shipped(&c, "configs/gpt-tiny.yaml");
    ck_assert_int_eq(c.vocab_size, 256);
    ck_assert_int_eq(c.padded_vocab_size, 256);
    ck_assert_int_eq(c.n_layers * 1000 + c.n_heads * 100 + c.dim, 4464);
    ck_assert_int_eq(c.stages, 2);
    ck_assert_int_eq(c.microbatches, 4);
    ck_assert_int_eq(c.steps, 200);
    ck_assert_float_eq(c.lr, 1.0e-3f);
    ck_assert_int_eq(c.warmup_steps, 10);
    ck_assert_str_eq(c.val_path, "data/tiny/val.bin");
    ck_assert_int_eq(c.val_every, 50);
    ck_assert_int_eq(c.log_every, 10);
    ck_assert_int_eq(c.threads, 1);

    load_shipped(&c, "configs/gpt2-124m.yaml");
    ck_assert_int_eq(c.padded_vocab_size, 50304);
    ck_assert_int_eq(c.stages, 4);
    ck_assert_int_eq(c.seq_len, 1024);
    ck_assert_str_eq(c.train_path, "data/tinyshakespeare/tiny_shakespeare_train.bin");

    load_shipped(&c, "configs/tutorial.yaml");
    ck_assert_str_eq(c.split, "[\"layers.4\"]");
    ck_assert_str_eq(c.schedule, "gpipe");
    ck_assert_str_eq(c.optimizer, "sgd");
    ck_assert_int_eq(c.batch_size * 1000 + c.seq_len, 32500);

    load_shipped(&c, "configs/bench-124m-t64.yaml");
    ck_assert_int_eq(c.seq_len, 64);
    ck_assert_int_eq(c.stages * 10 + c.microbatches, 11);
    ck_assert_str_eq(c.out_dir, "runs/bench-124m-t64");
    load_shipped(&c, "configs/bench-small.yaml");
    ck_assert_int_eq(c.microbatches, 8);
    ck_assert_int_eq(c.steps, 5);

    load_shipped(&c, "configs/llama-tiny.yaml");
    ck_assert_str_eq(c.arch, "llama");
    ck_assert_int_eq(c.n_heads * 100 + c.n_kv_heads, 402);
    ck_assert_int_eq(c.ffn_dim, 176);
    ck_assert_int_eq(c.tie_embeddings, 0); /* auto: untied for llama */
    ck_assert_str_eq(c.train_path, "data/tiny/train.bin");
    load_shipped(&c, "configs/smollm-135m.yaml");
    ck_assert_int_eq(c.dim * 100 + c.n_layers, 57630);
    ck_assert_int_eq(c.n_heads * 100 + c.n_kv_heads, 903);
    ck_assert_int_eq(c.ffn_dim, 1536);
    ck_assert_int_eq(c.padded_vocab_size, 49152);
    ck_assert_int_eq(c.tie_embeddings, 1);
    load_shipped(&c, "configs/llama3.2-1b.yaml");
    ck_assert_int_eq(c.dim * 100 + c.n_layers, 204816);
    ck_assert_int_eq(c.n_heads * 100 + c.n_kv_heads, 3208);
    ck_assert_int_eq(c.ffn_dim, 8192);
    ck_assert_int_eq(c.padded_vocab_size, 128256);
    ck_assert_float_eq(c.rope_theta, 500000.0f);
    ck_assert_str_eq(c.rope_scaling, "llama3");
    ck_assert_float_eq(c.rope_factor, 32.0f);
    ck_assert_float_eq(c.rope_low_freq_factor, 1.0f);
    ck_assert_float_eq(c.rope_high_freq_factor, 4.0f);
    ck_assert_int_eq(c.rope_original_max_seq_len, 8192);
    ck_assert_int_eq(c.tie_embeddings, 1);
}
END_TEST

/* ---- print / load round trip ------------------------------------------------------- */

/* Print c (finalized) to a file, load that into fresh defaults, finalize: identical. */
static void assert_round_trip(const Config *c, const char *what) {
    char err[PP_ERR_MAX] = "";
    const char *path = write_tmp("");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    config_print(c, f);
    fclose(f);
    Config back;
    config_defaults(&back);
    int rc = config_load_file(&back, path, err, sizeof err);
    unlink(path);
    ck_assert_msg(rc == PP_OK, "%s: reading the printed config: %s", what, err);
    ck_assert_msg(config_finalize(&back, err, sizeof err) == PP_OK, "%s: %s", what, err);
    ck_assert_msg(config_first_diff(c, &back) == NULL, "%s: %s differs", what,
                  config_first_diff(c, &back));
    /* every setting, bit for bit; not the given marks (the printed file gives every key) */
    ck_assert_msg(memcmp(c, &back, offsetof(Config, given)) == 0, "%s: not memcmp-equal", what);
    ck_assert_uint_eq(config_hash(c, 0), config_hash(&back, 0));
}

START_TEST(test_round_trip_shipped) {
    for (size_t i = 0; i < N_SHIPPED; i++) {
        Config c;
        load_shipped(&c, k_shipped[i]);
        assert_round_trip(&c, k_shipped[i]);
    }
}
END_TEST

/* Values that need quoting or all float digits still read back to the same bytes. */
START_TEST(test_round_trip_tricky) {
    Config c;
    char err[PP_ERR_MAX] = "";
    valid_config(&c);
    const char *text = "model:\n  init_from: \"null\"\n  init_std: 0.0123456789\n"
                       "  tie_embeddings: no\n"
                       "pipeline:\n  split: [1, 1, 2]\n  schedule_file: '~/plans/a b.txt'\n"
                       "train:\n  seed: 18446744073709551615\n  grad_clip: 0\n"
                       "  optimizer:\n    lr: 1e-45\n    eps: 3.4e38\n    beta1: 0.999999\n"
                       "data:\n  train: \"we:ird #path \\\"q\\\" \\\\ \\t end\"\n"
                       "  val: \"-leading dash\"\n"
                       "output:\n  dir: 'runs/x: y'\n  trace: on\n";
    ck_assert_msg(load_text(&c, text, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_OK);
    ck_assert_str_eq(c.init_from, "null");
    ck_assert_str_eq(c.schedule_file, "~/plans/a b.txt");
    ck_assert_uint_eq(c.seed, UINT64_MAX);
    ck_assert_str_eq(c.train_path, "we:ird #path \"q\" \\ \t end");
    ck_assert_str_eq(c.split, "[1, 1, 2]");
    ck_assert_int_eq(c.tie_embeddings, 0);
    ck_assert_int_eq(c.trace, 1);
    assert_round_trip(&c, "tricky");
    set_ok(&c, "pipeline.split=[\"layers.1\", layers.3]");
    assert_round_trip(&c, "split points");
}
END_TEST

/* The model keys config_finalize resolves: n_kv_heads 0 = n_heads, ffn_dim 0 = 4 dim for
 * gpt2, tie_embeddings auto = the arch's (true for gpt2, false for the llama family);
 * what the file says is kept. */
START_TEST(test_model_keys_resolved) {
    static const struct {
        const char *sets, *arch;
        int nkv, ffn, tied;
    } cases[] = {
        {"", "gpt2", 4, 256, 1},
        {"model.tie_embeddings=false;model.n_kv_heads=4;model.ffn_dim=256", "gpt2", 4, 256, 0},
        {"model.arch=llama;model.ffn_dim=100", "llama", 4, 100, 0},
        {"model.arch=qwen2;model.ffn_dim=8;model.n_kv_heads=1", "qwen2", 1, 8, 0},
        {"model.arch=mistral;model.ffn_dim=8;model.n_kv_heads=2;model.tie_embeddings=true",
         "mistral", 2, 8, 1},
        {"model.arch=llama;model.ffn_dim=8;model.tie_embeddings=auto", "llama", 4, 8, 0},
    };
    char err[PP_ERR_MAX] = "", list[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        valid_config(&c);
        snprintf(list, sizeof list, "%s", cases[i].sets);
        for (char *save, *a = strtok_r(list, ";", &save); a; a = strtok_r(NULL, ";", &save))
            set_ok(&c, a);
        ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s: %s", cases[i].sets, err);
        ck_assert_str_eq(c.arch, cases[i].arch);
        ck_assert_int_eq(c.n_kv_heads, cases[i].nkv);
        ck_assert_int_eq(c.ffn_dim, cases[i].ffn);
        ck_assert_int_eq(c.tie_embeddings, cases[i].tied);
        assert_round_trip(&c, cases[i].sets);
    }
}
END_TEST

/* model.rope_scaling: a mapping in a file or --set; null turns the scaling off again
 * (every key of it back to its default), and an unknown type is refused naming the key. */
START_TEST(test_rope_scaling) {
    char err[PP_ERR_MAX] = "";
    Config c;
    valid_config(&c);
    set_ok(&c, "model.arch=llama");
    set_ok(&c, "model.ffn_dim=8");
    ck_assert_int_eq(load_text(&c, "model:\n  rope_scaling:\n    type: llama3\n    factor: 16\n"
                                   "    original_max_seq_len: 4096\n", err, sizeof err), PP_OK);
    ck_assert_str_eq(c.rope_scaling, "llama3");
    ck_assert_float_eq(c.rope_factor, 16.0f);
    ck_assert_int_eq(c.rope_original_max_seq_len, 4096);
    ck_assert_float_eq(c.rope_high_freq_factor, 4.0f); /* the default */
    Config scaled = c;
    set_ok(&c, "model.rope_scaling=null");
    ck_assert_str_eq(c.rope_scaling, "none");
    ck_assert_float_eq(c.rope_factor, 8.0f);
    ck_assert_int_eq(c.rope_original_max_seq_len, 8192);
    /* null is a choice (a Hugging Face init_from's scaling must then be none) */
    ck_assert(config_given(&c, "model.rope_scaling.type") &&
              config_given(&c, "model.rope_scaling.low_freq_factor"));
    set_ok(&c, "model.rope_scaling={type: llama3, factor: 16, original_max_seq_len: 4096}");
    ck_assert_msg(memcmp(&c, &scaled, offsetof(Config, given)) == 0,
                  "--set of the mapping differs from the file");
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    assert_round_trip(&c, "llama3 scaling");
    ck_assert_int_eq(load_text(&c, "model:\n  rope_scaling: ~\n", err, sizeof err), PP_OK);
    ck_assert_str_eq(c.rope_scaling, "none");
    ck_assert_int_eq(config_set(&c, "model.rope_scaling.type=yarn", err, sizeof err), PP_EUSAGE);
    assert_has(err, "model.rope_scaling.type: expected one of none, llama3, got 'yarn'");
    ck_assert_int_eq(config_set(&c, "model.rope_scaling={type: llama3, facter: 2}", err,
                                sizeof err), PP_EUSAGE);
    assert_has(err, "unknown key 'model.rope_scaling.facter' (did you mean "
                    "'model.rope_scaling.factor'?)");
    ck_assert_int_eq(config_set(&c, "model.rope_scaling.factor=0", err, sizeof err), PP_EUSAGE);
    assert_has(err, "model.rope_scaling.factor: expected a number > 0");
    ck_assert_int_eq(config_set(&c, "model.rope_scaling=llama3", err, sizeof err), PP_EUSAGE);
    assert_has(err, "model.rope_scaling: expected a mapping of keys, got 'llama3'");
}
END_TEST

/* Strings that YAML 1.1 would read as numbers or booleans are printed quoted, so that any
 * YAML reader of the printed config (a manifest's) sees the same strings. */
START_TEST(test_print_quotes_what_looks_typed) {
    static const char *const typed[] = {"4", "true", "Off", "y", "1.5e3", "0x10", ".inf", "1_000",
                                        "1:30", "+5", "-.5"};
    static const char *const plain[] = {"1f1b", "a4", "data/4", "4a.bin", "true.bin"};
    char err[PP_ERR_MAX] = "", a[64], *text = NULL, want[64];
    size_t len = 0;
    for (size_t i = 0; i < sizeof typed / sizeof typed[0] + sizeof plain / sizeof plain[0]; i++) {
        int is_typed = i < sizeof typed / sizeof typed[0];
        const char *v = is_typed ? typed[i] : plain[i - sizeof typed / sizeof typed[0]];
        Config c;
        valid_config(&c);
        snprintf(a, sizeof a, "data.val=\"%s\"", v);
        set_ok(&c, a);
        ck_assert_str_eq(c.val_path, v);
        FILE *f = open_memstream(&text, &len);
        config_print(&c, f);
        fclose(f);
        snprintf(want, sizeof want, is_typed ? "\n  val: \"%s\"\n" : "\n  val: %s\n", v);
        ck_assert_msg(strstr(text, want), "'%s' printed wrongly:\n%s", v, text);
        Config back;
        config_defaults(&back);
        ck_assert_int_eq(load_text(&back, text, err, sizeof err), PP_OK);
        ck_assert_str_eq(back.val_path, v);
        free(text);
    }
}
END_TEST

START_TEST(test_print_layout) {
    Config c;
    char *text = NULL;
    size_t len = 0;
    valid_config(&c);
    FILE *f = open_memstream(&text, &len);
    config_print(&c, f);
    fclose(f);
    static const char *const order[] = {
        "model:\n  arch: gpt2\n", "\npipeline:\n  stages: 1\n", "\ntrain:\n  batch_size: 8\n",
        "\n  optimizer:\n    name: adamw\n", "\n  lr_schedule:\n    warmup_steps: 0\n",
        "\ndata:\n  train: data/tiny/train.bin\n", "\noutput:\n", "\nruntime:\n"};
    const char *prev = text;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *at = strstr(text, order[i]);
        ck_assert_msg(at && at >= prev, "'%s' missing or out of order in:\n%s", order[i], text);
        prev = at;
    }
    assert_has(text, "    momentum: 0.9\n");
    assert_has(text, "  init_from: null\n");
    assert_has(text, "  seed: 1337\n");
    free(text);
}
END_TEST

/* ---- errors in files ---------------------------------------------------------------- */

typedef struct {
    const char *yaml;   /* after k_model */
    const char *where;  /* ":LINE:COL: " counting k_model's 6 lines */
    const char *key;
    const char *wanted; /* what was expected / what is wrong */
} FileError;

static const FileError k_file_errors[] = {
    {"train:\n  steps: many\n", ":8:10: ", "train.steps: ", "expected an integer >= 0, got 'many'"},
    {"train:\n  steps: 2.5\n", ":8:10: ", "train.steps: ", "expected an integer >= 0, got '2.5'"},
    {"train:\n  steps: \"20\"\n", ":8:10: ", "train.steps: ", "got '\"20\"' (a quoted string)"},
    {"train:\n  steps: null\n", ":8:10: ", "train.steps: ", "got 'null'"},
    {"train:\n  steps: 99999999999\n", ":8:10: ", "train.steps: ", "<= 2147483647"},
    {"output:\n  compression_level: 12\n", ":8:22: ", "output.compression_level: ",
     "expected an integer in [0, 9], got '12'"},
    {"output:\n  trace: maybe\n", ":8:10: ", "output.trace: ", "expected true or false"},
    {"train:\n  seed: -1\n", ":8:9: ", "train.seed: ", "expected an unsigned 64-bit integer"},
    {"train:\n  optimizer: {lr: fast}\n", ":8:19: ", "train.optimizer.lr: ",
     "expected a number > 0, got 'fast'"},
    {"train:\n  optimizer:\n    beta2: 1.0\n", ":9:12: ", "train.optimizer.beta2: ",
     "expected a number in [0, 1), got '1.0'"},
    {"train:\n  optimizer:\n    lr: 1e39\n", ":9:9: ", "train.optimizer.lr: ", "got '1e39'"},
    {"train:\n  optimizer:\n    lr: .inf\n", ":9:9: ", "train.optimizer.lr: ", "got '.inf'"},
    {"pipeline:\n  schedule: zigzag\n", ":8:13: ", "pipeline.schedule: ",
     "expected one of gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zbv, got 'zigzag'"},
    {"data:\n  train: null\n", ":8:10: ", "data.train: ", "expected a non-empty path"},
    {"train:\n  steps: {a: 1}\n", ":8:10: ", "train.steps: ", "got a mapping"},
    {"train:\n  steps: [1]\n", ":8:10: ", "train.steps: ", "got a list"},
    {"train: 5\n", ":7:8: ", "train: ", "expected a mapping of keys, got '5'"},
    {"pipeline:\n  split: [4, layers.4]\n", ":8:14: ", "pipeline.split: ",
     "like the first, got 'layers.4'"},
    {"pipeline:\n  split: [0, 4]\n", ":8:11: ", "pipeline.split: ", "got '0'"},
    {"pipeline:\n  split: [layers.x]\n", ":8:11: ", "pipeline.split: ", "got 'layers.x'"},
    {"pipeline:\n  split: ['4']\n", ":8:11: ", "pipeline.split: ", "(a quoted string)"},
    {"pipeline:\n  split: []\n", ":8:11: ", "pipeline.split: ", "got an empty list"},
    {"pipeline:\n  split: [[1]]\n", ":8:11: ", "pipeline.split: ", "got a list"},
    {"pipeline:\n  split: even\n", ":8:10: ", "pipeline.split: ",
     "expected auto, a list of layer counts like [4, 4]"},
    {"train:\n  steps: 1\n  steps: 2\n", ":9:3: ", "duplicate key 'train.steps'",
     "first given at line 8"},
    {"model:\n  dim: 8\n", ":7:1: ", "duplicate key 'model'", "first given at line 1"},
    {"train:\n  stepz: 20\n", ":8:3: ", "unknown key 'train.stepz'",
     "(did you mean 'train.steps'?)"},
    {"train.steps: 3\n", ":7:1: ", "key 'train.steps'", "nested mappings"},
    {"x: &a 1\n", ":7:1: ", "unknown key 'x'", "docs/config.md"},
    {"train:\n  steps: &n 5\n  seed: *n\n", ":9:9: ", "aliases", "not supported"},
    {"train: {}\n---\ntrain: {}\n", ":8:1: ", "single YAML document", "second one"},
    {"train:\n  steps: 4\n bad: 1\n", ":9:2: ", "YAML syntax error",
     "did not find expected key (while parsing a block mapping at line 1, column 1)"},
    {"train: {steps: 4\n", ":8:1: ", "YAML syntax error", "did not find expected ',' or '}'"},
    {"train:\n  steps: 4: 5\n", ":8:11: ", "YAML syntax error", "mapping values are not allowed"},
    /* what YAML 1.1 reads otherwise: 010 is octal 8 there, tRuE a string */
    {"train:\n  steps: 010\n", ":8:10: ", "train.steps: ",
     "written without leading zeros, got '010'"},
    {"train:\n  seed: 00\n", ":8:9: ", "train.seed: ", "without leading zeros"},
    {"train:\n  grad_clip: 010\n", ":8:14: ", "train.grad_clip: ", "got '010'"},
    {"train:\n  optimizer: {lr: -00.5}\n", ":8:19: ", "train.optimizer.lr: ", "got '-00.5'"},
    {"output:\n  trace: tRuE\n", ":8:10: ", "output.trace: ", "expected true or false, got 'tRuE'"},
    /* [Note: YAML tags]: honoured or refused, never ignored */
    {"train:\n  steps: !!str 4\n", ":8:10: ", "train.steps: ",
     "the YAML tag !!str makes '4' a string, but train.steps takes an integer >= 0"},
    {"train:\n  steps: !!float 4\n", ":8:10: ", "train.steps: ", "!!float makes '4' a number"},
    {"train:\n  optimizer: {lr: !!int 1}\n", ":8:19: ", "train.optimizer.lr: ",
     "takes a number > 0"},
    {"output:\n  trace: !!str true\n", ":8:10: ", "output.trace: ", "takes true or false"},
    {"data:\n  val: !!null foo\n", ":8:8: ", "data.val: ", "!!null needs an empty value or null"},
    {"data:\n  train: !!null\n", ":8:10: ", "data.train: ", "!!null makes '' null"},
    {"train:\n  steps: !foo 4\n", ":8:10: ", "YAML tag '!foo'", "not supported"},
    {"train:\n  steps: !<tag:example.com,2000:x> 4\n", ":8:10: ", "YAML tag", "not supported"},
    {"train: !!seq\n  steps: 4\n", ":7:8: ", "!!seq", "does not fit a mapping"},
    {"pipeline:\n  split: !!map [4]\n", ":8:10: ", "!!map", "does not fit a list"},
    {"train:\n  steps: !!map 4\n", ":8:10: ", "!!map", "does not fit a single value"},
    {"train:\n  !!int steps: 4\n", ":8:3: ", "key 'steps'", "not !!int"},
    {"pipeline:\n  split: [!!str 4]\n", ":8:11: ", "pipeline.split: ", "got '\"4\"'"},
    /* a NUL inside a quoted string would cut the C string short */
    {"data:\n  train: \"a.bin\\0junk\"\n", ":8:10: ", "NUL byte (\\0) at character 6",
     "remove it"},
    {"data:\n  val: \"v\\x00\"\n", ":8:8: ", "NUL byte", "at character 2"},
    {"train:\n  \"steps\\0x\": 4\n", ":8:3: ", "NUL byte", "remove it"},
};

START_TEST(test_file_errors) {
    const FileError *e = &k_file_errors[_i];
    char text[1024], err[PP_ERR_MAX] = "", where[PP_PATH_MAX];
    snprintf(text, sizeof text, "%s%s", k_model, e->yaml);
    Config c, before;
    config_defaults(&c);
    set_ok(&c, "train.steps=77");
    before = c;
    ck_assert_int_eq(load_text(&c, text, err, sizeof err), PP_EUSAGE);
    snprintf(where, sizeof where, "%s%s", g_path, e->where);
    ck_assert_msg(strncmp(err, where, strlen(where)) == 0, "expected '%s' at the start of: %s",
                  where, err);
    assert_has(err, e->key);
    assert_has(err, e->wanted);
    ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "a failed load changed the config");
}
END_TEST

START_TEST(test_top_level_not_mapping) {
    Config c;
    char err[PP_ERR_MAX] = "";
    config_defaults(&c);
    ck_assert_int_eq(load_text(&c, "- model\n", err, sizeof err), PP_EUSAGE);
    assert_has(err, ":1:1: top level: expected a mapping of sections");
    ck_assert_int_eq(load_text(&c, "# only a comment\n", err, sizeof err), PP_OK);
    ck_assert_int_eq(load_text(&c, "model:\ntrain: ~\n", err, sizeof err), PP_OK);
    ck_assert_int_eq(load_text(&c, "model:\n  dim: \xff\n", err, sizeof err), PP_EUSAGE);
    assert_has(err, "cannot read the YAML text");
    assert_has(err, "UTF-8");
}
END_TEST

START_TEST(test_missing_and_unreadable_files) {
    Config c;
    char err[PP_ERR_MAX] = "";
    config_defaults(&c);
    ck_assert_int_eq(config_load_file(&c, "/nonexistent/dir/x.yaml", err, sizeof err), PP_EUSAGE);
    assert_has(err, "/nonexistent/dir/x.yaml: cannot open config file: No such file");
    ck_assert_int_eq(config_load_file(&c, "/tmp", err, sizeof err), PP_EUSAGE);
    assert_has(err, "/tmp: cannot read config file: it is a directory, not a regular file");
}
END_TEST

/* What is not a regular file is refused at once: a FIFO without a writer (a plain open
 * would block forever: the test's timeout), a device that never ends, and a file over
 * the 1 MiB a config may have. */
START_TEST(test_config_not_a_regular_file) {
    Config c, before;
    char err[PP_ERR_MAX] = "", fifo[64];
    config_defaults(&c);
    before = c;
    snprintf(fifo, sizeof fifo, "/tmp/test_config_fifo.%d", (int)getpid());
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    int rc = config_load_file(&c, fifo, err, sizeof err);
    unlink(fifo);
    ck_assert_int_eq(rc, PP_EUSAGE);
    assert_has(err, fifo);
    assert_has(err, ": cannot read config file: it is a FIFO, not a regular file");
    ck_assert_int_eq(config_load_file(&c, "/dev/zero", err, sizeof err), PP_EUSAGE);
    assert_has(err, "/dev/zero: cannot read config file: it is a character device, not a "
                    "regular file");
    char *big = malloc((1 << 20) + 2);
    memset(big, '#', (1 << 20) + 1); /* one comment line of 1 MiB + 1 byte */
    big[(1 << 20) + 1] = 0;
    ck_assert_int_eq(load_text(&c, big, err, sizeof err), PP_EUSAGE);
    free(big);
    assert_has(err, "cannot read config file: it is 1048577 bytes, over the limit of 1048576");
    assert_has(err, "at most 1 MiB");
    ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "a refused file changed the config");
}
END_TEST

/* A tag that fits the key is honoured: `!!int "4"` is 4, `!!str null` the path "null". */
START_TEST(test_tags_that_fit) {
    Config c;
    valid_config(&c);
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(load_text(&c, "train:\n  steps: !!int \"4\"\n  optimizer: {lr: !!float 1, "
                                   "name: !!str sgd}\noutput: {trace: !!bool yes}\ndata:\n  "
                                   "val: !!str null\n  train: ! plain.bin\n", err, sizeof err),
                     PP_OK);
    ck_assert_int_eq(c.steps, 4);
    ck_assert_float_eq(c.lr, 1.0f);
    ck_assert_str_eq(c.optimizer, "sgd");
    ck_assert_int_eq(c.trace, 1);
    ck_assert_str_eq(c.val_path, "null");
    ck_assert_str_eq(c.train_path, "plain.bin");
    ck_assert_int_eq(load_text(&c, "data: !!map {val: !!null ~}\npipeline: {split: !!seq [2, "
                                   "!!int 2]}\n", err, sizeof err), PP_OK);
    ck_assert_str_eq(c.val_path, "");
    ck_assert_str_eq(c.split, "[2, 2]");
    /* --set values are YAML too */
    ck_assert_int_eq(config_set(&c, "model.n_layers=!!str 4", err, sizeof err), PP_EUSAGE);
    assert_has(err, "--set model.n_layers=!!str 4: model.n_layers: the YAML tag !!str makes "
                    "'4' a string");
    ck_assert_int_eq(config_set(&c, "data.train=\"a.bin\\0junk\"", err, sizeof err),
                     PP_EUSAGE);
    assert_has(err, "NUL byte");
    ck_assert_str_eq(c.train_path, "plain.bin");
}
END_TEST

/* [Note: field_number] Integer limits hold at the edges of an int: 2147483584 and up
 * (which a float rounds to 2^31) pass as they should, one more than INT_MAX and values
 * below the limit are refused with the right numbers, in YAML and set directly. */
START_TEST(test_int_limits_at_the_edges) {
    static const char *const keys[] = {"train.steps", "output.checkpoint_keep",
                                       "output.log_every", "runtime.timeout_s",
                                       "data.val_batches", "train.lr_schedule.warmup_steps"};
    static const char *const fits[] = {"2147483647", "2147483646", "2147483584", "2147483583",
                                       "16777217", "1"};
    char err[PP_ERR_MAX] = "", a[128];
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        for (size_t v = 0; v < sizeof fits / sizeof fits[0]; v++) {
            Config c;
            valid_config(&c);
            snprintf(a, sizeof a, "%s=%s", keys[k], fits[v]);
            set_ok(&c, a);
            ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s: %s", a, err);
        }
        Config c;
        valid_config(&c);
        snprintf(a, sizeof a, "%s=2147483648", keys[k]);
        ck_assert_int_eq(config_set(&c, a, err, sizeof err), PP_EUSAGE);
        assert_has(err, "and <= 2147483647, got '2147483648'");
        snprintf(a, sizeof a, "%s=-2147483648", keys[k]);
        ck_assert_int_eq(config_set(&c, a, err, sizeof err), PP_EUSAGE);
        assert_has(err, "expected an integer >= ");
    }
    Config c;
    valid_config(&c);
    c.steps = INT_MAX;
    c.checkpoint_keep = INT_MAX;
    c.timeout_s = INT_MAX - 63;
    c.max_seq_len = INT_MAX;
    c.padded_vocab_size = INT_MAX;
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    c.checkpoint_keep = INT_MIN;
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "output.checkpoint_keep (checkpoints kept on disk; 0 = all) is -2147483648: "
                    "expected an integer >= 0");
    c.checkpoint_keep = -1;
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "is -1: expected an integer >= 0");
    c.checkpoint_keep = 0; /* keeps every checkpoint (docs/checkpoint-format.md) */
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    c.checkpoint_keep = 1;
    c.steps = -1;
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "train.steps");
    assert_has(err, "is -1: expected an integer >= 0");
}
END_TEST

/* ---- did you mean ------------------------------------------------------------------- */

START_TEST(test_did_you_mean) {
    static const char *const cases[][2] = {
        {"train:\n  stepz: 20\n", "'train.steps'"},          /* typo in the last part */
        {"modle:\n  dim: 8\n", "'model'"},                   /* typo in a section */
        {"train:\n  lr: 0.1\n", "'train.optimizer.lr'"},     /* right name, wrong section */
        {"model:\n  layers: 4\n", "'model.n_layers'"},
        {"output:\n  compresion_level: 4\n", "'output.compression_level'"},
        {"steps: 20\n", "'train.steps'"},                    /* top level */
        {"train:\n  optimizer: {nmae: sgd}\n", "'train.optimizer.name'"},
    };
    char err[PP_ERR_MAX] = "", want[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        config_defaults(&c);
        ck_assert_int_eq(load_text(&c, cases[i][0], err, sizeof err), PP_EUSAGE);
        snprintf(want, sizeof want, "(did you mean %s?)", cases[i][1]);
        assert_has(err, want);
    }
    Config c;
    config_defaults(&c);
    ck_assert_int_eq(load_text(&c, "train:\n  quux: 1\n", err, sizeof err), PP_EUSAGE);
    ck_assert_ptr_null(strstr(err, "did you mean"));
    assert_has(err, "unknown key 'train.quux'");
}
END_TEST

/* ---- --set -------------------------------------------------------------------------- */

START_TEST(test_set_overrides) {
    Config c;
    valid_config(&c);
    set_ok(&c, "train.steps=20");
    set_ok(&c, "pipeline.schedule=gpipe");
    set_ok(&c, "pipeline.split=[4, 4]");
    ck_assert_str_eq(c.split, "[4, 4]");
    set_ok(&c, "pipeline.split=[layers.2,'layers.3']");
    ck_assert_str_eq(c.split, "[\"layers.2\", \"layers.3\"]");
    set_ok(&c, "pipeline.split=auto");
    ck_assert_str_eq(c.split, "auto");
    set_ok(&c, "train.optimizer.name=sgd");
    set_ok(&c, "train.optimizer.lr=0.5");
    set_ok(&c, "train.lr_schedule={warmup_steps: 7, decay: linear}");
    set_ok(&c, "train.optimizer={momentum: 0.5, weight_decay: 0}");
    set_ok(&c, "model.init_from=gpt2_124M.bin");
    ck_assert_str_eq(c.init_from, "gpt2_124M.bin");
    set_ok(&c, "model.init_from=null");
    set_ok(&c, "data.val=");
    set_ok(&c, "output.dir=runs/a=b");
    set_ok(&c, "train.seed=42");
    set_ok(&c, "output.trace=true");
    ck_assert_int_eq(c.steps, 20);
    ck_assert_str_eq(c.schedule, "gpipe");
    ck_assert_str_eq(c.optimizer, "sgd");
    ck_assert_float_eq(c.lr, 0.5f);
    ck_assert_int_eq(c.warmup_steps, 7);
    ck_assert_str_eq(c.decay, "linear");
    ck_assert_float_eq(c.momentum, 0.5f);
    ck_assert_float_eq(c.weight_decay, 0.0f);
    ck_assert_str_eq(c.init_from, "");
    ck_assert_str_eq(c.val_path, "");
    ck_assert_str_eq(c.out_dir, "runs/a=b");
    ck_assert_uint_eq(c.seed, 42);
    ck_assert_int_eq(c.trace, 1);
    ck_assert_int_eq(c.vocab_size, 256); /* untouched keys keep their values */

    /* A file read after --set values changes only the keys it names. */
    char err[PP_ERR_MAX] = "";
    ck_assert_int_eq(load_text(&c, "train:\n  steps: 5\n", err, sizeof err), PP_OK);
    ck_assert_int_eq(c.steps, 5);
    ck_assert_str_eq(c.schedule, "gpipe");
}
END_TEST

START_TEST(test_set_errors) {
    static const char *const cases[][2] = {
        {"train.stepz=20", "--set train.stepz=20: unknown key 'train.stepz' (did you mean "
                           "'train.steps'?)"},
        {"train.steps=abc", "--set train.steps=abc: train.steps: expected an integer >= 0, "
                            "got 'abc'"},
        {"train.steps=", "--set train.steps=: train.steps: expected an integer >= 0, got ''"},
        {"train.steps=2.5", "got '2.5'"},
        {"pipeline.split=[4, x]", "--set pipeline.split=[4, x]: pipeline.split: "},
        {"pipeline.split=[4, 4", "--set pipeline.split=[4, 4: YAML syntax error"},
        {"train.optimizer={lr: 0.1, lr: 0.2}", "duplicate key 'train.optimizer.lr'"},
        {"train.optimizer={lrr: 0.1}", "(did you mean 'train.optimizer.lr'?)"},
        {"train.optimizer=sgd", "train.optimizer: expected a mapping of keys, got 'sgd'"},
        {"model.dim=[1]", "model.dim: expected an integer in [1, 536870911], got a list"},
        {"model.dim=536870912", "model.dim: expected an integer in [1, 536870911]"},
        {"model.n_layers=178956971", "model.n_layers: expected an integer in [1, 178956970]"},
        {"model.arch=gpt3", "model.arch: expected one of gpt2, llama, qwen2, mistral, got 'gpt3'"},
        {"model.tie_embeddings=maybe", "model.tie_embeddings: expected auto, true or false"},
        {"model.tie_embeddings=\"true\"", "got '\"true\"' (a quoted string)"},
        {"model.n_kv_heads=-1", "model.n_kv_heads: expected an integer >= 0"},
        {"model.norm_eps=0", "model.norm_eps: expected a number > 0"},
        {"model.rope_scaling.original_max_seq_len=0",
         "model.rope_scaling.original_max_seq_len: expected an integer >= 1"},
        {"train.steps", "--set train.steps: expected KEY=VALUE"},
        {"=3", "--set =3: expected KEY=VALUE"},
    };
    char err[PP_ERR_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c, before;
        valid_config(&c);
        before = c;
        err[0] = '\0';
        ck_assert_msg(config_set(&c, cases[i][0], err, sizeof err) == PP_EUSAGE, "%s accepted",
                      cases[i][0]);
        assert_has(err, cases[i][1]);
        ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "failed --set %s changed the config",
                      cases[i][0]);
    }
}
END_TEST

/* ---- finalize ----------------------------------------------------------------------- */

START_TEST(test_padded_vocab) {
    static const int cases[][3] = {/* vocab, padded in, padded out */
                                   {256, 0, 256}, {129, 0, 256}, {50257, 0, 50304},
                                   {1, 0, 128},   {65536, 0, 65536}, {50257, 50260, 50260},
                                   {128256, 0, 128256}, {2147483520, 0, 2147483520}};
    char err[PP_ERR_MAX], arg[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        valid_config(&c);
        snprintf(arg, sizeof arg, "model.vocab_size=%d", cases[i][0]);
        set_ok(&c, arg);
        snprintf(arg, sizeof arg, "model.padded_vocab_size=%d", cases[i][1]);
        set_ok(&c, arg);
        ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
        ck_assert_int_eq(c.padded_vocab_size, cases[i][2]);
    }
}
END_TEST

/* Each row: overrides (';'-separated) on a valid config, then a phrase of the error. */
static const char *const k_cross[][2] = {
    {"model.dim=66", "model.dim (66) is not a multiple of model.n_heads (4)"},
    {"train.seq_len=65", "train.seq_len (65) exceeds model.max_seq_len (64)"},
    {"pipeline.microbatches=3", "train.batch_size (8) is not a multiple of pipeline.microbatches"},
    {"pipeline.stages=5", "pipeline.stages x pipeline.virtual_stages (5 x 1) exceeds "
                          "model.n_layers (4)"},
    {"pipeline.stages=2;pipeline.virtual_stages=3;pipeline.schedule=interleaved-1f1b",
     "(2 x 3) exceeds model.n_layers (4)"},
    {"model.vocab_size=300;model.padded_vocab_size=256",
     "model.padded_vocab_size (256) is smaller than model.vocab_size (300)"},
    {"pipeline.virtual_stages=2", "needs schedule interleaved-1f1b"},
    {"pipeline.schedule=interleaved-1f1b", "interleaved-1f1b needs pipeline.virtual_stages >= 2"},
    /* the model keys of model.arch (check_arch) */
    {"model.arch=llama", "missing required key model.ffn_dim (the MLP's hidden size, Hugging "
                         "Face's intermediate_size) for model.arch llama"},
    {"model.arch=llama;model.ffn_dim=8;model.n_kv_heads=3",
     "model.n_heads (4) is not a multiple of model.n_kv_heads (3)"},
    {"model.arch=qwen2;model.ffn_dim=8;model.n_kv_heads=8",
     "model.n_heads (4) is not a multiple of model.n_kv_heads (8)"},
    {"model.n_kv_heads=2", "model.n_kv_heads (2): gpt2 has a key/value head per query head "
                           "(model.n_heads 4); set it to 0 or 4"},
    {"model.ffn_dim=100", "model.ffn_dim (100): gpt2's MLP is 4 x model.dim = 256 wide"},
    {"model.norm_eps=1e-6", "model.norm_eps (1e-06): gpt2's LayerNorm has a fixed epsilon"},
    {"model.rope_theta=500000", "model.rope_theta (500000) is llama's: gpt2 has learned positions"},
    {"model.rope_scaling.type=llama3", "model.rope_scaling.type (llama3) is llama's"},
    {"model.arch=llama;model.ffn_dim=8;model.dim=24;model.n_heads=8",
     "model.dim / model.n_heads = 24 / 8 = 3 channels a head, an odd number: RoPE rotates pairs"},
    {"model.arch=llama;model.ffn_dim=8;model.rope_scaling={type: llama3, low_freq_factor: 4}",
     "model.rope_scaling.high_freq_factor (4) must exceed model.rope_scaling.low_freq_factor (4)"},
    {"model.sliding_window=64", "model.sliding_window (64): model.arch gpt2 has no sliding window"},
    {"model.arch=llama;model.ffn_dim=8;model.sliding_window=64",
     "model.sliding_window (64): model.arch llama has no sliding window"},
    {"model.arch=mistral;model.ffn_dim=8;model.sliding_window=32",
     "model.sliding_window (32) is shorter than train.seq_len (64)"},
    {"model.arch=qwen2;model.ffn_dim=8;model.sliding_window=63",
     "model.sliding_window (63) is shorter than train.seq_len (64)"},
};

START_TEST(test_cross_field_errors) {
    char err[PP_ERR_MAX] = "", list[256];
    Config c;
    valid_config(&c);
    snprintf(list, sizeof list, "%s", k_cross[_i][0]);
    for (char *save, *a = strtok_r(list, ";", &save); a; a = strtok_r(NULL, ";", &save))
        set_ok(&c, a);
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, k_cross[_i][1]);
}
END_TEST

START_TEST(test_cross_field_valid_edges) {
    static const char *const ok[] = {
        "pipeline.stages=2;pipeline.virtual_stages=2;pipeline.schedule=interleaved-1f1b",
        "pipeline.stages=4;train.seq_len=64;pipeline.microbatches=8",
        "model.vocab_size=65536;model.dim=4;model.n_heads=4",
        "model.arch=mistral;model.ffn_dim=1;model.sliding_window=64;model.n_kv_heads=1",
        "model.arch=qwen2;model.ffn_dim=8;model.sliding_window=4096;model.norm_eps=1e-6",
        "model.arch=llama;model.ffn_dim=8;model.dim=8;model.rope_theta=500000;"
        "model.rope_scaling={type: llama3, low_freq_factor: 3.9}",
    };
    char err[PP_ERR_MAX] = "", list[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        Config c;
        valid_config(&c);
        snprintf(list, sizeof list, "%s", ok[i]);
        for (char *save, *a = strtok_r(list, ";", &save); a; a = strtok_r(NULL, ";", &save))
            set_ok(&c, a);
        ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s: %s", ok[i], err);
    }
}
END_TEST

/* Values written straight into the struct are checked against the same limits. */
START_TEST(test_finalize_checks_direct_values) {
    char err[PP_ERR_MAX] = "";
    Config c;
    valid_config(&c);
    c.compression_level = 12;
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "output.compression_level");
    assert_has(err, "is 12: expected an integer in [0, 9]");
    valid_config(&c);
    c.lr = 0;
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "train.optimizer.lr");
    assert_has(err, "expected a number > 0");
    valid_config(&c);
    strcpy(c.arch, "gpt3");
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "model.arch");
    assert_has(err, "expected one of gpt2, llama, qwen2, mistral");
    valid_config(&c);
    c.tie_embeddings = 2;
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "model.tie_embeddings");
    assert_has(err, "is 2: expected auto, true or false");
    valid_config(&c);
    for (int over = 1; over <= 127; over += 126) { /* past the limit, up to INT_MAX */
        valid_config(&c);
        c.vocab_size = 2147483520 + over;
        c.padded_vocab_size = 0;
        ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
        assert_has(err, "model.vocab_size");
        assert_has(err, "[1, 2147483520]");
    }
}
END_TEST

/* ---- path patterns ([Note: path patterns] in src/pathpat.c) ------------------------------ */

/* Every path key expands %j, %A, %a (with a width), %%, ${NAME} and $$ from the
 * environment, once, in config_finalize; the printed config reads back to the same
 * expanded paths. Each test is its own fork: setenv stays in it. */
START_TEST(test_path_patterns_expand) {
    char err[PP_ERR_MAX] = "";
    Config c;
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_ARRAY_JOB_ID", "4240", 1);
    setenv("SLURM_ARRAY_TASK_ID", "7", 1);
    setenv("PP_TEST_DIR", "/scratch/me", 1);
    valid_config(&c);
    set_ok(&c, "output.dir=runs/arr-%A_%a-%j");
    set_ok(&c, "data.train=${PP_TEST_DIR}/train-%3a.bin");
    set_ok(&c, "data.val=100%%-$$x");
    set_ok(&c, "model.init_from=${PP_TEST_DIR}/gpt2.bin");
    set_ok(&c, "pipeline.schedule_file=plans/%j.txt");
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_str_eq(c.out_dir, "runs/arr-4240_7-4242");
    ck_assert_str_eq(c.train_path, "/scratch/me/train-007.bin");
    ck_assert_str_eq(c.val_path, "100%-$x");
    ck_assert_str_eq(c.init_from, "/scratch/me/gpt2.bin");
    ck_assert_str_eq(c.schedule_file, "plans/4242.txt");
    assert_round_trip(&c, "expanded paths"); /* the literal % and $ of data.val too */
    valid_config(&c);
    set_ok(&c, "output.dir=r/%12j"); /* sbatch pads to at most 10 */
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_str_eq(c.out_dir, "r/0000004242");
}
END_TEST

/* An unset or empty variable, an unknown pattern and a result too long are errors that
 * name the key, the pattern and the variable: never an empty string or a literal "%a". */
static const char *const k_pattern_errors[][2] = {
    {"output.dir=runs/%j",
     "output.dir 'runs/%j': %j (the environment variable SLURM_JOB_ID) is not set"},
    {"output.dir=runs/%A", "%A (the environment variable SLURM_ARRAY_JOB_ID) is not set"},
    {"output.dir=runs/arr-%a",
     "output.dir 'runs/arr-%a': %a (the environment variable SLURM_ARRAY_TASK_ID) is not set"},
    {"data.train=${PP_TEST_UNSET}/t.bin",
     "data.train '${PP_TEST_UNSET}/t.bin': ${PP_TEST_UNSET} (the environment variable "
     "PP_TEST_UNSET) is not set"},
    {"data.val=${PP_TEST_EMPTY}",
     "${PP_TEST_EMPTY} (the environment variable PP_TEST_EMPTY) is empty"},
    {"model.init_from=\"%x.bin\"",
     "model.init_from '%x.bin': '%x' is not a pattern pptrain expands"},
    {"output.dir=runs/%", "'%' is not a pattern pptrain expands"},
    {"output.dir=runs/%3%", "'%3%' is not a pattern pptrain expands"},
    {"output.dir=runs/%123a", "'%123a' is not a pattern pptrain expands"},
    {"pipeline.schedule_file=$HOME/p.txt",
     "'$HOME' is not a pattern pptrain expands: write an environment variable as ${NAME}"},
    {"output.dir=runs/${1x}", "'${1x}' is not a pattern"},
    {"output.dir=runs/${X", "'${X' is not a pattern"},
    {"output.dir=${PP_TEST_LONG}",
     "output.dir '${PP_TEST_LONG}': it expands to more than 1023 bytes"},
};

START_TEST(test_path_pattern_errors) {
    char err[PP_ERR_MAX] = "", long_value[1100];
    memset(long_value, 'a', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_ARRAY_JOB_ID");
    unsetenv("SLURM_ARRAY_TASK_ID");
    unsetenv("PP_TEST_UNSET");
    setenv("PP_TEST_EMPTY", "", 1);
    setenv("PP_TEST_LONG", long_value, 1);
    Config c;
    valid_config(&c);
    set_ok(&c, k_pattern_errors[_i][0]);
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_EUSAGE, "%s accepted",
                  k_pattern_errors[_i][0]);
    assert_has(err, k_pattern_errors[_i][1]);
}
END_TEST

/* ---- hash and first_diff --------------------------------------------------------------- */

/* ---- lists of data files ([Note: data lists] in src/config.c) -------------------------- */

/* The paths of a list field, joined by '|'. */
static const char *list_text(const char *list) {
    static char buf[4 * PP_PATH_MAX];
    size_t len = 0;
    for (const char *p = list; p && *p; p = config_list_next(p))
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? "|" : "", p);
    buf[len] = '\0';
    return buf;
}

/* data.train and data.val take a path or a list of paths (block or flow, file or --set):
 * stored '\0'-separated, one path being the plain string; printed as a flow list that
 * reads back bit for bit; each path's patterns expanded. */
START_TEST(test_data_lists) {
    char err[PP_ERR_MAX] = "", *text = NULL;
    size_t len = 0;
    Config c;
    valid_config(&c);
    ck_assert_int_eq(load_text(&c, "data:\n  train:\n    - d/a.bin\n    - \"d/b_*.bin\"\n  val: "
                                   "[v1.bin, v 2.bin]\n", err, sizeof err), PP_OK);
    ck_assert_str_eq(list_text(c.train_path), "d/a.bin|d/b_*.bin");
    ck_assert_str_eq(list_text(c.val_path), "v1.bin|v 2.bin");
    ck_assert_int_eq(config_given(&c, "data.train"), 1);
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    FILE *f = open_memstream(&text, &len);
    config_print(&c, f);
    fclose(f);
    assert_has(text, "\n  train: [d/a.bin, \"d/b_*.bin\"]\n");
    assert_has(text, "\n  val: [v1.bin, \"v 2.bin\"]\n");
    free(text);
    assert_round_trip(&c, "lists");
    /* --set: a flow list, or a path again (the list is gone, nothing of it left behind) */
    valid_config(&c);
    set_ok(&c, "data.train=[x.bin, y.bin, z.bin]");
    ck_assert_str_eq(list_text(c.train_path), "x.bin|y.bin|z.bin");
    set_ok(&c, "data.train=w.bin");
    ck_assert_str_eq(list_text(c.train_path), "w.bin");
    Config plain;
    valid_config(&plain);
    set_ok(&plain, "data.train=w.bin");
    ck_assert_int_eq(memcmp(&c, &plain, offsetof(Config, given)), 0);
    /* a list of one is the path itself */
    set_ok(&c, "data.train=[w.bin]");
    ck_assert_int_eq(memcmp(&c, &plain, offsetof(Config, given)), 0);
    /* each path's patterns are expanded */
    setenv("PP_TEST_DIR", "/scratch/me", 1);
    set_ok(&c, "data.train=[\"${PP_TEST_DIR}/a.bin\", \"b-$$.bin\"]");
    ck_assert_msg(config_finalize(&c, err, sizeof err) == PP_OK, "%s", err);
    ck_assert_str_eq(list_text(c.train_path), "/scratch/me/a.bin|b-$.bin");
    assert_round_trip(&c, "expanded list");
}
END_TEST

START_TEST(test_data_list_errors) {
    static const char *const bad[][2] = {
        {"data.train=[]", "data.train: expected a path or a non-empty list of paths, got an "
                          "empty list"},
        {"data.val=[]", "got an empty list (null: none)"},
        {"data.train=[a.bin, null]", "expected a non-empty path of at most 1023 bytes as list "
                                     "entry, got 'null'"},
        {"data.train=[a.bin, \"\"]", "as list entry"},
        {"data.train=[a.bin, [b.bin]]", "as list entry, got a list"},
        {"data.train=[a.bin, {b: c}]", "as list entry, got a mapping"},
        {"data.train=[!!int 4]", "as list entry"},
        {"data.train=null", "expected a non-empty path of at most 1023 bytes (a file or a glob), "
                            "or a list of them"},
        {"data.train=*.bin", "a value that starts with * (a glob) must be quoted: \"*.bin\""},
        {"data.train=*bin", "YAML aliases (*bin) are not supported in configs (a value that "
                            "starts with *, a glob, must be quoted"},
    };
    char err[PP_ERR_MAX];
    Config c, before;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        valid_config(&c);
        set_ok(&c, "data.train=[keep.bin, this.bin]");
        before = c;
        ck_assert_int_eq(config_set(&c, bad[i][0], err, sizeof err), PP_EUSAGE);
        assert_has(err, bad[i][1]);
        ck_assert_int_eq(memcmp(&c, &before, sizeof c), 0); /* unchanged */
    }
    /* a path of PP_PATH_MAX bytes, in a list or alone, and a list past the field */
    static char a[2 * PP_DATA_LIST_MAX], p[PP_PATH_MAX + 1];
    memset(p, 'p', PP_PATH_MAX);
    snprintf(a, sizeof a, "data:\n  train: [x.bin, %s]\n", p);
    valid_config(&c);
    ck_assert_int_eq(load_text(&c, a, err, sizeof err), PP_EUSAGE);
    assert_has(err, "data.train: expected a non-empty path of at most 1023 bytes as list entry");
    snprintf(a, sizeof a, "data:\n  train: %s\n", p);
    ck_assert_int_eq(load_text(&c, a, err, sizeof err), PP_EUSAGE);
    assert_has(err, "data.train: expected a non-empty path of at most 1023 bytes");
    int n = snprintf(a, sizeof a, "data:\n  train: [");
    for (int k = 0; n + 1100 < (int)sizeof a; k++)
        n += snprintf(a + n, sizeof a - n, "%0999d, ", k);
    snprintf(a + n, sizeof a - n, "z]\n");
    ck_assert_int_eq(load_text(&c, a, err, sizeof err), PP_EUSAGE);
    assert_has(err, "data.train: the list is too long");
    ck_assert_str_eq(c.train_path, "data/tiny/train.bin"); /* unchanged */
}
END_TEST

/* model.bos_token_id / eos_token_id: null, an id or a list, canonical text that prints and
 * reads back; config_ids parses it; ids past the vocabulary and bad entries refused, the
 * config unchanged; the model hash leaves them out (a checkpoint resumes with other ids,
 * and one of a build before the keys still does). */
START_TEST(test_token_ids) {
    char err[PP_ERR_MAX] = "", *text = NULL;
    size_t len = 0;
    Config c, d;
    int ids[4];
    valid_config(&c);
    ck_assert_str_eq(c.bos_token_id, "");
    ck_assert_int_eq(config_ids(c.bos_token_id, ids, 4), 0);
    ck_assert_int_eq(load_text(&c, "model:\n  bos_token_id: 7\n  eos_token_id:\n    - 255\n"
                                   "    - 0\n    - +3\n", err, sizeof err), PP_OK);
    ck_assert_str_eq(c.bos_token_id, "7");
    ck_assert_str_eq(c.eos_token_id, "[255, 0, 3]");
    ck_assert_int_eq(config_ids(c.eos_token_id, ids, 4), 3);
    ck_assert(ids[0] == 255 && ids[1] == 0 && ids[2] == 3);
    ck_assert_int_eq(config_ids(c.eos_token_id, ids, 2), 2); /* at most max */
    ck_assert_int_eq(config_ids(c.bos_token_id, ids, 4), 1);
    ck_assert_int_eq(ids[0], 7);
    ck_assert_int_eq(config_ids("[1, x]", ids, 4), -1);
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_OK);
    FILE *f = open_memstream(&text, &len);
    config_print(&c, f);
    fclose(f);
    assert_has(text, "  bos_token_id: 7\n  eos_token_id: [255, 0, 3]\n");
    config_defaults(&d);
    ck_assert_int_eq(load_text(&d, text, err, sizeof err), PP_OK);
    free(text);
    ck_assert_str_eq(d.eos_token_id, c.eos_token_id);
    set_ok(&c, "model.eos_token_id=null");
    ck_assert_str_eq(c.eos_token_id, "");

    static const char *const bad[][2] = {
        {"model.eos_token_id=-1", "expected null, a token id >= 0 or a list of them"},
        {"model.eos_token_id=\"2\"", "expected null, a token id >= 0"},
        {"model.eos_token_id=[]", "expected a token id or a non-empty list of them, got an "
                                  "empty list (null: none)"},
        {"model.eos_token_id=[1, null]", "a token id >= 0 as list entry, got 'null'"},
        {"model.eos_token_id=[1, [2]]", "as list entry, got a list"},
        {"model.bos_token_id=2.5", "expected null, a token id >= 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        valid_config(&c);
        set_ok(&c, "model.eos_token_id=[4, 5]");
        Config before = c;
        ck_assert_int_eq(config_set(&c, bad[i][0], err, sizeof err), PP_EUSAGE);
        assert_has(err, bad[i][1]);
        ck_assert_int_eq(memcmp(&c, &before, sizeof c), 0);
    }
    valid_config(&c);
    set_ok(&c, "model.eos_token_id=[255, 256]"); /* vocab_size 256 */
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_EUSAGE);
    assert_has(err, "model.eos_token_id: [255, 256] holds id 256, past the vocabulary "
                    "(model.vocab_size 256)");

    valid_config(&c);
    valid_config(&d);
    set_ok(&d, "model.bos_token_id=1");
    set_ok(&d, "model.eos_token_id=[2, 3]");
    ck_assert_int_eq(config_finalize(&c, err, sizeof err), PP_OK);
    ck_assert_int_eq(config_finalize(&d, err, sizeof err), PP_OK);
    ck_assert_uint_eq(config_hash(&c, 1), config_hash(&d, 1)); /* the model: the same */
    ck_assert_uint_ne(config_hash(&c, 0), config_hash(&d, 0)); /* the config: not */
}
END_TEST

START_TEST(test_hash) {
    char err[PP_ERR_MAX] = "";
    Config a, b;
    valid_config(&a);
    config_defaults(&b); /* the same config reached through --set instead of a file */
    const char *sets[] = {"model.vocab_size=256", "model.max_seq_len=64", "model.n_layers=4",
                          "model.n_heads=4", "model.dim=64"};
    for (int i = 0; i < 5; i++) set_ok(&b, sets[i]);
    ck_assert_int_eq(config_finalize(&a, err, sizeof err), PP_OK);
    ck_assert_int_eq(config_finalize(&b, err, sizeof err), PP_OK);
    ck_assert_uint_eq(config_hash(&a, 0), config_hash(&b, 0));
    ck_assert_uint_eq(config_hash(&a, 1), config_hash(&b, 1));
    ck_assert_uint_ne(config_hash(&a, 0), config_hash(&a, 1));

    set_ok(&b, "train.steps=101"); /* not a model key: only the full hash changes */
    ck_assert_uint_ne(config_hash(&a, 0), config_hash(&b, 0));
    ck_assert_uint_eq(config_hash(&a, 1), config_hash(&b, 1));
    set_ok(&b, "train.steps=100");
    ck_assert_uint_eq(config_hash(&a, 0), config_hash(&b, 0));
    set_ok(&b, "model.init_std=0.021");
    ck_assert_uint_ne(config_hash(&a, 1), config_hash(&b, 1));
    ck_assert_uint_ne(config_hash(&a, 0), config_hash(&b, 0));
}
END_TEST

START_TEST(test_first_diff) {
    Config a, b;
    valid_config(&a);
    b = a;
    ck_assert_ptr_null(config_first_diff(&a, &b));
    set_ok(&b, "train.optimizer.lr=0.001");
    ck_assert_str_eq(config_first_diff(&a, &b), "train.optimizer.lr");
    set_ok(&b, "pipeline.split=[2, 2]");
    ck_assert_str_eq(config_first_diff(&a, &b), "pipeline.split");
    set_ok(&b, "model.n_heads=2");
    ck_assert_str_eq(config_first_diff(&a, &b), "model.n_heads");
    b = a;
    set_ok(&b, "runtime.timeout_s=5");
    ck_assert_str_eq(config_first_diff(&a, &b), "runtime.timeout_s");
    b = a;
    set_ok(&b, "train.seed=1338");
    ck_assert_str_eq(config_first_diff(&b, &a), "train.seed");
}
END_TEST

/* ---- docs ------------------------------------------------------------------------------ */

/* Every key config_print writes is documented in docs/config.md as `dotted.key`. */
START_TEST(test_docs_cover_every_key) {
    FILE *f = fopen("docs/config.md", "r");
    ck_assert_msg(f != NULL, "docs/config.md not found (run from the repository root)");
    static char docs[1 << 16];
    size_t n = fread(docs, 1, sizeof docs - 1, f);
    fclose(f);
    docs[n] = '\0';

    Config c;
    char *text = NULL, path[3][64], want[160];
    size_t len = 0, keys = 0;
    valid_config(&c);
    FILE *m = open_memstream(&text, &len);
    config_print(&c, m);
    fclose(m);
    for (char *save, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        int depth = (int)(strspn(line, " ") / 2);
        ck_assert_int_lt(depth, 3);
        char *name = line + 2 * depth, *colon = strchr(name, ':');
        snprintf(path[depth], sizeof path[depth], "%.*s", (int)(colon - name), name);
        if (colon[1] == '\0') continue; /* a section header */
        int k = snprintf(want, sizeof want, "`");
        for (int d = 0; d <= depth; d++)
            k += snprintf(want + k, sizeof want - k, "%s%s", d ? "." : "", path[d]);
        snprintf(want + k, sizeof want - k, "`");
        ck_assert_msg(strstr(docs, want), "docs/config.md does not document %s", want);
        keys++;
    }
    ck_assert_uint_eq(keys, 68);
    free(text);
}
END_TEST

/* Which keys the file and --set gave (config_given), apart from defaults and from values
 * set in the struct: what model.init_from's config.json may fill. */
START_TEST(test_given) {
    Config c;
    char err[PP_ERR_MAX];
    config_defaults(&c);
    ck_assert(!config_given(&c, "model.dim") && !config_given(&c, "model.tie_embeddings"));
    ck_assert_int_eq(load_text(&c,
                               "model:\n  dim: 64\n  tie_embeddings: true\npipeline:\n"
                               "  split: [1, 1]\n",
                               err, sizeof err),
                     PP_OK);
    ck_assert(config_given(&c, "model.dim") && config_given(&c, "model.tie_embeddings"));
    ck_assert(config_given(&c, "pipeline.split")); /* a flow sequence */
    ck_assert(!config_given(&c, "model.n_layers") && !config_given(&c, "train.steps"));
    set_ok(&c, "model.n_layers=4");
    ck_assert(config_given(&c, "model.n_layers"));
    c.n_heads = 4; /* set in the struct: not given */
    ck_assert(!config_given(&c, "model.n_heads"));
    /* a failed --set or file changes nothing, the marks included */
    ck_assert_int_ne(config_set(&c, "train.steps=x", err, sizeof err), PP_OK);
    ck_assert_int_ne(load_text(&c, "train:\n  seed: 1\n  steps: x\n", err, sizeof err), PP_OK);
    ck_assert(!config_given(&c, "train.steps") && !config_given(&c, "train.seed"));
    /* the marks are not a setting: printing and hashing ignore them */
    Config d = c;
    memset(d.given, 0, sizeof d.given);
    ck_assert_ptr_null(config_first_diff(&c, &d));
    ck_assert_uint_eq(config_hash(&c, 0), config_hash(&d, 0));
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_required_keys);
    tcase_add_test(tc, test_shipped_configs_load);
    tcase_add_test(tc, test_model_keys_resolved);
    tcase_add_test(tc, test_rope_scaling);
    tcase_add_test(tc, test_round_trip_shipped);
    tcase_add_test(tc, test_round_trip_tricky);
    tcase_add_test(tc, test_print_layout);
    tcase_add_test(tc, test_print_quotes_what_looks_typed);
    tcase_add_loop_test(tc, test_file_errors, 0, sizeof k_file_errors / sizeof k_file_errors[0]);
    tcase_add_test(tc, test_top_level_not_mapping);
    tcase_add_test(tc, test_data_lists);
    tcase_add_test(tc, test_data_list_errors);
    tcase_add_test(tc, test_missing_and_unreadable_files);
    tcase_add_test(tc, test_config_not_a_regular_file);
    tcase_add_test(tc, test_tags_that_fit);
    tcase_add_test(tc, test_int_limits_at_the_edges);
    tcase_add_test(tc, test_did_you_mean);
    tcase_add_test(tc, test_set_overrides);
    tcase_add_test(tc, test_set_errors);
    tcase_add_test(tc, test_padded_vocab);
    tcase_add_loop_test(tc, test_cross_field_errors, 0, sizeof k_cross / sizeof k_cross[0]);
    tcase_add_test(tc, test_cross_field_valid_edges);
    tcase_add_test(tc, test_finalize_checks_direct_values);
    tcase_add_test(tc, test_path_patterns_expand);
    tcase_add_loop_test(tc, test_path_pattern_errors, 0,
                        sizeof k_pattern_errors / sizeof k_pattern_errors[0]);
    tcase_add_test(tc, test_hash);
    tcase_add_test(tc, test_token_ids);
    tcase_add_test(tc, test_first_diff);
    tcase_add_test(tc, test_docs_cover_every_key);
    tcase_add_test(tc, test_given);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return check_run(config_suite(), 0);
}
