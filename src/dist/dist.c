/* dist.c — who am I (the environment, the job token) and the comparison of the ranks'
 * configs. The network side of dist.h is in dist_net.c and dist_rdzv.c. */
#include "dist.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- environment -- */

/* getenv with "" treated as unset. */
static const char *env_get(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* Parse the variable `name` as an integer in [lo, hi] into *out; *set says whether it
 * was set (when unset *out is left alone). PP_EUSAGE for anything else. */
static int env_int(const char *name, long lo, long hi, int *out, int *set, char *err,
                   size_t n) {
    const char *v = env_get(name);
    char *end;
    long x;
    *set = v != NULL;
    if (!v) return PP_OK;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0' || x < lo || x > hi)
        return pp_errf(err, n, PP_EUSAGE,
                       "%s=%s is not a whole number in [%ld, %ld] — fix the launcher's "
                       "environment (or unset it for a 1-rank run)", name, v, lo, hi);
    *out = (int)x;
    return PP_OK;
}

/* One "count" or "count(xreps)" entry of a tasks-per-node list at *p. */
static int tpn_entry(const char **p, int *count, int *reps, int *plain) {
    char *end;
    long c = strtol(*p, &end, 10), r = 1;
    if (end == *p || c < 1 || c > INT_MAX || **p == '-' || **p == '+') return -1;
    *p = end;
    *plain = 1;
    if (**p == '(') {
        if ((*p)[1] != 'x') return -1;
        r = strtol(*p + 2, &end, 10);
        if (end == *p + 2 || *end != ')' || r < 1 || r > INT_MAX || (*p)[2] == '-')
            return -1;
        *p = end + 1;
        *plain = 0;
    }
    *count = (int)c;
    *reps = (int)r;
    return 0;
}

int dist_parse_tasks_per_node(const char *s, int node, int *ntasks, char *err,
                              size_t errlen) {
    const char *p = s;
    int entries = 0, found = 0, plain = 0;
    int left = node, count = 0, reps = 0;
    if (!s || node < 0) return pp_errf(err, errlen, PP_EUSAGE, "bad tasks-per-node query");
    for (;;) {
        if (tpn_entry(&p, &count, &reps, &plain) != 0)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "tasks-per-node list \"%s\" is malformed (expected forms like "
                           "\"4\", \"2,3\" or \"4(x2),2\")", s);
        entries++;
        if (!found && left < reps) { *ntasks = count; found = 1; }
        if (!found) left -= reps;
        if (*p == '\0') break;
        if (*p++ != ',')
            return pp_errf(err, errlen, PP_EUSAGE, "tasks-per-node list \"%s\" is malformed "
                           "(expected forms like \"4\", \"2,3\" or \"4(x2),2\")", s);
    }
    if (entries == 1 && plain) { *ntasks = count; return PP_OK; } /* "4": every node */
    if (!found)
        return pp_errf(err, errlen, PP_EUSAGE, "tasks-per-node list \"%s\" has no entry "
                       "for node %d (SLURM_NODEID)", s, node);
    return PP_OK;
}

/* RANK/WORLD_SIZE/LOCAL_* as set by torchrun or scripts/pprun. */
static int env_torchrun(DistEnv *e, int has_rank, int has_world, char *err, size_t n) {
    int set, rc;
    if (has_rank != has_world)
        return pp_errf(err, n, PP_EUSAGE, "%s is set but %s is not: a torchrun-style launch "
                       "sets both (unset both for a 1-rank run)",
                       has_rank ? "RANK" : "WORLD_SIZE", has_rank ? "WORLD_SIZE" : "RANK");
    e->source = DIST_SRC_TORCHRUN;
    e->local_rank = e->rank;
    e->local_world = e->world;
    if ((rc = env_int("LOCAL_RANK", 0, INT_MAX, &e->local_rank, &set, err, n))) return rc;
    return env_int("LOCAL_WORLD_SIZE", 1, INT_MAX, &e->local_world, &set, err, n);
}

/* A whole number in variable `name`, or -1 when it is unset or not one (SLURM's job
 * and step ids only pick a default port and name the job: they are never an error). */
static long env_id(const char *name) {
    const char *v = env_get(name);
    char *end;
    long x;
    if (!v) return -1;
    errno = 0;
    x = strtol(v, &end, 10);
    return errno || end == v || *end != '\0' || x < 0 ? -1 : x;
}

/* Whether this process runs inside a SLURM job step (a task srun started): srun sets
 * SLURM_STEP_ID (and the older SLURM_STEPID) for its tasks; the batch shell has none. */
static int slurm_in_step(void) { return env_get("SLURM_STEP_ID") || env_get("SLURM_STEPID"); }

/* [Note: pptrain outside srun] The batch shell of `#SBATCH -n 2` has SLURM_PROCID=0 and
 * SLURM_NTASKS=2 but no job step. A pptrain it runs directly (a common mistake: srun
 * forgotten) would take itself for rank 0 of 2 and wait runtime.timeout_s for a rank
 * that never comes; so a SLURM world > 1 outside a step is a usage error naming srun. */
