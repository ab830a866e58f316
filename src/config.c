/* config.c — the run configuration: one field table drives defaults, YAML parsing
 * (libyaml's event API), --set overrides, validation, printing and hashing. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "pathpat.h"
#include "sched/sched.h"

/* ------------------------------------------------------------------------------------
 * The field table
 * ---------------------------------------------------------------------------------- */

typedef enum {
    T_INT,    /* int, limits lo..hi inclusive */
    T_U64,    /* uint64_t, any value */
    T_FLOAT,  /* float, limits lo..hi; OPEN_LO / OPEN_HI exclude the limit itself */
    T_BOOL,   /* int 0/1 from true/false (also yes/no, on/off) */
    T_STRING, /* char[size], a non-empty path ([Note: path patterns] expand it) */
    T_PATH,   /* char[size], a path; YAML null (or no value) stores "" */
    T_ENUM,   /* char[size], one of `choices` */
    T_SPLIT,  /* char[size]: "auto", "[4, 4]" or "[\"layers.4\"]" (see split_entry) */
    T_AUTO,   /* int: "auto" stores 0, else an integer in lo..hi (lo >= 1) */
    T_TRI,    /* int: "auto" stores -1, else 0/1 as T_BOOL (config_finalize resolves auto) */
    T_TEXT,   /* char[size], non-empty text, not a path (no pattern expansion) */
    T_IDS,    /* char[size]: token ids: "" (null), "2" or "[1, 2]" (see id_entry) */
} FieldType;

enum { OPEN_LO = 1, OPEN_HI = 2 };

typedef struct {
    const char *key;     /* dotted name, e.g. "train.optimizer.lr" */
    FieldType type;
    size_t off, size;    /* where the value lives in Config, and its size in bytes */
    const char *def;     /* default as YAML text; NULL = required, no default */
    double lo, hi;       /* T_INT / T_FLOAT limits */
    unsigned open;       /* OPEN_LO | OPEN_HI for T_FLOAT */
    const char *choices; /* T_ENUM: allowed values separated by '|' */
    const char *help;    /* one line: what the key means */
    int list;            /* T_STRING / T_PATH: a list of paths too ([Note: data lists]) */
} Field;

#define AT(m) offsetof(Config, m), sizeof(((Config *)0)->m)
#define INT(k, m, d, lo, hi, h) {k, T_INT, AT(m), d, lo, hi, 0, NULL, h, 0}
#define FLT(k, m, d, lo, hi, o, h) {k, T_FLOAT, AT(m), d, lo, hi, o, NULL, h, 0}
#define ENUM(k, m, d, ch, h) {k, T_ENUM, AT(m), d, 0, 0, 0, ch, h, 0}
#define OTHER(k, t, m, d, h) {k, t, AT(m), d, 0, 0, 0, NULL, h, 0}
#define LIST(k, t, m, d, h) {k, t, AT(m), d, 0, 0, 0, NULL, h, 1}
#define IMAX INT_MAX

/* Order = DESIGN.md §3 = the order config_print writes and config_first_diff scans.
 * n_layers and dim stop where the model's int sizes would overflow (12 L + 6 tensors,
 * fcw's 4 C rows): model_dims_check's limits. vocab_size stops where rounding it up to a
 * multiple of 128 (padded_vocab_size 0) would: every id below it is an int, as batches
 * hold them, and fits a uint32 token file; Vp*C sizes are size_t.
 *
 * The model keys after dim are the llama family's (model/llama.c): which of them an arch
 * has, and what gpt2 requires of them, is check_arch's. model.arch names Hugging Face's
 * model_type: llama, and qwen2 (llama's block with q/k/v biases) and mistral (llama's
 * block; its sliding window must cover the sequence) as the same block. rope_scaling is
 * a section whose null (`rope_scaling: null`) means no scaling (section_reset). */
