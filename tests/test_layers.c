/*
 * test_layers.c - parameter lists and their initialisers (against
 * CPython's random module), the optimizer's schedule, decay and state (by
 * hand), and the layers' forward passes against a naive double-precision
 * reference written here from the formulas, loop by loop.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

#define PI 3.14159265358979323846

/* Values of order 1 through at most three chained products of length
 * <= 48 and a softmax: the float build agrees with the double reference to
 * about 48·3·6e-8·|x| ~ 1e-5; the double build to ~1e-14. */
#ifdef QKV_DOUBLE
#define FWD_TOL 1e-12
#else
#define FWD_TOL 1e-4
#endif

static const qkv_init ZEROS = {QKV_INIT_ZEROS, 0, 0};

/* ======================================================================== */
/* parameter lists                                                          */

START_TEST(test_a_list_holds_named_parameters)
{
    qkv_error err = qkv_error_none();
    qkv_params *p = qkv_params_new(0, &err);
    ck_assert_ptr_nonnull(p);
    qkv_tensor *w = qkv_params_add(p, "layer.weight", 2, (const int[]){3, 4}, ZEROS, &err);
    qkv_tensor *b = qkv_params_add(p, "layer.bias", 1, (const int[]){4}, ZEROS, &err);
    qkv_tensor *e = qkv_params_add(p, "词表", 2, (const int[]){5, 2}, ZEROS, &err);
    ck_assert(!qkv_tensor_is_nil(w) && !qkv_tensor_is_nil(b) && !qkv_tensor_is_nil(e));
    ck_assert_int_eq(qkv_params_count(p), 3);
    ck_assert_uint_eq(qkv_params_numel(p), 12 + 4 + 10);
    ck_assert_ptr_eq(qkv_params_get(p, "layer.bias"), b);
    ck_assert_ptr_eq(qkv_params_get(p, "词表"), e);
    ck_assert_ptr_null(qkv_params_get(p, "layer"));
    const char *name;
    ck_assert_ptr_eq(qkv_params_at(p, 0, &name), w);
    ck_assert_str_eq(name, "layer.weight");
    ck_assert_ptr_null(qkv_params_at(p, 3, NULL));
    ck_assert_ptr_eq(qkv_params_tensors(p)[2], e);
    /* decay: weights and embeddings yes, biases no (GPT-2's rule) */
    ck_assert(qkv_params_decay(p, 0) && !qkv_params_decay(p, 1) && qkv_params_decay(p, 2));
    ck_assert_int_eq(qkv_params_set_decay(p, 2, 0), QKV_OK);
    ck_assert(!qkv_params_decay(p, 2));
    /* an index out of range is refused, and changes nothing */
    ck_assert_int_eq(qkv_params_set_decay(p, 3, 0), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_params_set_decay(p, -1, 0), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_params_set_decay(NULL, 0, 0), QKV_ERR_ARG);
    ck_assert(qkv_params_decay(p, 0) && !qkv_params_decay(p, 1) && !qkv_params_decay(p, 2));
    /* bad names and duplicates are refused, naming the problem */
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "layer.bias", 1, (const int[]){1}, ZEROS, &err)));
    ck_assert_str_eq(err.message, "params: 'layer.bias' is already in the list");
    /* each refused name says what is wrong with it: all said "a name
     * must be 1 to 127 bytes of UTF-8", whichever it was */
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "", 1, (const int[]){1}, ZEROS, &err)));
    ck_assert_str_eq(err.message,
                     "params: a name must be 1 to 127 bytes of UTF-8; this one is empty");
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, NULL, 1, (const int[]){1}, ZEROS, &err)));
    ck_assert_str_eq(err.message, "params: no name (NULL); a name must be 1 to 127 bytes of UTF-8");
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "ab\xff", 1, (const int[]){1}, ZEROS, &err)));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message,
                     "params: a name must be 1 to 127 bytes of UTF-8; this one is not UTF-8 at "
                     "byte 2");
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "neg", 1, (const int[]){-1}, ZEROS, &err)));
    /* __metadata__ is safetensors' key for metadata: a parameter of that
     * name was added, and only saving refused it */
    err = qkv_error_none();
    ck_assert(
        qkv_tensor_is_nil(qkv_params_add(p, "__metadata__", 1, (const int[]){1}, ZEROS, &err)));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "params: '__metadata__' is the key safetensors keeps for "
                                  "metadata, not a parameter name");
    ck_assert(
        !qkv_tensor_is_nil(qkv_params_add(p, "__metadata", 1, (const int[]){1}, ZEROS, &err)));
    ck_assert_int_eq(qkv_params_count(p), 4);
    /* names of 127 bytes fit; 128 do not (the name buffer holds 127 and a NUL) */
    {
        char name[130];
        memset(name, 'n', sizeof name);
        name[127] = '\0';
        ck_assert(!qkv_tensor_is_nil(qkv_params_add(p, name, 1, (const int[]){1}, ZEROS, &err)));
        name[127] = 'n';
        name[128] = '\0';
        ck_assert(qkv_tensor_is_nil(qkv_params_add(p, name, 1, (const int[]){1}, ZEROS, &err)));
        ck_assert_str_eq(err.message, "params: a name must be 1 to 127 bytes of UTF-8; this one "
                                      "is 128 bytes");
    }
    /* zero_grad reaches every gradient */
    w->grad[5] = 1, b->grad[0] = 2, e->grad[9] = 3;
    qkv_params_zero_grad(p);
    ck_assert(w->grad[5] == 0 && b->grad[0] == 0 && e->grad[9] == 0);
    /* the list owns its tensors: qkv_tensor_free on one freed it, and the
     * list then read it and freed it again. Not flagged as the caller's
     * heap tensor, it is ignored. */
    ck_assert(!(b->flags & QKV_TENSOR_HEAP));
    qkv_tensor_free(b);
    b->data[3] = 7;
    ck_assert(qkv_params_get(p, "layer.bias")->data[3] == 7);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_a_list_grows_past_its_first_capacity)
{
    qkv_params *p = qkv_params_new(0, NULL);
    char name[16];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "p%d", i);
        qkv_tensor *t = qkv_params_add(p, name, 1, (const int[]){i + 1}, ZEROS, NULL);
        ck_assert(!qkv_tensor_is_nil(t));
    }
    ck_assert_int_eq(qkv_params_count(p), 100);
    ck_assert_uint_eq(qkv_params_numel(p), 100 * 101 / 2);
    ck_assert_int_eq(qkv_params_get(p, "p63")->shape[0], 64);
    qkv_params_free(p);
}
END_TEST

/* The first three values of a [3,2] parameter (fan_in 3, fan_out 2)
 * initialised by init from seed 7, against CPython: random.seed(7), then
 * the formula of params.h (values printed with %.17g). */
static void expect_init(qkv_init init, const double want[3])
{
    qkv_params *p = qkv_params_new(7, NULL);
    qkv_tensor *t = qkv_params_add(p, "w", 2, (const int[]){3, 2}, init, NULL);
    ck_assert(!qkv_tensor_is_nil(t));
    for (int i = 0; i < 3; i++)
        ASSERT_NEAR(t->data[i], want[i], 2 * REAL_EPS * fabs(want[i]));
    qkv_params_free(p);
}

START_TEST(test_initialisers_match_cpython)
{
    /* random.normalvariate(0.5, 2) */
    expect_init((qkv_init){QKV_INIT_NORMAL, 0.5, 2},
                (const double[]){-0.21181649902114286, 1.0583061868775747, 0.69408954524000321});
    /* -1 + 4·random.random() */
    expect_init((qkv_init){QKV_INIT_UNIFORM, -1, 3},
                (const double[]){0.29533105933264947, -0.39660330430199231, 1.603737892159415});
    /* normalvariate(0, √(2/5)) */
    expect_init((qkv_init){QKV_INIT_XAVIER_NORMAL, 0, 0},
                (const double[]){-0.22509614129938271, 0.1765519182296747, 0.061376503298470213});
    /* l = √(6/5): -l + 2l·random() */
    expect_init((qkv_init){QKV_INIT_XAVIER_UNIFORM, 0, 0},
                (const double[]){-0.38596307437677735, -0.76495113365245293, 0.33068086235633287});
    /* gain 0.5: l = 0.5·√(6/5) */
    expect_init((qkv_init){QKV_INIT_XAVIER_UNIFORM, 0.5, 0},
                (const double[]){-0.19298153718838867, -0.38247556682622647, 0.16534043117816644});
    /* normalvariate(0, √2/√3) */
    expect_init((qkv_init){QKV_INIT_KAIMING_NORMAL, 0, 0},
                (const double[]){-0.29059786884935362, 0.22792754634816795, 0.079236725041139919});
    /* l = √2·√(3/3) */
    expect_init((qkv_init){QKV_INIT_KAIMING_UNIFORM, 0, 0},
                (const double[]){-0.49827618643742455, -0.98754766709947817, 0.42690715760519482});
    /* a gain a replaces Kaiming's √2 and Xavier's 1: l = 0.5·√(3/3) */
    expect_init((qkv_init){QKV_INIT_KAIMING_UNIFORM, 0.5, 0},
                (const double[]){-0.17616723516683763, -0.3491508260754981, 0.15093447303985374});
    /* normalvariate(0, 3/√3) */
    expect_init((qkv_init){QKV_INIT_KAIMING_NORMAL, 3, 0},
                (const double[]){-0.6164511709852107, 0.48350734092600195, 0.16808647678681185});
    /* normalvariate(0, 2·√(2/5)) */
    expect_init((qkv_init){QKV_INIT_XAVIER_NORMAL, 2, 0},
                (const double[]){-0.4501922825987654, 0.3531038364593494, 0.12275300659694043});
    expect_init((qkv_init){QKV_INIT_CONST, 0.25, 0}, (const double[]){0.25, 0.25, 0.25});
    expect_init((qkv_init){QKV_INIT_ONES, 0, 0}, (const double[]){1, 1, 1});
}
END_TEST

/* The first three values of a tensor of this shape from seed 7, Kaiming
 * uniform (want[0]) and Xavier uniform (want[1]), with their default
 * gains: the same operations as the library's, then one rounding. */
static void expect_fans(int ndim, const int *shape, const double want[2][3])
{
    const qkv_init kinds[2] = {{QKV_INIT_KAIMING_UNIFORM, 0, 0}, {QKV_INIT_XAVIER_UNIFORM, 0, 0}};
    for (int k = 0; k < 2; k++) {
        qkv_params *p = qkv_params_new(7, NULL);
        qkv_tensor *t = qkv_params_add(p, "v", ndim, shape, kinds[k], NULL);
        ck_assert(!qkv_tensor_is_nil(t));
        for (int i = 0; i < 3; i++)
            ASSERT_NEAR(t->data[i], want[k][i], 2 * REAL_EPS * fabs(want[k][i]));
        qkv_params_free(p);
    }
}

/* A vector's fans are both its length (params.h): a [4] vector from seed
 * 7, against CPython with fan_in = fan_out = 4: Kaiming uniform
 * l = √2·√(3/4), Xavier uniform l = √(6/8), each -l + 2l·random(). */
START_TEST(test_a_vectors_fans_are_its_length)
{
    const double want[2][3] = {{-0.43151983555564077, -0.85524136715620602, 0.36971244354350596},
                               {-0.30513060193789743, -0.60474697026740709, 0.26142617591866157}};
    expect_fans(1, (const int[]){4}, want);
}
END_TEST

/* More than two dimensions: fan_in is the product of all but the last,
 * fan_out the last (params.h). A [2,3,4] tensor from seed 7 has fan_in 6
 * and fan_out 4; CPython: Kaiming uniform l = √2·√(3/6), Xavier uniform
 * l = √(6/10), each -l + 2l·random(). */
START_TEST(test_a_3d_tensors_fans_are_its_leading_product_and_last)
{
    const double want[2][3] = {{-0.3523344703336754, -0.6983016521509964, 0.3018689460797075},
                               {-0.2729171071794271, -0.5409021338819866, 0.23382668018077846}};
    expect_fans(3, (const int[]){2, 3, 4}, want);
}
END_TEST

START_TEST(test_initialisers_draw_one_stream_and_refuse_bad_ranges)
{
    /* two parameters continue one stream: the second's first value is the
     * fourth draw (CPython: random.seed(7); the 4th of -1 + 4·random()) */
    qkv_params *p = qkv_params_new(7, NULL);
    const qkv_init u = {QKV_INIT_UNIFORM, -1, 3};
    qkv_params_add(p, "a", 1, (const int[]){3}, u, NULL);
    qkv_tensor *b = qkv_params_add(p, "b", 1, (const int[]){1}, u, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 7);
    for (int i = 0; i < 3; i++)
        qkv_rng_random(&g);
    ASSERT_NEAR(b->data[0], -1 + 4 * qkv_rng_random(&g), 4 * REAL_EPS);
    qkv_error err = qkv_error_none();
    ck_assert(qkv_tensor_is_nil(
        qkv_params_add(p, "c", 1, (const int[]){1}, (qkv_init){QKV_INIT_UNIFORM, 1, 1}, &err)));
    /* the refusals give the numbers, not only the rule: "the uniform
     * range [a, b) must be ..." named the fields, not their values */
    ck_assert_str_eq(err.message, "init: the uniform range [1, 1) must be finite and not empty");
    ck_assert(qkv_tensor_is_nil(
        qkv_params_add(p, "d", 1, (const int[]){1}, (qkv_init){QKV_INIT_NORMAL, 0, -1}, &err)));
    ck_assert_str_eq(err.message, "init: the mean 0 and the standard deviation -1 must be finite, "
                                  "and the standard deviation >= 0");
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "d", 1, (const int[]){1},
                                               (qkv_init){QKV_INIT_UNIFORM, -INFINITY, 2}, &err)));
    ck_assert_str_eq(err.message,
                     "init: the uniform range [-infinity, 2) must be finite and not empty");
    ck_assert(qkv_tensor_is_nil(
        qkv_params_add(p, "e", 1, (const int[]){1}, (qkv_init){(qkv_init_kind)99, 0, 0}, &err)));
    /* a constant that is not a number, which the first save would refuse */
    err = qkv_error_none();
    ck_assert(qkv_tensor_is_nil(
        qkv_params_add(p, "f", 1, (const int[]){1}, (qkv_init){QKV_INIT_CONST, NAN, 0}, &err)));
    ck_assert_int_eq(err.status, QKV_ERR_ARG);
    /* in words, not printf's "nan" and "-inf" */
    ck_assert_str_eq(err.message, sizeof(qkv_real) == sizeof(float)
                                      ? "init: the constant NaN is not finite as float32"
                                      : "init: the constant NaN is not finite as double");
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "g", 1, (const int[]){1},
                                               (qkv_init){QKV_INIT_CONST, -INFINITY, 0}, &err)));
    ck_assert_ptr_nonnull(strstr(err.message, "the constant -infinity is not finite"));
    ck_assert_int_eq(qkv_params_count(p), 2);
    /* a standard deviation of 0 is allowed (>= 0): every value is the mean,
     * as random.normalvariate(2.5, 0) is 2.5 */
    qkv_tensor *h =
        qkv_params_add(p, "h", 1, (const int[]){3}, (qkv_init){QKV_INIT_NORMAL, 2.5, 0}, &err);
    ck_assert(!qkv_tensor_is_nil(h));
    ck_assert(h->data[0] == 2.5 && h->data[1] == 2.5 && h->data[2] == 2.5);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_initialisers_refuse_values_the_scalar_cannot_hold)
{
    /* each number is finite as a double, but the values it gives are not
     * as qkv_real: 1e39 and up overflow float32, and a uniform range from
     * -1e308 to 1e308 (or ±0.87·DBL_MAX, Xavier's with that gain) is
     * wider than the largest double */
#ifdef QKV_DOUBLE
    const qkv_init bad[] = {{QKV_INIT_UNIFORM, -1e308, 1e308},
                            {QKV_INIT_XAVIER_UNIFORM, DBL_MAX, 0}};
#else
    const qkv_init bad[] = {{QKV_INIT_CONST, 1e39, 0},
                            {QKV_INIT_UNIFORM, -1e308, 1e308},
                            {QKV_INIT_NORMAL, 0, 1e39},
                            {QKV_INIT_XAVIER_UNIFORM, 1e39, 0}};
#endif
    qkv_params *p = qkv_params_new(3, NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_error err = qkv_error_none();
        qkv_tensor *w = qkv_params_add(p, "w", 2, (const int[]){4, 4}, bad[i], &err);
        ck_assert_msg(qkv_tensor_is_nil(w), "init %zu was taken", i);
        ck_assert_int_eq(err.status, QKV_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, "not finite"));
    }
    ck_assert_int_eq(qkv_params_count(p), 0);
    /* a mean that is not finite is named with the standard deviation */
    qkv_error err = qkv_error_none();
    ck_assert(qkv_tensor_is_nil(qkv_params_add(p, "m", 1, (const int[]){1},
                                               (qkv_init){QKV_INIT_NORMAL, INFINITY, 1}, &err)));
    ck_assert_ptr_nonnull(strstr(err.message, "mean"));
    qkv_params_free(p);
}
END_TEST

