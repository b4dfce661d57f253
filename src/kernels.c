/*
 * kernels.c - portable loops for matmul, softmax and the attention metrics.
 *
 * The loops are ordered so the innermost one walks contiguous memory and
 * the compiler can vectorise it.
 */
#include <math.h>
#include <string.h>

#include "qkv/kernels.h"

/* C[i,:] += A[i,p]·B[p,:] */
static void gemm_nn(int m, int n, int k, const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    for (int i = 0; i < m; i++) {
        qkv_real *c = C + (size_t)i * n;
        for (int p = 0; p < k; p++) {
            const qkv_real a = A[(size_t)i * k + p];
            const qkv_real *b = B + (size_t)p * n;
            for (int j = 0; j < n; j++)
                c[j] += a * b[j];
        }
    }
}

/* C[i,j] += Σ_p A[i,p]·B[j,p] */
static void gemm_nt(int m, int n, int k, const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    for (int i = 0; i < m; i++) {
        const qkv_real *a = A + (size_t)i * k;
        for (int j = 0; j < n; j++) {
            const qkv_real *b = B + (size_t)j * k;
            qkv_real s = 0;
            for (int p = 0; p < k; p++)
                s += a[p] * b[p];
            C[(size_t)i * n + j] += s;
        }
    }
}

/* C[i,:] += A[p,i]·B[p,:] */
static void gemm_tn(int m, int n, int k, const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    for (int p = 0; p < k; p++) {
        const qkv_real *b = B + (size_t)p * n;
        for (int i = 0; i < m; i++) {
            const qkv_real a = A[(size_t)p * m + i];
            qkv_real *c = C + (size_t)i * n;
            for (int j = 0; j < n; j++)
                c[j] += a * b[j];
        }
    }
}

/* C[i,j] += Σ_p A[p,i]·B[j,p] */
static void gemm_tt(int m, int n, int k, const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            qkv_real s = 0;
            for (int p = 0; p < k; p++)
                s += A[(size_t)p * m + i] * B[(size_t)j * k + p];
            C[(size_t)i * n + j] += s;
        }
}

void qkv_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A,
              const qkv_real *B, qkv_real *C, int accumulate)
{
    if (!accumulate)
        memset(C, 0, (size_t)m * n * sizeof *C);
    if (!ta && !tb)
        gemm_nn(m, n, k, A, B, C);
    else if (!ta)
        gemm_nt(m, n, k, A, B, C);
    else if (!tb)
        gemm_tn(m, n, k, A, B, C);
    else
        gemm_tt(m, n, k, A, B, C);
}

static double row_max(const qkv_real *x, size_t n)
{
    double mx = -INFINITY;
    for (size_t j = 0; j < n; j++)
        if (x[j] > mx)
            mx = x[j];
    return mx;
}

void qkv_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        double mx = row_max(x, n), sum = 0;
        if (mx == -INFINITY) {
            memset(y, 0, n * sizeof *y);
            continue;
        }
        for (size_t j = 0; j < n; j++) {
            double e = exp((double)x[j] - mx);
            y[j] = (qkv_real)e;
            sum += e;
        }
        for (size_t j = 0; j < n; j++)
            y[j] = (qkv_real)((double)y[j] / sum);
    }
}

void qkv_softmax_backward_rows(qkv_real *dx, const qkv_real *y,
                               const qkv_real *dy, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, dx += n, y += n, dy += n) {
        double dot = 0;
        for (size_t j = 0; j < n; j++)
            dot += (double)dy[j] * y[j];
        for (size_t j = 0; j < n; j++)
            dx[j] += (qkv_real)(y[j] * ((double)dy[j] - dot));
    }
}

void qkv_log_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        double mx = row_max(x, n), sum = 0;
        if (mx == -INFINITY) {
            for (size_t j = 0; j < n; j++)
                y[j] = -INFINITY;
            continue;
        }
        for (size_t j = 0; j < n; j++)
            sum += exp((double)x[j] - mx);
        double lse = mx + log(sum);
        for (size_t j = 0; j < n; j++)
            y[j] = (qkv_real)((double)x[j] - lse);
    }
}

double qkv_sum_real(const qkv_real *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

double qkv_entropy(const qkv_real *p, size_t n)
{
    double h = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] > 0)
            h -= (double)p[i] * log((double)p[i]);
    return h;
}

double qkv_softmax_jacobian_norm(const qkv_real *a, size_t n)
{
    /* ||J||² = Σ_i a_i²(1-a_i)² + Σ_{i≠j} a_i²a_j²
     *        = Σ_i a_i²(1-a_i)² + (Σ_i a_i²)² - Σ_i a_i⁴ */
    double diag = 0, sq = 0, quad = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], x2 = x * x;
        diag += x2 * (1 - x) * (1 - x);
        sq += x2;
        quad += x2 * x2;
    }
    double f = diag + sq * sq - quad;
    return sqrt(f > 0 ? f : 0);
}

uint32_t qkv_crc32(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}
