/* safetensors.c — the .safetensors file: header checks, ranged fp32 reads, and the
 * reference-identical writer (see safetensors.h). */
#define _GNU_SOURCE /* pread */
#include "safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_json_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads and writes little-endian data in place: a big-endian host needs swaps"
#endif

/* [Note: safetensors format]
 * A .safetensors file (github.com/huggingface/safetensors, README "Format" and
 * safetensors/src/tensor.rs) is
 *
 *   8 bytes   N, a little-endian u64: the header's length
 *   N bytes   a UTF-8 JSON object: "NAME": {"dtype": "F32", "shape": [2, 3],
 *             "data_offsets": [BEGIN, END]} for each tensor, and optionally
 *             "__metadata__": {"key": "value", ...} (strings only)
 *   the rest  the data section: each tensor's bytes at [BEGIN, END) of it, row-major,
 *             little-endian
 *
 * What opening checks, each failure a message naming the file and the tensor or key:
 * the file holds the 8 bytes; N is at most 100 MB (the reference's limit) and the
 * header lies inside the file; the header is JSON (jansson: duplicate keys and text
 * after the object refused) and an object; __metadata__ maps strings to strings; each
 * tensor is an object with a known dtype (any of the reference's: those other than F32,
 * BF16 and F16 are refused only when read, by name), a shape of at most 8 non-negative
 * integers whose product times the dtype's bits neither overflows nor leaves a partial
 * byte, and data_offsets of two integers BEGIN <= END inside the data section with
 * END - BEGIN the shape's size; no two tensors' bytes overlap; and the data section ends
 * where the last tensor ends, as the reference requires too. That last check is what
 * catches a header length N that is a few bytes short: the writers pad the header with
 * up to 7 spaces, so N - 1 still reads as the same JSON, and every tensor's bytes would
 * be taken from 1 byte too early in the file (a too long N reads data bytes as JSON, or
 * puts the last tensor past the end). The reference also wants the tensors packed
 * without gaps from offset 0; we allow gaps, which misplace nothing: a header is either
 * read as written or refused. A read asks pread(2) for just the bytes of the elements
 * asked for, and counts them (a rank that loads its own stages reads only those).
 *
 * The writer is the reference's serialize_file: tensors sorted by dtype, descending in
 * the reference's enum order (F32 before BF16 before F16), then by name (byte order),
 * packed from offset 0; the header compact as serde_json writes it, with __metadata__
 * first and the tensors in data order, each {"dtype","shape","data_offsets"} in that
 * order; padded with spaces to a multiple of 8 bytes. So a file written here from the
 * values read from a reference-written F32 file is that file byte for byte (the
 * metadata map is a Rust HashMap: its order is fixed only with 0 or 1 entries, which is
 * what transformers writes, {"format": "pt"}). */

static const struct {
    const char *name;
    int bits;
} g_dtypes[SAFETENSORS_NDTYPES] = {
    [SAFETENSORS_BOOL] = {"BOOL", 8},
    [SAFETENSORS_F4] = {"F4", 4},
    [SAFETENSORS_F6_E2M3] = {"F6_E2M3", 6},
    [SAFETENSORS_F6_E3M2] = {"F6_E3M2", 6},
    [SAFETENSORS_U8] = {"U8", 8},
    [SAFETENSORS_I8] = {"I8", 8},
    [SAFETENSORS_F8_E5M2] = {"F8_E5M2", 8},
    [SAFETENSORS_F8_E4M3] = {"F8_E4M3", 8},
    [SAFETENSORS_F8_E8M0] = {"F8_E8M0", 8},
    [SAFETENSORS_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [SAFETENSORS_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [SAFETENSORS_I16] = {"I16", 16},
    [SAFETENSORS_U16] = {"U16", 16},
    [SAFETENSORS_F16] = {"F16", 16},
    [SAFETENSORS_BF16] = {"BF16", 16},
    [SAFETENSORS_I32] = {"I32", 32},
    [SAFETENSORS_U32] = {"U32", 32},
    [SAFETENSORS_F32] = {"F32", 32},
    [SAFETENSORS_C64] = {"C64", 64},
    [SAFETENSORS_F64] = {"F64", 64},
    [SAFETENSORS_I64] = {"I64", 64},
    [SAFETENSORS_U64] = {"U64", 64},
};

const char *safetensors_dtype_name(SafetensorsDtype t) {
    return (unsigned)t < SAFETENSORS_NDTYPES ? g_dtypes[t].name : "?";
}

int safetensors_dtype_bits(SafetensorsDtype t) {
    return (unsigned)t < SAFETENSORS_NDTYPES ? g_dtypes[t].bits : 0;
}

int safetensors_dtype_parse(const char *name) {
    for (int t = 0; t < SAFETENSORS_NDTYPES; t++)
        if (strcmp(g_dtypes[t].name, name) == 0) return t;
    return -1;
}

/* ---- 16-bit floats -------------------------------------------------------------------- */

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

float safetensors_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

float safetensors_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) return bits_f32(sign | 0x7F800000 | m << 13); /* inf; NaN keeps its payload */
    if (e) return bits_f32(sign | (e + 112) << 23 | m << 13);    /* rebias 15 -> 127 */
    if (m == 0) return bits_f32(sign);                           /* +-0 */
    /* subnormal m * 2^-24 = 1.f * 2^(p-24), p the top bit of m: biased exponent p + 103 */
    uint32_t p = 31 - (uint32_t)__builtin_clz(m);
    return bits_f32(sign | (p + 103) << 23 | ((m << (23 - p)) & 0x7FFFFF));
}

