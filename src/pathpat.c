/* pathpat.c — sbatch-style patterns in the config's path keys ([Note: path patterns]). */
#include "pathpat.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* [Note: path patterns] Every path key of the config (model.init_from,
 * pipeline.schedule_file, data.train, data.val, output.dir) is expanded once, by
 * config_finalize, the way sbatch expands its -o/-e file names, so that a job array
 * can write `--set output.dir=runs/arr-%a` and have one directory per task (sbatch
 * expands %a only in its own -o, and pptrain used to take it literally: every task of
 * the array wrote into one directory "arr-%a"):
 *
 *   %j  SLURM_JOB_ID           %A  SLURM_ARRAY_JOB_ID     %a  SLURM_ARRAY_TASK_ID
 *   %%  a literal %            ${NAME}  the environment variable NAME
 *   $$  a literal $            %Nj, %4a ...  zero-padded to N digits (at most 10), as sbatch
 *
 * A variable that is unset or empty is an error naming it, not an empty string or a
 * literal "%a": either would quietly put two runs into one directory, the failure this
 * exists to prevent. Any other % or $ is an error too (sbatch's %x, %u, %N ... are not
 * expanded; ${SLURM_JOB_NAME}, ${USER} say the same), so `$HOME/runs` is refused with
 * a hint instead of becoming a directory named "$HOME". config_print writes the
 * expanded value with % and $ doubled (pathpat_escape), so that printing and reading
 * back give the same config; scripts/slurm/pptrain.sbatch undoes the doubling when it
 * reads output.dir from --print-config. */

#define PAD_MAX 10 /* sbatch pads to at most 10 characters */

/* The value of environment variable `name` (len bytes), or NULL with a message when it
 * is unset or empty; `pattern_text` is how the path wrote it ("%a", "${X}"). */
static const char *env_value(const char *name, size_t len, const char *pattern_text,
                             const char *hint, char *err, size_t errlen) {
    char var[PP_PATH_MAX];
    snprintf(var, sizeof var, "%.*s", (int)len, name);
    const char *v = getenv(var);
    if (v && *v) return v;
    pp_errf(err, errlen, PP_EUSAGE, "%s (the environment variable %s) is %s%s", pattern_text, var,
            v ? "empty" : "not set", hint);
    return NULL;
}

/* Append `v` left-padded with zeros to `width` characters at out[*len]; 0 or -1 (full). */
static int append(char *out, size_t n, size_t *len, const char *v, int width) {
    size_t vlen = strlen(v), pad = (size_t)width > vlen ? (size_t)width - vlen : 0;
    if (*len + pad + vlen >= n) return -1;
    memset(out + *len, '0', pad);
    memcpy(out + *len + pad, v, vlen);
    *len += pad + vlen;
    out[*len] = '\0';
    return 0;
}

/* The %-pattern at p ("%j", "%3a", "%%"): its value into out, *used = bytes of it read. */
static int expand_percent(const char *p, char *out, size_t n, size_t *len, size_t *used, char *err,
                          size_t errlen) {
    static const char *const hint = ": write the path without it, or run inside a SLURM job (a job "
                                    "array for %A and %a), where SLURM sets it (%% is a literal %)";
    size_t d = strspn(p + 1, "0123456789");
    char letter = p[1 + d], text[8];
    *used = d + 2;
    if (letter == '%' && !d) return append(out, n, len, "%", 0);
    const char *var = letter == 'j' ? "SLURM_JOB_ID" : letter == 'A' ? "SLURM_ARRAY_JOB_ID"
                    : letter == 'a' ? "SLURM_ARRAY_TASK_ID" : NULL;
    if (!var || d > 2) /* two digits of width are more than sbatch's 10 */
        return pp_errf(err, errlen, PP_EUSAGE,
                       "'%.*s' is not a pattern pptrain expands: it knows %%j (SLURM_JOB_ID), %%A "
                       "(SLURM_ARRAY_JOB_ID), %%a (SLURM_ARRAY_TASK_ID), each with an optional "
                       "width (%%4a), ${NAME} for any environment variable, and %%%% and $$ for a "
                       "literal %% and $",
                       letter ? (int)(d + 2) : (int)(d + 1), p);
    int width = d ? atoi(p + 1) : 0;
    snprintf(text, sizeof text, "%.*s", (int)(d + 2), p);
    const char *v = env_value(var, strlen(var), text, hint, err, errlen);
    if (!v) return PP_EUSAGE;
    return append(out, n, len, v, width > PAD_MAX ? PAD_MAX : width);
}

/* The $-pattern at p ("${NAME}", "$$"): its value into out, *used = bytes of it read. */
static int expand_dollar(const char *p, char *out, size_t n, size_t *len, size_t *used, char *err,
                         size_t errlen) {
    static const char *const hint = ": export it, or write the path without it ($$ is a literal $)";
    if (p[1] == '$') {
        *used = 2;
        return append(out, n, len, "$", 0);
    }
    size_t name = p[1] == '{' && (isalpha((unsigned char)p[2]) || p[2] == '_') ? 1 : 0;
    while (name && (isalnum((unsigned char)p[2 + name]) || p[2 + name] == '_')) name++;
    if (!name || p[2 + name] != '}') {
        size_t shown = strcspn(p, "/");
        return pp_errf(err, errlen, PP_EUSAGE,
                       "'%.*s' is not a pattern pptrain expands: write an environment variable as "
                       "${NAME} (braces, a name of letters, digits and _), and a literal $ as $$",
                       (int)(shown > 64 ? 64 : shown), p);
    }
    char text[PP_PATH_MAX + 4];
    snprintf(text, sizeof text, "%.*s", (int)(name + 3), p);
    *used = name + 3;
    const char *v = env_value(p + 2, name, text, hint, err, errlen);
    return v ? append(out, n, len, v, 0) : PP_EUSAGE;
}

int pathpat_expand(const char *pattern, char *out, size_t n, char *err, size_t errlen) {
    size_t len = 0;
    out[0] = '\0';
    for (const char *p = pattern; *p;) {
        size_t used = 1;
        int rc;
        if (*p == '%') rc = expand_percent(p, out, n, &len, &used, err, errlen);
        else if (*p == '$') rc = expand_dollar(p, out, n, &len, &used, err, errlen);
        else rc = len + 1 < n ? (out[len++] = *p, out[len] = '\0', 0) : -1;
        if (rc == -1)
            return pp_errf(err, errlen, PP_EUSAGE, "it expands to more than %zu bytes", n - 1);
        if (rc) return rc;
        p += used;
    }
    return PP_OK;
}

int pathpat_escape(const char *s, char *out, size_t n) {
    size_t len = 0;
    for (; *s; s++) {
        if (len + 2 + (*s == '%' || *s == '$') > n) {
            out[len] = '\0';
            return -1;
        }
        if (*s == '%' || *s == '$') out[len++] = *s;
        out[len++] = *s;
    }
    out[len] = '\0';
    return 0;
}
