/*
 * elementwise.c - element-wise ops, each forward with its backward: add,
 * sub, mul and div (numpy broadcasting of both operands), scale, neg, the
 * additive mask, the maps exp, log, sqrt, pow, tanh, sigmoid, relu,
 * GELU, SiLU, abs, softplus and leaky ReLU, and clamp.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ops/op.h"

/* The smallest normal qkv_real. */
#ifdef QKV_DOUBLE
#define REAL_MIN DBL_MIN
#else
#define REAL_MIN FLT_MIN
#endif

/* ---- add, sub, mul, div: both operands broadcast ------------------------ */
/*
 * The backward passes reduce each operand's gradient over the dimensions it
 * was broadcast along: a stride of 0 makes every output position add into
 * the same input entry, in output order.
 */

/* Claims x's gradient when it has y's shape (no broadcast to sum over)
 * and nothing is in it yet: then writes dy (sign 1) or -dy (sign -1) into
 * it and returns nonzero; otherwise readies it for adding and returns
 * zero. */
static int claim_copy(qkv_tensor *x, const qkv_tensor *y, int sign)
{
    if (x->numel != y->numel || !qkv_tensor_grad_claim(x)) {
        qkv_tensor_grad_ready(x);
        return 0;
    }
    /* 0 + dy and 0 - dy, as adding into zeros gives: +0 where dy is -0 */
    const qkv_real *dy = y->grad, zero = 0;
    if (sign > 0)
        for (size_t i = 0; i < x->numel; i++)
            x->grad[i] = zero + dy[i];
    else
        for (size_t i = 0; i < x->numel; i++)
            x->grad[i] = zero - dy[i];
    return 1;
}

static void add_backward(const qkv_node *nd)
{
    qkv_bcast2 p;
    qkv_tensor *a = nd->in[0], *b = nd->in[1];
    const qkv_real *dy = nd->out->grad;
    qkv_bcast2_plan(a, b, &p);
    if (a->grad != NULL && !claim_copy(a, nd->out, 1)) /* da = dy, summed where a broadcast */
        QKV_BCAST2_LOOP(p, a->grad[ia] += dy[io]);
    if (b->grad != NULL && !claim_copy(b, nd->out, 1)) /* db = dy, summed where b broadcast */
        QKV_BCAST2_LOOP(p, b->grad[ib] += dy[io]);
}

static void sub_backward(const qkv_node *nd)
{
    qkv_bcast2 p;
    qkv_tensor *a = nd->in[0], *b = nd->in[1];
    const qkv_real *dy = nd->out->grad;
    qkv_bcast2_plan(a, b, &p);
    if (a->grad != NULL && !claim_copy(a, nd->out, 1)) /* da = dy */
        QKV_BCAST2_LOOP(p, a->grad[ia] += dy[io]);
    if (b->grad != NULL && !claim_copy(b, nd->out, -1)) /* db = -dy */
        QKV_BCAST2_LOOP(p, b->grad[ib] -= dy[io]);
}

static void mul_backward(const qkv_node *nd)
{
    qkv_bcast2 p;
    qkv_tensor *a = nd->in[0], *b = nd->in[1];
    const qkv_real *dy = nd->out->grad;
    qkv_bcast2_plan(a, b, &p);
    if (a->grad != NULL) /* y = a⊙b: da = dy⊙b */
        QKV_BCAST2_LOOP(p, a->grad[ia] += dy[io] * b->data[ib]);
    if (b->grad != NULL) /* db = dy⊙a */
        QKV_BCAST2_LOOP(p, b->grad[ib] += dy[io] * a->data[ia]);
}

static void div_backward(const qkv_node *nd)
{
    qkv_bcast2 p;
    qkv_tensor *a = nd->in[0], *b = nd->in[1];
    const qkv_real *dy = nd->out->grad, *y = nd->out->data;
    qkv_bcast2_plan(a, b, &p);
    if (a->grad != NULL) /* y = a/b: da = dy/b */
        QKV_BCAST2_LOOP(p, a->grad[ia] += dy[io] / b->data[ib]);
    if (b->grad != NULL) /* db = -dy·a/b² = -dy·y/b */
        QKV_BCAST2_LOOP(p, b->grad[ib] -= dy[io] * y[io] / b->data[ib]);
}

