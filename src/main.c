/* main.c — the pptrain command line: wires config, transport, runtime and log. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_load.h"
#include "ckpt/ckpt_state.h"
#include "comm/comm.h"
#include "config.h"
#include "runtime/cpuset.h"
#include "data.h"
#include "dist/dist.h"
#include "log.h"
#include "model/model_hf.h"
#include "outdir.h"
#include "runtime/runtime.h"
#include "runtime/summary.h"
#include "plan/plan_cmd.h"
#include "plot/plot_load.h"
#include "tok/prepare.h"
#include "sample/sample.h"
#include "trace.h"

#define PP_VERSION "0.1.0"

static const char *usage =
    "usage: pptrain --config FILE [--set key=value ...] [--trace] [--print-config]\n"
    "       pptrain schedule --config FILE [--set key=value ...] [--text] [--json] [--svg FILE] "
    "[--costs ...] [--plan ...]\n"
    "                        (pptrain schedule --help: the costs, the link model and the planner)\n"
    "       pptrain --config FILE --resume [CHECKPOINT]   "
    "(default: output.dir/checkpoints/latest)\n"
    "       pptrain --config FILE --resume-if-present     "
    "(resume from latest if there is one, else start)\n"
    "       pptrain prepare-data (--text FILE... | --jsonl FILE... --field NAME) --out PATH\n"
    "                            [--tokenizer tokenizer.json] [--val-fraction F] "
    "[--shard-tokens N] [--threads N]\n"
    "       pptrain export --checkpoint DIR --out model.bin   (llm.c's fp32 GPT-2 file)\n"
    "       pptrain export --checkpoint DIR --format hf --out DIR2 [--dtype fp32|bf16] "
    "[--max-shard-size 5GB]\n"
    "       pptrain plot RUN_DIR... [--out FILE.svg|FILE.png] [--x steps|tokens] [--log-y] "
    "[--no-lr]\n"
    "                        (loss curves of runs; pptrain plot --help)\n"
    "       pptrain flight DIR [--last N]   (the ranks' flight records in output.dir/flight, "
    "merged: who waits on whom)\n"
    "       pptrain sample (--checkpoint DIR | --init-from HF_DIR | --config FILE) "
    "[--tokenizer FILE]\n"
    "                      (--prompt TEXT | --prompt-ids 1,2,3) --max-new-tokens N "
    "[--temperature T]\n"
    "                      [--top-k K] [--top-p P] [--seed S] [--ids]   "
    "(pptrain sample --help: all)\n"
    "       pptrain --version   (the version and the backends built in)\n"
    "Trains GPT-2 and Llama style decoders with pipeline parallelism; see README.md.\n";

typedef struct {
    Config cfg;
    int print_config;
    const char *resume;  /* NULL: fresh run; "": the latest checkpoint; else a path */
    int resume_if_present; /* --resume-if-present: resume_choice sets resume once ranks agree */
    int rest_argc;     /* arguments not consumed here (for subcommands) */
    char **rest_argv;
} Cli;

/* Parse --config, --set and --trace (and collect the rest), then finalize the config.
 * Returns PP_OK or PP_EUSAGE (message printed). */
