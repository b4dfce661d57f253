/*
 * test_shape.c - shapes and reductions along a dimension: reshape is a view
 * (writes show through, gradients flow, nothing is copied or recorded),
 * permute, swapdims, concat, stack and slice move values and gradients to where
 * they belong, and sum, mean, max, min, logsumexp and var along any dimension
 * (keepdim or not) and argmax_dim's and argmin_dim's indices on hand-worked
 * examples; and the errors that name the op and the shapes.
 */
#include <stdlib.h>
#include <string.h>

#include "tests.h"

/* x = 0, 1, 2, ... in a heap tensor of this shape, with a gradient. */
static qkv_tensor *iota(int ndim, const int *shape)
{
    qkv_tensor *x = tensor_of(ndim, shape, NULL, 1);
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = (qkv_real)i;
    return x;
}

START_TEST(test_reshape_is_a_view_that_shares_values_and_gradients)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = iota(2, (const int[]){4, 16});
    size_t nodes = qkv_tape_nodes(t), bytes = qkv_tape_bytes_used(t);
    qkv_tensor *v = qkv_reshape(t, x, 3, (const int[]){8, -1, 2});
    ck_assert_int_eq(v->ndim, 3);
    ck_assert_int_eq(v->shape[1], 4); /* -1 inferred: 64 / (8·2) */
    ck_assert_int_eq(v->shape[3], 1); /* unused trailing entries are 1 (tensor.h) */
    ck_assert_ptr_eq(v->data, x->data);
    ck_assert_ptr_eq(v->grad, x->grad);
    ck_assert_uint_eq(qkv_tape_nodes(t), nodes);                              /* no node */
    ck_assert_uint_lt(qkv_tape_bytes_used(t) - bytes, 64 * sizeof(qkv_real)); /* no copy */
    v->data[5] = 100; /* writing through the view changes the original */
    ck_assert(x->data[5] == 100);
    /* the gradient of sum(v ⊙ v) reaches x: 2x */
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, v, v))), QKV_OK);
    for (int i = 0; i < 64; i++)
        ck_assert(x->grad[i] == 2 * x->data[i]);
    /* shapes that do not fit */
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 2, (const int[]){5, -1}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "reshape: [4,16] has 64 values; the new shape [5,-1] cannot hold them with "
                     "any size at -1");
    /* the message names the new shape and what it holds: "the new shape
     * holds another number" left the caller to find which shape and how
     * many */
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 2, (const int[]){5, 3}) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_str_eq(qkv_tape_error(t),
                     "reshape: [4,16] has 64 values; the new shape [5,3] holds 15");
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 3, (const int[]){-1, 4, -1}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16]: dimensions 0 and 2 of the new shape are "
                                        "both -1 (only one may be)");
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 2, (const int[]){0, 64}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16]: dimension 0 of the new shape is 0 (each "
                                        "must be at least 1, and one may be -1)");
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 5, (const int[]){1, 1, 1, 4, 16}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16]: a new shape needs 0 to 4 dimensions");
    qkv_tape_reset(t); /* a count below 0 is as wrong as one above 4 */
    ck_assert(qkv_reshape(t, x, -1, (const int[]){64}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16]: a new shape needs 0 to 4 dimensions");
    /* two dimensions, which a shape may have, but no sizes: the message
     * blamed the count ("a new shape needs 0 to 4 dimensions") */
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 2, NULL) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16]: no new shape (NULL) for 2 dimensions");
    qkv_tape_reset(t); /* one dimension needs its size too */
    ck_assert(qkv_reshape(t, x, 1, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16]: no new shape (NULL) for 1 dimensions");
    qkv_tape_reset(t); /* none: a scalar, which needs no sizes */
    ck_assert(qkv_reshape(t, x, 0, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16] has 64 values; the new shape [] holds 1");
    /* sizes whose product overflows: the count is wrong, not the last size
     * (the message blamed "dimension 3 ... is 65536") */
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 4, (const int[]){65536, 65536, 65536, 65536}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16] has 64 values; the new shape "
                                        "[65536,65536,65536,65536] holds more than a size can "
                                        "count");
    /* the same with a -1: no size at -1 can make up for sizes that
     * overflow already (their product is no divisor to try) */
    qkv_tape_reset(t);
    ck_assert(qkv_reshape(t, x, 4, (const int[]){0x7fffffff, 0x7fffffff, 0x7fffffff, -1}) ==
              qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [4,16] has 64 values; the new shape "
                                        "[2147483647,2147483647,2147483647,-1] cannot hold them "
                                        "with any size at -1");
    /* a -1 may stand for the largest size there is, 2^31 - 1, and no
     * more: tensors described and never read (a view reads no values) */
    qkv_tape_reset(t);
    qkv_real one = 0;
    qkv_tensor most = {&one, NULL, 0x7fffffff, 1, {0x7fffffff, 1, 1, 1}, 0};
    qkv_tensor *vm = qkv_reshape(t, &most, 2, (const int[]){1, -1});
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert(vm->ndim == 2 && vm->shape[0] == 1 && vm->shape[1] == 0x7fffffff);
    qkv_tensor over = {&one, NULL, (size_t)1 << 31, 2, {2, 1 << 30, 1, 1}, 0};
    ck_assert(qkv_reshape(t, &over, 1, (const int[]){-1}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "reshape: [2,1073741824] has 2147483648 values; the new "
                                        "shape [-1] cannot hold them with any size at -1");
    /* with gradients off, a view carries none */
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    ck_assert_ptr_null(qkv_reshape(t, x, 1, (const int[]){64})->grad);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_permute_moves_values_and_gradients_back)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = iota(3, (const int[]){2, 3, 4});
    qkv_tensor *y = qkv_permute(t, x, (const int[]){2, 0, 1}); /* [4,2,3] */
    ck_assert_int_eq(y->shape[0], 4);
    ck_assert_int_eq(y->shape[1], 2);
    ck_assert_int_eq(y->shape[2], 3);
    for (int a = 0; a < 4; a++) /* y[a,b,c] = x[b,c,a] */
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                ck_assert(y->data[(a * 2 + b) * 3 + c] == x->data[(b * 3 + c) * 4 + a]);
    /* a weight per output position comes back to the input position */
    qkv_tensor *w = qkv_tape_tensor(t, 3, y->shape, 0);
    for (size_t i = 0; i < w->numel; i++)
        w->data[i] = (qkv_real)i;
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, y, w))), QKV_OK);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                ck_assert(x->grad[(b * 3 + c) * 4 + a] == (a * 2 + b) * 3 + c);
    /* swapdims(-1, 0) is permute {2,1,0}; bad permutations are errors */
    qkv_tape_reset(t);
    qkv_tensor *s = qkv_swapdims(t, x, -1, 0);
    ck_assert(s->shape[0] == 4 && s->shape[1] == 3 && s->shape[2] == 2);
    ck_assert(s->data[1] == x->data[12]); /* s[0,0,1] = x[1,0,0] */
    ck_assert(qkv_permute(t, x, (const int[]){0, 0, 1}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "permute: [2,3,4]: the permutation must name each of its 3 dimensions once");
    qkv_tape_reset(t); /* -1 is the last dimension, -4 of three is none */
    ck_assert(qkv_permute(t, x, (const int[]){-4, 0, 1}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "permute: [2,3,4]: the permutation must name each of its 3 dimensions once");
    qkv_tape_reset(t); /* 3 of three is none either */
    ck_assert(qkv_permute(t, x, (const int[]){1, 3, 0}) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "permute: [2,3,4]: the permutation must name each of its 3 dimensions once");
    qkv_tape_reset(t); /* no permutation at all says so */
    ck_assert(qkv_permute(t, x, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "permute: [2,3,4]: no permutation (NULL)");
    qkv_tape_reset(t);
    ck_assert(qkv_swapdims(t, x, 0, 3) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "swapdims: dimension 3 is out of range for [2,3,4]");
    /* an input another tape made: swapdims names itself, not the permute
     * it is ("permute: input 0 was made on another tape, ...") */
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tensor *o = qkv_scale(u, x, 2);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_swapdims(t, o, 0, 1), "swapdims");
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_permute(t, o, (const int[]){1, 0, 2}), "permute");
    qkv_tape_free(u);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* permute's backward, copying into a gradient no node has filled yet,
 * gives what adding into zeros would: +0 where dy is -0 (0 + -0), not
 * the -0 itself, as add and sub do when they claim a gradient */
START_TEST(test_permute_gradient_of_minus_zero_is_plus_zero)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = iota(2, (const int[]){2, 3});
    qkv_tensor *b = qkv_scale(t, x, 1);                                /* a tape tensor: claimed */
    qkv_tensor *y = qkv_permute(t, b, (const int[]){1, 0});            /* [3,2]: y[a,c] = b[c,a] */
    const qkv_real mz = (qkv_real)-0.0, dy[6] = {mz, 1, mz, 2, mz, 3}; /* y's layout */
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 6), QKV_OK);
    const double want[6] = {0, 0, 0, 1, 2, 3}; /* b's layout: db[c,a] = dy[a,c] */
    for (int i = 0; i < 6; i++)
        ck_assert_msg(b->grad[i] == want[i] && !signbit(b->grad[i]), "db[%d] = %g", i,
                      (double)b->grad[i]);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

