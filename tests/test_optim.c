/*
 * test_optim.c - each optimizer's update against steps worked by hand,
 * clipping by global norm, and saving and loading an optimizer's state.
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests.h"

/* One parameter tensor holding the given values, gradient set to g. */
static qkv_tensor *param(const double *values, const double *g, int n)
{
    qkv_tensor *p = tensor_of(1, (const int[]){n}, values, 1);
    for (int i = 0; i < n; i++)
        p->grad[i] = (qkv_real)g[i];
    return p;
}

START_TEST(test_sgd_with_momentum_by_hand)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){0.5}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.lr = 0.1;
    c.momentum = 0.9;
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_ptr_nonnull(o);
    /* step 1: v = 0.5, p = 1 - 0.1·0.5 = 0.95 */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.95, REAL_EPS);
    /* step 2 (same g): v = 0.9·0.5 + 0.5 = 0.95, p = 0.95 - 0.095 = 0.855 */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.855, 2 * REAL_EPS);
    qkv_optim_zero_grad(o);
    ASSERT_NEAR(p->grad[0], 0, 0);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* SGD's L2 decay is added to the gradient before the momentum, as in
 * PyTorch's SGD (torch 2, weight_decay=0.1, momentum=0.9, lr=0.1 gives the
 * same 0.94 and 0.8266), and a parameter with decay off skips it. */
START_TEST(test_sgd_weight_decay_by_hand)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){0.5}, 1);
    qkv_tensor *b = param((const double[]){1}, (const double[]){0.5}, 1);
    qkv_tensor *ps[2] = {p, b};
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.lr = 0.1;
    c.momentum = 0.9;
    c.weight_decay = 0.1;
    qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(qkv_optim_set_decay(o, 1, 0), QKV_OK);
    /* an index out of range is refused (no parameter changes its decay) */
    ck_assert_int_eq(qkv_optim_set_decay(o, 2, 0), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_set_decay(o, -1, 1), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_set_decay(NULL, 0, 1), QKV_ERR_ARG);
    /* step 1: g = 0.5 + 0.1·1 = 0.6, v = 0.6, p = 1 - 0.06 = 0.94 */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.94, 2 * REAL_EPS);
    ASSERT_NEAR(b->data[0], 0.95, 2 * REAL_EPS); /* no decay: 1 - 0.1·0.5 */
    /* step 2: g = 0.5 + 0.1·0.94 = 0.594, v = 0.9·0.6 + 0.594 = 1.134,
     * p = 0.94 - 0.1134 = 0.8266; a few roundings of values below 1 */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.8266, 4 * REAL_EPS);
    ASSERT_NEAR(b->data[0], 0.855, 4 * REAL_EPS); /* v = 0.95, 0.95 - 0.095 */
    qkv_optim_free(o);
    qkv_tensor_free(p);
    qkv_tensor_free(b);
}
END_TEST

START_TEST(test_adam_two_steps_by_hand)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){0.5}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    c.lr = 0.01;
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    /* step 1: m̂ = g, v̂ = g², update = lr·g/(|g| + 1e-8) = 0.01·0.5/(0.5 + 1e-8) */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 1 - 0.01 * 0.5 / (0.5 + 1e-8), 2 * REAL_EPS);
    /* step 2, g = -1:
     *   m = 0.9·0.05 + 0.1·(-1) = -0.055          m̂ = -0.055/0.19 = -0.28947368
     *   v = 0.999·0.00025 + 0.001 = 0.00124975   v̂ = 0.00124975/0.001999 = 0.62518759
     *   p = 0.99 - 0.01·(-0.28947368)/sqrt(0.62518759) = 0.99 + 0.00366104 = 0.99366104 */
    p->grad[0] = -1;
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.99366104, 1e-7 + 2 * REAL_EPS);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* eps is added to the bias-corrected root √v̂, as in PyTorch's Adam, not
 * to √v: with a gradient of 1e-6 it is 1% of the denominator (torch 1.13,
 * float64, lr 0.01: 0.99009900990099 then 0.98019801980198); added to √v
 * it would be eps/√(1 - 0.999) = 3.2e-7, and the step 0.0076. */
START_TEST(test_adam_eps_is_added_to_the_corrected_root)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){1e-6}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    c.lr = 0.01;
    c.eps = 1e-8;
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_ptr_nonnull(o);
    /* step 1: m̂ = g, √v̂ = g, so p = 1 - 0.01·1e-6/(1e-6 + 1e-8) = 1 - 0.01/1.01 */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 1 - 0.01 / 1.01, 2 * REAL_EPS);
    /* step 2, the same g: m̂ = g and √v̂ = g again, the same step */
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 1 - 0.02 / 1.01, 4 * REAL_EPS);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* qkv_optim_defaults gives what optim.h lists: lr 0.1 for SGD and 0.01
 * for Adam and AdamW, momentum 0, betas 0.9 and 0.999, eps 1e-8, weight
 * decay 0 (AdamW: 0.01, PyTorch's AdamW default), no clipping. */
START_TEST(test_defaults_are_the_documented_ones)
{
    const qkv_optim_kind kinds[3] = {QKV_SGD, QKV_ADAM, QKV_ADAMW};
    const double lr[3] = {0.1, 0.01, 0.01}, wd[3] = {0, 0, 0.01};
    for (int k = 0; k < 3; k++) {
        qkv_optim_config c = qkv_optim_defaults(kinds[k]);
        ck_assert_int_eq(c.kind, kinds[k]);
        ck_assert(c.lr == lr[k] && c.weight_decay == wd[k]);
        ck_assert(c.momentum == 0 && c.beta1 == 0.9 && c.beta2 == 0.999);
        ck_assert(c.eps == 1e-8 && c.clip == 0);
    }
}
END_TEST

START_TEST(test_adamw_decays_weights_apart_from_the_gradient)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){0}, 1);
    qkv_tensor *q = param((const double[]){1}, (const double[]){0}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAMW);
    c.lr = 0.01;
    c.weight_decay = 0.1;
    qkv_optim *w = qkv_optim_new(&c, &p, 1, NULL);
    c.kind = QKV_ADAM;
    qkv_optim *l2 = qkv_optim_new(&c, &q, 1, NULL);
    ck_assert_int_eq(qkv_optim_step(w), QKV_OK);
    ck_assert_int_eq(qkv_optim_step(l2), QKV_OK);
    /* AdamW: p = 1 - lr·wd·1 = 0.999, and the zero gradient moves nothing */
    ASSERT_NEAR(p->data[0], 0.999, 2 * REAL_EPS);
    /* Adam + L2: g = wd·p = 0.1, so the first step is a full lr: 1 - 0.01·0.1/(0.1 + 1e-8) */
    ASSERT_NEAR(q->data[0], 1 - 0.01 * 0.1 / (0.1 + 1e-8), 2 * REAL_EPS);
    qkv_optim_free(w);
    qkv_optim_free(l2);
    qkv_tensor_free(p);
    qkv_tensor_free(q);
}
END_TEST

START_TEST(test_clip_by_global_norm)
{
    qkv_tensor *a = param((const double[]){0}, (const double[]){3}, 1);
    qkv_tensor *b = param((const double[]){0}, (const double[]){4}, 1);
    qkv_tensor *ps[2] = {a, b};
    ASSERT_NEAR(qkv_grad_norm(ps, 2), 5, 0);
    ASSERT_NEAR(qkv_clip_grad_norm(ps, 2, 10), 5, 0); /* under the limit: unchanged */
    ASSERT_NEAR(a->grad[0], 3, 0);
    ASSERT_NEAR(qkv_clip_grad_norm(ps, 2, 1), 5, 0);
    ASSERT_NEAR(a->grad[0], 0.6, 2 * REAL_EPS);
    ASSERT_NEAR(b->grad[0], 0.8, 2 * REAL_EPS);
    /* a limit of 0 or below is no limit, as the header says */
    a->grad[0] = 3;
    b->grad[0] = 4;
    ASSERT_NEAR(qkv_clip_grad_norm(ps, 2, 0), 5, 0);
    ASSERT_NEAR(qkv_clip_grad_norm(ps, 2, -1), 5, 0);
    ck_assert(a->grad[0] == 3 && b->grad[0] == 4);
    /* through the optimizer: SGD lr 1 with clip 1 moves by the clipped gradient */
    a->grad[0] = 3;
    b->grad[0] = 4;
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.lr = 1;
    c.clip = 1;
    qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(qkv_optim_last_norm(o), 5, 0);
    ASSERT_NEAR(a->data[0], -0.6, 2 * REAL_EPS);
    ASSERT_NEAR(b->data[0], -0.8, 2 * REAL_EPS);
    /* and leaves the gradients clipped, as the header says (PyTorch's
     * clip_grad_norm_ too scales them in place) */
    ASSERT_NEAR(a->grad[0], 0.6, 2 * REAL_EPS);
    ASSERT_NEAR(b->grad[0], 0.8, 2 * REAL_EPS);
    qkv_optim_free(o);
    /* a norm that is not finite, as the header says: infinity scales by
     * 1/inf = 0 (3 -> 0, inf -> 0·inf = NaN, as in PyTorch); NaN leaves
     * the gradients as they are; the norm returned says which */
    qkv_tensor *c3 = param((const double[]){0}, (const double[]){0}, 1);
    qkv_tensor *ps3[3] = {a, b, c3};
    a->grad[0] = 3;
    b->grad[0] = (qkv_real)INFINITY;
    c3->grad[0] = 4;
    ck_assert(isinf(qkv_clip_grad_norm(ps3, 3, 1)));
    ck_assert(a->grad[0] == 0 && isnan(b->grad[0]) && c3->grad[0] == 0);
    b->grad[0] = (qkv_real)NAN;
    a->grad[0] = 3;
    c3->grad[0] = 4;
    ck_assert(isnan(qkv_clip_grad_norm(ps3, 3, 1)));
    ck_assert(a->grad[0] == 3 && isnan(b->grad[0]) && c3->grad[0] == 4);
    /* the optimizer's step, with a clip, refuses an infinite norm and
     * leaves the gradients unclipped */
    b->grad[0] = (qkv_real)INFINITY;
    o = qkv_optim_new(&c, ps3, 3, NULL);
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert(a->grad[0] == 3 && isinf(b->grad[0]) && c3->grad[0] == 4);
    qkv_optim_free(o);
    qkv_tensor_free(a);
    qkv_tensor_free(b);
    qkv_tensor_free(c3);
}
END_TEST

