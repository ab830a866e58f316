/* log.c — progress lines, losses.csv and the TensorBoard scalars. */
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#define CSV_HEADER "step,loss,lr,grad_norm,tokens_per_s,step_ms"
#define VAL_HEADER "step,val_loss"

/* Keep the header and the rows with step <= last of an existing csv (rewritten whole,
 * [Note: atomic file writes] in common.c). */
static int truncate_after(const char *path, int last, char *err, size_t errlen) {
    char *text;
    size_t len;
    if (pp_read_file(path, NULL, &text, &len, err, errlen) != PP_OK)
        return errno == ENOENT ? PP_OK : PP_ERUNTIME; /* a missing file: nothing to keep */
    PPFile pf;
    int rc = pp_file_create(&pf, path, NULL, err, errlen);
    for (char *line = text, *next; rc == PP_OK && *line; line = next) {
        next = line + strcspn(line, "\n");
        next += *next == '\n';
        if (!strncmp(line, "step,", 5) || atoi(line) <= last)
            fwrite(line, 1, (size_t)(next - line), pf.f);
    }
    free(text);
    return rc == PP_OK ? pp_file_commit(&pf, err, errlen) : rc;
}

int log_open(Log *l, const char *dir, int steps, int first_step, int append, char *err,
             size_t errlen) {
    char path[PP_PATH_MAX + 16];
    memset(l, 0, sizeof *l);
    l->steps = steps;
    l->first_step = first_step;
    l->t_start = pp_now();
    snprintf(path, sizeof path, "%s/losses.csv", dir);
    if (append) {
        int rc = truncate_after(path, first_step, err, errlen);
        if (rc) return rc;
    }
    /* val_losses.csv: on resume kept up to first_step as above; else a stale one removed */
    size_t n = strlen(dir) + sizeof "/val_losses.csv";
    l->val_path = pp_malloc(n);
    snprintf(l->val_path, n, "%s/val_losses.csv", dir);
    if (append) {
        int rc = truncate_after(l->val_path, first_step, err, errlen);
        if (rc) return rc;
    } else if (unlink(l->val_path) != 0 && errno != ENOENT) {
        return pp_errf(err, errlen, PP_ERUNTIME, "cannot remove %s: %s", l->val_path,
                       strerror(errno));
    }
    l->csv = pp_fopen_regular(path, append ? "a" : "w", "check output.dir", err, errlen);
    if (!l->csv) return PP_ERUNTIME;
    if (ftell(l->csv) == 0) fprintf(l->csv, CSV_HEADER "\n");
    fflush(l->csv);
    return PP_OK;
}

int log_open_tb(Log *l, const char *dir, int rank, int world, long resumed_at, char *err,
                size_t errlen) {
    char path[PP_PATH_MAX + 16];
    int digits = 2; /* rank_00 .. rank_99, wider for more ranks: the tags sort by rank */
    for (int w = world - 1; w >= 100; w /= 10) digits++;
    snprintf(l->rank_tag, sizeof l->rank_tag, "rank_%0*d", digits, rank);
    snprintf(path, sizeof path, "%s/tb", dir);
    return tb_open(&l->tb, path, rank, world, resumed_at, err, errlen);
}

/* One TensorBoard event; a failed write is reported once and ends the event file (the
 * run goes on: its scalars are in losses.csv and on stdout too). */
static void tb_event(Log *l, int step, const TbScalar *v, int n) {
    char err[PP_ERR_MAX];
    if (!l->tb || tb_write(l->tb, step, v, n, err, sizeof err) == PP_OK) return;
    pp_warn("%s; TensorBoard events are no longer written (the run goes on)", err);
    tb_close(l->tb);
    l->tb = NULL;
}

static void fmt_eta(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void log_step(Log *l, int step, double loss, float lr, double grad_norm, double tokens_per_s,
              double step_ms) {
    if (!l->csv) return;
    fprintf(l->csv, "%d,%.17g,%.9g,%.17g,%.1f,%.3f\n", step, loss, lr, grad_norm,
            tokens_per_s, step_ms);
    fflush(l->csv);
    char eta[32];
    double per = (pp_now() - l->t_start) / (step - l->first_step);
    fmt_eta(per * (l->steps - step), eta, sizeof eta);
    char mfu[32] = "";
    if (l->mfu_flops > 0)
        snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100.0 * tokens_per_s * l->mfu_flops);
    printf("step %*d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s%s | %.1f ms | eta %s\n",
           (int)snprintf(NULL, 0, "%d", l->steps), step, l->steps, loss, lr, grad_norm,
           tokens_per_s, mfu, step_ms, eta);
    fflush(stdout);
    TbScalar v[6] = {{"train/loss", (float)loss},
                     {"train/lr", lr},
                     {"train/grad_norm", (float)grad_norm},
                     {"perf/tokens_per_s", (float)tokens_per_s},
                     {"perf/step_ms", (float)step_ms},
                     {"perf/mfu", (float)(tokens_per_s * l->mfu_flops)}};
    tb_event(l, step, v, l->mfu_flops > 0 ? 6 : 5);
}

void log_rank(Log *l, int step, double bubble, double wait, double peak_mb) {
    char tag[3][48];
    TbScalar v[3];
    int n = 0;
    if (!l->tb) return;
    snprintf(tag[0], sizeof tag[0], "%s/peak_memory_mb", l->rank_tag);
    v[n++] = (TbScalar){tag[0], (float)peak_mb};
    if (bubble >= 0) {
        snprintf(tag[1], sizeof tag[1], "%s/bubble_fraction", l->rank_tag);
        snprintf(tag[2], sizeof tag[2], "%s/transfer_wait_fraction", l->rank_tag);
        v[n++] = (TbScalar){tag[1], (float)bubble};
        v[n++] = (TbScalar){tag[2], (float)wait};
    }
    tb_event(l, step, v, n);
}

void log_val(Log *l, int step, double loss) {
    if (!l->csv) return;
    printf("step %d | val loss %.4f\n", step, loss);
    fflush(stdout);
    TbScalar v = {"val/loss", (float)loss};
    tb_event(l, step, &v, 1);
    if (!l->val_csv && l->val_path) {
        char err[PP_ERR_MAX];
        l->val_csv = pp_fopen_regular(l->val_path, "a", "check output.dir", err, sizeof err);
        if (!l->val_csv)
            pp_warn("%s; the run goes on without it", err);
        else if (ftell(l->val_csv) == 0)
            fprintf(l->val_csv, VAL_HEADER "\n");
        free(l->val_path);
        l->val_path = NULL;
    }
    if (!l->val_csv) return;
    fprintf(l->val_csv, "%d,%.17g\n", step, loss);
    fflush(l->val_csv);
}

void log_close(Log *l) {
    if (l->csv) fclose(l->csv);
    if (l->val_csv) fclose(l->val_csv);
    free(l->val_path);
    l->csv = l->val_csv = NULL;
    l->val_path = NULL;
    tb_close(l->tb);
    l->tb = NULL;
}