START_TEST(test_concat_and_slice_by_hand)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *a = iota(2, (const int[]){2, 2}); /* 0 1 / 2 3 */
    qkv_tensor *b = tensor_of(2, (const int[]){2, 1}, (const double[]){7, 8}, 1);
    qkv_tensor *ab[2] = {a, b};
    qkv_tensor *c = qkv_concat(t, 2, ab, -1); /* 0 1 7 / 2 3 8 */
    const double cv[6] = {0, 1, 7, 2, 3, 8};
    for (int i = 0; i < 6; i++)
        ck_assert(c->data[i] == cv[i]);
    qkv_tensor *s = qkv_slice(t, c, 1, 1, 2); /* 1 7 / 3 8 */
    const double sv[4] = {1, 7, 3, 8};
    for (int i = 0; i < 4; i++)
        ck_assert(s->data[i] == sv[i]);
    /* d(sum of the slice)/d: 1 where a column was kept */
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, s)), QKV_OK);
    const double ga[4] = {0, 1, 0, 1};
    for (int i = 0; i < 4; i++)
        ck_assert(a->grad[i] == ga[i]);
    ck_assert(b->grad[0] == 1 && b->grad[1] == 1);
    /* errors */
    qkv_tape_reset(t);
    qkv_tensor *bad[2] = {a, qkv_transpose(t, b)};
    ck_assert(qkv_concat(t, 2, bad, 1) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "concat: [2,2] and [1,2] (input 1): all sizes but dimension 1 must agree");
    /* a third dimension that the first input lacks: its sizes agree with
     * the first input's two, but it is another shape */
    qkv_tape_reset(t);
    qkv_tensor *deeper = tensor_of(3, (const int[]){2, 1, 3}, NULL, 0);
    qkv_tensor *mixed[2] = {a, deeper};
    ck_assert(qkv_concat(t, 2, mixed, 1) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "concat: [2,2] and [2,1,3] (input 1): all sizes but dimension 1 must agree");
    qkv_tensor_free(deeper);
    /* sizes whose sum overflows an int: two [2^30] inputs, described and
     * never read (the check comes before any copy), so no 8 GiB is needed */
    qkv_tape_reset(t);
    qkv_real one = 0;
    qkv_tensor huge = {&one, NULL, (size_t)1 << 30, 1, {1 << 30, 1, 1, 1}, 0};
    qkv_tensor *twice[2] = {&huge, &huge};
    ck_assert(qkv_concat(t, 2, twice, 0) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_SHAPE);
    /* it said "all sizes but dimension 0 must agree", and they do */
    ck_assert_str_eq(qkv_tape_error(t), "concat: [1073741824] and [1073741824] (input 1): "
                                        "dimension 0 would be over 2147483647 long");
    qkv_tape_reset(t);
    ck_assert(qkv_concat(t, 1, NULL, 0) == qkv_nil()); /* n is fine, the array is missing */
    ck_assert_str_eq(qkv_tape_error(t), "concat: no array of tensors (NULL)");
    qkv_tape_reset(t);
    ck_assert(qkv_slice(t, a, 0, 1, 2) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "slice: [2,2]: [1, 1 + 2) is not a non-empty range "
                                        "within [0, 2) of dimension 0");
    /* a negative start is not counted from the end (torch.narrow's -1 is
     * the last entry), and a length of 0 is refused */
    qkv_tape_reset(t);
    ck_assert(qkv_slice(t, a, 1, -1, 1) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "slice: [2,2]: [-1, -1 + 1) is not a non-empty range "
                                        "within [0, 2) of dimension 1");
    qkv_tape_reset(t);
    ck_assert(qkv_slice(t, a, 0, 0, 0) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "slice: [2,2]: [0, 0 + 0) is not a non-empty range "
                                        "within [0, 2) of dimension 0");
    qkv_tensor_free(a);
    qkv_tensor_free(b);
    qkv_tape_free(t);
}
END_TEST

/* concat where only some inputs take a gradient: the output records a
 * node when any input does, and each input's gradient is its own block of
 * dy, counted past the inputs that take none */
