/*
 * test_tape.c - tape semantics: accumulation, reset, no-grad, parameters
 * outside the tape, and sticky errors.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tests.h"

START_TEST(test_grad_accumulates_when_a_tensor_is_used_twice)
{
    /* L = Σ x⊙x + Σ (x + x) → dL/dx = 2x + 2 */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){1, -2, 0.5}, 1);
    qkv_tensor *l = qkv_add(t, qkv_sum(t, qkv_mul(t, x, x)), qkv_sum(t, qkv_add(t, x, x)));
    ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
    ASSERT_NEAR(l->data[0], 1 + 4 + 0.25 + 2 * (1 - 2 + 0.5), 1e-6);
    ASSERT_NEAR(x->grad[0], 4, 0);
    ASSERT_NEAR(x->grad[1], -2, 0);
    ASSERT_NEAR(x->grad[2], 3, 0);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* Gradients on the tape are zero-filled only when backward first needs
 * them. Each step reuses the arena that the step before left full of
 * gradients, so a gradient not cleared before its first sum would show. */
START_TEST(test_lazy_gradients_start_from_zero_on_a_reused_arena)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){4}, (const double[]){1, 2, 3, 4}, 1);
    for (int step = 0; step < 3; step++) {
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(x);
        /* b feeds two nodes: sum(b) recorded first, then sum over a view
         * of b, so backward reaches b through the view first; the view
         * shares b's buffer, and clearing it at b would lose that sum */
        qkv_tensor *b = qkv_scale(t, x, 2);
        qkv_tensor *dead = qkv_exp(t, b); /* an output nobody uses */
        qkv_tensor *lb = qkv_sum(t, b);
        qkv_tensor *v = qkv_reshape(t, b, 2, (const int[]){2, 2});
        qkv_tensor *lv = qkv_scale(t, qkv_sum(t, v), 3);
        qkv_tensor *loose = qkv_tape_tensor(t, 1, (const int[]){5}, 1); /* in no node */
        ck_assert_ptr_nonnull(dead->grad);
        ck_assert_ptr_nonnull(loose->grad);
        ck_assert_int_eq(qkv_backward(t, qkv_add(t, lb, lv)), QKV_OK);
        for (int i = 0; i < 4; i++) { /* d/dx (2Σx + 3·2Σx) = 8; d/db = 4 */
            ASSERT_NEAR(x->grad[i], 8, 0);
            ASSERT_NEAR(b->grad[i], 4, 0);
            ASSERT_NEAR(v->grad[i], 4, 0);
            ASSERT_NEAR(dead->grad[i], 0, 0);
        }
        for (int i = 0; i < 5; i++)
            ASSERT_NEAR(loose->grad[i], 0, 0);
        /* leave garbage for the next step to find */
        for (int i = 0; i < 4; i++)
            b->grad[i] = dead->grad[i] = (qkv_real)(100 + i);
        for (int i = 0; i < 5; i++)
            loose->grad[i] = -7;
    }
    /* after backward, a new tensor's gradient is zero at once (a short
     * recording, so that it lands on memory the steps above used) */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, x)), QKV_OK);
    qkv_tensor *late = qkv_tape_tensor(t, 1, (const int[]){3}, 1);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(late->grad[i], 0, 0);
    /* and qkv_tensor_grad_ready clears one before backward */
    qkv_tape_reset(t);
    qkv_tensor *early = qkv_tape_tensor(t, 1, (const int[]){3}, 1);
    qkv_tensor_grad_ready(early);
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(early->grad[i], 0, 0);
    qkv_tensor_grad_ready(x); /* a heap tensor: left alone */
    ASSERT_NEAR(x->grad[0], 9, 0);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* Ops that claim their inputs' gradients (add, sub, permute, affine)
 * overwrite one that no node has filled yet and add into it otherwise:
 * b feeds all of them, and add feeds it twice, in both recording orders,
 * on an arena that each step leaves full of garbage. */
START_TEST(test_claimed_gradients_overwrite_once_then_add)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 1);
    qkv_tensor *c = tensor_of(2, (const int[]){3, 2}, (const double[]){1, 2, 3, 4, 5, 6}, 0);
    qkv_tensor *w = tensor_of(2, (const int[]){3, 2}, (const double[]){1, 1, 1, 1, 1, 1}, 1);
    for (int step = 0; step < 6; step++) {
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(x);
        qkv_tensor *b = qkv_scale(t, x, 1), *term[4];
        for (int k = 0; k < 4; k++) {
            switch (step % 2 ? 3 - k : k) {
            case 0: term[k] = qkv_sum(t, qkv_add(t, b, b)); break; /* d/db: 2 */
            case 1:                                                /* d/db[i,j]: c[j,i] */
                term[k] = qkv_sum(t, qkv_mul(t, qkv_permute(t, b, (const int[]){1, 0}), c));
                break;
            case 2: term[k] = qkv_sum(t, qkv_affine(t, b, w, NULL)); break; /* Σ_n w[j,n] = 2 */
            default: term[k] = qkv_scale(t, qkv_sum(t, qkv_sub(t, x, b)), 5); break; /* -5 */
            }
        }
        qkv_tensor *l = qkv_add(t, qkv_add(t, term[0], term[1]), qkv_add(t, term[2], term[3]));
        ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
                /* dL/db = 2 + c[j,i] + 2 - 5; dL/dx adds the direct +5 */
                double db = 2 + c->data[j * 2 + i] + 2 - 5;
                ASSERT_NEAR(b->grad[i * 3 + j], db, 0);
                ASSERT_NEAR(x->grad[i * 3 + j], db + 5, 0);
            }
        for (int i = 0; i < 6; i++)
            b->grad[i] = (qkv_real)(1000 + i);
    }
    qkv_tape_free(t);
    qkv_tensor_free(x);
    qkv_tensor_free(c);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_params_keep_values_and_grads_across_reset)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){3, 4}, 1);
    for (int step = 0; step < 2; step++) {
        qkv_tape_reset(t);
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_scale(t, w, 2))), QKV_OK);
    }
    /* two steps without zeroing: gradients add up, values untouched */
    ASSERT_NEAR(w->grad[0], 4, 0);
    ASSERT_NEAR(w->data[1], 4, 0);
    qkv_tensor_zero_grad(w);
    ASSERT_NEAR(w->grad[0], 0, 0);
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_reset_forgets_nodes_and_keeps_memory)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(2, (const int[]){8, 8}, NULL, 1);
    qkv_sum(t, qkv_matmul(t, w, w));
    ck_assert_uint_eq(qkv_tape_nodes(t), 2);
    size_t used = qkv_tape_bytes_used(t);
    ck_assert_uint_gt(used, 0);
    qkv_tape_reset(t);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    ck_assert_uint_eq(qkv_tape_bytes_used(t), 0);
    qkv_sum(t, qkv_matmul(t, w, w));
    ck_assert_uint_eq(qkv_tape_bytes_used(t), used);
    ck_assert_uint_eq(qkv_tape_high_water(t), used);
    /* the mark stays where the most was in use */
    qkv_tape_reset(t);
    ck_assert_uint_eq(qkv_tape_bytes_used(t), 0);
    ck_assert_uint_eq(qkv_tape_high_water(t), used);
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_small_arena_grows_then_steps_allocate_nothing)
{
    qkv_tape *t = qkv_tape_new(256, NULL);
    qkv_tensor *w = tensor_of(2, (const int[]){32, 32}, NULL, 1);
    size_t after_first = 0;
    for (int step = 0; step < 4; step++) {
        qkv_tape_reset(t);
        qkv_tensor *y = qkv_matmul(t, w, w);
        y = qkv_matmul(t, y, w);
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
        if (step == 0)
            after_first = qkv_alloc_count();
    }
    ck_assert_uint_eq(qkv_alloc_count(), after_first);
    ck_assert_uint_ge(qkv_tape_high_water(t), 4 * 32 * 32 * sizeof(qkv_real));
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_no_grad_records_nothing)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1);
    ck_assert_int_eq(qkv_tape_set_grad(t, 0), 1);
    qkv_tensor *y = qkv_sum(t, qkv_matmul(t, w, w));
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    ck_assert_ptr_null(y->grad);
    ASSERT_NEAR(y->data[0], 7 + 10 + 15 + 22, 0);
    ck_assert_int_eq(qkv_backward(t, y), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "qkv_tape_set_grad"));
    /* a reset keeps the setting, as tape.h says: an evaluation loop sets
     * it once, and a training step after it must set it back */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_tape_grad_enabled(t), 0);
    ck_assert_ptr_null(qkv_sum(t, w)->grad);
    ck_assert_int_eq(qkv_tape_set_grad(t, 1), 0);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_tape_grad_enabled(t), 1);
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_constants_get_no_gradient)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *c = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 0);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){5, 6}, 1);
    qkv_tensor *y = qkv_mul(t, c, c);
    ck_assert_ptr_null(y->grad);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, w, c))), QKV_OK);
    ASSERT_NEAR(w->grad[1], 2, 0);
    qkv_tape_free(t);
    qkv_tensor_free(c);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_backward_twice_is_an_error)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, NULL, 1);
    qkv_tensor *l = qkv_sum(t, w);
    ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
    ck_assert_int_eq(qkv_backward(t, l), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "already run"));
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_backward_needs_a_scalar)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, NULL, 1);
    ck_assert_int_eq(qkv_backward(t, qkv_scale(t, w, 2)), QKV_ERR_ARG);
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