static int env_slurm_step(int world, char *err, size_t n) {
    if (world <= 1 || slurm_in_step()) return PP_OK;
    return pp_errf(err, n, PP_EUSAGE, "SLURM_NTASKS=%d but this process is not a task of a "
                   "job step (SLURM_STEP_ID is unset): the batch script started it directly, "
                   "and the other %d rank(s) would never come — start the ranks with srun "
                   "(srun ./pptrain --config ..., as scripts/slurm/pptrain.sbatch does; "
                   "srun --ntasks=1 for a 1-rank run)", world, world - 1);
}

/* SLURM_* as set by srun for each task. */
static int env_slurm(DistEnv *e, char *err, size_t n) {
    int set, node = 0, rc;
    const char *tpn, *tpn_name = "SLURM_STEP_TASKS_PER_NODE";
    if ((rc = env_int("SLURM_NTASKS", 1, INT_MAX, &e->world, &set, err, n))) return rc;
    if (!set)
        return pp_errf(err, n, PP_EUSAGE, "SLURM_PROCID is set but SLURM_NTASKS is not — "
                       "launch with srun inside the job");
    if ((rc = env_slurm_step(e->world, err, n))) return rc;
    e->source = DIST_SRC_SLURM;
    e->local_rank = 0;
    if ((rc = env_int("SLURM_LOCALID", 0, INT_MAX, &e->local_rank, &set, err, n))) return rc;
    if ((rc = env_int("SLURM_NODEID", 0, INT_MAX, &node, &set, err, n))) return rc;
    tpn = env_get(tpn_name);
    if (!tpn) tpn = env_get(tpn_name = "SLURM_NTASKS_PER_NODE");
    e->local_world = e->world; /* no list: as if one node */
    if (tpn && dist_parse_tasks_per_node(tpn, node, &e->local_world, err, n) != PP_OK) {
        char inner[PP_ERR_MAX / 2];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return pp_errf(err, n, PP_EUSAGE, "%s: %s", tpn_name, inner);
    }
    return PP_OK;
}

/* MASTER_ADDR, MASTER_PORT and the rendezvous port, once rank and world are known. */
static int env_master(DistEnv *e, char *err, size_t n) {
    const char *addr = env_get("MASTER_ADDR");
    int set, rc, rdzv = 0;
    long job = env_id("SLURM_JOB_ID"), step = env_id("SLURM_STEP_ID");
    e->master_port = DIST_DEFAULT_PORT;
    if (e->source == DIST_SRC_SLURM && job >= 0) /* jobs sharing a node: apart */
        e->master_port = DIST_SLURM_PORT_BASE + (int)(job % 2000) * 10 +
                         (int)((step < 0 ? 0 : step) % 10);
    if ((rc = env_int("MASTER_PORT", 1, 65535, &e->master_port, &set, err, n))) return rc;
    if (addr && strlen(addr) >= sizeof e->master_addr)
        return pp_errf(err, n, PP_EUSAGE, "MASTER_ADDR is too long (%zu characters)",
                       strlen(addr));
    if (addr) snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
    if (!addr && e->world > 1)
        return pp_errf(err, n, PP_EUSAGE, "MASTER_ADDR is not set: rank %d of %d needs "
                       "rank 0's host to rendezvous — %s", e->rank, e->world,
                       e->source == DIST_SRC_SLURM
                           ? "export it in the batch script: export MASTER_ADDR=$(scontrol "
                             "show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)"
                           : "launch with scripts/pprun or torchrun, or export it");
    e->under_torchrun = env_get("TORCHELASTIC_RUN_ID") != NULL;
    e->rdzv_port = e->master_port;
    if (e->under_torchrun) {
        if (e->master_port == 65535)
            return pp_errf(err, n, PP_EUSAGE, "MASTER_PORT=65535 leaves no port for "
                           "pptrain's rendezvous under torchrun (it uses MASTER_PORT+1) — "
                           "set PPTRAIN_RDZV_PORT");
        e->rdzv_port = e->master_port + 1;
    }
    return env_int("PPTRAIN_RDZV_PORT", 1, 65535, &e->rdzv_port, &rdzv, err, n);
}

/* The job identity (DistEnv.job) from the launcher's variables. */
static void env_job(DistEnv *e) {
    const char *job = env_get("SLURM_JOB_ID"), *run = env_get("TORCHELASTIC_RUN_ID");
    const char *step = env_get("SLURM_STEP_ID");
    if (job && step && e->source == DIST_SRC_SLURM)
        snprintf(e->job, sizeof e->job, "SLURM job %.20s step %.20s", job, step);
    else if (job)
        snprintf(e->job, sizeof e->job, "SLURM job %.20s", job);
    else if (run)
        snprintf(e->job, sizeof e->job, "torchrun run %.40s", run);
}

