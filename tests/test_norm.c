/*
 * test_norm.c - layer norm and RMS norm, the MSE, BCE, L1 and Huber losses, dropout,
 * and backward from any tensor: values against CPython's math module
 * (tests/data/ops_golden.h, from scripts/golden_ops.py), edges, shape
 * errors, and the gradients that have closed forms.
 */
#include <stdlib.h>
#include <string.h>

#include "tests.h"
#include "data/ops_golden.h"

/* got within k rounding errors of want, relative to max(|want|, 1). */
static void expect_rel(const qkv_real *got, const double *want, size_t n, double k,
                       const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= k * REAL_EPS * fmax(fabs(want[i]), 1),
                      "%s[%zu] = %.9g, expected %.9g", what, i, (double)got[i], want[i]);
}

START_TEST(test_layer_norm_and_rms_norm_match_cpython)
{
    /* the statistics in double, then one float expression per value: a
     * handful of roundings of values up to about 6 */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){2, 4}, golden_ln_x, 1);
    qkv_tensor *g = tensor_of(1, (const int[]){4}, golden_ln_gamma, 1);
    qkv_tensor *b = tensor_of(1, (const int[]){4}, golden_ln_beta, 1);
    qkv_tensor *y = qkv_layer_norm(t, x, g, b, GOLDEN_EPS);
    expect_rel(y->data, golden_layer_norm, 8, 16, "layer_norm");
    expect_rel(qkv_layer_norm(t, x, NULL, NULL, GOLDEN_EPS)->data, golden_layer_norm_plain, 8, 16,
               "layer_norm without gamma, beta");
    expect_rel(qkv_rms_norm(t, x, g, GOLDEN_EPS)->data, golden_rms_norm, 8, 16, "rms_norm");
    /* each normalised row has mean 0, and sum(y) does not depend on x:
     * dβ = number of rows = 2 per entry, dx = 0 when γ is all ones */
    qkv_tape_reset(t);
    qkv_tensor *ones = tensor_of(1, (const int[]){4}, (const double[]){1, 1, 1, 1}, 1);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_layer_norm(t, x, ones, b, 1e-5))), QKV_OK);
    for (int j = 0; j < 4; j++)
        ck_assert(b->grad[j] == 2);
    for (int i = 0; i < 8; i++)
        ASSERT_NEAR(x->grad[i], 0, 16 * REAL_EPS);
    /* shape errors name the op and both shapes */
    qkv_tape_reset(t);
    ck_assert(qkv_layer_norm(t, x, b, qkv_transpose(t, x), 1e-5) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "layer_norm: x [2,4] needs beta of shape [4], not [4,2]");
    qkv_tape_reset(t);
    ck_assert(qkv_rms_norm(t, x, g, -1) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    qkv_tensor_free(x);
    qkv_tensor_free(g);
    qkv_tensor_free(b);
    qkv_tensor_free(ones);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_a_constant_row_normalises_to_beta)
{
    /* variance 0: y = β exactly, no NaN, thanks to eps */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){1, 3}, (const double[]){5, 5, 5}, 0);
    qkv_tensor *b = tensor_of(1, (const int[]){3}, (const double[]){1, -2, 0.5}, 0);
    qkv_tensor *y = qkv_layer_norm(t, x, NULL, b, 1e-5);
    ck_assert(y->data[0] == 1 && y->data[1] == -2 && y->data[2] == 0.5);
    qkv_tensor_free(x);
    qkv_tensor_free(b);
    qkv_tape_free(t);
}
END_TEST

/* A γ or β shorter than the row is refused (not read past its end), as is
 * a scalar, which has no dimension to normalise. */
START_TEST(test_norm_refuses_a_short_gain_and_a_scalar)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){2, 4}, (const double[]){1, 2, 3, 4, 5, 6, 7, 9}, 0);
    qkv_tensor *g3 = tensor_of(1, (const int[]){3}, (const double[]){1, 1, 1}, 0);
    qkv_tensor *s = tensor_of(0, NULL, (const double[]){2}, 0);
    EXPECT_ERROR_ON(t, qkv_layer_norm(t, x, g3, NULL, 1e-5), QKV_ERR_SHAPE,
                    "layer_norm: x [2,4] needs gamma of shape [4], not [3]");
    EXPECT_ERROR_ON(t, qkv_layer_norm(t, x, NULL, g3, 1e-5), QKV_ERR_SHAPE,
                    "layer_norm: x [2,4] needs beta of shape [4], not [3]");
    EXPECT_ERROR_ON(t, qkv_rms_norm(t, x, g3, 1e-5), QKV_ERR_SHAPE,
                    "rms_norm: x [2,4] needs gamma of shape [4], not [3]");
    EXPECT_ERROR_ON(t, qkv_layer_norm(t, s, NULL, NULL, 1e-5), QKV_ERR_SHAPE,
                    "layer_norm: [] has no dimension to normalise");
    EXPECT_ERROR_ON(t, qkv_rms_norm(t, s, NULL, 1e-5), QKV_ERR_SHAPE,
                    "rms_norm: [] has no dimension to normalise");
    qkv_tensor_free(x);
    qkv_tensor_free(g3);
    qkv_tensor_free(s);
    qkv_tape_free(t);
}
END_TEST

/* Only β wants a gradient (x and γ are constants): the op is still
 * recorded, and dβ of sum(y) is the number of rows. Likewise γ alone:
 * dγ[j] = Σ_rows x̂[r,j], with x̂ of the rows [1, 3] and [0, 4] being
 * [-1, 1] for both (eps 0). */
