/*
 * main.c - runs every Check suite and exits non-zero on any failure.
 */
#include <stdlib.h>

#include "tests.h"

qkv_tensor *tensor_of(int ndim, const int *shape, const double *values, int grad)
{
    qkv_tensor *t = qkv_tensor_new(ndim, shape, grad, NULL);
    ck_assert(!qkv_tensor_is_nil(t));
    for (size_t i = 0; values != NULL && i < t->numel; i++)
        t->data[i] = (qkv_real)values[i];
    return t;
}

int main(void)
{
    /* the library bottom up, then the app, then the program */
    Suite *(*suites[])(void) = {tensor_suite,     tape_suite,         kernels_suite,
                                ops_suite,        elementwise_suite,  shape_suite,
                                norm_suite,       attention_suite,    threads_suite,
                                rng_suite,        gradcheck_suite,    optim_suite,
                                params_suite,     layers_suite,       safetensors_suite,
                                coref_data_suite, coref_model_suite,  coref_checkpoint_suite,
                                coref_seq_suite,  coref_ablate_suite, demo_suite,
                                cli_suite,        faults_suite};
    SRunner *sr = srunner_create(suites[0]());
    for (size_t i = 1; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
