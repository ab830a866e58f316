/* plot_load.h — `pptrain plot` in the binary: a loader that opens the plot module,
 * libpptrain_plot.so, with dlopen and runs it, so that pptrain itself links no cairo
 * ([Note: plot module loading] in plot_load.c). */
#ifndef PP_PLOT_LOAD_H
#define PP_PLOT_LOAD_H

#include <stddef.h>
#include <stdio.h>

/* The plot module's path into path[n]: $PPTRAIN_PLOT_LIB when set, else the first of
 * beside the executable and its build/cpu/ that exists. Returns 1 when that file exists
 * (the variable's: is readable), else 0 with the first candidate in path. */
int plot_lib_path(char *path, size_t n);

/* `pptrain plot ...` (argv[0] "plot"; the options are plot.h's pp_plot_main's): opens
 * the module and runs it. Returns its exit code; 2 with a message saying what is
 * missing and what to do (make, or apt install libcairo2 libfontconfig1) when the
 * module or a library it needs cannot be loaded, writing nothing. */
int plot_main(int argc, char **argv);

/* One line for `pptrain --version`: where the plot module is, or that it is not found. */
void plot_print_builtin(FILE *f);

#endif
