/* layout.c — the P x D rank grid ([Note: rank layout]). */
#include "layout.h"

#include "common.h"

int layout_init(Layout *l, int world, int rank, int stages, int replicas, char *err,
                size_t errlen) {
    int D = replicas > 0 ? replicas : 1;
    if (replicas <= 0 && stages > 0 && world % stages == 0) D = world / stages;
    if (stages < 1 || world != stages * D)
        return pp_errf(err, errlen, PP_EUSAGE, "pipeline.stages is %d but %d process%s launched: launch exactly "
                       "pipeline.stages ranks (e.g. scripts/pprun --nproc-per-node %d) or change pipeline.stages",
                       stages, world, world == 1 ? " was" : "es were", stages * D);
    PP_CHECK(rank >= 0 && rank < world);
    *l = (Layout){.world = world, .P = stages, .D = D, .rank = rank, .pp = rank / D, .dp = rank % D};
    return PP_OK;
}

int layout_rank_of(const Layout *l, int pp, int dp) {
    PP_CHECK(pp >= 0 && pp < l->P && dp >= 0 && dp < l->D);
    return pp * l->D + dp;
}
