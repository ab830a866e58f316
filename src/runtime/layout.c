/* layout.c — the P x D rank grid ([Note: rank layout]). */
#include "layout.h"

#include "common.h"

int layout_init(Layout *l, int world, int rank, int stages, int replicas, char *err,
                size_t errlen) {
    if (stages < 1 || replicas < 0)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline.stages %d and pipeline.data_parallel %d: both must be >= 1 "
                       "(data_parallel may be auto)",
                       stages, replicas);
    if (replicas == 0 && world % stages) {
        int lo = world / stages * stages, hi = lo + stages;
        char alt[64] = "";
        if (lo > 0) snprintf(alt, sizeof alt, "%d or ", lo);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline.stages is %d but %d process%s launched: the world size must be a "
                       "multiple of the stages (pipeline.data_parallel: auto makes world / stages "
                       "replicas); launch %s%d processes, or change pipeline.stages",
                       stages, world, world == 1 ? " was" : "es were", alt, hi);
    }
    int D = replicas > 0 ? replicas : world / stages;
    if (world != stages * D)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "pipeline.stages %d x pipeline.data_parallel %d = %d processes, but %d "
                       "process%s launched: launch exactly stages x replicas ranks (e.g. "
                       "scripts/pprun --nproc-per-node %d), or set pipeline.data_parallel: auto",
                       stages, D, stages * D, world, world == 1 ? " was" : "es were", stages * D);
    PP_CHECK(rank >= 0 && rank < world);
    *l = (Layout){.world = world, .P = stages, .D = D, .rank = rank, .pp = rank / D,
                  .dp = rank % D};
    return PP_OK;
}

int layout_rank_of(const Layout *l, int pp, int dp) {
    PP_CHECK(pp >= 0 && pp < l->P && dp >= 0 && dp < l->D);
    return pp * l->D + dp;
}

void layout_describe(const Layout *l, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n,
                                  "layout: %d pipeline rank%s x %d replica%s = %d processes; "
                                  "pipelines:",
                                  l->P, l->P == 1 ? "" : "s", l->D, l->D == 1 ? "" : "s", l->world);
    for (int dp = 0; dp < l->D && len < n; dp++) {
        len += (size_t)snprintf(buf + len, n - len, " {");
        for (int pp = 0; pp < l->P && len < n; pp++)
            len += (size_t)snprintf(buf + len, n - len, "%s%d", pp ? " " : "",
                                    layout_rank_of(l, pp, dp));
        if (len < n) len += (size_t)snprintf(buf + len, n - len, "}");
    }
    if (len < n)
        len += (size_t)snprintf(buf + len, n - len,
                                "; replicas of a pipeline rank (gradient all-reduce):");
    for (int pp = 0; pp < l->P && len < n; pp++) {
        len += (size_t)snprintf(buf + len, n - len, " {");
        for (int dp = 0; dp < l->D && len < n; dp++)
            len += (size_t)snprintf(buf + len, n - len, "%s%d", dp ? " " : "",
                                    layout_rank_of(l, pp, dp));
        if (len < n) len += (size_t)snprintf(buf + len, n - len, "}");
    }
}
