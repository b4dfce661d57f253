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

#endif