START_TEST(test_shape_mismatch_is_sticky_and_named)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *a = tensor_of(2, (const int[]){4, 8}, NULL, 1);
    qkv_tensor *b = tensor_of(2, (const int[]){6, 6}, NULL, 1);
    qkv_tensor *bad = qkv_matmul(t, a, b);
    ck_assert(bad == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_str_eq(qkv_tape_error(t), "matmul: [4,8] x [6,6]: inner dimensions differ");
    /* later calls, even valid ones, do nothing and keep the first error */
    size_t nodes = qkv_tape_nodes(t);
    ck_assert(qkv_softmax(t, a) == qkv_nil());
    ck_assert(qkv_transpose(t, qkv_scale(t, bad, 2)) == qkv_nil());
    ck_assert_uint_eq(qkv_tape_nodes(t), nodes);
    ck_assert_str_eq(qkv_tape_error(t), "matmul: [4,8] x [6,6]: inner dimensions differ");
    ck_assert_int_eq(qkv_backward(t, bad), QKV_ERR_SHAPE);
    /* a custom op that fails without checking the status first (as
     * examples/custom_op.c does) neither replaces the error nor its code */
    ck_assert_int_eq(qkv_tape_fail(t, QKV_ERR_ARG, "custom: a later error"), QKV_ERR_SHAPE);
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_str_eq(qkv_tape_error(t), "matmul: [4,8] x [6,6]: inner dimensions differ");
    /* reset clears it */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert_str_eq(qkv_tape_error(t), "");
    ck_assert(!qkv_tensor_is_nil(qkv_matmul(t, a, qkv_transpose(t, a))));
    qkv_tape_free(t);
    qkv_tensor_free(a);
    qkv_tensor_free(b);
}
END_TEST

START_TEST(test_nil_input_is_an_error_not_a_crash)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    ck_assert(qkv_relu(t, NULL) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "relu: input is nil"));
    ck_assert(qkv_relu(NULL, qkv_nil()) == qkv_nil());
    qkv_tape_free(t);
    qkv_tape_free(NULL);
}
END_TEST

START_TEST(test_tape_tensor_and_alloc)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *m = qkv_tape_tensor(t, 2, (const int[]){3, 3}, 0);
    ck_assert(!qkv_tensor_is_nil(m));
    ck_assert_uint_eq((uintptr_t)m->data % 64, 0);
    /* scratch is handed out in whole 64-byte lines: a request of exactly
     * 64 bytes takes one line, of 1 or 65 bytes one or two */
    qkv_tape *u = qkv_tape_new(0, NULL);
    ck_assert_ptr_nonnull(qkv_tape_alloc(u, 64));
    ck_assert_uint_eq(qkv_tape_bytes_used(u), 64);
    ck_assert_ptr_nonnull(qkv_tape_alloc(u, 1));
    ck_assert_uint_eq(qkv_tape_bytes_used(u), 128);
    ck_assert_ptr_nonnull(qkv_tape_alloc(u, 65));
    ck_assert_uint_eq(qkv_tape_bytes_used(u), 256);
    qkv_tape_free(u);
    ck_assert(qkv_tape_tensor(t, 2, (const int[]){3, -1}, 0) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert(qkv_tape_tensor(t, 1, (const int[]){2}, 0) == qkv_nil()); /* sticky */
    /* each refusal says what is wrong with the shape: the message was
     * "tensor: invalid shape (ndim 2)" for all of them */
    EXPECT_ERROR_ON(t, qkv_tape_tensor(t, 2, (const int[]){4, 0}, 0), QKV_ERR_ARG,
                    "tensor: the shape [4,0] has a dimension below 1");
    EXPECT_ERROR_ON(t, qkv_tape_tensor(t, 5, (const int[]){1, 1, 1, 1, 1}, 0), QKV_ERR_ARG,
                    "tensor: a shape needs 0 to 4 dimensions, not 5");
    EXPECT_ERROR_ON(t, qkv_tape_tensor(t, 2, NULL, 0), QKV_ERR_ARG,
                    "tensor: no shape (NULL) for 2 dimensions");
    EXPECT_ERROR_ON(t, qkv_tape_tensor(t, 3, (const int[]){1 << 30, 1 << 30, 1 << 30}, 0),
                    QKV_ERR_NOMEM,
                    "tensor: the size of the shape [1073741824,1073741824,"
                    "1073741824] overflows");
    qkv_tape_free(t);
}
END_TEST

/* A node's output must have a gradient (backward would hand the op's
 * backward a NULL dL/dout), and n_in inputs need an array to copy. */
static void noop_backward(const qkv_node *n)
{
    n->out->grad[0] += 0;
}

