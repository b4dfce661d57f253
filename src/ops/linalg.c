/*
 * linalg.c - the linear-algebra ops: matmul, matmul_nt (A·Bᵀ), affine
 * (x·W + b) and transpose, each forward with its backward.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "ops/op.h"

/* ---- matmul and matmul_nt ---------------------------------------------- */

static void matmul_backward_either(const qkv_node *nd, int nt)
{
    const qkv_tensor *a = nd->in[0], *b = nd->in[1], *c = nd->out;
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

static void matmul_backward(const qkv_node *nd)
{
    matmul_backward_either(nd, 0);
}

static void matmul_nt_backward(const qkv_node *nd)
{
    matmul_backward_either(nd, 1);
}

static const qkv_op_def op_matmul = {"matmul", matmul_backward, 0};
static const qkv_op_def op_matmul_nt = {"matmul_nt", matmul_nt_backward, 0};

static qkv_tensor *matmul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b, int nt)
{
    const char *name = nt ? "matmul_nt" : "matmul";
    if (!qkv_op_inputs_ok(t, name, a, b, 1))
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
        QKV_SHAPES(a, b);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: %s x %s: %s", name, sa, sb, why);
        return qkv_nil();
    }
    int shape[QKV_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = n;
    qkv_tensor *out = qkv_op_out(t, name, a->ndim, shape, a, b);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t batch = a->numel / ((size_t)m * k);
    size_t bstep = b->ndim > 2 ? (size_t)k * n : 0;
    for (size_t i = 0; i < batch; i++)
        qkv_gemm(0, nt, m, n, k, a->data + i * m * k, b->data + i * bstep, out->data + i * m * n,
                 0);
    return qkv_op_finish(t, nt ? &op_matmul_nt : &op_matmul, out, a, b, 0);
}

qkv_tensor *qkv_matmul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return matmul(t, a, b, 0);
}

qkv_tensor *qkv_matmul_nt(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return matmul(t, a, b, 1);
}

/* ---- affine: x·W + b, rows flattened ------------------------------------ */

/* The rows of x: the product of every dimension but the last. */
static int affine_rows(const qkv_tensor *x)
{
    return (int)(x->numel / (size_t)x->shape[x->ndim - 1]);
}

static void affine_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0], *w = nd->in[1], *y = nd->out;
    const int m = affine_rows(x), k = w->shape[0], n = w->shape[1];
    if (x->grad != NULL) /* dX = dY·Wᵀ, overwriting a gradient not yet filled */
        qkv_gemm(0, 1, m, k, n, y->grad, w->data, x->grad, !qkv_tensor_grad_claim(x));
    if (w->grad != NULL) /* dW = Xᵀ·dY */
        qkv_gemm(1, 0, k, n, m, x->data, y->grad, w->grad, !qkv_tensor_grad_claim(w));
    if (nd->n_in > 2 && nd->in[2]->grad != NULL) { /* db = Σ_rows dY, rows in order */
        qkv_tensor_grad_ready(nd->in[2]);
        qkv_real *db = nd->in[2]->grad;
        int i = 0;
        for (; i + 4 <= m; i += 4) { /* four rows a pass over db: the same adds */
            const qkv_real *d0 = y->grad + (size_t)i * n, *d1 = d0 + n, *d2 = d1 + n, *d3 = d2 + n;
            for (int j = 0; j < n; j++)
                db[j] = (((db[j] + d0[j]) + d1[j]) + d2[j]) + d3[j];
        }
        for (; i < m; i++) {
            const qkv_real *dy = y->grad + (size_t)i * n;
            for (int j = 0; j < n; j++)
                db[j] += dy[j];
        }
    }
}

static const qkv_op_def op_affine = {"affine", affine_backward, QKV_OP_CLAIMS_GRADS};

qkv_tensor *qkv_affine(qkv_tape *t, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b)
{
    if (!qkv_op_inputs_ok(t, "affine", x, w, 1) ||
        (b != NULL && !qkv_op_inputs_ok(t, "affine", b, NULL, 0)))
        return qkv_nil();
    const char *why = NULL;
    if (x->ndim < 1 || w->ndim != 2)
        why = "x needs at least 1 dimension and w exactly 2";
    else if (x->shape[x->ndim - 1] != w->shape[0])
        why = "the last dimension of x is not w's first";
    else if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[1]))
        why = "b must be a vector as long as w's second dimension";
    if (why != NULL) {
        char sx[64], sw[64], sb[64] = "none";
        qkv_shape_str(x, sx, sizeof sx);
        qkv_shape_str(w, sw, sizeof sw);
        if (b != NULL)
            qkv_shape_str(b, sb, sizeof sb);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "affine: x %s, w %s, b %s: %s", sx, sw, sb, why);
        return qkv_nil();
    }
    int shape[QKV_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    const int m = affine_rows(x), k = w->shape[0], n = w->shape[1];
    shape[x->ndim - 1] = n;
    const int grad = qkv_wants_grad(x, w) || (b != NULL && b->grad != NULL);
    qkv_tensor *out = qkv_op_tensor(t, "affine", x->ndim, shape, grad);
    if (qkv_tensor_is_nil(out))
        return out;
    /* one product over all rows (W is packed once), then the bias added
     * in place: the same bits as qkv_add(qkv_matmul(x, w), b) where that
     * product takes the same order */
    qkv_gemm(0, 0, m, n, k, x->data, w->data, out->data, 0);
    if (b != NULL)
        for (int i = 0; i < m; i++) {
            qkv_real *yr = out->data + (size_t)i * n;
            for (int j = 0; j < n; j++)
                yr[j] += b->data[j];
        }
    if (out->grad == NULL)
        return out;
    qkv_tensor *in[3] = {x, w, b};
    if (qkv_tape_record(t, &op_affine, out, b != NULL ? 3 : 2, in) == NULL)
        return qkv_nil();
    return out;
}

/* ---- transpose ---------------------------------------------------------- */

static void transpose_backward(const qkv_node *nd)
{
    const qkv_tensor *x = nd->in[0];
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

static const qkv_op_def op_transpose = {"transpose", transpose_backward, 0};

qkv_tensor *qkv_transpose(qkv_tape *t, qkv_tensor *x)
{
    if (!qkv_op_inputs_ok(t, "transpose", x, NULL, 0))
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
    qkv_tensor *out = qkv_op_out(t, "transpose", x->ndim, shape, x, NULL);
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
    return qkv_op_finish(t, &op_transpose, out, x, NULL, 0);
}
