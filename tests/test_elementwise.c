/*
 * test_elementwise.c - the element-wise ops: sub, div and broadcasting of
 * both operands (with the gradients reduced over the broadcast dimensions),
 * and the maps exp, log, sqrt, pow, sigmoid, gelu, silu and tanh against
 * CPython's math module (tests/data/ops_golden.h, from
 * scripts/golden_ops.py), at their edges, on every kernel set; abs,
 * softplus, leaky_relu and clamp by hand and at their edges, against
 * values CPython and PyTorch give.
 */
#include <float.h>
#include <string.h>

#include "tests.h"
#include "data/ops_golden.h"

/* The kernel sets this CPU has, for the maps that have vector versions. */
static const char *sets[] = {"portable", "avx2", "avx512"};

/* A tensor of n values on the tape, without a gradient. */
static qkv_tensor *tape_values(qkv_tape *t, int ndim, const int *shape, const double *v)
{
    qkv_tensor *x = qkv_tape_tensor(t, ndim, shape, 0);
    ck_assert(!qkv_tensor_is_nil(x));
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = (qkv_real)v[i];
    return x;
}

/* |got - want| within k rounding errors of want (relative), and exactly
 * equal where want is 0 or infinite. */
static void expect_close(const qkv_tensor *y, const double *want, size_t n, double k,
                         const char *what)
{
    ck_assert(!qkv_tensor_is_nil(y));
    ck_assert_uint_eq(y->numel, n);
    for (size_t i = 0; i < n; i++) {
        double got = y->data[i], tol = k * REAL_EPS * fabs(want[i]);
        if (want[i] == 0 || isinf(want[i]))
            ck_assert_msg(got == want[i], "%s[%zu] = %.9g, expected %.9g (%s)", what, i, got,
                          want[i], qkv_kernels_name());
        else
            ck_assert_msg(fabs(got - want[i]) <= tol, "%s[%zu] = %.9g, expected %.9g (%s)", what, i,
                          got, want[i], qkv_kernels_name());
    }
}

