/*
 * portable.c - the portable kernel set: plain C and libm, always built and
 * always tested, and the reference the vector sets are held to. The loops
 * are written so that a compiler can vectorise them for baseline x86-64.
 */
#include <math.h>

#include "kernels/kernels.h"

/* Portable: C[i, j0..j0+w) accumulated in a local array, a strip of
 * QKV_DIRECT_NR columns at a time (for a B stored n×k, the strip's
 * columns of Bᵀ copied first). */
static void direct_c(int ta, int tb, int m, int n, int k, const qkv_real *A, const qkv_real *B,
                     qkv_real *C, int store)
{
    if (tb && qkv_gemm_takes_dots(n, k)) { /* not the chain order: qkv_gemm passes no store */
        qkv_gemm_dots(ta, m, n, k, A, B, C, store);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += QKV_DIRECT_NR) {
        int w = n - j0 < QKV_DIRECT_NR ? n - j0 : QKV_DIRECT_NR;
        const qkv_real *Bk = B + j0; /* op(B)'s strip, row stride ldb */
        size_t ldb = (size_t)n;
        if (tb) {
            qkv_gemm_bt_cols(k, j0, w, B, qkv_direct_scratch);
            Bk = qkv_direct_scratch;
            ldb = (size_t)w;
        }
        for (int i = 0; i < m; i++) {
            qkv_real acc[QKV_DIRECT_NR];
            qkv_real *c = C + (size_t)i * n + j0;
            for (int j = 0; j < w; j++)
                acc[j] = store ? 0 : c[j];
            for (int p = 0; p < k; p++) {
                const qkv_real a = ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p];
                const qkv_real *b = Bk + (size_t)p * ldb;
                for (int j = 0; j < w; j++)
                    acc[j] += a * b[j];
            }
            for (int j = 0; j < w; j++)
                c[j] = acc[j];
        }
    }
}

/* Portable micro-kernel: a 4×8 tile, small enough for the 16 SSE registers
 * of baseline x86-64, written so compilers can vectorise it. */
static void ukernel_c(int kc, const qkv_real *ap, const qkv_real *bp, qkv_real *c, int ldc, int mr,
                      int nr)
{
    qkv_real acc[4 * 8] = {0};
    for (int p = 0; p < kc; p++, ap += 4, bp += 8)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++)
                acc[i * 8 + j] += ap[i] * bp[j];
    qkv_gemm_add_tile(acc, 8, c, ldc, mr, nr);
}

/* libm's exp in double: the reference the vector versions are held to. */
static double exps_c(size_t n, const qkv_real *x, qkv_real mx, qkv_real *y)
{
    double sum = 0;
    for (size_t j = 0; j < n; j++) {
        double e = exp((double)x[j] - mx);
        y[j] = (qkv_real)e;
        sum += e;
    }
    return sum;
}

/* Rows in fixed blocks of 8: plain vector moves, where a memcpy call or a
 * loop of unknown length costs more than these short rows. */
void qkv_portable_gather(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d)
{
    for (size_t i = 0; i < n; i++, dst += d) {
        const qkv_real *src = table + (size_t)ids[i] * d;
        size_t j = 0;
        for (; j + 8 <= d; j += 8)
            for (int l = 0; l < 8; l++)
                dst[j + l] = src[j + l];
        for (; j < d; j++)
            dst[j] = src[j];
    }
}

void qkv_portable_scatter_add(qkv_real *table, const qkv_real *src, const int *ids, size_t n,
                              size_t d)
{
    for (size_t i = 0; i < n; i++, src += d) {
        qkv_real *dst = table + (size_t)ids[i] * d;
        size_t j = 0;
        while (j < d && src[j] == 0)
            j++;
        if (j == d)
            continue; /* a zero row */
        j = 0;
        for (; j + 8 <= d; j += 8)
            for (int l = 0; l < 8; l++)
                dst[j + l] += src[j + l];
        for (; j < d; j++)
            dst[j] += src[j];
    }
}

