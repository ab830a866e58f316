/* prepare.c — `pptrain prepare-data`: text or JSONL documents through a tokenizer.json (or
 * byte-level) into llm.c token files; the command line, the pipeline and its threads. */
#define _GNU_SOURCE
#include "prepare.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prepare_internal.h"

/* [Note: prepare-data]
 * Documents: each --text file is one; each JSONL line is one, its --field string (a blank
 * line is none). A document becomes the document token followed by the ids of
 * encode(text, add_special_tokens=False): added tokens written in the text are matched, as
 * the library's encode does. The document token is --doc-token, else the tokenizer's
 * "<|endoftext|>" (GPT-2, SmolLM, Qwen2), else its BOS, the token its post-processor puts
 * before a text (Llama 3's <|begin_of_text|>, Llama 2's <s>), as llm.c's data scripts put
 * GPT-2's EOT or Llama 3's BOS first. Byte-level (no --tokenizer): a document is its
 * bytes and has no document token (256 ids have none to spare); the files are one stream.
 * Order: the main thread reads the input into batches of whole documents (about
 * PREP_BATCH_BYTES of JSONL lines or text files; a larger text file alone; byte-level:
 * chunks) numbered in input order; the workers take them in that order and encode them,
 * and the main thread writes batch n only after batch n - 1. The output is the same for
 * any --threads. Memory: at most PREP_INFLIGHT_BYTES of input is read and not yet written
 * (a larger document alone), in 2 * threads + 2 batches, so it does not grow with the
 * corpus; a text file is held once, whole, with its ids.
 * Validation split (--val-fraction F): whole documents, taken as they come, with no need
 * to know the total: a document goes to val when val's tokens are below F of all tokens so
 * far, it included (val < F * (train + val + n)). The first document is val's, and at every
 * point of the corpus val holds F of the tokens to within one document, spread over the
 * corpus. One --text file is one document, which that rule would give to val whole: then,
 * as byte-level, the split of earlier versions: val is the last floor(F * n) of its n
 * tokens (byte-level: of the stream's bytes), cut at a token.
 * Files: without --shard-tokens, --out FILE and data_val_path(FILE); with it, --out is a
 * prefix (a ".bin" dropped) and each split is numbered from 0: PREFIX_train_000000.bin,
 * PREFIX_train_000001.bin, PREFIX_val_000000.bin, ..., every file exactly N tokens but the
 * last of its split; documents run on from one file into the next (llm.c's fineweb.py
 * shards the same way, numbering one sequence with val first). A file's width is
 * data_token_width of the vocabulary.
 * All or nothing: each file is written through PPFile under its name + ".part" (a .part
 * appears only complete), and once the whole corpus is through they are renamed to their
 * names. An error or SIGINT/SIGTERM/SIGHUP removes the .part files and the temporary file
 * being written: the final names keep what they held. Only SIGKILL or a crash can leave
 * *.part (complete) or *.tmp.PID (partial) files, never anything under a final name. */

/* [Note: stopping prepare-data]
 * SIGINT, SIGTERM or SIGHUP (a scheduler's SIGTERM is followed by SIGKILL after a grace
 * period) must end the run within a bounded time whatever it is doing, or the SIGKILL
 * leaves *.part and *.tmp.PID files. The handler only sets g_prep_signal; the main thread
 * takes the signals (the workers block them) and looks at the flag
 * - while reading: the reader polls the input before each read(2) of at most
 *   PREP_READ_BYTES, and returns a half-read batch (PREP_IDLE) to the loop when nothing
 *   comes for PREP_WAIT_MS (a slow producer on a pipe; stdio's fread waited for a whole
 *   batch, and batches done meanwhile were not written); the handler has no SA_RESTART,
 *   so a signal ends the poll at once;
 * - while waiting for a worker: pthread_cond_timedwait, PREP_WAIT_MS at a time;
 * - while writing: every PREP_WRITE_BYTES of a batch.
 * Each returns -SIG up to prep_run, which removes what the run wrote and dies of the signal
 * without joining the workers: one may be encoding a large document, and the process ends
 * with them. tok_load, before the handlers are installed, dies of the signal at once. */

