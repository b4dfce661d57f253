/*
 * kernels.c - the hot loops: matmul, softmax and the attention metrics.
 *
 * Each kernel exists in portable C (always built, always tested) and, in
 * float32 builds on x86, in AVX2+FMA and AVX-512 versions selected at run
 * time (qkv_kernels_use). Reductions that decide a probability or a loss
 * accumulate in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qkv/kernels.h"

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */
/*
 * Two paths. Products whose C is small or thin (the per-sentence attention
 * matmuls, 12×12 up to 16×512) take the direct path: each row of C is held
 * in registers while it accumulates. Larger ones use a cache-blocked GEMM
 * in the style of GotoBLAS/BLIS: B is packed into KC×NR panels, A into
 * MR×KC panels, and a register-tiled micro-kernel computes each MR×NR tile
 * of C. Both exist in portable C and as AVX2+FMA or AVX-512 intrinsics
 * chosen at run time from cpuid. Every path adds up the same products; only
 * the order of the float additions differs.
 */

#define KC 256           /* depth of a packed panel */
#define MC 96            /* rows of A packed at once: a multiple of every MR */
#define NC 512           /* columns of B packed at once: a multiple of every NR */
#define BLOCKED_MIN 48   /* both sides of C at least this: the blocked path */

/* C (mr×nr corner of an ldc-wide matrix) += Ap (kc×MR panel) · Bp (kc×NR). */
typedef void (*ukernel_fn)(int kc, const qkv_real *ap, const qkv_real *bp, qkv_real *c,
                           int ldc, int mr, int nr);

/* C (m×n) += op(A)·op(B) by the direct path. */
typedef void (*direct_fn)(int ta, int tb, int m, int n, int k, const qkv_real *A,
                          const qkv_real *B, qkv_real *C);

/* y[j] = e^(x[j] - mx) for x[j] <= mx; returns Σ y[j] in double. */
typedef double (*exps_fn)(size_t n, const qkv_real *x, qkv_real mx, qkv_real *y);

/* Softmax of one row of at most 16 entries. */
typedef void (*softmax16_fn)(size_t n, const qkv_real *x, qkv_real *y);

/* Fused attention for one item; return nonzero when the shape is not one
 * they handle, and the generic path runs instead. */
typedef int (*attn_fwd_fn)(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o);
typedef int (*attn_bwd_fn)(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                           qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk, qkv_real *dv,
                           qkv_real *scratch);

/* Adam on n weights. */
typedef void (*adam_fn)(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                        const qkv_adam_coef *c);

/* x[0..n) = 0. */
typedef void (*zero_fn)(qkv_real *x, size_t n);

/* Gather or scatter-add n rows of d reals by ids. */
typedef void (*rows_fn)(qkv_real *x, const qkv_real *y, const int *ids, size_t n, size_t d);

/* One instruction set's kernels. */
typedef struct gemm_impl {
    const char *name;
    int mr, nr;
    ukernel_fn kernel;      /* the blocked path's micro-kernel */
    direct_fn direct;       /* the direct path */
    exps_fn exps;           /* softmax's exponentials */
    softmax16_fn softmax16; /* short rows in one register, or NULL */
    attn_fwd_fn attn_fwd;   /* fused attention, or NULL: the generic path */
    attn_bwd_fn attn_bwd;
    rows_fn gather;         /* embedding rows */
    rows_fn scatter_add;
    adam_fn adam;
    zero_fn zero;
} gemm_impl;

/* ---- the direct path ---------------------------------------------------- */
/*
 * For products whose C is small or thin (the per-sentence attention
 * matmuls, 12×12 to 16×512). Each row of C is computed a register-wide
 * chunk at a time: the chunk is loaded once, accumulates A(i,p)·B[p,chunk]
 * over all p, and is stored once. A transposed B is first copied to scratch
 * as k×n, which costs k·n moves against m·n·k multiply-adds.
 */
#define DIRECT_SCRATCH 65536
static _Thread_local _Alignas(64) qkv_real direct_scratch[DIRECT_SCRATCH];

/* C[i,j] += Σ_p A(i,p)·B[j,p] as dot products (B too large to copy). */
static void direct_dots(int ta, int m, int n, int k, const qkv_real *A, const qkv_real *B,
                        qkv_real *C)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            qkv_real s[4] = {0};
            int p = 0;
            for (; p + 4 <= k; p += 4)
                for (int l = 0; l < 4; l++)
                    s[l] += (ta ? A[(size_t)(p + l) * m + i] : A[(size_t)i * k + p + l]) *
                            B[(size_t)j * k + p + l];
            for (; p < k; p++)
                s[0] += (ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p]) * B[(size_t)j * k + p];
            C[(size_t)i * n + j] += (s[0] + s[1]) + (s[2] + s[3]);
        }
}

/* Makes op(B) available as a row-major k×n matrix; NULL if it does not fit. */
static const qkv_real *b_rows(int tb, int n, int k, const qkv_real *B)
{
    if (!tb)
        return B;
    if ((size_t)k * n > DIRECT_SCRATCH)
        return NULL;
    for (int j = 0; j < n; j++)
        for (int p = 0; p < k; p++)
            direct_scratch[(size_t)p * n + j] = B[(size_t)j * k + p];
    return direct_scratch;
}

/* Portable: C[i, j0..j0+w) accumulated in a local array. */
static void direct_c(int ta, int tb, int m, int n, int k, const qkv_real *A, const qkv_real *B,
                     qkv_real *C)
{
    const qkv_real *Bk = b_rows(tb, n, k, B);
    if (Bk == NULL) {
        direct_dots(ta, m, n, k, A, B, C);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += 64) {
        int w = n - j0 < 64 ? n - j0 : 64;
        for (int i = 0; i < m; i++) {
            qkv_real acc[64];
            qkv_real *c = C + (size_t)i * n + j0;
            for (int j = 0; j < w; j++)
                acc[j] = c[j];
            for (int p = 0; p < k; p++) {
                const qkv_real a = ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p];
                const qkv_real *b = Bk + (size_t)p * n + j0;
                for (int j = 0; j < w; j++)
                    acc[j] += a * b[j];
            }
            for (int j = 0; j < w; j++)
                c[j] = acc[j];
        }
    }
}