START_TEST(test_the_optimizer_skips_decay_where_the_list_says)
{
    /* AdamW with zero gradients: the moments stay 0, so the only change is
     * the decoupled decay p -= lr·wd·p, on the weight and not the bias */
    qkv_params *p = qkv_params_new(0, NULL);
    qkv_tensor *w =
        qkv_params_add(p, "w", 2, (const int[]){1, 2}, (qkv_init){QKV_INIT_CONST, 2, 0}, NULL);
    qkv_tensor *b =
        qkv_params_add(p, "b", 1, (const int[]){2}, (qkv_init){QKV_INIT_CONST, 2, 0}, NULL);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAMW);
    c.lr = 0.1;
    c.weight_decay = 0.5;
    qkv_optim *o = qkv_params_optim(p, &c, NULL);
    ck_assert_ptr_nonnull(o);
    qkv_params_zero_grad(p);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(w->data[0], 2 * (1 - 0.1 * 0.5), 4 * REAL_EPS);
    ck_assert(b->data[0] == 2 && b->data[1] == 2);
    qkv_optim_free(o);
    qkv_params_free(p);
}
END_TEST

/* the list's optimizer names a parameter by its name in the list */
START_TEST(test_the_optimizer_names_a_non_finite_gradient)
{
    qkv_params *p = qkv_params_new(0, NULL);
    qkv_tensor *w = qkv_params_add(p, "block0.w", 2, (const int[]){1, 2},
                                   (qkv_init){QKV_INIT_CONST, 2, 0}, NULL);
    qkv_tensor *b =
        qkv_params_add(p, "block0.b", 1, (const int[]){2}, (qkv_init){QKV_INIT_CONST, 3, 0}, NULL);
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    qkv_optim *o = qkv_params_optim(p, &c, NULL);
    ck_assert_ptr_nonnull(o);
    qkv_params_zero_grad(p);
    b->grad[0] = (qkv_real)INFINITY;
    ck_assert_int_eq(qkv_optim_step(o), QKV_ERR_NUMERIC);
    ck_assert_str_eq(qkv_optim_error(o), "optim: the gradient of block0.b is not finite: "
                                         "grad[0] = infinity; no parameter was changed");
    ck_assert(w->data[0] == 2 && w->data[1] == 2 && b->data[0] == 3 && b->data[1] == 3);
    qkv_optim_free(o);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_the_optimizer_state_is_readable)
{
    qkv_tensor *x = tensor_of(1, (const int[]){2}, (const double[]){1, -1}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAM);
    c.lr = 0.01;
    qkv_optim *o = qkv_optim_new(&c, &x, 1, NULL);
    ck_assert_int_eq(qkv_optim_steps(o), 0);
    x->grad[0] = 2, x->grad[1] = -4;
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    size_t n;
    const double *m = qkv_optim_state(o, 0, 0, &n), *v = qkv_optim_state(o, 0, 1, NULL);
    ck_assert_uint_eq(n, 2);
    /* m = (1 - 0.9)·g, v = (1 - 0.999)·g² */
    ASSERT_NEAR(m[0], 0.2, 1e-15);
    ASSERT_NEAR(m[1], -0.4, 1e-15);
    ASSERT_NEAR(v[0], 0.004, 1e-15);
    ASSERT_NEAR(v[1], 0.016, 1e-15);
    /* the bias-corrected first step: m̂ = g, v̂ = g², so each value moves
     * by lr·g/(|g| + eps) */
    ASSERT_NEAR(x->data[0], 1 - 0.01 * 2 / (2 + 1e-8), 8 * REAL_EPS);
    ASSERT_NEAR(x->data[1], -1 + 0.01 * 4 / (4 + 1e-8), 8 * REAL_EPS);
    ck_assert_int_eq(qkv_optim_steps(o), 1);
    ck_assert_ptr_null(qkv_optim_state(o, 1, 0, NULL));
    ck_assert_ptr_null(qkv_optim_state(o, 0, 2, NULL));
    /* the rate reads back, changes between steps, and refuses nonsense */
    ck_assert(qkv_optim_lr(o) == 0.01);
    ck_assert_int_eq(qkv_optim_set_lr(o, 0.5), QKV_OK);
    ck_assert(qkv_optim_lr(o) == 0.5);
    ck_assert_int_eq(qkv_optim_set_lr(o, -1), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_set_lr(o, NAN), QKV_ERR_ARG);
    ck_assert(qkv_optim_lr(o) == 0.5);
    qkv_optim_free(o);
    /* SGD keeps a velocity and no second moment */
    c = qkv_optim_defaults(QKV_SGD);
    c.momentum = 0.9;
    o = qkv_optim_new(&c, &x, 1, NULL);
    x->grad[0] = 1, x->grad[1] = 0;
    qkv_optim_step(o);
    qkv_optim_step(o);
    ASSERT_NEAR(qkv_optim_state(o, 0, 0, NULL)[0], 1.9, 1e-15); /* 0.9·1 + 1 */
    ck_assert_ptr_null(qkv_optim_state(o, 0, 1, NULL));
    qkv_optim_free(o);
    qkv_tensor_free(x);
}
END_TEST

START_TEST(test_each_parameter_can_have_its_own_rate)
{
    /* plain SGD, lr 0.1, gradient 1: a parameter at scale 0.5 moves 0.05,
     * one at scale 0 stays, the rest move 0.1 */
    qkv_tensor *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = tensor_of(1, (const int[]){1}, (const double[]){1}, 1);
        p[i]->grad[0] = 1;
    }
    qkv_optim_config c = qkv_optim_defaults(QKV_SGD);
    c.lr = 0.1;
    qkv_optim *o = qkv_optim_new(&c, p, 3, NULL);
    ck_assert_int_eq(qkv_optim_set_lr_scale(o, 0, 0.5), QKV_OK);
    ck_assert_int_eq(qkv_optim_set_lr_scale(o, 1, 0), QKV_OK);
    ck_assert_int_eq(qkv_optim_set_lr_scale(o, 3, 1), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_set_lr_scale(o, 2, -1), QKV_ERR_ARG);
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    ASSERT_NEAR(p[0]->data[0], 0.95, 2 * REAL_EPS);
    ck_assert(p[1]->data[0] == 1);
    ASSERT_NEAR(p[2]->data[0], 0.9, 2 * REAL_EPS);
    qkv_optim_free(o);
    for (int i = 0; i < 3; i++)
        qkv_tensor_free(p[i]);
}
END_TEST

/* AdamW's decoupled decay is the parameter's own rate times wd, as with
 * PyTorch's per-group lr (torch 2: groups at lr 0.1, 0.05, 0 and wd 0.5
 * give 1.9, 1.95, 2): a parameter at scale 0 is frozen, decay included.
 * Zero gradients keep the moments at 0, so only the decay moves. */
START_TEST(test_adamw_decay_follows_each_parameters_rate)
{
    const double scale[3] = {1, 0.5, 0}, want[3] = {1.9, 1.95, 2};
    qkv_tensor *p[3];
    for (int i = 0; i < 3; i++)
        p[i] = tensor_of(1, (const int[]){1}, (const double[]){2}, 1);
    qkv_optim_config c = qkv_optim_defaults(QKV_ADAMW);
    c.lr = 0.1;
    c.weight_decay = 0.5;
    qkv_optim *o = qkv_optim_new(&c, p, 3, NULL);
    ck_assert_ptr_nonnull(o);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(qkv_optim_set_lr_scale(o, i, scale[i]), QKV_OK);
        p[i]->grad[0] = 0;
    }
    ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
    for (int i = 0; i < 3; i++) /* one rounding of a value near 2 */
        ASSERT_NEAR(p[i]->data[0], want[i], 4 * REAL_EPS);
    qkv_optim_free(o);
    for (int i = 0; i < 3; i++)
        qkv_tensor_free(p[i]);
}
END_TEST

/* Adam's and AdamW's steps, not only AdamW's decay, take each parameter's
 * own rate: three parameters at 2 with rates 0.1, 0.05 and 0 (scales 1,
 * 0.5, 0) and gradients 0.5 then -1. torch 1.13, float64, parameter
 * groups with those rates (betas 0.9/0.999, eps 1e-8): Adam 1.900000002,
 * 1.950000001, 2, then 1.9366103542405655, 1.9683051771202826, 2; AdamW
 * with weight decay 0.5: 1.800000002, 1.900000001, 2, then
 * 1.7466103541405653, 1.8708051770952825, 2. */
START_TEST(test_adam_steps_follow_each_parameters_rate)
{
    const double scale[3] = {1, 0.5, 0}, g[2] = {0.5, -1};
    const double want[2][2][3] = {
        {{1.900000002, 1.950000001, 2}, {1.9366103542405655, 1.9683051771202826, 2}},
        {{1.800000002, 1.900000001, 2}, {1.7466103541405653, 1.8708051770952825, 2}}};
    for (int w = 0; w < 2; w++) {
        qkv_tensor *p[3];
        for (int i = 0; i < 3; i++)
            p[i] = tensor_of(1, (const int[]){1}, (const double[]){2}, 1);
        qkv_optim_config c = qkv_optim_defaults(w ? QKV_ADAMW : QKV_ADAM);
        c.lr = 0.1;
        c.weight_decay = w ? 0.5 : 0;
        qkv_optim *o = qkv_optim_new(&c, p, 3, NULL);
        ck_assert_ptr_nonnull(o);
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(qkv_optim_set_lr_scale(o, i, scale[i]), QKV_OK);
        for (int step = 0; step < 2; step++) {
            for (int i = 0; i < 3; i++)
                p[i]->grad[0] = (qkv_real)g[step];
            ck_assert_int_eq(qkv_optim_step(o), QKV_OK);
            for (int i = 0; i < 3; i++) /* a rounding near 2 a step */
                ASSERT_NEAR(p[i]->data[0], want[w][step][i], 8 * REAL_EPS);
        }
        qkv_optim_free(o);
        for (int i = 0; i < 3; i++)
            qkv_tensor_free(p[i]);
    }
}
END_TEST

START_TEST(test_warmup_then_cosine)
{
    /* warm-up 10 steps to 1, cosine down to 0.1 at step 110 */
    ASSERT_NEAR(qkv_lr_warmup_cosine(0, 10, 110, 1, 0.1), 0.1, 1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(4, 10, 110, 1, 0.1), 0.5, 1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(10, 10, 110, 1, 0.1), 1, 1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(60, 10, 110, 1, 0.1), 0.55, 1e-15); /* half way: cos(π/2) */
    ASSERT_NEAR(qkv_lr_warmup_cosine(35, 10, 110, 1, 0.1), 0.1 + 0.9 * (1 + cos(PI / 4)) / 2,
                1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(110, 10, 110, 1, 0.1), 0.1, 1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(500, 10, 110, 1, 0.1), 0.1, 1e-15);
    /* no warm-up */
    ASSERT_NEAR(qkv_lr_warmup_cosine(0, 0, 100, 2, 0), 2, 1e-15);
    /* a negative warm-up is none (not a decay already under way) */
    ASSERT_NEAR(qkv_lr_warmup_cosine(0, -5, 100, 2, 0), 2, 1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(50, -5, 100, 2, 0), 1, 1e-15);
    /* a warm-up longer than the run: lr_min from total on, as documented */
    ASSERT_NEAR(qkv_lr_warmup_cosine(3, 10, 5, 1, 0.1), 0.4, 1e-15);
    ASSERT_NEAR(qkv_lr_warmup_cosine(5, 10, 5, 1, 0.1), 0.1, 1e-15); /* step == total */
    ASSERT_NEAR(qkv_lr_warmup_cosine(7, 10, 5, 1, 0.1), 0.1, 1e-15);
    /* a step before the first: the first step's rate, never negative */
    ASSERT_NEAR(qkv_lr_warmup_cosine(-5, 10, 110, 1, 0.1), 0.1, 1e-15);
}
END_TEST

/* ======================================================================== */
/* layers against a naive reference                                         */

/* Fills every parameter of p with U[-0.5, 0.5) so that gains and biases
 * are not the trivial ones. */
static void randomise(qkv_params *p, uint64_t seed)
{
    qkv_rng g;
    qkv_rng_seed(&g, seed);
    for (int i = 0; i < qkv_params_count(p); i++)
        ck_assert_int_eq(qkv_init_tensor(qkv_params_at(p, i, NULL),
                                         (qkv_init){QKV_INIT_UNIFORM, -0.5, 0.5}, &g, NULL),
                         QKV_OK);
}

/* y[r, :] = x[r, :]·W + b for n rows; W [in, out]. */
static void ref_linear(const double *x, int n, const qkv_linear *l, double *y)
{
    for (int r = 0; r < n; r++)
        for (int o = 0; o < l->out; o++) {
            double s = l->bias != NULL ? (double)l->bias->data[o] : 0;
            for (int i = 0; i < l->in; i++)
                s += x[r * l->in + i] * (double)l->weight->data[i * l->out + o];
            y[r * l->out + o] = s;
        }
}

/* Layer norm of n rows of width d, biased variance, as PyTorch. */
static void ref_norm(const double *x, int n, int d, const qkv_norm *ln, double *y)
{
    for (int r = 0; r < n; r++) {
        double mean = 0, var = 0;
        for (int i = 0; i < d; i++)
            mean += x[r * d + i] / d;
        for (int i = 0; i < d; i++)
            var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / d;
        for (int i = 0; i < d; i++)
            y[r * d + i] =
                (x[r * d + i] - mean) / sqrt(var + ln->eps) * (double)ln->gamma->data[i] +
                (double)ln->beta->data[i];
    }
}

/* Multi-head attention on x [B,T,D]; attn gets [B,H,T,T], and scores (if
 * not NULL) [B,H,T,T] too: Q·Kᵀ/√d_h before any mask. The mask: key j is
 * hidden from query i when causal and j > i; pad (NULL or [B,T]) adds to
 * every score of key j. */
