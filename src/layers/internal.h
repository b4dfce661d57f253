/*
 * internal.h - what the layer files share: parameter names and adding a
 * parameter under a layer's prefix, and writing and reading safetensors
 * files of tensors other than a parameter list's (an optimizer's state).
 */
#ifndef QKV_LAYERS_INTERNAL_H
#define QKV_LAYERS_INTERNAL_H

#include <stddef.h>

#include "qkv/layers.h"
#include "qkv/safetensors.h"

/* PREFIX.suffix into buf; QKV_ERR_ARG when it does not fit a name. */
qkv_status qkv_layer_name(char *buf, size_t len, const char *prefix, const char *suffix,
                          qkv_error *err);

/* Adds PREFIX.suffix with this shape and init to p; QKV_OK or the list's
 * error (in err). */
qkv_status qkv_layer_param(qkv_tensor **out, qkv_params *p, const char *prefix, const char *suffix,
                           int ndim, const int *shape, qkv_init init, qkv_error *err);

/* The first check of a layer's forward (and of a recurrent cell's steps).
 * A failed init leaves its layer zeroed. Records, unless the tape failed
 * before, "WHAT: no KIND" when present is 0 (a NULL layer or cell), or
 * "WHAT: the layer is not initialised ..." when ready is 0 (the layer
 * lacks a parameter: its init failed or was never called), and returns
 * nonzero; else returns 0. */
int qkv_layer_unset(qkv_tape *t, const char *what, const char *kind, int present, int ready);

/* Keeps prefix (or "" for NULL) as a layer's name, in buf of
 * QKV_LAYER_NAME_BYTES: a prefix short enough for its parameters' names
 * always fits. */
void qkv_layer_keep_name(char *buf, const char *prefix);

/* Whether t is there and has no error: a layer's forward asks before it
 * records, for qkv_layer_named. */
int qkv_layer_clean(const qkv_tape *t);

/* After a layer's forward that found the tape clean: when the tape failed
 * in it, the message names the layer, "KIND 'NAME': " in place of the
 * "KIND: " of the layer's own messages or in front of an op's, unless a
 * layer inside this one named itself already (the innermost says where:
 * qkv_tape_reword_failure rewords once). Returns y. */
qkv_tensor *qkv_layer_named(qkv_tape *t, int clean, const char *kind, const char *name,
                            qkv_tensor *y);

/* Where a list stands: its count and its generator's state. A layer's init
 * that fails part way undoes what it added (qkv_params_undo), so a refused
 * init leaves the list, and the draws of later inits, as they were. */
typedef struct qkv_params_mark {
    int n;
    qkv_rng rng;
} qkv_params_mark;
qkv_params_mark qkv_params_mark_get(const qkv_params *p);
void qkv_params_undo(qkv_params *p, const qkv_params_mark *m);

/* One tensor to write: numel values, of qkv_real (real, written F32, or F64
 * in the double build) or of double (f64, written F64) when f64 is not
 * NULL; name and shape as a parameter's. */
typedef struct qkv_st_tensor {
    const char *name;
    int ndim;
    const int *shape; /* (ndim) */
    const qkv_real *real;
    const double *f64;
    size_t numel;
} qkv_st_tensor;

/* Puts tensor i of ctx's into *out (its pointers valid until the write
 * returns). */
typedef void (*qkv_st_get)(const void *ctx, int i, qkv_st_tensor *out);

/* Writes n tensors, in order, to path as qkv_safetensors_save does (its
 * format, CRC, atomic save and refusals of values that are not finite and
 * of a header too long), with n_meta entries of metadata after qkv's own,
 * which the caller has checked (UTF-8 strings of at most 1024 bytes, no
 * key repeated nor one of qkv_format and qkv_crc32), as it has the names
 * (unique, not __metadata__). */
qkv_status qkv_st_write(const char *path, int n, qkv_st_get get, const void *ctx,
                        const qkv_meta_entry *meta, int n_meta, qkv_error *err);

/* Copies tensor i of f, which must be F64 and hold n values, all finite,
 * into out, exactly; else QKV_ERR_FORMAT (another dtype), QKV_ERR_ARG
 * (another count) or QKV_ERR_NUMERIC, with a line that names the file and
 * the tensor, and out not written; QKV_ERR_ARG for a NULL f or out, or
 * an i that is no tensor of f (qkv_st_find's -1). */
qkv_status qkv_st_read_f64(const qkv_st *f, int i, double *out, size_t n, qkv_error *err);

#endif
