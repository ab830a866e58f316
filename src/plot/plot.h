/* plot.h — `pptrain plot`: the loss curves of one or more runs, read from their
 * output.dir, drawn into an SVG or a PNG file. */
#ifndef PP_PLOT_H
#define PP_PLOT_H

#include <stdio.h>

/* Run the plot subcommand; argv[0] is "plot", the rest run directories and options:
 *   --out FILE.svg|FILE.png   the picture (default RUN_DIR/loss.svg for one run; needed
 *                             with several), written atomically
 *   --x steps|tokens          the bottom axis (steps); the other unit gets the top axis
 *                             when every run trains the same tokens per step
 *   --log-y                   loss on a log scale
 *   --no-lr                   no learning rate curves (and no right axis)
 * Prints the file written and one line per run. Returns an exit code: 0 done; 1 the
 * file could not be written or drawn; 2 bad usage or a run that cannot be read (a
 * directory without losses.csv, an empty or malformed file, named with its line),
 * with nothing written. */
int plot_main(int argc, char **argv);

/* The subcommand's usage and options (--help). */
void plot_usage(FILE *f);

#endif
