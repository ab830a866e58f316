/* flight_cmd.c — `pptrain flight DIR`: the ranks' flight records (flight.c) merged into
 * one table by time, and the rank that the others wait for: the head of the wait chain. */
#include "flight.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* One record line of a file. */
typedef struct {
    double t0;      /* wall clock */
    int rank, file; /* file: its index among the files read */
    unsigned long long seq;
    char blocked[16], end[16], state[12], peer[12], bytes[24], step[12];
    char what[96];
} Row;

typedef struct {
    FlightFileInfo info;
    char reason[PP_ERR_MAX];
    char waiting[PP_ERR_MAX / 2]; /* the file's "waiting:" line, after the colon */
    double last_done;             /* when its newest done record ended (wall clock; 0: none) */
    int self_stopped;             /* it says it was itself stopped ([Note: stopped]) */
    int stale;                    /* older than the other files' run */
} RankFile;

void flight_chain_heads(const FlightFileInfo *const *by_rank, int world, int *head,
                        int *cycle_at) {
    enum { UNKNOWN = -2, ON_PATH = -3 };
    int *path = pp_malloc((size_t)world * sizeof *path);
    for (int r = 0; r < world; r++) head[r] = UNKNOWN, cycle_at[r] = -1;
    for (int r = 0; r < world; r++) {
        if (!by_rank[r] || head[r] != UNKNOWN) continue;
        int n = 0, cur = r, h, at = -1;
        for (;;) {
            if (cur < 0 || cur >= world || !by_rank[cur]) { /* no file: the head */
                h = cur;
                break;
            }
            if (head[cur] == ON_PATH) { /* around again: a cycle */
                h = -1;
                at = cur;
                break;
            }
            if (head[cur] != UNKNOWN) { /* a chain walked before */
                h = head[cur];
                at = cycle_at[cur];
                break;
            }
            head[cur] = ON_PATH;
            path[n++] = cur;
            int p = by_rank[cur]->waiting_on;
            if (p < 0 || p >= world) { /* waits on no one */
                h = cur;
                break;
            }
            cur = p;
        }
        for (int i = 0; i < n; i++) head[path[i]] = h, cycle_at[path[i]] = at;
    }
    free(path);
}

/* A decimal int in [lo, hi] at *s (leading blanks allowed, as scanf's %d): advances *s
 * past it. 0 when there is none or it is out of range. */
static int read_int(const char **s, long lo, long hi, int *v) {
    char *end;
    errno = 0;
    long x = strtol(*s, &end, 10);
    if (end == *s || errno || x < lo || x > hi) return 0;
    *v = (int)x;
    *s = end;
    return 1;
}

/* "rank 2 for recv act s1<-s2 mb3 (step 5): ..." -> peer 2 and what; else -1. */
static void parse_waiting(const char *s, FlightFileInfo *in) {
    int peer;
    in->waiting_on = -1;
    in->waiting_for[0] = '\0';
    s += strspn(s, " ");
    if (strncmp(s, "rank ", 5)) return;
    s += 5;
    if (!read_int(&s, 0, INT_MAX, &peer) || strncmp(s, " for ", 5)) return;
    const char *w = s + 5, *e = strstr(w, " (step ");
    size_t n = e ? (size_t)(e - w) : strlen(w);
    if (n >= sizeof in->waiting_for) n = sizeof in->waiting_for - 1;
    memcpy(in->waiting_for, w, n);
    in->waiting_for[n] = '\0';
    in->waiting_on = peer;
}

/* "rank R of W..." (the header) -> R, W: 1 when it is one, with 0 <= R < W <=
 * FLIGHT_MAX_WORLD, else 0 (*why says what is wrong when it starts "rank "). */
static int parse_header(const char *s, int *rank, int *world, char *why, size_t n) {
    if (strncmp(s, "rank ", 5)) return 0;
    s += 5;
    if (!read_int(&s, 0, INT_MAX, rank) || strncmp(s, " of ", 4))
        return snprintf(why, n, "its \"rank R of W\" line has no rank R >= 0"), 0;
    s += 4;
    if (!read_int(&s, 1, INT_MAX, world) || *rank >= *world)
        return snprintf(why, n, "its \"rank R of W\" line has no world W > R = %d", *rank), 0;
    if (*world > FLIGHT_MAX_WORLD)
        return snprintf(why, n, "it is of a world of %d ranks, over the %d that pptrain flight "
                        "merges", *world, FLIGHT_MAX_WORLD), 0;
    return 1;
}

/* A record line into *r; 0 if it is not one (a start time that is no finite number
 * neither: the table is sorted by it). */
