/*
 * reduce.c - reductions, each forward with its backward: sum and mean of
 * everything; sum, mean, max, min, logsumexp and variance along any one dimension,
 * keeping it (as size 1) or not; and the _last shorthands. Sums
 * accumulate in double. Last, argmax and argmin along a dimension,
 * which have no gradient and no tape.
 */
#include <math.h>

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

/* One definition per op, so that an error recording its node (an input
 * from another tape, no memory) names the op that was called. */
static const qkv_op_def op_sum = {"sum", sum_backward, 0};
static const qkv_op_def op_mean = {"mean", sum_backward, 0};

static qkv_tensor *reduce_all(qkv_tape *t, qkv_tensor *x, int mean)
{
    const qkv_op_def *def = mean ? &op_mean : &op_sum;
    if (!qkv_op_inputs_ok(t, def->name, x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, def->name, 0, NULL, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    double c = mean ? 1.0 / (double)x->numel : 1.0;
    out->data[0] = (qkv_real)(c * qkv_sum_real(x->data, x->numel));
    return qkv_op_finish(t, def, out, x, NULL, c);
}

qkv_tensor *qkv_sum(qkv_tape *t, qkv_tensor *x)
{
    return reduce_all(t, x, 0);
}

qkv_tensor *qkv_mean(qkv_tape *t, qkv_tensor *x)
{
    return reduce_all(t, x, 1);
}

/* ---- along one dimension ------------------------------------------------ */
/*
 * Along dimension d, x is outer × n × inner; the result is outer × inner
 * (with a 1 at d when kept). The node keeps d in ints[0] and, for max
 * and min, the index of each output's first maximum or minimum in
 * ints[1..].
 */

/* outer, n and inner of x along d. */
static void split(const qkv_tensor *x, int d, size_t *outer, size_t *n, size_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < d; i++)
        *outer *= (size_t)x->shape[i];
    for (int i = d + 1; i < x->ndim; i++)
        *inner *= (size_t)x->shape[i];
    *n = (size_t)x->shape[d];
}

static void sum_dim_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    size_t outer, n, inner;
    split(x, nd->ints[0], &outer, &n, &inner);
    const qkv_real *dy = nd->out->grad;
    for (size_t o = 0; o < outer; o++) /* dx[o,j,i] = c·dy[o,i] (c = 1 or 1/n) */
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; i < inner; i++)
                x->grad[(o * n + j) * inner + i] += (qkv_real)(nd->c * dy[o * inner + i]);
}

/* max_dim's and min_dim's: the index of the winner is on the node. */
static void max_dim_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    size_t outer, n, inner;
    split(x, nd->ints[0], &outer, &n, &inner);
    const qkv_real *dy = nd->out->grad;
    const int *arg = nd->ints + 1;
    for (size_t o = 0; o < outer; o++) /* dx = dy at the first max (min), 0 elsewhere */
        for (size_t i = 0; i < inner; i++)
            x->grad[(o * n + (size_t)arg[o * inner + i]) * inner + i] += dy[o * inner + i];
}

/* The n entries col[0], col[inner], ... as logsumexp takes them apart:
 * Σ e^(x - shift) in double, with shift the largest entry, or 0 when that
 * is infinite (PyTorch's choice: a row of -inf sums to 0, one with +inf
 * to +inf) or there is none above -inf. NaN entries make the sum NaN. */
static double lse_sum(const qkv_real *col, size_t n, size_t inner, double *shift)
{
    double m = -INFINITY, s = 0;
    for (size_t j = 0; j < n; j++)
        m = col[j * inner] > m ? col[j * inner] : m;
    *shift = isinf(m) ? 0 : m;
    for (size_t j = 0; j < n; j++)
        s += exp((double)col[j * inner] - *shift);
    return s;
}

static void logsumexp_dim_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    size_t outer, n, inner;
    split(x, nd->ints[0], &outer, &n, &inner);
    const qkv_real *dy = nd->out->grad;
    /* dx = dy·e^(x - y) = dy·e^(x - shift)/Σ, the row's softmax, from the
     * sum taken again (y rounded would cost |y|·ε); 0 for a row of -inf
     * (Σ = 0), where PyTorch gives NaN */
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            qkv_real *g = x->grad + o * n * inner + i;
            const qkv_real *col = x->data + o * n * inner + i;
            double shift, s = lse_sum(col, n, inner, &shift), d = dy[o * inner + i];
            for (size_t j = 0; s != 0 && j < n; j++)
                g[j * inner] += (qkv_real)(d * (exp((double)col[j * inner] - shift) / s));
        }
}

static const qkv_op_def op_sum_dim = {"sum_dim", sum_dim_backward, 0};
static const qkv_op_def op_mean_dim = {"mean_dim", sum_dim_backward, 0};
static const qkv_op_def op_max_dim = {"max_dim", max_dim_backward, 0};
static const qkv_op_def op_min_dim = {"min_dim", max_dim_backward, 0};
static const qkv_op_def op_logsumexp_dim = {"logsumexp_dim", logsumexp_dim_backward, 0};
static const qkv_op_def op_sum_last = {"sum_last", sum_dim_backward, 0};
static const qkv_op_def op_mean_last = {"mean_last", sum_dim_backward, 0};

