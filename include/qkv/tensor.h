/*
 * tensor.h - the n-dimensional array that every qkv module passes around.
 *
 * A tensor is row-major scalar data with up to QKV_MAX_DIMS dimensions and an
 * optional gradient buffer of the same size. Tensors made here live on the
 * heap and are owned by the caller (parameters, constants, inputs). Tensors
 * produced by ops live in a tape's arena instead (see tape.h).
 */
#ifndef QKV_TENSOR_H
#define QKV_TENSOR_H

#include <stdio.h>

#include "qkv/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor flags. */
#define QKV_TENSOR_NIL 1u       /* the harmless result of a failed op */
#define QKV_TENSOR_HEAP 2u      /* made by qkv_tensor_new: free with qkv_tensor_free */
#define QKV_TENSOR_TAPE 4u      /* lives in a tape's arena until the tape is reset */
#define QKV_TENSOR_LAZY_GRAD 8u /* a tape gradient, zero-filled when backward first needs it */

typedef struct qkv_tensor {
    qkv_real *data;          /* (numel) row-major values */
    qkv_real *grad;          /* (numel) dL/d(data), or NULL when untracked */
    size_t numel;            /* product of shape[0..ndim-1]; 1 for a scalar */
    int ndim;                /* 0 (scalar) .. QKV_MAX_DIMS */
    int shape[QKV_MAX_DIMS]; /* unused trailing entries are 1 */
    unsigned flags;          /* QKV_TENSOR_* */
} qkv_tensor;

/* The shared nil tensor: ndim 0, numel 0, no data. Ops return it after an
 * error; it is safe to pass anywhere and never written to. */
qkv_tensor *qkv_nil(void);

/* Nonzero if t is NULL or nil. */
int qkv_tensor_is_nil(const qkv_tensor *t);

/* qkv_tensor_new(int ndim, const int *shape, int with_grad, qkv_error *err)
 * allocates a zero-filled heap tensor of the given shape. When with_grad is
 * nonzero a zeroed gradient buffer is allocated too (a trainable parameter).
 * ndim may be 0 (a scalar; shape may then be NULL). Returns the nil tensor, with the reason in err,
 * for an invalid shape (a dimension < 1 or ndim out of range: QKV_ERR_ARG;
 * a size overflow: QKV_ERR_NOMEM), when memory runs out (QKV_ERR_NOMEM), or
 * when the program was compiled for another scalar type than the library
 * (QKV_ERR_ABI). The caller owns a non-nil result and frees it with
 * qkv_tensor_free. A macro: it passes the program's QKV_ABI along. */
qkv_tensor *qkv_tensor_new_abi(unsigned abi, int ndim, const int *shape, int with_grad,
                               qkv_error *err);
#define qkv_tensor_new(...) qkv_tensor_new_abi(QKV_ABI, __VA_ARGS__)

/* Frees a tensor made by qkv_tensor_new. Accepts NULL and nil; tape tensors
 * and a parameter list's are ignored (the tape or the list owns them). */
void qkv_tensor_free(qkv_tensor *t);

/* Sets every gradient entry to zero. No-op without a gradient buffer. */
void qkv_tensor_zero_grad(qkv_tensor *t);

/* Copies n values from src into t->data. Returns QKV_ERR_SHAPE if n differs
 * from t->numel (and for a NULL or nil t), QKV_ERR_ARG for a NULL src;
 * t is then unchanged. */
qkv_status qkv_tensor_set(qkv_tensor *t, const qkv_real *src, size_t n);

/* Nonzero if a and b have the same ndim and shape. */
int qkv_tensor_same_shape(const qkv_tensor *a, const qkv_tensor *b);

/* Writes the shape as "[2,3,4]" into buf (always NUL-terminated; nothing
 * when buf is NULL or len is 0). */
void qkv_shape_str(const qkv_tensor *t, char *buf, size_t len);

/* Prints shape and values (at most max_values of them, 0 = all) with
 * "%.4f" formatting. Prints nothing when out is NULL. */
void qkv_tensor_print(const qkv_tensor *t, FILE *out, size_t max_values);

/* Computes the element count of a shape into *numel. Returns QKV_ERR_ARG for
 * a dimension < 1 or ndim out of range, QKV_ERR_NOMEM on size overflow. */
qkv_status qkv_shape_numel(int ndim, const int *shape, size_t *numel);

#ifdef __cplusplus
}
#endif
#endif