static const Field k_fields[] = {
    ENUM("model.arch", arch, "gpt2", "gpt2|llama|qwen2|mistral",
         "decoder block family (GPT-2's, or Llama's block and its qwen2 / mistral variants)"),
    INT("model.vocab_size", vocab_size, NULL, 1, IMAX - 127,
        "vocabulary size V; token files hold uint16 ids (V <= 65536) or uint32 ids"),
    INT("model.padded_vocab_size", padded_vocab_size, "0", 0, IMAX,
        "Vp, rows of the embedding table; 0 = V rounded up to a multiple of 128"),
    INT("model.max_seq_len", max_seq_len, NULL, 1, IMAX,
        "maxT, the longest sequence (gpt2: rows of the position table)"),
    INT("model.n_layers", n_layers, NULL, 1, (IMAX - 6) / 12, "L, decoder blocks"),
    INT("model.n_heads", n_heads, NULL, 1, IMAX, "NH, attention heads per block"),
    INT("model.dim", dim, NULL, 1, IMAX / 4, "C, channels; a multiple of n_heads"),
    INT("model.n_kv_heads", n_kv_heads, "0", 0, IMAX,
        "NKV, key/value heads (grouped-query attention); 0 = n_heads"),
    INT("model.ffn_dim", ffn_dim, "0", 0, IMAX, "F, the MLP's hidden size; 0 = 4 dim (gpt2)"),
    FLT("model.norm_eps", norm_eps, "1.0e-5", 0, INFINITY, OPEN_LO,
        "epsilon of the norms (RMSNorm; gpt2's LayerNorm: 1e-5 only)"),
    FLT("model.rope_theta", rope_theta, "10000.0", 0, INFINITY, OPEN_LO, "RoPE's base (llama)"),
    ENUM("model.rope_scaling.type", rope_scaling, "none", "none|llama3",
         "RoPE frequency scaling (llama); rope_scaling: null = none"),
    FLT("model.rope_scaling.factor", rope_factor, "8.0", 0, INFINITY, OPEN_LO,
        "llama3: the low frequencies' divisor"),
    FLT("model.rope_scaling.low_freq_factor", rope_low_freq_factor, "1.0", 0, INFINITY, OPEN_LO,
        "llama3: wavelengths over original_max_seq_len / this are divided by factor"),
    FLT("model.rope_scaling.high_freq_factor", rope_high_freq_factor, "4.0", 0, INFINITY, OPEN_LO,
        "llama3: wavelengths under original_max_seq_len / this are kept"),
    INT("model.rope_scaling.original_max_seq_len", rope_original_max_seq_len, "8192", 1, IMAX,
        "llama3: the context length the model was trained at before scaling"),
    INT("model.sliding_window", sliding_window, "0", 0, IMAX,
        "mistral, qwen2: the attention window; 0 = none, else at least train.seq_len"),
    OTHER("model.tie_embeddings", T_TRI, tie_embeddings, "auto",
          "lm_head shares wte; auto = true for gpt2, false for the llama family"),
    OTHER("model.init_from", T_PATH, init_from, "null",
          "weights to start from: an llm.c fp32 GPT-2 file or a Hugging Face model directory"),
    FLT("model.init_std", init_std, "0.02", 0, INFINITY, OPEN_LO, "std of the random init"),
    OTHER("model.bos_token_id", T_IDS, bos_token_id, "null",
          "the id a document starts with (config.json's; an export writes it); null = none"),
    OTHER("model.eos_token_id", T_IDS, eos_token_id, "null",
          "the id or ids that end a text (sample stops there; an export writes them)"),
    INT("pipeline.stages", stages, "1", 1, IMAX, "P, pipeline ranks (= processes launched)"),
    INT("pipeline.virtual_stages", virtual_stages, "1", 1, IMAX, "model chunks per rank"),
    {"pipeline.data_parallel", T_AUTO, AT(data_parallel), "auto", 1, IMAX, 0, NULL,
     "D, data-parallel replicas of the pipeline; auto = processes / pipeline.stages", 0},
    ENUM("pipeline.schedule", schedule, "1f1b", SCHED_KIND_CHOICES, "the schedule"),
    OTHER("pipeline.schedule_file", T_PATH, schedule_file, "null",
          "a schedule as text, one line of actions per rank"),
    INT("pipeline.microbatches", microbatches, "4", 1, IMAX, "M, microbatches per step"),
    OTHER("pipeline.split", T_SPLIT, split, "auto", "how layers are divided into chunks"),
    ENUM("pipeline.balance", balance, "time", "time|parameters|memory",
         "the cost split: auto balances (estimated time, parameter count, activation memory)"),
    ENUM("pipeline.recompute", recompute, "none", "none|selective|full",
         "activations recomputed in backward instead of kept (docs/config.md)"),
    INT("pipeline.recompute_layers", recompute_layers, "0", 0, IMAX,
        "layers of each chunk that recompute, the first ones; 0 = every layer"),
    INT("train.batch_size", batch_size, "8", 1, IMAX, "B, sequences per optimizer step (global)"),
    INT("train.seq_len", seq_len, "64", 1, IMAX, "T, tokens per sequence"),
    INT("train.steps", steps, "100", 0, IMAX,
        "optimizer steps of the run (0: build, load init_from, save a checkpoint)"),
    OTHER("train.seed", T_U64, seed, "1337", "seed of the random init"),
    FLT("train.grad_clip", grad_clip, "1.0", 0, INFINITY, 0, "max global grad L2 norm; 0 = off"),
    ENUM("train.optimizer.name", optimizer, "adamw", "adamw|sgd", "the optimizer"),
    FLT("train.optimizer.lr", lr, "3.0e-4", 0, INFINITY, OPEN_LO, "peak learning rate"),
    FLT("train.optimizer.beta1", beta1, "0.9", 0, 1, OPEN_HI, "AdamW first-moment decay"),
    FLT("train.optimizer.beta2", beta2, "0.95", 0, 1, OPEN_HI, "AdamW second-moment decay"),
    FLT("train.optimizer.eps", eps, "1.0e-8", 0, INFINITY, OPEN_LO, "AdamW denominator epsilon"),
    FLT("train.optimizer.weight_decay", weight_decay, "0.1", 0, INFINITY, 0,
        "decoupled weight decay of the 2-D weights"),
    FLT("train.optimizer.momentum", momentum, "0.9", 0, 1, OPEN_HI, "SGD momentum"),
    OTHER("train.optimizer.shard", T_BOOL, optimizer_shard, "false",
          "ZeRO-1: each data-parallel replica keeps the optimizer state of 1/D of the parameters"),
    INT("train.lr_schedule.warmup_steps", warmup_steps, "0", 0, IMAX, "linear warmup steps"),
    ENUM("train.lr_schedule.decay", decay, "cosine", "constant|linear|cosine",
         "decay after warmup"),
    FLT("train.lr_schedule.min_lr_ratio", min_lr_ratio, "0.1", 0, 1, 0, "final lr / peak lr"),
    INT("train.sample_every", sample_every, "0", 0, IMAX,
        "a sample at each checkpoint this many steps after the last sample; 0 = none"),
    OTHER("train.sample_prompt", T_TEXT, sample_prompt, "The",
          "the prompt of train.sample_every's samples"),
    LIST("data.train", T_STRING, train_path, "data/tiny/train.bin",
         "training token file(s): a file, a glob or a list of them, read in order"),
    LIST("data.val", T_PATH, val_path, "null",
         "validation token file(s): a file, a glob or a list of them, read in order"),
    INT("data.val_every", val_every, "0", 0, IMAX, "steps between validations; 0 = never"),
    INT("data.val_batches", val_batches, "4", 1, IMAX, "batches per validation pass"),
    OTHER("output.dir", T_STRING, out_dir, "runs/gpt-tiny", "directory of all outputs"),
    INT("output.log_every", log_every, "1", 1, IMAX, "steps between progress lines"),
    INT("output.checkpoint_every", checkpoint_every, "0", 0, IMAX,
        "steps between checkpoints; 0 = at the end and on SIGTERM/SIGUSR1 only"),
    INT("output.checkpoint_keep", checkpoint_keep, "2", 0, IMAX,
        "checkpoints kept on disk; 0 = all"),
    OTHER("output.checkpoint_final", T_BOOL, checkpoint_final, "true",
          "save a checkpoint at the end of the run"),
    INT("output.compression_level", compression_level, "6", 0, 9, "zlib level of checkpoints"),
    OTHER("output.trace", T_BOOL, trace, "false", "write trace.json"),
    OTHER("output.tensorboard", T_BOOL, tensorboard, "false",
          "write TensorBoard scalars under output.dir/tb/"),
    INT("output.flight_records", flight_records, "256", 0, 1000000,
        "actions and transfers each rank's flight recorder keeps; 0 = off"),
    ENUM("runtime.device", device, "auto", "auto|cpu|cuda",
         "where the model runs; auto = a GPU when one is visible, else the CPU"),
    ENUM("runtime.precision", precision, "auto", "auto|fp32|tf32|bf16",
         "matmul precision; auto = bf16 on cuda, fp32 on cpu"),
    ENUM("runtime.transport", transport, "auto", "auto|socket|nccl", "point-to-point transport"),
    INT("runtime.threads", threads, "0", 0, IMAX, "CPU threads per rank; 0 = cores / local ranks"),
    INT("runtime.timeout_s", timeout_s, "300", 1, IMAX, "seconds a silent peer is tolerated"),
};
#define N_FIELDS (sizeof k_fields / sizeof k_fields[0])
_Static_assert(N_FIELDS <= PP_CONFIG_KEYS, "Config.given has a mark per key: raise PP_CONFIG_KEYS");

/* The mappings that group the fields. */
static const char *const k_sections[] =
    {"model",           "model.rope_scaling", "pipeline", "train",
     "train.optimizer", "train.lr_schedule",  "data",     "output",
     "runtime"};
#define N_SECTIONS (sizeof k_sections / sizeof k_sections[0])

#define CONFIG_MAX_BYTES (1u << 20) /* a config file is small; /dev/zero is not one */
#define KEY_MAX 96   /* longest dotted key a user can write that we look at */
#define WANT_MAX 256 /* "what was expected" text */

static const Field *field_find(const char *key) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(k_fields[i].key, key) == 0) return &k_fields[i];
    return NULL;
}

/* The table's own spelling of a field or section key (stable pointer), or NULL. */
static const char *key_canonical(const char *key) {
    const Field *f = field_find(key);
    if (f) return f->key;
    for (size_t i = 0; i < N_SECTIONS; i++)
        if (strcmp(k_sections[i], key) == 0) return k_sections[i];
    return NULL;
}

static const char *last_component(const char *key) {
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

static void *field_ptr(const Field *f, const Config *c) { return (char *)c + f->off; }

/* ------------------------------------------------------------------------------------
 * Scalars: parse, check, describe, format
 * ---------------------------------------------------------------------------------- */

static int is_null(const char *s) {
    return !*s || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL") ||
           !strcmp(s, "~");
}

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

/* Digits without a leading zero ("0" itself is fine): YAML 1.1 reads 010 as octal 8, so
 * a config that says 010 is ambiguous and refused rather than read as 10. */
static int decimal_digits(const char *s) { return all_digits(s) && (s[0] != '0' || !s[1]); }

static int in_limits(const Field *f, double v) {
    int lo_ok = (f->open & OPEN_LO) ? v > f->lo : v >= f->lo;
    int hi_ok = (f->open & OPEN_HI) ? v < f->hi : v <= f->hi;
    return lo_ok && hi_ok;
}

/* A decimal integer: optional sign, digits only (no 1e3, 0x10, 2.0). */
static int parse_int(const Field *f, const char *s, int *out) {
    const char *digits = s + (*s == '+' || *s == '-');
    if (!decimal_digits(digits)) return 0;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno || v < INT_MIN || v > INT_MAX || !in_limits(f, (double)v)) return 0;
    *out = (int)v;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!decimal_digits(s)) return 0;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* A finite decimal number that fits a float: 0.02, 3.0e-4, 1, -5 (no inf, nan, hex, and
 * no leading zero before another digit: 010 is octal 8 to YAML 1.1, 10 to YAML 1.2). */
static int parse_float(const Field *f, const char *s, float *out) {
    const char *m = s + (*s == '+' || *s == '-');
    if (!*s || strspn(s, "0123456789+-.eE") != strlen(s) || !strpbrk(s, "0123456789") ||
        (m[0] == '0' && isdigit((unsigned char)m[1])))
        return 0;
    char *end;
    float v = strtof(s, &end);
    if (*end || !isfinite(v) || !in_limits(f, v)) return 0;
    *out = v;
    return 1;
}

/* YAML 1.1's booleans as written there: all lower case, capitalized or all upper case
 * (so "tRuE", a string to YAML, is refused rather than read as true). */