START_TEST(test_non_finite_gradient_changes_nothing)
{
    qkv_tensor *p = param((const double[]){1, 2}, (const double[]){0.5, NAN}, 2);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ASSERT_NEAR(p->data[0], 1, 0);
    ASSERT_NEAR(p->data[1], 2, 0);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* The refusal says which parameter and which value: it said nothing (a
 * status alone) */
START_TEST(test_a_non_finite_gradient_is_named_by_its_index)
{
    qkv_tensor *ps[2] = {param((const double[]){1, 2}, (const double[]){0.5, 0.25}, 2),
                         param((const double[]){3, 4}, (const double[]){0.5, NAN}, 2)};
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
    ck_assert_str_eq(qkv_optim_error(o), "");
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(qkv_optim_error(o), "optim: the gradient of parameter 1 is not finite: "
                                         "grad[1] = NaN; no parameter was changed");
    /* nothing moved: weights, moments, the step count */
    ck_assert(ps[0]->data[0] == 1 && ps[0]->data[1] == 2);
    ck_assert(ps[1]->data[0] == 3 && ps[1]->data[1] == 4);
    const double *m = qkv_optim_state(o, 0, 0, NULL), *v = qkv_optim_state(o, 0, 1, NULL);
    ck_assert(m[0] == 0 && m[1] == 0 && v[0] == 0 && v[1] == 0);
    ck_assert_int_eq(qkv_optim_steps(o), 0);
    /* a name given to the optimizer replaces the index */
    ck_assert_int_eq(qkv_optim_set_name(o, 1, "head.bias"), QKV_OK);
    ps[1]->grad[1] = (qkv_real)-INFINITY;
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(qkv_optim_error(o), "optim: the gradient of head.bias is not finite: "
                                         "grad[1] = -infinity; no parameter was changed");
    ck_assert_int_eq(qkv_optim_set_name(o, 2, "x"), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_set_name(o, -1, "x"), QKV_ERR_ARG);
    /* a step that succeeds clears the message */
    ps[1]->grad[1] = 1;
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ck_assert_str_eq(qkv_optim_error(o), "");
    ck_assert_int_eq(qkv_optim_steps(o), 1);
    qkv_optim_free(o);
    qkv_tensor_free(ps[0]);
    qkv_tensor_free(ps[1]);
}
END_TEST

/* Values that are not finite are words in messages: "NaN" whatever its
 * sign bit (x86's default NaN has it set, and printf wrote "-nan"),
 * "infinity" and "-infinity" (printf's "inf"); others as %g writes them. */
START_TEST(test_messages_say_nan_and_infinity_in_words)
{
    char buf[32];
    ck_assert_str_eq(qkv_num_str(buf, sizeof buf, NAN), "NaN");
    ck_assert_str_eq(qkv_num_str(buf, sizeof buf, copysign(NAN, -1)), "NaN");
    ck_assert_str_eq(qkv_num_str(buf, sizeof buf, INFINITY), "infinity");
    ck_assert_str_eq(qkv_num_str(buf, sizeof buf, -INFINITY), "-infinity");
    ck_assert_str_eq(qkv_num_str(buf, sizeof buf, 1e300), "1e+300");
    ck_assert_str_eq(qkv_num_str(buf, sizeof buf, -0.25), "-0.25");
    ck_assert_str_eq(qkv_num_str(buf, 4, -INFINITY), "-in"); /* cut to fit */
    /* the optimizer's refusal of a NaN with its sign bit set */
    qkv_tensor *p = param((const double[]){1, 2}, (const double[]){0.5, 0}, 2);
    p->grad[1] = (qkv_real)copysign(NAN, -1);
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(qkv_optim_error(o), "optim: the gradient of parameter 0 is not finite: "
                                         "grad[1] = NaN; no parameter was changed");
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* The largest finite qkv_real. */
static double real_max(void)
{
    return sizeof(qkv_real) == sizeof(float) ? FLT_MAX : DBL_MAX;
}

/* Finite gradients and a rate that makes the update overflow: SGD at lr =
 * the largest qkv_real M moves 2 by -4M, beyond the range (so -inf), and 1
 * (gradient 0.5) to 1 - M/2, which rounds to -M/2, finite. The step
 * returned QKV_OK with a weight of -inf. It is taken whole (optim.h): the
 * weights hold it, and the step count moved on. */
START_TEST(test_an_sgd_update_that_overflows_is_refused)
{
    qkv_tensor *ps[2] = {param((const double[]){1}, (const double[]){0.5}, 1),
                         param((const double[]){1, 2}, (const double[]){0, 4}, 2)};
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.lr = real_max();
    qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(qkv_optim_error(o), "optim: the update of parameter 1 is not finite: "
                                         "data[1] = -infinity, from finite gradients; every "
                                         "parameter was updated");
    ck_assert(ps[0]->data[0] == (qkv_real)(-real_max() / 2));
    ck_assert(ps[1]->data[0] == 1 && isinf(ps[1]->data[1]) && ps[1]->data[1] < 0);
    ck_assert_int_eq(qkv_optim_steps(o), 1);
    qkv_optim_free(o);
    qkv_tensor_free(ps[0]);
    qkv_tensor_free(ps[1]);
}
END_TEST

/* Adam's update overflows on every kernel set, in a vector's body (weight
 * 5) and in the tail (weight 36) of 37: at step 1 the update of a weight
 * whose gradient is g != 0 is about lr·sign(g) (m̂ = g, √v̂ = |g|), so
 * -0.99M less 0.05M is -1.04M, beyond M: -inf; the other weights (gradient
 * 0) move by 0. And an Adam whose L2 decay of 1e300 makes g = 1e300 for a
 * weight of 1: v = 0.001·g² overflows to inf while the weight stays 1
 * (its update is m/inf = 0), a state no later step recovers from. */
START_TEST(test_an_adam_update_that_overflows_is_refused_on_every_kernel_set)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    enum { N = 37 };
    static const size_t at[2] = {5, 36};
    char want[256];
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        for (int a = 0; a < 2; a++) {
            const size_t k = at[a];
            double w[N] = {0}, g[N] = {0};
            w[k] = -0.99 * real_max();
            g[k] = 1;
            qkv_tensor *ps[2] = {param((const double[]){1}, (const double[]){0.5}, 1),
                                 param(w, g, N)};
            qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
            c.lr = 0.05 * real_max();
            qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
            ck_assert_int_eq(qkv_optim_set_name(o, 1, "head.w"), QKV_OK);
            ck_assert_msg(qkv_optim_step(o) == QKV_ERR_NUMERIC, "%s, weight %zu", impls[im], k);
            snprintf(
                want, sizeof want,
                "optim: the update of head.w is not finite: data[%zu] = -infinity, from finite "
                "gradients; every parameter was updated",
                k);
            ck_assert_str_eq(qkv_optim_error(o), want);
            for (size_t j = 0; j < N; j++)
                ck_assert(j == k ? isinf(ps[1]->data[j]) : ps[1]->data[j] == 0);
            qkv_optim_free(o);
            qkv_tensor_free(ps[0]);
            qkv_tensor_free(ps[1]);

            w[k] = 1;
            g[k] = 0;
            qkv_tensor *p = param(w, g, N);
            c = qkv_optim_defaults(QKV_ADAM);
            c.weight_decay = 1e300;
            o = qkv_optim_new(&c, &p, 1, NULL);
            ck_assert_msg(qkv_optim_step(o) == QKV_ERR_NUMERIC, "%s, weight %zu", impls[im], k);
            snprintf(want, sizeof want,
                     "optim: the update of parameter 0 is not finite: Adam's second moment "
                     "v[%zu] = infinity, from finite gradients; every parameter was updated",
                     k);
            ck_assert_str_eq(qkv_optim_error(o), want);
            ck_assert(p->data[k] == 1);
            qkv_optim_free(o);
            qkv_tensor_free(p);
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

#ifdef QKV_DOUBLE
/* Finite gradients whose squares overflow together: 1e154² = 1e308 fits a
 * double (DBL_MAX 1.797e308), 2e308 does not (CPython: (1e154)**2 is
 * 1e+308, 2*(1e154)**2 is inf). The message names where the sum overflowed. */
START_TEST(test_a_norm_that_overflows_names_where)
{
    qkv_tensor *ps[2] = {param((const double[]){1}, (const double[]){1e154}, 1),
                         param((const double[]){2}, (const double[]){-1e154}, 1)};
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(qkv_optim_error(o),
                     "optim: every gradient is finite, but the sum of their squares overflows "
                     "at parameter 1, whose largest |gradient| is 1e+154; no parameter was "
                     "changed");
    ck_assert(ps[0]->data[0] == 1 && ps[1]->data[0] == 2);
    qkv_optim_free(o);
    qkv_tensor_free(ps[0]);
    qkv_tensor_free(ps[1]);
}
END_TEST
#endif

START_TEST(test_bad_configs_are_refused)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){0}, 1);
    qkv_tensor *nograd = tensor_of(1, (const int[]){1}, NULL, 0);
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.lr = -0.1;
    ck_assert_ptr_null(qkv_optim_new(&c, &p, 1, NULL));
    c.lr = NAN;
    ck_assert_ptr_null(qkv_optim_new(&c, &p, 1, NULL));
    c.lr = INFINITY;
    ck_assert_ptr_null(qkv_optim_new(&c, &p, 1, NULL));
    c = qkv_optim_defaults(QKV_SGD);
    ck_assert_ptr_null(qkv_optim_new(&c, &nograd, 1, NULL));
    ck_assert_ptr_null(qkv_optim_new(&c, &p, 0, NULL));
    /* a parameter listed twice took two updates per step (w = 1, dw = 1,
     * lr 0.1: 0.8 where one update gives 0.9); it is refused */
    {
        qkv_tensor *twice[2] = {p, p};
        qkv_error err = qkv_error_none();
        ck_assert_ptr_null(qkv_optim_new(&c, twice, 2, &err));
        ck_assert_int_eq(err.status, QKV_ERR_ARG);
        ck_assert_str_eq(err.message, "optim: parameter 1 is parameter 0 again (or a view of it)");
    }
    /* an infinite decay would step a finite weight to inf and call it OK */
    for (int which = 0; which < 3; which++) {
        c = qkv_optim_defaults(which == 1 ? QKV_SGD : QKV_ADAMW);
        *(which == 0 ? &c.eps : which == 1 ? &c.weight_decay : &c.clip) = INFINITY;
        qkv_error err = qkv_error_none();
        ck_assert_ptr_null(qkv_optim_new(&c, &p, 1, &err));
        ck_assert_int_eq(err.status, QKV_ERR_ARG);
    }
    /* the open end of [0, 1): momentum 1 never forgets a gradient, and
     * beta 1 makes the bias correction 1 - beta^t zero, a division by 0 */
    for (int which = 0; which < 3; which++) {
        c = qkv_optim_defaults(which == 0 ? QKV_SGD : QKV_ADAM);
        *(which == 0 ? &c.momentum : which == 1 ? &c.beta1 : &c.beta2) = 1;
        qkv_error err = qkv_error_none();
        ck_assert_ptr_null(qkv_optim_new(&c, &p, 1, &err));
        ck_assert_str_eq(err.message, which == 0 ? "optim: momentum must be in [0, 1)"
                                                 : "optim: beta1 and beta2 must be in [0, 1)");
    }
    /* Adam with eps 0 divides 0 by 0 for every weight whose gradient has
     * been 0 so far (m = v = 0: an embedding row no batch has used), and
     * the step wrote NaN into it and returned QKV_OK; it is refused. SGD
     * does not use eps. */
    for (int kind = QKV_ADAM; kind <= QKV_ADAMW; kind++) {
        c = qkv_optim_defaults((qkv_optim_kind)kind);
        c.eps = 0;
        qkv_error err = qkv_error_none();
        ck_assert_ptr_null(qkv_optim_new(&c, &p, 1, &err));
        ck_assert_int_eq(err.status, QKV_ERR_ARG);
        ck_assert_str_eq(err.message, "optim: Adam's eps must be above 0");
    }
    c = qkv_optim_defaults(QKV_SGD);
    c.eps = 0;
    qkv_optim *sgd = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_ptr_nonnull(sgd);
    qkv_optim_free(sgd);
    /* a tape tensor, or a view a tape made of a parameter, dies with the
     * next reset: the optimizer took one and stepped whatever the arena
     * held there after it */
    {
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *on_tape[2] = {qkv_tape_tensor(t, 1, (const int[]){1}, 1),
                                  qkv_reshape(t, p, 2, (const int[]){1, 1})};
        for (int i = 0; i < 2; i++) {
            ck_assert_ptr_nonnull(on_tape[i]->grad);
            qkv_error err = qkv_error_none();
            ck_assert_ptr_null(qkv_optim_new(&c, &on_tape[i], 1, &err));
            ck_assert_int_eq(err.status, QKV_ERR_ARG);
            ck_assert_str_eq(err.message, "optim: parameter 0 was made on a tape, which takes it "
                                          "back at its next reset (make it with "
                                          "qkv_tensor_new(..., 1, ...))");
        }
        qkv_tape_free(t);
    }
    qkv_optim_kind k;
    ck_assert_int_eq(qkv_optim_parse("adamw", &k), 0);
    ck_assert_int_eq(k, QKV_ADAMW);
    ck_assert_int_eq(qkv_optim_parse("rmsprop", &k), -1);
    ck_assert_str_eq(qkv_optim_name(QKV_SGD), "sgd");
    ck_assert_str_eq(qkv_optim_name(QKV_ADAM), "adam");
    ck_assert_str_eq(qkv_optim_name(QKV_ADAMW), "adamw");
    /* a kind qkv_optim_new refuses as unknown is not named "adamw" */
    ck_assert_str_eq(qkv_optim_name((qkv_optim_kind)7), "unknown");
    ck_assert_str_eq(qkv_optim_name((qkv_optim_kind)-1), "unknown");
    qkv_optim_free(NULL);
    qkv_tensor_free(p);
    qkv_tensor_free(nograd);
}
END_TEST

