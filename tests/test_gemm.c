/*
 * test_gemm.c - qkv_gemm on every kernel set: against a double-precision
 * triple loop with the rounding-error bound of a k-term sum, and bit for
 * bit against the order of additions that kernels.h promises
 * (qkv_gemm_order), on sizes that cross every tile, block and switch
 * point of every set. No timing here: that is `bench gemm`.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

static const char *const sets[] = {"portable", "avx2", "avx512"};
enum { NSETS = 3, GUARD = 64 };

/* Element (i,p) of op(A) and (p,j) of op(B). */
static qkv_real at(const qkv_real *A, int ta, int m, int k, int i, int p)
{
    return ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p];
}

static qkv_real bt(const qkv_real *B, int tb, int n, int k, int p, int j)
{
    return tb ? B[(size_t)j * k + p] : B[(size_t)p * n + j];
}

static void fill(qkv_rng *g, qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (qkv_real)(2 * qkv_rng_random(g) - 1);
}

/* One product's operands, with GUARD reals of a marker on both sides of
 * C so that a store past either end shows. */
typedef struct operands {
    int ta, tb, m, n, k;
    qkv_real *A, *B, *C0, *buf, *C;
} operands;

static const qkv_real marker = (qkv_real)-12345.5;

static operands make(qkv_rng *g, int ta, int tb, int m, int n, int k)
{
    operands o = {ta,
                  tb,
                  m,
                  n,
                  k,
                  malloc(sizeof(qkv_real) * m * k),
                  malloc(sizeof(qkv_real) * k * n),
                  malloc(sizeof(qkv_real) * m * n),
                  malloc(sizeof(qkv_real) * ((size_t)m * n + 2 * GUARD)),
                  NULL};
    ck_assert(o.A != NULL && o.B != NULL && o.C0 != NULL && o.buf != NULL);
    o.C = o.buf + GUARD;
    fill(g, o.A, (size_t)m * k);
    fill(g, o.B, (size_t)k * n);
    fill(g, o.C0, (size_t)m * n);
    return o;
}

static void drop(operands *o)
{
    free(o->A);
    free(o->B);
    free(o->C0);
    free(o->buf);
}

/* Runs qkv_gemm on o (C starting from C0 when accumulating, the guards
 * set), and checks that the guards are intact. */
static void run(operands *o, int accumulate)
{
    size_t mn = (size_t)o->m * o->n;
    for (int i = 0; i < GUARD; i++)
        o->buf[i] = o->buf[GUARD + mn + i] = marker;
    memcpy(o->C, o->C0, sizeof(qkv_real) * mn);
    qkv_gemm(o->ta, o->tb, o->m, o->n, o->k, o->A, o->B, o->C, accumulate);
    for (int i = 0; i < GUARD; i++)
        if (o->buf[i] != marker || o->buf[GUARD + mn + i] != marker)
            ck_abort_msg("%s ta=%d tb=%d %dx%dx%d: wrote outside C", qkv_kernels_name(), o->ta,
                         o->tb, o->m, o->n, o->k);
}

/* ---- against the definition --------------------------------------------- */

/* C = C0·accumulate + op(A)·op(B) within the error bound of a sum of
 * k + 1 terms in qkv_real, in any order and with or without fused
 * multiply-adds: |ĉ - c| <= γ_{k+1}·(|C0| + Σ_p |a_ip·b_pj|), where
 * γ_n = n·u/(1 - n·u) and u <= REAL_EPS is the unit roundoff (Higham,
 * Accuracy and Stability of Numerical Algorithms, §3.1). The reference
 * sum is in double, whose own error is far below that bound. */