static int parse_bool(const char *s, int *out) {
    static const char *const words[] = {
        "true",  "True",  "TRUE",  "yes", "Yes", "YES", "on",  "On",  "ON",
        "false", "False", "FALSE", "no",  "No",  "NO",  "off", "Off", "OFF"};
    for (int i = 0; i < 18; i++) {
        if (!strcmp(s, words[i])) {
            *out = i < 9;
            return 1;
        }
    }
    return 0;
}

static int in_choices(const char *choices, const char *s) {
    size_t n = strlen(s);
    for (const char *p = choices; *p;) {
        size_t len = strcspn(p, "|");
        if (len == n && !strncmp(p, s, n)) return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

/* [Note: data lists] data.train and data.val take one path or a YAML list of them (block
 * or flow: `train: [a.bin, "b_*.bin"]`, also in a --set), each a file or a glob that the
 * data stream expands in order (data_stream.h). They are stored in one char array, each
 * path followed by '\0' and the last by a second '\0', so that one path is the plain C
 * string it always was and a list of one is that path. Each path is at most PP_PATH_MAX -
 * 1 bytes, the list at most the array less its final '\0'. A list of several prints as a
 * flow sequence on one line, which reads back to the same value. */

/* The longest path (with its '\0') that field f holds. */
static size_t path_size(const Field *f) { return f->list ? PP_PATH_MAX : f->size; }

/* Copy s into a char[size] field, zeroing the rest (so equal configs memcmp equal). */
static int set_text(char *dst, size_t size, const char *s) {
    if (strlen(s) >= size) return 0;
    memset(dst, 0, size);
    memcpy(dst, s, strlen(s));
    return 1;
}

/* What a value of f must look like, e.g. "an integer in [0, 9]". */
static void field_expected(const Field *f, char *buf, size_t n) {
    switch (f->type) {
    case T_INT:
        if (f->hi >= IMAX) snprintf(buf, n, "an integer >= %.0f", f->lo);
        else snprintf(buf, n, "an integer in [%.0f, %.0f]", f->lo, f->hi);
        break;
    case T_FLOAT:
        if (isinf(f->hi)) snprintf(buf, n, "a number %s %g", f->open & OPEN_LO ? ">" : ">=", f->lo);
        else snprintf(buf, n, "a number in %c%g, %g%c", f->open & OPEN_LO ? '(' : '[', f->lo,
                      f->hi, f->open & OPEN_HI ? ')' : ']');
        break;
    case T_U64: snprintf(buf, n, "an unsigned 64-bit integer"); break;
    case T_BOOL: snprintf(buf, n, "true or false"); break;
    case T_STRING:
        snprintf(buf, n, "a non-empty path of at most %zu bytes%s", path_size(f) - 1,
                 f->list ? " (a file or a glob), or a list of them" : "");
        break;
    case T_PATH:
        snprintf(buf, n, "a path of at most %zu bytes%s, or null", path_size(f) - 1,
                 f->list ? " (a file or a glob), a list of them" : "");
        break;
    case T_AUTO: snprintf(buf, n, "auto or an integer >= %.0f", f->lo); break;
    case T_TRI: snprintf(buf, n, "auto, true or false"); break;
    case T_TEXT: snprintf(buf, n, "non-empty text of at most %zu bytes", f->size - 1); break;
    case T_IDS: snprintf(buf, n, "null, a token id >= 0 or a list of them like [128001, 128009]");
        break;
    case T_SPLIT:
        snprintf(buf, n, "auto, a list of layer counts like [4, 4] or a list of split points "
                         "like [\"layers.4\"]");
        break;
    case T_ENUM: { /* "a|b|c" -> "one of a, b, c" */
        size_t len = (size_t)snprintf(buf, n, "one of ");
        for (const char *p = f->choices; *p && len + 3 < n; p++) {
            if (*p == '|') {
                buf[len++] = ',';
                buf[len++] = ' ';
            } else {
                buf[len++] = *p;
            }
        }
        buf[len] = '\0';
        break;
    }
    }
}

/* Store the YAML scalar `s` (`plain`: written without quotes) into field f of c.
 * Numbers and booleans must be plain; null is a value of T_PATH keys only. On failure
 * c is unchanged, `want` says what was expected and PP_EUSAGE is returned. */
static int field_parse(const Field *f, Config *c, const char *s, int plain, char *want,
                       size_t n) {
    void *dst = field_ptr(f, c);
    int ok = 0;
    switch (f->type) {
    case T_INT: ok = plain && parse_int(f, s, dst); break;
    case T_U64: ok = plain && parse_u64(s, dst); break;
    case T_FLOAT: ok = plain && parse_float(f, s, dst); break;
    case T_BOOL: ok = plain && parse_bool(s, dst); break;
    case T_STRING:
        ok = *s && !(plain && is_null(s)) && strlen(s) < path_size(f) && set_text(dst, f->size, s);
        break;
    case T_PATH:
        ok = strlen(s) < path_size(f) && set_text(dst, f->size, plain && is_null(s) ? "" : s);
        break;
    case T_ENUM: ok = in_choices(f->choices, s) && set_text(dst, f->size, s); break;
    case T_SPLIT: ok = !strcmp(s, "auto") && set_text(dst, f->size, s); break;
    case T_AUTO:
        if ((ok = !strcmp(s, "auto"))) *(int *)dst = 0;
        else ok = plain && parse_int(f, s, dst);
        break;
    case T_TRI:
        if ((ok = !strcmp(s, "auto"))) *(int *)dst = -1;
        else ok = plain && parse_bool(s, dst);
        break;
    case T_TEXT: ok = *s && !(plain && is_null(s)) && set_text(dst, f->size, s); break;
    case T_IDS: {
        Field id = {.lo = 0, .hi = IMAX};
        int v;
        char text[16];
        if (plain && is_null(s)) ok = set_text(dst, f->size, "");
        else if ((ok = plain && parse_int(&id, s, &v)))
            snprintf(text, sizeof text, "%d", v), set_text(dst, f->size, text);
        break;
    }
    }
    if (ok) return PP_OK;
    field_expected(f, want, n);
    const char *digits = s + (*s == '+' || *s == '-');
    if (f->type == T_INT && f->hi >= IMAX && all_digits(digits) && strlen(digits) >= 10)
        strncat(want, " and <= 2147483647", n - strlen(want) - 1); /* beyond a 32-bit int */
    if ((f->type == T_INT || f->type == T_U64) && all_digits(digits) && !decimal_digits(digits))
        strncat(want, " written without leading zeros", n - strlen(want) - 1);
    return PP_EUSAGE;
}

/* Whether YAML 1.1 (what many tools read) would take the plain text s as a number or a
 * boolean: such a string is printed quoted, so that every reader sees a string. */
static int looks_typed(const char *s) {
    static const char *const words[] = {"y", "n", "yes", "no", "true", "false", "on", "off",
                                        ".inf", "-.inf", "+.inf", ".nan"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcasecmp(s, words[i])) return 1;
    const char *p = s + (*s == '+' || *s == '-');
    if (p[0] == '0' && p[1] && strchr("xXoObB", p[1])) return 1; /* 0x1f, 0o17, 0b101 */
    return (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) &&
           strspn(p, "0123456789_.:eE+-") == strlen(p);
}

/* Whether a string may be printed without quotes and still read back as itself, here and
 * in other YAML readers. */
static int plain_safe(const char *s) {
    if (is_null(s) || looks_typed(s) || !(isalnum((unsigned char)*s) || strchr("_./", *s)))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_./+-", *s)) return 0;
    return 1;
}

/* A double-quoted YAML scalar with '"', '\\' and control bytes escaped. */
static void quote(const char *s, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "\"");
    for (; *s && len + 5 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') len += (size_t)snprintf(buf + len, n - len, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            len += (size_t)snprintf(buf + len, n - len, "\\x%02x", ch);
        else buf[len++] = (char)ch;
    }
    snprintf(buf + len, n - len, "\"");
}

/* The shortest decimal that reads back (strtof) to exactly v, with ".0" on integers
 * (written out below 1e15: rope_theta 500000.0, not 5e+05). */
static void format_float(float v, char *buf, size_t n) {
    if (v == truncf(v) && fabsf(v) < 1e15f) {
        snprintf(buf, n, "%.1f", (double)v);
        return;
    }
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".e")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* a list of paths with every byte escaped (or % and $ doubled), quoted, ", " between */
#define VALUE_MAX (4 * PP_DATA_LIST_MAX + 8)

/* The path p as YAML text: % and $ doubled (it is expanded: so that it reads back as
 * itself), quoted unless plain text reads back the same. */
static void format_path(const char *p, char *buf, size_t n) {
    char path[2 * PP_PATH_MAX];
    pathpat_escape(p, path, sizeof path);
    if (plain_safe(path)) snprintf(buf, n, "%s", path);
    else quote(path, buf, n);
}

/* A list of several paths ([Note: data lists]) as a flow sequence: [a.bin, "b_*.bin"]. */
static void format_list(const char *p, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (const char *q = p; q && len + 4 < n; q = config_list_next(q)) {
        if (q != p) len += (size_t)snprintf(buf + len, n - len, ", ");
        format_path(q, buf + len, n - len - 1);
        len += strlen(buf + len);
    }
    snprintf(buf + len, n - len, "]");
}

/* The value of f in c as YAML text that field_parse / read_field_sequence read back. */
static void format_value(const Field *f, const Config *c, char *buf, size_t n) {
    const void *p = field_ptr(f, c);
    switch (f->type) {
    case T_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case T_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p); break;
    case T_FLOAT: format_float(*(const float *)p, buf, n); break;
    case T_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "true" : "false"); break;
    case T_PATH:
        if (!*(const char *)p) {
            snprintf(buf, n, "null");
            break;
        }
        /* fall through */
    case T_STRING:
        if (f->list && config_list_next(p)) format_list(p, buf, n);
        else format_path(p, buf, n);
        break;
    case T_ENUM:
        if (plain_safe(p)) snprintf(buf, n, "%s", (const char *)p);
        else quote(p, buf, n);
        break;
    case T_SPLIT: snprintf(buf, n, "%s", (const char *)p); break;
    case T_IDS: snprintf(buf, n, "%s", *(const char *)p ? (const char *)p : "null"); break;
    case T_AUTO:
        if (*(const int *)p == 0) snprintf(buf, n, "auto");
        else snprintf(buf, n, "%d", *(const int *)p);
        break;
    case T_TRI: { /* another value than -1, 0, 1 is set directly: check_fields names it */
        int v = *(const int *)p;
        if (v == -1) snprintf(buf, n, "auto");
        else if (v == 0 || v == 1) snprintf(buf, n, "%s", v ? "true" : "false");
        else snprintf(buf, n, "%d", v);
        break;
    }
    case T_TEXT:
        if (plain_safe(p)) snprintf(buf, n, "%s", (const char *)p);
        else quote(p, buf, n);
        break;
    }
}

