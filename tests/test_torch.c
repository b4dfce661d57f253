/*
 * test_torch.c - the public ops' values and input gradients against
 * PyTorch, float64 on the CPU, where QKV_PYTHON (/usr/bin/python3) can
 * import torch; elsewhere the test prints that it skipped, and passes.
 * On every kernel set this CPU has, each case records one op on random
 * inputs (qkv's generator, a fixed seed per case), runs
 * qkv_backward_from with a random dy, and writes the inputs, dy, the
 * output and the input gradients in hex floats ('%a', exact) to a file;
 * scripts/torch_check.py recomputes each case with torch and prints its
 * worst errors, which QKV_TORCH_VERBOSE=1 shows here. Not covered:
 * dropout (its mask is random). The layers, compositions of these ops,
 * are checked against PyTorch's modules in test_torch_layers.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests.h"

/* The largest error scripts/torch_check.py accepts, per output and per
 * input gradient: max |qkv - torch| / max |torch| over the tensor, the
 * error relative to the tensor's scale (a sum that cancels is judged by
 * the size of its terms, as its rounding error is). The inputs are O(1)
 * and exact in both programs, and every case is a few roundings away
 * from them: a map's kernel (at most 3.4 ulp, test_kernels) and its
 * gradient formula; a product or sum of at most 64 terms (n·ε of the
 * terms' magnitudes, which are of the tensor's scale here); softmax or
 * layer norm (about 10 roundings and a row sum). That is below 200
 * roundings: 1.2e-5 in float (ε = 6e-8), where we accept 2e-5; in double
 * (ε = 1.1e-16, torch's float64 rounding as much as qkv's) 2.2e-14, where
 * we accept 1e-13. The worst seen: 4.6e-7 in float (8ε, the online
 * attention's dQ), 5.3e-16 in double. A flipped sign in a gradient gives
 * 2, a factor off by 1e-3 gives 1e-3. */
#ifdef QKV_DOUBLE
#define TORCH_TOL 1e-13
#else
#define TORCH_TOL 2e-5
#endif

#define PROBE_MAX_TENSORS 8

/* One case being recorded: its tensors in creation order, each an input
 * with a gradient ('x') or a constant ('c'). */
typedef struct probe {
    FILE *f;
    qkv_tape *t;
    qkv_rng g;
    int n;
    qkv_tensor *ts[PROBE_MAX_TENSORS];
    char roles[PROBE_MAX_TENSORS];
} probe;

/* Values drawn by a tensor: normal, positive in [0.5, 2.5), or signed with
 * |v| in [0.5, 1.5) (divisors). */
enum { NORMAL, POSITIVE, AWAY_FROM_ZERO };

static void write_values(FILE *f, const qkv_real *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %a", (double)v[i]);
    fputc('\n', f);
}