static const qkv_op_def op_add = {"add", add_backward, QKV_OP_CLAIMS_GRADS};
static const qkv_op_def op_sub = {"sub", sub_backward, QKV_OP_CLAIMS_GRADS};
static const qkv_op_def op_mul = {"mul", mul_backward, 0};
static const qkv_op_def op_div = {"div", div_backward, 0};

typedef enum binop { ADD, SUB, MUL, DIV } binop;

static qkv_tensor *binary(qkv_tape *t, binop op, qkv_tensor *a, qkv_tensor *b)
{
    static const char *names[] = {"add", "sub", "mul", "div"};
    static const qkv_op_def *defs[] = {&op_add, &op_sub, &op_mul, &op_div};
    qkv_bcast2 p;
    if (!qkv_op_inputs_ok(t, names[op], a, b, 1))
        return qkv_nil();
    if (!qkv_bcast2_plan(a, b, &p)) {
        QKV_SHAPES(a, b);
        qkv_tape_fail(t, QKV_ERR_SHAPE, "%s: %s and %s: the shapes do not broadcast", names[op], sa,
                      sb);
        return qkv_nil();
    }
    qkv_tensor *out = qkv_op_out(t, names[op], p.ndim, p.shape, a, b);
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_real *y = out->data;
    const qkv_real *x = a->data, *z = b->data;
    if (p.same) { /* the common case: one flat loop the compiler vectorises */
        const size_t n = out->numel;
        switch (op) {
        case ADD:
            for (size_t i = 0; i < n; i++)
                y[i] = x[i] + z[i];
            break;
        case SUB:
            for (size_t i = 0; i < n; i++)
                y[i] = x[i] - z[i];
            break;
        case MUL:
            for (size_t i = 0; i < n; i++)
                y[i] = x[i] * z[i];
            break;
        case DIV:
            for (size_t i = 0; i < n; i++)
                y[i] = x[i] / z[i];
            break;
        }
    } else {
        switch (op) {
        case ADD: QKV_BCAST2_LOOP(p, y[io] = x[ia] + z[ib]); break;
        case SUB: QKV_BCAST2_LOOP(p, y[io] = x[ia] - z[ib]); break;
        case MUL: QKV_BCAST2_LOOP(p, y[io] = x[ia] * z[ib]); break;
        case DIV: QKV_BCAST2_LOOP(p, y[io] = x[ia] / z[ib]); break;
        }
    }
    return qkv_op_finish(t, defs[op], out, a, b, 0);
}

qkv_tensor *qkv_add(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return binary(t, ADD, a, b);
}

qkv_tensor *qkv_sub(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return binary(t, SUB, a, b);
}

qkv_tensor *qkv_mul(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return binary(t, MUL, a, b);
}

qkv_tensor *qkv_div(qkv_tape *t, qkv_tensor *a, qkv_tensor *b)
{
    return binary(t, DIV, a, b);
}

/* ---- the additive mask: m broadcast over x, no gradient into m ---------- */

static void mask_backward(const qkv_node *nd)
{
    qkv_bcast p;
    qkv_tensor *x = nd->in[0];
    const qkv_tensor *m = nd->constant;
    const qkv_real *dy = nd->out->grad;
    qkv_bcast_plan(x, m, &p);
    /* dx = dy where kept; 0 where masked (y = -inf there) */
    QKV_BCAST_LOOP(p, x->grad[ia] += isinf(m->data[ib]) && m->data[ib] < 0 ? 0 : dy[ia]);
}

static const qkv_op_def op_mask = {"mask", mask_backward, 0};

qkv_tensor *qkv_mask(qkv_tape *t, qkv_tensor *x, const qkv_tensor *m)
{
    qkv_bcast p;
    if (!qkv_op_inputs_ok(t, "mask", x, m, 1))
        return qkv_nil();
    if (!qkv_bcast_plan(x, m, &p)) {
        QKV_SHAPES(x, m);
        qkv_tape_fail(t, QKV_ERR_SHAPE,
                      "mask: %s and %s: second shape does not broadcast to the first", sa, sb);
        return qkv_nil();
    }
    qkv_tensor *out = qkv_op_tensor(t, "mask", x->ndim, x->shape, x->grad != NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    qkv_real *y = out->data;
    const qkv_real *xs = x->data, *z = m->data;
    QKV_BCAST_LOOP(p, y[ia] = xs[ia] + z[ib]);
    int failed;
    qkv_node *n = qkv_op_record(t, &op_mask, out, x, NULL, &failed);
    if (failed)
        return qkv_nil();
    if (n != NULL)
        n->constant = m;
    return out;
}

/* ---- maps: y = f(x) ----------------------------------------------------- */

/* y[0..n) = f(x[0..n)), with the op's constant c (pow's exponent). */
typedef void (*map_fn)(qkv_real *y, const qkv_real *x, size_t n, double c);

/* Runs a map and records its node (with c, and the extra state that
 * saved_fn, when given, computes into a tape buffer). */
static qkv_tensor *unary(qkv_tape *t, const char *name, const qkv_op_def *def, qkv_tensor *x,
                         map_fn f, double c)
{
    if (!qkv_op_inputs_ok(t, name, x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, name, x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    f(out->data, x->data, x->numel, c);
    return qkv_op_finish(t, def, out, x, NULL, c);
}

static void scale_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)(c * x[i]);
}

static void scale_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = c·dy */
        x->grad[i] += (qkv_real)(nd->c * dy[i]);
}