START_TEST(test_concat_gradients_with_inputs_that_take_none)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *c = tensor_of(2, (const int[]){2, 1}, (const double[]){5, 6}, 0);
    qkv_tensor *p = iota(2, (const int[]){2, 2});
    qkv_tensor *w = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 0);
    for (int first = 0; first < 2; first++) { /* c then p: 5 0 1 / 6 2 3; p then c */
        qkv_tape_reset(t);
        qkv_tensor_zero_grad(p);
        qkv_tensor *xs[2] = {first ? p : c, first ? c : p};
        qkv_tensor *y = qkv_concat(t, 2, xs, 1);
        ck_assert_ptr_nonnull(y->grad);
        ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, y, w))), QKV_OK);
        /* dp = w without its first column (c first) or its last (p first) */
        const double g[2][4] = {{2, 3, 5, 6}, {1, 2, 4, 5}};
        for (int i = 0; i < 4; i++)
            ck_assert_msg(p->grad[i] == g[first][i], "first %d: grad[%d] = %g", first, i,
                          (double)p->grad[i]);
    }
    qkv_tensor_free(c);
    qkv_tensor_free(p);
    qkv_tensor_free(w);
    qkv_tape_free(t);
}
END_TEST

/* concat takes up to QKV_CONCAT_MAX inputs, and no more */
START_TEST(test_concat_takes_up_to_its_maximum_of_inputs)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *one = tensor_of(1, (const int[]){1}, (const double[]){3}, 0);
    qkv_tensor **xs = malloc(sizeof *xs * (QKV_CONCAT_MAX + 1));
    ck_assert_ptr_nonnull(xs);
    for (int k = 0; k <= QKV_CONCAT_MAX; k++)
        xs[k] = one;
    qkv_tensor *y = qkv_concat(t, QKV_CONCAT_MAX, xs, 0);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert_int_eq(y->shape[0], QKV_CONCAT_MAX);
    ck_assert(y->data[0] == 3 && y->data[QKV_CONCAT_MAX - 1] == 3);
    qkv_tape_reset(t);
    ck_assert(qkv_concat(t, QKV_CONCAT_MAX + 1, xs, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "concat: needs 1 to 65536 tensors, got 65537");
    qkv_tape_reset(t); /* and at least one: none has no shape to give */
    ck_assert(qkv_concat(t, 0, xs, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "concat: needs 1 to 65536 tensors, got 0");
    qkv_tape_reset(t);
    ck_assert(qkv_concat(t, -1, xs, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "concat: needs 1 to 65536 tensors, got -1");
    free(xs);
    qkv_tensor_free(one);
    qkv_tape_free(t);
}
END_TEST

/* stack joins tensors of one shape along a new dimension, against
 * torch.stack (PyTorch 1.13) on a = 0..5 and b = 10..15, both [2,3] */
START_TEST(test_stack_by_hand_along_each_dimension)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *a = iota(2, (const int[]){2, 3});
    qkv_tensor *b = tensor_of(2, (const int[]){2, 3}, (const double[]){10, 11, 12, 13, 14, 15}, 1);
    qkv_tensor *ab[2] = {a, b};
    const double want[3][12] = {{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15},  /* dim 0: [2,2,3] */
                                {0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15},  /* dim 1: [2,2,3] */
                                {0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}}; /* dim -1: [2,3,2] */
    const int dims[3] = {0, 1, -1}, shapes[3][3] = {{2, 2, 3}, {2, 2, 3}, {2, 3, 2}};
    for (int k = 0; k < 3; k++) {
        qkv_tape_reset(t);
        qkv_tensor *y = qkv_stack(t, 2, ab, dims[k]);
        ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
        ck_assert_int_eq(y->ndim, 3);
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(y->shape[i], shapes[k][i]);
        for (int i = 0; i < 12; i++)
            ck_assert_msg(y->data[i] == want[k][i], "dim %d: y[%d] = %g", dims[k], i,
                          (double)y->data[i]);
    }
    /* backward slices dy back: along dim -1, dy = 1..12 gives a the odd
     * and b the even values (torch's a.grad and b.grad) */
    qkv_tensor *y = qkv_stack(t, 2, ab, -1);
    qkv_real dy[12];
    for (int i = 0; i < 12; i++)
        dy[i] = (qkv_real)(i + 1);
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 12), QKV_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(a->grad[i] == 2 * i + 1 && b->grad[i] == 2 * i + 2,
                      "da[%d] = %g, db[%d] = %g", i, (double)a->grad[i], i, (double)b->grad[i]);
    /* the same tensor twice, and one that takes no gradient: (a, c, a)
     * along dim 0; a's gradient is the sum of its two slices of dy */
    qkv_tensor_zero_grad(a);
    qkv_tensor *c = tensor_of(2, (const int[]){2, 3}, NULL, 0);
    qkv_tensor *aca[3] = {a, c, a};
    qkv_tape_reset(t);
    y = qkv_stack(t, 3, aca, 0);
    ck_assert(y->ndim == 3 && y->shape[0] == 3 && y->grad != NULL);
    qkv_real dy3[18];
    for (int i = 0; i < 18; i++)
        dy3[i] = (qkv_real)(i + 1);
    ck_assert_int_eq(qkv_backward_from(t, y, dy3, 18), QKV_OK);
    for (int i = 0; i < 6; i++) /* (i + 1) + (i + 13) */
        ck_assert_msg(a->grad[i] == 2 * i + 14, "da[%d] = %g", i, (double)a->grad[i]);
    /* without gradients, no node and no gradient */
    qkv_tensor *cc[2] = {c, c};
    qkv_tape_reset(t);
    y = qkv_stack(t, 2, cc, 1);
    ck_assert(y->grad == NULL && qkv_tape_nodes(t) == 0);
    /* scalars stack into a vector; one tensor gains a dimension of 1 */
    qkv_tape_reset(t);
    qkv_tensor *s2[2] = {qkv_sum(t, a), qkv_sum(t, b)}; /* 15 and 75 */
    y = qkv_stack(t, 2, s2, -1);
    ck_assert(y->ndim == 1 && y->shape[0] == 2 && y->data[0] == 15 && y->data[1] == 75);
    y = qkv_stack(t, 1, ab, 2);
    ck_assert(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 1);
    ck_assert(y->data[4] == 4);
    qkv_tensor_free(c);
    qkv_tensor_free(a);
    qkv_tensor_free(b);
    qkv_tape_free(t);
}
END_TEST

