/*
 * test_tensor.c - heap tensors: creation, nil, shapes, printing.
 */
#include <stdint.h>
#include <string.h>

#include "tests.h"

START_TEST(test_tensor_new_is_zero_filled_with_its_shape)
{
    qkv_tensor *t = qkv_tensor_new(3, (const int[]){2, 3, 4}, 1, NULL);
    ck_assert(!qkv_tensor_is_nil(t));
    ck_assert_uint_eq(t->numel, 24);
    ck_assert_int_eq(t->ndim, 3);
    ck_assert_int_eq(t->shape[2], 4);
    ck_assert_int_eq(t->shape[3], 1);
    ck_assert_ptr_nonnull(t->grad);
    /* qkv_tensor_free frees only what says it is the heap's */
    ck_assert_uint_eq(t->flags, QKV_TENSOR_HEAP);
    for (size_t i = 0; i < t->numel; i++) {
        ck_assert(t->data[i] == 0);
        ck_assert(t->grad[i] == 0);
    }
    qkv_tensor_free(t);
}
END_TEST

START_TEST(test_scalar_tensor_has_one_element)
{
    qkv_tensor *t = qkv_tensor_new(0, NULL, 0, NULL);
    ck_assert(!qkv_tensor_is_nil(t));
    ck_assert_uint_eq(t->numel, 1);
    ck_assert_ptr_null(t->grad);
    qkv_tensor_free(t);
}
END_TEST

START_TEST(test_bad_shapes_give_nil_not_null)
{
    ck_assert(qkv_tensor_new(2, (const int[]){3, 0}, 0, NULL) == qkv_nil());
    ck_assert(qkv_tensor_new(5, (const int[]){1, 1, 1, 1, 1}, 0, NULL) == qkv_nil());
    ck_assert(qkv_tensor_new(-1, NULL, 0, NULL) == qkv_nil());
    /* 2^31-1 cubed overflows size_t on 64-bit machines too (after sizeof) */
    ck_assert(qkv_tensor_new(3, (const int[]){INT32_MAX, INT32_MAX, INT32_MAX}, 0, NULL) ==
              qkv_nil());
    /* 2·(2^31-1)² ≈ 9.2e18 values fit a 64-bit size_t, but not their bytes
     * (4 or 8 each): the count alone must not pass, and a tape tensor of
     * that shape is refused, naming it */
    size_t n = 0;
    const int big[3] = {INT32_MAX, INT32_MAX, 2};
    ck_assert_int_eq(qkv_shape_numel(3, big, &n), QKV_ERR_NOMEM);
    qkv_tape *t = qkv_tape_new(0, NULL);
    ck_assert(qkv_tape_tensor(t, 3, big, 0) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "tensor: the size of the shape [2147483647,2147483647,2] overflows");
    qkv_tape_free(t);
    ck_assert(qkv_tensor_is_nil(qkv_nil()));
    ck_assert(qkv_tensor_is_nil(NULL));
    ck_assert_uint_eq(qkv_nil()->numel, 0);
}
END_TEST

START_TEST(test_free_accepts_null_and_nil)
{
    qkv_tensor_free(NULL);
    qkv_tensor_free(qkv_nil());
    qkv_tensor_zero_grad(NULL);
}
END_TEST

START_TEST(test_shape_str_and_set)
{
    char buf[32];
    qkv_tensor *t = qkv_tensor_new(2, (const int[]){4, 8}, 0, NULL);
    qkv_shape_str(t, buf, sizeof buf);
    ck_assert_str_eq(buf, "[4,8]");
    qkv_shape_str(qkv_nil(), buf, sizeof buf);
    ck_assert_str_eq(buf, "nil");
    qkv_real v[32] = {0};
    v[5] = 2.5f;
    ck_assert_int_eq(qkv_tensor_set(t, v, 31), QKV_ERR_SHAPE);
    ck_assert_int_eq(qkv_tensor_set(t, v, 32), QKV_OK);
    ck_assert(t->data[5] == 2.5f);
    /* the same sizes with another ndim are another shape */
    qkv_tensor *u = qkv_tensor_new(3, (const int[]){4, 8, 1}, 0, NULL);
    qkv_tensor *w = qkv_tensor_new(2, (const int[]){4, 8}, 0, NULL);
    ck_assert(!qkv_tensor_same_shape(t, u) && !qkv_tensor_same_shape(u, t));
    ck_assert(qkv_tensor_same_shape(t, w));
    qkv_tensor_free(u);
    qkv_tensor_free(w);
    qkv_tensor_free(t);
}
END_TEST

/* What qkv_tensor_print(t, f, max_values) writes, in buf (zeroed
 * first); fails the test if it writes nothing. */
static void print_to(const qkv_tensor *t, size_t max_values, char *buf, size_t size)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    qkv_tensor_print(t, f, max_values);
    rewind(f);
    memset(buf, 0, size);
    ck_assert_uint_gt(fread(buf, 1, size - 1, f), 0);
    fclose(f);
}

