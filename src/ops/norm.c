/*
 * norm.c - normalisation over the last dimension, forward and backward:
 * layer norm and RMS norm. The forward saves each row's mean and
 * reciprocal standard deviation; the backward is the fused closed form
 * (kernels/norm.c).
 */
#include <math.h>

#include "kernels/kernels.h"
#include "ops/op.h"

/* The node's record. */
typedef struct norm_rec {
    qkv_real *mean, *rstd; /* (rows) */
    int center;            /* 1: layer norm; 0: RMS norm */
    int has_gamma, has_beta;
} norm_rec;

static void norm_backward(const qkv_node *nd)
{
    const norm_rec *r = nd->state;
    qkv_tensor *x = nd->in[0];
    qkv_tensor *gamma = r->has_gamma ? nd->in[1] : NULL;
    qkv_tensor *beta = r->has_beta ? nd->in[1 + r->has_gamma] : NULL;
    const size_t d = (size_t)x->shape[x->ndim - 1], rows = x->numel / d;
    /* the node claims its inputs' gradients: γ's and β's are readied
     * first, so that an x whose gradient is one of theirs finds it taken
     * and adds into it; an x gradient that no node has filled is written
     * by the kernel, not cleared and then read back */
    if (gamma != NULL)
        qkv_tensor_grad_ready(gamma);
    if (beta != NULL)
        qkv_tensor_grad_ready(beta);
    const int store = qkv_tensor_grad_claim(x);
    if (x->grad == NULL && (gamma == NULL || gamma->grad == NULL) &&
        (beta == NULL || beta->grad == NULL))
        return;
    /* dx = r·(g - mean(g) - x̂·mean(g·x̂)) with g = dy·γ; dγ = Σ dy·x̂; dβ = Σ dy */
    qkv_norm_rows_backward(x->grad, gamma != NULL ? gamma->grad : NULL,
                           beta != NULL ? beta->grad : NULL, nd->out->grad, x->data, r->mean,
                           r->rstd, gamma != NULL ? gamma->data : NULL, rows, d, r->center, store);
}

static const qkv_op_def op_layer_norm = {"layer_norm", norm_backward, QKV_OP_CLAIMS_GRADS};
static const qkv_op_def op_rms_norm = {"rms_norm", norm_backward, QKV_OP_CLAIMS_GRADS};

static qkv_tensor *norm(qkv_tape *t, const char *name, qkv_tensor *x, qkv_tensor *gamma,
                        qkv_tensor *beta, double eps, int center)
{
    if (!qkv_op_inputs_ok(t, name, x, NULL, 0) || !qkv_op_fresh(t, name, gamma) ||
        !qkv_op_fresh(t, name, beta))
        return qkv_nil();
    if (x->ndim < 1) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: [] has no dimension to normalise", name);
        return qkv_nil();
    }
    const int d = x->shape[x->ndim - 1];
    const qkv_tensor *ps[2] = {gamma, beta};
    for (int i = 0; i < 2; i++)
        if (ps[i] != NULL &&
            (qkv_tensor_is_nil(ps[i]) || ps[i]->ndim != 1 || ps[i]->shape[0] != d)) {
            char sx[64], sp[64]; /* formatted only here: the op runs every step */
            qkv_shape_str(x, sx, sizeof sx);
            qkv_shape_str(ps[i], sp, sizeof sp);
            qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: x %s needs %s of shape [%d], not %s", name, sx,
                          i == 0 ? "gamma" : "beta", d, sp);
            return qkv_nil();
        }
    if (!(eps >= 0) || !isfinite(eps)) {
        char num[32];
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: eps %s must be finite and >= 0", name,
                      qkv_num_str(num, sizeof num, eps));
        return qkv_nil();
    }
    int grad = x->grad != NULL || (gamma != NULL && gamma->grad != NULL) ||
               (beta != NULL && beta->grad != NULL);
    qkv_tensor *out = qkv_op_tensor(t, name, x->ndim, x->shape, grad);
    const size_t rows = x->numel / (size_t)d;
    norm_rec *r = qkv_op_alloc(t, name, sizeof *r);
    qkv_real *stats = qkv_op_alloc(t, name, 2 * rows * sizeof(qkv_real));
    if (qkv_tensor_is_nil(out) || r == NULL || stats == NULL)
        return qkv_nil();
    r->mean = stats;
    r->rstd = stats + rows;
    r->center = center;
    r->has_gamma = gamma != NULL;
    r->has_beta = beta != NULL;
    qkv_norm_rows(out->data, r->mean, r->rstd, x->data, gamma != NULL ? gamma->data : NULL,
                  beta != NULL ? beta->data : NULL, rows, (size_t)d, eps, center);
    if (out->grad == NULL)
        return out;
    qkv_tensor *in[3] = {x, NULL, NULL};
    int n = 1;
    if (gamma != NULL)
        in[n++] = gamma;
    if (beta != NULL)
        in[n++] = beta;
    qkv_node *node = qkv_tape_record(t, center ? &op_layer_norm : &op_rms_norm, out, n, in);
    if (node == NULL)
        return qkv_nil();
    node->state = r;
    return out;
}

qkv_tensor *qkv_layer_norm(qkv_tape *t, qkv_tensor *x, qkv_tensor *gamma, qkv_tensor *beta,
                           double eps)
{
    return norm(t, "layer_norm", x, gamma, beta, eps, 1);
}

qkv_tensor *qkv_rms_norm(qkv_tape *t, qkv_tensor *x, qkv_tensor *gamma, double eps)
{
    return norm(t, "rms_norm", x, gamma, NULL, eps, 0);
}
