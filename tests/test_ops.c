/*
 * test_ops.c - every op's forward values on hand-worked examples, the
 * gradients that have closed forms, masking, stability and error messages.
 * (Finite-difference checks of every op are in test_gradcheck.c.)
 */
#include <stdlib.h>
#include <string.h>

#include "tests.h"

#define TOL (8 * REAL_EPS)

typedef struct fx {
    qkv_tape *t;
    qkv_tensor *held[8];
    int n;
} fx;

static qkv_tensor *hold(fx *f, qkv_tensor *x)
{
    f->held[f->n++] = x;
    return x;
}

static void fx_free(fx *f)
{
    for (int i = 0; i < f->n; i++)
        qkv_tensor_free(f->held[i]);
    qkv_tape_free(f->t);
}

static void assert_values(const qkv_tensor *y, const double *want, size_t n, double tol)
{
    ck_assert(!qkv_tensor_is_nil(y));
    ck_assert_uint_eq(y->numel, n);
    for (size_t i = 0; i < n; i++)
        ASSERT_NEAR(y->data[i], want[i], tol);
}

START_TEST(test_matmul_by_hand)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    /* [[1,2,3],[4,5,6]]·[[7,8],[9,10],[11,12]] = [[58,64],[139,154]] */
    qkv_tensor *a =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 0));
    qkv_tensor *b =
        hold(&f, tensor_of(2, (const int[]){3, 2}, (const double[]){7, 8, 9, 10, 11, 12}, 0));
    assert_values(qkv_matmul(f.t, a, b), (const double[]){58, 64, 139, 154}, 4, 0);
    /* A·Aᵀ = [[14,32],[32,77]] */
    assert_values(qkv_matmul_nt(f.t, a, a), (const double[]){14, 32, 32, 77}, 4, 0);
    assert_values(qkv_transpose(f.t, a), (const double[]){1, 4, 2, 5, 3, 6}, 6, 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_batched_matmul_by_hand)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    /* item 0: I·B0 = B0; item 1: 2I·B1 = 2B1 */
    qkv_tensor *a =
        hold(&f, tensor_of(3, (const int[]){2, 2, 2}, (const double[]){1, 0, 0, 1, 2, 0, 0, 2}, 0));
    qkv_tensor *b = hold(&f, tensor_of(3, (const int[]){2, 2, 1}, (const double[]){3, 4, 5, 6}, 0));
    qkv_tensor *y = qkv_matmul(f.t, a, b);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 1);
    assert_values(y, (const double[]){3, 4, 10, 12}, 4, 0);
    /* a shared 2-D right operand applies to every item */
    qkv_tensor *w = hold(&f, tensor_of(2, (const int[]){2, 1}, (const double[]){1, 1}, 0));
    assert_values(qkv_matmul(f.t, a, w), (const double[]){1, 1, 2, 2}, 4, 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_matmul_gradients_by_hand)
{
    /* L = Σ A·B: dA[i,p] = Σ_j B[p,j], dB[p,j] = Σ_i A[i,p] */
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *a =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 1));
    qkv_tensor *b =
        hold(&f, tensor_of(2, (const int[]){3, 2}, (const double[]){7, 8, 9, 10, 11, 12}, 1));
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_matmul(f.t, a, b))), QKV_OK);
    const double da[6] = {15, 19, 23, 15, 19, 23}, db[6] = {5, 5, 7, 7, 9, 9};
    for (int i = 0; i < 6; i++) {
        ASSERT_NEAR(a->grad[i], da[i], 0);
        ASSERT_NEAR(b->grad[i], db[i], 0);
    }
    fx_free(&f);
}
END_TEST

START_TEST(test_elementwise_and_broadcast_by_hand)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, -2, 3, -4, 5, -6}, 0));
    qkv_tensor *bias = hold(&f, tensor_of(1, (const int[]){3}, (const double[]){10, 20, 30}, 0));
    qkv_tensor *col = hold(&f, tensor_of(2, (const int[]){2, 1}, (const double[]){2, -1}, 0));
    assert_values(qkv_scale(f.t, x, 0.5), (const double[]){0.5, -1, 1.5, -2, 2.5, -3}, 6, 0);
    assert_values(qkv_add(f.t, x, bias), (const double[]){11, 18, 33, 6, 25, 24}, 6, 0);
    assert_values(qkv_mul(f.t, x, col), (const double[]){2, -4, 6, 4, -5, 6}, 6, 0);
    assert_values(qkv_relu(f.t, x), (const double[]){1, 0, 3, 0, 5, 0}, 6, 0);
    assert_values(
        qkv_tanh(f.t, x),
        (const double[]){tanh(1.0), tanh(-2.0), tanh(3.0), tanh(-4.0), tanh(5.0), tanh(-6.0)}, 6,
        2 * REAL_EPS);
    /* e^x, rounded once from libm's double: within one rounding of the
     * exact value, relative (e^5 ≈ 148) */
    qkv_tensor *e = qkv_exp(f.t, x);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(e->data[i], exp((const double[]){1, -2, 3, -4, 5, -6}[i]),
                    REAL_EPS * exp((const double[]){1, -2, 3, -4, 5, -6}[i]));
    fx_free(&f);
}
END_TEST

START_TEST(test_reductions_by_hand)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 1));
    qkv_tensor *s = qkv_sum(f.t, x);
    ck_assert_int_eq(s->ndim, 0);
    assert_values(s, (const double[]){21}, 1, 0);
    assert_values(qkv_mean(f.t, x), (const double[]){3.5}, 1, 0);
    qkv_tensor *sl = qkv_sum_last(f.t, x);
    ck_assert_int_eq(sl->ndim, 1); /* the last dimension goes, as in mean_last */
    assert_values(sl, (const double[]){6, 15}, 2, 0);
    qkv_tensor *m = qkv_mean_last(f.t, x);
    ck_assert_int_eq(m->ndim, 1);
    assert_values(m, (const double[]){2, 5}, 2, 0);
    /* d(mean of row means)/dx = 1/6 everywhere */
    ck_assert_int_eq(qkv_backward(f.t, qkv_mean(f.t, m)), QKV_OK);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(x->grad[i], 1.0 / 6, REAL_EPS);
    fx_free(&f);
}
END_TEST

/* Each reduction names itself when its node cannot be recorded: mean,
 * mean_dim and the _last shorthands said "sum" or "sum_dim", the node
 * they share a backward with, of an input another tape made. */
START_TEST(test_reductions_name_themselves_recording_their_node)
{
    qkv_tape *t = qkv_tape_new(0, NULL), *u = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 1);
    qkv_tensor *x = qkv_scale(u, w, 2); /* its gradient is u's */
    const char *const names[] = {"sum",      "mean",      "sum_dim",       "mean_dim", "max_dim",
                                 "sum_last", "mean_last", "logsumexp_dim", "min_dim"};
    for (int i = 0; i < 9; i++) {
        qkv_tape_reset(t);
        qkv_tensor *y = i == 0   ? qkv_sum(t, x)
                        : i == 1 ? qkv_mean(t, x)
                        : i == 2 ? qkv_sum_dim(t, x, 0, 0)
                        : i == 3 ? qkv_mean_dim(t, x, 0, 1)
                        : i == 4 ? qkv_max_dim(t, x, -1, 0)
                        : i == 5 ? qkv_sum_last(t, x)
                        : i == 6 ? qkv_mean_last(t, x)
                        : i == 7 ? qkv_logsumexp_dim(t, x, 1, 0)
                                 : qkv_min_dim(t, x, 0, 1);
        expect_another_tapes_input(t, y, names[i]);
    }
    qkv_tensor_free(w);
    qkv_tape_free(t);
    qkv_tape_free(u);
}
END_TEST

