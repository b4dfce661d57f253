/*
 * gradcheck.c - central finite differences against the tape. The built-in
 * checks of every op and layer are in src/layers/checks.c.
 */
#include <math.h>
#include <string.h>

#include "qkv/gradcheck.h"
#include "qkv/rng.h"
#include "util/util.h"

/* Defaults, by scalar type. The step balances truncation error against
 * rounding error (~ε·|L|/h). float32 (ε ≈ 6e-8) takes one central
 * difference (truncation ~h²·L'''/6) at h ≈ 1e-2, which leaves absolute
 * errors up to ~1e-4 (loss values near 10 lose 10·ε/h ≈ 6e-5 to rounding),
 * so relative errors are judged against a floor of 1e-2 and pass below 2e-2
 * (the worst seen is 6e-3); a real gradient bug (a sign, a factor, a
 * missing term) is off by 0.1 or more. Double (ε ≈ 1e-16) extrapolates two
 * central differences, at h and 2h (Richardson: truncation ~h⁴), because
 * one difference at its best h (1e-5) left 2.5e-7 on a Transformer block
 * whose layer norm met a row of small variance (L''' ≈ 1.5e4, read off the
 * error's h² scaling), with two of three input seeds tried. At h = 3e-4
 * the worst relative error over every check is ~3e-8: 1e-6 is strict. */
/* Where the truncation error is what fails an entry (a layer norm on rows
 * of small spread has a curvature of 1/spread²: at the float32 step, half
 * an embedding's spread of 0.02, a correct gradient was 29% off), a step
 * three and nine times smaller cuts it by 9 and 81 (by 81 and 6561 in
 * double, whose extrapolated error goes as h⁴: GC_SHRINK is 3^order)
 * while the rounding error grows 3 and 9 times. Which estimate counts is
 * decided from the three alone (truncation_bound): choosing the one
 * nearest the gradient let a float32 gradient 10% off pass, on a loss of
 * 30 to 100 whose rounding noise at step/9 matched the error. */
#define GC_STEPS 3
#ifdef QKV_DOUBLE
#define GC_SHRINK 81.0
#define GC_STEP 3e-4
#define GC_FLOOR 1e-3
#define GC_TOL 1e-6
#else
#define GC_SHRINK 9.0
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

/* |a - num| / max(|a|, |num|, floor); a NaN anywhere gives infinity. */
static double rel_err(double a, double num, double floor)
{
    double rel = fabs(a - num) / fmax(fmax(fabs(a), fabs(num)), floor);
    return rel == rel ? rel : INFINITY;
}

