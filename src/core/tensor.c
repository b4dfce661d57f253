/*
 * tensor.c - heap tensors, shapes and printing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "qkv/tensor.h"
#include "util/util.h"

static qkv_tensor nil_tensor = {NULL, NULL, 0, 0, {1, 1, 1, 1}, QKV_TENSOR_NIL};

qkv_tensor *qkv_nil(void)
{
    return &nil_tensor;
}

int qkv_tensor_is_nil(const qkv_tensor *t)
{
    return t == NULL || (t->flags & QKV_TENSOR_NIL) != 0;
}

qkv_status qkv_shape_numel(int ndim, const int *shape, size_t *numel)
{
    size_t n = 1;
    if (numel == NULL || ndim < 0 || ndim > QKV_MAX_DIMS || (ndim > 0 && shape == NULL))
        return QKV_ERR_ARG;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return QKV_ERR_ARG;
        if (!qkv_mul_size(n, (size_t)shape[i], &n))
            return QKV_ERR_NOMEM;
    }
    if (!qkv_mul_size(n, sizeof(qkv_real), &(size_t){0}))
        return QKV_ERR_NOMEM;
    *numel = n;
    return QKV_OK;
}

void qkv_shape_problem(int ndim, const int *shape, qkv_status s, char *buf, size_t len)
{
    char dims[64] = "";
    if (shape != NULL && ndim >= 0 && ndim <= QKV_MAX_DIMS)
        qkv_dims_str(ndim, shape, dims, sizeof dims);
    if (ndim < 0 || ndim > QKV_MAX_DIMS)
        snprintf(buf, len, "a shape needs 0 to %d dimensions, not %d", QKV_MAX_DIMS, ndim);
    else if (shape == NULL)
        snprintf(buf, len, "no shape (NULL) for %d dimensions", ndim);
    else if (s == QKV_ERR_NOMEM)
        snprintf(buf, len, "the size of the shape %s overflows", dims);
    else
        snprintf(buf, len, "the shape %s has a dimension below 1", dims);
}

qkv_tensor *qkv_tensor_new_abi(unsigned abi, int ndim, const int *shape, int with_grad,
                               qkv_error *err)
{
    size_t n;
    if (!qkv_abi_ok(abi, err))
        return qkv_nil();
    qkv_status s = qkv_shape_numel(ndim, shape, &n);
    if (s != QKV_OK) { /* say what is wrong, naming the shape */
        char why[128];
        qkv_shape_problem(ndim, shape, s, why, sizeof why);
        qkv_error_set(err, s, "tensor: %s", why);
        return qkv_nil();
    }
    qkv_tensor *t = qkv_calloc(1, sizeof *t);
    if (t != NULL) {
        t->data = qkv_calloc(n, sizeof(qkv_real));
        t->grad = with_grad ? qkv_calloc(n, sizeof(qkv_real)) : NULL;
    }
    if (t == NULL || t->data == NULL || (with_grad && t->grad == NULL)) {
        if (t != NULL) {
            free(t->data);
            free(t->grad);
            free(t);
        }
        qkv_error_set(err, QKV_ERR_NOMEM, "tensor: out of memory for %zu values", n);
        return qkv_nil();
    }
    t->numel = n;
    t->ndim = ndim;
    for (int i = 0; i < QKV_MAX_DIMS; i++)
        t->shape[i] = i < ndim ? shape[i] : 1;
    t->flags = QKV_TENSOR_HEAP;
    return t;
}

void qkv_tensor_free(qkv_tensor *t)
{
    if (t == NULL || !(t->flags & QKV_TENSOR_HEAP))
        return;
    free(t->data);
    free(t->grad);
    free(t);
}

void qkv_tensor_zero_grad(qkv_tensor *t)
{
    if (t != NULL && t->grad != NULL)
        memset(t->grad, 0, t->numel * sizeof(qkv_real));
}

qkv_status qkv_tensor_set(qkv_tensor *t, const qkv_real *src, size_t n)
{
    if (qkv_tensor_is_nil(t) || n != t->numel)
        return QKV_ERR_SHAPE;
    if (src == NULL)
        return QKV_ERR_ARG;
    memcpy(t->data, src, n * sizeof(qkv_real));
    return QKV_OK;
}

int qkv_tensor_same_shape(const qkv_tensor *a, const qkv_tensor *b)
{
    if (a == NULL || b == NULL || a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

void qkv_shape_str(const qkv_tensor *t, char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return;
    buf[0] = '\0';
    if (qkv_tensor_is_nil(t)) {
        snprintf(buf, len, "nil");
        return;
    }
    qkv_dims_str(t->ndim, t->shape, buf, len);
}

void qkv_tensor_print(const qkv_tensor *t, FILE *out, size_t max_values)
{
    if (out == NULL) /* stdio would crash on it */
        return;
    char shape[64];
    qkv_shape_str(t, shape, sizeof shape);
    if (qkv_tensor_is_nil(t)) {
        fputs("tensor nil\n", out);
        return;
    }
    fprintf(out, "tensor%s", shape);
    size_t n = t->numel;
    size_t row = t->ndim > 0 ? (size_t)t->shape[t->ndim - 1] : 1;
    if (max_values != 0 && n > max_values)
        n = max_values;
    for (size_t i = 0; i < n; i++) {
        if (i % row == 0)
            fputs("\n ", out);
        fprintf(out, " %.4f", (double)t->data[i]);
    }
    if (n < t->numel)
        fprintf(out, " ... (%zu more)", t->numel - n);
    fputc('\n', out);
}
