/* plot.h — `pptrain plot`: the loss curves of one or more runs, read from their
 * output.dir, drawn into an SVG or a PNG file. The face of libpptrain_plot.so, the plot
 * module (plot.c, plot_data.c, plot_axis.c, plot_draw.c; cairo and fontconfig), which
 * pptrain opens with dlopen for this subcommand only ([Note: plot module loading] in
 * plot_load.c): what the loader looks up with dlsym. Nothing here needs a cairo header. */
#ifndef PP_PLOT_H
#define PP_PLOT_H

/* The module is built with -fvisibility=hidden: these are its only exported symbols. */
#define PP_PLOT_EXPORT __attribute__((visibility("default")))

/* Bumped whenever a function below changes: the loader refuses a module built from
 * another version of the sources. */
#define PP_PLOT_ABI 1

/* The symbols, with their types (the loader declares pointers of these types). */
typedef int (*PPPlotAbiFn)(void);
typedef int (*PPPlotMainFn)(int argc, char **argv);

/* PP_PLOT_ABI as the module was built. */
PP_PLOT_EXPORT int pp_plot_abi(void);

/* Run the plot subcommand; argv[0] is "plot", the rest run directories and options:
 *   --out FILE.svg|FILE.png   the picture (default RUN_DIR/loss.svg for one run; needed
 *                             with several), written atomically
 *   --x steps|tokens          the bottom axis (steps); the other unit gets the top axis
 *                             when every run trains the same tokens per step
 *   --log-y                   loss on a log scale
 *   --no-lr                   no learning rate curves (and no right axis)
 *   --help                    the usage
 * Prints the file written and one line per run. Returns an exit code: 0 done; 1 the
 * file could not be written or drawn; 2 bad usage or a run that cannot be read (a
 * directory without losses.csv, an empty or malformed file, named with its line),
 * with nothing written. */
PP_PLOT_EXPORT int pp_plot_main(int argc, char **argv);

#endif
