/*
 * shape.c - shape ops, each forward with its backward: reshape (a view:
 * no copy, no node), permute and swapdims, concat, stack and slice.
 */
#include <stdio.h>
#include <string.h>

#include "ops/op.h"

/* ---- reshape: a view ---------------------------------------------------- */

qkv_tensor *qkv_reshape(qkv_tape *t, qkv_tensor *x, int ndim, const int *shape)
{
    if (!qkv_op_inputs_ok(t, "reshape", x, NULL, 0))
        return qkv_nil();
    char sx[64]; /* x's shape, formatted only for an error: views run every step */
    if (ndim < 0 || ndim > QKV_MAX_DIMS || (ndim > 0 && shape == NULL)) {
        qkv_shape_str(x, sx, sizeof sx);
        if (ndim < 0 || ndim > QKV_MAX_DIMS)
            qkv_tape_fail(t, QKV_ERR_SHAPE, "reshape: %s: a new shape needs 0 to %d dimensions", sx,
                          QKV_MAX_DIMS);
        else /* the count is right: the sizes are missing */
            qkv_tape_fail(t, QKV_ERR_SHAPE, "reshape: %s: no new shape (NULL) for %d dimensions",
                          sx, ndim);
        return qkv_nil();
    }
    int dims[QKV_MAX_DIMS], infer = -1;
    size_t known = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = shape[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (shape[i] >= 1 && !qkv_mul_size(known, (size_t)shape[i], &known)) {
            known = 0; /* a size that overflows holds no x: said below */
            continue;
        }
        if (shape[i] == -1) { /* a second -1 */
            qkv_shape_str(x, sx, sizeof sx);
            qkv_tape_fail(t, QKV_ERR_SHAPE,
                          "reshape: %s: dimensions %d and %d of the new shape are both -1 (only "
                          "one may be)",
                          sx, infer, i);
            return qkv_nil();
        }
        if (shape[i] < 1) {
            qkv_shape_str(x, sx, sizeof sx);
            qkv_tape_fail(t, QKV_ERR_SHAPE,
                          "reshape: %s: dimension %d of the new shape is %d (each must be at "
                          "least 1, and one may be -1)",
                          sx, i, shape[i]);
            return qkv_nil();
        }
    }
    if (infer >= 0 && known != 0 && x->numel % known == 0 && x->numel / known <= 0x7fffffff)
        dims[infer] = (int)(x->numel / known);
    size_t n;
    if ((infer >= 0 && (known == 0 || x->numel % known != 0)) ||
        qkv_shape_numel(ndim, dims, &n) != QKV_OK || n != x->numel) {
        /* the new shape as given (-1 included) and, without a -1, how
         * many values it holds */
        char sn[QKV_MAX_DIMS * 12 + 3], held[48] = "more than a size can count";
        qkv_shape_str(x, sx, sizeof sx);
        qkv_dims_str(ndim, shape, sn, sizeof sn);
        if (infer < 0 && known != 0)
            snprintf(held, sizeof held, "%zu", known);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "reshape: %s has %zu values; the new shape %s %s%s", sx,
                      x->numel, sn, infer >= 0 ? "cannot hold them with any size at -1" : "holds ",
                      infer >= 0 ? "" : held);
        return qkv_nil();
    }
    /* the view: x's own data and gradient (when recording), a new shape */
    qkv_tensor *v = qkv_op_alloc(t, "reshape", sizeof *v);
    if (v == NULL)
        return qkv_nil();
    *v = *x;
    v->grad = qkv_tape_grad_enabled(t) ? x->grad : NULL;
    v->ndim = ndim;
    for (int i = 0; i < QKV_MAX_DIMS; i++)
        v->shape[i] = i < ndim ? dims[i] : 1;
    v->flags = QKV_TENSOR_TAPE | (v->grad != NULL ? x->flags & QKV_TENSOR_LAZY_GRAD : 0u);
    return v;
}

