/*
 * params.c - the parameter list, the initialisers, and an optimizer over a
 * list.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/internal.h"
#include "qkv/params.h"
#include "util/util.h"

/* The scalar type's name, for messages about values it cannot hold. */
#define REAL_NAME (sizeof(qkv_real) == sizeof(float) ? "float32" : "double")

#define NAME_MAX_BYTES 127

typedef struct param {
    char name[NAME_MAX_BYTES + 1];
    qkv_tensor *t;
    int decay;
} param;

struct qkv_params {
    param *items;         /* (cap) */
    qkv_tensor **tensors; /* (cap) the same tensors, for the optimizer */
    int n, cap;
    qkv_rng rng;
};

qkv_params *qkv_params_new_abi(unsigned abi, uint64_t seed, qkv_error *err)
{
    if (!qkv_abi_ok(abi, err))
        return NULL;
    qkv_params *p = qkv_calloc(1, sizeof *p);
    if (p == NULL) {
        qkv_error_set(err, QKV_ERR_NOMEM, "params: out of memory");
        return NULL;
    }
    qkv_rng_seed(&p->rng, seed);
    return p;
}

/* Frees a tensor of the list. The list keeps QKV_TENSOR_HEAP off its
 * tensors, so that qkv_tensor_free from a caller who forgot that the list
 * owns them is ignored instead of freeing them under it. */
static void owned_free(qkv_tensor *t)
{
    t->flags |= QKV_TENSOR_HEAP;
    qkv_tensor_free(t);
}

void qkv_params_free(qkv_params *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->n; i++)
        owned_free(p->items[i].t);
    free(p->items);
    free(p->tensors);
    free(p);
}

/* fan_in and fan_out of a tensor's shape (see params.h). */
static void fans(const qkv_tensor *t, double *in, double *out)
{
    if (t->ndim < 2) {
        *in = *out = (double)t->numel;
        return;
    }
    *out = t->shape[t->ndim - 1];
    *in = (double)t->numel / *out;
}

qkv_status qkv_init_tensor(qkv_tensor *t, qkv_init init, qkv_rng *g, qkv_error *err)
{
    if (qkv_tensor_is_nil(t) || g == NULL)
        return qkv_error_set(err, QKV_ERR_ARG, "init: no tensor or no generator");
    double fan_in, fan_out, lo = 0, hi = 0, mean = 0, std = -1;
    fans(t, &fan_in, &fan_out);
    const double gain =
        init.a != 0                                                                     ? init.a
        : init.kind == QKV_INIT_KAIMING_NORMAL || init.kind == QKV_INIT_KAIMING_UNIFORM ? sqrt(2.0)
                                                                                        : 1;
    switch (init.kind) {
    case QKV_INIT_ZEROS:
    case QKV_INIT_ONES:
    case QKV_INIT_CONST: {
        const double v = init.kind == QKV_INIT_ZEROS ? 0 : init.kind == QKV_INIT_ONES ? 1 : init.a;
        char num[32];
        if (!isfinite((qkv_real)v)) /* 1e300 is finite, but not as a float */
            return qkv_error_set(err, QKV_ERR_ARG, "init: the constant %s is not finite as %s",
                                 qkv_num_str(num, sizeof num, v), REAL_NAME);
        for (size_t i = 0; i < t->numel; i++)
            t->data[i] = (qkv_real)v;
        return QKV_OK;
    }
    case QKV_INIT_NORMAL: mean = init.a, std = init.b; break;
    case QKV_INIT_UNIFORM: lo = init.a, hi = init.b; break;
    case QKV_INIT_XAVIER_NORMAL: std = gain * sqrt(2 / (fan_in + fan_out)); break;
    case QKV_INIT_XAVIER_UNIFORM: hi = gain * sqrt(6 / (fan_in + fan_out)), lo = -hi; break;
    case QKV_INIT_KAIMING_NORMAL: std = gain / sqrt(fan_in); break;
    case QKV_INIT_KAIMING_UNIFORM: hi = gain * sqrt(3 / fan_in), lo = -hi; break;
    default: return qkv_error_set(err, QKV_ERR_ARG, "init: unknown kind %d", (int)init.kind);
    }
    const int normal = init.kind == QKV_INIT_NORMAL || init.kind == QKV_INIT_XAVIER_NORMAL ||
                       init.kind == QKV_INIT_KAIMING_NORMAL;
    char n0[32], n1[32]; /* the numbers refused, in words for NaN and infinities */
    if (normal && (!(std >= 0) || !isfinite(std) || !isfinite(mean)))
        return qkv_error_set(err, QKV_ERR_ARG,
                             "init: the mean %s and the standard deviation %s must be finite, "
                             "and the standard deviation >= 0",
                             qkv_num_str(n0, sizeof n0, mean), qkv_num_str(n1, sizeof n1, std));
    if (!normal && (!(lo < hi) || !isfinite(lo) || !isfinite(hi)))
        return qkv_error_set(err, QKV_ERR_ARG,
                             "init: the uniform range [%s, %s) must be finite and not empty",
                             qkv_num_str(n0, sizeof n0, lo), qkv_num_str(n1, sizeof n1, hi));
    for (size_t i = 0; i < t->numel; i++) {
        const double v =
            normal ? qkv_rng_normalvariate(g, mean, std) : lo + (hi - lo) * qkv_rng_random(g);
        t->data[i] = (qkv_real)v;
        char num[32];
        if (!isfinite(t->data[i])) /* a range or a spread too wide for qkv_real */
            return qkv_error_set(err, QKV_ERR_ARG,
                                 "init: value %zu (%s) is not finite as %s: the %s is too wide", i,
                                 qkv_num_str(num, sizeof num, v), REAL_NAME,
                                 normal ? "standard deviation" : "uniform range");
    }
    return QKV_OK;
}

