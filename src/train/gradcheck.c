/*
 * gradcheck.c - central finite differences against the tape, and the
 * built-in checks that cover every op and the attention compositions.
 */
#include <math.h>
#include <string.h>

#include "qkv/gradcheck.h"
#include "qkv/rng.h"

/* Defaults, by scalar type. The step balances truncation error (~h²·L'''/6)
 * against rounding error (~ε·|L|/h): float32 (ε ≈ 6e-8) wants h ≈ 1e-2 and
 * then leaves absolute errors up to ~1e-4 (loss values near 10 lose
 * 10·ε/h ≈ 6e-5 to rounding), so relative errors are judged against a floor
 * of 1e-2 and pass below 2e-2 (the worst seen is 6e-3); a real gradient bug
 * (a sign, a factor, a missing term) is off by 0.1 or more. Double
 * (ε ≈ 1e-16) wants h ≈ 1e-5 and leaves ~1e-10, so 1e-6 is strict. */
#ifdef QKV_DOUBLE
#define GC_STEP 1e-5
#define GC_FLOOR 1e-3
#define GC_TOL 1e-6
#else
#define GC_STEP 1e-2
#define GC_FLOOR 1e-2
#define GC_TOL 2e-2
#endif

double qkv_gradcheck_default_step(void)
{
    return GC_STEP;
}
double qkv_gradcheck_default_floor(void)
{
    return GC_FLOOR;
}
double qkv_gradcheck_default_tol(void)
{
    return GC_TOL;
}

void qkv_grad_compare(const qkv_real *analytic, const double *numeric, size_t n, double floor,
                      double tol, qkv_gradcheck_result *res)
{
    for (size_t i = 0; i < n; i++) {
        double a = analytic[i], num = numeric[i];
        double err = fabs(a - num);
        double scale = fmax(fmax(fabs(a), fabs(num)), floor);
        double rel = err / scale;
        if (!(err == err)) /* NaN never passes */
            rel = err = INFINITY;
        res->max_abs = fmax(res->max_abs, err);
        res->max_rel = fmax(res->max_rel, rel);
        res->checked++;
    }
    res->passed = res->max_rel <= tol;
}

/* The loss at the parameters' current values, without recording. */
static qkv_status eval_loss(qkv_tape *t, qkv_loss_fn fn, void *ctx, double *out)
{
    qkv_tape_reset(t);
    int old = qkv_tape_set_grad(t, 0);
    qkv_tensor *loss = fn(t, ctx);
    qkv_tape_set_grad(t, old);
    if (qkv_tape_status(t) != QKV_OK)
        return qkv_tape_status(t);
    if (qkv_tensor_is_nil(loss) || loss->numel != 1)
        return qkv_tape_fail(t, QKV_ERR_ARG, "gradcheck: the loss function must return a scalar");
    *out = loss->data[0];
    return QKV_OK;
}

qkv_status qkv_gradcheck(qkv_tape *t, qkv_loss_fn fn, void *ctx, qkv_tensor **params, int nparams,
                         double step, double floor, double tol, qkv_gradcheck_result *res)
{
    if (t == NULL)
        return QKV_ERR_ARG;
    if (fn == NULL || res == NULL || nparams < 0 || (nparams && params == NULL))
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "gradcheck: needs a loss function, a result and "
                             "a parameter array");
    for (int p = 0; p < nparams; p++)
        if (qkv_tensor_is_nil(params[p]) || params[p]->grad == NULL)
            return qkv_tape_fail(t, QKV_ERR_ARG,
                                 "gradcheck: parameter %d is nil or has no gradient buffer", p);
    step = step > 0 ? step : GC_STEP;
    floor = floor > 0 ? floor : GC_FLOOR;
    tol = tol > 0 ? tol : GC_TOL;
    memset(res, 0, sizeof *res);

    for (int p = 0; p < nparams; p++)
        qkv_tensor_zero_grad(params[p]);
    qkv_tape_reset(t);
    qkv_tape_set_grad(t, 1);
    qkv_status s = qkv_backward(t, fn(t, ctx));
    if (s != QKV_OK)
        return s;

    for (int p = 0; p < nparams; p++) {
        qkv_tensor *x = params[p];
        for (size_t i = 0; i < x->numel; i++) {
            qkv_real x0 = x->data[i];
            double lp, lm;
            qkv_real xp = (qkv_real)(x0 + step), xm = (qkv_real)(x0 - step);
            x->data[i] = xp;
            s = eval_loss(t, fn, ctx, &lp);
            x->data[i] = xm;
            if (s == QKV_OK)
                s = eval_loss(t, fn, ctx, &lm);
            x->data[i] = x0;
            if (s != QKV_OK)
                return s;
            /* divide by the step actually taken after rounding to qkv_real */
            double num = (lp - lm) / ((double)xp - (double)xm);
            qkv_grad_compare(&x->grad[i], &num, 1, floor, tol, res);
        }
    }
    if (nparams == 0)
        res->passed = 1;
    qkv_tape_reset(t);
    return QKV_OK;
}

