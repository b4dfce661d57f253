/*
 * kernels.c - portable loops for matmul, softmax and the attention metrics.
 *
 * The loops are ordered so the innermost one walks contiguous memory and
 * the compiler can vectorise it.
 */
#include <math.h>
#include <string.h>

#include "qkv/kernels.h"

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */
/*
 * Two paths. Products whose C is small or thin (the per-sentence attention
 * matmuls, 12×12 to 16×16) go straight through memory: rows of C built with
 * axpy, or entries with dot products. Larger ones use a cache-blocked GEMM
 * in the style of GotoBLAS/BLIS: B is packed into KC×NR panels, A into
 * MR×KC panels, and a register-tiled micro-kernel computes each MR×NR tile
 * of C. The primitives (micro-kernel, axpy, dot) are portable C, or
 * AVX2+FMA or AVX-512 intrinsics chosen at run time from cpuid. Every path
 * adds up the same products; only the order of the float additions differs.
 */

#define KC 256           /* depth of a packed panel */
#define MC 96            /* rows of A packed at once: a multiple of every MR */
#define NC 512           /* columns of B packed at once: a multiple of every NR */
#define BLOCKED_MIN 48   /* both sides of C at least this: the blocked path */

/* C (mr×nr corner of an ldc-wide matrix) += Ap (kc×MR panel) · Bp (kc×NR). */
typedef void (*ukernel_fn)(int kc, const qkv_real *ap, const qkv_real *bp, qkv_real *c,
                           int ldc, int mr, int nr);

/* c[0..n) += a·b[0..n) */
typedef void (*axpy_fn)(int n, qkv_real a, const qkv_real *b, qkv_real *c);
/* Σ_p a[p]·b[p] over [0,k) */
typedef qkv_real (*dot_fn)(int k, const qkv_real *a, const qkv_real *b);

typedef struct gemm_impl {
    const char *name;
    int mr, nr;
    ukernel_fn kernel; /* for the blocked path */
    axpy_fn axpy;      /* for the direct path */
    dot_fn dot;
} gemm_impl;

static _Thread_local _Alignas(64) qkv_real pack_a_buf[MC * KC];
static _Thread_local _Alignas(64) qkv_real pack_b_buf[KC * NC];

/* Adds the mr×nr corner of an MR×NR tile t (row stride NR) to C. */
static void add_tile(const qkv_real *t, int NR, qkv_real *c, int ldc, int mr, int nr)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] += t[i * NR + j];
}

/* Portable micro-kernel: a 4×16 tile, written so compilers can vectorise it. */
static void ukernel_c(int kc, const qkv_real *ap, const qkv_real *bp, qkv_real *c, int ldc,
                      int mr, int nr)
{
    qkv_real acc[4 * 16] = {0};
    for (int p = 0; p < kc; p++, ap += 4, bp += 16)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++)
                acc[i * 16 + j] += ap[i] * bp[j];
    add_tile(acc, 16, c, ldc, mr, nr);
}

static void axpy_c(int n, qkv_real a, const qkv_real *restrict b, qkv_real *restrict c)
{
    for (int j = 0; j < n; j++)
        c[j] += a * b[j];
}

/* Eight independent partial sums, so the additions need not wait on each
 * other (and a compiler may keep them in one vector register). */
static qkv_real dot_c(int k, const qkv_real *a, const qkv_real *b)
{
    qkv_real s[8] = {0};
    int p = 0;
    for (; p + 8 <= k; p += 8)
        for (int l = 0; l < 8; l++)
            s[l] += a[p + l] * b[p + l];
    for (; p < k; p++)
        s[0] += a[p] * b[p];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static const gemm_impl impl_portable = {"portable", 4, 16, ukernel_c, axpy_c, dot_c};

#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_DOUBLE) && \
    (defined(__GNUC__) || defined(__clang__))
#define QKV_HAVE_X86_KERNELS 1
#include <immintrin.h>

/* AVX2+FMA micro-kernel: a 6×16 tile in 12 ymm accumulators. */
__attribute__((target("avx2,fma"))) static void
ukernel_avx2(int kc, const float *ap, const float *bp, float *c, int ldc, int mr, int nr)
{
    __m256 acc[12];
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++, ap += 6, bp += 16) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
        for (int i = 0; i < 6; i++) {
            __m256 a = _mm256_broadcast_ss(ap + i);
            acc[2 * i] = _mm256_fmadd_ps(a, b0, acc[2 * i]);
            acc[2 * i + 1] = _mm256_fmadd_ps(a, b1, acc[2 * i + 1]);
        }
    }
    if (mr == 6 && nr == 16) {
        for (int i = 0; i < 6; i++) {
            float *row = c + (size_t)i * ldc;
            _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), acc[2 * i]));
            _mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), acc[2 * i + 1]));
        }
        return;
    }
    _Alignas(32) float t[6 * 16];
    for (int i = 0; i < 12; i++)
        _mm256_store_ps(t + 8 * i, acc[i]);
    add_tile(t, 16, c, ldc, mr, nr);
}

