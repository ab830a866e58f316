/* plot.c — `pptrain plot` (plot.h): the arguments, the runs, the file; the plot module's
 * entry points. */
#include "plot/plot.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "plot/plot_data.h"
#include "plot/plot_draw.h"

typedef struct {
    const char *out;
    char out_default[PP_PATH_MAX + 16];
    int png; /* else SVG */
    int x_tokens, log_y, no_lr;
    int nruns;
    const char **dirs; /* [nruns] */
} PlotArgs;

static void plot_usage(FILE *f) {
    fputs("usage: pptrain plot RUN_DIR... [--out FILE.svg|FILE.png] [--x steps|tokens] [--log-y] "
          "[--no-lr]\n"
          "Draws the train and validation loss of runs (their output.dir's losses.csv and\n"
          "val_losses.csv) against steps and tokens, the learning rate on a right axis, one\n"
          "colour per run.\n"
          "  --out FILE        .svg or .png (default RUN_DIR/loss.svg with one run; needed with "
          "several)\n"
          "  --x steps|tokens  the bottom axis (steps); the other unit is on the top axis when\n"
          "                    every run trains the same tokens per step\n"
          "  --log-y           the loss on a log scale\n"
          "  --no-lr           no learning rate curves\n",
          f);
}

static int usage_error(const char *what, const char *arg) {
    pp_error("plot: %s%s", what, arg);
    plot_usage(stderr);
    return PP_EUSAGE;
}

/* Parse argv (argv[0] "plot"). Returns PP_OK, PP_EUSAGE (message printed) or -1 for
 * --help (usage printed). a->dirs is malloc'd. */
static int parse(PlotArgs *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->dirs = pp_calloc(argc, sizeof *a->dirs);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return plot_usage(stdout), -1;
        if (!strcmp(arg, "--out") || !strcmp(arg, "--x")) {
            if (i + 1 >= argc) return usage_error("a value is needed after ", arg);
            const char *v = argv[++i];
            if (!strcmp(arg, "--out"))
                a->out = v;
            else if (!strcmp(v, "steps") || !strcmp(v, "tokens"))
                a->x_tokens = v[0] == 't';
            else
                return usage_error("--x is steps or tokens, not ", v);
        } else if (!strcmp(arg, "--log-y")) {
            a->log_y = 1;
        } else if (!strcmp(arg, "--no-lr")) {
            a->no_lr = 1;
        } else if (arg[0] == '-' && arg[1]) {
            return usage_error("unknown option ", arg);
        } else {
            a->dirs[a->nruns++] = arg;
        }
    }
    if (a->nruns == 0) return usage_error("no run directory given", "");
    if (!a->out && a->nruns > 1)
        return usage_error("--out FILE.svg|FILE.png is needed with several runs", "");
    if (!a->out) {
        snprintf(a->out_default, sizeof a->out_default, "%s/loss.svg", a->dirs[0]);
        a->out = a->out_default;
    }
    const char *base = strrchr(a->out, '/'), *ext;
    ext = strrchr(base ? base : a->out, '.');
    if (!ext || (strcasecmp(ext, ".svg") && strcasecmp(ext, ".png")))
        return usage_error("--out: the file name ends in .svg or .png: ", a->out);
    a->png = !strcasecmp(ext, ".png");
    return PP_OK;
}

/* Each run's legend name into names[r] (PP_PATH_MAX each): its directory's last part
 * (that of the real path for "." or ".."), or the directory as given for all when two
 * runs would have the same name. */
static void run_names(const PlotRun *runs, int n, char (*names)[PP_PATH_MAX]) {
    char real[PATH_MAX];
    for (int r = 0; r < n; r++) {
        const char *d = runs[r].dir, *b = strrchr(d, '/');
        b = b && b[1] ? b + 1 : d;
        if ((!strcmp(b, ".") || !strcmp(b, "..")) && realpath(d, real)) {
            b = strrchr(real, '/');
            b = b && b[1] ? b + 1 : real;
        }
        snprintf(names[r], PP_PATH_MAX, "%.*s", PP_PATH_MAX - 1, b);
    }
    for (int r = 0; r < n; r++)
        for (int q = r + 1; q < n; q++)
            if (!strcmp(names[r], names[q])) {
                for (int i = 0; i < n; i++) snprintf(names[i], PP_PATH_MAX, "%s", runs[i].dir);
                return;
            }
}

