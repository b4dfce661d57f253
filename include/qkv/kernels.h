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

/* The name of the implementation in use. */
const char *qkv_kernels_name(void);

/* Row-wise softmax of x (rows×n) into y. A row that is entirely -inf gives
 * zeros. x and y may alias. */
void qkv_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

/* e[j] = e^(x[j] - m) for the row maximum m, which goes to *max; returns
 * Σ e[j], accumulated in double. A row of -inf gives zeros and returns 0. */
double qkv_exp_shifted(qkv_real *e, const qkv_real *x, size_t n, double *max);

/* Softmax backward, row-wise: dx += y ⊙ (dy - Σ_j dy_j·y_j). */
void qkv_softmax_backward_rows(qkv_real *dx, const qkv_real *y,
                               const qkv_real *dy, size_t rows, size_t n);

/* Row-wise log-softmax. A row that is entirely -inf gives -inf. */
void qkv_log_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n);

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