#define PREP_USAGE                                                                                 \
    "usage: pptrain prepare-data (--text FILE... | --jsonl FILE... --field NAME) --out PATH\n"     \
    "           [--tokenizer tokenizer.json] [--doc-token TOKEN] [--val-fraction F]\n"             \
    "           [--shard-tokens N] [--threads N]\n"                                                \
    "  --text FILE...      each file is a document (\"-\": standard input)\n"                      \
    "  --jsonl FILE...     each line is a JSON record, its --field string a document\n"            \
    "  --tokenizer FILE    a Hugging Face tokenizer.json (default: byte-level, vocabulary 256)\n"  \
    "  --doc-token TOKEN   before each document (default <|endoftext|>, else the BOS token)\n"     \
    "  --val-fraction F    F in [0, 1) of the tokens, whole documents, to validation\n"            \
    "  --out PATH          the train file (val: its name with train -> val, or _val.bin);\n"       \
    "                      with --shard-tokens a prefix: PATH_train_000000.bin, PATH_val_...\n"    \
    "  --shard-tokens N    at most N tokens per file\n"                                            \
    "  --threads N         encoding threads (default: the CPUs of this process)\n"

/* ---- arguments ------------------------------------------------------------------ */

/* Print a usage error (message, then the usage) and return PP_EUSAGE. */
static int usage_error(const char *msg, const char *what) {
    pp_error("prepare-data: %s%s", msg, what);
    fputs(PREP_USAGE, stderr);
    return PP_EUSAGE;
}

/* The CPUs this process may run on (sched_getaffinity), at least 1. */
static int cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

/* A whole number in [lo, hi] from s into *v; PP_OK or PP_EUSAGE (reported). */
static int parse_count(const char *opt, const char *s, long long lo, long long hi, long long *v) {
    char *end, msg[160];
    errno = 0;
    *v = strtoll(s, &end, 10);
    if (end != s && !*end && !errno && *v >= lo && *v <= hi) return PP_OK;
    snprintf(msg, sizeof msg, "%s must be a whole number in [%lld, %lld], got ", opt, lo, hi);
    return usage_error(msg, s);
}

/* The value slots of the single-valued options. */
typedef struct {
    const char *name, **slot;
} PrepOpt;

/* Parse the arguments into *a. --text and --jsonl take every following argument up to the
 * next one that starts with "--" (or one value after "="); a repeated single-valued option
 * keeps its last value. Returns PP_OK, PP_EUSAGE (reported), or -1 for --help (the usage on
 * stdout). */
static int prep_parse(int argc, char **argv, PrepArgs *a) {
    memset(a, 0, sizeof *a);
    a->inputs = pp_calloc((size_t)argc + 1, sizeof *a->inputs);
    const char *frac = NULL, *shard = NULL, *threads = NULL;
    int ntext = 0, njsonl = 0;
    PrepOpt opts[] = {{"--tokenizer", &a->tokenizer},
                      {"--field", &a->field},
                      {"--out", &a->out},
                      {"--doc-token", &a->doc_token},
                      {"--val-fraction", &frac},
                      {"--shard-tokens", &shard},
                      {"--threads", &threads}};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return fputs(PREP_USAGE, stdout), -1;
        const char *eq = strchr(arg, '=');
        size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
        int text = klen == 6 && !strncmp(arg, "--text", 6);
        if (text || (klen == 7 && !strncmp(arg, "--jsonl", 7))) {
            *(text ? &ntext : &njsonl) += 1;
            if (eq) {
                a->inputs[a->ninputs++] = eq + 1;
                continue;
            }
            int first = i + 1;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                a->inputs[a->ninputs++] = argv[++i];
            if (i < first) return usage_error("missing file after ", arg);
            continue;
        }
        const char **slot = NULL;
        for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
            if (strlen(opts[k].name) == klen && !strncmp(arg, opts[k].name, klen))
                slot = opts[k].slot;
        if (!slot) return usage_error("unknown argument: ", arg);
        if (!eq && i + 1 >= argc) return usage_error("missing value after ", arg);
        *slot = eq ? eq + 1 : argv[++i];
    }
    a->jsonl = njsonl > 0;
    if (ntext && njsonl) return usage_error("--text and --jsonl cannot be mixed", "");
    if (!a->ninputs) return usage_error("--text FILE or --jsonl FILE is required", "");
    if (!a->out || !*a->out) return usage_error("--out PATH is required", "");
    for (int k = 0; k < a->ninputs; k++)
        if (!*a->inputs[k]) return usage_error("an input file name is empty", "");
    if (a->jsonl && (!a->field || !*a->field))
        return usage_error("--jsonl needs --field NAME, the record field that holds the text", "");
    if (!a->jsonl && a->field) return usage_error("--field is for --jsonl inputs", "");
    if (a->jsonl && !a->tokenizer)
        return usage_error("--jsonl needs --tokenizer (byte-level reads --text files)", "");
    if (a->doc_token && !a->tokenizer)
        return usage_error("--doc-token needs --tokenizer (byte-level has no document token)", "");
    if (frac) {
        char *end;
        errno = 0;
        a->val_fraction = strtod(frac, &end);
        if (end == frac || *end || errno || !(a->val_fraction >= 0 && a->val_fraction < 1))
            return usage_error("--val-fraction must be a number in [0, 1), got ", frac);
    }
    long long v = 0;
    if (shard && parse_count("--shard-tokens", shard, 1, INT32_MAX, &v) != PP_OK) return PP_EUSAGE;
    a->shard_tokens = v;
    if (threads && parse_count("--threads", threads, 1, 1024, &v) != PP_OK) return PP_EUSAGE;
    a->threads = threads ? (int)v : cpu_count();
    return PP_OK;
}

