/*
 * loss.c - losses, each forward with its backward: cross-entropy fused
 * with log-softmax (optionally label-smoothed), mean squared error, binary
 * cross-entropy on logits, and the L1 and Huber losses.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "ops/op.h"

/* The smoothing of a cross_entropy node: 0 (no state) or *state. */
static double node_eps(const qkv_node *nd)
{
    return nd->state != NULL ? *(const double *)nd->state : 0.0;
}

static void cross_entropy_backward(const qkv_node *nd)
{
    /* dlogits[r,j] = dL · (p[r,j] - q[r,j]) / N, with the smoothed target
     * q = (1-eps)·[j == target_r] + eps/C: 1 - eps·(C-1)/C at the target,
     * so exactly 1 for one class (where p is 1), and eps/C elsewhere; at
     * eps = 0, 1 and 0, as (p - onehot)/N */
    qkv_tensor *x = nd->in[0];
    size_t C = (size_t)x->shape[x->ndim - 1], rows = x->numel / C;
    double g = nd->out->grad[0] * nd->c, eps = node_eps(nd);
    double spread = eps / (double)C, hit = 1 - eps * (double)(C - 1) / (double)C;
    for (size_t r = 0; r < rows; r++) {
        if (nd->ints[r] == QKV_IGNORE)
            continue;
        const qkv_real *p = nd->saved + r * C;
        qkv_real *dx = x->grad + r * C;
        for (size_t j = 0; j < C; j++)
            dx[j] += (qkv_real)(g * ((double)p[j] - ((int)j == nd->ints[r] ? hit : spread)));
    }
}

static const qkv_op_def op_cross_entropy = {"cross_entropy", cross_entropy_backward, 0};
static const qkv_op_def op_cross_entropy_smooth = {"cross_entropy_smooth", cross_entropy_backward,
                                                   0};

/* The number of rows whose target counts, or -1 after recording an error
 * for a target outside [0,C). */
static long counted_targets(qkv_tape *t, const char *name, const qkv_tensor *logits,
                            const int *targets, size_t rows, size_t C)
{
    long counted = 0;
    for (size_t r = 0; r < rows; r++) {
        if (targets[r] == QKV_IGNORE)
            continue;
        if (targets[r] < 0 || (size_t)targets[r] >= C) {
            char sx[64];
            qkv_shape_str(logits, sx, sizeof sx);
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "%s: target %d of row %zu is outside [0,%zu) for logits %s", name,
                          targets[r], r, C, sx);
            return -1;
        }
        counted++;
    }
    return counted;
}

/* One row's loss from its logits x[C], max mx and log Σ e^(x - mx) lse:
 * -log p[t] = lse - (x[t] - mx), in that order (mx + lse - x[t] loses lse
 * below mx's last bit); with smoothing, (1-eps)·that + eps·mean_c(-log p_c),
 * mean_c(-log p_c) = lse - mean_c(x_c - mx). */
static double row_loss(const qkv_real *x, size_t C, int t, double mx, double lse, double eps)
{
    double nll = lse - ((double)x[t] - mx);
    if (eps == 0)
        return nll;
    double s = 0;
    for (size_t j = 0; j < C; j++)
        s += (double)x[j] - mx;
    return (1 - eps) * nll + eps * (lse - s / (double)C);
}

/* Shared by both entry points: def names the op (and its errors); eps is
 * checked by the caller. */
