/*
 * io.h - checkpoints and CSV logs.
 *
 * A checkpoint holds a model's hyper-parameters, a vocabulary fingerprint
 * and its four weight tensors, little-endian, with a CRC-32 at the end:
 *
 *   "QKVMODEL" u32 version  u64 file_size  u32 fingerprint
 *   u32 vocab  u32 d_k  u32 classes  u32 scaled  f64 init_std  u64 seed
 *   u32 n_tensors, then per tensor: u32 ndim, u32 dims[ndim], f32 data[]
 *   u32 crc32 (of every byte before it)
 *
 * It is written to PATH.tmp and renamed over PATH, so a crash never leaves a
 * half-written checkpoint behind.
 */
#ifndef QKV_IO_H
#define QKV_IO_H

#include <stdint.h>
#include <stdio.h>

#include "qkv/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_CHECKPOINT_VERSION 1u

/* Saves m to path atomically, tagged with the vocabulary fingerprint.
 * Returns QKV_ERR_IO with a message in err (may be NULL) on failure. */
qkv_status qkv_model_save(const qkv_model *m, uint32_t fingerprint, const char *path, char *err,
                          size_t errlen);

/* Loads a model saved by qkv_model_save. Returns NULL with *status and a
 * one-line message in err for: a missing path or a directory (QKV_ERR_IO);
 * an empty, truncated or corrupted file, a wrong magic, a newer format
 * version, or a fingerprint other than `fingerprint` (QKV_ERR_FORMAT). The
 * caller owns the result (qkv_model_free). */
qkv_model *qkv_model_load(const char *path, uint32_t fingerprint, qkv_status *status, char *err,
                          size_t errlen);

/* Creates every missing directory on the way to dir (like mkdir -p).
 * QKV_ERR_IO with a message on failure. */
qkv_status qkv_mkdirs(const char *dir, char *err, size_t errlen);

/* Creates the directory that the file path would live in (everything up to
 * its last '/'), as qkv_mkdirs does; nothing for a bare file name. */
qkv_status qkv_mkdirs_for(const char *path, char *err, size_t errlen);

/* Opens path for writing a CSV log (creating its directory) and writes the
 * header line. Returns NULL with a message in err on failure. */
FILE *qkv_csv_create(const char *path, const char *header, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