static void write_tensor(FILE *f, const char *role, const qkv_tensor *x)
{
    fprintf(f, "%s %d", role, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        fprintf(f, " %d", x->shape[d]);
    write_values(f, x->data, x->numel);
}

static qkv_tensor *add_tensor(probe *p, int nd, const int *shape, int kind, char role)
{
    ck_assert_int_lt(p->n, PROBE_MAX_TENSORS);
    qkv_tensor *x = qkv_tape_tensor(p->t, nd, shape, role == 'x');
    ck_assert(!qkv_tensor_is_nil(x));
    for (size_t i = 0; i < x->numel; i++) {
        double u = qkv_rng_random(&p->g);
        double v = kind == POSITIVE         ? 0.5 + 2 * u
                   : kind == AWAY_FROM_ZERO ? (qkv_rng_random(&p->g) < 0.5 ? -1 : 1) * (0.5 + u)
                                            : qkv_rng_normalvariate(&p->g, 0, 1);
        x->data[i] = (qkv_real)v;
    }
    p->ts[p->n] = x;
    p->roles[p->n++] = role;
    return x;
}

/* An input that takes a gradient. */
static qkv_tensor *in(probe *p, int nd, const int *shape, int kind)
{
    return add_tensor(p, nd, shape, kind, 'x');
}

/* A constant: a target or a mask; the caller may overwrite its values. */
static qkv_tensor *constant(probe *p, int nd, const int *shape, int kind)
{
    return add_tensor(p, nd, shape, kind, 'c');
}

/* Starts a case: a fresh tape and the generator at this seed. */
static void begin(probe *p, uint64_t seed)
{
    qkv_tape_reset(p->t);
    qkv_rng_seed(&p->g, seed);
    p->n = 0;
}

/* Backward from y with a random dy, then writes the case: the header
 * line "case LABEL OP [KEY=VALUE ...]", the tensors, the output, dy and
 * each input's gradient. */
static void finish(probe *p, const char *header, qkv_tensor *y)
{
    ck_assert_msg(!qkv_tensor_is_nil(y), "%s: %s", header, qkv_tape_error(p->t));
    qkv_real *dy = malloc(y->numel * sizeof *dy);
    ck_assert_ptr_nonnull(dy);
    for (size_t i = 0; i < y->numel; i++)
        dy[i] = (qkv_real)qkv_rng_normalvariate(&p->g, 0, 1);
    ck_assert_int_eq(qkv_backward_from(p->t, y, dy, y->numel), QKV_OK);
    fprintf(p->f, "case %s-%s\n", qkv_kernels_name(), header);
    for (int i = 0; i < p->n; i++)
        write_tensor(p->f, p->roles[i] == 'x' ? "x" : "c", p->ts[i]);
    write_tensor(p->f, "y", y);
    fputs("dy", p->f);
    write_values(p->f, dy, y->numel);
    for (int i = 0; i < p->n; i++)
        if (p->roles[i] == 'x') {
            fputs("g", p->f);
            write_values(p->f, p->ts[i]->grad, p->ts[i]->numel);
        }
    fputs("end\n", p->f);
    free(dy);
}

/* A shape, written inline. */
/* clang-format off */
#define S(...) (const int[]){__VA_ARGS__}
/* clang-format on */

static void binary_cases(probe *p)
{
    static const char *names[4] = {"add", "sub", "mul", "div"};
    qkv_tensor *(*const ops[4])(qkv_tape *, qkv_tensor *, qkv_tensor *) = {qkv_add, qkv_sub,
                                                                           qkv_mul, qkv_div};
    /* the same shapes, broadcasting b, broadcasting a, and both at once */
    static const struct {
        int nda, sa[3], ndb, sb[3];
        const char *label;
    } shapes[4] = {{2, {3, 4}, 2, {3, 4}, "same"},
                   {3, {2, 3, 4}, 1, {4}, "b_broadcast"},
                   {1, {4}, 3, {2, 3, 4}, "a_broadcast"},
                   {3, {2, 1, 4}, 2, {3, 1}, "both_broadcast"}};
    char header[96];
    for (int o = 0; o < 4; o++)
        for (int s = 0; s < 4; s++) {
            begin(p, (uint64_t)(10 * o + s));
            qkv_tensor *a = in(p, shapes[s].nda, shapes[s].sa, NORMAL);
            qkv_tensor *b = in(p, shapes[s].ndb, shapes[s].sb, o == 3 ? AWAY_FROM_ZERO : NORMAL);
            snprintf(header, sizeof header, "%s_%s %s", names[o], shapes[s].label, names[o]);
            finish(p, header, ops[o](p->t, a, b));
        }
}

static void map_cases(probe *p)
{
    static const struct {
        const char *header;
        qkv_tensor *(*op)(qkv_tape *, qkv_tensor *);
        int kind;
    } maps[] = {{"exp exp", qkv_exp, NORMAL},
                {"log log", qkv_log, POSITIVE},
                {"sqrt sqrt", qkv_sqrt, POSITIVE},
                {"tanh tanh", qkv_tanh, NORMAL},
                {"sigmoid sigmoid", qkv_sigmoid, NORMAL},
                {"relu relu", qkv_relu, NORMAL},
                {"gelu gelu", qkv_gelu, NORMAL},
                {"silu silu", qkv_silu, NORMAL},
                {"neg neg", qkv_neg, NORMAL},
                {"abs abs", qkv_abs, NORMAL},
                {"softplus softplus", qkv_softplus, NORMAL},
                {"transpose transpose", qkv_transpose, NORMAL}};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        begin(p, 100 + i);
        finish(p, maps[i].header, maps[i].op(p->t, in(p, 3, S(2, 3, 5), maps[i].kind)));
    }
    begin(p, 120);
    finish(p, "pow_1.5 pow p=1.5", qkv_pow(p->t, in(p, 2, S(3, 4), POSITIVE), 1.5));
    begin(p, 121);
    finish(p, "pow_3 pow p=3", qkv_pow(p->t, in(p, 2, S(3, 4), NORMAL), 3));
    begin(p, 122);
    finish(p, "pow_-2 pow p=-2", qkv_pow(p->t, in(p, 2, S(3, 4), AWAY_FROM_ZERO), -2));
    begin(p, 125);
    finish(p, "clamp clamp min=-0.5 max=0.75",
           qkv_clamp(p->t, in(p, 2, S(4, 5), NORMAL), -0.5, 0.75));
    begin(p, 126);
    finish(p, "clamp_min_only clamp min=0 max=inf",
           qkv_clamp(p->t, in(p, 2, S(4, 5), NORMAL), 0, INFINITY));
    begin(p, 127);
    finish(p, "leaky_relu leaky_relu slope=0.01",
           qkv_leaky_relu(p->t, in(p, 2, S(4, 5), NORMAL), 0.01));
    begin(p, 128);
    finish(p, "leaky_relu_neg leaky_relu slope=-0.25",
           qkv_leaky_relu(p->t, in(p, 2, S(4, 5), NORMAL), -0.25));
    begin(p, 123);
    finish(p, "scale scale c=-0.75", qkv_scale(p->t, in(p, 2, S(3, 4), NORMAL), -0.75));
    /* a mask of 0 and -inf, broadcast along the rows */
    begin(p, 124);
    qkv_tensor *x = in(p, 3, S(2, 3, 4), NORMAL);
    qkv_tensor *m = constant(p, 2, S(1, 4), NORMAL);
    for (int j = 0; j < 4; j++)
        m->data[j] = j % 2 == 0 ? 0 : -INFINITY;
    finish(p, "mask mask", qkv_mask(p->t, x, m));
}