START_TEST(test_maps_match_cpython_on_every_kernel_set)
{
    /* the vector kernels are held to a few ulp (test_kernels); 8 rounding
     * errors bound them and the portable ones (one rounding) alike */
    const int n8[1] = {8};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (qkv_kernels_use(sets[s], NULL) != QKV_OK)
            continue;
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *x = tape_values(t, 1, n8, golden_x), *p = tape_values(t, 1, n8, golden_pos);
        expect_close(qkv_exp(t, x), golden_exp, 8, 8, "exp");
        expect_close(qkv_tanh(t, x), golden_tanh, 8, 8, "tanh");
        expect_close(qkv_sigmoid(t, x), golden_sigmoid, 8, 8, "sigmoid");
        expect_close(qkv_gelu(t, x), golden_gelu, 8, 8, "gelu");
        expect_close(qkv_silu(t, x), golden_silu, 8, 8, "silu");
        expect_close(qkv_log(t, p), golden_log, 8, 8, "log");
        expect_close(qkv_sqrt(t, p), golden_sqrt, 8, 1, "sqrt");
        expect_close(qkv_pow(t, p, 1.5), golden_pow_1_5, 8, 1, "pow");
        double neg[8];
        for (int i = 0; i < 8; i++)
            neg[i] = -golden_x[i];
        expect_close(qkv_neg(t, x), neg, 8, 0, "neg");
        ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

START_TEST(test_maps_at_their_edges)
{
    const int n6[1] = {6};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (qkv_kernels_use(sets[s], NULL) != QKV_OK)
            continue;
        qkv_tape *t = qkv_tape_new(0, NULL);
        const double big[6] = {-1e4, -100, -30, 30, 100, 1e4};
        qkv_tensor *x = tape_values(t, 1, n6, big);
        qkv_tensor *sg = qkv_sigmoid(t, x), *g = qkv_gelu(t, x), *th = qkv_tanh(t, x);
        for (int i = 0; i < 6; i++) { /* within [0,1] or ±1 exactly, and never NaN */
            ck_assert_msg(sg->data[i] >= 0 && sg->data[i] <= 1, "sigmoid(%g) = %g (%s)", big[i],
                          (double)sg->data[i], qkv_kernels_name());
            ck_assert_msg(th->data[i] == (big[i] < 0 ? -1 : 1), "tanh(%g) = %g (%s)", big[i],
                          (double)th->data[i], qkv_kernels_name());
        }
        ck_assert(sg->data[0] == 0 && sg->data[5] == 1); /* saturated exactly at ±1e4 */
        ck_assert(g->data[0] == 0 && g->data[1] == 0);
        ck_assert(g->data[4] == 100 && g->data[5] == 1e4);
        /* at the far ends: x·σ(v) tends to -0 below and to x above, on
         * every set alike */
        const double far[3] = {-INFINITY, -3e38, INFINITY};
        qkv_tensor *gf = qkv_gelu(t, tape_values(t, 1, (const int[]){3}, far));
        for (int i = 0; i < 2; i++)
            ck_assert_msg(gf->data[i] == 0 && signbit(gf->data[i]), "gelu(%g) = %g (%s)", far[i],
                          (double)gf->data[i], qkv_kernels_name());
        ck_assert(gf->data[2] == INFINITY);
        /* sigmoid and tanh at ±inf and NaN, tanh at -0 (kernels.h) */
        const double inf4[4] = {-INFINITY, INFINITY, NAN, -0.0};
        qkv_tensor *xi = tape_values(t, 1, (const int[]){4}, inf4);
        qkv_tensor *sgi = qkv_sigmoid(t, xi), *thi = qkv_tanh(t, xi);
        ck_assert_msg(sgi->data[0] == 0 && sgi->data[1] == 1 && isnan(sgi->data[2]),
                      "sigmoid(-inf, inf, NaN) = %g, %g, %g (%s)", (double)sgi->data[0],
                      (double)sgi->data[1], (double)sgi->data[2], qkv_kernels_name());
        ck_assert_msg(thi->data[0] == -1 && thi->data[1] == 1 && isnan(thi->data[2]) &&
                          thi->data[3] == 0 && signbit(thi->data[3]),
                      "tanh(-inf, inf, NaN, -0) = %g, %g, %g, %g (%s)", (double)thi->data[0],
                      (double)thi->data[1], (double)thi->data[2], (double)thi->data[3],
                      qkv_kernels_name());
        const double special[6] = {0, -0.0, INFINITY, -1, 1e-45, NAN};
        qkv_tensor *z = tape_values(t, 1, n6, special);
        qkv_tensor *lg = qkv_log(t, z), *sq = qkv_sqrt(t, z), *ex = qkv_exp(t, z);
        ck_assert(lg->data[0] == -INFINITY && lg->data[1] == -INFINITY); /* log 0 */
        ck_assert(lg->data[2] == INFINITY && isnan(lg->data[3]) && isnan(lg->data[5]));
        ck_assert(sq->data[0] == 0 && sq->data[2] == INFINITY && isnan(sq->data[3]));
        ck_assert(ex->data[0] == 1 && ex->data[2] == INFINITY && isnan(ex->data[5]));
        const double ninf[1] = {-INFINITY};
        ck_assert(qkv_exp(t, tape_values(t, 1, (const int[]){1}, ninf))->data[0] == 0);
        ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

START_TEST(test_map_gradients_at_their_edges)
{
    /* sigmoid and gelu at ±1e4: gradients 0 (and 1 for gelu's +1e4), never
     * NaN; log and sqrt at 0: infinite, as PyTorch gives; SiLU and ReLU at 0 */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){2}, (const double[]){-1e4, 1e4}, 1);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_sigmoid(t, x))), QKV_OK);
    ck_assert(x->grad[0] == 0 && x->grad[1] == 0);
    qkv_tensor_zero_grad(x);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_gelu(t, x))), QKV_OK);
    ck_assert(x->grad[0] == 0 && x->grad[1] == 1);
    /* at ±inf: gelu's limits, gradients 0 and 1 (PyTorch: NaN); silu's
     * -inf·0 is NaN and so are its gradients at both ends, as PyTorch's */
    qkv_tensor *inf = tensor_of(1, (const int[]){2}, (const double[]){-INFINITY, INFINITY}, 1);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_gelu(t, inf))), QKV_OK);
    ck_assert(inf->grad[0] == 0 && inf->grad[1] == 1);
    qkv_tensor_zero_grad(inf);
    qkv_tape_reset(t);
    qkv_tensor *si = qkv_silu(t, inf);
    ck_assert(isnan(si->data[0]) && si->data[1] == INFINITY);
    qkv_real ones[2] = {1, 1};
    ck_assert_int_eq(qkv_backward_from(t, si, ones, 2), QKV_OK);
    ck_assert(isnan(inf->grad[0]) && isnan(inf->grad[1]));
    qkv_tensor_free(inf);
    qkv_tensor *z = tensor_of(1, (const int[]){1}, (const double[]){0}, 1);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_log(t, z))), QKV_OK);
    ck_assert(z->grad[0] == INFINITY);
    qkv_tensor_zero_grad(z);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_sqrt(t, z))), QKV_OK);
    ck_assert(z->grad[0] == INFINITY);
    /* SiLU at 0, where s = y/x is 0/0: silu'(0) = σ(0) + 0 = 1/2 exactly
     * (PyTorch gives 0.5); ReLU at 0 takes PyTorch's subgradient 0 */
    qkv_tensor_zero_grad(z);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_silu(t, z))), QKV_OK);
    ck_assert(z->grad[0] == 0.5);
    qkv_tensor_zero_grad(z);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_relu(t, z))), QKV_OK);
    ck_assert(z->grad[0] == 0);
    qkv_tensor_free(x);
    qkv_tensor_free(z);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_silu_gradient_at_subnormal_inputs)
{
    /* silu'(x) = σ(x) + x·σ(x)·(1 - σ(x)) is 1/2 to the last bit for x
     * this close to 0: PyTorch 1.13 in float64 gives 0.5 at 5e-324 (and
     * in float32 at 1e-45). Backward must not recover σ as y/x there,
     * where y = x·σ(x) is subnormal and has lost its bits (y = 0 at the
     * smallest subnormal, whose half rounds to 0) */
#ifdef QKV_DOUBLE
    const double tiny = DBL_TRUE_MIN, small = DBL_MIN / 3;
#else
    const double tiny = FLT_TRUE_MIN, small = FLT_MIN / 3;
#endif
    const double xs[6] = {tiny, -tiny, 3 * tiny, small, -small, -3 * tiny};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (qkv_kernels_use(sets[s], NULL) != QKV_OK)
            continue;
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *x = tensor_of(1, (const int[]){6}, xs, 1);
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_silu(t, x))), QKV_OK);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(x->grad[i] == 0.5, "silu'(%g) = %.17g, expected 0.5 (%s)", xs[i],
                          (double)x->grad[i], qkv_kernels_name());
        qkv_tensor_free(x);
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

