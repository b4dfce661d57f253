/*
 * main.c - runs every Check suite and exits non-zero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

qkv_tensor *tensor_of(int ndim, const int *shape, const double *values, int grad)
{
    qkv_tensor *t = qkv_tensor_new(ndim, shape, grad, NULL);
    ck_assert(!qkv_tensor_is_nil(t));
    for (size_t i = 0; values != NULL && i < t->numel; i++)
        t->data[i] = (qkv_real)values[i];
    return t;
}

void expect_another_tapes_input(qkv_tape *t, const qkv_tensor *y, const char *op)
{
    char want[160];
    snprintf(want, sizeof want,
             "%s: input 0 was made on another tape, whose nodes its gradient would not reach", op);
    ck_assert(y == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), want);
}

/* A suite's name (as suite_create and CK_RUN_SUITE know it) and maker. */
#define SUITE(name)         \
    {                       \
#name, name##_suite \
    }

int main(int argc, char **argv)
{
    /* the library bottom up, then the app, then the program */
    static const struct {
        const char *name;
        Suite *(*make)(void);
    } suites[] = {
        SUITE(tensor),      SUITE(tape),         SUITE(kernels),     SUITE(gemm),
        SUITE(ops),         SUITE(elementwise),  SUITE(shape),       SUITE(norm),
        SUITE(attention),   SUITE(threads),      SUITE(rng),         SUITE(gradcheck),
        SUITE(torch),       SUITE(optim),        SUITE(params),      SUITE(layers),
        SUITE(safetensors), SUITE(coref_data),   SUITE(coref_model), SUITE(coref_checkpoint),
        SUITE(coref_seq),   SUITE(coref_ablate), SUITE(demo),        SUITE(cli),
        SUITE(faults)};
    const size_t n = sizeof suites / sizeof suites[0];
    if (argc > 1 && strcmp(argv[1], "--list") == 0) { /* for scripts/suites.sh */
        for (size_t i = 0; i < n; i++)
            printf("%s\n", suites[i].name);
        return EXIT_SUCCESS;
    }
    SRunner *sr = srunner_create(suites[0].make());
    for (size_t i = 1; i < n; i++)
        srunner_add_suite(sr, suites[i].make());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