/* An optimizer over no parameters is refused, as PyTorch's
 * torch.optim.SGD([]) is (ValueError: "... got an empty parameter list"):
 * it would step nothing. The message says which: no array, or its count. */
START_TEST(test_an_empty_parameter_list_is_refused)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){0}, 1);
    const qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_optim_new(&c, &p, 0, &err));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "optim: 0 parameters: an optimizer needs at least 1");
    ck_assert_ptr_null(qkv_optim_new(&c, &p, -2, &err));
    ck_assert_str_eq(err.message, "optim: -2 parameters: an optimizer needs at least 1");
    ck_assert_ptr_null(qkv_optim_new(&c, NULL, 1, &err));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "optim: no parameter array (NULL)");
    /* and a list of none, or none at all, through qkv_params_optim */
    qkv_params *empty = qkv_params_new(1, NULL);
    ck_assert_ptr_null(qkv_params_optim(empty, &c, &err));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "params: the list is empty: an optimizer needs at least 1 parameter");
    ck_assert_ptr_null(qkv_params_optim(NULL, &c, &err));
    ck_assert_str_eq(err.message, "params: no parameter list (NULL)");
    qkv_params_free(empty);
    qkv_tensor_free(p);
}
END_TEST

/* A rate of 0 is a valid config, as in PyTorch and qkv_optim_set_lr: each
 * kind's step leaves the parameters where they were (AdamW's decay is
 * lr·wd, so 0 too), and the rate can be raised later. */
START_TEST(test_zero_learning_rate_is_a_frozen_step)
{
    const qkv_optim_kind kinds[3] = {QKV_SGD, QKV_ADAM, QKV_ADAMW};
    for (int k = 0; k < 3; k++) {
        qkv_tensor *p = param((const double[]){1, -2}, (const double[]){0.5, 3}, 2);
        qkv_optim_config c = qkv_optim_defaults(kinds[k]);
        c.lr = 0;
        c.weight_decay = 0.1;
        qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
        ASSERT_NEAR(p->data[0], 1, 0);
        ASSERT_NEAR(p->data[1], -2, 0);
        ck_assert_int_eq(qkv_optim_set_lr(o, 0.5), QKV_OK);
        ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
        ck_assert(p->data[0] < 1);
        qkv_optim_free(o);
        qkv_tensor_free(p);
    }
}
END_TEST

/* qkv_optim_set_lr changes the rate and nothing else: 0 is a rate (a
 * frozen step), Inf is not, and the moments and the step count (so Adam's
 * bias correction) go on across a change, as in PyTorch. torch 1.13's Adam
 * (lr 0.1, then 0, then 0.05 set in its param group; gradients 1, -2, 0.5)
 * gives 0.900000001, 0.900000001, 0.9068345341008733. */
