/* gemm_file.h — the GEMM cache's key and the file of GEMM algorithms (PPTRAIN_GEMM_ALGOS,
 * [Note: GEMM algorithm file]): plain C with no CUDA, so that the CUDA backend and a host
 * test (test/test_gemm_file.c) share it. Never included from src/. */
#ifndef PP_GEMM_FILE_H
#define PP_GEMM_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The cache's key of one GEMM ([Note: GEMM cache] in backend_cuda.cu): cuBLASLt's
 * column-major view of it. Compared with memcmp: no padding (10 ints, 3 long longs, 10 ints). */
typedef struct GemmKey {
    int opA, opB, m, n, k, lda, ldb, ldc, batch, oop; /* oop: C != D (out of place) */
    long long sA, sB, sC;
    int ab, compute, bias, alA, alB, alC; /* bias: the fused bias pointer's alignment,
                                             negated when it is bf16, 0 when none */
    int epi;      /* the cublasLtEpilogue_t asked for ([Note: GEMM epilogues]) */
    int d_bf16;   /* D (and C) bf16, else fp32 */
    int alD, alX; /* D's alignment (C's is alC), the aux or bias-gradient pointer's */
} GemmKey;

/* [Note: GEMM algorithm file] PPTRAIN_GEMM_ALGOS=path names a text file of cuBLASLt
 * algorithms, one GEMM a line, as PyTorch's TunableOp keeps its results: what
 * PPTRAIN_GEMM_TUNE=1 chose ([Note: GEMM tuning]) is appended to it, and a run that finds
 * its GEMM's line there takes that algorithm instead of asking the heuristic, so every
 * later run (a resume, another schedule, every rank) runs the same algorithms and gives
 * the same bits (the multi-rank case below). A line:
 *
 *   gemm TAG FUSED opA opB m n k lda ldb ldc batch oop sA sB sC ab compute bias alA alB
 *        alC epi d_bf16 alD alX W0 ... W7
 *
 * TAG names the device and the cuBLASLt version (gemm_file_tag: a line is used only where
 * both are the same, as cublasLt.h allows for a serialized cublasLtMatmulAlgo_t), FUSED
 * whether the algorithm runs the key's epilogue (GemmEntry.with_epi), then the key's
 * fields in decimal and the algorithm's 8 words in hex. '#' starts a comment line. Each
 * line is one write(2) to a file opened O_APPEND, so ranks appending at once do not
 * interleave, and a reader skips a last line without its newline (one being written: a
 * file edited by hand must end in a newline);
 * where two lines hold the same key and tag, the first counts. Several ranks tuning the
 * same shapes at once each run their own choice in that run, and every later run the
 * file's first line: later runs agree with each other, and with the tuning run where one
 * rank tuned (or the ranks chose alike). */
enum { GEMM_FILE_KEY_FIELDS = 23, GEMM_FILE_LINE = 1024 };

typedef struct {
    GemmKey key;
    int with_epi;
    uint64_t algo[8]; /* cublasLtMatmulAlgo_t's data */
} GemmPin;

/* The key's fields in file order: where each lies and whether it is a long long (else an
 * int), the one list both directions read. */
static const struct {
    size_t off;
    int ll;
} GEMM_KEY_FIELD[GEMM_FILE_KEY_FIELDS] = {
    {offsetof(GemmKey, opA), 0},  {offsetof(GemmKey, opB), 0}, {offsetof(GemmKey, m), 0},
    {offsetof(GemmKey, n), 0},    {offsetof(GemmKey, k), 0},   {offsetof(GemmKey, lda), 0},
    {offsetof(GemmKey, ldb), 0},  {offsetof(GemmKey, ldc), 0}, {offsetof(GemmKey, batch), 0},
    {offsetof(GemmKey, oop), 0},  {offsetof(GemmKey, sA), 1},  {offsetof(GemmKey, sB), 1},
    {offsetof(GemmKey, sC), 1},   {offsetof(GemmKey, ab), 0},  {offsetof(GemmKey, compute), 0},
    {offsetof(GemmKey, bias), 0}, {offsetof(GemmKey, alA), 0}, {offsetof(GemmKey, alB), 0},
    {offsetof(GemmKey, alC), 0},  {offsetof(GemmKey, epi), 0}, {offsetof(GemmKey, d_bf16), 0},
    {offsetof(GemmKey, alD), 0},  {offsetof(GemmKey, alX), 0},
};

/* The key's fields in file order (as long long). */
static inline void gemm_key_fields(const GemmKey *k, long long f[GEMM_FILE_KEY_FIELDS]) {
    for (int i = 0; i < GEMM_FILE_KEY_FIELDS; i++) {
        const char *p = (const char *)k + GEMM_KEY_FIELD[i].off;
        int v;
        if (GEMM_KEY_FIELD[i].ll) {
            memcpy(&f[i], p, sizeof f[i]);
        } else {
            memcpy(&v, p, sizeof v);
            f[i] = v;
        }
    }
}

/* The key from fields in file order; 0, or -1 when an int field is out of an int's range. */
static inline int gemm_key_from(GemmKey *k, const long long f[GEMM_FILE_KEY_FIELDS]) {
    memset(k, 0, sizeof *k);
    for (int i = 0; i < GEMM_FILE_KEY_FIELDS; i++) {
        char *p = (char *)k + GEMM_KEY_FIELD[i].off;
        if (GEMM_KEY_FIELD[i].ll) {
            memcpy(p, &f[i], sizeof f[i]);
            continue;
        }
        if (f[i] < -2147483647LL - 1 || f[i] > 2147483647LL) return -1;
        int v = (int)f[i];
        memcpy(p, &v, sizeof v);
    }
    return 0;
}

