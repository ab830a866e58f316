/* flight_cmd.c — `pptrain flight DIR`: the ranks' flight records (flight.c) merged into
 * one table by time, and the rank that the others wait for: the head of the wait chain. */
#include "flight.h"

#include <dirent.h>
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

int flight_chain_head(const FlightFileInfo *infos, const int *have, int world, int r,
                      int *cycle_at) {
    int cur = r;
    for (int k = 0; k <= world; k++) {
        if (cur < 0 || cur >= world || !have[cur]) return cur;
        int p = infos[cur].waiting_on;
        if (p < 0 || p >= world) return cur;
        cur = p;
    }
    if (cycle_at) *cycle_at = cur;
    return -1;
}

/* "rank 2 for recv act s1<-s2 mb3 (step 5): ..." -> peer 2 and what; else -1. */
static void parse_waiting(const char *s, FlightFileInfo *in) {
    int peer, used = 0;
    in->waiting_on = -1;
    in->waiting_for[0] = '\0';
    if (sscanf(s, " rank %d for %n", &peer, &used) != 1 || used == 0) return;
    const char *w = s + used, *e = strstr(w, " (step ");
    size_t n = e ? (size_t)(e - w) : strlen(w);
    if (n >= sizeof in->waiting_for) n = sizeof in->waiting_for - 1;
    memcpy(in->waiting_for, w, n);
    in->waiting_for[n] = '\0';
    in->waiting_on = peer;
}

/* A record line into *r; 0 if it is not one. */
static int parse_row(const char *line, int rank, int file, Row *r) {
    int used = 0;
    if (sscanf(line, "%llu %lf %15s %15s %11s %11s %23s %11s %n", &r->seq, &r->t0, r->blocked,
               r->end, r->state, r->peer, r->bytes, r->step, &used) != 8 ||
        used == 0)
        return 0;
    snprintf(r->what, sizeof r->what, "%s", line + used);
    r->what[strcspn(r->what, "\n")] = '\0';
    r->rank = rank;
    r->file = file;
    return 1;
}

/* Read one file: its header into *rf, its records appended to *rows. 0, or -1 (message
 * printed) when it is not a flight record. */
