/*
 * vec.c - the row and vector kernels that call into the set in use: softmax
 * and its backward, log-softmax, sums in double, rows gathered and
 * scatter-added, zeroing, the Adam update, and element-wise maths.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

/* Eight running maxima, which the compiler keeps in one vector register
 * (a maximum is exact in any order; only the sign of a zero maximum may
 * differ, and x - max does not see it). */
double qkv_row_max(const qkv_real *x, size_t n)
{
    qkv_real acc[8];
    for (int t = 0; t < 8; t++)
        acc[t] = -INFINITY;
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int t = 0; t < 8; t++)
            acc[t] = x[j + t] > acc[t] ? x[j + t] : acc[t];
    for (; j < n; j++)
        acc[0] = x[j] > acc[0] ? x[j] : acc[0];
    double mx = acc[0];
    for (int t = 1; t < 8; t++)
        if (acc[t] > mx)
            mx = acc[t];
    return mx;
}

double qkv_exp_shifted(qkv_real *e, const qkv_real *x, size_t n, double *max)
{
    *max = qkv_row_max(x, n);
    if (*max == -INFINITY) {
        memset(e, 0, n * sizeof *e);
        return 0;
    }
    return qkv_kernels()->exps(n, x, (qkv_real)*max, e);
}

void qkv_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n)
{
    const qkv_kernel_set *k = qkv_kernels();
    qkv_softmax16_fn short_row = k->softmax16;
    if (k->softmax_rows != NULL && (short_row == NULL || n > 16)) {
        k->softmax_rows(y, x, rows, n); /* the same bits as the loop below */
        return;
    }
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        if (short_row != NULL && n <= 16) {
            short_row(n, x, y);
            continue;
        }
        double mx, sum = qkv_exp_shifted(y, x, n, &mx);
        if (sum == 0)
            continue; /* fully masked: y is already all zeros */
        qkv_real inv = (qkv_real)(1 / sum);
        for (size_t j = 0; j < n; j++)
            y[j] *= inv;
    }
}

void qkv_softmax_backward_rows(qkv_real *dx, const qkv_real *y, const qkv_real *dy, size_t rows,
                               size_t n)
{
    const qkv_softmax_bwd_fn f = qkv_kernels()->softmax_bwd;
    if (f != NULL) {
        f(dx, y, dy, rows, n); /* the same bits as the loop below */
        return;
    }
    for (size_t r = 0; r < rows; r++, dx += n, y += n, dy += n) {
        double dot = 0;
        for (size_t j = 0; j < n; j++)
            dot += (double)dy[j] * y[j];
        for (size_t j = 0; j < n; j++)
            dx[j] += (qkv_real)(y[j] * ((double)dy[j] - dot));
    }
}

void qkv_gather_rows(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d)
{
    qkv_kernels()->gather(dst, table, ids, n, d);
}

void qkv_scatter_add_rows(qkv_real *table, const qkv_real *src, const int *ids, size_t n, size_t d)
{
    qkv_kernels()->scatter_add(table, src, ids, n, d);
}

void qkv_scatter_add_scaled(qkv_real *table, const int *ids, const qkv_real *coef, size_t n,
                            const qkv_real *x, size_t d, int skip_zero)
{
    const qkv_scatter_scaled_fn f = qkv_kernels()->scatter_add_scaled;
    if (f != NULL) {
        f(table, ids, coef, n, x, d, skip_zero); /* the same bits as the loop below */
        return;
    }
    for (size_t j = 0; j < n; j++) {
        if (skip_zero && coef[j] == 0)
            continue;
        qkv_real *y = table + (size_t)ids[j] * d;
        for (size_t p = 0; p < d; p++)
            y[p] += coef[j] * x[p];
    }
}

void qkv_zero(qkv_real *x, size_t n)
{
    qkv_kernels()->zero(x, n);
}

void qkv_log_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        double mx, sum = qkv_exp_shifted(y, x, n, &mx); /* y as scratch */
        /* a fully masked row (sum 0) gives x - inf = -inf everywhere; a
         * NaN or +inf in a live row makes the sum NaN, and so every y, as
         * log(softmax) is then. Otherwise (x - max) - log Σ, as PyTorch
         * computes it: x - (max + log Σ) would lose log Σ below max's last
         * bit, all of it far from 0 */
        if (sum == 0) {
            for (size_t j = 0; j < n; j++)
                y[j] = (qkv_real)((double)x[j] - INFINITY);
            continue;
        }
        const double ls = log(sum);
        for (size_t j = 0; j < n; j++)
            y[j] = (qkv_real)(((double)x[j] - mx) - ls);
    }
}

int qkv_adam_update(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                    const qkv_adam_coef *c)
{
    return qkv_kernels()->adam(w, grad, m, v, n, c);
}

double qkv_sum_squares(const qkv_real *x, size_t n)
{
    double s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += (double)x[i + l] * x[i + l];
    for (; i < n; i++)
        s[i % 8] += (double)x[i] * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double qkv_sum_real(const qkv_real *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

void qkv_vexp(qkv_real *y, const qkv_real *x, size_t n)
{
    qkv_kernels()->exp(y, x, n);
}

void qkv_vlog(qkv_real *y, const qkv_real *x, size_t n)
{
    qkv_kernels()->log(y, x, n);
}

void qkv_vtanh(qkv_real *y, const qkv_real *x, size_t n)
{
    qkv_kernels()->tanh(y, x, n);
}

void qkv_vsigmoid(qkv_real *y, const qkv_real *x, size_t n)
{
    qkv_kernels()->sigmoid(y, x, n);
}

void qkv_vgelu(qkv_real *y, const qkv_real *x, size_t n)
{
    qkv_kernels()->gelu(y, x, n);
}

void qkv_vgelu_backward(qkv_real *dx, const qkv_real *x, const qkv_real *dy, size_t n, int store)
{
    qkv_kernels()->gelu_backward(dx, x, dy, n, store);
}
