/*
 * avx2_gemm.c - the AVX2+FMA kernel set's matrix product (its gemm
 * field), built as avx512_gemm.c is with ymm registers: tiles of up to
 * 6×16 (12 accumulators of the 16 registers), op(B) packed with vector
 * moves (8×8 register transposes for a B stored n×k), A read in place,
 * and each order of qkv_gemm_order kept bit for bit. Compiled with
 * -mavx2 -mfma; runs only after dispatch.c found both.
 */
#include <string.h>

#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include "kernels/avx2.h"

#define MR 6   /* rows of the largest register tile */
#define NR 16  /* its columns: two ymm */
#define MC 144 /* rows of A per pass over a packed block of B */

/* Panels of NR columns, depth-major, zero-padded past nc: depth [0,kc) ×
 * columns [0,nc) of op(B), B stored k×n with row stride ldb (tb = 0) or
 * n×k (tb = 1). */
static void pack_b(int tb, int kc, int nc, const float *B, size_t ldb, float *bp)
{
    for (int j0 = 0; j0 < nc; j0 += NR, bp += (size_t)kc * NR) {
        int w = nc - j0 < NR ? nc - j0 : NR;
        if (!tb) {
            const float *src = B + j0;
            const __m256i m0 = lanes8(w), m1 = lanes8(w - 8);
            for (int p = 0; p < kc; p++, src += ldb) {
                _mm256_store_ps(bp + p * NR, _mm256_maskload_ps(src, m0));
                _mm256_store_ps(bp + p * NR + 8, _mm256_maskload_ps(src + 8, m1));
            }
            continue;
        }
        for (int h = 0; h < 2; h++) { /* 8 columns (rows of B) at a time */
            int rows = w - 8 * h;
            const float *src = B + (size_t)(j0 + 8 * h) * ldb;
            for (int p0 = 0; p0 < kc; p0 += 8) {
                int d = kc - p0 < 8 ? kc - p0 : 8;
                const __m256i dm = lanes8(d);
                __m256 r[8];
                for (int j = 0; j < 8; j++)
                    r[j] = j < rows ? _mm256_maskload_ps(src + (size_t)j * ldb + p0, dm)
                                    : _mm256_setzero_ps();
                transpose8_regs(r);
                for (int p = 0; p < d; p++)
                    _mm256_store_ps(bp + (size_t)(p0 + p) * NR + 8 * h, r[p]);
            }
        }
    }
}

/* ---- the register tile (chain and blocks orders) ------------------------ */
/*
 * As avx512_gemm.c's tile: C (R×w) from C (add = 0), or from zero and
 * then added into C (add = 1) or to zero (add = 2), or from zero with C
 * unread (add = 3: add = 0's bits on a zeroed C), with R rows of op(A)
 * (a[r·lda + p] for ta = 0, a[p·lda + r] for ta = 1) and a strip of op(B)
 * NV ymm wide whose last vector is masked by last. The loops over r are
 * unrolled early, so that the accumulators live in registers.
 */
static inline __attribute__((always_inline)) void tile(int R, int NV, int ta, int add, int kc,
                                                       const float *a, size_t lda, const float *b,
                                                       size_t ldb, float *c, size_t ldc,
                                                       __m256i last)
{
    __m256 acc0[MR], acc1[MR];
    const __m256i all = _mm256_set1_epi32(-1), bm0 = NV == 1 ? last : all;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        if (add == 1) { /* C is needed only at the end: fetch it meanwhile */
            _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + r * ldc + 8), _MM_HINT_T0);
        }
        acc0[r] = add ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * ldc, bm0);
        acc1[r] = add || NV == 1 ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * ldc + 8, last);
    }
    for (int p = 0; p < kc; p++, b += ldb) {
        __m256 b0 = NV == 1 ? _mm256_maskload_ps(b, last) : _mm256_loadu_ps(b);
        __m256 b1 = NV == 2 ? _mm256_maskload_ps(b + 8, last) : b0;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 av = _mm256_broadcast_ss(ta ? a + (size_t)p * lda + r : a + r * lda + p);
            acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
            if (NV == 2)
                acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        float *row = c + r * ldc;
        __m256 x0 = acc0[r], x1 = acc1[r];
        if (add == 1 || add == 2)
            x0 = _mm256_add_ps(add == 1 ? _mm256_maskload_ps(row, bm0) : _mm256_setzero_ps(), x0);
        _mm256_maskstore_ps(row, bm0, x0);
        if (NV == 2) {
            if (add == 1 || add == 2)
                x1 = _mm256_add_ps(
                    add == 1 ? _mm256_maskload_ps(row + 8, last) : _mm256_setzero_ps(), x1);
            _mm256_maskstore_ps(row + 8, last, x1);
        }
    }
}

