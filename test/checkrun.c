/* checkrun.c — see checkrun.h. */
#include "checkrun.h"

#include <signal.h>

int check_run(Suite *s, int sigpipe_default) {
    if (sigpipe_default) signal(SIGPIPE, SIG_DFL);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