START_TEST(test_norm_records_a_gradient_that_only_beta_or_gamma_wants)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 3, 0, 4}, 0);
    qkv_tensor *g = tensor_of(1, (const int[]){2}, (const double[]){2, -1}, 1);
    qkv_tensor *b = tensor_of(1, (const int[]){2}, (const double[]){0.5, 0.25}, 1);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_layer_norm(t, x, NULL, b, 0))), QKV_OK);
    ck_assert(b->grad[0] == 2 && b->grad[1] == 2);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_layer_norm(t, x, g, NULL, 0))), QKV_OK);
    ASSERT_NEAR(g->grad[0], -2, 4 * REAL_EPS);
    ASSERT_NEAR(g->grad[1], 2, 4 * REAL_EPS);
    qkv_tensor_free(x);
    qkv_tensor_free(g);
    qkv_tensor_free(b);
    qkv_tape_free(t);
}
END_TEST

/* eps = 0 is a valid choice (the check is eps >= 0, as PyTorch allows):
 * the row [1, 3] has mean 2 and variance 1, so y = [-1, 1] exactly, every
 * step being exact in binary. An infinite eps is refused, naming it. */
START_TEST(test_norm_takes_eps_zero_and_refuses_an_infinite_one)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){1, 2}, (const double[]){1, 3}, 0);
    qkv_tensor *y = qkv_layer_norm(t, x, NULL, NULL, 0);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert(y->data[0] == -1 && y->data[1] == 1);
    ck_assert(qkv_layer_norm(t, x, NULL, NULL, INFINITY) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "layer_norm: eps infinity must be finite and >= 0");
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* Every kernel set's layer norm and RMS norm, forward and backward, give
 * the portable set's bits: rows of widths 1 to 300 (full vectors and
 * tails), 21 of them (a block of 16 rows, one of 4 and a last one, for a
 * set that reduces rows in blocks), with and without γ and β, centred or
 * not, and the backward with
 * each of its outputs present or not, accumulating into nonzero values or
 * storing dx over NaNs (the portable store being adding into zeros), and
 * dγ and dβ in separate buffers or in one. */
START_TEST(test_norm_kernels_give_the_portable_bits_on_every_path)
{
    static const char *impls[] = {"avx2", "avx512"};
    static const size_t widths[] = {1,  2,  3,  5,  7,  8,  9,  15,  16,  17,  23,  24,  31,
                                    32, 33, 40, 47, 63, 64, 65, 100, 127, 128, 129, 200, 300};
    enum { ROWS = 21, DMAX = 300 };
    const qkv_kernel_set *p = &qkv_kernels_portable;
    qkv_real *buf = malloc(sizeof *buf * (18 * ROWS * DMAX + 8 * ROWS));
    ck_assert_ptr_nonnull(buf);
    qkv_real *x = buf, *dy = x + ROWS * DMAX, *gamma = dy + ROWS * DMAX, *beta = gamma + DMAX;
    qkv_real *y[2] = {beta + DMAX, beta + DMAX + ROWS * DMAX};
    qkv_real *dx[2] = {y[1] + ROWS * DMAX, y[1] + 2 * ROWS * DMAX};
    qkv_real *dg[2] = {dx[1] + ROWS * DMAX, dx[1] + ROWS * DMAX + DMAX};
    qkv_real *db[2] = {dg[1] + DMAX, dg[1] + 2 * DMAX};
    qkv_real *st[2] = {db[1] + DMAX, db[1] + DMAX + 2 * ROWS};
    qkv_real *dz = st[1] + 2 * ROWS; /* dx, dγ and dβ added into zeros */
    qkv_rng g;
    qkv_rng_seed(&g, 17);
    int tested = 0;
    for (int im = 0; im < 2; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        tested++;
        const qkv_kernel_set *k = qkv_kernels();
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
            const size_t d = widths[wi], n = ROWS * d;
            for (size_t i = 0; i < n; i++) {
                /* an offset, so the mean matters; rows 3 and 17 constant */
                x[i] = (qkv_real)(i / d == 3 || i / d == 17 ? 2.5
                                                            : 3 + qkv_rng_normalvariate(&g, 0, 2));
                dy[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
            }
            /* rows 4 and 18: ±2^40 at two places among small values, in x
             * and in dy: the sums cancel, and the small values that the
             * partial sums holding 2^40 round away depend on the order of
             * the sums */
            for (int k = 0; k < 4 && d > 1; k++) {
                qkv_real *v = (k & 1 ? dy : x) + (k < 2 ? 4 : 18) * d;
                size_t a = (size_t)(qkv_rng_random(&g) * (double)d), b = (a + 1 + d / 2) % d;
                for (size_t j = 0; j < d; j++)
                    v[j] = (qkv_real)(qkv_rng_random(&g) - 0.5);
                v[a] = (qkv_real)ldexp(1, 40);
                v[b] = -v[a];
            }
            for (size_t j = 0; j < d; j++) {
                gamma[j] = (qkv_real)qkv_rng_normalvariate(&g, 1, 0.5);
                beta[j] = (qkv_real)qkv_rng_normalvariate(&g, 0, 0.5);
            }
            for (int c = 0; c < 64; c++) {
                const int center = c & 1, with_g = c >> 1 & 1, with_b = c >> 2 & 1;
                const int store = c >> 4 & 1; /* dx written, not added into */
                const int alias = c >> 5;     /* dγ and dβ one buffer */
                const qkv_real *ga = with_g ? gamma : NULL, *be = with_b ? beta : NULL;
                const qkv_kernel_set *sets[2] = {p, k};
                for (int s = 0; s < 2; s++) {
                    sets[s]->norm(y[s], st[s], st[s] + ROWS, x, ga, be, ROWS, d, 1e-5, center);
                    for (size_t i = 0; i < n; i++) /* with store: NaN, which must not be read */
                        dx[s][i] = store ? (qkv_real)NAN : (qkv_real)(0.25 * (double)(i % 7) - 0.5);
                    for (size_t j = 0; j < d; j++)
                        dg[s][j] = db[s][j] = (qkv_real)(0.125 * (double)(j % 5));
                    /* c >> 3: the backward without dx, or without dγ and dβ */
                    sets[s]->norm_backward(c >> 3 && center ? NULL : dx[s],
                                           c >> 3 && !center ? NULL : dg[s],
                                           c >> 3 && !center ? NULL
                                           : alias           ? dg[s]
                                                             : db[s],
                                           dy, x, st[s], st[s] + ROWS, ga, ROWS, d, center, store);
                }
                if (store && !(c >> 3 && center)) {
                    /* the portable store is adding into zeros, bit for bit
                     * (+0 where a term is -0) */
                    for (size_t i = 0; i < n; i++)
                        dz[i] = 0;
                    for (size_t j = 0; j < d; j++)
                        dz[n + j] = dz[n + d + j] = (qkv_real)(0.125 * (double)(j % 5));
                    p->norm_backward(dz, c >> 3 ? NULL : dz + n,
                                     c >> 3  ? NULL
                                     : alias ? dz + n
                                             : dz + n + d,
                                     dy, x, st[0], st[0] + ROWS, ga, ROWS, d, center, 0);
                    ck_assert_msg(memcmp(dz, dx[0], sizeof(qkv_real) * n) == 0,
                                  "portable store d=%zu case %d", d, c);
                }
                const char *what = impls[im];
                ck_assert_msg(memcmp(y[0], y[1], sizeof(qkv_real) * n) == 0,
                              "%s forward d=%zu case %d", what, d, c);
                ck_assert_msg(memcmp(st[0], st[1], sizeof(qkv_real) * 2 * ROWS) == 0,
                              "%s mean, rstd d=%zu case %d", what, d, c);
                ck_assert_msg(memcmp(dx[0], dx[1], sizeof(qkv_real) * n) == 0,
                              "%s dx d=%zu case %d", what, d, c);
                ck_assert_msg(memcmp(dg[0], dg[1], sizeof(qkv_real) * d) == 0,
                              "%s dgamma d=%zu case %d", what, d, c);
                ck_assert_msg(memcmp(db[0], db[1], sizeof(qkv_real) * d) == 0,
                              "%s dbeta d=%zu case %d", what, d, c);
            }
        }
    }
    qkv_kernels_use("auto", NULL);
    free(buf);
#ifdef QKV_HAVE_X86_KERNELS
    ck_assert_int_ge(tested, __builtin_cpu_supports("avx2") ? 1 : 0);
#else
    (void)tested;
#endif
}
END_TEST