START_TEST(test_silu_in_its_far_negative_tail)
{
    /* Where σ(x) is subnormal (x < -87.3 in float, -708.4 in double) but
     * x·σ(x) is not, σ has lost bits (about 19 are left at x = -90), and
     * x·σ(x) and the gradient with them. Against CPython's 50-digit
     * values: one rounding of a product of σ in a wider format, 4 ulp. */
#ifdef QKV_DOUBLE
    const double *xs = golden_silu_tail_d_x, *ys = golden_silu_tail_d;
    const double *gs = golden_silu_tail_d_grad;
    const int n = 5;
#else
    const double *xs = golden_silu_tail_f_x, *ys = golden_silu_tail_f;
    const double *gs = golden_silu_tail_f_grad;
    const int n = 6;
#endif
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (qkv_kernels_use(sets[s], NULL) != QKV_OK)
            continue;
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *x = tensor_of(1, (const int[]){n}, xs, 1);
        qkv_tensor *y = qkv_silu(t, x);
        expect_close(y, ys, (size_t)n, 4, "silu tail");
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
        for (int i = 0; i < n; i++)
            ck_assert_msg(fabs((double)x->grad[i] - gs[i]) <= 4 * REAL_EPS * fabs(gs[i]),
                          "silu'(%g) = %.9g, expected %.9g (%s)", xs[i], (double)x->grad[i], gs[i],
                          qkv_kernels_name());
        qkv_tensor_free(x);
        qkv_tape_free(t);
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

START_TEST(test_sub_and_div_by_hand)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *a = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1);
    qkv_tensor *b = tensor_of(2, (const int[]){2, 2}, (const double[]){4, -2, 0.5, 8}, 1);
    qkv_tensor *d = qkv_sub(t, a, b), *q = qkv_div(t, a, b);
    const double dv[4] = {-3, 4, 2.5, -4}, qv[4] = {0.25, -1, 6, 0.5};
    for (int i = 0; i < 4; i++) {
        ck_assert(d->data[i] == dv[i]);
        ck_assert(q->data[i] == qv[i]);
    }
    /* d(sum(a/b))/da = 1/b, d/db = -a/b² */
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, q)), QKV_OK);
    const double da[4] = {0.25, -0.5, 2, 0.125}, db[4] = {-1.0 / 16, -0.5, -12, -4.0 / 64};
    for (int i = 0; i < 4; i++) {
        ASSERT_NEAR(a->grad[i], da[i], 0);
        ASSERT_NEAR(b->grad[i], db[i], 4 * REAL_EPS * fabs(db[i]));
    }
    qkv_tensor_free(a);
    qkv_tensor_free(b);
    qkv_tape_free(t);
}
END_TEST

/* add and sub copy dy (or -dy) into a gradient that no node has filled
 * yet instead of adding into zeros, and must give the same bits: 0 + -0 is
 * +0 and 0 - +0 is +0, where a plain copy gives -0 */