static _Thread_local _Alignas(64) qkv_real pack_a_buf[MC * KC];
static _Thread_local _Alignas(64) qkv_real pack_b_buf[KC * NC];

/* Adds the mr×nr corner of an MR×NR tile t (row stride NR) to C. */
static void add_tile(const qkv_real *t, int NR, qkv_real *c, int ldc, int mr, int nr)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] += t[i * NR + j];
}

/* Portable micro-kernel: a 4×8 tile, small enough for the 16 SSE registers
 * of baseline x86-64, written so compilers can vectorise it. */
static void ukernel_c(int kc, const qkv_real *ap, const qkv_real *bp, qkv_real *c, int ldc,
                      int mr, int nr)
{
    qkv_real acc[4 * 8] = {0};
    for (int p = 0; p < kc; p++, ap += 4, bp += 8)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++)
                acc[i * 8 + j] += ap[i] * bp[j];
    add_tile(acc, 8, c, ldc, mr, nr);
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
static void gather_c(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d)
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

static void scatter_add_c(qkv_real *table, const qkv_real *src, const int *ids, size_t n,
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

static void adam_c(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                   const qkv_adam_coef *c)
{
    for (size_t j = 0; j < n; j++) {
        double wj = w[j], g = grad[j] + c->l2 * wj;
        m[j] = c->b1 * m[j] + (1 - c->b1) * g;
        v[j] = c->b2 * v[j] + (1 - c->b2) * g * g;
        w[j] = (qkv_real)(c->keep * wj - c->step * m[j] / (sqrt(v[j]) * c->rs + c->eps));
    }
}

static void zero_c(qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0;
}

static const gemm_impl impl_portable = {
    .name = "portable", .mr = 4, .nr = 8, .kernel = ukernel_c, .direct = direct_c,
    .exps = exps_c, .gather = gather_c, .scatter_add = scatter_add_c, .adam = adam_c,
    .zero = zero_c};

#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_DOUBLE) && \
    (defined(__GNUC__) || defined(__clang__))
#define QKV_HAVE_X86_KERNELS 1
#include <immintrin.h>

static __mmask16 lanes(int n)
{
    return (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
}

/* Masked load and store that use the plain instructions for a full mask: a
 * load of data just stored gets it forwarded from the store only when
 * neither is masked. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 load16(__mmask16 m,
                                                                              const float *p)
{
    return m == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

__attribute__((target("avx512f"), always_inline)) static inline void store16(float *p, __mmask16 m,
                                                                             __m512 x)
{
    if (m == 0xFFFF)
        _mm512_storeu_ps(p, x);
    else
        _mm512_mask_storeu_ps(p, m, x);
}

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

/* AVX-512 direct path: rows i0..i0+R of C, up to four zmm chunks (64
 * columns) each, held in registers while p runs; R independent rows keep
 * the FMA pipeline busy. Masks cover a ragged right edge. */
__attribute__((target("avx512f"), always_inline)) static inline void
rows_avx512_block(int R, int nch, int i0, int ta, int m, int n, int k, int j0, __mmask16 last,
                  const float *A, const float *B, float *C)
{
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            acc[r][q] = load16(q == nch - 1 ? last : 0xFFFF,
                                              C + (size_t)(i0 + r) * n + j0 + 16 * q);
    for (int p = 0; p < k; p++) {
        const float *b = B + (size_t)p * n + j0;
        __m512 bv[4];
        for (int q = 0; q < nch; q++)
            bv[q] = load16(q == nch - 1 ? last : 0xFFFF, b + 16 * q);
        for (int r = 0; r < R; r++) {
            int i = i0 + r;
            __m512 a = _mm512_set1_ps(ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p]);
            for (int q = 0; q < nch; q++)
                acc[r][q] = _mm512_fmadd_ps(a, bv[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            store16(C + (size_t)(i0 + r) * n + j0 + 16 * q,
                                  q == nch - 1 ? last : 0xFFFF, acc[r][q]);
}

__attribute__((target("avx512f"), always_inline)) static inline void
rows_avx512_chunks(int nch, int ta, int m, int n, int k, int j0, __mmask16 last, const float *A,
                   const float *B, float *C)
{
    int i = 0;
    for (; i + 4 <= m; i += 4)
        rows_avx512_block(4, nch, i, ta, m, n, k, j0, last, A, B, C);
    for (; i < m; i++)
        rows_avx512_block(1, nch, i, ta, m, n, k, j0, last, A, B, C);
}

/* Transposes the 16×16 matrix held in r[0..15] (row i in r[i]) in place,
 * in four shuffle stages. */
__attribute__((target("avx512f"), always_inline)) static inline void transpose16_regs(__m512 *r)
{
    __m512 t[16];
    for (int j = 0; j < 16; j += 2) { /* pairs of rows interleaved */
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) { /* then fours: column p of rows j..j+3 per lane */
        __m512d a = _mm512_castps_pd(t[j]), b = _mm512_castps_pd(t[j + 1]);
        __m512d c = _mm512_castps_pd(t[j + 2]), d = _mm512_castps_pd(t[j + 3]);
        r[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int q = 0; q < 4; q++) { /* 128-bit lanes of rows 0-7, then of rows 8-15 */
        t[q] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0x88);
        t[q + 4] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0xdd);
        t[q + 8] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0x88);
        t[q + 12] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0xdd);
    }
    for (int q = 0; q < 8; q++) { /* column q and column q + 8 */
        r[q] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88);
        r[q + 8] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xdd);
    }
}

/* dst (k×n, row stride ldd) = Bᵀ for B n×k (row stride ldb) with n, k <=
 * 16, in registers. */
__attribute__((target("avx512f"))) static void
transpose16_avx512(const float *B, size_t ldb, int n, int k, float *dst, size_t ldd)
{
    __m512 r[16];
    __mmask16 km = (__mmask16)((1u << k) - 1), nm = (__mmask16)((1u << n) - 1);
    for (int j = 0; j < 16; j++)
        r[j] = j < n ? load16(km, B + (size_t)j * ldb) : _mm512_setzero_ps();
    transpose16_regs(r);
    for (int p = 0; p < k; p++)
        store16(dst + (size_t)p * ldd, nm, r[p]);
}