/* torch's c10::BFloat16 rounding: nearest, ties to even; any NaN becomes 0x7FC0. */
uint16_t safetensors_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return 0x7FC0;
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* ---- opening -------------------------------------------------------------------------- */

struct SafetensorsFile {
    char path[PP_PATH_MAX];
    int fd;
    uint64_t size;              /* of the file at open */
    uint64_t hlen;              /* N */
    json_t *root;               /* the parsed header: owns the names and metadata strings */
    size_t n;                   /* tensors */
    SafetensorsTensor *t;       /* [n] in data order */
    SafetensorsTensor **byname; /* [n] sorted by name */
    size_t nmeta;
    const char **meta; /* [2 * nmeta]: key, value, ... */
    uint64_t bytes_read;
};

/* pread exactly n bytes at off. 0, or -1 with errno (0 when the file ended first). */
static int pread_full(int fd, void *buf, uint64_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return -1;
        }
        p += r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return 0;
}

/* The integer v as a non-negative uint64 into *out; 0 if it is not one. */
static int get_count(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static void shape_str(const SafetensorsTensor *t, char *buf, size_t n) {
    buf[0] = 0;
    pp_strappendf(buf, n, "[");
    for (int d = 0; d < t->ndim; d++)
        pp_strappendf(buf, n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    pp_strappendf(buf, n, "]");
}

/* t's shape and numel from the header's "shape" `sh`, checked against t's dtype. */
static int parse_shape(const SafetensorsFile *f, const char *name, const json_t *sh,
                       SafetensorsTensor *t, char *err, size_t errlen) {
    const char *P = f->path;
    if (!sh || !json_is_array(sh))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": \"shape\" is %s, not an array",
                       P, name, sh ? hf_json_kind(sh) : "missing");
    if (json_array_size(sh) > SAFETENSORS_MAX_DIMS)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": shape has %zu dimensions, more than %d", P, name,
                       json_array_size(sh), SAFETENSORS_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1, dim;
    int overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (!get_count(json_array_get(sh, (size_t)i), &dim))
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: tensor \"%s\": shape[%d] is not a non-negative integer", P, name,
                           i);
        t->shape[i] = (int64_t)dim;
        if (dim && numel > UINT64_MAX / dim)
            overflow = 1;
        else
            numel *= dim;
    }
    char shp[160];
    shape_str(t, shp, sizeof shp);
    uint64_t bits = (uint64_t)g_dtypes[t->dtype].bits;
    if (overflow || numel > UINT64_MAX / bits)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": shape %s has more elements than 64 bits count", P, name,
                       shp);
    if (numel * bits % 8)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": shape %s of %s does not fill whole bytes", P, name, shp,
                       g_dtypes[t->dtype].name);
    t->numel = numel;
    return PP_OK;
}

