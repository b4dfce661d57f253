/*
 * safetensors.h - weights in the safetensors format, the field's common
 * format, so that other tools (numpy, PyTorch, the safetensors library)
 * read what qkv writes and qkv reads what they write.
 *
 * A file is: an 8-byte little-endian header length N; N bytes of JSON, an
 * object that maps each tensor's name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (byte offsets into the data that follows) and may hold a
 * "__metadata__" object of strings; then the raw little-endian data. qkv
 * writes F32 (F64 from the double build), its format version as
 * "qkv_format" and a CRC-32 of the data as "qkv_crc32" in the metadata, and
 * saves atomically (a new temporary file, fsync, rename).
 *
 * It reads F16, BF16, F32 and F64, the dtypes of published weights. F16
 * (IEEE binary16) and BF16 (a float32's high 16 bits) values are floats
 * exactly, subnormals and -0 among them, and become qkv_real with no
 * rounding; F64 ones are rounded to float32 in a float build. Every value
 * must be finite, whatever its dtype: ±infinity and NaN are refused.
 *
 * The reader is strict and safe on hostile files: it checks every size the
 * header declares against the bytes present before allocating anything,
 * and refuses a header length beyond the file or above
 * QKV_SAFETENSORS_MAX_HEADER; JSON that is invalid, nested too deep or
 * repeats a key; an unknown dtype; a shape whose size overflows; offsets
 * out of range, overlapping or leaving holes; a CRC mismatch; and, when
 * loading into a parameter list, a missing or unexpected tensor or a shape
 * that differs. Each error is one line that names the tensor or the byte
 * offset.
 */
#ifndef QKV_SAFETENSORS_H
#define QKV_SAFETENSORS_H

#include "qkv/params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_SAFETENSORS_FORMAT 1 /* "qkv_format" this qkv writes */
/* qkv reads headers of up to 1 MiB (its own are about 100 bytes a tensor;
 * the format allows 100 MB): with the parser's limit of a JSON value per 3
 * bytes, a header costs at most about 11 times its size in memory. */
#define QKV_SAFETENSORS_MAX_HEADER (1u << 20)
#define QKV_SAFETENSORS_MAX_FILE ((size_t)1 << 34) /* 16 GiB */

/* One metadata entry: both strings, valid UTF-8. */
typedef struct qkv_meta_entry {
    const char *key, *value;
} qkv_meta_entry;

/* Saves every parameter of p, in order, to path, with n_meta entries of
 * metadata besides qkv's own (keys and values UTF-8 of at most 1024
 * bytes, as the reader takes; keys may not start with "qkv_", be
 * "__metadata__", nor repeat: QKV_ERR_ARG).
 * Refuses a parameter with a value that is not finite (QKV_ERR_NUMERIC),
 * a header the reader would refuse (a repeated key, over
 * QKV_SAFETENSORS_MAX_HEADER: QKV_ERR_ARG; no parameter is named
 * __metadata__, which qkv_params_add refuses), leaving the old file as
 * it was. QKV_ERR_IO and the reason in err for a path that exists and is
 * not a regular file (a directory, a device: left as it is) and for other
 * failures. */
qkv_status qkv_safetensors_save(const qkv_params *p, const char *path, const qkv_meta_entry *meta,
                                int n_meta, qkv_error *err);

/* A safetensors file, read and checked. */
typedef struct qkv_st qkv_st;

/* Reads path and checks its header and framing (everything but the match
 * with a model). NULL with the reason in err. Close with qkv_st_close. */
qkv_st *qkv_st_open(const char *path, qkv_error *err);

/* The same from len bytes in memory (copied); name labels the messages. */
qkv_st *qkv_st_parse(const void *data, size_t len, const char *name, qkv_error *err);

void qkv_st_close(qkv_st *f); /* accepts NULL */

/* The metadata value of key, or NULL. */
const char *qkv_st_meta(const qkv_st *f, const char *key);

/* The metadata entries in the file's order ("__metadata__" as written):
 * how many (0 for NULL), and entry i's key (NULL when i is out of range
 * or f is NULL); qkv_st_meta gives its value. The strings are f's, valid
 * until qkv_st_close. */
int qkv_st_meta_count(const qkv_st *f);
const char *qkv_st_meta_key(const qkv_st *f, int i);

/* The tensors in the file: how many, and tensor i's name, dtype ("F16",
 * "BF16", "F32" or "F64", as the file names it; NULL when i is out of
 * range) and shape (up to QKV_MAX_DIMS dimensions into shape; returns the
 * number of dimensions, or -1 when there are more, i is out of range or
 * shape is NULL). */
int qkv_st_count(const qkv_st *f);
const char *qkv_st_name(const qkv_st *f, int i);
const char *qkv_st_dtype(const qkv_st *f, int i);
int qkv_st_shape(const qkv_st *f, int i, int shape[QKV_MAX_DIMS]);

/* The most dimensions the reader takes for a tensor. */
#define QKV_ST_MAX_DIMS 8

/* Every dimension of tensor i, as the file has them: returns how many (0
 * to QKV_ST_MAX_DIMS), or -1 when i is out of range or f is
 * NULL, and writes the first cap of them (all, when it has no more) into
 * dims, which may be NULL when cap is 0. Where qkv_st_shape stops at
 * QKV_MAX_DIMS and at what an int holds (an empty tensor's dimension may
 * exceed it), this gives the rest, for a caller that shows or checks a
 * file's shapes, such as qkv inspect. */
int qkv_st_dims(const qkv_st *f, int i, uint64_t *dims, int cap);

/* The index of the tensor named name, or -1 (none, or f or name NULL). */
int qkv_st_find(const qkv_st *f, const char *name);

/* Tensor i's number of values, its shape's product (1 for a shape of no
 * dimensions, 0 for an empty tensor, and for i out of range or f NULL);
 * for any number of dimensions the file may have (QKV_ST_MAX_DIMS), where
 * qkv_st_shape gives at most QKV_MAX_DIMS. */
size_t qkv_st_numel(const qkv_st *f, int i);

/* Copies tensor i's values, in the file's (row-major) order, into out (n
 * of them), converted as qkv_st_load converts them: each must be finite;
 * F16, BF16 and F32 values convert exactly, and an F64 value is rounded
 * to float32 in a float build, to nearest, one that would round to
 * infinity being refused (QKV_ERR_NUMERIC). n must be the tensor's
 * number of values (qkv_st_numel); i out of range, n that differs, or a
 * NULL f or out is QKV_ERR_ARG. Each error is one line naming the file
 * and the tensor (by its index when i is out of range); on an error out
 * is not written. */
qkv_status qkv_st_read(const qkv_st *f, int i, qkv_real *out, size_t n, qkv_error *err);

/* Copies the file's tensors into p's parameters of the same names: every
 * parameter must be in the file with its shape, and every tensor of the
 * file must be a parameter; values, of any dtype the reader takes, must be
 * finite (F16, BF16 and F32 values convert exactly; F64 values are rounded
 * to float32 in a float build, to nearest: one that would round to
 * infinity, from 0x1.ffffffp+127 in magnitude on, is refused with
 * QKV_ERR_NUMERIC; one just above FLT_MAX becomes FLT_MAX). On an error
 * nothing is changed. */
qkv_status qkv_st_load(const qkv_st *f, qkv_params *p, qkv_error *err);

/* qkv_st_open, qkv_st_load and qkv_st_close in one call. */
qkv_status qkv_safetensors_load(qkv_params *p, const char *path, qkv_error *err);

#ifdef __cplusplus
}
#endif
#endif