__attribute__((target("avx512f"))) static void
direct_avx512(int ta, int tb, int m, int n, int k, const float *A, const float *B, float *C)
{
    const float *Bk;
    if (tb && n <= 16 && k <= 16) {
        transpose16_avx512(B, (size_t)k, n, k, direct_scratch, (size_t)n);
        Bk = direct_scratch;
    } else {
        Bk = b_rows(tb, n, k, B);
    }
    if (Bk == NULL) {
        direct_dots(ta, m, n, k, A, B, C);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += 64) {
        int w = n - j0 < 64 ? n - j0 : 64, nch = (w + 15) / 16, tail = w - 16 * (nch - 1);
        __mmask16 last = (__mmask16)(tail == 16 ? 0xFFFF : (1u << tail) - 1);
        switch (nch) { /* constant chunk counts, so acc[] stays in registers */
        case 1: rows_avx512_chunks(1, ta, m, n, k, j0, last, A, Bk, C); break;
        case 2: rows_avx512_chunks(2, ta, m, n, k, j0, last, A, Bk, C); break;
        case 3: rows_avx512_chunks(3, ta, m, n, k, j0, last, A, Bk, C); break;
        default: rows_avx512_chunks(4, ta, m, n, k, j0, last, A, Bk, C); break;
        }
    }
}

/* Lane mask for AVX2 masked loads and stores: the first w of 8 lanes. */
__attribute__((target("avx2"))) static inline __m256i lanes8(int w)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* AVX2 direct path: as the AVX-512 one with ymm chunks (up to 32
 * columns), a ragged right edge in a masked last chunk. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