static int cli_parse(Cli *cli, int argc, char **argv) {
    char err[PP_ERR_MAX];
    const char *path = NULL;
    int trace = 0;
    config_defaults(&cli->cfg);
    cli->rest_argv = calloc(argc + 2, sizeof(char *)); /* + "schedule" + NULL */
    cli->rest_argc = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config") || !strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) return pp_error("%s needs a value\n%s", argv[i], usage), PP_EUSAGE;
            if (!strcmp(argv[i], "--config")) path = argv[++i];
            else i++;
        } else if (!strcmp(argv[i], "--trace")) {
            trace = 1;
        } else if (!strcmp(argv[i], "--resume")) {
            cli->resume = (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) ? argv[++i] : "";
            if (cli->resume == argv[i] && !argv[i][0]) /* "" would mean the latest */
                return pp_error("--resume '': an empty CHECKPOINT path (leave it out to resume "
                                "from output.dir's latest checkpoint)\n%s", usage),
                       PP_EUSAGE;
        } else if (!strcmp(argv[i], "--resume-if-present")) {
            cli->resume_if_present = 1;
        } else if (!strcmp(argv[i], "--print-config")) {
            cli->print_config = 1;
        } else {
            cli->rest_argv[cli->rest_argc++] = argv[i];
        }
    }
    if (!path) return pp_error("--config FILE is required\n%s", usage), PP_EUSAGE;
    if (cli->resume && cli->resume_if_present)
        return pp_error("--resume and --resume-if-present exclude each other: --resume-if-present "
                        "already resumes from output.dir's latest checkpoint when there is one\n%s",
                        usage),
               PP_EUSAGE;
    if (config_load_file(&cli->cfg, path, err, sizeof err)) return pp_error("%s", err), PP_EUSAGE;
    for (int i = 0; i + 1 < argc; i++) /* --set in command-line order, after the file */
        if (!strcmp(argv[i], "--set") && config_set(&cli->cfg, argv[++i], err, sizeof err))
            return pp_error("%s", err), PP_EUSAGE;
    if (trace) cli->cfg.trace = 1;
    /* a Hugging Face model.init_from gives the model keys the config leaves out, and its
     * weights are checked before anything is built or written */
    if (model_hf_config(&cli->cfg, err, sizeof err) ||
        config_finalize(&cli->cfg, err, sizeof err) || model_hf_check(&cli->cfg, err, sizeof err))
        return pp_error("%s", err), PP_EUSAGE;
    return PP_OK;
}

static char *config_text(const Config *c) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    config_print(c, f);
    fclose(f);
    return buf;
}

/* Build report: what this rank holds and allocated, and on which device. */
static void report_build(const Runtime *rt) {
    const Model *m = &rt->model;
    const Backend *be = m->be;
    size_t pbytes = m->nparams * sizeof(float);
    printf("rank %d: device %s\n", rt->lay.rank, rt->device_note);
    /* every rank chose alike */
    if (rt->lay.rank == 0) printf("transport: %s\n", rt->transport_note);
    if (rt->lay.rank == 0) { /* [Note: rank layout] */
        char lay[1024];
        layout_describe(&rt->lay, lay, sizeof lay);
        printf("%s\n", lay);
        /* [Note: architecture costs]: what the MFU and make bench count */
        printf("model: %s, %zu parameters, %.0f training FLOPs per token at T = %d (forward and "
               "backward, the embedding not counted)\n",
               m->d.arch->name, model_total_params(&m->d),
               model_train_flops_per_token(&m->d, rt->T), rt->T);
        char data[3 * PP_PATH_MAX]; /* [Note: shard streams] in data_stream.c */
        for (const DataStream *d = &rt->train; d <= &rt->val; d++) {
            if (!d->nshards) continue; /* no data.val, or not this rank's to read */
            data_stream_describe(d, data, sizeof data);
            printf("%s\n", data);
        }
    }
    if (be->device_memory && be->memory) { /* what this rank holds on its GPU */
        size_t alloc = 0, ws = 0, named = (2 + m->nopt) * pbytes + m->act_bytes + m->recv_bytes;
        be->memory(be, &alloc, &ws);
        printf("rank %d: GPU memory: params %.1f MB + grads %.1f MB + optimizer %.1f MB + "
               "activations %.1f MB + scratch %.1f MB + workspace %.1f MB = %.1f MB\n",
               rt->lay.rank, pbytes / 1e6, pbytes / 1e6, m->nopt * pbytes / 1e6,
               (m->act_bytes + m->recv_bytes) / 1e6, (alloc > named ? alloc - named : 0) / 1e6,
               ws / 1e6, (alloc + ws) / 1e6);
    }
    if (rt->staging_bytes)
        printf("rank %d: host staging buffers %.1f MB (the transport's copies of device buffers)\n",
               rt->lay.rank, rt->staging_bytes / 1e6);
    if (rt->init_hf) /* model.init_from a Hugging Face directory: this rank's share */
        printf("rank %d: model.init_from %s: read %llu of the directory's %llu tensor bytes "
               "(this rank's stages) and %llu header bytes\n",
               rt->lay.rank, rt->cfg->init_from, (unsigned long long)rt->init_read.read,
               (unsigned long long)rt->init_read.total, (unsigned long long)rt->init_read.headers);
    printf("rank %d: stages", rt->lay.rank);
    for (int c = 0; c < m->nchunks; c++)
        printf(" %d (layers %d-%d, %d slots)", m->chunks[c].stage, m->chunks[c].l0,
               m->chunks[c].l1 - 1, m->chunks[c].nslots);
    printf(" | params %zu (%.1f MB) + grads %.1f MB + optimizer %.1f MB + activations %.1f MB + "
           "receive buffers %.1f MB\n",
           m->nparams, pbytes / 1e6, pbytes / 1e6, m->nopt * pbytes / 1e6, m->act_bytes / 1e6,
           m->recv_bytes / 1e6);
}