/* Layer norm's float sums (norm.c) against a double reference, on long
 * rows and on rows whose mean is far from 0 against their spread. The
 * bound is the rounding analysis of norm.c: a sum of d values in 32
 * partials carries at most n = ⌈d/32⌉ + 5 roundings of Σ|x|, so the mean
 * is off by at most (n + 1)·u·mean|x|, which moves y by that over σ; the
 * variance's relative error is at most (n + 3)·u (the float x - m and its
 * square add two), the reciprocal square root's then (n + 4)/2 + 2, and
 * y = (x - m)·s adds two more, relative to |y|. */
/* The loss of the aliasing test: Σ w·layer_norm(x, x, x) for x [5] and
 * fixed weights w, or Σ w·(rms_norm(x, x) + x); with on_tape, x is first
 * copied onto the tape (1·x), whose gradient backward fills lazily. */
typedef struct alias_ctx {
    qkv_tensor *x, *w;
    int rms, on_tape;
} alias_ctx;

static qkv_tensor *alias_loss(qkv_tape *t, void *p)
{
    alias_ctx *c = p;
    qkv_tensor *x = c->on_tape ? qkv_scale(t, c->x, 1) : c->x;
    qkv_tensor *y =
        c->rms ? qkv_add(t, qkv_rms_norm(t, x, x, 1e-5), x) : qkv_layer_norm(t, x, x, x, 1e-5);
    return qkv_sum(t, qkv_mul(t, c->w, y));
}

/* The norms claim their input's gradient and write it without clearing
 * it first; where that gradient is also γ's or β's, or one that another
 * node has filled, they must add into it instead. Finite differences
 * judge the sum, for a heap x and for one made on the tape: there the
 * gains' gradients are readied (zero-filled) before x's is claimed, or
 * x's claim would take the buffer and its write drop the gains' sums. */
START_TEST(test_norm_gradients_add_where_the_input_is_also_a_gain_or_reused)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    alias_ctx c = {tensor_of(1, (const int[]){5}, (const double[]){0.7, -1.3, 2.1, 0.4, -0.2}, 1),
                   tensor_of(1, (const int[]){5}, (const double[]){0.3, -0.8, 1.1, 0.6, -0.5}, 0),
                   0, 0};
    for (c.on_tape = 0; c.on_tape < 2; c.on_tape++)
        for (c.rms = 0; c.rms < 2; c.rms++) {
            qkv_gradcheck_result res;
            ck_assert_int_eq(qkv_gradcheck(t, alias_loss, &c, &c.x, 1, 0, 0, 0, &res), QKV_OK);
            ck_assert_msg(res.passed, "%s, x %s: max rel %g", c.rms ? "rms_norm" : "layer_norm",
                          c.on_tape ? "on the tape" : "on the heap", res.max_rel);
        }
    qkv_tensor_free(c.x);
    qkv_tensor_free(c.w);
    qkv_tape_free(t);
}
END_TEST

/* γ and β made on the tape (by a scale of parameters) get their
 * gradients, and pass them on to the parameters. x = [1, 3], eps 0:
 * layer norm x̂ = [-1, 1]; with γ = 2·g, β = 3·b and dy = r = [1, 2],
 * dγ = dy·x̂ = [-1, 2] and dβ = dy, so dg = [-2, 4], db = [3, 6]; dx =
 * r·(g - mean g - x̂·mean(g·x̂)) with g = dy·γ = [2, 4] is [0, 0]. RMS
 * norm x̂ = x/√5: dg = 2·dy·x̂ = [2, 12]/√5. */