static cairo_status_t write_out(void *closure, const unsigned char *data, unsigned int len) {
    PPFile *pf = closure;
    return fwrite(data, 1, len, pf->f) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

/* Draw s into a->out: the temporary file, committed only when cairo succeeded. */
static int write_picture(const PlotArgs *a, const PlotSpec *s, char *err, size_t errlen) {
    PPFile pf;
    int rc = pp_file_create(&pf, a->out, NULL, err, errlen);
    if (rc) return rc;
    cairo_surface_t *sf =
        a->png ? cairo_image_surface_create(CAIRO_FORMAT_ARGB32, PLOT_WIDTH, PLOT_HEIGHT)
               : cairo_svg_surface_create_for_stream(write_out, &pf, PLOT_WIDTH, PLOT_HEIGHT);
    if (!a->png) cairo_svg_surface_set_document_unit(sf, CAIRO_SVG_UNIT_PX);
    cairo_t *cr = cairo_create(sf);
    plot_draw(cr, PLOT_WIDTH, PLOT_HEIGHT, s);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st == CAIRO_STATUS_SUCCESS && a->png)
        st = cairo_surface_write_to_png_stream(sf, write_out, &pf);
    cairo_surface_finish(sf); /* the SVG is written here */
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(sf);
    cairo_surface_destroy(sf);
    if (st != CAIRO_STATUS_SUCCESS) {
        pp_file_abort(&pf);
        return pp_errf(err, errlen, PP_ERUNTIME, "writing %s failed: %s", a->out,
                       cairo_status_to_string(st));
    }
    return pp_file_commit(&pf, err, errlen);
}

/* The tokens per step every run trains (> 0), or 0 with a note why there is no axis of
 * the other unit when some run has tokens. */
static double shared_tokens_per_step(const PlotRun *runs, int n) {
    double tps = runs[0].tokens_per_step;
    for (int r = 0; r < n; r++) {
        if (!runs[r].tokens) {
            printf("plot: %s/losses.csv:%d gives no tokens (tokens_per_s and step_ms): no tokens "
                   "axis\n",
                   runs[r].dir, runs[r].tokens_line);
            return 0;
        }
        if (runs[r].tokens_per_step != tps) tps = 0;
    }
    if (tps == 0)
        printf("plot: the tokens per step are not the same in every row of every run: no "
               "second x axis\n");
    return tps;
}

/* A loss for the summary: 4 decimals, or 4 digits where that would print hundreds of them
 * (a diverged run's 1e308). */
static const char *loss_text(double v, char *buf, size_t n) {
    snprintf(buf, n, fabs(v) < 1e6 || !isfinite(v) ? "%.4f" : "%.4g", v);
    return buf;
}

/* One line per run: steps, tokens, first and last loss, last validation loss. */
static void summarize(const PlotRun *runs, const char (*names)[PP_PATH_MAX], int n) {
    char a[32], b[32];
    for (int r = 0; r < n; r++) {
        const PlotRun *u = &runs[r];
        printf("  %s: %.0f steps", names[r], u->step[u->n - 1]);
        if (u->tokens && u->tokens_per_step > 0)
            printf(", %.0f tokens (%.0f per step)", u->tokens[u->n - 1], u->tokens_per_step);
        else if (u->tokens)
            printf(", %.0f tokens", u->tokens[u->n - 1]);
        printf(", loss %s -> %s", loss_text(u->loss[0], a, sizeof a),
               loss_text(u->loss[u->n - 1], b, sizeof b));
        if (u->nval)
            printf(", validation loss %s at step %.0f",
                   loss_text(u->val_loss[u->nval - 1], a, sizeof a), u->val_step[u->nval - 1]);
        printf("\n");
    }
}

int pp_plot_abi(void) { return PP_PLOT_ABI; }

int pp_plot_main(int argc, char **argv) {
    PlotArgs a;
    char err[PP_ERR_MAX];
    int rc = parse(&a, argc, argv), loaded = 0;
    if (rc) {
        free(a.dirs);
        return rc < 0 ? PP_OK : rc;
    }
    PlotRun *runs = pp_calloc(a.nruns, sizeof *runs);
    char(*names)[PP_PATH_MAX] = pp_malloc(a.nruns * sizeof *names);
    for (; rc == PP_OK && loaded < a.nruns; loaded++)
        rc = plot_run_load(&runs[loaded], a.dirs[loaded], err, sizeof err);
    if (rc) loaded--; /* the failed one is freed */
    for (int r = 0; rc == PP_OK && a.x_tokens && r < a.nruns; r++)
        if (!runs[r].tokens)
            rc = pp_errf(err, sizeof err, PP_EUSAGE,
                         "--x tokens: %s/losses.csv:%d gives no "
                         "tokens (tokens_per_s × step_ms / 1000 is not a count)",
                         runs[r].dir, runs[r].tokens_line);
    if (rc == PP_OK) {
        run_names(runs, a.nruns, names);
        const char *label[a.nruns];
        for (int r = 0; r < a.nruns; r++) label[r] = names[r];
        PlotSpec s = {runs, label, a.nruns, a.x_tokens, a.log_y, !a.no_lr, 0};
        s.shared_tps = shared_tokens_per_step(runs, a.nruns);
        rc = write_picture(&a, &s, err, sizeof err);
        if (rc == PP_OK) {
            printf("plot: wrote %s\n", a.out);
            summarize(runs, (const char(*)[PP_PATH_MAX])names, a.nruns);
        }
    }
    if (rc) pp_error("plot: %s", err);
    cairo_debug_reset_static_data(); /* cairo's and fontconfig's caches: no leak to see */
    FcFini();
    for (int r = 0; r < loaded; r++) plot_run_free(&runs[r]);
    free(runs);
    free(names);
    free(a.dirs);
    return rc;
}