START_TEST(test_affine_by_hand)
{
    /* x [2,1,2]·W [2,3] + b: rows (1,2) and (3,4) of x, by hand */
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(3, (const int[]){2, 1, 2}, (const double[]){1, 2, 3, 4}, 1));
    qkv_tensor *w =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 0, -1, 2, 1, 0}, 1));
    qkv_tensor *b = hold(&f, tensor_of(1, (const int[]){3}, (const double[]){10, 20, 30}, 1));
    qkv_tensor *y = qkv_affine(f.t, x, w, b);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 3);
    assert_values(y, (const double[]){15, 22, 29, 21, 24, 27}, 6, 0);
    assert_values(qkv_affine(f.t, x, w, NULL), (const double[]){5, 2, -1, 11, 4, -3}, 6, 0);
    /* L = Σ y⊙c with c = (1,2,3; 4,5,6): dX = c·Wᵀ, dW = Xᵀ·c, db = Σ_rows c */
    qkv_tensor *c =
        hold(&f, tensor_of(3, (const int[]){2, 1, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 0));
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_mul(f.t, y, c))), QKV_OK);
    const double dx[4] = {-2, 4, -2, 13}, dw[6] = {13, 17, 21, 18, 24, 30}, db[3] = {5, 7, 9};
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(x->grad[i], dx[i], 0);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(w->grad[i], dw[i], 0);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(b->grad[i], db[i], 0);
    /* only b takes a gradient (x and w are constants): the output still
     * records a node, and db is the same Σ_rows c */
    qkv_tensor *xc =
        hold(&f, tensor_of(3, (const int[]){2, 1, 2}, (const double[]){1, 2, 3, 4}, 0));
    qkv_tensor *wc =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 0, -1, 2, 1, 0}, 0));
    qkv_tape_reset(f.t);
    qkv_tensor_zero_grad(b);
    y = qkv_affine(f.t, xc, wc, b);
    ck_assert_ptr_nonnull(y->grad);
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_mul(f.t, y, c))), QKV_OK);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(b->grad[i], db[i], 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_rnn_scan_by_hand)
{
    /* the identity recurrence h_s = xw_s + h_{s-1}·W_h, W_h swapping the
     * two units, from h0 = (2,3): states (4,2), (2,5), (6,3) */
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *xw =
        hold(&f, tensor_of(3, (const int[]){3, 1, 2}, (const double[]){1, 0, 0, 1, 1, 1}, 1));
    qkv_tensor *wh = hold(&f, tensor_of(2, (const int[]){2, 2}, (const double[]){0, 1, 1, 0}, 1));
    qkv_tensor *h0 = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){2, 3}, 1));
    qkv_tensor *y = qkv_rnn_scan(f.t, xw, wh, h0, 0);
    ck_assert_int_eq(y->ndim, 3);
    assert_values(y, (const double[]){4, 2, 2, 5, 6, 3}, 6, 0);
    /* L = Σ y⊙c: dz_2 = c_2 = (5,6), dz_1 = c_1 + dz_2·W_hᵀ = (9,9), dz_0 =
     * (10,11); dxw = dz, dh0 = dz_0·W_hᵀ = (11,10), dW_h = Σ h_{s-1}ᵀ·dz_s */
    qkv_tensor *c =
        hold(&f, tensor_of(3, (const int[]){3, 1, 2}, (const double[]){1, 2, 3, 4, 5, 6}, 0));
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_mul(f.t, y, c))), QKV_OK);
    const double dxw[6] = {10, 11, 9, 9, 5, 6}, dwh[4] = {66, 70, 73, 81}, dh0[2] = {11, 10};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(xw->grad[i], dxw[i], 0);
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(wh->grad[i], dwh[i], 0);
    for (int i = 0; i < 2; i++)
        ASSERT_NEAR(h0->grad[i], dh0[i], 0);
    /* no input that takes a gradient, or gradients off: values, and no node */
    qkv_tape_reset(f.t);
    qkv_tensor *xc =
        hold(&f, tensor_of(3, (const int[]){3, 1, 2}, (const double[]){1, 0, 0, 1, 1, 1}, 0));
    qkv_tensor *wc = hold(&f, tensor_of(2, (const int[]){2, 2}, (const double[]){0, 1, 1, 0}, 0));
    qkv_tensor *y0 = qkv_rnn_scan(f.t, xc, wc, NULL, 0);
    assert_values(y0, (const double[]){1, 0, 0, 2, 3, 1}, 6, 0);
    ck_assert_ptr_null(y0->grad);
    ck_assert_uint_eq(qkv_tape_nodes(f.t), 0);
    qkv_tape_set_grad(f.t, 0);
    y0 = qkv_rnn_scan(f.t, xw, wh, h0, 0);
    assert_values(y0, (const double[]){4, 2, 2, 5, 6, 3}, 6, 0);
    ck_assert_ptr_null(y0->grad);
    ck_assert_uint_eq(qkv_tape_nodes(f.t), 0);
    qkv_tape_set_grad(f.t, 1);
    /* without h0 the first state is xw_0 itself; a W_h of the wrong size is refused */
    qkv_tape_reset(f.t);
    assert_values(qkv_rnn_scan(f.t, xw, wh, NULL, 0), (const double[]){1, 0, 0, 2, 3, 1}, 6, 0);
    qkv_tape_reset(f.t);
    ck_assert(qkv_rnn_scan(f.t, xw, c, h0, 1) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(f.t),
                     "rnn_scan: xw [3,1,2] must be [T,B,H], W_h [3,1,2] [H,H] and h0 [1,2] [B,H]");
    /* nor a W_h that is not square, nor an h0 of another batch size */
    qkv_tensor *wide = tensor_of(2, (const int[]){3, 2}, NULL, 0);
    qkv_tensor *h0b = tensor_of(2, (const int[]){2, 2}, NULL, 0);
    EXPECT_ERROR_ON(f.t, qkv_rnn_scan(f.t, xw, wide, h0, 1), QKV_ERR_SHAPE,
                    "rnn_scan: xw [3,1,2] must be [T,B,H], W_h [3,2] [H,H] and h0 [1,2] [B,H]");
    EXPECT_ERROR_ON(f.t, qkv_rnn_scan(f.t, xw, wh, h0b, 1), QKV_ERR_SHAPE,
                    "rnn_scan: xw [3,1,2] must be [T,B,H], W_h [2,2] [H,H] and h0 [2,2] [B,H]");
    /* T·B = 2^31 rows overflow the int depth of dW_h's product: refused
     * before anything is read or allocated, so xw is only described */
    qkv_real one = 0;
    qkv_tensor huge = {&one, NULL, (size_t)1 << 31, 3, {1 << 16, 1 << 15, 1, 1}, 0};
    qkv_tensor *w1 = tensor_of(2, (const int[]){1, 1}, NULL, 0);
    EXPECT_ERROR_ON(f.t, qkv_rnn_scan(f.t, &huge, w1, NULL, 1), QKV_ERR_SHAPE,
                    "rnn_scan: T·B = 2147483648 rows is too many");
    qkv_tensor_free(wide);
    qkv_tensor_free(h0b);
    qkv_tensor_free(w1);
    fx_free(&f);
}
END_TEST

/* With tanh, on every kernel set: the states are the bits of the same
 * steps unrolled as matmul, add and tanh, and the gradients agree with the
 * unrolled ones up to the order of W_h's sums (one product over the steps
 * against one per step). */
