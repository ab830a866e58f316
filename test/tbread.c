/* tbread.c — a TensorBoard event reader of the test's own, independent of src/tb.c's
 * writer but for the .proto: it reads every events.out.tfevents.* file of a directory in
 * name order (as TensorBoard takes a run's files), checks the TFRecord framing and both
 * masked CRC-32Cs of every record with a bitwise CRC of its own, decodes each Event with
 * protobuf-c, checks that a file starts with file_version "brain.Event:2" and that each
 * tag's steps advance over all the files (each step once: a resumed run cut its repeated
 * steps from the earlier files), and prints the scalars.
 *
 *   tbread DIR     prints "FILES n" and then "tag step value" lines (value as %.9g, exact
 *                  for a float32), sorted by tag and step; exit 1 on any damage. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_event.pb-c.h"

typedef struct {
    char *tag;
    long step;
    float value;
} Point;

static Point *pts;
static size_t npts, cap;

/* "tbread: FILE: record at byte OFF: message", exit 1. */
static void fail(const char *file, long off, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "tbread: %s: record at byte %ld: ", file, off);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

/* CRC-32C bit by bit (the reflected Castagnoli polynomial): no table shared with tb.c. */
static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(const unsigned char *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A point of tag at step, which must come after the tag's earlier points: pptrain's
 * files hold each step once (a resume cuts the earlier files' repeated steps). */
static int add_point(const char *tag, long step, float value) {
    for (size_t i = 0; i < npts; i++)
        if (!strcmp(pts[i].tag, tag) && pts[i].step >= step) return -1;
    if (npts == cap) pts = realloc(pts, (cap = cap ? 2 * cap : 256) * sizeof *pts);
    pts[npts++] = (Point){strdup(tag), step, value};
    return 0;
}

static void read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char head[12], crc[4];
    long off = 0;
    int first = 1;
    if (!f) fail(path, 0, "cannot open the file");
    for (;;) {
        size_t got = fread(head, 1, 12, f);
        if (got == 0) break;
        if (got != 12) fail(path, off, "a record header is cut short");
        if (get_le(head + 8, 4) != masked(head, 8)) fail(path, off, "the length's CRC is wrong");
        uint64_t len = get_le(head, 8);
        if (len > (1u << 24)) fail(path, off, "a record of implausible length");
        unsigned char *data = malloc(len ? len : 1);
        if (fread(data, 1, len, f) != len || fread(crc, 1, 4, f) != 4)
            fail(path, off, "a record is cut short");
        if (get_le(crc, 4) != masked(data, len)) fail(path, off, "the data's CRC is wrong");
        Tensorboard__Event *ev = tensorboard__event__unpack(NULL, len, data);
        if (!ev) fail(path, off, "a record is not an Event");
        if (first && (ev->what_case != TENSORBOARD__EVENT__WHAT_FILE_VERSION ||
                      strcmp(ev->file_version, "brain.Event:2")))
            fail(path, off, "the first record is not file_version brain.Event:2");
        if (!first && ev->what_case != TENSORBOARD__EVENT__WHAT_SUMMARY)
            fail(path, off, "a record after the first holds no summary");
        if (ev->wall_time < 1e9) fail(path, off, "a wall time before 2001");
        for (size_t i = 0; !first && i < ev->summary->n_value; i++) {
            const Tensorboard__Summary__Value *v = ev->summary->value[i];
            if (v->value_case != TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE)
                fail(path, off, "tag %s has no simple_value", v->tag);
            if (add_point(v->tag, (long)ev->step, v->simple_value))
                fail(path, off, "tag %s: step %ld again, or after a later one", v->tag,
                     (long)ev->step);
        }
        tensorboard__event__free_unpacked(ev, NULL);
        free(data);
        off += 16 + (long)len;
        first = 0;
    }
    if (first) fail(path, off, "an empty file");
    fclose(f);
}

static int by_tag_step(const void *a, const void *b) {
    const Point *x = a, *y = b;
    int c = strcmp(x->tag, y->tag);
    return c ? c : (x->step > y->step) - (x->step < y->step);
}

static int is_event_file(const struct dirent *e) {
    return !strncmp(e->d_name, "events.out.tfevents.", 20);
}

int main(int argc, char **argv) {
    struct dirent **names;
    char path[4096];
    if (argc != 2) return fprintf(stderr, "usage: tbread DIR\n"), 2;
    int n = scandir(argv[1], &names, is_event_file, alphasort);
    if (n < 0) return perror(argv[1]), 1;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", argv[1], names[i]->d_name);
        read_file(path);
        free(names[i]);
    }
    free(names);
    qsort(pts, npts, sizeof *pts, by_tag_step);
    printf("FILES %d\n", n);
    for (size_t i = 0; i < npts; i++)
        printf("%s %ld %.9g\n", pts[i].tag, pts[i].step, pts[i].value);
    return 0;
}