static void ref_mha(const double *x, int B, int T, const qkv_mha *m, const double *pad, double *out,
                    double *attn, double *scores)
{
    const int D = m->d_model, H = m->heads, dh = D / H;
    double *qkv = malloc(sizeof *qkv * (size_t)B * T * 3 * D);
    double *cat = malloc(sizeof *cat * (size_t)B * T * D), *s = malloc(sizeof *s * (size_t)T);
    ref_linear(x, B * T, &m->qkv, qkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < T; j++) {
                    double dot = 0;
                    for (int c = 0; c < dh; c++)
                        dot += qkv[(b * T + i) * 3 * D + h * dh + c] *
                               qkv[(b * T + j) * 3 * D + D + h * dh + c];
                    if (scores != NULL)
                        scores[((b * H + h) * T + i) * T + j] = dot / sqrt((double)dh);
                    s[j] = dot / sqrt((double)dh) + (pad != NULL ? pad[b * T + j] : 0);
                    if (m->causal && j > i)
                        s[j] = -INFINITY;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < T; j++)
                    z += s[j] = exp(s[j] - mx);
                for (int j = 0; j < T; j++)
                    attn[((b * H + h) * T + i) * T + j] = s[j] / z;
                for (int c = 0; c < dh; c++) {
                    double o = 0;
                    for (int j = 0; j < T; j++)
                        o += s[j] / z * qkv[(b * T + j) * 3 * D + 2 * D + h * dh + c];
                    cat[(b * T + i) * D + h * dh + c] = o;
                }
            }
    ref_linear(cat, B * T, &m->proj, out);
    free(qkv);
    free(cat);
    free(s);
}

/* GPT-2's GELU, from its formula. */
static double ref_gelu(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / PI) * (x + 0.044715 * x * x * x)));
}

/* The pre-norm block: h = x + MHA(LN1(x)); y = h + FFN(LN2(h)). */
static void ref_block(const double *x, int B, int T, const qkv_block *blk, int hidden, double *y,
                      double *attn)
{
    const int D = blk->attn.d_model, n = B * T;
    double *a = malloc(sizeof *a * (size_t)n * D), *h = malloc(sizeof *h * (size_t)n * D);
    double *u = malloc(sizeof *u * (size_t)n * hidden);
    ref_norm(x, n, D, &blk->ln1, a);
    ref_mha(a, B, T, &blk->attn, NULL, h, attn, NULL);
    for (int i = 0; i < n * D; i++)
        h[i] += x[i];
    ref_norm(h, n, D, &blk->ln2, a);
    ref_linear(a, n, &blk->ffn.up, u);
    for (int i = 0; i < n * hidden; i++)
        u[i] = ref_gelu(u[i]);
    ref_linear(u, n, &blk->ffn.down, y);
    for (int i = 0; i < n * D; i++)
        y[i] += h[i];
    free(a);
    free(h);
    free(u);
}

/* A [B,T,D] input with values U[-1, 1) in a heap tensor, and its copy in
 * double. */
static qkv_tensor *input(int B, int T, int D, double *copy)
{
    qkv_tensor *x = qkv_tensor_new(3, (const int[]){B, T, D}, 1, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 11);
    for (size_t i = 0; i < x->numel; i++) {
        x->data[i] = (qkv_real)(2 * qkv_rng_random(&g) - 1);
        copy[i] = (double)x->data[i];
    }
    return x;
}

static void expect_close(const qkv_tensor *t, const double *want, size_t n)
{
    ck_assert_uint_eq(t->numel, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)t->data[i] - want[i]) <= FWD_TOL,
                      "value %zu: %.9g, the reference %.9g", i, (double)t->data[i], want[i]);
}