START_TEST(test_rnn_scan_matches_the_unrolled_ops)
{
    enum { T = 7, B = 3, H = 5 };
    static const char *const sets[3] = {"portable", "avx2", "avx512"};
    char was[32];
    snprintf(was, sizeof was, "%s", qkv_kernels_name());
    qkv_rng g;
    qkv_rng_seed(&g, 77);
    double v[T * B * H + H * H + B * H];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        v[i] = 2 * qkv_rng_random(&g) - 1;
    for (int k = 0; k < 3; k++) {
        if (qkv_kernels_use(sets[k], NULL) != 0)
            continue;
        for (int with_h0 = 0; with_h0 < 2; with_h0++) {
            qkv_tensor *in[2][3];
            qkv_tensor *ys[2];
            qkv_tape *t[2];
            for (int u = 0; u < 2; u++) { /* 0: the scan; 1: unrolled */
                t[u] = qkv_tape_new(0, NULL);
                in[u][0] = tensor_of(3, (const int[]){T, B, H}, v, 1);
                in[u][1] = tensor_of(2, (const int[]){H, H}, v + T * B * H, 1);
                in[u][2] = tensor_of(2, (const int[]){B, H}, v + T * B * H + H * H, 1);
                qkv_tensor *h0 = with_h0 ? in[u][2] : NULL;
                if (u == 0) {
                    ys[u] = qkv_rnn_scan(t[u], in[u][0], in[u][1], h0, 1);
                } else {
                    qkv_tensor *hs[T];
                    for (int s = 0; s < T; s++) {
                        qkv_tensor *z = qkv_reshape(t[u], qkv_slice(t[u], in[u][0], 0, s, 1), 2,
                                                    (const int[]){B, H});
                        qkv_tensor *h = s > 0 ? hs[s - 1] : h0;
                        if (h != NULL)
                            z = qkv_add(t[u], z, qkv_matmul(t[u], h, in[u][1]));
                        hs[s] = qkv_reshape(t[u], qkv_tanh(t[u], z), 3, (const int[]){1, B, H});
                    }
                    ys[u] = qkv_concat(t[u], T, hs, 0);
                }
                /* L = Σ y⊙y/2, so every state gets a gradient */
                ck_assert_int_eq(qkv_backward(t[u], qkv_sum(t[u], qkv_mul(t[u], ys[u], ys[u]))),
                                 QKV_OK);
            }
            ck_assert_int_eq(memcmp(ys[0]->data, ys[1]->data, sizeof *ys[0]->data * T * B * H), 0);
            for (int i = 0; i < (with_h0 ? 3 : 2); i++)
                for (size_t j = 0; j < in[0][i]->numel; j++)
                    ASSERT_NEAR(in[0][i]->grad[j], in[1][i]->grad[j],
                                64 * REAL_EPS * (1 + fabs((double)in[1][i]->grad[j])));
            for (int u = 0; u < 2; u++) {
                for (int i = 0; i < 3; i++)
                    qkv_tensor_free(in[u][i]);
                qkv_tape_free(t[u]);
            }
        }
    }
    qkv_kernels_use(was, NULL);
}
END_TEST

/* Backward through time, written out with the products of qkv_gemm: dz_s =
 * (dy_s + dz_{s+1}·W_hᵀ) ⊙ (1 - y_s²), the product made from W_h stored
 * n×k (tb), rounded, then the add and the factor in float, as the unrolled
 * ops would. The scan reads a stored W_hᵀ instead (one transpose, not one
 * per step): its xw gradient must be these bits on every kernel set, in
 * a shape of the chain order (3×5), one of the blocks order (50×60) and
 * one of the dots order (2×1025, where W_h is read as it is),
 * added into a gradient (a heap xw) or written into one not yet filled
 * (a tape tensor). */
START_TEST(test_rnn_scan_backward_keeps_the_bits_of_the_transposed_product)
{
    enum { T = 4 };
    /* B, H; at H = 1025 a Bᵀ is too deep to copy (the DOTS order), and
     * the scan keeps W_h as it is */
    static const int shapes[3][2] = {{3, 5}, {50, 60}, {2, 1025}};
    ck_assert(qkv_gemm_takes_dots(1025, 1025) && !qkv_gemm_takes_dots(60, 60));
    static const char *const sets[3] = {"portable", "avx2", "avx512"};
    char was[32];
    snprintf(was, sizeof was, "%s", qkv_kernels_name());
    for (int k = 0; k < 3; k++) {
        if (qkv_kernels_use(sets[k], NULL) != 0)
            continue;
        for (int c = 0; c < 3; c++) {
            const int B = shapes[c][0], H = shapes[c][1];
            const size_t bh = (size_t)B * H, n = T * bh;
            qkv_rng g;
            qkv_rng_seed(&g, 78);
            double *v = malloc(sizeof *v * (n + (size_t)H * H));
            qkv_real *dy = malloc(sizeof *dy * n), *dz = malloc(sizeof *dz * n);
            ck_assert(v != NULL && dy != NULL && dz != NULL);
            for (size_t i = 0; i < n + (size_t)H * H; i++)
                v[i] = (2 * qkv_rng_random(&g) - 1) / (i < n ? 1 : sqrt(H));
            for (size_t i = 0; i < n; i++)
                dy[i] = (qkv_real)(2 * qkv_rng_random(&g) - 1);
            qkv_tape *t = qkv_tape_new(0, NULL);
            qkv_tensor *xw = tensor_of(3, (const int[]){T, B, H}, v, 1);
            qkv_tensor *wh = tensor_of(2, (const int[]){H, H}, v + n, 1);
            /* a tape tensor in front of the scan: its gradient the scan
             * claims and overwrites, then adds into xw's unchanged (×1) */
            qkv_tensor *xin = c == 1 ? qkv_scale(t, xw, 1) : xw;
            qkv_tensor *y = qkv_rnn_scan(t, xin, wh, NULL, 1);
            ck_assert_int_eq(qkv_backward_from(t, y, dy, n), QKV_OK);
            for (int s = T - 1; s >= 0; s--) {
                qkv_real *d = dz + (size_t)s * bh;
                const qkv_real *ys = y->data + (size_t)s * bh;
                if (s < T - 1)
                    qkv_gemm(0, 1, B, H, H, d + bh, wh->data, d, 0);
                for (size_t i = 0; i < bh; i++) {
                    qkv_real a = s < T - 1 ? d[i] + dy[(size_t)s * bh + i] : dy[(size_t)s * bh + i];
                    qkv_real f = 1 - ys[i] * ys[i];
                    d[i] = a * f;
                }
            }
            for (size_t i = 0; i < n; i++) /* added into xw's zeroed gradient */
                dz[i] = 0 + dz[i];
            ck_assert_msg(memcmp(xw->grad, dz, sizeof *dz * n) == 0, "%s, B %d, H %d", sets[k], B,
                          H);
            qkv_tensor_free(xw);
            qkv_tensor_free(wh);
            qkv_tape_free(t);
            free(v);
            free(dy);
            free(dz);
        }
    }
    qkv_kernels_use(was, NULL);
}
END_TEST

START_TEST(test_gather_and_pick_rows_by_hand)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *w =
        hold(&f, tensor_of(2, (const int[]){3, 2}, (const double[]){0, 1, 10, 11, 20, 21}, 1));
    const int ids[4] = {2, 0, 2, 1};
    qkv_tensor *g = qkv_gather(f.t, w, ids, 2, (const int[]){2, 2});
    ck_assert_int_eq(g->ndim, 3);
    assert_values(g, (const double[]){20, 21, 0, 1, 20, 21, 10, 11}, 8, 0);
    /* one-hot·W is the same as the gather */
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){1, 3}, (const double[]){0, 0, 1}, 0));
    assert_values(qkv_matmul(f.t, x, w), (const double[]){20, 21}, 2, 0);
    const int pos[2] = {1, 0};
    qkv_tensor *p = qkv_pick_rows(f.t, g, pos);
    assert_values(p, (const double[]){0, 1, 20, 21}, 4, 0);
    /* backward scatter-adds: row 2 was gathered twice but picked once; row 0 once */
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, p)), QKV_OK);
    const double want[6] = {1, 1, 0, 0, 1, 1};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(w->grad[i], want[i], 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_gather_scatter_adds_repeated_ids)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *w = hold(&f, tensor_of(2, (const int[]){2, 1}, (const double[]){1, 2}, 1));
    const int ids[3] = {1, 1, 1};
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_gather(f.t, w, ids, 1, (const int[]){3}))),
                     QKV_OK);
    ASSERT_NEAR(w->grad[0], 0, 0);
    ASSERT_NEAR(w->grad[1], 3, 0);
    fx_free(&f);
}
END_TEST