/* Every tile shape as a function of its own, R, NV, ta and add constant. */
typedef void (*tile_fn)(int kc, const float *a, size_t lda, const float *b, size_t ldb, float *c,
                        size_t ldc, __m256i last);
#define TILE_FN(R, NV, TA, ADD)                                                                    \
    static void tile_##R##_##NV##_##TA##_##ADD(int kc, const float *a, size_t lda, const float *b, \
                                               size_t ldb, float *c, size_t ldc, __m256i last)     \
    {                                                                                              \
        tile(R, NV, TA, ADD, kc, a, lda, b, ldb, c, ldc, last);                                    \
    }
/* clang-format off */
#define TILE_ROWS(NV, TA, ADD) \
    TILE_FN(1, NV, TA, ADD)    \
    TILE_FN(2, NV, TA, ADD)    \
    TILE_FN(3, NV, TA, ADD)    \
    TILE_FN(4, NV, TA, ADD)    \
    TILE_FN(5, NV, TA, ADD)    \
    TILE_FN(6, NV, TA, ADD)
/* clang-format on */
#define TILE_LIST(NV, TA, ADD)                                                                 \
    {                                                                                          \
        tile_1_##NV##_##TA##_##ADD, tile_2_##NV##_##TA##_##ADD, tile_3_##NV##_##TA##_##ADD,    \
            tile_4_##NV##_##TA##_##ADD, tile_5_##NV##_##TA##_##ADD, tile_6_##NV##_##TA##_##ADD \
    }

TILE_ROWS(1, 0, 0)
TILE_ROWS(1, 0, 1)
TILE_ROWS(1, 1, 0)
TILE_ROWS(1, 1, 1)
TILE_ROWS(2, 0, 0)
TILE_ROWS(2, 0, 1)
TILE_ROWS(2, 1, 0)
TILE_ROWS(2, 1, 1)
TILE_ROWS(1, 0, 2)
TILE_ROWS(1, 1, 2)
TILE_ROWS(2, 0, 2)
TILE_ROWS(2, 1, 2)
TILE_ROWS(1, 0, 3)
TILE_ROWS(1, 1, 3)
TILE_ROWS(2, 0, 3)
TILE_ROWS(2, 1, 3)

/* [NV - 1][ta][add][R - 1] */
static const tile_fn tiles[2][2][4][MR] = {
    {{TILE_LIST(1, 0, 0), TILE_LIST(1, 0, 1), TILE_LIST(1, 0, 2), TILE_LIST(1, 0, 3)},
     {TILE_LIST(1, 1, 0), TILE_LIST(1, 1, 1), TILE_LIST(1, 1, 2), TILE_LIST(1, 1, 3)}},
    {{TILE_LIST(2, 0, 0), TILE_LIST(2, 0, 1), TILE_LIST(2, 0, 2), TILE_LIST(2, 0, 3)},
     {TILE_LIST(2, 1, 0), TILE_LIST(2, 1, 1), TILE_LIST(2, 1, 2), TILE_LIST(2, 1, 3)}}};

/* ---- the chain and blocks orders --------------------------------------- */

/* Rows [i0, i0 + mc) of C against one strip of op(B) columns [j, j + w),
 * depth kc: tiles of balanced height (at most MR rows). a points at
 * op(A)'s row i0 at the strip's first depth, in A as stored (row stride
 * lda) or in its packed copy. */
static void strip(const qkv_gemm_args *g, int add, int i0, int mc, int j, int w, int kc,
                  const float *a, size_t lda, const float *b, size_t ldb)
{
    const int nv = w > 8 ? 2 : 1;
    const __m256i last = lanes8(w - 8 * (nv - 1));
    const tile_fn *fn = tiles[nv - 1][g->ta][add];
    const int nt = (mc + MR - 1) / MR;
    for (int t = 0, i = i0; t < nt; t++) {
        int R = mc / nt + (t < mc % nt);
        const float *ai = g->ta ? a + (i - i0) : a + (size_t)(i - i0) * lda;
        fn[R - 1](kc, ai, lda, b, ldb, g->C + (size_t)i * g->n + j, (size_t)g->n, last);
        i += R;
    }
}

