/*
 * avx512_gemm.c - the AVX-512 kernel set's matrix product (its gemm
 * field): register tiles of up to 12×32 for every order that qkv_gemm
 * promises (kernels.h, qkv_gemm_order), op(B) packed with vector moves
 * (and transposed in registers when B is stored n×k), A read in place.
 * Compiled with -mavx512f; runs only after dispatch.c found AVX-512F.
 *
 * The orders are kept exactly, so every path of the set gives the same
 * bits: an FMA chain per element of C, from C itself (chain) or from zero
 * and then added into C per 256-deep block (blocks); or, for dots, four
 * partial FMA chains, added at the end.
 */
#include "kernels/kernels.h"

#ifdef QKV_HAVE_X86_KERNELS
#include "kernels/avx512.h"

#define MR 12  /* rows of the largest register tile */
#define NR 32  /* its columns: two zmm */
#define MC 144 /* rows of A per pass over a packed block of B */

/* ---- packing op(B) ------------------------------------------------------ */

/* Panels of NR columns, depth-major (row p of a panel is NR floats),
 * zero-padded past nc: depth [0,kc) × columns [0,nc) of op(B), where B
 * is stored k×n with row stride ldb (tb = 0) or n×k (tb = 1). */
static void pack_b(int tb, int kc, int nc, const float *B, size_t ldb, float *bp)
{
    for (int j0 = 0; j0 < nc; j0 += NR, bp += (size_t)kc * NR) {
        int w = nc - j0 < NR ? nc - j0 : NR;
        if (!tb) {
            const float *src = B + j0;
            __mmask16 m0 = lanes(w), m1 = w > 16 ? lanes(w - 16) : 0;
            for (int p = 0; p < kc; p++, src += ldb) {
                _mm512_store_ps(bp + p * NR, _mm512_maskz_loadu_ps(m0, src));
                _mm512_store_ps(bp + p * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
            }
            continue;
        }
        for (int h = 0; h < 2; h++) { /* 16 columns (rows of B) at a time */
            int rows = w - 16 * h;
            const float *src = B + (size_t)(j0 + 16 * h) * ldb;
            for (int p0 = 0; p0 < kc; p0 += 16) {
                int d = kc - p0 < 16 ? kc - p0 : 16;
                __m512 r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = j < rows ? _mm512_maskz_loadu_ps(lanes(d), src + (size_t)j * ldb + p0)
                                    : _mm512_setzero_ps();
                transpose16_regs(r);
                for (int p = 0; p < d; p++)
                    _mm512_store_ps(bp + (size_t)(p0 + p) * NR + 16 * h, r[p]);
            }
        }
    }
}

/* ---- the register tile (chain and blocks orders) ------------------------ */
/*
 * C (R×w, row stride ldc) and the product of R rows of op(A) with a
 * depth-kc strip of op(B) (NV zmm wide, row stride ldb, the last vector
 * masked by last): from C (add = 0), or from zero and then added into C
 * (add = 1), or from zero and then added to zero, C unread (add = 2: the
 * same bits as add = 1 on a zeroed C, -0 included), or from zero, C unread
 * (add = 3: the same bits as add = 0 on a zeroed C, -0 included). Row r of
 * op(A) at depth p is a[r·lda + p] (ta = 0) or a[p·lda + r] (ta = 1).
 */
QKV_ALWAYS_INLINE void tile(int R, int NV, int ta, int add, int kc, const float *a, size_t lda,
                            const float *b, size_t ldb, float *c, size_t ldc, __mmask16 last)
{
    __m512 acc0[MR], acc1[MR];
    const __mmask16 bm0 = NV == 1 ? last : 0xFFFF;
    /* the loops over r are unrolled early, so that acc lives in registers */
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        if (add == 1) { /* C is needed only at the end: fetch it meanwhile */
            _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + r * ldc + 16), _MM_HINT_T0);
        }
        acc0[r] = add ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(bm0, c + r * ldc);
        acc1[r] =
            add || NV == 1 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(last, c + r * ldc + 16);
    }
    for (int p = 0; p < kc; p++, b += ldb) {
        __m512 b0 = _mm512_maskz_loadu_ps(bm0, b);
        __m512 b1 = NV == 2 ? _mm512_maskz_loadu_ps(last, b + 16) : b0;
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(ta ? a[(size_t)p * lda + r] : a[r * lda + p]);
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            if (NV == 2)
                acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        float *row = c + r * ldc;
        if (add == 1 || add == 2)
            acc0[r] = _mm512_add_ps(
                add == 1 ? _mm512_maskz_loadu_ps(bm0, row) : _mm512_setzero_ps(), acc0[r]);
        _mm512_mask_storeu_ps(row, bm0, acc0[r]);
        if (NV == 2) {
            if (add == 1 || add == 2)
                acc1[r] = _mm512_add_ps(add == 1 ? _mm512_maskz_loadu_ps(last, row + 16)
                                                 : _mm512_setzero_ps(),
                                        acc1[r]);
            _mm512_mask_storeu_ps(row + 16, last, acc1[r]);
        }
    }
}