static void neg_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    for (size_t i = 0; i < n; i++)
        y[i] = -x[i];
}

static void neg_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = -dy */
        x->grad[i] -= dy[i];
}

static void exp_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    qkv_vexp(y, x, n);
}

static void exp_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·e^x = dy·y */
        x->grad[i] += dy[i] * y[i];
}

static void log_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    qkv_vlog(y, x, n);
}

static void log_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy/x */
        x->grad[i] += dy[i] / x->data[i];
}

static void sqrt_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)sqrt((double)x[i]);
}

static void sqrt_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy/(2·√x) = dy/(2y) */
        x->grad[i] += dy[i] / (2 * y[i]);
}

static void pow_map(qkv_real *y, const qkv_real *x, size_t n, double p)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (qkv_real)pow((double)x[i], p);
}

static void pow_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    const double p = nd->c;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·p·x^(p-1); 0 when p = 0 */
        x->grad[i] += p == 0 ? 0 : (qkv_real)(dy[i] * p * pow((double)x->data[i], p - 1));
}

static void tanh_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    qkv_vtanh(y, x, n);
}

static void tanh_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·(1 - y²) */
        x->grad[i] += dy[i] * (1 - y[i] * y[i]);
}

static void sigmoid_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    qkv_vsigmoid(y, x, n);
}

static void sigmoid_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·y·(1 - y) */
        x->grad[i] += dy[i] * y[i] * (1 - y[i]);
}

static void relu_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    /* x < 0, not x > 0: a NaN stays NaN, and -0 stays -0, as in PyTorch */
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] < 0 ? 0 : x[i];
}

static void relu_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·[x > 0], and dy at a NaN (PyTorch's) */
        x->grad[i] += x->data[i] <= 0 ? 0 : dy[i];
}

static void gelu_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    qkv_vgelu(y, x, n);
}

static void gelu_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    /* dx += dy·gelu'(x), gelu' as kernels.h writes it out; a gradient that
     * no node has filled is stored, with the bits of adding into zeros */
    const int claimed = qkv_tensor_grad_claim(x);
    qkv_vgelu_backward(x->grad, x->data, nd->out->grad, x->numel, claimed);
}

/* m·e^x in double as (m·h)·h with h = e^(x/2): for x far below 0, where
 * σ(x) = e^x/(1 + e^x) is e^x to double precision but may be subnormal
 * even in double (x < -708.4), while h, and m·e^x for m near x, are not. */
static double scaled_exp_tail(double m, double x)
{
    const double h = exp(0.5 * x);
    return m * h * h;
}

static void silu_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    qkv_vsigmoid(y, x, n);
    /* a σ below the smallest normal number has lost bits (19 of 24 are
     * left at x = -90 in float), while x·σ(x) is normal down to about -92
     * (-715 in double): there, x·e^x from the tail */
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] < REAL_MIN && x[i] < -36 && isfinite(x[i])
                   ? (qkv_real)scaled_exp_tail(x[i], x[i])
                   : y[i] * x[i];
}

