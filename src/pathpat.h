/* pathpat.h — the patterns of the config's path keys: sbatch's %j, %A, %a (%% a
 * literal %) and ${NAME} from the environment ($$ a literal $). [Note: path patterns] */
#ifndef PP_PATHPAT_H
#define PP_PATHPAT_H

#include <stddef.h>

/* Expand `pattern` into out[n] from this process's environment. Returns PP_OK; or
 * PP_EUSAGE with a message in err (without the key's name: the caller adds it) when a
 * pattern is unknown or malformed, when the variable it names is unset or empty (the
 * message names the variable and what to do), or when the result does not fit in n
 * bytes. out is unspecified after a failure. */
int pathpat_expand(const char *pattern, char *out, size_t n, char *err, size_t errlen);

/* Write `s` with every '%' and '$' doubled into out[n], so that pathpat_expand of out
 * gives s back. Returns 0, or -1 when it does not fit (out is then truncated). */
int pathpat_escape(const char *s, char *out, size_t n);

#endif
