/* comm_nccl_load.c — the NCCL transport's entry points, looked up in the loaded CUDA
 * backend (see comm_nccl_load.h). */
#include "comm_nccl_load.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend_load.h"
#include "comm_nccl.h"

#define CUDA_LIB "libpptrain_cuda.so"

/* The entry points (NULL: the backend is not loaded, or its object has none: built
 * without the NCCL transport). Optional: without them the socket transport runs and
 * runtime.transport nccl says why. */
typedef struct {
    PPNcclAvailableFn available;
    PPCudaBusIdFn bus_id;
    PPNcclCreateFn create;
} NcclLib;

static NcclLib nccl_lib(void) {
    NcclLib l = {0};
    void *h = backend_cuda_library();
    if (!h) return l;
    l.available = (PPNcclAvailableFn)dlsym(h, "pp_nccl_available");
    l.bus_id = (PPCudaBusIdFn)dlsym(h, "pp_cuda_bus_id");
    l.create = (PPNcclCreateFn)dlsym(h, "pp_nccl_create");
    return l;
}

static int is_cuda(const Backend *be) { return be && be->name && !strcmp(be->name, "cuda"); }

void comm_nccl_device(const Backend *be, CommDevice *d, char *nccl_why, size_t whylen) {
    memset(d, 0, sizeof *d);
    nccl_why[0] = '\0';
    if (gethostname(d->host, sizeof d->host - 1) != 0) snprintf(d->host, sizeof d->host, "?");
    if (!is_cuda(be)) return;
    NcclLib lib = nccl_lib();
    d->cuda = 1;
    if (!lib.bus_id || lib.bus_id(be, d->bus, sizeof d->bus) != 0) {
        if (!lib.bus_id) snprintf(d->bus, sizeof d->bus, "?");
        snprintf(nccl_why, whylen, "%s",
                 lib.bus_id ? d->bus : CUDA_LIB " was built without the NCCL transport");
        return;
    }
    d->nccl = lib.available && lib.create && lib.available(nccl_why, whylen);
}

int comm_nccl_create(Comm *sock, const Backend *be, Comm **out, char *err, size_t errlen) {
    static const PPNcclHost host = {comm_tag_format};
    char why[PP_ERR_MAX / 2];
    NcclLib lib = nccl_lib();
    *out = NULL;
    if (!is_cuda(be))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "the NCCL transport needs the CUDA backend (this rank runs on %s)",
                       be && be->name ? be->name : "no backend");
    if (!lib.create || !lib.available)
        return pp_errf(err, errlen, PP_EUSAGE,
                       CUDA_LIB " was built without the NCCL transport: rebuild with make");
    if (!lib.available(why, sizeof why))
        return pp_errf(err, errlen, PP_EUSAGE, "NCCL cannot be loaded: %s", why);
    return lib.create(sock, be, &host, out, err, errlen);
}