static void silu_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) {
        /* y = x·s with s = σ(x): dx = dy·(s + x·s·(1 - s)) = dy·(s + y·(1 - s)); s
         * comes back as y/x, or σ(0) = 1/2 at 0 */
        double xi = x->data[i], s = xi != 0 ? y[i] / xi : 0.5;
        if (xi < -36 && isfinite(xi) && fabs(s) < REAL_MIN) {
            /* σ subnormal (below about -87.3 in float, -708.4 in double),
             * where 1 - σ is 1: silu'(x) = σ·(1 + x) = (1 + x)·e^x */
            x->grad[i] += (qkv_real)(dy[i] * scaled_exp_tail(1 + xi, xi));
            continue;
        }
        /* y overflowed or x is huge; or y is subnormal (x near 0), and s
         * has lost bits, down to 0: recompute */
        if (!isfinite(s) || fabs((double)y[i]) < REAL_MIN || fabs(s) < REAL_MIN)
            s = 1 / (1 + exp(-xi));
        x->grad[i] += (qkv_real)(dy[i] * (s + y[i] * (1 - s)));
    }
}

static void abs_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    for (size_t i = 0; i < n; i++) /* fabs: -0 gives +0, NaN stays NaN */
        y[i] = (qkv_real)fabs((double)x[i]);
}

static void abs_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    /* dx = dy·sign(x), with sign(±0) = sign(NaN) = 0, as PyTorch's */
    for (size_t i = 0; i < x->numel; i++)
        x->grad[i] += x->data[i] > 0 ? dy[i] : x->data[i] < 0 ? -dy[i] : 0;
}

/* σ(x) in double without overflow: 1 and 0 at ±inf, NaN at NaN. */
static double sigmoid_double(double x)
{
    if (x >= 0)
        return 1 / (1 + exp(-x));
    const double e = exp(x);
    return e / (1 + e);
}

static void softplus_map(qkv_real *y, const qkv_real *x, size_t n, double c)
{
    (void)c;
    /* log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, and no
     * threshold (PyTorch returns x above 20, ops.h) */
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        y[i] = (qkv_real)((v > 0 ? v : 0) + log1p(exp(-fabs(v))));
    }
}

static void softplus_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad;
    for (size_t i = 0; i < x->numel; i++) /* dx = dy·σ(x) */
        x->grad[i] += (qkv_real)(dy[i] * sigmoid_double(x->data[i]));
}

static void leaky_relu_map(qkv_real *y, const qkv_real *x, size_t n, double slope)
{
    const qkv_real s = (qkv_real)slope;
    /* x > 0, as PyTorch tests it: ±0 and NaN take the slope's side */
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : s * x[i];
}

static void leaky_relu_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *dy = nd->out->grad, s = (qkv_real)nd->c;
    /* dx = dy for x > 0, slope·dy elsewhere (±0 and NaN too, PyTorch's) */
    for (size_t i = 0; i < x->numel; i++)
        x->grad[i] += x->data[i] > 0 ? dy[i] : s * dy[i];
}

static const qkv_op_def op_scale = {"scale", scale_backward, 0};
static const qkv_op_def op_neg = {"neg", neg_backward, 0};
static const qkv_op_def op_exp = {"exp", exp_backward, 0};
static const qkv_op_def op_log = {"log", log_backward, 0};
static const qkv_op_def op_sqrt = {"sqrt", sqrt_backward, 0};
static const qkv_op_def op_pow = {"pow", pow_backward, 0};
static const qkv_op_def op_tanh = {"tanh", tanh_backward, 0};
static const qkv_op_def op_sigmoid = {"sigmoid", sigmoid_backward, 0};
static const qkv_op_def op_relu = {"relu", relu_backward, 0};
static const qkv_op_def op_gelu = {"gelu", gelu_backward, QKV_OP_CLAIMS_GRADS};
static const qkv_op_def op_silu = {"silu", silu_backward, 0};
static const qkv_op_def op_abs = {"abs", abs_backward, 0};
static const qkv_op_def op_softplus = {"softplus", softplus_backward, 0};
static const qkv_op_def op_leaky_relu = {"leaky_relu", leaky_relu_backward, 0};

qkv_tensor *qkv_scale(qkv_tape *t, qkv_tensor *x, double c)
{
    if (!isfinite(c)) { /* as pow's exponent: every value would be ±inf or NaN */
        char num[32];
        if (t != NULL && qkv_tape_status(t) == QKV_OK)
            qkv_tape_fail(t, QKV_ERR_ARG, "scale: the factor %s is not finite",
                          qkv_num_str(num, sizeof num, c));
        return qkv_nil();
    }
    return unary(t, "scale", &op_scale, x, scale_map, c);
}

qkv_tensor *qkv_neg(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "neg", &op_neg, x, neg_map, 0);
}

qkv_tensor *qkv_exp(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "exp", &op_exp, x, exp_map, 0);
}