/* Fill t from the header entry `name`: `info`. data_len is the data section's size. */
static int parse_tensor(SafetensorsFile *f, const char *name, const json_t *info, uint64_t data_len,
                        SafetensorsTensor *t, char *err, size_t errlen) {
    const char *P = f->path;
    memset(t, 0, sizeof *t);
    t->name = name;
    if (!json_is_object(info))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": expected an object of dtype, shape and "
                       "data_offsets, found %s",
                       P, name, hf_json_kind(info));
    const json_t *dt = json_object_get(info, "dtype"), *sh = json_object_get(info, "shape"),
                 *off = json_object_get(info, "data_offsets");
    if (!dt || !json_is_string(dt))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": \"dtype\" is %s, not a string",
                       P, name, dt ? hf_json_kind(dt) : "missing");
    int d = safetensors_dtype_parse(json_string_value(dt));
    if (d < 0)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": unknown dtype \"%s\"", P, name,
                       json_string_value(dt));
    t->dtype = (SafetensorsDtype)d;
    int rc = parse_shape(f, name, sh, t, err, errlen);
    if (rc != PP_OK) return rc;
    char shp[160];
    shape_str(t, shp, sizeof shp);
    uint64_t need = t->numel * (uint64_t)g_dtypes[d].bits / 8, b, e;
    if (!off || !json_is_array(off) || json_array_size(off) != 2 ||
        !get_count(json_array_get(off, 0), &b) || !get_count(json_array_get(off, 1), &e) || e < b)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": \"data_offsets\" is not [BEGIN, END] with 0 <= "
                       "BEGIN <= END",
                       P, name);
    if (e - b != need)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but "
                       "%s of shape %s takes %llu",
                       P, name, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)(e - b), g_dtypes[d].name, shp,
                       (unsigned long long)need);
    if (e > data_len)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] run past the end of the "
                       "data (%llu bytes; a truncated file?)",
                       P, name, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)data_len);
    t->begin = 8 + f->hlen + b;
    t->end = 8 + f->hlen + e;
    return PP_OK;
}

static int parse_meta(SafetensorsFile *f, const json_t *m, char *err, size_t errlen) {
    if (!json_is_object(m))
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: \"__metadata__\" is %s, not an object of strings", f->path,
                       hf_json_kind(m));
    f->nmeta = json_object_size(m);
    f->meta = pp_calloc(2 * f->nmeta + 1, sizeof *f->meta);
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach((json_t *)m, key, v) {
        if (!json_is_string(v))
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: \"__metadata__\" key \"%s\" is %s, not a string", f->path, key,
                           hf_json_kind(v));
        f->meta[i++] = key;
        f->meta[i++] = json_string_value(v);
    }
    return PP_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const SafetensorsTensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(SafetensorsTensor *const *)a)->name, (*(SafetensorsTensor *const *)b)->name);
}

/* Parse the header text into f's table and check the tensors against each other. */
static int parse_header(SafetensorsFile *f, const char *text, char *err, size_t errlen) {
    int rc = hf_json_parse(f->path, "the header", text, f->hlen, &f->root, err, errlen);
    if (rc != PP_OK) return rc;
    uint64_t data_len = f->size - 8 - f->hlen;
    f->t = pp_calloc(json_object_size(f->root) + 1, sizeof *f->t);
    const char *key;
    json_t *v;
    json_object_foreach(f->root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            rc = parse_meta(f, v, err, errlen);
        else
            rc = parse_tensor(f, key, v, data_len, &f->t[f->n++], err, errlen);
        if (rc != PP_OK) return rc;
    }
    qsort(f->t, f->n, sizeof *f->t, cmp_offset);
    const SafetensorsTensor *last = NULL; /* the non-empty tensor that ends last so far */
    for (size_t i = 0; i < f->n; i++) {
        const SafetensorsTensor *t = &f->t[i];
        if (t->begin == t->end) continue;
        if (last && t->begin < last->end)
            return pp_errf(err, errlen, PP_EUSAGE,
                           "%s: tensors \"%s\" and \"%s\" overlap (bytes [%llu, %llu) and "
                           "[%llu, %llu) of the file)",
                           f->path, last->name, t->name, (unsigned long long)last->begin,
                           (unsigned long long)last->end, (unsigned long long)t->begin,
                           (unsigned long long)t->end);
        if (!last || t->end > last->end) last = t;
    }
    uint64_t end = last ? last->end : 8 + f->hlen; /* where the tensors' data ends */
    if (end != f->size)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: %llu bytes follow the last tensor's data (the tensors end at byte "
                       "%llu, the file has %llu): a damaged header length (%llu) or bytes "
                       "appended to the file? (safetensors' own loader refuses it too)",
                       f->path, (unsigned long long)(f->size - end), (unsigned long long)end,
                       (unsigned long long)f->size, (unsigned long long)f->hlen);
    f->byname = pp_malloc((f->n + 1) * sizeof *f->byname);
    for (size_t i = 0; i < f->n; i++) f->byname[i] = &f->t[i];
    qsort(f->byname, f->n, sizeof *f->byname, cmp_name);
    return PP_OK;
}