/* AVX-512 micro-kernel: a 12×32 tile in 24 zmm accumulators. */
__attribute__((target("avx512f"))) static void
ukernel_avx512(int kc, const float *ap, const float *bp, float *c, int ldc, int mr, int nr)
{
    __m512 acc[24];
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++, ap += 12, bp += 32) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
        for (int i = 0; i < 12; i++) {
            __m512 a = _mm512_set1_ps(ap[i]);
            acc[2 * i] = _mm512_fmadd_ps(a, b0, acc[2 * i]);
            acc[2 * i + 1] = _mm512_fmadd_ps(a, b1, acc[2 * i + 1]);
        }
    }
    if (mr == 12 && nr == 32) {
        for (int i = 0; i < 12; i++) {
            float *row = c + (size_t)i * ldc;
            _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), acc[2 * i]));
            _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), acc[2 * i + 1]));
        }
        return;
    }
    _Alignas(64) float t[12 * 32];
    for (int i = 0; i < 24; i++)
        _mm512_store_ps(t + 16 * i, acc[i]);
    add_tile(t, 32, c, ldc, mr, nr);
}

__attribute__((target("avx2,fma"))) static void
axpy_avx2(int n, float a, const float *b, float *c)
{
    __m256 va = _mm256_set1_ps(a);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(c + j, _mm256_fmadd_ps(va, _mm256_loadu_ps(b + j), _mm256_loadu_ps(c + j)));
    for (; j < n; j++)
        c[j] += a * b[j];
}

__attribute__((target("avx2,fma"))) static float dot_avx2(int k, const float *a, const float *b)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int p = 0;
    for (; p + 16 <= k; p += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 8), _mm256_loadu_ps(b + p + 8), s1);
    }
    for (; p + 8 <= k; p += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), s0);
    _Alignas(32) float t[8];
    _mm256_store_ps(t, _mm256_add_ps(s0, s1));
    float s = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    for (; p < k; p++)
        s += a[p] * b[p];
    return s;
}

__attribute__((target("avx512f"))) static void axpy_avx512(int n, float a, const float *b, float *c)
{
    __m512 va = _mm512_set1_ps(a);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(c + j, _mm512_fmadd_ps(va, _mm512_loadu_ps(b + j), _mm512_loadu_ps(c + j)));
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
        __m512 vc = _mm512_maskz_loadu_ps(m, c + j);
        _mm512_mask_storeu_ps(c + j, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, b + j), vc));
    }
}