START_TEST(test_add_and_sub_claimed_gradients_of_zero_are_plus_zero)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){4}, (const double[]){1, 2, 3, 4}, 1);
    qkv_tensor *c = tensor_of(1, (const int[]){4}, (const double[]){5, 6, 7, 8}, 0);
    const qkv_real mz = (qkv_real)-0.0;
    const qkv_real dy[2][4] = {{mz, 1, mz, 2}, {0, 1, mz, 2}};
    for (int op = 0; op < 3; op++) { /* a + c, a - c, c - a: a on the tape, claimed */
        qkv_tape_reset(t);
        qkv_tensor *a = qkv_scale(t, x, 1);
        qkv_tensor *y = op == 0 ? qkv_add(t, a, c) : op == 1 ? qkv_sub(t, a, c) : qkv_sub(t, c, a);
        const qkv_real *d = dy[op == 2];
        ck_assert_int_eq(qkv_backward_from(t, y, d, 4), QKV_OK);
        for (int i = 0; i < 4; i++) {
            const double want = (op == 2 ? -(double)d[i] : (double)d[i]) + 0.0; /* +0 */
            ck_assert_msg(a->grad[i] == want && (want != 0 || !signbit(a->grad[i])),
                          "op %d: da[%d] = %g, want %g", op, i, (double)a->grad[i], want);
        }
    }
    qkv_tensor_free(x);
    qkv_tensor_free(c);
    qkv_tape_free(t);
}
END_TEST

/* the mask adds any value as it is, and only a -inf drops its entry's
 * gradient: a finite bias (-2, 0) or +inf passes dy, as x + m would */
