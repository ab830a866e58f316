/* comm_nccl_load.h — the NCCL transport as the binary reaches it: its entry points in
 * the CUDA backend's shared object (comm_nccl.h), found there once the backend is
 * loaded ([Note: CUDA backend loading] in backend/backend_load.c). */
#ifndef PP_COMM_NCCL_LOAD_H
#define PP_COMM_NCCL_LOAD_H

#include <stddef.h>

#include "backend/backend.h"
#include "comm_select.h"

/* This rank's device for runtime.transport ([Note: transport selection] in
 * comm_select.h): on the CUDA backend its GPU's bus id, and whether NCCL loads (the
 * reason in nccl_why when not: libnccl.so.2 missing, or a libpptrain_cuda.so built
 * without the NCCL transport); on any other backend {cuda 0}. The host name is
 * gethostname's. */
void comm_nccl_device(const Backend *be, CommDevice *d, char *nccl_why, size_t whylen);

/* The NCCL transport over connected Comm sock on CUDA backend be, a collective of sock
 * ([Note: NCCL transport] in cuda/comm_nccl.cu): *out borrows sock, which must outlive
 * it. PP_OK, PP_EUSAGE when NCCL cannot be used here (be not the CUDA backend, NCCL not
 * loadable), PP_ERUNTIME when creating the communicator failed; the message in err. */
int comm_nccl_create(Comm *sock, const Backend *be, Comm **out, char *err, size_t errlen);

#endif