START_TEST(test_norm_gains_made_on_the_tape_get_their_gradients)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){1, 2}, (const double[]){1, 3}, 1);
    qkv_tensor *g = tensor_of(1, (const int[]){2}, (const double[]){1, 1}, 1);
    qkv_tensor *b = tensor_of(1, (const int[]){2}, (const double[]){0, 0}, 1);
    qkv_tensor *r = tensor_of(2, (const int[]){1, 2}, (const double[]){1, 2}, 0);
    for (int rms = 0; rms < 2; rms++) {
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(x);
        qkv_tensor_zero_grad(g);
        qkv_tensor_zero_grad(b);
        qkv_tensor *gamma = qkv_scale(t, g, 2), *beta = qkv_scale(t, b, 3);
        qkv_tensor *y = rms ? qkv_rms_norm(t, x, gamma, 0) : qkv_layer_norm(t, x, gamma, beta, 0);
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, y, r))), QKV_OK);
        const double s5 = sqrt(5.0);
        const double dg[2][2] = {{-2, 4}, {2 / s5, 12 / s5}};
        for (int j = 0; j < 2; j++) {
            ASSERT_NEAR(g->grad[j], dg[rms][j], 8 * REAL_EPS);
            ASSERT_NEAR(b->grad[j], rms ? 0 : 3 * (j + 1), 8 * REAL_EPS);
            if (!rms)
                ASSERT_NEAR(x->grad[j], 0, 8 * REAL_EPS);
        }
    }
    qkv_tensor_free(x);
    qkv_tensor_free(g);
    qkv_tensor_free(b);
    qkv_tensor_free(r);
    qkv_tape_free(t);
}
END_TEST

/* Out of memory anywhere in layer norm or RMS norm, its node included
 * (a tape of 64 bytes needs a new block for nearly every allocation),
 * the error names the op that was called. */
START_TEST(test_norm_out_of_memory_names_the_op)
{
    static const char *const names[] = {"layer_norm: ", "rms_norm: "};
    qkv_tensor *x = tensor_of(2, (const int[]){1, 4}, (const double[]){1, 2, 3, 5}, 1);
    for (int rms = 0; rms < 2; rms++) {
        int failures = 0;
        for (size_t k = 1; k < 40; k++) {
            qkv_tape *t = qkv_tape_new(64, NULL);
            qkv_alloc_fail_at(qkv_alloc_count() + k);
            qkv_tensor *y =
                rms ? qkv_rms_norm(t, x, NULL, 1e-5) : qkv_layer_norm(t, x, NULL, NULL, 1e-5);
            qkv_alloc_fail_at(0);
            const int failed = qkv_tensor_is_nil(y);
            if (failed) {
                failures++;
                ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_NOMEM);
                ck_assert_msg(strncmp(qkv_tape_error(t), names[rms], strlen(names[rms])) == 0,
                              "allocation %zu: %s", k, qkv_tape_error(t));
            } else {
                ck_assert_uint_eq(qkv_tape_nodes(t), 1);
            }
            qkv_tape_free(t);
            if (!failed)
                break;
        }
        ck_assert_int_gt(failures, 2); /* the output's data, gradient, node at least */
    }
    qkv_tensor_free(x);
}
END_TEST

START_TEST(test_layer_norm_stays_within_its_rounding_bound)
{
    static const int widths[] = {128, 1000, 4096};
    static const double offsets[] = {0, 30}; /* the mean, in standard deviations */
    enum { ROWS = 3 };
    qkv_real *x = malloc(sizeof *x * ROWS * 4096), *y = malloc(sizeof *y * ROWS * 4096);
    qkv_real st[2 * ROWS];
    ck_assert(x != NULL && y != NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 23);
    const double u = REAL_EPS, eps = 1e-5;
    static const char *sets[] = {"portable", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (qkv_kernels_use(sets[k], NULL) != 0)
            continue;
        for (int wi = 0; wi < 3; wi++)
            for (int oi = 0; oi < 2; oi++) {
                const size_t d = (size_t)widths[wi];
                for (size_t i = 0; i < ROWS * d; i++)
                    x[i] = (qkv_real)(2 * offsets[oi] + qkv_rng_normalvariate(&g, 0, 2));
                qkv_norm_rows(y, st, st + ROWS, x, NULL, NULL, ROWS, d, eps, 1);
                const double n = (double)((d + 31) / 32) + 5;
                for (int r = 0; r < ROWS; r++) {
                    const qkv_real *xr = x + r * d;
                    double mu = 0, var = 0, abs_mean = 0;
                    for (size_t j = 0; j < d; j++) {
                        mu += (double)xr[j];
                        abs_mean += fabs((double)xr[j]);
                    }
                    mu /= (double)d;
                    abs_mean /= (double)d;
                    for (size_t j = 0; j < d; j++)
                        var += ((double)xr[j] - mu) * ((double)xr[j] - mu);
                    const double sd = sqrt(var / (double)d + eps);
                    for (size_t j = 0; j < d; j++) {
                        const double want = ((double)xr[j] - mu) / sd;
                        const double bound =
                            (n + 1) * u * abs_mean / sd + ((n + 4) / 2 + 4) * u * fabs(want);
                        ck_assert_msg(
                            fabs((double)y[r * d + j] - want) <= bound,
                            "%s d %zu offset %g row %d: y[%zu] = %.9g, want %.9g (bound %.3g)",
                            sets[k], d, offsets[oi], r, j, (double)y[r * d + j], want, bound);
                    }
                }
            }
    }
    qkv_kernels_use("auto", NULL);
    free(x);
    free(y);
}
END_TEST