/* Every tile shape as a function of its own, with R, NV, ta and add as
 * constants (so that the accumulators stay in registers). */
typedef void (*tile_fn)(int kc, const float *a, size_t lda, const float *b, size_t ldb, float *c,
                        size_t ldc, __mmask16 last);
#define TILE_FN(R, NV, TA, ADD)                                                                    \
    static void tile_##R##_##NV##_##TA##_##ADD(int kc, const float *a, size_t lda, const float *b, \
                                               size_t ldb, float *c, size_t ldc, __mmask16 last)   \
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
    TILE_FN(6, NV, TA, ADD)    \
    TILE_FN(7, NV, TA, ADD)    \
    TILE_FN(8, NV, TA, ADD)    \
    TILE_FN(9, NV, TA, ADD)    \
    TILE_FN(10, NV, TA, ADD)   \
    TILE_FN(11, NV, TA, ADD)   \
    TILE_FN(12, NV, TA, ADD)
/* clang-format on */
#define TILE_LIST(NV, TA, ADD)                                                                    \
    {                                                                                             \
        tile_1_##NV##_##TA##_##ADD, tile_2_##NV##_##TA##_##ADD, tile_3_##NV##_##TA##_##ADD,       \
            tile_4_##NV##_##TA##_##ADD, tile_5_##NV##_##TA##_##ADD, tile_6_##NV##_##TA##_##ADD,   \
            tile_7_##NV##_##TA##_##ADD, tile_8_##NV##_##TA##_##ADD, tile_9_##NV##_##TA##_##ADD,   \
            tile_10_##NV##_##TA##_##ADD, tile_11_##NV##_##TA##_##ADD, tile_12_##NV##_##TA##_##ADD \
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
 * depth [p0, p0 + kc): tiles of balanced height (at most MR rows). */
static void strip(const qkv_gemm_args *g, int add, int i0, int mc, int j, int w, int p0, int kc,
                  const float *b, size_t ldb)
{
    const int nv = w > 16 ? 2 : 1;
    const __mmask16 last = lanes(w - 16 * (nv - 1));
    const tile_fn *fn = tiles[nv - 1][g->ta][add];
    const size_t lda = g->ta ? (size_t)g->m : (size_t)g->k;
    const int nt = (mc + MR - 1) / MR;
    for (int t = 0, i = i0; t < nt; t++) {
        int R = mc / nt + (t < mc % nt);
        const float *a = g->ta ? g->A + (size_t)p0 * lda + i : g->A + (size_t)i * lda + p0;
        fn[R - 1](kc, a, lda, b, ldb, g->C + (size_t)i * g->n + j, (size_t)g->n, last);
        i += R;
    }
}

static void gemm_tiles(const qkv_gemm_args *g)
{
    const int blocks = g->order == QKV_GEMM_BLOCKS, m = g->m, n = g->n, k = g->k;
    const int packed = g->tb || m >= qkv_kernels_avx512.gemm_pack_b_min;
    const size_t ldb = g->tb ? (size_t)k : (size_t)n;
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
                for (int jr = 0; jr < nc; jr += NR) {
                    int w = nc - jr < NR ? nc - jr : NR;
                    if (packed)
                        strip(g, add, ic, mc, jc + jr, w, pc, kc, qkv_gemm_pack_b + (size_t)jr * kc,
                              NR);
                    else
                        strip(g, add, ic, mc, jc + jr, w, pc, kc, bsrc + jr, ldb);
                }
            }
        }
    }
}

/* ---- the dots order ----------------------------------------------------- */
/*
 * c[i,j] += (s0 + s1) + (s2 + s3), where s_l is an FMA chain over the
 * products A(i,p)·B(p,j) for p = l mod 4 in ascending p (the last k mod 4
 * products go to s0): kernels.h's dots order, with the lanes running over
 * j. bp is op(B) packed k×NR.
 */
QKV_ALWAYS_INLINE void dots_step(int R, int NV, int ta, int l, int p, const float *a, size_t lda,
                                 const float *bp, __m512 s[4][3][2])
{
    __m512 b0 = _mm512_load_ps(bp + (size_t)p * NR), b1 = _mm512_load_ps(bp + (size_t)p * NR + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m512 av = _mm512_set1_ps(ta ? a[(size_t)p * lda + r] : a[r * lda + p]);
        s[l][r][0] = _mm512_fmadd_ps(av, b0, s[l][r][0]);
        if (NV == 2)
            s[l][r][1] = _mm512_fmadd_ps(av, b1, s[l][r][1]);
    }
}

/* R rows by NV zmm of columns over a depth block of kc (a at its first
 * depth, bp its packed op(B)): the partial sums start from zero (first)
 * or from st, where they go back unless fin, the last block, adds them
 * into C (the mask last on the last vector). Blocks before the last are
 * whole fours. */
