/*
 * internal.h - what the layer files share: parameter names and adding a
 * parameter under a layer's prefix.
 */
#ifndef QKV_LAYERS_INTERNAL_H
#define QKV_LAYERS_INTERNAL_H

#include <stddef.h>

#include "qkv/layers.h"

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

/* Where a list stands: its count and its generator's state. A layer's init
 * that fails part way undoes what it added (qkv_params_undo), so a refused
 * init leaves the list, and the draws of later inits, as they were. */
typedef struct qkv_params_mark {
    int n;
    qkv_rng rng;
} qkv_params_mark;
qkv_params_mark qkv_params_mark_get(const qkv_params *p);
void qkv_params_undo(qkv_params *p, const qkv_params_mark *m);

#endif