static void linalg_cases(probe *p)
{
    begin(p, 200);
    qkv_tensor *a = in(p, 3, S(2, 3, 8), NORMAL);
    finish(p, "matmul_batched matmul", qkv_matmul(p->t, a, in(p, 3, S(2, 8, 5), NORMAL)));
    begin(p, 201);
    a = in(p, 3, S(2, 3, 8), NORMAL);
    finish(p, "matmul_shared_b matmul", qkv_matmul(p->t, a, in(p, 2, S(8, 5), NORMAL)));
    begin(p, 202);
    a = in(p, 3, S(2, 3, 8), NORMAL);
    finish(p, "matmul_nt_batched matmul_nt", qkv_matmul_nt(p->t, a, in(p, 3, S(2, 5, 8), NORMAL)));
    begin(p, 203);
    a = in(p, 2, S(3, 8), NORMAL);
    finish(p, "matmul_nt_shared_b matmul_nt", qkv_matmul_nt(p->t, a, in(p, 2, S(5, 8), NORMAL)));
    begin(p, 204);
    a = in(p, 3, S(2, 3, 8), NORMAL);
    qkv_tensor *w = in(p, 2, S(8, 5), NORMAL);
    finish(p, "affine affine", qkv_affine(p->t, a, w, in(p, 1, S(5), NORMAL)));
    begin(p, 205);
    a = in(p, 2, S(3, 8), NORMAL);
    finish(p, "affine_no_bias affine", qkv_affine(p->t, a, in(p, 2, S(8, 5), NORMAL), NULL));
}

static void shape_cases(probe *p)
{
    begin(p, 300);
    finish(p, "reshape reshape shape=4,-1",
           qkv_reshape(p->t, in(p, 3, S(2, 3, 4), NORMAL), 2, S(4, -1)));
    /* a view: it needs an op after it to carry dy back */
    begin(p, 301);
    finish(p, "reshape_then_exp reshape_exp shape=3,8",
           qkv_exp(p->t, qkv_reshape(p->t, in(p, 3, S(2, 3, 4), NORMAL), 2, S(3, 8))));
    begin(p, 302);
    finish(p, "permute permute perm=0,2,1,3",
           qkv_permute(p->t, in(p, 4, S(2, 3, 4, 5), NORMAL), S(0, 2, 1, 3)));
    begin(p, 303);
    finish(p, "permute_neg permute perm=2,0,1",
           qkv_permute(p->t, in(p, 3, S(2, 3, 4), NORMAL), S(-1, 0, 1)));
    begin(p, 304);
    finish(p, "swapdims swapdims d0=0 d1=-1",
           qkv_swapdims(p->t, in(p, 3, S(2, 3, 4), NORMAL), 0, -1));
    begin(p, 305);
    qkv_tensor *xs[3];
    xs[0] = in(p, 3, S(2, 1, 4), NORMAL);
    xs[1] = in(p, 3, S(2, 3, 4), NORMAL);
    xs[2] = in(p, 3, S(2, 2, 4), NORMAL);
    finish(p, "concat concat dim=1", qkv_concat(p->t, 3, xs, 1));
    begin(p, 306);
    xs[0] = in(p, 2, S(3, 2), NORMAL);
    xs[1] = in(p, 2, S(3, 5), NORMAL);
    finish(p, "concat_last concat dim=-1", qkv_concat(p->t, 2, xs, -1));
    begin(p, 307);
    finish(p, "slice slice dim=1 start=1 len=2",
           qkv_slice(p->t, in(p, 3, S(2, 4, 3), NORMAL), 1, 1, 2));
    begin(p, 308);
    finish(p, "slice_last slice dim=-1 start=2 len=3",
           qkv_slice(p->t, in(p, 2, S(3, 6), NORMAL), -1, 2, 3));
    /* stack: a new first, middle and last dimension (counted from the end) */
    static const int stack_dims[3] = {0, 1, -1};
    char header[64];
    for (int i = 0; i < 3; i++) {
        begin(p, (uint64_t)(310 + i));
        for (int k = 0; k < 3; k++)
            xs[k] = in(p, 2, S(2, 3), NORMAL);
        snprintf(header, sizeof header, "stack_%d stack dim=%d", stack_dims[i], stack_dims[i]);
        finish(p, header, qkv_stack(p->t, 3, xs, stack_dims[i]));
    }
}