/* Room for one more parameter. */
static int grow(qkv_params *p)
{
    if (p->n < p->cap)
        return 1;
    int cap = p->cap ? 2 * p->cap : 16;
    param *items = qkv_realloc(p->items, sizeof *items * (size_t)cap);
    if (items == NULL)
        return 0;
    p->items = items;
    qkv_tensor **ts = qkv_realloc(p->tensors, sizeof *ts * (size_t)cap);
    if (ts == NULL)
        return 0;
    p->tensors = ts;
    p->cap = cap;
    return 1;
}

qkv_tensor *qkv_params_add(qkv_params *p, const char *name, int ndim, const int *shape,
                           qkv_init init, qkv_error *err)
{
    if (p == NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "params: no parameter list (NULL)");
        return qkv_nil();
    }
    if (name == NULL) {
        qkv_error_set(err, QKV_ERR_ARG,
                      "params: no name (NULL); a name must be 1 to %d bytes of UTF-8",
                      NAME_MAX_BYTES);
        return qkv_nil();
    }
    size_t len = strlen(name), bad = 0;
    if (len == 0 || len > NAME_MAX_BYTES || !qkv_utf8_valid(name, len, &bad)) {
        char why[48]; /* what is wrong with this one */
        if (len == 0)
            snprintf(why, sizeof why, "empty");
        else if (len > NAME_MAX_BYTES)
            snprintf(why, sizeof why, "%zu bytes", len);
        else
            snprintf(why, sizeof why, "not UTF-8 at byte %zu", bad);
        qkv_error_set(err, QKV_ERR_ARG,
                      "params: a name must be 1 to %d bytes of UTF-8; this one is %s",
                      NAME_MAX_BYTES, why);
        return qkv_nil();
    }
    if (strcmp(name, "__metadata__") == 0) { /* safetensors could not save it */
        qkv_error_set(err, QKV_ERR_ARG,
                      "params: '__metadata__' is the key safetensors keeps for metadata, "
                      "not a parameter name");
        return qkv_nil();
    }
    if (qkv_params_get(p, name) != NULL) {
        qkv_error_set(err, QKV_ERR_ARG, "params: '%s' is already in the list", name);
        return qkv_nil();
    }
    if (!grow(p)) {
        qkv_error_set(err, QKV_ERR_NOMEM, "params: out of memory adding '%s'", name);
        return qkv_nil();
    }
    qkv_tensor *t = qkv_tensor_new(ndim, shape, 1, err);
    if (qkv_tensor_is_nil(t))
        return t;
    if (qkv_init_tensor(t, init, &p->rng, err) != QKV_OK) {
        qkv_tensor_free(t);
        return qkv_nil();
    }
    t->flags &= ~QKV_TENSOR_HEAP; /* the list's: see owned_free */
    param *it = &p->items[p->n];
    memcpy(it->name, name, len + 1);
    it->t = t;
    it->decay = ndim >= 2;
    p->tensors[p->n++] = t;
    return t;
}