START_TEST(test_record_refuses_an_output_without_gradient_and_no_inputs)
{
    static const qkv_op_def noop = {"noop", noop_backward, 0};
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){1}, NULL, 1);
    qkv_tensor *y = qkv_tape_tensor(t, 1, (const int[]){1}, 0);
    ck_assert_ptr_null(qkv_tape_record(t, &noop, y, 1, &x));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "noop: a node's output must have a gradient");
    qkv_tape_reset(t);
    y = qkv_tape_tensor(t, 1, (const int[]){1}, 1);
    ck_assert_ptr_null(qkv_tape_record(t, &noop, y, 1, NULL));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* An input that is NULL (an optional one, say a missing bias, passed in
 * the array) is refused when recorded: it was kept, and
 * qkv_tape_critical_path then read through it and crashed. */
START_TEST(test_record_refuses_a_null_input)
{
    static const qkv_op_def noop = {"noop", noop_backward, 0};
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){1}, NULL, 1);
    qkv_tensor *y = qkv_tape_tensor(t, 1, (const int[]){1}, 1);
    qkv_tensor *in[2] = {x, NULL};
    ck_assert_ptr_null(qkv_tape_record(t, &noop, y, 2, in));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "noop: input 1 of the node is NULL");
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    size_t length = 99;
    ck_assert_int_eq(qkv_tape_critical_path(t, &length), QKV_OK);
    ck_assert_uint_eq(length, 0);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* An op of one's own records its inputs through qkv_tape_record, which
 * refuses one kept across a reset while the tape can tell (as the
 * library's ops refuse it): it took the node, and backward then added into
 * the stale tensor's gradient, in memory the tape hands out again, and
 * returned QKV_OK with the parameter's gradient silently zero. */
START_TEST(test_record_refuses_an_input_kept_across_reset)
{
    static const qkv_op_def noop = {"noop", noop_backward, 0};
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    qkv_tensor *first = qkv_scale(t, w, 1);
    qkv_tensor *kept = qkv_scale(t, w, 2); /* made after first: stale past y */
    ck_assert(!qkv_tensor_is_nil(first) && !qkv_tensor_is_nil(kept));
    qkv_tape_reset(t);
    qkv_tensor *y = qkv_tape_tensor(t, 1, (const int[]){2}, 1);
    ck_assert(qkv_tape_is_stale(t, kept));
    qkv_tensor *in[2] = {w, kept};
    ck_assert_ptr_null(qkv_tape_record(t, &noop, y, 2, in));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t),
                     "noop: input 1 was made on this tape before its last qkv_tape_reset; "
                     "record it again, or keep it in a heap tensor (qkv_tensor_new)");
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_ERR_ARG);
    /* live inputs, recorded again after a reset, are taken */
    qkv_tape_reset(t);
    y = qkv_tape_tensor(t, 1, (const int[]){2}, 1);
    in[1] = qkv_scale(t, w, 2);
    ck_assert_ptr_nonnull(qkv_tape_record(t, &noop, y, 2, in));
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    qkv_tape_free(t);
    qkv_tensor_free(w);
}
END_TEST

/* An op definition without a backward function is refused when recorded:
 * qkv_backward called the NULL pointer and crashed. */
START_TEST(test_record_refuses_an_op_without_backward)
{
    static const qkv_op_def nobackward = {"nobackward", NULL, 0};
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){2}, NULL, 1);
    qkv_tensor *y = qkv_tape_tensor(t, 1, (const int[]){2}, 1);
    ck_assert_ptr_null(qkv_tape_record(t, &nobackward, y, 1, &x));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "nobackward: the op has no backward function");
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_ERR_ARG);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* A node writes its output's gradient as the tape's: an output made on
 * the heap or on another tape is refused, as the header asks. */
START_TEST(test_record_refuses_an_output_not_made_on_the_tape)
{
    static const qkv_op_def noop = {"noop", noop_backward, 0};
    qkv_tape *t = qkv_tape_new(0, NULL), *other = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){1}, NULL, 1);
    qkv_tensor *heap = tensor_of(1, (const int[]){1}, NULL, 1);
    qkv_tensor *elsewhere = qkv_tape_tensor(other, 1, (const int[]){1}, 1);
    /* a view made on t whose gradient is the heap tensor's */
    qkv_tensor *view = qkv_reshape(t, heap, 1, (const int[]){1});
    ck_assert_ptr_eq(view->grad, heap->grad);
    qkv_tensor *outs[3] = {view, heap, elsewhere}; /* the view dies with the reset */
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_null(qkv_tape_record(t, &noop, outs[i], 1, &x));
        ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
        ck_assert_str_eq(qkv_tape_error(t), "noop: a node's output must be made on its tape "
                                            "(qkv_tape_tensor), not elsewhere");
        ck_assert_uint_eq(qkv_tape_nodes(t), 0);
        qkv_tape_reset(t);
    }
    qkv_tape_free(t);
    qkv_tape_free(other);
    qkv_tensor_free(x);
    qkv_tensor_free(heap);
}
END_TEST