START_TEST(test_set_lr_keeps_the_moments_and_the_step_count)
{
    qkv_tensor *p = param((const double[]){1}, (const double[]){1}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    c.lr = 0.1;
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.900000001, 2 * REAL_EPS);
    ck_assert_int_eq(qkv_optim_set_lr(o, INFINITY), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_set_lr(o, -INFINITY), QKV_ERR_ARG);
    ck_assert(qkv_optim_lr(o) == 0.1);
    ck_assert_int_eq(qkv_optim_set_lr(o, 0), QKV_OK);
    ck_assert(qkv_optim_lr(o) == 0);
    ck_assert_int_eq(qkv_optim_steps(o), 1);
    p->grad[0] = -2;
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.900000001, 2 * REAL_EPS);
    ck_assert_int_eq(qkv_optim_steps(o), 2);
    ck_assert_int_eq(qkv_optim_set_lr(o, 0.05), QKV_OK);
    ck_assert_int_eq(qkv_optim_steps(o), 2);
    p->grad[0] = 0.5;
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p->data[0], 0.9068345341008733, 4 * REAL_EPS);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* The Adam kernel on every kernel set against the formula written out
 * here, over 37 weights (whole vectors and a tail), for three steps with
 * L2 decay: IEEE arithmetic in the same order gives the same bits. */
START_TEST(test_adam_kernel_is_the_formula_on_every_path)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    enum { N = 37 };
    for (int im = 0; im < 3; im++) {
        if (qkv_kernels_use(impls[im], NULL) != 0)
            continue;
        qkv_real w[N], g[N], rw[N];
        double m[N] = {0}, v[N] = {0}, rm[N] = {0}, rv[N] = {0};
        qkv_rng r;
        qkv_rng_seed(&r, 3);
        for (int j = 0; j < N; j++) {
            rw[j] = w[j] = (qkv_real)qkv_rng_normalvariate(&r, 0, 1);
            g[j] = (qkv_real)qkv_rng_normalvariate(&r, 0, 0.1);
        }
        for (int t = 1; t <= 3; t++) {
            qkv_adam_coef c = {
                0.9, 0.999, 0.01 / (1 - pow(0.9, t)), 1 / sqrt(1 - pow(0.999, t)), 1e-8, 0.01, 1};
            qkv_adam_update(w, g, m, v, N, &c);
            for (int j = 0; j < N; j++) {
                double wj = rw[j], gj = (double)g[j] + 0.01 * wj;
                rm[j] = 0.9 * rm[j] + (1 - 0.9) * gj;
                rv[j] = 0.999 * rv[j] + (1 - 0.999) * gj * gj;
                rw[j] = (qkv_real)(wj - c.step * rm[j] / (sqrt(rv[j]) * c.rs + 1e-8));
                ck_assert_msg(w[j] == rw[j] && m[j] == rm[j] && v[j] == rv[j],
                              "%s step %d weight %d: %.9g, expected %.9g", impls[im], t, j,
                              (double)w[j], (double)rw[j]);
            }
        }
    }
    qkv_kernels_use("auto", NULL);
}
END_TEST

