/*
 * ops.c - forward passes, shape checks and backward passes of every op.
 *
 * Each op: check the tape and the shapes, make the output on the tape,
 * compute it, and, if the output tracks a gradient, record a node. The
 * backward passes are one switch at the bottom (qkv_node_backward); each
 * case states its math.
 */
#include <math.h>
#include <string.h>

#include "qkv/kernels.h"
#include "qkv/ops.h"
#include "internal.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

/* The helpers declared in internal.h are shared with attention.c. */

int qkv_inputs_ok(qkv_tape *t, const char *op, const qkv_tensor *a, const qkv_tensor *b,
                  int want_b)
{
    if (t == NULL || qkv_tape_status(t) != QKV_OK)
        return 0;
    if (qkv_tensor_is_nil(a) || (want_b && qkv_tensor_is_nil(b))) {
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "%s: input is nil (NULL, or the result of a failed call)", op);
        return 0;
    }
    return 1;
}

int qkv_wants_grad(const qkv_tensor *a, const qkv_tensor *b)
{
    return a->grad != NULL || (b != NULL && b->grad != NULL);
}

/* Makes the output tensor; a gradient is tracked if an input tracks one. */
static qkv_tensor *make_out(qkv_tape *t, int ndim, const int *shape, const qkv_tensor *a,
                            const qkv_tensor *b)
{
    return qkv_tape_tensor(t, ndim, shape, qkv_wants_grad(a, b));
}

qkv_node *qkv_record(qkv_tape *t, qkv_op op, qkv_tensor *out, qkv_tensor *a, qkv_tensor *b,
                     int *failed)
{
    *failed = 0;
    if (out->grad == NULL)
        return NULL;
    qkv_node *n = qkv_tape_push(t, op, out, a, b);
    *failed = n == NULL;
    return n;
}

/* Finishes an op without extra backward state. */
static qkv_tensor *finish(qkv_tape *t, qkv_op op, qkv_tensor *out, qkv_tensor *a,
                          qkv_tensor *b, double c)
{
    int failed;
    qkv_node *n = qkv_record(t, op, out, a, b, &failed);
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

int *qkv_tape_ints(qkv_tape *t, const int *src, size_t n)
{
    size_t bytes;
    if (!qkv_mul_size(n, sizeof(int), &bytes)) {
        qkv_tape_fail(t, QKV_ERR_NOMEM, "tape: index array too large");
        return NULL;
    }
    int *dst = qkv_tape_alloc(t, bytes);
    if (dst != NULL)
        memcpy(dst, src, bytes);
    return dst;
}

#define SHAPES(a, b)                                                              \
    char sa[64], sb[64];                                                          \
    qkv_shape_str((a), sa, sizeof sa);                                            \
    qkv_shape_str((b), sb, sizeof sb)

/* ------------------------------------------------------------------------ */
/* broadcasting (for add, mul, mask)                                        */

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

/* Visits every element of a in order; BODY sees ia (index into a) and ib
 * (the broadcast index into b). */
#define BCAST_LOOP(p, BODY)                                                        \
    do {                                                                           \
        size_t ia = 0;                                                             \
        for (int i0 = 0; i0 < (p).dim[0]; i0++)                                    \
            for (int i1 = 0; i1 < (p).dim[1]; i1++)                                \
                for (int i2 = 0; i2 < (p).dim[2]; i2++)                            \
                    for (int i3 = 0; i3 < (p).dim[3]; i3++, ia++) {                \
                        size_t ib = i0 * (p).bstride[0] + i1 * (p).bstride[1] +    \
                                    i2 * (p).bstride[2] + i3 * (p).bstride[3];     \
                        (void)ib;                                                  \
                        BODY;                                                      \
                    }                                                              \
    } while (0)

static qkv_tensor *binary(qkv_tape *t, qkv_op op, const char *name, qkv_tensor *a,
                          qkv_tensor *b)
{
    qkv_bcast p;
    if (!qkv_inputs_ok(t, name, a, b, 1))
        return qkv_nil();
    if (!qkv_bcast_plan(a, b, &p)) {
        SHAPES(a, b);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: %s and %s: second shape does not broadcast to the first",
                      name, sa, sb);
        return qkv_nil();
    }
    /* the mask never receives a gradient */
    qkv_tensor *out = qkv_tape_tensor(t, a->ndim, a->shape,
                                      op == QKV_OP_MASK ? a->grad != NULL : qkv_wants_grad(a, b));
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_real *y = out->data;
    const qkv_real *x = a->data, *z = b->data;
    if (op == QKV_OP_MUL)
        BCAST_LOOP(p, y[ia] = x[ia] * z[ib]);
    else
        BCAST_LOOP(p, y[ia] = x[ia] + z[ib]);
    return finish(t, op, out, a, b, 0);
}