/* gather, pick_rows and cross_entropy copy their indices onto the tape:
 * the caller's array may change before backward (a batch buffer refilled)
 * and the gradients still follow the indices of the forward pass */
START_TEST(test_indices_are_copied_at_the_call)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *w = hold(&f, tensor_of(2, (const int[]){3, 1}, (const double[]){0, 1, 2}, 1));
    int ids[2] = {2, 2};
    qkv_tensor *g = qkv_gather(f.t, w, ids, 1, (const int[]){2});
    ids[0] = ids[1] = 0;
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, g)), QKV_OK);
    const double want_w[3] = {0, 0, 2};
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(w->grad[i], want_w[i], 0);
    qkv_tensor *x = hold(&f, tensor_of(3, (const int[]){2, 3, 1}, NULL, 1));
    int idx[2] = {2, 1};
    qkv_tape_reset(f.t);
    qkv_tensor *p = qkv_pick_rows(f.t, x, idx);
    idx[0] = idx[1] = 0;
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, p)), QKV_OK);
    const double want_x[6] = {0, 0, 1, 0, 1, 0};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(x->grad[i], want_x[i], 0);
    /* equal logits: p = 1/2 each, so the gradient is p - y = ±1/2 exactly */
    qkv_tensor *z = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){0, 0}, 1));
    int target[1] = {1};
    qkv_tape_reset(f.t);
    qkv_tensor *l = qkv_cross_entropy(f.t, z, target);
    target[0] = 0;
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    ASSERT_NEAR(z->grad[0], 0.5, 0);
    ASSERT_NEAR(z->grad[1], -0.5, 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_softmax_stable_at_plus_minus_1e4)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){3, 3},
                           (const double[]){1e4, -1e4, 0, 1e4, 1e4, -1e4, -1e4, -1e4, -1e4}, 1));
    qkv_tensor *y = qkv_softmax(f.t, x);
    assert_values(y, (const double[]){1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 9, TOL);
    qkv_tensor *ly = qkv_log_softmax(f.t, x);
    assert_values(ly,
                  (const double[]){0, -2e4, -1e4, -log(2.0), -log(2.0), -2e4 - log(2.0), -log(3.0),
                                   -log(3.0), -log(3.0)},
                  9, 1e4 * REAL_EPS * 4);
    for (int i = 0; i < 9; i++)
        ck_assert(isfinite(y->data[i]) && isfinite(ly->data[i]));
    fx_free(&f);
}
END_TEST

START_TEST(test_fully_masked_row_gives_zeros_not_nan)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 1));
    qkv_tensor *m =
        hold(&f, tensor_of(2, (const int[]){2, 3},
                           (const double[]){0, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, 0));
    qkv_tensor *y = qkv_softmax(f.t, qkv_mask(f.t, x, m));
    double z = exp(1.0) + exp(2.0);
    assert_values(y, (const double[]){exp(1.0) / z, exp(2.0) / z, 0, 0, 0, 0}, 6, TOL);
    qkv_tensor *r =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 0));
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_mul(f.t, y, r))), QKV_OK);
    for (int i = 0; i < 6; i++)
        ck_assert(isfinite(x->grad[i]));
    /* masked entries and the fully masked row pass no gradient */
    for (int i = 2; i < 6; i++)
        ASSERT_NEAR(x->grad[i], 0, 0);
    /* kept entries: dy_j/dx_i = y_i(δij - y_j), readout weights 1 and 2 */
    double p = exp(1.0) / z;
    ASSERT_NEAR(x->grad[0], p * (1 - (p * 1 + (1 - p) * 2)), TOL);
    fx_free(&f);
}
END_TEST

START_TEST(test_log_softmax_masked_row_is_minus_inf_without_nan_gradient)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){1, 2}, 1));
    qkv_tensor *m =
        hold(&f, tensor_of(1, (const int[]){2}, (const double[]){-INFINITY, -INFINITY}, 0));
    qkv_tensor *y = qkv_log_softmax(f.t, qkv_mask(f.t, x, m));
    ck_assert(isinf(y->data[0]) && y->data[0] < 0);
    qkv_tensor *s = qkv_sum(f.t, qkv_scale(f.t, qkv_log_softmax(f.t, x), 1));
    ck_assert_int_eq(qkv_backward(f.t, s), QKV_OK);
    /* Σ_j log p_j: d/dx_i = 1 - n·p_i */
    double p0 = 1 / (1 + exp(1.0));
    ASSERT_NEAR(x->grad[0], 1 - 2 * p0, TOL);
    /* a row whose one live entry is the last is not a masked row: y = [-inf,
     * 0], and d(Σ y)/dx = dy - e^y·Σdy = [1 - 0·2, 1 - 1·2] = [1, -1]
     * exactly, as PyTorch gives */
    qkv_tensor *z = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){-INFINITY, 2}, 1));
    qkv_tape_reset(f.t);
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_log_softmax(f.t, z))), QKV_OK);
    ck_assert(z->grad[0] == 1 && z->grad[1] == -1);
    fx_free(&f);
}
END_TEST

/* Each row is judged masked or not by its own entries: of [1, 2] over
 * [-inf, -inf], in either order, the live row gets d(Σ y)/dx = 1 - 2·p
 * with p = softmax([1, 2]), the masked row nothing. */
START_TEST(test_log_softmax_judges_each_row_masked_by_its_own_values)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    const double p0 = 1 / (1 + exp(1.0));
    const double live[2] = {1 - 2 * p0, 1 - 2 * (1 - p0)};
    for (int masked = 0; masked < 2; masked++) {
        double v[4];
        for (int j = 0; j < 2; j++) {
            v[2 * masked + j] = -INFINITY;
            v[2 * (1 - masked) + j] = j + 1;
        }
        qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){2, 2}, v, 1));
        qkv_tape_reset(f.t);
        ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_log_softmax(f.t, x))), QKV_OK);
        for (int j = 0; j < 2; j++) {
            ASSERT_NEAR(x->grad[2 * (1 - masked) + j], live[j], TOL);
            ck_assert_msg(x->grad[2 * masked + j] == 0, "masked row %d: dx[%d] = %g", masked, j,
                          (double)x->grad[2 * masked + j]);
        }
    }
    fx_free(&f);
}
END_TEST

/* log_softmax adds its gradient into x's, which a later consumer of x
 * has already filled: x = [0, ln 3] has softmax [1/4, 3/4], so
 * d Σ(log_softmax(x)·[1, 0] + x)/dx = [1 - 1/4, -3/4] + [1, 1] =
 * [7/4, 1/4]. */
START_TEST(test_log_softmax_gradient_adds_to_another_consumers)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){0, log(3.0)}, 1));
    qkv_tensor *w = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){1, 0}, 0));
    qkv_tensor *y = qkv_add(f.t, qkv_mul(f.t, qkv_log_softmax(f.t, x), w), x);
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, y)), QKV_OK);
    ASSERT_NEAR(x->grad[0], 1.75, TOL);
    ASSERT_NEAR(x->grad[1], 0.25, TOL);
    fx_free(&f);
}
END_TEST

/* transpose's gradient adds to what another consumer of x put there: with
 * y = x + xᵀ and L = Σ y⊙w, dL/dx = w + wᵀ. The add's backward runs first
 * and fills x's gradient with w; a transpose that stored wᵀ over it would
 * leave wᵀ alone. */
START_TEST(test_transpose_gradient_adds_to_another_consumers)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1));
    qkv_tensor *w = hold(&f, tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 0));
    qkv_tensor *y = qkv_mul(f.t, qkv_add(f.t, x, qkv_transpose(f.t, x)), w);
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, y)), QKV_OK);
    /* w + wᵀ = [[2,5],[5,8]]: small integers, exact */
    const double want[4] = {2, 5, 5, 8};
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(x->grad[i], want[i], 0);
    fx_free(&f);
}
END_TEST