void qkv_grad_compare(const qkv_real *analytic, const double *numeric, size_t n, double floor,
                      double tol, qkv_gradcheck_result *res)
{
    if (res == NULL)
        return;
    if (n > 0 && (analytic == NULL || numeric == NULL)) { /* missing data never passes */
        res->max_abs = res->max_rel = INFINITY;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        double err = fabs(analytic[i] - numeric[i]);
        if (!(err == err)) /* NaN never passes */
            err = INFINITY;
        res->max_abs = fmax(res->max_abs, err);
        res->max_rel = fmax(res->max_rel, rel_err(analytic[i], numeric[i], floor));
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

/* The central difference (L(x + h) - L(x - h)) / 2h in entry i of x,
 * divided by the step actually taken after rounding to qkv_real. */
static qkv_status central(qkv_tape *t, qkv_loss_fn fn, void *ctx, qkv_tensor *x, size_t i, double h,
                          double *d)
{
    qkv_real x0 = x->data[i];
    double lp = 0, lm = 0;
    qkv_real xp = (qkv_real)(x0 + h), xm = (qkv_real)(x0 - h);
    x->data[i] = xp;
    qkv_status s = eval_loss(t, fn, ctx, &lp);
    x->data[i] = xm;
    if (s == QKV_OK)
        s = eval_loss(t, fn, ctx, &lm);
    x->data[i] = x0;
    *d = (lp - lm) / ((double)xp - (double)xm);
    return s;
}

/* The derivative in entry i at step h: one central difference in
 * float32; in double, two (at h and 2h) extrapolated. */
static qkv_status estimate(qkv_tape *t, qkv_loss_fn fn, void *ctx, qkv_tensor *x, size_t i,
                           double h, double *d)
{
    qkv_status s = central(t, fn, ctx, x, i, h, d);
#ifdef QKV_DOUBLE
    double d2 = 0;
    if (s == QKV_OK)
        s = central(t, fn, ctx, x, i, 2 * h, &d2);
    *d += (*d - d2) / 3; /* Richardson: (4·D(h) - D(2h)) / 3 */
#endif
    return s;
}

/* Whether estimates at steps h, h/3 and h/9 show the truncation error
 * shrinking as it should (the first difference 3^order times the second,
 * within a factor of 3 either way, the same sign): then the last is the
 * nearest to the derivative. Where rounding rules, they wander instead,
 * and the step's own estimate stands. */
static int truncation_bound(const double d[GC_STEPS])
{
    const double a = d[1] - d[0], b = d[2] - d[1], r = GC_SHRINK;
    return a * b > 0 && fabs(b) <= 3 * fabs(a) / r && fabs(b) >= fabs(a) / (3 * r);
}

/* The check proper, on valid arguments: it records with gradients on. */
static qkv_status run_check(qkv_tape *t, qkv_loss_fn fn, void *ctx, qkv_tensor **params,
                            int nparams, double step, double floor, double tol,
                            qkv_gradcheck_result *res)
{
    step = step > 0 ? step : GC_STEP;
    floor = floor > 0 ? floor : GC_FLOOR;
    tol = tol > 0 ? tol : GC_TOL;
    memset(res, 0, sizeof *res);

    /* two passes: the first leaves the arena full of its values, so that
     * the checked one meets gradient memory that holds garbage until
     * backward clears or claims it, as every training step after the
     * first does */
    qkv_status s = QKV_OK;
    for (int pass = 0; pass < 2 && s == QKV_OK; pass++) {
        for (int p = 0; p < nparams; p++)
            qkv_tensor_zero_grad(params[p]);
        qkv_tape_reset(t);
        qkv_tape_set_grad(t, 1);
        s = qkv_backward(t, fn(t, ctx));
    }
    if (s != QKV_OK)
        return s;

    for (int p = 0; p < nparams; p++) {
        qkv_tensor *x = params[p];
        for (size_t i = 0; i < x->numel; i++) {
            double d[GC_STEPS] = {0}, h = step;
            s = estimate(t, fn, ctx, x, i, h, &d[0]);
            double best = d[0];
            /* an entry the first step fails is measured again at step/3
             * and step/9; the estimate it is judged by is chosen from the
             * three alone, never by which lies nearest its gradient */
            if (s == QKV_OK && rel_err(x->grad[i], d[0], floor) > tol) {
                for (int k = 1; k < GC_STEPS && s == QKV_OK; k++)
                    s = estimate(t, fn, ctx, x, i, h /= 3, &d[k]);
                if (s == QKV_OK && truncation_bound(d))
                    best = d[GC_STEPS - 1];
            }
            if (s != QKV_OK)
                return s;
            qkv_grad_compare(&x->grad[i], &best, 1, floor, tol, res);
        }
    }
    qkv_tape_reset(t);
    return QKV_OK;
}

qkv_status qkv_gradcheck(qkv_tape *t, qkv_loss_fn fn, void *ctx, qkv_tensor **params, int nparams,
                         double step, double floor, double tol, qkv_gradcheck_result *res)
{
    if (t == NULL)
        return QKV_ERR_ARG;
    /* the check records on t from scratch, so its own refusals start from
     * a clean tape too: not masked by an error the caller left on it */
    qkv_tape_reset(t);
    if (fn == NULL || res == NULL || nparams < 0 || (nparams && params == NULL))
        return qkv_tape_fail(t, QKV_ERR_ARG,
                             "gradcheck: needs a loss function, a result and "
                             "a parameter array");
    if (nparams == 0) /* nothing compared would read as a pass */
        return qkv_tape_fail(t, QKV_ERR_ARG, "gradcheck: no parameters to check");
    const double knobs[3] = {step, floor, tol};
    static const char *const knob_names[3] = {"step", "floor", "tolerance"};
    for (int i = 0; i < 3; i++)
        if (!(knobs[i] >= 0) || !isfinite(knobs[i])) {
            char num[32];
            return qkv_tape_fail(t, QKV_ERR_ARG,
                                 "gradcheck: the %s %s is not a finite number >= 0 (0 picks "
                                 "the default)",
                                 knob_names[i], qkv_num_str(num, sizeof num, knobs[i]));
        }
    for (int p = 0; p < nparams; p++) {
        if (qkv_tensor_is_nil(params[p]) || params[p]->grad == NULL)
            return qkv_tape_fail(t, QKV_ERR_ARG,
                                 "gradcheck: parameter %d is nil or has no gradient buffer", p);
        if (params[p]->flags & QKV_TENSOR_TAPE) /* the check's resets take it back */
            return qkv_tape_fail(t, QKV_ERR_ARG,
                                 "gradcheck: parameter %d was made on a tape; make it with "
                                 "qkv_tensor_new(..., 1, ...)",
                                 p);
    }
    /* the caller's setting comes back, as the parameters' values do */
    const int grad_was = qkv_tape_grad_enabled(t);
    qkv_status s = run_check(t, fn, ctx, params, nparams, step, floor, tol, res);
    qkv_tape_set_grad(t, grad_was);
    return s;
}
