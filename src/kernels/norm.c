/*
 * norm.c - layer norm and RMS norm over rows, forward and the fused
 * backward. The row statistics accumulate in double, in eight interleaved
 * partial sums (a fixed order, so every kernel set gives the same bits).
 */
#include <math.h>

#include "kernels/kernels.h"

/* Σ (x[j] - m)² (or Σ x[j] when square = 0, m ignored) in double, eight
 * partial sums combined in a fixed tree. */
static double row_sum(const qkv_real *x, size_t d, double m, int square)
{
    double s[8] = {0};
    size_t j = 0;
    for (; j + 8 <= d; j += 8)
        for (int l = 0; l < 8; l++) {
            double v = (double)x[j + l] - m;
            s[l] += square ? v * v : (double)x[j + l];
        }
    for (; j < d; j++) {
        double v = (double)x[j] - m;
        s[j % 8] += square ? v * v : (double)x[j];
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void qkv_norm_rows(qkv_real *y, qkv_real *mean, qkv_real *rstd, const qkv_real *x,
                   const qkv_real *gamma, const qkv_real *beta, size_t rows, size_t d, double eps,
                   int center)
{
    for (size_t r = 0; r < rows; r++, x += d, y += d) {
        const double mu = center ? row_sum(x, d, 0, 0) / (double)d : 0;
        const double var = row_sum(x, d, mu, 1) / (double)d;
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

void qkv_norm_rows_backward(qkv_real *dx, qkv_real *dgamma, qkv_real *dbeta, const qkv_real *dy,
                            const qkv_real *x, const qkv_real *mean, const qkv_real *rstd,
                            const qkv_real *gamma, size_t rows, size_t d, int center)
{
    for (size_t r = 0; r < rows; r++, x += d, dy += d) {
        const qkv_real m = mean[r], s = rstd[r];
        double sg[8] = {0}, sgx[8] = {0};
        for (size_t j = 0; j < d; j++) {
            const qkv_real xhat = (x[j] - m) * s, g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
            sg[j % 8] += g;
            sgx[j % 8] += (double)g * xhat;
            if (dgamma != NULL)
                dgamma[j] += dy[j] * xhat;
            if (dbeta != NULL)
                dbeta[j] += dy[j];
        }
        const double mg =
            center ? (((sg[0] + sg[1]) + (sg[2] + sg[3])) + ((sg[4] + sg[5]) + (sg[6] + sg[7]))) /
                         (double)d
                   : 0;
        const double mgx =
            (((sgx[0] + sgx[1]) + (sgx[2] + sgx[3])) + ((sgx[4] + sgx[5]) + (sgx[6] + sgx[7]))) /
            (double)d;
        const qkv_real fm = (qkv_real)mg, fx = (qkv_real)mgx;
        for (size_t j = 0; dx != NULL && j < d; j++) {
            const qkv_real xhat = (x[j] - m) * s, g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
            dx[r * d + j] += s * (g - fm - xhat * fx);
        }
    }
}
