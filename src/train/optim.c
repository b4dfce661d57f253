/*
 * optim.c - SGD (momentum), Adam and AdamW, and global-norm clipping.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "qkv/optim.h"
#include "train/internal.h"
#include "util/util.h"

qkv_optim_config qkv_optim_defaults(qkv_optim_kind kind)
{
    qkv_optim_config c = {kind, kind == QKV_SGD ? 0.1 : 0.01, 0, 0.9, 0.999,
                          1e-8, kind == QKV_ADAMW ? 0.01 : 0, 0};
    return c;
}

void qkv_optim_free(qkv_optim *o)
{
    if (o == NULL)
        return;
    for (int i = 0; i < o->n; i++) {
        if (o->m)
            free(o->m[i]);
        if (o->v)
            free(o->v[i]);
        if (o->names)
            free(o->names[i]);
    }
    free(o->names);
    free(o->m);
    free(o->v);
    free(o->decay);
    free(o->lr_scale);
    free(o->params);
    free(o);
}

/* Why cfg cannot drive an optimizer, or NULL if it can. */
static const char *bad_config(const qkv_optim_config *c)
{
    if (c->kind != QKV_SGD && c->kind != QKV_ADAM && c->kind != QKV_ADAMW)
        return "unknown optimizer kind";
    if (!(c->lr >= 0) || !isfinite(c->lr)) /* 0, as in PyTorch and set_lr, is a frozen run */
        return "the learning rate must be a finite number >= 0";
    if (!(c->momentum >= 0 && c->momentum < 1))
        return "momentum must be in [0, 1)";
    if (!(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1))
        return "beta1 and beta2 must be in [0, 1)";
    if (!(c->eps >= 0) || !(c->weight_decay >= 0) || !(c->clip >= 0) || !isfinite(c->eps) ||
        !isfinite(c->weight_decay) || !isfinite(c->clip))
        return "eps, weight decay and clip must be finite and >= 0";
    if (c->kind != QKV_SGD && c->eps == 0) /* 0/0 where no gradient has come yet */
        return "Adam's eps must be above 0";
    return NULL;
}

qkv_optim *qkv_optim_new(const qkv_optim_config *cfg, qkv_tensor **params, int n, qkv_error *err)
{
    const char *why = cfg == NULL ? "no config" : bad_config(cfg);
    if (why != NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "optim: %s", why);
        return NULL;
    }
    if (n < 1) { /* it would step nothing; PyTorch refuses an empty list too */
        qkv_error_set(err, QKV_ERR_ARG, "optim: %d parameters: an optimizer needs at least 1", n);
        return NULL;
    }
    if (params == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "optim: no parameter array (NULL)");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (qkv_tensor_is_nil(params[i]) || params[i]->grad == NULL) {
            qkv_error_set(err, QKV_ERR_ARG,
                          "optim: parameter %d %s (make it with qkv_tensor_new(..., 1, ...))", i,
                          qkv_tensor_is_nil(params[i]) ? "is nil" : "has no gradient buffer");
            return NULL;
        } else if (params[i]->flags & QKV_TENSOR_TAPE) { /* a reset takes it back */
            qkv_error_set(err, QKV_ERR_ARG,
                          "optim: parameter %d was made on a tape, which takes it back at its "
                          "next reset (make it with qkv_tensor_new(..., 1, ...))",
                          i);
            return NULL;
        }
    for (int i = 1; i < n; i++) /* one listed twice would take two updates a step */
        for (int j = 0; j < i; j++)
            if (params[i]->data == params[j]->data) {
                qkv_error_set(err, QKV_ERR_ARG,
                              "optim: parameter %d is parameter %d again (or a view of it)", i, j);
                return NULL;
            }
    qkv_optim *o = qkv_calloc(1, sizeof *o);
    if (o == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "optim: out of memory");
        return NULL;
    }
    o->cfg = *cfg;
    o->params = qkv_malloc(sizeof *o->params * (size_t)n);
    o->m = qkv_calloc((size_t)n, sizeof *o->m);
    o->v = qkv_calloc((size_t)n, sizeof *o->v);
    o->decay = qkv_malloc((size_t)n);
    o->lr_scale = qkv_malloc(sizeof *o->lr_scale * (size_t)n);
    o->names = qkv_calloc((size_t)n, sizeof *o->names);
    o->n = n;
    int ok = o->params && o->m && o->v && o->decay && o->lr_scale && o->names;
    if (ok)
        memset(o->decay, 1, (size_t)n);
    for (int i = 0; ok && i < n; i++)
        o->lr_scale[i] = 1;
    for (int i = 0; ok && i < n; i++) {
        o->params[i] = params[i];
        o->m[i] = qkv_calloc(params[i]->numel, sizeof(double));
        o->v[i] = cfg->kind == QKV_SGD ? NULL : qkv_calloc(params[i]->numel, sizeof(double));
        ok = o->m[i] && (o->v[i] || cfg->kind == QKV_SGD);
    }
    if (!ok) {
        qkv_optim_free(o);
        qkv_error_set(err, QKV_ERR_NOMEM, "optim: out of memory for the optimizer state");
        return NULL;
    }
    return o;
}

