/* checkrun.h — the main() of every Check test program. */
#ifndef PP_CHECKRUN_H
#define PP_CHECKRUN_H

#include <check.h>

/* Run every test of suite s (CK_NORMAL output) and free it; returns the exit status: 0
 * when all passed, 1 otherwise, and 1 when the suite ran no test at all (CK_RUN_CASE or
 * CK_RUN_SUITE naming nothing, or a suite left empty: it must not pass vacuously).
 * sigpipe_default: restore SIGPIPE's default action first, so that a socket write that
 * would raise it kills the test (the transport tests prove nothing does). */
int check_run(Suite *s, int sigpipe_default);

#endif