/* The tag of a device and cuBLASLt version: "sm<cc>_<name>_cublasLt<version>", every
 * character but letters, digits, '.' and '-' as '_'. */
static inline void gemm_file_tag(char *tag, size_t n, int sm, const char *device_name,
                                 size_t lt_version) {
    snprintf(tag, n, "sm%d_%.100s_cublasLt%zu", sm, device_name, lt_version);
    for (char *p = tag; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-'))
            *p = '_';
}

/* Read path: every line's syntax checked; the lines of `tag` (NULL: none kept) into *pins
 * (malloc'd, *npins of them, the first line of a key only). Returns 0; 1 when the file does
 * not exist (nothing read); -1 with a message naming path and line. */
static inline int gemm_file_read(const char *path, const char *tag, GemmPin **pins, int *npins,
                                 char *err, size_t errlen) {
    if (pins) *pins = NULL;
    if (npins) *npins = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 1;
        snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: cannot read '%.300s': %s", path,
                 strerror(errno));
        return -1;
    }
    char line[GEMM_FILE_LINE];
    int lineno = 0, n = 0, cap = 0, rc = 0;
    GemmPin *got = NULL;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (!len || line[len - 1] != '\n') {
            if (feof(f)) break; /* a last line without its newline: being appended, skipped */
            snprintf(err, errlen,
                     "PPTRAIN_GEMM_ALGOS: %.300s:%d: a line over %d characters (or a NUL byte)",
                     path, lineno, GEMM_FILE_LINE - 2);
            rc = -1;
            break;
        }
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || *p == '\r' || !*p) continue;
        char word[8], t[256];
        int with_epi = 0, used = 0;
        long long fl[GEMM_FILE_KEY_FIELDS];
        unsigned long long w[8];
        GemmPin pin;
        int ok = sscanf(p, "%7s %255s %d%n", word, t, &with_epi, &used) == 3 &&
                 !strcmp(word, "gemm") && (with_epi == 0 || with_epi == 1);
        p += ok ? used : 0;
        for (int i = 0; ok && i < GEMM_FILE_KEY_FIELDS; i++) {
            ok = sscanf(p, " %lld%n", &fl[i], &used) == 1;
            p += ok ? used : 0;
        }
        for (int i = 0; ok && i < 8; i++) {
            ok = sscanf(p, " %llx%n", &w[i], &used) == 1;
            p += ok ? used : 0;
        }
        while (ok && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
        ok = ok && !*p && gemm_key_from(&pin.key, fl) == 0;
        if (!ok) {
            snprintf(err, errlen,
                     "PPTRAIN_GEMM_ALGOS: %.300s:%d: not a line of GEMM algorithms (expected "
                     "'gemm', "
                     "a tag, 0 or 1, %d numbers and 8 hex words; PPTRAIN_GEMM_TUNE=1 writes "
                     "them)",
                     path, lineno, GEMM_FILE_KEY_FIELDS);
            rc = -1;
            break;
        }
        if (!tag || !pins || strcmp(t, tag)) continue;
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = !memcmp(&got[i].key, &pin.key, sizeof pin.key);
        if (seen) continue;
        pin.with_epi = with_epi;
        for (int i = 0; i < 8; i++) pin.algo[i] = (uint64_t)w[i];
        if (n == cap) {
            GemmPin *bigger = (GemmPin *)realloc(got,
                                                 (size_t)(cap = cap ? 2 * cap : 32) * sizeof *got);
            if (!bigger) {
                snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: out of host memory reading '%.300s'",
                         path);
                rc = -1;
                break;
            }
            got = bigger;
        }
        got[n++] = pin;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: reading '%.300s' failed: %s", path,
                 strerror(errno));
        rc = -1;
    }
    fclose(f);
    if (rc) {
        free(got);
        return rc;
    }
    if (pins)
        *pins = got;
    else
        free(got);
    if (npins) *npins = n;
    return 0;
}

/* Append pin's line for tag to path (created 0644 if missing) in one write(2). 0, or -1
 * with a message naming path. */
static inline int gemm_file_append(const char *path, const char *tag, const GemmPin *pin, char *err,
                                   size_t errlen) {
    char line[GEMM_FILE_LINE];
    long long fl[GEMM_FILE_KEY_FIELDS];
    gemm_key_fields(&pin->key, fl);
    int k = snprintf(line, sizeof line, "gemm %s %d", tag, pin->with_epi ? 1 : 0);
    for (int i = 0; i < GEMM_FILE_KEY_FIELDS && k > 0 && (size_t)k < sizeof line; i++)
        k += snprintf(line + k, sizeof line - k, " %lld", fl[i]);
    for (int i = 0; i < 8 && k > 0 && (size_t)k < sizeof line; i++)
        k += snprintf(line + k, sizeof line - k, " %llx", (unsigned long long)pin->algo[i]);
    if (k > 0 && (size_t)k < sizeof line - 1) {
        line[k++] = '\n';
    } else {
        snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: a line for '%.300s' would be too long", path);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: cannot append to '%.300s': %s", path,
                 strerror(errno));
        return -1;
    }
    ssize_t w = write(fd, line, (size_t)k);
    int e = errno;
    if (close(fd) != 0 && w == k) w = -1, e = errno;
    if (w != k) {
        snprintf(err, errlen, "PPTRAIN_GEMM_ALGOS: appending to '%.300s' failed: %s", path,
                 w < 0 ? strerror(e) : "a short write");
        return -1;
    }
    return 0;
}

#endif
