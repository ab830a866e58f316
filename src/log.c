/* log.c — progress lines and losses.csv. */
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
}

void log_val(Log *l, int step, double loss) {
    if (!l->csv) return;
    printf("step %d | val loss %.4f\n", step, loss);
    fflush(stdout);
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
}