rows_avx2_block(int R, int nch, int i0, int ta, int m, int n, int k, int j0, __m256i last,
                const float *A, const float *B, float *C)
{
    __m256 acc[4][4];
    const __m256i all = _mm256_set1_epi32(-1);
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            acc[r][q] = _mm256_maskload_ps(C + (size_t)(i0 + r) * n + j0 + 8 * q,
                                           q == nch - 1 ? last : all);
    for (int p = 0; p < k; p++) {
        const float *b = B + (size_t)p * n + j0;
        __m256 bv[4];
        for (int q = 0; q < nch; q++)
            bv[q] = _mm256_maskload_ps(b + 8 * q, q == nch - 1 ? last : all);
        for (int r = 0; r < R; r++) {
            int i = i0 + r;
            __m256 a = _mm256_set1_ps(ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p]);
            for (int q = 0; q < nch; q++)
                acc[r][q] = _mm256_fmadd_ps(a, bv[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int q = 0; q < nch; q++)
            _mm256_maskstore_ps(C + (size_t)(i0 + r) * n + j0 + 8 * q, q == nch - 1 ? last : all,
                                acc[r][q]);
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
rows_avx2_chunks(int nch, int ta, int m, int n, int k, int j0, __m256i last, const float *A,
                 const float *B, float *C)
{
    int i = 0;
    for (; i + 3 <= m; i += 3)
        rows_avx2_block(3, nch, i, ta, m, n, k, j0, last, A, B, C);
    for (; i < m; i++)
        rows_avx2_block(1, nch, i, ta, m, n, k, j0, last, A, B, C);
}

__attribute__((target("avx2,fma"))) static void
direct_avx2(int ta, int tb, int m, int n, int k, const float *A, const float *B, float *C)
{
    const float *Bk = b_rows(tb, n, k, B);
    if (Bk == NULL) {
        direct_dots(ta, m, n, k, A, B, C);
        return;
    }
    for (int j0 = 0; j0 < n; j0 += 32) { /* up to four ymm chunks, the last masked */
        int w = n - j0 < 32 ? n - j0 : 32, nch = (w + 7) / 8;
        const __m256i last = lanes8(w - 8 * (nch - 1));
        switch (nch) { /* constant chunk counts, so acc[] stays in registers */
        case 1: rows_avx2_chunks(1, ta, m, n, k, j0, last, A, Bk, C); break;
        case 2: rows_avx2_chunks(2, ta, m, n, k, j0, last, A, Bk, C); break;
        case 3: rows_avx2_chunks(3, ta, m, n, k, j0, last, A, Bk, C); break;
        default: rows_avx2_chunks(4, ta, m, n, k, j0, last, A, Bk, C); break;
        }
    }
}

/* Vector e^x for x <= 0 in float: x = t·ln2 + r with |r| <= ln2/2 (ln2
 * split in two so t·ln2 is exact), e^r by its Taylor series to r^7
 * (truncation below 6e-9 relative), then scaled by 2^t. Results below
 * e^-87 (under FLT_MIN) are returned as 0, so masked scores (-inf) give
 * exactly 0. Within 2 ulp of the exact value. */
#define EXP_LN2_HI 0.693145751953125f
#define EXP_LN2_LO 1.428606765330187e-06f
#define EXP_MIN (-87.0f)

__attribute__((target("avx512f"))) static inline __m512 exp_avx512(__m512 v)
{
    __mmask16 live = _mm512_cmp_ps_mask(v, _mm512_set1_ps(EXP_MIN), _CMP_GE_OQ);
    v = _mm512_max_ps(v, _mm512_set1_ps(EXP_MIN));
    __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(t, _mm512_set1_ps(EXP_LN2_HI), v);
    r = _mm512_fnmadd_ps(t, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, t));
}

/* y[j] = e^(x[j] - mx); returns Σ y[j], accumulated in double. */
__attribute__((target("avx512f"))) static double
exps_avx512(size_t n, const float *x, float mx, float *y)
{
    __m512 vmx = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (size_t j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + j), vmx);
        __m512 e = exp_avx512(v); /* lanes past the end are e^-inf = 0 */
        store16(y + j, m, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 v)
{
    __m256 live = _mm256_cmp_ps(v, _mm256_set1_ps(EXP_MIN), _CMP_GE_OQ);
    v = _mm256_max_ps(v, _mm256_set1_ps(EXP_MIN));
    __m256 t = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(t, _mm256_set1_ps(EXP_LN2_HI), v);
    r = _mm256_fnmadd_ps(t, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^t by building the exponent bits; t >= -126 after the clamp */
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(t), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

__attribute__((target("avx2,fma"))) static double
exps_avx2(size_t n, const float *x, float mx, float *y)
{
    __m256 vmx = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    for (size_t j = 0; j < n; j += 8) {
        const __m256i m = lanes8(n - j < 8 ? (int)(n - j) : 8);
        __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(x + j, m),
                                    _mm256_castsi256_ps(m)); /* -inf past the end */
        __m256 e = exp_avx2(_mm256_sub_ps(v, vmx));
        _mm256_maskstore_ps(y + j, m, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    _Alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(s0, s1));
    return (t[0] + t[1]) + (t[2] + t[3]);
}

/* Softmax of the first lanes (m) of v in the register: the max, the
 * exponentials, their sum (in double) and the scaling without touching
 * memory. An all -inf row gives zeros. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
softmax16_reg(__mmask16 m, __m512 v)
{
    v = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), m, v);
    float mx = _mm512_reduce_max_ps(v);
    if (mx == -INFINITY)
        return _mm512_setzero_ps();
    __m512 e = exp_avx512(_mm512_sub_ps(v, _mm512_set1_ps(mx)));
    __m512d s = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(e)),
                              _mm512_cvtps_pd(_mm256_castpd_ps(
                                  _mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    /* s[m] = e[m] + e[m+8]; then the tree (s[m] + s[m+4]), (+2), (+1),
     * spelled out so that the lanes-as-rows path below can repeat it */
    __m256d h = _mm256_add_pd(_mm512_extractf64x4_pd(s, 1), _mm512_castpd512_pd256(s));
    __m128d g = _mm_add_pd(_mm256_extractf128_pd(h, 1), _mm256_castpd256_pd128(h));
    float inv = (float)(1 / (_mm_cvtsd_f64(g) + _mm_cvtsd_f64(_mm_unpackhi_pd(g, g))));
    return _mm512_mul_ps(e, _mm512_set1_ps(inv));
}

/* Softmax of a row of at most 16 entries held in one register. */
__attribute__((target("avx512f"))) static void softmax16_avx512(size_t n, const float *x, float *y)
{
    __mmask16 m = (__mmask16)((1u << n) - 1);
    store16(y, m, softmax16_reg(m, load16(m, x)));
}

/* ---- fused attention, keys in one register (tk <= 16) ----------------- */
/*
 * Each step is the arithmetic of the unfused ops, in the same order, so the
 * results are bit for bit those of qkv_gemm (the direct path: one FMA chain
 * per element, depth ascending), the double-precision scaling, the mask and
 * softmax16. What changes is that an item's S and A rows never leave the
 * registers between the steps, and that backward skips rows of zeros.
 */
#define ATTN_MAXD 1024
static _Thread_local _Alignas(64) float attn_kt[ATTN_MAXD * 16];

/* dst (d×16, row stride 16) = Xᵀ for X tk×d, tk <= 16, d <= ATTN_MAXD. */
__attribute__((target("avx512f"))) static void transpose_keys(const float *X, int tk, int d,
                                                              float *dst)
{
    for (int c0 = 0; c0 < d; c0 += 16)
        transpose16_avx512(X + c0, (size_t)d, tk, d - c0 < 16 ? d - c0 : 16, dst + (size_t)c0 * 16,
                           16);
}

/* Nonzero when c is a power of two (1 included): then c·x is exact before
 * its one rounding in float and in double alike, so (float)(c·(double)x)
 * is x·(float)c. */
static int pow2_scale(double c)
{
    int e;
    return isfinite(c) && frexp(c, &e) == 0.5 && e > -100 && e < 100;
}

/* (float)(c·(double)x) lane by lane: the scaling op's rounding. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 scale_ps(__m512 x,
                                                                                __m512d c)
{
    __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(c, _mm512_cvtps_pd(_mm512_castps512_ps256(x))));
    __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(
        c, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)),
                                               _mm256_castps_pd(hi), 1));
}

/* Lanes 0-7 (hf = 0) or 8-15 (hf = 1) of x. */
__attribute__((target("avx512f"), always_inline)) static inline __m256 half_ps(__m512 x, int hf)
{
    __m512d d = _mm512_castps_pd(x);
    return _mm256_castpd_ps(hf == 0 ? _mm512_castpd512_pd256(d) : _mm512_extractf64x4_pd(d, 1));
}

/* The mask's row i, as lanes (0 beyond tk). */
__attribute__((target("avx512f"), always_inline)) static inline __m512
mask_row(const qkv_attn_shape *sh, int i, __mmask16 km)
{
    const float *mr = sh->mask + (size_t)i * sh->mask_rs;
    return sh->mask_cs == 0 ? _mm512_maskz_mov_ps(km, _mm512_set1_ps(mr[0]))
                            : load16(km, mr);
}



/* Rows i0..i0+nq (nq <= 16) of S, A and O with the rows in the lanes:
 * register j holds column j (key j) for all the rows, so the softmax of 16
 * rows is a handful of vertical operations instead of 16 latency-bound
 * horizontal reductions. NJ (a multiple of 4, >= tk) is the number of key
 * registers; K has NJ rows (zero past tk). */
__attribute__((target("avx512f"), always_inline)) static inline void
attn_fwd_block(const int NJ, int i0, int nq, const qkv_attn_shape *sh, const float *q,
               const float *kr, const float *v, float *s, float *a, float *o)
{
    const int tk = sh->tk, dk = sh->dk, dv = sh->dv;
    const __mmask16 qm = lanes(nq), km = lanes(tk);
    __m512 st[16], t[16];
    /* S[i,j] = Σ_p Q[i,p]·K[j,p], one FMA chain per (i,j), p ascending */
    transpose_keys(q + (size_t)i0 * dk, nq, dk, attn_kt); /* Qᵀ of the block */
    for (int j = 0; j < NJ; j++)
        st[j] = _mm512_setzero_ps();
    for (int p = 0; p < dk; p++) {
        __m512 qp = _mm512_maskz_load_ps(qm, attn_kt + (size_t)p * 16);
        for (int j = 0; j < NJ; j++)
            st[j] = _mm512_fmadd_ps(_mm512_set1_ps(kr[(size_t)j * dk + p]), qp, st[j]);
    }
    const __m512d c = _mm512_set1_pd(sh->scale);
    const __m512 cf = _mm512_set1_ps((float)sh->scale);
    const int exact = pow2_scale(sh->scale);
    for (int j = 0; j < 16; j++)
        t[j] = st[j] = j >= NJ ? _mm512_setzero_ps()
                       : exact ? _mm512_mul_ps(st[j], cf)
                               : scale_ps(st[j], c);
    transpose16_regs(t);
    for (int i = 0; i < nq; i++)
        store16(s + (size_t)(i0 + i) * tk, km, t[i]);
    /* + mask, and -inf for the padding keys past tk; a mask that differs by
     * row is gathered a column at a time, from row i0 + lane */
    const __m512i mrows = _mm512_mullo_epi32(
        _mm512_add_epi32(_mm512_set1_epi32(i0),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
        _mm512_set1_epi32((int)sh->mask_rs));
    for (int j = 0; j < NJ; j++) {
        if (j >= tk) {
            st[j] = _mm512_set1_ps(-INFINITY);
        } else if (sh->mask != NULL) {
            const float *mc = sh->mask + (size_t)j * sh->mask_cs;
            __m512 col = sh->mask_rs == 0
                             ? _mm512_set1_ps(mc[0])
                             : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), qm, mrows, mc, 4);
            st[j] = _mm512_add_ps(st[j], col);
        }
    }
    /* softmax down the registers: the max, e^(x - max), the sum in double
     * in softmax16_reg's tree, 1/sum, the scaling; all-masked rows give 0 */
    __m512 mx = st[0];
    for (int j = 1; j < NJ; j++)
        mx = _mm512_max_ps(mx, st[j]);
    const __mmask16 live = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    for (int j = 0; j < 16; j++)
        st[j] = j < NJ ? exp_avx512(_mm512_sub_ps(st[j], mx)) : _mm512_setzero_ps();
    __m512d half[2];
    for (int hf = 0; hf < 2; hf++) {
        __m512d d[8];
        for (int m = 0; m < 8; m++) {
            __m256 e0 = half_ps(st[m], hf), e8 = half_ps(st[m + 8], hf);
            d[m] = _mm512_add_pd(_mm512_cvtps_pd(e0), _mm512_cvtps_pd(e8));
        }
        for (int m = 0; m < 4; m++)
            d[m] = _mm512_add_pd(d[m + 4], d[m]);
        for (int m = 0; m < 2; m++)
            d[m] = _mm512_add_pd(d[m + 2], d[m]);
        half[hf] = _mm512_div_pd(_mm512_set1_pd(1), _mm512_add_pd(d[0], d[1]));
    }
    const __m512 inv = _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(half[0]))),
        _mm256_castps_pd(_mm512_cvtpd_ps(half[1])), 1));
    _Alignas(64) float pa[16 * 16]; /* A's columns, read back by the O loop */
    for (int j = 0; j < 16; j++) {
        t[j] = _mm512_maskz_mul_ps(live, st[j], inv);
        _mm512_store_ps(pa + 16 * j, t[j]);
    }
    transpose16_regs(t);
    for (int i = 0; i < nq; i++)
        store16(a + (size_t)(i0 + i) * tk, km, t[i]);
    /* O[i,c] = Σ_j A[i,j]·V[j,c], j ascending, 16 columns at a time */
    _Alignas(64) float vb[16 * 16];
    for (int c0 = 0; c0 < dv; c0 += 16) {
        const __mmask16 cm = lanes(dv - c0);
        for (int j = 0; j < tk; j++)
            _mm512_store_ps(vb + 16 * j, load16(cm, v + (size_t)j * dv + c0));
        for (int l = 0; l < 16; l++)
            t[l] = _mm512_setzero_ps();
        for (int j = 0; j < tk; j++)
            for (int l = 0; l < 16; l++)
                t[l] = _mm512_fmadd_ps(_mm512_set1_ps(vb[16 * j + l]), _mm512_load_ps(pa + 16 * j),
                                       t[l]);
        transpose16_regs(t);
        for (int i = 0; i < nq; i++)
            store16(o + (size_t)(i0 + i) * dv + c0, cm, t[i]);
    }
}