START_TEST(test_null_tapes_and_tensors_give_errors_not_crashes)
{
    qkv_tensor *x = tensor_of(2, (const int[]){2, 2}, (const double[]){1, 2, 3, 4}, 1);
    /* no tape */
    ck_assert_int_eq(qkv_backward(NULL, x), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_tape_status(NULL), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(NULL), "NULL"));
    ck_assert(qkv_matmul(NULL, x, x) == qkv_nil());
    ck_assert(qkv_softmax(NULL, x) == qkv_nil());
    ck_assert(qkv_attention(NULL, x, x, x, NULL, 1, NULL) == qkv_nil());
    ck_assert(qkv_tape_tensor(NULL, 1, (const int[]){2}, 0) == qkv_nil());
    ck_assert_ptr_null(qkv_tape_alloc(NULL, 8));
    ck_assert_ptr_null(qkv_tape_record(NULL, NULL, x, 1, &x));
    qkv_tape_reset(NULL);
    qkv_tape_free(NULL);
    ck_assert_int_eq(qkv_tape_fail(NULL, QKV_ERR_ARG, "x"), QKV_ERR_ARG);
    /* NULL tensors on a real tape: an error that names the op */
    qkv_tape *t = qkv_tape_new(0, NULL);
    ck_assert(qkv_add(t, NULL, x) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "add: input is nil (NULL, or the result of a failed call)");
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, NULL), QKV_ERR_ARG);
    /* it said the tensor "has no gradient on this tape: it was made
     * elsewhere, ...", none of which names a NULL */
    ck_assert_str_eq(qkv_tape_error(t), "backward: the tensor is nil (NULL, or qkv_nil())");
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward_from(t, qkv_nil(), (const qkv_real[]){1}, 1), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "backward_from: the tensor is nil (NULL, or qkv_nil())");
    qkv_tape_reset(t);
    ck_assert(qkv_gather(t, x, NULL, 1, (const int[]){2}) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    qkv_tape_reset(t);
    ck_assert(qkv_pick_rows(t, x, NULL) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    qkv_tape_reset(t);
    ck_assert(qkv_cross_entropy(t, x, NULL) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    /* the other modules */
    ck_assert_int_eq(qkv_tensor_set(NULL, NULL, 0), QKV_ERR_SHAPE);
    ck_assert_int_eq(qkv_tensor_set(x, NULL, 4), QKV_ERR_ARG);
    ck_assert(!qkv_tensor_same_shape(NULL, x));
    ck_assert_int_eq(qkv_shape_numel(1, (const int[]){2}, NULL), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_step(NULL), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_optim_error(NULL), "NULL"));
    ck_assert_int_eq(qkv_optim_set_name(NULL, 0, "x"), QKV_ERR_ARG);
    qkv_optim_zero_grad(NULL);
    ck_assert(qkv_optim_last_norm(NULL) == 0);
    ck_assert(qkv_grad_norm(NULL, 3) == 0);
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_optim_new(NULL, &x, 1, &err));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_int_eq(qkv_kernels_use(NULL, &err), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_gradcheck(NULL, NULL, NULL, NULL, 0, 0, 0, 0, NULL), QKV_ERR_ARG);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

static size_t critical_path(const qkv_tape *t)
{
    size_t n = 99;
    ck_assert_int_eq(qkv_tape_critical_path(t, &n), QKV_OK);
    return n;
}

/* Nodes recorded after the loss, that the loss does not depend on, are
 * not run: their zero output gradient would put 0·inf = NaN into the
 * gradients the loss does reach (here sqrt at 0, logged after the loss). */
START_TEST(test_backward_runs_only_the_nodes_the_seed_reaches)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *u = tensor_of(1, (const int[]){3}, (const double[]){0, 1, 4}, 1);
    for (int from = 0; from < 2; from++) {
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(u);
        qkv_tensor *h = qkv_scale(t, u, 1.0);
        qkv_tensor *loss = qkv_sum(t, h);
        qkv_tensor *metric = qkv_sqrt(t, h); /* not part of the loss */
        ck_assert(metric->data[0] == 0);
        const qkv_real one = 1;
        ck_assert_int_eq(from ? qkv_backward_from(t, loss, &one, 1) : qkv_backward(t, loss),
                         QKV_OK);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(u->grad[i] == 1, "from %d: du[%d] = %g", from, i, (double)u->grad[i]);
        ck_assert(metric->grad[0] == 0); /* untouched gradients still read as zero */
    }
    qkv_tensor_free(u);
    qkv_tape_free(t);
}
END_TEST

/* A reshape view of a parameter shares its gradient: seeding backward
 * there would overwrite what the parameter has gathered, so it is refused
 * as the parameter itself is. */
START_TEST(test_backward_from_a_view_of_a_parameter_is_refused)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *p = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    p->grad[0] = 5;
    qkv_tensor *v = qkv_reshape(t, p, 2, (const int[]){1, 2});
    const qkv_real dy[2] = {1, 1};
    ck_assert_int_eq(qkv_backward_from(t, v, dy, 2), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "a view of one not made on this tape"));
    ck_assert(p->grad[0] == 5);
    qkv_tape_reset(t);
    qkv_tensor *c = tensor_of(1, (const int[]){1}, (const double[]){3}, 1);
    c->grad[0] = 5;
    ck_assert_int_eq(qkv_backward(t, qkv_reshape(t, c, 0, NULL)), QKV_ERR_ARG);
    ck_assert(c->grad[0] == 5);
    qkv_tensor_free(p);
    qkv_tensor_free(c);
    qkv_tape_free(t);
}
END_TEST

/* A loss recorded on another tape is not one this tape can backpropagate
 * from: its nodes are elsewhere, so the parameters would get nothing. */
START_TEST(test_backward_from_another_tapes_loss_is_refused)
{
    qkv_tape *t = qkv_tape_new(0, NULL), *u = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    qkv_tensor *l = qkv_sum(u, qkv_mul(u, w, w));
    ck_assert_int_eq(qkv_backward(t, l), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "made on this tape"));
    qkv_tape_reset(t);
    const qkv_real dy[1] = {1};
    ck_assert_int_eq(qkv_backward_from(t, l, dy, 1), QKV_ERR_ARG);
    /* the tape that made it still can */
    ck_assert_int_eq(qkv_backward(u, l), QKV_OK);
    ASSERT_NEAR(w->grad[0], 2, 0);
    ASSERT_NEAR(w->grad[1], 4, 0);
    qkv_tensor_free(w);
    qkv_tape_free(t);
    qkv_tape_free(u);
}
END_TEST

/* An input with a gradient made on another tape: backward on this tape
 * added into it and stopped there, so w got no gradient and backward
 * reported success (PyTorch gives d(Σ (2w)²)/dw = 8w). Refused by name.
 * A view of a parameter made on the other tape shares the parameter's
 * gradient and stays usable, as does an input without a gradient. */
START_TEST(test_an_input_with_another_tapes_gradient_is_refused)
{
    qkv_tape *t = qkv_tape_new(0, NULL), *u = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    qkv_tensor *o = qkv_scale(u, w, 2);
    ck_assert(qkv_mul(t, o, o) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "mul: input 0 was made on another tape, whose nodes its "
                                        "gradient would not reach");
    qkv_tape_reset(t);
    qkv_tensor *v = qkv_reshape(u, w, 2, (const int[]){1, 2});
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, v, v))), QKV_OK);
    ASSERT_NEAR(w->grad[0], 2, 0);
    ASSERT_NEAR(w->grad[1], 4, 0);
    qkv_tape_reset(t);
    qkv_tape_set_grad(u, 0);
    qkv_tensor *c = qkv_scale(u, w, 2); /* no gradient: a constant here */
    ck_assert(qkv_tensor_is_nil(qkv_mul(t, c, w)) == 0);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    qkv_tensor_free(w);
    qkv_tape_free(t);
    qkv_tape_free(u);
}
END_TEST

/* A loss recorded before qkv_tape_reset is no longer on the tape: its
 * nodes are forgotten, so backward would leave every parameter's gradient
 * as it was and report success. It is refused instead, as a loss from
 * another tape is. */
START_TEST(test_backward_from_a_loss_recorded_before_reset_is_refused)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    qkv_tensor *l = qkv_sum(t, qkv_mul(t, w, w));
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, l), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "before the last qkv_tape_reset"));
    ck_assert(w->grad[0] == 0 && w->grad[1] == 0);
    qkv_tape_reset(t);
    const qkv_real dy[1] = {1};
    ck_assert_int_eq(qkv_backward_from(t, l, dy, 1), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "before the last qkv_tape_reset"));
    /* recorded again after the reset, it works: d(w0² + w1²) = 2w */
    qkv_tape_reset(t);
    l = qkv_sum(t, qkv_mul(t, w, w));
    ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
    ASSERT_NEAR(w->grad[0], 2, 0);
    ASSERT_NEAR(w->grad[1], 4, 0);
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

/* A tensor kept across a reset (an RNN state carried into the next step)
 * is refused by the next op that reads it, while its memory has not been
 * handed out again; once the tape has recorded past it, it cannot be told
 * from a live tensor (qkv_tape_is_stale says which is which). */