/* ------------------------------------------------------------------------ */
/* built-in checks                                                          */

#define MAXP 4

typedef qkv_tensor *(*case_fn)(qkv_tape *t, qkv_tensor **p);

typedef struct gc_case {
    const char *name;
    case_fn fn; /* returns any tensor; a random readout makes it scalar */
    int np;
    int ndim[MAXP];
    int shape[MAXP][QKV_MAX_DIMS];
    int domain; /* ANY; AWAY: off 0 (relu's kink); POSITIVE: > 0.5 (log, sqrt) */
} gc_case;

enum { ANY, AWAY, POSITIVE };

static qkv_tensor *c_matmul(qkv_tape *t, qkv_tensor **p)
{
    return qkv_matmul(t, p[0], p[1]);
}
static qkv_tensor *c_matmul_nt(qkv_tape *t, qkv_tensor **p)
{
    return qkv_matmul_nt(t, p[0], p[1]);
}
static qkv_tensor *c_transpose(qkv_tape *t, qkv_tensor **p)
{
    return qkv_transpose(t, p[0]);
}
static qkv_tensor *c_scale(qkv_tape *t, qkv_tensor **p)
{
    return qkv_scale(t, p[0], 0.37);
}
static qkv_tensor *c_add(qkv_tape *t, qkv_tensor **p)
{
    return qkv_add(t, p[0], p[1]);
}
static qkv_tensor *c_mul(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mul(t, p[0], p[1]);
}
static qkv_tensor *c_sum(qkv_tape *t, qkv_tensor **p)
{
    return qkv_sum(t, p[0]);
}
static qkv_tensor *c_mean(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mean(t, p[0]);
}
static qkv_tensor *c_sum_last(qkv_tape *t, qkv_tensor **p)
{
    return qkv_sum_last(t, p[0]);
}
static qkv_tensor *c_mean_last(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mean_last(t, p[0]);
}
static qkv_tensor *c_softmax(qkv_tape *t, qkv_tensor **p)
{
    return qkv_softmax(t, p[0]);
}
static qkv_tensor *c_log_softmax(qkv_tape *t, qkv_tensor **p)
{
    return qkv_log_softmax(t, p[0]);
}
static qkv_tensor *c_tanh(qkv_tape *t, qkv_tensor **p)
{
    return qkv_tanh(t, p[0]);
}
static qkv_tensor *c_exp(qkv_tape *t, qkv_tensor **p)
{
    return qkv_exp(t, p[0]);
}

static qkv_tensor *c_sub(qkv_tape *t, qkv_tensor **p)
{
    return qkv_sub(t, p[0], p[1]);
}

static qkv_tensor *c_div(qkv_tape *t, qkv_tensor **p)
{
    return qkv_div(t, p[0], p[1]);
}

static qkv_tensor *c_neg(qkv_tape *t, qkv_tensor **p)
{
    return qkv_neg(t, p[0]);
}

static qkv_tensor *c_log(qkv_tape *t, qkv_tensor **p)
{
    return qkv_log(t, p[0]);
}

static qkv_tensor *c_sqrt(qkv_tape *t, qkv_tensor **p)
{
    return qkv_sqrt(t, p[0]);
}