static void reduce_cases(probe *p)
{
    begin(p, 400);
    finish(p, "sum sum", qkv_sum(p->t, in(p, 3, S(2, 3, 4), NORMAL)));
    begin(p, 401);
    finish(p, "mean mean", qkv_mean(p->t, in(p, 3, S(2, 3, 4), NORMAL)));
    typedef qkv_tensor *(*dim_op)(qkv_tape *, qkv_tensor *, int, int);
    static const char *names[5] = {"sum_dim", "mean_dim", "max_dim", "logsumexp_dim", "min_dim"};
    const dim_op ops[5] = {qkv_sum_dim, qkv_mean_dim, qkv_max_dim, qkv_logsumexp_dim, qkv_min_dim};
    char header[96];
    for (int o = 0; o < 5; o++)
        for (int dim = -1; dim <= 1; dim++)
            for (int keep = 0; keep <= 1; keep++) {
                begin(p, (uint64_t)(410 + 10 * o + 2 * (dim + 1) + keep));
                snprintf(header, sizeof header, "%s_%d_%d %s dim=%d keepdim=%d", names[o], dim,
                         keep, names[o], dim, keep);
                finish(p, header, ops[o](p->t, in(p, 3, S(2, 3, 4), NORMAL), dim, keep));
            }
    /* the variance: both corrections, with and without keepdim, and
     * values far from 0 (100 + N(0,1)) that a one-pass sum would spoil */
    static const struct {
        int dim, correction, keepdim;
    } var[4] = {{1, 1, 1}, {-1, 0, 0}, {0, 1, 0}, {-1, 1, 0}};
    for (int i = 0; i < 4; i++) {
        begin(p, (uint64_t)(470 + i));
        snprintf(header, sizeof header,
                 "var_dim_%d_%d_%d%s var_dim dim=%d correction=%d keepdim=%d", var[i].dim,
                 var[i].correction, var[i].keepdim, i == 3 ? "_offset" : "", var[i].dim,
                 var[i].correction, var[i].keepdim);
        qkv_tensor *x = in(p, 3, S(2, 3, 4), NORMAL);
        for (size_t j = 0; i == 3 && j < x->numel; j++)
            x->data[j] += 100;
        finish(p, header, qkv_var_dim(p->t, x, var[i].dim, var[i].correction, var[i].keepdim));
    }
    begin(p, 460);
    finish(p, "sum_last sum_dim dim=-1 keepdim=0", qkv_sum_last(p->t, in(p, 2, S(3, 5), NORMAL)));
    begin(p, 461);
    finish(p, "mean_last mean_dim dim=-1 keepdim=0",
           qkv_mean_last(p->t, in(p, 2, S(3, 5), NORMAL)));
}

static void index_cases(probe *p)
{
    begin(p, 500);
    qkv_tensor *w = in(p, 2, S(5, 3), NORMAL);
    qkv_tensor *ids = constant(p, 2, S(2, 3), NORMAL);
    static const int id[6] = {4, 0, 2, 2, 1, 4}; /* repeats: scatter-added */
    for (int i = 0; i < 6; i++)
        ids->data[i] = (qkv_real)id[i];
    finish(p, "gather gather", qkv_gather(p->t, w, id, 2, S(2, 3)));
    begin(p, 501);
    qkv_tensor *x = in(p, 3, S(3, 4, 2), NORMAL);
    qkv_tensor *idx = constant(p, 1, S(3), NORMAL);
    static const int rows[3] = {3, 0, 2};
    for (int i = 0; i < 3; i++)
        idx->data[i] = (qkv_real)rows[i];
    finish(p, "pick_rows pick_rows", qkv_pick_rows(p->t, x, rows));
}

