/*
 * kernels.h - the hot loops, with no knowledge of tapes or tensors.
 *
 * Plain arrays in, plain arrays out, so they can be tested and benchmarked on
 * their own. Sums that decide a probability or a loss accumulate in double.
 */
#ifndef QKV_KERNELS_H
#define QKV_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "qkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C (m×n) = op(A)·op(B), or C += op(A)·op(B) when accumulate is nonzero.
 * op(A) is m×k: A is stored m×k (ta = 0) or k×m (ta = 1). op(B) is k×n: B is
 * stored k×n (tb = 0) or n×k (tb = 1). All row-major and contiguous. */
void qkv_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A,
              const qkv_real *B, qkv_real *C, int accumulate);

/* Chooses the instruction set of the matmul and softmax kernels: "auto"
 * (the fastest this CPU supports; the default unless the environment
 * variable QKV_KERNELS names another set), "portable" (plain C and
 * libm, always available), "avx2" (AVX2+FMA) or "avx512" (AVX-512F); the
 * last two exist only in float32 builds on x86. Results differ between them
 * only by float rounding (summation order; softmax's e^x within 2 ulp). Returns 0, or -1 and changes nothing when
 * the CPU or the build lacks it. Not thread-safe: call it before starting
 * threads. */
int qkv_kernels_use(const char *name);

/* Threads for batched work (the items of the attention ops): n from
 * 1 (the default, unless the environment variable QKV_THREADS says
 * otherwise) to 64. Work is split only where each thread gets enough of
 * it, so tiny steps stay on one thread. Every result is the same, bit for
 * bit, for any thread count: each thread does whole, independent pieces,
 * and the pieces that add into one place add in a fixed order. Returns 0,
 * or -1 for an n out of range. */
int qkv_threads_use(int n);

/* The thread count in use. */
int qkv_threads(void);

/* The name of the implementation in use. */
const char *qkv_kernels_name(void);

/* dst[i,:] = table[ids[i],:] for n rows of d reals (an embedding lookup). */
void qkv_gather_rows(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d);

/* table[ids[i],:] += src[i,:] for i = 0..n-1 in order (its backward).
 * Rows of src that are all zero are skipped: they add nothing (beyond
 * perhaps turning a -0 into +0). */
void qkv_scatter_add_rows(qkv_real *table, const qkv_real *src, const int *ids, size_t n,
                          size_t d);

/* x[0..n) = 0 with plain vector stores: for the short buffers of hot loops,
 * where a libc memset may take a path with a costly start-up. */
void qkv_zero(qkv_real *x, size_t n);

/* Row-wise softmax of x (rows×n) into y. A row that is entirely -inf gives
 * zeros. x and y may alias. */
void qkv_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

/* e[j] = e^(x[j] - m) for the row maximum m, which goes to *max; returns
 * Σ e[j], accumulated in double. A row of -inf gives zeros and returns 0. */
double qkv_exp_shifted(qkv_real *e, const qkv_real *x, size_t n, double *max);

/* Softmax backward, row-wise: dx += y ⊙ (dy - Σ_j dy_j·y_j). */
void qkv_softmax_backward_rows(qkv_real *dx, const qkv_real *y,
                               const qkv_real *dy, size_t rows, size_t n);

/* One batch item of fused attention (qkv_attention in ops.h):
 *   S = scale·Q·Kᵀ (tq×tk),  A = softmax(S + M) row-wise,  O = A·V (tq×dv)
 * for Q tq×dk, K tk×dk, V tk×dv. M is an additive mask (0 keeps, -inf
 * drops) with element (i,j) at mask[i·mask_rs + j·mask_cs], or none when
 * mask is NULL. */
typedef struct qkv_attn_shape {
    int tq, tk, dk, dv;
    const qkv_real *mask;
    size_t mask_rs, mask_cs;
    double scale;
    const int *grad_rows; /* backward only; see qkv_attention_backward */
} qkv_attn_shape;

/* Writes S (before the mask), A and O. Every kernel set computes exactly
 * what qkv_gemm, the scaling, the mask and qkv_softmax_rows would, one
 * after the other; the fused form only keeps the item in cache. */
void qkv_attention_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o);

/* Backward of one item, given A and dO (tq×dv). da (tq×tk) holds any
 * gradient already flowing into A and receives dL/dA in total; ds (tq×tk)
 * likewise for S. dq, dk and dv are accumulated into; any of them may be
 * NULL, and da and ds may both be NULL when neither dq nor dk is wanted.
 * scratch holds tq·tk reals. Rows whose gradient is zero are skipped where
 * that cannot change a result.
 *
 * With grad_rows (tq == tk; attention over looked-up tokens), dq, dk and dv
 * are instead the gradients of the tables the rows came from: the item's
 * gradient for its row i is added into table row grad_rows[i], rows in
 * order, exactly as computing the item's dq, dk, dv from zero and then
 * qkv_scatter_add_rows would; scratch then holds tq·tk + tq·dk + tk·(dk+dv)
 * reals. */
void qkv_attention_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                            const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                            qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                            qkv_real *dv, qkv_real *scratch);

/* Row-wise log-softmax. A row that is entirely -inf gives -inf. */
void qkv_log_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

/* One Adam step on n weights: with g = grad + l2·w,
 *   m = b1·m + (1-b1)·g,  v = b2·v + (1-b2)·g·g,
 *   w = keep·w - step·m / (sqrt(v)·rs + eps)
 * in double, rounded to qkv_real at the end. Every kernel set gives the
 * same bits (IEEE sqrt and division, the same order, no fused multiply-add). */
typedef struct qkv_adam_coef {
    double b1, b2, step, rs, eps, l2, keep;
} qkv_adam_coef;
void qkv_adam_update(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                     const qkv_adam_coef *c);

/* Σ x², accumulated in double in eight interleaved partial sums (a fixed
 * order, the same on every kernel set). */
double qkv_sum_squares(const qkv_real *x, size_t n);

/* Sum of n values, accumulated in double. */
double qkv_sum_real(const qkv_real *x, size_t n);

/* Shannon entropy -Σ p log p (natural log) of a probability row; terms with
 * p = 0 contribute 0. */
double qkv_entropy(const qkv_real *p, size_t n);

/* Frobenius norm of the softmax Jacobian J = diag(a) - a·aᵀ for the
 * probability row a: sqrt(Σ_i a_i²(1-a_i)² + Σ_{i≠j} a_i²a_j²). */
double qkv_softmax_jacobian_norm(const qkv_real *a, size_t n);

/* CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes, continuing from crc
 * (start with 0). */
uint32_t qkv_crc32(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