qkv_tensor *qkv_log(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "log", &op_log, x, log_map, 0);
}

qkv_tensor *qkv_sqrt(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "sqrt", &op_sqrt, x, sqrt_map, 0);
}

qkv_tensor *qkv_pow(qkv_tape *t, qkv_tensor *x, double p)
{
    if (!isfinite(p)) {
        char num[32];
        if (t != NULL && qkv_tape_status(t) == QKV_OK)
            qkv_tape_fail(t, QKV_ERR_ARG, "pow: the exponent %s is not finite",
                          qkv_num_str(num, sizeof num, p));
        return qkv_nil();
    }
    return unary(t, "pow", &op_pow, x, pow_map, p);
}

qkv_tensor *qkv_tanh(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "tanh", &op_tanh, x, tanh_map, 0);
}

qkv_tensor *qkv_sigmoid(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "sigmoid", &op_sigmoid, x, sigmoid_map, 0);
}

qkv_tensor *qkv_relu(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "relu", &op_relu, x, relu_map, 0);
}

qkv_tensor *qkv_gelu(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "gelu", &op_gelu, x, gelu_map, 0);
}

qkv_tensor *qkv_silu(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "silu", &op_silu, x, silu_map, 0);
}

qkv_tensor *qkv_abs(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "abs", &op_abs, x, abs_map, 0);
}

qkv_tensor *qkv_softplus(qkv_tape *t, qkv_tensor *x)
{
    return unary(t, "softplus", &op_softplus, x, softplus_map, 0);
}

qkv_tensor *qkv_leaky_relu(qkv_tape *t, qkv_tensor *x, double slope)
{
    /* as scale's factor; and the slope is used rounded to qkv_real, where
     * a finite double may be infinite (1e300 in float) */
    if (!isfinite(slope) || !isfinite((qkv_real)slope)) {
        char num[32];
        if (t != NULL && qkv_tape_status(t) == QKV_OK)
            qkv_tape_fail(t, QKV_ERR_ARG, "leaky_relu: the slope %s is not finite%s",
                          qkv_num_str(num, sizeof num, slope), isfinite(slope) ? " in float" : "");
        return qkv_nil();
    }
    return unary(t, "leaky_relu", &op_leaky_relu, x, leaky_relu_map, slope);
}

/* ---- clamp: y = min(max(x, lo), hi) ------------------------------------- */

static void clamp_backward(const qkv_node *nd)
{
    qkv_tensor *x = nd->in[0];
    const qkv_real *y = nd->out->data, *dy = nd->out->grad;
    /* dx = dy where lo <= x <= hi, bounds included (PyTorch's), else 0:
     * exactly where y == x, since y is a bound wherever x lies outside,
     * and NaN (never equal) stops it as PyTorch does */
    for (size_t i = 0; i < x->numel; i++)
        x->grad[i] += y[i] == x->data[i] ? dy[i] : 0;
}

static const qkv_op_def op_clamp = {"clamp", clamp_backward, 0};

qkv_tensor *qkv_clamp(qkv_tape *t, qkv_tensor *x, double lo, double hi)
{
    if (t != NULL && qkv_tape_status(t) == QKV_OK && (isnan(lo) || isnan(hi) || lo > hi)) {
        char a[32], b[32];
        if (isnan(lo) || isnan(hi))
            qkv_tape_fail(t, QKV_ERR_ARG, "clamp: the %s NaN is not a number",
                          isnan(lo) ? "min" : "max");
        else
            qkv_tape_fail(t, QKV_ERR_ARG, "clamp: the min %s is above the max %s",
                          qkv_num_str(a, sizeof a, lo), qkv_num_str(b, sizeof b, hi));
        return qkv_nil();
    }
    if (!qkv_op_inputs_ok(t, "clamp", x, NULL, 0))
        return qkv_nil();
    qkv_tensor *out = qkv_op_out(t, "clamp", x->ndim, x->shape, x, NULL);
    if (qkv_tensor_is_nil(out))
        return out;
    /* the bounds rounded once; comparisons that are false for NaN keep it */
    const qkv_real l = (qkv_real)lo, h = (qkv_real)hi;
    for (size_t i = 0; i < x->numel; i++) {
        const qkv_real v = x->data[i] < l ? l : x->data[i];
        out->data[i] = v > h ? h : v;
    }
    return qkv_op_finish(t, &op_clamp, out, x, NULL, 0);
}
