/*
 * test_kernels.c - matmul variants against a double-precision triple loop,
 * softmax rows (against libm, and bit for bit against the generic path on
 * every kernel set), rows gathered and scatter-added.
 */
#include <stdlib.h>
#include <string.h>

#include "tests.h"

/* Reference C = op(A)·op(B) in double, straight from the definition, and
 * the error bound of a k-term sum computed in qkv_real: γ_k·Σ|a||b| with
 * γ_k = k·ε/(1 - k·ε) (Higham, Accuracy and Stability, §3.1). */
static void ref_gemm(int ta, int tb, int m, int n, int k, const qkv_real *A, const qkv_real *B,
                     double *C, double *bound)
{
    double gamma = k * REAL_EPS / (1 - k * REAL_EPS);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[(size_t)p * m + i] : A[(size_t)i * k + p];
                double b = tb ? B[(size_t)j * k + p] : B[(size_t)p * n + j];
                s += a * b;
                mag += fabs(a * b);
            }
            C[(size_t)i * n + j] = s;
            bound[(size_t)i * n + j] = gamma * mag;
        }
}

static void fill(qkv_rng *g, qkv_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (qkv_real)(2 * qkv_rng_random(g) - 1);
}

/* Checks one product of every variant against the reference. */
static void check_gemm(qkv_rng *g, int ta, int tb, int m, int n, int k)
{
    qkv_real *A = malloc(sizeof *A * m * k), *B = malloc(sizeof *B * k * n);
    qkv_real *C = malloc(sizeof *C * m * n);
    double *R = malloc(sizeof *R * m * n), *E = malloc(sizeof *E * m * n);
    fill(g, A, (size_t)m * k);
    fill(g, B, (size_t)k * n);
    fill(g, C, (size_t)m * n);
    ref_gemm(ta, tb, m, n, k, A, B, R, E);
    qkv_gemm(ta, tb, m, n, k, A, B, C, 0);
    for (int i = 0; i < m * n; i++)
        ck_assert_msg(fabs(C[i] - R[i]) <= E[i] + REAL_EPS * fabs(R[i]),
                      "%s ta=%d tb=%d %dx%dx%d: C[%d] = %.9g, expected %.9g", qkv_kernels_name(),
                      ta, tb, m, n, k, i, (double)C[i], R[i]);
    /* accumulate mode adds on top: one more rounding per entry */
    qkv_gemm(ta, tb, m, n, k, A, B, C, 1);
    for (int i = 0; i < m * n; i++)
        ck_assert_msg(fabs(C[i] - 2 * R[i]) <= 2 * E[i] + 3 * REAL_EPS * fabs(2 * R[i]),
                      "%s accumulate %dx%dx%d", qkv_kernels_name(), m, n, k);
    free(A);
    free(B);
    free(C);
    free(R);
    free(E);
}

/* Every implementation this CPU has (the portable one always), every
 * variant, on odd sizes that leave partial tiles and partial blocks. */
START_TEST(test_gemm_paths_match_the_definition_on_odd_sizes)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    static const int sizes[] = {1, 3, 17, 63, 65};
    /* blocked sizes, and the attention shapes (n, k <= 16: register transpose) */
    static const int big[7][3] = {{130, 600, 300}, {48, 48, 8},  {97, 65, 513}, {49, 50, 7},
                                  {12, 12, 16},    {16, 16, 16}, {5, 13, 11}};
    qkv_rng g;
    qkv_rng_seed(&g, 1);
    int tested = 0;
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        ck_assert_str_eq(qkv_kernels_name(), impls[im]);
        tested++;
        for (int variant = 0; variant < 4; variant++) {
            int ta = variant & 1, tb = variant >> 1;
            for (int si = 0; si < 5; si++)
                for (int sj = 0; sj < 5; sj++)
                    check_gemm(&g, ta, tb, sizes[si], sizes[sj], sizes[(si + 2 * sj) % 5]);
            for (int b = 0; b < 7; b++)
                check_gemm(&g, ta, tb, big[b][0], big[b][1], big[b][2]);
        }
    }
    qkv_kernels_use("auto", NULL);
    ck_assert_int_ge(tested, 1);
    ck_assert_int_eq(qkv_kernels_use("sse9", NULL), QKV_ERR_ARG);
}
END_TEST

