/*
 * checkpoint.h - the coreference model's checkpoint file.
 *
 * A safetensors file (qkv/safetensors.h) of the four weights "wq", "wk",
 * "wv" [vocab, d_k] and "wo" [d_k, classes], with the model in its
 * __metadata__: format "qkv-coref", version, vocab, d_k, classes, scaled,
 * init_std, seed and vocab_fingerprint (8 hex digits), besides qkv's own
 * format version and CRC-32 of the data. Other tools read it as they
 * read any safetensors file (scripts/st_numpy.py, with numpy alone).
 *
 * It is written to a new temporary file in PATH's directory (never a file
 * or link someone planted there), fsynced and renamed over PATH, so a crash
 * or a full disk never leaves a half-written checkpoint, and the previous
 * one survives any failure. The loader checks the shapes the metadata
 * implies against the file's tensors, and every offset against the bytes
 * present, before it allocates the model.
 */
#ifndef QKV_COREF_CHECKPOINT_H
#define QKV_COREF_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "apps/coref/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_COREF_CHECKPOINT_VERSION 1u /* the "version" metadata written and read */

/* Saves m to path atomically, tagged with the vocabulary fingerprint.
 * Refuses a model with a weight that is not finite (QKV_ERR_NUMERIC) and a
 * path that exists and is not a regular file (QKV_ERR_IO), leaving path as
 * it was; QKV_ERR_IO or QKV_ERR_NOMEM with the reason in err otherwise. */
qkv_status qkv_coref_save(const qkv_coref_model *m, uint32_t fingerprint, const char *path,
                          qkv_error *err);

/* qkv_coref_load(const char *path, uint32_t fingerprint, qkv_error *err)
 * loads a model saved by qkv_coref_save. Returns NULL with the reason in
 * err for: a missing path or a directory (QKV_ERR_IO); an empty, truncated
 * or corrupted file, one that is not safetensors or not a coreference
 * checkpoint, a newer version, metadata that disagrees with the tensors,
 * a hyper-parameter out of the bounds the qkv program's options have
 * (init_std at most QKV_COREF_MAX_INIT_STD, d_k at most QKV_COREF_MAX_DK),
 * or a fingerprint other than `fingerprint` (QKV_ERR_FORMAT); a program built
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
