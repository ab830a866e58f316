/* hf_json_internal.h — what src/hf/ shares about JSON: parsing through jansson with
 * messages that name the file, line and column; a growable text buffer; and JSON text
 * written the way the Hugging Face tools write it (Python's json.dumps(indent=2,
 * sort_keys=True) for config.json and the shard index, serde_json's compact strings for
 * safetensors headers). Private to src/hf/. */
#ifndef PP_HF_JSON_INTERNAL_H
#define PP_HF_JSON_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "common.h"

/* A growable byte buffer, always NUL-terminated after len bytes. Zero-initialize. */
typedef struct {
    char *p;
    size_t len, cap;
} HfBuf;

void hf_buf_append(HfBuf *b, const void *data, size_t n);
void hf_buf_puts(HfBuf *b, const char *s);
void hf_buf_printf(HfBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hf_buf_free(HfBuf *b);

/* Parse text[len] as JSON (duplicate keys refused, like trailing text) whose root must
 * be an object. `path` and `what` name it in messages: "PATH: WHAT is not valid JSON:
 * REASON at line L, column C" ("PATH: WHAT is not a JSON object"). Returns PP_OK with
 * *out (the caller json_decref's it), or PP_EUSAGE. */
int hf_json_parse(const char *path, const char *what, const char *text, size_t len, json_t **out,
                  char *err, size_t errlen);

/* Read the regular file at `path` (at most max_bytes) and hf_json_parse it ("cannot
 * open PATH: reason" and the like, pp_read_file_max's, if it cannot be read). */
int hf_json_load_file(const char *path, size_t max_bytes, json_t **out, char *err, size_t errlen);

/* The JSON type of v in words, for messages: "a string", "an integer", "null", ... */
const char *hf_json_kind(const json_t *v);

/* Append v as Python's json.dumps(v, indent=2, sort_keys=True) writes it: objects'
 * keys sorted by code point (byte order of UTF-8), 2-space indentation, ", " nowhere
 * (",\n" and ": "), empty containers as {} and [], non-ASCII and control characters
 * escaped as \uxxxx (ensure_ascii), reals as Python's repr (shortest round trip:
 * 1e-05, 500000.0). No trailing newline. */
void hf_json_dump_python(HfBuf *b, const json_t *v);

/* Append the string s[n] quoted as serde_json writes it (what the safetensors reference
 * writer uses): '"' and '\\' escaped, control characters as \b \t \n \f \r or \u00xx,
 * everything else (UTF-8 included) as is. */
void hf_json_quote_compact(HfBuf *b, const char *s, size_t n);

/* The shortest decimal that reads back as x, formatted as Python's repr(float) (fixed
 * notation for exponents -4..15 with at least one fractional digit, else d.ddde±XX),
 * into out[32]. Infinities and NaN as Python's json writes them (Infinity, NaN). */
void hf_json_format_real(double x, char out[32]);

/* 1 if s[n] is valid UTF-8 without NUL bytes. */
int hf_utf8_valid(const char *s, size_t n);

#endif