void qkv_optim_zero_grad(qkv_optim *o)
{
    for (int i = 0; o != NULL && i < o->n; i++)
        qkv_tensor_zero_grad(o->params[i]);
}

double qkv_grad_norm(qkv_tensor *const *params, int n)
{
    double s = 0;
    for (int i = 0; params != NULL && i < n; i++)
        if (!qkv_tensor_is_nil(params[i]) && params[i]->grad != NULL)
            for (size_t j = 0; j < params[i]->numel; j++)
                s += (double)params[i]->grad[j] * params[i]->grad[j];
    return sqrt(s);
}

/* Scales all gradients by max_norm / norm when norm (their global norm)
 * exceeds max_norm > 0. */
static void clip_to(qkv_tensor *const *params, int n, double norm, double max_norm)
{
    if (!(max_norm > 0 && norm > max_norm))
        return;
    double k = max_norm / norm;
    for (int i = 0; i < n; i++)
        if (!qkv_tensor_is_nil(params[i]) && params[i]->grad != NULL)
            for (size_t j = 0; j < params[i]->numel; j++)
                params[i]->grad[j] = (qkv_real)(params[i]->grad[j] * k);
}

double qkv_clip_grad_norm(qkv_tensor *const *params, int n, double max_norm)
{
    double norm = qkv_grad_norm(params, n);
    if (params != NULL)
        clip_to(params, n, norm, max_norm);
    return norm;
}

double qkv_optim_last_norm(const qkv_optim *o)
{
    return o != NULL ? o->last_norm : 0;
}

/* The updates of parameter i: nonzero if a weight they leave is not
 * finite (or, for Adam, a second moment), seen as it is written. An SGD
 * velocity that is not finite leaves a weight that is not either. */
static int sgd_update(qkv_optim *o, int i)
{
    const qkv_optim_config *c = &o->cfg;
    qkv_tensor *p = o->params[i];
    double *vel = o->m[i];
    const double wd = o->decay[i] ? c->weight_decay : 0, lr = c->lr * o->lr_scale[i];
    int bad = 0;
    for (size_t j = 0; j < p->numel; j++) {
        double g = p->grad[j] + wd * p->data[j];
        vel[j] = c->momentum * vel[j] + g;
        const qkv_real next = (qkv_real)(p->data[j] - lr * vel[j]);
        p->data[j] = next;
        bad |= !isfinite(next);
    }
    return bad;
}