/* A vector is one row. x = [0, ln 2, ln 3]: softmax [1, 2, 3]/6,
 * log_softmax ln([1, 2, 3]/6); d y0/dx = y0·(δi0 - yi) = [5, -2, -3]/36;
 * d Σ log_softmax/dx = 1 - 3·softmax = [1/2, 0, -1/2]. */
START_TEST(test_softmax_of_a_vector)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(1, (const int[]){3}, (const double[]){0, log(2.0), log(3.0)}, 1));
    qkv_tensor *y = qkv_softmax(f.t, x);
    assert_values(y, (const double[]){1.0 / 6, 2.0 / 6, 3.0 / 6}, 3, TOL);
    qkv_tensor *r = hold(&f, tensor_of(1, (const int[]){3}, (const double[]){1, 0, 0}, 0));
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, qkv_mul(f.t, y, r))), QKV_OK);
    const double dy0[3] = {5.0 / 36, -2.0 / 36, -3.0 / 36};
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(x->grad[i], dy0[i], TOL);
    qkv_tape_reset(f.t);
    qkv_tensor_zero_grad(x);
    qkv_tensor *ly = qkv_log_softmax(f.t, x);
    assert_values(ly, (const double[]){-log(6.0), log(2.0 / 6), log(3.0 / 6)}, 3, TOL);
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, ly)), QKV_OK);
    const double dsum[3] = {0.5, 0, -0.5};
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(x->grad[i], dsum[i], TOL);
    fx_free(&f);
}
END_TEST

/* A scalar has no last dimension to take the softmax over. */
START_TEST(test_softmax_refuses_a_scalar)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *s = tensor_of(0, NULL, (const double[]){2}, 0);
    EXPECT_ERROR_ON(t, qkv_softmax(t, s), QKV_ERR_SHAPE, "softmax: [] has no last dimension");
    EXPECT_ERROR_ON(t, qkv_log_softmax(t, s), QKV_ERR_SHAPE,
                    "log_softmax: [] has no last dimension");
    qkv_tensor_free(s);
    qkv_tape_free(t);
}
END_TEST

/* A NaN in a row that is not masked poisons the whole row, as it does
 * softmax's and as PyTorch gives: log_softmax([1, NaN, 2]) was [-inf, NaN,
 * -inf], a confident log-probability of 0 read from a NaN sum; and so does
 * +inf ([inf, 0] has e^(inf - inf) = NaN in its sum). */
START_TEST(test_log_softmax_nan_row_is_nan)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){3, 3},
                                       (const double[]){1, NAN, 2, INFINITY, 0, 1, 1, 2, 3}, 1));
    qkv_tensor *y = qkv_log_softmax(f.t, x);
    qkv_tensor *p = qkv_softmax(f.t, x);
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(isnan(y->data[i]), "log_softmax y[%d] = %g, expected NaN", i,
                      (double)y->data[i]);
        ck_assert(isnan(p->data[i]));
    }
    /* the finite row is untouched: log p = x - log Σ e^x */
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
    for (int j = 0; j < 3; j++)
        ASSERT_NEAR(y->data[6 + j], 1 + j - lse, TOL);
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, y)), QKV_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(isnan(x->grad[i]));
    fx_free(&f);
}
END_TEST

/* A row with nothing above -inf is masked even when it holds a NaN: the
 * forward gives -inf (NaN where x is) and the backward no gradient, as
 * for a row of -inf alone; it passed dy to the -inf entries and NaN to
 * the NaN one. */
START_TEST(test_log_softmax_masked_row_with_nan_passes_no_gradient)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){2, 3},
                           (const double[]){-INFINITY, NAN, -INFINITY, NAN, NAN, NAN}, 1));
    qkv_tensor *y = qkv_log_softmax(f.t, x);
    ck_assert(y->data[0] == -INFINITY && isnan(y->data[1]) && y->data[2] == -INFINITY);
    ck_assert(isnan(y->data[3]) && isnan(y->data[4]) && isnan(y->data[5]));
    const qkv_real dy[6] = {1, 2, 3, 4, 5, 6};
    ck_assert_int_eq(qkv_backward_from(f.t, y, dy, 6), QKV_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(x->grad[i] == 0, "x->grad[%d] = %g, expected 0", i, (double)x->grad[i]);
    fx_free(&f);
}
END_TEST

/* A row far from 0: log softmax is (x - max) - log Σ e^(x - max), as
 * PyTorch computes it. x - (max + log Σ) lost log Σ below max's last
 * bit: three equal logits at ±1e30 gave 0, where PyTorch 1.13 gives
 * -log 3 = -1.0986123 (float32 and float64), and the gradient of Σ y
 * was 1 - 3·e^0 = -2, not 1 - 3·(1/3) = 0; at 1e4 the double build lost
 * 11 to 12 of y's 53 bits. */
START_TEST(test_log_softmax_keeps_its_precision_far_from_zero)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(
        &f, tensor_of(2, (const int[]){3, 3},
                      (const double[]){-1e30, -1e30, -1e30, 1e30, 1e30, 1e30, 1e4, 9999, 1e4}, 1));
    qkv_tensor *y = qkv_log_softmax(f.t, x);
    const double l3 = log(3.0), l = log(2 + exp(-1.0)); /* the last row: -l, -1 - l, -l */
    const double want[9] = {-l3, -l3, -l3, -l3, -l3, -l3, -l, -1 - l, -l};
    ck_assert(!qkv_tensor_is_nil(y));
    for (int i = 0; i < 9; i++)
        ASSERT_NEAR(y->data[i], want[i], 4 * REAL_EPS * fabs(want[i]));
    /* d(Σ y)/dx_i = 1 - 3·p_i */
    ck_assert_int_eq(qkv_backward(f.t, qkv_sum(f.t, y)), QKV_OK);
    for (int i = 0; i < 9; i++)
        ASSERT_NEAR(x->grad[i], 1 - 3 * exp(want[i]), TOL);
    fx_free(&f);
}
END_TEST

/* The loss is log Σ e^(x - max) - (x[t] - max): max + log Σ - x[t] lost
 * log Σ to max's rounding, and gave 0 for two equal logits at ±1e30
 * where PyTorch 1.13 gives log 2 (float32 and float64). */
START_TEST(test_cross_entropy_keeps_its_precision_far_from_zero)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){3, 2},
                                       (const double[]){-1e30, -1e30, 1e30, 1e30, 1e4, 9999}, 1));
    const int targets[3] = {0, 1, 1};
    qkv_tensor *l = qkv_cross_entropy(f.t, x, targets);
    ck_assert(!qkv_tensor_is_nil(l));
    const double want = (2 * log(2.0) + 1 + log(1 + exp(-1.0))) / 3;
    ASSERT_NEAR(l->data[0], want, 4 * REAL_EPS * want);
    fx_free(&f);
}
END_TEST

START_TEST(test_cross_entropy_by_hand)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){3, 3}, (const double[]){1, 2, 3, 5, 5, 5, 0, 0, 9}, 1));
    const int targets[3] = {2, QKV_IGNORE, 0};
    qkv_tensor *l = qkv_cross_entropy(f.t, x, targets);
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    double l0 = -log(exp(3.0) / z); /* 0.40760596... */
    double l2 = -(0 - (9 + log(2 * exp(-9.0) + 1)));
    ASSERT_NEAR(l->data[0], (l0 + l2) / 2, 4 * REAL_EPS * 10);
    ASSERT_NEAR(l0, 0.4076059644, 1e-9);
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    /* (p - y)/N with N = 2 counted rows; the ignored row gets nothing */
    ASSERT_NEAR(x->grad[0], exp(1.0) / z / 2, TOL);
    ASSERT_NEAR(x->grad[2], (exp(3.0) / z - 1) / 2, TOL);
    for (int j = 3; j < 6; j++)
        ASSERT_NEAR(x->grad[j], 0, 0);
    fx_free(&f);
}
END_TEST