qkv_tensor *qkv_add(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return binary(t, QKV_OP_ADD, "add", a, b);
}

qkv_tensor *qkv_mul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return binary(t, QKV_OP_MUL, "mul", a, b);
}

qkv_tensor *qkv_mask(qkv_tape *t, qkv_tensor *x, const qkv_tensor *m)
{
    /* m is only read: binary() gives it no gradient for QKV_OP_MASK */
    return binary(t, QKV_OP_MASK, "mask", x, (qkv_tensor *)m);
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */

static qkv_tensor *matmul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b, int nt)
{
    const char *name = nt ? "matmul_nt" : "matmul";
    if (!qkv_inputs_ok(t, name, a, b, 1))
        return qkv_nil();
    const char *why = NULL;
    int m = 0, k = 0, n = 0;
    if (a->ndim < 2 || b->ndim < 2) {
        why = "both inputs need at least 2 dimensions";
    } else {
        m = a->shape[a->ndim - 2];
        k = a->shape[a->ndim - 1];
        n = b->shape[b->ndim - (nt ? 2 : 1)];
        int same = b->ndim == 2 || b->ndim == a->ndim;
        for (int i = 0; same && b->ndim > 2 && i < a->ndim - 2; i++)
            same = a->shape[i] == b->shape[i];
        if (k != b->shape[b->ndim - (nt ? 1 : 2)])
            why = "inner dimensions differ";
        else if (!same)
            why = "batch dimensions differ";
    }
    if (why != NULL) {
        SHAPES(a, b);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: %s x %s: %s", name, sa, sb, why);
        return qkv_nil();
    }
    int shape[QKV_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = n;
    qkv_tensor *out = make_out(t, a->ndim, shape, a, b);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t batch = a->numel / ((size_t)m * k);
    size_t bstep = b->ndim > 2 ? (size_t)k * n : 0;
    for (size_t i = 0; i < batch; i++)
        qkv_gemm(0, nt, m, n, k, a->data + i * m * k, b->data + i * bstep,
                 out->data + i * m * n, 0);
    return finish(t, nt ? QKV_OP_MATMUL_NT : QKV_OP_MATMUL, out, a, b, 0);
}

qkv_tensor *qkv_matmul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return matmul(t, a, b, 0);
}

qkv_tensor *qkv_matmul_nt(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return matmul(t, a, b, 1);
}

/* ------------------------------------------------------------------------ */
/* shape and reduction ops                                                  */