static int adam_update(qkv_optim *o, int i)
{
    const qkv_optim_config *c = &o->cfg;
    qkv_tensor *p = o->params[i];
    const double wd = o->decay[i] ? c->weight_decay : 0, lr = c->lr * o->lr_scale[i];
    /* p -= lr·m̂/(sqrt(v̂) + eps) with m̂ = m/bc1, v̂ = v/bc2, rearranged to
     * one division: lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps) */
    const qkv_adam_coef k = {
        c->beta1,
        c->beta2,
        lr / (1 - pow(c->beta1, (double)o->t)),
        1 / sqrt(1 - pow(c->beta2, (double)o->t)),
        c->eps,
        c->kind == QKV_ADAMW ? 0 : wd,
        c->kind == QKV_ADAMW ? 1 - lr * wd : 1,
    };
    return qkv_adam_update(p->data, p->grad, o->m[i], o->v[i], p->numel, &k);
}

/* Parameter i as a message names it: its name, or "parameter i" in buf. */
static const char *param_label(const qkv_optim *o, int i, char *buf, size_t size)
{
    if (o->names[i] != NULL)
        return o->names[i];
    snprintf(buf, size, "parameter %d", i);
    return buf;
}

/* Says in o->message why the global norm is not finite: the first gradient
 * that is not, or, when every one is (the double build's gradients of
 * 1e154 and more), the parameter at which the sum of squares overflows. */
static void say_not_finite(qkv_optim *o)
{
    char buf[32], num[32];
    for (int i = 0; i < o->n; i++) {
        const qkv_tensor *p = o->params[i];
        for (size_t j = 0; j < p->numel; j++)
            if (!isfinite(p->grad[j])) {
                snprintf(o->message, sizeof o->message,
                         "optim: the gradient of %s is not finite: grad[%zu] = %s; no "
                         "parameter was changed",
                         param_label(o, i, buf, sizeof buf), j,
                         qkv_num_str(num, sizeof num, (double)p->grad[j]));
                return;
            }
    }
    double sq = 0; /* as qkv_optim_step sums */
    for (int i = 0; i < o->n; i++) {
        const qkv_tensor *p = o->params[i];
        sq += qkv_sum_squares(p->grad, p->numel);
        if (isfinite(sq))
            continue;
        double big = 0;
        for (size_t j = 0; j < p->numel; j++)
            big = fmax(big, fabs((double)p->grad[j]));
        snprintf(o->message, sizeof o->message,
                 "optim: every gradient is finite, but the sum of their squares overflows at "
                 "%s, whose largest |gradient| is %g; no parameter was changed",
                 param_label(o, i, buf, sizeof buf), big);
        return;
    }
    snprintf(o->message, sizeof o->message,
             "optim: the global gradient norm is not finite; no parameter was changed");
}

/* Says in o->message that the update of parameter i is not finite: its
 * first weight that is not, or else its first second moment. */
static void say_update_not_finite(qkv_optim *o, int i)
{
    char buf[32], num[32];
    const qkv_tensor *p = o->params[i];
    const char *what = "data";
    size_t j = 0;
    double x = 0;
    while (j < p->numel && isfinite(p->data[j]))
        j++;
    if (j < p->numel) {
        x = p->data[j];
    } else if (o->v[i] != NULL) {
        what = "Adam's second moment v";
        for (j = 0; j < p->numel && isfinite(o->v[i][j]);)
            j++;
        x = j < p->numel ? o->v[i][j] : 0;
    }
    if (j < p->numel)
        snprintf(o->message, sizeof o->message,
                 "optim: the update of %s is not finite: %s[%zu] = %s, from finite gradients; "
                 "every parameter was updated",
                 param_label(o, i, buf, sizeof buf), what, j, qkv_num_str(num, sizeof num, x));
    else
        snprintf(o->message, sizeof o->message,
                 "optim: the update of %s is not finite, from finite gradients; every "
                 "parameter was updated",
                 param_label(o, i, buf, sizeof buf));
}