static int parse_row(const char *line, int rank, int file, Row *r) {
    int used = 0;
    if (sscanf(line, "%llu %lf %15s %15s %11s %11s %23s %11s %n", &r->seq, &r->t0, r->blocked,
               r->end, r->state, r->peer, r->bytes, r->step, &used) != 8 ||
        used == 0 || !isfinite(r->t0))
        return 0;
    snprintf(r->what, sizeof r->what, "%s", line + used);
    r->what[strcspn(r->what, "\n")] = '\0';
    r->rank = rank;
    r->file = file;
    return 1;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Read one file, rank_NNNNN.txt of rank `named`: its header into *rf, its records
 * appended to *rows. 0, or -1 (message printed, naming the file) when it cannot be read
 * or is not that rank's flight record; its rows are then left out. */
static int read_file(const char *path, int named, int file, RankFile *rf, Row **rows,
                     size_t *nrows, size_t *cap) {
    char line[4 * PP_ERR_MAX], err[PP_ERR_MAX], why[160] = "";
    int header = 0;
    size_t first = *nrows;
    memset(rf, 0, sizeof *rf);
    rf->info.rank = -1;
    rf->info.waiting_on = -1;
    /* regular files only: a FIFO would block, /dev/zero never end */
    FILE *f = pp_fopen_regular(path, "r", NULL, err, sizeof err);
    if (!f) return pp_error("%s", err), -1;
    while (fgets(line, sizeof line, f)) {
        Row r;
        line[strcspn(line, "\n")] = '\0';
        if (!header && !strncmp(line, "rank ", 5)) {
            header = parse_header(line, &rf->info.rank, &rf->info.world, why, sizeof why);
            if (!header) break;
        } else if (!strncmp(line, "reason: ", 8)) {
            snprintf(rf->reason, sizeof rf->reason, "%.*s", (int)sizeof rf->reason - 1, line + 8);
        } else if (sscanf(line, "started %lf", &rf->info.started) == 1 ||
                   sscanf(line, "written %lf", &rf->info.written) == 1) {
        } else if (!strncmp(line, "waiting:", 8)) {
            snprintf(rf->waiting, sizeof rf->waiting, "%.*s", (int)sizeof rf->waiting - 1,
                     line + 8);
            parse_waiting(line + 8, &rf->info);
        } else if (header && parse_row(line, rf->info.rank, file, &r)) {
            if (*nrows == *cap) {
                *cap = *cap ? 2 * *cap : 1024;
                Row *nr = realloc(*rows, *cap * sizeof *nr);
                PP_CHECK(nr);
                *rows = nr;
            }
            (*rows)[(*nrows)++] = r;
            double end = strtod(r.end, NULL);
            if (!strcmp(r.state, "done") && r.t0 + end > rf->last_done) rf->last_done = r.t0 + end;
        }
    }
    fclose(f);
    /* a rank that was itself stopped waits on no one: the others waited on it, and what
     * it waited on once it ran again had given up on it ([Note: stopped] in
     * comm/comm_socket_blame.c) */
    rf->self_stopped = strstr(rf->reason, "(this rank) was itself stopped") != NULL;
    if (rf->self_stopped) rf->info.waiting_on = -1;
    if (header && rf->info.rank != named)
        snprintf(why, sizeof why, "it holds the record of rank %d", rf->info.rank), header = 0;
    if (!header) {
        *nrows = first; /* a file left out leaves no rows behind */
        return pp_error("%s is not rank %d's pptrain flight record: %s; left out", path, named,
                        why[0] ? why : "it has no \"rank R of W\" line"),
               -1;
    }
    return 0;
}

static int row_cmp(const void *a, const void *b) {
    const Row *x = a, *y = b;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    if (x->rank != y->rank) return x->rank - y->rank;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void print_table(const Row *rows, size_t n, size_t last) {
    size_t from = last && last < n ? n - last : 0;
    double t0 = n ? rows[0].t0 : 0;
    if (from) printf("(the last %zu of %zu records)\n", n - from, n);
    printf("   time (s)  rank     blocked         end  state    peer      bytes   step  what\n");
    for (size_t i = from; i < n; i++) {
        const Row *r = &rows[i];
        printf("%11.6f %5d %11s %11s  %-7s %5s %10s %6s  %s\n", r->t0 - t0, r->rank, r->blocked,
               r->end, r->state, r->peer, r->bytes, r->step, r->what);
    }
}

/* The files merged: by rank (NULL: none) over world ranks, and each rank's chain head. */
typedef struct {
    int world;
    const RankFile **rf;         /* [world] */
    const FlightFileInfo **info; /* [world]: &rf[r]->info, for flight_chain_heads */
    int *head, *cycle_at;        /* [world], for ranks with a file: flight_chain_heads */
} Merge;

/* The chain from every rank with a file (its first hops), and its head(s). */
static void print_chain(const Merge *m) {
    enum { HOPS = 16 }; /* printed of each chain (a cycle through r: up to r again) */
    int common = -2, cyc = -1, world = m->world;
    printf("waits:\n");
    for (int r = 0; r < world; r++) {
        if (!m->rf[r]) continue;
        int head = m->head[r], k = 0;
        printf("  rank %d", r);
        for (int cur = r; cur >= 0 && cur < world && m->rf[cur] && m->info[cur]->waiting_on >= 0 &&
                          m->info[cur]->waiting_on < world;
             k++) {
            if (k == HOPS) {
                printf(" -> ...");
                break;
            }
            printf(" -> rank %d (%s)", m->info[cur]->waiting_on, m->info[cur]->waiting_for);
            cur = m->info[cur]->waiting_on;
            if (cur == r) break; /* around a cycle back to r */
        }
        if (head < 0)
            printf(": a cycle");
        else if (k == HOPS)
            printf(": head rank %d", head);
        else if (head == r && m->rf[r]->self_stopped)
            printf(": was itself stopped or too slow");
        else if (head == r)
            printf(": waits on no one");
        printf("\n");
        if (head < 0) cyc = m->cycle_at[r];
        common = common == -2 ? head : common == head ? head : -3;
    }
    if (cyc >= 0) { /* a cycle: the rank on it that made progress the longest ago */
        int oldest = cyc;
        for (int cur = m->info[cyc]->waiting_on, k = 0; cur != cyc && k < world; k++) {
            if (m->rf[cur]->last_done < m->rf[oldest]->last_done) oldest = cur;
            cur = m->info[cur]->waiting_on;
        }
        printf("the waits run in a cycle (through rank %d): of the ranks on it, rank %d completed "
               "its last action the longest ago — look at it first\n",
               cyc, oldest);
    }
    if (common >= 0) {
        printf("head of the wait chain: rank %d: every rank with a file waits on it, directly or "
               "not; ",
               common);
        if (!m->rf[common])
            printf("it wrote no flight record (stopped, killed or still running: see its log)\n");
        else if (m->rf[common]->self_stopped)
            printf("it says that it was itself stopped or too slow (see its reason above)\n");
        else
            printf("it waits on no one (%s)\n", m->rf[common]->waiting);
    } else if (common == -3) {
        printf("heads of the wait chains (not one rank):");
        for (int r = 0; r < world; r++) {
            int h = m->rf[r] ? m->head[r] : -1;
            if (h >= 0) printf(" rank %d -> %d%s", r, h, m->rf[h] ? "" : " (no file)");
        }
        printf("\n");
    }
}

static void flight_usage(FILE *f) {
    fprintf(f, "usage: pptrain flight DIR [--last N]   (DIR: output.dir/flight)\n"
               "Merges the ranks' flight records (rank_NNNNN.txt) into one table by time\n"
               "(--last N: its last N rows) and names the rank the others wait for: the\n"
               "head of the wait chain.\n");
}

/* The arguments: PP_OK, -1 for --help (usage printed), or PP_EUSAGE (message printed). */
static int flight_args(int argc, char **argv, const char **dir, size_t *last) {
    *dir = NULL;
    *last = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return flight_usage(stdout), -1;
        if (!strcmp(a, "--last")) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            char *end;
            errno = 0;
            unsigned long long n = v && v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
            if (!v || !(v[0] >= '0' && v[0] <= '9') || *end || errno || n > SIZE_MAX) {
                pp_error("flight: --last needs a number of rows >= 0%s%s%s", v ? ", not '" : "",
                         v ? v : "", v ? "'" : "");
                return flight_usage(stderr), PP_EUSAGE;
            }
            *last = (size_t)n;
        } else if (a[0] == '-' && a[1]) {
            pp_error("flight: unknown option '%s'", a);
            return flight_usage(stderr), PP_EUSAGE;
        } else if (*dir) {
            pp_error("flight: one DIR, not '%s' and '%s'", *dir, a);
            return flight_usage(stderr), PP_EUSAGE;
        } else {
            *dir = a;
        }
    }
    if (!*dir) {
        pp_error("flight: no DIR given (a run's output.dir/flight)");
        return flight_usage(stderr), PP_EUSAGE;
    }
    return PP_OK;
}