/* ------------------------------------------------------------------------------------
 * Unknown keys: the nearest known key by edit distance
 * ---------------------------------------------------------------------------------- */

/* Levenshtein distance over the first 63 bytes of each string. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a) < 63 ? strlen(a) : 63, lb = strlen(b) < 63 ? strlen(b) : 63;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

static int candidate_distance(const char *key, const char *cand) {
    int full = edit_distance(key, cand);
    int last = edit_distance(last_component(key), last_component(cand));
    return full < last ? full : last;
}

/* The known key nearest to `key` (over full dotted names and over last components), or
 * NULL when nothing is close enough to be a plausible typo. */
static const char *key_suggest(const char *key) {
    const char *best = NULL;
    int bestd = INT_MAX;
    for (size_t i = 0; i < N_FIELDS + N_SECTIONS; i++) {
        const char *cand = i < N_FIELDS ? k_fields[i].key : k_sections[i - N_FIELDS];
        int d = candidate_distance(key, cand);
        if (d < bestd) {
            bestd = d;
            best = cand;
        }
    }
    int len = (int)strlen(last_component(key));
    int limit = len / 3 > 2 ? len / 3 : 2;
    return bestd <= limit && bestd < len ? best : NULL;
}

/* ------------------------------------------------------------------------------------
 * The YAML reader (files and --set values)
 * ---------------------------------------------------------------------------------- */

/* [Note: YAML tags] A tag is honoured, never ignored: `!!str 4` is the string "4", so
 * model.n_layers refuses it, and `!!int "4"` is the integer 4. Only the core schema's
 * tags are known (!!str, !!int, !!float, !!bool, !!null on scalars; !!map and !!seq on
 * mappings and lists; `!` on a scalar means a string too); any other tag is an error,
 * and so is a tag that does not fit the key's type (scalar_tag, tag_fits). */

#define CORE_TAG "tag:yaml.org,2002:"

/* What the tag of event ev names: "str", "int", "float", "bool", "null", "map", "seq";
 * NULL when it has none; "" for a tag outside the core schema. */
static const char *tag_kind(const yaml_event_t *ev) {
    static const char *const known[] = {"str", "int", "float", "bool", "null", "map", "seq"};
    const yaml_char_t *t = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.tag
                           : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.tag
                           : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.tag
                                                                   : NULL;
    if (!t) return NULL;
    if (!strcmp((const char *)t, "!")) return "str"; /* the non-specific tag of a string */
    if (strncmp((const char *)t, CORE_TAG, strlen(CORE_TAG))) return "";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp((const char *)t + strlen(CORE_TAG), known[i])) return known[i];
    return "";
}

/* Whether a scalar is read as untyped text to resolve (an int, a bool, null...): a plain
 * scalar without a tag, or any scalar whose tag names a non-string type (`!!int "4"`).
 * Quoted scalars and `!!str` ones are strings. */