START_TEST(test_an_op_refuses_a_tensor_kept_across_reset)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    qkv_tensor *h = qkv_tanh(t, qkv_mul(t, w, w));
    qkv_tensor *v = qkv_reshape(t, h, 2, (const int[]){1, 2}); /* a view of it */
    ck_assert(!qkv_tape_is_stale(t, h) && !qkv_tape_is_stale(t, v));
    ck_assert(!qkv_tape_is_stale(t, w)); /* a heap tensor never is */
    ck_assert(!qkv_tape_is_stale(t, qkv_nil()) && !qkv_tape_is_stale(NULL, h));
    qkv_tape_reset(t);
    ck_assert(qkv_tape_is_stale(t, h) && qkv_tape_is_stale(t, v));
    ck_assert(qkv_tensor_is_nil(qkv_add(t, w, h))); /* as the second input */
    ck_assert_str_eq(qkv_tape_error(t),
                     "add: an input was made on this tape before its last qkv_tape_reset; "
                     "record it again, or keep it in a heap tensor (qkv_tensor_new)");
    qkv_tape_reset(t);
    ck_assert(qkv_tensor_is_nil(qkv_exp(t, v)));
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "exp: an input was made"));
    /* recorded again, the same steps land on the same memory: live */
    qkv_tape_reset(t);
    qkv_tensor *h2 = qkv_tanh(t, qkv_mul(t, w, w));
    ck_assert_ptr_eq(h2, h);
    ck_assert(!qkv_tape_is_stale(t, h));
    ck_assert(!qkv_tensor_is_nil(qkv_exp(t, h2)));
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    /* another tape's tensor is not this tape's to judge */
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tensor *hu = qkv_tanh(u, w);
    qkv_tape_reset(u);
    ck_assert(qkv_tape_is_stale(u, hu) && !qkv_tape_is_stale(t, hu));
    qkv_tape_free(u);
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

/* The inputs qkv_op_inputs_ok does not see are checked too, before the op
 * allocates over them: attention's mask, a norm's gain and bias, and the
 * padding mask of a multi-head attention layer. */
START_TEST(test_a_mask_or_gain_kept_across_reset_is_refused)
{
    static const char says[] = "an input was made on this tape before its last qkv_tape_reset";
    qkv_tensor *q = tensor_of(3, (const int[]){1, 2, 2}, (const double[]){0.1, 0.2, 0.3, 0.4}, 1);
    for (int c = 0; c < 5; c++) {
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *m = qkv_tape_tensor(t, 2, (const int[]){2, 2}, 0);
        qkv_tensor *g = qkv_tape_tensor(t, 1, (const int[]){2}, 1);
        for (int i = 0; i < 4; i++)
            m->data[i] = 0;
        g->data[0] = g->data[1] = 1;
        qkv_tape_reset(t);
        qkv_tensor *y = c == 0   ? qkv_attention(t, q, q, q, m, 1, NULL)
                        : c == 1 ? qkv_attention_online(t, q, q, q, m, 1, 0)
                        : c == 2 ? qkv_layer_norm(t, q, g, NULL, 1e-5)
                        : c == 3 ? qkv_layer_norm(t, q, NULL, g, 1e-5)
                                 : qkv_rms_norm(t, q, g, 1e-5);
        ck_assert_msg(qkv_tensor_is_nil(y), "case %d", c);
        ck_assert_msg(strstr(qkv_tape_error(t), says) != NULL, "case %d: %s", c, qkv_tape_error(t));
        qkv_tape_free(t);
    }
    /* and a padding mask handed to a multi-head attention layer */
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_mha m;
    ck_assert_int_eq(qkv_mha_init(&m, p, "mha", 2, 1, 0, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *pad = qkv_tape_tensor(t, 2, (const int[]){1, 2}, 0);
    pad->data[0] = pad->data[1] = 0;
    qkv_tape_reset(t);
    ck_assert(qkv_tensor_is_nil(qkv_mha_forward(t, &m, q, pad, NULL)));
    ck_assert_msg(strstr(qkv_tape_error(t), "the padding mask was made on this tape before") !=
                      NULL,
                  "%s", qkv_tape_error(t));
    qkv_tape_free(t);
    qkv_params_free(p);
    qkv_tensor_free(q);
}
END_TEST

/* qkv_tape_name_failure puts "op: " in place of the tape's own prefix,
 * and cuts the end of a message that then outgrows its room, keeping it
 * terminated within it. */
START_TEST(test_name_failure_cuts_a_long_message_to_its_room)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    char a[300], before[sizeof(qkv_error){0}.message];
    memset(a, 'a', sizeof a - 1);
    a[sizeof a - 1] = '\0';
    a[10] = 'b'; /* a mark to find it by */
    qkv_tape_fail(t, QKV_ERR_NOMEM, "tape: %s", a);
    snprintf(before, sizeof before, "%s", qkv_tape_error(t));
    ck_assert_uint_eq(strlen(before), sizeof before - 1); /* full */
    qkv_tape_name_failure(t, "layer_norm");
    const char *e = qkv_tape_error(t);
    ck_assert_uint_eq(strlen(e), sizeof before - 1);
    ck_assert(strncmp(e, "layer_norm: ", 12) == 0);
    ck_assert(memcmp(e + 12, before + 6, sizeof before - 1 - 12) == 0);
    ck_assert(e[12 + 10] == 'b');
    /* another op's error is left as it is */
    qkv_tape_reset(t);
    qkv_tape_fail(t, QKV_ERR_SHAPE, "add: no");
    qkv_tape_name_failure(t, "layer_norm");
    ck_assert_str_eq(qkv_tape_error(t), "add: no");
    qkv_tape_free(t);
}
END_TEST

/* qkv_tape_reword_failure replaces the first drop bytes with head, once
 * per error (the innermost caller's words stay); a drop past the end
 * leaves head alone. */
START_TEST(test_reword_failure_rewords_once_and_clamps_drop)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tape_fail(t, QKV_ERR_SHAPE, "add: shapes differ");
    qkv_tape_reword_failure(t, 5, "layer fc: ");
    ck_assert_str_eq(qkv_tape_error(t), "layer fc: shapes differ");
    qkv_tape_reword_failure(t, 10, "model: ");
    ck_assert_str_eq(qkv_tape_error(t), "layer fc: shapes differ");
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    qkv_tape_reset(t);
    qkv_tape_fail(t, QKV_ERR_ARG, "abc");
    qkv_tape_reword_failure(t, 1000, "head");
    ck_assert_str_eq(qkv_tape_error(t), "head");
    qkv_tape_free(t);
}
END_TEST

/* The arena grows by doubling: from 256 bytes, 256 requests of 1 KB
 * take 9 new blocks (1 + 2 + ... + 256 KB), never running out of the
 * tape's block slots as blocks of 1 KB each would. */