static void check_definition(operands *o, int accumulate)
{
    run(o, accumulate);
    const double gamma = (o->k + 1) * REAL_EPS / (1 - (o->k + 1) * REAL_EPS);
    for (int i = 0; i < o->m; i++)
        for (int j = 0; j < o->n; j++) {
            size_t ij = (size_t)i * o->n + j;
            double c0 = accumulate ? o->C0[ij] : 0, s = c0, mag = fabs(c0);
            for (int p = 0; p < o->k; p++) {
                double ab =
                    (double)at(o->A, o->ta, o->m, o->k, i, p) * bt(o->B, o->tb, o->n, o->k, p, j);
                s += ab;
                mag += fabs(ab);
            }
            if (!(fabs(o->C[ij] - s) <= gamma * mag)) /* each check alone: ck_assert is slow */
                ck_abort_msg("%s ta=%d tb=%d %dx%dx%d acc=%d: C[%d,%d] = %.9g, expected %.9g "
                             "(bound %.3g)",
                             qkv_kernels_name(), o->ta, o->tb, o->m, o->n, o->k, accumulate, i, j,
                             (double)o->C[ij], s, gamma * mag);
        }
}

/* The shapes that cross the sets' tiles, blocks and switch points: every
 * size from 1 to 70 on each side (with the other sides spread over the
 * same range), the edges of the 48 that starts the blocked order, of the
 * depth blocks (256) and the packed column blocks (512), of a 144-row
 * block of A, of the set's own gemm_pack_b_min, and of the AVX2 set's
 * copy of a transposed A. */
static int shapes(int (*s)[3], int cap, const qkv_kernel_set *ks)
{
    int n = 0;
    for (int v = 1; v <= 70 && n + 3 <= cap; v++) {
        int w = 1 + (v * 37) % 70, x = 1 + (v * 53) % 70;
        s[n][0] = v, s[n][1] = w, s[n++][2] = x;
        s[n][0] = w, s[n][1] = v, s[n++][2] = x;
        s[n][0] = x, s[n][1] = w, s[n++][2] = v;
    }
    /* {3, 40, 1100}: past depth 1024 with Bᵀ, but all of it (44000 reals)
     * fits the scratch: the chain order, to 40 × 1638 = 65520 reals, and
     * dots past it; the last five: the AVX2 set's
     * copy of a transposed A (m a multiple of 64, n >= 128) */
    static const int edges[][3] = {
        {47, 48, 48},  {48, 47, 48},   {48, 48, 7},     {48, 48, 8},    {49, 49, 9},
        {50, 65, 255}, {50, 65, 256},  {50, 65, 257},   {49, 33, 513},  {13, 40, 600},
        {48, 511, 9},  {48, 512, 9},   {49, 513, 17},   {50, 1030, 20}, {143, 40, 20},
        {144, 40, 20}, {145, 40, 20},  {289, 33, 30},   {3, 2100, 40},  {47, 1500, 45},
        {5, 17, 4100}, {3, 70, 1024},  {3, 70, 1025},   {3, 40, 1100},  {2, 40, 1638},
        {2, 40, 1639}, {2, 520, 260},  {16, 512, 16},   {12, 12, 16},   {1, 1, 300},
        {7, 300, 301}, {50, 47, 1999}, {100, 40, 2048}, {64, 128, 257}, {128, 130, 33},
        {192, 160, 9}, {64, 128, 1},   {320, 140, 17},
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0] && n < cap; e++, n++)
        memcpy(s[n], edges[e], sizeof edges[e]);
    for (int d = -1; d <= 1 && ks->gemm_pack_b_min + d >= 1 && n < cap; d++, n++) {
        s[n][0] = ks->gemm_pack_b_min + d;
        s[n][1] = 70;
        s[n][2] = 33;
    }
    return n;
}

START_TEST(test_gemm_matches_the_definition_on_every_set_and_size)
{
    qkv_rng g;
    qkv_rng_seed(&g, 15);
    int tested = 0, s[256][3];
    for (int im = 0; im < NSETS; im++) {
        if (qkv_kernels_use(sets[im], NULL) != QKV_OK)
            continue;
        tested++;
        int ns = shapes(s, 256, qkv_kernels());
        for (int i = 0; i < ns; i++)
            for (int variant = 0; variant < 4; variant++) {
                operands o = make(&g, variant & 1, variant >> 1, s[i][0], s[i][1], s[i][2]);
                check_definition(&o, 0);
                check_definition(&o, 1);
                drop(&o);
            }
    }
    qkv_kernels_use("auto", NULL);
    ck_assert_int_ge(tested, 1);
}
END_TEST

