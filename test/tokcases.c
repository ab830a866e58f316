/* tokcases.c — test/tok/'s goldens (see tokcases.h). */
#include "tokcases.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "testdir.h"

const TokKind tokcase_kinds[TOKCASE_NKINDS] = {
    {"gpt2", "<|endoftext|>", 0, 700},
    {"llama3", "<|begin_of_text|>", 0, 800},
    {"sp", "<s>", 1, 756},
    {"qwen2", "<|endoftext|>", 800, 804},
    {"mistral", "<s>", 1, 800},
    {"llama2", "<s>", 1, 800},
};

const char *tokcase_path(const char *name) {
    static char buf[4][PP_PATH_MAX + 64];
    static int k;
    k = (k + 1) % 4;
    const char *slash = strrchr(__FILE__, '/');
    snprintf(buf[k], sizeof buf[k], "%.*stok/%s", slash ? (int)(slash - __FILE__ + 1) : 0, __FILE__,
             name);
    return buf[k];
}

json_t *tokcase_cases(void) {
    json_error_t je;
    json_t *c = json_load_file(tokcase_path("cases.json"), 0, &je);
    ck_assert_msg(c, "cases.json: %s at line %d", je.text, je.line);
    return c;
}

char *tokcase_unhex(const char *hex, size_t *n) {
    size_t len = strlen(hex) / 2;
    char *out = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[len] = 0;
    *n = len;
    return out;
}

char *tokcase_text(json_t *cases, const char *name, size_t *n) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(cases, "texts"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            return tokcase_unhex(json_string_value(json_object_get(e, "hex")), n);
    }
    return NULL;
}

json_t *tokcase_ids(json_t *cases, const char *kind, json_t *row) {
    json_t *ids = json_object_get(row, "ids");
    if (!json_is_string(ids)) return json_incref(ids);
    json_t *tmpl = json_object_get(json_object_get(cases, "templates"), kind);
    ck_assert_msg(tmpl, "cases.json has no template for %s", kind);
    json_t *out = json_deep_copy(json_object_get(tmpl, "pre"));
    json_array_extend(out, json_object_get(row, "ids_nospecial"));
    json_array_extend(out, json_object_get(tmpl, "post"));
    return out;
}

const char *tokcase_edited(const char *base, const char *name, void (*edit)(json_t *),
                           json_t *replace) {
    json_error_t je;
    json_t *j = json_load_file(tokcase_path(base), 0, &je);
    ck_assert_msg(j, "%s: %s", base, je.text);
    if (edit)
        edit(j);
    else
        json_object_update(j, replace);
    const char *path = tmp(name);
    ck_assert_int_eq(json_dump_file(j, path, 0), 0);
    json_decref(j);
    return path;
}
