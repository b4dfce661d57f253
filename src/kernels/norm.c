/*
 * norm.c - layer norm and RMS norm over rows, forward and the fused
 * backward: the entry points, which call the set in use, and the portable
 * versions, which define the order of every sum for all the sets.
 *
 * The order. Each row sum accumulates in qkv_real (float in the float32
 * build), in K partial sums: entry j of the row goes to partial j mod K,
 * added in ascending j, each partial starting at +0. The K partials are
 * then combined by halving: for h = K/2, K/4, ..., 1, s[l] = s[l] + s[l + h]
 * for l < h; the sum is s[0]. K is 32 for the forward's two sums (the mean,
 * then the squared deviations) and 16 for the backward's two (mean(g) and
 * mean(g·x̂)), which share a loop. The vector sets keep the partials in the
 * lanes of one or more accumulators, so their adds are independent chains,
 * and give the portable set's bits exactly: every operation is the same
 * float operation in the same order, with no fused multiply-add.
 *
 * Why float sums: a sum of d values in K partials has a relative error of
 * at most about (d/K + log2 K) roundings of Σ|x| (9 for d = 128, 13 for
 * d = 1024), which is below what the float output and the float gradient
 * carry anyway, and it is what PyTorch's float layer norm does. Sums in
 * double cost two conversions and two double operations for every float
 * operation: they made the AVX-512 forward and backward each about 1.7
 * times slower at d = 128.
 */
#include <math.h>

#include "kernels/kernels.h"

#define FWD_K 32
#define BWD_K 16

/* s[0] after combining the k partials s[0..k) by halving (k a power of
 * two); s is overwritten. */
static qkv_real halve(qkv_real *s, int k)
{
    for (int h = k / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++)
            s[l] += s[l + h];
    return s[0];
}

/* Σ (x[j] - m)² (sq = 1) or Σ x[j] (sq = 0) in FWD_K partials. */
static qkv_real row_sum(const qkv_real *x, size_t d, qkv_real m, int sq)
{
    qkv_real s[FWD_K] = {0};
    size_t j = 0;
    for (; j + FWD_K <= d; j += FWD_K) /* whole blocks, which compilers vectorise */
        for (int l = 0; l < FWD_K; l++) {
            const qkv_real v = sq ? x[j + l] - m : x[j + l];
            s[l] += sq ? v * v : v;
        }
    for (; j < d; j++) {
        const qkv_real v = sq ? x[j] - m : x[j];
        s[j % FWD_K] += sq ? v * v : v;
    }
    return halve(s, FWD_K);
}

void qkv_portable_norm(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                       const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d,
                       double eps, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, y += d) {
        const qkv_real m = center ? row_sum(x, d, 0, 0) / (qkv_real)d : 0;
        const qkv_real var = row_sum(x, d, m, 1) / (qkv_real)d;
        const qkv_real s = (qkv_real)(1 / sqrt((double)var + eps));
        mean[r] = m;
        rstd[r] = s;
        for (size_t j = 0; j < d; j++) {
            qkv_real v = (x[j] - m) * s;
            if (gamma != NULL)
                v *= gamma[j];
            y[j] = beta != NULL ? v + beta[j] : v;
        }
    }
}

void qkv_portable_norm_backward(qkv_real *dx, qkv_real *dgamma, qkv_real *dbeta, const qkv_real *dy,
                                const qkv_real *x, const qkv_real *mean, const qkv_real *rstd,
                                const qkv_real *gamma, size_t rows, size_t d, int center, int store)
{
    const qkv_real zero = 0;
    for (size_t r = 0; r < rows; r++, x += d, dy += d) {
        const qkv_real m = mean[r], s = rstd[r];
        qkv_real sg[BWD_K] = {0}, sgx[BWD_K] = {0};
        for (size_t j = 0; j < d; j++) {
            const qkv_real xhat = (x[j] - m) * s, g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
            sg[j % BWD_K] += g;
            sgx[j % BWD_K] += g * xhat;
            if (dgamma != NULL)
                dgamma[j] += dy[j] * xhat;
            if (dbeta != NULL)
                dbeta[j] += dy[j];
        }
        const qkv_real fm = center ? halve(sg, BWD_K) / (qkv_real)d : 0;
        const qkv_real fx = halve(sgx, BWD_K) / (qkv_real)d;
        for (size_t j = 0; dx != NULL && j < d; j++) {
            const qkv_real xhat = (x[j] - m) * s, g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
            const qkv_real term = s * (g - fm - xhat * fx);
            dx[r * d + j] = (store ? zero : dx[r * d + j]) + term;
        }
    }
}

void qkv_norm_rows(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                   const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d, double eps,
                   int center)
{
    qkv_kernels()->norm(y, mean, rstd, x, gamma, beta, rows, d, eps, center);
}

void qkv_norm_rows_backward(qkv_real *dx, qkv_real *dgamma, qkv_real *dbeta, const qkv_real *dy,
                            const qkv_real *x, const qkv_real *mean, const qkv_real *rstd,
                            const qkv_real *gamma, size_t rows, size_t d, int center, int store)
{
    qkv_kernels()->norm_backward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, d, center,
                                 store);
}
