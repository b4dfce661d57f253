/*
 * loss.c - losses, each forward with its backward: cross-entropy fused
 * with log-softmax.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "ops/op.h"

static void cross_entropy_backward(const qkv_node *nd)
{
    /* dlogits[r,j] = dL · (p[r,j] - [j == target_r]) / N */
    qkv_tensor *x = nd->in[0];
    size_t C = (size_t)x->shape[x->ndim - 1], rows = x->numel / C;
    double g = nd->out->grad[0] * nd->c;
    for (size_t r = 0; r < rows; r++) {
        if (nd->ints[r] == QKV_IGNORE)
            continue;
        const qkv_real *p = nd->saved + r * C;
        qkv_real *dx = x->grad + r * C;
        for (size_t j = 0; j < C; j++)
            dx[j] += (qkv_real)(g * ((double)p[j] - ((int)j == nd->ints[r])));
    }
}

static const qkv_op_def op_cross_entropy = {"cross_entropy", cross_entropy_backward};

/* The number of rows whose target counts, or -1 after recording an error
 * for a target outside [0,C). */
static long counted_targets(qkv_tape *t, const qkv_tensor *logits, const int *targets, size_t rows,
                            size_t C)
{
    long counted = 0;
    for (size_t r = 0; r < rows; r++) {
        if (targets[r] == QKV_IGNORE)
            continue;
        if (targets[r] < 0 || (size_t)targets[r] >= C) {
            char sx[64];
            qkv_shape_str(logits, sx, sizeof sx);
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "cross_entropy: target %d of row %zu is outside [0,%zu) for logits %s",
                          targets[r], r, C, sx);
            return -1;
        }
        counted++;
    }
    return counted;
}

qkv_tensor *qkv_cross_entropy(qkv_tape *t, qkv_tensor *logits, const int *targets)
{
    if (!qkv_op_inputs_ok(t, "cross_entropy", logits, NULL, 0))
        return qkv_nil();
    if (logits->ndim < 1 || targets == NULL) {
        char sx[64];
        qkv_shape_str(logits, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "cross_entropy: logits %s need a class dimension and targets", sx);
        return qkv_nil();
    }
    size_t C = (size_t)logits->shape[logits->ndim - 1], rows = logits->numel / C;
    long counted = counted_targets(t, logits, targets, rows, C);
    if (counted < 0)
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, 0, NULL, logits, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    /* probabilities (kept for backward when recording) and the loss from
     * log-sum-exp in double: -log p[t] = log Σ e^(x - max) - (x[t] - max) */
    const int recording = out->grad != NULL;
    qkv_real *p = qkv_tape_alloc(t, logits->numel * sizeof(qkv_real));
    if (p == NULL)
        return qkv_nil();
    double loss = 0;
    for (size_t r = 0; r < rows; r++) {
        const qkv_real *x = logits->data + r * C;
        qkv_real *pr = p + r * C;
        double mx, sum = qkv_exp_shifted(pr, x, C, &mx);
        if (targets[r] != QKV_IGNORE)
            loss += mx + log(sum) - (double)x[targets[r]];
        if (recording) {
            qkv_real inv = (qkv_real)(1 / sum);
            for (size_t j = 0; j < C; j++)
                pr[j] *= inv;
        }
    }
    double c = counted ? 1.0 / (double)counted : 0.0;
    out->data[0] = (qkv_real)(loss * c);
    int failed;
    qkv_node *node = qkv_op_record(t, &op_cross_entropy, out, logits, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (node != NULL) {
        node->c = c;
        node->saved = p;
        if ((node->ints = qkv_tape_ints(t, targets, rows)) == NULL)
            return qkv_nil();
    }
    return out;
}