/* ---- the document token ------------------------------------------------------- */

/* The tokenizer's BOS: the first of the ids its post-processor puts before a text (what
 * encode adds to encode(text, add_special_tokens=False) in front); -1 if it puts none. */
static int32_t bos_id(const Tokenizer *t) {
    TokIds with = {0}, without = {0};
    tok_encode(t, "a", 1, 0, &with);
    tok_encode(t, "a", 1, TOK_ENCODE_NO_SPECIAL, &without);
    int32_t id = -1;
    for (size_t k = 1; k + without.n <= with.n && id < 0; k++)
        if (!without.n || !memcmp(with.ids + k, without.ids, without.n * sizeof *with.ids))
            id = with.ids[0]; /* ("a" may encode to nothing: no such character, no unk) */
    tok_ids_free(&with);
    tok_ids_free(&without);
    return id;
}

/* The document token's id into *id (--doc-token, else <|endoftext|>, else the BOS) and its
 * string into name[n]. PP_OK, or PP_EUSAGE with a message. */
static int doc_token(const Tokenizer *t, const PrepArgs *a, int32_t *id, char *name, size_t n,
                     char *err, size_t errlen) {
    if (a->doc_token) {
        *id = tok_token_id(t, a->doc_token);
        if (*id < 0)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "--doc-token \"%s\" is not a token of %s (an added token's content "
                           "or a vocabulary entry as the file writes it)",
                           a->doc_token, a->tokenizer);
        snprintf(name, n, "%s", a->doc_token);
        return PP_OK;
    }
    *id = tok_token_id(t, "<|endoftext|>");
    if (*id < 0) *id = bos_id(t);
    size_t len = 0;
    const char *s = *id >= 0 ? tok_token_str(t, *id, &len) : NULL;
    if (!s)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s has no <|endoftext|> token and its post-processor adds no BOS "
                       "token: name the token that starts each document with --doc-token",
                       a->tokenizer);
    snprintf(name, n, "%.*s", (int)len, s);
    return PP_OK;
}

/* ---- encoding (the workers) ---------------------------------------------------- */

static void ids_push(TokIds *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4096;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) PP_DIE("out of memory growing an id array to %zu ids", cap);
        v->ids = p, v->cap = cap;
    }
    v->ids[v->n++] = id;
}

