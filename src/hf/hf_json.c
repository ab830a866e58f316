/* hf_json.c — JSON for src/hf/: jansson parsing with located messages, and writers that
 * reproduce Python's json.dumps and serde_json's output (see hf_json_internal.h). */
#include "hf_json_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffer ------------------------------------------------------------------------- */

static void buf_reserve(HfBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    PP_CHECK(p != NULL);
    b->p = p;
    b->cap = cap;
}

void hf_buf_append(HfBuf *b, const void *data, size_t n) {
    buf_reserve(b, n);
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void hf_buf_puts(HfBuf *b, const char *s) { hf_buf_append(b, s, strlen(s)); }

void hf_buf_printf(HfBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    PP_CHECK(n >= 0);
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void hf_buf_free(HfBuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- parsing ------------------------------------------------------------------------ */

int hf_json_parse(const char *path, const char *what, const char *text, size_t len, json_t **out,
                  char *err, size_t errlen) {
    json_error_t je;
    *out = NULL;
    /* JSON text has no NUL byte, but jansson takes one that follows a number as the
     * number's end: {"eos_token_id": 1\0} would read as {"eos_token_id": 1} */
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        size_t at = (size_t)(nul - text), line = 1, col = 1;
        for (size_t i = 0; i < at; i++, col++)
            if (text[i] == '\n') line++, col = 0;
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: %s is not valid JSON: a NUL byte at line %zu, column %zu", path, what,
                       line, col);
    }
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s is not valid JSON: %s at line %d, column %d",
                       path, what, je.text, je.line, je.column);
    if (!json_is_object(root)) {
        const char *kind = hf_json_kind(root);
        json_decref(root);
        return pp_errf(err, errlen, PP_EUSAGE, "%s: %s is %s, not a JSON object", path, what, kind);
    }
    *out = root;
    return PP_OK;
}

int hf_json_load_file(const char *path, size_t max_bytes, json_t **out, char *err, size_t errlen) {
    char *text;
    size_t len;
    *out = NULL;
    if (pp_read_file_max(path, NULL, max_bytes, &text, &len, err, errlen) != PP_OK)
        return PP_EUSAGE;
    int rc = hf_json_parse(path, "the file", text, len, out, err, errlen);
    free(text);
    return rc;
}

const char *hf_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* ---- UTF-8 -------------------------------------------------------------------------- */

/* Decode the code point at s[0..n) into *cp; its length in bytes, or 0 if malformed
 * (overlong forms, surrogates and values past U+10FFFF included). */
static size_t utf8_decode(const unsigned char *s, size_t n, unsigned *cp) {
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > n) return 0;
    unsigned v = k == 1 ? c : c & (0x7F >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return k;
}

int hf_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t k = utf8_decode(u + i, n - i, &cp);
        if (k == 0 || cp == 0) return 0;
        i += k;
    }
    return 1;
}

/* ---- writing ------------------------------------------------------------------------ */

/* The short escape of control character c (b t n f r), 0 if it has none. */
static char short_escape(unsigned c) {
    switch (c) {
    case '\b': return 'b';
    case '\t': return 't';
    case '\n': return 'n';
    case '\f': return 'f';
    case '\r': return 'r';
    }
    return 0;
}

void hf_json_quote_compact(HfBuf *b, const char *s, size_t n) {
    hf_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            hf_buf_append(b, e, 2);
        } else if (c < 0x20) {
            char e = short_escape(c);
            if (e)
                hf_buf_printf(b, "\\%c", e);
            else
                hf_buf_printf(b, "\\u%04x", c);
        } else {
            hf_buf_append(b, &s[i], 1);
        }
    }
    hf_buf_puts(b, "\"");
}

/* Python's json string with ensure_ascii: printable ASCII as is except '"' and '\\',
 * everything else as \uxxxx (UTF-16 surrogate pairs past U+FFFF). */