qkv_status qkv_optim_step(qkv_optim *o)
{
    if (o == NULL)
        return QKV_ERR_ARG;
    o->message[0] = '\0';
    double sq = 0; /* NaN or Inf if any gradient is */
    for (int i = 0; i < o->n; i++)
        sq += qkv_sum_squares(o->params[i]->grad, o->params[i]->numel);
    double norm = sqrt(sq);
    if (!isfinite(norm)) {
        say_not_finite(o);
        return QKV_ERR_NUMERIC;
    }
    o->last_norm = norm;
    clip_to(o->params, o->n, norm, o->cfg.clip);
    o->t++;
    int bad = -1; /* the first parameter whose update is not finite */
    for (int i = 0; i < o->n; i++) {
        const int b = o->cfg.kind == QKV_SGD ? sgd_update(o, i) : adam_update(o, i);
        if (b && bad < 0)
            bad = i;
    }
    if (bad >= 0) { /* seen as it was written: the step is taken whole */
        say_update_not_finite(o, bad);
        return QKV_ERR_NUMERIC;
    }
    return QKV_OK;
}

int qkv_optim_parse(const char *name, qkv_optim_kind *kind)
{
    static const char *names[] = {"sgd", "adam", "adamw"};
    for (int i = 0; name != NULL && kind != NULL && i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            *kind = (qkv_optim_kind)i;
            return 0;
        }
    return -1;
}

const char *qkv_optim_name(qkv_optim_kind kind)
{
    return kind == QKV_SGD     ? "sgd"
           : kind == QKV_ADAM  ? "adam"
           : kind == QKV_ADAMW ? "adamw"
                               : "unknown";
}

const char *qkv_optim_error(const qkv_optim *o)
{
    return o != NULL ? o->message : "optim: no optimizer (NULL)";
}

qkv_status qkv_optim_set_name(qkv_optim *o, int i, const char *name)
{
    if (o == NULL || i < 0 || i >= o->n)
        return QKV_ERR_ARG;
    char *copy = NULL;
    if (name != NULL) {
        size_t len = strlen(name) + 1;
        if ((copy = qkv_malloc(len)) == NULL)
            return QKV_ERR_NOMEM;
        memcpy(copy, name, len);
    }
    free(o->names[i]);
    o->names[i] = copy;
    return QKV_OK;
}

double qkv_optim_lr(const qkv_optim *o)
{
    return o != NULL ? o->cfg.lr : 0;
}

qkv_status qkv_optim_set_lr(qkv_optim *o, double lr)
{
    if (o == NULL || !(lr >= 0) || !isfinite(lr))
        return QKV_ERR_ARG;
    o->cfg.lr = lr;
    return QKV_OK;
}

qkv_status qkv_optim_set_lr_scale(qkv_optim *o, int i, double scale)
{
    if (o == NULL || i < 0 || i >= o->n || !(scale >= 0) || !isfinite(scale))
        return QKV_ERR_ARG;
    o->lr_scale[i] = scale;
    return QKV_OK;
}

qkv_status qkv_optim_set_decay(qkv_optim *o, int i, int on)
{
    if (o == NULL || i < 0 || i >= o->n)
        return QKV_ERR_ARG;
    o->decay[i] = on != 0;
    return QKV_OK;
}

long qkv_optim_steps(const qkv_optim *o)
{
    return o != NULL ? o->t : 0;
}

const double *qkv_optim_state(const qkv_optim *o, int i, int which, size_t *n)
{
    if (o == NULL || i < 0 || i >= o->n || (which != 0 && which != 1))
        return NULL;
    if (n != NULL)
        *n = o->params[i]->numel;
    return which == 0 ? o->m[i] : o->v[i];
}

double qkv_lr_warmup_cosine(long step, long warmup, long total, double lr_max, double lr_min)
{
    const double pi = 3.14159265358979323846;
    if (step < 0) /* before the first step: the first step's rate, never below 0 */
        step = 0;
    if (warmup < 0) /* none */
        warmup = 0;
    if (step >= total) /* lr_min from total on, even inside a warm-up longer than the run */
        return lr_min;
    if (step < warmup) /* linear from lr_max/warmup at step 0 up to lr_max */
        return lr_max * (double)(step + 1) / (double)warmup;
    /* warmup <= step < total here, so total - warmup > 0 */
    double progress = (double)(step - warmup) / (double)(total - warmup);
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + cos(pi * progress));
}