static int scalar_plain(const yaml_event_t *ev) {
    const char *kind = tag_kind(ev);
    if (kind) return strcmp(kind, "str") != 0;
    return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Whether a scalar tagged `kind` may be the value of field f. */
static int tag_fits(const Field *f, const char *kind) {
    switch (f->type) {
    case T_INT:
    case T_U64: return !strcmp(kind, "int");
    case T_FLOAT: return !strcmp(kind, "float");
    case T_BOOL: return !strcmp(kind, "bool");
    case T_PATH: return !strcmp(kind, "str") || !strcmp(kind, "null");
    case T_STRING:
    case T_ENUM:
    case T_SPLIT: return !strcmp(kind, "str");
    case T_AUTO: return !strcmp(kind, "int") || !strcmp(kind, "str");
    case T_TRI: return !strcmp(kind, "bool") || !strcmp(kind, "str");
    case T_TEXT: return !strcmp(kind, "str");
    case T_IDS: return !strcmp(kind, "int") || !strcmp(kind, "null");
    }
    return 0;
}

#define SEEN_MAX (N_FIELDS + N_SECTIONS)

typedef struct {
    yaml_parser_t yp;
    Config *c;              /* the staging copy being written */
    const char *file;       /* the config file, or NULL while reading a --set value */
    const char *assignment; /* the --set argument */
    char *err;
    size_t errlen;
    const char *seen[SEEN_MAX]; /* canonical keys given so far (duplicates are errors) */
    size_t seen_line[SEEN_MAX];
    size_t nseen;
} Reader;

/* Format "FILE:LINE:COL: message" (or "--set A=V: message") into r->err. */
__attribute__((format(printf, 3, 4))) static int fail(Reader *r, const yaml_mark_t *m,
                                                      const char *fmt, ...) {
    char msg[PP_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!r->file) return pp_errf(r->err, r->errlen, PP_EUSAGE, "--set %s: %s", r->assignment, msg);
    return pp_errf(r->err, r->errlen, PP_EUSAGE, "%s:%zu:%zu: %s", r->file, m->line + 1,
                   m->column + 1, msg);
}

/* "KEY: expected WANT, got 'VALUE'" at the value's position. */
static int fail_value(Reader *r, const char *key, const yaml_event_t *ev, const char *want) {
    if (ev->type == YAML_MAPPING_START_EVENT)
        return fail(r, &ev->start_mark, "%s: expected %s, got a mapping", key, want);
    if (ev->type != YAML_SCALAR_EVENT)
        return fail(r, &ev->start_mark, "%s: expected %s, got a list", key, want);
    const char *v = (const char *)ev->data.scalar.value;
    if (scalar_plain(ev))
        return fail(r, &ev->start_mark, "%s: expected %s, got '%.200s'", key, want, v);
    return fail(r, &ev->start_mark, "%s: expected %s, got '\"%.200s\"' (a quoted string)", key,
                want, v);
}

static int fail_unknown(Reader *r, const yaml_mark_t *m, const char *key) {
    const char *near = key_suggest(key);
    if (near) return fail(r, m, "unknown key '%s' (did you mean '%s'?)", key, near);
    return fail(r, m, "unknown key '%s' (docs/config.md lists the keys)", key);
}

/* Refuse what no config value may hold: a NUL inside a scalar (libyaml gives its length;
 * C strings would stop at the NUL and silently use the part before it), a tag outside
 * the core schema, or a collection tagged as something else. */
static int check_event(Reader *r, const yaml_event_t *ev) {
    const char *kind = tag_kind(ev);
    if (ev->type == YAML_SCALAR_EVENT &&
        strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length)
        return fail(r, &ev->start_mark, "the value holds a NUL byte (\\0) at character %zu: "
                    "a path or name cannot contain one; remove it",
                    strlen((const char *)ev->data.scalar.value) + 1);
    if (kind && !*kind)
        return fail(r, &ev->start_mark, "YAML tag '%s' is not supported in configs: write the "
                    "value without a tag", (const char *)(ev->type == YAML_SCALAR_EVENT
                        ? ev->data.scalar.tag : ev->type == YAML_MAPPING_START_EVENT
                        ? ev->data.mapping_start.tag : ev->data.sequence_start.tag));
    if (kind && ev->type == YAML_MAPPING_START_EVENT && strcmp(kind, "map"))
        return fail(r, &ev->start_mark, "the YAML tag !!%s does not fit a mapping: remove it",
                    kind);
    if (kind && ev->type == YAML_SEQUENCE_START_EVENT && strcmp(kind, "seq"))
        return fail(r, &ev->start_mark, "the YAML tag !!%s does not fit a list: remove it", kind);
    if (kind && ev->type == YAML_SCALAR_EVENT && (!strcmp(kind, "map") || !strcmp(kind, "seq")))
        return fail(r, &ev->start_mark, "the YAML tag !!%s does not fit a single value: "
                    "remove it", kind);
    return PP_OK;
}

/* Next event; a libyaml error becomes "FILE:LINE:COL: YAML syntax error: problem". */
static int next_event(Reader *r, yaml_event_t *ev) {
    const yaml_parser_t *p = &r->yp;
    if (!yaml_parser_parse(&r->yp, ev)) {
        const char *problem = p->problem ? p->problem : "malformed YAML";
        if (p->error == YAML_READER_ERROR)
            return fail(r, &p->problem_mark, "cannot read the YAML text: %s at byte %zu", problem,
                        p->problem_offset);
        if (p->context) /* `train: *.bin` is an alias to YAML: a glob that starts so needs quotes */
            return fail(r, &p->problem_mark, "YAML syntax error: %s (%s at line %zu, column %zu)%s",
                        problem, p->context, p->context_mark.line + 1, p->context_mark.column + 1,
                        strstr(p->context, "alias") ? "; a value that starts with * (a glob) "
                                                      "must be quoted: \"*.bin\"" : "");
        return fail(r, &p->problem_mark, "YAML syntax error: %s", problem);
    }
    if (ev->type == YAML_ALIAS_EVENT) {
        int rc = fail(r, &ev->start_mark, "YAML aliases (*%s) are not supported in configs (a "
                      "value that starts with *, a glob, must be quoted: \"*%s\")",
                      (const char *)ev->data.alias.anchor, (const char *)ev->data.alias.anchor);
        yaml_event_delete(ev);
        return rc;
    }
    int rc = check_event(r, ev);
    if (rc) yaml_event_delete(ev);
    return rc;
}

static int read_mapping(Reader *r, const char *prefix);

/* The fields of section `key` back to their defaults: `model.rope_scaling: null`, no
 * scaling, whatever was set before (an earlier --set, the file); given (config_given):
 * null is a choice. Other sections take null as an empty mapping: nothing changes. */
static void section_reset(Config *c, const char *key) {
    char want[WANT_MAX];
    size_t n = strlen(key);
    if (strcmp(key, "model.rope_scaling")) return;
    for (size_t i = 0; i < N_FIELDS; i++)
        if (!strncmp(k_fields[i].key, key, n) && k_fields[i].key[n] == '.') {
            PP_CHECK(field_parse(&k_fields[i], c, k_fields[i].def, 1, want, sizeof want) == PP_OK);
            c->given[i] = 1;
        }
}

/* [Note: config sequences] A YAML sequence becomes one field's text: pipeline.split's and
 * the token ids' as canonical YAML ("[4, 4]", "[\"layers.4\"]", "[1, 2]"), a list of
 * paths as its paths one after another, each ending in a NUL ([Note: data lists]). One
 * loop (read_sequence) reads the events; an entry function per kind checks each entry
 * and appends it to the text (size bytes, *len used so far). *state is 0 until the first
 * entry and whatever the entry function keeps after it (pipeline.split: the kind of the
 * first entry). */
typedef int (*SeqEntry)(Reader *r, const Field *f, const yaml_event_t *ev, int *state,
                        char *text, size_t size, size_t *len);

/* A pipeline.split entry: a layer count (*state 1) or a split point "layers.N" (2), every
 * entry of the kind of the first. */
static int split_entry(Reader *r, const Field *f, const yaml_event_t *ev, int *state, char *text,
                       size_t size, size_t *len) {
    char want[WANT_MAX], item[64];
    int count = 0;
    const char *s = ev->type == YAML_SCALAR_EVENT ? (const char *)ev->data.scalar.value : "";
    int plain = ev->type == YAML_SCALAR_EVENT && scalar_plain(ev);
    Field positive = {.lo = 1, .hi = IMAX};
    int this_kind = 0;
    if (plain && parse_int(&positive, s, &count)) {
        this_kind = 1;
        snprintf(item, sizeof item, "%d", count);
    } else if (!strncmp(s, "layers.", 7) && all_digits(s + 7) &&
               parse_int(&positive, s + 7, &count)) {
        this_kind = 2;
        snprintf(item, sizeof item, "\"layers.%d\"", count);
    }
    if (!this_kind || (*state && this_kind != *state)) {
        if (!this_kind) snprintf(want, sizeof want, "a layer count > 0 or a split point "
                                                    "\"layers.N\" as list entry");
        else snprintf(want, sizeof want, "every list entry to be a %s like the first",
                      *state == 1 ? "layer count" : "split point \"layers.N\"");
        return fail_value(r, f->key, ev, want);
    }
    if (*len + strlen(item) + 4 > size)
        return fail(r, &ev->start_mark, "%s: the list is too long (at most %zu characters)",
                    f->key, size - 1);
    *len += (size_t)snprintf(text + *len, size - *len, "%s%s", *state ? ", " : "", item);
    *state = this_kind;
    return PP_OK;
}

/* A token id >= 0 (*state: the ids so far). */
static int id_entry(Reader *r, const Field *f, const yaml_event_t *ev, int *state, char *text,
                    size_t size, size_t *len) {
    Field id = {.lo = 0, .hi = IMAX};
    int v, plain = ev->type == YAML_SCALAR_EVENT && scalar_plain(ev);
    if (!plain || !parse_int(&id, (const char *)ev->data.scalar.value, &v))
        return fail_value(r, f->key, ev, "a token id >= 0 as list entry");
    if (*len + 16 > size)
        return fail(r, &ev->start_mark, "%s: the list is too long (at most %zu characters)",
                    f->key, size - 2);
    *len += (size_t)snprintf(text + *len, size - *len, "%s%d", (*state)++ ? ", " : "", v);
    return PP_OK;
}

/* A path of a list field ([Note: data lists]). */
static int path_entry(Reader *r, const Field *f, const yaml_event_t *ev, int *state, char *text,
                      size_t size, size_t *len) {
    char want[WANT_MAX];
    const char *s = ev->type == YAML_SCALAR_EVENT ? (const char *)ev->data.scalar.value : NULL;
    const char *kind = s ? tag_kind(ev) : NULL;
    if (!s || !*s || (scalar_plain(ev) && is_null(s)) || (kind && strcmp(kind, "str")) ||
        strlen(s) >= PP_PATH_MAX) {
        snprintf(want, sizeof want, "a non-empty path of at most %d bytes as list entry",
                 PP_PATH_MAX - 1);
        return fail_value(r, f->key, ev, want);
    }
    size_t n = strlen(s);
    if (*len + n + 2 > size)
        return fail(r, &ev->start_mark, "%s: the list is too long (at most %zu bytes of paths): "
                    "name the files with a glob instead", f->key, size - 2);
    memcpy(text + *len, s, n + 1);
    *len += n + 1;
    *state = 1;
    return PP_OK;
}

/* Read the rest of a YAML sequence (its start event consumed) into text[size] through
 * entry; an empty one fails: "key: expected <expected>, got an empty list<tail>". */
static int read_sequence(Reader *r, const Field *f, SeqEntry entry, char *text, size_t size,
                         size_t *len, const char *expected, const char *tail) {
    int state = 0;
    for (;;) {
        yaml_event_t ev;
        if (next_event(r, &ev)) return PP_EUSAGE;
        int rc, end = ev.type == YAML_SEQUENCE_END_EVENT;
        if (!end)
            rc = entry(r, f, &ev, &state, text, size, len);
        else if (!state)
            rc = fail(r, &ev.start_mark, "%s: expected %s, got an empty list%s", f->key,
                      expected, tail);
        else
            rc = PP_OK;
        yaml_event_delete(&ev);
        if (end || rc) return rc;
    }
}

/* A sequence for the field f (pipeline.split, token ids or a list of paths) into its text
 * ([Note: config sequences]). */
static int read_field_sequence(Reader *r, const Field *f) {
    if (f->list) {
        char *text = pp_calloc(1, f->size);
        size_t len = 0;
        int rc = read_sequence(r, f, path_entry, text, f->size, &len,
                               "a path or a non-empty list of paths",
                               f->type == T_PATH ? " (null: none)" : "");
        if (rc == PP_OK) memcpy(field_ptr(f, r->c), text, f->size);
        free(text);
        return rc;
    }
    char text[PP_SPLIT_MAX > PP_IDS_MAX ? PP_SPLIT_MAX : PP_IDS_MAX] = "[";
    size_t len = 1, size = f->type == T_IDS ? PP_IDS_MAX : PP_SPLIT_MAX;
    int rc = f->type == T_IDS
                 ? read_sequence(r, f, id_entry, text, size, &len,
                                 "a token id or a non-empty list of them", " (null: none)")
                 : read_sequence(r, f, split_entry, text, size, &len,
                                 "auto or a non-empty list", "");
    if (rc) return rc;
    strcat(text, "]");
    set_text(field_ptr(f, r->c), f->size, text);
    return PP_OK;
}

/* Apply the value event `ev` to `key` (a field, or a section taking a mapping). */
static int read_value(Reader *r, const char *key, const yaml_event_t *ev) {
    const Field *f = field_find(key);
    char want[WANT_MAX];
    if (!f) { /* a section */
        if (ev->type == YAML_MAPPING_START_EVENT) return read_mapping(r, key);
        if (ev->type == YAML_SCALAR_EVENT && scalar_plain(ev) &&
            is_null((const char *)ev->data.scalar.value)) {
            section_reset(r->c, key); /* "train:" with nothing under it: no change */
            return PP_OK;
        }
        return fail_value(r, key, ev, "a mapping of keys");
    }
    if (ev->type == YAML_SCALAR_EVENT) {
        const char *kind = tag_kind(ev), *s = (const char *)ev->data.scalar.value;
        if (kind && !strcmp(kind, "null") && tag_fits(f, kind) && !is_null(s))
            return fail(r, &ev->start_mark, "%s: the YAML tag !!null needs an empty value or "
                        "null, got '%.200s': write the value without the tag", key, s);
        if (kind && !tag_fits(f, kind)) {
            field_expected(f, want, sizeof want);
            return fail(r, &ev->start_mark, "%s: the YAML tag !!%s makes '%.200s' %s, but %s "
                        "takes %s: write the value without the tag", key, kind, s,
                        !strcmp(kind, "str") ? "a string" : !strcmp(kind, "null") ? "null"
                        : !strcmp(kind, "int") ? "an integer" : !strcmp(kind, "float")
                        ? "a number" : "a boolean", key, want);
        }
        if (field_parse(f, r->c, s, scalar_plain(ev), want, sizeof want))
            return fail_value(r, key, ev, want);
        r->c->given[f - k_fields] = 1;
        return PP_OK;
    }
    if (ev->type == YAML_SEQUENCE_START_EVENT && (f->type == T_SPLIT || f->type == T_IDS ||
                                                  f->list)) {
        int rc = read_field_sequence(r, f);
        if (rc == PP_OK) r->c->given[f - k_fields] = 1;
        return rc;
    }
    field_expected(f, want, sizeof want);
    return fail_value(r, key, ev, want);
}

/* One "key: value" pair inside the mapping `prefix` ("" at the top); `kev` is the key. */
static int read_entry(Reader *r, const char *prefix, const yaml_event_t *kev) {
    const char *k = (const char *)kev->data.scalar.value, *kind = tag_kind(kev);
    char key[KEY_MAX];
    if (kind && strcmp(kind, "str"))
        return fail(r, &kev->start_mark, "key '%s': a key is a name, not !!%s: remove the tag",
                    k, kind);
    if (strchr(k, '.'))
        return fail(r, &kev->start_mark, "key '%s': write nested keys as nested mappings "
                                         "('train:' then '  steps: 20'), not with dots", k);
    snprintf(key, sizeof key, "%s%s%.60s", prefix, *prefix ? "." : "", k);
    const char *canon = key_canonical(key);
    if (!canon) return fail_unknown(r, &kev->start_mark, key);
    for (size_t i = 0; i < r->nseen; i++)
        if (r->seen[i] == canon)
            return fail(r, &kev->start_mark, "duplicate key '%s' (first given at line %zu)", key,
                        r->seen_line[i]);
    r->seen[r->nseen] = canon;
    r->seen_line[r->nseen++] = kev->start_mark.line + 1;

    yaml_event_t ev;
    if (next_event(r, &ev)) return PP_EUSAGE;
    int rc = read_value(r, key, &ev);
    yaml_event_delete(&ev);
    return rc;
}

/* Read the entries of a mapping (its start event consumed) under `prefix`. */
static int read_mapping(Reader *r, const char *prefix) {
    for (;;) {
        yaml_event_t kev;
        if (next_event(r, &kev)) return PP_EUSAGE;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return PP_OK;
        }
        int rc = kev.type == YAML_SCALAR_EVENT
                     ? read_entry(r, prefix, &kev)
                     : fail(r, &kev.start_mark, "%s: expected a key name, got a %s",
                            *prefix ? prefix : "top level",
                            kev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
        yaml_event_delete(&kev);
        if (rc) return rc;
    }
}

/* The top of a config file: a mapping of sections, or nothing at all. */
static int read_root(Reader *r, const yaml_event_t *ev) {
    if (ev->type == YAML_MAPPING_START_EVENT) return read_mapping(r, "");
    if (ev->type == YAML_SCALAR_EVENT && scalar_plain(ev) &&
        is_null((const char *)ev->data.scalar.value))
        return PP_OK;
    return fail_value(r, "top level", ev, "a mapping of sections (model:, pipeline:, train:, "
                                          "data:, output:, runtime:)");
}

/* Expect an event of `type` (anything else is reported as `what`). */
static int expect(Reader *r, yaml_event_type_t type, const char *what) {
    yaml_event_t ev;
    if (next_event(r, &ev)) return PP_EUSAGE;
    int rc = ev.type == type ? PP_OK : fail(r, &ev.start_mark, "%s", what);
    yaml_event_delete(&ev);
    return rc;
}

/* Read a whole YAML stream of at most one document: a config file (set_key NULL) or the
 * value of `--set set_key=...` (an empty value is read as a plain empty scalar). */
static int read_stream(Reader *r, const char *set_key) {
    yaml_event_t ev;
    int rc = expect(r, YAML_STREAM_START_EVENT, "expected the start of a YAML stream");
    if (rc || (rc = next_event(r, &ev))) return rc;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        if (!set_key) return PP_OK; /* an empty file */
        yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)"", 0, 1, 1,
                                     YAML_PLAIN_SCALAR_STYLE);
        rc = read_value(r, set_key, &ev);
        yaml_event_delete(&ev);
        return rc;
    }
    yaml_event_delete(&ev); /* DOCUMENT_START */
    if ((rc = next_event(r, &ev))) return rc;
    rc = set_key ? read_value(r, set_key, &ev) : read_root(r, &ev);
    yaml_event_delete(&ev);
    if (!rc) rc = expect(r, YAML_DOCUMENT_END_EVENT, "expected the end of the document");
    if (!rc) rc = expect(r, YAML_STREAM_END_EVENT, "expected a single YAML document, got a "
                                                    "second one");
    return rc;
}