/* Read N and the header text; check N against the limit and the file. */
static int read_header(SafetensorsFile *f, char *err, size_t errlen) {
    unsigned char nb[8];
    if (f->size < 8)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: the file has %llu bytes, too few for the 8-byte header length "
                       "(a truncated file?)",
                       f->path, (unsigned long long)f->size);
    if (pread_full(f->fd, nb, 8, 0) != 0)
        return pp_errf(err, errlen, PP_ERUNTIME, "%s: cannot read the header length: %s", f->path,
                       errno ? strerror(errno) : "the file ended");
    f->hlen = 0;
    for (int i = 7; i >= 0; i--) f->hlen = f->hlen << 8 | nb[i];
    if (f->hlen > SAFETENSORS_HEADER_MAX)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: header length %llu is over the limit of %u bytes (not a "
                       "safetensors file?)",
                       f->path, (unsigned long long)f->hlen, SAFETENSORS_HEADER_MAX);
    if (f->hlen > f->size - 8)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: the header (%llu bytes) runs past the end of the file (%llu "
                       "bytes; a truncated file?)",
                       f->path, (unsigned long long)f->hlen, (unsigned long long)f->size);
    char *text = pp_malloc(f->hlen + 1);
    int rc = PP_OK;
    if (pread_full(f->fd, text, f->hlen, 8) != 0)
        rc = pp_errf(err, errlen, errno ? PP_ERUNTIME : PP_EUSAGE, "%s: cannot read the header: %s",
                     f->path, errno ? strerror(errno) : "the file ended (truncated?)");
    else
        rc = parse_header(f, text, err, errlen);
    free(text);
    return rc;
}

int safetensors_open(const char *path, SafetensorsFile **out, char *err, size_t errlen) {
    *out = NULL;
    if (strlen(path) >= PP_PATH_MAX)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: path too long", path);
    struct stat st;
    int fd = pp_open_regular(path, &st);
    if (fd < 0)
        return pp_errf(err, errlen, PP_EUSAGE, "cannot open %s: %s", path,
                       fd == -2 ? pp_file_kind(st.st_mode) : strerror(errno));
    SafetensorsFile *f = pp_calloc(1, sizeof *f);
    strcpy(f->path, path);
    f->fd = fd;
    f->size = (uint64_t)st.st_size;
    int rc = read_header(f, err, errlen);
    if (rc != PP_OK) {
        safetensors_close(f);
        return rc;
    }
    *out = f;
    return PP_OK;
}

void safetensors_close(SafetensorsFile *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    json_decref(f->root);
    free(f->t);
    free(f->byname);
    free(f->meta);
    free(f);
}

const char *safetensors_path(const SafetensorsFile *f) { return f->path; }
size_t safetensors_count(const SafetensorsFile *f) { return f->n; }

const SafetensorsTensor *safetensors_tensor(const SafetensorsFile *f, size_t i) {
    return i < f->n ? &f->t[i] : NULL;
}