static qkv_tensor *cross_entropy(qkv_tape *t, const qkv_op_def *def, qkv_tensor *logits,
                                 const int *targets, double eps)
{
    const char *name = def->name;
    if (!qkv_op_inputs_ok(t, name, logits, NULL, 0))
        return qkv_nil();
    if (targets == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: no targets (targets is NULL)", name);
        return qkv_nil();
    }
    if (logits->ndim < 1) {
        char sx[64];
        qkv_shape_str(logits, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: logits %s need a class dimension", name, sx);
        return qkv_nil();
    }
    size_t C = (size_t)logits->shape[logits->ndim - 1], rows = logits->numel / C;
    long counted = counted_targets(t, name, logits, targets, rows, C);
    if (counted < 0)
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, name, 0, NULL, logits, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    /* probabilities (kept for backward when recording) and the loss from
     * log-sum-exp in double (row_loss) */
    const int recording = out->grad != NULL;
    qkv_real *p = qkv_op_alloc(t, name, logits->numel * sizeof(qkv_real));
    if (p == NULL)
        return qkv_nil();
    double loss = 0;
    for (size_t r = 0; r < rows; r++) {
        const qkv_real *x = logits->data + r * C;
        qkv_real *pr = p + r * C;
        double mx, sum = qkv_exp_shifted(pr, x, C, &mx);
        if (targets[r] != QKV_IGNORE)
            loss += row_loss(x, C, targets[r], mx, log(sum), eps);
        if (recording) {
            qkv_real inv = (qkv_real)(1 / sum);
            for (size_t j = 0; j < C; j++)
                pr[j] *= inv;
        }
    }
    double c = counted ? 1.0 / (double)counted : 0.0;
    out->data[0] = (qkv_real)(loss * c);
    int failed;
    qkv_node *node = qkv_op_record(t, def, out, logits, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (node != NULL) {
        node->c = c;
        node->saved = p;
        if (eps != 0) {
            double *e = qkv_op_alloc(t, name, sizeof *e);
            if (e == NULL)
                return qkv_nil();
            *e = eps;
            node->state = e;
        }
        if ((node->ints = qkv_tape_ints(t, name, targets, rows)) == NULL)
            return qkv_nil();
    }
    return out;
}

qkv_tensor *qkv_cross_entropy(qkv_tape *t, qkv_tensor *logits, const int *targets)
{
    return cross_entropy(t, &op_cross_entropy, logits, targets, 0.0);
}

qkv_tensor *qkv_cross_entropy_smooth(qkv_tape *t, qkv_tensor *logits, const int *targets,
                                     double eps)
{
    if (!(eps >= 0 && eps <= 1)) {
        char num[32];
        qkv_tape_fail(t, QKV_ERR_ARG, "cross_entropy_smooth: eps = %s must be in [0, 1]",
                      qkv_num_str(num, sizeof num, eps));
        return qkv_nil();
    }
    return cross_entropy(t, &op_cross_entropy_smooth, logits, targets, eps);
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

/* Records a loss node whose target is a constant, with c and, when
 * state is not NULL, a copy of *state on the tape as the node's state;
 * out when done. */
static qkv_tensor *finish_loss(qkv_tape *t, const qkv_op_def *def, qkv_tensor *out,
                               qkv_tensor *pred, const qkv_tensor *target, double c,
                               const double *state)
{
    int failed;
    qkv_node *n = qkv_op_record(t, def, out, pred, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (n != NULL) {
        if (state != NULL) {
            double *kept = qkv_op_alloc(t, def->name, sizeof *kept);
            if (kept == NULL)
                return qkv_nil();
            *kept = *state;
            n->state = kept;
        }
        n->c = c;
        n->constant = target;
    }
    return out;
}

/* The eight partial sums of a loss, added pairwise. */
static double sum8(const double *s)
{
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
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
    out->data[0] = (qkv_real)(sum8(s) / n);
    return finish_loss(t, &op_mse, out, pred, target, 2 / n, NULL);
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
    out->data[0] = (qkv_real)(sum8(s) / n);
    return finish_loss(t, &op_bce, out, logits, target, 1 / n, NULL);
}

/* ---- L1 and Huber losses ------------------------------------------------ */

static void l1_backward(const qkv_node *nd)
{
    qkv_tensor *p = nd->in[0];
    const qkv_tensor *y = nd->constant;
    const double g = nd->out->grad[0] * nd->c; /* c = 1/N */
    /* dp = dL·sign(p - y)/N, with sign 0 at 0 and at NaN (PyTorch's) */
    for (size_t i = 0; i < p->numel; i++) {
        const double d = (double)p->data[i] - y->data[i];
        p->grad[i] += d > 0 ? (qkv_real)g : d < 0 ? (qkv_real)-g : 0;
    }
}

static const qkv_op_def op_l1 = {"l1_loss", l1_backward, 0};

qkv_tensor *qkv_l1_loss(qkv_tape *t, qkv_tensor *pred, const qkv_tensor *target)
{
    if (!same_shape_ok(t, "l1_loss", pred, target))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, "l1_loss", 0, NULL, pred, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double s[8] = {0};
    for (size_t i = 0; i < pred->numel; i++)
        s[i % 8] += fabs((double)pred->data[i] - target->data[i]);
    const double n = (double)pred->numel;
    out->data[0] = (qkv_real)(sum8(s) / n);
    return finish_loss(t, &op_l1, out, pred, target, 1 / n, NULL);
}

/* A Huber node's delta, kept on the tape (c holds 1/N). */
static double node_delta(const qkv_node *nd)
{
    return *(const double *)nd->state;
}

static void huber_backward(const qkv_node *nd)
{
    qkv_tensor *p = nd->in[0];
    const qkv_tensor *y = nd->constant;
    const double g = nd->out->grad[0] * nd->c, delta = node_delta(nd);
    /* dp = dL·clamp(d, -delta, delta)/N, d = p - y; NaN stays NaN */
    for (size_t i = 0; i < p->numel; i++) {
        const double d = (double)p->data[i] - y->data[i];
        p->grad[i] += (qkv_real)(g * (d > delta ? delta : d < -delta ? -delta : d));
    }
}

static const qkv_op_def op_huber = {"huber_loss", huber_backward, 0};

qkv_tensor *qkv_huber_loss(qkv_tape *t, qkv_tensor *pred, const qkv_tensor *target, double delta)
{
    if (!(delta > 0 && isfinite(delta))) {
        char num[32];
        if (t != NULL && qkv_tape_status(t) == QKV_OK)
            qkv_tape_fail(t, QKV_ERR_ARG, "huber_loss: delta %s must be positive and finite",
                          qkv_num_str(num, sizeof num, delta));
        return qkv_nil();
    }
    if (!same_shape_ok(t, "huber_loss", pred, target))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, "huber_loss", 0, NULL, pred, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    /* d²/2 inside (-delta, delta), delta·(|d| - delta/2) outside, as
     * PyTorch splits it (|d| < delta); NaN goes to the second, NaN too */
    double s[8] = {0};
    for (size_t i = 0; i < pred->numel; i++) {
        const double d = fabs((double)pred->data[i] - target->data[i]);
        s[i % 8] += d < delta ? 0.5 * d * d : delta * (d - 0.5 * delta);
    }
    const double n = (double)pred->numel;
    out->data[0] = (qkv_real)(sum8(s) / n);
    return finish_loss(t, &op_huber, out, pred, target, 1 / n, &delta);
}