static _Thread_local _Alignas(64) float attn_kp[ATTN_MAXD * 16];

__attribute__((target("avx512f"))) static int
attn_fwd_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                float *s, float *a, float *o)
{
    const int tk = sh->tk, dk = sh->dk, NJ = (tk + 3) & ~3;
    if (tk > 16 || dk > ATTN_MAXD ||
        (sh->mask != NULL && (size_t)(sh->tq + 15) * sh->mask_rs > 0x7fffffff))
        return -1;
    const float *kr = k;
    if (NJ != tk) { /* K with zero rows up to NJ */
        memcpy(attn_kp, k, sizeof(float) * (size_t)tk * dk);
        memset(attn_kp + (size_t)tk * dk, 0, sizeof(float) * (size_t)(NJ - tk) * dk);
        kr = attn_kp;
    }
    for (int i0 = 0; i0 < sh->tq; i0 += 16) {
        int nq = sh->tq - i0 < 16 ? sh->tq - i0 : 16;
        switch (NJ) { /* constant key counts, so st[] stays in registers */
        case 4: attn_fwd_block(4, i0, nq, sh, q, kr, v, s, a, o); break;
        case 8: attn_fwd_block(8, i0, nq, sh, q, kr, v, s, a, o); break;
        case 12: attn_fwd_block(12, i0, nq, sh, q, kr, v, s, a, o); break;
        default: attn_fwd_block(16, i0, nq, sh, q, kr, v, s, a, o); break;
        }
    }
    return 0;
}

/* y[c0..) = fma(x, row[c0..), y[c0..)) over d columns: y += x·row. */
__attribute__((target("avx512f"), always_inline)) static inline void axpy_row(float x,
                                                                              const float *row,
                                                                              float *y, int d)
{
    const __m512 xv = _mm512_set1_ps(x);
    for (int c0 = 0; c0 < d; c0 += 16) {
        const __mmask16 cm = lanes(d - c0);
        store16(y + c0, cm, _mm512_fmadd_ps(xv, load16(cm, row + c0), load16(cm, y + c0)));
    }
}

/* Nonzero when any of x[0..n) is nonzero (or NaN). */
__attribute__((target("avx512f"))) static inline int row_live(const float *x, int n)
{
    for (int c0 = 0; c0 < n; c0 += 16)
        if (_mm512_cmp_ps_mask(load16(lanes(n - c0), x + c0), _mm512_setzero_ps(),
                               _CMP_NEQ_UQ))
            return 1;
    return 0;
}

/* y[0..d) += x·row, as one rounded product added: what adding a gradient
 * row made by one FMA from zero into a table row comes to. */