const SafetensorsTensor *safetensors_find(const SafetensorsFile *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->byname[mid]->name, name);
        if (c == 0) return f->byname[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t safetensors_meta_count(const SafetensorsFile *f) { return f->nmeta; }

void safetensors_meta_at(const SafetensorsFile *f, size_t i, const char **key, const char **value) {
    PP_CHECK(i < f->nmeta);
    *key = f->meta[2 * i];
    *value = f->meta[2 * i + 1];
}

const char *safetensors_meta_get(const SafetensorsFile *f, const char *key) {
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

uint64_t safetensors_bytes_read(const SafetensorsFile *f) { return f->bytes_read; }
uint64_t safetensors_header_bytes(const SafetensorsFile *f) { return 8 + f->hlen; }

/* ---- reading -------------------------------------------------------------------------- */

int safetensors_read(SafetensorsFile *f, const SafetensorsTensor *t, uint64_t first, uint64_t n,
                     float *out, char *err, size_t errlen) {
    PP_CHECK(t >= f->t && t < f->t + f->n); /* a tensor of this file */
    if (first > t->numel || n > t->numel - first)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": elements [%llu, %llu) are past its end (it has "
                       "%llu)",
                       f->path, t->name, (unsigned long long)first, (unsigned long long)(first + n),
                       (unsigned long long)t->numel);
    if (t->dtype != SAFETENSORS_F32 && t->dtype != SAFETENSORS_BF16 && t->dtype != SAFETENSORS_F16)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\" is stored as %s, which cannot be read as floating "
                       "point (F32, BF16 and F16 can)",
                       f->path, t->name, g_dtypes[t->dtype].name);
    if (n == 0) return PP_OK;
    uint64_t size = (uint64_t)g_dtypes[t->dtype].bits / 8, bytes = n * size;
    uint64_t off = t->begin + first * size;
    /* A 16-bit tensor is read into the upper half of out and widened in place from the
     * front: out[i] (bytes 4i..4i+3) overwrites only source elements < i+1 (bytes 2n+2j). */
    char *dst = (char *)out + (size == 2 ? 2 * n : 0);
    if (pread_full(f->fd, dst, bytes, off) != 0) {
        if (errno)
            return pp_errf(err, errlen, PP_ERUNTIME, "%s: reading tensor \"%s\" failed: %s",
                           f->path, t->name, strerror(errno));
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: the file ends inside tensor \"%s\" (its bytes [%llu, %llu) were "
                       "asked for; truncated since it was opened?)",
                       f->path, t->name, (unsigned long long)off,
                       (unsigned long long)(off + bytes));
    }
    f->bytes_read += bytes;
    if (size == 2) {
        const uint16_t *src = (const uint16_t *)dst;
        if (t->dtype == SAFETENSORS_BF16)
            for (uint64_t i = 0; i < n; i++) out[i] = safetensors_bf16_to_f32(src[i]);
        else
            for (uint64_t i = 0; i < n; i++) out[i] = safetensors_f16_to_f32(src[i]);
    }
    return PP_OK;
}

/* ---- writing -------------------------------------------------------------------------- */

uint64_t safetensors_write_bytes(const SafetensorsWriteTensor *t) {
    uint64_t numel = 1, size = (uint64_t)safetensors_dtype_bits(t->dtype) / 8;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim = (uint64_t)t->shape[d];
        if (dim && numel > UINT64_MAX / dim) return UINT64_MAX;
        numel *= dim;
    }
    return numel > UINT64_MAX / size ? UINT64_MAX : numel * size;
}

/* The reference's order: dtype descending, then name (qsort_r over indices into t). */
static int cmp_write(const void *a, const void *b, void *t) {
    const SafetensorsWriteTensor *x = (const SafetensorsWriteTensor *)t + *(const size_t *)a,
                                 *y = (const SafetensorsWriteTensor *)t + *(const size_t *)b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int check_write_tensor(const char *path, const SafetensorsWriteTensor *t, char *err,
                              size_t errlen) {
    if (!t->name || !t->name[0] || !hf_utf8_valid(t->name, strlen(t->name)))
        return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor name \"%s\" is empty or not UTF-8", path,
                       t->name ? t->name : "(null)");
    if (t->dtype != SAFETENSORS_F32 && t->dtype != SAFETENSORS_BF16)
        return pp_errf(err, errlen, PP_EUSAGE,
                       "%s: tensor \"%s\": cannot write dtype %s (F32 and BF16 can be written)",
                       path, t->name, safetensors_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > SAFETENSORS_MAX_DIMS)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": %d dimensions", path, t->name,
                       t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": shape[%d] = %lld", path,
                           t->name, d, (long long)t->shape[d]);
    if (safetensors_write_bytes(t) > (uint64_t)1 << 62)
        return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\": its shape overflows", path,
                       t->name);
    return PP_OK;
}

/* The header for the tensors in `order`, padded with spaces to a multiple of 8. */
static void build_header(HfBuf *h, const SafetensorsWriteTensor *t, const size_t *order, size_t n,
                         const SafetensorsMeta *meta, size_t nmeta) {
    hf_buf_puts(h, "{");
    if (nmeta) {
        hf_buf_puts(h, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            if (i) hf_buf_puts(h, ",");
            hf_json_quote_compact(h, meta[i].key, strlen(meta[i].key));
            hf_buf_puts(h, ":");
            hf_json_quote_compact(h, meta[i].value, strlen(meta[i].value));
        }
        hf_buf_puts(h, "}");
    }
    uint64_t off = 0;
    for (size_t k = 0; k < n; k++) {
        const SafetensorsWriteTensor *w = &t[order[k]];
        if (k || nmeta) hf_buf_puts(h, ",");
        hf_json_quote_compact(h, w->name, strlen(w->name));
        hf_buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", safetensors_dtype_name(w->dtype));
        for (int d = 0; d < w->ndim; d++)
            hf_buf_printf(h, "%s%lld", d ? "," : "", (long long)w->shape[d]);
        uint64_t bytes = safetensors_write_bytes(w);
        hf_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + bytes));
        off += bytes;
    }
    hf_buf_puts(h, "}");
    while (h->len % 8) hf_buf_puts(h, " ");
}