/* Parse `len` bytes of YAML into a copy of *c; *c changes only if all of it is valid. */
static int read_text(Config *c, const char *text, size_t len, const char *file,
                     const char *assignment, const char *set_key, char *err, size_t errlen) {
    Config staged = *c;
    Reader r = {.c = &staged, .file = file, .assignment = assignment, .err = err,
                .errlen = errlen};
    PP_CHECK(yaml_parser_initialize(&r.yp));
    yaml_parser_set_input_string(&r.yp, (const unsigned char *)text, len);
    int rc = read_stream(&r, set_key);
    yaml_parser_delete(&r.yp);
    if (rc == PP_OK) *c = staged;
    return rc;
}

/* ------------------------------------------------------------------------------------
 * Public API
 * ---------------------------------------------------------------------------------- */

void config_defaults(Config *c) {
    char want[WANT_MAX];
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (k_fields[i].def) PP_CHECK(field_parse(&k_fields[i], c, k_fields[i].def, 1, want,
                                                  sizeof want) == PP_OK);
}

int config_given(const Config *c, const char *key) {
    const Field *f = field_find(key);
    PP_CHECK(f != NULL); /* the caller names a key of the table */
    return c->given[f - k_fields];
}

int config_load_file(Config *c, const char *path, char *err, size_t errlen) {
    char *text = NULL, why[PP_ERR_MAX];
    size_t len = 0;
    if (pp_read_file_max(path, "config file", CONFIG_MAX_BYTES, &text, &len, why,
                         sizeof why) != PP_OK)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s%s", path, why,
                       errno == EFBIG ? " (a config is YAML of at most 1 MiB: is this the "
                                        "right file?)" : "");
    int rc = read_text(c, text, len, path, NULL, NULL, err, errlen);
    free(text);
    return rc;
}