__attribute__((target("avx512f"))) static float dot_avx512(int k, const float *a, const float *b)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int p = 0;
    for (; p + 32 <= k; p += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(b + p), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p + 16), _mm512_loadu_ps(b + p + 16), s1);
    }
    for (; p + 16 <= k; p += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(b + p), s0);
    if (p < k) {
        __mmask16 m = (__mmask16)((1u << (k - p)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + p), _mm512_maskz_loadu_ps(m, b + p), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static const gemm_impl impl_avx2 = {"avx2", 6, 16, ukernel_avx2, axpy_avx2, dot_avx2};
static const gemm_impl impl_avx512 = {"avx512", 12, 32, ukernel_avx512, axpy_avx512, dot_avx512};


static int cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#endif

/* Packs rows [0,mc) × depth [0,kc) of op(A), element (i,p) at A[i·rs + p·cs],
 * into MR-row panels, depth-major, zero-padding the last panel. */
static void pack_a(int MR, int mc, int kc, const qkv_real *A, size_t rs, size_t cs, qkv_real *ap)
{
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = mc - i0 < MR ? mc - i0 : MR;
        for (int p = 0; p < kc; p++, ap += MR) {
            const qkv_real *src = A + (size_t)i0 * rs + (size_t)p * cs;
            int r = 0;
            for (; r < mr; r++)
                ap[r] = src[(size_t)r * rs];
            for (; r < MR; r++)
                ap[r] = 0;
        }
    }
}

/* Packs depth [0,kc) × columns [0,nc) of op(B), element (p,j) at
 * B[p·rs + j·cs], into NR-column panels, depth-major, zero-padded. */
static void pack_b(int NR, int kc, int nc, const qkv_real *B, size_t rs, size_t cs, qkv_real *bp)
{
    for (int j0 = 0; j0 < nc; j0 += NR) {
        int nr = nc - j0 < NR ? nc - j0 : NR;
        for (int p = 0; p < kc; p++, bp += NR) {
            const qkv_real *src = B + (size_t)p * rs + (size_t)j0 * cs;
            int c = 0;
            for (; c < nr; c++)
                bp[c] = src[(size_t)c * cs];
            for (; c < NR; c++)
                bp[c] = 0;
        }
    }
}

static void gemm_blocked(const gemm_impl *im, int ta, int tb, int m, int n, int k,
                         const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    const size_t ars = ta ? 1 : (size_t)k, acs = ta ? (size_t)m : 1;
    const size_t brs = tb ? 1 : (size_t)n, bcs = tb ? (size_t)k : 1;
    const int MR = im->mr, NR = im->nr;
    for (int jc = 0; jc < n; jc += NC) {
        int nc = n - jc < NC ? n - jc : NC;
        for (int pc = 0; pc < k; pc += KC) {
            int kc = k - pc < KC ? k - pc : KC;
            pack_b(NR, kc, nc, B + (size_t)pc * brs + (size_t)jc * bcs, brs, bcs, pack_b_buf);
            for (int ic = 0; ic < m; ic += MC) {
                int mc = m - ic < MC ? m - ic : MC;
                pack_a(MR, mc, kc, A + (size_t)ic * ars + (size_t)pc * acs, ars, acs, pack_a_buf);
                for (int jr = 0; jr < nc; jr += NR)
                    for (int ir = 0; ir < mc; ir += MR)
                        im->kernel(kc, pack_a_buf + (size_t)ir * kc, pack_b_buf + (size_t)jr * kc,
                                   C + (size_t)(ic + ir) * n + jc + jr, n,
                                   mc - ir < MR ? mc - ir : MR, nc - jr < NR ? nc - jr : NR);
            }
        }
    }
}

static const gemm_impl *gemm_active;

static const gemm_impl *gemm_best(void)
{
#ifdef QKV_HAVE_X86_KERNELS
    if (cpu_has_avx512())
        return &impl_avx512;
    if (cpu_has_avx2())
        return &impl_avx2;
#endif
    return &impl_portable;
}

int qkv_gemm_use(const char *name)
{
    const gemm_impl *pick = NULL;
    if (strcmp(name, "auto") == 0)
        pick = gemm_best();
    else if (strcmp(name, "portable") == 0)
        pick = &impl_portable;
#ifdef QKV_HAVE_X86_KERNELS
    else if (strcmp(name, "avx2") == 0 && cpu_has_avx2())
        pick = &impl_avx2;
    else if (strcmp(name, "avx512") == 0 && cpu_has_avx512())
        pick = &impl_avx512;
#endif
    if (pick == NULL)
        return -1;
    gemm_active = pick;
    return 0;
}

const char *qkv_gemm_name(void)
{
    if (gemm_active == NULL)
        gemm_active = gemm_best();
    return gemm_active->name;
}

/* The direct path, for products too small or too thin to repay packing
 * (the per-sentence attention matmuls): rows of C built with axpy, or
 * entries with dot products, walking contiguous memory. */
static void gemm_direct(const gemm_impl *im, int ta, int tb, int m, int n, int k,
                        const qkv_real *A, const qkv_real *B, qkv_real *C)
{
    if (!tb) { /* C[i,:] += A(i,p)·B[p,:] */
        for (int i = 0; i < m; i++)
            for (int p = 0; p < k; p++)
                im->axpy(n, ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p], B + (size_t)p * n,
                         C + (size_t)i * n);
    } else if (!ta) { /* C[i,j] += A[i,:]·B[j,:] */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                C[(size_t)i * n + j] += im->dot(k, A + (size_t)i * k, B + (size_t)j * k);
    } else { /* both transposed (no op uses it): C[i,j] += Σ_p A[p,i]·B[j,p] */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                qkv_real s = 0;
                for (int p = 0; p < k; p++)
                    s += A[(size_t)p * m + i] * B[(size_t)j * k + p];
                C[(size_t)i * n + j] += s;
            }
    }
}

void qkv_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A,
              const qkv_real *B, qkv_real *C, int accumulate)
{
    if (gemm_active == NULL)
        gemm_active = gemm_best();
    if (!accumulate)
        memset(C, 0, (size_t)m * n * sizeof *C);
    /* packing costs O(mk + kn) per block; it pays off once C is large */
    if (m >= BLOCKED_MIN && n >= BLOCKED_MIN && k >= 8)
        gemm_blocked(gemm_active, ta, tb, m, n, k, A, B, C);
    else
        gemm_direct(gemm_active, ta, tb, m, n, k, A, B, C);
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