START_TEST(test_mask_blocks_the_gradient_only_at_minus_inf)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){2, 4}, (const double[]){1, 2, 3, 4, 5, 6, 7, 8}, 1);
    qkv_tensor *m = tensor_of(1, (const int[]){4}, (const double[]){-2, -INFINITY, INFINITY, 0}, 0);
    qkv_tensor *y = qkv_mask(t, x, m);
    const double yv[8] = {-1, -INFINITY, INFINITY, 4, 3, -INFINITY, INFINITY, 8};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(y->data[i] == yv[i], "y[%d] = %g", i, (double)y->data[i]);
    const qkv_real dy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 8), QKV_OK);
    const double dx[8] = {1, 0, 3, 4, 5, 0, 7, 8};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(x->grad[i] == dx[i], "dx[%d] = %g", i, (double)x->grad[i]);
    /* a mask that does not broadcast to x, or only the other way */
    qkv_tensor *m3 = tensor_of(1, (const int[]){3}, NULL, 0);
    qkv_tensor *m124 = tensor_of(3, (const int[]){1, 2, 4}, NULL, 0);
    EXPECT_ERROR_ON(t, qkv_mask(t, x, m3), QKV_ERR_SHAPE,
                    "mask: [2,4] and [3]: second shape does not broadcast to the first");
    EXPECT_ERROR_ON(t, qkv_mask(t, x, m124), QKV_ERR_SHAPE,
                    "mask: [2,4] and [1,2,4]: second shape does not broadcast to the first");
    qkv_tensor_free(m3);
    qkv_tensor_free(m124);
    qkv_tensor_free(x);
    qkv_tensor_free(m);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_broadcasting_works_both_ways_and_reduces_gradients)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    /* [3,1] + [1,4] = [3,4]: an outer sum */
    qkv_tensor *col = tensor_of(2, (const int[]){3, 1}, (const double[]){10, 20, 30}, 1);
    qkv_tensor *row = tensor_of(2, (const int[]){1, 4}, (const double[]){1, 2, 3, 4}, 1);
    qkv_tensor *y = qkv_add(t, col, row);
    ck_assert_int_eq(y->ndim, 2);
    ck_assert_int_eq(y->shape[0], 3);
    ck_assert_int_eq(y->shape[1], 4);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            ck_assert(y->data[i * 4 + j] == 10 * (i + 1) + j + 1);
    /* the bias on the left: [4] + [2,3,4], the old add refused this order */
    qkv_tensor *bias = tensor_of(1, (const int[]){4}, (const double[]){1, 2, 3, 4}, 0);
    qkv_tensor *x = tensor_of(3, (const int[]){2, 3, 4}, NULL, 0);
    qkv_tensor *z = qkv_add(t, bias, x);
    ck_assert_int_eq(z->ndim, 3);
    ck_assert(z->data[23] == 4 && z->data[4] == 1);
    /* gradients: each sums over the dimension it was broadcast along:
     * d(sum(col ⊙ row))/dcol = Σ_j row_j = 10; /drow = Σ_i col_i = 60 */
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, col, row))), QKV_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(col->grad[i] == 10);
    for (int j = 0; j < 4; j++)
        ck_assert(row->grad[j] == 60);
    /* shapes that do not broadcast */
    qkv_tape_reset(t);
    ck_assert(qkv_sub(t, row, col) != qkv_nil());                    /* [1,4] and [3,1] do */
    ck_assert(qkv_sub(t, bias, qkv_transpose(t, col)) == qkv_nil()); /* [4] and [1,3] not */
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_str_eq(qkv_tape_error(t), "sub: [4] and [1,3]: the shapes do not broadcast");
    qkv_tensor_free(col);
    qkv_tensor_free(row);
    qkv_tensor_free(bias);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_pow_has_a_zero_gradient_at_exponent_zero)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){0, 2, -3}, 1);
    qkv_tensor *y = qkv_pow(t, x, 0);
    ck_assert(y->data[0] == 1 && y->data[1] == 1 && y->data[2] == 1);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
    ck_assert(x->grad[0] == 0 && x->grad[1] == 0 && x->grad[2] == 0);
    /* x² at -3 has gradient -6; a non-finite exponent is an error */
    qkv_tape_reset(t);
    qkv_tensor_zero_grad(x);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_pow(t, x, 2))), QKV_OK);
    ck_assert(x->grad[2] == -6);
    qkv_tape_reset(t);
    ck_assert(qkv_pow(t, x, NAN) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    for (int sign = -1; sign <= 1; sign += 2) { /* an infinite one too, either sign */
        qkv_tape_reset(t);
        ck_assert(qkv_pow(t, x, sign * INFINITY) == qkv_nil());
        ck_assert_str_eq(qkv_tape_error(t), sign < 0 ? "pow: the exponent -infinity is not finite"
                                                     : "pow: the exponent infinity is not finite");
    }
    /* the documented edges: a finite negative x with a fractional p is
     * NaN, and -inf gives C's pow: +inf for p = 0.5, +0 for p = -0.5 */
    qkv_tensor *e = tensor_of(1, (const int[]){2}, (const double[]){-INFINITY, -4}, 0);
    qkv_tape_reset(t);
    qkv_tensor *r = qkv_pow(t, e, 0.5);
    ck_assert(isinf(r->data[0]) && r->data[0] > 0 && isnan(r->data[1]));
    r = qkv_pow(t, e, -0.5);
    ck_assert(r->data[0] == 0 && !signbit(r->data[0]) && isnan(r->data[1]));
    qkv_tensor_free(e);
    /* and so is a factor for scale, whose message names it */
    for (int i = 0; i < 3; i++) {
        const double bad[3] = {NAN, INFINITY, -INFINITY};
        qkv_tape_reset(t);
        ck_assert(qkv_scale(t, x, bad[i]) == qkv_nil());
        ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "scale: the factor"));
    }
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_relu_keeps_nan)
{
    /* relu(NaN) is NaN and passes dy back, as PyTorch 1.13 computes it:
     * torch.relu([nan, -1, 0, 2]) = [nan, 0, 0, 2], and backward with dy =
     * [3, 5, 7, 11] gives [3, 0, 0, 11]; max(x, 0) must not turn a NaN
     * (a diverged step) into a silent 0 */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){4}, (const double[]){NAN, -1, 0, 2}, 1);
    qkv_tensor *y = qkv_relu(t, x);
    ck_assert(!qkv_tensor_is_nil(y));
    ck_assert(isnan(y->data[0]) && y->data[1] == 0 && y->data[2] == 0 && y->data[3] == 2);
    const qkv_real dy[4] = {3, 5, 7, 11};
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 4), QKV_OK);
    ck_assert(x->grad[0] == 3 && x->grad[1] == 0 && x->grad[2] == 0 && x->grad[3] == 11);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_relu_keeps_the_sign_of_zero)
{
    /* torch.relu(torch.tensor([-0.0, 0.0])) is [-0., 0.] in PyTorch 1.13
     * (torch.copysign(1, y) gives [-1, 1]); the gradient at either is 0 */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){2}, (const double[]){-0.0, 0.0}, 1);
    qkv_tensor *y = qkv_relu(t, x);
    ck_assert(!qkv_tensor_is_nil(y));
    ck_assert(y->data[0] == 0 && signbit(y->data[0]));
    ck_assert(y->data[1] == 0 && !signbit(y->data[1]));
    ck_assert_int_eq(qkv_backward_from(t, y, (const qkv_real[]){3, 5}, 2), QKV_OK);
    ck_assert(x->grad[0] == 0 && x->grad[1] == 0);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_abs_by_hand_and_at_its_edges)
{
    /* |x| and dx = dy·sign(x), with sign(±0) = sign(NaN) = 0: PyTorch
     * 1.13 in float64 gives torch.abs([0, -0, nan, -2, inf, -inf]) =
     * [0, 0, nan, 2, inf, inf] (both zeros +0) and gradients
     * [0, 0, 0, -1, 1, -1] for dy = 1 */
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double xs[7] = {-2.5, 3, -0.0, 0.0, NAN, -INFINITY, INFINITY};
    qkv_tensor *x = tensor_of(1, (const int[]){7}, xs, 1);
    qkv_tensor *y = qkv_abs(t, x);
    ck_assert(!qkv_tensor_is_nil(y));
    ck_assert(y->data[0] == 2.5 && y->data[1] == 3);
    ck_assert(y->data[2] == 0 && !signbit(y->data[2]) && y->data[3] == 0 && !signbit(y->data[3]));
    ck_assert(isnan(y->data[4]) && y->data[5] == INFINITY && y->data[6] == INFINITY);
    const qkv_real dy[7] = {3, 5, 7, 11, 13, 17, 19};
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 7), QKV_OK);
    const double want[7] = {-3, 5, 0, 0, 0, -17, 19};
    for (int i = 0; i < 7; i++)
        ck_assert_msg(x->grad[i] == want[i], "abs'(%g)·dy = %g, expected %g", xs[i],
                      (double)x->grad[i], want[i]);
    /* errors name the op */
    EXPECT_ERROR_ON(t, qkv_abs(t, qkv_nil()), QKV_ERR_ARG,
                    "abs: input is nil (NULL, or the result of a failed call)");
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_abs(t, qkv_scale(u, x, 2)), "abs");
    qkv_tensor_free(x);
    qkv_tape_free(u);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_softplus_by_hand_and_at_its_edges)
{
    /* log(1 + e^x) = max(x, 0) + log1p(e^-|x|) and σ(x), from CPython's
     * math module (math.log1p(math.exp(-30)) and so on, as CPython 3
     * prints them). PyTorch 1.13 (F.softplus, float64) gives the same up
     * to x = 20, included, and x itself and gradient 1 above; qkv keeps
     * e^-x there: 25 + 1.4e-11 in double, 25 to the bit in float */
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double xs[9] = {-30, -1, 0, 0.5, 2, 20, 25, 1e4, -1e4};
    const double want[9] = {9.357622968839737e-14,
                            0.31326168751822286,
                            0.6931471805599453,
                            0.9740769841801067,
                            2.1269280110429727,
                            20.000000002061153,
                            25.000000000013888,
                            1e4,
                            0};
    const double sig[9] = {9.3576229688393e-14,
                           0.2689414213699951,
                           0.5,
                           0.6224593312018546,
                           0.8807970779778823,
                           0.9999999979388463,
                           0.999999999986112,
                           1,
                           0};
    qkv_tensor *x = tensor_of(1, (const int[]){9}, xs, 1);
    qkv_tensor *y = qkv_softplus(t, x);
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
    for (int i = 0; i < 9; i++) {
        ASSERT_NEAR(y->data[i], want[i], 2 * REAL_EPS * want[i]);
        ASSERT_NEAR(x->grad[i], sig[i], 2 * REAL_EPS * sig[i]);
    }
    /* exactly 1e4 and 0 at ±1e4; above PyTorch's threshold the double
     * build keeps what it drops */
    ck_assert(y->data[7] == 1e4 && y->data[8] == 0 && x->grad[7] == 1 && x->grad[8] == 0);
    ck_assert(sizeof(qkv_real) == 4 ? y->data[6] == 25 : y->data[6] > 25);
    /* a second backward adds to what the first left: 2σ(x) */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_softplus(t, x))), QKV_OK);
    for (int i = 0; i < 9; i++)
        ASSERT_NEAR(x->grad[i], 2 * sig[i], 4 * REAL_EPS * sig[i]);
    /* ±inf give +inf and 0 (gradients 1 and 0), NaN stays NaN, with a
     * NaN gradient, as in PyTorch */
    qkv_tensor *e = tensor_of(1, (const int[]){3}, (const double[]){INFINITY, -INFINITY, NAN}, 1);
    qkv_tape_reset(t);
    qkv_tensor *ye = qkv_softplus(t, e);
    ck_assert(ye->data[0] == INFINITY && ye->data[1] == 0 && isnan(ye->data[2]));
    ck_assert_int_eq(qkv_backward_from(t, ye, (const qkv_real[]){3, 5, 7}, 3), QKV_OK);
    ck_assert(e->grad[0] == 3 && e->grad[1] == 0 && isnan(e->grad[2]));
    /* no node while gradients are off */
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    y = qkv_softplus(t, x);
    ck_assert(!qkv_tensor_is_nil(y) && y->grad == NULL);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    qkv_tape_set_grad(t, 1);
    /* errors name the op */
    EXPECT_ERROR_ON(t, qkv_softplus(t, qkv_nil()), QKV_ERR_ARG,
                    "softplus: input is nil (NULL, or the result of a failed call)");
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_softplus(t, qkv_scale(u, x, 2)), "softplus");
    qkv_tensor_free(e);
    qkv_tensor_free(x);
    qkv_tape_free(u);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_leaky_relu_by_hand_and_at_its_edges)
{
    /* x > 0 ? x : slope·x, and dy or slope·dy: PyTorch 1.13 in float64
     * gives F.leaky_relu([-2.5, 3, -0, 0, nan, -inf, inf, 1e-3], -0.5) =
     * [1.25, 3, 0, -0, nan, inf, inf, 1e-3] and, for dy = [3, 5, 7, 11,
     * 13, 17, 19, 23], gradients [-1.5, 5, -3.5, -5.5, -6.5, -8.5, 19,
     * 23]: the slope at ±0 and at NaN. With slope 0, -inf gives NaN
     * (-inf·0) and -2.5 gives -0, as there */
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double xs[8] = {-2.5, 3, -0.0, 0.0, NAN, -INFINITY, INFINITY, 1e-3};
    const qkv_real dy[8] = {3, 5, 7, 11, 13, 17, 19, 23};
    qkv_tensor *x = tensor_of(1, (const int[]){8}, xs, 1);
    qkv_tensor *y = qkv_leaky_relu(t, x, -0.5);
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
    ck_assert(y->data[0] == 1.25 && y->data[1] == 3 && isnan(y->data[4]));
    ck_assert(y->data[2] == 0 && !signbit(y->data[2]) && y->data[3] == 0 && signbit(y->data[3]));
    ck_assert(y->data[5] == INFINITY && y->data[6] == INFINITY && y->data[7] == (qkv_real)1e-3);
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 8), QKV_OK);
    const double want[8] = {-1.5, 5, -3.5, -5.5, -6.5, -8.5, 19, 23};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(x->grad[i] == want[i], "leaky_relu'(%g)·dy = %g, expected %g", xs[i],
                      (double)x->grad[i], want[i]);
    qkv_tape_reset(t);
    y = qkv_leaky_relu(t, x, 0);
    ck_assert(y->data[0] == 0 && signbit(y->data[0]) && isnan(y->data[5]));
    /* no node while gradients are off */
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    y = qkv_leaky_relu(t, x, 0.01);
    ck_assert(!qkv_tensor_is_nil(y) && y->grad == NULL);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    qkv_tape_set_grad(t, 1);
    /* a slope that is not finite is refused, and errors name the op */
    EXPECT_ERROR_ON(t, qkv_leaky_relu(t, x, NAN), QKV_ERR_ARG,
                    "leaky_relu: the slope NaN is not finite");
    EXPECT_ERROR_ON(t, qkv_leaky_relu(t, x, -INFINITY), QKV_ERR_ARG,
                    "leaky_relu: the slope -infinity is not finite");
    /* nor is one finite only in double: 1e300 is +inf as a float, which
     * would make -inf and NaN of every x <= 0 (PyTorch's float32 refuses
     * it: "cannot be converted to type float without overflow"); the
     * double build takes it, as PyTorch's float64 does */
    if (sizeof(qkv_real) == sizeof(float)) {
        EXPECT_ERROR_ON(t, qkv_leaky_relu(t, x, 1e300), QKV_ERR_ARG,
                        "leaky_relu: the slope 1e+300 is not finite in float");
    } else {
        qkv_tape_reset(t);
        y = qkv_leaky_relu(t, x, -1e300);
        ck_assert(y->data[0] == 2.5e300 && y->data[3] == 0 && y->data[1] == 3);
    }
    EXPECT_ERROR_ON(t, qkv_leaky_relu(t, qkv_nil(), 0.01), QKV_ERR_ARG,
                    "leaky_relu: input is nil (NULL, or the result of a failed call)");
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_leaky_relu(t, qkv_scale(u, x, 2), 0.01), "leaky_relu");
    qkv_tensor_free(x);
    qkv_tape_free(u);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_clamp_by_hand_and_at_its_bounds)
{
    /* min(max(x, lo), hi); dx = dy where lo <= x <= hi, bounds included,
     * 0 elsewhere and at NaN. PyTorch 1.13 in float64 gives
     * torch.clamp([-2, -1, 0, 1, 2, nan, inf, -inf], -1, 1) =
     * [-1, -1, 0, 1, 1, nan, 1, -1] with gradients [0, 1, 1, 1, 0, 0, 0, 0]
     * for dy = 1; with bounds -inf and inf, x itself and gradients
     * [1, 1, 1, 1, 1, 0, 1, 1]; with 0 and inf (min only), [0, 0, 0, 1, 2,
     * nan, inf, 0] and gradients [0, 0, 1, 1, 1, 0, 1, 0] */
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double xs[9] = {-2, -1, -0.5, 0, 1, 2, NAN, INFINITY, -INFINITY};
    const qkv_real dy[9] = {3, 5, 7, 11, 13, 17, 19, 23, 29};
    static const struct {
        double lo, hi, y[9], dx[9];
    } cases[3] = {
        {-1, 1, {-1, -1, -0.5, 0, 1, 1, NAN, 1, -1}, {0, 5, 7, 11, 13, 0, 0, 0, 0}},
        {-INFINITY,
         INFINITY,
         {-2, -1, -0.5, 0, 1, 2, NAN, INFINITY, -INFINITY},
         {3, 5, 7, 11, 13, 17, 0, 23, 29}},
        {0, INFINITY, {0, 0, 0, 0, 1, 2, NAN, INFINITY, 0}, {0, 0, 0, 11, 13, 17, 0, 23, 0}},
    };
    for (int c = 0; c < 3; c++) {
        qkv_tape_reset(t);
        qkv_tensor *x = tensor_of(1, (const int[]){9}, xs, 1);
        qkv_tensor *y = qkv_clamp(t, x, cases[c].lo, cases[c].hi);
        ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
        ck_assert_int_eq(qkv_backward_from(t, y, dy, 9), QKV_OK);
        for (int i = 0; i < 9; i++) {
            const double w = cases[c].y[i];
            CHECK_EACH(isnan(w) ? isnan(y->data[i]) : y->data[i] == w,
                       "clamp(%g, %g, %g) = %g, expected %g", xs[i], cases[c].lo, cases[c].hi,
                       (double)y->data[i], w);
            CHECK_EACH(x->grad[i] == cases[c].dx[i], "clamp'(%g; %g, %g)·dy = %g, expected %g",
                       xs[i], cases[c].lo, cases[c].hi, (double)x->grad[i], cases[c].dx[i]);
        }
        qkv_tensor_free(x);
    }
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_clamp_refuses_bounds_out_of_order_or_nan)
{
    /* PyTorch takes min > max and gives max everywhere; here it is taken
     * for the mistake it almost surely is, as a NaN bound is */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    EXPECT_ERROR_ON(t, qkv_clamp(t, x, 1, -1), QKV_ERR_ARG, "clamp: the min 1 is above the max -1");
    EXPECT_ERROR_ON(t, qkv_clamp(t, x, NAN, 1), QKV_ERR_ARG, "clamp: the min NaN is not a number");
    EXPECT_ERROR_ON(t, qkv_clamp(t, x, 0, NAN), QKV_ERR_ARG, "clamp: the max NaN is not a number");
    EXPECT_ERROR_ON(t, qkv_clamp(t, qkv_nil(), 0, 1), QKV_ERR_ARG,
                    "clamp: input is nil (NULL, or the result of a failed call)");
    /* equal bounds are fine: every value is that bound, and only an x
     * equal to it passes its gradient */
    qkv_tape_reset(t);
    qkv_tensor *y = qkv_clamp(t, x, 2, 2);
    ck_assert(!qkv_tensor_is_nil(y) && y->data[0] == 2 && y->data[1] == 2);
    ck_assert_int_eq(qkv_backward_from(t, y, (const qkv_real[]){3, 5}, 2), QKV_OK);
    ck_assert(x->grad[0] == 0 && x->grad[1] == 5);
    /* sticky: after an error, clamp keeps it and does nothing */
    qkv_tape_reset(t);
    ck_assert(qkv_clamp(t, x, 1, 0) == qkv_nil());
    ck_assert(qkv_clamp(t, x, 0, 1) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "clamp: the min 1 is above the max 0");
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_clamp(t, qkv_scale(u, x, 2), 0, 1), "clamp");
    qkv_tensor_free(x);
    qkv_tape_free(u);
    qkv_tape_free(t);
}
END_TEST

