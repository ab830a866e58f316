/* checkrun.c — see checkrun.h. */
#include "checkrun.h"

#include <signal.h>
#include <stdio.h>

int check_run(Suite *s, int sigpipe_default) {
    if (sigpipe_default) signal(SIGPIPE, SIG_DFL);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
    srunner_free(sr);
    if (ran == 0) printf("check_run: the suite ran no test: it cannot pass\n");
    return failed || ran == 0 ? 1 : 0;
}
