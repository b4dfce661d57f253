/*
 * softmax.c - softmax and log-softmax over the last dimension, each
 * forward with its backward. A fully masked row (all -inf) gives zeros
 * (softmax) or -inf (log-softmax) and passes no gradient.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "ops/op.h"

static void softmax_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_tensor *y = nd->out;
    size_t n = (size_t)x->shape[x->ndim - 1];
    /* dx = y ⊙ (dy - Σ dy⊙y) */
    qkv_softmax_backward_rows(x->grad, y->data, y->grad, x->numel / n, n);
}

static void log_softmax_backward(const qkv_node *nd)
{
    /* y = x - lse(x): dx = dy - softmax(x)·Σ dy, with softmax = exp(y) */
    qkv_tensor *x = nd->in[0];
    const qkv_tensor *y = nd->out;
    size_t n = (size_t)x->shape[x->ndim - 1], rows = x->numel / n;
    for (size_t r = 0; r < rows; r++) {
        const qkv_real *yr = y->data + r * n, *dy = y->grad + r * n;
        qkv_real *dx = x->grad + r * n;
        /* fully masked (nothing in x above -inf, NaN entries included, as
         * the forward judged it): no gradient */
        if (qkv_row_max(x->data + r * n, n) == -INFINITY)
            continue;
        double s = qkv_sum_real(dy, n);
        for (size_t j = 0; j < n; j++)
            dx[j] += (qkv_real)((double)dy[j] - exp((double)yr[j]) * s);
    }
}

static const qkv_op_def op_softmax = {"softmax", softmax_backward, 0};
static const qkv_op_def op_log_softmax = {"log_softmax", log_softmax_backward, 0};

static qkv_tensor *softmax_like(qkv_tape *t, qkv_tensor *x, int log_form)
{
    const char *name = log_form ? "log_softmax" : "softmax";
    if (!qkv_op_inputs_ok(t, name, x, NULL, 0))
        return qkv_nil();
    if (x->ndim < 1) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: [] has no last dimension", name);
        return qkv_nil();
    }
    qkv_tensor *out = qkv_op_out(t, name, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t n = (size_t)x->shape[x->ndim - 1], rows = x->numel / n;
    if (log_form)
        qkv_log_softmax_rows(out->data, x->data, rows, n);
    else
        qkv_softmax_rows(out->data, x->data, rows, n);
    return qkv_op_finish(t, log_form ? &op_log_softmax : &op_softmax, out, x, NULL, 0);
}

qkv_tensor *qkv_softmax(qkv_tape *t, qkv_tensor *x)
{
    return softmax_like(t, x, 0);
}

qkv_tensor *qkv_log_softmax(qkv_tape *t, qkv_tensor *x)
{
    return softmax_like(t, x, 1);
}