typedef enum reduce_kind { SUM, MEAN, MAX, MIN, LSE } reduce_kind;

/* The index of the first maximum (min nonzero: minimum) of the n entries
 * col[0], col[inner], ...; the first NaN wins either way, as in PyTorch. */
static size_t arg_extreme(const qkv_real *col, size_t n, size_t inner, int min)
{
    size_t best = 0;
    for (size_t j = 1; j < n && col[best * inner] == col[best * inner]; j++) {
        const qkv_real v = col[j * inner], b = col[best * inner];
        if ((min ? v < b : v > b) || v != v)
            best = j;
    }
    return best;
}

/* The dimension dim of x counts as (from 0), or -1 after failing the tape
 * for a scalar x or a dim out of range. */
static int reduced_dim(qkv_tape *t, const char *name, const qkv_tensor *x, int dim)
{
    if (x->ndim < 1) {
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: [] has no dimension to reduce", name);
        return -1;
    }
    return qkv_op_dim(t, name, x, dim);
}

/* The output of a reduction of x along dimension d: x's shape without d,
 * or with d as 1 (keepdim). */
static qkv_tensor *reduced_out(qkv_tape *t, const char *name, qkv_tensor *x, int d, int keepdim)
{
    int shape[QKV_MAX_DIMS], nd = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != d || keepdim)
            shape[nd++] = i == d ? 1 : x->shape[i];
    return qkv_op_out(t, name, nd, shape, x, NULL);
}

/* The op def's name names the op in its errors. */
static qkv_tensor *reduce_dim(qkv_tape *t, const qkv_op_def *def, qkv_tensor *x, int dim,
                              int keepdim, reduce_kind kind)
{
    const char *name = def->name;
    if (!qkv_op_inputs_ok(t, name, x, NULL, 0))
        return qkv_nil();
    const int d = reduced_dim(t, name, x, dim);
    if (d < 0)
        return qkv_nil();
    qkv_tensor *out = reduced_out(t, name, x, d, keepdim);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t outer, n, inner;
    split(x, d, &outer, &n, &inner);
    const double c = kind == MEAN ? 1.0 / (double)n : 1.0;
    int *arg = NULL;
    if ((kind == MAX || kind == MIN) && out->grad != NULL &&
        (arg = qkv_op_alloc(t, name, sizeof *arg * (outer * inner + 1))) == NULL)
        return qkv_nil();
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            const qkv_real *col = x->data + o * n * inner + i;
            if (kind == MAX || kind == MIN) {
                const size_t best = arg_extreme(col, n, inner, kind == MIN);
                out->data[o * inner + i] = col[best * inner];
                if (arg != NULL)
                    arg[1 + o * inner + i] = (int)best;
            } else if (kind == LSE) {
                double shift, s = lse_sum(col, n, inner, &shift);
                out->data[o * inner + i] = (qkv_real)(shift + log(s));
            } else if (inner == 1) {
                out->data[o] = (qkv_real)(c * qkv_sum_real(col, n));
            } else {
                double s = 0;
                for (size_t j = 0; j < n; j++)
                    s += col[j * inner];
                out->data[o * inner + i] = (qkv_real)(c * s);
            }
        }
    int failed;
    qkv_node *node = qkv_op_record(t, def, out, x, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (node != NULL) {
        node->c = c;
        if (arg == NULL && (arg = qkv_op_alloc(t, name, sizeof *arg)) == NULL)
            return qkv_nil();
        arg[0] = d;
        node->ints = arg;
    }
    return out;
}

qkv_tensor *qkv_sum_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim)
{
    return reduce_dim(t, &op_sum_dim, x, dim, keepdim, SUM);
}

qkv_tensor *qkv_mean_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim)
{
    return reduce_dim(t, &op_mean_dim, x, dim, keepdim, MEAN);
}

qkv_tensor *qkv_max_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim)
{
    return reduce_dim(t, &op_max_dim, x, dim, keepdim, MAX);
}

qkv_tensor *qkv_min_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim)
{
    return reduce_dim(t, &op_min_dim, x, dim, keepdim, MIN);
}

qkv_tensor *qkv_logsumexp_dim(qkv_tape *t, qkv_tensor *x, int dim, int keepdim)
{
    return reduce_dim(t, &op_logsumexp_dim, x, dim, keepdim, LSE);
}

qkv_tensor *qkv_sum_last(qkv_tape *t, qkv_tensor *x)
{
    return reduce_dim(t, &op_sum_last, x, -1, 0, SUM);
}

qkv_tensor *qkv_mean_last(qkv_tape *t, qkv_tensor *x)
{
    return reduce_dim(t, &op_mean_last, x, -1, 0, MEAN);
}

/* ---- variance along one dimension --------------------------------------- */
/*
 * Two passes over each column, in double: the mean, then the squares
 * about it. The node keeps d in ints[0] and 2/(n - correction) in c;
 * backward takes the mean again rather than keeping it.
 */