/* [Note: stopping on a signal] SIGTERM and SIGUSR1 (SLURM's --signal=USR1@120
 * preemption notice) and a first SIGINT only set a flag; the flag rides on every
 * step's all-reduce, so all ranks see it after the same step, save a checkpoint
 * together and exit (0; 130 for SIGINT). A second SIGINT exits at once. Before the
 * first step, SIGTERM and SIGINT end the rank at once instead: [Note: a signal during
 * setup]. */
static volatile sig_atomic_t g_stop_signal;

/* [Note: a signal during setup] Until setup_done(), just before the run's first change
 * to output.dir, SIGTERM or SIGINT ends the rank from the handler itself: one line on
 * stderr ("pptrain: rank 1: SIGTERM during setup (before the first step): stopping;
 * nothing trained, nothing to save") and _exit(128 + the signal): 143, 130. Nothing has
 * trained, so there is nothing to save, and the run is not done: not 0, which tells a
 * launcher and the batch script "finished" or "saved". Non-zero also makes pprun (SIGTERM:
 * they stop the same way), torchrun and srun --kill-on-bad-exit end the other ranks at
 * once (a rank still in the rendezvous cannot tell a dead rank 0 from a slow
 * one and would wait runtime.timeout_s); a rank already past its setup finds the
 * connection gone and exits 1 naming this rank. SIGUSR1 stays a notice with time to
 * spare: the run goes on to its first step and saves then.
 * Why the handler and not a flag that setup polls: setup is long in modules that know
 * nothing of ranks or signals (the rendezvous, blocked in poll(2) under SA_RESTART; the
 * token files' check, an OpenMP loop; the Hugging Face import; the load of the
 * checkpoint to resume from), and a poll would have to reach into each loop and would
 * still miss a blocking call. Exiting there is safe because setup writes nothing that
 * could be left partial: it reads (config, weights, tokens, checkpoint), takes
 * output.dir's lock (whose file stays in any case, [Note: output.dir lock]) and removes
 * a stale trace part; the previous run's interrupted marker is removed only after
 * setup_done, so that it stays when this run stops in setup. The kernel drops the lock
 * and closes the sockets; write(2) and _exit(2) are async-signal-safe, and so is
 * flight_before_exit, which keeps a flight record being dumped on another thread
 * (SIGUSR2) from being left half-written. The stop of a run that has started (the flag
 * above) is unchanged. */
static volatile sig_atomic_t g_in_setup;
static char g_setup_msg[2][160]; /* for SIGINT, SIGTERM: written whole by the handler */
static size_t g_setup_len[2];

static void on_signal(int sig) {
    if (g_in_setup && (sig == SIGINT || sig == SIGTERM)) {
        int k = sig == SIGTERM;
        ssize_t w = write(2, g_setup_msg[k], g_setup_len[k]);
        (void)w;
        flight_before_exit();
        _exit(128 + sig);
    }
    if (sig == SIGINT && g_stop_signal == SIGINT) _exit(130);
    g_stop_signal = sig;
}

