/*
 * linalg.c - the linear-algebra ops: matmul, matmul_nt (A·Bᵀ) and
 * transpose, each forward with its backward.
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

static const qkv_op_def op_matmul = {"matmul", matmul_backward};
static const qkv_op_def op_matmul_nt = {"matmul_nt", matmul_nt_backward};

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
    qkv_tensor *out = qkv_op_out(t, a->ndim, shape, a, b);
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

static const qkv_op_def op_transpose = {"transpose", transpose_backward};

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
    qkv_tensor *out = qkv_op_out(t, x->ndim, shape, x, NULL);
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