/* The mean of the n entries col[0], col[inner], ..., summed in double. */
static double col_mean(const qkv_real *col, size_t n, size_t inner)
{
    double s = 0;
    for (size_t j = 0; j < n; j++)
        s += col[j * inner];
    return s / (double)n;
}

static void var_dim_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    size_t outer, n, inner;
    split(x, nd->ints[0], &outer, &n, &inner);
    const qkv_real *dy = nd->out->grad;
    /* dx = dy·2(x - mean)/(n - correction), c = 2/(n - correction) */
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            const qkv_real *col = x->data + o * n * inner + i;
            qkv_real *g = x->grad + o * n * inner + i;
            const double mean = col_mean(col, n, inner), d = nd->c * dy[o * inner + i];
            for (size_t j = 0; j < n; j++)
                g[j * inner] += (qkv_real)(d * ((double)col[j * inner] - mean));
        }
}

static const qkv_op_def op_var_dim = {"var_dim", var_dim_backward, 0};

/* Nonzero when d's size exceeds correction (0 or 1); otherwise records
 * the error, naming x's shape. */
static int var_size_ok(qkv_tape *t, const qkv_tensor *x, int d, int correction)
{
    if (x->shape[d] > correction)
        return 1;
    char sx[64];
    qkv_shape_str(x, sx, sizeof sx);
    qkv_tape_fail(t, QKV_ERR_SHAPE,
                  "var_dim: %s has %d entr%s along dimension %d, and correction %d needs at "
                  "least %d",
                  sx, x->shape[d], x->shape[d] == 1 ? "y" : "ies", d, correction, correction + 1);
    return 0;
}

qkv_tensor *qkv_var_dim(qkv_tape *t, qkv_tensor *x, int dim, int correction, int keepdim)
{
    const char *name = op_var_dim.name;
    if (!qkv_op_inputs_ok(t, name, x, NULL, 0))
        return qkv_nil();
    if (correction != 0 && correction != 1) {
        qkv_tape_fail(t, QKV_ERR_ARG, "%s: correction %d must be 0 or 1", name, correction);
        return qkv_nil();
    }
    const int d = reduced_dim(t, name, x, dim);
    if (d < 0 || !var_size_ok(t, x, d, correction))
        return qkv_nil();
    qkv_tensor *out = reduced_out(t, name, x, d, keepdim);
    if (qkv_tensor_is_nil(out))
        return out;
    size_t outer, n, inner;
    split(x, d, &outer, &n, &inner);
    const double denom = (double)n - correction;
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
            const qkv_real *col = x->data + o * n * inner + i;
            const double mean = col_mean(col, n, inner);
            double s = 0;
            for (size_t j = 0; j < n; j++) {
                const double e = (double)col[j * inner] - mean;
                s += e * e;
            }
            out->data[o * inner + i] = (qkv_real)(s / denom);
        }
    int failed;
    qkv_node *node = qkv_op_record(t, &op_var_dim, out, x, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (node != NULL) {
        int *arg = qkv_op_alloc(t, name, sizeof *arg);
        if (arg == NULL)
            return qkv_nil();
        arg[0] = d;
        node->ints = arg;
        node->c = 2 / denom;
    }
    return out;
}

/* ---- indices, with no tape ---------------------------------------------- */

/* argmax_dim and argmin_dim: name names the function in its errors. */
static qkv_status arg_dim(const char *name, const qkv_tensor *x, int dim, int *out, size_t cap,
                          int min, qkv_error *err)
{
    if (qkv_tensor_is_nil(x))
        return qkv_error_set(err, QKV_ERR_ARG,
                             "%s: input is nil (NULL, or the result of a failed call)", name);
    char sx[64];
    qkv_shape_str(x, sx, sizeof sx);
    if (x->ndim < 1)
        return qkv_error_set(err, QKV_ERR_SHAPE, "%s: %s has no dimension to reduce", name, sx);
    const int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim)
        return qkv_error_set(err, QKV_ERR_ARG, "%s: dimension %d is out of range for %s", name, dim,
                             sx);
    if (out == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "%s: no array for the indices (NULL)", name);
    size_t outer, n, inner;
    split(x, d, &outer, &n, &inner);
    if (cap < outer * inner)
        return qkv_error_set(err, QKV_ERR_ARG,
                             "%s: %s along dimension %d gives %zu indices, and out has "
                             "room for %zu",
                             name, sx, d, outer * inner, cap);
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++)
            out[o * inner + i] = (int)arg_extreme(x->data + o * n * inner + i, n, inner, min);
    return QKV_OK;
}

qkv_status qkv_argmax_dim(const qkv_tensor *x, int dim, int *out, size_t cap, qkv_error *err)
{
    return arg_dim("argmax_dim", x, dim, out, cap, 0, err);
}

qkv_status qkv_argmin_dim(const qkv_tensor *x, int dim, int *out, size_t cap, qkv_error *err)
{
    return arg_dim("argmin_dim", x, dim, out, cap, 1, err);
}
