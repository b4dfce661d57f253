/*
 * test_kernels.c - matmul variants against a double-precision triple loop,
 * softmax rows (against libm, and bit for bit against the generic path on
 * every kernel set), rows gathered and scatter-added, and the element-wise
 * maths (exp, log, tanh, sigmoid, GELU) against libm in double.
 */
#include <float.h>
#include <stdint.h>
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
        CHECK_EACH(fabs(C[i] - R[i]) <= E[i] + REAL_EPS * fabs(R[i]),
                   "%s ta=%d tb=%d %dx%dx%d: C[%d] = %.9g, expected %.9g", qkv_kernels_name(), ta,
                   tb, m, n, k, i, (double)C[i], R[i]);
    /* accumulate mode adds on top: one more rounding per entry */
    qkv_gemm(ta, tb, m, n, k, A, B, C, 1);
    for (int i = 0; i < m * n; i++)
        CHECK_EACH(fabs(C[i] - 2 * R[i]) <= 2 * E[i] + 3 * REAL_EPS * fabs(2 * R[i]),
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

/* A kernel set's name matches exactly: no spaces, no case folding, no
 * prefix. A refused name is quoted in the error, and the set in use stays
 * as it was. */
START_TEST(test_kernel_set_names_match_exactly)
{
    static const char *const lax[] = {"portable ", " portable", "PORTABLE", "portablex", "", NULL};
    ck_assert_int_eq(qkv_kernels_use("portable", NULL), QKV_OK);
    for (size_t i = 0; i < sizeof lax / sizeof lax[0]; i++) {
        qkv_error err = qkv_error_none();
        ck_assert_int_eq(qkv_kernels_use(lax[i], &err), QKV_ERR_ARG);
        ck_assert_str_eq(qkv_kernels_name(), "portable");
        char quoted[32];
        snprintf(quoted, sizeof quoted, "'%s'", lax[i] != NULL ? lax[i] : "(null)");
        ck_assert_msg(strstr(err.message, quoted) != NULL, "%s", err.message);
    }
    qkv_kernels_use("auto", NULL);
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
                    CHECK_EACH(y[j] == 0, "%s: masked entry %g", impls[im], (double)y[j]);
                else
                    CHECK_EACH(fabs(y[j] - want) <= (8 + fabs(x[j] - mx)) * REAL_EPS * want + 1e-37,
                               "%s n=%d j=%d: %.9g, expected %.9g", impls[im], n, j, (double)y[j],
                               want);
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

/* Softmax's backward on every kernel set: a hand-worked row, then the
 * definition's bits (the dot product summed in double over j ascending,
 * each term in double and rounded once before it is added to dx) on rows
 * of 1 to 70 entries in blocks of 1 to 40 rows (so the vector sets' blocks
 * of 8 and 16 rows and their ragged ends), with large magnitudes, an inf
 * in y and a NaN in dy. */
START_TEST(test_softmax_backward_keeps_its_bits_on_every_set)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    enum { RMAX = 40, NMAX = 70 };
    qkv_real *y = malloc(sizeof *y * RMAX * NMAX), *dy = malloc(sizeof *dy * RMAX * NMAX);
    qkv_real *dx = malloc(sizeof *dx * RMAX * NMAX), *want = malloc(sizeof *want * RMAX * NMAX);
    qkv_rng g;
    qkv_rng_seed(&g, 23);
    int tested = 0;
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        tested++;
        /* y = (1/2, 1/2), dy = (1, 0): the dot is 1/2, so dx = (1/4, -1/4) */
        const qkv_real hy[2] = {0.5, 0.5}, hdy[2] = {1, 0};
        qkv_real hdx[2] = {1, 0};
        qkv_softmax_backward_rows(hdx, hy, hdy, 1, 2);
        ck_assert_msg(hdx[0] == 1.25 && hdx[1] == -0.25, "%s: dx = (%g, %g), not (1.25, -0.25)",
                      impls[im], (double)hdx[0], (double)hdx[1]);
        for (size_t n = 1; n <= NMAX; n += (n < 20 ? 1 : 7))
            for (size_t rows = 1; rows <= RMAX; rows += (rows < 18 ? 1 : 5)) {
                for (size_t i = 0; i < rows * n; i++) {
                    y[i] = (qkv_real)qkv_rng_random(&g);
                    dy[i] = (qkv_real)((qkv_rng_random(&g) - 0.5) * (i % 5 == 0 ? 1e30 : 3));
                    dx[i] = want[i] = (qkv_real)(qkv_rng_random(&g) - 0.5);
                }
                if (rows > 2 && n > 3) {
                    y[n + 2] = INFINITY;
                    dy[2 * n + 1] = NAN;
                }
                for (size_t r = 0; r < rows; r++) {
                    const qkv_real *yr = y + r * n, *gr = dy + r * n;
                    double dot = 0;
                    for (size_t j = 0; j < n; j++)
                        dot += (double)gr[j] * (double)yr[j];
                    for (size_t j = 0; j < n; j++)
                        want[r * n + j] += (qkv_real)((double)yr[j] * ((double)gr[j] - dot));
                }
                qkv_softmax_backward_rows(dx, y, dy, rows, n);
                for (size_t i = 0; i < rows * n; i++)
                    CHECK_EACH(same_bits(dx[i], want[i]),
                               "%s n=%zu rows=%zu row %zu entry %zu: %a, not %a", impls[im], n,
                               rows, i / n, i % n, (double)dx[i], (double)want[i]);
            }
    }
    qkv_kernels_use("auto", NULL);
    ck_assert_int_ge(tested, 1);
    free(y);
    free(dy);
    free(dx);
    free(want);
}
END_TEST