/* Handle the stop signals for `rank`, in setup until setup_done(). */
static void install_signals(int rank) {
    struct sigaction sa;
    for (int k = 0; k < 2; k++)
        g_setup_len[k] = (size_t)snprintf(g_setup_msg[k], sizeof g_setup_msg[k],
                                          "pptrain: rank %d: %s during setup (before the first "
                                          "step): stopping; nothing trained, nothing to save\n",
                                          rank, k ? "SIGTERM" : "SIGINT");
    g_in_setup = 1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* any thread may take it: its system calls just go on */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* a launcher that died leaves stdout a broken pipe: keep going (and checkpoint on the
     * SIGTERM that pprun's pdeathsig sends) instead of dying in a printf */
    signal(SIGPIPE, SIG_IGN);
}

/* The end of setup: from here a stop signal sets the flag ([Note: stopping on a signal]). */
static void setup_done(void) { g_in_setup = 0; }

enum { CTL_STOP, CTL_SAVED, CTL_N };

/* [Note: the interrupted marker] A run that stops on a signal after saving its checkpoint
 * exits 0 like a finished one (DESIGN.md §4), so that SLURM records it COMPLETED. What
 * tells the two apart is the file output.dir/interrupted: rank 0 removes it when a run
 * starts and writes it (one line: the signal and the step) once the checkpoint of a
 * stop on a signal is committed. So exit 0 with the file present means "saved on a
 * signal, resume me"; exit 0 without it, "done". scripts/slurm/pptrain.sbatch requeues
 * on exactly that (docs/launching.md). */
#define INTERRUPTED_FILE "interrupted"

/* Rank 0: remove (step < 0) or write output.dir/interrupted. */
static int mark_interrupted(const Config *cfg, int rank, int step, int sig, char *err,
                            size_t errlen) {
    char path[PP_PATH_MAX + 16];
    PPFile pf;
    int rc;
    if (rank != 0) return PP_OK;
    snprintf(path, sizeof path, "%s/%s", cfg->out_dir, INTERRUPTED_FILE);
    if (step < 0) {
        if (unlink(path) != 0 && errno != ENOENT)
            return pp_errf(err, errlen, PP_ERUNTIME, "cannot remove %s: %s", path, strerror(errno));
        return PP_OK;
    }
    if ((rc = pp_file_create(&pf, path, ".tmp", err, errlen))) return rc;
    fprintf(pf.f, "stopped on %s after step %d; resume from checkpoints/latest\n",
            sig == SIGUSR1 ? "SIGUSR1" : sig == SIGTERM ? "SIGTERM" : "SIGINT", step);
    return pp_file_commit(&pf, err, errlen);
}

/* [Note: diverged weights] A checkpoint is committed only when the loss of its weights
 * is known to be finite, so that `latest` always resumes. The save after step k (the
 * weights after k updates) is committed after step k+1, whose loss is of those weights
 * (runtime_step fails on a non-finite one), or after a finite validation loss at step
 * k. Weights no step uses (the end of the run, a stop on a signal) are checked by the
 * validation at that step or else by one forward pass (runtime_check_loss) over the
 * batch a resumed run starts with. A non-finite loss ends the run with exit 1; a save
 * of weights already known good is committed first. */

/* End the run with error rc, first committing a pending save of weights known good
 * (those after at most `good` steps). */
static int fail_keeping_good(CkptState *ck, Runtime *rt, long good, int rc) {
    char err[PP_ERR_MAX];
    if (ck->pending >= 0 && ck->pending <= good && ckpt_state_finish(ck, rt, err, sizeof err))
        pp_error("%s", err);
    return rc;
}

/* End the run with error rc. When it is a batch that could not be read ([Note: a batch
 * that cannot be read] in runtime.c), `loss` is that of the weights after `w` steps on a
 * stand-in batch: when it is finite, they are the last good step's and are saved (unless
 * `saved` says the run started from them or their save is pending, then committed);
 * otherwise a pending save of weights known good (after at most `good` steps) is. */
static int fail_on_batch(CkptState *ck, Runtime *rt, long good, int w, int saved, double loss,
                         int rc, char *err, size_t errlen) {
    char why[PP_ERR_MAX];
    if (!rt->data_failed) return rc;
    if (!isfinite(loss) || saved || ck->pending == w)
        return fail_keeping_good(ck, rt, isfinite(loss) ? w : good, rc);
    if (ckpt_state_save(ck, rt, w, 1, why, sizeof why) != PP_OK) return pp_error("%s", why), rc;
    pp_strappendf(err, errlen,
                  "; the weights after step %d are saved: continue with --resume once it "
                  "is restored", w);
    return rc;
}

/* Make sure the weights after `step` steps have a finite loss (*good == step: known). */
static int check_weights(CkptState *ck, Runtime *rt, int step, long *good, char *err,
                         size_t errlen) {
    double loss;
    int rc;
    if (*good == step) return PP_OK;
    if ((rc = runtime_check_loss(rt, step, &loss, err, errlen)))
        return fail_on_batch(ck, rt, *good, step, 0, loss, rc, err, errlen);
    if ((rc = runtime_check_finite(rt, step, "the loss of the weights after it (on the next batch)",
                                   loss, err, errlen)))
        return fail_keeping_good(ck, rt, *good, rc);
    *good = step;
    return PP_OK;
}

/* The end of the run: the final checkpoint unless output.checkpoint_final is false (a
 * periodic save still pending is committed), or nothing if resumed at the end already;
 * then its sample ([Note: samples while training] in sample.h). */
static int finish_run(const Config *cfg, Runtime *rt, CkptState *ck, SampleTrain *st, int start,
                      long good, char *err, size_t errlen) {
    /* steps 0: convert init_from */
    int rc, trained = start < cfg->steps, convert = cfg->steps == 0 && start == 0;
    if (!trained && !convert) {
        if (rt->lay.rank == 0)
            printf("nothing to do: the checkpoint has %d steps, train.steps is %d (raise "
                   "train.steps to go on)\n",
                   start, cfg->steps);
        return ckpt_state_finish(ck, rt, err, errlen);
    }
    if (trained && (cfg->checkpoint_final || ck->pending == cfg->steps) &&
        (rc = check_weights(ck, rt, cfg->steps, &good, err, errlen)))
        return rc;
    if (cfg->checkpoint_final) {
        if ((rc = ckpt_state_save(ck, rt, cfg->steps, 1, err, errlen))) return rc;
        sample_train_after_save(st, cfg->steps);
        return PP_OK;
    }
    if (rt->lay.rank == 0 && ck->pending != cfg->steps)
        printf("no checkpoint at the end of the run (output.checkpoint_final is false)\n");
    return ckpt_state_finish(ck, rt, err, errlen);
}

/* The training loop from step `start` on; checkpoints (and samples) as configured. */
static int train_loop(const Config *cfg, Runtime *rt, CkptState *ck, Log *log, SampleTrain *st,
                      int start, char *err, size_t errlen) {
    double tokens = (double)cfg->batch_size * cfg->seq_len;
    /* the weights after this many steps have a finite loss ([Note: diverged weights]) */
    long good = -1;
    int rc = PP_OK, step;
    for (step = start; step < cfg->steps; step++) {
        StepResult r = {0};
        double ctl[CTL_N] = {g_stop_signal != 0, ck->pending >= 0 && ckpt_state_idle(ck)};
        if ((rc = runtime_step(rt, step, ctl, CTL_N, &r, err, errlen)))
            return fail_on_batch(ck, rt, good, step, step == start, r.loss, rc, err, errlen);
        good = step;
        /* the first step warms up */
        if (step > start || cfg->steps - start == 1) runtime_measure(rt);
        if ((step + 1) % cfg->log_every == 0 || step + 1 == cfg->steps) {
            double bubble, wait, peak_mb;
            log_step(log, step + 1, r.loss, r.lr, r.grad_norm, tokens / rt->step_s,
                     rt->step_s * 1e3);
            summary_step(rt, &bubble, &wait, &peak_mb);
            log_rank(log, step + 1, bubble, wait, peak_mb);
        }
        if (rt->has_val && ((step + 1) % cfg->val_every == 0 || step + 1 == cfg->steps)) {
            double vl;
            if ((rc = runtime_validate(rt, cfg->val_batches, &vl, err, errlen)))
                return fail_on_batch(ck, rt, good, step + 1, 0, vl, rc, err, errlen);
            log_val(log, step + 1, vl);
            if ((rc = runtime_check_finite(rt, step + 1, "validation loss", vl, err, errlen)))
                return fail_keeping_good(ck, rt, good, rc);
            good = step + 1;
        }
        if (rt->trace) trace_flush(rt->trace);
        if (ctl[CTL_SAVED] == rt->lay.world && (rc = ckpt_state_finish(ck, rt, err, errlen)))
            return rc;
        if (ctl[CTL_STOP] > 0) {
            if (rt->lay.rank == 0)
                printf("stopping on a signal after step %d: saving a checkpoint\n", step + 1);
            if ((rc = check_weights(ck, rt, step + 1, &good, err, errlen))) return rc;
            rc = ckpt_state_save(ck, rt, step + 1, 1, err, errlen);
            if (rc == PP_OK)
                rc = mark_interrupted(cfg, rt->lay.rank, step + 1, g_stop_signal, err, errlen);
            return rc ? rc : g_stop_signal == SIGINT ? 130 : PP_OK;
        }
        /* the last step's weights are saved by the final checkpoint, if there is one */
        if (cfg->checkpoint_every > 0 && (step + 1) % cfg->checkpoint_every == 0 &&
            (step + 1 < cfg->steps || !cfg->checkpoint_final)) {
            if ((rc = ckpt_state_save(ck, rt, step + 1, 0, err, errlen))) return rc;
            sample_train_after_save(st, step + 1);
        }
    }
    return finish_run(cfg, rt, ck, st, start, good, err, errlen);
}

/* --resume-if-present: every rank looks for output.dir/checkpoints/latest and they
 * agree: resume from it ("") when all see it, start fresh (NULL) when none does. A run
 * that had finished resumes at its last step and has nothing to do (finish_run). */
static int resume_choice(const CkptState *ck, Comm *comm, const char **resume, char *err,
                         size_t errlen) {
    char latest[sizeof ck->root + 8];
    struct stat st;
    double seen;
    int rc, world = comm->world;
    snprintf(latest, sizeof latest, "%s/latest", ck->root);
    seen = lstat(latest, &st) == 0;
    if ((rc = comm_allreduce_sum_f64(comm, &seen, 1)))
        return pp_errf(err, errlen, rc, "agreeing on --resume-if-present: %s", comm_error(comm));
    if (seen > 0 && seen < world)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "--resume-if-present: %s exists for %d of %d ranks "
                       "— output.dir must be on a file system that every rank shares",
                       latest, (int)seen, world);
    *resume = seen > 0 ? "" : NULL;
    if (!*resume && comm->rank == 0) printf("no checkpoint at %s: starting a fresh run\n", latest);
    return PP_OK;
}