/* stack's refusals: each names the op and the shapes, as concat's do */
START_TEST(test_stack_refuses_bad_shapes_dims_and_counts)
{
    qkv_tape *t = qkv_tape_new(0, NULL), *u = qkv_tape_new(0, NULL);
    qkv_tensor *a = iota(2, (const int[]){2, 3});
    qkv_tensor *at = iota(2, (const int[]){3, 2});
    qkv_tensor *a3 = iota(3, (const int[]){2, 3, 1});
    qkv_tensor *x4 = iota(4, (const int[]){1, 2, 3, 1});
    EXPECT_ERROR_ON(t, qkv_stack(t, 3, (qkv_tensor *const[]){a, a, at}, 0), QKV_ERR_SHAPE,
                    "stack: [2,3] and [3,2] (input 2): every input must have the same shape");
    EXPECT_ERROR_ON(t, qkv_stack(t, 2, (qkv_tensor *const[]){a, a3}, 0), QKV_ERR_SHAPE,
                    "stack: [2,3] and [2,3,1] (input 1): every input must have the same shape");
    EXPECT_ERROR_ON(t, qkv_stack(t, 2, (qkv_tensor *const[]){x4, x4}, 0), QKV_ERR_SHAPE,
                    "stack: [1,2,3,1]: the result would have 5 dimensions, over the 4 "
                    "a tensor may have");
    /* a result of [2,3] stacked has 3 dimensions: dim in [-3, 2] */
    EXPECT_ERROR_ON(t, qkv_stack(t, 2, (qkv_tensor *const[]){a, a}, 3), QKV_ERR_ARG,
                    "stack: dimension 3 is out of range for [2,3] stacked (-3 to 2)");
    EXPECT_ERROR_ON(t, qkv_stack(t, 2, (qkv_tensor *const[]){a, a}, -4), QKV_ERR_ARG,
                    "stack: dimension -4 is out of range for [2,3] stacked (-3 to 2)");
    EXPECT_ERROR_ON(t, qkv_stack(t, 2, NULL, 0), QKV_ERR_ARG, "stack: no array of tensors (NULL)");
    EXPECT_ERROR_ON(t, qkv_stack(t, 0, (qkv_tensor *const[]){a}, 0), QKV_ERR_ARG,
                    "stack: needs 1 to 65536 tensors, got 0");
    EXPECT_ERROR_ON(t, qkv_stack(t, QKV_CONCAT_MAX + 1, (qkv_tensor *const[]){a}, 0), QKV_ERR_ARG,
                    "stack: needs 1 to 65536 tensors, got 65537");
    EXPECT_ERROR_ON(t, qkv_stack(t, 2, (qkv_tensor *const[]){a, NULL}, 0), QKV_ERR_ARG,
                    "stack: input is nil (NULL, or the result of a failed call)");
    /* an input whose gradient another tape records */
    qkv_tape_reset(t);
    qkv_tensor *other = qkv_scale(u, a, 2);
    expect_another_tapes_input(t, qkv_stack(t, 2, (qkv_tensor *const[]){other, a}, 0), "stack");
    /* after an error, nothing more happens */
    qkv_tape_reset(t);
    ck_assert(qkv_stack(t, 2, (qkv_tensor *const[]){a, at}, 0) == qkv_nil());
    ck_assert(qkv_stack(t, 2, (qkv_tensor *const[]){a, a}, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "stack: [2,3] and [3,2] (input 1): every input must have the same shape");
    qkv_tensor_free(a);
    qkv_tensor_free(at);
    qkv_tensor_free(a3);
    qkv_tensor_free(x4);
    qkv_tape_free(t);
    qkv_tape_free(u);
}
END_TEST

START_TEST(test_reductions_along_any_dimension)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = iota(3, (const int[]){2, 3, 2}); /* x[i,j,k] = 6i + 2j + k */
    qkv_tensor *s1 = qkv_sum_dim(t, x, 1, 0);        /* [2,2]: Σ_j = 18i + 6 + 3k */
    ck_assert_int_eq(s1->ndim, 2);
    const double s1v[4] = {6, 9, 24, 27};
    for (int i = 0; i < 4; i++)
        ck_assert(s1->data[i] == s1v[i]);
    qkv_tensor *m0 = qkv_mean_dim(t, x, 0, 1); /* [1,3,2]: 3 + 2j + k */
    ck_assert(m0->ndim == 3 && m0->shape[0] == 1 && m0->shape[1] == 3);
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 2; k++)
            ck_assert(m0->data[j * 2 + k] == 3 + 2 * j + k);
    x->data[3] = 11;                           /* x[0,1,1]: now the maximum of its column */
    qkv_tensor *mx = qkv_max_dim(t, x, -2, 0); /* [2,2] */
    const double mxv[4] = {4, 11, 10, 11};
    for (int i = 0; i < 4; i++)
        ck_assert(mx->data[i] == mxv[i]);
    /* the gradient goes to the first maximum only */
    x->data[5] = 11; /* a tie at x[0,2,1] */
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_max_dim(t, x, 1, 1))), QKV_OK);
    const double g[12] = {0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1};
    for (int i = 0; i < 12; i++)
        ck_assert_msg(x->grad[i] == g[i], "grad[%d] = %g", i, (double)x->grad[i]);
    /* max_dim's gradient adds to what x already has: with sum(x) recorded
     * after it (so run before it backward), the first maxima get 1 + 1 */
    qkv_tensor_zero_grad(x);
    qkv_tape_reset(t);
    qkv_tensor *mxs = qkv_sum(t, qkv_max_dim(t, x, 1, 1));
    ck_assert_int_eq(qkv_backward(t, qkv_add(t, mxs, qkv_sum(t, x))), QKV_OK);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(x->grad[i] == 1 + g[i], "grad[%d] = %g", i, (double)x->grad[i]);
    /* the mean's gradient is 1/n along the dimension */
    qkv_tensor_zero_grad(x);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mean_dim(t, x, 1, 0))), QKV_OK);
    for (int i = 0; i < 12; i++)
        ASSERT_NEAR(x->grad[i], 1.0 / 3, REAL_EPS);
    /* sum_dim's and mean_dim's gradients add to what x already has too:
     * with 2·sum(x) recorded after them, 1 + 2 and 1/3 + 2 */
    for (int mean = 0; mean < 2; mean++) {
        qkv_tensor_zero_grad(x);
        qkv_tape_reset(t);
        qkv_tensor *r = mean ? qkv_mean_dim(t, x, 1, 0) : qkv_sum_dim(t, x, 1, 0);
        qkv_tensor *l = qkv_add(t, qkv_sum(t, r), qkv_scale(t, qkv_sum(t, x), 2));
        ck_assert_int_eq(qkv_backward(t, l), QKV_OK);
        for (int i = 0; i < 12; i++)
            ASSERT_NEAR(x->grad[i], (mean ? 1.0 / 3 : 1) + 2, 4 * REAL_EPS);
    }
    qkv_tape_reset(t);
    ck_assert(qkv_sum_dim(t, x, -4, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "sum_dim: dimension -4 is out of range for [2,3,2]");
    qkv_tape_reset(t);
    ck_assert(qkv_max_dim(t, qkv_sum(t, x), 0, 0) == qkv_nil()); /* a scalar */
    ck_assert_str_eq(qkv_tape_error(t), "max_dim: [] has no dimension to reduce");
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* max_dim along a dimension that is not the last, with NaNs in some
 * columns: each column's own entries decide (a NaN wins, as in PyTorch),
 * and the gradient goes to the row that won. A NaN in one column once
 * stopped the scan of another. */
START_TEST(test_max_dim_keeps_each_column_to_itself_with_nans)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = qkv_tensor_new(2, (const int[]){4, 3}, 1, NULL);
    const qkv_real v[12] = {0, 0, NAN, 1, 2, 0, 7, 8, 0, 3, NAN, 0};
    memcpy(x->data, v, sizeof v);
    qkv_tensor *m = qkv_max_dim(t, x, 0, 0); /* [3]: 7 (row 2), NaN (row 3), NaN (row 0) */
    ck_assert(m->data[0] == 7 && isnan(m->data[1]) && isnan(m->data[2]));
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, m, m))), QKV_OK);
    for (int i = 0; i < 12; i++) { /* d(m²) = 2m at the winner: 14, NaN, NaN */
        const int win = i == 6 || i == 10 || i == 2;
        ck_assert_msg(win ? (i == 6 ? x->grad[i] == 14 : isnan(x->grad[i])) : x->grad[i] == 0,
                      "grad[%d] = %g", i, (double)x->grad[i]);
    }
    /* two NaNs in one column: the first wins, and takes the gradient, as
     * torch.max(x, 0) does for [[NaN], [1], [NaN], [2]] (index 0) */
    qkv_tensor *y = tensor_of(2, (const int[]){4, 1}, (const double[]){NAN, 1, NAN, 2}, 1);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_max_dim(t, y, 0, 0))), QKV_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(y->grad[i] == (i == 0), "grad[%d] = %g", i, (double)y->grad[i]);
    qkv_tensor_free(y);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* min_dim mirrors max_dim, against torch.min(x, dim) (PyTorch 1.13):
 * the first minimum takes the gradient, a NaN counts as the minimum (the
 * first NaN of a column), -inf is an ordinary minimum, and of 0 and -0
 * (equal) the first is kept with its sign. */
