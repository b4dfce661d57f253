/*
 * test_gradcheck.c - every op's gradient against central finite
 * differences, also with one tensor as several of an op's inputs, and the
 * checker itself catching a wrong gradient.
 */
#include <string.h>

#include "tests.h"

START_TEST(test_builtin_gradcheck_passes)
{
    /* _i is the loop index Check passes to tcase_add_loop_test */
    const char *name = NULL;
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck_builtin(_i, &name, &res), QKV_OK);
    ck_assert_uint_gt(res.checked, 0);
    const double tol = qkv_gradcheck_builtin_tol(_i);
    ck_assert_msg(res.passed, "%s: max rel err %.3e > tol %.1e (max abs %.3e)", name, res.max_rel,
                  tol, res.max_abs);
    /* the tolerance it reports is the one it was judged at: the default,
     * or in float32 the layers' 5e-2 (src/layers/checks.c), never looser */
    ck_assert(res.max_rel <= tol);
    if (sizeof(qkv_real) == sizeof(double) || strncmp(name, "layer: ", 7) != 0)
        ck_assert(tol == qkv_gradcheck_default_tol());
    else
        ck_assert(tol == qkv_gradcheck_default_tol() || tol == 5e-2);
    ck_assert(qkv_gradcheck_builtin_tol(-1) == 0);
    ck_assert(qkv_gradcheck_builtin_tol(qkv_gradcheck_builtin_count()) == 0);
}
END_TEST

/* A loss whose recorded graph computes Σx² but whose no-grad evaluation
 * computes Σ2x²: the tape says 2x, finite differences say 4x. */
static qkv_tensor *lying_loss(qkv_tape *t, void *ctx)
{
    qkv_tensor *x = ctx;
    qkv_tensor *sq = qkv_sum(t, qkv_mul(t, x, x));
    return qkv_tape_grad_enabled(t) ? sq : qkv_scale(t, sq, 2);
}

/* The aliasing check: one tensor h passed as two or three inputs of an op,
 * or its output used twice. h is x itself (a parameter, whose gradient
 * every op adds into) or a tape tensor made from it (whose gradient the
 * ops that claim gradients overwrite first, once, then add into), so a
 * backward that wrote one input's share over another's, or cleared or
 * claimed a gradient twice, shows here. */
typedef struct alias_ctx {
    qkv_tensor *x; /* [4,4], |x| >= 0.3 (div) */
    int op, tape;
} alias_ctx;

/* Σ y⊙c for a fixed c, plus Σ y⊙y: y used twice. */
static qkv_tensor *alias_read(qkv_tape *t, qkv_tensor *y)
{
    const int was = qkv_tape_set_grad(t, 0);
    qkv_tensor *c = qkv_tape_tensor(t, y->ndim, y->shape, 0);
    qkv_tape_set_grad(t, was);
    if (qkv_tensor_is_nil(c))
        return c;
    for (size_t i = 0; i < c->numel; i++)
        c->data[i] = (qkv_real)(0.1 + sin(0.7 * (double)i + 0.3));
    return qkv_add(t, qkv_sum(t, qkv_mul(t, y, c)), qkv_sum(t, qkv_mul(t, y, y)));
}

static const char *const alias_names[] = {
    "sub(h, h) + div(h, h)",
    "matmul(h, h)",
    "matmul_nt(h, h)",
    "affine(h, h, NULL)",
    "concat {h, h, h}",
    "attention(h, h, h), weights too",
    "attention_online(h, h, h), causal",
    "embed_attention(h, h, h)",
    "layer_norm(h, g, g)",
    "stack {h, h, h}",
    "gelu(h), used twice",
};
#define N_ALIAS ((int)(sizeof alias_names / sizeof *alias_names))