static void softmax_and_loss_cases(probe *p)
{
    begin(p, 600);
    finish(p, "softmax softmax", qkv_softmax(p->t, in(p, 3, S(2, 3, 7), NORMAL)));
    begin(p, 601);
    finish(p, "log_softmax log_softmax", qkv_log_softmax(p->t, in(p, 3, S(2, 3, 7), NORMAL)));
    begin(p, 602);
    qkv_tensor *logits = in(p, 3, S(2, 3, 5), NORMAL);
    qkv_tensor *tg = constant(p, 2, S(2, 3), NORMAL);
    static const int target[6] = {1, 4, QKV_IGNORE, 0, 2, 4};
    for (int i = 0; i < 6; i++)
        tg->data[i] = (qkv_real)target[i];
    finish(p, "cross_entropy cross_entropy", qkv_cross_entropy(p->t, logits, target));
    begin(p, 603);
    qkv_tensor *pred = in(p, 2, S(4, 6), NORMAL);
    finish(p, "mse mse", qkv_mse(p->t, pred, constant(p, 2, S(4, 6), NORMAL)));
    begin(p, 604);
    qkv_tensor *x = in(p, 2, S(4, 6), NORMAL);
    qkv_tensor *y = constant(p, 2, S(4, 6), NORMAL);
    for (size_t i = 0; i < y->numel; i++) /* 0, 1 and probabilities between */
        y->data[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? 1 : (qkv_real)qkv_rng_random(&p->g);
    finish(p, "bce_with_logits bce_with_logits", qkv_bce_with_logits(p->t, x, y));
    begin(p, 606);
    pred = in(p, 2, S(4, 6), NORMAL);
    finish(p, "l1_loss l1_loss", qkv_l1_loss(p->t, pred, constant(p, 2, S(4, 6), NORMAL)));
    begin(p, 607);
    pred = in(p, 2, S(4, 6), NORMAL);
    finish(p, "huber_loss huber_loss delta=1", /* |d| on both sides of delta */
           qkv_huber_loss(p->t, pred, constant(p, 2, S(4, 6), NORMAL), 1));
    begin(p, 608);
    pred = in(p, 3, S(2, 3, 5), NORMAL);
    finish(p, "huber_loss_0.3 huber_loss delta=0.3",
           qkv_huber_loss(p->t, pred, constant(p, 3, S(2, 3, 5), NORMAL), 0.3));
    begin(p, 605);
    qkv_tensor *zs = in(p, 3, S(2, 3, 5), NORMAL);
    qkv_tensor *ts = constant(p, 2, S(2, 3), NORMAL);
    static const int tsm[6] = {3, QKV_IGNORE, 0, 4, 1, 2};
    for (int i = 0; i < 6; i++)
        ts->data[i] = (qkv_real)tsm[i];
    finish(p, "cross_entropy_smooth cross_entropy eps=0.1",
           qkv_cross_entropy_smooth(p->t, zs, tsm, 0.1));
}

static void norm_cases(probe *p)
{
    begin(p, 700);
    qkv_tensor *x = in(p, 3, S(2, 3, 16), NORMAL);
    qkv_tensor *g = in(p, 1, S(16), NORMAL);
    finish(p, "layer_norm layer_norm eps=1e-5",
           qkv_layer_norm(p->t, x, g, in(p, 1, S(16), NORMAL), 1e-5));
    begin(p, 701);
    finish(p, "layer_norm_plain layer_norm eps=1e-5",
           qkv_layer_norm(p->t, in(p, 2, S(4, 64), NORMAL), NULL, NULL, 1e-5));
    begin(p, 702);
    x = in(p, 3, S(2, 3, 16), NORMAL);
    finish(p, "rms_norm rms_norm eps=1e-6", qkv_rms_norm(p->t, x, in(p, 1, S(16), NORMAL), 1e-6));
    begin(p, 703);
    finish(p, "rms_norm_plain rms_norm eps=1e-6",
           qkv_rms_norm(p->t, in(p, 2, S(4, 64), NORMAL), NULL, 1e-6));
}

/* Cross-attention inputs, q [2,2,3,4], k [2,2,5,4], v [2,2,5,3]; or
 * self-attention's, q and k [2,5,4], v [2,5,3]. */
static void attention_inputs(probe *p, int self, qkv_tensor **q, qkv_tensor **k, qkv_tensor **v)
{
    *q = self ? in(p, 3, S(2, 5, 4), NORMAL) : in(p, 4, S(2, 2, 3, 4), NORMAL);
    *k = self ? in(p, 3, S(2, 5, 4), NORMAL) : in(p, 4, S(2, 2, 5, 4), NORMAL);
    *v = self ? in(p, 3, S(2, 5, 3), NORMAL) : in(p, 4, S(2, 2, 5, 3), NORMAL);
}

/* An attention mask: for t = 0 a padding mask per item, [2,1,1,5], one
 * key dropped in the first item and two in the second; else a causal
 * [t,t], query i seeing keys 0..i. */
static qkv_tensor *attention_mask(probe *p, int t)
{
    qkv_tensor *m =
        t == 0 ? constant(p, 4, S(2, 1, 1, 5), NORMAL) : constant(p, 2, S(t, t), NORMAL);
    for (int i = 0; i < (int)m->numel; i++)
        m->data[i] = (t == 0 ? i == 3 || i == 8 || i == 9 : i % t > i / t) ? -INFINITY : 0;
    return m;
}

static void attention_cases(probe *p)
{
    qkv_tensor *q, *k, *v;
    begin(p, 800);
    attention_inputs(p, 0, &q, &k, &v);
    finish(p, "attention attention scale=0.5", qkv_attention(p->t, q, k, v, NULL, 0.5, NULL));
    begin(p, 801);
    attention_inputs(p, 0, &q, &k, &v);
    qkv_tensor *m = attention_mask(p, 0);
    finish(p, "attention_mask attention scale=0.5", qkv_attention(p->t, q, k, v, m, 0.5, NULL));
    /* causal self-attention: a [T,T] mask tensor, and the online form's
     * flag by index */
    begin(p, 802);
    attention_inputs(p, 1, &q, &k, &v);
    m = attention_mask(p, 5);
    finish(p, "attention_causal_mask attention scale=0.5",
           qkv_attention(p->t, q, k, v, m, 0.5, NULL));
    begin(p, 803);
    attention_inputs(p, 1, &q, &k, &v);
    finish(p, "attention_online_causal attention scale=0.5 causal=1",
           qkv_attention_online(p->t, q, k, v, NULL, 0.5, 1));
    begin(p, 804);
    attention_inputs(p, 0, &q, &k, &v);
    m = attention_mask(p, 0);
    finish(p, "attention_online_mask attention scale=0.5",
           qkv_attention_online(p->t, q, k, v, m, 0.5, 0));
    /* heads: x [2,4,3·6] split into 2 heads of 3 columns, causal */
    begin(p, 805);
    qkv_tensor *x = in(p, 3, S(2, 4, 18), NORMAL);
    m = attention_mask(p, 4);
    finish(p, "attention_heads attention_heads heads=2 scale=0.6",
           qkv_attention_heads(p->t, x, 2, m, 0.6, NULL));
    begin(p, 806);
    x = in(p, 3, S(2, 4, 18), NORMAL);
    finish(p, "attention_heads_online attention_heads heads=2 scale=0.6 causal=1",
           qkv_attention_heads_online(p->t, x, 2, NULL, 0.6, 1));
    /* the lookups fused in, with a table passed twice (wq as wk) */
    begin(p, 809);
    qkv_tensor *wq = in(p, 2, S(6, 4), NORMAL), *wv = in(p, 2, S(6, 3), NORMAL);
    qkv_tensor *ids = constant(p, 2, S(2, 3), NORMAL);
    static const int id[6] = {5, 1, 1, 0, 3, 5};
    for (int i = 0; i < 6; i++)
        ids->data[i] = (qkv_real)id[i];
    m = attention_mask(p, 3);
    finish(p, "embed_attention embed_attention scale=0.5",
           qkv_embed_attention(p->t, wq, wq, wv, id, 2, 3, m, 0.5, NULL));
    /* the recurrence, tanh and identity, with and without h0 */
    begin(p, 807);
    qkv_tensor *xw = in(p, 3, S(4, 2, 3), NORMAL);
    qkv_tensor *wh = in(p, 2, S(3, 3), NORMAL);
    finish(p, "rnn_scan_tanh rnn_scan act=tanh",
           qkv_rnn_scan(p->t, xw, wh, in(p, 2, S(2, 3), NORMAL), 1));
    begin(p, 808);
    xw = in(p, 3, S(4, 2, 3), NORMAL);
    finish(p, "rnn_scan_linear rnn_scan act=none",
           qkv_rnn_scan(p->t, xw, in(p, 2, S(3, 3), NORMAL), NULL, 0));
}

/* An input holding these values. */
static qkv_tensor *in_values(probe *p, int nd, const int *shape, const double *v)
{
    qkv_tensor *x = in(p, nd, shape, NORMAL);
    for (size_t i = 0; i < x->numel; i++)
        x->data[i] = (qkv_real)v[i];
    return x;
}

/* The edges the ops document, where PyTorch has the same definition:
 * zeros, infinities, NaN, ties, saturation, a constant row. */
static void edge_cases(probe *p)
{
    static const double at0[6] = {0, -1.5, 0.25, 0, 2, -0.5};
    static const double pos0[6] = {0, 0.25, 1, 0, 4, 2.5};
    /* saturating maps: the error is judged against the scale that 0.5
     * gives (a float y rounds to 1 from x = 9 on, so 1 - y² is 0 there,
     * as in PyTorch's float32); exp stays below float's overflow */
    static const double big[8] = {-1e4, -100, -30, -10, 0.5, 30, 100, 1e4};
    static const double low[8] = {-1e4, -100, -88, -30, -1, 0, 0.5, 2};
    begin(p, 900);
    finish(p, "relu_at_0 relu", qkv_relu(p->t, in_values(p, 1, S(6), at0)));
    begin(p, 930);
    finish(p, "abs_at_0 abs", qkv_abs(p->t, in_values(p, 1, S(6), at0)));
    begin(p, 934);
    finish(p, "leaky_relu_at_0 leaky_relu slope=0.125",
           qkv_leaky_relu(p->t, in_values(p, 1, S(6), at0), 0.125));
    /* softplus past PyTorch's threshold of 20, where F.softplus returns x
     * and qkv keeps e^-x (ops.h): judged against the formula qkv uses,
     * max(x, 0) + log1p(e^-|x|), in torch */
    begin(p, 935);
    finish(p, "softplus_big softplus_exact",
           qkv_softplus(
               p->t, in_values(p, 1, S(8), (const double[]){-1e4, -30, -1, 0.5, 20, 25, 30, 1e4})));
    /* L1 and Huber at d = 0 and at |d| = delta (0.5), and ±1e4 apart */
    static const double lp[8] = {1, 2, 3, 0.5, -2, 4, 1e4, -1e4};
    static const double lt[8] = {1, 0, 3.5, 0.5, 1, 3.5, -1e4, 1e4};
    begin(p, 936);
    qkv_tensor *lx = in_values(p, 1, S(8), lp);
    qkv_tensor *ly = constant(p, 1, S(8), NORMAL);
    for (int i = 0; i < 8; i++)
        ly->data[i] = (qkv_real)lt[i];
    finish(p, "l1_loss_edges l1_loss", qkv_l1_loss(p->t, lx, ly));
    begin(p, 937);
    lx = in_values(p, 1, S(8), lp);
    ly = constant(p, 1, S(8), NORMAL);
    for (int i = 0; i < 8; i++)
        ly->data[i] = (qkv_real)lt[i];
    finish(p, "huber_loss_edges huber_loss delta=0.5", qkv_huber_loss(p->t, lx, ly, 0.5));
    begin(p, 931);
    finish(p, "clamp_at_bounds clamp min=-1.5 max=0.25",
           qkv_clamp(p->t, in_values(p, 1, S(6), at0), -1.5, 0.25));
    begin(p, 901);
    finish(p, "sqrt_at_0 sqrt", qkv_sqrt(p->t, in_values(p, 1, S(6), pos0)));
    begin(p, 902);
    finish(p, "log_at_0 log", qkv_log(p->t, in_values(p, 1, S(6), pos0)));
    begin(p, 903);
    finish(p, "pow_0_at_0 pow p=0", qkv_pow(p->t, in_values(p, 1, S(6), at0), 0));
    begin(p, 904);
    finish(p, "pow_0.5_at_0 pow p=0.5", qkv_pow(p->t, in_values(p, 1, S(6), pos0), 0.5));
    begin(p, 905);
    finish(p, "pow_2_at_0 pow p=2", qkv_pow(p->t, in_values(p, 1, S(6), at0), 2));
    /* x/0 and 0/0 */
    begin(p, 906);
    qkv_tensor *a = in_values(p, 1, S(6), at0);
    finish(p, "div_by_0 div",
           qkv_div(p->t, a, in_values(p, 1, S(6), (const double[]){0, 0, 1, 2, 0, -1})));
    static const struct {
        const char *header;
        qkv_tensor *(*op)(qkv_tape *, qkv_tensor *);
    } maps[] = {{"exp_low exp", qkv_exp},
                {"tanh_big tanh", qkv_tanh},
                {"sigmoid_big sigmoid", qkv_sigmoid},
                {"gelu_big gelu", qkv_gelu},
                {"silu_big silu", qkv_silu}};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        begin(p, 910 + i);
        finish(p, maps[i].header, maps[i].op(p->t, in_values(p, 1, S(8), i == 0 ? low : big)));
    }
    begin(p, 920);
    qkv_tensor *x = in_values(p, 1, S(8), big);
    qkv_tensor *y = constant(p, 1, S(8), NORMAL);
    for (int i = 0; i < 8; i++)
        y->data[i] = i % 2;
    finish(p, "bce_big bce_with_logits", qkv_bce_with_logits(p->t, x, y));
    /* ties go to the first maximum, and a NaN is the maximum */
    begin(p, 921);
    finish(p, "max_dim_ties_nan max_dim dim=1 keepdim=0",
           qkv_max_dim(p->t,
                       in_values(p, 2, S(3, 4),
                                 (const double[]){1, 3, 3, 2, NAN, 1, NAN, 0, -1, -1, -1, -1}),
                       1, 0));
    /* and to the first minimum, where a NaN is the minimum too */
    begin(p, 933);
    finish(p, "min_dim_ties_nan min_dim dim=0 keepdim=1",
           qkv_min_dim(p->t,
                       in_values(p, 2, S(4, 3),
                                 (const double[]){1, NAN, 2, -3, 0, 2, -3, NAN, -INFINITY, 0, -1,
                                                  -INFINITY}),
                       0, 1));
    /* logsumexp: large entries, -inf, +inf and NaN (the row of -inf
     * alone, where torch's gradient is NaN, is left to test_shape) */
    begin(p, 932);
    finish(
        p, "logsumexp_edges logsumexp_dim dim=1 keepdim=0",
        qkv_logsumexp_dim(p->t,
                          in_values(p, 2, S(4, 4),
                                    (const double[]){1000, 1000, 999, 998, -INFINITY, 0, 1,
                                                     -INFINITY, INFINITY, 1, 2, 0, NAN, 1, 2, 3}),
                          1, 0));
    /* rows with dropped entries, one all equal */
    static const double masked[8] = {-INFINITY, 1, -INFINITY, 2, 0.5, 0.5, 0.5, 0.5};
    begin(p, 922);
    finish(p, "softmax_-inf softmax", qkv_softmax(p->t, in_values(p, 2, S(2, 4), masked)));
    begin(p, 923);
    finish(p, "log_softmax_-inf log_softmax",
           qkv_log_softmax(p->t, in_values(p, 2, S(2, 4), masked)));
    /* a constant row: x - μ is 0, 1/σ is 1/√eps */
    begin(p, 924);
    finish(p, "layer_norm_constant_row layer_norm eps=1e-5",
           qkv_layer_norm(p->t, in_values(p, 2, S(2, 4), (const double[]){2, 2, 2, 2, 1, -1, 0, 3}),
                          NULL, NULL, 1e-5));
    begin(p, 925);
    finish(p, "rms_norm_zero_row rms_norm eps=1e-6",
           qkv_rms_norm(p->t, in_values(p, 2, S(2, 4), (const double[]){0, 0, 0, 0, 1, -1, 0, 3}),
                        NULL, 1e-6));
}