/* the logits' gradient adds up over every use: the same loss twice gives
 * twice (p - y)/N, here with N = 2 rows, so p - y */
START_TEST(test_cross_entropy_gradient_adds_to_what_is_there)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x =
        hold(&f, tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 0, 0, 0}, 1));
    const int targets[2] = {2, 0};
    qkv_tensor *l1 = qkv_cross_entropy(f.t, x, targets);
    qkv_tensor *l2 = qkv_cross_entropy(f.t, x, targets);
    ck_assert_int_eq(qkv_backward(f.t, qkv_add(f.t, l1, l2)), QKV_OK);
    const double z = exp(1.0) + exp(2.0) + exp(3.0);
    const double want[6] = {exp(1.0) / z, exp(2.0) / z, exp(3.0) / z - 1,
                            1.0 / 3 - 1,  1.0 / 3,      1.0 / 3};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(x->grad[i], want[i], TOL);
    fx_free(&f);
}
END_TEST

/* two equal logits: p = 1/2 exactly (e^0/(e^0 + e^0)), so the loss is
 * log 2 and the gradient p - y is ∓1/2 to the last bit */
START_TEST(test_cross_entropy_of_equal_logits_is_exact)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){1, 2}, (const double[]){0, 0}, 1));
    qkv_tensor *l = qkv_cross_entropy(f.t, x, (const int[]){0});
    ASSERT_NEAR(l->data[0], log(2.0), REAL_EPS);
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    ASSERT_NEAR(x->grad[0], -0.5, 0);
    ASSERT_NEAR(x->grad[1], 0.5, 0);
    fx_free(&f);
}
END_TEST

START_TEST(test_cross_entropy_all_ignored_is_zero)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1));
    const int targets[2] = {QKV_IGNORE, QKV_IGNORE};
    qkv_tensor *l = qkv_cross_entropy(f.t, x, targets);
    ASSERT_NEAR(l->data[0], 0, 0);
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(x->grad[i], 0, 0);
    fx_free(&f);
}
END_TEST

/* Label smoothing against PyTorch 1.13 (float64), by
 *   x = [[1,2,3],[5,5,5],[0,0,9],[-1,0.5,2]], t = [2,-1,0,1]
 *   F.cross_entropy(x, t, label_smoothing=eps, ignore_index=-1); .backward()
 * row 1 is ignored: it is not counted and gets no gradient. */
START_TEST(test_cross_entropy_smooth_matches_torch)
{
    static const double eps[3] = {0.0, 0.1, 1.0};
    static const double loss[3] = {3.7163880167515875, 3.649721350084921, 3.04972135008492};
    static const double grad[3][12] = {
        {0.030010191056793478, 0.08157615701826587, -0.1115863480750594, 0, 0, 0,
         -0.3332922068827855, 4.112645054781673e-05, 0.3332510804322377, 0.013037524423562482,
         -0.27490320261998774, 0.26186567819642526},
        {0.018899079945682365, 0.07046504590715476, -0.0893641258528372, 0, 0, 0,
         -0.3110699846605633, -0.011069984660563295, 0.32213996932112665, 0.001926413312451373,
         -0.25268098039776554, 0.2507545670853142},
        {-0.08110092005431763, -0.02953495409284523, 0.1106358741471628, 0, 0, 0,
         -0.1110699846605633, -0.1110699846605633, 0.2221399693211266, -0.09807358668754862,
         -0.052680980397765545, 0.15075456708531418}};
    const int targets[4] = {2, QKV_IGNORE, 0, 1};
    for (int k = 0; k < 3; k++) {
        fx f = {qkv_tape_new(0, NULL), {0}, 0};
        qkv_tensor *x =
            hold(&f, tensor_of(2, (const int[]){4, 3},
                               (const double[]){1, 2, 3, 5, 5, 5, 0, 0, 9, -1, 0.5, 2}, 1));
        qkv_tensor *l = qkv_cross_entropy_smooth(f.t, x, targets, eps[k]);
        ck_assert(!qkv_tensor_is_nil(l));
        ASSERT_NEAR(l->data[0], loss[k], 4 * REAL_EPS * loss[k]);
        ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
        for (int i = 0; i < 12; i++)
            ASSERT_NEAR(x->grad[i], grad[k][i], TOL);
        for (int i = 3; i < 6; i++)
            ASSERT_NEAR(x->grad[i], 0, 0);
        fx_free(&f);
    }
}
END_TEST

/* eps = 0 is qkv_cross_entropy to the last bit, loss and gradient */
START_TEST(test_cross_entropy_smooth_at_zero_is_cross_entropy)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    const double v[8] = {0.3, -1.7, 2.9, 0.01, 1e4, -1e4, 7.5, 7.25};
    qkv_tensor *a = hold(&f, tensor_of(2, (const int[]){2, 4}, v, 1));
    qkv_tensor *b = hold(&f, tensor_of(2, (const int[]){2, 4}, v, 1));
    const int targets[2] = {1, 3};
    qkv_tensor *la = qkv_cross_entropy(f.t, a, targets);
    qkv_tensor *lb = qkv_cross_entropy_smooth(f.t, b, targets, 0.0);
    ck_assert(memcmp(la->data, lb->data, sizeof(qkv_real)) == 0);
    ck_assert_int_eq(qkv_backward(f.t, qkv_add(f.t, la, lb)), QKV_OK);
    ck_assert(memcmp(a->grad, b->grad, 8 * sizeof(qkv_real)) == 0);
    fx_free(&f);
}
END_TEST

/* Logits of ±1e4 stay finite; a -inf logit makes the smoothing term, so the
 * loss, +inf while the gradient stays finite, as in PyTorch 1.13 (float32
 * and float64):
 *   F.cross_entropy([[1e4,-1e4,0],[-1e4,1e4,9999]], [1,2], label_smoothing=0.1)
 *   F.cross_entropy([[-inf,1,2]], [2], label_smoothing=0.1) */
START_TEST(test_cross_entropy_smooth_far_logits_match_torch)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(
        &f, tensor_of(2, (const int[]){2, 3}, (const double[]){1e4, -1e4, 0, -1e4, 1e4, 9999}, 1));
    qkv_tensor *l = qkv_cross_entropy_smooth(f.t, x, (const int[]){1, 2}, 0.1);
    ASSERT_NEAR(l->data[0], 9833.95663084376, 4 * REAL_EPS * 9833.96);
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    const double want[6] = {0.48333333333333334,   -0.4666666666666667, -0.016666666666666666,
                            -0.016666666666666666, 0.3488626226483358,  -0.3321959559816691};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(x->grad[i], want[i], TOL);
    fx_free(&f);
    f = (fx){qkv_tape_new(0, NULL), {0}, 0}; /* one backward per recording */
    qkv_tensor *y =
        hold(&f, tensor_of(2, (const int[]){1, 3}, (const double[]){-INFINITY, 1, 2}, 1));
    qkv_tensor *m = qkv_cross_entropy_smooth(f.t, y, (const int[]){2}, 0.1);
    ck_assert(isinf(m->data[0]) && m->data[0] > 0);
    ck_assert_int_eq(qkv_backward(f.t, m), QKV_OK);
    const double wy[3] = {-0.03333333333333333, 0.23560808803666178, -0.20227475470332845};
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(y->grad[i], wy[i], TOL);
    fx_free(&f);
}
END_TEST

/* One class: p is 1 and the smoothed target is 1 whatever eps, so the
 * loss and every gradient are 0 exactly (PyTorch 1.13 gives 0 and 0 for
 * F.cross_entropy([[1.],[2.],[3.]], [0,0,0], label_smoothing=0.2)); the
 * target's weight taken as 1 - eps + eps/1 left -1.85e-17. */