static int read_file(const char *path, int file, RankFile *rf, Row **rows, size_t *nrows,
                     size_t *cap) {
    FILE *f = fopen(path, "r");
    char line[4 * PP_ERR_MAX];
    int header = 0;
    size_t first = *nrows;
    if (!f) return pp_error("cannot open %s: %m", path), -1;
    memset(rf, 0, sizeof *rf);
    rf->info.rank = -1;
    rf->info.waiting_on = -1;
    while (fgets(line, sizeof line, f)) {
        Row r;
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "rank %d of %d", &rf->info.rank, &rf->info.world) == 2) {
            header = 1;
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
    if (!header || rf->info.rank < 0 || rf->info.world <= rf->info.rank) {
        *nrows = first; /* a file left out leaves no rows behind */
        return pp_error("%s is not a pptrain flight record (no \"rank R of W\" line)", path), -1;
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

/* The chain from every rank with a file, and its head(s). */
static void print_chain(const RankFile *rf, const int *have, int world) {
    FlightFileInfo *in = pp_calloc((size_t)world, sizeof *in);
    int common = -2, cyc = -1;
    for (int r = 0; r < world; r++)
        if (have[r]) in[r] = rf[r].info;
    printf("waits:\n");
    for (int r = 0; r < world; r++) {
        if (!have[r]) continue;
        int at = -1, head = flight_chain_head(in, have, world, r, &at);
        printf("  rank %d", r);
        for (int cur = r, k = 0; k <= world && cur >= 0 && cur < world && have[cur] &&
                                 in[cur].waiting_on >= 0 && in[cur].waiting_on < world;
             k++) {
            printf(" -> rank %d (%s)", in[cur].waiting_on, in[cur].waiting_for);
            cur = in[cur].waiting_on;
        }
        if (head < 0)
            printf(": a cycle");
        else if (head == r && rf[r].self_stopped)
            printf(": was itself stopped or too slow");
        else if (head == r)
            printf(": waits on no one");
        printf("\n");
        if (head < 0) cyc = at;
        common = common == -2 ? head : common == head ? head : -3;
    }
    if (cyc >= 0) { /* a cycle: the rank on it that made progress the longest ago */
        int oldest = cyc;
        for (int cur = in[cyc].waiting_on, k = 0; cur != cyc && k < world; k++) {
            if (rf[cur].last_done < rf[oldest].last_done) oldest = cur;
            cur = in[cur].waiting_on;
        }
        printf("the waits run in a cycle (through rank %d): of the ranks on it, rank %d completed "
               "its last action the longest ago — look at it first\n",
               cyc, oldest);
    }
    if (common >= 0) {
        printf("head of the wait chain: rank %d: every rank with a file waits on it, directly or "
               "not; ",
               common);
        if (!have[common])
            printf("it wrote no flight record (stopped, killed or still running: see its log)\n");
        else if (rf[common].self_stopped)
            printf("it says that it was itself stopped or too slow (see its reason above)\n");
        else
            printf("it waits on no one (%s)\n", rf[common].waiting);
    } else if (common == -3) {
        printf("heads of the wait chains (not one rank):");
        for (int r = 0; r < world; r++) {
            int h = have[r] ? flight_chain_head(in, have, world, r, NULL) : -1;
            if (h >= 0) printf(" rank %d -> %d%s", r, h, have[h] ? "" : " (no file)");
        }
        printf("\n");
    }
    free(in);
}

int flight_main(int argc, char **argv) {
    const char *dir = NULL;
    size_t last = 0;
    int help = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--last") && i + 1 < argc)
            last = strtoul(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else
            help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"), dir = NULL, i = argc;
    }
    if (!dir) {
        fprintf(help ? stdout : stderr,
                "usage: pptrain flight DIR [--last N]   (DIR: output.dir/flight)\n"
                "Merges the ranks' flight records (rank_NNNNN.txt) into one table by time\n"
                "(--last N: its last N rows) and names the rank the others wait for: the\n"
                "head of the wait chain.\n");
        return help ? PP_OK : PP_EUSAGE;
    }
    DIR *d = opendir(dir);
    if (!d) return pp_error("cannot open the directory %s: %m", dir), PP_EUSAGE;
    RankFile *files = NULL;
    Row *rows = NULL;
    size_t nrows = 0, cap = 0;
    int nfiles = 0, world = 0, bad = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int r, used = 0;
        if (sscanf(de->d_name, "rank_%d.txt%n", &r, &used) != 1 || de->d_name[used]) continue;
        char path[PP_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        files = realloc(files, (size_t)(nfiles + 1) * sizeof *files);
        PP_CHECK(files);
        if (read_file(path, nfiles, &files[nfiles], &rows, &nrows, &cap)) {
            bad++;
            continue;
        }
        if (files[nfiles].info.world > world) world = files[nfiles].info.world;
        nfiles++;
    }
    closedir(d);
    if (nfiles == 0) {
        pp_error("no flight records (rank_NNNNN.txt) in %s%s", dir,
                 bad ? " that could be read" : "");
        free(files);
        free(rows);
        return PP_EUSAGE;
    }
    /* by rank; a file written before another rank's run started is an earlier run's */
    RankFile *rf = pp_calloc((size_t)world, sizeof *rf);
    int *have = pp_calloc((size_t)world, sizeof *have);
    double newest_start = 0;
    for (int i = 0; i < nfiles; i++)
        if (files[i].info.started > newest_start) newest_start = files[i].info.started;
    for (int i = 0; i < nfiles; i++) {
        int r = files[i].info.rank;
        files[i].stale = files[i].info.written < newest_start;
        if (r < world && !files[i].stale) {
            rf[r] = files[i];
            have[r] = 1;
        }
    }
    size_t keep = 0; /* the rows of the files kept */
    int kept = 0;
    for (size_t i = 0; i < nrows; i++)
        if (!files[rows[i].file].stale) rows[keep++] = rows[i];
    for (int r = 0; r < world; r++) kept += have[r];
    qsort(rows, keep, sizeof *rows, row_cmp);
    printf("flight records in %s: %d of %d ranks\n", dir, kept, world);
    for (int r = 0; r < world; r++) {
        if (have[r])
            printf("  rank %d: %s\n    waiting:%s\n", r, rf[r].reason, rf[r].waiting);
        else
            printf("  rank %d: no file (stopped, killed or still running: see its log)\n", r);
    }
    for (int i = 0; i < nfiles; i++)
        if (files[i].stale)
            printf("  rank %d: its file is older than the other ranks' run: left out\n",
                   files[i].info.rank);
    print_table(rows, keep, last);
    print_chain(rf, have, world);
    free(files);
    free(rows);
    free(rf);
    free(have);
    return PP_OK;
}