Suite *elementwise_suite(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_maps_match_cpython_on_every_kernel_set);
    tcase_add_test(tc, test_maps_at_their_edges);
    tcase_add_test(tc, test_map_gradients_at_their_edges);
    tcase_add_test(tc, test_silu_gradient_at_subnormal_inputs);
    tcase_add_test(tc, test_silu_in_its_far_negative_tail);
    tcase_add_test(tc, test_sub_and_div_by_hand);
    tcase_add_test(tc, test_broadcasting_works_both_ways_and_reduces_gradients);
    tcase_add_test(tc, test_pow_has_a_zero_gradient_at_exponent_zero);
    tcase_add_test(tc, test_relu_keeps_nan);
    tcase_add_test(tc, test_relu_keeps_the_sign_of_zero);
    tcase_add_test(tc, test_add_and_sub_claimed_gradients_of_zero_are_plus_zero);
    tcase_add_test(tc, test_mask_blocks_the_gradient_only_at_minus_inf);
    tcase_add_test(tc, test_abs_by_hand_and_at_its_edges);
    tcase_add_test(tc, test_softplus_by_hand_and_at_its_edges);
    tcase_add_test(tc, test_leaky_relu_by_hand_and_at_its_edges);
    tcase_add_test(tc, test_clamp_by_hand_and_at_its_bounds);
    tcase_add_test(tc, test_clamp_refuses_bounds_out_of_order_or_nan);
    suite_add_tcase(s, tc);
    return s;
}