START_TEST(test_cross_entropy_smooth_of_one_class_is_zero)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){3, 1}, (const double[]){1, 2, 3}, 1));
    qkv_tensor *l = qkv_cross_entropy_smooth(f.t, x, (const int[]){0, 0, 0}, 0.2);
    ck_assert(l->data[0] == 0);
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(x->grad[i] == 0, "gradient %d: %g", i, (double)x->grad[i]);
    fx_free(&f);
}
END_TEST

START_TEST(test_cross_entropy_smooth_all_ignored_is_zero)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *x = hold(&f, tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1));
    qkv_tensor *l = qkv_cross_entropy_smooth(f.t, x, (const int[]){QKV_IGNORE, QKV_IGNORE}, 0.1);
    ASSERT_NEAR(l->data[0], 0, 0);
    ck_assert_int_eq(qkv_backward(f.t, l), QKV_OK);
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(x->grad[i], 0, 0);
    fx_free(&f);
}
END_TEST

#define EXPECT_ERROR(call, status, message) EXPECT_ERROR_ON(f.t, call, status, message)

START_TEST(test_errors_name_the_op_and_shapes)
{
    fx f = {qkv_tape_new(0, NULL), {0}, 0};
    qkv_tensor *a = hold(&f, tensor_of(3, (const int[]){2, 3, 4}, NULL, 0));
    qkv_tensor *b = hold(&f, tensor_of(3, (const int[]){3, 4, 5}, NULL, 0));
    qkv_tensor *w = hold(&f, tensor_of(2, (const int[]){5, 3}, NULL, 0));
    qkv_tensor *v = hold(&f, tensor_of(1, (const int[]){3}, NULL, 0));
    const int ids[2] = {1, 5}, idx[2] = {0, 3}, tg[6] = {0, 1, 2, 3, 4, 0};
    EXPECT_ERROR(qkv_matmul(f.t, a, b), QKV_ERR_SHAPE,
                 "matmul: [2,3,4] x [3,4,5]: batch dimensions differ");
    EXPECT_ERROR(qkv_matmul_nt(f.t, a, w), QKV_ERR_SHAPE,
                 "matmul_nt: [2,3,4] x [5,3]: inner dimensions differ");
    EXPECT_ERROR(qkv_matmul(f.t, w, v), QKV_ERR_SHAPE,
                 "matmul: [5,3] x [3]: both inputs need at least 2 dimensions");
    EXPECT_ERROR(qkv_matmul_nt(f.t, v, w), QKV_ERR_SHAPE,
                 "matmul_nt: [3] x [5,3]: both inputs need at least 2 dimensions");
    EXPECT_ERROR(qkv_add(f.t, a, v), QKV_ERR_SHAPE,
                 "add: [2,3,4] and [3]: the shapes do not broadcast");
    EXPECT_ERROR(qkv_affine(f.t, a, w, NULL), QKV_ERR_SHAPE,
                 "affine: x [2,3,4], w [5,3], b none: the last dimension of x is not w's first");
    EXPECT_ERROR(qkv_affine(f.t, a, b, NULL), QKV_ERR_SHAPE,
                 "affine: x [2,3,4], w [3,4,5], b none: x needs at least 1 dimension and w "
                 "exactly 2");
    EXPECT_ERROR(qkv_affine(f.t, w, w, v), QKV_ERR_SHAPE,
                 "affine: x [5,3], w [5,3], b [3]: the last dimension of x is not w's first");
    /* a scalar x has no last dimension; a nil bias (a failed call's
     * result) is not NULL, no bias */
    qkv_tensor *x0 = tensor_of(0, NULL, (const double[]){5}, 0);
    EXPECT_ERROR(qkv_affine(f.t, x0, w, NULL), QKV_ERR_SHAPE,
                 "affine: x [], w [5,3], b none: x needs at least 1 dimension and w exactly 2");
    qkv_tensor_free(x0);
    EXPECT_ERROR(qkv_affine(f.t, b, w, qkv_nil()), QKV_ERR_ARG,
                 "affine: input is nil (NULL, or the result of a failed call)");
    EXPECT_ERROR(qkv_gather(f.t, w, ids, 1, (const int[]){2}), QKV_ERR_ARG,
                 "gather: id 5 at position 1 is outside [0,5) of table [5,3]");
    EXPECT_ERROR(qkv_pick_rows(f.t, a, idx), QKV_ERR_ARG,
                 "pick_rows: index 3 for item 1 is outside [0,3) of [2,3,4]");
    EXPECT_ERROR(qkv_cross_entropy(f.t, a, tg), QKV_ERR_ARG,
                 "cross_entropy: target 4 of row 4 is outside [0,4) for logits [2,3,4]");
    /* NULL targets are a missing argument, not a shape: it said QKV_ERR_SHAPE
     * and "logits [2,3,4] need a class dimension and targets", for logits
     * that were right */
    EXPECT_ERROR(qkv_cross_entropy(f.t, a, NULL), QKV_ERR_ARG,
                 "cross_entropy: no targets (targets is NULL)");
    qkv_tensor *s = tensor_of(0, NULL, (const double[]){1}, 0);
    EXPECT_ERROR(qkv_cross_entropy(f.t, s, tg), QKV_ERR_SHAPE,
                 "cross_entropy: logits [] need a class dimension");
    EXPECT_ERROR(qkv_cross_entropy_smooth(f.t, a, tg, -0.1), QKV_ERR_ARG,
                 "cross_entropy_smooth: eps = -0.1 must be in [0, 1]");
    EXPECT_ERROR(qkv_cross_entropy_smooth(f.t, a, tg, 1.5), QKV_ERR_ARG,
                 "cross_entropy_smooth: eps = 1.5 must be in [0, 1]");
    EXPECT_ERROR(qkv_cross_entropy_smooth(f.t, a, tg, NAN), QKV_ERR_ARG,
                 "cross_entropy_smooth: eps = NaN must be in [0, 1]");
    EXPECT_ERROR(qkv_cross_entropy_smooth(f.t, a, tg, 0.1), QKV_ERR_ARG,
                 "cross_entropy_smooth: target 4 of row 4 is outside [0,4) for logits [2,3,4]");
    qkv_tensor_free(s);
    EXPECT_ERROR(qkv_transpose(f.t, v), QKV_ERR_SHAPE,
                 "transpose: [3]: needs at least 2 dimensions");
    EXPECT_ERROR(qkv_pick_rows(f.t, w, idx), QKV_ERR_SHAPE,
                 "pick_rows: [5,3]: input must be [B,T,D] with B indices");
    qkv_tensor *a4d = tensor_of(4, (const int[]){2, 3, 4, 1}, NULL, 0); /* not [B,T,D] either */
    EXPECT_ERROR(qkv_pick_rows(f.t, a4d, idx), QKV_ERR_SHAPE,
                 "pick_rows: [2,3,4,1]: input must be [B,T,D] with B indices");
    qkv_tensor_free(a4d);
    /* ids of 4 dimensions would make a 5-D output; a negative row index is
     * outside [0,T) too */
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, 4, (const int[]){1, 1, 1, 1}), QKV_ERR_SHAPE,
                 "gather: table [5,3], ids [1,1,1,1]: need a table [V,D] and ids of 1 to 3 "
                 "dimensions, each at least 1");
    /* the message names the ids' shape, which the table's alone did not:
     * "table [5,3] must be [V,D]" blamed a table that was right */
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, 2, (const int[]){1, -2}), QKV_ERR_SHAPE,
                 "gather: table [5,3], ids [1,-2]: need a table [V,D] and ids of 1 to 3 "
                 "dimensions, each at least 1");
    /* NULL ids are a missing argument, not a shape: it said QKV_ERR_SHAPE
     * and "table [5,3], ids [2] with no ids (NULL): need a table [V,D] and
     * ids of 1 to 3 dimensions, ...", for a table and a shape that were
     * right; it is said first, as cross_entropy says its NULL targets */
    EXPECT_ERROR(qkv_gather(f.t, w, NULL, 1, (const int[]){2}), QKV_ERR_ARG,
                 "gather: no ids (ids is NULL)");
    EXPECT_ERROR(qkv_gather(f.t, a, NULL, 1, (const int[]){2}), QKV_ERR_ARG,
                 "gather: no ids (ids is NULL)");
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, 1, NULL), QKV_ERR_SHAPE,
                 "gather: table [5,3], ids of shape NULL: need a table [V,D] and ids of 1 to 3 "
                 "dimensions, each at least 1");
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, 9, (const int[]){1}), QKV_ERR_SHAPE,
                 "gather: table [5,3], ids of 9 dimensions: need a table [V,D] and ids of 1 to "
                 "3 dimensions, each at least 1");
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, -1, (const int[]){1}), QKV_ERR_SHAPE,
                 "gather: table [5,3], ids of -1 dimensions: need a table [V,D] and ids of 1 to "
                 "3 dimensions, each at least 1");
    EXPECT_ERROR(qkv_pick_rows(f.t, a, (const int[]){-1, 0}), QKV_ERR_ARG,
                 "pick_rows: index -1 for item 0 is outside [0,3) of [2,3,4]");
    /* no indices (an argument missing, not a shape: it said QKV_ERR_SHAPE
     * and "[2,3,4]: input must be [B,T,D] with B indices" of an input that
     * was); a table of three dimensions; ids of none */
    EXPECT_ERROR(qkv_pick_rows(f.t, a, NULL), QKV_ERR_ARG, "pick_rows: no indices (idx is NULL)");
    EXPECT_ERROR(qkv_pick_rows(f.t, w, NULL), QKV_ERR_ARG, "pick_rows: no indices (idx is NULL)");
    EXPECT_ERROR(qkv_gather(f.t, a, (const int[]){0}, 1, (const int[]){1}), QKV_ERR_SHAPE,
                 "gather: table [2,3,4], ids [1]: need a table [V,D] and ids of 1 to 3 "
                 "dimensions, each at least 1");
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, 0, (const int[]){1}), QKV_ERR_SHAPE,
                 "gather: table [5,3], ids []: need a table [V,D] and ids of 1 to 3 "
                 "dimensions, each at least 1");
    /* ids of a shape too large for memory: refused before the scan reads
     * them (one id stands for 2^60, then 2^48; the scan read past it) */
    qkv_tensor *w16 = tensor_of(2, (const int[]){2, 16}, NULL, 0);
    EXPECT_ERROR(
        qkv_gather(f.t, w16, (const int[]){0}, 3, (const int[]){1 << 20, 1 << 20, 1 << 20}),
        QKV_ERR_NOMEM,
        "gather: table [2,16], ids [1048576,1048576,1048576]: the output's size "
        "overflows");
    qkv_tensor_free(w16);
    /* ids whose own count overflows: the same, not "need ... ids of 1 to 3
     * dimensions, each at least 1", which they are */
    EXPECT_ERROR(qkv_gather(f.t, w, (const int[]){0}, 3, (const int[]){1 << 21, 1 << 21, 1 << 21}),
                 QKV_ERR_NOMEM,
                 "gather: table [5,3], ids [2097152,2097152,2097152]: the output's size "
                 "overflows");
    qkv_tape_reset(f.t);
    qkv_alloc_fail_at(qkv_alloc_count() + 1); /* as a 2^53-byte arena block fails */
    ck_assert(qkv_gather(f.t, w, (const int[]){0}, 3, (const int[]){65536, 65536, 65536}) ==
              qkv_nil());
    qkv_alloc_fail_at(0);
    ck_assert_int_eq(qkv_tape_status(f.t), QKV_ERR_NOMEM);
    /* a 3-D b under a 4-D a is neither shared [k,n] nor of a's batch
     * dimensions, even where its first two sizes happen to match a's */
    qkv_tensor *a4 = hold(&f, tensor_of(4, (const int[]){2, 4, 3, 4}, NULL, 0));
    qkv_tensor *b3 = hold(&f, tensor_of(3, (const int[]){2, 4, 5}, NULL, 0));
    EXPECT_ERROR(qkv_matmul(f.t, a4, b3), QKV_ERR_SHAPE,
                 "matmul: [2,4,3,4] x [2,4,5]: batch dimensions differ");
    /* affine's bias: a vector of w's second size, not an [n,1] column
     * (whose first size alone matches) or a vector of another length */
    qkv_tensor *w42 = hold(&f, tensor_of(2, (const int[]){4, 2}, NULL, 0));
    qkv_tensor *col = hold(&f, tensor_of(2, (const int[]){2, 1}, NULL, 0));
    EXPECT_ERROR(qkv_affine(f.t, a, w42, col), QKV_ERR_SHAPE,
                 "affine: x [2,3,4], w [4,2], b [2,1]: b must be a vector as long as w's second "
                 "dimension");
    EXPECT_ERROR(qkv_affine(f.t, a, w42, v), QKV_ERR_SHAPE,
                 "affine: x [2,3,4], w [4,2], b [3]: b must be a vector as long as w's second "
                 "dimension");
    fx_free(&f);
}
END_TEST

