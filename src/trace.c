/* trace.c — Chrome trace events, buffered per rank and merged by rank 0. */
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

typedef struct {
    const char *name, *cat; /* string literals */
    double t0, t1;
    int stage, mb, step;
} Event;

struct Trace {
    char path[PP_PATH_MAX];
    int rank, n, cap;
    Event *ev;
};

double trace_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

Trace *trace_create(const char *dir, int rank) {
    if (!dir) return NULL;
    Trace *t = pp_calloc(1, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s/trace.rank%d.part", dir, rank);
    t->rank = rank;
    remove(t->path);
    return t;
}

void trace_add(Trace *t, const char *name, const char *cat, double t0, double t1, int stage, int mb,
               int step) {
    if (!t) return;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4096;
        Event *ev = realloc(t->ev, t->cap * sizeof(Event));
        PP_CHECK(ev);
        t->ev = ev;
    }
    t->ev[t->n++] = (Event){name, cat, t0, t1, stage, mb, step};
}

void trace_flush(Trace *t) {
    if (!t || !t->n) return;
    char err[PP_ERR_MAX];
    FILE *f = pp_fopen_regular(t->path, "a", "the trace part of this rank", err, sizeof err);
    if (!f) {
        pp_error("%s", err);
        return;
    }
    for (int i = 0; i < t->n; i++) {
        const Event *e = &t->ev[i];
        char label[64];
        if (e->stage >= 0) snprintf(label, sizeof label, "%s %d.%d", e->name, e->stage, e->mb);
        else snprintf(label, sizeof label, "%s", e->name);
        fprintf(f,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                "\"dur\":%.3f,\"args\":{\"stage\":%d,\"microbatch\":%d,\"step\":%d}}\n",
                label, e->cat, t->rank, e->t0, e->t1 - e->t0, e->stage, e->mb, e->step);
    }
    fclose(f);
    t->n = 0;
}

int trace_merge(const char *dir, int world) {
    char path[PP_PATH_MAX + 32], line[512], err[PP_ERR_MAX];
    PPFile pf;
    snprintf(path, sizeof path, "%s/trace.json", dir);
    if (pp_file_create(&pf, path, NULL, err, sizeof err) != PP_OK) {
        pp_error("%s", err);
        return -1;
    }
    FILE *out = pf.f;
    fprintf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (int r = 0; r < world; r++) /* track names; events follow, comma-separated */
        fprintf(out,
                "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                "\"args\":{\"name\":\"rank %d\"}}",
                r ? ",\n" : "", r, r);
    for (int r = 0; r < world; r++) {
        snprintf(path, sizeof path, "%s/trace.rank%d.part", dir, r);
        struct stat st;
        int fd = pp_open_regular(path, &st);
        FILE *in = fd >= 0 ? fdopen(fd, "r") : NULL;
        if (!in) { /* a rank with no events (or a part that is not a file: skipped) */
            if (fd >= 0) close(fd);
            if (fd == -2)
                pp_error("%s is %s, not a trace part: skipped", path, pp_file_kind(st.st_mode));
            continue;
        }
        while (fgets(line, sizeof line, in)) {
            line[strcspn(line, "\n")] = 0;
            if (line[0]) fprintf(out, ",\n%s", line);
        }
        fclose(in);
        remove(path);
    }
    fprintf(out, "\n]}\n");
    if (pp_file_commit(&pf, err, sizeof err) == PP_OK) return 0;
    pp_error("%s", err);
    return -1;
}

void trace_destroy(Trace *t) {
    if (!t) return;
    free(t->ev);
    free(t);
}