int dist_env_read(DistEnv *e, char *err, size_t n) {
    int has_rank, has_world, rc;
    const char *rname = "RANK", *wname = "WORLD_SIZE";
    memset(e, 0, sizeof *e);
    e->world = e->local_world = 1;
    if ((rc = env_int("RANK", 0, INT_MAX, &e->rank, &has_rank, err, n))) return rc;
    if ((rc = env_int("WORLD_SIZE", 1, INT_MAX, &e->world, &has_world, err, n))) return rc;
    if (has_rank || has_world) {
        rc = env_torchrun(e, has_rank, has_world, err, n);
    } else if ((rc = env_int("SLURM_PROCID", 0, INT_MAX, &e->rank, &has_rank, err, n)) ==
                   PP_OK && has_rank) {
        rc = env_slurm(e, err, n);
        rname = "SLURM_PROCID";
        wname = "SLURM_NTASKS";
    } else if (rc == PP_OK && env_get("SLURM_JOB_ID")) { /* SLURM_NTASKS > 1 outside a step */
        int tasks = 1, set;
        if (env_int("SLURM_NTASKS", 1, INT_MAX, &tasks, &set, NULL, 0) == PP_OK)
            rc = env_slurm_step(tasks, err, n);
    }
    if (rc) return rc;
    if (e->rank >= e->world)
        return pp_errf(err, n, PP_EUSAGE, "%s=%d is not below %s=%d: ranks are numbered 0 "
                       "to %d — fix the launch", rname, e->rank, wname, e->world, e->world - 1);
    if (e->local_world > e->world || e->local_rank >= e->local_world)
        return pp_errf(err, n, PP_EUSAGE, "local rank %d of %d ranks on this node does not "
                       "fit %d ranks in all — check LOCAL_RANK/LOCAL_WORLD_SIZE (or "
                       "SLURM_LOCALID and the tasks per node)", e->local_rank,
                       e->local_world, e->world);
    env_job(e);
    if ((rc = env_master(e, err, n))) return rc;
    return dist_auth_token_read(e->token, err, n);
}

/* ------------------------------------------------------------- config compare -- */

#define KEY_DEPTH 8
#define KEY_LEN 96

typedef struct {
    char key[KEY_DEPTH][KEY_LEN]; /* the enclosing key at each indent level */
} KeyPath;

/* The next line of *s (without '\n' and trailing spaces/'\r'); 0 at the end. */
static int next_line(const char **s, const char **line, size_t *len) {
    const char *p = *s, *e;
    if (!*p) return 0;
    e = strchr(p, '\n');
    if (!e) e = p + strlen(p);
    *s = *e ? e + 1 : e;
    *line = p;
    while (e > p && (e[-1] == ' ' || e[-1] == '\r')) e--;
    *len = (size_t)(e - p);
    return 1;
}

/* Record the key of `line` in kp and write its dotted path and its value. */
static void line_key(KeyPath *kp, const char *line, size_t len, char *path, size_t pn,
                     char *val, size_t vn) {
    size_t ind = 0, klen, off = 0;
    const char *colon;
    int level;
    while (ind < len && line[ind] == ' ') ind++;
    level = (int)(ind / 2) < KEY_DEPTH ? (int)(ind / 2) : KEY_DEPTH - 1;
    colon = memchr(line + ind, ':', len - ind);
    klen = colon ? (size_t)(colon - line) - ind : len - ind;
    snprintf(kp->key[level], KEY_LEN, "%.*s", (int)klen, line + ind);
    if (colon) {
        const char *v = colon + 1;
        while (v < line + len && *v == ' ') v++;
        snprintf(val, vn, "%.*s", (int)(line + len - v), v);
    } else {
        snprintf(val, vn, "%s", "");
    }
    path[0] = '\0';
    for (int i = 0; i <= level && off < pn; i++)
        off += (size_t)snprintf(path + off, pn - off, "%s%s", i ? "." : "", kp->key[i]);
}

int dist_config_diff(const char *a, const char *b, char *where, size_t n) {
    KeyPath ka, kb;
    char pa[256] = "", pb[256] = "", va[192] = "", vb[192] = "";
    const char *la, *lb;
    size_t na, nb;
    memset(&ka, 0, sizeof ka);
    memset(&kb, 0, sizeof kb);
    for (;;) {
        int ha = next_line(&a, &la, &na), hb = next_line(&b, &lb, &nb);
        if (!ha && !hb) return 0;
        if (ha) line_key(&ka, la, na, pa, sizeof pa, va, sizeof va);
        if (hb) line_key(&kb, lb, nb, pb, sizeof pb, vb, sizeof vb);
        if (ha && hb && na == nb && memcmp(la, lb, na) == 0) continue;
        if (!hb) snprintf(where, n, "%s: %s vs (missing)", pa, va);
        else if (!ha) snprintf(where, n, "%s: (missing) vs %s", pb, vb);
        else if (strcmp(pa, pb) == 0) snprintf(where, n, "%s: %s vs %s", pa, va, vb);
        else snprintf(where, n, "%s: %s vs %s: %s", pa, va, pb, vb);
        return 1;
    }
}
