/*
 * reduce.c - reductions, each forward with its backward: sum and mean of
 * everything, and along the last dimension. Sums accumulate in double.
 */
#include "kernels/kernels.h"
#include "ops/op.h"

/* ---- over every element ------------------------------------------------- */

static void sum_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real dy = nd->out->grad[0];
    for (size_t i = 0; i < x->numel; i++) /* dx_i = c·dy (c = 1, or 1/N for the mean) */
        x->grad[i] += (qkv_real)(nd->c * dy);
}

static const qkv_op_def op_sum = {"sum", sum_backward};

static qkv_tensor *reduce_all(qkv_tape *t, qkv_tensor *x, int mean)
{
    if (!qkv_op_inputs_ok(t, mean ? "mean" : "sum", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, 0, NULL, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double c = mean ? 1.0 / (double)x->numel : 1.0;
    out->data[0] = (qkv_real)(c * qkv_sum_real(x->data, x->numel));
    return qkv_op_finish(t, &op_sum, out, x, NULL, c);
}

qkv_tensor *qkv_sum(qkv_tape *t, qkv_tensor *x)
{
    return reduce_all(t, x, 0);
}

qkv_tensor *qkv_mean(qkv_tape *t, qkv_tensor *x)
{
    return reduce_all(t, x, 1);
}

/* ---- along the last dimension ------------------------------------------- */

static void sum_last_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    size_t n = (size_t)x->shape[x->ndim - 1];
    for (size_t i = 0; i < x->numel; i++) /* dx[r,j] = c·dy[r] */
        x->grad[i] += (qkv_real)(nd->c * dy[i / n]);
}

static const qkv_op_def op_sum_last = {"sum_last", sum_last_backward};

static qkv_tensor *reduce_last(qkv_tape *t, qkv_tensor *x, int mean)
{
    if (!qkv_op_inputs_ok(t, mean ? "mean_last" : "sum_last", x, NULL, 0))
        return qkv_nil();
    if (x->ndim < 1) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: [] has no last dimension",
                      mean ? "mean_last" : "sum_last");
        return qkv_nil();
    }
    int n = x->shape[x->ndim - 1];
    qkv_tensor *out = qkv_op_out(t, x->ndim - 1, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double c = mean ? 1.0 / n : 1.0;
    for (size_t r = 0; r < out->numel; r++)
        out->data[r] = (qkv_real)(c * qkv_sum_real(x->data + r * n, (size_t)n));
    return qkv_op_finish(t, &op_sum_last, out, x, NULL, c);
}

qkv_tensor *qkv_sum_last(qkv_tape *t, qkv_tensor *x)
{
    return reduce_last(t, x, 0);
}

qkv_tensor *qkv_mean_last(qkv_tape *t, qkv_tensor *x)
{
    return reduce_last(t, x, 1);
}