static qkv_tensor *alias_loss(qkv_tape *t, void *p)
{
    const alias_ctx *c = p;
    static const int ids[6] = {0, 2, 2, 3, 1, 0};
    qkv_tensor *h = c->tape ? qkv_scale(t, c->x, 1) : c->x;
    qkv_tensor *h3 = qkv_reshape(t, h, 3, (const int[]){2, 4, 2});
    qkv_attention_parts parts;
    switch (c->op) {
    case 0: return qkv_add(t, alias_read(t, qkv_sub(t, h, h)), alias_read(t, qkv_div(t, h, h)));
    case 1: return alias_read(t, qkv_matmul(t, h, h));
    case 2: return alias_read(t, qkv_matmul_nt(t, h, h));
    case 3: return alias_read(t, qkv_affine(t, h, h, NULL));
    case 4: return alias_read(t, qkv_concat(t, 3, (qkv_tensor *const[]){h, h, h}, 1));
    case 5: {
        qkv_tensor *o = qkv_attention(t, h3, h3, h3, NULL, 0.7, &parts);
        return qkv_add(t, alias_read(t, o), alias_read(t, parts.attn));
    }
    case 6: return alias_read(t, qkv_attention_online(t, h3, h3, h3, NULL, 0.7, 1));
    case 7: return alias_read(t, qkv_embed_attention(t, h, h, h, ids, 2, 3, NULL, 0.6, NULL));
    case 8: {
        qkv_tensor *g = qkv_reshape(t, qkv_slice(t, h, 0, 1, 1), 1, (const int[]){4});
        return alias_read(t, qkv_layer_norm(t, h, g, g, 1e-5));
    }
    case 9: return alias_read(t, qkv_stack(t, 3, (qkv_tensor *const[]){h, h, h}, 1));
    default: return alias_read(t, qkv_gelu(t, h));
    }
}

START_TEST(test_aliased_inputs_and_reused_outputs_pass_gradcheck)
{
    /* _i: the op, and whether h is the parameter or a tape tensor */
    qkv_tape *t = qkv_tape_new(0, NULL);
    alias_ctx c = {tensor_of(2, (const int[]){4, 4}, NULL, 1), _i / 2, _i % 2};
    for (int i = 0; i < 16; i++)
        c.x->data[i] = (qkv_real)((i % 3 ? 1 : -1) * (0.3 + 0.6 * fabs(sin(1.3 * i + 0.2))));
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck(t, alias_loss, &c, &c.x, 1, 0, 0, 0, &res), QKV_OK);
    ck_assert_msg(res.passed, "%s, h %s: max rel err %.3e (max abs %.3e)", alias_names[c.op],
                  c.tape ? "on the tape" : "the parameter", res.max_rel, res.max_abs);
    qkv_tape_free(t);
    qkv_tensor_free(c.x);
}
END_TEST

START_TEST(test_gradcheck_catches_a_wrong_gradient)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){0.5, -1, 2}, 1);
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck(t, lying_loss, x, &x, 1, 0, 0, 0, &res), QKV_OK);
    ck_assert(!res.passed);
    ASSERT_NEAR(res.max_rel, 0.5, 1e-2); /* |2x - 4x| / |4x| */
    ck_assert_uint_eq(res.checked, 3);
    /* values are restored; the analytic gradient is left in grad */
    ASSERT_NEAR(x->data[1], -1, 0);
    ASSERT_NEAR(x->grad[2], 4, 0);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* Rows of a small spread (0.02, as embeddings start) through a layer
 * norm: its curvature scales as 1/spread², so the truncation error of a
 * difference at the default float32 step (half the spread) is about
 * (h/spread)² of the gradient. The check must re-measure such entries at
 * a smaller step rather than fail a correct gradient, and must still fail
 * one that is 10% off. */
typedef struct narrow_ctx {
    qkv_tensor *x; /* [4,8] */
    double lie;    /* the no-grad loss is scaled by this */
} narrow_ctx;