/* qkv_softmax_rows on every kernel set gives exactly the reference's bits,
 * out of place and in place, on rows of every length from 1 to 200 with
 * spreads small and large, scattered -inf entries, fully masked rows, and
 * rows with NaN and +inf entries: seven kinds of row in turn, 37 rows, so
 * that a set working on blocks of rows meets whole blocks of 8 and 16 and
 * a ragged last one, with every kind at every place in a block. */
START_TEST(test_softmax_rows_keep_their_bits_on_every_path)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    enum { ROWS = 37, KINDS = 7, NMAX = 200 };
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
                const size_t kind = r % KINDS;
                const double spread = kind % 2 ? 80 : 4;
                for (size_t j = 0; j < n; j++) {
                    qkv_real *v = &x[r * n + j];
                    *v = (qkv_real)(spread * qkv_rng_random(&g) - spread / 2);
                    if (kind == 2 && qkv_rng_random(&g) < 0.3)
                        *v = -INFINITY; /* some masked */
                    if (kind == 3)
                        *v = -INFINITY; /* all masked */
                    if (kind == 4 && j == n / 2)
                        *v = NAN;
                    if (kind == 5 && j == n / 3)
                        *v = INFINITY;
                }
            }
            if (k->softmax_rows != NULL) { /* the set's own kernel, on short rows too */
                ref_softmax_rows(k, 0, want, x, ROWS, n);
                k->softmax_rows(y, x, ROWS, n);
                for (size_t i = 0; i < ROWS * n; i++)
                    CHECK_EACH(same_bits(y[i], want[i]),
                               "%s kernel n=%zu row %zu entry %zu: %a, not %a (x %a)", impls[im], n,
                               i / n, i % n, (double)y[i], (double)want[i], (double)x[i]);
            }
            ref_softmax_rows(k, 1, want, x, ROWS, n);
            qkv_softmax_rows(y, x, ROWS, n);
            for (size_t i = 0; i < ROWS * n; i++)
                CHECK_EACH(same_bits(y[i], want[i]), "%s n=%zu row %zu entry %zu: %a, not %a",
                           impls[im], n, i / n, i % n, (double)y[i], (double)want[i]);
            qkv_softmax_rows(x, x, ROWS, n); /* in place */
            for (size_t i = 0; i < ROWS * n; i++)
                CHECK_EACH(same_bits(x[i], want[i]), "%s in place n=%zu row %zu entry %zu",
                           impls[im], n, i / n, i % n);
        }
    }
    qkv_kernels_use("auto", NULL);
    free(x);
    free(y);
    free(want);
}
END_TEST

/* A NaN anywhere in a row makes the whole row NaN on every kernel set and
 * path (one register, rows in registers, long rows), as the generic loop
 * gives it (its e^NaN is NaN) and as PyTorch does; and so does the loss
 * of cross-entropy over such logits. A row of -inf is zeros, with a NaN
 * too: the generic maximum skips NaNs and finds none above -inf (PyTorch
 * gives NaN there). */