QKV_ALWAYS_INLINE void dots_tile(int R, int NV, int ta, int first, int kc, const float *a,
                                 size_t lda, const float *bp, float *st, int fin, float *c,
                                 size_t ldc, __mmask16 last)
{
    __m512 s[4][3][2];
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 2
            for (int q = 0; q < 2; q++)
                s[l][r][q] = first || q >= NV ? _mm512_setzero_ps()
                                              : _mm512_load_ps(st + 16 * (6 * l + 2 * r + q));
    int p = 0;
    for (; p + 4 <= kc; p += 4)
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++)
            dots_step(R, NV, ta, l, p + l, a, lda, bp, s);
    for (; p < kc; p++)
        dots_step(R, NV, ta, 0, p, a, lda, bp, s);
    if (!fin) {
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++)
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
#pragma GCC unroll 2
                for (int q = 0; q < NV; q++)
                    _mm512_store_ps(st + 16 * (6 * l + 2 * r + q), s[l][r][q]);
        return;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int q = 0; q < NV; q++) {
            __mmask16 mq = q == NV - 1 ? last : 0xFFFF;
            float *dst = c + r * ldc + 16 * q;
            __m512 sum = _mm512_add_ps(_mm512_add_ps(s[0][r][q], s[1][r][q]),
                                       _mm512_add_ps(s[2][r][q], s[3][r][q]));
            _mm512_mask_storeu_ps(dst, mq, _mm512_add_ps(_mm512_maskz_loadu_ps(mq, dst), sum));
        }
}

#define DOTS_FN(NAME, NV, TA)                                                                \
    static void NAME(int R, int first, int kc, const float *a, size_t lda, const float *bp,  \
                     float *st, int fin, float *c, size_t ldc, __mmask16 last)               \
    {                                                                                        \
        switch (R) {                                                                         \
        case 1: dots_tile(1, NV, TA, first, kc, a, lda, bp, st, fin, c, ldc, last); return;  \
        case 2: dots_tile(2, NV, TA, first, kc, a, lda, bp, st, fin, c, ldc, last); return;  \
        default: dots_tile(3, NV, TA, first, kc, a, lda, bp, st, fin, c, ldc, last); return; \
        }                                                                                    \
    }

DOTS_FN(dots_1n, 1, 0)
DOTS_FN(dots_1t, 1, 1)
DOTS_FN(dots_2n, 2, 0)
DOTS_FN(dots_2t, 2, 1)

/* The dots order for B stored n×k (the only case that has it): for each
 * strip of NR columns and each block of QKV_DOTS_MB rows, depth blocks of
 * QKV_DOTS_KC packed in turn, then rows of C three at a time. The packed
 * block of op(B) (16 KiB) stays in L1 while all the block's rows read it,
 * and the partial sums wait in st between depth blocks: any depth, no
 * scratch limit (before, a whole-depth panel streamed from L2 for every
 * three rows, and a depth past the scratch fell back to scalar loops). */
static void gemm_dots(const qkv_gemm_args *g)
{
    const int m = g->m, n = g->n, k = g->k;
    _Alignas(64) float st[QKV_DOTS_MB / 3][4 * 3 * 2 * 16];
    const size_t lda = g->ta ? (size_t)m : (size_t)k;
    for (int j = 0; j < n; j += NR) {
        const int w = n - j < NR ? n - j : NR, nv = w > 16 ? 2 : 1;
        const __mmask16 last = lanes(w - 16 * (nv - 1));
        for (int i0 = 0; i0 < m; i0 += QKV_DOTS_MB) {
            const int i1 = m - i0 < QKV_DOTS_MB ? m : i0 + QKV_DOTS_MB;
            for (int p0 = 0; p0 < k; p0 += QKV_DOTS_KC) {
                const int kc = k - p0 < QKV_DOTS_KC ? k - p0 : QKV_DOTS_KC;
                pack_b(1, kc, w, g->B + (size_t)j * k + p0, (size_t)k, qkv_direct_scratch);
                for (int i = i0; i < i1; i += 3) {
                    const int R = i1 - i < 3 ? i1 - i : 3;
                    const float *a =
                        g->ta ? g->A + (size_t)p0 * lda + i : g->A + (size_t)i * lda + p0;
                    float *c = g->C + (size_t)i * n + j, *sp = st[(i - i0) / 3];
                    const int first = p0 == 0, fin = p0 + kc == k;
                    if (nv == 2)
                        (g->ta ? dots_2t : dots_2n)(R, first, kc, a, lda, qkv_direct_scratch, sp,
                                                    fin, c, (size_t)n, last);
                    else
                        (g->ta ? dots_1t : dots_1n)(R, first, kc, a, lda, qkv_direct_scratch, sp,
                                                    fin, c, (size_t)n, last);
                }
            }
        }
    }
}

/* ---- the entry point ---------------------------------------------------- */

void qkv_gemm_avx512(const qkv_gemm_args *g)
{
    if (g->order == QKV_GEMM_DOTS)
        gemm_dots(g);
    else
        gemm_tiles(g);
}
#else
typedef int qkv_no_avx512_gemm; /* ISO C wants a declaration */
#endif