int config_load_text(Config *c, const char *text, const char *name, char *err, size_t errlen) {
    return read_text(c, text, strlen(text), name, NULL, NULL, err, errlen);
}

int config_set(Config *c, const char *assignment, char *err, size_t errlen) {
    const char *eq = strchr(assignment, '=');
    char key[KEY_MAX];
    if (!eq || eq == assignment)
        return pp_errf(err, errlen, PP_EUSAGE, "--set %s: expected KEY=VALUE, e.g. --set "
                                               "train.steps=20", assignment);
    snprintf(key, sizeof key, "%.*s", (int)(eq - assignment < 60 ? eq - assignment : 60),
             assignment);
    if (!key_canonical(key)) {
        Reader r = {.assignment = assignment, .err = err, .errlen = errlen};
        return fail_unknown(&r, NULL, key);
    }
    return read_text(c, eq + 1, strlen(eq + 1), NULL, assignment, key, err, errlen);
}

/* A field's value as a number (T_INT / T_FLOAT) for limit checks. Two returns, not one
 * `?:`: that would convert the int to float (the usual arithmetic conversions) and round
 * 2147483584 and above up to 2^31, which is over every int limit. */
static double field_number(const Field *f, const Config *c) {
    if (f->type == T_INT || f->type == T_AUTO) return *(const int *)field_ptr(f, c);
    return *(const float *)field_ptr(f, c);
}

/* Every value within its table limits (values set directly in the struct included). */
static int check_fields(const Config *c, char *err, size_t errlen) {
    char want[WANT_MAX], value[VALUE_MAX];
    for (size_t i = 0; i < N_FIELDS; i++) {
        const Field *f = &k_fields[i];
        const char *s = field_ptr(f, c);
        int ok = 1;
        if (f->type == T_INT || f->type == T_FLOAT) ok = in_limits(f, field_number(f, c));
        else if (f->type == T_AUTO)
            ok = field_number(f, c) == 0 || in_limits(f, field_number(f, c));
        else if (f->type == T_TRI) ok = *(const int *)s >= -1 && *(const int *)s <= 1;
        else if (f->type == T_ENUM) ok = in_choices(f->choices, s);
        else if (f->type == T_STRING || f->type == T_SPLIT || f->type == T_TEXT)
            ok = *s != '\0';
        if (ok) continue;
        if (!f->def && field_number(f, c) == 0)
            return pp_errf(err, errlen, PP_EUSAGE, "missing required key %s (%s): add it under "
                           "'%.*s:' in the config or pass --set %s=...", f->key, f->help,
                           (int)(last_component(f->key) - f->key - 1), f->key, f->key);
        field_expected(f, want, sizeof want);
        format_value(f, c, value, sizeof value);
        return pp_errf(err, errlen, PP_EUSAGE, "%s (%s) is %s: expected %s", f->key, f->help,
                       value, want);
    }
    return PP_OK;
}

#define REJECT(...) return pp_errf(err, errlen, PP_EUSAGE, __VA_ARGS__)

/* What the model keys must be for model.arch (resolved: n_kv_heads and ffn_dim not 0 for
 * gpt2): gpt2's block has them fixed (multi-head attention, a 4 dim GELU MLP, LayerNorm's
 * 1e-5, learned positions); the llama family needs ffn_dim and an even head size (RoPE
 * rotates channel pairs), and takes a sliding window only where Hugging Face's model
 * type has one (mistral, qwen2), and only one that covers train.seq_len: pptrain's
 * attention is causal over the whole sequence, which a window W equals when W >= T. */
static int check_arch(const Config *c, char *err, size_t errlen) {
    int gpt2 = !strcmp(c->arch, "gpt2"), hs = c->dim / c->n_heads;
    if (c->n_heads % c->n_kv_heads)
        REJECT("model.n_heads (%d) is not a multiple of model.n_kv_heads (%d): each key/value "
               "head serves n_heads / n_kv_heads query heads; change one of them", c->n_heads,
               c->n_kv_heads);
    if (gpt2 && c->n_kv_heads != c->n_heads)
        REJECT("model.n_kv_heads (%d): gpt2 has a key/value head per query head (model.n_heads "
               "%d); set it to 0 or %d, or use model.arch llama for grouped-query attention",
               c->n_kv_heads, c->n_heads, c->n_heads);
    if (gpt2 && c->ffn_dim != 4 * c->dim)
        REJECT("model.ffn_dim (%d): gpt2's MLP is 4 x model.dim = %d wide; set it to 0 or %d",
               c->ffn_dim, 4 * c->dim, 4 * c->dim);
    if (gpt2 && c->norm_eps != 1.0e-5f)
        REJECT("model.norm_eps (%g): gpt2's LayerNorm has a fixed epsilon of 1e-5; leave "
               "model.norm_eps at 1.0e-5", c->norm_eps);
    if (gpt2 && c->rope_theta != 10000.0f)
        REJECT("model.rope_theta (%g) is llama's: gpt2 has learned positions, no RoPE; leave it "
               "at 10000.0", c->rope_theta);
    if (gpt2 && strcmp(c->rope_scaling, "none"))
        REJECT("model.rope_scaling.type (%s) is llama's: gpt2 has learned positions, no RoPE; "
               "set model.rope_scaling: null", c->rope_scaling);
    if (!gpt2 && c->ffn_dim == 0)
        REJECT("missing required key model.ffn_dim (the MLP's hidden size, Hugging Face's "
               "intermediate_size) for model.arch %s: add it under 'model:' in the config or "
               "pass --set model.ffn_dim=...", c->arch);
    if (!gpt2 && hs % 2)
        REJECT("model.dim / model.n_heads = %d / %d = %d channels a head, an odd number: RoPE "
               "rotates pairs of channels; change model.dim or model.n_heads", c->dim,
               c->n_heads, hs);
    if (!strcmp(c->rope_scaling, "llama3") && c->rope_high_freq_factor <= c->rope_low_freq_factor)
        REJECT("model.rope_scaling.high_freq_factor (%g) must exceed "
               "model.rope_scaling.low_freq_factor (%g): llama3 scaling interpolates between "
               "the two wavelengths they give", c->rope_high_freq_factor, c->rope_low_freq_factor);
    if (c->sliding_window && strcmp(c->arch, "mistral") && strcmp(c->arch, "qwen2"))
        REJECT("model.sliding_window (%d): model.arch %s has no sliding window (mistral and qwen2 "
               "have one); set it to 0", c->sliding_window, c->arch);
    if (c->sliding_window && c->sliding_window < c->seq_len)
        REJECT("model.sliding_window (%d) is shorter than train.seq_len (%d): pptrain's attention "
               "is causal over the whole sequence, which equals a sliding window only where the "
               "window covers it; lower train.seq_len to at most %d", c->sliding_window,
               c->seq_len, c->sliding_window);
    return PP_OK;
}

