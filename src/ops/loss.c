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

static const qkv_op_def op_cross_entropy = {"cross_entropy", cross_entropy_backward, 0};

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
    if (targets == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "cross_entropy: no targets (targets is NULL)");
        return qkv_nil();
    }
    if (logits->ndim < 1) {
        char sx[64];
        qkv_shape_str(logits, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "cross_entropy: logits %s need a class dimension", sx);
        return qkv_nil();
    }
    size_t C = (size_t)logits->shape[logits->ndim - 1], rows = logits->numel / C;
    long counted = counted_targets(t, logits, targets, rows, C);
    if (counted < 0)
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, "cross_entropy", 0, NULL, logits, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    /* probabilities (kept for backward when recording) and the loss from
     * log-sum-exp in double: -log p[t] = log Σ e^(x - max) - (x[t] - max),
     * in that order (max + log Σ - x[t] loses log Σ below max's last bit) */
    const int recording = out->grad != NULL;
    qkv_real *p = qkv_op_alloc(t, "cross_entropy", logits->numel * sizeof(qkv_real));
    if (p == NULL)
        return qkv_nil();
    double loss = 0;
    for (size_t r = 0; r < rows; r++) {
        const qkv_real *x = logits->data + r * C;
        qkv_real *pr = p + r * C;
        double mx, sum = qkv_exp_shifted(pr, x, C, &mx);
        if (targets[r] != QKV_IGNORE)
            loss += log(sum) - ((double)x[targets[r]] - mx);
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
        if ((node->ints = qkv_tape_ints(t, "cross_entropy", targets, rows)) == NULL)
            return qkv_nil();
    }
    return out;
}

/* ---- mean squared error ------------------------------------------------- */

static void mse_backward(const qkv_node *nd)
{
    qkv_tensor *p = nd->in[0];
    const qkv_tensor *y = nd->constant;
    const double g = nd->out->grad[0] * nd->c; /* c = 2/N */
    for (size_t i = 0; i < p->numel; i++)      /* dp = dL·2(p - y)/N */
        p->grad[i] += (qkv_real)(g * ((double)p->data[i] - y->data[i]));
}

static const qkv_op_def op_mse = {"mse", mse_backward, 0};

/* Checks that a loss's prediction and target are real tensors of one shape. */
static int same_shape_ok(qkv_tape *t, const char *name, const qkv_tensor *a, const qkv_tensor *b)
{
    if (!qkv_op_inputs_ok(t, name, a, b, 1))
        return 0;
    if (!qkv_tensor_same_shape(a, b)) {
        QKV_SHAPES(a, b);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: prediction %s and target %s differ in shape", name, sa,
                      sb);
        return 0;
    }
    return 1;
}

/* Records a loss node whose target is a constant; out when done. */
static qkv_tensor *finish_loss(qkv_tape *t, const qkv_op_def *def, qkv_tensor *out,
                               qkv_tensor *pred, const qkv_tensor *target, double c)
{
    int failed;
    qkv_node *n = qkv_op_record(t, def, out, pred, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (n != NULL) {
        n->c = c;
        n->constant = target;
    }
    return out;
}

qkv_tensor *qkv_mse(qkv_tape *t, qkv_tensor *pred, const qkv_tensor *target)
{
    if (!same_shape_ok(t, "mse", pred, target))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, "mse", 0, NULL, pred, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double s[8] = {0};
    /* entry i into partial i mod 8; eight at a time, in lockstep, so it vectorises */
    const size_t n8 = pred->numel - pred->numel % 8;
    for (size_t i = 0; i < n8; i += 8)
        for (int k = 0; k < 8; k++) {
            double e = (double)pred->data[i + k] - target->data[i + k];
            s[k] += e * e;
        }
    for (size_t i = n8; i < pred->numel; i++) {
        double e = (double)pred->data[i] - target->data[i];
        s[i % 8] += e * e;
    }
    const double n = (double)pred->numel;
    out->data[0] =
        (qkv_real)((((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) / n);
    return finish_loss(t, &op_mse, out, pred, target, 2 / n);
}

/* ---- binary cross-entropy on logits ------------------------------------- */

static void bce_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_tensor *y = nd->constant;
    const double g = nd->out->grad[0] * nd->c; /* c = 1/N */
    for (size_t i = 0; i < x->numel; i++) {    /* dx = dL·(σ(x) - y)/N */
        double xi = x->data[i];
        double s = xi >= 0 ? 1 / (1 + exp(-xi)) : exp(xi) / (1 + exp(xi));
        x->grad[i] += (qkv_real)(g * (s - y->data[i]));
    }
}

static const qkv_op_def op_bce = {"bce_with_logits", bce_backward, 0};

qkv_tensor *qkv_bce_with_logits(qkv_tape *t, qkv_tensor *logits, const qkv_tensor *target)
{
    if (!same_shape_ok(t, "bce_with_logits", logits, target))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, "bce_with_logits", 0, NULL, logits, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    /* -[y·log σ(x) + (1-y)·log(1-σ(x))] = max(x, 0) - x·y + log(1 + e^-|x|): no
     * overflow and no log(0) for any finite x. An infinite x takes the
     * limit, (1 - y)·x or -y·x, 0 where that factor is 0 (not inf - inf
     * or inf·0, NaN) */
    double s[8] = {0};
    for (size_t i = 0; i < logits->numel; i++) {
        double x = logits->data[i], y = target->data[i];
        if (isinf(x)) {
            const double c = x > 0 ? 1 - y : -y;
            s[i % 8] += c == 0 ? 0 : c * x;
            continue;
        }
        s[i % 8] += (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
    }
    const double n = (double)logits->numel;
    out->data[0] =
        (qkv_real)((((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) / n);
    return finish_loss(t, &op_bce, out, logits, target, 1 / n);
}