qkv_tensor *qkv_transpose(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_inputs_ok(t, "transpose", x, NULL, 0))
        return qkv_nil();
    if (x->ndim < 2) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "transpose: %s: needs at least 2 dimensions", sx);
        return qkv_nil();
    }
    int shape[QKV_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    int m = x->shape[x->ndim - 2], n = x->shape[x->ndim - 1];
    shape[x->ndim - 2] = n;
    shape[x->ndim - 1] = m;
    qkv_tensor *out = make_out(t, x->ndim, shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t batch = x->numel / ((size_t)m * n);
    for (size_t b = 0; b < batch; b++) {
        const qkv_real *src = x->data + b * m * n;
        qkv_real *dst = out->data + b * m * n;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                dst[(size_t)j * m + i] = src[(size_t)i * n + j];
    }
    return finish(t, QKV_OP_TRANSPOSE, out, x, NULL, 0);
}

qkv_tensor *qkv_scale(qkv_tape *t, qkv_tensor *x, double c)
{
    if (!qkv_inputs_ok(t, "scale", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = make_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = (qkv_real)(c * x->data[i]);
    return finish(t, QKV_OP_SCALE, out, x, NULL, c);
}

static qkv_tensor *reduce_all(qkv_tape *t, qkv_tensor *x, int mean)
{
    if (!qkv_inputs_ok(t, mean ? "mean" : "sum", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = make_out(t, 0, NULL, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double c = mean ? 1.0 / (double)x->numel : 1.0;
    out->data[0] = (qkv_real)(c * qkv_sum_real(x->data, x->numel));
    return finish(t, QKV_OP_SUM, out, x, NULL, c);
}

qkv_tensor *qkv_sum(qkv_tape *t, qkv_tensor *x)
{
    return reduce_all(t, x, 0);
}

qkv_tensor *qkv_mean(qkv_tape *t, qkv_tensor *x)
{
    return reduce_all(t, x, 1);
}

static qkv_tensor *reduce_last(qkv_tape *t, qkv_tensor *x, int mean)
{
    if (!qkv_inputs_ok(t, mean ? "mean_last" : "sum_last", x, NULL, 0))
        return qkv_nil();
    if (x->ndim < 1) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: [] has no last dimension",
                      mean ? "mean_last" : "sum_last");
        return qkv_nil();
    }
    int n = x->shape[x->ndim - 1];
    qkv_tensor *out = make_out(t, x->ndim - 1, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double c = mean ? 1.0 / n : 1.0;
    for (size_t r = 0; r < out->numel; r++)
        out->data[r] = (qkv_real)(c * qkv_sum_real(x->data + r * n, (size_t)n));
    return finish(t, QKV_OP_SUM_LAST, out, x, NULL, c);
}

qkv_tensor *qkv_sum_last(qkv_tape *t, qkv_tensor *x)
{
    return reduce_last(t, x, 0);
}

qkv_tensor *qkv_mean_last(qkv_tape *t, qkv_tensor *x)
{
    return reduce_last(t, x, 1);
}

/* ------------------------------------------------------------------------ */
/* indexing                                                                 */

qkv_tensor *qkv_gather(qkv_tape *t, qkv_tensor *w, const int *ids, int ndim,
                       const int *shape)
{
    size_t n;
    if (!qkv_inputs_ok(t, "gather", w, NULL, 0))
        return qkv_nil();
    char sw[64];
    if (w->ndim != 2 || ndim < 1 || ndim > QKV_MAX_DIMS - 1 || ids == NULL ||
        qkv_shape_numel(ndim, shape, &n) != QKV_OK) {
        qkv_shape_str(w, sw, sizeof sw);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "gather: table %s must be [V,D] and the ids 1 to 3 dimensions", sw);
        return qkv_nil();
    }
    int V = w->shape[0], D = w->shape[1];
    size_t bad = qkv_first_bad_id(ids, n, V);
    if (bad < n) {
        qkv_shape_str(w, sw, sizeof sw);
        qkv_tape_fail(t, QKV_ERR_ARG, "gather: id %d at position %zu is outside [0,%d) of table %s",
                      ids[bad], bad, V, sw);
        return qkv_nil();
    }
    int oshape[QKV_MAX_DIMS];
    memcpy(oshape, shape, (size_t)ndim * sizeof *shape);
    oshape[ndim] = D;
    qkv_tensor *out = make_out(t, ndim + 1, oshape, w, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_gather_rows(out->data, w->data, ids, n, (size_t)D);
    int failed;
    qkv_node *node = qkv_record(t, QKV_OP_GATHER, out, w, NULL, &failed);
    if (node != NULL && (node->ints = qkv_tape_ints(t, ids, n)) == NULL)
        failed = 1;
    return failed ? qkv_nil() : out;
}

qkv_tensor *qkv_pick_rows(qkv_tape *t, qkv_tensor *x, const int *idx)
{
    if (!qkv_inputs_ok(t, "pick_rows", x, NULL, 0))
        return qkv_nil();
    char sx[64];
    if (x->ndim != 3 || idx == NULL) {
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
    qkv_tensor *out = make_out(t, 2, shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (int b = 0; b < B; b++)
        memcpy(out->data + (size_t)b * D, x->data + ((size_t)b * T + idx[b]) * D,
               (size_t)D * sizeof(qkv_real));
    int failed;
    qkv_node *node = qkv_record(t, QKV_OP_PICK, out, x, NULL, &failed);
    if (node != NULL && (node->ints = qkv_tape_ints(t, idx, (size_t)B)) == NULL)
        failed = 1;
    return failed ? qkv_nil() : out;
}

/* ------------------------------------------------------------------------ */
/* softmax family                                                           */

static qkv_tensor *softmax_like(qkv_tape *t, qkv_tensor *x, int log_form)
{
    const char *name = log_form ? "log_softmax" : "softmax";
    if (!qkv_inputs_ok(t, name, x, NULL, 0))
        return qkv_nil();
    if (x->ndim < 1) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: [] has no last dimension", name);
        return qkv_nil();
    }
    qkv_tensor *out = make_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t n = (size_t)x->shape[x->ndim - 1], rows = x->numel / n;
    if (log_form)
        qkv_log_softmax_rows(out->data, x->data, rows, n);
    else
        qkv_softmax_rows(out->data, x->data, rows, n);
    return finish(t, log_form ? QKV_OP_LOG_SOFTMAX : QKV_OP_SOFTMAX, out, x, NULL, 0);
}

qkv_tensor *qkv_softmax(qkv_tape *t, qkv_tensor *x)
{
    return softmax_like(t, x, 0);
}

qkv_tensor *qkv_log_softmax(qkv_tape *t, qkv_tensor *x)
{
    return softmax_like(t, x, 1);
}

qkv_tensor *qkv_cross_entropy(qkv_tape *t, qkv_tensor *logits, const int *targets)
{
    if (!qkv_inputs_ok(t, "cross_entropy", logits, NULL, 0))
        return qkv_nil();
    char sx[64];
    if (logits->ndim < 1 || targets == NULL) {
        qkv_shape_str(logits, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "cross_entropy: logits %s need a class dimension and targets", sx);
        return qkv_nil();
    }
    size_t C = (size_t)logits->shape[logits->ndim - 1], rows = logits->numel / C, counted = 0;
    for (size_t r = 0; r < rows; r++) {
        if (targets[r] == QKV_IGNORE)
            continue;
        if (targets[r] < 0 || (size_t)targets[r] >= C) {
            qkv_shape_str(logits, sx, sizeof sx);
            qkv_tape_fail(t, QKV_ERR_ARG, "cross_entropy: target %d of row %zu is outside [0,%zu) for logits %s",
                          targets[r], r, C, sx);
            return qkv_nil();
        }
        counted++;
    }
    qkv_tensor *out = make_out(t, 0, NULL, logits, NULL);
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
    qkv_node *node = qkv_record(t, QKV_OP_CROSS_ENTROPY, out, logits, NULL, &failed);
    if (node != NULL) {
        node->c = c;
        node->saved = p;
        if ((node->ints = qkv_tape_ints(t, targets, rows)) == NULL)
            return qkv_nil();
    }
    return failed ? qkv_nil() : out;
}

/* ------------------------------------------------------------------------ */
/* element-wise nonlinearities                                              */

qkv_tensor *qkv_tanh(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_inputs_ok(t, "tanh", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = make_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = (qkv_real)tanh((double)x->data[i]);
    return finish(t, QKV_OP_TANH, out, x, NULL, 0);
}

qkv_tensor *qkv_relu(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_inputs_ok(t, "relu", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = make_out(t, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    for (size_t i = 0; i < x->numel; i++)
        out->data[i] = x->data[i] > 0 ? x->data[i] : 0;
    return finish(t, QKV_OP_RELU, out, x, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* backward passes                                                          */

static void matmul_backward(const qkv_node *nd, int nt)
{
    const qkv_tensor *a = nd->a, *b = nd->b, *c = nd->out;
    int m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int n = c->shape[c->ndim - 1];
    size_t batch = a->numel / ((size_t)m * k), bstep = b->ndim > 2 ? (size_t)k * n : 0;
    for (size_t i = 0; i < batch; i++) {
        const qkv_real *A = a->data + i * m * k, *B = b->data + i * bstep;
        const qkv_real *dC = c->grad + i * m * n;
        if (a->grad != NULL) /* dA = dC·Bᵀ (NN), dA = dC·B (NT) */
            qkv_gemm(0, !nt, m, k, n, dC, B, a->grad + i * m * k, 1);
        if (b->grad == NULL)
            continue;
        if (nt) /* C = A·Bᵀ: dB = dCᵀ·A */
            qkv_gemm(1, 0, n, k, m, dC, A, b->grad + i * bstep, 1);
        else /* C = A·B: dB = Aᵀ·dC */
            qkv_gemm(1, 0, k, n, m, A, dC, b->grad + i * bstep, 1);
    }
}

static void binary_backward(const qkv_node *nd)
{
    qkv_bcast p;
    qkv_tensor *a = nd->a, *b = nd->b;
    const qkv_real *dy = nd->out->grad;
    qkv_bcast_plan(a, b, &p);
    if (nd->op == QKV_OP_MASK) { /* dx = dy where kept; 0 where masked (y = -inf there) */
        if (a->grad != NULL)
            BCAST_LOOP(p, a->grad[ia] += isinf(b->data[ib]) && b->data[ib] < 0 ? 0 : dy[ia]);
    } else if (nd->op == QKV_OP_ADD) { /* da = dy; db = dy summed over broadcast dims */
        if (a->grad != NULL)
            BCAST_LOOP(p, a->grad[ia] += dy[ia]);
        if (b->grad != NULL)
            BCAST_LOOP(p, b->grad[ib] += dy[ia]);
    } else { /* y = a⊙b: da = dy⊙b; db = Σ dy⊙a */
        if (a->grad != NULL)
            BCAST_LOOP(p, a->grad[ia] += dy[ia] * b->data[ib]);
        if (b->grad != NULL)
            BCAST_LOOP(p, b->grad[ib] += dy[ia] * a->data[ia]);
    }
}

static void transpose_backward(const qkv_node *nd)
{
    const qkv_tensor *x = nd->a;
    int m = x->shape[x->ndim - 2], n = x->shape[x->ndim - 1];
    size_t batch = x->numel / ((size_t)m * n);
    for (size_t b = 0; b < batch; b++) { /* dx[i,j] = dy[j,i] */
        const qkv_real *dy = nd->out->grad + b * m * n;
        qkv_real *dx = x->grad + b * m * n;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                dx[(size_t)i * n + j] += dy[(size_t)j * m + i];
    }
}

static void cross_entropy_backward(const qkv_node *nd)
{
    /* dlogits[r,j] = dL · (p[r,j] - [j == target_r]) / N */
    const qkv_tensor *x = nd->a;
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

static void log_softmax_backward(const qkv_node *nd)
{
    /* y = x - lse(x): dx = dy - softmax(x)·Σ dy, with softmax = exp(y) */
    const qkv_tensor *x = nd->a, *y = nd->out;
    size_t n = (size_t)x->shape[x->ndim - 1], rows = x->numel / n;
    for (size_t r = 0; r < rows; r++) {
        const qkv_real *yr = y->data + r * n, *dy = y->grad + r * n;
        qkv_real *dx = x->grad + r * n;
        size_t live = 0;
        while (live < n && yr[live] == -INFINITY)
            live++;
        if (live == n)
            continue; /* fully masked row: no gradient */
        double s = qkv_sum_real(dy, n);
        for (size_t j = 0; j < n; j++)
            dx[j] += (qkv_real)((double)dy[j] - exp((double)yr[j]) * s);
    }
}

void qkv_node_backward(const qkv_node *nd)
{
    qkv_tensor *a = nd->a, *y = nd->out;
    const qkv_real *dy = y->grad;
    switch (nd->op) {
    case QKV_OP_MATMUL:
    case QKV_OP_MATMUL_NT:
        matmul_backward(nd, nd->op == QKV_OP_MATMUL_NT);
        break;
    case QKV_OP_ADD:
    case QKV_OP_MUL:
    case QKV_OP_MASK:
        binary_backward(nd);
        break;
    case QKV_OP_TRANSPOSE:
        transpose_backward(nd);
        break;
    case QKV_OP_SCALE: /* dx = c·dy */
        for (size_t i = 0; i < a->numel; i++)
            a->grad[i] += (qkv_real)(nd->c * dy[i]);
        break;
    case QKV_OP_SUM: /* dx_i = c·dy (c = 1, or 1/N for the mean) */
        for (size_t i = 0; i < a->numel; i++)
            a->grad[i] += (qkv_real)(nd->c * dy[0]);
        break;
    case QKV_OP_SUM_LAST: { /* dx[r,j] = c·dy[r] */
        size_t n = (size_t)a->shape[a->ndim - 1];
        for (size_t i = 0; i < a->numel; i++)
            a->grad[i] += (qkv_real)(nd->c * dy[i / n]);
        break;
    }
    case QKV_OP_GATHER: { /* dW[ids[i],:] += dy[i,:] (scatter-add, in order) */
        size_t D = (size_t)a->shape[1], n = y->numel / D;
        qkv_scatter_add_rows(a->grad, dy, nd->ints, n, D);
        break;
    }
    case QKV_OP_PICK: { /* dx[b,idx[b],:] += dy[b,:] */
        size_t T = (size_t)a->shape[1], D = (size_t)a->shape[2];
        for (size_t b = 0; b < (size_t)a->shape[0]; b++)
            for (size_t j = 0; j < D; j++)
                a->grad[(b * T + (size_t)nd->ints[b]) * D + j] += dy[b * D + j];
        break;
    }
    case QKV_OP_SOFTMAX: { /* dx = y ⊙ (dy - Σ dy⊙y) */
        size_t n = (size_t)a->shape[a->ndim - 1];
        qkv_softmax_backward_rows(a->grad, y->data, dy, a->numel / n, n);
        break;
    }
    case QKV_OP_LOG_SOFTMAX:
        log_softmax_backward(nd);
        break;
    case QKV_OP_CROSS_ENTROPY:
        cross_entropy_backward(nd);
        break;
    case QKV_OP_TANH: /* dx = dy·(1 - y²) */
        for (size_t i = 0; i < a->numel; i++)
            a->grad[i] += dy[i] * (1 - y->data[i] * y->data[i]);
        break;
    case QKV_OP_ATTENTION: /* see attention.c */
        qkv_attention_node_backward(nd);
        break;
    case QKV_OP_RELU: /* dx = dy·[x > 0] */
        for (size_t i = 0; i < a->numel; i++)
            a->grad[i] += a->data[i] > 0 ? dy[i] : 0;
        break;
    }
}