__attribute__((target("avx512f"), always_inline)) static inline void add_scaled_row(
    float x, const float *row, float *y, int d)
{
    const __m512 xv = _mm512_set1_ps(x);
    for (int c0 = 0; c0 < d; c0 += 16) {
        const __mmask16 cm = lanes(d - c0);
        store16(y + c0, cm,
                _mm512_add_ps(load16(cm, y + c0), _mm512_mul_ps(xv, load16(cm, row + c0))));
    }
}

/* The backward pass of one item. With rows (NULL otherwise) dq, dk and dv
 * are tables and at most one row of dO is live and nothing flows into A or
 * S from elsewhere, so each row of the item's dK and dV is one product, and
 * goes straight into its table row. */
__attribute__((target("avx512f"))) static void
attn_bwd_item_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                     const float *a, const float *dout, float *ds, float *da, float *dq,
                     float *dk, float *dv, const int *rows)
{
    const int tq = sh->tq, tk = sh->tk, d_k = sh->dk, d_v = sh->dv;
    const __mmask16 km = lanes(tk);
    const __m512d c = _mm512_set1_pd(sh->scale);
    if (da != NULL) {
        transpose_keys(v, tk, d_v, attn_kt); /* Vᵀ */
    }
    for (int i = 0; i < tq; i++) {
        const float *go = dout + (size_t)i * d_v, *ai = a + (size_t)i * tk;
        const int live = row_live(go, d_v);
        if (live && dv != NULL) /* dV[j,:] += A[i,j]·dO[i,:] (rows i ascending) */
            for (int j = 0; j < tk; j++) {
                if (rows != NULL)
                    add_scaled_row(ai[j], go, dv + (size_t)rows[j] * d_v, d_v);
                else
                    axpy_row(ai[j], go, dv + (size_t)j * d_v, d_v);
            }
        if (da == NULL)
            continue;
        /* dA[i,:] += dO[i,:]·Vᵀ */
        __m512 g = load16(km, da + (size_t)i * tk);
        if (live) {
            for (int p = 0; p < d_v; p++)
                g = _mm512_fmadd_ps(_mm512_set1_ps(go[p]),
                                    _mm512_maskz_load_ps(km, attn_kt + (size_t)p * 16), g);
            store16(da + (size_t)i * tk, km, g);
        }
        /* dSs[i,:] += mask-kept A ⊙ (dA - Σ dA·A), the dot summed in order */
        __m512 sg = load16(km, ds + (size_t)i * tk);
        if (_mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_NEQ_UQ) & km) {
            _Alignas(64) float gv[16];
            _mm512_store_ps(gv, g);
            double dot = 0;
            for (int j = 0; j < tk; j++)
                dot += (double)gv[j] * ai[j];
            __m512 ar = load16(km, ai);
            __m512d dd = _mm512_set1_pd(dot);
            __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(
                _mm512_cvtps_pd(_mm512_castps512_ps256(ar)),
                _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(g)), dd)));
            __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ar), 1))),
                _mm512_sub_pd(
                    _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1))),
                    dd)));
            __m512 dx = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
            if (sh->mask != NULL) {
                __mmask16 drop = _mm512_cmp_ps_mask(mask_row(sh, i, km),
                                                    _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
                dx = _mm512_maskz_mov_ps((__mmask16)~drop, dx);
            }
            sg = _mm512_add_ps(sg, dx);
            store16(ds + (size_t)i * tk, km, sg);
        }
        if (!(_mm512_cmp_ps_mask(sg, _mm512_setzero_ps(), _CMP_NEQ_UQ) & km))
            continue;
        /* dS = scale·dSs; dQ[i,:] += Σ_j dS[j]·K[j,:]; dK[j,:] += dS[j]·Q[i,:] */
        _Alignas(64) float d[16];
        _mm512_store_ps(d, scale_ps(sg, c));
        if (dq != NULL)
            for (int c0 = 0; c0 < d_k; c0 += 16) {
                const __mmask16 cm = lanes(d_k - c0);
                float *dst = dq + (size_t)(rows != NULL ? rows[i] : i) * d_k + c0;
                __m512 acc = rows != NULL ? _mm512_setzero_ps() : load16(cm, dst);
                for (int j = 0; j < tk; j++)
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d[j]),
                                          load16(cm, k + (size_t)j * d_k + c0), acc);
                store16(dst, cm, rows != NULL ? _mm512_add_ps(load16(cm, dst), acc) : acc);
            }
        if (dk != NULL)
            for (int j = 0; j < tk; j++) {
                if (rows != NULL)
                    add_scaled_row(d[j], q + (size_t)i * d_k, dk + (size_t)rows[j] * d_k, d_k);
                else
                    axpy_row(d[j], q + (size_t)i * d_k, dk + (size_t)j * d_k, d_k);
            }
    }
}

/* Item gradients computed into scratch (zeroed first), then added into the
 * tables' rows in order: the grad_rows contract on any path. */
static void attn_bwd_via_scratch(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                 const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                                 qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                                 qkv_real *dv, qkv_real *scratch);

