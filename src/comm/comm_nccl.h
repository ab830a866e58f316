/* comm_nccl.h — the plain-C face of the NCCL transport in libpptrain_cuda.so
 * (cuda/comm_nccl.cu): what src/backend/backend_load.c looks up with dlsym. Nothing here needs
 * a CUDA or NCCL header. See [Note: NCCL transport] in comm_nccl.cu. */
#ifndef PP_COMM_NCCL_H
#define PP_COMM_NCCL_H

#include <stddef.h>

#include "backend/backend.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device message's header on the socket Comm ([Note: NCCL transport]): two uint64,
 * {PP_NCCL_HDR_MAGIC, byte count}, with the message's tag. ("ppcn") */
#define PP_NCCL_HDR_MAGIC 0x6e637070u

/* What the transport needs from the binary that loaded it (the shared object does not
 * link src/): comm_tag_format, so that its messages read as the socket transport's. */
typedef struct {
    void (*tag_format)(const Comm *c, const CommTag *tag, char *buf, size_t n);
} PPNcclHost;

/* Whether NCCL can be used: $PPTRAIN_NCCL_LIB or libnccl.so.2 is loaded here on first
 * call (the object does not link it, so it loads on machines without NCCL) and its
 * entry points resolved. 1, or 0 with the reason in why ("libnccl.so.2: cannot open
 * shared object file"). */
typedef int (*PPNcclAvailableFn)(char *why, size_t whylen);
/* GPU `be` (a backend from pp_cuda_open) as "0000:1b:00.0" (cudaDeviceGetPCIBusId,
 * lower case). 0, or -1 with the CUDA error in buf. */
typedef int (*PPCudaBusIdFn)(const Backend *be, char *buf, size_t n);
/* A collective of sock (a connected Comm of the job: socket, or memory with 1 rank):
 * an NCCL Comm of the same ranks on be's GPU, the ncclUniqueId broadcast from rank 0
 * over sock. sock is borrowed: it must outlive the returned Comm, which uses it for
 * liveness, message headers and the host collectives. Groups split from the result own
 * their socket groups. PP_OK with *out (device_memory = 1), or PP_ERUNTIME (PP_EUSAGE
 * when NCCL cannot be loaded) with err; then *out = NULL. */
typedef int (*PPNcclCreateFn)(Comm *sock, const Backend *be, const PPNcclHost *host, Comm **out,
                              char *err, size_t errlen);

int pp_nccl_available(char *why, size_t whylen);
int pp_cuda_bus_id(const Backend *be, char *buf, size_t n);
int pp_nccl_create(Comm *sock, const Backend *be, const PPNcclHost *host, Comm **out, char *err,
                   size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