/* Writes every case for the current kernel set. */
static void write_cases(probe *p)
{
    binary_cases(p);
    map_cases(p);
    linalg_cases(p);
    shape_cases(p);
    reduce_cases(p);
    index_cases(p);
    softmax_and_loss_cases(p);
    norm_cases(p);
    attention_cases(p);
    edge_cases(p);
}

/* The cases' file: made and removed by the unchecked fixture, in the
 * parent, so that a failed assertion in the forked test leaves nothing. */
static char torch_file[] = "/tmp/qkv_torch_XXXXXX";

static void make_torch_file(void)
{
    int fd = mkstemp(torch_file);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void remove_torch_file(void)
{
    unlink(torch_file);
}

int torch_missing(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", QKV_PYTHON);
    if (system(cmd) == 0)
        return 0;
    printf("torch: skipped: %s cannot import torch "
           "(apt-get install python3-torch libopenblas0-pthread)\n",
           QKV_PYTHON);
    return 1;
}

void torch_run_script(const char *script, const char *options, const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s/%s' %s '%s' 2>&1", QKV_PYTHON, QKV_SCRIPTS, script, options,
             path);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    for (size_t k; (k = fread(out + n, 1, cap - 1 - n, f)) > 0;) /* all of it, however long */
        if ((n += k) + 1 == cap) {
            out = realloc(out, cap *= 2);
            ck_assert_ptr_nonnull(out);
        }
    out[n] = '\0';
    int rc = pclose(f);
    /* the table on stdout when asked or on failure; the summary and the
     * failures (cut to what a Check message holds) in the message */
    if (rc != 0 || getenv("QKV_TORCH_VERBOSE") != NULL)
        fputs(out, stdout), fflush(stdout);
    char key[64]; /* the summary line starts "SCRIPT:" (no .py) */
    snprintf(key, sizeof key, "%.*s:", (int)strcspn(script, "."), script);
    const char *summary = strstr(out, key);
    ck_assert_msg(rc == 0, "%s failed:\n%.2000s", cmd, summary != NULL ? summary : out);
    free(out);
}

START_TEST(test_ops_match_pytorch)
{
    if (torch_missing())
        return;
    const char *path = torch_file;
    probe p = {fopen(path, "w"), qkv_tape_new(0, NULL), {{0}, 0}, 0, {NULL}, {0}};
    ck_assert_ptr_nonnull(p.f);
    static const char *sets[] = {"portable", "avx2", "avx512"};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
        if (qkv_kernels_use(sets[s], NULL) == QKV_OK)
            write_cases(&p);
    qkv_kernels_use("auto", NULL);
    ck_assert_int_eq(fclose(p.f), 0);
    qkv_tape_free(p.t);
    char options[32];
    snprintf(options, sizeof options, "--tol %g", TORCH_TOL);
    torch_run_script("torch_check.py", options, path);
}
END_TEST

Suite *torch_suite(void)
{
    Suite *s = suite_create("torch");
    TCase *tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, make_torch_file, remove_torch_file);
    tcase_add_test(tc, test_ops_match_pytorch);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, torch_layers_tcase());
    return s;
}