static const char *json_kind(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* The --field string of JSONL line u into *s[*n] (owned by *rec, which the caller frees);
 * PP_OK, or PP_EUSAGE with "FILE:LINE: ..." in b->err. Workers parse at once: jansson's
 * values are their own, and its one global, the hash seed, was set by tok_load (every
 * --jsonl run has a tokenizer) before they started. */
static int record_text(const PrepPipe *p, Batch *b, const Unit *u, json_t **rec, const char **s,
                       size_t *n) {
    const char *file = prep_input_name(p->a, u->input), *field = p->a->field;
    json_error_t je;
    json_t *j = *rec = json_loadb(b->buf + u->off, u->len, JSON_ALLOW_NUL, &je);
    if (!j)
        return pp_errf(b->err, sizeof b->err, PP_EUSAGE,
                       "%s:%ld: not valid JSON: %s (column %d); each line must be one JSON "
                       "record",
                       file, u->line, je.text, je.column);
    if (!json_is_object(j))
        return pp_errf(b->err, sizeof b->err, PP_EUSAGE,
                       "%s:%ld: the line is %s, not a JSON object (a record with the field "
                       "\"%s\")",
                       file, u->line, json_kind(j), field);
    json_t *v = json_object_get(j, field);
    if (!v) {
        char keys[256] = "";
        const char *key;
        json_t *val;
        json_object_foreach(j, key, val)
            pp_strappendf(keys, sizeof keys, "%s\"%s\"", keys[0] ? ", " : "", key);
        return pp_errf(b->err, sizeof b->err, PP_EUSAGE,
                       "%s:%ld: the record has no field \"%s\" (its fields: %s); name the "
                       "field that holds the text with --field",
                       file, u->line, field, keys[0] ? keys : "none");
    }
    if (!json_is_string(v))
        return pp_errf(b->err, sizeof b->err, PP_EUSAGE,
                       "%s:%ld: the field \"%s\" is %s, not a string", file, u->line, field,
                       json_kind(v));
    *s = json_string_value(v);
    *n = json_string_length(v);
    return PP_OK;
}

/* Encode batch b's documents into b->ids (b->end[k]: where unit k's ids end). On an error
 * b->rc and b->err say what and where, and the units after it are not encoded. */
static void encode_batch(const PrepPipe *p, Batch *b) {
    b->ids.n = 0;
    b->text_bytes = 0;
    b->rc = PP_OK;
    for (size_t k = 0; k < b->nunit; k++) {
        const Unit *u = &b->unit[k];
        const char *s = b->buf + u->off;
        size_t n = u->len;
        json_t *rec = NULL;
        if (p->a->jsonl && (b->rc = record_text(p, b, u, &rec, &s, &n)) != PP_OK) {
            json_decref(rec);
            b->nunit = k;
            return;
        }
        if (!p->tok) {
            for (size_t i = 0; i < n; i++) ids_push(&b->ids, (unsigned char)s[i]);
        } else {
            char why[PP_ERR_MAX];
            if (p->doc_id >= 0) ids_push(&b->ids, p->doc_id);
            if (tok_encode_checked(p->tok, s, n, TOK_ENCODE_NO_SPECIAL, &b->ids, why, sizeof why) !=
                PP_OK) {
                if (u->line)
                    pp_errf(b->err, sizeof b->err, PP_EUSAGE, "%s:%ld: %s",
                            prep_input_name(p->a, u->input), u->line, why);
                else
                    pp_errf(b->err, sizeof b->err, PP_EUSAGE, "%s: %s",
                            prep_input_name(p->a, u->input), why);
                b->rc = PP_EUSAGE;
                json_decref(rec);
                b->nunit = k;
                return;
            }
        }
        json_decref(rec);
        b->text_bytes += n;
        b->end[k] = b->ids.n;
    }
}

/* The workers: take the READY batches in their order, encode, mark them DONE. */
static void *worker_main(void *arg) {
    PrepPipe *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->quit) {
        Batch *b = &p->slot[p->take % p->nslot];
        if (b->state != BATCH_READY) {
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        PP_CHECK(b->seq == p->take);
        b->state = BATCH_BUSY;
        p->take++;
        pthread_mutex_unlock(&p->mu);
        encode_batch(p, b);
        pthread_mutex_lock(&p->mu);
        b->state = BATCH_DONE;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- signals ---------------------------------------------------------------------- */

/* The signal that asked prepare-data to stop (0: none); only the handler sets it. */
static volatile sig_atomic_t g_prep_signal;

static void on_prep_signal(int sig) { g_prep_signal = sig; }

static const int prep_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define PREP_NSIG (int)(sizeof prep_signals / sizeof *prep_signals)

/* No SA_RESTART: poll(2) is never restarted, and without it neither is a write(2) of the
 * progress line blocked on a full pipe; each returns EINTR, and the loop looks at the flag. */
static void signals_install(struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prep_signal;
    sa.sa_flags = 0;
    sigemptyset(&sa.sa_mask);
    g_prep_signal = 0;
    for (int k = 0; k < PREP_NSIG; k++) sigaction(prep_signals[k], &sa, &old[k]);
}

static void signals_restore(const struct sigaction *old) {
    for (int k = 0; k < PREP_NSIG; k++) sigaction(prep_signals[k], &old[k], NULL);
}

/* Say what stopped the run, then die of the signal, as it asked (exit status 128 + sig). */
static _Noreturn void die_of_signal(int sig) {
    pp_error("prepare-data: stopped by %s: nothing written (the files finished so far were "
             "removed)",
             sig == SIGINT    ? "SIGINT"
             : sig == SIGTERM ? "SIGTERM"
                              : "SIGHUP");
    signal(sig, SIG_DFL);
    raise(sig);
    _exit(128 + sig); /* not reached: only the main thread takes the signal */
}

/* ---- the main thread: read, hand out, write in order ------------------------------ */

/* Start the workers (with the stop signals blocked: the main thread takes them). */
static void pipe_start(PrepPipe *p, pthread_t *tid) {
    sigset_t block, old;
    sigemptyset(&block);
    for (int k = 0; k < PREP_NSIG; k++) sigaddset(&block, prep_signals[k]);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (int k = 0; k < p->a->threads; k++)
        if (pthread_create(&tid[k], NULL, worker_main, p) != 0)
            PP_DIE("cannot start encoding thread %d: %s", k, strerror(errno));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void pipe_stop(PrepPipe *p, pthread_t *tid) {
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->a->threads; k++) pthread_join(tid[k], NULL);
}

/* Wait up to PREP_WAIT_MS for a worker to finish a batch (the main thread looks at the stop
 * signal between waits). */
static void wait_done(PrepPipe *p) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += PREP_WAIT_MS * 1000L * 1000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&p->mu);
    if (p->slot[p->written % p->nslot].state != BATCH_DONE)
        pthread_cond_timedwait(&p->done, &p->mu, &ts);
    pthread_mutex_unlock(&p->mu);
}

/* Run the pipeline to the end of the input: PP_OK, an error (message in err), or -SIG when
 * stopped by a signal. */
static int pipe_run(PrepPipe *p, Reader *r, PrepOut *out, Progress *g, char *err, size_t errlen) {
    long nread = 0;
    int eof = 0;
    for (;;) {
        if (g_prep_signal) return -g_prep_signal;
        Batch *w = &p->slot[p->written % p->nslot];
        pthread_mutex_lock(&p->mu);
        int ready = p->written < nread && w->state == BATCH_DONE;
        Batch *f = &p->slot[nread % p->nslot];
        int room = !eof && f->state == BATCH_FREE;
        pthread_mutex_unlock(&p->mu);
        if (ready) {
            int rc = prep_out_batch(out, w, err, errlen);
            if (rc != PP_OK) return rc;
            g->in_done += w->in_bytes;
            p->inflight -= w->in_bytes;
            batch_trim(w);
            pthread_mutex_lock(&p->mu);
            w->state = BATCH_FREE;
            p->written++;
            pthread_mutex_unlock(&p->mu);
            progress_show(g, out, 0);
            continue;
        }
        size_t next = reader_next_bytes(r);
        if (room && (p->inflight == 0 || p->inflight + next <= PREP_INFLIGHT_BYTES)) {
            int rc = reader_batch(r, f, err, errlen);
            if (rc == PREP_IDLE) { /* meanwhile write what is done */
                progress_show(g, out, 0);
                continue;
            }
            if (rc != PP_OK) return rc;
            if (f->nunit == 0) {
                eof = 1;
                continue;
            }
            p->inflight += f->in_bytes;
            pthread_mutex_lock(&p->mu);
            f->seq = nread++;
            f->state = BATCH_READY;
            pthread_cond_broadcast(&p->work);
            pthread_mutex_unlock(&p->mu);
            continue;
        }
        if (eof && p->written == nread) return PP_OK;
        wait_done(p);
        progress_show(g, out, 0);
    }
}

/* ---- the command ------------------------------------------------------------------ */

/* Load the tokenizer and choose the document token, or set up byte-level. */
static int setup_tokens(PrepPipe *p, const PrepArgs *a, Tokenizer **tok, char *doc, size_t n,
                        char *err, size_t errlen) {
    p->doc_id = -1;
    if (!a->tokenizer) {
        p->vocab = 256;
        return PP_OK;
    }
    int rc = tok_load(a->tokenizer, tok, err, errlen);
    if (rc != PP_OK) return rc;
    p->tok = *tok;
    p->vocab = tok_vocab_size(*tok);
    return doc_token(*tok, a, &p->doc_id, doc, n, err, errlen);
}

/* Byte-level: the tokens of the val split (the last floor(F * bytes) of the stream), known
 * before anything is read. PP_OK or PP_EUSAGE. */
static int byte_split(const PrepArgs *a, const Reader *r, PrepOut *out, char *err, size_t errlen) {
    if (a->val_fraction > 0 && r->total < 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "byte-level --val-fraction needs the input's size: give a file, not "
                       "standard input");
    if (r->total == 0)
        return pp_errf(err, errlen, PP_EUSAGE, "the text is empty, nothing to tokenize: %s",
                       prep_input_name(a, 0));
    size_t nval = (size_t)floor(a->val_fraction * (double)r->total);
    if (a->val_fraction > 0 && nval == 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "--val-fraction %g leaves no byte of the %lld for the validation file",
                       a->val_fraction, r->total);
    out->byte_train = r->total < 0 ? SIZE_MAX : (size_t)r->total - nval;
    return PP_OK;
}

/* Set up, run and finish: PP_OK, or an error with err set. A stop signal removes what was
 * written and ends the process ([Note: stopping prepare-data]): it does not return. */
static int prep_run(const PrepArgs *a, Tokenizer **tok, char *err, size_t errlen) {
    PrepPipe p = {.a = a};
    char doc[128] = "";
    int rc = setup_tokens(&p, a, tok, doc, sizeof doc, err, errlen);
    if (rc != PP_OK) return rc;
    Reader r;
    rc = reader_open(&r, a, &g_prep_signal, err, errlen);
    PrepOut out;
    if (rc == PP_OK)
        rc = prep_out_init(&out, a, data_token_width(p.vocab), &g_prep_signal, err, errlen);
    if (rc == PP_OK && !p.tok) rc = byte_split(a, &r, &out, err, errlen);
    if (rc != PP_OK) {
        reader_close(&r);
        return rc;
    }
    Progress g = {.t0 = pp_now(), .total = r.total, .tty = isatty(STDERR_FILENO)};
    p.nslot = 2 * a->threads + 2;
    p.slot = pp_calloc((size_t)p.nslot, sizeof *p.slot);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work, NULL);
    pthread_cond_init(&p.done, NULL);
    pthread_t *tid = pp_calloc((size_t)a->threads, sizeof *tid);
    struct sigaction old[PREP_NSIG];
    signals_install(old);
    pipe_start(&p, tid);
    rc = pipe_run(&p, &r, &out, &g, err, errlen);
    if (rc >= 0) pipe_stop(&p, tid); /* on a signal they end with the process */
    if (rc == PP_OK) rc = prep_out_finish(&out, p.tok != NULL, err, errlen);
    if (rc == PP_OK) rc = g_prep_signal ? -g_prep_signal : prep_out_commit(&out, err, errlen);
    progress_show(&g, &out, 1);
    if (rc == PP_OK)
        prep_out_report(&out, a, doc, p.vocab, &g);
    else
        prep_out_abort(&out);
    if (rc < 0) die_of_signal(-rc); /* nothing freed: the workers may be running */
    signals_restore(old);
    for (int k = 0; k < p.nslot; k++) batch_free(&p.slot[k]);
    free(p.slot);
    free(tid);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.work);
    pthread_cond_destroy(&p.done);
    reader_close(&r);
    prep_out_free(&out);
    return rc;
}

int prep_main(int argc, char **argv) {
    PrepArgs a;
    int rc = prep_parse(argc, argv, &a);
    if (rc != PP_OK) {
        free(a.inputs);
        return rc < 0 ? PP_OK : rc;
    }
    char err[PP_ERR_MAX] = "";
    Tokenizer *tok = NULL;
    rc = prep_run(&a, &tok, err, sizeof err);
    tok_free(tok);
    free(a.inputs);
    if (rc != PP_OK) pp_error("prepare-data: %s", err);
    return rc;
}