/* With A transposed (stored k×m), a tile reads its R rows' depth-kc
 * column as kc short runs lda apart. With lda a multiple of 64 floats the
 * runs crowd into a few sets of the L1 cache (two for m = 512), which
 * then misses throughout: 512³ tn ran at 85 to 87 GFLOP/s against nn's
 * 102 to 104. So for such an lda, and n of 128 or more to pay for it,
 * each MC×kc block of op(A) is copied first, its runs MC (144) floats
 * apart: the same values, so the same bits. (512³ tn then ran at 98;
 * the AVX-512 set, whose 12-row tile reads a run in one line, gained
 * nothing, and copying slowed 64×32×64 tn from 105 to 72 here.) */
static _Thread_local _Alignas(64) float pack_a_t[QKV_GEMM_KC * MC];

static void pack_at(int kc, int mc, const float *a, size_t lda, float *dst)
{
    for (int p = 0; p < kc; p++)
        memcpy(dst + (size_t)p * MC, a + (size_t)p * lda, sizeof(float) * (size_t)mc);
}

static void gemm_tiles(const qkv_gemm_args *g)
{
    const int blocks = g->order == QKV_GEMM_BLOCKS, m = g->m, n = g->n, k = g->k;
    const int packed = g->tb || m >= qkv_kernels_avx2.gemm_pack_b_min;
    const size_t ldb = g->tb ? (size_t)k : (size_t)n, lda = g->ta ? (size_t)m : (size_t)k;
    const int pack_a = g->ta && lda % 64 == 0 && n >= 128; /* see pack_at */
    for (int jc = 0; jc < n; jc += QKV_GEMM_NC) {
        int nc = n - jc < QKV_GEMM_NC ? n - jc : QKV_GEMM_NC;
        for (int pc = 0; pc < k; pc += QKV_GEMM_KC) {
            int kc = k - pc < QKV_GEMM_KC ? k - pc : QKV_GEMM_KC;
            /* the tile's mode; a stored first block starts from zero */
            const int add = g->store && pc == 0 ? (blocks ? 2 : 3) : blocks;
            const float *bsrc = g->tb ? g->B + (size_t)jc * ldb + pc : g->B + (size_t)pc * ldb + jc;
            if (packed)
                pack_b(g->tb, kc, nc, bsrc, ldb, qkv_gemm_pack_b);
            for (int ic = 0; ic < m; ic += MC) {
                int mc = m - ic < MC ? m - ic : MC;
                const float *a =
                    g->ta ? g->A + (size_t)pc * lda + ic : g->A + (size_t)ic * lda + pc;
                size_t la = lda;
                if (pack_a) { /* see pack_at */
                    pack_at(kc, mc, a, lda, pack_a_t);
                    a = pack_a_t;
                    la = MC;
                }
                for (int jr = 0; jr < nc; jr += NR) {
                    int w = nc - jr < NR ? nc - jr : NR;
                    if (packed)
                        strip(g, add, ic, mc, jc + jr, w, kc, a, la,
                              qkv_gemm_pack_b + (size_t)jr * kc, NR);
                    else
                        strip(g, add, ic, mc, jc + jr, w, kc, a, la, bsrc + jr, ldb);
                }
            }
        }
    }
}

/* ---- the dots order ----------------------------------------------------- */
/*
 * As avx512_gemm.c's: c[i,j] += (s0 + s1) + (s2 + s3), s_l an FMA chain
 * over the products for p = l mod 4 (the last k mod 4 into s0), lanes
 * over j; R rows by 8 columns of a k×NR packed op(B) at bp.
 */
static inline __attribute__((always_inline)) void dots_step(int R, int ta, int l, int p,
                                                            const float *a, size_t lda,
                                                            const float *bp, __m256 s[4][3])
{
    __m256 b = _mm256_load_ps(bp + (size_t)p * NR);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m256 av = _mm256_broadcast_ss(ta ? a + (size_t)p * lda + r : a + r * lda + p);
        s[l][r] = _mm256_fmadd_ps(av, b, s[l][r]);
    }
}