START_TEST(test_arena_grows_geometrically)
{
    qkv_tape *t = qkv_tape_new(256, NULL);
    const size_t before = qkv_alloc_count();
    for (int i = 0; i < 256; i++)
        ck_assert_msg(qkv_tape_alloc(t, 1024) != NULL, "request %d: %s", i, qkv_tape_error(t));
    ck_assert_uint_le(qkv_alloc_count() - before, 9);
    ck_assert_uint_eq(qkv_tape_bytes_used(t), 256 * 1024);
    qkv_tape_free(t);
}
END_TEST

/* A node may have exactly QKV_NODE_MAX_INPUTS inputs, not one more. */
START_TEST(test_record_takes_the_most_inputs_and_no_more)
{
    static const qkv_op_def op = {"wide", noop_backward, 0};
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){1}, (const double[]){1}, 1);
    qkv_tensor **in = malloc(sizeof *in * (QKV_NODE_MAX_INPUTS + 1));
    ck_assert_ptr_nonnull(in);
    for (int i = 0; i <= QKV_NODE_MAX_INPUTS; i++)
        in[i] = x;
    qkv_tensor *y = qkv_tape_tensor(t, 1, (const int[]){1}, 1);
    ck_assert_ptr_nonnull(qkv_tape_record(t, &op, y, QKV_NODE_MAX_INPUTS, in));
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert_ptr_null(qkv_tape_record(t, &op, y, QKV_NODE_MAX_INPUTS + 1, in));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    free(in);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* A tape grown to several blocks: a tensor kept from a later block than
 * the one being filled is stale, and refused, while the first block is
 * still being refilled. */
START_TEST(test_a_tensor_in_a_later_block_is_stale)
{
    qkv_tape *t = qkv_tape_new(4096, NULL);
    qkv_tensor *w = tensor_of(1, (const int[]){256}, NULL, 1);
    qkv_tensor *h = w;
    for (int i = 0; i < 8; i++) /* about 3 KB each: past the first block */
        h = qkv_tanh(t, h);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert(!qkv_tape_is_stale(t, h));
    qkv_tape_reset(t);
    ck_assert(qkv_tape_is_stale(t, h));
    ck_assert(!qkv_tensor_is_nil(qkv_tanh(t, w))); /* in the first block */
    ck_assert(qkv_tensor_is_nil(qkv_tanh(t, h)));
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "before its last qkv_tape_reset"));
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

/* The tape leaves the end of a block unused when the next request does not
 * fit in it; a tensor kept from before the reset in that end is stale
 * too. x0 and x (no gradient: a struct of 64 bytes and data of 64 each)
 * sit at offsets 0 and 128 of the first block; after the reset, big's
 * struct takes offset 0 and its 8000 bytes of data move to a new block,
 * so only the first 64 bytes of the first block are in use. */
START_TEST(test_a_tensor_in_a_blocks_unused_end_is_stale)
{
    qkv_tape *t = qkv_tape_new(4096, NULL);
    qkv_tensor *x0 = qkv_tape_tensor(t, 1, (const int[]){2}, 0);
    qkv_tensor *x = qkv_tape_tensor(t, 1, (const int[]){2}, 0);
    ck_assert_uint_eq((uintptr_t)x - (uintptr_t)x0, 128);
    qkv_tape_reset(t);
    qkv_tensor *big = qkv_tape_tensor(t, 1, (const int[]){2000}, 0);
    ck_assert_ptr_eq(big, x0); /* x0's memory is big's struct now: live */
    ck_assert(!qkv_tape_is_stale(t, x0));
    ck_assert(qkv_tape_is_stale(t, x));
    ck_assert(qkv_tensor_is_nil(qkv_exp(t, x)));
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "before its last qkv_tape_reset"));
    qkv_tape_free(t);
}
END_TEST

/* An arena that cannot grow names the tensor it was making, and hints at
 * a forgotten qkv_tape_reset only where the arena already holds more than
 * the request: one tensor too large is no forgotten reset. */
START_TEST(test_out_of_memory_names_the_tensor_and_hints_at_reset_only_when_full)
{
    char want[64];
    qkv_tape *t = qkv_tape_new(4096, NULL);
    qkv_alloc_fail_at(qkv_alloc_count() + 1); /* the next block */
    ck_assert(qkv_tensor_is_nil(qkv_tape_tensor(t, 2, (const int[]){300, 400}, 0)));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_NOMEM);
    const char *e = qkv_tape_error(t);
    snprintf(want, sizeof want, "%zu bytes for a tensor [300,400] (", 120000 * sizeof(qkv_real));
    ck_assert_msg(strstr(e, want) != NULL && strstr(e, "qkv_tape_reset") == NULL, "%s", e);
    qkv_tape_free(t);
    t = qkv_tape_new(4096, NULL);
    const int n = (int)(3500 / sizeof(qkv_real)); /* 3500 bytes of the first 4096 */
    ck_assert(!qkv_tensor_is_nil(qkv_tape_tensor(t, 1, &n, 0)));
    qkv_alloc_fail_at(qkv_alloc_count() + 1);
    ck_assert(qkv_tensor_is_nil(qkv_tape_tensor(t, 1, (const int[]){200}, 0)));
    e = qkv_tape_error(t);
    snprintf(want, sizeof want, "%zu bytes for a tensor [200] (", 200 * sizeof(qkv_real));
    ck_assert_msg(strstr(e, want) != NULL &&
                      strstr(e, "; did a loop forget qkv_tape_reset?") != NULL,
                  "%s", e);
    qkv_tape_free(t);
    qkv_alloc_fail_at(0);
}
END_TEST

/* An op whose output cannot be made names the op: the message began
 * "tape: " and named only the tensor's shape. [300,1] and [1,400] fit in
 * the first block; their [300,400] product or sum needs a new one. */
START_TEST(test_out_of_memory_in_an_op_names_the_op)
{
    char want[96];
    const char *ops[] = {"add", "matmul"};
    for (int i = 0; i < 2; i++) {
        qkv_tape *t = qkv_tape_new(16384, NULL);
        qkv_tensor *a = qkv_tape_tensor(t, 2, (const int[]){300, 1}, 0);
        qkv_tensor *b = qkv_tape_tensor(t, 2, (const int[]){1, 400}, 0);
        ck_assert(!qkv_tensor_is_nil(a) && !qkv_tensor_is_nil(b));
        qkv_alloc_fail_at(qkv_alloc_count() + 1); /* the next block */
        qkv_tensor *y = i == 0 ? qkv_add(t, a, b) : qkv_matmul(t, a, b);
        qkv_alloc_fail_at(0);
        ck_assert(qkv_tensor_is_nil(y));
        ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_NOMEM);
        snprintf(want, sizeof want,
                 "%s: out of memory allocating %zu bytes for a tensor [300,400] (the arena has ",
                 ops[i], 120000 * sizeof(qkv_real));
        const char *e = qkv_tape_error(t);
        ck_assert_msg(strncmp(e, want, strlen(want)) == 0, "%s", e);
        /* sticky: a later op neither runs nor renames the error */
        ck_assert(qkv_tensor_is_nil(qkv_exp(t, a)));
        ck_assert_msg(strncmp(qkv_tape_error(t), want, strlen(want)) == 0, "%s", e);
        qkv_tape_free(t);
    }
}
END_TEST