START_TEST(test_mse_and_bce_match_cpython_and_stay_finite)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){8}, golden_x, 1);
    qkv_tensor *y = tensor_of(1, (const int[]){8}, golden_target, 0);
    expect_rel(qkv_mse(t, x, y)->data, golden_mse, 1, 4, "mse");
    expect_rel(qkv_bce_with_logits(t, x, y)->data, golden_bce, 1, 4, "bce_with_logits");
    /* dmse/dx = 2(x - y)/N */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_mse(t, x, y)), QKV_OK);
    for (int i = 0; i < 8; i++)
        ASSERT_NEAR(x->grad[i], 2 * (golden_x[i] - golden_target[i]) / 8, 4 * REAL_EPS);
    /* 11 entries, so 3 past the last group of 8: pred i, target 0 gives
     * (0² + 1² + ... + 10²)/11 = 385/11 = 35, and dmse/dpred_i = 2i/11 */
    qkv_tensor *p11 = tensor_of(1, (const int[]){11}, NULL, 1);
    qkv_tensor *z11 = tensor_of(1, (const int[]){11}, NULL, 0);
    for (int i = 0; i < 11; i++)
        p11->data[i] = (qkv_real)i;
    qkv_tape_reset(t);
    qkv_tensor *m11 = qkv_mse(t, p11, z11);
    ASSERT_NEAR(m11->data[0], 35, 0);
    ck_assert_int_eq(qkv_backward(t, m11), QKV_OK);
    for (int i = 0; i < 11; i++)
        ASSERT_NEAR(p11->grad[i], 2.0 * i / 11, 2 * REAL_EPS * i);
    qkv_tensor_free(p11);
    qkv_tensor_free(z11);
    /* logits of ±1e4: the loss is the margin, the gradient (σ - y)/N */
    qkv_tensor *l = tensor_of(1, (const int[]){2}, (const double[]){1e4, -1e4}, 1);
    qkv_tensor *z = tensor_of(1, (const int[]){2}, (const double[]){0, 0}, 0);
    qkv_tape_reset(t);
    qkv_tensor *loss = qkv_bce_with_logits(t, l, z);
    ASSERT_NEAR(loss->data[0], 5000, 0); /* (1e4 + 0)/2 */
    ck_assert_int_eq(qkv_backward(t, loss), QKV_OK);
    ck_assert(l->grad[0] == 0.5 && l->grad[1] == 0);
    /* infinite logits: the limits, (1 - y)·x for x = +inf and -y·x for
     * x = -inf, which are 0 where that factor is 0 (a target met exactly),
     * +inf where it is not; they were NaN (inf - inf, inf·0) */
    static const double xs[6] = {INFINITY, INFINITY, INFINITY, -INFINITY, -INFINITY, -INFINITY};
    static const double ys[6] = {1, 0, 0.5, 0, 1, 0.5};
    static const double want[6] = {0, INFINITY, INFINITY, 0, INFINITY, INFINITY};
    for (int i = 0; i < 6; i++) {
        qkv_tensor *li = tensor_of(1, (const int[]){1}, &xs[i], 1);
        qkv_tensor *zi = tensor_of(1, (const int[]){1}, &ys[i], 0);
        qkv_tape_reset(t);
        qkv_tensor *bi = qkv_bce_with_logits(t, li, zi);
        ck_assert_msg(bi->data[0] == want[i], "x %g, y %g: %g, not %g", xs[i], ys[i],
                      (double)bi->data[0], want[i]);
        ck_assert_int_eq(qkv_backward(t, bi), QKV_OK); /* σ(x) - y: 1 - y, or -y */
        ASSERT_NEAR(li->grad[0], (xs[i] > 0 ? 1 : 0) - ys[i], 0);
        qkv_tensor_free(li);
        qkv_tensor_free(zi);
    }
    /* the target takes no gradient, and shapes must match */
    qkv_tape_reset(t);
    ck_assert(qkv_mse(t, x, l) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mse: prediction [8] and target [2] differ in shape");
    /* one count of entries is not one shape: [2,3] against [3,2] (which
     * torch.nn.functional.mse_loss refuses too) */
    qkv_tensor *p23 = tensor_of(2, (const int[]){2, 3}, NULL, 1);
    qkv_tensor *z32 = tensor_of(2, (const int[]){3, 2}, NULL, 0);
    qkv_tape_reset(t);
    ck_assert(qkv_mse(t, p23, z32) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mse: prediction [2,3] and target [3,2] differ in shape");
    qkv_tape_reset(t);
    ck_assert(qkv_bce_with_logits(t, p23, z32) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "bce_with_logits: prediction [2,3] and target [3,2] differ in shape");
    qkv_tensor_free(p23);
    qkv_tensor_free(z32);
    qkv_tensor_free(x);
    qkv_tensor_free(y);
    qkv_tensor_free(l);
    qkv_tensor_free(z);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_dropout_keeps_or_scales_and_is_the_identity_when_off)
{
    enum { N = 20000 };
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){N}, NULL, 1);
    for (int i = 0; i < N; i++)
        x->data[i] = 1;
    qkv_rng g;
    qkv_rng_seed(&g, 11);
    ck_assert(qkv_dropout(t, x, 0, &g) == x); /* p = 0: x itself */
    qkv_tape_set_grad(t, 0);
    ck_assert(qkv_dropout(t, x, 0.5, &g) == x); /* evaluation: x itself */
    qkv_tape_set_grad(t, 1);
    qkv_tensor *y = qkv_dropout(t, x, 0.25, &g);
    int dropped = 0;
    for (int i = 0; i < N; i++) {
        ck_assert(y->data[i] == 0 || y->data[i] == (qkv_real)(1 / 0.75));
        dropped += y->data[i] == 0;
    }
    /* binomial(N, 1/4): mean 5000, sd 61; 6 sd either way */
    ck_assert_msg(dropped > 5000 - 370 && dropped < 5000 + 370, "dropped %d of %d", dropped, N);
    /* the gradient passes where the value did, scaled the same */
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
    for (int i = 0; i < N; i++)
        ck_assert(x->grad[i] == y->data[i]);
    /* the same seed, the same mask */
    qkv_tape_reset(t);
    qkv_rng_seed(&g, 11);
    qkv_tensor *y2 = qkv_dropout(t, x, 0.25, &g);
    qkv_rng h;
    qkv_rng_seed(&h, 11);
    for (int i = 0; i < 10; i++)
        ck_assert((y2->data[i] == 0) == (qkv_rng_random(&h) < 0.25));
    ck_assert(qkv_dropout(t, x, 1, &g) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    /* each refusal names its own cause: a p of 0 is fine, the NULL
     * generator is not */
    EXPECT_ERROR_ON(t, qkv_dropout(t, x, 1, &g), QKV_ERR_ARG, "dropout: p = 1 must be in [0, 1)");
    EXPECT_ERROR_ON(t, qkv_dropout(t, x, -NAN, &g), QKV_ERR_ARG,
                    "dropout: p = NaN must be in [0, 1)"); /* printf's "-nan" */
    EXPECT_ERROR_ON(t, qkv_dropout(t, x, 0, NULL), QKV_ERR_ARG,
                    "dropout: no generator (rng is NULL)");
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* dropout's gradient adds into x's, which another consumer of x fills
 * too: d Σ(dropout(x) + x)/dx = m + 1, with m = 0 where the draw fell
 * below p = 1/2 and 1/(1 - p) = 2 elsewhere. */
START_TEST(test_dropout_gradient_adds_to_another_consumers)
{
    enum { N = 64 };
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){N}, NULL, 1);
    for (int i = 0; i < N; i++)
        x->data[i] = (qkv_real)(i + 1);
    qkv_rng g, h;
    qkv_rng_seed(&g, 7);
    qkv_rng_seed(&h, 7);
    qkv_tensor *y = qkv_dropout(t, x, 0.5, &g);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_add(t, y, x))), QKV_OK);
    int kept = 0;
    for (int i = 0; i < N; i++) {
        const double m = qkv_rng_random(&h) < 0.5 ? 0 : 2;
        kept += m != 0;
        ck_assert_msg(y->data[i] == m * (i + 1), "y[%d] = %g, mask %g", i, (double)y->data[i], m);
        ck_assert_msg(x->grad[i] == m + 1, "dx[%d] = %g, expected %g", i, (double)x->grad[i],
                      m + 1);
    }
    ck_assert(kept > 0 && kept < N); /* both kinds of value were checked */
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* An input another tape made cannot be recorded: dropout gives nil and
 * says why, not an output whose gradient would never reach x. */