/* Rank r when name is rank_NNNNN.txt as a flight record of rank r is named (at least five
 * digits, no more than needed), else -1: other files of the directory are not read. */
static int file_rank(const char *name) {
    char want[32];
    int r;
    const char *s = name + 5;
    if (strncmp(name, "rank_", 5) || !(s[0] >= '0' && s[0] <= '9') ||
        !read_int(&s, 0, FLIGHT_MAX_WORLD - 1, &r))
        return -1;
    snprintf(want, sizeof want, "rank_%05d.txt", r);
    return strcmp(name, want) ? -1 : r;
}

/* The names of the rank files in dir, sorted (a deterministic order): *names[n]. */
static int list_files(const char *dir, char ***names, int *n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int cap = 0;
    *names = NULL;
    *n = 0;
    if (!d) return pp_error("flight: cannot open the directory %s: %m", dir), PP_EUSAGE;
    while ((de = readdir(d))) {
        if (file_rank(de->d_name) < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            *names = realloc(*names, (size_t)cap * sizeof **names);
            PP_CHECK(*names);
        }
        (*names)[(*n)++] = strdup(de->d_name);
        PP_CHECK((*names)[*n - 1]);
    }
    closedir(d);
    if (*n > 1) qsort(*names, (size_t)*n, sizeof **names, name_cmp);
    return PP_OK;
}