START_TEST(test_softmax_nan_rows_are_nan_on_every_set)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    static const size_t lens[] = {3, 16, 17, 21, 40, 129, 200};
    qkv_real x[200], y[200];
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            const size_t n = lens[l], at[3] = {0, n / 2, n - 1};
            for (int p = 0; p < 3; p++) {
                for (size_t j = 0; j < n; j++)
                    x[j] = (qkv_real)(0.1 * (double)j - 1);
                x[at[p]] = NAN;
                qkv_softmax_rows(y, x, 1, n);
                for (size_t j = 0; j < n; j++)
                    CHECK_EACH(isnan(y[j]), "%s n=%zu NaN at %zu: y[%zu] = %g", impls[im], n, at[p],
                               j, (double)y[j]);
            }
            /* -inf alone (at = n), or with one NaN: anywhere in a short row,
             * in the middle of a long one */
            for (size_t at = n <= 16 ? 0 : n / 2; at <= n; at = n <= 16 || at == n ? at + 1 : n) {
                for (size_t j = 0; j < n; j++)
                    x[j] = j == at ? NAN : -INFINITY;
                qkv_softmax_rows(y, x, 1, n);
                for (size_t j = 0; j < n; j++)
                    CHECK_EACH(y[j] == 0, "%s n=%zu masked, NaN at %zu: y[%zu] = %g", impls[im], n,
                               at, j, (double)y[j]);
            }
        }
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *logits = tensor_of(2, (const int[]){2, 3}, NULL, 0);
        logits->data[4] = NAN;
        const int targets[2] = {0, 1};
        qkv_tensor *loss = qkv_cross_entropy(t, logits, targets);
        CHECK_EACH(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        CHECK_EACH(isnan(loss->data[0]), "%s: cross-entropy over a NaN logit: %g", impls[im],
                   (double)loss->data[0]);
        qkv_tensor_free(logits);
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
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
    static const size_t widths[] = {1, 3, 8, 16, 17, 40, 64};
    qkv_rng g;
    qkv_rng_seed(&g, 11);
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            size_t d = widths[w];
            qkv_real table[6 * 64], rows[7 * 64], want[6 * 64], got[7 * 64 + 1];
            fill(&g, table, 6 * d);
            fill(&g, rows, 7 * d);
            for (size_t j = 0; j < d; j++) /* a zero row, which scatter may skip */
                rows[2 * d + j] = 0;
            got[7 * d] = 42; /* a sentinel just past the end */
            qkv_gather_rows(got, table, ids, 7, d);
            for (size_t i = 0; i < 7 * d; i++)
                CHECK_EACH(got[i] == table[(size_t)ids[i / d] * d + i % d],
                           "%s gather d=%zu entry %zu", impls[im], d, i);
            ck_assert(got[7 * d] == 42);
            memcpy(want, table, sizeof(qkv_real) * 6 * d);
            for (size_t i = 0; i < 7; i++)
                for (size_t j = 0; j < d; j++)
                    want[(size_t)ids[i] * d + j] += rows[i * d + j];
            qkv_scatter_add_rows(table, rows, ids, 7, d);
            for (size_t i = 0; i < 6 * d; i++)
                CHECK_EACH(table[i] == want[i], "%s scatter d=%zu entry %zu", impls[im], d, i);
            qkv_zero(got, 7 * d); /* and zeroing, up to the sentinel */
            for (size_t i = 0; i < 7 * d; i++)
                CHECK_EACH(got[i] == 0, "%s zero d=%zu entry %zu", impls[im], d, i);
            ck_assert(got[7 * d] == 42);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Rows of an outer product scattered, on every kernel set, against a plain
 * loop: a product rounded and then a sum, row by row in order (the fused
 * multiply-add of a vector set would round once, and differ in the last
 * bit for most of these random values). A coefficient of 0 or -0 is
 * skipped only with skip_zero: not skipped, -0·x adds -0 or +0 to a row
 * of -0 by the sign of x; and an infinity in x makes 0·x a NaN. */
START_TEST(test_scatter_add_scaled_on_every_path)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    static const int ids[7] = {3, 0, 3, 5, 1, 3, 0}; /* repeats accumulate in order */
    static const size_t widths[] = {1, 3, 8, 15, 16, 17, 33, 64, 65};
    qkv_rng g;
    qkv_rng_seed(&g, 12);
    int checked = 0;
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            for (int mode = 0; mode < 3; mode++) { /* skip_zero 1, 0, 0 with an infinity */
                const size_t d = widths[w];
                const int skip = mode == 0;
                qkv_real table[6 * 65 + 1], want[6 * 65], x[65], coef[7];
                fill(&g, table, 6 * d);
                fill(&g, x, d);
                fill(&g, coef, 7);
                coef[2] = 0;
                coef[4] = (qkv_real)-0.0; /* row 1, which holds -0 */
                for (size_t p = 0; p < d; p++)
                    table[1 * d + p] = (qkv_real)-0.0;
                if (mode == 2)
                    x[d / 2] = (qkv_real)INFINITY;
                table[6 * d] = 42; /* a sentinel just past the end */
                memcpy(want, table, sizeof(qkv_real) * 6 * d);
                for (size_t j = 0; j < 7; j++) {
                    if (skip && coef[j] == 0)
                        continue;
                    for (size_t p = 0; p < d; p++) {
                        const qkv_real prod = coef[j] * x[p];
                        want[(size_t)ids[j] * d + p] = want[(size_t)ids[j] * d + p] + prod;
                    }
                }
                qkv_scatter_add_scaled(table, ids, coef, 7, x, d, skip);
                for (size_t i = 0; i < 6 * d; i++)
                    CHECK_EACH(isnan(want[i]) ? isnan(table[i])
                                              : memcmp(&table[i], &want[i], sizeof want[i]) == 0,
                               "%s d=%zu mode %d entry %zu: %a, want %a", impls[im], d, mode, i,
                               (double)table[i], (double)want[i]);
                ck_assert(table[6 * d] == 42);
                checked++;
            }
        }
    }
    ck_assert_int_ge(checked, 27); /* the portable set at least */
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* ---- element-wise maths ------------------------------------------------ */