static void quote_python(HfBuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    hf_buf_puts(b, "\"");
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t k = utf8_decode(u + i, n - i, &cp);
        if (k == 0) { /* not met: jansson's strings are valid UTF-8 */
            cp = 0xFFFD;
            k = 1;
        }
        i += k;
        if (cp == '"' || cp == '\\')
            hf_buf_printf(b, "\\%c", (char)cp);
        else if (cp >= 0x20 && cp < 0x7F)
            hf_buf_printf(b, "%c", (char)cp);
        else if (cp < 0x20 && short_escape(cp))
            hf_buf_printf(b, "\\%c", short_escape(cp));
        else if (cp < 0x10000)
            hf_buf_printf(b, "\\u%04x", cp);
        else
            hf_buf_printf(b, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                          0xDC00 + ((cp - 0x10000) & 0x3FF));
    }
    hf_buf_puts(b, "\"");
}

void hf_json_format_real(double x, char out[32]) {
    if (isnan(x)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(x)) {
        strcpy(out, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char sci[40];
    int prec;
    for (prec = 1; prec < 17; prec++) { /* the fewest significant digits that round-trip */
        snprintf(sci, sizeof sci, "%.*e", prec - 1, x);
        if (strtod(sci, NULL) == x) break;
    }
    snprintf(sci, sizeof sci, "%.*e", prec - 1, x);
    /* sci is [-]d[.ddd]e±XX: split into sign, digits and decimal exponent */
    char digits[24];
    int nd = 0, neg = sci[0] == '-';
    const char *p = sci + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* 1.0 -> digit "1" */
    digits[nd] = 0;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp >= -4 && exp < 16) { /* fixed, as repr: 0.0001, 1e-05 is sci; 1e+16 is sci */
        if (exp < 0) {
            o += sprintf(o, "0.");
            for (int i = 0; i < -exp - 1; i++) *o++ = '0';
            o += sprintf(o, "%s", digits);
        } else {
            for (int i = 0; i <= exp; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1)
                o += sprintf(o, "%s", digits + exp + 1);
            else
                *o++ = '0';
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) o += sprintf(o, ".%s", digits + 1);
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void indent(HfBuf *b, int level) {
    hf_buf_puts(b, "\n");
    for (int i = 0; i < level; i++) hf_buf_puts(b, "  ");
}

static void dump_python(HfBuf *b, const json_t *v, int level) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        if (n == 0) {
            hf_buf_puts(b, "{}");
            return;
        }
        const char **keys = pp_malloc(n * sizeof *keys);
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) keys[i++] = key;
        qsort(keys, n, sizeof *keys, cmp_key); /* byte order of UTF-8 = code point order */
        hf_buf_puts(b, "{");
        for (i = 0; i < n; i++) {
            indent(b, level + 1);
            quote_python(b, keys[i], strlen(keys[i]));
            hf_buf_puts(b, ": ");
            dump_python(b, json_object_get(v, keys[i]), level + 1);
            if (i + 1 < n) hf_buf_puts(b, ",");
        }
        free(keys);
        indent(b, level);
        hf_buf_puts(b, "}");
        return;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) {
            hf_buf_puts(b, "[]");
            return;
        }
        hf_buf_puts(b, "[");
        for (size_t i = 0; i < n; i++) {
            indent(b, level + 1);
            dump_python(b, json_array_get(v, i), level + 1);
            if (i + 1 < n) hf_buf_puts(b, ",");
        }
        indent(b, level);
        hf_buf_puts(b, "]");
        return;
    }
    case JSON_STRING: quote_python(b, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER: hf_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return;
    case JSON_REAL:
        hf_json_format_real(json_real_value(v), num);
        hf_buf_puts(b, num);
        return;
    case JSON_TRUE: hf_buf_puts(b, "true"); return;
    case JSON_FALSE: hf_buf_puts(b, "false"); return;
    case JSON_NULL: hf_buf_puts(b, "null"); return;
    }
}

void hf_json_dump_python(HfBuf *b, const json_t *v) { dump_python(b, v, 0); }