START_TEST(test_dropout_refuses_another_tapes_input)
{
    qkv_tape *t = qkv_tape_new(0, NULL), *u = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){4}, (const double[]){1, 2, 3, 4}, 1);
    qkv_tensor *x = qkv_scale(u, w, 2); /* its gradient is u's */
    qkv_rng g;
    qkv_rng_seed(&g, 1);
    expect_another_tapes_input(t, qkv_dropout(t, x, 0.5, &g), "dropout");
    qkv_tensor_free(w);
    qkv_tape_free(t);
    qkv_tape_free(u);
}
END_TEST

START_TEST(test_backward_from_any_tensor_seeds_its_gradient)
{
    /* y = x ⊙ x from y's gradient dy: dx = 2·x·dy, as y.backward(dy) */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){2, 2}, (const double[]){1, -2, 3, 0.5}, 1);
    qkv_tensor *y = qkv_mul(t, x, x);
    const qkv_real dy[4] = {1, 10, -1, 4};
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 4), QKV_OK);
    const double want[4] = {2, -40, -6, 4};
    for (int i = 0; i < 4; i++)
        ck_assert(x->grad[i] == want[i]);
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 4), QKV_ERR_ARG); /* once per recording */
    qkv_tape_reset(t);
    y = qkv_mul(t, x, x);
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 3), QKV_ERR_SHAPE);
    ck_assert_str_eq(qkv_tape_error(t), "backward_from: [2,2] has 4 values, the seed 3");
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* a prediction in two losses gets the sum of both gradients: twice
 * 2(x - y)/N for mse, twice (σ(x) - y)/N for bce (σ worked out here from
 * exp, not by the op) */
START_TEST(test_mse_and_bce_gradients_add_to_what_is_there)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    static const double xv[3] = {1, -2, 0.5}, yv[3] = {0.25, 1, 0};
    qkv_tensor *x = tensor_of(1, (const int[]){3}, xv, 1);
    qkv_tensor *y = tensor_of(1, (const int[]){3}, yv, 0);
    ck_assert_int_eq(qkv_backward(t, qkv_add(t, qkv_mse(t, x, y), qkv_mse(t, x, y))), QKV_OK);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(x->grad[i], 2 * 2 * (xv[i] - yv[i]) / 3, 4 * REAL_EPS);
    qkv_tape_reset(t);
    qkv_tensor_zero_grad(x);
    ck_assert_int_eq(
        qkv_backward(t, qkv_add(t, qkv_bce_with_logits(t, x, y), qkv_bce_with_logits(t, x, y))),
        QKV_OK);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(x->grad[i], 2 * (1 / (1 + exp(-xv[i])) - yv[i]) / 3, 4 * REAL_EPS);
    qkv_tensor_free(x);
    qkv_tensor_free(y);
    qkv_tape_free(t);
}
END_TEST

/* mse sums eight partials in lockstep over the first multiple of 8 and
 * the rest one by one: counts of 1 to 7 past it (here 5, 12 and 15, with
 * pred i and target 0) each count every entry once, Σ i²/n */
START_TEST(test_mse_counts_each_entry_once_for_any_count)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    static const int counts[3] = {5, 12, 15};
    for (int c = 0; c < 3; c++) {
        const int n = counts[c];
        qkv_tensor *p = tensor_of(1, &n, NULL, 1);
        qkv_tensor *z = tensor_of(1, &n, NULL, 0);
        double want = 0;
        for (int i = 0; i < n; i++) {
            p->data[i] = (qkv_real)i;
            want += (double)i * i;
        }
        want /= n; /* 6, 42.1666..., 63.333... */
        qkv_tape_reset(t);
        qkv_tensor *m = qkv_mse(t, p, z);
        ASSERT_NEAR(m->data[0], want, 2 * REAL_EPS * want);
        ck_assert_int_eq(qkv_backward(t, m), QKV_OK);
        for (int i = 0; i < n; i++)
            ASSERT_NEAR(p->grad[i], 2.0 * i / n, 2 * REAL_EPS * i);
        qkv_tensor_free(p);
        qkv_tensor_free(z);
    }
    qkv_tape_free(t);
}
END_TEST