#ifdef QKV_DOUBLE
#define REAL_MANT DBL_MANT_DIG
#define REAL_MIN DBL_MIN
#define REAL_TRUE_MIN DBL_TRUE_MIN
#else
#define REAL_MANT FLT_MANT_DIG
#define REAL_MIN FLT_MIN
#define REAL_TRUE_MIN FLT_TRUE_MIN
#endif

/* Bounds, in ulp of qkv_real: the spacing of qkv_real values at the exact
 * result (the smallest subnormal below REAL_MIN, so subnormal results are
 * held to them too). The vector sets' worst cases, measured on every float
 * of each map's sweep range below against these references (the AVX2 and
 * AVX-512 sets agree): exp 0.99 (0.75 where the result is subnormal), log
 * 0.85, tanh 2.42, sigmoid 2.48 (0.98 subnormal), gelu 3.40 (1.26
 * subnormal); the portable set rounds once, 0.5. The maps spend one
 * division and no compensation (vmath.h), hence a few ulp rather than
 * one; the bounds add margin to the worst, about 0.5 ulp. */
#define EXP_ULP 1.5
#define LOG_ULP 1.5
#define TANH_ULP 3.0
#define SIGMOID_ULP 3.0
#define GELU_ULP 4.0

/* gelu'(x) = σ(v) + x·σ(v)·σ(-v)·K2·(1 + 3c·x²) comes near 0 at x = -0.75
 * by cancellation, so its bound is relative to the size of its two terms,
 * M = |σ(v)| + |x·σ(v)·σ(-v)·K2·(1 + 3c·x²)|: |g̃ - g| <= GELU_GRAD_EPS·ε·M
 * (which is relative error where gelu' is not near its zero). Measured
 * worst over all floats: 4.7·ε·M, and 1.7 times the smallest subnormal
 * where M is below FLT_MIN. Then dx + dy·g adds one rounding. */
#define GELU_GRAD_EPS 8.0

#define GELU_K2 1.5957691216057308 /* 2√(2/π) */
#define GELU_C 0.044715

/* The references: libm in double, the same expressions portable.c rounds
 * once (so in a double build that set matches them exactly). */
static double ref_exp(double x)
{
    return exp(x);
}

static double ref_log(double x)
{
    return log(x);
}

static double ref_tanh(double x)
{
    return tanh(x);
}

static double ref_sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

static double ref_gelu(double u)
{
    if (fabs(u) > 1e30)
        return u > 0 ? u : 0;
    return u / (1 + exp(-(u * GELU_K2 * (1 + GELU_C * u * u))));
}