static qkv_tensor *c_pow(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mul(t, qkv_pow(t, p[0], 3), qkv_pow(t, p[0], -0.5));
}

static qkv_tensor *c_sigmoid(qkv_tape *t, qkv_tensor **p)
{
    return qkv_sigmoid(t, p[0]);
}

static qkv_tensor *c_gelu(qkv_tape *t, qkv_tensor **p)
{
    return qkv_gelu(t, p[0]);
}

static qkv_tensor *c_silu(qkv_tape *t, qkv_tensor **p)
{
    return qkv_silu(t, p[0]);
}

/* A view in the middle: the gradient reaches p[0] through the shared
 * buffer, with no node of its own. */
static qkv_tensor *c_reshape(qkv_tape *t, qkv_tensor **p)
{
    qkv_tensor *r = qkv_reshape(t, p[0], 3, (const int[]){4, -1, 2});
    return qkv_mul(t, r, qkv_reshape(t, p[1], 2, (const int[]){3, 2}));
}

static qkv_tensor *c_permute(qkv_tape *t, qkv_tensor **p)
{
    return qkv_permute(t, p[0], (const int[]){2, 0, 1});
}

static qkv_tensor *c_swapdims(qkv_tape *t, qkv_tensor **p)
{
    return qkv_swapdims(t, p[0], 0, -1);
}

static qkv_tensor *c_concat(qkv_tape *t, qkv_tensor **p)
{
    return qkv_concat(t, 2, p, 1);
}

static qkv_tensor *c_slice(qkv_tape *t, qkv_tensor **p)
{
    return qkv_slice(t, p[0], 1, 1, 2);
}

static qkv_tensor *c_sum_dim(qkv_tape *t, qkv_tensor **p)
{
    return qkv_sum_dim(t, p[0], 1, 1);
}

static qkv_tensor *c_mean_dim(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mean_dim(t, p[0], 0, 0);
}

static qkv_tensor *c_max_dim(qkv_tape *t, qkv_tensor **p)
{
    return qkv_max_dim(t, p[0], -1, 0);
}

static qkv_tensor *c_layer_norm(qkv_tape *t, qkv_tensor **p)
{
    return qkv_layer_norm(t, p[0], p[1], p[2], 1e-5);
}

static qkv_tensor *c_layer_norm_plain(qkv_tape *t, qkv_tensor **p)
{
    return qkv_layer_norm(t, p[0], NULL, NULL, 1e-5);
}

static qkv_tensor *c_rms_norm(qkv_tape *t, qkv_tensor **p)
{
    return qkv_rms_norm(t, p[0], p[1], 1e-6);
}

/* A fixed target of x's shape, the same at every call: from a seeded RNG,
 * in [0, 1] when unit, else N(0,1). */
static qkv_tensor *fixed_target(qkv_tape *t, const qkv_tensor *x, int unit)
{
    qkv_tensor *y = qkv_tape_tensor(t, x->ndim, x->shape, 0);
    qkv_rng g;
    qkv_rng_seed(&g, 77);
    for (size_t i = 0; !qkv_tensor_is_nil(y) && i < y->numel; i++)
        y->data[i] = (qkv_real)(unit ? qkv_rng_random(&g) : qkv_rng_normalvariate(&g, 0, 1));
    return y;
}

static qkv_tensor *c_mse(qkv_tape *t, qkv_tensor **p)
{
    return qkv_mse(t, p[0], fixed_target(t, p[0], 0));
}

static qkv_tensor *c_bce(qkv_tape *t, qkv_tensor **p)
{
    return qkv_bce_with_logits(t, p[0], fixed_target(t, p[0], 1));
}

/* Dropout with p = 0.4 and the same draws at every call. */
static qkv_tensor *c_dropout(qkv_tape *t, qkv_tensor **p)
{
    qkv_rng g;
    qkv_rng_seed(&g, 5);
    int old = qkv_tape_set_grad(t, 1); /* also when gradcheck evaluates without recording */
    qkv_tensor *y = qkv_dropout(t, p[0], 0.4, &g);
    qkv_tape_set_grad(t, old);
    return y;
}