/* "rank R: ..." for each rank with a file; runs of ranks without one on one line. */
static void print_ranks(const Merge *m) {
    for (int r = 0; r < m->world; r++) {
        if (m->rf[r]) {
            printf("  rank %d: %s\n    waiting:%s\n", r, m->rf[r]->reason, m->rf[r]->waiting);
            continue;
        }
        int q = r;
        while (q + 1 < m->world && !m->rf[q + 1]) q++;
        if (q == r) printf("  rank %d: no file (stopped, killed or still running: see its log)\n", r);
        else printf("  ranks %d-%d: no file (stopped, killed or still running: see their logs)\n",
                    r, q);
        r = q;
    }
}

int flight_main(int argc, char **argv) {
    const char *dir;
    size_t last;
    int rc = flight_args(argc, argv, &dir, &last);
    if (rc) return rc < 0 ? PP_OK : rc;
    char **names;
    int nnames;
    if (list_files(dir, &names, &nnames)) return PP_EUSAGE;
    RankFile *files = pp_calloc((size_t)(nnames ? nnames : 1), sizeof *files);
    Row *rows = NULL;
    size_t nrows = 0, cap = 0;
    int nfiles = 0, world = 0, bad = 0;
    for (int i = 0; i < nnames; i++) {
        char path[PP_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (read_file(path, file_rank(names[i]), nfiles, &files[nfiles], &rows, &nrows, &cap)) {
            bad++;
            continue;
        }
        if (files[nfiles].info.world > world) world = files[nfiles].info.world;
        nfiles++;
    }
    for (int i = 0; i < nnames; i++) free(names[i]);
    free(names);
    if (nfiles == 0) {
        pp_error("flight: no flight records (rank_NNNNN.txt) in %s%s", dir,
                 bad ? " that could be read" : "");
        free(files);
        free(rows);
        return PP_EUSAGE;
    }
    /* by rank (one file per rank: its name says which); a file written before another
     * rank's run started is an earlier run's */
    Merge m = {world, pp_calloc((size_t)world, sizeof *m.rf),
               pp_calloc((size_t)world, sizeof *m.info), pp_malloc((size_t)world * sizeof(int)),
               pp_malloc((size_t)world * sizeof(int))};
    double newest_start = 0;
    for (int i = 0; i < nfiles; i++)
        if (files[i].info.started > newest_start) newest_start = files[i].info.started;
    for (int i = 0; i < nfiles; i++) {
        int r = files[i].info.rank;
        files[i].stale = files[i].info.written < newest_start;
        if (!files[i].stale) {
            m.rf[r] = &files[i];
            m.info[r] = &files[i].info;
        }
    }
    size_t keep = 0; /* the rows of the files kept */
    int kept = 0;
    for (size_t i = 0; i < nrows; i++)
        if (!files[rows[i].file].stale) rows[keep++] = rows[i];
    for (int r = 0; r < world; r++) kept += m.rf[r] != NULL;
    if (keep > 1) qsort(rows, keep, sizeof *rows, row_cmp);
    flight_chain_heads(m.info, world, m.head, m.cycle_at);
    printf("flight records in %s: %d of %d ranks\n", dir, kept, world);
    print_ranks(&m);
    for (int i = 0; i < nfiles; i++)
        if (files[i].stale)
            printf("  rank %d: its file is older than the other ranks' run: left out\n",
                   files[i].info.rank);
    print_table(rows, keep, last);
    print_chain(&m);
    if (bad) /* the merge is printed, but the directory held files that are not records */
        pp_error("flight: %d file(s) of %s left out (named above): the merge is of the others",
                 bad, dir);
    free(files);
    free(rows);
    free(m.rf);
    free(m.info);
    free(m.head);
    free(m.cycle_at);
    return bad ? PP_EUSAGE : PP_OK;
}
