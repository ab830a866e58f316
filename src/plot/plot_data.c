/* plot_data.c — a run's losses.csv and val_losses.csv read for plotting (plot_data.h). */
#include "plot/plot_data.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CSV_MAX_FIELDS 64

/* [Note: tokens of a run] losses.csv has no token column, but two of its columns are
 * what a step's tokens (train.batch_size × train.seq_len, over all replicas) make:
 * tokens_per_s = tokens / step seconds and step_ms = step seconds × 1000 (log_step in
 * src/log.c). Their product / 1000 is the step's tokens up to the rounding of the two
 * printed values (%.1f and %.3f: tokens_per_s × 0.0005 ms + step_ms × 0.05 tokens/s, a
 * few tokens at millions of tokens a second). So each row gives a range, and consecutive
 * rows whose ranges share an integer are taken as one batch size: of the integers all of
 * them allow, the one the highest power of two divides (batch × sequence length), nearest
 * the shared range's middle; a row whose range shares none with the rows before it (a run
 * resumed with another batch size) starts a new batch size. Row i stands for the steps
 * after row i-1's up to its own (the first row for steps 1 to its own), so the tokens
 * after row i are the sum of (step[i] - step[i-1]) × its tokens per step. This keeps
 * `pptrain plot` a reader of the run's files alone: no config to find or parse. */

typedef struct {
    int rows;
    double **col; /* [nwant][rows]; col[k] NULL when the header lacks want[k] */
    int *line;    /* [rows] each row's line in the file */
} Csv;

static void csv_free(Csv *c, int nwant) {
    if (c->col)
        for (int k = 0; k < nwant; k++) free(c->col[k]);
    free(c->col);
    free(c->line);
    memset(c, 0, sizeof *c);
}

/* Split line (NUL-terminated, modified) at commas into f[]; returns the count, or
 * CSV_MAX_FIELDS + 1 when there are more. */
static int split(char *line, char **f) {
    int n = 0;
    for (char *p = line;; p++) {
        if (n == CSV_MAX_FIELDS) return n + 1;
        f[n++] = p;
        p += strcspn(p, ",");
        if (!*p) return n;
        *p = '\0';
    }
}

/* The header's fields (line 1): each want[k]'s index into idx[k] (-1 when absent; the
 * first nreq must be there). Returns the field count, or -1 with a message. */
static int csv_header(char *line, const char *path, const char *const *want, int nwant, int nreq,
                      int *idx, char *err, size_t errlen) {
    char *f[CSV_MAX_FIELDS];
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", line);
    int n = split(line, f);
    if (n > CSV_MAX_FIELDS)
        return pp_errf(err, errlen, -1, "%s:1: the header has over %d fields", path,
                       CSV_MAX_FIELDS);
    for (int k = 0; k < nwant; k++) {
        idx[k] = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(f[i], want[k])) idx[k] = i;
        if (idx[k] < 0 && k < nreq)
            return pp_errf(err, errlen, -1, "%s:1: the header '%s' has no '%s' column", path, copy,
                           want[k]);
    }
    return n;
}

/* One row (line `ln`, modified): the wanted fields as numbers into c's row r; the step
 * (want[0]) an integer >= 0 above the previous row's. Returns PP_OK or PP_EUSAGE. */
static int csv_row(Csv *c, int r, char *line, int ln, int nfields, const char *path,
                   const char *const *want, int nwant, const int *idx, char *err, size_t errlen) {
    char *f[CSV_MAX_FIELDS];
    int n = split(line, f);
    if (n != nfields)
        return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: %s%d fields, the header has %d", path, ln,
                       n > CSV_MAX_FIELDS ? "over " : "", n > CSV_MAX_FIELDS ? n - 1 : n, nfields);
    for (int k = 0; k < nwant; k++) {
        if (idx[k] < 0) continue;
        char *s = f[idx[k]], *end;
        double v = strtod(s, &end); /* inf and nan too: gaps in the curve */
        if (!*s || *end)
            return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: %s '%s' is not a number", path, ln,
                           want[k], s);
        c->col[k][r] = v;
    }
    double step = c->col[0][r];
    if (!(step >= 0) || step != floor(step) || step > 1e15)
        return pp_errf(err, errlen, PP_EUSAGE, "%s:%d: step '%s' is not a step number", path, ln,
                       f[idx[0]]);
    if (r > 0 && step <= c->col[0][r - 1])
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s:%d: step %.0f after step %.0f (steps must go "
                       "up)",
                       path, ln, step, c->col[0][r - 1]);
    c->line[r] = ln;
    return PP_OK;
}

