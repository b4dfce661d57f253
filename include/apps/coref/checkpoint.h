/*
 * checkpoint.h - the coreference model's checkpoint file.
 *
 * It holds the model's hyper-parameters, a vocabulary fingerprint and its
 * four weight tensors, little-endian, with a CRC-32 at the end:
 *
 *   "QKVMODEL" u32 version  u64 file_size  u32 fingerprint
 *   u32 vocab  u32 d_k  u32 classes  u32 scaled  f64 init_std  u64 seed
 *   u32 n_tensors, then per tensor: u32 ndim, u32 dims[ndim], f32 data[]
 *   u32 crc32 (of every byte before it)
 *
 * It is written to a new temporary file in PATH's directory (never a file
 * or link someone planted there), fsynced and renamed over PATH, so a crash
 * or a full disk never leaves a half-written checkpoint, and the previous
 * one survives any failure. The loader checks every size the header
 * declares against the bytes present before it allocates anything.
 */
#ifndef QKV_COREF_CHECKPOINT_H
#define QKV_COREF_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "apps/coref/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_COREF_CHECKPOINT_VERSION 1u

/* Saves m to path atomically, tagged with the vocabulary fingerprint.
 * Refuses a model with a weight that is not finite (QKV_ERR_NUMERIC) and a
 * path that exists and is not a regular file (QKV_ERR_IO), leaving path as
 * it was; QKV_ERR_IO or QKV_ERR_NOMEM with the reason in err otherwise. */
qkv_status qkv_coref_save(const qkv_coref_model *m, uint32_t fingerprint, const char *path,
                          qkv_error *err);

/* qkv_coref_load(const char *path, uint32_t fingerprint, qkv_error *err)
 * loads a model saved by qkv_coref_save. Returns NULL with the reason in
 * err for: a missing path or a directory (QKV_ERR_IO); an empty, truncated
 * or corrupted file, a wrong magic, a newer format version, or a
 * fingerprint other than `fingerprint` (QKV_ERR_FORMAT); a program built
 * for another scalar type (QKV_ERR_ABI). The caller owns the result
 * (qkv_coref_model_free). A macro: it passes QKV_ABI. */
qkv_coref_model *qkv_coref_load_abi(unsigned abi, const char *path, uint32_t fingerprint,
                                    qkv_error *err);
#define qkv_coref_load(...) qkv_coref_load_abi(QKV_ABI, __VA_ARGS__)

/* The same from a checkpoint already in memory (len bytes at data); name
 * labels the messages. Reads nothing outside data, allocates nothing before
 * the sizes check out. For the loader's fuzz test. */
qkv_coref_model *qkv_coref_load_buffer(const void *data, size_t len, const char *name,
                                       uint32_t fingerprint, qkv_error *err);

#ifdef __cplusplus
}
#endif
#endif