int qkv_portable_adam(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                      const qkv_adam_coef *c)
{
    int bad = 0; /* a weight or a v that is not finite */
    for (size_t j = 0; j < n; j++) {
        double wj = w[j], g = grad[j] + c->l2 * wj;
        m[j] = c->b1 * m[j] + (1 - c->b1) * g;
        v[j] = c->b2 * v[j] + (1 - c->b2) * g * g;
        const qkv_real next =
            (qkv_real)(c->keep * wj - c->step * m[j] / (sqrt(v[j]) * c->rs + c->eps));
        w[j] = next;
        bad |= !isfinite(next) | !isfinite(v[j]);
    }
    return bad;
}

void qkv_portable_zero(qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0;
}

/* ---- element-wise maths: libm in double, rounded once ------------------- */

void qkv_portable_exp(qkv_real *y, const qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)exp((double)x[i]);
}

void qkv_portable_log(qkv_real *y, const qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)log((double)x[i]);
}

void qkv_portable_tanh(qkv_real *y, const qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)tanh((double)x[i]);
}

void qkv_portable_sigmoid(qkv_real *y, const qkv_real *x, size_t n)
{
    /* 1/(1 + e^-x): e^-x overflows to inf for x < -709 and gives 0, and
     * underflows to 0 for large x and gives 1, with no NaN in between */
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)(1 / (1 + exp(-(double)x[i])));
}

/* GELU in its sigmoid form: with v = 2√(2/π)·(x + 0.044715·x³),
 * (1 + tanh(v/2))/2 = σ(v) and (1 - tanh²(v/2))/4 = σ(v)·σ(-v), which keep
 * their precision where 1 + tanh(v/2) would cancel (x below about -5). */
#define GELU_K2 1.5957691216057308 /* 2√(2/π) */
#define GELU_C 0.044715
#define GELU_BIG 1e30 /* beyond this, x³ could overflow a double: saturated */

void qkv_portable_gelu(qkv_real *y, const qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double u = x[i];
        if (fabs(u) > GELU_BIG) /* x·σ(v) tends to -0 from below, as the vector sets give */
            y[i] = (qkv_real)(u > 0 ? u : -0.0);
        else /* x·σ(v); e^-v may overflow to inf, which gives the limit ±0 */
            y[i] = (qkv_real)(u / (1 + exp(-(u * GELU_K2 * (1 + GELU_C * u * u)))));
    }
}

void qkv_portable_gelu_backward(qkv_real *dx, const qkv_real *x, const qkv_real *dy, size_t n,
                                int store)
{
    const qkv_real zero = 0;
    /* gelu'(x) = σ(v) + x·σ(v)·σ(-v)·K2·(1 + 3c·x²), σ(±v) from e^-|v| */
    for (size_t i = 0; i < n; i++) {
        double u = x[i], g;
        if (fabs(u) > GELU_BIG) {
            g = u > 0 ? 1 : 0;
        } else {
            double v = u * GELU_K2 * (1 + GELU_C * u * u), e = exp(-fabs(v));
            double big = 1 / (1 + e), small = e / (1 + e); /* σ(|v|), σ(-|v|) */
            double s = v >= 0 ? big : small, sc = v >= 0 ? small : big;
            g = s + u * s * sc * GELU_K2 * (1 + 3 * GELU_C * u * u);
        }
        dx[i] = (store ? zero : dx[i]) + (qkv_real)(dy[i] * g);
    }
}

const qkv_kernel_set qkv_kernels_portable = {
    .name = "portable",
    .mr = 4,
    .nr = 8,
    .ukernel = ukernel_c,
    .direct = direct_c,
    .exps = exps_c,
    .gather = qkv_portable_gather,
    .scatter_add = qkv_portable_scatter_add,
    .adam = qkv_portable_adam,
    .zero = qkv_portable_zero,
    .exp = qkv_portable_exp,
    .log = qkv_portable_log,
    .tanh = qkv_portable_tanh,
    .sigmoid = qkv_portable_sigmoid,
    .gelu = qkv_portable_gelu,
    .gelu_backward = qkv_portable_gelu_backward,
    .norm = qkv_portable_norm,
    .norm_backward = qkv_portable_norm_backward,
};