/* gelu'(u), and in *mag the size M of its two terms. */
static double ref_gelu_grad(double u, double *mag)
{
    if (fabs(u) > 1e30) {
        *mag = 1;
        return u > 0 ? 1 : 0;
    }
    double v = u * GELU_K2 * (1 + GELU_C * u * u), e = exp(-fabs(v));
    double big = 1 / (1 + e), small = e / (1 + e);
    double s = v >= 0 ? big : small, sc = v >= 0 ? small : big;
    double t = u * s * sc * GELU_K2 * (1 + 3 * GELU_C * u * u);
    *mag = fabs(s) + fabs(t);
    return s + t;
}

/* The spacing of qkv_real values at r. */
static double ulp_at(double r)
{
    int e;
    if (fabs(r) < REAL_MIN)
        return REAL_TRUE_MIN;
    frexp(r, &e);
    return ldexp(1, e - REAL_MANT);
}

/* The error of y against the exact value r in ulp; 0 when r rounds to an
 * infinity or NaN that y is exactly, infinite when it is not. */
static double ulp_error(qkv_real y, double r)
{
    qkv_real rr = (qkv_real)r;
    if (isnan(rr))
        return isnan(y) ? 0 : INFINITY;
    if (isinf(rr))
        return y == rr ? 0 : INFINITY;
    return fabs(y - r) / ulp_at(r);
}

/* The inputs of a sweep, up to about 1M: every float of magnitude up to
 * max(|lo|, |hi|) at a fixed step of bit patterns (log-spaced, subnormals
 * included; both signs when lo < 0), a uniform grid on [lo, hi], and the
 * given extras. Returns the count. */
#define SWEEP_MAX 1100000
static size_t sweep(qkv_real *x, float lo, float hi, const float *extra, size_t nextra)
{
    float top = fmaxf(fabsf(lo), fabsf(hi));
    uint32_t end;
    memcpy(&end, &top, sizeof end);
    uint32_t step = end / 300000 + 1;
    size_t n = 0;
    for (uint32_t u = 0; u <= end - step; u += step) {
        float f;
        memcpy(&f, &u, sizeof f);
        x[n++] = f;
        if (lo < 0)
            x[n++] = -f;
    }
    for (int i = 0; i <= 400000; i++)
        x[n++] = (qkv_real)(lo + (hi - lo) * (i / 400000.0));
    for (size_t i = 0; i < nextra; i++)
        x[n++] = extra[i];
    return n;
}

/* One element-wise map of the kernel sets with its reference, its sweep
 * and its bound in ulp. */
typedef struct map_case {
    const char *name;
    void (*fn)(qkv_real *y, const qkv_real *x, size_t n);
    double (*ref)(double x);
    float lo, hi;
    double bound;
} map_case;

static const map_case maps[5] = {
    {"exp", qkv_vexp, ref_exp, -105, 89, EXP_ULP},
    {"log", qkv_vlog, ref_log, 0, FLT_MAX, LOG_ULP},
    {"tanh", qkv_vtanh, ref_tanh, -10, 10, TANH_ULP},
    {"sigmoid", qkv_vsigmoid, ref_sigmoid, -105, 30, SIGMOID_ULP},
    {"gelu", qkv_vgelu, ref_gelu, -13, 13, GELU_ULP},
};

static const char *const sets[3] = {"portable", "avx2", "avx512"};

/* Every kernel set this CPU has, each map over its sweep (with the
 * thresholds where a result overflows, goes subnormal or saturates, and
 * each branch's edge), against libm: the largest error is within the
 * bound. */