/* The rules that join several keys; each message says what to change. */
static int check_cross(const Config *c, char *err, size_t errlen) {
    if (c->vocab_size > c->padded_vocab_size)
        REJECT("model.padded_vocab_size (%d) is smaller than model.vocab_size (%d): set it to 0 "
               "(round up to a multiple of 128) or to at least %d", c->padded_vocab_size,
               c->vocab_size, c->vocab_size);
    if (c->dim % c->n_heads)
        REJECT("model.dim (%d) is not a multiple of model.n_heads (%d): each head gets dim / "
               "n_heads channels; change one of them", c->dim, c->n_heads);
    int rc = check_arch(c, err, errlen);
    if (rc != PP_OK) return rc;
    for (int k = 0; k < 2; k++) { /* the token ids are ids of the vocabulary */
        int ids[PP_IDS_MAX / 2];
        const char *text = k ? c->eos_token_id : c->bos_token_id;
        int n = config_ids(text, ids, PP_IDS_MAX / 2);
        for (int i = 0; i < n; i++)
            if (ids[i] >= c->vocab_size)
                REJECT("model.%s_token_id: %s holds id %d, past the vocabulary (model.vocab_size "
                       "%d): an id of the tokenizer the model trains with, or null",
                       k ? "eos" : "bos", text, ids[i], c->vocab_size);
    }
    if (c->seq_len > c->max_seq_len)
        REJECT("train.seq_len (%d) exceeds model.max_seq_len (%d): lower train.seq_len or raise "
               "model.max_seq_len", c->seq_len, c->max_seq_len);
    if (c->batch_size % c->microbatches)
        REJECT("train.batch_size (%d) is not a multiple of pipeline.microbatches (%d): the batch "
               "is split into equal microbatches; pick microbatches that divide batch_size",
               c->batch_size, c->microbatches);
    if ((long long)c->stages * c->virtual_stages > c->n_layers)
        REJECT("pipeline.stages x pipeline.virtual_stages (%d x %d) exceeds model.n_layers (%d): "
               "every model chunk needs at least one layer; use fewer stages or virtual stages",
               c->stages, c->virtual_stages, c->n_layers);
    if (!strcmp(c->device, "cpu") && strcmp(c->precision, "auto") && strcmp(c->precision, "fp32"))
        REJECT("runtime.precision: %s needs a GPU, but runtime.device is cpu, which computes "
               "in fp32: set runtime.precision: fp32 (or auto), or runtime.device: cuda",
               c->precision);
    /* the schedule kind's row says which virtual_stages it runs, and the message */
    return sched_kind_check(c->schedule, c->stages, c->virtual_stages, c->microbatches, err,
                            errlen);
}
#undef REJECT

/* Expand the patterns of every path key (T_STRING and T_PATH: all of them are paths) in
 * place: [Note: path patterns] in pathpat.c. */
static int expand_paths(Config *c, char *err, size_t errlen) {
    char why[PP_ERR_MAX], out[PP_PATH_MAX];
    for (size_t i = 0; i < N_FIELDS; i++) {
        const Field *f = &k_fields[i];
        char *s = field_ptr(f, c);
        if (f->type != T_STRING && f->type != T_PATH) continue;
        if (f->list && *s) { /* each path of the list ([Note: data lists]), into a copy */
            char *list = pp_calloc(1, f->size);
            size_t len = 0;
            int rc = PP_OK;
            for (const char *q = s; q && rc == PP_OK; q = config_list_next(q)) {
                if (pathpat_expand(q, out, sizeof out, why, sizeof why)) {
                    rc = pp_errf(err, errlen, PP_EUSAGE, "%s '%s': %s", f->key, q, why);
                } else if (len + strlen(out) + 2 > f->size) {
                    rc = pp_errf(err, errlen, PP_EUSAGE, "%s: the list is too long once its "
                                 "patterns are expanded (at most %zu bytes)", f->key, f->size - 2);
                } else {
                    memcpy(list + len, out, strlen(out) + 1);
                    len += strlen(out) + 1;
                }
            }
            if (rc == PP_OK) memcpy(s, list, f->size);
            free(list);
            if (rc) return rc;
            continue;
        }
        if (pathpat_expand(s, out, f->size < sizeof out ? f->size : sizeof out, why, sizeof why))
            return pp_errf(err, errlen, PP_EUSAGE, "%s '%s': %s", f->key, s, why);
        set_text(s, f->size, out);
    }
    return PP_OK;
}

int config_finalize(Config *c, char *err, size_t errlen) {
    /* V rounded up to a multiple of 128, in long long: a V past model.vocab_size's limit
     * is refused by check_fields, not overflowed here */
    long long vp = ((long long)c->vocab_size + 127) / 128 * 128;
    if (c->padded_vocab_size == 0 && vp <= INT_MAX) c->padded_vocab_size = (int)vp;
    int rc = expand_paths(c, err, errlen);
    if (rc == PP_OK) rc = check_fields(c, err, errlen);
    if (rc != PP_OK) return rc;
    int gpt2 = !strcmp(c->arch, "gpt2"); /* the table's limits hold for the values resolved */
    if (c->n_kv_heads == 0) c->n_kv_heads = c->n_heads;
    if (c->ffn_dim == 0 && gpt2) c->ffn_dim = 4 * c->dim; /* llama: required (check_arch) */
    if (c->tie_embeddings < 0) c->tie_embeddings = gpt2;
    return check_cross(c, err, errlen);
}

/* Whether the section path h[0..n) is `open`, i.e. `open` is it or lies inside it. */
static int inside(const char *open, const char *h, size_t n) {
    return !strncmp(open, h, n) && (open[n] == '\0' || open[n] == '.');
}

/* Print a "name:" header line for each section on the path `parent` (e.g.
 * "train.optimizer") that is not already open in `prev`, the previous field's parent. */
static void print_headers(FILE *out, const char *prev, const char *parent) {
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0;; i++) {
        if (parent[i] && parent[i] != '.') continue;
        if (!inside(prev, parent, i))
            fprintf(out, "%*s%.*s:\n", 2 * depth, "", (int)(i - start), parent + start);
        if (!parent[i]) break;
        start = i + 1;
        depth++;
    }
}

/* Write the fields (all, or those of one top-level section) as block YAML. */
static void print_fields(const Config *c, FILE *out, const char *section, int hash) {
    char prev[KEY_MAX] = "", parent[KEY_MAX], value[VALUE_MAX];
    for (size_t i = 0; i < N_FIELDS; i++) {
        const Field *f = &k_fields[i];
        const char *last = last_component(f->key);
        if (section && (strncmp(f->key, section, strlen(section)) ||
                        f->key[strlen(section)] != '.'))
            continue;
        if (hash && f->type == T_IDS) continue; /* config_hash: the ids shape no weight */
        snprintf(parent, sizeof parent, "%.*s", (int)(last - f->key - 1), f->key);
        print_headers(out, prev, parent);
        snprintf(prev, sizeof prev, "%s", parent);
        int depth = 0;
        for (const char *p = f->key; *p; p++) depth += *p == '.';
        format_value(f, c, value, sizeof value);
        fprintf(out, "%*s%s: %s\n", 2 * depth, "", last, value);
    }
}

void config_print(const Config *c, FILE *f) { print_fields(c, f, NULL, 0); }

uint64_t config_hash(const Config *c, int model_only) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    PP_CHECK(f);
    print_fields(c, f, model_only ? "model" : NULL, model_only);
    PP_CHECK(fclose(f) == 0);
    uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 offset basis */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 1099511628211ULL; /* FNV 64 prime */
    }
    free(text);
    return h;
}

const char *config_first_diff(const Config *a, const Config *b) {
    char va[VALUE_MAX], vb[VALUE_MAX];
    for (size_t i = 0; i < N_FIELDS; i++) {
        format_value(&k_fields[i], a, va, sizeof va);
        format_value(&k_fields[i], b, vb, sizeof vb);
        if (strcmp(va, vb)) return k_fields[i].key;
    }
    return NULL;
}

int config_ids(const char *text, int *ids, int max) {
    int n = 0;
    const char *p = text + (*text == '[');
    while (*p && *p != ']') {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT_MAX) return -1;
        if (n < max) ids[n] = (int)v;
        n++;
        p = end + strspn(end, ", ");
    }
    return n < max ? n : max;
}
