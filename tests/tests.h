/*
 * tests.h - the suites that tests/main.c runs, and shared assertions.
 */
#ifndef QKV_TESTS_H
#define QKV_TESTS_H

#include <check.h>
#include <math.h>

#include "apps/coref.h"
#include "kernels/kernels.h" /* the tests see the private kernels too */
#include "qkv.h"
#include "util/util.h"

/* Relative precision of one rounding of qkv_real. */
#ifdef QKV_DOUBLE
#define REAL_EPS 1.1e-16
#else
#define REAL_EPS 6.0e-8
#endif

/* |a - b| <= tol, with both values in the failure message. */
#define ASSERT_NEAR(a, b, tol)                                                                   \
    do {                                                                                         \
        double a_ = (double)(a), b_ = (double)(b);                                               \
        ck_assert_msg(fabs(a_ - b_) <= (tol), "%s = %.17g, expected %.17g (tol %g)", #a, a_, b_, \
                      (double)(tol));                                                            \
    } while (0)

/* ck_assert_msg for a check repeated over many values: Check records
 * each passing assertion with a write(2), which in a loop over an array
 * costs more than the test itself. This records only a failure, with the
 * same message. */
#define CHECK_EACH(expr, ...)          \
    do {                               \
        if (!(expr))                   \
            ck_abort_msg(__VA_ARGS__); \
    } while (0)

/* Runs one failing call on tape t, reset first, and checks that it returns
 * the nil tensor with this status and message. */
#define EXPECT_ERROR_ON(t, call, status, message)       \
    do {                                                \
        qkv_tape_reset(t);                              \
        ck_assert((call) == qkv_nil());                 \
        ck_assert_int_eq(qkv_tape_status(t), (status)); \
        ck_assert_str_eq(qkv_tape_error(t), (message)); \
    } while (0)

/* Checks that y is nil and that t's error is op's refusal of its input 0,
 * which another tape made, by the op's own name. */
void expect_another_tapes_input(qkv_tape *t, const qkv_tensor *y, const char *op);

/* 1 (and a line saying the torch suite skipped) when QKV_PYTHON cannot
 * import torch. */
int torch_missing(void);

/* Runs QKV_PYTHON on scripts/SCRIPT with these options and the cases'
 * file at path, and fails with its summary (the line "SCRIPT:", without
 * .py) and failures unless it exits 0; QKV_TORCH_VERBOSE=1 shows all of
 * its output. */
void torch_run_script(const char *script, const char *options, const char *path);

/* Makes a heap tensor holding the given values (with a gradient buffer when
 * grad is nonzero). */
qkv_tensor *tensor_of(int ndim, const int *shape, const double *values, int grad);

/* the library */
Suite *tensor_suite(void);
Suite *tape_suite(void);
Suite *kernels_suite(void);
Suite *gemm_suite(void);
Suite *ops_suite(void);
Suite *elementwise_suite(void);
Suite *shape_suite(void);
Suite *norm_suite(void);
Suite *attention_suite(void);
Suite *threads_suite(void);
Suite *rng_suite(void);
Suite *gradcheck_suite(void);
Suite *torch_suite(void);
TCase *torch_layers_tcase(void); /* in the torch suite */
Suite *optim_suite(void);
Suite *params_suite(void);
Suite *layers_suite(void);
Suite *safetensors_suite(void);
/* the coreference app */
Suite *coref_data_suite(void);
Suite *coref_model_suite(void);
Suite *coref_checkpoint_suite(void);
Suite *coref_seq_suite(void);
Suite *coref_ablate_suite(void);
/* the program */
Suite *demo_suite(void);
Suite *cli_suite(void);
Suite *faults_suite(void);

#endif
