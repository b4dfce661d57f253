/*
 * op.c - the helpers every op family uses (see op.h).
 */
#include <string.h>

#include "ops/op.h"

int qkv_op_inputs_ok(qkv_tape *t, const char *op, const qkv_tensor *a, const qkv_tensor *b,
                     int want_b)
{
    if (t == NULL || qkv_tape_status(t) != QKV_OK)
        return 0;
    if (qkv_tensor_is_nil(a) || (want_b && qkv_tensor_is_nil(b))) {
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: input is nil (NULL, or the result of a failed call)",
                      op);
        return 0;
    }
    return qkv_op_fresh(t, op, a) && qkv_op_fresh(t, op, b);
}

int qkv_op_fresh(qkv_tape *t, const char *op, const qkv_tensor *x)
{
    if (!qkv_tape_is_stale(t, x))
        return 1;
    qkv_tape_fail(t, QKV_ERR_ARG,
                  "%s: an input was made on this tape before its last qkv_tape_reset; "
                  "record it again, or keep it in a heap tensor (qkv_tensor_new)",
                  op);
    return 0;
}

int qkv_wants_grad(const qkv_tensor *a, const qkv_tensor *b)
{
    return a->grad != NULL || (b != NULL && b->grad != NULL);
}

qkv_tensor *qkv_op_tensor(qkv_tape *t, const char *op, int ndim, const int *shape, int with_grad)
{
    qkv_tensor *x = qkv_tape_tensor(t, ndim, shape, with_grad);
    if (qkv_tensor_is_nil(x))
        qkv_tape_name_failure(t, op);
    return x;
}

qkv_tensor *qkv_op_out(qkv_tape *t, const char *op, int ndim, const int *shape, const qkv_tensor *a,
                       const qkv_tensor *b)
{
    return qkv_op_tensor(t, op, ndim, shape, qkv_wants_grad(a, b));
}

qkv_node *qkv_op_record(qkv_tape *t, const qkv_op_def *op, qkv_tensor *out, qkv_tensor *a,
                        qkv_tensor *b, int *failed)
{
    *failed = 0;
    if (out->grad == NULL)
        return NULL;
    qkv_tensor *in[2] = {a, b};
    qkv_node *n = qkv_tape_record(t, op, out, b != NULL ? 2 : 1, in);
    *failed = n == NULL;
    return n;
}

qkv_tensor *qkv_op_finish(qkv_tape *t, const qkv_op_def *op, qkv_tensor *out, qkv_tensor *a,
                          qkv_tensor *b, double c)
{
    int failed;
    qkv_node *n = qkv_op_record(t, op, out, a, b, &failed);
    if (failed)
        return qkv_nil();
    if (n != NULL)
        n->c = c;
    return out;
}

size_t qkv_first_bad_id(const int *ids, size_t n, int rows)
{
    int lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) { /* one pass the compiler vectorises */
        lo = ids[i] < lo ? ids[i] : lo;
        hi = ids[i] > hi ? ids[i] : hi;
    }
    if (lo >= 0 && hi < rows)
        return n;
    size_t i = 0;
    while (ids[i] >= 0 && ids[i] < rows)
        i++;
    return i;
}

void *qkv_op_alloc(qkv_tape *t, const char *op, size_t n)
{
    void *p = qkv_tape_alloc(t, n);
    if (p == NULL)
        qkv_tape_name_failure(t, op);
    return p;
}

int *qkv_tape_ints(qkv_tape *t, const char *op, const int *src, size_t n)
{
    size_t bytes;
    if (!qkv_mul_size(n, sizeof(int), &bytes)) {
        qkv_tape_fail(t, QKV_ERR_NOMEM, "%s: index array too large", op);
        return NULL;
    }
    int *dst = qkv_op_alloc(t, op, bytes);
    if (dst != NULL)
        memcpy(dst, src, bytes);
    return dst;
}

int qkv_bcast2_plan(const qkv_tensor *a, const qkv_tensor *b, qkv_bcast2 *p)
{
    int ad[4], bd[4];
    p->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    p->same = qkv_tensor_same_shape(a, b);
    for (int i = 0; i < 4; i++) {
        int ai = i - (4 - a->ndim), bi = i - (4 - b->ndim);
        ad[i] = ai >= 0 ? a->shape[ai] : 1;
        bd[i] = bi >= 0 ? b->shape[bi] : 1;
        if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1)
            return 0;
        p->dim[i] = ad[i] > bd[i] ? ad[i] : bd[i];
    }
    for (int i = 0; i < p->ndim; i++)
        p->shape[i] = p->dim[4 - p->ndim + i];
    size_t sa = 1, sb = 1;
    for (int i = 3; i >= 0; i--) {
        p->astride[i] = ad[i] == 1 ? 0 : sa;
        p->bstride[i] = bd[i] == 1 ? 0 : sb;
        sa *= (size_t)ad[i];
        sb *= (size_t)bd[i];
    }
    return 1;
}

int qkv_op_dim(qkv_tape *t, const char *op, const qkv_tensor *x, int dim)
{
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: dimension %d is out of range for %s", op, dim, sx);
        return -1;
    }
    return d;
}

int qkv_bcast_plan(const qkv_tensor *a, const qkv_tensor *b, qkv_bcast *p)
{
    int bd[4];
    if (b->ndim > a->ndim)
        return 0;
    for (int i = 0; i < 4; i++) {
        int ai = i - (4 - a->ndim), bi = i - (4 - b->ndim);
        p->dim[i] = ai >= 0 ? a->shape[ai] : 1;
        bd[i] = bi >= 0 ? b->shape[bi] : 1;
        if (bd[i] != p->dim[i] && bd[i] != 1)
            return 0;
    }
    size_t s = 1;
    for (int i = 3; i >= 0; i--) {
        p->bstride[i] = bd[i] == 1 ? 0 : s;
        s *= (size_t)bd[i];
    }
    return 1;
}