/* Σ i² for i = 1..n is n(n+1)(2n+1)/6, exact in double at these sizes. */
START_TEST(test_sum_squares_exact_on_integers)
{
    for (int n = 0; n <= 40; n++) {
        qkv_real x[40];
        for (int i = 0; i < n; i++)
            x[i] = (qkv_real)(i + 1);
        ck_assert(qkv_sum_squares(x, (size_t)n) == n * (n + 1.0) * (2 * n + 1) / 6);
    }
    qkv_real bad[3] = {1, NAN, 2};
    ck_assert(isnan(qkv_sum_squares(bad, 3)));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* saving and loading the state                                             */

static char dir[64], wpath[128], opath[128];

static void state_setup(void)
{
    strcpy(dir, "/tmp/qkv_optst_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
    snprintf(opath, sizeof opath, "%s/opt.safetensors", dir);
}

/* Removes the two files a test may leave, then the directory: a shell's
 * rm -rf would cost more than most tests here; rmdir fails on a
 * temporary file that a save left behind. */
static void state_teardown(void)
{
    remove(wpath);
    remove(opath);
    ck_assert_msg(rmdir(dir) == 0, "%s is not empty after the test", dir);
}

enum { ROWS = 5, IN = 3, OUT = 2, STEPS = 12, WARM = 3 };

/* A small model: PREFIX.weight [IN, hidden] and bias, tanh, then
 * out.weight [hidden, OUT] and bias; an MSE loss. */
typedef struct tiny {
    qkv_params *p;
    qkv_linear a, b;
} tiny;

static tiny tiny_new(uint64_t seed, const char *prefix, int hidden)
{
    tiny m;
    m.p = qkv_params_new(seed, NULL);
    ck_assert_ptr_nonnull(m.p);
    ck_assert_int_eq(qkv_linear_init(&m.a, m.p, prefix, IN, hidden, 1, NULL), QKV_OK);
    ck_assert_int_eq(qkv_linear_init(&m.b, m.p, "out", hidden, OUT, 1, NULL), QKV_OK);
    return m;
}

/* An optimizer of kind over m, with momentum, decay and clipping on. */
static qkv_optim *tiny_optim(tiny *m, qkv_optim_kind kind, qkv_optim_config *c)
{
    *c = qkv_optim_defaults(kind);
    c->lr = kind == QKV_SGD ? 0.05 : 0.02;
    c->momentum = kind == QKV_SGD ? 0.9 : 0;
    c->weight_decay = 0.01;
    c->clip = 0.5;
    qkv_optim *o = qkv_params_optim(m->p, c, NULL);
    ck_assert_ptr_nonnull(o);
    return o;
}

/* Steps from to to (0-based): a batch that depends on the step, the rate
 * from the warm-up and cosine schedule at the optimizer's step count. */
static void tiny_train(tiny *m, qkv_optim *o, const qkv_optim_config *c, int from, int to)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    ck_assert_ptr_nonnull(t);
    for (int s = from; s < to; s++) {
        const double lr = qkv_lr_warmup_cosine(qkv_optim_steps(o), WARM, STEPS, c->lr, c->lr / 10);
        ck_assert_int_eq(qkv_optim_set_lr(o, lr), QKV_OK);
        qkv_params_zero_grad(m->p);
        qkv_tape_reset(t);
        qkv_tensor *x = qkv_tape_tensor(t, 2, (const int[]){ROWS, IN}, 0);
        qkv_tensor *y = qkv_tape_tensor(t, 2, (const int[]){ROWS, OUT}, 0);
        for (int i = 0; i < ROWS * IN; i++)
            x->data[i] = (qkv_real)sin(0.7 * i + 0.3 * s);
        for (int i = 0; i < ROWS * OUT; i++)
            y->data[i] = (qkv_real)cos(1.3 * i - 0.2 * s);
        qkv_tensor *h = qkv_tanh(t, qkv_linear_forward(t, &m->a, x));
        qkv_tensor *loss = qkv_mse(t, qkv_linear_forward(t, &m->b, h), y);
        ck_assert_int_eq(qkv_backward(t, loss), QKV_OK);
        ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    }
    qkv_tape_free(t);
}

/* Whether every weight of a and b has the same bits. */
static int same_weights(const tiny *a, const tiny *b)
{
    for (int i = 0; i < qkv_params_count(a->p); i++) {
        const qkv_tensor *x = qkv_params_at(a->p, i, NULL), *y = qkv_params_at(b->p, i, NULL);
        if (memcmp(x->data, y->data, x->numel * sizeof *x->data) != 0)
            return 0;
    }
    return 1;
}

/* STEPS steps straight, and K steps, a save of the weights and the
 * optimizer state, a load into a fresh model (another seed) and optimizer,
 * and the rest: the same bits. Loading the weights alone does not give
 * them (the check can fail). */
static void check_resume(qkv_optim_kind kind)
{
    enum { K = 5 };
    qkv_optim_config c;
    qkv_error err = qkv_error_none();
    tiny a = tiny_new(1, "h", 4), b = tiny_new(1, "h", 4);
    qkv_optim *oa = tiny_optim(&a, kind, &c), *ob = tiny_optim(&b, kind, &c);
    tiny_train(&a, oa, &c, 0, STEPS);
    tiny_train(&b, ob, &c, 0, K);
    ck_assert_int_eq(qkv_safetensors_save(b.p, wpath, NULL, 0, &err), QKV_OK);
    ck_assert_msg(qkv_optim_save(ob, opath, &err) == QKV_OK, "%s", err.message);

    tiny r = tiny_new(2, "h", 4), w = tiny_new(2, "h", 4);
    qkv_optim *or_ = tiny_optim(&r, kind, &c), *ow = tiny_optim(&w, kind, &c);
    ck_assert_int_eq(qkv_safetensors_load(r.p, wpath, &err), QKV_OK);
    ck_assert_msg(qkv_optim_load(or_, opath, &err) == QKV_OK, "%s", err.message);
    ck_assert_int_eq(qkv_optim_steps(or_), K);
    ck_assert(qkv_optim_lr(or_) == qkv_optim_lr(ob)); /* the rate in use comes back */
    ck_assert(qkv_optim_last_norm(or_) == qkv_optim_last_norm(ob));
    for (int i = 0; i < qkv_params_count(b.p); i++)
        for (int which = 0; which < 2; which++) {
            size_t n, n2;
            const double *m1 = qkv_optim_state(ob, i, which, &n);
            const double *m2 = qkv_optim_state(or_, i, which, &n2);
            ck_assert_uint_eq(n, n2);
            ck_assert((m1 == NULL) == (m2 == NULL));
            ck_assert(m1 == NULL || memcmp(m1, m2, n * sizeof *m1) == 0);
        }
    tiny_train(&r, or_, &c, K, STEPS);
    ck_assert_msg(same_weights(&a, &r), "%s: the resumed run differs from the straight one",
                  qkv_optim_name(kind));

    ck_assert_int_eq(qkv_safetensors_load(w.p, wpath, &err), QKV_OK);
    tiny_train(&w, ow, &c, K, STEPS);
    ck_assert_msg(!same_weights(&a, &w), "%s: the weights alone resume exactly too",
                  qkv_optim_name(kind));
    qkv_optim_free(oa);
    qkv_optim_free(ob);
    qkv_optim_free(or_);
    qkv_optim_free(ow);
    qkv_params_free(a.p);
    qkv_params_free(b.p);
    qkv_params_free(r.p);
    qkv_params_free(w.p);
}

START_TEST(test_sgd_resumes_bit_for_bit)
{
    check_resume(QKV_SGD);
}
END_TEST

START_TEST(test_adam_resumes_bit_for_bit)
{
    check_resume(QKV_ADAM);
}
END_TEST

START_TEST(test_adamw_resumes_bit_for_bit)
{
    check_resume(QKV_ADAMW);
}
END_TEST

/* An optimizer of kind over a tiny model, K = 2 steps taken, saved to opath. */
static tiny saved_state(qkv_optim_kind kind)
{
    qkv_optim_config c;
    qkv_error err = qkv_error_none();
    tiny m = tiny_new(1, "h", 4);
    qkv_optim *o = tiny_optim(&m, kind, &c);
    tiny_train(&m, o, &c, 0, 2);
    ck_assert_msg(qkv_optim_save(o, opath, &err) == QKV_OK, "%s", err.message);
    qkv_optim_free(o);
    return m;
}

/* What a refused load must leave as it was: the step count, the rate,
 * the last norm, the message and every moment (of up to 8 parameters). */
typedef struct snapshot {
    long steps;
    double lr, norm;
    char message[256];
    int count;
    double *state[8][2]; /* (n[i]) parameter i's moments, NULL where it has none */
    size_t n[8];
} snapshot;

/* (Plain ifs here and below, not ck_assert: each of those costs a
 * write of Check's, and a test calls these some twenty times.) */
static snapshot snapshot_take(const qkv_optim *o)
{
    snapshot s;
    s.steps = qkv_optim_steps(o);
    s.lr = qkv_optim_lr(o);
    s.norm = qkv_optim_last_norm(o);
    snprintf(s.message, sizeof s.message, "%s", qkv_optim_error(o));
    for (s.count = 0; s.count < 8 && qkv_optim_state(o, s.count, 0, NULL) != NULL; s.count++)
        for (int w = 0; w < 2; w++) {
            const double *m = qkv_optim_state(o, s.count, w, &s.n[s.count]);
            s.state[s.count][w] = NULL;
            if (m == NULL)
                continue;
            s.state[s.count][w] = malloc(s.n[s.count] * sizeof *m + 1);
            CHECK_EACH(s.state[s.count][w] != NULL, "out of memory");
            memcpy(s.state[s.count][w], m, s.n[s.count] * sizeof *m);
        }
    CHECK_EACH(qkv_optim_state(o, s.count, 0, NULL) == NULL, "over 8 parameters");
    return s;
}

/* o against s, the copies of which this frees. */
static void snapshot_check(const qkv_optim *o, snapshot *s)
{
    CHECK_EACH(qkv_optim_steps(o) == s->steps, "a refused load set the step count to %ld",
               qkv_optim_steps(o));
    CHECK_EACH(qkv_optim_lr(o) == s->lr, "a refused load set the rate to %g", qkv_optim_lr(o));
    CHECK_EACH(qkv_optim_last_norm(o) == s->norm, "a refused load set the last norm to %g",
               qkv_optim_last_norm(o));
    CHECK_EACH(strcmp(qkv_optim_error(o), s->message) == 0, "a refused load set the message: %s",
               qkv_optim_error(o));
    for (int i = 0; i < s->count; i++)
        for (int w = 0; w < 2; w++) {
            size_t n;
            const double *m = qkv_optim_state(o, i, w, &n);
            CHECK_EACH((m == NULL) == (s->state[i][w] == NULL) && n == s->n[i] &&
                           (m == NULL || memcmp(m, s->state[i][w], n * sizeof *m) == 0),
                       "a refused load changed moment %d of parameter %d", w, i);
            free(s->state[i][w]);
        }
}

/* Loads opath into o: refused with status and this message (after the
 * path), and o as it was (steps, rate, norm, message, moments). */
static void expect_refusal(qkv_optim *o, qkv_status status, const char *message)
{
    qkv_error err = qkv_error_none();
    char want[256];
    snprintf(want, sizeof want, message, opath);
    snapshot before = snapshot_take(o);
    const qkv_status s = qkv_optim_load(o, opath, &err);
    CHECK_EACH(s == status && strcmp(err.message, want) == 0,
               "the load gave status %d and \"%s\", not %d and \"%s\"", s, err.message, status,
               want);
    snapshot_check(o, &before);
}

START_TEST(test_load_refuses_another_kind)
{
    tiny m = saved_state(QKV_ADAM);
    qkv_optim_config c;
    qkv_optim *o = tiny_optim(&m, QKV_ADAMW, &c);
    expect_refusal(o, QKV_ERR_FORMAT, "%s holds the state of adam; this optimizer is adamw");
    qkv_optim_free(o);
    o = tiny_optim(&m, QKV_SGD, &c);
    expect_refusal(o, QKV_ERR_FORMAT, "%s holds the state of adam; this optimizer is sgd");
    qkv_optim_free(o);
    qkv_params_free(m.p);
}
END_TEST

START_TEST(test_load_refuses_other_parameters)
{
    qkv_params_free(saved_state(QKV_ADAM).p);
    qkv_optim_config c;
    tiny other = tiny_new(1, "g", 4); /* g.weight, g.bias: other names */
    qkv_optim *o = tiny_optim(&other, QKV_ADAM, &c);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s has no tensor 'g.weight.exp_avg': it holds the state of other parameters");
    qkv_optim_free(o);
    qkv_params_free(other.p);

    tiny wide = tiny_new(1, "h", 5); /* the same names, other shapes */
    o = tiny_optim(&wide, QKV_ADAM, &c);
    expect_refusal(o, QKV_ERR_SHAPE,
                   "%s: tensor 'h.weight.exp_avg' is [3,4]; parameter 'h.weight' is [3,5]");
    qkv_optim_free(o);
    qkv_params_free(wide.p);

    tiny m = tiny_new(1, "h", 4); /* one parameter fewer */
    qkv_tensor **ts = qkv_params_tensors(m.p);
    c = qkv_optim_defaults(QKV_ADAM);
    o = qkv_optim_new(&c, ts, 3, NULL);
    ck_assert_ptr_nonnull(o);
    expect_refusal(o, QKV_ERR_FORMAT, "%s holds the state of 4 parameters; this optimizer has 3");
    qkv_optim_free(o);
    qkv_params_free(m.p);
}
END_TEST

/* Each setting a resume could differ in silently, changed alone. */
START_TEST(test_load_refuses_other_hyperparameters)
{
    static const struct {
        qkv_optim_kind kind;
        const char *message;
    } cases[] = {
        {QKV_SGD,
         "%s was saved with momentum 0.9; this optimizer has 0.8 (a resume needs the same)"},
        {QKV_ADAM, "%s was saved with beta1 0.9; this optimizer has 0.8 (a resume needs the same)"},
        {QKV_ADAM,
         "%s was saved with beta2 0.999; this optimizer has 0.99 (a resume needs the same)"},
        {QKV_ADAM,
         "%s was saved with eps 1e-08; this optimizer has 1e-06 (a resume needs the same)"},
        {QKV_ADAMW,
         "%s was saved with weight decay 0.01; this optimizer has 0.1 (a resume needs the same)"},
        {QKV_ADAMW, "%s was saved with clip 0.5; this optimizer has 1 (a resume needs the same)"},
        /* one ulp apart: the message shows all 17 digits */
        {QKV_ADAM, "%s was saved with beta2 0.999; this optimizer has 0.99900000000000011 (a "
                   "resume needs the same)"},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        tiny m = saved_state(cases[k].kind);
        qkv_optim_config c = qkv_optim_defaults(cases[k].kind);
        c.lr = 0.123; /* the rate is not checked: loading sets it */
        c.momentum = cases[k].kind == QKV_SGD ? 0.8 : 0;
        c.beta1 = k == 1 ? 0.8 : 0.9;
        c.beta2 = k == 2 ? 0.99 : k == 6 ? nextafter(0.999, 1) : 0.999;
        c.eps = k == 3 ? 1e-6 : 1e-8;
        c.weight_decay = k == 4 ? 0.1 : 0.01;
        c.clip = k == 5 ? 1 : 0.5;
        if (k != 0)
            c.momentum = 0;
        qkv_optim *o = qkv_params_optim(m.p, &c, NULL);
        ck_assert_ptr_nonnull(o);
        expect_refusal(o, QKV_ERR_ARG, cases[k].message);
        qkv_optim_free(o);
        qkv_params_free(m.p);
    }
}
END_TEST

START_TEST(test_load_refuses_other_per_parameter_settings)
{
    tiny m = saved_state(QKV_ADAMW);
    qkv_optim_config c;
    qkv_optim *o = tiny_optim(&m, QKV_ADAMW, &c);
    ck_assert_int_eq(qkv_optim_set_decay(o, 1, 1), QKV_OK); /* h.bias: off in the list */
    expect_refusal(o, QKV_ERR_ARG,
                   "%s: parameter 'h.bias' was saved with weight decay off; here it is on");
    qkv_optim_free(o);
    o = tiny_optim(&m, QKV_ADAMW, &c);
    ck_assert_int_eq(qkv_optim_set_lr_scale(o, 2, 0.5), QKV_OK);
    expect_refusal(o, QKV_ERR_ARG,
                   "%s: parameter 'out.weight' was saved with lr scale 1; here it is 0.5");
    qkv_optim_free(o);
    qkv_params_free(m.p);
}
END_TEST

/* A damaged file, a weights file and a missing one are refused. */
START_TEST(test_load_refuses_a_corrupt_file)
{
    tiny m = saved_state(QKV_ADAM);
    qkv_optim_config c;
    qkv_optim *o = tiny_optim(&m, QKV_ADAM, &c);
    FILE *f = fopen(opath, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -3, SEEK_END), 0); /* a bit of the last moment */
    int byte = fgetc(f);
    ck_assert_int_eq(fseek(f, -3, SEEK_END), 0);
    fputc(byte ^ 0x10, f);
    ck_assert_int_eq(fclose(f), 0);
    expect_refusal(o, QKV_ERR_FORMAT, "%s is corrupted: checksum mismatch");

    ck_assert_int_eq(qkv_safetensors_save(m.p, opath, NULL, 0, NULL), QKV_OK);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s holds no optimizer state (no qkv_optim in its metadata; a weights file?)");
    ck_assert_int_eq(remove(opath), 0);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_optim_load(o, opath, &err), QKV_ERR_IO);
    ck_assert_int_eq(qkv_optim_load(NULL, opath, &err), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_load(o, NULL, &err), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_save(NULL, opath, &err), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_save(o, NULL, &err), QKV_ERR_ARG);
    qkv_optim_free(o);
    qkv_params_free(m.p);
}
END_TEST

