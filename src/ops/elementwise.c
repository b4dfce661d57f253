/*
 * elementwise.c - element-wise ops, each forward with its backward: scale,
 * add and mul (broadcasting their second operand), the additive mask, tanh,
 * relu and exp.
 */
#include <math.h>

#include "ops/op.h"

/* ---- scale -------------------------------------------------------------- */

static void scale_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = c·dy */
        x->grad[i] += (qkv_real)(nd->c * dy[i]);
}

static const qkv_op_def op_scale = {"scale", scale_backward};

qkv_tensor *qkv_scale(qkv_tape *t, qkv_tensor *x, double c)
{
    if (!qkv_op_inputs_ok(t, "scale", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = (qkv_real)(c * x->data[i]);
    return qkv_op_finish(t, &op_scale, out, x, NULL, c);
}

/* ---- add, mul and mask: b broadcast over a ------------------------------ */

static void add_backward(const qkv_node *nd)
{
    qkv_bcast p;
    qkv_tensor *a = nd->in[0], *b = nd->in[1];
    const qkv_real *dy = nd->out->grad;
    qkv_bcast_plan(a, b, &p);
    /* da = dy; db = dy summed over the broadcast dimensions */
    if (a->grad != NULL)
        QKV_BCAST_LOOP(p, a->grad[ia] += dy[ia]);
    if (b->grad != NULL)
        QKV_BCAST_LOOP(p, b->grad[ib] += dy[ia]);
}

static void mul_backward(const qkv_node *nd)
{
    qkv_bcast p;
    qkv_tensor *a = nd->in[0], *b = nd->in[1];
    const qkv_real *dy = nd->out->grad;
    qkv_bcast_plan(a, b, &p);
    /* y = a⊙b: da = dy⊙b; db = Σ dy⊙a over the broadcast dimensions */
    if (a->grad != NULL)
        QKV_BCAST_LOOP(p, a->grad[ia] += dy[ia] * b->data[ib]);
    if (b->grad != NULL)
        QKV_BCAST_LOOP(p, b->grad[ib] += dy[ia] * a->data[ia]);
}

static void mask_backward(const qkv_node *nd)
{
    qkv_bcast p;
    qkv_tensor *x = nd->in[0];
    const qkv_tensor *m = nd->constant;
    const qkv_real *dy = nd->out->grad;
    qkv_bcast_plan(x, m, &p);
    /* dx = dy where kept; 0 where masked (y = -inf there) */
    QKV_BCAST_LOOP(p, x->grad[ia] += isinf(m->data[ib]) && m->data[ib] < 0 ? 0 : dy[ia]);
}

static const qkv_op_def op_add = {"add", add_backward};
static const qkv_op_def op_mul = {"mul", mul_backward};
static const qkv_op_def op_mask = {"mask", mask_backward};

/* Checks and plans y = a ∘ b with b broadcast over a, and makes y; it
 * tracks a gradient when a does, or b does and b_differentiable. Nil after
 * recording an error. */
static qkv_tensor *binary_out(qkv_tape *t, const char *name, const qkv_tensor *a,
                              const qkv_tensor *b, int b_differentiable, qkv_bcast *p)
{
    if (!qkv_op_inputs_ok(t, name, a, b, 1))
        return qkv_nil();
    if (!qkv_bcast_plan(a, b, p)) {
        QKV_SHAPES(a, b);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "%s: %s and %s: second shape does not broadcast to the first", name, sa, sb);
        return qkv_nil();
    }
    int with_grad = a->grad != NULL || (b_differentiable && b->grad != NULL);
    return qkv_tape_tensor(t, a->ndim, a->shape, with_grad);
}

qkv_tensor *qkv_add(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    qkv_bcast p;
    qkv_tensor *out = binary_out(t, "add", a, b, 1, &p);
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_real *y = out->data;
    const qkv_real *x = a->data, *z = b->data;
    QKV_BCAST_LOOP(p, y[ia] = x[ia] + z[ib]);
    return qkv_op_finish(t, &op_add, out, a, b, 0);
}

qkv_tensor *qkv_mul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    qkv_bcast p;
    qkv_tensor *out = binary_out(t, "mul", a, b, 1, &p);
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_real *y = out->data;
    const qkv_real *x = a->data, *z = b->data;
    QKV_BCAST_LOOP(p, y[ia] = x[ia] * z[ib]);
    return qkv_op_finish(t, &op_mul, out, a, b, 0);
}

qkv_tensor *qkv_mask(qkv_tape *t, qkv_tensor *x, const qkv_tensor *m)
{
    qkv_bcast p;
    qkv_tensor *out = binary_out(t, "mask", x, m, 0, &p); /* m takes no gradient */
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_real *y = out->data;
    const qkv_real *xs = x->data, *z = m->data;
    QKV_BCAST_LOOP(p, y[ia] = xs[ia] + z[ib]);
    int failed;
    qkv_node *n = qkv_op_record(t, &op_mask, out, x, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (n != NULL)
        n->constant = m;
    return out;
}

/* ---- nonlinearities ----------------------------------------------------- */

static void tanh_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·(1 - y²) */
        x->grad[i] += dy[i] * (1 - y[i] * y[i]);
}

static void relu_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·[x > 0] */
        x->grad[i] += x->data[i] > 0 ? dy[i] : 0;
}

static const qkv_op_def op_tanh = {"tanh", tanh_backward};
static const qkv_op_def op_relu = {"relu", relu_backward};

qkv_tensor *qkv_tanh(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_op_inputs_ok(t, "tanh", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = (qkv_real)tanh((double)x->data[i]);
    return qkv_op_finish(t, &op_tanh, out, x, NULL, 0);
}

qkv_tensor *qkv_relu(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_op_inputs_ok(t, "relu", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = x->data[i] > 0 ? x->data[i] : 0;
    return qkv_op_finish(t, &op_relu, out, x, NULL, 0);
}

/* ---- exp ---------------------------------------------------------------- */

static void exp_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·e^x = dy·y */
        x->grad[i] += dy[i] * y[i];
}

static const qkv_op_def op_exp = {"exp", exp_backward};

qkv_tensor *qkv_exp(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_op_inputs_ok(t, "exp", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = (qkv_real)exp((double)x->data[i]);
    return qkv_op_finish(t, &op_exp, out, x, NULL, 0);
}