/* R rows by 8 columns over a depth block of kc (a at its first depth, bp
 * its packed op(B)): the partial sums start from zero (first) or from st,
 * where they go back unless fin, the last block, adds them into C (the
 * mask last on its columns). Blocks before the last are whole fours. */
QKV_ALWAYS_INLINE void dots_tile(int R, int ta, int first, int kc, const float *a, size_t lda,
                                 const float *bp, float *st, int fin, float *c, size_t ldc,
                                 __m256i last)
{
    __m256 s[4][3];
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            s[l][r] = first ? _mm256_setzero_ps() : _mm256_load_ps(st + 8 * (3 * l + r));
    int p = 0;
    for (; p + 4 <= kc; p += 4)
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++)
            dots_step(R, ta, l, p + l, a, lda, bp, s);
    for (; p < kc; p++)
        dots_step(R, ta, 0, p, a, lda, bp, s);
    if (!fin) {
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++)
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                _mm256_store_ps(st + 8 * (3 * l + r), s[l][r]);
        return;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        float *dst = c + r * ldc;
        __m256 sum =
            _mm256_add_ps(_mm256_add_ps(s[0][r], s[1][r]), _mm256_add_ps(s[2][r], s[3][r]));
        _mm256_maskstore_ps(dst, last, _mm256_add_ps(_mm256_maskload_ps(dst, last), sum));
    }
}

#define DOTS_FN(NAME, TA)                                                                   \
    static void NAME(int R, int first, int kc, const float *a, size_t lda, const float *bp, \
                     float *st, int fin, float *c, size_t ldc, __m256i last)                \
    {                                                                                       \
        switch (R) {                                                                        \
        case 1: dots_tile(1, TA, first, kc, a, lda, bp, st, fin, c, ldc, last); return;     \
        case 2: dots_tile(2, TA, first, kc, a, lda, bp, st, fin, c, ldc, last); return;     \
        default: dots_tile(3, TA, first, kc, a, lda, bp, st, fin, c, ldc, last); return;    \
        }                                                                                   \
    }

DOTS_FN(dots_n, 0)
DOTS_FN(dots_t, 1)

/* The dots order for B stored n×k, blocked as avx512_gemm.c's: for each
 * strip of NR columns and each block of QKV_DOTS_MB rows, depth blocks of
 * QKV_DOTS_KC packed in turn, 8 columns at a time and rows three at a
 * time, so that the block's rows of A (24 KiB) are read twice from L1 and
 * its packed op(B) (8 KiB) once a row group. */
static void gemm_dots(const qkv_gemm_args *g)
{
    const int m = g->m, n = g->n, k = g->k;
    _Alignas(32) float st[QKV_DOTS_MB / 3][2][4 * 3 * 8];
    const size_t lda = g->ta ? (size_t)m : (size_t)k;
    for (int j = 0; j < n; j += NR) {
        const int w = n - j < NR ? n - j : NR;
        for (int i0 = 0; i0 < m; i0 += QKV_DOTS_MB) {
            const int i1 = m - i0 < QKV_DOTS_MB ? m : i0 + QKV_DOTS_MB;
            for (int p0 = 0; p0 < k; p0 += QKV_DOTS_KC) {
                const int kc = k - p0 < QKV_DOTS_KC ? k - p0 : QKV_DOTS_KC;
                pack_b(1, kc, w, g->B + (size_t)j * k + p0, (size_t)k, qkv_direct_scratch);
                for (int h = 0; h < w; h += 8) {
                    const __m256i last = lanes8(w - h);
                    for (int i = i0; i < i1; i += 3) {
                        const int R = i1 - i < 3 ? i1 - i : 3;
                        const float *a =
                            g->ta ? g->A + (size_t)p0 * lda + i : g->A + (size_t)i * lda + p0;
                        (g->ta ? dots_t : dots_n)(R, p0 == 0, kc, a, lda, qkv_direct_scratch + h,
                                                  st[(i - i0) / 3][h / 8], p0 + kc == k,
                                                  g->C + (size_t)i * n + j + h, (size_t)n, last);
                    }
                }
            }
        }
    }
}

/* ---- the entry point ---------------------------------------------------- */

void qkv_gemm_avx2(const qkv_gemm_args *g)
{
    if (g->order == QKV_GEMM_DOTS)
        gemm_dots(g);
    else
        gemm_tiles(g);
}
#else
typedef int qkv_no_avx2_gemm; /* ISO C wants a declaration */
#endif