START_TEST(test_softmax_rows_match_the_tutorial)
{
    /* the tutorial's table: [1,2,3] -> 0.09, 0.24, 0.67 (exactly e^i / Σ e^j) */
    const qkv_real x[3] = {1, 2, 3};
    qkv_real y[3];
    qkv_softmax_rows(y, x, 1, 3);
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    ASSERT_NEAR(y[0], exp(1.0) / z, 2 * REAL_EPS);
    ASSERT_NEAR(y[1], exp(2.0) / z, 2 * REAL_EPS);
    ASSERT_NEAR(y[2], exp(3.0) / z, 4 * REAL_EPS);
    ASSERT_NEAR(y[0], 0.0900306, 1e-7);
    ASSERT_NEAR(y[1], 0.2447285, 1e-7);
    ASSERT_NEAR(y[2], 0.6652410, 1e-7);
}
END_TEST

/* Every kernel set's softmax against libm's exp in double, on rows of
 * every length from 1 to 37 (full vectors and ragged tails) with spreads
 * up to ±40, and masked entries. Bound: the vector paths round x - max to
 * float first, which moves e^(x-max) by up to |x-max|·ε relative; then e^x
 * within 2 ulp, the sum and the scaling: 8 ulp more. */
START_TEST(test_softmax_paths_agree_with_libm)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int n = 1; n <= 37; n++) {
            qkv_real x[37], y[37];
            double ref[37], mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                x[j] = (qkv_real)(80 * qkv_rng_random(&g) - 40);
                if (n > 3 && j % 5 == 1)
                    x[j] = -INFINITY;
                mx = fmax(mx, x[j]);
            }
            for (int j = 0; j < n; j++)
                sum += ref[j] = exp((double)x[j] - mx);
            qkv_softmax_rows(y, x, 1, (size_t)n);
            for (int j = 0; j < n; j++) {
                double want = ref[j] / sum;
                if (isinf(x[j]))
                    ck_assert_msg(y[j] == 0, "%s: masked entry %g", impls[im], (double)y[j]);
                else
                    ck_assert_msg(
                        fabs(y[j] - want) <= (8 + fabs(x[j] - mx)) * REAL_EPS * want + 1e-37,
                        "%s n=%d j=%d: %.9g, expected %.9g", impls[im], n, j, (double)y[j], want);
            }
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* The softmax rows as the generic path computed them before the sets had
 * whole-row kernels, spelled out with the set's own pieces: softmax16 for
 * short rows when the set has one; else the row maximum (NaNs skipped), the
 * set's exps, and one multiply by (qkv_real)(1/sum). */
static void ref_softmax_rows(const qkv_kernel_set *k, int short_rows, qkv_real *y,
                             const qkv_real *x, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        if (short_rows && k->softmax16 != NULL && n <= 16) {
            k->softmax16(n, x, y);
            continue;
        }
        double mx = -INFINITY;
        for (size_t j = 0; j < n; j++)
            if (x[j] > mx)
                mx = x[j];
        if (mx == -INFINITY) {
            for (size_t j = 0; j < n; j++)
                y[j] = 0;
            continue;
        }
        double sum = k->exps(n, x, (qkv_real)mx, y);
        if (sum == 0)
            continue;
        qkv_real inv = (qkv_real)(1 / sum);
        for (size_t j = 0; j < n; j++)
            y[j] *= inv;
    }
}