START_TEST(test_vector_maths_are_within_their_ulp_bounds_of_libm)
{
    static const float extra[] = {88.72283172607421875f,
                                  88.72283935546875f,
                                  88.7f,
                                  -87.33f,
                                  -103.97f,
                                  -103.98f,
                                  0.75f,
                                  -0.75f,
                                  0.7499999f,
                                  9.01f,
                                  -9.01f,
                                  -10.1f,
                                  -10.4f,
                                  1.17549435e-38f,
                                  1.40129846e-45f,
                                  1,
                                  -1,
                                  0.5f};
    size_t ne = sizeof extra / sizeof extra[0];
    qkv_real *x = malloc(sizeof *x * SWEEP_MAX), *y = malloc(sizeof *y * SWEEP_MAX);
    double *ref = malloc(sizeof *ref * SWEEP_MAX);
    for (int f = 0; f < 5; f++) {
        const map_case *c = &maps[f];
        size_t n = sweep(x, c->lo, c->hi, extra, ne);
        ck_assert_uint_le(n, SWEEP_MAX);
        for (size_t i = 0; i < n; i++)
            ref[i] = c->ref(x[i]);
        for (int im = 0; im < 3; im++) {
            if (qkv_kernels_use(sets[im], NULL) != 0)
                continue;
            c->fn(y, x, n);
            double worst = 0, at = 0;
            for (size_t i = 0; i < n; i++) {
                double e = ulp_error(y[i], ref[i]);
                if (!(e <= worst)) {
                    worst = e;
                    at = x[i];
                }
            }
            CHECK_EACH(worst <= c->bound, "%s %s: %.3g ulp at x = %.9g (bound %g)", sets[im],
                       c->name, worst, at, c->bound);
        }
    }
    qkv_kernels_use("auto", NULL);
    free(x);
    free(y);
    free(ref);
}
END_TEST

/* GELU's backward on every kernel set over its sweep: with dx = 0 and dy =
 * 1 it gives gelu'(x), and with other dx and dy it adds dy·gelu'(x), each
 * within GELU_GRAD_EPS of the size of the terms (plus one rounding for
 * the sum, and twice the smallest subnormal, times |dy|, where gelu' is
 * below FLT_MIN). */
START_TEST(test_gelu_backward_is_within_its_error_bound)
{
    static const float extra[] = {-0.7518f, -0.75f, -10.1f, -10.4f, -11, 11, 0.75f};
    qkv_real *x = malloc(sizeof *x * SWEEP_MAX), *dx = malloc(sizeof *dx * SWEEP_MAX);
    qkv_real *dy = malloc(sizeof *dy * SWEEP_MAX), *dx0 = malloc(sizeof *dx0 * SWEEP_MAX);
    double *g = malloc(sizeof *g * SWEEP_MAX), *mag = malloc(sizeof *mag * SWEEP_MAX);
    size_t n = sweep(x, -13, 13, extra, sizeof extra / sizeof extra[0]);
    qkv_rng r;
    qkv_rng_seed(&r, 17);
    for (size_t i = 0; i < n; i++) {
        g[i] = ref_gelu_grad(x[i], &mag[i]);
        int plain = i % 2 == 0; /* half the points give g itself */
        dx0[i] = plain ? 0 : (qkv_real)(4 * qkv_rng_random(&r) - 2);
        dy[i] = plain ? 1 : (qkv_real)(4 * qkv_rng_random(&r) - 2);
    }
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(sets[im], NULL) != 0)
            continue;
        memcpy(dx, dx0, sizeof *dx * n);
        qkv_vgelu_backward(dx, x, dy, n, 0);
        double worst = 0, at = 0;
        for (size_t i = 0; i < n; i++) {
            double want = dx0[i] + (double)dy[i] * g[i];
            double tol = GELU_GRAD_EPS * REAL_EPS * fabs(dy[i]) * mag[i] + REAL_EPS * fabs(want) +
                         (1 + 2 * fabs(dy[i])) * REAL_TRUE_MIN;
            double e = fabs(dx[i] - want) / tol;
            if (!(e <= worst)) {
                worst = e;
                at = x[i];
            }
        }
        CHECK_EACH(worst <= 1, "%s gelu backward: %.3g times the bound at x = %.9g", sets[im],
                   worst, at);
    }
    qkv_kernels_use("auto", NULL);
    free(x);
    free(dx);
    free(dy);
    free(dx0);
    free(g);
    free(mag);
}
END_TEST

/* y is want exactly: the same value (NaN for NaN), and the same sign for a
 * zero when sign is set. */
static int same(qkv_real y, float want, int sign)
{
    if (isnan(want))
        return isnan(y);
    return y == want && (!sign || !signbit(y) == !signbit(want));
}

/* The edges that kernels.h promises, on every kernel set, exactly:
 * overflow to inf and underflow to 0, log's domain, saturation to ±1, 0
 * and 1 (and to x and 0 for GELU, gradients 1 and 0), the sign of -0 for
 * the odd functions, and NaN in, NaN out. */