/* a target that is nil (NULL, or a failed call's result) is a missing
 * input, as a nil prediction is, not a shape that differs */
START_TEST(test_mse_and_bce_refuse_a_nil_target)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, NULL, 1);
    EXPECT_ERROR_ON(t, qkv_mse(t, x, NULL), QKV_ERR_ARG,
                    "mse: input is nil (NULL, or the result of a failed call)");
    EXPECT_ERROR_ON(t, qkv_mse(t, x, qkv_nil()), QKV_ERR_ARG,
                    "mse: input is nil (NULL, or the result of a failed call)");
    EXPECT_ERROR_ON(t, qkv_bce_with_logits(t, x, NULL), QKV_ERR_ARG,
                    "bce_with_logits: input is nil (NULL, or the result of a failed call)");
    EXPECT_ERROR_ON(t, qkv_bce_with_logits(t, x, qkv_nil()), QKV_ERR_ARG,
                    "bce_with_logits: input is nil (NULL, or the result of a failed call)");
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* L1 and Huber losses, mean over the entries, by hand: d = pred - target
 * = [0, 2, -0.5, 0, -3, 0.75] gives mean |d| = 6.25/6 and, at delta 1,
 * mean of d²/2 where |d| < 1, else |d| - 1/2: (1.5 + 0.125 + 2.5 +
 * 0.28125)/6 = 0.734375. Gradients sign(d)/6 (0 where d = 0) and
 * clamp(d, -delta, delta)/6, as PyTorch 1.13 gives them (F.l1_loss,
 * F.huber_loss in float64, which agree on every value here) */