/* Nonzero when a and b hold the same bits. */
static int same_bits(qkv_real a, qkv_real b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* qkv_softmax_rows on every kernel set gives exactly the reference's bits,
 * out of place and in place, on rows of every length from 1 to 200 with
 * spreads small and large, scattered -inf entries, fully masked rows, and
 * rows with NaN and +inf entries. */
START_TEST(test_softmax_rows_keep_their_bits_on_every_path)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    enum { ROWS = 7, NMAX = 200 };
    qkv_real *x = malloc(sizeof *x * ROWS * NMAX), *y = malloc(sizeof *y * ROWS * NMAX);
    qkv_real *want = malloc(sizeof *want * ROWS * NMAX);
    qkv_rng g;
    qkv_rng_seed(&g, 21);
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        const qkv_kernel_set *k = qkv_kernels();
        for (size_t n = 1; n <= NMAX; n++) {
            for (size_t r = 0; r < ROWS; r++) {
                const double spread = r % 2 ? 80 : 4;
                for (size_t j = 0; j < n; j++) {
                    qkv_real *v = &x[r * n + j];
                    *v = (qkv_real)(spread * qkv_rng_random(&g) - spread / 2);
                    if (r == 2 && qkv_rng_random(&g) < 0.3)
                        *v = -INFINITY; /* some masked */
                    if (r == 3)
                        *v = -INFINITY; /* all masked */
                    if (r == 4 && j == n / 2)
                        *v = NAN;
                    if (r == 5 && j == n / 3)
                        *v = INFINITY;
                }
            }
            if (k->softmax_rows != NULL) { /* the set's own kernel, on short rows too */
                ref_softmax_rows(k, 0, want, x, ROWS, n);
                k->softmax_rows(y, x, ROWS, n);
                for (size_t i = 0; i < ROWS * n; i++)
                    ck_assert_msg(same_bits(y[i], want[i]),
                                  "%s kernel n=%zu row %zu entry %zu: %a, not %a (x %a)", impls[im],
                                  n, i / n, i % n, (double)y[i], (double)want[i], (double)x[i]);
            }
            ref_softmax_rows(k, 1, want, x, ROWS, n);
            qkv_softmax_rows(y, x, ROWS, n);
            for (size_t i = 0; i < ROWS * n; i++)
                ck_assert_msg(same_bits(y[i], want[i]), "%s n=%zu row %zu entry %zu: %a, not %a",
                              impls[im], n, i / n, i % n, (double)y[i], (double)want[i]);
            qkv_softmax_rows(x, x, ROWS, n); /* in place */
            for (size_t i = 0; i < ROWS * n; i++)
                ck_assert_msg(same_bits(x[i], want[i]), "%s in place n=%zu row %zu entry %zu",
                              impls[im], n, i / n, i % n);
        }
    }
    qkv_kernels_use("auto", NULL);
    free(x);
    free(y);
    free(want);
}
END_TEST

START_TEST(test_softmax_rows_are_shift_invariant_and_sum_to_one)
{
    const qkv_real x[4] = {1, 2, 3, 4}, xs[4] = {1001, 1002, 1003, 1004};
    qkv_real y[4], ys[4];
    qkv_softmax_rows(y, x, 1, 4);
    qkv_softmax_rows(ys, xs, 1, 4);
    ASSERT_NEAR(qkv_sum_real(y, 4), 1, 4 * REAL_EPS);
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(y[i], ys[i], 4 * REAL_EPS);
}
END_TEST

/* Gathers, scatter-adds and zeroing on every kernel set against plain
 * loops; all are exact (copies, and the same additions in the same order). */
START_TEST(test_gather_scatter_zero_on_every_path)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    static const int ids[7] = {3, 0, 3, 5, 1, 3, 0}; /* repeats accumulate in order */
    static const size_t widths[] = {1, 3, 8, 16, 17, 40};
    qkv_rng g;
    qkv_rng_seed(&g, 11);
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            size_t d = widths[w];
            qkv_real table[6 * 40], rows[7 * 40], want[6 * 40], got[7 * 40 + 1];
            fill(&g, table, 6 * d);
            fill(&g, rows, 7 * d);
            for (size_t j = 0; j < d; j++) /* a zero row, which scatter may skip */
                rows[2 * d + j] = 0;
            got[7 * d] = 42; /* a sentinel just past the end */
            qkv_gather_rows(got, table, ids, 7, d);
            for (size_t i = 0; i < 7 * d; i++)
                ck_assert_msg(got[i] == table[(size_t)ids[i / d] * d + i % d],
                              "%s gather d=%zu entry %zu", impls[im], d, i);
            ck_assert(got[7 * d] == 42);
            memcpy(want, table, sizeof(qkv_real) * 6 * d);
            for (size_t i = 0; i < 7; i++)
                for (size_t j = 0; j < d; j++)
                    want[(size_t)ids[i] * d + j] += rows[i * d + j];
            qkv_scatter_add_rows(table, rows, ids, 7, d);
            for (size_t i = 0; i < 6 * d; i++)
                ck_assert_msg(table[i] == want[i], "%s scatter d=%zu entry %zu", impls[im], d, i);
            qkv_zero(got, 7 * d); /* and zeroing, up to the sentinel */
            for (size_t i = 0; i < 7 * d; i++)
                ck_assert_msg(got[i] == 0, "%s zero d=%zu entry %zu", impls[im], d, i);
            ck_assert(got[7 * d] == 42);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_gemm_paths_match_the_definition_on_odd_sizes);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_softmax_rows_match_the_tutorial);
    tcase_add_test(tc, test_softmax_rows_are_shift_invariant_and_sum_to_one);
    tcase_add_test(tc, test_softmax_paths_agree_with_libm);
    tcase_add_test(tc, test_softmax_rows_keep_their_bits_on_every_path);
    tcase_add_test(tc, test_gather_scatter_zero_on_every_path);
    suite_add_tcase(s, tc);
    return s;
}