/* A node that cannot be recorded for want of memory names its op too: the
 * first block filled to its end, the node needs a new one. */
START_TEST(test_out_of_memory_recording_a_node_names_the_op)
{
    static const qkv_op_def op = {"twice", noop_backward, 0};
    qkv_tape *t = qkv_tape_new(16384, NULL);
    qkv_tensor *x = qkv_tape_tensor(t, 1, (const int[]){4}, 1);
    qkv_tensor *y = qkv_tape_tensor(t, 1, (const int[]){4}, 1);
    ck_assert(!qkv_tensor_is_nil(x) && !qkv_tensor_is_nil(y));
    ck_assert(qkv_tape_alloc(t, 16384 - qkv_tape_bytes_used(t)) != NULL);
    qkv_alloc_fail_at(qkv_alloc_count() + 1);
    ck_assert(qkv_tape_record(t, &op, y, 1, &x) == NULL);
    qkv_alloc_fail_at(0);
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_NOMEM);
    const char *want = "twice: out of memory allocating ";
    ck_assert_msg(strncmp(qkv_tape_error(t), want, strlen(want)) == 0, "%s", qkv_tape_error(t));
    qkv_tape_free(t);
}
END_TEST

/* An op's scratch and records name it too when memory runs out: each of
 * the allocations after the first block fails in turn, and whichever
 * runs out (the output, cross_entropy's probabilities, rnn_scan's dz for
 * backward, the node), the message begins with the op's name. */
START_TEST(test_out_of_memory_in_an_ops_scratch_names_the_op)
{
    qkv_tensor *logits = qkv_tensor_new(2, (const int[]){200, 100}, 1, NULL);
    qkv_tensor *xw = qkv_tensor_new(3, (const int[]){4, 50, 100}, 1, NULL);
    qkv_tensor *wh = qkv_tensor_new(2, (const int[]){100, 100}, 1, NULL);
    int targets[200];
    for (int i = 0; i < 200; i++)
        targets[i] = i % 100;
    const char *ops[] = {"cross_entropy", "rnn_scan"};
    for (int op = 0; op < 2; op++) {
        int failures = 0;
        for (size_t k = 1; k <= 6; k++) {
            qkv_tape *t = qkv_tape_new(4096, NULL);
            qkv_alloc_fail_at(qkv_alloc_count() + k);
            qkv_tensor *y =
                op == 0 ? qkv_cross_entropy(t, logits, targets) : qkv_rnn_scan(t, xw, wh, NULL, 1);
            qkv_alloc_fail_at(0);
            if (qkv_tape_status(t) != QKV_OK) {
                char want[64];
                snprintf(want, sizeof want, "%s: out of memory allocating ", ops[op]);
                ck_assert(qkv_tensor_is_nil(y));
                ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_NOMEM);
                ck_assert_msg(strncmp(qkv_tape_error(t), want, strlen(want)) == 0, "%s",
                              qkv_tape_error(t));
                failures++;
            }
            qkv_tape_free(t);
        }
        ck_assert_int_ge(failures, 2);
    }
    qkv_tensor_free(logits);
    qkv_tensor_free(xw);
    qkv_tensor_free(wh);
}
END_TEST

START_TEST(test_critical_path_counts_the_longest_chain)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){2}, (const double[]){1, 2}, 1);
    ck_assert_uint_eq(critical_path(t), 0); /* no nodes */
    /* a chain of three: exp, tanh, sum */
    qkv_sum(t, qkv_tanh(t, qkv_exp(t, x)));
    ck_assert_uint_eq(qkv_tape_nodes(t), 3);
    ck_assert_uint_eq(critical_path(t), 3);
    /* two branches of 1 and 4 nodes joined by an add: 4 + 1 = 5, though
     * there are 6 nodes */
    qkv_tape_reset(t);
    qkv_tensor *a = qkv_exp(t, x);
    qkv_tensor *b = qkv_neg(t, qkv_tanh(t, qkv_sigmoid(t, qkv_exp(t, x))));
    qkv_add(t, a, b);
    ck_assert_uint_eq(qkv_tape_nodes(t), 6);
    ck_assert_uint_eq(critical_path(t), 5);
    /* the deepest input counts, whichever place it has */
    qkv_tape_reset(t);
    a = qkv_exp(t, x);
    b = qkv_neg(t, qkv_tanh(t, qkv_sigmoid(t, qkv_exp(t, x))));
    qkv_add(t, b, a);
    ck_assert_uint_eq(critical_path(t), 5);
    /* n independent nodes side by side, then one sum over them: 2,
     * however wide (here: 8 exps of x, concatenated) */
    qkv_tape_reset(t);
    qkv_tensor *e[8];
    for (int i = 0; i < 8; i++)
        e[i] = qkv_exp(t, x);
    qkv_concat(t, 8, e, 0);
    ck_assert_uint_eq(qkv_tape_nodes(t), 9);
    ck_assert_uint_eq(critical_path(t), 2);
    /* a recurrence h = tanh(h·w) over 10 steps: 2 nodes a step */
    qkv_tape_reset(t);
    qkv_tensor *w = tensor_of(2, (const int[]){2, 2}, (const double[]){0.5, 0, 0, 0.5}, 1);
    qkv_tensor *h = qkv_reshape(t, x, 2, (const int[]){1, 2});
    for (int i = 0; i < 10; i++)
        h = qkv_tanh(t, qkv_matmul(t, h, w));
    /* (a reshape is a view that shares x's gradient: no node) */
    ck_assert_uint_eq(qkv_tape_nodes(t), 2 * 10);
    ck_assert_uint_eq(critical_path(t), 2 * 10);
    /* through reshape views, which are not nodes: still a chain of 3 */
    qkv_tape_reset(t);
    qkv_tensor *r = qkv_tanh(t, qkv_reshape(t, qkv_tanh(t, x), 2, (const int[]){1, 2}));
    qkv_tanh(t, qkv_reshape(t, r, 1, (const int[]){2}));
    ck_assert_uint_eq(critical_path(t), 3);
    /* attention's weights come from its node (the link to them, a node of
     * its own, adds no step): attention, then tanh and sum of the weights
     * is a chain of 3; attention, sum of its output is 2 */
    qkv_tape_reset(t);
    qkv_tensor *q = qkv_reshape(t, x, 2, (const int[]){2, 1});
    qkv_attention_parts parts;
    qkv_tensor *o = qkv_attention(t, q, q, q, NULL, 1, &parts);
    ck_assert_uint_eq(qkv_tape_nodes(t), 3); /* the node and its two links */
    qkv_sum(t, qkv_tanh(t, parts.attn));
    qkv_sum(t, o);
    ck_assert_uint_eq(critical_path(t), 3);
    /* a link needs both ends to carry gradients */
    ck_assert_ptr_null(
        qkv_tape_record_output(t, parts.attn, qkv_tape_tensor(t, 1, (const int[]){2}, 0)));
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(qkv_tape_error(t), "must have a gradient"));
    /* recording off: no nodes, so no path */
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    qkv_exp(t, x);
    ck_assert_uint_eq(critical_path(t), 0);
    ck_assert_int_eq(qkv_tape_critical_path(NULL, NULL), QKV_ERR_ARG);
    qkv_tape_free(t);
    qkv_tensor_free(x);
    qkv_tensor_free(w);
}
END_TEST