static qkv_tensor *c_relu(qkv_tape *t, qkv_tensor **p)
{
    return qkv_relu(t, p[0]);
}

static qkv_tensor *c_gather(qkv_tape *t, qkv_tensor **p)
{
    static const int ids[6] = {4, 1, 4, 0, 5, 1}; /* repeated ids accumulate */
    return qkv_gather(t, p[0], ids, 2, (const int[]){2, 3});
}

static qkv_tensor *c_pick(qkv_tape *t, qkv_tensor **p)
{
    static const int idx[2] = {2, 0};
    return qkv_pick_rows(t, p[0], idx);
}

static qkv_tensor *c_cross_entropy(qkv_tape *t, qkv_tensor **p)
{
    static const int targets[5] = {1, 3, QKV_IGNORE, 0, 2};
    return qkv_cross_entropy(t, p[0], targets);
}

/* A causal mask [2,tq,tk] (query i sees keys j <= i + tk - tq), with row 0
 * of item 1 fully masked. */
static qkv_tensor *causal_mask(qkv_tape *t, int tq, int tk)
{
    qkv_tensor *m = qkv_tape_tensor(t, 3, (const int[]){2, tq, tk}, 0);
    for (int b = 0; !qkv_tensor_is_nil(m) && b < 2; b++)
        for (int i = 0; i < tq; i++)
            for (int j = 0; j < tk; j++)
                m->data[(b * tq + i) * tk + j] =
                    j > i + tk - tq || (b == 1 && i == 0) ? -INFINITY : 0;
    return m;
}

static qkv_tensor *c_mask_softmax(qkv_tape *t, qkv_tensor **p)
{
    return qkv_softmax(t, qkv_mask(t, p[0], causal_mask(t, 3, 3)));
}

/* softmax(Q·Kᵀ/√d)·V on dense inputs. */
static qkv_tensor *c_attention(qkv_tape *t, qkv_tensor **p)
{
    qkv_tensor *s = qkv_scale(t, qkv_matmul_nt(t, p[0], p[1]), 1.0 / sqrt(4.0));
    return qkv_matmul(t, qkv_softmax(t, s), p[2]);
}

/* Fused attention with a causal mask (one row fully masked), a loss that
 * also reads the scores and the weights, and one picked row per item. */
static qkv_tensor *c_attention_fused(qkv_tape *t, qkv_tensor **p)
{
    static const int rows[2] = {2, 1};
    qkv_attention_parts parts;
    qkv_tensor *o = qkv_attention(t, p[0], p[1], p[2], causal_mask(t, 3, 4), 0.5, &parts);
    qkv_tensor *extra = qkv_add(t, qkv_sum(t, qkv_mul(t, parts.scores, parts.attn)),
                                qkv_sum(t, qkv_pick_rows(t, o, rows)));
    return qkv_add(t, qkv_mean(t, qkv_tanh(t, o)), extra);
}

/* A whole attention classifier end to end (the shape of the tutorial's
 * coreference model): Q, K, V looked up from token ids, scaled scores,
 * padding mask, softmax, A·V (all in qkv_embed_attention), one query row
 * per item, ·Wo, cross-entropy. */
static qkv_tensor *c_model(qkv_tape *t, qkv_tensor **p)
{
    static const int ids[8] = {0, 3, 5, 2, 1, 4, 2, 0}; /* [2,4]; item 1 is padded */
    static const int pron[2] = {1, 2}, target[2] = {2, 0};
    qkv_tensor *m = qkv_tape_tensor(t, 3, (const int[]){2, 1, 4}, 0);
    if (qkv_tensor_is_nil(m))
        return m;
    for (int j = 0; j < 8; j++)
        m->data[j] = j == 7 ? -INFINITY : 0; /* item 1 has length 3 */
    qkv_tensor *o = qkv_embed_attention(t, p[0], p[1], p[2], ids, 2, 4, m, 1.0 / sqrt(3.0), NULL);
    qkv_tensor *h = qkv_pick_rows(t, o, pron);
    return qkv_cross_entropy(t, qkv_matmul(t, h, p[3]), target);
}