/* ---- permute ------------------------------------------------------------ */

/* The node's record: the permutation. */
typedef struct perm_rec {
    int perm[QKV_MAX_DIMS];
} perm_rec;

/* Strides of a row-major shape padded on the left to four dimensions. */
static void strides4(const qkv_tensor *x, size_t s[4], int dim[4])
{
    size_t acc = 1;
    for (int i = 3; i >= 0; i--) {
        int d = i - (4 - x->ndim);
        dim[i] = d >= 0 ? x->shape[d] : 1;
        s[i] = acc;
        acc *= (size_t)dim[i];
    }
}

/* Copies x into y = x permuted by perm (y's dimension i is x's perm[i]),
 * or, with back 1, adds y back into x (dx += permuted-back dy); with back
 * 2, copies it back (dx = permuted-back dy). */
static void permute_copy(const qkv_tensor *x, qkv_real *xd, const qkv_real *yd, qkv_real *yo,
                         const int *perm, int back)
{
    size_t xs[4];
    int xdim[4], odim[4];
    strides4(x, xs, xdim);
    const int off = 4 - x->ndim;
    /* output dimension i (padded) walks x along its stride src[i] */
    size_t src[4];
    for (int i = 0; i < 4; i++) {
        int p = i < off ? i : perm[i - off] + off;
        odim[i] = xdim[p];
        src[i] = xs[p];
    }
    size_t o = 0;
    for (int i0 = 0; i0 < odim[0]; i0++)
        for (int i1 = 0; i1 < odim[1]; i1++)
            for (int i2 = 0; i2 < odim[2]; i2++) {
                size_t base = i0 * src[0] + i1 * src[1] + i2 * src[2];
                for (int i3 = 0; i3 < odim[3]; i3++, o++) {
                    size_t s = base + i3 * src[3];
                    if (back == 1)
                        xd[s] += yd[o];
                    else if (back == 2) /* 0 + dy: +0 where dy is -0, as adding gives */
                        xd[s] = (qkv_real)0 + yd[o];
                    else
                        yo[o] = xd[s];
                }
            }
}

static void permute_backward(const qkv_node *nd)
{
    const perm_rec *r = nd->state;
    qkv_tensor *x = nd->in[0];
    /* dx[i...] += dy[perm(i...)]: the same walk, adding the other way (or
     * copying, into a gradient not yet filled) */
    permute_copy(x, x->grad, nd->out->grad, NULL, r->perm, qkv_tensor_grad_claim(x) ? 2 : 1);
}

static const qkv_op_def op_permute = {"permute", permute_backward, QKV_OP_CLAIMS_GRADS};
/* swapdims is a permute that names itself in its errors */
static const qkv_op_def op_swapdims = {"swapdims", permute_backward, QKV_OP_CLAIMS_GRADS};

static qkv_tensor *permute_as(qkv_tape *t, const qkv_op_def *def, qkv_tensor *x, const int *perm)
{
    const char *name = def->name;
    if (!qkv_op_inputs_ok(t, name, x, NULL, 0))
        return qkv_nil();
    int seen = 0, p[QKV_MAX_DIMS], shape[QKV_MAX_DIMS];
    for (int i = 0; perm != NULL && i < x->ndim; i++) {
        p[i] = perm[i] < 0 ? perm[i] + x->ndim : perm[i];
        if (p[i] < 0 || p[i] >= x->ndim || (seen & (1 << p[i])))
            break;
        seen |= 1 << p[i];
        shape[i] = x->shape[p[i]];
    }
    if (seen != (1 << x->ndim) - 1) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        if (perm == NULL) /* not a wrong permutation: none */
            qkv_tape_fail(t, QKV_ERR_ARG, "%s: %s: no permutation (NULL)", name, sx);
        else
            qkv_tape_fail(t, QKV_ERR_ARG,
                          "%s: %s: the permutation must name each of its %d dimensions once", name,
                          sx, x->ndim);
        return qkv_nil();
    }
    qkv_tensor *out = qkv_op_out(t, name, x->ndim, shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    permute_copy(x, x->data, NULL, out->data, p, 0);
    int failed;
    qkv_node *n = qkv_op_record(t, def, out, x, NULL, &failed);
    if (n != NULL) {
        perm_rec *r = qkv_op_alloc(t, name, sizeof *r);
        if (r == NULL)
            return qkv_nil();
        memcpy(r->perm, p, sizeof r->perm);
        n->state = r;
    }
    return failed ? qkv_nil() : out;
}

