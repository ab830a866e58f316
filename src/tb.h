/* tb.h — TensorBoard event files: scalar summaries as `Event` protobufs (protobuf-c, from
 * src/tb_event.proto) in TFRecord framing, one file per rank in output.dir/tb/
 * ([Note: TensorBoard event files] in tb.c). */
#ifndef PP_TB_H
#define PP_TB_H

#include <stddef.h>
#include <stdint.h>

#define TB_FILE_PREFIX "events.out.tfevents."
#define TB_FILE_VERSION "brain.Event:2"
#define TB_MAX_SCALARS 16 /* values in one tb_write */

typedef struct TbWriter TbWriter;

typedef struct {
    const char *tag; /* "train/loss"; TensorBoard groups tags by the part before the '/' */
    float value;     /* TensorBoard stores scalars as float32 */
} TbScalar;

/* Start this rank's event file in `dir` (created if missing):
 * events.out.tfevents.SECONDS.HOST.rankNNNNN, whose first record is the file version.
 * Earlier files of this rank there (and, on rank 0, of ranks >= world) are removed by a
 * fresh run (resumed_at < 0), as a fresh run rewrites losses.csv; a run resumed at step
 * resumed_at keeps them, cutting only their steps after resumed_at, which it logs again
 * ([Note: TensorBoard event files] in tb.c). The new file's SECONDS is after every
 * earlier one of this rank, so that readers, which take a run's files in name order,
 * read it last. Returns PP_OK with *out set, or PP_ERUNTIME with a message (*out NULL). */
int tb_open(TbWriter **out, const char *dir, int rank, int world, long resumed_at, char *err,
            size_t errlen);

/* Append one Event at `step` whose summary holds the n (<= TB_MAX_SCALARS) scalars, and
 * flush it to the file. Returns PP_OK, or PP_ERUNTIME with "writing PATH: reason". */
int tb_write(TbWriter *w, long step, const TbScalar *v, int n, char *err, size_t errlen);

/* The file's path. */
const char *tb_path(const TbWriter *w);

/* Close the file (NULL is fine). */
void tb_close(TbWriter *w);

/* CRC-32C (Castagnoli, reflected, as iSCSI and TFRecord use it) of n bytes, continuing
 * from `crc` (0 to start): tb_crc32c(0, "123456789", 9) = 0xE3069283. */
uint32_t tb_crc32c(uint32_t crc, const void *data, size_t n);

/* TFRecord's mask of a stored CRC: rotated right by 15 bits, plus 0xa282ead8. */
uint32_t tb_crc_mask(uint32_t crc);

#endif