/* An optimizer of kind over m, one step taken: moments, a step count and
 * a rate (the warm-up's first) that a refused load must keep. */
static qkv_optim *trained(tiny *m, qkv_optim_kind kind)
{
    qkv_optim_config c;
    qkv_optim *o = tiny_optim(m, kind, &c);
    tiny_train(m, o, &c, 0, 1);
    ck_assert_int_eq(qkv_optim_steps(o), 1);
    return o;
}

/* Writes opath: a header (a length, then the n bytes of json) and len
 * bytes of data. */
static void write_file(const char *json, size_t n, const void *data, size_t len)
{
    unsigned char head[8];
    for (int k = 0; k < 8; k++)
        head[k] = (unsigned char)((uint64_t)n >> 8 * k);
    FILE *f = fopen(opath, "wb");
    CHECK_EACH(f != NULL, "cannot write %s", opath);
    const size_t put = fwrite(head, 1, 8, f) + fwrite(json, 1, n, f) + fwrite(data, 1, len, f);
    CHECK_EACH(fclose(f) == 0 && put == 8 + n + len, "cannot write %s", opath);
}

/* A copy of opath (up to 4 KiB) that edit_header edits. */
static char kept[4096];
static size_t kept_len;

static void keep_file(void)
{
    FILE *f = fopen(opath, "rb");
    ck_assert_ptr_nonnull(f);
    kept_len = fread(kept, 1, sizeof kept, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert(kept_len > 8 && kept_len < sizeof kept);
}

/* Writes opath as the kept file with from, which must be in its header
 * once, replaced by to; the data, and so its CRC, stay. */
static void edit_header(const char *from, const char *to)
{
    static char json[sizeof kept + 64];
    size_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | (unsigned char)kept[k];
    CHECK_EACH(n <= kept_len - 8, "the kept file is not safetensors");
    memcpy(json, kept + 8, n);
    json[n] = '\0';
    char *at = strstr(json, from);
    CHECK_EACH(at != NULL && strstr(at + 1, from) == NULL, "'%s' is not in the header once", from);
    const size_t skip = (size_t)(at - json) + strlen(from), tail = n - skip;
    CHECK_EACH(n - strlen(from) + strlen(to) < sizeof json, "'%s' is too long", to);
    memmove(at + strlen(to), json + skip, tail);
    memcpy(at, to, strlen(to));
    write_file(json, n - strlen(from) + strlen(to), kept + 8 + n, kept_len - 8 - n);
}

/* Little-endian F64 and F32 values into b; the bytes written. */
static size_t put_f64(unsigned char *b, double x)
{
    uint64_t u;
    memcpy(&u, &x, 8);
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(u >> 8 * k);
    return 8;
}

static size_t put_f32(unsigned char *b, float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    for (int k = 0; k < 4; k++)
        b[k] = (unsigned char)(u >> 8 * k);
    return 4;
}

/* The metadata of SGD with momentum 0.5 and the other defaults, 7 steps,
 * rate 0.1, last norm 1.5, as qkv_optim_save writes them, less qkv's
 * format and CRC (which a file need not have: the CRC is not checked). */
#define SGD_META                                                                                  \
    "{\"__metadata__\":{\"qkv_optim\":\"sgd\",\"qkv_optim_steps\":\"7\",\"qkv_optim_lr\":"        \
    "\"0.1\",\"qkv_optim_last_norm\":\"1.5\",\"qkv_optim_momentum\":\"0.5\",\"qkv_optim_beta1\":" \
    "\"0.9\",\"qkv_optim_beta2\":\"0.999\",\"qkv_optim_eps\":\"1e-08\",\"qkv_optim_weight_"       \
    "decay\":\"0\",\"qkv_optim_clip\":\"0\"},"

/* One tensor's entry of a header: name, dtype, shape (in brackets), its
 * bytes from begin to end, and "," unless last. */
#define ENTRY(name, dtype, shape, begin, end, sep)                                                 \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #begin "," #end \
    "]}" sep

/* A valid file's three tensors, for one unnamed parameter of two values. */
#define SGD_VELOCITY ENTRY("0.momentum_buffer", "F64", "[2]", 0, 16, ",")
#define SGD_DECAY ENTRY("qkv_optim.decay", "F64", "[1]", 16, 24, ",")
#define SGD_SCALE ENTRY("qkv_optim.lr_scale", "F64", "[1]", 24, 32, "")

/* Writes opath by hand: SGD_META, then these tensors' entries (the json
 * of the header from there on, less the closing brace) and data. */
static void write_sgd(const char *tensors, const unsigned char *data, size_t len)
{
    char json[2048];
    const int n = snprintf(json, sizeof json, "%s%s}", SGD_META, tensors);
    ck_assert(n > 0 && n < (int)sizeof json);
    write_file(json, (size_t)n, data, len);
}

/* The data of a valid file: the velocity (0.5, -1), decay on, scale 1. */
static size_t sgd_data(unsigned char *b)
{
    size_t at = put_f64(b, 0.5);
    at += put_f64(b + at, -1);
    at += put_f64(b + at, 1);
    return at + put_f64(b + at, 1);
}

/* SGD with momentum 0.5 over p, one step taken (velocity (0.25, 0.75)),
 * rate 0.05: the state file of write_sgd is for it. */
static qkv_optim *sgd_target(qkv_tensor **p)
{
    *p = param((const double[]){1, 2}, (const double[]){0.25, 0.75}, 2);
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.momentum = 0.5;
    qkv_optim *o = qkv_optim_new(&c, p, 1, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ck_assert_int_eq(qkv_optim_set_lr(o, 0.05), QKV_OK);
    return o;
}

/* The control for the files below: the one written by hand loads. */
START_TEST(test_a_state_file_written_by_hand_loads)
{
    unsigned char data[64];
    const size_t len = sgd_data(data);
    write_sgd(SGD_VELOCITY SGD_DECAY SGD_SCALE, data, len);
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    qkv_error err = qkv_error_none();
    ck_assert_msg(qkv_optim_load(o, opath, &err) == QKV_OK, "%s", err.message);
    const double *v = qkv_optim_state(o, 0, 0, NULL);
    ck_assert(v[0] == 0.5 && v[1] == -1);
    ck_assert_int_eq(qkv_optim_steps(o), 7);
    ck_assert(qkv_optim_lr(o) == 0.1);
    ck_assert(qkv_optim_last_norm(o) == 1.5);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* Every tensor of the state is F64: F32 (or F16) is refused, whichever it
 * is. */
START_TEST(test_load_refuses_a_state_tensor_of_another_dtype)
{
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    unsigned char data[64];
    size_t at = put_f32(data, 0.5f);
    at += put_f32(data + at, -1);
    at += put_f64(data + at, 1);
    at += put_f64(data + at, 1);
    write_sgd(ENTRY("0.momentum_buffer", "F32", "[2]", 0, 8, ",")
                  ENTRY("qkv_optim.decay", "F64", "[1]", 8, 16, ",")
                      ENTRY("qkv_optim.lr_scale", "F64", "[1]", 16, 24, ""),
              data, at);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s: tensor '0.momentum_buffer' is F32, not the F64 it needs");

    at = put_f64(data, 0.5);
    at += put_f64(data + at, -1);
    at += put_f32(data + at, 1);
    at += put_f64(data + at, 1);
    write_sgd(SGD_VELOCITY ENTRY("qkv_optim.decay", "F32", "[1]", 16, 20, ",")
                  ENTRY("qkv_optim.lr_scale", "F64", "[1]", 20, 28, ""),
              data, at);
    expect_refusal(o, QKV_ERR_FORMAT, "%s: tensor 'qkv_optim.decay' is F32, not the F64 it needs");

    at = put_f64(data, 0.5);
    at += put_f64(data + at, -1);
    at += put_f64(data + at, 1);
    at += put_f32(data + at, 1);
    write_sgd(SGD_VELOCITY SGD_DECAY ENTRY("qkv_optim.lr_scale", "F32", "[1]", 24, 28, ""), data,
              at);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s: tensor 'qkv_optim.lr_scale' is F32, not the F64 it needs");

    /* a half-precision moment is named as what it is */
    at = 0;
    data[at++] = 0x00, data[at++] = 0x38; /* F16 0.5 */
    data[at++] = 0x00, data[at++] = 0xbc; /* F16 -1 */
    at += put_f64(data + at, 1);
    at += put_f64(data + at, 1);
    write_sgd(ENTRY("0.momentum_buffer", "F16", "[2]", 0, 4, ",")
                  ENTRY("qkv_optim.decay", "F64", "[1]", 4, 12, ",")
                      ENTRY("qkv_optim.lr_scale", "F64", "[1]", 12, 20, ""),
              data, at);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s: tensor '0.momentum_buffer' is F16, not the F64 it needs");
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* A moment that is not finite is no state a step could have saved. */
START_TEST(test_load_refuses_a_state_value_that_is_not_finite)
{
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    unsigned char data[64];
    const size_t len = sgd_data(data);
    put_f64(data + 8, NAN);
    write_sgd(SGD_VELOCITY SGD_DECAY SGD_SCALE, data, len);
    expect_refusal(o, QKV_ERR_NUMERIC,
                   "%s: tensor '0.momentum_buffer' value 1 is NaN, not a finite number");
    put_f64(data + 8, -1);
    put_f64(data + 24, INFINITY);
    write_sgd(SGD_VELOCITY SGD_DECAY SGD_SCALE, data, len);
    expect_refusal(o, QKV_ERR_NUMERIC,
                   "%s: tensor 'qkv_optim.lr_scale' value 0 is infinity, not a finite number");
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* A tensor more, or one fewer, than the optimizer's state. */
START_TEST(test_load_refuses_another_number_of_state_tensors)
{
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    unsigned char data[64];
    size_t len = sgd_data(data);
    len += put_f64(data + len, 3);
    write_sgd(SGD_VELOCITY SGD_DECAY ENTRY("qkv_optim.lr_scale", "F64", "[1]", 24, 32, ",")
                  ENTRY("0.exp_avg_sq", "F64", "[1]", 32, 40, ""),
              data, len);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s has tensor '0.exp_avg_sq', which is no state of this optimizer");

    len = sgd_data(data);
    write_sgd(ENTRY("1.momentum_buffer", "F64", "[2]", 0, 16, ",") SGD_DECAY SGD_SCALE, data, len);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s has no tensor '0.momentum_buffer': it holds the state of other parameters");
    write_sgd(SGD_VELOCITY ENTRY("decay", "F64", "[1]", 16, 24, ",") SGD_SCALE, data, len);
    expect_refusal(o, QKV_ERR_FORMAT, "%s has no tensor 'qkv_optim.decay' of one dimension");
    write_sgd(SGD_VELOCITY SGD_DECAY ENTRY("qkv_optim.lr_scale", "F64", "[]", 24, 32, ""), data,
              len);
    expect_refusal(o, QKV_ERR_FORMAT, "%s has no tensor 'qkv_optim.lr_scale' of one dimension");
    len += put_f64(data + len, 1);
    write_sgd(SGD_VELOCITY SGD_DECAY ENTRY("qkv_optim.lr_scale", "F64", "[2]", 24, 40, ""), data,
              len);
    expect_refusal(o, QKV_ERR_FORMAT, "%s holds the state of 2 parameters; this optimizer has 1");
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* Adam's file less one moment of one parameter: its second moment's
 * name changed, so the file has as many tensors, and one that is no
 * state. */
START_TEST(test_load_refuses_a_file_missing_a_moment)
{
    tiny m = saved_state(QKV_ADAM);
    qkv_optim *o = trained(&m, QKV_ADAM);
    keep_file();
    edit_header("\"h.bias.exp_avg_sq\"", "\"h.bias.exp_avg_sz\"");
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s has no tensor 'h.bias.exp_avg_sq': it holds the state of other parameters");
    qkv_optim_free(o);
    qkv_params_free(m.p);
}
END_TEST

/* The parameter's count of values, in another shape, is refused too. */
START_TEST(test_load_refuses_a_state_tensor_of_another_shape)
{
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    unsigned char data[64];
    const size_t len = sgd_data(data);
    write_sgd(ENTRY("0.momentum_buffer", "F64", "[1,2]", 0, 16, ",") SGD_DECAY SGD_SCALE, data,
              len);
    expect_refusal(o, QKV_ERR_SHAPE, "%s: tensor '0.momentum_buffer' is [1,2]; parameter 0 is [2]");
    write_sgd(ENTRY("0.momentum_buffer", "F64", "[2,1,1]", 0, 16, ",") SGD_DECAY SGD_SCALE, data,
              len);
    expect_refusal(o, QKV_ERR_SHAPE,
                   "%s: tensor '0.momentum_buffer' is [2,1,1]; parameter 0 is [2]");
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* Each number of the metadata that a load reads: missing, or not one
 * that qkv_optim_save could have written. */
START_TEST(test_load_refuses_damaged_metadata_numbers)
{
    static const char *const steps[] = {"12x", "-1", "1e400", "", "2.5", "1e16", "nan", "inf"};
    static const struct {
        const char *from, *to, *message;
    } cases[] = {
        {"\"qkv_optim_steps\":", "\"qkv_optim_stepz\":", "%s: no qkv_optim_steps in its metadata"},
        {"\"qkv_optim_lr\":", "\"qkv_optim_lx\":", "%s: no qkv_optim_lr in its metadata"},
        {"\"qkv_optim_lr\":\"0.1\"", "\"qkv_optim_lr\":\"-0.1\"",
         "%s: a damaged qkv_optim_lr in its metadata"},
        {"\"qkv_optim_lr\":\"0.1\"", "\"qkv_optim_lr\":\"0.1x\"",
         "%s: a damaged qkv_optim_lr in its metadata"},
        {"\"qkv_optim_last_norm\":", "\"qkv_optim_last_nor\":",
         "%s: no qkv_optim_last_norm in its metadata"},
        {"\"qkv_optim_last_norm\":\"1.5\"", "\"qkv_optim_last_norm\":\"-1.5\"",
         "%s: a damaged qkv_optim_last_norm in its metadata"},
        {"\"qkv_optim_eps\":", "\"qkv_optim_epz\":", "%s: no qkv_optim_eps in its metadata"},
        {"\"qkv_optim_eps\":\"1e-08\"", "\"qkv_optim_eps\":\"1e-08 \"",
         "%s: a damaged qkv_optim_eps in its metadata"},
        {"\"qkv_optim_beta2\":\"0.999\"", "\"qkv_optim_beta2\":\"1e999\"",
         "%s: a damaged qkv_optim_beta2 in its metadata"},
    };
    unsigned char data[64];
    const size_t len = sgd_data(data);
    write_sgd(SGD_VELOCITY SGD_DECAY SGD_SCALE, data, len);
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    char to[64];
    keep_file();
    for (int k = 0; k < (int)(sizeof steps / sizeof steps[0]); k++) {
        snprintf(to, sizeof to, "\"qkv_optim_steps\":\"%s\"", steps[k]);
        edit_header("\"qkv_optim_steps\":\"7\"", to);
        expect_refusal(o, QKV_ERR_FORMAT, "%s: a damaged qkv_optim_steps in its metadata");
    }
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        edit_header(cases[k].from, cases[k].to);
        expect_refusal(o, QKV_ERR_FORMAT, cases[k].message);
    }
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

START_TEST(test_load_refuses_an_unknown_kind)
{
    unsigned char data[64];
    const size_t len = sgd_data(data);
    write_sgd(SGD_VELOCITY SGD_DECAY SGD_SCALE, data, len);
    qkv_tensor *p;
    qkv_optim *o = sgd_target(&p);
    /* the kind is named, escaped: a control character cannot reach a
     * terminal through the message */
    static const char *const kinds[][2] = {
        {"lion", "lion"}, {"SGD", "SGD"}, {"", ""}, {"a\\u001b[2J", "a\\x1b[2J"}};
    char to[64], want[128];
    keep_file();
    for (int k = 0; k < 4; k++) {
        snprintf(to, sizeof to, "\"qkv_optim\":\"%s\"", kinds[k][0]);
        edit_header("\"qkv_optim\":\"sgd\"", to);
        snprintf(want, sizeof want,
                 "%%s holds the state of an unknown kind '%s' (not sgd, adam or adamw)",
                 kinds[k][1]);
        expect_refusal(o, QKV_ERR_FORMAT, want);
    }
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* SGD's state into Adam and AdamW's into SGD, each optimizer with a state
 * of its own that the refusal keeps. */
START_TEST(test_load_of_another_kind_keeps_the_state)
{
    unsigned char data[64];
    const size_t len = sgd_data(data);
    write_sgd(SGD_VELOCITY SGD_DECAY SGD_SCALE, data, len);
    tiny m = tiny_new(1, "h", 4);
    qkv_optim *o = trained(&m, QKV_ADAM);
    expect_refusal(o, QKV_ERR_FORMAT, "%s holds the state of sgd; this optimizer is adam");
    qkv_optim_free(o);
    qkv_params_free(m.p);
    qkv_tensor *p;
    o = sgd_target(&p);
    keep_file();
    edit_header("\"qkv_optim\":\"sgd\"", "\"qkv_optim\":\"adamw\"");
    expect_refusal(o, QKV_ERR_FORMAT, "%s holds the state of adamw; this optimizer is sgd");
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* Adam's second moment is a decaying sum of squares: a file with one
 * below zero was not saved by a step (its sqrt would make the next
 * update NaN). */
START_TEST(test_load_refuses_a_negative_second_moment)
{
    unsigned char data[64];
    size_t len = put_f64(data, 0.5);
    len += put_f64(data + len, -1);
    len += put_f64(data + len, 0.25);
    len += put_f64(data + len, -0.5);
    len += put_f64(data + len, 1);
    len += put_f64(data + len, 1);
    write_sgd(ENTRY("0.exp_avg", "F64", "[2]", 0, 16, ",")
                  ENTRY("0.exp_avg_sq", "F64", "[2]", 16, 32, ",")
                      ENTRY("qkv_optim.decay", "F64", "[1]", 32, 40, ",")
                          ENTRY("qkv_optim.lr_scale", "F64", "[1]", 40, 48, ""),
              data, len);
    keep_file();
    edit_header("\"qkv_optim\":\"sgd\"", "\"qkv_optim\":\"adam\"");
    qkv_tensor *p = param((const double[]){1, 2}, (const double[]){0.25, 0.75}, 2);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    c.lr = 0.1; /* SGD_META's settings */
    c.momentum = 0.5;
    c.weight_decay = 0;
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    expect_refusal(o, QKV_ERR_FORMAT,
                   "%s: tensor '0.exp_avg_sq' value 1 is -0.5; a second moment is never negative");
    put_f64(data + 24, 0.5); /* the control: the same file with 0.5 loads */
    write_sgd(ENTRY("0.exp_avg", "F64", "[2]", 0, 16, ",")
                  ENTRY("0.exp_avg_sq", "F64", "[2]", 16, 32, ",")
                      ENTRY("qkv_optim.decay", "F64", "[1]", 32, 40, ",")
                          ENTRY("qkv_optim.lr_scale", "F64", "[1]", 40, 48, ""),
              data, len);
    keep_file();
    edit_header("\"qkv_optim\":\"sgd\"", "\"qkv_optim\":\"adam\"");
    qkv_error err = qkv_error_none();
    ck_assert_msg(qkv_optim_load(o, opath, &err) == QKV_OK, "%s", err.message);
    ck_assert(qkv_optim_state(o, 0, 1, NULL)[1] == 0.5);
    qkv_optim_free(o);
    qkv_tensor_free(p);
}
END_TEST

/* Parameters without names are known by their index. */
START_TEST(test_unnamed_parameters_are_saved_by_index)
{
    qkv_tensor *p = param((const double[]){1, 2}, (const double[]){0.5, -1}, 2);
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.momentum = 0.5;
    qkv_optim *o = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    qkv_error err = qkv_error_none();
    ck_assert_msg(qkv_optim_save(o, opath, &err) == QKV_OK, "%s", err.message);
    qkv_st *f = qkv_st_open(opath, &err);
    ck_assert_ptr_nonnull(f);
    const int i = qkv_st_find(f, "0.momentum_buffer");
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(qkv_st_dtype(f, i), "F64");
    ck_assert_str_eq(qkv_st_meta(f, "qkv_optim"), "sgd");
    ck_assert_str_eq(qkv_st_meta(f, "qkv_optim_steps"), "1");
    qkv_st_close(f);
    qkv_optim *o2 = qkv_optim_new(&c, &p, 1, NULL);
    ck_assert_int_eq(qkv_optim_load(o2, opath, &err), QKV_OK);
    const double *v = qkv_optim_state(o2, 0, 0, NULL);
    ck_assert(v[0] == 0.5 && v[1] == -1); /* the velocity after one step: g */
    qkv_optim_free(o);
    qkv_optim_free(o2);
    qkv_tensor_free(p);
}
END_TEST

/* A velocity that overflowed (a failed step) is not saved, nor are two
 * parameters of one name; the file stays as it was (absent here). */
START_TEST(test_save_refuses_what_it_cannot_write)
{
    qkv_tensor *ps[2] = {param((const double[]){1e10}, (const double[]){1}, 1),
                         param((const double[]){1}, (const double[]){1}, 1)};
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.weight_decay = 1e300; /* g + wd·p = 1e310: infinity in double */
    qkv_optim *o = qkv_optim_new(&c, ps, 2, NULL);
    ck_assert_ptr_nonnull(o);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_optim_set_name(o, 0, "w"), QKV_OK);
    ck_assert_int_eq(qkv_optim_set_name(o, 1, "w"), QKV_OK);
    char want[512];
    snprintf(want, sizeof want,
             "optim: parameters 0 and 1 have one name, w.momentum_buffer; %s was left untouched",
             opath);
    ck_assert_int_eq(qkv_optim_save(o, opath, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(qkv_optim_set_name(o, 1, "b"), QKV_OK);
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    snprintf(want, sizeof want,
             "refusing to save %s: w.momentum_buffer[0] = infinity is not finite; %s was left "
             "untouched",
             opath, opath);
    ck_assert_int_eq(qkv_optim_save(o, opath, &err), QKV_ERR_NUMERIC);
    ck_assert_str_eq(err.message, want);
    ck_assert_int_eq(access(opath, F_OK), -1);
    qkv_optim_free(o);
    qkv_tensor_free(ps[0]);
    qkv_tensor_free(ps[1]);
}
END_TEST

Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sgd_with_momentum_by_hand);
    tcase_add_test(tc, test_sgd_weight_decay_by_hand);
    tcase_add_test(tc, test_adam_two_steps_by_hand);
    tcase_add_test(tc, test_adam_eps_is_added_to_the_corrected_root);
    tcase_add_test(tc, test_adamw_decays_weights_apart_from_the_gradient);
    tcase_add_test(tc, test_defaults_are_the_documented_ones);
    tcase_add_test(tc, test_clip_by_global_norm);
    tcase_add_test(tc, test_non_finite_gradient_changes_nothing);
    tcase_add_test(tc, test_a_non_finite_gradient_is_named_by_its_index);
    tcase_add_test(tc, test_messages_say_nan_and_infinity_in_words);
    tcase_add_test(tc, test_an_sgd_update_that_overflows_is_refused);
    tcase_add_test(tc, test_an_adam_update_that_overflows_is_refused_on_every_kernel_set);
#ifdef QKV_DOUBLE
    tcase_add_test(tc, test_a_norm_that_overflows_names_where);
#endif
    tcase_add_test(tc, test_bad_configs_are_refused);
    tcase_add_test(tc, test_an_empty_parameter_list_is_refused);
    tcase_add_test(tc, test_zero_learning_rate_is_a_frozen_step);
    tcase_add_test(tc, test_set_lr_keeps_the_moments_and_the_step_count);
    tcase_add_test(tc, test_adam_kernel_is_the_formula_on_every_path);
    tcase_add_test(tc, test_sum_squares_exact_on_integers);
    suite_add_tcase(s, tc);
    tc = tcase_create("state");
    tcase_add_checked_fixture(tc, state_setup, state_teardown);
    tcase_add_test(tc, test_sgd_resumes_bit_for_bit);
    tcase_add_test(tc, test_adam_resumes_bit_for_bit);
    tcase_add_test(tc, test_adamw_resumes_bit_for_bit);
    tcase_add_test(tc, test_load_refuses_another_kind);
    tcase_add_test(tc, test_load_refuses_other_parameters);
    tcase_add_test(tc, test_load_refuses_other_hyperparameters);
    tcase_add_test(tc, test_load_refuses_other_per_parameter_settings);
    tcase_add_test(tc, test_load_refuses_a_corrupt_file);
    tcase_add_test(tc, test_a_state_file_written_by_hand_loads);
    tcase_add_test(tc, test_load_refuses_a_state_tensor_of_another_dtype);
    tcase_add_test(tc, test_load_refuses_a_state_value_that_is_not_finite);
    tcase_add_test(tc, test_load_refuses_another_number_of_state_tensors);
    tcase_add_test(tc, test_load_refuses_a_file_missing_a_moment);
    tcase_add_test(tc, test_load_refuses_a_state_tensor_of_another_shape);
    tcase_add_test(tc, test_load_refuses_damaged_metadata_numbers);
    tcase_add_test(tc, test_load_refuses_an_unknown_kind);
    tcase_add_test(tc, test_load_of_another_kind_keeps_the_state);
    tcase_add_test(tc, test_load_refuses_a_negative_second_moment);
    tcase_add_test(tc, test_unnamed_parameters_are_saved_by_index);
    tcase_add_test(tc, test_save_refuses_what_it_cannot_write);
    suite_add_tcase(s, tc);
    return s;
}