qkv_params_mark qkv_params_mark_get(const qkv_params *p)
{
    qkv_params_mark m;
    memset(&m, 0, sizeof m);
    if (p != NULL) {
        m.n = p->n;
        m.rng = p->rng;
    }
    return m;
}

void qkv_params_undo(qkv_params *p, const qkv_params_mark *m)
{
    if (p == NULL || m->n > p->n)
        return;
    while (p->n > m->n)
        owned_free(p->items[--p->n].t);
    p->rng = m->rng;
}

qkv_tensor *qkv_params_get(const qkv_params *p, const char *name)
{
    for (int i = 0; p != NULL && name != NULL && i < p->n; i++)
        if (strcmp(p->items[i].name, name) == 0)
            return p->items[i].t;
    return NULL;
}

int qkv_params_count(const qkv_params *p)
{
    return p != NULL ? p->n : 0;
}

size_t qkv_params_numel(const qkv_params *p)
{
    size_t n = 0;
    for (int i = 0; p != NULL && i < p->n; i++)
        n += p->items[i].t->numel;
    return n;
}

qkv_tensor *qkv_params_at(const qkv_params *p, int i, const char **name)
{
    if (p == NULL || i < 0 || i >= p->n)
        return NULL;
    if (name != NULL)
        *name = p->items[i].name;
    return p->items[i].t;
}

qkv_tensor **qkv_params_tensors(qkv_params *p)
{
    return p != NULL ? p->tensors : NULL;
}

int qkv_params_decay(const qkv_params *p, int i)
{
    return p != NULL && i >= 0 && i < p->n && p->items[i].decay;
}

qkv_status qkv_params_set_decay(qkv_params *p, int i, int on)
{
    if (p == NULL || i < 0 || i >= p->n)
        return QKV_ERR_ARG;
    p->items[i].decay = on != 0;
    return QKV_OK;
}

void qkv_params_zero_grad(qkv_params *p)
{
    for (int i = 0; p != NULL && i < p->n; i++)
        qkv_tensor_zero_grad(p->items[i].t);
}

qkv_rng *qkv_params_rng(qkv_params *p)
{
    return p != NULL ? &p->rng : NULL;
}

qkv_optim *qkv_params_optim(qkv_params *p, const qkv_optim_config *cfg, qkv_error *err)
{
    if (p == NULL || p->n == 0) {
        qkv_error_set(err, QKV_ERR_ARG,
                      p == NULL ? "params: no parameter list (NULL)"
                                : "params: the list is empty: an optimizer needs at least 1 "
                                  "parameter");
        return NULL;
    }
    qkv_optim *o = qkv_optim_new(cfg, p->tensors, p->n, err);
    for (int i = 0; o != NULL && i < p->n; i++) {
        qkv_optim_set_decay(o, i, p->items[i].decay);
        if (qkv_optim_set_name(o, i, p->items[i].name) != QKV_OK) {
            qkv_optim_free(o);
            qkv_error_set(err, QKV_ERR_NOMEM, "params: out of memory for the optimizer's names");
            return NULL;
        }
    }
    return o;
}