static qkv_tensor *narrow_loss(qkv_tape *t, void *ctx)
{
    narrow_ctx *c = ctx;
    const int was = qkv_tape_set_grad(t, 0);
    qkv_tensor *w = qkv_tape_tensor(t, 2, (const int[]){4, 8}, 0);
    qkv_tape_set_grad(t, was);
    if (qkv_tensor_is_nil(w))
        return w;
    for (int i = 0; i < 32; i++)
        w->data[i] = (qkv_real)cos(0.7 * i + 0.3);
    qkv_tensor *y = qkv_layer_norm(t, c->x, NULL, NULL, 1e-5);
    qkv_tensor *l = qkv_sum(t, qkv_mul(t, qkv_mul(t, y, y), w));
    return qkv_tape_grad_enabled(t) ? l : qkv_scale(t, l, c->lie);
}

START_TEST(test_gradcheck_remeasures_a_narrow_layer_norm)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    narrow_ctx c = {tensor_of(2, (const int[]){4, 8}, NULL, 1), 1};
    for (int i = 0; i < 32; i++)
        c.x->data[i] = (qkv_real)(0.02 * sin(1.9 * i + 0.4));
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck(t, narrow_loss, &c, &c.x, 1, 0, 0, 0, &res), QKV_OK);
    ck_assert_msg(res.passed, "max rel err %.3e (max abs %.3e)", res.max_rel, res.max_abs);
    ck_assert_uint_eq(res.checked, 32);
    c.lie = 1.1; /* finite differences 10% above the tape's gradient */
    ck_assert_int_eq(qkv_gradcheck(t, narrow_loss, &c, &c.x, 1, 0, 0, 0, &res), QKV_OK);
    ck_assert_msg(!res.passed, "a gradient 10%% off passed: max rel err %.3e", res.max_rel);
    qkv_tape_free(t);
    qkv_tensor_free(c.x);
}
END_TEST

/* A loss C + Σ w⊙x with |w| of 0.005 to 0.02 (near the floor) whose
 * finite differences in one entry are 10% above its gradient: the
 * rounding noise of a loss of 30 or 100 at step/9 (ε·|L|·9/h) is as
 * large as that error, so judging each entry by whichever of its three
 * estimates lies nearest the gradient let some such cases pass (8 and 20
 * in 300, measured). The estimate must be chosen without looking at the
 * gradient; then none passes. */
typedef struct offset_ctx {
    qkv_tensor *x; /* [16] */
    double w[16], lie[16], c;
} offset_ctx;

static qkv_tensor *offset_loss(qkv_tape *t, void *ctx)
{
    offset_ctx *o = ctx;
    const int was = qkv_tape_set_grad(t, 0);
    qkv_tensor *w = qkv_tape_tensor(t, 1, (const int[]){16}, 0);
    qkv_tensor *b = qkv_tape_tensor(t, 1, (const int[]){16}, 0);
    qkv_tape_set_grad(t, was);
    if (qkv_tensor_is_nil(w) || qkv_tensor_is_nil(b))
        return qkv_nil();
    for (int i = 0; i < 16; i++) {
        w->data[i] = (qkv_real)(o->w[i] * (was ? 1 : o->lie[i]));
        b->data[i] = (qkv_real)(o->c / 16);
    }
    return qkv_sum(t, qkv_add(t, qkv_mul(t, o->x, w), b));
}

START_TEST(test_gradcheck_never_picks_the_estimate_nearest_a_wrong_gradient)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    offset_ctx o = {.x = tensor_of(1, (const int[]){16}, NULL, 1)};
    qkv_rng g;
    qkv_rng_seed(&g, 1234);
    int passed = 0;
    for (int k = 0; k < 600; k++) {
        o.c = k % 2 ? 100 : 30;
        for (int i = 0; i < 16; i++) {
            o.x->data[i] = (qkv_real)(2 * qkv_rng_random(&g) - 1);
            o.w[i] = (qkv_rng_random(&g) < 0.5 ? -1 : 1) * (0.005 + 0.015 * qkv_rng_random(&g));
            o.lie[i] = i == 3 ? 1.1 : 1;
        }
        qkv_gradcheck_result res;
        ck_assert_int_eq(qkv_gradcheck(t, offset_loss, &o, &o.x, 1, 0, 0, 0, &res), QKV_OK);
        passed += res.passed;
    }
    ck_assert_msg(passed == 0, "%d of 600 checks passed a gradient 10%% off", passed);
    qkv_tape_free(t);
    qkv_tensor_free(o.x);
}
END_TEST