Suite *ops_suite(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_matmul_by_hand);
    tcase_add_test(tc, test_batched_matmul_by_hand);
    tcase_add_test(tc, test_matmul_gradients_by_hand);
    tcase_add_test(tc, test_elementwise_and_broadcast_by_hand);
    tcase_add_test(tc, test_reductions_by_hand);
    tcase_add_test(tc, test_reductions_name_themselves_recording_their_node);
    tcase_add_test(tc, test_affine_by_hand);
    tcase_add_test(tc, test_rnn_scan_by_hand);
    tcase_add_test(tc, test_rnn_scan_matches_the_unrolled_ops);
    tcase_add_test(tc, test_rnn_scan_backward_keeps_the_bits_of_the_transposed_product);
    tcase_add_test(tc, test_gather_and_pick_rows_by_hand);
    tcase_add_test(tc, test_gather_scatter_adds_repeated_ids);
    tcase_add_test(tc, test_indices_are_copied_at_the_call);
    tcase_add_test(tc, test_softmax_stable_at_plus_minus_1e4);
    tcase_add_test(tc, test_fully_masked_row_gives_zeros_not_nan);
    tcase_add_test(tc, test_log_softmax_masked_row_is_minus_inf_without_nan_gradient);
    tcase_add_test(tc, test_log_softmax_gradient_adds_to_another_consumers);
    tcase_add_test(tc, test_transpose_gradient_adds_to_another_consumers);
    tcase_add_test(tc, test_softmax_refuses_a_scalar);
    tcase_add_test(tc, test_softmax_of_a_vector);
    tcase_add_test(tc, test_log_softmax_judges_each_row_masked_by_its_own_values);
    tcase_add_test(tc, test_log_softmax_nan_row_is_nan);
    tcase_add_test(tc, test_log_softmax_masked_row_with_nan_passes_no_gradient);
    tcase_add_test(tc, test_log_softmax_keeps_its_precision_far_from_zero);
    tcase_add_test(tc, test_cross_entropy_keeps_its_precision_far_from_zero);
    tcase_add_test(tc, test_cross_entropy_by_hand);
    tcase_add_test(tc, test_cross_entropy_gradient_adds_to_what_is_there);
    tcase_add_test(tc, test_cross_entropy_of_equal_logits_is_exact);
    tcase_add_test(tc, test_cross_entropy_all_ignored_is_zero);
    tcase_add_test(tc, test_cross_entropy_smooth_matches_torch);
    tcase_add_test(tc, test_cross_entropy_smooth_at_zero_is_cross_entropy);
    tcase_add_test(tc, test_cross_entropy_smooth_far_logits_match_torch);
    tcase_add_test(tc, test_cross_entropy_smooth_all_ignored_is_zero);
    tcase_add_test(tc, test_cross_entropy_smooth_of_one_class_is_zero);
    tcase_add_test(tc, test_errors_name_the_op_and_shapes);
    suite_add_tcase(s, tc);
    return s;
}