START_TEST(test_l1_and_huber_losses_by_hand_and_at_their_edges)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double pv[6] = {1, 2, 3, 0.5, -2, 4}, tv[6] = {1, 0, 3.5, 0.5, 1, 3.25};
    qkv_tensor *p = tensor_of(2, (const int[]){2, 3}, pv, 1);
    qkv_tensor *y = tensor_of(2, (const int[]){2, 3}, tv, 0);
    qkv_tensor *l1 = qkv_l1_loss(t, p, y);
    ck_assert_msg(!qkv_tensor_is_nil(l1), "%s", qkv_tape_error(t));
    ck_assert_int_eq(l1->ndim, 0);
    ASSERT_NEAR(l1->data[0], 6.25 / 6, 2 * REAL_EPS);
    ck_assert_int_eq(qkv_backward(t, l1), QKV_OK);
    const double g1[6] = {0, 1.0 / 6, -1.0 / 6, 0, -1.0 / 6, 1.0 / 6};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(p->grad[i], g1[i], REAL_EPS);
    /* a second backward adds to what the first left */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_l1_loss(t, p, y)), QKV_OK);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(p->grad[i], 2 * g1[i], 2 * REAL_EPS);
    qkv_tape_reset(t);
    qkv_tensor_zero_grad(p);
    qkv_tensor *h = qkv_huber_loss(t, p, y, 1);
    ck_assert_msg(!qkv_tensor_is_nil(h), "%s", qkv_tape_error(t));
    ck_assert(h->ndim == 0 && h->data[0] == 0.734375);
    ck_assert_int_eq(qkv_backward(t, h), QKV_OK);
    const double gh[6] = {0, 1.0 / 6, -0.5 / 6, 0, -1.0 / 6, 0.75 / 6};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(p->grad[i], gh[i], REAL_EPS);
    qkv_tape_reset(t); /* and so for Huber */
    ck_assert_int_eq(qkv_backward(t, qkv_huber_loss(t, p, y, 1)), QKV_OK);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(p->grad[i], 2 * gh[i], 2 * REAL_EPS);
    /* at |d| = delta the two pieces meet: delta 0.5 at d = -0.5 gives
     * 0.5·(0.5 - 0.25) = 0.125 = 0.5², and gradient -delta */
    qkv_tape_reset(t);
    qkv_tensor_zero_grad(p);
    h = qkv_huber_loss(t, p, y, 0.5);
    /* (0 + 0.875 + 0.125 + 0 + 1.375 + 0.25)/6 */
    ASSERT_NEAR(h->data[0], 2.625 / 6, 2 * REAL_EPS);
    ck_assert_int_eq(qkv_backward(t, h), QKV_OK);
    ASSERT_NEAR(p->grad[2], -0.5 / 6, REAL_EPS);
    ASSERT_NEAR(p->grad[5], 0.5 / 6, REAL_EPS);
    /* 11 entries, past a group of 8: pred i, target 0 gives Σi/11 = 5 and
     * Σ(i - 1/2)/11 = 50/11 over i = 1..10; gradients 1/11, 0 at i = 0 */
    qkv_tensor *p11 = tensor_of(1, (const int[]){11}, NULL, 1);
    qkv_tensor *z11 = tensor_of(1, (const int[]){11}, NULL, 0);
    for (int i = 0; i < 11; i++)
        p11->data[i] = (qkv_real)i;
    qkv_tape_reset(t);
    qkv_tensor *sum = qkv_add(t, qkv_l1_loss(t, p11, z11), qkv_huber_loss(t, p11, z11, 1));
    ASSERT_NEAR(sum->data[0], 5 + 50.0 / 11, 4 * REAL_EPS * 10);
    ck_assert_int_eq(qkv_backward(t, sum), QKV_OK); /* the two add up */
    for (int i = 0; i < 11; i++)
        ASSERT_NEAR(p11->grad[i], i == 0 ? 0 : 2.0 / 11, REAL_EPS);
    /* ±1e4 apart by 2e4: finite; NaN and inf - inf give NaN losses, with
     * gradient 0 (L1) and NaN (Huber) there, as PyTorch gives them */
    const double fp[4] = {1e4, -1e4, NAN, INFINITY}, ft[4] = {-1e4, 1e4, 0, INFINITY};
    qkv_tensor *pf = tensor_of(1, (const int[]){4}, fp, 1);
    qkv_tensor *tf = tensor_of(1, (const int[]){4}, ft, 0);
    qkv_tensor *pf2 = tensor_of(1, (const int[]){2}, fp, 1);
    qkv_tensor *tf2 = tensor_of(1, (const int[]){2}, ft, 0);
    qkv_tape_reset(t);
    ck_assert(qkv_l1_loss(t, pf2, tf2)->data[0] == 2e4);
    ck_assert(qkv_huber_loss(t, pf2, tf2, 1)->data[0] == 19999.5);
    qkv_tape_reset(t);
    l1 = qkv_l1_loss(t, pf, tf);
    ck_assert(isnan(l1->data[0]));
    ck_assert_int_eq(qkv_backward(t, l1), QKV_OK);
    ck_assert(pf->grad[0] == 0.25 && pf->grad[1] == -0.25 && pf->grad[2] == 0 && pf->grad[3] == 0);
    qkv_tape_reset(t);
    qkv_tensor_zero_grad(pf);
    h = qkv_huber_loss(t, pf, tf, 2);
    ck_assert(isnan(h->data[0]));
    ck_assert_int_eq(qkv_backward(t, h), QKV_OK);
    ck_assert(pf->grad[0] == 0.5 && pf->grad[1] == -0.5 && isnan(pf->grad[2]) &&
              isnan(pf->grad[3]));
    /* no node while gradients are off */
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    ck_assert(qkv_l1_loss(t, p, y)->grad == NULL && qkv_huber_loss(t, p, y, 1)->grad == NULL);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    qkv_tape_set_grad(t, 1);
    /* errors: shapes, nil inputs, delta positive and finite, another
     * tape's prediction */
    EXPECT_ERROR_ON(t, qkv_l1_loss(t, p, pf), QKV_ERR_SHAPE,
                    "l1_loss: prediction [2,3] and target [4] differ in shape");
    EXPECT_ERROR_ON(t, qkv_huber_loss(t, p, pf, 1), QKV_ERR_SHAPE,
                    "huber_loss: prediction [2,3] and target [4] differ in shape");
    EXPECT_ERROR_ON(t, qkv_l1_loss(t, p, NULL), QKV_ERR_ARG,
                    "l1_loss: input is nil (NULL, or the result of a failed call)");
    EXPECT_ERROR_ON(t, qkv_huber_loss(t, qkv_nil(), y, 1), QKV_ERR_ARG,
                    "huber_loss: input is nil (NULL, or the result of a failed call)");
    EXPECT_ERROR_ON(t, qkv_huber_loss(t, p, y, 0), QKV_ERR_ARG,
                    "huber_loss: delta 0 must be positive and finite");
    EXPECT_ERROR_ON(t, qkv_huber_loss(t, p, y, -1), QKV_ERR_ARG,
                    "huber_loss: delta -1 must be positive and finite");
    EXPECT_ERROR_ON(t, qkv_huber_loss(t, p, y, NAN), QKV_ERR_ARG,
                    "huber_loss: delta NaN must be positive and finite");
    EXPECT_ERROR_ON(t, qkv_huber_loss(t, p, y, INFINITY), QKV_ERR_ARG,
                    "huber_loss: delta infinity must be positive and finite");
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_l1_loss(t, qkv_scale(u, p, 2), y), "l1_loss");
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_huber_loss(t, qkv_scale(u, p, 2), y, 1), "huber_loss");
    qkv_tape_free(u);
    qkv_tensor_free(pf);
    qkv_tensor_free(tf);
    qkv_tensor_free(pf2);
    qkv_tensor_free(tf2);
    qkv_tensor_free(p11);
    qkv_tensor_free(z11);
    qkv_tensor_free(p);
    qkv_tensor_free(y);
    qkv_tape_free(t);
}
END_TEST

Suite *norm_suite(void)
{
    Suite *s = suite_create("norm");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_layer_norm_and_rms_norm_match_cpython);
    tcase_add_test(tc, test_a_constant_row_normalises_to_beta);
    tcase_add_test(tc, test_norm_takes_eps_zero_and_refuses_an_infinite_one);
    tcase_add_test(tc, test_norm_refuses_a_short_gain_and_a_scalar);
    tcase_add_test(tc, test_norm_records_a_gradient_that_only_beta_or_gamma_wants);
    tcase_add_test(tc, test_norm_kernels_give_the_portable_bits_on_every_path);
    tcase_add_test(tc, test_norm_gradients_add_where_the_input_is_also_a_gain_or_reused);
    tcase_add_test(tc, test_norm_gains_made_on_the_tape_get_their_gradients);
    tcase_add_test(tc, test_norm_out_of_memory_names_the_op);
    tcase_add_test(tc, test_layer_norm_stays_within_its_rounding_bound);
    tcase_add_test(tc, test_mse_and_bce_match_cpython_and_stay_finite);
    tcase_add_test(tc, test_mse_and_bce_gradients_add_to_what_is_there);
    tcase_add_test(tc, test_mse_counts_each_entry_once_for_any_count);
    tcase_add_test(tc, test_mse_and_bce_refuse_a_nil_target);
    tcase_add_test(tc, test_l1_and_huber_losses_by_hand_and_at_their_edges);
    tcase_add_test(tc, test_dropout_keeps_or_scales_and_is_the_identity_when_off);
    tcase_add_test(tc, test_dropout_gradient_adds_to_another_consumers);
    tcase_add_test(tc, test_dropout_refuses_another_tapes_input);
    tcase_add_test(tc, test_backward_from_any_tensor_seeds_its_gradient);
    suite_add_tcase(s, tc);
    return s;
}