static const gc_case cases[] = {
    {"matmul", c_matmul, 2, {2, 2}, {{3, 4}, {4, 5}}, 0},
    {"matmul batched", c_matmul, 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}, 0},
    {"matmul shared B", c_matmul, 2, {3, 2}, {{2, 3, 4}, {4, 5}}, 0},
    {"matmul_nt (Q·Kᵀ)", c_matmul_nt, 2, {3, 3}, {{2, 3, 4}, {2, 5, 4}}, 0},
    {"transpose", c_transpose, 1, {3}, {{2, 3, 4}}, 0},
    {"scale", c_scale, 1, {2}, {{3, 4}}, 0},
    {"add", c_add, 2, {2, 2}, {{3, 4}, {3, 4}}, 0},
    {"add bias row", c_add, 2, {3, 1}, {{2, 3, 4}, {4}}, 0},
    {"mul", c_mul, 2, {2, 2}, {{3, 4}, {3, 4}}, 0},
    {"mul broadcast", c_mul, 2, {3, 2}, {{2, 3, 4}, {3, 1}}, 0},
    {"sum", c_sum, 1, {2}, {{3, 4}}, 0},
    {"mean", c_mean, 1, {2}, {{3, 4}}, 0},
    {"sum_last", c_sum_last, 1, {3}, {{2, 3, 4}}, 0},
    {"mean_last", c_mean_last, 1, {3}, {{2, 3, 4}}, 0},
    {"gather", c_gather, 1, {2}, {{6, 4}}, 0},
    {"pick_rows", c_pick, 1, {3}, {{2, 3, 4}}, 0},
    {"mask + softmax", c_mask_softmax, 1, {3}, {{2, 3, 3}}, 0},
    {"softmax", c_softmax, 1, {3}, {{2, 3, 5}}, 0},
    {"log_softmax", c_log_softmax, 1, {2}, {{4, 5}}, 0},
    {"cross_entropy", c_cross_entropy, 1, {2}, {{5, 4}}, 0},
    {"tanh", c_tanh, 1, {2}, {{3, 4}}, 0},
    {"exp", c_exp, 1, {2}, {{3, 4}}, 0},
    {"sub", c_sub, 2, {2, 2}, {{3, 4}, {3, 4}}, 0},
    {"sub broadcast both ways", c_sub, 2, {2, 2}, {{3, 1}, {1, 4}}, 0},
    {"div", c_div, 2, {2, 2}, {{3, 4}, {3, 4}}, 2},
    {"div broadcast", c_div, 2, {1, 2}, {{4}, {3, 4}}, 2},
    {"add broadcast both ways", c_add, 2, {3, 2}, {{2, 1, 4}, {3, 1}}, 0},
    {"mul broadcast both ways", c_mul, 2, {2, 3}, {{3, 1}, {2, 1, 4}}, 0},
    {"neg", c_neg, 1, {2}, {{3, 4}}, 0},
    {"log", c_log, 1, {2}, {{3, 4}}, 2},
    {"sqrt", c_sqrt, 1, {2}, {{3, 4}}, 2},
    {"pow (x³ and x^-½)", c_pow, 1, {2}, {{3, 4}}, 2},
    {"sigmoid", c_sigmoid, 1, {2}, {{3, 4}}, 0},
    {"gelu", c_gelu, 1, {2}, {{3, 4}}, 0},
    {"silu", c_silu, 1, {2}, {{3, 4}}, 0},
    {"reshape (a view)", c_reshape, 2, {3, 1}, {{2, 3, 4}, {6}}, 0},
    {"permute", c_permute, 1, {3}, {{2, 3, 4}}, 0},
    {"swapdims", c_swapdims, 1, {3}, {{2, 3, 4}}, 0},
    {"concat", c_concat, 2, {3, 3}, {{2, 3, 4}, {2, 2, 4}}, 0},
    {"slice", c_slice, 1, {3}, {{2, 4, 3}}, 0},
    {"sum_dim (keepdim)", c_sum_dim, 1, {3}, {{2, 3, 4}}, 0},
    {"mean_dim", c_mean_dim, 1, {3}, {{2, 3, 4}}, 0},
    {"max_dim", c_max_dim, 1, {3}, {{2, 3, 4}}, 0},
    {"layer_norm", c_layer_norm, 3, {3, 1, 1}, {{2, 3, 5}, {5}, {5}}, 0},
    {"layer_norm without gamma, beta", c_layer_norm_plain, 1, {2}, {{4, 6}}, 0},
    {"rms_norm", c_rms_norm, 2, {2, 1}, {{4, 5}, {5}}, 0},
    {"mse", c_mse, 1, {2}, {{3, 4}}, 0},
    {"bce_with_logits", c_bce, 1, {2}, {{3, 4}}, 0},
    {"dropout", c_dropout, 1, {2}, {{4, 5}}, 0},
    {"relu", c_relu, 1, {2}, {{3, 4}}, 1},
    {"attention softmax(QKᵀ/√d)V", c_attention, 3, {3, 3, 3}, {{2, 3, 4}, {2, 5, 4}, {2, 5, 4}}, 0},
    {"fused attention (mask, parts)",
     c_attention_fused,
     3,
     {3, 3, 3},
     {{2, 3, 4}, {2, 4, 4}, {2, 4, 5}},
     0},
    {"embedded attention classifier",
     c_model,
     4,
     {2, 2, 2, 2},
     {{6, 3}, {6, 3}, {6, 3}, {3, 4}},
     0},
};