/* ---- bit for bit: the order of the additions ----------------------------- */

/* c + a·b as the set computes it: an FMA (one rounding) on the vector
 * sets, a rounded product and then a rounded sum on the portable one. */
static qkv_real madd(int fused, qkv_real a, qkv_real b, qkv_real c)
{
    if (!fused) {
        qkv_real ab = a * b;
        return c + ab;
    }
#ifdef QKV_DOUBLE
    return fma(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

/* C (starting from C0, or from zeros) updated as kernels.h defines the
 * order that qkv_gemm picks for this shape: chain, blocks or dots. */
static void emulate(const operands *o, int accumulate, int fused, qkv_real *R)
{
    const int m = o->m, n = o->n, k = o->k;
    qkv_gemm_order order = QKV_GEMM_CHAIN;
    if (m >= 48 && n >= 48 && k >= 8)
        order = QKV_GEMM_BLOCKS;
    else if (o->tb && (size_t)k * (n < 64 ? n : 64) > 65536) /* 64 columns of */
        order = QKV_GEMM_DOTS; /* Bᵀ (or all, if fewer) do not fit 65536 reals */
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            qkv_real c = accumulate ? o->C0[(size_t)i * n + j] : 0;
            if (order == QKV_GEMM_CHAIN) {
                for (int p = 0; p < k; p++)
                    c = madd(fused, at(o->A, o->ta, m, k, i, p), bt(o->B, o->tb, n, k, p, j), c);
            } else if (order == QKV_GEMM_BLOCKS) {
                for (int p0 = 0; p0 < k; p0 += QKV_GEMM_KC) {
                    qkv_real t = 0;
                    for (int p = p0; p < k && p < p0 + QKV_GEMM_KC; p++)
                        t = madd(fused, at(o->A, o->ta, m, k, i, p), bt(o->B, o->tb, n, k, p, j),
                                 t);
                    c += t;
                }
            } else {
                qkv_real s[4] = {0, 0, 0, 0};
                for (int p = 0; p < k; p++)
                    s[p < k - k % 4 ? p % 4 : 0] =
                        madd(fused, at(o->A, o->ta, m, k, i, p), bt(o->B, o->tb, n, k, p, j),
                             s[p < k - k % 4 ? p % 4 : 0]);
                c += (s[0] + s[1]) + (s[2] + s[3]);
            }
            R[(size_t)i * n + j] = c;
        }
}

static void check_order(operands *o, int accumulate, int fused)
{
    size_t mn = (size_t)o->m * o->n;
    qkv_real *R = malloc(sizeof *R * mn);
    ck_assert(R != NULL);
    emulate(o, accumulate, fused, R);
    run(o, accumulate);
    for (size_t i = 0; i < mn; i++)
        if (memcmp(&o->C[i], &R[i], sizeof *R) != 0)
            ck_abort_msg("%s ta=%d tb=%d %dx%dx%d acc=%d: C[%zu] = %a, its order gives %a",
                         qkv_kernels_name(), o->ta, o->tb, o->m, o->n, o->k, accumulate, i,
                         (double)o->C[i], (double)R[i]);
    free(R);
}

/* Every set, every shape above, both modes: the same bits as the order
 * written out one element at a time, so no tiling, packing or switch
 * point of a set can change a result. */
START_TEST(test_gemm_repeats_its_order_bit_for_bit)
{
    qkv_rng g;
    qkv_rng_seed(&g, 16);
    int tested = 0, s[256][3];
    for (int im = 0; im < NSETS; im++) {
        if (qkv_kernels_use(sets[im], NULL) != QKV_OK)
            continue;
        tested++;
        int ns = shapes(s, 256, qkv_kernels()), fused = im > 0;
        for (int i = 0; i < ns; i++)
            for (int variant = 0; variant < 4; variant++) {
                operands o = make(&g, variant & 1, variant >> 1, s[i][0], s[i][1], s[i][2]);
                check_order(&o, 0, fused);
                check_order(&o, 1, fused);
                drop(&o);
            }
    }
    qkv_kernels_use("auto", NULL);
    ck_assert_int_ge(tested, 1);
}
END_TEST

/* Zeros, infinities and NaNs go where IEEE arithmetic sends them: a zero
 * row of A gives C unchanged, an infinity spreads along its row and
 * column, and a NaN in B reaches exactly its column. */
START_TEST(test_gemm_propagates_special_values_to_the_right_places)
{
    qkv_rng g;
    qkv_rng_seed(&g, 17);
    static const int dims[][3] = {{5, 7, 3}, {50, 70, 40}, {13, 600, 20}, {4, 4000, 20}};
    for (int im = 0; im < NSETS; im++) {
        if (qkv_kernels_use(sets[im], NULL) != QKV_OK)
            continue;
        for (int d = 0; d < 4; d++)
            for (int variant = 0; variant < 4; variant++) {
                operands o =
                    make(&g, variant & 1, variant >> 1, dims[d][0], dims[d][1], dims[d][2]);
                const int m = o.m, n = o.n, k = o.k, ta = o.ta, tb = o.tb;
                for (int p = 0; p < k; p++) /* row 1 of op(A) is zero */
                    o.A[ta ? (size_t)p * m + 1 : (size_t)k + p] = 0;
                o.A[ta ? (size_t)2 * m + 3 : (size_t)3 * k + 2] = (qkv_real)INFINITY;
                o.B[tb ? (size_t)4 * k + 1 : (size_t)n + 4] = (qkv_real)NAN;
                run(&o, 1);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        qkv_real c = o.C[(size_t)i * n + j];
                        if (j == 4)
                            ck_assert_msg(isnan(c), "%s: NaN column", qkv_kernels_name());
                        else if (i == 3)
                            ck_assert_msg(isinf(c) || isnan(c), "%s: inf row", qkv_kernels_name());
                        else if (i == 1)
                            ck_assert_msg(c == o.C0[(size_t)i * n + j], "%s: zero row",
                                          qkv_kernels_name());
                        else
                            ck_assert_msg(isfinite(c), "%s: finite", qkv_kernels_name());
                    }
                drop(&o);
            }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* A all tiny and B all -tiny: every product underflows to -0. */
static void underflow(operands *o)
{
#ifdef QKV_DOUBLE
    const qkv_real tiny = (qkv_real)1e-200;
#else
    const qkv_real tiny = (qkv_real)1e-30;
#endif
    for (size_t i = 0; i < (size_t)o->m * o->k; i++)
        o->A[i] = tiny;
    for (size_t i = 0; i < (size_t)o->k * o->n; i++)
        o->B[i] = -tiny;
}

/* In the blocks order C = A·B is C += A·B on a zeroed C, down to the sign
 * of zero: a block's sum whose products all underflow is -0 (fused), and
 * 0 + -0 is +0. A set that stores its first sums instead of adding them to
 * zeros must do the same; C starts full of garbage, which it must not
 * read. (The chain order starts from C's zero and keeps the -0 there.) */
START_TEST(test_gemm_overwrite_gives_positive_zero_for_underflow)
{
    qkv_rng g;
    qkv_rng_seed(&g, 18);
    static const int dims[][3] = {{64, 64, 64}, {96, 80, 300}, {48, 48, 8}};
    for (int im = 0; im < NSETS; im++) {
        if (qkv_kernels_use(sets[im], NULL) != QKV_OK)
            continue;
        for (int d = 0; d < 3; d++) {
            operands o = make(&g, 0, 0, dims[d][0], dims[d][1], dims[d][2]);
            underflow(&o); /* every product is -1e-60 (-1e-400): -0 */
            run(&o, 0);
            for (size_t i = 0; i < (size_t)o.m * o.n; i++)
                ck_assert_msg(o.C[i] == 0 && !signbit(o.C[i]), "%s %dx%dx%d: C[%zu] = %a",
                              qkv_kernels_name(), o.m, o.n, o.k, i, (double)o.C[i]);
            drop(&o);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* The chain order starts from C's zero, and keeps the sign its first
 * multiply-add gives: fused (the vector sets), tiny·-tiny + +0 rounds to
 * -0, and -0 stays; portable rounds the product to -0 first, and -0 + +0
 * is +0. A set that starts its chains from a zero of its own (C = A·B
 * without zeroing C) must do the same; C starts full of garbage. The
 * shapes take the chain order (a side under 48), one of them in two
 * depth blocks. */
START_TEST(test_gemm_chain_from_zero_keeps_the_sign_of_zero)
{
    qkv_rng g;
    qkv_rng_seed(&g, 19);
    static const int dims[][5] = {{0, 0, 21, 21, 16}, {0, 1, 21, 21, 16},  {0, 0, 12, 16, 12},
                                  {1, 0, 1, 38, 54},  {0, 0, 40, 47, 300}, {0, 1, 64, 32, 64}};
    for (int im = 0; im < NSETS; im++) {
        if (qkv_kernels_use(sets[im], NULL) != QKV_OK)
            continue;
        const int fused = strcmp(qkv_kernels_name(), "portable") != 0;
        for (int d = 0; d < 6; d++) {
            ck_assert(!qkv_gemm_blocked(dims[d][2], dims[d][3], dims[d][4]));
            operands o = make(&g, dims[d][0], dims[d][1], dims[d][2], dims[d][3], dims[d][4]);
            underflow(&o);
            run(&o, 0);
            for (size_t i = 0; i < (size_t)o.m * o.n; i++)
                ck_assert_msg(o.C[i] == 0 && !signbit(o.C[i]) == !fused,
                              "%s ta=%d tb=%d %dx%dx%d: C[%zu] = %a", qkv_kernels_name(), o.ta,
                              o.tb, o.m, o.n, o.k, i, (double)o.C[i]);
            drop(&o);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Depth 0: C = A·B is all zeros, whatever C held, and C += A·B leaves C
 * as it was, on every set (a chain of no steps writes nothing). */
START_TEST(test_gemm_depth_zero)
{
    static const int dims[][2] = {{5, 7}, {64, 64}, {1, 40}};
    qkv_real a[1] = {0}, b[1] = {0}, c[64 * 64];
    for (int im = 0; im < NSETS; im++) {
        if (qkv_kernels_use(sets[im], NULL) != QKV_OK)
            continue;
        for (int d = 0; d < 3; d++)
            for (int acc = 0; acc < 2; acc++) {
                const size_t mn = (size_t)dims[d][0] * dims[d][1];
                for (size_t i = 0; i < mn; i++)
                    c[i] = 777;
                qkv_gemm(0, 0, dims[d][0], dims[d][1], 0, a, b, c, acc);
                for (size_t i = 0; i < mn; i++)
                    ck_assert_msg(c[i] == (acc ? 777 : 0), "%s %dx%dx0 acc=%d: C[%zu] = %g",
                                  qkv_kernels_name(), dims[d][0], dims[d][1], acc, i, (double)c[i]);
            }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

Suite *gemm_suite(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gemm_matches_the_definition_on_every_set_and_size);
    tcase_add_test(tc, test_gemm_overwrite_gives_positive_zero_for_underflow);
    tcase_add_test(tc, test_gemm_chain_from_zero_keeps_the_sign_of_zero);
    tcase_add_test(tc, test_gemm_depth_zero);
    tcase_add_test(tc, test_gemm_repeats_its_order_bit_for_bit);
    tcase_add_test(tc, test_gemm_propagates_special_values_to_the_right_places);
    suite_add_tcase(s, tc);
    return s;
}