qkv_tensor *qkv_permute(qkv_tape *t, qkv_tensor *x, const int *perm)
{
    return permute_as(t, &op_permute, x, perm);
}

qkv_tensor *qkv_swapdims(qkv_tape *t, qkv_tensor *x, int d0, int d1)
{
    if (!qkv_op_inputs_ok(t, "swapdims", x, NULL, 0))
        return qkv_nil();
    int a = qkv_op_dim(t, "swapdims", x, d0), b = a < 0 ? -1 : qkv_op_dim(t, "swapdims", x, d1);
    if (b < 0)
        return qkv_nil();
    int perm[QKV_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        perm[i] = i == a ? b : i == b ? a : i;
    return permute_as(t, &op_swapdims, x, perm);
}

/* ---- concat and slice --------------------------------------------------- */
/*
 * Along dimension d, a tensor is outer × size(d) × inner: a block of
 * size(d)·inner values for each of the outer indices.
 */

static void outer_inner(const qkv_tensor *x, int d, size_t *outer, size_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < d; i++)
        *outer *= (size_t)x->shape[i];
    for (int i = d + 1; i < x->ndim; i++)
        *inner *= (size_t)x->shape[i];
}

static void concat_backward(const qkv_node *nd)
{
    const int d = (int)nd->c;
    size_t outer, inner, at = 0;
    outer_inner(nd->out, d, &outer, &inner);
    const size_t row = (size_t)nd->out->shape[d] * inner;
    for (int k = 0; k < nd->n_in; k++) { /* dx_k = its block of dy */
        qkv_tensor *x = nd->in[k];
        const size_t w = (size_t)x->shape[d] * inner;
        if (x->grad != NULL)
            for (size_t o = 0; o < outer; o++)
                for (size_t j = 0; j < w; j++)
                    x->grad[o * w + j] += nd->out->grad[o * row + at + j];
        at += w;
    }
}

static const qkv_op_def op_concat = {"concat", concat_backward, 0};