START_TEST(test_min_dim_by_hand_with_ties_and_nans)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    /* torch.min(x, 0) of these [4,3] values: (-7, NaN, NaN) at rows
     * (2, 3, 0); the gradient of sum(m²) is -14, NaN and NaN there */
    const double v[12] = {0, 0, NAN, 1, -2, 0, -7, 8, 0, 3, NAN, 0};
    qkv_tensor *x = tensor_of(2, (const int[]){4, 3}, v, 1);
    qkv_tensor *m = qkv_min_dim(t, x, 0, 0);
    ck_assert_msg(!qkv_tensor_is_nil(m), "%s", qkv_tape_error(t));
    ck_assert(m->ndim == 1 && m->shape[0] == 3);
    ck_assert(m->data[0] == -7 && isnan(m->data[1]) && isnan(m->data[2]));
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, m, m))), QKV_OK);
    for (int i = 0; i < 12; i++) {
        const int ok = i == 6              ? x->grad[i] == -14
                       : i == 10 || i == 2 ? isnan(x->grad[i])
                                           : x->grad[i] == 0;
        ck_assert_msg(ok, "grad[%d] = %g", i, (double)x->grad[i]);
    }
    /* two NaNs in a column: the first wins (torch: index 0) */
    qkv_tensor *y = tensor_of(2, (const int[]){4, 1}, (const double[]){NAN, 1, NAN, -2}, 1);
    qkv_tape_reset(t);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_min_dim(t, y, 0, 0))), QKV_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(y->grad[i] == (i == 0), "grad[%d] = %g", i, (double)y->grad[i]);
    /* ties along the last dimension, keepdim: rows (3, 1, 1) and (-inf,
     * -inf, 2) give [[1], [-inf]], the gradient at columns 1 and 0 */
    const double zv[6] = {3, 1, 1, -INFINITY, -INFINITY, 2};
    qkv_tensor *z = tensor_of(2, (const int[]){2, 3}, zv, 1);
    qkv_tape_reset(t);
    qkv_tensor *mz = qkv_min_dim(t, z, -1, 1);
    ck_assert(mz->ndim == 2 && mz->shape[0] == 2 && mz->shape[1] == 1);
    ck_assert(mz->data[0] == 1 && mz->data[1] == -INFINITY);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, mz)), QKV_OK);
    const double gz[6] = {0, 1, 0, 1, 0, 0};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(z->grad[i] == gz[i], "grad[%d] = %g", i, (double)z->grad[i]);
    /* 0 and -0 tie: torch.min gives 0 for (0, -0) and -0 for (-0, 0) */
    qkv_tensor *zs = tensor_of(2, (const int[]){2, 2}, (const double[]){0, -0.0, -0.0, 0}, 0);
    qkv_tape_reset(t);
    qkv_tensor *ms = qkv_min_dim(t, zs, 1, 0);
    ck_assert(ms->data[0] == 0 && !signbit(ms->data[0]));
    ck_assert(ms->data[1] == 0 && signbit(ms->data[1]));
    /* errors name the op and the shape */
    EXPECT_ERROR_ON(t, qkv_min_dim(t, z, 2, 0), QKV_ERR_ARG,
                    "min_dim: dimension 2 is out of range for [2,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_min_dim(t, qkv_sum(t, z), 0, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "min_dim: [] has no dimension to reduce");
    qkv_tensor_free(zs);
    qkv_tensor_free(z);
    qkv_tensor_free(y);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* argmax_dim against torch.argmax (PyTorch 1.13) on x [2,3,2] =
 * [[[1,5],[3,5],[3,-1]], [[NaN,-inf],[2,-inf],[NaN,-inf]]]: ties go to
 * the first maximum, a NaN is the maximum (the first NaN), a column of
 * -inf gives 0. No tape is involved. */
START_TEST(test_argmax_dim_by_hand_with_ties_and_nans)
{
    const double inf = INFINITY;
    const double v[12] = {1, 5, 3, 5, 3, -1, NAN, -inf, 2, -inf, NAN, -inf};
    qkv_tensor *x = tensor_of(3, (const int[]){2, 3, 2}, v, 1);
    const int dims[5] = {0, 1, -1, 2, -3}, count[5] = {6, 4, 6, 6, 6};
    const int want[5][6] = {{1, 0, 0, 0, 1, 0},
                            {1, 0, 0, 0},
                            {1, 1, 0, 0, 0, 0},
                            {1, 1, 0, 0, 0, 0},
                            {1, 0, 0, 0, 1, 0}};
    for (int k = 0; k < 5; k++) {
        int got[8];
        for (int i = 0; i < 8; i++)
            got[i] = -7;
        qkv_error err = qkv_error_none();
        /* room for 8: only the count the result has is written */
        ck_assert_int_eq(qkv_argmax_dim(x, dims[k], got, 8, &err), QKV_OK);
        ck_assert_int_eq(err.status, QKV_OK);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(got[i] == (i < count[k] ? want[k][i] : -7), "dim %d: [%d] = %d", dims[k],
                          i, got[i]);
    }
    /* exactly the room needed, and err NULL; the gradient is untouched */
    int got[6];
    ck_assert_int_eq(qkv_argmax_dim(x, -1, got, 6, NULL), QKV_OK);
    ck_assert(got[0] == 1 && got[5] == 0);
    for (int i = 0; i < 12; i++)
        ck_assert(x->grad[i] == 0);
    /* 0 and -0 tie: the first (torch: 0 for both orders) */
    qkv_tensor *z = tensor_of(2, (const int[]){2, 2}, (const double[]){0, -0.0, -0.0, 0}, 0);
    ck_assert_int_eq(qkv_argmax_dim(z, 1, got, 2, NULL), QKV_OK);
    ck_assert(got[0] == 0 && got[1] == 0);
    /* a tape tensor: read as it is, and the tape records nothing */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *y = qkv_scale(t, z, -1); /* -0 0 / 0 -0 */
    const size_t nodes = qkv_tape_nodes(t);
    y->data[3] = 4;
    ck_assert_int_eq(qkv_argmax_dim(y, 0, got, 2, NULL), QKV_OK);
    ck_assert(got[0] == 0 && got[1] == 1);
    ck_assert_uint_eq(qkv_tape_nodes(t), nodes);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    qkv_tape_free(t);
    qkv_tensor_free(z);
    qkv_tensor_free(x);
}
END_TEST

/* argmax_dim's refusals: a status and a message in err, out not written */
START_TEST(test_argmax_dim_refuses_bad_dims_room_and_nulls)
{
    qkv_tensor *x = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 6, 5, 4}, 0);
    int got[3] = {-7, -7, -7};
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_argmax_dim(x, 2, got, 3, &err), QKV_ERR_ARG);
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "argmax_dim: dimension 2 is out of range for [2,3]");
    ck_assert_int_eq(qkv_argmax_dim(x, -3, got, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "argmax_dim: dimension -3 is out of range for [2,3]");
    /* along dimension 0 the result has 3 indices; room for 2 is refused */
    ck_assert_int_eq(qkv_argmax_dim(x, 0, got, 2, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "argmax_dim: [2,3] along dimension 0 gives 3 indices, and out has room for 2");
    ck_assert_int_eq(qkv_argmax_dim(x, 0, NULL, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "argmax_dim: no array for the indices (NULL)");
    ck_assert_int_eq(qkv_argmax_dim(NULL, 0, got, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "argmax_dim: input is nil (NULL, or the result of a failed call)");
    ck_assert_int_eq(qkv_argmax_dim(qkv_nil(), 0, got, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "argmax_dim: input is nil (NULL, or the result of a failed call)");
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *s = qkv_sum(t, x);
    ck_assert_int_eq(qkv_argmax_dim(s, 0, got, 3, &err), QKV_ERR_SHAPE);
    ck_assert_str_eq(err.message, "argmax_dim: [] has no dimension to reduce");
    ck_assert_int_eq(qkv_argmax_dim(s, 0, got, 3, NULL), QKV_ERR_SHAPE); /* err may be NULL */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(got[i], -7);
    ck_assert_int_eq(qkv_argmax_dim(x, 0, got, 3, &err), QKV_OK); /* 1 1 1 */
    ck_assert(got[0] == 1 && got[1] == 1 && got[2] == 1);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* argmin_dim, worked by hand and checked against torch.argmin (PyTorch
 * 1.13) on x [2,3,2] = [[[1,5],[3,5],[3,-1]], [[NaN,inf],[2,inf],[NaN,inf]]]:
 * ties go to the first minimum, a NaN is the minimum (the first NaN), a
 * column of +inf gives 0. No tape is involved. */
START_TEST(test_argmin_dim_by_hand_with_ties_and_nans)
{
    const double inf = INFINITY;
    const double v[12] = {1, 5, 3, 5, 3, -1, NAN, inf, 2, inf, NAN, inf};
    qkv_tensor *x = tensor_of(3, (const int[]){2, 3, 2}, v, 1);
    const int dims[5] = {0, 1, -1, 2, -3}, count[5] = {6, 4, 6, 6, 6};
    const int want[5][6] = {{1, 0, 1, 0, 1, 0},
                            {0, 2, 0, 0},
                            {0, 0, 1, 0, 0, 0},
                            {0, 0, 1, 0, 0, 0},
                            {1, 0, 1, 0, 1, 0}};
    for (int k = 0; k < 5; k++) {
        int got[8];
        for (int i = 0; i < 8; i++)
            got[i] = -7;
        qkv_error err = qkv_error_none();
        /* room for 8: only the count the result has is written */
        ck_assert_int_eq(qkv_argmin_dim(x, dims[k], got, 8, &err), QKV_OK);
        ck_assert_int_eq(err.status, QKV_OK);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(got[i] == (i < count[k] ? want[k][i] : -7), "dim %d: [%d] = %d", dims[k],
                          i, got[i]);
    }
    for (int i = 0; i < 12; i++)
        ck_assert(x->grad[i] == 0);
    /* 0 and -0 tie: the first (torch: 0 for both orders) */
    int got[2];
    qkv_tensor *z = tensor_of(2, (const int[]){2, 2}, (const double[]){0, -0.0, -0.0, 0}, 0);
    ck_assert_int_eq(qkv_argmin_dim(z, 1, got, 2, NULL), QKV_OK);
    ck_assert(got[0] == 0 && got[1] == 0);
    /* a tape tensor: read as it is, and the tape records nothing */
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *y = qkv_scale(t, z, -1); /* -0 0 / 0 -0 */
    const size_t nodes = qkv_tape_nodes(t);
    y->data[3] = -4;
    ck_assert_int_eq(qkv_argmin_dim(y, 0, got, 2, NULL), QKV_OK);
    ck_assert(got[0] == 0 && got[1] == 1);
    ck_assert_uint_eq(qkv_tape_nodes(t), nodes);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    qkv_tape_free(t);
    qkv_tensor_free(z);
    qkv_tensor_free(x);
}
END_TEST

/* argmin_dim's refusals are argmax_dim's, each message naming argmin_dim */
START_TEST(test_argmin_dim_refuses_bad_dims_room_and_nulls)
{
    qkv_tensor *x = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 6, 5, 4}, 0);
    int got[3] = {-7, -7, -7};
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_argmin_dim(x, 2, got, 3, &err), QKV_ERR_ARG);
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "argmin_dim: dimension 2 is out of range for [2,3]");
    ck_assert_int_eq(qkv_argmin_dim(x, -3, got, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "argmin_dim: dimension -3 is out of range for [2,3]");
    ck_assert_int_eq(qkv_argmin_dim(x, 0, got, 2, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "argmin_dim: [2,3] along dimension 0 gives 3 indices, and out has room for 2");
    ck_assert_int_eq(qkv_argmin_dim(x, 0, NULL, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "argmin_dim: no array for the indices (NULL)");
    ck_assert_int_eq(qkv_argmin_dim(NULL, 0, got, 3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "argmin_dim: input is nil (NULL, or the result of a failed call)");
    ck_assert_int_eq(qkv_argmin_dim(qkv_nil(), 0, got, 3, &err), QKV_ERR_ARG);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *s = qkv_sum(t, x);
    ck_assert_int_eq(qkv_argmin_dim(s, 0, got, 3, &err), QKV_ERR_SHAPE);
    ck_assert_str_eq(err.message, "argmin_dim: [] has no dimension to reduce");
    ck_assert_int_eq(qkv_argmin_dim(s, 0, got, 3, NULL), QKV_ERR_SHAPE); /* err may be NULL */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(got[i], -7);
    ck_assert_int_eq(qkv_argmin_dim(x, 0, got, 3, &err), QKV_OK); /* 0 0 0 */
    ck_assert(got[0] == 0 && got[1] == 0 && got[2] == 0);
    ck_assert_int_eq(qkv_argmin_dim(x, 1, got, 2, &err), QKV_OK); /* 0 2 */
    ck_assert(got[0] == 0 && got[1] == 2);
    qkv_tape_free(t);
    qkv_tensor_free(x);
}
END_TEST

/* logsumexp along a dimension, against CPython's math module
 * (math.log(math.e + math.e**2 + math.e**3) and so on, each value as
 * CPython 3 prints it) and PyTorch 1.13's torch.logsumexp in float64:
 * stable for large inputs (the row maximum subtracted first), and at its
 * edges. */
START_TEST(test_logsumexp_dim_by_hand_and_at_its_edges)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double inf = INFINITY;
    const double xs[21] = {1, 2,    3,    1000, 1000, 999, -1e4, -1e4, -1e4, -inf, 0,
                           1, -inf, -inf, -inf, inf,  1,   2,    NAN,  1,    2};
    qkv_tensor *x = tensor_of(2, (const int[]){7, 3}, xs, 1);
    qkv_tensor *y = qkv_logsumexp_dim(t, x, 1, 1);
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
    ck_assert(y->ndim == 2 && y->shape[0] == 7 && y->shape[1] == 1);
    /* rows: e, e², e³; 1000 twice and 999 (torch: 1000.8619948040582,
     * e^1000 would overflow); -1e4 three times (-1e4 + log 3, where e^-1e4
     * underflows); -inf, 0, 1 (log(1 + e)); all -inf (-inf, as torch
     * gives); +inf (inf, torch's); NaN (NaN, torch's) */
    const double want[4] = {3.40760596444438, 1000.8619948040582, -9998.901387711332,
                            1.3132616875182228};
    for (int r = 0; r < 4; r++)
        ASSERT_NEAR(y->data[r], want[r], 4 * REAL_EPS * fabs(want[r]));
    ck_assert(y->data[4] == -INFINITY && y->data[5] == INFINITY && isnan(y->data[6]));
    /* dx = dy·e^(x - y), the softmax of the row; torch gives the same but
     * for the row of -inf (NaN, where this gives 0, as qkv_softmax does)
     * and NaN at +inf (e^(inf - inf)) */
    const qkv_real dy[7] = {1, 2, 1, 1, 3, 1, 1};
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 7), QKV_OK);
    const double g[12] = {0.09003057317038048,
                          0.2447284710547977,
                          0.665240955774822,
                          2 * 0.4223187982515182,
                          2 * 0.4223187982515182,
                          2 * 0.1553624034969636,
                          1.0 / 3,
                          1.0 / 3,
                          1.0 / 3,
                          0,
                          0.2689414213699951,
                          0.7310585786300049};
    for (int i = 0; i < 12; i++)
        ASSERT_NEAR(x->grad[i], g[i], 4 * REAL_EPS);
    for (int i = 12; i < 15; i++)
        ck_assert_msg(x->grad[i] == 0, "grad[%d] = %g, expected 0", i, (double)x->grad[i]);
    ck_assert(isnan(x->grad[15]) && x->grad[16] == 0 && x->grad[17] == 0);
    for (int i = 18; i < 21; i++)
        ck_assert_msg(isnan(x->grad[i]), "grad[%d] = %g, expected NaN", i, (double)x->grad[i]);
    /* a second backward adds to what the first left */
    qkv_tape_reset(t);
    y = qkv_logsumexp_dim(t, x, 1, 1);
    ck_assert_int_eq(qkv_backward_from(t, y, dy, 7), QKV_OK);
    for (int i = 0; i < 12; i++)
        ASSERT_NEAR(x->grad[i], 2 * g[i], 8 * REAL_EPS);
    /* along dimension 0 without keepdim: a + log 2 for columns (a, a) */
    qkv_tensor *c = tensor_of(2, (const int[]){2, 3}, (const double[]){0, 1, 2, 0, 1, 2}, 0);
    qkv_tape_reset(t);
    qkv_tensor *yc = qkv_logsumexp_dim(t, c, -2, 0);
    ck_assert(yc->ndim == 1 && yc->shape[0] == 3);
    const double wc[3] = {0.6931471805599453, 1.6931471805599454, 2.6931471805599454};
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(yc->data[i], wc[i], 4 * REAL_EPS * wc[i]);
    /* errors name the op and the shape */
    EXPECT_ERROR_ON(t, qkv_logsumexp_dim(t, c, 2, 0), QKV_ERR_ARG,
                    "logsumexp_dim: dimension 2 is out of range for [2,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_logsumexp_dim(t, qkv_sum(t, c), 0, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "logsumexp_dim: [] has no dimension to reduce");
    qkv_tensor_free(c);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

/* The variance along a dimension, two-pass (the mean first, then
 * Σ(x - mean)²/(n - correction)), against hand values that PyTorch 1.13's
 * torch.var(x, dim, correction=c, keepdim=k) gives in float64 too: rows
 * 1..4 give 5/3 (c = 1), and so do 10001..10004, exact in float, where
 * Σx² - n·mean² in float would lose every digit. */
START_TEST(test_var_dim_by_hand_and_at_its_edges)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    const double xs[20] = {1,     2,     3, 4,        2, 2, 2, 2,   10001, 10002,
                           10003, 10004, 1, INFINITY, 2, 3, 1, NAN, 2,     3};
    qkv_tensor *x = tensor_of(2, (const int[]){5, 4}, xs, 1);
    qkv_tensor *y = qkv_var_dim(t, x, 1, 1, 1);
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s", qkv_tape_error(t));
    ck_assert(y->ndim == 2 && y->shape[0] == 5 && y->shape[1] == 1);
    ASSERT_NEAR(y->data[0], 5.0 / 3, 2 * REAL_EPS);
    ck_assert(y->data[1] == 0);
    ASSERT_NEAR(y->data[2], 5.0 / 3, 2 * REAL_EPS);
    ck_assert(isnan(y->data[3]) && isnan(y->data[4])); /* inf - inf; NaN: as torch */
    /* dx = dy·2(x - mean)/(n - 1): -1, -1/3, 1/3, 1 for dy = 1; 0 for a
     * constant row; torch's -inf, NaN, -inf, -inf for the row with +inf
     * (x - inf, and inf - inf), NaN for the row with NaN */
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
    const double g[4] = {-1, -1.0 / 3, 1.0 / 3, 1};
    for (int i = 0; i < 4; i++) {
        ASSERT_NEAR(x->grad[i], g[i], 2 * REAL_EPS);
        ck_assert(x->grad[4 + i] == 0);
        ASSERT_NEAR(x->grad[8 + i], g[i], 2 * REAL_EPS);
        ck_assert(i == 1 ? isnan(x->grad[12 + i]) : x->grad[12 + i] == -INFINITY);
        ck_assert(isnan(x->grad[16 + i]));
    }
    /* along dimension 0 without keepdim, correction 0: columns (1, 3),
     * (2, 6), (3, 9) give 1, 4, 9, and dx = dy·(x - mean) = ∓dy·1, ∓dy·2,
     * ∓dy·3 for dy = 1, 2, 3 */
    qkv_tensor *c = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 3, 6, 9}, 1);
    qkv_tape_reset(t);
    qkv_tensor *yc = qkv_var_dim(t, c, -2, 0, 0);
    ck_assert(yc->ndim == 1 && yc->shape[0] == 3);
    ck_assert(yc->data[0] == 1 && yc->data[1] == 4 && yc->data[2] == 9);
    ck_assert_int_eq(qkv_backward_from(t, yc, (const qkv_real[]){1, 2, 3}, 3), QKV_OK);
    const double gc[6] = {-1, -4, -9, 1, 4, 9};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(c->grad[i] == gc[i], "grad[%d] = %g, expected %g", i, (double)c->grad[i],
                      gc[i]);
    /* a second backward adds to what the first left */
    qkv_tape_reset(t);
    yc = qkv_var_dim(t, c, -2, 0, 0);
    ck_assert_int_eq(qkv_backward_from(t, yc, (const qkv_real[]){1, 2, 3}, 3), QKV_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(c->grad[i] == 2 * gc[i], "grad[%d] = %g, expected %g", i, (double)c->grad[i],
                      2 * gc[i]);
    /* a single entry has variance 0 with correction 0 */
    qkv_tensor *one = tensor_of(2, (const int[]){1, 3}, (const double[]){5, 6, 7}, 0);
    qkv_tape_reset(t);
    qkv_tensor *y1 = qkv_var_dim(t, one, 0, 0, 0);
    ck_assert(y1->data[0] == 0 && y1->data[1] == 0 && y1->data[2] == 0);
    /* no node while gradients are off */
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 0);
    y = qkv_var_dim(t, x, 1, 1, 0);
    ck_assert(!qkv_tensor_is_nil(y) && y->grad == NULL);
    ck_assert_uint_eq(qkv_tape_nodes(t), 0);
    qkv_tape_set_grad(t, 1);
    /* errors: n - correction must be at least 1 (torch gives NaN or inf),
     * correction 0 or 1, a dimension in range, a dimension at all */
    EXPECT_ERROR_ON(t, qkv_var_dim(t, one, 0, 1, 0), QKV_ERR_SHAPE,
                    "var_dim: [1,3] has 1 entry along dimension 0, and correction 1 needs at "
                    "least 2");
    EXPECT_ERROR_ON(t, qkv_var_dim(t, c, 1, 2, 0), QKV_ERR_ARG,
                    "var_dim: correction 2 must be 0 or 1");
    EXPECT_ERROR_ON(t, qkv_var_dim(t, c, 1, -1, 0), QKV_ERR_ARG,
                    "var_dim: correction -1 must be 0 or 1");
    EXPECT_ERROR_ON(t, qkv_var_dim(t, c, 2, 1, 0), QKV_ERR_ARG,
                    "var_dim: dimension 2 is out of range for [2,3]");
    EXPECT_ERROR_ON(t, qkv_var_dim(t, qkv_nil(), 0, 1, 0), QKV_ERR_ARG,
                    "var_dim: input is nil (NULL, or the result of a failed call)");
    qkv_tape_reset(t);
    ck_assert(qkv_var_dim(t, qkv_sum(t, c), 0, 0, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "var_dim: [] has no dimension to reduce");
    qkv_tape *u = qkv_tape_new(0, NULL);
    qkv_tape_reset(t);
    expect_another_tapes_input(t, qkv_var_dim(t, qkv_scale(u, c, 2), 0, 1, 0), "var_dim");
    qkv_tape_free(u);
    qkv_tensor_free(one);
    qkv_tensor_free(c);
    qkv_tensor_free(x);
    qkv_tape_free(t);
}
END_TEST

Suite *shape_suite(void)
{
    Suite *s = suite_create("shape");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_reshape_is_a_view_that_shares_values_and_gradients);
    tcase_add_test(tc, test_permute_moves_values_and_gradients_back);
    tcase_add_test(tc, test_permute_gradient_of_minus_zero_is_plus_zero);
    tcase_add_test(tc, test_concat_and_slice_by_hand);
    tcase_add_test(tc, test_concat_gradients_with_inputs_that_take_none);
    tcase_add_test(tc, test_concat_takes_up_to_its_maximum_of_inputs);
    tcase_add_test(tc, test_stack_by_hand_along_each_dimension);
    tcase_add_test(tc, test_stack_refuses_bad_shapes_dims_and_counts);
    tcase_add_test(tc, test_reductions_along_any_dimension);
    tcase_add_test(tc, test_max_dim_keeps_each_column_to_itself_with_nans);
    tcase_add_test(tc, test_min_dim_by_hand_with_ties_and_nans);
    tcase_add_test(tc, test_argmax_dim_by_hand_with_ties_and_nans);
    tcase_add_test(tc, test_argmax_dim_refuses_bad_dims_room_and_nulls);
    tcase_add_test(tc, test_argmin_dim_by_hand_with_ties_and_nans);
    tcase_add_test(tc, test_argmin_dim_refuses_bad_dims_room_and_nulls);
    tcase_add_test(tc, test_logsumexp_dim_by_hand_and_at_its_edges);
    tcase_add_test(tc, test_var_dim_by_hand_and_at_its_edges);
    suite_add_tcase(s, tc);
    return s;
}