/* Rank 0 takes output.dir's lock ([Note: output.dir lock] in outdir.c) and every rank
 * returns its status, so that all ranks of a second run on the directory exit 2. */
static int lock_outdir(const char *dir, Comm *comm, OutdirLock *lock, char *err, size_t errlen) {
    int rc = comm->rank == 0 ? outdir_lock(lock, dir, err, errlen) : PP_OK;
    double status = rc;
    if (comm_allreduce_sum_f64(comm, &status, 1))
        return pp_errf(err, errlen, PP_ERUNTIME, "agreeing on the lock of output.dir: %s",
                       comm_error(comm));
    if (rc == PP_OK && status == PP_EUSAGE)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "output.dir '%s' is in use by another run (rank 0 names it)", dir);
    if (rc == PP_OK && status != PP_OK)
        return pp_errf(err, errlen, PP_ERUNTIME,
                       "rank 0 could not lock output.dir '%s' (see its message)", dir);
    return rc;
}

/* The CPU threads: runtime.threads, or for 0 this rank's share of its affinity mask,
 * which it divides only with the ranks of its node whose masks overlap it ([Note: thread
 * share] in cpuset.h; a collective of comm, as every rank has the same config). */
static int set_threads(const Config *cfg, Comm *comm, char *err, size_t errlen) {
    char why[PP_ERR_MAX / 2];
    CpuSet mine, *all;
    int threads = cfg->threads;
    if (threads <= 0) {
        all = pp_malloc(comm->world * sizeof *all);
        cpuset_mine(&mine);
        if (cpuset_exchange(comm, &mine, all) != PP_OK) {
            free(all);
            return pp_errf(err, errlen, PP_ERUNTIME, "exchanging the ranks' CPU affinity masks: %s",
                           comm_error(comm));
        }
        threads = cpuset_threads(comm->world, all, comm->rank, why, sizeof why);
        free(all);
        printf("rank %d: runtime.threads 0: %d compute thread(s) (%s)\n", comm->rank, threads, why);
    }
    backend_cpu_set_threads(threads); /* at most backend_cpu_cpus(), saying so */
    return PP_OK;
}

