/* tokcases.h — test/tok/'s goldens for the tests of src/tok/ (test_tok.c, test_prepare.c):
 * the tokenizer files, cases.json (made by test/tok/gen.py with the tokenizers library)
 * and its texts, and tokenizer files edited for a test. */
#ifndef PP_TOKCASES_H
#define PP_TOKCASES_H

#include <jansson.h>
#include <stddef.h>

/* A tokenizer of test/tok/: NAME.json, the document token prepare-data puts before each
 * document by default and its id, 1 + its largest id. */
typedef struct {
    const char *name, *doc;
    int doc_id, vocab;
} TokKind;

#define TOKCASE_NKINDS 6
extern const TokKind tokcase_kinds[TOKCASE_NKINDS];

/* test/tok/NAME, next to this file (the tests run from the repository root); a ring of 4
 * buffers: valid for the next 3 calls. */
const char *tokcase_path(const char *name);

/* cases.json, parsed (fails the test if it cannot); the caller json_decrefs it. */
json_t *tokcase_cases(void);

/* hex text -> bytes, malloc'd and NUL-terminated, their count in *n. */
char *tokcase_unhex(const char *hex, size_t *n);

/* The text of cases.json named `name` (malloc'd, *n bytes), or NULL if there is none. */
char *tokcase_text(json_t *cases, const char *name, size_t *n);

/* A row's ids with the special tokens, a new reference: its "ids", or ("+") the template
 * of tokenizer `kind` around its "ids_nospecial". */
json_t *tokcase_ids(json_t *cases, const char *kind, json_t *row);

/* test/tok/BASE with edit(json) applied, or with each member of `replace` (a JSON object)
 * set at the top level when edit is NULL, written to the test directory as `name`;
 * returns its path (tmp()'s ring). */
const char *tokcase_edited(const char *base, const char *name, void (*edit)(json_t *),
                           json_t *replace);

#endif
