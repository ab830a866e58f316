/* comm_select.h — which transport a job's ranks use (runtime.transport auto | socket |
 * nccl): a pure decision from every rank's device, and the exchange over the job's Comm
 * that gives every rank the same inputs, so that all decide the same. */
#ifndef PP_COMM_SELECT_H
#define PP_COMM_SELECT_H

#include "comm.h"

#define COMM_HOST_MAX 64
#define COMM_BUS_MAX 32

/* One rank's device as the selection sees it. */
typedef struct {
    int32_t cuda;             /* 1: the CUDA backend, 0: the CPU */
    int32_t nccl;             /* 1: its CUDA backend can load NCCL (libnccl.so.2) */
    char host[COMM_HOST_MAX]; /* gethostname: the same bus id on two hosts is two GPUs */
    char bus[COMM_BUS_MAX];   /* cudaDeviceGetPCIBusId, "0000:1b:00.0"; "" on the CPU */
} CommDevice;

enum { COMM_USE_LOCAL, COMM_USE_SOCKET, COMM_USE_NCCL };

/* [Note: transport selection]
 * From the devices of all `world` ranks (dev[r] is rank r's) and runtime.transport
 * `want` ("auto", "socket" or "nccl"):
 *  - one rank: COMM_USE_LOCAL, whatever is asked (nothing moves between ranks), except
 *    that nccl on the CPU is refused as below;
 *  - socket: COMM_USE_SOCKET (host-staged on a GPU, [Note: host staging] in runtime.c);
 *  - auto: COMM_USE_NCCL when every rank runs on CUDA with NCCL loadable and no two
 *    ranks share a GPU (the same host and bus id), else COMM_USE_SOCKET;
 *  - nccl: COMM_USE_NCCL when auto would choose it; else PP_EUSAGE naming the first
 *    rank on the CPU, the first two ranks that share a GPU (and its bus id), or the
 *    rank that cannot load NCCL, with what to do. NCCL refuses two ranks on one GPU.
 * *use gets the choice and why[whylen] the reason for the build report ("runtime.
 * transport auto: ranks 0 and 1 share GPU 0000:1b:00.0"). Returns PP_OK, or PP_EUSAGE
 * with err (then *use is COMM_USE_SOCKET). `nccl_why`: why NCCL cannot be loaded on
 * this rank ("" when it can or the rank is on the CPU), quoted in the messages. */
int comm_select(const char *want, int world, const CommDevice *dev, const char *nccl_why, int *use,
                char *why, size_t whylen, char *err, size_t errlen);

/* Every rank's device into all[c->world] (all[c->rank] = *mine), over c's broadcasts:
 * a collective of c. PP_OK, or PP_ERUNTIME with comm_error(c). */
int comm_select_exchange(Comm *c, const CommDevice *mine, CommDevice *all);

/* "local", "socket" or "nccl". */
const char *comm_select_name(int use);

#endif