START_TEST(test_print_shows_shape_and_values)
{
    qkv_tensor *t = tensor_of(2, (const int[]){2, 2}, (const double[]){1, -0.5, 0.25, 3}, 0);
    char buf[128];
    print_to(t, 0, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor[2,2]\n  1.0000 -0.5000\n  0.2500 3.0000\n");
    print_to(qkv_nil(), 0, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor nil\n");
    /* no stream and no buffer: nothing, where stdio crashed */
    qkv_tensor_print(t, NULL, 0);
    qkv_tensor_print(qkv_nil(), NULL, 0);
    qkv_shape_str(t, NULL, 16);
    ck_assert_str_eq(qkv_status_string(QKV_ERR_SHAPE), "shape mismatch");
    qkv_tensor_free(t);
}
END_TEST

/* A limit below numel prints that many values, row by row, and says how
 * many it left out. */
START_TEST(test_print_stops_at_max_values_and_counts_the_rest)
{
    qkv_tensor *t = tensor_of(2, (const int[]){2, 3}, (const double[]){1, 2, 3, 4, 5, 6}, 0);
    char buf[128];
    print_to(t, 4, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor[2,3]\n  1.0000 2.0000 3.0000\n  4.0000 ... (2 more)\n");
    qkv_tensor_free(t);
}
END_TEST

/* A vector is one row: all its values on one line. */
START_TEST(test_print_puts_a_vector_on_one_line)
{
    qkv_tensor *t = tensor_of(1, (const int[]){3}, (const double[]){1, 2, 3}, 0);
    char buf[64];
    print_to(t, 0, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor[3]\n  1.0000 2.0000 3.0000\n");
    qkv_tensor_free(t);
}
END_TEST

/* A buffer of length 0 is not written, not even its first byte; one of
 * length 1 gets the empty string. */
START_TEST(test_shape_str_writes_nothing_into_a_buffer_of_length_0)
{
    qkv_tensor *t = qkv_tensor_new(2, (const int[]){4, 8}, 0, NULL);
    char buf[4] = {'x', 'y', 'z', '\0'};
    qkv_shape_str(t, buf, 0);
    ck_assert_str_eq(buf, "xyz");
    qkv_shape_str(qkv_nil(), buf, 0);
    ck_assert_str_eq(buf, "xyz");
    qkv_shape_str(t, buf, 1);
    ck_assert_str_eq(buf, "");
    ck_assert(buf[1] == 'y');
    qkv_tensor_free(t);
}
END_TEST

START_TEST(test_a_program_built_for_the_other_scalar_type_is_refused)
{
    /* what a program compiled with the other setting of QKV_DOUBLE passes */
    const unsigned other = (QKV_ABI & ~0xffu) | (sizeof(qkv_real) == 4 ? 8u : 4u);
    qkv_error err = qkv_error_none();
    ck_assert(qkv_tensor_new_abi(other, 1, (const int[]){3}, 0, &err) == qkv_nil());
    ck_assert_int_eq(err.status, QKV_ERR_ABI);
    ck_assert_msg(strstr(err.message, sizeof(qkv_real) == 4 ? "compiled for double qkv"
                                                            : "compiled for float32 qkv") &&
                      strstr(err.message, "pkg-config --cflags qkv"),
                  "%s", err.message);
    err = qkv_error_none();
    ck_assert_ptr_null(qkv_tape_new_abi(other, 0, &err));
    ck_assert_int_eq(err.status, QKV_ERR_ABI);
    /* headers of another interface version */
    err = qkv_error_none();
    ck_assert(qkv_tensor_new_abi(QKV_ABI + 0x100u, 1, (const int[]){3}, 0, &err) == qkv_nil());
    ck_assert_int_eq(err.status, QKV_ERR_ABI);
    ck_assert_ptr_nonnull(strstr(err.message, "interface version"));
}
END_TEST

START_TEST(test_bad_shapes_say_why)
{
    /* each refusal names the shape, or the count of dimensions, as
     * qkv_tape_tensor's does: it said "a shape needs 0 to 4 dimensions,
     * each at least 1" for all of them, naming neither */
    qkv_error err = qkv_error_none();
    ck_assert(qkv_tensor_new(2, (const int[]){3, 0}, 0, &err) == qkv_nil());
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "tensor: the shape [3,0] has a dimension below 1");
    ck_assert(qkv_tensor_new(5, (const int[]){1, 1, 1, 1, 1}, 0, &err) == qkv_nil());
    ck_assert_str_eq(err.message, "tensor: a shape needs 0 to 4 dimensions, not 5");
    ck_assert(qkv_tensor_new(2, NULL, 0, &err) == qkv_nil());
    ck_assert_str_eq(err.message, "tensor: no shape (NULL) for 2 dimensions");
    err = qkv_error_none();
    ck_assert(qkv_tensor_new(3, (const int[]){INT32_MAX, INT32_MAX, INT32_MAX}, 0, &err) ==
              qkv_nil());
    ck_assert_int_eq(err.status, QKV_ERR_NOMEM);
    ck_assert_str_eq(err.message,
                     "tensor: the size of the shape [2147483647,2147483647,2147483647] overflows");
}
END_TEST

Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_tensor_new_is_zero_filled_with_its_shape);
    tcase_add_test(tc, test_scalar_tensor_has_one_element);
    tcase_add_test(tc, test_bad_shapes_give_nil_not_null);
    tcase_add_test(tc, test_free_accepts_null_and_nil);
    tcase_add_test(tc, test_shape_str_and_set);
    tcase_add_test(tc, test_print_shows_shape_and_values);
    tcase_add_test(tc, test_print_stops_at_max_values_and_counts_the_rest);
    tcase_add_test(tc, test_print_puts_a_vector_on_one_line);
    tcase_add_test(tc, test_shape_str_writes_nothing_into_a_buffer_of_length_0);
    tcase_add_test(tc, test_a_program_built_for_the_other_scalar_type_is_refused);
    tcase_add_test(tc, test_bad_shapes_say_why);
    suite_add_tcase(s, tc);
    return s;
}