/* Write tensor w's values through pf->f in its dtype. */
static int write_data(PPFile *pf, const SafetensorsWriteTensor *w, SafetensorsFill fill, void *ctx,
                      char *err, size_t errlen) {
    uint64_t numel = safetensors_write_bytes(w) / ((uint64_t)safetensors_dtype_bits(w->dtype) / 8);
    const float *src = w->data;
    float *owned = NULL;
    if (!src && numel) {
        if (!fill)
            return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\" has no data", pf->path,
                           w->name);
        owned = pp_malloc(numel * sizeof *owned);
        int rc = fill(ctx, w, owned, err, errlen);
        if (rc != PP_OK) {
            free(owned);
            return rc;
        }
        src = owned;
    }
    if (w->dtype == SAFETENSORS_F32) {
        if (numel) fwrite(src, 4, numel, pf->f); /* errors surface at commit */
    } else {
        uint16_t buf[4096];
        for (uint64_t i = 0; i < numel; i += 4096) {
            size_t m = numel - i < 4096 ? (size_t)(numel - i) : 4096;
            for (size_t j = 0; j < m; j++) buf[j] = safetensors_f32_to_bf16(src[i + j]);
            fwrite(buf, 2, m, pf->f);
        }
    }
    free(owned);
    return PP_OK;
}

/* No name twice (t in `order`, sorted), metadata UTF-8 without repeated keys. */
static int check_write_args(const char *path, const SafetensorsWriteTensor *t, size_t n,
                            const SafetensorsMeta *meta, size_t nmeta, const size_t *order,
                            char *err, size_t errlen) {
    for (size_t k = 1; k < n; k++)
        if (strcmp(t[order[k - 1]].name, t[order[k]].name) == 0)
            return pp_errf(err, errlen, PP_EUSAGE, "%s: tensor \"%s\" is given twice", path,
                           t[order[k]].name);
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value || !hf_utf8_valid(meta[i].key, strlen(meta[i].key)) ||
            !hf_utf8_valid(meta[i].value, strlen(meta[i].value)))
            return pp_errf(err, errlen, PP_EUSAGE, "%s: metadata pair %zu is not UTF-8 text", path,
                           i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(meta[i].key, meta[j].key) == 0)
                return pp_errf(err, errlen, PP_EUSAGE, "%s: metadata key \"%s\" is given twice",
                               path, meta[i].key);
    }
    return PP_OK;
}

int safetensors_write(const char *path, const SafetensorsWriteTensor *t, size_t n,
                      const SafetensorsMeta *meta, size_t nmeta, SafetensorsFill fill, void *ctx,
                      char *err, size_t errlen) {
    size_t *order = pp_malloc((n + 1) * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = i;
    int rc = PP_OK;
    for (size_t i = 0; i < n && rc == PP_OK; i++) rc = check_write_tensor(path, &t[i], err, errlen);
    if (rc == PP_OK) {
        qsort_r(order, n, sizeof *order, cmp_write, (void *)t);
        rc = check_write_args(path, t, n, meta, nmeta, order, err, errlen);
    }
    HfBuf h = {0};
    if (rc == PP_OK) {
        build_header(&h, t, order, n, meta, nmeta);
        if (h.len > SAFETENSORS_HEADER_MAX)
            rc = pp_errf(err, errlen, PP_EUSAGE,
                         "%s: the header would take %zu bytes, over "
                         "the limit of %u",
                         path, h.len, SAFETENSORS_HEADER_MAX);
    }
    PPFile pf;
    if (rc == PP_OK) rc = pp_file_create(&pf, path, NULL, err, errlen);
    if (rc == PP_OK) {
        unsigned char nb[8];
        for (int i = 0; i < 8; i++) nb[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        fwrite(nb, 1, 8, pf.f);
        fwrite(h.p, 1, h.len, pf.f);
        for (size_t k = 0; k < n && rc == PP_OK; k++)
            rc = write_data(&pf, &t[order[k]], fill, ctx, err, errlen);
        if (rc == PP_OK)
            rc = pp_file_commit(&pf, err, errlen);
        else
            pp_file_abort(&pf);
    }
    hf_buf_free(&h);
    free(order);
    return rc;
}
