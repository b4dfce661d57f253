/*
 * norm.c - layer norm and RMS norm over rows, forward and the fused
 * backward: the entry points, which call the set in use, and the portable
 * versions, which define the order of every sum for all the sets.
 *
 * The order. Each row sum accumulates in double, in K partial sums: entry
 * j of the row goes to partial j mod K, added in ascending j, each partial
 * starting at +0. The K partials are then combined by halving: for h = K/2,
 * K/4, ..., 1, s[l] = s[l] + s[l + h] for l < h; the sum is s[0]. K is 32
 * for the forward's two sums (the mean, then the squared deviations) and 16
 * for the backward's two (mean(g) and mean(g·x̂)), which share a loop. The
 * vector sets keep the partials in lanes of several accumulators, so their
 * adds are independent chains, and give the portable set's bits exactly:
 * the element-wise float arithmetic is the same operations in the same
 * order, with no fused multiply-add.
 */
#include <math.h>

#include "kernels/kernels.h"

#define FWD_K 32
#define BWD_K 16

/* s[0] after combining the k partials s[0..k) by halving (k a power of
 * two); s is overwritten. */
static double halve(double *s, int k)
{
    for (int h = k / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++)
            s[l] += s[l + h];
    return s[0];
}

/* Σ x[j] in FWD_K partials. */
static double row_sum(const qkv_real *x, size_t d)
{
    double s[FWD_K] = {0};
    size_t j = 0;
    for (; j + FWD_K <= d; j += FWD_K)
        for (int l = 0; l < FWD_K; l++)
            s[l] += (double)x[j + l];
    for (; j < d; j++)
        s[j % FWD_K] += (double)x[j];
    return halve(s, FWD_K);
}

/* Σ (x[j] - m)² in FWD_K partials, the difference and square in double. */
static double row_sum_sq(const qkv_real *x, size_t d, double m)
{
    double s[FWD_K] = {0};
    size_t j = 0;
    for (; j + FWD_K <= d; j += FWD_K)
        for (int l = 0; l < FWD_K; l++) {
            double v = (double)x[j + l] - m;
            s[l] += v * v;
        }
    for (; j < d; j++) {
        double v = (double)x[j] - m;
        s[j % FWD_K] += v * v;
    }
    return halve(s, FWD_K);
}

void qkv_portable_norm(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                       const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d,
                       double eps, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, y += d) {
        const double mu = center ? row_sum(x, d) / (double)d : 0;
        const double var = row_sum_sq(x, d, mu) / (double)d;
        const double rs = 1 / sqrt(var + eps);
        mean[r] = (qkv_real)mu;
        rstd[r] = (qkv_real)rs;
        const qkv_real m = (qkv_real)mu, s = (qkv_real)rs;
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
                                const qkv_real *gamma, size_t rows, size_t d, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, dy += d) {
        const qkv_real m = mean[r], s = rstd[r];
        double sg[BWD_K] = {0}, sgx[BWD_K] = {0};
        for (size_t j = 0; j < d; j++) {
            const qkv_real xhat = (x[j] - m) * s, g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
            sg[j % BWD_K] += g;
            sgx[j % BWD_K] += (double)g * xhat;
            if (dgamma != NULL)
                dgamma[j] += dy[j] * xhat;
            if (dbeta != NULL)
                dbeta[j] += dy[j];
        }
        const double mg = center ? halve(sg, BWD_K) / (double)d : 0;
        const double mgx = halve(sgx, BWD_K) / (double)d;
        const qkv_real fm = (qkv_real)mg, fx = (qkv_real)mgx;
        for (size_t j = 0; dx != NULL && j < d; j++) {
            const qkv_real xhat = (x[j] - m) * s, g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
            dx[r * d + j] += s * (g - fm - xhat * fx);
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
                            const qkv_real *gamma, size_t rows, size_t d, int center)
{
    qkv_kernels()->norm_backward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, d, center);
}