/* Read the csv at path: want[0] (the step) .. want[nwant), the first nreq required.
 * Returns PP_OK (c->rows >= 1), or PP_EUSAGE with a message naming path (and the line),
 * *missing set when there is no such file. */
static int csv_load(Csv *c, const char *path, const char *const *want, int nwant, int nreq,
                    int *missing, char *err, size_t errlen) {
    char *text;
    size_t len;
    int idx[CSV_MAX_FIELDS], rc = PP_OK, nfields = 0, ln = 0;
    memset(c, 0, sizeof *c);
    *missing = 0;
    if (pp_read_file(path, NULL, &text, &len, err, errlen) != PP_OK) {
        *missing = errno == ENOENT;
        return PP_EUSAGE;
    }
    if (len == 0 || memchr(text, '\0', len)) {
        rc = pp_errf(err, errlen, PP_EUSAGE, "%s: %s", path,
                     len ? "holds a NUL byte: not a text file" : "empty file (no header)");
        free(text);
        return rc;
    }
    int cap = 1;
    for (size_t i = 0; i < len; i++) cap += text[i] == '\n';
    c->col = pp_calloc(nwant, sizeof *c->col);
    c->line = pp_malloc(cap * sizeof *c->line);
    for (char *line = text, *next; rc == PP_OK && line < text + len; line = next) {
        next = line + strcspn(line, "\n");
        int whole = *next == '\n'; /* else the file's last line, without its newline */
        if (whole) *next++ = '\0';
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\r') line[n - 1] = '\0'; /* CRLF */
        ln++;
        if (ln == 1) {
            nfields = csv_header(line, path, want, nwant, nreq, idx, err, errlen);
            if (nfields < 0) rc = PP_EUSAGE;
            for (int k = 0; rc == PP_OK && k < nwant; k++)
                if (idx[k] >= 0) c->col[k] = pp_malloc(cap * sizeof(double));
        } else if (!*line) {
            rc = pp_errf(err, errlen, PP_EUSAGE, "%s:%d: an empty line", path, ln);
        } else {
            rc = csv_row(c, c->rows, line, ln, nfields, path, want, nwant, idx, err, errlen);
            c->rows += rc == PP_OK;
            /* a last line without its newline that does not parse is a row being written
             * by a running job (stdio may write a row in two pieces): left out */
            if (rc && !whole) rc = PP_OK;
        }
    }
    free(text);
    if (rc == PP_OK && c->rows == 0)
        rc = pp_errf(err, errlen, PP_EUSAGE, "%s: a header and no rows", path);
    if (rc) csv_free(c, nwant);
    return rc;
}

/* The integer in [lo, hi] (lo <= hi, one there) that the highest power of two divides,
 * nearest the middle among those: a step's tokens are a batch times a sequence length,
 * nearly always a multiple of a large power of two, where a range of a few rows still
 * holds several integers. */
static double integer_in(double lo, double hi) {
    for (double p = 0x1p50; p >= 1; p /= 2) {
        double a = ceil(lo / p) * p, b = floor(hi / p) * p;
        if (a > b) continue;
        double t = round((lo + hi) / 2 / p) * p; /* the multiple nearest the middle */
        return t < a ? a : t > b ? b : t;
    }
    return round((lo + hi) / 2);
}

/* Each row's tokens per step from tokens_per_s and step_ms ([Note: tokens of a run]), or
 * r->tokens NULL and r->tokens_line at the first row that gives none. */