/* The tape's gradient setting is the caller's again afterwards: a check
 * run on a tape in evaluation (qkv_tape_set_grad(t, 0)) left it
 * recording. */
START_TEST(test_gradcheck_restores_the_grad_setting)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){0.5, -1, 2}, 1);
    qkv_gradcheck_result res;
    for (int on = 0; on < 2; on++) {
        qkv_tape_set_grad(t, on);
        ck_assert_int_eq(qkv_gradcheck(t, lying_loss, x, &x, 1, 0, 0, 0, &res), QKV_OK);
        ck_assert_int_eq(qkv_tape_grad_enabled(t), on);
    }
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

START_TEST(test_grad_compare_uses_the_floor_and_fails_on_nan)
{
    qkv_gradcheck_result res = {0};
    const qkv_real a[3] = {1.0f, 0.0f, 100.0f};
    const double n[3] = {1.001, 1e-4, 101.0};
    qkv_grad_compare(a, n, 3, 0.01, 0.02, &res);
    /* entries: 0.001/1.001, 1e-4/0.01 (floor), 1/101 */
    ASSERT_NEAR(res.max_rel, 1e-2, 1e-9);
    ASSERT_NEAR(res.max_abs, 1.0, 0);
    ck_assert(res.passed);
    const double bad[1] = {NAN};
    qkv_grad_compare(a, bad, 1, 0.01, 0.02, &res);
    ck_assert(!res.passed);
}
END_TEST

/* A NULL result or array was read through. gradcheck.h: a NULL res does
 * nothing; a NULL array compares nothing and fails, as a NaN does, and
 * stays failed when good entries are folded in after it. */
START_TEST(test_grad_compare_takes_null_arguments)
{
    const qkv_real a[1] = {1.0f};
    const double n[1] = {1.0};
    qkv_grad_compare(a, n, 1, 0.01, 0.02, NULL);
    for (int which = 0; which < 2; which++) {
        qkv_gradcheck_result res = {0};
        qkv_grad_compare(which ? a : NULL, which ? NULL : n, 1, 0.01, 0.02, &res);
        ck_assert(!res.passed);
        ck_assert(res.max_abs == INFINITY && res.max_rel == INFINITY);
        ck_assert_uint_eq(res.checked, 0);
        qkv_grad_compare(a, n, 1, 0.01, 0.02, &res);
        ck_assert(!res.passed);
        ck_assert_uint_eq(res.checked, 1);
    }
    /* nothing to compare needs no arrays */
    qkv_gradcheck_result res = {0};
    qkv_grad_compare(NULL, NULL, 0, 0.01, 0.02, &res);
    ck_assert(res.passed && res.checked == 0);
}
END_TEST

START_TEST(test_gradcheck_reports_loss_errors)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck(t, lying_loss, qkv_nil(), NULL, 0, 0, 0, 0, &res), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_gradcheck(NULL, lying_loss, NULL, NULL, 0, 0, 0, 0, &res), QKV_ERR_ARG);
    qkv_tape_free(t);
}
END_TEST

/* A check with no parameters compared nothing, so it may not pass; a step,
 * floor or tolerance below 0 or not finite is refused, naming the knob
 * (each tape fails once: errors are sticky). */