qkv_tensor *qkv_concat(qkv_tape *t, int n, qkv_tensor *const *xs, int dim)
{
    if (t == NULL || qkv_tape_status(t) != QKV_OK)
        return qkv_nil();
    if (xs == NULL) {
        qkv_tape_fail(t, QKV_ERR_ARG, "concat: no array of tensors (NULL)");
        return qkv_nil();
    }
    if (n < 1 || n > QKV_CONCAT_MAX) {
        qkv_tape_fail(t, QKV_ERR_ARG, "concat: needs 1 to %d tensors, got %d", QKV_CONCAT_MAX, n);
        return qkv_nil();
    }
    int grad = 0;
    for (int k = 0; k < n; k++) {
        if (!qkv_op_inputs_ok(t, "concat", xs[k], NULL, 0))
            return qkv_nil();
        grad |= xs[k]->grad != NULL;
    }
    const int d = qkv_op_dim(t, "concat", xs[0], dim);
    if (d < 0)
        return qkv_nil();
    int shape[QKV_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof shape);
    for (int k = 1; k < n; k++) {
        int ok = xs[k]->ndim == xs[0]->ndim;
        for (int i = 0; ok && i < xs[0]->ndim; i++)
            ok = i == d || xs[k]->shape[i] == xs[0]->shape[i];
        if (!ok || shape[d] > 0x7fffffff - xs[k]->shape[d]) {
            QKV_SHAPES(xs[0], xs[k]);
            if (ok) /* the sizes agree; their sum along d does not fit */
                qkv_tape_fail(t, QKV_ERR_SHAPE,
                              "concat: %s and %s (input %d): dimension %d would be over %d long",
                              sa, sb, k, d, 0x7fffffff);
            else
                qkv_tape_fail(t, QKV_ERR_SHAPE,
                              "concat: %s and %s (input %d): all sizes but dimension %d must agree",
                              sa, sb, k, d);
            return qkv_nil();
        }
        shape[d] += xs[k]->shape[d];
    }
    qkv_tensor *out = qkv_op_tensor(t, "concat", xs[0]->ndim, shape, grad);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t outer, inner, at = 0;
    outer_inner(out, d, &outer, &inner);
    const size_t row = (size_t)shape[d] * inner;
    for (int k = 0; k < n; k++) {
        const size_t w = (size_t)xs[k]->shape[d] * inner;
        for (size_t o = 0; o < outer; o++)
            memcpy(out->data + o * row + at, xs[k]->data + o * w, w * sizeof(qkv_real));
        at += w;
    }
    if (out->grad == NULL)
        return out;
    qkv_node *node = qkv_tape_record(t, &op_concat, out, n, xs);
    if (node == NULL)
        return qkv_nil();
    node->c = d;
    return out;
}

/*
 * stack: inputs of one shape, each outer × inner around the new dimension
 * d (outer the sizes before d, inner those from d on); the result is
 * outer × n × inner, input k's block of inner values at k in every row.
 */

static void stack_backward(const qkv_node *nd)
{
    const int d = (int)nd->c, n = nd->n_in;
    size_t outer, inner;
    outer_inner(nd->out, d, &outer, &inner);
    const qkv_real *dy = nd->out->grad;
    for (int k = 0; k < n; k++) { /* dx_k[o,i] += dy[o,k,i] */
        qkv_tensor *x = nd->in[k];
        if (x->grad != NULL)
            for (size_t o = 0; o < outer; o++)
                for (size_t i = 0; i < inner; i++)
                    x->grad[o * inner + i] += dy[(o * (size_t)n + (size_t)k) * inner + i];
    }
}

static const qkv_op_def op_stack = {"stack", stack_backward, 0};

/* Nonzero when the n inputs may be stacked (the tape holds no error, each
 * input is real and fresh, all share xs[0]'s shape, and one dimension
 * more fits); *grad says whether any takes a gradient. */
static int stack_inputs_ok(qkv_tape *t, int n, qkv_tensor *const *xs, int *grad)
{
    if (t == NULL || qkv_tape_status(t) != QKV_OK)
        return 0;
    if (xs == NULL || n < 1 || n > QKV_CONCAT_MAX) {
        if (xs == NULL)
            qkv_tape_fail(t, QKV_ERR_ARG, "stack: no array of tensors (NULL)");
        else
            qkv_tape_fail(t, QKV_ERR_ARG, "stack: needs 1 to %d tensors, got %d", QKV_CONCAT_MAX,
                          n);
        return 0;
    }
    *grad = 0;
    for (int k = 0; k < n; k++) {
        if (!qkv_op_inputs_ok(t, "stack", xs[k], NULL, 0))
            return 0;
        *grad |= xs[k]->grad != NULL;
    }
    for (int k = 1; k < n; k++) {
        int same = xs[k]->ndim == xs[0]->ndim;
        for (int i = 0; same && i < xs[0]->ndim; i++)
            same = xs[k]->shape[i] == xs[0]->shape[i];
        if (!same) {
            QKV_SHAPES(xs[0], xs[k]);
            qkv_tape_fail(t, QKV_ERR_SHAPE,
                          "stack: %s and %s (input %d): every input must have the same shape", sa,
                          sb, k);
            return 0;
        }
    }
    if (xs[0]->ndim >= QKV_MAX_DIMS) {
        char sx[64];
        qkv_shape_str(xs[0], sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "stack: %s: the result would have %d dimensions, over the %d a tensor may "
                      "have",
                      sx, xs[0]->ndim + 1, QKV_MAX_DIMS);
        return 0;
    }
    return 1;
}

