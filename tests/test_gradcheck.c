/*
 * test_gradcheck.c - every op's gradient against central finite
 * differences, and the checker itself catching a wrong gradient.
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

START_TEST(test_gradcheck_reports_loss_errors)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_gradcheck_result res;
    ck_assert_int_eq(qkv_gradcheck(t, lying_loss, qkv_nil(), NULL, 0, 0, 0, 0, &res), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_gradcheck(NULL, lying_loss, NULL, NULL, 0, 0, 0, 0, &res), QKV_ERR_ARG);
    qkv_tape_free(t);
}
END_TEST

Suite *gradcheck_suite(void)
{
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("ops");
    tcase_add_loop_test(tc, test_builtin_gradcheck_passes, 0, qkv_gradcheck_builtin_count());
    tcase_add_test(tc, test_gradcheck_catches_a_wrong_gradient);
    tcase_add_test(tc, test_grad_compare_uses_the_floor_and_fails_on_nan);
    tcase_add_test(tc, test_gradcheck_reports_loss_errors);
    suite_add_tcase(s, tc);
    return s;
}
