/* comm_select.c — which transport a job gets: comm_create (one rank: the memory
 * transport; several: the socket mesh), and runtime.transport, decided alike on every
 * rank from every rank's device ([Note: transport selection] in comm_select.h). Above
 * the transports: comm.c, their shared base, calls none of them. */
#include "comm_select.h"

#include <string.h>

#include "comm_internal.h"

/* ----------------------------------------------------------- the job's Comm -- */

Comm *comm_local_create(void) {
    Comm *c;
    PP_CHECK(comm_memory_create(1, 0.0, &c) == PP_OK);
    return c;
}

int comm_create(const DistEnv *env, const char *config_text, double timeout_s, Comm **out,
                char *err, size_t errlen) {
    DistMesh m;
    int rc;
    *out = NULL;
    if (env->world == 1) {
        *out = comm_local_create();
        (*out)->timeout_s = timeout_s;
        return PP_OK;
    }
    if ((rc = dist_connect(env, config_text, timeout_s, &m, err, errlen))) return rc;
    return comm_socket_create(&m, timeout_s, out, err, errlen);
}


const char *comm_select_name(int use) {
    return use == COMM_USE_LOCAL ? "local" : use == COMM_USE_NCCL ? "nccl" : "socket";
}

/* The first pair of ranks on one GPU: PP_OK with *a < *b, or -1. */
static int shared_gpu(int world, const CommDevice *dev, int *a, int *b) {
    for (int j = 0; j < world; j++)
        for (int i = 0; i < j; i++)
            if (dev[i].cuda && dev[j].cuda && !strcmp(dev[i].host, dev[j].host) &&
                !strcmp(dev[i].bus, dev[j].bus)) {
                *a = i;
                *b = j;
                return PP_OK;
            }
    return -1;
}

/* Why NCCL cannot run this job (into why), or 0 when it can; 1 for a usage problem. */
static int nccl_obstacle(int world, const CommDevice *dev, const char *nccl_why, char *why,
                         size_t len, char *todo, size_t todolen) {
    int a, b;
    for (int r = 0; r < world; r++)
        if (!dev[r].cuda) {
            snprintf(why, len, "rank %d runs on the CPU, and NCCL moves GPU memory only", r);
            snprintf(todo, todolen,
                     "run every rank on a GPU (runtime.device: cuda), or use runtime.transport: "
                     "socket (or auto)");
            return 1;
        }
    if (shared_gpu(world, dev, &a, &b) == PP_OK) {
        snprintf(why, len,
                 "ranks %d and %d share GPU %s%s%s, and NCCL refuses two ranks on one GPU", a, b,
                 dev[a].bus, dev[a].host[0] ? " on host " : "", dev[a].host);
        snprintf(todo, todolen,
                 "give each rank a GPU of its own (as many GPUs per node as ranks per node), or "
                 "use runtime.transport: socket (or auto), which stages through the host");
        return 1;
    }
    for (int r = 0; r < world; r++)
        if (!dev[r].nccl) {
            snprintf(why, len, "rank %d cannot load NCCL%s%s", r,
                     nccl_why && nccl_why[0] ? ": " : " (see its log)", nccl_why ? nccl_why : "");
            snprintf(todo, todolen,
                     "put libnccl.so.2 on LD_LIBRARY_PATH on every host, or use runtime.transport: "
                     "socket (or auto)");
            return 1;
        }
    return 0;
}

int comm_select(const char *want, int world, const CommDevice *dev, const char *nccl_why, int *use,
                char *why, size_t whylen, char *err, size_t errlen) {
    char obst[PP_ERR_MAX / 2], todo[PP_ERR_MAX / 4];
    int nccl = !strcmp(want, "nccl");
    *use = COMM_USE_SOCKET;
    why[0] = '\0';
    if (nccl && world == 1 && !dev[0].cuda)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "runtime.transport=nccl: rank 0 runs on the CPU, and NCCL moves GPU memory "
                       "only: run on a GPU (runtime.device: cuda), or use runtime.transport: "
                       "socket (or auto)");
    if (world <= 1) {
        *use = COMM_USE_LOCAL;
        snprintf(why, whylen, "runtime.transport %s: one rank, nothing moves between ranks", want);
        return PP_OK;
    }
    if (!strcmp(want, "socket")) {
        snprintf(why, whylen, "runtime.transport socket%s", dev[0].cuda ? ": host-staged" : "");
        return PP_OK;
    }
    if (nccl_obstacle(world, dev, nccl_why, obst, sizeof obst, todo, sizeof todo)) {
        if (nccl)
            return pp_errf(err, errlen, PP_EUSAGE, "runtime.transport=nccl: %s: %s", obst, todo);
        snprintf(why, whylen, "runtime.transport auto: %s", obst);
        return PP_OK;
    }
    *use = COMM_USE_NCCL;
    snprintf(why, whylen, "runtime.transport %s: every rank has a GPU of its own", want);
    return PP_OK;
}

int comm_select_exchange(Comm *c, const CommDevice *mine, CommDevice *all) {
    for (int r = 0; r < c->world; r++) {
        if (r == c->rank) all[r] = *mine;
        if (comm_broadcast(c, r, &all[r], sizeof all[r]) != PP_OK) return PP_ERUNTIME;
        all[r].host[COMM_HOST_MAX - 1] = all[r].bus[COMM_BUS_MAX - 1] = '\0'; /* a peer's strings */
    }
    return PP_OK;
}