START_TEST(test_linear_embedding_and_norm_forward)
{
    qkv_params *p = qkv_params_new(3, NULL);
    qkv_linear l;
    qkv_embedding e;
    qkv_norm ln;
    ck_assert_int_eq(qkv_linear_init(&l, p, "lin", 4, 3, 1, NULL), QKV_OK);
    ck_assert_int_eq(qkv_embedding_init(&e, p, "emb", 6, 4, NULL), QKV_OK);
    ck_assert_int_eq(qkv_norm_init(&ln, p, "ln", 4, NULL), QKV_OK);
    /* the names and the default starts of the header */
    ck_assert_ptr_eq(qkv_params_get(p, "lin.weight"), l.weight);
    ck_assert_ptr_eq(qkv_params_get(p, "lin.bias"), l.bias);
    ck_assert_ptr_eq(qkv_params_get(p, "emb.weight"), e.weight);
    ck_assert_ptr_eq(qkv_params_get(p, "ln.weight"), ln.gamma);
    ck_assert(ln.gamma->data[3] == 1 && ln.beta->data[3] == 0 && l.bias->data[2] == 0);
    for (size_t i = 0; i < l.weight->numel; i++) /* U(±1/√in) */
        ck_assert(fabs((double)l.weight->data[i]) <= 0.5);
    randomise(p, 5);
    double x[2 * 5 * 4], want[2 * 5 * 4];
    qkv_tensor *xt = input(2, 5, 4, x);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *y = qkv_linear_forward(t, &l, xt);
    ref_linear(x, 10, &l, want);
    expect_close(y, want, 30);
    y = qkv_norm_forward(t, &ln, xt);
    ref_norm(x, 10, 4, &ln, want);
    expect_close(y, want, 40);
    const int ids[3] = {5, 0, 5};
    y = qkv_embedding_forward(t, &e, ids, 1, (const int[]){3});
    ck_assert_int_eq(y->ndim, 2);
    ck_assert(y->shape[0] == 3 && y->shape[1] == 4);
    for (int c = 0; c < 4; c++)
        ck_assert(y->data[c] == e.weight->data[20 + c] && y->data[4 + c] == e.weight->data[c]);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    /* NULL ids: the gather's QKV_ERR_ARG under the layer's name (it was
     * QKV_ERR_SHAPE, for a table and a shape that were right) */
    ck_assert(qkv_embedding_forward(t, &e, NULL, 1, (const int[]){3}) == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ck_assert_str_eq(qkv_tape_error(t), "embedding 'emb': gather: no ids (ids is NULL)");
    qkv_tape_free(t);
    qkv_tensor_free(xt);
    qkv_params_free(p);
}
END_TEST

/* The starts layers.h documents, drawn from the list's generator: a
 * linear weight U(-1/√in, 1/√in) (PyTorch's nn.Linear bound), an
 * embedding and a learned position table N(0, 0.02²) (GPT-2's). CPython,
 * random.seed(5): -0.5 + 1.0·random() for in = 4, and
 * random.normalvariate(0, 0.02), the first three values of each. */
START_TEST(test_layers_start_from_the_documented_draws)
{
    const double lin[3] = {0.12290169488970193, 0.2417869892607294, 0.29519356556569665};
    const double emb[3] = {0.01633080145342392, -0.03024097548248123, -0.0014085743062417495};
    for (int which = 0; which < 3; which++) {
        qkv_params *p = qkv_params_new(5, NULL);
        qkv_linear l;
        qkv_embedding e;
        ck_assert_int_eq(which == 0   ? qkv_linear_init(&l, p, "lin", 4, 3, 1, NULL)
                         : which == 1 ? qkv_embedding_init(&e, p, "emb", 6, 4, NULL)
                                      : qkv_positions_init(&e, p, "pos", 6, 4, NULL),
                         QKV_OK);
        const qkv_tensor *w = which == 0 ? l.weight : e.weight;
        const double *want = which == 0 ? lin : emb;
        for (int i = 0; i < 3; i++)
            ASSERT_NEAR(w->data[i], want[i], 2 * REAL_EPS * fabs(want[i]));
        qkv_params_free(p);
    }
}
END_TEST

/* A norm layer's eps is PyTorch's default, 1e-5, which a row of small
 * variance shows: [0, 0.02] has mean 0.01 and variance 1e-4, so y = ±0.01
 * / √(1e-4 + 1e-5) = ±0.953462589... (with eps 1e-3 it would be ±0.30). */
START_TEST(test_a_norm_layer_uses_pytorchs_eps)
{
    qkv_params *p = qkv_params_new(0, NULL);
    qkv_norm ln;
    ck_assert_int_eq(qkv_norm_init(&ln, p, "ln", 2, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = qkv_tape_tensor(t, 2, (const int[]){1, 2}, 0);
    x->data[0] = 0;
    x->data[1] = (qkv_real)0.02;
    qkv_tensor *y = qkv_norm_forward(t, &ln, x);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    const double want = 0.01 / sqrt(1e-4 + 1e-5);
    ASSERT_NEAR(y->data[0], -want, 1e-5);
    ASSERT_NEAR(y->data[1], want, 1e-5);
    qkv_tape_free(t);
    qkv_params_free(p);
}
END_TEST

/* One MHA configuration against the reference. */
static void check_mha(int B, int T, int D, int H, int causal, int padded)
{
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_mha m;
    ck_assert_int_eq(qkv_mha_init(&m, p, "attn", D, H, causal, NULL), QKV_OK);
    ck_assert_ptr_nonnull(qkv_params_get(p, "attn.qkv.weight"));
    ck_assert_ptr_nonnull(qkv_params_get(p, "attn.proj.bias"));
    ck_assert_int_eq(qkv_params_get(p, "attn.qkv.weight")->shape[1], 3 * D);
    randomise(p, 2);
    double *x = malloc(sizeof *x * (size_t)B * T * D), *want = malloc(sizeof *want * B * T * D);
    double *attn = malloc(sizeof *attn * (size_t)B * H * T * T), pad[64];
    double *scores = malloc(sizeof *scores * (size_t)B * H * T * T);
    qkv_tensor *xt = input(B, T, D, x), *padt = NULL;
    if (padded) { /* the last key of item 0 and the last two of item 1 are padding */
        padt = qkv_tensor_new(2, (const int[]){B, T}, 0, NULL);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < T; j++)
                padt->data[b * T + j] = (qkv_real)(pad[b * T + j] = j >= T - 1 - b ? -INFINITY : 0);
    }
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_mha_parts parts;
    qkv_tensor *y = qkv_mha_forward(t, &m, xt, padt, &parts);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    ref_mha(x, B, T, &m, padded ? pad : NULL, want, attn, scores);
    expect_close(y, want, (size_t)B * T * D);
    ck_assert_int_eq(parts.attn->ndim, 4);
    ck_assert(parts.attn->shape[0] == B && parts.attn->shape[1] == H && parts.attn->shape[2] == T);
    expect_close(parts.attn, attn, (size_t)B * H * T * T);
    /* the scores are the weights' inputs before the causal mask and the
     * padding: finite everywhere, hidden keys included */
    expect_close(parts.scores, scores, (size_t)B * H * T * T);
    /* hidden keys get exactly zero weight */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                if ((causal && j > i) || (padded && j >= T - 1 - b))
                    ck_assert(parts.attn->data[((b * H + H - 1) * T + i) * T + j] == 0);
    qkv_tape_free(t);
    qkv_tensor_free(xt);
    qkv_tensor_free(padt);
    free(x);
    free(want);
    free(attn);
    free(scores);
    qkv_params_free(p);
}

START_TEST(test_mha_forward_matches_the_reference)
{
    check_mha(2, 5, 8, 1, 0, 0);
    check_mha(2, 5, 8, 2, 0, 0);
    check_mha(3, 6, 12, 4, 1, 0);
    check_mha(2, 7, 12, 3, 0, 1);
    check_mha(2, 7, 16, 4, 1, 1);
}
END_TEST

/* The mask of lengths {3, 0, 1} padded to 3, entry by entry; lengths
 * outside [0, len], a batch or len of 0, and no lengths fail the tape. */
START_TEST(test_padding_mask_from_lengths)
{
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *pad = qkv_padding_mask(t, 3, 3, (const int[]){3, 0, 1});
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert(pad->ndim == 2 && pad->shape[0] == 3 && pad->shape[1] == 3 && pad->grad == NULL);
    const double inf = INFINITY, want[9] = {0, 0, 0, -inf, -inf, -inf, 0, -inf, -inf};
    for (int i = 0; i < 9; i++)
        ck_assert_msg((double)pad->data[i] == want[i], "entry %d: %g", i, (double)pad->data[i]);
    static const struct {
        int batch, len, lengths[2];
        const char *msg;
    } bad[] = {
        {2, 3, {3, 4}, "padding_mask: sequence 1 has length 4, outside [0, 3]"},
        {2, 3, {-1, 2}, "padding_mask: sequence 0 has length -1, outside [0, 3]"},
        {0, 3, {1, 1}, "padding_mask: batch 0 and len 3 must be at least 1"},
        {2, 0, {0, 0}, "padding_mask: batch 2 and len 0 must be at least 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qkv_tape_reset(t);
        ck_assert(qkv_padding_mask(t, bad[i].batch, bad[i].len, bad[i].lengths) == qkv_nil());
        ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
        ck_assert_str_eq(qkv_tape_error(t), bad[i].msg);
        /* sticky: a valid call on the failed tape makes nothing */
        ck_assert(qkv_padding_mask(t, 1, 1, (const int[]){1}) == qkv_nil());
        ck_assert_str_eq(qkv_tape_error(t), bad[i].msg);
    }
    qkv_tape_reset(t);
    ck_assert(qkv_padding_mask(t, 1, 2, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "padding_mask: no lengths (NULL)");
    qkv_tape_free(t);
}
END_TEST

/* What padding is for: a batch of sequences of lengths 6, 4 and 0 padded
 * to 6. Each real position's output is the output of its sequence run
 * alone, unpadded (up to rounding: the products run over other lengths);
 * it does not move when the padded positions' inputs change (their keys
 * get weight 0 exactly); and a sequence of length 0 sees no key, so its
 * outputs are the output projection's bias. With and without the causal
 * mask. */
START_TEST(test_a_padded_batch_gives_each_sequence_its_own_outputs)
{
    enum { B = 3, T = 6, D = 8, H = 2 };
    const int lengths[B] = {6, 4, 0};
    for (int causal = 0; causal < 2; causal++) {
        qkv_params *p = qkv_params_new(1, NULL);
        qkv_mha m;
        ck_assert_int_eq(qkv_mha_init(&m, p, "attn", D, H, causal, NULL), QKV_OK);
        randomise(p, 5);
        double xs[B * T * D];
        qkv_tensor *x = input(B, T, D, xs);
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_tensor *y = qkv_mha_forward(t, &m, x, qkv_padding_mask(t, B, T, lengths), NULL);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        qkv_real got[B * T * D];
        memcpy(got, y->data, sizeof got);
        for (int b = 0; b < B; b++) { /* each sequence alone */
            if (lengths[b] == 0)
                continue;
            qkv_tensor *xb = qkv_tape_tensor(t, 3, (const int[]){1, lengths[b], D}, 0);
            memcpy(xb->data, x->data + (size_t)b * T * D, sizeof(qkv_real) * lengths[b] * D);
            qkv_tensor *yb = qkv_mha_forward(t, &m, xb, NULL, NULL);
            ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
            for (int i = 0; i < lengths[b] * D; i++)
                ck_assert_msg(fabs((double)got[b * T * D + i] - (double)yb->data[i]) <= FWD_TOL,
                              "causal %d, sequence %d, value %d: %.9g padded, %.9g alone", causal,
                              b, i, (double)got[b * T * D + i], (double)yb->data[i]);
        }
        for (int b = 0; b < B; b++) /* new inputs at the padded positions */
            for (int i = lengths[b] * D; i < T * D; i++)
                x->data[b * T * D + i] = (qkv_real)(100 + i);
        qkv_tape_reset(t);
        y = qkv_mha_forward(t, &m, x, qkv_padding_mask(t, B, T, lengths), NULL);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        const qkv_tensor *bias = qkv_params_get(p, "attn.proj.bias");
        for (int b = 0; b < B; b++)
            for (int i = 0; i < T * D; i++) {
                const double v = (double)y->data[b * T * D + i];
                if (i < lengths[b] * D)
                    ck_assert_msg(v == (double)got[b * T * D + i],
                                  "causal %d, sequence %d, value %d moved: %.9g, then %.9g", causal,
                                  b, i, (double)got[b * T * D + i], v);
                if (lengths[b] == 0)
                    ck_assert_msg(v == (double)bias->data[i % D],
                                  "causal %d, empty sequence, value %d: %.9g, the bias %.9g",
                                  causal, i, v, (double)bias->data[i % D]);
            }
        qkv_tape_free(t);
        qkv_tensor_free(x);
        qkv_params_free(p);
    }
}
END_TEST

/* The same on the online form, from T = QKV_MHA_ONLINE_T on: a sequence
 * of length 0 gets the bias, one of length 7 the outputs of its 7 tokens
 * run alone (the form that keeps the weights, so equal up to rounding),
 * and backward through both leaves every gradient finite. */
START_TEST(test_a_padded_batch_on_the_online_form)
{
    enum { B = 2, T = QKV_MHA_ONLINE_T, D = 8, H = 2, N = 7 };
    const int lengths[B] = {0, N};
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_mha m;
    ck_assert_int_eq(qkv_mha_init(&m, p, "attn", D, H, 1, NULL), QKV_OK);
    randomise(p, 6);
    double *xs = malloc(sizeof *xs * B * T * D);
    qkv_tensor *x = input(B, T, D, xs);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *y = qkv_mha_forward(t, &m, x, qkv_padding_mask(t, B, T, lengths), NULL);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, y)), QKV_OK);
    const qkv_tensor *bias = qkv_params_get(p, "attn.proj.bias");
    for (int i = 0; i < T * D; i++)
        ck_assert_msg(y->data[i] == bias->data[i % D], "empty sequence, value %d: %.9g", i,
                      (double)y->data[i]);
    for (int k = 0; k < qkv_params_count(p); k++) {
        const qkv_tensor *w = qkv_params_at(p, k, NULL);
        for (size_t i = 0; i < w->numel; i++)
            ck_assert_msg(isfinite(w->grad[i]), "parameter %d, gradient %zu: %g", k, i,
                          (double)w->grad[i]);
    }
    for (size_t i = 0; i < x->numel; i++)
        ck_assert_msg(isfinite(x->grad[i]), "input gradient %zu: %g", i, (double)x->grad[i]);
    qkv_real got[N * D];
    memcpy(got, y->data + (size_t)T * D, sizeof got);
    qkv_tensor *x1 = qkv_tape_tensor(t, 3, (const int[]){1, N, D}, 0);
    memcpy(x1->data, x->data + (size_t)T * D, sizeof got);
    qkv_tensor *y1 = qkv_mha_forward(t, &m, x1, NULL, NULL);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    for (int i = 0; i < N * D; i++)
        ck_assert_msg(fabs((double)got[i] - (double)y1->data[i]) <= FWD_TOL,
                      "value %d: %.9g padded, %.9g alone", i, (double)got[i], (double)y1->data[i]);
    qkv_tape_free(t);
    qkv_tensor_free(x);
    free(xs);
    qkv_params_free(p);
}
END_TEST

/* From T = QKV_MHA_ONLINE_T on, a layer asked for no weights takes the
 * online form: a tape without the [B,H,T,T] scores and weights (8 MB
 * here), and the reference's values. The products now run over 512
 * keys: 512·3·6e-8 ≈ 1e-4 in float, so the float bound is 1e-3 (the
 * double build keeps FWD_TOL). */
START_TEST(test_mha_long_takes_the_online_form)
{
    enum { B = 1, T = QKV_MHA_ONLINE_T, D = 8, H = 2 };
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_mha m;
    ck_assert_int_eq(qkv_mha_init(&m, p, "attn", D, H, 1, NULL), QKV_OK);
    randomise(p, 4);
    double *x = malloc(sizeof *x * B * T * D), *want = malloc(sizeof *want * B * T * D);
    double *attn = malloc(sizeof *attn * (size_t)B * H * T * T);
    qkv_tensor *xt = input(B, T, D, x);
    size_t high[2];
    for (int with_parts = 0; with_parts < 2; with_parts++) {
        qkv_tape *t = qkv_tape_new(0, NULL);
        qkv_mha_parts parts;
        qkv_tensor *y = qkv_mha_forward(t, &m, xt, NULL, with_parts ? &parts : NULL);
        ck_assert_int_eq(qkv_backward(t, qkv_mean(t, y)), QKV_OK);
        high[with_parts] = qkv_tape_high_water(t);
        if (!with_parts) {
            ref_mha(x, B, T, &m, NULL, want, attn, NULL);
#ifdef QKV_DOUBLE
            const double tol = FWD_TOL;
#else
            const double tol = 1e-3;
#endif
            for (size_t i = 0; i < (size_t)B * T * D; i++)
                ck_assert_msg(fabs((double)y->data[i] - want[i]) <= tol,
                              "value %zu: %.9g, the reference %.9g", i, (double)y->data[i],
                              want[i]);
        }
        qkv_tape_free(t);
    }
    const size_t st = (size_t)B * H * T * T * sizeof(qkv_real);
    ck_assert_msg(high[0] + 2 * st <= high[1], "tape: %zu bytes online, %zu with the weights",
                  high[0], high[1]);
    /* nor any other T×T matrix, such as a causal mask */
    ck_assert_msg(high[0] < (size_t)T * T * sizeof(qkv_real), "tape: %zu bytes online", high[0]);
    qkv_tensor_free(xt);
    free(x);
    free(want);
    free(attn);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_block_forward_matches_the_reference)
{
    enum { B = 2, T = 6, D = 8, H = 2, HID = 24 };
    qkv_params *p = qkv_params_new(9, NULL);
    qkv_block blk;
    ck_assert_int_eq(qkv_block_init(&blk, p, "h.0", D, H, HID, 1, NULL), QKV_OK);
    /* ln1, attn.qkv, attn.proj, ln2, ffn.up, ffn.down: weight and bias each */
    ck_assert_int_eq(qkv_params_count(p), 12);
    ck_assert_uint_eq(qkv_params_numel(p),
                      2 * D + D * 3 * D + 3 * D + D * D + D + 2 * D + D * HID + HID + HID * D + D);
    ck_assert_ptr_nonnull(qkv_params_get(p, "h.0.ffn.down.weight"));
    ck_assert_ptr_nonnull(qkv_params_get(p, "h.0.ln2.bias"));
    randomise(p, 4);
    double x[B * T * D], want[B * T * D], attn[B * H * T * T];
    qkv_tensor *xt = input(B, T, D, x);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_mha_parts parts;
    qkv_tensor *y = qkv_block_forward(t, &blk, xt, NULL, &parts);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    ref_block(x, B, T, &blk, HID, want, attn);
    expect_close(y, want, B * T * D);
    expect_close(parts.attn, attn, B * H * T * T);
    qkv_tape_free(t);
    qkv_tensor_free(xt);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_positions)
{
    /* the sinusoidal table, from its formula: D = 6, so the frequencies are
     * 1, 10000^(-2/6) and 10000^(-4/6) */
    qkv_tensor *pe = qkv_tensor_new(2, (const int[]){4, 6}, 0, NULL);
    ck_assert_int_eq(qkv_sinusoidal_positions(pe, NULL), QKV_OK);
    ck_assert(pe->data[0] == 0 && pe->data[1] == 1); /* position 0: sin 0, cos 0 */
    ASSERT_NEAR(pe->data[6 + 0], sin(1.0), REAL_EPS);
    ASSERT_NEAR(pe->data[6 + 1], cos(1.0), REAL_EPS);
    ASSERT_NEAR(pe->data[18 + 2], sin(3 * pow(10000, -2.0 / 6)), REAL_EPS);
    ASSERT_NEAR(pe->data[18 + 5], cos(3 * pow(10000, -4.0 / 6)), REAL_EPS);
    /* added to [B,T,D] inputs, row by row; a learned table gets gradients */
    qkv_params *p = qkv_params_new(0, NULL);
    qkv_embedding pos;
    ck_assert_int_eq(qkv_positions_init(&pos, p, "pos", 4, 6, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = qkv_tape_tensor(t, 3, (const int[]){2, 3, 6}, 0);
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = 1;
    qkv_tensor *y = qkv_add_positions(t, x, pe);
    ck_assert_int_eq(y->shape[1], 3);
    ASSERT_NEAR(y->data[18 + 6 + 0], 1 + sin(1.0), 2 * REAL_EPS);
    y = qkv_sum(t, qkv_add_positions(t, x, pos.weight));
    ck_assert_int_eq(qkv_backward(t, y), QKV_OK);
    ck_assert(pos.weight->grad[0] == 2 && pos.weight->grad[17] == 2 && pos.weight->grad[18] == 0);
    /* a sequence as long as the table takes all of it */
    qkv_tape_reset(t);
    x = qkv_tape_tensor(t, 3, (const int[]){1, 4, 6}, 0);
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = 0;
    y = qkv_add_positions(t, x, pe);
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    ck_assert(y->shape[1] == 4 && y->data[18 + 5] == pe->data[18 + 5]);
    /* a sequence longer than the table is refused */
    qkv_tape_reset(t);
    x = qkv_tape_tensor(t, 3, (const int[]){1, 5, 6}, 0);
    ck_assert(qkv_add_positions(t, x, pe) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "positions: x [1,5,6] needs a table [max_len >= T, D], "
                                        "not [4,6]");
    qkv_tape_reset(t); /* as is one of another width */
    x = qkv_tape_tensor(t, 3, (const int[]){1, 3, 5}, 0);
    ck_assert(qkv_add_positions(t, x, pe) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "positions: x [1,3,5] needs a table [max_len >= T, D], "
                                        "not [4,6]");
    qkv_tape_free(t);
    qkv_params_free(p);
    qkv_tensor_free(pe);
}
END_TEST

/* An empty prefix names the parameters bare, as a lone PyTorch module's
 * state_dict does ("weight", "bias"; a block's "attn.qkv.weight"); a NULL
 * prefix and one too long say which it is. */
START_TEST(test_an_empty_prefix_names_parameters_bare)
{
    qkv_error err = qkv_error_none();
    qkv_params *p = qkv_params_new(1, &err);
    qkv_linear l;
    ck_assert_int_eq(qkv_linear_init(&l, p, "", 3, 2, 1, &err), QKV_OK);
    ck_assert_ptr_eq(qkv_params_get(p, "weight"), l.weight);
    ck_assert_ptr_eq(qkv_params_get(p, "bias"), l.bias);
    qkv_params *q = qkv_params_new(1, &err);
    qkv_block b;
    ck_assert_int_eq(qkv_block_init(&b, q, "", 8, 2, 16, 1, &err), QKV_OK);
    ck_assert_ptr_eq(qkv_params_get(q, "ln1.weight"), b.ln1.gamma);
    ck_assert_ptr_eq(qkv_params_get(q, "attn.qkv.weight"), b.attn.qkv.weight);
    ck_assert_int_eq(qkv_linear_init(&l, p, NULL, 3, 2, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "layers: the name prefix is NULL (\"\" for none)");
    char prefix[130];
    memset(prefix, 'x', 125);
    prefix[125] = '\0';
    ck_assert_int_eq(qkv_linear_init(&l, p, prefix, 3, 2, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "layers: the name prefix of 125 bytes is too long: "
                                  "PREFIX.weight must fit in 127 bytes");
    ck_assert_int_eq(qkv_params_count(p), 2);
    /* a layer of layers measures the caller's prefix against its longest
     * name: 116 + 1 + 11 bytes is one too many, 115 fits exactly */
    qkv_mha m;
    qkv_ffn f;
    prefix[116] = '\0';
    ck_assert_int_eq(qkv_mha_init(&m, p, prefix, 8, 2, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "mha: the name prefix of 116 bytes is too long: "
                                  "PREFIX.proj.weight must fit in 127 bytes");
    ck_assert(m.d_model == 0 && m.heads == 0 && m.causal == 0); /* a refusal leaves zeros */
    ck_assert_int_eq(qkv_ffn_init(&f, p, prefix, 8, 16, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "ffn: the name prefix of 116 bytes is too long: "
                                  "PREFIX.down.weight must fit in 127 bytes");
    ck_assert_int_eq(qkv_params_count(p), 2);
    prefix[115] = '\0';
    ck_assert_int_eq(qkv_mha_init(&m, p, prefix, 8, 2, 1, &err), QKV_OK);
    ck_assert_int_eq(qkv_ffn_init(&f, p, prefix, 8, 16, &err), QKV_OK);
    ck_assert_int_eq(qkv_params_count(p), 10);
    qkv_params_free(p);
    qkv_params_free(q);
}
END_TEST

/* An error inside a layer's forward names the innermost layer it happened
 * in, by its init's prefix: in front of an op's message, in place of the
 * "KIND: " of the layer's own; an outer layer adds nothing, and an error
 * from before the layer is left as it was. */
START_TEST(test_layer_errors_name_the_innermost_layer)
{
    qkv_error err = qkv_error_none();
    qkv_params *p = qkv_params_new(3, &err);
    qkv_block b;
    qkv_linear head;
    ck_assert_int_eq(qkv_block_init(&b, p, "层.0", 8, 2, 16, 1, &err), QKV_OK);
    ck_assert_int_eq(qkv_linear_init(&head, p, "head", 8, 3, 1, &err), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = qkv_tape_tensor(t, 3, (const int[]){2, 5, 6}, 0);
    ck_assert(qkv_linear_forward(t, &head, x) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "linear 'head': affine: x [2,5,6], w [8,3], b [3]: the last "
                     "dimension of x is not w's first");
    qkv_tape_reset(t); /* the block checks its input itself: a wrong width is x's, */
    x = qkv_tape_tensor(t, 3, (const int[]){2, 5, 6}, 0);
    qkv_mha_parts parts = {x, x}; /* stale pointers the failed call must clear */
    ck_assert(qkv_block_forward(t, &b, x, NULL, &parts) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "block '层.0': x [2,5,6] must be [B,T,8]");
    ck_assert(parts.attn == qkv_nil() && parts.scores == qkv_nil());
    qkv_tape_reset(t); /* a nil x is the ops' to name, as before */
    ck_assert(qkv_block_forward(t, &b, NULL, NULL, NULL) == qkv_nil());
    ck_assert_ptr_null(strstr(qkv_tape_error(t), "must be [B,T,8]"));
    qkv_tape_reset(t); /* not its first layer norm's gamma */
    x = qkv_tape_tensor(t, 2, (const int[]){5, 8}, 0);
    ck_assert(qkv_block_forward(t, &b, x, NULL, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "block '层.0': x [5,8] must be [B,T,8]");
    qkv_tape_reset(t); /* a layer norm's op */
    x = qkv_tape_tensor(t, 3, (const int[]){2, 5, 6}, 0);
    ck_assert(qkv_norm_forward(t, &b.ln1, x) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "norm '层.0.ln1': layer_norm: x [2,5,6] needs gamma of shape [6], not [8]");
    qkv_tape_reset(t); /* the attention's own check, its "mha: " replaced */
    x = qkv_tape_tensor(t, 2, (const int[]){5, 8}, 0);
    ck_assert(qkv_mha_forward(t, &b.attn, x, NULL, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mha '层.0.attn': x [5,8] must be [B,T,8]");
    qkv_tape_reset(t); /* a linear layer inside the feed-forward network */
    x = qkv_tape_tensor(t, 3, (const int[]){2, 5, 6}, 0);
    ck_assert(qkv_ffn_forward(t, &b.ffn, x) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "linear '层.0.ffn.up': affine: x [2,5,6], w [8,16], b [16]: "
                     "the last dimension of x is not w's first");
    qkv_tape_reset(t); /* an error from before is not the layer's */
    x = qkv_tape_tensor(t, 3, (const int[]){2, 5, 8}, 0);
    qkv_tape_fail(t, QKV_ERR_ARG, "earlier");
    ck_assert(qkv_linear_forward(t, &head, x) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "earlier");
    qkv_tape_free(t);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_layers_refuse_bad_shapes)
{
    qkv_params *p = qkv_params_new(0, NULL);
    qkv_mha m;
    qkv_linear lin0;
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_mha_init(&m, p, "a", 10, 4, 0, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "mha: d_model 10 must be a positive multiple of the heads 4");
    ck_assert_int_eq(qkv_mha_init(&m, p, "a", 8, 2, 1, &err), QKV_OK);
    ck_assert_int_eq(qkv_mha_init(&m, p, "a", 8, 2, 1, &err), QKV_ERR_ARG); /* names taken */
    ck_assert_ptr_nonnull(strstr(err.message, "already in the list"));
    ck_assert_int_eq(qkv_params_count(p), 4); /* the first layer's, no more */
    ck_assert_ptr_null(m.qkv.weight);         /* nothing that points at a freed tensor */
    ck_assert_int_eq(qkv_mha_init(&m, p, "c", 8, 2, 1, &err), QKV_OK);
    /* a block refused part way (a name too long for its last parameters)
     * adds nothing and draws nothing: the next layer's weights are those
     * of a list where the refused block never was */
    {
        char prefix[120];
        memset(prefix, 'x', 111);
        prefix[111] = '\0';
        qkv_params *r1 = qkv_params_new(7, NULL), *r2 = qkv_params_new(7, NULL);
        qkv_block bad;
        qkv_linear l1, l2;
        ck_assert_int_eq(qkv_block_init(&bad, r1, prefix, 8, 2, 16, 1, &err), QKV_ERR_ARG);
        /* the caller's prefix is measured, against the block's longest
         * name (111 + 1 + 16 > 127), not a name derived from it */
        ck_assert_str_eq(err.message, "block: the name prefix of 111 bytes is too long: "
                                      "PREFIX.attn.proj.weight must fit in 127 bytes");
        ck_assert_int_eq(qkv_params_count(r1), 0);
        ck_assert_ptr_null(bad.attn.qkv.weight);
        /* what it had added is out of range: no tensor, no decay */
        for (int i = 0; i < 4; i++)
            ck_assert(qkv_params_at(r1, i, NULL) == NULL && !qkv_params_decay(r1, i));
        ck_assert_int_eq(qkv_linear_init(&l1, r1, "l", 3, 4, 1, &err), QKV_OK);
        ck_assert_int_eq(qkv_linear_init(&l2, r2, "l", 3, 4, 1, &err), QKV_OK);
        ck_assert_int_eq(memcmp(l1.weight->data, l2.weight->data, 12 * sizeof(qkv_real)), 0);
        qkv_params_free(r1);
        qkv_params_free(r2);
    }
    /* a block refused for its sizes adds nothing (it left ln1, or ln1, the
     * attention and ln2, in the list), so the same prefix works at once */
    qkv_params *q = qkv_params_new(0, NULL);
    qkv_block blk;
    ck_assert_int_eq(qkv_block_init(&blk, q, "b", 6, 4, 8, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "block: d_model 6 must be a positive multiple of the heads 4, "
                                  "and hidden 8 at least 1");
    ck_assert_int_eq(qkv_params_count(q), 0);
    ck_assert_int_eq(qkv_block_init(&blk, q, "b", 8, 4, 0, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "block: d_model 8 must be a positive multiple of the heads 4, "
                                  "and hidden 0 at least 1");
    ck_assert_int_eq(qkv_params_count(q), 0);
    ck_assert_int_eq(qkv_block_init(&blk, q, "b", 8, 4, 16, 1, &err), QKV_OK);
    ck_assert_int_eq(qkv_params_count(q), 12);
    qkv_params_free(q);
    /* a linear layer or an embedding with no outputs or rows is refused,
     * adding nothing */
    qkv_embedding emb;
    const int before = qkv_params_count(p);
    ck_assert_int_eq(qkv_linear_init(&lin0, p, "l0", 3, 0, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "linear: in 3 and out 0 must be at least 1");
    ck_assert_int_eq(qkv_linear_init(&lin0, p, "l0", 0, 3, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "linear: in 0 and out 3 must be at least 1");
    ck_assert_int_eq(qkv_embedding_init(&emb, p, "e0", 0, 4, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "embedding: n 0 and d 4 must be at least 1");
    ck_assert_int_eq(qkv_embedding_init(&emb, p, "e0", 4, 0, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "embedding: n 4 and d 0 must be at least 1");
    /* each refusal of a size names the sizes it was given, as the
     * ffn's, the block's and the positions' do: "norm: d must be at least
     * 1" did not say what d was */
    qkv_norm nm0;
    ck_assert_int_eq(qkv_norm_init(&nm0, p, "n0", -3, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "norm: d -3 must be at least 1");
    qkv_rnn rn0;
    qkv_lstm ls0;
    qkv_gru gr0;
    ck_assert_int_eq(qkv_rnn_init(&rn0, p, "r0", 3, 0, QKV_RNN_TANH, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "rnn: in 3 and hidden 0 must be at least 1");
    ck_assert_int_eq(qkv_lstm_init(&ls0, p, "ls0", 0, 4, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "lstm: in 0 and hidden 4 must be at least 1");
    ck_assert_int_eq(qkv_gru_init(&gr0, p, "g0", 5, -1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "gru: in 5 and hidden -1 must be at least 1");
    qkv_tensor *flat = qkv_tensor_new(1, (const int[]){6}, 0, NULL);
    ck_assert_int_eq(qkv_sinusoidal_positions(flat, &err), QKV_ERR_SHAPE);
    ck_assert_str_eq(err.message, "positions: the table [6] must be [T,D]");
    ck_assert_int_eq(qkv_sinusoidal_positions(NULL, &err), QKV_ERR_SHAPE);
    ck_assert_str_eq(err.message, "positions: the table nil must be [T,D]");
    qkv_tensor_free(flat);
    /* layers made of these name themselves and their own sizes: an FFN
     * of no hidden width said "linear: in and out must be at least 1",
     * a position table of no rows "embedding: n and d ..." */
    qkv_ffn ffn0;
    ck_assert_int_eq(qkv_ffn_init(&ffn0, p, "f0", 4, 0, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "ffn: d_model 4 and hidden 0 must be at least 1");
    ck_assert_int_eq(qkv_ffn_init(&ffn0, p, "f0", 0, 4, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "ffn: d_model 0 and hidden 4 must be at least 1");
    ck_assert_int_eq(qkv_positions_init(&emb, p, "pos0", 0, 4, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "positions: max_len 0 and d 4 must be at least 1");
    ck_assert_int_eq(qkv_positions_init(&emb, p, "pos0", 8, -1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "positions: max_len 8 and d -1 must be at least 1");
    ck_assert_int_eq(qkv_params_count(p), before);
    /* a linear layer without a bias has none; one whose bias name is
     * taken adds nothing, not even its weight */
    {
        qkv_params *r = qkv_params_new(0, NULL);
        qkv_linear nb;
        ck_assert_int_eq(qkv_linear_init(&nb, r, "nb", 3, 2, 0, &err), QKV_OK);
        ck_assert_ptr_null(nb.bias);
        ck_assert_ptr_null(qkv_params_get(r, "nb.bias"));
        ck_assert_int_eq(qkv_params_count(r), 1);
        ck_assert(!qkv_tensor_is_nil(qkv_params_add(r, "x.bias", 1, (const int[]){2},
                                                    (qkv_init){QKV_INIT_ZEROS, 0, 0}, NULL)));
        ck_assert_int_eq(qkv_linear_init(&nb, r, "x", 3, 2, 1, &err), QKV_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, "already in the list"));
        ck_assert_ptr_null(qkv_params_get(r, "x.weight"));
        ck_assert_int_eq(qkv_params_count(r), 2);
        ck_assert_ptr_null(nb.weight);
        qkv_params_free(r);
    }
    /* a NULL layer or list is named as such, not as a bad size or name */
    qkv_linear lin;
    ck_assert_int_eq(qkv_linear_init(NULL, p, "l", 2, 3, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "linear: no layer to initialise (NULL)");
    ck_assert_int_eq(qkv_linear_init(&lin, NULL, "l", 2, 3, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "params: no parameter list (NULL)");
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *x = qkv_tape_tensor(t, 3, (const int[]){2, 3, 8}, 0);
    qkv_tensor *pad = qkv_tape_tensor(t, 2, (const int[]){3, 2}, 0);
    ck_assert(qkv_mha_forward(t, &m, x, pad, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mha 'c': the padding mask [3,2] must be [2,3]");
    qkv_tape_reset(t); /* one row of the right length for two items is refused too */
    x = qkv_tape_tensor(t, 3, (const int[]){2, 3, 8}, 0);
    pad = qkv_tape_tensor(t, 2, (const int[]){1, 3}, 0);
    ck_assert(qkv_mha_forward(t, &m, x, pad, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mha 'c': the padding mask [1,3] must be [2,3]");
    qkv_tape_reset(t); /* and rows of the wrong length for the right items */
    x = qkv_tape_tensor(t, 3, (const int[]){2, 3, 8}, 0);
    pad = qkv_tape_tensor(t, 2, (const int[]){2, 4}, 0);
    ck_assert(qkv_mha_forward(t, &m, x, pad, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mha 'c': the padding mask [2,4] must be [2,3]");
    qkv_tape_reset(t);
    x = qkv_tape_tensor(t, 3, (const int[]){2, 3, 6}, 0);
    qkv_mha_parts parts;
    ck_assert(qkv_mha_forward(t, &m, x, NULL, &parts) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "mha 'c': x [2,3,6] must be [B,T,8]");
    ck_assert(parts.attn == qkv_nil());
    qkv_tape_free(t);
    qkv_params_free(p);
}
END_TEST

/* The padding mask holds 0 (a token) and -INFINITY (padding), added to
 * the scores. A mask of PyTorch's kind, 1 (True) for padding, was added as
 * +1 to those keys' scores, so that they drew more weight than the
 * tokens, and a NaN made every output NaN, both without an error; any
 * value but 0 and -inf is refused now, by the layer's name, in the
 * online form too, and in a block. */
START_TEST(test_mha_refuses_a_padding_mask_of_other_values)
{
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_mha m;
    qkv_block blk;
    ck_assert_int_eq(qkv_mha_init(&m, p, "attn", 4, 2, 0, NULL), QKV_OK);
    ck_assert_int_eq(qkv_block_init(&blk, p, "blk", 4, 2, 8, 1, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    const int T = QKV_MHA_ONLINE_T;
    qkv_tensor *x = qkv_tensor_new(3, (const int[]){2, T, 4}, 0, NULL);
    qkv_tensor *pad = qkv_tensor_new(2, (const int[]){2, T}, 0, NULL);
    ck_assert(!qkv_tensor_is_nil(x) && !qkv_tensor_is_nil(pad));
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = (qkv_real)sin((double)i);
    const struct {
        qkv_real v;
        const char *says;
    } bad[] = {
        {1, "1"}, {(qkv_real)NAN, "NaN"}, {(qkv_real)INFINITY, "infinity"}, {-1e9f, "-1e+09"}};
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        for (size_t i = 0; i < pad->numel; i++)
            pad->data[i] = i == (size_t)T + 3 ? bad[c].v : i % 7 == 6 ? -INFINITY : 0;
        char want[200];
        snprintf(want, sizeof want,
                 "mha 'attn': the padding mask holds %s at [1,3]; it takes 0 (a token) and "
                 "-INFINITY (padding) only",
                 bad[c].says);
        for (int online = 0; online < 2; online++) {
            qkv_mha_parts parts;
            qkv_tape_reset(t);
            qkv_tensor *y = qkv_mha_forward(t, &m, x, pad, online ? NULL : &parts);
            ck_assert_msg(y == qkv_nil(), "case %zu, online %d: taken", c, online);
            ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
            ck_assert_str_eq(qkv_tape_error(t), want);
        }
        qkv_tape_reset(t);
        ck_assert(qkv_block_forward(t, &blk, x, pad, NULL) == qkv_nil());
        snprintf(want, sizeof want,
                 "mha 'blk.attn': the padding mask holds %s at [1,3]; it takes 0 (a token) and "
                 "-INFINITY (padding) only",
                 bad[c].says);
        ck_assert_str_eq(qkv_tape_error(t), want);
    }
    /* 0, -0 and -inf are taken */
    for (size_t i = 0; i < pad->numel; i++)
        pad->data[i] = i % 7 == 6 ? -INFINITY : i % 2 ? (qkv_real)-0.0 : 0;
    qkv_tape_reset(t);
    ck_assert(!qkv_tensor_is_nil(qkv_mha_forward(t, &m, x, pad, NULL)));
    ck_assert_int_eq(qkv_tape_status(t), QKV_OK);
    qkv_tape_free(t);
    qkv_tensor_free(x);
    qkv_tensor_free(pad);
    qkv_params_free(p);
}
END_TEST

/* A failed init leaves a layer that its forward refuses, naming the
 * layer: a zeroed linear layer's forward read "affine: ..." (the map's,
 * not the layer's), a zeroed norm normalised with no γ or β and an eps of
 * 0, and a layer that an earlier init had filled kept its old weights,
 * which the forward then used. */
static void expect_uninitialised(qkv_tape *t, const qkv_tensor *y, const char *what)
{
    char want[160];
    snprintf(want, sizeof want,
             "%s: the layer is not initialised (its init failed or was never called)", what);
    ck_assert_msg(y == qkv_nil(), "%s: the forward gave a tensor", what);
    ck_assert_str_eq(qkv_tape_error(t), want);
    qkv_tape_reset(t);
}

START_TEST(test_a_failed_init_leaves_a_layer_its_forward_names)
{
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    const int shape[3] = {2, 3, 8}, ids[2] = {0, 1};
    /* pass 0: layers zeroed as `= {0}` declares them; pass 1: each one
     * initialised first, then given sizes its init refuses */
    for (int pass = 0; pass < 2; pass++) {
        qkv_linear l = {0};
        qkv_embedding e = {0};
        qkv_norm n = {0};
        qkv_mha m = {0};
        qkv_ffn f = {0};
        qkv_block b = {0};
        if (pass == 1) {
            ck_assert_int_eq(qkv_linear_init(&l, p, "l", 8, 8, 1, NULL), QKV_OK);
            ck_assert_int_eq(qkv_embedding_init(&e, p, "e", 8, 8, NULL), QKV_OK);
            ck_assert_int_eq(qkv_norm_init(&n, p, "n", 8, NULL), QKV_OK);
            ck_assert_int_eq(qkv_mha_init(&m, p, "m", 8, 2, 1, NULL), QKV_OK);
            ck_assert_int_eq(qkv_ffn_init(&f, p, "f", 8, 16, NULL), QKV_OK);
            ck_assert_int_eq(qkv_block_init(&b, p, "b", 8, 2, 16, 1, NULL), QKV_OK);
        }
        const int before = qkv_params_count(p);
        ck_assert_int_eq(qkv_linear_init(&l, p, "l2", 0, 8, 1, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_embedding_init(&e, p, "e2", 0, 8, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_norm_init(&n, p, "n2", 0, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_mha_init(&m, p, "m2", 8, 3, 1, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_ffn_init(&f, p, "f2", 8, 0, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_block_init(&b, p, "b2", 8, 3, 16, 1, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_params_count(p), before);
        expect_uninitialised(t, qkv_linear_forward(t, &l, qkv_tape_tensor(t, 3, shape, 0)),
                             "linear");
        expect_uninitialised(t, qkv_embedding_forward(t, &e, ids, 1, (const int[]){2}),
                             "embedding");
        expect_uninitialised(t, qkv_norm_forward(t, &n, qkv_tape_tensor(t, 3, shape, 0)), "norm");
        qkv_mha_parts parts;
        expect_uninitialised(
            t, qkv_mha_forward(t, &m, qkv_tape_tensor(t, 3, shape, 0), NULL, &parts), "mha");
        ck_assert(parts.attn == qkv_nil() && parts.scores == qkv_nil());
        expect_uninitialised(t, qkv_ffn_forward(t, &f, qkv_tape_tensor(t, 3, shape, 0)), "ffn");
        expect_uninitialised(
            t, qkv_block_forward(t, &b, qkv_tape_tensor(t, 3, shape, 0), NULL, NULL), "block");
    }
    /* a tape that failed before keeps its first error */
    qkv_linear l = {0};
    qkv_tape_fail(t, QKV_ERR_SHAPE, "earlier");
    ck_assert(qkv_linear_forward(t, &l, qkv_nil()) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "earlier");
    qkv_tape_free(t);
    qkv_params_free(p);
}
END_TEST

/* The recurrent cells likewise: a cell whose init was refused read its
 * W_x through a NULL pointer in qkv_*_cell and qkv_*_forward_ids, and the
 * others named a shape ("must be [B,0]"), or ran on the weights of an
 * earlier init. */
START_TEST(test_a_failed_cell_init_leaves_a_cell_its_steps_name)
{
    qkv_params *p = qkv_params_new(1, NULL);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *table = qkv_tensor_new(2, (const int[]){5, 3}, 0, NULL);
    const int ids[4] = {0, 1, 2, 3};
    for (int pass = 0; pass < 2; pass++) {
        qkv_rnn r = {0};
        qkv_lstm l = {0};
        qkv_gru g = {0};
        if (pass == 1) {
            ck_assert_int_eq(qkv_rnn_init(&r, p, "r", 3, 4, QKV_RNN_TANH, NULL), QKV_OK);
            ck_assert_int_eq(qkv_lstm_init(&l, p, "l", 3, 4, NULL), QKV_OK);
            ck_assert_int_eq(qkv_gru_init(&g, p, "g", 3, 4, NULL), QKV_OK);
        }
        const int before = qkv_params_count(p);
        ck_assert_int_eq(qkv_rnn_init(&r, p, "r2", 3, 4, (qkv_rnn_act)7, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_lstm_init(&l, p, "l2", 0, 4, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_gru_init(&g, p, "g2", 3, 0, NULL), QKV_ERR_ARG);
        ck_assert_int_eq(qkv_params_count(p), before);
        /* each entry point with inputs that fit the cells of the first pass */
        for (int entry = 0; entry < 4; entry++) {
            static const char *const what[3] = {"rnn", "lstm", "gru"};
            static const int gates[3] = {1, 4, 3}; /* a projection is [B, gates·H] */
            for (int c = 0; c < 3; c++) {
                qkv_tensor *x = entry == 0 ? qkv_tape_tensor(t, 2, (const int[]){2, 3}, 0)
                                : entry == 1
                                    ? qkv_tape_tensor(t, 2, (const int[]){2, 4 * gates[c]}, 0)
                                    : qkv_tape_tensor(t, 3, (const int[]){2, 2, 3}, 0);
                qkv_tensor *y = qkv_nil();
                qkv_lstm_state s = {qkv_nil(), qkv_nil()};
                if (c == 0)
                    y = entry == 0   ? qkv_rnn_cell(t, &r, x, NULL)
                        : entry == 1 ? qkv_rnn_cell_projected(t, &r, x, NULL)
                        : entry == 2 ? qkv_rnn_forward(t, &r, x, NULL, NULL)
                                     : qkv_rnn_forward_ids(t, &r, table, ids, 2, 2, NULL, NULL);
                else if (c == 1)
                    s = entry == 0   ? qkv_lstm_cell(t, &l, x, NULL)
                        : entry == 1 ? qkv_lstm_cell_projected(t, &l, x, NULL)
                        : entry == 2 ? qkv_lstm_forward(t, &l, x, NULL, NULL)
                                     : qkv_lstm_forward_ids(t, &l, table, ids, 2, 2, NULL, NULL);
                else
                    y = entry == 0   ? qkv_gru_cell(t, &g, x, NULL)
                        : entry == 1 ? qkv_gru_cell_projected(t, &g, x, NULL)
                        : entry == 2 ? qkv_gru_forward(t, &g, x, NULL, NULL)
                                     : qkv_gru_forward_ids(t, &g, table, ids, 2, 2, NULL, NULL);
                ck_assert_msg(s.c == qkv_nil(), "lstm entry %d: a cell state", entry);
                expect_uninitialised(t, c == 1 ? s.h : y, what[c]);
            }
        }
    }
    qkv_tensor_free(table);
    qkv_tape_free(t);
    qkv_params_free(p);
}
END_TEST

/* ---- recurrent cells against PyTorch's formulas, loop by loop ----------- */

enum { CB = 2, CI = 3, CH = 4, CT = 3 };

static double sigm(double x)
{
    return 1 / (1 + exp(-x));
}

/* w[r, c] of a [rows, cols] parameter, in double. */
static double at(const qkv_tensor *w, int r, int c)
{
    return (double)w->data[(size_t)r * w->shape[1] + c];
}

/* z[b, j] = Σ_i x[b,i]·wx[i,j] + Σ_i h[b,i]·wh[i,j] (+ b1[j] + b2[j]) for
 * j in [0, kH); h may be NULL. */
static void ref_pre(const double *x, const double *h, const qkv_tensor *wx, const qkv_tensor *wh,
                    const qkv_tensor *b1, int kh, double *z)
{
    for (int b = 0; b < CB; b++)
        for (int j = 0; j < kh; j++) {
            double s = b1 != NULL ? (double)b1->data[j] : 0;
            for (int i = 0; i < CI; i++)
                s += x[b * CI + i] * at(wx, i, j);
            for (int i = 0; h != NULL && i < CH; i++)
                s += h[b * CH + i] * at(wh, i, j);
            z[b * kh + j] = s;
        }
}

/* Steps of input: U[-1, 1) values as heap tensors and their doubles. */
static void cell_inputs(qkv_tensor **x, double (*xd)[CB * CI])
{
    qkv_rng g;
    qkv_rng_seed(&g, 21);
    for (int s = 0; s < CT; s++) {
        x[s] = qkv_tensor_new(2, (const int[]){CB, CI}, 0, NULL);
        for (int i = 0; i < CB * CI; i++)
            x[s]->data[i] = (qkv_real)(xd[s][i] = (double)(qkv_real)(2 * qkv_rng_random(&g) - 1));
    }
}

/* The sequence form's inputs: cell_inputs' steps (xs, and xd in double)
 * laid out as one x [CT,CB,CI] in *x, and a first state h0 [CB,CH] of
 * values exact in float, in *h0 and h0d. */
static void sequence_inputs(qkv_tensor **xs, double (*xd)[CB * CI], qkv_tensor **x, qkv_tensor **h0,
                            double *h0d)
{
    cell_inputs(xs, xd);
    *x = qkv_tensor_new(3, (const int[]){CT, CB, CI}, 0, NULL);
    *h0 = qkv_tensor_new(2, (const int[]){CB, CH}, 0, NULL);
    for (int s = 0; s < CT; s++)
        memcpy((*x)->data + (size_t)s * CB * CI, xs[s]->data, sizeof *(*x)->data * CB * CI);
    for (int i = 0; i < CB * CH; i++)
        (*h0)->data[i] = (qkv_real)(h0d[i] = 0.25 * (i % 5) - 0.5);
}

/* A zeroed qkv_lstm_state (h and c NULL) is a zero state, as a NULL one
 * is and as the sequence form's shape check calls it ("none"): it failed
 * inside the cell with "mul: input is nil". One step from it against
 * c = σ(z_i)·tanh(z_g), h = σ(z_o)·tanh(c), z = x·W_x + b. */
START_TEST(test_a_zeroed_lstm_state_is_a_zero_state)
{
    qkv_params *p = qkv_params_new(4, NULL);
    qkv_lstm lstm;
    ck_assert_int_eq(qkv_lstm_init(&lstm, p, "lstm", CI, CH, NULL), QKV_OK);
    qkv_tensor *x[CT];
    double xd[CT][CB * CI], z[CB * 4 * CH];
    cell_inputs(x, xd);
    ref_pre(xd[0], NULL, lstm.wx, NULL, lstm.b, 4 * CH, z);
    qkv_tensor *xseq = qkv_tensor_new(3, (const int[]){1, CB, CI}, 0, NULL);
    ck_assert_int_eq(qkv_tensor_set(xseq, x[0]->data, CB * CI), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    const qkv_lstm_state zero = {NULL, NULL};
    for (int form = 0; form < 2; form++) {
        qkv_tape_reset(t);
        qkv_lstm_state s = form == 0 ? qkv_lstm_cell(t, &lstm, x[0], &zero)
                                     : qkv_lstm_forward(t, &lstm, xseq, &zero, NULL);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        for (int b = 0; b < CB; b++)
            for (int j = 0; j < CH; j++) {
                const double *zb = z + b * 4 * CH;
                double c = sigm(zb[j]) * tanh(zb[2 * CH + j]);
                double h = sigm(zb[3 * CH + j]) * tanh(c);
                ASSERT_NEAR(s.c->data[b * CH + j], c, 1e-5);
                ASSERT_NEAR(s.h->data[b * CH + j], h, 1e-5);
            }
    }
    qkv_tape_free(t);
    qkv_tensor_free(xseq);
    for (int s = 0; s < CT; s++)
        qkv_tensor_free(x[s]);
    qkv_params_free(p);
}
END_TEST

START_TEST(test_recurrent_cells_follow_pytorchs_formulas)
{
    qkv_params *p = qkv_params_new(4, NULL);
    qkv_rnn rnn;
    qkv_lstm lstm;
    qkv_gru gru;
    ck_assert_int_eq(qkv_rnn_init(&rnn, p, "rnn", CI, CH, QKV_RNN_TANH, NULL), QKV_OK);
    ck_assert_int_eq(qkv_lstm_init(&lstm, p, "lstm", CI, CH, NULL), QKV_OK);
    ck_assert_int_eq(qkv_gru_init(&gru, p, "gru", CI, CH, NULL), QKV_OK);
    /* the shapes and PyTorch's U(±1/√H) start */
    ck_assert_int_eq(lstm.wh->shape[1], 4 * CH);
    ck_assert_int_eq(gru.bh->shape[0], 3 * CH);
    for (int i = 0; i < qkv_params_count(p); i++) {
        const qkv_tensor *w = qkv_params_at(p, i, NULL);
        for (size_t j = 0; j < w->numel; j++)
            ck_assert(fabs((double)w->data[j]) <= 0.5); /* 1/√4 */
    }
    qkv_tensor *x[CT];
    double xd[CT][CB * CI];
    cell_inputs(x, xd);
    qkv_tape *t = qkv_tape_new(0, NULL);
    /* the sequence forms, whose every step is held to the same reference */
    qkv_tensor *xseq = qkv_tensor_new(3, (const int[]){CT, CB, CI}, 0, NULL);
    for (int s = 0; s < CT; s++)
        memcpy(xseq->data + (size_t)s * CB * CI, x[s]->data, sizeof *xseq->data * CB * CI);
    qkv_lstm_state lseq[CT];
    qkv_tensor *gseq[CT];
    ck_assert(qkv_lstm_forward(t, &lstm, xseq, NULL, lseq).h == lseq[CT - 1].h);
    ck_assert(qkv_gru_forward(t, &gru, xseq, NULL, gseq) == gseq[CT - 1]);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    qkv_tensor *hr = NULL, *hg = NULL;
    qkv_lstm_state ls = {NULL, NULL};
    double rh[CB * CH], lh[CB * CH], lc[CB * CH], gh[CB * CH];
    for (int s = 0; s < CT; s++) {
        hr = qkv_rnn_cell(t, &rnn, x[s], hr);
        ls = qkv_lstm_cell(t, &lstm, x[s], s ? &ls : NULL);
        hg = qkv_gru_cell(t, &gru, x[s], hg);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        double z[CB * 4 * CH], u[CB * 3 * CH], a[CB * 3 * CH];
        /* Elman */
        ref_pre(xd[s], s ? rh : NULL, rnn.wx, rnn.wh, rnn.b, CH, z);
        for (int i = 0; i < CB * CH; i++)
            rh[i] = tanh(z[i]);
        /* LSTM: i, f, g, o */
        ref_pre(xd[s], s ? lh : NULL, lstm.wx, lstm.wh, lstm.b, 4 * CH, z);
        for (int b = 0; b < CB; b++)
            for (int j = 0; j < CH; j++) {
                const double *zb = z + b * 4 * CH;
                double c = sigm(zb[j]) * tanh(zb[2 * CH + j]);
                if (s)
                    c += sigm(zb[CH + j]) * lc[b * CH + j];
                lc[b * CH + j] = c;
                lh[b * CH + j] = sigm(zb[3 * CH + j]) * tanh(c);
            }
        /* GRU: a = x·W_x + b_x, u = h·W_h + b_h; r, z, n */
        ref_pre(xd[s], NULL, gru.wx, gru.wh, gru.bx, 3 * CH, a);
        for (int b = 0; b < CB; b++)
            for (int j = 0; j < 3 * CH; j++) {
                double v = (double)gru.bh->data[j];
                for (int i = 0; s && i < CH; i++)
                    v += gh[b * CH + i] * at(gru.wh, i, j);
                u[b * 3 * CH + j] = v;
            }
        for (int b = 0; b < CB; b++)
            for (int j = 0; j < CH; j++) {
                const double *ab = a + b * 3 * CH, *ub = u + b * 3 * CH;
                double r = sigm(ab[j] + ub[j]), zz = sigm(ab[CH + j] + ub[CH + j]);
                double n = tanh(ab[2 * CH + j] + r * ub[2 * CH + j]);
                gh[b * CH + j] = (1 - zz) * n + zz * (s ? gh[b * CH + j] : 0);
            }
        expect_close(hr, rh, CB * CH);
        expect_close(ls.h, lh, CB * CH);
        expect_close(ls.c, lc, CB * CH);
        expect_close(hg, gh, CB * CH);
        expect_close(lseq[s].h, lh, CB * CH);
        expect_close(lseq[s].c, lc, CB * CH);
        expect_close(gseq[s], gh, CB * CH);
    }
    /* from a given first state: steps 1 and 2 again, from step 0's state */
    qkv_tensor *x12 = qkv_tensor_new(3, (const int[]){CT - 1, CB, CI}, 0, NULL);
    memcpy(x12->data, xseq->data + CB * CI, sizeof *x12->data * (CT - 1) * CB * CI);
    qkv_lstm_state l12[CT - 1];
    qkv_tensor *g12[CT - 1];
    qkv_lstm_forward(t, &lstm, x12, &lseq[0], l12);
    qkv_gru_forward(t, &gru, x12, gseq[0], g12);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    for (int s = 1; s < CT; s++) {
        double want[CB * CH];
        for (int i = 0; i < CB * CH; i++)
            want[i] = (double)lseq[s].h->data[i];
        expect_close(l12[s - 1].h, want, CB * CH);
        for (int i = 0; i < CB * CH; i++)
            want[i] = (double)lseq[s].c->data[i];
        expect_close(l12[s - 1].c, want, CB * CH);
        for (int i = 0; i < CB * CH; i++)
            want[i] = (double)gseq[s]->data[i];
        expect_close(g12[s - 1], want, CB * CH);
    }
    qkv_tensor_free(x12);
    /* a state of the wrong width is refused, naming both shapes and what
     * the state must be; a wrong input is named alone, with no "state
     * none [B,4]" beside it, as if a missing state were wrong (the
     * messages read "the input [2,3] must be [B,3] and the state none,
     * none [B,4] each") */
    qkv_tape_reset(t);
    ck_assert(qkv_rnn_cell(t, &rnn, x[0], x[1]) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "rnn 'rnn': the state [2,3] must be [2,4] (batch, hidden) "
                                        "for the input [2,3]");
    qkv_tape_reset(t); /* the projected form names what it was given */
    ck_assert(qkv_rnn_cell_projected(t, &rnn, x[0], NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "rnn 'rnn': the input projection [2,3] must be [B,4]");
    qkv_tape_reset(t); /* the cells check x itself, before x·W_x */
    ck_assert(qkv_lstm_cell(t, &lstm, xseq, NULL).h == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "lstm 'lstm': the input [3,2,3] must be [B,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_gru_cell(t, &gru, x[0], x[1]) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "gru 'gru': the state [2,3] must be [2,4] (batch, hidden) "
                                        "for the input [2,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_lstm_forward(t, &lstm, x[0], NULL, NULL).h == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "lstm 'lstm': the sequence [2,3] must be [T,B,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_lstm_forward(t, &lstm, xseq, &(qkv_lstm_state){x[1], x[2]}, NULL).c == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "lstm 'lstm': the first state [2,3] must be [2,4] (batch, "
                                        "hidden) for the sequence [3,2,3]");
    qkv_tape_reset(t); /* h right, c wrong: the cell state is named */
    qkv_tensor *h24 = qkv_tape_tensor(t, 2, (const int[]){2, 4}, 0);
    ck_assert(qkv_lstm_forward(t, &lstm, xseq, &(qkv_lstm_state){h24, x[2]}, NULL).c == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "lstm 'lstm': the first cell state [2,3] must be [2,4] "
                                        "(batch, hidden) for the sequence [3,2,3]");
    qkv_tape_reset(t);
    qkv_tensor *gs[CT] = {x[0], x[0], x[0]};
    ck_assert(qkv_gru_forward(t, &gru, xseq, x[1], gs) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "gru 'gru': the first state [2,3] must be [2,4] (batch, "
                                        "hidden) for the sequence [3,2,3]");
    ck_assert(gs[0] == x[0]); /* refused before any step: untouched */
    /* a tape that had failed already: nil, the states untouched */
    ck_assert(qkv_gru_forward(t, &gru, xseq, NULL, gs) == qkv_nil());
    for (int s = 0; s < CT; s++)
        ck_assert(gs[s] == x[0]);
    /* memory running out once the steps have begun (a tiny arena that must
     * grow): nil, and nil in every state */
    qkv_tape *small = qkv_tape_new(64, NULL);
    qkv_alloc_fail_at(qkv_alloc_count() + 1);
    ck_assert(qkv_gru_forward(small, &gru, xseq, NULL, gs) == qkv_nil());
    qkv_alloc_fail_at(0);
    ck_assert_int_eq(qkv_tape_status(small), QKV_ERR_NOMEM);
    for (int s = 0; s < CT; s++)
        ck_assert(gs[s] == qkv_nil());
    qkv_tape_free(small);
    qkv_tensor_free(xseq);
    qkv_tape_free(t);
    for (int s = 0; s < CT; s++)
        qkv_tensor_free(x[s]);
    qkv_params_free(p);
}
END_TEST

/* Every weight and bias of a cell starts U(-1/√H, 1/√H), as PyTorch's
 * nn.RNN, nn.LSTM and nn.GRU start them (layers.h), drawn from the list's
 * generator in the order the cell adds them: wx, wh, b (the GRU's wx, wh,
 * bx, bh). CPython, random.seed(6), then -0.5 + 1.0·random() for each
 * value in turn (H = 4; in = 3, so that a bound of 1/√in would show):
 * each parameter's first and last value. One rounding to qkv_real: within
 * 2·REAL_EPS of each, relative. */
static const double CELL_DRAWS[3][4][2] = {{{0.29334008376166298, 0.30191548316260364},
                                            {0.22982483262201603, -0.05478758588715682},
                                            {-0.40621962580406035, -0.20881643818653439}},
                                           {{0.29334008376166298, -0.19567559393212486},
                                            {0.089156740304713433, -0.19432647053548235},
                                            {0.30474098374889202, -0.44289495659933831}},
                                           {{0.29334008376166298, 0.15540399337318411},
                                            {-0.13962043459190387, 0.33125951424254885},
                                            {0.29609883633606726, -0.47812664108021352},
                                            {-0.37650468758391187, -0.025291072902921208}}};

/* Cell c (0 Elman, 1 LSTM, 2 GRU) of CI inputs and CH states into p
 * under prefix; zeroes the other two. */
static qkv_status cell_init(int c, qkv_params *p, const char *prefix, qkv_rnn *r, qkv_lstm *l,
                            qkv_gru *g, qkv_error *err)
{
    return c == 0   ? qkv_rnn_init(r, p, prefix, CI, CH, QKV_RNN_TANH, err)
           : c == 1 ? qkv_lstm_init(l, p, prefix, CI, CH, err)
                    : qkv_gru_init(g, p, prefix, CI, CH, err);
}

/* Parameters first .. first+n-1 of p against CELL_DRAWS[c]. */
static void expect_cell_draws(const qkv_params *p, int first, int c)
{
    const int n = c == 2 ? 4 : 3;
    for (int i = 0; i < n; i++) {
        const qkv_tensor *w = qkv_params_at(p, first + i, NULL);
        ck_assert_ptr_nonnull(w);
        const double *want = CELL_DRAWS[c][i];
        ASSERT_NEAR(w->data[0], want[0], 2 * REAL_EPS * fabs(want[0]));
        ASSERT_NEAR(w->data[w->numel - 1], want[1], 2 * REAL_EPS * fabs(want[1]));
    }
}

START_TEST(test_recurrent_cells_start_from_pytorchs_draws)
{
    for (int c = 0; c < 3; c++) {
        qkv_params *p = qkv_params_new(6, NULL);
        qkv_rnn r;
        qkv_lstm l;
        qkv_gru g;
        ck_assert_int_eq(cell_init(c, p, "c", &r, &l, &g, NULL), QKV_OK);
        ck_assert_int_eq(qkv_params_count(p), c == 2 ? 4 : 3);
        expect_cell_draws(p, 0, c);
        qkv_params_free(p);
    }
}
END_TEST

/* A cell refused part way, its last parameter's name taken already,
 * adds nothing and draws nothing, as a layer refused part way does: the
 * list holds what it held, the cell is zeroed, and the next cell draws
 * what a fresh list's first cell draws (CELL_DRAWS). */
START_TEST(test_a_cell_refused_part_way_adds_and_draws_nothing)
{
    for (int c = 0; c < 3; c++) {
        qkv_params *p = qkv_params_new(6, NULL);
        /* zeros: the taken name draws nothing itself */
        ck_assert(!qkv_tensor_is_nil(
            qkv_params_add(p, c == 2 ? "c.bh" : "c.b", 1, (const int[]){4}, ZEROS, NULL)));
        qkv_rnn r;
        qkv_lstm l;
        qkv_gru g;
        qkv_error err = qkv_error_none();
        ck_assert_int_eq(cell_init(c, p, "c", &r, &l, &g, &err), QKV_ERR_ARG);
        ck_assert_ptr_nonnull(strstr(err.message, "already in the list"));
        ck_assert_int_eq(qkv_params_count(p), 1);
        ck_assert_ptr_null(c == 0 ? r.wx : c == 1 ? l.wx : g.wx);
        ck_assert_int_eq(cell_init(c, p, "d", &r, &l, &g, NULL), QKV_OK);
        ck_assert_int_eq(qkv_params_count(p), c == 2 ? 5 : 4);
        expect_cell_draws(p, 1, c);
        qkv_params_free(p);
    }
}
END_TEST

/* QKV_RNN_LINEAR is the identity (layers.h): h' = x·W_x + h·W_h + b, with
 * no tanh, step by step and in the sequence form, from a given first
 * state, against the double reference. The check that some |z| > 0.3
 * keeps the test able to tell: there tanh(z) is off from z by 9e-3 and
 * more, far above FWD_TOL. */
START_TEST(test_a_linear_elman_cell_applies_no_activation)
{
    qkv_params *p = qkv_params_new(5, NULL);
    qkv_rnn rnn;
    ck_assert_int_eq(qkv_rnn_init(&rnn, p, "rnn", CI, CH, QKV_RNN_LINEAR, NULL), QKV_OK);
    qkv_tensor *xs[CT], *x, *h0;
    double xd[CT][CB * CI], h[CB * CH], z[CB * CH], zmax = 0;
    sequence_inputs(xs, xd, &x, &h0, h);
    qkv_tape *t = qkv_tape_new(0, NULL);
    qkv_tensor *states[CT], *hc = h0;
    qkv_rnn_forward(t, &rnn, x, h0, states);
    for (int s = 0; s < CT; s++) {
        hc = qkv_rnn_cell(t, &rnn, xs[s], hc);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        ref_pre(xd[s], h, rnn.wx, rnn.wh, rnn.b, CH, z);
        for (int i = 0; i < CB * CH; i++)
            zmax = fmax(zmax, fabs(h[i] = z[i]));
        expect_close(hc, h, CB * CH);
        expect_close(states[s], h, CB * CH);
    }
    ck_assert_msg(zmax > 0.3, "max |z| %g: too small to tell z from tanh(z)", zmax);
    qkv_tape_free(t);
    for (int s = 0; s < CT; s++)
        qkv_tensor_free(xs[s]);
    qkv_tensor_free(x);
    qkv_tensor_free(h0);
    qkv_params_free(p);
}
END_TEST

/* An LSTM state with one part NULL has that part zero, the other as
 * given (layers.h), in the cell and the sequence form: from {NULL, c},
 * z = x·W_x + b and c' = σ(z_f)∘c + σ(z_i)∘tanh(z_g); from {h, NULL},
 * z = x·W_x + h·W_h + b and c' = σ(z_i)∘tanh(z_g); h' = σ(z_o)∘tanh(c')
 * in both. */
START_TEST(test_an_lstm_state_with_one_part_null_has_that_part_zero)
{
    qkv_params *p = qkv_params_new(4, NULL);
    qkv_lstm lstm;
    ck_assert_int_eq(qkv_lstm_init(&lstm, p, "lstm", CI, CH, NULL), QKV_OK);
    qkv_tensor *x[CT];
    double xd[CT][CB * CI], hd[CB * CH], cd[CB * CH], z[CB * 4 * CH];
    cell_inputs(x, xd);
    qkv_tensor *xseq = qkv_tensor_new(3, (const int[]){1, CB, CI}, 0, NULL);
    ck_assert_int_eq(qkv_tensor_set(xseq, x[0]->data, CB * CI), QKV_OK);
    qkv_tensor *h = qkv_tensor_new(2, (const int[]){CB, CH}, 0, NULL);
    qkv_tensor *c = qkv_tensor_new(2, (const int[]){CB, CH}, 0, NULL);
    for (int i = 0; i < CB * CH; i++) { /* exact in float */
        h->data[i] = (qkv_real)(hd[i] = 0.25 * (i % 5) - 0.5);
        c->data[i] = (qkv_real)(cd[i] = 0.75 - 0.25 * (i % 7));
    }
    qkv_tape *t = qkv_tape_new(0, NULL);
    for (int which = 0; which < 2; which++) { /* 0: {NULL, c}; 1: {h, NULL} */
        const qkv_lstm_state s0 =
            which == 0 ? (qkv_lstm_state){NULL, c} : (qkv_lstm_state){h, NULL};
        ref_pre(xd[0], which == 1 ? hd : NULL, lstm.wx, lstm.wh, lstm.b, 4 * CH, z);
        double cw[CB * CH], hw[CB * CH];
        for (int b = 0; b < CB; b++)
            for (int j = 0; j < CH; j++) {
                const double *zb = z + b * 4 * CH;
                double cc = sigm(zb[j]) * tanh(zb[2 * CH + j]);
                if (which == 0)
                    cc += sigm(zb[CH + j]) * cd[b * CH + j];
                cw[b * CH + j] = cc;
                hw[b * CH + j] = sigm(zb[3 * CH + j]) * tanh(cc);
            }
        for (int form = 0; form < 2; form++) {
            qkv_tape_reset(t);
            qkv_lstm_state s = form == 0 ? qkv_lstm_cell(t, &lstm, x[0], &s0)
                                         : qkv_lstm_forward(t, &lstm, xseq, &s0, NULL);
            ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
            expect_close(s.c, cw, CB * CH);
            expect_close(s.h, hw, CB * CH);
        }
    }
    qkv_tape_free(t);
    qkv_tensor_free(xseq);
    qkv_tensor_free(h);
    qkv_tensor_free(c);
    for (int s = 0; s < CT; s++)
        qkv_tensor_free(x[s]);
    qkv_params_free(p);
}
END_TEST

/* The sequence form against the same recurrence in double: from a zero
 * state and from a given one, every step's state, and the shape errors. */
START_TEST(test_the_rnn_sequence_form_runs_every_step)
{
    qkv_params *p = qkv_params_new(3, NULL);
    qkv_rnn rnn;
    ck_assert_int_eq(qkv_rnn_init(&rnn, p, "rnn", CI, CH, QKV_RNN_TANH, NULL), QKV_OK);
    qkv_tensor *xs[CT], *x, *h0;
    double xd[CT][CB * CI], h0d[CB * CH];
    sequence_inputs(xs, xd, &x, &h0, h0d);
    qkv_tape *t = qkv_tape_new(0, NULL);
    for (int from = 0; from < 2; from++) {
        qkv_tape_reset(t);
        qkv_tensor *states[CT];
        qkv_tensor *last = qkv_rnn_forward(t, &rnn, x, from ? h0 : NULL, states);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        ck_assert(last == states[CT - 1]);
        double h[CB * CH], z[CB * CH];
        memcpy(h, h0d, sizeof h);
        for (int s = 0; s < CT; s++) {
            ref_pre(xd[s], s || from ? h : NULL, rnn.wx, rnn.wh, rnn.b, CH, z);
            for (int i = 0; i < CB * CH; i++)
                h[i] = tanh(z[i]);
            ck_assert_int_eq(states[s]->ndim, 2);
            expect_close(states[s], h, CB * CH);
        }
    }
    /* a sequence without its time axis, and a first state of the wrong width */
    qkv_tape_reset(t);
    ck_assert(qkv_rnn_forward(t, &rnn, xs[0], NULL, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "rnn 'rnn': the sequence [2,3] must be [T,B,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_rnn_forward(t, &rnn, x, xs[0], NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "rnn 'rnn': the first state [2,3] must be [2,4] (batch, "
                                        "hidden) for the sequence [3,2,3]");
    qkv_tape_free(t);
    for (int s = 0; s < CT; s++)
        qkv_tensor_free(xs[s]);
    qkv_tensor_free(x);
    qkv_tensor_free(h0);
    qkv_params_free(p);
}
END_TEST

/* The gradients of every parameter in p and of the table, after backward
 * from the sum of the last state times a fixed readout, into g (zeroed
 * first); fn runs the forward and returns the last state. */
typedef qkv_tensor *(*seq_fn)(qkv_tape *t, void *ctx, qkv_tensor *table, const int *ids);

static void seq_grads(qkv_tape *t, qkv_params *p, qkv_tensor *table, const int *ids, seq_fn fn,
                      void *ctx, double *g, size_t ng)
{
    qkv_params_zero_grad(p);
    qkv_tensor_zero_grad(table);
    qkv_tape_reset(t);
    qkv_tensor *h = fn(t, ctx, table, ids);
    ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
    qkv_tensor *r = qkv_tape_tensor(t, h->ndim, h->shape, 0);
    for (size_t i = 0; i < r->numel; i++)
        r->data[i] = (qkv_real)(0.25 * (double)(i % 7) - 0.75);
    ck_assert_int_eq(qkv_backward(t, qkv_sum(t, qkv_mul(t, h, r))), QKV_OK);
    size_t k = 0;
    for (size_t i = 0; i < table->numel; i++)
        g[k++] = (double)table->grad[i];
    for (int j = 0; j < qkv_params_count(p); j++) {
        const qkv_tensor *w = qkv_params_at(p, j, NULL);
        for (size_t i = 0; i < w->numel; i++)
            g[k++] = (double)w->grad[i];
    }
    ck_assert_uint_eq(k, ng);
}

typedef struct ids_ctx {
    qkv_rnn rnn;
    qkv_lstm lstm;
    qkv_gru gru;
    int kind, ids_form, steps, batch; /* kind 0 rnn, 1 lstm, 2 gru */
} ids_ctx;

/* The last state from tokens: the _ids form, or a gather then the
 * sequence form. */
static qkv_tensor *ids_last(qkv_tape *t, void *p, qkv_tensor *table, const int *ids)
{
    ids_ctx *c = p;
    const int T = c->steps, B = c->batch;
    qkv_tensor *x = c->ids_form ? NULL : qkv_gather(t, table, ids, 2, (const int[]){T, B});
    if (c->kind == 0)
        return c->ids_form ? qkv_rnn_forward_ids(t, &c->rnn, table, ids, T, B, NULL, NULL)
                           : qkv_rnn_forward(t, &c->rnn, x, NULL, NULL);
    if (c->kind == 1)
        return c->ids_form ? qkv_lstm_forward_ids(t, &c->lstm, table, ids, T, B, NULL, NULL).h
                           : qkv_lstm_forward(t, &c->lstm, x, NULL, NULL).h;
    return c->ids_form ? qkv_gru_forward_ids(t, &c->gru, table, ids, T, B, NULL, NULL)
                       : qkv_gru_forward(t, &c->gru, x, NULL, NULL);
}

/* Tokens in: each cell's _ids form against a gather followed by its
 * sequence form, with a table of fewer rows than tokens (projected once,
 * then gathered) and of more (gathered, then projected): the Elman
 * states against the double reference, every last state and gradient
 * against the gather form's; the projected table keeps no copy of the
 * tokens' embeddings on the tape; and the errors. */
START_TEST(test_token_input_projects_a_small_table_once)
{
    qkv_params *p = qkv_params_new(3, NULL);
    ids_ctx c = {.steps = CT, .batch = CB};
    ck_assert_int_eq(qkv_rnn_init(&c.rnn, p, "rnn", CI, CH, QKV_RNN_TANH, NULL), QKV_OK);
    ck_assert_int_eq(qkv_lstm_init(&c.lstm, p, "lstm", CI, CH, NULL), QKV_OK);
    ck_assert_int_eq(qkv_gru_init(&c.gru, p, "gru", CI, CH, NULL), QKV_OK);
    qkv_tape *t = qkv_tape_new(0, NULL);
    enum { NP = 8 * CI * CH + 8 * CH * CH + 11 * CH }; /* the three cells' parameters */
    for (int V = 4; V <= 8; V += 4) {                  /* 4 rows < CT·CB = 6 tokens <= 8 rows */
        qkv_tensor *table = qkv_tensor_new(2, (const int[]){V, CI}, 1, NULL);
        for (size_t i = 0; i < table->numel; i++)
            table->data[i] = (qkv_real)(0.125 * (double)((i * 5) % 11) - 0.625);
        int ids[CT * CB];
        for (int i = 0; i < CT * CB; i++)
            ids[i] = (i * 3 + 1) % V; /* V = 4: 1, 0, 3, 2, 1, 0 */
        /* Elman's states against the double reference */
        qkv_tape_reset(t);
        qkv_tensor *states[CT];
        qkv_rnn_forward_ids(t, &c.rnn, table, ids, CT, CB, NULL, states);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        double h[CB * CH], z[CB * CH], xd[CB * CI];
        for (int s = 0; s < CT; s++) {
            for (int b = 0; b < CB; b++)
                for (int i = 0; i < CI; i++)
                    xd[b * CI + i] = (double)table->data[ids[s * CB + b] * CI + i];
            ref_pre(xd, s ? h : NULL, c.rnn.wx, c.rnn.wh, c.rnn.b, CH, z);
            for (int i = 0; i < CB * CH; i++)
                h[i] = tanh(z[i]);
            expect_close(states[s], h, CB * CH);
        }
        /* every cell's gradients against the gather form's */
        for (c.kind = 0; c.kind < 3; c.kind++) {
            double g[2][8 * CI + NP];
            for (c.ids_form = 0; c.ids_form < 2; c.ids_form++)
                seq_grads(t, p, table, ids, ids_last, &c, g[c.ids_form], table->numel + (size_t)NP);
            for (size_t i = 0; i < table->numel + (size_t)NP; i++)
                ck_assert_msg(fabs(g[1][i] - g[0][i]) <= FWD_TOL,
                              "cell %d, V %d, gradient %zu: %.9g, the gather form's %.9g", c.kind,
                              V, i, g[1][i], g[0][i]);
        }
        qkv_tensor_free(table);
    }
    /* 64 steps of 8 tokens from a 4-row table: no [512,in] copy of the
     * tokens' embeddings (the gather form keeps one) */
    enum { LT = 64, LB = 8 };
    qkv_tensor *table = qkv_tensor_new(2, (const int[]){4, CI}, 1, NULL);
    int ids[LT * LB];
    for (int i = 0; i < LT * LB; i++)
        ids[i] = i % 4;
    size_t used[2];
    c.kind = 0;
    c.steps = LT;
    c.batch = LB;
    for (c.ids_form = 0; c.ids_form < 2; c.ids_form++) {
        qkv_tape_reset(t);
        ids_last(t, &c, table, ids);
        ck_assert_msg(qkv_tape_status(t) == QKV_OK, "%s", qkv_tape_error(t));
        used[c.ids_form] = qkv_tape_bytes_used(t);
    }
    ck_assert_msg(used[1] + (size_t)LT * LB * CI * sizeof(qkv_real) <= used[0],
                  "the ids form used %zu bytes of tape, the gather form %zu", used[1], used[0]);
    /* errors: the table's width, the ids, an id out of range, the first state */
    qkv_tensor *wide = qkv_tensor_new(2, (const int[]){4, CI + 1}, 0, NULL);
    qkv_tensor *h0 = qkv_tensor_new(2, (const int[]){CB + 1, CH}, 0, NULL);
    qkv_tape_reset(t);
    ck_assert(qkv_rnn_forward_ids(t, &c.rnn, wide, ids, CT, CB, NULL, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t), "rnn 'rnn': the embedding table [4,4] must be [V,3]");
    qkv_tape_reset(t);
    ck_assert(qkv_gru_forward_ids(t, &c.gru, table, NULL, CT, CB, NULL, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "gru 'gru': ids [3,2] (NULL): need ids, at least 1 step and 1 "
                     "sentence, and at most 2147483647 tokens");
    qkv_tape_reset(t);
    ck_assert(qkv_lstm_forward_ids(t, &c.lstm, table, ids, 0, CB, NULL, NULL).h == qkv_nil());
    ck_assert_int_eq(qkv_tape_status(t), QKV_ERR_ARG);
    ids[3] = 4;
    qkv_tape_reset(t);
    ck_assert(qkv_rnn_forward_ids(t, &c.rnn, table, ids, CT, CB, NULL, NULL) == qkv_nil());
    ck_assert_str_eq(
        qkv_tape_error(t),
        "rnn 'rnn': id 4 at step 1, sentence 1 is outside [0,4) of the embedding table [4,3]");
    qkv_tape_reset(t); /* the ids are checked before h0 */
    ck_assert(qkv_rnn_forward_ids(t, &c.rnn, table, ids, CT, CB, h0, NULL) == qkv_nil());
    ck_assert_str_eq(
        qkv_tape_error(t),
        "rnn 'rnn': id 4 at step 1, sentence 1 is outside [0,4) of the embedding table [4,3]");
    ids[3] = 3;
    qkv_tape_reset(t);
    ck_assert(qkv_rnn_forward_ids(t, &c.rnn, table, ids, CT, CB, h0, NULL) == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "rnn 'rnn': the first state [3,4] must be [2,4] (batch, hidden)");
    qkv_tape_reset(t);
    const qkv_lstm_state s0 = {NULL, h0};
    ck_assert(qkv_lstm_forward_ids(t, &c.lstm, table, ids, CT, CB, &s0, NULL).c == qkv_nil());
    ck_assert_str_eq(qkv_tape_error(t),
                     "lstm 'lstm': the first cell state [3,4] must be [2,4] (batch, hidden)");
    /* memory running out in the projection, after the checks (a tiny
     * arena that must grow): nil in every state, as the sequence forms */
    for (int kind = 0; kind < 3; kind++) {
        qkv_tape *small = qkv_tape_new(64, NULL);
        qkv_tensor *hs[CT] = {wide, wide, wide};
        qkv_lstm_state ls[CT];
        for (int s = 0; s < CT; s++)
            ls[s] = (qkv_lstm_state){wide, wide};
        qkv_alloc_fail_at(qkv_alloc_count() + 1);
        if (kind == 0)
            ck_assert(qkv_rnn_forward_ids(small, &c.rnn, table, ids, CT, CB, NULL, hs) ==
                      qkv_nil());
        else if (kind == 1)
            ck_assert(qkv_lstm_forward_ids(small, &c.lstm, table, ids, CT, CB, NULL, ls).h ==
                      qkv_nil());
        else
            ck_assert(qkv_gru_forward_ids(small, &c.gru, table, ids, CT, CB, NULL, hs) ==
                      qkv_nil());
        qkv_alloc_fail_at(0);
        ck_assert_int_eq(qkv_tape_status(small), QKV_ERR_NOMEM);
        for (int s = 0; s < CT; s++)
            ck_assert_msg(kind == 1 ? ls[s].h == qkv_nil() && ls[s].c == qkv_nil()
                                    : hs[s] == qkv_nil(),
                          "cell %d: state %d was left as it was", kind, s);
        qkv_tape_free(small);
    }
    qkv_tensor_free(wide);
    qkv_tensor_free(h0);
    qkv_tensor_free(table);
    qkv_tape_free(t);
    qkv_params_free(p);
}
END_TEST

Suite *params_suite(void)
{
    Suite *s = suite_create("params");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, test_a_list_holds_named_parameters);
    tcase_add_test(tc, test_a_list_grows_past_its_first_capacity);
    tcase_add_test(tc, test_initialisers_match_cpython);
    tcase_add_test(tc, test_a_vectors_fans_are_its_length);
    tcase_add_test(tc, test_a_3d_tensors_fans_are_its_leading_product_and_last);
    tcase_add_test(tc, test_initialisers_draw_one_stream_and_refuse_bad_ranges);
    tcase_add_test(tc, test_initialisers_refuse_values_the_scalar_cannot_hold);
    tcase_add_test(tc, test_the_optimizer_skips_decay_where_the_list_says);
    tcase_add_test(tc, test_the_optimizer_names_a_non_finite_gradient);
    tcase_add_test(tc, test_the_optimizer_state_is_readable);
    tcase_add_test(tc, test_adamw_decay_follows_each_parameters_rate);
    tcase_add_test(tc, test_adam_steps_follow_each_parameters_rate);
    tcase_add_test(tc, test_warmup_then_cosine);
    tcase_add_test(tc, test_each_parameter_can_have_its_own_rate);
    suite_add_tcase(s, tc);
    return s;
}

Suite *layers_suite(void)
{
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("layers");
    tcase_add_test(tc, test_linear_embedding_and_norm_forward);
    tcase_add_test(tc, test_layers_start_from_the_documented_draws);
    tcase_add_test(tc, test_a_norm_layer_uses_pytorchs_eps);
    tcase_add_test(tc, test_mha_forward_matches_the_reference);
    tcase_add_test(tc, test_padding_mask_from_lengths);
    tcase_add_test(tc, test_a_padded_batch_gives_each_sequence_its_own_outputs);
    tcase_add_test(tc, test_a_padded_batch_on_the_online_form);
    tcase_add_test(tc, test_mha_long_takes_the_online_form);
    tcase_add_test(tc, test_block_forward_matches_the_reference);
    tcase_add_test(tc, test_positions);
    tcase_add_test(tc, test_layer_errors_name_the_innermost_layer);
    tcase_add_test(tc, test_layers_refuse_bad_shapes);
    tcase_add_test(tc, test_mha_refuses_a_padding_mask_of_other_values);
    tcase_add_test(tc, test_a_failed_init_leaves_a_layer_its_forward_names);
    tcase_add_test(tc, test_a_failed_cell_init_leaves_a_cell_its_steps_name);
    tcase_add_test(tc, test_recurrent_cells_follow_pytorchs_formulas);
    tcase_add_test(tc, test_recurrent_cells_start_from_pytorchs_draws);
    tcase_add_test(tc, test_a_cell_refused_part_way_adds_and_draws_nothing);
    tcase_add_test(tc, test_a_linear_elman_cell_applies_no_activation);
    tcase_add_test(tc, test_an_lstm_state_with_one_part_null_has_that_part_zero);
    tcase_add_test(tc, test_a_zeroed_lstm_state_is_a_zero_state);
    tcase_add_test(tc, test_the_rnn_sequence_form_runs_every_step);
    tcase_add_test(tc, test_token_input_projects_a_small_table_once);
    tcase_add_test(tc, test_an_empty_prefix_names_parameters_bare);
    suite_add_tcase(s, tc);
    return s;
}