qkv_tensor *qkv_stack(qkv_tape *t, int n, qkv_tensor *const *xs, int dim)
{
    int grad;
    if (!stack_inputs_ok(t, n, xs, &grad))
        return qkv_nil();
    const int nd = xs[0]->ndim + 1, d = dim < 0 ? dim + nd : dim;
    if (d < 0 || d >= nd) {
        char sx[64];
        qkv_shape_str(xs[0], sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "stack: dimension %d is out of range for %s stacked (%d to %d)", dim, sx, -nd,
                      nd - 1);
        return qkv_nil();
    }
    int shape[QKV_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        shape[i] = i < d ? xs[0]->shape[i] : i == d ? n : xs[0]->shape[i - 1];
    qkv_tensor *out = qkv_op_tensor(t, "stack", nd, shape, grad);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t outer, inner;
    outer_inner(out, d, &outer, &inner);
    for (size_t o = 0; o < outer; o++) /* out[o,k,:] = xs[k][o,:] */
        for (int k = 0; k < n; k++)
            memcpy(out->data + (o * (size_t)n + (size_t)k) * inner, xs[k]->data + o * inner,
                   inner * sizeof(qkv_real));
    if (out->grad == NULL)
        return out;
    qkv_node *node = qkv_tape_record(t, &op_stack, out, n, xs);
    if (node == NULL)
        return qkv_nil();
    node->c = d;
    return out;
}

static void slice_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const int d = nd->ints[0], start = nd->ints[1];
    size_t outer, inner;
    outer_inner(x, d, &outer, &inner);
    const size_t row = (size_t)x->shape[d] * inner, w = (size_t)nd->out->shape[d] * inner;
    for (size_t o = 0; o < outer; o++) /* dx[..., start + j, ...] += dy[..., j, ...] */
        for (size_t j = 0; j < w; j++)
            x->grad[o * row + (size_t)start * inner + j] += nd->out->grad[o * w + j];
}

static const qkv_op_def op_slice = {"slice", slice_backward, 0};

qkv_tensor *qkv_slice(qkv_tape *t, qkv_tensor *x, int dim, int start, int len)
{
    if (!qkv_op_inputs_ok(t, "slice", x, NULL, 0))
        return qkv_nil();
    const int d = qkv_op_dim(t, "slice", x, dim);
    if (d < 0)
        return qkv_nil();
    if (start < 0 || len < 1 || start > x->shape[d] - len) {
        char sx[64];
        qkv_shape_str(x, sx, sizeof sx);
        qkv_tape_fail(t, QKV_ERR_ARG,
                      "slice: %s: [%d, %d + %d) is not a non-empty range within [0, %d) of "
                      "dimension %d",
                      sx, start, start, len, x->shape[d], d);
        return qkv_nil();
    }
    int shape[QKV_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = len;
    qkv_tensor *out = qkv_op_out(t, "slice", x->ndim, shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t outer, inner;
    outer_inner(x, d, &outer, &inner);
    const size_t row = (size_t)x->shape[d] * inner, w = (size_t)len * inner;
    for (size_t o = 0; o < outer; o++)
        memcpy(out->data + o * w, x->data + o * row + (size_t)start * inner, w * sizeof(qkv_real));
    int failed;
    qkv_node *n = qkv_op_record(t, &op_slice, out, x, NULL, &failed);
    if (n != NULL && (n->ints = qkv_tape_ints(t, "slice", (const int[]){d, start}, 2)) == NULL)
        failed = 1;
    return failed ? qkv_nil() : out;
}