__attribute__((target("avx512f"))) static int
attn_bwd_avx512(const qkv_attn_shape *sh, const float *q, const float *k, const float *v,
                const float *a, const float *dout, float *ds, float *da, float *dq, float *dk,
                float *dv, float *scratch)
{
    const int tq = sh->tq, tk = sh->tk;
    if (tk > 16 || (da != NULL && sh->dv > ATTN_MAXD))
        return -1;
    if (sh->grad_rows == NULL) {
        attn_bwd_item_avx512(sh, q, k, v, a, dout, ds, da, dq, dk, dv, NULL);
        return 0;
    }
    int live = 0;
    for (int i = 0; i < tq && live < 2; i++)
        live += row_live(dout + (size_t)i * sh->dv, sh->dv);
    if (live < 2 && (da == NULL || (!row_live(da, tq * tk) && !row_live(ds, tq * tk))))
        attn_bwd_item_avx512(sh, q, k, v, a, dout, ds, da, dq, dk, dv, sh->grad_rows);
    else
        attn_bwd_via_scratch(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
    return 0;
}

__attribute__((target("avx512f"))) static void zero_avx512(float *x, size_t n)
{
    for (size_t i = 0; i < n; i += 16)
        store16(x + i, lanes((int)(n - i < 16 ? n - i : 16)), _mm512_setzero_ps());
}

/* AVX-512 rows: 16 lanes at a time, the last chunk masked. */
__attribute__((target("avx512f"))) static void gather_avx512(float *dst, const float *table,
                                                             const int *ids, size_t n, size_t d)
{
    for (size_t i = 0; i < n; i++, dst += d) {
        const float *src = table + (size_t)ids[i] * d;
        for (size_t j = 0; j < d; j += 16) {
            __mmask16 m = lanes((int)(d - j < 16 ? d - j : 16));
            store16(dst + j, m, load16(m, src + j));
        }
    }
}

__attribute__((target("avx512f"))) static void
scatter_add_avx512(float *table, const float *src, const int *ids, size_t n, size_t d)
{
    for (size_t i = 0; i < n; i++, src += d) {
        if (!row_live(src, (int)d))
            continue; /* a zero row */
        float *dst = table + (size_t)ids[i] * d;
        for (size_t j = 0; j < d; j += 16) {
            __mmask16 m = lanes((int)(d - j < 16 ? d - j : 16));
            store16(dst + j, m, _mm512_add_ps(load16(m, dst + j), load16(m, src + j)));
        }
    }
}

/* Adam, eight weights per step in double: the portable loop's operations
 * one for one (mul, add, sqrt, div; no FMA), so the same bits. */
__attribute__((target("avx512f"))) static void adam_avx512(float *w, const float *grad,
                                                           double *m, double *v, size_t n,
                                                           const qkv_adam_coef *c)
{
    const __m512d b1 = _mm512_set1_pd(c->b1), b2 = _mm512_set1_pd(c->b2);
    const __m512d a1 = _mm512_set1_pd(1 - c->b1), a2 = _mm512_set1_pd(1 - c->b2);
    const __m512d step = _mm512_set1_pd(c->step), rs = _mm512_set1_pd(c->rs);
    const __m512d eps = _mm512_set1_pd(c->eps), l2 = _mm512_set1_pd(c->l2);
    const __m512d keep = _mm512_set1_pd(c->keep);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512d wj = _mm512_cvtps_pd(_mm256_loadu_ps(w + j));
        __m512d g = _mm512_add_pd(_mm512_cvtps_pd(_mm256_loadu_ps(grad + j)), _mm512_mul_pd(l2, wj));
        __m512d mj = _mm512_add_pd(_mm512_mul_pd(b1, _mm512_loadu_pd(m + j)), _mm512_mul_pd(a1, g));
        __m512d vj = _mm512_add_pd(_mm512_mul_pd(b2, _mm512_loadu_pd(v + j)),
                                   _mm512_mul_pd(_mm512_mul_pd(a2, g), g));
        _mm512_storeu_pd(m + j, mj);
        _mm512_storeu_pd(v + j, vj);
        __m512d den = _mm512_add_pd(_mm512_mul_pd(_mm512_sqrt_pd(vj), rs), eps);
        __m512d upd = _mm512_div_pd(_mm512_mul_pd(step, mj), den);
        _mm256_storeu_ps(w + j, _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_mul_pd(keep, wj), upd)));
    }
    adam_c(w + j, grad + j, m + j, v + j, n - j, c);
}

static const gemm_impl impl_avx2 = {
    .name = "avx2", .mr = 6, .nr = 16, .kernel = ukernel_avx2, .direct = direct_avx2,
    .exps = exps_avx2, .gather = gather_c, .scatter_add = scatter_add_c, .adam = adam_c,
    .zero = zero_c};
static const gemm_impl impl_avx512 = {
    .name = "avx512", .mr = 12, .nr = 32, .kernel = ukernel_avx512, .direct = direct_avx512,
    .exps = exps_avx512, .softmax16 = softmax16_avx512, .attn_fwd = attn_fwd_avx512,
    .attn_bwd = attn_bwd_avx512, .gather = gather_avx512, .scatter_add = scatter_add_avx512,
    .adam = adam_avx512, .zero = zero_avx512};

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

/* The fastest kernel set this CPU supports. */
static const gemm_impl *cpu_best(void)
{
#ifdef QKV_HAVE_X86_KERNELS
    if (cpu_has_avx512())
        return &impl_avx512;
    if (cpu_has_avx2())
        return &impl_avx2;
#endif
    return &impl_portable;
}

/* The kernel set called name, if this build and CPU have it; else NULL. */
static const gemm_impl *find_impl(const char *name)
{
    if (strcmp(name, "auto") == 0)
        return cpu_best();
    if (strcmp(name, "portable") == 0)
        return &impl_portable;
#ifdef QKV_HAVE_X86_KERNELS
    if (strcmp(name, "avx2") == 0 && cpu_has_avx2())
        return &impl_avx2;
    if (strcmp(name, "avx512") == 0 && cpu_has_avx512())
        return &impl_avx512;
#endif
    return NULL;
}

/* The default: QKV_KERNELS from the environment if it names a kernel set
 * this machine has, else the fastest. */
static const gemm_impl *gemm_best(void)
{
    const char *env = getenv("QKV_KERNELS");
    const gemm_impl *im = env != NULL ? find_impl(env) : NULL;
    return im != NULL ? im : cpu_best();
}

int qkv_kernels_use(const char *name)
{
    const gemm_impl *pick = find_impl(name);
    if (pick == NULL)
        return -1;
    gemm_active = pick;
    return 0;
}

/* The kernel set in use, chosen on first use. */
static const gemm_impl *kernels(void)
{
    if (gemm_active == NULL)
        gemm_active = gemm_best();
    return gemm_active;
}

const char *qkv_kernels_name(void)
{
    return kernels()->name;
}

void qkv_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A,
              const qkv_real *B, qkv_real *C, int accumulate)
{
    const gemm_impl *im = kernels();
    if (!accumulate)
        memset(C, 0, (size_t)m * n * sizeof *C);
    /* packing costs O(mk + kn) per block; it pays off once C is large */
    if (m >= BLOCKED_MIN && n >= BLOCKED_MIN && k >= 8)
        gemm_blocked(im, ta, tb, m, n, k, A, B, C);
    else
        im->direct(ta, tb, m, n, k, A, B, C);
}


static double row_max(const qkv_real *x, size_t n)
{
    double mx = -INFINITY;
    for (size_t j = 0; j < n; j++)
        if (x[j] > mx)
            mx = x[j];
    return mx;
}