/* A user's op with two outputs, y = 2x and e = 3x, written as README
 * "Writing an op of your own" says: a backward that adds (flags 0) and
 * reads both outputs' gradients, and the extra recorded with
 * qkv_tape_record_output. Its backward reads e's gradient even when no
 * gradient reached e, so that gradient must read as zero then, not as
 * whatever the arena held. */
static void twice_thrice_backward(const qkv_node *n)
{
    const qkv_tensor *e = n->state;
    for (size_t i = 0; i < n->out->numel; i++)
        n->in[0]->grad[i] += 2 * n->out->grad[i] + 3 * e->grad[i];
}

static const qkv_op_def twice_thrice_op = {"twice_thrice", twice_thrice_backward, 0};

static qkv_tensor *twice_thrice(qkv_tape *t, qkv_tensor *x, qkv_tensor **e)
{
    qkv_tensor *y = qkv_tape_tensor(t, x->ndim, x->shape, 1);
    *e = qkv_tape_tensor(t, x->ndim, x->shape, 1);
    for (size_t i = 0; i < x->numel; i++) {
        y->data[i] = 2 * x->data[i];
        (*e)->data[i] = 3 * x->data[i];
    }
    qkv_node *n = qkv_tape_record(t, &twice_thrice_op, y, 1, &x);
    ck_assert_ptr_nonnull(n);
    n->state = *e;
    ck_assert_ptr_nonnull(qkv_tape_record_output(t, *e, y));
    return y;
}

START_TEST(test_an_extra_output_no_gradient_reached_reads_zero)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){1, -2, 0.5}, 1);
    /* loss through both outputs, then through y alone, then through e
     * alone: d/dx = 2 + 3, 2, 3; the garbage left in e's gradient after
     * each step must not reach the next */
    const double want[3] = {5, 2, 3};
    for (int step = 0; step < 3; step++) {
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(x);
        qkv_tensor *e, *y = twice_thrice(t, x, &e);
        qkv_tensor *l = step == 0   ? qkv_add(t, qkv_sum(t, y), qkv_sum(t, e))
                        : step == 1 ? qkv_sum(t, y)
                                    : qkv_sum(t, e);
        ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
        for (int i = 0; i < 3; i++)
            ASSERT_NEAR(x->grad[i], want[step], 0);
        for (int i = 0; i < 3; i++)
            e->grad[i] = y->grad[i] = 100;
    }
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* The link to an extra output asks the node that made its main output,
 * not the node recorded before that one, whether it readies the extra's
 * gradient itself: a layer norm (which claims its gradients) recorded
 * just before twice_thrice must not leave e's gradient unfilled. */
START_TEST(test_an_extra_outputs_link_asks_its_own_node)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = tensor_of(1, (const int[]){3}, (const double[]){1, -2, 0.5}, 1);
    qkv_tensor *w = tensor_of(1, (const int[]){3}, (const double[]){1, 2, 4}, 1);
    for (int step = 0; step < 2; step++) {
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(x);
        ck_assert(!qkv_tensor_is_nil(qkv_layer_norm(t, w, NULL, NULL, 1e-5)));
        qkv_tensor *e, *y = twice_thrice(t, x, &e);
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
        for (int i = 0; i < 3; i++)
            ASSERT_NEAR(x->grad[i], 2, 0);
        for (int i = 0; i < 3; i++)
            e->grad[i] = 100; /* what the next step must not read */
    }
    qkv_tensor_free(x);
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

Suite *tape_suite(void)
{
    Suite *s = suite_create("tape");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_grad_accumulates_when_a_tensor_is_used_twice);
    tcase_add_test(tc, test_lazy_gradients_start_from_zero_on_a_reused_arena);
    tcase_add_test(tc, test_claimed_gradients_overwrite_once_then_add);
    tcase_add_test(tc, test_params_keep_values_and_grads_across_reset);
    tcase_add_test(tc, test_reset_forgets_nodes_and_keeps_memory);
    tcase_add_test(tc, test_small_arena_grows_then_steps_allocate_nothing);
    tcase_add_test(tc, test_no_grad_records_nothing);
    tcase_add_test(tc, test_constants_get_no_gradient);
    tcase_add_test(tc, test_backward_twice_is_an_error);
    tcase_add_test(tc, test_backward_needs_a_scalar);
    tcase_add_test(tc, test_shape_mismatch_is_sticky_and_named);
    tcase_add_test(tc, test_nil_input_is_an_error_not_a_crash);
    tcase_add_test(tc, test_tape_tensor_and_alloc);
    tcase_add_test(tc, test_record_refuses_an_output_without_gradient_and_no_inputs);
    tcase_add_test(tc, test_record_refuses_a_null_input);
    tcase_add_test(tc, test_record_refuses_an_input_kept_across_reset);
    tcase_add_test(tc, test_record_refuses_an_op_without_backward);
    tcase_add_test(tc, test_record_refuses_an_output_not_made_on_the_tape);
    tcase_add_test(tc, test_null_tapes_and_tensors_give_errors_not_crashes);
    tcase_add_test(tc, test_backward_runs_only_the_nodes_the_seed_reaches);
    tcase_add_test(tc, test_backward_from_a_view_of_a_parameter_is_refused);
    tcase_add_test(tc, test_backward_from_another_tapes_loss_is_refused);
    tcase_add_test(tc, test_an_input_with_another_tapes_gradient_is_refused);
    tcase_add_test(tc, test_backward_from_a_loss_recorded_before_reset_is_refused);
    tcase_add_test(tc, test_an_op_refuses_a_tensor_kept_across_reset);
    tcase_add_test(tc, test_a_mask_or_gain_kept_across_reset_is_refused);
    tcase_add_test(tc, test_a_tensor_in_a_later_block_is_stale);
    tcase_add_test(tc, test_a_tensor_in_a_blocks_unused_end_is_stale);
    tcase_add_test(tc, test_out_of_memory_names_the_tensor_and_hints_at_reset_only_when_full);
    tcase_add_test(tc, test_out_of_memory_in_an_op_names_the_op);
    tcase_add_test(tc, test_out_of_memory_recording_a_node_names_the_op);
    tcase_add_test(tc, test_out_of_memory_in_an_ops_scratch_names_the_op);
    tcase_add_test(tc, test_critical_path_counts_the_longest_chain);
    tcase_add_test(tc, test_an_extra_output_no_gradient_reached_reads_zero);
    tcase_add_test(tc, test_an_extra_outputs_link_asks_its_own_node);
    tcase_add_test(tc, test_name_failure_cuts_a_long_message_to_its_room);
    tcase_add_test(tc, test_reword_failure_rewords_once_and_clamps_drop);
    tcase_add_test(tc, test_arena_grows_geometrically);
    tcase_add_test(tc, test_record_takes_the_most_inputs_and_no_more);
    suite_add_tcase(s, tc);
    return s;
}
