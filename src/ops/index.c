/*
 * index.c - indexing ops, each forward with its backward: gather (an
 * embedding lookup, one-hot·W) and pick_rows (one row per batch item).
 */
#include <string.h>

#include "kernels/kernels.h"
#include "ops/op.h"

/* ---- gather ------------------------------------------------------------- */

static void gather_backward(const qkv_node *nd)
{
    qkv_tensor *w = nd->in[0];
    size_t D = (size_t)w->shape[1], n = nd->out->numel / D;
    /* dW[ids[i],:] += dy[i,:] (scatter-add, in order) */
    qkv_scatter_add_rows(w->grad, nd->out->grad, nd->ints, n, D);
}

static const qkv_op_def op_gather = {"gather", gather_backward, 0};

qkv_tensor *qkv_gather(qkv_tape *t, qkv_tensor *w, const int *ids, int ndim, const int *shape)
{
    size_t n;
    if (!qkv_op_inputs_ok(t, "gather", w, NULL, 0))
        return qkv_nil();
    if (ids == NULL) { /* a missing argument, not a shape */
        qkv_tape_fail(t, QKV_ERR_ARG, "gather: no ids (ids is NULL)");
        return qkv_nil();
    }
    char sw[64];
    const qkv_status ns = ndim >= 1 && ndim <= QKV_MAX_DIMS - 1
                              ? qkv_shape_numel(ndim, shape, &n)
                              : QKV_ERR_ARG; /* NOMEM: sizes that overflow, said below */
    if (w->ndim != 2 || (ns != QKV_OK && ns != QKV_ERR_NOMEM)) {
        char si[64] = "of shape NULL"; /* the ids' shape as given, which may be what is wrong */
        if (shape != NULL && ndim >= 0 && ndim <= QKV_MAX_DIMS)
            qkv_dims_str(ndim, shape, si, sizeof si);
        else if (shape != NULL)
            snprintf(si, sizeof si, "of %d dimensions", ndim);
        qkv_shape_str(w, sw, sizeof sw);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "gather: table %s, ids %s: need a table [V,D] and ids of 1 to 3 "
                      "dimensions, each at least 1",
                      sw, si);
        return qkv_nil();
    }
    int V = w->shape[0], D = w->shape[1];
    size_t bytes;
    if (ns != QKV_OK || !qkv_mul_size(n, (size_t)D, &bytes) ||
        !qkv_mul_size(bytes, sizeof(qkv_real), &bytes)) {
        char si[64];
        qkv_dims_str(ndim, shape, si, sizeof si);
        qkv_shape_str(w, sw, sizeof sw);
        qkv_tape_fail(t, QKV_ERR_NOMEM, "gather: table %s, ids %s: the output's size overflows", sw,
                      si);
        return qkv_nil();
    }
    /* the output first: a shape too large for memory fails here, before
     * the scan reads ids that no array can hold */
    int oshape[QKV_MAX_DIMS];
    memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
    oshape[ndim] = D;
    qkv_tensor *out = qkv_op_out(t, "gather", ndim + 1, oshape, w, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t bad = qkv_first_bad_id(ids, n, V);
    if (bad < n) {
        qkv_shape_str(w, sw, sizeof sw);
        qkv_tape_fail(t, QKV_ERR_ARG, "gather: id %d at position %zu is outside [0,%d) of table %s",
                      ids[bad], bad, V, sw);
        return qkv_nil();
    }
    qkv_gather_rows(out->data, w->data, ids, n, (size_t)D);
    int failed;
    qkv_node *node = qkv_op_record(t, &op_gather, out, w, NULL, &failed);
    if (node != NULL && (node->ints = qkv_tape_ints(t, "gather", ids, n)) == NULL)
        failed = 1;
    return failed ? qkv_nil() : out;
}

/* ---- pick_rows ---------------------------------------------------------- */

static void pick_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    size_t T = (size_t)x->shape[1], D = (size_t)x->shape[2];
    for (size_t b = 0; b < (size_t)x->shape[0]; b++) /* dx[b,idx[b],:] += dy[b,:] */
        for (size_t j = 0; j < D; j++)
            x->grad[(b * T + (size_t)nd->ints[b]) * D + j] += dy[b * D + j];
}

static const qkv_op_def op_pick = {"pick_rows", pick_backward, 0};

qkv_tensor *qkv_pick_rows(qkv_tape *t, qkv_tensor *x, const int *idx)
{
    if (!qkv_op_inputs_ok(t, "pick_rows", x, NULL, 0))
        return qkv_nil();
    if (idx == NULL) { /* a missing argument, not a shape */
        qkv_tape_fail(t, QKV_ERR_ARG, "pick_rows: no indices (idx is NULL)");
        return qkv_nil();
    }
    char sx[64];
    if (x->ndim != 3) {
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "pick_rows: %s: input must be [B,T,D] with B indices", sx);
        return qkv_nil();
    }
    int B = x->shape[0], T = x->shape[1], D = x->shape[2];
    for (int b = 0; b < B; b++)
        if (idx[b] < 0 || idx[b] >= T) {
            qkv_shape_str(x, sx, sizeof sx);
            qkv_tape_fail(t, QKV_ERR_ARG, "pick_rows: index %d for item %d is outside [0,%d) of %s",
                          idx[b], b, T, sx);
            return qkv_nil();
        }
    int shape[2] = {B, D};
    qkv_tensor *out = qkv_op_out(t, "pick_rows", 2, shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (int b = 0; b < B; b++)
        memcpy(out->data + (size_t)b * D, x->data + ((size_t)b * T + idx[b]) * D,
               (size_t)D * sizeof(qkv_real));
    int failed;
    qkv_node *node = qkv_op_record(t, &op_pick, out, x, NULL, &failed);
    if (node != NULL && (node->ints = qkv_tape_ints(t, "pick_rows", idx, (size_t)B)) == NULL)
        failed = 1;
    return failed ? qkv_nil() : out;
}