#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct gc_run {
    const gc_case *c;
    qkv_tensor *p[MAXP];
} gc_run;

/* loss = Σ y ⊙ R with R a fixed N(0,1) tensor, so every output entry
 * matters and sums that are constant (like softmax rows) still test. */
static qkv_tensor *readout_loss(qkv_tape *t, void *ctx)
{
    gc_run *run = ctx;
    qkv_tensor *y = run->c->fn(t, run->p);
    if (qkv_tensor_is_nil(y))
        return y;
    qkv_tensor *r = qkv_tape_tensor(t, y->ndim, y->shape, 0);
    if (qkv_tensor_is_nil(r))
        return r;
    qkv_rng g;
    qkv_rng_seed(&g, 99);
    for (size_t i = 0; i < r->numel; i++)
        r->data[i] = (qkv_real)qkv_rng_normalvariate(&g, 0, 1);
    return qkv_sum(t, qkv_mul(t, y, r));
}

int qkv_gradcheck_builtin_count(void)
{
    return N_CASES;
}

qkv_status qkv_gradcheck_builtin(int i, const char **name, qkv_gradcheck_result *res)
{
    if (i < 0 || i >= N_CASES || res == NULL)
        return QKV_ERR_ARG;
    gc_run run = {&cases[i], {NULL}};
    if (name != NULL)
        *name = cases[i].name;
    qkv_rng g;
    qkv_rng_seed(&g, (uint64_t)(1000 + i));
    qkv_status s = QKV_OK;
    for (int p = 0; p < run.c->np; p++) {
        run.p[p] = qkv_tensor_new(run.c->ndim[p], run.c->shape[p], 1, NULL);
        if (qkv_tensor_is_nil(run.p[p]))
            s = QKV_ERR_NOMEM;
        for (size_t j = 0; s == QKV_OK && j < run.p[p]->numel; j++) {
            double v = qkv_rng_normalvariate(&g, 0, 1);
            if (run.c->domain == AWAY)
                v += v < 0 ? -0.2 : 0.2;
            else if (run.c->domain == POSITIVE)
                v = fabs(v) + 0.5;
            run.p[p]->data[j] = (qkv_real)v;
        }
    }
    qkv_tape *t = s == QKV_OK ? qkv_tape_new(0, NULL) : NULL;
    if (s == QKV_OK && t == NULL)
        s = QKV_ERR_NOMEM;
    if (s == QKV_OK)
        s = qkv_gradcheck(t, readout_loss, &run, run.p, run.c->np, 0, 0, 0, res);
    qkv_tape_free(t);
    for (int p = 0; p < run.c->np; p++)
        qkv_tensor_free(run.p[p]);
    return s;
}