/* Whom this rank is blocked on in a collective, for the flight recorder ([Note: flight
 * recorder] in runtime/flight.c). */
static int flight_probe(const void *comm) { return comm_blocked_on(comm); }

static int train(const Config *cfg, const DistEnv *env, const char *resume, int resume_if_present) {
    char err[PP_ERR_MAX];
    int rc, rank = env->rank;
    if (pp_mkdirs(cfg->out_dir) != 0)
        return pp_error("cannot create output.dir '%s': %m", cfg->out_dir), PP_ERUNTIME;
    char *text = config_text(cfg);
    Comm *comm = NULL;
    install_signals(rank); /* before the rendezvous: [Note: a signal during setup] */
    FlightRec *flight = flight_create(cfg->out_dir, rank, env->world, cfg->flight_records);
    flight_signals(flight); /* SIGUSR2 and fatal signals write its file */
    rc = comm_create(env, text, cfg->timeout_s, &comm, err, sizeof err);
    if (rc) {
        setup_done();
        free(text);
        flight_signals(NULL);
        flight_destroy(flight);
        return pp_error("%s", err), rc;
    }
    flight_set_probe(flight, flight_probe, comm);
    Trace *trace = NULL;
    Runtime rt = {0}; /* rt.cfg is set by runtime_init: out: frees only what was built */
    CkptState ck = {0};
    Log log = {0};
    OutdirLock lock = {.fd = -1};
    SampleTrain *st = NULL;
    long start = 0;
    if ((rc = set_threads(cfg, comm, err, sizeof err))) goto out;
    /* before any write there */
    if ((rc = lock_outdir(cfg->out_dir, comm, &lock, err, sizeof err))) goto out;
    trace = cfg->trace ? trace_create(cfg->out_dir, rank) : NULL;
    if ((rc = runtime_init(&rt, cfg, comm, trace, err, sizeof err))) goto out;
    rt.flight = flight;
    report_build(&rt);
    ckpt_state_init(&ck, &rt, text);
    if (resume_if_present && (rc = resume_choice(&ck, comm, &resume, err, sizeof err))) goto out;
    if (!resume && (rc = ckpt_state_refuse_existing(&ck, &rt, err, sizeof err))) goto out;
    if (resume) {
        char root[PP_PATH_MAX + 16];
        snprintf(root, sizeof root, "%s/checkpoints", cfg->out_dir);
        if ((rc = ckpt_state_load(&rt, resume[0] ? resume : root, &start, err, sizeof err)))
            goto out;
        if (rank == 0) printf("resumed from %s at step %ld\n", resume[0] ? resume : root, start);
    }
    setup_done(); /* before the run's first change to output.dir: [Note: a signal during setup] */
    if ((rc = mark_interrupted(cfg, rank, -1, 0, err, sizeof err))) goto out;
    if (rt.chunk_of[rt.S - 1] >= 0 && rt.lay.dp == 0 &&
        (rc = log_open(&log, cfg->out_dir, cfg->steps, (int)start, resume != NULL, err,
                       sizeof err)))
        goto out;
    if (cfg->tensorboard && (rc = log_open_tb(&log, cfg->out_dir, rank, env->world,
                                              resume ? start : -1, err, sizeof err)))
        goto out;
    log.mfu_flops = summary_mfu_flops(&rt); /* model FLOPs as GPU.md counts them */
    st = sample_train_create(cfg, &rt.model, env->world, rank, (int)start);
    if ((rc = train_loop(cfg, &rt, &ck, &log, st, (int)start, err, sizeof err)) && rc != 130)
        goto out;
    int rc2 = runtime_report(&rt, err, sizeof err);
    if (rc2 == PP_OK) rc2 = summary_report(&rt, err, sizeof err);
    if (rc2 == PP_OK) rc2 = runtime_check_tied(&rt, err, sizeof err);
    if (rc2) {
        rc = rc2;
        goto out;
    }
    if (trace) {
        if (comm_barrier(comm) != PP_OK) {
            rc = pp_errf(err, sizeof err, PP_ERUNTIME, "barrier before merging the trace: %s",
                         comm_error(comm));
            goto out;
        }
        if (rank == 0 && trace_merge(cfg->out_dir, env->world) == 0)
            printf("wrote %s/trace.json\n", cfg->out_dir);
    }
out:
    setup_done(); /* an error in setup: a signal now only sets the flag, the run ends anyway */
    if (rc == PP_ERUNTIME) flight_fail(flight, err, sizeof err); /* names the file in err */
    if (rc && rc != 130) pp_error("%s", err);
    log_close(&log);
    flight_set_probe(flight, NULL, NULL); /* before the Comm it asks goes */
    comm_destroy(comm); /* first: its thread may still write into posted receive buffers */
    if (ck.writer) ckpt_state_free(&ck);
    sample_train_free(st); /* before the model it decodes on */
    if (rt.cfg) runtime_free(&rt);
    trace_destroy(trace);
    outdir_unlock(&lock); /* last: the checkpoint writers and the log are done with output.dir */
    flight_signals(NULL);
    flight_destroy(flight);
    free(text);
    return rc;
}