double qkv_exp_shifted(qkv_real *e, const qkv_real *x, size_t n, double *max)
{
    *max = row_max(x, n);
    if (*max == -INFINITY) {
        memset(e, 0, n * sizeof *e);
        return 0;
    }
    return kernels()->exps(n, x, (qkv_real)*max, e);
}

void qkv_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n)
{
    softmax16_fn short_row = kernels()->softmax16;
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

void qkv_gather_rows(qkv_real *dst, const qkv_real *table, const int *ids, size_t n, size_t d)
{
    kernels()->gather(dst, table, ids, n, d);
}

void qkv_scatter_add_rows(qkv_real *table, const qkv_real *src, const int *ids, size_t n,
                          size_t d)
{
    kernels()->scatter_add(table, src, ids, n, d);
}

void qkv_zero(qkv_real *x, size_t n)
{
    kernels()->zero(x, n);
}

/* ---- fused attention ---------------------------------------------------- */
/*
 * The generic path is the unfused ops' kernels called on one item: qkv_gemm,
 * the scaling in double, the mask, qkv_softmax_rows, and the same in
 * reverse. Kernel sets with a fused path take the shapes it handles.
 */

static int attn_dropped(const qkv_attn_shape *sh, int i, int j)
{
    if (sh->mask == NULL)
        return 0;
    qkv_real m = sh->mask[(size_t)i * sh->mask_rs + (size_t)j * sh->mask_cs];
    return isinf(m) && m < 0;
}

void qkv_attention_forward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                           const qkv_real *v, qkv_real *s, qkv_real *a, qkv_real *o)
{
    const gemm_impl *im = kernels();
    if (im->attn_fwd != NULL && im->attn_fwd(sh, q, k, v, s, a, o) == 0)
        return;
    const int tq = sh->tq, tk = sh->tk;
    qkv_gemm(0, 1, tq, tk, sh->dk, q, k, s, 0);
    for (int i = 0; i < tq; i++)
        for (int j = 0; j < tk; j++) {
            size_t e = (size_t)i * tk + j;
            s[e] = (qkv_real)(sh->scale * s[e]);
            a[e] = sh->mask != NULL
                       ? s[e] + sh->mask[(size_t)i * sh->mask_rs + (size_t)j * sh->mask_cs]
                       : s[e];
        }
    qkv_softmax_rows(a, a, (size_t)tq, (size_t)tk);
    qkv_gemm(0, 0, tq, sh->dv, tk, a, v, o, 0);
}

static void attn_bwd_via_scratch(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                                 const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                                 qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                                 qkv_real *dv, qkv_real *scratch)
{
    const size_t nq = (size_t)sh->tq * sh->dk, nk = (size_t)sh->tk * sh->dk,
                 nv = (size_t)sh->tk * sh->dv;
    qkv_real *g = scratch + (size_t)sh->tq * sh->tk;
    qkv_attn_shape item = *sh;
    item.grad_rows = NULL;
    qkv_zero(g, nq + nk + nv);
    qkv_attention_backward(&item, q, k, v, a, dout, ds, da, dq ? g : NULL, dk ? g + nq : NULL,
                           dv ? g + nq + nk : NULL, scratch);
    if (dq != NULL)
        qkv_scatter_add_rows(dq, g, sh->grad_rows, (size_t)sh->tq, (size_t)sh->dk);
    if (dk != NULL)
        qkv_scatter_add_rows(dk, g + nq, sh->grad_rows, (size_t)sh->tk, (size_t)sh->dk);
    if (dv != NULL)
        qkv_scatter_add_rows(dv, g + nq + nk, sh->grad_rows, (size_t)sh->tk, (size_t)sh->dv);
}

void qkv_attention_backward(const qkv_attn_shape *sh, const qkv_real *q, const qkv_real *k,
                            const qkv_real *v, const qkv_real *a, const qkv_real *dout,
                            qkv_real *ds, qkv_real *da, qkv_real *dq, qkv_real *dk,
                            qkv_real *dv, qkv_real *scratch)
{
    const gemm_impl *im = kernels();
    if (im->attn_bwd != NULL && im->attn_bwd(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch) == 0)
        return;
    if (sh->grad_rows != NULL) {
        attn_bwd_via_scratch(sh, q, k, v, a, dout, ds, da, dq, dk, dv, scratch);
        return;
    }
    const int tq = sh->tq, tk = sh->tk;
    if (dv != NULL) /* dV += Aᵀ·dO */
        qkv_gemm(1, 0, tk, sh->dv, tq, a, dout, dv, 1);
    if (da == NULL)
        return;
    qkv_gemm(0, 1, tq, tk, sh->dv, dout, v, da, 1); /* dA += dO·Vᵀ */
    memset(scratch, 0, sizeof *scratch * (size_t)tq * (size_t)tk);
    qkv_softmax_backward_rows(scratch, a, da, (size_t)tq, (size_t)tk);
    for (int i = 0; i < tq; i++) /* dSs += kept entries; then dS = scale·dSs */
        for (int j = 0; j < tk; j++) {
            size_t e = (size_t)i * tk + j;
            ds[e] += attn_dropped(sh, i, j) ? 0 : scratch[e];
            scratch[e] = (qkv_real)(sh->scale * ds[e]);
        }
    if (dq != NULL) /* dQ += dS·K */
        qkv_gemm(0, 0, tq, sh->dk, tk, scratch, k, dq, 1);
    if (dk != NULL) /* dK += dSᵀ·Q */
        qkv_gemm(1, 0, tk, sh->dk, tq, scratch, q, dk, 1);
}

void qkv_log_softmax_rows(qkv_real *y, const qkv_real *x, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        double mx, sum = qkv_exp_shifted(y, x, n, &mx); /* y as scratch */
        /* a fully masked row (sum 0) gives x - inf = -inf everywhere */
        double lse = sum > 0 ? mx + log(sum) : INFINITY;
        for (size_t j = 0; j < n; j++)
            y[j] = (qkv_real)((double)x[j] - lse);
    }
}

void qkv_adam_update(qkv_real *w, const qkv_real *grad, double *m, double *v, size_t n,
                     const qkv_adam_coef *c)
{
    kernels()->adam(w, grad, m, v, n, c);
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
