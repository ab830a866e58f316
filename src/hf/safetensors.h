/* safetensors.h — the .safetensors tensor file: a validated header table, reads of whole
 * tensors or element ranges into fp32 with pread of just their bytes, and a writer whose
 * output matches the reference implementation's byte for byte. The format and what is
 * checked: [Note: safetensors format] in safetensors.c. Knows nothing of models. */
#ifndef PP_SAFETENSORS_H
#define PP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define SAFETENSORS_HEADER_MAX 100000000u /* header bytes, the reference's limit */
#define SAFETENSORS_MAX_DIMS 8

/* Every dtype the format defines, in the reference implementation's order (its writer
 * sorts tensors by this order, descending, then by name). Only F32, BF16 and F16 can be
 * read into fp32; the others are listed so that a file holding them opens and the read
 * that asks for one names it. */
typedef enum {
    SAFETENSORS_BOOL,
    SAFETENSORS_F4,
    SAFETENSORS_F6_E2M3,
    SAFETENSORS_F6_E3M2,
    SAFETENSORS_U8,
    SAFETENSORS_I8,
    SAFETENSORS_F8_E5M2,
    SAFETENSORS_F8_E4M3,
    SAFETENSORS_F8_E8M0,
    SAFETENSORS_F8_E4M3FNUZ,
    SAFETENSORS_F8_E5M2FNUZ,
    SAFETENSORS_I16,
    SAFETENSORS_U16,
    SAFETENSORS_F16,
    SAFETENSORS_BF16,
    SAFETENSORS_I32,
    SAFETENSORS_U32,
    SAFETENSORS_F32,
    SAFETENSORS_C64,
    SAFETENSORS_F64,
    SAFETENSORS_I64,
    SAFETENSORS_U64,
    SAFETENSORS_NDTYPES
} SafetensorsDtype;

/* The dtype's name in headers ("F32", "BF16", "F8_E4M3"); "?" out of range. */
const char *safetensors_dtype_name(SafetensorsDtype t);
/* Bits of one element (4 for F4, 6 for the F6 types, 8..64 otherwise); 0 out of range. */
int safetensors_dtype_bits(SafetensorsDtype t);
/* The dtype named `name` exactly; -1 if none. */
int safetensors_dtype_parse(const char *name);

/* One tensor of an open file. The strings belong to the file. */
typedef struct {
    const char *name;
    SafetensorsDtype dtype;
    int ndim;                            /* 0..SAFETENSORS_MAX_DIMS; 0: a scalar */
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* each >= 0 */
    uint64_t numel;                      /* product of shape (1 for a scalar) */
    uint64_t begin, end;                 /* its bytes in the file: [begin, end), absolute */
} SafetensorsTensor;

typedef struct SafetensorsFile SafetensorsFile;

/* Open the .safetensors file at `path` and read and check its header (nothing of the
 * data section is read). Returns PP_OK with *out set; or PP_EUSAGE (a missing,
 * unreadable or damaged file: the message names the path, and the tensor or key, and
 * what is wrong) or PP_ERUNTIME (an I/O error) with *out = NULL. Close with
 * safetensors_close. */
int safetensors_open(const char *path, SafetensorsFile **out, char *err, size_t errlen);
void safetensors_close(SafetensorsFile *f); /* NULL is fine */

const char *safetensors_path(const SafetensorsFile *f);
/* Number of tensors, and the i-th in the order of their bytes in the file. */
size_t safetensors_count(const SafetensorsFile *f);
const SafetensorsTensor *safetensors_tensor(const SafetensorsFile *f, size_t i);
/* The tensor called `name`, NULL if none (a binary search). */
const SafetensorsTensor *safetensors_find(const SafetensorsFile *f, const char *name);

/* The header's `__metadata__` map: count, the i-th pair in the header's order, and the
 * value of `key` (NULL if absent). */
size_t safetensors_meta_count(const SafetensorsFile *f);
void safetensors_meta_at(const SafetensorsFile *f, size_t i, const char **key, const char **value);
const char *safetensors_meta_get(const SafetensorsFile *f, const char *key);

/* Read elements [first, first + n) of tensor `t` (row-major, from this file) into
 * out[n] as fp32: F32 bit for bit, BF16 and F16 widened exactly (F16 subnormals,
 * infinities and NaN payloads included). pread(2)s just those n elements' bytes.
 * Returns PP_OK; PP_EUSAGE for a range past the tensor's end, a dtype other than these
 * three (named), or a file that ended early (truncated since it was opened);
 * PP_ERUNTIME for an I/O error. */
int safetensors_read(SafetensorsFile *f, const SafetensorsTensor *t, uint64_t first, uint64_t n,
                     float *out, char *err, size_t errlen);

/* Tensor bytes read from this file so far by safetensors_read (not the header). */
uint64_t safetensors_bytes_read(const SafetensorsFile *f);
/* Bytes of the header: 8 + its length N, read once at open. */
uint64_t safetensors_header_bytes(const SafetensorsFile *f);

/* ---- writing ------------------------------------------------------------------------ */

/* One tensor to write: its name (non-empty UTF-8), the dtype to store it as (F32, or
 * BF16 rounded to nearest even as torch rounds, NaN stored as 0x7FC0), its shape, and
 * its numel fp32 values: `data`, or when data is NULL the writer's fill callback. */
typedef struct {
    const char *name;
    SafetensorsDtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const float *data;
} SafetensorsWriteTensor;

/* Fills dst[numel of t] with t's fp32 values, for a tensor whose data is NULL. Returns
 * PP_OK, or a status with a message in err (the write is then abandoned). */
typedef int (*SafetensorsFill)(void *ctx, const SafetensorsWriteTensor *t, float *dst, char *err,
                               size_t errlen);

typedef struct {
    const char *key, *value; /* UTF-8 */
} SafetensorsMeta;

/* Write tensors t[0..n) to `path` as the reference implementation does: tensors
 * ordered by dtype (descending, the SafetensorsDtype order) then by name byte-wise,
 * packed without gaps; the header `{"__metadata__":{...},"NAME":{"dtype":..,"shape":
 * [..],"data_offsets":[b,e]},...}` compact, meta pairs in the order given (the
 * reference writes a hash map: byte-identical only for 0 or 1 pairs), padded with
 * spaces to a multiple of 8 bytes. Written atomically ([Note: atomic file writes] in
 * common.c): a failure leaves nothing under `path`. fill/ctx serve tensors whose data
 * is NULL (fill may be NULL if there are none). Returns PP_OK; PP_EUSAGE for a bad
 * tensor (named: empty or non-UTF-8 name, a duplicate, a dtype other than F32/BF16, a
 * bad shape) or metadata; PP_ERUNTIME for an I/O error; or fill's status. */
int safetensors_write(const char *path, const SafetensorsWriteTensor *t, size_t n,
                      const SafetensorsMeta *meta, size_t nmeta, SafetensorsFill fill, void *ctx,
                      char *err, size_t errlen);

/* Bytes of tensor data t would take when written (numel times its dtype's size);
 * UINT64_MAX for a shape that overflows. */
uint64_t safetensors_write_bytes(const SafetensorsWriteTensor *t);

/* fp32 <-> 16-bit conversions (exact widening; RNE narrowing, torch's NaN rule). */
float safetensors_bf16_to_f32(uint16_t h);
float safetensors_f16_to_f32(uint16_t h);
uint16_t safetensors_f32_to_bf16(float x);

#endif