/* Run what the parsed command line asks for; returns the exit code. */
static int dispatch(Cli *cli, int sub) {
    if (sub) {
        memmove(cli->rest_argv + 1, cli->rest_argv, (cli->rest_argc + 1) * sizeof(char *));
        cli->rest_argv[0] = "schedule";
        return plan_cmd_main(&cli->cfg, cli->rest_argc + 1, cli->rest_argv);
    }
    if (cli->rest_argc > 0) /* before --print-config: it takes no word either */
        return pp_error("unknown argument '%s'\n%s", cli->rest_argv[0], usage), PP_EUSAGE;
    if (cli->print_config) return config_print(&cli->cfg, stdout), PP_OK;
    char err[PP_ERR_MAX];
    DistEnv env;
    int env_rc = dist_env_read(&env, err, sizeof err);
    /* the rank, once known, prefixes every message, an error in the rest of the
     * environment too ("[rank 3] error: MASTER_ADDR is not set") */
    if (env.world > 1 && env.rank >= 0 && env.rank < env.world) pp_set_rank(env.rank);
    if (env_rc) return pp_error("%s", err), PP_EUSAGE;
    return train(&cli->cfg, &env, cli->resume, cli->resume_if_present);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "prepare-data")) return prep_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "export")) return ckpt_state_export_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "plot")) return plot_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "flight")) return flight_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "sample")) return sample_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        if (argc > 2)
            return pp_error("--version takes no argument, not '%s'", argv[2]), PP_EUSAGE;
        printf("pptrain %s\n", PP_VERSION);
        backend_print_builtin(stdout);
        plot_print_builtin(stdout);
        return PP_OK;
    }
    if (argc < 2) return pp_error("no arguments: a run needs --config FILE\n%s", usage), PP_EUSAGE;
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return fputs(usage, stdout), PP_OK;
    int sub = !strcmp(argv[1], "schedule");
    if (!sub && argv[1][0] != '-') /* a run's arguments are options; this is no command */
        return pp_error("unknown command '%s'\n%s", argv[1], usage), PP_EUSAGE;
    if (sub && argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        plan_cmd_usage(stdout);
        return PP_OK;
    }
    Cli cli = {0};
    int rc = cli_parse(&cli, argc - 1 - sub, argv + 1 + sub);
    if (rc == PP_OK) rc = dispatch(&cli, sub);
    free(cli.rest_argv);
    return rc;
}
