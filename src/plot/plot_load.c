/* plot_load.c — `pptrain plot` in the binary: libpptrain_plot.so opened with dlopen and
 * its pp_plot_main run (plot_load.h). Built into pptrain; the rest of src/plot/ is the
 * module. */
#include "plot/plot_load.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "plot/plot.h"

/* [Note: plot module loading] pptrain never links cairo: cairo and fontconfig pull in
 * some twenty libraries (pixman, freetype, png, X11, xcb, ...) that a machine lent for a
 * GPU session lacks, and a binary that needs one of them does not start at all. The
 * drawing code (plot.c, plot_draw.c, and plot_data.c, plot_axis.c, common.c with it) is
 * a shared object of its own, $(BUILD)/libpptrain_plot.so (the Makefile's PLOT_SO:
 * build/cpu for ./pptrain, build/debug beside the sanitizer build's binary, which has
 * its own), linked against cairo and fontconfig; only `pptrain plot` opens it, so a
 * missing module or library is one message and exit 2 here, never a loader error at
 * start. The module is self-contained (its own copy of common.c, every symbol hidden
 * but plot.h's), so it does not depend on what the binary exports. It is never
 * closed: the process ends after the subcommand. As with the CUDA backend
 * ([Note: CUDA backend loading] in backend/backend_load.c), PPTRAIN_PLOT_LIB names
 * another file. */

#define PLOT_LIB "libpptrain_plot.so"

int plot_lib_path(char *path, size_t n) {
    const char *env = getenv("PPTRAIN_PLOT_LIB");
    if (env && *env) { /* a path even without a '/' (dlopen would search the library path) */
        snprintf(path, n, "%s%s", strchr(env, '/') ? "" : "./", env);
        return access(path, R_OK) == 0;
    }
    char exe[PP_PATH_MAX], dir[PP_PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        snprintf(path, n, "./" PLOT_LIB);
        return access(path, R_OK) == 0;
    }
    exe[len] = 0;
    pp_dirname(exe, dir, sizeof dir);
    /* beside: build/debug/pptrain's, a packed copy's; ./pptrain's in build/cpu */
    static const char *const rel[] = {"/" PLOT_LIB, "/build/cpu/" PLOT_LIB};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(path, n, "%s%s", dir, rel[i]);
        if (access(path, R_OK) == 0) return 1;
    }
    snprintf(path, n, "%s%s", dir, rel[0]);
    return 0;
}

void plot_print_builtin(FILE *f) {
    char path[PP_PATH_MAX];
    int found = plot_lib_path(path, sizeof path);
    fprintf(f, "plot: %s (cairo, fontconfig; opened by pptrain plot only): %s%s\n", PLOT_LIB, path,
            found ? "" : " (not found)");
}

/* dlopen the module and look up its entry point into *fn. PP_OK, or PP_EUSAGE with what
 * is missing and what to do. */
static int plot_lib_open(PPPlotMainFn *fn, char *err, size_t errlen) {
    char path[PP_PATH_MAX];
    const char *env = getenv("PPTRAIN_PLOT_LIB");
    if (!plot_lib_path(path, sizeof path)) {
        if (env && *env)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "the plot module PPTRAIN_PLOT_LIB names, %s, cannot be read: unset "
                           "PPTRAIN_PLOT_LIB (pptrain then finds the " PLOT_LIB " make builds) "
                           "or point it at " PLOT_LIB,
                           path);
        return pp_errf(err, errlen, PP_EUSAGE,
                       "the plot module " PLOT_LIB " is not beside pptrain nor in its "
                       "build/cpu (%s): run make, which builds it with pptrain (it needs "
                       "libcairo2-dev and libfontconfig-dev: scripts/install-deps), or set "
                       "PPTRAIN_PLOT_LIB to its path",
                       path);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "cannot load the plot module %s (%s). It draws with cairo and "
                       "fontconfig: install them (apt install libcairo2 libfontconfig1, or "
                       "scripts/install-deps), or rebuild it with make",
                       path, dlerror());
    PPPlotAbiFn abi = (PPPlotAbiFn)dlsym(h, "pp_plot_abi");
    *fn = (PPPlotMainFn)dlsym(h, "pp_plot_main");
    if (!abi || !*fn || abi() != PP_PLOT_ABI)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s is not the plot module of this pptrain (another version: rebuild "
                       "both with make)",
                       path);
    return PP_OK;
}

int plot_main(int argc, char **argv) {
    PPPlotMainFn run = NULL;
    char err[PP_ERR_MAX];
    if (plot_lib_open(&run, err, sizeof err)) {
        pp_error("plot: %s", err);
        return PP_EUSAGE;
    }
    return run(argc, argv);
}