static void run_tokens(PlotRun *r, const double *tps, const double *ms, const int *line) {
    double total = 0, lo = 0, hi = 0;
    int same = 1, from = 0;
    double *per = pp_malloc(r->n * sizeof *per);
    r->tokens = pp_malloc(r->n * sizeof *r->tokens);
    for (int i = 0; i <= r->n; i++) {
        double t = NAN, b = 0;
        if (i < r->n && tps && ms) {
            t = tps[i] * ms[i] / 1000;
            b = (0.05 * ms[i] + 0.0005 * tps[i]) / 1000; /* the printed values' half units */
        }
        if (i < r->n && !(t >= 0.5 && t < 1e15)) {
            free(per);
            free(r->tokens);
            r->tokens = NULL;
            r->tokens_line = tps && ms ? line[i] : 1;
            return;
        }
        /* rows whose ranges share a value are one batch size: the value all of them allow */
        double nlo = i < r->n ? fmax(lo, t - b) : 1, nhi = i < r->n ? fmin(hi, t + b) : 0;
        if (i > from && (i == r->n || nlo > nhi || floor(nhi) < ceil(nlo))) {
            double v = integer_in(lo, hi); /* no integer in it: the nearest to the middle */
            for (int k = from; k < i; k++) per[k] = v;
            from = i;
            nlo = t - b;
            nhi = t + b;
        } else if (i == from) {
            nlo = t - b;
            nhi = t + b;
        }
        lo = nlo;
        hi = nhi;
    }
    for (int i = 0; i < r->n; i++) {
        if (i == 0) r->tokens_per_step = per[0];
        same &= per[i] == r->tokens_per_step;
        total += (r->step[i] - (i ? r->step[i - 1] : 0)) * per[i];
        r->tokens[i] = total;
    }
    free(per);
    if (!same) r->tokens_per_step = 0;
}

double plot_run_tokens_at(const PlotRun *r, double s) {
    if (!r->tokens) return NAN;
    int i = 0;
    while (i < r->n - 1 && r->step[i] < s) i++;
    double before = i ? r->tokens[i - 1] : 0, from = i ? r->step[i - 1] : 0;
    double per = (r->tokens[i] - before) / (r->step[i] - from);
    return r->tokens[i] + (s - r->step[i]) * per;
}

int plot_run_load(PlotRun *r, const char *dir, char *err, size_t errlen) {
    static const char *const loss_cols[] = {"step", "loss", "lr", "tokens_per_s", "step_ms"};
    static const char *const val_cols[] = {"step", "val_loss"};
    char path[PP_PATH_MAX + 32];
    struct stat st;
    Csv c;
    int missing;
    memset(r, 0, sizeof *r);
    if (strlen(dir) >= sizeof r->dir)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: path too long", dir);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    for (size_t n = strlen(r->dir); n > 1 && r->dir[n - 1] == '/'; n--) r->dir[n - 1] = '\0';
    if (stat(r->dir, &st) != 0)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s", r->dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: not a directory (a run's output.dir)", r->dir);
    snprintf(path, sizeof path, "%s/losses.csv", r->dir);
    if (csv_load(&c, path, loss_cols, 5, 2, &missing, err, errlen)) {
        if (missing)
            pp_errf(err, errlen, PP_EUSAGE,
                    "%s: no losses.csv: not a run's output.dir (a run "
                    "writes losses.csv from its first logged step)",
                    r->dir);
        return PP_EUSAGE;
    }
    r->n = c.rows;
    r->step = c.col[0];
    r->loss = c.col[1];
    r->lr = c.col[2];
    run_tokens(r, c.col[3], c.col[4], c.line);
    c.col[0] = c.col[1] = c.col[2] = NULL; /* now r's */
    csv_free(&c, 5);
    snprintf(path, sizeof path, "%s/val_losses.csv", r->dir);
    if (csv_load(&c, path, val_cols, 2, 2, &missing, err, errlen)) {
        if (missing) return PP_OK; /* the run did not validate */
        plot_run_free(r);
        return PP_EUSAGE;
    }
    r->nval = c.rows;
    r->val_step = c.col[0];
    r->val_loss = c.col[1];
    c.col[0] = c.col[1] = NULL;
    csv_free(&c, 2);
    return PP_OK;
}

void plot_run_free(PlotRun *r) {
    free(r->step);
    free(r->loss);
    free(r->lr);
    free(r->tokens);
    free(r->val_step);
    free(r->val_loss);
    memset(r, 0, sizeof *r);
}