START_TEST(test_vector_maths_give_the_edge_values_exactly)
{
    static const struct {
        int f;
        float x, want;
        int sign, f32; /* f32: a float threshold, not one of a double build */
    } edges[] = {
        {0, -INFINITY, 0, 1, 0},
        {0, INFINITY, INFINITY, 0, 0},
        {0, NAN, NAN, 0, 0},
        {0, 0, 1, 0, 0},
        {0, -0.0f, 1, 0, 0},
        {0, 88.72283935546875f, INFINITY, 0, 1},
        {0, 89, INFINITY, 0, 1},
        {0, 1e4f, INFINITY, 0, 0},
        {0, FLT_MAX, INFINITY, 0, 0},
        {0, -104, 0, 1, 1},
        {0, -1e4f, 0, 1, 0},
        {0, -FLT_MAX, 0, 1, 0},
        {1, 0, -INFINITY, 0, 0},
        {1, -0.0f, -INFINITY, 0, 0},
        {1, -1, NAN, 0, 0},
        {1, -1.40129846e-45f, NAN, 0, 0},
        {1, -INFINITY, NAN, 0, 0},
        {1, INFINITY, INFINITY, 0, 0},
        {1, NAN, NAN, 0, 0},
        {1, 1, 0, 1, 0},
        {2, INFINITY, 1, 0, 0},
        {2, -INFINITY, -1, 0, 0},
        {2, 1e4f, 1, 0, 0},
        {2, -1e4f, -1, 0, 0},
        {2, 10, 1, 0, 1},
        {2, -10, -1, 0, 1},
        {2, 0, 0, 1, 0},
        {2, -0.0f, -0.0f, 1, 0},
        {2, NAN, NAN, 0, 0},
        {3, -1e4f, 0, 1, 0},
        {3, 1e4f, 1, 0, 0},
        {3, -200, 0, 1, 1},
        {3, 200, 1, 0, 0},
        {3, -INFINITY, 0, 1, 0},
        {3, INFINITY, 1, 0, 0},
        {3, 0, 0.5f, 0, 0},
        {3, -0.0f, 0.5f, 0, 0},
        {3, NAN, NAN, 0, 0},
        {4, 1e4f, 1e4f, 0, 0},
        {4, -1e4f, 0, 0, 0},
        {4, 20, 20, 0, 0},
        {4, -20, 0, 0, 1},
        {4, FLT_MAX, FLT_MAX, 0, 0},
        {4, -FLT_MAX, 0, 0, 0},
        {4, INFINITY, INFINITY, 0, 0},
        {4, -INFINITY, 0, 0, 0},
        {4, 0, 0, 1, 0},
        {4, -0.0f, -0.0f, 1, 0},
        {4, NAN, NAN, 0, 0},
    };
    /* GELU's backward: dx = 0.5 and dy = 3 take 0.5 + 3·gelu'(x) */
    static const float gx[] = {1e4f,     -1e4f,    20,        -20, FLT_MAX,
                               -FLT_MAX, INFINITY, -INFINITY, 0,   NAN};
    static const float gwant[] = {3.5f, 0.5f, 3.5f, 0.5f, 3.5f, 0.5f, 3.5f, 0.5f, 2, NAN};
    size_t ne = sizeof edges / sizeof edges[0], ng = sizeof gx / sizeof gx[0];
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(sets[im], NULL) != 0)
            continue;
        for (size_t i = 0; i < ne; i++) {
            if (edges[i].f32 && sizeof(qkv_real) != sizeof(float))
                continue;
            qkv_real x = edges[i].x, y;
            maps[edges[i].f].fn(&y, &x, 1);
            CHECK_EACH(same(y, edges[i].want, edges[i].sign), "%s %s(%g) = %g, expected %g",
                       sets[im], maps[edges[i].f].name, (double)x, (double)y,
                       (double)edges[i].want);
        }
        for (size_t i = 0; i < ng; i++) {
            qkv_real x = gx[i], dx = 0.5f, dy = 3;
            qkv_vgelu_backward(&dx, &x, &dy, 1, 0);
            CHECK_EACH(same(dx, gwant[i], 0), "%s gelu backward at %g: %g, expected %g", sets[im],
                       (double)x, (double)dx, (double)gwant[i]);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* GELU's backward with store set gives, on every kernel set, the bits of
 * adding into zeros (so +0 where dy·gelu'(x) is -0), and never reads dx:
 * NaN there changes nothing. */
START_TEST(test_gelu_backward_store_is_adding_into_zeros)
{
    enum { N = 37 };
    qkv_real x[N], dy[N], want[N], got[N];
    qkv_rng r;
    qkv_rng_seed(&r, 29);
    for (int i = 0; i < N; i++) {
        x[i] = (qkv_real)(30 * qkv_rng_random(&r) - 15); /* past ±12 gelu' is 1 or 0 */
        dy[i] = i % 3 == 0 ? (qkv_real)-0.0 : (qkv_real)(2 * qkv_rng_random(&r) - 1);
    }
    x[1] = -1e4; /* gelu' = 0 in float and in double: dy·0 = -0 for a negative dy */
    dy[1] = -1;
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(sets[im], NULL) != 0)
            continue;
        for (int i = 0; i < N; i++) {
            want[i] = 0;
            got[i] = NAN;
        }
        qkv_vgelu_backward(want, x, dy, N, 0);
        qkv_vgelu_backward(got, x, dy, N, 1);
        for (int i = 0; i < N; i++)
            CHECK_EACH(same_bits(got[i], want[i]) && !signbit(got[i]) == !signbit(want[i]),
                       "%s entry %d (x %g, dy %g): %a, not %a", sets[im], i, (double)x[i],
                       (double)dy[i], (double)got[i], (double)want[i]);
        CHECK_EACH(!signbit(got[1]) && got[1] == 0, "%s: -0 stored, not 0 + -0 = +0", sets[im]);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Each map on every length from 0 to 40 (whole vectors and ragged tails)
 * gives the bits it gives inside a long array, in place as well, and
 * writes nothing past n. */
START_TEST(test_vector_maths_match_at_every_length_and_in_place)
{
    enum { N = 40 };
    qkv_rng r;
    qkv_rng_seed(&r, 23);
    qkv_real x[N], dy[N], dx0[N], full[N], y[N + 1];
    for (int i = 0; i < N; i++) {
        x[i] = (qkv_real)(24 * qkv_rng_random(&r) - 12);
        dy[i] = (qkv_real)(2 * qkv_rng_random(&r) - 1);
        dx0[i] = (qkv_real)(2 * qkv_rng_random(&r) - 1);
    }
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(sets[im], NULL) != 0)
            continue;
        for (int f = 0; f < 6; f++) {
            if (f < 5)
                maps[f].fn(full, x, N);
            else {
                memcpy(full, dx0, sizeof full);
                qkv_vgelu_backward(full, x, dy, N, 0);
            }
            const char *name = f < 5 ? maps[f].name : "gelu backward";
            for (size_t n = 0; n <= N; n++) {
                for (int in_place = 0; in_place < 2; in_place++) {
                    for (int i = 0; i <= N; i++)
                        y[i] = -42;
                    if (f == 5) {
                        memcpy(y, dx0, sizeof *y * n);
                        qkv_vgelu_backward(y, x, dy, n, 0);
                    } else if (in_place) {
                        memcpy(y, x, sizeof *y * n);
                        maps[f].fn(y, y, n);
                    } else {
                        maps[f].fn(y, x, n);
                    }
                    CHECK_EACH(memcmp(y, full, sizeof *y * n) == 0, "%s %s n=%zu in place %d",
                               sets[im], name, n, in_place);
                    for (size_t i = n; i <= N; i++)
                        CHECK_EACH(y[i] == -42, "%s %s n=%zu wrote entry %zu", sets[im], name, n,
                                   i);
                }
            }
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
    tcase_add_test(tc, test_softmax_backward_keeps_its_bits_on_every_set);
    tcase_add_test(tc, test_softmax_nan_rows_are_nan_on_every_set);
    tcase_add_test(tc, test_gather_scatter_zero_on_every_path);
    tcase_add_test(tc, test_scatter_add_scaled_on_every_path);
    tcase_add_test(tc, test_vector_maths_are_within_their_ulp_bounds_of_libm);
    tcase_add_test(tc, test_kernel_set_names_match_exactly);
    tcase_add_test(tc, test_gelu_backward_is_within_its_error_bound);
    tcase_add_test(tc, test_gelu_backward_store_is_adding_into_zeros);
    tcase_add_test(tc, test_vector_maths_give_the_edge_values_exactly);
    tcase_add_test(tc, test_vector_maths_match_at_every_length_and_in_place);
    suite_add_tcase(s, tc);
    return s;
}