START_TEST(test_gradcheck_refuses_bad_arguments)
{
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){0.5, -1, 2}, 1);
    qkv_gradcheck_result res;
    static const struct {
        int n;
        double step, floor, tol;
        const char *says;
    } bad[] = {
        {0, 0, 0, 0, "gradcheck: no parameters to check"},
        {1, -1e-3, 0, 0, "gradcheck: the step -0.001 is not a finite number >= 0"},
        {1, 0, -1, 0, "gradcheck: the floor -1 is not a finite number >= 0"},
        {1, 0, 0, NAN, "gradcheck: the tolerance NaN is not a finite number >= 0"},
        {1, INFINITY, 0, 0, "gradcheck: the step infinity is not a finite number >= 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_tape *t = qkv_tape_new(0, NULL);
        ck_assert_int_eq(qkv_gradcheck(t, lying_loss, x, &x, bad[i].n, bad[i].step, bad[i].floor,
                                       bad[i].tol, &res),
                         QKV_ERR_ARG);
        ck_assert_msg(strncmp(qkv_tape_error(t), bad[i].says, strlen(bad[i].says)) == 0,
                      "case %zu: %s", i, qkv_tape_error(t));
        qkv_tape_free(t);
    }
    /* a parameter made on the tape: the check's first reset took it back,
     * and the loss then failed on a "tensor kept across reset" it never
     * kept */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *on_tape = qkv_tanh(t, x);
    ck_assert_int_eq(qkv_gradcheck(t, lying_loss, on_tape, &on_tape, 1, 0, 0, 0, &res),
                     QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "gradcheck: parameter 0 was made on a tape; make it with "
                                        "qkv_tensor_new(..., 1, ...)");
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* A check starts from a clean tape, as a valid one runs on it: a bad
 * argument after an earlier failure on the same tape (an op's shape
 * error, a check that failed) is refused with QKV_ERR_ARG and its own
 * message, not with the earlier status and message. */
START_TEST(test_gradcheck_refuses_bad_arguments_after_an_earlier_error)
{
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){0.5, -1, 2}, 1);
    qkv_tensor *y = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 0);
    qkv_tensor *no_grad = tensor_of(1, (const int[]){3}, (const double[]){1, 2, 3}, 0);
    qkv_gradcheck_result res;
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_add(t, x, y);
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_int_eq(qkv_gradcheck(t, lying_loss, x, &x, 0, 0, 0, 0, &res), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "gradcheck: no parameters to check");
    ck_assert_int_eq(qkv_gradcheck(t, lying_loss, x, &no_grad, 1, 0, 0, 0, &res), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "gradcheck: parameter 0 is nil or has no gradient buffer");
    qkv_tape_free(t);
    qkv_tensor_free(x);
    qkv_tensor_free(y);
    qkv_tensor_free(no_grad);
}
END_TEST

Suite *gradcheck_suite(void)
{
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("ops");
    tcase_add_loop_test(tc, test_builtin_gradcheck_passes, 0, qkv_gradcheck_builtin_count());
    tcase_add_loop_test(tc, test_aliased_inputs_and_reused_outputs_pass_gradcheck, 0, 2 * N_ALIAS);
    tcase_add_test(tc, test_gradcheck_catches_a_wrong_gradient);
    tcase_add_test(tc, test_gradcheck_remeasures_a_narrow_layer_norm);
    tcase_add_test(tc, test_gradcheck_never_picks_the_estimate_nearest_a_wrong_gradient);
    tcase_add_test(tc, test_gradcheck_restores_the_grad_setting);
    tcase_add_test(tc, test_grad_compare_uses_the_floor_and_fails_on_nan);
    tcase_add_test(tc, test_grad_compare_takes_null_arguments);
    tcase_add_test(tc, test_gradcheck_reports_loss_errors);
    tcase_add_test(tc, test_gradcheck_refuses_bad_arguments);
    tcase_add_test(tc, test_gradcheck_refuses_bad_arguments_after_an_earlier_error);
    suite_add_tcase(s, tc);
    return s;
}
